"""Calling compiled kernels: argument checks, and a thread pool for parallel loops.

A :class:`Kernel` wraps a compiled function (a ctypes callable, see
``CompiledModule.function``) with one spec per argument. Every call checks each numpy array's
shape, dtype and C-contiguity (and that outputs are writable) against its :class:`TensorSpec`
*before* machine code runs, and raises :class:`~relaybench.errors.ExecutionError` naming the
argument, what was expected and what was given. Compiled code never sees a wrong buffer.

Parallel loops follow one convention, the one the code generator emits: the kernel takes its
arguments followed by two ``int64`` values ``begin, end`` and runs the outermost loop over
``range(begin, end)``. A kernel made with ``parallel_extent=n`` is called on ``[0, n)`` split
into contiguous ranges, one per thread: the calling thread runs the first range and a shared
:class:`WorkerPool` the others, ``RB_NUM_THREADS`` threads in all (0: one per core). ctypes calls
through a CFUNCTYPE release the GIL, so the ranges run at the same time.

A :class:`PhasedKernel` runs several compiled functions (phases) one after the other on the same
arguments plus temporaries it owns (one 64-byte aligned array each, made once); each parallel
phase is spread over the threads like a :class:`Kernel`. ``bind(*arrays)`` on either checks the
arrays once and returns a function of no arguments that runs the kernel on them: the way to call
a kernel many times on fixed buffers with the least overhead. A bound parallel kernel hands its
ranges to the spinning pool of :mod:`.spinpool` (workers waiting in machine code, so a range
reaches its thread in well under a microsecond) through the entry point the code generator
emits next to each parallel function; direct calls use the :class:`WorkerPool`.

>>> split_range(10, 3)
[(0, 4), (4, 7), (7, 10)]
>>> split_range(2, 4)
[(0, 1), (1, 2)]
>>> spec = TensorSpec("x", (2, 3), "float32")
>>> spec
TensorSpec('x', Tensor[(2, 3), float32])
>>> import numpy as np
>>> try:
...     spec.check(np.zeros((3, 2), "float32"), "demo")
... except Exception as err:
...     print(err.input_name, err.expected, err.given, sep=" | ")
x | Tensor[(2, 3), float32] | Tensor[(3, 2), float32]
"""

from __future__ import annotations

import ctypes
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ... import config
from ...errors import ExecutionError

__all__ = ["TensorSpec", "ScalarSpec", "Kernel", "PhasedKernel", "Phase", "WorkerPool",
           "split_range", "parallel_for", "thread_pool", "aligned_empty"]


def _tensor_text(shape, dtype) -> str:
    dims = ", ".join("?" if d is None else str(d) for d in shape)
    if len(shape) == 1:
        dims += ","
    return f"Tensor[({dims}), {dtype}]"


def _given(value: np.ndarray) -> str:
    return _tensor_text(value.shape, value.dtype.name)


@dataclass(frozen=True)
class TensorSpec:
    """An array argument: its name, shape (a ``None`` dimension accepts any size) and dtype.

    ``output=True`` also requires the array to be writable.
    """

    name: str
    shape: tuple
    dtype: str
    output: bool = False

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype).name)
        object.__setattr__(self, "_np_dtype", np.dtype(self.dtype))

    @property
    def ctype(self):
        return ctypes.c_void_p

    @property
    def expected(self) -> str:
        return _tensor_text(self.shape, self.dtype)

    def check(self, value, kernel: str) -> int:
        """Check ``value`` against this spec; return its data pointer."""
        if not isinstance(value, np.ndarray):
            self._fail(kernel, f"not an array: {type(value).__name__}", type(value).__name__)
        # called on every kernel launch: the text of what was given is made only for an error
        if value.dtype != self._np_dtype:
            self._fail(kernel, "wrong dtype", _given(value))
        shape = value.shape
        if shape != self.shape and (len(shape) != len(self.shape) or any(
                want is not None and want != got for want, got in zip(self.shape, shape))):
            self._fail(kernel, "wrong shape", _given(value))
        flags = value.flags
        if not flags.c_contiguous:
            self._fail(kernel, "not C-contiguous", _given(value) + " (strided)")
        if self.output and not flags.writeable:
            self._fail(kernel, "output is read-only", _given(value) + " (read-only)")
        return value.ctypes.data

    def _fail(self, kernel: str, what: str, given: str):
        raise ExecutionError(f"{kernel}: argument {self.name!r}: {what}: expected "
                             f"{self.expected}, given {given}",
                             input_name=self.name, expected=self.expected, given=given)

    def __repr__(self) -> str:
        return f"TensorSpec({self.name!r}, {self.expected}{', output' if self.output else ''})"


