"""Neural-network operators (``nn.*``): Relay's names, attributes and defaults.

Each operator is one OpDef below: its attributes and their defaults, its type relation (shapes
in any layout, symbolic dimensions flowing through), its fusion pattern kind and its numpy
reference. The references are vectorized (convolution is an im2col matrix product over windows
from ``sliding_window_view``) and accumulate floating-point sums in float64, so a whole ResNet-50
runs through the interpreter in seconds and the reference is more exact than any kernel it checks.

>>> import relaybench as rb
>>> from relaybench.ir.type_infer import infer_expr
>>> x = rb.var("x", shape=(1, 3, 224, 224))
>>> w = rb.var("w")                       # its type follows from channels and kernel_size
>>> y = conv2d(x, w, strides=2, padding=3, channels=64, kernel_size=7)
>>> infer_expr(y), w.checked_type
(Tensor[(1, 64, 112, 112), float32], Tensor[(64, 3, 7, 7), float32])
>>> infer_expr(max_pool2d(y, pool_size=3, strides=2, padding=1))
Tensor[(1, 64, 56, 56), float32]
>>> infer_expr(dense(rb.var("h", shape=("n", 512)), rb.var("w2", shape=(10, 512))))
Tensor[(n, 10), float32]
>>> infer_expr(batch_norm(x, *[rb.var(f"p{i}") for i in range(4)]))
(Tensor[(1, 3, 224, 224), float32], Tensor[(3), float32], Tensor[(3), float32])

The 1-D and 3-D convolutions and poolings are the same definitions over the axes ``W`` and
``DHW``; ``padding`` lists every axis's front pad, then every axis's back pad:

>>> v = rb.var("v", shape=(1, 3, 16, 32, 32))
>>> infer_expr(max_pool3d(conv3d(v, rb.var("k"), padding=1, channels=8, kernel_size=3), pool_size=2,
...                       strides=2))
Tensor[(1, 8, 8, 16, 16), float32]
>>> infer_expr(upsampling(x, scale_h=2.0, scale_w=0.5))
Tensor[(1, 3, 448, 112), float32]
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..ir.layout import Layout
from ..ir.symbolic import ANY, add, floordiv, format_dim, mul, prod, sub
from ..ir.types import TensorType, TupleType, check_dtype
from ._layout import (batch_norm_layout, bias_add_layout, conv2d_layout, dropout_layout,
                      elemwise_layout, original_layout, pad_layout, pool_layout, softmax_layout)
from ._rel import (as_int, fail, fmt_shape, int_tuple, known, normalize_axis, provably_different,
                   relation, same_dim, tensor)
from . import _compute as C
from .registry import OpCaller, OpDef, OpPattern, register
from .tensor import identity_rel

__all__ = ["relu", "leaky_relu", "prelu", "bias_add", "conv2d", "conv2d_transpose", "dense", "matmul",
           "batch_matmul", "max_pool2d", "avg_pool2d", "global_max_pool2d", "global_avg_pool2d",
           "adaptive_avg_pool2d", "softmax", "log_softmax", "batch_norm", "layer_norm", "dropout", "lrn",
           "pad", "batch_flatten", "conv2d_output_hw", "pool2d_output_hw", "conv1d", "conv3d",
           "max_pool1d", "max_pool3d", "avg_pool1d", "avg_pool3d", "adaptive_max_pool1d",
           "adaptive_avg_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d", "adaptive_avg_pool3d",
           "upsampling", "upsampling3d", "space_to_depth", "depth_to_space", "instance_norm",
           "group_norm", "l2_normalize", "conv1d_transpose", "conv3d_transpose", "mirror_pad"]


# =============================================================================================
# Shared pieces: attribute normalizers, window arithmetic, numpy helpers

def _layout_attr(name: str, value, axes: str, allow_empty: bool = False) -> str:
    """A layout string whose primal axes are exactly ``axes`` (in any order)."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a layout string, got {value!r}")
    if value == "" and allow_empty:
        return value
    layout = Layout(value)
    if sorted(layout.primal) != sorted(axes):
        raise ValueError(f"{name}={value!r} must have the axes {', '.join(axes)}")
    return value


