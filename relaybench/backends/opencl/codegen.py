"""Code generation from the loop IR (:mod:`relaybench.te.loop_ir`) to OpenCL C.

``generate(func, features)`` turns a :class:`~relaybench.te.loop_ir.PrimFunc` scheduled by the
GPU strategy into an :class:`OpenCLSource`: the program's text and, per kernel, its launch (how
many work groups of how many work items along x, y and z). The text is built from the loop IR
by tables keyed by node class and operator, as the LLVM code generator is; a notebook shows it
with ``lib.source("opencl")``.

How each construct is written:

* **Launches.** The top-level ``allocate`` statements are the function's temporaries, buffers in
  device memory that the runtime makes once per kernel and passes after the parameters. Each
  statement of the body below them is one ``__kernel`` (``<name>_0``, ``<name>_1``, ...; just
  ``<name>`` when there is one), run in order on one in-order queue: a stage computed at the
  root that another reads needs every work group to have finished, and the end of a launch is
  the only barrier between work groups. Consecutive statements with no bound loop share one
  launch of a single work item.
* **Bound loops.** A loop bound to ``blockIdx.d`` reads its value from ``get_group_id(d)``, one
  bound to ``threadIdx.d`` from ``get_local_id(d)``; a launch has as many work groups along
  ``d`` as the largest ``blockIdx.d`` loop and as many work items as the largest
  ``threadIdx.d`` loop, and a smaller loop bound to the same axis is guarded (``if (i < n)``).
  Work items run everything outside their thread loops too, computing the same values there;
  a store to memory they share (device or ``shared`` memory) outside the loops bound to some of
  the launch's axes is made by the first work item (and work group) along those axes only,
  as if the statement ran once (``if (get_local_id(0) == 0) ...``): a reduction's root, or
  an accumulation no thread loop splits. A barrier inside a thread loop is written only where
  every work item reaches it: under no guard (a partial thread loop, an ``if``), else it is
  refused (work items that skip it would hang the others). A loop bound to the axis of a loop
  around it is that loop's work item again, its share of the iterations, as in TVM (the
  threads of a group filling a ``shared`` tile inside the loops of their own outputs): its
  body must not read the outer loop's variable, since the loop IR runs every pair of the two
  where the device runs only equal ones.
* **Memory.** Parameters and temporaries are ``__global`` pointers (``const`` when only read;
  ``restrict``: buffers never overlap); an ``allocate`` in ``shared`` scope is a ``__local``
  array declared at the top of the kernel, a :class:`~relaybench.te.loop_ir.Barrier` is
  ``barrier(CLK_LOCAL_MEM_FENCE)``, any other ``allocate`` inside a kernel a private array of
  each work item. ``bool`` is one byte in memory (``uchar``), as in numpy.
* **Arithmetic.** Floating point follows the loop IR as written: ``#pragma OPENCL FP_CONTRACT
  OFF`` keeps ``a * b + c`` two roundings (the evaluator's and the references'), except a
  reduction's accumulation ``acc = acc + a * b``, which is ``fma(a, b, acc)`` (as the LLVM
  backend contracts its vectorized sums; the order of a reduction's sum differs between
  backends anyway), and the program
  is built with correctly rounded division and square root where the device offers it. Signed
  integer ``+ - *`` on data wrap (computed unsigned, as numpy wraps; C leaves signed overflow
  undefined), 8- and 16-bit results are truncated back to their width. ``//`` and ``%`` are
  floor division and modulo with numpy's answers for a zero divisor (0) and ``INT_MIN // -1``
  (wraps), shifts give numpy's results for amounts outside ``[0, bits)``, float ``min``/``max``
  propagate NaN (numpy's ``minimum``/``maximum``), and a float cast to an integer follows
  :func:`relaybench.ir.types.convert_values` (out of range and NaN give the smallest integer of
  the 32- or 64-bit conversion). Each is a small ``static inline`` helper emitted only when the
  kernel uses it.
* **Index arithmetic in 32 bits.** The loop IR's indices are int64; a GPU does 64-bit integer
  multiplication and division in several instructions each. Every loop's variable has an
  interval (its begin and extent), and so has every index expression built from loop variables
  and constants with ``+ - * // % min max`` and ``select`` on comparisons of such
  (:class:`_Ranges`): where that interval and each of its parts' fit in int32, the expression
  is written in ``int`` (no overflow is possible), and ``//`` and ``%`` of a dividend that
  cannot be negative by a positive constant are C's ``/`` and ``%`` (equal to floor division
  there) instead of the helpers. Loop variables whose range fits are declared ``int``; a memory offset is written in
  ``int`` when the flattened offset's bound fits too. Anything with a load, a cast or a size
  variable keeps 64 bits.
* **Selects.** ``select`` is C's ``?:`` and ``and``/``or`` are ``&&``/``||``: only the chosen
  side is evaluated, so a side not chosen may read out of bounds (padding does).
* **Float64** needs the device's ``cl_khr_fp64`` and **float16** its ``cl_khr_fp16``; a kernel
  using one on a device without it is a :class:`~relaybench.errors.CompileError` naming both.
* **Vector types.** A ``vectorized`` loop of 2, 3, 4, 8 or 16 iterations from 0 around one
  float32 or float64 store whose flat offset moves by one element per iteration (a lane) is
  one vector store (``float4``...). In its value, an expression that does not move with the
  lane is a scalar (widened where it meets a vector), a load whose offset moves by one element
  per lane a vector load, arithmetic, ``min``/``max`` (NaN propagating, lane by lane), a
  ``select`` on a condition that does not move, float casts and the math built-ins their
  vector forms, a reduction's step ``fma`` on vectors, and anything else (a load along another
  axis, a condition on the lane) a vector built lane by lane, ``(float4)(e0, e1, e2, e3)``,
  each lane's expression simplified. Where the first lane's offset is a multiple of the lanes
  the access is a cast pointer (``*((__global float4*)(X + i * 4))``: aligned, one wide memory
  transaction), else ``vload4``/``vstore4``. Whether an index moves with the lane is decided on
  its form: ``a + k * lane`` where ``//`` and ``%`` by a constant keep the form when the
  constant is a multiple of ``k x lanes`` and so is the first lane's value (the lanes never
  cross a row), as in a fused NCHW index whose innermost axis the lanes divide. Any other
  ``vectorized`` loop is a plain loop.
* **Flat offsets.** A multi-dimensional access whose indices split a fused loop index with
  ``//`` and ``%`` is flattened and simplified first: the divisions cancel
  (``(i // 6) * 6 + i % 6`` is ``i``), so the fused index itself addresses the memory.
* Loops of kind ``serial``, ``parallel`` and other ``vectorized`` ones are plain ``for`` loops
  (a work item runs its iterations in order), ``unrolled`` ones carry ``#pragma unroll``.

>>> from relaybench import te
>>> X = te.placeholder((64,), name="X")
>>> Y = te.compute((64,), lambda i: te.maximum(X[i], 0.0), name="Y")
>>> s = te.create_schedule(Y)
>>> bx, tx = s[Y].split(Y.op.axis[0], factor=32)
>>> s[Y].bind(bx, "blockIdx.x"); s[Y].bind(tx, "threadIdx.x")
>>> code = generate(te.lower(s, [X], name="relu"))
>>> code.kernels[0].global_size, code.kernels[0].local_size
((64, 1, 1), (32, 1, 1))
>>> print(code.text.split("__kernel")[1].strip())
void relu(__global const float* restrict X, __global float* restrict Y) {
    {
        const int i_outer = (int)get_group_id(0);
        {
            const int i_inner = (int)get_local_id(0);
            Y[((i_outer * 32) + i_inner)] = rb_max_float(X[((i_outer * 32) + i_inner)], 0.0f);
        }
    }
}
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from ...errors import CompileError
from ...te import loop_ir as L
from ...te.simplify import simplify, simplify_stmt

__all__ = ["generate", "program_text", "OpenCLSource", "KernelLaunch", "DeviceFeatures",
           "CTYPES"]

#: dtype -> the OpenCL C type of its values
CTYPES = {
    "bool": "bool", "int8": "char", "uint8": "uchar", "int16": "short", "uint16": "ushort",
    "int32": "int", "uint32": "uint", "int64": "long", "uint64": "ulong", "float16": "half",
    "float32": "float", "float64": "double",
}

_UNSIGNED = {"int8": "uchar", "int16": "ushort", "int32": "uint", "int64": "ulong",
             "uint8": "uchar", "uint16": "ushort", "uint32": "uint", "uint64": "ulong"}

_BITS = {"int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "int32": 32, "uint32": 32,
         "int64": 64, "uint64": 64}

#: Names the generated code uses as functions, types or qualifiers: a buffer or variable of
#: one of these names gets a suffix.
_RESERVED = frozenset("""
auto bool break case char const constant continue default do double else enum extern float for
global goto half if inline int kernel local long private read_only register restrict return
short signed sizeof static struct switch typedef uchar uint ulong union unsigned ushort void
volatile while write_only true false abs ceil cos erf exp exp2 fabs floor fmod isnan log log2
max min pow rint sin sqrt tanh barrier get_group_id get_local_id select clamp mix sign step
tan asin acos atan sinh cosh asinh acosh atanh
""".split())


@dataclass(frozen=True)
class DeviceFeatures:
    """What the code generator (and the GPU strategy) need to know of the device: its
    extensions, the largest work group (in total and per axis) and its type."""

    name: str = "any OpenCL device"
    fp64: bool = True
    fp16: bool = False
    max_work_group_size: int = 1024
    max_work_item_sizes: tuple = (1024, 1024, 64)
    kind: str = "gpu"    # the device's type: gpu, cpu or accelerator


@dataclass
class KernelLaunch:
    """One ``__kernel`` of a program and its launch: work items in all (``global_size``) and per
    work group (``local_size``) along x, y, z."""

    name: str
    global_size: tuple
    local_size: tuple

    @property
    def empty(self) -> bool:
        return any(g == 0 for g in self.global_size)


@dataclass
class OpenCLSource:
    """A PrimFunc as an OpenCL program: its ``text``, the ``kernels`` launched in order, the
    ``temporaries`` (loop-IR Buffers in device memory, passed after the parameters) and which
    parameters the kernels write (``stored``). ``body`` is the kernels' text alone, ``helpers``
    and ``extensions`` what it needs before it, so that :func:`program_text` can put the
    kernels of many functions in one program."""

    name: str
    body: str
    kernels: list
    params: tuple
    temporaries: list
    stored: set = field(default_factory=set)
    launch_buffers: dict = field(default_factory=dict)   # kernel name -> temporaries it takes
    helpers: dict = field(default_factory=dict)          # helper name -> its definition
    extensions: set = field(default_factory=set)

    @property
    def text(self) -> str:
        """The program of this function alone."""
        return program_text([self])


def program_text(codes) -> str:
    """One OpenCL program holding the kernels of ``codes`` (their names must differ), each helper
    and extension once: a build compiles all its groups in one program (one call of the
    driver's compiler, which costs far more per program than per kernel)."""
    codes = list(codes)
    names = ", ".join(c.name for c in codes[:3]) + (", ..." if len(codes) > 3 else "")
    lines = [f"// {names}: generated from the loop IR by relaybench",
             "#pragma OPENCL FP_CONTRACT OFF"]
    extensions = sorted(set().union(*[c.extensions for c in codes])) if codes else []
    for ext in extensions:
        lines.append(f"#pragma OPENCL EXTENSION {ext} : enable")
    lines.append("")
    helpers: dict = {}
    for code in codes:
        for name, text in code.helpers.items():
            helpers.setdefault(name, text)
    for text in helpers.values():
        lines.extend([text, ""])
    return "\n".join(lines) + "\n" + "\n\n".join(c.body for c in codes)


def generate(func: L.PrimFunc, features: DeviceFeatures | None = None) -> OpenCLSource:
    """The OpenCL program of ``func`` (see the module); ``features`` describe the device."""
    features = features or DeviceFeatures()
    body, temporaries = func.body, []
    while isinstance(body, L.Allocate) and body.buffer.scope == "global":
        temporaries.append(body.buffer)
        body = body.body
    stmts = list(body.stmts) if isinstance(body, L.SeqStmt) else [body]
    phases, pending = [], []
    for stmt in stmts:  # statements with no bound loop run together on one work item
        if _bound_extents(stmt, func.name):
            if pending:
                phases.append(L.seq(*pending))
                pending = []
            phases.append(stmt)
        else:
            pending.append(stmt)
    if pending:
        phases.append(L.seq(*pending))
    writer = _Writer(func, features, temporaries)
    launches, texts = [], []
    for k, phase in enumerate(phases):
        # "__": kernels of several groups share a program, and group names end in "_1", "_2"
        name = writer.kernel_name if len(phases) == 1 else f"{writer.kernel_name}__{k}"
        launch, text = writer.kernel(name, phase)
        launches.append(launch)
        texts.append(text)
    return OpenCLSource(func.name, "\n\n".join(texts) + "\n", launches, tuple(func.params),
                        temporaries, writer.stored_params, writer.launch_buffers,
                        dict(writer.helpers.texts), set(writer.extensions))


def _bound_extents(stmt, where: str) -> dict:
    """``{tag: largest extent}`` of the loops bound to GPU axes in ``stmt``."""
    found, stack = {}, [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, L.For) and node.kind in L.THREAD_TAGS:
            if not isinstance(node.extent, L.IntImm):
                raise CompileError(f"kernel {where}: the loop {node.var.name} bound to "
                                   f"{node.kind} needs a constant extent")
            found[node.kind] = max(found.get(node.kind, 0), int(node.extent.value))
        if isinstance(node, L.Stmt):
            stack.extend(L.children(node))
    return found


def _mentions_var(stmt, var) -> bool:
    """Whether ``stmt`` reads the variable ``var``."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        if node is var:
            return True
        stack.extend(L.children(node))
    return False


def _stored(stmt) -> set:
    found, stack = set(), [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, L.Store):
            found.add(node.buffer)
        if isinstance(node, L.Stmt):
            stack.extend(L.children(node))
    return found


def _has_load(expr, memo: dict) -> bool:
    """Whether ``expr`` reads memory (index arithmetic does not, and cannot overflow)."""
    if expr in memo:
        return memo[expr]
    found, stack = False, [expr]
    while stack and not found:
        node = stack.pop()
        if isinstance(node, L.Load):
            found = True
        else:
            stack.extend(L.children(node))
    memo[expr] = found
    return found


def _float_literal(value: float, dtype: str) -> str:
    if dtype == "float64":
        if np.isnan(value):
            return "((double)NAN)"
        if np.isinf(value):
            return "((double)INFINITY)" if value > 0 else "(-(double)INFINITY)"
        return repr(float(value))
    single = np.float32(value)
    if np.isnan(single):
        text = "NAN"
    elif np.isinf(single):
        text = "INFINITY" if single > 0 else "(-INFINITY)"
    else:
        text = str(single)
        if "." not in text and "e" not in text and "inf" not in text:
            text += ".0"
        text += "f"
    return text if dtype == "float32" else f"(({CTYPES[dtype]}){text})"


def _int_literal(value: int, dtype: str) -> str:
    if dtype == "bool":
        return "true" if value else "false"
    if dtype == "int64":
        return "(-9223372036854775807L - 1L)" if value == -(1 << 63) else f"{value}L"
    if dtype == "uint64":
        return f"{value}UL"
    if dtype == "int32":
        return "(-2147483647 - 1)" if value == -(1 << 31) else str(value)
    if dtype == "uint32":
        return f"{value}u"
    return f"(({CTYPES[dtype]}){value})"


_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1

UNROLL_LIMIT = 16
"""An ``unrolled`` loop of at most this many iterations (constant bounds) is written out, one
block per iteration with its variable replaced by the constant and simplified; a longer one is
a loop under ``#pragma unroll``."""


class _Ranges:
    """Intervals ``(lo, hi)`` of int64 index expressions (see the module): loop variables get
    theirs from :meth:`bind`; :meth:`of` gives an expression's, or None when it is unknown (a
    load, a cast, a let or size variable, an operator it does not follow) or when it or any of
    its parts leaves int32, so that a non-None answer means the whole expression can be
    computed in ``int``."""

    def __init__(self):
        self.vars: dict = {}
        self.memo: dict = {}   # id(expr) -> (expr, interval or None)

    def bind(self, var, interval) -> None:
        if self.vars.get(var) != interval:
            if var in self.vars:
                self.memo.clear()   # the variable of another loop before: answers may change
            if interval is None:
                self.vars.pop(var, None)
            else:
                self.vars[var] = interval

    def of(self, e):
        found = self.memo.get(id(e))
        if found is not None and found[0] is e:
            return found[1]
        interval = self._of(e)
        if interval is not None and (interval[0] < _INT32_MIN or interval[1] > _INT32_MAX):
            interval = None
        self.memo[id(e)] = (e, interval)
        return interval

    def predicate(self, e) -> bool:
        """Whether the boolean ``e`` compares (and combines) int64 index expressions only."""
        if isinstance(e, L.Binary):
            if e.op in L.COMPARE_OPS:
                return (e.a.dtype == "int64" and self.of(e.a) is not None
                        and self.of(e.b) is not None)
            if e.op in L.LOGICAL_OPS:
                return self.predicate(e.a) and self.predicate(e.b)
        if isinstance(e, L.Unary) and e.op == "not":
            return self.predicate(e.a)
        return False

    def _of(self, e):
        if e.dtype != "int64":
            return None
        if isinstance(e, L.IntImm):
            return (int(e.value), int(e.value))
        if isinstance(e, L.Var):
            return self.vars.get(e)
        if isinstance(e, L.Select):
            if not self.predicate(e.cond):
                return None
            a, b = self.of(e.true_value), self.of(e.false_value)
            return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
        if not isinstance(e, L.Binary):
            return None
        a, b = self.of(e.a), self.of(e.b)
        if a is None or b is None:
            return None
        op = e.op
        if op == "+":
            return (a[0] + b[0], a[1] + b[1])
        if op == "-":
            return (a[0] - b[1], a[1] - b[0])
        if op == "*":
            products = [x * y for x in a for y in b]
            return (min(products), max(products))
        if op == "min":
            return (min(a[0], b[0]), min(a[1], b[1]))
        if op == "max":
            return (max(a[0], b[0]), max(a[1], b[1]))
        if op in ("//", "%") and b[0] == b[1] and b[0] > 0:
            c = b[0]
            if op == "//":
                return (a[0] // c, a[1] // c)
            return a if a[0] >= 0 and a[1] < c else (0, c - 1)
        return None

    def non_negative_by_constant(self, e) -> bool:
        """Whether the ``//`` or ``%`` ``e`` divides a dividend that cannot be negative by a
        positive constant (C's ``/`` and ``%`` give the floor's answers there)."""
        a = self.of(e.a)
        return (a is not None and a[0] >= 0 and isinstance(e.b, L.IntImm)
                and int(e.b.value) > 0)


VECTOR_LANES = (2, 3, 4, 8, 16)
"""The extents of a ``vectorized`` loop written with OpenCL's vector types."""

VECTOR_DTYPES = ("float32", "float64")
"""The element types of the vector stores and arithmetic the generator writes."""

_WIDE_INDEX = ("int32", "int64")   # casts of an index to these keep its value (indices fit)


def _divisible(e, m: int) -> bool:
    """Whether the int expression ``e`` is a multiple of ``m`` whatever its variables' values
    (a conservative answer: False where it cannot tell)."""
    if m == 1:
        return True
    cls = type(e)
    if cls is L.IntImm:
        return int(e.value) % m == 0
    if cls is L.Binary:
        if e.op in ("+", "-"):
            return _divisible(e.a, m) and _divisible(e.b, m)
        if e.op == "*":
            for x, y in ((e.a, e.b), (e.b, e.a)):
                if type(y) is L.IntImm:
                    return _divisible(x, m // math.gcd(int(y.value), m))
            return _divisible(e.a, m) or _divisible(e.b, m)
        if e.op == "%" and type(e.b) is L.IntImm and int(e.b.value) > 0 \
                and int(e.b.value) % m == 0:
            return _divisible(e.a, m)
    if cls is L.Cast and e.dtype in _WIDE_INDEX and e.value.dtype in _BITS:
        return _divisible(e.value, m)
    return False


class _Lanes:
    """The lanes ``v = 0 .. lanes - 1`` of a ``vectorized`` loop, and how an index expression
    moves with ``v`` (see :meth:`coefficient`)."""

    def __init__(self, var, lanes: int):
        self.var, self.lanes = var, lanes
        self._mentions: dict = {}

    def mentions(self, e) -> bool:
        known = self._mentions.get(id(e))
        if known is None:   # the node is kept with its answer, so its id is not reused
            known = self._mentions[id(e)] = (e, _mentions_var(e, self.var))
        return known[1]

    def at(self, e, lane: int):
        """``e`` in lane ``lane``: the loop's variable replaced by the constant, simplified."""
        return simplify(L.substitute(e, {self.var: L.IntImm(lane, self.var.dtype)}))

    def coefficient(self, e):
        """``k`` where ``e == at(e, 0) + k * v`` in every lane, else None. Integer division
        and modulo by a constant ``c`` keep the form where ``c`` is a multiple of ``k * lanes``
        and so is ``at(e, 0)``: the lanes then never cross a multiple of ``c`` (a row of a
        fused index whose length the vector divides)."""
        if not self.mentions(e):
            return 0
        if e is self.var:
            return 1
        cls = type(e)
        if cls is L.Binary:
            op = e.op
            if op in ("+", "-"):
                a, b = self.coefficient(e.a), self.coefficient(e.b)
                if a is None or b is None:
                    return None
                return a + b if op == "+" else a - b
            if op == "*":
                for x, y in ((e.a, e.b), (e.b, e.a)):
                    if type(y) is L.IntImm:
                        k = self.coefficient(x)
                        return None if k is None else k * int(y.value)
            elif op in ("//", "%") and type(e.b) is L.IntImm and int(e.b.value) > 0:
                k = self.coefficient(e.a)
                if k is None or k < 0:
                    return None
                if k == 0:
                    return 0
                span = k * self.lanes
                if int(e.b.value) % span == 0 and _divisible(self.at(e.a, 0), span):
                    return 0 if op == "//" else k
                return None
            # any other operator of operands that do not move with the lane does not either
            return 0 if self.coefficient(e.a) == 0 and self.coefficient(e.b) == 0 else None
        if cls is L.Cast and e.dtype in _WIDE_INDEX and e.value.dtype in _BITS:
            return self.coefficient(e.value)   # (a narrower cast could wrap between lanes)
        return None

    def flat_coefficient(self, buffer, indices):
        """How the flat (row-major) offset of ``buffer[indices]`` moves with the lane."""
        if len(indices) == 1:
            return self.coefficient(indices[0])
        shape = list(buffer.shape)
        if len(shape) != len(indices) or not all(isinstance(d, (int, np.integer)) for d in shape):
            return None
        total, stride = 0, 1
        for index, extent in reversed(list(zip(indices, shape))):
            k = self.coefficient(index)
            if k is None:
                return None
            total += k * stride
            stride *= int(extent)
        return total

    def flat_base(self, buffer, indices):
        """The flat offset of ``buffer[indices]`` in lane 0, as an expression."""
        base = [self.at(i, 0) for i in indices]
        if len(base) == 1:
            return base[0]
        flat = None
        for index, extent in zip(base, buffer.shape):
            flat = index if flat is None else flat * int(extent) + index
        return flat


class _Helpers:
    """The ``static inline`` helper functions a program uses, each written once."""

    def __init__(self):
        self.texts: dict = {}

    def use(self, name: str, text: str) -> str:
        self.texts.setdefault(name, text)
        return name

    def float_min_max(self, op: str, dtype: str) -> str:
        t = CTYPES[dtype]
        compare = ">" if op == "max" else "<"
        return self.use(f"rb_{op}_{t}", (
            f"static inline {t} rb_{op}_{t}({t} a, {t} b) {{\n"
            f"    return (a {compare} b || isnan(a)) ? a : b;\n}}"))

    def float_min_max_vector(self, op: str, dtype: str, lanes: int) -> str:
        """``rb_max_float4``...: the scalar helper's rule lane by lane (NaN propagates)."""
        t = f"{CTYPES[dtype]}{lanes}"
        compare = ">" if op == "max" else "<"
        return self.use(f"rb_{op}_{t}", (
            f"static inline {t} rb_{op}_{t}({t} a, {t} b) {{\n"
            f"    return select(b, a, (a {compare} b) | isnan(a));\n}}"))

    def floor_div_mod(self, op: str, dtype: str) -> str:
        t, u = CTYPES[dtype], _UNSIGNED[dtype]
        kind = "div" if op == "//" else "mod"
        name = f"rb_floor{kind}_{t}"
        if dtype.startswith("uint"):
            result = "a / b" if op == "//" else "a % b"
            return self.use(name, (f"static inline {t} {name}({t} a, {t} b) {{\n"
                                   f"    return b == 0 ? ({t})0 : ({t})({result});\n}}"))
        if op == "//":
            body = (f"    if (b == 0) return ({t})0;\n"
                    f"    if (b == -1) return ({t})(({u})0 - ({u})a);\n"
                    f"    {t} q = ({t})(a / b), r = ({t})(a % b);\n"
                    f"    return (r != 0 && ((r < 0) != (b < 0))) ? ({t})(q - 1) : q;")
        else:
            body = (f"    if (b == 0 || b == -1) return ({t})0;\n"
                    f"    {t} r = ({t})(a % b);\n"
                    f"    return (r != 0 && ((r < 0) != (b < 0))) ? ({t})(r + b) : r;")
        return self.use(name, f"static inline {t} {name}({t} a, {t} b) {{\n{body}\n}}")

    def shift(self, op: str, dtype: str) -> str:
        t, u, bits = CTYPES[dtype], _UNSIGNED[dtype], _BITS[dtype]
        name = f"rb_{'shl' if op == '<<' else 'shr'}_{t}"
        if op == "<<":
            body = f"    return (({u})b >= {bits}u) ? ({t})0 : ({t})(({u})a << ({u})b);"
        elif dtype.startswith("uint"):
            body = f"    return (({u})b >= {bits}u) ? ({t})0 : ({t})(a >> b);"
        else:
            body = (f"    return ({t})(a >> ((({u})b >= {bits}u) ? ({t}){bits - 1} : b));")
        return self.use(name, f"static inline {t} {name}({t} a, {t} b) {{\n{body}\n}}")

    def float_to_int(self, width: int, source: str) -> str:
        """``rb_f2i32_float``/``rb_f2i64_double``...: truncation, out of range (and NaN) the
        smallest integer of the width."""
        f = CTYPES[source]
        t = "int" if width == 32 else "long"
        low = "INT_MIN" if width == 32 else "LONG_MIN"
        bound = f"0x1p{width - 1}" + ("f" if source != "float64" else "")
        name = f"rb_f2i{width}_{f}"
        return self.use(name, (
            f"static inline {t} {name}({f} v) {{\n"
            f"    return (v >= -{bound} && v < {bound}) ? ({t})v : {low};\n}}"))

    def float_to_uint64(self, source: str) -> str:
        f = CTYPES[source]
        to_long = self.float_to_int(64, source)
        top = "0x1p63" + ("f" if source != "float64" else "")
        name = f"rb_f2u64_{f}"
        return self.use(name, (
            f"static inline ulong {name}({f} v) {{\n"
            f"    return v >= {top} ? ((ulong){to_long}(v - {top}) ^ 0x8000000000000000UL)\n"
            f"                     : (ulong){to_long}(v);\n}}"))


class _Writer:
    """Writes the kernels of one PrimFunc."""

    def __init__(self, func: L.PrimFunc, features: DeviceFeatures, temporaries: list):
        self.func = func
        self.features = features
        self.helpers = _Helpers()
        self.names: dict = {}
        self.used: set = set(_RESERVED)
        self.extensions: set = set()
        stored = _stored(func.body)
        self.stored_params = {b for b in func.params if b in stored}
        self.globals = list(func.params) + list(temporaries)
        self.global_set = set(self.globals)
        self.kernel_name = self.ident(func)
        self.launch_buffers: dict = {}
        self.index_memo: dict = {}
        self.flat_memo: dict = {}
        self.ranges = _Ranges()
        self.index_mode = False   # writing an index expression in int (see the module)
        self.expr_table = {
            L.IntImm: self._int, L.FloatImm: self._float, L.Var: self._var,
            L.Binary: self._binary, L.Unary: self._unary, L.Select: self._select,
            L.Cast: self._cast, L.Load: self._load, L.Call: self._call,
        }
        self.stmt_table = {
            L.For: self._for, L.Store: self._store, L.LetStmt: self._let,
            L.IfThenElse: self._if, L.SeqStmt: self._seq, L.Allocate: self._allocate,
            L.Barrier: self._barrier,
        }

    def where(self) -> str:
        return f"kernel {self.func.name}"

    # ---- names
    def ident(self, node) -> str:
        """The C identifier of a buffer, a variable or the function (unique, not reserved)."""
        if node in self.names:
            return self.names[node]
        base = re.sub(r"\W", "_", node.name) or "v"
        if base[0].isdigit():
            base = "_" + base
        name, k = base, 0
        while name in self.used or name.startswith("rb_"):
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        self.names[node] = name
        return name

    def ctype(self, dtype: str) -> str:
        if dtype == "float64":
            if not self.features.fp64:
                raise CompileError(f"{self.where()}: float64 needs the cl_khr_fp64 extension, "
                                   f"which the device {self.features.name} lacks")
            self.extensions.add("cl_khr_fp64")
        if dtype == "float16":
            if not self.features.fp16:
                raise CompileError(f"{self.where()}: float16 needs the cl_khr_fp16 extension, "
                                   f"which the device {self.features.name} lacks")
            self.extensions.add("cl_khr_fp16")
        try:
            return CTYPES[dtype]
        except KeyError:
            raise CompileError(f"{self.where()}: the OpenCL backend has no type for dtype "
                               f"{dtype!r}") from None

    def memory_type(self, dtype: str) -> str:
        return "uchar" if dtype == "bool" else self.ctype(dtype)

    # ---- one kernel
    def kernel(self, name: str, phase):
        extents = _bound_extents(phase, self.func.name)
        groups = [extents.get(f"blockIdx.{a}", 1) for a in "xyz"]
        items = [extents.get(f"threadIdx.{a}", 1) for a in "xyz"]
        total = int(np.prod(items))
        if total > self.features.max_work_group_size or any(
                n > limit for n, limit in zip(items, self.features.max_work_item_sizes)):
            raise CompileError(f"{self.where()}: {name} asks for work groups of {tuple(items)} "
                               f"work items; the device {self.features.name} takes at most "
                               f"{self.features.max_work_group_size} "
                               f"({tuple(self.features.max_work_item_sizes)} per axis)")
        self.extents = extents
        self.groups, self.items = groups, items
        self.bound: list = []          # tags bound around the statement being written
        self.bound_vars: list = []     # and their loop variables
        self.thread_depth = 0
        self.divergent = 0             # guards around it that some work items skip
        self.local_decls: list = []
        self.lines: list = []
        self.indent = 1
        self.stmt(phase)
        used = {b for b in self.globals if self._mentions(phase, b)}
        params = []
        self.launch_buffers[name] = [b for b in self.globals[len(self.func.params):]
                                     if b in used]
        for buffer in self.globals:
            if buffer not in used and buffer not in self.func.params:
                continue
            const = "" if buffer in _stored(phase) else "const "
            params.append(f"__global {const}{self.memory_type(buffer.dtype)}* restrict "
                          f"{self.ident(buffer)}")
        head = f"__kernel void {name}({', '.join(params)}) {{"
        text = "\n".join([head] + self.local_decls + self.lines + ["}"])
        launch = KernelLaunch(name, tuple(g * i for g, i in zip(groups, items)), tuple(items))
        return launch, text

    @staticmethod
    def _mentions(stmt, buffer) -> bool:
        stack = [stmt]
        while stack:
            node = stack.pop()
            if isinstance(node, (L.Load, L.Store)) and node.buffer is buffer:
                return True
            stack.extend(L.children(node))
        return False

    def emit(self, line: str):
        self.lines.append("    " * self.indent + line)

    # ---- statements
    def stmt(self, s):
        handler = self.stmt_table.get(type(s))
        if handler is None:
            raise CompileError(f"{self.where()}: the OpenCL backend cannot compile statement "
                               f"{type(s).__name__}")
        handler(s)

    def _seq(self, s):
        for stmt in s.stmts:
            self.stmt(stmt)

    def _loop_interval(self, s):
        """The interval of the loop ``s``'s variable, or None (see :class:`_Ranges`)."""
        if s.var.dtype != "int64" or not isinstance(s.extent, L.IntImm):
            return None
        begin = self.ranges.of(s.begin)
        if begin is None:
            return None
        interval = (begin[0], begin[1] + max(int(s.extent.value), 1) - 1)
        return interval if interval[1] < _INT32_MAX else None

    def _index_text(self, e) -> str:
        """``e`` written in ``int`` where its interval allows (see the module)."""
        if self.index_mode or self.ranges.of(e) is None:
            return self.expr(e)
        self.index_mode = True
        try:
            return self.expr(e)
        finally:
            self.index_mode = False

    def _for(self, s):
        var = self.ident(s.var)
        interval = self._loop_interval(s)
        self.ranges.bind(s.var, interval)
        t = "int" if interval is not None else self.ctype(s.var.dtype)
        begin = self._index_text(s.begin)
        if s.kind in L.THREAD_TAGS:
            axis = "xyz".index(s.kind[-1])
            thread = s.kind.startswith("threadIdx")
            full = (self.items if thread else self.groups)[axis]
            extent = int(s.extent.value)
            if s.kind in self.bound:
                outer = self.bound_vars[self.bound.index(s.kind)]
                if not thread or _mentions_var(s.body, outer):
                    raise CompileError(f"{self.where()}: the loop {s.var.name} is bound to "
                                       f"{s.kind} inside another loop bound to it, "
                                       f"{outer.name}, and reads {outer.name} or runs once "
                                       "per work group")
            call = "get_local_id" if thread else "get_group_id"
            offset = "" if begin in ("0L", "0") else f"{begin} + "
            self.emit("{")
            self.indent += 1
            self.emit(f"const {t} {var} = {offset}({t}){call}({axis});")
            guard = extent < full
            if guard:
                self.emit(f"if ({call}({axis}) < {extent}) {{")
                self.indent += 1
            self.bound.append(s.kind)
            self.bound_vars.append(s.var)
            self.thread_depth += thread
            self.divergent += guard
            self.stmt(s.body)
            self.divergent -= guard
            self.thread_depth -= thread
            self.bound_vars.pop()
            self.bound.pop()
            if guard:
                self.indent -= 1
                self.emit("}")
            self.indent -= 1
            self.emit("}")
            return
        if s.kind == "vectorized" and self._vector_loop(s):
            return
        if (s.kind == "unrolled" and isinstance(s.begin, L.IntImm)
                and isinstance(s.extent, L.IntImm) and s.extent.value <= UNROLL_LIMIT):
            # each iteration written out with its constant folded in: the select chains of
            # Winograd's transforms over the unrolled tile axes become one sum each here, not
            # in the device compiler after it has copied the whole chain per iteration
            for value in range(s.begin.value, s.begin.value + s.extent.value):
                body = simplify_stmt(L.substitute(s.body, {s.var: L.IntImm(value, s.var.dtype)}))
                self.emit("{")
                self.indent += 1
                self.stmt(body)
                self.indent -= 1
                self.emit("}")
            return
        if s.kind == "unrolled":
            self.emit("#pragma unroll")
        end = self._index_text(s.begin + s.extent) if not isinstance(s.begin, L.IntImm) or \
            s.begin.value else self._index_text(s.extent)
        self.emit(f"for ({t} {var} = {begin}; {var} < {end}; ++{var}) {{")
        self.indent += 1
        self.stmt(s.body)
        self.indent -= 1
        self.emit("}")

    # ---- vector types
    def _vector_loop(self, s) -> bool:
        """Write the ``vectorized`` loop ``s`` as one vector store, or give False (it is then a
        plain loop): see the module for when it is."""
        if not (isinstance(s.begin, L.IntImm) and s.begin.value == 0
                and isinstance(s.extent, L.IntImm) and int(s.extent.value) in VECTOR_LANES):
            return False
        store = s.body
        if type(store) is not L.Store or store.buffer.dtype not in VECTOR_DTYPES \
                or self._only_once(store.buffer) is not None:
            return False
        vec = _Lanes(s.var, int(s.extent.value))
        if vec.flat_coefficient(store.buffer, store.indices) != 1:
            return False
        t = f"{self.ctype(store.buffer.dtype)}{vec.lanes}"
        value = self._vector_accumulate(store, vec, t)
        if value is None:
            value = self._broadcast(self._vector_value(store.value, vec), t)
        pointer = self._vector_pointer(store.buffer, store.indices, vec, t, const=False)
        if pointer.startswith("*"):
            self.emit(f"{pointer} = {value};")
        else:
            self.emit(f"vstore{vec.lanes}({value}, 0, {pointer});")
        return True

    def _vector_pointer(self, buffer, indices, vec, t: str, const: bool) -> str:
        """``*((__global float4*)(X + base))`` where the first lane's offset is a multiple of the
        lanes (an aligned access), else ``X + (base)`` for ``vloadN``/``vstoreN``."""
        flat = simplify(vec.flat_base(buffer, indices))
        pointer = f"{self.ident(buffer)} + {self._index_text(flat)}"
        if vec.lanes != 3 and _divisible(flat, vec.lanes):
            space = "__global " if buffer in self.global_set else \
                "__local " if buffer.scope == "shared" else ""
            return f"*(({space}{'const ' if const else ''}{t}*)({pointer}))"
        return f"({pointer})"

    @staticmethod
    def _broadcast(value, t: str) -> str:
        text, is_vector = value
        return text if is_vector else f"(({t})({text}))"

    def _vector_accumulate(self, store, vec, t: str):
        """A reduction's step (see :meth:`_accumulate`) on vectors, as ``fma``; else None."""
        e = store.value
        if not (isinstance(e, L.Binary) and e.op == "+"):
            return None
        for acc, product in ((e.a, e.b), (e.b, e.a)):
            if (isinstance(acc, L.Load) and acc.buffer is store.buffer
                    and isinstance(product, L.Binary) and product.op == "*"
                    and product.dtype == e.dtype
                    and self.offset(acc.buffer, acc.indices)
                    == self.offset(store.buffer, store.indices)):
                a, b, c = (self._broadcast(self._vector_value(x, vec), t)
                           for x in (product.a, product.b, acc))
                return f"fma({a}, {b}, {c})"
        return None

    def _vector_value(self, e, vec):
        """``(text, is_vector)`` of the float expression ``e`` over the lanes: a scalar where it
        does not depend on the lane, a vector load where its offset moves by one element per
        lane, vector arithmetic and built-ins on those, and otherwise a vector built lane by
        lane (``(float4)(e0, e1, e2, e3)``, each lane's expression simplified)."""
        if not vec.mentions(e):
            return self.expr(e), False
        t = f"{self.ctype(e.dtype)}{vec.lanes}"
        cls = type(e)
        if e.dtype in VECTOR_DTYPES:
            if cls is L.Load:
                k = vec.flat_coefficient(e.buffer, e.indices)
                if k == 0:
                    base = [vec.at(i, 0) for i in e.indices]
                    return f"{self.ident(e.buffer)}[{self.offset(e.buffer, base)}]", False
                if k == 1:
                    pointer = self._vector_pointer(e.buffer, e.indices, vec, t, const=True)
                    return (pointer if pointer.startswith("*")
                            else f"vload{vec.lanes}(0, {pointer})"), True
            elif cls is L.Binary and e.a.dtype == e.dtype and e.op in ("+", "-", "*", "/",
                                                                         "min", "max"):
                a, b = self._vector_value(e.a, vec), self._vector_value(e.b, vec)
                if e.op in ("min", "max"):
                    name = self.helpers.float_min_max_vector(e.op, e.dtype, vec.lanes)
                    return f"{name}({self._broadcast(a, t)}, {self._broadcast(b, t)})", True
                return f"({a[0]} {e.op} {b[0]})", a[1] or b[1]
            elif cls is L.Unary and e.op == "-":
                a = self._vector_value(e.a, vec)
                return f"(-{a[0]})", a[1]
            elif cls is L.Select and not vec.mentions(e.cond):
                yes = self._broadcast(self._vector_value(e.true_value, vec), t)
                no = self._broadcast(self._vector_value(e.false_value, vec), t)
                return f"({self.expr(e.cond)} ? {yes} : {no})", True
            elif cls is L.Cast and e.value.dtype in VECTOR_DTYPES:
                source = f"{self.ctype(e.value.dtype)}{vec.lanes}"
                value = self._broadcast(self._vector_value(e.value, vec), source)
                return f"convert_{t}({value})", True
            elif cls is L.Call and e.name in self._CALLS and all(a.dtype == e.dtype
                                                                  for a in e.args):
                args = [self._broadcast(self._vector_value(a, vec), t) for a in e.args]
                return self._CALLS[e.name].format(*args, t=t), True
        lanes = ", ".join(self.expr(vec.at(e, lane)) for lane in range(vec.lanes))
        return f"(({t})({lanes}))", True

    def _only_once(self, buffer) -> str | None:
        """For a store that every work item would make (see the module): the condition that
        picks the first work item along the axes bound outside it, else None."""
        if buffer.scope == "local" or (buffer not in self.global_set
                                       and buffer.scope != "shared"):
            return None
        missing = [tag for tag in self.extents if tag not in self.bound]
        if not missing:
            return None
        calls = [f"{'get_local_id' if tag.startswith('threadIdx') else 'get_group_id'}"
                 f"({'xyz'.index(tag[-1])}) == 0" for tag in sorted(missing)]
        return " && ".join(calls)

    def _store(self, s):
        once = self._only_once(s.buffer)
        value = self._accumulate(s)
        if value is None:
            value = self.expr(s.value)
        if s.buffer.dtype == "bool":
            value = f"(uchar)({value})"
        line = f"{self.ident(s.buffer)}[{self.offset(s.buffer, s.indices)}] = {value};"
        if once is None:
            self.emit(line)
        else:
            self.emit(f"if ({once}) {line}")

    def _accumulate(self, s):
        """A reduction's step ``acc[i] = acc[i] + a * b`` (float, the same element on both
        sides) as ``fma(a, b, acc[i])``: one rounding instead of two, and one instruction
        where the device has fused multiply-adds (the rest of the kernel keeps its roundings,
        ``FP_CONTRACT OFF``). Gives None for any other store."""
        e = s.value
        if not (isinstance(e, L.Binary) and e.op == "+" and e.dtype in ("float32", "float64")):
            return None
        for acc, product in ((e.a, e.b), (e.b, e.a)):
            if (isinstance(acc, L.Load) and acc.buffer is s.buffer
                    and isinstance(product, L.Binary) and product.op == "*"
                    and product.dtype == e.dtype
                    and self.offset(acc.buffer, acc.indices) == self.offset(s.buffer, s.indices)):
                return (f"fma({self.expr(product.a)}, {self.expr(product.b)}, "
                        f"{self.expr(acc)})")
        return None

    def _let(self, s):
        self.emit("{")
        self.indent += 1
        self.emit(f"const {self.ctype(s.var.dtype)} {self.ident(s.var)} = {self.expr(s.value)};")
        self.stmt(s.body)
        self.indent -= 1
        self.emit("}")

    def _if(self, s):
        self.emit(f"if ({self.expr(s.cond)}) {{")
        self.indent += 1
        self.divergent += 1
        self.stmt(s.then_case)
        self.indent -= 1
        if s.else_case is not None:
            self.emit("} else {")
            self.indent += 1
            self.stmt(s.else_case)
            self.indent -= 1
        self.divergent -= 1
        self.emit("}")

    def _allocate(self, s):
        buf = s.buffer
        name = self.ident(buf)
        size = max(1, buf.size)
        if buf.scope == "shared":
            if self.thread_depth and self.divergent:
                raise CompileError(f"{self.where()}: the shared buffer {buf.name} is allocated "
                                   "inside a guarded loop bound to threads; allocate it outside "
                                   "the guard")
            self.local_decls.append(f"    __local {self.memory_type(buf.dtype)} {name}[{size}];")
            self.stmt(s.body)
            return
        if self.thread_depth == 0 and any(t.startswith("threadIdx") for t in self.extents) \
                and _bound_extents(s.body, self.func.name):
            raise CompileError(f"{self.where()}: {buf.name} is allocated outside the loops "
                               "bound to threads but written inside them: each work item would "
                               "have its own copy; give it the shared scope")
        self.emit("{")
        self.indent += 1
        self.emit(f"{self.memory_type(buf.dtype)} {name}[{size}];")
        self.stmt(s.body)
        self.indent -= 1
        self.emit("}")

    def _barrier(self, s):
        if self.thread_depth and self.divergent:
            raise CompileError(f"{self.where()}: a barrier inside a guarded loop bound to "
                               "threads (work items that skip it would wait forever)")
        self.emit("barrier(CLK_LOCAL_MEM_FENCE);")

    # ---- expressions
    def expr(self, e) -> str:
        if not self.index_mode and isinstance(e, (L.Binary, L.Select, L.Unary)):
            if e.dtype == "int64" and self.ranges.of(e) is not None:
                return f"((long){self._index_text(e)})"
            if e.dtype == "bool" and self.ranges.predicate(e):
                self.index_mode = True
                try:
                    return self.expr(e)
                finally:
                    self.index_mode = False
        handler = self.expr_table.get(type(e))
        if handler is None:  # a subclass (an IterVar is a Var)
            handler = next((self.expr_table[t] for t in type(e).__mro__
                            if t in self.expr_table), None)
        if handler is None:
            raise CompileError(f"{self.where()}: the OpenCL backend cannot compile "
                               f"{type(e).__name__} ({L.to_text(e)})")
        return handler(e)

    def _int(self, e):
        self.ctype(e.dtype)
        if self.index_mode and e.dtype == "int64":
            return _int_literal(int(e.value), "int32")
        return _int_literal(int(e.value), e.dtype)

    def _float(self, e):
        self.ctype(e.dtype)
        return _float_literal(e.value, e.dtype)

    def _var(self, e):
        if e not in self.names:
            raise CompileError(f"{self.where()}: variable {e.name} is used where it is not bound")
        return self.names[e]

    def _narrow_offset(self, buffer, indices):
        """The flat offset of ``buffer[indices]`` in ``int``, or None where its bound (or an
        index's interval) is unknown or leaves int32."""
        intervals = [self.ranges.of(i) for i in indices]
        if not indices or any(r is None for r in intervals):
            return None
        if len(indices) == 1:
            return self._index_text(indices[0])
        shape = list(buffer.shape)
        if len(shape) != len(indices) or not all(isinstance(d, (int, np.integer)) for d in shape):
            return None
        bound, stride = 0, 1
        for (lo, hi), extent in reversed(list(zip(intervals, shape))):
            bound += max(abs(lo), abs(hi)) * stride
            stride *= int(extent)
        if bound > _INT32_MAX:
            return None
        text = None
        for index, extent in zip(indices, shape):
            part = self._index_text(index)
            text = part if text is None else f"({text} * {int(extent)} + {part})"
        return text

    def offset(self, buffer, indices) -> str:
        if len(indices) > 1 and any(type(i) is L.Binary and i.op in ("//", "%") for i in indices):
            flat = self._flat_offset(buffer, indices)
            if flat is not None:
                return self._index_text(flat) if flat.dtype == "int64" else self.expr(flat)
        narrow = self._narrow_offset(buffer, indices)
        if narrow is not None:
            return narrow
        if len(indices) == 1:
            return self.expr(indices[0]) if indices[0].dtype == "int64" else \
                f"(long)({self.expr(indices[0])})"
        if not indices:
            return "0"
        text = None
        for index, extent in zip(indices, buffer.shape):
            part = self.expr(index if index.dtype == "int64" else L.cast("int64", index))
            text = part if text is None else f"({text} * {extent}L + {part})"
        return text

    def _flat_offset(self, buffer, indices):
        """The flat offset of ``buffer[indices]`` simplified, where the indices split a fused
        index with ``//`` and ``%`` (they often flatten back to it: see
        :meth:`relaybench.te.simplify._Simplifier.merge_div_mod`); None for a shape that is not
        constant or an index that is not int64."""
        key = (id(buffer), tuple(id(i) for i in indices))
        if key in self.flat_memo:
            return self.flat_memo[key][0]
        shape = list(buffer.shape)
        flat = None
        if len(shape) == len(indices) and all(isinstance(d, (int, np.integer)) for d in shape) \
                and all(i.dtype == "int64" for i in indices):
            for index, extent in zip(indices, shape):
                flat = index if flat is None else flat * int(extent) + index
            flat = simplify(flat)
        self.flat_memo[key] = (flat, indices)   # the indices keep their ids alive
        return flat

    def _load(self, e):
        if e.buffer not in self.names and e.buffer not in self.global_set:
            raise CompileError(f"{self.where()}: load of {e.buffer.name}, which is neither a "
                               "parameter nor allocated here")
        text = f"{self.ident(e.buffer)}[{self.offset(e.buffer, e.indices)}]"
        return f"({text} != 0)" if e.dtype == "bool" else text

    def _binary(self, e):
        op, dtype = e.op, e.a.dtype
        a, b = self.expr(e.a), self.expr(e.b)
        if op == "and":
            return f"({a} && {b})"
        if op == "or":
            return f"({a} || {b})"
        if op in L.COMPARE_OPS:
            return f"({a} {op} {b})"
        t = self.ctype(e.dtype)
        if dtype.startswith("float"):
            if op in ("+", "-", "*", "/"):
                return f"({a} {op} {b})"
            if op in ("min", "max"):
                return f"{self.helpers.float_min_max(op, dtype)}({a}, {b})"
        elif dtype == "bool":
            if op == "min":
                return f"({a} && {b})"
            if op == "max":
                return f"({a} || {b})"
        elif self.index_mode and dtype == "int64":   # intervals known to fit int32
            if op in ("+", "-", "*"):
                return f"({a} {op} {b})"
            if op in ("min", "max"):
                return f"{op}({a}, {b})"
            if op in ("//", "%"):
                if self.ranges.non_negative_by_constant(e):
                    return f"({a} {'/' if op == '//' else '%'} {b})"
                return f"((int){self.helpers.floor_div_mod(op, dtype)}({a}, {b}))"
        else:
            if op in ("+", "-", "*"):
                plain = dtype in ("uint32", "uint64") or (
                    dtype == "int64" and not _has_load(e, self.index_memo))
                if plain:
                    return f"({a} {op} {b})"
                u = "uint" if _BITS[dtype] < 32 else _UNSIGNED[dtype]
                return f"(({t})(({u}){a} {op} ({u}){b}))"
            if op in ("min", "max"):   # both sides long: a loop variable may be an int
                return f"{op}(({t})({a}), ({t})({b}))"
            if op in ("//", "%"):
                return f"{self.helpers.floor_div_mod(op, dtype)}({a}, {b})"
            if op in L.SHIFT_OPS:
                return f"{self.helpers.shift(op, dtype)}({a}, {b})"
        raise CompileError(f"{self.where()}: operator {op!r} on {dtype} in {L.to_text(e)}")

    def _unary(self, e):
        a = self.expr(e.a)
        if e.op == "not":
            return f"(!{a})"
        if e.dtype.startswith("float"):
            return f"(-{a})"
        t = self.ctype(e.dtype)
        u = "uint" if _BITS[e.dtype] < 32 else _UNSIGNED[e.dtype]
        return f"(({t})(({u})0 - ({u}){a}))"

    def _select(self, e):
        text = f"({self.expr(e.cond)} ? {self.expr(e.true_value)} : {self.expr(e.false_value)})"
        if _BITS.get(e.dtype, 32) < 32:  # C promotes 8- and 16-bit operands of ?: to int
            return f"(({self.ctype(e.dtype)}){text})"
        return text

    def _cast(self, e):
        source, target = e.value.dtype, e.dtype
        value = self.expr(e.value)
        if source == target:
            return value
        t = self.ctype(target)
        self.ctype(source)
        if target == "bool":
            return f"({value} != 0)"
        if source.startswith("float") and target in _BITS:
            if source == "float16":
                value, source = f"((float){value})", "float32"
            if target == "uint64":
                return f"{self.helpers.float_to_uint64(source)}({value})"
            wide = 64 if target in ("int64", "uint32") else 32
            converted = f"{self.helpers.float_to_int(wide, source)}({value})"
            return converted if target in ("int32", "int64") else f"(({t}){converted})"
        return f"(({t})({value}))"

    _CALLS = {
        "exp": "exp({0})", "log": "log({0})", "sqrt": "sqrt({0})", "tanh": "tanh({0})",
        "erf": "erf({0})", "floor": "floor({0})", "ceil": "ceil({0})", "round": "rint({0})",
        "sin": "sin({0})", "cos": "cos({0})", "pow": "pow({0}, {1})", "log2": "log2({0})",
        "exp2": "exp2({0})", "fmod": "fmod({0}, {1})", "abs": "fabs({0})",
        "rsqrt": "(({t})1 / sqrt({0}))", "sigmoid": "(({t})1 / (({t})1 + exp(-({0}))))",
        **{name: name + "({0})" for name in ("tan", "asin", "acos", "atan", "sinh", "cosh",
                                             "asinh", "acosh", "atanh")},
    }

    def _call(self, e):
        args = [self.expr(a) for a in e.args]
        t = self.ctype(e.dtype)
        if e.name == "abs" and not e.dtype.startswith("float"):
            return f"(({t})abs({args[0]}))"
        pattern = self._CALLS.get(e.name)
        if pattern is None:
            raise CompileError(f"{self.where()}: no OpenCL code for intrinsic {e.name}")
        return pattern.format(*args, t=t)
