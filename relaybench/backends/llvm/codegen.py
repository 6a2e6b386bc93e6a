"""Code generation from the loop IR (:mod:`relaybench.te.loop_ir`) to LLVM with llvmlite's
IRBuilder.

``build_kernel(func)`` turns a :class:`~relaybench.te.loop_ir.PrimFunc` into a
:class:`CompiledKernel`: one LLVM function whose arguments are the buffers' data pointers
(``noalias``, aligned to the element size), compiled by :func:`.jit.compile_module` with the
printed loop IR as the cache key, and called through :class:`.runtime.Kernel`, which checks every
array's name, shape and dtype before machine code runs.

How each construct is lowered:

* Index arithmetic is ``i64``; ``//`` and ``%`` are floor division and floor modulo (the quotient
  of a signed division is rounded toward minus infinity, the remainder takes the divisor's sign).
  As in numpy, ``x // 0`` and ``x % 0`` are 0 and ``INT_MIN // -1`` wraps to ``INT_MIN``: the
  divisor reaching LLVM's ``sdiv``/``srem`` is never 0 or -1 (both would be undefined, and trap on
  x86), so a division the program never chose (the other side of a ``select``) is harmless too.
* ``select``, ``and`` and ``or`` are branch-free: both sides are computed and an LLVM ``select``
  picks (``a and b`` is ``select(a, b, false)``, so a poison ``b`` is dropped where ``a`` is
  false). The side not chosen may read out of bounds (padding does), so a load
  evaluated there whose indices are not proven in bounds (interval arithmetic over the loop
  variables' ranges; ``min``/``max`` clamps prove most padding reads safe) reads at its row-major
  offset clamped to the buffer, frozen first so that a poison index cannot escape the clamp; the
  chosen side's offsets are in bounds already, so clamping does not change what it reads. No
  control flow is left in loop bodies for LLVM to if-convert: branches and phis there fed LLVM
  22's loop vectorizer (a predicated address phi taken from the first lane only) and its SLP and
  AVX-512 instruction selection (``<4 x i1>`` masks) into wrong code for dilated pooling and
  convolution with padding and for truncated ``mod``.
* Loops: ``serial`` is a plain loop; ``unrolled`` is emitted ``extent`` times when the extent is a
  constant of at most 16, else marked with ``llvm.loop.unroll.enable``; ``parallel`` as the
  outermost statement makes the function take ``int64 begin, int64 end`` and run only that range
  (the runtime's convention), and the kernel is called on every core through the runtime's
  thread pools (``RB_NUM_THREADS``); a companion ``<name>_entry(i64 *args, i64 begin, i64 end)``
  takes the pointers from an array, the one shape the spinning pool calls. Parallel loops further
  in run serially.
* ``vectorized`` loops with a constant begin and a constant extent from 2 to 64 become vector
  code, one lane per iteration, with no loop left: an expression that depends on the loop
  variable is an LLVM ``<extent x T>`` value, any other a scalar computed once and broadcast
  where it meets a vector. A load or store whose element offset is ``base + var`` is one
  contiguous vector access, ``base`` alone a scalar load (broadcast), anything else one element
  per lane (gather, scatter in lane order). Math intrinsics use their vector forms; float32
  ``exp``, ``tanh`` and ``sigmoid`` are computed in line on the vector (range reduction and a
  polynomial, within 2.5 ulp: :meth:`_vector_exp`), the C library's other functions
  (``erff``, ``tanf``, ...) are called per lane, and ``a * b + c`` (or ``- c``, ``c - a * b``)
  becomes ``llvm.fmuladd``, a fused multiply-add on x86, except where the value feeds a step
  (``floor``, ``ceil``, ``round``, ``fmod``, a float comparison or a cast to an integer), whose
  result one skipped rounding could move by a whole step: there both roundings are kept, as the
  evaluator and the references do (resize coordinates). The iterations are taken to be
  independent, which the loop must stay true to; the loop stays a scalar loop marked with
  ``llvm.loop.vectorize.enable`` (512-bit vectors preferred on AVX-512 hosts) when its body has
  anything but stores, lets, sequences and ``if`` statements whose condition is the same in
  every lane, or when lanes could write one element or read another lane's (a buffer stored at
  two places, read at another than stored, or stored at an offset that does not move with the
  loop variable). A load under a lane-dependent ``select`` that is not proven in bounds is a
  gather with each lane's offset clamped (see ``select`` above).
* Float ``min``/``max`` are numpy's ``minimum``/``maximum``: a NaN operand is the result, so
  reductions and max pooling propagate NaN (a compare and a blend more than ``maxps``).
* Shifts follow numpy: ``>>`` is arithmetic on signed and logical on unsigned integers, and an
  amount outside ``[0, bits)`` gives 0 (or -1 for a negative value shifted right).
* ``allocate``: temporaries of at most 64 KiB live on the stack (one ``alloca`` in the entry
  block, so also per thread); larger ones are taken with ``malloc`` and given back with ``free``
  when their statement ends. Both are resolved by the JIT from the running process.
* Math intrinsics: LLVM's (``llvm.exp``, ``llvm.log``, ``llvm.sqrt``, ``llvm.fabs``,
  ``llvm.floor``, ``llvm.ceil``, ``llvm.roundeven`` for numpy's half-to-even ``round``,
  ``llvm.pow``, ...); ``tanh`` and ``erf`` call the C library (``tanhf``/``tanh``, ``erff``/``erf``)
  for full accuracy, except float32 vectors of ``exp``, ``tanh`` and ``sigmoid`` (above: LLVM
  would call ``expf`` once per lane); ``fmod`` is LLVM's ``frem`` (C's ``fmod``, exact);
  ``sigmoid`` is ``1 / (1 + exp(-x))`` and ``rsqrt`` is ``1 / sqrt(x)``.
* ``bool`` values are ``i1`` in registers and one byte in memory, as in numpy.
* ``dot_sum`` (:class:`~relaybench.te.loop_ir.DotSum`, left by a schedule's ``tensorize``) of
  four int8/uint8 products into int32, in a vector loop of 4, 8 or 16 lanes, each operand a
  widened load whose four steps are consecutive bytes and whose lanes are either the same
  (broadcast), the next four bytes (packed) or the next byte (blocks of the four steps, one
  shuffle), is one instruction per vector on the path ``RB_X86_INT8`` names or the host's
  features allow (:func:`.jit.int8_path`, part of every cache key): ``vpdpbusd`` (``u8 x s8``;
  ``s8 x s8`` as ``(a + 128) x b - 128 x b``, both exact, the correction shared by every
  accumulator reading the same ``b``; ``acc + dot_sum`` accumulates in the instruction), or
  both operands widened to int16 and multiplied in pairs by ``vpmaddwd`` (512-bit on
  AVX-512BW, 256-bit on AVX2) and the pairs added: no ``vpmaddubsw``, whose int16 pair sums
  saturate (``255 * 127 * 2`` does not fit). Anything else, and the ``generic`` path, is the
  sum unrolled into widening multiplies and adds.

* Shared work is emitted once: an expression node whose variables are bound to the same values
  and whose buffers were not stored to since, and a pure instruction with the same operands,
  is taken from a scoped table instead of emitted again (:class:`_NumberingBuilder`; a loop
  body and each side of an ``if`` are scopes, so a reused value always dominates its use). The
  loop IR of an unrolled tile (a Winograd transform) repeats its loads and their index
  arithmetic in every output; numbered, the LLVM module is about 15 times smaller. In unrolled
  code a guarded store's value whose loads are proven in bounds is computed before the branch,
  so that the guarded outputs of a partial tile share their terms too. A module whose float
  arithmetic and buffer stores are all vector code is compiled without LLVM's SLP vectorizer
  nor its loop unroller (:data:`.compile_worker.NO_SLP`): the one has nothing to pack there,
  the other only grows code the schedule unrolled already.

Buffers are assumed not to overlap (``noalias``): passing one array as two arguments is not
supported.

A body made of top-level ``allocate`` statements around a sequence of statements, one of them
a ``parallel`` loop, is compiled in phases: each parallel loop, and each run of statements
between them, becomes its own function (``kernel_0``, ``kernel_1``, ...) taking the parameters
then the top-level temporaries, which the runtime allocates once per kernel (64-byte aligned)
and passes in; a :class:`.runtime.PhasedKernel` runs the phases in order, every parallel one on
every core. Temporaries allocated further in are per call (and per thread) as above.

Kernels compiled together (:func:`compile_ahead`, a build's kernels) that have a large phase in
common, the same loops over the same buffers, become one module (:func:`share_phases`): the
common phase is one internal function taking only the buffers it uses, each kernel's phase a
small function passing it the kernel's own; the manifest of each kernel names the shared
module and its own functions (``k0_kernel_0``, ``k1_kernel_0``, ...). ResNet-18's Winograd
layers come in pairs that differ only in the epilogue (with and without the residual ``add``):
their padding, input transform and products are compiled once, not twice.

Example (needs llvmlite)::

    >>> import numpy as np
    >>> from relaybench import te
    >>> X = te.placeholder((4,), name="X")
    >>> Y = te.compute((4,), lambda i: X[i] * 2.0, name="Y")
    >>> kernel = build_kernel(te.lower([Y], [X], name="double"))
    >>> x = np.arange(4, dtype="float32"); y = np.empty(4, "float32")
    >>> kernel(x, y)
    >>> y.tolist()
    [0.0, 2.0, 4.0, 6.0]
"""

from __future__ import annotations

import ctypes
import functools
import math
from collections.abc import Sequence

import numpy as np

from ...errors import CompileError
from ...te import loop_ir as L
from .compile_worker import NO_SLP
from .jit import compile_module, host_target, int8_path, prefer_vector_width
from .runtime import Kernel, PhasedKernel, Phase, TensorSpec

__all__ = ["build_kernel", "CompiledKernel", "KernelPlan", "SharedPhases", "compile_ahead",
           "kernel_from_manifest", "may_share", "share_phases", "SHARE_MIN_TEXT",
           "SHARE_MAX_KERNELS", "STACK_LIMIT_BYTES",
           "UNROLL_LIMIT", "VECTOR_LANES_LIMIT"]

STACK_LIMIT_BYTES = 64 * 1024
"""Temporaries up to this size live on the stack; larger ones are malloc'd."""

UNROLL_LIMIT = 16
"""An ``unrolled`` loop with a constant extent up to this is emitted body by body."""

VECTOR_LANES_LIMIT = 64
"""A ``vectorized`` loop with a constant extent from 2 up to this becomes vector code."""

NUMBERING = True
"""Emit each distinct expression and pure instruction once (:class:`_NumberingBuilder`); False
emits every node of the expression trees as it comes (the same machine code after LLVM's own
common-subexpression elimination, slower to generate and to compile: for comparing the two)."""

def _source_digest() -> str:
    """A digest of the code generator's own source, part of every cache key, so that a changed
    code generator never reads kernels that an earlier one compiled."""
    import hashlib
    from pathlib import Path
    here = Path(__file__).parent
    digest = hashlib.sha256()
    for name in ("codegen.py", "jit.py", "runtime.py", "compile_worker.py"):
        try:
            digest.update((here / name).read_bytes())
        except OSError:
            digest.update(name.encode())
    return digest.hexdigest()[:16]


_CODEGEN_VERSION = f"codegen-3-{_source_digest()}"


_IR_MODULE = None


def _ir():
    global _IR_MODULE
    if _IR_MODULE is not None:
        return _IR_MODULE
    try:
        from llvmlite import ir
    except ImportError:
        raise ImportError("the LLVM backend needs llvmlite: install the extra with "
                          "`pip install 'relaybench[llvm]'`") from None
    _IR_MODULE = ir
    return ir


def _is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def _is_unsigned(dtype: str) -> bool:
    return dtype.startswith("uint") or dtype == "bool"


def _value_type(dtype: str):
    """The register type of ``dtype``."""
    ir = _ir()
    if dtype == "bool":
        return ir.IntType(1)
    if dtype == "float16":
        return ir.HalfType()
    if dtype == "float32":
        return ir.FloatType()
    if dtype == "float64":
        return ir.DoubleType()
    if dtype.startswith("int") or dtype.startswith("uint"):
        return ir.IntType(np.dtype(dtype).itemsize * 8)
    raise CompileError(f"the LLVM backend has no type for dtype {dtype!r}")


def _memory_type(dtype: str):
    """The in-memory type of ``dtype`` (bool is one byte)."""
    return _ir().IntType(8) if dtype == "bool" else _value_type(dtype)


@functools.lru_cache(maxsize=None)
def _integer_bounds(dtype: str) -> tuple[int, int] | None:
    """The smallest and largest value of an integer ``dtype`` (``bool`` is 0..1), else None."""
    if dtype == "bool":
        return 0, 1
    if dtype.startswith("int") or dtype.startswith("uint"):
        info = np.iinfo(dtype)
        return int(info.min), int(info.max)
    return None


