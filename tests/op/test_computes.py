"""Operators' tensor-expression computes against their numpy references.

Each compute is built on small random shapes and attrs, lowered with the default schedule, run by
the loop-IR evaluator and compared with the op's ``reference`` (whose semantics the other op tests
check against numpy formulas). A test checks that every non-OPAQUE op has a compute.
"""

import numpy as np
import pytest

from relaybench import te
from relaybench.ir import Tuple, var
from relaybench.ir.type_infer import infer_expr
from relaybench.ir.types import TupleType
from relaybench.op.registry import OpCaller, OpPattern, get_opdef, list_ops

f32, f64, i32, b = "float32", "float64", "int32", "bool"
RNG = np.random.default_rng(5)


def _random(shape, dtype, positive=False, nonzero=False):
    if dtype == "bool":
        return RNG.random(shape) < 0.5
    if dtype.startswith("int"):
        lo = 1 if positive else -9
        a = RNG.integers(lo, 10, size=shape).astype(dtype)
        if nonzero:
            a[a == 0] = 3
        return a
    a = RNG.uniform(0.1 if positive else -3.0, 3.0, size=shape).astype(dtype)
    if nonzero:
        a[np.abs(a) < 0.1] = 0.5
    return a


def run_compute(name, inputs, attrs=None, tuple_input=False, positive=False, nonzero=False,
                arrays=None):
    """Build, lower and evaluate ``name``'s compute on ``inputs`` ((shape, dtype) pairs); return
    (results, the reference's results), each a list of arrays."""
    opdef = get_opdef(name)
    assert opdef.compute is not None, f"{name} has no compute"
    vs = [var(f"x{k}", shape=s, dtype=d) for k, (s, d) in enumerate(inputs)]
    args = [Tuple(vs)] if tuple_input else vs
    call = OpCaller(opdef)(*args, **(attrs or {}))
    out_type = infer_expr(call)
    holders = [te.placeholder(s, d, name=f"x{k}") for k, (s, d) in enumerate(inputs)]
    out = opdef.compute([holders] if tuple_input else holders, call.attrs, out_type)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    func = te.lower(outs, holders, name=name.replace(".", "_"))
    if arrays is None:
        arrays = [_random(s, d, positive, nonzero and k == 1) for k, (s, d) in enumerate(inputs)]
    fields = out_type.fields if isinstance(out_type, TupleType) else (out_type,)
    results = [np.empty(tuple(int(d) for d in t.shape), t.dtype) for t in fields]
    te.evaluate(func, *arrays, *results)
    ref = opdef.reference(*([list(arrays)] if tuple_input else arrays), call.attrs)
    refs = list(ref) if isinstance(ref, (list, tuple)) else [ref]
    return results, [np.asarray(r) for r in refs]


def check(name, inputs, attrs=None, **kw):
    results, refs = run_compute(name, inputs, attrs, **kw)
    assert len(results) == len(refs)
    for got, want in zip(results, refs):
        assert got.shape == want.shape, (name, got.shape, want.shape)
        assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
        if got.dtype.kind == "f":
            # float32 sums lose absolute precision in proportion to the values' scale
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * max(1.0, float(np.abs(want).max(initial=0))),
                                       err_msg=name)
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)


# ---------------------------------------------------------------------------------------------
# Elementwise and broadcasting

BROADCAST_SHAPES = [((2, 3), (2, 3)), ((2, 1, 3), (4, 1)), ((3,), ()), ((), (2, 2))]
ARITH = ["add", "subtract", "multiply", "divide", "floor_divide", "mod", "floor_mod", "maximum",
         "minimum"]


@pytest.mark.parametrize("name", ARITH)
@pytest.mark.parametrize("dtype", [f32, i32])
def test_arithmetic(name, dtype):
    for lhs, rhs in BROADCAST_SHAPES:
        check(name, [(lhs, dtype), (rhs, dtype)], nonzero=True)


def test_power_float():
    check("power", [((2, 3), f32), ((3,), f32)], positive=True)


@pytest.mark.parametrize("name", ["equal", "not_equal", "less", "less_equal", "greater",
                                  "greater_equal"])
