"""Images as one row and tiles with a shorter last one: a 1x1 stride-1 convolution computed on
its image as ``(N, C, 1, H * W, c)`` (AlterOpLayout's ``FFlattenImage``, the x86 policy on a
host without AVX-512), its register tiles of any width (the last tile of the row guarded and
the loops partitioned), other convolutions computed over their output plane's pixels (the
``plane`` knob: tiles that cross the rows), and the depthwise defaults of such hosts. Every kernel is checked
against numpy or the reference interpreter."""

import numpy as np
import pytest

import relaybench as rb
from relaybench import autotune, op
from relaybench.backends.lowering import lower_primitive
from relaybench.backends.strategy import x86
from relaybench.passes.alter_op_layout import AlterOpLayout, _pixelwise


def _blocked_conv_numpy(data, weight, stride=1, pad=0, groups=1):
    """conv2d of NCHW{ib}c data and OIHW{ib}i{ob}o (or depthwise OIHW1i{ob}o) weights."""
    n, icb, h, w, ib = data.shape
    ocb, _, kh, kw, wi, ob = weight.shape
    x = data.transpose(0, 1, 4, 2, 3).reshape(n, icb * ib, h, w)
    k = weight.transpose(0, 5, 1, 4, 2, 3).reshape(ocb * ob, -1, kh, kw)
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1
    out = np.zeros((n, ocb * ob, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            if groups == 1:
                out += np.einsum("nchw,oc->nohw", patch, k[:, :, i, j])
            else:
                out += patch * k[:, 0, i, j][None, :, None, None]
    return out.reshape(n, ocb, ob, oh, ow).transpose(0, 1, 3, 4, 2)


def _attrs(layout_in, kernel, layout_out, padding=(0, 0, 0, 0), strides=(1, 1), groups=1):
    return (("data_layout", layout_in), ("dilation", (1, 1)), ("groups", groups),
            ("kernel_layout", kernel), ("out_layout", layout_out), ("padding", padding),
            ("strides", strides))


# 47 pixels in one row (a prime: every tile but 1 and 47 leaves a shorter last one)
ROW = autotune.Workload(
    "conv2d_NCHWc", ((1, 3, 1, 47, 16), (2, 3, 1, 1, 16, 16)), ("float32", "float32"),
    (1, 2, 1, 47, 16), "float32", _attrs("NCHW16c", "OIHW16i16o", "NCHW16c"))


# 24 output channels in 3 blocks of 8 (MobileNet V2's projections without AVX-512)
EIGHTS = autotune.Workload(
    "conv2d_NCHWc", ((1, 3, 1, 47, 16), (3, 3, 1, 1, 16, 8)), ("float32", "float32"),
    (1, 3, 1, 47, 8), "float32", _attrs("NCHW16c", "OIHW16i8o", "NCHW8c"))


def _compile(workload, config):
    func = autotune.task_function(workload)
    with autotune.ApplyConfig({workload.key: config}) as applied:
        lowered = lower_primitive(func, "llvm")
    assert applied.used[workload.key] == config
    from relaybench.backends.llvm import build_kernel
    return lowered, build_kernel(lowered.prim_func)


def _check_against_numpy(workload, config, seed, threads):
    """The workload's kernel under ``config`` on random data against numpy; its lowering."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal(workload.arg_shapes[0]).astype("float32")
    weight = rng.standard_normal(workload.arg_shapes[1]).astype("float32")
    lowered, kernel = _compile(workload, config)
    out = np.full(workload.out_shape, np.nan, "float32")
    kernel.bind(data, weight, out, num_threads=threads)()
    np.testing.assert_allclose(out, _blocked_conv_numpy(data, weight), rtol=1e-4, atol=1e-3)
    return lowered


@pytest.mark.parametrize("tile,parallel", [(6, "oc_tile"), (5, "tile_oc"), (12, "oc"),
                                           (4, "oc_row"), (1, "oc_tile")])
@pytest.mark.parametrize("threads", [1, 2])
def test_row_tiles_with_a_shorter_last_one_match_numpy(tile, parallel, threads):
    space = x86.space_of(ROW)
    config = dict(space.default(), tile_ow=tile, tile_oc=1, parallel=parallel, vector=16)
    assert space.valid(config)
    lowered = _check_against_numpy(ROW, config, tile, threads)
    if 47 % tile:
        # the last tile guarded, the others not: lowering partitioned the loops
        assert lowered.rule == "conv2d_NCHWc_tail"
        text = lowered.source()
        updates = [line for line in text.splitlines() if "] + p0[" in line]
        # two copies of the accumulation (the tiles before the last, the last one)
        # the guard on the pixel only in the last tile's copy (its initialisation,
        # accumulation and store), whichever way the threads share the tiles
        assert len(updates) == 2 and text.count("< 47:") == 3
    else:
        assert lowered.rule == "conv2d_NCHWc"


@pytest.mark.parametrize("tile,parallel", [(3, "oc_tile"), (3, "tile_oc"), (2, "oc_tile")])
@pytest.mark.parametrize("threads", [1, 2])
def test_row_tiles_of_three_blocks_of_eight_match_numpy(tile, parallel, threads):
    """3 blocks of 8 channels in one register tile (9 accumulators for 3 pixels), the row's 47
    pixels leaving a shorter last tile, either way of sharing the tiles between threads."""
    space = x86.space_of(EIGHTS)
    config = dict(space.default(), tile_ow=tile, tile_oc=3, parallel=parallel, vector=8)
    assert space.valid(config)
    lowered = _check_against_numpy(EIGHTS, config, 30 + tile, threads)
    assert lowered.rule == ("conv2d_NCHWc_tail" if 47 % tile else "conv2d_NCHWc")


def test_row_defaults_without_avx512(monkeypatch):
    """A row on a host of 16 registers: 6 pixels by a block of 16 (12 accumulators), 3 pixels
    by 3 blocks of 8 where the blocks come in threes, else 8 pixels by a block of 8; the threads
    share (channel block, tile) pairs. Tiles of any width up to 12 are in the space; an image
    of several rows keeps the divisors of its width."""
    monkeypatch.setattr(x86, "narrow_host", lambda: True)
    default = x86.space_of(ROW).default()
    assert (default["tile_ow"], default["tile_oc"], default["vector"], default["parallel"]) == \
        (6, 1, 16, "oc_tile")
    default = x86.space_of(EIGHTS).default()
    assert (default["tile_ow"], default["tile_oc"], default["vector"]) == (3, 3, 8)
    fives = autotune.Workload(
        "conv2d_NCHWc", ((1, 3, 1, 47, 16), (5, 3, 1, 1, 16, 8)), ("float32", "float32"),
        (1, 5, 1, 47, 8), "float32", _attrs("NCHW16c", "OIHW16i8o", "NCHW8c"))
    default = x86.space_of(fives).default()
    assert (default["tile_ow"], default["tile_oc"], default["vector"]) == (8, 1, 8)
    assert set(range(2, 13)) <= set(x86.space_of(ROW).knobs[0].values)
    # a row always has tiles to share between threads: every channel block in one tile with
    # only the blocks shared is one parallel iteration, refused
    space = x86.space_of(ROW)
    assert not space.valid(dict(space.default(), tile_oc=2, parallel="oc"))
    assert space.valid(dict(space.default(), tile_oc=2, parallel="oc_tile"))
    # an image of several rows: tiles that divide its width, unless computed over its pixels
    image = autotune.Workload(
        "conv2d_NCHWc", ((1, 3, 7, 7, 16), (2, 3, 1, 1, 16, 16)), ("float32", "float32"),
        (1, 2, 7, 7, 16), "float32", ROW.attrs)
    space = x86.space_of(image)
    assert not space.valid(dict(space.default(), plane=False, tile_ow=6, parallel="oc_row"))
    assert not space.valid(dict(space.default(), plane=False, tile_ow=7, parallel="oc_tile"))
    assert space.valid(dict(space.default(), plane=False, tile_ow=7, parallel="oc_row"))
    assert space.valid(dict(space.default(), plane=True, tile_ow=6, parallel="oc_tile"))


# a 3x3 stride-2 convolution of 7x7 outputs: 49 pixels, a prime square (tiles of 7 divide it)
PLANE = autotune.Workload(
    "conv2d_NCHWc", ((1, 2, 13, 13, 16), (3, 2, 3, 3, 16, 16)), ("float32", "float32"),
    (1, 3, 7, 7, 16), "float32",
    _attrs("NCHW16c", "OIHW16i16o", "NCHW16c", padding=(1, 1, 1, 1), strides=(2, 2)))


@pytest.mark.parametrize("tile,blocks,vector,parallel", [
    (6, 1, 16, "oc"), (6, 1, 16, "oc_tile"), (5, 3, 16, "tile_oc"), (7, 1, 16, "oc_tile"),
    (12, 1, 8, "oc_tile"), (1, 1, 16, "oc")])
@pytest.mark.parametrize("threads", [1, 2])
def test_plane_tiles_match_numpy(tile, blocks, vector, parallel, threads):
    """A convolution computed over its 49 output pixels as one axis: register tiles of
    consecutive pixels that cross the rows (6 pixels: rows 0 and 1 in the second tile), the
    last tile shorter where the tile does not divide 49, with whole or half channel blocks and
    every way of sharing the tiles between threads."""
    space = x86.space_of(PLANE)
    config = dict(space.default(), plane=True, tile_ow=tile, tile_oc=blocks, vector=vector,
                  parallel=parallel)
    assert space.valid(config)
    rng = np.random.default_rng(tile + blocks)
    data = rng.standard_normal(PLANE.arg_shapes[0]).astype("float32")
    weight = rng.standard_normal(PLANE.arg_shapes[1]).astype("float32")
    lowered, kernel = _compile(PLANE, config)
    out = np.full(PLANE.out_shape, np.nan, "float32")
    kernel.bind(data, weight, out, num_threads=threads)()
    np.testing.assert_allclose(out, _blocked_conv_numpy(data, weight, stride=2, pad=1),
                               rtol=1e-4, atol=1e-3)
    text = lowered.source()
    # the accumulators of a tile of pixels: (1, channel blocks, 1, pixels, lanes)
    assert f"allocate((1, {blocks}, 1, {tile}, {vector}), " in text
    assert lowered.rule == ("conv2d_NCHWc_tail" if 49 % tile else "conv2d_NCHWc")
    if 49 % tile:
        # two copies of the accumulation; the guard on the pixel in the last tile's only
        assert len([line for line in text.splitlines() if "] + pad[" in line]) == 2
        assert text.count("< 49:") == 3


def test_plane_defaults_without_avx512(monkeypatch):
    """Without AVX-512 an image whose convolution sums 128 or more products per output value is
    computed over its pixels in tiles of 6 pixels of 16 lanes, the threads sharing the channel
    blocks where there are 8 or more; a first layer of 3 channels and a 3x3 window (27) keeps
    the tiles of its rows; with AVX-512 nothing changes."""
    monkeypatch.setattr(x86, "narrow_host", lambda: True)
    default = x86.space_of(PLANE).default()
    assert (default["plane"], default["tile_ow"], default["tile_oc"], default["vector"],
            default["parallel"]) == (True, 6, 1, 16, "oc_tile")
    wide = autotune.Workload(
        "conv2d_NCHWc", ((1, 8, 28, 28, 16), (16, 8, 3, 3, 16, 16)), ("float32", "float32"),
        (1, 16, 14, 14, 16), "float32", PLANE.attrs)
    assert x86.space_of(wide).default()["parallel"] == "oc"
    first = autotune.Workload(
        "conv2d_NCHWc", ((1, 1, 32, 32, 3), (2, 1, 3, 3, 3, 16)), ("float32", "float32"),
        (1, 2, 16, 16, 16), "float32",
        _attrs("NCHW3c", "OIHW3i16o", "NCHW16c", padding=(1, 1, 1, 1), strides=(2, 2)))
    assert x86.space_of(first).default()["plane"] is False
    # a row is a row: no plane knob; nor a depthwise convolution
    assert "plane" not in x86.space_of(ROW).names
    assert "plane" not in x86.space_of(DEPTHWISE).names
    monkeypatch.setattr(x86, "narrow_host", lambda: False)
    assert x86.space_of(PLANE).default()["plane"] is False


def _strided_block(seed=0):
    """ResNet's downsampling: a 3x3 stride-2 convolution with bias and ReLU, the 1x1 stride-2
    shortcut, their sum and a ReLU, at 7x7 outputs."""
    rng = np.random.default_rng(seed)
    x = rb.var("x", shape=(1, 32, 14, 14))
    shapes = {"w1": (64, 32, 3, 3), "b1": (64, 1, 1), "w2": (64, 32, 1, 1)}
    ws = {k: rb.const((rng.standard_normal(s) / np.sqrt(np.prod(s[1:]))).astype("float32"))
          for k, s in shapes.items()}
    y = op.nn.relu(op.add(op.nn.conv2d(x, ws["w1"], channels=64, kernel_size=3, strides=2,
                                       padding=1), ws["b1"]))
    y = op.nn.relu(op.add(y, op.nn.conv2d(x, ws["w2"], channels=64, kernel_size=1, strides=2)))
    mod = rb.IRModule.from_expr(rb.Function([x], y))
    return mod, rng.standard_normal((1, 32, 14, 14)).astype("float32")


@pytest.mark.parametrize("narrow", [True, False])
def test_strided_block_on_planes_without_avx512(monkeypatch, narrow):
    """The stride-2 convolutions of a downsampling block on a host without AVX-512: the 3x3 one
    (32 x 9 products per output value) computed over its plane of 49 pixels with its bias and
    ReLU, the 1x1 shortcut (32 products: too few) on the tiles of its rows with the addition
    and the last ReLU; the built block computes what the interpreter computes. With AVX-512
    both keep the tiles of their rows."""
    monkeypatch.setattr(x86, "narrow_host", lambda: narrow)
    monkeypatch.setenv("RB_BUILD_CACHE", "off")
    monkeypatch.setenv("RB_LOWERING_CACHE", "off")
    monkeypatch.setenv("RB_AUTOTUNE_LOG", "none")
    mod, x = _strided_block()
    lib = rb.build(mod, target="llvm", opt_level=3)
    expected = rb.create_executor("interpreter", mod=mod).evaluate()(x)
    np.testing.assert_allclose(lib.run(x=x), np.asarray(expected), rtol=1e-4, atol=1e-4)
    rules = sorted(row["rule"] for row in lib.profile(number=1).groups if "conv" in row["group"])
    assert rules == (["conv2d_NCHWc", "conv2d_NCHWc_tail"] if narrow
                     else ["conv2d_NCHWc", "conv2d_NCHWc"])


DEPTHWISE = autotune.Workload(
    "depthwise_conv2d_NCHWc", ((1, 3, 14, 14, 16), (3, 1, 3, 3, 1, 16)), ("float32", "float32"),
    (1, 3, 14, 14, 16), "float32",
    _attrs("NCHW16c", "OIHW1i16o", "NCHW16c", padding=(1, 1, 1, 1), groups=48))


def test_depthwise_defaults_without_avx512_match_numpy(monkeypatch):
    """On a host of 16 registers a depthwise tile is up to 7 columns of 8 lanes, the window's
    columns unrolled, the threads sharing channel blocks; it computes the convolution."""
    monkeypatch.setattr(x86, "narrow_host", lambda: True)
    default = x86.space_of(DEPTHWISE).default()
    assert (default["tile_ow"], default["vector"], default["unroll_rx"], default["parallel"]) \
        == (7, 8, True, "oc")
    rng = np.random.default_rng(5)
    data = rng.standard_normal(DEPTHWISE.arg_shapes[0]).astype("float32")
    weight = rng.standard_normal(DEPTHWISE.arg_shapes[1]).astype("float32")
    lowered, kernel = _compile(DEPTHWISE, default)
    out = np.empty(DEPTHWISE.out_shape, "float32")
    kernel.bind(data, weight, out, num_threads=2)()
    np.testing.assert_allclose(out, _blocked_conv_numpy(data, weight, pad=1, groups=48),
                               rtol=1e-4, atol=1e-3)
    monkeypatch.setattr(x86, "narrow_host", lambda: False)
    assert x86.space_of(DEPTHWISE).default()["unroll_rx"] is False


def _block(seed=0):
    """An inverted residual block of MobileNet V2 at 7x7: 1x1 expansion, depthwise 3x3, 1x1
    projection, the residual addition, then a pool."""
    rng = np.random.default_rng(seed)
    x = rb.var("x", shape=(1, 16, 7, 7))
    shapes = {"w1": (48, 16, 1, 1), "w2": (48, 1, 3, 3), "w3": (16, 48, 1, 1), "b1": (48, 1, 1),
              "b3": (16, 1, 1)}
    ws = {k: rb.const((rng.standard_normal(s) / np.sqrt(np.prod(s[1:]))).astype("float32"))
          for k, s in shapes.items()}
    y = op.clip(op.add(op.nn.conv2d(x, ws["w1"], channels=48, kernel_size=1), ws["b1"]),
                a_min=0.0, a_max=6.0)
    y = op.clip(op.nn.conv2d(y, ws["w2"], channels=48, kernel_size=3, padding=1, groups=48),
                a_min=0.0, a_max=6.0)
    y = op.add(op.add(op.nn.conv2d(y, ws["w3"], channels=16, kernel_size=1), ws["b3"]), x)
    y = op.nn.max_pool2d(y, pool_size=2, strides=2)
    mod = rb.IRModule.from_expr(rb.Function([x], y))
    return mod, rng.standard_normal((1, 16, 7, 7)).astype("float32")


def _convs(mod):
    from relaybench.ir.functor import post_order
    return [n for n in post_order(mod["main"].body)
            if isinstance(n, rb.Call) and getattr(n.op, "name", None) == "nn.conv2d"]


@pytest.mark.parametrize("narrow", [True, False])
def test_pointwise_convolutions_run_on_rows_without_avx512(monkeypatch, narrow):
    """On a host without AVX-512 both 1x1 convolutions take their image as one row of 49
    pixels, their bias, clip and residual addition with them; the depthwise convolution and the
    pool get the image back through a reshape (a view). The built block computes what the
    interpreter computes. With AVX-512 nothing changes."""
    monkeypatch.setattr(x86, "narrow_host", lambda: narrow)
    # the build and lowering caches key the host, which the patch does not change
    monkeypatch.setenv("RB_BUILD_CACHE", "off")
    monkeypatch.setenv("RB_LOWERING_CACHE", "off")
    mod, x = _block()
    with rb.PassContext(opt_level=3, config={"relay.target": "llvm"}):
        after = AlterOpLayout()(rb.passes.InferType()(mod))
    after = rb.passes.InferType()(after)
    shapes = [tuple(int(d) for d in c.args[0].checked_type.shape) for c in _convs(after)]
    if narrow:
        assert shapes == [(1, 1, 1, 49, 16), (1, 3, 7, 7, 16), (1, 3, 1, 49, 16)]
        # the residual addition is on the row too: its operands are the projection and the
        # block's input, both rows
        text = after["main"].astext(show_types=False)
        assert text.count("newshape=[1, 1, 1, 49, 16]") == 1
    else:
        assert shapes == [(1, 1, 7, 7, 16), (1, 3, 7, 7, 16), (1, 3, 7, 7, 16)]
    lib = rb.build(mod, target="llvm", opt_level=3)
    expected = rb.create_executor("interpreter", mod=mod).evaluate()(x)
    np.testing.assert_allclose(lib.run(x=x), np.asarray(expected), rtol=1e-4, atol=1e-4)
    # the reshapes between rows and images run no kernel: views of their input's memory
    assert len(lib.memory_plan().views) == (3 if narrow else 0)


def test_only_pixelwise_operators_carry_the_row():
    """An operator whose attributes name an axis other than the channels, or a shape, does not
    take the row (its meaning depends on where H and W are)."""
    x = rb.var("x", shape=(1, 2, 3, 4, 16))
    assert _pixelwise(op.clip(x, a_min=0.0, a_max=1.0))
    assert _pixelwise(op.add(x, x))
    # broadcast operators with an axis: along the channel blocks, or along the image's rows
    assert _pixelwise(op.nn.bias_add(x, rb.var("b", shape=(2,)), axis=1))
    assert not _pixelwise(op.nn.bias_add(x, rb.var("b", shape=(3,)), axis=2))
    assert not _pixelwise(op.nn.prelu(x, rb.var("a", shape=(4,)), axis=3))
    # not elementwise or broadcast at all
    assert not _pixelwise(op.sum(x, axis=[2]))
    assert not _pixelwise(op.nn.softmax(x, axis=1))
