"""Whole ONNX models through ``rb.frontends.from_onnx``: imported, compiled for the CPU and
checked against PyTorch and ONNX Runtime, with compile time and speed beside ONNX Runtime's.

    python bench/onnx_models.py [--models resnet18,mobilenet_v2,vgg16,dqn,mtcnn,nudenet]
                                [--image-shape 3,224,224] [--repeat 10] [--threads 1]
                                [--markdown]

Models:

* the zoo's vision models (``resnet18``, ``mobilenet_v2``, ``vgg16``, ``dqn``): the PyTorch twin
  of ``bench/torch_models.py`` with the zoo's weights, exported to ONNX (opset 17); relaybench's
  import is compared with PyTorch's output (and with the zoo's own Relay model);
* ``mtcnn``: facenet-pytorch's MTCNN networks (PNet, RNet, ONet) with the pretrained weights its
  wheel ships, exported to ONNX; only the three networks are imported (the package's detection
  pipeline around them needs torchvision, which is not installed, so its module is stood in for
  by an empty one);
* ``nudenet``: the YOLOv8n-based detector ``320n.onnx`` that the nudenet wheel ships.

For each model: the import time, relaybench's ``rb.build(target="llvm", opt_level=3)`` time with
an empty kernel cache (cold) and ONNX Runtime's session creation time; then the outputs compared
(``|a - b| <= 1e-4 * max|b| + 1e-3 * |b|``) and both engines timed in interleaved blocks (median
of ``--repeat`` calls each). Needs the bench extra (torch, onnx, onnxruntime) and, for the
pretrained networks, ``pip install --no-deps facenet-pytorch nudenet``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
import types
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

RTOL, ATOL = 1e-3, 1e-4
ZOO = {"resnet18": (3, 224, 224), "mobilenet_v2": (3, 224, 224), "vgg16": (3, 224, 224),
       "dqn": (4, 84, 84)}
MTCNN_SHAPES = {"pnet": (1, 3, 96, 128), "rnet": (1, 3, 24, 24), "onet": (1, 3, 48, 48)}


def _torch_models():
    spec = importlib.util.spec_from_file_location("bench_torch_models", HERE / "torch_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def zoo_model(name: str, image_shape, workdir: Path):
    """``(onnx path, input, PyTorch output, zoo (mod, params))`` of a zoo model's twin."""
    import relaybench as rb
    import torch
    tm = _torch_models()
    mod, params = rb.models.get(name, image_shape=tuple(image_shape))
    net = tm.load_params(tm.build(name, image_shape=tuple(image_shape)), params)
    data = np.random.default_rng(0).uniform(-1, 1, (1,) + tuple(image_shape)).astype("float32")
    path = tm.export_onnx(net, data, workdir / f"{name}.onnx")
    with torch.inference_mode():
        expected = net(torch.from_numpy(data)).numpy()
    return path, data, expected, (mod, params)


def load_mtcnn():
    """facenet-pytorch's ``models/mtcnn.py`` (PNet, RNet, ONet), without its detection
    pipeline."""
    spec = importlib.util.find_spec("facenet_pytorch")
    if spec is None:
        raise SystemExit("mtcnn needs facenet-pytorch: pip install --no-deps facenet-pytorch")
    root = Path(spec.submodule_search_locations[0])
    # the networks' module imports the detection pipeline (torchvision); stand in for it
    for name in ("facenet_pytorch", "facenet_pytorch.models", "facenet_pytorch.models.utils"):
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(root / Path(*name.split(".")[1:]))]
        sys.modules.setdefault(name, pkg)
    stub = types.ModuleType("facenet_pytorch.models.utils.detect_face")
    stub.detect_face = stub.extract_face = None
    sys.modules.setdefault("facenet_pytorch.models.utils.detect_face", stub)
    mspec = importlib.util.spec_from_file_location("facenet_pytorch.models.mtcnn",
                                                   root / "models" / "mtcnn.py")
    mtcnn = importlib.util.module_from_spec(mspec)
    mspec.loader.exec_module(mtcnn)
    return mtcnn


def mtcnn_models(workdir: Path) -> list:
    """``[(name, onnx path, input)]`` of facenet-pytorch's pretrained PNet, RNet and ONet."""
    import torch
    mtcnn = load_mtcnn()
    out = []
    for name, cls in (("pnet", mtcnn.PNet), ("rnet", mtcnn.RNet), ("onet", mtcnn.ONet)):
        net = cls(pretrained=True).eval()
        shape = MTCNN_SHAPES[name]
        data = np.random.default_rng(1).uniform(-1, 1, shape).astype("float32")
        path = str(workdir / f"mtcnn_{name}.onnx")
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.onnx.export(net, (torch.from_numpy(data),), path, opset_version=17,
                              input_names=["data"], dynamo=False)
        out.append((f"mtcnn_{name}", path, data))
    return out


