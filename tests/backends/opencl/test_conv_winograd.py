"""The GPU strategy's ``conv2d_winograd`` rule (``RB_GPU_CONV=winograd``, and ``auto`` on a GPU
for the layers it pays on): AlterOpLayout turns a 3 x 3 stride-1 convolution into Winograd's,
the weight transformed at compile time, and the group runs as three launches (the input
transform, the matrix products tiled in local memory, the output transform with the fused
epilogue). Checked against the reference interpreter on the OpenCL device, and the loop IR
against its buffers' bounds."""

import numpy as np
import pytest

import relaybench as rb
from relaybench import config
from relaybench.backends.graph_executor import extract_graph
from relaybench.backends.lowering import lower_primitive
from relaybench.backends.strategy.gpu import gpu_winograd_tile
from relaybench.passes.bind_params import bind_params_by_name

# batch 2, 16 -> 40 channels (not multiples of the 64 x 64 tile) at 9 x 9 (F(4x4), partial
# tiles) with bias and relu; 40 -> 24 at 5 x 5 (F(2x2)) with a residual add; 40 -> 16 with no
# epilogue; a stride-2 convolution that stays direct; 256 -> 32 channels at 6 x 6, whose thin
# products are cut into 4 slices of 64 input channels (split-K)
CONVOLUTIONS = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(2, 16, 9, 9), float32], %w: Tensor[(40, 16, 3, 3), float32],
          %b: Tensor[(40), float32], %i: Tensor[(2, 40, 5, 5), float32],
          %w2: Tensor[(24, 40, 3, 3), float32], %r: Tensor[(2, 24, 5, 5), float32],
          %w3: Tensor[(16, 40, 3, 3), float32], %w4: Tensor[(16, 40, 3, 3), float32],
          %j: Tensor[(1, 256, 6, 6), float32], %w5: Tensor[(32, 256, 3, 3), float32]) {
  %0 = nn.relu(nn.bias_add(nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=40,
                                     kernel_size=[3, 3]), %b));
  %1 = nn.relu(add(nn.conv2d(%i, %w2, padding=[1, 1, 1, 1], channels=24, kernel_size=[3, 3]),
                   %r));
  %2 = nn.conv2d(%0, %w3, padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3]);
  %3 = nn.conv2d(%0, %w4, strides=[2, 2], padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3]);
  %4 = nn.relu(nn.conv2d(%j, %w5, padding=[1, 1, 1, 1], channels=32, kernel_size=[3, 3]));
  (%0, %1, %2, %3, %4)
}''')


def _inputs(mod, seed=0):
    rng = np.random.default_rng(seed)
    return {p.name_hint: rng.standard_normal([int(d) for d in p.type_annotation.shape])
            .astype("float32") for p in mod["main"].params}


def _rules(mod, target="opencl -device=cpu") -> list:
    with rb.PassContext(opt_level=3, config={"relay.target": target}):
        fused = rb.passes.default_pipeline(3)(mod)
    return [lower_primitive(node.function, target).rule
            for node in extract_graph(fused["main"]).nodes]


def _winograd_build_agrees(mod, target, seed=0):
    """``mod`` built with ``RB_GPU_CONV=winograd``, after checking its outputs against the
    interpreter's on seeded random inputs."""
    inputs = _inputs(mod, seed=seed)
    expected = rb.create_executor("interpreter", mod=mod).evaluate()(*inputs.values())
    with config.Context(RB_GPU_CONV="winograd"):
        lib = rb.build(mod, target=target, opt_level=3)
    got = lib.run(**inputs)
    for value, want in zip(got, expected):
        np.testing.assert_allclose(value, want, rtol=1e-4,
                                   atol=1e-5 * max(float(np.abs(want).max()), 1.0))
    return lib


def test_winograd_convolutions_agree_with_the_interpreter(target):
    lib = _winograd_build_agrees(CONVOLUTIONS, target)
    rules = sorted(k.rule for k in lib.kernels if "conv2d" in k.name)
    assert rules.count("conv2d_winograd") == 4, rules
    source = lib.source("opencl")
    assert "__local float" in source and "barrier(CLK_LOCAL_MEM_FENCE)" in source


def test_resnet18_with_winograd_agrees_with_the_interpreter(target, small_resnet18):
    """Every 3 x 3 stride-1 layer of a small ResNet-18 in Winograd's form, the weights
    transformed at compile time (FoldConstant), against the interpreter on the model as
    written."""
    mod, params, name, x, expected = small_resnet18
    with config.Context(RB_GPU_CONV="winograd"):
        lib = rb.build(mod, target=target, params=params, opt_level=3)
    got = lib.run(**{name: x})
    np.testing.assert_allclose(got, expected, rtol=1e-4,
                               atol=1e-5 * max(float(np.abs(expected).max()), 1.0))
    winograd = [k for k in lib.kernels if k.rule == "conv2d_winograd"]
    # the 3 x 3 stride-1 layers of every stage (the stem is 7 x 7, the downsampling ones stride 2)
    assert len(winograd) >= 4
    assert not any("winograd_weight_transform" in k.name for k in lib.kernels)   # folded


def test_winograd_schedule_stays_in_bounds():
    """The loop IR of one Winograd group (partial tiles of 64 channels x 64 tiles, padding,
    an epilogue) run by its evaluator, which checks every access against its buffer."""
    from relaybench import te
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 17, 6, 7), float32], %w: Tensor[(19, 17, 3, 3), float32],
          %b: Tensor[(19), float32]) {
  nn.relu(nn.bias_add(nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=19,
                                kernel_size=[3, 3]), %b))
}''')
    inputs = _inputs(mod, seed=1)
    with config.Context(RB_GPU_CONV="winograd"):
        with rb.PassContext(opt_level=3, config={"relay.target": "opencl"}):
            fused = rb.passes.default_pipeline(3)(rb.IRModule.from_expr(
                bind_params_by_name(mod["main"], {"w": inputs["w"]})))
        nodes = extract_graph(fused["main"]).nodes
        lowered = [lower_primitive(node.function, "opencl") for node in nodes]
    rules = [low.rule for low in lowered]
    assert "conv2d_winograd" in rules, rules
    # the weight transform was folded: the group takes the data, the transformed weight, bias
    (low,) = [low for low in lowered if low.rule == "conv2d_winograd"]
    params = low.prim_func.params
    args = [inputs["x"]]
    consts = {tuple(c.data.shape): c.data for c in _constants(fused)}
    consts[(19,)] = inputs["b"]
    for param in params[1:-1]:
        args.append(consts[tuple(int(d) for d in param.shape)].astype("float32"))
    out = np.zeros((1, 19, 6, 7), "float32")
    te.evaluate(low.prim_func, *args, out)
    expected = rb.create_executor("interpreter", mod=mod).evaluate()(*inputs.values())
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def _constants(mod):
    from relaybench.ir.expr import Constant
    from relaybench.ir.functor import post_order
    return [n for n in post_order(mod["main"]) if isinstance(n, Constant)]