def _spatial_layout_attr(name: str, value, allow_empty: bool = False) -> str:
    """A pooling layout: any axes, but H and W present and not split into blocks."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a layout string, got {value!r}")
    if value == "" and allow_empty:
        return value
    layout = Layout(value)
    if "H" not in layout or "W" not in layout or "h" in layout or "w" in layout:
        raise ValueError(f"{name}={value!r} must have the axes H and W, and neither may be split into "
                         f"blocks")
    return value


def _out_dtype_attr(value) -> str:
    return "" if value in ("", None) else check_dtype(value)


def _padding_attr(value, name: str = "padding") -> tuple:
    """1, 2 (top/bottom, left/right) or 4 values (top, left, bottom, right) as 4 values."""
    pad = int_tuple(value, (1, 2, 4), name, minimum=0)
    if len(pad) == 1:
        return pad * 4
    if len(pad) == 2:
        return pad + pad
    return pad


def _float_attr(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    return float(value)


def _bool_attr(value, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ValueError(f"{name} must be True or False, got {value!r}")


def _float_tensor(t, what: str = "data") -> TensorType:
    t = tensor(t, what)
    if not t.dtype.startswith(("float", "bfloat")):
        fail(f"{what} must be a floating-point tensor, got {t}")
    return t


def _window_extent(extent, kernel, stride, dilation, pad_before, pad_after, axis, what, ceil_mode=False):
    """The number of windows along one axis, Relay's formula:

    ``(in + pad_before + pad_after - ((k - 1) * dilation + 1) [+ stride - 1 if ceil]) // stride + 1``.

    Symbolic extents give symbolic results and ``?`` gives ``?``; fails when the dilated window is
    larger than the padded input.
    """
    dilated = add(mul(sub(kernel, 1), dilation), 1)
    padded = add(extent, pad_before + pad_after)
    if isinstance(padded, int) and isinstance(dilated, int) and padded < dilated:
        fail(f"{what}'s {axis} ({dilated} with dilation) is larger than the padded input's {axis} "
             f"({padded})")
    span = sub(padded, dilated)
    if ceil_mode:
        span = add(span, stride - 1)
    return add(floordiv(span, stride), 1)


def conv2d_output_hw(h, w, kernel_size, strides, padding, dilation) -> tuple:
    """The output height and width of a 2-D convolution.

    >>> conv2d_output_hw(224, 224, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1))
    (112, 112)
    """
    pt, pl, pb, pr = padding
    return (_window_extent(h, kernel_size[0], strides[0], dilation[0], pt, pb, "height", "the kernel"),
            _window_extent(w, kernel_size[1], strides[1], dilation[1], pl, pr, "width", "the kernel"))


def pool2d_output_hw(h, w, pool_size, strides, padding, dilation, ceil_mode=False) -> tuple:
    """The output height and width of a 2-D pooling (``ceil_mode`` rounds the window count up).

    >>> pool2d_output_hw(112, 112, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1))
    (56, 56)
    >>> pool2d_output_hw(6, 6, (2, 2), (3, 3), (0, 0, 0, 0), (1, 1), ceil_mode=True)
    (3, 3)
    """
    pt, pl, pb, pr = padding
    return (_window_extent(h, pool_size[0], strides[0], dilation[0], pt, pb, "height", "the pooling window",
                           ceil_mode),
            _window_extent(w, pool_size[1], strides[1], dilation[1], pl, pr, "width", "the pooling window",
                           ceil_mode))


def _convert(shape, src: Layout, dst, what) -> tuple:
    """``shape`` from layout ``src`` to ``dst``, failing with ``what`` named (a str, or a
    function giving one: a type's text is made only for the error)."""
    try:
        return src.convert_shape(shape, dst)
    except ValueError as err:
        fail(f"{what() if callable(what) else what}: {err}")


def _accumulator(dtypes, out_dtype: str):
    """The dtype a reference sums products in: float64 for floats, and for integers of at most
    16 bits (whose products and sums float64 holds exactly, so BLAS can do the work); int64 for
    wider integers."""
    out = np.dtype(out_dtype)
    if out.kind == "f":
        return np.float64
    if all(np.dtype(d).kind in "iub" and np.dtype(d).itemsize <= 2 for d in dtypes):
        return np.float64
    return np.int64


def _operand(x, acc, out_dtype: str):
    """An input as the kernel sees it: cast to an integer ``out_dtype`` first (as Relay's kernels
    do), then to the accumulator."""
    if np.dtype(out_dtype).kind in "iu" and x.dtype.kind == "f":
        x = x.astype(out_dtype)
    return x.astype(acc, copy=False)


def _finish(y, dtype):
    """A result in the accumulator's dtype cast to ``dtype`` (integers wrap like machine integers)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu" and y.dtype.kind == "f":
        y = np.rint(y).astype(np.int64)
    return y.astype(dtype, copy=False)


def _windows(x, axes, window, strides, dilation):
    """A view of ``x`` with each of ``axes`` replaced by the window positions along it, and one
    trailing axis per window axis running over the window's (dilated) taps."""
    dilated = [(k - 1) * d + 1 for k, d in zip(window, dilation)]
    view = sliding_window_view(x, dilated, axis=axes)
    index = [slice(None)] * x.ndim + [slice(None, None, d) for d in dilation]
    for axis, s in zip(axes, strides):
        index[axis] = slice(None, None, s)
    return view[tuple(index)]


def _pad_axes(x, pads: dict, value=0):
    """``x`` padded (or, for negative amounts, cropped) on the given axes: ``{axis: (before, after)}``."""
    crop = [slice(None)] * x.ndim
    width = [(0, 0)] * x.ndim
    for axis, (before, after) in pads.items():
        width[axis] = (max(before, 0), max(after, 0))
        crop[axis] = slice(max(-before, 0), x.shape[axis] - max(-after, 0))
    x = x[tuple(crop)]
    if any(w != (0, 0) for w in width):
        x = np.pad(x, width, constant_values=value)
    return x


def _channel_vector_rel(data: TensorType, axis_attr: int, others, names) -> list:
    """Types of per-channel vectors (``[data.shape[axis]]`` of the data's dtype): each known one
    is checked, each unknown one is given that type."""
    axis = normalize_axis(axis_attr, data.ndim)
    vec = TensorType((data.shape[axis],), data.dtype)
    out = []
    for t, name in zip(others, names):
        if known(t):
            t = tensor(t, name)
            if t.ndim != 1 or not same_dim(t.shape[0], data.shape[axis]):
                fail(f"{name} must be {vec} (axis {axis_attr} of {data}), got {t}")
            if t.dtype != data.dtype:
                fail(f"{name} has dtype {t.dtype} but the data has {data.dtype}")
            out.append(t)
        else:
            out.append(vec)
    return out


def _along(x, vec, axis: int):
    """``vec`` shaped to broadcast along ``axis`` of ``x``."""
    shape = [1] * x.ndim
    shape[axis] = vec.shape[0]
    return vec.reshape(shape)


def _axis_attr(a: dict) -> dict:
    a["axis"] = as_int(a["axis"], "axis")
    return a


# =============================================================================================
# Activations

relu = register(OpDef("nn.relu", ("data",), identity_rel, OpPattern.ELEMWISE, layout=elemwise_layout,
                      reference=lambda x, attrs: np.maximum(x, np.zeros((), x.dtype)),
                      compute=C.relu_compute, doc="max(x, 0)."))


def _leaky_relu_reference(x, attrs):
    return np.where(x > 0, x, x * np.asarray(attrs.alpha, x.dtype)).astype(x.dtype, copy=False)


leaky_relu = register(OpDef(
    "nn.leaky_relu", ("data",), identity_rel, OpPattern.ELEMWISE, attrs={"alpha": 0.25},
    normalize=lambda a: dict(a, alpha=_float_attr(a["alpha"], "alpha")), reference=_leaky_relu_reference,
    compute=C.leaky_relu_compute,
    layout=elemwise_layout,
    doc="``x`` where ``x > 0``, else ``alpha * x``."))


@relation("PReluRel")
def prelu_rel(types, attrs):
    """``PReluRel``: ``alpha`` is ``[data.shape[axis]]``; the output has the data's type."""
    data, alpha = types
    if not known(data):
        return None
    data = tensor(data, "data")
    (alpha,) = _channel_vector_rel(data, attrs.axis, [alpha], ["alpha"])
    return [data, alpha, data]


def _prelu_reference(x, alpha, attrs):
    slope = _along(x, alpha, normalize_axis(attrs.axis, x.ndim))
    return np.where(x > 0, x, x * slope).astype(x.dtype, copy=False)


prelu = register(OpDef(
    "nn.prelu", ("data", "alpha"), prelu_rel, OpPattern.BROADCAST, attrs={"axis": 1},
    normalize=_axis_attr, reference=_prelu_reference, compute=C.prelu_compute,
    doc="Leaky ReLU with a learned slope per channel: ``x`` where ``x > 0``, else ``alpha[c] * x`` "
        "with ``c`` the index along ``axis``."))


# =============================================================================================
# nn.bias_add

@relation("BiasAddRel")
def bias_add_rel(types, attrs):
    """``BiasAddRel``: ``bias`` is ``[data.shape[axis]]``; the output has the data's type."""
    data, bias = types
    if not known(data):
        return None
    data = tensor(data, "data")
    (bias,) = _channel_vector_rel(data, attrs.axis, [bias], ["bias"])
    return [data, bias, data]


def _bias_add_reference(x, b, attrs):
    return (x + _along(x, b, normalize_axis(attrs.axis, x.ndim))).astype(x.dtype, copy=False)


bias_add = register(OpDef(
    "nn.bias_add", ("data", "bias"), bias_add_rel, OpPattern.BROADCAST, attrs={"axis": 1},
    normalize=_axis_attr, reference=_bias_add_reference, compute=C.bias_add_compute,
    layout=bias_add_layout,
    doc="Add a 1-d ``bias`` along ``axis`` of ``data``."))


# =============================================================================================
# nn.conv2d

def _normalize_conv2d(a: dict) -> dict:
    a["strides"] = int_tuple(a["strides"], (2,), "strides", minimum=1)
    a["padding"] = _padding_attr(a["padding"])
    a["dilation"] = int_tuple(a["dilation"], (2,), "dilation", minimum=1)
    a["groups"] = as_int(a["groups"], "groups", minimum=1)
    if a["channels"] is not None:
        a["channels"] = as_int(a["channels"], "channels", minimum=1)
    if a["kernel_size"] is not None:
        a["kernel_size"] = int_tuple(a["kernel_size"], (2,), "kernel_size", minimum=1)
    a["data_layout"] = _layout_attr("data_layout", a["data_layout"], "NCHW")
    a["kernel_layout"] = _layout_attr("kernel_layout", a["kernel_layout"], "OIHW")
    a["out_layout"] = _layout_attr("out_layout", a["out_layout"], "NCHW", allow_empty=True)
    a["out_dtype"] = _out_dtype_attr(a["out_dtype"])
    if "output_padding" in a:
        a["output_padding"] = int_tuple(a["output_padding"], (2, 1), "output_padding", minimum=0)
        if len(a["output_padding"]) == 1:
            a["output_padding"] *= 2
        if any(p >= s for p, s in zip(a["output_padding"], a["strides"])):
            raise ValueError(f"output_padding={a['output_padding']} must be smaller than the strides "
                             f"{a['strides']}")
    return a


def _conv_data(data, attrs):
    """The data's type and its (N, C, H, W) extents, checked against ``data_layout``."""
    data = tensor(data, "data")
    dl = Layout(attrs.data_layout)
    if data.ndim != dl.ndim:
        fail(f"data {data} has rank {data.ndim} but data_layout {dl} needs rank {dl.ndim}")
    n, c, h, w = _convert(data.shape, dl, "NCHW", lambda: f"data {data}")
    if isinstance(c, int) and c % attrs.groups:
        fail(f"data has {c} input channels, which groups={attrs.groups} does not divide")
    return data, (n, c, h, w)


def _conv_weight(weight, attrs, canonical: str) -> tuple:
    """The weight's extents in the ``canonical`` kernel layout (``OIHW`` or ``IOHW``)."""
    weight = tensor(weight, "weight")
    kl = Layout(attrs.kernel_layout)
    if weight.ndim != kl.ndim:
        fail(f"weight {weight} has rank {weight.ndim} but kernel_layout {kl} needs rank {kl.ndim}")
    dims = _convert(weight.shape, kl, canonical, lambda: f"weight {weight}")
    ks = attrs.kernel_size
    if ks is not None and (provably_different(dims[2], ks[0]) or provably_different(dims[3], ks[1])):
        fail(f"kernel_size={ks} but the weight's kernel is {fmt_shape(dims[2:])}")
    return dims


def _implied_weight(channel_dims, canonical: str, attrs, dtype) -> TensorType:
    """The weight that ``channels`` and ``kernel_size`` imply: ``channel_dims`` (its first two
    axes in the ``canonical`` kernel layout) and the kernel size, in ``kernel_layout``."""
    if attrs.channels % attrs.groups:
        fail(f"channels={attrs.channels} is not divisible by groups={attrs.groups}")
    what = f"the weight implied by channels={attrs.channels} and kernel_size={attrs.kernel_size}"
    shape = _convert(tuple(channel_dims) + attrs.kernel_size, Layout(canonical), attrs.kernel_layout, what)
    return TensorType(shape, dtype)


def _conv_output(n, channels, out_hw, attrs, dtype) -> TensorType:
    ol = attrs.out_layout or attrs.data_layout
    oshape = _convert((n, channels) + tuple(out_hw), Layout("NCHW"), ol, f"the output in layout {ol}")
    return TensorType(oshape, attrs.out_dtype or dtype)


@relation("Conv2DRel")
def conv2d_rel(types, attrs):
    """``Conv2DRel``: data and weight in their layouts; the output in ``out_layout``.

    Shapes are converted to NCHW (data) and OIHW (weight) to check and compute, then the output
    is converted to ``out_layout``. With ``channels`` and ``kernel_size`` the weight's type follows
    (``[channels, C / groups, kh, kw]`` in OIHW; depthwise is ``[C * multiplier, 1, kh, kw]``) and
    an unknown weight is given it.
    """
    data, weight = types
    if not known(data):
        return None
    data, (n, c, h, w) = _conv_data(data, attrs)
    groups = attrs.groups
    c_per_group = floordiv(c, groups)
    implied = None
    if attrs.channels is not None and attrs.kernel_size is not None:
        implied = _implied_weight((attrs.channels, c_per_group), "OIHW", attrs, data.dtype)
    if known(weight):
        o, i, kh, kw = _conv_weight(weight, attrs, "OIHW")
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
        channels, ks = attrs.channels, attrs.kernel_size
    else:
        return None
    out = _conv_output(n, channels, conv2d_output_hw(h, w, ks, attrs.strides, attrs.padding, attrs.dilation),
                       attrs, data.dtype)
    return out if known(weight) else [data, implied, out]


_IM2COL_BLOCK = 1 << 22
"""At most this many im2col elements (32 MiB of float64) exist at once; larger images are done
in blocks of output rows."""


def _conv2d_nchw(x, w, strides, padding, dilation, groups, out_dtype):
    """Grouped 2-D convolution of NCHW data with an OIHW weight, as batched matrix products (one
    per group): im2col rows, one per output pixel, times the flattened kernels."""
    acc = _accumulator((x.dtype, w.dtype), out_dtype)
    pt, pl, pb, pr = padding
    xp = np.pad(_operand(x, acc, out_dtype), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    o, cg, kh, kw = w.shape
    win = _windows(xp, (2, 3), (kh, kw), strides, dilation)          # N, C, OH, OW, kh, kw
    n, c, oh, ow = win.shape[:4]
    og = o // groups
    kernels = _operand(w, acc, out_dtype).reshape(groups, og, cg * kh * kw).transpose(0, 2, 1)
    y = np.empty((groups, n, oh, ow, og), dtype=acc)
    step = max(1, _IM2COL_BLOCK // max(1, ow * c * kh * kw))
    for b in range(n):
        for r in range(0, oh, step):
            part = win[b, :, r:r + step]                               # C, rows, OW, kh, kw
            rows = part.shape[1]
            cols = (part.reshape(groups, cg, rows, ow, kh, kw).transpose(0, 2, 3, 1, 4, 5)
                    .reshape(groups, rows * ow, cg * kh * kw))
            y[:, b, r:r + rows] = np.matmul(cols, kernels).reshape(groups, rows, ow, og)
    return _finish(y.transpose(1, 0, 4, 2, 3).reshape(n, o, oh, ow), out_dtype)


def _conv2d_reference(x, w, attrs):
    xn = Layout(attrs.data_layout).transform_array(x, "NCHW")
    wn = Layout(attrs.kernel_layout).transform_array(w, "OIHW")
    y = _conv2d_nchw(xn, wn, attrs.strides, attrs.padding, attrs.dilation, attrs.groups,
                     attrs.out_dtype or x.dtype.name)
    return np.ascontiguousarray(Layout("NCHW").transform_array(y, attrs.out_layout or attrs.data_layout))


conv2d = register(OpDef(
    "nn.conv2d", ("data", "weight"), conv2d_rel, OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"strides": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1, "channels": None,
           "kernel_size": None, "data_layout": "NCHW", "kernel_layout": "OIHW", "out_layout": "",
           "out_dtype": ""},
    normalize=_normalize_conv2d, reference=_conv2d_reference, compute=C.conv2d_compute,
    layout=conv2d_layout,
    doc="2-D convolution. ``padding`` is 1, 2 (top/bottom, left/right) or 4 values (top, left, "
        "bottom, right); ``groups`` splits channels (``groups`` equal to the input channels is a "
        "depthwise convolution, its OIHW weight ``[C * multiplier, 1, kh, kw]``); layouts may be "
        "permuted (``NHWC``, ``HWIO``) or blocked (``NCHW16c``, ``OIHW16i16o``); an empty "
        "``out_layout`` means ``data_layout`` and an empty ``out_dtype`` the data's dtype."))


# =============================================================================================
# nn.conv2d_transpose

@relation("Conv2DTransposeRel")
def conv2d_transpose_rel(types, attrs):
    """``Conv2DTransposeRel``: the weight is ``[C, channels / groups, kh, kw]`` in IOHW; the output
    extent is ``(in - 1) * stride + (k - 1) * dilation + 1 - pad_before - pad_after + output_padding``.
    """
    data, weight = types
    if not known(data):
        return None
    data, (n, c, h, w) = _conv_data(data, attrs)
    groups = attrs.groups
    implied = None
    if attrs.channels is not None and attrs.kernel_size is not None:
        implied = _implied_weight((c, attrs.channels // groups), "IOHW", attrs, data.dtype)
    if known(weight):
        i, o, kh, kw = _conv_weight(weight, attrs, "IOHW")
        if not same_dim(c, i):
            fail(f"data has {format_dim(c)} input channels but the weight expects {format_dim(i)}")
        channels = mul(o, groups)
        if attrs.channels is not None and provably_different(channels, attrs.channels):
            fail(f"channels={attrs.channels} but the weight gives {format_dim(channels)} output channels "
                 f"({format_dim(o)} per group, {groups} groups)")
        ks = (kh, kw)
    elif implied is not None:
        channels, ks = attrs.channels, attrs.kernel_size
    else:
        return None
    out_hw = []
    pt, pl, pb, pr = attrs.padding
    for axis, extent, k, s, d, p, op_ in (("height", h, ks[0], attrs.strides[0], attrs.dilation[0], pt + pb,
                                           attrs.output_padding[0]),
                                          ("width", w, ks[1], attrs.strides[1], attrs.dilation[1], pl + pr,
                                           attrs.output_padding[1])):
        size = add(mul(sub(extent, 1), s), add(mul(sub(k, 1), d), 1 - p + op_))
        if isinstance(size, int) and size < 1:
            fail(f"the output's {axis} would be {size}: the padding ({p}) removes the whole output")
        out_hw.append(size)
    out = _conv_output(n, channels, out_hw, attrs, data.dtype)
    return out if known(weight) else [data, implied, out]


def _conv2d_transpose_reference(x, w, attrs):
    """The transposed convolution as a convolution: the input spread out by the strides (zeros
    between), padded by ``dilated kernel - 1 - padding`` (cropped where that is negative), and
    convolved at stride 1 with the kernels flipped and their in/out axes swapped."""
    out_dtype = attrs.out_dtype or x.dtype.name
    xn = Layout(attrs.data_layout).transform_array(x, "NCHW")
    wn = Layout(attrs.kernel_layout).transform_array(w, "IOHW")
    n, c, h, wd = xn.shape
    _, og, kh, kw = wn.shape
    (sh, sw), (dh, dw), g = attrs.strides, attrs.dilation, attrs.groups
    spread = np.zeros((n, c, (h - 1) * sh + 1, (wd - 1) * sw + 1), dtype=xn.dtype)
    spread[:, :, ::sh, ::sw] = xn
    pt, pl, pb, pr = attrs.padding
    eh, ew = (kh - 1) * dh - pt, (kw - 1) * dw - pl
    spread = _pad_axes(spread, {2: (eh, (kh - 1) * dh - pb + attrs.output_padding[0]),
                                3: (ew, (kw - 1) * dw - pr + attrs.output_padding[1])})
    kernels = (wn.reshape(g, c // g, og, kh, kw).transpose(0, 2, 1, 3, 4)[..., ::-1, ::-1]
               .reshape(g * og, c // g, kh, kw))
    y = _conv2d_nchw(spread, kernels, (1, 1), (0, 0, 0, 0), (dh, dw), g, out_dtype)
    return np.ascontiguousarray(Layout("NCHW").transform_array(y, attrs.out_layout or attrs.data_layout))


conv2d_transpose = register(OpDef(
    "nn.conv2d_transpose", ("data", "weight"), conv2d_transpose_rel, OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"strides": (1, 1), "padding": (0, 0), "output_padding": (0, 0), "dilation": (1, 1), "groups": 1,
           "channels": None, "kernel_size": None, "data_layout": "NCHW", "kernel_layout": "IOHW",
           "out_layout": "", "out_dtype": ""},
    normalize=_normalize_conv2d, reference=_conv2d_transpose_reference,
    compute=C.conv2d_transpose_compute, layout=conv2d_layout,
    doc="2-D transposed convolution (the gradient of ``nn.conv2d`` with respect to its data): each "
        "input pixel scatters its kernel-weighted values into a ``stride``-spaced output. The "
        "weight is IOHW, ``[C, channels / groups, kh, kw]``; ``padding`` trims the output and "
        "``output_padding`` (smaller than the stride) adds rows and columns at its bottom and right."))


# =============================================================================================
# nn.dense, nn.matmul, nn.batch_matmul

def _normalize_matmul(a: dict) -> dict:
    if a.get("units") is not None:
        a["units"] = as_int(a["units"], "units", minimum=1)
    for flag in ("transpose_a", "transpose_b"):
        if flag in a:
            a[flag] = _bool_attr(a[flag], flag)
    a["out_dtype"] = _out_dtype_attr(a["out_dtype"])
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


def _matmul_reference(a, b, out_dtype, transpose_a, transpose_b):
    acc = _accumulator((a.dtype, b.dtype), out_dtype)
    a, b = _operand(a, acc, out_dtype), _operand(b, acc, out_dtype)
    if transpose_a:
        a = np.swapaxes(a, -1, -2)
    if transpose_b:
        b = np.swapaxes(b, -1, -2)
    return _finish(np.matmul(a, b), out_dtype)


dense = register(OpDef(
    "nn.dense", ("data", "weight"), dense_rel, OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"units": None, "out_dtype": ""}, normalize=_normalize_matmul,
    reference=lambda x, w, attrs: _matmul_reference(x, w, attrs.out_dtype or x.dtype.name, False, True),
    compute=C.dense_compute,
    doc="``data @ weight.T``: data ``[..., K]``, weight ``[units, K]``."))


@relation("MatmulRel")
def matmul_rel(types, attrs):
    """``MatmulRel``: ``tensor_a`` ``[..., K]`` (``[..., K, M]`` transposed), ``tensor_b`` 2-D,
    ``[K, N]`` (``[N, K]`` transposed) -> ``[..., N]`` (``[..., M, N]``)."""
    a, b = types
    if not known(a):
        return None
    a = tensor(a, "tensor_a")
    if a.ndim < (2 if attrs.transpose_a else 1):
        fail(f"tensor_a must have rank at least {2 if attrs.transpose_a else 1}, got {a}")
    k = a.shape[-2] if attrs.transpose_a else a.shape[-1]
    lead = a.shape[:-2] + (a.shape[-1],) if attrs.transpose_a else a.shape[:-1]
    out_dtype = attrs.out_dtype or a.dtype
    if not known(b):
        if attrs.units is None:
            return None
        bshape = (attrs.units, k) if attrs.transpose_b else (k, attrs.units)
        return [a, TensorType(bshape, a.dtype), TensorType(lead + (attrs.units,), out_dtype)]
    b = tensor(b, "tensor_b")
    if b.ndim != 2:
        fail(f"tensor_b must have rank 2, got {b}")
    n, bk = b.shape if attrs.transpose_b else b.shape[::-1]
    if attrs.units is not None and provably_different(n, attrs.units):
        fail(f"tensor_b {b} gives {format_dim(n)} output features but units={attrs.units}")
    if not same_dim(k, bk):
        fail(f"tensor_a {a} has {format_dim(k)} features to reduce but tensor_b {b} has {format_dim(bk)}")
    return TensorType(lead + (n,), out_dtype)


matmul = register(OpDef(
    "nn.matmul", ("tensor_a", "tensor_b"), matmul_rel, OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"units": None, "out_dtype": "", "transpose_a": False, "transpose_b": False},
    normalize=_normalize_matmul,
    reference=lambda a, b, attrs: _matmul_reference(a, b, attrs.out_dtype or a.dtype.name,
                                                    attrs.transpose_a, attrs.transpose_b),
    compute=C.matmul_compute,
    doc="``op(a) @ op(b)`` with ``op`` a transpose of the last two axes where asked: ``tensor_a`` "
        "``[..., K]``, ``tensor_b`` ``[K, N]``. ``nn.dense`` is ``transpose_b=True``."))


@relation("BatchMatmulRel")
def batch_matmul_rel(types, attrs):
    """``BatchMatmulRel``: ``x`` ``[B, M, K]``, ``y`` ``[B, K, N]`` (each transposed on request;
    ``y`` defaults to ``[B, N, K]``) -> ``[B, M, N]``; a batch of 1 broadcasts."""
    x, y = types
    if not (known(x) and known(y)):
        return None
    x, y = tensor(x, "x"), tensor(y, "y")
    for t, name in ((x, "x"), (y, "y")):
        if t.ndim != 3:
            fail(f"{name} must have rank 3 ([batch, rows, columns]), got {t}")
    bx, m, kx = (x.shape[0], x.shape[2], x.shape[1]) if attrs.transpose_a else x.shape
    by, ky, n = (y.shape[0], y.shape[2], y.shape[1]) if attrs.transpose_b else y.shape
    if not same_dim(kx, ky):
        fail(f"x {x} has {format_dim(kx)} features to reduce but y {y} has {format_dim(ky)} "
             f"(transpose_a={attrs.transpose_a}, transpose_b={attrs.transpose_b})")
    if bx == 1 or (bx is ANY and by != 1):        # x broadcasts, or y knows the batch better
        batch = by
    elif by == 1 or same_dim(bx, by):
        batch = bx
    else:
        fail(f"the batch sizes of x {x} and y {y} differ ({format_dim(bx)} vs {format_dim(by)})")
    return TensorType((batch, m, n), attrs.out_dtype or x.dtype)


batch_matmul = register(OpDef(
    "nn.batch_matmul", ("x", "y"), batch_matmul_rel, OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"out_dtype": "", "transpose_a": False, "transpose_b": True}, normalize=_normalize_matmul,
    reference=lambda x, y, attrs: _matmul_reference(x, y, attrs.out_dtype or x.dtype.name,
                                                    attrs.transpose_a, attrs.transpose_b),
    compute=C.batch_matmul_compute,
    doc="A matrix product per batch element: ``x[b] @ y[b].T`` by default (``transpose_b=True``)."))


# =============================================================================================
# Pooling: nn.max_pool2d, nn.avg_pool2d, the global pools, nn.adaptive_avg_pool2d

def _normalize_pool(a: dict) -> dict:
    a["pool_size"] = int_tuple(a["pool_size"], (2,), "pool_size", minimum=1)
    a["strides"] = int_tuple(a["strides"], (2,), "strides", minimum=1)
    a["dilation"] = int_tuple(a["dilation"], (2,), "dilation", minimum=1)
    a["padding"] = _padding_attr(a["padding"])
    a["layout"] = _spatial_layout_attr("layout", a["layout"])
    a["out_layout"] = _spatial_layout_attr("out_layout", a["out_layout"], allow_empty=True)
    a["ceil_mode"] = _bool_attr(a["ceil_mode"], "ceil_mode")
    if "count_include_pad" in a:
        a["count_include_pad"] = _bool_attr(a["count_include_pad"], "count_include_pad")
    return a


def _pool_data(data, attrs):
    """The data's type, its layout and the positions of H and W (checked against ``layout``)."""
    data = tensor(data, "data")
    layout = Layout(attrs.layout)
    if data.ndim != layout.ndim:
        fail(f"data {data} has rank {data.ndim} but layout {layout} needs rank {layout.ndim}")
    try:
        layout.primal_extents(data.shape)
    except ValueError as err:
        fail(f"data {data}: {err}")
    return data, layout, layout.index_of("H"), layout.index_of("W")


def _pool_out(data, layout, shape, attrs) -> TensorType:
    out_layout = attrs.out_layout or attrs.layout
    if out_layout != attrs.layout:
        if not layout.has_same_axes(out_layout):
            fail(f"out_layout {out_layout} has other axes than layout {layout}")
        shape = _convert(shape, layout, out_layout, f"the output in layout {out_layout}")
    return TensorType(shape, data.dtype)


@relation("Pool2DRel")
def pool2d_rel(types, attrs):
    """``Pool2DRel``: H and W become the number of windows (see :func:`pool2d_output_hw`)."""
    (data,) = types
    if not known(data):
        return None
    data, layout, hi, wi = _pool_data(data, attrs)
    shape = list(data.shape)
    shape[hi], shape[wi] = pool2d_output_hw(shape[hi], shape[wi], attrs.pool_size, attrs.strides,
                                            attrs.padding, attrs.dilation, attrs.ceil_mode)
    return _pool_out(data, layout, tuple(shape), attrs)


def _pool_geometry(x, attrs):
    """The positions of H and W, and per axis ``(axis, extent, pad_before, pad_after, extra)``:
    ``extra`` is what ``ceil_mode``'s last window needs past the declared padding."""
    layout = Layout(attrs.layout)
    hi, wi = layout.index_of("H"), layout.index_of("W")
    pt, pl, pb, pr = attrs.padding
    geometry = []
    for axis, before, after, k, s, d in zip((hi, wi), (pt, pl), (pb, pr), attrs.pool_size, attrs.strides,
                                            attrs.dilation):
        extent = x.shape[axis]
        span = extent + before + after - ((k - 1) * d + 1)
        out = (span + (s - 1 if attrs.ceil_mode else 0)) // s + 1
        extra = max(0, (out - 1) * s + (k - 1) * d + 1 - (extent + before + after))
        geometry.append((axis, extent, before, after, extra))
    return hi, wi, geometry


def _lowest(dtype):
    dtype = np.dtype(dtype)
    return np.finfo(dtype).min if dtype.kind == "f" else np.iinfo(dtype).min if dtype.kind in "iu" else False


def _max_pool2d_reference(x, attrs):
    hi, wi, geometry = _pool_geometry(x, attrs)
    # padding never wins a max: it holds the dtype's lowest value, as Relay's kernels use
    xp = _pad_axes(x, {axis: (b, a + extra) for axis, _, b, a, extra in geometry}, _lowest(x.dtype))
    y = _windows(xp, (hi, wi), attrs.pool_size, attrs.strides, attrs.dilation).max(axis=(-2, -1))
    return _relayout(y, attrs)


def _avg_pool2d_reference(x, attrs):
    hi, wi, geometry = _pool_geometry(x, attrs)
    xp = _pad_axes(x.astype(np.float64), {axis: (b, a + extra) for axis, _, b, a, extra in geometry})
    sums = _windows(xp, (hi, wi), attrs.pool_size, attrs.strides, attrs.dilation).sum(axis=(-2, -1))
    # the divisor: how many taps of each window fall on the input (and, with count_include_pad,
    # on the declared padding, never on ceil_mode's extra); separable into H and W counts
    counts = []
    for (axis, extent, before, after, extra), k, s, d in zip(geometry, attrs.pool_size, attrs.strides,
                                                            attrs.dilation):
        mask = np.zeros(before + extent + after + extra)
        if attrs.count_include_pad:
            mask[:before + extent + after] = 1
        else:
            mask[before:before + extent] = 1
        taps = _windows(mask, (0,), (k,), (s,), (d,)).sum(axis=-1)
        counts.append(_along(sums, taps, axis))
    return _relayout(_mean_as(sums / np.maximum(counts[0] * counts[1], 1), x.dtype), attrs)


def _mean_as(y, dtype):
    """A mean (float64) in ``dtype``; integer means truncate toward zero, as integer division does."""
    if np.dtype(dtype).kind in "iu":
        y = np.trunc(y)
    return _finish(y, dtype)


def _relayout(y, attrs):
    if attrs.out_layout and attrs.out_layout != attrs.layout:
        y = Layout(attrs.layout).transform_array(y, attrs.out_layout)
    return np.ascontiguousarray(y)


_POOL_ATTRS = {"pool_size": (1, 1), "strides": (1, 1), "dilation": (1, 1), "padding": (0, 0),
               "layout": "NCHW", "out_layout": "", "ceil_mode": False}

max_pool2d = register(OpDef(
    "nn.max_pool2d", ("data",), pool2d_rel, OpPattern.OUT_ELEMWISE_FUSABLE, attrs=dict(_POOL_ATTRS),
    normalize=_normalize_pool, reference=_max_pool2d_reference, compute=C.max_pool2d_compute,
    layout=pool_layout,
    doc="The maximum over each ``pool_size`` window (taps ``dilation`` apart, windows ``strides`` "
        "apart) over H and W of any layout that keeps them whole (``NCHW``, ``NHWC``, ``NCHW16c``). "
        "``padding`` is 1, 2 or 4 values as for ``nn.conv2d``; ``ceil_mode`` adds a last, partial "
        "window where the input does not divide evenly (Relay's formula: such a window may lie "
        "wholly on the padding, and its maximum is then the dtype's lowest value)."))

avg_pool2d = register(OpDef(
    "nn.avg_pool2d", ("data",), pool2d_rel, OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs=dict(_POOL_ATTRS, count_include_pad=False), normalize=_normalize_pool,
    reference=_avg_pool2d_reference, compute=C.avg_pool2d_compute, layout=pool_layout,
    doc="The mean over each window, like ``nn.max_pool2d``. The divisor counts the window's taps "
        "on the input, and with ``count_include_pad`` those on the padding too (never those past "
        "it that ``ceil_mode`` adds)."))


def _normalize_global_pool(a: dict) -> dict:
    a["layout"] = _spatial_layout_attr("layout", a["layout"])
    a["out_layout"] = _spatial_layout_attr("out_layout", a["out_layout"], allow_empty=True)
    if "output_size" in a and a["output_size"] is not None:
        size = a["output_size"]
        size = (size,) if not isinstance(size, tuple) else size
        if len(size) not in (1, 2):
            raise ValueError(f"output_size must have 1 or 2 values, got {a['output_size']!r}")
        size = tuple(None if s is None else as_int(s, "output_size", minimum=1) for s in size)
        a["output_size"] = size * 2 if len(size) == 1 else size
    return a


@relation("GlobalPool2DRel")
def global_pool2d_rel(types, attrs):
    """``GlobalPool2DRel``: H and W become 1."""
    (data,) = types
    if not known(data):
        return None
    data, layout, hi, wi = _pool_data(data, attrs)
    shape = list(data.shape)
    shape[hi] = shape[wi] = 1
    return _pool_out(data, layout, tuple(shape), attrs)


def _global_pool_reference(reduce):
    def reference(x, attrs):
        layout = Layout(attrs.layout)
        axes = (layout.index_of("H"), layout.index_of("W"))
        return _relayout(_mean_as(reduce(x, axes), x.dtype), attrs)
    return reference


global_max_pool2d = register(OpDef(
    "nn.global_max_pool2d", ("data",), global_pool2d_rel, OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"layout": "NCHW", "out_layout": ""}, normalize=_normalize_global_pool,
    reference=_global_pool_reference(lambda x, axes: x.max(axis=axes, keepdims=True)),
    compute=C.global_max_pool2d_compute, layout=pool_layout,
    doc="The maximum over all of H and W; they become 1."))

global_avg_pool2d = register(OpDef(
    "nn.global_avg_pool2d", ("data",), global_pool2d_rel, OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"layout": "NCHW", "out_layout": ""}, normalize=_normalize_global_pool,
    reference=_global_pool_reference(lambda x, axes: x.mean(axis=axes, dtype=np.float64, keepdims=True)),
    compute=C.global_avg_pool2d_compute, layout=pool_layout,
    doc="The mean over all of H and W; they become 1."))


@relation("AdaptivePool2DRel")
def adaptive_pool2d_rel(types, attrs):
    """``AdaptivePool2DRel``: H and W become ``output_size`` (an omitted or None entry keeps the
    input's extent)."""
    (data,) = types
    if not known(data):
        return None
    data, layout, hi, wi = _pool_data(data, attrs)
    shape = list(data.shape)
    for axis, size in zip((hi, wi), attrs.output_size or (None, None)):
        if size is not None:
            shape[axis] = size
    return _pool_out(data, layout, tuple(shape), attrs)


def _bin_sums(x, axis: int, out: int):
    """Sums over PyTorch's adaptive bins along ``axis`` (bin ``i`` covers ``floor(i * n / out)`` up
    to ``ceil((i + 1) * n / out)``), from a running sum; and each bin's length."""
    n = x.shape[axis]
    i = np.arange(out)
    start, end = (i * n) // out, -((-(i + 1) * n) // out)
    run = np.cumsum(x, axis=axis)
    run = np.concatenate([np.zeros_like(np.take(run, [0], axis=axis)), run], axis=axis)
    return np.take(run, end, axis=axis) - np.take(run, start, axis=axis), end - start


def _adaptive_avg_pool2d_reference(x, attrs):
    layout = Layout(attrs.layout)
    hi, wi = layout.index_of("H"), layout.index_of("W")
    oh, ow = [x.shape[a] if s is None else s for a, s in zip((hi, wi), attrs.output_size or (None, None))]
    sums, nh = _bin_sums(x.astype(np.float64), hi, oh)
    sums, nw = _bin_sums(sums, wi, ow)
    return _relayout(_mean_as(sums / (_along(sums, nh, hi) * _along(sums, nw, wi)), x.dtype), attrs)


adaptive_avg_pool2d = register(OpDef(
    "nn.adaptive_avg_pool2d", ("data",), adaptive_pool2d_rel, OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"output_size": None, "layout": "NCHW", "out_layout": ""}, normalize=_normalize_global_pool,
    reference=_adaptive_avg_pool2d_reference, compute=C.adaptive_avg_pool2d_compute,
    layout=pool_layout,
    doc="The mean over ``output_size`` bins of H and W, PyTorch's bins: output row ``i`` of ``oh`` "
        "averages input rows ``floor(i * H / oh)`` to ``ceil((i + 1) * H / oh)`` (exclusive)."))


