"""gather, gather_nd, scatter_nd, ndarray_size, reverse, cumsum/cumprod, sort/argsort/topk,
collapse_sum_like/collapse_sum_to, image.resize1d/resize3d and annotation.stop_fusion: the
references against formulas written here (loops, hand-computed values), the type relations and
their errors, the compiled path against the interpreter, and the text format."""

import itertools

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.ir import var
from relaybench.ir.type_infer import infer_expr
from relaybench.ir.types import TensorType, TupleType
from relaybench.op.registry import OpPattern, get_opdef

from _added_helpers import check, module, raises

rng = np.random.default_rng(30)


def T(*shape, dtype="float32"):
    return TensorType(shape, dtype)


def v(name, *shape, dtype="float32"):
    return var(name, shape=shape, dtype=dtype)


# ---- gather, gather_nd, scatter_nd ------------------------------------------------------------

def test_gather_against_loops():
    x = rng.standard_normal((3, 4)).astype("float32")
    i = rng.integers(0, 4, (3, 6)).astype("int64")
    out = check(module("%x: Tensor[(3, 4), float32], %i: Tensor[(3, 6), int64]",
                       "gather(%x, %i, axis=1)"), x, i)
    want = np.array([[x[r, i[r, c]] for c in range(6)] for r in range(3)], "float32")
    np.testing.assert_array_equal(out, want)
    with raises("gather: indices Tensor[(3), int32] must have the data's rank 2"):
        infer_expr(op.gather(v("x", 3, 4), v("i", 3, dtype="int32"), axis=1))


def test_gather_nd_against_loops():
    x = rng.standard_normal((3, 4, 5)).astype("float32")
    i = np.array([[[0, 2], [1, 1], [2, 0]], [[3, 0], [1, 2], [0, 3]]], "int32")     # M = 2, Y = (3, 2)
    out = check(module("%x: Tensor[(3, 4, 5), float32], %i: Tensor[(2, 3, 2), int32]", "gather_nd(%x, %i)"),
                x, i)
    want = np.array([[x[i[0, a, b], i[1, a, b]] for b in range(2)] for a in range(3)])
    np.testing.assert_array_equal(out, want)
    assert out.shape == (3, 2, 5)


def test_gather_nd_batch_dims_and_scalar_result():
    x = rng.standard_normal((3, 4, 5)).astype("float32")
    i = np.array([[[1, 3], [0, 0], [2, 1]]], "int64")      # M = 1, Y = (3, 2), batch along axis 0
    mod = module("%x: Tensor[(3, 4, 5), float32], %i: Tensor[(1, 3, 2), int64], %j: Tensor[(3), int32]",
                 "(gather_nd(%x, %i, batch_dims=1), gather_nd(%x, %j))")
    batched, scalar = check(mod, x, i, np.array([2, 3, 4], "int32"))
    want = np.array([[x[a, i[0, a, b]] for b in range(2)] for a in range(3)])
    np.testing.assert_array_equal(batched, want)
    # indices of shape (M,) pick one element: a scalar, not a 1-element array
    assert scalar.shape == () and scalar == x[2, 3, 4]


def test_gather_nd_relation_errors():
    assert infer_expr(op.gather_nd(v("x", 3, 4, 5), v("i", 2, 7, dtype="int32"))) == T(7, 5)
    with raises("gather_nd: indices Tensor[(4, 7), int32] give 4 coordinates after batch_dims=0, "
                "but the data"):
        infer_expr(op.gather_nd(v("x", 3, 4, 5), v("i", 4, 7, dtype="int32")))
    with raises("gather_nd: indices must have an integer dtype"):
        infer_expr(op.gather_nd(v("x", 3, 4, 5), v("i", 2, 7)))
    with raises("gather_nd: batch dimension 0 differs"):
        infer_expr(op.gather_nd(v("x", 3, 4, 5), v("i", 1, 2, dtype="int32"), batch_dims=1))
    x = np.zeros((2, 2), "float32")
    with pytest.raises(Exception, match="index 5 is out of range for an axis of extent 2"):
        rb.create_executor("interpreter", mod=module(
            "%x: Tensor[(2, 2), float32], %i: Tensor[(2, 1), int32]", "gather_nd(%x, %i)")).evaluate()(
            x, np.array([[5], [0]], "int32"))


