"""Building tensor expressions: placeholders, computes, reductions, selects, casts, intrinsics.

``compute(shape, fcompute)`` calls ``fcompute`` with one index variable per output dimension (named
after its parameters) and keeps the expression it returns; a reduction (:func:`sum`, :func:`max`,
:func:`prod`, :func:`min` over :func:`reduce_axis` es) must be that whole expression, as in TVM.

>>> from relaybench import te
>>> A = te.placeholder((4, 8), "float32", name="A")
>>> B = te.placeholder((8, 3), "float32", name="B")
>>> k = te.reduce_axis(8, name="k")
>>> C = te.compute((4, 3), lambda i, j: te.sum(A[i, k] * B[k, j], axis=[k]), name="C")
>>> C
Tensor(C, (4, 3), float32)
>>> print(C.op.body)
sum(A[i, k] * B[k, j], axis=[k])
"""

from __future__ import annotations

import inspect
import itertools

import numpy as np

from relaybench.errors import CompileError
from relaybench.te import loop_ir
from relaybench.te.loop_ir import Expr, children, const, convert
from relaybench.te.tensor import ComputeOp, IterVar, PlaceholderOp, Reduce, Tensor, as_extent

__all__ = ["placeholder", "compute", "reduce_axis", "sum", "prod", "max", "min", "if_then_else",
           "cast", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "abs", "floor", "ceil",
           "round", "power", "max_value", "min_value"]

_names = itertools.count()