# =============================================================================================
# nn.softmax, nn.log_softmax

def _same_float_type_with_axis(types, attrs):
    """The output has the (floating-point) data's type; ``axis`` must be in range."""
    (data,) = types
    if not known(data):
        return None
    data = _float_tensor(data)
    normalize_axis(attrs.axis, data.ndim)
    return data


@relation("SoftmaxRel")
def softmax_rel(types, attrs):
    """``SoftmaxRel``: the output has the data's type; ``axis`` must be in range."""
    return _same_float_type_with_axis(types, attrs)


def _softmax_reference(x, attrs):
    z = x.astype(np.float64)
    z = z - z.max(axis=attrs.axis, keepdims=True)
    e = np.exp(z)
    return (e / e.sum(axis=attrs.axis, keepdims=True)).astype(x.dtype)


def _log_softmax_reference(x, attrs):
    z = x.astype(np.float64)
    z = z - z.max(axis=attrs.axis, keepdims=True)
    return (z - np.log(np.exp(z).sum(axis=attrs.axis, keepdims=True))).astype(x.dtype)


softmax = register(OpDef(
    "nn.softmax", ("data",), softmax_rel, OpPattern.OUT_ELEMWISE_FUSABLE, attrs={"axis": -1},
    normalize=_axis_attr, reference=_softmax_reference, compute=C.softmax_compute,
    layout=softmax_layout,
    doc="``exp(x) / sum(exp(x))`` along ``axis``."))

