"""Schedule primitives: each changes the printed loops and keeps the numbers (against numpy)."""

import numpy as np
import pytest

from relaybench import te
from relaybench.errors import CompileError

RNG = np.random.default_rng(7)


def _run(func, *inputs):
    outputs = [np.zeros(p.shape, p.dtype) for p in func.params[len(inputs):]]
    te.evaluate(func, *inputs, *outputs)
    return outputs[0] if len(outputs) == 1 else outputs


def _matmul(n=6, m=5, l=4):
    A = te.placeholder((n, l), name="A")
    B = te.placeholder((l, m), name="B")
    k = te.reduce_axis(l, name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=[k]), name="C")
    a = RNG.standard_normal((n, l)).astype("float32")
    b = RNG.standard_normal((l, m)).astype("float32")
    return A, B, C, a, b


def _loops(func):
    """The loop headers of the printed function, stripped of indentation."""
    return [line.strip() for line in str(func).splitlines() if line.strip().startswith("for ")]


def test_split_vectorize_parallel_unroll():
    X = te.placeholder((4, 8), name="X")
    Y = te.compute((4, 8), lambda i, j: X[i, j] * 3.0, name="Y")
    s = te.create_schedule(Y)
    i, j = Y.op.axis
    jo, ji = s[Y].split(j, factor=4)
    s[Y].parallel(i)
    s[Y].unroll(jo)
    s[Y].vectorize(ji)
    func = te.lower(s, [X], name="scale")
    assert str(func) == (
        'def scale(X: Buffer((4, 8), "float32"), Y: Buffer((4, 8), "float32")):\n'
        '    for i in parallel(4):\n'
        '        for j_outer in unrolled(2):\n'
        '            for j_inner in vectorized(4):\n'
        '                Y[i, j_outer * 4 + j_inner] = X[i, j_outer * 4 + j_inner] * 3.0'
    )
    x = RNG.standard_normal((4, 8)).astype("float32")
    np.testing.assert_array_equal(_run(func, x), x * 3)


def test_split_that_does_not_divide_adds_a_guard():
    X = te.placeholder((10,), name="X")
    Y = te.compute((10,), lambda i: X[i] + 1.0, name="Y")
    s = te.create_schedule(Y)
    s[Y].split(Y.op.axis[0], factor=4)
    func = te.lower(s, [X])
    assert _loops(func) == ["for i_outer in serial(3):", "for i_inner in serial(4):"]
    assert "if i_outer * 4 + i_inner < 10:" in str(func)
    x = RNG.standard_normal(10).astype("float32")
    np.testing.assert_array_equal(_run(func, x), x + 1)


