"""ConvertLayout: the desired_layouts option, before/expected programs for the layout rules of the
elementwise, broadcast, bias_add, concatenate, split, pooling, pad, softmax, reduce and batch_norm
operators (in NHWC, easy to read), the interpreter before and after, and ResNet-18 in NHWC."""

import doctest

import numpy as np
import pytest

import relaybench as rb
from relaybench.ir import assert_structural_equal, op_histogram, post_order
from relaybench.passes import convert_layout
from relaybench.passes.convert_layout import parse_desired_layouts

H = '#[version = "0.0.5"]\n'


def convert(mod, desired_layouts=None):
    with rb.PassContext(opt_level=3):
        if desired_layouts is None:
            return rb.passes.ConvertLayout()(mod)
        return rb.passes.ConvertLayout(desired_layouts=desired_layouts)(mod)


def expected(text):
    return rb.passes.InferType()(rb.parse(H + text))


def run(mod, *args):
    return rb.create_executor("interpreter", mod=mod).evaluate()(*args)


def random_args(mod, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal([int(d) for d in p.type_annotation.shape]).astype("float32")
            for p in mod["main"].params]


def flat(value):
    return list(value) if isinstance(value, tuple) else [value]


def check_same_outputs(before, after, seed=0):
    args = random_args(before, seed)
    for a, b in zip(flat(run(after, *args)), flat(run(before, *args))):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def calls(mod, name):
    return [n for n in post_order(mod["main"].body)
            if isinstance(n, rb.Call) and isinstance(n.op, rb.Op) and n.op.name == name]


def test_docstring_examples():
    assert doctest.testmod(convert_layout).failed == 0


def test_pass_info():
    p = rb.passes.ConvertLayout()
    assert (p.info.name, p.info.opt_level, p.info.kebab) == ("ConvertLayout", 3, "convert-layout")
    assert rb.passes.pass_options("ConvertLayout") == {"desired_layouts": "nn.conv2d:NHWC:default"}


# ---------------------------------------------------------------------------------------------
# The option

def test_desired_layouts_forms():
    assert parse_desired_layouts("nn.conv2d:NHWC:default") == {"nn.conv2d": ("NHWC", "HWIO")}
    assert parse_desired_layouts("nn.conv2d:NCHW") == {"nn.conv2d": ("NCHW", "OIHW")}
    assert parse_desired_layouts(" nn.conv2d : NHWC : OHWI ; nn.conv2d_transpose:NHWC ") == \
        {"nn.conv2d": ("NHWC", "OHWI"), "nn.conv2d_transpose": ("NHWC", "HWIO")}
    assert parse_desired_layouts({"nn.conv2d": ["NCHW8c", "default"]}) == {"nn.conv2d": ("NCHW8c", "OIHW8i8o")}
    assert parse_desired_layouts({"nn.conv2d": "NHWC"}) == {"nn.conv2d": ("NHWC", "HWIO")}
    assert parse_desired_layouts("{nn.conv2d: [NHWC, default]; 'nn.conv2d_transpose': NCHW}") == \
        {"nn.conv2d": ("NHWC", "HWIO"), "nn.conv2d_transpose": ("NCHW", "IOHW")}