def test_comparisons_give_bool(name):
    a = np.array([[1, 2, 3], [3, 2, 1]], "int32")
    c = np.array([2, 2, 2], "int32")
    results, refs = run_compute(name, [((2, 3), i32), ((3,), i32)], arrays=[a, c])
    assert results[0].dtype == np.bool_
    np.testing.assert_array_equal(results[0], refs[0])
    check(name, [((2, 1), f32), ((1, 3), f32)])


@pytest.mark.parametrize("name", ["logical_and", "logical_or", "logical_xor"])
def test_logical_binary(name):
    check(name, [((2, 3), b), ((3,), b)])


@pytest.mark.parametrize("name", ["negative", "abs", "exp", "tanh", "sigmoid", "erf", "floor",
                                  "ceil"])
def test_unary_float(name):
    check(name, [((2, 3), f32)])


@pytest.mark.parametrize("name", ["log", "sqrt", "rsqrt"])
def test_unary_positive(name):
    check(name, [((2, 3), f32)], positive=True)


def test_round_halves_away_from_zero():
    x = np.array([-2.5, -1.5, -0.5, -0.3, 0.5, 1.5, 2.5, 2.4], "float32")
    results, refs = run_compute("round", [((8,), f32)], arrays=[x])
    np.testing.assert_array_equal(results[0], [-3, -2, -1, 0, 1, 2, 3, 2])
    np.testing.assert_array_equal(results[0], refs[0])


@pytest.mark.parametrize("name", ["negative", "abs", "round", "floor", "ceil"])
def test_unary_int(name):
    check(name, [((2, 3), i32)])


def test_logical_not():
    check("logical_not", [((2, 3), b)])


def test_clip():
    check("clip", [((2, 3), f32)], {"a_min": -1.0, "a_max": 1.5})
    check("clip", [((2, 3), i32)], {"a_min": -2.5, "a_max": 4.5})


def test_cast():
    check("cast", [((2, 3), f32)], {"dtype": "int32"})
    check("cast", [((2, 3), i32)], {"dtype": "float64"})
    x = np.array([0.0, 0.5, -2.0], "float32")
    results, refs = run_compute("cast", [((3,), f32)], {"dtype": "bool"}, arrays=[x])
    np.testing.assert_array_equal(results[0], [False, True, True])
    check("cast_like", [((2, 3), f32), ((1,), i32)])


def test_where():
    check("where", [((2, 3), b), ((2, 3), f32), ((3,), f32)])
    check("where", [((3,), i32), ((2, 1), f32), ((), f32)])


def test_initializers():
    check("zeros", [], {"shape": (2, 3), "dtype": "int32"})
    check("ones", [], {"shape": (3,), "dtype": "float32"})
    check("full", [((), f32)], {"shape": (2, 2)})
    check("full", [((), f32)], {"shape": (2,), "dtype": "int32"})
    check("zeros_like", [((2, 3), f32)])
    check("ones_like", [((2,), i32)])
    check("full_like", [((2, 3), f32), ((), f32)])


def test_activations_and_bias():
    check("nn.relu", [((2, 3), f32)])
    check("nn.leaky_relu", [((2, 3), f32)], {"alpha": 0.1})
    check("nn.prelu", [((2, 3, 2), f32), ((3,), f32)])
    check("nn.prelu", [((2, 3), f32), ((3,), f32)], {"axis": -1})
    check("nn.bias_add", [((2, 3, 2), f32), ((3,), f32)])
    check("nn.bias_add", [((2, 4), f32), ((4,), f32)], {"axis": -1})


# ---------------------------------------------------------------------------------------------
# Injective transforms

def test_reshape_family():
    check("reshape", [((2, 3, 2), f32)], {"newshape": (3, 4)})
    check("reshape", [((2, 3, 2), f32)], {"newshape": (0, -1)})
    check("reshape", [((6,), i32)], {"newshape": (1, 2, 3)})
    check("expand_dims", [((2, 3), f32)], {"axis": 1, "num_newaxis": 2})
    check("squeeze", [((2, 1, 3, 1), f32)])
    check("squeeze", [((2, 1, 3, 1), f32)], {"axis": (3,)})
    check("nn.batch_flatten", [((2, 3, 2), f32)])


def test_transpose():
    check("transpose", [((2, 3, 4), f32)])
    check("transpose", [((2, 3, 4), f32)], {"axes": (1, -1, 0)})


