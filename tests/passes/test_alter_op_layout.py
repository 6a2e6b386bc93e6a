"""AlterOpLayout: hand-written before/expected programs for the layout rules it drives, the
interpreter before and after on random inputs, ResNet-18 / MobileNet V2 / VGG-16 (small) blocked
end to end, and a 20,000-op chain."""

import doctest
import re

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.ir import assert_structural_equal, op_histogram, post_order
from relaybench.passes import _layout_rules, alter_op_layout
from relaybench.passes.alter_op_layout import channel_block

H = '#[version = "0.0.5"]\n'


@pytest.fixture(autouse=True)
def _images_as_images(monkeypatch):
    """These tests check the layout rules; a host without AVX-512 would also compute its 1x1
    convolutions on images as one row (``FFlattenImage``, tested in
    ``tests/backends/test_image_rows.py``), which these programs' text does not expect."""
    monkeypatch.setattr(alter_op_layout, "flatten_hooks", lambda target: {})


def alter(mod, **options):
    with rb.PassContext(opt_level=3):
        return rb.passes.AlterOpLayout(**options)(mod)


def expected(text):
    return rb.passes.InferType()(rb.parse(H + text))


def run(mod, *args):
    return rb.create_executor("interpreter", mod=mod).evaluate()(*args)


def random_args(mod, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for p in mod["main"].params:
        t = p.type_annotation
        if t.dtype == "bool":
            out.append(np.array(True))
        else:
            out.append(rng.standard_normal([int(d) for d in t.shape]).astype(t.dtype))
    return out


def check_same_outputs(before, after, seed=0):
    args = random_args(before, seed)
    np.testing.assert_allclose(run(after, *args), run(before, *args), rtol=1e-5, atol=1e-6)


def calls(mod, name):
    return [n for n in post_order(mod["main"].body)
            if isinstance(n, rb.Call) and isinstance(n.op, rb.Op) and n.op.name == name]


def test_docstring_examples():
    assert doctest.testmod(alter_op_layout).failed == 0
    assert doctest.testmod(_layout_rules).failed == 0


def test_pass_info():
    p = rb.passes.AlterOpLayout()
    assert (p.info.name, p.info.opt_level, p.info.kebab) == ("AlterOpLayout", 3, "alter-op-layout")


def test_channel_block_is_the_largest_divisor_up_to_the_simd_width():
    # 16 for every power of two from 16 up, 3 for RGB, the largest divisor otherwise
    assert [channel_block(c) for c in (3, 8, 16, 24, 64, 96, 144, 320, 1280)] == \
        [3, 8, 16, 12, 16, 16, 16, 16, 16]
    assert [channel_block(c, 8) for c in (3, 64, 12)] == [3, 8, 6]
    assert channel_block(17) == 1


# ---------------------------------------------------------------------------------------------
# Before / expected

def test_conv_relu_pool():
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(32, 3, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=32, kernel_size=[3, 3]);
  %1 = nn.relu(%0);
  nn.max_pool2d(%1, pool_size=[2, 2], strides=[2, 2])
}""")
    after = alter(before)
    assert_structural_equal(after, expected("""
def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(32, 3, 3, 3), float32]) {
  %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NCHW3c");
  %1 = layout_transform(%w, src_layout="OIHW", dst_layout="OIHW3i16o");
  %2 = nn.conv2d(%0, %1, padding=[1, 1, 1, 1], channels=32, kernel_size=[3, 3], data_layout="NCHW3c",
                 kernel_layout="OIHW3i16o", out_layout="NCHW16c");
  %3 = nn.relu(%2);
  %4 = nn.max_pool2d(%3, pool_size=[2, 2], strides=[2, 2], layout="NCHW16c");
  layout_transform(%4, src_layout="NCHW16c", dst_layout="NCHW")
}"""), map_free_vars=True)
    check_same_outputs(before, after)


def test_per_channel_operands_are_transformed_into_the_blocked_layout():
    # the batch-norm arithmetic: a (C, 1, 1) scale and shift follow the data into NCHW16c as CHW16c
    # (a transform that moves nothing there, so a reshape)
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 16, 6, 6), float32], %w: Tensor[(32, 16, 3, 3), float32],
          %s: Tensor[(32, 1, 1), float32], %b: Tensor[(32, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=32, kernel_size=[3, 3]);
  %1 = multiply(%0, %s);
  %2 = add(%1, %b);
  nn.relu(%2)
}""")
    after = alter(before)
    assert_structural_equal(after, expected("""
def @main(%x: Tensor[(1, 16, 6, 6), float32], %w: Tensor[(32, 16, 3, 3), float32],
          %s: Tensor[(32, 1, 1), float32], %b: Tensor[(32, 1, 1), float32]) {
  %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NCHW16c");
  %1 = layout_transform(%w, src_layout="OIHW", dst_layout="OIHW16i16o");
  %2 = nn.conv2d(%0, %1, padding=[1, 1, 1, 1], channels=32, kernel_size=[3, 3], data_layout="NCHW16c",
                 kernel_layout="OIHW16i16o", out_layout="NCHW16c");
  %3 = reshape(%s, newshape=[2, 1, 1, 16]);
  %4 = multiply(%2, %3);
  %5 = reshape(%b, newshape=[2, 1, 1, 16]);
  %6 = add(%4, %5);
  %7 = nn.relu(%6);
  layout_transform(%7, src_layout="NCHW16c", dst_layout="NCHW")
}"""), map_free_vars=True)
    check_same_outputs(before, after)


