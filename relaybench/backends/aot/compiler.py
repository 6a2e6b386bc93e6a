"""The AoT compiler: the VM's prepared, allocation-explicit program in, one LLVM module out.

Relay's ahead-of-time compiler (``python/tvm/relay/backend/aot``, the 2019 paper's NLP results)
turned a whole program into native code. Here the starting point is the VM's
(:mod:`relaybench.backends.vm.compiler`): the module is optimized, fused, put in A-normal form
and lambda lifted, and each function compiled to register bytecode whose allocations are
explicit (``AllocStorage`` / ``AllocTensor``, with dead blocks already reused). That bytecode is a
small first-order language, so each VM function becomes one LLVM function built with
``llvmlite.ir.IRBuilder``, one instruction at a time (a dispatch table keyed by instruction
class):

========================  =====================================================================
bytecode                  native code
========================  =====================================================================
registers                 ``i64`` stack slots (LLVM's mem2reg turns them into SSA values)
``Invoke``                a direct call; a call of the function itself whose value is returned
                          (through ``Move``/``Goto`` only) is a *self tail call*: the arguments
                          are stored in the parameters and the code jumps back to its start
``InvokePacked``          a direct call of the fused kernel's machine code, through the address
                          of the already JIT-compiled kernel (the same kernels, from the same
                          disk cache, as the graph executor and the VM); a phased kernel calls
                          its phases in order, with its temporaries; a parallel loop is handed
                          to the spinning thread pool from the native code itself
``If`` / ``Goto``         conditional and plain branches; ``match`` is a chain of tag tests
``GetTag`` / ``GetField`` loads from the tagged object
``AllocClosure``          a closure object: code pointer (a wrapper that unpacks the captured
                          values) plus the captured values; ``InvokeClosure`` calls the pointer
``Fatal``                 records the message's number and returns the error value
========================  =====================================================================

Values are tagged objects of ``i64`` words (:data:`HEADER` words, then the fields):

- tensor: ``[1, data address, dtype code, ndim, dim0, dim1, ...]`` (self-describing, so the
  result converts back to numpy without types);
- tuple: ``[2, 0, n, 0, field0, ...]``; ADT object: ``[3, tag, n, constructor number, fields]``;
- closure: ``[4, code address, n, function index, captured...]``; reference: ``[5, 0, 1, 0, v]``.

Memory: every object and storage block of one invocation comes from a per-run arena (a bump
pointer, 64-byte aligned storage), reset when the invocation returns; the arena the largest run
needed is kept, so a long series of runs uses constant memory. A function's dead blocks are
reused inside the run (the VM compiler's
:func:`~relaybench.backends.vm.compiler.plan_storage_reuse`).

Errors never crash: every function starts by comparing its frame's address with a limit (the
native stack given to the run), every allocation checks the arena's end, and every call checks
its callee's result. A failure stores its reason in the run's context and returns 0 up the
chain of calls; Python then grows the arena, or re-runs on a thread with a larger stack, or
raises :class:`~relaybench.errors.ExecutionError` with the message (:mod:`.runtime`).
"""

from __future__ import annotations

import numpy as np

from ...errors import CompileError
from ..vm import bytecode as bc

__all__ = ["KIND_TENSOR", "KIND_TUPLE", "KIND_ADT", "KIND_CLOSURE", "KIND_REF", "HEADER",
           "DTYPES", "ERROR_ARENA", "ERROR_STACK", "ERROR_FATAL", "CTX_WORDS", "emit_program"]

KIND_TENSOR, KIND_TUPLE, KIND_ADT, KIND_CLOSURE, KIND_REF = 1, 2, 3, 4, 5
#: words before an object's fields (a tensor's shape starts at word 4 too)
HEADER = 4
#: dtype codes of tensor objects: the index in this tuple
DTYPES = ("float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "uint16",
          "uint32", "uint64", "bool")
ERROR_ARENA, ERROR_STACK, ERROR_FATAL = 1, 2, 3