def _layers():
    """512 channels of 28 x 28 and 64 of 7 x 7, the weights constants."""
    x = rb.var("x", shape=(1, 512, 28, 28))
    y = rb.var("y", shape=(1, 64, 7, 7))
    convs = [rb.op.nn.conv2d(v, rb.const(np.zeros((c, c, 3, 3), "float32")), padding=(1, 1),
                             channels=c, kernel_size=(3, 3)) for v, c in ((x, 512), (y, 64))]
    return rb.IRModule.from_expr(rb.Function([x, y], rb.Tuple(convs)))


def test_the_knob_chooses_winograd():
    with config.Context(RB_GPU_CONV="winograd"):
        rules = _rules(CONVOLUTIONS)
        # four Winograd groups, the weights' transforms (given at run time here), and the
        # stride-2 convolution as auto schedules it (direct: few outputs on a CPU device)
        assert rules.count("conv2d_winograd") == 4 and rules.count("direct") == 1, rules
    with config.Context(RB_GPU_CONV="auto"):
        # on a GPU, 512 channels of 28 x 28 (288 work groups of 256 work items); 64 channels
        # of 7 x 7 make too few and too thin products (16 work groups of 64, 7 MFLOP)
        gpu = _rules(_layers(), "opencl -device=gpu")
        assert gpu[0] == "conv2d_winograd" and gpu[1] != "conv2d_winograd"
        # never on a CPU device, and never with weights given at run time
        assert "conv2d_winograd" not in _rules(_layers())
        assert "conv2d_winograd" not in _rules(CONVOLUTIONS, "opencl -device=gpu")


