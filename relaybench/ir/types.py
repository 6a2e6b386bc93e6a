"""Relay's types.

Type nodes are immutable. Structural types (:class:`TensorType`, :class:`TupleType`,
:class:`FuncType`, :class:`TypeCall`, :class:`RefType`) compare with ``==`` by their fields;
binders and holes (:class:`TypeVar`, :class:`GlobalTypeVar`, :class:`IncompleteType`) compare by
identity, like variables. As in Relay (whose ``Type.__eq__`` is structural equality), a
:class:`FuncType` with type parameters compares up to their renaming (alpha-equivalence):
``fn [A](A) -> A == fn [B](B) -> B``, and hashes alike.

>>> t = TensorType((1, "n", None), "float32")
>>> t
Tensor[(1, n, ?), float32]
>>> t.shape[1] + t.shape[1]
2*n
>>> TupleType([t, scalar_type("bool")])
(Tensor[(1, n, ?), float32], bool)
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any as _AnyT, Callable, Optional

from .symbolic import ANY, AnyDim, SymExpr, SymVar, as_dim, format_dim

__all__ = [
    "Type", "TensorType", "TupleType", "FuncType", "TypeVar", "GlobalTypeVar", "IncompleteType",
    "TypeConstraint", "TypeRelation", "TypeCall", "RefType", "TypeKind", "scalar_type",
    "unit_type", "DTYPES", "check_dtype", "split_dtype", "dtype_lanes", "dtype_bits", "dtype_itemsize",
    "numpy_dtype", "type_str",
]


DTYPES = frozenset({
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64",
})


# As TVM's String2DLDataType reads a dtype, a suffix ``x<lanes>`` makes a vector of that many
# elements (``int8x4``, ``float32x4``, ``uint8x16``). The shorthands without a width (``int``,
# ``intx4``) are the text format's: the parser writes them out.
_VECTOR_DTYPE = re.compile(r"([a-z]+[0-9]*)x([0-9]+)$")


def split_dtype(dtype: str) -> tuple:
    """``(element dtype, lanes)`` of a dtype name, as TVM's DataType reads it; ValueError if invalid.

    A vector dtype is an element dtype and ``x`` and a lane count; a scalar dtype has one lane
    (and, as in TVM, one lane is the scalar itself: ``int8x1`` is ``int8``).

    >>> split_dtype("int8x4"), split_dtype("float32x8"), split_dtype("bool")
    (('int8', 4), ('float32', 8), ('bool', 1))
    >>> split_dtype("int7x4")
    Traceback (most recent call last):
        ...
    ValueError: unknown dtype 'int7x4': its element int7 is not one of bfloat16, bool, float16, \
