"""The GPU schedule primitives of ``te``: ``bind``, ``cache_read`` into a scope, and the barriers
lowering puts around a shared tile; checked with the loop IR's evaluator against numpy (run in
order, a bound loop means a serial one), and their errors."""

import numpy as np
import pytest

from relaybench import te
from relaybench.errors import CompileError
from relaybench.te import loop_ir as L

RNG = np.random.default_rng(0)


def _dense_shared(n=3, units=40, k=70, tile=32):
    x = te.placeholder((n, k), name="x")
    w = te.placeholder((units, k), name="w")
    r = te.reduce_axis(k, name="r")
    y = te.compute((n, units), lambda i, j: te.sum(x[i, r] * w[j, r], axis=[r]), name="y")
    s = te.create_schedule(y)
    i, j = y.op.axis
    jo, ji = s[y].split(j, tile)
    ro, ri = s[y].split(r, tile)
    s[y].reorder(i, jo, ro, ji, ri)
    s[y].bind(i, "blockIdx.y")
    s[y].bind(jo, "blockIdx.x")
    s[y].bind(ji, "threadIdx.x")
    for t in (x, w):
        cache = s.cache_read(t, "shared", [y])
        s[cache].compute_at(s[y], ro)
        s[cache].bind(cache.op.axis[1], "threadIdx.x")
    return te.lower(s, [x, w], name="dense_shared")


def test_shared_tiles_compute_dense():
    """Tiles of 32 over 40 features and 70 inputs (the last tiles partial, guarded)."""
    func = _dense_shared()
    text = str(func)
    assert 'x_shared = allocate((1, 32), "float32", "shared")' in text
    assert 'w_shared = allocate((32, 32), "float32", "shared")' in text
    assert "for j_inner in threadIdx.x(32):" in text
    assert text.count("barrier()") == 2     # after the two fills, and after the use of the tiles
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 70)).astype("float32")
    w = rng.standard_normal((40, 70)).astype("float32")
    y = np.zeros((3, 40), "float32")
    te.evaluate(func, x, w, y)
    np.testing.assert_allclose(y, x @ w.T, rtol=1e-5, atol=1e-5)


def test_barrier_prints_and_evaluates_as_nothing():
    A = L.Buffer("A", (4,), "float32")
    t = L.Var("t")
    func = L.PrimFunc("fill", (A,), L.seq(L.For(t, 0, 4, "threadIdx.x", L.Store(A, (t,), 1.0)),
                                          L.Barrier()))
    assert str(func).splitlines()[-1].strip() == "barrier()"
    a = np.zeros(4, "float32")
    te.evaluate(func, a)
    np.testing.assert_array_equal(a, np.ones(4))


def test_bind_errors():
    A = te.placeholder((8, 4), name="A")
    k = te.reduce_axis(4, name="k")
    S = te.compute((8,), lambda i: te.sum(A[i, k], axis=[k]), name="S")
    s = te.create_schedule(S)
    with pytest.raises(CompileError, match="the reduce axis k cannot be bound to threadIdx.x"):
        s[S].bind(k, "threadIdx.x")
    with pytest.raises(CompileError, match="bind of i to 'warp.x': expected one of blockIdx.x"):
        s[S].bind(S.op.axis[0], "warp.x")
    outer, inner = s[S].split(S.op.axis[0], 4)
    s[S].bind(inner, "threadIdx.x")
    with pytest.raises(CompileError, match="threadIdx.x is bound to i_inner already"):
        s[S].bind(outer, "threadIdx.x")


def test_cache_read_errors():
    A = te.placeholder((8,), name="A")
    B = te.placeholder((8,), name="B")
    C = te.compute((8,), lambda i: A[i] * 2.0, name="C")
    s = te.create_schedule(C)
    with pytest.raises(CompileError, match="cache_read of B: not read by these outputs"):
        s.cache_read(B, "shared", [C])
    with pytest.raises(CompileError, match="unknown scope 'texture'"):
        s.cache_read(A, "texture", [C])
    with pytest.raises(CompileError, match="unknown scope 'register'"):
        L.Buffer("X", (2,), "float32", "register")


