"""The machine's reference rates, measured in the same run as the kernels they are compared with.

* :func:`fma_peak`: fused multiply-adds per second with nothing else in the way: a kernel written
  in loop IR and compiled by relaybench's LLVM backend, where each thread updates independent
  vector accumulators (``acc = acc * x + y``) in registers for many iterations: 24 of 16 lanes
  with AVX-512 (32 floating-point operations per instruction, two instructions per cycle per
  core), 12 of 8 lanes without (16 registers of 8 floats; 24 vectors of 16 would spill).
* :func:`sgemm_rate`: numpy's float32 matrix product (its BLAS) on 2048 x 2048 matrices, the rate
  a convolution written as a matrix product could reach.

* :func:`handoff_ns`: the round trip of a cache line between two threads, each waiting in
  compiled code for the other's store (what a parallel kernel's hand-out and the data one thread
  writes for the other cost). On a virtual machine it shows where the host put the two cores:
  60-90 ns on cores sharing a level-3 cache, 400-470 ns seen on the 2-core AMD EPYC when the
  host ran them on different chiplets, in phases of seconds; a two-thread run of a small model
  was 1.7x slower in those (the DQN: 0.126 ms against 0.21-0.23 ms).

The first two take the number of threads; the clock drifts with temperature and load, so compare
kernels only with rates taken in the same run.

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


_PINGPONG = None


def _pingpong():
    """``rb_pingpong(i64 *word, i64 n, i64 parity)``, compiled once: this thread stores
    ``word + 1`` each time it finds ``word`` of its ``parity`` below ``2 n``, and returns when
    ``word`` reaches ``2 n``."""
    global _PINGPONG
    if _PINGPONG is None:
        import ctypes

        from llvmlite import ir

        from relaybench.backends.llvm.jit import compile_module
        i64 = ir.IntType(64)
        module = ir.Module(name="rb_pingpong")
        pause = ir.Function(module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause")
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [i64.as_pointer(), i64, i64]),
                         "rb_pingpong")
        word, n, parity = fn.args
        entry, loop, mine, wait, done = (fn.append_basic_block(k) for k in
                                         ("entry", "loop", "mine", "wait", "done"))
        b = ir.IRBuilder(entry)
        end = b.mul(n, ir.Constant(i64, 2))
        b.branch(loop)
        b.position_at_end(loop)
        value = b.load_atomic(word, "acquire", 8)
        b.cbranch(b.icmp_signed(">=", value, end), done, wait)
        b.position_at_end(wait)
        turn = b.icmp_signed("==", b.and_(value, ir.Constant(i64, 1)), parity)
        spin = fn.append_basic_block("spin")
        b.cbranch(turn, mine, spin)
        b.position_at_end(spin)
        b.call(pause, [])
        b.branch(loop)
        b.position_at_end(mine)
        b.store_atomic(b.add(value, ir.Constant(i64, 1)), word, "release", 8)
        b.branch(loop)
        b.position_at_end(done)
        b.ret_void()
        compiled = compile_module(module, name="rb_pingpong")
        _PINGPONG = (compiled, compiled.function("rb_pingpong", [ctypes.c_void_p,
                                                                ctypes.c_int64,
                                                                ctypes.c_int64]))
    return _PINGPONG[1]


def handoff_ns(rounds: int = 20_000, repeat: int = 3) -> float:
    """Nanoseconds of one round trip of a cache line between two threads (the median of
    ``repeat`` runs of ``rounds``), each thread waiting for the other's store in compiled code
    (called through ctypes, without the GIL). The threads go where the operating system puts
    them, as the kernels' threads do."""
    import threading
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    if cores < 2:       # two spinning threads on one core would hand over once per time slice
        return float("nan")
    pingpong = _pingpong()
    times = []
    for _ in range(repeat):
        word = np.zeros(8, np.int64)
        other = threading.Thread(target=pingpong, args=(word.ctypes.data, rounds, 1))
        other.start()
        start = time.perf_counter()
        pingpong(word.ctypes.data, rounds, 0)
        other.join()
        times.append((time.perf_counter() - start) / rounds * 1e9)
    return float(np.median(times))


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
    print(f"handoff between two threads: {handoff_ns():.0f} ns a round trip")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
