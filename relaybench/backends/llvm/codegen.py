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
* ``select`` becomes an LLVM ``select`` when neither side loads from memory, else a branch and a
  phi, so that only the chosen side reads (padding reads out of bounds on the other side). ``and``
  and ``or`` short-circuit the same way when their right side loads.
* Loops: ``serial`` is a plain loop; ``unrolled`` is emitted ``extent`` times when the extent is a
  constant of at most 16, else marked with ``llvm.loop.unroll.enable``; ``vectorized`` is marked
  with ``llvm.loop.vectorize.enable`` and the function asks for 512-bit vectors on AVX-512 hosts;
  ``parallel`` as the outermost statement makes the function take ``int64 begin, int64 end`` and
  run only that range (the runtime's convention), and the kernel is called on every core through
  the runtime's thread pool (``RB_NUM_THREADS``). Parallel loops further in run serially.
* ``allocate``: temporaries of at most 64 KiB live on the stack (one ``alloca`` in the entry
  block, so also per thread); larger ones are taken with ``malloc`` and given back with ``free``
  when their statement ends. Both are resolved by the JIT from the running process.
* Math intrinsics: LLVM's (``llvm.exp``, ``llvm.log``, ``llvm.sqrt``, ``llvm.fabs``,
  ``llvm.floor``, ``llvm.ceil``, ``llvm.roundeven`` for numpy's half-to-even ``round``,
  ``llvm.pow``, ...); ``tanh`` and ``erf`` call the C library (``tanhf``/``tanh``, ``erff``/``erf``)
  for full accuracy; ``sigmoid`` is ``1 / (1 + exp(-x))`` and ``rsqrt`` is ``1 / sqrt(x)``.
* ``bool`` values are ``i1`` in registers and one byte in memory, as in numpy.

Buffers are assumed not to overlap (``noalias``): passing one array as two arguments is not
supported.

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

import numpy as np

from ...errors import CompileError
from ...te import loop_ir as L
from .jit import compile_module, host_target, prefer_vector_width
from .runtime import Kernel, TensorSpec

__all__ = ["build_kernel", "CompiledKernel", "STACK_LIMIT_BYTES", "UNROLL_LIMIT"]

STACK_LIMIT_BYTES = 64 * 1024
"""Temporaries up to this size live on the stack; larger ones are malloc'd."""

UNROLL_LIMIT = 16
"""An ``unrolled`` loop with a constant extent up to this is emitted body by body."""

_CODEGEN_VERSION = "codegen-1"


def _ir():
    try:
        from llvmlite import ir
    except ImportError:
        raise ImportError("the LLVM backend needs llvmlite: install the extra with "
                          "`pip install 'relaybench[llvm]'`") from None
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


def _has_load(expr) -> bool:
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, L.Load):
            return True
        L.map_children(node, lambda child: stack.append(child) or child)
    return False


def _stored_buffers(stmt) -> set:
    found, stack = set(), [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, L.Store):
            found.add(node.buffer)
        L.map_children(node, lambda child: stack.append(child) or child)
    return found


_LLVM_INTRINSICS = {
    "exp": "llvm.exp", "log": "llvm.log", "sqrt": "llvm.sqrt", "abs": "llvm.fabs",
    "floor": "llvm.floor", "ceil": "llvm.ceil", "round": "llvm.roundeven", "pow": "llvm.pow",
    "sin": "llvm.sin", "cos": "llvm.cos", "log2": "llvm.log2", "exp2": "llvm.exp2",
}
_LIBM = {"tanh": ("tanhf", "tanh"), "erf": ("erff", "erf")}


