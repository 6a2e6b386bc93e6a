"""The layout rules at their edges: reductions with ``exclude``, ``keepdims``, negative axes and
no axis at all, and operators joining a blocked tensor with one whose channels the block does not
divide. Each rule is checked on hand-worked decisions, and each program through AlterOpLayout
(``rb.build`` at opt_level 3) and ConvertLayout against the interpreter on the original program."""

import numpy as np
import pytest

import relaybench as rb
from relaybench.ir import post_order
from relaybench.ir.layout import Layout
from relaybench.ir.types import TensorType
from relaybench.passes._layout_rules import concatenate_layout, reduce_layout

H = '#[version = "0.0.5"]\n'
CONV = "nn.conv2d(%x, %w, padding=[1, 1, 1, 1])"
PARAMS = "%x: Tensor[(1, 4, 5, 6), float32], %w: Tensor[(8, 4, 3, 3), float32]"
NCHW, NCHW8C, NHWC = Layout("NCHW"), Layout("NCHW8c"), Layout("NHWC")


def inputs(mod, seed=0):
    rng = np.random.default_rng(seed)
    return {p.name_hint: rng.standard_normal([int(d) for d in p.type_annotation.shape]).astype("float32")
            for p in mod["main"].params}


def interpret(mod, args):
    return np.asarray(rb.create_executor("interpreter", mod=mod).evaluate()(*args.values()))


def convert(mod, layout):
    with rb.PassContext(opt_level=3):
        return rb.passes.ConvertLayout(desired_layouts={"nn.conv2d": [layout, "default"]})(mod)


def alter(mod):
    with rb.PassContext(opt_level=3):
        return rb.passes.AlterOpLayout()(rb.passes.InferType()(mod))


def check_everywhere(text):
    """The program compiled at opt_level 0 and 3, and converted to NHWC and NCHW4c, agrees with the
    interpreter on the original program."""
    mod = rb.parse(H + text)
    args = inputs(mod)
    want = interpret(mod, args)
    for level in (0, 3):
        got = np.asarray(rb.build(mod, target="llvm", opt_level=level).run(**args))
        assert got.shape == want.shape, (level, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"opt_level {level}")
    for layout in ("NHWC", "NCHW4c"):
        converted = convert(mod, layout)
        got = interpret(converted, args)
        assert got.shape == want.shape, (layout, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=layout)
        got = np.asarray(rb.build(converted, target="llvm", opt_level=3).run(**args))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{layout} compiled")


def calls(mod, name):
    return [n for n in post_order(mod["main"].body)
            if isinstance(n, rb.Call) and isinstance(n.op, rb.Op) and n.op.name == name]


# ---------------------------------------------------------------------------------------------
# Reductions

def decide(attrs, new, old=NCHW, shape=(1, 8, 5, 6)):
    full = {"axis": None, "keepdims": False, "exclude": False}
    full.update(attrs)
    return reduce_layout(full, (new,), (old,), (TensorType(shape, "float32"),))


def test_reduce_rule_over_no_axis_keeps_saying_no_axis():
    # exclude=True listing every axis reduces nothing; an empty axis list would mean every axis
    d = decide({"axis": (0, 1, 2, 3), "exclude": True}, NCHW8C)
    assert d.inputs == (NCHW8C,) and d.outputs == (NCHW8C,)
    assert d.attrs == {"axis": (0, 1, 2, 3, 4), "exclude": True}
    d = decide({"axis": (3, -4, 1, 2), "exclude": True, "keepdims": True}, NHWC)
    assert d.outputs == (NHWC,) and d.attrs == {"axis": (0, 1, 2, 3), "exclude": True}


def test_reduce_rule_resolves_exclude_and_negative_axes():
    # NCHW -> NHWC: reducing C (axis -3) is axis 3 of NHWC; exclude N, C reduces H, W (1, 2)
    d = decide({"axis": (-3,)}, NHWC)
    assert d.attrs == {"axis": (3,), "exclude": False} and d.outputs == (Layout("NHW"),)
    d = decide({"axis": (0, -3), "exclude": True, "keepdims": True}, NHWC)
    assert d.attrs == {"axis": (1, 2), "exclude": False} and d.outputs == (NHWC,)
    # in NCHW8c, reducing C reduces both its parts
    d = decide({"axis": (1,)}, NCHW8C)
    assert d.attrs == {"axis": (1, 4), "exclude": False} and d.outputs == (Layout("NHW"),)
    d = decide({"axis": (1, 2), "exclude": True}, NCHW8C)
    assert d.attrs == {"axis": (0, 3), "exclude": False} and d.outputs == (Layout("CH8c"),)
    # keepdims on a blocked reduced axis cannot stay blocked: the original layout
    d = decide({"axis": (-3,), "keepdims": True}, NCHW8C)
    assert d.inputs == (NCHW,) and d.outputs == (NCHW,) and d.attrs is None


