"""The ONNX backend node tests: relaybench's pass rate beside ONNX Runtime's on the same cases.

    python bench/onnx_conformance.py [--pattern 'test_*'] [--target interpreter|llvm]
                                     [--reasons 25] [--out bench/out] [--markdown]

Every case of ``onnx/backend/test/data/node`` (the ``onnx`` wheel installed: 1.22.0 here) is run
by both engines and judged by one function (:func:`relaybench.frontends.onnx.backend.run_case`:
the case's rtol/atol, dtypes and shapes exact). Cases are counted by category (``float``,
``integer``, ``boolean`` by the first output's dtype; ``other`` for strings, sequences,
optionals, float8, 4- and 2-bit types, bfloat16), and each engine's failures by reason: an op it
does not implement, a dtype it does not take, an import or run error, a wrong result.

ONNX Runtime runs each model in an ``InferenceSession`` on the CPU execution provider;
relaybench imports it with ``rb.frontends.from_onnx`` and runs it on the reference interpreter
(``--target interpreter,llvm``: also compiled by ``rb.build``, a column of its own; a
case whose build fails counts as an error of that column).
Writes every case's status to ``OUT/onnx_conformance-<time>.json``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from relaybench.frontends.onnx import backend as B  # noqa: E402

CATEGORIES = ("float", "integer", "boolean", "other")

#: Cases whose LLVM build crashes the process (LLVM lowers a float64 -> float16 ``fptrunc`` to a
#: runtime-library call the JIT does not resolve); counted as errors of the llvm column unrun.
LLVM_CRASHES = {"test_cast_DOUBLE_to_FLOAT16", "test_castlike_DOUBLE_to_FLOAT16",
                "test_castlike_DOUBLE_to_FLOAT16_expanded"}


class _OrtRep:
    def __init__(self, model):
        import onnxruntime as ort
        opts = ort.SessionOptions()
        opts.log_severity_level = 4
        self.session = ort.InferenceSession(model.SerializeToString(), opts,
                                            providers=["CPUExecutionProvider"])
        self.names = [i.name for i in self.session.get_inputs()]

    def run(self, inputs):
        return self.session.run(None, dict(zip(self.names, inputs)))


def _ort_reason(err: BaseException) -> str:
    text = str(err)
    for marker in ("NOT_IMPLEMENTED", "INVALID_GRAPH", "INVALID_ARGUMENT", "FAIL",
                   "RUNTIME_EXCEPTION", "NO_SUCHFILE", "INVALID_PROTOBUF"):
        if marker in text:
            if "Could not find an implementation" in text:
                return "NOT_IMPLEMENTED: no kernel for this op and type"
            return marker
    return type(err).__name__


def _relaybench(target: str):
    def prepare(model):
        return B.RelaybenchBackend.prepare(model, target=target)
    return prepare


def run(pattern: str = "test_*", targets=("interpreter",), ort: bool = True):
    """``{engine: {case: (status, reason)}}``, ``{case: category}`` and seconds per engine;
    the engines are relaybench on each target (``relaybench`` for the interpreter,
    ``relaybench-llvm`` ...) and ONNX Runtime."""
    import onnx
    cases = B.node_cases(pattern)
    categories = {name: B.categorize(onnx.load(os.path.join(d, "model.onnx"))) for name, d in cases}
    results: dict = {}
    seconds: dict = {}
    engines = [("relaybench" if t == "interpreter" else f"relaybench-{t}", t) for t in targets]
    if ort:
        engines.append(("onnxruntime", None))
    for engine, target in engines:
        start = time.perf_counter()
        if target is not None:
            prepare, reason = _relaybench(target), None
        else:
            prepare, reason = _OrtRep, _ort_reason
        results[engine] = {}
        for name, d in cases:
            if target == "llvm" and name in LLVM_CRASHES:
                results[engine][name] = ("error", "not run: the compiled float64 -> float16 cast "
                                                  "crashes the process")
                continue
            results[engine][name] = B.run_case(name, d, prepare, reason)
        seconds[engine] = time.perf_counter() - start
    return results, categories, seconds


def table(results: dict, categories: dict) -> str:
    engines = list(results)
    lines = ["| category | cases | " + " | ".join(f"{e} passed" for e in engines) + " |",
             "| --- | ---: | " + " | ".join("---:" for _ in engines) + " |"]
    for cat in CATEGORIES + ("all",):
        names = [n for n, c in categories.items() if cat == "all" or c == cat]
        cells = []
        for e in engines:
            passed = sum(results[e][n][0] == "pass" for n in names)
            cells.append(f"{passed} ({100 * passed / max(len(names), 1):.1f}%)")
        lines.append(f"| {cat} | {len(names)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def reasons(results: dict, categories: dict, top: int) -> str:
    out = []
    for engine, res in results.items():
        counts = collections.Counter()
        for name, (status, why) in res.items():
            if status != "pass":
                match = re.search(r"element type (\w+) is not supported", why)
                if match:           # one line per dtype, not per input name
                    why = f"dtype {match.group(1)} is not supported"
                counts[(categories[name], status, why)] += 1
        out.append(f"\n{engine}: {sum(counts.values())} not passed, by reason")
        for (cat, status, why), n in counts.most_common(top):
            out.append(f"  {n:4d}  {cat:8s} {status:5s} {why}")
    return "\n".join(out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pattern", default="test_*")
    parser.add_argument("--target", default="interpreter",
                        help="relaybench's targets, comma-separated (interpreter, llvm)")
    parser.add_argument("--reasons", type=int, default=25)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "out"))
    args = parser.parse_args(argv)
    import onnx
    targets = tuple(args.target.split(","))
    results, categories, seconds = run(args.pattern, targets)
    print(f"onnx {onnx.__version__}, {len(categories)} node cases; relaybench on {args.target}")
    try:
        import onnxruntime
        print(f"onnxruntime {onnxruntime.__version__}")
    except ImportError:
        pass
    print(table(results, categories))
    print("seconds: " + ", ".join(f"{e} {s:.1f}" for e, s in seconds.items()))
    print(reasons(results, categories, args.reasons))
    first = next(iter(results))
    both = {n for n in categories if categories[n] != "other"
            and results["onnxruntime"][n][0] == "pass" and results[first][n][0] != "pass"}
    if both:
        print(f"\npassed by onnxruntime, not by {first} ({len(both)}): " + ", ".join(sorted(both)))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"onnx_conformance-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump({"categories": categories, "results": results, "seconds": seconds}, f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
