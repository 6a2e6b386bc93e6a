"""Gradient: reverse-mode automatic differentiation of tensor programs.

:func:`gradient` turns a function ``fn(x1, ..., xn) -> T`` into
``fn(x1, ..., xn) -> (T, (dT/dx1, ..., dT/dxn))``: the forward value and the gradient with
respect to every parameter, for an output seed of ones (Relay's convention, so a tensor output
``T`` gives the gradient of ``sum(T)``). The :func:`Gradient` pass does the same to one function of
a module (``@main`` by default), changing its type by design.

>>> import relaybench as rb
>>> from relaybench import op
>>> x = rb.var("x", shape=(3,))
>>> grad = gradient(rb.Function([x], op.sum(x * x)))
>>> print(grad.astext(show_types=False))
fn (%x: Tensor[(3), float32]) {
  %0 = multiply(%x, %x);
  %1 = sum(%0);
  %2 = ones_like(%1);
  %3 = broadcast_to(%2, shape=[3]);
  %4 = multiply(%3, %x);
  %5 = multiply(%3, %x);
  %6 = add(%4, %5);
  %7 = (%6,);
  (%1, %7)
}

**The method** is first-order reverse mode (Relay's ``mode="first_order"``). The body is read as a
dataflow graph: ``let``-bound variables stand for their values, so graph form and A-normal form are
both accepted. A backward sweep visits the nodes in reverse topological order with an explicit
loop (a chain of 100,000 operators differentiates without recursion) and accumulates each node's
adjoint: the sum of the contributions of all its uses. Every operator's contribution comes from
the rule registered for it in :data:`GRADIENTS`: the rule receives the forward call and the
adjoint of its output (an expression) and returns the adjoints of its inputs, built from ordinary
operators; broadcasting is undone by summing the adjoint over the broadcast axes
(:func:`collapse_sum`). The result is in graph form and shares the forward nodes: backward
expressions use the forward values directly.

Tuples and projections route adjoints field by field (a missing field is zero). ``if`` is
differentiated branch by branch: nodes are placed in the innermost branch that holds all their
uses, the forward ``if`` stays as it is, and the backward pass gets a second ``if`` on the same
condition whose branches hold the backward sweeps of the forward branches and return the
adjoints of the values each branch reads from outside; the gradient of an ``if`` is the ``if`` of
the gradients. The backward branches reuse the forward branches' values (graph-form sharing): the
interpreter computes them once, in the branch taken, while a conversion to A-normal form or the
printer, which bind a value shared by two ifs before both, compute them whichever branch is taken
(the same values, so the same results). Constants, integer and boolean values get no adjoint. A
parameter that does not reach the output has a zero gradient.

**Limits.** Only first-order programs: closures (function literals), calls of global functions,
ADT constructors and ``match``, and references are rejected with a :class:`~relaybench.errors.RelayError`
that names the node ("Gradient: match expressions are not supported (...)"); Relay's higher-order
mode needs references to handle those, and this pass does not implement it. An operator without a
rule raises naming the operator. Rules that compute index arithmetic (convolutions, pooling,
slicing, ``take``, ``concatenate``) need static extents on the axes they touch; pooling and
convolutions need the NCHW / OIHW family of layouts (any permutation for pooling).
"""

from __future__ import annotations

import functools
import itertools
from typing import Callable, Optional

import numpy as np

from .. import op as _op
from ..errors import RelayError
from ..ir.builder import const as _const
from ..ir.expr import (Call, Constant, Constructor, Expr, Function, GlobalVar, If, Let, Match, Op,
                       RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var, expr_children)
from ..ir.functor import ExprMutator, post_order
from ..ir.types import TensorType, TupleType
from ..op import nn as _nn
from .infra import module_pass, typed

__all__ = ["gradient", "Gradient", "GRADIENTS", "NO_GRADIENT", "register_gradient", "collapse_sum",
           "import_gradient_cells"]


# =============================================================================================
# Errors


def _describe(node) -> str:
    """A node for messages: what it is, where the parser found it, and its own line of text
    (for a call, the line that makes the call; otherwise the node's first line)."""
    from ..ir.type_infer import describe
    try:
        lines = [ln.strip() for ln in node.astext(show_types=False).splitlines()]
        lines = [ln for ln in lines if ln and not ln.startswith(("#[", "free_var", "%"))] or lines
        line = lines[-1] if isinstance(node, (Call, Tuple, TupleGetItem)) else lines[0]
    except Exception:  # a node that cannot print is still named by its kind
        line = ""
    if len(line) > 80:
        line = line[:77] + "..."
    span = f" at {node.span}" if getattr(node, "span", None) is not None else ""
    return f"{describe(node)}{span}: {line}" if line else f"{describe(node)}{span}"


def _error(message: str, node=None) -> RelayError:
    where = f" ({_describe(node)})" if node is not None else ""
    return RelayError(f"Gradient: {message}{where}")


_UNSUPPORTED = {
    Function: "closures (function literals) are not supported",
    Match: "match expressions are not supported",
    Constructor: "ADT constructors are not supported",
    RefCreate: "references (ref) are not supported",
    RefRead: "references (ref_read) are not supported",
    RefWrite: "references (ref_write) are not supported",
    GlobalVar: "calls of global functions are not supported",
}


# =============================================================================================
# Shapes, dtypes and small builders


def _shape(e: Expr) -> tuple:
    return tuple(e.checked_type.shape)


def _dtype(e: Expr) -> str:
    return e.checked_type.dtype


def _static(e: Expr, call: Call, what: str = "this rule") -> tuple:
    """``e``'s shape, all ints, or an error naming the call."""
    shape = _shape(e)
    if not all(isinstance(d, int) for d in shape):
        raise _error(f"{call.op.name}: {what} needs static shapes, got {e.checked_type}", call)
    return shape


def _c(value, dtype: str) -> Constant:
    """A constant of ``dtype``; scalars are shared (one node per value and dtype)."""
    if isinstance(value, (int, float)):
        return _scalar(float(value), dtype)
    return _const(np.asarray(value, dtype=dtype))


@functools.lru_cache(maxsize=512)
def _scalar(value: float, dtype: str) -> Constant:
    return _const(np.asarray(value, dtype=dtype))


def _has_float(t) -> bool:
    stack = [t]
    while stack:
        t = stack.pop()
        if isinstance(t, TensorType):
            if str(t.dtype).startswith(("float", "bfloat")):
                return True
        elif isinstance(t, TupleType):
            stack.extend(t.fields)
    return False


def _zeros_of_type(t, e: Expr) -> Expr:
    if isinstance(t, TupleType):
        return Tuple([_zeros_of_type(f, TupleGetItem(e, i)) for i, f in enumerate(t.fields)])
    if isinstance(t, TensorType) and all(isinstance(d, int) for d in t.shape):
        return _op.zeros(shape=tuple(t.shape), dtype=t.dtype)
    return _op.zeros_like(e)


def _ones_seed(e: Expr, t):
    """The output seed: ones for every floating-point tensor of ``e``'s type (None elsewhere)."""
    if isinstance(t, TupleType):
        return [_ones_seed(TupleGetItem(e, i), f) for i, f in enumerate(t.fields)]
    if _has_float(t):
        return _op.ones_like(e)
    return None