def test_operands_that_broadcast_along_the_channels():
    # (1, H, W): the channel axis has extent 1, so the block stays 1 (a reshape adds it);
    # (H, W): not a suffix of NCHW16c's axes, so the missing axes come in front first
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 16, 4, 4), float32], %w: Tensor[(16, 16, 1, 1), float32],
          %m: Tensor[(1, 4, 4), float32], %n: Tensor[(4, 4), float32]) {
  %0 = nn.conv2d(%x, %w, channels=16, kernel_size=[1, 1]);
  %1 = multiply(%0, %m);
  subtract(%n, %1)
}""")
    after = alter(before)
    assert_structural_equal(after, expected("""
def @main(%x: Tensor[(1, 16, 4, 4), float32], %w: Tensor[(16, 16, 1, 1), float32],
          %m: Tensor[(1, 4, 4), float32], %n: Tensor[(4, 4), float32]) {
  %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NCHW16c");
  %1 = layout_transform(%w, src_layout="OIHW", dst_layout="OIHW16i16o");
  %2 = nn.conv2d(%0, %1, channels=16, kernel_size=[1, 1], data_layout="NCHW16c",
                 kernel_layout="OIHW16i16o", out_layout="NCHW16c");
  %3 = reshape(%m, newshape=[1, 4, 4, 1]);
  %4 = multiply(%2, %3);
  %5 = expand_dims(%n, axis=0, num_newaxis=2);
  %6 = reshape(%5, newshape=[1, 1, 4, 4, 1]);
  %7 = subtract(%6, %4);
  layout_transform(%7, src_layout="NCHW16c", dst_layout="NCHW")
}"""), map_free_vars=True)
    check_same_outputs(before, after)


def test_bias_add_on_blocked_channels_becomes_add():
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 8, 4, 4), float32], %w: Tensor[(32, 8, 1, 1), float32], %b: Tensor[(32), float32]) {
  %0 = nn.conv2d(%x, %w, channels=32, kernel_size=[1, 1]);
  nn.bias_add(%0, %b)
}""")
    after = alter(before)
    assert_structural_equal(after, expected("""
def @main(%x: Tensor[(1, 8, 4, 4), float32], %w: Tensor[(32, 8, 1, 1), float32], %b: Tensor[(32), float32]) {
  %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NCHW8c");
  %1 = layout_transform(%w, src_layout="OIHW", dst_layout="OIHW8i16o");
  %2 = nn.conv2d(%0, %1, channels=32, kernel_size=[1, 1], data_layout="NCHW8c",
                 kernel_layout="OIHW8i16o", out_layout="NCHW16c");
  %3 = expand_dims(%b, axis=0, num_newaxis=2);
  %4 = reshape(%3, newshape=[2, 1, 1, 16]);
  %5 = add(%2, %4);
  layout_transform(%5, src_layout="NCHW16c", dst_layout="NCHW")
}"""), map_free_vars=True)
    check_same_outputs(before, after)


def test_one_transform_per_value_and_residual_add_in_the_block_layout():
    # %x feeds two convolutions: transformed once; the residual add stays blocked
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 16, 4, 4), float32], %w1: Tensor[(16, 16, 3, 3), float32],
          %w2: Tensor[(16, 16, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3]);
  %1 = nn.conv2d(%x, %w2, channels=16, kernel_size=[1, 1]);
  %2 = add(%0, %1);
  nn.relu(%2)
}""")
    after = alter(before)
    assert_structural_equal(after, expected("""