def _floor_div_range(a, b):
    """The range of ``x // y`` for ``x`` in ``a`` and ``y`` in ``b`` (``b`` not holding 0)."""
    quotients = [x // y for x in a for y in b]
    return min(quotients), max(quotients)


def _floor_mod_range(a, b):
    """The range of ``x % y`` (floor modulo) for ``x`` in ``a``, ``y`` in ``b`` (not holding 0)."""
    if b[0] == b[1] and a[0] // b[0] == a[1] // b[0]:  # one period: the map is monotonic
        return a[0] % b[0], a[1] % b[0]
    if b[0] > 0:
        return 0, b[1] - 1
    return b[0] + 1, 0


def value_range(expr, ranges: dict) -> tuple[int, int] | None:
    """``(lo, hi)`` holding every value the integer expression ``expr`` can take, or None when
    that is not known. ``ranges`` maps variables to their ranges (a loop variable: its
    iterations). Arithmetic is taken exactly: a node whose range leaves its dtype (it could
    wrap) has no known range, nor has a load, a float or a variable not in ``ranges``.

    >>> i = L.Var("i")
    >>> value_range(L.min_expr(L.max_expr(i * 2 - 1, 0), 5), {i: (0, 3)})
    (0, 5)
    """
    found: dict = {}
    stack = [(expr, False)]
    while stack:
        node, expanded = stack.pop()
        if node in found:
            continue
        children = L.children(node)
        if not expanded and children and not isinstance(node, L.Load):
            stack.append((node, True))
            stack.extend((c, False) for c in children if c not in found)
            continue
        found[node] = _node_range(node, found, ranges)
    return found[expr]


def _node_range(node, found: dict, ranges: dict):
    bounds = _integer_bounds(node.dtype)
    if bounds is None:
        return None
    result = None
    if isinstance(node, L.IntImm):
        result = (int(node.value), int(node.value))
    elif isinstance(node, L.Var):
        result = ranges.get(node)
    elif isinstance(node, L.Cast):
        result = found[node.value] if _integer_bounds(node.value.dtype) else None
    elif isinstance(node, L.Select):
        t, f = found[node.true_value], found[node.false_value]
        result = None if t is None or f is None else (min(t[0], f[0]), max(t[1], f[1]))
    elif isinstance(node, L.Unary) and node.op == "-":
        a = found[node.a]
        result = None if a is None else (-a[1], -a[0])
    elif isinstance(node, L.Binary):
        if node.op in L.COMPARE_OPS or node.op in L.LOGICAL_OPS:
            return 0, 1
        a, b = found[node.a], found[node.b]
        if a is None or b is None:
            return bounds if node.op in ("and", "or") else None
        if node.op == "+":
            result = (a[0] + b[0], a[1] + b[1])
        elif node.op == "-":
            result = (a[0] - b[1], a[1] - b[0])
        elif node.op == "*":
            corners = [x * y for x in a for y in b]
            result = (min(corners), max(corners))
        elif node.op == "min":
            result = (min(a[0], b[0]), min(a[1], b[1]))
        elif node.op == "max":
            result = (max(a[0], b[0]), max(a[1], b[1]))
        elif node.op in ("//", "%") and (b[0] > 0 or b[1] < 0):
            result = _floor_div_range(a, b) if node.op == "//" else _floor_mod_range(a, b)
    if result is None or result[0] < bounds[0] or result[1] > bounds[1]:
        return None
    return result


def _decided(cond, ranges: dict):
    """The outcome of ``a == b`` or ``a != b`` when both sides have a single value over
    ``ranges`` (an unrolled loop's variable against a constant), else None."""
    if not (isinstance(cond, L.Binary) and cond.op in ("==", "!=")):
        return None
    a, b = value_range(cond.a, ranges), value_range(cond.b, ranges)
    if a is None or b is None or a[0] != a[1] or b[0] != b[1]:
        return None
    return (a[0] == b[0]) == (cond.op == "==")


def _nodes(root):
    """Every node under ``root`` (itself included), each once: a subexpression shared by several
    parents is walked once."""
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(L.children(node))


def _stored_buffers(stmt) -> set:
    return {node.buffer for node in _nodes(stmt) if isinstance(node, L.Store)}


def _element_type(ty):
    """The element type of a vector type, or the type itself."""
    return ty.element if isinstance(ty, _ir().VectorType) else ty


def _lanes(value) -> int | None:
    """The number of lanes of a vector value, None for a scalar."""
    ty = value.type
    return ty.count if isinstance(ty, _ir().VectorType) else None


def _strides(buffer) -> list[int]:
    strides, step = [], 1
    for extent in reversed(buffer.shape):
        strides.append(step)
        step *= extent
    return strides[::-1]


def _constant_divisor(value) -> int | None:
    """The divisor's value when it is an LLVM constant (a splat in vector code), else None."""
    ir = _ir()
    if not isinstance(value, ir.Constant):
        return None
    constant = value.constant
    if isinstance(constant, (list, tuple)):
        values = {getattr(c, "constant", None) for c in constant}
        constant = values.pop() if len(values) == 1 else None
    return constant if isinstance(constant, int) else None


def _is_mul(e) -> bool:
    return isinstance(e, L.Binary) and e.op == "*" and _is_float(e.dtype)


_STEP_FUNCTIONS = frozenset({"floor", "ceil", "round", "fmod"})
"""Intrinsics whose result jumps where the argument crosses a point: one ulp more or less in the
argument can change the result by a whole step."""


def _exact_values(body) -> set:
    """The float expressions of ``body`` that are rounded as the loop IR writes them, never
    contracted into a fused multiply-add: everything a step takes as input (``floor``, ``ceil``,
    ``round``, ``fmod``, a float comparison, a cast of a float to an integer or bool), through
    the arithmetic and let variables it is computed from.

    A fused ``a * b - c`` skips one rounding, and where the value then picks an integer that ulp
    decides which: ``image.resize2d`` with ``round_prefer_floor`` maps output column 3 of 2 -> 7
    to ``ceil((3.5 * 0.2857143f) - 0.5 - 0.5)``, 0 when the product is rounded (the reference,
    the evaluator) and 1 when fused. A product in this set is not fused into the sum that reads
    it either (:meth:`_FunctionBuilder.fusible`). Values that only flow on continuously (a sum of
    products) are still contracted."""
    lets, roots, seen, stack = {}, [], set(), [body]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if isinstance(node, L.LetStmt):
            lets[node.var] = node.value
        elif isinstance(node, L.Call) and node.name in _STEP_FUNCTIONS:
            roots.extend(node.args)
        elif (isinstance(node, L.Cast) and _is_float(node.value.dtype)
                and not _is_float(node.dtype)):
            roots.append(node.value)
        elif (isinstance(node, L.Binary) and node.op in L.COMPARE_OPS
                and _is_float(node.a.dtype)):
            roots.extend((node.a, node.b))
        stack.extend(L.children(node))
    exact, stack = set(), roots
    while stack:
        node = stack.pop()
        if node in exact or not _is_float(node.dtype):
            continue
        exact.add(node)
        if isinstance(node, L.Var):
            if node in lets:
                stack.append(lets[node])
        elif not isinstance(node, L.Load):
            stack.extend(L.children(node))
    return exact


class _VectorLoop:
    """What the code generator knows about one ``vectorized`` loop emitted as vector code.

    ``lanes`` iterations of ``var`` run as one: an expression that depends on ``var`` (or on a
    let variable bound to such an expression) is a ``<lanes x T>`` value, any other is a scalar
    computed once. ``plan(loop)`` returns None when the loop must stay a scalar loop.
    """

    def __init__(self, loop):
        self.loop = loop
        self.var = loop.var
        self.begin = int(loop.begin.value)
        self.lanes = int(loop.extent.value)
        self.varying = {loop.var}
        self._memo: dict = {}

    @classmethod
    def probe(cls, var) -> "_VectorLoop":
        """An analysis of how expressions move with ``var`` alone (a step of a ``dot_sum``),
        for :meth:`coefficient` and :meth:`flat_coefficient`."""
        self = cls.__new__(cls)
        self.loop, self.var, self.begin, self.lanes = None, var, 0, 1
        self.varying = {var}
        self._memo = {}
        return self

    def depends(self, expr) -> bool:
        """Whether ``expr`` differs from lane to lane."""
        memo = self._memo
        if expr in memo:
            return memo[expr]
        stack = [(expr, False)]
        while stack:
            node, expanded = stack.pop()
            if node in memo:
                continue
            children = L.children(node)
            if not expanded and any(c not in memo for c in children):
                stack.append((node, True))
                stack.extend((c, False) for c in children if c not in memo)
                continue
            if isinstance(node, L.Var):
                memo[node] = node in self.varying
            else:
                memo[node] = any(memo[c] for c in children)
        return memo[expr]

    def coefficient(self, index) -> int | None:
        """``c`` when ``index`` is ``base + c * var`` with ``base`` the same in every lane, else
        None (the lanes' offsets then come from evaluating ``index`` as a vector)."""
        found: dict = {}
        stack = [(index, False)]
        while stack:
            node, expanded = stack.pop()
            if node in found:
                continue
            if not self.depends(node):
                found[node] = 0
                continue
            if node is self.var:
                found[node] = 1
                continue
            parts = ()
            if isinstance(node, L.Binary) and node.op in ("+", "-", "*"):
                parts = (node.a, node.b)
            elif (isinstance(node, L.Cast) and not _is_float(node.value.dtype)
                    and not _is_float(node.dtype) and node.dtype != "bool"
                    and np.dtype(node.dtype).itemsize >= np.dtype(node.value.dtype).itemsize):
                parts = (node.value,)
            if not parts:
                found[node] = None
                continue
            if not expanded:
                stack.append((node, True))
                stack.extend((p, False) for p in parts)
                continue
            coefs = [found[p] for p in parts]
            if any(c is None for c in coefs):
                found[node] = None
            elif isinstance(node, L.Cast):
                found[node] = coefs[0]
            elif node.op == "+":
                found[node] = coefs[0] + coefs[1]
            elif node.op == "-":
                found[node] = coefs[0] - coefs[1]
            elif coefs[0] == 0 and isinstance(node.a, L.IntImm):
                found[node] = int(node.a.value) * coefs[1]
            elif coefs[1] == 0 and isinstance(node.b, L.IntImm):
                found[node] = int(node.b.value) * coefs[0]
            else:
                found[node] = None
        return found[index]

    def flat_coefficient(self, buffer, indices) -> int | None:
        """The coefficient of ``var`` in the row-major element offset of ``buffer[indices]``."""
        coefs = [self.coefficient(i) for i in indices]
        if any(c is None for c in coefs):
            return None
        if len(indices) == 1 and len(buffer.shape) != 1:  # a flat index
            return coefs[0]
        return sum(c * stride for c, stride in zip(coefs, _strides(buffer)))

    @classmethod
    def plan(cls, loop) -> "_VectorLoop | None":
        if not (isinstance(loop.begin, L.IntImm) and isinstance(loop.extent, L.IntImm)
                and 2 <= loop.extent.value <= VECTOR_LANES_LIMIT):
            return None
        self = cls(loop)
        stores, exprs = [], []
        stack = [loop.body]
        while stack:  # statements in program order, so let variables are known before use
            node = stack.pop()
            if isinstance(node, L.SeqStmt):
                stack.extend(reversed(node.stmts))
            elif isinstance(node, L.Store):
                stores.append(node)
                exprs.extend(node.indices)
                exprs.append(node.value)
            elif isinstance(node, L.LetStmt):
                exprs.append(node.value)
                if self.depends(node.value):
                    self.varying.add(node.var)
                stack.append(node.body)
            elif isinstance(node, L.IfThenElse):
                if self.depends(node.cond):
                    return None
                exprs.append(node.cond)
                stack.extend(s for s in (node.else_case, node.then_case) if s is not None)
            else:  # nested loops, allocations
                return None
        written: dict = {}
        for store in stores:
            coef = self.flat_coefficient(store.buffer, store.indices)
            if not coef:  # lanes might write one place; keep the scalar order
                return None
            written.setdefault(store.buffer, set()).add(L.to_text(L.Load(store.buffer,
                                                                         store.indices)))
        if any(len(places) > 1 for places in written.values()):
            return None  # two stores to one buffer could overlap across lanes
        stack, seen = list(exprs), set()
        while stack:
            node = stack.pop()
            if id(node) in seen:     # a shared subexpression, looked at once
                continue
            seen.add(id(node))
            if isinstance(node, L.Load) and node.buffer in written:
                if L.to_text(node) not in written[node.buffer]:  # another lane's element
                    return None
            stack.extend(L.children(node))
        return self


_LLVM_INTRINSICS = {
    "exp": "llvm.exp", "log": "llvm.log", "sqrt": "llvm.sqrt", "abs": "llvm.fabs",
    "floor": "llvm.floor", "ceil": "llvm.ceil", "round": "llvm.roundeven", "pow": "llvm.pow",
    "sin": "llvm.sin", "cos": "llvm.cos", "log2": "llvm.log2", "exp2": "llvm.exp2",
}


def _tanh_taylor(terms: int) -> list:
    """The first ``terms`` coefficients of tanh's Taylor series (of x, x**3, x**5, ...):
    ``2**(2n) (2**(2n) - 1) B(2n) / (2n)!`` with the Bernoulli numbers ``B``."""
    from fractions import Fraction
    from math import comb, factorial
    bernoulli = [Fraction(1)]
    for m in range(1, 2 * terms + 1):
        bernoulli.append(-sum(comb(m + 1, k) * bernoulli[k] for k in range(m)) / (m + 1))
    return [float(2 ** (2 * n) * (2 ** (2 * n) - 1) * bernoulli[2 * n] / factorial(2 * n))
            for n in range(1, terms + 1)]


_LOG2E = 1.4426950408889634
_LN2_HIGH = 0.693145751953125            # ln 2 with its low 12 bits of float32 mantissa clear
_LN2_LOW = 0.6931471805599453 - _LN2_HIGH
_EXP_TAYLOR = [1.0 / math.factorial(k) for k in range(8)]
_TANH_TAYLOR = _tanh_taylor(9)
_TANH_SMALL = 0.55
#: ops computed on float32 vectors in line (see the methods' texts) instead of per lane
_VECTOR_MATH = {"exp": "_vector_exp", "tanh": "_vector_tanh", "sigmoid": "_vector_sigmoid"}

_LIBM = {name: (name + "f", name) for name in ("tanh", "erf", "tan", "asin", "acos", "atan",
                                              "sinh", "cosh", "asinh", "acosh", "atanh")}


_PURE_METHODS = (
    "add", "sub", "mul", "sdiv", "srem", "udiv", "urem", "and_", "or_", "xor", "shl", "ashr",
    "lshr", "neg", "not_", "fadd", "fsub", "fmul", "fdiv", "frem", "fneg", "icmp_signed",
    "icmp_unsigned", "fcmp_ordered", "fcmp_unordered", "select", "zext", "sext", "trunc",
    "fptrunc", "fpext", "sitofp", "uitofp", "fptosi", "fptoui", "bitcast", "gep",
    "extract_element", "insert_element", "shuffle_vector")
"""IRBuilder methods whose result depends on their operands only (no memory, no side effect):
the ones :class:`_NumberingBuilder` emits once per distinct operands."""

_PURE_INTRINSICS = frozenset((
    "fmuladd", "fma", "fabs", "sqrt", "floor", "ceil", "roundeven", "rint", "round", "trunc",
    "exp", "exp2", "log", "log2", "log10", "pow", "sin", "cos", "copysign", "minnum", "maxnum",
    "minimum", "maximum"))
"""LLVM math intrinsics (the part of the name after ``llvm.``) that read no memory."""

_PURE_X86 = frozenset(("llvm.x86.avx512.vpdpbusd.128", "llvm.x86.avx512.vpdpbusd.256",
                       "llvm.x86.avx512.vpdpbusd.512", "llvm.x86.avx512.pmaddw.d.512",
                       "llvm.x86.avx2.pmadd.wd"))


def _pure_callee(name: str) -> bool:
    if name in _PURE_X86:
        return True
    parts = name.split(".")
    return len(parts) >= 2 and parts[0] == "llvm" and parts[1] in _PURE_INTRINSICS


class _NotNumbered(Exception):
    """An operand without a value key (the instruction is emitted as is)."""


class _NumberingBuilder:
    """An ``IRBuilder`` that emits each pure instruction once per distinct operands (local value
    numbering while the IR is built), so that the index arithmetic, the addresses and the loads
    an expression tree repeats (the unrolled tiles of a Winograd transform read each input many
    times, each read with its own ``//`` and ``%`` of the loop variables) become one instruction
    each. It is the same common-subexpression elimination LLVM's GVN would do, done before LLVM
    sees thousands of duplicates (and before Python prints them).

    Rules that keep it exact:

    * A value is reused only where its instruction dominates: every loop body and each side of
      an ``if`` is a scope (:meth:`push` / :meth:`pop`), and what was numbered inside a scope is
      forgotten when it ends. Unrolled and vector loops are straight-line code: no scope.
    * Operands are keyed by identity (instructions, arguments) or by value (constants: type and
      value, floats by their hex text so that ``-0.0`` and ``0.0`` differ).
    * Loads are numbered only through the pointers of buffers (:meth:`buffer`) and of addresses
      computed from them (``gep``, ``bitcast``); a store through any address of a buffer starts
      a new generation of that buffer's loads, and entering a loop body or calling a function
      that is not a pure intrinsic (``free``, the C library) starts a new generation of all.
    """

    def __init__(self, builder, ir):
        self._b = builder
        self._ir = ir
        self._table: dict = {}
        self._scopes: list = [[]]
        self._base: dict = {}        # id(pointer) -> id of the buffer pointer it addresses
        self._buffers: set = set()   # ids of buffer pointers whose loads are numbered
        self._generation: dict = {}  # id(buffer pointer) -> stores through it so far
        self._epoch = 0
        self._keep: list = []        # values whose ids are keys: alive as long as the table
        self._constant_keys: dict = {}  # id(constant) -> (its key, the constant)
        self._constant_class = ir.Constant
        self._int_class = ir.IntType
        self._type_texts: dict = {}     # id(type) -> (its text, the type)
        self._value_classes: set = set()  # classes of values keyed by identity (not constants)
        self.scalar_work = 0  # float arithmetic on scalars and scalar stores to buffers

    def __getattr__(self, name):
        return getattr(self._b, name)

    # ------------------------------------------------------------------ scopes and buffers
    def push(self) -> None:
        """Enter a region whose values do not dominate what follows it (a loop body, a side of
        an ``if``)."""
        self._scopes.append([])

    def pop(self) -> None:
        """Leave the region: forget what was numbered in it."""
        table = self._table
        for key in self._scopes.pop():
            table.pop(key, None)

    def forget_loads(self) -> None:
        """Loads numbered so far are not reused (memory may have changed: a loop's earlier
        iterations, a call)."""
        self._epoch += 1

    def buffer(self, pointer) -> None:
        """Number the loads through ``pointer`` (a buffer's data) and addresses made from it."""
        self._buffers.add(id(pointer))
        self._base[id(pointer)] = id(pointer)
        self._keep.append(pointer)

    # ------------------------------------------------------------------ keys
    def _const(self, value):
        if isinstance(value, float):
            return ("f", value.hex())
        if isinstance(value, (int, str)) or value is None:
            return value
        if isinstance(value, (list, tuple)):
            return tuple(self._operand(v) if isinstance(v, self._ir.Value) else self._const(v)
                         for v in value)
        if value is self._ir.Undefined:
            return ("undef",)
        raise _NotNumbered

    def _operand(self, value):
        if type(value) in self._value_classes:   # an instruction, an argument: by identity
            return id(value)
        if type(value) is self._constant_class:
            # a constant by its value; remembered by identity (the constant kept alive with
            # its key), since vector constants repeat their elements and splats repeat
            found = self._constant_keys.get(id(value))
            if found is None:
                found = self._constant_keys[id(value)] = (
                    ("c", self._type_text(value.type), self._const(value.constant)), value)
            return found[0]
        ir = self._ir
        if isinstance(value, ir.Constant):
            return ("c", str(value.type), self._const(value.constant))
        if isinstance(value, ir.Value):
            self._value_classes.add(type(value))
            return id(value)
        if isinstance(value, (list, tuple)):
            return tuple(self._operand(v) for v in value)
        if isinstance(value, ir.Type):
            return ("t", self._type_text(value))
        if isinstance(value, (str, int, float, bool)) or value is None:
            return value
        raise _NotNumbered

    def _type_text(self, ty) -> str:
        found = self._type_texts.get(id(ty))
        if found is None:
            found = self._type_texts[id(ty)] = (str(ty), ty)   # the type kept alive
        return found[0]

    def _key(self, method: str, args, kwargs):
        try:
            operands = tuple(map(self._operand, args))
            extra = tuple(sorted((k, self._operand(v)) for k, v in kwargs.items()
                                 if k != "name")) if kwargs else ()
        except _NotNumbered:
            return None
        return (method, operands, extra)

    def _remember(self, key, value, args) -> None:
        self._table[key] = value
        self._scopes[-1].append(key)
        self._keep.append(args)

    def _numbered(self, method: str, args, kwargs):
        key = self._key(method, args, kwargs) if NUMBERING else None
        if key is not None:
            found = self._table.get(key)
            if found is not None:
                return found
        value = getattr(self._b, method)(*args, **kwargs)
        if method in _FLOAT_ARITHMETIC or method == "call":
            self._count_scalar_float(value)
        if key is not None:
            self._remember(key, value, args)
        if method in ("gep", "bitcast"):
            source = id(args[0])
            self._base[id(value)] = self._base.get(source, source)
        return value

    # ------------------------------------------------------------------ memory and calls
    def load(self, ptr, name="", align=None, typ=None):
        base = self._base.get(id(ptr))
        if base is None or base not in self._buffers or not NUMBERING:
            return self._b.load(ptr, name=name, align=align, typ=typ)
        key = ("load", id(ptr), self._generation.get(base, 0), self._epoch, align,
               None if typ is None else self._type_text(typ))
        found = self._table.get(key)
        if found is not None:
            return found
        value = self._b.load(ptr, name=name, align=align, typ=typ)
        self._remember(key, value, ptr)
        return value

    def store(self, value, ptr, align=None):
        base = self._base.get(id(ptr), id(ptr))
        self._generation[base] = self._generation.get(base, 0) + 1
        if base in self._buffers and not isinstance(value.type, self._ir.VectorType):
            self.scalar_work += 1   # scalar stores side by side are what SLP packs too
        return self._b.store(value, ptr, align=align)

    def call(self, fn, args, *rest, **kwargs):
        if not rest and _pure_callee(getattr(fn, "name", "")):
            return self._numbered("call", (fn, list(args)), kwargs)
        self.forget_loads()
        value = self._b.call(fn, args, *rest, **kwargs)
        self._count_scalar_float(value)
        return value

    def _count_scalar_float(self, value) -> None:
        """Count float arithmetic on scalars (what LLVM's SLP vectorizer could pack)."""
        if isinstance(value.type, (self._ir.FloatType, self._ir.DoubleType, self._ir.HalfType)):
            self.scalar_work += 1


_FLOAT_ARITHMETIC = frozenset(("fadd", "fsub", "fmul", "fdiv", "frem", "fneg"))


def _numbered_method(method: str):
    def emit(self, *args, **kwargs):
        return self._numbered(method, args, kwargs)
    emit.__name__ = method
    return emit


for _method in _PURE_METHODS:
    setattr(_NumberingBuilder, _method, _numbered_method(_method))
del _method


def _folded_method(method: str, fold):
    numbered = _numbered_method(method)

    def emit(self, lhs, rhs, name="", flags=()):
        """``method`` of two scalar integers, folded where an operand is a constant that
        decides it (``x + 0``, ``x * 1``, ``x * 0``, two constants): an index's row-major
        offset is a chain of ``* extent + index`` whose constant links (the zeros of unit
        axes, a tile's unrolled positions) need no instruction, for Python to make and print
        nor for LLVM to combine."""
        if not flags and type(lhs.type) is self._int_class and lhs.type == rhs.type and \
                lhs.type.width > 1:
            constant = self._constant_class
            a = lhs.constant if type(lhs) is constant else None
            b = rhs.constant if type(rhs) is constant else None
            found = fold(lhs, rhs, a if isinstance(a, int) else None,
                         b if isinstance(b, int) else None)
            if found is not None:
                if isinstance(found, int):
                    width = lhs.type.width
                    found = constant(lhs.type, ((found + (1 << (width - 1))) % (1 << width))
                                     - (1 << (width - 1)))
                return found
        return numbered(self, lhs, rhs, name=name, flags=flags) if flags or name else \
            numbered(self, lhs, rhs)
    emit.__name__ = method
    return emit


def _fold_add(lhs, rhs, a, b):
    if a is not None and b is not None:
        return a + b
    return rhs if a == 0 else lhs if b == 0 else None


def _fold_sub(lhs, rhs, a, b):
    if a is not None and b is not None:
        return a - b
    return lhs if b == 0 else None


def _fold_mul(lhs, rhs, a, b):
    if a is not None and b is not None:
        return a * b
    if a == 0 or b == 0:
        return 0
    return rhs if a == 1 else lhs if b == 1 else None


_NumberingBuilder.add = _folded_method("add", _fold_add)
_NumberingBuilder.sub = _folded_method("sub", _fold_sub)
_NumberingBuilder.mul = _folded_method("mul", _fold_mul)

_LEAVES = frozenset((L.IntImm, L.FloatImm, L.Var, L.SizeVar))
"""Expression classes emitted directly, never looked up (constants and variables)."""


class _FunctionBuilder:
    """Emits one PrimFunc as one LLVM function; handlers are looked up by node class."""

    def __init__(self, func: L.PrimFunc, module, parallel: bool, *, name: str = "kernel",
                 body=None, params=None, aligned: int | None = None):
        ir = _ir()
        self.ir = ir
        self.func = func
        self.module = module
        self.i64 = ir.IntType(64)
        self.vectorize_wide = host_target().has_avx512
        self.int8_path = int8_path()
        self.parallel_loop = None
        self.body = func.body if body is None else body
        params = tuple(func.params if params is None else params)
        if parallel and isinstance(self.body, L.For) and self.body.kind == "parallel":
            self.parallel_loop = self.body
        arg_types = [ir.PointerType(_memory_type(b.dtype)) for b in params]
        if self.parallel_loop is not None:
            arg_types += [self.i64, self.i64]
        self.fn = ir.Function(module, ir.FunctionType(ir.VoidType(), arg_types), name)
        self.vector: _VectorLoop | None = None
        for k, (arg, buf) in enumerate(zip(self.fn.args, params)):
            arg.name = buf.name
            arg.add_attribute("noalias")
            arg.attributes.align = max(1, np.dtype(buf.dtype).itemsize)
            if aligned is not None and k >= aligned:  # the runtime's temporaries
                arg.attributes.align = 64
        self.entry = self.fn.append_basic_block("entry")
        start = self.fn.append_basic_block("start")
        self.entry_builder = ir.IRBuilder(self.entry)
        self.b = _NumberingBuilder(ir.IRBuilder(start), ir)
        self.pointers = dict(zip(params, self.fn.args))
        for arg in self.fn.args[:len(params)]:
            self.b.buffer(arg)
        self.env: dict = {}
        self._bind_sizes(func)
        self.ranges: dict = {}  # variable -> (lo, hi), for proving loads in bounds
        self.speculative = 0  # > 0 while computing a side of a select that may not be chosen
        self._exact = None  # float values never contracted into an FMA (made when first asked)
        self.loop_count = 0
        self.unrolled = 0  # unrolled loops around the statement being emitted
        self.plans: dict = {}  # id(vectorized loop) -> (its _VectorLoop or None, the loop)
        self.loads: dict = {}  # id(expression) -> (the loads in it, the expression)
        self.proven: dict = {}  # (id(load), its variables' ranges) -> in bounds
        self.deps: dict = {}  # id(expression) -> (its variables, its buffers, the expression)
        self.expr_table = {
            L.IntImm: self._int, L.FloatImm: self._float, L.Var: self._var,
            L.Binary: self._binary, L.Unary: self._unary, L.Select: self._select,
            L.Cast: self._cast, L.Load: self._load, L.Call: self._call,
            L.DotSum: self._dot_sum,
        }
        self.stmt_table = {
            L.For: self._for, L.Store: self._store, L.LetStmt: self._let,
            L.IfThenElse: self._if, L.SeqStmt: self._seq, L.Allocate: self._allocate,
        }

    def where(self) -> str:
        return f"kernel {self.func.name}"

    @property
    def exact(self) -> set:
        """:func:`_exact_values` of the body, worked out on first use: a build whose kernels are
        all cached makes the builders (for the cache key) but never emits code."""
        if self._exact is None:
            self._exact = _exact_values(self.body)
        return self._exact

    def _bind_sizes(self, func) -> None:
        """The size variables of a kernel for symbolic shapes (:class:`~L.SizeVar`), read from
        its last parameter, the int64 buffer ``sizes``, at the entry."""
        sizes = L.size_vars_of(func.params)
        if not sizes:
            return
        last = func.params[-1]
        if last.name != "sizes" or last.dtype != "int64" or last.shape != (len(sizes),):
            raise CompileError(f"{self.where()}: its shapes hold {', '.join(v.name for v in sizes)}"
                               " but its last parameter is not the int64 buffer sizes")
        pointer = self.pointers[last]
        for k, var in enumerate(sizes):
            address = self.entry_builder.gep(pointer, [self.ir.Constant(self.i64, k)],
                                             inbounds=True)
            self.env[var] = self.entry_builder.load(address, align=8)

    def build(self):
        if self.parallel_loop is not None:
            begin_arg, end_arg = self.fn.args[-2:]
            begin_arg.name, end_arg.name = "begin", "end"
            loop = self.parallel_loop
            base = self.expr(loop.begin)
            self._bind_range(loop.var, loop.begin, loop.extent)
            self._loop(loop, self.b.add(base, begin_arg), self.b.add(base, end_arg), None)
            self.ranges.pop(loop.var, None)
        else:
            self.stmt(self.body)
        self.b.ret_void()
        self.entry_builder.branch(self.b.function.blocks[1])
        if self.vectorize_wide:
            prefer_vector_width(self.fn, 512)
        return self.fn

    # ---------------------------------------------------------------- expressions

    def expr(self, e):
        """The value of ``e``: emitted once per distinct context. The loop IR shares
        subexpressions (one node read by many parents: a Winograd tile's column sums, the
        loads of an input tile), and a node whose variables are bound to the same values and
        whose buffers were not stored to since is the same value, so it is taken from the
        builder's scoped table (:class:`_NumberingBuilder`) instead of walked again."""
        if type(e) in _LEAVES or not NUMBERING:
            return self._emit(e)
        deps = self.deps.get(id(e))
        if deps is None:
            deps = self._dependencies(e)
        b = self.b
        env, pointers, generation = self.env, self.pointers, b._generation
        key = ["expr", id(e)]
        for var in deps[0]:
            key.append(b._operand(env.get(var)))
        if deps[1]:
            key.append(b._epoch)
            for buffer in deps[1]:
                pointer = id(pointers.get(buffer))
                key.append(pointer)
                key.append(generation.get(pointer, 0))
        # a value computed where the program might not have chosen it (a side of a select)
        # reads through clamped offsets (gathers in vector code): correct anywhere, but only
        # reused where speculation is needed again; a plain value is reused everywhere
        key.append(False)
        found = b._table.get(tuple(key))
        if found is not None:
            return found
        if self.speculative:
            key[-1] = True
            found = b._table.get(tuple(key))
            if found is not None:
                return found
        value = self._emit(e)
        b._remember(tuple(key), value, e)
        return value

    def _dependencies(self, e) -> tuple:
        """``(variables, buffers)`` that the value of ``e`` depends on (the variables it reads,
        the buffers it loads from), worked out once per node, bottom-up without recursion."""
        deps = self.deps
        stack = [(e, False)]
        while stack:
            node, expanded = stack.pop()
            if id(node) in deps:
                continue
            children = L.children(node)
            if not expanded:
                pending = [c for c in children if id(c) not in deps]
                if pending:
                    stack.append((node, True))
                    stack.extend((c, False) for c in pending)
                    continue
            variables, buffers = set(), set()
            if isinstance(node, L.Var):
                variables.add(node)
            elif isinstance(node, L.Load):
                buffers.add(node.buffer)
            if isinstance(node, L.DotSum):
                variables.add(node.var)
            for child in children:
                child_vars, child_buffers, _ = deps[id(child)]
                variables.update(child_vars)
                buffers.update(child_buffers)
            deps[id(node)] = (tuple(sorted(variables, key=id)), tuple(sorted(buffers, key=id)),
                              node)   # the node kept alive: its id is a key
        return deps[id(e)]

    def _emit(self, e):
        handler = self.expr_table.get(type(e))
        if handler is None:  # subclasses from other layers (te's IterVar is a Var)
            handler = next((self.expr_table[t] for t in type(e).__mro__
                            if t in self.expr_table), None)
            if handler is not None:
                self.expr_table[type(e)] = handler
        if handler is None:
            raise CompileError(f"{self.where()}: the LLVM backend cannot compile "
                               f"{type(e).__name__} ({L.to_text(e)}); lower it first")
        return handler(e)

    def _int(self, e):
        return self.ir.Constant(_value_type(e.dtype), int(e.value))

    def _float(self, e):
        return self.ir.Constant(_value_type(e.dtype), float(e.value))

    def _var(self, e):
        try:
            return self.env[e]
        except KeyError:
            raise CompileError(f"{self.where()}: variable {e.name} is used where it is not "
                               "bound") from None

    def _binary(self, e):
        b = self.b
        op = e.op
        dtype = e.a.dtype
        if op == "+" and isinstance(e.b, L.DotSum) and self.vector is not None:
            return self._dot_sum(e.b, accumulator=e.a)   # acc + dot_sum: accumulate in place
        if (op in ("+", "-") and _is_float(dtype) and (self.fusible(e.a) or self.fusible(e.b))
                and self.vector is not None and self.vector.depends(e)
                and e not in self.exact):
            return self._multiply_add(e)
        if op in ("and", "or"):  # the right side is computed even where the left decides
            x = self.expr(e.a)
            x, y = self.match(x, self.speculate(e.b))
        else:
            x, y = self.match(self.expr(e.a), self.expr(e.b))
        if op in ("<<", ">>"):
            return self._shift(op, x, y, _is_unsigned(dtype))
        if op in ("and", "or"):  # as selects: a poison right side is dropped where x decides
            decided = self.match(self.ir.Constant(self.ir.IntType(1), int(op == "or")), x)[0]
            return b.select(x, y, decided) if op == "and" else b.select(x, decided, y)
        if _is_float(dtype):
            simple = {"+": b.fadd, "-": b.fsub, "*": b.fmul, "/": b.fdiv}
            if op in simple:
                return simple[op](x, y)
            if op in L.COMPARE_OPS:
                return b.fcmp_unordered("!=", x, y) if op == "!=" else b.fcmp_ordered(op, x, y)
            if op in ("min", "max"):
                return self._float_min_max(op, x, y)
        else:
            unsigned = _is_unsigned(dtype)
            cmp = b.icmp_unsigned if unsigned else b.icmp_signed
            simple = {"+": b.add, "-": b.sub, "*": b.mul}
            if op in simple:
                return simple[op](x, y)
            if op in L.COMPARE_OPS:
                return cmp(op, x, y)
            if op == "min":
                return b.select(cmp("<", y, x), y, x)
            if op == "max":
                return b.select(cmp(">", y, x), y, x)
            if op in ("//", "%"):
                return self._floor_div_mod(op, x, y, unsigned, self._nonnegative(e.a))
        raise CompileError(f"{self.where()}: operator {op!r} on {dtype} in {L.to_text(e)}")

    def _float_min_max(self, op, x, y):
        """numpy's ``minimum``/``maximum``: ``x`` when it is NaN or strictly beyond ``y``, else
        ``y`` (a NaN ``y`` is then the result; of ``-0.0`` and ``0.0``, ``y``), so that a ``max``
        reduction (``acc = max(acc, v)``, max pooling) propagates NaN as numpy does instead of
        skipping it.

        The inner select is what x86's ``minps``/``maxps`` compute in one instruction; it is
        frozen so that LLVM keeps it whole instead of merging the two selects into one blend
        under two compares and a mask ``or``, all on an accumulator's dependency chain (a 3x3
        max pool ran 1.35x slower). The NaN check runs beside ``maxps``: one compare and one
        blend more (about 1.05x).

        Against a constant that is no NaN (a ReLU's or a clip's bound) one compare does it all:
        ``x`` beyond or unordered with a constant ``y`` is ``x`` beyond it or NaN, and a constant
        ``x`` beyond ``y`` in order leaves a NaN ``y`` to the other side."""
        b = self.b
        sign = "<" if op == "min" else ">"
        if _no_nan_constant(y):
            return b.select(b.fcmp_unordered(sign, x, y), x, y)
        if _no_nan_constant(x):
            return b.select(b.fcmp_ordered(sign, x, y), x, y)
        beyond = b.fcmp_ordered(sign, x, y)
        picked = self.freeze(b.select(beyond, x, y))
        return b.select(b.fcmp_unordered("uno", x, x), x, picked)

    def fusible(self, e) -> bool:
        """Whether ``e`` is a float product that may be fused into the addition reading it: not
        when its rounded value also feeds a step (see :func:`_exact_values`), since the fused
        sum would then differ from what the step saw (``c - floor(c)`` is not 0 at ``c == 8``
        when ``c`` is a product fused into the subtraction)."""
        return _is_mul(e) and e not in self.exact

    def _multiply_add(self, e):
        """``a * b + c`` (and the ``-`` forms) as one ``llvm.fmuladd``, which x86 with FMA
        emits as a fused multiply-add."""
        if e.op == "+":
            product, addend = (e.a, e.b) if self.fusible(e.a) else (e.b, e.a)
            a, b = self.expr(product.a), self.expr(product.b)
            c = self.expr(addend)
        elif self.fusible(e.a):  # a * b - c
            a, b = self.expr(e.a.a), self.expr(e.a.b)
            c = self.b.fneg(self.expr(e.b))
        else:  # c - a * b
            a, b = self.b.fneg(self.expr(e.b.a)), self.expr(e.b.b)
            c = self.expr(e.a)
        a, b, c = self.match(a, b, c)
        return self.b.call(self.intrinsic("llvm.fmuladd", a.type, 3), [a, b, c])

    def _shift(self, op, x, y, unsigned):
        """numpy's shifts: an amount outside ``[0, bits)`` gives 0, or -1 for a negative value
        shifted right (LLVM leaves those undefined)."""
        b = self.b
        bits = _element_type(x.type).width
        too_far = b.icmp_unsigned(">=", y, self.ir.Constant(y.type, bits))
        zero = self.ir.Constant(x.type, 0)
        if op == "<<":
            return b.select(too_far, zero, b.shl(x, y))
        if unsigned:
            return b.select(too_far, zero, b.lshr(x, y))
        amount = b.select(too_far, self.ir.Constant(y.type, bits - 1), y)
        return b.ashr(x, amount)

    def intrinsic(self, name: str, ty, arity: int):
        """The LLVM intrinsic ``name`` overloaded on ``ty`` (a scalar or vector type)."""
        ir = self.ir
        element = _element_type(ty)
        suffix = element.intrinsic_name
        if isinstance(ty, ir.VectorType):
            suffix = f"v{ty.count}{suffix}"
        full = f"{name}.{suffix}"
        fn = self.module.globals.get(full)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ty, [ty] * arity), full)
        return fn

    def splat(self, x, lanes: int):
        """``x`` in every one of ``lanes`` lanes."""
        ir, b = self.ir, self.b
        vector_type = ir.VectorType(x.type, lanes)
        if isinstance(x, ir.Constant):
            return ir.Constant(vector_type, [x] * lanes)
        single = b.insert_element(ir.Constant(vector_type, ir.Undefined), x,
                                  ir.Constant(ir.IntType(32), 0))
        return b.shuffle_vector(single, ir.Constant(vector_type, ir.Undefined),
                                ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))

    def match(self, *values):
        """The values with scalars broadcast when any of them is a vector."""
        lanes = next((_lanes(v) for v in values if _lanes(v) is not None), None)
        if lanes is None:
            return values
        return tuple(v if _lanes(v) is not None else self.splat(v, lanes) for v in values)

    def _nonnegative(self, e) -> bool:
        """Whether the integer expression ``e`` is known to be 0 or more (its loop variables'
        ranges)."""
        known = value_range(e, self.ranges)
        return known is not None and known[0] >= 0

    def _floor_div_mod(self, op, x, y, unsigned, nonnegative=False):
        """Floor division or modulo with numpy's answers where LLVM has none: ``x // 0`` and
        ``x % 0`` are 0, ``INT_MIN // -1`` wraps. LLVM's ``sdiv``/``srem`` never see a divisor
        of 0 or -1 (undefined behaviour, a trap on x86); a constant divisor skips the checks.
        A ``nonnegative`` dividend (a loop variable's index arithmetic) by a positive constant
        is an unsigned division: no correction of the truncated result."""
        ir, b = self.ir, self.b
        zero, one = ir.Constant(x.type, 0), ir.Constant(x.type, 1)
        known = _constant_divisor(y)
        if nonnegative and known is not None and known > 0:
            unsigned = True
        checked = known is None or known == 0 or (known == -1 and not unsigned)
        if checked:
            y = self.freeze(y)
            is_zero = b.icmp_unsigned("==", y, zero)
            special = is_zero
            if not unsigned:
                minus_one = ir.Constant(x.type, -1)
                is_minus_one = b.icmp_signed("==", y, minus_one)
                special = b.or_(is_zero, is_minus_one)
            divisor = b.select(special, one, y)
        else:
            divisor = y
        if unsigned:
            result = b.udiv(x, divisor) if op == "//" else b.urem(x, divisor)
            return b.select(is_zero, zero, result) if checked else result
        quotient, remainder = b.sdiv(x, divisor), b.srem(x, divisor)
        # The truncated result is off by one when the remainder is non-zero and its sign
        # differs from the divisor's.
        adjust = b.and_(b.icmp_signed("!=", remainder, zero),
                        b.icmp_signed("<", b.xor(remainder, divisor), zero))
        if op == "//":
            result = b.sub(quotient, b.zext(adjust, x.type))
            if checked:  # x // -1 is -x (wrapping), x // 0 is 0
                result = b.select(is_minus_one, b.neg(x), result)
        else:
            result = b.select(adjust, b.add(remainder, divisor), remainder)
        return b.select(is_zero, zero, result) if checked else result

    def freeze(self, value):
        """``freeze value``: a poison or undef value becomes some fixed value, so that a
        check on it (a divisor's, an offset's clamp) holds for what is then used."""
        key = ("freeze", id(value))
        found = self.b._table.get(key) if NUMBERING else None
        if found is not None:
            return found
        instruction = self.ir.instructions.Instruction(self.b.block, value.type, "freeze",
                                                       [value])
        self.b._insert(instruction)
        self.b._remember(key, instruction, value)
        return instruction

    def speculate(self, e):
        """``e`` computed where the program might not have chosen to compute it (a side of a
        ``select``, the right side of ``and``/``or``): its loads stay in bounds."""
        self.speculative += 1
        try:
            return self.expr(e)
        finally:
            self.speculative -= 1

    def _unary(self, e):
        x = self.expr(e.a)
        if e.op == "not":
            return self.b.not_(x)
        if _is_float(e.dtype):
            return self.b.fneg(x)
        return self.b.neg(x)

    def _select(self, e):
        decided = _decided(e.cond, self.ranges)
        if decided is not None:   # a test of an unrolled loop's variable: the side it takes only
            return self.expr(e.true_value if decided else e.false_value)
        cond = self.expr(e.cond)
        cond, true_value, false_value = self.match(cond, self.speculate(e.true_value),
                                                   self.speculate(e.false_value))
        return self.b.select(cond, true_value, false_value)

    def _cast(self, e):
        return self.convert(self.expr(e.value), e.value.dtype, e.dtype)

    def convert(self, x, source: str, target: str):
        b = self.b
        if source == target:
            return x
        to = _value_type(target)
        lanes = _lanes(x)
        if lanes is not None:
            to = self.ir.VectorType(to, lanes)
        if target == "bool":
            if _is_float(source):
                return b.fcmp_unordered("!=", x, self.ir.Constant(x.type, 0.0))
            return b.icmp_signed("!=", x, self.ir.Constant(x.type, 0))
        if source == "float64" and target == "float16":
            # x86 has no instruction for it, and LLVM's library call is not linked into the JIT:
            # through float32 rounded to odd, which then rounds to half exactly as one rounding
            return b.fptrunc(self._to_float32_round_to_odd(x), to)
        if _is_float(source) and _is_float(target):
            width = np.dtype(source).itemsize, np.dtype(target).itemsize
            return b.fpext(x, to) if width[1] > width[0] else b.fptrunc(x, to)
        if _is_float(source):
            return self._float_to_int(x, target)
        if _is_float(target):
            return b.uitofp(x, to) if _is_unsigned(source) else b.sitofp(x, to)
        width, source_width = _element_type(to).width, _element_type(x.type).width
        if width == source_width:
            return x
        if width < source_width:
            return b.trunc(x, to)
        return b.zext(x, to) if _is_unsigned(source) else b.sext(x, to)

    def _to_float32_round_to_odd(self, x):
        """A float64 (vector) as float32 rounded to odd: truncated toward zero and, when that
        dropped anything, its last bit set. A float32 rounded to odd rounds on to any format of
        at most 22 bits of precision exactly as ``x`` would directly (float16 has 11), where
        round-to-nearest twice can land on the other side of a tie."""
        ir, b = self.ir, self.b
        lanes = _lanes(x)

        def typed(element):
            return element if lanes is None else ir.VectorType(element, lanes)

        def const(value, of_type):
            c = ir.Constant(of_type, value)
            return c if lanes is None else self.splat(c, lanes)

        f = b.fptrunc(x, typed(ir.FloatType()))
        back = b.fpext(f, x.type)
        inexact = b.fcmp_ordered("!=", back, x)
        zero = const(0.0, ir.DoubleType())
        # rounded away from zero: step the magnitude back by one unit (sign and magnitude bits)
        away = b.select(b.fcmp_ordered(">", x, zero), b.fcmp_ordered(">", back, x),
                        b.fcmp_ordered("<", back, x))
        i32 = typed(ir.IntType(32))
        bits = b.bitcast(f, i32)
        toward_zero = b.select(away, b.sub(bits, const(1, ir.IntType(32))), bits)
        odd = b.or_(toward_zero, const(1, ir.IntType(32)))
        return b.bitcast(b.select(inexact, odd, bits), typed(ir.FloatType()))

    def _float_to_int(self, x, target: str):
        """A float converted to the integer ``target`` as numpy converts on x86, where LLVM's
        ``fptosi``/``fptoui`` leave a value out of range undefined: the fraction dropped, then
        a value outside the range of the 32- or 64-bit conversion (NaN too) becomes the
        smallest integer of that width; 8- and 16-bit results are the low bits of the 32-bit
        conversion, ``uint32`` those of the 64-bit one (so -1.0 is 255 as uint8, 300.0 is 44 as
        int8); ``uint64`` converts values from 2**63 up offset by 2**63."""
        ir, b = self.ir, self.b
        bits = np.dtype(target).itemsize * 8
        wide = 64 if bits == 64 or target == "uint32" else 32

        def typed(element):  # a vector type in vector code
            lanes = _lanes(x)
            return element if lanes is None else ir.VectorType(element, lanes)

        def const(value, of_type):
            c = ir.Constant(of_type, value)
            lanes = _lanes(x)
            return c if lanes is None else self.splat(c, lanes)

        def signed(value, width):
            as_type = ir.IntType(width)
            lo, hi = const(-2.0 ** (width - 1), _element_type(x.type)), \
                const(2.0 ** (width - 1), _element_type(x.type))
            inside = b.and_(b.fcmp_ordered(">=", value, lo), b.fcmp_ordered("<", value, hi))
            zero = const(0.0, _element_type(x.type))
            whole = b.fptosi(b.select(inside, value, zero), typed(as_type))
            return b.select(inside, whole, const(-(1 << (width - 1)), as_type))

        if target == "uint64":
            top = const(2.0 ** 63, _element_type(x.type))
            high = b.fcmp_ordered(">=", x, top)
            shifted = b.xor(signed(b.fsub(x, top), 64), const(-(1 << 63), ir.IntType(64)))
            return b.select(high, shifted, signed(x, 64))
        result = signed(x, wide)
        return result if bits == wide else b.trunc(result, typed(ir.IntType(bits)))

    def _pointer(self, buffer):
        pointer = self.pointers.get(buffer)
        if pointer is None:
            raise CompileError(f"{self.where()}: {buffer.name} is neither a parameter nor "
                               "allocated here")
        return pointer

    def _offset(self, buffer, indices):
        """The row-major element offset of ``buffer[indices]`` (a vector in vector code when
        the indices differ from lane to lane)."""
        if not indices:  # a 0-d buffer
            return self.ir.Constant(self.i64, 0)
        if all(isinstance(d, int) for d in buffer.shape):
            return self._split_offset(buffer, indices)
        return self._row_major(
            [self.convert(self.expr(i), i.dtype, "int64") for i in indices], buffer.shape)

    def _row_major(self, values, shape):
        """``((values[0] * shape[1] + values[1]) * shape[2] + ...)``, None values as 0."""
        zero = self.ir.Constant(self.i64, 0)
        flat = zero if values[0] is None else values[0]
        for value, extent in zip(values[1:], shape[1:]):
            flat, value = self.match(flat, zero if value is None else value)
            flat = self.b.add(self.b.mul(flat, self._extent(extent, flat)), value)
        return flat

    def _split_offset(self, buffer, indices):
        """:meth:`_offset` of a buffer of constant shape, each index taken as ``rest + c``
        (:meth:`_split_index`): the offset of the rests (one chain of ``* extent + rest``,
        which the unrolled accesses of a tile share, differing only in their constants) plus
        the constants' part, one ``add`` an access."""
        b = self.b
        rests, constant = [], 0
        stride = 1
        for index, extent in zip(reversed(indices), reversed(buffer.shape)):
            rest, c = self._split_index(index)
            rests.append(rest)
            constant += c * stride
            stride *= extent
        rests.reverse()
        flat, offset = self.match(self._row_major(rests, buffer.shape),
                                  self.ir.Constant(self.i64, constant))
        return b.add(flat, offset)

    def _split_index(self, e):
        """``(rest, c)`` with ``e == rest + c``: ``c`` the sum of the terms of ``e``'s additions
        and subtractions that are constants here (integers, the variable of an unrolled loop),
        ``rest`` the int64 value of the others (None when there are none)."""
        terms, rest, constant = [(e, 1)], [], 0
        while terms:
            node, sign = terms.pop()
            if isinstance(node, L.Binary) and node.op in ("+", "-") and \
                    node.dtype in ("int32", "int64"):
                terms.append((node.b, sign if node.op == "+" else -sign))
                terms.append((node.a, sign))
                continue
            known = self._constant_int(node)
            if known is not None:
                constant += sign * known
            else:
                rest.append((node, sign))
        value = None
        for node, sign in reversed(rest):
            term = self.convert(self.expr(node), node.dtype, "int64")
            if value is None:
                value = term if sign > 0 else self.b.sub(self.ir.Constant(self.i64, 0), term)
            else:
                value, term = self.match(value, term)
                value = self.b.add(value, term) if sign > 0 else self.b.sub(value, term)
        return value, constant

    def _constant_int(self, node):
        """The value of an integer node that is a constant here, else None."""
        if isinstance(node, L.IntImm):
            return int(node.value)
        if isinstance(node, L.Var):
            value = self.env.get(node)
            if type(value) is self.ir.Constant and isinstance(value.type, self.ir.IntType) \
                    and isinstance(value.constant, int) and value.type.width > 1:
                return value.constant
        return None

    def _extent(self, extent, like):
        """A buffer's extent as an i64 value shaped like ``like``: a constant, or the value of
        its expression of the kernel's size variables (read at the entry)."""
        if isinstance(extent, int):
            return self.ir.Constant(like.type, extent)
        value = self.expr(extent)
        return self.match(value, like)[0]

    def _address(self, buffer, indices):
        pointer = self._pointer(buffer)
        return self.b.gep(pointer, [self._offset(buffer, indices)], inbounds=True)

    def _lane_access(self, buffer, indices):
        """How the lanes of the current vector loop reach ``buffer[indices]``: ``(True,
        address)`` when they touch consecutive elements from ``address`` (the first lane's),
        else ``(False, offsets)`` with one element offset per lane."""
        vector = self.vector
        if vector.flat_coefficient(buffer, indices) == 1:
            lane_values = self.env[vector.var]
            self.env[vector.var] = self.convert(self.ir.Constant(self.i64, vector.begin),
                                                "int64", vector.var.dtype)
            try:
                return True, self._address(buffer, indices)
            finally:
                self.env[vector.var] = lane_values
        offsets = self._offset(buffer, indices)
        if _lanes(offsets) is None:
            offsets = self.splat(offsets, vector.lanes)
        return False, offsets

    def in_bounds(self, buffer, indices) -> bool:
        """Whether ``buffer[indices]`` is proven to lie inside the buffer in every iteration."""
        if len(indices) == 1 and len(buffer.shape) != 1:  # a flat index
            extents = (buffer.size,)
        else:
            extents = buffer.shape
        for index, extent in zip(indices, extents):
            if not isinstance(extent, int):   # a symbolic extent: nothing is proven
                return False
            known = value_range(index, self.ranges)
            if known is None or known[0] < 0 or known[1] >= extent:
                return False
        return True

    def _clamped_offset(self, buffer, indices):
        """The row-major offset of ``buffer[indices]`` clamped to ``[0, size - 1]``: where a
        load the program may not have chosen reads (see :meth:`speculate`)."""
        ir, b = self.ir, self.b
        offset = self.freeze(self._offset(buffer, indices))
        low = ir.Constant(self.i64, 0)
        size = buffer.size
        high = ir.Constant(self.i64, size - 1) if isinstance(size, int) else \
            self.convert(self.expr(size - 1), "int64", "int64")
        if _lanes(offset) is not None:
            low, high = self.splat(low, _lanes(offset)), self.splat(high, _lanes(offset))
        offset = b.select(b.icmp_signed("<", offset, low), low, offset)
        return b.select(b.icmp_signed(">", offset, high), high, offset)

    def _load(self, e):
        itemsize = np.dtype(e.buffer.dtype).itemsize
        lanes = self.vector.lanes if self.vector is not None and self.vector.depends(e) else None
        if self.speculative and not self.in_bounds(e.buffer, e.indices):
            value = self._clamped_load(e.buffer, e.indices, lanes)
        elif lanes is not None:
            value = self._vector_load(e.buffer, e.indices)
        else:
            value = self.b.load(self._address(e.buffer, e.indices), align=max(1, itemsize))
        if e.buffer.dtype == "bool":
            value = self.b.trunc(value, self._like(value, self.ir.IntType(1)))
        return self.convert(value, e.buffer.dtype, e.dtype)

    def _like(self, value, element):
        """``element``, or a vector of it as wide as ``value``."""
        lanes = _lanes(value)
        return element if lanes is None else self.ir.VectorType(element, lanes)

    def _clamped_load(self, buffer, indices, lanes):
        """A load the program may not have chosen, at an offset clamped into ``buffer`` (one
        element per lane in vector code; a value of zeros when the buffer is empty)."""
        ir, b = self.ir, self.b
        elem = _memory_type(buffer.dtype)
        if buffer.size == 0:
            return ir.Constant(elem if lanes is None else ir.VectorType(elem, lanes), None)
        align = max(1, np.dtype(buffer.dtype).itemsize)
        pointer = self._pointer(buffer)
        offsets = self._clamped_offset(buffer, indices)
        if lanes is None:
            return b.load(b.gep(pointer, [offsets], inbounds=True), align=align)
        if _lanes(offsets) is None:
            offsets = self.splat(offsets, lanes)
        value = ir.Constant(ir.VectorType(elem, lanes), ir.Undefined)
        for lane in range(lanes):  # a gather, one element at a time
            index = ir.Constant(ir.IntType(32), lane)
            address = b.gep(pointer, [b.extract_element(offsets, index)], inbounds=True)
            value = b.insert_element(value, b.load(address, align=align), index)
        return value

    def _vector_load(self, buffer, indices):
        ir, b = self.ir, self.b
        lanes = self.vector.lanes
        elem = _memory_type(buffer.dtype)
        align = max(1, np.dtype(buffer.dtype).itemsize)
        contiguous, where = self._lane_access(buffer, indices)
        vector_type = ir.VectorType(elem, lanes)
        if contiguous:
            return b.load(b.bitcast(where, ir.PointerType(vector_type)), align=align)
        pointer = self._pointer(buffer)
        value = ir.Constant(vector_type, ir.Undefined)
        for lane in range(lanes):  # a gather, one element at a time
            index = ir.Constant(ir.IntType(32), lane)
            address = b.gep(pointer, [b.extract_element(where, index)], inbounds=True)
            value = b.insert_element(value, b.load(address, align=align), index)
        return value

    def _call(self, e):
        ir, b = self.ir, self.b
        args = list(self.match(*[self.expr(a) for a in e.args]))
        lanes = _lanes(args[0])
        if lanes is not None and e.dtype == "float32" and e.name in _VECTOR_MATH:
            return getattr(self, _VECTOR_MATH[e.name])(args[0])
        if lanes is not None and e.name in _LIBM:  # the C library has scalar functions only
            result = ir.Constant(ir.VectorType(_value_type(e.dtype), lanes), ir.Undefined)
            for lane in range(lanes):
                index = ir.Constant(ir.IntType(32), lane)
                value = self._scalar_call(e, [b.extract_element(a, index) for a in args])
                result = b.insert_element(result, value, index)
            return result
        return self._scalar_call(e, args)

    # ------------------------------------------------- float32 vector exp, tanh, sigmoid

    def _vector_exp(self, x):
        """``exp`` of a float32 vector without a call per lane: ``x = n ln2 + r`` with ``n``
        the nearest integer to ``x / ln2`` and ``|r| <= ln2 / 2`` (``n ln2`` subtracted in two
        parts, the first exact in float32), ``exp(r)`` by its Taylor polynomial of degree 7
        (truncation under 0.1 ulp), times ``2**n`` as two powers of two built in the exponent
        bits (so results that overflow are inf and those below the normal range are subnormal
        or 0). ``x`` is first held to [-104, 89], beyond which the result is already 0 or inf;
        NaN stays NaN."""
        ir, b = self.ir, self.b
        ty = x.type
        lanes = ty.count

        def const(value):
            return ir.Constant(ty, [float(np.float32(value))] * lanes)

        x = b.select(b.fcmp_ordered(">", x, const(89.0)), const(89.0), x)
        x = b.select(b.fcmp_ordered("<", x, const(-104.0)), const(-104.0), x)
        n = b.call(self.intrinsic("llvm.rint", ty, 1), [b.fmul(x, const(_LOG2E))])
        fma = self.intrinsic("llvm.fma", ty, 3)
        r = b.call(fma, [n, const(-_LN2_HIGH), x])
        r = b.call(fma, [n, const(-_LN2_LOW), r])
        poly = const(_EXP_TAYLOR[-1])
        for c in reversed(_EXP_TAYLOR[:-1]):
            poly = b.call(fma, [poly, r, const(c)])
        n = b.select(b.fcmp_unordered("uno", n, n), const(0.0), n)
        i32 = ir.VectorType(ir.IntType(32), lanes)
        k = b.fptosi(n, i32)
        half = b.ashr(k, ir.Constant(i32, [1] * lanes))

        def power_of_two(e):
            bits = b.shl(b.add(e, ir.Constant(i32, [127] * lanes)), ir.Constant(i32, [23] * lanes))
            return b.bitcast(bits, ty)
        return b.fmul(b.fmul(poly, power_of_two(half)), power_of_two(b.sub(k, half)))

    def _vector_tanh(self, x):
        """``tanh`` of a float32 vector: below |x| = 0.55 its odd Taylor polynomial through
        ``x**17`` (coefficients from the Bernoulli numbers; truncation under 0.1 ulp), above it
        ``1 - 2 / (exp(2|x|) + 1)`` (no cancellation there: the result is above 0.5); the sign
        of ``x`` on both; within 2 ulp."""
        ir, b = self.ir, self.b
        ty = x.type
        lanes = ty.count

        def const(value):
            return ir.Constant(ty, [float(np.float32(value))] * lanes)

        fma = self.intrinsic("llvm.fma", ty, 3)
        a = b.call(self.intrinsic("llvm.fabs", ty, 1), [x])
        z = b.fmul(x, x)
        poly = const(_TANH_TAYLOR[-1])
        for c in reversed(_TANH_TAYLOR[1:-1]):
            poly = b.call(fma, [poly, z, const(c)])
        small = b.call(fma, [b.fmul(x, z), poly, x])
        e = self._vector_exp(b.fadd(a, a))
        one = const(1.0)
        large = b.fsub(one, b.fdiv(const(2.0), b.fadd(e, one)))
        result = b.select(b.fcmp_ordered("<", a, const(_TANH_SMALL)), small, large)
        # the sign of x, for the large side and for -0 (where the polynomial gives +0)
        return b.call(self.intrinsic("llvm.copysign", ty, 2), [result, x])

    def _vector_sigmoid(self, x):
        """``1 / (1 + e)`` for ``x >= 0`` and ``e / (1 + e)`` below, with ``e = exp(-|x|)``
        (:meth:`_vector_exp`), which never overflows: down to the subnormal results of large
        negative ``x``."""
        b = self.b
        one = self.ir.Constant(x.type, [1.0] * x.type.count)
        e = self._vector_exp(b.fneg(b.call(self.intrinsic("llvm.fabs", x.type, 1), [x])))
        top = b.select(b.fcmp_ordered("<", x, self.ir.Constant(x.type, [0.0] * x.type.count)),
                       e, one)
        return b.fdiv(top, b.fadd(one, e))

    def _scalar_call(self, e, args):
        """``e`` applied to ``args`` (scalars, or vectors for everything but the C library)."""
        ir, b = self.ir, self.b
        ty = args[0].type
        if e.name == "abs" and not _is_float(e.dtype):
            x = args[0]
            if _is_unsigned(e.dtype):
                return x
            return b.select(b.icmp_signed("<", x, ir.Constant(ty, 0)), b.neg(x), x)
        if e.name in _LLVM_INTRINSICS:
            return b.call(self.intrinsic(_LLVM_INTRINSICS[e.name], ty, len(args)), args)
        if e.name in _LIBM:
            single, double = _LIBM[e.name]
            if e.dtype == "float64":
                name, x = double, args[0]
            else:  # float32 and float16 go through the single-precision function
                name = single
                x = self.convert(args[0], e.dtype, "float32") if e.dtype != "float32" else args[0]
            fn = self.module.globals.get(name)
            if fn is None:
                xt = x.type
                fn = ir.Function(self.module, ir.FunctionType(xt, [xt]), name)
            result = b.call(fn, [x])
            return self.convert(result, "float32", e.dtype) if e.dtype == "float16" else result
        if e.name == "fmod":  # LLVM's frem is C's fmod: exact, with the dividend's sign
            return b.frem(args[0], args[1])
        one = ir.Constant(ty, 1.0)
        if e.name == "rsqrt":
            root = b.call(self.intrinsic("llvm.sqrt", ty, 1), args)
            return b.fdiv(one, root)
        if e.name == "sigmoid":
            exp = b.call(self.intrinsic("llvm.exp", ty, 1), [b.fneg(args[0])])
            return b.fdiv(one, b.fadd(one, exp))
        raise CompileError(f"{self.where()}: no LLVM lowering for intrinsic {e.name}")

    # ---------------------------------------------------------------- int8 dot products

    def _dot_sum(self, e, accumulator=None):
        """``[accumulator +] dot_sum(...)``: one dot-product instruction per vector where the
        path and the operands allow (see the module's text), else the unrolled sum."""
        plan = self._dot_plan(e) if self.int8_path != "generic" else None
        if plan is None:
            total = self.expr(e.unrolled())
            if accumulator is None:
                return total
            return self.b.add(*self.match(self.expr(accumulator), total))
        acc = None if accumulator is None else self.expr(accumulator)
        lanes = self.vector.lanes
        if acc is not None and _lanes(acc) is None:
            acc = self.splat(acc, lanes)
        signed = [p[1] for p in plan]
        if self.int8_path == "vnni" and signed != [False, False]:
            return self._vpdpbusd(e, acc, plan, lanes)
        a, b = (self._dot_operand(e, operand) for operand in plan)
        return self._pmaddwd(acc, a, b, signed, lanes)

    def _dot_plan(self, e):
        """Per operand ``(load, signed, pattern)`` when ``e`` maps onto the int8 instructions:
        4 steps, int32, in a vector loop of 4, 8 or 16 lanes; each operand a widened int8 or
        uint8 load, its steps consecutive bytes and its lanes ``"broadcast"`` (the same bytes),
        ``"packed"`` (the next 4 bytes) or ``"transposed"`` (the next byte; the steps ``lanes``
        bytes apart). None otherwise."""
        vector = self.vector
        if (vector is None or e.extent != 4 or e.dtype != "int32"
                or vector.lanes not in (4, 8, 16)):
            return None
        if self.int8_path == "avx512bw" and vector.lanes == 4:
            return None   # 16 int16 values: a 256-bit multiply, the avx2 path's
        step = _VectorLoop.probe(e.var)
        plan = []
        for operand in (e.a, e.b):
            if not (isinstance(operand, L.Cast) and isinstance(operand.value, L.Load)):
                return None
            load = operand.value
            if load.buffer.dtype not in ("int8", "uint8") or load.dtype != load.buffer.dtype:
                return None
            if self.speculative and not self.in_bounds(load.buffer, load.indices):
                return None
            along = step.flat_coefficient(load.buffer, load.indices)
            across = vector.flat_coefficient(load.buffer, load.indices)
            if across == 0 and along == 1:
                pattern = "broadcast"
            elif across == 4 and along == 1:
                pattern = "packed"
            elif across == 1 and along == vector.lanes:
                pattern = "transposed"
            else:
                return None
            plan.append((load, load.buffer.dtype == "int8", pattern))
        return plan

    def _dot_operand(self, e, operand, flip: bool = False):
        """An operand's ``lanes x 4`` bytes as ``<lanes*4 x i8>``, lane by lane, each lane's
        four steps in order: read with the lane variable at its first value and the step at 0.
        ``flip`` toggles each byte's top bit (``s8 + 128`` as ``u8``), on the four-byte word
        before it is broadcast (LLVM 22's x86 code generator loops forever on a byte ``xor``
        of a broadcast word whose constant it has partly made poison)."""
        ir, b = self.ir, self.b
        load, _, pattern = operand
        vector = self.vector
        lanes = vector.lanes
        saved = self.env[vector.var]
        self.env[vector.var] = self.convert(ir.Constant(self.i64, vector.begin), "int64",
                                            vector.var.dtype)
        self.env[e.var] = self.convert(ir.Constant(self.i64, 0), "int64", e.var.dtype)
        try:
            address = self._address(load.buffer, load.indices)
        finally:
            self.env[vector.var] = saved
            del self.env[e.var]
        bytes_type = ir.VectorType(ir.IntType(8), lanes * 4)
        if pattern == "broadcast":
            word = b.load(b.bitcast(address, ir.PointerType(ir.IntType(32))), align=1)
            if flip:
                word = b.xor(word, ir.Constant(ir.IntType(32), 0x80808080))
            return b.bitcast(self.splat(word, lanes), bytes_type)
        block = b.load(b.bitcast(address, ir.PointerType(bytes_type)), align=1)
        if pattern == "transposed":
            order = [k * lanes + lane for lane in range(lanes) for k in range(4)]
            block = b.shuffle_vector(block, ir.Constant(bytes_type, ir.Undefined), ir.Constant(
                ir.VectorType(ir.IntType(32), lanes * 4), order))
        if flip:
            block = b.xor(block, ir.Constant(bytes_type, [0x80] * (lanes * 4)))
        return block

    def _x86_intrinsic(self, name, result, args):
        fn = self.module.globals.get(name)
        if fn is None:
            fn = self.ir.Function(self.module, self.ir.FunctionType(
                result, [a.type for a in args]), name)
        return self.b.call(fn, args)

    def _vpdpbusd(self, e, acc, plan, lanes):
        """``acc + dot(a, b)`` with AVX-512 VNNI's ``u8 x s8`` instruction. ``s8 x u8`` is
        swapped; ``s8 x s8`` flips the sign bit of one operand (``a + 128`` as u8, preferably
        the broadcast one) and subtracts ``128 x`` the other's four-byte sums, computed by the
        same instruction from a vector of 128s (the same for every accumulator that reads the
        same bytes, so LLVM computes it once per weight vector in a register tile)."""
        ir, builder = self.ir, self.b
        i32v = ir.VectorType(ir.IntType(32), lanes)
        name = f"llvm.x86.avx512.vpdpbusd.{lanes * 32}"
        zero = ir.Constant(i32v, None)
        if acc is None:
            acc = zero
        first, second = plan
        if first[1] and not second[1]:           # s8 x u8: the unsigned one goes first
            first, second = second, first
        elif first[1] and second[1]:             # s8 x s8: flip the broadcast one if any
            if second[2] == "broadcast" and first[2] != "broadcast":
                first, second = second, first
            b = self._dot_operand(e, second)
            bias = ir.Constant(ir.VectorType(ir.IntType(8), lanes * 4), [0x80] * (lanes * 4))
            correction = self._x86_intrinsic(name, i32v, [zero, bias, b])
            a = self._dot_operand(e, first, flip=True)
            return self._x86_intrinsic(name, i32v, [builder.sub(acc, correction), a, b])
        a, b = self._dot_operand(e, first), self._dot_operand(e, second)
        return self._x86_intrinsic(name, i32v, [acc, a, b])

    def _pmaddwd(self, acc, a, b, signed, lanes):
        """``acc + dot(a, b)`` with both operands widened to int16 and multiplied in pairs by
        ``vpmaddwd`` (exact: a pair of 8-bit products sums to at most ``2 * 255 * 255``), on
        512-bit registers (avx512bw) or 256-bit ones (avx2), then each lane's two pair sums
        added. (Reordering the bytes so that each instruction yields whole lanes' halves, to
        skip the even/odd shuffles of the results, measured slower: the broadcast operand then
        needs a word shuffle per accumulator.)"""
        ir, builder = self.ir, self.b
        width = lanes * 4
        wide = ir.VectorType(ir.IntType(16), width)
        a = builder.sext(a, wide) if signed[0] else builder.zext(a, wide)
        b = builder.sext(b, wide) if signed[1] else builder.zext(b, wide)
        chunk = 32 if self.int8_path == "avx512bw" else 16
        name = "llvm.x86.avx512.pmaddw.d.512" if chunk == 32 else "llvm.x86.avx2.pmadd.wd"
        chunk_type = ir.VectorType(ir.IntType(32), chunk // 2)
        undefined = ir.Constant(wide, ir.Undefined)
        pairs = []
        for start in range(0, width, chunk):
            mask = ir.Constant(ir.VectorType(ir.IntType(32), chunk),
                               list(range(start, start + chunk)))
            pairs.append(self._x86_intrinsic(name, chunk_type, [
                builder.shuffle_vector(a, undefined, mask),
                builder.shuffle_vector(b, undefined, mask)]))
        while len(pairs) > 1:   # concatenate, in order
            joined = []
            for first, second in zip(pairs[0::2], pairs[1::2]):
                count = _lanes(first) * 2
                joined.append(builder.shuffle_vector(first, second, ir.Constant(
                    ir.VectorType(ir.IntType(32), count), list(range(count)))))
            pairs = joined
        sums = pairs[0]   # <2*lanes x i32>: lane l's pair sums at 2l and 2l + 1
        undefined = ir.Constant(sums.type, ir.Undefined)
        even, odd = (builder.shuffle_vector(sums, undefined, ir.Constant(
            ir.VectorType(ir.IntType(32), lanes), list(range(first, 2 * lanes, 2))))
            for first in (0, 1))
        total = builder.add(even, odd)
        return total if acc is None else builder.add(acc, total)

    # ---------------------------------------------------------------- statements

    def stmt(self, s):
        handler = self.stmt_table.get(type(s))
        if handler is None:
            raise CompileError(f"{self.where()}: the LLVM backend cannot compile statement "
                               f"{type(s).__name__}")
        handler(s)

    def _seq(self, s):
        for stmt in s.stmts:
            self.stmt(stmt)

    def _store(self, s):
        ir, b = self.ir, self.b
        value = self.expr(s.value)
        align = max(1, np.dtype(s.buffer.dtype).itemsize)
        vector = self.vector
        if vector is not None and _lanes(value) is None:
            value = self.splat(value, vector.lanes)
        if s.buffer.dtype == "bool":
            value = b.zext(value, self._like(value, ir.IntType(8)))
        if vector is None:
            b.store(value, self._address(s.buffer, s.indices), align=align)
            return
        contiguous, where = self._lane_access(s.buffer, s.indices)
        if contiguous:
            b.store(value, b.bitcast(where, ir.PointerType(value.type)), align=align)
            return
        pointer = self._pointer(s.buffer)
        for lane in range(vector.lanes):  # a scatter, in lane order
            index = ir.Constant(ir.IntType(32), lane)
            address = b.gep(pointer, [b.extract_element(where, index)], inbounds=True)
            b.store(b.extract_element(value, index), address, align=align)

    def _let(self, s):
        value = self.expr(s.value)
        if s.var in self.env:
            raise CompileError(f"{self.where()}: variable {s.var.name} is bound twice")
        self.env[s.var] = value
        known = value_range(s.value, self.ranges)
        if known is not None:
            self.ranges[s.var] = known
        self.stmt(s.body)
        del self.env[s.var]
        self.ranges.pop(s.var, None)

    def _if(self, s):
        b = self.b
        cond = self.expr(s.cond)
        if self.unrolled and NUMBERING and self._hoistable(s):
            # in unrolled code the guarded stores' values share most of their terms (the
            # outputs of a partial Winograd tile): computed before the branch, where they
            # dominate the other copies, instead of once inside each guarded block
            self.expr(s.then_case.value)
        then_block = b.append_basic_block("then")
        else_block = b.append_basic_block("else") if s.else_case is not None else None
        done = b.append_basic_block("if_end")
        b.cbranch(cond, then_block, else_block or done)
        b.position_at_end(then_block)
        b.push()
        self.stmt(s.then_case)
        b.branch(done)
        b.pop()
        if else_block is not None:
            b.position_at_end(else_block)
            b.push()
            self.stmt(s.else_case)
            b.branch(done)
            b.pop()
        b.position_at_end(done)

    def _hoistable(self, s) -> bool:
        """Whether the value that ``if`` statement ``s`` stores may be computed before its
        branch: one store and no ``else``, and every load of the value proven in bounds (it
        reads nothing the program could not have read; division and the rest are total)."""
        if s.else_case is not None or not isinstance(s.then_case, L.Store):
            return False
        value = s.then_case.value
        known = self.loads.get(id(value))
        if known is None:
            loads, stack, seen = [], [value], set()
            while stack:
                node = stack.pop()
                if id(node) in seen:
                    continue
                seen.add(id(node))
                if isinstance(node, (L.Call, L.DotSum)):
                    loads = None
                    break
                if isinstance(node, L.Load):
                    loads.append(node)
                stack.extend(L.children(node))
            known = self.loads[id(value)] = (loads, value)
        loads = known[0]
        if loads is None:
            return False
        for load in loads:
            deps = self.deps.get(id(load)) or self._dependencies(load)
            key = (id(load),) + tuple(self.ranges.get(v) for v in deps[0])
            proven = self.proven.get(key)
            if proven is None:
                proven = self.proven[key] = self.in_bounds(load.buffer, load.indices)
            if not proven:
                return False
        return True

    def _allocate(self, s):
        ir, buf = self.ir, s.buffer
        elem = _memory_type(buf.dtype)
        nbytes = buf.size * np.dtype(buf.dtype).itemsize
        align = max(64, np.dtype(buf.dtype).itemsize)
        if nbytes <= STACK_LIMIT_BYTES:
            pointer = self.entry_builder.alloca(elem, size=ir.Constant(self.i64, max(1, buf.size)),
                                                name=buf.name)
            pointer.align = align
            self.pointers[buf] = pointer
            self.b.buffer(pointer)
            self.stmt(s.body)
            del self.pointers[buf]
            return
        i8p = ir.PointerType(ir.IntType(8))
        malloc = self.module.globals.get("malloc") or ir.Function(
            self.module, ir.FunctionType(i8p, [self.i64]), "malloc")
        free = self.module.globals.get("free") or ir.Function(
            self.module, ir.FunctionType(ir.VoidType(), [i8p]), "free")
        raw = self.b.call(malloc, [ir.Constant(self.i64, nbytes)], name=buf.name + "_raw")
        self.pointers[buf] = self.b.bitcast(raw, ir.PointerType(elem), name=buf.name)
        self.b.buffer(self.pointers[buf])
        self.stmt(s.body)
        del self.pointers[buf]
        self.b.call(free, [raw])

    def _for(self, s):
        if s.var in self.env:
            raise CompileError(f"{self.where()}: loop variable {s.var.name} is bound twice")
        begin = self.convert(self.expr(s.begin), s.begin.dtype, "int64")
        if (s.kind == "unrolled" and isinstance(s.begin, L.IntImm)
                and isinstance(s.extent, L.IntImm) and s.extent.value <= UNROLL_LIMIT):
            self.unrolled += 1
            for value in range(s.begin.value, s.begin.value + s.extent.value):
                self.env[s.var] = self.convert(self.ir.Constant(self.i64, value), "int64",
                                               s.var.dtype)
                self.ranges[s.var] = (value, value)
                self.stmt(s.body)
            self.unrolled -= 1
            del self.env[s.var]
            self.ranges.pop(s.var, None)
            return
        self._bind_range(s.var, s.begin, s.extent)
        try:
            if s.kind == "vectorized" and self.vector is None:
                # the same loop comes again in each iteration of unrolled loops around it;
                # its plan depends on the loop alone
                known = self.plans.get(id(s))
                if known is None:
                    known = self.plans[id(s)] = (_VectorLoop.plan(s), s)
                plan = known[0]
                if plan is not None:
                    self._vector_loop(s, plan)
                    return
            extent = self.convert(self.expr(s.extent), s.extent.dtype, "int64")
            end = self.b.add(begin, extent)
            hints = {"vectorized": [("llvm.loop.vectorize.enable", True)],
                     "unrolled": [("llvm.loop.unroll.enable", None)]}.get(s.kind)
            self._loop(s, begin, end, hints)
        finally:
            self.ranges.pop(s.var, None)

    def _bind_range(self, var, begin, extent):
        """Record the range of loop variable ``var`` (for proving loads in bounds), when the
        ranges of the loop's begin and extent are known."""
        first, count = value_range(begin, self.ranges), value_range(extent, self.ranges)
        if first is not None and count is not None and count[1] >= 1:
            self.ranges[var] = (first[0], first[1] + count[1] - 1)

    def _vector_loop(self, s, plan: _VectorLoop):
        """The loop's iterations as one straight-line pass over ``<lanes x T>`` values."""
        ir = self.ir
        ramp = ir.Constant(ir.VectorType(self.i64, plan.lanes),
                           [plan.begin + lane for lane in range(plan.lanes)])
        self.vector = plan
        self.env[s.var] = self.convert(ramp, "int64", s.var.dtype)
        self.ranges[s.var] = (plan.begin, plan.begin + plan.lanes - 1)
        try:
            self.stmt(s.body)
        finally:
            self.vector = None
            del self.env[s.var]

    def _loop(self, s, begin, end, hints):
        ir, b = self.ir, self.b
        counter = self.entry_builder.alloca(self.i64, name=s.var.name + "_counter")
        b.store(begin, counter)
        header = b.append_basic_block(s.var.name + "_header")
        body = b.append_basic_block(s.var.name + "_body")
        exit_block = b.append_basic_block(s.var.name + "_exit")
        b.branch(header)
        b.position_at_end(header)
        index = b.load(counter)
        b.cbranch(b.icmp_signed("<", index, end), body, exit_block)
        b.position_at_end(body)
        b.push()
        b.forget_loads()   # what an earlier iteration stored is read again
        self.env[s.var] = self.convert(index, "int64", s.var.dtype)
        self.stmt(s.body)
        del self.env[s.var]
        b.store(b.add(index, ir.Constant(self.i64, 1)), counter)
        latch = b.branch(header)
        b.pop()
        if hints:
            latch.set_metadata("llvm.loop", self._loop_metadata(hints))
        b.position_at_end(exit_block)

    def _loop_metadata(self, hints):
        """A self-referencing loop id ``!N = !{!N, !{!"hint", value}, ...}``."""
        ir = self.ir
        self.loop_count += 1
        properties = []
        for name, value in hints:
            operands = [ir.MetaDataString(self.module, name)]
            if value is not None:
                operands.append(ir.Constant(ir.IntType(1), int(value)))
            properties.append(self.module.add_metadata(operands))
        placeholder = ir.MetaDataString(self.module, f"rb.loop.{self.loop_count}")
        loop_id = self.module.add_metadata([placeholder] + properties)
        loop_id.operands = (loop_id,) + tuple(loop_id.operands[1:])
        return loop_id


class CompiledKernel:
    """A PrimFunc compiled for the host CPU, called with numpy arrays (one per parameter).

    Outputs are written in place. ``source("loops" | "llvm" | "asm")`` shows the loop IR, the
    optimized LLVM IR and the assembly. ``num_threads`` (per call or at build) overrides
    ``RB_NUM_THREADS`` for a parallel kernel. ``bind(*arrays)`` checks the arrays once and
    returns a function of no arguments that runs the kernel on them.

    ``kernel`` is a :class:`.runtime.Kernel`, or a :class:`.runtime.PhasedKernel` when the
    function was compiled in phases (``phased``; see :func:`build_kernel`).
    """

    def __init__(self, func, compiled, kernel: Kernel, key_text: str | None,
                 name: str | None = None):
        self._func = func        # the PrimFunc, or a function of no arguments making it
        self.name = name if name is not None else func.name
        self.compiled_module = compiled
        self.kernel = kernel
        self._key_text = key_text

    @property
    def func(self) -> L.PrimFunc:
        """The kernel's loop IR (lowered again on first use for a kernel made from a manifest:
        :func:`kernel_from_manifest`)."""
        if not isinstance(self._func, L.PrimFunc):
            self._func = self._func()
        return self._func

    @property
    def parallel_extent(self):
        return self.kernel.parallel_extent

    @property
    def phased(self) -> bool:
        return isinstance(self.kernel, PhasedKernel)

    def __call__(self, *arrays, num_threads: int | None = None) -> None:
        self.kernel(*arrays, num_threads=num_threads)

    def bind(self, *arrays, num_threads: int | None = None):
        """Check ``arrays`` (one per parameter) now; return a function of no arguments that
        runs the kernel on them, with the thread count fixed now. The arrays must not be
        resized or freed meanwhile (the function keeps references to them)."""
        return self.kernel.bind(*arrays, num_threads=num_threads)

    def source(self, kind: str = "loops") -> str:
        if kind == "loops":
            return L.to_text(self.func)
        return self.compiled_module.source(kind)

    def __repr__(self) -> str:
        return f"CompiledKernel({self.kernel!r})"

    def _repr_pretty_(self, printer, cycle):
        printer.text(self.source("loops"))

    def _repr_html_(self) -> str:
        from ...viz.html import html
        return html(self)


def _phases(func: L.PrimFunc, parallel: bool):
    """``(temporaries, nests)`` when ``func`` compiles in phases, else None: its body is
    top-level allocations around a sequence of statements, one of them a parallel loop."""
    if not parallel:
        return None
    body, temporaries = func.body, []
    while isinstance(body, L.Allocate):
        temporaries.append(body.buffer)
        body = body.body
    if not isinstance(body, L.SeqStmt):
        return None
    stmts = list(body.stmts)
    if not any(_is_parallel(n) for n in stmts):
        return None
    nests, serial = [], []
    for stmt in stmts:  # each parallel loop alone; the statements between, one phase each run
        if _is_parallel(stmt):
            if serial:
                nests.append(L.seq(*serial))
                serial = []
            nests.append(stmt)
        else:
            serial.append(stmt)
    if serial:
        nests.append(L.seq(*serial))
    return temporaries, nests


def _is_parallel(stmt) -> bool:
    return isinstance(stmt, L.For) and stmt.kind == "parallel"


def _parallel_extent(func, loop) -> int:
    if not isinstance(loop.extent, L.IntImm):
        raise CompileError(f"kernel {func.name}: the parallel loop {loop.var.name} needs a "
                           "constant extent")
    return int(loop.extent.value)


def _entry_trampoline(module, fn) -> None:
    """``<fn>_entry(i64 *args, i64 begin, i64 end)``: ``fn`` called with ``args[k]`` as its
    ``k``-th pointer, the one shape every parallel kernel has for the spinning thread pool
    (:mod:`.spinpool`)."""
    ir = _ir()
    i64 = ir.IntType(64)
    entry = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType(i64), i64, i64]),
                        fn.name + "_entry")
    args, begin, end = entry.args
    b = ir.IRBuilder(entry.append_basic_block("entry"))
    pointers = [b.inttoptr(b.load(b.gep(args, [ir.Constant(i64, k)])), arg.type)
                for k, arg in enumerate(fn.args[:-2])]
    b.call(fn, pointers + [begin, end])
    b.ret_void()


