"""Measuring candidates: a workload's kernel compiled with one config and timed, in a process of
its own (AutoTVM's builder and runner in one).

A candidate is compiled from the workload alone (:func:`task_function`: the anchor op on inputs
of the workload's shapes, lowered by the strategy with the config applied through
:class:`~relaybench.autotune.dispatch.ApplyConfig`), run on random inputs, and timed in
``repeat`` blocks of ``number`` calls (``number`` chosen so that a block takes at least
``min_repeat_ms``). The defaults are many short blocks (40 of about a millisecond), and a
record's cost is its fastest block: on a machine shared with other work most blocks of a
longer measurement are interrupted by it, and two measurements of one kernel then differ by
2-3x, while the fastest of many short blocks repeats within a few percent. The result carries
the CPU it was measured on, so the caller can check it against the target's.

Two runners share one interface, ``run(workload, configs) -> [result dicts]`` and ``close()``:

* :class:`LocalRunner` (the default): a child process that measures one candidate at a time.
  A candidate that crashes the process (a bad kernel, an abort inside LLVM) or takes longer than
  ``timeout`` seconds is recorded as failed and the process is started again, so no candidate
  can stop the search.
* :class:`DaskRunner`: the candidates are farmed out to the workers of a Dask cluster, each of
  which measures in its own child process the same way.
"""

from __future__ import annotations

import time

import numpy as np

from .space import Workload

__all__ = ["LocalRunner", "DaskRunner", "task_function", "measure_candidate"]


def task_function(workload: Workload):
    """A type-checked Relay function computing ``workload``'s anchor op alone on parameters of
    its shapes (the kernel a candidate is measured on)."""
    from .. import op
    from ..ir import Function, IRModule, var
    from ..passes import InferType
    params = [var(f"p{i}", shape=shape, dtype=dtype)
              for i, (shape, dtype) in enumerate(zip(workload.arg_shapes, workload.arg_dtypes))]
    attrs = workload.attr_dict
    if workload.template in ("conv2d_NCHWc", "depthwise_conv2d_NCHWc"):
        body = op.nn.conv2d(*params, strides=attrs["strides"], padding=attrs["padding"],
                            dilation=attrs["dilation"], groups=attrs["groups"],
                            data_layout=attrs["data_layout"],
                            kernel_layout=attrs["kernel_layout"],
                            out_layout=attrs["out_layout"], out_dtype=workload.out_dtype)
    elif workload.template in ("dense", "dense_rows"):
        body = op.nn.dense(*params)
    elif workload.template == "conv2d_winograd":
        body = op.nn.contrib_conv2d_winograd_without_weight_transform(
            *params, tile_size=attrs["tile_size"], padding=attrs["padding"],
            data_layout=attrs["data_layout"], kernel_layout=attrs["kernel_layout"],
            out_layout=attrs["out_layout"], out_dtype=workload.out_dtype)
    else:
        raise ValueError(f"no task for template {workload.template!r}")
    mod = InferType()(IRModule.from_expr(Function(params, body)))
    return mod["main"]


def _random_input(shape, dtype, rng):
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-8, 8, size=shape).astype(dtype)


