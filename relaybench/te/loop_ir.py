"""The loop IR: buffers, scalar expressions and statements shared by every code generator.

A kernel is a :class:`PrimFunc`: a name, its parameter buffers and a statement body built from
``For`` loops (each with its kind: serial, parallel, vectorized, unrolled), ``Store``, ``LetStmt``,
``IfThenElse``, ``SeqStmt`` and ``Allocate``. Nodes are frozen dataclasses compared by identity
(a ``Var`` is a key in a dict by identity, as in TVM); a short reduction a schedule tensorized
stays one expression, :class:`DotSum`; ``print(func)`` shows the nested loops, and
:func:`evaluate` runs a function on numpy arrays, one scalar at a time, as the reference that every
code generator is checked against.

Index arithmetic is int64; ``/`` is true division (floating point only), ``//`` and ``%`` are floor
division and floor modulo, as in Python. ``min`` and ``max`` are numpy's ``minimum`` and
``maximum``: a NaN operand is the result (so a ``max`` reduction over a NaN is NaN). The nodes are small and the loop nests shallow, so the
printer and the evaluator recurse on the nesting depth of one kernel (never on program size).

>>> A = Buffer("A", (2, 3), "float32")
>>> B = Buffer("B", (2, 3), "float32")
>>> i, j = Var("i"), Var("j")
>>> body = For(i, 0, 2, "serial",
...            For(j, 0, 3, "vectorized", Store(B, (i, j), Load(A, (i, j)) * 2.0 + 1.0)))
>>> func = PrimFunc("scale", (A, B), body)
>>> print(func)
def scale(A: Buffer((2, 3), "float32"), B: Buffer((2, 3), "float32")):
    for i in serial(2):
        for j in vectorized(3):
            B[i, j] = A[i, j] * 2.0 + 1.0
>>> import numpy as np
>>> a = np.arange(6, dtype="float32").reshape(2, 3)
>>> b = np.zeros((2, 3), "float32")
>>> evaluate(func, a, b)
>>> b.tolist()
[[1.0, 3.0, 5.0], [7.0, 9.0, 11.0]]
"""

from __future__ import annotations

import dataclasses
import math
import operator
from dataclasses import dataclass

import numpy as np

from relaybench.errors import CompileError, ExecutionError

__all__ = [
    "Buffer", "Expr", "IntImm", "FloatImm", "Var", "Binary", "Unary", "Select", "Cast", "Load",
    "Call", "DotSum", "Stmt", "For", "Store", "LetStmt", "IfThenElse", "SeqStmt", "Allocate",
    "PrimFunc",
    "const", "convert", "min_expr", "max_expr", "select", "logical_and", "logical_or",
    "logical_not", "equal", "not_equal", "call", "cast", "substitute", "map_children",
    "SHIFT_OPS",
    "evaluate", "to_text", "LOOP_KINDS", "THREAD_TAGS", "SCOPES", "Barrier", "INTRINSICS",
    "seq", "dot_sum",
]

THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
               "threadIdx.z")
"""The GPU axes a loop can be bound to (``Stage.bind``): a loop of kind ``blockIdx.x`` runs one
iteration per work group along x, ``threadIdx.x`` one per work item of its group. Run in order
(the evaluator, the CPU), such a loop means what a serial one does; a GPU code generator runs its
iterations at once, so a strategy binds only loops whose iterations are independent, and
separates the writes and reads of a ``shared`` buffer by a :class:`Barrier`."""

LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled") + THREAD_TAGS

SCOPES = ("global", "shared", "local")
"""Where a buffer lives: ``global`` (device memory, the default), ``shared`` (one copy per work
group, OpenCL's ``__local``), ``local`` (one copy per work item: registers, OpenCL's private)."""


def _is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def _is_int(dtype: str) -> bool:
    return dtype.startswith("int") or dtype.startswith("uint")


# --------------------------------------------------------------------------------------------
# Buffers


@dataclass(frozen=True, eq=False)
class Buffer:
    """A named, dense, row-major array: ``Buffer("A", (4, 8), "float32")``.

    >>> Buffer("A", (4, 8), "float32")
    Buffer("A", (4, 8), "float32")
    """

    name: str
    shape: tuple
    dtype: str = "float32"
    scope: str = "global"

    def __post_init__(self):
        # an extent is an int, or an int64 expression of size variables (see SizeVar)
        shape = tuple(s if isinstance(s, Expr) else int(s) for s in self.shape)
        if any(isinstance(s, int) and s < 0 for s in shape):
            raise CompileError(f"buffer {self.name}: negative extent in shape {shape}")
        object.__setattr__(self, "shape", shape)
        np.dtype(self.dtype)  # rejects unknown dtypes early
        if self.scope not in SCOPES:
            raise CompileError(f"buffer {self.name}: unknown scope {self.scope!r}; expected one "
                               f"of {', '.join(SCOPES)}")

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __repr__(self):
        return f'Buffer("{self.name}", {self.shape}, "{self.dtype}")'


# --------------------------------------------------------------------------------------------
# Expressions


