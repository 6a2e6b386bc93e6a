"""Well-formedness: the scoping rules every program (and every pass's output) must keep.

A module is well formed when, in each of its global functions:

* every variable that is used is bound in scope: by a parameter of an enclosing function, an
  enclosing ``let`` (its own value sees it only when that value is a function: a recursive
  closure), or a pattern of an enclosing match clause;
* no variable is bound twice (by two binders, or twice by one binder);
* every global variable names a function of the module (the very ``GlobalVar`` the module holds);
* every constructor (in calls and in patterns) belongs to a type definition of the module.

A lone expression may have free variables (they are bound outside it); the other rules hold.
Every check is iterative and memoized per node, so shared subexpressions are visited once and
programs of any depth go through.

>>> import relaybench as rb
>>> x = rb.var("x", shape=(2,))
>>> y = rb.var("y", shape=(2,))
>>> good = rb.IRModule.from_expr(rb.Function([x], rb.Let(y, x + x, y * x)))
>>> well_formed(good)
True
>>> bad = rb.IRModule.from_expr(rb.Function([x], rb.Let(x, x + x, x)))
>>> for problem in well_formed_problems(bad):
...     print(problem)
in @main: %x is bound twice (by a function parameter and by a let)
>>> outside = rb.IRModule.from_expr(rb.Function([x], rb.Tuple([rb.Let(y, x, y), y])))
>>> check_well_formed(outside)
Traceback (most recent call last):
...
relaybench.passes.well_formed.WellFormedError: in @main: %y is used outside the scope of its let
"""

from __future__ import annotations

from typing import Optional, Union

from ..errors import RelayError
from ..ir.expr import (Call, Constant, Constructor, Expr, Function, GlobalVar, Let, Match, Op,
                       PatternConstructor, PatternTuple, Var, expr_children, pattern_vars)
from ..ir.functor import post_order
from ..ir.module import IRModule

__all__ = ["WellFormedError", "well_formed", "well_formed_problems", "check_well_formed"]

_EMPTY: frozenset = frozenset()


class WellFormedError(RelayError):
    """A program breaks a scoping rule; ``problems`` lists each one in words."""

    def __init__(self, problems: list):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


def _binders(node) -> list:
    """(variable, what binds it) for each variable ``node`` binds."""
    if isinstance(node, Function):
        return [(p, "a function parameter") for p in node.params]
    if isinstance(node, Let):
        return [(node.var, "a let")]
    if isinstance(node, Match):
        return [(v, "a match pattern") for c in node.clauses for v in pattern_vars(c.lhs)]
    return []


_BINDERS = (Function, Let, Match)


def _union(sets) -> frozenset:
    nonempty = [s for s in sets if s]
    if not nonempty:
        return _EMPTY
    first = nonempty[0]
    if all(s is first for s in nonempty):
        return first
    out = set(first)
    for s in nonempty[1:]:
        out.update(s)
    return frozenset(out)


def _free_call(node, fv: dict) -> frozenset:
    op_fv = fv[node.op]
    args = node.args
    if len(args) == 1 and not op_fv:
        return fv[args[0]]
    return _union([op_fv] + [fv[a] for a in args])


def _free_function(node, fv: dict) -> frozenset:
    inner = fv[node.body]
    return inner - set(node.params) if inner else _EMPTY


def _free_let(node, fv: dict) -> frozenset:
    value = fv[node.value]  # a use in a non-function value is reported on its own
    if value and node.var in value:
        value = value - {node.var}
    body = fv[node.body]
    if body and node.var in body:
        body = body - {node.var}
    return _union((value, body))


def _free_match(node, fv: dict) -> frozenset:
    parts = [fv[node.data]]
    for c in node.clauses:
        rhs = fv[c.rhs]
        bound = pattern_vars(c.lhs)
        parts.append(rhs - set(bound) if rhs and bound else rhs)
    return _union(parts)


def _free_leaf(node, fv: dict) -> frozenset:
    return _EMPTY


def _free_children(node, fv: dict) -> frozenset:
    return _union([fv[c] for c in expr_children(node)])


# node class -> the free variables of a node from those of its children (already in ``fv``)
_FREE = {Call: _free_call, Function: _free_function, Let: _free_let, Match: _free_match,
         Constant: _free_leaf, Op: _free_leaf, GlobalVar: _free_leaf, Constructor: _free_leaf}