class KernelPlan:
    """What compiling one PrimFunc needs before LLVM runs: its function builders (one per phase),
    the temporaries of a phased kernel, the text its cache key is made of, and ``generate()``,
    which makes the LLVM module (only when the kernel is in no cache)."""

    def __init__(self, func: L.PrimFunc, parallel: bool = True):
        ir = _ir()
        self.ir = ir
        self.func = func
        self.parallel = parallel
        loops_text = L.to_text(func)
        self.module = ir.Module(name=func.name)
        self.phases = phases = _phases(func, parallel)
        if phases is None:
            self.builders = [_FunctionBuilder(func, self.module, parallel)]
            self.temporaries = []
        else:
            self.temporaries, nests = phases
            params = tuple(func.params) + tuple(self.temporaries)
            self.builders = [_FunctionBuilder(func, self.module, parallel, name=f"kernel_{k}",
                                              body=nest, params=params, aligned=len(func.params))
                             for k, nest in enumerate(nests)]
        shape = "phases" if phases is not None else (
            f"parallel={self.builders[0].parallel_loop is not None}")
        self.key_text = (f"{_CODEGEN_VERSION}\n{shape}\nwide={self.builders[0].vectorize_wide}\n"
                         f"int8={self.builders[0].int8_path}\n{loops_text}")
        self._generated = False
        self.shared: SharedPhases | None = None  # set by share_phases: the module it is part of
        self._phase_keys = None

    @property
    def module_key(self) -> str:
        """The cache key text of the module holding this kernel's code: its own
        :attr:`key_text`, or its :class:`SharedPhases` module's."""
        return self.key_text if self.shared is None else self.shared.key_text

    def module_generate(self):
        """The LLVM module holding this kernel's functions (its own, or the shared one)."""
        return self.generate() if self.shared is None else self.shared.generate()

    @property
    def phase_names(self) -> list:
        """The name of each phase's function (one function for an unphased kernel) in the
        module :meth:`module_generate` makes."""
        if self.shared is None:
            return [builder.fn.name for builder in self.builders]
        prefix = self.shared.prefix(self)
        return [prefix + builder.fn.name for builder in self.builders]

    def phase_keys(self) -> list | None:
        """For a phased kernel of static shapes, ``(text length, key, positions)`` per phase:
        the key is the phase's printed loop IR with the buffers it reads or writes (name, shape,
        dtype, parameter or temporary) and whether it is parallel, the same for the same code;
        ``positions`` are those buffers' places among the parameters then the temporaries.
        None for any other kernel."""
        if self._phase_keys is None:
            self._phase_keys = False
            if self.phases is not None and not L.size_vars_of(self.func.params):
                temporaries, nests = self.phases
                params = tuple(self.func.params) + tuple(temporaries)
                inputs = len(self.func.params)
                keys = []
                for builder, nest in zip(self.builders, nests):
                    used = _buffers_used(nest)
                    positions = [j for j, b in enumerate(params) if b in used]
                    buffers = ";".join(
                        f"{'t' if j >= inputs else 'p'} {params[j].name} "
                        f"{params[j].shape} {params[j].dtype}" for j in positions)
                    text = L.to_text(nest)
                    keys.append((len(text), f"{buffers}\nparallel="
                                 f"{builder.parallel_loop is not None}\n{text}", positions))
                self._phase_keys = keys
        return self._phase_keys or None

    def generate(self):
        """The LLVM module with the function bodies (made once; most of the time of a build
        whose kernels are all cached would go here, so it is made only on a miss)."""
        return _generate_once(self, f"kernel {self.func.name}", self._fill)

    def _fill(self):
        for builder in self.builders:
            builder.build()
            if builder.parallel_loop is not None:
                _entry_trampoline(self.module, builder.fn)
        _mark_vector_code(self.module, self.builders)
        return self.module


