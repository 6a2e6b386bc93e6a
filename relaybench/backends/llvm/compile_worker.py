"""LLVM IR text to object code, in this process or in helper processes that share the work.

:func:`compile_object` is the one way a kernel's LLVM IR becomes object code: parse and verify
the text, give each externally visible function a unique symbol, run LLVM's -O3 pipeline (new
pass manager) and emit object code for the host. The JIT (:mod:`.jit`) calls it for a single
kernel; :class:`WorkerPool` runs it in other processes too, so that a build with many kernels
to compile uses more than one core. llvmlite lets one thread of a process into LLVM at a time
(a process-wide lock around every call), so only processes compile side by side.

This file imports nothing but the standard library and llvmlite: a helper process runs it as a
script (never importing relaybench), reads pickled jobs from its standard input and writes
pickled results to its standard output. Each job carries the host's triple, CPU name and
features, so a helper emits the very object code the JIT would.

>>> from llvmlite import ir
>>> mod = ir.Module("demo")
>>> fn = ir.Function(mod, ir.FunctionType(ir.IntType(64), [ir.IntType(64)]), "twice")
>>> b = ir.IRBuilder(fn.append_basic_block("entry"))
>>> _ = b.ret(b.mul(fn.args[0], ir.Constant(ir.IntType(64), 2)))
>>> import llvmlite.binding as llvm
>>> llvm.initialize_native_target(); llvm.initialize_native_asmprinter()
>>> triple = llvm.get_process_triple()
>>> machine = llvm.Target.from_triple(triple).create_target_machine(opt=3, jit=True)
>>> obj, text, symbols = compile_object(llvm, machine, triple, str(mod), "0123456789abcdef0123")
>>> symbols, len(obj) > 0
({'twice': 'twice_0123456789abcdef'}, True)
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
import time
from collections import deque

__all__ = ["compile_object", "WorkerPool", "worker_count", "idle_cores", "mark_cpu",
           "clear_mark", "prestart", "has_spare", "release_spare", "NO_SLP"]


NO_SLP = "rb.no-slp"
"""A string in a module's named metadata ``!rb.options`` (the code generator adds it to modules
whose float arithmetic is all vector code): compile it without the SLP vectorizer and without
LLVM's loop unroller. Such code is laid out in registers by its schedule, which unrolls the
loops it wants unrolled; LLVM's unroller then only grows the code (a Winograd kernel's
optimized IR by 40%, its compile time by a quarter) for no measured speed."""


def compile_object(llvm, machine, triple: str, text: str, digest: str) -> tuple:
    """``(object code, optimized LLVM IR text, {function: symbol})`` of the module ``text``.

    ``llvm`` is ``llvmlite.binding`` (initialized for the native target), ``machine`` the target
    machine (for ``triple``) to optimize and emit for; ``digest`` (the kernel's cache key) makes
    the symbols unique. Raises ``RuntimeError`` when LLVM rejects the IR. The SLP vectorizer
    and the loop unroller are left out when the module's ``!rb.options`` names :data:`NO_SLP`.
    """
    mod = llvm.parse_assembly(text)
    mod.verify()
    mod.triple = triple
    mod.data_layout = str(machine.target_data)
    symbols = {}
    for fn in mod.functions:
        if fn.is_declaration:
            continue
        if fn.linkage == llvm.Linkage.external:
            original = fn.name
            fn.name = f"{original}_{digest[:16]}"
            symbols[original] = fn.name
    # A pass builder per compile, on purpose: llvmlite registers each run's instrumentation
    # callbacks (which point into that run's stack frame) in the builder, so a builder used
    # again would call dead callbacks and gather more on every run; its module pass manager
    # cannot run twice at all (its passes are moved out). Each builder's instrumentation
    # table is never freed by llvmlite (about 75 KB per compile, measured over 1000 small
    # kernels, the same with one builder reused), a cost only fewer compiles avoid.
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    vector_code = f'!"{NO_SLP}"' in text
    tuning.loop_vectorization = True
    tuning.slp_vectorization = not vector_code
    tuning.loop_unrolling = not vector_code
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(mod, builder)
    return machine.emit_object(mod), str(mod), symbols


def worker_count(jobs: int, busy: int = 0) -> int:
    """How many helper processes ``jobs`` compiles are worth: one per idle core beyond the one
    this process works on, at most one per job beyond the first, at most 7; none for fewer than
    3 jobs (starting a helper costs about as much as a small kernel). On a machine whose cores
    are busy, a helper only slows the build down.

    The idle cores are measured (:func:`idle_cores`: the CPU time no process used since the
    build's :func:`mark_cpu`, or over 50 ms of waiting), not read from the load average, which
    counts this process's own work of the last minute: a 2-core machine on which only this
    process had been busy reads a load of 1 or more, and a build there would compile alone.

    ``busy`` helpers of the build are compiling already (a :class:`WorkerPool` fed while the
    build lowered its groups): their cores are the build's own, and the answer is how many to
    add to them.
    """
    if jobs < 3 and not busy:
        return 0
    cores = _cores()
    if cores < 2:
        return 0
    # a helper started ahead (prestart) was busy starting while the cores were measured: its
    # core is the build's own
    idle = idle_cores(cores) + len(_spare) + busy
    return max(0, min(int(idle + 0.5) - 1, cores - 1, jobs + busy - 1, 7) - busy)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_spare: list = []   # helpers started ahead of the pool that will use them (prestart)


def prestart() -> bool:
    """Start one helper process now, ahead of the :class:`WorkerPool` that is to use it, when a
    core has been idle since :func:`mark_cpu`: a build calls it once it knows it will compile
    (its third group lowered), so that the helper's start (Python and LLVM loading, about 0.3 s)
    overlaps the rest of the lowering instead of the compiles. Returns whether it started one;
    :func:`release_spare` closes one no pool took."""
    if _spare or _mark is None or _cores() < 2 or time.perf_counter() - _mark[2] < 0.02:
        return False
    idle = _idle_since(_mark, 0.02)
    if idle is None or idle < 1.5:
        return False
    try:
        _spare.append(_Worker())
    except OSError:
        return False
    return True


def has_spare() -> bool:
    """Whether a helper started ahead (:func:`prestart`) waits for a pool."""
    return bool(_spare)


def release_spare() -> None:
    """Close the helpers started ahead that no pool took (from a thread: one may still be
    starting, and the build need not wait for it to exit)."""
    while _spare:
        threading.Thread(target=_spare.pop().close, daemon=True).start()


def _cpu_times():
    """``(idle, total)`` jiffies of every CPU together, from ``/proc/stat``; None elsewhere."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != b"cpu":
        return None
    values = [int(v) for v in fields[1:9]]        # user nice system idle iowait irq softirq steal
    return values[3] + values[4], sum(values)


_mark = None   # (/proc/stat's times, this process's CPU time, wall clock) from mark_cpu()


def mark_cpu() -> None:
    """Start measuring the idle cores now, for the next :func:`idle_cores` (a build calls it
    before it lowers its groups, so that the measurement spans work it does anyway instead of a
    wait of its own)."""
    global _mark
    _mark = _take_mark()


def _take_mark():
    before = _cpu_times()
    return None if before is None else (before, time.process_time(), time.perf_counter())


def clear_mark() -> None:
    """Forget a :func:`mark_cpu` no :func:`idle_cores` used (a build that compiled nothing)."""
    global _mark
    _mark = None


def _idle_since(mark: tuple, window: float):
    """Idle cores from ``mark`` (``(/proc/stat's times, this process's CPU time, wall clock)``)
    until now, this process's own use counted as idle; None when ``/proc/stat`` cannot tell."""
    before, own, start = mark
    after = _cpu_times()
    if after is None or after[1] <= before[1]:
        return None
    share = (after[0] - before[0]) / (after[1] - before[1])
    own = (time.process_time() - own) / max(time.perf_counter() - start, window)
    # /proc/stat counts every CPU of the machine; this process may see fewer
    return share * (os.cpu_count() or 1) + own


def idle_cores(cores: int, window: float = 0.05) -> float:
    """How many of ``cores`` no other process used over the next ``window`` seconds
    (``/proc/stat``, sampled twice, plus what this process's own threads used meanwhile: a
    thread of the build writing its cache entry does not keep the helpers away); where there is
    no ``/proc/stat``, the cores less the load average. After :func:`mark_cpu`, at least
    ``window`` and at most 10 seconds ago, the measurement spans the time since the mark, and
    nothing waits.

    >>> 0.0 <= idle_cores(2) <= 2.0
    True
    """
    global _mark
    mark, _mark = _mark, None
    if mark is None or not window <= time.perf_counter() - mark[2] <= 10.0:
        mark = _take_mark()
        if mark is not None:
            time.sleep(window)
    idle = None if mark is None else _idle_since(mark, window)
    if idle is not None:
        return max(0.0, min(float(cores), idle))
    try:
        return max(0.0, cores - os.getloadavg()[0] + 1.0)    # the load counts this process
    except (AttributeError, OSError):
        return float(cores - 1)


class _Worker:
    """One helper process and the pipes to it."""

    def __init__(self):
        import subprocess   # here: a build whose kernels are all cached starts no helper
        code = ("import runpy, sys; sys.argv = sys.argv[1:]; "
                "runpy.run_path(sys.argv[0], run_name='__main__')")
        self.process = subprocess.Popen([sys.executable, "-c", code, os.path.abspath(__file__)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def run(self, job: tuple) -> tuple:
        """Send one job, wait for its result ``(ok, value, seconds)``; EOFError if it died."""
        pickle.dump(job, self.process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        self.process.stdin.flush()
        return pickle.load(self.process.stdout)

    def close(self) -> None:
        try:
            self.process.stdin.close()
        except OSError:
            pass
        import subprocess
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()


class WorkerPool:
    """Compile jobs ``(text, digest, name)`` here and in helper processes at once.

    ``compile_here(text, digest, name)`` compiles one job in this process (the JIT's own
    machine, under its lock) and returns ``(object, ir, symbols)``. Jobs are queued with
    :meth:`put` (``first``: ahead of the others, in the order put so) while the helpers started
    by :meth:`add_helpers` take them; :meth:`finish` then has this process compile what is
    left beside them and returns ``{digest: ((object, ir, symbols), seconds)}`` for the jobs
    that compiled. :meth:`run` does it all for a list of ``(make_text, digest, name)``, this
    process making the texts one after the other while the helpers start and compile the first
    ones. A job that LLVM rejected is left out (compiled again alone, it raises the error where
    it is expected). A helper that cannot start or dies hands its job back; this process
    finishes them.
    """

    def __init__(self, compile_here, host: tuple, workers: int = 0):
        self.compile_here = compile_here
        self.host = host  # (triple, cpu, features)
        self.workers = workers
        self._queue: deque = deque()
        self._first: deque = deque()
        self._ready = threading.Condition()
        self._made = False
        self._threads: list = []
        self.results: dict = {}

    def _take(self, wait: bool):
        with self._ready:
            while not self._first and not self._queue and wait and not self._made:
                self._ready.wait()
            if self._first:
                return self._first.popleft()
            return self._queue.popleft() if self._queue else None

    def _helper(self) -> None:
        try:
            worker = _spare.pop()       # one started ahead, already loaded
        except IndexError:
            try:
                worker = _Worker()
            except OSError:
                return
        try:
            while True:
                job = self._take(wait=True)
                if job is None:
                    return
                text, digest, name = job
                try:
                    ok, value, seconds = worker.run((text, digest, name) + self.host)
                except (EOFError, OSError, pickle.UnpicklingError):
                    self.put(*job, first=True)  # the helper died: this process does the job
                    return
                if ok:
                    with self._ready:
                        self.results[digest] = (tuple(value), seconds)
        finally:
            worker.close()

    def add_helpers(self, count: int) -> None:
        """Start ``count`` more helpers (a process started ahead by :func:`prestart` first)."""
        for _ in range(count):
            thread = threading.Thread(target=self._helper, daemon=True)
            thread.start()
            self._threads.append(thread)

    @property
    def helpers(self) -> int:
        return len(self._threads)

    def put(self, text: str, digest: str, name: str, first: bool = False) -> None:
        with self._ready:
            (self._first if first else self._queue).append((text, digest, name))
            self._ready.notify()

    def finish(self) -> dict:
        """No more jobs: compile what is left here too, wait for the helpers, return the
        results."""
        with self._ready:
            self._made = True
            self._ready.notify_all()
        self._drain()
        for t in self._threads:
            t.join()
        self._drain()  # a helper that died after the queue ran dry handed its job back
        return self.results

    def _drain(self) -> None:
        while True:
            job = self._take(wait=False)
            if job is None:
                return
            self._here(job, self.results)

    def abandon(self) -> None:
        """Drop the jobs not started; the helpers close after the one they are compiling."""
        with self._ready:
            self._made = True
            self._queue.clear()
            self._first.clear()
            self._ready.notify_all()

    def run(self, jobs: list, first: bool = False) -> dict:
        """Start ``workers`` helpers, queue ``jobs`` (their texts made here in turn; ``first``:
        ahead of jobs put before), then :meth:`finish`."""
        self.add_helpers(self.workers)
        try:
            for make_text, digest, name in jobs:
                try:
                    text = make_text()
                except Exception:  # raised again, naming the kernel, when it is compiled alone
                    continue
                self.put(text, digest, name, first)
        except BaseException:
            self.abandon()
            raise
        return self.finish()

    def _here(self, job: tuple, results: dict) -> None:
        text, digest, name = job
        t0 = time.perf_counter()
        try:
            value = self.compile_here(text, digest, name)
        except Exception:  # LLVM rejected it: compiled again alone, it raises there
            return
        results[digest] = (value, time.perf_counter() - t0)


def _serve(stdin, stdout) -> None:
    """The helper's loop: a job ``(text, digest, name, triple, cpu, features)`` in, ``(True,
    (object, ir, symbols), seconds)`` or ``(False, message, seconds)`` out, until end of input."""
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    machines: dict = {}
    while True:
        try:
            job = pickle.load(stdin)
        except EOFError:
            return
        text, digest, name, triple, cpu, features = job
        t0 = time.perf_counter()
        try:
            machine = machines.get((triple, cpu, features))
            if machine is None:
                machine = machines[(triple, cpu, features)] = llvm.Target.from_triple(
                    triple).create_target_machine(cpu=cpu, features=features, opt=3, jit=True)
            reply = (True, compile_object(llvm, machine, triple, text, digest))
        except Exception as err:
            reply = (False, f"{type(err).__name__}: {err}")
        pickle.dump(reply + (time.perf_counter() - t0,), stdout, protocol=pickle.HIGHEST_PROTOCOL)
        stdout.flush()


if __name__ == "__main__":
    # the protocol owns the original standard output; anything else printed goes to stderr
    _out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    _serve(sys.stdin.buffer, _out)
