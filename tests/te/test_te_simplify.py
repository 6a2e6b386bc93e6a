"""The index simplifier: every rewrite keeps the value of the expression at every point of the
variables' ranges (checked exhaustively with a small evaluator written here), and the rewrites
that matter for blocked layouts happen."""

import itertools
import operator

import numpy as np
import pytest

from relaybench import te
from relaybench.te import loop_ir as L
from relaybench.te.simplify import bounds, simplify, simplify_func

_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
        "%": operator.mod, "min": min, "max": max, "<": operator.lt, "<=": operator.le,
        ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne,
        "and": lambda a, b: bool(a) and bool(b), "or": lambda a, b: bool(a) or bool(b)}


def _value(e, env):
    if isinstance(e, L.IntImm):
        return e.value
    if isinstance(e, L.Var):
        return env[e]
    if isinstance(e, L.Binary):
        return _OPS[e.op](_value(e.a, env), _value(e.b, env))
    if isinstance(e, L.Unary) and e.op == "not":
        return not _value(e.a, env)
    if isinstance(e, L.Select):
        return _value(e.true_value if _value(e.cond, env) else e.false_value, env)
    raise TypeError(type(e))


def _same_everywhere(expr, ranges):
    out = simplify(expr, ranges)
    variables = list(ranges)
    for point in itertools.product(*[range(lo, hi + 1) for lo, hi in ranges.values()]):
        env = dict(zip(variables, point))
        assert int(_value(out, env)) == int(_value(expr, env)), (str(expr), str(out), point)
    return out


co, ci, x, y = L.Var("co"), L.Var("ci"), L.Var("x"), L.Var("y")


