"""Vector code for ``vectorized`` loops, fused multiply-adds and shifts in the LLVM backend.

Every kernel is checked against a numpy formula and, where it is small, against the loop IR's
reference evaluator; the register-tiled convolution microkernel is also checked in its assembly
(512-bit FMAs with the accumulators held in registers).
"""

import re
import time

import numpy as np
import pytest

pytest.importorskip("llvmlite.ir", reason="the LLVM backend needs llvmlite (the `llvm` extra)")

from relaybench import te  # noqa: E402
from relaybench.backends.llvm import host_target  # noqa: E402
from relaybench.backends.llvm.codegen import _VectorLoop, build_kernel  # noqa: E402
from relaybench.errors import CompileError  # noqa: E402
from relaybench.te import loop_ir as L  # noqa: E402

RNG = np.random.default_rng(7)
avx512 = pytest.mark.skipif(not host_target().has_avx512, reason="the host has no AVX-512")


def run_both(func, *arrays, vector=True):
    """Compile and evaluate ``func`` on copies of ``arrays``; with ``vector``, first check that
    every vectorized loop in it becomes vector code."""
    if vector:
        stack = [func.body]
        while stack:
            node = stack.pop()
            if isinstance(node, L.For) and node.kind == "vectorized":
                assert _VectorLoop.plan(node) is not None, f"{node.var.name} stays scalar"
            L.map_children(node, lambda child: stack.append(child) or child)
    kernel = build_kernel(func, cache=False)
    compiled = [a.copy() for a in arrays]
    reference = [a.copy() for a in arrays]
    kernel(*compiled)
    te.evaluate(func, *reference)
    return kernel, compiled, reference


def rows_by_vector(name, shape, dtype, body_fn, inputs, lanes=None):
    """``for i in serial(rows): for j in vectorized(cols): body_fn(i, j)`` over (rows, cols)."""
    rows, cols = shape
    i, j = L.Var("i"), L.Var("j")
    body = L.For(i, 0, rows, "serial", L.For(j, 0, lanes or cols, "vectorized", body_fn(i, j)))
    return L.PrimFunc(name, inputs, body)


# ------------------------------------------------------------------------------- elementwise


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint8"])
def test_contiguous_elementwise(dtype):
    A = L.Buffer("A", (3, 16), dtype)
    B = L.Buffer("B", (16,), dtype)
    C = L.Buffer("C", (3, 16), dtype)
    float_kind = dtype.startswith("float")

    def body(i, j):
        a, b = L.Load(A, (i, j)), L.Load(B, (j,))
        value = L.max_expr(a, b) - L.min_expr(a, b) + a * b
        if not float_kind:
            value = value + a // L.const(3, dtype) + a % L.const(5, dtype)
        return L.Store(C, (i, j), value)

    func = rows_by_vector("ew", (3, 16), dtype, body, (A, B, C))
    info = np.iinfo(dtype) if not float_kind else None
    if float_kind:
        a, b = RNG.standard_normal((3, 16)), RNG.standard_normal(16)
    else:
        low = max(-50, info.min)
        a, b = RNG.integers(low, 50, (3, 16)), RNG.integers(low, 50, 16)
    a, b = a.astype(dtype), b.astype(dtype)
    _, got, ref = run_both(func, a, b, np.zeros((3, 16), dtype))
    expected = np.maximum(a, b[None]) - np.minimum(a, b[None]) + a * b[None]
    if not float_kind:
        expected = expected + a // dtype_const(3, dtype) + a % dtype_const(5, dtype)
    np.testing.assert_allclose(got[2], expected.astype(dtype), rtol=1e-6)
    np.testing.assert_allclose(got[2], ref[2], rtol=1e-6)


def dtype_const(value, dtype):
    return np.dtype(dtype).type(value)


