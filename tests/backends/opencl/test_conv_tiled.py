"""The GPU strategy's ``conv2d_tiled`` rule (input patch and weights in local memory, 4 x 4
outputs per work item in registers) on the OpenCL device against the reference interpreter,
and the ``RB_GPU_CONV`` knob that chooses it. Each module is built once per session (the
device's compiler is slow)."""

import numpy as np
import pytest

import relaybench as rb
from relaybench import config
from relaybench.backends.graph_executor import extract_graph
from relaybench.backends.lowering import lower_primitive
from relaybench.errors import CompileError

# batch 2, 40 and 12 channels (not multiples of the 64 x 8 tile), 9 x 9 pixels (a partial row
# tile); a 1x1 convolution with no epilogue; 3x3 stride 2 with a residual add; the 7x7 stride 2
# stem of three channels
CONVOLUTIONS = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(2, 12, 9, 9), float32], %w: Tensor[(40, 12, 3, 3), float32],
          %b: Tensor[(40), float32], %w1: Tensor[(64, 40, 1, 1), float32],
          %w2: Tensor[(40, 40, 3, 3), float32], %r: Tensor[(2, 40, 5, 5), float32],
          %i: Tensor[(1, 3, 20, 20), float32], %w3: Tensor[(32, 3, 7, 7), float32]) {
  %0 = nn.relu(nn.bias_add(nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=40,
                                     kernel_size=[3, 3]), %b));
  %1 = nn.conv2d(%0, %w1, channels=64, kernel_size=[1, 1]);
  %2 = nn.relu(add(nn.conv2d(%0, %w2, strides=[2, 2], padding=[1, 1, 1, 1], channels=40,
                             kernel_size=[3, 3]), %r));
  %3 = nn.conv2d(%i, %w3, strides=[2, 2], padding=[3, 3, 3, 3], channels=32, kernel_size=[7, 7]);
  (%1, %2, %3)
}''')


def _inputs(mod, seed=0):
    rng = np.random.default_rng(seed)
    return {p.name_hint: rng.standard_normal([int(d) for d in p.type_annotation.shape])
            .astype("float32") for p in mod["main"].params}


@pytest.fixture(scope="session")
def tiled(target):
    """The convolutions built with ``RB_GPU_CONV=tiled``, their inputs and the interpreter's
    results."""
    inputs = _inputs(CONVOLUTIONS)
    expected = rb.create_executor("interpreter", mod=CONVOLUTIONS).evaluate()(*inputs.values())
    with config.Context(RB_GPU_CONV="tiled"):
        lib = rb.build(CONVOLUTIONS, target=target, opt_level=3)
    return lib, inputs, expected


def test_tiled_convolutions_agree_with_the_interpreter(tiled):
    lib, inputs, expected = tiled
    got = lib.run(**inputs)
    for value, want in zip(got, expected):
        np.testing.assert_allclose(value, want, rtol=1e-4, atol=1e-4)
    convs = [k for k in lib.kernels if "nn.conv2d" in k.ops]
    assert len(convs) == 4 and all(k.rule == "conv2d_tiled" for k in convs)
    rules = {row["group"]: row["rule"] for row in lib.profile(number=1).rows}
    assert all(rules[k.name] == "conv2d_tiled" for k in convs)


def test_tiled_group_has_local_tiles_barriers_and_registers(tiled):
    """One launch per group: the two tiles are ``__local`` arrays, filled between barriers; the
    accumulators are a private array of 16 per work item, stored through the epilogue."""
    lib = tiled[0]
    name = "fused_nn_conv2d_expand_dims_add_nn_relu"    # 8 x 8 pixels: 4 columns per item
    loops = lib.source("loops", group=name)
    assert '"shared")' in loops and 'allocate((1, 4, 1, 4), "float32", "local")' in loops
    assert loops.count("barrier()") == 2
    source = lib.source("opencl", group=name)
    assert source.count("__kernel void") == 1
    assert source.count("__local float") == 2
    assert source.count("barrier(CLK_LOCAL_MEM_FENCE);") == 2
    assert "float conv2d[16];" in source


def test_blocked_convolutions_agree_with_the_interpreter(tiled, target):
    """``RB_GPU_CONV=blocked``: the tiled schedule's work groups and register tiles without the
    local copies; the same results, no ``__local`` array and no barrier in the program."""
    _, inputs, expected = tiled
    with config.Context(RB_GPU_CONV="blocked"):
        lib = rb.build(CONVOLUTIONS, target=target, opt_level=3)
    for value, want in zip(lib.run(**inputs), expected):
        np.testing.assert_allclose(value, want, rtol=1e-4, atol=1e-4)
    convs = [k for k in lib.kernels if "nn.conv2d" in k.ops]
    assert len(convs) == 4 and all(k.rule == "conv2d_blocked" for k in convs)
    source = lib.source("opencl", group="fused_nn_conv2d_expand_dims_add_nn_relu")
    assert "__local" not in source and "barrier(" not in source
    assert "float conv2d[16];" in source


def test_resnet18_with_tiled_convolutions_agrees_with_the_interpreter(target, small_resnet18):
    mod, params, name, x, expected = small_resnet18
    with config.Context(RB_GPU_CONV="tiled"):
        lib = rb.build(mod, target=target, params=params, opt_level=3)
    got = lib.run(**{name: x})
    np.testing.assert_allclose(got, expected, rtol=1e-4,
                               atol=1e-5 * max(float(np.abs(expected).max()), 1.0))
    convs = [k for k in lib.kernels if "nn.conv2d" in k.ops]
    assert convs and all(k.rule == "conv2d_tiled" for k in convs)


def _rules(mod, target="opencl -device=cpu") -> list:
    """The rule of each group, in the graph's order, lowered for ``target`` (no device
    needed: the target names the device's type)."""
    with rb.PassContext(opt_level=3, config={"relay.target": target}):
        fused = rb.passes.default_pipeline(3)(mod)
    return [lower_primitive(node.function, target).rule
            for node in extract_graph(fused["main"]).nodes]


SMALL = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 11, 11), float32], %w: Tensor[(5, 3, 3, 3), float32],
          %g: Tensor[(8, 1, 3, 3), float32], %y: Tensor[(1, 8, 6, 6), float32]) {
  (nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=5, kernel_size=[3, 3]),
   nn.conv2d(%y, %g, padding=[1, 1, 1, 1], groups=8, channels=8, kernel_size=[3, 3]))
}''')