def _no_nan_constant(value) -> bool:
    """Whether ``value`` is an LLVM float constant (a scalar or a vector's elements) holding no
    NaN."""
    constant = _ir().Constant
    if not isinstance(value, constant):
        return False
    elements = value.constant if isinstance(value.constant, (list, tuple)) else [value]
    for element in elements:
        number = element.constant if isinstance(element, constant) else element
        if not isinstance(number, (int, float)) or number != number:
            return False
    return True


def _generate_once(owner, what: str, fill):
    """``fill()``'s module, made once per ``owner`` (kept in its ``_generated``); a failure is
    kept too and raised again on every call, llvmlite's rejections as a :class:`CompileError`
    naming ``what``."""
    state = owner._generated
    if state is not False:
        if isinstance(state, BaseException):
            raise state
        return state
    try:
        owner._generated = fill()
    except (TypeError, ValueError, AttributeError) as err:  # llvmlite rejects a construct
        owner._generated = CompileError(f"{what}: LLVM code generation failed: {err}")
        raise owner._generated from err
    except BaseException as err:
        owner._generated = err
        raise
    return owner._generated


def _mark_vector_code(module, builders) -> None:
    """Mark ``module`` as vector code (:data:`NO_SLP`) when all float arithmetic and every
    store to a buffer of its ``builders`` is: the SLP vectorizer, which packs scalar operations
    into vectors, finds nothing to pack (the object code is the same) and costs a fifth of
    LLVM's time on large straight-line kernels."""
    if all(builder.b.scalar_work == 0 for builder in builders):
        module.add_named_metadata("rb.options", [_ir().MetaDataString(module, NO_SLP)])


