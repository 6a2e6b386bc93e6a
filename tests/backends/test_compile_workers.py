"""Kernels compiled by helper processes (relaybench/backends/llvm/compile_worker.py), which a
build uses when cores are idle: forced on here, the build's answers against numpy."""

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.backends.llvm import compile_worker
from relaybench.ir import Function, IRModule
from relaybench.ir.builder import const, var


def test_a_build_whose_kernels_helper_processes_compiled(monkeypatch, tmp_path):
    monkeypatch.setenv("RB_CACHE_DIR", str(tmp_path / "kernels"))
    used = []

    def two(jobs, busy=0):
        used.append(jobs)
        return 2
    monkeypatch.setattr(compile_worker, "worker_count", two)
    # no helper started ahead: the pool is made once every group is lowered
    monkeypatch.setattr(compile_worker, "prestart", lambda: False)
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((29, 41)).astype("float32")
    w2 = rng.standard_normal((13, 29)).astype("float32")
    x = var("x", shape=(3, 41))
    h = op.tanh(op.nn.dense(x, const(w1)))
    y = op.exp(op.multiply(op.nn.dense(op.nn.softmax(h), const(w2)), const(np.float32(0.37))))
    lib = rb.build(IRModule.from_expr(Function([x], op.nn.relu(op.subtract(y, const(
        np.float32(1.01)))))), target="llvm")
    assert used and used[0] >= 3      # the kernels were handed to the helpers
    data = rng.standard_normal((3, 41)).astype("float32")
    hidden = np.tanh(data.astype("float64") @ w1.T)
    soft = np.exp(hidden - hidden.max(axis=1, keepdims=True))
    soft /= soft.sum(axis=1, keepdims=True)
    want = np.maximum(np.exp((soft @ w2.T) * 0.37) - 1.01, 0)
    np.testing.assert_allclose(np.asarray(lib.run(x=data)), want, rtol=1e-5, atol=1e-6)


def test_helpers_follow_the_idle_cores_measured_now(monkeypatch):
    """Idle cores come from /proc/stat sampled around a short wait, so this process's own work
    of the last minute (which the load average counts) does not keep a build to one core."""
    import os
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(compile_worker, "_mark", None)
    samples = iter([(1000, 4000), (1300, 4400)])          # 300 of 400 jiffies idle: 3 cores
    monkeypatch.setattr(compile_worker, "_cpu_times", lambda: next(samples))
    monkeypatch.setattr(compile_worker.time, "sleep", lambda s: None)
    assert compile_worker.idle_cores(4) == pytest.approx(3.0, abs=0.05)  # + our own few us
    for idle, jobs, want in ((3.0, 21, 2), (4.0, 21, 3), (4.0, 2, 0), (4.0, 3, 2), (1.2, 21, 0),
                             (0.0, 21, 0), (1.6, 21, 1)):
        monkeypatch.setattr(compile_worker, "idle_cores", lambda cores, v=idle: v)
        assert compile_worker.worker_count(jobs) == want, (idle, jobs)


def test_without_proc_stat_the_load_average_decides(monkeypatch):
    import os
    monkeypatch.setattr(compile_worker, "_cpu_times", lambda: None)
    monkeypatch.setattr(compile_worker, "_mark", None)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.5, 1.0, 1.0))
    assert compile_worker.idle_cores(4) == 3.5     # the load counts this process


