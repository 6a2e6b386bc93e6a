"""Running an AoT-compiled program: the one call from Python into native code, and the values
converted at that boundary.

:class:`AotModule` is what ``rb.build(mod, executor="aot")`` returns. ``run(*args, **kwargs)``
(or ``invoke(name, ...)``) checks the inputs against the function's parameter types, all the way
down: every tensor inside a tuple, a List or a Tree is checked for dtype and shape, and a bad
one is reported with the input's name and where in it the value lies (``input %xs[3]: ...``).
The inputs are laid out as native objects in two buffers kept between calls (tensor objects in
one, tuples, ADT objects and references in the other; tensors point at the numpy arrays' data,
so inputs are not copied), the function's entry point is called once through ctypes (the GIL
released), and the result is converted back: tensors copied out of the arena into numpy arrays,
tuples as tuples, ADT objects as the interpreter's
:class:`~relaybench.backends.interpreter.ConstructorValue`, references as
:class:`~relaybench.backends.interpreter.RefValue` (an input reference gets the value the run
left in it). The prelude's List and Tree may be given as Python lists and ``(value, [children])``
tuples where the parameter's type says so (:func:`relaybench.adt.from_python`). A closure in
the result comes back as an opaque object naming its function: its captured values lived in the
run's arena, so it cannot be called after the run (closures are not taken as inputs either).

The layout is one breadth-first walk over the inputs, directed by the parameters' types
(:class:`_Plans`): each object's address is fixed when it is first met (the walk writes objects
in the order it meets them), so the words are produced in one pass and copied into the buffer
in one step, with no fix-ups. Objects met twice (by identity, under the same type) are laid out
once; a reference is always one object.

When the run stops early the context says why: the arena was full (the run is repeated on an
arena twice as large, kept for later runs), the native stack ran out (the run is repeated on a
thread of its own with a stack of ``RB_AOT_STACK_MB``; only when that is too small too is it an
error), or a ``Fatal`` (a match no clause accepts) raised :class:`ExecutionError` with its
message and the value. Runs are pure apart from their inputs' references, so repeating one is
safe.
"""

from __future__ import annotations

import ctypes
import gc
import operator
import threading
import time
from typing import Optional

import numpy as np

from ...errors import ExecutionError
from ...ir.types import FuncType, RefType, TensorType, TupleType, TypeCall, TypeVar
from ..interpreter import ConstructorValue, RefValue
from . import compiler as C

__all__ = ["AotModule"]

#: the stack the calling thread lends a run (bytes below the entry's frame)
CALLER_STACK_BUDGET = 512 * 1024
#: the first arena's size in bytes
FIRST_ARENA = 1 << 20
#: the first size, in words, of each of the two input buffers (they grow as needed)
FIRST_INPUT_WORDS = 4096
#: the first size in bytes of the buffer small tensors of Lists are copied into
FIRST_STAGE_BYTES = 1 << 16


def _aligned_words(count: int) -> np.ndarray:
    raw = np.zeros(count + 8, np.int64)
    skip = ((-raw.ctypes.data) % 64) // 8
    return raw[skip:skip + count]


def _read_words(address: int, count: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_int64 * count).from_address(address))


class _Signature:
    """What a call of one global needs, computed once: its parameters, their names, the plan
    of each parameter's type, and the positions of the parameters whose type is an ADT (where
    a Python list or tuple is converted with :func:`relaybench.adt.from_python`)."""

    __slots__ = ("where", "params", "names", "plans", "adapt", "native", "entry", "program",
                 "maker")

    def __init__(self, name: str, func, native, entry, plans: "_Plans"):
        self.where = f"@{name}"
        self.params = list(func.source.params)
        self.names = [p.name_hint for p in self.params]
        types = [_param_type(p) for p in self.params]
        self.plans = [plans.of(t) for t in types]
        self.adapt = [k for k, t in enumerate(types) if isinstance(t, TypeCall)]
        self.native, self.entry, self.program = native, entry, native.program
        self.maker = plans


def _param_type(param):
    return param.checked_type if param.checked_type is not None else param.type_annotation


