"""Converters of ONNX's shape and data-movement ops: Reshape, Flatten, Squeeze, Unsqueeze,
Transpose, Concat, Split, Slice, Gather, GatherElements, GatherND, ScatterND, Expand, Tile, Pad,
Shape, Size, ConstantOfShape, Range, Constant, OneHot, TopK, Trilu, Einsum ...

relaybench's shape ops take their shapes as attributes (Relay's static ops), so a shape, a
slice bound or a ``k`` given as an input tensor must be known at import time
(``ctx.static``): an initializer or a value the walker computed from constants, which covers
the ``Shape -> Gather -> Concat -> Reshape`` chains exporters write for static models. ONNX puts
the coordinate axis of GatherND/ScatterND indices last; Relay puts it first, so those indices
are transposed.
"""

from __future__ import annotations

import numpy as np

from ... import op
from ...ir.expr import Constant, TupleGetItem
from ._math import scalar


def _ints(ctx, expr, what: str) -> list:
    return [int(v) for v in np.asarray(ctx.static(expr, what)).reshape(-1)]


def _axes(ctx, inputs, attrs, index: int = 1, since: int = 13):
    if ctx.version >= since:
        value = inputs[index] if len(inputs) > index else None
        return None if value is None else _ints(ctx, value, "axes")
    return attrs.get("axes")


def reshape(ctx, inputs, attrs):
    x = inputs[0]
    if ctx.version < 5:
        shape = list(attrs["shape"])
    else:
        shape = ctx.static_ints(inputs[1], "shape", like=x)
    allowzero = int(attrs.get("allowzero", 0))
    return op.reshape(x, newshape=tuple(shape), allowzero=allowzero)


def flatten(ctx, inputs, attrs):
    x = inputs[0]
    shape = ctx.shape(x)
    rank = len(shape)
    axis = attrs.get("axis", 1)
    axis = axis + rank if axis < 0 else axis
    outer, inner = shape[:axis], shape[axis:]
    if all(isinstance(d, int) for d in outer):
        return op.reshape(x, newshape=(int(np.prod(outer, dtype=np.int64)), -1))
    if all(isinstance(d, int) for d in inner):
        return op.reshape(x, newshape=(-1, int(np.prod(inner, dtype=np.int64))))
    if axis == 1:
        return op.nn.batch_flatten(x)
    ctx.fail(f"flattening {shape} at axis {axis} mixes symbolic dims on both sides")


def squeeze(ctx, inputs, attrs):
    axes = _axes(ctx, inputs, attrs)
    return op.squeeze(inputs[0], axis=None if axes is None else list(axes))


def unsqueeze(ctx, inputs, attrs):
    x = inputs[0]
    axes = _axes(ctx, inputs, attrs)
    out_rank = ctx.rank(x) + len(axes)
    out = x
    for axis in sorted(a % out_rank for a in axes):
        out = op.expand_dims(out, axis=axis)
    return out


def transpose(ctx, inputs, attrs):
    perm = attrs.get("perm")
    return op.transpose(inputs[0], axes=None if perm is None else tuple(perm))


def concat(ctx, inputs, attrs):
    parts = [x for x in inputs if x is not None]
    return op.concatenate(parts, axis=attrs["axis"])


