"""A short correctness and timing check of the OpenCL target on a GPU machine.

    python bench/gpu.py                       # opencl -device=gpu, 224x224 images
    python bench/gpu.py --target "opencl -device=cpu" --small   # a smoke run on PoCL

What it does, printing a short report:

1. lists the OpenCL platforms and devices. When no GPU platform is seen but NVIDIA's OpenCL
   library is installed, the usual cause is a missing ICD file (``/etc/OpenCL/vendors/
   nvidia.icd``, one line: ``libnvidia-opencl.so.1``); the script then writes such a file in a
   folder of its own and points ``OCL_ICD_VENDORS`` at it (no root needed), before pyopencl
   is imported;
2. builds DQN, ResNet-18, MobileNet V2 and VGG-16 (batch 1, float32, the zoo's seeded weights)
   for the target at opt_level 3;
3. checks each output against the reference interpreter (DQN always; the larger models when
   PyTorch is absent or ``--interpreter`` is given) and, when PyTorch is importable, against
   PyTorch on the same weights (CUDA when present, TF32 off for the comparison);
4. times relaybench end to end (inputs in, kernels, outputs out, on the host's clock) and the
   device time of the same runs (the kernels' OpenCL profiling events, summed per run: what the
   GPU spent computing, without launch gaps or copies), and PyTorch eager on CUDA (its default
   settings), interleaved in blocks;
5. profiles each model (``--profile N``): the N groups that take the most device time, each
   with its event time and GFLOP/s, and the copies in and out.

``--conv direct,tiled`` builds each model once per convolution schedule (``RB_GPU_CONV``:
``direct``, ``splitk``, ``tiled``, ``blocked``, ``winograd`` or ``auto``), checks each build and times them in the same interleaved
blocks, so one run compares the schedules on the same device; the report has a row per model
and schedule, the profile's rule column says which schedule each group ran
(``conv2d_tiled``, ``direct_splitk``, ...), and a table per model puts each convolution layer's time
under every schedule side by side, with its shapes and the fastest. The default is ``auto``,
one build per model.

    python bench/gpu.py --conv direct,tiled --models resnet18 vgg16

Exits 1 when any model mismatches or fails to build, 2 when no device matches the target. Needs
numpy and pyopencl (and, optionally, torch); the relaybench tree is found next to this file.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import numpy as np  # noqa: E402

MODELS = ("dqn", "resnet18", "mobilenet_v2", "vgg16")
_NVIDIA_LIBRARY = "libnvidia-opencl.so.1"


def _find_nvidia_library():
    patterns = ["/usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1*", "/usr/lib64/libnvidia-opencl.so.1*",
                "/usr/lib/libnvidia-opencl.so.1*", "/usr/local/nvidia/lib64/libnvidia-opencl.so.1*",
                "/usr/local/cuda*/lib64/libnvidia-opencl.so.1*"]
    for pattern in patterns:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def ensure_nvidia_icd() -> str:
    """Before pyopencl is imported: point the ICD loader at NVIDIA's library when it is installed
    but no ICD file names it. Returns what was done, for the report."""
    if os.environ.get("OCL_ICD_VENDORS"):
        return f"OCL_ICD_VENDORS={os.environ['OCL_ICD_VENDORS']} (given)"
    vendors = Path("/etc/OpenCL/vendors")
    icds = sorted(vendors.glob("*.icd")) if vendors.is_dir() else []
    if any("nvidia" in p.read_text(errors="ignore").lower() for p in icds):
        return f"NVIDIA ICD file present in {vendors}"
    library = _find_nvidia_library()
    if library is None:
        return "no NVIDIA OpenCL library found (no GPU driver, or not an NVIDIA machine)"
    folder = Path(tempfile.mkdtemp(prefix="rb-icd-"))
    (folder / "nvidia.icd").write_text(_NVIDIA_LIBRARY + "\n")
    for icd in icds:   # keep the other vendors (PoCL) visible too
        (folder / icd.name).write_text(icd.read_text())
    os.environ["OCL_ICD_VENDORS"] = str(folder)
    return (f"{library} found but no ICD file named it: wrote {folder}/nvidia.icd and set "
            f"OCL_ICD_VENDORS (as root, `echo {_NVIDIA_LIBRARY} > /etc/OpenCL/vendors/nvidia.icd` "
            "makes it permanent)")


def load_torch():
    try:
        import torch
    except ImportError:
        return None, None
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_torch_models", HERE / "torch_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return torch, module


def model(name: str, small: bool):
    import relaybench as rb
    kwargs = {}
    if small and name != "dqn":
        kwargs = {"image_shape": (3, 32, 32), "num_classes": 10}
    elif small:
        kwargs = {"image_shape": (4, 44, 44)}
    mod, params = rb.models.get(name, **kwargs)
    return mod, params, kwargs


def compare(got, want, what: str) -> tuple:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return False, f"{what}: shape {got.shape} vs {want.shape}"
    scale = max(float(np.abs(want).max()), 1e-30)
    err = float(np.abs(got - want).max()) / scale
    return err <= 2e-3, f"{what}: max error {err:.1e} of the largest output"


def time_block(fn, number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) * 1e3 / number


def slowest_groups(profile, count: int) -> str:
    """The ``count`` groups of ``profile`` with the most device time per run, as a table, and
    the profile's note (device and copy times of a run)."""
    from relaybench.viz import Table
    rows = sorted(profile.groups, key=lambda r: -r["ms/run"])[:count]
    keep = ("group", "rule", "calls", "ms/call", "ms/run", "%", "GFLOP/s", "launch ms")
    table = Table([{k: r.get(k, "") for k in keep} for r in rows])
    return f"{table}\n{getattr(profile, 'note', '')}".rstrip()