log_softmax = register(OpDef(
    "nn.log_softmax", ("data",), softmax_rel, OpPattern.OUT_ELEMWISE_FUSABLE, attrs={"axis": -1},
    normalize=_axis_attr, reference=_log_softmax_reference, compute=C.log_softmax_compute,
    layout=softmax_layout,
    doc="``x - log(sum(exp(x)))`` along ``axis``."))


# =============================================================================================
# Normalization: nn.batch_norm, nn.layer_norm, nn.lrn; nn.dropout

def _normalize_norm(a: dict) -> dict:
    a["axis"] = as_int(a["axis"], "axis")
    a["epsilon"] = _float_attr(a["epsilon"], "epsilon")
    if a["epsilon"] < 0:
        raise ValueError(f"epsilon must not be negative, got {a['epsilon']}")
    a["center"] = _bool_attr(a["center"], "center")
    a["scale"] = _bool_attr(a["scale"], "scale")
    return a


_BN_INPUTS = ("data", "gamma", "beta", "moving_mean", "moving_var")


@relation("BatchNormRel")
def batch_norm_rel(types, attrs):
    """``BatchNormRel``: ``gamma``, ``beta``, ``moving_mean`` and ``moving_var`` are
    ``[data.shape[axis]]``; the output is the tuple ``(data's type, that vector, that vector)``."""
    data = types[0]
    if not known(data):
        return None
    data = _float_tensor(data)
    vectors = _channel_vector_rel(data, attrs.axis, types[1:], _BN_INPUTS[1:])
    vec = TensorType((data.shape[normalize_axis(attrs.axis, data.ndim)],), data.dtype)
    return [data, *vectors, TupleType([data, vec, vec])]


def _batch_norm_reference(x, gamma, beta, mean, var, attrs):
    axis = normalize_axis(attrs.axis, x.ndim)
    inv = 1.0 / np.sqrt(var.astype(np.float64) + attrs.epsilon)
    if attrs.scale:
        inv = inv * gamma
    y = (x - _along(x, mean.astype(np.float64), axis)) * _along(x, inv, axis)
    if attrs.center:
        y = y + _along(x, beta.astype(np.float64), axis)
    return y.astype(x.dtype), mean, var


batch_norm = register(OpDef(
    "nn.batch_norm", _BN_INPUTS, batch_norm_rel, OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"axis": 1, "epsilon": 1e-5, "center": True, "scale": True}, normalize=_normalize_norm,
    reference=_batch_norm_reference, compute=C.batch_norm_compute, layout=batch_norm_layout,
    doc="Inference batch normalization along ``axis``: ``(x - moving_mean) / sqrt(moving_var + "
        "epsilon) * gamma + beta`` (no ``gamma`` without ``scale``, no ``beta`` without "
        "``center``). Returns Relay's tuple ``(out, mean, var)``, here the moving statistics; "
        "``[0]`` is the normalized data."))


@relation("LayerNormRel")
def layer_norm_rel(types, attrs):
    """``LayerNormRel``: ``gamma`` and ``beta`` are ``[data.shape[axis]]``; the output has the data's
    type."""
    data = types[0]
    if not known(data):
        return None
    data = _float_tensor(data)
    return [data, *_channel_vector_rel(data, attrs.axis, types[1:], ("gamma", "beta")), data]


def _layer_norm_reference(x, gamma, beta, attrs):
    axis = normalize_axis(attrs.axis, x.ndim)
    z = x.astype(np.float64)
    mean = z.mean(axis=axis, keepdims=True)
    var = ((z - mean) ** 2).mean(axis=axis, keepdims=True)
    y = (z - mean) / np.sqrt(var + attrs.epsilon)
    if attrs.scale:
        y = y * _along(y, gamma, axis)
    if attrs.center:
        y = y + _along(y, beta, axis)
    return y.astype(x.dtype)


layer_norm = register(OpDef(
    "nn.layer_norm", ("data", "gamma", "beta"), layer_norm_rel, OpPattern.OPAQUE,
    attrs={"axis": -1, "epsilon": 1e-5, "center": True, "scale": True}, normalize=_normalize_norm,
    reference=_layer_norm_reference, compute=C.layer_norm_compute,
    doc="``(x - mean) / sqrt(var + epsilon) * gamma + beta`` with the mean and (biased) variance "
        "taken along ``axis``."))


@relation("DropoutRel")
def dropout_rel(types, attrs):
    """``DropoutRel``: the tuple ``(data's type, data's type)``: the output and its mask."""
    (data,) = types
    if not known(data):
        return None
    data = tensor(data, "data")
    return TupleType([data, data])


def _normalize_dropout(a: dict) -> dict:
    a["rate"] = _float_attr(a["rate"], "rate")
    if not 0.0 <= a["rate"] < 1.0:
        raise ValueError(f"rate must be in [0, 1), got {a['rate']}")
    return a


dropout = register(OpDef(
    "nn.dropout", ("data",), dropout_rel, OpPattern.OPAQUE, attrs={"rate": 0.5},
    normalize=_normalize_dropout, reference=lambda x, attrs: (x, np.ones_like(x)),
    compute=C.dropout_compute, layout=dropout_layout,
    doc="Relay's tuple ``(out, mask)``; ``[0]`` is the output. At inference (the reference) the "
        "data passes through unchanged and the mask is all ones."))


@relation("LRNRel")
def lrn_rel(types, attrs):
    """The output has the data's type; ``axis`` must be in range."""
    return _same_float_type_with_axis(types, attrs)