def test_concatenate_stack_split():
    check("concatenate", [((2, 1), f32), ((2, 3), f32), ((2, 2), f32)], {"axis": 1},
          tuple_input=True)
    check("concatenate", [((1, 2), i32), ((2, 2), i32)], {"axis": -2}, tuple_input=True)
    check("stack", [((2, 3), f32), ((2, 3), f32), ((2, 3), f32)], {"axis": 1}, tuple_input=True)
    check("stack", [((3,), f32), ((3,), f32)], {"axis": -1}, tuple_input=True)
    check("split", [((2, 6), f32)], {"indices_or_sections": 3, "axis": 1})
    check("split", [((5, 2), f32)], {"indices_or_sections": (1, 3), "axis": 0})


def test_broadcast_tile_repeat():
    check("broadcast_to", [((3, 1), f32)], {"shape": (2, 3, 4)})
    check("tile", [((2, 3), f32)], {"reps": (2, 1, 2)})
    check("tile", [((2, 3), f32)], {"reps": (2,)})
    check("repeat", [((2, 3), f32)], {"repeats": 2, "axis": -1})


# ---------------------------------------------------------------------------------------------
# Reductions

@pytest.mark.parametrize("name", ["sum", "max", "min", "mean"])
def test_reductions(name):
    check(name, [((2, 3, 4), f32)])
    check(name, [((2, 3, 4), f32)], {"axis": 1})
    check(name, [((2, 3, 4), f32)], {"axis": (0, -1), "keepdims": True})
    check(name, [((2, 3, 4), f32)], {"axis": 1, "exclude": True})
    check(name, [((2, 3), i32)], {"axis": 0})


# ---------------------------------------------------------------------------------------------
# Coverage

def test_every_non_opaque_op_has_a_compute():
    # ops named testing.* are registered by other tests of the registry, not by the library
    lacking = {name for name in list_ops() if not name.startswith("testing.")
               and get_opdef(name).pattern != OpPattern.OPAQUE and get_opdef(name).compute is None}
    assert lacking == set()


def test_bool_reductions():
    check("all", [((2, 3), b)], {"axis": 1})
    check("any", [((2, 3), b)])
    x = np.array([[True, True], [False, True]])
    results, _ = run_compute("all", [((2, 2), b)], {"axis": 1}, arrays=[x])
    np.testing.assert_array_equal(results[0], [True, False])


# ---------------------------------------------------------------------------------------------
# Anchors: padding, matrix products, convolution, pooling, softmax

def test_pad():
    check("nn.pad", [((2, 3), f32), ((), f32)], {"pad_width": ((1, 0), (2, 1))})
    for mode in ("edge", "reflect"):
        check("nn.pad", [((3, 4), f32), ((), f32)],
              {"pad_width": ((1, 2), (2, 1)), "pad_mode": mode})


def test_reshape_like():
    check("reshape_like", [((2, 3, 2), f32), ((4, 3), f32)])


def test_matrix_products():
    check("nn.dense", [((2, 5), f32), ((3, 5), f32)])
    check("nn.dense", [((2, 2, 4), i32), ((3, 4), i32)])
    check("nn.matmul", [((2, 4), f32), ((4, 3), f32)])
    check("nn.matmul", [((4, 2), f32), ((3, 4), f32)], {"transpose_a": True, "transpose_b": True})
    check("nn.batch_matmul", [((2, 3, 4), f32), ((2, 5, 4), f32)])
    check("nn.batch_matmul", [((1, 4, 3), f32), ((2, 4, 5), f32)],
          {"transpose_a": True, "transpose_b": False})


CONV_CASES = [
    ((1, 3, 5, 5), (4, 3, 3, 3), {}),
    ((1, 2, 6, 5), (3, 2, 3, 2), {"strides": (2, 1), "padding": (1, 0, 2, 1)}),
    ((2, 2, 7, 7), (2, 2, 3, 3), {"dilation": (2, 2), "padding": (1, 1)}),
    ((1, 4, 5, 5), (6, 2, 3, 3), {"groups": 2, "padding": (1, 1)}),
    ((1, 3, 5, 5), (6, 1, 3, 3), {"groups": 3, "padding": (1, 1), "strides": (2, 2)}),  # depthwise
]