def @main(%x: Tensor[(1, 16, 4, 4), float32], %w1: Tensor[(16, 16, 3, 3), float32],
          %w2: Tensor[(16, 16, 1, 1), float32]) {
  %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NCHW16c");
  %1 = layout_transform(%w1, src_layout="OIHW", dst_layout="OIHW16i16o");
  %2 = nn.conv2d(%0, %1, padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3], data_layout="NCHW16c",
                 kernel_layout="OIHW16i16o", out_layout="NCHW16c");
  %3 = layout_transform(%w2, src_layout="OIHW", dst_layout="OIHW16i16o");
  %4 = nn.conv2d(%0, %3, channels=16, kernel_size=[1, 1], data_layout="NCHW16c",
                 kernel_layout="OIHW16i16o", out_layout="NCHW16c");
  %5 = add(%2, %4);
  %6 = nn.relu(%5);
  layout_transform(%6, src_layout="NCHW16c", dst_layout="NCHW")
}"""), map_free_vars=True)
    assert op_histogram(after["main"])["layout_transform"] == 4   # x, w1, w2, the result
    check_same_outputs(before, after)


def test_operator_without_a_rule_gets_the_original_layout_back():
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 16, 4, 4), float32], %w: Tensor[(16, 16, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w, channels=16, kernel_size=[1, 1]);
  %1 = transpose(%0, axes=[0, 2, 3, 1]);
  nn.relu(%1)
}""")
    after = alter(before)
    assert_structural_equal(after, expected("""
def @main(%x: Tensor[(1, 16, 4, 4), float32], %w: Tensor[(16, 16, 1, 1), float32]) {
  %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NCHW16c");
  %1 = layout_transform(%w, src_layout="OIHW", dst_layout="OIHW16i16o");
  %2 = nn.conv2d(%0, %1, channels=16, kernel_size=[1, 1], data_layout="NCHW16c",
                 kernel_layout="OIHW16i16o", out_layout="NCHW16c");
  %3 = layout_transform(%2, src_layout="NCHW16c", dst_layout="NCHW");
  %4 = transpose(%3, axes=[0, 2, 3, 1]);
  nn.relu(%4)
}"""), map_free_vars=True)
    check_same_outputs(before, after)


def _conv_flatten_dense(batch: int, flatten: str, weight_constant: bool = True):
    """conv2d (32 channels, blocked by the pass) -> relu -> flatten -> dense; the dense
    weights a constant (or a parameter)."""
    rng = np.random.default_rng(batch)
    x = rb.var("x", shape=(batch, 8, 6, 5))
    conv = op.nn.relu(op.nn.conv2d(x, rb.const(rng.standard_normal((32, 8, 3, 3)).astype(
        "float32")), padding=(1, 1)))
    flat = op.nn.batch_flatten(conv) if flatten == "batch_flatten" else \
        op.reshape(conv, newshape=(batch, -1))
    w_value = rng.standard_normal((10, 32 * 6 * 5)).astype("float32")
    w = rb.const(w_value) if weight_constant else rb.var("w", shape=(10, 32 * 6 * 5))
    params = [x] if weight_constant else [x, w]
    return rb.passes.InferType()(rb.IRModule.from_expr(
        rb.Function(params, op.nn.dense(flat, w, units=10)))), w_value


@pytest.mark.parametrize("batch, flatten", [(1, "batch_flatten"), (2, "batch_flatten"),
                                            (2, "reshape")])
def test_dense_after_a_flatten_reads_the_blocked_layout(batch, flatten):
    """The dense layer reads the convolution's NCHW16c output flattened as it is, its constant
    weights' columns permuted at compile time: no transform back to NCHW remains."""
    before, w = _conv_flatten_dense(batch, flatten)
    after = alter(before)
    assert [c.attrs.dst_layout for c in calls(after, "layout_transform")
            if not isinstance(c.args[0], rb.Constant)] == ["NCHW8c"]    # the input's alone
    (dense,) = calls(after, "nn.dense")
    (flat,) = dense.args[0].args
    assert flat.checked_type.shape == (batch, 2, 6, 5, 16)
    # column j of the new weights is the NCHW feature the blocked element j holds
    c_block, h, w_, lane = np.unravel_index(np.arange(32 * 30), (2, 6, 5, 16))
    nchw_feature = ((c_block * 16 + lane) * 6 + h) * 5 + w_
    np.testing.assert_array_equal(dense.args[1].data, w[:, nchw_feature])
    check_same_outputs(before, after)