def _normalize_lrn(a: dict) -> dict:
    a["size"] = as_int(a["size"], "size", minimum=1)
    a["axis"] = as_int(a["axis"], "axis")
    for name in ("bias", "alpha", "beta"):
        a[name] = _float_attr(a[name], name)
    return a


def _lrn_reference(x, attrs):
    axis = normalize_axis(attrs.axis, x.ndim)
    half = attrs.size // 2
    sq = _pad_axes(x.astype(np.float64) ** 2, {axis: (half, half)})
    run = np.cumsum(sq, axis=axis)
    run = np.concatenate([np.zeros_like(np.take(run, [0], axis=axis)), run], axis=axis)
    c = np.arange(x.shape[axis])
    # window of channel c: padded positions c .. c + size - 1, i.e. channels c - half .. c + size - 1 - half
    window = np.take(run, c + attrs.size, axis=axis) - np.take(run, c, axis=axis)
    return (x / (attrs.bias + attrs.alpha / attrs.size * window) ** attrs.beta).astype(x.dtype)


lrn = register(OpDef(
    "nn.lrn", ("data",), lrn_rel, OpPattern.OPAQUE,
    attrs={"size": 5, "axis": 1, "bias": 2.0, "alpha": 1e-5, "beta": 0.75}, normalize=_normalize_lrn,
    reference=_lrn_reference, compute=C.lrn_compute,
    doc="Local response normalization across ``axis``: ``x / (bias + alpha / size * s) ** beta`` "
        "where ``s`` sums ``x**2`` over the ``size`` neighbours ``c - size // 2`` to "
        "``c + (size - 1) // 2`` (out-of-range ones count as 0)."))


# =============================================================================================
# nn.pad, nn.batch_flatten

def _normalize_pad(a: dict) -> dict:
    width = a["pad_width"]
    if not isinstance(width, tuple) or not all(isinstance(p, tuple) and len(p) == 2 for p in width):
        raise ValueError(f"pad_width must be one (before, after) pair per axis, got {width!r}")
    a["pad_width"] = tuple((as_int(b, "pad_width", minimum=0), as_int(e, "pad_width", minimum=0))
                           for b, e in width)
    if a["pad_mode"] not in ("constant", "edge", "reflect"):
        raise ValueError(f"pad_mode must be 'constant', 'edge' or 'reflect', got {a['pad_mode']!r}")
    return a


@relation("PadRel")
def pad_rel(types, attrs):
    """``PadRel``: each axis grows by its (before, after) pair; ``pad_value`` is a scalar."""
    data, value = types
    if not known(data):
        return None
    data = tensor(data, "data")
    width = attrs.pad_width
    if len(width) != data.ndim:
        fail(f"pad_width has {len(width)} pairs but the data {data} has rank {data.ndim}")
    if known(value):
        value = tensor(value, "pad_value")
        if value.ndim != 0:
            fail(f"pad_value must be a scalar, got {value}")
    else:
        value = TensorType((), data.dtype)
    shape = []
    for axis, (dim, (before, after)) in enumerate(zip(data.shape, width)):
        if attrs.pad_mode == "reflect" and isinstance(dim, int) and max(before, after) >= dim:
            fail(f"reflect padding {(before, after)} of axis {axis} must be smaller than its extent {dim}")
        if attrs.pad_mode == "edge" and dim == 0 and before + after:
            fail(f"edge padding of axis {axis} needs a nonempty axis")
        shape.append(add(dim, before + after))
    return [data, value, TensorType(shape, data.dtype)]


def _pad_reference(x, value, attrs):
    if attrs.pad_mode == "constant":
        return np.pad(x, attrs.pad_width, constant_values=np.asarray(value).astype(x.dtype))
    return np.pad(x, attrs.pad_width, mode=attrs.pad_mode)


class _PadCaller(OpCaller):
    """``nn.pad(data, pad_value=0, pad_width=..., pad_mode=...)``: the pad value may be left out."""

    def __call__(self, data, pad_value=0.0, **attrs):
        return super().__call__(data, pad_value, **attrs)


pad = _PadCaller(register(OpDef(
    "nn.pad", ("data", "pad_value"), pad_rel, OpPattern.INJECTIVE,
    attrs={"pad_width": (), "pad_mode": "constant"}, normalize=_normalize_pad, reference=_pad_reference,
    compute=C.pad_compute, layout=pad_layout,
    doc="Pad each axis by its (before, after) pair in ``pad_width``: with ``pad_value`` (a scalar, "
        "cast to the data's dtype; 0 when left out) in ``constant`` mode, with the border value in "
        "``edge`` mode, with the mirror image (border excluded) in ``reflect`` mode.")).opdef)


@relation("BatchFlattenRel")
def batch_flatten_rel(types, attrs):
    """``BatchFlattenRel``: ``[N, d1, d2, ...]`` -> ``[N, d1 * d2 * ...]``."""
    (data,) = types
    if not known(data):
        return None
    data = tensor(data, "data")
    if data.ndim < 1:
        fail(f"data must have rank at least 1, got {data}")
    return TensorType((data.shape[0], prod(data.shape[1:])), data.dtype)


batch_flatten = register(OpDef(
    "nn.batch_flatten", ("data",), batch_flatten_rel, OpPattern.INJECTIVE,
    reference=lambda x, attrs: x.reshape(x.shape[0], int(np.prod(x.shape[1:]))),
    compute=C.batch_flatten_compute, layout=original_layout,
    doc="Flatten every axis but the first: ``[N, d1, d2, ...]`` -> ``[N, d1 * d2 * ...]``."))


# =============================================================================================
# 1-D and 3-D convolution and pooling: nn.conv1d, nn.conv3d, nn.max_pool1d/3d, nn.avg_pool1d/3d,
# nn.adaptive_{max,avg}_pool1d/2d/3d.
#
# One definition per family, made for the spatial axes ``W`` (1-D), ``HW`` or ``DHW`` (3-D):
# Relay's attributes keep one value per spatial axis, and ``padding`` holds every axis's front
# pad, then every axis's back pad (``(front, top, left, back, bottom, right)`` in 3-D).

_AXIS_NAMES = {"D": "depth", "H": "height", "W": "width"}


def _spatial_padding_attr(value, n: int, name: str = "padding") -> tuple:
    """1 value, ``n`` values (the same before and after) or ``2n`` (befores, then afters) as
    ``2n`` values."""
    pad = int_tuple(value, (1, n, 2 * n), name, minimum=0)
    if len(pad) == 1:
        return pad * (2 * n)
    if len(pad) == n:
        return pad + pad
    return pad


def _whole_axes_layout_attr(name: str, value, axes: str, spatial: str, allow_empty=False) -> str:
    """A layout over exactly ``axes`` whose spatial axes are not split into blocks."""
    value = _layout_attr(name, value, axes, allow_empty)
    if value:
        layout = Layout(value)
        split = [a for a in spatial if layout.factor_of(a)]
        if split:
            raise ValueError(f"{name}={value!r} splits {split[0]} into blocks; the spatial axes "
                             f"must stay whole")
    return value


def _normalize_conv_nd(spatial: str):
    n = len(spatial)

    def normalize(a: dict) -> dict:
        a["strides"] = int_tuple(a["strides"], (n,), "strides", minimum=1)
        a["padding"] = _spatial_padding_attr(a["padding"], n)
        a["dilation"] = int_tuple(a["dilation"], (n,), "dilation", minimum=1)
        a["groups"] = as_int(a["groups"], "groups", minimum=1)
        if a["channels"] is not None:
            a["channels"] = as_int(a["channels"], "channels", minimum=1)
        if a["kernel_size"] is not None:
            a["kernel_size"] = int_tuple(a["kernel_size"], (n,), "kernel_size", minimum=1)
        a["data_layout"] = _layout_attr("data_layout", a["data_layout"], "NC" + spatial)
        a["kernel_layout"] = _layout_attr("kernel_layout", a["kernel_layout"], "OI" + spatial)
        a["out_layout"] = _layout_attr("out_layout", a["out_layout"], "NC" + spatial, allow_empty=True)
        a["out_dtype"] = _out_dtype_attr(a["out_dtype"])
        return a
    return normalize


def _conv_nd_rel(spatial: str, name: str):
    """The type relation of an N-d convolution over ``spatial``: shapes are converted to
    ``NC<spatial>`` (data) and ``OI<spatial>`` (weight), checked, and the output converted to
    ``out_layout``; ``channels`` and ``kernel_size`` imply the weight's type."""
    data_axes, kernel_axes = "NC" + spatial, "OI" + spatial
    n_sp = len(spatial)

    @relation(name)
    def rel(types, attrs):
        data, weight = types
        if not known(data):
            return None
        data = tensor(data, "data")
        dl = Layout(attrs.data_layout)
        if data.ndim != dl.ndim:
            fail(f"data {data} has rank {data.ndim} but data_layout {dl} needs rank {dl.ndim}")
        n, c, *extents = _convert(data.shape, dl, data_axes, lambda: f"data {data}")
        groups = attrs.groups
        if isinstance(c, int) and c % groups:
            fail(f"data has {c} input channels, which groups={groups} does not divide")
        c_per_group = floordiv(c, groups)
        implied = None
        if attrs.channels is not None and attrs.kernel_size is not None:
            implied = _implied_weight((attrs.channels, c_per_group), kernel_axes, attrs, data.dtype)
        if known(weight):
            weight = tensor(weight, "weight")
            kl = Layout(attrs.kernel_layout)
            if weight.ndim != kl.ndim:
                fail(f"weight {weight} has rank {weight.ndim} but kernel_layout {kl} needs rank "
                     f"{kl.ndim}")
            o, i, *ks = _convert(weight.shape, kl, kernel_axes, lambda: f"weight {weight}")
            if attrs.kernel_size is not None and any(provably_different(k, g) for k, g in
                                                     zip(ks, attrs.kernel_size)):
                fail(f"kernel_size={attrs.kernel_size} but the weight's kernel is {fmt_shape(ks)}")
            if attrs.channels is not None and provably_different(o, attrs.channels):
                fail(f"channels={attrs.channels} but the weight has {format_dim(o)} output channels")
            if not same_dim(c_per_group, i):
                if groups == 1:
                    fail(f"data has {format_dim(c)} input channels but the weight expects "
                         f"{format_dim(i)}")
                fail(f"data has {format_dim(c)} input channels in {groups} groups "
                     f"({format_dim(c_per_group)} per group) but the weight expects {format_dim(i)} "
                     f"per group")
            if isinstance(o, int) and o % groups:
                fail(f"the weight's {o} output channels are not divisible by groups={groups}")
            channels = o
        elif implied is not None:
            channels, ks = attrs.channels, list(attrs.kernel_size)
        else:
            return None
        out_extents = [_window_extent(e, k, s, d, attrs.padding[j], attrs.padding[n_sp + j],
                                      _AXIS_NAMES[a], "the kernel")
                       for j, (a, e, k, s, d) in enumerate(zip(spatial, extents, ks, attrs.strides,
                                                               attrs.dilation))]
        ol = attrs.out_layout or attrs.data_layout
        oshape = _convert((n, channels, *out_extents), Layout(data_axes), ol, f"the output in layout {ol}")
        out = TensorType(oshape, attrs.out_dtype or data.dtype)
        return out if known(weight) else [data, implied, out]
    rel.__doc__ = (f"``{name}``: data in ``data_layout`` (axes {data_axes}), weight in "
                   f"``kernel_layout`` (axes {kernel_axes}); each output extent is Relay's window "
                   f"count ``(in + pads - ((k - 1) * dilation + 1)) // stride + 1``.")
    return rel


def _conv_nd(x, w, strides, padding, dilation, groups, out_dtype):
    """Grouped N-d convolution of ``NC<spatial>`` data with an ``OI<spatial>`` weight: per group,
    the windows of the padded data contracted with the kernels (in the accumulator dtype)."""
    acc = _accumulator((x.dtype, w.dtype), out_dtype)
    n_sp = x.ndim - 2
    xp = _pad_axes(_operand(x, acc, out_dtype), {2 + j: (padding[j], padding[n_sp + j])
                                                 for j in range(n_sp)})
    o, cg = w.shape[:2]
    ks = tuple(w.shape[2:])
    win = _windows(xp, tuple(range(2, 2 + n_sp)), ks, strides, dilation)   # N, C, *out, *k
    og = o // groups
    kernels = _operand(w, acc, out_dtype)
    window_axes = list(range(2 + n_sp, 2 + 2 * n_sp))
    parts = []
    for g in range(groups):
        part = np.tensordot(win[:, g * cg:(g + 1) * cg], kernels[g * og:(g + 1) * og],
                            axes=([1] + window_axes, [1] + list(range(2, 2 + n_sp))))
        parts.append(np.moveaxis(part, -1, 1))                            # N, og, *out
    return _finish(np.concatenate(parts, axis=1), out_dtype)


