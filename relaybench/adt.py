"""Python values to and from the prelude's ADT values (as the interpreter, the VM and AoT take
and give them).

``from_python(value, type)`` builds a value of a Relay type from plain Python: a Python list
becomes a ``List`` (``Cons(v0, Cons(v1, ... Nil))``), a pair ``(value, [children])`` a ``Tree``
node ``Rose(value, [...])``, an ``Option`` is ``None`` or the value itself, numbers become
scalars as Relay constants do. Without a type, lists become Lists and everything else is taken
as it is (tuples stay tuples). ``to_python(value)`` is the converse: Lists become Python lists,
Trees ``(value, [children])``, Options ``None`` or the value, tuples tuples, everything else as
it is. Both are iterative: a 100,000-element list converts with a constant Python stack.

>>> import numpy as np
>>> from relaybench.adt import from_python, to_python
>>> xs = from_python([1, 2, 3])
>>> xs
Cons(1, Cons(2, Cons(...)))
>>> to_python(xs)
[array(1, dtype=int32), array(2, dtype=int32), array(3, dtype=int32)]
>>> tree = from_python((np.float32(1), [(np.float32(2), [])]), "Tree")
>>> tree.name, float(to_python(tree)[1][0][0])
('Rose', 2.0)
"""

from __future__ import annotations

from typing import Optional

__all__ = ["from_python", "to_python"]


def _prelude_constructor(name: str, mod=None):
    from .models.nlp import _constructor
    return _constructor(name, mod)


def _leaf(value):
    if isinstance(value, (bool, int, float)):
        from .ir.builder import const
        return const(value).data
    return value


def _type_name(ty) -> Optional[str]:
    """``List`` for ``List[...]`` (a TypeCall), the string itself for a string."""
    if ty is None or isinstance(ty, str):
        return ty
    func = getattr(ty, "func", None)
    return getattr(func, "name_hint", None)


def _element_type(ty):
    args = getattr(ty, "args", None)
    return args[0] if args else None


def from_python(value, ty=None, mod=None):
    """``value`` as a Relay value of type ``ty`` (a Relay type, or one of the names ``"List"``,
    ``"Tree"``, ``"Option"``; None: Python lists become Lists). ``mod`` gives the constructors
    (by default the prelude's, which every module importing it shares)."""
    from .backends.interpreter import ConstructorValue
    from .ir.types import TupleType
    # a post-order on an explicit stack: ("build", ...) entries assemble converted children
    out: list = []
    stack = [("visit", value, ty)]
    while stack:
        item = stack.pop()
        if item[0] == "visit":
            _, v, t = item
            name = _type_name(t)
            if name == "List" or (name is None and isinstance(v, list)):
                if not isinstance(v, (list, tuple)):
                    out.append(v)
                    continue
                elem = _element_type(t) if not isinstance(t, str) else None
                stack.append(("list", len(v)))
                stack.extend(("visit", x, elem) for x in reversed(v))
            elif name == "Tree" and isinstance(v, tuple):
                if len(v) != 2 or not isinstance(v[1], (list, tuple)):
                    raise TypeError("from_python: a Tree node is (value, [children]), got "
                                    f"{type(v).__name__} of length {len(v)}")
                elem = _element_type(t) if not isinstance(t, str) else None
                stack.append(("tree", len(v[1])))
                stack.extend(("visit", c, t) for c in reversed(v[1]))
                stack.append(("visit", v[0], elem))
            elif name == "Option" and not isinstance(v, ConstructorValue):
                if v is None:
                    out.append(ConstructorValue(_prelude_constructor("None", mod), ()))
                else:
                    stack.append(("some",))
                    stack.append(("visit", v, _element_type(t)))
            elif isinstance(t, TupleType) and isinstance(v, tuple):
                stack.append(("tuple", len(v)))
                stack.extend(("visit", x, ft) for x, ft in zip(reversed(v), reversed(t.fields)))
            else:
                out.append(_leaf(v))
        elif item[0] == "list":
            n = item[1]
            items = out[len(out) - n:] if n else []
            del out[len(out) - n:]
            cons, nil = _prelude_constructor("Cons", mod), _prelude_constructor("Nil", mod)
            acc = ConstructorValue(nil, ())
            for x in reversed(items):
                acc = ConstructorValue(cons, (x, acc))
            out.append(acc)
        elif item[0] == "tree":
            n = item[1]
            children = out[len(out) - n:] if n else []
            del out[len(out) - n:]
            node_value = out.pop()
            cons, nil = _prelude_constructor("Cons", mod), _prelude_constructor("Nil", mod)
            acc = ConstructorValue(nil, ())
            for c in reversed(children):
                acc = ConstructorValue(cons, (c, acc))
            out.append(ConstructorValue(_prelude_constructor("Rose", mod), (node_value, acc)))
        elif item[0] == "some":
            out.append(ConstructorValue(_prelude_constructor("Some", mod), (out.pop(),)))
        else:  # tuple
            n = item[1]
            fields = tuple(out[len(out) - n:]) if n else ()
            del out[len(out) - n:]
            out.append(fields)
    return out[0]


def to_python(value):
    """``value`` (an interpreter, VM or AoT result) with the prelude's Lists as Python lists,
    Trees as ``(value, [children])`` and Options as ``None`` or their value."""
    from .backends.interpreter import ConstructorValue
    out: list = []
    stack = [("visit", value)]
    while stack:
        item = stack.pop()
        if item[0] == "visit":
            v = item[1]
            name = getattr(v, "name", None) if isinstance(v, ConstructorValue) else None
            if name in ("Cons", "Nil"):
                elements = []
                while isinstance(v, ConstructorValue) and v.name == "Cons":
                    elements.append(v.fields[0])
                    v = v.fields[1]
                stack.append(("list", len(elements)))
                stack.extend(("visit", x) for x in reversed(elements))
            elif name == "Rose":
                stack.append(("tree",))
                stack.append(("visit", v.fields[1]))
                stack.append(("visit", v.fields[0]))
            elif name == "None" and not v.fields:
                out.append(None)
            elif name == "Some" and len(v.fields) == 1:
                stack.append(("visit", v.fields[0]))
            elif isinstance(v, tuple):
                stack.append(("tuple", len(v)))
                stack.extend(("visit", x) for x in reversed(v))
            else:
                out.append(v)
        elif item[0] == "tree":
            children = out.pop()
            node = out.pop()
            out.append((node, children))
        else:
            n = item[1]
            items = out[len(out) - n:] if n else []
            del out[len(out) - n:]
            out.append(list(items) if item[0] == "list" else tuple(items))
    return out[0]