def test_desired_layouts_given_positionally_as_in_relay():
    """Relay's ``ConvertLayout(desired_layouts)`` takes the dict positionally; the keyword form
    stays. Both convert the convolution, and the interpreter agrees with the program before."""
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 3, 6, 6), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
  nn.relu(nn.conv2d(%x, %w, padding=[1, 1, 1, 1]))
}""")
    layouts = {"nn.conv2d": ["NHWC", "default"]}
    positional = convert_positionally(before, layouts)
    keyword = convert(before, layouts)
    assert_structural_equal(positional, keyword)
    conv = [n for n in post_order(positional["main"].body)
            if isinstance(n, rb.Call) and getattr(n.op, "name", "") == "nn.conv2d"]
    assert [(c.attrs["data_layout"], c.attrs["kernel_layout"]) for c in conv] == [("NHWC", "HWIO")]
    assert rb.passes.ConvertLayout(layouts).info.options == (("desired_layouts", layouts),)
    args = random_args(before)
    np.testing.assert_allclose(np.asarray(run(positional, *args)), np.asarray(run(before, *args)),
                               rtol=1e-5, atol=1e-5)


def convert_positionally(mod, desired_layouts):
    with rb.PassContext(opt_level=3):
        return rb.passes.ConvertLayout(desired_layouts)(mod)


def test_positional_options_are_checked():
    with pytest.raises(TypeError, match="ConvertLayout takes 1 positional option"):
        rb.passes.ConvertLayout({"nn.conv2d": ["NHWC"]}, "extra")
    with pytest.raises(TypeError, match="given both by position and by keyword"):
        rb.passes.ConvertLayout("nn.conv2d:NHWC", desired_layouts="nn.conv2d:NCHW")
    with pytest.raises(TypeError, match="InferType takes its options by keyword only"):
        rb.passes.InferType(1)
    assert rb.passes.FuseOps(0).options["fuse_opt_level"] == 0
    assert rb.passes.DeadCodeElimination(True).options["inline_once"] is True


@pytest.mark.parametrize("value, message", [
    ("nn.dense:NC", "cannot convert the layout of 'nn.dense'"),
    ("nn.conv2d", "op:data_layout"),
    ("nn.conv2d:NHWC:HWIO:extra", "op:data_layout"),
    ("nn.conv2d:NCDHW", "axes N, C, H, W"),
    ("nn.conv2d:NHWC:HWII", "appears twice"),
    ("nn.conv2d:NHWC:HWOK", "axes O, I, H, W"),
    ("nn.conv2d:HWNC", "no default kernel layout"),
    ("{nn.conv2d: [NHWC]", "missing"),
    ("{nn.conv2d [NHWC]}", "cannot read"),
])
def test_bad_desired_layouts_are_reported(value, message):
    with pytest.raises(ValueError, match=message):
        parse_desired_layouts(value)


def test_pipeline_string():
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 3, 5, 5), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
  nn.conv2d(%x, %w, channels=4, kernel_size=[3, 3])
}""")
    with rb.PassContext(opt_level=3):
        after = rb.passes.parse_pipeline('convert-layout{desired_layouts="nn.conv2d:NHWC:OHWI"}')(before)
        same = rb.passes.parse_pipeline("convert-layout{desired_layouts={nn.conv2d: [NHWC, OHWI]}}")(before)
    assert_structural_equal(after, same)
    assert_structural_equal(after, expected("""
def @main(%x: Tensor[(1, 3, 5, 5), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
  %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NHWC");
  %1 = layout_transform(%w, src_layout="OIHW", dst_layout="OHWI");
  %2 = nn.conv2d(%0, %1, channels=4, kernel_size=[3, 3], data_layout="NHWC", kernel_layout="OHWI");
  layout_transform(%2, src_layout="NHWC", dst_layout="NCHW")
}"""), map_free_vars=True)
    check_same_outputs(before, after)


# ---------------------------------------------------------------------------------------------
# The layout rules, before / expected

def test_layout_rules_follow_nhwc():
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 8, 6, 6), float32], %w1: Tensor[(8, 8, 3, 3), float32],
          %w2: Tensor[(8, 8, 1, 1), float32], %b: Tensor[(8), float32], %s: Tensor[(16, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1, 1, 1], channels=8, kernel_size=[3, 3]);
  %1 = nn.bias_add(%0, %b);
  %2 = nn.conv2d(%x, %w2, channels=8, kernel_size=[1, 1]);
  %3 = concatenate((%1, %2), axis=1);
  %4 = multiply(%3, %s);
  %5 = nn.relu(%4);
  %6 = nn.pad(%5, 0f, pad_width=[[0, 0], [0, 0], [1, 1], [2, 2]]);
  %7 = nn.max_pool2d(%6, pool_size=[2, 2], strides=[2, 2]);
  %8 = nn.softmax(%7, axis=1);
  %9 = mean(%8, axis=[2, 3], keepdims=True);
  %10 = sum(%7, axis=[1]);
  %11 = split(%7, indices_or_sections=2, axis=1);
  %12 = nn.global_avg_pool2d(%7);
  (%9, %10, %11.0, %11.1, %12)
}""")
    after = convert(before)
    assert_structural_equal(after, expected("""
