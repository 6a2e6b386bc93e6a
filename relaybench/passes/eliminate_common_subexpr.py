"""EliminateCommonSubexpr: compute each repeated expression once (Relay's ``eliminate_common_subexpr.cc``).

Walking the program in evaluation order, bottom-up, a call of a primitive operator is replaced by
an earlier call of the same operator with equal attributes and the same (already merged)
arguments; arguments compare by identity, except constants, which compare by value (dtype, shape
and bytes), and tuples, which compare field by field. A projection ``%t.i`` is replaced by an
earlier ``%t.i``. In let-bound code, ``let %y = e`` where ``e`` equals the value of an earlier
``let %x`` drops the binding and uses ``%x`` for ``%y``; a later ``e`` in graph form becomes
``%x`` too.

Scopes: an expression may reuse one from its own scope or an enclosing one, which was computed
before it on every path that reaches it, never one from a sibling scope. The scopes are function
bodies, the branches of an ``if`` and the clauses of a ``match``; so two equal calls in the two
branches of an ``if`` stay two calls, and nothing is hoisted out of a branch or a closure. A node
shared by sibling scopes (graph form allows it) is rewritten in each of them separately.

Not merged, as in Relay: calls without arguments, calls of functions, closures and constructors
(they may have effects), and operators listed in :data:`NOT_MERGED` (annotations, and stateful
operators such as ``nn.dropout``). ``Primitive`` functions are left alone.

``fskip`` (Relay's ``EliminateCommonSubexpr(fskip=None)``, also the first positional option) is a
predicate on an operator call, with its arguments already merged: a call it holds true for is
neither replaced by an earlier one nor offered to later ones, e.g.
``EliminateCommonSubexpr(lambda call: call.op.name == "nn.dropout")``.

>>> import relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(4), float32]) {
...   %0 = add(%x, 1f);
...   %1 = add(%x, 1f);
...   multiply(nn.relu(%0), nn.relu(%1))
... }''')
>>> print(EliminateCommonSubexpr()(mod)["main"].astext(show_types=False))
fn (%x: Tensor[(4), float32]) -> Tensor[(4), float32] {
  %0 = add(%x, 1f);
  %1 = nn.relu(%0);
  multiply(%1, %1)
}
"""

from __future__ import annotations

from collections import ChainMap
from typing import Callable, Optional

import numpy as np

from ..ir.expr import (Call, Clause, Constant, Expr, Function, If, Let, Match, Op, Tuple, TupleGetItem, Var,
                       expr_children)
from ..ir.functor import ExprMutator
from .fold_constant import NOT_FOLDED
from .infra import function_pass

__all__ = ["EliminateCommonSubexpr", "eliminate_common_subexpr", "NOT_MERGED"]

# operators whose calls are never merged: annotations, whose identity is their meaning, and
# stateful operators, whose two calls are two different values
NOT_MERGED = NOT_FOLDED


