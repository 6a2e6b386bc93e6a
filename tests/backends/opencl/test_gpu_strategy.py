"""The GPU strategy's schedules, run by the loop IR's evaluator (which checks every access
against its buffer's bounds) against the interpreter: partial work groups and partial tiles
are guarded, and no work item reads outside a buffer, which a GPU would not report."""

import numpy as np
import pytest

import relaybench as rb
from relaybench import te
from relaybench.backends.graph_executor import extract_graph
from relaybench.backends.lowering import lower_primitive

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
