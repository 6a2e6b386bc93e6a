"""Value numbering in the LLVM code generator (``codegen._NumberingBuilder`` and the expression
table of ``_FunctionBuilder.expr``): shared subexpressions emitted once, never reused where they
would be wrong (a buffer stored to since, another loop iteration, a value that does not
dominate), and guarded stores in unrolled code computed before their branch. Each kernel is
checked against numpy and the loop IR's evaluator, with numbering on and off."""

import numpy as np
import pytest

pytest.importorskip("llvmlite.ir", reason="the LLVM backend needs llvmlite (the `llvm` extra)")

from relaybench import te  # noqa: E402
from relaybench.backends.llvm import codegen  # noqa: E402
from relaybench.backends.llvm.codegen import KernelPlan, build_kernel  # noqa: E402
from relaybench.te import loop_ir as L  # noqa: E402

RNG = np.random.default_rng(11)


@pytest.fixture(params=[True, False], ids=["numbered", "plain"])
def numbering(request, monkeypatch):
    monkeypatch.setattr(codegen, "NUMBERING", request.param)
    return request.param


def run(func, *arrays):
    kernel = build_kernel(func, cache=False)
    compiled = [a.copy() for a in arrays]
    reference = [a.copy() for a in arrays]
    kernel(*compiled)
    te.evaluate(func, *reference)
    return compiled, reference


def ir_lines(func) -> int:
    return str(KernelPlan(func).generate()).count("\n")


def _tile_sums():
    """out[t, e] = sum over a row of a 4-wide tile, for every e: the same loads and the same
    index arithmetic in each of the unrolled stores."""
    A = L.Buffer("A", (8, 4), "float32")
    out = L.Buffer("out", (8, 4), "float32")
    t, e = L.Var("t"), L.Var("e")
    loads = [L.Load(A, (t, j)) for j in range(4)]   # one node per element, shared below
    total = loads[0] + loads[1] + loads[2] + loads[3]
    value = L.select(L.equal(e, 0), total, total * L.const(float(2)) + loads[0])
    body = L.For(t, L.const(0), L.const(8), "serial",
                 L.For(e, L.const(0), L.const(4), "unrolled", L.Store(out, (t, e), value)))
    return L.PrimFunc("tile_sums", (A, out), body)


def test_shared_subexpressions_are_emitted_once(numbering):
    func = _tile_sums()
    a = RNG.standard_normal((8, 4)).astype("float32")
    got, ref = run(func, a, np.zeros((8, 4), "float32"))
    total = a.sum(axis=1, dtype=np.float32)
    np.testing.assert_allclose(got[1][:, 0], total, rtol=1e-6)
    np.testing.assert_allclose(got[1][:, 1:], (total * 2 + a[:, 0])[:, None].repeat(3, 1),
                               rtol=1e-5)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-6)


def test_numbering_makes_less_ir():
    func = _tile_sums()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(codegen, "NUMBERING", False)
        plain = ir_lines(func)
    assert ir_lines(func) < plain * 0.6


def test_load_after_store_reads_again(numbering):
    """B[0] read, stored, then read again in unrolled code: the second read sees the store."""
    B = L.Buffer("B", (4,), "float32")
    k = L.Var("k")
    value = L.Load(B, (L.const(0),)) + L.const(1.0)   # the same node in every iteration
    body = L.For(k, L.const(0), L.const(4), "unrolled", L.Store(B, (L.const(0),), value))
    func = L.PrimFunc("bump", (B,), body)
    got, ref = run(func, np.zeros(4, "float32"))
    assert got[0][0] == 4.0 and ref[0][0] == 4.0


def test_loop_carried_accumulation(numbering):
    """A load before a serial loop is not reused inside it, where earlier iterations stored."""
    A = L.Buffer("A", (6,), "float32")
    S = L.Buffer("S", (2,), "float32")
    k = L.Var("k")
    first = L.Store(S, (L.const(1),), L.Load(S, (L.const(0),)))      # S[0] read before the loop
    loop = L.For(k, L.const(0), L.const(6), "serial",
                 L.Store(S, (L.const(0),), L.Load(S, (L.const(0),)) + L.Load(A, (k,))))
    last = L.Store(S, (L.const(1),), L.Load(S, (L.const(1),)) + L.Load(S, (L.const(0),)))
    func = L.PrimFunc("acc", (A, S), L.seq(first, loop, last))
    a = np.arange(6, dtype="float32")
    got, ref = run(func, a, np.array([1.0, 0.0], "float32"))
    np.testing.assert_array_equal(got[1], [16.0, 17.0])
    np.testing.assert_array_equal(got[1], ref[1])


def test_signed_zero_constants_are_distinct(numbering):
    A = L.Buffer("A", (2,), "float32")
    out = L.Buffer("out", (2,), "float32")
    x = L.Load(A, (L.const(0),))
    body = L.seq(L.Store(out, (L.const(0),), x * L.const(0.0)),
                 L.Store(out, (L.const(1),), x * L.const(-0.0)))
    func = L.PrimFunc("zeros", (A, out), body)
    got, _ = run(func, np.ones(2, "float32"), np.full(2, 7.0, "float32"))
    assert not np.signbit(got[1][0]) and np.signbit(got[1][1])


