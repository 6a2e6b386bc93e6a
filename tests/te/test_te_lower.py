"""Tensor expressions lowered with the default schedule, run by the reference evaluator and
compared with numpy formulas."""

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from relaybench import te
from relaybench.errors import CompileError

RNG = np.random.default_rng(5)


def _run(func, *inputs):
    """Evaluate ``func`` on ``inputs``; the outputs are the remaining parameters, returned."""
    outputs = [np.zeros(p.shape, p.dtype) for p in func.params[len(inputs):]]
    te.evaluate(func, *inputs, *outputs)
    return outputs[0] if len(outputs) == 1 else outputs


def test_matmul_via_sum():
    A = te.placeholder((4, 5), name="A")
    B = te.placeholder((5, 3), name="B")
    k = te.reduce_axis(5, name="k")
    C = te.compute((4, 3), lambda i, j: te.sum(A[i, k] * B[k, j], axis=[k]), name="C")
    func = te.lower([C], [A, B], name="matmul")
    assert str(func) == (
        'def matmul(A: Buffer((4, 5), "float32"), B: Buffer((5, 3), "float32"), '
        'C: Buffer((4, 3), "float32")):\n'
        '    for i in serial(4):\n'
        '        for j in serial(3):\n'
        '            C[i, j] = 0.0\n'
        '            for k in serial(5):\n'
        '                C[i, j] = C[i, j] + A[i, k] * B[k, j]'
    )
    a = RNG.standard_normal((4, 5)).astype("float32")
    b = RNG.standard_normal((5, 3)).astype("float32")
    np.testing.assert_allclose(_run(func, a, b), a @ b, rtol=1e-5, atol=1e-6)


def test_padded_2d_stencil_with_if_then_else():
    X = te.placeholder((5, 6), name="X")
    W = te.placeholder((3, 3), name="W")
    P = te.compute((7, 8), lambda i, j: te.if_then_else(
        (i >= 1) & (i < 6) & (j >= 1) & (j < 7), X[i - 1, j - 1], 0.0), name="P")
    ry, rx = te.reduce_axis(3, name="ry"), te.reduce_axis(3, name="rx")
    Y = te.compute((5, 6), lambda y, x: te.sum(P[y + ry, x + rx] * W[ry, rx], axis=[ry, rx]),
                   name="Y")
    func = te.lower([Y], [X, W], name="stencil")
    text = str(func)
    assert 'P = allocate((7, 8), "float32")' in text
    assert "select(i >= 1 and i < 6 and j >= 1 and j < 7, X[i - 1, j - 1], 0.0)" in text
    x = RNG.standard_normal((5, 6)).astype("float32")
    w = RNG.standard_normal((3, 3)).astype("float32")
    windows = sliding_window_view(np.pad(x, 1), (3, 3))
    expected = np.einsum("yxab,ab->yx", windows, w)
    np.testing.assert_allclose(_run(func, x, w), expected, rtol=1e-5, atol=1e-5)


def test_padding_inlined_into_stencil():
    X = te.placeholder((4, 4), name="X")
    P = te.compute((6, 6), lambda i, j: te.if_then_else(
        (i >= 1) & (i < 5) & (j >= 1) & (j < 5), X[i - 1, j - 1], 0.0), name="P")
    ry, rx = te.reduce_axis(3, name="ry"), te.reduce_axis(3, name="rx")
    Y = te.compute((4, 4), lambda y, x: te.max(P[y + ry, x + rx], axis=[ry, rx]), name="Y")
    s = te.create_schedule(Y)
    s[P].compute_inline()
    func = te.lower(s, [X], name="max_pool")
    assert "allocate" not in str(func)
    assert "select(y + ry >= 1 and y + ry < 5" in str(func)
    x = RNG.standard_normal((4, 4)).astype("float32")
    expected = sliding_window_view(np.pad(x, 1), (3, 3)).max(axis=(2, 3))
    np.testing.assert_array_equal(_run(func, x), expected)


def test_relu_and_bias_elementwise():
    X = te.placeholder((3, 4), name="X")
    b = te.placeholder((4,), name="b")
    Y = te.compute((3, 4), lambda i, j: te.maximum(X[i, j] + b[j], 0.0), name="Y")
    x = RNG.standard_normal((3, 4)).astype("float32")
    bias = RNG.standard_normal(4).astype("float32")
    np.testing.assert_array_equal(_run(te.lower(Y, [X, b]), x, bias), np.maximum(x + bias, 0))