class Expr:
    """Base of scalar expressions; arithmetic and comparisons build new nodes.

    ``==`` keeps Python's identity meaning (nodes are dict keys); use :func:`equal`.
    """

    __slots__ = ()

    def __add__(self, other):
        return _binary("+", self, other)

    def __radd__(self, other):
        return _binary("+", other, self)

    def __sub__(self, other):
        return _binary("-", self, other)

    def __rsub__(self, other):
        return _binary("-", other, self)

    def __mul__(self, other):
        return _binary("*", self, other)

    def __rmul__(self, other):
        return _binary("*", other, self)

    def __truediv__(self, other):
        return _binary("/", self, other)

    def __rtruediv__(self, other):
        return _binary("/", other, self)

    def __floordiv__(self, other):
        return _binary("//", self, other)

    def __rfloordiv__(self, other):
        return _binary("//", other, self)

    def __mod__(self, other):
        return _binary("%", self, other)

    def __rmod__(self, other):
        return _binary("%", other, self)

    def __lshift__(self, other):
        return _binary("<<", self, other)

    def __rlshift__(self, other):
        return _binary("<<", other, self)

    def __rshift__(self, other):
        return _binary(">>", self, other)

    def __rrshift__(self, other):
        return _binary(">>", other, self)

    def __neg__(self):
        return Unary("-", self, self.dtype)

    def __lt__(self, other):
        return _binary("<", self, other)

    def __le__(self, other):
        return _binary("<=", self, other)

    def __gt__(self, other):
        return _binary(">", self, other)

    def __ge__(self, other):
        return _binary(">=", self, other)

    def __and__(self, other):
        return logical_and(self, other)

    def __or__(self, other):
        return logical_or(self, other)

    def __invert__(self):
        return logical_not(self)

    def __bool__(self):
        raise CompileError(f"the truth value of the expression {to_text(self)} is unknown until "
                           "the kernel runs; use select/if_then_else or logical_and/or")

    def __str__(self):
        return to_text(self)


@dataclass(frozen=True, eq=False, repr=False)
class IntImm(Expr):
    """An integer constant (int64 unless told)."""

    value: int
    dtype: str = "int64"

    def __repr__(self):
        return f"IntImm({self.value})"


@dataclass(frozen=True, eq=False, repr=False)
class FloatImm(Expr):
    """A floating-point constant (float32 unless told)."""

    value: float
    dtype: str = "float32"

    def __repr__(self):
        return f"FloatImm({self.value}, {self.dtype})"


@dataclass(frozen=True, eq=False, repr=False)
class Var(Expr):
    """A loop or let variable; index variables are int64."""

    name: str
    dtype: str = "int64"

    def __repr__(self):
        return f"Var({self.name})"


@dataclass(frozen=True, eq=False, repr=False)
class SizeVar(Var):
    """A symbolic extent (Relay's ``n`` in ``Tensor[(n, 4)]``): a kernel whose buffers' shapes
    hold size variables takes, as its last parameter, an int64 buffer ``sizes`` with their
    values, in the order of their names (:func:`size_vars_of`); the code generator reads them
    at the kernel's entry. One object per name (:func:`size_var`), so that every tensor of a
    kernel with extent ``n`` has the same variable."""

    def __repr__(self):
        return f"SizeVar({self.name})"


_SIZE_VARS: dict = {}


def size_var(name: str) -> SizeVar:
    """The size variable named ``name`` (the same object for the same name)."""
    found = _SIZE_VARS.get(name)
    if found is None:
        found = _SIZE_VARS[name] = SizeVar(name, "int64")
    return found


def _shape_text(shape: tuple) -> str:
    """A buffer's shape as Python prints a tuple, symbolic extents as expressions: ``(n, 3)``."""
    if all(isinstance(d, int) for d in shape):
        return str(shape)
    parts = [to_text(d) if isinstance(d, Expr) else str(d) for d in shape]
    return f"({parts[0]},)" if len(parts) == 1 else f"({', '.join(parts)})"


def size_vars_of(buffers) -> list:
    """The size variables in the shapes of ``buffers``, sorted by name: the order of a kernel's
    ``sizes`` parameter."""
    found: dict = {}
    for buf in buffers:
        for extent in buf.shape:
            if not isinstance(extent, Expr):
                continue
            stack = [extent]
            while stack:
                node = stack.pop()
                if isinstance(node, SizeVar):
                    found[node.name] = node
                stack.extend(children(node))
    return [found[k] for k in sorted(found)]


ARITH_OPS = ("+", "-", "*", "/", "//", "%", "min", "max", "<<", ">>")
SHIFT_OPS = ("<<", ">>")
COMPARE_OPS = ("<", "<=", ">", ">=", "==", "!=")
LOGICAL_OPS = ("and", "or")


@dataclass(frozen=True, eq=False, repr=False)
class Binary(Expr):
    """``a op b`` for op in ``+ - * / // % min max``, the shifts ``<< >>`` (integers: numpy's
    meaning, so ``>>`` is arithmetic for signed and logical for unsigned dtypes), the
    comparisons, ``and`` and ``or``."""

    op: str
    a: Expr
    b: Expr
    dtype: str

    def __repr__(self):
        return f"Binary({self.op!r}, {self.a!r}, {self.b!r})"


@dataclass(frozen=True, eq=False, repr=False)
class Unary(Expr):
    """``-a`` (op ``"-"``) or ``not a`` (op ``"not"``)."""

    op: str
    a: Expr
    dtype: str

    def __repr__(self):
        return f"Unary({self.op!r}, {self.a!r})"


@dataclass(frozen=True, eq=False, repr=False)
class Select(Expr):
    """``true_value if cond else false_value``; only the chosen side is evaluated, so the other
    may read out of bounds (padding relies on it), and code generators must keep that."""

    cond: Expr
    true_value: Expr
    false_value: Expr
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Cast(Expr):
    """``value`` converted to ``dtype``."""

    dtype: str
    value: Expr