def test_compare_select_cast_and_bool_buffers():
    A = L.Buffer("A", (2, 8), "float32")
    M = L.Buffer("M", (2, 8), "bool")
    C = L.Buffer("C", (2, 8), "int32")
    P = L.Buffer("P", (2, 8), "bool")

    def body(i, j):
        a, m = L.Var("a", "float32"), L.Var("m", "bool")
        keep = L.logical_and(a > 0.0, m)  # loaded before: no load under the condition
        return L.LetStmt(a, L.Load(A, (i, j)), L.LetStmt(m, L.Load(M, (i, j)), L.seq(
            L.Store(C, (i, j), L.select(keep, L.cast("int32", a * 10.0),
                                        L.cast("int32", j) - 100)),
            L.Store(P, (i, j), L.logical_not(keep)))))

    func = rows_by_vector("csel", (2, 8), "float32", body, (A, M, C, P))
    a = RNG.standard_normal((2, 8)).astype("float32")
    m = RNG.random((2, 8)) > 0.3
    _, got, ref = run_both(func, a, m, np.zeros((2, 8), "int32"), np.zeros((2, 8), bool))
    keep = (a > 0) & m
    expected = np.where(keep, (a * 10).astype("int32"), np.arange(8, dtype="int32") - 100)
    np.testing.assert_array_equal(got[2], expected)
    np.testing.assert_array_equal(got[3], ~keep)
    np.testing.assert_array_equal(got[2], ref[2])


def test_math_intrinsics_and_library_calls_per_lane():
    A = L.Buffer("A", (2, 16), "float32")
    C = L.Buffer("C", (2, 16), "float32")
    D = L.Buffer("D", (2, 16), "float32")

    def body(i, j):
        a = L.Load(A, (i, j))
        return L.seq(L.Store(C, (i, j), L.call("exp", a) + L.call("sqrt", L.call("abs", a))),
                     L.Store(D, (i, j), L.call("tanh", a) + L.call("erf", a)
                             + L.call("sigmoid", a)))

    func = rows_by_vector("math", (2, 16), "float32", body, (A, C, D))
    a = RNG.standard_normal((2, 16)).astype("float32")
    kernel, got, ref = run_both(func, a, np.zeros((2, 16), "float32"),
                                np.zeros((2, 16), "float32"))
    from math import erf
    np.testing.assert_allclose(got[1], np.exp(a) + np.sqrt(np.abs(a)), rtol=2e-6)
    expected = np.tanh(a) + np.vectorize(erf)(a) + 1 / (1 + np.exp(-a))
    np.testing.assert_allclose(got[2], expected, rtol=2e-6, atol=1e-6)
    llvm_text = kernel.source("llvm")
    # exp, tanh and sigmoid in line on the vector; erf through the C library, lane by lane
    assert "llvm.exp" not in llvm_text and "tanhf" not in llvm_text
    assert "erff" in llvm_text


def _ulps(got, want):
    """|got - want| in units in the last place of float32 ``want`` (finite, normal ``want``)."""
    return np.abs(got.astype("float64") - want) / np.spacing(np.abs(want.astype("float32")))


