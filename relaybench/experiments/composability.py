"""The composability experiment: the speedup from enabling Relay's passes one after another.

The Relay paper (Roesch et al., 2019, "speedup from successively enabling passes") compiles each
vision workload nine times. The baseline is opt_level 0 (every operator its own kernel, nothing
folded); each later configuration enables one more pass on top of the ones before it, in this
order: FuseOps, FoldConstant, EliminateCommonSubexpr, CombineParallelConv2D, FoldScaleAxis,
CanonicalizeCast, CanonicalizeOps, AlterOpLayout.

Every configuration is a plain call of the public API: ``rb.build(mod, params=params,
opt_level=3, required_pass=<the passes enabled so far>, disabled_pass=<the passes not enabled
yet>)``. The passes of Relay's default pipeline that are not in the list (SimplifyInference,
SimplifyExpr, InferType) run in every configuration, the baseline included, as they do at
opt_level 0. With FuseOps disabled the graph executor gives every operator call a kernel of its
own, which is Relay's opt_level 0. CombineParallelConv2D is an opt_level-4 pass in Relay; naming
the enabled passes in ``required_pass`` makes it run in its configuration at opt_level 3.

All nine configurations of a model are built first; then ``repeat`` rounds each time every
configuration once (``number`` runs, :meth:`GraphModule.benchmark`), interleaved so that a drift
of the machine touches them alike, and the median round is reported; and its output is checked against the baseline's on the same random input
(``allclose``, rtol 1e-4) so that a pass that changed the program's meaning cannot look fast: a
mismatch raises :class:`OutputMismatchError`.

>>> from relaybench.experiments import composability
>>> result = composability(["dqn"], image_shape={"dqn": (4, 36, 36)}, number=1, repeat=1,
...                        progress=False)                                    # doctest: +SKIP
>>> result.table()                                                             # doctest: +SKIP
configuration            dqn
-----------------------  -----
baseline                 1.00
+ FuseOps                ...
"""

from __future__ import annotations

import csv
import inspect
import json
import math
import sys
import time
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

import numpy as np

from ..errors import RelayError
from ..viz.table import Table

__all__ = ["composability", "ComposabilityResult", "OutputMismatchError", "CONFIGURATIONS",
           "PASS_ORDER", "MODELS", "COLUMNS"]

#: The passes, in the order the experiment enables them.
PASS_ORDER: tuple = ("FuseOps", "FoldConstant", "EliminateCommonSubexpr", "CombineParallelConv2D",
                     "FoldScaleAxis", "CanonicalizeCast", "CanonicalizeOps", "AlterOpLayout")

#: The configurations' names, baseline first: configuration ``i`` enables ``PASS_ORDER[:i]``.
CONFIGURATIONS: tuple = ("baseline",) + tuple(f"+ {name}" for name in PASS_ORDER)

#: The paper's workloads.
MODELS: tuple = ("resnet18", "mobilenet_v2", "dqn", "vgg16")

#: The fields of every row, in the order the CSV file writes them.
COLUMNS: tuple = ("model", "target", "configuration", "input", "median_ms", "std_ms", "speedup",
                  "kernels", "distinct_kernels", "layout_transforms", "compile_s")

_RTOL = 1e-4
# Elements near zero are compared with an absolute tolerance relative to the output's largest
# magnitude: float32 rounding of the far tail of a softmax (probabilities far below the largest)
# or of a Q-value near zero is not a pass's error. A wrong pass (a misplaced scale, a bad
# layout) moves the outputs by amounts of the order of the outputs themselves.
_ATOL_SCALE = 1e-5

_INT_COLUMNS = ("kernels", "distinct_kernels", "layout_transforms")
_FLOAT_COLUMNS = ("median_ms", "std_ms", "speedup", "compile_s")


class OutputMismatchError(RelayError):
    """A configuration's output differs from the baseline's: one of its passes changed the
    program's meaning."""


def _passes_of(index: int) -> tuple:
    """(enabled, disabled) pass names of configuration ``index``."""
    return PASS_ORDER[:index], PASS_ORDER[index:]


# ---- the result ------------------------------------------------------------------------------

