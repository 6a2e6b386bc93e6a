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
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..ir.layout import Layout
from ..ir.symbolic import ANY, add, floordiv, format_dim, mul, prod, sub
from ..ir.types import TensorType, TupleType, check_dtype
from ..passes._layout_rules import (batch_norm_layout, bias_add_layout, conv2d_layout, dropout_layout,
                                    elemwise_layout, original_layout, pad_layout, pool_layout,
                                    softmax_layout)
from ._rel import (as_int, fail, fmt_shape, int_tuple, known, normalize_axis, provably_different,
                   relation, same_dim, tensor)
from . import _compute as C
from .registry import OpCaller, OpDef, OpPattern, register
from .tensor import identity_rel

__all__ = ["relu", "leaky_relu", "prelu", "bias_add", "conv2d", "conv2d_transpose", "dense", "matmul",
           "batch_matmul", "max_pool2d", "avg_pool2d", "global_max_pool2d", "global_avg_pool2d",
           "adaptive_avg_pool2d", "softmax", "log_softmax", "batch_norm", "layer_norm", "dropout", "lrn",
           "pad", "batch_flatten", "conv2d_output_hw", "pool2d_output_hw"]


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


def _convert(shape, src: Layout, dst, what: str) -> tuple:
    """``shape`` from layout ``src`` to ``dst``, failing with ``what`` named."""
    try:
        return src.convert_shape(shape, dst)
    except ValueError as err:
        fail(f"{what}: {err}")


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
    n, c, h, w = _convert(data.shape, dl, "NCHW", f"data {data}")
    if isinstance(c, int) and c % attrs.groups:
        fail(f"data has {c} input channels, which groups={attrs.groups} does not divide")
    return data, (n, c, h, w)


def _conv_weight(weight, attrs, canonical: str) -> tuple:
    """The weight's extents in the ``canonical`` kernel layout (``OIHW`` or ``IOHW``)."""
    weight = tensor(weight, "weight")
    kl = Layout(attrs.kernel_layout)
    if weight.ndim != kl.ndim:
        fail(f"weight {weight} has rank {weight.ndim} but kernel_layout {kl} needs rank {kl.ndim}")
    dims = _convert(weight.shape, kl, canonical, f"weight {weight}")
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
