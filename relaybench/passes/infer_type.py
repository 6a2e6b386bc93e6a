"""InferType: type every expression of every function (Relay's constraint solver)."""

from __future__ import annotations

from ..ir.type_infer import infer_module, write_back
from .infra import is_typed, module_pass


@module_pass(opt_level=0)
def InferType(mod, ctx):
    """Infer the type of every expression; each node gets its ``checked_type``.

    >>> import relaybench as rb
    >>> x = rb.var("x", shape=(1, 3))
    >>> mod = rb.passes.InferType()(rb.IRModule.from_expr(rb.Function([x], x + x)))
    >>> mod["main"].body.checked_type
    Tensor[(1, 3), float32]

    A module of one function that inference already typed is not solved again (its nodes are
    immutable, so their types still hold): it only gets the annotations inference writes
    (:func:`~relaybench.ir.type_infer.write_back`), and comes back as it is when it has them. With
    several functions, one may have been replaced since, so the calls to it are typed again.
    """
    if len(mod.functions) == 1 and is_typed(mod):
        (gv, fn), = mod.functions.items()
        out = write_back(fn)
        return mod if out is fn else mod.with_functions({gv: out})
    return infer_module(mod)