@pytest.mark.parametrize("data, weight, attrs", CONV_CASES)
def test_conv2d_nchw(data, weight, attrs):
    check("nn.conv2d", [(data, f32), (weight, f32)], attrs)


@pytest.mark.parametrize("data_layout, kernel_layout, out_layout, data, weight, attrs", [
    ("NHWC", "HWIO", "", (1, 2, 6, 5), (3, 2, 3, 2), {"strides": (2, 1), "padding": (1, 0, 2, 1)}),
    ("NHWC", "HWOI", "", (1, 4, 5, 5), (6, 2, 3, 3), {"groups": 2, "padding": (1, 1)}),
    ("NCHW", "OIHW", "NHWC", (1, 3, 5, 5), (4, 3, 3, 3), {}),
    ("NCHW4c", "OIHW4i4o", "", (1, 8, 5, 5), (8, 8, 3, 3), {"padding": (1, 1), "strides": (2, 2)}),
    ("NCHW4c", "OIHW4i2o", "NCHW2c", (1, 8, 4, 4), (4, 8, 3, 3), {"padding": (1, 1)}),
    ("NCHW4c", "OIHW2i4o", "", (1, 8, 5, 5), (8, 4, 3, 3), {"groups": 2, "dilation": (2, 1)}),
])
def test_conv2d_layouts(data_layout, kernel_layout, out_layout, data, weight, attrs):
    from relaybench.ir.layout import Layout
    check("nn.conv2d", [(Layout("NCHW").convert_shape(data, data_layout), f32),
                        (Layout("OIHW").convert_shape(weight, kernel_layout), f32)],
          dict(attrs, data_layout=data_layout, kernel_layout=kernel_layout, out_layout=out_layout))


@pytest.mark.parametrize("data, weight, attrs", [
    ((1, 2, 3, 3), (2, 3, 3, 3), {}),
    ((1, 2, 3, 4), (2, 3, 3, 2), {"strides": (2, 2), "padding": (1, 0, 0, 1)}),
    ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": (2, 1), "padding": (1, 1), "output_padding": (1, 0)}),
    ((1, 4, 3, 3), (4, 1, 2, 2), {"groups": 2, "dilation": (2, 1)}),
])
def test_conv2d_transpose(data, weight, attrs):
    check("nn.conv2d_transpose", [(data, f32), (weight, f32)], attrs)
    check("nn.conv2d_transpose", [((data[0], data[2], data[3], data[1]), f32), (weight, f32)],
          dict(attrs, data_layout="NHWC"))


POOL_CASES = [
    {"pool_size": (2, 2), "strides": (2, 2)},
    {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1)},
    {"pool_size": (3, 2), "strides": (2, 2), "padding": (1, 0, 0, 1), "ceil_mode": True},
    {"pool_size": (2, 2), "dilation": (2, 1), "padding": (1, 1)},
]


@pytest.mark.parametrize("attrs", POOL_CASES)
def test_pools(attrs):
    check("nn.max_pool2d", [((1, 2, 5, 6), f32)], attrs)
    check("nn.avg_pool2d", [((1, 2, 5, 6), f32)], attrs)
    check("nn.avg_pool2d", [((1, 2, 5, 6), f32)], dict(attrs, count_include_pad=True))


@pytest.mark.parametrize("layout, shape", [("NHWC", (1, 5, 6, 2)), ("NCHW4c", (1, 2, 5, 6, 4))])
def test_pools_in_other_layouts(layout, shape):
    for attrs in POOL_CASES[1:3]:
        for name in ("nn.max_pool2d", "nn.avg_pool2d"):
            check(name, [(shape, f32)], dict(attrs, layout=layout))
    check("nn.global_avg_pool2d", [(shape, f32)], {"layout": layout})
    check("nn.global_max_pool2d", [(shape, f32)], {"layout": layout})


@pytest.mark.parametrize("layout, shape, out_layout", [("NHWC", (1, 5, 6, 4), "NCHW"),
                                                       ("NCHW", (1, 4, 5, 6), "NCHW2c"),
                                                       ("NCHW2c", (1, 2, 5, 6, 2), "NHWC")])
