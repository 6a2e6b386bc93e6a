"""Shape functions: each operator's output shapes computed at run time from its inputs' shapes.

Relay's ``python/tvm/relay/op/_tensor.py`` / ``_transform.py`` / ``nn/_nn.py`` register a shape
function (``FShapeFunc``) per operator, so that a program whose types hold ``?`` or a symbolic
``n`` can allocate its outputs once the inputs are known. The VM compiler
(:mod:`relaybench.backends.vm.compiler`) calls them for every call whose output type is not
static. A type relation answers the same question on *types* (symbolic, possibly unknown); a
shape function answers it on *numbers*, for one concrete call, which is why both exist.

The contract, the attribute registry's (:func:`~relaybench.op.registry.register_shape_func`):

``shape_func(attrs, inputs) -> [shape, ...]``

* ``inputs`` holds one entry per argument of the call: its shape, a tuple of ints (a list of
  shapes for a tuple argument, as ``concatenate``'s). For an operator registered as data
  dependent (``TShapeDataDependent``: ``arange``, whose length is ``ceil((stop - start) / step)``)
  the entries are the argument *values*, numpy arrays;
* the result lists the output shapes, one per output tensor (a tuple-valued operator, ``split``
  or ``topk``, gives several);
* a shape the inputs cannot have raises ValueError saying why; the caller names the op and the
  call.

Every operator that has a type relation has a shape function here (a test walks the registry);
they are the library's own, registered at level 0, so a user's registration above it wins.

>>> from relaybench.op.registry import get_op_attr, get_opdef
>>> f = get_op_attr("nn.conv2d", "FShapeFunc")
>>> f(get_opdef("nn.conv2d").make_attrs({"padding": (1, 1)}), [(1, 3, 32, 32), (8, 3, 3, 3)])
[(1, 8, 32, 32)]
>>> get_op_attr("arange", "FShapeFunc")(get_opdef("arange").make_attrs({}),
...     [np.float32(0), np.float32(10), np.float32(3)])
[(4,)]
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.layout import Layout
from .registry import register_shape_func

__all__ = ["shape_of_call"]


def _register(names, data_dependent: bool = False):
    """Register the decorated function as the level-0 shape function of every op in ``names``."""
    if isinstance(names, str):
        names = (names,)

    def decorate(fn):
        for name in names:
            register_shape_func(name, data_dependent, fn, level=0)
        return fn
    return decorate


def _axis(axis: int, ndim: int, what: str = "axis") -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise ValueError(f"{what} {axis} is out of range for rank {ndim}")
    return axis + ndim if axis < 0 else axis


def _broadcast(*shapes) -> tuple:
    """numpy's broadcasting of concrete shapes, right-aligned."""
    n = max(len(s) for s in shapes)
    out = []
    for i in range(n):
        dims = {s[len(s) - n + i] for s in shapes if len(s) - n + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ValueError(f"shapes {', '.join(map(str, map(list, shapes)))} do not broadcast "
                             f"(axis {n - i} from the right)")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


# ---- elementwise: the first input's shape --------------------------------------------------------

_SAME_AS_DATA = (
    "abs", "ceil", "floor", "round", "trunc", "sign", "negative", "exp", "log", "sqrt", "rsqrt",
    "sigmoid", "tanh", "erf", "isfinite", "isinf", "isnan", "logical_not", "copy", "cast",
    "cast_like", "clip", "ones_like", "zeros_like", "full_like", "nn.relu", "nn.leaky_relu",
    "nn.prelu", "nn.bias_add", "nn.softmax", "nn.log_softmax", "nn.l2_normalize", "nn.lrn",
    "nn.layer_norm", "nn.group_norm", "nn.instance_norm", "reverse", "sort", "argsort",
    "annotation.stop_fusion", "relay.op.annotation.simulated_quantize", "scatter_nd",
)


@_register(_SAME_AS_DATA)
def _same_as_data(attrs, inputs):
    return [tuple(inputs[0])]


@_register("nn.dropout")
def _dropout(attrs, inputs):
    return [tuple(inputs[0]), tuple(inputs[0])]


@_register("nn.batch_norm")
def _batch_norm(attrs, inputs):
    data = tuple(inputs[0])
    c = data[_axis(attrs.axis, len(data))]
    return [data, (c,), (c,)]


_BINARY = (
    "add", "subtract", "multiply", "divide", "floor_divide", "trunc_divide", "mod", "floor_mod",
    "trunc_mod", "power", "maximum", "minimum", "equal", "not_equal", "less", "less_equal",
    "greater", "greater_equal", "logical_and", "logical_or", "logical_xor", "left_shift",
    "right_shift", "where",
)


@_register(_BINARY)
def _broadcast_inputs(attrs, inputs):
    return [_broadcast(*inputs)]


# ---- initializers --------------------------------------------------------------------------------

@_register(("zeros", "ones", "full", "broadcast_to"))
def _shape_attr(attrs, inputs):
    if inputs and attrs.shape is not None and inputs[0] is not None:
        _broadcast(tuple(inputs[0]), tuple(attrs.shape))   # data must broadcast to the shape
    return [tuple(attrs.shape)]


@_register("broadcast_to_like")
def _broadcast_to_like(attrs, inputs):
    return [tuple(inputs[1])]


@_register("arange", data_dependent=True)
def _arange(attrs, inputs):
    start, stop, step = (float(np.asarray(v).reshape(())) if a is None else float(a)
                         for v, a in zip(inputs, (attrs.start, attrs.stop, attrs.step)))
    if step == 0:
        raise ValueError("arange: step is 0")
    return [(max(0, math.ceil((stop - start) / step)),)]


@_register("shape_of")
def _shape_of(attrs, inputs):
    return [(len(inputs[0]),)]


@_register("ndarray_size")
def _ndarray_size(attrs, inputs):
    return [()]


# ---- reductions ----------------------------------------------------------------------------------

def _reduced(shape: tuple, axis, keepdims: bool, exclude: bool) -> tuple:
    ndim = len(shape)
    if axis is None:                # every axis, ``exclude`` or not (Relay's reading)
        axes = set(range(ndim))
    else:
        axes = {_axis(a, ndim) for a in (axis if isinstance(axis, (list, tuple)) else (axis,))}
        if exclude:
            axes = set(range(ndim)) - axes
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


@_register(("sum", "prod", "max", "min", "mean", "all", "any", "argmax", "argmin", "variance"))
def _reduce(attrs, inputs):
    return [_reduced(tuple(inputs[0]), attrs.axis, attrs.keepdims, attrs.exclude)]


@_register("collapse_sum_like")
def _collapse_sum_like(attrs, inputs):
    return [tuple(inputs[1])]


@_register("collapse_sum_to")
def _collapse_sum_to(attrs, inputs):
    return [tuple(attrs.shape) if attrs.shape is not None else tuple(inputs[1])]


@_register(("cumsum", "cumprod"))
def _scan(attrs, inputs):
    data = tuple(inputs[0])
    return [(math.prod(data),) if attrs.axis is None else data]


# ---- shape manipulation --------------------------------------------------------------------------

@_register("reshape")
def _reshape(attrs, inputs):
    from .transform import infer_reshape
    data = tuple(inputs[0])
    out = tuple(int(d) for d in infer_reshape(data, attrs.newshape, attrs.allowzero))
    if math.prod(out) != math.prod(data):
        raise ValueError(f"cannot reshape {list(data)} ({math.prod(data)} elements) to "
                         f"{list(out)}")
    return [out]


@_register("reshape_like")
def _reshape_like(attrs, inputs):
    lhs, rhs = tuple(inputs[0]), tuple(inputs[1])

    def span(begin, end, n):
        b = begin + n if begin < 0 else begin
        e = n if end is None else end + n if end < 0 else end
        return b, e
    lb, le = span(attrs.lhs_begin, attrs.lhs_end, len(lhs))
    rb, re = span(attrs.rhs_begin, attrs.rhs_end, len(rhs))
    out = lhs[:lb] + rhs[rb:re] + lhs[le:]
    if math.prod(out) != math.prod(lhs):
        raise ValueError(f"cannot reshape {list(lhs)} like {list(rhs)}: {list(out)} has "
                         f"another element count")
    return [out]


@_register("nn.batch_flatten")
def _batch_flatten(attrs, inputs):
    data = tuple(inputs[0])
    return [(data[0], math.prod(data[1:]))]


@_register("transpose")
def _transpose(attrs, inputs):
    data = tuple(inputs[0])
    axes = range(len(data) - 1, -1, -1) if not attrs.axes else \
        [_axis(a, len(data), "axes entry") for a in attrs.axes]
    return [tuple(data[a] for a in axes)]


@_register("squeeze")
def _squeeze(attrs, inputs):
    data = tuple(inputs[0])
    if attrs.axis is None:
        return [tuple(d for d in data if d != 1)]
    axes = {_axis(a, len(data)) for a in attrs.axis}
    for a in axes:
        if data[a] != 1:
            raise ValueError(f"cannot squeeze axis {a} of extent {data[a]}")
    return [tuple(d for i, d in enumerate(data) if i not in axes)]


@_register("expand_dims")
def _expand_dims(attrs, inputs):
    data = tuple(inputs[0])
    p = attrs.axis + len(data) + 1 if attrs.axis < 0 else attrs.axis
    return [data[:p] + (1,) * attrs.num_newaxis + data[p:]]


@_register("concatenate")
def _concatenate(attrs, inputs):
    fields = [tuple(s) for s in inputs[0]]
    axis = _axis(attrs.axis, len(fields[0]))
    out = list(fields[0])
    out[axis] = sum(f[axis] for f in fields)
    return [tuple(out)]


@_register("stack")
def _stack(attrs, inputs):
    fields = [tuple(s) for s in inputs[0]]
    p = attrs.axis + len(fields[0]) + 1 if attrs.axis < 0 else attrs.axis
    return [fields[0][:p] + (len(fields),) + fields[0][p:]]


@_register("split")
def _split(attrs, inputs):
    data = tuple(inputs[0])
    axis = _axis(attrs.axis, len(data))
    ios = attrs.indices_or_sections
    if isinstance(ios, int):
        if data[axis] % ios:
            raise ValueError(f"axis {axis} of size {data[axis]} cannot be split into {ios} "
                             "equal sections")
        sizes = [data[axis] // ios] * ios
    else:
        bounds = (0,) + tuple(ios) + (data[axis],)
        sizes = [b - a for a, b in zip(bounds, bounds[1:])]
    return [data[:axis] + (s,) + data[axis + 1:] for s in sizes]


def _slice_length(d: int, b, e, s: int, size_mode: bool) -> int:
    """The extent of ``x[b:e:s]`` along an axis of extent ``d`` (``size_mode``: ``e`` is a size,
    negative for "to the end")."""
    if s > 0:
        b = 0 if b is None else min(max(b + d if b < 0 else b, 0), d)
        if size_mode:
            e = d if e is None or e < 0 else min(b + e, d)
        else:
            e = d if e is None else min(max(e + d if e < 0 else e, 0), d)
        return max(0, -(-(e - b) // s))
    b = d - 1 if b is None else min(max(b + d if b < 0 else b, -1), d - 1)
    e = -1 if e is None else min(max(e + d if e < 0 else e, -1), d - 1)
    return max(0, -(-(b - e) // -s))


@_register("strided_slice")
def _strided_slice(attrs, inputs):
    data = list(inputs[0])
    size_mode = attrs.slice_mode == "size"
    begin, end = tuple(attrs.begin or ()), tuple(attrs.end or ())
    strides = tuple(attrs.strides or ())
    if attrs.axes is not None:
        axes = [_axis(a, len(data)) for a in attrs.axes]
    else:
        axes = list(range(max(len(begin), len(end), len(strides))))
    for k, axis in enumerate(axes):
        s = 1 if size_mode or k >= len(strides) else strides[k]
        b = begin[k] if k < len(begin) else None
        e = end[k] if k < len(end) else None
        data[axis] = _slice_length(data[axis], b, e, s, size_mode)
    return [tuple(data)]


@_register("slice_like")
def _slice_like(attrs, inputs):
    data, like = list(inputs[0]), tuple(inputs[1])
    axes = range(min(len(data), len(like))) if not attrs.axes else \
        [_axis(a, len(data)) for a in attrs.axes]
    for a in axes:
        data[a] = like[a]
    return [tuple(data)]


@_register("take")
def _take(attrs, inputs):
    data, indices = tuple(inputs[0]), tuple(inputs[1])
    if attrs.axis is None:
        return [indices]
    axis = _axis(attrs.axis, len(data))
    b = attrs.batch_dims + len(indices) if attrs.batch_dims < 0 else attrs.batch_dims
    return [data[:axis] + indices[b:] + data[axis + 1:]]


@_register("gather")
def _gather(attrs, inputs):
    return [tuple(inputs[1])]


@_register("gather_nd")
def _gather_nd(attrs, inputs):
    data, indices = tuple(inputs[0]), tuple(inputs[1])
    m = attrs.index_rank if attrs.index_rank is not None else indices[0]
    return [indices[1:] + data[attrs.batch_dims + m:]]


@_register("one_hot")
def _one_hot(attrs, inputs):
    indices = tuple(inputs[0])
    p = attrs.axis + len(indices) + 1 if attrs.axis < 0 else attrs.axis
    return [indices[:p] + (attrs.depth,) + indices[p:]]


@_register("tile")
def _tile(attrs, inputs):
    data = tuple(inputs[0])
    n = max(len(data), len(attrs.reps))
    data = (1,) * (n - len(data)) + data
    reps = (1,) * (n - len(attrs.reps)) + tuple(attrs.reps)
    return [tuple(d * r for d, r in zip(data, reps))]


@_register("repeat")
def _repeat(attrs, inputs):
    data = list(inputs[0])
    axis = _axis(attrs.axis, len(data))
    data[axis] *= attrs.repeats
    return [tuple(data)]


@_register("topk")
def _topk(attrs, inputs):
    shape = list(inputs[0])
    if attrs.k >= 1:
        shape[_axis(attrs.axis, len(shape))] = attrs.k
    n = {"both": 2, "values": 1, "indices": 1}[attrs.ret_type]
    return [tuple(shape)] * n


@_register("layout_transform")
def _layout_transform(attrs, inputs):
    return [Layout(attrs.src_layout).convert_shape(tuple(inputs[0]), attrs.dst_layout)]


@_register(("nn.pad", "nn.mirror_pad"))
def _pad(attrs, inputs):
    data = tuple(inputs[0])
    return [tuple(d + before + after for d, (before, after) in zip(data, attrs.pad_width))]


# ---- dense and batched products ------------------------------------------------------------------

@_register("nn.dense")
def _dense(attrs, inputs):
    data, weight = tuple(inputs[0]), tuple(inputs[1])
    return [data[:-1] + (weight[0],)]


@_register("nn.matmul")
def _matmul(attrs, inputs):
    a, b = tuple(inputs[0]), tuple(inputs[1])
    rows = a[-1] if attrs.transpose_a else a[-2] if len(a) > 1 else None
    cols = b[-2] if attrs.transpose_b else b[-1]
    lead = a[:-2] if len(a) > 1 else ()
    return [lead + ((rows,) if rows is not None else ()) + (cols,)]


@_register("nn.batch_matmul")
def _batch_matmul(attrs, inputs):
    x, y = tuple(inputs[0]), tuple(inputs[1])
    rows = x[2] if attrs.transpose_a else x[1]
    cols = y[1] if attrs.transpose_b else y[2]
    return [(max(x[0], y[0]), rows, cols)]


# ---- windows: convolutions and pooling, in any layout -------------------------------------------

def _spatial_of(layout: Layout) -> str:
    return "".join(a for a in "DHW" if a in layout)


def _window_count(extent, k, stride, dilation, before, after, ceil_mode=False) -> int:
    span = extent + before + after - ((k - 1) * dilation + 1)
    if span < 0:
        raise ValueError(f"the window ({(k - 1) * dilation + 1} with dilation) is larger than "
                         f"the padded input ({extent + before + after})")
    if ceil_mode:
        span += stride - 1
    return span // stride + 1


def _conv(transpose: bool):
    def shape_func(attrs, inputs):
        data_layout = Layout(attrs.data_layout)
        spatial = _spatial_of(data_layout)
        r = len(spatial)
        ext = data_layout.primal_extents(tuple(inputs[0]))
        kernel = Layout(attrs.kernel_layout).primal_extents(tuple(inputs[1]))
        pad = tuple(attrs.padding)
        befores, afters = pad[:r], pad[r:]
        out = {"N": ext["N"]}
        if transpose:
            out["C"] = kernel["O"] * attrs.groups
        else:
            out["C"] = kernel["O"]
        for i, a in enumerate(spatial):
            k, s, d = kernel[a], attrs.strides[i], attrs.dilation[i]
            if transpose:
                out[a] = ((ext[a] - 1) * s + (k - 1) * d + 1 - befores[i] - afters[i]
                          + attrs.output_padding[i])
            else:
                out[a] = _window_count(ext[a], k, s, d, befores[i], afters[i])
        out_layout = Layout(attrs.out_layout or attrs.data_layout)
        return [out_layout.shape_from_extents(out)]
    return shape_func


for _name in ("nn.conv1d", "nn.conv2d", "nn.conv3d"):
    register_shape_func(_name, False, _conv(False), level=0)
for _name in ("nn.conv1d_transpose", "nn.conv2d_transpose", "nn.conv3d_transpose"):
    register_shape_func(_name, False, _conv(True), level=0)


def _pooled(attrs, data: tuple, per_axis) -> tuple:
    layout = Layout(attrs.layout)
    ext = layout.primal_extents(data)
    for i, a in enumerate(_spatial_of(layout)):
        ext[a] = per_axis(i, a, ext[a])
    out_layout = Layout(getattr(attrs, "out_layout", "") or attrs.layout)
    return out_layout.shape_from_extents(ext)


@_register(("nn.max_pool1d", "nn.max_pool2d", "nn.max_pool3d", "nn.avg_pool1d", "nn.avg_pool2d",
            "nn.avg_pool3d"))
def _pool(attrs, inputs):
    r = len(attrs.pool_size)
    pad = tuple(attrs.padding)

    def count(i, a, extent):
        return _window_count(extent, attrs.pool_size[i], attrs.strides[i], attrs.dilation[i],
                             pad[i], pad[r + i], attrs.ceil_mode)
    return [_pooled(attrs, tuple(inputs[0]), count)]


@_register(("nn.global_avg_pool2d", "nn.global_max_pool2d"))
def _global_pool(attrs, inputs):
    return [_pooled(attrs, tuple(inputs[0]), lambda i, a, extent: 1)]


@_register(("nn.adaptive_avg_pool1d", "nn.adaptive_avg_pool2d", "nn.adaptive_avg_pool3d",
            "nn.adaptive_max_pool1d", "nn.adaptive_max_pool2d", "nn.adaptive_max_pool3d"))
def _adaptive_pool(attrs, inputs):
    sizes = tuple(attrs.output_size or ())

    def size(i, a, extent):
        return sizes[i] if i < len(sizes) and sizes[i] is not None else extent
    return [_pooled(attrs, tuple(inputs[0]), size)]


@_register(("nn.upsampling", "nn.upsampling3d"))
def _upsampling(attrs, inputs):
    return [_pooled(attrs, tuple(inputs[0]), lambda i, a, extent: int(
        np.rint(extent * getattr(attrs, f"scale_{a.lower()}"))))]


@_register(("image.resize1d", "image.resize2d", "image.resize3d"))
def _resize(attrs, inputs):
    size = tuple(attrs.size)
    return [_pooled(attrs, tuple(inputs[0]), lambda i, a, extent: size[i])]


@_register(("nn.space_to_depth", "nn.depth_to_space"))
def _block(attrs, inputs):
    layout = Layout(attrs.layout)
    ext = layout.primal_extents(tuple(inputs[0]))
    b = attrs.block_size
    if "mode" in attrs:          # depth_to_space
        if ext["C"] % (b * b):
            raise ValueError(f"{ext['C']} channels are not divisible by block_size**2={b * b}")
        ext = dict(ext, C=ext["C"] // (b * b), H=ext["H"] * b, W=ext["W"] * b)
    else:
        if ext["H"] % b or ext["W"] % b:
            raise ValueError(f"height {ext['H']} and width {ext['W']} must be divisible by "
                             f"block_size={b}")
        ext = dict(ext, C=ext["C"] * b * b, H=ext["H"] // b, W=ext["W"] // b)
    return [layout.shape_from_extents(ext)]


def _einsum(attrs, inputs):
    """numpy's einsum: each letter one extent (1 broadcasts), the ellipsis axes broadcast; the
    output's letters after ``->``, or else the letters used once, in alphabetical order."""
    shapes = [tuple(s) for s in inputs[0]]
    equation = attrs.equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    extents, ellipsis, counts = {}, (), {}
    for sub, shape in zip(lhs.split(","), shapes):
        letters = sub.replace("...", "")
        n_ell = len(shape) - len(letters)
        before = sub.index("...") if "..." in sub else len(sub)
        if "..." in sub:
            ellipsis = _broadcast(ellipsis, shape[before:before + n_ell])
        dims = shape[:before] + shape[before + n_ell:]
        for c, d in zip(letters, dims):
            counts[c] = counts.get(c, 0) + 1
            if extents.get(c, 1) != 1 and d not in (1, extents[c]):
                raise ValueError(f"einsum {equation}: {c} is {extents[c]} and {d}")
            extents[c] = d if extents.get(c, 1) == 1 else extents[c]
    if not arrow:
        rhs = ("..." if ellipsis else "") + "".join(sorted(c for c, k in counts.items()
                                                            if k == 1))
    out = []
    for part in rhs.split("..."):
        out.append(tuple(extents[c] for c in part))
    return [out[0] + ellipsis + out[1] if len(out) == 2 else out[0]]


def _register_if_defined(name: str, fn, data_dependent: bool = False) -> None:
    from .registry import lookup_opdef
    if lookup_opdef(name) is not None:
        register_shape_func(name, data_dependent, fn, level=0)


def _winograd_weight_transform(attrs, inputs):
    o, i, r, _ = inputs[0]
    alpha = attrs.tile_size + r - 1
    return [(alpha, alpha, o, i)]


def _winograd_conv2d(attrs, inputs):
    """The output of a 3x3 (``kernel_size``) stride-1 convolution; the weight's ``H`` and
    ``W`` are the transform's tile, not the kernel."""
    data_layout = Layout(attrs.data_layout)
    ext = data_layout.primal_extents(tuple(inputs[0]))
    kernel = Layout(attrs.kernel_layout).primal_extents(tuple(inputs[1]))
    r = tuple(attrs.kernel_size or (3, 3))
    pad = tuple(attrs.padding)
    if len(pad) == 2:
        pad = pad + pad
    out = {"N": ext["N"], "C": kernel["O"]}
    for k, a in enumerate(("H", "W")):
        out[a] = _window_count(ext[a], r[k], 1, 1, pad[k], pad[k + 2])
    return [Layout(attrs.out_layout or attrs.data_layout).shape_from_extents(out)]


_register_if_defined("nn.contrib_conv2d_winograd_weight_transform", _winograd_weight_transform)
_register_if_defined("nn.contrib_conv2d_winograd_without_weight_transform", _winograd_conv2d)
_register_if_defined("einsum", _einsum)
_register_if_defined("scatter_elements", _same_as_data)
_register_if_defined("reinterpret", _same_as_data)
for _name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    _register_if_defined(_name, _broadcast_inputs)
_register_if_defined("bitwise_not", _same_as_data)


def _register_by_pattern() -> None:
    """Every other operator whose pattern says what its output shape is: an elementwise one
    keeps its first input's shape, a broadcasting ``(lhs, rhs)`` one broadcasts its inputs
    (the math and bitwise families: a new member needs no entry here)."""
    from .registry import OpPattern, get_op_attr, get_opdef, list_ops
    for name in list_ops():
        if get_op_attr(name, "FShapeFunc") is not None:
            continue
        opdef = get_opdef(name)
        if opdef.pattern == OpPattern.ELEMWISE:
            register_shape_func(name, False, _same_as_data, level=0)
        elif opdef.pattern == OpPattern.BROADCAST and opdef.inputs == ("lhs", "rhs"):
            register_shape_func(name, False, _broadcast_inputs, level=0)


_register_by_pattern()


# ---- a call, as the VM asks ----------------------------------------------------------------------

def shape_of_call(op_name: str, attrs, inputs, target=None) -> list:
    """The output shapes of one call of ``op_name`` on ``inputs`` (shapes, or values for a data
    dependent op), through the registry, so a user's registration is the one used. Raises
    ValueError naming the op when it has no shape function or the inputs cannot be."""
    from .registry import get_op_attr
    fn = get_op_attr(op_name, "FShapeFunc", target=target)
    if fn is None:
        raise ValueError(f"{op_name} has no shape function (FShapeFunc)")
    try:
        out = fn(attrs, inputs)
    except (ValueError, KeyError, IndexError, ZeroDivisionError) as err:
        raise ValueError(f"{op_name}: {err}") from None
    return [tuple(int(d) for d in s) for s in out]
