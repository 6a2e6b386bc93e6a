"""Code generation from loop IR to LLVM: every node and loop kind, checked against numpy formulas
and against the loop IR's reference evaluator on the same PrimFunc."""

import math

import numpy as np
import pytest

pytest.importorskip("llvmlite.ir", reason="the LLVM backend needs llvmlite (the `llvm` extra)")

from relaybench import te  # noqa: E402
from relaybench.backends.llvm import host_target  # noqa: E402
from relaybench.backends.llvm.codegen import STACK_LIMIT_BYTES, build_kernel  # noqa: E402
from relaybench.errors import ExecutionError  # noqa: E402
from relaybench.te import loop_ir as L  # noqa: E402

RNG = np.random.default_rng(0)


def run_both(func, *arrays, **build_options):
    """Run ``func`` compiled and through the evaluator on copies; return both sets of arrays."""
    kernel = build_kernel(func, cache=False, **build_options)
    compiled = [a.copy() for a in arrays]
    reference = [a.copy() for a in arrays]
    kernel(*compiled)
    te.evaluate(func, *reference)
    return kernel, compiled, reference


def test_broadcast_add_and_relu():
    A = te.placeholder((3, 5), name="A")
    B = te.placeholder((5,), name="B")
    C = te.compute((3, 5), lambda i, j: te.maximum(A[i, j] + B[j], 0.0), name="C")
    func = te.lower([C], [A, B], name="add_relu")
    a = RNG.standard_normal((3, 5)).astype("float32")
    b = RNG.standard_normal(5).astype("float32")
    _, got, ref = run_both(func, a, b, np.zeros((3, 5), "float32"))
    np.testing.assert_array_equal(got[2], np.maximum(a + b[None, :], 0))
    np.testing.assert_array_equal(got[2], ref[2])


def test_matmul_via_sum_with_split_and_unroll():
    A = te.placeholder((6, 7), name="A")
    B = te.placeholder((7, 5), name="B")
    k = te.reduce_axis(7, name="k")
    C = te.compute((6, 5), lambda i, j: te.sum(A[i, k] * B[k, j], axis=[k]), name="C")
    s = te.create_schedule(C)
    i, j = C.op.axis
    _, ji = s[C].split(j, 2)  # 5 is not a multiple of 2: the guard must hold
    s[C].unroll(ji)
    func = te.lower(s, [A, B], name="matmul")
    a = RNG.standard_normal((6, 7)).astype("float32")
    b = RNG.standard_normal((7, 5)).astype("float32")
    _, got, ref = run_both(func, a, b, np.full((6, 5), np.nan, "float32"))
    np.testing.assert_allclose(got[2], a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[2], ref[2], rtol=1e-6)


def test_unrolled_large_extent_uses_loop_metadata():
    X = te.placeholder((40,), name="X")
    Y = te.compute((40,), lambda i: X[i] * 3.0, name="Y")
    s = te.create_schedule(Y)
    s[Y].unroll(Y.op.axis[0])
    func = te.lower(s, [X], name="triple")
    x = RNG.standard_normal(40).astype("float32")
    kernel, got, ref = run_both(func, x, np.zeros(40, "float32"))
    np.testing.assert_array_equal(got[1], x * 3)
    np.testing.assert_array_equal(got[1], ref[1])
    assert "unrolled(40)" in kernel.source("loops")