def test_pools_write_out_layout(layout, shape, out_layout):
    # the relation accepts an out_layout other than layout; the compute rearranges its result
    attrs = {"layout": layout, "out_layout": out_layout}
    for name in ("nn.max_pool2d", "nn.avg_pool2d"):
        check(name, [(shape, f32)], dict(POOL_CASES[1], **attrs))
    for name in ("nn.global_avg_pool2d", "nn.global_max_pool2d"):
        check(name, [(shape, f32)], attrs)
    check("nn.adaptive_avg_pool2d", [(shape, f32)], dict(attrs, output_size=(2, 3)))


def test_global_pools():
    check("nn.global_avg_pool2d", [((2, 3, 3, 4), f32)])
    check("nn.global_max_pool2d", [((2, 3, 3, 4), f32)])
    check("nn.global_avg_pool2d", [((1, 2, 3, 3), i32)])


@pytest.mark.parametrize("name", ["nn.softmax", "nn.log_softmax"])
def test_softmax(name):
    check(name, [((2, 5), f32)])
    check(name, [((2, 3, 4), f32)], {"axis": 1})
    check(name, [((4,), f32)])


# ---------------------------------------------------------------------------------------------
# Slices, gathers, layouts, arg-reductions, variance

def test_strided_slice():
    check("strided_slice", [((5, 6), f32)], {"begin": (1, -2), "end": (4, 0), "strides": (2, -1)})
    check("strided_slice", [((4, 3, 2), f32)], {"begin": (1,), "end": (3,), "axes": (1,)})
    check("strided_slice", [((5, 4), i32)], {"begin": (1, 0), "end": (2, -1), "slice_mode": "size"})


def test_take():
    data = _random((3, 4), f32)
    idx = np.array([[0, 3], [-2, 7]], "int32")
    for mode in ("clip", "wrap"):
        for axis in (None, 0, 1):
            results, refs = run_compute("take", [((3, 4), f32), ((2, 2), i32)],
                                        {"axis": axis, "mode": mode}, arrays=[data, idx])
            np.testing.assert_array_equal(results[0], refs[0])
    data = _random((2, 3, 4), f32)
    idx = np.array([[0, 2], [1, 1]], "int64")
    results, refs = run_compute("take", [((2, 3, 4), f32), ((2, 2), "int64")],
                                {"axis": 1, "batch_dims": 1}, arrays=[data, idx])
    np.testing.assert_array_equal(results[0], refs[0])


@pytest.mark.parametrize("shape, src, dst", [
    ((1, 8, 2, 3), "NCHW", "NCHW4c"),
    ((1, 2, 2, 3, 4), "NCHW4c", "NCHW"),
    ((1, 2, 2, 3, 4), "NCHW4c", "NCHW2c"),
    ((8, 4, 3, 3), "OIHW", "OIHW2i4o"),
    ((2, 2, 3, 3, 2, 4), "OIHW2i4o", "OIHW"),
    ((1, 4, 2, 3), "NCHW", "NHWC"),
])
def test_layout_transform(shape, src, dst):
    check("layout_transform", [(shape, f32)], {"src_layout": src, "dst_layout": dst})


def test_one_hot():
    idx = np.array([[0, 2], [3, -1]], "int32")
    for axis in (-1, 0, 1):
        results, refs = run_compute("one_hot", [((2, 2), i32), ((), f32), ((), f32)],
                                    {"depth": 3, "axis": axis},
                                    arrays=[idx, np.full((), 5.0, "float32"),
                                            np.zeros((), "float32")])
        np.testing.assert_array_equal(results[0], refs[0])


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_reductions(name):
    x = np.array([[1, 3, 3, 0], [2, 2, 1, 2], [0, 0, 0, 0]], "int32")
    for attrs in ({"axis": 1}, {"axis": 0}, {}, {"axis": 1, "select_last_index": True},
                  {"axis": 1, "keepdims": True}):
        results, refs = run_compute(name, [((3, 4), i32)], attrs, arrays=[x])
        np.testing.assert_array_equal(results[0], refs[0])
        assert results[0].dtype == np.int32
    check(name, [((2, 3, 4), f32)], {"axis": (0, 2)})


