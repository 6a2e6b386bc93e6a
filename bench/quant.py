"""int8 against float32, relaybench against ONNX Runtime: the quantization benchmark.

    python bench/quant.py [--models resnet18,mobilenet_v2] [--threads 1,2] [--repeat 15]
                          [--number 0] [--calibration 16] [--out bench/out] [--quick]

ResNet-18 and MobileNet V2 (1x3x224x224, batch 1, the zoo's seeded random weights), five engines
computing the same network, interleaved in one run (``bench/vision.py``'s timing: each
repetition runs every engine once, starting from a different one, with a pause between engines):

* relaybench fp32: ``rb.build(mod, target="llvm", params=params, opt_level=3)``.
* relaybench int8: ``rb.quantize.quantize`` under Relay's default qconfig (8-bit inputs and
  weights, int32 accumulation, the first convolution and the dense layer left in float32), with
  ``calibrate_mode="max"`` on the calibration images, then the same ``rb.build``.
* relaybench int8, all layers: the same with ``skip_conv_layers=None, skip_dense_layer=False``,
  every convolution and the dense layer in int8, as ONNX Runtime's quantizer does.
* ONNX Runtime fp32: the ONNX file exported from the PyTorch twin (``bench/torch_models.py``)
  with the zoo's weights loaded.
* ONNX Runtime int8: ``onnxruntime.quantization.quantize_static`` of that file after its
  ``quant_pre_process``: QDQ format, uint8 activations and int8 weights, per-tensor scales (like
  relaybench's), MinMax calibration on the same calibration images.

The int8 engines are not expected to agree with float32 to float tolerances: each one's output is
compared with its own family's float32 output on the calibration-free test images, as the
signal-to-quantization-noise ratio (SQNR, dB) and top-1 agreement, and both are printed next to
the timings. The float32 engines must agree with each other as in ``bench/vision.py``.

Threads: ONNX Runtime's ``intra_op_num_threads`` (sequential execution); relaybench's
``num_threads``. Writes every raw timing to ``OUT/quant-<time>.json``. Needs the bench extra:
``pip install -e '.[bench]'``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:   # bench/vision.py
    sys.path.insert(0, str(HERE))

import vision  # noqa: E402

MODELS = {
    "resnet18": ("ResNet-18", (1, 3, 224, 224)),
    "mobilenet_v2": ("MobileNet V2", (1, 3, 224, 224)),
}

ENGINES = ("rb_fp32", "rb_int8", "rb_int8_all", "ort_fp32", "ort_int8")
LABELS = {"rb_fp32": "relaybench fp32", "rb_int8": "relaybench int8",
          "rb_int8_all": "relaybench int8 (all layers)", "ort_fp32": "ONNX Runtime fp32",
          "ort_int8": "ONNX Runtime int8"}
FAMILY = {"rb_int8": "rb_fp32", "rb_int8_all": "rb_fp32", "ort_int8": "ort_fp32"}


def images(shape, count: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype("float32") for _ in range(count)]


def sqnr_db(reference: np.ndarray, approx: np.ndarray) -> float:
    """10 log10(signal power / noise power); infinite when the two are equal."""
    reference = np.asarray(reference, "float64")
    noise = float(np.sum((reference - np.asarray(approx, "float64")) ** 2))
    signal = float(np.sum(reference ** 2))
    return float("inf") if noise == 0 else 10.0 * np.log10(signal / noise)


# ---------------------------------------------------------------------------------------------
# The engines

def relaybench_engine(key: str, mod, params, threads: int) -> vision.Engine:
    import relaybench as rb
    start = time.perf_counter()
    lib = rb.build(mod, target="llvm", params=params, opt_level=3, num_threads=threads)
    setup = time.perf_counter() - start
    name = lib.input_names[0]

    def run(data):
        return vision._first_output(lib.run(**{name: data}))

    return vision.Engine(key, LABELS[key], run, setup_s=setup, info={"module": lib})


def quantized(mod, params, calibration: list, all_layers: bool):
    import relaybench as rb
    knobs = {"calibrate_mode": "max"}
    if all_layers:
        knobs.update(skip_conv_layers=None, skip_dense_layer=False)
    name = mod["main"].params[0].name_hint
    with rb.quantize.qconfig(**knobs):
        return rb.quantize.quantize(mod, params, dataset=[{name: x} for x in calibration])


def onnxruntime_int8(onnx_path: str, calibration: list, workdir: Path) -> str:
    """The path of ``onnx_path`` statically quantized by ONNX Runtime's own tools (QDQ)."""
    import onnx
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process

    model = onnx.load(onnx_path)
    input_name = model.graph.input[0].name

    class Reader(CalibrationDataReader):
        def __init__(self):
            self._items = iter(calibration)

        def get_next(self):
            item = next(self._items, None)
            return None if item is None else {input_name: item}

    prepared = str(workdir / (Path(onnx_path).stem + "-prep.onnx"))
    quant_pre_process(onnx_path, prepared)
    out = str(workdir / (Path(onnx_path).stem + "-int8.onnx"))
    quantize_static(prepared, out, Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=False)
    return out