class _FunctionBuilder:
    """Emits one PrimFunc as one LLVM function; handlers are looked up by node class."""

    def __init__(self, func: L.PrimFunc, module, parallel: bool):
        ir = _ir()
        self.ir = ir
        self.func = func
        self.module = module
        self.i64 = ir.IntType(64)
        self.vectorize_wide = host_target().has_avx512
        self.parallel_loop = None
        body = func.body
        if parallel and isinstance(body, L.For) and body.kind == "parallel":
            self.parallel_loop = body
        arg_types = [ir.PointerType(_memory_type(b.dtype)) for b in func.params]
        if self.parallel_loop is not None:
            arg_types += [self.i64, self.i64]
        self.fn = ir.Function(module, ir.FunctionType(ir.VoidType(), arg_types), "kernel")
        for arg, buf in zip(self.fn.args, func.params):
            arg.name = buf.name
            arg.add_attribute("noalias")
            arg.attributes.align = max(1, np.dtype(buf.dtype).itemsize)
        self.entry = self.fn.append_basic_block("entry")
        start = self.fn.append_basic_block("start")
        self.entry_builder = ir.IRBuilder(self.entry)
        self.b = ir.IRBuilder(start)
        self.pointers = dict(zip(func.params, self.fn.args))
        self.env: dict = {}
        self.loop_count = 0
        self.expr_table = {
            L.IntImm: self._int, L.FloatImm: self._float, L.Var: self._var,
            L.Binary: self._binary, L.Unary: self._unary, L.Select: self._select,
            L.Cast: self._cast, L.Load: self._load, L.Call: self._call,
        }
        self.stmt_table = {
            L.For: self._for, L.Store: self._store, L.LetStmt: self._let,
            L.IfThenElse: self._if, L.SeqStmt: self._seq, L.Allocate: self._allocate,
        }

    def where(self) -> str:
        return f"kernel {self.func.name}"

    def build(self):
        if self.parallel_loop is not None:
            begin_arg, end_arg = self.fn.args[-2:]
            begin_arg.name, end_arg.name = "begin", "end"
            loop = self.parallel_loop
            base = self.expr(loop.begin)
            self._loop(loop, self.b.add(base, begin_arg), self.b.add(base, end_arg), None)
        else:
            self.stmt(self.func.body)
        self.b.ret_void()
        self.entry_builder.branch(self.b.function.blocks[1])
        if self.vectorize_wide:
            prefer_vector_width(self.fn, 512)
        return self.fn

    # ---------------------------------------------------------------- expressions

    def expr(self, e):
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
        if op in ("and", "or") and _has_load(e.b):
            return self._short_circuit(e)
        x, y = self.expr(e.a), self.expr(e.b)
        dtype = e.a.dtype
        if op == "and":
            return b.and_(x, y)
        if op == "or":
            return b.or_(x, y)
        if _is_float(dtype):
            simple = {"+": b.fadd, "-": b.fsub, "*": b.fmul, "/": b.fdiv}
            if op in simple:
                return simple[op](x, y)
            if op in L.COMPARE_OPS:
                return b.fcmp_unordered("!=", x, y) if op == "!=" else b.fcmp_ordered(op, x, y)
            if op == "min":
                return b.select(b.fcmp_ordered("<", y, x), y, x)
            if op == "max":
                return b.select(b.fcmp_ordered(">", y, x), y, x)
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
                return self._floor_div_mod(op, x, y, unsigned)
        raise CompileError(f"{self.where()}: operator {op!r} on {dtype} in {L.to_text(e)}")

    def _floor_div_mod(self, op, x, y, unsigned):
        b = self.b
        if unsigned:
            return b.udiv(x, y) if op == "//" else b.urem(x, y)
        quotient, remainder = b.sdiv(x, y), b.srem(x, y)
        zero = self.ir.Constant(x.type, 0)
        # The truncated result is off by one when the remainder is non-zero and its sign
        # differs from the divisor's.
        adjust = b.and_(b.icmp_signed("!=", remainder, zero),
                        b.icmp_signed("<", b.xor(remainder, y), zero))
        if op == "//":
            return b.sub(quotient, b.zext(adjust, x.type))
        return b.select(adjust, b.add(remainder, y), remainder)

    def _short_circuit(self, e):
        b = self.b
        first = self.expr(e.a)
        start = b.block
        rhs_block = b.append_basic_block("rhs")
        done = b.append_basic_block("logic_end")
        if e.op == "and":
            b.cbranch(first, rhs_block, done)
        else:
            b.cbranch(first, done, rhs_block)
        b.position_at_end(rhs_block)
        second = self.expr(e.b)
        rhs_end = b.block
        b.branch(done)
        b.position_at_end(done)
        phi = b.phi(self.ir.IntType(1))
        phi.add_incoming(self.ir.Constant(self.ir.IntType(1), int(e.op == "or")), start)
        phi.add_incoming(second, rhs_end)
        return phi

    def _unary(self, e):
        x = self.expr(e.a)
        if e.op == "not":
            return self.b.not_(x)
        if _is_float(e.dtype):
            return self.b.fneg(x)
        return self.b.neg(x)

    def _select(self, e):
        b = self.b
        cond = self.expr(e.cond)
        if not (_has_load(e.true_value) or _has_load(e.false_value)):
            return b.select(cond, self.expr(e.true_value), self.expr(e.false_value))
        then_block = b.append_basic_block("select_true")
        else_block = b.append_basic_block("select_false")
        done = b.append_basic_block("select_end")
        b.cbranch(cond, then_block, else_block)
        b.position_at_end(then_block)
        true_value = self.expr(e.true_value)
        then_end = b.block
        b.branch(done)
        b.position_at_end(else_block)
        false_value = self.expr(e.false_value)
        else_end = b.block
        b.branch(done)
        b.position_at_end(done)
        phi = b.phi(_value_type(e.dtype))
        phi.add_incoming(true_value, then_end)
        phi.add_incoming(false_value, else_end)
        return phi

    def _cast(self, e):
        return self.convert(self.expr(e.value), e.value.dtype, e.dtype)

    def convert(self, x, source: str, target: str):
        b = self.b
        if source == target:
            return x
        to = _value_type(target)
        if target == "bool":
            if _is_float(source):
                return b.fcmp_unordered("!=", x, self.ir.Constant(x.type, 0.0))
            return b.icmp_signed("!=", x, self.ir.Constant(x.type, 0))
        if _is_float(source) and _is_float(target):
            width = np.dtype(source).itemsize, np.dtype(target).itemsize
            return b.fpext(x, to) if width[1] > width[0] else b.fptrunc(x, to)
        if _is_float(source):
            return b.fptoui(x, to) if _is_unsigned(target) else b.fptosi(x, to)
        if _is_float(target):
            return b.uitofp(x, to) if _is_unsigned(source) else b.sitofp(x, to)
        if to.width == x.type.width:
            return x
        if to.width < x.type.width:
            return b.trunc(x, to)
        return b.zext(x, to) if _is_unsigned(source) else b.sext(x, to)

    def _address(self, buffer, indices):
        pointer = self.pointers.get(buffer)
        if pointer is None:
            raise CompileError(f"{self.where()}: {buffer.name} is neither a parameter nor "
                               "allocated here")
        values = [self.convert(self.expr(i), i.dtype, "int64") for i in indices]
        flat = values[0]
        if len(values) > 1:
            for value, extent in zip(values[1:], buffer.shape[1:]):
                flat = self.b.add(self.b.mul(flat, self.ir.Constant(self.i64, extent)), value)
        return self.b.gep(pointer, [flat], inbounds=True)

    def _load(self, e):
        address = self._address(e.buffer, e.indices)
        value = self.b.load(address, align=max(1, np.dtype(e.buffer.dtype).itemsize))
        if e.buffer.dtype == "bool":
            value = self.b.trunc(value, self.ir.IntType(1))
        return self.convert(value, e.buffer.dtype, e.dtype)

    def _call(self, e):
        ir, b = self.ir, self.b
        args = [self.expr(a) for a in e.args]
        ty = _value_type(e.dtype)
        if e.name == "abs" and not _is_float(e.dtype):
            x = args[0]
            if _is_unsigned(e.dtype):
                return x
            return b.select(b.icmp_signed("<", x, ir.Constant(ty, 0)), b.neg(x), x)
        if e.name in _LLVM_INTRINSICS:
            fn = self.module.declare_intrinsic(_LLVM_INTRINSICS[e.name], [ty])
            return b.call(fn, args)
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
        one = ir.Constant(ty, 1.0)
        if e.name == "rsqrt":
            root = b.call(self.module.declare_intrinsic("llvm.sqrt", [ty]), args)
            return b.fdiv(one, root)
        if e.name == "sigmoid":
            exp = b.call(self.module.declare_intrinsic("llvm.exp", [ty]), [b.fneg(args[0])])
            return b.fdiv(one, b.fadd(one, exp))
        raise CompileError(f"{self.where()}: no LLVM lowering for intrinsic {e.name}")

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
        value = self.expr(s.value)
        if s.buffer.dtype == "bool":
            value = self.b.zext(value, self.ir.IntType(8))
        address = self._address(s.buffer, s.indices)
        self.b.store(value, address, align=max(1, np.dtype(s.buffer.dtype).itemsize))

    def _let(self, s):
        value = self.expr(s.value)
        if s.var in self.env:
            raise CompileError(f"{self.where()}: variable {s.var.name} is bound twice")
        self.env[s.var] = value
        self.stmt(s.body)
        del self.env[s.var]

    def _if(self, s):
        b = self.b
        cond = self.expr(s.cond)
        then_block = b.append_basic_block("then")
        else_block = b.append_basic_block("else") if s.else_case is not None else None
        done = b.append_basic_block("if_end")
        b.cbranch(cond, then_block, else_block or done)
        b.position_at_end(then_block)
        self.stmt(s.then_case)
        b.branch(done)
        if else_block is not None:
            b.position_at_end(else_block)
            self.stmt(s.else_case)
            b.branch(done)
        b.position_at_end(done)

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
        self.stmt(s.body)
        del self.pointers[buf]
        self.b.call(free, [raw])

    def _for(self, s):
        if s.var in self.env:
            raise CompileError(f"{self.where()}: loop variable {s.var.name} is bound twice")
        begin = self.convert(self.expr(s.begin), s.begin.dtype, "int64")
        if (s.kind == "unrolled" and isinstance(s.begin, L.IntImm)
                and isinstance(s.extent, L.IntImm) and s.extent.value <= UNROLL_LIMIT):
            for value in range(s.begin.value, s.begin.value + s.extent.value):
                self.env[s.var] = self.convert(self.ir.Constant(self.i64, value), "int64",
                                               s.var.dtype)
                self.stmt(s.body)
            del self.env[s.var]
            return
        extent = self.convert(self.expr(s.extent), s.extent.dtype, "int64")
        end = self.b.add(begin, extent)
        hints = {"vectorized": [("llvm.loop.vectorize.enable", True)],
                 "unrolled": [("llvm.loop.unroll.enable", None)]}.get(s.kind)
        self._loop(s, begin, end, hints)

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
        self.env[s.var] = self.convert(index, "int64", s.var.dtype)
        self.stmt(s.body)
        del self.env[s.var]
        b.store(b.add(index, ir.Constant(self.i64, 1)), counter)
        latch = b.branch(header)
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
    ``RB_NUM_THREADS`` for a parallel kernel.
    """

    def __init__(self, func: L.PrimFunc, compiled, kernel: Kernel, key_text: str):
        self.func = func
        self.name = func.name
        self.compiled_module = compiled
        self.kernel = kernel
        self._key_text = key_text

    @property
    def parallel_extent(self):
        return self.kernel.parallel_extent

    def __call__(self, *arrays, num_threads: int | None = None) -> None:
        self.kernel(*arrays, num_threads=num_threads)

    def source(self, kind: str = "loops") -> str:
        if kind == "loops":
            return L.to_text(self.func)
        return self.compiled_module.source(kind)

    def __repr__(self) -> str:
        return f"CompiledKernel({self.kernel!r})"

    def _repr_pretty_(self, printer, cycle):
        printer.text(self.source("loops"))


def build_kernel(func: L.PrimFunc, parallel: bool = True, *,
                 num_threads: int | None = None, cache: bool = True) -> CompiledKernel:
    """Compile ``func`` for the host CPU.

    ``parallel=False`` runs an outermost ``parallel`` loop serially in one call. Raises
    :class:`~relaybench.errors.CompileError` naming the kernel when a node cannot be compiled.
    """
    ir = _ir()
    loops_text = L.to_text(func)
    module = ir.Module(name=func.name)
    builder = _FunctionBuilder(func, module, parallel)
    try:
        builder.build()
    except (TypeError, ValueError, AttributeError) as err:  # llvmlite rejects a construct
        raise CompileError(f"kernel {func.name}: LLVM code generation failed: {err}") from err
    key_text = (f"{_CODEGEN_VERSION}\nparallel={builder.parallel_loop is not None}\n"
                f"wide={builder.vectorize_wide}\n{loops_text}")
    compiled = compile_module(module, key=key_text, name=func.name, cache=cache)
    stored = _stored_buffers(func.body)
    specs = [TensorSpec(b.name, b.shape, b.dtype, output=b in stored) for b in func.params]
    parallel_extent = None
    if builder.parallel_loop is not None:
        extent = builder.parallel_loop.extent
        if not isinstance(extent, L.IntImm):
            raise CompileError(f"kernel {func.name}: the parallel loop "
                               f"{builder.parallel_loop.var.name} needs a constant extent")
        parallel_extent = int(extent.value)
    argtypes = [ctypes.c_void_p] * len(func.params)
    if parallel_extent is not None:
        argtypes += [ctypes.c_int64, ctypes.c_int64]
    function = compiled.function("kernel", argtypes)
    kernel = Kernel(func.name, function, specs, parallel_extent=parallel_extent,
                    num_threads=num_threads)
    return CompiledKernel(func, compiled, kernel, key_text)

