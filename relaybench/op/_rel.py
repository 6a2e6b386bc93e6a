"""Helpers shared by type relations and attribute normalizers.

Relations follow the contract in :mod:`relaybench.op.registry`: ``rel(input_types, attrs)``
returns None while an input is unknown, the output type, or the list ``[in_0, ..., out]``; it
calls :func:`fail` with a reason in plain words when the types cannot satisfy it.
"""

from __future__ import annotations

from ..errors import TypeInferenceError
from ..ir.symbolic import ANY, format_dim
from ..ir.types import IncompleteType, TensorType, Type, TupleType


def fail(reason: str):
    """Raise the error a relation raises: a reason in plain words (inference adds the rest)."""
    raise TypeInferenceError(reason)


def relation(name: str):
    """Name a relation function the way Relay does (``Conv2DRel``); used in error reports."""
    def mark(func):
        func.relation_name = name
        return func
    return mark


def known(t: Type) -> bool:
    """Whether a type is known enough to compute with (not a hole)."""
    return not isinstance(t, IncompleteType)


def known_deep(t: Type) -> bool:
    """Whether ``t`` holds no hole at any depth (a tuple of tensors whose fields are all known)."""
    stack = [t]
    while stack:
        node = stack.pop()
        if isinstance(node, IncompleteType):
            return False
        if isinstance(node, TupleType):
            stack.extend(node.fields)
    return True


def tensor(t: Type, what: str) -> TensorType:
    """``t`` as a TensorType, or fail naming the argument."""
    if not isinstance(t, TensorType):
        fail(f"{what} must be a tensor, got {t}")
    return t


def fmt_shape(shape) -> str:
    """A shape as text: ``(1, n, ?)``."""
    return "(" + ", ".join(format_dim(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def same_dim(a, b) -> bool:
    """Whether two dims may be equal: equal in canonical form, or one of them is ``?``."""
    return a is ANY or b is ANY or a == b


def provably_different(a, b) -> bool:
    """Whether two dims certainly differ (their difference is a nonzero constant)."""
    if a is ANY or b is ANY:
        return False
    diff = a - b
    return isinstance(diff, int) and diff != 0


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


# ---- attribute normalizers (raise ValueError; the registry prefixes the op's name) ------------

def as_int(value, name: str, minimum=None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if hasattr(value, "__index__") and not isinstance(value, bool):
            value = int(value.__index__())
        else:
            raise ValueError(f"{name} must be an int, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


def int_tuple(value, sizes, name: str, minimum=None) -> tuple:
    """``value`` (an int or a sequence of ints) as a tuple whose length is one of ``sizes``.

    A single int is repeated to the first size.
    """
    if isinstance(value, (list, tuple)):
        out = tuple(as_int(v, name, minimum) for v in value)
    else:
        out = (as_int(value, name, minimum),) * sizes[0]
    if len(out) not in sizes:
        raise ValueError(f"{name} must have {' or '.join(map(str, sizes))} values, got {value!r}")
    return out