_SCALAR_CTYPES = {
    "int32": ctypes.c_int32, "int64": ctypes.c_int64,
    "float32": ctypes.c_float, "float64": ctypes.c_double,
}


@dataclass(frozen=True)
class ScalarSpec:
    """A scalar argument passed by value: its name and dtype (int32, int64, float32, float64)."""

    name: str
    dtype: str

    def __post_init__(self):
        if self.dtype not in _SCALAR_CTYPES:
            raise ValueError(f"scalar argument {self.name!r}: dtype {self.dtype!r} is not one of "
                             f"{', '.join(_SCALAR_CTYPES)}")

    @property
    def ctype(self):
        return _SCALAR_CTYPES[self.dtype]

    @property
    def expected(self) -> str:
        return self.dtype

    def check(self, value, kernel: str):
        integral = self.dtype.startswith("int")
        ok = isinstance(value, (int, np.integer)) if integral else \
            isinstance(value, (int, float, np.integer, np.floating))
        if not ok or isinstance(value, bool):
            given = type(value).__name__
            raise ExecutionError(f"{kernel}: argument {self.name!r}: expected a {self.dtype} "
                                 f"scalar, given {given}",
                                 input_name=self.name, expected=self.dtype, given=given)
        return int(value) if integral else float(value)


def split_range(extent: int, parts: int) -> list[tuple[int, int]]:
    """``[0, extent)`` cut into at most ``parts`` contiguous, non-empty, near-equal ranges."""
    parts = max(1, min(parts, extent))
    base, extra = divmod(extent, parts)
    ranges, begin = [], 0
    for i in range(parts):
        end = begin + base + (1 if i < extra else 0)
        if end > begin:
            ranges.append((begin, end))
        begin = end
    return ranges


class WorkerPool:
    """``size - 1`` worker threads (named ``rb-kernel-N``); the caller of :meth:`run` is the
    ``size``-th.

    Each worker waits on its own queue, so handing out ranges costs one queue put per worker and
    no future objects. Calls from several threads at once are served in the order they arrive.
    A body must not itself call :meth:`run` on the same pool (it would wait for itself).
    """

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"WorkerPool: size must be at least 1, got {size}")
        self.size = size
        self._inboxes = []
        for k in range(size - 1):
            inbox = queue.SimpleQueue()
            worker = threading.Thread(target=self._work, args=(inbox,),
                                      name=f"rb-kernel-{k}", daemon=True)
            worker.start()
            self._inboxes.append(inbox)

    @staticmethod
    def _work(inbox):
        while True:
            task = inbox.get()
            if task is None:
                return
            body, begin, end, done = task
            try:
                body(begin, end)
            except BaseException as err:  # handed to the caller of run
                done.put(err)
            else:
                done.put(None)

    def run(self, body: Callable[[int, int], object], ranges: Sequence[tuple[int, int]]) -> None:
        """``body(*ranges[0])`` in the calling thread, ``body(*ranges[k])`` on worker ``k-1``;
        returns when all have finished, re-raising the first exception (the caller's range
        first, then in order of completion)."""
        if len(ranges) > self.size:
            raise ValueError(f"WorkerPool.run: {len(ranges)} ranges for {self.size} threads")
        done = queue.SimpleQueue()
        for inbox, (begin, end) in zip(self._inboxes, ranges[1:]):
            inbox.put((body, begin, end, done))
        first_error = None
        try:
            if ranges:
                body(*ranges[0])
        except BaseException as err:  # wait for the others before raising
            first_error = err
        for _ in range(len(ranges) - 1):
            err = done.get()
            if err is not None and first_error is None:
                first_error = err
        if first_error is not None:
            raise first_error

    def shutdown(self) -> None:
        """Let the workers finish what they were given, then stop."""
        for inbox in self._inboxes:
            inbox.put(None)
        self._inboxes = []


