"""Tensors of the tensor-expression language and the expression nodes that only it uses.

A :class:`Tensor` is the output of an operation: a :class:`PlaceholderOp` (a kernel input) or a
:class:`ComputeOp` (a value defined by an index function). Indexing a tensor, ``A[i, j]``, gives a
:class:`TensorLoad` expression; lowering turns it into a loop-IR ``Load`` of the tensor's buffer,
or substitutes the producer's body when the producer is inlined. A :class:`Reduce` is a
commutative reduction (sum, prod, max, min) over reduce axes; it may only be the whole body of a
compute. Axes are :class:`IterVar` s: loop-IR variables that carry their extent.

>>> from relaybench import te
>>> A = te.placeholder((4, 8), "float32", name="A")
>>> A
Tensor(A, (4, 8), float32)
>>> i = IterVar("i", "int64", 4)
>>> print(A[i, 0] * 2.0)
A[i, 0] * 2.0
"""

from __future__ import annotations

from dataclasses import dataclass

from relaybench.errors import CompileError
from relaybench.te.loop_ir import Expr, Var, convert, to_text

__all__ = ["IterVar", "Tensor", "TensorLoad", "Reduce", "PlaceholderOp", "ComputeOp",
           "REDUCERS"]


@dataclass(frozen=True, eq=False, repr=False)
class IterVar(Var):
    """An axis: an int64 variable ranging over ``range(extent)``; ``iter_kind`` is ``"data"`` for
    an output axis, ``"reduce"`` for a reduction axis."""

    extent: int = 0
    iter_kind: str = "data"

    def __repr__(self):
        return f"IterVar({self.name}, {self.extent}, {self.iter_kind})"


def as_extent(dim):
    """A shape dimension as the kernel layer takes it: an int, or, for a symbolic dimension of
    a Relay type (``n``, ``2*n + 1``, ``n // 4``), the int64 loop-IR expression of its size
    variables (:class:`~relaybench.te.loop_ir.SizeVar`). ``?`` has no value a kernel could
    read: CompileError."""
    if type(dim) is int:
        return dim
    from relaybench.ir import symbolic as S
    from relaybench.te.loop_ir import Expr as _Expr, IntImm as _IntImm, size_var
    if isinstance(dim, _IntImm):
        return int(dim.value)
    if isinstance(dim, _Expr):
        return dim
    if isinstance(dim, S.SymVar):
        return size_var(dim.name)
    if isinstance(dim, S.SymExpr):
        total = 0
        for mono, coef in dim.terms:
            term = coef
            for atom, power in mono:
                for _ in range(power):
                    term = term * as_extent(atom)
            total = total + term
        return total
    if isinstance(dim, S._Atom):
        inner = as_extent(dim.expr)
        return inner // dim.divisor if dim.kind == "floordiv" else inner % dim.divisor
    if dim is S.ANY:
        raise CompileError("a dimension ? (known only at run time) cannot be a kernel's extent")
    return int(dim)


class Tensor:
    """The output of an operation, with its ``shape`` (ints, or loop-IR expressions of size
    variables for symbolic extents, see :func:`as_extent`), ``dtype`` and ``name``."""

    __slots__ = ("op", "shape", "dtype", "name")

    def __init__(self, op, shape, dtype: str, name: str):
        self.op = op
        self.shape = tuple(as_extent(s) for s in shape)
        self.dtype = dtype
        self.name = name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices) -> "TensorLoad":
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != self.ndim:
            raise CompileError(f"tensor {self.name} of shape {self.shape} indexed with "
                               f"{len(indices)} indices")
        indices = tuple(convert(i) for i in indices)
        for index in indices:
            if not index.dtype.startswith(("int", "uint")):
                raise CompileError(f"tensor {self.name}: index {to_text(index)} is "
                                   f"{index.dtype}, not an integer")
        return TensorLoad(self, indices, self.dtype)

    def __repr__(self):
        return f"Tensor({self.name}, {self.shape}, {self.dtype})"


@dataclass(frozen=True, eq=False, repr=False)
class TensorLoad(Expr):
    """``tensor[indices]`` inside a tensor expression."""

    tensor: Tensor
    indices: tuple
    dtype: str

    def text(self, show):
        return f"{self.tensor.name}[{', '.join(show(i) for i in self.indices)}]"


REDUCERS = ("sum", "prod", "max", "min")


@dataclass(frozen=True, eq=False, repr=False)
class Reduce(Expr):
    """``combiner`` (sum, prod, max or min) of ``source`` over ``axes``, starting from ``init``."""

    combiner: str
    source: Expr
    axes: tuple
    init: Expr
    dtype: str

    def text(self, show):
        axes = ", ".join(a.name for a in self.axes)
        return f"{self.combiner}({show(self.source)}, axis=[{axes}])"


class PlaceholderOp:
    """A kernel input."""

    __slots__ = ("name", "output")

    def __init__(self, shape, dtype: str, name: str):
        self.name = name
        self.output = Tensor(self, shape, dtype, name)

    @property
    def inputs(self) -> tuple:
        return ()


class ComputeOp:
    """A tensor defined by ``body`` at each point of its ``axis`` (and over its ``reduce_axis``)."""

    __slots__ = ("name", "axis", "reduce_axis", "body", "output", "inputs")

    def __init__(self, name: str, axis: tuple, body: Expr, shape):
        self.name = name
        self.axis = tuple(axis)
        self.body = body
        self.reduce_axis = body.axes if isinstance(body, Reduce) else ()
        self.output = Tensor(self, shape, body.dtype, name)
        self.inputs = _tensors_read(body)

    def __repr__(self):
        return f"ComputeOp({self.name})"


def _tensors_read(body: Expr) -> tuple:
    """The tensors ``body`` loads from, in first-use order."""
    from relaybench.te.loop_ir import children

    found: dict = {}
    seen: set = set()
    stack = [body]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, TensorLoad):
            found.setdefault(node.tensor, None)
        stack.extend(reversed(children(node)))
    return tuple(found)
