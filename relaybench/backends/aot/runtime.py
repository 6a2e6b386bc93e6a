"""Running an AoT-compiled program: the one call from Python into native code, and the values
converted at that boundary.

:class:`AotModule` is what ``rb.build(mod, executor="aot")`` returns. ``run(*args, **kwargs)``
(or ``invoke(name, ...)``) checks the inputs against the function's parameter types (the VM's
checks: dtype, shape, kind of value, naming the input), lays them out as native objects in an
``int64`` buffer (tensors point at the numpy arrays' data, so inputs are not copied), calls the
function's entry point once through ctypes (the GIL released), and converts the result back:
tensors copied out of the arena into numpy arrays, tuples as tuples, ADT objects as the
interpreter's :class:`~relaybench.backends.interpreter.ConstructorValue`, references as
:class:`~relaybench.backends.interpreter.RefValue` (an input reference gets the value the run
left in it). The prelude's List and Tree may be given as Python lists and ``(value, [children])``
tuples where the parameter's type says so (:func:`relaybench.adt.from_python`). A closure in
the result comes back as an opaque object naming its function: its captured values lived in the
run's arena, so it cannot be called after the run (closures are not taken as inputs either).

When the run stops early the context says why: the arena was full (the run is repeated on an
arena twice as large, kept for later runs), the native stack ran out (the run is repeated on a
thread of its own with a stack of ``RB_AOT_STACK_MB``; only when that is too small too is it an
error), or a ``Fatal`` (a match no clause accepts) raised :class:`ExecutionError` with its
message and the value. Runs are pure apart from their inputs' references, so repeating one is
safe.
"""

from __future__ import annotations

import ctypes
import threading
import time
from typing import Optional

import numpy as np

from ...errors import ExecutionError
from ...ir.types import TypeCall
from . import compiler as C

__all__ = ["AotModule"]

#: the stack the calling thread lends a run (bytes below the entry's frame)
CALLER_STACK_BUDGET = 512 * 1024
#: the first arena's size in bytes
FIRST_ARENA = 1 << 20


def _aligned_words(count: int) -> np.ndarray:
    raw = np.zeros(count + 8, np.int64)
    skip = ((-raw.ctypes.data) % 64) // 8
    return raw[skip:skip + count]


