"""The forward rewriter QuantizeAnnotate and QuantizeRealize share (Relay's ``ForwardRewrite``).

Both passes walk a function's body children first, with an explicit stack, and give each node a
*value*: an expression, or a temporary that carries more than an expression (an annotated value
and its kind; a realized integer value and its scale). A rule, found by the call's operator
name, maps a call and the values of its arguments to the call's value; a call without a rule,
or whose rule declines (returns None), gets its arguments *realized* (each temporary turned back
into a plain expression) and is rebuilt on them. A tuple keeps its fields' temporaries, so a
rule of ``concatenate`` sees them; any other use of a tuple realizes it. The body's value is
realized last.

Control flow is a boundary: ``let``, ``if``, ``match``, references and closures are rebuilt
on the realized values of their parts, so a temporary never crosses one (a value bound by a
``let``, a branch's result, a closure's body, a match clause's result are realized there), and
the dataflow inside each part (a clause's body, a closure's body, the value of a ``let``) is
rewritten by the same rules. A call of a closure, a constructor or a global function realizes its
arguments.
"""

from __future__ import annotations

from typing import Callable

from ..ir.expr import (Call, Clause, Expr, Function, If, Let, Match, Op, RefCreate, RefRead,
                       RefWrite, Tuple, TupleGetItem, expr_children)
from ..ir.functor import post_order

__all__ = ["TempExpr", "PendingTuple", "forward_rewrite", "use_counts"]


class TempExpr:
    """A value that is not a plain expression; :meth:`realize` makes it one."""

    def realize(self) -> Expr:
        raise NotImplementedError


class PendingTuple(TempExpr):
    """A tuple whose fields are values (some of them temporaries)."""

    def __init__(self, fields: list, ref: Tuple):
        self.fields, self.ref = fields, ref

    def realize(self) -> Expr:
        return Tuple([realize(f) for f in self.fields])


def realize(value) -> Expr:
    return value.realize() if isinstance(value, TempExpr) else value


def use_counts(body: Expr) -> dict:
    """How many times each node is used as a child (Relay's reference counts)."""
    counts: dict = {}
    for node in post_order(body):
        for child in expr_children(node):
            counts[child] = counts.get(child, 0) + 1
    return counts


def forward_rewrite(func: Function, pass_name: str, rule_of: Callable, multi_ref=None) -> Expr:
    """The rewritten (realized) body of ``func``.

    ``rule_of(op_name)`` gives the rule of an operator or None; a rule is
    ``rule(call, values) -> value or None``. ``multi_ref(value)``, when given, replaces the
    value of a node used more than once before each use (Relay's ``fmulti_ref``).
    """
    counts = use_counts(func.body) if multi_ref is not None else {}
    values: dict = {}

    def arg_value(node):
        value = values[node]
        if multi_ref is not None and counts.get(node, 0) > 1 and isinstance(value, TempExpr) \
                and not isinstance(value, PendingTuple):
            value = multi_ref(value)
        return value

    def plain(node):
        return realize(arg_value(node))

    for node in post_order(func.body):
        if isinstance(node, Tuple):
            fields = [arg_value(f) for f in node.fields]
            if any(isinstance(f, TempExpr) for f in fields):
                values[node] = PendingTuple(fields, node)
            else:
                values[node] = node if all(f is g for f, g in zip(fields, node.fields)) else Tuple(fields)
        elif isinstance(node, TupleGetItem):
            tup = plain(node.tuple_value)
            values[node] = node if tup is node.tuple_value else TupleGetItem(tup, node.index)
        elif isinstance(node, Call):
            args = [arg_value(a) for a in node.args]
            out = None
            if isinstance(node.op, Op):
                rule = rule_of(node.op.name)
                if rule is not None:
                    out = rule(node, args)
            if out is None:
                new_args = [realize(a) for a in args]
                op = plain(node.op)
                if all(a is b for a, b in zip(new_args, node.args)) and op is node.op:
                    out = node
                else:
                    out = Call(op, new_args, node.attrs, node.type_args)
            values[node] = out
        elif type(node) in _REBUILD:
            values[node] = _REBUILD[type(node)](node, plain)
        else:   # variables, constants, global variables, operators, constructors
            values[node] = node
    return realize(values[func.body])


def _same(node, new, old) -> bool:
    return all(a is b for a, b in zip(new, old))


def _let(node, plain):
    value, body = plain(node.value), plain(node.body)
    return node if value is node.value and body is node.body else Let(node.var, value, body)


def _if(node, plain):
    parts = [plain(e) for e in (node.cond, node.true_branch, node.false_branch)]
    return node if _same(node, parts, (node.cond, node.true_branch, node.false_branch)) else If(*parts)


def _match(node, plain):
    data = plain(node.data)
    rhs = [plain(c.rhs) for c in node.clauses]
    if data is node.data and _same(node, rhs, [c.rhs for c in node.clauses]):
        return node
    return Match(data, [Clause(c.lhs, r) for c, r in zip(node.clauses, rhs)], node.complete)


def _function(node, plain):
    body = plain(node.body)
    return node if body is node.body else Function(node.params, body, node.ret_type,
                                                   node.type_params, node.attrs)


_REBUILD = {
    Let: _let, If: _if, Match: _match, Function: _function,
    RefCreate: lambda n, plain: n if plain(n.value) is n.value else RefCreate(plain(n.value)),
    RefRead: lambda n, plain: n if plain(n.ref) is n.ref else RefRead(plain(n.ref)),
    RefWrite: lambda n, plain: (n if plain(n.ref) is n.ref and plain(n.value) is n.value
                                else RefWrite(plain(n.ref), plain(n.value))),
}
