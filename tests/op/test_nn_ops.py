"""The nn.* operators: results through the interpreter against formulas written here, shape
relations (also property-based), errors, pattern kinds and the text format.

Every expected value below is computed in this file, by plain loops over tiny shapes or by a
numpy formula, or written out by hand; none comes from an operator's own reference.
"""

import doctest
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import relaybench as rb
from relaybench import op
from relaybench.errors import TypeInferenceError
from relaybench.ir import ANY, Function, IRModule, SymVar, Var, var
from relaybench.ir.symbolic import floordiv
from relaybench.ir.type_infer import infer_expr
from relaybench.ir.types import IncompleteType, TensorType, TupleType
from relaybench.op.registry import OpPattern, get_opdef

DTYPES = ["float32", "float64"]
n, h, w_ = SymVar("n"), SymVar("h"), SymVar("w")


def T(*shape, dtype="float32"):
    return TensorType(shape, dtype)


def v(name, *shape, dtype="float32"):
    return var(name, shape=shape, dtype=dtype)


def raises(message):
    """pytest.raises for a TypeInferenceError whose text starts with ``message``."""
    return pytest.raises(TypeInferenceError, match="^" + re.escape(message))


def run(make, *arrays):
    """``@main(p0, p1, ...) = make(p0, p1, ...)`` over parameters typed like ``arrays``, run by the
    interpreter; checks that each result has the shape and dtype type inference gave it."""
    params = [var(f"p{i}", shape=a.shape, dtype=a.dtype.name) for i, a in enumerate(arrays)]
    mod = IRModule.from_expr(Function(params, make(*params)))
    executor = rb.create_executor("interpreter", mod=mod)
    out = executor.evaluate()(*arrays)
    ty = executor.mod["main"].body.checked_type
    for value, t in (zip(out, ty.fields) if isinstance(ty, TupleType) else [(out, ty)]):
        assert value.shape == t.shape and value.dtype.name == t.dtype, (value.shape, value.dtype, t)
    return out


def rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def close(got, expected, dtype):
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)


# ---- layouts, written out with reshape/transpose (independent of relaybench.ir.layout) --------

def to_nhwc(x):
    return x.transpose(0, 2, 3, 1)


def from_nhwc(x):
    return x.transpose(0, 3, 1, 2)


