"""CombineParallelConv2D and CombineParallelDense: before/expected programs per rule, the cases
that must not combine, the interpreter before and after on random inputs, and generated
Inception-style blocks."""

import doctest

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.ir import assert_structural_equal, op_histogram
from relaybench.passes import combine_parallel_conv2d as conv_module
from relaybench.passes import combine_parallel_dense as dense_module
from relaybench.passes.infra import parse_pipeline
from relaybench.testing import run_infer_type

H = '#[version = "0.0.5"]\n'
T = "Tensor[({}), float32]"


def combine_conv(mod, **kw):
    return rb.passes.CombineParallelConv2D(**kw)(mod)


def combine_dense(mod, **kw):
    return rb.passes.CombineParallelDense(**kw)(mod)


def run(mod, *args):
    return rb.create_executor("interpreter", mod=mod).evaluate()(*args)


def random_inputs(mod, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for p in mod["main"].params:
        t = p.type_annotation
        out.append(rng.standard_normal(tuple(t.shape)).astype(t.dtype))
    return out


def assert_same_outputs(before, after, seed=0):
    args = random_inputs(before, seed)
    got, want = run(after, *args), run(before, *args)
    if not isinstance(want, tuple):
        got, want = (got,), (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def conv_params(channels, kernel=1, in_channels=4, extra=""):
    names = [f"%w{i}: {T.format(f'{c}, {in_channels}, {kernel}, {kernel}')}" for i, c in enumerate(channels, 1)]
    return ", ".join([f"%x: {T.format(f'1, {in_channels}, 6, 6')}"] + names) + extra


def test_docstring_examples():
    assert doctest.testmod(conv_module).failed == 0
    assert doctest.testmod(dense_module).failed == 0


def test_pass_info_and_options():
    c = rb.passes.CombineParallelConv2D()
    d = rb.passes.CombineParallelDense()
    assert (c.info.name, c.info.opt_level, c.info.kebab) == ("CombineParallelConv2D", 4, "combine-parallel-conv2d")
    assert (d.info.name, d.info.opt_level, d.info.kebab) == ("CombineParallelDense", 4, "combine-parallel-dense")
    assert rb.passes.infra.pass_options("CombineParallelConv2D") == {"min_num_branches": 3}
    assert rb.passes.infra.pass_options("CombineParallelDense") == {"min_num_branches": 3, "to_batch_matmul": True}
    seq = parse_pipeline("combine-parallel-conv2d{min_num_branches=2},combine-parallel-dense{to_batch_matmul=false}")
    assert [p.info.label for p in seq] == ["CombineParallelConv2D{min_num_branches=2}",
                                          "CombineParallelDense{to_batch_matmul=False}"]
    with pytest.raises(ValueError, match="at least 2"):
        combine_conv(rb.parse(H + "def @main(%x: float32) { %x }"), min_num_branches=1)


# ---- CombineParallelConv2D: what combines ---------------------------------------------------

def test_conv_with_bias_and_relu_chains():
    bias = ", %b1: Tensor[(2, 1, 1), float32], %b2: Tensor[(3, 1, 1), float32], %b3: Tensor[(5, 1, 1), float32]"
    before = rb.parse(H + f"""
def @main({conv_params([2, 3, 5], extra=bias)}) {{
  %0 = nn.conv2d(%x, %w1, channels=2, kernel_size=[1, 1]);
  %1 = nn.conv2d(%x, %w2, channels=3, kernel_size=[1, 1]);
  %2 = nn.conv2d(%x, %w3, channels=5, kernel_size=[1, 1]);
  (nn.relu(add(%0, %b1)), nn.relu(add(%1, %b2)), nn.relu(add(%2, %b3)))
}}""")
    expected = rb.parse(H + f"""
def @main({conv_params([2, 3, 5], extra=bias)}) {{
  %0 = nn.conv2d(%x, concatenate((%w1, %w2, %w3)), channels=10, kernel_size=[1, 1]);
  %1 = nn.relu(add(%0, concatenate((%b1, %b2, %b3))));
  (strided_slice(%1, begin=[0, 0], end=[-1, 2], strides=[1, 1], slice_mode="size"),
   strided_slice(%1, begin=[0, 2], end=[-1, 3], strides=[1, 1], slice_mode="size"),
   strided_slice(%1, begin=[0, 5], end=[-1, 5], strides=[1, 1], slice_mode="size"))
}}""")
    after = combine_conv(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    assert_same_outputs(before, after)


def test_conv_bias_add_and_per_channel_scale():
    extra = (", %b1: Tensor[(2), float32], %b2: Tensor[(2), float32], %b3: Tensor[(4), float32]"
             ", %s1: Tensor[(2, 1, 1), float32], %s2: Tensor[(2, 1, 1), float32], %s3: Tensor[(4, 1, 1), float32]")
    before = rb.parse(H + f"""
def @main({conv_params([2, 2, 4], kernel=3, extra=extra)}) {{
  %0 = nn.conv2d(%x, %w1, padding=[1, 1, 1, 1], channels=2, kernel_size=[3, 3]);
  %1 = nn.conv2d(%x, %w2, padding=[1, 1, 1, 1], channels=2, kernel_size=[3, 3]);
  %2 = nn.conv2d(%x, %w3, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3]);
  (multiply(nn.bias_add(%0, %b1), %s1), multiply(nn.bias_add(%1, %b2), %s2), multiply(nn.bias_add(%2, %b3), %s3))
}}""")
    expected = rb.parse(H + f"""
def @main({conv_params([2, 2, 4], kernel=3, extra=extra)}) {{
  %0 = nn.conv2d(%x, concatenate((%w1, %w2, %w3)), padding=[1, 1, 1, 1], channels=8, kernel_size=[3, 3]);
  %1 = nn.bias_add(%0, concatenate((%b1, %b2, %b3)));
  %2 = multiply(%1, concatenate((%s1, %s2, %s3)));
  (strided_slice(%2, begin=[0, 0], end=[-1, 2], strides=[1, 1], slice_mode="size"),
   strided_slice(%2, begin=[0, 2], end=[-1, 2], strides=[1, 1], slice_mode="size"),
   strided_slice(%2, begin=[0, 4], end=[-1, 4], strides=[1, 1], slice_mode="size"))
}}""")
    after = combine_conv(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    assert_same_outputs(before, after)


def test_conv_chains_combine_while_every_branch_agrees():
    before = rb.parse(H + f"""
def @main({conv_params([2, 3, 4])}) {{
  %0 = nn.conv2d(%x, %w1, channels=2, kernel_size=[1, 1]);
  %1 = nn.conv2d(%x, %w2, channels=3, kernel_size=[1, 1]);
  %2 = nn.conv2d(%x, %w3, channels=4, kernel_size=[1, 1]);
  %3 = multiply(%0, 2f);
  %4 = multiply(%1, 2f);
  %5 = multiply(%2, 2f);
  (sigmoid(nn.relu(%3)), nn.relu(nn.relu(%4)), tanh(nn.relu(%5)))
}}""")
    expected = rb.parse(H + f"""
def @main({conv_params([2, 3, 4])}) {{
  %0 = nn.conv2d(%x, concatenate((%w1, %w2, %w3)), channels=9, kernel_size=[1, 1]);
  %1 = nn.relu(multiply(%0, 2f));
  (sigmoid(strided_slice(%1, begin=[0, 0], end=[-1, 2], strides=[1, 1], slice_mode="size")),
   nn.relu(strided_slice(%1, begin=[0, 2], end=[-1, 3], strides=[1, 1], slice_mode="size")),
   tanh(strided_slice(%1, begin=[0, 5], end=[-1, 4], strides=[1, 1], slice_mode="size")))
}}""")
    after = combine_conv(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    assert_same_outputs(before, after)


def test_conv_chain_stops_at_the_shortest_branch_and_at_shared_nodes():
    before = rb.parse(H + f"""
def @main({conv_params([2, 3, 4])}) {{
  %0 = nn.conv2d(%x, %w1, channels=2, kernel_size=[1, 1]);
  %1 = nn.conv2d(%x, %w2, channels=3, kernel_size=[1, 1]);
  %2 = nn.conv2d(%x, %w3, channels=4, kernel_size=[1, 1]);
  %3 = nn.relu(%0);
  %4 = nn.relu(%1);
  %5 = nn.relu(%2);
  (exp(%3), exp(%4), %5, %3)
}}""")
    after = combine_conv(before)
    # the first branch's relu has two users, so the chains end at the relu for every branch
    assert op_histogram(after) == {"nn.conv2d": 1, "concatenate": 1, "nn.relu": 1, "strided_slice": 3, "exp": 2}
    assert_same_outputs(before, after)


def test_conv_nhwc_layout():
    params = (f"%x: {T.format('1, 5, 5, 3')}, %w1: {T.format('1, 1, 3, 2')}, "
              f"%w2: {T.format('1, 1, 3, 4')}, %w3: {T.format('1, 1, 3, 1')}, %b: {T.format('1')}")
    attrs = 'data_layout="NHWC", kernel_layout="HWIO"'
    before = rb.parse(H + f"""
def @main({params}) {{
  (add(nn.conv2d(%x, %w1, channels=2, kernel_size=[1, 1], {attrs}), %b),
   add(nn.conv2d(%x, %w2, channels=4, kernel_size=[1, 1], {attrs}), %b),
   add(nn.conv2d(%x, %w3, channels=1, kernel_size=[1, 1], {attrs}), %b))
}}""")
    expected = rb.parse(H + f"""
def @main({params}) {{
  %0 = nn.conv2d(%x, concatenate((%w1, %w2, %w3), axis=3), channels=7, kernel_size=[1, 1], {attrs});
  %1 = add(%0, %b);
  (strided_slice(%1, begin=[0, 0, 0, 0], end=[-1, -1, -1, 2], strides=[1, 1, 1, 1], slice_mode="size"),
   strided_slice(%1, begin=[0, 0, 0, 2], end=[-1, -1, -1, 4], strides=[1, 1, 1, 1], slice_mode="size"),
   strided_slice(%1, begin=[0, 0, 0, 6], end=[-1, -1, -1, 1], strides=[1, 1, 1, 1], slice_mode="size"))
}}""")
    after = combine_conv(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    assert_same_outputs(before, after)


def test_min_num_branches_two_combines_a_pair():
    before = rb.parse(H + f"""
def @main({conv_params([2, 3])}) {{
  (nn.conv2d(%x, %w1, channels=2, kernel_size=[1, 1]), nn.conv2d(%x, %w2, channels=3, kernel_size=[1, 1]))
}}""")
    assert combine_conv(before) is before
    after = combine_conv(before, min_num_branches=2)
    assert op_histogram(after)["nn.conv2d"] == 1
    assert_same_outputs(before, after)


def test_groups_split_by_kernel_size():
    before = rb.parse(H + f"""
def @main(%x: {T.format('1, 4, 6, 6')}, %a1: {T.format('2, 4, 1, 1')}, %a2: {T.format('2, 4, 1, 1')},
          %a3: {T.format('3, 4, 1, 1')}, %k1: {T.format('2, 4, 3, 3')}, %k2: {T.format('2, 4, 3, 3')}) {{
  (nn.conv2d(%x, %a1, channels=2, kernel_size=[1, 1]), nn.conv2d(%x, %k1, channels=2, kernel_size=[3, 3]),
   nn.conv2d(%x, %a2, channels=2, kernel_size=[1, 1]), nn.conv2d(%x, %k2, channels=2, kernel_size=[3, 3]),
   nn.conv2d(%x, %a3, channels=3, kernel_size=[1, 1]))
}}""")
    after = combine_conv(before)
    assert op_histogram(after) == {"nn.conv2d": 3, "concatenate": 1, "strided_slice": 3}
    assert_same_outputs(before, after)
    after2 = combine_conv(before, min_num_branches=2)
    assert op_histogram(after2) == {"nn.conv2d": 2, "concatenate": 2, "strided_slice": 5}
    assert_same_outputs(before, after2)


# ---- CombineParallelConv2D: what must not combine ---------------------------------------------

@pytest.mark.parametrize("attrs", [
    ['strides=[2, 2]', '', ''],
    ['padding=[1, 1, 1, 1]', '', ''],
    ['dilation=[2, 2]', '', ''],
    ['out_dtype="float32"', '', ''],
])
def test_conv_attrs_that_differ_prevent_combining(attrs):
    calls = ", ".join(f"nn.conv2d(%x, %w{i}, channels=2, kernel_size=[1, 1]{', ' + a if a else ''})"
                      for i, a in enumerate(attrs, 1))
    before = rb.parse(H + f"def @main({conv_params([2, 2, 2])}) {{ ({calls}) }}")
    assert combine_conv(before) is before


def test_conv_with_groups_or_different_inputs_is_left_alone():
    grouped = rb.parse(H + f"""
def @main(%x: {T.format('1, 4, 6, 6')}, %w1: {T.format('4, 2, 1, 1')}, %w2: {T.format('4, 2, 1, 1')},
          %w3: {T.format('4, 2, 1, 1')}) {{
  (nn.conv2d(%x, %w1, groups=2, channels=4, kernel_size=[1, 1]),
   nn.conv2d(%x, %w2, groups=2, channels=4, kernel_size=[1, 1]),
   nn.conv2d(%x, %w3, groups=2, channels=4, kernel_size=[1, 1]))
}}""")
    assert combine_conv(grouped) is grouped
    inputs = rb.parse(H + f"""
def @main({conv_params([2, 2, 2])}, %y: {T.format('1, 4, 6, 6')}) {{
  (nn.conv2d(%x, %w1, channels=2, kernel_size=[1, 1]), nn.conv2d(%y, %w2, channels=2, kernel_size=[1, 1]),
   nn.conv2d(%x, %w3, channels=2, kernel_size=[1, 1]))
}}""")
    assert combine_conv(inputs) is inputs


def test_convs_in_different_branches_are_not_combined():
    before = rb.parse(H + f"""
def @main({conv_params([2, 2, 2])}, %c: bool) {{
  %0 = nn.conv2d(%x, %w1, channels=2, kernel_size=[1, 1]);
  if (%c) {{ add(%0, nn.conv2d(%x, %w2, channels=2, kernel_size=[1, 1])) }}
  else {{ add(%0, nn.conv2d(%x, %w3, channels=2, kernel_size=[1, 1])) }}
}}""")
    assert combine_conv(before) is before


def test_chain_arguments_that_do_not_line_up_stop_the_chain():
    extra = f", %s: {T.format('6, 6')}, %t: {T.format('6, 6')}"
    before = rb.parse(H + f"""
def @main({conv_params([2, 2, 2], extra=extra)}) {{
  %0 = nn.conv2d(%x, %w1, channels=2, kernel_size=[1, 1]);
  %1 = nn.conv2d(%x, %w2, channels=2, kernel_size=[1, 1]);
  %2 = nn.conv2d(%x, %w3, channels=2, kernel_size=[1, 1]);
  (multiply(%0, %s), multiply(%1, %s), multiply(%2, %t), add(%0, 1f))
}}""")
    after = combine_conv(before)  # %0 has two users: no chains at all
    assert op_histogram(after)["multiply"] == 3 and op_histogram(after)["nn.conv2d"] == 1
    assert_same_outputs(before, after)
    before2 = rb.parse(H + f"""
def @main({conv_params([2, 2, 2], extra=extra)}) {{
  %0 = nn.conv2d(%x, %w1, channels=2, kernel_size=[1, 1]);
  %1 = nn.conv2d(%x, %w2, channels=2, kernel_size=[1, 1]);
  %2 = nn.conv2d(%x, %w3, channels=2, kernel_size=[1, 1]);
  (multiply(%0, %s), multiply(%1, %s), multiply(%2, %t))
}}""")
    after2 = combine_conv(before2)  # %s and %t are per-pixel, not per-channel, and differ
    assert op_histogram(after2)["multiply"] == 3
    assert_same_outputs(before2, after2)
    before3 = rb.parse(H + f"""
def @main({conv_params([2, 2, 2], extra=extra)}) {{
  %0 = nn.conv2d(%x, %w1, channels=2, kernel_size=[1, 1]);
  %1 = nn.conv2d(%x, %w2, channels=2, kernel_size=[1, 1]);
  %2 = nn.conv2d(%x, %w3, channels=2, kernel_size=[1, 1]);
  (multiply(%0, %s), multiply(%1, %s), multiply(%2, %s))
}}""")
    after3 = combine_conv(before3)  # the same per-pixel tensor everywhere: used as it is
    assert op_histogram(after3)["multiply"] == 1
    assert_same_outputs(before3, after3)


def test_let_bound_convs_combine_and_keep_their_values():
    before = rb.parse(H + f"""
def @main({conv_params([2, 3, 4])}) {{
  let %a = nn.conv2d(%x, %w1, channels=2, kernel_size=[1, 1]);
  let %b = nn.conv2d(%x, %w2, channels=3, kernel_size=[1, 1]);
  let %c = nn.conv2d(%x, %w3, channels=4, kernel_size=[1, 1]);
  (%a, nn.relu(%b), %c)
}}""")
    after = combine_conv(before)
    assert op_histogram(after)["nn.conv2d"] == 1
    assert_same_outputs(before, after)


# ---- an Inception-style network --------------------------------------------------------------

def _inception_block(x, in_ch, spec, rng, params, prefix):
    """Four branches over ``x``: 1x1; 1x1 -> 3x3; 1x1 -> 5x5; 3x3 max-pool -> 1x1. Each conv is
    followed by a bias_add and a relu; the outputs are concatenated along channels."""
    def conv(data, cin, cout, k, name):
        w = rb.var(f"{prefix}{name}_w", shape=(cout, cin, k, k))
        b = rb.var(f"{prefix}{name}_b", shape=(cout,))
        params[w] = rng.standard_normal((cout, cin, k, k)).astype("float32") * 0.3
        params[b] = rng.standard_normal((cout,)).astype("float32") * 0.1
        y = op.nn.conv2d(data, w, channels=cout, kernel_size=(k, k), padding=(k // 2, k // 2))
        return op.nn.relu(op.nn.bias_add(y, b))

    c1, r3, c3, r5, c5, cp = spec
    b1 = conv(x, in_ch, c1, 1, "b1")
    b2 = conv(conv(x, in_ch, r3, 1, "b2r"), r3, c3, 3, "b2")
    b3 = conv(conv(x, in_ch, r5, 1, "b3r"), r5, c5, 5, "b3")
    pooled = op.nn.max_pool2d(x, pool_size=(3, 3), strides=(1, 1), padding=(1, 1))
    b4 = conv(pooled, in_ch, cp, 1, "b4")
    return op.concatenate(rb.Tuple([b1, b2, b3, b4]), axis=1), c1 + c3 + c5 + cp


def _inception_net(blocks=2):
    rng = np.random.default_rng(1)
    x = rb.var("data", shape=(1, 6, 8, 8))
    params = {}
    y, ch = x, 6
    specs = [(4, 3, 4, 2, 3, 2), (3, 4, 5, 2, 2, 3)]
    for i in range(blocks):
        y, ch = _inception_block(y, ch, specs[i % 2], rng, params, f"i{i}_")
    free = [x] + list(params)
    return rb.IRModule.from_expr(rb.Function(free, y)), [params[p] for p in free[1:]]


def test_inception_blocks_combine_their_parallel_1x1_convolutions():
    mod, weights = _inception_net(blocks=2)
    after = combine_conv(mod)
    before_hist, after_hist = op_histogram(mod), op_histogram(after)
    # each block: three 1x1 convolutions of the block input become one
    assert before_hist["nn.conv2d"] == 12 and after_hist["nn.conv2d"] == 8
    assert after_hist["strided_slice"] == 6
    assert after_hist["nn.bias_add"] == before_hist["nn.bias_add"] - 4
    rng = np.random.default_rng(2)
    data = rng.standard_normal((1, 6, 8, 8)).astype("float32")
    np.testing.assert_allclose(run(after, data, *weights), run(mod, data, *weights), rtol=1e-4, atol=1e-5)
    assert combine_conv(after) is after


def test_inception_with_bound_weights_runs_the_same_after_fold_constant_free_combining():
    mod, weights = _inception_net(blocks=1)
    names = [p.name_hint for p in mod["main"].params[1:]]
    bound = rb.passes.bind_params(mod, dict(zip(names, weights)))
    after = combine_conv(bound)
    assert op_histogram(after)["nn.conv2d"] == 4
    data = np.random.default_rng(3).standard_normal((1, 6, 8, 8)).astype("float32")
    np.testing.assert_allclose(run(after, data), run(bound, data), rtol=1e-4, atol=1e-5)


def test_vision_zoo_models():
    # resnet18's parallel convolutions differ in kernel size: nothing to combine
    mod, _ = rb.models.get("resnet18", image_shape=(3, 16, 16), num_classes=10)
    assert combine_conv(mod, min_num_branches=2) is mod
    # resnet50's projection shortcut and first bottleneck conv are both 1x1 over the stage input
    mod, params = rb.models.get("resnet50", image_shape=(3, 16, 16), num_classes=10)
    after = combine_conv(mod, min_num_branches=2)
    assert op_histogram(after)["nn.conv2d"] == op_histogram(mod)["nn.conv2d"] - 1
    data = np.random.default_rng(4).standard_normal((1, 3, 16, 16)).astype("float32")
    np.testing.assert_allclose(rb.create_executor("interpreter", mod=after).evaluate()(data, **params),
                               rb.create_executor("interpreter", mod=mod).evaluate()(data, **params),
                               rtol=1e-4, atol=1e-5)


# ---- CombineParallelDense --------------------------------------------------------------------

def dense_params(units, extra=""):
    names = [f"%w{i}: {T.format(f'{u}, 4')}" for i, u in enumerate(units, 1)]
    return ", ".join([f"%x: {T.format('2, 4')}"] + names) + extra


def test_dense_to_batch_matmul_with_bias_and_relu():
    extra = ", %b1: Tensor[(3), float32], %b2: Tensor[(3), float32], %b3: Tensor[(3), float32]"
    before = rb.parse(H + f"""
def @main({dense_params([3, 3, 3], extra)}) {{
  (nn.relu(add(nn.dense(%x, %w1), %b1)), nn.relu(add(nn.dense(%x, %w2), %b2)), nn.relu(add(nn.dense(%x, %w3), %b3)))
}}""")
    expected = rb.parse(H + f"""
def @main({dense_params([3, 3, 3], extra)}) {{
  %0 = nn.batch_matmul(stack((%x, %x, %x)), stack((%w1, %w2, %w3)));
  %1 = stack((expand_dims(%b1, axis=0), expand_dims(%b2, axis=0), expand_dims(%b3, axis=0)));
  %2 = nn.relu(add(%0, %1));
  %3 = split(%2, indices_or_sections=3);
  (squeeze(%3.0, axis=[0]), squeeze(%3.1, axis=[0]), squeeze(%3.2, axis=[0]))
}}""")
    after = combine_dense(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    assert_same_outputs(before, after)


def test_dense_to_batch_matmul_turns_bias_add_into_a_broadcast_add():
    extra = ", %b1: Tensor[(3), float32], %b2: Tensor[(3), float32], %b3: Tensor[(3), float32]"
    before = rb.parse(H + f"""
def @main({dense_params([3, 3, 3], extra)}) {{
  (multiply(nn.bias_add(nn.dense(%x, %w1), %b1), 0.5f), multiply(nn.bias_add(nn.dense(%x, %w2), %b2), 0.5f),
   multiply(nn.bias_add(nn.dense(%x, %w3), %b3), 0.5f))
}}""")
    expected = rb.parse(H + f"""
def @main({dense_params([3, 3, 3], extra)}) {{
  %0 = nn.batch_matmul(stack((%x, %x, %x)), stack((%w1, %w2, %w3)));
  %1 = stack((expand_dims(%b1, axis=0), expand_dims(%b2, axis=0), expand_dims(%b3, axis=0)));
  %2 = multiply(add(%0, %1), 0.5f);
  %3 = split(%2, indices_or_sections=3);
  (squeeze(%3.0, axis=[0]), squeeze(%3.1, axis=[0]), squeeze(%3.2, axis=[0]))
}}""")
    after = combine_dense(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    assert_same_outputs(before, after)


def test_dense_shapes_decide_between_the_strategies():
    before = rb.parse(H + f"""
def @main({dense_params([2, 3, 5])}) {{
  (nn.dense(%x, %w1), nn.dense(%x, %w2), nn.dense(%x, %w3))
}}""")
    assert combine_dense(before) is before  # the weights differ in shape: no batch_matmul
    expected = rb.parse(H + f"""
def @main({dense_params([2, 3, 5])}) {{
  %0 = nn.dense(%x, concatenate((%w1, %w2, %w3)), units=10);
  (strided_slice(%0, begin=[0, 0], end=[-1, 2], strides=[1, 1], slice_mode="size"),
   strided_slice(%0, begin=[0, 2], end=[-1, 3], strides=[1, 1], slice_mode="size"),
   strided_slice(%0, begin=[0, 5], end=[-1, 5], strides=[1, 1], slice_mode="size"))
}}""")
    after = combine_dense(before, to_batch_matmul=False)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    assert_same_outputs(before, after)


def test_dense_to_dense_combines_per_unit_chains():
    extra = ", %b1: Tensor[(2), float32], %b2: Tensor[(3), float32], %b3: Tensor[(5), float32]"
    before = rb.parse(H + f"""
def @main({dense_params([2, 3, 5], extra)}) {{
  (tanh(nn.bias_add(nn.dense(%x, %w1), %b1, axis=-1)), tanh(nn.bias_add(nn.dense(%x, %w2), %b2, axis=-1)),
   tanh(nn.bias_add(nn.dense(%x, %w3), %b3, axis=-1)))
}}""")
    expected = rb.parse(H + f"""
def @main({dense_params([2, 3, 5], extra)}) {{
  %0 = nn.dense(%x, concatenate((%w1, %w2, %w3)), units=10);
  %1 = tanh(nn.bias_add(%0, concatenate((%b1, %b2, %b3)), axis=-1));
  (strided_slice(%1, begin=[0, 0], end=[-1, 2], strides=[1, 1], slice_mode="size"),
   strided_slice(%1, begin=[0, 2], end=[-1, 3], strides=[1, 1], slice_mode="size"),
   strided_slice(%1, begin=[0, 5], end=[-1, 5], strides=[1, 1], slice_mode="size"))
}}""")
    after = combine_dense(before, to_batch_matmul=False)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    assert_same_outputs(before, after)


def test_dense_negative_cases():
    two = rb.parse(H + f"def @main({dense_params([3, 3])}) {{ (nn.dense(%x, %w1), nn.dense(%x, %w2)) }}")
    assert combine_dense(two) is two
    assert op_histogram(combine_dense(two, min_num_branches=2))["nn.batch_matmul"] == 1
    dtypes = rb.parse(H + f"""
def @main({dense_params([3, 3, 3])}) {{
  (nn.dense(%x, %w1, out_dtype="float32"), nn.dense(%x, %w2), nn.dense(%x, %w3))
}}""")
    assert combine_dense(dtypes) is dtypes
    assert combine_dense(dtypes, to_batch_matmul=False) is dtypes


@pytest.mark.parametrize("to_batch_matmul", [True, False])
def test_attention_style_projections_keep_their_outputs(to_batch_matmul):
    # query/key/value projections of one input, each with a bias and a scale
    d = 8
    params = ", ".join([f"%x: {T.format(f'5, {d}')}"] + [f"%w{n}: {T.format(f'{d}, {d}')}" for n in "qkv"]
                       + [f"%b{n}: {T.format(f'{d}')}" for n in "qkv"])
    before = rb.parse(H + f"""
def @main({params}) {{
  let %q = multiply(add(nn.dense(%x, %wq), %bq), 0.25f);
  let %k = multiply(add(nn.dense(%x, %wk), %bk), 0.25f);
  let %v = multiply(add(nn.dense(%x, %wv), %bv), 0.25f);
  nn.batch_matmul(expand_dims(nn.softmax(nn.dense(%q, %k)), axis=0), expand_dims(transpose(%v), axis=0))
}}""")
    after = combine_dense(before, to_batch_matmul=to_batch_matmul)
    hist = op_histogram(after)
    assert hist["add"] == 1 and hist["multiply"] == 1
    assert_same_outputs(before, after)
