"""Reductions: sum, mean, max, min, prod, all, any, argmax, argmin, variance.

>>> import relaybench as rb
>>> from relaybench.ir.type_infer import infer_expr
>>> x = rb.var("x", shape=("n", 3, 4))
>>> infer_expr(sum(x, axis=1)), infer_expr(mean(x, axis=(1, 2), keepdims=True))
(Tensor[(n, 4), float32], Tensor[(n, 1, 1), float32])
>>> infer_expr(max(x, axis=0, exclude=True)), infer_expr(argmax(x, axis=-1))
(Tensor[(n), float32], Tensor[(n, 3), int32])
>>> print(rb.Function([x], variance(x, axis=2)).astext(show_types=False))
fn (%x: Tensor[(n, 3, 4), float32]) {
  %0 = mean(%x, axis=[2], keepdims=True);
  variance(%x, %0, axis=[2])
}

Every reduction takes Relay's ``axis=None, keepdims=False, exclude=False``: ``axis`` is an int or
a list of ints (negative ones count from the end); ``None`` (or an empty list, as in Relay)
reduces every axis and then ``exclude`` has no effect; with ``exclude=True`` the axes *not* listed
are reduced; ``keepdims=True`` leaves each reduced axis in place with extent 1. Dimensions that
are not reduced keep their symbolic extents.

Integer sums and products accumulate in the input's dtype and wrap around, as TVM's kernels do;
the integer ``mean`` (and ``variance``) divides with truncation toward zero.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.types import TensorType
from ..ir.symbolic import ANY, format_dim
from ._layout import reduce_layout
from ._rel import as_int, fail, known, relation, same_dim, tensor
from . import _compute as C
from .registry import OpCaller, OpDef, OpPattern, register
from .tensor import ANY_DTYPE, BOOL, NUMERIC, require

# ``sum``, ``max``, ``min``, ``all`` and ``any`` below are operators, not Python's builtins.
__all__ = ["sum", "mean", "max", "min", "prod", "all", "any", "argmax", "argmin", "variance", "std",
           "reduce_axes", "reduce_shape", "collapse_sum_like", "collapse_sum_to"]


# ---------------------------------------------------------------------------------------------
# Axes and shapes

def reduce_axes(ndim: int, axis, exclude: bool) -> tuple:
    """The sorted axes a reduction over ``axis`` reduces in a tensor of rank ``ndim``.

    Fails (a TypeInferenceError) when an axis is out of range or named twice.

    >>> reduce_axes(4, (-1, 1), False), reduce_axes(4, (-1, 1), True), reduce_axes(2, None, True)
    ((1, 3), (0, 2), (0, 1))
    """
    if axis is None:
        return tuple(range(ndim))
    seen: list = []
    for a in axis:
        if not -ndim <= a < ndim:
            fail(f"axis {a} is out of range for rank {ndim}")
        a = a + ndim if a < 0 else a
        if a in seen:
            fail(f"axis {list(axis)} names axis {a} twice")
        seen.append(a)
    if exclude:
        return tuple(i for i in range(ndim) if i not in seen)
    return tuple(sorted(seen))


def reduce_shape(shape, axes, keepdims: bool) -> tuple:
    """``shape`` with ``axes`` removed, or set to 1 when ``keepdims``."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _as_bool(value, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ValueError(f"{name} must be True or False, got {value!r}")


def _normalize_reduce(a: dict) -> dict:
    axis = a["axis"]
    if axis is not None:
        axis = tuple(as_int(v, "axis") for v in (axis if isinstance(axis, (list, tuple)) else (axis,)))
    a["axis"] = axis or None          # Relay: an empty list reduces every axis, like None
    for flag in ("keepdims", "exclude", "select_last_index", "unbiased"):
        if flag in a:
            a[flag] = _as_bool(a[flag], flag)
    return a


# ---------------------------------------------------------------------------------------------
# Relations

def _reduce_relation(kind, name: str = "ReduceRel", out_dtype=None, what_of_nothing=None):
    @relation(name)
    def rel(types, attrs):
        (data,) = types
        if not known(data):
            return None
        data = require(data, "data", kind)
        axes = reduce_axes(data.ndim, attrs.axis, attrs.exclude)
        if what_of_nothing:
            for i in axes:
                if data.shape[i] == 0:
                    fail(f"axis {i} of {data} is empty, and the {what_of_nothing} of no elements "
                         "is undefined")
        return TensorType(reduce_shape(data.shape, axes, attrs.keepdims), out_dtype or data.dtype)
    rel.__doc__ = (f"``{name}``: the data's shape without the reduced axes (or with extent 1 there "
                   f"when keepdims); {out_dtype or 'the data'}'s dtype.")
    return rel