def _conv_kernels(lib) -> list:
    """The convolution groups of a build, in the graph's order (a Winograd group included:
    its name holds ``conv2d`` too; its weight transforms, folded, are not kernels)."""
    return [k for k in lib.kernels
            if "conv2d" in k.name and "winograd_weight_transform" not in k.name]


def layer_table(libs: dict, profiles: dict) -> str:
    """Each convolution group of a model timed under every schedule built (``--conv``), side by
    side: its input and weight shapes, the ms per call of each schedule (its profiling events)
    and which was fastest; the rows a per-layer rule for ``auto`` is read from. The builds'
    convolution groups are matched by their position in the graph (fusion does not depend on
    the schedule; Winograd's groups have names of their own)."""
    from relaybench.viz import Table
    modes = list(profiles)
    per_mode = {m: {r["group"]: r for r in profiles[m].groups} for m in modes}
    convs = {m: _conv_kernels(libs[m][0]) for m in modes}
    rows = []
    for index, kernel in enumerate(convs[modes[0]]):
        types = kernel.input_types
        shapes = [tuple(int(d) for d in t.shape) for t in types[:2]]
        row = {"group": kernel.name, "data": "x".join(map(str, shapes[0])),
               "weight": "x".join(map(str, shapes[1])) if len(shapes) > 1 else "",
               "MFLOP": round(kernel.flops / 1e6, 1)}
        times = {}
        for mode in modes:
            if index >= len(convs[mode]):
                continue
            found = per_mode[mode].get(convs[mode][index].name)
            if found is not None:
                times[mode] = found["ms/call"]
                row[f"{mode} ms"] = found["ms/call"]
        if times:
            row["best"] = min(times, key=times.get)
        rows.append(row)
    return str(Table(rows)) if rows else "(no convolution groups)"


