"""The Python builder: Relay programs written the way Relay's Python API writes them.

>>> import relaybench as rb
>>> from relaybench import op
>>> x = rb.var("x", shape=(1, 3), dtype="float32")
>>> y = op.nn.relu(x * rb.const(2.0))
>>> print(rb.Function([x], y).astext(show_types=False))
fn (%x: Tensor[(1, 3), float32]) {
  %0 = multiply(%x, 2f);
  nn.relu(%0)
}

A :class:`ScopeBuilder` writes let-chains and ifs in statement order:

>>> sb = ScopeBuilder()
>>> t = sb.let("t", x + x)
>>> sb.ret(t * t)
>>> print(rb.Function([x], sb.get()).astext(show_types=False))
fn (%x: Tensor[(1, 3), float32]) {
  let %t = add(%x, %x);
  multiply(%t, %t)
}
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from .adt import TypeData, define_adt
from .expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If, Let, Match,
                   PatternConstructor, PatternTuple, PatternVar, PatternWildcard, RefCreate, RefRead,
                   RefWrite, Tuple, TupleGetItem, Var)
from .types import IncompleteType, TensorType, Type, TypeVar

__all__ = ["var", "const", "as_expr", "tuple_", "let", "if_", "ScopeBuilder", "define_adt",
           "type_var", "tensor_type", "bind"]


def tensor_type(shape, dtype: str = "float32") -> TensorType:
    return TensorType(tuple(shape), dtype)


def var(name: str, type_annotation: Optional[Type] = None, shape=None, dtype: str = "float32") -> Var:
    """A new variable ``%name``; give either a type or a ``shape`` (and ``dtype``).

    Shape entries may be ints, names of symbolic dims (``"n"``) or ``None`` for Any.
    With neither, the variable's type is left to inference.
    """
    if type_annotation is not None and shape is not None:
        raise ValueError("give var() either a type annotation or a shape, not both")
    if isinstance(type_annotation, str):
        type_annotation = TensorType((), type_annotation)
    if shape is not None:
        type_annotation = TensorType(tuple(shape), dtype)
    return Var(name, type_annotation)


def const(value, dtype: Optional[str] = None) -> Constant:
    """A constant. Python floats are float32 and ints int32, as in Relay; arrays keep their dtype."""
    if isinstance(value, Constant):
        return value
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        arr = np.asarray(value)
    elif isinstance(value, bool):
        arr = np.asarray(value, dtype="bool")
    elif isinstance(value, int):
        arr = np.asarray(value, dtype="int32")
    elif isinstance(value, float):
        arr = np.asarray(value, dtype="float32")
    else:
        arr = np.asarray(value)
        if arr.dtype == np.float64:
            arr = arr.astype("float32")
        elif arr.dtype == np.int64:
            arr = arr.astype("int32")
    if dtype is not None:
        arr = arr.astype(dtype)
    return Constant(arr)


def as_expr(value) -> Expr:
    """An expression from a Python value: expressions pass, sequences of expressions become a
    Tuple, numbers and arrays become constants."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, (list, tuple)) and any(isinstance(v, Expr) for v in value):
        return Tuple([as_expr(v) for v in value])
    if isinstance(value, (int, float, bool, list, tuple, np.ndarray, np.generic)):
        return const(value)
    raise TypeError(f"cannot make an expression from {type(value).__name__} {value!r:.60}")


