"""Winograd convolution: the transforms' algebra, both ops (reference and compiled kernels)
against a direct numpy convolution, and the whole-model path (AlterOpLayout's rule, the weight
transform folded at compile time) against the interpreter."""

from fractions import Fraction

import numpy as np
import pytest

import relaybench as rb
from relaybench import config, op
from relaybench.errors import RelayError
from relaybench.ir.layout import Layout
from relaybench.ir.type_infer import infer_expr
from relaybench.op.winograd import winograd_matrices

pytest.importorskip("llvmlite")


def direct_conv(x, w, pad):
    """NCHW x OIHW, stride 1, float64: the sum over channels and taps, written out."""
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    w = w.astype(np.float64)
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    out = np.zeros((n, o, h - kh + 1, wd - kw + 1))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, :, i:i + h - kh + 1, j:j + wd - kw + 1]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return out


@pytest.mark.parametrize("m", [2, 4])
def test_matrices_compute_the_correlation_exactly(m):
    a_t, g, b_t = winograd_matrices(m, 3)
    rng = np.random.default_rng(m)
    d = [Fraction(int(v)) for v in rng.integers(-9, 9, m + 2)]
    k = [Fraction(int(v)) for v in rng.integers(-9, 9, 3)]
    gk = [sum(g[e][i] * k[i] for i in range(3)) for e in range(m + 2)]
    bd = [sum(b_t[e][i] * d[i] for i in range(m + 2)) for e in range(m + 2)]
    y = [sum(a_t[i][e] * gk[e] * bd[e] for e in range(m + 2)) for i in range(m)]
    assert y == [sum(k[t] * d[i + t] for t in range(3)) for i in range(m)]
    assert all(v.denominator == 1 for row in b_t for v in row)   # B^T in small integers


def _program(x_shape, w_shape, m, pad, data_layout="NCHW", block=1):
    x = rb.var("x", shape=x_shape)
    w = rb.var("w", shape=w_shape)
    u = op.nn.contrib_conv2d_winograd_weight_transform(w, tile_size=m)
    kernel_layout = "HWOI"
    if block > 1:
        u = op.layout_transform(u, src_layout="HWOI", dst_layout=f"HWOI{block}o")
        kernel_layout = f"HWOI{block}o"
    y = op.nn.contrib_conv2d_winograd_without_weight_transform(
        x, u, tile_size=m, padding=pad, channels=w_shape[0], kernel_size=3,
        data_layout=data_layout, kernel_layout=kernel_layout,
        out_layout=f"NCHW{block}c" if block > 1 else "")
    return rb.IRModule.from_expr(rb.Function([x, w], op.nn.relu(y)))


# (tile, in channels, out channels, height, width, padding): odd sizes leave a partial last tile
CASES = [(2, 3, 5, 7, 9, 1), (2, 8, 16, 6, 5, 0), (4, 4, 8, 5, 7, 1), (4, 16, 32, 9, 6, 0),
         (4, 16, 16, 11, 11, 1)]


@pytest.mark.parametrize("m,c,o,h,w,pad", CASES)
def test_reference_against_direct_convolution(m, c, o, h, w, pad):
    rng = np.random.default_rng(c + o + h)
    x = rng.standard_normal((1, c, h, w)).astype("float32")
    k = rng.standard_normal((o, c, 3, 3)).astype("float32")
    mod = _program(x.shape, k.shape, m, pad)
    got = rb.create_executor("interpreter", mod=mod).evaluate()(x, k)
    np.testing.assert_allclose(np.asarray(got), np.maximum(direct_conv(x, k, pad), 0),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m,c,o,h,w,pad", [(2, 16, 32, 7, 9, 1), (4, 16, 16, 9, 6, 0),
                                           (4, 8, 16, 5, 7, 1)])