def test_values_inside_a_branch_are_not_used_after_it(numbering):
    """The same expression inside an ``if`` and after it: the second copy is emitted again
    (the first does not dominate it); LLVM's verifier rejects the module otherwise."""
    A = L.Buffer("A", (4,), "float32")
    out = L.Buffer("out", (4,), "float32")
    i = L.Var("i")
    value = L.Load(A, (i,)) * L.const(3.0)
    body = L.For(i, L.const(0), L.const(4), "serial", L.seq(
        L.IfThenElse(L.Binary("<", i, L.const(2), "bool"), L.Store(out, (i,), value)),
        L.Store(out, (L.const(3) - i,), L.Load(out, (L.const(3) - i,)) + value)))
    func = L.PrimFunc("branchy", (A, out), body)
    a = np.arange(1, 5, dtype="float32")
    got, ref = run(func, a, np.zeros(4, "float32"))
    np.testing.assert_array_equal(got[1], ref[1])


@pytest.mark.parametrize("n,spare", [(5, 0), (7, 0), (5, 4), (7, 4)])
def test_guarded_stores_in_unrolled_tiles(numbering, monkeypatch, n, spare):
    """Tiles of 4 over ``n`` outputs (a partial last tile): each unrolled output guarded by
    ``if``. With ``spare`` elements after the input every read of the last tile is provably in
    bounds and the guarded values are computed before their branches (sharing their loads);
    without, the reads past the end stay inside the branches."""
    hoisted = []
    hoistable = codegen._FunctionBuilder._hoistable
    monkeypatch.setattr(codegen._FunctionBuilder, "_hoistable",
                        lambda self, s: hoisted.append(hoistable(self, s)) or hoisted[-1])
    A = te.placeholder((n + 3 + spare,), name="A")
    Y = te.compute((n,), lambda i: A[i] + A[i + 1] * 2.0 + A[i + 2] * 3.0 + A[i + 3], name="Y")
    s = te.create_schedule([Y])
    yo, yi = s[Y].split(Y.op.axis[0], 4)
    s[Y].unroll(yi)
    func = te.lower(s, [A], name="tiles")
    a = RNG.standard_normal(n + 3 + spare).astype("float32")
    got, ref = run(func, a, np.zeros(n, "float32"))
    want = a[:n] + a[1:n + 1] * 2 + a[2:n + 2] * 3 + a[3:n + 3]
    np.testing.assert_allclose(got[1], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-6, atol=1e-6)
    if numbering:
        assert hoisted and all(hoisted) == (spare > 0)


def _unit_axes(width=4):
    """out[0, i, 0, j] = 2 * A[0, i, 0, j] + A[0, i, 0, width - 1 - j], the tile's column j
    unrolled: offsets through axes of one element and constant positions."""
    A = L.Buffer("A", (1, 5, 1, width), "float32")
    out = L.Buffer("out", (1, 5, 1, width), "float32")
    i, j = L.Var("i"), L.Var("j")
    value = L.Load(A, (0, i, 0, j)) * L.const(2.0) + L.Load(A, (0, i, 0, width - 1 - j))
    body = L.For(i, L.const(0), L.const(5), "serial",
                 L.For(j, L.const(0), L.const(width), "unrolled",
                       L.Store(out, (0, i, 0, j), value)))
    return L.PrimFunc(f"unit_axes_{width}", (A, out), body)


def test_constant_links_of_an_offset_need_no_instruction(numbering):
    """An offset's ``* extent + index`` links with a constant that decides them (the zero of an
    axis of one, an unrolled position) are folded while the IR is made: no ``x * 1``,
    ``0 * x``, ``x + 0`` nor arithmetic on two constants is left for LLVM."""
    import re
    func = _unit_axes()
    a = RNG.standard_normal((1, 5, 1, 4)).astype("float32")
    got, ref = run(func, a, np.zeros((1, 5, 1, 4), "float32"))
    np.testing.assert_allclose(got[1], 2 * a + a[..., ::-1], rtol=1e-6)
    np.testing.assert_array_equal(got[1], ref[1])
    text = str(KernelPlan(func).generate())
    trivial = re.compile(r"= (add|sub|mul) i64 (0|1), |= (add|sub) i64 [^,\n]+, 0\n|"
                         r"= mul i64 [^,\n]+, [01]\n|= (add|sub|mul) i64 -?\d+, -?\d+\n")
    assert not trivial.search(text), trivial.search(text).group(0)
    if numbering:
        # the unrolled accesses differ in constants only: one chain of multiplications for
        # all, however wide the tile
        wide = str(KernelPlan(_unit_axes(8)).generate())
        assert wide.count("= mul i64") == text.count("= mul i64") <= 2


def test_a_nonnegative_dividend_divides_unsigned(numbering):
    """Floor division and modulo of a loop variable's index arithmetic by a positive constant
    are unsigned (no correction of the truncated result); a dividend that may be negative keeps
    floor semantics (numpy's ``//`` and ``%``)."""
    out = L.Buffer("out", (12, 4), "int64")
    i = L.Var("i")
    shifted = i - L.const(7)
    values = (i // L.const(5), i % L.const(5), shifted // L.const(3), shifted % L.const(3))
    body = L.For(i, L.const(0), L.const(12), "serial",
                 L.seq(*[L.Store(out, (i, k), v) for k, v in enumerate(values)]))
    func = L.PrimFunc("divisions", (out,), body)
    got, ref = run(func, np.zeros((12, 4), "int64"))
    n = np.arange(12)
    want = np.stack([n // 5, n % 5, (n - 7) // 3, (n - 7) % 3], axis=1)
    np.testing.assert_array_equal(got[0], want)
    np.testing.assert_array_equal(got[0], ref[0])
    text = str(KernelPlan(func).generate())
    assert "udiv" in text and "urem" in text          # i // 5, i % 5
    assert "sdiv" in text and "srem" in text          # (i - 7) // 3, (i - 7) % 3