SHARE_MIN_TEXT = 1000
"""A phase whose printed loop IR is at least this many characters long, found the same (the same
loops over the same buffers) in other kernels compiled together, makes those kernels one module
(:func:`share_phases`); smaller phases (a padding copy) compile too fast to be worth it."""

SHARE_MAX_KERNELS = 4
"""At most this many kernels share one module, so that a build's modules still spread over the
compiling processes."""


def _buffers_used(stmt) -> set:
    """The buffers ``stmt`` loads or stores, but those it allocates itself."""
    found, local = set(), set()
    for node in _nodes(stmt):
        if isinstance(node, (L.Load, L.Store)):
            found.add(node.buffer)
        elif isinstance(node, L.Allocate):
            local.add(node.buffer)
    return found - local


def may_share(plan: KernelPlan) -> bool:
    """Whether :func:`share_phases` could put ``plan`` in a module with other kernels (it has a
    phase of at least :data:`SHARE_MIN_TEXT` characters): a plan that cannot is its own module
    whatever else the build compiles, and may be compiled before the rest is lowered."""
    if plan.shared is not None:
        return True
    keys = plan.phase_keys()
    return bool(keys) and any(length >= SHARE_MIN_TEXT for length, _, _ in keys)


def share_phases(plans: Sequence[KernelPlan]) -> list:
    """Put kernels that have a large phase in common into one module each, the common phases
    compiled once; returns the :class:`SharedPhases` made.

    Two kernels of one layer that differ only in what follows the layer (ResNet-18's Winograd
    convolutions with and without the residual ``add``) have the same padding, input transform
    and products, three of their four phases and most of their compile time. A phase of at
    least :data:`SHARE_MIN_TEXT` characters of loop IR found in several plans (same text, same
    buffers, see :meth:`KernelPlan.phase_keys`) groups them, up to :data:`SHARE_MAX_KERNELS` a
    module, in the order given. A plan already in a module, one without phases or with symbolic
    shapes, is left as it is.
    """
    keyed = [(plan, plan.phase_keys()) for plan in plans if plan.shared is None]
    keyed = [(plan, keys) for plan, keys in keyed if keys]
    seen: dict = {}   # large phase key -> the plans having it, in order
    for plan, keys in keyed:
        for length, key, _ in keys:
            if length >= SHARE_MIN_TEXT:
                users = seen.setdefault(key, [])
                if not users or users[-1] is not plan:
                    users.append(plan)
    groups: list = []
    for plan, keys in keyed:
        if plan.shared is not None:
            continue
        group = [plan]
        for length, key, _ in keys:
            for other in seen.get(key, ()) if length >= SHARE_MIN_TEXT else ():
                if other not in group and other.shared is None and \
                        len(group) < SHARE_MAX_KERNELS:
                    group.append(other)
        if len(group) > 1:
            shared = SharedPhases(group)
            for member in group:
                member.shared = shared
            groups.append(shared)
    return groups


