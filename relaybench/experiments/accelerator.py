"""The accelerator experiment: ResNets on the CPU only against the simulated VTA-like designs.

The Relay paper (Roesch et al., 2019, "targeting deep learning accelerators") compiles quantized
ResNets for VTA, an FPGA accelerator at 100 MHz on a Pynq board beside an ARM Cortex-A9 CPU, with
Relay's flow: quantize, ``graph_pack`` the int8 convolutions into the accelerator's layouts, run
them on VTA and the rest on the ARM core. It reports ResNet-18 at 307 ms on the CPU only, 65 ms
with the single-batch design and 61 ms with the multi-batch one (:data:`PAPER`).

This file runs the same flow with :mod:`relaybench.backends.accel`, for every model and design
(the TreeLSTM, a recursive program, as :func:`_tree_rows` says):

* **the quantized model**: ``rb.quantize.quantize(mod, params)`` under
  ``qconfig(global_scale=8.0, skip_conv_layers=[0])`` (VTA's settings: the first convolution in
  float32), on seeded random weights.
* **CPU only** (*measured*): that model built for ``llvm`` (opt_level 3) and timed on *this host*
  (median of ``repeat`` rounds of ``number`` runs, :meth:`GraphModule.benchmark`): this host's
  int8 CPU path, not the paper's ARM Cortex-A9.
* **each design** (``"accel"``: VTA's 1 x 16 x 16 GEMM core; ``"accel -batch=4"``: the
  multi-batch 4 x 8 x 8 one, the same 256 MACs per cycle): the model built with
  ``rb.build(q, target=design)``, run once on a seeded random input and checked equal, bit for
  bit, to the llvm build of the same model (a difference is an :class:`AcceleratorMismatchError`).
  Its time per image is two columns added:

  - ``accel_ms`` (*simulated*): the sum over every accelerator group call of its simulated time,
    ``RunStats.seconds`` (cycles at the design's clock), from the run just checked;
  - ``cpu_ms`` (*measured*): the groups the accelerator cannot run (the float first convolution,
    pooling, the dense layer, layout transforms, ...) on this host's CPU, the sum of their
    ``ms/run`` in :meth:`GraphModule.profile` (median over ``number`` runs).

  A multi-batch design computes ``batch`` images at once, so the model is built with
  ``batch_size = batch`` and every time is divided by it (per image). Beside them: the number of
  fused groups (and calls) on each side, the GEMM core's utilization over the accelerator's cycles
  (MACs done over MACs possible) and ``simulator_s``, the host's wall time for one run of the
  whole network (``batch`` images) through the simulator: the simulator's own speed.

A design whose build fails (a :class:`~relaybench.errors.RelayError`) is recorded in its row's
``error`` field, so that one failing design does not lose the others' measurements; a wrong
output is never recorded, it raises.

:func:`accelerator` returns an :class:`AcceleratorResult` (``.table()``, ``.paper_table()``,
``.plot()``, ``.to_csv``, ``.to_json``, ``.to_markdown``, ``.write(directory)``);
``relaybench reproduce accelerator --out DIR`` is the same from the command line.

>>> design_label("accel"), design_label("accel -batch=4")
('single-batch', 'multi-batch')
>>> round(AcceleratorResult([_row("m", "3x8x8", "accel", accel_ms=2.0, cpu_ms=0.5)]).rows[0]
...       ["total_ms"], 3)
2.5
"""

from __future__ import annotations

import csv
import json
import math
import time
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

import numpy as np

from ._files import read_result, save_figure
from .._table import Table
from ..errors import RelayError

__all__ = ["accelerator", "AcceleratorResult", "AcceleratorMismatchError", "MODELS", "DESIGNS",
           "PAPER", "COLUMNS", "QCONFIG", "CPU_ONLY", "design_label", "check_designs"]

#: The default models and designs.
MODELS: tuple = ("resnet18", "resnet34", "resnet50", "tree_lstm")

