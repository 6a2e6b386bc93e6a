"""The spinning thread pool: every range of every call runs exactly once, results match numpy,
workers stop on shutdown and nap when idle."""

import time

import numpy as np
import pytest

pytest.importorskip("llvmlite")

from relaybench import te  # noqa: E402
from relaybench.backends.llvm import build_kernel  # noqa: E402
from relaybench.backends.llvm.spinpool import SpinPool  # noqa: E402


def _increment_kernel(n):
    """out[i] += in[i], the outer loop parallel: a range run twice or never shows in the sum."""
    from relaybench.te import loop_ir as L
    x = L.Buffer("x", (n, 16), "int64")
    out = L.Buffer("out", (n, 16), "int64")
    i, j = L.Var("i"), L.Var("j")
    body = L.For(i, 0, n, "parallel", L.For(j, 0, 16, "vectorized", L.Store(
        out, (i, j), L.Load(out, (i, j)) + L.Load(x, (i, j)))))
    return build_kernel(L.PrimFunc("increment", [x, out], body))


def _ones(n):
    """The increment kernel on ``n`` rows of ones, its zeroed output, and the argument array
    of pointers a pool's entry point takes."""
    kernel = _increment_kernel(n)
    x = np.ones((n, 16), "int64")
    out = np.zeros((n, 16), "int64")
    return kernel, out, np.array([x.ctypes.data, out.ctypes.data], np.int64), x


@pytest.mark.parametrize("threads", [2, 3])
def test_every_range_runs_once_per_call(threads):
    kernel = _increment_kernel(37)
    assert kernel.kernel.entry is not None
    x = np.arange(37 * 16, dtype="int64").reshape(37, 16)
    out = np.zeros_like(x)
    run = kernel.bind(x, out, num_threads=threads)
    for _ in range(300):
        run()
    np.testing.assert_array_equal(out, 300 * x)


