"""Relay's expressions.

Expression nodes are immutable and compare by identity (``a == b`` is ``a is b``); structure is
compared with :func:`relaybench.ir.structural_equal`. After type inference every node carries its
``checked_type``. A node may carry a ``span`` (where the parser found it).

>>> from relaybench.ir import var, const, Function
>>> x = var("x", shape=(2,), dtype="float32")
>>> f = Function([x], x + const(1.0))
>>> print(f.astext(show_types=False))
fn (%x: Tensor[(2), float32]) {
  add(%x, 1f)
}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any as _AnyT, Optional

import numpy as np

from .attrs import EMPTY_ATTRS, Attrs
from .types import FuncType, GlobalTypeVar, TensorType, Type, TypeCall, TypeVar, check_dtype

__all__ = [
    "Span", "Expr", "Var", "GlobalVar", "Constant", "Tuple", "TupleGetItem", "Function", "Call",
    "Let", "If", "Match", "Clause", "Pattern", "PatternWildcard", "PatternVar",
    "PatternConstructor", "PatternTuple", "Constructor", "RefCreate", "RefRead", "RefWrite", "Op",
]


@dataclass(frozen=True, slots=True)
class Span:
    """Where a node came from in Relay text (1-based line and column)."""

    source_name: str
    line: int
    column: int
    end_line: int = 0
    end_column: int = 0

    def __str__(self) -> str:
        return f"{self.source_name}:{self.line}:{self.column}"


class Expr:
    """Base of every expression node."""

    __slots__ = ("_checked_type", "_span", "__weakref__")

    # -- type and source location ---------------------------------------------------------
    @property
    def checked_type(self) -> Type:
        """The type inference gave this node; ValueError if InferType has not run."""
        t = getattr(self, "_checked_type", None)
        if t is None:
            raise ValueError(
                f"the type of this {type(self).__name__} is not known yet: run relaybench.passes.InferType() first")
        return t

    @property
    def type_or_none(self) -> Optional[Type]:
        return getattr(self, "_checked_type", None)

    def set_checked_type(self, t: Type) -> None:
        """Record the inferred type (the one field inference fills in after construction)."""
        object.__setattr__(self, "_checked_type", t)

    @property
    def span(self) -> Optional[Span]:
        return getattr(self, "_span", None)

    def with_span(self, span: Optional[Span]):
        object.__setattr__(self, "_span", span)
        return self

    # -- printing --------------------------------------------------------------------------
    def astext(self, show_types: bool = True, show_meta_data: bool = True, **options) -> str:
        """The Relay text of this expression; ``options`` are :func:`~relaybench.ir.printer.astext`'s."""
        from .printer import astext
        return astext(self, show_types=show_types, show_meta_data=show_meta_data, **options)

    def __str__(self) -> str:
        return self.astext()

    def _repr_html_(self) -> str:
        from ..viz.html import html
        return html(self)

    # -- operator sugar (builds calls to Relay ops) ----------------------------------------------
    def __add__(self, other): return _binary("add", self, other)
    def __radd__(self, other): return _binary("add", other, self)
    def __sub__(self, other): return _binary("subtract", self, other)
    def __rsub__(self, other): return _binary("subtract", other, self)
    def __mul__(self, other): return _binary("multiply", self, other)
    def __rmul__(self, other): return _binary("multiply", other, self)
    def __truediv__(self, other): return _binary("divide", self, other)
    def __rtruediv__(self, other): return _binary("divide", other, self)
    def __neg__(self): return _binary("negative", self)

    def __getitem__(self, index: int) -> "TupleGetItem":
        if not isinstance(index, int):
            raise TypeError("an expression can only be indexed by an int (a tuple projection)")
        return TupleGetItem(self, index)


