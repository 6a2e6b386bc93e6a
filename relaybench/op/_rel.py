"""Helpers shared by type relations: broadcasting, axis normalization, dimension checks."""

from __future__ import annotations

from ..errors import TypeInferenceError
from ..ir.symbolic import ANY, format_dim
from ..ir.types import IncompleteType, TensorType, Type, TupleType


def fail(reason: str):
    """Raise the error a relation raises: a reason in plain words (inference adds the rest)."""
    raise TypeInferenceError(reason)


def known(t: Type) -> bool:
    """Whether a type is known enough to compute with (not a hole)."""
    return not isinstance(t, IncompleteType)


def tensor(t: Type, what: str) -> TensorType:
    """``t`` as a TensorType, or fail naming the argument."""
    if not isinstance(t, TensorType):
        fail(f"{what} must be a tensor, got {t}")
    return t


def broadcast_dim(a, b, i: int, lhs: TensorType, rhs: TensorType):
    if a == b:
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    if a is ANY:
        return b
    if b is ANY:
        return a
    fail(f"cannot broadcast {lhs} and {rhs}: dimension {format_dim(a)} vs {format_dim(b)} "
         f"(axis {i} from the right)")


def broadcast_shape(lhs: TensorType, rhs: TensorType) -> tuple:
    """numpy broadcasting, right-aligned; symbolic dims must be equal or 1."""
    a, b = lhs.shape, rhs.shape
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + tuple(a)
    b = (1,) * (n - len(b)) + tuple(b)
    return tuple(broadcast_dim(x, y, n - i, lhs, rhs) for i, (x, y) in enumerate(zip(a, b)))


def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    if not -ndim <= axis < max(ndim, 1):
        fail(f"{what} {axis} is out of range for rank {ndim}")
    return axis + ndim if axis < 0 else axis


_ = TupleType
