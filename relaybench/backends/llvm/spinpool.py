"""A thread pool whose workers wait in machine code: handing out a parallel loop costs a few
stores, not a thread wake-up.

Waking a blocked thread takes tens of microseconds (more in a virtual machine), as long as a
small kernel runs; a graph of fifty such kernels would lose most of its second core to it. Here
each worker thread calls a compiled function, ``rb_pool_worker(header)``, once, through ctypes
(so the GIL is released for as long as it lives): the function spins on the pool's job header,
a few cache lines of ``int64`` words, for a new job; takes part in it; and spins again. After
5 ms without work (:data:`SPIN_SECONDS`) it sleeps in short naps (``usleep``), so an idle pool
costs nothing worth measuring. The spin is counted in ``pause`` instructions, whose length
differs between CPUs (from about 10 to about 140 cycles), so each process measures it once
(:func:`spin_limit`) and a worker waits as long on every host. On a 2-core virtual machine
(AMD EPYC), the DQN at two threads called again and again from Python, in blocks of 0.2 s
with 50 ms pauses between them, ran in 0.14-0.15 ms with a 5 ms spin, and in 0.14-0.30 ms
(some blocks twice as slow) with the earlier fixed count of 20,000 pauses (0.5 ms there) or a
1 ms spin: a worker that has started napping wakes late for the next parallel kernel.

A job is a compiled entry point of the uniform shape ``entry(int64 *args, int64 begin, int64
end)`` (the code generator emits one next to each parallel kernel, unpacking ``args`` into the
kernel's pointers), its argument array and a table of ranges. The ranges are not dealt out:
every thread, the caller too (in ``rb_pool_launch``), claims the next one with a compare-and-swap
until none is left, so a worker whose core another program holds (PyTorch's threads spin for
a while after each of its calls) leaves its share to the threads that are there: the caller
never waits for a range nobody has started. The caller then waits until every range is
finished; a waiter that spins too long yields its core (``sched_yield``). The DQN at two
threads, called in blocks of 0.2 s, each after a block of PyTorch's and a 50 ms pause: with
the ranges dealt, one per thread, the blocks' medians were 0.18-0.30 ms (0.29 in most: the
caller waiting for a worker without a core); claimed, two ranges per thread
(``runtime.RANGES_PER_THREAD``), 0.14-0.26 ms, where ONNX Runtime took 0.16-0.29 ms in the
same blocks.

A job is published by ``rb_pool_launch(header, entry, args, ranges, count)``, compiled too, so
handing out a parallel kernel costs one ctypes call from Python (:meth:`SpinPool.run`) or none
from compiled code (the AoT compiler's programs call it; so does a :class:`Steps` program).

Header words: 0 generation (the workers wake when it changes; the launcher, one at a time
under the pool's lock, sets it to its old value plus one), 1 entry address, 2 argument array
address, 3 unused, 4 stop flag, 5 the spin limit (``pause`` instructions before
napping), 6 the address of the ranges' table (``int64`` pairs begin, end); word 8 the claim
word, ``(job tag << 32) | (number of ranges << 16) | next range``; word 16 the ranges
finished.

A :class:`Steps` program is a table of kernel calls run by one call into compiled code
(``rb_run_steps``): a direct call of a function with up to :data:`MAX_ARITY` ``int64``
arguments (passed in a few fixed counts, so the runner has four call sites, not one per
count), or a job for the pool. The graph executor runs its compiled kernels that way: a
small model's run is tens of kernel calls, each of which cost 1-4 microseconds in Python and
ctypes (the DQN at two threads, seven kernels and six jobs: 0.148 ms a run through Python,
0.128 ms as one program, medians of 9,000 runs alternating in one process).
"""

from __future__ import annotations

import atexit
import ctypes
import threading

import numpy as np

__all__ = ["SpinPool", "Steps", "spin_pool", "ranges_array", "direct_step"]

SPIN_SECONDS = 0.005
"""How long a worker spins without work before it starts napping (and a waiter before it
yields its core): :func:`spin_limit` turns it into a count of ``pause`` instructions."""

NAP_MICROSECONDS = 50

# the job header: one cache line the workers read, then the claim counter and the count of
# finished ranges on cache lines of their own
_GEN, _ENTRY, _ARGS, _STOP, _LIMIT, _RANGES = 0, 1, 2, 4, 5, 6
_NEXT, _FINISHED = 8, 16
_WORDS = 24
MAX_RANGES = 64
"""The most ranges one :meth:`SpinPool.run` hands out."""
_TAG_BITS = 32
_INDEX_MASK = (1 << 16) - 1     # the claim word: tag << 32 | count << 16 | next index
_TAG_MASK = (1 << 31) - 1   # the tag shifted up stays a positive int64

