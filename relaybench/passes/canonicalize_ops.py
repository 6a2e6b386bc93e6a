"""CanonicalizeOps: operators with a special form rewritten into general ones (Relay's
``canonicalize_ops.cc``).

``nn.bias_add(x, b, axis)`` becomes ``add(x, expand_dims(b, axis=1, num_newaxis=ndim - axis - 1))``
(no ``expand_dims`` when ``axis`` is the last), a plain broadcast that fuses and folds like any
other; a negative ``axis`` counts from the end. Everything else, ``nn.dense`` included, is left as
it is; nothing inside ``Primitive`` functions is touched.

>>> import relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(1, 4, 8, 8), float32], %b: Tensor[(4), float32]) {
...   nn.bias_add(%x, %b)
... }''')
>>> print(CanonicalizeOps()(mod)["main"].astext(show_types=False))
fn (%x: Tensor[(1, 4, 8, 8), float32], %b: Tensor[(4), float32]) -> Tensor[(1, 4, 8, 8), float32] {
  %0 = expand_dims(%b, axis=1, num_newaxis=2);
  add(%x, %0)
}
"""

from __future__ import annotations

from ..ir.analysis import ops_used
from ..ir.expr import Call, Function, Op
from ..ir.functor import FusedAwareMutator
from ..ir.types import TensorType
from .fold_constant import TypeOracle
from .infra import function_pass
from .simplify_inference import expand_to_axis

__all__ = ["CanonicalizeOps", "canonicalize_ops"]


def _bias_add(type_of, call: Call, args: list):
    t = type_of(call.args[0])
    if not isinstance(t, TensorType):
        return None
    x, bias = args
    ndim = len(t.shape)
    axis = call.attrs.axis + ndim if call.attrs.axis < 0 else call.attrs.axis
    return Call(Op.get("add"), (x, expand_to_axis(bias, ndim, axis)))


# op name -> rule(types, original call, rewritten arguments) -> replacement or None
_RULES = {"nn.bias_add": _bias_add}


class _Canonicalizer(FusedAwareMutator):
    def __init__(self, func: Function, mod):
        super().__init__()
        self.type_of = TypeOracle(func, mod)


    def visit_call(self, call):
        if isinstance(call.op, Op):
            rule = _RULES.get(call.op.name)
            if rule is not None:
                out = rule(self.type_of, call, [self.visit(a) for a in call.args])
                if out is not None:
                    return out
        return super().visit_call(call)


def canonicalize_ops(func: Function, mod=None) -> Function:
    """``func`` with ``nn.bias_add`` rewritten; the same object when it has none."""
    if not ops_used(func) & _RULES.keys():
        return func
    return _Canonicalizer(func, mod).visit(func)


@function_pass(opt_level=3)
def CanonicalizeOps(func, mod, ctx):
    """Rewrite ``nn.bias_add`` into ``expand_dims`` and ``add``."""
    return canonicalize_ops(func, mod)