def split(ctx, inputs, attrs):
    x = inputs[0]
    axis = attrs.get("axis", 0)
    if ctx.version >= 13:
        sizes = inputs[1] if len(inputs) > 1 else None
        sizes = None if sizes is None else _ints(ctx, sizes, "split")
    else:
        sizes = attrs.get("split")
    count = len(ctx.node.output)
    dim = ctx.shape(x)[axis]
    if sizes is None:
        if "num_outputs" in attrs:
            count = attrs["num_outputs"]
        if not isinstance(dim, int):
            return _tuple_fields(op.split(x, indices_or_sections=count, axis=axis), count)
        chunk = -(-dim // count)
        sizes = [chunk] * (count - 1) + [dim - chunk * (count - 1)]
    if len(sizes) == 1:
        return [op.copy(x)]
    if 0 in sizes:         # Relay's split takes increasing indices: slice each part instead
        starts = [0] + list(np.cumsum(sizes)[:-1])
        return [op.strided_slice(x, begin=(int(b),), end=(int(b + n),), axes=(axis,))
                for b, n in zip(starts, sizes)]
    indices = list(np.cumsum(sizes)[:-1])
    return _tuple_fields(op.split(x, indices_or_sections=[int(i) for i in indices], axis=axis),
                         len(sizes))


def _tuple_fields(expr, count: int) -> list:
    return [TupleGetItem(expr, i) for i in range(count)]


def _onnx_slice_bounds(d: int, b: int, e: int, s: int):
    """ONNX Slice's clamping of one axis of extent ``d``, as (begin, end-or-None)."""
    if b < 0:
        b += d
    if e < 0:
        e += d
    if s > 0:
        b, e = min(max(b, 0), d), min(max(e, 0), d)
        return b, e
    b, e = min(max(b, 0), d - 1), min(max(e, -1), d - 1)
    return b, (None if e < 0 else e)


def slice_(ctx, inputs, attrs):
    x = inputs[0]
    shape = ctx.shape(x)
    rank = len(shape)
    if ctx.version < 10:
        starts, ends = list(attrs["starts"]), list(attrs["ends"])
        axes = list(attrs.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts, ends = _ints(ctx, inputs[1], "starts"), _ints(ctx, inputs[2], "ends")
        axes = (_ints(ctx, inputs[3], "axes") if len(inputs) > 3 and inputs[3] is not None
                else list(range(len(starts))))
        steps = (_ints(ctx, inputs[4], "steps") if len(inputs) > 4 and inputs[4] is not None
                 else [1] * len(starts))
    begin, end, strides, out_axes = [], [], [], []
    far = 2 ** 31 - 1
    for b, e, a, s in zip(starts, ends, axes, steps):
        a = a % rank
        d = shape[a]
        if s == 0:
            ctx.fail("a step of 0")
        if isinstance(d, int):
            b, e = _onnx_slice_bounds(d, b, e, s)
        else:
            b = max(min(b, far), -far)
            e = None if (s < 0 and e <= -far) or (s > 0 and e >= far) else max(min(e, far), -far)
        begin.append(b), end.append(e), strides.append(s), out_axes.append(a)
    return op.strided_slice(x, begin=tuple(begin), end=tuple(end), strides=tuple(strides),
                            axes=tuple(out_axes))


def _normalized_indices(ctx, indices, dim):
    """Indices with the negative ones counted from the back of an axis of extent ``dim``."""
    value = ctx.try_static(indices)
    if value is not None and isinstance(dim, int):
        value = np.asarray(value).astype(np.int64)
        return Constant(np.where(value < 0, value + dim, value))
    if not isinstance(dim, int):
        return indices
    dt = ctx.dtype(indices)
    return op.where(op.less(indices, scalar(0, dt)), op.add(indices, scalar(dim, dt)), indices)


def gather(ctx, inputs, attrs):
    x, indices = inputs
    axis = attrs.get("axis", 0) % max(ctx.rank(x), 1)
    idx = _normalized_indices(ctx, indices, ctx.shape(x)[axis])
    return op.take(x, idx, axis=axis, mode="fast")


def gather_elements(ctx, inputs, attrs):
    x, indices = inputs
    axis = attrs.get("axis", 0) % ctx.rank(x)
    idx = _normalized_indices(ctx, indices, ctx.shape(x)[axis])
    return op.gather(x, idx, axis=axis)


def _index_first(ctx, indices):
    rank = ctx.rank(indices)
    return op.transpose(indices, axes=(rank - 1,) + tuple(range(rank - 1)))


def gather_nd(ctx, inputs, attrs):
    x, indices = inputs
    batch_dims = attrs.get("batch_dims", 0)
    m = ctx.static_shape(indices)[-1]
    shape = ctx.shape(x)
    idx = indices
    static = ctx.try_static(indices)
    if static is not None and all(isinstance(d, int) for d in shape[batch_dims:batch_dims + m]):
        ext = np.asarray(shape[batch_dims:batch_dims + m], dtype=np.int64)
        static = static.astype(np.int64)
        idx = Constant(np.where(static < 0, static + ext, static))
    return op.gather_nd(x, _index_first(ctx, idx), batch_dims=batch_dims, index_rank=m)


def scatter_nd(ctx, inputs, attrs):
    x, indices, updates = inputs
    mode = {"none": "update", "add": "add", "mul": "mul", "min": "min", "max": "max"}.get(
        attrs.get("reduction", "none"))
    if mode is None:
        ctx.fail(f"reduction={attrs.get('reduction')!r}")
    return op.scatter_nd(x, _index_first(ctx, indices), updates, mode=mode)


def expand(ctx, inputs, attrs):
    x = inputs[0]
    shape = _ints(ctx, inputs[1], "shape")
    xshape = ctx.shape(x)
    if not all(isinstance(d, int) for d in xshape):
        ctx.fail("Expand of an input with symbolic dims")
    out = tuple(int(d) for d in np.broadcast_shapes(tuple(xshape), tuple(shape)))
    return op.broadcast_to(x, shape=out)


def tile(ctx, inputs, attrs):
    return op.tile(inputs[0], reps=tuple(_ints(ctx, inputs[1], "repeats")))


def pad(ctx, inputs, attrs):
    x = inputs[0]
    rank = ctx.rank(x)
    dt = ctx.dtype(x)
    if ctx.version < 11:
        pads = list(attrs.get("pads", attrs.get("paddings", [])))
        value = scalar(attrs.get("value", 0.0), dt)
    else:
        pads = _ints(ctx, inputs[1], "pads")
        value = inputs[2] if len(inputs) > 2 and inputs[2] is not None else scalar(0, dt)
        if ctx.rank(value) > 0:
            value = op.reshape(value, newshape=())
    axes = list(range(rank))
    if len(inputs) > 3 and inputs[3] is not None:
        axes = [a % rank for a in _ints(ctx, inputs[3], "axes")]
    n = len(axes)
    width = [[0, 0] for _ in range(rank)]
    for i, a in enumerate(axes):
        width[a] = [pads[i], pads[n + i]]
    mode = attrs.get("mode", "constant")
    crop = [(max(0, -b), max(0, -e)) for b, e in width]
    width = [(max(0, b), max(0, e)) for b, e in width]
    if any(b or e for b, e in crop):
        shape = ctx.static_shape(x)
        x = op.strided_slice(x, begin=tuple(b for b, _ in crop),
                             end=tuple(d - e for d, (_, e) in zip(shape, crop)))
    if mode == "constant":
        return op.nn.pad(x, value, pad_width=tuple(width), pad_mode="constant")
    if mode in ("edge", "reflect"):
        return op.nn.pad(x, pad_width=tuple(width), pad_mode=mode)
    if mode == "wrap":
        return _wrap_pad(ctx, x, width)
    ctx.fail(f"mode={mode!r}")


def _wrap_pad(ctx, x, width):
    """``wrap`` padding: the axis repeated around itself (taken from its far end)."""
    shape = ctx.static_shape(x)
    out = x
    for axis, (b, e) in enumerate(width):
        if not (b or e):
            continue
        d = shape[axis]
        idx = np.arange(-b, d + e) % d
        out = op.take(out, Constant(idx.astype(np.int64)), axis=axis, mode="fast")
    return out


def shape(ctx, inputs, attrs):
    x = inputs[0]
    dims = ctx.shape(x)
    rank = len(dims)
    start, end = attrs.get("start", 0), attrs.get("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    dims = dims[start:end]
    if all(isinstance(d, int) for d in dims):
        return Constant(np.asarray(dims, dtype=np.int64).reshape(-1))
    full = op.shape_of(x, dtype="int64")
    if (start, end) == (0, rank):
        return full
    return op.strided_slice(full, begin=(start,), end=(end,))


def size(ctx, inputs, attrs):
    dims = ctx.shape(inputs[0])
    if all(isinstance(d, int) for d in dims):
        return Constant(np.asarray(int(np.prod(dims, dtype=np.int64)), dtype=np.int64))
    return op.ndarray_size(inputs[0], dtype="int64")


def constant_of_shape(ctx, inputs, attrs):
    dims = _ints(ctx, inputs[0], "input")
    value = attrs.get("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    return Constant(np.full(dims, value[0], dtype=value.dtype))


def constant(ctx, inputs, attrs):
    if "value" in attrs:
        return Constant(np.asarray(attrs["value"]))
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return Constant(np.asarray(attrs[key], dtype=dtype))
    ctx.fail(f"a constant given as {', '.join(attrs) or 'nothing'}: only value, value_float(s) and "
             f"value_int(s) are supported")


def range_(ctx, inputs, attrs):
    start, limit, delta = (ctx.try_static(v) for v in inputs)
    if start is not None and limit is not None and delta is not None:
        dt = np.asarray(start).dtype
        start, limit, delta = (np.asarray(v).reshape(-1)[0] for v in (start, limit, delta))
        count = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)
        return Constant((start + np.arange(count) * delta).astype(dt))
    return op.arange(inputs[0], inputs[1], inputs[2], dtype=ctx.dtype(inputs[0]))


def eye_like(ctx, inputs, attrs):
    from .importer import dtype_of
    shape = ctx.static_shape(inputs[0])
    dt = dtype_of(attrs["dtype"], ctx.where) if "dtype" in attrs else ctx.dtype(inputs[0])
    return Constant(np.eye(shape[0], shape[1], k=attrs.get("k", 0), dtype=dt))


def one_hot(ctx, inputs, attrs):
    indices, depth, values = inputs
    depth = int(np.asarray(ctx.static(depth, "depth")).reshape(-1)[0])
    dt = ctx.dtype(values)
    off = op.strided_slice(values, begin=(0,), end=(1,))
    on = op.strided_slice(values, begin=(1,), end=(2,))
    off, on = op.reshape(off, newshape=()), op.reshape(on, newshape=())
    idx = indices
    idt = ctx.dtype(indices)
    if idt.startswith("float"):
        idx = op.cast(idx, dtype="int64")
        idt = "int64"
    if not idt.startswith("uint"):
        idx = op.where(op.less(idx, scalar(0, idt)), op.add(idx, scalar(depth, idt)), idx)
    rank = ctx.rank(indices) + 1
    return op.one_hot(idx, on, off, depth=depth, axis=attrs.get("axis", -1) % rank, dtype=dt)


def topk(ctx, inputs, attrs):
    x = inputs[0]
    k = attrs["k"] if ctx.version < 10 else int(np.asarray(ctx.static(inputs[1], "K")).reshape(-1)[0])
    axis = attrs.get("axis", -1) % ctx.rank(x)
    if k == 0:
        shape = list(ctx.static_shape(x))
        shape[axis] = 0
        return [Constant(np.zeros(shape, ctx.dtype(x))), Constant(np.zeros(shape, np.int64))]
    largest = bool(attrs.get("largest", 1))
    out = op.topk(x, k=k, axis=axis, ret_type="both", is_ascend=not largest, dtype="int64")
    return [TupleGetItem(out, 0), TupleGetItem(out, 1)]


def depth_to_space(ctx, inputs, attrs):
    return op.nn.depth_to_space(inputs[0], block_size=attrs["blocksize"],
                                mode=attrs.get("mode", "DCR"))


def space_to_depth(ctx, inputs, attrs):
    return op.nn.space_to_depth(inputs[0], block_size=attrs["blocksize"])


def trilu(ctx, inputs, attrs):
    """Trilu as ``where(mask, x, 0)`` with the mask built at import time from the static
    matrix shape and ``k``."""
    x = inputs[0]
    k = 0
    if len(inputs) > 1 and inputs[1] is not None:
        k = int(np.asarray(ctx.static(inputs[1], "k")).reshape(-1)[0])
    shape = ctx.static_shape(x)
    n, m = shape[-2], shape[-1]
    rows, cols = np.arange(n)[:, None], np.arange(m)[None, :]
    mask = cols - rows >= k if attrs.get("upper", 1) else cols - rows <= k
    return op.where(Constant(mask), x, scalar(0, ctx.dtype(x)))


def nonzero(ctx, inputs, attrs):
    # the output's shape depends on the data: relaybench's static shapes need the value
    value = ctx.static(inputs[0], "X")
    return Constant(np.array(np.nonzero(value), dtype=np.int64).reshape(np.ndim(value), -1))


def compress(ctx, inputs, attrs):
    x, cond = inputs
    cond = np.asarray(ctx.static(cond, "condition")).astype(bool).reshape(-1)
    axis = attrs.get("axis")
    if axis is None:
        x = op.reshape(x, newshape=(-1,))
        axis = 0
    picks = np.nonzero(cond)[0].astype(np.int64)
    return op.take(x, Constant(picks), axis=axis, mode="fast")


def reverse_sequence(ctx, inputs, attrs):
    x, lengths = inputs
    lengths = np.asarray(ctx.static(lengths, "sequence_lens")).astype(np.int64)
    batch_axis, time_axis = attrs.get("batch_axis", 1), attrs.get("time_axis", 0)
    shape = ctx.static_shape(x)
    rows = []
    for b in range(shape[batch_axis]):
        order = np.arange(shape[time_axis])
        order[:lengths[b]] = order[:lengths[b]][::-1]
        rows.append(order)
    index = np.stack(rows, axis=0 if batch_axis < time_axis else 1)
    full = [1] * len(shape)
    full[batch_axis], full[time_axis] = shape[batch_axis], shape[time_axis]
    index = np.broadcast_to(index.reshape(full), shape).astype(np.int64)
    return op.gather(x, Constant(np.ascontiguousarray(index)), axis=time_axis)


def einsum(ctx, inputs, attrs):
    return op.einsum(inputs, equation=attrs["equation"])


def scatter_elements(ctx, inputs, attrs):
    x, indices, updates = inputs
    axis = attrs.get("axis", 0) % ctx.rank(x)
    mode = {"none": "update", "add": "add", "mul": "mul", "min": "min", "max": "max"}.get(
        attrs.get("reduction", "none"))
    if mode is None:
        ctx.fail(f"reduction={attrs.get('reduction')!r}")
    idx = _normalized_indices(ctx, indices, ctx.shape(x)[axis])
    return op.scatter_elements(x, idx, updates, axis=axis, reduction=mode)


def center_crop_pad(ctx, inputs, attrs):
    """CenterCropPad: each named axis cropped or zero-padded to its target extent around the
    centre (the odd element goes to the end)."""
    x = inputs[0]
    target = _ints(ctx, inputs[1], "shape")
    shape = list(ctx.static_shape(x))
    rank = len(shape)
    axes = attrs.get("axes")
    axes = list(range(rank)) if axes is None else [a % rank for a in axes]
    out = x
    for a, t in zip(axes, target):
        d = shape[a]
        if t < d:
            start = (d - t) // 2
            out = op.strided_slice(out, begin=(start,), end=(start + t,), axes=(a,))
        elif t > d:
            before = (t - d) // 2
            width = [(0, 0)] * rank
            width[a] = (before, t - d - before)
            out = op.nn.pad(out, scalar(0, ctx.dtype(x)), pad_width=tuple(width))
    return out if out is not x else op.copy(x)


# ---- ops whose output shape depends on the data -------------------------------------------------
# relaybench's shapes are static, so these need their inputs' values at import time (the backend
# binds them, see backend.py); they are then computed once, here, into constants.

def _corners(boxes: np.ndarray, center: bool) -> np.ndarray:
    """Boxes as (y1, x1, y2, x2) with y1 <= y2 and x1 <= x2."""
    if center:
        xc, yc, w, h = boxes[..., 0], boxes[..., 1], boxes[..., 2], boxes[..., 3]
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=-1)
    y1, x1, y2, x2 = (boxes[..., i] for i in range(4))
    return np.stack([np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2),
                     np.maximum(x1, x2)], axis=-1)


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    h = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    w = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = h * w
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def non_max_suppression(ctx, inputs, attrs):
    """NonMaxSuppression: per batch and class, boxes taken greedily by decreasing score (ties
    by index), each dropping the later ones that overlap it by more than ``iou_threshold``;
    ``(batch, class, box)`` rows of int64."""
    boxes = np.asarray(ctx.static(inputs[0], "boxes"), dtype=np.float64)
    scores = np.asarray(ctx.static(inputs[1], "scores"), dtype=np.float64)

    def optional(i, what, default):
        if len(inputs) > i and inputs[i] is not None:
            return np.asarray(ctx.static(inputs[i], what)).reshape(-1)[0]
        return default
    limit = int(optional(2, "max_output_boxes_per_class", 0))
    iou_threshold = float(optional(3, "iou_threshold", 0.0))
    score_threshold = optional(4, "score_threshold", None)
    corners = _corners(boxes, bool(attrs.get("center_point_box", 0)))
    picked = []
    for b in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = [i for i in np.argsort(-s, kind="stable")
                     if score_threshold is None or s[i] > float(score_threshold)]
            kept: list = []
            for i in order:
                if len(kept) >= limit:
                    break
                if all(_iou(corners[b, i], corners[b, j]) <= iou_threshold for j in kept):
                    kept.append(i)
            picked.extend((b, c, i) for i in kept)
    return Constant(np.asarray(picked, dtype=np.int64).reshape(-1, 3))


def unique(ctx, inputs, attrs):
    """Unique: the distinct values (or slices along ``axis``), sorted or in order of first
    appearance, with their first indices, the inverse map and the counts."""
    x = np.asarray(ctx.static(inputs[0], "X"))
    axis = attrs.get("axis")
    values, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True,
                                               return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)
    if not attrs.get("sorted", 1):
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        values = np.take(values, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    as64 = [Constant(np.asarray(v, dtype=np.int64)) for v in (first, inverse, counts)]
    return [Constant(np.asarray(values))] + as64


def tensor_scatter(ctx, inputs, attrs):
    """TensorScatter: ``update`` written into a copy of ``past_cache`` along ``axis`` from each
    batch row's write index (wrapping around in ``circular`` mode), as ScatterElements with
    the indices built from the static shapes."""
    past, update = inputs[0], inputs[1]
    write = inputs[2] if len(inputs) > 2 else None
    shape = ctx.static_shape(update)
    rank = len(shape)
    axis = attrs.get("axis", -2) % rank
    size = ctx.static_shape(past)[axis]
    steps = np.arange(shape[axis], dtype=np.int64).reshape([-1 if i == axis else 1 for i in range(rank)])
    index = Constant(np.broadcast_to(steps, shape).copy())
    if write is not None:
        start = op.reshape(op.cast(write, dtype="int64"), newshape=[shape[0]] + [1] * (rank - 1))
        index = op.add(index, start)
    if attrs.get("mode", "linear") == "circular":
        index = op.floor_mod(index, scalar(size, "int64"))
    return op.scatter_elements(past, index, update, axis=axis)


def binarizer(ctx, inputs, attrs):
    x = inputs[0]
    dt = ctx.dtype(x)
    return op.cast(op.greater(x, scalar(attrs.get("threshold", 0.0), dt)), dtype=dt)


def array_feature_extractor(ctx, inputs, attrs):
    """ai.onnx.ml ArrayFeatureExtractor: the given positions of the last axis."""
    x, indices = inputs
    rank = ctx.rank(x)
    flat = op.reshape(indices, newshape=(-1,))
    out = op.take(x, flat, axis=rank - 1, mode="fast")
    if rank == 1:
        out = op.expand_dims(out, axis=0)
    return out
