"""DeadCodeElimination: drop let bindings nobody uses (Relay's ``dead_code.cc``).

A binding ``let %v = value; body`` goes when ``%v`` is not used and ``value`` is *pure*: evaluating
it has no effect besides its result, so skipping it cannot be observed. Purity is decided simply
and safely (:class:`PurityAnalysis`): a value is impure if, outside any function literal it
contains, it creates, reads or writes a reference or calls something that is not a primitive
operator or an ADT constructor (a closure or a global function may do anything). Creating a
function is pure: its body does not run.

Uses are counted from what is live (Relay's ``CalcDep``): the function's result is live, a binding's
value is live once its variable is used by live code, and an impure value is always live. So a
chain of bindings that only feed each other, and end in nothing used, goes in one run.

With ``inline_once=True``, a pure value whose variable is used exactly once is moved to that use,
unless the use sits inside a function literal nested in the binding's function: the closure may
run many times, so the value stays bound outside it and is computed once (as in Relay, a use from
a deeper function counts as two). ``ignore_impurity=True`` treats every value as pure (Relay's two
options). Graph-form programs have
no bindings, so they pass through unchanged (the same module comes back).

>>> import relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(2), float32]) {
...   let %unused = multiply(%x, %x);
...   let %once = add(%x, 1f);
...   negative(%once)
... }''')
>>> print(DeadCodeElimination()(mod)["main"].astext(show_types=False))
fn (%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  let %once: Tensor[(2), float32] = add(%x, 1f);
  negative(%once)
}
>>> print(DeadCodeElimination(inline_once=True)(mod)["main"].astext(show_types=False))
fn (%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  %0 = add(%x, 1f);
  negative(%0)
}
"""

from __future__ import annotations

from collections import Counter

from ..ir.expr import Constructor, Expr, Function, Let, Match, Op, Var, expr_children
from ..ir.functor import ExprFunctor, FusedAwareMutator
from ..ir.module import IRModule
from .infra import module_pass

__all__ = ["DeadCodeElimination", "PurityAnalysis", "is_pure", "skipped_function"]


def skipped_function(func: Function) -> bool:
    """Global functions the optimizing passes leave alone: fused kernels and external ones."""
    attrs = func.attrs
    return bool(attrs.get("Primitive") or attrs.get("Compiler") or attrs.get("SkipOptimization"))


class PurityAnalysis(ExprFunctor):
    """``analysis.visit(e)`` is True when evaluating ``e`` can have no effect besides its value.

    Impure: ``ref(...)``, ``ref_read``, ``ref_write`` and calls of anything that is not an operator
    or a constructor, anywhere in ``e`` except inside function literals (a function's body runs
    when it is called, not when it is made). Results are memoized, so asking about many
    overlapping subexpressions costs one walk.
    """

    def children_to_visit(self, expr: Expr):
        if isinstance(expr, Function):
            return ()
        return expr_children(expr)

    def _local(self, node) -> bool:
        memo = self.memo
        return all(memo[c] for c in self.children_to_visit(node))

    def visit_var(self, node): return True
    def visit_global_var(self, node): return True
    def visit_constant(self, node): return True
    def visit_op(self, node): return True
    def visit_constructor(self, node): return True
    def visit_function(self, node): return True
    def visit_tuple(self, node): return self._local(node)
    def visit_tuple_getitem(self, node): return self._local(node)
    def visit_let(self, node): return self._local(node)
    def visit_if(self, node): return self._local(node)
    def visit_match(self, node): return self._local(node)
    def visit_ref_create(self, node): return False
    def visit_ref_read(self, node): return False
    def visit_ref_write(self, node): return False

    def visit_call(self, node):
        return isinstance(node.op, (Op, Constructor)) and self._local(node)


def is_pure(expr: Expr) -> bool:
    """Whether evaluating ``expr`` has no effect besides its value (see :class:`PurityAnalysis`)."""
    return PurityAnalysis().visit(expr)


# ---------------------------------------------------------------------------------------------
# Use counting from the live code