def collapse_sum(g: Expr, out_shape: tuple, in_shape: tuple) -> Expr:
    """Sum ``g`` (of ``out_shape``) back to ``in_shape``, the shape an operand had before numpy
    broadcasting took it to ``out_shape``: summed over the leading axes broadcasting added and
    over the axes where the operand had extent 1 (Relay's ``collapse_sum_like``).

    >>> import relaybench as rb
    >>> print(collapse_sum(rb.var("g", shape=(2, 3, 4)), (2, 3, 4), (3, 1)).astext(show_types=False))
    free_var %g: Tensor[(2, 3, 4), float32];
    %0 = sum(%g, axis=[2], keepdims=True);
    sum(%0, axis=[0])
    """
    out_shape, in_shape = tuple(out_shape), tuple(in_shape)
    if out_shape == in_shape:
        return g
    lead = len(out_shape) - len(in_shape)
    if lead < 0:
        raise RelayError(f"Gradient: cannot sum a {out_shape} adjoint back to {in_shape}")
    kept = [lead + i for i, d in enumerate(in_shape) if d == 1 and out_shape[lead + i] != 1]
    if kept:
        g = _op.sum(g, axis=kept, keepdims=True)
    if lead:
        g = _op.sum(g, axis=list(range(lead)), keepdims=False)
    return g


def _unbroadcast(g: Expr, call: Call, arg: Expr) -> Expr:
    """The adjoint ``g`` of a broadcasting call summed back to ``arg``'s shape."""
    return collapse_sum(g, _shape(call), _shape(arg))


def _broadcast_like(g: Expr, like: Expr) -> Expr:
    """``g`` broadcast to ``like``'s shape."""
    shape = _shape(like)
    if all(isinstance(d, int) for d in shape):
        return _op.broadcast_to(g, shape=shape)
    return _op.add(g, _op.zeros_like(like))


def _expand_reduced(g: Expr, axes, ndim_after: int, keepdims: bool) -> Expr:
    """A reduction's adjoint with its reduced axes back (extent 1), ready to broadcast."""
    if keepdims or ndim_after == 0:   # a scalar broadcasts as it is
        return g
    for a in sorted(axes):
        g = _op.expand_dims(g, axis=a)
    return g


def _along(v: Expr, ndim: int, axis: int) -> Expr:
    """A vector ``[C]`` shaped to broadcast along ``axis`` of a rank-``ndim`` tensor."""
    after = ndim - 1 - axis
    return _op.expand_dims(v, axis=1, num_newaxis=after) if after > 0 else v


