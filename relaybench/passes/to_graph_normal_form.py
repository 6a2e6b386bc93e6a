"""ToGraphNormalForm: turn lets back into dataflow sharing, the inverse of ToANormalForm.

``let %x = v; body`` becomes ``body`` with every use of ``%x`` pointing at the one node ``v``: a
value used twice is one node with two users, which is how Relay's graph form expresses that it
is computed once. A let is kept when dropping it would change the program:

* its value has an effect (reads, writes or creates a reference, or calls a function that may),
  so its place in the evaluation order matters; when the module holds no reference operations
  at all, every value is free of effects;
* it binds a recursive closure (the variable occurs in its own value);
* its variable is used only inside closures defined in its scope: inlined, the value would be
  computed inside the closure, again at every call of it (Relay's pass moves it there).

A pure let whose variable is never used disappears, as in Relay. Iterative: a 100,000-binding
let chain converts without Python recursion.

>>> import relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(2), float32]) {
...   let %a = add(%x, %x);
...   let %b = multiply(%a, %a);
...   subtract(%b, %a)
... }''')
>>> print(rb.passes.ToGraphNormalForm()(mod)["main"].astext(show_types=False))
fn (%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  %0 = add(%x, %x);
  %1 = multiply(%0, %0);
  subtract(%1, %0)
}
"""

from __future__ import annotations

from ..ir.expr import (Call, Clause, Constructor, Function, If, Let, Match, Op, RefCreate, RefRead,
                       RefWrite, Tuple, TupleGetItem, Var, expr_children)
from ..ir.functor import post_order
from .infra import module_pass

__all__ = ["ToGraphNormalForm", "effectful_nodes"]

_REF = (RefCreate, RefRead, RefWrite)


def _has_refs(mod) -> bool:
    for func in mod.functions.values():
        for node in post_order(func):
            if isinstance(node, _REF):
                return True
    return False


def effectful_nodes(body, refs_exist: bool) -> set:
    """The nodes of ``body`` whose evaluation may have an effect.

    A reference operation has one; so does a call of anything but an operator or a constructor
    (the callee may touch references), unless ``refs_exist`` is False. An expression has an
    effect when one of the nodes it evaluates has; creating a closure has none (its body runs
    later). Primitive functions are not looked into.
    """
    out: set = set()
    if not refs_exist:
        return out
    for node in post_order(body):
        if isinstance(node, _REF):
            out.add(node)
        elif isinstance(node, Function):
            continue
        elif isinstance(node, Call) and not isinstance(node.op, (Op, Constructor)):
            out.add(node)
        else:
            for child in expr_children(node):
                if child in out:
                    out.add(node)
                    break
    return out


_VISIT, _BUILD, _LET_BIND, _LET_FINISH = 0, 1, 2, 3


def _same(a: tuple, b: tuple) -> bool:
    # expressions compare by identity, so tuple equality is element-wise identity
    return a == b


def captured_let_vars(body) -> set:
    """The variables bound by a ``let`` of ``body`` that only closures nested in the let's scope
    use (every use inside another function than the one the let is in). A value also used in
    its own scope stays computed there, once, when it becomes shared."""
    bound_in: dict = {}     # var -> the innermost function around its let (None: the body's)
    used_in: dict = {}      # var -> the innermost functions around its uses
    seen: set = set()
    stack = [(body, None)]
    while stack:
        node, owner = stack.pop()
        key = (id(node), id(owner))
        if key in seen:
            continue
        seen.add(key)
        cls = type(node)
        if cls is Var:
            used_in.setdefault(node, set()).add(owner)
            continue
        if cls is Let:
            bound_in[node.var] = owner
            stack.extend(((node.value, owner), (node.body, owner)))
            continue
        if cls is Function:
            if node.is_primitive:
                continue
            owner = node
        stack.extend((child, owner) for child in expr_children(node))
    return {var for var, owner in bound_in.items()
            if used_in.get(var) and owner not in used_in[var]}