def test_vector_exp_tanh_sigmoid_within_two_ulps_everywhere():
    """The in-line float32 vector exp, tanh and sigmoid against float64 numpy: within 1.5, 2
    and 2.5 ulp of the exact value over the whole range, with inf, NaN, signed zero, overflow
    and underflow as numpy has them."""
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 88.72, 88.73, 89.5, -87.3, -103.0, -104.5,
                -200.0, 1e-30, -1e-30, 0.55, -0.55, 0.5499999, 9.1, 44.5, -44.5, 1e-8]
    rng = np.random.default_rng(5)
    spread = np.concatenate([rng.standard_normal(1024) * s for s in (0.01, 0.3, 1, 3, 10, 40)])
    a = np.concatenate([specials, spread, rng.uniform(-0.6, 0.6, 1024)]).astype("float32")
    a = np.resize(a, (a.size // 16, 16))
    X = L.Buffer("X", a.shape, "float32")
    outs = {name: L.Buffer(name.upper(), a.shape, "float32") for name in ("exp", "tanh", "sigmoid")}

    def body(i, j):
        x = L.Load(X, (i, j))
        return L.seq(*[L.Store(buf, (i, j), L.call(name, x)) for name, buf in outs.items()])

    func = rows_by_vector("vmath", a.shape, "float32", body, (X, *outs.values()))
    zeros = [np.zeros(a.shape, "float32") for _ in outs]
    _, got, _ = run_both(func, a, *zeros)
    wide = a.astype("float64")
    with np.errstate(over="ignore"):
        want = {"exp": np.exp(wide), "tanh": np.tanh(wide), "sigmoid": 1 / (1 + np.exp(-wide))}
    for k, (name, bound) in enumerate((("exp", 1.5), ("tanh", 2.0), ("sigmoid", 2.5))):
        with np.errstate(over="ignore"):
            out, ref = got[1 + k], want[name].astype("float32")
        assert np.array_equal(np.isnan(out), np.isnan(ref)), name
        normal = np.isfinite(ref) & (np.abs(ref) >= np.finfo("float32").tiny)
        assert _ulps(out[normal], want[name][normal]).max() <= bound, name
        np.testing.assert_array_equal(out[np.isinf(ref)], ref[np.isinf(ref)])
        tiny = np.isfinite(ref) & ~normal
        assert np.abs(out[tiny] - ref[tiny]).max(initial=0) <= 2 * 1.5e-45, name
        zero = a == 0
        np.testing.assert_array_equal(np.signbit(out[zero]) if name == "tanh" else out[zero],
                                      np.signbit(a[zero]) if name == "tanh" else ref[zero])


def test_broadcast_strided_and_indirect_loads_and_a_scattered_store():
    A = L.Buffer("A", (4, 32), "float32")
    I = L.Buffer("I", (8,), "int32")
    T = L.Buffer("T", (8, 4), "float32")

    def body(i, j):  # T[j, i] = A[i, 2j] + A[i, 0] + A[3 - i, I[j]]
        return L.Store(T, (j, i), L.Load(A, (i, j * 2)) + L.Load(A, (i, 0))
                       + L.Load(A, (3 - i, L.cast("int64", L.Load(I, (j,))))))

    func = rows_by_vector("gather", (4, 8), "float32", body, (A, I, T))
    a = RNG.standard_normal((4, 32)).astype("float32")
    idx = RNG.integers(0, 32, 8).astype("int32")
    _, got, ref = run_both(func, a, idx, np.zeros((8, 4), "float32"))
    expected = (a[:, 0:16:2] + a[:, :1] + a[::-1][:, idx]).T
    np.testing.assert_allclose(got[2], expected, rtol=1e-6)
    np.testing.assert_array_equal(got[2], ref[2])


def test_let_invariant_if_and_a_loop_with_offset_begin():
    A = L.Buffer("A", (3, 20), "float32")
    C = L.Buffer("C", (3, 20), "float32")
    i, j, t = L.Var("i"), L.Var("j"), L.Var("t", "float32")
    inner = L.LetStmt(t, L.Load(A, (i, j)) * 3.0,
                      L.IfThenElse(L.equal(i, 1), L.Store(C, (i, j), t + t),
                                   L.Store(C, (i, j), t - 1.0)))
    func = L.PrimFunc("letif", (A, C), L.For(i, 0, 3, "serial",
                                              L.For(j, 2, 16, "vectorized", inner)))
    a = RNG.standard_normal((3, 20)).astype("float32")
    _, got, ref = run_both(func, a, np.zeros((3, 20), "float32"))
    expected = np.zeros((3, 20), "float32")
    expected[:, 2:18] = a[:, 2:18] * 3 - 1
    expected[1, 2:18] = a[1, 2:18] * 6
    np.testing.assert_allclose(got[1], expected, rtol=1e-6)
    np.testing.assert_array_equal(got[1], ref[1])


# ------------------------------------------------------------------- when loops stay scalar


def test_guarded_padding_reads_are_vector_code_in_bounds():
    """``select(in bounds, A[j - 2], 0)`` becomes vector code; the lanes out of bounds read
    clamped offsets (A[0], A[15]), never A[-2] or A[17], and their value is dropped."""
    A = L.Buffer("A", (16,), "float32")
    C = L.Buffer("C", (20,), "float32")
    j = L.Var("j")
    inside = L.logical_and(j >= 2, j < 18)
    loop = L.For(j, 0, 20, "vectorized",
                 L.Store(C, (j,), L.select(inside, L.Load(A, (j - 2,)), 0.0)))
    a = RNG.standard_normal(16).astype("float32")
    kernel, got, ref = run_both(L.PrimFunc("pad", (A, C), loop), a, np.zeros(20, "float32"))
    np.testing.assert_array_equal(got[1], np.pad(a, 2))
    np.testing.assert_array_equal(got[1], ref[1])
    assert "<20 x float>" in kernel.source("llvm")


def test_lanes_writing_one_element_keep_the_scalar_order():
    A = L.Buffer("A", (16,), "float32")
    S = L.Buffer("S", (1,), "float32")
    Y = L.Buffer("Y", (16,), "float32")
    j = L.Var("j")
    reduction = L.For(j, 0, 16, "vectorized", L.Store(S, (0,), L.Load(S, (0,)) + L.Load(A, (j,))))
    shifted = L.For(j, 0, 15, "vectorized", L.Store(Y, (j + 1,), L.Load(Y, (j,)) + 1.0))
    assert _VectorLoop.plan(reduction) is None  # every lane writes S[0]
    assert _VectorLoop.plan(shifted) is None  # a lane reads what the previous one wrote
    overlapping = L.For(j, 0, 8, "vectorized", L.seq(L.Store(Y, (j,), 1.0),
                                                      L.Store(Y, (j + 1,), 2.0)))
    assert _VectorLoop.plan(overlapping) is None  # lane order decides Y[1..7]
    nested = L.For(j, 0, 4, "vectorized", L.For(L.Var("k"), 0, 2, "serial",
                                                L.Store(Y, (j,), 1.0)))
    assert _VectorLoop.plan(nested) is None
    func = L.PrimFunc("prefix", (A, S, Y), L.seq(reduction, shifted))
    a = RNG.standard_normal(16).astype("float32")
    _, got, ref = run_both(func, a, np.zeros(1, "float32"), np.zeros(16, "float32"),
                           vector=False)
    np.testing.assert_allclose(got[1], [a.sum()], rtol=1e-5)
    np.testing.assert_array_equal(got[2], np.arange(16, dtype="float32"))
    np.testing.assert_array_equal(got[2], ref[2])


@avx512
def test_multiply_add_becomes_a_fused_vector_fma():
    A = L.Buffer("A", (4, 16), "float32")
    B = L.Buffer("B", (16,), "float32")
    C = L.Buffer("C", (4, 16), "float32")
    func = rows_by_vector("fma16", (4, 16), "float32",
                          lambda i, j: L.Store(C, (i, j), L.Load(C, (i, j))
                                               - L.Load(A, (i, j)) * L.Load(B, (j,))),
                          (A, B, C))
    a = RNG.standard_normal((4, 16)).astype("float32")
    b = RNG.standard_normal(16).astype("float32")
    c = RNG.standard_normal((4, 16)).astype("float32")
    kernel, got, _ = run_both(func, a, b, c)
    np.testing.assert_allclose(got[2], c - a * b, rtol=1e-5, atol=1e-6)
    asm = kernel.source("asm")
    assert "zmm" in asm and re.search(r"vfn?m(add|sub)\d+ps", asm)


# ------------------------------------------------------------------------------------ shifts


SHIFT_DTYPES = ["int8", "uint8", "int32", "uint32", "int64", "uint64"]


@pytest.mark.parametrize("dtype", SHIFT_DTYPES)
@pytest.mark.parametrize("lanes", [1, 8])
def test_shifts_follow_numpy(dtype, lanes):
    n = 24
    A = L.Buffer("A", (n,), dtype)
    S = L.Buffer("S", (n,), dtype)
    Lo = L.Buffer("Lo", (n,), dtype)
    Ro = L.Buffer("Ro", (n,), dtype)
    Ko = L.Buffer("Ko", (n,), dtype)
    i, j = L.Var("i"), L.Var("j")
    k = i * lanes + j
    a, s = L.Load(A, (k,)), L.Load(S, (k,))
    body = L.seq(L.Store(Lo, (k,), a << s), L.Store(Ro, (k,), a >> s),
                 L.Store(Ko, (k,), (a >> 1) + (L.const(1, dtype) << L.const(2, dtype))))
    kind = "vectorized" if lanes > 1 else "serial"  # scalar and vector shifts
    func = L.PrimFunc("shift", (A, S, Lo, Ro, Ko),
                      L.For(i, 0, n // lanes, "serial", L.For(j, 0, lanes, kind, body)))
    info = np.iinfo(dtype)
    values = RNG.integers(info.min // 2 if info.min else 0, info.max // 2, n, dtype=dtype)
    bits = info.bits
    amounts = np.array(list(range(0, bits, max(1, bits // 12)))[:n - 4] + [bits, bits + 3, 0, 1],
                       dtype=dtype)
    amounts = np.resize(amounts, n)
    if info.min:
        amounts[-1] = -1  # a negative amount: 0, or -1 for a negative value shifted right
    _, got, ref = run_both(func, values, amounts, *(np.zeros(n, dtype) for _ in range(3)))
    np.testing.assert_array_equal(got[2], np.left_shift(values, amounts))
    np.testing.assert_array_equal(got[3], np.right_shift(values, amounts))
    np.testing.assert_array_equal(got[4], (values >> 1) + np.dtype(dtype).type(4))
    for compiled, reference in zip(got[2:], ref[2:]):
        np.testing.assert_array_equal(compiled, reference)


def test_shift_text_and_errors():
    x = L.Var("x")
    assert str((x << 2) + 1) == "(x << 2) + 1"
    assert str(x << 2 + x) == "x << 2 + x"
    assert str((x >> 1) < 4) == "x >> 1 < 4"
    assert str(1 << x) == "1 << x"
    with pytest.raises(CompileError, match="'<<' needs integer operands, got float32"):
        L.Var("f", "float32") << 1
    with pytest.raises(CompileError, match="'>>' needs integer operands, got bool"):
        L.const(True) >> L.const(False)


# ----------------------------------------------------------- the convolution microkernel


def conv_microkernel(in_channels, height, width_tiles, out_tiles, name="conv_tile"):
    """A 3x3 convolution, stride 1, on padded CHW data with weights blocked by 16 output
    channels, register-tiled by 7 output columns times 16 output channels, then ReLU."""
    width = width_tiles * 7
    data = L.Buffer("data", (in_channels, height + 2, width + 2), "float32")
    w = L.Buffer("w", (out_tiles, in_channels, 3, 3, 16), "float32")
    out = L.Buffer("out", (out_tiles, height, width, 16), "float32")
    acc = L.Buffer("acc", (7, 16), "float32")
    oc_o, oh, ow_o, ic, kh, kw = (L.Var(n) for n in ("oc_o", "oh", "ow_o", "ic", "kh", "kw"))

    def tile(store):
        ow_i, oc_i = L.Var("ow_i"), L.Var("oc_i")
        return L.For(ow_i, 0, 7, "unrolled", L.For(oc_i, 0, 16, "vectorized", store(ow_i, oc_i)))

    init = tile(lambda r, c: L.Store(acc, (r, c), 0.0))
    # the window's columns unrolled by the schedule (as the x86 strategy's ``unroll_rx``
    # does): LLVM's unroller is not run on code that is all vector code already
    update = L.For(ic, 0, in_channels, "serial", L.For(kh, 0, 3, "serial", L.For(
        kw, 0, 3, "unrolled", tile(lambda r, c: L.Store(
            acc, (r, c), L.Load(acc, (r, c))
            + L.Load(data, (ic, oh + kh, ow_o * 7 + r + kw)) * L.Load(w, (oc_o, ic, kh, kw, c)))))))
    write = tile(lambda r, c: L.Store(out, (oc_o, oh, ow_o * 7 + r, c),
                                      L.max_expr(L.Load(acc, (r, c)), 0.0)))
    body = L.For(oc_o, 0, out_tiles, "parallel", L.For(oh, 0, height, "serial", L.For(
        ow_o, 0, width_tiles, "serial", L.Allocate(acc, L.seq(init, update, write)))))
    return L.PrimFunc(name, (data, w, out), body)


def conv_reference(data, w):
    from numpy.lib.stride_tricks import sliding_window_view
    windows = sliding_window_view(data, (3, 3), axis=(1, 2))  # ic, oh, ow, kh, kw
    return np.maximum(np.einsum("ihwab,oiabc->ohwc", windows, w, optimize=True), 0)


def innermost_fma_block(asm: str) -> str:
    """The body of the innermost loop (from a label to the jump back to it, with no label in
    between) that has the most FMAs."""
    loops = []
    for match in re.finditer(r"^(\.\w+):", asm, flags=re.M):
        label = match.group(1)
        back = re.search(rf"^\s*j\w+\s+{re.escape(label)}\s*$", asm[match.end():], flags=re.M)
        if back is None:
            continue
        body = asm[match.end():match.end() + back.end()]
        if not re.search(r"^\.\w+:", body, flags=re.M):
            loops.append(body)
    return max(loops, key=lambda body: len(re.findall(r"vfmadd\w+", body)), default="")


@avx512
def test_conv_microkernel_keeps_accumulators_in_zmm_registers():
    func = conv_microkernel(in_channels=16, height=4, width_tiles=2, out_tiles=2)
    kernel = build_kernel(func, cache=False)
    data = RNG.standard_normal((16, 6, 16)).astype("float32")
    w = RNG.standard_normal((2, 16, 3, 3, 16)).astype("float32")
    out = np.zeros((2, 4, 14, 16), "float32")
    kernel(data, w, out, num_threads=2)
    np.testing.assert_allclose(out, conv_reference(data, w), rtol=1e-4, atol=1e-4)
    assert "alloca" not in kernel.source("llvm")  # acc was promoted to registers
    inner = innermost_fma_block(kernel.source("asm"))
    fmas = re.findall(r"vfmadd\d+ps\s+[^\n]*%zmm", inner)
    assert len(fmas) >= 7 * 3  # 7 accumulators, kw unrolled
    assert "rsp" not in inner and "rbp)" not in inner  # no stack traffic: acc stays in zmm
    stores = [line for line in inner.splitlines() if re.match(r"\s*vmov\w+\s+%zmm\d+, \S*\(", line)]
    assert not stores


@avx512
def test_conv_microkernel_speed(capsys):
    """Prints (does not assert) the single-thread speed of a 64x56x56 -> 64 convolution."""
    func = conv_microkernel(in_channels=64, height=56, width_tiles=8, out_tiles=4,
                            name="conv_speed")
    kernel = build_kernel(func)
    data = RNG.standard_normal((64, 58, 58)).astype("float32")
    w = RNG.standard_normal((4, 64, 3, 3, 16)).astype("float32")
    out = np.zeros((4, 56, 56, 16), "float32")
    run = kernel.bind(data, w, out, num_threads=1)
    run()
    best = min(_timed(run) for _ in range(5))
    np.testing.assert_allclose(out[:, :4], conv_reference(data[:, :6], w), rtol=1e-3, atol=1e-3)
    flops = 2 * 64 * 9 * 56 * 56 * 64
    with capsys.disabled():
        print(f"\nconv microkernel 64x56x56 -> 64, 3x3, 1 thread: {best * 1e3:.2f} ms, "
              f"{flops / best / 1e9:.1f} GFLOP/s")


def _timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
