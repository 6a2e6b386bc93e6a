"""The machine's reference rates, measured in the same run as the kernels they are compared with.

* :func:`fma_peak`: fused multiply-adds per second with nothing else in the way: a kernel written
  in loop IR and compiled by relaybench's LLVM backend, where each thread updates independent
  vector accumulators (``acc = acc * x + y``) in registers for many iterations: 24 of 16 lanes
  with AVX-512 (32 floating-point operations per instruction, two instructions per cycle per
  core), 12 of 8 lanes without (16 registers of 8 floats; 24 vectors of 16 would spill).
* :func:`sgemm_rate`: numpy's float32 matrix product (its BLAS) on 2048 x 2048 matrices, the rate
  a convolution written as a matrix product could reach.

Both take the number of threads; the clock drifts with temperature and load, so compare kernels
only with rates taken in the same run.

    python bench/peak.py [--threads 1,2]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import numpy as np  # noqa: E402

ITERATIONS = 200_000


def _shape() -> tuple:
    """(accumulators, lanes) that fill this host's vector registers without spilling."""
    from relaybench.backends.strategy.x86 import narrow_host
    return (12, 8) if narrow_host() else (24, 16)


def _fma_kernel(threads: int):
    from relaybench.backends.llvm import build_kernel
    from relaybench.te import loop_ir as L
    ACCUMULATORS, LANES = _shape()

    x = L.Buffer("x", (2,), "float32")
    out = L.Buffer("out", (threads, ACCUMULATORS * LANES), "float32")
    acc = L.Buffer("acc", (ACCUMULATORS, LANES), "float32")
    t, a, lane, it = L.Var("t"), L.Var("a"), L.Var("lane"), L.Var("it")

    def tile(stmt_of):
        return L.For(a, 0, ACCUMULATORS, "unrolled", L.For(lane, 0, LANES, "vectorized",
                                                            stmt_of(a, lane)))

    init = tile(lambda a, lane: L.Store(acc, (a, lane), L.Load(x, (0,)) + L.cast(
        "float32", lane)))
    update = L.For(it, 0, ITERATIONS, "serial", tile(lambda a, lane: L.Store(
        acc, (a, lane), L.Load(acc, (a, lane)) * L.Load(x, (0,)) + L.Load(x, (1,)))))
    store = tile(lambda a, lane: L.Store(out, (t, a * LANES + lane), L.Load(acc, (a, lane))))
    body = L.For(t, 0, threads, "parallel", L.Allocate(acc, L.seq(init, update, store)))
    return build_kernel(L.PrimFunc("fma_peak", [x, out], body), num_threads=threads)


def fma_peak(threads: int, repeat: int = 5) -> float:
    """GFLOP/s of independent vector FMAs on ``threads`` threads (the best of ``repeat``)."""
    kernel = _fma_kernel(threads)
    accumulators, lanes = _shape()
    x = np.array([0.999999, 1e-7], "float32")
    out = np.empty((threads, accumulators * lanes), "float32")
    run = kernel.bind(x, out, num_threads=threads)
    run()
    best = min(_timed(run) for _ in range(repeat))
    return 2 * accumulators * lanes * ITERATIONS * threads / best / 1e9


def sgemm_rate(threads: int, n: int = 2048, repeat: int = 5, set_threads=None) -> float:
    """GFLOP/s of numpy's float32 matrix product on ``n x n`` matrices with ``threads`` threads
    of its BLAS (``set_threads(n)`` sets them, when numpy's BLAS lets the count be set)."""
    setter = set_threads
    if setter is not None:
        setter(threads)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype("float32")
    b = rng.standard_normal((n, n)).astype("float32")
    c = np.empty((n, n), "float32")
    np.matmul(a, b, out=c)
    best = min(_timed(lambda: np.matmul(a, b, out=c)) for _ in range(repeat))
    return 2 * n ** 3 / best / 1e9


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv=None) -> int:
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args(argv)
    from vision import numpy_blas_threads
    setter = numpy_blas_threads()
    for threads in (int(t) for t in args.threads.split(",")):
        print(f"{threads} thread(s): FMA peak {fma_peak(threads):.0f} GFLOP/s, "
              f"sgemm {sgemm_rate(threads, set_threads=setter):.0f} GFLOP/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
