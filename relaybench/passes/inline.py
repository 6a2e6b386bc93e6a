"""Inline: global functions marked ``Inline=1`` replaced by their bodies where they are used
(Relay's ``inline.cc``).

Each call ``@f(a, b)`` of an inlinable ``@f`` becomes a fresh copy of ``@f``'s body (every variable
it binds is new, so two copies never share a binding) with the parameters replaced by the
arguments. An argument that may have an effect (see
:class:`~relaybench.passes.dead_code_elimination.PurityAnalysis`) is bound by a ``let`` first, so it
still runs once, in argument order; a pure one is put in place directly. A use of ``@f`` as a value
(``map(@f, %xs)``) becomes a copy of the function itself. Functions are expanded callees first, so
inlinable functions that call each other are all expanded in one run. Afterwards an inlinable
function that was used before and is used by no remaining function is removed from the module;
one nothing used in the first place (an entry point) stays.

Inlinable means: the function has ``Inline=1``, is not recursive (directly, or through other
functions: inlining would never end, so Relay leaves it, and so do we: the calls and the function
stay as they are), is not polymorphic (no type parameters and no symbolic dimensions in its
signature: its body's annotations would not make sense at the call site), and is not a Primitive or
external (``Compiler``) function.

>>> import relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @sq(%x: Tensor[(2), float32], Inline=1) -> Tensor[(2), float32] {
...   multiply(%x, %x)
... }
... def @main(%y: Tensor[(2), float32]) {
...   @sq(add(%y, 1f))
... }''')
>>> print(Inline()(mod).astext(show_types=False))
#[version = "0.0.5"]
def @main(%y: Tensor[(2), float32]) -> Tensor[(2), float32] {
  %0 = add(%y, 1f);
  multiply(%0, %0)
}
"""

from __future__ import annotations

from ..ir.attrs import Attrs
from ..ir.expr import (Call, Clause, Expr, Function, GlobalVar, If, Let, Match, RefCreate, RefRead,
                       RefWrite, Tuple, TupleGetItem, Var)
from ..ir.analysis import strongly_connected_components
from ..ir.functor import ExprMutator, FusedAwareMutator, post_order
from ..ir.module import IRModule
from ..ir.symbolic import free_symvars
from ..ir.type_solver import type_children
from ..ir.types import TensorType, Type
from .dead_code_elimination import PurityAnalysis, skipped_function
from .infra import module_pass

__all__ = ["Inline"]


# ---------------------------------------------------------------------------------------------
# The call graph


def _references(func: Function) -> set:
    """Names of the globals ``func`` mentions (called or used as values)."""
    return {n.name_hint for n in post_order(func) if isinstance(n, GlobalVar)}


def _callees_first(refs: dict) -> tuple:
    """The globals in an order where each comes after those it uses (strongly connected
    components, dependencies first), and the set of names that are recursive (in a cycle, or
    self-using)."""
    edges = {name: sorted(refs[name] & refs.keys()) for name in refs}
    order: list = []
    recursive: set = set()
    for comp in strongly_connected_components(list(refs), edges):
        if len(comp) > 1 or comp[0] in refs[comp[0]]:
            recursive.update(comp)
        order.extend(comp)
    return order, recursive


def _polymorphic(func: Function) -> bool:
    if func.type_params:
        return True
    stack: list = [p.type_annotation for p in func.params] + [func.ret_type]
    while stack:
        t = stack.pop()
        if t is None:
            continue
        if isinstance(t, TensorType):
            if any(not isinstance(d, int) and free_symvars(d) for d in t.shape):
                return True
        elif isinstance(t, Type):
            stack.extend(type_children(t))
    return False


# ---------------------------------------------------------------------------------------------
# Copying a body with fresh binders


