"""Shape-transforming operators: reshape, transpose, slicing, gathering, tiling, layouts.

Each operator is one :class:`~relaybench.op.registry.OpDef` with Relay's name, attributes and
defaults, its type relation (Relay's shape rules; symbolic dims flow through where the result is
determined by them), its fusion pattern kind (TVM's) and its numpy reference.

>>> import relaybench as rb
>>> from relaybench.ir.type_infer import infer_expr
>>> x = rb.var("x", shape=(2, 3, 4))
>>> infer_expr(reshape(x, newshape=(0, -1))), infer_expr(transpose(x, axes=(1, 0, 2)))
(Tensor[(2, 12), float32], Tensor[(3, 2, 4), float32])
>>> infer_expr(split(x, indices_or_sections=(1, 3), axis=2))
(Tensor[(2, 3, 1), float32], Tensor[(2, 3, 2), float32], Tensor[(2, 3, 1), float32])
>>> infer_expr(strided_slice(x, begin=(0, 1), end=(2, -1), strides=(1, 1)))
Tensor[(2, 1, 4), float32]
>>> infer_expr(take(x, rb.var("i", shape=(5,), dtype="int64"), axis=1))
Tensor[(2, 5, 4), float32]
>>> infer_expr(layout_transform(rb.var("y", shape=("n", 32, 7, 7)), src_layout="NCHW",
...                             dst_layout="NCHW16c"))
Tensor[(n, 2, 7, 7, 16), float32]
>>> infer_expr(arange(0.0, 5.0)), infer_expr(arange(rb.var("k", shape=()), 5.0))
(Tensor[(5), float32], Tensor[(?), float32])
>>> infer_expr(gather_nd(x, rb.var("j", shape=(2, 7), dtype="int32")))
Tensor[(7, 4), float32]
>>> infer_expr(topk(x, k=2, axis=-1))
(Tensor[(2, 3, 2), float32], Tensor[(2, 3, 2), int32])

The scans and sorts (``cumsum``, ``cumprod``, ``argsort``, ``sort``, ``topk``) are Relay's
algorithm operators; their kernels count ranks and mask reductions, so they cost the square of
the scanned axis's extent: they suit the short axes of a model's heads.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.layout import Layout
from ..ir.symbolic import ANY, add, floordiv, format_dim, mul, prod, sub
from ..ir.types import TensorType, TupleType, check_dtype
from ._layout import concatenate_layout, layout_transform_layout, split_layout
from ._rel import (as_int, fail, fmt_shape, known, known_deep, normalize_axis, provably_different,
                   relation, tensor)
from . import _compute as C
from .registry import OpDef, OpPattern, register

__all__ = ["reshape", "reshape_like", "transpose", "squeeze", "expand_dims", "concatenate", "split",
           "stack", "take", "strided_slice", "broadcast_to", "tile", "repeat", "layout_transform",
           "shape_of", "arange", "one_hot", "infer_reshape", "gather", "gather_nd", "scatter_nd",
           "ndarray_size", "reverse", "cumsum", "cumprod", "argsort", "sort", "topk",
           "broadcast_to_like", "slice_like"]


# ---------------------------------------------------------------------------------------------
# Attribute helpers (normalizers raise ValueError; the registry prefixes the op's name)

def _ints(value, name: str, minimum=None) -> tuple:
    """An int or a sequence of ints as a tuple of ints."""
    seq = value if isinstance(value, (list, tuple)) else (value,)
    return tuple(as_int(v, name, minimum) for v in seq)


def _int_dtype(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


def _choice(value, name: str, options) -> str:
    if value not in options:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, options))}, got {value!r}")
    return value


def _dtype(value, name: str = "dtype") -> str:
    try:
        return check_dtype(value)
    except ValueError as err:
        raise ValueError(f"{name}: {err}") from None


def _normalize_axis_attr(a: dict) -> dict:
    a["axis"] = as_int(a["axis"], "axis")
    return a


def _join(fields: list, axis_of_new=None):
    """The common shape of same-rank tensors, dim by dim; None (plus the dim) where two differ.

    ``?`` agrees with anything and is replaced by a known extent; ``axis_of_new`` is skipped.
    """
    out = list(fields[0].shape)
    for i, f in enumerate(fields[1:], start=1):
        for d, b in enumerate(f.shape):
            if d == axis_of_new:
                continue
            a = out[d]
            if a == b or b is ANY:
                continue
            if a is ANY:
                out[d] = b
                continue
            return None, (i, d, a, b)
    return out, None


def _tensor_fields(tup, what: str) -> list:
    """The fields of a tuple-of-tensors input, checked for one dtype and one rank."""
    if not isinstance(tup, TupleType):
        fail(f"the input must be a tuple of tensors, got {tup}")
    if not tup.fields:
        fail(f"the input tuple is empty: nothing to {what}")
    fields = [tensor(f, f"field {i} of the input") for i, f in enumerate(tup.fields)]
    first = fields[0]
    for i, f in enumerate(fields[1:], start=1):
        if f.dtype != first.dtype:
            fail(f"field {i} has dtype {f.dtype} but field 0 has {first.dtype}")
        if f.ndim != first.ndim:
            fail(f"field {i} has rank {f.ndim} but field 0 has rank {first.ndim}")
    return fields


# ---------------------------------------------------------------------------------------------
# reshape

def _exact_div(total, part):
    """``total / part`` when it is exact (ints or symbolic), ``?`` when it cannot be decided.

    Raises ValueError when both are ints and ``part`` does not divide ``total``.
    """
    if total is ANY or part is ANY:
        return ANY
    if isinstance(part, int):
        if part == 0:
            raise ValueError("cannot infer -1 next to a zero-sized dimension")
        if isinstance(total, int):
            if total % part:
                raise ValueError(f"{total} elements do not divide into blocks of {part}")
            return total // part
        q = floordiv(total, part)
        return q if mul(q, part) == total else ANY
    return 1 if total == part else ANY


def _infer_minus_one(ishape, others: list, used_in: set, used_out: set):
    """The extent of a ``-1``: the input's size over the other output dims.

    As in Relay, dims that ``0``, ``-2``, ``-3`` and ``-4`` carry over from the input are left out
    on both sides (so ``(?, 3)`` reshaped to ``(0, -1)`` gives ``(?, 3)``); of the rest, equal
    symbolic factors cancel before dividing, so ``(n, 3, 4)`` to ``(3, -1)`` gives ``4*n``.
    """
    rest = [d for i, d in enumerate(ishape) if i not in used_in]
    leftover = []
    for j, d in others:
        if j in used_out:
            continue
        for i, f in enumerate(rest):
            if f == d and d is not ANY and not isinstance(d, int):
                del rest[i]
                break
        else:
            leftover.append(d)
    try:
        return _exact_div(prod(rest), prod(leftover))
    except ValueError:
        total, part = prod(ishape), prod(d for _, d in others)
        if isinstance(total, int) and isinstance(part, int) and part:
            raise ValueError(f"{total} elements do not divide into blocks of {part}") from None
        raise


def infer_reshape(ishape, newshape, allowzero: int = 0) -> tuple:
    """The output shape of ``reshape(x, newshape)`` for an input of shape ``ishape``.

    Special values, as in Relay: ``0`` copies the input dimension at that position (a literal 0
    when ``allowzero``), ``-1`` is inferred from the rest, ``-2`` copies all remaining dimensions,
    ``-3`` merges the next two input dimensions, ``-4`` splits one input dimension into the next
    two values of ``newshape`` (one of which may be ``-1``). A positive value, a ``0`` and a
    ``-1`` each step over one input dimension. Raises ValueError when the sizes do not match.

    >>> infer_reshape((2, 3, 4), (-4, 1, 2, -3))
    (1, 2, 12)
    >>> infer_reshape((6, 4), (-1, 2))
    (12, 2)
    """
    ishape = tuple(ishape)
    out: list = []
    used_in, used_out = set(), set()      # dims carried over from the input unchanged in size
    infer_at = None
    src = 0
    j = 0

    def need(k):
        if src + k > len(ishape):
            raise ValueError(f"newshape {fmt_shape(newshape)} uses more input dimensions than the "
                             f"input's {len(ishape)}")

    def carry(dims, inputs):
        used_in.update(inputs)
        used_out.update(range(len(out), len(out) + len(dims)))
        out.extend(dims)

    while j < len(newshape):
        v = newshape[j]
        if v > 0:
            out.append(v)
            src += 1
        elif v == 0:
            if allowzero:
                out.append(0)
            else:
                need(1)
                carry([ishape[src]], [src])
            src += 1
        elif v == -1:
            if infer_at is not None:
                raise ValueError("newshape can hold only one -1")
            infer_at = len(out)
            out.append(1)
            src += 1
        elif v == -2:
            carry(ishape[src:], range(src, len(ishape)))
            src = len(ishape)
        elif v == -3:
            need(2)
            carry([mul(ishape[src], ishape[src + 1])], [src, src + 1])
            src += 2
        elif v == -4:
            if j + 2 >= len(newshape):
                raise ValueError("-4 must be followed by two values")
            need(1)
            whole = ishape[src]
            d0, d1 = newshape[j + 1], newshape[j + 2]
            j += 2
            if d0 < -1 or d1 < -1 or d0 == 0 or d1 == 0:
                raise ValueError(f"-4 must be followed by two positive values or -1, got {d0}, {d1}")
            if d0 == -1 and d1 == -1:
                raise ValueError("-4 splits into two values, at most one of them -1")
            if d0 == -1:
                d0 = _exact_div(whole, d1)
            elif d1 == -1:
                d1 = _exact_div(whole, d0)
            elif provably_different(mul(d0, d1), whole):
                raise ValueError(f"-4 splits dimension {format_dim(whole)} into {d0} * {d1}")
            carry([d0, d1], [src])
            src += 1
        else:
            raise ValueError(f"invalid value {v} in newshape")
        j += 1
    if infer_at is not None:
        others = [(i, d) for i, d in enumerate(out) if i != infer_at]
        out[infer_at] = _infer_minus_one(ishape, others, used_in, used_out)
    elif provably_different(prod(ishape), prod(out)):
        raise ValueError(f"{format_dim(prod(ishape))} elements vs {format_dim(prod(out))}")
    return tuple(out)


def _normalize_reshape(a: dict) -> dict:
    a["newshape"] = _ints(a["newshape"], "newshape", minimum=-4)
    a["allowzero"] = as_int(a["allowzero"], "allowzero", minimum=0)
    if a["allowzero"] > 1:
        raise ValueError(f"allowzero must be 0 or 1, got {a['allowzero']}")
    return a


@relation("ReshapeRel")
def reshape_rel(types, attrs):
    """``ReshapeRel``: the shape given by :func:`infer_reshape`; the dtype is kept."""
    (data,) = types
    if not known(data):
        return None
    data = tensor(data, "data")
    try:
        shape = infer_reshape(data.shape, attrs.newshape, attrs.allowzero)
    except ValueError as err:
        fail(f"cannot reshape {data} to newshape={list(attrs.newshape)}: {err}")
    return TensorType(shape, data.dtype)


reshape = register(OpDef(
    "reshape", ("data",), reshape_rel, OpPattern.INJECTIVE,
    attrs={"newshape": (), "allowzero": 0}, normalize=_normalize_reshape,
    reference=lambda x, attrs: np.reshape(x, infer_reshape(x.shape, attrs.newshape, attrs.allowzero)),
    compute=C.reshape_compute,
    doc="Reshape. ``newshape`` may use Relay's special values: ``0`` copies the input dim at that "
        "position (a literal 0 when ``allowzero=1``), ``-1`` infers one dim from the rest, ``-2`` "
        "copies all remaining input dims, ``-3`` merges the next two input dims, ``-4, a, b`` "
        "splits one input dim into ``a * b`` (one of them may be -1). Symbolic dims flow "
        "through: ``(n, 3, 4)`` to ``(0, -1)`` gives ``(n, 12)``; a ``-1`` that no exact "
        "division determines is ``?``."))


# ---------------------------------------------------------------------------------------------
# reshape_like

def _normalize_reshape_like(a: dict) -> dict:
    for key in ("lhs_begin", "rhs_begin"):
        a[key] = as_int(a[key], key)
    for key in ("lhs_end", "rhs_end"):
        if a[key] is not None:
            a[key] = as_int(a[key], key)
    return a


def _span(begin, end, ndim: int, side: str) -> tuple:
    """``[begin, end)`` over ``ndim`` axes, negative values counted from the back."""
    b = begin + ndim if begin < 0 else begin
    e = ndim if end is None else (end + ndim if end < 0 else end)
    if not 0 <= b <= e <= ndim:
        fail(f"{side}_begin={begin} and {side}_end={end} do not select a range of the "
             f"{'data' if side == 'lhs' else 'shape_like'}'s {ndim} axes")
    return b, e


def _reshape_like_shape(lhs, rhs, attrs) -> tuple:
    lb, le = _span(attrs.lhs_begin, attrs.lhs_end, len(lhs), "lhs")
    rb, re = _span(attrs.rhs_begin, attrs.rhs_end, len(rhs), "rhs")
    return tuple(lhs[:lb]) + tuple(rhs[rb:re]) + tuple(lhs[le:])


@relation("ReshapeLikeRel")
def reshape_like_rel(types, attrs):
    """``ReshapeLikeRel``: data's dims ``[lhs_begin, lhs_end)`` replaced by shape_like's
    ``[rhs_begin, rhs_end)``; the element count must not change."""
    data, like = types
    if not (known(data) and known(like)):
        return None
    data, like = tensor(data, "data"), tensor(like, "shape_like")
    shape = _reshape_like_shape(data.shape, like.shape, attrs)
    if provably_different(prod(data.shape), prod(shape)):
        fail(f"cannot reshape {data} to {fmt_shape(shape)} (taken from {like}): "
             f"{format_dim(prod(data.shape))} elements vs {format_dim(prod(shape))}")
    return TensorType(shape, data.dtype)


reshape_like = register(OpDef(
    "reshape_like", ("data", "shape_like"), reshape_like_rel, OpPattern.INJECTIVE,
    attrs={"lhs_begin": 0, "lhs_end": None, "rhs_begin": 0, "rhs_end": None},
    normalize=_normalize_reshape_like,
    reference=lambda x, like, attrs: np.reshape(x, _reshape_like_shape(x.shape, like.shape, attrs)),
    compute=C.reshape_compute,
    doc="Reshape ``data`` to the shape of ``shape_like``; with the begin/end attributes only "
        "data's dims ``[lhs_begin, lhs_end)`` are replaced, by shape_like's ``[rhs_begin, rhs_end)``."))


# ---------------------------------------------------------------------------------------------
# transpose

def _normalize_transpose(a: dict) -> dict:
    if a["axes"] is not None:
        a["axes"] = _ints(a["axes"], "axes")
    return a


def _transpose_axes(ndim: int, axes) -> tuple:
    if axes is None:
        return tuple(range(ndim - 1, -1, -1))
    if len(axes) != ndim:
        fail(f"axes {list(axes)} has {len(axes)} entries for a tensor of rank {ndim}")
    norm = tuple(normalize_axis(a, ndim) for a in axes)
    if sorted(norm) != list(range(ndim)):
        fail(f"axes {list(axes)} is not a permutation of the {ndim} axes")
    return norm


@relation("TransposeRel")
def transpose_rel(types, attrs):
    """``TransposeRel``: the axes permuted (reversed when ``axes`` is None)."""
    (data,) = types
    if not known(data):
        return None
    data = tensor(data, "data")
    axes = _transpose_axes(data.ndim, attrs.axes)
    return TensorType(tuple(data.shape[a] for a in axes), data.dtype)


transpose = register(OpDef(
    "transpose", ("data",), transpose_rel, OpPattern.INJECTIVE, attrs={"axes": None},
    normalize=_normalize_transpose,
    reference=lambda x, attrs: np.transpose(x, attrs.axes), compute=C.transpose_compute,
    doc="Permute the axes; ``axes=None`` reverses them; negative axes count from the back."))


# ---------------------------------------------------------------------------------------------
# squeeze, expand_dims

def _normalize_squeeze(a: dict) -> dict:
    if a["axis"] is not None:
        a["axis"] = _ints(a["axis"], "axis")
    return a


@relation("SqueezeRel")
def squeeze_rel(types, attrs):
    """``SqueezeRel``: the listed axes (each of extent 1) removed; every static 1 when None."""
    (data,) = types
    if not known(data):
        return None
    data = tensor(data, "data")
    if attrs.axis is None:
        return TensorType([d for d in data.shape if d != 1], data.dtype)
    drop = set()
    for ax in attrs.axis:
        i = normalize_axis(ax, data.ndim)
        if i in drop:
            fail(f"axis {ax} is listed twice")
        d = data.shape[i]
        if isinstance(d, int) and d != 1:
            fail(f"cannot squeeze axis {ax} of {data}: its extent is {d}, not 1")
        drop.add(i)
    return TensorType([d for i, d in enumerate(data.shape) if i not in drop], data.dtype)


def _squeeze_ref(x, attrs):
    if attrs.axis is None:
        return np.squeeze(x)
    return np.squeeze(x, axis=tuple(a % x.ndim for a in attrs.axis))


squeeze = register(OpDef(
    "squeeze", ("data",), squeeze_rel, OpPattern.INJECTIVE, attrs={"axis": None},
    normalize=_normalize_squeeze, reference=_squeeze_ref, compute=C.squeeze_compute,
    doc="Remove axes of extent 1: those in ``axis``, or with ``axis=None`` every axis whose extent "
        "is statically 1. A symbolic or ``?`` extent is kept by ``axis=None`` (as in Relay; the "
        "reference, which sees only arrays, would drop it were it 1 at run time) and is assumed "
        "to be 1 when listed in ``axis``."))


def _normalize_expand_dims(a: dict) -> dict:
    a["axis"] = as_int(a["axis"], "axis")
    a["num_newaxis"] = as_int(a["num_newaxis"], "num_newaxis", minimum=0)
    return a


def _expand_pivot(axis: int, ndim: int) -> int:
    if not -ndim - 1 <= axis <= ndim:
        fail(f"axis {axis} is out of range for inserting into rank {ndim} "
             f"(it must be in [{-ndim - 1}, {ndim}])")
    return axis + ndim + 1 if axis < 0 else axis


@relation("ExpandDimsRel")
def expand_dims_rel(types, attrs):
    """``ExpandDimsRel``: ``num_newaxis`` axes of extent 1 inserted before position ``axis``."""
    (data,) = types
    if not known(data):
        return None
    data = tensor(data, "data")
    p = _expand_pivot(attrs.axis, data.ndim)
    shape = data.shape[:p] + (1,) * attrs.num_newaxis + data.shape[p:]
    return TensorType(shape, data.dtype)


def _expand_dims_ref(x, attrs):
    p = attrs.axis + x.ndim + 1 if attrs.axis < 0 else attrs.axis
    return np.reshape(x, x.shape[:p] + (1,) * attrs.num_newaxis + x.shape[p:])


expand_dims = register(OpDef(
    "expand_dims", ("data",), expand_dims_rel, OpPattern.BROADCAST,
    attrs={"axis": 0, "num_newaxis": 1}, normalize=_normalize_expand_dims,
    reference=_expand_dims_ref, compute=C.expand_dims_compute,
    doc="Insert ``num_newaxis`` axes of extent 1 at ``axis`` (in ``[-ndim-1, ndim]``; -1 appends). "
        "Pattern kind BROADCAST, as in TVM."))


# ---------------------------------------------------------------------------------------------
# concatenate, stack, split

@relation("ConcatenateRel")
def concatenate_rel(types, attrs):
    """``ConcatenateRel``: a tuple of tensors of one dtype and rank, equal except along ``axis``."""
    (tup,) = types
    if not known_deep(tup):
        return None
    fields = _tensor_fields(tup, "concatenate")
    first = fields[0]
    if first.ndim == 0:
        fail("cannot concatenate scalars")
    axis = normalize_axis(attrs.axis, first.ndim)
    out, bad = _join(fields, axis)
    if bad is not None:
        i, d, a, b = bad
        fail(f"field {i} has shape {fmt_shape(fields[i].shape)} but field 0 has "
             f"{fmt_shape(first.shape)}: dimension {d} differs ({format_dim(a)} vs {format_dim(b)})")
    total = 0
    for f in fields:
        total = add(total, f.shape[axis])
    out[axis] = total
    return TensorType(out, first.dtype)


concatenate = register(OpDef(
    "concatenate", ("data",), concatenate_rel, OpPattern.INJECTIVE, attrs={"axis": 0},
    normalize=_normalize_axis_attr,
    reference=lambda data, attrs: np.concatenate(list(data), axis=attrs.axis),
    compute=C.concatenate_compute, layout=concatenate_layout,
    doc="Join a tuple of tensors along ``axis``; the extents along it add up (``n + m``)."))


@relation("StackRel")
def stack_rel(types, attrs):
    """``StackRel``: a tuple of tensors of one shape, joined along a new axis at ``axis``."""
    (tup,) = types
    if not known_deep(tup):
        return None
    fields = _tensor_fields(tup, "stack")
    first = fields[0]
    out, bad = _join(fields)
    if bad is not None:
        i, d, a, b = bad
        fail(f"field {i} has shape {fmt_shape(fields[i].shape)} but field 0 has "
             f"{fmt_shape(first.shape)}: dimension {d} differs ({format_dim(a)} vs {format_dim(b)})")
    p = _expand_pivot(attrs.axis, first.ndim)
    return TensorType(out[:p] + [len(fields)] + out[p:], first.dtype)


stack = register(OpDef(
    "stack", ("data",), stack_rel, OpPattern.INJECTIVE, attrs={"axis": 0},
    normalize=_normalize_axis_attr,
    reference=lambda data, attrs: np.stack(list(data), axis=attrs.axis), compute=C.stack_compute,
    doc="Join a tuple of same-shaped tensors along a new axis at ``axis`` (in ``[-ndim-1, ndim]``)."))


def _normalize_split(a: dict) -> dict:
    ios = a["indices_or_sections"]
    if isinstance(ios, (list, tuple)):
        ios = tuple(as_int(v, "indices_or_sections") for v in ios)
        prev = 0
        for v in ios:
            if v <= prev:
                raise ValueError(f"indices_or_sections must be a sorted ascending list of positive "
                                 f"indices, got {list(ios)}")
            prev = v
    else:
        ios = as_int(ios, "indices_or_sections", minimum=1)
    a["indices_or_sections"] = ios
    a["axis"] = as_int(a["axis"], "axis")
    return a


@relation("SplitRel")
def split_rel(types, attrs):
    """``SplitRel``: a tuple of tensors, ``sections`` equal pieces or pieces between ``indices``."""
    (data,) = types
    if not known(data):
        return None
    data = tensor(data, "data")
    if data.ndim == 0:
        fail("cannot split a scalar")
    axis = normalize_axis(attrs.axis, data.ndim)
    dim = data.shape[axis]
    ios = attrs.indices_or_sections
    if isinstance(ios, int):
        if isinstance(dim, int) and dim % ios:
            fail(f"axis {axis} of size {dim} cannot be split into {ios} equal sections")
        sizes = [floordiv(dim, ios)] * ios
    elif not ios:
        sizes = [dim]
    else:
        if isinstance(dim, int) and ios[-1] >= dim:
            fail(f"index {ios[-1]} is out of range for axis {axis} of size {dim}")
        bounds = (0,) + ios
        sizes = [b - a for a, b in zip(bounds, bounds[1:])]
        sizes.append(sub(dim, ios[-1]))
    fields = []
    for size in sizes:
        shape = list(data.shape)
        shape[axis] = size
        fields.append(TensorType(shape, data.dtype))
    return TupleType(fields)


def _split_ref(x, attrs):
    ios = attrs.indices_or_sections
    return tuple(np.split(x, ios if isinstance(ios, int) else list(ios), axis=attrs.axis))


split = register(OpDef(
    "split", ("data",), split_rel, OpPattern.INJECTIVE,
    attrs={"indices_or_sections": 1, "axis": 0}, normalize=_normalize_split, reference=_split_ref,
    compute=C.split_compute,
    layout=split_layout,
    doc="Split along ``axis`` into a tuple: ``indices_or_sections`` equal parts (an int, which must "
        "divide the extent) or the pieces between the sorted ``indices`` (a list; the last must be "
        "below the extent)."))


# ---------------------------------------------------------------------------------------------
# take

def _normalize_take(a: dict) -> dict:
    a["batch_dims"] = as_int(a["batch_dims"], "batch_dims")
    if a["axis"] is not None:
        a["axis"] = as_int(a["axis"], "axis")
    a["mode"] = _choice(a["mode"], "mode", ("clip", "wrap", "fast"))
    return a


@relation("TakeRel")
def take_rel(types, attrs):
    """``TakeRel``: ``data.shape[:axis] + indices.shape[batch_dims:] + data.shape[axis+1:]``;
    with ``axis=None`` (data flattened) the indices' shape."""
    data, indices = types
    if not (known(data) and known(indices)):
        return None
    data, indices = tensor(data, "data"), tensor(indices, "indices")
    if not _int_dtype(indices.dtype):
        fail(f"indices must have an integer dtype, got {indices}")
    if attrs.axis is None:
        return TensorType(indices.shape, data.dtype)
    if data.ndim == 0:
        fail("cannot take along an axis of a scalar")
    axis = normalize_axis(attrs.axis, data.ndim)
    b = attrs.batch_dims + indices.ndim if attrs.batch_dims < 0 else attrs.batch_dims
    if not 0 <= b <= indices.ndim:
        fail(f"batch_dims={attrs.batch_dims} is out of range for indices of rank {indices.ndim}")
    if b > axis:
        fail(f"batch_dims={b} is larger than axis {axis}")
    for i in range(b):
        if provably_different(data.shape[i], indices.shape[i]):
            fail(f"batch dimension {i} differs: data {data} has {format_dim(data.shape[i])}, "
                 f"indices {indices} have {format_dim(indices.shape[i])}")
    shape = data.shape[:axis] + indices.shape[b:] + data.shape[axis + 1:]
    return TensorType(shape, data.dtype)


