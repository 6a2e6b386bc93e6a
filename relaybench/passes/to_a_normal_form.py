"""ToANormalForm: every intermediate value gets a name (``let %x = ...;``), placed in its scope.

A-normal form (ANF) is the form of Relay programs in which evaluation order and sharing are
explicit: every argument of a call, field of a tuple, condition of an ``if`` and so on is an
*atom* (a variable, a global, a constant, an operator, a constructor, or a ``Primitive``
function), and every compound expression is the value of a ``let``. A dataflow graph, where one
node may be used many times, becomes a chain of lets where each node is computed once.

**Scopes.** A function body, each branch of an ``if`` and each clause of a ``match`` is a scope
of its own. A node is bound in the innermost scope that contains all of its uses (the lowest
common ancestor, in the tree of scopes, of the scopes it is used from): a node used only inside
one branch is bound inside that branch, a node used by both branches is bound before the
``if``. Existing lets keep their variables: ``let %a = add(%x, %y); ...`` stays as it is.

This module also holds the scope analysis and the let-filling engine that
:mod:`~relaybench.passes.to_basic_block_normal_form` shares. Everything is iterative: a
100,000-node graph or let chain converts without Python recursion.

>>> import relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(2), float32], %c: bool) {
...   %0 = add(%x, %x);
...   if (%c) { multiply(%0, %0) } else { %0 }
... }''')
>>> print(rb.passes.ToANormalForm()(mod)["main"].astext(show_types=False))
fn (%x: Tensor[(2), float32], %c: bool) -> Tensor[(2), float32] {
  let %x1: Tensor[(2), float32] = add(%x, %x);
  let %x3: Tensor[(2), float32] = if (%c) {
    let %x2: Tensor[(2), float32] = multiply(%x1, %x1);
    %x2
  } else {
    %x1
  };
  %x3
}
"""

from __future__ import annotations

from typing import Optional

from ..ir.expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If, Let, Match,
                       Op, RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var)
from .infra import function_pass

__all__ = ["ToANormalForm", "is_atomic", "Scope", "calc_scopes", "fill_lets", "child_slots"]


# ---------------------------------------------------------------------------------------------
# Atoms and the children of a node, with the scope each child is evaluated in

_ATOM_CLASSES = (Var, GlobalVar, Constant, Op, Constructor)


_ATOM_TYPES = frozenset(_ATOM_CLASSES)


def is_atomic(e: Expr) -> bool:
    """Atoms need no binding: variables, globals, constants, operators, constructors, and
    ``Primitive`` functions (fused kernels, which no normal-form pass looks inside)."""
    cls = type(e)
    if cls in _ATOM_TYPES:
        return True
    if cls is Function:
        return e.is_primitive
    return isinstance(e, _ATOM_CLASSES)


def child_slots(node: Expr) -> list:
    """``[(child, slot)]`` for the compound children of ``node`` in evaluation order.

    ``slot`` is None when the child is evaluated in ``node``'s own scope, or a key naming the new
    scope it opens: ``"body"`` for a function body, ``1``/``2`` for the branches of an ``if``,
    the clause index for a ``match``. Atomic children (variables, constants, ...) are left out.
    """
    out = []
    cls = type(node)
    if cls is Call:
        items = ((node.op, None),) + tuple((a, None) for a in node.args)
    elif cls is Tuple:
        items = tuple((f, None) for f in node.fields)
    elif cls is TupleGetItem:
        items = ((node.tuple_value, None),)
    elif cls is Let:
        items = ((node.value, None), (node.body, None))
    elif cls is If:
        items = ((node.cond, None), (node.true_branch, 1), (node.false_branch, 2))
    elif cls is Match:
        items = ((node.data, None),) + tuple((c.rhs, i) for i, c in enumerate(node.clauses))
    elif cls is Function:
        items = () if node.is_primitive else ((node.body, "body"),)
    elif cls is RefCreate:
        items = ((node.value, None),)
    elif cls is RefRead:
        items = ((node.ref, None),)
    elif cls is RefWrite:
        items = ((node.ref, None), (node.value, None))
    else:
        items = ()
    for child, slot in items:
        if not is_atomic(child):
            out.append((child, slot))
    return out


def compound_post_order(root: Expr, slots: Optional[dict] = None) -> list:
    """The compound nodes reachable from ``root`` (not inside Primitive functions), children
    first, each once. ``slots``, when given, receives each node's :func:`child_slots`."""
    out = []
    if is_atomic(root):
        return out
    if slots is None:
        slots = {}
    seen = {root}
    stack = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            out.append(node)
            continue
        stack.append((node, True))
        kids = slots[node] = child_slots(node)
        for child, _slot in reversed(kids):
            if child not in seen:
                seen.add(child)
                stack.append((child, False))
    return out


