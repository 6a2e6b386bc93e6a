"""The paper's vision models against the peers: relaybench, PyTorch eager and ONNX Runtime.

    python bench/vision.py [--models resnet18,mobilenet_v2,vgg16,dqn] [--threads 1,2]
                           [--repeat 15] [--number 0] [--out bench/out] [--quick]

ResNet-18, MobileNet V2 and VGG-16 (1x3x224x224) and the DQN (1x4x84x84), batch 1, float32. All
engines compute the same function from the same weights: relaybench's zoo model and its params;
the PyTorch twin of ``bench/torch_models.py`` with those params loaded; and ONNX Runtime on the
ONNX file exported from that PyTorch module. Their outputs are compared before anything is timed.

Timing. For each model and thread count, every engine is warmed up (at least 0.1 s and
``--warmup`` calls), and with ``--number 0`` its calls per block are counted from 50 ms of
calls after that (an engine's first calls pay for page faults and cold caches); then the
repetitions are interleaved: repetition ``r`` runs each engine once (``number`` calls, timed
together and divided), starting from engine ``r mod n``, so a drift of the machine's clock or
load touches every engine alike. A pause of 50 ms separates the engines, so the threads that
one leaves spinning after its call (ONNX Runtime's for about 20 ms, PyTorch's for a few) do not
steal cycles from the next; OpenBLAS's, which spin for about 0.1 s, are told not to
(``OPENBLAS_THREAD_TIMEOUT``). Each engine's median and interquartile range are reported, and
its speed relative to PyTorch eager (PyTorch's median over the engine's: above 1 is faster).

Threads: ``torch.set_num_threads``; ONNX Runtime's ``intra_op_num_threads`` (one inter-op
thread, sequential execution); relaybench's ``RB_NUM_THREADS``.

The relaybench column is :func:`relaybench_engine`: ``relaybench.build(mod, target="llvm",
params=params, opt_level=3, num_threads=threads)``; should the build fail, the reference
interpreter, labelled "relaybench (interpreter)" (numpy running Relay's semantics, not compiled
code). The "relaybench tuned" column is the same build inside
``relaybench.autotune.apply_history_best`` of the tuning logs (``--tuning-log``; by default the
ones shipped in ``relaybench/autotune/logs``), and both relaybench columns are also given as
their time over ONNX Runtime's. The compile time is measured in fresh processes, cold (an empty ``RB_CACHE_DIR``) and
cached (the same build again, reading the kernels the first one stored). For each thread count,
relaybench's per-kernel profile, untuned and tuned, gives every convolution's GFLOP/s, set
against the machine's FMA peak and sgemm rate measured in the same run (``bench/peak.py``), and
every dense layer's weight bytes per second against the memory bandwidth measured in the same
run (:func:`memory_bandwidth`); the load average is noted beside each table.

Before and after each timing at two threads or more, the round trip of a cache line between
two threads is measured (``bench/peak.py``'s ``handoff_ns``) and printed under the table: on a
virtual machine the host may run the two cores on different chiplets for seconds at a time,
where every hand-out and every value one thread writes for the other costs five times as much
(hundreds of ns), and the small models' two-thread figures are slower there. Prints the load
average at the start and the end (compare only runs on an idle machine), and
writes every raw timing to ``OUT/vision-<time>.json``. Needs the bench extra:
``pip install -e '.[bench]'``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

# OpenBLAS (numpy's BLAS, under the interpreter) keeps its threads spinning for about 0.1 s after
# each call, which would take a core from whichever engine runs next; this makes them sleep at
# once. It must be set before numpy is first imported.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:   # bench/peak.py
    sys.path.insert(0, str(HERE))

# name -> (table label, input shape, keyword arguments of both builders)
MODELS = {
    "resnet18": ("ResNet-18", (1, 3, 224, 224), {}),
    "mobilenet_v2": ("MobileNet V2", (1, 3, 224, 224), {}),
    "vgg16": ("VGG-16", (1, 3, 224, 224), {}),
    "dqn": ("DQN", (1, 4, 84, 84), {}),
}

# outputs of two engines agree when |a - b| <= ATOL * max|b| + RTOL * |b|
RTOL, ATOL = 1e-3, 1e-4
PAUSE_S = 0.05          # between two engines' blocks of calls: ONNX Runtime spins about 20 ms
AUTO_BLOCK_S = 0.2      # with --number 0, each block of calls lasts about this long
WARMUP_S = 0.1          # each engine warms up for at least this long (and --warmup calls)
PROBE_S = 0.05          # then calls for at least this long give its time per call


def _load_torch_models():
    try:
        import torch  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        raise SystemExit(f"bench/vision.py needs the bench extra (pip install -e '.[bench]'): {exc}")
    spec = importlib.util.spec_from_file_location("bench_torch_models", HERE / "torch_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Engine:
    """One way of running one model: ``run(data)`` returns the output as a numpy array (or
    something ``np.asarray`` takes); ``prepare()`` runs, untimed, before each block of calls."""

    key: str
    label: str
    run: Callable[[np.ndarray], object]
    prepare: Callable[[], None] = lambda: None
    setup_s: float = 0.0
    info: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# The engines

def torch_engine(net, threads: int) -> Engine:
    import torch

    def prepare():
        torch.set_num_threads(threads)

    def run(data):
        with torch.inference_mode():
            return net(torch.from_numpy(data)).numpy()

    return Engine("pytorch", "PyTorch eager", run, prepare)


def onnxruntime_engine(onnx_path: str, threads: int) -> Engine:
    import onnxruntime as ort
    start = time.perf_counter()
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
    setup = time.perf_counter() - start
    name = session.get_inputs()[0].name

    def run(data):
        return session.run(None, {name: data})[0]

    return Engine("onnxruntime", "ONNX Runtime", run, setup_s=setup)


def _first_output(result):
    if isinstance(result, (list, tuple)):
        result = result[0]
    if hasattr(result, "numpy") and not isinstance(result, np.ndarray):
        result = result.numpy()
    return result


_BLAS_SET_THREADS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
                     "openblas_set_num_threads64_", "openblas_set_num_threads")


def numpy_blas_threads() -> Optional[Callable[[int], None]]:
    """A function that sets the thread count of numpy's bundled OpenBLAS, or None where numpy
    bundles no OpenBLAS that exports one (the count is then whatever the library chose)."""
    import ctypes
    import glob
    libs = Path(np.__file__).resolve().parent.parent / "numpy.libs"
    for path in sorted(glob.glob(str(libs / "*openblas*.so*"))):
        try:
            lib = ctypes.CDLL(path)     # the copy numpy has loaded already: same handle
        except OSError:
            continue
        for symbol in _BLAS_SET_THREADS:
            if hasattr(lib, symbol):
                setter = getattr(lib, symbol)
                setter.argtypes, setter.restype = [ctypes.c_int], None
                return setter
    return None


def relaybench_engine(mod, params, threads: int, tuning_log=None) -> Engine:
    """relaybench compiled with ``relaybench.build`` (target llvm, opt_level 3, ``threads``
    threads); with ``tuning_log`` (paths of tuning logs), built inside
    ``relaybench.autotune.apply_history_best`` (the engine ``relaybench_tuned``). A build that
    fails falls back to the reference interpreter, labelled as such, with the error printed and
    kept in ``info``."""
    import contextlib

    import relaybench as rb

    key, label = ("relaybench_tuned", "relaybench tuned") if tuning_log else \
        ("relaybench", "relaybench")
    info: dict = {}
    try:
        start = time.perf_counter()
        scope = rb.autotune.apply_history_best(tuning_log) if tuning_log \
            else contextlib.nullcontext()
        with scope as applied:
            lib = rb.build(mod, target="llvm", params=params, opt_level=3, num_threads=threads)
        setup = time.perf_counter() - start
        if tuning_log:
            info["tuned_workloads"] = len(applied.used)

        input_name = lib.input_names[0]

        def run(data):
            return _first_output(lib.run(**{input_name: data}))

        return Engine(key, label, run, setup_s=setup,
                      info=dict(info, compiled=True, module=lib))
    except Exception as exc:   # report it, and still give the run a relaybench column
        info["build_error"] = f"{type(exc).__name__}: {exc}"
        print(f"  relaybench.build failed ({info['build_error']}); using the interpreter",
              file=sys.stderr)
    start = time.perf_counter()
    evaluate = rb.create_executor("interpreter", mod=mod).evaluate()
    setup = time.perf_counter() - start

    def run(data):
        return evaluate(data, **params)

    set_blas_threads = numpy_blas_threads()
    info["blas_threads"] = threads if set_blas_threads else "not set: numpy's BLAS chooses"

    def prepare():
        if set_blas_threads is not None:
            set_blas_threads(threads)

    return Engine(key, label + " (interpreter)", run, prepare, setup_s=setup,
                  info=dict(info, compiled=False))


_COMPILE_SCRIPT = """
import sys, time
import relaybench as rb
mod, params = rb.models.get(sys.argv[1])
start = time.perf_counter()
rb.build(mod, target="llvm", params=params, opt_level=3)
print(time.perf_counter() - start)
"""


def relaybench_compile_times(name: str) -> Optional[dict]:
    """Seconds to ``relaybench.build`` the model (optimize, lower, compile every kernel), each in
    a fresh process: ``cold`` with an empty kernel cache (``RB_CACHE_DIR``), ``cached`` again with
    the cache the first filled. None when a build fails."""
    import subprocess
    times = {}
    with tempfile.TemporaryDirectory(prefix="rb-vision-cache-") as cache:
        env = dict(os.environ, RB_CACHE_DIR=cache)
        for kind in ("cold", "cached"):
            done = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT, name], env=env,
                                  capture_output=True, text=True)
            if done.returncode != 0:
                print(f"  relaybench.build failed while timing the compile:\n{done.stderr[-2000:]}",
                      file=sys.stderr)
                return None
            times[kind] = float(done.stdout.strip().splitlines()[-1])
    return times


def kernel_profile(lib, data, fma_gflops: float, sgemm_gflops: float) -> list:
    """relaybench's convolution and dense kernels: time per call, GFLOP/s, and that rate over
    the machine's FMA peak and sgemm rate measured in the same run."""
    profile = lib.profile(number=20, data=data)
    rows = []
    for row in profile.groups:
        if row["GFLOP/s"] == "":
            continue
        rate = float(row["GFLOP/s"])
        rows.append({"group": row["group"], "rule": row["rule"], "calls": row["calls"],
                     "ms_per_call": row["ms/call"], "gflops": rate,
                     "of_fma_peak": rate / fma_gflops, "of_sgemm": rate / sgemm_gflops})
    return rows