def test_block_division_and_modulo_become_affine():
    ranges = {co: (0, 3), ci: (0, 15)}
    assert str(_same_everywhere((co * 16 + ci) // 16, ranges)) == "co"
    assert str(_same_everywhere((co * 16 + ci) % 16, ranges)) == "ci"
    assert str(_same_everywhere((co * 32 + ci + 16) // 16, ranges)) == "co * 2 + 1"


def test_offsets_that_cross_a_block_are_left_alone_but_stay_correct():
    ranges = {x: (0, 13), y: (0, 2)}
    out = _same_everywhere((x + y) // 16, ranges)
    assert str(out) == "0"  # x + y <= 15
    out = _same_everywhere((x * 2 + y) // 7, ranges)
    assert "//" in str(out)


def test_guards_decided_by_the_ranges_disappear():
    ranges = {x: (0, 13), y: (0, 2)}
    always = L.logical_and(x + y >= 0, x < 14)
    assert str(_same_everywhere(always, ranges)) == "True"
    sometimes = L.logical_and(x + y - 1 >= 0, x + y - 1 < 14)
    kept = _same_everywhere(sometimes, ranges)
    assert "x + y" in str(kept) and str(kept) != "True"
    assert str(_same_everywhere(L.max_expr(x + 1, 0), ranges)) == "x + 1"
    assert str(_same_everywhere(L.min_expr(x, 13), ranges)) == "x"


def test_a_fused_index_split_into_axes_flattens_back():
    """``(i // 6) * 6 + i % 6`` is ``i`` (floor division and modulo, negative values too), also
    nested, with a factor, and where ``(i // 4) // 6`` was first folded into ``i // 24``."""
    ranges = {x: (-30, 60)}
    assert str(_same_everywhere((x // 6) * 6 + x % 6, ranges)) == "x"
    assert str(_same_everywhere(((x // 6) * 6 + x % 6) * 4 + 3, ranges)) == "x * 4 + 3"
    inner = x // 4
    nchw = (((inner // 6) // 8 * 8 + (inner // 6) % 8) * 6 + inner % 6) * 4 + x % 4
    assert str(_same_everywhere(nchw, ranges)) == "x"
    assert str(_same_everywhere((x // 4) // 6, ranges)) == "x // 24"
    # coefficients that do not pair up are left as they are, and stay correct
    assert "//" in str(_same_everywhere((x // 6) * 5 + x % 6, ranges))
    assert "//" in str(_same_everywhere((x // 6) * 6 + x % 5, ranges))


@pytest.mark.parametrize("seed", range(20))
def test_random_splits_of_a_fused_index_keep_their_values(seed):
    """A random shape, a fused index split into its axes with ``//`` and ``%`` and flattened
    again (some axes scaled, some dropped): the value at every point is kept."""
    rng = np.random.default_rng(seed)
    dims = [int(d) for d in rng.integers(1, 5, int(rng.integers(2, 4)))]
    total = int(np.prod(dims))
    ranges = {x: (-total, 2 * total)}
    flat, stride = None, total
    for d in dims:
        stride //= d
        axis = (x // stride) % d if stride > 1 else x % d
        if rng.random() < 0.8:
            flat = axis if flat is None else flat * d + axis
        else:
            flat = axis * int(rng.integers(1, 4)) if flat is None else flat + axis
    _same_everywhere(flat, ranges)


def test_like_terms_collect():
    ranges = {x: (0, 5), y: (0, 5)}
    assert str(_same_everywhere(x * 3 + y - x * 2 - y + 4 - 4, ranges)) == "x"


@pytest.mark.parametrize("seed", range(30))
def test_random_index_expressions_keep_their_values(seed):
    rng = np.random.default_rng(seed)
    ranges = {x: (0, int(rng.integers(1, 9))), y: (0, int(rng.integers(1, 9)))}
    leaves = [x, y, L.const(int(rng.integers(-3, 9)))]
    expr = leaves[int(rng.integers(0, 2))]
    for _ in range(int(rng.integers(2, 6))):
        op = ["+", "-", "*", "//", "%", "min", "max"][int(rng.integers(0, 7))]
        other = leaves[int(rng.integers(0, 3))]
        if op in ("//", "%"):
            other = L.const(int(rng.integers(1, 9)))
        elif op == "*":
            other = L.const(int(rng.integers(-3, 5)))
        expr = L._binary(op, expr, other)
    _same_everywhere(expr, ranges)


def test_bounds():
    assert bounds(x * 2 - y, {x: (0, 3), y: (1, 2)}) == (-2, 5)
    assert bounds((x * 5) % 4, {x: (0, 9)}) == (0, 3)
    assert bounds(x, {}) is None


def test_simplify_func_keeps_the_kernel_result():
    A = te.placeholder((4, 64), name="A")
    B = te.compute((4, 4, 16), lambda i, j, k: A[i, j * 16 + k] * 2.0, name="B")
    C = te.compute((4, 64), lambda i, j: B[i, j // 16, j % 16] + 1.0, name="C")
    s = te.create_schedule(C)
    jo, ji = s[C].split(C.op.axis[1], 16)
    s[C].vectorize(ji)
    func = te.lower(s, [A], name="blocked")
    simple = simplify_func(func)
    assert "//" in str(func) and "//" not in str(simple)
    a = np.random.default_rng(0).standard_normal((4, 64)).astype("float32")
    c = np.empty_like(a)
    te.evaluate(simple, a, c)
    np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)


def test_unit_loops_are_removed():
    A = te.placeholder((1, 8), name="A")
    B = te.compute((1, 8), lambda i, j: A[i, j] + 1.0, name="B")
    simple = simplify_func(te.lower([B], [A], name="unit"))
    assert "serial(1)" not in str(simple)
    a = np.arange(8, dtype="float32").reshape(1, 8)
    b = np.empty_like(a)
    te.evaluate(simple, a, b)
    np.testing.assert_array_equal(b, a + 1)


@pytest.mark.parametrize("value, dtype, wrapped", [(-3, "uint8", 253), (200, "int8", -56),
                                                   (70000, "int16", 4464)])
def test_constant_cast_to_a_narrow_integer_wraps(value, dtype, wrapped):
    out = simplify(L.Cast(dtype, L.IntImm(value, "int32")), {})
    assert isinstance(out, L.IntImm) and out.value == wrapped == np.array(value).astype(dtype)


def test_comparisons_that_could_wrap_are_not_decided():
    # i + 100 in int8 wraps past 127 for i >= 28: "i + 100 > 0" is not always true there
    i = L.Var("i", "int8")
    cond = L.Binary(">", L.Binary("+", i, L.IntImm(100, "int8"), "int8"), L.IntImm(0, "int8"),
                    "bool")
    out = simplify(cond, {i: (0, 50)})
    assert not isinstance(out, L.IntImm)
    # without wrapping it is decided
    assert simplify(cond, {i: (0, 20)}).value == 1


# ---- loop partitioning (simplify_func(partition=True))

def _padded_copy(n: int, pad: int, kind: str = "serial"):
    """``P[i] = A[i - pad]`` inside, 0 in the padding, as lowering writes it: a guard and a
    clamped index."""
    A, P = L.Buffer("A", (n,), "float32"), L.Buffer("P", (n + 2 * pad,), "float32")
    i = L.Var("i")
    inside = L.logical_and(i - pad >= 0, i - pad < n)
    clamp = L.min_expr(L.max_expr(i - pad, 0), n - 1)
    body = L.Store(P, (i,), L.select(inside, L.Load(A, (clamp,)), 0.0))
    return L.PrimFunc("pad", [A, P], L.For(i, 0, n + 2 * pad, kind, body))


def _run(func, *shapes):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    te.evaluate(func, *arrays)
    return arrays


def test_a_padding_guard_cuts_its_loop_into_edges_and_a_guardless_interior():
    func = _padded_copy(10, 2)
    out = simplify_func(func, partition=True)
    text = str(out)
    assert "for i in serial(2, 12):" in text
    interior = text[text.index("serial(2, 12)"):].splitlines()[1]
    assert interior.strip() == "P[i] = A[i - 2]"
    a, got = _run(out, (10,), (14,))
    np.testing.assert_array_equal(got, np.pad(a, 2))
    # without partition the loop stays whole
    assert "serial(2, 12)" not in str(simplify_func(func))


def test_a_guard_over_an_inner_loop_cuts_where_it_holds_for_every_inner_value():
    """``x * 4 + r - 2`` with ``r`` an inner loop over [0, 4): the guard ``>= 0`` holds for every
    ``r`` from ``x = 1`` on, ``< 28`` for every ``r`` up to ``x = 6``: cuts at 1 and 7."""
    A, O = L.Buffer("A", (28,), "float32"), L.Buffer("O", (8, 4), "float32")
    x, r = L.Var("x"), L.Var("r")
    k = x * 4 + r - 2
    guard = L.logical_and(k >= 0, k < 28)
    value = L.select(guard, L.Load(A, (L.min_expr(L.max_expr(k, 0), 27),)), 0.0)
    body = L.For(r, 0, 4, "unrolled", L.Store(O, (x, r), value))
    func = L.PrimFunc("window", [A, O], L.For(x, 0, 8, "serial", body))
    out = simplify_func(func, partition=True)
    assert "for x in serial(1, 7):" in str(out)
    a, got = _run(out, (28,), (8, 4))
    want = np.pad(a, (2, 2))[np.arange(8)[:, None] * 4 + np.arange(4)]
    np.testing.assert_array_equal(got, want)


def test_a_parallel_loop_branches_on_the_row_its_guards_read():
    """A parallel loop over (block, row) pairs is not cut (its iterations are the threads'):
    its body branches on the row, ``i % 6``, the interior rows reading with no guard."""
    A, O = L.Buffer("A", (2, 6, 3), "float32"), L.Buffer("O", (2, 6, 3), "float32")
    i, c = L.Var("i"), L.Var("c")
    row = i % 6
    prev = row - 1
    guard = prev >= 0
    value = L.select(guard, L.Load(A, (i // 6, L.max_expr(prev, 0), c)), 0.0)
    body = L.For(c, 0, 3, "serial", L.Store(O, (i // 6, row, c), value + L.Load(A, (i // 6, row, c))))
    func = L.PrimFunc("rows", [A, O], L.For(i, 0, 12, "parallel", body))
    out = simplify_func(func, partition=True)
    text = str(out)
    assert "i_in = i % 6" in text and "if i_in >= 1 and i_in <= 5:" in text
    inside = text[text.index("if i_in"):text.index("else:")]
    assert "select(" not in inside and "max(" not in inside
    a, got = _run(out, (2, 6, 3), (2, 6, 3))
    shifted = np.concatenate([np.zeros((2, 1, 3), "float32"), a[:, :-1]], axis=1)
    np.testing.assert_array_equal(got, a + shifted)


def test_the_one_value_outside_a_parallel_loops_interior_is_substituted():
    """Tiles of 3 pixels over 10 (4 tiles per block; the last one holds 1 pixel): the interior
    tiles 0-2 run unguarded, and the copy for the one tile left reads the tile as the constant
    3, its guards ``9 + p < 10`` folding once the tile's loop is unrolled, with no
    loop-invariant branch on ``i % 4`` for LLVM to copy loops for."""
    A, O = L.Buffer("A", (2, 10), "float32"), L.Buffer("O", (2, 10), "float32")
    i, p = L.Var("i"), L.Var("p")
    pixel = (i % 4) * 3 + p
    body = L.For(p, 0, 3, "unrolled", L.IfThenElse(
        pixel < 10, L.Store(O, (i // 4, pixel), L.Load(A, (i // 4, pixel)) * 2.0)))
    func = L.PrimFunc("tiles", [A, O], L.For(i, 0, 8, "parallel", body))
    text = str(simplify_func(func, partition=True))
    assert "if i_in >= 0 and i_in <= 2:" in text
    outside = text[text.index("else:"):]
    assert "% 4" not in outside and "p + 9 < 10" in outside
    a, got = _run(simplify_func(func, partition=True), (2, 10), (2, 10))
    np.testing.assert_array_equal(got, a * 2)


def test_loops_holding_gpu_shared_arrays_are_not_cut():
    """A shared array is declared once per GPU kernel: a loop around one is left whole."""
    func = _padded_copy(10, 2)
    loop = func.body
    S = L.Buffer("S", (4,), "float32", scope="shared")
    body = L.seq(L.Allocate(S, L.Store(S, (0,), L.FloatImm(1.0, "float32"))), loop.body)
    guarded = L.PrimFunc("pad", func.params, L.For(loop.var, 0, 14, "serial", body))
    assert "serial(2, 12)" not in str(simplify_func(guarded, partition=True))
