"""AlterOpLayout and ConvertLayout driven by the registry: a user's FTVMAlterOpLayout at a higher
level replaces the x86 policy in its scope (in Relay's form: a new call, a dict, or None), the
target picks the policy, FTVMConvertOpLayout converts what ``desired_layouts`` names; every
rewrite checked against the interpreter of the original program."""

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.ir import op_histogram, post_order
from relaybench.op import attr_scope, register_alter_op_layout, register_convert_op_layout

H = '#[version = "0.0.5"]\n'

CONV_RELU = rb.parse(H + """
def @main(%x: Tensor[(1, 8, 6, 6), float32], %w: Tensor[(16, 8, 3, 3), float32], %b: Tensor[(16), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3]);
  %1 = nn.bias_add(%0, %b);
  %2 = nn.relu(%1);
  nn.max_pool2d(%2, pool_size=[2, 2], strides=[2, 2])
}""")


def alter(mod, **options):
    with rb.PassContext(opt_level=3):
        return rb.passes.AlterOpLayout(**options)(mod)


def calls(mod, name):
    return [n for n in post_order(mod["main"].body)
            if isinstance(n, rb.Call) and isinstance(n.op, rb.Op) and n.op.name == name]


def check_same_outputs(before, after, seed=0):
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal([int(d) for d in p.type_annotation.shape]).astype("float32")
            for p in before["main"].params]
    run = lambda m: rb.create_executor("interpreter", mod=m).evaluate()(*args)  # noqa: E731
    expected = run(before)
    np.testing.assert_allclose(run(after), expected, rtol=1e-5, atol=1e-5)
    return expected


def conv_layouts(mod):
    return [(c.attrs["data_layout"], c.attrs["kernel_layout"], c.attrs["out_layout"]) for c in calls(mod, "nn.conv2d")]


def test_x86_policy_by_default():
    out = alter(CONV_RELU)
    assert conv_layouts(out) == [("NCHW8c", "OIHW8i16o", "NCHW16c")]
    check_same_outputs(CONV_RELU, out)


def test_a_users_new_call_replaces_the_x86_policy_in_its_scope():
    def nhwc(attrs, inputs, tinfos, out_type):
        assert [str(t) for t in tinfos] == ["Tensor[(1, 8, 6, 6), float32]", "Tensor[(16, 8, 3, 3), float32]"]
        assert str(out_type) == "Tensor[(1, 16, 6, 6), float32]"
        return op.nn.conv2d(*inputs, **dict(attrs, data_layout="NHWC", kernel_layout="HWIO"))

    with attr_scope():
        register_alter_op_layout("nn.conv2d", nhwc, level=11)
        out = alter(CONV_RELU)
    assert conv_layouts(out) == [("NHWC", "HWIO", "")]
    # the new layout carried through bias_add (axis 3), relu and the pooling (layout NHWC)
    assert calls(out, "nn.bias_add")[0].attrs["axis"] == 3
    assert calls(out, "nn.max_pool2d")[0].attrs["layout"] == "NHWC"
    assert op_histogram(out)["layout_transform"] == 3
    check_same_outputs(CONV_RELU, out)
    # leaving the scope gives the x86 policy back
    assert conv_layouts(alter(CONV_RELU)) == [("NCHW8c", "OIHW8i16o", "NCHW16c")]


def test_a_dict_of_attributes_and_none():
    def blocked4(attrs, inputs, tinfos, out_type):
        return {"data_layout": "NCHW4c", "kernel_layout": "OIHW4i4o", "out_layout": "NCHW4c"}

    with attr_scope():
        register_alter_op_layout("nn.conv2d", blocked4, level=11)
        out = alter(CONV_RELU)
        assert conv_layouts(out) == [("NCHW4c", "OIHW4i4o", "NCHW4c")]
        check_same_outputs(CONV_RELU, out)
        register_alter_op_layout("nn.conv2d", lambda *args: None, level=12)
        assert alter(CONV_RELU) is CONV_RELU          # None keeps every call


def test_a_new_call_with_an_argument_the_function_built():
    """The kernel arrives already transformed by the function; only the data is transformed by
    the rewriter, from the layout rule of the new call."""
    def pre_transformed_kernel(attrs, inputs, tinfos, out_type):
        data, weight = inputs
        kernel = op.layout_transform(weight, src_layout="OIHW", dst_layout="HWIO")
        return op.nn.conv2d(data, kernel, **dict(attrs, data_layout="NHWC", kernel_layout="HWIO"))

    with attr_scope():
        register_alter_op_layout("nn.conv2d", pre_transformed_kernel, level=11)
        out = alter(CONV_RELU)
    conv = calls(out, "nn.conv2d")[0]
    assert conv.args[1].op.name == "layout_transform" and conv.args[1].args[0] is CONV_RELU["main"].params[1]
    assert conv.args[0].attrs["dst_layout"] == "NHWC"
    check_same_outputs(CONV_RELU, out)


