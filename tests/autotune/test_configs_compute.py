"""Every knob of the x86 templates compiles to kernels that compute the op: a config applied
through the dispatch context changes the loops, and the values still match numpy."""

import numpy as np
import pytest

import relaybench as rb
from relaybench import autotune
from relaybench.backends.lowering import lower_primitive
from relaybench.backends.strategy import x86


def _conv_nchwc_numpy(data, weight, stride, pad):
    """conv2d in NCHW{ib}c x OIHW{ib}i{ob}o, by unblocking to NCHW/OIHW and summing windows."""
    n, icb, h, w, ib = data.shape
    ocb, _, kh, kw, _, ob = weight.shape
    x = data.transpose(0, 1, 4, 2, 3).reshape(n, icb * ib, h, w)
    k = weight.transpose(0, 5, 1, 4, 2, 3).reshape(ocb * ob, icb * ib, kh, kw)
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (w + 2 * pad - kw) // stride + 1
    out = np.zeros((n, ocb * ob, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            out += np.einsum("nchw,oc->nohw", patch, k[:, :, i, j])
    return out.reshape(n, ocb, ob, oh, ow).transpose(0, 1, 3, 4, 2)


def _run(func, config, workload, inputs):
    with autotune.ApplyConfig({workload.key: config}) as applied:
        lowered = lower_primitive(func, "llvm")
    assert applied.used[workload.key] == config
    from relaybench.backends.llvm import build_kernel
    kernel = build_kernel(lowered.prim_func)
    out = np.empty(tuple(int(d) for d in lowered.output_types[0].shape), "float32")
    kernel(*inputs, out)
    return out, lowered.source()


CONV = autotune.Workload(
    "conv2d_NCHWc", ((1, 2, 8, 12, 16), (4, 2, 3, 3, 16, 16)), ("float32", "float32"),
    (1, 4, 8, 12, 16), "float32",
    (("data_layout", "NCHW16c"), ("dilation", (1, 1)), ("groups", 1),
     ("kernel_layout", "OIHW16i16o"), ("out_layout", "NCHW16c"), ("padding", (1, 1, 1, 1)),
     ("strides", (1, 1))))


@pytest.mark.parametrize("config", [
    {"tile_ow": 12, "tile_oc": 2, "reduce_order": "window_first", "unroll_rx": True,
     "parallel": "oc", "vector": 16, "plane": False},
    {"tile_ow": 3, "tile_oc": 4, "reduce_order": "channels_first", "unroll_rx": False,
     "parallel": "oc_row", "vector": 16, "plane": False},
    {"tile_ow": 1, "tile_oc": 1, "reduce_order": "window_first", "unroll_rx": False,
     "parallel": "oc_row", "vector": 16, "plane": False},
    {"tile_ow": 6, "tile_oc": 1, "reduce_order": "channels_first", "unroll_rx": False,
     "parallel": "oc_tile", "vector": 16, "plane": True},
])
def test_conv2d_nchwc_configs_match_numpy(config):
    rng = np.random.default_rng(0)
    data = rng.standard_normal(CONV.arg_shapes[0]).astype("float32")
    weight = rng.standard_normal(CONV.arg_shapes[1]).astype("float32")
    func = autotune.task_function(CONV)
    assert x86.workload_of(func.body) == CONV
    out, loops = _run(func, config, CONV, [data, weight])
    np.testing.assert_allclose(out, _conv_nchwc_numpy(data, weight, 1, 1), rtol=1e-4, atol=1e-3)
    assert "vectorized(16)" in loops
    with autotune.ApplyConfig({}):
        default = lower_primitive(func, "llvm").source()
    assert (default == loops) == (config == x86.space_of(CONV).default())


@pytest.mark.parametrize("width,unroll", [(32, 2), (64, 4), (16, 1)])
def test_dense_widths_match_numpy(width, unroll):
    w = autotune.Workload("dense", ((2, 256), (24, 256)), ("float32", "float32"), (2, 24),
                          "float32")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 256)).astype("float32")
    k = rng.standard_normal((24, 256)).astype("float32")
    out, loops = _run(autotune.task_function(w), {"width": width, "unroll_k": unroll}, w, [x, k])
    np.testing.assert_allclose(out, x @ k.T, rtol=1e-4, atol=1e-3)
    assert f"vectorized({width})" in loops