def test_padded_stencil_never_reads_the_branch_not_taken():
    n = 8
    X = te.placeholder((n,), name="X")
    # The index is i - 1 inside the bounds and 2**40 elements away outside them, where the
    # padding does not take this side: a read there would fault.
    P = te.compute((n + 2,), lambda i: te.if_then_else(
        te.logical_and(i >= 1, i <= n), X[(i - 1) + ((i - 1) // n) * 2 ** 40], 0.0), name="P")
    Y = te.compute((n,), lambda i: P[i] + P[i + 1] + P[i + 2], name="Y")
    s = te.create_schedule(Y)
    s[P].compute_inline()
    func = te.lower(s, [X], name="stencil")
    x = RNG.standard_normal(n).astype("float32")
    _, got, ref = run_both(func, x, np.zeros(n, "float32"))
    padded = np.pad(x, 1)
    np.testing.assert_allclose(got[1], padded[:-2] + padded[1:-1] + padded[2:], rtol=1e-6)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-6)


def _softmax(rows, cols):
    X = te.placeholder((rows, cols), name="X")
    k = te.reduce_axis(cols, name="k")
    M = te.compute((rows,), lambda i: te.max(X[i, k], axis=[k]), name="M")
    E = te.compute((rows, cols), lambda i, j: te.exp(X[i, j] - M[i]), name="E")
    k2 = te.reduce_axis(cols, name="k2")
    S = te.compute((rows,), lambda i: te.sum(E[i, k2], axis=[k2]), name="S")
    Y = te.compute((rows, cols), lambda i, j: E[i, j] / S[i], name="Y")
    return te.lower([Y], [X], name="softmax")


def _numpy_softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_softmax_stages_in_stack_temporaries():
    func = _softmax(3, 10)
    assert "allocate" in str(func)
    x = RNG.standard_normal((3, 10)).astype("float32")
    _, got, ref = run_both(func, x, np.zeros((3, 10), "float32"))
    np.testing.assert_allclose(got[1], _numpy_softmax(x), rtol=1e-5)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-5)


def test_large_temporary_goes_to_the_heap():
    n = STACK_LIMIT_BYTES // 4 + 1000
    X = te.placeholder((n,), name="X")
    T = te.compute((n,), lambda i: X[i] * 2.0, name="T")
    Y = te.compute((n,), lambda i: T[n - 1 - i] + 1.0, name="Y")
    func = te.lower([Y], [X], name="reverse")
    x = RNG.standard_normal(n).astype("float32")
    y = np.zeros(n, "float32")
    kernel = build_kernel(func, cache=False)
    kernel(x, y)
    np.testing.assert_array_equal(y, (x * 2)[::-1] + 1)
    assert "malloc" in kernel.source("llvm") and "free" in kernel.source("llvm")


def test_casts_between_int_float_and_bool():
    A = te.placeholder((6,), "float32", name="A")
    B = te.placeholder((6,), "int64", name="B")
    to_int = te.compute((6,), lambda i: te.cast("int32", A[i]), name="to_int")
    to_float = te.compute((6,), lambda i: te.cast("float64", B[i]), name="to_float")
    round_trip = te.compute((6,), lambda i: te.cast("float32", te.cast("float64", A[i]) * 2.0),
                         name="round_trip")
    truth = te.compute((6,), lambda i: te.cast("bool", A[i]), name="truth")
    back = te.compute((6,), lambda i: te.cast("float32", te.cast("bool", B[i])), name="back")
    outs = [to_int, to_float, round_trip, truth, back]
    func = te.lower(outs, [A, B], name="casts")
    a = np.array([-2.7, -0.5, 0.0, 0.5, 3.9, 1e3], "float32")
    b = np.array([-300, -1, 0, 1, 255, 1000], "int64")
    arrays = [a, b] + [np.zeros(6, t.dtype) for t in outs]
    _, got, ref = run_both(func, *arrays)
    expected = [a.astype("int32"), b.astype("float64"), (a.astype("float64") * 2).astype("float32"),
                a != 0, (b != 0).astype("float32")]
    for g, r, e in zip(got[2:], ref[2:], expected):
        np.testing.assert_array_equal(g, e)
        np.testing.assert_array_equal(g, r)


def test_narrowing_integer_casts_wrap_around_as_numpy():
    # The evaluator refuses values out of the target's range; the compiled code wraps like numpy.
    B = te.placeholder((6,), "int64", name="B")
    narrow = te.compute((6,), lambda i: te.cast("int8", B[i]), name="narrow")
    widen = te.compute((6,), lambda i: te.cast("int64", te.cast("uint8", B[i])), name="widen")
    to_float = te.compute((6,), lambda i: te.cast("float32", te.cast("uint8", B[i])), name="uf")
    kernel = build_kernel(te.lower([narrow, widen, to_float], [B], name="wrap"), cache=False)
    b = np.array([-300, -1, 0, 1, 255, 1000], "int64")
    outs = [np.zeros(6, "int8"), np.zeros(6, "int64"), np.zeros(6, "float32")]
    kernel(b, *outs)
    np.testing.assert_array_equal(outs[0], b.astype("int8"))
    np.testing.assert_array_equal(outs[1], b.astype("uint8").astype("int64"))
    np.testing.assert_array_equal(outs[2], b.astype("uint8").astype("float32"))


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint32"])
def test_floor_division_and_modulo(dtype):
    values = np.array([-7, -6, -1, 0, 1, 6, 7, 13], dtype) if dtype != "uint32" else \
        np.array([0, 1, 6, 7, 13, 100, 4000000000, 9], dtype)
    divisors = np.array([2, -3, 4, -5, 3, -4, 5, -1], dtype) if dtype != "uint32" else \
        np.array([2, 3, 4, 5, 3, 4, 7, 1], dtype)
    A = te.placeholder((8,), dtype, name="A")
    B = te.placeholder((8,), dtype, name="B")
    Q = te.compute((8,), lambda i: A[i] // B[i], name="Q")
    R = te.compute((8,), lambda i: A[i] % B[i], name="R")
    func = te.lower([Q, R], [A, B], name="divmod")
    _, got, ref = run_both(func, values, divisors, np.zeros(8, dtype), np.zeros(8, dtype))
    np.testing.assert_array_equal(got[2], values // divisors)
    np.testing.assert_array_equal(got[3], values % divisors)
    np.testing.assert_array_equal(got[2], ref[2])
    np.testing.assert_array_equal(got[3], ref[3])


def test_min_max_comparisons_and_logic():
    A = te.placeholder((9,), "int32", name="A")
    B = te.placeholder((9,), "int32", name="B")
    lo = te.compute((9,), lambda i: te.minimum(A[i], B[i]), name="lo")
    hi = te.compute((9,), lambda i: te.maximum(A[i], B[i]), name="hi")
    mask = te.compute((9,), lambda i: te.cast("int32", te.logical_or(
        te.logical_and(A[i] < B[i], L.not_equal(A[i], 0)), te.logical_not(A[i] >= -1))),
        name="mask")
    neg = te.compute((9,), lambda i: -A[i], name="neg")
    func = te.lower([lo, hi, mask, neg], [A, B], name="minmax")
    a = RNG.integers(-5, 5, 9).astype("int32")
    b = RNG.integers(-5, 5, 9).astype("int32")
    arrays = [a, b] + [np.zeros(9, "int32") for _ in range(4)]
    _, got, ref = run_both(func, *arrays)
    expected = [np.minimum(a, b), np.maximum(a, b),
                (((a < b) & (a != 0)) | ~(a >= -1)).astype("int32"), -a]
    for g, r, e in zip(got[2:], ref[2:], expected):
        np.testing.assert_array_equal(g, e)
        np.testing.assert_array_equal(g, r)


def _erf(x):
    return np.vectorize(math.erf)(x.astype("float64"))


MATH = {
    "exp": (te.exp, np.exp, (-5, 5)),
    "log": (te.log, np.log, (0.01, 10)),
    "sqrt": (te.sqrt, np.sqrt, (0, 10)),
    "rsqrt": (te.rsqrt, lambda x: 1 / np.sqrt(x.astype("float64")), (0.1, 10)),
    "tanh": (te.tanh, lambda x: np.tanh(x.astype("float64")), (-4, 4)),
    "sigmoid": (te.sigmoid, lambda x: 1 / (1 + np.exp(-x.astype("float64"))), (-8, 8)),
    "erf": (te.erf, _erf, (-3, 3)),
    "abs": (te.abs, np.abs, (-5, 5)),
    "floor": (te.floor, np.floor, (-5, 5)),
    "ceil": (te.ceil, np.ceil, (-5, 5)),
    "round": (te.round, np.round, (-5, 5)),
    "pow": (lambda x: te.power(x, 1.7), lambda x: np.power(x.astype("float64"), 1.7), (0, 4)),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(MATH))
def test_math_intrinsics(name, dtype):
    fn, reference, (low, high) = MATH[name]
    n = 64
    X = te.placeholder((n,), dtype, name="X")
    Y = te.compute((n,), lambda i: fn(X[i]), name="Y")
    s = te.create_schedule(Y)
    s[Y].vectorize(Y.op.axis[0])
    func = te.lower(s, [X], name=f"math_{name}")
    x = RNG.uniform(low, high, n).astype(dtype)
    if name == "round":
        x[:6] = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]  # numpy rounds halves to even
    if name in ("tanh", "erf", "sigmoid"):
        x[:2] = [1e-4, -3e-5]  # small arguments keep their relative accuracy
    _, got, ref = run_both(func, x, np.zeros(n, dtype))
    rtol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got[1], reference(x), rtol=rtol, atol=1e-7 if dtype == "float32"
                               else 1e-15)
    np.testing.assert_allclose(got[1], ref[1], rtol=rtol, atol=1e-7)


def test_integer_abs():
    X = te.placeholder((5,), "int32", name="X")
    Y = te.compute((5,), lambda i: te.abs(X[i]), name="Y")
    func = te.lower([Y], [X], name="iabs")
    x = np.array([-3, -1, 0, 2, 7], "int32")
    _, got, ref = run_both(func, x, np.zeros(5, "int32"))
    np.testing.assert_array_equal(got[1], np.abs(x))
    np.testing.assert_array_equal(got[1], ref[1])


@pytest.mark.skipif(not host_target().has_avx512, reason="the host has no AVX-512")
def test_vectorized_float32_loop_uses_zmm_registers():
    n = 1024
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] * B[i] + 1.0, name="C")
    s = te.create_schedule(C)
    s[C].vectorize(C.op.axis[0])
    func = te.lower(s, [A, B], name="fma")
    a, b = (RNG.standard_normal(n).astype("float32") for _ in range(2))
    kernel = build_kernel(func, cache=False)
    c = np.zeros(n, "float32")
    kernel(a, b, c)
    np.testing.assert_allclose(c, a * b + 1, rtol=1e-6)
    assert "zmm" in kernel.source("asm")
    assert "prefer-vector-width" in kernel.source("llvm")