class SharedPhases:
    """One LLVM module for several phased kernels (:func:`share_phases`): each phase found in
    more than one of them is one internal function taking only the buffers it uses, called by a
    small function per kernel that has the kernel's own arguments (``k<i>_kernel_<n>``, what
    the kernel's manifest names); the other phases are the kernels' own functions, prefixed the
    same way. Its cache key is its kernels' keys together, so it is found again when the same
    kernels are compiled together."""

    def __init__(self, plans: Sequence[KernelPlan]):
        self.plans = list(plans)
        self.name = "+".join(plan.func.name for plan in self.plans)
        self.key_text = "shared phases\n" + "\n".join(plan.key_text for plan in self.plans)
        self.origin = None   # where the build found the module (set by the build, for its view)
        self._generated = False

    def prefix(self, plan: KernelPlan) -> str:
        return f"k{self.plans.index(plan)}_"

    def generate(self):
        """The module (made once)."""
        return _generate_once(self, f"kernels {self.name}", self._fill)

    def _fill(self):
        ir = _ir()
        module = ir.Module(name=self.name)
        counts: dict = {}
        for plan in self.plans:
            for _, key, _ in plan.phase_keys():
                counts[key] = counts.get(key, 0) + 1
        common: dict = {}   # phase key -> its shared function
        builders = []
        for plan in self.plans:
            temporaries, nests = plan.phases
            params = tuple(plan.func.params) + tuple(temporaries)
            inputs = len(plan.func.params)
            prefix = self.prefix(plan)
            for k, (nest, (_, key, positions)) in enumerate(zip(nests, plan.phase_keys())):
                name = f"{prefix}kernel_{k}"
                if counts[key] < 2:
                    builder = _FunctionBuilder(plan.func, module, True, name=name, body=nest,
                                               params=params, aligned=inputs)
                    builder.build()
                    builders.append(builder)
                    fn = builder.fn
                else:
                    if key not in common:
                        builder = _FunctionBuilder(
                            plan.func, module, True, name=f"shared_{len(common)}", body=nest,
                            params=[params[j] for j in positions],
                            aligned=sum(1 for j in positions if j < inputs))
                        builder.build()
                        builder.fn.linkage = "internal"
                        builder.fn.attributes.add("noinline")
                        builders.append(builder)
                        common[key] = builder.fn
                    fn = _forwarder(module, name, common[key], params, positions,
                                    parallel=plan.builders[k].parallel_loop is not None)
                if plan.builders[k].parallel_loop is not None:
                    _entry_trampoline(module, fn)
        _mark_vector_code(module, builders)
        return module


