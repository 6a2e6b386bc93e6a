"""The GPU strategy's schedules, run by the loop IR's evaluator (which checks every access
against its buffer's bounds) against the interpreter: partial work groups and partial tiles
are guarded, and no work item reads outside a buffer, which a GPU would not report."""

import numpy as np
import pytest

import relaybench as rb
from relaybench import te
from relaybench.backends.graph_executor import extract_graph
from relaybench.backends.lowering import lower_primitive
from relaybench.backends.strategy import gpu

PROGRAM = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 11, 11), float32], %w: Tensor[(5, 3, 3, 3), float32],
          %b: Tensor[(5), float32], %v: Tensor[(20, 37), float32],
          %u: Tensor[(45, 37), float32]) {
  %0 = nn.relu(nn.bias_add(nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=5,
                                     kernel_size=[3, 3]), %b));
  (%0, nn.max_pool2d(%0, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1]),
   nn.softmax(%v), nn.dense(%v, %u), sum(%v, axis=[1]))
}''')

RULES = {"fused_nn_conv2d_add_nn_relu": "direct", "fused_nn_max_pool2d": "direct",
         "fused_nn_softmax": "reduce", "fused_nn_dense": "dense_shared", "fused_sum": "direct"}


@pytest.mark.parametrize("target", ["opencl", "llvm"])
def test_gpu_schedules_stay_in_bounds(target):
    """Each group of the program lowered for the GPU and evaluated: 605 conv outputs are not a
    multiple of 256 work items, 45 dense features and 37 inputs not of the 32-wide tiles. With
    ``relay.target`` llvm the convolution arrives blocked (NCHW5c): the GPU rules take that too."""
    with rb.PassContext(opt_level=3, config={"relay.target": target}):
        fused = rb.passes.default_pipeline(3)(PROGRAM)
    rng = np.random.default_rng(0)
    seen = {}
    for node in extract_graph(fused["main"]).nodes:
        lowered = lower_primitive(node.function, "opencl")
        args = [rng.standard_normal(tuple(t.shape)).astype(t.dtype)
                for t in lowered.input_types] + [np.asarray(c) for c in lowered.constants]
        outs = [np.zeros(tuple(t.shape), t.dtype) for t in lowered.output_types]
        te.evaluate(lowered.prim_func, *args, *outs)    # raises on an out-of-bounds access
        reference = rb.create_executor("interpreter").evaluate(
            rb.Function(node.function.params, node.function.body))(*args[:len(node.function.params)])
        for got, want in zip(outs, reference if isinstance(reference, tuple) else [reference]):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        seen[lowered.name] = lowered.rule
    for name, rule in RULES.items():
        assert seen.get(name, rule) == rule
    assert ("fused_layout_transform" in seen) == (target == "llvm")


BATCHED = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(2, 32, 5, 5), float32], %w: Tensor[(6, 32, 1, 1), float32],
          %b: Tensor[(6), float32]) {
  nn.relu(nn.bias_add(nn.conv2d(%x, %w, channels=6, kernel_size=[1, 1]), %b))
}''')


@pytest.mark.parametrize("mode,rule", [("direct", "direct"), ("splitk", "direct_splitk")])
def test_convolution_past_the_last_output_reads_nothing(mode, rule, monkeypatch):
    """300 outputs in work groups of 256: the 212 work items past the end compute nothing (the
    accumulation computed at their loop sits under the store's guard, not only its reads under
    their region's), and every access stays in bounds. ``splitk`` cuts the 32 input channels
    in two slices of 16, partial sums in a stage of their own, then adds them in the
    epilogue."""
    # 32 multiply-adds per output: below the size split-K pays for on a GPU (see the next
    # test), admitted here to keep the evaluated program small
    monkeypatch.setattr(gpu, "SPLITK_MIN_REDUCTION", 32)
    with rb.config.Context(RB_GPU_CONV=mode):
        with rb.PassContext(opt_level=3, config={"relay.target": "opencl -device=gpu"}):
            fused = rb.passes.default_pipeline(3)(BATCHED)
        (node,) = extract_graph(fused["main"]).nodes
        lowered = lower_primitive(node.function, "opencl -device=gpu")
    assert lowered.rule == rule
    text = str(lowered.prim_func)
    guard = "i0_i1_fused_i2_fused_i3_fused_inner < 300:"
    assert text.index(guard) < text.index("conv2d[0, 0, 0, 0] = 0.0")
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(tuple(t.shape)).astype(t.dtype) for t in lowered.input_types]
    out = np.zeros((2, 6, 5, 5), "float32")
    te.evaluate(lowered.prim_func, *args, out)    # raises on an out-of-bounds access
    want = rb.create_executor("interpreter", mod=BATCHED).evaluate()(*args)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
    if mode == "splitk":
        assert "conv2d_rf = allocate((2, 2, 6, 5, 5)" in str(lowered.prim_func)


SPLIT_OR_NOT = rb.parse('''#[version = "0.0.5"]
def @main(%a: Tensor[(1, 512, 7, 7), float32], %wa: Tensor[(512, 512, 3, 3), float32],
          %b: Tensor[(1, 128, 28, 28), float32], %wb: Tensor[(128, 128, 3, 3), float32],
          %c: Tensor[(1, 960, 7, 7), float32], %wc: Tensor[(160, 960, 1, 1), float32]) {
  (nn.relu(nn.conv2d(%a, %wa, padding=[1, 1, 1, 1], channels=512, kernel_size=[3, 3])),
   nn.relu(nn.conv2d(%b, %wb, padding=[1, 1, 1, 1], channels=128, kernel_size=[3, 3])),
   nn.conv2d(%c, %wc, channels=160, kernel_size=[1, 1]))
}''')


def test_split_k_where_the_gpu_measurement_says():
    """``RB_GPU_CONV=auto`` on a GPU is ``splitk``: ResNet-18's 512 channels of 7 x 7 split
    in eight slices of 64 channels; 128 x 28 x 28 outputs are enough work items unsplit; a
    1 x 1 layer of 960 multiply-adds per output would not repay its second launch. On a CPU
    device ``auto`` keeps its own rule (no split)."""
    def rules(target):
        with rb.PassContext(opt_level=3, config={"relay.target": target}):
            fused = rb.passes.default_pipeline(3)(SPLIT_OR_NOT)
        return [lower_primitive(node.function, target) for node in
                extract_graph(fused["main"]).nodes]
    with rb.config.Context(RB_GPU_CONV="auto"):
        lowered = rules("opencl -device=gpu")
        assert [k.rule for k in lowered] == ["direct_splitk", "direct", "direct"]
        assert "conv2d_rf = allocate((8, 1, 512, 7, 7)" in str(lowered[0].prim_func)
        assert "direct_splitk" not in [k.rule for k in rules("opencl -device=cpu")]