STEP_WORDS = 8
"""Words of one step of a :class:`Steps` program: kind, address, argument array, arity,
ranges, number of ranges, two unused."""
STEP_DIRECT, STEP_POOL = 0, 1
ARITY_BUCKETS = (6, 12, 24, 48)
"""The argument counts a direct step passes: a function of ``n`` arguments gets the first
bucket of at least ``n`` (see :func:`direct_step`)."""
MAX_ARITY = ARITY_BUCKETS[-1]
"""The most arguments of a function a step calls directly."""

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

    def const(value):
        return ir.Constant(i64, value)

    def word(b, base, index):
        return b.gep(base, [index if isinstance(index, ir.Value) else const(index)])

    # ---- void rb_pool_claim(i64 *header, i64 gen): run ranges of job `gen` while any is left
    # A range is claimed by a compare-and-swap of the claim word, (job tag << 32) | (count <<
    # 16) | next index: the job's count travels in the word itself, so a thread that comes
    # late, when the job is done, reads its own job's count there (not the next job's, which
    # the launcher may be writing at that moment) and claims nothing; once the next job is
    # published it finds another tag. No range runs twice, and the entry, arguments and ranges
    # a claimer then reads are its job's, which cannot end before its claimed range is done.
    fn = ir.Function(module, ir.FunctionType(void, [p64, i64]), "rb_pool_claim")
    fn.linkage = "internal"
    header, gen = fn.args
    entry, loop, check, claim, run, done = (fn.append_basic_block(n) for n in
                                            ("entry", "loop", "check", "claim", "run", "done"))
    b = ir.IRBuilder(entry)
    tag = b.shl(b.and_(gen, const(_TAG_MASK)), const(_TAG_BITS))
    b.branch(loop)
    b.position_at_end(loop)
    current = b.load_atomic(word(b, header, _NEXT), "acquire", 8)
    same_job = b.icmp_unsigned("==", b.and_(current, const(~((1 << _TAG_BITS) - 1))), tag)
    b.cbranch(same_job, check, done)
    b.position_at_end(check)
    index = b.and_(current, const(_INDEX_MASK))
    count = b.and_(b.lshr(current, const(16)), const(_INDEX_MASK))
    b.cbranch(b.icmp_signed("<", index, count), claim, done)
    b.position_at_end(claim)
    swapped = b.cmpxchg(word(b, header, _NEXT), current, b.add(current, const(1)),
                        "acq_rel", "acquire")
    b.cbranch(b.extract_value(swapped, 1), run, loop)
    b.position_at_end(run)
    target = b.inttoptr(b.load(word(b, header, _ENTRY)), ir.PointerType(entry_type))
    args = b.inttoptr(b.load(word(b, header, _ARGS)), p64)
    table = b.inttoptr(b.load(word(b, header, _RANGES)), p64)
    at = b.mul(index, const(2))
    begin = b.load(word(b, table, at))
    end = b.load(word(b, table, b.add(at, const(1))))
    b.call(target, [args, begin, end])
    b.atomic_rmw("add", word(b, header, _FINISHED), const(1), "release")
    b.branch(loop)
    b.position_at_end(done)
    b.ret_void()
    claim_fn = fn

    # ---- void rb_pool_worker(i64 *header)
    fn = ir.Function(module, ir.FunctionType(void, [p64]), "rb_pool_worker")
    header = fn.args[0]
    blocks = {n: fn.append_basic_block(n) for n in
              ("entry", "top", "wait", "idle", "spin", "nap", "run", "stop")}
    b = ir.IRBuilder(blocks["entry"])
    seen = b.alloca(i64, name="seen")
    spins = b.alloca(i64, name="spins")
    b.store(b.load_atomic(word(b, header, _GEN), "acquire", 8), seen)
    b.branch(blocks["top"])
    b.position_at_end(blocks["top"])
    b.store(const(0), spins)
    b.branch(blocks["wait"])
    b.position_at_end(blocks["wait"])
    stop = b.load_atomic(word(b, header, _STOP), "acquire", 8)
    stopped = b.icmp_signed("!=", stop, const(0))
    gen = b.load_atomic(word(b, header, _GEN), "acquire", 8)
    fresh = b.icmp_signed("!=", gen, b.load(seen))
    b.cbranch(stopped, blocks["stop"], blocks["idle"])
    b.position_at_end(blocks["idle"])
    b.cbranch(fresh, blocks["run"], blocks["spin"])
    b.position_at_end(blocks["spin"])
    count = b.load(spins)
    b.store(b.add(count, const(1)), spins)
    keep_spinning = b.icmp_signed("<", count, b.load(word(b, header, _LIMIT)))
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
    b.call(claim_fn, [header, gen])
    b.branch(blocks["top"])
    b.position_at_end(blocks["stop"])
    b.ret_void()

    # ---- void rb_pool_launch(i64 *header, i64 entry, i64 args, i64 ranges, i64 count): publish
    # a job (its generation the header's plus one: one launcher at a time, under the pool's
    # lock), claim and run ranges like a worker, then wait until every range is finished
    # (spinning, then yielding the core, so a machine with more threads than cores moves on)
    fn = ir.Function(module, ir.FunctionType(void, [p64, i64, i64, i64, i64]), "rb_pool_launch")
    header, job_entry, job_args, job_ranges, job_count = fn.args
    entry, poll, busy, spin, give, done = (fn.append_basic_block(n) for n in
                                           ("entry", "poll", "busy", "spin", "give", "done"))
    b = ir.IRBuilder(entry)
    tries = b.alloca(i64, name="tries")
    b.store(const(0), tries)
    gen = b.add(b.load(word(b, header, _GEN)), const(1))
    b.store(job_entry, word(b, header, _ENTRY))
    b.store(job_args, word(b, header, _ARGS))
    b.store(job_ranges, word(b, header, _RANGES))
    b.store(const(0), word(b, header, _FINISHED))
    # the claim word opens the job, then the generation wakes the workers
    b.store_atomic(b.or_(b.shl(b.and_(gen, const(_TAG_MASK)), const(_TAG_BITS)),
                         b.shl(job_count, const(16))),
                   word(b, header, _NEXT), "release", 8)
    b.store_atomic(gen, word(b, header, _GEN), "release", 8)
    b.call(claim_fn, [header, gen])
    limit = b.load(word(b, header, _LIMIT))
    b.branch(poll)
    b.position_at_end(poll)
    finished = b.load_atomic(word(b, header, _FINISHED), "acquire", 8)
    b.cbranch(b.icmp_signed(">=", finished, job_count), done, busy)
    b.position_at_end(busy)
    t = b.load(tries)
    b.store(b.add(t, const(1)), tries)
    b.cbranch(b.icmp_signed("<", t, limit), spin, give)
    b.position_at_end(spin)
    b.call(pause, [])
    b.branch(poll)
    b.position_at_end(give)
    b.call(sched_yield, [])
    b.branch(poll)
    b.position_at_end(done)
    b.ret_void()
    launch_fn = fn

    # ---- void rb_run_steps(i64 *steps, i64 count, i64 *header): the steps of a program of
    # kernel calls, in order, each STEP_WORDS words (see the module's text): a direct call of a
    # function of `arity` int64 arguments taken from an array, or a job for the pool at `header`
    fn = ir.Function(module, ir.FunctionType(void, [p64, i64, p64]), "rb_run_steps")
    steps, n_steps, header = fn.args
    entry, loop, body, pooled, direct, next_, done, bad = (
        fn.append_basic_block(n) for n in
        ("entry", "loop", "body", "pooled", "direct", "next", "done", "bad"))
    b = ir.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)
    k = b.phi(i64, name="k")
    k.add_incoming(const(0), entry)
    b.cbranch(b.icmp_signed("<", k, n_steps), body, done)
    b.position_at_end(body)
    step = b.gep(steps, [b.mul(k, const(STEP_WORDS))])
    kind = b.load(word(b, step, 0))
    address = b.load(word(b, step, 1))
    args_at = b.load(word(b, step, 2))
    arity = b.load(word(b, step, 3))
    b.cbranch(b.icmp_signed("==", kind, const(STEP_POOL)), pooled, direct)
    b.position_at_end(pooled)
    b.call(launch_fn, [header, address, args_at, b.load(word(b, step, 4)),
                       b.load(word(b, step, 5))])
    b.branch(next_)
    b.position_at_end(direct)
    # a function of n int64 arguments is called with `arity` of them, the bucket of n (its
    # array is padded with zeros): under the x86-64 calling convention the first six travel in
    # registers and the rest on the caller's stack, which the caller clears, so arguments past
    # those a function reads are never looked at. One call site per bucket keeps this small.
    array = b.inttoptr(args_at, p64)
    switch = b.switch(arity, bad)
    for n in ARITY_BUCKETS:
        case = fn.append_basic_block(f"arity{n}")
        switch.add_case(const(n), case)
        b.position_at_end(case)
        callee = b.inttoptr(address, ir.PointerType(ir.FunctionType(void, [i64] * n)))
        b.call(callee, [b.load(word(b, array, j)) for j in range(n)])
        b.branch(next_)
    b.position_at_end(bad)     # an arity the step builder never makes: nothing to call
    b.branch(next_)
    b.position_at_end(next_)
    after = b.add(k, const(1))
    k.add_incoming(after, next_)
    b.branch(loop)
    b.position_at_end(done)
    b.ret_void()

    # ---- void rb_pool_pauses(i64 n): n pause instructions, to time them
    fn = ir.Function(module, ir.FunctionType(void, [i64]), "rb_pool_pauses")
    entry, loop, done = (fn.append_basic_block(n) for n in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", fn.args[0], const(0)), loop, done)
    b.position_at_end(loop)
    k = b.phi(i64)
    k.add_incoming(const(0), entry)
    b.call(pause, [])
    after = b.add(k, const(1))
    k.add_incoming(after, loop)
    b.cbranch(b.icmp_signed("<", after, fn.args[0]), loop, done)
    b.position_at_end(done)
    b.ret_void()
    return module


def _source_digest() -> str:
    import hashlib
    from pathlib import Path
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def _key() -> str:
    # keyed by this file's text: a process that finds the code cached makes no IR
    return f"rb_spin_pool\n{_source_digest()}"


def compile_job() -> tuple | None:
    """``(module maker, key, name)`` of the pool's module, for a build to compile it in a helper
    process ahead of its first use (:meth:`.jit.CompileStream.submit`), or None once this
    process has it."""
    return None if _compiled is not None else (_module, _key(), "rb_spin_pool")


def _functions():
    """The compiled functions of the pool (compiled once per process)."""
    global _compiled
    with _compile_lock:
        if _compiled is None:
            from .jit import compile_module
            compiled = compile_module(_module, key=_key(), name="rb_spin_pool")
            _compiled = {
                "module": compiled,
                "worker": compiled.function("rb_pool_worker", [ctypes.c_void_p]),
                "launch": compiled.function("rb_pool_launch",
                                            [ctypes.c_void_p] + [ctypes.c_int64] * 4),
                "run_steps": compiled.function("rb_run_steps", [ctypes.c_void_p, ctypes.c_int64,
                                                                ctypes.c_void_p]),
                "pauses": compiled.function("rb_pool_pauses", [ctypes.c_int64]),
            }
    return _compiled


_limit: int | None = None


def spin_limit() -> int:
    """The ``pause`` instructions that last :data:`SPIN_SECONDS` on this CPU, measured once per
    process (the fastest of five runs of 2,000, well under a millisecond in all)."""
    global _limit
    if _limit is None:
        import time
        pauses = _functions()["pauses"]
        n, best = 2000, float("inf")
        pauses(n)  # warm: the code and the ctypes call
        for _ in range(5):
            start = time.perf_counter()
            pauses(n)
            best = min(best, time.perf_counter() - start)
        _limit = int(min(max(SPIN_SECONDS * n / max(best, 1e-9), 1000), 10_000_000))
    return _limit


def ranges_array(ranges) -> np.ndarray:
    """``ranges`` ``[(begin, end), ...]`` as the flat ``int64`` array a job points to."""
    if len(ranges) > MAX_RANGES:
        raise ValueError(f"{len(ranges)} ranges, more than {MAX_RANGES}")
    return np.array([v for pair in ranges for v in pair], dtype=np.int64)


def direct_step(address: int, values) -> tuple:
    """``(step, args array)``: a :class:`Steps` step calling the function at ``address`` with
    ``values`` (integers: pointers, integer scalars), and the argument array it reads, padded
    with zeros to the arity bucket (keep it alive as long as the step)."""
    values = tuple(values)
    if len(values) > MAX_ARITY:
        raise ValueError(f"{len(values)} arguments, more than {MAX_ARITY}")
    bucket = next(n for n in ARITY_BUCKETS if n >= len(values))
    array = np.zeros(bucket, dtype=np.int64)
    array[:len(values)] = values
    return (STEP_DIRECT, address, array.ctypes.data, bucket, 0, 0), array


class SpinPool:
    """``size - 1`` workers spinning in machine code; the caller of :meth:`run` is the
    ``size``-th thread. Calls from several Python threads are served one at a time."""

    def __init__(self, size: int):
        if size < 2:
            raise ValueError(f"SpinPool: size must be at least 2, got {size}")
        self.size = size
        functions = _functions()
        self._worker, self._launch = functions["worker"], functions["launch"]
        raw = np.zeros(_WORDS + 8, np.int64)
        skip = ((-raw.ctypes.data) % 64) // 8
        self._header = raw[skip:skip + _WORDS]
        self._header_pointer = self._header.ctypes.data
        self._header[_LIMIT] = spin_limit()
        self._lock = threading.Lock()
        self._threads = []
        for k in range(size - 1):
            thread = threading.Thread(target=self._worker, args=(self._header_pointer,),
                                      name=f"rb-spin-{k}", daemon=True)
            thread.start()
            self._threads.append(thread)

    @property
    def header_address(self) -> int:
        """The address of the job header, for code that launches jobs itself
        (``rb_pool_launch(header, entry, args, ranges, count)`` under :attr:`lock`)."""
        return self._header_pointer

    @property
    def lock(self) -> threading.Lock:
        """Held by whoever launches jobs on this pool; one launcher at a time."""
        return self._lock

    def run(self, entry: int, args: int, ranges) -> None:
        """``entry(args, begin, end)`` once for each ``(begin, end)`` of ``ranges``, by whichever
        thread claims it first (this one among them); returns when every range is done.
        ``entry`` and ``args`` are addresses; ``ranges`` a list of pairs or the flat ``int64``
        array of :func:`ranges_array` (kept by the caller, for a job launched again and
        again). There may be more ranges than threads (up to :data:`MAX_RANGES`): a worker
        that comes late, its core taken by another program, leaves its ranges to the threads
        that are there instead of holding them up.

        The ranges run from compiled code, which calls ``entry`` directly: the pool makes no
        ctypes wrapper of it and keeps nothing of a kernel whose module is gone."""
        table = ranges if isinstance(ranges, np.ndarray) else ranges_array(ranges)
        if table.dtype != np.int64 or table.ndim != 1 or table.size % 2:
            raise ValueError("SpinPool.run: ranges must be (begin, end) pairs")
        if table.size > 2 * MAX_RANGES:
            raise ValueError(f"SpinPool.run: {table.size // 2} ranges, more than {MAX_RANGES}")
        if self._threads is None:
            raise RuntimeError("SpinPool.run after shutdown")
        if not table.size:
            return
        with self._lock:
            self._launch(self._header_pointer, entry, args, table.ctypes.data, table.size // 2)

    def shutdown(self) -> None:
        """Stop the workers (they leave their loop within a nap)."""
        if self._threads is None:
            return
        self._header[_STOP] = 1
        for thread in self._threads:
            thread.join(timeout=1.0)
        self._threads = None


class Steps:
    """A program of kernel calls run by one call into compiled code (``rb_run_steps``), so a
    graph of small kernels does not pay Python's and ctypes' few microseconds per call.

    Each step is a direct call, ``function(*args)`` of at most :data:`MAX_ARITY` ``int64``
    arguments (pointers, integers; made by :func:`direct_step`), or a job for ``pool``,
    ``entry(args, begin, end)`` over a table of ranges (see :meth:`SpinPool.run`). ``keep``
    holds what the addresses point into.
    """

    def __init__(self, steps, pool: SpinPool | None = None, keep=()):
        table = np.zeros((max(1, len(steps)), STEP_WORDS), np.int64)
        for k, step in enumerate(steps):
            if len(step) != 6:
                raise ValueError(f"step {k}: (kind, address, args, arity, ranges, count) "
                                 f"expected, got {step!r}")
            kind, address, args, arity, ranges, count = step
            if kind == STEP_DIRECT:
                if arity not in ARITY_BUCKETS:
                    raise ValueError(f"step {k}: {arity} arguments; a direct step passes "
                                     f"{', '.join(map(str, ARITY_BUCKETS))} (at most "
                                     f"{MAX_ARITY}: see direct_step)")
            elif kind == STEP_POOL:
                if pool is None:
                    raise ValueError(f"step {k}: a job for the pool, and no pool given")
                if not 0 < count <= MAX_RANGES:
                    raise ValueError(f"step {k}: {count} ranges (1 to {MAX_RANGES} allowed)")
            else:
                raise ValueError(f"step {k}: unknown kind {kind!r}")
            if not address or not args and (kind == STEP_POOL or arity):
                raise ValueError(f"step {k}: a null address")
            table[k] = (kind, address, args, arity, ranges, count, 0, 0)
        self._table = table
        self._count = len(steps)
        self.pool = pool
        self.keep = keep
        self._run = _functions()["run_steps"]
        self._header = pool.header_address if pool is not None else 0

    def __len__(self) -> int:
        return self._count

    def __call__(self) -> None:
        pool = self.pool
        if pool is None:
            self._run(self._table.ctypes.data, self._count, None)
            return
        if pool._threads is None:
            raise RuntimeError("Steps: the pool was shut down")
        with pool._lock:
            self._run(self._table.ctypes.data, self._count, self._header)


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