_pools: dict[int, WorkerPool] = {}
_pool_lock = threading.Lock()


def thread_pool(num_threads: int) -> WorkerPool:
    """The shared pool of ``num_threads`` threads (the caller and ``num_threads - 1`` workers),
    made on first use. Each size has its own pool, kept for the life of the process, so callers
    asking for different sizes at the same time never wait on each other's workers."""
    pool = _pools.get(num_threads)
    if pool is None:
        with _pool_lock:
            pool = _pools.get(num_threads)
            if pool is None:
                pool = _pools[num_threads] = WorkerPool(num_threads)
    return pool


def _resolve_threads(num_threads: int | None, where: str) -> int:
    threads = num_threads if num_threads is not None else config.num_threads()
    if threads < 1:
        raise ValueError(f"{where}: num_threads must be at least 1, got {threads}")
    return threads


def parallel_for(body: Callable[[int, int], object], extent: int,
                 num_threads: int | None = None) -> list[tuple[int, int]]:
    """Run ``body(begin, end)`` over ``[0, extent)`` split across threads; return the ranges.

    ``num_threads`` defaults to ``RB_NUM_THREADS`` (0: one per core). One range runs in the
    calling thread; the others run on the pool. The first exception raised by a range is
    re-raised after every range has finished.
    """
    threads = _resolve_threads(num_threads, "parallel_for")
    ranges = split_range(extent, threads)
    if len(ranges) <= 1:
        for begin, end in ranges:
            body(begin, end)
        return ranges
    thread_pool(threads).run(body, ranges)
    return ranges


RANGES_PER_THREAD = 2
"""Ranges a parallel kernel on the spinning pool is cut into, per thread."""


@dataclass(frozen=True)
class NativeCall:
    """What a bound call does, as steps of a :class:`.spinpool.Steps` program: the graph
    executor runs a sequence of bound calls that all have one in a single call into compiled
    code. ``steps`` are ``(kind, address, args, arity, ranges, count)``; ``pool`` the spinning
    pool their jobs go to (None when they have none); ``keep`` what their addresses point into;
    ``args`` the ``int64`` arrays the steps read their arguments from (the graph executor
    re-points an input's pointer there to read a caller's array in place)."""

    steps: tuple
    pool: object = None
    keep: tuple = ()
    args: tuple = ()


def function_address(function) -> int:
    """The address of a ctypes function (the code compiled code calls)."""
    return ctypes.cast(function, ctypes.c_void_p).value


def _direct(function, values: tuple) -> NativeCall | None:
    """The step calling ``function(*values)`` directly, when every value is an integer (a
    pointer or an integer scalar: passed in the same registers as ``int64``) and there are
    not too many."""
    from .spinpool import MAX_ARITY, direct_step
    if len(values) > MAX_ARITY or not all(isinstance(v, int) for v in values):
        return None
    step, array = direct_step(function_address(function), values)
    return NativeCall((step,), None, (array, function), (array,))


