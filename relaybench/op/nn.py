"""Neural-network operators (``nn.*``).

>>> import relaybench as rb
>>> from relaybench.ir.type_infer import infer_expr
>>> x = rb.var("x", shape=(1, 3, 224, 224))
>>> w = rb.var("w")                       # its type follows from channels and kernel_size
>>> y = conv2d(x, w, strides=2, padding=3, channels=64, kernel_size=7)
>>> infer_expr(y), w.checked_type
(Tensor[(1, 64, 112, 112), float32], Tensor[(64, 3, 7, 7), float32])
>>> infer_expr(dense(rb.var("h", shape=("n", 512)), rb.var("w2", shape=(10, 512))))
Tensor[(n, 10), float32]
"""

from __future__ import annotations

import numpy as np

from ..ir.layout import Layout
from ..ir.symbolic import add, floordiv, format_dim, mul, sub
from ..ir.types import TensorType, check_dtype
from ._rel import (as_int, fail, fmt_shape, int_tuple, known, normalize_axis, provably_different,
                   relation, same_dim, tensor)
from .registry import OpDef, OpPattern, register
from .tensor import identity_rel

__all__ = ["relu", "conv2d", "dense", "bias_add"]


relu = register(OpDef("nn.relu", ("data",), identity_rel, OpPattern.ELEMWISE,
                      reference=lambda x, attrs: np.maximum(x, 0).astype(x.dtype), doc="max(x, 0)."))


# ---------------------------------------------------------------------------------------------
# nn.conv2d