def test_cache_read_keeps_the_reader_scheduled():
    """A reader split and bound before ``cache_read`` keeps its loops; its output is the same."""
    A = te.placeholder((64,), name="A")
    C = te.compute((64,), lambda i: A[i] * A[i] + A[i], name="C")
    s = te.create_schedule(C)
    bx, tx = s[C].split(C.op.axis[0], 32)
    s[C].bind(bx, "blockIdx.x")
    s[C].bind(tx, "threadIdx.x")
    cache = s.cache_read(A, "local", [C])
    s[cache].compute_at(s[C], tx)
    func = te.lower(s, [A], name="mirror")
    assert 'A_local = allocate((1,), "float32", "local")' in str(func)
    a = np.arange(64, dtype="float32")
    c = np.zeros(64, "float32")
    te.evaluate(func, a, c)
    np.testing.assert_array_equal(c, a * a + a)


@pytest.mark.parametrize("combiner,extent,factor", [("sum", 10, 4), ("max", 100, 32),
                                                    ("min", 64, 64), ("prod", 7, 2)])
def test_tree_reduce_matches_numpy(combiner, extent, factor):
    """Lanes past the end start from the initial value (10 elements in 4 lanes: 12 slots)."""
    A = te.placeholder((3, extent), name="A")
    k = te.reduce_axis(extent, name="k")
    reducer = getattr(te, combiner)
    S = te.compute((3,), lambda i: reducer(A[i, k], axis=[k]), name="S")
    s = te.create_schedule(S)
    partials = s.tree_reduce(S, factor)
    assert [p.shape for p in partials] == [(3, factor >> n) for n in range(len(partials))]
    func = te.lower(s, [A], name="tree")
    a = np.random.default_rng(4).uniform(0.5, 1.5, (3, extent)).astype("float32")
    out = np.zeros(3, "float32")
    te.evaluate(func, a, out)
    want = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}[combiner](a, axis=1)
    np.testing.assert_allclose(out, want, rtol=1e-5)


@pytest.mark.parametrize("axes,factor", [((1, 2), 16), ((1, 3), 8), ((0, 1, 2, 3), 32)])
def test_tree_reduce_over_several_axes(axes, factor):
    """Several reduce axes taken as one in row-major order (``//`` and ``%`` recover each
    axis's index); 5 x 6 x 7 elements are not a multiple of the lanes."""
    shape = (3, 5, 6, 7)
    A = te.placeholder(shape, name="A")
    red = {a: te.reduce_axis(shape[a], name=f"r{a}") for a in axes}
    kept = [a for a in range(4) if a not in axes] or [None]

    def body(*out):
        index, it = [], iter(out)
        for a in range(4):
            index.append(red[a] if a in red else next(it))
        return te.sum(A[tuple(index)], axis=list(red.values()))
    out_shape = tuple(shape[a] for a in kept if a is not None) or (1,)
    S = te.compute(out_shape, body if kept != [None] else
                   (lambda _: te.sum(A[tuple(red[a] for a in range(4))], axis=list(red.values()))),
                   name="S")
    s = te.create_schedule(S)
    s.tree_reduce(S, factor)
    func = te.lower(s, [A], name="tree")
    a = np.random.default_rng(5).standard_normal(shape).astype("float32")
    out = np.zeros(out_shape, "float32")
    te.evaluate(func, a, out)
    np.testing.assert_allclose(out.reshape(-1), a.sum(axis=axes).reshape(-1), rtol=1e-5,
                               atol=1e-5)


def test_tree_reduce_errors():
    A = te.placeholder((3, 8, 8), name="A")
    k = te.reduce_axis(8, name="k")
    S = te.compute((3,), lambda i: A[i, 0, 0] * 2.0, name="S")
    T = te.compute((3, 8), lambda i, x: te.sum(A[i, x, k], axis=[k]), name="T")
    s = te.create_schedule([S, T])
    with pytest.raises(CompileError, match="tree_reduce of S: a reduction is needed"):
        s.tree_reduce(S, 4)
    with pytest.raises(CompileError, match="the factor must be a power of two from 2, got 6"):
        s.tree_reduce(T, 6)