def measure_candidate(workload_json: dict, config: dict, number: int = 0, repeat: int = 40,
                      min_repeat_ms: float = 1.0, num_threads: int | None = None) -> dict:
    """Compile and time one candidate here, in this process: ``{"costs": [seconds per call],
    "error": None or why, "compile_seconds", "cpu"}``."""
    from ..backends.llvm import build_kernel
    from ..backends.lowering import lower_primitive
    from .dispatch import ApplyConfig
    from .record import host_cpu
    workload = Workload.from_json(workload_json)
    from ..config import num_threads as default_threads
    result = {"costs": [], "error": None, "compile_seconds": 0.0, "cpu": host_cpu(),
              "num_threads": num_threads or default_threads()}
    try:
        t0 = time.perf_counter()
        func = task_function(workload)
        with ApplyConfig({workload.key: config}) as applied:
            lowered = lower_primitive(func, "llvm", name=f"tune_{workload.template}")
        if workload.key not in applied.used:
            raise RuntimeError("the strategy did not ask for a config of this workload")
        kernel = build_kernel(lowered.prim_func)
        result["compile_seconds"] = time.perf_counter() - t0
        rng = np.random.default_rng(0)
        arrays = [_random_input(tuple(int(d) for d in t.shape), str(t.dtype), rng)
                  for t in lowered.input_types]
        arrays += [np.asarray(c) for c in lowered.constants]
        arrays += [np.empty(tuple(int(d) for d in t.shape), str(t.dtype))
                   for t in lowered.output_types]
        call = kernel.bind(*arrays, num_threads=num_threads)
        call()   # warm up (first touch of the pages, the thread pool)
        if number <= 0:
            t0 = time.perf_counter()
            call()
            once = max(time.perf_counter() - t0, 1e-7)
            number = max(1, int(min_repeat_ms * 1e-3 / once))
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(number):
                call()
            result["costs"].append((time.perf_counter() - t0) / number)
    except Exception as err:   # a candidate that does not compile or run: recorded, not raised
        result["error"] = f"{type(err).__name__}: {err}"
        result["costs"] = []
    return result


_MARK = "@@relaybench-measure@@ "


def _serve() -> None:
    """The measuring process (``python -m relaybench.autotune.measure``): one JSON job per line
    on stdin, each answered by one marked JSON line on stdout, until stdin closes."""
    import json
    import sys
    from ..backends.llvm import build_kernel  # noqa: F401 (imported before the first job)
    from ..backends.lowering import lower_primitive  # noqa: F401
    sys.stdout.write(_MARK + '"ready"\n')
    sys.stdout.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        result = measure_candidate(*job)
        sys.stdout.write(_MARK + json.dumps(result) + "\n")
        sys.stdout.flush()