def _read_words(address: int, count: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_int64 * count).from_address(address))


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
        self._add_native(native)
        self._ctx = _aligned_words(C.CTX_WORDS)
        self._arena = _aligned_words(FIRST_ARENA // 8)
        self._lock = threading.Lock()
        self.runs = 0

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
        from ..vm.vm import _bind_arguments
        native, entry = self._entry(name)
        func = self.exe.function(name)
        params = list(func.source.params)
        args, kwargs = _adapt_python_values(params, args, kwargs)
        values = _bind_arguments(f"@{name}", params, args, kwargs)
        with self._lock:
            return self._call(name, native.program, entry, values)

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
    def _call(self, name, program, entry, values):
        import gc
        from ... import config
        collecting = gc.isenabled()
        gc.disable()    # the conversions make many small objects and no cycles
        try:
            return self._call_once(name, program, entry, values, config)
        finally:
            if collecting:
                gc.enable()

    def _call_once(self, name, program, entry, values, config):
        inputs = _Inputs(values, f"@{name}", program.constructor_number)
        deep = False
        stack = int(config.get("RB_AOT_STACK_MB")) << 20
        while True:
            inputs.reset()
            if deep:
                result = self._on_big_stack(program, entry, inputs, stack)
            else:
                result = self._native(program, entry, inputs, CALLER_STACK_BUDGET)
            ctx = self._ctx
            error = int(ctx[C.CTX_ERROR])
            if error == C.ERROR_STACK and not deep:
                deep = True
                continue
            if error == C.ERROR_STACK:
                func = self.exe.functions[int(ctx[C.CTX_ERROR_INFO])]
                raise ExecutionError(
                    f"@{name}: the recursion (in @{func.name}) is deeper than the native "
                    f"stack of {stack >> 20} MiB allows (RB_AOT_STACK_MB)")
            if error == C.ERROR_ARENA:
                self._arena = _aligned_words(self._arena.size * 2)
                continue
            if error == C.ERROR_FATAL:
                from ..vm.vm import _short
                message = program.messages[int(ctx[C.CTX_ERROR_INFO])]
                subject = int(ctx[C.CTX_ERROR_SUBJECT])
                if subject:
                    raise ExecutionError(f"{message}: {_short(self._to_python(subject, program))}")
                raise ExecutionError(message)
            if error or not result:
                raise ExecutionError(f"@{name}: the native run stopped with error {error}")
            self.runs += 1
            out = self._to_python(result, program)
            inputs.write_back_references(lambda a: self._to_python(a, program))
            return out

    def _native(self, program, entry, inputs, budget: int) -> int:
        """The one call into native code. A program whose kernels use the spinning pool holds
        the pool's lock for the whole run and gives the generation counter back after."""
        ctx = self._ctx
        ctx[:] = 0
        ctx[C.CTX_ARENA] = self._arena.ctypes.data
        ctx[C.CTX_ARENA_END] = self._arena.ctypes.data + self._arena.nbytes
        ctx[C.CTX_STACK_BUDGET] = budget
        pool = program.pool
        if pool is None:
            return entry(ctx.ctypes.data, inputs.args.ctypes.data)
        with pool._lock:
            ctx[C.CTX_POOL_GENERATION] = pool._generation
            try:
                return entry(ctx.ctypes.data, inputs.args.ctypes.data)
            finally:
                pool._generation = int(ctx[C.CTX_POOL_GENERATION])

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


class _NativeClosure:
    """A closure a native run returned: it names its function; it cannot be called after the
    run (its captured values lived in the run's arena)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"<aot closure {self.name}>"


_stack_size_lock = threading.Lock()


class _Inputs:
    """The arguments of one run as native objects: ``args`` holds their addresses; the words of
    tensors, tuples, ADT objects and references lie in ``words`` (tensors point at the arrays'
    data). Each object is visited once and laid out where it is first met; its fields hold the
    indices of their values' entries until the values have offsets, then become addresses in
    one vectorized step."""

    def __init__(self, values: list, where: str, constructor_number):
        from ..interpreter import ConstructorValue, RefValue
        from ..vm.vm import VMClosure
        words: list = []
        field_slots: list = []      # positions in ``words`` of the fields of objects
        field_values: list = []     # ... and the values they hold
        offsets: dict = {}          # id(value) -> word offset
        keep: list = []
        refs: list = []             # (RefValue, word offset)
        codes = _CODES_BY_DTYPE
        ndarray, generic = np.ndarray, np.generic
        kind_tensor, header = C.KIND_TENSOR, C.HEADER
        numbers: dict = {}          # id(constructor) -> its number in the program
        address_of, from_buffer = ctypes.addressof, ctypes.c_char.from_buffer
        pending = list(reversed(values))
        while pending:
            value = pending.pop()
            key = id(value)
            if key in offsets:
                continue
            cls = type(value)
            offset = offsets[key] = len(words)
            if cls is ndarray or isinstance(value, (ndarray, generic)):
                array = value
                if cls is not ndarray or not (value.flags.c_contiguous and value.flags.aligned):
                    array = np.require(np.asarray(value), requirements=("C", "A"))
                code = codes.get(array.dtype)
                if code is None:
                    raise ExecutionError(f"{where}: AoT has no tensor dtype {array.dtype.name}")
                keep.append(array)
                try:
                    data = address_of(from_buffer(array))
                except (TypeError, ValueError):     # read-only or empty
                    data = array.ctypes.data
                words += (kind_tensor, data, code, array.ndim)
                words += array.shape
                continue
            if cls is ConstructorValue:
                fields = value.fields
                con = value.constructor
                number = numbers.get(id(con))
                if number is None:
                    number = numbers[id(con)] = constructor_number(con)
                words += (C.KIND_ADT, con.tag, len(fields), number)
            elif cls is tuple:
                fields = value
                words += (C.KIND_TUPLE, 0, len(fields), 0)
            elif cls is RefValue:
                fields = (value.value,)
                words += (C.KIND_REF, 0, 1, 0)
                refs.append((value, offset))
            elif isinstance(value, VMClosure):
                raise ExecutionError(f"{where}: AoT takes no closures as inputs")
            else:
                raise ExecutionError(f"{where}: cannot pass {cls.__name__} to native code")
            keep.append(value)
            if fields:
                field_slots.extend(range(offset + header, offset + header + len(fields)))
                field_values.extend(fields)
                words += fields     # placeholders, replaced below
                pending.extend(reversed(fields))
        for i, slot in enumerate(field_slots):
            words[slot] = offsets[id(field_values[i])]
        self.words = _aligned_words(max(len(words), 1))
        self.words[:len(words)] = words
        base = self.words.ctypes.data
        if field_slots:
            index = np.asarray(field_slots, np.int64)
            self.words[index] = self.words[index] * 8 + base
        self.keep = keep
        self.refs = refs
        self.args = np.array([base + 8 * offsets[id(v)] for v in values] or [0], np.int64)
        self._initial = self.words.copy() if refs else None

    def reset(self) -> None:
        """The words as they were before a run (references written by a run undone)."""
        if self._initial is not None:
            self.words[:] = self._initial

    def write_back_references(self, to_python) -> None:
        """Each input reference takes the value the run left in it."""
        for ref, offset in self.refs:
            ref.value = to_python(int(self.words[offset + C.HEADER]))


_DTYPE_CODES = {name: code for code, name in enumerate(C.DTYPES)}
_DTYPES = [np.dtype(name) for name in C.DTYPES]
#: dtype -> code, keyed by the dtype object (its ``name`` is slow to compute)
_CODES_BY_DTYPE = {np.dtype(name): code for code, name in enumerate(C.DTYPES)}


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