def _check_layout(name: str, value, axes: str, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a layout string, got {value!r}")
    if value == "" and allow_empty:
        return value
    layout = Layout(value)
    if sorted(layout.primal) != sorted(axes):
        raise ValueError(f"{name}={value!r} must have the axes {', '.join(axes)}")
    return value


def _normalize_conv2d(a: dict) -> dict:
    a["strides"] = int_tuple(a["strides"], (2,), "strides", minimum=1)
    pad = int_tuple(a["padding"], (1, 2, 4), "padding", minimum=0)
    if len(pad) == 1:
        pad = pad * 4
    elif len(pad) == 2:
        pad = pad + pad            # (top, left) -> (top, left, bottom, right)
    a["padding"] = pad
    a["dilation"] = int_tuple(a["dilation"], (2,), "dilation", minimum=1)
    a["groups"] = as_int(a["groups"], "groups", minimum=1)
    if a["channels"] is not None:
        a["channels"] = as_int(a["channels"], "channels", minimum=1)
    if a["kernel_size"] is not None:
        a["kernel_size"] = int_tuple(a["kernel_size"], (2,), "kernel_size", minimum=1)
    a["data_layout"] = _check_layout("data_layout", a["data_layout"], "NCHW")
    a["kernel_layout"] = _check_layout("kernel_layout", a["kernel_layout"], "OIHW")
    a["out_layout"] = _check_layout("out_layout", a["out_layout"], "NCHW", allow_empty=True)
    if a["out_dtype"] not in ("", None):
        a["out_dtype"] = check_dtype(a["out_dtype"])
    else:
        a["out_dtype"] = ""
    return a


def conv2d_output_hw(h, w, kernel_size, strides, padding, dilation) -> tuple:
    """The output height and width of a 2-D convolution (or pooling) window.

    ``out = (in + pad_before + pad_after - ((k - 1) * dilation + 1)) // stride + 1``, per axis;
    symbolic extents give symbolic results, ``?`` gives ``?``. Fails when the dilated kernel is
    larger than the padded input.
    """
    pt, pl, pb, pr = padding
    out = []
    for axis, extent, k, s, d, p0, p1 in (("height", h, kernel_size[0], strides[0], dilation[0], pt, pb),
                                          ("width", w, kernel_size[1], strides[1], dilation[1], pl, pr)):
        dilated = add(mul(sub(k, 1), d), 1)
        padded = add(extent, p0 + p1)
        if isinstance(padded, int) and isinstance(dilated, int) and padded < dilated:
            fail(f"the kernel's {axis} ({dilated} with dilation) is larger than the padded input's "
                 f"{axis} ({padded})")
        out.append(add(floordiv(sub(padded, dilated), s), 1))
    return tuple(out)


@relation("Conv2DRel")
def conv2d_rel(types, attrs):
    """``Conv2DRel``: data and weight in their layouts; the output in ``out_layout``.

    Shapes are converted to NCHW (data) and OIHW (weight) to check and compute, then the output
    is converted to ``out_layout``. With ``channels`` and ``kernel_size`` the weight's type follows
    (``[channels, C / groups, kh, kw]`` in OIHW) and an unknown weight is given it.
    """
    data, weight = types
    if not known(data):
        return None
    data = tensor(data, "data")
    dl, kl = Layout(attrs.data_layout), Layout(attrs.kernel_layout)
    ol = Layout(attrs.out_layout or attrs.data_layout)
    if data.ndim != dl.ndim:
        fail(f"data {data} has rank {data.ndim} but data_layout {dl} needs rank {dl.ndim}")
    try:
        n, c, h, w = dl.convert_shape(data.shape, "NCHW")
    except ValueError as err:
        fail(f"data {data}: {err}")
    groups = attrs.groups
    if isinstance(c, int) and c % groups:
        fail(f"data has {c} input channels, which groups={groups} does not divide")
    c_per_group = c if groups == 1 else floordiv(c, groups)
    ks = attrs.kernel_size
    implied = None
    if attrs.channels is not None and ks is not None:
        if attrs.channels % groups:
            fail(f"channels={attrs.channels} is not divisible by groups={groups}")
        try:
            wshape = Layout("OIHW").convert_shape((attrs.channels, c_per_group) + ks, kl)
        except ValueError as err:
            fail(f"the weight implied by channels={attrs.channels} and kernel_size={ks}: {err}")
        implied = TensorType(wshape, data.dtype)
    if known(weight):
        weight = tensor(weight, "weight")
        if weight.ndim != kl.ndim:
            fail(f"weight {weight} has rank {weight.ndim} but kernel_layout {kl} needs rank {kl.ndim}")
        try:
            o, i, kh, kw = kl.convert_shape(weight.shape, "OIHW")
        except ValueError as err:
            fail(f"weight {weight}: {err}")
        if ks is not None and (provably_different(kh, ks[0]) or provably_different(kw, ks[1])):
            fail(f"kernel_size={ks} but the weight's kernel is {fmt_shape((kh, kw))}")
        if attrs.channels is not None and provably_different(o, attrs.channels):
            fail(f"channels={attrs.channels} but the weight has {format_dim(o)} output channels")
        if not same_dim(c_per_group, i):
            if groups == 1:
                fail(f"data has {format_dim(c)} input channels but the weight expects {format_dim(i)}")
            fail(f"data has {format_dim(c)} input channels in {groups} groups ({format_dim(c_per_group)} "
                 f"per group) but the weight expects {format_dim(i)} per group")
        if isinstance(o, int) and o % groups:
            fail(f"the weight's {o} output channels are not divisible by groups={groups}")
        channels, ks = o, (kh, kw)
    elif implied is not None:
        channels = attrs.channels
    else:
        return None
    out_hw = conv2d_output_hw(h, w, ks, attrs.strides, attrs.padding, attrs.dilation)
    try:
        oshape = Layout("NCHW").convert_shape((n, channels) + out_hw, ol)
    except ValueError as err:
        fail(f"the output in layout {ol}: {err}")
    out = TensorType(oshape, attrs.out_dtype or data.dtype)
    return out if known(weight) else [data, implied, out]


def _conv2d_nchw(x, w, strides, padding, dilation, groups, out_dtype):
    n, c, h, wd = x.shape
    o, ig, kh, kw = w.shape
    (sh, sw), (dh, dw) = strides, dilation
    pt, pl, pb, pr = padding
    oh = (h + pt + pb - ((kh - 1) * dh + 1)) // sh + 1
    ow = (wd + pl + pr - ((kw - 1) * dw + 1)) // sw + 1
    # accumulate floats in float64 so the reference is more exact than any kernel it checks
    acc = np.float64 if np.issubdtype(np.dtype(out_dtype), np.floating) else np.dtype(out_dtype)
    xp = np.pad(x.astype(acc), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    wa = w.astype(acc)
    out = np.zeros((n, o, oh, ow), dtype=acc)
    og = o // groups
    for g in range(groups):
        xg = xp[:, g * ig:(g + 1) * ig]
        wg = wa[g * og:(g + 1) * og]
        for i in range(kh):
            for j in range(kw):
                rows = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
                cols = slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)
                patch = xg[:, :, rows, cols]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, wg[:, :, i, j])
    return out.astype(out_dtype)


def _conv2d_reference(x, w, attrs):
    out_dtype = attrs.out_dtype or x.dtype.name
    xn = Layout(attrs.data_layout).transform_array(x, "NCHW")
    wn = Layout(attrs.kernel_layout).transform_array(w, "OIHW")
    y = _conv2d_nchw(xn, wn, attrs.strides, attrs.padding, attrs.dilation, attrs.groups, out_dtype)
    return np.ascontiguousarray(Layout("NCHW").transform_array(y, attrs.out_layout or attrs.data_layout))