def conv_modes(text: str) -> list:
    """``--conv``'s value: RB_GPU_CONV values, comma-separated, each once."""
    from relaybench.backends.strategy.gpu import CONV_MODES
    modes = list(dict.fromkeys(m.strip().lower() for m in text.split(",") if m.strip()))
    wrong = [m for m in modes if m not in CONV_MODES]
    if not modes or wrong:
        raise argparse.ArgumentTypeError(f"--conv {text!r}: expected some of "
                                         f"{', '.join(CONV_MODES)}, comma-separated")
    return modes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="opencl -device=gpu")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--small", action="store_true", help="32x32 images (a quick smoke run)")
    parser.add_argument("--interpreter", action="store_true",
                        help="check every model against the interpreter (slow at 224x224)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--number", type=int, default=10)
    parser.add_argument("--profile", type=int, default=5, metavar="N",
                        help="print the N groups with the most device time (0: none)")
    parser.add_argument("--conv", default="auto", type=conv_modes,
                        help="convolution schedules to build and time, comma-separated "
                             "(RB_GPU_CONV values: direct, splitk, tiled, blocked, winograd, "
                             "auto)")
    args = parser.parse_args(argv)

    print("== OpenCL")
    print("icd:", ensure_nvidia_icd())
    import relaybench as rb
    from relaybench.backends.opencl import devices_text, get_device
    from relaybench.errors import CompileError
    print(devices_text())
    try:
        device = get_device(args.target)
    except CompileError as err:
        print(f"FAIL: {err}")
        return 2
    print(f"target {args.target!r} -> {device.name}")
    torch, twins = load_torch()
    cuda = torch is not None and torch.cuda.is_available()
    if torch is not None:
        print(f"torch {torch.__version__}, CUDA {'yes: ' + torch.cuda.get_device_name(0) if cuda else 'no'}")
    else:
        print("torch not importable: checking against the interpreter only, no peer timing")

    failures, rows, layers = [], [], {}
    for name in args.models:
        print(f"\n== {name}")
        mod, params, kwargs = model(name, args.small)
        data = mod["main"].params[0]
        shape = tuple(int(d) for d in data.type_annotation.shape)
        x = np.random.default_rng(0).uniform(0, 1, shape).astype("float32")
        libs = {}
        for mode in args.conv:
            try:
                start = time.perf_counter()
                with rb.config.Context(RB_GPU_CONV=mode):
                    lib = rb.build(mod, target=args.target, params=params, opt_level=3)
                build_s = time.perf_counter() - start
                got = lib.run(**{data.name_hint: x})
            except Exception as err:  # report and go on to the next schedule or model
                print(f"FAIL: conv {mode}: build or run: {type(err).__name__}: {str(err)[:2000]}")
                failures.append(name)
                continue
            rules = sorted({k.rule for k in lib.kernels})
            print(f"conv {mode}: built in {build_s:.1f} s: {lib.compile_stats.kernels} kernels "
                  f"({', '.join(rules)})")
            libs[mode] = (lib, got)
        if not libs:
            continue
        want_interpreter = None
        if name == "dqn" or args.interpreter or torch is None or args.small:
            start = time.perf_counter()
            want_interpreter = rb.create_executor("interpreter", mod=mod).evaluate()(
                x, *[params[p.name_hint] for p in mod["main"].params[1:]])
            interpreter_s = time.perf_counter() - start
        torch_run, want_torch = None, None
        if torch is not None:
            dev = "cuda" if cuda else "cpu"
            net = twins.load_params(twins.build(name, **kwargs), params).to(dev)
            xt = torch.from_numpy(x).to(dev)
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False
            with torch.no_grad():
                want_torch = net(xt).cpu().numpy()
            torch.backends.cudnn.allow_tf32 = True     # PyTorch eager's defaults for timing

            def torch_run(tf32=True):
                torch.backends.cudnn.allow_tf32 = tf32
                with torch.no_grad():
                    net(xt)
                if cuda:
                    torch.cuda.synchronize()
                torch.backends.cudnn.allow_tf32 = True
        for mode, (lib, got) in libs.items():
            checks = []
            if want_interpreter is not None:
                checks.append(compare(got, want_interpreter,
                                      f"vs interpreter ({interpreter_s:.0f} s)"))
            if want_torch is not None:
                checks.append(compare(got, want_torch, f"vs PyTorch ({dev}, fp32)"))
            for ok, text in checks:
                print(("ok:   " if ok else "FAIL: ") + f"conv {mode}: {text}")
                if not ok:
                    failures.append(name)
        # interleaved blocks: relaybench per convolution schedule (end to end and the device
        # time of the same runs), PyTorch
        for lib, _ in libs.values():
            lib.benchmark(number=2, repeat=1)
        if torch_run is not None:
            for _ in range(3):
                torch_run()
        e2e = {mode: [] for mode in libs}
        dev_ms = {mode: [] for mode in libs}
        peer, peer_fp32 = [], []
        if torch_run is not None and cuda:
            for _ in range(3):
                torch_run(tf32=False)
        for _ in range(args.repeat):
            for mode, (lib, _) in libs.items():
                timed = lib.benchmark(number=args.number, repeat=1, warmup=0)
                e2e[mode].append(timed.median_ms)
                dev_ms[mode].append(timed.device.median_ms)
            if torch_run is not None and cuda:
                peer.append(time_block(torch_run, args.number))
                peer_fp32.append(time_block(lambda: torch_run(tf32=False), args.number))
        profiles = {}
        for mode, (lib, _) in libs.items():
            row = (name, mode, float(np.median(e2e[mode])), float(np.median(dev_ms[mode])),
                   float(np.median(peer)) if peer else None,
                   float(np.median(peer_fp32)) if peer_fp32 else None)
            rows.append(row)
            print(f"conv {mode}: relaybench {row[2]:.2f} ms end to end, {row[3]:.2f} ms on the "
                  "device" + (f"; PyTorch eager CUDA {row[4]:.2f} ms (TF32 off: {row[5]:.2f})"
                              if row[4] is not None else ""))
            if args.profile > 0 or len(libs) > 1:
                profiles[mode] = lib.profile(number=args.number)
            if args.profile > 0:
                print(slowest_groups(profiles[mode], args.profile))
        if len(libs) > 1:
            layers[name] = layer_table(libs, profiles)
            print(f"per convolution layer, ms per call:\n{layers[name]}")

    print("\n== report")
    print(f"{'model':14s} {'conv':>8s} {'rb e2e ms':>10s} {'rb device ms':>14s} "
          f"{'torch cuda ms':>14s} {'torch fp32 ms':>14s}")
    for name, mode, e2e, dev_ms, peer, peer_fp32 in rows:
        print(f"{name:14s} {mode:>8s} {e2e:10.2f} {dev_ms:14.2f} "
              f"{(f'{peer:.2f}' if peer is not None else 'n/a'):>14s} "
              f"{(f'{peer_fp32:.2f}' if peer_fp32 is not None else 'n/a'):>14s}")
    if failures:
        print(f"FAILED: {', '.join(dict.fromkeys(failures))}")
        return 1
    print("all models agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