# ---------------------------------------------------------------------------------------------
# Scopes


class Scope:
    """A basic block: a function body, an ``if`` branch, a ``match`` clause, or the root.

    ``bindings`` collects the ``(var, value)`` pairs that the let-filling engine places here.
    """

    __slots__ = ("parent", "depth", "bindings")

    def __init__(self, parent: Optional["Scope"] = None):
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.bindings: list = []

    def __repr__(self) -> str:
        return f"<Scope depth={self.depth} bindings={len(self.bindings)}>"


def _lca(a: Scope, b: Scope) -> Scope:
    while a.depth > b.depth:
        a = a.parent
    while b.depth > a.depth:
        b = b.parent
    while a is not b:
        a, b = a.parent, b.parent
    return a


class ScopeInfo:
    """The result of :func:`calc_scopes`.

    ``scope_of[node]``: the scope a compound node belongs to (the lowest common ancestor of the
    scopes it is used from); ``sub[(node, slot)]``: the scope a child slot opens; ``lifted``: the
    nodes used from more than one scope (so a use crosses a scope boundary); ``root``: the
    outermost scope.
    """

    def __init__(self, root: Scope):
        self.root = root
        self.scope_of: dict = {}
        self.sub: dict = {}
        self.lifted: set = set()
        self.order: list = []
        self.slots: dict = {}


def calc_scopes(body: Expr) -> ScopeInfo:
    """Assign each compound node of ``body`` to the innermost scope holding all of its uses.

    Nodes are processed parents first (reverse post-order of the DAG), so each node's scope is
    final before its children's are computed.
    """
    info = ScopeInfo(Scope())
    order = compound_post_order(body, info.slots)
    info.order = order
    scope_of, sub, lifted, slots = info.scope_of, info.sub, info.lifted, info.slots
    first_use: dict = {}
    if order:
        scope_of[body] = info.root
        first_use[body] = info.root
    for node in reversed(order):
        s = scope_of[node]
        for child, slot in slots[node]:
            if slot is None:
                cand = s
            else:
                key = (node, slot)
                cand = sub.get(key)
                if cand is None:
                    cand = sub[key] = Scope(s)
            old = scope_of.get(child)
            if old is None:
                scope_of[child] = cand
                first_use[child] = cand
            else:
                if cand is not first_use[child]:
                    lifted.add(child)
                if cand is not old:
                    scope_of[child] = _lca(old, cand)
    return info


# ---------------------------------------------------------------------------------------------
# The let-filling engine

_VISIT, _FINISH, _LET_BIND, _LET_FINISH = 0, 1, 2, 3


def _wrap(bindings: list, result: Expr, original: Optional[dict] = None) -> Expr:
    """``let b0; let b1; ...; result``, built from the inside out. ``original`` maps a let
    variable to the Let that bound it in the input: when that Let had the same value and body,
    it is reused, so an unchanged program comes back as the very same nodes."""
    for var, value in reversed(bindings):
        old = original.get(var) if original else None
        if old is not None and old.value is value and old.body is result:
            result = old
        else:
            result = Let(var, value, result)
    return result


def _same(a: tuple, b: tuple) -> bool:
    # expressions compare by identity, so tuple equality is element-wise identity
    return a == b


