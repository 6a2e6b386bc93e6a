"""Elementwise and broadcasting operators.

>>> import relaybench as rb
>>> from relaybench.ir.type_infer import infer_expr
>>> x, y = rb.var("x", shape=(4, 1, 3)), rb.var("y", shape=(5, 1))
>>> infer_expr(add(x, y)), infer_expr(less(x, y))
(Tensor[(4, 5, 3), float32], Tensor[(4, 5, 3), bool])
"""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType
from ._rel import broadcast_shape, fail, known, relation, tensor
from .registry import OpDef, OpPattern, register

__all__ = ["add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "negative",
           "equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]


@relation("BroadcastRel")
def broadcast_rel(types, attrs):
    """``BroadcastRel``: same dtype, numpy broadcasting of the shapes."""
    lhs, rhs = types
    if not (known(lhs) and known(rhs)):
        return None
    lhs, rhs = tensor(lhs, "lhs"), tensor(rhs, "rhs")
    if lhs.dtype != rhs.dtype:
        fail(f"operands have different dtypes: {lhs.dtype} and {rhs.dtype}")
    if lhs.shape == rhs.shape or not rhs.shape:
        return lhs
    if not lhs.shape:
        return rhs
    return TensorType(broadcast_shape(lhs, rhs), lhs.dtype)


@relation("BroadcastCompRel")
def broadcast_comp_rel(types, attrs):
    """``BroadcastCompRel``: like BroadcastRel, but the result is ``bool``."""
    out = broadcast_rel(types, attrs)
    return None if out is None else TensorType(out.shape, "bool")


@relation("IdentityRel")
def identity_rel(types, attrs):
    """``IdentityRel``: the output has the input's type."""
    (t,) = types
    if not known(t):
        return None
    return tensor(t, "data")


def _binary(name: str, ref, doc: str, rel=broadcast_rel):
    return register(OpDef(name, ("lhs", "rhs"), rel, OpPattern.BROADCAST,
                          reference=lambda a, b, attrs: np.asarray(ref(a, b)), doc=doc))


def _divide(a, b):
    if np.issubdtype(np.asarray(a).dtype, np.integer):
        # Relay's integer division truncates toward zero (C semantics)
        q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
        return (np.sign(a) * np.sign(b) * q).astype(np.asarray(a).dtype)
    return np.divide(a, b)


def _power(a, b):
    return np.power(a, b).astype(np.result_type(a, b))


add = _binary("add", np.add, "Elementwise sum with numpy broadcasting.")
subtract = _binary("subtract", np.subtract, "Elementwise difference with numpy broadcasting.")
multiply = _binary("multiply", np.multiply, "Elementwise product with numpy broadcasting.")
divide = _binary("divide", _divide, "Elementwise quotient with numpy broadcasting; integer "
                                    "division truncates toward zero.")
power = _binary("power", _power, "Elementwise ``lhs ** rhs`` with numpy broadcasting.")
maximum = _binary("maximum", np.maximum, "Elementwise maximum with numpy broadcasting.")
minimum = _binary("minimum", np.minimum, "Elementwise minimum with numpy broadcasting.")

equal = _binary("equal", np.equal, "``lhs == rhs`` elementwise; a bool tensor.", broadcast_comp_rel)
not_equal = _binary("not_equal", np.not_equal, "``lhs != rhs`` elementwise; a bool tensor.",
                    broadcast_comp_rel)
less = _binary("less", np.less, "``lhs < rhs`` elementwise; a bool tensor.", broadcast_comp_rel)
less_equal = _binary("less_equal", np.less_equal, "``lhs <= rhs`` elementwise; a bool tensor.",
                     broadcast_comp_rel)
greater = _binary("greater", np.greater, "``lhs > rhs`` elementwise; a bool tensor.",
                  broadcast_comp_rel)
greater_equal = _binary("greater_equal", np.greater_equal,
                        "``lhs >= rhs`` elementwise; a bool tensor.", broadcast_comp_rel)

negative = register(OpDef("negative", ("data",), identity_rel, OpPattern.ELEMWISE,
                          reference=lambda x, attrs: np.negative(x), doc="Elementwise negation."))