@relation("VarianceRel")
def _variance_rel(types, attrs):
    """``VarianceRel``: like ReduceRel; ``mean`` has the data's rank and broadcasts to it."""
    data, mean_ = types
    if not (known(data) and known(mean_)):
        return None
    data = require(data, "data", NUMERIC)
    mean_ = tensor(mean_, "mean")
    if mean_.dtype != data.dtype:
        fail(f"mean has dtype {mean_.dtype} but data has {data.dtype}")
    if mean_.ndim != data.ndim:
        fail(f"mean {mean_} must have the rank of data {data} (a mean taken with keepdims=True)")
    for i, (m, d) in enumerate(zip(mean_.shape, data.shape)):
        if not (m == 1 or m is ANY or same_dim(m, d)):
            fail(f"mean {mean_} does not broadcast to data {data}: dimension {i} is "
                 f"{format_dim(m)}, not 1 or {format_dim(d)}")
    axes = reduce_axes(data.ndim, attrs.axis, attrs.exclude)
    return TensorType(reduce_shape(data.shape, axes, attrs.keepdims), data.dtype)


# ---------------------------------------------------------------------------------------------
# References

def _axes(x, attrs) -> tuple:
    return reduce_axes(x.ndim, attrs.axis, attrs.exclude)


def _reducer(func, **kwargs):
    """A reference from ``func(x, axis=..., keepdims=..., **kwargs)``; ``dtype=True`` in kwargs
    means "accumulate in the input's dtype"."""
    def reference(x, attrs):
        extra = {k: (x.dtype if v is True else v) for k, v in kwargs.items()}
        with np.errstate(all="ignore"):
            return np.asarray(func(x, axis=_axes(x, attrs), keepdims=attrs.keepdims, **extra))
    return reference