def test_scatter_nd_update_and_add_against_loops():
    x = rng.integers(-4, 5, (4, 3)).astype("float32")
    i = np.array([[1, 3, 1, 0, 1]], "int32")           # position 1 is written three times
    u = rng.integers(-4, 5, (5, 3)).astype("float32")
    mod = module("%x: Tensor[(4, 3), float32], %i: Tensor[(1, 5), int32], %u: Tensor[(5, 3), float32]",
                 '(scatter_nd(%x, %i, %u), scatter_nd(%x, %i, %u, mode="add"))')
    upd, add = check(mod, x, i, u)
    want_upd, want_add = x.copy(), x.copy()
    for k in range(5):                                  # in order: the last write wins
        want_upd[i[0, k]] = u[k]
        want_add[i[0, k]] += u[k]
    np.testing.assert_array_equal(upd, want_upd)
    np.testing.assert_array_equal(add, want_add)
    assert get_opdef("scatter_nd").pattern == OpPattern.OPAQUE


def test_scatter_nd_reductions_against_loops():
    x = rng.integers(-4, 5, (3, 2)).astype("int32")
    i = np.array([[2, 0, 2, 2]], "int64")
    u = rng.integers(-4, 5, (4, 2)).astype("int32")
    mod = module("%x: Tensor[(3, 2), int32], %i: Tensor[(1, 4), int64], %u: Tensor[(4, 2), int32]",
                 '(scatter_nd(%x, %i, %u, mode="mul"), scatter_nd(%x, %i, %u, mode="min"), '
                 'scatter_nd(%x, %i, %u, mode="max"))')
    got = check(mod, x, i, u)
    for result, combine in zip(got, (lambda a, b: a * b, min, max)):
        want = x.copy()
        for k in range(4):
            for c in range(2):
                want[i[0, k], c] = combine(want[i[0, k], c], u[k, c])
        np.testing.assert_array_equal(result, want)


def test_scatter_nd_full_coordinates_int():
    x = np.zeros((2, 3), "int32")
    i = np.array([[0, 1], [2, 0]], "int64")             # (0, 2) and (1, 0)
    out = check(module("%x: Tensor[(2, 3), int32], %i: Tensor[(2, 2), int64], %u: Tensor[(2), int32]",
                       "scatter_nd(%x, %i, %u)"), x, i, np.array([7, -9], "int32"))
    assert out.tolist() == [[0, 0, 7], [-9, 0, 0]]


def test_scatter_nd_relation_errors():
    with raises("scatter_nd: updates Tensor[(5, 2), float32] must have the shape (5, 3)"):
        infer_expr(op.scatter_nd(v("x", 4, 3), v("i", 1, 5, dtype="int32"), v("u", 5, 2)))
    with raises("scatter_nd: updates have dtype float64 but the data has float32"):
        infer_expr(op.scatter_nd(v("x", 4, 3), v("i", 1, 5, dtype="int32"), v("u", 5, 3, dtype="float64")))
    with pytest.raises(ValueError, match="scatter_nd: mode must be one of 'update', 'add', 'mul'"):
        op.scatter_nd(v("x", 4, 3), v("i", 1, 5, dtype="int32"), v("u", 5, 3), mode="div")
    with raises("scatter_nd: mode='max' needs a numeric data tensor, got bool"):
        infer_expr(op.scatter_nd(v("x", 4, dtype="bool"), v("i", 1, 5, dtype="int32"), v("u", 5, dtype="bool"),
                                 mode="max"))


# ---- ndarray_size, reverse ---------------------------------------------------------------------

def test_ndarray_size_and_reverse():
    x = rng.standard_normal((4, 3)).astype("float32")
    size, rev = check(module("%x: Tensor[(4, 3), float32]",
                             '(ndarray_size(%x, dtype="int64"), reverse(%x, axis=-1))'), x)
    assert size.dtype == np.int64 and size.shape == () and size == 12
    np.testing.assert_array_equal(rev, x[:, ::-1])
    assert infer_expr(op.ndarray_size(v("x", "n", 3))) == T(dtype="int32")
    with raises("reverse: axis 2 is out of range for rank 2"):
        infer_expr(op.reverse(v("x", 4, 3), axis=2))


# ---- cumsum, cumprod ---------------------------------------------------------------------------

def test_cumsum_cumprod_hand_computed():
    x = np.array([[1, 2, 3], [4, 5, 6]], "int32")
    mod = module("%x: Tensor[(2, 3), int32]",
                 '(cumsum(%x, axis=1), cumsum(%x), cumprod(%x, axis=0, exclusive=True), '
                 'cumsum(%x, axis=1, exclusive=True, dtype="float64"), cumprod(%x, axis=1, dtype="int8"))')
    rows, flat, prod_excl, excl, small = check(mod, x)
    assert rows.tolist() == [[1, 3, 6], [4, 9, 15]]
    assert flat.tolist() == [1, 3, 6, 10, 15, 21]
    assert prod_excl.tolist() == [[1, 1, 1], [1, 2, 3]]
    assert excl.dtype == np.float64 and excl.tolist() == [[0, 1, 3], [0, 4, 9]]
    assert small.dtype == np.int8 and small.tolist() == [[1, 2, 6], [4, 20, 120]]   # 4*5*6 = 120 fits