conv2d = register(OpDef(
    "nn.conv2d", ("data", "weight"), conv2d_rel, OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"strides": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1, "channels": None,
           "kernel_size": None, "data_layout": "NCHW", "kernel_layout": "OIHW", "out_layout": "",
           "out_dtype": ""},
    normalize=_normalize_conv2d, reference=_conv2d_reference,
    doc="2-D convolution. ``padding`` is 1, 2 (top/bottom, left/right) or 4 values (top, left, "
        "bottom, right); ``groups`` splits channels (``groups`` equal to the input channels is a "
        "depthwise convolution); layouts may be blocked (``NCHW16c``, ``OIHW16i16o``); an empty "
        "``out_layout`` means ``data_layout`` and an empty ``out_dtype`` the data's dtype."))


# ---------------------------------------------------------------------------------------------
# nn.dense

def _normalize_dense(a: dict) -> dict:
    if a["units"] is not None:
        a["units"] = as_int(a["units"], "units", minimum=1)
    a["out_dtype"] = check_dtype(a["out_dtype"]) if a["out_dtype"] not in ("", None) else ""
    return a


@relation("MatmulRel")
def dense_rel(types, attrs):
    """``MatmulRel`` for dense: data ``[..., K]``, weight ``[units, K]`` -> ``[..., units]``."""
    data, weight = types
    if not known(data):
        return None
    data = tensor(data, "data")
    if data.ndim < 1:
        fail("data must have rank at least 1, got a scalar")
    k = data.shape[-1]
    out_dtype = attrs.out_dtype or data.dtype
    if not known(weight):
        if attrs.units is None:
            return None
        wtype = TensorType((attrs.units, k), data.dtype)
        return [data, wtype, TensorType(data.shape[:-1] + (attrs.units,), out_dtype)]
    weight = tensor(weight, "weight")
    if weight.ndim != 2:
        fail(f"weight must have rank 2 ([units, {format_dim(k)}]), got {weight}")
    units, wk = weight.shape
    if attrs.units is not None and provably_different(units, attrs.units):
        fail(f"weight {weight} but units={attrs.units}")
    if not same_dim(k, wk):
        fail(f"data has {format_dim(k)} input features (its last dimension) but the weight "
             f"{weight} expects {format_dim(wk)}")
    return TensorType(data.shape[:-1] + (units,), out_dtype)


def _dense_reference(x, w, attrs):
    out_dtype = attrs.out_dtype or x.dtype.name
    return np.matmul(x, w.T).astype(out_dtype)


dense = register(OpDef(
    "nn.dense", ("data", "weight"), dense_rel, OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"units": None, "out_dtype": ""}, normalize=_normalize_dense, reference=_dense_reference,
    doc="``data @ weight.T``: data ``[..., K]``, weight ``[units, K]``."))


# ---------------------------------------------------------------------------------------------
# nn.bias_add

@relation("BiasAddRel")
def bias_add_rel(types, attrs):
    """``BiasAddRel``: ``bias`` is ``[data.shape[axis]]``; the output has the data's type."""
    data, bias = types
    if not known(data):
        return None
    data = tensor(data, "data")
    axis = normalize_axis(attrs.axis, data.ndim)
    expected = TensorType((data.shape[axis],), data.dtype)
    if known(bias):
        bias = tensor(bias, "bias")
        if bias.ndim != 1 or not same_dim(bias.shape[0], data.shape[axis]):
            fail(f"bias must be {expected} (axis {attrs.axis} of {data}), got {bias}")
        if bias.dtype != data.dtype:
            fail(f"bias has dtype {bias.dtype} but the data has {data.dtype}")
        return data
    return [data, expected, data]


def _bias_add_reference(x, b, attrs):
    axis = attrs.axis + x.ndim if attrs.axis < 0 else attrs.axis
    shape = [1] * x.ndim
    shape[axis] = b.shape[0]
    return (x + b.reshape(shape)).astype(x.dtype)


def _normalize_bias_add(a: dict) -> dict:
    a["axis"] = as_int(a["axis"], "axis")
    return a


bias_add = register(OpDef(
    "nn.bias_add", ("data", "bias"), bias_add_rel, OpPattern.BROADCAST, attrs={"axis": 1},
    normalize=_normalize_bias_add, reference=_bias_add_reference,
    doc="Add a 1-d ``bias`` along ``axis`` of ``data``."))