class _Eliminator(ExprMutator):
    def __init__(self, fskip: Optional[Callable] = None):
        super().__init__()
        self.fskip = fskip
        self.scopes: list = [{}]  # one table per scope: key -> the expression to reuse
        self.const_keys: dict = {}  # Constant -> its value key
        self.by_value: dict = {}  # sampled value key -> [(Constant, its bytes)], distinct values

    # ---- traversal: scopes are entered by the handlers, in evaluation order ------------------
    def children_to_visit(self, expr: Expr):
        cls = type(expr)
        if cls is Let or cls is Function:
            return ()
        if cls is If:
            return (expr.cond,)
        if cls is Match:
            return (expr.data,)
        return expr_children(expr)

    def _enter(self):
        """Open a scope: a table of its own, and results of its own. A node shared by two sibling
        scopes is rewritten in each, so what one scope merged into (a variable it binds, say)
        never leaks into the other."""
        saved = self.memo
        self.scopes.append({})
        self.memo = saved.new_child() if isinstance(saved, ChainMap) else ChainMap({}, saved)
        return saved

    def _leave(self, saved) -> None:
        self.scopes.pop()
        self.memo = saved

    def _in_scope(self, expr: Expr) -> Expr:
        saved = self._enter()
        try:
            return self.visit(expr)
        finally:
            self._leave(saved)

    def visit_function(self, fn):
        if fn.is_primitive:
            return fn
        if len(self.scopes) == 1:  # the function being optimized: the outermost scope
            self.scopes.append({})
            try:
                return super().visit_function(fn)
            finally:
                self.scopes.pop()
        saved = self._enter()
        try:
            return super().visit_function(fn)
        finally:
            self._leave(saved)

    def visit_if(self, node):
        cond = self.visit(node.cond)
        then = self._in_scope(node.true_branch)
        otherwise = self._in_scope(node.false_branch)
        if cond is node.cond and then is node.true_branch and otherwise is node.false_branch:
            return node
        return If(cond, then, otherwise).with_span(node.span)

    def visit_match(self, match):
        data = self.visit(match.data)
        clauses, changed = [], data is not match.data
        for c in match.clauses:
            rhs = self._in_scope(c.rhs)
            changed |= rhs is not c.rhs
            clauses.append(c if rhs is c.rhs else Clause(c.lhs, rhs))
        return Match(data, clauses, match.complete).with_span(match.span) if changed else match

    def visit_let(self, let):
        kept = []
        table = self.scopes[-1]
        node = let
        while isinstance(node, Let):
            value = self.visit(node.value)
            if isinstance(value, Var) and not isinstance(node.value, Var):
                self.memo[node.var] = value  # an earlier binding computes the same value
            else:
                key = self._key(value)
                if key is not None:
                    table[key] = node.var  # later equal expressions in this scope use the variable
                kept.append((node, value))
            node = node.body
        body = self.visit(node)
        for old, value in reversed(kept):
            if value is old.value and body is old.body:
                body = old
            else:
                body = Let(old.var, value, body).with_span(old.span)
        return body

    # ---- merging -----------------------------------------------------------------------------
    def visit_call(self, call):
        return self._merge(super().visit_call(call))

    def visit_tuple_getitem(self, node):
        return self._merge(super().visit_tuple_getitem(node))

    def _merge(self, new: Expr) -> Expr:
        key = self._key(new)
        if key is None:
            return new
        for table in reversed(self.scopes):
            found = table.get(key)
            if found is not None:
                return found
        self.scopes[-1][key] = new
        return new

    def _key(self, e: Expr):
        """What two mergeable expressions have in common; None for what is never merged."""
        if isinstance(e, Call):
            op = e.op
            if not isinstance(op, Op) or not e.args or op.name in NOT_MERGED:
                return None
            if self.fskip is not None and self.fskip(e):
                return None
            return ("call", op, e.attrs, tuple(self._arg_key(a) for a in e.args))
        if isinstance(e, TupleGetItem):
            return ("get", self._arg_key(e.tuple_value), e.index)
        return None

    def _arg_key(self, a: Expr):
        if isinstance(a, Constant):
            return self._const_key(a)
        if isinstance(a, Tuple):
            return ("tuple",) + tuple(self._arg_key(f) for f in a.fields)
        return a

    def _const_key(self, c: Constant):
        key = self.const_keys.get(c)
        if key is None:
            # constants are equal when their dtype, shape and bytes are; a sample of the bytes
            # finds the candidates, so a network's weights are not copied and hashed whole
            data = c.data
            flat = _bytes_of(data)
            step = max(1, flat.size // 256)
            value = ("const", data.dtype.name, data.shape, flat[::step][:256].tobytes(),
                     flat[-64:].tobytes())
            bucket = self.by_value.setdefault(value, [])
            key = next((other for other, other_flat in bucket
                        if other_flat.size == flat.size and bool((other_flat == flat).all())),
                       None)
            if key is None:
                key = c
                bucket.append((c, flat))
            self.const_keys[c] = key
        return key


def _bytes_of(data: np.ndarray) -> np.ndarray:
    """The bytes of ``data`` in C order, as a flat uint8 array (a view when it is contiguous)."""
    return np.ascontiguousarray(data).reshape(-1).view(np.uint8)


def eliminate_common_subexpr(func: Function, fskip: Optional[Callable] = None) -> Function:
    """``func`` with repeated expressions computed once; the same object when there are none.

    ``fskip(call)`` true exempts an operator call from merging (see the module's docstring)."""
    if fskip is not None and not callable(fskip):
        raise TypeError(f"EliminateCommonSubexpr: fskip must be a predicate on a Call or None, "
                        f"not {fskip!r}")
    return _Eliminator(fskip).visit(func)


@function_pass(opt_level=3)
def EliminateCommonSubexpr(func, mod, ctx, fskip: Optional[Callable] = None):
    """Replace each call or projection equal to an earlier one in scope by that earlier one.

    ``fskip``: a predicate on a Call; the calls it holds true for are not merged."""
    return eliminate_common_subexpr(func, fskip)