def _count_live_uses(body: Expr, purity: PurityAnalysis, ignore_impurity: bool) -> Counter:
    """How many times each variable is used by code that runs (or may run) for ``body``.

    Each occurrence counts (``add(%x, %x)`` uses ``%x`` twice); a node shared by several parents
    is one computation, so its occurrences count once. A pure let value is only walked when its
    variable is first used.

    A let-bound variable used inside a function literal that is nested deeper than its binding
    counts one more use for that occurrence (Relay's ``UsageVisitor`` scope levels): the function
    may be called many times, so moving the value into it would recompute it at every call, and
    ``inline_once`` must leave it where it is.
    """
    uses: Counter = Counter()
    deferred: dict = {}  # let-bound var -> (its value, not walked yet; its binding's level)
    bound_level: dict = {}  # let-bound var -> the function nesting level of its binding
    seen = set()
    stack = [(body, 0)]

    def occurs(child, level):
        if isinstance(child, Var):
            uses[child] += 1
            if child in bound_level and bound_level[child] < level:
                uses[child] += 1
            entry = deferred.pop(child, None)
            if entry is not None:
                stack.append(entry)
        elif (child, level) not in seen:
            stack.append((child, level))

    while stack:
        item = stack.pop()
        if item in seen:
            continue
        seen.add(item)
        node, level = item
        if isinstance(node, Var):
            continue
        if isinstance(node, Let):
            bound_level[node.var] = level
            if ignore_impurity or purity.visit(node.value):
                deferred[node.var] = (node.value, level)
            else:
                occurs(node.value, level)
            occurs(node.body, level)
        elif isinstance(node, Function):
            if not node.is_primitive:
                occurs(node.body, level + 1)
        elif isinstance(node, Match):
            occurs(node.data, level)
            for c in node.clauses:
                occurs(c.rhs, level)
        else:
            for child in expr_children(node):
                occurs(child, level)
    return uses


class _Eliminator(FusedAwareMutator):
    """Rebuilds a function without its dead bindings (and, with ``inline_once``, single uses)."""

    def __init__(self, uses: Counter, purity: PurityAnalysis, inline_once: bool, ignore_impurity: bool):
        super().__init__()
        self.uses, self.purity = uses, purity
        self.inline_once, self.ignore_impurity = inline_once, ignore_impurity

    def children_to_visit(self, expr: Expr):
        if isinstance(expr, Let):
            return ()  # visit_let walks the chain itself, bindings before the body
        return super().children_to_visit(expr)

    def visit_let(self, let):
        kept = []
        node = let
        while isinstance(node, Let):
            var = node.var
            count = self.uses[var]
            pure = self.ignore_impurity or self.purity.visit(node.value)
            if count == 0 and pure:
                pass  # dead: dropped without looking inside
            elif count == 1 and pure and self.inline_once:
                # used once, so not by itself: a recursive function that is used counts twice
                self.memo[var] = self.visit(node.value)
            else:
                kept.append((node, self.visit(node.value)))
            node = node.body
        body = self.visit(node)
        for old, value in reversed(kept):
            if value is old.value and body is old.body:
                body = old
            else:
                body = Let(old.var, value, body).with_span(old.span)
        return body


def eliminate_dead_code(func: Function, inline_once: bool = False, ignore_impurity: bool = False) -> Function:
    """``func`` without its dead let bindings; the same object when there are none."""
    purity = PurityAnalysis()
    uses = _count_live_uses(func.body, purity, ignore_impurity)
    return _Eliminator(uses, purity, inline_once, ignore_impurity).visit(func)


@module_pass(opt_level=1)
def DeadCodeElimination(mod: IRModule, ctx, inline_once: bool = False, ignore_impurity: bool = False):
    """Remove let bindings whose variable is unused and whose value is pure.

    ``inline_once``: also move a pure value used exactly once to its use. ``ignore_impurity``:
    treat every value as pure (drop unused bindings of calls and reference writes too).
    """
    new, changed = {}, False
    for gv, func in mod.functions.items():
        out = func if skipped_function(func) else eliminate_dead_code(func, inline_once, ignore_impurity)
        changed |= out is not func
        new[gv] = out
    return mod.with_functions(new) if changed else mod