def test_dense_with_weights_over_the_limit_keeps_the_transform(monkeypatch):
    monkeypatch.setattr(alter_op_layout, "FOLD_FLATTEN_MAX_BYTES", 10 * 960 * 4 - 1)
    before, _ = _conv_flatten_dense(1, "batch_flatten")
    after = alter(before)
    assert [c.attrs.dst_layout for c in calls(after, "layout_transform")
            if not isinstance(c.args[0], rb.Constant)] == ["NCHW8c", "NCHW"]
    check_same_outputs(before, after)


def test_dense_with_weights_not_constant_keeps_the_transform():
    before, _ = _conv_flatten_dense(1, "batch_flatten", weight_constant=False)
    after = alter(before)
    assert [c.attrs.dst_layout for c in calls(after, "layout_transform")
            if not isinstance(c.args[0], rb.Constant)] == ["NCHW8c", "NCHW"]
    check_same_outputs(before, after)


def test_concatenate_joins_the_outer_blocks():
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 16, 4, 4), float32], %w1: Tensor[(16, 16, 1, 1), float32],
          %w2: Tensor[(32, 16, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w1, channels=16, kernel_size=[1, 1]);
  %1 = nn.conv2d(%x, %w2, channels=32, kernel_size=[1, 1]);
  concatenate((%0, %1), axis=1)
}""")
    after = alter(before)
    assert_structural_equal(after, expected("""
def @main(%x: Tensor[(1, 16, 4, 4), float32], %w1: Tensor[(16, 16, 1, 1), float32],
          %w2: Tensor[(32, 16, 1, 1), float32]) {
  %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NCHW16c");
  %1 = layout_transform(%w1, src_layout="OIHW", dst_layout="OIHW16i16o");
  %2 = nn.conv2d(%0, %1, channels=16, kernel_size=[1, 1], data_layout="NCHW16c",
                 kernel_layout="OIHW16i16o", out_layout="NCHW16c");
  %3 = layout_transform(%w2, src_layout="OIHW", dst_layout="OIHW16i16o");
  %4 = nn.conv2d(%0, %3, channels=32, kernel_size=[1, 1], data_layout="NCHW16c",
                 kernel_layout="OIHW16i16o", out_layout="NCHW16c");
  %5 = concatenate((%2, %4), axis=1);
  layout_transform(%5, src_layout="NCHW16c", dst_layout="NCHW")
}"""), map_free_vars=True)
    check_same_outputs(before, after)


def test_reductions_over_blocked_channels():
    # keepdims over H, W stays blocked; a sum over C reduces both of its parts and leaves NHW;
    # a mean over C with keepdims cannot be blocked (C would be 1 in a 16-block): original layout
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 8, 4, 4), float32], %w: Tensor[(32, 8, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w, channels=32, kernel_size=[1, 1]);
  %1 = mean(%0, axis=[2, 3], keepdims=True);
  %2 = sum(%0, axis=[1]);
  %3 = mean(%0, axis=[1], keepdims=True);
  (%1, %2, %3)
}""")
    after = alter(before)
    assert_structural_equal(after, expected("""
def @main(%x: Tensor[(1, 8, 4, 4), float32], %w: Tensor[(32, 8, 1, 1), float32]) {
  %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NCHW8c");
  %1 = layout_transform(%w, src_layout="OIHW", dst_layout="OIHW8i16o");
  %2 = nn.conv2d(%0, %1, channels=32, kernel_size=[1, 1], data_layout="NCHW8c",
                 kernel_layout="OIHW8i16o", out_layout="NCHW16c");
  %3 = mean(%2, axis=[2, 3], keepdims=True);
  %4 = sum(%2, axis=[1, 4]);
  %5 = layout_transform(%2, src_layout="NCHW16c", dst_layout="NCHW");
  %6 = mean(%5, axis=[1], keepdims=True);
  %7 = reshape(%3, newshape=[1, 32, 1, 1]);
  (%7, %4, %6)
}"""), map_free_vars=True)
    args = random_args(before)
    for a, b in zip(run(after, *args), run(before, *args)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_split_pad_pools_softmax_and_tuples_on_blocked_channels():
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 16, 4, 4), float32], %w: Tensor[(64, 16, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w, channels=64, kernel_size=[1, 1]);
  %1 = split(%0, indices_or_sections=2, axis=1);
  %2 = split(%0, indices_or_sections=[16, 48], axis=1);
  %3 = split(%0, indices_or_sections=[8], axis=1);
  %4 = nn.softmax(%0, axis=1);
  %5 = nn.pad(%0, 0f, pad_width=[[0, 0], [0, 0], [1, 1], [0, 2]]);
  %6 = nn.global_max_pool2d(%5);
  %7 = nn.adaptive_avg_pool2d(%5, output_size=[2, 3]);
  %8 = nn.dropout(%0);
  (%1.0, %1.1, %2.0, %2.1, %2.2, %3.1, %4, %6, %7, nn.leaky_relu(%0), clip(%8.0, a_min=0f, a_max=1f))
}""")
    after = alter(before)
    splits = {c.attrs["indices_or_sections"]: c for c in calls(after, "split")}
    # pieces of 32 and cuts at 16 and 48 fall on 16-channel blocks: the outer axis is split
    # (at blocks 1 and 3); a cut at 8 does not, so that split gets NCHW back
    assert set(splits) == {2, (1, 3), (8,)}
    assert splits[(8,)].args[0].op.name == "layout_transform"
    # softmax along a blocked axis cannot stay blocked; pad and the pools can
    assert calls(after, "nn.softmax")[0].args[0].op.name == "layout_transform"
    assert calls(after, "nn.pad")[0].attrs["pad_width"] == ((0, 0), (0, 0), (1, 1), (0, 2), (0, 0))
    assert {c.attrs["layout"] for c in calls(after, "nn.global_max_pool2d") +
            calls(after, "nn.adaptive_avg_pool2d")} == {"NCHW16c"}
    assert calls(after, "nn.dropout")[0].args[0].op.name == "nn.conv2d"
    args = random_args(before)
    for a, b in zip(run(after, *args), run(before, *args)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_depthwise_convolution_is_blocked_grouped_keeps_nchw():
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 32, 6, 6), float32], %w1: Tensor[(32, 1, 3, 3), float32],
          %w2: Tensor[(32, 16, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1, 1, 1], groups=32, channels=32, kernel_size=[3, 3]);
  %1 = nn.relu(%0);
  nn.conv2d(%1, %w2, padding=[1, 1, 1, 1], groups=2, channels=32, kernel_size=[3, 3])
}""")
    after = alter(before)
    assert_structural_equal(after, expected("""
def @main(%x: Tensor[(1, 32, 6, 6), float32], %w1: Tensor[(32, 1, 3, 3), float32],
          %w2: Tensor[(32, 16, 3, 3), float32]) {
  %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NCHW16c");
  %1 = layout_transform(%w1, src_layout="OIHW", dst_layout="OIHW1i16o");
  %2 = nn.conv2d(%0, %1, padding=[1, 1, 1, 1], groups=32, channels=32, kernel_size=[3, 3],
                 data_layout="NCHW16c", kernel_layout="OIHW1i16o", out_layout="NCHW16c");
  %3 = nn.relu(%2);
  %4 = layout_transform(%3, src_layout="NCHW16c", dst_layout="NCHW");
  nn.conv2d(%4, %w2, padding=[1, 1, 1, 1], groups=2, channels=32, kernel_size=[3, 3])
}"""), map_free_vars=True)
    check_same_outputs(before, after)