def test_softmax_in_four_stages():
    n, m = 3, 7
    X = te.placeholder((n, m), name="X")
    k1, k2 = te.reduce_axis(m, name="k1"), te.reduce_axis(m, name="k2")
    M = te.compute((n,), lambda i: te.max(X[i, k1], axis=[k1]), name="M")
    E = te.compute((n, m), lambda i, j: te.exp(X[i, j] - M[i]), name="E")
    S = te.compute((n,), lambda i: te.sum(E[i, k2], axis=[k2]), name="S")
    Y = te.compute((n, m), lambda i, j: E[i, j] / S[i], name="Y")
    func = te.lower([Y], [X], name="softmax")
    text = str(func)
    assert text.count("allocate") == 3
    assert "M[i] = -inf" not in text and 'M[i] = "-inf"' in text
    assert text.index("M[i] = max(M[i], X[i, k1])") < text.index("E[i, j] = exp(X[i, j] - M[i])")
    x = (RNG.standard_normal((n, m)) * 4).astype("float32")
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(_run(func, x), e / e.sum(axis=1, keepdims=True), rtol=1e-5)


def test_integer_min_reduction_and_casts():
    X = te.placeholder((4, 6), "int32", name="X")
    k = te.reduce_axis(6, name="k")
    L = te.compute((4,), lambda i: te.min(X[i, k], axis=[k]), name="L")
    F = te.compute((4,), lambda i: te.cast("float32", L[i]) * 0.5, name="F")
    assert str(L.op.body.init) == "int32(2147483647)"
    x = RNG.integers(-100, 100, (4, 6)).astype("int32")
    low, half = _run(te.lower([L, F], [X], name="low"), x)
    np.testing.assert_array_equal(low, x.min(axis=1))
    np.testing.assert_array_equal(half, x.min(axis=1).astype("float32") * 0.5)


def test_mean_over_two_axes_with_index_arithmetic():
    X = te.placeholder((2, 3, 4), name="X")
    r1, r2 = te.reduce_axis(3, name="r1"), te.reduce_axis(2, name="r2")
    # Sums every other element of the last axis, starting at 1.
    S = te.compute((2,), lambda n: te.sum(X[n, r1, r2 * 2 + 1], axis=[r1, r2]), name="S")
    Mean = te.compute((2,), lambda n: S[n] / 6.0, name="Mean")
    x = RNG.standard_normal((2, 3, 4)).astype("float32")
    np.testing.assert_allclose(_run(te.lower(Mean, [X]), x), x[:, :, 1::2].mean(axis=(1, 2)),
                               rtol=1e-5)


def test_compute_names_axes_after_its_parameters():
    X = te.placeholder((2, 2), name="X")
    Y = te.compute((2, 2), lambda row, col: X[col, row], name="Y")
    assert [a.name for a in Y.op.axis] == ["row", "col"]
    x = np.arange(4, dtype="float32").reshape(2, 2)
    np.testing.assert_array_equal(_run(te.lower(Y, [X]), x), x.T)


def test_errors_name_the_place():
    X = te.placeholder((4,), name="X")
    k = te.reduce_axis(4, name="k")
    with pytest.raises(CompileError, match="compute bad: a reduction must be the whole body"):
        te.compute((1,), lambda i: te.sum(X[k], axis=[k]) * 2.0, name="bad")
    with pytest.raises(CompileError, match="tensor X of shape \\(4,\\) indexed with 2 indices"):
        te.compute((4,), lambda i: X[i, i])
    with pytest.raises(CompileError, match="is not a reduce_axis"):
        te.compute((4,), lambda i: te.sum(X[i], axis=[i]))
    Y = te.compute((4,), lambda i: X[i] + 1.0, name="Y")
    with pytest.raises(CompileError, match="lower f: the placeholder X is read but is not"):
        te.lower(Y, [], name="f")
    s = te.create_schedule(Y)
    s[Y].compute_inline()
    with pytest.raises(CompileError, match="the output Y cannot be inlined"):
        te.lower(s, [X])


def test_reduction_to_a_scalar():
    X = te.placeholder((3, 4), name="X")
    k1, k2 = te.reduce_axis(3, name="k1"), te.reduce_axis(4, name="k2")
    S = te.compute((), lambda: te.sum(X[k1, k2] * X[k1, k2], axis=[k1, k2]), name="S")
    func = te.lower(S, [X], name="sum_of_squares")
    assert str(func).splitlines()[1] == "    S[()] = 0.0"
    x = RNG.standard_normal((3, 4)).astype("float32")
    np.testing.assert_allclose(_run(func, x), (x * x).sum(), rtol=1e-5)