# the run's context, an int64 array the entry point is given: word -> meaning
CTX_ARENA, CTX_ARENA_END, CTX_ERROR, CTX_ERROR_INFO, CTX_ERROR_SUBJECT, CTX_STACK_BUDGET, \
    CTX_STACK_LIMIT = range(7)
CTX_WORDS = 8

#: bytes every storage block is aligned to (the kernels' vector loads want 64)
STORAGE_ALIGNMENT = 64

#: floating-point operations below which a kernel's parallel loop runs in one call on the
#: calling thread: handing ranges out and waiting for them costs a few microseconds on an idle
#: machine (far more on a busy one, where the pool's threads wait for a core). An LSTM cell's
#: dense layer at batch 1 (1024 x 256, 0.5 MFLOP, about 12 us on one core) is worth sharing
#: on an idle machine: the 35-step LSTM of bench/nlp.py took 0.59 ms with it shared, 1.10 ms
#: without. Timed with each engine in a process of its own (bench/nlp.py at two threads), a
#: GRU's 768 x 256 layers (0.39 MFLOP) shared took its 35 steps from 0.73 ms to 0.38-0.40 ms,
#: and a 256 x 256 one (0.13 MFLOP) still gains a little; below 0.1 MFLOP (CharRNN's layers)
#: nothing was measured to gain.
PARALLEL_MIN_FLOPS = 100_000


def dtype_code(dtype: str, where: str) -> int:
    try:
        return DTYPES.index(str(dtype))
    except ValueError:
        raise CompileError(f"{where}: AoT has no tensor dtype {dtype}") from None