@dataclass(frozen=True, eq=False, repr=False)
class Load(Expr):
    """``buffer[indices]``: one index per dimension, or a single flat (row-major) index."""

    buffer: Buffer
    indices: tuple
    dtype: str = ""

    def __post_init__(self):
        indices = tuple(convert(i) for i in self.indices)
        object.__setattr__(self, "indices", indices)
        if not self.dtype:
            object.__setattr__(self, "dtype", self.buffer.dtype)
        _check_indices(self.buffer, indices, "load")


@dataclass(frozen=True, eq=False, repr=False)
class Call(Expr):
    """A math intrinsic called by name (``exp``, ``log``, ``sqrt``, ``tanh``, ``erf``, ...)."""

    name: str
    args: tuple
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class DotSum(Expr):
    """``sum(a * b for var in range(extent))`` in ``dtype``: a short reduction kept as one
    expression, what a schedule's ``tensorize`` leaves of its innermost reduce loop.

    ``a`` and ``b`` are integer expressions (each typically a widening cast of a load) in which
    ``var`` stands for the reduction's step; the products and the sum are exact in ``dtype``
    (wrapping as the loop it replaces would). A code generator may compute it with one
    dot-product instruction (x86's ``vpdpbusd`` sums four ``u8 x s8`` products per ``int32``
    lane) when the operands' layout allows, or as the unrolled sum otherwise.

    >>> A = Buffer("A", (8,), "int8")
    >>> i, k = Var("i"), Var("k")
    >>> print(dot_sum(k, 4, cast("int32", Load(A, (i * 4 + k,))),
    ...               cast("int32", Load(A, (k,)))))
    dot_sum(k < 4: int32(A[i * 4 + k]) * int32(A[k]))
    """

    var: Var
    extent: int
    a: Expr
    b: Expr
    dtype: str

    def __post_init__(self):
        object.__setattr__(self, "extent", int(self.extent))
        if self.extent < 1:
            raise CompileError(f"dot_sum over {self.var.name}: extent {self.extent} < 1")
        if not (_is_int(self.a.dtype) and self.a.dtype == self.b.dtype == self.dtype):
            raise CompileError(f"dot_sum over {self.var.name}: operands {self.a.dtype} and "
                               f"{self.b.dtype} must both be the integer dtype {self.dtype}")

    def __repr__(self):
        return f"DotSum({self.var.name} < {self.extent}: {self.a!r} * {self.b!r})"

    def unrolled(self) -> Expr:
        """The same value as plain arithmetic: the products for each step, summed in order."""
        total = None
        for step in range(self.extent):
            where = {self.var: IntImm(step, self.var.dtype)}
            term = substitute(self.a, where) * substitute(self.b, where)
            total = term if total is None else total + term
        return total


def dot_sum(var: Var, extent: int, a, b) -> DotSum:
    """``sum(a * b for var in range(extent))`` as one :class:`DotSum` node, in ``a``'s dtype."""
    a, b = convert(a), convert(b)
    return DotSum(var, extent, a, b, a.dtype)


def _check_indices(buffer: Buffer, indices: tuple, what: str):
    if len(indices) not in (1, len(buffer.shape)):
        raise CompileError(f"{what} of {buffer.name}: {len(indices)} indices for a buffer of "
                           f"rank {len(buffer.shape)}")
    for index in indices:
        if not _is_int(index.dtype):
            raise CompileError(f"{what} of {buffer.name}: index {to_text(index)} has dtype "
                               f"{index.dtype}, not an integer")


def const(value, dtype: str | None = None) -> Expr:
    """A constant node: ``const(2)`` is int64, ``const(0.5)`` float32, unless ``dtype`` is given.

    >>> const(3), const(1.5, "float64")
    (IntImm(3), FloatImm(1.5, float64))
    """
    if isinstance(value, (bool, np.bool_)):
        return IntImm(int(value), dtype or "bool")
    if dtype is None:
        dtype = "int64" if isinstance(value, (int, np.integer)) else "float32"
    if _is_float(dtype):
        return FloatImm(float(value), dtype)
    return IntImm(int(value), dtype)


