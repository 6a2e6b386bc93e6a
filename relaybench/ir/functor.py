"""Visitors and mutators over expressions, memoized by identity and free of Python recursion.

Both classes are written in the familiar recursive style: ``visit_call(self, call)`` calls
``self.visit(arg)`` on its children. What makes them safe on programs of any depth is the
driver in :meth:`ExprFunctor.visit`: before a node's handler runs, every child the handler may
ask for has already been visited in post-order with an explicit stack, so ``self.visit(child)``
inside a handler is a memo lookup, never a recursive descent.

A subclass that must not descend somewhere (into ``Primitive`` functions, say) overrides
:meth:`ExprFunctor.children_to_visit`.

>>> from relaybench.ir import var, const, Function
>>> class CountCalls(ExprVisitor):
...     def __init__(self):
...         super().__init__()
...         self.count = 0
...     def visit_call(self, call):
...         self.count += 1
...         super().visit_call(call)
>>> x = var("x", shape=(2,))
>>> y = x
>>> for _ in range(100000):
...     y = y + const(1.0)
>>> counter = CountCalls()
>>> counter.visit(Function([x], y))
>>> counter.count
100000
"""

from __future__ import annotations

from .expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If, Let, Match,
                   Op, Pattern, PatternConstructor, PatternTuple, PatternVar, PatternWildcard,
                   RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var, expr_children)

__all__ = ["ExprFunctor", "ExprVisitor", "ExprMutator", "FusedAwareMutator", "post_order_visit",
           "post_order"]


_METHOD = {
    Var: "visit_var", GlobalVar: "visit_global_var", Constant: "visit_constant", Tuple: "visit_tuple",
    TupleGetItem: "visit_tuple_getitem", Function: "visit_function", Call: "visit_call",
    Let: "visit_let", If: "visit_if", Match: "visit_match", Constructor: "visit_constructor",
    RefCreate: "visit_ref_create", RefRead: "visit_ref_read", RefWrite: "visit_ref_write", Op: "visit_op",
}


class ExprFunctor:
    """Dispatches on the node's class to ``visit_<kind>``; results are memoized per node."""

    def __init__(self):
        self.memo: dict = {}

    def children_to_visit(self, expr: Expr):
        """The children visited (in post-order) before ``expr``'s handler runs."""
        return expr_children(expr)

    def visit(self, expr: Expr):
        memo = self.memo
        if expr in memo:
            return memo[expr]
        children_to_visit = self.children_to_visit
        stack = [(expr, False)]
        while stack:
            node, expanded = stack.pop()
            if node in memo:
                continue
            if expanded:
                memo[node] = self._dispatch(node)
                continue
            stack.append((node, True))
            kids = children_to_visit(node)
            for child in reversed(kids):
                if child not in memo:
                    stack.append((child, False))
        return memo[expr]

    def _dispatch(self, node: Expr):
        name = _METHOD.get(type(node))
        if name is None:
            for cls in type(node).__mro__:
                name = _METHOD.get(cls)
                if name:
                    break
            else:
                raise TypeError(f"{type(self).__name__} cannot visit {type(node).__name__}")
        return getattr(self, name)(node)

    # patterns are shallow (bounded by the source's nesting), so they are visited directly
    def visit_pattern(self, pattern: Pattern):
        return pattern


class ExprVisitor(ExprFunctor):
    """Visits every node once. Override ``visit_<kind>`` and call ``super()`` to keep walking."""

    def visit_var(self, var): pass
    def visit_global_var(self, gv): pass
    def visit_constant(self, const): pass
    def visit_op(self, op): pass
    def visit_constructor(self, con): pass

    def visit_tuple(self, tup):
        for f in tup.fields:
            self.visit(f)

    def visit_tuple_getitem(self, node):
        self.visit(node.tuple_value)

    def visit_function(self, fn):
        for p in fn.params:
            self.visit(p)
        self.visit(fn.body)

    def visit_call(self, call):
        self.visit(call.op)
        for a in call.args:
            self.visit(a)

    def visit_let(self, let):
        self.visit(let.var)
        self.visit(let.value)
        self.visit(let.body)

    def visit_if(self, node):
        self.visit(node.cond)
        self.visit(node.true_branch)
        self.visit(node.false_branch)

    def visit_match(self, match):
        self.visit(match.data)
        for c in match.clauses:
            self.visit_pattern(c.lhs)
            self.visit(c.rhs)

    def visit_ref_create(self, node):
        self.visit(node.value)

    def visit_ref_read(self, node):
        self.visit(node.ref)

    def visit_ref_write(self, node):
        self.visit(node.ref)
        self.visit(node.value)


def _same(a, b) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