def _take_ref(data, indices, attrs):
    if attrs.axis is None:
        data, axis, b = data.reshape(-1), 0, 0
    else:
        axis = attrs.axis % data.ndim
        b = attrs.batch_dims + indices.ndim if attrs.batch_dims < 0 else attrs.batch_dims
    n = data.shape[axis]
    idx = indices.astype(np.int64)
    if attrs.mode == "clip":
        idx = np.clip(idx, 0, n - 1)
    elif attrs.mode == "wrap":
        idx = np.mod(idx, n)
    elif idx.size and (idx.min() < 0 or idx.max() >= n):
        bad = idx[(idx < 0) | (idx >= n)].flat[0]
        raise ValueError(f"index {bad} is out of range for an axis of extent {n} (mode='fast' "
                         f"assumes indices in range)")
    batch, middle, rest = data.shape[:b], data.shape[b:axis], data.shape[axis + 1:]
    pb, pm, pi, pr = (int(np.prod(s)) for s in (batch, middle, idx.shape[b:], rest))
    d = data.reshape(pb, pm, n, pr)
    ix = idx.reshape(pb, pi)
    out = d[np.arange(pb)[:, None, None], np.arange(pm)[None, :, None], ix[:, None, :]]
    return out.reshape(batch + middle + idx.shape[b:] + rest)


