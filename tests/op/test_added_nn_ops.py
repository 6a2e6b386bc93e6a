"""nn.conv1d/conv3d, the 1-D and 3-D poolings, the adaptive poolings, nn.upsampling(3d),
nn.space_to_depth and nn.depth_to_space: the references against formulas written here (plain
loops over tiny shapes, or hand-computed values), the type relations and their errors, the
compiled path against the interpreter, and the text format."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relaybench import op
from relaybench.ir import SymVar, var
from relaybench.ir.type_infer import infer_expr
from relaybench.ir.types import TensorType
from relaybench.op.registry import OpPattern, get_opdef

from _added_helpers import check, module, raises

rng = np.random.default_rng(20)
n = SymVar("n")


def T(*shape, dtype="float32"):
    return TensorType(shape, dtype)


def v(name, *shape, dtype="float32"):
    return var(name, shape=shape, dtype=dtype)


# ---- independent formulas: loops over output positions, NC<spatial> layouts ----------------

def naive_conv(x, w, strides, pads, dilation, groups):
    """Direct convolution: every output element summed tap by tap (float64)."""
    n_sp = x.ndim - 2
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(pads[i], pads[n_sp + i]) for i in range(n_sp)])
    o, cg = w.shape[:2]
    ks = w.shape[2:]
    outs = [(xp.shape[2 + i] - ((ks[i] - 1) * dilation[i] + 1)) // strides[i] + 1 for i in range(n_sp)]
    y = np.zeros((x.shape[0], o) + tuple(outs))
    og = o // groups
    for b, oc in itertools.product(range(x.shape[0]), range(o)):
        g = oc // og
        for pos in itertools.product(*[range(e) for e in outs]):
            total = 0.0
            for ic in range(cg):
                for tap in itertools.product(*[range(k) for k in ks]):
                    at = tuple(p * s + t * d for p, s, t, d in zip(pos, strides, tap, dilation))
                    total += xp[(b, g * cg + ic) + at] * w[(oc, ic) + tap]
            y[(b, oc) + pos] = total
    return y


def naive_pool(x, kind, size, strides, pads, dilation=None, ceil=False, include_pad=False):
    n_sp = x.ndim - 2
    dilation = dilation or (1,) * n_sp
    outs = []
    for i in range(n_sp):
        span = x.shape[2 + i] + pads[i] + pads[n_sp + i] - ((size[i] - 1) * dilation[i] + 1)
        outs.append((span + (strides[i] - 1 if ceil else 0)) // strides[i] + 1)
    y = np.zeros(x.shape[:2] + tuple(outs))
    for b, c in itertools.product(range(x.shape[0]), range(x.shape[1])):
        for pos in itertools.product(*[range(e) for e in outs]):
            values, count = [], 0
            for tap in itertools.product(*[range(k) for k in size]):
                at = [p * s + t * d - pads[i]
                      for i, (p, s, t, d) in enumerate(zip(pos, strides, tap, dilation))]
                inside = all(0 <= a < x.shape[2 + i] for i, a in enumerate(at))
                on_pad = all(-pads[i] <= a < x.shape[2 + i] + pads[n_sp + i] for i, a in enumerate(at))
                if inside:
                    values.append(x[(b, c) + tuple(at)])
                count += inside or (include_pad and on_pad)
            y[(b, c) + pos] = max(values) if kind == "max" else sum(values) / max(count, 1)
    return y


def adaptive_bins(n, o):
    return [(i * n // o, -(-(i + 1) * n // o)) for i in range(o)]


def naive_adaptive(x, kind, sizes):
    y = np.zeros(x.shape[:2] + tuple(sizes))
    bins = [adaptive_bins(n, o) for n, o in zip(x.shape[2:], sizes)]
    for pos in itertools.product(*[range(o) for o in sizes]):
        box = x[(slice(None), slice(None)) + tuple(slice(*bins[i][p]) for i, p in enumerate(pos))]
        axes = tuple(range(2, x.ndim))
        y[(slice(None), slice(None)) + pos] = box.max(axis=axes) if kind == "max" else box.mean(axis=axes)
    return y


# ---- nn.conv1d, nn.conv3d -----------------------------------------------------------------

def test_conv3d_hand_computed():
    # a 2x2x2 volume of ones, a 2x2x2 kernel of ones: one output holding the sum, 8
    x = np.ones((1, 1, 2, 2, 2), "float32")
    w = np.ones((1, 1, 2, 2, 2), "float32")
    out = check(module("%x: Tensor[(1, 1, 2, 2, 2), float32], %w: Tensor[(1, 1, 2, 2, 2), float32]",
                       "nn.conv3d(%x, %w)"), x, w)
    assert out.tolist() == [[[[[8.0]]]]]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_conv3d_against_loops(dtype):
    x = rng.integers(-3, 4, (2, 4, 3, 4, 5)).astype(dtype)
    w = rng.integers(-2, 3, (6, 2, 2, 1, 3)).astype(dtype)
    mod = module(f"%x: Tensor[(2, 4, 3, 4, 5), {dtype}], %w: Tensor[(6, 2, 2, 1, 3), {dtype}]",
                 "nn.conv3d(%x, %w, strides=[1, 2, 1], padding=[1, 0, 1, 0, 1, 2], "
                 "dilation=[2, 1, 1], groups=2, channels=6, kernel_size=[2, 1, 3])")
    out = check(mod, x, w)
    np.testing.assert_array_equal(out, naive_conv(x, w, (1, 2, 1), (1, 0, 1, 0, 1, 2), (2, 1, 1), 2))


def test_conv3d_ndhwc_dhwio():
    x = rng.standard_normal((1, 3, 4, 5, 2)).astype("float32")
    w = rng.standard_normal((2, 2, 3, 2, 4)).astype("float32")
    mod = module("%x: Tensor[(1, 3, 4, 5, 2), float32], %w: Tensor[(2, 2, 3, 2, 4), float32]",
                 'nn.conv3d(%x, %w, padding=[1], data_layout="NDHWC", kernel_layout="DHWIO")')
    out = check(mod, x, w, rtol=1e-5, atol=1e-5)
    want = naive_conv(x.transpose(0, 4, 1, 2, 3), w.transpose(4, 3, 0, 1, 2), (1, 1, 1), (1,) * 6,
                      (1, 1, 1), 1)
    np.testing.assert_allclose(out, want.transpose(0, 2, 3, 4, 1), rtol=1e-5, atol=1e-5)


def test_conv1d_against_loops():
    x = rng.integers(-3, 4, (2, 4, 9)).astype("float32")
    w = rng.integers(-2, 3, (6, 2, 3)).astype("float32")
    mod = module("%x: Tensor[(2, 4, 9), float32], %w: Tensor[(6, 2, 3), float32]",
                 "nn.conv1d(%x, %w, strides=[2], padding=[1, 2], dilation=[2], groups=2)")
    np.testing.assert_array_equal(check(mod, x, w), naive_conv(x, w, (2,), (1, 2), (2,), 2))


def test_conv_nd_relations():
    x = v("x", 1, 3, 8, 8, 8)
    w = var("w")
    y = op.nn.conv3d(x, w, strides=2, padding=1, channels=4, kernel_size=3)
    assert infer_expr(y) == T(1, 4, 4, 4, 4)
    assert w.checked_type == T(4, 3, 3, 3, 3)        # implied by channels and kernel_size
    assert op.nn.conv3d(x, v("w2", 4, 3, 3, 3, 3), padding=(1, 2, 0)).attrs.padding == (1, 2, 0, 1, 2, 0)
    assert infer_expr(op.nn.conv1d(v("s", n, 8, 10), v("k", 16, 8, 3))) == T(n, 16, 8)
    assert get_opdef("nn.conv3d").pattern == OpPattern.OUT_ELEMWISE_FUSABLE


def test_conv_nd_errors():
    with raises("nn.conv3d: data has 3 input channels but the weight expects 4"):
        infer_expr(op.nn.conv3d(v("x", 1, 3, 4, 4, 4), v("w", 2, 4, 1, 1, 1)))
    with raises("nn.conv3d: data Tensor[(1, 3, 4, 4), float32] has rank 4 but data_layout NCDHW "
                "needs rank 5"):
        infer_expr(op.nn.conv3d(v("x", 1, 3, 4, 4), v("w", 2, 3, 1, 1, 1)))
    with raises("nn.conv1d: the kernel's width (5 with dilation) is larger than the padded input's "
                "width (4)"):
        infer_expr(op.nn.conv1d(v("x", 1, 3, 4), v("w", 2, 3, 5)))
    with pytest.raises(ValueError, match="nn.conv3d: padding must have 1 or 3 or 6 values"):
        op.nn.conv3d(v("x", 1, 3, 4, 4, 4), v("w", 2, 3, 1, 1, 1), padding=(1, 1))
    with pytest.raises(ValueError, match="kernel_layout='OIHW' must have the axes O, I, D, H, W"):
        op.nn.conv3d(v("x", 1, 3, 4, 4, 4), v("w", 2, 3, 1, 1, 1), kernel_layout="OIHW")


# ---- poolings ---------------------------------------------------------------------------

@pytest.mark.parametrize("ceil", [False, True])
def test_max_avg_pool3d_against_loops(ceil):
    x = rng.integers(-8, 9, (1, 2, 5, 4, 6)).astype("float32")
    attrs = "pool_size=[2, 3, 2], strides=[2, 1, 2], padding=[1, 0, 1, 0, 1, 1]"
    ceil_text = ", ceil_mode=True" if ceil else ""
    mod = module("%x: Tensor[(1, 2, 5, 4, 6), float32]",
                 f"(nn.max_pool3d(%x, {attrs}{ceil_text}), nn.avg_pool3d(%x, {attrs}{ceil_text}), "
                 f"nn.avg_pool3d(%x, {attrs}{ceil_text}, count_include_pad=True))")
    mx, avg, avg_pad = check(mod, x, rtol=1e-6, atol=1e-6)
    args = ((2, 3, 2), (2, 1, 2), (1, 0, 1, 0, 1, 1))
    np.testing.assert_array_equal(mx, naive_pool(x, "max", *args, ceil=ceil))
    np.testing.assert_allclose(avg, naive_pool(x, "avg", *args, ceil=ceil), rtol=1e-6)
    np.testing.assert_allclose(avg_pad, naive_pool(x, "avg", *args, ceil=ceil, include_pad=True), rtol=1e-6)


def test_pool1d_hand_computed_and_int():
    x = np.array([[[1, 5, 2, 8, 3]]], "int32")
    mod = module("%x: Tensor[(1, 1, 5), int32]",
                 "(nn.max_pool1d(%x, pool_size=[2], strides=[2], padding=[0, 1]), "
                 "nn.avg_pool1d(%x, pool_size=[3], padding=[1], count_include_pad=True))")
    mx, avg = check(mod, x)
    assert mx.tolist() == [[[5, 8, 3]]]
    # windows (0, 1, 5) (1, 5, 2) (5, 2, 8) (2, 8, 3) (8, 3, 0), divided by 3, truncated
    assert avg.tolist() == [[[2, 2, 5, 4, 3]]]


def test_pool3d_ndhwc_and_dilation():
    x = rng.standard_normal((1, 5, 6, 4, 3)).astype("float64")
    mod = module("%x: Tensor[(1, 5, 6, 4, 3), float64]",
                 'nn.max_pool3d(%x, pool_size=[2, 2, 2], dilation=[2, 1, 1], layout="NDHWC", '
                 'out_layout="NCDHW")')
    out = check(mod, x)
    np.testing.assert_array_equal(out, naive_pool(x.transpose(0, 4, 1, 2, 3), "max", (2, 2, 2), (1, 1, 1),
                                                  (0,) * 6, dilation=(2, 1, 1)))


def test_pool_nd_relations_and_errors():
    assert infer_expr(op.nn.max_pool3d(v("x", n, 3, 8, 8, 8), pool_size=2, strides=2)) == T(n, 3, 4, 4, 4)
    assert infer_expr(op.nn.avg_pool1d(v("x", 2, 9, 3), pool_size=3, layout="NWC")) == T(2, 7, 3)
    with raises("nn.max_pool3d: the pooling window's depth (5 with dilation) is larger than the "
                "padded input's depth (4)"):
        infer_expr(op.nn.max_pool3d(v("x", 1, 1, 4, 8, 8), pool_size=(5, 1, 1)))
    with raises("nn.avg_pool1d: data Tensor[(1, 2, 3, 4), float32] has rank 4 but layout NCW needs rank 3"):
        infer_expr(op.nn.avg_pool1d(v("x", 1, 2, 3, 4)))
    with pytest.raises(ValueError, match="splits D into blocks"):
        op.nn.max_pool3d(v("x", 1, 1, 4, 4, 4, 4), layout="NCDHW4d")


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("rank,shape,sizes", [(1, (2, 3, 7), (3,)), (2, (1, 2, 5, 7), (3, 2)),
                                              (3, (1, 2, 5, 4, 3), (2, 3, 2))])
def test_adaptive_pools_against_loops(kind, rank, shape, sizes):
    x = rng.integers(-8, 9, shape).astype("float32")
    name = f"nn.adaptive_{kind}_pool{rank}d"
    mod = module(f"%x: Tensor[{shape}, float32]", f"{name}(%x, output_size={list(sizes)})")
    out = check(mod, x, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out, naive_adaptive(x, kind, sizes), rtol=1e-6)


def test_adaptive_pool_relations():
    assert infer_expr(op.nn.adaptive_max_pool3d(v("x", 1, 3, 8, 9, 10), output_size=2)) == T(1, 3, 2, 2, 2)
    assert infer_expr(op.nn.adaptive_avg_pool3d(v("x", 1, 3, 8, 9, 10))) == T(1, 3, 8, 9, 10)
    assert infer_expr(op.nn.adaptive_max_pool2d(v("x", 1, 8, 9, 3), output_size=(4, None),
                                                layout="NHWC")) == T(1, 4, 9, 3)
    assert infer_expr(op.nn.adaptive_avg_pool1d(v("x", 1, 3, 8), output_size=5)) == T(1, 3, 5)
    with pytest.raises(ValueError, match="output_size must have 1 or 3 values"):
        op.nn.adaptive_avg_pool3d(v("x", 1, 3, 8, 9, 10), output_size=(1, 2))
    with raises("nn.adaptive_max_pool1d: data Tensor[(1, 3), float32] has rank 2 but layout NCW "
                "needs rank 3"):
        infer_expr(op.nn.adaptive_max_pool1d(v("x", 1, 3), output_size=2))


# ---- upsampling ----------------------------------------------------------------------------

def test_upsampling_nearest_repeats():
    x = np.arange(6, dtype="float32").reshape(1, 1, 2, 3)
    out = check(module("%x: Tensor[(1, 1, 2, 3), float32]", "nn.upsampling(%x, scale_h=2f, scale_w=2f)"), x)
    np.testing.assert_array_equal(out, x.repeat(2, axis=2).repeat(2, axis=3))


def test_upsampling_bilinear_align_corners():
    # align_corners: output i of o samples input i * (n - 1) / (o - 1), linear between neighbours
    x = rng.standard_normal((1, 2, 3, 4)).astype("float32")
    out = check(module("%x: Tensor[(1, 2, 3, 4), float32]",
                       'nn.upsampling(%x, scale_h=2f, scale_w=1.5f, method="bilinear", align_corners=True)'),
                x, rtol=1e-5, atol=1e-6)
    assert out.shape == (1, 2, 6, 6)
    rows, cols = np.linspace(0, 2, 6), np.linspace(0, 3, 6)
    by_row = np.stack([[np.interp(rows, np.arange(3), x[0, c, :, j]) for j in range(4)] for c in range(2)])
    want = np.stack([[np.interp(cols, np.arange(4), by_row[c, :, i]) for i in range(6)] for c in range(2)])
    np.testing.assert_allclose(out[0], want, rtol=1e-5, atol=1e-5)


def test_upsampling_output_extent_rounds_half_to_even():
    # round(5 * 0.5) = round(2.5) = 2 (nearbyint), round(3 * 1.5) = round(4.5) = 4
    assert infer_expr(op.nn.upsampling(v("x", 1, 1, 5, 3), scale_h=0.5, scale_w=1.5)) == T(1, 1, 2, 4)
    with raises("nn.upsampling: the output's height would be 0 (1 * 0.25)"):
        infer_expr(op.nn.upsampling(v("x", 1, 1, 1, 3), scale_h=0.25))
    with pytest.raises(ValueError, match="nn.upsampling: method must be one of"):
        op.nn.upsampling(v("x", 1, 1, 1, 3), method="trilinear")


def test_upsampling3d_nearest_and_trilinear():
    x = np.arange(8, dtype="float32").reshape(1, 1, 2, 2, 2)
    mod = module("%x: Tensor[(1, 1, 2, 2, 2), float32]",
                 '(nn.upsampling3d(%x, scale_d=2f, scale_h=2f, scale_w=2f, '
                 'coordinate_transformation_mode="asymmetric"), '
                 'nn.upsampling3d(%x, scale_d=1.5f, scale_h=1f, scale_w=2f, method="trilinear", '
                 'coordinate_transformation_mode="align_corners"))')
    near, lin = check(mod, x, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(near, x.repeat(2, 2).repeat(2, 3).repeat(2, 4))
    # trilinear on a linear function of the coordinates is that function: 4d + 2h + w
    d, h, w = np.meshgrid(np.linspace(0, 1, 3), np.arange(2), np.linspace(0, 1, 4), indexing="ij")
    np.testing.assert_allclose(lin[0, 0], 4 * d + 2 * h + w, rtol=1e-6, atol=1e-6)
    assert get_opdef("nn.upsampling3d").pattern == OpPattern.INJECTIVE


# ---- space_to_depth, depth_to_space ---------------------------------------------------------

def test_space_to_depth_against_loops_and_back():
    x = rng.standard_normal((2, 3, 4, 6)).astype("float32")
    mod = module("%x: Tensor[(2, 3, 4, 6), float32]",
                 "%0 = nn.space_to_depth(%x, block_size=2);\n  (%0, nn.depth_to_space(%0, block_size=2))")
    s2d, back = check(mod, x)
    want = np.zeros((2, 12, 2, 3), "float32")
    for n, c, y, xx, by, bx in itertools.product(range(2), range(3), range(2), range(3), range(2), range(2)):
        want[n, (by * 2 + bx) * 3 + c, y, xx] = x[n, c, y * 2 + by, xx * 2 + bx]
    np.testing.assert_array_equal(s2d, want)
    np.testing.assert_array_equal(back, x)       # DCR undoes space_to_depth


def test_depth_to_space_crd_nhwc():
    x = rng.standard_normal((1, 2, 3, 8)).astype("float32")
    out = check(module("%x: Tensor[(1, 2, 3, 8), float32]",
                       'nn.depth_to_space(%x, block_size=2, layout="NHWC", mode="CRD")'), x)
    want = np.zeros((1, 4, 6, 2), "float32")
    for y, xx, c in itertools.product(range(4), range(6), range(2)):
        want[0, y, xx, c] = x[0, y // 2, xx // 2, c * 4 + (y % 2) * 2 + xx % 2]
    np.testing.assert_array_equal(out, want)


def test_block_relations_and_errors():
    assert infer_expr(op.nn.space_to_depth(v("x", 1, 3, 4, 6), block_size=2)) == T(1, 12, 2, 3)
    assert infer_expr(op.nn.depth_to_space(v("x", 1, 4, 4, 8), block_size=2, layout="NHWC")) == T(1, 8, 8, 2)
    with raises("nn.space_to_depth: the data's width 5 is not divisible by block_size=2"):
        infer_expr(op.nn.space_to_depth(v("x", 1, 3, 4, 5), block_size=2))
    with raises("nn.depth_to_space: the data's 6 channels are not divisible by block_size**2=4"):
        infer_expr(op.nn.depth_to_space(v("x", 1, 6, 4, 5), block_size=2))


# ---- nn.instance_norm, nn.group_norm, nn.l2_normalize ------------------------------------------

def test_instance_and_group_norm_against_formulas():
    x = rng.standard_normal((2, 6, 3, 4))
    g, b = rng.standard_normal(6), rng.standard_normal(6)
    mod = module("%x: Tensor[(2, 6, 3, 4), float64], %g: Tensor[(6), float64], %b: Tensor[(6), float64]",
                 "(nn.instance_norm(%x, %g, %b), nn.group_norm(%x, %g, %b, num_groups=3, epsilon=0.001f), "
                 "nn.group_norm(%x, %g, %b, num_groups=1, scale=False))")
    inst, grp, one = check(mod, x, g, b, rtol=1e-12, atol=1e-12)
    for n_, c in itertools.product(range(2), range(6)):
        plane = x[n_, c]
        want = (plane - plane.mean()) / np.sqrt(plane.var() + 1e-5) * g[c] + b[c]
        np.testing.assert_allclose(inst[n_, c], want, rtol=1e-10, atol=1e-10)
        block = x[n_, (c // 2) * 2:(c // 2) * 2 + 2]
        want = (x[n_, c] - block.mean()) / np.sqrt(block.var() + 1e-3) * g[c] + b[c]
        np.testing.assert_allclose(grp[n_, c], want, rtol=1e-10, atol=1e-10)
        want = (x[n_, c] - x[n_].mean()) / np.sqrt(x[n_].var() + 1e-5) + b[c]
        np.testing.assert_allclose(one[n_, c], want, rtol=1e-10, atol=1e-10)


def test_group_norm_channels_last_float32():
    x = rng.standard_normal((2, 5, 4)).astype("float32")
    g, b = np.ones(4, "float32"), np.zeros(4, "float32")
    out = check(module("%x: Tensor[(2, 5, 4), float32], %g: Tensor[(4), float32], %b: Tensor[(4), float32]",
                       "nn.group_norm(%x, %g, %b, num_groups=2, axis=-1)"), x, g, b, rtol=1e-5, atol=1e-5)
    for n_, k in itertools.product(range(2), range(2)):
        block = x[n_, :, 2 * k:2 * k + 2].astype(np.float64)
        want = (block - block.mean()) / np.sqrt(block.var() + 1e-5)
        np.testing.assert_allclose(out[n_, :, 2 * k:2 * k + 2], want, rtol=1e-5, atol=1e-5)


def test_l2_normalize_hand_computed():
    x = np.array([[3.0, 4.0], [0.0, 0.0]], "float32")
    mod = module("%x: Tensor[(2, 2), float32]",
                 "(nn.l2_normalize(%x, eps=1e-12f, axis=[1]), nn.l2_normalize(%x, eps=100f))")
    rows, whole = check(mod, x, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(rows, [[0.6, 0.8], [0.0, 0.0]], rtol=1e-6)
    np.testing.assert_allclose(whole, x / 10.0, rtol=1e-6)    # sum of squares 25 < eps = 100


def test_norm_relations_and_errors():
    assert infer_expr(op.nn.instance_norm(v("x", 2, 3, 5), var("g"), var("b"))) == T(2, 3, 5)
    assert infer_expr(op.nn.l2_normalize(v("x", 2, 3), axis=1)) == T(2, 3)
    with raises("nn.group_norm: the data's 6 channels (axis 1) are not divisible by num_groups=4"):
        infer_expr(op.nn.group_norm(v("x", 2, 6, 5), var("g"), var("b"), num_groups=4))
    with raises("nn.instance_norm: axis 0 is the batch axis"):
        infer_expr(op.nn.instance_norm(v("x", 2, 6, 5), var("g"), var("b"), axis=0))
    with raises("nn.group_norm: gamma must be Tensor[(6), float32]"):
        infer_expr(op.nn.group_norm(v("x", 2, 6, 5), v("g", 5), var("b"), num_groups=2))
    with raises("nn.l2_normalize: data must be a floating-point tensor"):
        infer_expr(op.nn.l2_normalize(v("x", 2, 3, dtype="int32")))


# ---- nn.conv1d_transpose, nn.conv3d_transpose, nn.mirror_pad -------------------------------------

def naive_conv_transpose(x, w, strides, pads, out_pads, dilation, groups):
    """Scatter form: every input element adds its kernel-weighted values into the output at
    ``i * stride + k * dilation - pad_before`` (float64)."""
    n_sp = x.ndim - 2
    c, og = w.shape[:2]
    ks = w.shape[2:]
    cg = c // groups
    outs = [(x.shape[2 + j] - 1) * strides[j] + (ks[j] - 1) * dilation[j] + 1 - pads[j] - pads[n_sp + j]
            + out_pads[j] for j in range(n_sp)]
    y = np.zeros((x.shape[0], og * groups) + tuple(outs))
    for b, ic in itertools.product(range(x.shape[0]), range(c)):
        g = ic // cg
        for pos in itertools.product(*[range(e) for e in x.shape[2:]]):
            for o in range(og):
                for tap in itertools.product(*[range(k) for k in ks]):
                    at = [p * s + t * d - pads[j]
                          for j, (p, s, t, d) in enumerate(zip(pos, strides, tap, dilation))]
                    if all(0 <= a < e for a, e in zip(at, outs)):
                        y[(b, g * og + o) + tuple(at)] += x[(b, ic) + pos] * w[(ic, o) + tap]
    return y


def test_conv1d_transpose_against_scatter_loops():
    x = rng.integers(-3, 4, (2, 4, 5)).astype("float32")
    w = rng.integers(-2, 3, (4, 3, 3)).astype("float32")
    mod = module("%x: Tensor[(2, 4, 5), float32], %w: Tensor[(4, 3, 3), float32]",
                 "nn.conv1d_transpose(%x, %w, strides=[2], padding=[1, 0], output_padding=[1], groups=2)")
    out = check(mod, x, w)
    np.testing.assert_array_equal(out, naive_conv_transpose(x, w, (2,), (1, 0), (1,), (1,), 2))


def test_conv3d_transpose_against_scatter_loops():
    x = rng.integers(-3, 4, (1, 2, 3, 2, 4)).astype("float64")
    w = rng.integers(-2, 3, (2, 2, 2, 1, 3)).astype("float64")
    mod = module("%x: Tensor[(1, 2, 3, 2, 4), float64], %w: Tensor[(2, 2, 2, 1, 3), float64]",
                 "nn.conv3d_transpose(%x, %w, strides=[1, 2, 2], padding=[0, 1, 1], dilation=[2, 1, 1], "
                 "channels=2, kernel_size=[2, 1, 3])")
    out = check(mod, x, w)
    np.testing.assert_array_equal(out, naive_conv_transpose(x, w, (1, 2, 2), (0, 1, 1, 0, 1, 1), (0, 0, 0),
                                                            (2, 1, 1), 1))


def test_conv_transpose_nd_relations():
    w = var("w")
    assert infer_expr(op.nn.conv1d_transpose(v("x", 1, 4, 7), w, strides=2, channels=6, kernel_size=3)) == \
        T(1, 6, 15)
    assert w.checked_type == T(4, 6, 3)                 # IOW: [C, channels / groups, k]
    with raises("nn.conv3d_transpose: data has 3 input channels but the weight expects 2"):
        infer_expr(op.nn.conv3d_transpose(v("x", 1, 3, 2, 2, 2), v("w", 2, 1, 1, 1, 1)))
    with pytest.raises(ValueError, match="output_padding=\\(2,\\) must be smaller than the strides"):
        op.nn.conv1d_transpose(v("x", 1, 4, 7), var("w"), strides=2, output_padding=2)


def test_mirror_pad_hand_computed():
    x = np.array([[1, 2, 3], [4, 5, 6]], "int32")
    mod = module("%x: Tensor[(2, 3), int32]",
                 '(nn.mirror_pad(%x, pad_width=[[1, 0], [2, 1]]), '
                 'nn.mirror_pad(%x, pad_width=[[0, 1], [2, 2]], mode="REFLECT"))')
    sym, ref = check(mod, x)
    assert sym.tolist() == [[2, 1, 1, 2, 3, 3], [2, 1, 1, 2, 3, 3], [5, 4, 4, 5, 6, 6]]
    assert ref.tolist() == [[3, 2, 1, 2, 3, 2, 1], [6, 5, 4, 5, 6, 5, 4], [3, 2, 1, 2, 3, 2, 1]]
    with raises("nn.mirror_pad: REFLECT padding (0, 3) of axis 1 must be at most 2"):
        infer_expr(op.nn.mirror_pad(v("x", 2, 3), pad_width=((0, 0), (0, 3)), mode="REFLECT"))


# ---- shape relations, property-based ------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 9), st.integers(1, 3), st.integers(1, 3), st.integers(1, 2),
                          st.integers(0, 2), st.integers(0, 2)), min_size=3, max_size=3),
       st.booleans())
def test_pool3d_and_conv3d_extents(axes, ceil):
    """Each output extent is ``(n + p0 + p1 - (k - 1) * d - 1 [+ s - 1]) // s + 1``, or an error
    naming the axis when the window does not fit."""
    extents, ks, ss, ds, p0, p1 = zip(*axes)
    x = v("x", 1, 2, *extents)
    pool = op.nn.max_pool3d(x, pool_size=ks, strides=ss, dilation=ds, padding=p0 + p1, ceil_mode=ceil)
    conv = op.nn.conv3d(x, v("w", 4, 2, *ks), strides=ss, dilation=ds, padding=p0 + p1)
    spans = [e + a + b - (k - 1) * d - 1 for e, k, d, a, b in zip(extents, ks, ds, p0, p1)]
    if min(spans) < 0:
        with pytest.raises(Exception, match="is larger than the padded input's"):
            infer_expr(pool)
        return
    assert infer_expr(pool).shape[2:] == tuple((sp + (s - 1 if ceil else 0)) // s + 1
                                               for sp, s in zip(spans, ss))
    assert infer_expr(conv).shape == (1, 4) + tuple(sp // s + 1 for sp, s in zip(spans, ss))