def _divide_by_count(total, count: int, dtype):
    """``total / count`` in ``dtype``: truncated for integers (0 when count is 0)."""
    with np.errstate(all="ignore"):
        kind = np.dtype(dtype).kind
        if kind in "iu":
            if count <= 0:
                return np.zeros_like(total, dtype=dtype)
            wide = total.astype(np.int64 if kind == "i" else np.uint64)
            c = wide.dtype.type(count)
            return np.asarray((wide - np.fmod(wide, c)) // c).astype(dtype)
        return np.asarray(total / count).astype(dtype)


def _accumulator(dtype):
    return np.float32 if dtype == np.float16 else dtype


def _mean(x, attrs):
    axes = _axes(x, attrs)
    with np.errstate(all="ignore"):
        total = np.sum(x, axis=axes, keepdims=attrs.keepdims, dtype=_accumulator(x.dtype))
    return _divide_by_count(np.asarray(total), math.prod(x.shape[i] for i in axes), x.dtype)


def _variance(x, m, attrs):
    axes = _axes(x, attrs)
    with np.errstate(all="ignore"):
        diff = x - m
        total = np.sum(diff * diff, axis=axes, keepdims=attrs.keepdims, dtype=_accumulator(x.dtype))
    count = math.prod(x.shape[i] for i in axes) - (1 if attrs.unbiased else 0)
    return _divide_by_count(np.asarray(total), count, x.dtype)


def _arg_reducer(pick):
    """argmax/argmin over any set of axes: the index into the reduced axes flattened row-major."""
    def reference(x, attrs):
        axes = _axes(x, attrs)
        kept = [i for i in range(x.ndim) if i not in axes]
        size = math.prod(x.shape[i] for i in axes)
        flat = np.transpose(x, kept + list(axes)).reshape([x.shape[i] for i in kept] + [size])
        if attrs.select_last_index:
            index = size - 1 - pick(flat[..., ::-1], axis=-1)
        else:
            index = pick(flat, axis=-1)
        out_shape = reduce_shape(x.shape, axes, attrs.keepdims)
        return np.asarray(index, dtype=np.int32).reshape(out_shape)
    return reference


# ---------------------------------------------------------------------------------------------
# The operators (kCommReduce)

_REDUCE_ATTRS = {"axis": None, "keepdims": False, "exclude": False}


def _reduce(name: str, rel, reference, doc: str, attrs=_REDUCE_ATTRS, inputs=("data",), layout=None):
    return register(OpDef(name, inputs, rel, OpPattern.COMM_REDUCE, attrs=dict(attrs),
                          normalize=_normalize_reduce, reference=reference,
                          compute=C.REDUCE_COMPUTES.get(name), layout=layout, doc=doc))


sum = _reduce("sum", _reduce_relation(NUMERIC), _reducer(np.sum, dtype=True),  # noqa: A001
              "Sum over ``axis``; integers accumulate in their own dtype.", layout=reduce_layout)
prod = _reduce("prod", _reduce_relation(NUMERIC), _reducer(np.prod, dtype=True),
               "Product over ``axis``; integers accumulate in their own dtype.", layout=reduce_layout)
mean = _reduce("mean", _reduce_relation(NUMERIC), _mean,
               "Arithmetic mean over ``axis``; integer means truncate toward zero.", layout=reduce_layout)
max = _reduce("max", _reduce_relation(ANY_DTYPE, what_of_nothing="max"),  # noqa: A001
              _reducer(np.max), "Maximum over ``axis``.", layout=reduce_layout)
min = _reduce("min", _reduce_relation(ANY_DTYPE, what_of_nothing="min"),  # noqa: A001
              _reducer(np.min), "Minimum over ``axis``.", layout=reduce_layout)
all = _reduce("all", _reduce_relation(BOOL), _reducer(np.all),  # noqa: A001
              "Logical AND over ``axis`` of a bool tensor (True over no elements).", layout=reduce_layout)
any = _reduce("any", _reduce_relation(BOOL), _reducer(np.any),  # noqa: A001
              "Logical OR over ``axis`` of a bool tensor (False over no elements).", layout=reduce_layout)

_ARG_ATTRS = {"axis": None, "keepdims": False, "exclude": False, "select_last_index": False}

argmax = _reduce("argmax", _reduce_relation(ANY_DTYPE, "ArgReduceRel", "int32", "argmax"),
                 _arg_reducer(np.argmax),
                 "Index (int32) of the maximum over ``axis``, the first one unless "
                 "``select_last_index``; over several axes, the index into them flattened "
                 "row-major.", _ARG_ATTRS)
argmin = _reduce("argmin", _reduce_relation(ANY_DTYPE, "ArgReduceRel", "int32", "argmin"),
                 _arg_reducer(np.argmin),
                 "Index (int32) of the minimum over ``axis``, the first one unless "
                 "``select_last_index``; over several axes, the index into them flattened "
                 "row-major.", _ARG_ATTRS)

_variance_op = _reduce(
    "variance", _variance_rel, _variance,
    "Mean of ``(data - mean)**2`` over ``axis`` (divided by ``n - 1`` when ``unbiased``); "
    "``mean`` is the data's mean over the same axes taken with ``keepdims=True``.",
    dict(_REDUCE_ATTRS, unbiased=False), inputs=("data", "mean"))
_mean_op = mean


def variance(data, mean=None, axis=None, keepdims=False, exclude=False, unbiased=False):
    """Relay's ``variance``: the ``variance`` operator applied to ``data`` and its mean.

    Left out, ``mean`` is ``mean(data, axis, keepdims=True, exclude)``, as Relay's Python API
    builds it.
    """
    if mean is None:
        mean = _mean_op(data, axis=axis, keepdims=True, exclude=exclude)
    return _variance_op(data, mean, axis=axis, keepdims=keepdims, exclude=exclude,
                        unbiased=unbiased)


variance.opdef = _variance_op.opdef


def std(data, mean=None, axis=None, keepdims=False, exclude=False, unbiased=False):
    """Relay's ``std``: ``sqrt(variance(...))`` (a composition, not an operator of its own)."""
    from .tensor import sqrt
    return sqrt(variance(data, mean, axis=axis, keepdims=keepdims, exclude=exclude,
                         unbiased=unbiased))


# ---------------------------------------------------------------------------------------------
# collapse_sum_like, collapse_sum_to: the sums that undo a broadcast (gradients of broadcasts)

def _collapsed_axes(shape, target) -> tuple:
    """The axes of ``shape`` that broadcasting ``target`` to it added or widened: the leading
    extra axes, and those where ``target`` has 1 and ``shape`` does not."""
    lead = len(shape) - len(target)
    return tuple(range(lead)) + tuple(lead + i for i, t in enumerate(target)
                                      if t == 1 and shape[lead + i] != 1)


def _collapse_check(data: TensorType, target: tuple, what: str):
    if len(target) > data.ndim:
        fail(f"{what} has more axes than the data {data}")
    lead = data.ndim - len(target)
    for i, t in enumerate(target):
        d = data.shape[lead + i]
        if t != 1 and not same_dim(t, d):
            fail(f"{what} does not broadcast to the data {data} (axis {lead + i}: "
                 f"{format_dim(t)} vs {format_dim(d)})")


def fmt(shape) -> str:
    return "(" + ", ".join(format_dim(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


@relation("CollapseSumLikeRel")
def collapse_sum_like_rel(types, attrs):
    """``CollapseSumLikeRel``: the output has ``collapse_type``'s type, whose shape must broadcast
    to the data's (and whose dtype must be the data's)."""
    data, like = types
    if not (known(data) and known(like)):
        return None
    data, like = require(data, "data", NUMERIC), tensor(like, "collapse_type")
    if like.dtype != data.dtype:
        fail(f"collapse_type {like} has another dtype than the data {data}")
    _collapse_check(data, tuple(like.shape), f"collapse_type {like}")
    return like


def _collapse_sum(x, target):
    axes = _collapsed_axes(x.shape, target)
    with np.errstate(all="ignore"):
        total = np.sum(x, axis=axes, dtype=x.dtype, keepdims=True) if axes else x
    return np.array(np.asarray(total).reshape(target), order="C")  # a scalar stays 0-d


collapse_sum_like = register(OpDef(
    "collapse_sum_like", ("data", "collapse_type"), collapse_sum_like_rel, OpPattern.COMM_REDUCE,
    reference=lambda x, like, attrs: _collapse_sum(x, like.shape), compute=C.collapse_sum_compute,
    doc="Sum ``data`` down to the shape of ``collapse_type`` (only its type is read): over the "
        "leading axes ``collapse_type`` lacks and the axes where it has extent 1; the gradient "
        "of a broadcast. Integer sums wrap in the dtype."))


def _normalize_collapse_sum_to(a: dict) -> dict:
    if a["shape"] is not None:
        shape = a["shape"] if isinstance(a["shape"], tuple) else (a["shape"],)
        a["shape"] = tuple(as_int(d, "shape", minimum=0) for d in shape)
    return a


@relation("CollapseSumToRel")
def collapse_sum_to_rel(types, attrs):
    """``CollapseSumToRel``: the output is ``shape`` (the attribute; the second input is the same
    shape as a 1-d integer tensor), which must broadcast to the data's shape."""
    data, shape = types
    if not known(data):
        return None
    data = require(data, "data", NUMERIC)
    if attrs.shape is None:
        fail("shape is not a constant: collapse_sum_to needs the target shape as its attribute")
    target = tuple(attrs.shape)
    vec = TensorType((len(target),), "int32")
    if known(shape):
        shape = tensor(shape, "shape")
        if (shape.ndim != 1 or not same_dim(shape.shape[0], len(target))
                or not shape.dtype.startswith(("int", "uint"))):
            fail(f"the shape input must be a 1-d integer tensor of {len(target)} values, got {shape}")
        vec = shape
    _collapse_check(data, target, f"shape {fmt(target)}")
    return [data, vec, TensorType(target, data.dtype)]


class _CollapseSumToCaller(OpCaller):
    """``collapse_sum_to(data, shape)``: a tuple ``shape`` becomes the constant second input and
    the ``shape`` attribute, as Relay's builder makes it."""

    def __call__(self, data, shape, **attrs):
        from ..ir.expr import Constant
        if isinstance(shape, (list, tuple)):
            attrs.setdefault("shape", tuple(shape))
            shape = Constant(np.array(list(shape), dtype="int32").reshape(len(shape)))
        return super().__call__(data, shape, **attrs)


collapse_sum_to = _CollapseSumToCaller(register(OpDef(
    "collapse_sum_to", ("data", "shape"), collapse_sum_to_rel, OpPattern.COMM_REDUCE,
    attrs={"shape": None}, normalize=_normalize_collapse_sum_to,
    reference=lambda x, shape, attrs: _collapse_sum(x, tuple(attrs.shape)),
    compute=C.collapse_sum_compute,
    doc="Sum ``data`` down to ``shape`` (which must broadcast to the data's shape), as "
        "``collapse_sum_like``. The shape is the attribute; the second input holds it as a 1-d "
        "integer tensor, as Relay passes it.")).opdef)