def test_a_new_call_of_another_operator():
    """An operator without a layout rule gets its inputs in their original layouts."""
    def as_contrib(attrs, inputs, tinfos, out_type):
        return op.multiply(op.nn.conv2d(*inputs, **attrs), rb.const(1.0))

    with attr_scope():
        register_alter_op_layout("nn.conv2d", as_contrib, level=11)
        out = alter(CONV_RELU)
    assert "layout_transform" not in op_histogram(out)
    check_same_outputs(CONV_RELU, out)


def test_max_block_reaches_the_x86_policy():
    out = alter(CONV_RELU, max_block=4)
    assert conv_layouts(out) == [("NCHW4c", "OIHW4i4o", "NCHW4c")]
    check_same_outputs(CONV_RELU, out)


def test_the_target_picks_the_policy():
    def toy(attrs, inputs, tinfos, out_type):
        return {"data_layout": "NHWC", "kernel_layout": "HWIO"}

    with attr_scope():
        register_alter_op_layout("nn.conv2d", toy, level=0 + 10, target="toy")
        with rb.PassContext(opt_level=3, config={"relay.target": "toy"}):
            out = rb.passes.AlterOpLayout()(CONV_RELU)
        assert conv_layouts(out) == [("NHWC", "HWIO", "")]
        check_same_outputs(CONV_RELU, out)
        # llvm still gets the x86 policy: the toy registration is not for it
        assert conv_layouts(alter(CONV_RELU)) == [("NCHW8c", "OIHW8i16o", "NCHW16c")]
    with rb.PassContext(opt_level=3, config={"relay.target": "toy"}):
        assert rb.passes.AlterOpLayout()(CONV_RELU) is CONV_RELU     # nothing for toy any more


def test_a_bad_answer_names_the_operator():
    with attr_scope():
        register_alter_op_layout("nn.conv2d", lambda *args: "NHWC", level=11)
        with pytest.raises(TypeError, match="layout hook of nn.conv2d returned 'NHWC'"):
            alter(CONV_RELU)


# ---------------------------------------------------------------------------------------------
# ConvertLayout

def test_convert_layout_uses_the_registration_of_the_highest_level():
    seen = []

    def nhwc_only_3x3(attrs, inputs, tinfos, desired_layouts):
        seen.append(list(desired_layouts))
        if tuple(attrs["kernel_size"]) != (3, 3):
            return None
        data_layout, kernel_layout = desired_layouts
        return op.nn.conv2d(*inputs, **dict(attrs, data_layout=data_layout, kernel_layout=kernel_layout))

    with rb.PassContext(opt_level=3):
        builtin = rb.passes.ConvertLayout({"nn.conv2d": ["NHWC", "default"]})(CONV_RELU)
    assert conv_layouts(builtin) == [("NHWC", "HWIO", "")]
    with attr_scope():
        register_convert_op_layout("nn.conv2d", nhwc_only_3x3, level=11)
        with rb.PassContext(opt_level=3):
            out = rb.passes.ConvertLayout({"nn.conv2d": ["NHWC", "OHWI"]})(CONV_RELU)
    assert seen == [["NHWC", "OHWI"]]
    assert conv_layouts(out) == [("NHWC", "OHWI", "")]
    check_same_outputs(CONV_RELU, out)


def test_convert_layout_of_an_operator_a_user_registered():
    pool = rb.parse(H + """
def @main(%x: Tensor[(1, 4, 8, 8), float32]) {
  %0 = nn.max_pool2d(%x, pool_size=[2, 2], strides=[2, 2]);
  nn.relu(%0)
}""")

    def pool_to(attrs, inputs, tinfos, desired_layouts):
        return {"layout": desired_layouts[0]}

    with pytest.raises(ValueError, match="cannot convert the layout of 'nn.max_pool2d'"):
        with rb.PassContext(opt_level=3):
            rb.passes.ConvertLayout({"nn.max_pool2d": ["NHWC"]})(pool)
    with attr_scope():
        register_convert_op_layout("nn.max_pool2d", pool_to)
        with rb.PassContext(opt_level=3):
            out = rb.passes.ConvertLayout({"nn.max_pool2d": ["NHWC"]})(pool)
    assert calls(out, "nn.max_pool2d")[0].attrs["layout"] == "NHWC"
    assert op_histogram(out)["layout_transform"] == 2
    expected = check_same_outputs(pool, out)
    x = np.random.default_rng(0).standard_normal((1, 4, 8, 8)).astype("float32")
    np.testing.assert_allclose(expected, np.maximum(x.reshape(1, 4, 4, 2, 4, 2).max(axis=(3, 5)), 0))
