"""SpecializeConstantArgs: a global function's parameter that every call gives the same constant
becomes that constant.

A recursive model passes its weights down the recursion: ``@main`` calls
``@tree_lstm(%tree, %w...)`` and ``@tree_lstm`` calls itself (directly, or through a closure it
hands to ``@map``) with its own ``%w...``. Once ``@main``'s weights are bound
(:func:`~relaybench.passes.bind_params.bind_params`), every call of ``@tree_lstm`` gives each
weight parameter either one constant or the parameter itself. The pass replaces such a
parameter by the constant in the function's body and drops it from the function and from every
call, so that the passes that need constant weights (FoldConstant, quantization's WEIGHT
annotation, AlterOpLayout's weight transforms, the accelerator's packing) see them in the
function that uses them.

A parameter qualifies when the function is not ``@main``, not a Primitive or external one, is
used only as the callee of calls (never as a value, which would need its signature kept), and at
every call the argument at that position is a constant with the same bytes as at the others,
or, for a call inside the function itself, the parameter itself. The pass repeats until nothing
changes, so constants flow down a chain of functions (``@main`` to ``@f`` to ``@g``).

>>> import numpy as np, relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @down(%n: int32, %w: Tensor[(2), float32]) -> Tensor[(2), float32] {
...   if (less(%n, 1)) { %w } else { add(@down(subtract(%n, 1), %w), %w) }
... }
... def @main(%n: int32, %w: Tensor[(2), float32]) {
...   @down(%n, %w)
... }''')
>>> mod = rb.passes.bind_params(mod, {"w": np.array([1.0, 2.0], "float32")})
>>> out = SpecializeConstantArgs()(mod)
>>> [p.name_hint for p in out["down"].params]
['n']
>>> rb.create_executor("debug", out).evaluate()(np.int32(3)).tolist()
[4.0, 8.0]
"""

from __future__ import annotations

import numpy as np

from ..ir.expr import Call, Constant, Function, GlobalVar, expr_children
from ..ir.functor import ExprMutator, post_order
from ..ir.module import IRModule
from .infra import SKIPPED_FUNCTION_ATTRS, module_pass

__all__ = ["SpecializeConstantArgs", "specialize_constant_args"]


def _same_constant(a: Constant, b: Constant) -> bool:
    if a is b:
        return True
    x, y = a.data, b.data
    return x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)


def _candidates(mod: IRModule) -> dict:
    """``{gv: {position: constant}}``: the parameters that qualify (see the module)."""
    calls: dict = {}        # gv -> [(the function the call is in, call)]
    escaped: set = set()    # global functions used as values
    for owner, func in mod.functions.items():
        for node in post_order(func):
            children = expr_children(node)
            if isinstance(node, Call) and isinstance(node.op, GlobalVar):
                calls.setdefault(node.op, []).append((owner, node))
                children = node.args
            escaped.update(c for c in children if isinstance(c, GlobalVar))
    out = {}
    for gv, func in mod.functions.items():
        if gv.name_hint == "main" or gv in escaped or gv not in calls \
                or any(func.attrs.get(a) for a in SKIPPED_FUNCTION_ATTRS):
            continue
        found = {}
        for k, param in enumerate(func.params):
            value = None
            for owner, call in calls[gv]:
                if len(call.args) != len(func.params):
                    value = None
                    break
                arg = call.args[k]
                if arg is param and owner == gv:
                    continue
                if not isinstance(arg, Constant) or (value is not None
                                                     and not _same_constant(value, arg)):
                    value = None
                    break
                value = arg
            if value is not None:
                found[k] = value
        if found:
            out[gv] = found
    return out


class _Rewrite(ExprMutator):
    """Drops the specialized positions from every call of a specialized function, and (inside
    one) puts the constants where its parameters were."""

    def __init__(self, drop: dict, bound: dict):
        super().__init__()
        self.drop = drop
        self.memo.update(bound)

    def visit_call(self, call):
        new = super().visit_call(call)
        positions = self.drop.get(call.op) if isinstance(call.op, GlobalVar) else None
        if not positions:
            return new
        args = [a for k, a in enumerate(new.args) if k not in positions]
        return Call(new.op, args, new.attrs, new.type_args).with_span(call.span)


def specialize_constant_args(mod: IRModule) -> IRModule:
    """``mod`` with the constant parameters of its global functions specialized (see the
    module); the same module when none qualifies."""
    from .infra import typed
    changed = False
    for _ in range(len(mod.functions) + 1):
        found = _candidates(mod)
        if not found:
            break
        changed = True
        drop = {gv: set(positions) for gv, positions in found.items()}
        new = {}
        for gv, func in mod.functions.items():
            positions = found.get(gv, {})
            bound = {func.params[k]: value for k, value in positions.items()}
            rewriter = _Rewrite(drop, bound)
            body = rewriter.visit(func.body)
            params = [p for k, p in enumerate(func.params) if k not in positions]
            if body is func.body and len(params) == len(func.params):
                new[gv] = func
            else:
                new[gv] = Function(params, body, func.ret_type, func.type_params, func.attrs)
        mod = mod.with_functions(new)
    return typed(mod) if changed else mod


@module_pass(opt_level=0)
def SpecializeConstantArgs(mod, ctx):
    """Replace a global function's parameter that every call gives the same constant (or, in
    recursive calls, the parameter itself) by that constant."""
    return specialize_constant_args(mod)