@pytest.mark.parametrize("combiner", ["sum", "max"])
@pytest.mark.parametrize("extent,factor", [(10, 4), (12, 3), (8, 8)])
def test_rfactor_matches_numpy(combiner, extent, factor):
    """Split-K over the first of two reduce axes: each lane a slice of ``k`` (the last one
    partial when ``factor`` does not divide it) and all of ``j``; the lanes then reduced. The
    partials are computed at the root, their lanes first, and bound as a GPU would."""
    A = te.placeholder((3, extent, 5), name="A")
    k, j = te.reduce_axis(extent, name="k"), te.reduce_axis(5, name="j")
    reducer = getattr(te, combiner)
    S = te.compute((3,), lambda i: reducer(A[i, k, j], axis=[k, j]), name="S")
    s = te.create_schedule(S)
    partial = s.rfactor(S, factor)
    assert partial.shape == (factor, 3)
    assert [a.name for a in s[partial].op.reduce_axis] == ["k_inner", "j"]
    fused = s[partial].fuse(*s[partial].op.axis)
    s[partial].bind(fused, "threadIdx.x")
    s[S].bind(S.op.axis[0], "threadIdx.x")
    func = te.lower(s, [A], name="split_k")
    a = np.random.default_rng(5).uniform(-1, 1, (3, extent, 5)).astype("float32")
    out = np.zeros(3, "float32")
    te.evaluate(func, a, out)
    want = {"sum": np.sum, "max": np.max}[combiner](a, axis=(1, 2))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_rfactor_errors():
    A = te.placeholder((3, 8), name="A")
    k = te.reduce_axis(8, name="k")
    S = te.compute((3,), lambda i: te.sum(A[i, k], axis=[k]), name="S")
    T = te.compute((3, 8), lambda i, x: A[i, x] + 1.0, name="T")
    s = te.create_schedule([S, T])
    with pytest.raises(CompileError, match="rfactor of T: a reduction is needed"):
        s.rfactor(T, 2)
    with pytest.raises(CompileError, match="the factor must be 2 or more, got 1"):
        s.rfactor(S, 1)
    s[S].split(S.op.axis[0], 2)
    with pytest.raises(CompileError, match="call it before scheduling the stage"):
        s.rfactor(S, 2)


def test_shared_tile_attached_inside_a_register_accumulator():
    """The GPU convolution's pattern on a matrix product: the accumulators ``y_local`` computed
    at the work item's loop (one element per work item, registers), and the tile of ``x``
    attached inside them, at the reduction's outer loop. The tile's region is relaxed over the
    loop bound to ``threadIdx.x``: it holds the rows of the whole work group (8 x 4), not one
    work item's (1 x 4), and its fill is bound to the same axis."""
    n, units, k = 16, 5, 10
    x = te.placeholder((n, k), name="x")
    w = te.placeholder((units, k), name="w")
    r = te.reduce_axis(k, name="r")
    y = te.compute((n, units), lambda i, j: te.sum(x[i, r] * w[j, r], axis=[r]), name="y")
    s = te.create_schedule(y)
    acc = s.cache_write(y)
    tile = s.cache_read(x, "shared", [acc])
    i, j = y.op.axis
    io, ii = s[y].split(i, 8)
    s[y].reorder(io, ii, j)
    s[y].bind(io, "blockIdx.x")
    s[y].bind(ii, "threadIdx.x")
    s[acc].set_scope("local")
    s[acc].compute_at(s[y], ii)
    ro, ri = s[acc].split(acc.op.reduce_axis[0], 4)
    s[acc].reorder(ro, ri, *acc.op.axis)
    s[tile].compute_at(s[acc], ro)
    fused = s[tile].fuse(*tile.op.axis)
    _, item = s[tile].split(fused, 8)
    s[tile].bind(item, "threadIdx.x")
    func = te.lower(s, [x, w], name="rows")
    text = str(func)
    assert 'x_shared = allocate((8, 4), "float32", "shared")' in text
    assert 'y_local = allocate((1, 5), "float32", "local")' in text
    assert text.count("threadIdx.x(8)") == 2 and text.count("barrier()") == 2
    a = RNG.standard_normal((n, k)).astype("float32")
    b = RNG.standard_normal((units, k)).astype("float32")
    out = np.zeros((n, units), "float32")
    L.evaluate(func, a, b, out)    # checks every access against its buffer
    np.testing.assert_allclose(out, a @ b.T, rtol=1e-5, atol=1e-5)