class ExprMutator(ExprFunctor):
    """Rebuilds the program bottom-up; a node whose children did not change is returned as is.

    Variables map to themselves unless a handler or a pre-filled ``memo`` entry says otherwise,
    so substituting ``%x`` by ``e`` is ``m.memo[x] = e; m.visit(body)``.
    """

    def visit_var(self, var): return var
    def visit_global_var(self, gv): return gv
    def visit_constant(self, const): return const
    def visit_op(self, op): return op
    def visit_constructor(self, con): return con

    def visit_tuple(self, tup):
        fields = tuple(self.visit(f) for f in tup.fields)
        return tup if _same(fields, tup.fields) else Tuple(fields).with_span(tup.span)

    def visit_tuple_getitem(self, node):
        t = self.visit(node.tuple_value)
        return node if t is node.tuple_value else TupleGetItem(t, node.index).with_span(node.span)

    def visit_function(self, fn):
        params = tuple(self.visit(p) for p in fn.params)
        body = self.visit(fn.body)
        if body is fn.body and _same(params, fn.params):
            return fn
        return Function(params, body, fn.ret_type, fn.type_params, fn.attrs).with_span(fn.span)

    def visit_call(self, call):
        op = self.visit(call.op)
        args = tuple(self.visit(a) for a in call.args)
        if op is call.op and _same(args, call.args):
            return call
        return Call(op, args, call.attrs, call.type_args).with_span(call.span)

    def visit_let(self, let):
        var = self.visit(let.var)
        value = self.visit(let.value)
        body = self.visit(let.body)
        if var is let.var and value is let.value and body is let.body:
            return let
        return Let(var, value, body).with_span(let.span)

    def visit_if(self, node):
        c, t, f = self.visit(node.cond), self.visit(node.true_branch), self.visit(node.false_branch)
        if c is node.cond and t is node.true_branch and f is node.false_branch:
            return node
        return If(c, t, f).with_span(node.span)

    def visit_match(self, match):
        data = self.visit(match.data)
        clauses = []
        changed = data is not match.data
        for c in match.clauses:
            lhs = self.visit_pattern(c.lhs)
            rhs = self.visit(c.rhs)
            if lhs is c.lhs and rhs is c.rhs:
                clauses.append(c)
            else:
                changed = True
                clauses.append(Clause(lhs, rhs))
        return Match(data, clauses, match.complete).with_span(match.span) if changed else match

    def visit_pattern(self, pattern):
        if isinstance(pattern, PatternVar):
            v = self.visit(pattern.var)
            return pattern if v is pattern.var else PatternVar(v)
        if isinstance(pattern, (PatternConstructor, PatternTuple)):
            subs = tuple(self.visit_pattern(p) for p in pattern.patterns)
            if _same(subs, pattern.patterns):
                return pattern
            if isinstance(pattern, PatternTuple):
                return PatternTuple(subs)
            return PatternConstructor(pattern.constructor, subs)
        return pattern

    def visit_ref_create(self, node):
        v = self.visit(node.value)
        return node if v is node.value else RefCreate(v).with_span(node.span)

    def visit_ref_read(self, node):
        r = self.visit(node.ref)
        return node if r is node.ref else RefRead(r).with_span(node.span)

    def visit_ref_write(self, node):
        r, v = self.visit(node.ref), self.visit(node.value)
        return node if r is node.ref and v is node.value else RefWrite(r, v).with_span(node.span)


class FusedAwareMutator(ExprMutator):
    """An :class:`ExprMutator` that leaves fused (``Primitive=1``) functions as they are: it
    neither descends into them nor rebuilds them, as Relay's passes after FuseOps do. Subclasses
    that narrow :meth:`children_to_visit` further call ``super()`` for the other nodes."""

    def children_to_visit(self, expr: Expr):
        if isinstance(expr, Function) and expr.is_primitive:
            return ()
        return expr_children(expr)

    def visit_function(self, fn):
        return fn if fn.is_primitive else super().visit_function(fn)


def post_order(expr: Expr, children=expr_children) -> list:
    """Every node reachable from ``expr``, each once, children before parents.

    ``children(node)`` gives the nodes to descend into (all of a node's children by default; a
    walk that must not enter fused functions passes its own).
    """
    out = []
    seen = set()
    stack = [(expr, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            out.append(node)
            continue
        if node in seen:
            continue
        seen.add(node)
        stack.append((node, True))
        for child in reversed(children(node)):
            if child not in seen:
                stack.append((child, False))
    return out


def post_order_visit(expr: Expr, fn) -> None:
    """Call ``fn(node)`` on every node reachable from ``expr``, children first, each once."""
    for node in post_order(expr):
        fn(node)


# keep the pattern classes importable from here for subclasses that visit patterns
_ = (PatternWildcard, PatternConstructor, PatternTuple)