class _Program:
    """The LLVM module being built: one function per VM function, closure wrappers, entry
    points; ``constants`` holds the static objects (constant tensors, the empty tuple) the code
    refers to by address, ``keep`` what those addresses point into."""

    def __init__(self, exe, static_object, reachable, threads: int = 1):
        from llvmlite import ir
        self.ir = ir
        self.exe = exe
        self.static_object = static_object
        self.module = ir.Module(name="rb_aot_program")
        self.i64 = ir.IntType(64)
        self.i8 = ir.IntType(8)
        self.ctx = ir.GlobalVariable(self.module, self.i64.as_pointer(), "rb_ctx")
        self.ctx.linkage = "internal"
        self.ctx.initializer = ir.Constant(self.i64.as_pointer(), None)
        self.messages: list = []      # Fatal messages, by number
        self.constructors: list = []  # constructor objects, by number
        self._constructor_index: dict = {}
        self.functions = {}
        for index in sorted(reachable):
            func = exe.functions[index]
            fnty = ir.FunctionType(self.i64, [self.i64] * len(func.params))
            fn = ir.Function(self.module, fnty, f"rb_fn{index}_{_symbol(func.name)}")
            fn.linkage = "internal"
            self.functions[index] = fn
        self._wrappers: dict = {}
        self._constant_objects: dict = {}
        self.empty_tuple = static_object([KIND_TUPLE, 0, 0, 0])
        self.threads = threads
        self.pool = None
        if threads > 1:
            from ..llvm.spinpool import _functions, spin_pool
            self.pool = spin_pool(threads)
            self.pool_launch = _functions()["launch"]   # kept: its address is in the code
        self.alloc = self._emit_alloc()

    def constructor_number(self, con) -> int:
        index = self._constructor_index.get(id(con))
        if index is None:
            index = self._constructor_index[id(con)] = len(self.constructors)
            self.constructors.append(con)
        return index

    def constant_object(self, index: int) -> int:
        """The address of the tensor object of constant ``index`` (made once)."""
        address = self._constant_objects.get(index)
        if address is None:
            array = self.exe.constants[index]
            address = self._constant_objects[index] = self.static_object(
                tensor_words(array, f"constant {index}"), keep=array)
        return address

    def const(self, value: int):
        return self.ir.Constant(self.i64, int(value))

    def ctx_word(self, b, word: int):
        return b.gep(b.load(self.ctx), [self.const(word)])

    def _emit_alloc(self):
        """``i64 rb_alloc(i64 size, i64 align)``: the arena's bump pointer; 0 (with the error
        recorded) when the arena is full."""
        ir = self.ir
        fn = ir.Function(self.module, ir.FunctionType(self.i64, [self.i64, self.i64]), "rb_alloc")
        fn.linkage = "internal"
        fn.attributes.add("alwaysinline")
        size, align = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        full = fn.append_basic_block("full")
        fits = fn.append_basic_block("fits")
        top = self.ctx_word(b, CTX_ARENA)
        mask = b.sub(align, self.const(1))
        start = b.and_(b.add(b.load(top), mask), b.not_(mask))
        end = b.add(start, size)
        b.cbranch(b.icmp_unsigned(">", end, b.load(self.ctx_word(b, CTX_ARENA_END))), full, fits)
        b.position_at_end(full)
        b.store(self.const(ERROR_ARENA), self.ctx_word(b, CTX_ERROR))
        b.ret(self.const(0))
        b.position_at_end(fits)
        b.store(end, top)
        b.ret(start)
        return fn

    def wrapper(self, index: int, arity: int):
        """``i64 clo(i64 closure, args...)``: the code pointer of a closure of function
        ``index`` taking ``arity`` arguments; it passes the captured values first."""
        key = (index, arity)
        fn = self._wrappers.get(key)
        if fn is not None:
            return fn
        ir = self.ir
        target = self.functions[index]
        captured = len(target.args) - arity
        fn = ir.Function(self.module, ir.FunctionType(self.i64, [self.i64] * (arity + 1)),
                         f"rb_closure{index}_{arity}")
        fn.linkage = "internal"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        obj = b.inttoptr(fn.args[0], self.i64.as_pointer())
        values = [b.load(b.gep(obj, [self.const(HEADER + k)])) for k in range(captured)]
        b.ret(b.call(target, values + list(fn.args[1:])))
        self._wrappers[key] = fn
        return fn

    def entry(self, index: int):
        """``i64 rb_entry_<name>(i64 *ctx, i64 *args)``, called from Python: sets the context and
        the stack limit (this frame's address less the budget), calls function ``index``."""
        ir = self.ir
        func = self.exe.functions[index]
        p64 = self.i64.as_pointer()
        name = f"rb_entry_{index}"
        fn = ir.Function(self.module, ir.FunctionType(self.i64, [p64, p64]), name)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        ctx, args = fn.args
        b.store(ctx, self.ctx)
        anchor = b.alloca(self.i8)
        here = b.ptrtoint(anchor, self.i64)
        budget = b.load(b.gep(ctx, [self.const(CTX_STACK_BUDGET)]))
        b.store(b.sub(here, budget), b.gep(ctx, [self.const(CTX_STACK_LIMIT)]))
        values = [b.load(b.gep(args, [self.const(k)])) for k in range(len(func.params))]
        b.ret(b.call(self.functions[index], values))
        return name


