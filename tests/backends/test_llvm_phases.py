"""Kernels in phases (several loop nests, each parallel one on every core, temporaries owned by
the runtime), bound calls, and the worker pool, checked against numpy."""

import threading

import numpy as np
import pytest

pytest.importorskip("llvmlite.ir", reason="the LLVM backend needs llvmlite (the `llvm` extra)")

from relaybench import te  # noqa: E402
from relaybench.backends.llvm import parallel_for  # noqa: E402
from relaybench.backends.llvm.codegen import build_kernel  # noqa: E402
from relaybench.backends.llvm.runtime import (Kernel, PhasedKernel, WorkerPool,  # noqa: E402
                                              aligned_empty)
from relaybench.errors import ExecutionError  # noqa: E402
from relaybench.te import loop_ir as L  # noqa: E402

RNG = np.random.default_rng(11)
N = 12


def transpose_sum_kernel(name="tsum"):
    """T = 2 * A (parallel over rows); B = T + T^T (parallel over rows, reading every row of T,
    so the second phase needs all of the first); then s[0] = sum of B's diagonal (serial)."""
    A = L.Buffer("A", (N, N), "float32")
    B = L.Buffer("B", (N, N), "float32")
    S = L.Buffer("S", (1,), "float32")
    T = L.Buffer("T", (N, N), "float32")
    U = L.Buffer("U", (1,), "int64")
    i, j, k = L.Var("i"), L.Var("j"), L.Var("k")
    first = L.For(i, 0, N, "parallel", L.For(j, 0, N, "serial",
                                             L.Store(T, (i, j), L.Load(A, (i, j)) * 2.0)))
    i2, j2 = L.Var("i"), L.Var("j")
    second = L.For(i2, 0, N, "parallel", L.For(j2, 0, N, "vectorized", L.Store(
        B, (i2, j2), L.Load(T, (i2, j2)) + L.Load(T, (j2, i2)))))
    third = L.seq(L.Store(S, (0,), 0.0), L.Store(U, (0,), L.const(0)),
                  L.For(k, 0, N, "serial", L.seq(
                      L.Store(S, (0,), L.Load(S, (0,)) + L.Load(B, (k, k))),
                      L.Store(U, (0,), L.Load(U, (0,)) + (k << 1)))))
    body = L.Allocate(T, L.Allocate(U, L.seq(first, second, third)))
    return L.PrimFunc(name, (A, B, S), body)


def expected(a):
    t = 2 * a
    b = t + t.T
    return b, np.array([np.trace(b)], "float32")


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_phases_run_in_order_on_every_thread(threads):
    func = transpose_sum_kernel()
    kernel = build_kernel(func, cache=False)
    assert kernel.phased and isinstance(kernel.kernel, PhasedKernel)
    assert kernel.parallel_extent == (N, N, None)
    assert [p.name for p in kernel.kernel.phases] == ["kernel_0", "kernel_1", "kernel_2"]
    a = RNG.standard_normal((N, N)).astype("float32")
    b, s = np.zeros((N, N), "float32"), np.zeros(1, "float32")
    kernel(a, b, s, num_threads=threads)
    want_b, want_s = expected(a)
    np.testing.assert_allclose(b, want_b, rtol=1e-6)
    np.testing.assert_allclose(s, want_s, rtol=1e-5)
    ref = [a.copy(), np.zeros((N, N), "float32"), np.zeros(1, "float32")]
    te.evaluate(func, *ref)
    np.testing.assert_array_equal(b, ref[1])


def test_temporaries_are_aligned_and_owned_by_the_kernel():
    kernel = build_kernel(transpose_sum_kernel("tsum_owned"), cache=False)
    temporaries = kernel.kernel.temporaries
    assert kernel.kernel.temporary_names == ("T", "U")
    assert [(t.shape, t.dtype.name) for t in temporaries] == [((N, N), "float32"),
                                                              ((1,), "int64")]
    assert all(t.ctypes.data % 64 == 0 for t in temporaries)
    a = RNG.standard_normal((N, N)).astype("float32")
    kernel(a, np.zeros((N, N), "float32"), np.zeros(1, "float32"))
    np.testing.assert_array_equal(temporaries[0], 2 * a)  # the first phase's output
    assert temporaries[1][0] == sum(k << 1 for k in range(N))