def placeholder(shape, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """A kernel input of ``shape`` and ``dtype``.

    >>> placeholder((2, 3), "int32", name="X")
    Tensor(X, (2, 3), int32)
    """
    np.dtype(dtype)
    return PlaceholderOp(shape, dtype, name).output


def reduce_axis(extent: int, name: str | None = None) -> IterVar:
    """A reduction axis ranging over ``range(extent)``.

    >>> reduce_axis(8, name="k")
    IterVar(k, 8, reduce)
    """
    extent = as_extent(extent)
    if isinstance(extent, int) and extent <= 0:
        raise CompileError(f"reduce_axis {name or ''}: extent must be positive, got {extent}")
    return IterVar(name or f"rv{next(_names)}", "int64", extent, "reduce")


def compute(shape, fcompute, name: str = "compute") -> Tensor:
    """The tensor of ``shape`` whose element at ``(i, j, ...)`` is ``fcompute(i, j, ...)``.

    >>> X = placeholder((3,), name="X")
    >>> Y = compute((3,), lambda i: X[i] * 2.0 + 1.0, name="Y")
    >>> print(Y.op.body)
    X[i] * 2.0 + 1.0
    """
    shape = tuple(as_extent(s) for s in shape)
    try:
        params = [p.name for p in inspect.signature(fcompute).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    if len(params) != len(shape):
        params = [f"i{d}" for d in range(len(shape))]
    axis = tuple(IterVar(n, "int64", extent, "data") for n, extent in zip(params, shape))
    body = fcompute(*axis)
    if isinstance(body, Tensor):
        raise CompileError(f"compute {name}: fcompute returned the tensor {body.name}; "
                           "index it (X[i, j])")
    try:
        body = convert(body)
    except CompileError as err:
        raise CompileError(f"compute {name}: {err}") from None
    _check_reduce_placement(body, name)
    return ComputeOp(name, axis, body, shape).output


def _check_reduce_placement(body: Expr, name: str):
    top = body.source if isinstance(body, Reduce) else body
    stack, seen = [top], set()      # a shared subexpression is looked at once
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Reduce):
            raise CompileError(f"compute {name}: a reduction must be the whole body of the "
                               "compute; put it in a compute of its own")
        stack.extend(children(node))


def _reducer(combiner: str, init_of):
    def reduce(expr, axis):
        """Reduce ``expr`` over the reduce axes ``axis``."""
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        for a in axes:
            if not (isinstance(a, IterVar) and a.iter_kind == "reduce"):
                raise CompileError(f"{combiner}: {a!r} is not a reduce_axis")
        if not axes:
            raise CompileError(f"{combiner}: no reduce axis given")
        expr = convert(expr)
        return Reduce(combiner, expr, axes, const(init_of(expr.dtype), expr.dtype), expr.dtype)

    reduce.__name__ = combiner
    return reduce


def max_value(dtype: str):
    """The largest value of ``dtype`` (infinity for floats)."""
    return np.inf if dtype.startswith("float") else int(np.iinfo(dtype).max)


def min_value(dtype: str):
    """The smallest value of ``dtype`` (minus infinity for floats)."""
    return -np.inf if dtype.startswith("float") else int(np.iinfo(dtype).min)


#: combiner name -> how two partial results combine (``tree_reduce``'s steps)
_COMBINERS = {
    "sum": lambda a, b: a + b,
    "prod": lambda a, b: a * b,
    "max": loop_ir.max_expr,
    "min": loop_ir.min_expr,
}

sum = _reducer("sum", lambda dtype: 0)
sum.__doc__ = """Sum of ``expr`` over the reduce axes ``axis`` (starts from 0).

>>> k = reduce_axis(4, name="k")
>>> X = placeholder((4,), name="X")
>>> print(sum(X[k], axis=[k]))
sum(X[k], axis=[k])
"""
prod = _reducer("prod", lambda dtype: 1)
prod.__doc__ = """Product of ``expr`` over the reduce axes ``axis`` (starts from 1).

>>> k = reduce_axis(4, name="k")
>>> X = placeholder((4,), name="X")
>>> print(prod(X[k], axis=[k]))
prod(X[k], axis=[k])
"""
max = _reducer("max", min_value)
max.__doc__ = """Maximum of ``expr`` over ``axis`` (starts from the dtype's lowest value)."""
min = _reducer("min", max_value)
min.__doc__ = """Minimum of ``expr`` over ``axis`` (starts from the dtype's highest value)."""


def if_then_else(cond, true_value, false_value) -> Expr:
    """``true_value`` where ``cond`` holds, else ``false_value`` (for padding, masks, relu).

    >>> X = placeholder((4,), name="X")
    >>> i = IterVar("i", "int64", 6)
    >>> print(if_then_else(i < 4, X[3], 0.0))
    select(i < 4, X[3], 0.0)
    """
    return loop_ir.select(cond, true_value, false_value)


def cast(dtype: str, expr) -> Expr:
    """``expr`` converted to ``dtype``.

    A Python number becomes a constant of ``dtype`` directly (``cast("float64", 0.1)`` is the
    float64 nearest 0.1, not a float32 widened).

    >>> print(cast("float32", IterVar("i", "int64", 4)))
    float32(i)
    >>> cast("float64", 0.1)
    FloatImm(0.1, float64)
    """
    if isinstance(expr, (int, float, np.integer, np.floating)) and not isinstance(expr, bool):
        if dtype.startswith(("int", "uint")) and isinstance(expr, (float, np.floating)):
            return loop_ir.cast(dtype, expr)
        return loop_ir.const(expr, dtype)
    return loop_ir.cast(dtype, expr)


def _intrinsic(name: str):
    def fn(*args):
        return loop_ir.call(name, *args)

    fn.__name__ = name
    fn.__doc__ = f"The math intrinsic ``{name}`` applied elementwise."
    return fn


exp = _intrinsic("exp")
log = _intrinsic("log")
sqrt = _intrinsic("sqrt")
rsqrt = _intrinsic("rsqrt")
tanh = _intrinsic("tanh")
sigmoid = _intrinsic("sigmoid")
erf = _intrinsic("erf")
abs = _intrinsic("abs")
floor = _intrinsic("floor")
ceil = _intrinsic("ceil")
round = _intrinsic("round")
power = _intrinsic("pow")
fmod = _intrinsic("fmod")
fmod.__doc__ = """C's ``fmod(a, b)`` of floats: the exact remainder of the truncated quotient,
with the sign of ``a`` (numpy's ``fmod``)."""


def maximum(a, b) -> Expr:
    """Elementwise ``max(a, b)`` of two scalar expressions (``relu`` is ``maximum(x, 0.0)``)."""
    a = convert(a) if isinstance(a, Expr) or not isinstance(b, Expr) else convert(a, b.dtype)
    return loop_ir.max_expr(a, b)


def minimum(a, b) -> Expr:
    """Elementwise ``min(a, b)`` of two scalar expressions."""
    a = convert(a) if isinstance(a, Expr) or not isinstance(b, Expr) else convert(a, b.dtype)
    return loop_ir.min_expr(a, b)


__all__ += ["maximum", "minimum"]
