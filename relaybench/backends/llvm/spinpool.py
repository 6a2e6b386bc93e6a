"""A thread pool whose workers wait in machine code: handing out a parallel loop costs a few
stores, not a thread wake-up.

Waking a blocked thread takes tens of microseconds (more in a virtual machine), as long as a
small kernel runs; a graph of fifty such kernels would lose most of its second core to it. Here
each worker thread calls a compiled function, ``rb_pool_worker(slot)``, once, through ctypes (so
the GIL is released for as long as it lives): the function spins on its slot, a cache line of
``int64`` words, for a new task; runs it; writes back that it is done; and spins again. After
5 ms without work (:data:`SPIN_SECONDS`) it sleeps in short naps (``usleep``), so an idle pool
costs nothing worth measuring. The spin is counted in ``pause`` instructions, whose length
differs between CPUs (from about 10 to about 140 cycles), so each process measures it once
(:func:`spin_limit`) and a worker waits as long on every host. On a 2-core virtual machine
(AMD EPYC), the DQN at two threads called again and again from Python, in blocks of 0.2 s
with 50 ms pauses between them, ran in 0.14-0.15 ms with a 5 ms spin, and in 0.14-0.30 ms
(some blocks twice as slow) with the earlier fixed count of 20,000 pauses (0.5 ms there) or a
1 ms spin: a worker that has started napping wakes late for the next parallel kernel.

A task is a compiled entry point of the uniform shape ``entry(int64 *args, int64 begin, int64
end)`` (the code generator emits one next to each parallel kernel, unpacking ``args`` into the
kernel's pointers) with its argument array and range. :meth:`SpinPool.run` writes each worker's
task into its slot, the generation number last (x86 keeps stores in order, and the worker reads
the generation with acquire ordering before the rest), runs the first range in the calling
thread, then waits in ``rb_pool_wait``, compiled too, until every worker reports that
generation done; a waiter that spins too long yields the core (``sched_yield``), so a machine with
more threads than cores still moves on.

Slot words: 0 generation, 1 entry address, 2 argument array address, 3 begin, 4 end, 5 done
generation, 6 stop flag, 7 the spin limit (``pause`` instructions before napping; the waiter
reads the first slot's).
"""

from __future__ import annotations

import atexit
import ctypes
import threading

import numpy as np

__all__ = ["SpinPool", "spin_pool", "ENTRY_TYPE"]

SPIN_SECONDS = 0.005
"""How long a worker spins without work before it starts napping (and a waiter before it
yields its core): :func:`spin_limit` turns it into a count of ``pause`` instructions."""

NAP_MICROSECONDS = 50

_GEN, _ENTRY, _ARGS, _BEGIN, _END, _DONE, _STOP, _LIMIT = range(8)
_SLOT_WORDS = 8  # one 64-byte cache line per worker

#: The ctypes type of a task's entry point.
ENTRY_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)

_compiled = None
_compile_lock = threading.Lock()


