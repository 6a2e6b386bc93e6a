"""Converters of ONNX's neural-network ops: Gemm and MatMul, convolutions, pooling,
normalizations, Resize, and the quantized ops.

Padding: ONNX lists ``pads`` as every axis's begin then every axis's end, which is the order
relaybench's ``nn.conv2d`` and pooling ops take (``(top, left, bottom, right)``); ``auto_pad``
(``SAME_UPPER``, ``SAME_LOWER``, ``VALID``) is resolved here from the static spatial extents.
Quantized ops are written with Relay's ordinary ops (cast, round, clip, integer conv and matmul
with ``out_dtype='int32'``), as Relay's QNN canonicalization writes them.
"""

from __future__ import annotations

import numpy as np

from ... import op
from ...ir.expr import Constant, TupleGetItem
from ._math import scalar


def _spatial_pads(ctx, x, attrs, kernel, strides, dilations, ndim: int) -> tuple:
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("NOTSET", ""):
        pads = attrs.get("pads", [0] * (2 * ndim))
        return tuple(int(p) for p in pads)
    if auto_pad == "VALID":
        return (0,) * (2 * ndim)
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        ctx.fail(f"auto_pad={auto_pad!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    shape = ctx.static_shape(x)[2:]
    begin, end = [], []
    for d, k, s, dl in zip(shape, kernel, strides, dilations):
        out = -(-d // s)
        total = max(0, (out - 1) * s + (k - 1) * dl + 1 - d)
        small, large = total // 2, total - total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else large)
        end.append(large if auto_pad == "SAME_UPPER" else small)
    return tuple(begin + end)


_CONV = {1: (op.nn.conv1d, "NCW", "OIW"), 2: (op.nn.conv2d, "NCHW", "OIHW"),
         3: (op.nn.conv3d, "NCDHW", "OIDHW")}
_CONV_T = {1: op.nn.conv1d_transpose, 2: op.nn.conv2d_transpose, 3: op.nn.conv3d_transpose}


def conv(ctx, inputs, attrs, out_dtype: str = ""):
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    wshape = ctx.static_shape(w, "weight")
    ndim = len(wshape) - 2
    if ndim not in _CONV:
        ctx.fail(f"a {ndim}-d convolution; relaybench has 1-, 2- and 3-d ones")
    kernel = tuple(attrs.get("kernel_shape", wshape[2:]))
    strides = tuple(attrs.get("strides", [1] * ndim))
    dilations = tuple(attrs.get("dilations", [1] * ndim))
    pads = _spatial_pads(ctx, x, attrs, kernel, strides, dilations, ndim)
    func, layout, klayout = _CONV[ndim]
    out = func(x, w, strides=strides, padding=pads, dilation=dilations,
               groups=attrs.get("group", 1), channels=wshape[0], kernel_size=kernel,
               data_layout=layout, kernel_layout=klayout, out_dtype=out_dtype)
    if bias is not None:
        out = op.nn.bias_add(out, bias, axis=1)
    return out


def conv_transpose(ctx, inputs, attrs):
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    wshape = ctx.static_shape(w, "weight")
    ndim = len(wshape) - 2
    if ndim not in _CONV_T:
        ctx.fail(f"a {ndim}-d transposed convolution; relaybench has 1-, 2- and 3-d ones")
    group = attrs.get("group", 1)
    kernel = tuple(attrs.get("kernel_shape", wshape[2:]))
    strides = tuple(attrs.get("strides", [1] * ndim))
    dilations = tuple(attrs.get("dilations", [1] * ndim))
    out_pad = list(attrs.get("output_padding", [0] * ndim))
    auto_pad = attrs.get("auto_pad", "NOTSET")
    in_shape = ctx.static_shape(x)[2:]
    if "output_shape" in attrs:
        target = list(attrs["output_shape"])[-ndim:]
        begin, end = [], []
        for i in range(ndim):
            total = (strides[i] * (in_shape[i] - 1) + out_pad[i] + (kernel[i] - 1) * dilations[i]
                     + 1 - target[i])
            if total < 0:          # the output is longer than the kernels reach: pad the end
                out_pad[i] -= total
                total = 0
            small, large = total // 2, total - total // 2
            if auto_pad == "SAME_UPPER":
                begin.append(small), end.append(large)
            else:
                begin.append(large), end.append(small)
        pads = begin + end
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for i in range(ndim):
            total = max(0, strides[i] * (in_shape[i] - 1) + out_pad[i]
                        + (kernel[i] - 1) * dilations[i] + 1 - in_shape[i] * strides[i])
            small, large = total // 2, total - total // 2
            if auto_pad == "SAME_UPPER":
                begin.append(small), end.append(large)
            else:
                begin.append(large), end.append(small)
        pads = begin + end
    elif auto_pad == "VALID":
        pads = [0] * (2 * ndim)
    else:
        pads = list(attrs.get("pads", [0] * (2 * ndim)))
    if any(p < 0 for p in pads):
        ctx.fail(f"output_shape {attrs.get('output_shape')} needs negative pads {pads}")
    out = _CONV_T[ndim](x, w, strides=strides, padding=tuple(pads), dilation=dilations,
                        groups=group, channels=wshape[1] * group, kernel_size=kernel,
                        output_padding=tuple(out_pad))
    if bias is not None:
        out = op.nn.bias_add(out, bias, axis=1)
    return out


def _pool(kind: str):
    funcs = {"max": {1: op.nn.max_pool1d, 2: op.nn.max_pool2d, 3: op.nn.max_pool3d},
             "avg": {1: op.nn.avg_pool1d, 2: op.nn.avg_pool2d, 3: op.nn.avg_pool3d}}[kind]

    def convert(ctx, inputs, attrs):
        x = inputs[0]
        want_indices = len(ctx.node.output) > 1 and bool(ctx.node.output[1])
        if want_indices and len(attrs["kernel_shape"]) != 2:
            ctx.fail("the Indices output of a MaxPool that is not 2-d is not supported")
        kernel = tuple(attrs["kernel_shape"])
        ndim = len(kernel)
        if ndim not in funcs:
            ctx.fail(f"{ndim}-d pooling is not supported")
        strides = tuple(attrs.get("strides", [1] * ndim))
        dilations = tuple(attrs.get("dilations", [1] * ndim))
        pads = _spatial_pads(ctx, x, attrs, kernel, strides, dilations, ndim)
        ceil_mode = bool(attrs.get("ceil_mode", 0))
        layout = {1: "NCW", 2: "NCHW", 3: "NCDHW"}[ndim]
        extra = {}
        if kind == "avg":
            extra["count_include_pad"] = bool(attrs.get("count_include_pad", 0))
            if attrs.get("auto_pad", "NOTSET") in ("SAME_UPPER", "SAME_LOWER"):
                extra["count_include_pad"] = False
        out = funcs[ndim](x, pool_size=kernel, strides=strides, dilation=dilations, padding=pads,
                          layout=layout, ceil_mode=ceil_mode, **extra)
        if ceil_mode:
            out = _drop_padding_windows(ctx, x, out, kernel, strides, dilations, pads)
        if want_indices:
            return [out, _max_pool_indices(ctx, x, out, kernel, strides, dilations, pads,
                                           attrs.get("storage_order", 0))]
        return out
    return convert


def _drop_padding_windows(ctx, x, out, kernel, strides, dilations, pads):
    """ONNX drops a ceil-mode window that would start inside the right padding (PyTorch's rule);
    Relay's pooling keeps it, so the extra last position is sliced off."""
    shape = ctx.shape(x)[2:]
    if not all(isinstance(d, int) for d in shape):
        ctx.fail(f"ceil_mode with symbolic spatial dims {tuple(str(d) for d in shape)}: whether "
                 f"the last window is dropped depends on them (fix them with shape=)")
    n = len(kernel)
    ends, cut = [], False
    for i, d in enumerate(shape):
        span = d + pads[i] + pads[i + n] - ((kernel[i] - 1) * dilations[i] + 1)
        count = -(-span // strides[i]) + 1
        if (count - 1) * strides[i] >= d + pads[i]:
            count -= 1
            cut = True
        ends.append(count)
    if not cut:
        return out
    return op.strided_slice(out, begin=(0,) * n, end=tuple(ends), axes=tuple(range(2, 2 + n)))


max_pool = _pool("max")
avg_pool = _pool("avg")


def global_pool(kind: str):
    def convert(ctx, inputs, attrs):
        x = inputs[0]
        rank = ctx.rank(x)
        axes = list(range(2, rank))
        return (op.max if kind == "max" else op.mean)(x, axis=axes, keepdims=True)
    return convert


def lp_pool(ctx, inputs, attrs):
    x = inputs[0]
    p = attrs.get("p", 2)
    kernel = tuple(attrs["kernel_shape"])
    ndim = len(kernel)
    if ndim not in (1, 2, 3):
        ctx.fail(f"{ndim}-d LpPool is not supported")
    strides = tuple(attrs.get("strides", [1] * ndim))
    dilations = tuple(attrs.get("dilations", [1] * ndim))
    pads = _spatial_pads(ctx, x, attrs, kernel, strides, dilations, ndim)
    dt = ctx.dtype(x)
    powered = op.power(op.abs(x), scalar(p, dt))
    avg = {1: op.nn.avg_pool1d, 2: op.nn.avg_pool2d, 3: op.nn.avg_pool3d}[ndim]
    layout = {1: "NCW", 2: "NCHW", 3: "NCDHW"}[ndim]
    pooled = avg(powered, pool_size=kernel, strides=strides, dilation=dilations, padding=pads,
                 layout=layout, ceil_mode=bool(attrs.get("ceil_mode", 0)), count_include_pad=True)
    total = op.multiply(pooled, scalar(float(np.prod(kernel)), dt))
    return op.power(total, scalar(1.0 / p, dt))


def global_lp_pool(ctx, inputs, attrs):
    x = inputs[0]
    p = attrs.get("p", 2)
    dt = ctx.dtype(x)
    axes = list(range(2, ctx.rank(x)))
    total = op.sum(op.power(op.abs(x), scalar(p, dt)), axis=axes, keepdims=True)
    return op.power(total, scalar(1.0 / p, dt))


# ---- matrix products ---------------------------------------------------------------------------

def gemm(ctx, inputs, attrs):
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    dt = ctx.dtype(a)
    if attrs.get("transA", 0):
        a = op.transpose(a, axes=(1, 0))
    if not attrs.get("transB", 0):
        b = op.transpose(b, axes=(1, 0))
    out = op.nn.dense(a, b)
    if alpha != 1.0:
        out = op.multiply(out, scalar(alpha, dt))
    if c is not None:
        if beta != 1.0:
            c = op.multiply(c, scalar(beta, dt))
        out = op.add(out, c)
    return out


def matmul(ctx, inputs, attrs, out_dtype: str = ""):
    """numpy's ``matmul``: 1-d operands gain and lose a unit axis, batch axes broadcast."""
    a, b = inputs[0], inputs[1]
    ra, rb = ctx.rank(a), ctx.rank(b)
    if ra == 1:
        a = op.expand_dims(a, axis=0)
    if rb == 1:
        b = op.expand_dims(b, axis=1)
    sa, sb = ctx.shape(a), ctx.shape(b)
    if len(sb) == 2:
        out = op.nn.dense(a, op.transpose(b, axes=(1, 0)), out_dtype=out_dtype)
    else:
        batch_a, batch_b = sa[:-2], sb[:-2]
        static = all(isinstance(d, int) for d in batch_a + batch_b)
        if len(sa) == len(sb) == 3 and (static and batch_a == batch_b or not static):
            out = op.nn.batch_matmul(a, b, transpose_b=False, out_dtype=out_dtype)
        else:
            if not static:
                ctx.fail(f"batched matmul of {sa} and {sb} with symbolic batch dims")
            batch = tuple(np.broadcast_shapes(batch_a, batch_b))
            a = op.broadcast_to(a, shape=batch + tuple(sa[-2:]))
            b = op.broadcast_to(b, shape=batch + tuple(sb[-2:]))
            count = int(np.prod(batch, dtype=np.int64))
            a3 = op.reshape(a, newshape=(count,) + tuple(sa[-2:]))
            b3 = op.reshape(b, newshape=(count,) + tuple(sb[-2:]))
            out = op.nn.batch_matmul(a3, b3, transpose_b=False, out_dtype=out_dtype)
            out = op.reshape(out, newshape=batch + (sa[-2], sb[-1]))
    if ra == 1:
        out = op.squeeze(out, axis=[-2])
    if rb == 1:
        out = op.squeeze(out, axis=[-1])
    return out


# ---- normalization ----------------------------------------------------------------------------

def batch_norm(ctx, inputs, attrs):
    x, scale, bias, mean, var = inputs[:5]
    if attrs.get("training_mode", 0):
        ctx.fail("training_mode=1 is not supported (inference only)")
    out = op.nn.batch_norm(x, scale, bias, mean, var, axis=1, epsilon=attrs.get("epsilon", 1e-5))
    return TupleGetItem(out, 0)


def instance_norm(ctx, inputs, attrs):
    x, scale, bias = inputs
    return op.nn.instance_norm(x, scale, bias, axis=1, epsilon=attrs.get("epsilon", 1e-5))


def layer_norm(ctx, inputs, attrs):
    """LayerNormalization over every axis from ``axis`` on; the Mean and InvStdDev outputs are
    computed when the node asks for them."""
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    rank = ctx.rank(x)
    axis = attrs.get("axis", -1) % rank
    eps = attrs.get("epsilon", 1e-5)
    dt = ctx.dtype(x)
    axes = list(range(axis, rank))
    mean = op.mean(x, axis=axes, keepdims=True)
    centered = op.subtract(x, mean)
    var = op.mean(op.multiply(centered, centered), axis=axes, keepdims=True)
    inv = op.rsqrt(op.add(var, scalar(eps, dt)))
    out = op.multiply(op.multiply(centered, inv), scale)
    if bias is not None:
        out = op.add(out, bias)
    return [out, mean, inv]


def group_norm(ctx, inputs, attrs):
    x, scale, bias = inputs
    groups = attrs["num_groups"]
    shape = ctx.static_shape(x)
    c = shape[1]
    eps = attrs.get("epsilon", 1e-5)
    dt = ctx.dtype(x)
    grouped = op.reshape(x, newshape=(shape[0], groups, -1))
    mean = op.mean(grouped, axis=[2], keepdims=True)
    centered = op.subtract(grouped, mean)
    var = op.mean(op.multiply(centered, centered), axis=[2], keepdims=True)
    normed = op.reshape(op.multiply(centered, op.rsqrt(op.add(var, scalar(eps, dt)))),
                        newshape=shape)
    sshape = ctx.static_shape(scale)
    extra = len(shape) - 2
    if sshape[0] != c:   # opset 18: one scale per group
        scale = op.repeat(scale, repeats=c // groups, axis=0)
        bias = op.repeat(bias, repeats=c // groups, axis=0)
    scale = op.expand_dims(scale, axis=1, num_newaxis=extra) if extra else scale
    bias = op.expand_dims(bias, axis=1, num_newaxis=extra) if extra else bias
    return op.add(op.multiply(normed, scale), bias)


def lrn(ctx, inputs, attrs):
    size = attrs["size"]
    if size % 2 == 0:
        ctx.fail(f"an even size ({size}); relaybench's nn.lrn centres odd windows")
    return op.nn.lrn(inputs[0], size=size, axis=1, bias=attrs.get("bias", 1.0),
                     alpha=attrs.get("alpha", 1e-4), beta=attrs.get("beta", 0.75))


def mean_variance_normalization(ctx, inputs, attrs):
    x = inputs[0]
    axes = list(attrs.get("axes", [0, 2, 3]))
    dt = ctx.dtype(x)
    mean = op.mean(x, axis=axes, keepdims=True)
    centered = op.subtract(x, mean)
    var = op.mean(op.multiply(centered, centered), axis=axes, keepdims=True)
    return op.divide(centered, op.add(op.sqrt(var), scalar(1e-9, dt)))


def dropout(ctx, inputs, attrs):
    x = inputs[0]
    if len(inputs) > 2 and inputs[2] is not None:
        training = ctx.static(inputs[2], "training_mode")
        if training is not None and bool(training) and len(inputs) > 1 and inputs[1] is not None:
            ratio = ctx.static(inputs[1], "ratio")
        else:
            ratio = None
        if training is None or bool(training) and (ratio is None or float(ratio) != 0.0):
            ctx.fail("training_mode must be a constant false, or the ratio 0 (random masks are "
                     "not supported)")
    out = op.copy(x)
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        return [out, op.ones_like(op.cast(x, dtype="bool"))]
    return out


# ---- resize --------------------------------------------------------------------------------------

_RESIZE = {1: (op.image.resize1d, "NCW"), 2: (op.image.resize2d, "NCHW"),
           3: (op.image.resize3d, "NCDHW")}


def resize(ctx, inputs, attrs):
    x = inputs[0]
    shape = ctx.static_shape(x)
    rank = len(shape)
    if ctx.version < 11:     # Resize-10 and Upsample: (X, scales)
        roi, scales, sizes = None, ctx.static(inputs[1], "scales"), None
    else:
        roi = inputs[1] if len(inputs) > 1 else None
        scales = ctx.try_static(inputs[2]) if len(inputs) > 2 and inputs[2] is not None else None
        if len(inputs) > 2 and inputs[2] is not None and scales is None:
            ctx.static(inputs[2], "scales")
        sizes = ctx.static(inputs[3], "sizes") if len(inputs) > 3 and inputs[3] is not None else None
        roi = ctx.static(roi, "roi") if roi is not None else None
        if scales is not None and scales.size == 0:
            scales = None
        if roi is not None and roi.size == 0:
            roi = None
    axes = attrs.get("axes")
    axes = list(range(rank)) if axes is None else [a % rank for a in axes]
    full_scales = [1.0] * rank
    full_sizes = list(shape)
    given_scales = False
    if sizes is not None:
        policy = attrs.get("keep_aspect_ratio_policy", "stretch")
        sizes = [int(s) for s in sizes]
        if policy != "stretch":
            ratios = [sizes[i] / shape[a] for i, a in enumerate(axes)]
            r = min(ratios) if policy == "not_larger" else max(ratios)
            sizes = [int(np.floor(r * shape[a] + 0.5)) for a in axes]
        for i, a in enumerate(axes):
            full_sizes[a] = sizes[i]
            full_scales[a] = sizes[i] / shape[a]
    elif scales is not None:
        given_scales = True
        for i, a in enumerate(axes):
            full_scales[a] = float(scales[i])
            full_sizes[a] = int(np.floor(shape[a] * float(scales[i])))
            if full_sizes[a] < 1 or full_scales[a] <= 0:
                ctx.fail(f"scale {full_scales[a]} of axis {a} (extent {shape[a]}) gives an empty "
                         f"output")
    else:
        ctx.fail("neither scales nor sizes is given")
    if full_sizes[0] != shape[0] or full_sizes[1] != shape[1]:
        ctx.fail("resizing the batch or channel axis is not supported")
    spatial = rank - 2
    if spatial not in _RESIZE:
        ctx.fail(f"{spatial}-d resize is not supported")
    mode = attrs.get("mode", "nearest")
    method = {"nearest": "nearest_neighbor", "linear": "linear", "bilinear": "linear",
              "cubic": "cubic"}.get(mode)
    if method is None:
        ctx.fail(f"mode={mode!r}")
    if ctx.version < 11:
        ctm = "asymmetric"
        rounding = "floor" if method == "nearest_neighbor" else ""
    else:
        ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
        rounding = attrs.get("nearest_mode", "round_prefer_floor") if method == "nearest_neighbor" else ""
    # the coordinate mapping uses the given scales themselves (the output extent is their floor)
    scale_attr = tuple(full_scales[2:]) if given_scales and any(
        abs(full_scales[a] - full_sizes[a] / shape[a]) > 1e-12 for a in range(2, rank)) else None
    antialias = int(attrs.get("antialias", 0)) if method in ("linear", "cubic") else 0
    if antialias and scale_attr is None:
        scale_attr = tuple(full_scales[2:])
    roi_attr = None
    if ctm == "tf_crop_and_resize":
        if roi is None:
            ctx.fail("tf_crop_and_resize needs roi")
        roi = [float(v) for v in roi]
        if len(roi) == 2 * len(axes) and len(axes) != rank:
            full = [0.0] * rank + [1.0] * rank
            for i, a in enumerate(axes):
                full[a], full[rank + a] = roi[i], roi[len(axes) + i]
            roi = full
        roi_attr = tuple(roi[2:rank]) + tuple(roi[rank + 2:])
    func, layout = _RESIZE[spatial]
    return func(x, size=tuple(full_sizes[2:]), roi=roi_attr, layout=layout, method=method,
                coordinate_transformation_mode=ctm, rounding_method=rounding,
                cubic_alpha=attrs.get("cubic_coeff_a", -0.75),
                cubic_exclude=attrs.get("exclude_outside", 0),
                extrapolation_value=attrs.get("extrapolation_value", 0.0), scale=scale_attr,
                antialias=antialias)


# ---- quantized ops ---------------------------------------------------------------------------------

def _per_axis(ctx, value, x, axis: int):
    """A scale or zero point shaped to broadcast along ``axis`` of ``x`` (scalar: as it is)."""
    rank = ctx.rank(value)
    if rank == 0 or (rank == 1 and ctx.static_shape(value)[0] == 1 and axis is None):
        return value
    if rank == 1:
        xr = ctx.rank(x)
        axis = axis % xr
        return op.expand_dims(value, axis=1, num_newaxis=xr - axis - 1) if xr - axis - 1 else value
    return value


def quantize_linear(ctx, inputs, attrs):
    x, scale = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 else None
    out_dtype = ctx.dtype(zp) if zp is not None else "uint8"
    if attrs.get("block_size", 0):
        scale = _blocked(ctx, scale, x, attrs)
        zp = None if zp is None else _blocked(ctx, zp, x, attrs)
    if "output_dtype" in attrs and attrs["output_dtype"]:
        from .importer import dtype_of
        out_dtype = dtype_of(attrs["output_dtype"], f"{ctx.where}: output_dtype")
    axis = attrs.get("axis", 1)
    scale = _per_axis(ctx, scale, x, axis)
    dt = ctx.dtype(x)
    if ctx.dtype(scale) != dt:
        x = op.cast(x, dtype="float32")
        scale = op.cast(scale, dtype="float32")
        dt = "float32"
    y = _round_even(op.divide(x, scale), dt)
    if zp is not None:
        y = op.add(y, op.cast(_per_axis(ctx, zp, inputs[0], axis), dtype=dt))
    info = np.iinfo(out_dtype)
    return op.cast(op.clip(y, a_min=float(info.min), a_max=float(info.max)), dtype=out_dtype)


def _blocked(ctx, value, x, attrs):
    """Blocked quantization: each scale (zero point) covers ``block_size`` consecutive elements
    along ``axis``; repeated to the data's shape."""
    axis = attrs.get("axis", 1) % ctx.rank(x)
    n = ctx.static_shape(x)[axis]
    full = op.repeat(value, repeats=attrs["block_size"], axis=axis)
    return op.strided_slice(full, begin=(0,), end=(n,), axes=(axis,))


def _round_even(x, dt):
    frac = op.subtract(x, op.floor(x))
    half = op.equal(frac, scalar(0.5, dt))
    even = op.multiply(op.round(op.multiply(x, scalar(0.5, dt))), scalar(2, dt))
    return op.where(half, even, op.round(x))


def dequantize_linear(ctx, inputs, attrs):
    x, scale = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 else None
    if attrs.get("block_size", 0):
        scale = _blocked(ctx, scale, x, attrs)
        zp = None if zp is None else _blocked(ctx, zp, x, attrs)
    axis = attrs.get("axis", 1)
    dt = ctx.dtype(scale)
    xi = op.cast(x, dtype="int32")
    if zp is not None:
        xi = op.subtract(xi, op.cast(_per_axis(ctx, zp, x, axis), dtype="int32"))
    return op.multiply(op.cast(xi, dtype=dt), _per_axis(ctx, scale, x, axis))


def _minus_zero_point(ctx, x, zp, axis=None):
    xi = op.cast(x, dtype="int32")
    if zp is None:
        return xi
    zp = op.cast(zp, dtype="int32")
    if axis is not None and ctx.rank(zp) == 1 and ctx.static_shape(zp)[0] > 1:
        zp = _per_axis(ctx, zp, x, axis)
    return op.subtract(xi, zp)


def conv_integer(ctx, inputs, attrs):
    x, w = inputs[0], inputs[1]
    xz = inputs[2] if len(inputs) > 2 else None
    wz = inputs[3] if len(inputs) > 3 else None
    xi = _minus_zero_point(ctx, x, xz)
    wi = _minus_zero_point(ctx, w, wz, axis=0)
    return conv(ctx, [xi, wi], attrs, out_dtype="int32")


def matmul_integer(ctx, inputs, attrs):
    a, b = inputs[0], inputs[1]
    az = inputs[2] if len(inputs) > 2 else None
    bz = inputs[3] if len(inputs) > 3 else None
    ai = _minus_zero_point(ctx, a, az, axis=0 if az is not None and ctx.rank(az) == 1 else None)
    bi = _minus_zero_point(ctx, b, bz, axis=None)
    return matmul(ctx, [ai, bi], attrs, out_dtype="int32")


def _requantize(ctx, acc, scale, y_scale, y_zp, out_dtype):
    """int32 accumulator times ``scale / y_scale`` plus ``y_zp``, rounded half to even and
    saturated, in float32 as ONNX's reference computes it."""
    real = op.divide(op.multiply(op.cast(acc, dtype="float32"), op.cast(scale, dtype="float32")),
                     op.cast(y_scale, dtype="float32"))
    y = _round_even(real, "float32")
    if y_zp is not None:
        y = op.add(y, op.cast(y_zp, dtype="float32"))
    info = np.iinfo(out_dtype)
    return op.cast(op.clip(y, a_min=float(info.min), a_max=float(info.max)), dtype=out_dtype)


def qlinear_conv(ctx, inputs, attrs):
    x, xs, xz, w, ws, wz, ys, yz = inputs[:8]
    bias = inputs[8] if len(inputs) > 8 else None
    xi = _minus_zero_point(ctx, x, xz)
    wi = _minus_zero_point(ctx, w, wz, axis=0)
    acc = conv(ctx, [xi, wi], attrs, out_dtype="int32")
    if bias is not None:
        acc = op.nn.bias_add(acc, op.cast(bias, dtype="int32"), axis=1)
    ws_b = ws
    if ctx.rank(ws) == 1 and ctx.static_shape(ws)[0] > 1:
        ws_b = op.expand_dims(ws, axis=1, num_newaxis=ctx.rank(x) - 2)
    return _requantize(ctx, acc, op.multiply(xs, ws_b), ys, yz, ctx.dtype(yz))


def qlinear_matmul(ctx, inputs, attrs):
    a, a_s, az, b, b_s, bz, ys, yz = inputs[:8]
    ai = _minus_zero_point(ctx, a, az)
    bi = _minus_zero_point(ctx, b, bz)
    acc = matmul(ctx, [ai, bi], attrs, out_dtype="int32")
    return _requantize(ctx, acc, op.multiply(a_s, b_s), ys, yz, ctx.dtype(yz))


def dynamic_quantize_linear(ctx, inputs, attrs):
    x = inputs[0]
    zero = scalar(0, "float32")
    lo = op.minimum(op.min(x), zero)
    hi = op.maximum(op.max(x), zero)
    scale = op.divide(op.subtract(hi, lo), scalar(255, "float32"))
    zp_f = op.clip(_round_even(op.subtract(zero, op.divide(lo, scale)), "float32"),
                   a_min=0.0, a_max=255.0)
    y = op.add(_round_even(op.divide(x, scale), "float32"), zp_f)
    y = op.cast(op.clip(y, a_min=0.0, a_max=255.0), dtype="uint8")
    return [y, scale, op.cast(zp_f, dtype="uint8")]



def batch_norm_training(ctx, inputs, attrs):
    """BatchNormalization with ``training_mode=1``: normalized by the batch's own statistics;
    the running mean and variance outputs blend them with the inputs by ``momentum``."""
    x, scale, bias, mean, var = inputs[:5]
    rank = ctx.rank(x)
    axes = [0] + list(range(2, rank))
    dt = ctx.dtype(x)
    eps, momentum = attrs.get("epsilon", 1e-5), attrs.get("momentum", 0.9)
    bmean = op.mean(x, axis=axes)
    centered = op.subtract(x, op.expand_dims(bmean, axis=1, num_newaxis=rank - 2))
    bvar = op.mean(op.multiply(centered, centered), axis=axes)
    ext = rank - 2

    def per_channel(v):
        return op.expand_dims(v, axis=1, num_newaxis=ext) if ext else v
    y = op.add(op.multiply(op.multiply(centered, per_channel(op.rsqrt(op.add(bvar, scalar(eps, dt))))),
                           per_channel(scale)), per_channel(bias))
    m = scalar(momentum, dt)
    rest = scalar(1 - momentum, dt)
    running_mean = op.add(op.multiply(mean, m), op.multiply(bmean, rest))
    running_var = op.add(op.multiply(var, m), op.multiply(bvar, rest))
    return [y, running_mean, running_var]


def batch_norm_any(ctx, inputs, attrs):
    if attrs.get("training_mode", 0):
        return batch_norm_training(ctx, inputs, attrs)
    return batch_norm(ctx, inputs, attrs)


# ---- attention -----------------------------------------------------------------------------------

def attention(ctx, inputs, attrs):
    """ONNX's Attention (opset 23) written with Relay's ops: heads split from 3-d inputs, the
    key/value cache concatenated, grouped-query heads repeated, ``softmax(q k^T * scale +
    bias) v`` with the mask, causal and padding biases built at import time where they are
    static, and the optional softcap; outputs Y, present key and value, and the QK product at
    the stage ``qk_matmul_output_mode`` selects."""
    q, k, v = inputs[:3]
    mask, past_k, past_v, nonpad = (inputs[i] if len(inputs) > i else None for i in range(3, 7))
    rank = ctx.rank(q)
    dt = ctx.dtype(q)
    if rank == 3:
        qh, kvh = attrs.get("q_num_heads"), attrs.get("kv_num_heads")
        if not qh or not kvh:
            ctx.fail("3-d inputs need q_num_heads and kv_num_heads")

        def heads(x, n):
            b, s, _ = ctx.static_shape(x)
            return op.transpose(op.reshape(x, newshape=(b, s, n, -1)), axes=(0, 2, 1, 3))
        q, k, v = heads(q, qh), heads(k, kvh), heads(v, kvh)
    batch, q_heads, sq, head = ctx.static_shape(q)
    scale = attrs.get("scale", 1.0 / np.sqrt(head))
    past = 0
    if past_k is not None:
        past = ctx.static_shape(past_k)[2]
        k = op.concatenate([past_k, k], axis=2)
    if past_v is not None:
        v = op.concatenate([past_v, v], axis=2)
    present_k, present_v = k, v
    skv = ctx.static_shape(k)[2]
    kv_heads = ctx.static_shape(k)[1]
    bias = None
    if mask is not None:
        width = ctx.static_shape(mask)[-1]
        if ctx.dtype(mask) == "bool":
            if width < skv:
                mask = op.nn.pad(mask, Constant(np.asarray(False)), pad_width=tuple(
                    [(0, 0)] * (ctx.rank(mask) - 1) + [(0, skv - width)]))
            bias = op.where(mask, scalar(0, dt), scalar(-np.inf, dt))
        else:
            bias = mask if ctx.dtype(mask) == dt else op.cast(mask, dtype=dt)
            if width < skv:
                bias = op.nn.pad(bias, scalar(-np.inf, dt), pad_width=tuple(
                    [(0, 0)] * (ctx.rank(mask) - 1) + [(0, skv - width)]))
    if attrs.get("is_causal", 0):
        causal = np.zeros((sq, skv), dtype=dt)
        causal[:, past:] = np.where(np.triu(np.ones((sq, skv - past)), k=1) == 1, -np.inf, 0)
        bias = Constant(causal) if bias is None else op.add(bias, Constant(causal))
    if nonpad is not None:
        lengths = op.reshape(op.cast(nonpad, dtype="int64"), newshape=(batch, 1, 1, 1))
        keep = op.less(Constant(np.arange(skv, dtype=np.int64).reshape(1, 1, 1, skv)), lengths)
        pad_bias = op.where(keep, scalar(0, dt), scalar(-np.inf, dt))
        bias = pad_bias if bias is None else op.add(bias, pad_bias)
    if q_heads != kv_heads and q_heads % kv_heads == 0:
        k = op.repeat(k, repeats=q_heads // kv_heads, axis=1)
        v = op.repeat(v, repeats=q_heads // kv_heads, axis=1)
    root = scalar(np.sqrt(scale), dt)
    qk = matmul(ctx, [op.multiply(q, root), op.transpose(op.multiply(k, root), axes=(0, 1, 3, 2))],
                {})
    softcap = attrs.get("softcap", 0.0)
    if softcap and softcap > 0:
        qk = op.multiply(op.tanh(op.divide(qk, scalar(softcap, dt))), scalar(softcap, dt))
    with_bias = qk if bias is None else op.add(qk, bias)
    mode = attrs.get("qk_matmul_output_mode", 0)
    logits = with_bias
    if attrs.get("softmax_precision"):
        from .importer import dtype_of
        logits = op.cast(logits, dtype=dtype_of(attrs["softmax_precision"], ctx.where))
    probs = op.nn.softmax(logits, axis=-1)
    if ctx.dtype(probs) != dt:
        probs = op.cast(probs, dtype=dt)
    y = matmul(ctx, [probs, v], {})
    if rank == 3:
        y = op.reshape(op.transpose(y, axes=(0, 2, 1, 3)), newshape=(batch, sq, -1))
    qk_out = {0: qk, 1: qk, 2: with_bias, 3: probs}.get(mode, qk)
    return [y, present_k, present_v, qk_out]


def rotary_embedding(ctx, inputs, attrs):
    """RotaryEmbedding (opset 23): the first ``rotary_embedding_dim`` features of each head are
    rotated in pairs (halves, or neighbours with ``interleaved``) by the cached angles of each
    position."""
    x, cos, sin = inputs[:3]
    positions = inputs[3] if len(inputs) > 3 else None
    shape = ctx.static_shape(x)
    if len(shape) == 4:              # (batch, heads, seq, head) -> (batch, seq, heads, head)
        h = op.transpose(x, axes=(0, 2, 1, 3))
    else:
        heads = attrs.get("num_heads", 0)
        if not heads:
            ctx.fail("a 3-d input needs num_heads")
        h = op.reshape(x, newshape=(shape[0], shape[1], heads, -1))
    b, s, n, head = ctx.static_shape(h)
    dim = attrs.get("rotary_embedding_dim", 0) or head
    half = dim // 2
    if positions is not None:
        cos = op.take(cos, positions, axis=0, mode="fast")
        sin = op.take(sin, positions, axis=0, mode="fast")
    cos, sin = op.expand_dims(cos, axis=-2), op.expand_dims(sin, axis=-2)
    rotate = op.strided_slice(h, begin=(0,), end=(dim,), axes=(3,))
    if attrs.get("interleaved", 0):
        x1 = op.strided_slice(rotate, begin=(0,), end=(dim,), strides=(2,), axes=(3,))
        x2 = op.strided_slice(rotate, begin=(1,), end=(dim,), strides=(2,), axes=(3,))
    else:
        x1 = op.strided_slice(rotate, begin=(0,), end=(half,), axes=(3,))
        x2 = op.strided_slice(rotate, begin=(half,), end=(dim,), axes=(3,))
    real = op.subtract(op.multiply(cos, x1), op.multiply(sin, x2))
    imag = op.add(op.multiply(sin, x1), op.multiply(cos, x2))
    if attrs.get("interleaved", 0):
        rotated = op.reshape(op.stack([real, imag], axis=-1), newshape=(b, s, n, dim))
    else:
        rotated = op.concatenate([real, imag], axis=-1)
    if dim < head:
        rest = op.strided_slice(h, begin=(dim,), end=(head,), axes=(3,))
        rotated = op.concatenate([rotated, rest], axis=-1)
    if len(shape) == 4:
        return op.transpose(rotated, axes=(0, 2, 1, 3))
    return op.reshape(rotated, newshape=shape)


def causal_conv_with_state(ctx, inputs, attrs):
    """CausalConvWithState: a depthwise 1-d convolution over the past state followed by the
    input (zeros when there is no state), optionally with SiLU; the new state is the last
    ``k - 1`` steps it saw."""
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    state = inputs[3] if len(inputs) > 3 else None
    b, c, _ = ctx.static_shape(x)
    k = ctx.static_shape(w, "weight")[2]
    dt = ctx.dtype(x)
    if state is None:
        state = Constant(np.zeros((b, c, k - 1), dtype=dt))
    padded = op.concatenate([state, x], axis=2)
    out = op.nn.conv1d(padded, w, groups=c, channels=c, kernel_size=(k,))
    if bias is not None:
        out = op.nn.bias_add(out, bias, axis=1)
    activation = attrs.get("activation", "none")
    if activation in ("silu", "swish"):
        f = op.cast(out, dtype="float32") if dt != "float32" else out
        f = op.multiply(f, op.sigmoid(f))
        out = op.cast(f, dtype=dt) if dt != "float32" else f
    elif activation != "none":
        ctx.fail(f"activation={activation!r}")
    total = ctx.static_shape(padded)[2]
    present = op.strided_slice(padded, begin=(total - (k - 1),), end=(total,), axes=(2,))
    return [out, present]


def linear_attention(ctx, inputs, attrs):
    """LinearAttention: the recurrent state ``S`` (per head, ``d_k x d_v``) updated at each step
    (``gated``: decayed by ``exp(decay)``; ``delta``: the value corrected by what ``S``
    already returns for the key, times ``beta``) and read by the query. The sequence length is
    static, so the recurrence is unrolled into the program, one step after another, in float32."""
    q, k, v = inputs[:3]
    state, decay, beta = (inputs[i] if len(inputs) > i else None for i in range(3, 6))
    rule = attrs.get("update_rule", "gated_delta")
    qh, kvh = attrs.get("q_num_heads"), attrs.get("kv_num_heads")
    if not qh or not kvh or qh % kvh:
        ctx.fail("q_num_heads and kv_num_heads must be given, q a multiple of kv")
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        ctx.fail(f"update_rule={rule!r}")
    if gated and decay is None or delta and beta is None:
        ctx.fail(f"update_rule={rule!r} needs {'decay' if gated else 'beta'}")
    b, t, _ = ctx.static_shape(q)
    dt = ctx.dtype(q)
    dk = ctx.static_shape(q)[2] // qh
    dv = ctx.static_shape(v)[2] // kvh
    f32 = "float32"

    def heads(x, n):       # (B, T, n*d) -> (B, n, T, d), float32
        x = op.transpose(op.reshape(x, newshape=(b, t, n, -1)), axes=(0, 2, 1, 3))
        return x if ctx.dtype(x) == f32 else op.cast(x, dtype=f32)

    def step(x, i):        # (B, H, T, d) -> (B, H, d)
        return op.squeeze(op.strided_slice(x, begin=(i,), end=(i + 1,), axes=(2,)), axis=[2])
    q4, k4, v4 = heads(q, qh), heads(k, kvh), heads(v, kvh)
    if gated:
        last = ctx.static_shape(decay)[-1]
        decay4 = heads(decay, kvh) if last == kvh * dk else heads(decay, kvh)
    if delta:
        beta4 = heads(beta, ctx.static_shape(beta)[-1])
    if state is None:
        s = Constant(np.zeros((b, kvh, dk, dv), dtype=f32))
        state_dtype = dt
    else:
        state_dtype = ctx.dtype(state)
        s = state if state_dtype == f32 else op.cast(state, dtype=f32)
    scale = attrs.get("scale", 0.0) or 1.0 / np.sqrt(dk)
    outs = []
    for i in range(t):
        k_t, v_t = step(k4, i), step(v4, i)
        if gated:
            s = op.multiply(s, op.expand_dims(op.exp(step(decay4, i)), axis=-1))
        if delta:
            retrieved = op.sum(op.multiply(s, op.expand_dims(k_t, axis=-1)), axis=[2])
            v_t = op.multiply(step(beta4, i), op.subtract(v_t, retrieved))
        s = op.add(s, op.multiply(op.expand_dims(k_t, axis=-1), op.expand_dims(v_t, axis=-2)))
        read = s if qh == kvh else op.repeat(s, repeats=qh // kvh, axis=1)
        q_t = step(q4, i)
        outs.append(op.multiply(op.sum(op.multiply(op.expand_dims(q_t, axis=-1), read), axis=[2]),
                                scalar(scale, f32)))
    y = op.stack(outs, axis=2)                               # (B, Hq, T, dv)
    y = op.reshape(op.transpose(y, axes=(0, 2, 1, 3)), newshape=(b, t, qh * dv))
    if dt != f32:
        y = op.cast(y, dtype=dt)
    return [y, s if state_dtype == f32 else op.cast(s, dtype=state_dtype)]


# ---- grid sampling ----------------------------------------------------------------------------------

def _reflect(x, lo: float, hi: float):
    """Coordinates folded back into ``[lo, hi]`` by reflecting at the borders, as often as it
    takes (float32 expressions)."""
    f32 = "float32"
    span = scalar(hi - lo, f32)
    below, above = op.less(x, scalar(lo, f32)), op.greater(x, scalar(hi, f32))
    dx = op.where(below, op.subtract(scalar(lo, f32), x), op.subtract(x, scalar(hi, f32)))
    n = op.floor(op.divide(dx, span))
    r = op.subtract(dx, op.multiply(n, span))
    even = op.equal(op.floor_mod(n, scalar(2, f32)), scalar(0, f32))
    from_lo, from_hi = op.add(scalar(lo, f32), r), op.subtract(scalar(hi, f32), r)
    folded = op.where(below, op.where(even, from_lo, from_hi), op.where(even, from_hi, from_lo))
    return op.where(op.logical_or(below, above), folded, x)


def _cubic_weights(t):
    """Keys' cubic convolution weights (a = -0.75) of the taps at -1, 0, 1, 2 for a fraction t."""
    a = -0.75
    f32 = "float32"

    def near(d):     # |d| <= 1
        return op.add(op.multiply(op.multiply(op.subtract(op.multiply(scalar(a + 2, f32), d),
                                                          scalar(a + 3, f32)), d), d), scalar(1, f32))

    def far(d):      # 1 < |d| < 2
        inner = op.add(op.multiply(op.subtract(op.multiply(scalar(a, f32), d), scalar(5 * a, f32)), d),
                       scalar(8 * a, f32))
        return op.subtract(op.multiply(inner, d), scalar(4 * a, f32))
    one = scalar(1, f32)
    return [far(op.add(t, one)), near(t), near(op.subtract(one, t)),
            far(op.subtract(scalar(2, f32), t))]


def grid_sample(ctx, inputs, attrs):
    """GridSample: each output point reads the input at the coordinates the grid gives it
    (normalized to [-1, 1], x first), by nearest, linear or cubic interpolation over every
    spatial axis, with zeros, border or reflection padding. Written as gathers from the
    flattened input: one gather per interpolation tap, weighted and summed."""
    import itertools
    x, grid = inputs
    xs = ctx.static_shape(x)
    gs = ctx.static_shape(grid, "grid")
    n, c, spatial = xs[0], xs[1], list(xs[2:])
    nd = len(spatial)
    out = gs[1:-1]
    q = int(np.prod(out, dtype=np.int64))
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(attrs.get("mode", "linear"),
                                                          attrs.get("mode", "linear"))
    padding = attrs.get("padding_mode", "zeros")
    align = bool(attrs.get("align_corners", 0))
    if mode not in ("nearest", "linear", "cubic") or padding not in ("zeros", "border", "reflection"):
        ctx.fail(f"mode={mode!r}, padding_mode={padding!r}")
    dt, f32 = ctx.dtype(x), "float32"
    g = grid if ctx.dtype(grid) == f32 else op.cast(grid, dtype=f32)
    taps = []          # per axis: [(index (int64, N x Q), weight (f32, N x Q)), ...]
    for d, size in enumerate(spatial):
        coord = op.reshape(op.strided_slice(g, begin=(nd - 1 - d,), end=(nd - d,), axes=(len(gs) - 1,)),
                           newshape=(n, q))
        if align:
            pos = op.multiply(op.add(coord, scalar(1, f32)), scalar((size - 1) / 2, f32))
        else:
            pos = op.divide(op.subtract(op.multiply(op.add(coord, scalar(1, f32)), scalar(size, f32)),
                                        scalar(1, f32)), scalar(2, f32))
        if mode == "nearest":
            pos = _round_even(pos, f32)
        lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        outside = op.logical_or(op.less(pos, scalar(lo, f32)), op.greater(pos, scalar(hi, f32)))
        if padding == "border":
            pos = op.where(outside, op.clip(pos, a_min=0.0, a_max=float(size - 1)), pos)
        elif padding == "reflection":
            pos = _reflect(pos, lo, hi)
        if mode == "nearest":
            axis_taps = [(pos, op.ones_like(pos))]
        else:
            base = op.floor(pos)
            t = op.subtract(pos, base)
            if mode == "linear":
                offsets, weights = (0, 1), [op.subtract(scalar(1, f32), t), t]
            else:
                offsets, weights = (-1, 0, 1, 2), _cubic_weights(t)
            axis_taps = [(op.add(base, scalar(o, f32)), w) for o, w in zip(offsets, weights)]
        fixed = []
        for index, weight in axis_taps:
            if padding == "zeros":
                inside = op.logical_and(op.greater_equal(index, scalar(0, f32)),
                                        op.less_equal(index, scalar(size - 1, f32)))
                weight = op.where(inside, weight, scalar(0, f32))
                index = op.clip(index, a_min=0.0, a_max=float(size - 1))
            elif padding == "border":
                index = op.clip(index, a_min=0.0, a_max=float(size - 1))
            else:
                index = op.clip(op.trunc(_reflect(index, lo, hi)), a_min=0.0, a_max=float(size - 1))
            fixed.append((op.cast(index, dtype="int64"), weight))
        taps.append(fixed)
    strides = [int(np.prod(spatial[d + 1:], dtype=np.int64)) for d in range(nd)]
    flat = op.reshape(x, newshape=(n, c, -1))
    total = None
    for combo in itertools.product(*taps):
        index, weight = None, None
        for d, (i, w) in enumerate(combo):
            term = op.multiply(i, scalar(strides[d], "int64")) if strides[d] != 1 else i
            index = term if index is None else op.add(index, term)
            weight = w if weight is None else op.multiply(weight, w)
        picked = op.gather(flat, op.broadcast_to(op.expand_dims(index, axis=1), shape=(n, c, q)), axis=2)
        w = op.expand_dims(weight if dt == f32 else op.cast(weight, dtype=dt), axis=1)
        term = op.multiply(picked, w)
        total = term if total is None else op.add(total, term)
    return op.reshape(total, newshape=(n, c) + tuple(out))


def affine_grid(ctx, inputs, attrs):
    """AffineGrid: the sampling grid of an affine map ``theta`` over an output of ``size``
    (normalized coordinates, x first), as GridSample reads it."""
    theta, size = inputs
    size = [int(v) for v in np.asarray(ctx.static(size, "size")).reshape(-1)]
    spatial = size[2:]
    align = bool(attrs.get("align_corners", 0))
    dt = ctx.dtype(theta)

    def axis(extent):
        if align:
            return np.linspace(-1.0, 1.0, extent) if extent > 1 else np.zeros(1)
        return (np.arange(extent) * 2.0 + 1.0) / extent - 1.0
    mesh = np.meshgrid(*[axis(e) for e in spatial], indexing="ij")      # spatial order (z, y, x)
    base = np.stack([m.reshape(-1) for m in mesh[::-1]] + [np.ones(mesh[0].size)], axis=1)
    n = size[0]
    base_t = Constant(np.broadcast_to(base.astype(dt), (n,) + base.shape).copy())
    coords = op.nn.batch_matmul(base_t, theta, transpose_b=True)        # (N, points, dims)
    return op.reshape(coords, newshape=(n,) + tuple(spatial) + (len(spatial),))


# ---- recurrent layers ------------------------------------------------------------------------------

_ACTIVATIONS = {"sigmoid": op.sigmoid, "tanh": op.tanh, "relu": op.nn.relu}


def _activation(ctx, name: str):
    func = _ACTIVATIONS.get(name.lower())
    if func is None:
        ctx.fail(f"activation {name!r} (relaybench has Sigmoid, Tanh and Relu here)")
    return func


def _rnn(kind: str):
    """RNN, GRU and LSTM over a sequence of static length, unrolled step by step (in each
    direction) into the program; ``sequence_lens`` (static) stops a batch row early: its state
    is kept and its outputs are zero past its length."""
    gates = {"rnn": 1, "gru": 3, "lstm": 4}[kind]
    defaults = {"rnn": ["Tanh"], "gru": ["Sigmoid", "Tanh"], "lstm": ["Sigmoid", "Tanh", "Tanh"]}[kind]

    def convert(ctx, inputs, attrs):
        x, w, r = inputs[:3]
        b, lens, h0 = (inputs[i] if len(inputs) > i else None for i in range(3, 6))
        c0 = inputs[6] if kind == "lstm" and len(inputs) > 6 else None
        peep = inputs[7] if kind == "lstm" and len(inputs) > 7 else None
        if attrs.get("clip") is not None:
            ctx.fail("clip is not supported")
        layout = attrs.get("layout", 0)
        if layout:
            x = op.transpose(x, axes=(1, 0, 2))
        seq, batch, _ = ctx.static_shape(x)
        dirs, _, _ = ctx.static_shape(w, "W")
        hidden = attrs.get("hidden_size") or ctx.static_shape(r, "R")[2]
        dt = ctx.dtype(x)
        direction = attrs.get("direction", "forward")
        names = attrs.get("activations") or defaults * dirs
        lengths = None
        if lens is not None:
            lengths = np.asarray(ctx.static(lens, "sequence_lens")).astype(np.int64)
            if (lengths >= seq).all():
                lengths = None
        steps_x = [op.squeeze(op.strided_slice(x, begin=(t,), end=(t + 1,), axes=(0,)), axis=[0])
                   for t in range(seq)]
        ys, hs, cs = [], [], []
        for d in range(dirs):
            reverse = direction == "reverse" or d == 1
            acts = [_activation(ctx, n) for n in names[d * len(defaults):(d + 1) * len(defaults)]]

            def pick(t, i, rows=hidden):       # rows i*rows ... of direction d of a weight
                return op.strided_slice(t, begin=(d, i * rows), end=(d + 1, (i + 1) * rows),
                                        axes=(0, 1))
            wd = [op.squeeze(pick(w, i), axis=[0]) for i in range(gates)]
            rd = [op.squeeze(pick(r, i), axis=[0]) for i in range(gates)]
            if b is not None:
                wb = [op.squeeze(pick(b, i), axis=[0]) for i in range(gates)]
                rb = [op.squeeze(pick(b, gates + i), axis=[0]) for i in range(gates)]
            else:
                zero = Constant(np.zeros(hidden, dt))
                wb, rb = [zero] * gates, [zero] * gates
            if peep is not None:
                pd = [op.squeeze(pick(peep, i), axis=[0]) for i in range(3)]
            h = (op.squeeze(op.strided_slice(h0, begin=(d,), end=(d + 1,), axes=(0,)), axis=[0])
                 if h0 is not None else Constant(np.zeros((batch, hidden), dt)))
            c = (op.squeeze(op.strided_slice(c0, begin=(d,), end=(d + 1,), axes=(0,)), axis=[0])
                 if c0 is not None else Constant(np.zeros((batch, hidden), dt)))
            outs = [None] * seq
            order = range(seq - 1, -1, -1) if reverse else range(seq)
            for t in order:
                xt = steps_x[t]

                def lin(i, state):
                    return op.add(op.add(op.nn.dense(xt, wd[i]), wb[i]),
                                  op.add(op.nn.dense(state, rd[i]), rb[i]))
                if kind == "rnn":
                    new_h, new_c = acts[0](lin(0, h)), c
                elif kind == "gru":
                    z = acts[0](lin(0, h))
                    rr = acts[0](lin(1, h))
                    if attrs.get("linear_before_reset", 0):
                        rec = op.multiply(rr, op.add(op.nn.dense(h, rd[2]), rb[2]))
                    else:
                        rec = op.add(op.nn.dense(op.multiply(rr, h), rd[2]), rb[2])
                    cand = acts[1](op.add(op.add(op.nn.dense(xt, wd[2]), wb[2]), rec))
                    one = scalar(1, dt)
                    new_h, new_c = op.add(op.multiply(op.subtract(one, z), cand), op.multiply(z, h)), c
                else:
                    gi, go, gf, gc = (lin(i, h) for i in range(4))
                    if peep is not None:
                        gi = op.add(gi, op.multiply(pd[0], c))
                        gf = op.add(gf, op.multiply(pd[2], c))
                    i_, f_ = acts[0](gi), acts[0](gf)
                    new_c = op.add(op.multiply(f_, c), op.multiply(i_, acts[1](gc)))
                    if peep is not None:
                        go = op.add(go, op.multiply(pd[1], new_c))
                    new_h = op.multiply(acts[0](go), acts[2](new_c))
                if lengths is not None:
                    live = Constant((t < lengths).reshape(batch, 1))
                    outs[t] = op.where(live, new_h, scalar(0, dt))
                    h, c = op.where(live, new_h, h), op.where(live, new_c, c)
                else:
                    outs[t], h, c = new_h, new_h, new_c
            ys.append(op.stack(outs, axis=0))           # (seq, batch, hidden)
            hs.append(h)
            cs.append(c)
        y = op.stack(ys, axis=1)                         # (seq, dirs, batch, hidden)
        yh, yc = op.stack(hs, axis=0), op.stack(cs, axis=0)
        if layout:
            y = op.transpose(y, axes=(2, 0, 1, 3))
            yh, yc = op.transpose(yh, axes=(1, 0, 2)), op.transpose(yc, axes=(1, 0, 2))
        return [y, yh, yc] if kind == "lstm" else [y, yh]
    return convert


rnn = _rnn("rnn")
gru = _rnn("gru")
lstm = _rnn("lstm")


def flex_attention(ctx, inputs, attrs):
    """FlexAttention (ai.onnx.preview): ``softmax(score_mod(q k^T * scale))`` then ``prob_mod``,
    times v; the two modifiers are subgraphs imported inline on the scores and the
    probabilities. Computed in ``softmax_precision`` (float32, or float64 for float64 inputs)."""
    from .importer import dtype_of
    q, k, v = inputs[:3]
    dt = ctx.dtype(q)
    if attrs.get("softmax_precision"):
        work = dtype_of(attrs["softmax_precision"], f"{ctx.where}: softmax_precision")
    else:
        work = "float64" if dt == "float64" else "float32"

    def as_work(t):
        return t if ctx.dtype(t) == work else op.cast(t, dtype=work)
    q, k, v = as_work(q), as_work(k), as_work(v)
    q_heads, head = ctx.static_shape(q)[1], ctx.static_shape(q)[3]
    kv_heads = ctx.static_shape(k)[1]
    if q_heads != kv_heads:
        if q_heads % kv_heads:
            ctx.fail(f"{q_heads} query heads are not a multiple of {kv_heads} key/value heads")
        k = op.repeat(k, repeats=q_heads // kv_heads, axis=1)
        v = op.repeat(v, repeats=q_heads // kv_heads, axis=1)
    scale = attrs.get("scale", 1.0 / np.sqrt(head))
    scores = op.multiply(matmul(ctx, [q, op.transpose(k, axes=(0, 1, 3, 2))], {}), scalar(scale, work))
    if "score_mod" in attrs:
        scores = ctx.subgraph(attrs["score_mod"], [scores])
    probs = op.nn.softmax(scores, axis=-1)
    if "prob_mod" in attrs:
        probs = ctx.subgraph(attrs["prob_mod"], [probs])
    y = matmul(ctx, [probs, v], {})
    return y if work == dt else op.cast(y, dtype=dt)


# ---- discrete Fourier transform ---------------------------------------------------------------------

def dft(ctx, inputs, attrs):
    """DFT as two matrix products with constant cosine and sine tables (the length is static):
    the signal axis is moved last, cut or zero-padded to ``dft_length``, and multiplied; the
    last axis holds (real, imaginary). ``onesided`` keeps the first half (forward) or reads a
    one-sided spectrum and returns the real signal (inverse)."""
    x = inputs[0]
    shape = ctx.static_shape(x)
    rank = len(shape)
    out_dtype = ctx.dtype(x)
    dt = "float64"       # sums of many products: accumulate in double, as numpy's FFT does
    x = op.cast(x, dtype=dt) if out_dtype != dt else x
    if ctx.version >= 20:
        axis = -2
        if len(inputs) > 2 and inputs[2] is not None:
            axis = int(np.asarray(ctx.static(inputs[2], "axis")).reshape(-1)[0])
    else:
        axis = attrs.get("axis", 1)
    axis %= rank
    if axis == rank - 1:
        ctx.fail("the signal axis cannot be the last (real, imaginary) axis")
    inverse, onesided = bool(attrs.get("inverse", 0)), bool(attrs.get("onesided", 0))
    n_in = shape[axis]
    length = None
    if len(inputs) > 1 and inputs[1] is not None:
        length = int(np.asarray(ctx.static(inputs[1], "dft_length")).reshape(-1)[0])
    if length is None:
        length = 2 * (n_in - 1) if inverse and onesided else n_in
    perm = [i for i in range(rank - 1) if i != axis] + [axis, rank - 1]
    moved = op.transpose(x, axes=tuple(perm))             # (..., n, 1 or 2)
    real = op.squeeze(op.strided_slice(moved, begin=(0,), end=(1,), axes=(rank - 1,)), axis=[rank - 1])
    imag = None
    if shape[-1] == 2:
        imag = op.squeeze(op.strided_slice(moved, begin=(1,), end=(2,), axes=(rank - 1,)),
                          axis=[rank - 1])
    n_read = n_in if inverse and onesided else length

    def fit(t):          # cut or zero-pad the signal axis (now the last) to n_read
        if n_in > n_read:
            return op.strided_slice(t, begin=(0,), end=(n_read,), axes=(rank - 2,))
        if n_in < n_read:
            width = [(0, 0)] * (rank - 2) + [(0, n_read - n_in)]
            return op.nn.pad(t, scalar(0, dt), pad_width=tuple(width))
        return t
    real = fit(real)
    imag = None if imag is None else fit(imag)
    j = np.arange(n_read)
    if inverse and onesided:
        # a one-sided spectrum of a real signal of `length` samples: the other half is conjugate
        k_out = np.arange(length)
        theta = 2 * np.pi * np.outer(k_out, j) / length
        weight = np.where((j == 0) | ((length % 2 == 0) & (j == length // 2)), 1.0, 2.0)
        cos_t = Constant((np.cos(theta) * weight / length).astype(dt))
        sin_t = Constant((np.sin(theta) * weight / length).astype(dt))
        out = op.nn.dense(real, cos_t)
        if imag is not None:
            out = op.subtract(out, op.nn.dense(imag, sin_t))
        out = op.expand_dims(out, axis=-1)
    else:
        k_out = np.arange(length // 2 + 1 if onesided else length)
        theta = 2 * np.pi * np.outer(k_out, j) / length
        sign = 1.0 if inverse else -1.0
        norm = 1.0 / length if inverse else 1.0
        cos_t = Constant((np.cos(theta) * norm).astype(dt))
        sin_t = Constant((sign * np.sin(theta) * norm).astype(dt))
        re = op.nn.dense(real, cos_t)                 # Re = xr cos - xi (sign sin)
        im = op.nn.dense(real, sin_t)                 # Im = xr (sign sin) + xi cos
        if imag is not None:
            re = op.subtract(re, op.nn.dense(imag, sin_t))
            im = op.add(im, op.nn.dense(imag, cos_t))
        out = op.stack([re, im], axis=-1)
    back = [0] * rank
    for i, p in enumerate(perm):
        back[p] = i
    out = op.transpose(out, axes=tuple(back))
    return out if out_dtype == dt else op.cast(out, dtype=out_dtype)


def col2im(ctx, inputs, attrs):
    """Col2Im: the columns of sliding blocks summed back into an image. Every column entry has
    one place in the (padded) image, known from the static shapes, so the sum is one product
    with a constant 0/1 placement matrix."""
    x = inputs[0]
    image = [int(v) for v in np.asarray(ctx.static(inputs[1], "image_shape")).reshape(-1)]
    block = [int(v) for v in np.asarray(ctx.static(inputs[2], "block_shape")).reshape(-1)]
    nd = len(image)
    dil = list(attrs.get("dilations", [1] * nd))
    pads = list(attrs.get("pads", [0] * (2 * nd)))
    strides = list(attrs.get("strides", [1] * nd))
    n, rows, cols = ctx.static_shape(x)
    k = int(np.prod(block))
    if rows % k:
        ctx.fail(f"{rows} rows are not a multiple of the block size {k}")
    c = rows // k
    counts = [(image[d] + pads[d] + pads[d + nd] - dil[d] * (block[d] - 1) - 1) // strides[d] + 1
              for d in range(nd)]
    if int(np.prod(counts)) != cols:
        ctx.fail(f"{cols} columns but the image holds {counts} blocks")
    placement = np.zeros((k * cols, int(np.prod(image))), dtype=ctx.dtype(x))
    for kidx, offset in enumerate(np.ndindex(*block)):
        for bidx, where in enumerate(np.ndindex(*counts)):
            pos = [where[d] * strides[d] - pads[d] + offset[d] * dil[d] for d in range(nd)]
            if all(0 <= p < image[d] for d, p in enumerate(pos)):
                placement[kidx * cols + bidx, np.ravel_multi_index(pos, image)] = 1
    flat = op.reshape(x, newshape=(n, c, k * cols))
    out = op.nn.dense(flat, Constant(np.ascontiguousarray(placement.T)))
    return op.reshape(out, newshape=(n, c) + tuple(image))


def det(ctx, inputs, attrs):
    """Det of small matrices (n <= 4, static) by cofactor expansion along the first row."""
    x = inputs[0]
    shape = ctx.static_shape(x)
    size = shape[-1]
    rank = len(shape)
    if size != shape[-2] or size > 4:
        ctx.fail(f"the determinant of {shape[-2]}x{size} matrices (square, n <= 4, here)")
    entries = {}
    for i in range(size):
        for j in range(size):
            part = op.strided_slice(x, begin=(i, j), end=(i + 1, j + 1), axes=(rank - 2, rank - 1))
            entries[i, j] = op.squeeze(part, axis=[rank - 2, rank - 1])

    def minor(rows, cols):
        if len(rows) == 1:
            return entries[rows[0], cols[0]]
        total = None
        for p, col in enumerate(cols):
            term = op.multiply(entries[rows[0], col], minor(rows[1:], cols[:p] + cols[p + 1:]))
            total = term if total is None else (op.add(total, term) if p % 2 == 0
                                                else op.subtract(total, term))
        return total
    return minor(list(range(size)), list(range(size)))


def _max_pool_indices(ctx, x, out, kernel, strides, dilations, pads, storage_order):
    """MaxPool's Indices output (2-d): for each window, the flat position in the input of its
    first largest element (row-major over the window; positions row-major over (N, C, H, W),
    or with H and W swapped for ``storage_order=1``)."""
    n, c, h, w = ctx.static_shape(x)
    _, _, oh, ow = ctx.static_shape(out)
    dt = ctx.dtype(x)
    low = float(np.finfo(dt).min) if dt.startswith("float") else float(np.iinfo(dt).min)
    extra_h = max(0, (oh - 1) * strides[0] + (kernel[0] - 1) * dilations[0] + 1 - (h + pads[0] + pads[2]))
    extra_w = max(0, (ow - 1) * strides[1] + (kernel[1] - 1) * dilations[1] + 1 - (w + pads[1] + pads[3]))
    padded = op.nn.pad(x, Constant(np.asarray(-np.inf if dt.startswith("float") else low, dtype=dt)),
                       pad_width=((0, 0), (0, 0), (pads[0], pads[2] + extra_h),
                                  (pads[1], pads[3] + extra_w)))
    best, where = None, None
    rows, cols = np.arange(oh) * strides[0] - pads[0], np.arange(ow) * strides[1] - pads[1]
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            bh, bw = i * dilations[0], j * dilations[1]
            value = op.strided_slice(padded, begin=(bh, bw),
                                     end=(bh + (oh - 1) * strides[0] + 1, bw + (ow - 1) * strides[1] + 1),
                                     strides=(strides[0], strides[1]), axes=(2, 3))
            hh, ww = (rows + bh)[:, None], (cols + bw)[None, :]
            flat = hh + ww * h if storage_order else hh * w + ww
            index = Constant(np.broadcast_to(flat, (oh, ow)).astype(np.int64).copy())
            if best is None:
                best, where = value, op.broadcast_to(index, shape=(n, c, oh, ow))
            else:
                better = op.greater(value, best)
                best, where = op.where(better, value, best), op.where(better, index, where)
    planes = Constant((np.arange(n * c, dtype=np.int64) * h * w).reshape(n, c, 1, 1))
    return op.add(where, planes)