def _parallel_matmul(m=16, n=12, kk=9):
    A = te.placeholder((m, kk), name="A")
    B = te.placeholder((kk, n), name="B")
    k = te.reduce_axis(kk, name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=[k]), name="C")
    s = te.create_schedule(C)
    s[C].parallel(C.op.axis[0])
    s[C].vectorize(C.op.axis[1])
    return te.lower(s, [A, B], name="pmatmul")


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_parallel_matmul(threads):
    func = _parallel_matmul()
    kernel = build_kernel(func, cache=False)
    assert kernel.parallel_extent == 16
    a = RNG.standard_normal((16, 9)).astype("float32")
    b = RNG.standard_normal((9, 12)).astype("float32")
    c = np.full((16, 12), np.nan, "float32")
    kernel(a, b, c, num_threads=threads)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    ref = np.zeros_like(c)
    te.evaluate(func, a, b, ref)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_parallel_ranges_write_each_element_once(threads):
    # C[i, j] += 1 over a parallel i that starts at 2: a range run twice, or missed, shows up.
    C = L.Buffer("C", (10, 4), "int32")
    i, j = L.Var("i"), L.Var("j")
    store = L.Store(C, (i - 2, j), L.Load(C, (i - 2, j)) + L.const(1, "int32"))
    func = L.PrimFunc("count", (C,), L.For(i, 2, 10, "parallel", L.For(j, 0, 4, "serial", store)))
    kernel = build_kernel(func, cache=False)
    c = np.zeros((10, 4), "int32")
    kernel(c, num_threads=threads)
    np.testing.assert_array_equal(c, np.ones((10, 4), "int32"))
    serial = build_kernel(func, parallel=False, cache=False)
    assert serial.parallel_extent is None
    serial(c)
    np.testing.assert_array_equal(c, np.full((10, 4), 2, "int32"))