take = register(OpDef(
    "take", ("data", "indices"), take_rel, OpPattern.INJECTIVE,
    attrs={"batch_dims": 0, "axis": None, "mode": "clip"}, normalize=_normalize_take,
    reference=_take_ref, compute=C.take_compute,
    doc="Gather slices of ``data`` along ``axis`` (the flattened data when ``axis=None``) at integer "
        "``indices``; the first ``batch_dims`` dims of data and indices are matched. ``mode`` "
        "handles indices out of range: ``clip`` clamps to ``[0, n-1]`` (negative ones give 0), "
        "``wrap`` takes them modulo ``n``, ``fast`` assumes they are in range (the reference "
        "raises when they are not)."))


# ---------------------------------------------------------------------------------------------
# strided_slice

_FAR = 2 ** 31 - 1    # an end at or beyond this (or a begin at or below -_FAR) means "to the end"


def _normalize_strided_slice(a: dict) -> dict:
    def bounds(value, name):
        seq = value if isinstance(value, (list, tuple)) else (value,)
        return tuple(None if v is None else as_int(v, name) for v in seq)

    a["begin"], a["end"] = bounds(a["begin"], "begin"), bounds(a["end"], "end")
    if a["strides"] is not None:
        a["strides"] = _ints(a["strides"], "strides")
        if 0 in a["strides"]:
            raise ValueError(f"strides cannot hold 0, got {list(a['strides'])}")
    a["slice_mode"] = _choice(a["slice_mode"], "slice_mode", ("end", "size"))
    if a["axes"] is not None:
        a["axes"] = _ints(a["axes"], "axes")
        if not len(a["begin"]) == len(a["end"]) == len(a["axes"]):
            raise ValueError(f"begin, end and axes must have one value per sliced axis, got "
                             f"{len(a['begin'])}, {len(a['end'])} and {len(a['axes'])}")
        if a["strides"] is not None and len(a["strides"]) > len(a["axes"]):
            raise ValueError(f"strides has {len(a['strides'])} values for {len(a['axes'])} axes")
    return a


