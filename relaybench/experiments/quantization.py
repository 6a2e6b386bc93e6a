"""The quantization experiment: what int8 costs in accuracy and what it buys in speed.

The Relay paper (Roesch et al., 2019, "quantization") quantizes ResNet-18 with Relay's
annotate / calibrate / realize passes and reports its ImageNet accuracy (70.7% in float32,
69.4% with 8-bit inputs and weights and 32-bit accumulators, "8/32") and its speed. This file
measures the same three things with :mod:`relaybench.quantize`, every program compiled with
``rb.build(..., target="llvm", opt_level=3)`` and run on the graph executor:

* :func:`digits_accuracy_table`: accuracy on a real data set that ships with a package,
  scikit-learn's handwritten digits, with the zoo's trained digits CNN: float32, 8/32 and 8/16
  (``nbit_activation=16``, ``dtype_activation="int16"``) for every ``calibrate_mode``,
  calibrated on training images (720 by default) and measured on the held-apart test split
  (:func:`relaybench.models.load_digits_split`). :data:`PAPER_RESNET18` holds the paper's
  figures to set beside it.
* :func:`zoo_agreement`: the zoo's vision models carry random weights, so accuracy means
  nothing there; what is measured is how closely the int8 program follows the float32 one on
  seeded random inputs: the top-1 agreement (:func:`top1_agreement`, %) and the
  signal-to-quantization-noise ratio (:func:`sqnr_db`, dB) over all outputs, for every
  calibrate mode, calibrated on other seeded random inputs.
* :func:`quantization_speed`: float32 against int8 (the default qconfig) on the graph executor,
  per model and thread count, in interleaved rounds of :meth:`GraphModule.benchmark` as in the
  composability experiment; the median round is reported, and the int8 speedup.

The qconfig is Relay's default apart from the knobs named above: ``skip_conv_layers=[0]`` (the
first convolution stays in float32), ``skip_dense_layer=True`` (so do the dense layers),
``weight_scale="power2"``, ``global_scale=8.0``, rounding "UPWARD". Each table's notes say so.

:func:`quantization` runs all three and returns a :class:`QuantizationResult` (``.table(name)``,
``.tables()``, ``.plot()``, ``.to_csv``, ``.to_json``, ``.to_markdown``, ``.write(directory)``);
``relaybench reproduce quantization --out DIR`` is the same from the command line.

>>> round(sqnr_db(np.array([3.0, 4.0]), np.array([3.0, 4.5])), 2)   # 10 log10(25 / 0.25)
20.0
>>> top1_agreement(np.array([[0.1, 0.9], [0.8, 0.2]]), np.array([[0.2, 0.7], [0.1, 0.3]]))
50.0
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

__all__ = ["quantization", "QuantizationResult", "digits_accuracy_table", "zoo_agreement",
           "quantization_speed", "sqnr_db", "top1_agreement", "CALIBRATE_MODES", "PRECISIONS",
           "PAPER_RESNET18", "ZOO_MODELS", "SPEED_MODELS", "THREADS", "TABLES"]

#: Relay's calibrate modes, in the order the tables show them.
CALIBRATE_MODES: tuple = ("global_scale", "max", "percentile", "kl_divergence")

#: The integer precisions: "inputs and weights / accumulators" in bits, and their qconfig knobs.
PRECISIONS: dict = {
    "8/32": {"nbit_activation": 32, "dtype_activation": "int32"},
    "8/16": {"nbit_activation": 16, "dtype_activation": "int16"},
}

#: The paper's ResNet-18 on ImageNet, top-1 accuracy in percent (8/16 not reported).
PAPER_RESNET18: dict = {"fp32": 70.7, "8/32": 69.4}

#: The default models of the agreement table and of the speed table, and the thread counts.
ZOO_MODELS: tuple = ("resnet18", "mobilenet_v2", "vgg16", "dqn")
SPEED_MODELS: tuple = ("resnet18", "mobilenet_v2")
THREADS: tuple = (1, 2)

#: The tables a result can hold, and the fields of their rows (the CSV columns), in order.
TABLES: dict = {
    "accuracy": ("precision", "calibrate_mode", "accuracy", "correct", "images"),
    "agreement": ("model", "input", "calibrate_mode", "top1_agreement", "sqnr_db", "inputs"),
    "speed": ("model", "input", "threads", "fp32_ms", "int8_ms", "speedup"),
}

_TITLES = {
    "accuracy": "Quantization: accuracy on scikit-learn's digits (held-apart test split)",
    "agreement": "Quantization: int8 against float32 on the zoo (random weights)",
    "speed": "Quantization: float32 against int8 on the graph executor (llvm)",
}

_QCONFIG_NOTE = ("qconfig: Relay's defaults (skip_conv_layers=[0], skip_dense_layer=True, "
                 "weight_scale=power2, global_scale=8.0, rounding UPWARD) apart from "
                 "calibrate_mode and, for 8/16, nbit_activation=16 / dtype_activation=int16")


# ---- the measures --------------------------------------------------------------------------

def sqnr_db(reference, quantized) -> float:
    """The signal-to-quantization-noise ratio of ``quantized`` against ``reference`` in dB:
    ``10 log10(sum(reference**2) / sum((reference - quantized)**2))`` over every element, in
    float64; ``inf`` when the two are equal."""
    ref = np.asarray(reference, dtype=np.float64)
    got = np.asarray(quantized, dtype=np.float64)
    if ref.shape != got.shape:
        raise ValueError(f"sqnr_db: the outputs have shapes {ref.shape} and {got.shape}")
    noise = float(np.sum((ref - got) ** 2))
    signal = float(np.sum(ref ** 2))
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def top1_agreement(reference, quantized) -> float:
    """The percentage of rows (the last axis holds the scores of one input) whose largest score
    is at the same position in ``quantized`` as in ``reference``."""
    ref = np.asarray(reference)
    got = np.asarray(quantized)
    if ref.shape != got.shape or ref.ndim == 0:
        raise ValueError(f"top1_agreement: the outputs have shapes {ref.shape} and {got.shape}")
    ref = ref.reshape(-1, ref.shape[-1])
    got = got.reshape(-1, got.shape[-1])
    return 100.0 * float(np.mean(np.argmax(ref, axis=-1) == np.argmax(got, axis=-1)))


# ---- helpers -------------------------------------------------------------------------------

def _check_modes(calibrate_modes) -> list:
    modes = [calibrate_modes] if isinstance(calibrate_modes, str) else list(calibrate_modes)
    unknown = [m for m in modes if m not in CALIBRATE_MODES]
    if unknown or not modes:
        raise ValueError(f"quantization: calibrate mode {unknown[0] if unknown else None!r} is "
                         f"not one of {', '.join(CALIBRATE_MODES)}")
    return modes


def _check_precisions(precisions) -> list:
    names = [precisions] if isinstance(precisions, str) else list(precisions)
    unknown = [p for p in names if p not in PRECISIONS]
    if unknown:
        raise ValueError(f"quantization: precision {unknown[0]!r} is not one of "
                         f"{', '.join(PRECISIONS)}")
    return names


def _names(models) -> list:
    from .composability import checked_model_names
    return checked_model_names(models, "quantization")


def _model_kwargs(name: str, image_shape) -> dict:
    from .composability import _model_kwargs as kwargs_of
    return kwargs_of(name, image_shape)


def _quantized(mod, params, mode: str, precision: str, dataset):
    """``mod`` quantized under Relay's default qconfig with ``calibrate_mode=mode`` and the
    knobs of ``precision``; the data-driven modes calibrate on ``dataset``."""
    from ..quantize import qconfig, quantize
    with qconfig(calibrate_mode=mode, **PRECISIONS[precision]):
        return quantize(mod, params, dataset=None if mode == "global_scale" else dataset)


def _build(mod, params=None, num_threads=None):
    from ..backends.build import build
    return build(mod, target="llvm", params=params, opt_level=3, num_threads=num_threads)


def _single_input(graph, where: str):
    info = graph.input_info()
    if len(info) != 1:
        raise ValueError(f"quantization: {where} takes {len(info)} inputs "
                         f"({', '.join(info)}); the experiment feeds one image tensor")
    ((name, (shape, dtype)),) = info.items()
    return name, tuple(shape), dtype


def _random_inputs(name: str, shape, dtype, count: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    return [{name: rng.standard_normal(shape).astype(dtype)} for _ in range(count)]


def _shape_text(shape) -> str:
    return "x".join(str(d) for d in shape)


def _progress(total: int, enabled: bool):
    from .composability import _Progress
    bar = _Progress(total, enabled=enabled)
    if bar._widget is not None:
        bar._widget.description = "quantization"
    return bar


# ---- the digits accuracy table -------------------------------------------------------------

def _batches(images: np.ndarray, batch_size: int, pad: bool):
    """``images`` in batches of ``batch_size``: ``(batch, real)``; a last short batch is padded
    with zeros (``pad``, its padding to be dropped) or left out."""
    for start in range(0, len(images), batch_size):
        chunk = images[start:start + batch_size]
        real = len(chunk)
        if real < batch_size:
            if not pad:
                return
            chunk = np.concatenate([chunk, np.zeros((batch_size - real,) + chunk.shape[1:],
                                                    chunk.dtype)])
        yield chunk, real


def _predictions(graph, images: np.ndarray, batch_size: int) -> np.ndarray:
    out = []
    for chunk, real in _batches(images, batch_size, pad=True):
        scores = np.asarray(graph.run(data=chunk))
        out.append(np.argmax(scores, axis=-1)[:real])
    return np.concatenate(out)


def digits_accuracy_table(calibrate_modes: Iterable[str] = CALIBRATE_MODES,
                          precisions: Iterable[str] = tuple(PRECISIONS), *,
                          calibration_images: int = 720, test_images: Optional[int] = None,
                          batch_size: Optional[int] = None, seed: int = 0,
                          progress: bool = True) -> list:
    """The rows of the digits accuracy table: float32, then each precision of ``precisions``
    (``"8/32"``, ``"8/16"``) in each calibrate mode, of the zoo's trained digits CNN (logits,
    no softmax) on the held-apart test split of :func:`load_digits_split` (``seed``; the first
    ``test_images`` of it when given).

    The network runs in batches of ``batch_size`` images (default: the whole test split at
    once; a last short batch is padded with zeros whose predictions are dropped). The
    data-driven calibrate modes see the first ``calibration_images`` training images, in
    batches of ``batch_size`` (a last short batch is left out, so that no zero padding enters
    the statistics). Each row: ``precision``,
    ``calibrate_mode`` (``"-"`` for float32), ``accuracy`` (%), ``correct``, ``images``.
    """
    from ..models.digits import digits_cnn, load_digits_split
    modes = _check_modes(calibrate_modes)
    names = _check_precisions(precisions)
    split = load_digits_split(seed=seed)
    x_test, y_test = split.x_test, split.y_test
    if test_images is not None:
        x_test, y_test = x_test[:test_images], y_test[:test_images]
    if len(x_test) == 0:
        raise ValueError("digits_accuracy_table: no test images")
    batch_size = int(batch_size or len(x_test))
    calibration = split.x_train[:calibration_images]
    dataset = [{"data": chunk} for chunk, _ in _batches(calibration, batch_size, pad=False)]
    if not dataset and any(m != "global_scale" for m in modes) and names:
        raise ValueError(f"digits_accuracy_table: {len(calibration)} calibration images, fewer "
                         f"than one batch of {batch_size}")
    mod, params = digits_cnn(batch_size=batch_size, softmax=False)

    bar = _progress(1 + len(modes) * len(names), progress)
    rows = []

    def row(precision, mode, predicted):
        correct = int(np.sum(predicted == y_test))
        rows.append({"precision": precision, "calibrate_mode": mode,
                     "accuracy": 100.0 * correct / len(y_test), "correct": correct,
                     "images": int(len(y_test))})

    try:
        bar.update("digits fp32")
        row("fp32", "-", _predictions(_build(mod, params), x_test, batch_size))
        bar.update("digits fp32", step=1)
        for precision in names:
            for mode in modes:
                bar.update(f"digits {precision} {mode}")
                qmod = _quantized(mod, params, mode, precision, dataset)
                row(precision, mode, _predictions(_build(qmod), x_test, batch_size))
                bar.update(f"digits {precision} {mode}", step=1)
    finally:
        bar.close()
    return rows


# ---- the zoo agreement table ---------------------------------------------------------------

def zoo_agreement(models: Union[str, Iterable[str]] = ZOO_MODELS,
                  calibrate_modes: Iterable[str] = CALIBRATE_MODES, *, image_shape=None,
                  num_inputs: int = 16, calibration_inputs: int = 4, precision: str = "8/32",
                  seed: int = 0, progress: bool = True) -> list:
    """The rows of the agreement table: for every model of the zoo in ``models`` (random
    weights) and every calibrate mode, how closely the int8 program (``precision``) follows
    the float32 one on ``num_inputs`` random inputs (standard normal, ``seed``): the top-1
    agreement in % and the SQNR in dB over all their outputs. The data-driven modes calibrate
    on ``calibration_inputs`` other random inputs (seed ``seed + 1``).

    ``image_shape``: None for each model's own input, one ``(C, H, W)`` for every model whose
    own input has C channels (``(3, 32, 32)`` shrinks the ImageNet models and leaves DQN's
    frames), or a dict ``{model: (C, H, W)}``, as in the composability experiment.
    """
    from .. import models as zoo
    from ..backends.build import flatten_result
    names = _names(models)
    modes = _check_modes(calibrate_modes)
    _check_precisions([precision])
    if num_inputs < 1 or calibration_inputs < 1:
        raise ValueError(f"zoo_agreement: num_inputs and calibration_inputs must be >= 1, got "
                         f"{num_inputs} and {calibration_inputs}")
    kwargs_of = {name: _model_kwargs(name, image_shape) for name in names}

    def outputs(graph, inputs) -> np.ndarray:
        return np.stack([np.concatenate([np.asarray(v).reshape(-1)
                                         for v in flatten_result(graph.run(**x))])
                         for x in inputs])

    bar = _progress(len(names) * (1 + len(modes)), progress)
    rows = []
    try:
        for name in names:
            bar.update(f"{name} fp32")
            mod, params = zoo.get(name, **kwargs_of[name])
            reference_graph = _build(mod, params)
            input_name, shape, dtype = _single_input(reference_graph, name)
            inputs = _random_inputs(input_name, shape, dtype, num_inputs, seed)
            dataset = _random_inputs(input_name, shape, dtype, calibration_inputs, seed + 1)
            # the scores of one input: the model's output at batch 1, its classes last
            out_shape = np.asarray(flatten_result(reference_graph.run(**inputs[0]))[0]).shape
            classes = out_shape[-1] if out_shape else 1
            reference = outputs(reference_graph, inputs)
            del reference_graph
            bar.update(f"{name} fp32", step=1)
            for mode in modes:
                bar.update(f"{name} {precision} {mode}")
                qgraph = _build(_quantized(mod, params, mode, precision, dataset))
                got = outputs(qgraph, inputs)
                scores = int(np.prod(out_shape))   # the first output's elements per input
                rows.append({"model": name, "input": _shape_text(shape), "calibrate_mode": mode,
                             "top1_agreement": top1_agreement(
                                 reference[:, :scores].reshape(-1, classes),
                                 got[:, :scores].reshape(-1, classes)),
                             "sqnr_db": sqnr_db(reference, got), "inputs": num_inputs})
                bar.update(f"{name} {precision} {mode}", step=1)
    finally:
        bar.close()
    return rows


# ---- the speed table -----------------------------------------------------------------------

def quantization_speed(models: Union[str, Iterable[str]] = SPEED_MODELS,
                       threads: Iterable[int] = THREADS, *, image_shape=None, number: int = 10,
                       repeat: int = 5, seed: int = 0, progress: bool = True) -> list:
    """The rows of the speed table: for every model and thread count, the median time of one
    inference in float32 and in int8 (Relay's default qconfig, calibrate_mode "global_scale":
    the scales change no kernel's work), both built with ``rb.build(..., target="llvm",
    opt_level=3, num_threads=n)``, and the int8 speedup (float32 time / int8 time).

    Both programs of a (model, threads) pair are built first; then ``repeat`` rounds time each
    once (``number`` runs, :meth:`GraphModule.benchmark`), interleaved so that a drift of the
    machine touches them alike. The input is random (``seed``); ``image_shape`` as in
    :func:`zoo_agreement`.
    """
    from .. import models as zoo
    names = _names(models)
    counts = [int(threads)] if isinstance(threads, int) else [int(n) for n in threads]
    if not counts or min(counts) < 1:
        raise ValueError(f"quantization_speed: thread counts must be >= 1, got {counts}")
    if number < 1 or repeat < 1:
        raise ValueError(f"quantization_speed: number and repeat must be >= 1, got {number} "
                         f"and {repeat}")
    kwargs_of = {name: _model_kwargs(name, image_shape) for name in names}
    bar = _progress(len(names) * len(counts), progress)
    rows = []
    try:
        for name in names:
            mod, params = zoo.get(name, **kwargs_of[name])
            qmod = None
            for n in counts:
                bar.update(f"{name} {n} thread{'s' if n > 1 else ''}")
                fp32 = _build(mod, params, num_threads=n)
                input_name, shape, dtype = _single_input(fp32, name)
                if qmod is None:
                    qmod = _quantized(mod, params, "global_scale", "8/32", None)
                int8 = _build(qmod, num_threads=n)
                (inputs,) = _random_inputs(input_name, shape, dtype, 1, seed)
                graphs = {"fp32": fp32, "int8": int8}
                for graph in graphs.values():
                    graph.set_input(**inputs)
                    graph.benchmark(number=1, repeat=1, warmup=1)   # caches and pools warm
                rounds = {label: [] for label in graphs}
                for _ in range(repeat):
                    for label, graph in graphs.items():
                        rounds[label].extend(graph.benchmark(number=number, repeat=1,
                                                             warmup=0).times_ms)
                fp32_ms = float(np.median(rounds["fp32"]))
                int8_ms = float(np.median(rounds["int8"]))
                rows.append({"model": name, "input": _shape_text(shape), "threads": n,
                             "fp32_ms": fp32_ms, "int8_ms": int8_ms,
                             "speedup": fp32_ms / int8_ms if int8_ms > 0 else math.inf})
                del graphs, fp32, int8
                bar.update(f"{name} {n} threads", step=1)
    finally:
        bar.close()
    return rows


# ---- the result ----------------------------------------------------------------------------

def _percent(value) -> str:
    return f"{value:.2f}"


def _db(value) -> str:
    return "inf" if value == math.inf else f"{value:.1f}"


def _ms(value) -> str:
    return f"{value:.3g}" if value < 10 else f"{value:.1f}"


class QuantizationResult:
    """The experiment's measurements: up to three lists of rows, ``accuracy``, ``agreement`` and
    ``speed`` (the fields of :data:`TABLES`; a table not measured is an empty list), and the
    ``settings`` they were taken with.

    ``table(name)`` shows one as the paper would: the digits accuracy with a row per precision
    and a column per calibrate mode; the agreement with a row per model and a column per mode
    (``metric="top1_agreement"`` or ``"sqnr_db"``); the speed with a row per model and thread
    count. ``paper_table()`` sets the digits accuracy beside the paper's ResNet-18 figures.
    """

    def __init__(self, accuracy: Sequence[dict] = (), agreement: Sequence[dict] = (),
                 speed: Sequence[dict] = (), settings: Optional[dict] = None):
        self.accuracy = [dict(r) for r in accuracy]
        self.agreement = [dict(r) for r in agreement]
        self.speed = [dict(r) for r in speed]
        self.settings = dict(settings or {})

    # -- views
    def rows(self, name: str) -> list:
        """The rows of table ``name`` (``"accuracy"``, ``"agreement"``, ``"speed"``)."""
        if name not in TABLES:
            raise ValueError(f"unknown table {name!r}; choose one of {', '.join(TABLES)}")
        return getattr(self, name)

    @property
    def measured(self) -> list:
        """The names of the tables that hold rows."""
        return [name for name in TABLES if self.rows(name)]

    def _modes(self, rows) -> list:
        present = {r["calibrate_mode"] for r in rows}
        return [m for m in CALIBRATE_MODES if m in present]

    def accuracy_of(self, precision: str, mode: str = "-") -> Optional[float]:
        """The digits accuracy (%) of ``precision`` in ``mode`` (float32 has one, in every
        mode); None when not measured."""
        for r in self.accuracy:
            if r["precision"] == precision and (precision == "fp32" or r["calibrate_mode"] == mode):
                return r["accuracy"]
        return None

    def table(self, name: str = "accuracy", metric: str = "top1_agreement") -> Table:
        """One table (see the class); ``metric`` picks the agreement table's measure."""
        rows = self.rows(name)
        if name == "accuracy":
            modes = self._modes(rows)
            precisions = list(dict.fromkeys(r["precision"] for r in rows))
            out = []
            for precision in precisions:
                row = {"precision": precision}
                for mode in modes:
                    value = self.accuracy_of(precision, mode)
                    row[mode] = "" if value is None else _percent(value)
                out.append(row)
            return Table(out)
        if name == "agreement":
            if metric not in ("top1_agreement", "sqnr_db"):
                raise ValueError(f"metric is 'top1_agreement' or 'sqnr_db', not {metric!r}")
            modes = self._modes(rows)
            out = []
            for model in dict.fromkeys(r["model"] for r in rows):
                mine = [r for r in rows if r["model"] == model]
                row = {"model": model, "input": mine[0]["input"]}
                for mode in modes:
                    found = [r[metric] for r in mine if r["calibrate_mode"] == mode]
                    cell = "" if not found else (_percent(found[0]) if metric == "top1_agreement"
                                                 else _db(found[0]))
                    row[f"{mode} {'top-1 %' if metric == 'top1_agreement' else 'SQNR dB'}"] = cell
                out.append(row)
            return Table(out)
        return Table([{"model": r["model"], "input": r["input"], "threads": r["threads"],
                       "fp32 ms": _ms(r["fp32_ms"]), "int8 ms": _ms(r["int8_ms"]),
                       "int8 speedup": f"{r['speedup']:.2f}"} for r in rows])

    def paper_table(self) -> Table:
        """The digits accuracy (best calibrate mode of each precision) beside the paper's
        ResNet-18 on ImageNet, and the points each precision loses against float32."""
        fp32 = self.accuracy_of("fp32")
        out = []
        for precision in ("fp32",) + tuple(PRECISIONS):
            values = [r["accuracy"] for r in self.accuracy if r["precision"] == precision]
            ours = max(values) if values else None
            paper = PAPER_RESNET18.get(precision)
            out.append({
                "precision": precision,
                "ResNet-18, ImageNet (paper) %": "" if paper is None else f"{paper:.1f}",
                "paper: points lost": "" if paper is None else
                f"{PAPER_RESNET18['fp32'] - paper:.1f}",
                "digits CNN (here, best mode) %": "" if ours is None else _percent(ours),
                "here: points lost": "" if ours is None or fp32 is None else
                f"{fp32 - ours:.2f}",
            })
        return Table(out)

    def tables(self) -> dict:
        """Every measured table by name (the agreement twice: ``agreement`` (top-1) and
        ``sqnr``), and ``paper`` when the accuracy was measured."""
        out = {}
        if self.accuracy:
            out["accuracy"] = self.table("accuracy")
            out["paper"] = self.paper_table()
        if self.agreement:
            out["agreement"] = self.table("agreement", "top1_agreement")
            out["sqnr"] = self.table("agreement", "sqnr_db")
        if self.speed:
            out["speed"] = self.table("speed")
        return out

    def notes(self, name: str) -> str:
        """How table ``name`` was measured, in a sentence or two (the markdown writer's)."""
        s = self.settings
        if name == "accuracy":
            return (f"Top-1 accuracy (%) of the zoo's trained digits CNN on the held-apart test "
                    f"split ({s.get('test_images', '?')} images); the data-driven modes "
                    f"calibrated on {s.get('calibration_images', '?')} training images; "
                    f"compiled for llvm (opt_level 3). The paper's ResNet-18 on ImageNet: "
                    f"{PAPER_RESNET18['fp32']}% fp32, {PAPER_RESNET18['8/32']}% 8/32. "
                    f"{_QCONFIG_NOTE}.")
        if name == "agreement":
            return (f"Random weights: int8 ({s.get('agreement_precision', '8/32')}) against "
                    f"float32 on {s.get('num_inputs', '?')} seeded random inputs (standard "
                    f"normal): top-1 agreement (%) and SQNR = 10 log10(sum ref^2 / "
                    f"sum (ref - int8)^2) in dB over all outputs; calibrated on "
                    f"{s.get('calibration_inputs', '?')} other random inputs. {_QCONFIG_NOTE}.")
        if name == "speed":
            return (f"Median of {s.get('repeat', '?')} interleaved rounds of "
                    f"{s.get('number', '?')} runs on the graph executor (llvm, opt_level 3); "
                    f"int8 with calibrate_mode global_scale, 8/32; int8 dot products: "
                    f"{s.get('int8_path', '?')}. {_QCONFIG_NOTE}.")
        raise ValueError(f"unknown table {name!r}; choose one of {', '.join(TABLES)}")

    def plot(self):
        """A matplotlib Figure with a panel per measured table: the digits accuracy by
        calibrate mode, the SQNR of each model by mode, and the int8 speedup."""
        try:
            from matplotlib.figure import Figure
        except ImportError as err:
            raise ImportError("QuantizationResult.plot needs matplotlib "
                              "(pip install matplotlib)") from err
        panels = self.measured
        if not panels:
            raise ValueError("QuantizationResult.plot: nothing was measured")
        fig = Figure(figsize=(4.6 * len(panels), 3.8), layout="constrained")
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        for ax, name in zip(axes, panels):
            if name == "accuracy":
                modes = self._modes(self.accuracy)
                x = np.arange(len(modes))
                precisions = [p for p in PRECISIONS if any(r["precision"] == p
                                                           for r in self.accuracy)]
                width = 0.8 / max(1, len(precisions))
                for i, p in enumerate(precisions):
                    values = [self.accuracy_of(p, m) for m in modes]
                    ax.bar(x - 0.4 + width * (i + 0.5),
                           [np.nan if v is None else v for v in values], width, label=p)
                fp32 = self.accuracy_of("fp32")
                if fp32 is not None:
                    ax.axhline(fp32, color="0.3", linestyle="--", linewidth=0.8, label="fp32")
                ax.set_xticks(x, modes, rotation=20, ha="right")
                low = min(r["accuracy"] for r in self.accuracy)
                ax.set_ylim(max(0.0, low - 3.0), 100.0)
                ax.set(ylabel="test accuracy (%)", title="digits CNN")
            elif name == "agreement":
                modes = self._modes(self.agreement)
                models = list(dict.fromkeys(r["model"] for r in self.agreement))
                x = np.arange(len(modes))
                width = 0.8 / max(1, len(models))
                for i, model in enumerate(models):
                    values = []
                    for m in modes:
                        found = [r["sqnr_db"] for r in self.agreement
                                 if r["model"] == model and r["calibrate_mode"] == m]
                        values.append(found[0] if found and math.isfinite(found[0]) else np.nan)
                    ax.bar(x - 0.4 + width * (i + 0.5), values, width, label=model)
                ax.set_xticks(x, modes, rotation=20, ha="right")
                ax.set(ylabel="SQNR (dB)", title="int8 vs fp32, random weights")
            else:
                labels = [f"{r['model']}\n{r['threads']} thr." for r in self.speed]
                ax.bar(np.arange(len(labels)), [r["speedup"] for r in self.speed])
                ax.axhline(1.0, color="0.4", linestyle="--", linewidth=0.8)
                ax.set_xticks(np.arange(len(labels)), labels)
                ax.set(ylabel="int8 speedup over fp32 (x)", title="speed (llvm)")
            if name != "speed":
                ax.legend(fontsize="small")
            ax.grid(axis="y", alpha=0.3)
        return fig

    def __repr__(self) -> str:
        parts = [f"QuantizationResult({', '.join(self.measured) or 'empty'})"]
        for name, table in self.tables().items():
            parts.append(f"\n{name}:\n{table}")
        return "\n".join(parts)

    def _repr_html_(self) -> str:
        return "".join(f"<p><b>{name}</b></p>{table._repr_html_()}"
                       for name, table in self.tables().items()) or "<p>(empty)</p>"

    # -- files
    def to_csv(self, path, name: str = "accuracy") -> Path:
        """Write the rows of table ``name`` as CSV (the fields of :data:`TABLES`); returns the
        path."""
        path = Path(path)
        columns = TABLES[name] if name in TABLES else self.rows(name)
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
            writer.writeheader()
            for r in self.rows(name):
                writer.writerow({c: r.get(c, "") for c in columns})
        return path

    def to_json(self, path, name: Optional[str] = None) -> Path:
        """Write the rows of table ``name`` (every table when None) and the settings as JSON;
        returns the path. Infinite SQNRs are written as the string ``"inf"``."""
        path = Path(path)
        names = list(TABLES) if name is None else [name]
        doc = {"experiment": "quantization", "settings": self.settings,
               "paper_resnet18": PAPER_RESNET18}
        for n in names:
            doc[n] = [{k: _jsonable(v) for k, v in r.items()} for r in self.rows(n)]
        path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        return path

    def to_markdown(self, path, name: Optional[str] = None) -> Path:
        """Write table ``name`` (every measured table when None), with its notes, as markdown;
        the accuracy table comes with the paper's figures beside it. Returns the path."""
        path = Path(path)
        names = self.measured if name is None else [name]
        sections = []
        for n in names:
            sections.append(f"# {_TITLES[n]}\n\n{self.notes(n)}\n")
            if n == "accuracy":
                sections.append(_markdown_table(self.table("accuracy")))
                sections.append("Beside the paper's ResNet-18 on ImageNet:\n")
                sections.append(_markdown_table(self.paper_table()))
            elif n == "agreement":
                sections.append("Top-1 agreement (%):\n")
                sections.append(_markdown_table(self.table("agreement", "top1_agreement")))
                sections.append("SQNR (dB):\n")
                sections.append(_markdown_table(self.table("agreement", "sqnr_db")))
            else:
                sections.append(_markdown_table(self.table(n)))
        path.write_text("\n".join(sections), encoding="utf-8")
        return path

    def write(self, directory) -> list:
        """Write every measured table as ``quantization_NAME.md``, ``.csv`` and ``.json`` into
        ``directory`` (created if needed), and ``quantization.png`` when matplotlib is
        installed; returns the paths written."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        written = []
        for name in self.measured:
            stem = directory / f"quantization_{name}"
            written += [self.to_markdown(stem.with_suffix(".md"), name),
                        self.to_csv(stem.with_suffix(".csv"), name),
                        self.to_json(stem.with_suffix(".json"), name)]
        return save_figure(self, directory / "quantization.png", written)

    @classmethod
    def load(cls, path) -> "QuantizationResult":
        """Read a result written by :meth:`to_json`."""
        doc, decode = read_result(path, "quantization")
        tables = {n: [decode(r) for r in doc.get(n, [])] for n in TABLES}
        return cls(settings=doc.get("settings"), **tables)


def _jsonable(value):
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def _markdown_table(table: Table) -> str:
    rows = table.rows
    cols = list(rows[0]) if rows else []
    lines = ["| " + " | ".join(cols) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(cols))) + "|"]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


# ---- the experiment ------------------------------------------------------------------------

def quantization(models: Union[str, Iterable[str]] = ZOO_MODELS,
                 speed_models: Union[str, Iterable[str]] = SPEED_MODELS,
                 threads: Iterable[int] = THREADS, *,
                 calibrate_modes: Iterable[str] = CALIBRATE_MODES, image_shape=None,
                 digits: bool = True, calibration_images: int = 720, num_inputs: int = 16,
                 calibration_inputs: int = 4, number: int = 10, repeat: int = 5, seed: int = 0,
                 progress: bool = True) -> QuantizationResult:
    """All three tables (see the module): the digits accuracy (unless ``digits=False``), the
    agreement of ``models`` and the speed of ``speed_models`` at each of ``threads`` (an empty
    ``models`` or ``speed_models`` leaves that table out). ``image_shape`` applies to the
    agreement and the speed tables, as in :func:`zoo_agreement`."""
    from ..backends.llvm.jit import int8_path
    model_names = [models] if isinstance(models, str) else list(models)
    speed_names = [speed_models] if isinstance(speed_models, str) else list(speed_models)
    counts = [int(threads)] if isinstance(threads, int) else [int(n) for n in threads]
    modes = _check_modes(calibrate_modes)
    for name in model_names + speed_names:   # every name is checked before anything runs
        _names([name])
        _model_kwargs(name, image_shape)
    started = time.perf_counter()
    accuracy = agreement = speed = ()
    settings = {"calibrate_modes": modes, "seed": seed, "target": "llvm", "opt_level": 3,
                "image_shape": _shape_setting(image_shape), "qconfig": _QCONFIG_NOTE,
                "int8_path": int8_path()}
    if digits:
        from ..models.digits import load_digits_split
        accuracy = digits_accuracy_table(modes, calibration_images=calibration_images, seed=seed,
                                         progress=progress)
        split = load_digits_split(seed=seed)
        batch = len(split.x_test)   # the table's batch: the whole test split
        used = min(calibration_images, len(split.x_train)) // batch * batch
        settings.update(test_images=batch, calibration_images=used)
    if model_names:
        agreement = zoo_agreement(model_names, modes, image_shape=image_shape,
                                  num_inputs=num_inputs, calibration_inputs=calibration_inputs,
                                  seed=seed, progress=progress)
        settings.update(num_inputs=num_inputs, calibration_inputs=calibration_inputs,
                        agreement_precision="8/32")
    if speed_names:
        speed = quantization_speed(speed_names, counts, image_shape=image_shape, number=number,
                                   repeat=repeat, seed=seed, progress=progress)
        settings.update(number=number, repeat=repeat, threads=counts)
    settings["seconds"] = round(time.perf_counter() - started, 1)
    return QuantizationResult(accuracy, agreement, speed, settings)


def _shape_setting(value):
    if value is None:
        return None
    if isinstance(value, dict):
        return {k: list(v) if v is not None else None for k, v in value.items()}
    return list(value)