def test_blocked_kernel_against_direct_convolution(m, c, o, h, w, pad):
    """The x86 schedule (rule conv2d_winograd) on NCHW{x}c data, compiled for llvm."""
    rng = np.random.default_rng(o + h)
    x = rng.standard_normal((1, c, h, w)).astype("float32")
    k = rng.standard_normal((o, c, 3, 3)).astype("float32")
    ib, ob = min(c, 16), min(o, 16)
    xb = Layout("NCHW").transform_array(x, f"NCHW{ib}c")
    mod = _program(xb.shape, k.shape, m, pad, data_layout=f"NCHW{ib}c", block=ob)
    lib = rb.build(mod, target="llvm", params={"w": k})
    got = np.asarray(lib.run(x=xb))
    assert any(r["rule"] == "conv2d_winograd" for r in lib.profile(number=1).groups)
    want = np.maximum(direct_conv(x, k, pad), 0)
    np.testing.assert_allclose(Layout(f"NCHW{ob}c").transform_array(got, "NCHW"), want,
                               rtol=1e-4, atol=2e-4)


def test_plain_layout_kernel():
    """NCHW data with an unblocked weight: the generic schedule of the same compute."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 3, 6, 7)).astype("float32")
    k = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    lib = rb.build(_program(x.shape, k.shape, 2, 1), target="llvm", params={"w": k}, opt_level=0)
    np.testing.assert_allclose(np.asarray(lib.run(x=x)), np.maximum(direct_conv(x, k, 1), 0),
                               rtol=1e-4, atol=1e-4)


def _two_convs():
    rng = np.random.default_rng(7)
    x = rb.var("data", shape=(1, 16, 10, 10))
    params = {"w1": rng.standard_normal((32, 16, 3, 3)).astype("float32") * 0.2,
              "b1": rng.standard_normal(32).astype("float32"),
              "w2": rng.standard_normal((16, 32, 3, 3)).astype("float32") * 0.2}
    w1, b1, w2 = (rb.var(n, shape=v.shape) for n, v in params.items())
    y = op.nn.relu(op.nn.bias_add(op.nn.conv2d(x, w1, padding=1, channels=32, kernel_size=3), b1))
    y = op.nn.conv2d(y, w2, padding=1, channels=16, kernel_size=3)
    return rb.IRModule.from_expr(rb.Function([x, w1, b1, w2], op.add(y, x))), params


@pytest.mark.parametrize("mode", ["on", "2"])
def test_whole_model_against_interpreter_and_weight_transform_folded(mode):
    mod, params = _two_convs()
    data = np.random.default_rng(8).standard_normal((1, 16, 10, 10)).astype("float32")
    want = rb.create_executor("interpreter", mod=mod).evaluate()(data, *params.values())
    with config.Context(RB_WINOGRAD=mode):
        lib = rb.build(mod, target="llvm", params=params, opt_level=3)
    got = np.asarray(lib.run(data=data))
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-4, atol=1e-4)
    groups = lib.profile(number=1).groups
    rules = [r["rule"] for r in groups]
    names = " ".join(r["group"] for r in groups)
    assert rules.count("conv2d_winograd") == 2
    assert "winograd_weight_transform" not in names and not _direct(rules)
    # no layout transform between the two convolutions: only at the entry and the exit
    assert sum("layout_transform" in r["group"] for r in groups) <= 2


def _direct(rules) -> bool:
    """Whether a direct convolution kernel is among ``rules`` (with a shorter last register
    tile, ``conv2d_NCHWc_tail``, too)."""
    return any(rule.startswith("conv2d_NCHWc") for rule in rules)


def test_rule_off_direct_auto_winograd_from_64_channels():
    data = np.zeros((1, 64, 9, 9), "float32")
    x = rb.var("data", shape=(1, 64, 9, 9))
    w = rb.const(np.random.default_rng(2).standard_normal((64, 64, 3, 3)).astype("float32"))
    wide = rb.IRModule.from_expr(rb.Function([x], op.nn.conv2d(x, w, padding=1, channels=64,
                                                                  kernel_size=3)))
    for mode, winograd in (("off", False), ("auto", True)):
        with config.Context(RB_WINOGRAD=mode):
            lib = rb.build(wide, target="llvm", opt_level=3)
        rules = [r["rule"] for r in lib.profile(number=1, data=data).groups]
        assert ("conv2d_winograd" in rules) == winograd and _direct(rules) != winograd, \
            (mode, rules)
    # 16 channels: auto keeps the direct kernel (the gain is small against the compile time)
    mod, params = _two_convs()
    lib = rb.build(mod, target="llvm", params=params, opt_level=3)
    rules = [r["rule"] for r in lib.profile(number=1, data=np.zeros((1, 16, 10, 10), "float32"))
             .groups]
    assert "conv2d_winograd" not in rules and _direct(rules)
    with config.Context(RB_WINOGRAD="sometimes"), pytest.raises(Exception, match="RB_WINOGRAD"):
        rb.build(mod, target="llvm", params=params, opt_level=3)


def test_type_errors_name_the_op():
    x = rb.var("x", shape=(1, 8, 6, 6))
    u = rb.var("u", shape=(4, 4, 8, 8))
    assert infer_expr(op.nn.contrib_conv2d_winograd_without_weight_transform(
        x, u, tile_size=2, padding=1)) == infer_expr(rb.var("y", shape=(1, 8, 6, 6)))
    with pytest.raises(RelayError, match="tile_size=4 with a 3x3 kernel needs 6x6"):
        infer_expr(op.nn.contrib_conv2d_winograd_without_weight_transform(x, u, tile_size=4))
    with pytest.raises(RelayError, match="strides"):
        infer_expr(op.nn.contrib_conv2d_winograd_without_weight_transform(
            x, u, tile_size=2, strides=2))
    with pytest.raises(RelayError, match="square"):
        infer_expr(op.nn.contrib_conv2d_winograd_weight_transform(rb.var("w", shape=(8, 8, 3, 1))))


def test_shape_functions_agree_with_the_type_relations():
    from relaybench.op.registry import get_op_attr, get_opdef
    name = "nn.contrib_conv2d_winograd_without_weight_transform"
    attrs = get_opdef(name).make_attrs({"padding": (1, 0, 2, 1), "tile_size": 4, "channels": 8,
                                        "kernel_size": (3, 3), "data_layout": "NCHW4c",
                                        "kernel_layout": "HWOI", "out_layout": "NCHW4c"})
    # H: 9 + 1 + 2 - 3 + 1 = 10, W: 7 + 0 + 1 - 3 + 1 = 6; 8 channels in blocks of 4
    assert get_op_attr(name, "FShapeFunc")(attrs, [(1, 2, 9, 7, 4), (6, 6, 8, 8)]) \
        == [(1, 2, 10, 6, 4)]
    name = "nn.contrib_conv2d_winograd_weight_transform"
    attrs = get_opdef(name).make_attrs({"tile_size": 2})
    assert get_op_attr(name, "FShapeFunc")(attrs, [(4, 3, 3, 3)]) == [(4, 4, 4, 3)]


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_weight_transform_reference_is_g_g_gt_per_channel_pair(m, dtype):
    """The folded weight transform (one matrix product over all channel pairs) against
    ``G g G^T`` written out for each (output, input) pair in float64."""
    from relaybench.op.winograd import (_weight_transform_reference, winograd_float_matrices,
                                        winograd_weight_transform_matrix)
    rng = np.random.default_rng(m)
    w = rng.standard_normal((5, 3, 3, 3)).astype(dtype)
    _, g, _ = winograd_float_matrices(m, 3)
    want = np.empty((m + 2, m + 2, 5, 3))
    for o in range(5):
        for i in range(3):
            want[:, :, o, i] = g @ w[o, i].astype(np.float64) @ g.T
    attrs = op.nn.contrib_conv2d_winograd_weight_transform(rb.var("w", shape=w.shape),
                                                           tile_size=m).attrs
    got = _weight_transform_reference(w, attrs)
    assert got.dtype == w.dtype and got.shape == want.shape and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == "float32" else 1e-12,
                               atol=1e-6 if dtype == "float32" else 1e-12)
    k = winograd_weight_transform_matrix(m)
    assert k.shape == ((m + 2) ** 2, 9)
    np.testing.assert_allclose(k @ w[1, 2].astype(np.float64).ravel(),
                               (g @ w[1, 2].astype(np.float64) @ g.T).ravel(), rtol=1e-12)