def convert(value, like: str | None = None) -> Expr:
    """An expression as is, or a Python number as a constant (of dtype ``like`` when given)."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, (int, float, np.integer, np.floating, bool, np.bool_)):
        if like is not None and not isinstance(value, (bool, np.bool_)):
            if _is_int(like) and isinstance(value, (float, np.floating)):
                return FloatImm(float(value), "float32")
            return const(value, like)
        return const(value)
    raise CompileError(f"cannot use {value!r} of type {type(value).__name__} in an expression")


_FOLD = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
    "%": operator.mod, "min": min, "max": max,
}


def _binary(op: str, a, b) -> Expr:
    if not isinstance(a, Expr):
        a = convert(a, b.dtype)
    if not isinstance(b, Expr):
        b = convert(b, a.dtype)
    if a.dtype != b.dtype:
        raise CompileError(f"'{op}' between {a.dtype} and {b.dtype}: "
                           f"{to_text(a)} {op} {to_text(b)}; insert a cast")
    dtype = a.dtype
    if op in COMPARE_OPS:
        return Binary(op, a, b, "bool")
    if op in LOGICAL_OPS:
        if dtype != "bool":
            raise CompileError(f"'{op}' needs bool operands, got {dtype}")
        return Binary(op, a, b, "bool")
    if op == "/" and not _is_float(dtype):
        raise CompileError(f"'/' on {dtype} operands {to_text(a)}, {to_text(b)}: use '//' "
                           "(floor division) for integers")
    if op in ("//", "%") and not _is_int(dtype):
        raise CompileError(f"'{op}' needs integer operands, got {dtype}")
    if op in SHIFT_OPS:
        if not _is_int(dtype):
            raise CompileError(f"'{op}' needs integer operands, got {dtype}: "
                               f"{to_text(a)} {op} {to_text(b)}")
        return Binary(op, a, b, dtype)
    # Fold integer constants and the identities that index arithmetic produces.
    if isinstance(a, IntImm) and isinstance(b, IntImm) and op in _FOLD:
        return IntImm(_FOLD[op](a.value, b.value), dtype)
    if isinstance(b, IntImm):
        if b.value == 0 and op in ("+", "-"):
            return a
        if b.value == 1 and op in ("*", "//"):
            return a
    if isinstance(a, IntImm):
        if a.value == 0 and op == "+":
            return b
        if a.value == 1 and op == "*":
            return b
    return Binary(op, a, b, dtype)


def min_expr(a, b) -> Expr:
    """``min(a, b)``."""
    return _binary("min", a, b)


def max_expr(a, b) -> Expr:
    """``max(a, b)``."""
    return _binary("max", a, b)


def equal(a, b) -> Expr:
    """``a == b`` as an expression (``==`` on nodes keeps its identity meaning)."""
    return _binary("==", a, b)


def not_equal(a, b) -> Expr:
    """``a != b`` as an expression."""
    return _binary("!=", a, b)


def logical_and(a, b) -> Expr:
    """``a and b`` on bool expressions."""
    return _binary("and", a, b)


def logical_or(a, b) -> Expr:
    """``a or b`` on bool expressions."""
    return _binary("or", a, b)


def logical_not(a) -> Expr:
    """``not a`` on a bool expression."""
    a = convert(a)
    if a.dtype != "bool":
        raise CompileError(f"'not' needs a bool operand, got {a.dtype}: {to_text(a)}")
    return Unary("not", a, "bool")


def select(cond, true_value, false_value) -> Expr:
    """``true_value if cond else false_value``; a Python number takes the other side's dtype."""
    cond = convert(cond)
    if cond.dtype != "bool":
        raise CompileError(f"select: the condition {to_text(cond)} is {cond.dtype}, not bool")
    if not isinstance(true_value, Expr) and isinstance(false_value, Expr):
        true_value = convert(true_value, false_value.dtype)
    true_value = convert(true_value)
    false_value = convert(false_value, true_value.dtype)
    if true_value.dtype != false_value.dtype:
        raise CompileError(f"select: branches of dtypes {true_value.dtype} and "
                           f"{false_value.dtype}; insert a cast")
    return Select(cond, true_value, false_value, true_value.dtype)


def cast(dtype: str, value) -> Expr:
    """``value`` converted to ``dtype`` (no node when it already has it)."""
    value = convert(value)
    np.dtype(dtype)
    if value.dtype == dtype:
        return value
    return Cast(dtype, value)


def _erf(x):
    return type(x)(math.erf(float(x)))


def _sigmoid(x):
    return type(x)(1.0) / (type(x)(1.0) + np.exp(-x))


INTRINSICS = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: type(x)(1.0) / np.sqrt(x),
    "tanh": np.tanh, "sigmoid": _sigmoid, "erf": _erf, "abs": np.abs, "floor": np.floor,
    "ceil": np.ceil, "round": np.round, "sin": np.sin, "cos": np.cos, "pow": np.power,
    "log2": np.log2, "exp2": np.exp2, "fmod": np.fmod, "tan": np.tan, "asin": np.arcsin,
    "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh,
}
"""Math intrinsics by name, with their scalar numpy meaning (the evaluator's table)."""

_ARITY = {"pow": 2, "fmod": 2}


def call(name: str, *args) -> Expr:
    """Call the math intrinsic ``name``; the result has the first argument's dtype.

    >>> print(call("exp", Var("x", "float32")))
    exp(x)
    """
    if name not in INTRINSICS:
        raise CompileError(f"unknown intrinsic {name!r}; known: {', '.join(sorted(INTRINSICS))}")
    if len(args) != _ARITY.get(name, 1):
        raise CompileError(f"intrinsic {name} takes {_ARITY.get(name, 1)} argument(s), "
                           f"got {len(args)}")
    first = convert(args[0])
    converted = (first,) + tuple(convert(a, first.dtype) for a in args[1:])
    if not _is_float(first.dtype) and name != "abs":
        raise CompileError(f"intrinsic {name} needs a floating-point argument, got {first.dtype}")
    return Call(name, converted, first.dtype)


# --------------------------------------------------------------------------------------------
# Statements


class Stmt:
    """Base of statements."""

    __slots__ = ()

    def __str__(self):
        return to_text(self)


@dataclass(frozen=True, eq=False, repr=False)
class For(Stmt):
    """``for var in range(begin, begin + extent)`` run as ``kind`` (one of :data:`LOOP_KINDS`)."""

    var: Var
    begin: Expr
    extent: Expr
    kind: str
    body: Stmt

    def __post_init__(self):
        object.__setattr__(self, "begin", convert(self.begin))
        object.__setattr__(self, "extent", convert(self.extent))
        if not _is_int(self.var.dtype):
            raise CompileError(f"loop {self.var.name}: the loop variable is {self.var.dtype}, "
                               "not an integer")
        if self.kind not in LOOP_KINDS:
            raise CompileError(f"loop {self.var.name}: unknown kind {self.kind!r}; "
                               f"expected one of {', '.join(LOOP_KINDS)}")