class ComposabilityResult:
    """The experiment's measurements: one row per (model, target, configuration).

    ``rows`` are dicts with the fields of :data:`COLUMNS`: ``median_ms`` (and ``std_ms``) of one
    inference, ``speedup`` over the baseline of the same model and target, ``kernels`` (kernel
    calls per inference), ``distinct_kernels`` (kernels compiled), ``layout_transforms``
    (layout_transform operators run per inference) and ``compile_s`` (seconds ``rb.build``
    took; kernels found in the disk cache are not compiled again). ``settings`` records how the
    measurements were taken.
    """

    def __init__(self, rows: list, settings: Optional[dict] = None):
        self.rows = [dict(r) for r in rows]
        self.settings = dict(settings or {})

    # -- views
    @property
    def models(self) -> list:
        return list(dict.fromkeys(r["model"] for r in self.rows))

    @property
    def targets(self) -> list:
        return list(dict.fromkeys(r["target"] for r in self.rows))

    @property
    def configurations(self) -> list:
        present = {r["configuration"] for r in self.rows}
        known = [c for c in CONFIGURATIONS if c in present]
        return known + [c for c in dict.fromkeys(r["configuration"] for r in self.rows)
                        if c not in known]

    def _series(self) -> list:
        """(label, model, target) of every series: one per model, per target when several."""
        many = len(self.targets) > 1
        return [(f"{m} ({t})" if many else m, m, t)
                for t in self.targets for m in self.models
                if any(r["model"] == m and r["target"] == t for r in self.rows)]

    def _value(self, model: str, target: str, configuration: str, metric: str):
        for r in self.rows:
            if (r["model"], r["target"], r["configuration"]) == (model, target, configuration):
                return r[metric]
        return None

    def table(self, metric: str = "speedup") -> Table:
        """A table like the paper's: the configurations as rows, a column of ``metric``
        (``"speedup"``, ``"median_ms"``, ``"kernels"``, ...) per model (per model and target when
        there are several targets)."""
        if metric not in COLUMNS or metric in ("model", "target", "configuration"):
            raise ValueError(f"unknown metric {metric!r}; choose one of "
                             f"{', '.join(c for c in COLUMNS[3:])}")
        series = self._series()
        rows = []
        for config in self.configurations:
            row = {"configuration": config}
            for label, model, target in series:
                value = self._value(model, target, config, metric)
                row[label] = _cell(value, metric)
            rows.append(row)
        return Table(rows)

    def speedups(self) -> dict:
        """``{(model, target): [speedup of each configuration, in order]}``."""
        return {(m, t): [self._value(m, t, c, "speedup") for c in self.configurations]
                for _label, m, t in self._series()}

    def plot(self, log: bool = False, kind: str = "bar"):
        """The paper's figure as a matplotlib Figure: the speedup over the baseline of each
        configuration, one series per model (grouped bars, or lines with ``kind="line"``), a
        dashed line at 1x; ``log=True`` for a logarithmic y axis."""
        try:
            from matplotlib.figure import Figure
        except ImportError as err:
            raise ImportError("ComposabilityResult.plot needs matplotlib "
                              "(pip install matplotlib)") from err
        if kind not in ("bar", "line"):
            raise ValueError(f"kind is 'bar' or 'line', not {kind!r}")
        configs = self.configurations
        series = self._series()
        fig = Figure(figsize=(max(7.0, 1.0 * len(configs) + 1.5), 4.2), layout="constrained")
        ax = fig.add_subplot()
        x = np.arange(len(configs))
        width = 0.8 / max(1, len(series))
        for i, (label, model, target) in enumerate(series):
            values = [self._value(model, target, c, "speedup") for c in configs]
            values = [np.nan if v is None else v for v in values]
            if kind == "bar":
                ax.bar(x - 0.4 + width * (i + 0.5), values, width, label=label)
            else:
                ax.plot(x, values, marker="o", label=label)
        ax.axhline(1.0, color="0.4", linestyle="--", linewidth=0.8)
        ax.set_xticks(x, configs, rotation=30, ha="right")
        if log:
            ax.set_yscale("log")
        ax.set_ylabel("speedup over the baseline (x)" + (", log scale" if log else ""))
        ax.set_xlabel("passes enabled, cumulatively")
        targets = ", ".join(self.targets)
        ax.set_title(f"Speedup from successively enabling passes ({targets})")
        ax.legend(title="model", fontsize="small")
        ax.grid(axis="y", alpha=0.3)
        return fig

    def __repr__(self) -> str:
        return (f"ComposabilityResult({len(self.models)} models x {len(self.targets)} targets x "
                f"{len(self.configurations)} configurations)\n{self.table()}")

    def _repr_html_(self) -> str:
        return ("<p><b>Speedup over the baseline</b> (opt_level 0) from successively enabling "
                f"passes ({', '.join(self.targets)})</p>" + self.table()._repr_html_())

    # -- files
    def to_csv(self, path) -> Path:
        """Write the rows as CSV (the fields of :data:`COLUMNS`); returns the path."""
        path = Path(path)
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(COLUMNS), extrasaction="ignore")
            writer.writeheader()
            for r in self.rows:
                writer.writerow({c: r.get(c, "") for c in COLUMNS})
        return path

    def to_json(self, path) -> Path:
        """Write the rows and the settings as JSON; returns the path."""
        path = Path(path)
        doc = {"experiment": "composability", "configurations": list(CONFIGURATIONS),
               "settings": self.settings, "rows": self.rows}
        path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path) -> "ComposabilityResult":
        """Read a result written by :meth:`to_csv` (``.csv``) or :meth:`to_json` (any other
        suffix)."""
        path = Path(path)
        if path.suffix.lower() == ".csv":
            with path.open(newline="", encoding="utf-8") as f:
                rows = []
                for n, raw in enumerate(csv.DictReader(f), start=2):
                    try:
                        rows.append(_typed_row(raw))
                    except (KeyError, ValueError) as err:
                        raise ValueError(f"{path}:{n}: not a composability row: {err}") from None
            return cls(rows)
        doc = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict) or doc.get("experiment") != "composability":
            raise ValueError(f"{path}: not a composability result (no 'experiment': "
                             f"'composability' field)")
        return cls(doc["rows"], doc.get("settings"))