def test_let_if_and_flat_indices_in_hand_written_loop_ir():
    X = L.Buffer("X", (3, 4), "float32")
    Y = L.Buffer("Y", (3, 4), "float32")
    f = L.Var("f")
    v = L.Var("v", "float32")
    body = L.For(f, 0, 12, "serial", L.LetStmt(v, L.Load(X, (f,)), L.IfThenElse(
        v > 0.0, L.Store(Y, (f // 4, f % 4), v * 2.0), L.Store(Y, (f,), -v))))
    func = L.PrimFunc("flat", (X, Y), body)
    x = RNG.standard_normal((3, 4)).astype("float32")
    _, got, ref = run_both(func, x, np.zeros((3, 4), "float32"))
    np.testing.assert_array_equal(got[1], np.where(x > 0, x * 2, -x))
    np.testing.assert_array_equal(got[1], ref[1])


def test_inputs_are_checked_before_the_kernel_runs():
    A = te.placeholder((4, 3), name="A")
    B = te.compute((4, 3), lambda i, j: A[i, j] + 1.0, name="B")
    kernel = build_kernel(te.lower([B], [A], name="inc"), cache=False)
    good = np.zeros((4, 3), "float32")
    with pytest.raises(ExecutionError, match="'A'") as err:
        kernel(np.zeros((3, 4), "float32"), good)
    assert err.value.input_name == "A"
    with pytest.raises(ExecutionError, match="'B'") as err:
        kernel(good, np.zeros((4, 3), "float64"))
    assert err.value.input_name == "B"
    with pytest.raises(ExecutionError, match="2"):
        kernel(good)
    out = np.zeros((4, 3), "float32")
    out.setflags(write=False)
    with pytest.raises(ExecutionError, match="read-only"):
        kernel(good, out)


def test_sources_and_cache_key_follow_the_loop_ir():
    X = te.placeholder((8,), name="X")
    Y = te.compute((8,), lambda i: X[i] + 2.0, name="Y")
    first = build_kernel(te.lower([Y], [X], name="plus"), cache=False)
    again = build_kernel(te.lower([Y], [X], name="plus"), cache=False)
    Z = te.compute((8,), lambda i: X[i] + 3.0, name="Y")
    other = build_kernel(te.lower([Z], [X], name="plus"), cache=False)
    assert first.compiled_module is again.compiled_module
    assert other.compiled_module.key != first.compiled_module.key
    assert first.source("loops") == str(te.lower([Y], [X], name="plus"))
    assert "define" in first.source("llvm")
    assert "ret" in first.source("asm")


def test_a_widened_float32_literal_and_a_float64_literal_are_different_kernels():
    """The cache key is the printed loop IR: the two must print differently."""
    from relaybench.te import loop_ir as L
    out = L.Buffer("out", (1,), "float64")
    widened = L.PrimFunc("lit", [out], L.Store(out, (0,), L.Cast("float64", L.FloatImm(0.1))))
    exact = L.PrimFunc("lit", [out], L.Store(out, (0,), L.FloatImm(0.1, "float64")))
    assert str(widened) != str(exact)
    a, b = np.empty(1), np.empty(1)
    build_kernel(widened)(a)
    build_kernel(exact)(b)
    assert a[0] == np.float64(np.float32(0.1)) and b[0] == 0.1