#: The recursive models (run by the VM, their accelerator groups called once per tree node) and
#: their quantization: the dense layers quantized too, and every layer's int32 result stored as
#: int8 before it leaves the quantized operators (what a VTA-like accelerator stores).
TREE_MODELS: tuple = ("tree_lstm",)
TREE_QCONFIG: dict = {"global_scale": 8.0, "skip_dense_layer": False, "skip_conv_layers": None,
                      "store_lowbit_output": True}
#: The TreeLSTM's sizes and tree: input and hidden 128, a full binary tree of 5 levels.
TREE_SIZES: dict = {"input_size": 128, "hidden_size": 128}
TREE_DEPTH = 5
DESIGNS: tuple = ("accel", "accel -batch=4")

#: The paper's figures, ms per image (VTA on a Pynq board at 100 MHz, ARM Cortex-A9 CPU). Only
#: ResNet-18's are given here; the ResNet-34 and ResNet-50 bars of the paper's figure are not
#: transcribed.
PAPER: dict = {"resnet18": {"cpu only": 307.0, "single-batch": 65.0, "multi-batch": 61.0}}

#: VTA's quantization settings (the rest is Relay's default qconfig).
QCONFIG: dict = {"global_scale": 8.0, "skip_conv_layers": [0]}

#: The ``design`` of the CPU-only rows.
CPU_ONLY = "cpu only"

#: The fields of a row (the CSV columns), in order.
COLUMNS: tuple = ("model", "input", "design", "batch", "accel_ms", "cpu_ms", "total_ms",
                  "speedup", "accel_groups", "cpu_groups", "accel_calls", "cpu_calls",
                  "gemm_utilization", "accel_cycles", "simulator_s", "clock_mhz", "exact",
                  "error")

_TITLE = "Accelerator: ResNets on the CPU only and on the simulated VTA-like designs"


class AcceleratorMismatchError(RelayError):
    """A design's output differs from the llvm build of the same quantized model: the
    accelerator's lowering or its simulator changed the program's meaning."""


def design_label(design: str) -> str:
    """``"single-batch"`` for a design whose GEMM core computes one row, ``"multi-batch"``
    otherwise (the paper's names); ``"cpu only"`` for :data:`CPU_ONLY`."""
    if design == CPU_ONLY:
        return CPU_ONLY
    return "single-batch" if _config(design).batch == 1 else "multi-batch"


def _config(design: str):
    from ..backends.target import Target
    return Target.parse(design).accel_config()


def check_designs(designs) -> list:
    """The designs as a list of target strings, each checked: an ``accel`` target whose design
    can be made (``-batch=`` a divisor of the core's MACs with square blocks). A bad one is a
    ValueError naming it."""
    from ..backends.target import Target
    names = [designs] if isinstance(designs, str) else list(designs)
    if not names:
        raise ValueError("accelerator: no designs given")
    out = []
    for design in names:
        if not isinstance(design, str):
            raise ValueError(f"accelerator: design {design!r} is not a target string "
                             f"(e.g. 'accel' or 'accel -batch=4')")
        try:
            target = Target.parse(design)
        except RelayError as err:
            raise ValueError(f"accelerator: design {design!r}: {err}") from None
        if target.kind != "accel":
            raise ValueError(f"accelerator: design {design!r} is not an accelerator target; "
                             f"use 'accel' or 'accel -batch=N'")
        try:
            target.accel_config()
        except RelayError as err:
            raise ValueError(f"accelerator: design {design!r}: {err}") from None
        out.append(design)
    return out


# ---- helpers -------------------------------------------------------------------------------

def _names(models) -> list:
    from .composability import checked_model_names
    return checked_model_names(models, "accelerator")


def _model_kwargs(name: str, image_shape) -> dict:
    from .composability import _model_kwargs as kwargs_of
    return kwargs_of(name, image_shape)


def _quantized(name: str, batch: int, kwargs: dict):
    from .. import models as zoo
    from ..quantize import qconfig, quantize
    mod, params = zoo.get(name, batch_size=batch, **kwargs)
    with qconfig(**QCONFIG):
        return quantize(mod, params)


def _single_input(graph, where: str):
    info = graph.input_info()
    if len(info) != 1:
        raise ValueError(f"accelerator: {where} takes {len(info)} inputs ({', '.join(info)}); "
                         f"the experiment feeds one image tensor")
    ((name, (shape, dtype)),) = info.items()
    return name, tuple(shape), dtype