def _kernels(lib, data) -> list:
    """The convolution and dense kernels of a relaybench module: ms per run and G(FL)OP/s."""
    rows = []
    for row in lib.profile(number=10, data=data).groups:
        if row["GFLOP/s"] != "":
            rows.append({"group": row["group"], "calls": row["calls"], "ms_per_run": row["ms/run"],
                         "gops": float(row["GFLOP/s"])})
    return rows


# ---------------------------------------------------------------------------------------------

def run_model(tm, name: str, threads_list, args, workdir: Path) -> list:
    import relaybench as rb
    label, shape = MODELS[name]
    print(f"{label}: building the models", flush=True)
    mod, params = rb.models.get(name)
    calibration = images(shape, args.calibration, seed=7)
    tests = images(shape, args.tests, seed=2019)
    net = tm.load_params(tm.build(name, image_shape=shape[1:]), params)
    onnx_fp32 = tm.export_onnx(net, tests[0], workdir / f"{name}.onnx")
    start = time.perf_counter()
    onnx_int8 = onnxruntime_int8(onnx_fp32, calibration, workdir)
    ort_quantize_s = time.perf_counter() - start
    start = time.perf_counter()
    qmods = {"rb_int8": quantized(mod, params, calibration, all_layers=False),
             "rb_int8_all": quantized(mod, params, calibration, all_layers=True)}
    rb_quantize_s = (time.perf_counter() - start) / 2
    rows = []
    for threads in threads_list:
        engines = [relaybench_engine("rb_fp32", mod, params, threads),
                   relaybench_engine("rb_int8", qmods["rb_int8"], None, threads),
                   relaybench_engine("rb_int8_all", qmods["rb_int8_all"], None, threads)]
        for key, path in (("ort_fp32", onnx_fp32), ("ort_int8", onnx_int8)):
            e = vision.onnxruntime_engine(path, threads)
            e.key, e.label = key, LABELS[key]
            engines.append(e)
        outputs = {e.key: [np.asarray(e.run(x), "float32") for x in tests] for e in engines}
        fp32_diff = max(float(np.max(np.abs(a - b))) for a, b in zip(outputs["rb_fp32"], outputs["ort_fp32"]))
        scale = max(float(np.max(np.abs(b))) for b in outputs["ort_fp32"])
        if fp32_diff > vision.ATOL * scale + vision.RTOL * scale:
            raise RuntimeError(f"{label}: relaybench fp32 and ONNX Runtime fp32 differ by {fp32_diff:.3g}")
        quality = {}
        for key, ref in FAMILY.items():
            got, want = np.stack(outputs[key]), np.stack(outputs[ref])
            quality[key] = {"sqnr_db": sqnr_db(want, got),
                            "top1_agreement": float(np.mean(got.argmax(-1) == want.argmax(-1)))}
        timed = vision.time_interleaved(engines, tests[0], args.repeat, args.number, args.warmup)
        row = {"model": name, "label": label, "threads": threads, "input_shape": list(shape),
               "fp32_max_abs_diff": fp32_diff, "quantize_s": {"relaybench": rb_quantize_s,
                                                              "onnxruntime": ort_quantize_s},
               "engines": {}}
        for e in engines:
            row["engines"][e.key] = dict(label=e.label, setup_s=e.setup_s,
                                         number=timed["number"][e.key], times_s=timed["times_s"][e.key],
                                         **vision.summarize(timed["times_s"][e.key]),
                                         **quality.get(e.key, {}))
            lib = e.info.get("module")
            if lib is not None and e.key != "rb_fp32":
                row["engines"][e.key]["kernels"] = _kernels(lib, tests[0])
        rows.append(row)
        print(f"  {threads} thread(s): " + ", ".join(
            f"{e.label} {row['engines'][e.key]['median_s'] * 1e3:.2f} ms" for e in engines), flush=True)
    return rows


