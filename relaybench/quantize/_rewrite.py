"""The forward rewriter QuantizeAnnotate and QuantizeRealize share (Relay's ``ForwardRewrite``).

Both passes walk a function's body children first, with an explicit stack, and give each node a
*value*: an expression, or a temporary that carries more than an expression (an annotated value
and its kind; a realized integer value and its scale). A rule, found by the call's operator
name, maps a call and the values of its arguments to the call's value; a call without a rule,
or whose rule declines (returns None), gets its arguments *realized* (each temporary turned back
into a plain expression) and is rebuilt on them. A tuple keeps its fields' temporaries, so a
rule of ``concatenate`` sees them; any other use of a tuple realizes it. The body's value is
realized last.

Only dataflow programs are rewritten: ``let``, ``if``, ``match``, references and closures are
reported as errors naming the node (run ToGraphNormalForm first, or quantize the dataflow
functions).
"""

from __future__ import annotations

from typing import Callable

from ..ir.expr import (Call, Constant, Expr, Function, GlobalVar, Op, Tuple, TupleGetItem, Var,
                       expr_children)
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

    for node in post_order(func.body, _dataflow_children(pass_name)):
        if isinstance(node, (Var, Constant, GlobalVar, Op)):
            values[node] = node
        elif isinstance(node, Tuple):
            fields = [arg_value(f) for f in node.fields]
            if any(isinstance(f, TempExpr) for f in fields):
                values[node] = PendingTuple(fields, node)
            else:
                values[node] = node if all(f is g for f, g in zip(fields, node.fields)) else Tuple(fields)
        elif isinstance(node, TupleGetItem):
            tup = realize(arg_value(node.tuple_value))
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
                op = values.get(node.op, node.op)
                if all(a is b for a, b in zip(new_args, node.args)) and op is node.op:
                    out = node
                else:
                    out = Call(op, new_args, node.attrs, node.type_args)
            values[node] = out
    return realize(values[func.body])


def _dataflow_children(pass_name: str):
    def children(node):
        if isinstance(node, (Var, Constant, GlobalVar, Op, Tuple, TupleGetItem)):
            return expr_children(node)
        if isinstance(node, Call):
            if isinstance(node.op, (Op, GlobalVar)):
                return list(node.args)
            raise ValueError(f"{pass_name}: a call of {type(node.op).__name__} is not supported; "
                             f"only dataflow programs (calls of operators and global functions) "
                             f"are quantized")
        raise ValueError(f"{pass_name}: {type(node).__name__} nodes are not supported; only "
                         f"dataflow programs are quantized (run ToGraphNormalForm first)")
    return children