@dataclass(frozen=True, eq=False, repr=False)
class Store(Stmt):
    """``buffer[indices] = value``; the value has the buffer's dtype (a Python number is
    converted to it)."""

    buffer: Buffer
    indices: tuple
    value: Expr

    def __post_init__(self):
        indices = tuple(convert(i) for i in self.indices)
        object.__setattr__(self, "indices", indices)
        object.__setattr__(self, "value", convert(self.value, self.buffer.dtype))
        _check_indices(self.buffer, indices, "store")
        if self.value.dtype != self.buffer.dtype:
            raise CompileError(f"store to {self.buffer.name} ({self.buffer.dtype}) of a "
                               f"{self.value.dtype} value {to_text(self.value)}; insert a cast")


@dataclass(frozen=True, eq=False, repr=False)
class LetStmt(Stmt):
    """Bind ``var`` to ``value`` inside ``body``."""

    var: Var
    value: Expr
    body: Stmt


@dataclass(frozen=True, eq=False, repr=False)
class IfThenElse(Stmt):
    """Run ``then_case`` when ``cond`` holds, else ``else_case`` (which may be None)."""

    cond: Expr
    then_case: Stmt
    else_case: Stmt | None = None


@dataclass(frozen=True, eq=False, repr=False)
class SeqStmt(Stmt):
    """Statements run in order."""

    stmts: tuple


@dataclass(frozen=True, eq=False, repr=False)
class Allocate(Stmt):
    """A temporary ``buffer`` that lives while ``body`` runs."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, eq=False, repr=False)
class Barrier(Stmt):
    """Every work item of a group waits here until all have arrived, and their writes to
    ``shared`` buffers are then visible to each other (OpenCL's ``barrier``, CUDA's
    ``__syncthreads``). Run in order it does nothing: the loops bound to threads before it have
    already finished every iteration. It must not sit inside a loop bound to threads."""

    scope: str = "shared"


def seq(*stmts) -> Stmt:
    """One statement from several: nested sequences are flattened, a single one is returned."""
    flat = []
    for stmt in stmts:
        if isinstance(stmt, SeqStmt):
            flat.extend(stmt.stmts)
        elif stmt is not None:
            flat.append(stmt)
    return flat[0] if len(flat) == 1 else SeqStmt(tuple(flat))


@dataclass(frozen=True, eq=False, repr=False)
class PrimFunc:
    """A kernel: ``name``, parameter buffers (inputs then outputs) and a body."""

    name: str
    params: tuple
    body: Stmt

    def __post_init__(self):
        object.__setattr__(self, "params", tuple(self.params))
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise CompileError(f"kernel {self.name}: parameter names repeat: {names}")

    def __str__(self):
        return to_text(self)

    def __repr__(self):
        return f"PrimFunc({self.name}, params={[p.name for p in self.params]})"

    def _repr_pretty_(self, printer, cycle):
        printer.text(to_text(self))


# --------------------------------------------------------------------------------------------
# Generic traversal


def _is_node(value) -> bool:
    return isinstance(value, (Expr, Stmt))


_NODE_TYPES = (Expr, Stmt)
#: node class -> the names of its dataclass fields that may hold nodes (dataclasses.fields is
#: slow to call per node; fields declared ``str`` or ``int`` never hold one and are skipped)
_FIELD_NAMES: dict = {}
_LEAF_ANNOTATIONS = frozenset(("str", "int", "bool", "float", str, int, bool, float))


def _child_fields(cls) -> tuple:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls)
                                          if f.type not in _LEAF_ANNOTATIONS)
    return names


def map_children(node, fn):
    """A copy of ``node`` with ``fn`` applied to every child node (the node itself if none change).

    Children are the fields holding expressions or statements, alone or in tuples. A rebuilt
    binary operation folds integer constants again.
    """
    kind = type(node)
    if kind is Binary:   # most nodes: their two children without the general walk
        a, b = fn(node.a), fn(node.b)
        if a is node.a and b is node.b:
            return node
        return _binary(node.op, a, b)   # through the constructor so that constants fold
    if kind is IntImm or kind is FloatImm or kind is Var:
        return node
    changes = None
    for name in _FIELD_NAMES.get(kind) or _child_fields(kind):
        value = getattr(node, name)
        if isinstance(value, _NODE_TYPES):
            new = fn(value)
            if new is not value:
                if changes is None:
                    changes = {}
                changes[name] = new
        elif isinstance(value, tuple):
            items = None
            for k, item in enumerate(value):
                if isinstance(item, _NODE_TYPES):
                    new = fn(item)
                    if new is not item:
                        if items is None:
                            items = list(value)
                        items[k] = new
            if items is not None:
                if changes is None:
                    changes = {}
                changes[name] = tuple(items)
    if changes is None:
        return node
    if isinstance(node, Binary):  # rebuilt through the constructor so that constants fold
        return _binary(node.op, changes.get("a", node.a), changes.get("b", node.b))
    return dataclasses.replace(node, **changes)


def children(node) -> list:
    """The child nodes of ``node`` (the fields :func:`map_children` visits), in field order."""
    kind = type(node)
    if kind is Binary:
        return [node.a, node.b]
    if kind is IntImm or kind is FloatImm or kind is Var:
        return []
    out = []
    for name in _FIELD_NAMES.get(kind) or _child_fields(kind):
        value = getattr(node, name)
        if isinstance(value, _NODE_TYPES):
            out.append(value)
        elif isinstance(value, tuple):
            out.extend(item for item in value if isinstance(item, _NODE_TYPES))
    return out


def free_vars(node) -> set:
    """The variables ``node`` reads (by identity)."""
    found, stack = set(), [node]
    while stack:
        item = stack.pop()
        if isinstance(item, Var):
            found.add(item)
        else:
            stack.extend(children(item))
    return found


def substitute(node, mapping: dict):
    """Replace variables (keys of ``mapping``, by identity) with expressions in ``node``.

    >>> i = Var("i")
    >>> print(substitute(i * 2 + 1, {i: Var("j") + 3}))
    (j + 3) * 2 + 1
    """
    if not mapping:
        return node
    memo = {}

    def visit(n):
        if n in memo:
            return memo[n]
        if isinstance(n, Var) and n in mapping:
            out = convert(mapping[n])
        else:
            out = map_children(n, visit)
        memo[n] = out
        return out

    return visit(node)


# --------------------------------------------------------------------------------------------
# Printer

_PREC = {"or": 1, "and": 2, "<": 4, "<=": 4, ">": 4, ">=": 4, "==": 4, "!=": 4,
         "<<": 5, ">>": 5, "+": 6, "-": 6, "*": 7, "/": 7, "//": 7, "%": 7}


def _expr_text(e: Expr, memo: dict | None = None) -> tuple[str, int]:
    """Text of ``e`` and its binding strength (higher binds tighter). ``memo`` (``id(node) ->
    result``, for one printing, while the nodes are alive) prints a subexpression that several
    parents share once: a kernel's expressions are DAGs whose trees can be much larger."""
    if memo is not None:
        found = memo.get(id(e))
        if found is None:
            found = memo[id(e)] = _expr_text_of(e, memo)
        return found
    return _expr_text_of(e, None)


