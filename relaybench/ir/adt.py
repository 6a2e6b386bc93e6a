"""Algebraic data types: :class:`TypeData` and a helper to define one.

>>> from relaybench.ir import define_adt, TensorType
>>> List = define_adt("List", ["A"], lambda List, A: {"Cons": [A, List(A)], "Nil": []})
>>> print(List)
type List[A] {
  Cons(A, List[A]),
  Nil,
}
>>> List["Cons"].tag, List["Nil"].tag
(0, 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from .expr import Constructor
from .types import GlobalTypeVar, TypeCall, TypeVar, type_str

__all__ = ["TypeData", "define_adt"]


@dataclass(frozen=True, slots=True, eq=False)
class TypeData:
    """An ADT definition: ``type header[type_vars] { constructors }``."""

    header: GlobalTypeVar
    type_vars: tuple
    constructors: tuple

    def __post_init__(self):
        object.__setattr__(self, "type_vars", tuple(self.type_vars))
        object.__setattr__(self, "constructors", tuple(self.constructors))
        for c in self.constructors:
            if c.belong_to is not self.header:
                raise ValueError(f"constructor {c.name_hint} does not belong to {self.header.name_hint}")

    @property
    def name(self) -> str:
        return self.header.name_hint

    def __getitem__(self, name: str) -> Constructor:
        for c in self.constructors:
            if c.name_hint == name:
                return c
        raise KeyError(f"type {self.name} has no constructor {name!r} "
                       f"(it has {', '.join(c.name_hint for c in self.constructors) or 'none'})")

    def __call__(self, *args) -> TypeCall:
        """The ADT applied to type arguments: ``List(t)`` is ``List[t]``."""
        return TypeCall(self.header, args)

    def astext(self) -> str:
        names = {v: v.name_hint for v in self.type_vars}
        head = self.name + ("[" + ", ".join(v.name_hint for v in self.type_vars) + "]" if self.type_vars else "")
        lines = [f"type {head} {{"]
        for c in self.constructors:
            if c.inputs:
                lines.append(f"  {c.name_hint}(" + ", ".join(type_str(t, names) for t in c.inputs) + "),")
            else:
                lines.append(f"  {c.name_hint},")
        lines.append("}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.astext()

    def __repr__(self) -> str:
        return f"TypeData({self.name})"


def define_adt(name: str, type_params: Sequence[str],
               constructors: Callable[..., dict] | dict) -> TypeData:
    """Define an ADT.

    ``constructors`` maps each constructor's name to the list of its field types; given as a
    function, it receives a callable that applies the ADT to type arguments and the type
    variables, so recursive types read naturally:
    ``define_adt("Tree", ["A"], lambda Tree, A: {"Rose": [A, List(Tree(A))]})``.
    """
    header = GlobalTypeVar(name)
    tvars = [TypeVar(p) for p in type_params]

    def apply(*args):
        return TypeCall(header, args)

    spec = constructors(apply, *tvars) if callable(constructors) else constructors
    cons = [Constructor(cname, tuple(fields), header, tag) for tag, (cname, fields) in enumerate(spec.items())]
    return TypeData(header, tvars, cons)