def _shape_text(shape) -> str:
    return "x".join(str(d) for d in shape)


def _progress(total: int, enabled: bool):
    from .composability import _Progress
    bar = _Progress(total, enabled=enabled)
    if bar._widget is not None:
        bar._widget.description = "accelerator"
    return bar


def _row(model: str, input_text: str, design: str, **fields) -> dict:
    row = {c: None for c in COLUMNS}
    row.update(model=model, input=input_text, design=design, batch=1)
    row.update(fields)
    if row["accel_ms"] is not None and row["cpu_ms"] is not None:
        row["total_ms"] = row["accel_ms"] + row["cpu_ms"]
    return row


def accelerator_stats(graph) -> dict:
    """What one run of ``graph`` (built for an ``accel`` target, run at least once) did on the
    accelerator, summed over every accelerator group call (each call's latest
    :class:`~relaybench.backends.accel.RunStats`): ``seconds``, ``cycles``, ``gemm_macs``,
    ``possible_macs`` (cycles times the core's MACs per cycle) and ``calls``."""
    from ..backends.accel.kernel import AccelKernel
    out = {"seconds": 0.0, "cycles": 0, "gemm_macs": 0, "possible_macs": 0, "calls": 0}
    for name, _, compiled in graph.groups:
        if not isinstance(compiled, AccelKernel):
            continue
        stats = compiled.last_stats
        if stats is None:
            raise ValueError(f"accelerator: group {name} has not run yet")
        out["seconds"] += stats.seconds
        out["cycles"] += stats.cycles
        out["gemm_macs"] += stats.gemm_macs
        out["possible_macs"] += stats.cycles * stats.config.macs_per_cycle
        out["calls"] += 1
    return out


def _compare(cpu_out, accel_out, model: str, design: str) -> None:
    from ..backends.build import flatten_result
    cpu = [np.asarray(v) for v in flatten_result(cpu_out)]
    acc = [np.asarray(v) for v in flatten_result(accel_out)]
    if len(cpu) != len(acc):
        raise AcceleratorMismatchError(f"accelerator: {model} on {design!r}: {len(acc)} outputs, "
                                       f"the llvm build gives {len(cpu)}")
    for k, (want, got) in enumerate(zip(cpu, acc)):
        if want.shape != got.shape or want.dtype != got.dtype:
            raise AcceleratorMismatchError(
                f"accelerator: {model} on {design!r}: output {k} is {got.dtype}{list(got.shape)}, "
                f"the llvm build gives {want.dtype}{list(want.shape)}")
        differ = want != got
        if want.dtype.kind == "f":   # the same NaNs are the same result
            differ &= ~(np.isnan(want) & np.isnan(got))
        if differ.any():
            gap = np.abs(want.astype(np.float64) - got.astype(np.float64))
            raise AcceleratorMismatchError(
                f"accelerator: {model} on {design!r}: output {k} differs from the llvm build of "
                f"the same quantized model in {int(differ.sum())} of {differ.size} elements "
                f"(largest difference {float(np.nanmax(gap)):.6g}, first at index "
                f"{tuple(int(i) for i in np.argwhere(differ)[0])})")


# ---- the result ----------------------------------------------------------------------------

def _ms(value) -> str:
    if value is None:
        return ""
    return f"{value:.3g}" if value < 10 else f"{value:.1f}"