def _expr_text_of(e: Expr, memo) -> tuple[str, int]:
    if isinstance(e, IntImm):
        if e.dtype == "bool":
            return ("True" if e.value else "False"), 9
        return (str(e.value) if e.dtype == "int64" else f"{e.dtype}({e.value})"), 9
    if isinstance(e, FloatImm):
        text = repr(e.value) if math.isfinite(e.value) else f'"{e.value}"'
        return (text if e.dtype == "float32" else f"{e.dtype}({text})"), 9
    if isinstance(e, Var):
        return e.name, 9
    if isinstance(e, Binary):
        if e.op in ("min", "max"):
            return f"{e.op}({_expr_text(e.a, memo)[0]}, {_expr_text(e.b, memo)[0]})", 9
        prec = _PREC[e.op]
        left, lp = _expr_text(e.a, memo)
        right, rp = _expr_text(e.b, memo)
        if lp < prec:
            left = f"({left})"
        if rp <= prec:  # left-associative: a - (b - c) keeps its parentheses
            right = f"({right})"
        return f"{left} {e.op} {right}", prec
    if isinstance(e, Unary):
        inner, ip = _expr_text(e.a, memo)
        if e.op == "not":
            return f"not {inner if ip > 3 else f'({inner})'}", 3
        return f"-{inner if ip >= 8 else f'({inner})'}", 8
    if isinstance(e, Select):
        return (f"select({_expr_text(e.cond, memo)[0]}, {_expr_text(e.true_value, memo)[0]}, "
                f"{_expr_text(e.false_value, memo)[0]})"), 9
    if isinstance(e, Cast):
        inner = _expr_text(e.value, memo)[0]
        if isinstance(e.value, FloatImm) and e.value.dtype == "float32":
            inner = f"float32({inner})"  # a float32 literal widened, not a literal of e.dtype
        return f"{e.dtype}({inner})", 9
    if isinstance(e, Load):
        return f"{e.buffer.name}[{_index_text(e.indices, memo)}]", 9
    if isinstance(e, Call):
        return f"{e.name}({', '.join(_expr_text(a, memo)[0] for a in e.args)})", 9
    if isinstance(e, DotSum):
        factors = [_expr_text(x, memo) for x in (e.a, e.b)]
        left, right = [t if p >= 7 else f"({t})" for t, p in factors]
        return f"dot_sum({e.var.name} < {e.extent}: {left} * {right})", 9
    printer = getattr(e, "text", None)  # expression nodes defined by other layers (te)
    if printer is not None:
        return printer(lambda x: _expr_text(x, memo)[0]), 9
    raise CompileError(f"cannot print {type(e).__name__}")


def _index_text(indices, memo: dict | None = None) -> str:
    return ", ".join(_expr_text(i, memo)[0] for i in indices) if indices else "()"


def _stmt_lines(s: Stmt, indent: int, out: list, memo: dict | None = None):
    pad = "    " * indent
    if isinstance(s, For):
        begin = s.begin
        if isinstance(begin, IntImm) and begin.value == 0:
            bounds = _expr_text(s.extent, memo)[0]
        else:
            # begin + extent is a new node, gone after this line: not remembered by its id
            bounds = f"{_expr_text(begin, memo)[0]}, {_expr_text(begin + s.extent)[0]}"
        out.append(f"{pad}for {s.var.name} in {s.kind}({bounds}):")
        _stmt_lines(s.body, indent + 1, out, memo)
    elif isinstance(s, Store):
        out.append(f"{pad}{s.buffer.name}[{_index_text(s.indices, memo)}] = "
                   f"{_expr_text(s.value, memo)[0]}")
    elif isinstance(s, LetStmt):
        out.append(f"{pad}{s.var.name} = {_expr_text(s.value, memo)[0]}")
        _stmt_lines(s.body, indent, out, memo)
    elif isinstance(s, IfThenElse):
        out.append(f"{pad}if {_expr_text(s.cond, memo)[0]}:")
        _stmt_lines(s.then_case, indent + 1, out, memo)
        if s.else_case is not None:
            out.append(f"{pad}else:")
            _stmt_lines(s.else_case, indent + 1, out, memo)
    elif isinstance(s, SeqStmt):
        for stmt in s.stmts:
            _stmt_lines(stmt, indent, out, memo)
    elif isinstance(s, Allocate):
        scope = "" if s.buffer.scope == "global" else f', "{s.buffer.scope}"'
        shape = _shape_text(s.buffer.shape)
        out.append(f'{pad}{s.buffer.name} = allocate({shape}, "{s.buffer.dtype}"{scope})')
        _stmt_lines(s.body, indent, out, memo)
    elif isinstance(s, Barrier):
        out.append(f"{pad}barrier()")
    else:
        raise CompileError(f"cannot print statement {type(s).__name__}")