def test_phased_kernel_on_the_pool_matches_numpy():
    A = te.placeholder((64, 64), name="A")
    B = te.compute((64, 64), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((64, 64), lambda i, j: B[j, i] + 1.0, name="C")
    s = te.create_schedule(C)
    s[B].parallel(B.op.axis[0])
    s[C].parallel(C.op.axis[0])
    kernel = build_kernel(te.lower(s, [A], name="two_phases"))
    assert kernel.phased
    a = np.random.default_rng(0).standard_normal((64, 64)).astype("float32")
    c = np.empty_like(a)
    run = kernel.bind(a, c, num_threads=2)
    for _ in range(20):
        c[:] = 0
        run()
        np.testing.assert_allclose(c, a.T * 2 + 1, rtol=1e-6)


def test_pool_runs_an_entry_point_and_stops():
    kernel, out, pointers, _ = _ones(8)
    pool = SpinPool(3)
    try:
        pool.run(kernel.kernel.entry, pointers.ctypes.data, [(0, 3), (3, 6), (6, 8)])
        np.testing.assert_array_equal(out, 1)
        with pytest.raises(ValueError, match="65 ranges, more than 64"):
            pool.run(kernel.kernel.entry, pointers.ctypes.data, [(0, 2)] * 65)
    finally:
        pool.shutdown()
    assert pool._threads is None
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.run(kernel.kernel.entry, pointers.ctypes.data, [(0, 8)])


def test_idle_workers_nap():
    kernel = _increment_kernel(8)
    x = np.ones((8, 16), "int64")
    out = np.zeros((8, 16), "int64")
    kernel.bind(x, out, num_threads=2)()
    time.sleep(0.05)  # past the spinning phase
    cpu, wall = time.process_time(), time.perf_counter()
    time.sleep(0.3)
    used = time.process_time() - cpu
    # a spinning worker would burn the whole 0.3 s; napping costs a few percent at most
    assert used < 0.5 * (time.perf_counter() - wall)


def test_pool_keeps_no_wrapper_of_a_kernel(tmp_path):
    """The pool once held one ctypes wrapper per kernel address it ever ran, forever; now the
    ranges run from compiled code and nothing is wrapped, so a kernel that is gone leaves
    nothing in the pool, and runs through the pool still give numpy's answer."""
    import gc
    import weakref

    from relaybench import config
    from relaybench.backends.llvm.spinpool import spin_pool

    pool = spin_pool(2)
    assert not hasattr(pool, "_entries")
    with config.Context(RB_CACHE_DIR=str(tmp_path)):
        kernel = _increment_kernel(9)
    x = np.arange(9 * 16, dtype="int64").reshape(9, 16)
    out = np.zeros_like(x)
    run = kernel.bind(x, out, num_threads=2)
    for _ in range(3):
        run()
    np.testing.assert_array_equal(out, 3 * x)
    pointers = np.array([x.ctypes.data, out.ctypes.data], dtype=np.int64)
    pool.run(kernel.kernel.entry, pointers.ctypes.data, [(0, 4), (4, 9)])
    np.testing.assert_array_equal(out, 4 * x)
    referrers = weakref.ref(kernel)
    del run, kernel
    gc.collect()
    assert referrers() is None
    assert not [v for v in vars(pool).values() if isinstance(v, dict) and v]


def test_the_spin_is_measured_in_this_cpus_pauses():
    """How many pause instructions make SPIN_SECONDS is measured once per process and written
    into the pool's job header (word 5), where the workers and the waiter read it."""
    from relaybench.backends.llvm import spinpool
    limit = spinpool.spin_limit()
    assert 1000 <= limit <= 10_000_000 and spinpool.spin_limit() == limit
    pool = SpinPool(3)
    try:
        assert pool._header[5] == limit
        kernel, out, pointers, _ = _ones(6)
        pool.run(kernel.kernel.entry, pointers.ctypes.data, [(0, 2), (2, 4), (4, 6)])
        np.testing.assert_array_equal(out, 1)
    finally:
        pool.shutdown()


def test_more_ranges_than_threads_each_run_once():
    """Ranges are claimed, not dealt: 40 ranges on 3 threads each run exactly once, call after
    call."""
    kernel = _increment_kernel(40)
    x = np.arange(40 * 16, dtype="int64").reshape(40, 16)
    out = np.zeros_like(x)
    pointers = np.array([x.ctypes.data, out.ctypes.data], np.int64)
    pool = SpinPool(3)
    try:
        for _ in range(200):
            pool.run(kernel.kernel.entry, pointers.ctypes.data, [(i, i + 1) for i in range(40)])
    finally:
        pool.shutdown()
    np.testing.assert_array_equal(out, 200 * x)


def test_the_caller_does_not_wait_for_a_worker_that_has_no_core():
    """A worker held away from its core (here: stopped for the whole call) leaves its ranges
    to the caller, which claims them; the call returns, every range run once."""
    kernel, out, pointers, _ = _ones(8)
    pool = SpinPool(2)
    try:
        pool._header[4] = 1            # the stop flag: the worker leaves its loop
        pool._threads[0].join(timeout=2.0)
        assert not pool._threads[0].is_alive()
        pool.run(kernel.kernel.entry, pointers.ctypes.data, [(0, 4), (4, 8)])
        np.testing.assert_array_equal(out, 1)
    finally:
        pool.shutdown()


def test_a_steps_program_runs_direct_calls_and_jobs_in_order():
    """Kernel calls bound on one thread (direct calls) and on three (jobs for the pool), joined
    into one Steps program: one call from Python runs them all, each range once, in order
    (the second kernel reads what the first wrote)."""
    from relaybench.backends.llvm.runtime import join_native
    from relaybench.backends.llvm.spinpool import Steps, spin_pool

    kernel = _increment_kernel(23)
    x = np.arange(23 * 16, dtype="int64").reshape(23, 16)
    middle = np.zeros_like(x)
    out = np.zeros_like(x)
    calls = [kernel.bind(x, middle, num_threads=1),       # middle += x
             kernel.bind(middle, out, num_threads=3),     # out += middle
             kernel.bind(x, middle, num_threads=3)]       # middle += x
    native = join_native(calls)
    assert native is not None and native.pool is spin_pool(3)
    assert [step[0] for step in native.steps] == [0, 1, 1]
    program = Steps(native.steps, native.pool, native.keep)
    for _ in range(50):
        program()
    # after call k (1-based), middle = 2k x; out gained 2k - 1 times x on call k
    np.testing.assert_array_equal(middle, 100 * x)
    np.testing.assert_array_equal(out, sum(2 * k - 1 for k in range(1, 51)) * x)


def test_a_steps_program_refuses_steps_it_cannot_run():
    from relaybench.backends.llvm.spinpool import MAX_ARITY, Steps, direct_step
    args = np.zeros(4, np.int64)
    with pytest.raises(ValueError, match="a direct step passes 6, 12, 24, 48"):
        Steps([(0, 1234, args.ctypes.data, 5, 0, 0)])
    with pytest.raises(ValueError, match=f"more than {MAX_ARITY}"):
        direct_step(1234, range(MAX_ARITY + 1))
    with pytest.raises(ValueError, match="no pool"):
        Steps([(1, 1234, args.ctypes.data, 0, args.ctypes.data, 2)])
    with pytest.raises(ValueError, match="unknown kind"):
        Steps([(7, 1234, args.ctypes.data, 0, 0, 0)])
    with pytest.raises(ValueError, match="null address"):
        Steps([(0, 0, args.ctypes.data, 6, 0, 0)])
    assert len(Steps([])) == 0
    Steps([])()     # nothing to run


@pytest.mark.parametrize("inputs", [3, 9, 20])
def test_direct_steps_pass_arguments_in_registers_and_on_the_stack(inputs):
    """A kernel of ``inputs + 1`` pointers called by a Steps program: the arguments beyond the
    six that travel in registers are read from the stack, the padding past the last one is
    never read; the sum is numpy's."""
    from relaybench.backends.llvm.runtime import join_native
    from relaybench.backends.llvm.spinpool import Steps, direct_step
    xs = [te.placeholder((5, 7), name=f"x{k}") for k in range(inputs)]

    def total(i, j):
        acc = xs[0][i, j]
        for k, x in enumerate(xs[1:], start=2):
            acc = acc + x[i, j] * float(k)
        return acc
    out = te.compute((5, 7), total, name="out")
    kernel = build_kernel(te.lower(te.create_schedule(out), xs, name=f"sum{inputs}"))
    rng = np.random.default_rng(inputs)
    arrays = [rng.standard_normal((5, 7)).astype("float32") for _ in xs]
    result = np.zeros((5, 7), "float32")
    native = join_native([kernel.bind(*arrays, result, num_threads=1)])
    (step,) = native.steps
    assert step[3] == direct_step(1, range(inputs + 1))[0][3] >= inputs + 1
    Steps(native.steps, native.pool, native.keep)()
    want = arrays[0] + sum(a * float(k) for k, a in enumerate(arrays[1:], start=2))
    np.testing.assert_allclose(result, want, rtol=1e-5, atol=1e-5)


def test_back_to_back_jobs_of_different_sizes_run_each_range_once():
    """Jobs launched one right after another from compiled code (a Steps program), each with
    another number of ranges: a worker that finishes the last range of one job and looks for
    more while the next is being published must not claim a range of the next one with the
    first one's tag (the count it compares with travels in the claim word). Every output is
    an exact multiple of its input, so a range run twice or never shows."""
    from relaybench.backends.llvm.runtime import join_native
    from relaybench.backends.llvm.spinpool import Steps, spin_pool

    kernels = {n: _increment_kernel(n) for n in (3, 7, 12, 40)}
    pool = spin_pool(3)
    cases, calls = [], []
    for n, kernel in list(kernels.items()) * 3:
        x = np.arange(n * 16, dtype="int64").reshape(n, 16) + 1
        out = np.zeros_like(x)
        cases.append((x, out))
        calls.append(kernel.bind(x, out, num_threads=3))
    native = join_native(calls)
    assert native is not None and native.pool is pool
    assert sorted({step[5] for step in native.steps}) == [3, 6]    # 2 ranges a thread, or n
    program = Steps(native.steps, native.pool, native.keep)
    for _ in range(400):
        program()
    for x, out in cases:
        np.testing.assert_array_equal(out, 400 * x)
