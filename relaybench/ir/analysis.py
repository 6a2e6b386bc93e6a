"""Small analyses over expressions: free and bound variables, node counts. All iterative.

>>> from relaybench.ir import var, Function, Let
>>> x, y = var("x", shape=()), var("y", shape=())
>>> e = Let(y, x + x, y * x)
>>> [v.name_hint for v in free_vars(e)], [v.name_hint for v in bound_vars(e)]
(['x'], ['y'])
"""

from __future__ import annotations

import weakref
from collections import Counter

from .expr import Call, Expr, Function, Let, Match, Op, Var, expr_children, pattern_vars
from .functor import post_order

__all__ = ["free_vars", "bound_vars", "all_vars", "count_ops", "op_histogram", "ops_used",
           "count_nodes", "strongly_connected_components"]


def _binders(node) -> list:
    if isinstance(node, Function):
        return list(node.params)
    if isinstance(node, Let):
        return [node.var]
    if isinstance(node, Match):
        out = []
        for c in node.clauses:
            out.extend(pattern_vars(c.lhs))
        return out
    return []


def bound_vars(expr: Expr) -> list:
    """Variables bound inside ``expr`` (parameters, let and pattern variables), in order."""
    out, seen = [], set()
    for node in post_order(expr):
        for v in _binders(node):
            if v not in seen:
                seen.add(v)
                out.append(v)
    return out


def all_vars(expr: Expr) -> list:
    """Every variable that occurs in ``expr``, bound or free, in post-order."""
    out, seen = [], set()
    for node in post_order(expr):
        for v in ([node] if isinstance(node, Var) else []) + _binders(node):
            if v not in seen:
                seen.add(v)
                out.append(v)
    return out


def free_vars(expr: Expr) -> list:
    """Variables used in ``expr`` but bound outside it, in order of first use."""
    bound = set(bound_vars(expr))
    out, seen = [], set()
    for node in post_order(expr):
        if isinstance(node, Var) and node not in bound and node not in seen:
            seen.add(node)
            out.append(node)
    return out


def op_histogram(expr) -> Counter:
    """How many calls of each primitive operator (by name) ``expr`` or a module holds."""
    from .module import IRModule
    roots = list(expr.functions.values()) if isinstance(expr, IRModule) else [expr]
    hist: Counter = Counter()
    seen = set()
    for root in roots:
        for node in post_order(root):
            if node in seen:
                continue
            seen.add(node)
            if isinstance(node, Call) and isinstance(node.op, Op):
                hist[node.op.name] += 1
    return hist


_OPS_USED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def ops_used(expr) -> frozenset:
    """The names of the primitive operators ``expr`` (or a module's functions) calls anywhere,
    fused functions included. Remembered per node, which is immutable, so a pipeline whose passes
    leave a function alone walks it once; a pass that touches only some operators asks this
    first and returns its input when none of them is there.

    >>> from relaybench.ir import var
    >>> x = var("x", shape=(2,))
    >>> sorted(ops_used(Function([x], (x + x) * x)))
    ['add', 'multiply']
    """
    from .module import IRModule
    if isinstance(expr, IRModule):
        out: set = set()
        for func in expr.functions.values():
            out |= ops_used(func)
        return frozenset(out)
    got = _OPS_USED.get(expr)
    if got is None:
        names = set()
        seen = set()
        stack = [expr]
        children = expr_children
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if type(node) is Call and type(node.op) is Op:
                names.add(node.op.name)
            stack.extend(children(node))
        got = _OPS_USED[expr] = frozenset(names)
    return got


def count_ops(expr) -> int:
    """The number of primitive operator calls."""
    return sum(op_histogram(expr).values())


def count_nodes(expr) -> int:
    """The number of distinct expression nodes."""
    from .module import IRModule
    roots = list(expr.functions.values()) if isinstance(expr, IRModule) else [expr]
    seen = set()
    for root in roots:
        seen.update(post_order(root))
    return len(seen)


def strongly_connected_components(nodes: list, edges: dict) -> list:
    """Tarjan's algorithm, iteratively: the components of the graph ``edges`` (node -> successors),
    each as a list, every component after the components it reaches (dependencies first)."""
    index: dict = {}
    low: dict = {}
    on_stack: set = set()
    stack: list = []
    out: list = []
    counter = 0
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(edges.get(start, ())))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(edges.get(w, ()))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w is v:
                        break
                out.append(list(reversed(comp)))
    return out