def test_max_block_option_and_pipeline_string():
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 16, 4, 4), float32], %w: Tensor[(32, 16, 1, 1), float32]) {
  nn.conv2d(%x, %w, channels=32, kernel_size=[1, 1])
}""")
    with rb.PassContext(opt_level=3):
        after = rb.passes.parse_pipeline("alter-op-layout{max_block=8}")(before)
    (conv,) = calls(after, "nn.conv2d")
    assert (conv.attrs["data_layout"], conv.attrs["kernel_layout"], conv.attrs["out_layout"]) == \
        ("NCHW8c", "OIHW8i8o", "NCHW8c")
    check_same_outputs(before, after)
    with pytest.raises(ValueError, match="max_block"):
        alter(before, max_block=0)


@pytest.mark.parametrize("narrow", [False, True])
def test_blocks_of_whole_registers_without_avx512(monkeypatch, narrow):
    """On a host of 8-float registers (no AVX-512) 24 channels are 3 blocks of 8, not 2 of 12
    (a register and a half); 32 stay in 2 blocks of 16. The built network still computes the
    convolutions."""
    from relaybench.backends.strategy import x86
    monkeypatch.setattr(x86, "narrow_host", lambda: narrow)
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 32, 6, 6), float32], %w: Tensor[(24, 32, 1, 1), float32],
          %v: Tensor[(32, 24, 3, 3), float32]) {
  %0 = nn.relu(nn.conv2d(%x, %w, channels=24, kernel_size=[1, 1]));
  nn.conv2d(%0, %v, padding=[1, 1, 1, 1], channels=32, kernel_size=[3, 3])
}""")
    after = alter(before)
    first, second = calls(after, "nn.conv2d")
    block = 8 if narrow else 12
    assert (first.attrs["data_layout"], first.attrs["out_layout"]) == ("NCHW16c", f"NCHW{block}c")
    assert (second.attrs["data_layout"], second.attrs["kernel_layout"]) == \
        (f"NCHW{block}c", f"OIHW{block}i16o")
    check_same_outputs(before, after)
    rng = np.random.default_rng(4)
    args = [rng.standard_normal([int(d) for d in p.type_annotation.shape]).astype("float32")
            for p in before["main"].params]
    lib = rb.build(before, target="llvm", opt_level=3)
    got = lib.run(**{p.name_hint: a for p, a in zip(before["main"].params, args)})
    np.testing.assert_allclose(got, run(before, *args), rtol=1e-4, atol=1e-4)