float32, float64, int16, int32, int64, int8, uint16, uint32, uint64, uint8
    """
    if dtype in DTYPES:
        return dtype, 1
    m = _VECTOR_DTYPE.match(dtype)
    if m is None:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(sorted(DTYPES))}, "
                         "or one of them with x<lanes> (int8x4)")
    element, lanes = m.group(1), int(m.group(2))
    if element not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}: its element {element} is not one of "
                         f"{', '.join(sorted(DTYPES))}")
    if lanes < 1:
        raise ValueError(f"invalid dtype {dtype!r}: a vector dtype needs at least one lane")
    return element, lanes


def _dtype_name(element: str, lanes: int) -> str:
    return element if lanes == 1 else f"{element}x{lanes}"


def check_dtype(dtype, vector: bool = False) -> str:
    """Normalize a dtype (a string or a numpy dtype) to Relay's name, or raise ValueError.

    ``vector`` allows vector dtypes (``int8x4``): a TensorType holds them, but an operator's
    attribute (``cast``'s ``dtype``, ...) names a scalar element type, since no operator here
    computes on lanes.

    >>> check_dtype("int8x4", vector=True), check_dtype("float32x1", vector=True)
    ('int8x4', 'float32')
    >>> check_dtype("int8x4")
    Traceback (most recent call last):
        ...
    ValueError: vector dtype 'int8x4' (4 lanes of int8) is not allowed here: a scalar dtype is \
expected
    """
    if not isinstance(dtype, str):
        import numpy as np
        try:
            dtype = np.dtype(dtype).name
        except TypeError as err:
            raise ValueError(f"not a dtype: {dtype!r}") from err
    if dtype in DTYPES:
        return dtype
    element, lanes = split_dtype(dtype)
    if lanes > 1 and not vector:
        raise ValueError(f"vector dtype {dtype!r} ({lanes} lanes of {element}) is not allowed here: "
                         "a scalar dtype is expected")
    return _dtype_name(element, lanes)


def dtype_lanes(dtype: str) -> int:
    """The number of lanes of a dtype: 4 for ``int8x4``, 1 for a scalar dtype."""
    return split_dtype(dtype)[1]


def dtype_bits(dtype: str) -> int:
    """The width of one element of ``dtype`` in bits, lanes included, as TVM's ``DataType.bits *
    lanes``: ``bool`` is 1, ``float16`` 16, ``int8x4`` 32.

    >>> dtype_bits("bool"), dtype_bits("float16"), dtype_bits("int8x4"), dtype_bits("uint8x16")
    (1, 16, 32, 128)
    """
    element, lanes = split_dtype(dtype)
    bits = 1 if element == "bool" else int(re.search(r"[0-9]+$", element).group())
    return bits * lanes


def dtype_itemsize(dtype: str) -> int:
    """The bytes one element of ``dtype`` takes in memory, lanes included (``bool`` takes a byte).

    >>> dtype_itemsize("bool"), dtype_itemsize("bfloat16"), dtype_itemsize("float32x4")
    (1, 2, 16)
    """
    element, lanes = split_dtype(dtype)
    return max(1, dtype_bits(element) // 8) * lanes


def numpy_dtype(dtype: str):
    """The numpy dtype of ``dtype``'s elements; ValueError where numpy has none (``bfloat16``).

    A vector dtype maps to a numpy sub-array dtype: an array of it has the lanes as its last axis,
    the layout TVM's ``NDArray.numpy()`` gives a vector tensor.

    >>> import numpy as np
    >>> numpy_dtype("int8")
    dtype('int8')
    >>> np.zeros((2, 3), numpy_dtype("int8x4")).shape
    (2, 3, 4)
    """
    import numpy as np

    element, lanes = split_dtype(dtype)
    if element == "bfloat16":
        raise ValueError(f"dtype {dtype!r}: numpy has no bfloat16")
    return np.dtype(element) if lanes == 1 else np.dtype((element, (lanes,)))


class TypeKind(enum.Enum):
    Type = 0
    ShapeVar = 1
    BaseType = 2
    Constraint = 4
    AdtHandle = 5
    TypeData = 6


class Type:
    """Base of every type. ``str(t)`` is its Relay text."""

    __slots__ = ()

    def __str__(self) -> str:
        return type_str(self)

    def __repr__(self) -> str:
        return type_str(self)

    def _repr_html_(self) -> str:
        from ..viz.html import html
        return html(self)


@dataclass(frozen=True, slots=True, repr=False)
class TensorType(Type):
    """``Tensor[(d0, d1, ...), dtype]``; each dim an int, a symbolic expression or ``ANY``.

    ``shape`` may be given with names (``"n"``) and ``None``/``"?"`` for Any. ``dtype`` may be a
    vector dtype (``int8x4``: four int8 lanes per element), as in Relay: it type-checks and prints,
    but no operator computes on it and the executors refuse it (see :func:`split_dtype`).
    """

    shape: tuple
    dtype: str = "float32"

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(as_dim(d) for d in self.shape))
        object.__setattr__(self, "dtype", check_dtype(self.dtype, vector=True))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def concrete_shape(self) -> tuple:
        """The shape as ints; raises ValueError if a dim is symbolic or Any."""
        if not self.is_static:
            raise ValueError(f"{self} has a symbolic or dynamic shape")
        return self.shape


@dataclass(frozen=True, slots=True, repr=False)
class TupleType(Type):
    """``(T0, T1, ...)``; the empty tuple type ``()`` is the unit type."""

    fields: tuple

    def __post_init__(self):
        object.__setattr__(self, "fields", tuple(self.fields))
        for f in self.fields:
            if not isinstance(f, Type):
                raise TypeError(f"TupleType field is not a type: {f!r}")


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class TypeVar(Type):
    """A type parameter, bound by a function's or an ADT's type params. Compares by identity."""

    name_hint: str
    kind: TypeKind = TypeKind.Type


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class GlobalTypeVar(Type):
    """The handle of an ADT (``List``), bound in a module's type definitions. Compares by identity."""

    name_hint: str
    kind: TypeKind = TypeKind.AdtHandle


_incomplete_counter = [0]


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class IncompleteType(Type):
    """A hole to be filled by type inference; printed ``_``. Compares by identity."""

    kind: TypeKind = TypeKind.Type


class TypeConstraint(Type):
    __slots__ = ()


@dataclass(frozen=True, slots=True, repr=False)
class TypeRelation(TypeConstraint):
    """A relation ``func(types, num_inputs, attrs, reporter)`` over ``args`` (inputs then outputs).

    This is how an operator's type is stated: ``fn<T0..Tn>(T0..Tn-1) -> Tn where Rel(T0..Tn)``.
    """

    func: Callable
    args: tuple
    num_inputs: int
    attrs: _AnyT = None

    def __post_init__(self):
        object.__setattr__(self, "args", tuple(self.args))

    @property
    def name(self) -> str:
        return getattr(self.func, "relation_name", getattr(self.func, "__name__", "Rel"))


@dataclass(frozen=True, slots=True, repr=False)
class FuncType(Type):
    """``fn<type_params>(arg_types) -> ret_type where type_constraints``."""

    arg_types: tuple
    ret_type: Type
    type_params: tuple = ()
    type_constraints: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "arg_types", tuple(self.arg_types))
        object.__setattr__(self, "type_params", tuple(self.type_params))
        object.__setattr__(self, "type_constraints", tuple(self.type_constraints))

    def __eq__(self, other) -> bool:
        """Field by field; with type parameters on either side, up to their renaming."""
        if self is other:
            return True
        if type(other) is not FuncType:
            return NotImplemented
        if (self.arg_types == other.arg_types and self.ret_type == other.ret_type
                and self.type_params == other.type_params
                and self.type_constraints == other.type_constraints):
            return True
        if not (self.type_params or other.type_params):
            return False
        from .structural import structural_equal
        return structural_equal(self, other)

    def __hash__(self) -> int:
        if not self.type_params:
            return hash((self.arg_types, self.ret_type, self.type_constraints))
        from .structural import structural_hash
        return structural_hash(self)