def _binary(name: str, *args) -> "Call":
    """Operator sugar: a Python number next to a typed tensor takes that tensor's dtype."""
    from .builder import as_expr, const
    dtype = None
    for a in args:
        if isinstance(a, Expr):
            t = a.type_or_none or (a.type_annotation if isinstance(a, Var) else None)
            if isinstance(t, TensorType):
                dtype = t.dtype
            elif isinstance(a, Constant):
                dtype = a.data.dtype.name
    exprs = [const(a, dtype) if dtype is not None and isinstance(a, (int, float)) and not isinstance(a, Expr)
             else as_expr(a) for a in args]
    return Call(Op.get(name), exprs)


def _exprs(values, what: str) -> tuple:
    out = tuple(values)
    for v in out:
        if not isinstance(v, Expr):
            raise TypeError(f"{what}: expected an expression, got {type(v).__name__} {v!r:.60}")
    return out


_node = dataclass(frozen=True, slots=True, eq=False, repr=False)


class _NodeRepr:
    __slots__ = ()

    def __repr__(self) -> str:
        try:
            text = self.astext(show_types=False)
        except Exception as err:  # printing must never hide the node
            text = f"<unprintable: {err}>"
        if len(text) > 400:
            text = text[:400] + " ..."
        return f"{type(self).__name__}({text})"


@_node
class Var(_NodeRepr, Expr):
    """A local variable ``%name``, bound by a function parameter, a let, or a pattern."""

    name_hint: str
    type_annotation: Optional[Type] = None

    def __post_init__(self):
        if self.type_annotation is not None and not isinstance(self.type_annotation, Type):
            raise TypeError(f"type annotation of %{self.name_hint} is not a type: {self.type_annotation!r}")


@_node
class GlobalVar(_NodeRepr, Expr):
    """A global function ``@name`` of a module."""

    name_hint: str


@_node
class Constant(_NodeRepr, Expr):
    """A constant tensor. Its data is copied and made read-only."""

    data: np.ndarray

    def __post_init__(self):
        arr = np.array(self.data, copy=True)
        check_dtype(arr.dtype)
        arr.setflags(write=False)
        object.__setattr__(self, "data", arr)

    @classmethod
    def adopt(cls, array: np.ndarray) -> "Constant":
        """A constant holding ``array`` itself, made read-only, rather than a copy: for an array
        just computed that nothing else will write (a folded value). An array that does not own
        its memory (a view) is copied as the constructor does.

        >>> a = np.arange(3.0)
        >>> c = Constant.adopt(a)
        >>> c.data is a, a.flags.writeable
        (True, False)
        """
        if type(array) is not np.ndarray or array.base is not None:
            return cls(array)
        check_dtype(array.dtype)
        array.setflags(write=False)
        node = object.__new__(cls)
        object.__setattr__(node, "data", array)
        return node

    @classmethod
    def of_readonly(cls, array: np.ndarray) -> "Constant":
        """A constant holding ``array`` as it is, with no copy: an array that is read-only and
        that nothing writes through another name (a weight mapped from the build cache's file).

        >>> a = np.arange(3.0); a.setflags(write=False)
        >>> Constant.of_readonly(a[1:]).data.base is a
        True
        """
        if array.flags.writeable:
            raise ValueError("Constant.of_readonly takes a read-only array")
        check_dtype(array.dtype)
        node = object.__new__(cls)
        object.__setattr__(node, "data", array)
        return node

    @property
    def tensor_type(self) -> TensorType:
        return TensorType(self.data.shape, self.data.dtype.name)


@_node
class Tuple(_NodeRepr, Expr):
    """``(a, b, ...)``."""

    fields: tuple

    def __post_init__(self):
        object.__setattr__(self, "fields", _exprs(self.fields, "Tuple field"))


@_node
class TupleGetItem(_NodeRepr, Expr):
    """``%t.0``: the ``index``-th field of a tuple."""

    tuple_value: Expr
    index: int

    def __post_init__(self):
        _exprs([self.tuple_value], "TupleGetItem")
        if not isinstance(self.index, int) or self.index < 0:
            raise ValueError(f"tuple index must be a non-negative int, got {self.index!r}")