LARGE = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 16, 64, 64), float32], %w: Tensor[(64, 16, 3, 3), float32],
          %y: Tensor[(1, 256, 14, 14), float32], %v: Tensor[(256, 256, 3, 3), float32]) {
  (nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=64, kernel_size=[3, 3]),
   nn.conv2d(%y, %v, padding=[1, 1, 1, 1], channels=256, kernel_size=[3, 3]))
}''')


WIDE = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 64, 112, 112), float32], %w: Tensor[(128, 64, 3, 3), float32]) {
  nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=128, kernel_size=[3, 3])
}''')


def test_the_knob_chooses_the_schedule():
    assert config.KNOBS["RB_GPU_CONV"].default == "auto"
    with config.Context(RB_GPU_CONV="direct"):
        assert _rules(CONVOLUTIONS) == ["direct"] * 4
    with config.Context(RB_GPU_CONV="tiled"):
        assert _rules(CONVOLUTIONS) == ["conv2d_tiled"] * 4
        # 5 output channels still tile; a depthwise convolution never does
        assert _rules(SMALL) == ["conv2d_tiled", "direct"]
    with config.Context(RB_GPU_CONV="blocked"):
        assert _rules(CONVOLUTIONS) == ["conv2d_blocked"] * 4
    with config.Context(RB_GPU_CONV="auto"):
        # on a GPU: 64 work groups are too few to tile, 256 x 14 x 14 outputs few enough to
        # split the reduction (see conv_mode); 128 channels of 112 x 112 pixels tile
        assert _rules(LARGE, "opencl -device=gpu") == ["direct", "direct_splitk"]
        assert _rules(WIDE, "opencl -device=gpu") == ["conv2d_tiled"]
        # on a CPU device, 64 x 64 pixels make 128 work groups of 32 channels x 8 x 8 pixels; 256 channels of
        # 14 x 14 pixels (ResNet-18's third stage) only 32, and the small tests' images fewer
        assert _rules(LARGE) == ["conv2d_tiled", "direct"]
        assert _rules(CONVOLUTIONS) == ["direct"] * 4
        # 5 channels are too few for a tile of 64
        assert _rules(SMALL) == ["direct", "direct"]
    with config.Context(RB_GPU_CONV="im2col"):
        with pytest.raises(CompileError, match="RB_GPU_CONV='im2col': expected one of direct"):
            _rules(SMALL)


def test_tiled_schedule_stays_in_bounds():
    """The loop IR of partial tiles (6 channels of a 64-wide tile, 3 x 3 pixels of stride 2 in
    an 8 x 8 tile) run by its evaluator, which checks every access against its buffer: the
    fills of the border and of the missing channels are guarded, which a GPU would not report."""
    from relaybench import te
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 5, 5), float32], %w: Tensor[(6, 3, 3, 3), float32]) {
  nn.relu(nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1, 1, 1], channels=6,
                    kernel_size=[3, 3]))
}''')
    with config.Context(RB_GPU_CONV="tiled"):
        with rb.PassContext(opt_level=3, config={"relay.target": "opencl"}):
            fused = rb.passes.default_pipeline(3)(mod)
        (node,) = extract_graph(fused["main"]).nodes
        lowered = lower_primitive(node.function, "opencl")
    assert lowered.rule == "conv2d_tiled"
    inputs = _inputs(mod, seed=1)
    out = np.zeros((1, 6, 3, 3), "float32")
    te.evaluate(lowered.prim_func, inputs["x"], inputs["w"], out)
    expected = rb.create_executor("interpreter", mod=mod).evaluate()(*inputs.values())
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