def _typed_row(raw: dict) -> dict:
    row = {}
    for c in COLUMNS:
        value = raw[c]
        if c in _INT_COLUMNS:
            row[c] = int(value)
        elif c in _FLOAT_COLUMNS:
            row[c] = float(value)
        else:
            row[c] = value
    return row


def _cell(value, metric: str):
    if value is None:
        return ""
    if metric == "speedup":
        return f"{value:.2f}"
    if metric in ("median_ms", "std_ms"):
        return f"{value:.3g}" if value < 10 else f"{value:.1f}"
    if metric == "compile_s":
        return f"{value:.2f}"
    return value


# ---- progress --------------------------------------------------------------------------------

class _Progress:
    """A minimal progress bar: an ipywidgets IntProgress with a label inside a notebook kernel,
    else one line on stderr (redrawn in place on a terminal, one line per step otherwise)."""

    def __init__(self, total: int, enabled: bool = True, stream=None):
        self.total = total
        self.done = 0
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self._widget = None
        self._label = None
        if enabled:
            self._widget_start()

    def _widget_start(self) -> None:
        try:
            from IPython import get_ipython
            shell = get_ipython()
            if shell is None or getattr(shell, "kernel", None) is None:
                return
            import ipywidgets
            from IPython.display import display
        except Exception:  # not in a notebook kernel, or no ipywidgets: the text bar
            return
        self._widget = ipywidgets.IntProgress(value=0, min=0, max=self.total,
                                              description="composability")
        self._label = ipywidgets.Label(value="")
        display(ipywidgets.HBox([self._widget, self._label]))

    def _tty(self) -> bool:
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty())

    def update(self, label: str, step: int = 0) -> None:
        """Show ``label`` for the step now running, after ``step`` more steps are done."""
        self.done += step
        if not self.enabled:
            return
        if self._widget is not None:
            self._widget.value = self.done
            self._label.value = f"{self.done}/{self.total} {label}"
            return
        if self._tty():
            width = 24
            filled = int(width * self.done / self.total) if self.total else width
            self.stream.write(f"\r\x1b[K[{'#' * filled}{'.' * (width - filled)}] "
                              f"{self.done}/{self.total} {label}")
        elif step == 0:  # a log file: one line as each step starts
            self.stream.write(f"[{self.done + 1}/{self.total}] {label}\n")
        else:
            return
        self.stream.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        if self._widget is not None:
            self._widget.value = self.done
            self._widget.bar_style = "success" if self.done == self.total else "warning"
            self._label.value = f"{self.done}/{self.total} done"
        elif self._tty():
            self.stream.write("\n")
            self.stream.flush()


# ---- the experiment --------------------------------------------------------------------------

def checked_model_names(models, experiment: str) -> list:
    """``models`` (a name or names) as a list, every one checked against the zoo before
    anything is compiled (an unknown one is the zoo's KeyError); ``experiment`` names the caller
    in the error for an empty list."""
    names = [models] if isinstance(models, str) else list(models)
    if not names:
        raise ValueError(f"{experiment}: no models given")
    for name in names:
        _model_function(name)
    return names