class AcceleratorResult:
    """The experiment's measurements: one row per (model, design) with the fields of
    :data:`COLUMNS` (the ``"cpu only"`` row first for each model), and the ``settings`` they
    were taken with. Times are milliseconds per image; ``total_ms = accel_ms + cpu_ms``
    (simulated plus measured), ``speedup`` is the CPU-only time over ``total_ms``.

    ``outputs`` (not written to files) keeps, per ``(model, design)``, the input fed and the two
    outputs compared: ``{"input": ..., "cpu": ..., "accel": ...}``.
    """

    def __init__(self, rows: Sequence[dict], settings: Optional[dict] = None,
                 outputs: Optional[dict] = None):
        self.rows = [_row(r["model"], r["input"], r["design"],
                          **{k: v for k, v in r.items() if k not in ("model", "input", "design",
                                                                      "total_ms")})
                     for r in rows]
        self.settings = dict(settings or {})
        self.outputs = dict(outputs or {})

    # -- views
    def row(self, model: str, design: str) -> dict:
        """The row of ``model`` on ``design`` (:data:`CPU_ONLY` for the CPU-only one)."""
        for r in self.rows:
            if r["model"] == model and r["design"] == design:
                return r
        known = ", ".join(f"{r['model']}/{r['design']}" for r in self.rows)
        raise KeyError(f"no row for {model!r} on {design!r}; the rows are {known}")

    @property
    def models(self) -> list:
        return list(dict.fromkeys(r["model"] for r in self.rows))

    def table(self) -> Table:
        """One line per (model, design): the time per image and its two parts, the speedup over
        the CPU only, the groups on each side, the GEMM utilization and the simulator's speed."""
        out = []
        for r in self.rows:
            if r["error"]:
                out.append({"model": r["model"], "input": r["input"], "design": r["design"],
                            "ms/image": "failed"})
                continue
            accel = r["design"] != CPU_ONLY
            out.append({
                "model": r["model"], "input": r["input"],
                "design": r["design"] + (f" (batch {r['batch']})" if r["batch"] != 1 else ""),
                "ms/image": _ms(r["total_ms"]),
                "accel ms (simulated)": _ms(r["accel_ms"]) if accel else "",
                "cpu ms (measured)": _ms(r["cpu_ms"]),
                "speedup": "" if r["speedup"] is None else f"{r['speedup']:.2f}",
                "groups accel/cpu": f"{r['accel_groups']}/{r['cpu_groups']}",
                "GEMM util. %": "" if r["gemm_utilization"] is None
                else f"{100 * r['gemm_utilization']:.1f}",
                "simulator s/run": "" if r["simulator_s"] is None else f"{r['simulator_s']:.2f}",
            })
        columns = list(dict.fromkeys(k for row in out for k in row))
        if any(r["error"] for r in self.rows):   # a failed design: its error in a last column
            columns.append("error")
            for row, r in zip(out, self.rows):
                row["error"] = r["error"] or ""
        return Table([{c: row.get(c, "") for c in columns} for row in out])

    def paper_table(self) -> Table:
        """Per model, the CPU only and each design beside the paper's figures (ms per image;
        ResNet-18's only, the others are not given)."""
        out = []
        for model in self.models:
            paper = PAPER.get(model, {})
            for r in self.rows:
                if r["model"] != model:
                    continue
                label = design_label(r["design"])
                figure = paper.get(label)
                out.append({
                    "model": model, "configuration": label,
                    "paper ms (Pynq: ARM Cortex-A9 + VTA at 100 MHz)":
                        "not given" if figure is None else f"{figure:g}",
                    "here ms/image": "failed" if r["error"] else _ms(r["total_ms"]),
                    "here": ("measured, this host's int8 CPU path" if r["design"] == CPU_ONLY
                             else f"{r['input']}: simulated accel + measured CPU"),
                })
        return Table(out)

    def notes(self) -> str:
        """How the table was measured, said plainly (the markdown writer's)."""
        s = self.settings
        return (f"Quantized with qconfig(global_scale=8.0, skip_conv_layers=[0]) on seeded random "
                f"weights. 'cpu only': the quantized model built for llvm (opt_level 3) and "
                f"measured on this host ({s.get('host', '?')}, int8 path "
                f"{s.get('int8_path', '?')}; median of {s.get('repeat', '?')} rounds of "
                f"{s.get('number', '?')} runs): this host's int8 CPU path, not the paper's ARM "
                f"Cortex-A9. Each design: 'accel ms' is simulated (the accelerator groups' "
                f"cycles at the design's clock, {s.get('clock_mhz', '?')} MHz), 'cpu ms' is "
                f"measured (the groups left to this host's CPU, the sum of their profile "
                f"medians over {s.get('number', '?')} runs); the time per image is their sum. "
                f"Every design's output equals the llvm build's bit for bit. A multi-batch "
                f"design runs the model built with batch_size=batch and the times are per "
                f"image; 'simulator s/run' is the host's wall time for one run of the whole "
                f"network (batch images) through the simulator. The paper's figures "
                f"(ResNet-18: 307 ms CPU only, 65 ms single-batch, 61 ms multi-batch) are at "
                f"224x224; ResNet-34 and ResNet-50 figures are not given here."
                + (self._tree_notes() if any(r["model"] in TREE_MODELS for r in self.rows) else ""))

    def _tree_notes(self) -> str:
        return (f" TreeLSTM (input and hidden {TREE_SIZES['hidden_size']}, a full "
                f"{2 ** TREE_DEPTH - 1}-node tree): quantized with "
                f"qconfig({', '.join(f'{k}={v!r}' for k, v in TREE_QCONFIG.items())}) (its dense "
                f"layers quantized in the recursive cell, each layer's result stored as int8); "
                f"run by the VM, whose bytecode loop in Python is part of every 'cpu ms' (the "
                f"CPU-only row and the designs alike); the accelerator runs the three requantized "
                f"dense layers of the cell (one call each per tree node), the forget gate's layer "
                f"inside the closure given to foldl stays on the CPU. Each design's output equals "
                f"the same packed program run by the VM on the CPU bit for bit; the unpacked "
                f"llvm build agrees within a float rounding (its float gates are fused "
                f"differently, so LLVM contracts another multiply-add).")

    def plot(self):
        """A matplotlib Figure: per model, a bar for the CPU only and a stacked bar per design
        (simulated accelerator time below, measured CPU time above), ms per image."""
        try:
            from matplotlib.figure import Figure
        except ImportError as err:
            raise ImportError("AcceleratorResult.plot needs matplotlib "
                              "(pip install matplotlib)") from err
        if not self.rows:
            raise ValueError("AcceleratorResult.plot: nothing was measured")
        models = self.models
        fig = Figure(figsize=(max(4.5, 3.6 * len(models)), 3.8), layout="constrained")
        ax = fig.subplots()
        designs = list(dict.fromkeys(r["design"] for r in self.rows))
        width = 0.8 / len(designs)
        for i, design in enumerate(designs):
            x = np.arange(len(models)) - 0.4 + width * (i + 0.5)
            accel, cpu = [], []
            for model in models:
                found = [r for r in self.rows if r["model"] == model and r["design"] == design
                         and not r["error"]]
                accel.append(found[0]["accel_ms"] if found else np.nan)
                cpu.append(found[0]["cpu_ms"] if found else np.nan)
            if design == CPU_ONLY:
                ax.bar(x, cpu, width, color="0.55", label="cpu only (measured)")
                continue
            label = design_label(design)
            ax.bar(x, accel, width, color=f"C{i}", label=f"{label}: accel (simulated)")
            ax.bar(x, cpu, width, bottom=accel, color=f"C{i}", alpha=0.45, hatch="//",
                   label=f"{label}: cpu part (measured)")
        inputs = {r["model"]: r["input"] for r in self.rows}
        ax.set_xticks(np.arange(len(models)), [f"{m}\n{inputs[m]}" for m in models])
        ax.set(ylabel="ms per image", title="CPU only vs the simulated accelerator designs")
        ax.legend(fontsize="small")
        ax.grid(axis="y", alpha=0.3)
        return fig

    def __repr__(self) -> str:
        return f"AcceleratorResult({len(self.rows)} rows)\n{self.table()}"

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    # -- files
    def to_csv(self, path) -> Path:
        """Write the rows as CSV (the fields of :data:`COLUMNS`); returns the path."""
        path = Path(path)
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(COLUMNS), extrasaction="ignore")
            writer.writeheader()
            for r in self.rows:
                writer.writerow({c: "" if r.get(c) is None else r[c] for c in COLUMNS})
        return path

    def to_json(self, path) -> Path:
        """Write the rows, the settings and the paper's figures as JSON; returns the path."""
        path = Path(path)
        doc = {"experiment": "accelerator", "settings": self.settings, "paper": PAPER,
               "rows": [{k: _jsonable(v) for k, v in r.items()} for r in self.rows]}
        path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        return path

    def to_markdown(self, path) -> Path:
        """Write the table, its notes and the paper's figures beside ours as markdown."""
        from .quantization import _markdown_table
        path = Path(path)
        text = (f"# {_TITLE}\n\n{self.notes()}\n\n" + _markdown_table(self.table())
                + "\nBeside the paper's figures:\n\n" + _markdown_table(self.paper_table()))
        path.write_text(text, encoding="utf-8")
        return path

    def write(self, directory) -> list:
        """Write ``accelerator.md``, ``.csv``, ``.json`` into ``directory`` (created if needed),
        and ``accelerator.png`` when matplotlib is installed; returns the paths written."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        stem = directory / "accelerator"
        written = [self.to_markdown(stem.with_suffix(".md")), self.to_csv(stem.with_suffix(".csv")),
                   self.to_json(stem.with_suffix(".json"))]
        return save_figure(self, stem.with_suffix(".png"), written)

    @classmethod
    def load(cls, path) -> "AcceleratorResult":
        """Read a result written by :meth:`to_json`."""
        doc, decode = read_result(path, "accelerator")
        return cls([decode(r) for r in doc.get("rows", [])], doc.get("settings"))


def _jsonable(value):
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, np.generic):
        return value.item()
    return value


# ---- the experiment ------------------------------------------------------------------------

def accelerator(models: Union[str, Iterable[str]] = MODELS, image_shape=(3, 224, 224),
                designs: Union[str, Iterable[str]] = DESIGNS, *, number: int = 5,
                repeat: int = 5, seed: int = 0, progress: bool = True) -> AcceleratorResult:
    """The experiment (see the module): for each model, the CPU-only row, then one row per
    design. ``image_shape`` as in the composability experiment (one ``(C, H, W)`` for every
    model whose input has C channels, a dict per model, or None for each model's own);
    ``number`` runs per timed round and per profile, ``repeat`` rounds for the CPU only (the
    median round is reported).
    Progress goes to stderr (a widget in a notebook)."""
    from ..backends.build import build
    from ..backends.llvm.jit import host_target, int8_path
    names = _names(models)
    chosen = check_designs(designs)
    if number < 1 or repeat < 1:
        raise ValueError(f"accelerator: number and repeat must be >= 1, got {number} and "
                         f"{repeat}")
    kwargs_of = {name: _model_kwargs(name, image_shape) for name in names}
    configs = {d: _config(d) for d in chosen}
    started = time.perf_counter()
    rows, outputs = [], {}
    bar = _progress(len(names) * (1 + len(chosen)), progress)
    try:
        for name in names:
            bar.update(f"{name} cpu only")
            if name in TREE_MODELS:
                rows.extend(_tree_rows(name, chosen, configs, number, repeat, seed, bar, outputs))
                continue
            quantized = {1: _quantized(name, 1, kwargs_of[name])}
            reference = {1: build(quantized[1], target="llvm", opt_level=3)}
            input_name, shape, dtype = _single_input(reference[1], name)
            text = _shape_text(shape[1:])
            cpu_graph = reference[1]
            rng = np.random.default_rng(seed)
            cpu_graph.set_input(**{input_name: rng.standard_normal(shape).astype(dtype)})
            timed = cpu_graph.benchmark(number=number, repeat=repeat, warmup=1)
            cpu_only = timed.median_ms
            rows.append(_row(name, text, CPU_ONLY, cpu_ms=cpu_only, accel_ms=0.0, speedup=1.0,
                             accel_groups=0, cpu_groups=len(cpu_graph.kernels), accel_calls=0,
                             cpu_calls=len(cpu_graph.groups)))
            bar.update(f"{name} cpu only", step=1)
            for design in chosen:
                bar.update(f"{name} {design}")
                batch = configs[design].batch
                try:
                    if batch not in quantized:
                        quantized[batch] = _quantized(name, batch, kwargs_of[name])
                    qmod = quantized[batch]
                    graph = build(qmod, target=design)
                except RelayError as err:
                    rows.append(_row(name, text, design, batch=batch,
                                     error=f"{type(err).__name__}: {err}"))
                    bar.update(f"{name} {design}", step=1)
                    continue
                if batch not in reference:
                    reference[batch] = build(qmod, target="llvm", opt_level=3)
                _, batch_shape, _ = _single_input(graph, f"{name} on {design!r}")
                x = np.random.default_rng(seed + batch).standard_normal(batch_shape).astype(dtype)
                t0 = time.perf_counter()
                got = graph.run(**{input_name: x})
                simulator_s = time.perf_counter() - t0
                want = reference[batch].run(**{input_name: x})
                _compare(want, got, name, design)
                outputs[(name, design)] = {"input": x, "cpu": _copy(want), "accel": _copy(got)}
                sim = accelerator_stats(graph)
                profile = graph.profile(number=number, warmup=0)
                cpu_part = sum(float(r["ms/run"]) for r in profile.groups
                               if r["group"] != "total" and not str(r["rule"]).startswith("accel"))
                accel_ms = sim["seconds"] * 1e3 / batch
                cpu_ms = cpu_part / batch
                accel_kernels = sum(1 for k in graph.kernels if k.accel)
                rows.append(_row(
                    name, text, design, batch=batch, accel_ms=accel_ms, cpu_ms=cpu_ms,
                    speedup=cpu_only / (accel_ms + cpu_ms) if accel_ms + cpu_ms > 0 else None,
                    accel_groups=accel_kernels, cpu_groups=len(graph.kernels) - accel_kernels,
                    accel_calls=sim["calls"], cpu_calls=len(graph.groups) - sim["calls"],
                    gemm_utilization=(sim["gemm_macs"] / sim["possible_macs"]
                                      if sim["possible_macs"] else None),
                    accel_cycles=sim["cycles"], simulator_s=simulator_s,
                    clock_mhz=configs[design].clock_mhz, exact=True))
                del graph
                bar.update(f"{name} {design}", step=1)
    finally:
        bar.close()
    clocks = sorted({c.clock_mhz for c in configs.values()})
    settings = {"models": names, "designs": chosen, "image_shape": _shape_setting(image_shape),
                "number": number, "repeat": repeat, "seed": seed, "qconfig": QCONFIG,
                "host": host_target().cpu, "int8_path": int8_path(),
                "clock_mhz": clocks[0] if len(clocks) == 1 else clocks,
                "seconds": round(time.perf_counter() - started, 1)}
    return AcceleratorResult(rows, settings, outputs)


def _tree_quantized(name: str, batch: int):
    from .. import models as zoo
    from ..quantize import qconfig, quantize
    mod, params = zoo.get(name, batch_size=batch, **TREE_SIZES)
    with qconfig(**TREE_QCONFIG):
        return quantize(mod, params)


def _tree_input(batch: int, seed: int):
    from ..adt import from_python
    from .nlp import full_tree
    rng = np.random.default_rng(seed)
    tree = full_tree(TREE_DEPTH, lambda: rng.standard_normal(
        (batch, TREE_SIZES["input_size"])).astype("float32"))
    return tree, from_python(tree, "Tree")


def _timed_rounds(run, number: int, repeat: int, accel=()) -> tuple:
    """Median over ``repeat`` rounds of ``number`` calls of ``run``: (wall ms per call, the
    part spent outside the accelerator kernels ``accel`` (their host time taken off), per
    call)."""
    import gc
    walls, outside = [], []
    for _ in range(repeat):
        for k in accel:
            k.reset_totals()
        # as timeit does: the garbage the simulator leaves would otherwise be collected at
        # whatever allocation comes next, and charged to the CPU's part
        gc.collect()
        gc.disable()
        try:
            t0 = time.perf_counter()
            for _ in range(number):
                run()
            wall = (time.perf_counter() - t0) / number
        finally:
            gc.enable()
        host = sum(k.totals["host_seconds"] for k in accel) / number
        walls.append(wall * 1e3)
        outside.append((wall - host) * 1e3)
    return float(np.median(walls)), float(np.median(outside))


def _tree_rows(name: str, designs: list, configs: dict, number: int, repeat: int, seed: int,
               bar, outputs: dict) -> list:
    """The rows of a recursive model: the quantized program on the VM, built for llvm (the CPU
    only) and for each design (its accelerator groups run in the simulator, once per tree node).
    Each design's output is checked bit for bit against the same packed program run by the VM
    on the CPU."""
    from ..backends.accel.kernel import AccelKernel
    from ..backends.build import _pack_for_accel, flatten_result
    from ..backends.target import Target
    from ..backends.vm import VirtualMachine, compile as vm_compile
    rows = []
    quantized = {1: _tree_quantized(name, 1)}
    text = f"{2 ** TREE_DEPTH - 1}-node tree"
    _, arg = _tree_input(1, seed)
    cpu_exe = vm_compile(quantized[1], target="llvm")
    cpu_vm = VirtualMachine(cpu_exe)
    cpu_vm.invoke("main", arg)
    cpu_only, _ = _timed_rounds(lambda: cpu_vm.invoke("main", arg), number, repeat)
    rows.append(_row(name, text, CPU_ONLY, cpu_ms=cpu_only, accel_ms=0.0, speedup=1.0,
                     accel_groups=0, cpu_groups=len(cpu_exe.kernels), accel_calls=0))
    bar.update(f"{name} cpu only", step=1)
    for design in designs:
        bar.update(f"{name} {design}")
        batch = configs[design].batch
        try:
            if batch not in quantized:
                quantized[batch] = _tree_quantized(name, batch)
            qmod = quantized[batch]
            exe = vm_compile(qmod, target=design)
        except RelayError as err:
            rows.append(_row(name, text, design, batch=batch, error=f"{type(err).__name__}: {err}"))
            bar.update(f"{name} {design}", step=1)
            continue
        accel = [k.compiled for k in exe.kernels if isinstance(k.compiled, AccelKernel)]
        _, batch_arg = _tree_input(batch, seed + batch)
        machine = VirtualMachine(exe)
        for k in accel:
            k.reset_totals()
        t0 = time.perf_counter()
        got = machine.invoke("main", batch_arg)
        simulator_s = time.perf_counter() - t0
        totals = {key: sum(k.totals[key] for k in accel)
                  for key in ("calls", "cycles", "seconds", "gemm_macs", "possible_macs")}
        packed = _pack_for_accel(qmod, Target.parse(design))
        want = VirtualMachine(vm_compile(packed, target="llvm")).invoke("main", batch_arg)
        _compare(want, got, name, design)
        plain = VirtualMachine(vm_compile(qmod, target="llvm")).invoke("main", batch_arg)
        outputs[(name, design)] = {
            "input": batch_arg, "cpu": _copy(want), "accel": _copy(got),
            "unpacked_cpu_max_abs_diff": max(
                float(np.max(np.abs(np.asarray(a, "float64") - np.asarray(b, "float64"))))
                for a, b in zip(flatten_result(plain), flatten_result(got)))}
        _, outside = _timed_rounds(lambda: machine.invoke("main", batch_arg), number, repeat, accel)
        accel_ms = totals["seconds"] * 1e3 / batch
        cpu_ms = outside / batch
        rows.append(_row(
            name, text, design, batch=batch, accel_ms=accel_ms, cpu_ms=cpu_ms,
            speedup=cpu_only / (accel_ms + cpu_ms) if accel_ms + cpu_ms > 0 else None,
            accel_groups=len(accel), cpu_groups=len(exe.kernels) - len(accel),
            accel_calls=totals["calls"],
            gemm_utilization=(totals["gemm_macs"] / totals["possible_macs"]
                              if totals["possible_macs"] else None),
            accel_cycles=totals["cycles"], simulator_s=simulator_s,
            clock_mhz=configs[design].clock_mhz, exact=True))
        bar.update(f"{name} {design}", step=1)
    return rows


def _copy(result):
    from ..backends.build import flatten_result
    values = [np.array(v, copy=True) for v in flatten_result(result)]
    return values[0] if len(values) == 1 else values


def _shape_setting(value):
    if value is None:
        return None
    if isinstance(value, dict):
        return {k: list(v) if v is not None else None for k, v in value.items()}
    return list(value)