@dataclass(frozen=True, slots=True, repr=False)
class TypeCall(Type):
    """An ADT applied to type arguments: ``List[Tensor[(), int32]]``."""

    func: Type
    args: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "args", tuple(self.args))


@dataclass(frozen=True, slots=True, repr=False)
class RefType(Type):
    """``Ref[T]``, the type of a mutable cell."""

    value: Type


def convert_values(values, dtype: str):
    """``values`` (a numpy array or scalar) converted to ``dtype`` as ``cast`` defines it.

    numpy's ``astype`` except for floats to integers, where numpy leaves a value out of range to
    the machine (and its answer then differs between its scalar and vector loops). Here the
    fraction is dropped and the value taken as x86's conversion instructions take it: out of the
    range of the 32-bit conversion (64-bit for int64 and uint32), NaN and infinities included,
    it is that width's smallest integer; 8- and 16-bit results are the low bits of the 32-bit
    conversion, uint32 those of the 64-bit one; uint64 converts values from 2**63 up offset by
    2**63. In range this is plain truncation toward zero.

    >>> import numpy as np
    >>> convert_values(np.array([-1.0, 300.0, 2.5, np.nan]), "uint8").tolist()
    [255, 44, 2, 0]
    >>> convert_values(np.array([1e10, -7.9]), "int32").tolist()
    [-2147483648, -7]
    """
    import numpy as np

    array = np.asarray(values)
    if array.dtype.kind != "f" or np.dtype(dtype).kind not in "iu":
        return array.astype(dtype)
    x = array.astype(np.float64)
    bits = np.dtype(dtype).itemsize * 8

    def signed(v, width):
        inside = (v >= -2.0 ** (width - 1)) & (v < 2.0 ** (width - 1))
        whole = np.trunc(np.where(inside, v, 0.0)).astype(np.int64)
        return np.where(inside, whole, np.int64(-(1 << (width - 1))))

    with np.errstate(invalid="ignore"):
        if dtype == "uint64":
            high = x >= 2.0 ** 63
            low = signed(np.where(high, 0.0, x), 64).view(np.uint64)
            top = (signed(np.where(high, x - 2.0 ** 63, 0.0), 64).view(np.uint64)
                   ^ np.uint64(1 << 63))
            return np.where(high, top, low).astype(np.uint64).reshape(array.shape)
        wide = 64 if bits == 64 or dtype == "uint32" else 32
        return signed(x, wide).astype(dtype).reshape(array.shape)