def test_cumsum_wraps_and_relations():
    x = np.array([100, 100, 100], "int8")
    out = check(module("%x: Tensor[(3), int8]", "cumsum(%x, axis=0)"), x)
    assert out.tolist() == [100, -56, 44]                # 200 and 300 wrapped to 8 bits
    assert infer_expr(op.cumsum(v("x", 2, 3, 4))) == T(24)
    assert infer_expr(op.cumprod(v("x", 2, 3), axis=0, dtype="float64")) == T(2, 3, dtype="float64")
    with raises("cumsum: axis 2 is out of range for rank 2"):
        infer_expr(op.cumsum(v("x", 2, 3), axis=2))


# ---- sort, argsort, topk -----------------------------------------------------------------------

def test_sort_argsort_topk_with_ties():
    x = np.array([[3, 1, 2, 1, 3]], "float32")
    mod = module("%x: Tensor[(1, 5), float32]",
                 '(sort(%x), argsort(%x), argsort(%x, is_ascend=False, dtype="int64"), '
                 'topk(%x, k=3), topk(%x, k=2, ret_type="indices", is_ascend=True), '
                 'sort(%x, is_ascend=False))')
    srt, asc, desc, (values, indices), small, srt_desc = check(mod, x)
    assert srt.tolist() == [[1, 1, 2, 3, 3]]
    assert asc.tolist() == [[1, 3, 2, 0, 4]]              # equal elements keep their order
    assert desc.dtype == np.int64 and desc.tolist() == [[0, 4, 2, 1, 3]]
    assert values.tolist() == [[3, 3, 2]] and indices.tolist() == [[0, 4, 2]]
    assert small.tolist() == [[1, 3]]
    assert srt_desc.tolist() == [[3, 3, 2, 1, 1]]


def test_sort_against_python_sorted():
    x = rng.integers(-5, 6, (3, 4, 6)).astype("int32")
    mod = module("%x: Tensor[(3, 4, 6), int32]", "(argsort(%x, axis=1), topk(%x, k=0, axis=-1))")
    order, (values, indices) = check(mod, x)
    for a, c in itertools.product(range(3), range(6)):
        column = list(x[a, :, c])
        assert list(order[a, :, c]) == sorted(range(4), key=lambda k: (column[k], k))
    for a, b in itertools.product(range(3), range(4)):
        row = list(x[a, b])
        want = sorted(range(6), key=lambda k: (-row[k], k))
        assert list(indices[a, b]) == want and list(values[a, b]) == [row[k] for k in want]


def test_sorting_relations():
    assert infer_expr(op.topk(v("x", 3, 5), k=2)) == TupleType([T(3, 2), T(3, 2, dtype="int32")])
    assert infer_expr(op.topk(v("x", 3, 5), k=0, ret_type="values", axis=0)) == T(3, 5)
    assert infer_expr(op.argsort(v("x", 3, 5), dtype="int64")) == T(3, 5, dtype="int64")
    with raises("topk: k=6 is larger than the extent 5 of axis -1"):
        infer_expr(op.topk(v("x", 3, 5), k=6))
    with raises("sort: sorting needs a numeric tensor"):
        infer_expr(op.sort(v("x", 3, dtype="bool")))
    with pytest.raises(ValueError, match="argsort: dtype must be an integer dtype"):
        op.argsort(v("x", 3), dtype="float32")


# ---- collapse_sum_like, collapse_sum_to ----------------------------------------------------------

def test_collapse_sum_hand_computed():
    x = np.arange(24, dtype="float32").reshape(2, 4, 3)
    xv, yv = v("x", 2, 4, 3), v("y", 4, 1)
    mod = rb.IRModule.from_expr(rb.Function([xv, yv], rb.ir.Tuple([
        op.collapse_sum_like(xv, yv), op.collapse_sum_to(xv, (1, 3)), op.collapse_sum_to(xv, (2, 4, 3))])))
    like, to, same = check(mod, x, np.zeros((4, 1), "float32"))
    np.testing.assert_array_equal(like, x.sum(axis=0).sum(axis=1, keepdims=True))
    assert to.tolist() == [[x[:, :, c].sum() for c in range(3)]]
    np.testing.assert_array_equal(same, x)
    assert get_opdef("collapse_sum_like").pattern == OpPattern.COMM_REDUCE