def test_let_and_if_get_values_in_the_original_layout():
    # the rewriter follows dataflow only; at a let or an if the value is transformed back
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 16, 4, 4), float32], %w: Tensor[(16, 16, 1, 1), float32], %c: bool) {
  let %y = nn.conv2d(%x, %w, channels=16, kernel_size=[1, 1]);
  let %z = nn.relu(%y);
  if (%c) { %z } else { nn.relu(add(%z, 1f)) }
}""")
    after = alter(before)
    (conv,) = calls(after, "nn.conv2d")
    assert conv.attrs["data_layout"] == "NCHW16c"
    args = random_args(before)
    for cond in (True, False):
        args[-1] = np.array(cond)
        np.testing.assert_allclose(run(after, *args), run(before, *args), rtol=1e-5, atol=1e-6)


def test_unchanged_module_is_the_same_object():
    mod = rb.parse(H + """
def @main(%x: Tensor[(2, 8), float32], %w: Tensor[(4, 8), float32]) {
  %0 = nn.dense(%x, %w);
  nn.softmax(nn.relu(%0))
}""")
    assert alter(mod) is mod
    nhwc = rb.parse(H + """
def @main(%x: Tensor[(1, 4, 4, 16), float32], %w: Tensor[(1, 1, 16, 16), float32]) {
  nn.conv2d(%x, %w, channels=16, kernel_size=[1, 1], data_layout="NHWC", kernel_layout="HWIO")
}""")
    assert alter(nhwc) is nhwc      # the x86 choice only rewrites NCHW convolutions


def test_primitive_functions_are_left_alone():
    mod = rb.parse(H + """
