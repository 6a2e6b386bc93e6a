"""Calling compiled kernels: argument checks, and a thread pool for parallel loops.

A :class:`Kernel` wraps a compiled function (a ctypes callable, see
``CompiledModule.function``) with one spec per argument. Every call checks each numpy array's
shape, dtype and C-contiguity (and that outputs are writable) against its :class:`TensorSpec`
*before* machine code runs, and raises :class:`~relaybench.errors.ExecutionError` naming the
argument, what was expected and what was given. Compiled code never sees a wrong buffer.

Parallel loops follow one convention, the one the code generator emits: the kernel takes its
arguments followed by two ``int64`` values ``begin, end`` and runs the outermost loop over
``range(begin, end)``. A kernel made with ``parallel_extent=n`` is called on ``[0, n)`` split
into contiguous ranges, one per thread of a shared pool of ``RB_NUM_THREADS`` threads (0: one per
core). ctypes calls through a CFUNCTYPE release the GIL, so the ranges run at the same time.

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
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ... import config
from ...errors import ExecutionError

__all__ = ["TensorSpec", "ScalarSpec", "Kernel", "split_range", "parallel_for", "thread_pool"]


def _tensor_text(shape, dtype) -> str:
    dims = ", ".join("?" if d is None else str(d) for d in shape)
    if len(shape) == 1:
        dims += ","
    return f"Tensor[({dims}), {dtype}]"


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
        given = _tensor_text(value.shape, value.dtype.name)
        if value.dtype != np.dtype(self.dtype):
            self._fail(kernel, "wrong dtype", given)
        if len(value.shape) != len(self.shape) or any(
                want is not None and want != got for want, got in zip(self.shape, value.shape)):
            self._fail(kernel, "wrong shape", given)
        if not value.flags.c_contiguous:
            self._fail(kernel, "not C-contiguous", given + " (strided)")
        if self.output and not value.flags.writeable:
            self._fail(kernel, "output is read-only", given + " (read-only)")
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


_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_pool_lock = threading.Lock()


def thread_pool(num_threads: int) -> ThreadPoolExecutor:
    """The shared pool, (re)made with ``num_threads`` workers when the size changes."""
    global _pool, _pool_size
    with _pool_lock:
        if _pool is None or _pool_size != num_threads:
            if _pool is not None:
                _pool.shutdown(wait=True)
            _pool = ThreadPoolExecutor(max_workers=num_threads, thread_name_prefix="rb-kernel")
            _pool_size = num_threads
        return _pool


def parallel_for(body: Callable[[int, int], object], extent: int,
                 num_threads: int | None = None) -> list[tuple[int, int]]:
    """Run ``body(begin, end)`` over ``[0, extent)`` split across threads; return the ranges.

    ``num_threads`` defaults to ``RB_NUM_THREADS`` (0: one per core). One range runs in the
    calling thread; the others run on the pool. The first exception raised by a range is
    re-raised after every range has finished.
    """
    threads = num_threads if num_threads is not None else config.num_threads()
    if threads < 1:
        raise ValueError(f"parallel_for: num_threads must be at least 1, got {threads}")
    ranges = split_range(extent, threads)
    if len(ranges) <= 1:
        for begin, end in ranges:
            body(begin, end)
        return ranges
    pool = thread_pool(threads)
    futures = [pool.submit(body, begin, end) for begin, end in ranges[1:]]
    first_error = None
    try:
        body(*ranges[0])
    except BaseException as err:  # wait for the others before raising
        first_error = err
    for future in futures:
        err = future.exception()
        if err is not None and first_error is None:
            first_error = err
    if first_error is not None:
        raise first_error
    return ranges


class Kernel:
    """A compiled function with checked arguments.

    ``function`` is a ctypes callable taking the arguments in ``arg_specs`` order (arrays as
    pointers), followed by ``int64 begin, int64 end`` when ``parallel_extent`` is given: the call
    then covers ``[0, parallel_extent)`` across ``num_threads`` threads (default
    ``RB_NUM_THREADS``).
    """

    def __init__(self, name: str, function, arg_specs: Sequence[TensorSpec | ScalarSpec], *,
                 parallel_extent: int | None = None, num_threads: int | None = None):
        self.name = name
        self.function = function
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

    def __repr__(self) -> str:
        specs = ", ".join(f"{s.name}: {s.expected}" for s in self.arg_specs)
        par = f", parallel over {self.parallel_extent}" if self.parallel_extent is not None else ""
        return f"Kernel({self.name}({specs}){par})"