def test_collapse_sum_relations():
    assert infer_expr(op.collapse_sum_to(v("x", 2, 4, 3), (4, 1))) == T(4, 1)
    with raises("collapse_sum_like: collapse_type Tensor[(5), float32] does not broadcast to the data "
                "Tensor[(2, 4, 3), float32] (axis 2: 5 vs 3)"):
        infer_expr(op.collapse_sum_like(v("x", 2, 4, 3), v("y", 5)))
    with raises("collapse_sum_to: shape (2, 2, 4, 3) has more axes than the data"):
        infer_expr(op.collapse_sum_to(v("x", 2, 4, 3), (2, 2, 4, 3)))
    with raises("collapse_sum_like: collapse_type Tensor[(3), int32] has another dtype than the data"):
        infer_expr(op.collapse_sum_like(v("x", 2, 4, 3), v("y", 3, dtype="int32")))


# ---- image.resize1d, image.resize3d --------------------------------------------------------------

def test_resize1d_linear_half_pixel_against_interp():
    x = rng.standard_normal((2, 3, 7)).astype("float32")
    out = check(module("%x: Tensor[(2, 3, 7), float32]", "image.resize1d(%x, size=[11])"), x,
                rtol=1e-6, atol=1e-6)
    coords = np.clip((np.arange(11) + 0.5) * 7 / 11 - 0.5, 0, 6)   # clamped at the borders
    want = np.stack([[np.interp(coords, np.arange(7), x[b, c]) for c in range(3)] for b in range(2)])
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_resize1d_nearest_nwc_and_cubic():
    x = np.arange(24, dtype="float32").reshape(1, 8, 3)        # NWC: the value at (w, c) is 3w + c
    mod = module("%x: Tensor[(1, 8, 3), float32]",
                 '(image.resize1d(%x, size=[16], layout="NWC", method="nearest_neighbor", '
                 'coordinate_transformation_mode="asymmetric"), '
                 'image.resize1d(%x, size=[15], layout="NWC", method="cubic", '
                 'coordinate_transformation_mode="align_corners"))')
    near, cubic = check(mod, x, rtol=1e-6, atol=1e-5)
    np.testing.assert_array_equal(near, x.repeat(2, axis=1))
    # output k samples w = k / 2; away from the borders (all four neighbours inside the image)
    # the cubic convolution (alpha = -0.5) reproduces the linear ramp exactly
    w = np.arange(2, 10) / 2
    np.testing.assert_allclose(cubic[0, 2:10], 3 * w[:, None] + np.arange(3), rtol=1e-6, atol=1e-5)


def test_resize3d_nearest_against_index_formula():
    x = rng.standard_normal((1, 2, 3, 4, 5)).astype("float32")
    out = check(module("%x: Tensor[(1, 2, 3, 4, 5), float32]",
                       'image.resize3d(%x, size=[5, 2, 7], method="nearest_neighbor")'), x)
    idx = [np.clip(np.floor((np.arange(o) + 0.5) * n / o - 0.5 + 1e-5).astype(int), 0, n - 1)
           for o, n in ((5, 3), (2, 4), (7, 5))]
    want = x[:, :, idx[0][:, None, None], idx[1][None, :, None], idx[2][None, None, :]]
    np.testing.assert_array_equal(out, want)


def test_resize_nd_relations():
    assert infer_expr(op.image.resize1d(v("x", 2, 3, 7), size=5)) == T(2, 3, 5)
    assert infer_expr(op.image.resize3d(v("x", 1, 4, 5, 6, 2), size=(2, 3, 4), layout="NDHWC",
                                        out_dtype="float64")) == T(1, 2, 3, 4, 2, dtype="float64")
    with raises("image.resize1d: size (the output extents of W) is not given"):
        infer_expr(op.image.resize1d(v("x", 2, 3, 7)))
    with pytest.raises(ValueError, match="image.resize3d: roi must have 6 values"):
        op.image.resize3d(v("x", 1, 4, 5, 6, 2), size=(1, 1, 1), roi=(0.0, 1.0))


# ---- annotation.stop_fusion ---------------------------------------------------------------------