def table(rows) -> str:
    head = (["model", "threads"] + [f"{LABELS[k]} (ms)" for k in ENGINES]
            + ["rb int8 / rb fp32", "rb int8 all / rb fp32", "rb int8 vs ORT int8",
               "rb int8 all vs ORT int8"])
    lines = ["| " + " | ".join(head) + " |", "| --- | ---: |" + " ---: |" * (len(head) - 2)]
    for row in rows:
        e = row["engines"]
        med = {k: e[k]["median_s"] for k in ENGINES}
        cells = [row["label"], str(row["threads"])]
        for k in ENGINES:
            half_iqr = (e[k]["q3_s"] - e[k]["q1_s"]) / 2 / med[k] * 100
            cells.append(f"{med[k] * 1e3:.2f} ±{half_iqr:.0f}%")
        cells += [f"{med['rb_fp32'] / med['rb_int8']:.2f}x", f"{med['rb_fp32'] / med['rb_int8_all']:.2f}x",
                  f"{med['ort_int8'] / med['rb_int8']:.2f}x", f"{med['ort_int8'] / med['rb_int8_all']:.2f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def quality_table(rows) -> str:
    lines = ["| model | engine | SQNR vs its fp32 (dB) | top-1 agreement |", "| --- | --- | ---: | ---: |"]
    seen = set()
    for row in rows:
        if row["model"] in seen:
            continue
        seen.add(row["model"])
        for key in FAMILY:
            q = row["engines"][key]
            lines.append(f"| {row['label']} | {LABELS[key]} | {q['sqnr_db']:.1f} | "
                         f"{q['top1_agreement'] * 100:.0f}% |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated, from: " + ", ".join(MODELS))
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--repeat", type=int, default=15, help="interleaved repetitions per engine")
    ap.add_argument("--number", type=int, default=0,
                    help=f"calls per repetition (0: enough for about {vision.AUTO_BLOCK_S} s per block)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls per engine before timing")
    ap.add_argument("--calibration", type=int, default=16, help="calibration images (seeded, random)")
    ap.add_argument("--tests", type=int, default=8, help="test images for SQNR and top-1 agreement")
    ap.add_argument("--out", default=str(HERE / "out"), help="folder for the JSON of raw timings")
    ap.add_argument("--quick", action="store_true",
                    help="a small run: --repeat 5 --number 1 --warmup 1 --calibration 4 --tests 2")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeat, args.number, args.warmup, args.calibration, args.tests = 5, 1, 1, 4, 2
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; available: {', '.join(MODELS)}")
    threads_list = [int(t) for t in args.threads.split(",")]
    if any(t < 1 for t in threads_list) or args.repeat < 1 or args.number < 0 or args.calibration < 1:
        ap.error("--threads must be positive, --repeat and --calibration at least 1, --number >= 0")

    tm = vision._load_torch_models()
    load_start = vision._load()
    print(f"load average at start: {load_start}")
    mach, vers = vision.machine(), vision.versions()
    print(f"machine: {mach['cpu']}, {mach['cores']} cores; " + ", ".join(f"{k} {v}" for k, v in vers.items()))
    started = time.strftime("%Y%m%d-%H%M%S")
    rows = []
    with tempfile.TemporaryDirectory(prefix="rb-quant-onnx-") as workdir:
        for name in names:
            rows += run_model(tm, name, threads_list, args, Path(workdir))
    load_end = vision._load()
    print()
    print(table(rows))
    print()
    print(quality_table(rows))
    print()
    print(f"load average at end: {load_end}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"quant-{started}.json"
    record = {"started": started, "machine": mach, "versions": vers, "load_average_start": load_start,
              "load_average_end": load_end, "settings": vars(args), "results": rows}
    path.write_text(json.dumps(record, indent=1, default=str))
    print(f"raw timings: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
