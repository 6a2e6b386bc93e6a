"""Operator type relations, attributes, pattern kinds and numpy references; layouts."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import relaybench as rb
from relaybench import op
from relaybench.errors import TypeInferenceError
from relaybench.ir import ANY, Function, Let, SymVar, Tuple, TupleGetItem, Var, const, var
from relaybench.ir.layout import BijectiveLayout, Layout
from relaybench.ir.symbolic import floordiv
from relaybench.ir.type_infer import infer_expr
from relaybench.ir.types import IncompleteType, TensorType, TupleType
from relaybench.op.registry import OpPattern, get_opdef
from relaybench.op.transform import infer_reshape

f32, i32, b = "float32", "int32", "bool"
n, m, h, w_ = SymVar("n"), SymVar("m"), SymVar("h"), SymVar("w")


def T(*shape, dtype=f32):
    return TensorType(shape, dtype)


def v(name, *shape, dtype=f32):
    return var(name, shape=shape, dtype=dtype)


def raises(message):
    """pytest.raises for a TypeInferenceError whose text starts with ``message``."""
    import re
    return pytest.raises(TypeInferenceError, match="^" + re.escape(message))


# ---------------------------------------------------------------------------------------------
# The registry entries

OPS = {
    "add": OpPattern.BROADCAST, "subtract": OpPattern.BROADCAST, "multiply": OpPattern.BROADCAST,
    "divide": OpPattern.BROADCAST, "maximum": OpPattern.BROADCAST, "minimum": OpPattern.BROADCAST,
    "power": OpPattern.BROADCAST, "equal": OpPattern.BROADCAST, "not_equal": OpPattern.BROADCAST,
    "less": OpPattern.BROADCAST, "less_equal": OpPattern.BROADCAST, "greater": OpPattern.BROADCAST,
    "greater_equal": OpPattern.BROADCAST, "negative": OpPattern.ELEMWISE, "nn.relu": OpPattern.ELEMWISE,
    "nn.conv2d": OpPattern.OUT_ELEMWISE_FUSABLE, "nn.dense": OpPattern.OUT_ELEMWISE_FUSABLE,
    "nn.bias_add": OpPattern.BROADCAST, "reshape": OpPattern.INJECTIVE, "transpose": OpPattern.INJECTIVE,
    "concatenate": OpPattern.INJECTIVE, "split": OpPattern.INJECTIVE,
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_pattern_kind_reference_and_doc(name):
    d = get_opdef(name)
    assert d.pattern == OPS[name]
    assert d.reference is not None and d.doc


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_relation_waits_for_unknown_inputs(name):
    d = get_opdef(name)
    assert d.type_rel([IncompleteType()] * len(d.inputs), d.make_attrs({})) is None


def test_relations_wait_for_a_known_data_but_unknown_weight():
    conv, dense = get_opdef("nn.conv2d"), get_opdef("nn.dense")
    assert conv.type_rel([T(1, 3, 8, 8), IncompleteType()], conv.make_attrs({})) is None
    assert conv.type_rel([T(1, 3, 8, 8), IncompleteType()], conv.make_attrs({"channels": 4})) is None
    assert dense.type_rel([T(4, 16), IncompleteType()], dense.make_attrs({})) is None
    cat = get_opdef("concatenate")
    assert cat.type_rel([TupleType([T(2), IncompleteType()])], cat.make_attrs({})) is None


def test_conv2d_attribute_defaults_and_normalization():
    d = get_opdef("nn.conv2d")
    assert dict(d.make_attrs({})) == {
        "strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1, "channels": None,
        "kernel_size": None, "data_layout": "NCHW", "kernel_layout": "OIHW", "out_layout": "",
        "out_dtype": ""}
    assert d.make_attrs({"padding": 1}).padding == (1, 1, 1, 1)
    assert d.make_attrs({"padding": [1, 2]}).padding == (1, 2, 1, 2)
    assert d.make_attrs({"padding": (1, 2, 3, 4)}).padding == (1, 2, 3, 4)
    assert d.make_attrs({"strides": 2, "kernel_size": 3}).strides == (2, 2)
    assert d.make_attrs({"kernel_size": 3}).kernel_size == (3, 3)
    assert d.make_attrs({"out_dtype": np.int32}).out_dtype == "int32"
    assert d.non_default_attrs(d.make_attrs({"padding": (0, 0)})) == {}


@pytest.mark.parametrize("attrs, message", [
    ({"padding": (1, 2, 3)}, "nn.conv2d: padding must have 1 or 2 or 4 values"),
    ({"strides": 0}, "nn.conv2d: strides must be at least 1"),
    ({"groups": 0}, "nn.conv2d: groups must be at least 1"),
    ({"data_layout": "NCHX"}, "nn.conv2d: data_layout='NCHX' must have the axes N, C, H, W"),
    ({"kernel_layout": "OIHW4x"}, "nn.conv2d: invalid layout 'OIHW4x': sub-axis x has no primal axis X"),
    ({"out_dtype": "float7"}, "nn.conv2d: unknown dtype 'float7'"),
    ({"stride": 2}, "nn.conv2d: unknown attribute 'stride'"),
])
def test_conv2d_bad_attributes(attrs, message):
    with pytest.raises(ValueError) as info:
        op.nn.conv2d(v("x", 1, 3, 8, 8), v("w", 4, 3, 3, 3), **attrs)
    assert str(info.value).startswith(message)


def test_other_attribute_defaults():
    assert dict(get_opdef("nn.dense").make_attrs({})) == {"units": None, "out_dtype": ""}
    assert dict(get_opdef("nn.bias_add").make_attrs({})) == {"axis": 1}
    assert dict(get_opdef("reshape").make_attrs({"newshape": [2, -1]})) == {"newshape": (2, -1), "allowzero": 0}
    assert dict(get_opdef("transpose").make_attrs({})) == {"axes": None}
    assert dict(get_opdef("concatenate").make_attrs({})) == {"axis": 0}
    assert dict(get_opdef("split").make_attrs({})) == {"indices_or_sections": 1, "axis": 0}
    with pytest.raises(ValueError, match="split: indices_or_sections must be a sorted ascending list"):
        get_opdef("split").make_attrs({"indices_or_sections": [3, 1]})
    with pytest.raises(ValueError, match="reshape: newshape must be at least -4"):
        get_opdef("reshape").make_attrs({"newshape": [-5]})


# ---------------------------------------------------------------------------------------------
# Broadcasting and elementwise

BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "power"]
COMPARE = ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]


def call(name, *args, **attrs):
    return rb.Call(rb.Op.get(name), list(args), rb.ir.Attrs(attrs))


@pytest.mark.parametrize("name", BINARY)
def test_broadcasting_arithmetic(name):
    assert infer_expr(call(name, v("a", 2, 3), v("b", 3))) == T(2, 3)
    assert infer_expr(call(name, v("a", 4, 1, 3), v("b", 5, 1))) == T(4, 5, 3)
    assert infer_expr(call(name, v("a", dtype=i32), v("b", 7, dtype=i32))) == T(7, dtype=i32)
    assert infer_expr(call(name, v("a", n, 1), v("b", 1, 3))) == T(n, 3)


@pytest.mark.parametrize("name", COMPARE)
def test_comparisons_give_bool(name):
    assert infer_expr(call(name, v("a", 2, 3), v("b", 3))) == T(2, 3, dtype=b)
    assert infer_expr(call(name, v("a", dtype=i32), v("b", dtype=i32))) == T(dtype=b)


def test_broadcasting_with_any_dims():
    assert infer_expr(op.add(v("a", None, 3), v("b", 4, 1))) == T(4, 3)
    assert infer_expr(op.add(v("a", None), v("b", 1))) == T(ANY)
    assert infer_expr(op.add(v("a", None, 1), v("b", None, 5))) == T(ANY, 5)


def test_broadcasting_errors():
    with raises("add: cannot broadcast Tensor[(2, 3), float32] and Tensor[(4), float32]: dimension 3 vs 4"):
        infer_expr(op.add(v("a", 2, 3), v("b", 4)))
    with raises("multiply: operands have different dtypes: float32 and int32"):
        infer_expr(op.multiply(v("a", 2), v("b", 2, dtype=i32)))
    with raises("less: cannot broadcast Tensor[(n), float32] and Tensor[(m), float32]: dimension n vs m"):
        infer_expr(op.less(v("a", n), v("b", m)))
    with raises("add: lhs must be a tensor, got (float32, float32)"):
        infer_expr(op.add(Tuple([const(1.0), const(1.0)]), const(1.0)))


def test_unary_ops_keep_the_type():
    assert infer_expr(op.negative(v("a", n, 2, dtype=i32))) == T(n, 2, dtype=i32)
    assert infer_expr(op.nn.relu(v("a", 1, None))) == T(1, ANY)
    with raises("nn.relu: data must be a tensor, got (float32,)"):
        infer_expr(op.nn.relu(Tuple([const(1.0)])))


shape_strategy = st.lists(st.integers(1, 4), min_size=0, max_size=4)


@settings(max_examples=200, deadline=None)
@given(shape_strategy, shape_strategy, st.data())
def test_broadcasting_agrees_with_numpy(s1, s2, data):
    # make some dims compatible on purpose so both outcomes are exercised
    for i in range(1, min(len(s1), len(s2)) + 1):
        if data.draw(st.booleans()):
            s2[-i] = data.draw(st.sampled_from([1, s1[-i]]))
    x, y = v("x", *s1), v("y", *s2)
    try:
        expected = np.broadcast_shapes(tuple(s1), tuple(s2))
    except ValueError:
        with raises("add: cannot broadcast"):
            infer_expr(op.add(x, y))
    else:
        assert infer_expr(op.add(x, y)) == T(*expected)
        assert infer_expr(op.greater(x, y)) == T(*expected, dtype=b)


@pytest.mark.parametrize("name", BINARY + COMPARE)
def test_binary_references_match_numpy(name):
    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 2.0, (2, 3)).astype("float32")
    c = rng.uniform(0.5, 2.0, (3,)).astype("float32")
    numpy_name = {"add": "add", "subtract": "subtract", "multiply": "multiply", "divide": "divide",
                  "maximum": "maximum", "minimum": "minimum", "power": "power"}.get(name, name)
    got = get_opdef(name).reference(a, c, get_opdef(name).make_attrs({}))
    np.testing.assert_allclose(got, getattr(np, numpy_name)(a, c), rtol=1e-6)
    assert got.shape == (2, 3)


def test_integer_divide_truncates_toward_zero():
    d = get_opdef("divide")
    got = d.reference(np.array([7, -7, 7, -7], "int32"), np.array([2, 2, -2, -2], "int32"), d.make_attrs({}))
    assert got.tolist() == [3, -3, -3, 3] and got.dtype == np.int32


# ---------------------------------------------------------------------------------------------
# nn.conv2d

def test_conv2d_nchw():
    y = op.nn.conv2d(v("x", 1, 3, 224, 224), v("w", 64, 3, 7, 7), strides=2, padding=3)
    assert infer_expr(y) == T(1, 64, 112, 112)
    y = op.nn.conv2d(v("x", 2, 3, 10, 12), v("w", 5, 3, 3, 2), strides=(2, 3), padding=(1, 0, 2, 1),
                     dilation=(2, 1))
    # H: (10 + 1 + 2 - 5) // 2 + 1 = 5; W: (12 + 0 + 1 - 2) // 3 + 1 = 4
    assert infer_expr(y) == T(2, 5, 5, 4)


def test_conv2d_nhwc_hwio_and_out_layout():
    y = op.nn.conv2d(v("x", 1, 224, 224, 3), v("w", 7, 7, 3, 64), strides=2, padding=3,
                     data_layout="NHWC", kernel_layout="HWIO")
    assert infer_expr(y) == T(1, 112, 112, 64)
    y = op.nn.conv2d(v("x", 1, 3, 8, 8), v("w", 4, 3, 3, 3), padding=1, out_layout="NHWC")
    assert infer_expr(y) == T(1, 8, 8, 4)


def test_conv2d_blocked_layouts():
    # NCHW16c data with C = 2 * 16, OIHW16i16o weight with O = 4 * 16 and I = 2 * 16
    y = op.nn.conv2d(v("x", 1, 2, 8, 8, 16), v("w", 4, 2, 3, 3, 16, 16), data_layout="NCHW16c",
                     kernel_layout="OIHW16i16o")
    assert infer_expr(y) == T(1, 4, 6, 6, 16)
    y = op.nn.conv2d(v("x", 1, 32, 8, 8), v("w", 64, 32, 3, 3), out_layout="NCHW8c")
    assert infer_expr(y) == T(1, 8, 6, 6, 8)
    wv = Var("w")
    y = op.nn.conv2d(v("x", 1, 2, 8, 8, 16), wv, channels=64, kernel_size=3, data_layout="NCHW16c",
                     kernel_layout="OIHW16i16o")
    assert infer_expr(y) == T(1, 4, 6, 6, 16)
    assert wv.checked_type == T(4, 2, 3, 3, 16, 16)


def test_conv2d_groups_and_depthwise():
    y = op.nn.conv2d(v("x", 1, 8, 5, 5), v("w", 4, 2, 3, 3), groups=4)
    assert infer_expr(y) == T(1, 4, 3, 3)
    y = op.nn.conv2d(v("x", 1, 8, 5, 5), v("w", 8, 1, 3, 3), groups=8, padding=1)
    assert infer_expr(y) == T(1, 8, 5, 5)
    wv = Var("w")
    y = op.nn.conv2d(v("x", 1, 8, 5, 5), wv, groups=8, channels=16, kernel_size=3, padding=1)
    assert infer_expr(y) == T(1, 16, 5, 5)
    assert wv.checked_type == T(16, 1, 3, 3)


def test_conv2d_infers_the_weight_from_channels_and_kernel_size():
    wv = Var("w")
    y = op.nn.conv2d(v("x", 1, 3, 32, 32), wv, channels=16, kernel_size=(3, 5), padding=(1, 2))
    assert infer_expr(y) == T(1, 16, 32, 32)
    assert wv.checked_type == T(16, 3, 3, 5)
    wv = Var("w")
    y = op.nn.conv2d(v("x", 1, 32, 32, 3, dtype="float16"), wv, channels=16, kernel_size=3,
                     data_layout="NHWC", kernel_layout="HWIO")
    assert infer_expr(y) == T(1, 30, 30, 16, dtype="float16")
    assert wv.checked_type == T(3, 3, 3, 16, dtype="float16")


def test_conv2d_symbolic_and_any_dims():
    y = op.nn.conv2d(v("x", n, 3, h, w_), v("w", 8, 3, 3, 3), padding=1)
    assert infer_expr(y) == T(n, 8, h, w_)
    y = op.nn.conv2d(v("x", n, 3, h, w_), v("w", 8, 3, 3, 3), padding=1, strides=2)
    assert infer_expr(y) == T(n, 8, floordiv(h - 1, 2) + 1, floordiv(w_ - 1, 2) + 1)
    y = op.nn.conv2d(v("x", None, 3, None, 9), v("w", 8, 3, 3, 3))
    assert infer_expr(y) == T(ANY, 8, ANY, 7)


def test_conv2d_out_dtype():
    y = op.nn.conv2d(v("x", 1, 3, 4, 4, dtype="int8"), v("w", 2, 3, 1, 1, dtype="int8"), out_dtype="int32")
    assert infer_expr(y) == T(1, 2, 4, 4, dtype="int32")


@pytest.mark.parametrize("make, message", [
    (lambda: op.nn.conv2d(v("x", 1, 3, 8, 8), v("w", 8, 4, 3, 3)),
     "nn.conv2d: data has 3 input channels but the weight expects 4"),
    (lambda: op.nn.conv2d(v("x", 1, 3, 8, 8), v("w", 16, 3, 3, 3), channels=8),
     "nn.conv2d: channels=8 but the weight has 16 output channels"),
    (lambda: op.nn.conv2d(v("x", 1, 3, 8, 8), v("w", 16, 3, 3, 3), kernel_size=5),
     "nn.conv2d: kernel_size=(5, 5) but the weight's kernel is (3, 3)"),
    (lambda: op.nn.conv2d(v("x", 1, 8, 8, 8), v("w", 4, 4, 3, 3), groups=4),
     "nn.conv2d: data has 8 input channels in 4 groups (2 per group) but the weight expects 4 per group"),
    (lambda: op.nn.conv2d(v("x", 1, 6, 8, 8), v("w", 4, 2, 3, 3), groups=4),
     "nn.conv2d: data has 6 input channels, which groups=4 does not divide"),
    (lambda: op.nn.conv2d(v("x", 1, 8, 8, 8), v("w", 6, 2, 3, 3), groups=4),
     "nn.conv2d: the weight's 6 output channels are not divisible by groups=4"),
    (lambda: op.nn.conv2d(v("x", 1, 3, 4, 4), v("w", 8, 3, 5, 5)),
     "nn.conv2d: the kernel's height (5 with dilation) is larger than the padded input's height (4)"),
    (lambda: op.nn.conv2d(v("x", 1, 3, 8, 8), v("w", 8, 3, 3, 3), dilation=4),
     "nn.conv2d: the kernel's height (9 with dilation) is larger than the padded input's height (8)"),
    (lambda: op.nn.conv2d(v("x", 3, 8, 8), v("w", 8, 3, 3, 3)),
     "nn.conv2d: data Tensor[(3, 8, 8), float32] has rank 3 but data_layout NCHW needs rank 4"),
    (lambda: op.nn.conv2d(v("x", 1, 3, 8, 8), v("w", 8, 3, 3)),
     "nn.conv2d: weight Tensor[(8, 3, 3), float32] has rank 3 but kernel_layout OIHW needs rank 4"),
    (lambda: op.nn.conv2d(v("x", 1, 3, 8, 8, 4), v("w", 8, 12, 3, 3), data_layout="NCHW16c"),
     "nn.conv2d: data Tensor[(1, 3, 8, 8, 4), float32]: axis c of layout NCHW16c has extent 4 but its "
     "block factor is 16"),
    (lambda: op.nn.conv2d(v("x", 1, 3, 8, 8), v("w", 8, 3, 3, 3), out_layout="NCHW16c"),
     "nn.conv2d: the output in layout NCHW16c: axis C of extent 8 cannot be split into blocks of 16"),
    (lambda: op.nn.conv2d(v("x", 1, 3, 8, 8), v("w", 8, 3, 3, 3), channels=6, kernel_size=3),
     "nn.conv2d: channels=6 but the weight has 8 output channels"),
    (lambda: op.nn.conv2d(v("x", 1, 8, 8, 8), Var("w"), channels=6, kernel_size=3, groups=4),
     "nn.conv2d: channels=6 is not divisible by groups=4"),
])
def test_conv2d_errors(make, message):
    with raises(message) as info:
        infer_expr(make())
    assert info.value.op == "nn.conv2d" and info.value.relation == "Conv2DRel"


def test_conv2d_weight_without_channels_needs_annotations():
    wv = Var("w")
    with raises("nn.conv2d: could not infer the type of the nn.conv2d call: more type annotations needed "
                "(the type of its weight is not known)"):
        infer_expr(Function([wv], op.nn.conv2d(v("x", 1, 3, 8, 8), wv, kernel_size=3)))


conv_params = st.fixed_dictionaries({
    "n": st.integers(1, 3), "c": st.integers(1, 4), "h": st.integers(1, 20), "w": st.integers(1, 20),
    "o": st.integers(1, 4), "groups": st.integers(1, 3), "kh": st.integers(1, 5), "kw": st.integers(1, 5),
    "sh": st.integers(1, 3), "sw": st.integers(1, 3), "dh": st.integers(1, 3), "dw": st.integers(1, 3),
    "pad": st.lists(st.integers(0, 3), min_size=4, max_size=4),
})


@settings(max_examples=200, deadline=None)
@given(conv_params, st.sampled_from([("NCHW", "OIHW"), ("NHWC", "HWIO")]))
def test_conv2d_output_shape_agrees_with_the_formula(p, layouts):
    g = p["groups"]
    c, o = p["c"] * g, p["o"] * g
    pt, pl, pb, pr = p["pad"]
    eff_h, eff_w = (p["kh"] - 1) * p["dh"] + 1, (p["kw"] - 1) * p["dw"] + 1
    data_layout, kernel_layout = layouts
    dshape = (p["n"], c, p["h"], p["w"]) if data_layout == "NCHW" else (p["n"], p["h"], p["w"], c)
    wshape = (o, p["c"], p["kh"], p["kw"]) if kernel_layout == "OIHW" else (p["kh"], p["kw"], p["c"], o)
    y = op.nn.conv2d(v("x", *dshape), v("k", *wshape), strides=(p["sh"], p["sw"]), padding=tuple(p["pad"]),
                     dilation=(p["dh"], p["dw"]), groups=g, data_layout=data_layout, kernel_layout=kernel_layout)
    if p["h"] + pt + pb < eff_h or p["w"] + pl + pr < eff_w:
        with raises("nn.conv2d: the kernel's"):
            infer_expr(y)
        return
    oh = (p["h"] + pt + pb - eff_h) // p["sh"] + 1
    ow = (p["w"] + pl + pr - eff_w) // p["sw"] + 1
    expected = (p["n"], o, oh, ow) if data_layout == "NCHW" else (p["n"], oh, ow, o)
    assert infer_expr(y) == T(*expected)


def _naive_conv2d(x, w, stride, pad, dil, groups):
    n_, c, hh, ww = x.shape
    o, ig, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[2]), (pad[1], pad[3])))
    oh = (hh + pad[0] + pad[2] - (kh - 1) * dil[0] - 1) // stride[0] + 1
    ow = (ww + pad[1] + pad[3] - (kw - 1) * dil[1] - 1) // stride[1] + 1
    out = np.zeros((n_, o, oh, ow))
    og = o // groups
    for bn in range(n_):
        for oc in range(o):
            g = oc // og
            for y in range(oh):
                for x_ in range(ow):
                    acc = 0.0
                    for ic in range(ig):
                        for i in range(kh):
                            for j in range(kw):
                                acc += (xp[bn, g * ig + ic, y * stride[0] + i * dil[0], x_ * stride[1] + j * dil[1]]
                                        * w[oc, ic, i, j])
                    out[bn, oc, y, x_] = acc
    return out


def test_conv2d_reference_matches_a_direct_loop_in_every_layout():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 7, 6)).astype("float32")
    wt = rng.standard_normal((6, 2, 3, 2)).astype("float32")
    d = get_opdef("nn.conv2d")
    attrs = dict(strides=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2), groups=2)
    expected = _naive_conv2d(x.astype(np.float64), wt.astype(np.float64), (2, 1), (1, 0, 2, 1), (1, 2), 2)
    got = d.reference(x, wt, d.make_attrs(attrs))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    # the same convolution with NHWC data, HWIO weights and an NCHW2c output
    xn = Layout("NCHW").transform_array(x, "NHWC")
    wn = Layout("OIHW").transform_array(wt, "HWIO")
    got = d.reference(xn, wn, d.make_attrs(dict(attrs, data_layout="NHWC", kernel_layout="HWIO",
                                                out_layout="NCHW2c")))
    np.testing.assert_allclose(Layout("NCHW2c").transform_array(got, "NCHW"), expected, rtol=1e-5, atol=1e-5)
    # and the shape the relation computes is the shape the reference produces
    t = infer_expr(op.nn.conv2d(v("x", *xn.shape), v("k", *wn.shape), data_layout="NHWC", kernel_layout="HWIO",
                                out_layout="NCHW2c", **attrs))
    assert t.shape == got.shape


# ---------------------------------------------------------------------------------------------
# nn.dense and nn.bias_add

def test_dense():
    assert infer_expr(op.nn.dense(v("x", 4, 16), v("w", 8, 16))) == T(4, 8)
    assert infer_expr(op.nn.dense(v("x", 2, 5, 16), v("w", 8, 16), units=8)) == T(2, 5, 8)
    assert infer_expr(op.nn.dense(v("x", n, 16), v("w", 8, None))) == T(n, 8)
    assert infer_expr(op.nn.dense(v("x", 4, 16, dtype="int8"), v("w", 8, 16, dtype="int8"),
                                  out_dtype="int32")) == T(4, 8, dtype=i32)


def test_dense_infers_the_weight_from_units():
    wv = Var("w")
    assert infer_expr(op.nn.dense(v("x", n, 16), wv, units=10)) == T(n, 10)
    assert wv.checked_type == T(10, 16)


@pytest.mark.parametrize("make, message", [
    (lambda: op.nn.dense(v("x", 4, 16), v("w", 8, 12)),
     "nn.dense: data has 16 input features (its last dimension) but the weight Tensor[(8, 12), float32] "
     "expects 12"),
    (lambda: op.nn.dense(v("x", 4, 16), v("w", 8, 16), units=4),
     "nn.dense: weight Tensor[(8, 16), float32] but units=4"),
    (lambda: op.nn.dense(v("x", 4, 16), v("w", 16)),
     "nn.dense: weight must have rank 2 ([units, 16]), got Tensor[(16), float32]"),
    (lambda: op.nn.dense(v("x"), v("w", 1, 1)), "nn.dense: data must have rank at least 1, got a scalar"),
])
def test_dense_errors(make, message):
    with raises(message):
        infer_expr(make())


def test_dense_reference():
    d = get_opdef("nn.dense")
    x, wt = np.arange(6, dtype="float32").reshape(2, 3), np.arange(12, dtype="float32").reshape(4, 3)
    np.testing.assert_array_equal(d.reference(x, wt, d.make_attrs({})), x @ wt.T)


def test_bias_add():
    assert infer_expr(op.nn.bias_add(v("x", 1, 8, 4, 4), v("b", 8))) == T(1, 8, 4, 4)
    assert infer_expr(op.nn.bias_add(v("x", 1, 4, 4, 8), v("b", 8), axis=-1)) == T(1, 4, 4, 8)
    bv = Var("b")
    assert infer_expr(op.nn.bias_add(v("x", n, 8), bv)) == T(n, 8)
    assert bv.checked_type == T(8)
    with raises("nn.bias_add: bias must be Tensor[(8), float32] (axis 1 of Tensor[(1, 8, 4, 4), float32]), "
                "got Tensor[(4), float32]"):
        infer_expr(op.nn.bias_add(v("x", 1, 8, 4, 4), v("b", 4)))
    with raises("nn.bias_add: axis 4 is out of range for rank 4"):
        infer_expr(op.nn.bias_add(v("x", 1, 8, 4, 4), v("b", 4), axis=4))
    d = get_opdef("nn.bias_add")
    x = np.zeros((1, 2, 3), "float32")
    got = d.reference(x, np.array([1.0, 2.0], "float32"), d.make_attrs({}))
    assert got[0, :, 0].tolist() == [1.0, 2.0] and got.shape == (1, 2, 3)


# ---------------------------------------------------------------------------------------------
# reshape, transpose

@pytest.mark.parametrize("ishape, newshape, expected", [
    ((2, 3, 4), (6, 4), (6, 4)),
    ((2, 3, 4), (0, -1), (2, 12)),
    ((2, 3, 4), (-1,), (24,)),
    ((2, 3, 4), (4, 0, 2), (4, 3, 2)),
    ((2, 3, 4), (-2,), (2, 3, 4)),
    ((2, 3, 4), (2, -2), (2, 3, 4)),
    ((2, 3, 4), (-3, 4), (6, 4)),
    ((2, 3, 4), (0, -3), (2, 12)),
    ((2, 3, 4), (-4, 1, 2, -3), (1, 2, 12)),
    ((2, 3, 4), (2, -4, -1, 3, 4), (2, 1, 3, 4)),
    ((2, 3, 4), (-1, 0, 4), (2, 3, 4)),
])
def test_reshape_special_values(ishape, newshape, expected):
    assert infer_reshape(ishape, newshape) == expected
    assert infer_expr(op.reshape(v("x", *ishape), newshape=newshape)) == T(*expected)
    d = get_opdef("reshape")
    arr = np.arange(int(np.prod(ishape))).reshape(ishape)
    assert d.reference(arr, d.make_attrs({"newshape": newshape})).shape == expected


def test_reshape_allowzero():
    assert infer_expr(op.reshape(v("x", 0, 3), newshape=(3, 0), allowzero=1)) == T(3, 0)
    assert infer_expr(op.reshape(v("x", 3, 3), newshape=(3, 0))) == T(3, 3)
    with raises("reshape: cannot reshape Tensor[(2, 3), float32] to newshape=[3, 0]: 6 elements vs 9"):
        infer_expr(op.reshape(v("x", 2, 3), newshape=(3, 0)))


def test_reshape_symbolic():
    assert infer_expr(op.reshape(v("x", n, 3, 4), newshape=(0, -1))) == T(n, 12)
    assert infer_expr(op.reshape(v("x", n, 6), newshape=(-1, 3))) == T(2 * n, 3)
    assert infer_expr(op.reshape(v("x", n, 4), newshape=(-1,))) == T(4 * n)
    assert infer_expr(op.reshape(v("x", n, m), newshape=(-3,))) == T(n * m)
    assert infer_expr(op.reshape(v("x", n, 3), newshape=(-1, 2))) == T(ANY, 2)   # not determinable
    assert infer_expr(op.reshape(v("x", None, 3), newshape=(-1,))) == T(ANY)
    assert infer_expr(op.reshape(v("x", n, 3), newshape=(3, -1))) == T(3, n)


@pytest.mark.parametrize("ishape, newshape, message", [
    ((2, 3), (4, 2), "6 elements vs 8"),
    ((2, 3), (-1, -1), "newshape can hold only one -1"),
    ((2, 3), (-1, 4), "6 elements do not divide into blocks of 4"),
    ((2, 3), (0, 0, 0), "newshape (0, 0, 0) uses more input dimensions than the input's 2"),
    ((2, 3), (-4, 4, 2, 3), "-4 splits dimension 2 into 4 * 2"),
    ((2, 3), (-4, 2), "-4 must be followed by two values"),
])
def test_reshape_errors(ishape, newshape, message):
    text = ", ".join(str(d) for d in newshape)
    with raises(f"reshape: cannot reshape {T(*ishape)} to newshape=[{text}]: {message}"):
        infer_expr(op.reshape(v("x", *ishape), newshape=newshape))


def test_transpose():
    assert infer_expr(op.transpose(v("x", 2, 3, 4))) == T(4, 3, 2)
    assert infer_expr(op.transpose(v("x", 2, n, 4), axes=(1, 0, 2))) == T(n, 2, 4)
    assert infer_expr(op.transpose(v("x", 2, 3, 4), axes=(-1, 0, 1))) == T(4, 2, 3)
    with raises("transpose: axes [0, 0, 1] is not a permutation of the 3 axes"):
        infer_expr(op.transpose(v("x", 2, 3, 4), axes=(0, 0, 1)))
    with raises("transpose: axes [1, 0] has 2 entries for a tensor of rank 3"):
        infer_expr(op.transpose(v("x", 2, 3, 4), axes=(1, 0)))
    with raises("transpose: axis 3 is out of range for rank 3"):
        infer_expr(op.transpose(v("x", 2, 3, 4), axes=(3, 0, 1)))
    d = get_opdef("transpose")
    assert d.reference(np.zeros((2, 3, 4)), d.make_attrs({"axes": (1, 2, 0)})).shape == (3, 4, 2)


# ---------------------------------------------------------------------------------------------
# concatenate, split

def test_concatenate():
    x, y = v("x", 2, 3), v("y", 5, 3)
    assert infer_expr(op.concatenate(Tuple([x, y]))) == T(7, 3)
    assert infer_expr(op.concatenate(Tuple([v("a", 2, 3), v("c", 2, 4)]), axis=-1)) == T(2, 7)
    assert infer_expr(op.concatenate(Tuple([v("a", n, 3), v("c", n, 3)]))) == T(2 * n, 3)
    assert infer_expr(op.concatenate(Tuple([v("a", n, 3), v("c", m, 3)]))) == T(n + m, 3)
    assert infer_expr(op.concatenate(Tuple([v("a", None, 3), v("c", 4, 3)]))) == T(ANY, 3)
    assert infer_expr(op.concatenate(Tuple([v("a", 2, None), v("c", 4, 3)]))) == T(6, 3)
    d = get_opdef("concatenate")
    got = d.reference([np.zeros((2, 3)), np.ones((1, 3))], d.make_attrs({}))
    assert got.shape == (3, 3) and got[2].tolist() == [1, 1, 1]


def test_concatenate_waits_for_a_field():
    p = Var("p")
    g = Var("g")
    cat = op.concatenate(Tuple([v("a", 2, 3), p]))
    prog = Let(g, Function([p], cat), rb.Call(g, [v("c", 4, 3)]))
    assert infer_expr(prog) == T(6, 3)
    assert p.checked_type == T(4, 3)


@pytest.mark.parametrize("fields, axis, message", [
    ([(2, 3), (2, 4)], 0, "field 1 has shape (2, 4) but field 0 has (2, 3): dimension 1 differs (3 vs 4)"),
    ([(2, 3), (2, 3, 1)], 0, "field 1 has rank 3 but field 0 has rank 2"),
    ([(2, 3), (2, 3)], 2, "axis 2 is out of range for rank 2"),
    ([(n, 3), (m, 3)], 1, "field 1 has shape (m, 3) but field 0 has (n, 3): dimension 0 differs (n vs m)"),
    ([], 0, "the input tuple is empty: nothing to concatenate"),
    ([()], 0, "cannot concatenate scalars"),
])
def test_concatenate_errors(fields, axis, message):
    tup = Tuple([v(f"x{i}", *s) for i, s in enumerate(fields)])
    with raises("concatenate: " + message):
        infer_expr(op.concatenate(tup, axis=axis))


def test_concatenate_dtype_and_input_errors():
    with raises("concatenate: field 1 has dtype int32 but field 0 has float32"):
        infer_expr(op.concatenate(Tuple([v("a", 2), v("c", 2, dtype=i32)])))
    with raises("concatenate: the input must be a tuple of tensors, got Tensor[(2), float32]"):
        infer_expr(op.concatenate(v("a", 2)))


def test_split():
    t = infer_expr(op.split(v("x", 6, 4), indices_or_sections=3))
    assert t == TupleType([T(2, 4)] * 3)
    t = infer_expr(op.split(v("x", 2, 10), indices_or_sections=(2, 5), axis=1))
    assert t == TupleType([T(2, 2), T(2, 3), T(2, 5)])
    t = infer_expr(op.split(v("x", 2 * n, 3), indices_or_sections=2))
    assert t == TupleType([T(n, 3)] * 2)
    t = infer_expr(op.split(v("x", n, 3), indices_or_sections=(1,)))
    assert t == TupleType([T(1, 3), T(n - 1, 3)])
    item = TupleGetItem(op.split(v("x", None, 3), indices_or_sections=(1,)), 1)
    assert infer_expr(item) == T(ANY, 3)
    d = get_opdef("split")
    parts = d.reference(np.arange(10).reshape(2, 5), d.make_attrs({"indices_or_sections": (1, 3), "axis": 1}))
    assert [p.shape for p in parts] == [(2, 1), (2, 2), (2, 2)]


def test_split_errors():
    with raises("split: axis 0 of size 7 cannot be split into 3 equal sections"):
        infer_expr(op.split(v("x", 7), indices_or_sections=3))
    with raises("split: index 4 is out of range for axis 0 of size 4"):
        infer_expr(op.split(v("x", 4), indices_or_sections=(2, 4)))
    with raises("split: axis -3 is out of range for rank 2"):
        infer_expr(op.split(v("x", 4, 4), axis=-3))


# ---------------------------------------------------------------------------------------------
# Layouts

def test_layout_parsing():
    lay = Layout("NCHW16c")
    assert lay.primal == "NCHW" and lay.ndim == 5 and lay.is_blocked
    assert lay.index_of("c") == 4 and lay.factor_of("C") == 16 and lay.factor_of("H") is None
    assert [str(a) for a in Layout("OIHW16i16o").axes] == ["O", "I", "H", "W", "16i", "16o"]
    assert Layout("NCHW1n16c").factor_of("N") == 1
    assert Layout("").is_undef and not Layout("NCHW").is_undef
    assert Layout("NCHW") == "NCHW" and Layout("NCHW") != Layout("NHWC")
    assert "H" in Layout("NHWC") and "c" not in Layout("NHWC")


@pytest.mark.parametrize("text, message", [
    ("NCHWc", "the sub-axis c needs a positive factor"),
    ("NCHW0c", "the sub-axis c needs a positive factor"),
    ("NC4HW", "a primal axis (H) cannot have a factor"),
    ("NCHWN", "axis N appears twice"),
    ("NHW16c", "sub-axis c has no primal axis C"),
    ("NCH-W", "unexpected character '-'"),
    ("NCHW16", "a factor must be followed by an axis letter"),
])
def test_layout_errors(text, message):
    with pytest.raises(ValueError, match=__import__("re").escape(message)):
        Layout(text)


def test_layout_shape_conversion():
    assert Layout("NCHW16c").convert_shape((1, 4, 7, 7, 16), "NCHW") == (1, 64, 7, 7)
    assert Layout("NCHW").convert_shape((1, 64, 7, 7), "NCHW16c") == (1, 4, 7, 7, 16)
    assert Layout("OIHW").convert_shape((64, 32, 3, 3), "OIHW16i16o") == (4, 2, 3, 3, 16, 16)
    assert Layout("NCHW").convert_shape((1, n, h, w_), "NHWC") == (1, h, w_, n)
    assert Layout("NCHW").convert_shape((1, 16 * n, 7, 7), "NCHW16c") == (1, n, 7, 7, 16)
    assert Layout("NCHW").convert_shape((1, None, 7, 7), "NCHW4c") == (1, ANY, 7, 7, 4)
    bij = BijectiveLayout("NHWC", "NCHW")
    assert bij.forward_shape((1, 5, 6, 3)) == (1, 3, 5, 6)
    assert bij.backward_shape((1, 3, 5, 6)) == (1, 5, 6, 3)
    with pytest.raises(ValueError, match="different axes"):
        Layout("NCHW").convert_shape((1, 2, 3, 4), "OIHW")
    with pytest.raises(ValueError, match="layout NCHW has 4 axes but the shape has 3"):
        Layout("NCHW").convert_shape((1, 2, 3), "NHWC")
    with pytest.raises(ValueError, match="not convertible"):
        BijectiveLayout("NCHW", "")


@pytest.mark.parametrize("dst", ["NHWC", "NCHW4c", "NCHW2c", "HWCN", "NHWC2c1n"])
def test_layout_array_round_trip(dst):
    x = np.arange(2 * 8 * 3 * 5).reshape(2, 8, 3, 5)
    y = Layout("NCHW").transform_array(x, dst)
    assert y.shape == Layout("NCHW").convert_shape(x.shape, dst)
    np.testing.assert_array_equal(Layout(dst).transform_array(y, "NCHW"), x)


def test_blocked_layout_element_mapping():
    x = np.arange(1 * 8 * 2 * 2).reshape(1, 8, 2, 2)
    y = Layout("NCHW").transform_array(x, "NCHW4c")
    # element [n, co, h, w, ci] of NCHW4c is element [n, co * 4 + ci, h, w] of NCHW
    assert y[0, 1, 1, 0, 3] == x[0, 7, 1, 0]


# ---------------------------------------------------------------------------------------------
# What Relay's relations accept (IdentityRel, BroadcastRel, BroadcastCompRel, ShapeOfRel)

@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "uint8", "bool"])
def test_shape_of_takes_any_dtype(dtype):
    # ShapeOfRel: Tensor[(rank,), dtype] for whatever dtype the attribute names
    x = v("x", 2, n, 5, dtype="int8")
    assert infer_expr(op.shape_of(x, dtype=dtype)) == T(3, dtype=dtype)
    mod = rb.parse('#[version = "0.0.5"]\n'
                   f'def @main(%x: Tensor[(2, 3), int32]) {{ shape_of(%x, dtype="{dtype}") }}')
    got = rb.create_executor("interpreter", mod=mod).evaluate()(np.zeros((2, 3), "int32"))
    assert got.dtype == np.dtype(dtype) and got.tolist() == np.array([2, 3], dtype).tolist()


def test_shape_of_float_dtype_compiled():
    mod = rb.parse('#[version = "0.0.5"]\n'
                   'def @main(%x: Tensor[(2, 3), int32]) { add(shape_of(%x, dtype="float32"), 0.5f) }')
    out = rb.build(mod, target="llvm", opt_level=3).run(x=np.zeros((2, 3), "int32"))
    np.testing.assert_array_equal(out, np.array([2.5, 3.5], "float32"))


@pytest.mark.parametrize("name", ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"])
@pytest.mark.parametrize("dtype", ["int8", "float64", "bool"])
def test_comparisons_give_bool_for_every_dtype(name, dtype):
    assert infer_expr(getattr(op, name)(v("a", 2, 1, dtype=dtype), v("b", 3, dtype=dtype))) == \
        T(2, 3, dtype="bool")


def test_relays_permissive_relation_is_one_registration_away():
    """Relay types log with IdentityRel (any dtype); here the relation is strict. Registering
    Relay's relation as FTypeRelation gives Relay's typing, and running what the op cannot
    compute is then a clear error, not a wrong result."""
    import numpy as np
    import relaybench as rb
    from relaybench.errors import CompileError, ExecutionError, TypeInferenceError
    text = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(3), int32]) { log(%x) }'
    with pytest.raises(TypeInferenceError, match="log: data must be a floating-point tensor"):
        rb.passes.InferType()(rb.parse(text))
    with rb.op.attr_scope():
        rb.op.register_op_attr("log", "FTypeRelation", lambda types, attrs: types[0], level=11)
        mod = rb.passes.InferType()(rb.parse(text))
        assert mod["main"].ret_type == rb.ir.TensorType((3,), "int32")
        run = rb.create_executor("interpreter", mod=mod).evaluate()
        with pytest.raises(ExecutionError, match="log at <string>:2:37: gives float64 on inputs int32\\[3\\], where "
                                                 "the program's type says int32"):
            run(np.array([1, 2, 3], "int32"))
        with pytest.raises(CompileError, match="log: no compute for int32"):
            rb.build(mod, target="llvm")
    with pytest.raises(TypeInferenceError):       # the scope undid the registration
        rb.passes.InferType()(rb.parse(text))


def test_a_registered_relation_replaces_the_builtin_one():
    """FTypeRelation at a higher level is what inference uses: a relation that gives the
    transposed shape for nn.relu (a deliberately different rule) shows in the inferred type."""
    import relaybench as rb
    x = rb.var("x", shape=(2, 5))
    fn = rb.Function([x], rb.op.nn.relu(x))
    with rb.op.attr_scope():
        rb.op.register_op_attr("nn.relu", "FTypeRelation",
                               lambda types, attrs: rb.ir.TensorType(types[0].shape[::-1], "float32"),
                               level=11)
        assert rb.ir.type_infer.infer_expr(fn.body) == rb.ir.TensorType((5, 2), "float32")
    assert rb.ir.type_infer.infer_expr(rb.op.nn.relu(x)) == rb.ir.TensorType((2, 5), "float32")
