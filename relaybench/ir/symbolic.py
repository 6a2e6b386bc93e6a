"""Shape dimensions: integers, Relax-style symbolic expressions, and ``Any``.

A dimension of a :class:`~relaybench.ir.types.TensorType` is one of

* a Python ``int`` (a static extent),
* a :class:`SymVar` (a named symbolic extent, ``n``) or a :class:`SymExpr` (an integer
  polynomial of symbolic extents, with floor division and modulo by constants),
* :data:`ANY` (printed ``?``), a dynamic extent known only at run time.

Symbolic arithmetic is kept in a canonical form, a sum of monomials with integer coefficients, so
that equal expressions are equal objects: ``n + n`` is ``2*n`` and ``(n + 1) * 2 - 2`` is ``2*n``.
A canonical form that is a constant collapses to an ``int``; a lone variable collapses to the
:class:`SymVar` itself.

>>> n, m = SymVar("n"), SymVar("m")
>>> n + n
2*n
>>> (n + 1) * 2 - 2
2*n
>>> (n * m + 3) - n * m
3
>>> floordiv(2 * n + 4, 2)
n + 2
>>> str(floordiv(n, 4) + 1)
'n // 4 + 1'
"""

from __future__ import annotations

from typing import Iterable, Union


class AnyDim:
    """The dynamic dimension ``?``; a singleton, :data:`ANY`."""

    __slots__ = ()
    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "?"

    def __reduce__(self):
        return (AnyDim, ())

    # arithmetic with an unknown extent gives an unknown extent
    def __add__(self, other): return add(self, other)
    def __radd__(self, other): return add(other, self)
    def __sub__(self, other): return sub(self, other)
    def __rsub__(self, other): return sub(other, self)
    def __mul__(self, other): return mul(self, other)
    def __rmul__(self, other): return mul(other, self)
    def __floordiv__(self, other): return floordiv(self, other)
    def __mod__(self, other): return mod(self, other)


ANY = AnyDim()


class SymVar:
    """A named symbolic extent. Two SymVars with the same name are the same extent.

    Symbolic names are scoped like Relax's: a function whose signature mentions ``n`` is
    polymorphic in ``n`` (each call site may bind it differently); inside the function ``n`` is
    one fixed, unknown extent.
    """

    __slots__ = ("name",)

    def __init__(self, name: str):
        if not isinstance(name, str) or not name:
            raise ValueError("a symbolic dimension needs a non-empty name")
        object.__setattr__(self, "name", name)

    def __setattr__(self, key, value):
        raise AttributeError("SymVar is immutable")

    def __eq__(self, other) -> bool:
        return isinstance(other, SymVar) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("SymVar", self.name))

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self):
        return (SymVar, (self.name,))

    # arithmetic builds canonical expressions
    def __add__(self, other): return add(self, other)
    def __radd__(self, other): return add(other, self)
    def __sub__(self, other): return sub(self, other)
    def __rsub__(self, other): return sub(other, self)
    def __mul__(self, other): return mul(self, other)
    def __rmul__(self, other): return mul(other, self)
    def __floordiv__(self, other): return floordiv(self, other)
    def __mod__(self, other): return mod(self, other)
    def __neg__(self): return mul(-1, self)


class _Atom:
    """A non-polynomial atom: ``floordiv(e, c)`` or ``mod(e, c)`` with ``c`` a positive int."""

    __slots__ = ("kind", "expr", "divisor", "_key")

    def __init__(self, kind: str, expr, divisor: int):
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "expr", expr)
        object.__setattr__(self, "divisor", divisor)
        object.__setattr__(self, "_key", (kind, _sort_key(expr), divisor))

    def __setattr__(self, key, value):
        raise AttributeError("immutable")

    def __eq__(self, other) -> bool:
        return isinstance(other, _Atom) and other._key == self._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __reduce__(self):
        return (_Atom, (self.kind, self.expr, self.divisor))

    def __repr__(self) -> str:
        inner = _format(self.expr)
        if not isinstance(self.expr, (SymVar, int)):
            inner = f"({inner})"
        op = "//" if self.kind == "floordiv" else "%"
        return f"{inner} {op} {self.divisor}"


# A monomial is a tuple of (atom, exponent) pairs sorted by the atom's key; the constant monomial is ().
# A polynomial is a dict monomial -> nonzero int coefficient.

def _atom_key(atom) -> tuple:
    if isinstance(atom, SymVar):
        return (0, atom.name)
    return (1,) + atom._key


def _sort_key(dim) -> tuple:
    """A total order on dims used to keep canonical forms deterministic."""
    if isinstance(dim, int):
        return (0, dim)
    if isinstance(dim, SymVar):
        return (1, dim.name)
    if isinstance(dim, SymExpr):
        return (2, dim._key)
    if dim is ANY:
        return (3,)
    raise TypeError(f"not a dimension: {dim!r}")


