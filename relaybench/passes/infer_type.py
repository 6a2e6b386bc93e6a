"""InferType: type every expression of every function (Relay's constraint solver)."""

from __future__ import annotations

from ..ir.type_infer import infer_module
from .infra import module_pass


@module_pass(opt_level=0)
def InferType(mod, ctx):
    """Infer the type of every expression; each node gets its ``checked_type``.

    >>> import relaybench as rb
    >>> x = rb.var("x", shape=(1, 3))
    >>> mod = rb.passes.InferType()(rb.IRModule.from_expr(rb.Function([x], x + x)))
    >>> mod["main"].body.checked_type
    Tensor[(1, 3), float32]
    """
    return infer_module(mod)
