"""Binding parameters to constants: the step before constant folding folds weights."""

from __future__ import annotations

import numpy as np

from ..ir.expr import Constant, Function
from ..ir.functor import ExprMutator
from ..ir.module import IRModule


def bind_params_by_name(func: Function, params: dict) -> Function:
    """``func`` with each parameter named in ``params`` replaced by a constant of that value.

    The remaining parameters keep their order. Raises ValueError naming a parameter whose value
    has the wrong shape or dtype, or a name that is not a parameter.
    """
    by_name = {}
    for p in func.params:
        if p.name_hint in by_name:
            raise ValueError(f"parameter name {p.name_hint!r} is not unique; cannot bind by name")
        by_name[p.name_hint] = p
    unknown = [k for k in params if k not in by_name]
    if unknown:
        raise ValueError(f"cannot bind {unknown[0]!r}: not a parameter (have {', '.join(by_name)})")
    mutator = ExprMutator()
    for name, value in params.items():
        p = by_name[name]
        arr = np.asarray(value)
        t = p.type_annotation
        if t is not None and hasattr(t, "shape"):
            if arr.dtype.name != t.dtype or len(arr.shape) != len(t.shape) or any(
                    isinstance(d, int) and d != s for d, s in zip(t.shape, arr.shape)):
                raise ValueError(f"cannot bind %{name}: expected {t}, given {arr.dtype.name}{list(arr.shape)}")
        mutator.memo[p] = Constant(arr)
    body = mutator.visit(func.body)
    kept = [p for p in func.params if p.name_hint not in params]
    return Function(kept, body, func.ret_type, func.type_params, func.attrs)


def bind_params(mod: IRModule, params: dict, func_name: str = "main") -> IRModule:
    """A new module whose ``@func_name`` has the given parameters bound to constants."""
    new = mod.copy()
    new[func_name] = bind_params_by_name(mod[func_name], params)
    return new