def test_half_block_vectors_match_numpy(monkeypatch):
    """On a host of 16 vector registers a tile may hold 8 of a block's 16 lanes per register
    (``vector``), the halves one after the other; the values stay the convolution's."""
    monkeypatch.setattr(x86, "narrow_host", lambda: True)
    space = x86.space_of(CONV)
    assert space.knobs[-1].name == "vector" and space.knobs[-1].values == (16, 8)
    config = {"tile_ow": 6, "tile_oc": 2, "reduce_order": "channels_first", "unroll_rx": True,
              "parallel": "oc", "vector": 8, "plane": False}
    assert space.valid(config)
    rng = np.random.default_rng(3)
    data = rng.standard_normal(CONV.arg_shapes[0]).astype("float32")
    weight = rng.standard_normal(CONV.arg_shapes[1]).astype("float32")
    out, loops = _run(autotune.task_function(CONV), config, CONV, [data, weight])
    np.testing.assert_allclose(out, _conv_nchwc_numpy(data, weight, 1, 1), rtol=1e-4, atol=1e-3)
    assert "for conv2d_NCHWc_local_oci_c in vectorized(8)" in loops


def test_a_width_of_seven_takes_half_block_rows_without_avx512(monkeypatch):
    """The default on a host of 16 registers for 7 columns (no divisor from 2 to 4): a row of
    seven 8-lane vectors of one block."""
    monkeypatch.setattr(x86, "narrow_host", lambda: True)
    w = autotune.Workload(
        "conv2d_NCHWc", ((1, 4, 7, 7, 16), (6, 4, 1, 1, 16, 16)), ("float32", "float32"),
        (1, 6, 7, 7, 16), "float32", CONV.attrs)
    default = x86.space_of(w).default()
    assert (default["tile_ow"], default["tile_oc"], default["vector"]) == (7, 1, 8)


def test_an_invalid_config_falls_back_to_the_default():
    space = x86.space_of(CONV)
    bad = {"tile_ow": 12, "tile_oc": 4, "reduce_order": "channels_first", "unroll_rx": False,
           "parallel": "oc", "vector": 16}     # 48 accumulators: more than the register file
    assert not space.valid(bad)
    with autotune.ApplyConfig({CONV.key: bad}):
        assert autotune.config_for(CONV, space) == space.default()
    # every output-channel block in one tile, threads sharing the blocks: one parallel
    # iteration, no work for a second thread
    serial = dict(space.default(), tile_oc=4, tile_ow=1, parallel="oc", plane=False)
    assert not space.valid(serial) and space.valid(dict(serial, parallel="oc_row"))


def test_a_logged_config_the_space_now_excludes_is_passed_over():
    space = x86.space_of(CONV)
    serial = dict(space.default(), tile_oc=4, tile_ow=1, parallel="oc", plane=False)
    fine = dict(serial, parallel="oc_row")
    records = [autotune.Record(CONV, serial, [1e-5]), autotune.Record(CONV, fine, [2e-5]),
               autotune.Record(CONV, space.default(), [4e-5])]
    assert autotune.best_by_workload(records)[CONV.key].config == fine