def test_phased_sources_show_every_function():
    kernel = build_kernel(transpose_sum_kernel("tsum_src"), cache=False)
    assert kernel.source("loops").startswith("def tsum_src(")
    llvm = kernel.source("llvm")
    for k in range(3):
        assert f"kernel_{k}_" in llvm  # each phase is a function of the module
    assert kernel.source("asm")
    assert "PhasedKernel(tsum_src(" in repr(kernel)


def test_phased_kernel_checks_arguments():
    kernel = build_kernel(transpose_sum_kernel("tsum_check"), cache=False)
    a = np.zeros((N, N), "float32")
    with pytest.raises(ExecutionError, match="argument 'B': wrong dtype"):
        kernel(a, np.zeros((N, N), "float64"), np.zeros(1, "float32"))
    with pytest.raises(ExecutionError, match="3 arguments given|2 arguments given"):
        kernel(a, a)


def test_single_nests_and_unparallel_sequences_keep_one_function():
    A = L.Buffer("A", (4,), "float32")
    i, j = L.Var("i"), L.Var("j")
    serial_pair = L.seq(L.For(i, 0, 4, "serial", L.Store(A, (i,), 1.0)),
                        L.For(j, 0, 4, "serial", L.Store(A, (j,), L.Load(A, (j,)) + 1.0)))
    kernel = build_kernel(L.PrimFunc("pair", (A,), serial_pair), cache=False)
    assert not kernel.phased and isinstance(kernel.kernel, Kernel)
    a = np.zeros(4, "float32")
    kernel(a)
    np.testing.assert_array_equal(a, 2.0)
    parallel_pair = L.seq(L.For(i, 0, 4, "parallel", L.Store(A, (i,), 1.0)),
                          L.For(j, 0, 4, "parallel", L.Store(A, (j,), L.Load(A, (j,)) * 3.0)))
    serial_run = build_kernel(L.PrimFunc("ppair", (A,), parallel_pair), parallel=False,
                              cache=False)
    assert not serial_run.phased
    serial_run(a)
    np.testing.assert_array_equal(a, 3.0)


def test_inner_allocations_stay_in_the_function():
    """A temporary inside a parallel loop is per iteration (stack), not owned by the runtime."""
    A = L.Buffer("A", (6, 8), "float32")
    B = L.Buffer("B", (6, 8), "float32")
    R = L.Buffer("R", (8,), "float32")
    i, j, j2, k = L.Var("i"), L.Var("j"), L.Var("j"), L.Var("k")
    per_row = L.For(i, 0, 6, "parallel", L.Allocate(R, L.seq(
        L.For(j, 0, 8, "serial", L.Store(R, (j,), L.Load(A, (i, 7 - j)))),
        L.For(j2, 0, 8, "serial", L.Store(B, (i, j2), L.Load(R, (j2,)) + 1.0)))))
    double = L.For(k, 0, 6, "parallel", L.For(L.Var("m"), 0, 8, "serial", L.Store(
        B, (k, 0), L.Load(B, (k, 0)) * 2.0)))
    kernel = build_kernel(L.PrimFunc("rev", (A, B), L.seq(per_row, double)), cache=False)
    assert kernel.phased and kernel.kernel.temporaries == ()
    a = RNG.standard_normal((6, 8)).astype("float32")
    b = np.zeros((6, 8), "float32")
    kernel(a, b, num_threads=2)
    want = a[:, ::-1] + 1
    want[:, 0] *= 2 ** 8
    np.testing.assert_allclose(b, want, rtol=1e-6)


# ------------------------------------------------------------------------------------ bind