def to_text(node) -> str:
    """The readable text of an expression, a statement or a PrimFunc (what ``print`` shows)."""
    if isinstance(node, PrimFunc):
        params = ", ".join(f'{p.name}: Buffer({_shape_text(p.shape)}, "{p.dtype}")'
                           for p in node.params)
        lines = [f"def {node.name}({params}):"]
        _stmt_lines(node.body, 1, lines, {})
        return "\n".join(lines)
    if isinstance(node, Stmt):
        lines = []
        _stmt_lines(node, 0, lines, {})
        return "\n".join(lines)
    return _expr_text(node, {})[0]


# --------------------------------------------------------------------------------------------
# Reference evaluator

def _maximum(a, b):
    """numpy's ``maximum``: ``a`` when ``a > b`` or ``a`` is NaN, else ``b`` (so a NaN on
    either side is the result, and of two equal values, ``-0.0`` and ``0.0``, the second)."""
    return a if a > b or a != a else b


def _minimum(a, b):
    """numpy's ``minimum``: ``a`` when ``a < b`` or ``a`` is NaN, else ``b``."""
    return a if a < b or a != a else b


_ARITH = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "min": _minimum, "max": _maximum,
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    "==": operator.eq, "!=": operator.ne,
}


def _shift(op: str, dtype: str):
    """numpy's shift on ``dtype`` (an amount outside ``[0, bits)`` gives 0, or -1 when a
    negative value is shifted right)."""
    ufunc = np.left_shift if op == "<<" else np.right_shift
    kind = np.dtype(dtype).type
    return lambda a, b: ufunc(kind(a), kind(b))


_UNBOUND = object()