def fill_lets(body: Expr, bind_all: bool, fresh_name: str = "x") -> Expr:
    """Rebuild ``body`` with compound nodes let-bound in their scopes.

    ``bind_all=True`` binds every compound node (A-normal form); ``False`` binds only the nodes
    used across scopes and the values of existing lets, keeping graph form inside each scope
    (basic-block normal form). A value bound by an existing ``let`` keeps that let's variable.
    """
    if is_atomic(body):
        return body
    info = calc_scopes(body)
    scope_of, sub, lifted, slots = info.scope_of, info.sub, info.lifted, info.slots

    # the values of lets are bound to the let's own variable (the first let wins if shared)
    bind_to: dict = {}
    original: dict = {}  # let variable -> its Let in the input
    for node in info.order:
        if type(node) is Let:
            original.setdefault(node.var, node)
            value = node.value
            while type(value) is Let:  # let %a = (let %t = ...; e); ...: e is bound to %a
                value = value.body
            if not is_atomic(value):
                bind_to.setdefault(value, node.var)

    memo: dict = {}
    memo_get = memo.get

    def bind(node: Expr, value: Expr, scope: Scope) -> Expr:
        var = bind_to.get(node)
        if var is None:
            var = Var(fresh_name)
        scope.bindings.append((var, value))
        return var

    def should_bind(node: Expr) -> bool:
        return bind_all or node in lifted or node in bind_to

    def close(node: Expr, slot, child: Expr) -> Expr:
        result = memo_get(child, child)
        s = sub.get((node, slot))
        if s is None or not s.bindings:
            return result
        return _wrap(s.bindings, result, original)

    def m(child: Expr) -> Expr:
        # atoms are never in the memo; every compound child is converted before its parent
        return memo_get(child, child)

    stack = [(_VISIT, body)]
    while stack:
        kind, node = stack.pop()
        if kind == _VISIT:
            if node in memo:
                continue
            if type(node) is Let:
                stack.append((_LET_FINISH, node))
                if not is_atomic(node.body):
                    stack.append((_VISIT, node.body))
                stack.append((_LET_BIND, node))
                if not is_atomic(node.value):
                    stack.append((_VISIT, node.value))
                continue
            stack.append((_FINISH, node))
            for child, _slot in reversed(slots[node]):
                if child not in memo:
                    stack.append((_VISIT, child))
        elif kind == _LET_BIND:
            value = m(node.value)
            if value is not node.var:
                scope_of[node].bindings.append((node.var, value))
        elif kind == _LET_FINISH:
            if node in memo:
                continue
            result = m(node.body)
            if not is_atomic(result) and (bind_all or node in lifted):
                result = bind(node, result, scope_of[node])
            memo[node] = result
        else:  # _FINISH
            if node in memo:
                continue
            new = _rebuild(node, m, close)
            memo[node] = bind(node, new, scope_of[node]) if should_bind(node) else new
    out = memo[body]
    return _wrap(info.root.bindings, out, original) if info.root.bindings else out


def _rebuild(node: Expr, m, close) -> Expr:
    """``node`` with its children replaced by their converted forms (the node itself when
    nothing changed); the scopes it opens are closed into lets."""
    cls = type(node)
    if cls is Call:
        op = m(node.op)
        args = tuple(m(a) for a in node.args)
        if op is node.op and _same(args, node.args):
            return node
        return Call(op, args, node.attrs, node.type_args).with_span(node.span)
    if cls is Tuple:
        fields = tuple(m(f) for f in node.fields)
        return node if _same(fields, node.fields) else Tuple(fields).with_span(node.span)
    if cls is TupleGetItem:
        t = m(node.tuple_value)
        return node if t is node.tuple_value else TupleGetItem(t, node.index).with_span(node.span)
    if cls is If:
        c = m(node.cond)
        t = close(node, 1, node.true_branch)
        f = close(node, 2, node.false_branch)
        if c is node.cond and t is node.true_branch and f is node.false_branch:
            return node
        return If(c, t, f).with_span(node.span)
    if cls is Match:
        d = m(node.data)
        clauses = []
        changed = d is not node.data
        for i, c in enumerate(node.clauses):
            rhs = close(node, i, c.rhs)
            changed |= rhs is not c.rhs
            clauses.append(c if rhs is c.rhs else Clause(c.lhs, rhs))
        return Match(d, clauses, node.complete).with_span(node.span) if changed else node
    if cls is Function:
        if node.is_primitive:
            return node
        b = close(node, "body", node.body)
        if b is node.body:
            return node
        return Function(node.params, b, node.ret_type, node.type_params, node.attrs).with_span(node.span)
    if cls is RefCreate:
        v = m(node.value)
        return node if v is node.value else RefCreate(v).with_span(node.span)
    if cls is RefRead:
        r = m(node.ref)
        return node if r is node.ref else RefRead(r).with_span(node.span)
    if cls is RefWrite:
        r, v = m(node.ref), m(node.value)
        return node if r is node.ref and v is node.value else RefWrite(r, v).with_span(node.span)
    raise TypeError(f"normal form conversion cannot rebuild a {cls.__name__}")


def convert_function(func: Function, bind_all: bool) -> Function:
    """``func`` with its body converted (the same object when nothing changed)."""
    body = fill_lets(func.body, bind_all)
    if body is func.body:
        return func
    return Function(func.params, body, func.ret_type, func.type_params, func.attrs).with_span(func.span)


@function_pass(opt_level=1)
def ToANormalForm(func, mod, ctx):
    """Let-bind every compound expression in the innermost scope holding all its uses.

    After the pass every call argument, tuple field, ``if`` condition and ``match`` subject is an
    atom (a variable, global, constant, operator, constructor or Primitive function), and no node
    is shared: each is computed once by its ``let``. Function bodies, ``if`` branches and
    ``match`` clauses are scopes of their own. ``Primitive`` functions are left as they are.
    """
    return convert_function(func, bind_all=True)
