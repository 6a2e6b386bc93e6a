"""Elementwise and broadcasting operators."""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType
from ._rel import broadcast_shape, fail, known, tensor
from .registry import OpDef, OpPattern, register

__all__ = ["add", "subtract", "multiply", "divide", "negative"]


def broadcast_rel(types, attrs):
    """``BroadcastRel``: same dtype, numpy broadcasting of the shapes."""
    lhs, rhs = types
    if not (known(lhs) and known(rhs)):
        return None
    lhs, rhs = tensor(lhs, "lhs"), tensor(rhs, "rhs")
    if lhs.dtype != rhs.dtype:
        fail(f"operands have different dtypes: {lhs.dtype} and {rhs.dtype}")
    return TensorType(broadcast_shape(lhs, rhs), lhs.dtype)


def identity_rel(types, attrs):
    """``IdentityRel``: the output has the input's type."""
    (t,) = types
    if not known(t):
        return None
    return tensor(t, "data")


def _binary(name: str, ref, doc: str):
    return register(OpDef(name, ("lhs", "rhs"), broadcast_rel, OpPattern.BROADCAST,
                          reference=lambda a, b, attrs: ref(a, b), doc=doc))


add = _binary("add", np.add, "Elementwise sum with numpy broadcasting.")
subtract = _binary("subtract", np.subtract, "Elementwise difference with numpy broadcasting.")
multiply = _binary("multiply", np.multiply, "Elementwise product with numpy broadcasting.")
divide = _binary("divide", np.divide, "Elementwise quotient with numpy broadcasting.")

negative = register(OpDef("negative", ("data",), identity_rel, OpPattern.ELEMWISE,
                          reference=lambda x, attrs: np.negative(x), doc="Elementwise negation."))