def _name(v: Var) -> str:
    return "%" + v.name_hint


def _pattern_constructors(pattern) -> list:
    out, stack = [], [pattern]
    while stack:
        p = stack.pop()
        if isinstance(p, PatternConstructor):
            out.append(p.constructor)
            stack.extend(p.patterns)
        elif isinstance(p, PatternTuple):
            stack.extend(p.patterns)
    return out


def _check_root(root: Expr, where: str, mod: Optional[IRModule], closed: bool, problems: list) -> None:
    nodes = post_order(root)
    binder_of: dict = {}   # Var -> (binder node, what)
    fv: dict = {}
    seen_globals: set = set()
    seen_constructors: set = set()
    module_types = mod.type_definitions if mod is not None else None
    twice: set = set()
    for node in reversed(nodes):  # binders outside first
        if type(node) not in _BINDERS:
            continue
        for v, what in _binders(node):
            old = binder_of.get(v)
            if old is None:
                binder_of[v] = (node, what)
            else:
                twice.add(v)
                problems.append(f"{where}{_name(v)} is bound twice (by {old[1]} and by {what})")
    for node in nodes:
        cls = type(node)
        if cls is Var:
            fv[node] = frozenset((node,))
            continue
        if cls is Let and not isinstance(node.value, Function) and node.var not in twice \
                and node.var in fv[node.value]:
            problems.append(f"{where}{_name(node.var)} is used in the value of its own let")
        fv[node] = _FREE.get(cls, _free_children)(node, fv)
        if mod is None or cls is Call or cls is Constant or cls is Op:
            continue
        if cls is GlobalVar and node not in seen_globals:
            seen_globals.add(node)
            if node not in mod.functions:
                if node.name_hint in mod:
                    problems.append(f"{where}@{node.name_hint} is not the module's @{node.name_hint} "
                                    f"(another GlobalVar of the same name)")
                else:
                    problems.append(f"{where}@{node.name_hint} is not a function of the module")
        constructors = []
        if isinstance(node, Constructor):
            constructors.append(node)
        elif isinstance(node, Match):
            for c in node.clauses:
                constructors.extend(_pattern_constructors(c.lhs))
        for con in constructors:
            if con in seen_constructors:
                continue
            seen_constructors.add(con)
            td = module_types.get(con.belong_to)
            if td is None:
                problems.append(f"{where}constructor {con.name_hint} belongs to "
                                f"{con.belong_to.name_hint}, which is not a type of the module")
            elif not any(c is con for c in td.constructors):
                problems.append(f"{where}constructor {con.name_hint} is not one of the module's "
                                f"{con.belong_to.name_hint} constructors")
    for v in fv[root]:
        if v in binder_of:
            problems.append(f"{where}{_name(v)} is used outside the scope of its "
                            f"{binder_of[v][1].replace('a ', '', 1)}")
        elif closed:
            problems.append(f"{where}{_name(v)} is used but never bound")


def well_formed_problems(program: Union[IRModule, Expr], mod: Optional[IRModule] = None) -> list:
    """Every violation of the rules above, in words (an empty list when there is none).

    ``program`` is a module (each global function is checked, and must have no free variables)
    or an expression (free variables allowed); ``mod`` gives the globals and types an expression
    may refer to (without it those are not checked).
    """
    problems: list = []
    if isinstance(program, IRModule):
        for gv, func in program.functions.items():
            _check_root(func, f"in @{gv.name_hint}: ", program, True, problems)
    elif isinstance(program, Expr):
        _check_root(program, "", mod, False, problems)
    else:
        raise TypeError(f"well-formedness is checked on an IRModule or an expression, "
                        f"not {type(program).__name__}")
    return problems


def well_formed(program: Union[IRModule, Expr], mod: Optional[IRModule] = None) -> bool:
    """Whether ``program`` keeps every scoping rule (see :func:`well_formed_problems`)."""
    return not well_formed_problems(program, mod)


def check_well_formed(program: Union[IRModule, Expr], mod: Optional[IRModule] = None) -> None:
    """Raise :class:`WellFormedError` listing every violation, if there is one."""
    problems = well_formed_problems(program, mod)
    if problems:
        raise WellFormedError(problems)