def _module():
    from llvmlite import ir

    i64 = ir.IntType(64)
    i32 = ir.IntType(32)
    void = ir.VoidType()
    p64 = ir.PointerType(i64)
    module = ir.Module(name="rb_spin_pool")
    pause = ir.Function(module, ir.FunctionType(void, []), "llvm.x86.sse2.pause")
    usleep = ir.Function(module, ir.FunctionType(i32, [i32]), "usleep")
    sched_yield = ir.Function(module, ir.FunctionType(i32, []), "sched_yield")
    entry_type = ir.FunctionType(void, [p64, i64, i64])

    def word(b, base, index):
        return b.gep(base, [ir.Constant(i64, index)])

    # ---- void rb_pool_worker(i64 *slot)
    fn = ir.Function(module, ir.FunctionType(void, [p64]), "rb_pool_worker")
    slot = fn.args[0]
    blocks = {n: fn.append_basic_block(n) for n in
              ("entry", "top", "wait", "idle", "spin", "nap", "run", "stop")}
    b = ir.IRBuilder(blocks["entry"])
    seen = b.alloca(i64, name="seen")
    spins = b.alloca(i64, name="spins")
    b.store(ir.Constant(i64, 0), seen)
    b.branch(blocks["top"])
    b.position_at_end(blocks["top"])
    b.store(ir.Constant(i64, 0), spins)
    b.branch(blocks["wait"])
    b.position_at_end(blocks["wait"])
    stop = b.load_atomic(word(b, slot, _STOP), "acquire", 8)
    stopped = b.icmp_signed("!=", stop, ir.Constant(i64, 0))
    gen = b.load_atomic(word(b, slot, _GEN), "acquire", 8)
    fresh = b.icmp_signed("!=", gen, b.load(seen))
    b.cbranch(stopped, blocks["stop"], blocks["idle"])
    b.position_at_end(blocks["idle"])
    b.cbranch(fresh, blocks["run"], blocks["spin"])
    b.position_at_end(blocks["spin"])
    count = b.load(spins)
    b.store(b.add(count, ir.Constant(i64, 1)), spins)
    keep_spinning = b.icmp_signed("<", count, b.load(word(b, slot, _LIMIT)))
    spin_more = fn.append_basic_block("spin_more")
    b.cbranch(keep_spinning, spin_more, blocks["nap"])
    b.position_at_end(spin_more)
    b.call(pause, [])
    b.branch(blocks["wait"])
    b.position_at_end(blocks["nap"])
    b.call(usleep, [ir.Constant(i32, NAP_MICROSECONDS)])
    b.branch(blocks["wait"])
    b.position_at_end(blocks["run"])
    b.store(gen, seen)
    target = b.inttoptr(b.load(word(b, slot, _ENTRY)), ir.PointerType(entry_type))
    args = b.inttoptr(b.load(word(b, slot, _ARGS)), p64)
    b.call(target, [args, b.load(word(b, slot, _BEGIN)), b.load(word(b, slot, _END))])
    b.store_atomic(gen, word(b, slot, _DONE), "release", 8)
    b.branch(blocks["top"])
    b.position_at_end(blocks["stop"])
    b.ret_void()

    # ---- void rb_pool_wait(i64 *slots, i64 count, i64 gen)
    fn = ir.Function(module, ir.FunctionType(void, [p64, i64, i64]), "rb_pool_wait")
    slots, count, gen = fn.args
    entry = fn.append_basic_block("entry")
    head = fn.append_basic_block("head")
    poll = fn.append_basic_block("poll")
    busy = fn.append_basic_block("busy")
    spin = fn.append_basic_block("spin")
    give = fn.append_basic_block("give")
    advance = fn.append_basic_block("advance")
    done = fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    index = b.alloca(i64, name="k")
    tries = b.alloca(i64, name="tries")
    limit = b.load(word(b, slots, _LIMIT))
    b.store(ir.Constant(i64, 0), index)
    b.branch(head)
    b.position_at_end(head)
    k = b.load(index)
    b.store(ir.Constant(i64, 0), tries)
    b.cbranch(b.icmp_signed("<", k, count), poll, done)
    b.position_at_end(poll)
    offset = b.add(b.mul(b.load(index), ir.Constant(i64, _SLOT_WORDS)), ir.Constant(i64, _DONE))
    finished = b.load_atomic(b.gep(slots, [offset]), "acquire", 8)
    b.cbranch(b.icmp_signed("==", finished, gen), advance, busy)
    b.position_at_end(busy)
    t = b.load(tries)
    b.store(b.add(t, ir.Constant(i64, 1)), tries)
    b.cbranch(b.icmp_signed("<", t, limit), spin, give)
    b.position_at_end(spin)
    b.call(pause, [])
    b.branch(poll)
    b.position_at_end(give)
    b.call(sched_yield, [])
    b.branch(poll)
    b.position_at_end(advance)
    b.store(b.add(b.load(index), ir.Constant(i64, 1)), index)
    b.branch(head)
    b.position_at_end(done)
    b.ret_void()

    # ---- void rb_pool_pauses(i64 n): n pause instructions, to time them
    fn = ir.Function(module, ir.FunctionType(void, [i64]), "rb_pool_pauses")
    entry, loop, done = (fn.append_basic_block(n) for n in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", fn.args[0], ir.Constant(i64, 0)), loop, done)
    b.position_at_end(loop)
    k = b.phi(i64)
    k.add_incoming(ir.Constant(i64, 0), entry)
    b.call(pause, [])
    after = b.add(k, ir.Constant(i64, 1))
    k.add_incoming(after, loop)
    b.cbranch(b.icmp_signed("<", after, fn.args[0]), loop, done)
    b.position_at_end(done)
    b.ret_void()
    return module


def _functions():
    """The compiled worker and wait functions (compiled once per process)."""
    global _compiled
    with _compile_lock:
        if _compiled is None:
            from .jit import compile_module
            compiled = compile_module(_module(), name="rb_spin_pool")
            worker = compiled.function("rb_pool_worker", [ctypes.c_void_p])
            wait = compiled.function("rb_pool_wait",
                                     [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64])
            pauses = compiled.function("rb_pool_pauses", [ctypes.c_int64])
            _compiled = (compiled, worker, wait, pauses)
    return _compiled[1], _compiled[2]


_limit: int | None = None


def spin_limit() -> int:
    """The ``pause`` instructions that last :data:`SPIN_SECONDS` on this CPU, measured once per
    process (the fastest of five runs of 2,000, well under a millisecond in all)."""
    global _limit
    if _limit is None:
        import time
        _functions()
        pauses = _compiled[3]
        n, best = 2000, float("inf")
        pauses(n)  # warm: the code and the ctypes call
        for _ in range(5):
            start = time.perf_counter()
            pauses(n)
            best = min(best, time.perf_counter() - start)
        _limit = int(min(max(SPIN_SECONDS * n / max(best, 1e-9), 1000), 10_000_000))
    return _limit


class SpinPool:
    """``size - 1`` workers spinning in machine code; the caller of :meth:`run` is the
    ``size``-th thread. Calls from several Python threads are served one at a time."""

    def __init__(self, size: int):
        if size < 2:
            raise ValueError(f"SpinPool: size must be at least 2, got {size}")
        self.size = size
        self._worker, self._wait = _functions()
        raw = np.zeros((size - 1) * _SLOT_WORDS + 8, np.int64)
        skip = ((-raw.ctypes.data) % 64) // 8
        self._slots = raw[skip:skip + (size - 1) * _SLOT_WORDS].reshape(size - 1, _SLOT_WORDS)
        self._slots_pointer = self._slots.ctypes.data
        self._slots[:, _LIMIT] = spin_limit()
        self._generation = 0
        self._lock = threading.Lock()
        self._threads = []
        for k in range(size - 1):
            address = self._slots_pointer + k * _SLOT_WORDS * 8
            thread = threading.Thread(target=self._worker, args=(address,),
                                      name=f"rb-spin-{k}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def run(self, entry: int, args: int, ranges, call=None) -> None:
        """``entry(args, *ranges[0])`` here and ``entry(args, *ranges[k])`` on worker ``k-1``;
        returns when every range is done. ``entry`` and ``args`` are addresses.

        ``call`` is ``entry`` as a ctypes function (``ENTRY_TYPE(entry)``), through which this
        thread runs its range: a caller that launches one entry many times makes it once and
        keeps it as long as the entry's code (the runtime's launchers do); without it one is
        made for this call. The pool keeps none, so that it holds nothing of a kernel whose
        module is gone."""
        if len(ranges) > self.size:
            raise ValueError(f"SpinPool.run: {len(ranges)} ranges for {self.size} threads")
        if self._threads is None:
            raise RuntimeError("SpinPool.run after shutdown")
        with self._lock:
            self._generation += 1
            gen = self._generation
            slots = self._slots
            for k, (begin, end) in enumerate(ranges[1:]):
                slot = slots[k]
                slot[_ENTRY] = entry
                slot[_ARGS] = args
                slot[_BEGIN] = begin
                slot[_END] = end
                slot[_GEN] = gen  # last: the worker reads it first
            if ranges:
                (call or ENTRY_TYPE(entry))(args, *ranges[0])
            self._wait(self._slots_pointer, len(ranges) - 1, gen)

    def shutdown(self) -> None:
        """Stop the workers (they leave their loop within a nap)."""
        if self._threads is None:
            return
        self._slots[:, _STOP] = 1
        for thread in self._threads:
            thread.join(timeout=1.0)
        self._threads = None


_pools: dict = {}
_pools_lock = threading.Lock()


def spin_pool(size: int) -> SpinPool:
    """The process's spinning pool of ``size`` threads, made on first use."""
    pool = _pools.get(size)
    if pool is None:
        with _pools_lock:
            pool = _pools.get(size)
            if pool is None:
                pool = _pools[size] = SpinPool(size)
    return pool


@atexit.register
def _stop_all() -> None:
    for pool in list(_pools.values()):
        pool.shutdown()