def _conv_nd_reference(spatial: str):
    def reference(x, w, attrs):
        xn = Layout(attrs.data_layout).transform_array(x, "NC" + spatial)
        wn = Layout(attrs.kernel_layout).transform_array(w, "OI" + spatial)
        y = _conv_nd(xn, wn, attrs.strides, attrs.padding, attrs.dilation, attrs.groups,
                     attrs.out_dtype or x.dtype.name)
        return np.ascontiguousarray(Layout("NC" + spatial).transform_array(
            y, attrs.out_layout or attrs.data_layout))
    return reference


def _conv_nd_attrs(spatial: str) -> dict:
    n = len(spatial)
    return {"strides": (1,) * n, "padding": (0,) * n, "dilation": (1,) * n, "groups": 1,
            "channels": None, "kernel_size": None, "data_layout": "NC" + spatial,
            "kernel_layout": "OI" + spatial, "out_layout": "", "out_dtype": ""}


conv1d = register(OpDef(
    "nn.conv1d", ("data", "weight"), _conv_nd_rel("W", "Conv1DRel"), OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs=_conv_nd_attrs("W"), normalize=_normalize_conv_nd("W"), reference=_conv_nd_reference("W"),
    compute=C.conv_nd_compute("W", "conv1d"), layout=conv2d_layout,
    doc="1-D convolution, like ``nn.conv2d`` over the W axis: data ``NCW`` (or ``NWC``), weight "
        "``OIW`` (or ``WIO``); ``padding`` is 1 value or 2 (left, right)."))

conv3d = register(OpDef(
    "nn.conv3d", ("data", "weight"), _conv_nd_rel("DHW", "Conv3DRel"), OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs=_conv_nd_attrs("DHW"), normalize=_normalize_conv_nd("DHW"),
    reference=_conv_nd_reference("DHW"), compute=C.conv_nd_compute("DHW", "conv3d"),
    layout=conv2d_layout,
    doc="3-D convolution, like ``nn.conv2d`` over D, H and W: data ``NCDHW`` (or ``NDHWC``), "
        "weight ``OIDHW`` (or ``DHWIO``); ``padding`` is 1, 3 (each axis's pad on both sides) or 6 "
        "values (front, top, left, back, bottom, right); ``groups`` splits the channels."))


def _normalize_pool_nd(spatial: str, default_layout: str):
    n = len(spatial)

    def normalize(a: dict) -> dict:
        a["pool_size"] = int_tuple(a["pool_size"], (n,), "pool_size", minimum=1)
        a["strides"] = int_tuple(a["strides"], (n,), "strides", minimum=1)
        a["dilation"] = int_tuple(a["dilation"], (n,), "dilation", minimum=1)
        a["padding"] = _spatial_padding_attr(a["padding"], n)
        a["layout"] = _whole_axes_layout_attr("layout", a["layout"], default_layout, spatial)
        a["out_layout"] = _whole_axes_layout_attr("out_layout", a["out_layout"], default_layout, spatial,
                                                  allow_empty=True)
        a["ceil_mode"] = _bool_attr(a["ceil_mode"], "ceil_mode")
        if "count_include_pad" in a:
            a["count_include_pad"] = _bool_attr(a["count_include_pad"], "count_include_pad")
        return a
    return normalize


def _pool_nd_data(data, attrs, spatial: str):
    """The data's type, its layout and the positions of the spatial axes in it."""
    data = tensor(data, "data")
    layout = Layout(attrs.layout)
    if data.ndim != layout.ndim:
        fail(f"data {data} has rank {data.ndim} but layout {layout} needs rank {layout.ndim}")
    try:
        layout.primal_extents(data.shape)
    except ValueError as err:
        fail(f"data {data}: {err}")
    return data, layout, [layout.index_of(a) for a in spatial]


def _pool_nd_rel(spatial: str, name: str):
    n_sp = len(spatial)

    @relation(name)
    def rel(types, attrs):
        (data,) = types
        if not known(data):
            return None
        data, layout, axes = _pool_nd_data(data, attrs, spatial)
        shape = list(data.shape)
        for j, (a, axis) in enumerate(zip(spatial, axes)):
            shape[axis] = _window_extent(shape[axis], attrs.pool_size[j], attrs.strides[j],
                                         attrs.dilation[j], attrs.padding[j], attrs.padding[n_sp + j],
                                         _AXIS_NAMES[a], "the pooling window", attrs.ceil_mode)
        return _pool_out(data, layout, tuple(shape), attrs)
    rel.__doc__ = (f"``{name}``: each of the axes {', '.join(spatial)} becomes its number of "
                   f"windows (see :func:`pool2d_output_hw`).")
    return rel


def _pool_nd_geometry(x, attrs, axes):
    """Per spatial axis ``(axis, extent, pad_before, pad_after, extra)``, ``extra`` what
    ``ceil_mode``'s last window needs past the declared padding."""
    n_sp = len(axes)
    geometry = []
    for j, axis in enumerate(axes):
        k, s, d = attrs.pool_size[j], attrs.strides[j], attrs.dilation[j]
        before, after, extent = attrs.padding[j], attrs.padding[n_sp + j], x.shape[axis]
        span = extent + before + after - ((k - 1) * d + 1)
        out = (span + (s - 1 if attrs.ceil_mode else 0)) // s + 1
        extra = max(0, (out - 1) * s + (k - 1) * d + 1 - (extent + before + after))
        geometry.append((axis, extent, before, after, extra))
    return geometry


def _max_pool_nd_reference(spatial: str):
    def reference(x, attrs):
        axes = [Layout(attrs.layout).index_of(a) for a in spatial]
        geometry = _pool_nd_geometry(x, attrs, axes)
        xp = _pad_axes(x, {axis: (b, a + extra) for axis, _, b, a, extra in geometry}, _lowest(x.dtype))
        taps = tuple(range(-len(axes), 0))
        y = _windows(xp, tuple(axes), attrs.pool_size, attrs.strides, attrs.dilation).max(axis=taps)
        return _relayout(y, attrs)
    return reference


def _avg_pool_nd_reference(spatial: str):
    def reference(x, attrs):
        axes = [Layout(attrs.layout).index_of(a) for a in spatial]
        geometry = _pool_nd_geometry(x, attrs, axes)
        xp = _pad_axes(x.astype(np.float64), {axis: (b, a + extra) for axis, _, b, a, extra in geometry})
        taps = tuple(range(-len(axes), 0))
        sums = _windows(xp, tuple(axes), attrs.pool_size, attrs.strides, attrs.dilation).sum(axis=taps)
        count = np.ones((1,) * sums.ndim)
        for (axis, extent, before, after, extra), k, s, d in zip(geometry, attrs.pool_size,
                                                                attrs.strides, attrs.dilation):
            mask = np.zeros(before + extent + after + extra)
            if attrs.count_include_pad:
                mask[:before + extent + after] = 1
            else:
                mask[before:before + extent] = 1
            count = count * _along(sums, _windows(mask, (0,), (k,), (s,), (d,)).sum(axis=-1), axis)
        return _relayout(_mean_as(sums / np.maximum(count, 1), x.dtype), attrs)
    return reference


def _pool_nd_attrs(spatial: str, layout: str) -> dict:
    n = len(spatial)
    return {"pool_size": (1,) * n, "strides": (1,) * n, "dilation": (1,) * n, "padding": (0,) * n,
            "layout": layout, "out_layout": "", "ceil_mode": False}


for _spatial, _layout_name, _rank in (("W", "NCW", "1d"), ("DHW", "NCDHW", "3d")):
    globals()[f"max_pool{_rank}"] = register(OpDef(
        f"nn.max_pool{_rank}", ("data",), _pool_nd_rel(_spatial, f"MaxPool{_rank.upper()}Rel"),
        OpPattern.OUT_ELEMWISE_FUSABLE, attrs=_pool_nd_attrs(_spatial, _layout_name),
        normalize=_normalize_pool_nd(_spatial, _layout_name),
        reference=_max_pool_nd_reference(_spatial),
        compute=C.pool_nd_compute("max", _spatial, f"nn.max_pool{_rank}"), layout=pool_layout,
        doc=f"The maximum over each ``pool_size`` window of the axes {', '.join(_spatial)} of a "
            f"``{_layout_name}`` layout (or any permutation keeping them whole), as "
            f"``nn.max_pool2d``: ``padding`` is 1, {len(_spatial)} or {2 * len(_spatial)} values "
            f"(befores, then afters), ``ceil_mode`` adds a last partial window."))
    globals()[f"avg_pool{_rank}"] = register(OpDef(
        f"nn.avg_pool{_rank}", ("data",), _pool_nd_rel(_spatial, f"AvgPool{_rank.upper()}Rel"),
        OpPattern.OUT_ELEMWISE_FUSABLE,
        attrs=dict(_pool_nd_attrs(_spatial, _layout_name), count_include_pad=False),
        normalize=_normalize_pool_nd(_spatial, _layout_name),
        reference=_avg_pool_nd_reference(_spatial),
        compute=C.pool_nd_compute("avg", _spatial, f"nn.avg_pool{_rank}"), layout=pool_layout,
        doc=f"The mean over each window of the axes {', '.join(_spatial)}, as ``nn.avg_pool2d``: "
            f"the divisor counts the window's taps on the input, and with ``count_include_pad`` "
            f"those on the declared padding too."))


def _normalize_adaptive_nd(spatial: str, default_layout: str):
    n = len(spatial)

    def normalize(a: dict) -> dict:
        a["layout"] = _whole_axes_layout_attr("layout", a["layout"], default_layout, spatial)
        a["out_layout"] = _whole_axes_layout_attr("out_layout", a["out_layout"], default_layout,
                                                  spatial, allow_empty=True)
        size = a["output_size"]
        if size is not None:
            size = size if isinstance(size, tuple) else (size,)
            if len(size) not in (0, 1, n):
                raise ValueError(f"output_size must have 1 or {n} values, got {a['output_size']!r}")
            size = tuple(None if s is None else as_int(s, "output_size", minimum=1) for s in size)
            a["output_size"] = (size * n if len(size) == 1 else size) or None
        return a
    return normalize


def _adaptive_nd_rel(spatial: str, name: str):
    @relation(name)
    def rel(types, attrs):
        (data,) = types
        if not known(data):
            return None
        data, layout, axes = _pool_nd_data(data, attrs, spatial)
        shape = list(data.shape)
        for axis, size in zip(axes, attrs.output_size or (None,) * len(axes)):
            if size is not None:
                shape[axis] = size
        return _pool_out(data, layout, tuple(shape), attrs)
    rel.__doc__ = (f"``{name}``: the axes {', '.join(spatial)} become ``output_size`` (one value "
                   f"for all; an omitted or None entry keeps the input's extent).")
    return rel