def _model_function(name: str):
    from .. import models
    if name not in models.list_models():
        models.get(name)  # raises KeyError naming the close matches
    return getattr(models, name)


def _model_kwargs(name: str, image_shape) -> dict:
    """The keyword arguments that give model ``name`` the requested input.

    ``image_shape`` is None (every model's own input), a dict from model name to (C, H, W)
    (models left out keep their own), or one (C, H, W) for every model whose own input has C
    channels: ``(3, 32, 32)`` shrinks the ImageNet models and leaves DQN's four 84x84 frames.
    """
    if image_shape is None:
        return {}
    fn = _model_function(name)
    params = inspect.signature(fn).parameters
    if isinstance(image_shape, dict):
        shape = image_shape.get(name)
        if shape is None:
            return {}
        if "image_shape" not in params:
            raise ValueError(f"composability: model {name!r} takes no image_shape")
        return {"image_shape": tuple(int(s) for s in shape)}
    shape = tuple(int(s) for s in image_shape)
    if len(shape) != 3:
        raise ValueError(f"composability: image_shape is (channels, height, width), got {shape}")
    if "image_shape" not in params:
        return {}
    own = tuple(params["image_shape"].default)
    if len(own) == 3 and own[0] == shape[0]:
        return {"image_shape": shape}
    return {}


def _check_targets(targets: Sequence[str]) -> list:
    from ..backends.target import KINDS, Target
    checked = []
    for t in targets:
        kind = str(t).split()[0] if str(t).strip() else str(t)
        if kind == "interpreter":
            raise ValueError("composability: the interpreter is not a target of this experiment "
                             f"(it compiles nothing); available targets: {', '.join(KINDS)}")
        if kind not in KINDS:
            raise ValueError(f"composability: target {t!r} has no backend yet; available "
                             f"targets: {', '.join(KINDS)}")
        checked.append(str(Target.parse(t)))
    return checked