def test_this_process_own_threads_do_not_count_as_busy_cores(monkeypatch):
    """A thread of the build (writing the build cache's entry) keeps a core busy while the
    idle cores are measured; that core is the build's own, so it still counts as free."""
    import os
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(compile_worker, "_mark", None)
    samples = iter([(1000, 4000), (1200, 4400)])          # 200 of 400 jiffies idle: 2 cores
    monkeypatch.setattr(compile_worker, "_cpu_times", lambda: next(samples))
    monkeypatch.setattr(compile_worker.time, "sleep", lambda s: None)
    clock = iter([10.0, 11.0])                             # one second of wall time ...
    own = iter([5.0, 6.0])                                 # ... and one core-second of ours
    monkeypatch.setattr(compile_worker.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(compile_worker.time, "process_time", lambda: next(own))
    assert compile_worker.idle_cores(4) == 3.0


def test_a_mark_measures_since_it_was_made_and_nothing_waits(monkeypatch):
    """A build marks the CPU times before it lowers its groups; the helpers' count then reads
    the idle cores over the lowering, with no wait of its own, and the mark is used once."""
    import os
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    samples = iter([(1000, 4000), (1100, 4400), (5000, 9000), (5400, 9400)])
    monkeypatch.setattr(compile_worker, "_cpu_times", lambda: next(samples))
    clock = iter([10.0, 12.0, 12.0, 20.0, 20.0, 21.0])
    own = iter([5.0, 7.0, 30.0, 30.0])                       # busy two seconds of the two
    monkeypatch.setattr(compile_worker.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(compile_worker.time, "process_time", lambda: next(own))
    slept = []
    monkeypatch.setattr(compile_worker.time, "sleep", slept.append)
    compile_worker.mark_cpu()
    # 100 of 400 jiffies idle (one core) + this process's own core: two idle, no wait
    assert compile_worker.idle_cores(4) == 2.0 and slept == []
    # the mark is spent: the next measurement waits its window (400 of 400 jiffies idle)
    assert compile_worker.idle_cores(4) == 4.0 and slept == [0.05]
    assert compile_worker._mark is None


def _dense_chain(rng, sizes=(41, 29, 23, 13, 7)):
    x = var("x", shape=(3, sizes[0]))
    weights = [rng.standard_normal((n, m)).astype("float32") * 0.3
               for m, n in zip(sizes, sizes[1:])]
    y = x
    for k, w in enumerate(weights):
        y = op.nn.dense(y, const(w))
        y = op.tanh(y) if k % 2 == 0 else op.exp(op.multiply(y, const(np.float32(0.1))))
    return IRModule.from_expr(Function([x], y)), weights


def _check_dense_chain(lib, weights, rng):
    """``lib`` (built from :func:`_dense_chain`) against numpy in float64."""
    data = rng.standard_normal((3, weights[0].shape[1])).astype("float64")
    want = data
    for k, w in enumerate(weights):
        want = want @ w.T.astype("float64")
        want = np.tanh(want) if k % 2 == 0 else np.exp(want * 0.1)
    np.testing.assert_allclose(np.asarray(lib.run(x=data.astype("float32"))), want, rtol=1e-4,
                               atol=1e-5)


def test_a_helper_started_during_lowering_is_the_one_the_pool_uses(monkeypatch, tmp_path):
    """Once a build has lowered its third group on an idle machine, a helper process starts
    loading while the rest is lowered; the pool then compiles with it and starts no other."""
    monkeypatch.setenv("RB_CACHE_DIR", str(tmp_path / "kernels"))
    started = []
    _idle_machine(monkeypatch, started)
    counts = []
    real_count = compile_worker.worker_count
    monkeypatch.setattr(compile_worker, "worker_count", lambda jobs, busy=0: counts.append(
        (jobs, busy, len(compile_worker._spare))) or 0)
    rng = np.random.default_rng(5)
    mod, weights = _dense_chain(rng)
    lib = rb.build(mod, target="llvm")
    # the spare was taken while the groups were lowered: one helper busy when the pool was
    # sized, none more asked for
    assert counts and counts[0][1:] == (1, 0)
    assert len(started) == 1 and compile_worker._spare == []
    _check_dense_chain(lib, weights, rng)
    # the spare counts as an idle core of the build's own when the helpers are counted
    monkeypatch.setattr(compile_worker, "worker_count", real_count)
    monkeypatch.setattr(compile_worker, "_cores", lambda: 2)
    monkeypatch.setattr(compile_worker, "idle_cores", lambda cores: 0.9)
    assert compile_worker.worker_count(10) == 0
    monkeypatch.setattr(compile_worker, "_spare", [object()])
    assert compile_worker.worker_count(10) == 1
    # a helper busy already is an idle core of the build's own; the answer is how many more
    monkeypatch.setattr(compile_worker, "_spare", [])
    assert compile_worker.worker_count(10, busy=1) == 0
    monkeypatch.setattr(compile_worker, "_cores", lambda: 8)
    monkeypatch.setattr(compile_worker, "idle_cores", lambda cores: 5.0)
    assert compile_worker.worker_count(10, busy=1) == 4    # 5 idle + its own: 5 helpers
    assert compile_worker.worker_count(2, busy=1) == 1     # one more for two modules
    assert compile_worker.worker_count(0, busy=1) == 0


def _idle_machine(monkeypatch, started):
    """Every CPU idle since a mark made a second ago; helpers counted in ``started``."""
    import time

    class Counting(compile_worker._Worker):
        def __init__(self):
            super().__init__()
            started.append(self)
    monkeypatch.setattr(compile_worker, "_Worker", Counting)
    monkeypatch.setattr(compile_worker, "mark_cpu", lambda: setattr(
        compile_worker, "_mark", ((0, 0), time.process_time(), time.perf_counter() - 1.0)))
    monkeypatch.setattr(compile_worker, "_cpu_times", lambda: (100, 100))


def test_kernels_compile_while_the_rest_is_lowered(monkeypatch, tmp_path):
    """Once the helper started ahead is there, each kernel that will be a module of its own is
    handed to it as soon as its group is lowered: LLVM runs while the build lowers the rest.
    The build's answers against numpy, and every kernel compiled once."""
    from relaybench.backends import build as build_module
    from relaybench.backends.llvm import jit
    monkeypatch.setenv("RB_CACHE_DIR", str(tmp_path / "kernels"))
    monkeypatch.setenv("RB_LOWERING_CACHE", "off")   # every group lowered here
    started, events = [], []
    _idle_machine(monkeypatch, started)
    real_lower, real_submit = build_module._lower_one, jit.CompileStream.submit

    def lower(func, name, target, stats):
        found = real_lower(func, name, target, stats)
        events.append(("lowered", name))
        return found

    def submit(self, module, key, name):
        events.append(("handed", name))
        return real_submit(self, module, key, name)
    monkeypatch.setattr(build_module, "_lower_one", lower)
    monkeypatch.setattr(jit.CompileStream, "submit", submit)
    rng = np.random.default_rng(7)
    mod, weights = _dense_chain(rng, (47, 29, 23, 13, 7, 11, 17, 19, 5))
    lib = rb.build(mod, target="llvm")
    lowered = [name for what, name in events if what == "lowered"]
    handed = [name for what, name in events if what == "handed"]
    assert len(started) == 1 and len(lowered) >= 5
    # the first groups were handed over before the last one was lowered, each once
    assert events.index(("handed", lowered[0])) < events.index(("lowered", lowered[-1]))
    assert len(handed) == len(set(handed)) and set(handed) <= set(lowered)
    stats = lib.compile_stats
    # each kernel compiled once here (or loaded already by an earlier build of this process)
    assert stats.llvm_compiled + stats.from_memory == len(lowered) and stats.from_disk == 0
    _check_dense_chain(lib, weights, rng)


def test_a_first_build_compiles_the_thread_pool_while_its_passes_run(monkeypatch, tmp_path):
    """On a cache without even the graph executor's thread pool (a first build), the helper
    starts while the passes run and gets the pool's module before any group is lowered; the
    kernels join the same helper. The build's answers against numpy."""
    from relaybench.backends import build as build_module
    from relaybench.backends.llvm import jit, spinpool
    monkeypatch.setenv("RB_CACHE_DIR", str(tmp_path / "kernels"))
    monkeypatch.setenv("RB_LOWERING_CACHE", "off")
    monkeypatch.setattr(spinpool, "_compiled", None)   # this process has not the pool either
    started, events = [], []
    _idle_machine(monkeypatch, started)
    real_lower, real_submit = build_module._lower_one, jit.CompileStream.submit
    monkeypatch.setattr(build_module, "_lower_one", lambda func, name, target, stats: (
        events.append(("lowered", name)), real_lower(func, name, target, stats))[1])
    monkeypatch.setattr(jit.CompileStream, "submit", lambda self, module, key, name: (
        events.append(("handed", name)), real_submit(self, module, key, name))[1])
    rng = np.random.default_rng(9)
    mod, weights = _dense_chain(rng, (39, 27, 21, 11, 5, 13))
    lib = rb.build(mod, target="llvm")
    assert events[0] == ("handed", "rb_spin_pool") and ("lowered", events[1][1]) in events
    assert len(started) == 1 and compile_worker._spare == []
    assert sum(what == "handed" for what, _ in events) > 1   # kernels went to the same helper
    _check_dense_chain(lib, weights, rng)


def test_a_build_that_fails_while_kernels_compile_lets_its_helper_go(monkeypatch, tmp_path):
    """A group whose lowering fails after kernels were handed to the helper: the build raises
    the error naming the group, and the helper process ends instead of waiting for more."""
    import time
    from relaybench.backends import build as build_module
    from relaybench.errors import CompileError
    monkeypatch.setenv("RB_CACHE_DIR", str(tmp_path / "kernels"))
    monkeypatch.setenv("RB_LOWERING_CACHE", "off")
    started = []
    _idle_machine(monkeypatch, started)
    real_lower = build_module._lower_one
    seen = []

    def lower(func, name, target, stats):
        seen.append(name)
        if len(seen) == 5:
            raise CompileError(f"fused group {name}: no schedule (a test)")
        return real_lower(func, name, target, stats)
    monkeypatch.setattr(build_module, "_lower_one", lower)
    mod, _ = _dense_chain(np.random.default_rng(8), (43, 31, 37, 9, 21, 6, 15, 27, 3))
    with pytest.raises(CompileError, match="no schedule"):
        rb.build(mod, target="llvm")
    assert len(started) == 1 and compile_worker._spare == []
    deadline = time.monotonic() + 20
    while started[0].process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started[0].process.poll() is not None


def test_no_helper_starts_ahead_on_a_busy_machine(monkeypatch):
    import time
    monkeypatch.setattr(compile_worker, "_spare", [])
    monkeypatch.setattr(compile_worker, "_cores", lambda: 2)
    monkeypatch.setattr(compile_worker, "_Worker", lambda: pytest.fail("a helper started"))
    own = time.process_time() - 0.5            # half a core of our own over the last second
    monkeypatch.setattr(compile_worker, "_mark", ((0, 0), own, time.perf_counter() - 1.0))
    monkeypatch.setattr(compile_worker, "_cpu_times", lambda: (10, 400))   # others busy
    assert compile_worker.prestart() is False
    monkeypatch.setattr(compile_worker, "_mark", None)                       # no mark: no start
    assert compile_worker.prestart() is False


def test_vector_code_is_compiled_without_llvm_unrolling_its_loops():
    """A module marked as vector code already (!rb.options "rb.no-slp") keeps its loops as the
    schedule left them; unmarked, LLVM unrolls a loop of four calls into four calls."""
    import llvmlite.binding as llvm
    from relaybench.backends.llvm.jit import get_jit

    def module(marked: bool) -> str:
        text = """
declare void @sink(i64)
define void @four() {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  call void @sink(i64 %i)
  %next = add i64 %i, 1
  %done = icmp eq i64 %next, 4
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
"""
        if marked:
            text += f'!rb.options = !{{!0}}\n!0 = !{{!"{compile_worker.NO_SLP}"}}\n'
        return text
    jit = get_jit()
    calls = {}
    for marked in (False, True):
        with jit.lock:
            _, optimized, _ = compile_worker.compile_object(
                llvm, jit.machine, jit.target.triple, module(marked), "f" * 20)
        calls[marked] = optimized.count("call void @sink")
    assert calls == {False: 4, True: 1}