class _Evaluator:
    """Runs loop IR one scalar at a time; ``arrays`` maps each Buffer to its numpy array."""

    def __init__(self, func: PrimFunc, arrays: dict):
        self.func = func
        self.arrays = arrays
        self.flat = {buf: arr.reshape(-1) for buf, arr in arrays.items()}
        self.env: dict = {}
        self.expr_table = {
            IntImm: self._imm, FloatImm: self._imm, Var: self._var, Binary: self._binary,
            Unary: self._unary, Select: self._select, Cast: self._cast, Load: self._load,
            Call: self._call, DotSum: self._dot_sum,
        }
        self.stmt_table = {
            For: self._for, Store: self._store, LetStmt: self._let, IfThenElse: self._if,
            SeqStmt: self._seq, Allocate: self._allocate, Barrier: self._barrier,
        }

    # expressions
    def expr(self, e):
        handler = self.expr_table.get(type(e))
        if handler is None:
            handler = next((self.expr_table[t] for t in type(e).__mro__ if t in self.expr_table),
                           None)
            if handler is not None:
                self.expr_table[type(e)] = handler
        if handler is None:
            raise CompileError(f"kernel {self.func.name}: cannot evaluate {type(e).__name__} "
                               f"({to_text(e)}); lower it first")
        return handler(e)

    def _imm(self, e):
        if e.dtype == "bool":
            return bool(e.value)
        return int(e.value) if e.dtype == "int64" else np.dtype(e.dtype).type(e.value)

    def _var(self, e):
        try:
            return self.env[e]
        except KeyError:
            raise CompileError(f"kernel {self.func.name}: variable {e.name} is used where it is "
                               "not bound") from None

    def _binary(self, e):
        if e.op == "and":
            return bool(self.expr(e.a)) and bool(self.expr(e.b))
        if e.op == "or":
            return bool(self.expr(e.a)) or bool(self.expr(e.b))
        a, b = self.expr(e.a), self.expr(e.b)
        if e.op in ("//", "%") and b == 0:
            raise ExecutionError(f"kernel {self.func.name}: integer division by zero in "
                                 f"{to_text(e)}")
        if e.op in SHIFT_OPS:
            return _as_dtype(_shift(e.op, e.dtype)(a, b), e.dtype)
        result = _ARITH[e.op](a, b)
        if e.op in COMPARE_OPS:
            return bool(result)
        return _as_dtype(result, e.dtype)

    def _unary(self, e):
        a = self.expr(e.a)
        return (not a) if e.op == "not" else -a

    def _select(self, e):
        return self.expr(e.true_value) if self.expr(e.cond) else self.expr(e.false_value)

    def _cast(self, e):
        return _as_dtype(self.expr(e.value), e.dtype)

    def _index(self, buffer, indices, what):
        values = [int(self.expr(i)) for i in indices]
        if len(values) == 1 and len(buffer.shape) != 1:
            if not 0 <= values[0] < buffer.size:
                raise ExecutionError(f"kernel {self.func.name}: {what} {buffer.name}[{values[0]}]"
                                     f" is out of bounds (flat size {buffer.size})")
            return self.flat[buffer], values[0]
        for v, extent in zip(values, buffer.shape):
            if not 0 <= v < extent:
                raise ExecutionError(f"kernel {self.func.name}: {what} {buffer.name}"
                                     f"{list(values)} is out of bounds (shape {buffer.shape})")
        return self.arrays[buffer], tuple(values)

    def _load(self, e):
        if e.buffer not in self.arrays:
            raise CompileError(f"kernel {self.func.name}: load of {e.buffer.name}, which is "
                               "neither a parameter nor allocated here")
        array, index = self._index(e.buffer, e.indices, "load")
        value = array[index]
        return int(value) if e.dtype == "int64" else value

    def _call(self, e):
        args = [self.expr(a) for a in e.args]
        return _as_dtype(INTRINSICS[e.name](*args), e.dtype)

    def _dot_sum(self, e):
        saved = self.env.get(e.var, _UNBOUND)
        total = _as_dtype(0, e.dtype)
        for step in range(e.extent):
            self.env[e.var] = step
            product = _as_dtype(_ARITH["*"](self.expr(e.a), self.expr(e.b)), e.dtype)
            total = _as_dtype(total + product, e.dtype)
        if saved is _UNBOUND:
            del self.env[e.var]
        else:
            self.env[e.var] = saved
        return total

    # statements
    def stmt(self, s):
        self.stmt_table[type(s)](s)

    def _for(self, s):
        begin = int(self.expr(s.begin))
        extent = int(self.expr(s.extent))
        for value in range(begin, begin + extent):  # every kind means the same sequentially
            self.env[s.var] = value
            self.stmt(s.body)
        self.env.pop(s.var, None)

    def _store(self, s):
        if s.buffer not in self.arrays:
            raise CompileError(f"kernel {self.func.name}: store to {s.buffer.name}, which is "
                               "neither a parameter nor allocated here")
        value = self.expr(s.value)
        array, index = self._index(s.buffer, s.indices, "store")
        array[index] = value

    def _let(self, s):
        self.env[s.var] = self.expr(s.value)
        self.stmt(s.body)
        del self.env[s.var]

    def _if(self, s):
        if self.expr(s.cond):
            self.stmt(s.then_case)
        elif s.else_case is not None:
            self.stmt(s.else_case)

    def _seq(self, s):
        for stmt in s.stmts:
            self.stmt(stmt)

    def _barrier(self, s):
        """Run in order, every thread loop before the barrier has finished: nothing to wait for."""

    def _allocate(self, s):
        # Filled with NaN (or a marker integer) so that reading before writing shows up.
        array = np.empty(s.buffer.shape, s.buffer.dtype)
        if _is_float(s.buffer.dtype):
            array.fill(np.nan)
        elif s.buffer.dtype == "bool":
            array.fill(True)
        else:  # a marker that fits every integer width: 0x5A5A..., truncated to the dtype
            array.reshape(-1).view(np.uint8).fill(0x5A)
        self.arrays[s.buffer] = array
        self.flat[s.buffer] = array.reshape(-1)
        self.stmt(s.body)
        del self.arrays[s.buffer], self.flat[s.buffer]


def _as_dtype(value, dtype: str):
    if dtype == "bool":
        return bool(value)
    if isinstance(value, (float, np.floating)) and dtype.startswith(("int", "uint")):
        from relaybench.ir.types import convert_values
        value = convert_values(np.float64(value), dtype)
    if dtype == "int64":
        return int(value)
    return np.dtype(dtype).type(value)


def evaluate(func: PrimFunc, *arrays: np.ndarray) -> None:
    """Run ``func`` on numpy arrays, one per parameter, in place (outputs are written into).

    Every kind of loop runs sequentially; this is the semantics, not a fast path: keep the
    shapes small. Arrays are checked against the parameters' shapes and dtypes first.

    >>> X = Buffer("X", (3,), "int32")
    >>> i = Var("i")
    >>> f = PrimFunc("iota", (X,), For(i, 0, 3, "serial", Store(X, (i,), cast("int32", i * i))))
    >>> x = np.zeros(3, "int32")
    >>> evaluate(f, x)
    >>> x.tolist()
    [0, 1, 4]
    """
    if len(arrays) != len(func.params):
        raise ExecutionError(f"kernel {func.name}: {len(func.params)} arrays expected "
                             f"({', '.join(p.name for p in func.params)}), {len(arrays)} given",
                             expected=len(func.params), given=len(arrays))
    bound = {}
    for buf, array in zip(func.params, arrays):
        if not isinstance(array, np.ndarray):
            raise ExecutionError(f"kernel {func.name}: {buf.name} must be a numpy array, got "
                                 f"{type(array).__name__}", input_name=buf.name)
        if tuple(array.shape) != buf.shape or array.dtype != np.dtype(buf.dtype):
            raise ExecutionError(f"kernel {func.name}: {buf.name} expects "
                                 f"{buf.dtype}{list(buf.shape)}, given "
                                 f"{array.dtype}{list(array.shape)}", input_name=buf.name,
                                 expected=(buf.shape, buf.dtype),
                                 given=(tuple(array.shape), str(array.dtype)))
        if not array.flags.c_contiguous:
            raise ExecutionError(f"kernel {func.name}: {buf.name} must be C-contiguous",
                                 input_name=buf.name)
        bound[buf] = array
    with np.errstate(all="ignore"):
        _Evaluator(func, bound).stmt(func.body)
