"""Shape-transforming operators: reshape, transpose, concatenate, split.

>>> import relaybench as rb
>>> from relaybench.ir.type_infer import infer_expr
>>> x = rb.var("x", shape=(2, 3, 4))
>>> infer_expr(reshape(x, newshape=(0, -1))), infer_expr(transpose(x, axes=(1, 0, 2)))
(Tensor[(2, 12), float32], Tensor[(3, 2, 4), float32])
>>> infer_expr(split(x, indices_or_sections=(1, 3), axis=2))
(Tensor[(2, 3, 1), float32], Tensor[(2, 3, 2), float32], Tensor[(2, 3, 1), float32])
"""

from __future__ import annotations

import numpy as np

from ..ir.symbolic import ANY, add, floordiv, format_dim, mul, prod, sub
from ..ir.types import TensorType, TupleType
from ._rel import (as_int, fail, fmt_shape, known, known_deep, normalize_axis, provably_different,
                   relation, tensor)
from .registry import OpDef, OpPattern, register

__all__ = ["reshape", "transpose", "concatenate", "split", "infer_reshape"]


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


def _infer_minus_one(ishape, known: list):
    """The extent of a ``-1``: the input's size over the other output dims.

    Equal factors cancel first, so symbolic extents divide exactly: ``(n, 3, 4)`` reshaped to
    ``(0, -1)`` gives ``12``, not an undetermined quotient of ``12*n`` by ``n``.
    """
    rest = list(ishape)
    leftover = []
    for d in known:
        for i, f in enumerate(rest):
            if f == d and d is not ANY:
                del rest[i]
                break
        else:
            leftover.append(d)
    return _exact_div(prod(rest), prod(leftover))


def infer_reshape(ishape, newshape, allowzero: int = 0) -> tuple:
    """The output shape of ``reshape(x, newshape)`` for an input of shape ``ishape``.

    Special values, as in Relay: ``0`` copies the input dimension at that position (a literal 0
    when ``allowzero``), ``-1`` is inferred from the rest, ``-2`` copies all remaining dimensions,
    ``-3`` merges the next two input dimensions, ``-4`` splits one input dimension into the next
    two values of ``newshape`` (one of which may be ``-1``). Raises ValueError when the sizes do
    not match.

    >>> infer_reshape((2, 3, 4), (-4, 1, 2, -3))
    (1, 2, 12)
    >>> infer_reshape((6, 4), (-1, 2))
    (12, 2)
    """
    ishape = tuple(ishape)
    out: list = []
    infer_at = None
    src = 0
    j = 0

    def need(k):
        if src + k > len(ishape):
            raise ValueError(f"newshape {fmt_shape(newshape)} uses more input dimensions than the "
                             f"input's {len(ishape)}")

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
                out.append(ishape[src])
            src += 1
        elif v == -1:
            if infer_at is not None:
                raise ValueError("newshape can hold only one -1")
            infer_at = len(out)
            out.append(1)
            src += 1
        elif v == -2:
            out.extend(ishape[src:])
            src = len(ishape)
        elif v == -3:
            need(2)
            out.append(mul(ishape[src], ishape[src + 1]))
            src += 2
        elif v == -4:
            if j + 2 >= len(newshape):
                raise ValueError("-4 must be followed by two values")
            need(1)
            whole = ishape[src]
            d0, d1 = newshape[j + 1], newshape[j + 2]
            j += 2
            if d0 == -1 and d1 == -1:
                raise ValueError("-4 splits into two values, at most one of them -1")
            if d0 == -1:
                d0 = _exact_div(whole, d1)
            elif d1 == -1:
                d1 = _exact_div(whole, d0)
            elif provably_different(mul(d0, d1), whole):
                raise ValueError(f"-4 splits dimension {format_dim(whole)} into {d0} * {d1}")
            out.extend([d0, d1])
            src += 1
        else:
            raise ValueError(f"invalid value {v} in newshape")
        j += 1
    total = prod(ishape)
    if infer_at is not None:
        out[infer_at] = _infer_minus_one(ishape, [d for i, d in enumerate(out) if i != infer_at])
    elif provably_different(total, prod(out)):
        raise ValueError(f"{format_dim(total)} elements vs {format_dim(prod(out))}")
    return tuple(out)


def _normalize_reshape(a: dict) -> dict:
    ns = a["newshape"]
    ns = tuple(as_int(v, "newshape", minimum=-4) for v in (ns if isinstance(ns, (list, tuple)) else (ns,)))
    a["newshape"] = ns
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
    doc="Reshape; ``newshape`` may use Relay's special values 0, -1, -2, -3 and -4."))


# ---------------------------------------------------------------------------------------------
# transpose

def _normalize_transpose(a: dict) -> dict:
    if a["axes"] is not None:
        axes = a["axes"]
        a["axes"] = tuple(as_int(v, "axes") for v in (axes if isinstance(axes, (list, tuple)) else (axes,)))
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
    reference=lambda x, attrs: np.transpose(x, attrs.axes),
    doc="Permute the axes; ``axes=None`` reverses them."))


# ---------------------------------------------------------------------------------------------
# concatenate

def _normalize_axis_attr(a: dict) -> dict:
    a["axis"] = as_int(a["axis"], "axis")
    return a


@relation("ConcatenateRel")
def concatenate_rel(types, attrs):
    """``ConcatenateRel``: a tuple of tensors of one dtype and rank, equal except along ``axis``."""
    (tup,) = types
    if not known_deep(tup):
        return None
    if not isinstance(tup, TupleType):
        fail(f"the input must be a tuple of tensors, got {tup}")
    if not tup.fields:
        fail("the input tuple is empty: nothing to concatenate")
    fields = [tensor(f, f"field {i} of the input") for i, f in enumerate(tup.fields)]
    first = fields[0]
    if first.ndim == 0:
        fail("cannot concatenate scalars")
    axis = normalize_axis(attrs.axis, first.ndim)
    out = list(first.shape)
    for i, f in enumerate(fields[1:], start=1):
        if f.dtype != first.dtype:
            fail(f"field {i} has dtype {f.dtype} but field 0 has {first.dtype}")
        if f.ndim != first.ndim:
            fail(f"field {i} has rank {f.ndim} but field 0 has rank {first.ndim}")
        for d, b in enumerate(f.shape):
            if d == axis:
                continue
            a = out[d]
            if a == b or b is ANY:
                continue
            if a is ANY:
                out[d] = b
                continue
            fail(f"field {i} has shape {fmt_shape(f.shape)} but field 0 has {fmt_shape(first.shape)}: "
                 f"dimension {d} differs ({format_dim(a)} vs {format_dim(b)})")
    total = 0
    for f in fields:
        total = add(total, f.shape[axis])
    out[axis] = total
    return TensorType(out, first.dtype)


concatenate = register(OpDef(
    "concatenate", ("data",), concatenate_rel, OpPattern.INJECTIVE, attrs={"axis": 0},
    normalize=_normalize_axis_attr,
    reference=lambda data, attrs: np.concatenate(list(data), axis=attrs.axis),
    doc="Join a tuple of tensors along ``axis``."))


# ---------------------------------------------------------------------------------------------
# split

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


split = register(OpDef(
    "split", ("data",), split_rel, OpPattern.INJECTIVE,
    attrs={"indices_or_sections": 1, "axis": 0}, normalize=_normalize_split,
    reference=lambda x, attrs: tuple(np.split(x, attrs.indices_or_sections if isinstance(
        attrs.indices_or_sections, int) else list(attrs.indices_or_sections), axis=attrs.axis)),
    doc="Split along ``axis`` into ``sections`` equal parts or at the given ``indices``."))