def @main(%x: Tensor[(1, 8, 6, 6), float32], %w1: Tensor[(8, 8, 3, 3), float32],
          %w2: Tensor[(8, 8, 1, 1), float32], %b: Tensor[(8), float32], %s: Tensor[(16, 1, 1), float32]) {
  %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NHWC");
  %1 = layout_transform(%w1, src_layout="OIHW", dst_layout="HWIO");
  %2 = nn.conv2d(%0, %1, padding=[1, 1, 1, 1], channels=8, kernel_size=[3, 3], data_layout="NHWC",
                 kernel_layout="HWIO");
  %3 = nn.bias_add(%2, %b, axis=3);
  %4 = layout_transform(%w2, src_layout="OIHW", dst_layout="HWIO");
  %5 = nn.conv2d(%0, %4, channels=8, kernel_size=[1, 1], data_layout="NHWC", kernel_layout="HWIO");
  %6 = concatenate((%3, %5), axis=3);
  %7 = layout_transform(%s, src_layout="CHW", dst_layout="HWC");
  %8 = multiply(%6, %7);
  %9 = nn.relu(%8);
  %10 = nn.pad(%9, 0f, pad_width=[[0, 0], [1, 1], [2, 2], [0, 0]]);
  %11 = nn.max_pool2d(%10, pool_size=[2, 2], strides=[2, 2], layout="NHWC");
  %12 = nn.softmax(%11, axis=3);
  %13 = mean(%12, axis=[1, 2], keepdims=True);
  %14 = layout_transform(%13, src_layout="NHWC", dst_layout="NCHW");
  %15 = sum(%11, axis=[3]);
  %16 = split(%11, indices_or_sections=2, axis=3);
  %17 = layout_transform(%16.0, src_layout="NHWC", dst_layout="NCHW");
  %18 = layout_transform(%16.1, src_layout="NHWC", dst_layout="NCHW");
  %19 = nn.global_avg_pool2d(%11, layout="NHWC");
  %20 = layout_transform(%19, src_layout="NHWC", dst_layout="NCHW");
  (%14, %15, %17, %18, %20)
}"""), map_free_vars=True)
    check_same_outputs(before, after)


def test_batch_norm_and_tuple_values():
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 4, 3, 3), float32], %w: Tensor[(4, 4, 1, 1), float32], %g: Tensor[(4), float32],
          %b: Tensor[(4), float32], %m: Tensor[(4), float32], %v: Tensor[(4), float32]) {
  %0 = nn.conv2d(%x, %w, channels=4, kernel_size=[1, 1]);
  %1 = nn.batch_norm(%0, %g, %b, %m, %v);
  %2 = nn.relu(%1.0);
  (%2, %1.1)
}""")
    after = convert(before)
    assert_structural_equal(after, expected("""
def @main(%x: Tensor[(1, 4, 3, 3), float32], %w: Tensor[(4, 4, 1, 1), float32], %g: Tensor[(4), float32],
          %b: Tensor[(4), float32], %m: Tensor[(4), float32], %v: Tensor[(4), float32]) {
  %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NHWC");
  %1 = layout_transform(%w, src_layout="OIHW", dst_layout="HWIO");
  %2 = nn.conv2d(%0, %1, channels=4, kernel_size=[1, 1], data_layout="NHWC", kernel_layout="HWIO");
  %3 = nn.batch_norm(%2, %g, %b, %m, %v, axis=3);
  %4 = nn.relu(%3.0);
  %5 = layout_transform(%4, src_layout="NHWC", dst_layout="NCHW");
  (%5, %3.1)
}"""), map_free_vars=True)
    args = random_args(before)
    args[-1] = np.abs(args[-1]) + 0.5            # a variance
    for a, b in zip(run(after, *args), run(before, *args)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_broadcast_operands_and_scalars():
    # a full-rank tensor with no layout follows the conv output; a scalar stays as it is
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 2, 3, 3), float32], %w: Tensor[(2, 2, 1, 1), float32], %r: Tensor[(1, 2, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w, channels=2, kernel_size=[1, 1]);
  %1 = add(%r, %0);
  maximum(%1, 0f)
}""")
    after = convert(before)
    assert_structural_equal(after, expected("""
def @main(%x: Tensor[(1, 2, 3, 3), float32], %w: Tensor[(2, 2, 1, 1), float32], %r: Tensor[(1, 2, 3, 3), float32]) {
  %0 = layout_transform(%r, src_layout="NCHW", dst_layout="NHWC");
  %1 = layout_transform(%x, src_layout="NCHW", dst_layout="NHWC");
  %2 = layout_transform(%w, src_layout="OIHW", dst_layout="HWIO");
  %3 = nn.conv2d(%1, %2, channels=2, kernel_size=[1, 1], data_layout="NHWC", kernel_layout="HWIO");
  %4 = add(%0, %3);
  %5 = maximum(%4, 0f);
  layout_transform(%5, src_layout="NHWC", dst_layout="NCHW")
}"""), map_free_vars=True)
    check_same_outputs(before, after)


def test_an_operator_reading_another_layout_than_produced_is_left_as_it_is():
    # the NHWC convolution's output is read by an NCHW pooling: positionally, with no layout that
    # both agree on, so the pooling gets its input exactly as before
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 4, 4, 4), float32], %w: Tensor[(1, 1, 4, 4), float32]) {
  %0 = nn.conv2d(%x, %w, channels=4, kernel_size=[1, 1], data_layout="NHWC", kernel_layout="HWIO");
  nn.max_pool2d(%0, pool_size=[2, 2])
}""")
    after = convert(before, "nn.conv2d:NCHW")
    assert_structural_equal(after, expected("""
def @main(%x: Tensor[(1, 4, 4, 4), float32], %w: Tensor[(1, 1, 4, 4), float32]) {
  %0 = layout_transform(%x, src_layout="NHWC", dst_layout="NCHW");
  %1 = layout_transform(%w, src_layout="HWIO", dst_layout="OIHW");
  %2 = nn.conv2d(%0, %1, channels=4, kernel_size=[1, 1]);
  %3 = layout_transform(%2, src_layout="NCHW", dst_layout="NHWC");
  nn.max_pool2d(%3, pool_size=[2, 2])
}"""), map_free_vars=True)
    check_same_outputs(before, after)