def test_variance():
    x = _random((2, 3, 4), f32)
    for attrs in ({"axis": 1}, {"axis": (0, 2), "unbiased": True}, {"axis": 2, "keepdims": True}):
        m = x.mean(axis=attrs["axis"], keepdims=True).astype("float32")
        results, refs = run_compute("variance", [((2, 3, 4), f32), (m.shape, f32)], attrs,
                                    arrays=[x, m])
        np.testing.assert_allclose(results[0], refs[0], rtol=1e-5,
                                   atol=1e-6 * max(1.0, float(np.abs(refs[0]).max(initial=0))))


def test_adaptive_avg_pool2d():
    check("nn.adaptive_avg_pool2d", [((1, 2, 5, 7), f32)], {"output_size": (3, 2)})
    check("nn.adaptive_avg_pool2d", [((1, 2, 4, 4), f32)], {"output_size": (2, None)})
    check("nn.adaptive_avg_pool2d", [((1, 1, 5, 3), i32)], {"output_size": (2, 2)})


@pytest.mark.parametrize("layout, shape", [("NHWC", (1, 5, 7, 3)), ("NCHW4c", (1, 2, 5, 7, 4)),
                                           ("HWNC", (5, 7, 2, 3))])
def test_adaptive_avg_pool2d_in_other_layouts(layout, shape):
    check("nn.adaptive_avg_pool2d", [(shape, f32)], {"output_size": (3, 2), "layout": layout})
    check("nn.adaptive_avg_pool2d", [(shape, i32)], {"output_size": (2, None), "layout": layout})


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod", "argmax", "argmin"])
def test_reductions_over_no_axis(name):
    check(name, [((), f32)])
    check(name, [((2, 3), i32)], {"axis": (0, 1), "exclude": True})
    check(name, [((2, 3), f32)], {"axis": (-1, 0), "exclude": True, "keepdims": True})


def test_batch_norm():
    c = 3
    x = _random((2, c, 2), f32)
    gamma, beta, mean = (_random((c,), f32) for _ in range(3))
    var = _random((c,), f32, positive=True)
    ins = [((2, c, 2), f32)] + [((c,), f32)] * 4
    for attrs in ({}, {"center": False, "scale": False, "epsilon": 1e-3}):
        results, refs = run_compute("nn.batch_norm", ins, attrs, arrays=[x, gamma, beta, mean, var])
        for got, want in zip(results, refs):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * max(1.0, float(np.abs(want).max(initial=0))))


# ---------------------------------------------------------------------------------------------
# Shifts, prod, resize2d, and the OPAQUE normalizations that have computes

@pytest.mark.parametrize("name", ["left_shift", "right_shift"])
@pytest.mark.parametrize("dtype", [i32, "int8", "uint8", "int64"])
def test_shifts(name, dtype):
    bits = np.dtype(dtype).itemsize * 8
    lo = 0 if dtype.startswith("u") else -50
    x = RNG.integers(lo, 100, size=(2, 5)).astype(dtype)
    amount = RNG.integers(0, bits, size=(5,)).astype(dtype)
    results, refs = run_compute(name, [((2, 5), dtype), ((5,), dtype)], arrays=[x, amount])
    want = (np.left_shift if name == "left_shift" else np.right_shift)(x, amount)
    np.testing.assert_array_equal(results[0], want)
    np.testing.assert_array_equal(results[0], refs[0])


def test_prod():
    x = RNG.uniform(0.5, 1.5, size=(2, 3, 4)).astype(f32)
    for attrs in ({}, {"axis": 1}, {"axis": (0, -1), "keepdims": True},
                  {"axis": 1, "exclude": True}):
        results, refs = run_compute("prod", [((2, 3, 4), f32)], attrs, arrays=[x])
        np.testing.assert_allclose(results[0], refs[0], rtol=1e-5)
    xi = RNG.integers(-3, 4, size=(2, 3, 4)).astype("int8")    # int8 products wrap, as numpy's
    results, refs = run_compute("prod", [((2, 3, 4), "int8")], {"axis": 2}, arrays=[xi])
    np.testing.assert_array_equal(results[0], np.prod(xi, axis=2, dtype="int8"))
    np.testing.assert_array_equal(results[0], refs[0])


@pytest.mark.parametrize("method", ["nearest_neighbor", "linear", "cubic"])
@pytest.mark.parametrize("mode", ["half_pixel", "align_corners", "asymmetric",
                                  "pytorch_half_pixel", "tf_half_pixel_for_nn",
                                  "tf_crop_and_resize"])