def _slice_specs(ndim: int, attrs) -> list:
    """``(axis, begin, end, stride)`` for each sliced axis; ``None`` bounds mean "from the start"
    and "to the end" in the stride's direction. Missing strides are 1 (every stride is 1 in
    ``size`` mode, where ``end`` holds sizes)."""
    begin, end = attrs.begin, attrs.end
    strides = attrs.strides or ()
    if attrs.axes is not None:
        axes = [normalize_axis(a, ndim) for a in attrs.axes]
        if len(set(axes)) != len(axes):
            fail(f"axes {list(attrs.axes)} lists an axis twice")
    else:
        count = max(len(begin), len(end), len(strides))
        if count > ndim:
            fail(f"begin, end and strides slice {count} axes but the data has rank {ndim}")
        axes = list(range(count))
    specs = []
    for k, axis in enumerate(axes):
        s = 1 if attrs.slice_mode == "size" or k >= len(strides) else strides[k]
        b = begin[k] if k < len(begin) else None
        e = end[k] if k < len(end) else None
        specs.append((axis, b, e, s))
    return specs


def _clamp(v, lo, hi):
    return lo if v < lo else hi if v > hi else v


def _static_bounds(d: int, b, e, s: int, size_mode: bool) -> tuple:
    """Canonical ``(begin, end)`` of one axis of extent ``d``: negative indices count from the
    back, then both are clamped into the axis (``[0, d]`` for a positive stride, ``[-1, d-1]``
    for a negative one, where -1 means "before the first element")."""
    if s > 0:
        b = 0 if b is None else _clamp(b + d if b < 0 else b, 0, d)
        if size_mode:
            e = d if e is None or e < 0 else min(b + e, d)
        else:
            e = d if e is None else _clamp(e + d if e < 0 else e, 0, d)
    else:
        b = d - 1 if b is None else _clamp(b + d if b < 0 else b, -1, d - 1)
        e = -1 if e is None else _clamp(e + d if e < 0 else e, -1, d - 1)
    return b, e