def _symbol(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def tensor_words(array: np.ndarray, where: str) -> list:
    """The words of the tensor object of ``array`` (its data address taken as it is)."""
    return ([KIND_TENSOR, array.ctypes.data, dtype_code(array.dtype.name, where), array.ndim]
            + [int(d) for d in array.shape])


# ---------------------------------------------------------------------------------------------
# one VM function

def _self_tail_calls(func: bc.VMFunction, index: int) -> set:
    """The program counters of the ``Invoke`` instructions of ``func`` that call ``func`` itself
    and whose value reaches ``Ret`` through ``Move`` and ``Goto`` only."""
    code = func.instructions
    out = set()
    for pc, ins in enumerate(code):
        if not (isinstance(ins, bc.Invoke) and ins.func_index == index):
            continue
        reg, q, seen = ins.dst, pc + 1, 0
        while q < len(code) and seen < len(code):
            nxt = code[q]
            seen += 1
            if isinstance(nxt, bc.Move) and nxt.src == reg:
                reg, q = nxt.dst, q + 1
            elif isinstance(nxt, bc.Goto):
                q += nxt.pc_offset
            elif isinstance(nxt, bc.Ret) and nxt.result == reg:
                out.add(pc)
                break
            else:
                break
    return out


def _integer_registers(func: bc.VMFunction) -> set:
    """Registers holding machine integers (tags, ``LoadConsti``), not objects."""
    ints = set()
    changed = True
    while changed:
        changed = False
        for ins in func.instructions:
            if isinstance(ins, (bc.LoadConsti, bc.GetTag)) and ins.dst not in ints:
                ints.add(ins.dst)
                changed = True
            elif isinstance(ins, bc.Move) and ins.src in ints and ins.dst not in ints:
                ints.add(ins.dst)
                changed = True
    return ints


class _FunctionEmitter:
    def __init__(self, program: _Program, index: int):
        ir = program.ir
        self.program = program
        self.index = index
        self.func = program.exe.functions[index]
        self.fn = program.functions[index]
        self.where = f"@{self.func.name}"
        self.tail_calls = _self_tail_calls(self.func, index)
        self.ints = _integer_registers(self.func)
        self.shape_of_constant = {ins.dst: ins.const_index for ins in self.func.instructions
                                  if isinstance(ins, bc.LoadConst)}
        self.storage_dtype = {}
        self.entry = self.fn.append_basic_block("entry")
        self.fail_block = self.fn.append_basic_block("fail")
        self.blocks = [self.fn.append_basic_block(f"pc{pc}")
                       for pc in range(len(self.func.instructions))]
        self.b = ir.IRBuilder(self.entry)

    def fail(self, what: str) -> CompileError:
        return CompileError(f"{self.where}: AoT cannot compile {what}")

    def run(self) -> None:
        p, b = self.program, self.b
        i64 = p.i64
        self.regs = [b.alloca(i64, name=f"r{k}") for k in range(self.func.num_registers)]
        for k, arg in enumerate(self.fn.args):
            b.store(arg, self.regs[k])
        # the stack check: this frame's address against the run's limit
        anchor = b.alloca(p.i8, name="frame")
        here = b.ptrtoint(anchor, i64)
        deep = b.icmp_unsigned("<", here, b.load(p.ctx_word(b, CTX_STACK_LIMIT)))
        overflow = self.fn.append_basic_block("stack_overflow")
        b.cbranch(deep, overflow, self.blocks[0])
        b.position_at_end(overflow)
        b.store(p.const(ERROR_STACK), p.ctx_word(b, CTX_ERROR))
        b.store(p.const(self.index), p.ctx_word(b, CTX_ERROR_INFO))
        b.ret(p.const(0))
        b.position_at_end(self.fail_block)
        b.ret(p.const(0))
        for pc, ins in enumerate(self.func.instructions):
            b.position_at_end(self.blocks[pc])
            handler = _EMITTERS.get(type(ins))
            if handler is None:
                raise self.fail(f"the instruction {ins} (dynamic shapes are the VM's)")
            handler(self, pc, ins)
            if not b.block.is_terminated:
                if pc + 1 >= len(self.blocks):
                    raise self.fail("a function that does not end in ret")
                b.branch(self.blocks[pc + 1])

    # -- helpers
    def get(self, reg: int):
        return self.b.load(self.regs[reg])

    def set(self, reg: int, value) -> None:
        self.b.store(value, self.regs[reg])

    def word(self, obj, k: int):
        p, b = self.program, self.b
        return b.gep(b.inttoptr(obj, p.i64.as_pointer()), [p.const(k)])

    def checked(self, value):
        """``value`` (a call's result or an allocation), going to the fail block when 0."""
        b = self.b
        ok = self.fn.append_basic_block("ok")
        b.cbranch(b.icmp_unsigned("==", value, self.program.const(0)), self.fail_block, ok)
        b.position_at_end(ok)
        return value

    def new_object(self, words: list):
        """An arena object of ``words`` (ints or LLVM values); its address."""
        p, b = self.program, self.b
        obj = self.checked(b.call(p.alloc, [p.const(8 * len(words)), p.const(16)]))
        for k, w in enumerate(words):
            b.store(p.const(w) if isinstance(w, int) else w, self.word(obj, k))
        return obj

    # -- one method per instruction
    def move(self, pc, ins):
        self.set(ins.dst, self.get(ins.src))

    def ret(self, pc, ins):
        self.b.ret(self.get(ins.result))

    def invoke(self, pc, ins):
        args = [self.get(r) for r in ins.args]
        if pc in self.tail_calls:
            for k, value in enumerate(args):
                self.set(k, value)
            self.b.branch(self.blocks[0])
            return
        self.set(ins.dst, self.checked(self.b.call(self.program.functions[ins.func_index], args)))

    def invoke_closure(self, pc, ins):
        p, b = self.program, self.b
        closure = self.get(ins.closure)
        fnty = p.ir.FunctionType(p.i64, [p.i64] * (len(ins.args) + 1))
        code = b.inttoptr(b.load(self.word(closure, 1)), fnty.as_pointer())
        args = [closure] + [self.get(r) for r in ins.args]
        self.set(ins.dst, self.checked(b.call(code, args)))

    def invoke_packed(self, pc, ins):
        p, b = self.program, self.b
        group = p.exe.kernels[ins.packed_index]
        n_in = ins.arity - ins.output_size
        pointers = [b.load(self.word(self.get(r), 1)) for r in ins.args]
        constants = [p.const(p.keep_array(c).ctypes.data) for c in group.constants]
        values = pointers[:n_in] + constants + pointers[n_in:]
        for address, extent, temporaries, entry in _kernel_calls(group, self.where):
            args = values + [p.const(t) for t in temporaries]
            if extent is not None and p.pool is not None and entry is not None \
                    and group.flops >= PARALLEL_MIN_FLOPS:
                self.parallel_call(entry, args, extent)
                continue
            if extent is not None:
                args += [p.const(0), p.const(extent)]
            fnty = p.ir.FunctionType(p.ir.VoidType(), [p.i64] * len(args))
            b.call(b.inttoptr(p.const(address), fnty.as_pointer()), args)

    def parallel_call(self, entry: int, args: list, extent: int) -> None:
        """A parallel loop over ``[0, extent)`` split across the spinning pool
        (:mod:`relaybench.backends.llvm.spinpool`), handed out from native code as
        ``SpinPool.run`` does: ``rb_pool_launch(header, entry, args, ranges, count)`` publishes
        the job (the kernel's uniform entry point, the argument array, the table of ranges),
        then this thread claims and runs ranges with the workers and waits for the rest.
        Python holds the pool's lock for the run."""
        from ..llvm.runtime import RANGES_PER_THREAD, function_address, split_range
        from ..llvm.spinpool import MAX_RANGES, ranges_array
        p, b = self.program, self.b
        ranges = split_range(extent, min(MAX_RANGES, p.threads * RANGES_PER_THREAD))
        p64 = p.i64.as_pointer()
        entry_type = p.ir.FunctionType(p.ir.VoidType(), [p64, p.i64, p.i64])
        target = b.inttoptr(p.const(entry), entry_type.as_pointer())
        if len(ranges) < 2:
            for begin, end in ranges:
                b.call(target, [self.argument_array(args), p.const(begin), p.const(end)])
            return
        array = self.argument_array(args)
        table = p.keep_array(ranges_array(ranges))
        launch_type = p.ir.FunctionType(p.ir.VoidType(), [p64] + [p.i64] * 4)
        launch = b.inttoptr(p.const(function_address(p.pool_launch)), launch_type.as_pointer())
        b.call(launch, [b.inttoptr(p.const(p.pool.header_address), p64), p.const(entry),
                        b.ptrtoint(array, p.i64), p.const(table.ctypes.data),
                        p.const(len(ranges))])

    def argument_array(self, args: list):
        """An ``i64`` array in this frame holding ``args`` (a kernel entry point's argument)."""
        p, b = self.program, self.b
        with b.goto_block(self.entry):
            b.position_at_start(self.entry)
            array = b.alloca(p.i64, size=len(args), name="kernel_args")
        for k, value in enumerate(args):
            b.store(value, b.gep(array, [p.const(k)]))
        return array

    def alloc_storage(self, pc, ins):
        p, b = self.program, self.b
        self.set(ins.dst, self.checked(b.call(p.alloc, [p.const(max(ins.size, 1)),
                                                        p.const(STORAGE_ALIGNMENT)])))

    def alloc_tensor(self, pc, ins):
        b = self.b
        data = b.add(self.get(ins.storage), self.program.const(ins.offset))
        code = dtype_code(ins.dtype, self.where)
        self.set(ins.dst, self.new_object([KIND_TENSOR, data, code, len(ins.shape)]
                                          + [int(d) for d in ins.shape]))

    def alloc_adt(self, pc, ins):
        p = self.program
        if ins.constructor is None:
            head = [KIND_TUPLE, 0, len(ins.fields), 0]
        else:
            head = [KIND_ADT, ins.tag, len(ins.fields), p.constructor_number(ins.constructor)]
        self.set(ins.dst, self.new_object(head + [self.get(r) for r in ins.fields]))

    def alloc_closure(self, pc, ins):
        p, b = self.program, self.b
        target = p.exe.functions[ins.func_index]
        wrapper = p.wrapper(ins.func_index, len(target.params) - len(ins.free_vars))
        head = [KIND_CLOSURE, b.ptrtoint(wrapper, p.i64), len(ins.free_vars), ins.func_index]
        self.set(ins.dst, self.new_object(head + [self.get(r) for r in ins.free_vars]))

    def get_field(self, pc, ins):
        self.set(ins.dst, self.b.load(self.word(self.get(ins.object), HEADER + ins.field_index)))

    def get_tag(self, pc, ins):
        self.set(ins.dst, self.b.load(self.word(self.get(ins.object), 1)))

    def branch(self, pc, ins):
        p, b = self.program, self.b
        if ins.target not in self.ints:
            raise self.fail(f"{ins}: its target is not an integer")
        test = self.get(ins.test)
        if ins.test not in self.ints:   # a bool tensor: its one byte
            data = b.load(self.word(test, 1))
            test = b.zext(b.load(b.inttoptr(data, p.i8.as_pointer())), p.i64)
        same = b.icmp_signed("==", test, self.get(ins.target))
        b.cbranch(same, self.blocks[pc + ins.true_offset], self.blocks[pc + ins.false_offset])

    def goto(self, pc, ins):
        self.b.branch(self.blocks[pc + ins.pc_offset])

    def load_const(self, pc, ins):
        self.set(ins.dst, self.program.const(self.program.constant_object(ins.const_index)))

    def load_consti(self, pc, ins):
        self.set(ins.dst, self.program.const(ins.value))

    def reshape_tensor(self, pc, ins):
        p, b = self.program, self.b
        index = self.shape_of_constant.get(ins.shape)
        if index is None:
            raise self.fail(f"{ins}: a shape computed at run time")
        shape = [int(d) for d in np.asarray(p.exe.constants[index]).reshape(-1)]
        src = self.get(ins.tensor)
        data = b.load(self.word(src, 1))
        code = b.load(self.word(src, 2))
        self.set(ins.dst, self.new_object([KIND_TENSOR, data, code, len(shape)] + shape))

    def fatal(self, pc, ins):
        p, b = self.program, self.b
        p.messages.append(ins.message)
        b.store(p.const(ERROR_FATAL), p.ctx_word(b, CTX_ERROR))
        b.store(p.const(len(p.messages) - 1), p.ctx_word(b, CTX_ERROR_INFO))
        subject = self.get(ins.subject) if ins.subject is not None else p.const(0)
        b.store(subject, p.ctx_word(b, CTX_ERROR_SUBJECT))
        b.ret(p.const(0))

    def ref_create(self, pc, ins):
        self.set(ins.dst, self.new_object([KIND_REF, 0, 1, 0, self.get(ins.value)]))

    def ref_read(self, pc, ins):
        self.set(ins.dst, self.b.load(self.word(self.get(ins.ref), HEADER)))

    def ref_write(self, pc, ins):
        self.b.store(self.get(ins.value), self.word(self.get(ins.ref), HEADER))
        self.set(ins.dst, self.program.const(self.program.empty_tuple))


#: instruction class -> the method emitting its native code
_EMITTERS = {
    bc.Move: _FunctionEmitter.move, bc.Ret: _FunctionEmitter.ret,
    bc.Invoke: _FunctionEmitter.invoke, bc.InvokeClosure: _FunctionEmitter.invoke_closure,
    bc.InvokePacked: _FunctionEmitter.invoke_packed,
    bc.AllocStorage: _FunctionEmitter.alloc_storage,
    bc.AllocTensor: _FunctionEmitter.alloc_tensor, bc.AllocADT: _FunctionEmitter.alloc_adt,
    bc.AllocClosure: _FunctionEmitter.alloc_closure, bc.GetField: _FunctionEmitter.get_field,
    bc.GetTag: _FunctionEmitter.get_tag, bc.If: _FunctionEmitter.branch,
    bc.Goto: _FunctionEmitter.goto, bc.LoadConst: _FunctionEmitter.load_const,
    bc.LoadConsti: _FunctionEmitter.load_consti,
    bc.ReshapeTensor: _FunctionEmitter.reshape_tensor, bc.Fatal: _FunctionEmitter.fatal,
    bc.RefCreate: _FunctionEmitter.ref_create, bc.RefRead: _FunctionEmitter.ref_read,
    bc.RefWrite: _FunctionEmitter.ref_write,
}


def _kernel_calls(group, where: str) -> list:
    """``(address, parallel extent or None, temporaries' addresses, uniform entry point or
    None)`` of each compiled function a call of kernel ``group`` runs, in order."""
    from ..llvm.runtime import Kernel, PhasedKernel, function_address
    kernel = getattr(group.compiled, "kernel", None)
    if isinstance(kernel, Kernel):
        return [(function_address(kernel.function), kernel.parallel_extent, (), kernel.entry)]
    if isinstance(kernel, PhasedKernel):
        temps = tuple(t.ctypes.data for t in kernel.temporaries)
        return [(function_address(phase.function), phase.parallel_extent, temps, phase.entry)
                for phase in kernel.phases]
    raise CompileError(f"{where}: kernel {group.name} has no machine code "
                       f"({type(group.compiled).__name__}); AoT calls compiled kernels only")


def reachable_functions(exe, roots) -> set:
    """The indices of the VM functions ``roots`` call or make closures of, directly or not."""
    seen = set(roots)
    stack = list(roots)
    while stack:
        for ins in exe.functions[stack.pop()].instructions:
            if isinstance(ins, (bc.Invoke, bc.AllocClosure)) and ins.func_index not in seen:
                seen.add(ins.func_index)
                stack.append(ins.func_index)
    return seen


def emit_program(exe, entries, static_object, keep_array, threads: int = 1) -> tuple:
    """The LLVM module of the functions of the VM executable ``exe`` that the global functions
    named in ``entries`` reach, with an entry point for each of those; returns
    ``(module, program)`` where ``program`` knows the entry points, messages and constructors.

    ``static_object(words, keep=None)`` places a static object and returns its address;
    ``keep_array(array)`` keeps a kernel constant alive and returns it contiguous. With
    ``threads`` above 1, parallel loops are spread over the spinning pool of that many threads.
    """
    roots = []
    for name in entries:
        index = exe.global_map[name]
        if exe.functions[index].closure_arity:
            raise CompileError(f"@{name} builds a closure; call it from the program")
        roots.append(index)
    program = _Program(exe, static_object, reachable_functions(exe, roots), threads)
    program.keep_array = keep_array
    for index in program.functions:
        _FunctionEmitter(program, index).run()
    program.entries = {name: program.entry(exe.global_map[name]) for name in entries}
    return program.module, program