def _forwarder(module, name: str, target, params, positions, parallel: bool):
    """``name(every parameter, [begin, end])`` calling ``target`` with the parameters at
    ``positions`` (and ``begin, end`` for a parallel phase)."""
    ir = _ir()
    i64 = ir.IntType(64)
    types = [ir.PointerType(_memory_type(b.dtype)) for b in params] + ([i64, i64] if parallel
                                                                        else [])
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), types), name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    args = [fn.args[j] for j in positions] + (list(fn.args[-2:]) if parallel else [])
    b.call(target, args)
    b.ret_void()
    return fn


def compile_ahead(plans: Sequence[KernelPlan], cache: bool = True, stream=None) -> dict:
    """Compile the kernels of ``plans`` that no cache holds, on several cores at once (see
    :meth:`.jit.JIT.compile_ahead`); :func:`build_kernel` with each plan then loads them.
    Kernels with the same large phases are first put into shared modules
    (:func:`share_phases`). ``stream`` (:meth:`.jit.JIT.stream`) compiles the plans handed to
    it already (:func:`may_share` false for each) and is ended here. Returns
    ``{plan.key_text: LLVM seconds}`` of those compiled (a shared module's seconds split evenly
    among its kernels)."""
    from .jit import get_jit
    share_phases(plans)
    jobs, members = [], {}
    for plan in plans:
        if plan.module_key not in members:
            name = plan.func.name if plan.shared is None else plan.shared.name
            jobs.append((plan.module_generate, plan.module_key, name))
        members.setdefault(plan.module_key, []).append(plan.key_text)
    # the largest first (by their loop IR, which LLVM's time follows): the helpers start on
    # the long compiles and the short ones even out the end
    jobs.sort(key=lambda job: -len(job[1]))
    seconds = get_jit().compile_ahead(jobs, cache=cache, stream=stream)
    # a shared module's time is split among its kernels (a stream may have compiled modules of
    # no plan: the graph executor's thread pool)
    return {key_text: spent / len(members[key])
            for key, spent in seconds.items() for key_text in members.get(key, ())}