@_node
class Function(_NodeRepr, Expr):
    """``fn <type_params>(params) -> ret_type { body }``, a closure; ``attrs`` like ``Primitive=1``."""

    params: tuple
    body: Expr
    ret_type: Optional[Type] = None
    type_params: tuple = ()
    attrs: Attrs = EMPTY_ATTRS

    def __post_init__(self):
        params = tuple(self.params)
        for p in params:
            if not isinstance(p, Var):
                raise TypeError(f"function parameter must be a Var, got {p!r:.60}")
        object.__setattr__(self, "params", params)
        _exprs([self.body], "Function body")
        object.__setattr__(self, "type_params", tuple(self.type_params))
        attrs = self.attrs
        if attrs is None:
            attrs = EMPTY_ATTRS
        elif not isinstance(attrs, Attrs):
            attrs = Attrs(attrs)
        object.__setattr__(self, "attrs", attrs)

    def with_attr(self, key: str, value) -> "Function":
        return Function(self.params, self.body, self.ret_type, self.type_params,
                        self.attrs.with_changes(**{key: value}))

    @property
    def is_primitive(self) -> bool:
        return bool(self.attrs.get("Primitive", 0))


@_node
class Call(_NodeRepr, Expr):
    """``op(args, attrs)``; ``op`` is an Op, a Function, a GlobalVar, a Var or a Constructor."""

    op: Expr
    args: tuple = ()
    attrs: Attrs = EMPTY_ATTRS
    type_args: tuple = ()

    def __post_init__(self):
        _exprs([self.op], "Call target")
        object.__setattr__(self, "args", _exprs(self.args, f"argument of {_callee_name(self.op)}"))
        attrs = self.attrs
        if attrs is None:
            attrs = EMPTY_ATTRS
        elif not isinstance(attrs, Attrs):
            attrs = Attrs(attrs)
        if isinstance(self.op, Op):
            opdef = self.op.opdef
            if opdef is not None:
                attrs = opdef.make_attrs(attrs)
        object.__setattr__(self, "attrs", attrs)
        object.__setattr__(self, "type_args", tuple(self.type_args))


def _callee_name(op) -> str:
    if isinstance(op, Op):
        return op.name
    if isinstance(op, (GlobalVar, Constructor)):
        return ("@" if isinstance(op, GlobalVar) else "") + op.name_hint
    if isinstance(op, Var):
        return "%" + op.name_hint
    return "a function"


@_node
class Let(_NodeRepr, Expr):
    """``let %var = value; body``."""

    var: Var
    value: Expr
    body: Expr

    def __post_init__(self):
        if not isinstance(self.var, Var):
            raise TypeError(f"let must bind a Var, got {self.var!r:.60}")
        _exprs([self.value, self.body], "Let")


@_node
class If(_NodeRepr, Expr):
    """``if (cond) { true_branch } else { false_branch }``; ``cond`` is a ``bool`` scalar."""

    cond: Expr
    true_branch: Expr
    false_branch: Expr

    def __post_init__(self):
        _exprs([self.cond, self.true_branch, self.false_branch], "If")


class Pattern:
    """Base of match patterns."""

    __slots__ = ()


@dataclass(frozen=True, slots=True, eq=False)
class PatternWildcard(Pattern):
    """``_``: matches anything, binds nothing."""


@dataclass(frozen=True, slots=True, eq=False)
class PatternVar(Pattern):
    """``%x``: matches anything, binds it to ``var``."""

    var: Var


@dataclass(frozen=True, slots=True, eq=False)
class PatternConstructor(Pattern):
    """``Cons(p0, p1)``: matches a value built by ``constructor``, then its fields."""

    constructor: "Constructor"
    patterns: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "patterns", tuple(self.patterns))


@dataclass(frozen=True, slots=True, eq=False)
class PatternTuple(Pattern):
    """``(p0, p1)``: matches a tuple field by field."""

    patterns: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "patterns", tuple(self.patterns))