REDUCTIONS = ["sum", "mean", "max", "min", "prod", "argmax", "argmin"]
AXES = ["axis=[0, 1, 2, 3], exclude=True", "axis=[3, 0, -2, 1], exclude=True, keepdims=True",
        "axis=[-3]", "axis=[-3], keepdims=True", "axis=[1], exclude=True", "axis=[-1, -2], keepdims=True",
        "axis=[0, 2, 3], exclude=True, keepdims=True"]


@pytest.mark.parametrize("name", REDUCTIONS)
@pytest.mark.parametrize("axes", AXES)
def test_reductions_after_a_convolution(name, axes):
    check_everywhere(f"def @main({PARAMS}) {{ {name}({CONV}, {axes}) }}")


@pytest.mark.parametrize("axes", ["axis=[0, 1, 2, 3], exclude=True", "axis=[1]", "axis=[-1, 2]"])
def test_variance_after_a_convolution(axes):
    check_everywhere(f"def @main({PARAMS}) {{ %0 = {CONV}; variance(%0, mean(%0, {axes}, keepdims=True), {axes}) }}")


def test_min_over_no_axis_keeps_its_shape_through_convert_layout():
    mod = rb.parse(H + f"def @main({PARAMS}) {{ min({CONV}, axis=[0, 1, 2, 3], exclude=True, keepdims=True) }}")
    out = rb.passes.InferType()(convert(mod, "NHWC"))
    assert out["main"].body.checked_type == TensorType((1, 8, 5, 6), "float32")
    (m,) = calls(out, "min")
    assert m.attrs["axis"] == (0, 1, 2, 3) and m.attrs["exclude"]


# ---------------------------------------------------------------------------------------------
# Channels a block does not divide

def test_concatenate_rule_needs_every_field_in_whole_blocks():
    types = (TensorType((1, 8, 5, 6), "float32"), TensorType((1, 1, 5, 6), "float32"))
    d = concatenate_layout({"axis": 1}, (NCHW8C, None), (NCHW, None), types)
    assert d.inputs == (NCHW, NCHW) and d.outputs == (NCHW,) and d.attrs is None
    types = (TensorType((1, 8, 5, 6), "float32"), TensorType((1, 16, 5, 6), "float32"))
    d = concatenate_layout({"axis": -3}, (NCHW8C, None), (NCHW, None), types)
    assert d.inputs == (NCHW8C, NCHW8C) and d.attrs == {"axis": 1}


def test_concatenate_with_one_channel_keeps_nchw_at_opt_level_3():
    text = (f"def @main({PARAMS}, %z: Tensor[(1, 1, 5, 6), float32]) {{ "
            f"concatenate(({CONV}, %z), axis=1) }}")
    out = alter(rb.parse(H + text))
    (cat,) = calls(out, "concatenate")
    assert [f.checked_type.shape for f in cat.args[0].fields] == [(1, 8, 5, 6), (1, 1, 5, 6)]
    assert cat.args[0].fields[0].op.name == "layout_transform"
    check_everywhere(text)


@pytest.mark.parametrize("channels, axis", [(1, 1), (2, -3), (4, 1), (16, 1), (8, 2)])
def test_concatenate_after_a_convolution(channels, axis):
    shape = (1, channels, 5, 6) if axis != 2 else (1, 8, 2, 6)
    for first, second in ((CONV, "%z"), ("%z", CONV)):
        check_everywhere(f"def @main({PARAMS}, %z: Tensor[{shape}, float32]) {{ "
                         f"concatenate(({first}, {second}), axis={axis}) }}")


@pytest.mark.parametrize("z", ["(1, 1, 5, 6)", "(1, 8, 1, 1)", "(8, 1, 1)", "(1, 5, 6)", "(1, 1, 1, 1)"])
@pytest.mark.parametrize("name", ["add", "multiply", "maximum"])
def test_broadcast_operands_after_a_convolution(z, name):
    check_everywhere(f"def @main({PARAMS}, %z: Tensor[{z}, float32]) {{ {name}({CONV}, %z) }}")
    check_everywhere(f"def @main({PARAMS}, %z: Tensor[{z}, float32]) {{ {name}(%z, {CONV}) }}")


@pytest.mark.parametrize("size", ["[2, 3]", "[1, 1]", "[5, 6]"])
def test_adaptive_avg_pool2d_after_a_convolution(size):
    text = f"def @main({PARAMS}) {{ nn.adaptive_avg_pool2d({CONV}, output_size={size}) }}"
    (pool,) = calls(alter(rb.parse(H + text)), "nn.adaptive_avg_pool2d")
    assert pool.attrs["layout"] == "NCHW8c"
    check_everywhere(text)


@pytest.mark.parametrize("in_channels, out_channels", [(1, 8), (4, 1), (4, 6)])
def test_convert_layout_leaves_a_convolution_its_blocks_do_not_divide(in_channels, out_channels):
    text = (f"def @main(%x: Tensor[(1, {in_channels}, 5, 6), float32], "
            f"%w: Tensor[({out_channels}, {in_channels}, 3, 3), float32]) {{ nn.relu({CONV}) }}")
    out = convert(rb.parse(H + text), "NCHW4c")
    (conv,) = calls(out, "nn.conv2d")
    assert conv.attrs["data_layout"] == "NCHW"
    check_everywhere(text)