def _launcher(function, values: tuple, parallel_extent: int | None, threads: int,
              keep=(), entry: int | None = None) -> Callable[[], None]:
    """A function of no arguments that calls ``function`` on ``values`` (over
    ``[0, parallel_extent)`` across ``threads`` threads when it is given); it holds on to
    ``keep`` (the arrays whose pointers are in ``values``). With ``entry``, the address of the
    kernel's uniform entry point, the ranges go to the spinning pool (:mod:`.spinpool`).
    Its ``native`` attribute is the :class:`NativeCall` doing the same (None if there is none)."""
    def made(launch, native):
        launch.native = native if native is None else \
            NativeCall(native.steps, native.pool, native.keep + (keep,), native.args)
        return launch

    if parallel_extent is None:
        return made(lambda keep=keep: function(*values), _direct(function, values))
    ranges = split_range(parallel_extent, threads)
    if not ranges:
        return made(lambda keep=keep: None, NativeCall(()))
    if len(ranges) == 1:
        return made(lambda keep=keep: function(*values, 0, parallel_extent),
                    _direct(function, values + (0, parallel_extent)))
    if entry is not None and all(isinstance(v, int) for v in values):
        from .spinpool import MAX_RANGES, STEP_POOL, ranges_array, spin_pool
        spinning = spin_pool(threads)
        # the threads claim ranges as they come (see spinpool): with a few per thread, a
        # worker that arrives late still takes its part of what is left
        table = ranges_array(split_range(parallel_extent,
                                         min(MAX_RANGES, threads * RANGES_PER_THREAD)))
        pointers = np.array(values, dtype=np.int64)
        address = pointers.ctypes.data

        def launch_spinning(keep=(keep, pointers, function)):  # function: keeps the code
            spinning.run(entry, address, table)
        return made(launch_spinning, NativeCall(
            ((STEP_POOL, entry, address, 0, table.ctypes.data, table.size // 2),), spinning,
            (pointers, table, function), (pointers,)))

    pool = thread_pool(threads)

    def body(begin, end):
        function(*values, begin, end)

    def launch(keep=keep):
        pool.run(body, ranges)
    return made(launch, None)


def join_native(calls) -> NativeCall | None:
    """One :class:`NativeCall` doing what ``calls`` (bound calls) do in turn, or None when
    one of them has none or they use different pools."""
    steps, keep, args, pool = [], [], [], None
    for call in calls:
        native = getattr(call, "native", None)
        if native is None or (native.pool is not None and pool is not None
                              and native.pool is not pool):
            return None
        pool = pool or native.pool
        steps.extend(native.steps)
        keep.append(native.keep)
        args.extend(native.args)
    return NativeCall(tuple(steps), pool, tuple(keep), tuple(args))


def aligned_empty(shape, dtype, alignment: int = 64) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts on an ``alignment``-byte boundary.

    >>> int(aligned_empty((3, 5), "float32").ctypes.data % 64)
    0
    """
    dtype = np.dtype(dtype)
    count = 1
    for extent in shape:
        count *= int(extent)
    raw = np.empty(count * dtype.itemsize + alignment, np.uint8)
    skip = (-raw.ctypes.data) % alignment
    return raw[skip:skip + count * dtype.itemsize].view(dtype).reshape(tuple(shape))


class Kernel:
    """A compiled function with checked arguments.

    ``function`` is a ctypes callable taking the arguments in ``arg_specs`` order (arrays as
    pointers), followed by ``int64 begin, int64 end`` when ``parallel_extent`` is given: the call
    then covers ``[0, parallel_extent)`` across ``num_threads`` threads (default
    ``RB_NUM_THREADS``).
    """

    def __init__(self, name: str, function, arg_specs: Sequence[TensorSpec | ScalarSpec], *,
                 parallel_extent: int | None = None, num_threads: int | None = None,
                 entry: int | None = None):
        self.name = name
        self.function = function
        self.entry = entry
        self.arg_specs = tuple(arg_specs)
        self.parallel_extent = parallel_extent
        self.num_threads = num_threads
        names = [spec.name for spec in self.arg_specs]
        if len(set(names)) != len(names):
            raise ValueError(f"kernel {name}: argument names repeat: {names}")

    @property
    def argtypes(self) -> list:
        """The ctypes types of the compiled function's parameters, ``begin, end`` included."""
        types = [spec.ctype for spec in self.arg_specs]
        if self.parallel_extent is not None:
            types += [ctypes.c_int64, ctypes.c_int64]
        return types

    def check(self, args: Sequence) -> list:
        """Check ``args`` against the specs; return the values to pass (arrays as pointers)."""
        if len(args) != len(self.arg_specs):
            expected = ", ".join(spec.name for spec in self.arg_specs)
            raise ExecutionError(f"{self.name}: {len(args)} arguments given, expected "
                                 f"{len(self.arg_specs)} ({expected})",
                                 expected=len(self.arg_specs), given=len(args))
        return [spec.check(value, self.name) for spec, value in zip(self.arg_specs, args)]

    def __call__(self, *args, num_threads: int | None = None) -> None:
        values = self.check(args)
        if self.parallel_extent is None:
            self.function(*values)
            return
        threads = num_threads if num_threads is not None else self.num_threads
        parallel_for(lambda begin, end: self.function(*values, begin, end),
                     self.parallel_extent, threads)

    def bind(self, *args, num_threads: int | None = None) -> Callable[[], None]:
        """Check ``args`` now and return a function of no arguments that runs the kernel on
        them. The arrays are kept alive by the returned function; the thread count is fixed
        when binding (default ``num_threads`` of the kernel, then ``RB_NUM_THREADS``)."""
        values = tuple(self.check(args))
        threads = _resolve_threads(num_threads if num_threads is not None else self.num_threads,
                                   self.name)
        return _launcher(self.function, values, self.parallel_extent, threads, keep=args,
                         entry=self.entry)

    def __repr__(self) -> str:
        specs = ", ".join(f"{s.name}: {s.expected}" for s in self.arg_specs)
        par = f", parallel over {self.parallel_extent}" if self.parallel_extent is not None else ""
        return f"Kernel({self.name}({specs}){par})"


@dataclass(frozen=True)
class Phase:
    """One compiled function of a :class:`PhasedKernel`: a ctypes callable taking the kernel's
    arguments then its temporaries (then ``int64 begin, end`` when ``parallel_extent`` is
    given)."""

    name: str
    function: object
    parallel_extent: int | None = None
    entry: int | None = None


class PhasedKernel:
    """Compiled functions run in order on the same checked arguments and on temporaries the
    kernel owns.

    ``temporaries`` are ``(name, shape, dtype)``; each becomes a 64-byte aligned array made once,
    so calls of one PhasedKernel must not overlap in time (each thread should build its own).
    A parallel phase is spread over ``num_threads`` threads (default ``RB_NUM_THREADS``) and
    finishes before the next phase starts.
    """

    def __init__(self, name: str, phases: Sequence[Phase],
                 arg_specs: Sequence[TensorSpec | ScalarSpec],
                 temporaries: Sequence[tuple] = (), *, num_threads: int | None = None):
        self.name = name
        self.phases = tuple(phases)
        self.arg_specs = tuple(arg_specs)
        self.num_threads = num_threads
        self.temporaries = tuple(aligned_empty(shape, dtype) for _, shape, dtype in temporaries)
        self.temporary_names = tuple(name for name, _, _ in temporaries)
        self._temporary_pointers = tuple(t.ctypes.data for t in self.temporaries)
        names = [spec.name for spec in self.arg_specs] + list(self.temporary_names)
        if len(set(names)) != len(names):
            raise ValueError(f"kernel {name}: argument and temporary names repeat: {names}")

    @property
    def parallel_extent(self) -> tuple:
        """The parallel extent of each phase (None for a serial one)."""
        return tuple(phase.parallel_extent for phase in self.phases)

    check = Kernel.check

    def bind(self, *args, num_threads: int | None = None) -> Callable[[], None]:
        """As :meth:`Kernel.bind`: check once, then run every phase on each call."""
        values = tuple(self.check(args)) + self._temporary_pointers
        threads = _resolve_threads(num_threads if num_threads is not None else self.num_threads,
                                   self.name)
        launches = tuple(_launcher(phase.function, values, phase.parallel_extent, threads,
                                   entry=phase.entry)
                         for phase in self.phases)

        def run_phases(keep=(args, self.temporaries)):
            for launch in launches:
                launch()
        native = join_native(launches)
        run_phases.native = native if native is None else \
            NativeCall(native.steps, native.pool, native.keep + ((args, self.temporaries),),
                       native.args)
        return run_phases

    def __call__(self, *args, num_threads: int | None = None) -> None:
        self.bind(*args, num_threads=num_threads)()

    def __repr__(self) -> str:
        specs = ", ".join(f"{s.name}: {s.expected}" for s in self.arg_specs)
        phases = ", ".join(p.name if p.parallel_extent is None
                           else f"{p.name} parallel over {p.parallel_extent}"
                           for p in self.phases)
        return f"PhasedKernel({self.name}({specs}); {phases})"