def test_tiled_matmul_with_reorder():
    A, B, C, a, b = _matmul(6, 5, 4)
    s = te.create_schedule(C)
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    io, ii = s[C].split(i, factor=2)
    ko, ki = s[C].split(k, factor=2)
    s[C].reorder(io, ko, ii, ki, j)
    s[C].vectorize(j)
    func = te.lower(s, [A, B], name="tiled")
    assert _loops(func) == [
        "for i_outer in serial(3):",
        "for i_inner in serial(2):",  # the initialisation's own loops, before the first k loop
        "for j in vectorized(5):",
        "for k_outer in serial(2):",
        "for i_inner in serial(2):",
        "for k_inner in serial(2):",
        "for j in vectorized(5):",
    ]
    assert "C[i_outer * 2 + i_inner, j] = C[i_outer * 2 + i_inner, j] + " \
           "A[i_outer * 2 + i_inner, k_outer * 2 + k_inner] * B[k_outer * 2 + k_inner, j]" \
           in str(func)
    np.testing.assert_allclose(_run(func, a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_reduction_outermost_with_uneven_split():
    A, B, C, a, b = _matmul(5, 3, 7)
    s = te.create_schedule(C)
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    io, ii = s[C].split(i, factor=2)
    s[C].reorder(k, io, ii, j)
    func = te.lower(s, [A, B])
    text = str(func)
    assert _loops(func)[:4] == ["for i_outer in serial(3):", "for i_inner in serial(2):",
                                "for j in serial(3):", "for k in serial(7):"]
    assert text.count("if i_outer * 2 + i_inner < 5:") == 2
    np.testing.assert_allclose(_run(func, a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_fuse_then_split_then_parallel():
    X = te.placeholder((3, 5), name="X")
    Y = te.compute((3, 5), lambda i, j: X[i, j] - 1.0, name="Y")
    s = te.create_schedule(Y)
    fused = s[Y].fuse(*Y.op.axis)
    outer, inner = s[Y].split(fused, factor=4)
    s[Y].parallel(outer)
    func = te.lower(s, [X])
    assert _loops(func) == ["for i_j_fused_outer in parallel(4):",
                            "for i_j_fused_inner in serial(4):"]
    assert "(i_j_fused_outer * 4 + i_j_fused_inner) // 5" in str(func)
    assert "if i_j_fused_outer * 4 + i_j_fused_inner < 15:" in str(func)
    x = RNG.standard_normal((3, 5)).astype("float32")
    np.testing.assert_array_equal(_run(func, x), x - 1)


def test_schedule_of_an_intermediate_stage():
    X = te.placeholder((8,), name="X")
    T = te.compute((8,), lambda i: te.exp(X[i]), name="T")
    Y = te.compute((8,), lambda i: T[7 - i] * 2.0, name="Y")
    s = te.create_schedule(Y)
    _, inner = s[T].split(T.op.axis[0], factor=4)
    s[T].vectorize(inner)
    func = te.lower(s, [X])
    assert _loops(func) == ["for i_outer in serial(2):", "for i_inner in vectorized(4):",
                            "for i in serial(8):"]
    x = RNG.standard_normal(8).astype("float32")
    np.testing.assert_allclose(_run(func, x), np.exp(x)[::-1] * 2, rtol=1e-6)


def test_schedule_errors_name_the_place():
    A, B, C, _, _ = _matmul()
    s = te.create_schedule(C)
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    with pytest.raises(CompileError, match="stage C: the reduce axis k cannot be parallel"):
        s[C].parallel(k)
    with pytest.raises(CompileError, match="stage C: fuse needs i directly around k"):
        s[C].fuse(i, k)
    s[C].split(i, factor=2)
    with pytest.raises(CompileError, match="stage C: split: i is not a current loop"):
        s[C].split(i, factor=2)
    with pytest.raises(CompileError, match="factor must be positive"):
        s[C].split(j, factor=0)
    with pytest.raises(CompileError, match="stage A: split applies to compute stages only"):
        s[A].split(i, 2)
    with pytest.raises(CompileError, match="stage C: a reduction cannot be inlined"):
        s[C].compute_inline()


def test_compute_at_padding_inside_the_row_tiles_of_a_stencil():
    X = te.placeholder((5, 6), name="X")
    W = te.placeholder((3, 3), name="W")
    P = te.compute((7, 8), lambda i, j: te.if_then_else(
        (i >= 1) & (i < 6) & (j >= 1) & (j < 7), X[i - 1, j - 1], 0.0), name="P")
    ry, rx = te.reduce_axis(3, name="ry"), te.reduce_axis(3, name="rx")
    Y = te.compute((5, 6), lambda y, x: te.sum(P[y + ry, x + rx] * W[ry, rx], axis=[ry, rx]),
                   name="Y")
    s = te.create_schedule(Y)
    yo, _ = s[Y].split(Y.op.axis[0], factor=2)
    s[P].compute_at(s[Y], yo)
    s[P].vectorize(P.op.axis[1])
    func = te.lower(s, [X, W], name="stencil")
    # Each row tile of two output rows needs four padded rows (two plus the kernel's halo).
    assert _loops(func)[:4] == ["for y_outer in serial(3):", "for P_i in serial(4):",
                                "for P_j in vectorized(8):", "for y_inner in serial(2):"]
    assert "if y_outer * 2 + P_i < 7:" in str(func)
    x = RNG.standard_normal((5, 6)).astype("float32")
    w = RNG.standard_normal((3, 3)).astype("float32")
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(x, 1), (3, 3))
    np.testing.assert_allclose(_run(func, x, w), np.einsum("yxab,ab->yx", windows, w),
                               rtol=1e-5, atol=1e-5)


def test_compute_at_of_a_reduction_in_softmax():
    X = te.placeholder((3, 4), name="X")
    k1, k2 = te.reduce_axis(4, name="k1"), te.reduce_axis(4, name="k2")
    M = te.compute((3,), lambda i: te.max(X[i, k1], axis=[k1]), name="M")
    E = te.compute((3, 4), lambda i, j: te.exp(X[i, j] - M[i]), name="E")
    S = te.compute((3,), lambda i: te.sum(E[i, k2], axis=[k2]), name="S")
    Y = te.compute((3, 4), lambda i, j: E[i, j] / S[i], name="Y")
    s = te.create_schedule(Y)
    s[E].compute_inline()
    s[S].compute_at(s[Y], Y.op.axis[0])
    func = te.lower(s, [X], name="softmax")
    # S lives in a one-element buffer allocated inside the row loop.
    assert str(func).splitlines()[2:] == [
        "    for i in serial(3):",
        '        M[i] = "-inf"',
        "        for k1 in serial(4):",
        "            M[i] = max(M[i], X[i, k1])",
        "    for i in serial(3):",
        '        S = allocate((1,), "float32")',
        "        S[0] = 0.0",
        "        for k2 in serial(4):",
        "            S[0] = S[0] + exp(X[i, k2] - M[i])",
        "        for j in serial(4):",
        "            Y[i, j] = exp(X[i, j] - M[i]) / S[0]",
    ]
    x = RNG.standard_normal((3, 4)).astype("float32")
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(_run(func, x), e / e.sum(axis=1, keepdims=True), rtol=1e-5)
    # M is read by Y and by S, which is attached at the same loop: M goes there too, first.
    s[M].compute_at(s[Y], Y.op.axis[0])
    func = te.lower(s, [X], name="softmax")
    assert str(func).splitlines()[1:6] == [
        "    for i in serial(3):",
        '        M = allocate((1,), "float32")',
        '        M[0] = "-inf"',
        "        for k1 in serial(4):",
        "            M[0] = max(M[0], X[i, k1])",
    ]
    np.testing.assert_allclose(_run(func, x), e / e.sum(axis=1, keepdims=True), rtol=1e-5)


def test_compute_at_errors():
    X = te.placeholder((6,), name="X")
    T = te.compute((6,), lambda i: X[i] * 2.0, name="T")
    Y = te.compute((6,), lambda i: T[i] + T[5 - i], name="Y")
    s = te.create_schedule(Y)
    s[T].compute_at(s[Y], Y.op.axis[0])
    with pytest.raises(CompileError, match="reads of T along axis 0 move differently"):
        te.lower(s, [X])
    Z = te.compute((6,), lambda i: T[i] * T[i], name="Z")
    s = te.create_schedule([Y, Z])
    s[T].compute_at(s[Z], Z.op.axis[0])
    with pytest.raises(CompileError, match="T must be read by Z only"):
        te.lower(s, [X])
    W = te.compute((6,), lambda i: T[i] * 3.0, name="W")
    V = te.compute((6,), lambda i: W[i] + 1.0, name="V")
    s = te.create_schedule(V)
    s[W].compute_at(s[V], V.op.axis[0])
    s[T].compute_at(s[W], W.op.axis[0])
    with pytest.raises(CompileError, match="i spans one element of the region of W"):
        te.lower(s, [X])
    s = te.create_schedule(Y)
    s[T].compute_at(s[Y], Y.op.axis[0])
    s[Y].compute_inline()
    with pytest.raises(CompileError, match="T is computed at Y, which is inlined"):
        te.lower(s, [X])


@pytest.mark.parametrize("fi,fj,fk,order", [
    (1, 1, 1, "io ii jo ji ko ki"),
    (2, 3, 4, "io jo ko ii ji ki"),
    (4, 2, 3, "ko io jo ki ii ji"),
    (5, 5, 2, "jo io ko ji ki ii"),
    (3, 7, 5, "io ko jo ki ji ii"),
])
def test_split_and_reorder_sweep_keeps_matmul(fi, fj, fk, order):
    A, B, C, a, b = _matmul(6, 5, 4)
    s = te.create_schedule(C)
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    axes = {}
    axes["io"], axes["ii"] = s[C].split(i, factor=fi)
    axes["jo"], axes["ji"] = s[C].split(j, factor=fj)
    axes["ko"], axes["ki"] = s[C].split(k, factor=fk)
    s[C].reorder(*(axes[name] for name in order.split()))
    func = te.lower(s, [A, B])
    names = order.split()
    first_k = min(names.index("ko"), names.index("ki"))
    # The loops around the first k loop, then the initialisation's own output loops, then the rest.
    expected = (names[:first_k] + [n for n in names[first_k:] if not n.startswith("k")]
                + names[first_k:])
    assert [line.split()[1] for line in _loops(func)] == [axes[n].name for n in expected]
    np.testing.assert_allclose(_run(func, a, b), a @ b, rtol=1e-5, atol=1e-5)