@pytest.mark.parametrize("shape, tile", [((1, 64, 56, 56), 4), ((1, 64, 7, 7), 2),
                                         ((1, 3, 56, 56), 4)])
def test_winograd_tile_by_output_size(shape, tile):
    from relaybench.ir.types import TensorType
    attrs = {"kernel_size": (3, 3), "strides": (1, 1), "dilation": (1, 1), "groups": 1,
             "data_layout": "NCHW", "kernel_layout": "OIHW", "out_layout": ""}
    x = TensorType(shape, "float32")
    w = TensorType((shape[1], shape[1], 3, 3), "float32")
    assert gpu_winograd_tile(attrs, x, w, x, "gpu", "winograd") == tile


def _random_convolutions(seed: int, count: int):
    """``count`` 3 x 3 stride-1 convolutions of seeded random shapes (1 to 20 channels, 3 to 12
    pixels, batch 1 or 2, padding 0 to 2 on each side, uneven too), each with a random epilogue
    (none, bias and relu, a residual add), side by side in one module."""
    rng = np.random.default_rng(seed)
    params, outputs = [], []
    for i in range(count):
        n, c, k = int(rng.integers(1, 3)), int(rng.integers(1, 21)), int(rng.integers(1, 21))
        h, w = int(rng.integers(3, 13)), int(rng.integers(3, 13))
        pads = [int(p) for p in rng.integers(0, 3, 4)]
        x = rb.var(f"x{i}", shape=(n, c, h, w))
        weight = rb.var(f"w{i}", shape=(k, c, 3, 3))
        params += [x, weight]
        y = rb.op.nn.conv2d(x, weight, padding=pads, channels=k, kernel_size=(3, 3))
        oh, ow = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
        epilogue = int(rng.integers(0, 3))
        if epilogue == 1:
            bias = rb.var(f"b{i}", shape=(k,))
            params.append(bias)
            y = rb.op.nn.relu(rb.op.nn.bias_add(y, bias))
        elif epilogue == 2:
            residual = rb.var(f"r{i}", shape=(n, k, oh, ow))
            params.append(residual)
            y = rb.op.add(y, residual)
        outputs.append(y)
    return rb.IRModule.from_expr(rb.Function(params, rb.Tuple(outputs)))


def test_random_winograd_convolutions_agree_with_the_interpreter(target):
    """A small differential test of the Winograd groups (the random-program tester's
    convolutions are rarely 3 x 3 with stride and dilation 1 in NCHW, and its OpenCL
    configuration takes one program in six): six seeded random shapes, paddings and epilogues,
    every one in Winograd's form, against the interpreter."""
    lib = _winograd_build_agrees(_random_convolutions(7, 6), target, seed=2)
    rules = [k.rule for k in lib.kernels if "conv2d" in k.name and "weight_transform" not in
             k.name.replace("without_weight_transform", "")]
    assert rules.count("conv2d_winograd") == 6, rules


def test_a_one_channel_output_runs_on_pocl(target):
    """3 -> 1 channels at 8 x 4 with padding on the top and left only, from the random-program
    tester (``relaybench fuzz``): the products' copy of the 1-row weight tile is guarded in a
    loop with barriers, which PoCL's default work-group code generation miscompiled (the process
    crashed). The runtime asks PoCL for its ``loops`` method (``POCL_WORK_GROUP_METHOD``)."""
    import os
    x = rb.var("x", shape=(1, 3, 8, 4))
    weight = rb.var("w", shape=(1, 3, 3, 3))
    y = rb.op.nn.conv2d(x, weight, padding=(1, 1, 0, 0), channels=1, kernel_size=(3, 3))
    lib = _winograd_build_agrees(rb.IRModule.from_expr(rb.Function([x, weight], y)), target)
    assert [k.rule for k in lib.kernels if "conv2d" in k.name][-1] == "conv2d_winograd"
    assert os.environ.get("POCL_WORK_GROUP_METHOD")