@dataclass(frozen=True, slots=True, eq=False)
class Clause:
    """``lhs => rhs`` in a match."""

    lhs: Pattern
    rhs: Expr


@_node
class Match(_NodeRepr, Expr):
    """``match (data) { clauses }``; ``complete=False`` is ``match?`` (no exhaustiveness check)."""

    data: Expr
    clauses: tuple
    complete: bool = True

    def __post_init__(self):
        _exprs([self.data], "Match data")
        clauses = tuple(self.clauses)
        for c in clauses:
            if not isinstance(c, Clause):
                raise TypeError(f"match clause must be a Clause, got {c!r:.60}")
        object.__setattr__(self, "clauses", clauses)


@_node
class Constructor(_NodeRepr, Expr):
    """A constructor of an ADT: ``Cons``. Its type is ``fn [A](A, List[A]) -> List[A]``."""

    name_hint: str
    inputs: tuple
    belong_to: GlobalTypeVar
    tag: int = 0

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))

    def __call__(self, *args) -> "Call":
        from .builder import as_expr
        return Call(self, [as_expr(a) for a in args])


@_node
class RefCreate(_NodeRepr, Expr):
    """``ref(value)``: a new mutable cell."""

    value: Expr


@_node
class RefRead(_NodeRepr, Expr):
    """``ref_read(ref)``."""

    ref: Expr


@_node
class RefWrite(_NodeRepr, Expr):
    """``ref_write(ref, value)``; returns ``()``."""

    ref: Expr
    value: Expr


class Op(_NodeRepr, Expr):
    """A primitive operator, one per name (``Op.get("nn.conv2d")``); its definition is ``opdef``."""

    __slots__ = ("name", "_opdef")
    _table: dict = {}

    def __init__(self, name: str):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "_opdef", None)

    def __setattr__(self, key, value):
        raise AttributeError("Op is immutable")

    @staticmethod
    def get(name: str) -> "Op":
        """The operator named ``name``; KeyError with close names if there is none."""
        op = Op._table.get(name)
        if op is None:
            from ..op.registry import get_opdef
            get_opdef(name)  # raises a helpful KeyError for unknown names
            op = Op._table.setdefault(name, Op(name))
        return op

    @property
    def opdef(self):
        d = self._opdef
        if d is None:
            from ..op.registry import lookup_opdef
            d = lookup_opdef(self.name)
            object.__setattr__(self, "_opdef", d)
        return d

    def __call__(self, *args, **attrs) -> "Call":
        from .builder import as_expr
        return Call(self, [as_expr(a) for a in args], Attrs(attrs))

    def __reduce__(self):
        return (Op.get, (self.name,))


# Functions of the node classes that traverse children; used by functors, printers and analyses.
def expr_children(e: Expr) -> tuple:
    """The sub-expressions of a node, in evaluation order (patterns' variables not included)."""
    fn = _CHILDREN.get(type(e))
    return fn(e) if fn is not None else ()


_CHILDREN = {
    Tuple: lambda e: e.fields,
    TupleGetItem: lambda e: (e.tuple_value,),
    Function: lambda e: e.params + (e.body,),
    Call: lambda e: (e.op,) + e.args,
    Let: lambda e: (e.var, e.value, e.body),
    If: lambda e: (e.cond, e.true_branch, e.false_branch),
    Match: lambda e: (e.data,) + tuple(c.rhs for c in e.clauses),
    RefCreate: lambda e: (e.value,),
    RefRead: lambda e: (e.ref,),
    RefWrite: lambda e: (e.ref, e.value),
}


def pattern_vars(p: Pattern) -> list:
    """The variables a pattern binds, left to right."""
    out = []
    stack = [p]
    while stack:
        q = stack.pop()
        if isinstance(q, PatternVar):
            out.append(q.var)
        elif isinstance(q, (PatternConstructor, PatternTuple)):
            stack.extend(reversed(q.patterns))
    return out