def test_bind_checks_once_and_sees_new_input_values():
    func = transpose_sum_kernel("tsum_bind")
    kernel = build_kernel(func, cache=False)
    a = RNG.standard_normal((N, N)).astype("float32")
    b, s = np.zeros((N, N), "float32"), np.zeros(1, "float32")
    run = kernel.bind(a, b, s, num_threads=2)
    run()
    np.testing.assert_allclose(b, expected(a)[0], rtol=1e-6)
    a[:] = RNG.standard_normal((N, N))  # in place: the bound pointers still hold
    assert run() is None
    np.testing.assert_allclose(b, expected(a)[0], rtol=1e-6)
    np.testing.assert_allclose(s, expected(a)[1], rtol=1e-5)
    with pytest.raises(ExecutionError, match="argument 'A': wrong shape"):
        kernel.bind(np.zeros((N, N + 1), "float32"), b, s)


@pytest.mark.parametrize("parallel", [True, False])
def test_bind_on_a_single_function_kernel(parallel):
    X = te.placeholder((10, 3), name="X")
    Y = te.compute((10, 3), lambda i, j: X[i, j] * 3.0 + 1.0, name="Y")
    s = te.create_schedule(Y)
    if parallel:
        s[Y].parallel(Y.op.axis[0])
    kernel = build_kernel(te.lower(s, [X], name=f"affine_{parallel}"), cache=False)
    assert (kernel.parallel_extent == 10) == parallel
    x = RNG.standard_normal((10, 3)).astype("float32")
    y = np.zeros((10, 3), "float32")
    for threads in (1, 2, 4):
        y[:] = 0
        kernel.bind(x, y, num_threads=threads)()
        np.testing.assert_allclose(y, x * 3 + 1, rtol=1e-6)
    with pytest.raises(ValueError, match="num_threads must be at least 1"):
        kernel.bind(x, y, num_threads=0)


def test_bound_kernel_keeps_its_arrays_alive():
    import gc
    X = te.placeholder((64,), name="X")
    Y = te.compute((64,), lambda i: X[i] + 1.0, name="Y")
    kernel = build_kernel(te.lower([Y], [X], name="inc"), cache=False)
    out = np.zeros(64, "float32")
    run = kernel.bind(np.arange(64, dtype="float32"), out)
    gc.collect()
    np.zeros(64, "float32")  # would likely reuse freed memory
    run()
    np.testing.assert_array_equal(out, np.arange(64) + 1)


# ------------------------------------------------------------------------------ worker pool


def test_worker_pool_runs_ranges_on_its_threads_and_reraises():
    pool = WorkerPool(3)
    try:
        seen = {}

        def body(begin, end):
            seen[(begin, end)] = threading.current_thread().name

        pool.run(body, [(0, 1), (1, 2), (2, 3)])
        assert seen[(0, 1)] == threading.current_thread().name
        assert {seen[(1, 2)], seen[(2, 3)]} == {"rb-kernel-0", "rb-kernel-1"}

        def failing(begin, end):
            if begin == 2:
                raise KeyError(f"range {begin}")
        with pytest.raises(KeyError, match="range 2"):
            pool.run(failing, [(0, 1), (1, 2), (2, 3)])
        with pytest.raises(ValueError, match="4 ranges for 3 threads"):
            pool.run(body, [(0, 1)] * 4)
        seen.clear()
        pool.run(body, [(5, 6)])  # fewer ranges than threads
        assert list(seen) == [(5, 6)]
    finally:
        pool.shutdown()


def test_parallel_for_from_two_threads_at_once():
    """Two callers, one asking for 2 threads and one for 3, share no waiting."""
    totals = np.zeros(2, np.int64)

    def caller(slot):
        def body(begin, end):
            for _ in range(begin, end):
                totals[slot] += 0  # touch
            return None
        for _ in range(50):
            ranges = parallel_for(body, 8, num_threads=2 + slot)
            totals[slot] += sum(e - b for b, e in ranges)

    threads = [threading.Thread(target=caller, args=(slot,)) for slot in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    assert totals.tolist() == [400, 400]


def test_aligned_empty():
    for shape, dtype in [((3, 5), "float32"), ((0,), "int8"), ((7,), "float64"), ((), "int32")]:
        array = aligned_empty(shape, dtype)
        assert array.shape == shape and array.dtype == np.dtype(dtype)
        assert array.flags.c_contiguous
        assert array.size == 0 or array.ctypes.data % 64 == 0
