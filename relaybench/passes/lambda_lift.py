"""LambdaLift: every local closure becomes a global function (closure conversion).

Backends that compile functions one at a time (Relay's VM) want no function literals inside
other functions. LambdaLift moves each local function (one that is not ``Primitive``) to a new
global ``@lifted_NAME``, where NAME is the let variable it was bound to or the enclosing global's
name:

* A closure with no free variables becomes the global itself; its site refers to ``@lifted_f``.
* A closure that captures variables becomes a global taking the captured values and returning
  the function, marked ``Closure=1`` as in Relay: ``def @lifted_f(%a) { fn (%x, Closure=1) {
  ... } }``; its site becomes the call ``@lifted_f(%a)``, which builds the closure.
* A recursive closure bound by a let (``let %f = fn (...) { ... %f(...) ... }``) refers to
  itself through the global: the recursive use becomes ``@lifted_f(%a)`` (or ``@lifted_f``)
  inside the lifted body, and the let binds ``%f`` to the site.

Type variables of an enclosing generic function that the closure mentions become type
parameters of the lifted global. Nested closures are lifted innermost first, so the outer one
captures what the inner one needed. The function inside an already lifted global (marked
``Closure=1``) is not lifted again, so the pass is idempotent.

>>> import relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%a: Tensor[(2), float32], %x: Tensor[(2), float32]) {
...   let %f = fn (%y: Tensor[(2), float32]) { add(%y, %a) };
...   %f(%x)
... }''')
>>> print(rb.passes.LambdaLift()(mod).astext(show_types=False))
#[version = "0.0.5"]
def @main(%a: Tensor[(2), float32], %x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  let %f: fn (Tensor[(2), float32]) -> Tensor[(2), float32] = @lifted_f(%a);
  %f(%x)
}
<BLANKLINE>
def @lifted_f(%a: Tensor[(2), float32]) -> fn (Tensor[(2), float32]) -> Tensor[(2), float32] {
  fn (%y: Tensor[(2), float32], Closure=1) -> Tensor[(2), float32] {
    add(%y, %a)
  }
}
"""

from __future__ import annotations

from ..ir.analysis import free_vars
from ..ir.expr import Call, Function, GlobalVar, Let, Var, expr_children
from ..ir.functor import ExprMutator, post_order
from ..ir.types import FuncType, RefType, TupleType, TypeCall, TypeVar
from .infra import module_pass, typed

__all__ = ["LambdaLift"]


def _skip(func: Function) -> bool:
    return func.is_primitive or bool(func.attrs.get("Compiler"))


def _top_functions(func: Function) -> set:
    """The functions that make up a global itself: the global, and the closure a lifted global
    returns (marked ``Closure=1``)."""
    top = {func}
    if isinstance(func.body, Function) and func.body.attrs.get("Closure"):
        top.add(func.body)
    return top


def _has_local_closure(func: Function) -> bool:
    top = _top_functions(func)
    for node in _nodes_outside_primitives(func):
        if isinstance(node, Function) and node not in top and not _skip(node):
            return True
    return False


def _nodes_outside_primitives(root) -> list:
    out, seen, stack = [], {root}, [root]
    while stack:
        node = stack.pop()
        out.append(node)
        if isinstance(node, Function) and node.is_primitive:
            continue
        for child in expr_children(node):
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return out


def _type_vars(types, bound) -> list:
    """Type variables occurring in ``types`` and not in ``bound``, in order of first occurrence
    (the type parameters of a function type inside bind their own variables)."""
    out, seen = [], set(bound)
    stack = list(reversed([(t, frozenset()) for t in types if t is not None]))
    while stack:
        t, local = stack.pop()
        if isinstance(t, TypeVar):
            if t not in seen and t not in local:
                seen.add(t)
                out.append(t)
        elif isinstance(t, FuncType):
            inner = local | frozenset(t.type_params)
            kids = list(t.arg_types) + [t.ret_type]
            stack.extend(reversed([(k, inner) for k in kids]))
        elif isinstance(t, TupleType):
            stack.extend(reversed([(k, local) for k in t.fields]))
        elif isinstance(t, TypeCall):
            stack.extend(reversed([(k, local) for k in (t.func,) + tuple(t.args)]))
        elif isinstance(t, RefType):
            stack.append((t.value, local))
    return out