def test_conv2d_transpose_to_nhwc():
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 4, 3, 3), float32], %w: Tensor[(4, 2, 3, 3), float32]) {
  nn.conv2d_transpose(%x, %w, strides=[2, 2], padding=[1, 1, 1, 1], channels=2, kernel_size=[3, 3])
}""")
    after = convert(before, "nn.conv2d_transpose:NHWC")
    (conv,) = calls(after, "nn.conv2d_transpose")
    assert (conv.attrs["data_layout"], conv.attrs["kernel_layout"]) == ("NHWC", "HWIO")
    check_same_outputs(before, after)


def test_blocked_layout_asked_for():
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 16, 4, 4), float32], %w1: Tensor[(16, 16, 1, 1), float32],
          %w2: Tensor[(12, 16, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w1, channels=16, kernel_size=[1, 1]);
  %1 = nn.relu(%0);
  nn.conv2d(%1, %w2, channels=12, kernel_size=[1, 1])
}""")
    after = convert(before, {"nn.conv2d": ["NCHW8c", "default"]})
    first, second = sorted(calls(after, "nn.conv2d"), key=lambda c: c.attrs["channels"])
    # 12 output channels do not split into blocks of 8: that convolution stays NCHW
    assert (first.attrs["data_layout"], first.attrs["channels"]) == ("NCHW", 12)
    assert (second.attrs["data_layout"], second.attrs["kernel_layout"]) == ("NCHW8c", "OIHW8i8o")
    check_same_outputs(before, after)


def test_unchanged_module_is_the_same_object():
    mod = rb.parse(H + """
def @main(%x: Tensor[(1, 3, 5, 5), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
  nn.relu(nn.conv2d(%x, %w, channels=4, kernel_size=[3, 3]))
}""")
    assert convert(mod, "nn.conv2d:NCHW") is mod
    assert convert(mod, "nn.conv2d_transpose:NHWC") is mod


# ---------------------------------------------------------------------------------------------
# ResNet-18

SMALL = dict(image_shape=(3, 32, 32), num_classes=10)


def test_resnet18_in_nhwc():
    mod, params = rb.models.get("resnet18", **SMALL)
    after = convert(mod)
    convs = calls(after, "nn.conv2d")
    assert len(convs) == 20
    assert {(c.attrs["data_layout"], c.attrs["kernel_layout"]) for c in convs} == {("NHWC", "HWIO")}
    # batch norms moved their axis, the pools their layout
    assert {b.attrs["axis"] for b in calls(after, "nn.batch_norm")} == {3}
    assert {p.attrs["layout"] for p in calls(after, "nn.max_pool2d") + calls(after, "nn.global_avg_pool2d")} == {"NHWC"}
    # weights are parameters here: one transform each, plus the image in and the pool's output out
    assert op_histogram(after["main"])["layout_transform"] == 20 + 2
    data = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    expected_out = run(mod, data, *params.values())
    np.testing.assert_allclose(run(after, data, *params.values()), expected_out, rtol=1e-4, atol=1e-7)

    # with the weights bound, FoldConstant leaves the two transforms at the ends
    with rb.PassContext(opt_level=3):
        bound = rb.passes.FoldConstant()(convert(rb.passes.bind_params(mod, params)))
    assert op_histogram(bound["main"])["layout_transform"] == 2
    np.testing.assert_allclose(run(bound, data), expected_out, rtol=1e-4, atol=1e-7)

    # and back to NCHW: the same layouts as the original, the same outputs
    back = convert(after, "nn.conv2d:NCHW")
    assert {(c.attrs["data_layout"], c.attrs["kernel_layout"]) for c in calls(back, "nn.conv2d")} == \
        {("NCHW", "OIHW")}
    np.testing.assert_allclose(run(back, data, *params.values()), expected_out, rtol=1e-4, atol=1e-7)