def to_nchwc(x, b):
    n_, c, hh, ww = x.shape
    return x.reshape(n_, c // b, b, hh, ww).transpose(0, 1, 3, 4, 2)


def from_nchwc(x):
    n_, cb, hh, ww, b = x.shape
    return x.transpose(0, 1, 4, 2, 3).reshape(n_, cb * b, hh, ww)


def to_hwio(k):
    return k.transpose(2, 3, 1, 0)


def to_oihwio(k, bi, bo):
    o, i, kh, kw = k.shape
    return k.reshape(o // bo, bo, i // bi, bi, kh, kw).transpose(0, 2, 4, 5, 3, 1)


# ---- direct loop formulas -------------------------------------------------------------------

def loop_conv2d(x, k, stride=(1, 1), pad=(0, 0, 0, 0), dil=(1, 1), groups=1):
    """NCHW x OIHW, one output element at a time (float64)."""
    N, C, H, W = x.shape
    O, I, KH, KW = k.shape
    pt, pl, pb, pr = pad
    OH = (H + pt + pb - (KH - 1) * dil[0] - 1) // stride[0] + 1
    OW = (W + pl + pr - (KW - 1) * dil[1] - 1) // stride[1] + 1
    out = np.zeros((N, O, OH, OW))
    per_group = O // groups
    for b in range(N):
        for o in range(O):
            g = o // per_group
            for y in range(OH):
                for z in range(OW):
                    acc = 0.0
                    for c in range(I):
                        for i in range(KH):
                            for j in range(KW):
                                r, s = y * stride[0] + i * dil[0] - pt, z * stride[1] + j * dil[1] - pl
                                if 0 <= r < H and 0 <= s < W:
                                    acc += float(x[b, g * I + c, r, s]) * float(k[o, c, i, j])
                    out[b, o, y, z] = acc
    return out


def loop_conv2d_transpose(x, k, stride=(1, 1), pad=(0, 0, 0, 0), dil=(1, 1), out_pad=(0, 0), groups=1):
    """NCHW x IOHW: every input element scatters its kernel into the output (float64)."""
    N, C, H, W = x.shape
    _, OG, KH, KW = k.shape
    pt, pl, pb, pr = pad
    OH = (H - 1) * stride[0] + (KH - 1) * dil[0] + 1 - pt - pb + out_pad[0]
    OW = (W - 1) * stride[1] + (KW - 1) * dil[1] + 1 - pl - pr + out_pad[1]
    out = np.zeros((N, OG * groups, OH, OW))
    cg = C // groups
    for b in range(N):
        for c in range(C):
            g = c // cg
            for y in range(H):
                for z in range(W):
                    for o in range(OG):
                        for i in range(KH):
                            for j in range(KW):
                                r, s = y * stride[0] + i * dil[0] - pt, z * stride[1] + j * dil[1] - pl
                                if 0 <= r < OH and 0 <= s < OW:
                                    out[b, g * OG + o, r, s] += float(x[b, c, y, z]) * float(k[c, o, i, j])
    return out


def loop_pool2d(x, kind, size, stride=(1, 1), pad=(0, 0, 0, 0), dil=(1, 1), ceil=False, include_pad=False):
    """NCHW pooling, one window at a time. A window's taps on the input are pooled; for the average,
    with include_pad, taps on the declared padding count in the divisor (as zeros). Relay's ceil_mode
    formula can place a last window wholly on the padding: its max is the dtype's lowest value (the
    padding value of Relay's kernels), its average 0."""
    N, C, H, W = x.shape
    pt, pl, pb, pr = pad
    ext = [(size[0] - 1) * dil[0] + 1, (size[1] - 1) * dil[1] + 1]
    rnd = math.ceil if ceil else math.floor
    OH = rnd((H + pt + pb - ext[0]) / stride[0]) + 1
    OW = rnd((W + pl + pr - ext[1]) / stride[1]) + 1
    out = np.zeros((N, C, OH, OW))
    for b in range(N):
        for c in range(C):
            for y in range(OH):
                for z in range(OW):
                    vals, count = [], 0
                    for i in range(size[0]):
                        for j in range(size[1]):
                            r, s = y * stride[0] + i * dil[0] - pt, z * stride[1] + j * dil[1] - pl
                            if 0 <= r < H and 0 <= s < W:
                                vals.append(float(x[b, c, r, s]))
                                count += 1
                            elif include_pad and -pt <= r < H + pb and -pl <= s < W + pr:
                                count += 1
                    if kind == "max":
                        out[b, c, y, z] = max(vals) if vals else np.finfo(x.dtype).min
                    else:
                        out[b, c, y, z] = sum(vals) / max(count, 1)
    return out


# =============================================================================================
# The registry entries

PATTERNS = {
    "nn.relu": OpPattern.ELEMWISE, "nn.leaky_relu": OpPattern.ELEMWISE, "nn.prelu": OpPattern.BROADCAST,
    "nn.bias_add": OpPattern.BROADCAST, "nn.conv2d": OpPattern.OUT_ELEMWISE_FUSABLE,
    "nn.conv2d_transpose": OpPattern.OUT_ELEMWISE_FUSABLE, "nn.dense": OpPattern.OUT_ELEMWISE_FUSABLE,
    "nn.batch_matmul": OpPattern.OUT_ELEMWISE_FUSABLE, "nn.matmul": OpPattern.OUT_ELEMWISE_FUSABLE,
    "nn.max_pool2d": OpPattern.OUT_ELEMWISE_FUSABLE, "nn.avg_pool2d": OpPattern.OUT_ELEMWISE_FUSABLE,
    "nn.global_avg_pool2d": OpPattern.OUT_ELEMWISE_FUSABLE, "nn.global_max_pool2d": OpPattern.OUT_ELEMWISE_FUSABLE,
    "nn.adaptive_avg_pool2d": OpPattern.OUT_ELEMWISE_FUSABLE, "nn.softmax": OpPattern.OUT_ELEMWISE_FUSABLE,
    "nn.log_softmax": OpPattern.OUT_ELEMWISE_FUSABLE, "nn.batch_norm": OpPattern.OUT_ELEMWISE_FUSABLE,
    "nn.layer_norm": OpPattern.OPAQUE, "nn.dropout": OpPattern.OPAQUE, "nn.pad": OpPattern.INJECTIVE,
    "nn.batch_flatten": OpPattern.INJECTIVE, "nn.lrn": OpPattern.OPAQUE,
}


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_registry_entry(name):
    d = get_opdef(name)
    assert d.pattern == PATTERNS[name]
    assert d.reference is not None and d.doc
    assert d.type_rel([IncompleteType()] * len(d.inputs), d.make_attrs({} if name != "nn.pad" else
                                                                       {"pad_width": ((0, 0),)})) is None


def test_attribute_defaults():
    defaults = {
        "nn.leaky_relu": {"alpha": 0.25},
        "nn.prelu": {"axis": 1},
        "nn.conv2d_transpose": {"strides": (1, 1), "padding": (0, 0, 0, 0), "output_padding": (0, 0),
                                "dilation": (1, 1), "groups": 1, "channels": None, "kernel_size": None,
                                "data_layout": "NCHW", "kernel_layout": "IOHW", "out_layout": "", "out_dtype": ""},
        "nn.batch_matmul": {"out_dtype": "", "transpose_a": False, "transpose_b": True},
        "nn.matmul": {"units": None, "out_dtype": "", "transpose_a": False, "transpose_b": False},
        "nn.max_pool2d": {"pool_size": (1, 1), "strides": (1, 1), "dilation": (1, 1), "padding": (0, 0, 0, 0),
                          "layout": "NCHW", "out_layout": "", "ceil_mode": False},
        "nn.global_avg_pool2d": {"layout": "NCHW", "out_layout": ""},
        "nn.adaptive_avg_pool2d": {"output_size": None, "layout": "NCHW", "out_layout": ""},
        "nn.softmax": {"axis": -1},
        "nn.log_softmax": {"axis": -1},
        "nn.batch_norm": {"axis": 1, "epsilon": 1e-5, "center": True, "scale": True},
        "nn.layer_norm": {"axis": -1, "epsilon": 1e-5, "center": True, "scale": True},
        "nn.dropout": {"rate": 0.5},
        "nn.lrn": {"size": 5, "axis": 1, "bias": 2.0, "alpha": 1e-5, "beta": 0.75},
        "nn.batch_flatten": {},
    }
    for name, expected in defaults.items():
        assert dict(get_opdef(name).make_attrs({})) == expected, name
    avg = dict(get_opdef("nn.avg_pool2d").make_attrs({}))
    assert avg.pop("count_include_pad") is False and avg == defaults["nn.max_pool2d"]
    assert dict(get_opdef("nn.pad").make_attrs({"pad_width": [[1, 2]]})) == {"pad_width": ((1, 2),),
                                                                             "pad_mode": "constant"}
    assert get_opdef("nn.adaptive_avg_pool2d").make_attrs({"output_size": 7}).output_size == (7, 7)
    assert get_opdef("nn.conv2d_transpose").make_attrs({"output_padding": 1, "strides": 2}).output_padding == (1, 1)


@pytest.mark.parametrize("name, attrs, message", [
    ("nn.max_pool2d", {"layout": "NCHW2h"}, "layout='NCHW2h' must have the axes H and W, and neither may be split"),
    ("nn.max_pool2d", {"layout": "NCW"}, "layout='NCW' must have the axes H and W"),
    ("nn.avg_pool2d", {"padding": (1, 2, 3)}, "padding must have 1 or 2 or 4 values"),
    ("nn.max_pool2d", {"ceil_mode": 2}, "ceil_mode must be True or False, got 2"),
    ("nn.max_pool2d", {"pool_size": 0}, "pool_size must be at least 1, got 0"),
    ("nn.conv2d_transpose", {"output_padding": 2, "strides": 2},
     "output_padding=(2, 2) must be smaller than the strides (2, 2)"),
    ("nn.conv2d_transpose", {"kernel_layout": "OIHQ"}, "kernel_layout='OIHQ' must have the axes O, I, H, W"),
    ("nn.dropout", {"rate": 1.0}, "rate must be in [0, 1), got 1.0"),
    ("nn.leaky_relu", {"alpha": "x"}, "alpha must be a number, got 'x'"),
    ("nn.pad", {"pad_width": (1, 2)}, "pad_width must be one (before, after) pair per axis"),
    ("nn.pad", {"pad_width": ((0, -1),)}, "pad_width must be at least 0, got -1"),
    ("nn.pad", {"pad_width": ((0, 1),), "pad_mode": "wrap"}, "pad_mode must be 'constant', 'edge' or 'reflect'"),
    ("nn.adaptive_avg_pool2d", {"output_size": (1, 2, 3)}, "output_size must have 1 or 2 values"),
    ("nn.batch_norm", {"epsilon": -1}, "epsilon must not be negative"),
    ("nn.lrn", {"size": 0}, "size must be at least 1, got 0"),
    ("nn.batch_matmul", {"transpose_a": "yes"}, "transpose_a must be True or False"),
])
def test_bad_attributes(name, attrs, message):
    with pytest.raises(ValueError) as info:
        get_opdef(name).make_attrs(attrs)
    assert str(info.value).startswith(f"{name}: {message}")


def test_module_examples():
    from relaybench.op import nn
    result = doctest.testmod(nn)
    assert result.failed == 0 and result.attempted >= 6


# =============================================================================================
# Activations and bias_add

@pytest.mark.parametrize("dtype", DTYPES)
def test_relu_leaky_relu_prelu(dtype):
    x = np.array([[-2.0, -0.5, 0.0], [0.5, 3.0, -4.0]], dtype)
    np.testing.assert_array_equal(run(op.nn.relu, x), [[0, 0, 0], [0.5, 3, 0]])
    np.testing.assert_array_equal(run(op.nn.leaky_relu, x), [[-0.5, -0.125, 0], [0.5, 3, -1]])
    np.testing.assert_array_equal(run(lambda a: op.nn.leaky_relu(a, alpha=0.5), x), [[-1, -0.25, 0], [0.5, 3, -2]])
    alpha = np.array([0.5, 2.0, 3.0], dtype)
    got = run(lambda a, s: op.nn.prelu(a, s, axis=-1), x, alpha)
    np.testing.assert_array_equal(got, [[-1, -1, 0], [0.5, 3, -12]])
    alpha = np.array([0.1, 10.0], dtype)
    np.testing.assert_allclose(run(lambda a, s: op.nn.prelu(a, s, axis=0), x, alpha),
                               [[-0.2, -0.05, 0], [0.5, 3, -40]], rtol=1e-6)


def test_prelu_and_bias_add_relations():
    av = Var("alpha")
    assert infer_expr(op.nn.prelu(v("x", n, 6, 4), av)) == T(n, 6, 4)
    assert av.checked_type == T(6)
    with raises("nn.prelu: alpha must be Tensor[(6), float32] (axis 1 of Tensor[(2, 6, 4), float32]), "
                "got Tensor[(4), float32]"):
        infer_expr(op.nn.prelu(v("x", 2, 6, 4), v("a", 4)))
    with raises("nn.prelu: alpha has dtype float64 but the data has float32"):
        infer_expr(op.nn.prelu(v("x", 2, 6, 4), v("a", 6, dtype="float64")))
    with raises("nn.bias_add: axis -4 is out of range for rank 3"):
        infer_expr(op.nn.bias_add(v("x", 2, 6, 4), v("b", 6), axis=-4))


@pytest.mark.parametrize("dtype", DTYPES)
def test_bias_add(dtype):
    x = np.zeros((2, 3, 2), dtype)
    b = np.array([1.0, 2.0, 3.0], dtype)
    got = run(op.nn.bias_add, x, b)
    assert got[1, :, 1].tolist() == [1, 2, 3] and got[0, 2, 0] == 3
    got = run(lambda a, c: op.nn.bias_add(a, c, axis=-1), np.zeros((2, 3), dtype), b)
    assert got.tolist() == [[1, 2, 3], [1, 2, 3]]


# =============================================================================================
# nn.conv2d

CONV_CASES = [
    # (N, C, H, W), (O, kh, kw), strides, padding (4), dilation, groups
    ((1, 4, 6, 6), (8, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    ((2, 4, 7, 6), (4, 3, 2), (2, 1), (1, 0, 2, 1), (1, 2), 1),
    ((1, 8, 7, 7), (8, 3, 3), (2, 2), (1, 1, 1, 1), (2, 2), 2),
    ((1, 8, 5, 6), (8, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 8),    # depthwise
    ((1, 4, 5, 5), (8, 3, 3), (1, 2), (2, 1, 0, 1), (1, 1), 4),    # depthwise, multiplier 2
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d_nchw_nhwc_and_blocked_layouts(case, dtype):
    (N, C, H, W), (O, kh, kw), strides, padding, dilation, groups = case
    rng = np.random.default_rng(len(str(case)))
    x = rand(rng, (N, C, H, W), dtype)
    k = rand(rng, (O, C // groups, kh, kw), dtype)
    expected = loop_conv2d(x, k, strides, padding, dilation, groups)
    attrs = dict(strides=strides, padding=padding, dilation=dilation, groups=groups)
    nchw = run(lambda a, b: op.nn.conv2d(a, b, **attrs), x, k)
    close(nchw, expected, dtype)
    nhwc = run(lambda a, b: op.nn.conv2d(a, b, data_layout="NHWC", kernel_layout="HWIO", **attrs),
               to_nhwc(x), to_hwio(k))
    close(from_nhwc(nhwc), expected, dtype)
    if groups == 1:
        blocked = run(lambda a, b: op.nn.conv2d(a, b, data_layout="NCHW4c", kernel_layout="OIHW4i4o", **attrs),
                      to_nchwc(x, 4), to_oihwio(k, 4, 4))
        close(from_nchwc(blocked), nchw, dtype)
    # NCHW data, NHWC and NCHW4c outputs
    close(from_nhwc(run(lambda a, b: op.nn.conv2d(a, b, out_layout="NHWC", **attrs), x, k)), expected, dtype)
    close(from_nchwc(run(lambda a, b: op.nn.conv2d(a, b, out_layout="NCHW4c", **attrs), x, k)), nchw, dtype)


def test_conv2d_blocked_grouped_and_mixed_layouts():
    rng = np.random.default_rng(3)
    x = rand(rng, (1, 8, 6, 5), "float64")
    k = rand(rng, (8, 4, 3, 3), "float64")
    expected = loop_conv2d(x, k, (1, 1), (1, 1, 1, 1), (1, 1), 2)
    got = run(lambda a, b: op.nn.conv2d(a, b, padding=1, groups=2, data_layout="NCHW4c", kernel_layout="OIHW2i4o",
                                        out_layout="NHWC"), to_nchwc(x, 4), to_oihwio(k, 2, 4))
    close(from_nhwc(got), expected, "float64")
    got = run(lambda a, b: op.nn.conv2d(a, b, padding=1, groups=2, data_layout="NHWC", kernel_layout="OIHW",
                                        out_layout="NCHW2c"), to_nhwc(x), k)
    close(from_nchwc(got), expected, "float64")


def test_conv2d_in_blocks_of_output_rows(monkeypatch):
    from relaybench.op import nn
    monkeypatch.setenv("RB_LOWERING_CACHE", "off")   # lower again with each block size
    monkeypatch.setattr(nn, "_IM2COL_BLOCK", 40)     # a block of one or two output rows
    rng = np.random.default_rng(6)
    x, k = rand(rng, (2, 4, 9, 7), "float64"), rand(rng, (6, 2, 3, 2), "float64")
    got = run(lambda a, b: op.nn.conv2d(a, b, padding=(1, 0, 2, 1), strides=(1, 2), groups=2), x, k)
    close(got, loop_conv2d(x, k, (1, 2), (1, 0, 2, 1), (1, 1), 2), "float64")
    monkeypatch.setattr(nn, "_IM2COL_BLOCK", 300)    # blocks of 3 rows of 96 elements, the last 1 row
    got = run(lambda a, b: op.nn.conv2d(a, b, padding=(1, 0, 2, 1), strides=(1, 2), groups=2), x, k)
    close(got, loop_conv2d(x, k, (1, 2), (1, 0, 2, 1), (1, 1), 2), "float64")


def test_conv2d_integer_out_dtype_accumulates_without_overflow():
    x = np.full((1, 3, 4, 4), 100, "int8")
    k = np.full((2, 3, 3, 3), -100, "int8")
    got = run(lambda a, b: op.nn.conv2d(a, b, padding=1, out_dtype="int32"), x, k)
    assert got.dtype == np.int32
    # a corner sees 2 x 2 taps per channel, an edge 2 x 3, the inside 3 x 3
    assert got[0, 0, 0, 0] == -10000 * 3 * 4 and got[0, 1, 0, 1] == -10000 * 3 * 6
    assert got[0, 0, 1, 1] == -10000 * 27
    xi = np.arange(2 * 3 * 5 * 5, dtype="int32").reshape(2, 3, 5, 5) - 70
    ki = np.arange(4 * 3 * 2 * 2, dtype="int32").reshape(4, 3, 2, 2) % 7 - 3
    got = run(lambda a, b: op.nn.conv2d(a, b, strides=2), xi, ki)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, loop_conv2d(xi, ki, (2, 2)).astype("int64"))


def test_conv2d_float16_out_float32():
    rng = np.random.default_rng(5)
    x, k = rand(rng, (1, 2, 4, 4), "float16"), rand(rng, (3, 2, 3, 3), "float16")
    got = run(lambda a, b: op.nn.conv2d(a, b, out_dtype="float32"), x, k)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, loop_conv2d(x, k), rtol=1e-5, atol=1e-5)


def test_conv2d_relations_in_blocked_layouts():
    y = op.nn.conv2d(v("x", 1, 2, 8, 8, 4), v("k", 4, 2, 3, 3, 4, 4), data_layout="NCHW4c",
                     kernel_layout="OIHW4i4o", padding=1)
    assert infer_expr(y) == T(1, 4, 8, 8, 4)
    kv = Var("k")
    y = op.nn.conv2d(v("x", n, 2, h, w_, 4), kv, channels=16, kernel_size=3, data_layout="NCHW4c",
                     kernel_layout="OIHW4i4o", strides=2)
    assert infer_expr(y) == T(n, 4, floordiv(h - 3, 2) + 1, floordiv(w_ - 3, 2) + 1, 4)
    assert kv.checked_type == T(4, 2, 3, 3, 4, 4)
    with raises("nn.conv2d: data has 8 input channels but the weight expects 12"):
        infer_expr(op.nn.conv2d(v("x", 1, 2, 8, 8, 4), v("k", 4, 3, 3, 3, 4, 4), data_layout="NCHW4c",
                                kernel_layout="OIHW4i4o"))
    with raises("nn.conv2d: weight Tensor[(4, 2, 3, 3, 4, 2), float32]: axis o of layout OIHW4i4o has extent 2 "
                "but its block factor is 4"):
        infer_expr(op.nn.conv2d(v("x", 1, 2, 8, 8, 4), v("k", 4, 2, 3, 3, 4, 2), data_layout="NCHW4c",
                                kernel_layout="OIHW4i4o"))


def test_conv_relations_with_unknown_or_symbolic_kernel_extents():
    kh = SymVar("kh")
    assert infer_expr(op.nn.conv2d(v("x", 1, 3, 8, 8), v("k", 8, 3, None, 3))) == T(1, 8, ANY, 6)
    assert infer_expr(op.nn.conv2d(v("x", 1, 3, 8, 8), v("k", 8, 3, kh, 3))) == T(1, 8, 9 - kh, 6)
    assert infer_expr(op.nn.conv2d(v("x", 1, None, 8, 8), v("k", 8, 2, 3, 3), groups=2)) == T(1, 8, 6, 6)
    assert infer_expr(op.nn.conv2d_transpose(v("x", 1, 3, 8, 8), v("k", 3, 2, None, 3))) == T(1, 2, ANY, 10)
    assert infer_expr(op.nn.conv2d_transpose(v("x", 1, 3, 8, 8), v("k", 3, 2, kh, 3), strides=2)) == \
        T(1, 2, kh + 14, 17)


conv_params = st.fixed_dictionaries({
    "n": st.integers(1, 2), "cb": st.integers(1, 3), "h": st.integers(1, 24), "w": st.integers(1, 24),
    "ob": st.integers(1, 3), "kh": st.integers(1, 5), "kw": st.integers(1, 5), "sh": st.integers(1, 4),
    "sw": st.integers(1, 4), "dh": st.integers(1, 3), "dw": st.integers(1, 3),
    "pad": st.lists(st.integers(0, 4), min_size=4, max_size=4),
})


@settings(max_examples=150, deadline=None)
@given(conv_params)
def test_conv2d_blocked_output_shape_agrees_with_the_formula(p):
    # NCHW4c data with C = 4 * cb, OIHW4i4o weight with O = 4 * ob: the shape in blocks
    pt, pl, pb, pr = p["pad"]
    y = op.nn.conv2d(v("x", p["n"], p["cb"], p["h"], p["w"], 4), v("k", p["ob"], p["cb"], p["kh"], p["kw"], 4, 4),
                     strides=(p["sh"], p["sw"]), padding=tuple(p["pad"]), dilation=(p["dh"], p["dw"]),
                     data_layout="NCHW4c", kernel_layout="OIHW4i4o")
    span_h = p["h"] + pt + pb - (p["kh"] - 1) * p["dh"] - 1
    span_w = p["w"] + pl + pr - (p["kw"] - 1) * p["dw"] - 1
    if span_h < 0 or span_w < 0:
        with raises("nn.conv2d: the kernel's"):
            infer_expr(y)
        return
    oh, ow = math.floor(span_h / p["sh"]) + 1, math.floor(span_w / p["sw"]) + 1
    assert infer_expr(y) == T(p["n"], p["ob"], oh, ow, 4)


def test_resnet50_sized_convolutions():
    """The reference handles ResNet-50's largest convolutions at batch 1 (a whole ResNet-50 runs
    through the interpreter in about a second); spot-check output pixels by direct sums."""
    rng = np.random.default_rng(0)
    cases = [((3, 224, 224), (64, 7, 7), 2, 3), ((64, 56, 56), (64, 3, 3), 1, 1), ((512, 7, 7), (512, 3, 3), 1, 1),
             ((1024, 14, 14), (2048, 1, 1), 2, 0)]
    d = get_opdef("nn.conv2d")
    for (c, hh, ww), (o, kh, kw), s, p in cases:
        x = rand(rng, (1, c, hh, ww), "float32")
        k = rand(rng, (o, c, kh, kw), "float32")
        y = d.reference(x, k, d.make_attrs({"strides": s, "padding": p}))
        oh = (hh + 2 * p - kh) // s + 1
        assert y.shape == (1, o, oh, oh) and y.dtype == np.float32
        xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (p, p), (p, p)))
        for oc, r, q in ((0, 0, 0), (o - 1, oh - 1, oh // 2), (o // 3, oh // 2, oh - 1)):
            direct = np.sum(xp[0, :, r * s:r * s + kh, q * s:q * s + kw] * k[oc])
            np.testing.assert_allclose(y[0, oc, r, q], direct, rtol=1e-4, atol=1e-3)


# =============================================================================================
# nn.conv2d_transpose

TRANSPOSE_CASES = [
    # (N, C, H, W), (O per group, kh, kw), strides, padding, output_padding, dilation, groups
    ((1, 3, 4, 4), (2, 3, 3), (1, 1), (0, 0, 0, 0), (0, 0), (1, 1), 1),
    ((2, 2, 3, 4), (3, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (1, 1), 1),
    ((1, 2, 3, 3), (2, 2, 3), (3, 2), (0, 1, 2, 0), (2, 0), (2, 1), 1),
    ((1, 4, 3, 3), (3, 3, 3), (2, 2), (1, 1, 1, 1), (0, 1), (1, 1), 2),
    ((1, 2, 4, 4), (1, 3, 3), (1, 1), (3, 3, 3, 3), (0, 0), (2, 2), 1),   # padding beyond the kernel: crops
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", TRANSPOSE_CASES)
def test_conv2d_transpose(case, dtype):
    (N, C, H, W), (OG, kh, kw), strides, padding, out_pad, dilation, groups = case
    rng = np.random.default_rng(len(str(case)))
    x = rand(rng, (N, C, H, W), dtype)
    k = rand(rng, (C, OG, kh, kw), dtype)
    expected = loop_conv2d_transpose(x, k, strides, padding, dilation, out_pad, groups)
    attrs = dict(strides=strides, padding=padding, output_padding=out_pad, dilation=dilation, groups=groups)
    close(run(lambda a, b: op.nn.conv2d_transpose(a, b, **attrs), x, k), expected, dtype)
    # NHWC data with an OIHW weight ([O, I, kh, kw]: the IOHW weight's first two axes swapped)
    got = run(lambda a, b: op.nn.conv2d_transpose(a, b, data_layout="NHWC", kernel_layout="OIHW", **attrs),
              to_nhwc(x), k.transpose(1, 0, 2, 3))
    close(from_nhwc(got), expected, dtype)


def test_conv2d_transpose_relations():
    y = op.nn.conv2d_transpose(v("x", 1, 16, 8, 8), v("k", 16, 4, 4, 4), strides=2, padding=1)
    assert infer_expr(y) == T(1, 4, 16, 16)      # (8 - 1) * 2 + 4 - 2
    kv = Var("k")
    y = op.nn.conv2d_transpose(v("x", n, 16, h, w_), kv, channels=8, kernel_size=3, strides=2, padding=1,
                               output_padding=1, groups=2)
    assert infer_expr(y) == T(n, 8, 2 * h, 2 * w_)
    assert kv.checked_type == T(16, 4, 3, 3)
    y = op.nn.conv2d_transpose(v("x", 1, h, w_, 16), v("k", 3, 3, 16, 8), data_layout="NHWC", kernel_layout="HWIO")
    assert infer_expr(y) == T(1, h + 2, w_ + 2, 8)
    with raises("nn.conv2d_transpose: data has 16 input channels but the weight expects 8"):
        infer_expr(op.nn.conv2d_transpose(v("x", 1, 16, 8, 8), v("k", 8, 4, 3, 3)))
    with raises("nn.conv2d_transpose: channels=6 but the weight gives 8 output channels (4 per group, 2 groups)"):
        infer_expr(op.nn.conv2d_transpose(v("x", 1, 16, 8, 8), v("k", 16, 4, 3, 3), groups=2, channels=6))
    with raises("nn.conv2d_transpose: the output's height would be -4: the padding (6) removes the whole output"):
        infer_expr(op.nn.conv2d_transpose(v("x", 1, 16, 1, 8), v("k", 16, 4, 2, 3), padding=3))


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 12), st.integers(1, 5), st.integers(1, 4), st.integers(1, 3), st.integers(0, 3),
       st.integers(0, 3))
def test_conv2d_transpose_shape_inverts_conv2d(size, k, s, d, pad, extra):
    """A conv2d_transpose maps a conv2d's output shape back to its input's (output_padding = the
    rows the conv2d's floor division dropped)."""
    eff = (k - 1) * d + 1
    if size + 2 * pad < eff:
        return
    conv = infer_expr(op.nn.conv2d(v("x", 1, 2, size, size + extra), v("k", 3, 2, k, k), strides=s, padding=pad,
                                   dilation=d))
    oh, ow = conv.shape[2:]
    rest = ((size + 2 * pad - eff) % s, (size + extra + 2 * pad - eff) % s)
    back = infer_expr(op.nn.conv2d_transpose(v("y", 1, 3, oh, ow), v("k2", 3, 2, k, k), strides=s, padding=pad,
                                             dilation=d, output_padding=rest))
    assert back == T(1, 2, size, size + extra)


# =============================================================================================
# nn.dense, nn.matmul, nn.batch_matmul

@pytest.mark.parametrize("dtype", DTYPES)
def test_dense(dtype):
    rng = np.random.default_rng(7)
    x, k = rand(rng, (2, 3, 5), dtype), rand(rng, (4, 5), dtype)
    expected = np.einsum("abk,uk->abu", x.astype(np.float64), k.astype(np.float64))
    close(run(op.nn.dense, x, k), expected, dtype)
    close(run(lambda a, b: op.nn.dense(a, b, units=4), x[0, 0], k), expected[0, 0], dtype)


def test_dense_int8_to_int32():
    x = np.full((2, 16), 127, "int8")
    k = np.full((3, 16), -128, "int8")
    got = run(lambda a, b: op.nn.dense(a, b, out_dtype="int32"), x, k)
    assert got.dtype == np.int32 and (got == 127 * -128 * 16).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ta, tb", [(False, False), (False, True), (True, False), (True, True)])
def test_matmul_and_batch_matmul(ta, tb, dtype):
    rng = np.random.default_rng(11)
    a = rand(rng, (2, 5, 3) if ta else (2, 3, 5), dtype)     # logically [2, 3, 5]
    b = rand(rng, (4, 5) if tb else (5, 4), dtype)           # logically [5, 4]
    la = a.swapaxes(-1, -2) if ta else a
    lb = b.T if tb else b
    expected = np.einsum("bik,kj->bij", la.astype(np.float64), lb.astype(np.float64))
    close(run(lambda p, q: op.nn.matmul(p, q, transpose_a=ta, transpose_b=tb), a, b), expected, dtype)
    yb = rand(rng, (2, 4, 5) if tb else (2, 5, 4), dtype)
    lyb = yb.swapaxes(-1, -2) if tb else yb
    expected = np.einsum("bik,bkj->bij", la.astype(np.float64), lyb.astype(np.float64))
    close(run(lambda p, q: op.nn.batch_matmul(p, q, transpose_a=ta, transpose_b=tb), a, yb), expected, dtype)
    # a batch of one broadcasts
    expected = np.einsum("ik,bkj->bij", la[0].astype(np.float64), lyb.astype(np.float64))
    close(run(lambda p, q: op.nn.batch_matmul(p, q, transpose_a=ta, transpose_b=tb), a[:1], yb), expected, dtype)


def test_matmul_relations():
    assert infer_expr(op.nn.matmul(v("a", n, 3, 5), v("b", 5, 7))) == T(n, 3, 7)
    assert infer_expr(op.nn.matmul(v("a", n, 5, 3), v("b", 7, 5), transpose_a=True, transpose_b=True)) == T(n, 3, 7)
    assert infer_expr(op.nn.matmul(v("a", 5), v("b", 5, 7))) == T(7)
    bv = Var("b")
    assert infer_expr(op.nn.matmul(v("a", 2, 5), bv, units=6)) == T(2, 6)
    assert bv.checked_type == T(5, 6)
    bv = Var("b")
    assert infer_expr(op.nn.matmul(v("a", 2, 5), bv, units=6, transpose_b=True)) == T(2, 6)
    assert bv.checked_type == T(6, 5)
    assert infer_expr(op.nn.matmul(v("a", 2, 5, dtype="int8"), v("b", 5, 3, dtype="int8"), out_dtype="int32")) == \
        T(2, 3, dtype="int32")
    with raises("nn.matmul: tensor_a Tensor[(2, 5), float32] has 5 features to reduce but tensor_b "
                "Tensor[(4, 7), float32] has 4"):
        infer_expr(op.nn.matmul(v("a", 2, 5), v("b", 4, 7)))
    with raises("nn.matmul: tensor_b Tensor[(5, 7), float32] gives 7 output features but units=3"):
        infer_expr(op.nn.matmul(v("a", 2, 5), v("b", 5, 7), units=3))
    with raises("nn.matmul: tensor_b must have rank 2, got Tensor[(1, 5, 7), float32]"):
        infer_expr(op.nn.matmul(v("a", 2, 5), v("b", 1, 5, 7)))
    with raises("nn.matmul: tensor_a must have rank at least 2, got Tensor[(5), float32]"):
        infer_expr(op.nn.matmul(v("a", 5), v("b", 5, 7), transpose_a=True))


def test_batch_matmul_relations():
    assert infer_expr(op.nn.batch_matmul(v("x", n, 3, 5), v("y", n, 7, 5))) == T(n, 3, 7)
    assert infer_expr(op.nn.batch_matmul(v("x", 1, 3, 5), v("y", 4, 5, 7), transpose_b=False)) == T(4, 3, 7)
    assert infer_expr(op.nn.batch_matmul(v("x", 4, 5, 3), v("y", 1, 7, 5), transpose_a=True)) == T(4, 3, 7)
    assert infer_expr(op.nn.batch_matmul(v("x", None, 3, 5), v("y", 4, 7, 5))) == T(4, 3, 7)
    with raises("nn.batch_matmul: x Tensor[(2, 3, 5), float32] has 5 features to reduce but y "
                "Tensor[(2, 7, 4), float32] has 4 (transpose_a=False, transpose_b=True)"):
        infer_expr(op.nn.batch_matmul(v("x", 2, 3, 5), v("y", 2, 7, 4)))
    with raises("nn.batch_matmul: the batch sizes of x Tensor[(2, 3, 5), float32] and y Tensor[(3, 7, 5), float32] "
                "differ (2 vs 3)"):
        infer_expr(op.nn.batch_matmul(v("x", 2, 3, 5), v("y", 3, 7, 5)))
    with raises("nn.batch_matmul: y must have rank 3 ([batch, rows, columns]), got Tensor[(7, 5), float32]"):
        infer_expr(op.nn.batch_matmul(v("x", 2, 3, 5), v("y", 7, 5)))


# =============================================================================================
# Pooling

def test_pools_by_hand():
    x = np.arange(16, dtype="float32").reshape(1, 1, 4, 4)
    # 0  1  2  3 / 4  5  6  7 / 8  9 10 11 / 12 13 14 15
    got = run(lambda a: op.nn.max_pool2d(a, pool_size=2, strides=2), x)
    assert got[0, 0].tolist() == [[5, 7], [13, 15]]
    got = run(lambda a: op.nn.avg_pool2d(a, pool_size=2, strides=2), x)
    assert got[0, 0].tolist() == [[2.5, 4.5], [10.5, 12.5]]
    # ceil_mode: 3x3 windows every 2 over 4 rows: 0..2 and a partial 2..3
    got = run(lambda a: op.nn.max_pool2d(a, pool_size=3, strides=2, ceil_mode=True), x)
    assert got[0, 0].tolist() == [[10, 11], [14, 15]]
    got = run(lambda a: op.nn.avg_pool2d(a, pool_size=3, strides=2, ceil_mode=True), x)
    # windows: rows {0,1,2} x cols {0,1,2} -> 5; cols {2,3} -> (2+3+6+7+10+11)/6 = 6.5;
    # rows {2,3} x cols {0,1,2} -> (8+9+10+12+13+14)/6 = 11; rows {2,3} x cols {2,3} -> 12.5
    assert got[0, 0].tolist() == [[5, 6.5], [11, 12.5]]
    # the extra rows that ceil_mode adds never count, even with count_include_pad
    got = run(lambda a: op.nn.avg_pool2d(a, pool_size=3, strides=2, ceil_mode=True, count_include_pad=True), x)
    assert got[0, 0].tolist() == [[5, 6.5], [11, 12.5]]
    # padding 1 on every side, 2x2 windows every 2: each window holds one corner-ish group
    got = run(lambda a: op.nn.avg_pool2d(a, pool_size=2, strides=2, padding=1), x)
    assert got[0, 0].tolist() == [[0, 1.5, 3], [6, 7.5, 9], [12, 13.5, 15]]
    got = run(lambda a: op.nn.avg_pool2d(a, pool_size=2, strides=2, padding=1, count_include_pad=True), x)
    assert got[0, 0].tolist() == [[0, 0.75, 0.75], [3, 7.5, 4.5], [3, 6.75, 3.75]]
    got = run(lambda a: op.nn.max_pool2d(a, pool_size=2, strides=2, padding=1), x - 100)
    assert got[0, 0].tolist() == [[-100, -98, -97], [-92, -90, -89], [-88, -86, -85]]
    # Relay's ceil_mode formula counts a last window that lies wholly on the padding: 4 columns
    # and 1 of padding on the right, 1-wide windows every 2: columns 0, 2 and 4 (padding)
    row = np.array([[[[1, 2, 3, 4]]]], "float32")
    got = run(lambda a: op.nn.max_pool2d(a, strides=2, padding=(0, 0, 0, 1), ceil_mode=True), row)
    assert got[0, 0, 0].tolist() == [1, 3, np.finfo(np.float32).min]
    got = run(lambda a: op.nn.avg_pool2d(a, strides=2, padding=(0, 0, 0, 1), ceil_mode=True), row)
    assert got[0, 0, 0].tolist() == [1, 3, 0]


POOL_CASES = [
    # pool_size, strides, padding, dilation, ceil_mode, count_include_pad
    ((2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False, False),
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, True),
    ((3, 2), (2, 3), (1, 0, 0, 1), (1, 1), True, False),
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True, True),
    ((2, 3), (1, 2), (0, 1, 1, 2), (2, 1), True, True),
    ((2, 2), (3, 3), (1, 1, 1, 1), (2, 2), False, False),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", POOL_CASES)
def test_pools_against_window_loops_in_three_layouts(case, dtype):
    size, strides, padding, dilation, ceil, include = case
    rng = np.random.default_rng(len(str(case)))
    x = rand(rng, (2, 4, 7, 8), dtype)
    common = dict(pool_size=size, strides=strides, padding=padding, dilation=dilation, ceil_mode=ceil)
    for kind in ("max", "avg"):
        expected = loop_pool2d(x, kind, size, strides, padding, dilation, ceil, include)
        attrs = dict(common, count_include_pad=include) if kind == "avg" else common
        pool = op.nn.max_pool2d if kind == "max" else op.nn.avg_pool2d
        close(run(lambda a: pool(a, **attrs), x), expected, dtype)
        close(from_nhwc(run(lambda a: pool(a, layout="NHWC", **attrs), to_nhwc(x))), expected, dtype)
        close(from_nchwc(run(lambda a: pool(a, layout="NCHW2c", **attrs), to_nchwc(x, 2))), expected, dtype)
        close(from_nhwc(run(lambda a: pool(a, out_layout="NHWC", **attrs), x)), expected, dtype)


def test_max_pool_of_integers_and_avg_pool_rounding():
    x = np.array([[[[-5, 3], [7, -9]]]], "int32")
    assert run(lambda a: op.nn.max_pool2d(a, pool_size=2), x).tolist() == [[[[7]]]]
    got = run(lambda a: op.nn.max_pool2d(a, pool_size=2, padding=1), x)
    assert got[0, 0].tolist() == [[-5, 3, 3], [7, 7, 3], [7, 7, -9]]
    assert run(lambda a: op.nn.avg_pool2d(a, pool_size=2), x).tolist() == [[[[-1]]]]   # -4 / 4


pool_params = st.fixed_dictionaries({
    "h": st.integers(1, 30), "w": st.integers(1, 30), "kh": st.integers(1, 5), "kw": st.integers(1, 5),
    "sh": st.integers(1, 4), "sw": st.integers(1, 4), "dh": st.integers(1, 3), "dw": st.integers(1, 3),
    "pad": st.lists(st.integers(0, 3), min_size=4, max_size=4), "ceil": st.booleans(),
    "layout": st.sampled_from(["NCHW", "NHWC", "NCHW4c"]),
})


@settings(max_examples=200, deadline=None)
@given(pool_params)
def test_pool_output_shape_agrees_with_the_formula(p):
    pt, pl, pb, pr = p["pad"]
    shape = {"NCHW": (2, 8, p["h"], p["w"]), "NHWC": (2, p["h"], p["w"], 8), "NCHW4c": (2, 2, p["h"], p["w"], 4)}
    y = op.nn.avg_pool2d(v("x", *shape[p["layout"]]), pool_size=(p["kh"], p["kw"]), strides=(p["sh"], p["sw"]),
                         padding=tuple(p["pad"]), dilation=(p["dh"], p["dw"]), ceil_mode=p["ceil"],
                         layout=p["layout"])
    span_h = p["h"] + pt + pb - (p["kh"] - 1) * p["dh"] - 1
    span_w = p["w"] + pl + pr - (p["kw"] - 1) * p["dw"] - 1
    if span_h < 0 or span_w < 0:
        with raises("nn.avg_pool2d: the pooling window's"):
            infer_expr(y)
        return
    rnd = math.ceil if p["ceil"] else math.floor
    oh, ow = rnd(span_h / p["sh"]) + 1, rnd(span_w / p["sw"]) + 1
    expected = {"NCHW": (2, 8, oh, ow), "NHWC": (2, oh, ow, 8), "NCHW4c": (2, 2, oh, ow, 4)}[p["layout"]]
    assert infer_expr(y) == T(*expected)


def test_pool_relations():
    assert infer_expr(op.nn.max_pool2d(v("x", n, 64, h, w_), pool_size=3, strides=2, padding=1)) == \
        T(n, 64, floordiv(h - 1, 2) + 1, floordiv(w_ - 1, 2) + 1)
    assert infer_expr(op.nn.max_pool2d(v("x", n, 64, h, w_), pool_size=2, strides=2, ceil_mode=True)) == \
        T(n, 64, floordiv(h - 1, 2) + 1, floordiv(w_ - 1, 2) + 1)
    assert infer_expr(op.nn.avg_pool2d(v("x", 1, None, 9, 3), pool_size=3, layout="NHWC")) == T(1, ANY, 7, 3)
    assert infer_expr(op.nn.max_pool2d(v("x", 1, 8, 8, 8), pool_size=2, strides=2, out_layout="NCHW4c")) == \
        T(1, 2, 4, 4, 4)
    assert infer_expr(op.nn.global_avg_pool2d(v("x", n, 8, h, w_))) == T(n, 8, 1, 1)
    assert infer_expr(op.nn.global_max_pool2d(v("x", n, h, w_, 8), layout="NHWC")) == T(n, 1, 1, 8)
    assert infer_expr(op.nn.global_avg_pool2d(v("x", 1, 2, 5, 5, 4), layout="NCHW4c")) == T(1, 2, 1, 1, 4)
    assert infer_expr(op.nn.adaptive_avg_pool2d(v("x", n, 8, h, w_), output_size=(3, 4))) == T(n, 8, 3, 4)
    assert infer_expr(op.nn.adaptive_avg_pool2d(v("x", n, 8, h, w_), output_size=(None, 4))) == T(n, 8, h, 4)
    assert infer_expr(op.nn.adaptive_avg_pool2d(v("x", n, h, w_, 8), output_size=1, layout="NHWC")) == T(n, 1, 1, 8)
    assert infer_expr(op.nn.adaptive_avg_pool2d(v("x", n, 8, h, w_))) == T(n, 8, h, w_)


@pytest.mark.parametrize("make, message", [
    (lambda: op.nn.max_pool2d(v("x", 1, 3, 4, 4), pool_size=5),
     "nn.max_pool2d: the pooling window's height (5 with dilation) is larger than the padded input's height (4)"),
    (lambda: op.nn.avg_pool2d(v("x", 1, 3, 8, 4), pool_size=3, dilation=2),
     "nn.avg_pool2d: the pooling window's width (5 with dilation) is larger than the padded input's width (4)"),
    (lambda: op.nn.max_pool2d(v("x", 1, 3, 8), pool_size=2),
     "nn.max_pool2d: data Tensor[(1, 3, 8), float32] has rank 3 but layout NCHW needs rank 4"),
    (lambda: op.nn.max_pool2d(v("x", 1, 3, 8, 8, 2), pool_size=2, layout="NCHW4c"),
     "nn.max_pool2d: data Tensor[(1, 3, 8, 8, 2), float32]: axis c of layout NCHW4c has extent 2 but its block "
     "factor is 4"),
    (lambda: op.nn.max_pool2d(v("x", 1, 6, 8, 8), pool_size=2, out_layout="NCHW4c"),
     "nn.max_pool2d: the output in layout NCHW4c: axis C of extent 6 cannot be split into blocks of 4"),
    (lambda: op.nn.max_pool2d(v("x", 1, 6, 8, 8), pool_size=2, out_layout="NHW"),
     "nn.max_pool2d: out_layout NHW has other axes than layout NCHW"),
    (lambda: op.nn.global_avg_pool2d(v("x", 3, 8, 8), layout="CHW"), None),
    (lambda: op.nn.global_max_pool2d(v("x", 1, 3, 8), layout="NCHW"),
     "nn.global_max_pool2d: data Tensor[(1, 3, 8), float32] has rank 3 but layout NCHW needs rank 4"),
])
def test_pool_errors(make, message):
    if message is None:         # a layout without N or C is fine: pooling needs H and W only
        assert infer_expr(make()) == T(3, 1, 1)
        return
    with raises(message):
        infer_expr(make())


@pytest.mark.parametrize("dtype", DTYPES)
def test_global_pools(dtype):
    rng = np.random.default_rng(2)
    x = rand(rng, (2, 3, 4, 5), dtype)
    close(run(op.nn.global_avg_pool2d, x), x.astype(np.float64).mean(axis=(2, 3), keepdims=True), dtype)
    close(run(op.nn.global_max_pool2d, x), x.max(axis=(2, 3), keepdims=True), dtype)
    got = run(lambda a: op.nn.global_avg_pool2d(a, layout="NHWC"), to_nhwc(x))
    close(from_nhwc(got), x.astype(np.float64).mean(axis=(2, 3), keepdims=True), dtype)
    got = run(lambda a: op.nn.global_max_pool2d(a, layout="NCHW3c"), to_nchwc(x, 3))
    close(from_nchwc(got), x.max(axis=(2, 3), keepdims=True), dtype)


def loop_adaptive_avg(x, oh, ow):
    N, C, H, W = x.shape
    out = np.zeros((N, C, oh, ow))
    for i in range(oh):
        r0, r1 = math.floor(i * H / oh), math.ceil((i + 1) * H / oh)
        for j in range(ow):
            c0, c1 = math.floor(j * W / ow), math.ceil((j + 1) * W / ow)
            out[:, :, i, j] = x[:, :, r0:r1, c0:c1].astype(np.float64).mean(axis=(2, 3))
    return out


@pytest.mark.parametrize("dtype", DTYPES)
def test_adaptive_avg_pool2d(dtype):
    x = np.arange(5, dtype=dtype).reshape(1, 1, 5, 1) * np.ones((1, 1, 1, 2), dtype)
    # 5 rows into 3 bins: rows [0, 2), [1, 4), [3, 5) -> means 0.5, 2, 3.5
    got = run(lambda a: op.nn.adaptive_avg_pool2d(a, output_size=(3, 1)), x)
    assert got[0, 0, :, 0].tolist() == [0.5, 2.0, 3.5]
    rng = np.random.default_rng(4)
    x = rand(rng, (2, 3, 7, 10), dtype)
    for size in [(3, 4), (7, 10), (1, 1), (5, 3), (9, 12)]:
        close(run(lambda a: op.nn.adaptive_avg_pool2d(a, output_size=size), x), loop_adaptive_avg(x, *size), dtype)
    got = run(lambda a: op.nn.adaptive_avg_pool2d(a, output_size=(None, 4), layout="NHWC"), to_nhwc(x))
    close(from_nhwc(got), loop_adaptive_avg(x, 7, 4), dtype)
    got = run(lambda a: op.nn.adaptive_avg_pool2d(a, output_size=2, layout="NCHW3c", out_layout="NCHW"),
              to_nchwc(x, 3))
    close(got, loop_adaptive_avg(x, 2, 2), dtype)


# =============================================================================================
# softmax, log_softmax

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_and_log_softmax(axis, dtype):
    x = np.array([[1.0, 2.0, 3.0], [-1.0, 0.0, 1000.0]], dtype)
    z = x.astype(np.float64) - x.astype(np.float64).max(axis=axis, keepdims=True)
    e = np.exp(z)
    close(run(lambda a: op.nn.softmax(a, axis=axis), x), e / e.sum(axis=axis, keepdims=True), dtype)
    close(run(lambda a: op.nn.log_softmax(a, axis=axis), x), z - np.log(e.sum(axis=axis, keepdims=True)), dtype)
    row = run(op.nn.softmax, x)[0]
    total = math.exp(1) + math.exp(2) + math.exp(3)
    close(row, [math.exp(1) / total, math.exp(2) / total, math.exp(3) / total], dtype)


def test_softmax_relations():
    assert infer_expr(op.nn.softmax(v("x", n, 10))) == T(n, 10)
    assert infer_expr(op.nn.log_softmax(v("x", n, 10), axis=0)) == T(n, 10)
    with raises("nn.softmax: axis 2 is out of range for rank 2"):
        infer_expr(op.nn.softmax(v("x", 2, 10), axis=2))
    with raises("nn.log_softmax: data must be a floating-point tensor, got Tensor[(2, 10), int32]"):
        infer_expr(op.nn.log_softmax(v("x", 2, 10, dtype="int32")))


# =============================================================================================
# batch_norm, layer_norm, dropout, lrn

@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm(dtype):
    rng = np.random.default_rng(8)
    x = rand(rng, (2, 3, 4, 2), dtype)
    gamma, beta, mean = rand(rng, (3,), dtype), rand(rng, (3,), dtype), rand(rng, (3,), dtype)
    var_ = (rng.random(3) + 0.5).astype(dtype)
    c = lambda p: p.astype(np.float64)[None, :, None, None]  # noqa: E731
    normalized = (x - c(mean)) / np.sqrt(c(var_) + 1e-5)
    out, m, s = run(op.nn.batch_norm, x, gamma, beta, mean, var_)
    close(out, normalized * c(gamma) + c(beta), dtype)
    np.testing.assert_array_equal(m, mean)
    np.testing.assert_array_equal(s, var_)
    out, _, _ = run(lambda *a: op.nn.batch_norm(*a, epsilon=0.5, center=False, scale=False),
                    x, gamma, beta, mean, var_)
    close(out, (x - c(mean)) / np.sqrt(c(var_) + 0.5), dtype)
    # along the last axis
    xl = np.moveaxis(x, 1, -1)
    got = run(lambda a, *p: op.nn.batch_norm(a, *p, axis=-1)[0], xl, gamma, beta, mean, var_)
    close(np.moveaxis(got, -1, 1), normalized * c(gamma) + c(beta), dtype)


def test_batch_norm_relation():
    params = [Var(name) for name in ("gamma", "beta", "mean", "var")]
    t = infer_expr(op.nn.batch_norm(v("x", n, 16, h, w_), *params))
    assert t == TupleType([T(n, 16, h, w_), T(16), T(16)])
    assert all(p.checked_type == T(16) for p in params)
    assert infer_expr(op.nn.batch_norm(v("x", n, 16, dtype="float64"), *params[:3], v("var", 16, dtype="float64"),
                                       axis=-1)[0]) == T(n, 16, dtype="float64")
    with raises("nn.batch_norm: moving_var must be Tensor[(16), float32] (axis 1 of "
                "Tensor[(1, 16, 4, 4), float32]), got Tensor[(8), float32]"):
        infer_expr(op.nn.batch_norm(v("x", 1, 16, 4, 4), *[v(f"p{i}", 16) for i in range(3)], v("p3", 8)))
    with raises("nn.batch_norm: axis 4 is out of range for rank 4"):
        infer_expr(op.nn.batch_norm(v("x", 1, 16, 4, 4), *[v(f"p{i}", 16) for i in range(4)], axis=4))


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm(dtype):
    rng = np.random.default_rng(9)
    x = rand(rng, (2, 3, 6), dtype)
    gamma, beta = rand(rng, (6,), dtype), rand(rng, (6,), dtype)
    z = x.astype(np.float64)
    mu = z.sum(axis=-1, keepdims=True) / 6
    sigma2 = ((z - mu) ** 2).sum(axis=-1, keepdims=True) / 6
    close(run(op.nn.layer_norm, x, gamma, beta), (z - mu) / np.sqrt(sigma2 + 1e-5) * gamma + beta, dtype)
    gamma1, beta1 = rand(rng, (3,), dtype), rand(rng, (3,), dtype)
    mu = z.mean(axis=1, keepdims=True)
    sigma2 = z.var(axis=1, keepdims=True)
    expected = (z - mu) / np.sqrt(sigma2 + 1e-3) * gamma1[:, None] + beta1[:, None]
    close(run(lambda *a: op.nn.layer_norm(*a, axis=1, epsilon=1e-3), x, gamma1, beta1), expected, dtype)
    close(run(lambda *a: op.nn.layer_norm(*a, axis=1, epsilon=1e-3, center=False, scale=False), x, gamma1, beta1),
          (z - mu) / np.sqrt(sigma2 + 1e-3), dtype)
    gv = Var("g")
    assert infer_expr(op.nn.layer_norm(v("x", n, 8, 32), gv, v("b", 32))) == T(n, 8, 32)
    assert gv.checked_type == T(32)
    with raises("nn.layer_norm: beta must be Tensor[(32), float32] (axis -1 of Tensor[(2, 32), float32]), "
                "got Tensor[(2), float32]"):
        infer_expr(op.nn.layer_norm(v("x", 2, 32), v("g", 32), v("b", 2)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_dropout_passes_data_through(dtype):
    x = np.arange(6, dtype=dtype).reshape(2, 3)
    out, mask = run(lambda a: op.nn.dropout(a, rate=0.3), x)
    np.testing.assert_array_equal(out, x)
    assert mask.tolist() == [[1, 1, 1], [1, 1, 1]]
    np.testing.assert_array_equal(run(lambda a: op.nn.dropout(a)[0], x), x)
    assert infer_expr(op.nn.dropout(v("x", n, 3))) == TupleType([T(n, 3), T(n, 3)])


def loop_lrn(x, size, axis, bias, alpha, beta):
    xm = np.moveaxis(x.astype(np.float64), axis, 0)
    out = np.empty_like(xm)
    C = xm.shape[0]
    for c in range(C):
        s = sum(xm[j] ** 2 for j in range(c - size // 2, c + size - size // 2) if 0 <= j < C)
        out[c] = xm[c] / (bias + alpha / size * s) ** beta
    return np.moveaxis(out, 0, axis)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("size, axis", [(5, 1), (3, 1), (4, -1), (1, 1)])
def test_lrn(size, axis, dtype):
    rng = np.random.default_rng(10)
    x = rand(rng, (2, 6, 3, 4), dtype) * 3
    got = run(lambda a: op.nn.lrn(a, size=size, axis=axis, bias=1.5, alpha=0.2, beta=0.6), x)
    close(got, loop_lrn(x, size, axis, 1.5, 0.2, 0.6), dtype)
    close(run(op.nn.lrn, x), loop_lrn(x, 5, 1, 2.0, 1e-5, 0.75), dtype)
    # one channel by hand: x / (2 + 1e-5 / 5 * x**2) ** 0.75
    one = np.array([[[[3.0]]]], dtype)
    close(run(op.nn.lrn, one)[0, 0, 0, 0], 3.0 / (2 + 1e-5 / 5 * 9.0) ** 0.75, dtype)


# =============================================================================================
# pad, batch_flatten

@pytest.mark.parametrize("dtype", DTYPES)
def test_pad(dtype):
    x = np.array([[1, 2, 3], [4, 5, 6]], dtype)
    got = run(lambda a: op.nn.pad(a, pad_width=((1, 0), (0, 2))), x)
    assert got.tolist() == [[0, 0, 0, 0, 0], [1, 2, 3, 0, 0], [4, 5, 6, 0, 0]]
    got = run(lambda a, c: op.nn.pad(a, c, pad_width=((0, 1), (1, 1))), x, np.array(-1, dtype))
    assert got.tolist() == [[-1, 1, 2, 3, -1], [-1, 4, 5, 6, -1], [-1, -1, -1, -1, -1]]
    got = run(lambda a: op.nn.pad(a, 7.5, pad_width=((0, 0), (1, 0))), x)
    assert got.tolist() == [[7.5, 1, 2, 3], [7.5, 4, 5, 6]]
    got = run(lambda a: op.nn.pad(a, pad_width=((1, 1), (2, 1)), pad_mode="edge"), x)
    assert got.tolist() == [[1, 1, 1, 2, 3, 3], [1, 1, 1, 2, 3, 3], [4, 4, 4, 5, 6, 6], [4, 4, 4, 5, 6, 6]]
    got = run(lambda a: op.nn.pad(a, pad_width=((1, 0), (2, 1)), pad_mode="reflect"), x)
    assert got.tolist() == [[6, 5, 4, 5, 6, 5], [3, 2, 1, 2, 3, 2], [6, 5, 4, 5, 6, 5]]


def test_pad_relations():
    assert infer_expr(op.nn.pad(v("x", n, 3, h, w_), pad_width=((0, 0), (0, 0), (1, 1), (2, 3)))) == \
        T(n, 3, h + 2, w_ + 5)
    assert infer_expr(op.nn.pad(v("x", None, 3), pad_width=((1, 1), (0, 0)))) == T(ANY, 3)
    with raises("nn.pad: pad_width has 1 pairs but the data Tensor[(2, 3), float32] has rank 2"):
        infer_expr(op.nn.pad(v("x", 2, 3), pad_width=((1, 1),)))
    with raises("nn.pad: pad_value must be a scalar, got Tensor[(1), float32]"):
        infer_expr(op.nn.pad(v("x", 2, 3), v("c", 1), pad_width=((1, 1), (0, 0))))
    with raises("nn.pad: reflect padding (0, 3) of axis 1 must be smaller than its extent 3"):
        infer_expr(op.nn.pad(v("x", 2, 3), pad_width=((1, 1), (0, 3)), pad_mode="reflect"))
    cv = Var("c")
    assert infer_expr(op.nn.pad(v("x", 2, 3, dtype="float64"), cv, pad_width=((1, 1), (0, 0)))) == \
        T(4, 3, dtype="float64")
    assert cv.checked_type == T(dtype="float64")


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_flatten(dtype):
    x = np.arange(24, dtype=dtype).reshape(2, 3, 2, 2)
    got = run(op.nn.batch_flatten, x)
    assert got.shape == (2, 12) and got[1].tolist() == list(range(12, 24))
    assert infer_expr(op.nn.batch_flatten(v("x", n, 3, h, 2))) == T(n, 6 * h)
    assert infer_expr(op.nn.batch_flatten(v("x", n, 3, None))) == T(n, ANY)
    assert infer_expr(op.nn.batch_flatten(v("x", 5))) == T(5, 1)
    with raises("nn.batch_flatten: data must have rank at least 1, got float32"):
        infer_expr(op.nn.batch_flatten(v("x")))


# =============================================================================================
# The text format

def test_text_round_trip_of_every_op_with_its_attributes():
    x, k = v("x", 1, 8, 9, 9), v("k", 8, 2, 3, 3)
    params = [Var(name) for name in ("g", "b", "m", "s")]
    y = op.nn.conv2d(x, k, strides=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2), groups=4, channels=8,
                     kernel_size=(3, 3), data_layout="NCHW", kernel_layout="OIHW", out_layout="NHWC",
                     out_dtype="float64")
    y = op.nn.lrn(op.nn.leaky_relu(y, alpha=0.1), size=3, axis=3, bias=1.0, alpha=1e-4, beta=0.5)
    y = op.nn.pad(y, pad_width=((0, 0), (1, 1), (0, 2), (0, 0)), pad_mode="reflect")
    z = op.nn.batch_norm(x, *params, axis=1, epsilon=1e-3, center=False)[0]
    z = op.nn.avg_pool2d(z, pool_size=(3, 2), strides=(2, 1), dilation=(1, 2), padding=(1, 1, 0, 0), layout="NCHW",
                         out_layout="NHWC", ceil_mode=True, count_include_pad=True)
    u = op.nn.adaptive_avg_pool2d(x, output_size=(None, 3))
    kt, q, r = v("kt", 8, 2, 3, 3), v("q", 2, 3, 4), v("r", 2, 4, 5)
    t = op.nn.conv2d_transpose(x, kt, strides=2, padding=1, output_padding=1, groups=2)
    d = op.nn.batch_matmul(op.nn.dropout(q, rate=0.25)[0], r, transpose_b=False, out_dtype="float64")
    wd, bd, wm = v("wd", 4, 8), v("bd", 4, dtype="float64"), v("wm", 1, 3)
    al, lg, lb = v("al", 9), v("lg", 9), v("lb", 9)
    f = op.nn.batch_flatten(op.nn.global_max_pool2d(x, layout="NCHW", out_layout="NHWC"))
    f = op.nn.relu(op.nn.dense(f, wd, units=4, out_dtype="float64"))
    f = op.nn.softmax(op.nn.bias_add(f, bd, axis=-1), axis=0)
    g = op.nn.global_avg_pool2d(op.nn.max_pool2d(x, pool_size=2, padding=1, layout="NCHW"))
    g = op.nn.matmul(g, wm, transpose_a=True, units=3)
    e = op.nn.layer_norm(op.nn.prelu(x, al, axis=3), lg, lb, epsilon=1e-6, scale=False)
    body = rb.Tuple([y, z, u, t, d, op.nn.log_softmax(op.nn.batch_flatten(x), axis=0), f, g, e])
    mod = IRModule.from_expr(Function([x, k, *params, kt, q, r, wd, bd, wm, al, lg, lb], body))
    mod = rb.passes.InferType()(mod)
    text = str(mod)
    for piece in ('strides=[2, 1], padding=[1, 0, 2, 1], dilation=[1, 2], groups=4, channels=8, '
                  'kernel_size=[3, 3], out_layout="NHWC", out_dtype="float64"',
                  'pad_width=[[0, 0], [1, 1], [0, 2], [0, 0]]',
                  'output_size=[None, 3]', 'ceil_mode=True, count_include_pad=True', 'output_padding=[1, 1]'):
        assert piece in text
    again = rb.passes.InferType()(rb.parse(text))
    rb.assert_structural_equal(again, mod)
    assert str(again) == text


def test_conv2d_with_every_attribute_round_trips_through_text():
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 4, 10, 10, 4), float32], %w: Tensor[(8, 4, 3, 3, 2, 4), float32]) {
  nn.conv2d(%x, %w, strides=[2, 1], padding=[1, 2, 0, 1], dilation=[2, 1], groups=2, channels=32,
            kernel_size=[3, 3], data_layout="NCHW4c", kernel_layout="OIHW2i4o", out_layout="NHWC",
            out_dtype="float64")
}
"""
    mod = rb.passes.InferType()(rb.parse(text))
    body = mod["main"].body
    assert body.attrs.padding == (1, 2, 0, 1) and body.attrs.kernel_layout == "OIHW2i4o"
    # H: (10 + 1 + 0 - 5) // 2 + 1 = 4; W: (10 + 2 + 1 - 3) // 1 + 1 = 11
    assert body.checked_type == T(1, 4, 11, 32, dtype="float64")
    again = rb.passes.InferType()(rb.parse(str(mod)))
    rb.assert_structural_equal(again, mod)
    assert str(again) == str(mod)