def test_a_tuned_resnet_block_computes_what_the_interpreter_does(tmp_path):
    """A network built under apply_history_best (configs unlike the defaults for its
    convolutions) agrees with the reference interpreter."""
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 32, 14, 14), float32], %w1: Tensor[(32, 32, 3, 3), float32],
          %w2: Tensor[(32, 32, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1, 1, 1], channels=32, kernel_size=[3, 3]);
  %1 = nn.relu(%0);
  %2 = nn.conv2d(%1, %w2, padding=[0, 0, 0, 0], channels=32, kernel_size=[1, 1]);
  add(%2, %x)
}''')
    rng = np.random.default_rng(2)
    params = {"w1": rng.standard_normal((32, 32, 3, 3)).astype("float32") * 0.1,
              "w2": rng.standard_normal((32, 32, 1, 1)).astype("float32") * 0.1}
    x = rng.standard_normal((1, 32, 14, 14)).astype("float32")
    tasks = autotune.extract_tasks(mod, params=params)
    assert [t.workload.template for t in tasks] == ["conv2d_NCHWc", "conv2d_NCHWc"]
    records = []
    for task in tasks:
        # an image as one row (a 1x1 layer on a host without AVX-512) has one row to share:
        # the threads share (channel block, tile) pairs there
        rows = "plane" not in task.space.names and "oc_tile" in task.space.knobs[4].values
        config = dict(task.space.default(), tile_ow=7, tile_oc=2, reduce_order="window_first",
                      parallel="oc_tile" if rows else "oc_row")
        if "plane" in task.space.names:
            config["plane"] = False
        assert task.space.valid(config)
        records.append(autotune.Record(task.workload, config, [1e-4], flops=task.flops))
        records.append(autotune.Record(task.workload, task.space.default(), [2e-4]))
    log = tmp_path / "log.jsonl"
    autotune.save_records(log, records)
    with autotune.apply_history_best(log) as best:
        lib = rb.build(mod, target="llvm", params=params)
    assert len(best.used) == 2 and all(c["tile_ow"] == 7 for c in best.used.values())
    ref = rb.create_executor("interpreter", mod=mod).evaluate()(x, params["w1"], params["w2"])
    np.testing.assert_allclose(lib.run(x=x), np.asarray(ref), rtol=1e-4, atol=1e-4)


def test_the_knob_applies_a_log_and_an_explicit_context_wins(tmp_path):
    from relaybench import config
    space = x86.space_of(CONV)
    logged = dict(space.default(), tile_ow=4, tile_oc=2)
    explicit = dict(space.default(), tile_ow=6)
    log = tmp_path / "knob.jsonl"
    autotune.save_records(log, [autotune.Record(CONV, logged, [1e-4])])
    assert autotune.config_for(CONV, space) == space.default()
    with config.Context(RB_AUTOTUNE_LOG=str(log)):
        assert autotune.config_for(CONV, space) == logged
        with autotune.ApplyConfig({CONV.key: explicit}):
            assert autotune.config_for(CONV, space) == explicit
    with config.Context(RB_AUTOTUNE_LOG="shipped"):   # a workload no shipped log holds
        assert autotune.config_for(CONV, space) == space.default()


DEPTHWISE = autotune.Workload(
    "depthwise_conv2d_NCHWc", ((1, 2, 10, 10, 16), (2, 1, 3, 3, 1, 16)), ("float32", "float32"),
    (1, 2, 10, 10, 16), "float32",
    (("data_layout", "NCHW16c"), ("dilation", (1, 1)), ("groups", 32),
     ("kernel_layout", "OIHW1i16o"), ("out_layout", "NCHW16c"), ("padding", (1, 1, 1, 1)),
     ("strides", (1, 1))))


@pytest.mark.parametrize("config", [
    {"tile_ow": 5, "tile_oc": 2, "reduce_order": "window_first", "unroll_rx": True,
     "parallel": "oc_row", "vector": 16},
    {"tile_ow": 10, "tile_oc": 1, "reduce_order": "channels_first", "unroll_rx": False,
     "parallel": "oc", "vector": 16},
])
def test_depthwise_configs_match_numpy(config):
    rng = np.random.default_rng(3)
    data = rng.standard_normal(DEPTHWISE.arg_shapes[0]).astype("float32")
    weight = rng.standard_normal(DEPTHWISE.arg_shapes[1]).astype("float32")
    func = autotune.task_function(DEPTHWISE)
    assert x86.workload_of(func.body) == DEPTHWISE
    out, _ = _run(func, config, DEPTHWISE, [data, weight])
    padded = np.pad(data, ((0, 0), (0, 0), (1, 1), (1, 1), (0, 0)))
    expected = sum(padded[:, :, i:i + 10, j:j + 10, :] * weight[:, 0, i, j, 0, :][None, :, None, None, :]
                   for i in range(3) for j in range(3))
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


WINOGRAD = autotune.Workload(
    "conv2d_winograd", ((1, 2, 8, 12, 16), (6, 6, 4, 32, 16)), ("float32", "float32"),
    (1, 4, 8, 12, 16), "float32",
    (("data_layout", "NCHW16c"), ("kernel_layout", "HWOI16o"), ("out_layout", "NCHW16c"),
     ("padding", (1, 1, 1, 1)), ("tile_size", 4)))


@pytest.mark.parametrize("config", [{"tile_p": 1, "tile_k": 4}, {"tile_p": 6, "tile_k": 1},
                                    {"tile_p": 2, "tile_k": 2}])
def test_winograd_tiles_match_the_direct_convolution(config):
    """The ``conv2d_winograd`` template's register tiles: each computes the convolution whose
    weight the transformed one came from (F(4x4, 3x3), 6 tiles of 4x4 over 8x12 outputs)."""
    from relaybench.op.winograd import winograd_weight_transform_matrix
    func = autotune.task_function(WINOGRAD)
    assert x86.workload_of(func.body) == WINOGRAD
    space = x86.space_of(WINOGRAD)
    assert space.valid(config) and len(space) > 3
    rng = np.random.default_rng(3)
    data = rng.standard_normal(WINOGRAD.arg_shapes[0]).astype("float32")
    g = rng.standard_normal((64, 32, 3, 3)).astype("float32")       # OIHW
    u = (winograd_weight_transform_matrix(4) @ g.reshape(64 * 32, 9).T).reshape(6, 6, 64, 32)
    weight = np.ascontiguousarray(u.reshape(6, 6, 4, 16, 32).transpose(0, 1, 2, 4, 3),
                                  dtype="float32")                                # HWOI16o
    out, loops = _run(func, config, WINOGRAD, [data, weight])
    blocked = g.reshape(4, 16, 2, 16, 3, 3).transpose(0, 2, 4, 5, 3, 1)   # OIHW16i16o
    np.testing.assert_allclose(out, _conv_nchwc_numpy(data, blocked, 1, 1), rtol=1e-3, atol=1e-2)
    with autotune.ApplyConfig({}):
        default = lower_primitive(func, "llvm").source()
    assert (default == loops) == (config == space.default())


def test_a_few_input_channels_in_blocks_of_one_sum_inside_the_window():
    """A first layer's NCHW1c data (a few channels, each its own block) defaults to the window
    outside the channels, as a blocked layout's loops have them; blocked data keeps the
    channel blocks outside. The default config computes the convolution."""
    def workload(data_shape, weight_shape, layout):
        return autotune.Workload(
            "conv2d_NCHWc", (data_shape, weight_shape), ("float32", "float32"),
            (1, 2, 5, 5, 16), "float32",
            (("data_layout", layout), ("dilation", (1, 1)), ("groups", 1),
             ("kernel_layout", "OIHW1i16o"), ("out_layout", "NCHW16c"),
             ("padding", (0, 0, 0, 0)), ("strides", (4, 4))))
    few = workload((1, 4, 24, 24, 1), (2, 4, 8, 8, 1, 16), "NCHW1c")
    blocked = workload((1, 1, 24, 24, 4), (2, 1, 8, 8, 4, 16), "NCHW4c")
    assert x86.conv2d_nchwc_space(few).default()["reduce_order"] == "window_first"
    assert x86.conv2d_nchwc_space(blocked).default()["reduce_order"] == "channels_first"
    rng = np.random.default_rng(7)
    data = rng.standard_normal((1, 4, 24, 24, 1)).astype("float32")
    weight = rng.standard_normal((2, 4, 8, 8, 1, 16)).astype("float32")
    func = autotune.task_function(few)
    out, _ = _run(func, x86.conv2d_nchwc_space(few).default(), few, [data, weight])
    np.testing.assert_allclose(out, _conv_nchwc_numpy(data, weight, 4, 0), rtol=1e-4, atol=1e-4)