class _FreshCopy(ExprMutator):
    """A copy of an expression in which every node is new and every variable not given in
    ``subst`` (all of them are bound inside: a global function has no free variables but its
    parameters) is a new variable of the same name and annotation."""

    def __init__(self, subst: dict):
        super().__init__()
        self.memo.update(subst)

    def visit_var(self, var):
        return Var(var.name_hint, var.type_annotation)

    def visit_tuple(self, node):
        return Tuple([self.visit(f) for f in node.fields]).with_span(node.span)

    def visit_tuple_getitem(self, node):
        return TupleGetItem(self.visit(node.tuple_value), node.index).with_span(node.span)

    def visit_function(self, fn):
        return Function([self.visit(p) for p in fn.params], self.visit(fn.body), fn.ret_type,
                        fn.type_params, fn.attrs).with_span(fn.span)

    def visit_call(self, call):
        return Call(self.visit(call.op), [self.visit(a) for a in call.args], call.attrs,
                    call.type_args).with_span(call.span)

    def visit_let(self, let):
        return Let(self.visit(let.var), self.visit(let.value), self.visit(let.body)).with_span(let.span)

    def visit_if(self, node):
        return If(self.visit(node.cond), self.visit(node.true_branch),
                  self.visit(node.false_branch)).with_span(node.span)

    def visit_match(self, match):
        clauses = [Clause(self.visit_pattern(c.lhs), self.visit(c.rhs)) for c in match.clauses]
        return Match(self.visit(match.data), clauses, match.complete).with_span(match.span)

    def visit_ref_create(self, node):
        return RefCreate(self.visit(node.value)).with_span(node.span)

    def visit_ref_read(self, node):
        return RefRead(self.visit(node.ref)).with_span(node.span)

    def visit_ref_write(self, node):
        return RefWrite(self.visit(node.ref), self.visit(node.value)).with_span(node.span)


def _without_inline(attrs: Attrs) -> Attrs:
    return Attrs({k: v for k, v in attrs.items() if k != "Inline"})


# ---------------------------------------------------------------------------------------------
# The inliner


class _Inliner(FusedAwareMutator):
    def __init__(self, functions: dict, inlinable: set, purity: PurityAnalysis):
        super().__init__()
        self.functions = functions  # name -> the function, its own inlinable calls already expanded
        self.inlinable = inlinable
        self.purity = purity

    def _target(self, e: Expr):
        if isinstance(e, GlobalVar) and e.name_hint in self.inlinable:
            return self.functions[e.name_hint]
        return None

    def children_to_visit(self, expr: Expr):
        if isinstance(expr, Call) and self._target(expr.op) is not None:
            return expr.args  # the callee is replaced, not visited as a value
        return super().children_to_visit(expr)

    def visit_global_var(self, gv):
        callee = self._target(gv)
        if callee is None:
            return gv
        copy = _FreshCopy({}).visit(callee)
        return Function(copy.params, copy.body, copy.ret_type, copy.type_params, _without_inline(copy.attrs))

    def visit_call(self, call):
        callee = self._target(call.op)
        if callee is None:
            return super().visit_call(call)
        args = [self.visit(a) for a in call.args]
        if len(args) != len(callee.params):
            raise ValueError(f"Inline: @{call.op.name_hint} takes {len(callee.params)} arguments, "
                             f"called with {len(args)}")
        subst, bindings = {}, []
        for param, arg in zip(callee.params, args):
            if self.purity.visit(arg):
                subst[param] = arg
            else:  # keep its effect where and when the call had it
                fresh = Var(param.name_hint, param.type_annotation)
                bindings.append((fresh, arg))
                subst[param] = fresh
        body = _FreshCopy(subst).visit(callee.body)
        for var, value in reversed(bindings):
            body = Let(var, value, body)
        return body


@module_pass(opt_level=1)
def Inline(mod: IRModule, ctx):
    """Replace calls of global functions marked ``Inline=1`` by their bodies; remove the functions
    no longer used.

    Recursive and polymorphic functions are left as they are.
    """
    funcs = {gv.name_hint: f for gv, f in mod.functions.items()}
    gvs = {gv.name_hint: gv for gv in mod.functions}
    refs = {name: _references(f) for name, f in funcs.items()}
    order, recursive = _callees_first(refs)
    inlinable = {name for name, f in funcs.items()
                 if f.attrs.get("Inline") and name not in recursive and not skipped_function(f)
                 and not _polymorphic(f)}
    if not any(refs[name] & inlinable for name in funcs):
        return mod
    used_before = set().union(*(refs[name] - {name} for name in funcs))
    purity = PurityAnalysis()
    new: dict = {}
    for name in order:
        func = funcs[name]
        if skipped_function(func) or not refs[name] & inlinable:
            new[name] = func
        else:
            new[name] = _Inliner(new, inlinable, purity).visit(func)
    # drop the inlined functions nobody uses any more (entry points, used by no one before, stay)
    new_refs = {n: refs[n] if new[n] is funcs[n] else _references(new[n]) for n in new}
    kept = set(new)
    while True:
        used = set().union(*(new_refs[n] - {n} for n in kept))
        gone = {n for n in kept if n in inlinable and n in used_before and n not in used and n != "main"}
        if not gone:
            break
        kept -= gone
    return mod.with_functions({gvs[n]: new[n] for n in funcs if n in kept})