def nudenet_model() -> tuple:
    spec = importlib.util.find_spec("nudenet")
    if spec is None:
        raise SystemExit("nudenet needs the nudenet wheel: pip install --no-deps nudenet")
    path = Path(spec.submodule_search_locations[0]) / "320n.onnx"
    data = np.random.default_rng(2).uniform(0, 1, (1, 3, 320, 320)).astype("float32")
    return "nudenet_320n", str(path), data


def agree(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and bool(np.all(np.abs(a - b) <= ATOL * np.abs(b).max() + RTOL * np.abs(b)))


def measure(name: str, path: str, data: np.ndarray, threads: int, repeat: int, expected=None,
            zoo=None) -> dict:
    """Import, build, compare and time one ONNX file against ONNX Runtime."""
    import onnx
    import onnxruntime as ort

    import relaybench as rb
    model = onnx.load(path)
    input_name = [i.name for i in model.graph.input
                  if i.name not in {t.name for t in model.graph.initializer}][0]
    start = time.perf_counter()
    mod, params = rb.frontends.from_onnx(model, shape={input_name: data.shape})
    import_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as cache, rb.config.Context(RB_CACHE_DIR=cache):
        start = time.perf_counter()
        lib = rb.build(mod, target="llvm", params=params, opt_level=3, num_threads=threads)
        build_s = time.perf_counter() - start
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    start = time.perf_counter()
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    ort_setup_s = time.perf_counter() - start

    def run_rb():
        out = lib.run(**{input_name: data})
        return list(out) if isinstance(out, (list, tuple)) else [out]

    def run_ort():
        return session.run(None, {input_name: data})

    got, ref = run_rb(), run_ort()
    row = {"model": name, "input": list(data.shape), "ops": len(model.graph.node),
           "import_s": import_s, "build_s": build_s, "ort_setup_s": ort_setup_s,
           "agrees_with_ort": all(agree(g, r) for g, r in zip(got, ref)) and len(got) == len(ref),
           "max_abs_diff_vs_ort": max(float(np.abs(np.asarray(g) - r).max()) for g, r in zip(got, ref))}
    if expected is not None:
        row["agrees_with_pytorch"] = agree(got[0], expected)
        row["max_abs_diff_vs_pytorch"] = float(np.abs(got[0] - expected).max())
    if zoo is not None:
        zmod, zparams = zoo
        zlib = rb.build(zmod, target="llvm", params=zparams, opt_level=3, num_threads=threads)
        zname = zlib.input_names[0]
        zout = zlib.run(**{zname: data})
        row["agrees_with_zoo"] = agree(got[0], zout)
    times = {"relaybench": [], "onnxruntime": []}
    for r in range(repeat):
        order = [("relaybench", run_rb), ("onnxruntime", run_ort)]
        for key, fn in (order if r % 2 == 0 else order[::-1]):
            start = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - start)
            time.sleep(0.05)
    row["relaybench_ms"] = 1e3 * float(np.median(times["relaybench"]))
    row["onnxruntime_ms"] = 1e3 * float(np.median(times["onnxruntime"]))
    return row


def table(rows) -> str:
    lines = ["| model | ONNX nodes | import s | relaybench build s (cold) | ORT session s | agrees | "
             "relaybench ms | ORT ms |",
             "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]
    for r in rows:
        checks = [f"ORT {'yes' if r['agrees_with_ort'] else 'NO'} ({r['max_abs_diff_vs_ort']:.1e})"]
        if "agrees_with_pytorch" in r:
            checks.append(f"PyTorch {'yes' if r['agrees_with_pytorch'] else 'NO'}")
        if "agrees_with_zoo" in r:
            checks.append(f"zoo {'yes' if r['agrees_with_zoo'] else 'NO'}")
        shape = "x".join(str(d) for d in r["input"])
        lines.append(f"| {r['model']} ({shape}) | {r['ops']} | {r['import_s']:.2f} | {r['build_s']:.1f} | "
                     f"{r['ort_setup_s']:.2f} | {', '.join(checks)} | {r['relaybench_ms']:.2f} | "
                     f"{r['onnxruntime_ms']:.2f} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,mobilenet_v2,vgg16,dqn,mtcnn,nudenet")
    parser.add_argument("--image-shape", default=None,
                        help="C,H,W for the zoo's image models (default: their own)")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "1")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for name in args.models.split(","):
            print(f"{name} ...", file=sys.stderr, flush=True)
            if name in ZOO:
                shape = ZOO[name]
                if args.image_shape and name != "dqn":
                    shape = tuple(int(d) for d in args.image_shape.split(","))
                path, data, expected, zoo = zoo_model(name, shape, workdir)
                rows.append(measure(name, path, data, args.threads, args.repeat, expected, zoo))
            elif name == "mtcnn":
                for sub, path, data in mtcnn_models(workdir):
                    rows.append(measure(sub, path, data, args.threads, args.repeat))
            elif name == "nudenet":
                sub, path, data = nudenet_model()
                rows.append(measure(sub, path, data, args.threads, args.repeat))
            else:
                raise SystemExit(f"unknown model {name!r}")
            print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    print(f"threads={args.threads}, repeat={args.repeat}")
    print(table(rows))
    return rows


if __name__ == "__main__":
    main()