class SymExpr:
    """A canonical integer polynomial over symbolic atoms. Build it with arithmetic on SymVars."""

    __slots__ = ("terms", "_key", "_hash")

    def __init__(self, terms: dict):
        items = tuple(sorted(terms.items(), key=lambda kv: tuple(_atom_key(a) + (e,) for a, e in kv[0])))
        object.__setattr__(self, "terms", items)
        key = tuple((tuple(_atom_key(a) + (e,) for a, e in mono), c) for mono, c in items)
        object.__setattr__(self, "_key", key)
        object.__setattr__(self, "_hash", hash(("SymExpr", key)))

    def __setattr__(self, key, value):
        raise AttributeError("SymExpr is immutable")

    def __eq__(self, other) -> bool:
        return isinstance(other, SymExpr) and other._key == self._key

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return _format(self)

    def __reduce__(self):
        return (_rebuild, (self.terms,))

    def __add__(self, other): return add(self, other)
    def __radd__(self, other): return add(other, self)
    def __sub__(self, other): return sub(self, other)
    def __rsub__(self, other): return sub(other, self)
    def __mul__(self, other): return mul(self, other)
    def __rmul__(self, other): return mul(other, self)
    def __floordiv__(self, other): return floordiv(self, other)
    def __mod__(self, other): return mod(self, other)
    def __neg__(self): return mul(-1, self)


def _rebuild(terms):
    return SymExpr(dict(terms))


Dim = Union[int, SymVar, SymExpr, AnyDim]


def _to_poly(dim) -> dict:
    if isinstance(dim, bool):
        raise TypeError("a dimension cannot be a bool")
    if isinstance(dim, int):
        return {(): dim} if dim else {}
    if isinstance(dim, SymVar):
        return {((dim, 1),): 1}
    if isinstance(dim, SymExpr):
        return dict(dim.terms)
    if isinstance(dim, _Atom):
        return {((dim, 1),): 1}
    if hasattr(dim, "__index__"):
        value = int(dim.__index__())
        return {(): value} if value else {}
    raise TypeError(f"cannot do arithmetic on dimension {dim!r}")


def _from_poly(poly: dict):
    poly = {m: c for m, c in poly.items() if c != 0}
    if not poly:
        return 0
    if len(poly) == 1:
        ((mono, coeff),) = poly.items()
        if mono == ():
            return coeff
        if coeff == 1 and len(mono) == 1 and mono[0][1] == 1 and isinstance(mono[0][0], SymVar):
            return mono[0][0]
    return SymExpr(poly)


def _mono_mul(a: tuple, b: tuple) -> tuple:
    powers: dict = {}
    for atom, e in a + b:
        powers[atom] = powers.get(atom, 0) + e
    return tuple(sorted(powers.items(), key=lambda kv: _atom_key(kv[0])))


def add(a, b):
    if a is ANY or b is ANY:
        return ANY
    if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool) and not isinstance(b, bool):
        return a + b
    pa = _to_poly(a)
    for mono, c in _to_poly(b).items():
        pa[mono] = pa.get(mono, 0) + c
    return _from_poly(pa)


def sub(a, b):
    return add(a, mul(-1, b))


def mul(a, b):
    if a is ANY or b is ANY:
        return ANY
    if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool) and not isinstance(b, bool):
        return a * b
    pa, pb = _to_poly(a), _to_poly(b)
    out: dict = {}
    for ma, ca in pa.items():
        for mb, cb in pb.items():
            m = _mono_mul(ma, mb)
            out[m] = out.get(m, 0) + ca * cb
    return _from_poly(out)


def _check_divisor(b) -> int:
    if not isinstance(b, int) or isinstance(b, bool):
        raise TypeError(f"symbolic division needs a constant integer divisor, not {b!r}")
    if b <= 0:
        raise ZeroDivisionError(f"symbolic division by {b}")
    return b