class AotModule:
    """A whole program compiled to one native module (see :mod:`relaybench.backends.aot`)."""

    def __init__(self, exe, native, compile_stats=None, num_threads: int = 1):
        self.exe = exe
        self.num_threads = num_threads
        self.module = exe.module
        self.kernels = exe.kernels
        self.target = exe.target
        self.compile_stats = compile_stats
        self._natives = {}          # entry name -> (NativeProgram, ctypes entry point)
        self._signatures = {}       # entry name -> _Signature
        self._plans = {}            # id(program) -> _Plans
        self._add_native(native)
        self._ctx = _aligned_words(C.CTX_WORDS)
        self._ctx_at = self._ctx.ctypes.data
        self._set_arena(_aligned_words(FIRST_ARENA // 8))
        self._objects = self._tensors = None
        self._set_input_buffers(FIRST_INPUT_WORDS, FIRST_INPUT_WORDS)
        self._stage = _Stage(FIRST_STAGE_BYTES)
        self._lock = threading.Lock()
        self.runs = 0

    def _set_arena(self, arena: np.ndarray) -> None:
        self._arena = arena
        self._arena_at = arena.ctypes.data
        self._arena_end = self._arena_at + arena.nbytes

    def _set_input_buffers(self, objects: int, tensors: int) -> None:
        """The buffers the inputs' objects are laid out in, at least this many words each."""
        if self._objects is None or self._objects.size < objects:
            self._objects = _aligned_words(objects)
            self._objects_at = self._objects.ctypes.data
        if self._tensors is None or self._tensors.size < tensors:
            self._tensors = _aligned_words(tensors)
            self._tensors_at = self._tensors.ctypes.data

    def _add_native(self, native) -> None:
        argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        for name, symbol in native.program.entries.items():
            self._natives[name] = (native, native.compiled.function(symbol, argtypes,
                                                                   restype=ctypes.c_int64))

    def _entry(self, name: str):
        """The native program and entry point of global ``@name`` (compiled on first use for a
        global other than ``@main``)."""
        found = self._natives.get(name)
        if found is None:
            from . import native_program
            if name not in self.exe.global_map:
                raise ExecutionError(f"no function @{name} in the AoT module (have: "
                                     f"{', '.join('@' + n for n in self.exe.global_map)})")
            self._add_native(native_program(self.exe, [name], self.num_threads))
            found = self._natives[name]
        return found

    def _signature(self, name: str) -> _Signature:
        sig = self._signatures.get(name)
        if sig is None:
            native, entry = self._entry(name)
            program = native.program
            plans = self._plans.get(id(program))
            if plans is None:
                plans = self._plans[id(program)] = _Plans(self.exe.module,
                                                          program.constructor_number)
            sig = self._signatures[name] = _Signature(name, self.exe.function(name), native,
                                                      entry, plans)
        return sig

    # ---- public -----------------------------------------------------------------------------
    @property
    def arena_bytes(self) -> int:
        """The arena's size now (it grows only when a run needs more)."""
        return self._arena.nbytes

    def run(self, *args, **kwargs):
        """``invoke("main", ...)``."""
        return self.invoke("main", *args, **kwargs)

    def invoke(self, name: str = "main", *args, **kwargs):
        """Call global ``@name`` on ``args`` (in order, or by parameter name)."""
        sig = self._signatures.get(name) or self._signature(name)
        if kwargs:
            args, kwargs = _adapt_python_values(sig.params, args, kwargs)
        elif sig.adapt:
            args = _adapt_positional(sig, args)
        values = _bind_arguments(sig.where, sig.params, args, kwargs)
        with self._lock:
            collecting = gc.isenabled()
            gc.disable()    # the conversions make many small objects and no cycles
            try:
                return self._call_once(sig, values)
            finally:
                if collecting:
                    gc.enable()

    def benchmark(self, *args, number: int = 10, repeat: int = 5, warmup: int = 1, **kwargs):
        """The per-run mean in ms of each of ``repeat`` rounds of ``number`` runs."""
        from ..graph_executor import BenchmarkResult
        for _ in range(warmup):
            self.run(*args, **kwargs)
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(number):
                self.run(*args, **kwargs)
            times.append((time.perf_counter() - start) * 1e3 / number)
        return BenchmarkResult(times, number, repeat)

    def source(self, kind: str = "llvm", group: Optional[int] = None) -> str:
        """Without ``group``: the program's own code, ``"llvm"`` as generated (one function per
        Relay function, the kernels called by address), ``"llvm-optimized"`` after LLVM's -O3,
        ``"asm"``, or ``"bytecode"`` (the VM listing it was compiled from). With ``group``: that
        kernel's ``loops``, ``llvm`` or ``asm``."""
        if group is not None:
            return self.kernels[group].source(kind)
        native = self._natives["main" if "main" in self._natives else next(iter(self._natives))][0]
        if kind == "llvm":
            return native.text
        if kind == "llvm-optimized":
            return native.compiled.source("llvm")
        if kind == "asm":
            return native.compiled.source("asm")
        if kind == "bytecode":
            return str(self.exe.bytecode)
        raise ValueError(f"unknown source kind {kind!r}; known: llvm, llvm-optimized, asm, "
                         "bytecode (or a kernel's kinds with group=)")

    def __repr__(self) -> str:
        return (f"AotModule({len(self.exe.functions)} functions, {len(self.kernels)} kernels, "
                f"arena {self.arena_bytes >> 10} KiB, target {self.target})")

    # ---- the call ------------------------------------------------------------------------------
    def _call_once(self, sig: _Signature, values: list):
        from ... import config
        inputs = self._lay_out(sig, values)
        program, entry = sig.program, sig.entry
        deep = False
        stack = 0
        while True:
            if deep:
                result = self._on_big_stack(program, entry, inputs, stack)
            else:
                result = self._native(program, entry, inputs, CALLER_STACK_BUDGET)
            ctx = self._ctx
            error = int(ctx[C.CTX_ERROR])
            if not error and result:
                break
            if error == C.ERROR_STACK and not deep:
                deep = True
                stack = int(config.get("RB_AOT_STACK_MB")) << 20
                inputs.reset()
                continue
            if error == C.ERROR_STACK:
                func = self.exe.functions[int(ctx[C.CTX_ERROR_INFO])]
                raise ExecutionError(
                    f"{sig.where}: the recursion (in @{func.name}) is deeper than the native "
                    f"stack of {stack >> 20} MiB allows (RB_AOT_STACK_MB)")
            if error == C.ERROR_ARENA:
                self._set_arena(_aligned_words(self._arena.size * 2))
                inputs.reset()
                continue
            if error == C.ERROR_FATAL:
                from ..vm.vm import _short
                message = program.messages[int(ctx[C.CTX_ERROR_INFO])]
                subject = int(ctx[C.CTX_ERROR_SUBJECT])
                if subject:
                    raise ExecutionError(f"{message}: {_short(self._to_python(subject, program))}")
                raise ExecutionError(message)
            raise ExecutionError(f"{sig.where}: the native run stopped with error {error}")
        self.runs += 1
        out = self._to_python(result, program)
        if inputs.refs:
            inputs.write_back_references(lambda a: self._to_python(a, program))
        return out

    def _lay_out(self, sig: _Signature, values: list) -> "_Inputs":
        """The inputs as native objects in the two input buffers (grown and laid out again
        when they are too small)."""
        while True:
            objects_at, tensors_at, stage = self._objects_at, self._tensors_at, self._stage
            stage.used = 0
            try:
                words, tensor_words, roots, keep, refs = _walk(
                    values, sig.plans, objects_at, tensors_at, sig.maker, stage)
            except _BadValue as bad:
                raise bad.error(values, sig.names) from None
            if len(words) <= self._objects.size and len(tensor_words) <= self._tensors.size \
                    and stage.used <= stage.buffer.size:
                break
            self._set_input_buffers(2 * len(words), 2 * len(tensor_words))
            if stage.used > stage.buffer.size:
                self._stage = _Stage(2 * stage.used)
        self._objects[:len(words)] = words
        self._tensors[:len(tensor_words)] = tensor_words
        return _Inputs(self, roots, keep, refs, words if refs else None)

    def _native(self, program, entry, inputs, budget: int) -> int:
        """The one call into native code. A program whose kernels use the spinning pool holds
        the pool's lock for the whole run."""
        ctx = self._ctx
        ctx[:] = 0
        ctx[C.CTX_ARENA] = self._arena_at
        ctx[C.CTX_ARENA_END] = self._arena_end
        ctx[C.CTX_STACK_BUDGET] = budget
        pool = program.pool
        if pool is None:
            return entry(self._ctx_at, inputs.args_at)
        with pool.lock:
            return entry(self._ctx_at, inputs.args_at)

    def _on_big_stack(self, program, entry, inputs, stack: int) -> int:
        """The run on a thread whose stack is ``stack`` bytes."""
        box = {}

        def work():
            box["result"] = self._native(program, entry, inputs, stack - (1 << 20))

        with _stack_size_lock:
            old = threading.stack_size(stack)
            try:
                thread = threading.Thread(target=work, name="rb-aot-deep")
                thread.start()
            finally:
                threading.stack_size(old)
        thread.join()
        return box.get("result", 0)

    def _to_python(self, address: int, program):
        """The native value at ``address`` as the interpreter's value (iterative; shared
        objects converted once). Objects in the arena are read through its array; a tensor's
        data is copied out (the arena is reused by the next run)."""
        from ..interpreter import ConstructorValue, RefValue
        constructors = program.constructors
        arena = self._arena
        low = arena.ctypes.data
        high = low + arena.nbytes
        arena_bytes = arena.view(np.uint8)
        view = memoryview(arena)    # indexing gives Python ints, without numpy scalars
        header = C.HEADER
        kind_tensor, kind_closure, kind_tuple, kind_adt, kind_ref = (
            C.KIND_TENSOR, C.KIND_CLOSURE, C.KIND_TUPLE, C.KIND_ADT, C.KIND_REF)
        dtypes = _DTYPES

        def words(addr, count):
            if low <= addr and addr + 8 * count <= high:
                k = (addr - low) >> 3
                return view[k:k + count].tolist()
            return _read_words(addr, count).tolist()

        fast = _list_of_tensors(address, constructors, arena, low, high, arena_bytes)
        if fast is not None:
            return fast
        done: dict = {}
        heads: dict = {}            # objects waiting for their fields -> their words
        stack = [address]
        span = 8 * (header + 8)             # the header and up to 8 dims or fields
        while stack:
            addr = stack[-1]
            if addr in done:
                stack.pop()
                continue
            head = heads.pop(addr, None)
            if head is None:
                if low <= addr and addr + span <= high:
                    k = (addr - low) >> 3
                    head = view[k:k + header + 8].tolist()
                else:
                    head = words(addr, header + 8)
            kind = head[0]
            if kind == kind_tensor:
                stack.pop()
                ndim = head[3]
                shape = tuple(head[header:header + ndim]) if ndim <= 8 \
                    else tuple(words(addr + 8 * header, ndim))
                dtype = dtypes[head[2]]
                count = 1
                for d in shape:
                    count *= d
                data, nbytes = head[1], count * dtype.itemsize
                if low <= data and data + nbytes <= high:
                    done[addr] = np.ndarray(shape, dtype, arena_bytes, data - low).copy()
                else:
                    done[addr] = np.frombuffer((ctypes.c_char * nbytes).from_address(data),
                                               dtype).copy().reshape(shape)
                continue
            if kind == kind_closure:
                stack.pop()
                done[addr] = _NativeClosure(self.exe.functions[head[3]].name)
                continue
            n = head[2]
            fields = head[header:header + n] if n <= 8 else words(addr + 8 * header, n)
            ready = True
            for f in fields:
                if f not in done:
                    if ready:
                        ready = False
                    stack.append(f)
            if not ready:
                heads[addr] = head      # read once: the object is built when its fields are
                continue
            stack.pop()
            if kind == kind_adt:
                done[addr] = ConstructorValue(constructors[head[3]],
                                              tuple([done[f] for f in fields]))
            elif kind == kind_tuple:
                done[addr] = tuple([done[f] for f in fields])
            elif kind == kind_ref:
                done[addr] = RefValue(done[fields[0]])
            else:
                raise ExecutionError(f"the native result holds an object of unknown kind {kind}")
        return done[address]


def _list_of_tensors(address: int, constructors, words, low: int, high: int, arena_bytes):
    """The prelude List at ``address`` as the interpreter's value when it is a List of tensors
    of one dtype and shape, all in the arena (a sampling loop's characters, a sequence's
    outputs): the spine followed in one loop, the elements' headers checked and their data
    gathered in a few numpy steps, each element a view of that one copy. None for anything else
    (the general walk takes it). ``words`` is the arena as int64 words."""
    from ..interpreter import ConstructorValue
    header = C.HEADER
    view = memoryview(words)
    kind_adt = C.KIND_ADT
    end = high - 8 * (header + 2)
    if not low <= address <= end:
        return None
    k = (address - low) >> 3
    if view[k] != kind_adt:
        return None
    elements = []
    cons_tag = -1
    limit = (high - low) >> 3       # a chain cannot be longer than the arena has words
    while True:
        tag, fields = view[k + 3], view[k + 2]
        if tag != cons_tag:
            con = constructors[tag]
            if con.belong_to.name_hint != "List":
                return None
            if con.name_hint == "Nil" and fields == 0:
                nil = con
                break
            if con.name_hint != "Cons" or fields != 2 or cons_tag != -1:
                return None
            cons, cons_tag = con, tag
        elif fields != 2 or len(elements) > limit:
            return None
        elements.append(view[k + header])
        addr = view[k + header + 1]
        if not low <= addr <= end:
            return None
        k = (addr - low) >> 3
        if view[k] != kind_adt:
            return None
    if not elements:
        return ConstructorValue(nil, ())
    first = elements[0]
    if not low <= first <= high - 8 * (header + 8):
        return None
    k = (first - low) >> 3
    kind_tensor, code, ndim = C.KIND_TENSOR, view[k + 2], view[k + 3]
    if view[k] != kind_tensor or ndim > 8:
        return None
    dims = view[k + header:k + header + ndim].tolist()
    dtype = _DTYPES[code]
    nbytes = dtype.itemsize
    for d in dims:
        nbytes *= d
    shape = tuple(dims)
    top = high - nbytes
    last = high - 8 * (header + 8)
    offsets = []
    for e in elements:
        if not low <= e <= last:
            return None
        k = (e - low) >> 3
        if view[k] != kind_tensor or view[k + 2] != code or view[k + 3] != ndim or \
                (ndim and view[k + header:k + header + ndim].tolist() != dims):
            return None
        d = view[k + 1]
        if not low <= d <= top:
            return None
        offsets.append(d - low)
    data = np.array(offsets, np.int64)
    index = data[:, None] + np.arange(nbytes, dtype=np.int64)
    block = arena_bytes[index].view(dtype).reshape((len(elements),) + shape)
    value = ConstructorValue(nil, ())
    for i in range(len(elements) - 1, -1, -1):
        value = ConstructorValue(cons, (block[i, ...], value))
    return value


class _NativeClosure:
    """A closure a native run returned: it names its function; it cannot be called after the
    run (its captured values lived in the run's arena)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"<aot closure {self.name}>"


_stack_size_lock = threading.Lock()


class _Inputs:
    """The inputs of one run, laid out: ``args_at`` is the address of the array of the
    arguments' addresses; ``keep`` holds every array whose data a tensor object points at (the
    callers' arrays, and the contiguous copies made of the others) until the run is over;
    ``refs`` are the input references with their objects' addresses, and ``words`` the objects'
    words as laid out (only when there are references: a run writes into them)."""

    __slots__ = ("module", "args_at", "keep", "refs", "words")

    def __init__(self, module: AotModule, roots: list, keep: list, refs: list, words):
        args = module._args
        if args is None or args.size < len(roots):
            args = module._args = _aligned_words(max(len(roots), 8))
            module._args_at = args.ctypes.data
        args[:len(roots)] = roots
        self.module, self.args_at = module, module._args_at
        self.keep, self.refs, self.words = keep, refs, words

    def reset(self) -> None:
        """The objects as they were before a run (references written by a run undone)."""
        if self.words is not None:
            self.module._objects[:len(self.words)] = self.words

    def write_back_references(self, to_python) -> None:
        """Each input reference takes the value the run left in it."""
        objects, base = self.module._objects, self.module._objects_at
        for ref, address in self.refs:
            ref.value = to_python(int(objects[(address - base) // 8 + C.HEADER]))


AotModule._args = None

_DTYPE_CODES = {name: code for code, name in enumerate(C.DTYPES)}
_DTYPES = [np.dtype(name) for name in C.DTYPES]
#: dtype -> code, keyed by the dtype object (its ``name`` is slow to compute)
_CODES_BY_DTYPE = {np.dtype(name): code for code, name in enumerate(C.DTYPES)}


# ---- the plans: how a value of each parameter type is checked and laid out --------------------

#: plan kinds
_TENSOR, _TUPLE, _ADT, _REF, _ANY, _REFUSED = range(6)


class _Plan:
    """How a value of one type is checked and laid out. ``key`` separates the plans in the
    walk's table of objects already laid out (``id(value) + key``; 0 for references, which are
    one object whatever their type). Tensors: ``dtype`` (None: any), ``shape`` (a static shape,
    else None), ``dims`` (the type's dims, for the slow check), ``strides`` (of a C-contiguous
    array of that shape), ``align`` (the data address's alignment) and ``tail`` (the object's
    words after its data address). Tuples: ``fields`` (the field plans; None: any length, any
    types). ADTs: ``cons``, id(constructor) -> ``(tag, arity, number, field plans)``, and
    ``by_name``, the same by constructor name. References: ``inner``. Refused: ``message``."""

    __slots__ = ("kind", "key", "type", "dtype", "shape", "dims", "strides", "align", "tail",
                 "fields", "cons", "by_name", "adt", "inner", "message", "chain")

    def __init__(self, kind: int, key: int, t):
        self.kind, self.key, self.type = kind, key, t
        self.dtype = self.shape = self.dims = self.strides = self.tail = None
        self.fields = self.cons = self.by_name = self.adt = self.inner = self.message = None
        self.chain = None
        self.align = 1

    def describe(self) -> str:
        if self.type is not None:
            return str(self.type)
        return {_TENSOR: "a tensor", _TUPLE: "a tuple", _ADT: "an ADT object",
                _REF: "a reference"}.get(self.kind, "a value")


class _Plans:
    """The plans of the types of one program's parameters, made once per type. Making them is
    a walk over the types with a work list (an ADT's plan refers to itself through its
    recursive fields: ``List[T]``'s ``Cons`` has a field of type ``List[T]``)."""

    def __init__(self, module, constructor_number):
        self.module = module
        self.constructor_number = constructor_number
        self.cache: dict = {}
        self.count = 0
        self.any = self._new(_ANY, None)
        # the plans of values of a type not known here (a type variable), by the value's class
        self.any_tensor = self._new(_TENSOR, None)
        self.any_tuple = self._new(_TUPLE, None)
        self.any_adt = self._new(_ADT, None)
        self.any_adt.cons, self.any_adt.by_name = {}, {}
        self.any_ref = self._new(_REF, None)
        self.any_ref.key, self.any_ref.inner = 0, self.any

    def _new(self, kind: int, t) -> _Plan:
        self.count += 1
        return _Plan(kind, self.count << 64, t)

    def of(self, t) -> _Plan:
        todo: list = []
        plan = self._get(t, todo)
        while todo:
            self._fill(todo.pop(), todo)
        return plan

    def _get(self, t, todo: list) -> _Plan:
        if t is None:
            return self.any
        plan = self.cache.get(t)
        if plan is None:
            plan = self.cache[t] = self._shallow(t)
            todo.append(plan)
        return plan

    def _shallow(self, t) -> _Plan:
        if isinstance(t, TensorType):
            if t.dtype not in _DTYPE_CODES:
                plan = self._new(_REFUSED, t)
                plan.message = f"AoT has no tensor dtype {t.dtype}"
                return plan
            plan = self._new(_TENSOR, t)
            plan.dtype = np.dtype(t.dtype)
            plan.align = plan.dtype.alignment
            plan.dims = t.shape
            if t.is_static:
                shape = tuple(int(d) for d in t.shape)
                strides, step = [], plan.dtype.itemsize
                for d in reversed(shape):
                    strides.append(step)
                    step *= d
                plan.shape, plan.strides = shape, tuple(reversed(strides))
                plan.tail = (_DTYPE_CODES[t.dtype], len(shape)) + shape
            return plan
        if isinstance(t, TupleType):
            return self._new(_TUPLE, t)
        if isinstance(t, RefType):
            plan = self._new(_REF, t)
            plan.key = 0
            return plan
        if isinstance(t, TypeCall) and self._type_data(t) is not None:
            return self._new(_ADT, t)
        if isinstance(t, FuncType):
            plan = self._new(_REFUSED, t)
            plan.message = "AoT takes no closures as inputs"
            return plan
        return self.any

    def _type_data(self, t: TypeCall):
        defs = getattr(self.module, "type_definitions", {})
        data = defs.get(t.func)
        if data is None:
            name = getattr(t.func, "name_hint", None)
            data = next((d for h, d in defs.items() if h.name_hint == name), None)
        return data

    def _fill(self, plan: _Plan, todo: list) -> None:
        t = plan.type
        if plan.kind == _TUPLE:
            plan.fields = tuple(self._get(f, todo) for f in t.fields)
        elif plan.kind == _REF:
            plan.inner = self._get(t.value, todo)
        elif plan.kind == _ADT:
            data = self._type_data(t)
            mapping = dict(zip(data.type_vars, t.args))
            plan.adt = data.header.name_hint
            plan.cons, plan.by_name = {}, {}
            for con in data.constructors:
                fields = tuple(self._get(_substitute(i, mapping), todo) for i in con.inputs)
                entry = (con.tag, len(fields), self.constructor_number(con), fields)
                plan.cons[id(con)] = plan.by_name[con.name_hint] = entry
            links = [(con, plan.cons[id(con)]) for con in data.constructors if con.inputs]
            if len(links) == 1 and len(links[0][0].inputs) == 2 \
                    and links[0][1][3][1] is plan and len(data.constructors) > 1:
                con, entry = links[0]
                element = entry[3][0]
                if element.kind == _TENSOR and element.tail is not None:
                    plan.chain = (id(con), entry, element)

    def any_of(self, value) -> _Plan:
        """The plan of ``value`` where its type is not known: by its class."""
        cls = type(value)
        if cls is np.ndarray or isinstance(value, np.generic):
            return self.any_tensor
        if cls is ConstructorValue:
            return self.any_adt
        if cls is tuple:
            return self.any_tuple
        if cls is RefValue:
            return self.any_ref
        plan = _Plan(_REFUSED, 0, None)
        from ..vm.vm import VMClosure
        plan.message = ("AoT takes no closures as inputs" if isinstance(value, VMClosure) else
                        f"cannot pass {cls.__name__} to native code")
        return plan

    def constructor_entry(self, plan: _Plan, con, value) -> tuple:
        """The entry of a constructor object ``plan`` does not know by identity (another
        module's copy of the same constructor, or any constructor where the type is unknown):
        its own tag and number, the field plans of the constructor of that name."""
        if plan.type is None:
            entry = (con.tag, len(con.inputs), self.constructor_number(con),
                     (self.any,) * len(con.inputs))
        else:
            known = plan.by_name.get(con.name_hint)
            if known is None or getattr(con.belong_to, "name_hint", None) != plan.adt:
                adt = getattr(con.belong_to, "name_hint", "?")
                raise _BadValue(value, f"expected {plan.type}, given a value of {adt} "
                                       f"({con.name_hint})")
            entry = (con.tag, known[1], self.constructor_number(con), known[3])
        plan.cons[id(con)] = entry
        return entry


def _substitute(t, mapping: dict):
    """``t`` with the type variables of ``mapping`` replaced (a post-order walk on a stack)."""
    if not mapping:
        return t
    out: list = []
    stack = [(t, False)]
    while stack:
        node, built = stack.pop()
        if isinstance(node, TypeVar):
            out.append(mapping.get(node, node))
            continue
        if isinstance(node, TupleType):
            children = node.fields
        elif isinstance(node, TypeCall):
            children = node.args
        elif isinstance(node, RefType):
            children = (node.value,)
        else:
            out.append(node)
            continue
        if not built:
            stack.append((node, True))
            stack.extend((c, False) for c in reversed(children))
            continue
        n = len(children)
        made = out[len(out) - n:] if n else []
        del out[len(out) - n:]
        if isinstance(node, TupleType):
            out.append(TupleType(tuple(made)))
        elif isinstance(node, TypeCall):
            out.append(TypeCall(node.func, tuple(made)))
        else:
            out.append(RefType(made[0]))
    return out[0]


# ---- the walk ------------------------------------------------------------------------------

class _BadValue(Exception):
    """A value inside an input that its type does not allow; :meth:`error` names the input
    and the place."""

    def __init__(self, value, message: str):
        super().__init__(message)
        self.value, self.message = value, message

    def error(self, values: list, names: list) -> ExecutionError:
        for root, name in zip(values, names):
            path = _locate(root, self.value)
            if path is not None:
                return ExecutionError(f"input %{name}{path}: {self.message}", input_name=name)
        return ExecutionError(f"an input: {self.message}")


def _walk(values: list, plans: list, objects_at: int, tensors_at: int, maker: _Plans,
          stage: _Stage):
    """Lay out ``values`` (checked against ``plans``) as native objects: returns the words of
    the objects buffer (at ``objects_at``), those of the tensors buffer (at ``tensors_at``),
    the arguments' addresses, the arrays to keep alive and the references with their
    addresses. ``maker`` gives the plans of values of unknown type.

    Breadth-first: an object's address is fixed when it is first met and its words are
    written when it is taken from the queue, in the same order. A List-like chain (a
    constructor whose second field has the chain's own type, :attr:`_Plan.chain`) is taken
    whole when it is met: its links are given consecutive addresses, and when the chain is
    taken from the queue its words are written in one step; where its elements are small
    tensors of the element type (checked for the whole chain at once), their data is copied
    into ``stage`` in one step and their objects are written in one step too."""
    words: list = []
    tensor_words: list = []
    roots: list = []
    keep: list = []
    refs: list = []
    seen: dict = {}
    queue: list = []
    head = 0
    top = 0                     # words reserved in the objects buffer
    ndarray, cv, tuple_, ref_value = np.ndarray, ConstructorValue, tuple, RefValue
    address_of, from_buffer = ctypes.addressof, ctypes.c_char.from_buffer
    kind_tensor, header = C.KIND_TENSOR, C.HEADER
    any_of, any_plan = maker.any_of, maker.any
    sink, items, item_plans = roots, values, plans
    chain = None                # the chain taken from the queue, waiting for its fields
    while True:
        for f, fp in zip(items, item_plans):
            kind = fp.kind
            if kind == _ANY:
                fp = any_of(f)
                kind = fp.kind
            key = id(f) + fp.key
            address = seen.get(key)
            if address is None:
                if kind == _TENSOR:
                    data = 0
                    if type(f) is ndarray and f.dtype is fp.dtype and f.shape == fp.shape \
                            and f.strides == fp.strides:
                        try:
                            data = address_of(from_buffer(f))
                        except (TypeError, ValueError):     # read-only or empty
                            data = 0
                        if data % fp.align:
                            data = 0
                    if data:
                        keep.append(f)
                        tail = fp.tail
                    else:
                        array, data, tail = _tensor_slow(f, fp)
                        keep.append(array)
                    address = tensors_at + 8 * len(tensor_words)
                    tensor_words.append(kind_tensor)
                    tensor_words.append(data)
                    tensor_words += tail
                elif kind == _ADT:
                    if type(f) is not cv:
                        raise _BadValue(f, _expected(fp, f))
                    address = objects_at + 8 * top
                    link = fp.chain
                    if link is None or id(f.constructor) != link[0]:
                        top += header + len(f.fields)
                        queue.append(f)
                        queue.append(fp)
                    else:       # a chain: its links up to one of another constructor
                        link_con = f.constructor
                        nodes = []
                        v = f
                        try:
                            while type(v) is cv and v.constructor is link_con:
                                nodes.append(v)
                                v = v.fields[1]
                                if not len(nodes) & 0xFFFF:
                                    _check_acyclic(nodes, fp)
                        except IndexError:
                            v = nodes.pop()
                        counts = set(map(len, map(_get_fields, nodes)))
                        if counts != {2}:
                            bad = next(x for x in nodes if len(x.fields) != 2)
                            raise _BadValue(bad, f"constructor {link_con.name_hint} takes 2 "
                                                 f"fields, given {len(bad.fields)}")
                        elements = list(map(_first, map(_get_fields, nodes)))
                        top += (header + 2) * len(elements)
                        queue.append(_CHAIN)
                        queue.append((fp, elements, address, v))
                elif kind == _TUPLE:
                    if type(f) is not tuple_ or (fp.fields is not None
                                                 and len(f) != len(fp.fields)):
                        raise _BadValue(f, _expected(fp, f))
                    address = objects_at + 8 * top
                    top += header + len(f)
                    queue.append(f)
                    queue.append(fp)
                elif kind == _REF:
                    if type(f) is not ref_value:
                        raise _BadValue(f, _expected(fp, f))
                    address = objects_at + 8 * top
                    top += header + 1
                    queue.append(f)
                    queue.append(fp)
                    refs.append((f, address))
                else:
                    raise _BadValue(f, fp.message)
                seen[key] = address
            sink.append(address)
        if chain is not None:
            # the chain's links: [ADT, tag, 2, number, element, next], the last one's next
            # the object that ends the chain
            fp, elements, address, addresses = chain
            if elements is None:        # taken one by one: their addresses, then the end's
                elements = addresses[:-1]
            n = len(elements)
            tag, _, number, _ = fp.chain[1]
            step = 8 * (header + 2)
            block = [C.KIND_ADT, tag, 2, number, 0, 0] * n
            block[4::6] = elements
            nexts = list(range(address + step, address + step * n, step))
            nexts.append(addresses[-1])
            block[5::6] = nexts
            words += block
            chain = None
            sink = words
        if head == len(queue):
            break
        value, plan = queue[head], queue[head + 1]
        head += 2
        if value is _CHAIN:
            fp, elements, address, end = plan
            elem = fp.chain[2]
            bulk = _bulk_tensors(elements, elem, stage) if elem.tail is not None else None
            if bulk is None:        # the elements one by one, then the end
                items = elements + [end]
                item_plans = [elem] * len(elements) + [fp]
                elements = None
            else:                   # the tensors' objects at once, then the end
                width = 2 + len(elem.tail)
                start = tensors_at + 8 * len(tensor_words)
                block = [kind_tensor, 0, *elem.tail] * len(elements)
                block[1::width] = bulk
                tensor_words += block
                # the elements' addresses take the place of the elements in the chain
                elements = list(range(start, start + 8 * width * len(elements), 8 * width))
                items, item_plans = (end,), (fp,)
            sink = []
            chain = (fp, elements, address, sink)
            continue
        kind = plan.kind
        if kind == _ADT:
            con = value.constructor
            entry = plan.cons.get(id(con))
            if entry is None:
                entry = maker.constructor_entry(plan, con, value)
            tag, arity, number, item_plans = entry
            items = value.fields
            if len(items) != arity:
                raise _BadValue(value, f"constructor {con.name_hint} takes {arity} fields, "
                                       f"given {len(items)}")
            words += (C.KIND_ADT, tag, arity, number)
        elif kind == _TUPLE:
            items = value
            item_plans = plan.fields if plan.fields is not None else \
                (any_plan,) * len(value)
            words += (C.KIND_TUPLE, 0, len(value), 0)
        else:
            items, item_plans = (value.value,), (plan.inner,)
            words += (C.KIND_REF, 0, 1, 0)
        sink = words
    return words, tensor_words, roots, keep, refs


#: the queue's marker of a chain (see :func:`_walk`)
_CHAIN = object()


def _bulk_tensors(elements: list, plan: _Plan, stage: "_Stage") -> Optional[list]:
    """The data addresses of ``elements`` when every one is a numpy array of the dtype and
    static shape of ``plan`` (checked for all of them at once): their data is copied, in one
    step, into ``stage``, the module's buffer for such copies (so native code points at memory
    the module owns). None otherwise (the elements are then taken one by one, which finds a bad
    one), or when the copy would not pay (large tensors, scalars)."""
    shape = plan.shape
    if not elements or not shape or plan.tail is None:
        return None
    size = plan.dtype.itemsize
    for d in shape:
        size *= d
    if not size or size > BULK_TENSOR_BYTES:
        return None
    types = set(map(type, elements))
    if len(types) != 1 or np.ndarray not in types or \
            set(map(_get_shape, elements)) != {shape}:
        return None
    n = len(elements)
    offset = -(-stage.used // 64) * 64
    stage.used = offset + n * size
    if stage.used > stage.buffer.size:      # laid out again on a larger buffer
        return list(range(0, n * size, size))
    out = stage.buffer[offset:offset + n * size].view(plan.dtype).reshape(
        (n * shape[0],) + shape[1:])
    try:
        np.concatenate(elements, axis=0, out=out, casting="no")
    except (TypeError, ValueError):         # another dtype
        return None
    start = stage.at + offset
    return list(range(start, start + n * size, size))


#: the largest tensor of a chain whose data is copied with the others in one step
BULK_TENSOR_BYTES = 1 << 16


class _Stage:
    """The buffer the data of a chain's small tensors is copied into (kept by the module
    between calls), and how much of it the walk has used."""

    __slots__ = ("buffer", "at", "used")

    def __init__(self, nbytes: int):
        raw = np.zeros(nbytes + 64, np.uint8)
        skip = (-raw.ctypes.data) % 64
        self.buffer = raw[skip:skip + nbytes]
        self.at = self.buffer.ctypes.data
        self.used = 0


def _check_acyclic(nodes: list, plan: _Plan) -> None:
    """Raises :class:`_BadValue` when the chain of ``nodes`` met one of them twice."""
    if len(set(map(id, nodes))) != len(nodes):
        raise _BadValue(nodes[0], f"the {plan.describe()} is cyclic")


_get_fields = operator.attrgetter("fields")
_first = operator.itemgetter(0)
_get_shape = operator.attrgetter("shape")


def _tensor_slow(value, plan: _Plan) -> tuple:
    """``(array, data address, words after the address)`` of a tensor that is not already a
    C-contiguous, aligned, writable array of the plan's dtype and shape: checked (raising
    :class:`_BadValue`), then made contiguous where it is not."""
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if not isinstance(value, np.ndarray):
        raise _BadValue(value, _expected(plan, value))
    if plan.dtype is None:
        code = _CODES_BY_DTYPE.get(value.dtype)
        if code is None:
            raise _BadValue(value, f"AoT has no tensor dtype {value.dtype.name}")
    else:
        if value.dtype != plan.dtype:
            raise _BadValue(value, f"expected dtype {plan.dtype.name} (type {plan.type}), "
                                   f"given {value.dtype.name}")
        code = _CODES_BY_DTYPE[plan.dtype]
        dims = plan.dims
        if len(value.shape) != len(dims) or any(
                isinstance(d, int) and d != s for d, s in zip(dims, value.shape)):
            raise _BadValue(value, f"expected shape {plan.type}, given {list(value.shape)}")
    array = np.require(value, requirements=("C", "A"))
    try:
        data = ctypes.addressof(ctypes.c_char.from_buffer(array))
    except (TypeError, ValueError):     # read-only or empty
        data = array.ctypes.data
    return array, data, (code, array.ndim) + tuple(int(d) for d in array.shape)


_KINDS = {np.ndarray: "a tensor", tuple: "a tuple", ConstructorValue: "an ADT object",
          RefValue: "a reference"}


def _expected(plan: _Plan, value) -> str:
    from ..vm.vm import _short
    given = _KINDS.get(type(value), type(value).__name__)
    return f"expected {plan.describe()}, given {given} {_short(value)}"


def _locate(root, target) -> Optional[str]:
    """Where ``target`` lies inside ``root`` (by identity), written after the input's name:
    ``[3]`` for a List's element, ``.value`` and ``.children`` in a Tree, ``.0`` for a tuple's
    field, ``.Some.0`` for another constructor's; None if it is not there. Breadth-first on a
    queue (used only to report a bad value)."""
    if root is target:
        return ""
    came: dict = {id(root): None}
    queue = [root]
    found = None
    for value in queue:
        cls = type(value)
        if cls is ConstructorValue:
            name = value.constructor.name_hint
            children = [((name, k), f) for k, f in enumerate(value.fields)]
        elif cls is tuple:
            children = [((None, k), f) for k, f in enumerate(value)]
        elif cls is RefValue:
            children = [(("ref", 0), value.value)]
        else:
            continue
        for step, child in children:
            if id(child) in came:
                continue
            came[id(child)] = (value, step)
            if child is target:
                found = child
                break
            queue.append(child)
        if found is not None:
            break
    if found is None:
        return None
    steps = []
    node = found
    while came[id(node)] is not None:
        node, step = came[id(node)]
        steps.append(step)
    steps.reverse()
    out, index = [], 0
    for name, k in steps:
        if name == "Cons" and k == 1:
            index += 1
            continue
        if name == "Cons":          # the element of a List
            out.append(f"[{index}]")
            index = 0
            continue
        if index:
            out.append(f"[{index}:]")
            index = 0
        if name == "Rose":
            out.append(".value" if k == 0 else ".children")
        elif name is None:
            out.append(f".{k}")
        elif name == "ref":
            out.append(".value")
        else:
            out.append(f".{name}.{k}")
    if index:
        out.append(f"[{index}:]")
    return "".join(out)


def _adapt_positional(sig: _Signature, args: tuple) -> tuple:
    """``args`` with Python lists and tuples given for ADT parameters converted."""
    for k in sig.adapt:
        if k < len(args) and isinstance(args[k], (list, tuple)):
            return _adapt_python_values(sig.params, args, {})[0]
    return args


def _adapt_python_values(params: list, args: tuple, kwargs: dict):
    """Python lists and ``(value, [children])`` tuples where a parameter's type is the prelude's
    List or Tree, converted to ADT values (:func:`relaybench.adt.from_python`)."""
    from ...adt import from_python
    by_name = {p.name_hint: p for p in params}

    def adapt(param, value):
        t = param.checked_type if param.checked_type is not None else param.type_annotation
        if isinstance(t, TypeCall) and isinstance(value, (list, tuple)):
            return from_python(value, t)
        return value

    args = tuple(adapt(p, a) for p, a in zip(params, args)) + tuple(args[len(params):])
    kwargs = {k: adapt(by_name[k], v) if k in by_name else v for k, v in kwargs.items()}
    return args, kwargs


from ..vm.vm import _bind_arguments  # noqa: E402  (the VM's checks of the arguments' kinds)