def build_kernel(func: L.PrimFunc, parallel: bool = True, *,
                 num_threads: int | None = None, cache: bool = True,
                 plan: KernelPlan | None = None) -> CompiledKernel:
    """Compile ``func`` for the host CPU.

    ``parallel=False`` runs an outermost ``parallel`` loop serially in one call. Raises
    :class:`~relaybench.errors.CompileError` naming the kernel when a node cannot be compiled.
    ``plan`` is ``KernelPlan(func, parallel)`` made already (for :func:`compile_ahead`).

    A body made of top-level ``allocate`` statements around a sequence of statements, at least
    one of them a ``parallel`` loop, compiles in phases (see the module's text): the kernel is
    then a :class:`.runtime.PhasedKernel`, ``parallel_extent`` gives each phase's extent (None
    for a serial one), and one kernel's calls must not overlap in time, since its temporaries
    are shared.
    """
    if plan is None or plan.func is not func or plan.parallel != parallel:
        plan = KernelPlan(func, parallel)
    phases, builders, temporaries = plan.phases, plan.builders, plan.temporaries
    name = func.name if plan.shared is None else plan.shared.name
    compiled = compile_module(plan.module_generate, key=plan.module_key, name=name, cache=cache)
    stored = _stored_buffers(func.body)
    # a symbolic extent accepts any size here; the caller checks it against the sizes it passes
    manifest = {
        "digest": compiled.key,
        "params": [[b.name, [d if isinstance(d, int) else None for d in b.shape], b.dtype,
                    b in stored] for b in func.params],
        "phases": [[fn_name, None if builder.parallel_loop is None
                    else _parallel_extent(func, builder.parallel_loop)]
                   for fn_name, builder in zip(plan.phase_names, builders)],
        "temporaries": None if phases is None else [[b.name, list(b.shape), b.dtype]
                                                     for b in temporaries],
    }
    if plan.shared is not None:  # the kernel's own key, for checking a lowering made again
        from .cache import cache_key
        manifest["key"] = cache_key(plan.key_text, host_target().identity)
        manifest["shared_with"] = [p.func.name for p in plan.shared.plans if p is not plan]
    kernel = _kernel_of(func.name, compiled, manifest, num_threads)
    result = CompiledKernel(func, compiled, kernel, plan.key_text)
    result.manifest = manifest
    return result


def _kernel_of(name: str, compiled, manifest: dict, num_threads: int | None):
    """The runtime kernel of a compiled module, as its manifest (made by :func:`build_kernel`)
    describes it: the parameters' specs, the functions of its phases, its temporaries."""
    specs = [TensorSpec(n, tuple(shape), dtype, output=output)
             for n, shape, dtype, output in manifest["params"]]
    temporaries = manifest["temporaries"]
    runs = []
    for fn_name, extent in manifest["phases"]:
        argtypes = [ctypes.c_void_p] * (len(specs) + len(temporaries or ()))
        if extent is not None:
            argtypes += [ctypes.c_int64, ctypes.c_int64]
        entry = compiled.address(fn_name + "_entry") if extent is not None else None
        runs.append(Phase(fn_name, compiled.function(fn_name, argtypes), extent, entry))
    if temporaries is None:
        return Kernel(name, runs[0].function, specs, parallel_extent=runs[0].parallel_extent,
                      num_threads=num_threads, entry=runs[0].entry)
    return PhasedKernel(name, runs, specs, [(n, tuple(shape), dtype)
                                            for n, shape, dtype in temporaries],
                        num_threads=num_threads)


def kernel_from_manifest(manifest: dict, name: str, func, *, num_threads: int | None = None):
    """The :class:`CompiledKernel` that :func:`build_kernel` made, from its ``manifest`` (its
    ``manifest`` attribute) and the object code in the kernel cache, without the PrimFunc or
    LLVM: None when no cache holds the code. ``func`` is the PrimFunc or a function of no
    arguments returning it, called only when something asks for it (the loop IR's text)."""
    from .jit import get_jit
    compiled = get_jit().load_cached(manifest["digest"], name)
    if compiled is None:
        return None
    result = CompiledKernel(func, compiled, _kernel_of(name, compiled, manifest, num_threads),
                            None, name=name)
    result.manifest = manifest
    return result