def test_stop_fusion_keeps_groups_apart():
    from relaybench.passes.fuse_ops import FuseOps, fused_groups
    text = module("%x: Tensor[(4, 3), float32]", "nn.relu(annotation.stop_fusion(nn.relu(%x)))")
    mod = rb.passes.InferType()(text)
    with rb.PassContext(opt_level=3):
        groups = fused_groups(FuseOps()(mod))
    ops = sorted(tuple(g.ops) if hasattr(g, "ops") else (g.anchor,) for g in groups)
    assert len(groups) == 3, ops               # relu | stop_fusion | relu: no group spans it
    x = rng.standard_normal((4, 3)).astype("float32")
    fresh = module("%x: Tensor[(4, 3), float32]", "nn.relu(annotation.stop_fusion(nn.relu(%x)))")
    np.testing.assert_array_equal(check(fresh, x), np.maximum(x, 0))
    # without it, the two relus are one kernel
    plain = rb.passes.InferType()(module("%x: Tensor[(4, 3), float32]", "nn.relu(nn.relu(%x))"))
    with rb.PassContext(opt_level=3):
        assert len(fused_groups(FuseOps()(plain))) == 1


# ---- isnan, isfinite, isinf, sign, trunc, copy, trunc_divide, trunc_mod ---------------------------

def test_float_tests_sign_trunc_hand_computed():
    x = np.array([np.nan, np.inf, -np.inf, -2.5, -0.0, 3.75], "float32")
    mod = module("%x: Tensor[(6), float32]",
                 "(isnan(%x), isfinite(%x), isinf(%x), sign(%x), trunc(%x), copy(%x))")
    nan, finite, inf, sgn, tr, cp = check(mod, x)
    assert nan.tolist() == [True, False, False, False, False, False]
    assert finite.tolist() == [False, False, False, True, True, True]
    assert inf.tolist() == [False, True, True, False, False, False]
    np.testing.assert_array_equal(sgn, [0, 1, -1, -1, 0, 1])           # NaN gives 0, as TVM's select
    np.testing.assert_array_equal(tr, [np.nan, np.inf, -np.inf, -2, 0, 3])
    np.testing.assert_array_equal(cp, x)


def test_integer_tests_and_trunc_division():
    i = np.array([-7, 7, -7, 7, 0, 5], "int32")
    j = np.array([2, -2, -2, 2, 3, 1], "int32")
    mod = module("%i: Tensor[(6), int32], %j: Tensor[(6), int32]",
                 "(isnan(%i), isfinite(%i), sign(%i), trunc_divide(%i, %j), trunc_mod(%i, %j))")
    nan, finite, sgn, q, r = check(mod, i, j)
    assert not nan.any() and finite.all()
    assert sgn.tolist() == [-1, 1, -1, 1, 0, 1]
    assert q.tolist() == [-3, -3, 3, 3, 0, 5]          # toward zero: -7 / 2 == -3
    assert r.tolist() == [-1, 1, -1, 1, 0, 0]          # the sign of the dividend
    f = np.array([-7.5, 7.5], "float64")
    q, r = check(module("%a: Tensor[(2), float64], %b: Tensor[(2), float64]",
                        "(trunc_divide(%a, %b), trunc_mod(%a, %b))"), f, np.array([2.0, -2.0]))
    assert q.tolist() == [-3.0, -3.0] and r.tolist() == [-1.5, 1.5]
    with raises("isnan: data must be a numeric (integer or floating-point) tensor"):
        infer_expr(op.isnan(v("b", 3, dtype="bool")))


# ---- broadcast_to_like, slice_like ---------------------------------------------------------------

def test_broadcast_to_like_and_slice_like():
    x = rng.standard_normal((3, 1)).astype("float32")
    y = rng.standard_normal((2, 5, 4)).astype("float32")
    mod = module("%x: Tensor[(3, 1), float32], %l: Tensor[(2, 3, 4), int32], %y: Tensor[(2, 5, 4), float32], "
                 "%s: Tensor[(1, 3), float64]",
                 "(broadcast_to_like(%x, %l), slice_like(%y, %s), slice_like(%y, %l, axes=[-2]))")
    b, s_all, s_one = check(mod, x, np.zeros((2, 3, 4), "int32"), y, np.zeros((1, 3)))
    np.testing.assert_array_equal(b, np.tile(x, (2, 1, 4)))
    np.testing.assert_array_equal(s_all, y[:1, :3])
    np.testing.assert_array_equal(s_one, y[:, :3])
    with raises("broadcast_to_like: cannot broadcast Tensor[(3, 2), float32] to Tensor[(2, 3, 4), int32]"):
        infer_expr(op.broadcast_to_like(v("x", 3, 2), v("l", 2, 3, 4, dtype="int32")))
    with raises("slice_like: shape_like Tensor[(2, 6), float32] is larger than the data"):
        infer_expr(op.slice_like(v("y", 2, 5, 4), v("s", 2, 6)))