def _slice_extent(d, b, e, s: int, size_mode: bool):
    if isinstance(d, int):
        b, e = _static_bounds(d, b, e, s, size_mode)
        span = e - b if s > 0 else b - e
        return max(0, -(-span // abs(s)))
    # a symbolic or unknown extent: determined only when the whole axis is walked
    if s > 0:
        whole = b in (None, 0) or b <= -_FAR
        whole = whole and (e is None or (e < 0 if size_mode else e >= _FAR))
    else:
        whole = (b is None or b >= _FAR) and (e is None or e <= -_FAR)
    if not whole:
        return ANY
    return floordiv(add(d, abs(s) - 1), abs(s))


@relation("StridedSliceRel")
def strided_slice_rel(types, attrs):
    """``StridedSliceRel``: numpy's slicing, axis by axis; unsliced axes are kept whole."""
    (data,) = types
    if not known(data):
        return None
    data = tensor(data, "data")
    shape = list(data.shape)
    for axis, b, e, s in _slice_specs(data.ndim, attrs):
        shape[axis] = _slice_extent(data.shape[axis], b, e, s, attrs.slice_mode == "size")
    return TensorType(shape, data.dtype)


def _strided_slice_ref(x, attrs):
    index = [slice(None)] * x.ndim
    for axis, b, e, s in _slice_specs(x.ndim, attrs):
        b, e = _static_bounds(x.shape[axis], b, e, s, attrs.slice_mode == "size")
        # canonical -1 means "before the first element": empty as a begin, open as an end
        index[axis] = slice(0, 0) if b < 0 else slice(b, None if e < 0 else e, s)
    return x[tuple(index)]


strided_slice = register(OpDef(
    "strided_slice", ("data",), strided_slice_rel, OpPattern.INJECTIVE,
    attrs={"begin": (), "end": (), "strides": None, "axes": None, "slice_mode": "end"},
    normalize=_normalize_strided_slice, reference=_strided_slice_ref,
    compute=C.strided_slice_compute,
    doc="Slice like numpy's ``x[b0:e0:s0, b1:e1:s1, ...]``: entry ``k`` of begin/end/strides "
        "applies to axis ``k`` (or to ``axes[k]``); negative indices count from the back, "
        "out-of-range ones are clamped, a None bound (or a missing one) runs to the end in the "
        "stride's direction, and axes not mentioned are kept whole. ``slice_mode='size'`` reads "
        "``end`` as sizes (negative: to the end) and ignores strides. A symbolic extent stays "
        "symbolic when its axis is walked whole (``ceil(n / stride)``) and becomes ``?`` "
        "otherwise, since clamping depends on its value."))


# ---------------------------------------------------------------------------------------------
# broadcast_to, tile, repeat

def _normalize_broadcast_to(a: dict) -> dict:
    a["shape"] = _ints(a["shape"], "shape", minimum=0)
    return a


@relation("BroadCastToRel")
def broadcast_to_rel(types, attrs):
    """``BroadCastToRel``: ``shape``, when data broadcasts to it (numpy's rules, right-aligned)."""
    (data,) = types
    if not known(data):
        return None
    data = tensor(data, "data")
    shape = attrs.shape
    if data.ndim > len(shape):
        fail(f"cannot broadcast {data} to {fmt_shape(shape)}: the data has more dimensions")
    offset = len(shape) - data.ndim
    for i, d in enumerate(data.shape):
        if isinstance(d, int) and d != 1 and d != shape[offset + i]:
            fail(f"cannot broadcast {data} to {fmt_shape(shape)}: dimension {i} has extent {d}, "
                 f"neither 1 nor {shape[offset + i]}")
    return TensorType(shape, data.dtype)


broadcast_to = register(OpDef(
    "broadcast_to", ("data",), broadcast_to_rel, OpPattern.BROADCAST, attrs={"shape": ()},
    normalize=_normalize_broadcast_to,
    reference=lambda x, attrs: np.array(np.broadcast_to(x, attrs.shape)),
    compute=C.broadcast_to_compute,
    doc="Broadcast ``data`` to ``shape`` with numpy's rules. Pattern kind BROADCAST, as in TVM."))


def _normalize_tile(a: dict) -> dict:
    a["reps"] = _ints(a["reps"], "reps", minimum=1)
    return a


@relation("TileRel")
def tile_rel(types, attrs):
    """``TileRel``: data and reps right-aligned (the shorter padded with 1s), extents multiplied."""
    (data,) = types
    if not known(data):
        return None
    data = tensor(data, "data")
    n = max(data.ndim, len(attrs.reps))
    dims = (1,) * (n - data.ndim) + tuple(data.shape)
    reps = (1,) * (n - len(attrs.reps)) + tuple(attrs.reps)
    return TensorType([mul(d, r) for d, r in zip(dims, reps)], data.dtype)


tile = register(OpDef(
    "tile", ("data",), tile_rel, OpPattern.BROADCAST, attrs={"reps": ()}, normalize=_normalize_tile,
    reference=lambda x, attrs: np.tile(x, attrs.reps), compute=C.tile_compute,
    doc="Repeat the whole tensor ``reps[i]`` times along each axis (numpy's ``tile``; every rep "
        "at least 1). Pattern kind BROADCAST, as in TVM."))


def _normalize_repeat(a: dict) -> dict:
    a["repeats"] = as_int(a["repeats"], "repeats", minimum=1)
    a["axis"] = as_int(a["axis"], "axis")
    return a


@relation("RepeatRel")
def repeat_rel(types, attrs):
    """``RepeatRel``: the extent along ``axis`` multiplied by ``repeats``."""
    (data,) = types
    if not known(data):
        return None
    data = tensor(data, "data")
    if data.ndim == 0:
        fail("cannot repeat along an axis of a scalar")
    axis = normalize_axis(attrs.axis, data.ndim)
    shape = list(data.shape)
    shape[axis] = mul(shape[axis], attrs.repeats)
    return TensorType(shape, data.dtype)


repeat = register(OpDef(
    "repeat", ("data",), repeat_rel, OpPattern.BROADCAST, attrs={"repeats": 1, "axis": 0},
    normalize=_normalize_repeat,
    reference=lambda x, attrs: np.repeat(x, attrs.repeats, axis=attrs.axis),
    compute=C.repeat_compute,
    doc="Repeat each element ``repeats`` times along ``axis`` (numpy's ``repeat``). Pattern kind "
        "BROADCAST, as in TVM."))


# ---------------------------------------------------------------------------------------------
# layout_transform

def _normalize_layout_transform(a: dict) -> dict:
    for key in ("src_layout", "dst_layout"):
        if not isinstance(a[key], str):
            raise ValueError(f"{key} must be a layout string, got {a[key]!r}")
        Layout(a[key])          # a ValueError names what is wrong with it
    src, dst = Layout(a["src_layout"]), Layout(a["dst_layout"])
    if not (src.is_undef or dst.is_undef) and not src.has_same_axes(dst):
        raise ValueError(f"src_layout {src.name} and dst_layout {dst.name} have different axes")
    return a


@relation("LayoutTransformRel")
def layout_transform_rel(types, attrs):
    """``LayoutTransformRel``: the shape of the same tensor in ``dst_layout`` (blocked axes split
    or merged by :class:`~relaybench.ir.layout.Layout`)."""
    (data,) = types
    if not known(data):
        return None
    data = tensor(data, "data")
    src, dst = attrs.src_layout, attrs.dst_layout
    if not src or not dst:
        fail("src_layout and dst_layout must both be given")
    try:
        shape = Layout(src).convert_shape(data.shape, dst)
    except ValueError as err:
        fail(f"cannot transform {data} from {src} to {dst}: {err}")
    return TensorType(shape, data.dtype)


layout_transform = register(OpDef(
    "layout_transform", ("data",), layout_transform_rel, OpPattern.INJECTIVE,
    attrs={"src_layout": "", "dst_layout": ""}, normalize=_normalize_layout_transform,
    reference=lambda x, attrs: np.ascontiguousarray(
        Layout(attrs.src_layout).transform_array(x, attrs.dst_layout)),
    compute=C.layout_transform_compute, layout=layout_transform_layout,
    doc="Rearrange ``data`` from ``src_layout`` to ``dst_layout`` over the same axes: NCHW <-> "
        "NHWC, NCHW <-> NCHW16c (``[N, C/16, H, W, 16]``), OIHW <-> OIHW16i16o, ...; a blocked "
        "axis must be divisible by its block."))


# ---------------------------------------------------------------------------------------------
# shape_of, arange, one_hot

@relation("ShapeOfRel")
def shape_of_rel(types, attrs):
    """``ShapeOfRel``: a 1-d tensor of ``rank`` elements, whatever the dims are."""
    (data,) = types
    if not known(data):
        return None
    data = tensor(data, "data")
    return TensorType((data.ndim,), attrs.dtype)


def _normalize_shape_dtype(a: dict) -> dict:
    """Any dtype, as Relay's ShapeOfAttrs (``shape_of(%x, dtype="float32")`` is well typed)."""
    a["dtype"] = _dtype(a["dtype"])
    return a


shape_of = register(OpDef(
    "shape_of", ("data",), shape_of_rel, OpPattern.OPAQUE, attrs={"dtype": "int32"},
    normalize=_normalize_shape_dtype,
    reference=lambda x, attrs: np.array(x.shape, dtype=attrs.dtype),
    doc="The shape of ``data`` as a 1-d tensor of ``dtype``; its type is ``Tensor[(rank,)]`` even "
        "when dims are symbolic or ``?``. Pattern kind OPAQUE, as in TVM (it runs on the host)."))


def _arange_count(start, stop, step):
    if step == 0:
        raise ValueError("step is 0")
    if all(isinstance(v, int) for v in (start, stop, step)):
        return max(0, -((start - stop) // step))
    return max(0, math.ceil((stop - start) / step))


def _normalize_arange(a: dict) -> dict:
    a["dtype"] = _dtype(a["dtype"])
    floating = not (_int_dtype(a["dtype"]) or a["dtype"] == "bool")
    for key in ("start", "stop", "step"):
        v = a[key]
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"{key} must be a number or None, got {v!r}")
        a[key] = float(v) if floating else int(v)
    if a["step"] == 0:
        raise ValueError("step cannot be 0")
    return a


@relation("ArangeRel")
def arange_rel(types, attrs):
    """``ArangeRel``: scalar inputs of ``dtype``; ``(ceil((stop - start) / step),)`` when the
    call's attrs hold the constant inputs, ``(?,)`` otherwise."""
    if not all(known(t) for t in types):
        return None
    for t, name in zip(types, ("start", "stop", "step")):
        t = tensor(t, name)
        if t.ndim != 0 or t.dtype != attrs.dtype:
            fail(f"{name} must be a scalar of dtype {attrs.dtype} (dtype={attrs.dtype}), got {t}")
    values = (attrs.start, attrs.stop, attrs.step)
    count = ANY if None in values else _arange_count(*values)
    return TensorType((count,), attrs.dtype)


def _arange_ref(start, stop, step, attrs):
    values = tuple(np.asarray(v).item() for v in (start, stop, step))
    for name, given, value in zip(("start", "stop", "step"), (attrs.start, attrs.stop, attrs.step),
                                  values):
        if given is not None and given != value:
            raise ValueError(f"{name} is {value} but the call's {name} attribute says {given}")
    count = _arange_count(*values)
    dtype = np.dtype(attrs.dtype)
    return (start.astype(dtype) + step.astype(dtype) * np.arange(count).astype(dtype)).astype(dtype)


_arange_caller = register(OpDef(
    "arange", ("start", "stop", "step"), arange_rel, OpPattern.OPAQUE,
    attrs={"start": None, "stop": None, "step": None, "dtype": "float32"},
    normalize=_normalize_arange, reference=_arange_ref,
    doc="``start + step * i`` for ``i`` in ``[0, ceil((stop - start) / step))`` (an empty range "
        "gives length 0). The inputs are scalar tensors of ``dtype``. Relay's type cannot depend "
        "on values, so, as in Relay, the call also records constant inputs in its ``start``/"
        "``stop``/``step`` attributes: the builder fills them when an input is a number or a "
        "scalar constant, and then the length is known; otherwise the output is ``Tensor[(?,)]`` "
        "(a dynamic dim). Pattern kind OPAQUE, as in TVM."))


def _constant_number(value):
    """A Python number for a number or a scalar Constant; None for anything else."""
    from ..ir.expr import Constant
    if isinstance(value, Constant):
        return value.data.item() if value.data.ndim == 0 else None
    if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        return value.item() if isinstance(value, np.number) else value
    return None


def arange(start, stop=None, step=None, dtype: str = "float32"):
    """``arange(start, stop=None, step=None, dtype="float32")``, Relay's signature.

    With one bound it counts from 0 (``arange(5)`` is ``0..4``); numbers become scalar constants
    of ``dtype``, and constant bounds are recorded in the call's attributes so that the output
    length is known.

    >>> import relaybench as rb
    >>> print(rb.Function([], arange(2, 8, 3, dtype="int32")).astext(show_types=False))
    fn () {
      arange(2, 8, 3, start=2, stop=8, step=3, dtype="int32")
    }
    """
    from ..ir.builder import as_expr, const
    from ..ir.expr import Call, Op
    if stop is None:
        start, stop = 0, start
    if step is None:
        step = 1
    args, attrs = [], {"dtype": dtype}
    dtype = check_dtype(dtype)
    for name, value in (("start", start), ("stop", stop), ("step", step)):
        attrs[name] = _constant_number(value)
        is_number = isinstance(value, (int, float, np.number)) and not isinstance(value, bool)
        args.append(const(value, dtype) if is_number else as_expr(value))
    return Call(Op.get("arange"), args, _arange_caller.opdef.make_attrs(attrs))


arange.opdef = _arange_caller.opdef


def _normalize_one_hot(a: dict) -> dict:
    a["depth"] = as_int(a["depth"], "depth", minimum=1)
    a["axis"] = as_int(a["axis"], "axis")
    a["dtype"] = _dtype(a["dtype"])
    return a


@relation("OneHotRel")
def one_hot_rel(types, attrs):
    """``OneHotRel``: the indices' shape with ``depth`` inserted at ``axis`` (-1: last), ``dtype``."""
    indices, on, off = types
    if not (known(indices) and known(on) and known(off)):
        return None
    indices = tensor(indices, "indices")
    if not _int_dtype(indices.dtype):
        fail(f"indices must have an integer dtype, got {indices}")
    for t, name in ((on, "on_value"), (off, "off_value")):
        t = tensor(t, name)
        if t.ndim != 0:
            fail(f"{name} must be a scalar, got {t}")
    p = _expand_pivot(attrs.axis, indices.ndim)
    return TensorType(indices.shape[:p] + (attrs.depth,) + indices.shape[p:], attrs.dtype)


def _one_hot_ref(indices, on, off, attrs):
    p = attrs.axis + indices.ndim + 1 if attrs.axis < 0 else attrs.axis
    positions = np.arange(attrs.depth).reshape((-1,) + (1,) * (indices.ndim - p))
    hit = np.expand_dims(indices, p) == positions
    dtype = np.dtype(attrs.dtype)
    return np.where(hit, np.asarray(on).astype(dtype), np.asarray(off).astype(dtype)).astype(dtype)


one_hot = register(OpDef(
    "one_hot", ("indices", "on_value", "off_value"), one_hot_rel, OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"depth": 1, "axis": -1, "dtype": "float32"}, normalize=_normalize_one_hot,
    reference=_one_hot_ref, compute=C.one_hot_compute,
    doc="A tensor of ``dtype`` holding ``on_value`` where ``indices`` equals the position along the "
        "new axis ``axis`` (of extent ``depth``) and ``off_value`` elsewhere; indices outside "
        "``[0, depth)`` give all ``off_value``. ``on_value``/``off_value`` are scalars, cast to "
        "``dtype``. Pattern kind OUT_ELEMWISE_FUSABLE, as in TVM."))


# ---------------------------------------------------------------------------------------------
# gather, gather_nd, scatter_nd

def _index_tensor(t, what: str = "indices") -> TensorType:
    t = tensor(t, what)
    if not _int_dtype(t.dtype):
        fail(f"{what} must have an integer dtype, got {t}")
    return t


def _check_in_range(idx, extents, what: str):
    """Raise naming the first index of ``idx`` (``[k, ...]`` rows, one per axis) outside its axis."""
    for k, n in enumerate(extents):
        row = idx[k]
        bad = (row < 0) | (row >= n)
        if bad.any():
            raise ValueError(f"{what} {row[bad].flat[0]} is out of range for an axis of extent {n} "
                             f"(indices must be in range)")


@relation("GatherRel")
def gather_rel(types, attrs):
    """``GatherRel``: indices of the data's rank, each dim but ``axis`` at most the data's; the
    output has the indices' shape and the data's dtype."""
    data, indices = types
    if not (known(data) and known(indices)):
        return None
    data, indices = tensor(data, "data"), _index_tensor(indices)
    if data.ndim == 0:
        fail("cannot gather along an axis of a scalar")
    axis = normalize_axis(attrs.axis, data.ndim)
    if indices.ndim != data.ndim:
        fail(f"indices {indices} must have the data's rank {data.ndim}")
    for i, (d, e) in enumerate(zip(data.shape, indices.shape)):
        if i != axis and isinstance(d, int) and isinstance(e, int) and e > d:
            fail(f"indices {indices} are larger than the data {data} along axis {i}")
    return TensorType(indices.shape, data.dtype)


def _gather_ref(data, indices, attrs):
    axis = attrs.axis % data.ndim
    idx = indices.astype(np.int64)
    _check_in_range(idx[None], [data.shape[axis]], "index")
    lead = tuple(np.arange(e).reshape((-1,) + (1,) * (idx.ndim - 1 - i)) for i, e in enumerate(idx.shape))
    key = tuple(idx if i == axis else lead[i] for i in range(idx.ndim))
    return data[key]


gather = register(OpDef(
    "gather", ("data", "indices"), gather_rel, OpPattern.INJECTIVE, attrs={"axis": 0},
    normalize=_normalize_axis_attr, reference=_gather_ref, compute=C.gather_compute,
    doc="``out[i_0, ..., i_k, ...] = data[i_0, ..., indices[i_0, ..., i_k, ...], ...]`` with the "
        "index at ``axis`` (PyTorch's ``gather``); indices must be in range (the reference "
        "raises when they are not, a kernel clamps)."))


def _normalize_gather_nd(a: dict) -> dict:
    a["batch_dims"] = as_int(a["batch_dims"], "batch_dims", minimum=0)
    if a["index_rank"] is not None:
        a["index_rank"] = as_int(a["index_rank"], "index_rank", minimum=1)
    return a


@relation("GatherNDRel")
def gather_nd_rel(types, attrs):
    """``GatherNDRel``: indices ``[M, Y_0, ..., Y_k]`` pick ``M`` leading coordinates (after the
    ``batch_dims`` batch axes, shared with ``Y``) of the data; the output is
    ``Y + data.shape[batch_dims + M:]``."""
    data, indices = types
    if not (known(data) and known(indices)):
        return None
    data, indices = tensor(data, "data"), _index_tensor(indices)
    if indices.ndim < 1:
        fail(f"indices must have rank at least 1 ([M, ...]), got {indices}")
    m = indices.shape[0]
    if attrs.index_rank is not None:
        if provably_different(m, attrs.index_rank):
            fail(f"index_rank={attrs.index_rank} but the indices {indices} give {format_dim(m)} "
                 f"coordinates")
        m = attrs.index_rank
    if not isinstance(m, int):
        fail(f"the number of coordinates (the first dimension of indices {indices}) must be static, "
             f"or index_rank given")
    b = attrs.batch_dims
    if b + m > data.ndim:
        fail(f"indices {indices} give {m} coordinates after batch_dims={b}, but the data {data} has "
             f"rank {data.ndim}")
    if b > indices.ndim - 1:
        fail(f"batch_dims={b} is larger than the indices' {indices.ndim - 1} position axes")
    for i in range(b):
        if provably_different(data.shape[i], indices.shape[1 + i]):
            fail(f"batch dimension {i} differs: data {data} has {format_dim(data.shape[i])}, "
                 f"indices {indices} have {format_dim(indices.shape[1 + i])}")
    return TensorType(indices.shape[1:] + data.shape[b + m:], data.dtype)


def _gather_nd_ref(data, indices, attrs):
    m, b = indices.shape[0], attrs.batch_dims
    idx = indices.astype(np.int64)
    _check_in_range(idx, data.shape[b:b + m], "index")
    ys = idx.shape[1:]
    batch = tuple(np.arange(ys[i]).reshape((-1,) + (1,) * (len(ys) - 1 - i)) for i in range(b))
    return np.array(data[batch + tuple(idx[k] for k in range(m))], order="C")  # a scalar stays 0-d


gather_nd = register(OpDef(
    "gather_nd", ("data", "indices"), gather_nd_rel, OpPattern.INJECTIVE,
    attrs={"batch_dims": 0, "index_rank": None}, normalize=_normalize_gather_nd,
    reference=_gather_nd_ref, compute=C.gather_nd_compute,
    doc="``out[y_0, ..., y_k, x...] = data[y_0, ..., y_{b-1}, indices[0, y...], ..., "
        "indices[M-1, y...], x...]``: indices ``[M, Y...]`` pick ``M`` coordinates; the first "
        "``batch_dims`` axes of ``Y`` run along as many leading data axes. Indices must be in "
        "range (the reference raises when they are not, a kernel clamps); ``index_rank`` gives "
        "``M`` when the indices' first dimension is not static."))


@relation("ScatterNDRel")
def scatter_nd_rel(types, attrs):
    """``ScatterNDRel``: indices ``[M, Y...]``, updates ``Y + data.shape[M:]`` of the data's
    dtype; the output has the data's type."""
    data, indices, updates = types
    if not (known(data) and known(indices) and known(updates)):
        return None
    data, indices, updates = tensor(data, "data"), _index_tensor(indices), tensor(updates, "updates")
    if indices.ndim < 1:
        fail(f"indices must have rank at least 1 ([M, ...]), got {indices}")
    m = indices.shape[0]
    if not isinstance(m, int):
        fail(f"the number of coordinates (the first dimension of indices {indices}) must be static")
    if m > data.ndim:
        fail(f"indices {indices} give {m} coordinates but the data {data} has rank {data.ndim}")
    if updates.dtype != data.dtype:
        fail(f"updates have dtype {updates.dtype} but the data has {data.dtype}")
    expected = indices.shape[1:] + data.shape[m:]
    if updates.ndim != len(expected) or any(provably_different(a, e) for a, e in
                                            zip(updates.shape, expected)):
        fail(f"updates {updates} must have the shape {fmt_shape(expected)} (the indices' positions, "
             f"then the data's axes after the {m} indexed ones)")
    if attrs.mode != "update" and data.dtype == "bool":
        fail(f"mode={attrs.mode!r} needs a numeric data tensor, got bool")
    return data


def _scatter_nd_ref(data, indices, updates, attrs):
    m = indices.shape[0]
    idx = indices.reshape(m, -1).astype(np.int64)
    _check_in_range(idx, data.shape[:m], "index")
    count, rest = idx.shape[1], data.shape[m:]
    flat = np.ravel_multi_index(tuple(idx), data.shape[:m]) if m else np.zeros(count, np.int64)
    upd = updates.reshape((count,) + rest)
    out = data.reshape((-1,) + rest).copy()
    if attrs.mode == "update":
        _, from_end = np.unique(flat[::-1], return_index=True)
        last = count - 1 - from_end                    # the last update of each position wins
        out[flat[last]] = upd[last]
        return out.reshape(data.shape)
    ufunc, identity = _SCATTER_REDUCTIONS[attrs.mode]
    total = np.full_like(out, identity(out.dtype))
    with np.errstate(all="ignore"):
        ufunc.at(total, flat, upd)                     # in order, from the identity, as the kernel
        out = ufunc(out, total)
    return out.reshape(data.shape)


def _highest(dtype):
    return np.finfo(dtype).max if dtype.kind == "f" else np.iinfo(dtype).max


def _lowest(dtype):
    return np.finfo(dtype).min if dtype.kind == "f" else np.iinfo(dtype).min


_SCATTER_REDUCTIONS = {"add": (np.add, lambda d: 0), "mul": (np.multiply, lambda d: 1),
                       "min": (np.minimum, _highest), "max": (np.maximum, _lowest)}
"""How scatter_nd's modes other than ``update`` combine: the ufunc and its identity."""


scatter_nd = register(OpDef(
    "scatter_nd", ("data", "indices", "updates"), scatter_nd_rel, OpPattern.OPAQUE,
    attrs={"mode": "update"},
    normalize=lambda a: dict(a, mode=_choice(a["mode"], "mode", ("update", "add", "mul", "min", "max"))),
    reference=_scatter_nd_ref, compute=C.scatter_nd_compute,
    doc="A copy of ``data`` with ``updates[y, x...]`` written at ``data[indices[0, y], ..., "
        "indices[M-1, y], x...]`` for every position ``y`` of indices ``[M, Y...]``. "
        "``mode='update'`` stores (of several updates of one place, the last in row-major order "
        "wins); ``add``, ``mul``, ``min`` and ``max`` combine the data with the sum, product, "
        "minimum or maximum of the updates of each place (reduced in that order, from the "
        "reduction's identity). Indices must be in range (the reference raises when they are "
        "not; a kernel ignores them)."))


# ---------------------------------------------------------------------------------------------
# ndarray_size, reverse

@relation("NdarraySizeRel")
def ndarray_size_rel(types, attrs):
    """``NdarraySizeRel``: a scalar of ``dtype``."""
    (data,) = types
    if not known(data):
        return None
    tensor(data, "data")
    return TensorType((), attrs.dtype)


def _ndarray_size_ref(x, attrs):
    return np.array(x.size).astype(attrs.dtype)


ndarray_size = register(OpDef(
    "ndarray_size", ("data",), ndarray_size_rel, OpPattern.INJECTIVE, attrs={"dtype": "int32"},
    normalize=_normalize_shape_dtype, reference=_ndarray_size_ref, compute=C.ndarray_size_compute,
    doc="The number of elements of ``data``, a scalar of ``dtype`` (it wraps like a cast when the "
        "count does not fit)."))


@relation("ReverseRel")
def reverse_rel(types, attrs):
    """``ReverseRel``: the data's type; ``axis`` in range."""
    (data,) = types
    if not known(data):
        return None
    data = tensor(data, "data")
    if data.ndim == 0:
        fail("cannot reverse a scalar")
    normalize_axis(attrs.axis, data.ndim)
    return data


reverse = register(OpDef(
    "reverse", ("data",), reverse_rel, OpPattern.INJECTIVE, attrs={"axis": 0},
    normalize=_normalize_axis_attr,
    reference=lambda x, attrs: np.ascontiguousarray(np.flip(x, attrs.axis)),
    compute=C.reverse_compute, doc="The data with the order along ``axis`` reversed."))


# ---------------------------------------------------------------------------------------------
# Scans and sorting: cumsum, cumprod, argsort, sort, topk (Relay's algorithm ops)

def _normalize_scan(a: dict) -> dict:
    if a["axis"] is not None:
        a["axis"] = as_int(a["axis"], "axis")
    a["dtype"] = "" if a["dtype"] in ("", None) else _dtype(a["dtype"])
    a["exclusive"] = bool(_choice(a["exclusive"] if a["exclusive"] is not None else False,
                                  "exclusive", (False, True, 0, 1)))
    return a


@relation("ScanopRel")
def scan_rel(types, attrs):
    """``ScanopRel``: the data's shape (flattened when ``axis`` is None), dtype ``dtype`` (or the
    data's)."""
    (data,) = types
    if not known(data):
        return None
    data = tensor(data, "data")
    dtype = attrs.dtype or data.dtype
    if dtype == "bool" or data.dtype == "bool":
        fail(f"a scan needs numeric tensors, got {data} (dtype {dtype})")
    if attrs.axis is None:
        return TensorType((prod(data.shape),), dtype)
    if data.ndim == 0:
        fail("cannot scan along an axis of a scalar")
    normalize_axis(attrs.axis, data.ndim)
    return TensorType(data.shape, dtype)


def _scan_reference(ufunc, identity):
    def reference(x, attrs):
        dtype = np.dtype(attrs.dtype or x.dtype)
        if attrs.axis is None:
            x, axis = x.reshape(-1), 0
        else:
            axis = attrs.axis % x.ndim
        with np.errstate(over="ignore", invalid="ignore"):
            out = ufunc.accumulate(x.astype(dtype), axis=axis, dtype=dtype)
        if attrs.exclusive:
            first = np.full_like(np.take(out, [0], axis=axis), identity)
            out = np.concatenate([first, np.take(out, np.arange(x.shape[axis] - 1), axis=axis)], axis=axis)
        return np.ascontiguousarray(out)
    return reference


cumsum = register(OpDef(
    "cumsum", ("data",), scan_rel, OpPattern.OPAQUE, attrs={"axis": None, "dtype": "", "exclusive": False},
    normalize=_normalize_scan, reference=_scan_reference(np.add, 0), compute=C.scan_compute("sum"),
    doc="Running sums along ``axis`` (of the flattened data when None), in ``dtype`` (the data's "
        "when empty; integers wrap); ``exclusive`` leaves each element out of its own sum (the "
        "first is 0)."))

cumprod = register(OpDef(
    "cumprod", ("data",), scan_rel, OpPattern.OPAQUE, attrs={"axis": None, "dtype": "", "exclusive": False},
    normalize=_normalize_scan, reference=_scan_reference(np.multiply, 1), compute=C.scan_compute("prod"),
    doc="Running products along ``axis``, like ``cumsum`` (exclusive: the first is 1)."))


def _normalize_sort(a: dict) -> dict:
    a["axis"] = as_int(a["axis"], "axis")
    a["is_ascend"] = bool(_choice(a["is_ascend"], "is_ascend", (False, True, 0, 1)))
    a["dtype"] = _dtype(a["dtype"])
    if not _int_dtype(a["dtype"]):
        raise ValueError(f"dtype must be an integer dtype (of the indices), got {a['dtype']!r}")
    if "k" in a:
        a["k"] = 0 if a["k"] is None else as_int(a["k"], "k")
        a["ret_type"] = _choice(a["ret_type"], "ret_type", ("both", "values", "indices"))
    return a


def _sort_data(types, attrs):
    (data,) = types
    if not known(data):
        return None, None
    data = tensor(data, "data")
    if data.ndim == 0:
        fail("cannot sort a scalar")
    if data.dtype == "bool":
        fail(f"sorting needs a numeric tensor, got {data}")
    return data, normalize_axis(attrs.axis, data.ndim)


@relation("ArgsortRel")
def argsort_rel(types, attrs):
    """``ArgsortRel``: the data's shape, dtype ``dtype``."""
    data, _ = _sort_data(types, attrs)
    return None if data is None else TensorType(data.shape, attrs.dtype)


@relation("SortRel")
def sort_rel(types, attrs):
    """The data's type; ``axis`` in range."""
    data, _ = _sort_data(types, attrs)
    return data


@relation("TopKRel")
def topk_rel(types, attrs):
    """``TopKRel``: ``axis`` becomes ``k`` (all of it when ``k < 1``); ``ret_type`` ``both`` gives
    the tuple (values, indices of ``dtype``)."""
    data, axis = _sort_data(types, attrs)
    if data is None:
        return None
    shape = list(data.shape)
    if attrs.k >= 1:
        if isinstance(shape[axis], int) and attrs.k > shape[axis]:
            fail(f"k={attrs.k} is larger than the extent {shape[axis]} of axis {attrs.axis}")
        shape[axis] = attrs.k
    values, indices = TensorType(shape, data.dtype), TensorType(shape, attrs.dtype)
    return {"both": TupleType([values, indices]), "values": values, "indices": indices}[attrs.ret_type]


def _stable_order(x, axis: int, ascending: bool):
    """Positions that sort ``x`` along ``axis``, equal elements kept in their order (stable in
    both directions)."""
    if ascending:
        return np.argsort(x, axis=axis, kind="stable")
    n = x.shape[axis]
    flipped = np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
    return n - 1 - flipped


def _argsort_ref(x, attrs):
    axis = attrs.axis % x.ndim
    return _stable_order(x, axis, attrs.is_ascend).astype(attrs.dtype)


def _sort_ref(x, attrs):
    axis = attrs.axis % x.ndim
    return np.take_along_axis(x, _stable_order(x, axis, attrs.is_ascend), axis)


def _topk_ref(x, attrs):
    axis = attrs.axis % x.ndim
    order = _stable_order(x, axis, attrs.is_ascend)
    if attrs.k >= 1:
        order = np.take(order, np.arange(attrs.k), axis=axis)
    values, indices = np.take_along_axis(x, order, axis), order.astype(attrs.dtype)
    return {"both": (values, indices), "values": values, "indices": indices}[attrs.ret_type]


_SORT_DOC = ("Equal elements keep their order (a stable sort, in both directions); NaNs have no "
             "defined place.")

argsort = register(OpDef(
    "argsort", ("data",), argsort_rel, OpPattern.OPAQUE,
    attrs={"axis": -1, "is_ascend": True, "dtype": "int32"}, normalize=_normalize_sort,
    reference=_argsort_ref, compute=C.argsort_compute,
    doc="The positions that sort ``data`` along ``axis`` (ascending unless ``is_ascend`` is "
        "False), as ``dtype``. " + _SORT_DOC))

sort = register(OpDef(
    "sort", ("data",), sort_rel, OpPattern.OPAQUE,
    attrs={"axis": -1, "is_ascend": True, "dtype": "int32"}, normalize=_normalize_sort,
    reference=_sort_ref, compute=C.sort_compute,
    doc="``data`` sorted along ``axis`` (ascending unless ``is_ascend`` is False). " + _SORT_DOC))

topk = register(OpDef(
    "topk", ("data",), topk_rel, OpPattern.OPAQUE,
    attrs={"k": 1, "axis": -1, "ret_type": "both", "is_ascend": False, "dtype": "int32"},
    normalize=_normalize_sort, reference=_topk_ref, compute=C.topk_compute,
    doc="The ``k`` largest elements along ``axis`` (smallest with ``is_ascend``; all when "
        "``k < 1``) in order, and their positions as ``dtype``: ``ret_type`` ``both`` gives the "
        "tuple (values, indices), ``values`` or ``indices`` one of them. " + _SORT_DOC))


# ---------------------------------------------------------------------------------------------
# broadcast_to_like, slice_like

@relation("BroadCastToLikeRel")
def broadcast_to_like_rel(types, attrs):
    """``BroadCastToLikeRel``: ``broadcast_type``'s shape and the data's dtype, when the data
    broadcasts to that shape."""
    data, like = types
    if not (known(data) and known(like)):
        return None
    data, like = tensor(data, "data"), tensor(like, "broadcast_type")
    shape = tuple(like.shape)
    if data.ndim > len(shape):
        fail(f"cannot broadcast {data} to {like}: the data has more dimensions")
    offset = len(shape) - data.ndim
    for i, d in enumerate(data.shape):
        if d != 1 and provably_different(d, shape[offset + i]):
            fail(f"cannot broadcast {data} to {like}: dimension {i} has extent {format_dim(d)}, "
                 f"neither 1 nor {format_dim(shape[offset + i])}")
    return TensorType(shape, data.dtype)


broadcast_to_like = register(OpDef(
    "broadcast_to_like", ("data", "broadcast_type"), broadcast_to_like_rel, OpPattern.BROADCAST,
    reference=lambda x, like, attrs: np.array(np.broadcast_to(x, like.shape), order="C"),
    compute=C.broadcast_to_like_compute,
    doc="``data`` broadcast (numpy's rules) to the shape of ``broadcast_type``, whose values are "
        "not read."))


def _normalize_slice_like(a: dict) -> dict:
    if a["axes"] is not None:
        axes = a["axes"] if isinstance(a["axes"], tuple) else (a["axes"],)
        a["axes"] = tuple(as_int(x, "axes") for x in axes)
    return a


def _slice_like_shape(data: TensorType, like: TensorType, attrs) -> tuple:
    shape = list(data.shape)
    if attrs.axes is None or not attrs.axes:
        axes = range(min(data.ndim, like.ndim))
    else:
        axes = [normalize_axis(a, data.ndim, "axes entry") for a in attrs.axes]
    for a in axes:
        if a >= like.ndim:
            fail(f"axis {a} is past the rank {like.ndim} of shape_like {like}")
        d, t = data.shape[a], like.shape[a]
        if isinstance(d, int) and isinstance(t, int) and t > d:
            fail(f"shape_like {like} is larger than the data {data} along axis {a}")
        shape[a] = t
    return tuple(shape)


@relation("SliceLikeRel")
def slice_like_rel(types, attrs):
    """``SliceLikeRel``: the data's shape with each of ``axes`` (all the axes both have when
    None) cut to ``shape_like``'s extent, from the start."""
    data, like = types
    if not (known(data) and known(like)):
        return None
    data, like = tensor(data, "data"), tensor(like, "shape_like")
    return TensorType(_slice_like_shape(data, like, attrs), data.dtype)


def _slice_like_ref(x, like, attrs):
    shape = _slice_like_shape(TensorType(x.shape, x.dtype.name), TensorType(like.shape, like.dtype.name),
                              attrs)
    return np.array(x[tuple(slice(0, e) for e in shape)], order="C")


slice_like = register(OpDef(
    "slice_like", ("data", "shape_like"), slice_like_rel, OpPattern.INJECTIVE, attrs={"axes": None},
    normalize=_normalize_slice_like, reference=_slice_like_ref, compute=C.slice_like_compute,
    doc="The leading part of ``data`` with the extents of ``shape_like`` (only its type is read) "
        "along ``axes`` (every axis both tensors have when None)."))


# ---------------------------------------------------------------------------------------------
# einsum, scatter_elements

__all__ += ["einsum", "scatter_elements"]


def _parse_einsum(equation: str, ranks: list) -> tuple:
    """``(operand subscripts, output subscripts)`` of an einsum equation, each a list of letters
    with ``'...'`` standing for the broadcast axes; an implicit output is the ellipsis followed by
    the letters used once, in alphabetical order (numpy's rule)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        fail(f"equation {equation!r} has {len(terms)} operand(s) but {len(ranks)} are given")

    def letters(term: str, where: str) -> list:
        out, rest = [], term
        while rest:
            if rest.startswith("..."):
                if "..." in out:
                    fail(f"{where} of {equation!r} has two ellipses")
                out.append("...")
                rest = rest[3:]
            elif rest[0].isalpha():
                out.append(rest[0])
                rest = rest[1:]
            else:
                fail(f"{where} of {equation!r} has the character {rest[0]!r}")
        return out

    subs = [letters(t, f"operand {i}") for i, t in enumerate(terms)]
    for i, (s, r) in enumerate(zip(subs, ranks)):
        named = len(s) - ("..." in s)
        if ("..." in s and named > r) or ("..." not in s and named != r):
            fail(f"operand {i} has rank {r} but its subscripts {terms[i]!r} name {named} axes")
    if arrow:
        out = letters(rhs, "the output")
    else:
        counts: dict = {}
        for s in subs:
            for c in s:
                if c != "...":
                    counts[c] = counts.get(c, 0) + 1
        out = (["..."] if any("..." in s for s in subs) else []) + sorted(
            c for c, n in counts.items() if n == 1)
    return subs, out


@relation("EinsumRel")
def einsum_rel(types, attrs):
    """``EinsumRel``: each letter of the equation is one extent shared by every axis it names
    (an extent of 1 broadcasts); the ellipsis axes broadcast as numpy's."""
    (tup,) = types
    if not known_deep(tup):
        return None
    if not isinstance(tup, TupleType) or not tup.fields:
        fail(f"the input must be a non-empty tuple of tensors, got {tup}")
    fields = [tensor(f, f"operand {i}") for i, f in enumerate(tup.fields)]
    for i, f in enumerate(fields[1:], start=1):
        if f.dtype != fields[0].dtype:
            fail(f"operand {i} has dtype {f.dtype} but operand 0 has {fields[0].dtype}")
    subs, out = _parse_einsum(attrs.equation, [f.ndim for f in fields])
    extents: dict = {}
    ellipsis: list = []
    for i, (s, f) in enumerate(zip(subs, fields)):
        n_ell = f.ndim - (len(s) - ("..." in s))
        pos = 0
        for c in s:
            if c == "...":
                dims = list(f.shape[pos:pos + n_ell])
                pad = len(dims) - len(ellipsis)
                merged = list(dims[:pad]) if pad > 0 else list(ellipsis[:-pad] if pad else [])
                for a, b in zip(ellipsis[max(0, -pad):], dims[max(0, pad):]):
                    merged.append(b if a == 1 else a if b == 1 or not provably_different(a, b) else
                                  fail(f"operand {i}: ellipsis axes {fmt_shape(dims)} do not "
                                       f"broadcast with {fmt_shape(ellipsis)}"))
                ellipsis = merged
                pos += n_ell
                continue
            d = f.shape[pos]
            seen = extents.get(c)
            if seen is None or seen == 1:
                extents[c] = d
            elif d != 1 and provably_different(seen, d):
                fail(f"subscript {c!r} is {format_dim(seen)} in one operand but {format_dim(d)} in "
                     f"operand {i}")
            pos += 1
    shape = []
    for c in out:
        if c == "...":
            shape.extend(ellipsis)
        elif c not in extents:
            fail(f"the output subscript {c!r} names no operand axis")
        else:
            shape.append(extents[c])
    return TensorType(shape, fields[0].dtype)


def _einsum_ref(data, attrs):
    return np.asarray(np.einsum(attrs.equation, *data, optimize=len(data) > 2))


einsum = register(OpDef(
    "einsum", ("data",), einsum_rel, OpPattern.OPAQUE, attrs={"equation": ""},
    normalize=lambda a: dict(a, equation=str(a["equation"])), reference=_einsum_ref,
    doc="Einstein summation of a tuple of tensors (numpy's ``einsum``): ``'ij,jk->ik'`` is a "
        "matrix product; repeated letters of one operand take its diagonal, letters missing "
        "from the output are summed, ``...`` stands for broadcast axes."))


def _normalize_scatter_elements(a: dict) -> dict:
    a["axis"] = as_int(a["axis"], "axis")
    a["reduction"] = _choice(a["reduction"], "reduction", ("update", "add", "mul", "min", "max"))
    return a


@relation("ScatterElementsRel")
def scatter_elements_rel(types, attrs):
    """``ScatterElementsRel``: integer indices and updates of one shape, of the data's rank;
    the output has the data's type."""
    data, indices, updates = types
    if not (known(data) and known(indices) and known(updates)):
        return None
    data, indices = tensor(data, "data"), _index_tensor(indices)
    updates = tensor(updates, "updates")
    normalize_axis(attrs.axis, max(data.ndim, 1))
    if indices.ndim != data.ndim:
        fail(f"indices {indices} must have the data's rank {data.ndim}")
    if updates.dtype != data.dtype:
        fail(f"updates {updates} must have the data's dtype {data.dtype}")
    if updates.ndim != indices.ndim or any(provably_different(a, b)
                                          for a, b in zip(updates.shape, indices.shape)):
        fail(f"updates {updates} must have the shape of the indices {indices}")
    return data


def _scatter_elements_ref(data, indices, updates, attrs):
    axis = attrs.axis % data.ndim
    idx = indices.astype(np.int64)
    _check_in_range(idx[None], (data.shape[axis],), "index")
    out = data.copy()
    grid = list(np.indices(idx.shape, sparse=False))
    grid[axis] = idx
    where = tuple(g.reshape(-1) for g in grid)
    values = updates.reshape(-1)
    if attrs.reduction == "update":
        out[where] = values      # numpy keeps the last of repeated places, in row-major order
    else:
        ufunc = {"add": np.add, "mul": np.multiply, "min": np.minimum, "max": np.maximum}
        ufunc[attrs.reduction].at(out, where, values)
    return out


scatter_elements = register(OpDef(
    "scatter_elements", ("data", "indices", "updates"), scatter_elements_rel, OpPattern.OPAQUE,
    attrs={"axis": 0, "reduction": "update"}, normalize=_normalize_scatter_elements,
    reference=_scatter_elements_ref,
    doc="A copy of ``data`` with ``updates[i, j, ...]`` stored at the place whose coordinate along "
        "``axis`` is ``indices[i, j, ...]`` and whose other coordinates are ``i, j, ...`` "
        "(ONNX's ScatterElements). ``reduction`` ``add``, ``mul``, ``min`` or ``max`` combines "
        "the data with each update instead of storing it."))
