"""Winograd against the direct convolution on every 3x3 stride-1 layer of ResNet-18 and VGG-16.

    python bench/winograd.py [--threads 2] [--repeat 7] [--number 3] [--layers resnet18,vgg16]
                             [--networks] [--out bench/out]

Each distinct 3x3 stride-1 convolution of ResNet-18 and VGG-16 (batch 1, float32, 224x224
input, padding 1) is built three times as a one-layer program (the convolution and a ReLU, the
weights bound as constants, ``opt_level=3``): the direct ``conv2d_NCHWc`` kernel
(``RB_WINOGRAD=off``), Winograd F(2x2, 3x3) (``RB_WINOGRAD=2``) and F(4x4, 3x3)
(``RB_WINOGRAD=4``). The Winograd outputs are compared with the direct kernel's first.
Then the repetitions are interleaved: repetition ``r`` times each variant once (``number`` calls
of the graph executor, timed together and divided), starting from variant ``r mod 3``, so that
a drift of the machine's load touches all alike. The table gives each variant's median time and
its effective rate (the time is the convolution kernel's, from the executor's per-kernel
profile: the layout transforms at the one-layer program's ends are left out), the direct convolution's FLOPs (``2 * C * 9`` per output) over the time:
above the FMA peak where Winograd does fewer multiplications. The layout policy's rule
(:func:`relaybench.passes.alter_op_layout.winograd_tile`, ``RB_WINOGRAD=auto``) is shown
beside the fastest variant.

``--networks`` also times whole ResNet-18 and VGG-16 built with ``RB_WINOGRAD=off`` and
``auto`` (interleaved the same way). The load average is printed at the start and the end:
compare only runs on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

import relaybench as rb
from relaybench import config, op

# (network, in channels, out channels, size): each distinct 3x3 stride-1 layer at 224x224 input
LAYERS = [
    ("resnet18", 64, 64, 56), ("resnet18", 128, 128, 28), ("resnet18", 256, 256, 14),
    ("resnet18", 512, 512, 7),
    ("vgg16", 64, 64, 224), ("vgg16", 64, 128, 112), ("vgg16", 128, 128, 112),
    ("vgg16", 128, 256, 56), ("vgg16", 256, 256, 56), ("vgg16", 256, 512, 28),
    ("vgg16", 512, 512, 28), ("vgg16", 512, 512, 14),
]

VARIANTS = (("direct", "off"), ("F(2x2)", "2"), ("F(4x4)", "4"))


def layer(c: int, o: int, size: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rb.var("data", shape=(1, c, size, size))
    w = rb.var("w", shape=(o, c, 3, 3))
    y = op.nn.relu(op.nn.conv2d(x, w, padding=1, channels=o, kernel_size=3))
    params = {"w": (rng.standard_normal((o, c, 3, 3)) / np.sqrt(9 * c)).astype("float32")}
    data = rng.standard_normal((1, c, size, size)).astype("float32")
    return rb.IRModule.from_expr(rb.Function([x, w], y)), params, data


def build(mod, params, mode: str, threads: int):
    with config.Context(RB_WINOGRAD=mode):
        return rb.build(mod, target="llvm", params=params, opt_level=3, num_threads=threads)


def _conv_kernel_ms(lib, data, number: int) -> float:
    """The convolution kernel's time per call (ms), from the graph executor's profile (the
    layout transforms at the one-layer program's entry and exit left out)."""
    groups = lib.profile(number=number, data=data).groups
    return sum(float(g["ms/call"]) * int(g["calls"]) for g in groups
               if g["rule"].startswith("conv2d"))


def time_interleaved(runs: dict, repeat: int, number: int, kernel=None, libs=None) -> dict:
    """name -> seconds per call (every sample), the variants interleaved; with ``kernel`` (a
    function of a library giving its kernel's ms per call) that time instead of whole runs."""
    names = list(runs)
    for run in runs.values():
        run()
    samples = {n: [] for n in names}
    for r in range(repeat):
        for k in range(len(names)):
            name = names[(r + k) % len(names)]
            if kernel is not None:
                samples[name].append(kernel(libs[name]) / 1e3)
                continue
            start = time.perf_counter()
            for _ in range(number):
                runs[name]()
            samples[name].append((time.perf_counter() - start) / number)
    return samples


def bench_layers(threads: int, repeat: int, number: int, networks_wanted) -> list:
    from relaybench.ir.types import TensorType
    from relaybench.passes.alter_op_layout import channel_block, winograd_tile
    rows = []
    for net, c, o, size in LAYERS:
        if net not in networks_wanted:
            continue
        mod, params, data = layer(c, o, size)
        libs = {name: build(mod, params, mode, threads) for name, mode in VARIANTS}
        want = np.asarray(libs["direct"].run(data=data))
        for name, lib in libs.items():
            got = np.asarray(lib.run(data=data))
            err = float(np.abs(got - want).max() / max(1e-6, np.abs(want).max()))
            if err > 1e-3:
                raise AssertionError(f"{net} {c}->{o} {size}: {name} differs by {err:.2e}")
        samples = time_interleaved({n: (lambda lib=lib: lib.run(data=data)) for n, lib in libs.items()},
                                   repeat, number, kernel=lambda lib: _conv_kernel_ms(lib, data, number),
                                   libs=libs)
        flops = 2 * o * size * size * c * 9
        with config.Context(RB_WINOGRAD="auto"):
            attrs = {"strides": (1, 1), "dilation": (1, 1), "groups": 1}
            rule = winograd_tile(attrs, TensorType((1, c, size, size), "float32"),
                                 TensorType((o, c, 3, 3), "float32"),
                                 TensorType((1, o, size, size), "float32"),
                                 channel_block(c), channel_block(o))
        row = {"network": net, "layer": f"{c}->{o} {size}x{size}", "gflop": flops / 1e9,
               "rule": {0: "direct", 2: "F(2x2)", 4: "F(4x4)"}[rule]}
        for name in libs:
            t = statistics.median(samples[name])
            row[f"{name} ms"] = t * 1e3
            row[f"{name} GFLOP/s"] = flops / t / 1e9
        row["best"] = min(libs, key=lambda n: row[f"{n} ms"])
        rows.append(row)
        print(_format_row(row), flush=True)
    return rows


def _format_row(row) -> str:
    cells = [f"{row['network']:<9}", f"{row['layer']:<16}"]
    for name, _ in VARIANTS:
        cells.append(f"{row[f'{name} ms']:8.2f} ms {row[f'{name} GFLOP/s']:6.1f}")
    cells += [f"best {row['best']:<7}", f"rule {row['rule']}"]
    return " | ".join(cells)


def bench_networks(threads: int, repeat: int, number: int, names) -> list:
    rows = []
    for name in names:
        mod, params = rb.models.get(name)
        first = mod["main"].params[0]
        input_name = first.name_hint
        shape = [int(d) for d in first.type_annotation.shape]
        data = np.random.default_rng(0).standard_normal(shape).astype("float32")
        libs = {mode: build(mod, params, mode, threads) for mode in ("off", "auto")}
        outs = {m: np.asarray(lib.run(**{input_name: data})) for m, lib in libs.items()}
        err = float(np.abs(outs["off"] - outs["auto"]).max() / np.abs(outs["off"]).max())
        samples = time_interleaved({m: (lambda lib=lib: lib.run(**{input_name: data}))
                                    for m, lib in libs.items()}, repeat, number)
        row = {"network": name, "max rel diff": err}
        for m in libs:
            row[f"RB_WINOGRAD={m} ms"] = statistics.median(samples[m]) * 1e3
        row["speedup"] = row["RB_WINOGRAD=off ms"] / row["RB_WINOGRAD=auto ms"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=3)
    parser.add_argument("--layers", default="resnet18,vgg16")
    parser.add_argument("--networks", action="store_true")
    parser.add_argument("--out", default="bench/out")
    args = parser.parse_args(argv)
    print(f"load average at start: {os.getloadavg()}", flush=True)
    wanted = {n.strip() for n in args.layers.split(",") if n.strip()}
    print(" | ".join(["network  ", "layer           "] + [f"{n:>8} time, GFLOP/s" for n, _ in VARIANTS]))
    rows = bench_layers(args.threads, args.repeat, args.number, wanted)
    nets = bench_networks(args.threads, max(3, args.repeat // 2), 1, ["resnet18", "vgg16"]) \
        if args.networks else []
    print(f"load average at end: {os.getloadavg()}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"winograd-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"threads": args.threads, "layers": rows, "networks": nets}, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