def bind(expr: Expr, binds: dict) -> Expr:
    """Substitute free variables, as Relay's ``relay.bind``: ``binds`` maps a :class:`Var` to
    an expression (or a number or array, made a constant).

    On a :class:`Function`, binding a parameter substitutes it in the body and removes it from
    the parameters; the free variables the substituted values bring in that the function did not
    have become new parameters at the end (Relay does the same, so the result stays closed when
    the function was). Binding a variable bound inside ``expr`` (a let variable, an inner
    function's parameter, a pattern variable) is a ValueError naming it. The program is walked
    without recursion.

    >>> x, y = var("x", shape=(2,)), var("y", shape=(2,))
    >>> f = Function([x, y], x + y)
    >>> print(bind(f, {y: const(np.ones(2, "float32"))}).astext(show_types=False, show_meta_data=False))
    fn (%x: Tensor[(2), float32]) {
      add(%x, meta[relay.Constant][0])
    }
    >>> print(bind(x * y, {x: y}).astext(show_types=False))
    free_var %y: Tensor[(2), float32];
    multiply(%y, %y)
    """
    from .analysis import bound_vars, free_vars
    from .functor import ExprMutator
    if not isinstance(expr, Expr):
        raise TypeError(f"bind substitutes in an expression, not {type(expr).__name__}")
    values = {}
    for v, value in binds.items():
        if not isinstance(v, Var):
            raise TypeError(f"bind: a key must be a Var, not {type(v).__name__} {v!r:.60}")
        values[v] = as_expr(value)
    is_fn = isinstance(expr, Function)
    params = set(expr.params) if is_fn else set()
    inner = [v for v in bound_vars(expr) if v in values and v not in params]
    if inner:
        raise ValueError(f"bind: %{inner[0].name_hint} is bound inside the expression (by a let, "
                         "an inner function or a pattern); only free variables and the "
                         "function's own parameters can be bound")
    mutator = ExprMutator()
    mutator.memo.update(values)
    if not is_fn:
        return mutator.visit(expr)
    body = mutator.visit(expr.body)
    kept = [p for p in expr.params if p not in values]
    if body is expr.body and len(kept) == len(expr.params):
        return expr
    fn = Function(kept, body, expr.ret_type, expr.type_params, expr.attrs).with_span(expr.span)
    before = set(free_vars(expr))
    extra = [v for v in free_vars(fn) if v not in before]
    if extra:
        fn = Function(kept + extra, body, expr.ret_type, expr.type_params,
                      expr.attrs).with_span(expr.span)
    return fn


def tuple_(*fields) -> Tuple:
    return Tuple([as_expr(f) for f in fields])


def let(var_: Var, value, body) -> Let:
    return Let(var_, as_expr(value), as_expr(body))


def if_(cond, then, otherwise) -> If:
    return If(as_expr(cond), as_expr(then), as_expr(otherwise))


def type_var(name: str) -> TypeVar:
    return TypeVar(name)


class ScopeBuilder:
    """Builds nested lets and ifs in statement order (Relay's ``ScopeBuilder``)."""

    def __init__(self):
        self._frames: list = [[]]  # each frame: list of (var, value) bindings, then a return
        self._ret: list = [None]

    def let(self, name_or_var, value, type_annotation: Optional[Type] = None) -> Var:
        v = name_or_var if isinstance(name_or_var, Var) else Var(name_or_var, type_annotation)
        self._frames[-1].append((v, as_expr(value)))
        return v

    def ret(self, value) -> None:
        if self._ret[-1] is not None:
            raise ValueError("this scope already returned a value")
        self._ret[-1] = as_expr(value)

    def _close(self) -> Expr:
        if self._ret[-1] is None:  # checked before popping, so the builder stays usable
            raise ValueError("scope has no return value: call ret()")
        bindings, ret = self._frames.pop(), self._ret.pop()
        body = ret
        for v, value in reversed(bindings):
            body = Let(v, value, body)
        return body

    def if_scope(self, cond):
        return _IfScope(self, as_expr(cond))

    def else_scope(self):
        pending = getattr(self, "_pending_if", None)
        if pending is None:
            raise ValueError("else_scope() must follow an if_scope()")
        return _ElseScope(self, pending)

    def get(self) -> Expr:
        if len(self._frames) != 1:
            raise ValueError("an if/else scope is still open")
        pending = getattr(self, "_pending_if", None)
        if pending is not None:
            raise ValueError("if_scope() without else_scope()")
        return self._close()


class _IfScope:
    def __init__(self, sb: ScopeBuilder, cond: Expr):
        self.sb, self.cond = sb, cond

    def __enter__(self):
        self.sb._frames.append([])
        self.sb._ret.append(None)

    def __exit__(self, *exc):
        if exc[0] is None:
            self.sb._pending_if = (self.cond, self.sb._close())
        return False


class _ElseScope:
    def __init__(self, sb: ScopeBuilder, pending):
        self.sb, self.pending = sb, pending

    def __enter__(self):
        self.sb._frames.append([])
        self.sb._ret.append(None)

    def __exit__(self, *exc):
        if exc[0] is None:
            cond, then = self.pending
            otherwise = self.sb._close()
            self.sb._pending_if = None
            self.sb.ret(If(cond, then, otherwise))
        return False


# re-exports so `from relaybench.ir.builder import *` gives the whole vocabulary
_ = (Call, Clause, Constructor, Function, GlobalVar, Match, PatternConstructor, PatternTuple,
     PatternVar, PatternWildcard, RefCreate, RefRead, RefWrite, TupleGetItem, IncompleteType,
     TypeData, Sequence)
