"""Compile time of the zoo's vision models: ``rb.build`` cold (empty caches), cached (the
optimized module in the build cache and every kernel in the kernel cache, from an earlier build)
and with the passes run (``RB_BUILD_CACHE=off``: the kernels cached, the passes run again), each
in fresh processes.

    python bench/compile_time.py [--models resnet18,mobilenet_v2,vgg16] [--repeat 5]

Each measurement is a new Python process that imports relaybench, makes the model (batch 1,
float32) and times one ``rb.build(mod, target="llvm", params=params)`` at the default opt level.
A cold run gets a new, empty ``RB_CACHE_DIR``; the cached runs share one that a first build
filled, the two kinds of cached run taken in turn. The table gives the median over ``--repeat`` processes of the build and of its phases,
read from the build's ``compile_stats`` (the timing the compile-time view,
:func:`relaybench.viz.compile_time`, also shows): passes (``optimize_seconds``), lowering to loop
IR, code generation and JIT (LLVM, or loading a cached kernel), and the rest (building the graph
executor: the memory plan and the kernels' bindings). ``import`` is the process's
``import relaybench`` and ``in-process`` a second build of the same model in the same process
(its kernels already loaded). The load average is printed: the numbers of a busy machine are
slower, so compare only runs made together.

A fresh process compiles relaybench's sources to bytecode unless it finds them compiled;
``--pycache DIR`` (default: a folder under the temporary directory) keeps that bytecode between
the runs, as an installed package does, even where ``PYTHONDONTWRITEBYTECODE`` is set.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import relaybench as rb
from relaybench.models import vision
t1 = time.perf_counter()
mod, params = getattr(vision, sys.argv[1])()
t2 = time.perf_counter()
lib = rb.build(mod, target="llvm", params=params)
t3 = time.perf_counter()
s = lib.compile_stats
again = None
if sys.argv[2] == "1":
    t4 = time.perf_counter()
    rb.build(mod, target="llvm", params=params)
    again = time.perf_counter() - t4
print(json.dumps({"import": t1 - t0, "build": t3 - t2, "passes": s.optimize_seconds,
                  "lower": s.lower_seconds, "codegen+jit": s.compile_seconds,
                  "executor": max(0.0, s.total_seconds - s.optimize_seconds - s.lower_seconds
                                  - s.compile_seconds),
                  "compiled": s.llvm_compiled, "from_disk": s.from_disk, "in-process": again,
                  "optimize_cached": s.optimize_cached}))
"""

COLUMNS = ("build", "passes", "lower", "codegen+jit", "executor", "import", "in-process")


def run_one(model: str, cache_dir: str, env: dict, again: bool, build_cache: bool = True) -> dict:
    env = dict(env, RB_CACHE_DIR=cache_dir, RB_BUILD_CACHE="on" if build_cache else "off")
    out = subprocess.run([sys.executable, "-c", _CHILD, model, "1" if again else "0"], env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{model}: the build failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def medians(rows: list) -> dict:
    result = {}
    for column in COLUMNS:
        values = [r[column] for r in rows if r.get(column) is not None]
        result[column] = statistics.median(values) if values else None
    return result


def measure(model: str, repeat: int, env: dict, workdir: Path) -> dict:
    cold = []
    for k in range(repeat):
        cold.append(run_one(model, str(workdir / f"{model}-cold-{k}"), env, again=False))
    shared = str(workdir / f"{model}-cached")
    run_one(model, shared, env, again=False)  # fills the cache
    cached, kernels_only = [], []
    for _ in range(repeat):      # the two kinds of cached build taken in turn
        cached.append(run_one(model, shared, env, again=True))
        kernels_only.append(run_one(model, shared, env, again=True, build_cache=False))
    for r in cached + kernels_only:
        if r["compiled"]:
            raise RuntimeError(f"{model}: a cached build compiled {r['compiled']} kernels")
    for r in cached:
        if not r["optimize_cached"]:
            raise RuntimeError(f"{model}: a cached build ran the passes")
    return {"cold": medians(cold), "cached": medians(cached), "passes run": medians(kernels_only),
            "kernels": cold[0]["compiled"]}


def table(results: dict) -> str:
    head = f"{'model':14s} {'run':10s} " + " ".join(f"{c:>11s}" for c in COLUMNS)
    lines = [head, "-" * len(head)]
    for model, r in results.items():
        for run in ("cold", "cached", "passes run"):
            cells = " ".join(f"{r[run][c]:11.3f}" if r[run][c] is not None else f"{'-':>11s}"
                             for c in COLUMNS)
            lines.append(f"{model:14s} {run:10s} {cells}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,mobilenet_v2,vgg16")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--pycache", default=str(Path(tempfile.gettempdir()) / "relaybench-pycache"))
    ap.add_argument("--json", help="also write the medians to this file")
    args = ap.parse_args(argv)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = args.pycache
    root = Path(__file__).resolve().parent.parent
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    with tempfile.TemporaryDirectory(prefix="rb-compile-time-") as tmp:
        run_one(models[0], str(Path(tmp) / "warm-up"), env, again=False)  # bytecode written
        load = os.getloadavg()
        start = time.perf_counter()
        results = {m: measure(m, args.repeat, env, Path(tmp)) for m in models}
        wall = time.perf_counter() - start
    print(f"rb.build(target='llvm'), seconds, median of {args.repeat} fresh processes; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after; {os.cpu_count()} cores; {wall:.0f} s in all")
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
