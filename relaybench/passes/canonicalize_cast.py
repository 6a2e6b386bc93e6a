"""CanonicalizeCast: give each elementwise consumer of a shared up-cast its own cast.

Relay's rationale ("canonicalize cast expressions to make operator fusion more efficient"): a
widening ``cast`` (``int8 -> int32``, ``float16 -> float32``) whose result feeds several
elementwise or broadcast operators is a node with several consumers, so FuseOps cannot fuse it
into any of them and materializes the wide tensor in memory. Duplicating the cast, one copy per
consumer, lets each copy fuse into its consumer's kernel, which reads the narrow input directly.

The first elementwise/broadcast consumer met (in evaluation order) keeps the original cast; each
further one gets a copy. Consumers of other kinds (``nn.conv2d``, ...) keep sharing the original.
Narrowing casts and casts between types of equal width are left alone.

>>> import relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(4), int8]) {
...   %0 = cast(%x, dtype="int32");
...   %1 = add(%0, 1);
...   %2 = multiply(%0, 2);
...   (%1, %2)
... }''')
>>> print(rb.passes.CanonicalizeCast()(mod)["main"].astext(show_types=False))
fn (%x: Tensor[(4), int8]) -> (Tensor[(4), int32], Tensor[(4), int32]) {
  %0 = cast(%x, dtype="int32");
  %1 = add(%0, 1);
  %2 = cast(%x, dtype="int32");
  %3 = multiply(%2, 2);
  (%1, %3)
}
"""

from __future__ import annotations

import re

from ..ir.analysis import ops_used
from ..ir.expr import Call, Function, Op
from ..ir.functor import ExprMutator
from ..ir.types import TensorType
from ..op.registry import OpPattern
from .infra import module_pass, typed

__all__ = ["CanonicalizeCast"]


def dtype_bits(dtype: str) -> int:
    """The width of a scalar type in bits: ``bool`` is 1, ``float16`` is 16."""
    if dtype == "bool":
        return 1
    m = re.search(r"(\d+)$", dtype)
    if m is None:
        raise ValueError(f"cannot tell the width of dtype {dtype!r}")
    return int(m.group(1))


class _CastCanonicalizer(ExprMutator):
    def __init__(self):
        super().__init__()
        self.cast_op = Op.get("cast")
        self.uses: dict = {}  # original cast call -> elementwise consumers seen so far

    def children_to_visit(self, expr):
        if isinstance(expr, Function) and expr.is_primitive:
            return ()
        return super().children_to_visit(expr)

    def visit_function(self, fn):
        return fn if fn.is_primitive else super().visit_function(fn)

    def _is_upcast(self, e) -> bool:
        if not (isinstance(e, Call) and e.op is self.cast_op):
            return False
        src = e.args[0].type_or_none
        if not isinstance(src, TensorType):
            return False
        return dtype_bits(src.dtype) < dtype_bits(e.attrs.dtype)

    def visit_call(self, call):
        op = call.op
        if not (isinstance(op, Op) and op.opdef is not None and op.opdef.pattern <= OpPattern.BROADCAST):
            return super().visit_call(call)
        args = []
        copies: dict = {}
        changed = False
        for a in call.args:
            new = self.visit(a)
            if self._is_upcast(a):
                if a in copies:
                    new = copies[a]
                else:
                    seen = self.uses.get(a, 0)
                    self.uses[a] = seen + 1
                    if seen >= 1:
                        new = Call(new.op, new.args, new.attrs, new.type_args).with_span(new.span)
                    copies[a] = new
            changed |= new is not a
            args.append(new)
        if not changed:
            return call
        return Call(op, args, call.attrs, call.type_args).with_span(call.span)


@module_pass(opt_level=3)
def CanonicalizeCast(mod, ctx):
    """Duplicate each widening ``cast`` shared by several elementwise/broadcast consumers, so
    every consumer has its own copy and FuseOps can fuse it into that consumer."""
    if not ops_used(mod) & {"cast"}:
        return mod
    work = typed(mod)
    new, changed = {}, False
    for gv, func in work.functions.items():
        if func.is_primitive or func.attrs.get("Compiler") or func.attrs.get("SkipOptimization"):
            new[gv] = func
            continue
        out = _CastCanonicalizer().visit(func)
        changed |= out is not func
        new[gv] = out
    return work.with_functions(new) if changed else mod