class LocalRunner:
    """Measures candidates one at a time in a child process on this machine (see the module).

    ``timeout``: seconds a candidate may take (compiling and timing); ``number``, ``repeat``,
    ``min_repeat_ms``: the timing (``number=0`` chooses it); ``num_threads``: the kernels'
    threads (None: ``RB_NUM_THREADS``). The child is a fresh interpreter (``command``, by default
    ``python -m relaybench.autotune.measure``) speaking JSON lines over pipes, so it works the
    same from a script, a notebook or a Dask worker."""

    name = "local"

    #: seconds the child may take to start (importing the compiler)
    START_SECONDS = 30.0

    def __init__(self, timeout: float = 20.0, number: int = 0, repeat: int = 40,
                 min_repeat_ms: float = 1.0, num_threads: int | None = None,
                 command: list | None = None):
        import sys
        self.timeout = float(timeout)
        self.options = (int(number), int(repeat), float(min_repeat_ms), num_threads)
        self.command = list(command or [sys.executable, "-m", "relaybench.autotune.measure"])
        self._process = None
        self.restarts = 0

    def _start(self) -> None:
        import subprocess
        self._process = subprocess.Popen(
            self.command, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
        # the child says "ready" once it has imported the compiler; the candidates' time-out
        # starts after that
        if self._read(time.perf_counter() + self.START_SECONDS) != "ready":
            self._stop(kill=True)
            raise RuntimeError(f"the measuring process ({' '.join(self.command)}) did not "
                               f"start within {self.START_SECONDS:g} s")

    def _stop(self, kill: bool = False) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        try:
            process.stdin.close()
        except OSError:
            pass
        if not kill:
            try:
                process.wait(2.0)
            except Exception:
                pass
        if process.poll() is None:
            process.kill()
            process.wait(5.0)
        process.stdout.close()

    def _read(self, deadline: float):
        """The child's next result, or None when it died or the deadline passed."""
        import json
        import select
        stream = self._process.stdout
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                return None
            ready, _, _ = select.select([stream], [], [], left)
            if not ready:
                return None
            line = stream.readline()
            if not line:        # end of file: the process is gone
                return None
            if line.startswith(_MARK):
                return json.loads(line[len(_MARK):])

    def measure(self, workload: Workload, config: dict) -> dict:
        """One candidate, in the child process (started, or started again, as needed)."""
        import json
        if self._process is None or self._process.poll() is not None:
            self._stop(kill=True)
            self._start()
        started = time.perf_counter()
        limit = self.timeout
        try:
            self._process.stdin.write(json.dumps([workload.to_json(), config,
                                                  *self.options]) + "\n")
            self._process.stdin.flush()
            result = self._read(started + limit)
        except (OSError, ValueError):
            result = None
        if result is not None:
            return result
        try:   # an end of file comes a moment before the exit status
            code = self._process.wait(0.5)
        except Exception:
            code = None
        self._stop(kill=True)
        self.restarts += 1
        why = (f"timed out after {self.timeout:g} s" if code is None
               else f"the measuring process died (exit code {code})")
        return {"costs": [], "error": why, "compile_seconds": time.perf_counter() - started,
                "cpu": None}

    def run(self, workload: Workload, configs: list) -> list:
        return [self.measure(workload, config) for config in configs]

    def close(self) -> None:
        self._stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __del__(self):
        try:
            self._stop(kill=True)
        except Exception:
            pass


_worker_runner: LocalRunner | None = None


def _measure_on_worker(workload_json: dict, config: dict, timeout: float, options: tuple) -> dict:
    """Runs on a Dask worker: the candidate measured in the worker's own child process."""
    global _worker_runner
    if _worker_runner is None or (_worker_runner.timeout, _worker_runner.options) \
            != (timeout, tuple(options)):
        if _worker_runner is not None:
            _worker_runner.close()
        number, repeat, min_ms, threads = options
        _worker_runner = LocalRunner(timeout, number, repeat, min_ms, threads)
    result = _worker_runner.measure(Workload.from_json(workload_json), config)
    if result.get("cpu") is None:
        from .record import host_cpu
        result["cpu"] = host_cpu()
    return result


class DaskRunner:
    """Farms candidates out to the workers of a Dask cluster (``pip install dask distributed``):
    ``address`` is the scheduler's (``"tcp://host:8786"``) or a ``distributed.Client``. Each
    worker measures in a child process of its own, as :class:`LocalRunner` does; the search
    trusts a measurement only when the worker's CPU matches the target's (the record says which
    worker CPU it was and whether it matched)."""

    def __init__(self, address, timeout: float = 20.0, number: int = 0, repeat: int = 40,
                 min_repeat_ms: float = 1.0, num_threads: int | None = None):
        try:
            from distributed import Client
        except ImportError:
            raise ImportError("DaskRunner needs dask's distributed scheduler: "
                              "pip install dask distributed") from None
        self._own = not isinstance(address, Client)
        self.client = Client(address) if self._own else address
        self.timeout = float(timeout)
        self.options = (int(number), int(repeat), float(min_repeat_ms), num_threads)
        self.name = f"dask:{self.client.scheduler.address}"

    def run(self, workload: Workload, configs: list) -> list:
        from distributed import wait
        futures = [self.client.submit(_measure_on_worker, workload.to_json(), config,
                                      self.timeout, self.options, pure=False)
                   for config in configs]
        # each worker measures one candidate after another: allow for a queue of them
        workers = max(1, len(self.client.scheduler_info().get("workers", {})))
        wait(futures, timeout=self.timeout * (len(configs) // workers + 2) + 60)
        out = []
        for future in futures:
            if future.status == "finished":
                out.append(future.result())
            else:
                why = "timed out on the cluster" if future.status == "pending" \
                    else f"the task failed: {future.exception()!r}"
                future.cancel()
                out.append({"costs": [], "error": why, "compile_seconds": 0.0, "cpu": None})
        return out

    def close(self) -> None:
        if self._own:
            self.client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


if __name__ == "__main__":
    _serve()