def _norm_axis(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis


# =============================================================================================
# The rule table

GRADIENTS: dict = {}
"""Operator name -> rule ``rule(call, g, needs) -> input adjoints``: ``g`` is the adjoint of the
call's output (an expression; for a tuple-valued operator a list with one entry per field, None
for a zero field), ``needs[i]`` says whether input ``i`` wants an adjoint. The rule returns one
entry per input: an expression, None (zero), or for a tuple-typed input a list of field adjoints."""

NO_GRADIENT = frozenset({
    "floor", "ceil", "round", "zeros", "ones", "zeros_like", "ones_like", "shape_of", "arange",
    "argmax", "argmin", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "logical_and", "logical_or", "logical_xor", "logical_not", "all", "any", "floor_divide",
    "left_shift", "right_shift",
})
"""Operators whose gradient is zero (almost) everywhere: comparisons, rounding, shapes, fills."""


def register_gradient(*names: str):
    """Register ``rule(call, g, needs)`` as the gradient of the named operators."""
    def add(rule: Callable) -> Callable:
        for name in names:
            GRADIENTS[name] = rule
        return rule
    return add


_grad = register_gradient


# ---- elementwise and broadcasting arithmetic ---------------------------------------------------

@_grad("add")
def _add_grad(call, g, needs):
    a, b = call.args
    return _unbroadcast(g, call, a), _unbroadcast(g, call, b)


@_grad("subtract")
def _subtract_grad(call, g, needs):
    a, b = call.args
    return _unbroadcast(g, call, a), (_unbroadcast(_op.negative(g), call, b) if needs[1] else None)


@_grad("multiply")
def _multiply_grad(call, g, needs):
    a, b = call.args
    return (_unbroadcast(_op.multiply(g, b), call, a) if needs[0] else None,
            _unbroadcast(_op.multiply(g, a), call, b) if needs[1] else None)


@_grad("divide")
def _divide_grad(call, g, needs):
    a, b = call.args
    da = _unbroadcast(_op.divide(g, b), call, a) if needs[0] else None
    db = (_unbroadcast(_op.negative(_op.divide(_op.multiply(g, call), b)), call, b)
          if needs[1] else None)
    return da, db


@_grad("power")
def _power_grad(call, g, needs):
    a, b = call.args
    da = db = None
    if needs[0]:
        one = _c(1.0, _dtype(b))
        da = _unbroadcast(_op.multiply(g, _op.multiply(b, _op.power(a, _op.subtract(b, one)))), call, a)
    if needs[1]:
        db = _unbroadcast(_op.multiply(g, _op.multiply(call, _op.log(a))), call, b)
    return da, db


def _select(mask_op):
    def rule(call, g, needs):
        a, b = call.args
        dt = _dtype(call)
        mask = _op.cast(mask_op(a, b), dtype=dt)
        da = _unbroadcast(_op.multiply(g, mask), call, a) if needs[0] else None
        db = (_unbroadcast(_op.multiply(g, _op.subtract(_c(1.0, dt), mask)), call, b)
              if needs[1] else None)
        return da, db
    return rule


register_gradient("maximum")(_select(_op.greater_equal))
register_gradient("minimum")(_select(_op.less_equal))


@_grad("negative")
def _negative_grad(call, g, needs):
    return (_op.negative(g),)


@_grad("exp")
def _exp_grad(call, g, needs):
    return (_op.multiply(g, call),)


@_grad("log")
def _log_grad(call, g, needs):
    return (_op.divide(g, call.args[0]),)


@_grad("sqrt")
def _sqrt_grad(call, g, needs):
    return (_op.divide(g, _op.multiply(_c(2.0, _dtype(call)), call)),)


@_grad("rsqrt")
def _rsqrt_grad(call, g, needs):
    (a,) = call.args
    return (_op.multiply(g, _op.multiply(_c(-0.5, _dtype(call)), _op.divide(call, a))),)


@_grad("sigmoid")
def _sigmoid_grad(call, g, needs):
    one = _c(1.0, _dtype(call))
    return (_op.multiply(g, _op.multiply(call, _op.subtract(one, call))),)


@_grad("tanh")
def _tanh_grad(call, g, needs):
    one = _c(1.0, _dtype(call))
    return (_op.multiply(g, _op.subtract(one, _op.multiply(call, call))),)


@_grad("erf")
def _erf_grad(call, g, needs):
    (a,) = call.args
    scale = _c(2.0 / np.sqrt(np.pi), _dtype(call))
    return (_op.multiply(g, _op.multiply(scale, _op.exp(_op.negative(_op.multiply(a, a))))),)


@_grad("nn.relu")
def _relu_grad(call, g, needs):
    (a,) = call.args
    zero = _c(0.0, _dtype(call))
    return (_op.where(_op.greater(a, zero), g, zero),)


@_grad("nn.leaky_relu")
def _leaky_relu_grad(call, g, needs):
    (a,) = call.args
    dt = _dtype(call)
    return (_op.where(_op.greater(a, _c(0.0, dt)), g, _op.multiply(g, _c(call.attrs.alpha, dt))),)


@_grad("nn.prelu")
def _prelu_grad(call, g, needs):
    a, alpha = call.args
    dt = _dtype(call)
    ndim = len(_shape(a))
    axis = _norm_axis(call.attrs.axis, ndim)
    positive = _op.greater(a, _c(0.0, dt))
    da = _op.where(positive, g, _op.multiply(g, _along(alpha, ndim, axis))) if needs[0] else None
    dalpha = None
    if needs[1]:
        dalpha = _op.sum(_op.where(positive, _c(0.0, dt), _op.multiply(g, a)), axis=[axis], exclude=True)
    return da, dalpha


@_grad("abs")
def _abs_grad(call, g, needs):
    (a,) = call.args
    return (_op.where(_op.less(a, _c(0.0, _dtype(call))), _op.negative(g), g),)


@_grad("clip")
def _clip_grad(call, g, needs):
    (a,) = call.args
    dt = _dtype(call)
    inside = _op.logical_and(_op.greater_equal(a, _c(call.attrs.a_min, dt)),
                             _op.less_equal(a, _c(call.attrs.a_max, dt)))
    return (_op.where(inside, g, _c(0.0, dt)),)


@_grad("cast")
def _cast_grad(call, g, needs):
    return (_op.cast(g, dtype=_dtype(call.args[0])),)


@_grad("cast_like")
def _cast_like_grad(call, g, needs):
    return _op.cast(g, dtype=_dtype(call.args[0])), None


@_grad("where")
def _where_grad(call, g, needs):
    cond, x, y = call.args
    zero = _c(0.0, _dtype(call))
    dx = _unbroadcast(_op.where(cond, g, zero), call, x) if needs[1] else None
    dy = _unbroadcast(_op.where(cond, zero, g), call, y) if needs[2] else None
    return None, dx, dy


@_grad("full")
def _full_grad(call, g, needs):
    return (_op.cast(_op.sum(g), dtype=_dtype(call.args[0])),)


@_grad("full_like")
def _full_like_grad(call, g, needs):
    return None, _op.cast(_op.sum(g), dtype=_dtype(call.args[1]))


# ---- reductions ---------------------------------------------------------------------------------

def _reduced_axes(call) -> tuple:
    from ..op.reduce import reduce_axes
    a = call.attrs
    return reduce_axes(len(_shape(call.args[0])), a.axis, a.exclude)


def _count(shape, axes, call) -> int:
    n = 1
    for ax in axes:
        d = shape[ax]
        if not isinstance(d, int):
            raise _error(f"{call.op.name}: the reduced extent {d} must be static", call)
        n *= d
    return n


@_grad("sum")
def _sum_grad(call, g, needs):
    (x,) = call.args
    axes = _reduced_axes(call)
    return (_broadcast_like(_expand_reduced(g, axes, len(_shape(call)), call.attrs.keepdims), x),)


@_grad("mean")
def _mean_grad(call, g, needs):
    (x,) = call.args
    axes = _reduced_axes(call)
    n = _count(_shape(x), axes, call)
    g = _op.multiply(g, _c(1.0 / n, _dtype(call)))
    return (_broadcast_like(_expand_reduced(g, axes, len(_shape(call)), call.attrs.keepdims), x),)


@_grad("max", "min")
def _max_grad(call, g, needs):
    # the adjoint is shared by the elements that reach the extreme value
    (x,) = call.args
    axes = _reduced_axes(call)
    keep = call.attrs.keepdims
    y = _expand_reduced(call, axes, len(_shape(call)), keep)
    gk = _expand_reduced(g, axes, len(_shape(call)), keep)
    mask = _op.cast(_op.equal(x, y), dtype=_dtype(call))
    share = _op.divide(gk, _op.sum(mask, axis=list(axes), keepdims=True))
    return (_op.multiply(mask, share),)


# ---- shape and layout ---------------------------------------------------------------------------

@_grad("reshape", "nn.batch_flatten", "squeeze", "expand_dims")
def _reshape_grad(call, g, needs):
    return (_op.reshape_like(g, call.args[0]),)


@_grad("reshape_like")
def _reshape_like_grad(call, g, needs):
    return _op.reshape_like(g, call.args[0]), None


@_grad("broadcast_to")
def _broadcast_to_grad(call, g, needs):
    return (_unbroadcast(g, call, call.args[0]),)


@_grad("transpose")
def _transpose_grad(call, g, needs):
    ndim = len(_shape(call.args[0]))
    axes = call.attrs.axes
    axes = list(range(ndim))[::-1] if axes is None else [_norm_axis(a, ndim) for a in axes]
    return (_op.transpose(g, axes=[int(i) for i in np.argsort(axes)]),)


@_grad("nn.dropout")
def _dropout_grad(call, g, needs):
    # at inference the output is the data and the mask is all ones
    return (g[0],)


def _tuple_field_types(e: Expr) -> list:
    t = e.checked_type
    if not isinstance(t, TupleType):
        raise _error(f"expected a tuple of tensors, got {t}", e)
    return list(t.fields)


@_grad("concatenate")
def _concatenate_grad(call, g, needs):
    (data,) = call.args
    fields = _tuple_field_types(data)
    ndim = len(fields[0].shape)
    axis = _norm_axis(call.attrs.axis, ndim)
    sizes = [f.shape[axis] for f in fields]
    if len(fields) == 1:
        return ([g],)
    if not all(isinstance(s, int) for s in sizes):
        raise _error(f"concatenate: the extents {sizes} along axis {axis} must be static", call)
    parts = _op.split(g, indices_or_sections=list(itertools.accumulate(sizes))[:-1], axis=axis)
    return ([TupleGetItem(parts, i) for i in range(len(fields))],)


@_grad("stack")
def _stack_grad(call, g, needs):
    (data,) = call.args
    fields = _tuple_field_types(data)
    axis = _norm_axis(call.attrs.axis, len(fields[0].shape) + 1)
    if len(fields) == 1:
        return ([_op.squeeze(g, axis=[axis])],)
    parts = _op.split(g, indices_or_sections=len(fields), axis=axis)
    return ([_op.squeeze(TupleGetItem(parts, i), axis=[axis]) for i in range(len(fields))],)


@_grad("split")
def _split_grad(call, g, needs):
    axis = _norm_axis(call.attrs.axis, len(_shape(call.args[0])))
    fields = call.checked_type.fields
    pieces = [gi if gi is not None else _zeros_of_type(fields[i], TupleGetItem(call, i))
              for i, gi in enumerate(g)]
    return (_op.concatenate(Tuple(pieces), axis=axis),)


@_grad("repeat")
def _repeat_grad(call, g, needs):
    (x,) = call.args
    shape = _static(x, call)
    axis = _norm_axis(call.attrs.axis, len(shape))
    r = call.attrs.repeats
    split = shape[:axis] + (shape[axis], r) + shape[axis + 1:]
    return (_op.sum(_op.reshape(g, newshape=split), axis=[axis + 1]),)


@_grad("tile")
def _tile_grad(call, g, needs):
    (x,) = call.args
    shape = _static(x, call)
    reps = tuple(call.attrs.reps)
    ndim = max(len(shape), len(reps))
    shape_full = (1,) * (ndim - len(shape)) + shape
    reps = (1,) * (ndim - len(reps)) + reps
    split = tuple(v for r, d in zip(reps, shape_full) for v in (r, d))
    summed = _op.sum(_op.reshape(g, newshape=split), axis=list(range(0, 2 * ndim, 2)))
    return (_op.reshape(summed, newshape=shape),)


def _slice_positions(call) -> list:
    """For each axis of a strided_slice's data: the selected indices, in output order."""
    from ..op.transform import _slice_specs, _static_bounds
    shape = _static(call.args[0], call)
    attrs = call.attrs
    picks = [np.arange(d) for d in shape]
    for axis, b, e, s in _slice_specs(len(shape), attrs):
        b, e = _static_bounds(shape[axis], b, e, s, attrs.slice_mode == "size")
        index = slice(0, 0) if b < 0 else slice(b, None if e < 0 else e, s)
        picks[axis] = np.arange(shape[axis])[index]
    return picks


def _scatter_strided(g: Expr, shape: tuple, picks: list, dtype: str) -> Expr:
    """The adjoint of taking ``picks[k]`` (an arithmetic progression) along every axis ``k`` of a
    tensor of ``shape``: ``g`` spread back into place, zeros elsewhere."""
    ndim = len(shape)
    zero = _c(0.0, dtype)
    cur = [len(p) for p in picks]       # g's current shape
    width = []
    for axis, (p, d) in enumerate(zip(picks, shape)):
        if len(p) == 0:
            return _op.zeros(shape=shape, dtype=dtype)
        step = int(p[1] - p[0]) if len(p) > 1 else 1
        if step < 0:  # walked backwards: reverse the adjoint along this axis first
            g = _op.strided_slice(g, begin=[-1], end=[-(2 ** 31)], strides=[-1], axes=[axis])
            p, step = p[::-1], -step
        if step > 1:  # step - 1 zeros after every element, the trailing ones dropped
            pad = [(0, 0)] * (ndim + 1)
            pad[axis + 1] = (0, step - 1)
            spread = list(cur)
            spread[axis] = cur[axis] * step
            g = _op.reshape(_nn.pad(_op.expand_dims(g, axis=axis + 1), zero, pad_width=pad), newshape=spread)
            cur[axis] = (cur[axis] - 1) * step + 1
            g = _op.strided_slice(g, begin=[0], end=[cur[axis]], axes=[axis])
        width.append((int(p[0]), d - int(p[0]) - cur[axis]))
    if any(w != (0, 0) for w in width):
        g = _nn.pad(g, zero, pad_width=width)
    return g


@_grad("strided_slice")
def _strided_slice_grad(call, g, needs):
    (x,) = call.args
    return (_scatter_strided(g, _static(x, call), _slice_positions(call), _dtype(call)),)


@_grad("nn.pad")
def _pad_grad(call, g, needs):
    x, value = call.args
    if call.attrs.pad_mode != "constant":
        raise _error(f"nn.pad: no gradient for pad_mode={call.attrs.pad_mode!r} (only 'constant')", call)
    shape = _static(x, call)
    width = call.attrs.pad_width
    dx = _op.strided_slice(g, begin=[b for b, _ in width], end=[b + d for (b, _), d in zip(width, shape)])
    dvalue = None
    if needs[1]:
        dvalue = _op.cast(_op.subtract(_op.sum(g), _op.sum(dx)), dtype=_dtype(value))
    return (dx if needs[0] else None), dvalue


@_grad("take")
def _take_grad(call, g, needs):
    data, indices = call.args
    if not needs[0]:
        return None, None
    if call.attrs.batch_dims:
        raise _error("take: no gradient with batch_dims != 0", call)
    shape = _static(data, call)
    dt = _dtype(data)
    axis = None if call.attrs.axis is None else _norm_axis(call.attrs.axis, len(shape))
    n = int(np.prod(shape)) if axis is None else shape[axis]
    # the index each position really reads (after clip/wrap), through take itself
    where = _op.take(_c(np.arange(n), "int32"), indices, axis=0, mode=call.attrs.mode)
    hot = _op.reshape(_op.one_hot(where, _c(1.0, dt), _c(0.0, dt), depth=n, axis=-1, dtype=dt),
                      newshape=[-1, n])                                         # [M, n]
    if axis is None:
        flat = _op.reshape(g, newshape=[1, -1])                                  # [1, M]
        return _op.reshape(_nn.dense(flat, _op.transpose(hot)), newshape=shape), None
    a = int(np.prod(shape[:axis]))
    b = int(np.prod(shape[axis + 1:]))
    g3 = _op.transpose(_op.reshape(g, newshape=[a, -1, b]), axes=[0, 2, 1])     # [a, b, M]
    d = _nn.dense(_op.reshape(g3, newshape=[a * b, -1]), _op.transpose(hot))     # [a*b, n]
    d = _op.transpose(_op.reshape(d, newshape=[a, b, n]), axes=[0, 2, 1])      # [a, n, b]
    return _op.reshape(d, newshape=shape), None


# ---- matrix products ----------------------------------------------------------------------------

def _same_dtype(call):
    out = call.attrs.out_dtype
    if out not in ("", None, _dtype(call.args[0])):
        raise _error(f"{call.op.name}: no gradient with out_dtype={out}", call)


@_grad("nn.dense")
def _dense_grad(call, g, needs):
    x, w = call.args
    _same_dtype(call)
    units, k = _shape(w)
    dx = _nn.dense(g, _op.transpose(w)) if needs[0] else None
    dw = None
    if needs[1]:
        g2, x2 = (g, x) if len(_shape(x)) == 2 else (_op.reshape(g, newshape=[-1, units]),
                                                   _op.reshape(x, newshape=[-1, k]))
        dw = _nn.dense(_op.transpose(g2), _op.transpose(x2))
    return dx, dw


@_grad("nn.matmul")
def _matmul_grad(call, g, needs):
    a, b = call.args
    _same_dtype(call)
    ta, tb = call.attrs.transpose_a, call.attrs.transpose_b
    nd = len(_shape(a))
    swap = list(range(nd - 2)) + [nd - 1, nd - 2] if nd >= 2 else None
    a_eff = _op.transpose(a, axes=swap) if ta else a                      # [..., K]
    b_eff = _op.transpose(b) if tb else b                                  # [K, N]
    k, n = _shape(b)[::-1] if tb else _shape(b)
    da = db = None
    if needs[0]:
        da = _nn.dense(g, b_eff)                                           # g @ B.T
        if ta:
            da = _op.transpose(da, axes=swap)
    if needs[1]:
        # rows of A and g: the leading axes flattened (a vector is one row)
        a2, g2 = ((a_eff, g) if nd == 2 else
                  (_op.reshape(a_eff, newshape=[-1, k]), _op.reshape(g, newshape=[-1, n])))
        # dB = A.T @ g  ([K, N]); transposed when b was given as [N, K]
        db = (_nn.dense(_op.transpose(g2), _op.transpose(a2)) if tb
              else _nn.dense(_op.transpose(a2), _op.transpose(g2)))
    return da, db


@_grad("nn.batch_matmul")
def _batch_matmul_grad(call, g, needs):
    x, y = call.args
    _same_dtype(call)
    ta, tb = call.attrs.transpose_a, call.attrs.transpose_b
    dx = dy = None
    if needs[0]:
        # X = g @ Y.T, where Y is y or y.T
        dx = _nn.batch_matmul(g, y, transpose_a=False, transpose_b=not tb)    # [B, M, K]
        if ta:
            dx = _op.transpose(dx, axes=[0, 2, 1])
        dx = collapse_sum(dx, (_shape(call)[0],) + _shape(x)[1:], _shape(x))
    if needs[1]:
        # Y = X.T @ g, where X is x or x.T
        dy = _nn.batch_matmul(x, g, transpose_a=not ta, transpose_b=False)     # [B, K, N]
        if tb:
            dy = _op.transpose(dy, axes=[0, 2, 1])
        dy = collapse_sum(dy, (_shape(call)[0],) + _shape(y)[1:], _shape(y))
    return dx, dy


@_grad("nn.bias_add")
def _bias_add_grad(call, g, needs):
    x, b = call.args
    axis = _norm_axis(call.attrs.axis, len(_shape(x)))
    return g, (_op.sum(g, axis=[axis], exclude=True) if needs[1] else None)


# ---- convolution --------------------------------------------------------------------------------

@_grad("nn.conv2d")
def _conv2d_grad(call, g, needs):
    x, w = call.args
    a = call.attrs
    if a.data_layout != "NCHW" or a.kernel_layout != "OIHW" or a.out_layout not in ("", "NCHW"):
        raise _error(f"nn.conv2d: gradients need data_layout NCHW and kernel_layout OIHW, got "
                     f"{a.data_layout}/{a.kernel_layout}", call)
    _same_dtype(call)
    n, c, h, wd = _static(x, call)
    o, cg, kh, kw = _static(w, call)
    _, _, oh, ow = _static(call, call)
    (sh, sw), (dh, dw), groups = a.strides, a.dilation, a.groups
    pt, pl, pb, pr = a.padding
    dx = dw_ = None
    if needs[0]:
        # the transposed convolution spreads the adjoint back; output_padding restores the rows
        # and columns the forward windows never reached
        rh = (h + pt + pb - ((kh - 1) * dh + 1)) % sh
        rw = (wd + pl + pr - ((kw - 1) * dw + 1)) % sw
        dx = _nn.conv2d_transpose(g, w, strides=(sh, sw), padding=(pt, pl, pb, pr), output_padding=(rh, rw),
                                  dilation=(dh, dw), groups=groups, channels=c, kernel_size=(kh, kw),
                                  kernel_layout="IOHW")
    if needs[1]:
        # dW[o, c, i, j] = sum over n, y, x of g[n, o, y, x] * xpad[n, c, y*sh + i*dh, x*sw + j*dw]:
        # a convolution of the data (channels as batch) by the adjoint (batch as channels), the
        # roles of strides and dilation exchanged
        xt = _op.transpose(x, axes=[1, 0, 2, 3])                             # [C, N, H, W]
        gt = _op.transpose(g, axes=[1, 0, 2, 3])                             # [O, N, OH, OW]
        full = _nn.conv2d(xt, gt, strides=(dh, dw), padding=(pt, pl, pb, pr), dilation=(sh, sw),
                          channels=o, kernel_size=(oh, ow))                    # [C, O, >=kh, >=kw]
        eh = (h + pt + pb - ((oh - 1) * sh + 1)) // dh + 1
        ew = (wd + pl + pr - ((ow - 1) * sw + 1)) // dw + 1
        if (eh, ew) != (kh, kw):
            full = _op.strided_slice(full, begin=[0, 0], end=[kh, kw], axes=[2, 3])
        if groups == 1:
            dw_ = _op.transpose(full, axes=[1, 0, 2, 3])
        else:
            # keep the blocks where the input channel's group is the output channel's group
            og = o // groups
            blocks = _op.reshape(full, newshape=[groups, cg, groups, og, kh, kw])
            eye = np.eye(groups, dtype=_dtype(call)).reshape(groups, 1, groups, 1, 1, 1)
            diag = _op.sum(_op.multiply(blocks, _c(eye, _dtype(call))), axis=[0])   # [cg, G, og, kh, kw]
            dw_ = _op.transpose(_op.reshape(diag, newshape=[cg, o, kh, kw]), axes=[1, 0, 2, 3])
    return dx, dw_


# ---- pooling ------------------------------------------------------------------------------------

def _pool_perm(call):
    """The permutation that takes the pool's layout to NCHW (None for NCHW itself)."""
    layout = call.attrs.layout
    out_layout = call.attrs.out_layout or layout
    if sorted(layout) != sorted("NCHW") or out_layout != layout:
        raise _error(f"{call.op.name}: gradients need a permutation of NCHW as the layout (and the "
                     f"same out_layout), got {layout}/{out_layout}", call)
    perm = [layout.index(ch) for ch in "NCHW"]
    return None if perm == [0, 1, 2, 3] else perm


def _to_nchw(e, perm):
    return e if perm is None else _op.transpose(e, axes=perm)


def _from_nchw(e, perm):
    return e if perm is None else _op.transpose(e, axes=[int(i) for i in np.argsort(perm)])


def _pool_geometry(call, shape):
    """Per spatial axis of an NCHW ``shape``: (extent, pad_before, pad_after, extra, kernel, stride,
    dilation, windows); ``extra`` is what ceil_mode's last window reaches past the padding."""
    a = call.attrs
    pt, pl, pb, pr = a.padding
    out = []
    for extent, before, after, k, s, d in zip(shape[2:], (pt, pl), (pb, pr), a.pool_size, a.strides,
                                              a.dilation):
        span = extent + before + after - ((k - 1) * d + 1)
        windows = (span + (s - 1 if a.ceil_mode else 0)) // s + 1
        extra = max(0, (windows - 1) * s + (k - 1) * d + 1 - (extent + before + after))
        out.append((extent, before, after, extra, k, s, d, windows))
    return out


def _scatter_windows(parts: Expr, taps_kernel: np.ndarray, geom, n: int, c: int, dtype: str) -> Expr:
    """Sum window-shaped contributions back onto the input: ``parts`` is ``[N*C, T, OH, OW]`` (one
    channel per tap, or one channel for the same value on every tap), scattered by a transposed
    convolution with the constant ``taps_kernel`` ``[T, 1, kh, kw]``, then cropped to the input."""
    (h, bh, _, _, kh, sh, dh, oh), (w, bw, _, _, kw, sw, dw, ow) = geom
    spread = _nn.conv2d_transpose(parts, _c(taps_kernel, dtype), strides=(sh, sw), dilation=(dh, dw),
                                  channels=1, kernel_size=(kh, kw), kernel_layout="IOHW")
    lh, lw = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
    spread = _op.reshape(spread, newshape=[n, c, lh, lw])
    short_h, short_w = max(0, bh + h - lh), max(0, bw + w - lw)
    if short_h or short_w:  # windows never reached the last rows or columns: zeros there
        spread = _nn.pad(spread, _c(0.0, dtype), pad_width=[(0, 0), (0, 0), (0, short_h), (0, short_w)])
    if (bh, bw, lh + short_h, lw + short_w) != (0, 0, h, w):
        spread = _op.strided_slice(spread, begin=[bh, bw], end=[bh + h, bw + w], axes=[2, 3])
    return spread


def _pool_input(call):
    """The pool's data as NCHW, its static NCHW shape, the layout permutation and the geometry."""
    (x,) = call.args
    perm = _pool_perm(call)
    shape = _static(x, call)
    shape = shape if perm is None else tuple(shape[i] for i in perm)
    return _to_nchw(x, perm), shape, perm, _pool_geometry(call, shape)


@_grad("nn.max_pool2d")
def _max_pool2d_grad(call, g, needs):
    # each window's adjoint goes to the first tap (in row-major order) holding its maximum
    xn, (n, c, _, _), perm, geom = _pool_input(call)
    dt = _dtype(call)
    gn, yn = _to_nchw(g, perm), _to_nchw(call, perm)
    (_, bh, ah, eh, kh, sh, dh, oh), (_, bw, aw, ew, kw, sw, dw, ow) = geom
    lowest = np.finfo(dt).min if np.dtype(dt).kind == "f" else np.iinfo(dt).min
    xp = _nn.pad(xn, _c(lowest, dt), pad_width=[(0, 0), (0, 0), (bh, ah + eh), (bw, aw + ew)])
    remaining = _op.ones_like(yn)
    taken = []
    for i, j in itertools.product(range(kh), range(kw)):
        tap = _op.strided_slice(xp, begin=[i * dh, j * dw],
                                end=[i * dh + (oh - 1) * sh + 1, j * dw + (ow - 1) * sw + 1],
                                strides=[sh, sw], axes=[2, 3])
        hit = _op.cast(_op.equal(tap, yn), dtype=dt)
        if taken:
            hit = _op.multiply(hit, remaining)
        if (i, j) != (kh - 1, kw - 1):
            remaining = _op.subtract(remaining, hit)
        taken.append(_op.multiply(gn, hit))
    parts = _op.reshape(_op.stack(Tuple(taken), axis=2), newshape=[n * c, kh * kw, oh, ow])
    kernel = np.eye(kh * kw, dtype=dt).reshape(kh * kw, 1, kh, kw)
    return (_from_nchw(_scatter_windows(parts, kernel, geom, n, c, dt), perm),)


@_grad("nn.avg_pool2d")
def _avg_pool2d_grad(call, g, needs):
    _, (n, c, _, _), perm, geom = _pool_input(call)
    dt = _dtype(call)
    # every window's divisor, as the forward computes it: its taps on the input (and, with
    # count_include_pad, on the declared padding, never on ceil_mode's extra)
    counts = []
    for extent, before, after, extra, k, s, d, windows in geom:
        mask = np.zeros(before + extent + after + extra)
        if call.attrs.count_include_pad:
            mask[:before + extent + after] = 1
        else:
            mask[before:before + extent] = 1
        counts.append(np.array([mask[o * s:o * s + (k - 1) * d + 1:d].sum() for o in range(windows)]))
    divisor = np.maximum(np.outer(counts[0], counts[1]), 1).astype(dt)
    (_, _, _, _, kh, _, _, oh), (_, _, _, _, kw, _, _, ow) = geom
    parts = _op.reshape(_op.divide(_to_nchw(g, perm), _c(divisor, dt)), newshape=[n * c, 1, oh, ow])
    kernel = np.ones((1, 1, kh, kw), dtype=dt)
    return (_from_nchw(_scatter_windows(parts, kernel, geom, n, c, dt), perm),)


def _global_axes(call):
    layout = call.attrs.layout
    if "H" not in layout or "W" not in layout or any(ch.islower() for ch in layout):
        raise _error(f"{call.op.name}: gradients need an unblocked layout, got {layout}", call)
    if (call.attrs.out_layout or layout) != layout:
        raise _error(f"{call.op.name}: gradients need out_layout equal to layout", call)
    return layout.index("H"), layout.index("W")


@_grad("nn.global_avg_pool2d")
def _global_avg_pool2d_grad(call, g, needs):
    (x,) = call.args
    hi, wi = _global_axes(call)
    n = _count(_shape(x), (hi, wi), call)
    return (_broadcast_like(_op.multiply(g, _c(1.0 / n, _dtype(call))), x),)


@_grad("nn.global_max_pool2d")
def _global_max_pool2d_grad(call, g, needs):
    (x,) = call.args
    hi, wi = _global_axes(call)
    mask = _op.cast(_op.equal(x, call), dtype=_dtype(call))
    return (_op.multiply(mask, _op.divide(g, _op.sum(mask, axis=[hi, wi], keepdims=True))),)


# ---- softmax and normalization ------------------------------------------------------------------

@_grad("nn.softmax")
def _softmax_grad(call, g, needs):
    axis = call.attrs.axis
    inner = _op.sum(_op.multiply(g, call), axis=[axis], keepdims=True)
    return (_op.multiply(call, _op.subtract(g, inner)),)


@_grad("nn.log_softmax")
def _log_softmax_grad(call, g, needs):
    axis = call.attrs.axis
    return (_op.subtract(g, _op.multiply(_op.exp(call), _op.sum(g, axis=[axis], keepdims=True))),)


@_grad("nn.batch_norm")
def _batch_norm_grad(call, g, needs):
    # inference batch norm: y = (x - mean) * inv * gamma + beta, inv = 1 / sqrt(var + eps)
    x, gamma, beta, mean, var = call.args
    a = call.attrs
    ndim = len(_shape(x))
    axis = _norm_axis(a.axis, ndim)
    dt = _dtype(x)
    g0, g1, g2 = g
    inv = _op.rsqrt(_op.add(var, _c(a.epsilon, dt)))
    scale = _op.multiply(gamma, inv) if a.scale else inv
    others = dict(axis=[axis], exclude=True)
    centered = _op.subtract(x, _along(mean, ndim, axis))
    dx = dgamma = dbeta = None
    dmean, dvar = g1, g2
    if g0 is not None:
        if needs[0]:
            dx = _op.multiply(g0, _along(scale, ndim, axis))
        if needs[1] and a.scale:
            dgamma = _op.sum(_op.multiply(g0, _op.multiply(centered, _along(inv, ndim, axis))), **others)
        if needs[2] and a.center:
            dbeta = _op.sum(g0, **others)
        if needs[3]:
            d = _op.negative(_op.multiply(_op.sum(g0, **others), scale))
            dmean = d if dmean is None else _op.add(dmean, d)
        if needs[4]:
            d = _op.sum(_op.multiply(g0, centered), **others)
            d = _op.multiply(d, _op.multiply(_c(-0.5, dt), _op.multiply(inv, _op.multiply(inv, inv))))
            if a.scale:
                d = _op.multiply(d, gamma)
            dvar = d if dvar is None else _op.add(dvar, d)
    return dx, dgamma, dbeta, dmean, dvar


@_grad("nn.layer_norm")
def _layer_norm_grad(call, g, needs):
    # y = xhat * gamma + beta, xhat = (x - mean) / sqrt(var + eps) over ``axis``:
    # dx = (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) / sqrt(var + eps), dxhat = g * gamma
    x, gamma, beta = call.args
    a = call.attrs
    ndim = len(_shape(x))
    axis = _norm_axis(a.axis, ndim)
    dt = _dtype(x)
    mean = _op.mean(x, axis=[axis], keepdims=True)
    centered = _op.subtract(x, mean)
    var = _op.mean(_op.multiply(centered, centered), axis=[axis], keepdims=True)
    inv = _op.rsqrt(_op.add(var, _c(a.epsilon, dt)))
    xhat = _op.multiply(centered, inv)
    others = dict(axis=[axis], exclude=True)
    dx = dgamma = dbeta = None
    if needs[0]:
        dxhat = _op.multiply(g, _along(gamma, ndim, axis)) if a.scale else g
        m1 = _op.mean(dxhat, axis=[axis], keepdims=True)
        m2 = _op.mean(_op.multiply(dxhat, xhat), axis=[axis], keepdims=True)
        dx = _op.multiply(inv, _op.subtract(_op.subtract(dxhat, m1), _op.multiply(xhat, m2)))
    if needs[1] and a.scale:
        dgamma = _op.sum(_op.multiply(g, xhat), **others)
    if needs[2] and a.center:
        dbeta = _op.sum(g, **others)
    return dx, dgamma, dbeta


# =============================================================================================
# The program as a graph


class _InlineLets(ExprMutator):
    """Graph form: every use of a let-bound variable becomes its value (the program is pure)."""

    def __init__(self, bound: dict):
        super().__init__()
        self.bound = bound

    def children_to_visit(self, expr):
        if type(expr) is Let:
            return (expr.value, expr.body)
        if type(expr) is Var and expr in self.bound:
            return (self.bound[expr],)
        return expr_children(expr)

    def visit_let(self, let):
        return self.visit(let.body)

    def visit_var(self, var):
        value = self.bound.get(var)
        return var if value is None else self.visit(value)


def _check_supported(func: Function) -> tuple:
    """Reject what first-order reverse mode cannot handle; return the let bindings and the body's
    nodes in post-order."""
    bound = {}
    nodes = post_order(func.body)
    for node in nodes:     # closures and calls first: a call of a global is reported as such
        if type(node) is Function:
            if node.attrs.get("Primitive"):
                raise _error("fused (Primitive) functions are not supported: differentiate before "
                             "FuseOps", node)
            raise _error(_UNSUPPORTED[Function], node)
        if type(node) is Call and not isinstance(node.op, Op):
            what = _UNSUPPORTED.get(type(node.op), "calls of functions are not supported")
            if isinstance(node.op, Var):
                what = "calls of function-valued variables are not supported"
            raise _error(what, node)
    used = []
    for node in nodes:
        kind = type(node)
        if kind is Var:
            used.append(node)
        elif kind is Let:
            bound[node.var] = node.value
        elif kind in _UNSUPPORTED:
            what = _UNSUPPORTED[kind]
            if kind is GlobalVar:
                what = "global functions as values are not supported"
            raise _error(what, node)
    params = set(func.params)
    for node in used:
        if node not in params and node not in bound:
            raise _error(f"free variable %{node.name_hint} (only parameters and let-bound variables "
                         f"may be used)", node)
    return bound, nodes


class _Scope:
    """The root of the body or one branch of an ``if``: where nodes are evaluated."""

    __slots__ = ("parent", "depth", "nodes", "boundary", "_seen")

    def __init__(self, parent: Optional["_Scope"]):
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.nodes: list = []
        self.boundary: list = []   # values from enclosing scopes that this scope (or a nested one) reads
        self._seen: set = set()

    def add_boundary(self, node) -> None:
        if node not in self._seen:
            self._seen.add(node)
            self.boundary.append(node)


def _lca(a: Optional[_Scope], b: _Scope) -> _Scope:
    if a is None:
        return b
    while a.depth > b.depth:
        a = a.parent
    while b.depth > a.depth:
        b = b.parent
    while a is not b:
        a, b = a.parent, b.parent
    return a


class _Differentiator:
    """Builds the gradient of one typed, let-free function body."""

    def __init__(self, params: tuple, body: Expr, nodes: list):
        self.params = params
        self.body = body
        self.order = [n for n in nodes if type(n) is not Op]
        self.needs = self._needs_grad()
        self.root = _Scope(None)
        self.branches: dict = {}   # If -> (true scope, false scope)
        self._place()

    # ---- analysis ------------------------------------------------------------------------------
    def _needs_grad(self) -> dict:
        """Whether each node depends on a parameter through differentiable floating-point values."""
        params = set(self.params)
        needs = {}
        for n in self.order:
            kind = type(n)
            if kind is Var:
                needs[n] = n in params and _has_float(n.checked_type)
            elif kind is Constant:
                needs[n] = False
            elif kind is Call:
                needs[n] = (n.op.name not in NO_GRADIENT and _has_float(n.checked_type)
                            and any(needs[a] for a in n.args))
            elif kind is Tuple:
                needs[n] = any(needs[f] for f in n.fields)
            elif kind is TupleGetItem:
                needs[n] = needs[n.tuple_value] and _has_float(n.checked_type)
            elif kind is If:
                needs[n] = needs[n.true_branch] or needs[n.false_branch]
            else:
                raise _error(f"{kind.__name__} nodes are not supported", n)
        return needs

    def _place(self) -> None:
        """Put every node in the innermost scope holding all its uses; record what each branch
        reads from its enclosing scopes."""
        scope_of = {self.body: self.root}
        crossing = []   # (scope of a use, the node used) where the use is inside a branch
        for n in reversed(self.order):
            s = scope_of[n]
            if type(n) is If:
                t, f = _Scope(s), _Scope(s)
                self.branches[n] = (t, f)
                uses = ((n.cond, s), (n.true_branch, t), (n.false_branch, f))
            else:
                uses = tuple((c, s) for c in expr_children(n) if type(c) is not Op)
            for child, use in uses:
                scope_of[child] = _lca(scope_of.get(child), use)
                if use is not self.root and self.needs[child]:
                    crossing.append((use, child))
        for n in self.order:
            if type(n) not in (Var, Constant):   # leaves: their adjoints are the results
                scope_of[n].nodes.append(n)
        for use, child in crossing:
            home = self.root if type(child) is Var else scope_of[child]   # parameters live at the root
            s = use
            # once a scope has it, so do the scopes between it and the node's home
            while s is not home and s.depth > home.depth and child not in s._seen:
                s.add_boundary(child)
                s = s.parent
        self.scope_of = scope_of

    # ---- adjoints ------------------------------------------------------------------------------
    def _accumulate(self, adj: dict, node, g) -> None:
        if g is None or not self.needs.get(node, False):
            return
        t = node.checked_type
        if isinstance(t, TupleType) and not isinstance(g, list):
            g = [TupleGetItem(g, i) for i in range(len(t.fields))]
        old = adj.get(node)
        adj[node] = g if old is None else _add(old, g)

    def _call_adjoints(self, call: Call, g) -> tuple:
        rule = GRADIENTS.get(call.op.name)
        if rule is None:
            raise _error(f"no gradient rule for the operator {call.op.name}", call)
        needs = tuple(self.needs[a] for a in call.args)
        out = rule(call, g, needs)
        if len(out) != len(call.args):
            raise _error(f"the gradient rule of {call.op.name} gave {len(out)} adjoints for "
                         f"{len(call.args)} inputs", call)
        return out

    def _sweep(self, scope: _Scope, result: Expr, seed, boundary: list):
        """Backward sweep over one scope (a generator: it yields the branch sweeps of an ``if`` to
        the driver, which runs them and sends back their results)."""
        adj: dict = {}
        self._accumulate(adj, result, seed)
        for n in reversed(scope.nodes):
            g = adj.pop(n, None)
            if g is None:
                continue
            kind = type(n)
            if kind is Call:
                for a, ga in zip(n.args, self._call_adjoints(n, g)):
                    self._accumulate(adj, a, ga)
            elif kind is Tuple:
                for f, gf in zip(n.fields, g):
                    self._accumulate(adj, f, gf)
            elif kind is TupleGetItem:
                parts = [None] * len(n.tuple_value.checked_type.fields)
                parts[n.index] = g
                self._accumulate(adj, n.tuple_value, parts)
            elif kind is If:
                t_scope, f_scope = self.branches[n]
                reads = _union(t_scope.boundary, f_scope.boundary)
                t_adj = yield (t_scope, n.true_branch, g, reads)
                f_adj = yield (f_scope, n.false_branch, g, reads)
                keep = [i for i in range(len(reads)) if t_adj[i] is not None or f_adj[i] is not None]
                if not keep:
                    continue
                back = If(n.cond,
                          Tuple([_materialize(t_adj[i], reads[i]) for i in keep]),
                          Tuple([_materialize(f_adj[i], reads[i]) for i in keep]))
                for j, i in enumerate(keep):
                    self._accumulate(adj, reads[i], TupleGetItem(back, j))
        return [adj.get(b) for b in boundary]

    def run(self) -> Function:
        seed = _ones_seed(self.body, self.body.checked_type)
        stack = [self._sweep(self.root, self.body, seed, list(self.params))]
        sent = None
        result = None
        while stack:
            try:
                request = stack[-1].send(sent)
            except StopIteration as done:
                stack.pop()
                sent = result = done.value
                continue
            stack.append(self._sweep(*request))
            sent = None
        grads = [_materialize(g, p) for g, p in zip(result, self.params)]
        return Tuple([self.body, Tuple(grads)])


def _union(a: list, b: list) -> list:
    seen = set(a)
    return list(a) + [x for x in b if x not in seen]


def _add(a, b):
    """The sum of two adjoints (expressions or field lists)."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, list) or isinstance(b, list):
        return [_add(x, y) for x, y in zip(a, b)]
    return _op.add(a, b)


def _materialize(g, node: Expr, t=None) -> Expr:
    """An adjoint as an expression of ``node``'s type (``t``): zeros where it is None."""
    t = node.checked_type if t is None else t
    if g is None:
        return _zeros_of_type(t, node)
    if isinstance(t, TupleType) and isinstance(g, list):
        return Tuple([_materialize(gi, TupleGetItem(node, i), ft)
                      for i, (gi, ft) in enumerate(zip(g, t.fields))])
    return g


# =============================================================================================
# Entry points


def gradient(func: Function, mod=None) -> Function:
    """The gradient function of ``func``: ``fn(x1..xn) -> (T, (dT/dx1, ..., dT/dxn))``.

    ``func`` may be untyped; it is typed (in ``mod``, for globals it mentions) first. The result
    is untyped, in graph form, and shares the forward nodes. See the module docstring for what is
    supported.

    >>> import relaybench as rb
    >>> from relaybench import op
    >>> x, w = rb.var("x", shape=(1, 4)), rb.var("w", shape=(2, 4))
    >>> g = gradient(rb.Function([x, w], op.nn.relu(op.nn.dense(x, w))))
    >>> run = rb.create_executor("interpreter", mod=rb.IRModule.from_expr(g)).evaluate()
    >>> out, (dx, dw) = run(np.ones((1, 4), "float32"), np.full((2, 4), 0.5, "float32"))
    >>> out.tolist(), dx.tolist(), dw.tolist()
    ([[2.0, 2.0]], [[1.0, 1.0, 1.0, 1.0]], [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    """
    from ..ir.type_infer import infer_expr
    if not isinstance(func, Function):
        raise TypeError(f"gradient() takes a Function, got {type(func).__name__}")
    if func.attrs.get("Primitive"):
        raise _error("cannot differentiate a Primitive (fused) function", func)
    bound, nodes = _check_supported(func)
    body = func.body
    if bound:
        body = _InlineLets(bound).visit(func.body)
        nodes = post_order(body)
    if any(n.type_or_none is None for n in nodes if type(n) is not Op) or \
            any(p.type_or_none is None for p in func.params):
        infer_expr(Function(func.params, body, func.ret_type, func.type_params, func.attrs), mod)
    out = body.checked_type
    if not _has_float(out):
        raise _error(f"the output has no floating-point value to differentiate ({out})", func)
    new_body = _Differentiator(tuple(func.params), body, nodes).run()
    return Function(func.params, new_body, None, func.type_params, func.attrs)


# =============================================================================================
# Relay's std/gradient.rly

_GRADIENT_STD: list = []


def import_gradient_cells(mod=None):
    """``mod`` with Relay's gradient helpers added (a new module when ``mod`` is None), as Relay's
    ``mod.import_from_std("gradient.rly")``; returns the module. Importing them twice is harmless.

    They are Relay text shipped in ``relaybench/ir/std/gradient.rly``: the ADT
    ``GradCell[T] = Raw(T) | One(fn () -> T) | Zero(fn () -> T)``, an adjoint kept either as a
    value or as a thunk for the ones and zeros that need no arithmetic, and ``@FromGradCell`` (the
    value, a thunk forced), ``@AddGradCell(add, l, r)`` and ``@MultiplyGradCell(multiply, l, r)``,
    which hand a cell on untouched where a zero or a one makes the arithmetic needless.

    >>> import relaybench as rb
    >>> mod = import_gradient_cells()
    >>> [c.name_hint for c in mod.get_type("GradCell").constructors]
    ['Raw', 'One', 'Zero']
    >>> mod["AddGradCell"].checked_type
    fn [T](fn (T, T) -> T, GradCell[T], GradCell[T]) -> GradCell[T]
    """
    from ..ir.module import IRModule
    if mod is None:
        mod = IRModule()
    if "GradCell" in mod and "AddGradCell" in mod:
        return mod
    if not _GRADIENT_STD:
        from importlib import resources
        from ..ir.parser import parse
        from ..ir.type_infer import infer_module
        text = (resources.files("relaybench.ir") / "std" / "gradient.rly").read_text()
        _GRADIENT_STD.append(infer_module(parse(text, "gradient.rly")))
    mod.update(_GRADIENT_STD[0])
    return mod


@module_pass(opt_level=4)
def Gradient(mod, ctx, *, func_name: str = "main"):
    """Replace ``@func_name`` by its gradient function (reverse-mode AD, first order).

    The function's type changes by design: ``fn(x1..xn) -> T`` becomes
    ``fn(x1..xn) -> (T, (dT/dx1, ..., dT/dxn))``. Its opt_level is 4 so the default pipelines never
    run it; ask for it by name or call it directly.

    >>> import relaybench as rb
    >>> x = rb.var("x", shape=(2,))
    >>> mod = Gradient()(rb.IRModule.from_expr(rb.Function([x], x * x)))
    >>> mod["main"].checked_type
    fn (Tensor[(2), float32]) -> (Tensor[(2), float32], (Tensor[(2), float32],))
    """
    mod = typed(mod)
    if func_name not in mod:
        raise RelayError(f"Gradient: the module has no function @{func_name}")
    new = mod.copy()
    new[func_name] = gradient(mod[func_name], mod)
    return new