def _bin_max(x, axis: int, out: int):
    """The maximum over each of PyTorch's adaptive bins along ``axis``."""
    n = x.shape[axis]
    parts = [np.take(x, np.arange((i * n) // out, -((-(i + 1) * n) // out)), axis=axis).max(
        axis=axis, keepdims=True) for i in range(out)]
    return np.concatenate(parts, axis=axis)


def _adaptive_nd_reference(kind: str, spatial: str):
    def reference(x, attrs):
        layout = Layout(attrs.layout)
        axes = [layout.index_of(a) for a in spatial]
        sizes = [x.shape[a] if s is None else s
                 for a, s in zip(axes, attrs.output_size or (None,) * len(axes))]
        if kind == "max":
            y = x
            for axis, size in zip(axes, sizes):
                y = _bin_max(y, axis, size)
            return _relayout(y, attrs)
        sums, count = x.astype(np.float64), np.ones((1,) * x.ndim)
        for axis, size in zip(axes, sizes):
            sums, lengths = _bin_sums(sums, axis, size)
            count = count * _along(sums, lengths, axis)
        return _relayout(_mean_as(sums / count, x.dtype), attrs)
    return reference


for _spatial, _layout_name, _rank in (("W", "NCW", "1d"), ("HW", "NCHW", "2d"), ("DHW", "NCDHW", "3d")):
    for _kind, _word in (("max", "maximum"), ("avg", "mean")):
        _name = f"nn.adaptive_{_kind}_pool{_rank}"
        if _name == "nn.adaptive_avg_pool2d":          # defined above, with its own compute
            continue
        globals()[_name[3:]] = register(OpDef(
            _name, ("data",), _adaptive_nd_rel(_spatial, f"AdaptivePool{_rank.upper()}Rel"),
            OpPattern.OUT_ELEMWISE_FUSABLE,
            attrs={"output_size": None, "layout": _layout_name, "out_layout": ""},
            normalize=_normalize_adaptive_nd(_spatial, _layout_name),
            reference=_adaptive_nd_reference(_kind, _spatial),
            compute=C.adaptive_pool_nd_compute(_kind, _spatial, _name), layout=pool_layout,
            doc=f"The {_word} over ``output_size`` bins of the axes {', '.join(_spatial)}, PyTorch's "
                f"bins as ``nn.adaptive_avg_pool2d``: output position ``i`` of ``o`` covers input "
                f"positions ``floor(i * n / o)`` to ``ceil((i + 1) * n / o)`` (exclusive)."))
del _spatial, _layout_name, _rank, _kind, _word, _name


# =============================================================================================
# nn.upsampling, nn.upsampling3d: image.resize2d / image.resize3d by a scale

def _scaled(extent, scale: float, axis: str):
    """Relay's output extent: ``round(extent * scale)``, halves to even (``nearbyint``)."""
    if not isinstance(extent, int):
        return ANY
    out = int(np.rint(extent * scale))
    if out < 1:
        fail(f"the output's {axis} would be {out} ({extent} * {scale})")
    return out


def _normalize_upsampling(spatial: str, default_layout: str, methods: tuple):
    def normalize(a: dict) -> dict:
        for axis in spatial:
            key = f"scale_{axis.lower()}"
            a[key] = _float_attr(a[key], key)
            if not a[key] > 0:
                raise ValueError(f"{key} must be positive, got {a[key]}")
        a["layout"] = _whole_axes_layout_attr("layout", a["layout"], default_layout, spatial)
        if a["method"] not in methods:
            raise ValueError(f"method must be one of {', '.join(map(repr, methods))}, got "
                             f"{a['method']!r}")
        if "align_corners" in a:
            a["align_corners"] = _bool_attr(a["align_corners"], "align_corners")
        if "coordinate_transformation_mode" in a:
            from .image import _COORDINATE_MODES
            if a["coordinate_transformation_mode"] not in _COORDINATE_MODES[:4]:
                raise ValueError(f"coordinate_transformation_mode must be one of "
                                 f"{', '.join(map(repr, _COORDINATE_MODES[:4]))}, got "
                                 f"{a['coordinate_transformation_mode']!r}")
        return a
    return normalize


def _upsampling_rel(spatial: str, name: str):
    @relation(name)
    def rel(types, attrs):
        (data,) = types
        if not known(data):
            return None
        data, layout, axes = _pool_nd_data(data, attrs, spatial)
        shape = list(data.shape)
        for a, axis in zip(spatial, axes):
            shape[axis] = _scaled(shape[axis], getattr(attrs, f"scale_{a.lower()}"), _AXIS_NAMES[a])
        return TensorType(tuple(shape), data.dtype)
    rel.__doc__ = (f"``{name}``: each of the axes {', '.join(spatial)} becomes "
                   f"``round(extent * scale)``.")
    return rel


def _as_resize_attrs(spatial: str, attrs, shape):
    """The ``image.resize{1,2,3}d`` attributes an upsampling of input ``shape`` is (as TOPI
    computes it: the sizes rounded, ``bilinear``/``trilinear`` as ``linear``, ``bicubic`` as
    ``cubic``, ``align_corners`` as that coordinate mode and otherwise ``asymmetric``)."""
    from .registry import get_opdef
    layout = Layout(attrs.layout)
    size = tuple(int(np.rint(shape[layout.index_of(a)] * getattr(attrs, f"scale_{a.lower()}")))
                 for a in spatial)
    method = {"bilinear": "linear", "trilinear": "linear", "bicubic": "cubic"}.get(attrs.method,
                                                                                   attrs.method)
    if "align_corners" in attrs:
        mode = "align_corners" if attrs.align_corners else "asymmetric"
    else:
        mode = attrs.coordinate_transformation_mode
    return get_opdef(f"image.resize{len(spatial)}d").make_attrs(
        {"size": size, "layout": attrs.layout, "method": method,
         "coordinate_transformation_mode": mode})


def _upsampling_reference(spatial: str):
    def reference(x, attrs):
        from .registry import get_opdef
        resize = get_opdef(f"image.resize{len(spatial)}d")
        return resize.reference(x, _as_resize_attrs(spatial, attrs, x.shape))
    return reference


def _upsampling_compute(spatial: str):
    def compute(inputs, attrs, out_type):
        from .registry import get_opdef
        resize = get_opdef(f"image.resize{len(spatial)}d")
        return resize.compute(inputs, _as_resize_attrs(spatial, attrs, inputs[0].shape), out_type)
    compute.__name__ = f"upsampling{'3d' if len(spatial) == 3 else ''}_compute"
    return compute


upsampling = register(OpDef(
    "nn.upsampling", ("data",), _upsampling_rel("HW", "UpSamplingRel"), OpPattern.INJECTIVE,
    attrs={"scale_h": 1.0, "scale_w": 1.0, "layout": "NCHW", "method": "nearest_neighbor",
           "align_corners": False},
    normalize=_normalize_upsampling("HW", "NCHW", ("nearest_neighbor", "bilinear", "bicubic")),
    reference=_upsampling_reference("HW"), compute=_upsampling_compute("HW"),
    doc="Scale H and W by ``scale_h`` and ``scale_w`` (the output extents ``round(extent * "
        "scale)``): ``image.resize2d`` to those sizes with ``method`` ``nearest_neighbor``, "
        "``bilinear`` or ``bicubic`` and the coordinate mode ``align_corners`` when "
        "``align_corners`` is set, else ``asymmetric`` (TOPI's definition)."))

upsampling3d = register(OpDef(
    "nn.upsampling3d", ("data",), _upsampling_rel("DHW", "UpSampling3DRel"), OpPattern.INJECTIVE,
    attrs={"scale_d": 1.0, "scale_h": 1.0, "scale_w": 1.0, "layout": "NCDHW",
           "method": "nearest_neighbor", "coordinate_transformation_mode": "half_pixel"},
    normalize=_normalize_upsampling("DHW", "NCDHW", ("nearest_neighbor", "trilinear")),
    reference=_upsampling_reference("DHW"), compute=_upsampling_compute("DHW"),
    doc="Scale D, H and W by ``scale_d``, ``scale_h`` and ``scale_w`` (the output extents "
        "``round(extent * scale)``): ``image.resize3d`` to those sizes with ``method`` "
        "``nearest_neighbor`` or ``trilinear`` and the given ``coordinate_transformation_mode``."))


# =============================================================================================
# nn.space_to_depth, nn.depth_to_space

def _normalize_block(a: dict) -> dict:
    a["block_size"] = as_int(a["block_size"], "block_size", minimum=1)
    if a["layout"] not in ("NCHW", "NHWC"):
        raise ValueError(f"layout must be 'NCHW' or 'NHWC', got {a['layout']!r}")
    if "mode" in a and a["mode"] not in ("DCR", "CRD"):
        raise ValueError(f"mode must be 'DCR' or 'CRD', got {a['mode']!r}")
    return a


def _block_rel(to_depth: bool, name: str):
    @relation(name)
    def rel(types, attrs):
        (data,) = types
        if not known(data):
            return None
        data = tensor(data, "data")
        if data.ndim != 4:
            fail(f"data {data} must have rank 4 (layout {attrs.layout})")
        layout = Layout(attrs.layout)
        n, c, h, w = _convert(data.shape, layout, "NCHW", lambda: f"data {data}")
        b = attrs.block_size
        if to_depth:
            for extent, axis in ((h, "height"), (w, "width")):
                if isinstance(extent, int) and extent % b:
                    fail(f"the data's {axis} {extent} is not divisible by block_size={b}")
            out = (n, mul(c, b * b), floordiv(h, b), floordiv(w, b))
        else:
            if isinstance(c, int) and c % (b * b):
                fail(f"the data's {c} channels are not divisible by block_size**2={b * b}")
            out = (n, floordiv(c, b * b), mul(h, b), mul(w, b))
        return TensorType(_convert(out, Layout("NCHW"), layout, "the output"), data.dtype)
    rel.__doc__ = ("``SpaceToDepthRel``: ``[N, C, H, W]`` -> ``[N, C * b * b, H / b, W / b]``."
                   if to_depth else
                   "``DepthToSpaceRel``: ``[N, C, H, W]`` -> ``[N, C / (b * b), H * b, W * b]``.")
    return rel


def _space_to_depth_ref(x, attrs):
    b = attrs.block_size
    xn = Layout(attrs.layout).transform_array(x, "NCHW")
    n, c, h, w = xn.shape
    # output channel (by * b + bx) * C + c holds input [c, y * b + by, x * b + bx]
    y = (xn.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
         .reshape(n, c * b * b, h // b, w // b))
    return np.ascontiguousarray(Layout("NCHW").transform_array(y, attrs.layout))


def _depth_to_space_ref(x, attrs):
    b = attrs.block_size
    xn = Layout(attrs.layout).transform_array(x, "NCHW")
    n, c, h, w = xn.shape
    oc = c // (b * b)
    if attrs.mode == "DCR":   # input channel (by * b + bx) * oc + c
        y = xn.reshape(n, b, b, oc, h, w).transpose(0, 3, 4, 1, 5, 2)
    else:                     # CRD: input channel c * b * b + by * b + bx
        y = xn.reshape(n, oc, b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    y = y.reshape(n, oc, h * b, w * b)
    return np.ascontiguousarray(Layout("NCHW").transform_array(y, attrs.layout))


space_to_depth = register(OpDef(
    "nn.space_to_depth", ("data",), _block_rel(True, "SpaceToDepthRel"), OpPattern.INJECTIVE,
    attrs={"block_size": 1, "layout": "NCHW"}, normalize=_normalize_block,
    reference=_space_to_depth_ref, compute=C.space_to_depth_compute,
    doc="Move each ``block_size`` x ``block_size`` block of H and W into channels: output channel "
        "``(by * b + bx) * C + c`` at ``(y, x)`` holds input channel ``c`` at "
        "``(y * b + by, x * b + bx)`` (TOPI's order). ``layout`` is NCHW or NHWC."))

depth_to_space = register(OpDef(
    "nn.depth_to_space", ("data",), _block_rel(False, "DepthToSpaceRel"), OpPattern.INJECTIVE,
    attrs={"block_size": 1, "layout": "NCHW", "mode": "DCR"}, normalize=_normalize_block,
    reference=_depth_to_space_ref, compute=C.depth_to_space_compute,
    doc="The inverse of ``nn.space_to_depth``: channels into ``block_size`` x ``block_size`` "
        "blocks of H and W. ``mode`` ``DCR`` reads input channel ``(by * b + bx) * C' + c`` (the "
        "inverse of space_to_depth), ``CRD`` reads ``c * b * b + by * b + bx``."))


# =============================================================================================
# nn.instance_norm, nn.group_norm, nn.l2_normalize

def _normalize_group_norm(a: dict) -> dict:
    a = _normalize_norm(a)
    if "num_groups" in a:
        a["num_groups"] = as_int(a["num_groups"], "num_groups", minimum=1)
    return a


def _norm_rel(name: str, grouped: bool):
    @relation(name)
    def rel(types, attrs):
        data = types[0]
        if not known(data):
            return None
        data = _float_tensor(data)
        axis = normalize_axis(attrs.axis, data.ndim)
        if axis == 0:
            fail(f"axis {attrs.axis} is the batch axis; the channel axis must be another")
        channels = data.shape[axis]
        if grouped and isinstance(channels, int) and channels % attrs.num_groups:
            fail(f"the data's {channels} channels (axis {attrs.axis}) are not divisible by "
                 f"num_groups={attrs.num_groups}")
        return [data, *_channel_vector_rel(data, attrs.axis, types[1:], ("gamma", "beta")), data]
    rel.__doc__ = (f"``{name}``: ``gamma`` and ``beta`` are ``[data.shape[axis]]``; the output has "
                   f"the data's type; ``axis`` is a channel axis, not the batch axis 0.")
    return rel


def _normalized(z, axes, attrs):
    mean = z.mean(axis=axes, keepdims=True)
    var = ((z - mean) ** 2).mean(axis=axes, keepdims=True)
    return (z - mean) / np.sqrt(var + attrs.epsilon)


def _scaled_shifted(y, gamma, beta, axis, attrs, dtype):
    if attrs.scale:
        y = y * _along(y, gamma.astype(np.float64), axis)
    if attrs.center:
        y = y + _along(y, beta.astype(np.float64), axis)
    return y.astype(dtype)


def _instance_norm_reference(x, gamma, beta, attrs):
    axis = normalize_axis(attrs.axis, x.ndim)
    axes = tuple(a for a in range(x.ndim) if a not in (0, axis))
    y = _normalized(x.astype(np.float64), axes, attrs) if axes else np.zeros(x.shape)
    return _scaled_shifted(y, gamma, beta, axis, attrs, x.dtype)


def _group_norm_reference(x, gamma, beta, attrs):
    axis = normalize_axis(attrs.axis, x.ndim)
    z = np.moveaxis(x.astype(np.float64), axis, 1)
    n, c = z.shape[:2]
    g = attrs.num_groups
    grouped = z.reshape((n, g, c // g) + z.shape[2:])
    y = _normalized(grouped, tuple(range(2, grouped.ndim)), attrs).reshape(z.shape)
    return _scaled_shifted(np.moveaxis(y, 1, axis), gamma, beta, axis, attrs, x.dtype)


instance_norm = register(OpDef(
    "nn.instance_norm", ("data", "gamma", "beta"), _norm_rel("InstanceNormRel", False), OpPattern.OPAQUE,
    attrs={"axis": 1, "epsilon": 1e-5, "center": True, "scale": True}, normalize=_normalize_norm,
    reference=_instance_norm_reference, compute=C.instance_norm_compute,
    doc="``(x - mean) / sqrt(var + epsilon) * gamma + beta`` with the mean and (biased) variance "
        "taken per batch element and channel (``axis``), over every other axis."))

group_norm = register(OpDef(
    "nn.group_norm", ("data", "gamma", "beta"), _norm_rel("GroupNormRel", True), OpPattern.OPAQUE,
    attrs={"num_groups": 1, "axis": 1, "epsilon": 1e-5, "center": True, "scale": True},
    normalize=_normalize_group_norm, reference=_group_norm_reference, compute=C.group_norm_compute,
    doc="Normalization per batch element and group of ``num_groups`` consecutive channel blocks "
        "(``axis`` the channels): the mean and (biased) variance over the group's channels and "
        "every other non-batch axis, then ``* gamma + beta`` per channel."))


def _normalize_l2(a: dict) -> dict:
    a["eps"] = _float_attr(a["eps"], "eps")
    axis = a["axis"]
    a["axis"] = tuple(as_int(x, "axis") for x in (axis if isinstance(axis, tuple) else
                                                   () if axis is None else (axis,)))
    return a


def _l2_axes(ndim: int, attrs) -> tuple:
    return tuple(sorted({normalize_axis(a, ndim) for a in attrs.axis})) if attrs.axis else tuple(range(ndim))


@relation("L2NormalizeRel")
def l2_normalize_rel(types, attrs):
    """The output has the (floating-point) data's type; each of ``axis`` in range."""
    (data,) = types
    if not known(data):
        return None
    data = _float_tensor(data)
    _l2_axes(data.ndim, attrs)
    return data


def _l2_normalize_reference(x, attrs):
    axes = _l2_axes(x.ndim, attrs)
    z = x.astype(np.float64)
    return (z / np.sqrt(np.maximum((z * z).sum(axis=axes, keepdims=True), attrs.eps))).astype(x.dtype)


l2_normalize = register(OpDef(
    "nn.l2_normalize", ("data",), l2_normalize_rel, OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"eps": 1e-12, "axis": ()}, normalize=_normalize_l2, reference=_l2_normalize_reference,
    compute=C.l2_normalize_compute,
    doc="``x / sqrt(max(sum(x ** 2), eps))`` with the sum over ``axis`` (every axis when empty)."))


# =============================================================================================
# nn.conv1d_transpose, nn.conv3d_transpose; nn.mirror_pad

def _normalize_conv_transpose_nd(spatial: str):
    base = _normalize_conv_nd(spatial)
    n = len(spatial)

    def normalize(a: dict) -> dict:
        kernel_layout = a["kernel_layout"]
        a = base(dict(a, kernel_layout="OI" + spatial))
        a["kernel_layout"] = _layout_attr("kernel_layout", kernel_layout, "IO" + spatial)
        a["output_padding"] = int_tuple(a["output_padding"], (n,), "output_padding", minimum=0)
        if any(p >= s for p, s in zip(a["output_padding"], a["strides"])):
            raise ValueError(f"output_padding={a['output_padding']} must be smaller than the strides "
                             f"{a['strides']}")
        return a
    return normalize


def _conv_transpose_nd_rel(spatial: str, name: str):
    data_axes, kernel_axes = "NC" + spatial, "IO" + spatial
    n_sp = len(spatial)

    @relation(name)
    def rel(types, attrs):
        data, weight = types
        if not known(data):
            return None
        data = tensor(data, "data")
        dl = Layout(attrs.data_layout)
        if data.ndim != dl.ndim:
            fail(f"data {data} has rank {data.ndim} but data_layout {dl} needs rank {dl.ndim}")
        n, c, *extents = _convert(data.shape, dl, data_axes, lambda: f"data {data}")
        groups = attrs.groups
        if isinstance(c, int) and c % groups:
            fail(f"data has {c} input channels, which groups={groups} does not divide")
        implied = None
        if attrs.channels is not None and attrs.kernel_size is not None:
            implied = _implied_weight((c, attrs.channels // groups), kernel_axes, attrs, data.dtype)
        if known(weight):
            weight = tensor(weight, "weight")
            kl = Layout(attrs.kernel_layout)
            if weight.ndim != kl.ndim:
                fail(f"weight {weight} has rank {weight.ndim} but kernel_layout {kl} needs rank {kl.ndim}")
            i, o, *ks = _convert(weight.shape, kl, kernel_axes, lambda: f"weight {weight}")
            if attrs.kernel_size is not None and any(provably_different(k, g) for k, g in
                                                     zip(ks, attrs.kernel_size)):
                fail(f"kernel_size={attrs.kernel_size} but the weight's kernel is {fmt_shape(ks)}")
            if not same_dim(c, i):
                fail(f"data has {format_dim(c)} input channels but the weight expects {format_dim(i)}")
            channels = mul(o, groups)
            if attrs.channels is not None and provably_different(channels, attrs.channels):
                fail(f"channels={attrs.channels} but the weight gives {format_dim(channels)} output "
                     f"channels ({format_dim(o)} per group, {groups} groups)")
        elif implied is not None:
            channels, ks = attrs.channels, list(attrs.kernel_size)
        else:
            return None
        out_extents = []
        for j, (a, e, k, s, d) in enumerate(zip(spatial, extents, ks, attrs.strides, attrs.dilation)):
            p = attrs.padding[j] + attrs.padding[n_sp + j]
            size = add(mul(sub(e, 1), s), add(mul(sub(k, 1), d), 1 - p + attrs.output_padding[j]))
            if isinstance(size, int) and size < 1:
                fail(f"the output's {_AXIS_NAMES[a]} would be {size}: the padding ({p}) removes the whole "
                     f"output")
            out_extents.append(size)
        ol = attrs.out_layout or attrs.data_layout
        oshape = _convert((n, channels, *out_extents), Layout(data_axes), ol, f"the output in layout {ol}")
        out = TensorType(oshape, attrs.out_dtype or data.dtype)
        return out if known(weight) else [data, implied, out]
    rel.__doc__ = (f"``{name}``: the weight is ``[C, channels / groups, *kernel]`` in {kernel_axes}; "
                   f"each output extent is ``(in - 1) * stride + (k - 1) * dilation + 1 - pads + "
                   f"output_padding``.")
    return rel


def _conv_transpose_nd_reference(spatial: str):
    data_axes = "NC" + spatial

    def reference(x, w, attrs):
        """As ``nn.conv2d_transpose``'s: the input spread out by the strides, padded by ``dilated
        kernel - 1 - padding`` (cropped where negative), convolved with the flipped kernels."""
        n_sp = len(spatial)
        xn = Layout(attrs.data_layout).transform_array(x, data_axes)
        wn = Layout(attrs.kernel_layout).transform_array(w, "IO" + spatial)
        c, og = wn.shape[:2]
        ks = wn.shape[2:]
        g = attrs.groups
        spread = np.zeros(xn.shape[:2] + tuple((e - 1) * s + 1 for e, s in zip(xn.shape[2:], attrs.strides)),
                          dtype=xn.dtype)
        spread[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in attrs.strides)] = xn
        pads = {}
        for j, (k, d) in enumerate(zip(ks, attrs.dilation)):
            pads[2 + j] = ((k - 1) * d - attrs.padding[j],
                           (k - 1) * d - attrs.padding[n_sp + j] + attrs.output_padding[j])
        spread = _pad_axes(spread, pads)
        flip = (Ellipsis,) + (slice(None, None, -1),) * n_sp
        kernels = (wn.reshape((g, c // g, og) + ks).swapaxes(1, 2)[flip].reshape((g * og, c // g) + ks))
        y = _conv_nd(spread, kernels, (1,) * n_sp, (0,) * (2 * n_sp), attrs.dilation, g,
                     attrs.out_dtype or x.dtype.name)
        return np.ascontiguousarray(Layout(data_axes).transform_array(
            y, attrs.out_layout or attrs.data_layout))
    return reference


def _conv_transpose_nd_attrs(spatial: str) -> dict:
    return dict(_conv_nd_attrs(spatial), kernel_layout="IO" + spatial, output_padding=(0,) * len(spatial))


conv1d_transpose = register(OpDef(
    "nn.conv1d_transpose", ("data", "weight"), _conv_transpose_nd_rel("W", "Conv1DTransposeRel"),
    OpPattern.OUT_ELEMWISE_FUSABLE, attrs=_conv_transpose_nd_attrs("W"),
    normalize=_normalize_conv_transpose_nd("W"), reference=_conv_transpose_nd_reference("W"),
    compute=C.conv_transpose_nd_compute("W", "conv1d_transpose"), layout=conv2d_layout,
    doc="1-D transposed convolution, as ``nn.conv2d_transpose`` over W: data ``NCW``, weight "
        "``IOW`` ``[C, channels / groups, k]``; ``padding`` trims the output, ``output_padding`` "
        "adds to its end."))

conv3d_transpose = register(OpDef(
    "nn.conv3d_transpose", ("data", "weight"), _conv_transpose_nd_rel("DHW", "Conv3DTransposeRel"),
    OpPattern.OUT_ELEMWISE_FUSABLE, attrs=_conv_transpose_nd_attrs("DHW"),
    normalize=_normalize_conv_transpose_nd("DHW"), reference=_conv_transpose_nd_reference("DHW"),
    compute=C.conv_transpose_nd_compute("DHW", "conv3d_transpose"), layout=conv2d_layout,
    doc="3-D transposed convolution, as ``nn.conv2d_transpose`` over D, H and W: data ``NCDHW``, "
        "weight ``IODHW``; ``padding`` is 1, 3 or 6 values (fronts, then backs)."))


def _normalize_mirror_pad(a: dict) -> dict:
    width = a["pad_width"]
    if not isinstance(width, tuple) or not all(isinstance(p, tuple) and len(p) == 2 for p in width):
        raise ValueError(f"pad_width must be one (before, after) pair per axis, got {width!r}")
    a["pad_width"] = tuple((as_int(b, "pad_width", minimum=0), as_int(e, "pad_width", minimum=0))
                           for b, e in width)
    if a["mode"] not in ("SYMMETRIC", "REFLECT"):
        raise ValueError(f"mode must be 'SYMMETRIC' or 'REFLECT', got {a['mode']!r}")
    return a


@relation("MirrorPadRel")
def mirror_pad_rel(types, attrs):
    """``MirrorPadRel``: each axis grows by its (before, after) pair, each at most the extent
    (``SYMMETRIC``) or smaller than it (``REFLECT``)."""
    (data,) = types
    if not known(data):
        return None
    data = tensor(data, "data")
    if len(attrs.pad_width) != data.ndim:
        fail(f"pad_width has {len(attrs.pad_width)} pairs but the data {data} has rank {data.ndim}")
    shape = []
    for axis, (dim, (before, after)) in enumerate(zip(data.shape, attrs.pad_width)):
        limit = dim if attrs.mode == "SYMMETRIC" else sub(dim, 1)
        if isinstance(limit, int) and max(before, after) > limit:
            fail(f"{attrs.mode} padding {(before, after)} of axis {axis} must be at most {limit} "
                 f"(its extent {format_dim(dim)}{' - 1' if attrs.mode == 'REFLECT' else ''})")
        shape.append(add(dim, before + after))
    return TensorType(shape, data.dtype)


mirror_pad = register(OpDef(
    "nn.mirror_pad", ("data",), mirror_pad_rel, OpPattern.INJECTIVE,
    attrs={"pad_width": (), "mode": "SYMMETRIC"}, normalize=_normalize_mirror_pad,
    reference=lambda x, attrs: np.pad(x, attrs.pad_width, mode=attrs.mode.lower()),
    compute=C.mirror_pad_compute,
    doc="Pad each axis by its (before, after) pair with the mirror image of the data: "
        "``SYMMETRIC`` repeats the border element, ``REFLECT`` leaves it out."))