def _var_type(v: Var):
    return v.type_annotation if v.type_annotation is not None else v.type_or_none


class _Lifter(ExprMutator):
    """Lifts the local closures of one global function; the new globals go to ``lifted``."""

    def __init__(self, global_name: str, top: set, taken: set, lifted: dict):
        super().__init__()
        self.global_name = global_name
        self.top = top
        self.taken = taken
        self.lifted = lifted
        self.let_var: dict = {}  # function literal -> the let variable bound to it

    def prepare(self, func: Function) -> None:
        for node in _nodes_outside_primitives(func):
            if isinstance(node, Let) and isinstance(node.value, Function):
                self.let_var.setdefault(node.value, node.var)

    def children_to_visit(self, expr):
        if isinstance(expr, Function) and _skip(expr):
            return ()
        return super().children_to_visit(expr)

    def visit_function(self, fn):
        if _skip(fn):
            return fn
        if fn in self.top:
            return super().visit_function(fn)
        return self._lift(fn)

    def _name(self, fn: Function) -> str:
        var = self.let_var.get(fn)
        base = "lifted_" + (var.name_hint if var is not None else self.global_name)
        name, k = base, 0
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        return name

    def _lift(self, fn: Function):
        body = self.visit(fn.body)
        converted = Function(fn.params, body, fn.ret_type, fn.type_params, fn.attrs)
        rec_var = self.let_var.get(fn)
        free = free_vars(converted)
        captured = [v for v in free if v is not rec_var]
        gv = GlobalVar(self._name(fn))

        params = [Var(v.name_hint, _var_type(v)) for v in captured]
        inner_site = Call(gv, params) if captured else gv
        subst = ExprMutator()
        subst.memo.update(zip(captured, params))
        if rec_var is not None and rec_var in free:
            subst.memo[rec_var] = inner_site
        if subst.memo:
            body = subst.visit(body)

        fn_type = fn.type_or_none
        sig = [p.type_annotation for p in fn.params] + [fn.ret_type]
        inner_vars = [v.type_annotation for v in post_order(body) if isinstance(v, Var)]
        tvars = _type_vars(sig + [_var_type(v) for v in captured] + [fn_type] + inner_vars,
                           bound=fn.type_params)
        if captured:
            closure = Function(fn.params, body, fn.ret_type, fn.type_params,
                               fn.attrs.with_changes(Closure=1))
            lifted = Function(params, closure, None, tvars)
        else:
            lifted = Function(fn.params, body, fn.ret_type, tuple(tvars) + tuple(fn.type_params), fn.attrs)
        self.lifted[gv] = lifted
        return Call(gv, list(captured)) if captured else gv


@module_pass(opt_level=1)
def LambdaLift(mod, ctx):
    """Move every local (non-Primitive) function to a new global function.

    A closure with free variables becomes ``def @lifted_f(captured...) { fn (params, Closure=1)
    { body } }`` and its site ``@lifted_f(captured...)``; a closed one becomes the global itself.
    Recursive let-bound closures refer to themselves through the new global.
    """
    if not any(_has_local_closure(f) for f in mod.functions.values() if not _skip(f)):
        return mod
    work = typed(mod)
    taken = {gv.name_hint for gv in work.functions}
    lifted: dict = {}
    new: dict = {}
    for gv, func in work.functions.items():
        if _skip(func) or not _has_local_closure(func):
            new[gv] = func
            continue
        lifter = _Lifter(gv.name_hint, _top_functions(func), taken, lifted)
        lifter.prepare(func)
        new[gv] = lifter.visit(func)
    new.update(lifted)
    return work.with_functions(new)