STREAM_FLOATS = 1 << 24   # 64 MB per array: far beyond the caches


def memory_bandwidth(threads: int, floats: int = STREAM_FLOATS, repeat: int = 5) -> float:
    """GB/s of a streaming kernel compiled by relaybench on ``threads`` threads: ``y = 2 * x``
    over ``floats`` floats (bytes read plus bytes written per second, the best of ``repeat``).
    With the default 2^24 floats, from memory: the rate a batch-1 dense layer, which reads each
    weight once, can at most reach when its weights are not in a cache; with as many floats as a
    dense layer's weights, from the cache level that holds them between two calls."""
    import relaybench as rb
    rows = max(1, floats // 1024)
    x = rb.var("x", shape=(rows, 1024), dtype="float32")
    body = rb.op.multiply(x, rb.const(2.0, "float32"))
    lib = rb.build(rb.IRModule.from_expr(rb.Function([x], body)), target="llvm", opt_level=3,
                   num_threads=threads)
    data = np.ones((rows, 1024), "float32")
    lib.set_input(x=data)
    lib.run()
    best = min(_seconds(lib.run) for _ in range(repeat))
    return 2 * data.nbytes / best / 1e9


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def layer_tables(row) -> str:
    """The per-layer tables of one row: every convolution, untuned and tuned, against the FMA
    peak; every dense layer's weight bytes per second against the memory bandwidth (a batch-1
    dense layer reads each weight once: 4 bytes per 2 flops)."""
    peak = row["peak"]
    untuned = row.get("kernels", [])
    tuned = {k["group"]: k for k in row.get("kernels_tuned", [])}
    cached = peak.get("cache_gbs")
    lines = [f"relaybench layers, {row['label']}, {row['threads']} thread(s): FMA peak "
             f"{peak['fma_gflops']:.0f} GFLOP/s, sgemm {peak['sgemm_gflops']:.0f} GFLOP/s, "
             f"memory {peak['stream_gbs']:.1f} GB/s"
             + (f", {cached:.1f} GB/s streaming the largest dense weights' size"
                if cached else "") + f" (load {row.get('load', '?')})",
             "| group | calls | untuned ms | tuned ms | untuned GFLOP/s | tuned GFLOP/s "
             "| tuned of FMA peak |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    dense = []
    for k in untuned:
        t = tuned.get(k["group"])
        if "dense" in k["rule"]:
            dense.append((k, t))
            continue
        lines.append(f"| {k['group']} | {k['calls']} | {k['ms_per_call']:.3f} | "
                     + (f"{t['ms_per_call']:.3f} | " if t else "- | ")
                     + f"{k['gflops']:.0f} | " + (f"{t['gflops']:.0f} | " if t else "- | ")
                     + (f"{t['of_fma_peak']:.0%} |" if t else "- |"))
    if dense:
        lines += ["", "| dense group | untuned ms | tuned ms | untuned GB/s | tuned GB/s "
                  "| tuned of memory bandwidth | tuned of same-size stream |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for k, t in dense:
            gbs = 2 * k["gflops"]
            tuned_gbs = 2 * t["gflops"] if t else None
            lines.append(f"| {k['group']} | {k['ms_per_call']:.3f} | "
                         + (f"{t['ms_per_call']:.3f} | " if t else "- | ")
                         + f"{gbs:.1f} | " + (f"{tuned_gbs:.1f} | " if t else "- | ")
                         + (f"{tuned_gbs / peak['stream_gbs']:.0%} | " if t else "- | ")
                         + (f"{tuned_gbs / cached:.0%} |" if t and cached else "- |"))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Timing

def _input(name: str, shape) -> np.ndarray:
    rng = np.random.default_rng(2019)
    if name == "dqn":   # frames in [0, 1]
        return rng.uniform(0.0, 1.0, shape).astype("float32")
    return rng.standard_normal(shape).astype("float32")


def check_agreement(engines, data, reference_key="pytorch") -> dict:
    """Run each engine once and compare its output with the reference engine's; raise naming the
    engine when they differ. Returns the largest absolute difference per engine."""
    outputs = {e.key: np.asarray(_first_output(e.run(data))) for e in engines}
    ref = outputs[reference_key]
    diffs = {}
    for e in engines:
        out = outputs[e.key]
        if out.shape != ref.shape:
            raise RuntimeError(f"{e.label}: output shape {out.shape}, {reference_key} gives {ref.shape}")
        diffs[e.key] = float(np.max(np.abs(out - ref)))
        if not np.allclose(out, ref, rtol=RTOL, atol=ATOL * float(np.max(np.abs(ref)))):
            raise RuntimeError(f"{e.label}: output differs from {reference_key}'s by up to "
                               f"{diffs[e.key]:.3g} (largest |output| {float(np.max(np.abs(ref))):.3g})")
    return diffs


def time_interleaved(engines, data, repeat: int, number: int, warmup: int) -> dict:
    """Per engine key: the seconds per call of each repetition, and the calls per repetition.

    ``number`` 0 picks, per engine, enough calls for a block of about ``AUTO_BLOCK_S``."""
    numbers = {}
    for e in engines:
        e.prepare()
        start = time.perf_counter()
        calls = 0
        while calls < max(1, warmup) or time.perf_counter() - start < WARMUP_S:
            e.run(data)
            calls += 1
        if number:
            numbers[e.key] = number
            continue
        # the block size from calls after the warm-up (the first calls of an engine pay for
        # its page faults and caches, and would make the blocks of a fast one far too short)
        start = time.perf_counter()
        calls = 0
        while calls < 2 or time.perf_counter() - start < PROBE_S:
            e.run(data)
            calls += 1
        per_call = (time.perf_counter() - start) / calls
        numbers[e.key] = max(1, math.ceil(AUTO_BLOCK_S / max(per_call, 1e-9)))
    times = {e.key: [] for e in engines}
    for r in range(repeat):
        order = engines[r % len(engines):] + engines[:r % len(engines)]
        for e in order:
            e.prepare()
            time.sleep(PAUSE_S)
            n = numbers[e.key]
            start = time.perf_counter()
            for _ in range(n):
                e.run(data)
            times[e.key].append((time.perf_counter() - start) / n)
    return {"times_s": times, "number": numbers}


def summarize(samples) -> dict:
    q1, median, q3 = np.percentile(samples, [25, 50, 75])
    return {"median_s": float(median), "q1_s": float(q1), "q3_s": float(q3),
            "min_s": float(min(samples)), "max_s": float(max(samples))}


# ---------------------------------------------------------------------------------------------
# The machine and the table

def machine() -> dict:
    info = {"python": platform.python_version(), "platform": platform.platform(),
            "cores": os.cpu_count(), "cpu": platform.processor() or "unknown", "avx512f": False}
    try:
        text = Path("/proc/cpuinfo").read_text()
        for line in text.splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                info["avx512f"] = "avx512f" in line.split()
                break
    except OSError:
        pass
    return info


def versions() -> dict:
    import onnxruntime
    import torch

    import relaybench
    return {"relaybench": relaybench.__version__, "numpy": np.__version__, "torch": torch.__version__,
            "onnxruntime": onnxruntime.__version__}


def _load() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


def table(rows) -> str:
    """A Markdown table: one row per model and thread count, each engine's median in ms with its
    interquartile range as +-half of it in %, and each engine's speed relative to PyTorch eager."""
    labels = []
    for row in rows:
        for key, res in row["engines"].items():
            if (key, res["label"]) not in labels:
                labels.append((key, res["label"]))
    head = ["model", "threads"] + [f"{label} (ms)" for _, label in labels]
    head += [f"{label} vs PyTorch" for key, label in labels if key != "pytorch"]
    relay = [(key, label) for key, label in labels if key.startswith("relaybench")]
    head += [f"{label} time / ONNX Runtime's" for _, label in relay]
    rule = ["---", "---:"] + ["---:"] * (len(head) - 2)
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join(rule) + " |"]
    for row in rows:
        cells = [row["label"], str(row["threads"])]
        engines = row["engines"]
        for key, label in labels:
            res = engines.get(key)
            if res is None or res["label"] != label:
                cells.append("")
                continue
            half_iqr = (res["q3_s"] - res["q1_s"]) / 2 / res["median_s"] * 100
            cells.append(f"{res['median_s'] * 1e3:.2f} ±{half_iqr:.0f}%")
        torch_median = engines["pytorch"]["median_s"]
        for key, label in labels:
            if key == "pytorch":
                continue
            res = engines.get(key)
            ok = res is not None and res["label"] == label
            cells.append(f"{torch_median / res['median_s']:.2f}x" if ok else "")
        ort = engines.get("onnxruntime")
        for key, label in relay:
            res = engines.get(key)
            ok = ort is not None and res is not None and res["label"] == label
            cells.append(f"{res['median_s'] / ort['median_s']:.2f}" if ok else "")
        lines.append("| " + " | ".join(cells) + " |")
    handoffs = [f"{row['label']} {row['threads']} threads {row['handoff_ns'][0]:.0f} / "
                f"{row['handoff_ns'][1]:.0f} ns" for row in rows if row.get("handoff_ns")]
    if handoffs:
        lines += ["", "Round trip of a cache line between two threads before / after each "
                  "multi-thread timing (`peak.handoff_ns`; hundreds of ns: the host ran the "
                  "two cores far apart): " + "; ".join(handoffs) + "."]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------

def run_model(tm, name: str, threads_list, repeat: int, number: int, warmup: int, workdir: Path,
              tuning_log=None) -> list:
    import relaybench as rb
    from peak import handoff_ns   # bench/peak.py
    label, shape, kwargs = MODELS[name]
    print(f"{label}: building the models", flush=True)
    mod, params = getattr(rb.models, name)(batch_size=shape[0], image_shape=shape[1:], **kwargs)
    data = _input(name, shape)
    net = tm.load_params(tm.build(name, image_shape=shape[1:], **kwargs), params)
    onnx_path = tm.export_onnx(net, data, workdir / f"{name}.onnx")
    compile_times = relaybench_compile_times(name)
    rows = []
    for threads in threads_list:
        engines = [torch_engine(net, threads), onnxruntime_engine(onnx_path, threads),
                   relaybench_engine(mod, params, threads)]
        if tuning_log:
            engines.append(relaybench_engine(mod, params, threads, tuning_log))
        diffs = check_agreement(engines, data)
        handoff = [handoff_ns()] if threads > 1 else []
        timed = time_interleaved(engines, data, repeat, number, warmup)
        if handoff:
            handoff.append(handoff_ns())
        row = {"model": name, "label": label, "threads": threads, "input_shape": list(shape),
               "engines": {}, "load": _load()}
        if handoff:
            row["handoff_ns"] = handoff
        for e in engines:
            row["engines"][e.key] = dict(label=e.label, setup_s=e.setup_s,
                                         max_abs_diff_vs_pytorch=diffs[e.key],
                                         number=timed["number"][e.key], times_s=timed["times_s"][e.key],
                                         **summarize(timed["times_s"][e.key]), **e.info)
        if compile_times is not None:
            row["engines"]["relaybench"]["compile_s"] = compile_times
        lib = row["engines"]["relaybench"].pop("module", None)
        tuned_lib = row["engines"].get("relaybench_tuned", {}).pop("module", None)
        if lib is not None:
            from peak import fma_peak, sgemm_rate   # bench/peak.py
            fma = fma_peak(threads)
            sgemm = sgemm_rate(threads, set_threads=numpy_blas_threads())
            row["peak"] = {"fma_gflops": fma, "sgemm_gflops": sgemm,
                           "stream_gbs": memory_bandwidth(threads)}
            row["kernels"] = kernel_profile(lib, data, fma, sgemm)
            # a batch-1 dense layer's weight bytes: 4 per multiply-add, 2 flops
            weights = [2 * k["gflops"] * k["ms_per_call"] * 1e6 for k in row["kernels"]
                       if "dense" in k["rule"]]
            if weights:
                row["peak"]["cache_gbs"] = memory_bandwidth(threads, int(max(weights)) // 4)
            if tuned_lib is not None:
                row["kernels_tuned"] = kernel_profile(tuned_lib, data, fma, sgemm)
        rows.append(row)
        medians = ", ".join(f"{e.label} {row['engines'][e.key]['median_s'] * 1e3:.2f} ms" for e in engines)
        print(f"  {threads} thread(s): {medians}" + (
            f" (handoff {handoff[0]:.0f} / {handoff[1]:.0f} ns before / after)" if handoff
            else ""), flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated, from: " + ", ".join(MODELS))
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--repeat", type=int, default=15, help="interleaved repetitions per engine")
    ap.add_argument("--number", type=int, default=0,
                    help=f"calls per repetition (0: enough for about {AUTO_BLOCK_S} s per block)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls per engine before timing")
    ap.add_argument("--out", default=str(HERE / "out"), help="folder for the JSON of raw timings")
    ap.add_argument("--quick", action="store_true", help="a small run: --repeat 5 --number 1 --warmup 1")
    ap.add_argument("--tuning-log", default="shipped",
                    help="tuning log(s) for the 'relaybench tuned' column, comma-separated: "
                         "'shipped' (relaybench/autotune/logs), paths, or 'none' (no tuned column)")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeat, args.number, args.warmup = 5, 1, 1
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; available: {', '.join(MODELS)}")
    threads_list = [int(t) for t in args.threads.split(",")]
    if any(t < 1 for t in threads_list) or args.repeat < 1 or args.number < 0:
        ap.error("--threads must be positive, --repeat at least 1, --number at least 0")

    if args.tuning_log == "none":
        tuning_log = None
    elif args.tuning_log == "shipped":
        from relaybench.autotune import shipped_logs
        tuning_log = shipped_logs() or None
    else:
        tuning_log = [Path(p) for p in args.tuning_log.split(",") if p.strip()]
    print(f"tuning logs: {', '.join(str(p) for p in tuning_log) if tuning_log else 'none'}")

    tm = _load_torch_models()
    import torch
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:   # already set, or parallel work already started
        pass

    load_start = _load()
    print(f"load average at start: {load_start}")
    mach, vers = machine(), versions()
    print(f"machine: {mach['cpu']}, {mach['cores']} cores, AVX-512 {'yes' if mach['avx512f'] else 'no'}; "
          + ", ".join(f"{k} {v}" for k, v in vers.items()))
    print(f"repeat {args.repeat}, number {args.number or 'auto'}, warmup {args.warmup}", flush=True)

    started = time.strftime("%Y%m%d-%H%M%S")
    rows = []
    with tempfile.TemporaryDirectory(prefix="rb-vision-onnx-") as workdir:
        for name in names:
            rows += run_model(tm, name, threads_list, args.repeat, args.number, args.warmup,
                              Path(workdir), tuning_log)
    load_end = _load()

    print()
    print(table(rows))
    compiled = [r for r in rows if "compile_s" in r["engines"]["relaybench"]]
    if compiled:
        print()
        print("| model | relaybench compile, cold (s) | cached (s) |")
        print("| --- | ---: | ---: |")
        seen = set()
        for r in compiled:
            if r["model"] not in seen:
                seen.add(r["model"])
                c = r["engines"]["relaybench"]["compile_s"]
                print(f"| {r['label']} | {c['cold']:.2f} | {c['cached']:.2f} |")
    for r in rows:
        if not r.get("kernels"):
            continue
        print()
        print(layer_tables(r))
    print()
    print(f"load average at end: {load_end}")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"vision-{started}.json"
    record = {"started": started, "machine": mach, "versions": vers, "load_average_start": load_start,
              "load_average_end": load_end,
              "settings": {"repeat": args.repeat, "number": args.number, "warmup": args.warmup,
                           "threads": threads_list, "pause_s": PAUSE_S, "rtol": RTOL, "atol": ATOL},
              "results": rows}
    path.write_text(json.dumps(record, indent=1))
    print(f"raw timings: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