def scalar_type(dtype: str) -> TensorType:
    """The rank-0 tensor type of a dtype, printed as the bare dtype (``float32``)."""
    return TensorType((), dtype)


def unit_type() -> TupleType:
    return TupleType(())


# ---------------------------------------------------------------------------------------------
# Printing types. Iterative, so a deeply nested type cannot overflow the stack.

def type_children(t: Type) -> tuple:
    """The types directly inside ``t`` (tuple fields, argument and return types, ...)."""
    cls = type(t)
    if cls is TupleType:
        return t.fields
    if cls is FuncType:
        return t.arg_types + (t.ret_type,) + t.type_constraints
    if cls is TypeCall:
        return (t.func,) + t.args
    if cls is RefType:
        return (t.value,)
    if cls is TypeRelation:
        return t.args
    return ()


def type_str(t: Type, names: Optional[dict] = None) -> str:
    """Relay text of a type. ``names`` maps TypeVars/GlobalTypeVars to the names to print."""
    names = names or {}
    memo: dict = {}
    stack = [(t, False)]
    while stack:
        node, ready = stack.pop()
        if id(node) in memo:
            continue
        kids = type_children(node)
        if not ready:
            stack.append((node, True))
            for k in kids:
                if id(k) not in memo:
                    stack.append((k, False))
            continue
        s = [memo[id(k)] for k in kids]
        if isinstance(node, TensorType):
            if node.shape == ():
                text = node.dtype
            else:
                dims = ", ".join(format_dim(d) for d in node.shape)
                text = f"Tensor[({dims}), {node.dtype}]"
        elif isinstance(node, TupleType):
            text = "(" + ", ".join(s) + ("," if len(s) == 1 else "") + ")"
        elif isinstance(node, FuncType):
            n = len(node.arg_types)
            tp = ""
            if node.type_params:
                tp = "[" + ", ".join(names.get(v, v.name_hint) for v in node.type_params) + "]"
            text = f"fn {tp}(" + ", ".join(s[:n]) + f") -> {s[n]}"
            if node.type_constraints:
                text += " where " + ", ".join(s[n + 1:])
        elif isinstance(node, TypeCall):
            text = s[0] + ("[" + ", ".join(s[1:]) + "]" if len(s) > 1 else "")
        elif isinstance(node, RefType):
            text = f"Ref[{s[0]}]"
        elif isinstance(node, (TypeVar, GlobalTypeVar)):
            text = names.get(node, node.name_hint)
        elif isinstance(node, IncompleteType):
            text = "_"
        elif isinstance(node, TypeRelation):
            text = f"{node.name}(" + ", ".join(s) + ")"
        else:
            text = f"<{type(node).__name__}>"
        memo[id(node)] = text
    return memo[id(t)]


# Re-exported for convenience: the dimension kinds a TensorType may hold.
Dim = (int, SymVar, SymExpr, AnyDim)
_ = ANY