def _random_inputs(graph, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    inputs = {}
    for name, entry in graph.input_info().items():
        shape, dtype = entry
        if np.dtype(dtype).kind == "f":
            inputs[name] = rng.standard_normal(shape).astype(dtype)
        else:
            inputs[name] = rng.integers(0, 2, size=shape).astype(dtype)
    return inputs


def _flat_outputs(value) -> list:
    from ..backends.build import flatten_result
    return flatten_result(value)


def _compare(outputs: list, reference: list, where: str) -> None:
    if len(outputs) != len(reference):
        raise OutputMismatchError(f"{where}: {len(outputs)} outputs, the baseline has "
                                  f"{len(reference)}")
    for i, (got, want) in enumerate(zip(outputs, reference)):
        if got.shape != want.shape:
            raise OutputMismatchError(f"{where}: output {i} has shape {got.shape}, the baseline's "
                                      f"{want.shape}")
        scale = float(np.max(np.abs(want))) if want.size else 0.0
        atol = _ATOL_SCALE * scale
        if not np.allclose(got, want, rtol=_RTOL, atol=atol, equal_nan=True):
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
            worst = np.unravel_index(int(np.nanargmax(diff)), diff.shape)
            raise OutputMismatchError(
                f"{where}: output {i} differs from the baseline's (rtol {_RTOL}, atol {atol:.3g}): "
                f"largest difference {float(diff[worst]):.3g} at {tuple(int(j) for j in worst)} "
                f"({float(got[worst]):.6g} vs {float(want[worst]):.6g})")


def _build(mod, target, params, disabled_pass, required_pass, num_threads):
    """One configuration's executable, through the public API."""
    from ..backends.build import build
    return build(mod, target=target, params=params, opt_level=3, disabled_pass=disabled_pass,
                 required_pass=required_pass, num_threads=num_threads)


def _count_layout_transforms(graph) -> int:
    return sum(node.kernel.ops.count("layout_transform") for node in graph.graph.nodes)


def composability(models: Union[str, Iterable[str]] = MODELS,
                  targets: Union[str, Iterable[str]] = ("llvm",), *,
                  image_shape=None, number: int = 10, repeat: int = 5,
                  num_threads: Optional[int] = None, progress: bool = True,
                  seed: int = 0) -> ComposabilityResult:
    """Time every model on every target in each configuration of :data:`CONFIGURATIONS`.

    ``models``: names from the zoo (``rb.models.list_models()``); ``targets``: targets with a
    code generator (``"llvm"``); ``image_shape``: None for each model's own input, one
    ``(C, H, W)`` for every model with C input channels (DQN's four frames stay as they are
    unless C is 4), or a dict ``{model: (C, H, W)}``. ``number``/``repeat`` go to
    :meth:`GraphModule.benchmark` (the median of the ``repeat`` rounds is reported);
    ``num_threads`` to ``rb.build``. ``progress`` shows a progress bar (a widget in a notebook,
    a line on stderr elsewhere). The input is random (``seed``) and the same for every
    configuration of a model.

    Raises :class:`OutputMismatchError` when a configuration's output is not ``allclose`` to the
    baseline's (rtol 1e-4), KeyError for an unknown model and ValueError for a target without a
    backend.
    """
    model_names = [models] if isinstance(models, str) else list(models)
    target_names = [targets] if isinstance(targets, str) else list(targets)
    if not model_names:
        raise ValueError("composability: no models given")
    if not target_names:
        raise ValueError("composability: no targets given")
    if number < 1 or repeat < 1:
        raise ValueError(f"composability: number and repeat must be >= 1, got {number} and "
                         f"{repeat}")
    from .. import models as zoo
    kwargs_of = {}
    for name in model_names:  # every name is checked before anything is compiled
        _model_function(name)
        kwargs_of[name] = _model_kwargs(name, image_shape)
    target_names = _check_targets(target_names)

    bar = _Progress(len(model_names) * len(target_names) * len(CONFIGURATIONS), enabled=progress)
    rows = []
    inputs_of = {}
    try:
        for name in model_names:
            mod, params = zoo.get(name, **kwargs_of[name])
            for target in target_names:
                reference = None
                built = []
                for index, config in enumerate(CONFIGURATIONS):
                    bar.update(f"{name} {target} {config}")
                    enabled, disabled = _passes_of(index)
                    where = f"composability: {name} on {target}, configuration {config!r}"
                    start = time.perf_counter()
                    graph = _build(mod, target, params, disabled, enabled, num_threads)
                    compile_s = time.perf_counter() - start
                    if name not in inputs_of:
                        inputs_of[name] = _random_inputs(graph, seed)
                    outputs = _flat_outputs(graph.run(**inputs_of[name]))
                    if reference is None:
                        reference = outputs
                    else:
                        _compare(outputs, reference, where)
                    graph.benchmark(number=1, repeat=1, warmup=1)   # caches and pools warm
                    built.append((config, graph, compile_s))
                    bar.update(f"{name} {target} {config}", step=1)
                # Interleaved rounds: round r times every configuration once, so a drift of the
                # machine's clock or load touches them all alike.
                rounds = {config: [] for config, _, _ in built}
                for _ in range(repeat):
                    for config, graph, _ in built:
                        rounds[config].extend(graph.benchmark(number=number, repeat=1,
                                                              warmup=0).times_ms)
                baseline_ms = None
                inputs = inputs_of[name]
                for config, graph, compile_s in built:
                    times = np.asarray(rounds[config])
                    median_ms = float(np.median(times))
                    if baseline_ms is None:
                        baseline_ms = median_ms
                    speedup = 1.0 if config == CONFIGURATIONS[0] else (
                        baseline_ms / median_ms if median_ms > 0 else math.inf)
                    rows.append({
                        "model": name, "target": target, "configuration": config,
                        "input": "; ".join("x".join(str(d) for d in v.shape)
                                           for v in inputs.values()),
                        "median_ms": median_ms, "std_ms": float(times.std()),
                        "speedup": speedup, "kernels": len(graph.graph.nodes),
                        "distinct_kernels": len(graph.kernels),
                        "layout_transforms": _count_layout_transforms(graph),
                        "compile_s": compile_s,
                    })
                del built, rounds
    finally:
        bar.close()
    settings = {"models": model_names, "targets": target_names,
                "image_shape": _jsonable(image_shape), "number": number, "repeat": repeat,
                "num_threads": num_threads, "seed": seed, "opt_level": 3,
                "pass_order": list(PASS_ORDER), "rtol": _RTOL}
    return ComposabilityResult(rows, settings)


def _jsonable(value):
    if value is None:
        return None
    if isinstance(value, dict):
        return {k: list(v) if v is not None else None for k, v in value.items()}
    return list(value)