def to_graph(body, effects: set):
    """``body`` with every pure, non-recursive let inlined into dataflow sharing, except those
    whose variable only closures nested in the let's scope use."""
    memo: dict = {}
    keep: set = set()
    captured = captured_let_vars(body)
    stack = [(_VISIT, body)]
    while stack:
        kind, node = stack.pop()
        if kind == _VISIT:
            if node in memo:
                continue
            cls = type(node)
            if cls is Let:
                stack.append((_LET_FINISH, node))
                stack.append((_VISIT, node.body))
                stack.append((_LET_BIND, node))
                stack.append((_VISIT, node.value))
            elif cls is Function and node.is_primitive:
                memo[node] = node
            else:
                kids = expr_children(node)
                if not kids:
                    memo[node] = node
                    continue
                stack.append((_BUILD, node))
                for child in reversed(kids):
                    if child not in memo:
                        stack.append((_VISIT, child))
        elif kind == _LET_BIND:
            var = node.var
            if var in memo or node.value in effects or var in captured:
                # the value refers to its own variable (a recursive closure), has an effect, or
                # only closures use it
                keep.add(node)
                memo.setdefault(var, var)
            else:
                memo[var] = memo[node.value]
        elif kind == _LET_FINISH:
            if node in memo:
                continue
            body_ = memo[node.body]
            if node in keep:
                value = memo[node.value]
                memo[node] = (node if value is node.value and body_ is node.body
                              else Let(node.var, value, body_).with_span(node.span))
            else:
                memo[node] = body_
        else:
            if node not in memo:
                memo[node] = _rebuild(node, memo)
    return memo[body]


def _rebuild(node, memo):
    cls = type(node)
    if cls is Var:
        return node
    if cls is Call:
        op = memo[node.op]
        args = tuple(memo[a] for a in node.args)
        if op is node.op and _same(args, node.args):
            return node
        return Call(op, args, node.attrs, node.type_args).with_span(node.span)
    if cls is Tuple:
        fields = tuple(memo[f] for f in node.fields)
        return node if _same(fields, node.fields) else Tuple(fields).with_span(node.span)
    if cls is TupleGetItem:
        t = memo[node.tuple_value]
        return node if t is node.tuple_value else TupleGetItem(t, node.index).with_span(node.span)
    if cls is Function:
        params = tuple(memo[p] for p in node.params)
        body = memo[node.body]
        if body is node.body and _same(params, node.params):
            return node
        return Function(params, body, node.ret_type, node.type_params, node.attrs).with_span(node.span)
    if cls is If:
        c, t, f = memo[node.cond], memo[node.true_branch], memo[node.false_branch]
        if c is node.cond and t is node.true_branch and f is node.false_branch:
            return node
        return If(c, t, f).with_span(node.span)
    if cls is Match:
        d = memo[node.data]
        changed = d is not node.data
        clauses = []
        for c in node.clauses:
            rhs = memo[c.rhs]
            changed |= rhs is not c.rhs
            clauses.append(c if rhs is c.rhs else Clause(c.lhs, rhs))
        return Match(d, clauses, node.complete).with_span(node.span) if changed else node
    if cls is RefCreate:
        v = memo[node.value]
        return node if v is node.value else RefCreate(v).with_span(node.span)
    if cls is RefRead:
        r = memo[node.ref]
        return node if r is node.ref else RefRead(r).with_span(node.span)
    if cls is RefWrite:
        r, v = memo[node.ref], memo[node.value]
        return node if r is node.ref and v is node.value else RefWrite(r, v).with_span(node.span)
    raise TypeError(f"ToGraphNormalForm cannot rebuild a {cls.__name__}")


@module_pass(opt_level=1)
def ToGraphNormalForm(mod, ctx):
    """Inline every let whose value has no effect into dataflow sharing.

    Lets of values with effects (reference operations, and calls that may perform them), of
    recursive closures, and of values only closures use (inlined, they would be computed at each
    call of the closure) stay. Pure lets whose variable is unused are dropped.
    """
    refs = _has_refs(mod)
    new = {}
    changed = False
    for gv, func in mod.functions.items():
        if func.is_primitive or func.attrs.get("Compiler") or func.attrs.get("SkipOptimization"):
            new[gv] = func
            continue
        body = to_graph(func.body, effectful_nodes(func.body, refs))
        if body is not func.body:
            func = Function(func.params, body, func.ret_type, func.type_params, func.attrs).with_span(func.span)
            changed = True
        new[gv] = func
    return mod.with_functions(new) if changed else mod