def floordiv(a, b):
    """``a // b`` for a constant positive ``b``; exact when every coefficient divides."""
    if a is ANY or b is ANY:
        return ANY
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    b = _check_divisor(b)
    if b == 1:
        return a
    poly = _to_poly(a)
    if all(c % b == 0 for c in poly.values()):
        return _from_poly({m: c // b for m, c in poly.items()})
    # (b*k + c) // b == k + c // b for any integer constant c
    const = poly.get((), 0)
    rest = {m: c for m, c in poly.items() if m != ()}
    if all(c % b == 0 for c in rest.values()):
        out = {m: c // b for m, c in rest.items()}
        if const // b:
            out[()] = const // b
        return _from_poly(out)
    return _from_poly({((_Atom("floordiv", _from_poly(poly), b), 1),): 1})


def mod(a, b):
    """``a % b`` for a constant positive ``b``."""
    if a is ANY or b is ANY:
        return ANY
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    b = _check_divisor(b)
    if b == 1:
        return 0
    poly = {m: c % b for m, c in _to_poly(a).items()}
    poly = {m: c for m, c in poly.items() if c}
    if not poly:
        return 0
    if list(poly) == [()]:
        return poly[()]
    return _from_poly({((_Atom("mod", _from_poly(poly), b), 1),): 1})


def _format_atom(atom) -> str:
    return atom.name if isinstance(atom, SymVar) else f"({atom!r})"


def _format_mono(mono: tuple) -> str:
    parts = []
    for atom, e in mono:
        parts.extend([_format_atom(atom)] * e)
    return "*".join(parts)


def _format(dim) -> str:
    if isinstance(dim, int):
        return str(dim)
    if isinstance(dim, SymVar):
        return dim.name
    if dim is ANY:
        return "?"
    if isinstance(dim, _Atom):
        return repr(dim)
    terms = list(dim.terms)
    # degree-descending, constants last, so 2*n + 1 reads naturally
    terms.sort(key=lambda mc: (mc[0] == (), -sum(e for _, e in mc[0])))
    out = ""
    for i, (mono, c) in enumerate(terms):
        if mono == ():
            body = str(abs(c))
        elif len(mono) == 1 and mono[0][1] == 1 and isinstance(mono[0][0], _Atom) and abs(c) == 1:
            body = repr(mono[0][0])
        else:
            body = _format_mono(mono)
            if abs(c) != 1:
                body = f"{abs(c)}*{body}"
        if i == 0:
            out = ("-" if c < 0 else "") + body
        else:
            out += (" - " if c < 0 else " + ") + body
    return out


def format_dim(dim) -> str:
    """The text of a dimension as Relay prints it (``3``, ``n``, ``2*n + 1``, ``?``)."""
    return _format(dim)


def is_dim(value) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(
        value, (SymVar, SymExpr)) or value is ANY


def as_dim(value) -> Dim:
    """Normalize a user-given dimension: ints (numpy ints too), names (``"n"``), ``None``/``"?"`` for Any."""
    if value is None or value is ANY:
        return ANY
    if isinstance(value, bool):
        raise TypeError("a dimension cannot be a bool")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a dimension cannot be negative: {value}")
        return value
    if isinstance(value, (SymVar, SymExpr)):
        return value
    if isinstance(value, str):
        if value == "?":
            return ANY
        if value.isidentifier():
            return SymVar(value)
        raise ValueError(f"not a dimension name: {value!r}")
    if hasattr(value, "__index__"):
        return as_dim(int(value.__index__()))
    raise TypeError(f"not a dimension: {value!r}")


def free_symvars(dim) -> list:
    """The SymVars a dimension mentions, in first-occurrence order."""
    out: list = []
    seen = set()
    stack = [dim]
    while stack:
        d = stack.pop()
        if isinstance(d, SymVar):
            if d not in seen:
                seen.add(d)
                out.append(d)
        elif isinstance(d, SymExpr):
            for mono, _ in reversed(d.terms):
                for atom, _e in reversed(mono):
                    stack.append(atom)
        elif isinstance(d, _Atom):
            stack.append(d.expr)
    return out


def substitute(dim, mapping: dict):
    """Replace SymVars by dims (``mapping``: SymVar -> Dim), re-canonicalizing."""
    if isinstance(dim, int) or dim is ANY:
        return dim
    if isinstance(dim, SymVar):
        return mapping.get(dim, dim)
    if isinstance(dim, _Atom):
        inner = substitute(dim.expr, mapping)
        return floordiv(inner, dim.divisor) if dim.kind == "floordiv" else mod(inner, dim.divisor)
    if isinstance(dim, SymExpr):
        total = 0
        for mono, c in dim.terms:
            term = c
            for atom, e in mono:
                value = substitute(atom, mapping)
                for _ in range(e):
                    term = mul(term, value)
            total = add(total, term)
        return total
    raise TypeError(f"not a dimension: {dim!r}")


def evaluate(dim, env: dict) -> int:
    """The integer value of a dimension given integer values for its SymVars (name -> int)."""
    value = substitute(dim, {SymVar(k) if isinstance(k, str) else k: v for k, v in env.items()})
    if not isinstance(value, int):
        raise ValueError(f"dimension {format_dim(dim)} is not determined by {env}")
    return value


def prod(dims: Iterable) -> Dim:
    out = 1
    for d in dims:
        out = mul(out, d)
    return out