def test_resize2d(method, mode):
    attrs = {"size": (5, 3), "method": method, "coordinate_transformation_mode": mode}
    if mode == "tf_crop_and_resize":
        attrs.update(roi=(0.1, -0.2, 0.9, 1.1), extrapolation_value=-1.0)
    check("image.resize2d", [((1, 2, 3, 4), f32)], attrs)


def test_resize2d_rounding_layouts_and_dtypes():
    for rounding in ("round", "round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
        check("image.resize2d", [((1, 1, 4, 6), f32)],
              {"size": (8, 9), "method": "nearest_neighbor", "rounding_method": rounding,
               "coordinate_transformation_mode": "asymmetric"})
    check("image.resize2d", [((1, 1, 4, 3), f32)], {"size": (3, 5), "method": "cubic",
                                                    "cubic_exclude": 1, "cubic_alpha": -0.75})
    check("image.resize2d", [((1, 4, 3, 2), f32)], {"size": (5, 4), "layout": "NHWC"})
    check("image.resize2d", [((1, 1, 3, 2, 4), f32)], {"size": (2, 3), "layout": "NCHW4c"})
    check("image.resize2d", [((1, 1, 3, 4), i32)], {"size": (5, 3)})
    check("image.resize2d", [((1, 1, 3, 4), i32)], {"size": (5, 3), "out_dtype": f32})
    # a hand-checked case: 2 -> 4 pixels, linear, half_pixel: coordinates -0.25, 0.25, 0.75, 1.25
    x = np.array([[[[0.0, 4.0]]]], "float32")
    results, _ = run_compute("image.resize2d", [((1, 1, 1, 2), f32)], {"size": (1, 4)},
                             arrays=[x])
    np.testing.assert_allclose(results[0].ravel(), [0.0, 1.0, 3.0, 4.0])


def test_layer_norm():
    x = _random((2, 3, 5), f32)
    gamma, beta = _random((5,), f32), _random((5,), f32)
    for attrs in ({}, {"center": False, "epsilon": 1e-3}, {"scale": False}):
        results, refs = run_compute("nn.layer_norm", [((2, 3, 5), f32), ((5,), f32), ((5,), f32)],
                                    attrs, arrays=[x, gamma, beta])
        np.testing.assert_allclose(results[0], refs[0], rtol=1e-5, atol=1e-5)
    g3, b3 = _random((3,), f32), _random((3,), f32)
    results, refs = run_compute("nn.layer_norm", [((2, 3, 5), f32), ((3,), f32), ((3,), f32)],
                                {"axis": 1}, arrays=[x, g3, b3])
    z = x.astype(np.float64)
    want = ((z - z.mean(1, keepdims=True)) / np.sqrt(z.var(1, keepdims=True) + 1e-5)
            * g3[:, None] + b3[:, None])
    np.testing.assert_allclose(results[0], want, rtol=1e-5, atol=1e-5)


def test_lrn():
    x = _random((1, 6, 2, 3), f32)
    for attrs in ({"size": 5, "alpha": 0.5}, {"size": 4, "alpha": 0.3, "beta": 0.5, "bias": 1.0},
                  {"size": 3, "axis": -1, "alpha": 0.2}):
        results, refs = run_compute("nn.lrn", [((1, 6, 2, 3), f32)], attrs, arrays=[x])
        np.testing.assert_allclose(results[0], refs[0], rtol=1e-5, atol=1e-6)
    # channel 0 of size 3: its neighbours are channels -1 (outside), 0 and 1
    results, _ = run_compute("nn.lrn", [((1, 6, 2, 3), f32)],
                             {"size": 3, "alpha": 0.3, "beta": 1.0, "bias": 1.0}, arrays=[x])
    s = x[0, 0] ** 2 + x[0, 1] ** 2
    np.testing.assert_allclose(results[0][0, 0], x[0, 0] / (1.0 + 0.1 * s), rtol=1e-5)


def test_dropout_is_identity_at_inference():
    x = _random((2, 3), f32)
    results, refs = run_compute("nn.dropout", [((2, 3), f32)], {"rate": 0.4}, arrays=[x])
    np.testing.assert_array_equal(results[0], x)
    np.testing.assert_array_equal(results[1], np.ones_like(x))
