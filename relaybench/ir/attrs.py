"""Attributes of calls and functions: an immutable, ordered mapping with attribute access.

>>> a = Attrs(strides=(1, 1), padding=(0, 0, 0, 0))
>>> a.strides
(1, 1)
>>> a["padding"]
(0, 0, 0, 0)
>>> a.with_changes(strides=(2, 2))
Attrs(strides=(2, 2), padding=(0, 0, 0, 0))
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping


def freeze_value(value: Any) -> Any:
    """Make an attribute value immutable and hashable: lists become tuples, recursively."""
    if isinstance(value, (list, tuple)):
        return tuple(freeze_value(v) for v in value)
    if isinstance(value, dict):
        return Attrs(**{k: freeze_value(v) for k, v in value.items()})
    if hasattr(value, "item") and hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0:
        return value.item()  # numpy scalar
    return value


class Attrs(Mapping):
    """Immutable attributes. Equality and hashing are by content."""

    __slots__ = ("_items", "_hash", "_normalized_for")

    def __init__(self, _mapping: Mapping | None = None, **kwargs):
        items = dict(_mapping or {})
        items.update(kwargs)
        object.__setattr__(self, "_items", {k: freeze_value(v) for k, v in items.items()})
        object.__setattr__(self, "_hash", None)
        object.__setattr__(self, "_normalized_for", None)

    def __setattr__(self, key, value):
        raise AttributeError("Attrs are immutable; use with_changes()")

    def __getattr__(self, name: str) -> Any:
        try:
            return self._items[name]
        except KeyError:
            raise AttributeError(f"no attribute {name!r} (have: {', '.join(self._items) or 'none'})") from None

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other) -> bool:
        if isinstance(other, Attrs):
            return self._items == other._items
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            object.__setattr__(self, "_hash", hash(tuple(sorted((k, _hashable(v)) for k, v in self._items.items()))))
        return self._hash

    def with_changes(self, **changes) -> "Attrs":
        items = dict(self._items)
        items.update(changes)
        return Attrs(items)

    def to_dict(self) -> dict:
        return dict(self._items)

    def __repr__(self) -> str:
        return "Attrs(" + ", ".join(f"{k}={v!r}" for k, v in self._items.items()) + ")"

    def __reduce__(self):
        return (Attrs, (self._items,))


def _hashable(v):
    try:
        hash(v)
        return v
    except TypeError:
        return repr(v)


EMPTY_ATTRS = Attrs()