def @main(%x: Tensor[(1, 16, 4, 4), float32], %w: Tensor[(16, 16, 1, 1), float32]) {
  %0 = fn (%p0: Tensor[(1, 16, 4, 4), float32], %p1: Tensor[(16, 16, 1, 1), float32], Primitive=1) {
    nn.conv2d(%p0, %p1, channels=16, kernel_size=[1, 1])
  };
  %0(%x, %w)
}""")
    assert alter(mod) is mod


# ---------------------------------------------------------------------------------------------
# The zoo

SMALL = dict(image_shape=(3, 32, 32), num_classes=10)


def prepared(name):
    """The model with batch norm decomposed and the weights bound and folded: what the default
    pipeline hands AlterOpLayout."""
    mod, params = rb.models.get(name, **SMALL)
    with rb.PassContext(opt_level=3):
        inference = rb.passes.SimplifyInference()(mod)
        bound = rb.passes.FoldConstant()(rb.passes.bind_params(inference, params))
    return mod, params, bound


def test_resnet18_every_conv_blocked_and_transforms_only_at_the_ends():
    mod, params, bound = prepared("resnet18")
    with rb.PassContext(opt_level=3), rb.config.Context(RB_WINOGRAD="off"):
        after = rb.passes.FoldConstant()(rb.passes.AlterOpLayout()(bound))
    convs = calls(after, "nn.conv2d")
    assert len(convs) == 20
    assert all(re.fullmatch(r"NCHW\d+c", c.attrs["data_layout"]) for c in convs)
    assert all(re.fullmatch(r"OIHW\d+i\d+o", c.attrs["kernel_layout"]) for c in convs)
    # the stem sees the RGB image as NCHW3c; every other convolution works on 16-channel blocks
    assert sorted(c.attrs["data_layout"] for c in convs) == ["NCHW16c"] * 19 + ["NCHW3c"]
    # One transform remains once the weights' transforms are folded: the image into NCHW3c for
    # the stem. The global pool's NCHW16c output is flattened as it is for the dense layer
    # (whose weights' columns follow the blocked order: here, 1x1 pixels, the same order).
    # The batch-norm scales and shifts, the residual additions, the max pool and the global
    # pool all run in NCHW16c.
    (first,) = calls(after, "layout_transform")
    assert (first.attrs["src_layout"], first.attrs["dst_layout"]) == ("NCHW", "NCHW3c")
    assert first.args[0] is after["main"].params[0]
    (flat,) = calls(after, "nn.batch_flatten")
    assert flat.args[0].op.name == "nn.global_avg_pool2d"
    assert flat.args[0].attrs["layout"] == "NCHW16c"
    assert calls(after, "nn.dense")[0].args[0] is flat
    (pool,) = calls(after, "nn.max_pool2d")
    assert pool.attrs["layout"] == "NCHW16c"
    data = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    np.testing.assert_allclose(run(after, data), run(mod, data, *params.values()), rtol=1e-4, atol=1e-7)


def test_resnet18_winograd_layers_keep_the_blocked_layout():
    # with the default rule the 3x3 stride-1 convolutions of 64 channels or more and outputs of
    # 7x7 or more (at this 32x32 input: layer1's four, 8x8) are Winograd ones on the same
    # NCHW16c data, their weights' transforms folded: still one transform (the image's)
    mod, params, bound = prepared("resnet18")
    with rb.PassContext(opt_level=3), rb.config.Context(RB_WINOGRAD="auto"):
        after = rb.passes.FoldConstant()(rb.passes.AlterOpLayout()(bound))
    winograd = calls(after, "nn.contrib_conv2d_winograd_without_weight_transform")
    assert len(winograd) == 4 and len(calls(after, "nn.conv2d")) == 16
    assert all(c.attrs["data_layout"] == "NCHW16c" == c.attrs["out_layout"] for c in winograd)
    assert len(calls(after, "layout_transform")) == 1
    assert not calls(after, "nn.contrib_conv2d_winograd_weight_transform")
    data = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    np.testing.assert_allclose(run(after, data), run(mod, data, *params.values()), rtol=1e-4,
                               atol=1e-6)


@pytest.mark.parametrize("name", ["mobilenet_v2", "vgg16"])
def test_zoo_blocked_keeps_semantics(name):
    mod, params, bound = prepared(name)
    with rb.PassContext(opt_level=3):
        after = rb.passes.FoldConstant()(rb.passes.AlterOpLayout()(bound))
    assert all(re.fullmatch(r"NCHW\d+c", c.attrs["data_layout"]) for c in calls(after, "nn.conv2d"))
    # the image's transform; the classifier's dense reads the last blocked output flattened
    assert len(calls(after, "layout_transform")) == 1
    data = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype("float32")
    np.testing.assert_allclose(run(after, data), run(mod, data, *params.values()), rtol=1e-4, atol=1e-7)


# Deep enough that any recursion on program depth fails (Python stops at 1,000 frames);
# tests/test_scale.py takes 100,000 operators through the whole pipeline.
DEEP = 20_000


def test_deep_chain_of_ops():
    x, w = rb.var("x", shape=(1, 8, 2, 2)), rb.var("w", shape=(8, 8, 1, 1))
    y = op.nn.conv2d(x, w, channels=8, kernel_size=1)
    one, half = rb.const(1.0), rb.const(0.5)
    for i in range(DEEP):
        y = op.add(y, one) if i % 2 == 0 else op.multiply(y, half)
    after = alter(rb.IRModule.from_expr(rb.Function([x, w], y)))
    body = after["main"].body
    assert body.op.name == "layout_transform" and body.attrs["src_layout"] == "NCHW8c"
    assert body.args[0].op.name == "multiply"
    hist = op_histogram(after["main"])
    assert hist["add"] == hist["multiply"] == DEEP // 2 and hist["layout_transform"] == 3


def test_stop_fusion_keeps_the_blocked_layout_between_convolutions():
    """annotation.stop_fusion is layout-agnostic: two blocked convolutions around it need no
    layout_transform in the middle (quantized residual blocks put one on every shortcut)."""
    import numpy as np
    import relaybench as rb
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 32, 8, 8), float32], %w1: Tensor[(32, 32, 3, 3), float32], %w2: Tensor[(32, 32, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1, 1, 1], channels=32, kernel_size=[3, 3]);
  %1 = annotation.stop_fusion(%0);
  nn.conv2d(%1, %w2, padding=[1, 1, 1, 1], channels=32, kernel_size=[3, 3])
}''')
    with rb.PassContext(opt_level=3, config={"relay.target": "llvm"}):
        out = rb.passes.AlterOpLayout()(rb.passes.InferType()(mod))
    text = str(out)
    # the data into blocks once, each weight into blocks, the result out of them once
    assert text.count('dst_layout="NCHW16c"') == 1 and text.count('dst_layout="NCHW")') == 1
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(p.checked_type.shape if p.checked_type else (1,)).astype("float32")
            for p in rb.passes.InferType()(mod)["main"].params]
    want = rb.create_executor("interpreter", mod=mod).evaluate()(*args)
    got = rb.create_executor("interpreter", mod=out).evaluate()(*args)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("src, dst, shape, moves", [
    ("NCHW", "NCHW1c", (1, 4, 84, 84), False), ("NCHW", "NCHW4c", (1, 4, 6, 6), True),
    ("NCHW", "NHWC", (2, 1, 3, 3), False), ("NCHW", "NHWC", (2, 3, 1, 1), False),
    ("NCHW", "NHWC", (1, 3, 2, 2), True), ("NCHW16c", "NCHW", (1, 1, 3, 3, 16), True),
    ("NCHW16c", "NCHW", (1, 2, 1, 1, 16), False), ("OIHW", "OIHW1i16o", (16, 1, 3, 3), True),
])
def test_moves_nothing_against_the_transformed_index(src, dst, shape, moves):
    """A transform moves nothing exactly when the transformed index array is 0, 1, 2, ... (the
    reference semantics of layout_transform decide, not the layout strings)."""
    from relaybench.ir.layout import Layout
    index = np.arange(int(np.prod(shape))).reshape(shape)
    moved = np.ascontiguousarray(Layout(src).transform_array(index, dst)).ravel()
    assert (not np.array_equal(moved, index.ravel())) == moves
    assert alter_op_layout.moves_nothing(src, dst, shape) == (not moves)


def test_moves_nothing_refuses_large_or_symbolic_tensors(monkeypatch):
    monkeypatch.setattr(alter_op_layout, "MOVES_NOTHING_MAX_ELEMENTS", 100)
    assert not alter_op_layout.moves_nothing("NCHW", "NCHW1c", (1, 4, 8, 8))
    assert alter_op_layout.moves_nothing("NCHW", "NCHW1c", (1, 4, 5, 5))
    from relaybench.ir.symbolic import ANY
    assert not alter_op_layout.moves_nothing("NCHW", "NCHW1c", (1, 4, ANY, 5))


def _first_layer(channels, window, stride):
    rng = np.random.default_rng(3)
    x = rb.var("x", shape=(1, channels, 20, 20))
    w = rng.standard_normal((32, channels, window, window)).astype("float32")
    y = op.nn.relu(op.nn.conv2d(x, rb.const(w), strides=(stride, stride)))
    return rb.passes.InferType()(rb.IRModule.from_expr(rb.Function([x], op.nn.max_pool2d(
        y, pool_size=(2, 2)))))


def test_a_first_layer_with_a_large_window_reads_its_input_as_it_is():
    """Four input channels under an 8x8 window: the data in NCHW1c (NCHW itself), so the
    input's transform is a reshape; the semantics are the interpreter's."""
    before = _first_layer(4, 8, 4)
    after = alter(before)
    (conv,) = calls(after, "nn.conv2d")
    assert conv.attrs.data_layout == "NCHW1c" and conv.attrs.kernel_layout == "OIHW1i16o"
    assert [c.args[0].name_hint for c in calls(after, "reshape")] == ["x"]
    assert not [c for c in calls(after, "layout_transform") if not isinstance(c.args[0], rb.Constant)
                and c.attrs.dst_layout != "NCHW"]
    check_same_outputs(before, after)


@pytest.mark.parametrize("channels, window", [(3, 3), (3, 7), (8, 8)])
def test_other_first_layers_keep_the_blocked_input(channels, window):
    after = alter(_first_layer(channels, window, 1))
    (conv,) = calls(after, "nn.conv2d")
    assert conv.attrs.data_layout == f"NCHW{channels}c"
    assert not calls(after, "reshape")


def test_the_dqn_runs_its_input_in_place_as_the_interpreter_does():
    """The DQN built: its input's transform is a view, the first layer reads the caller's
    array, and the result is the interpreter's."""
    mod, params = rb.models.get("dqn")
    graph = rb.build(mod, target="llvm", params=params, opt_level=3)
    plan = graph.memory_plan()
    input_entry = graph.graph.inputs[0][1]
    assert input_entry in plan.views.values() and "data" in graph._input_slots
    data = np.random.default_rng(0).random((1, 4, 84, 84), dtype=np.float32)
    want = rb.create_executor("interpreter", mod=mod).evaluate()(data, **params)
    np.testing.assert_allclose(graph.run(data=data), want, rtol=1e-4, atol=1e-5)
