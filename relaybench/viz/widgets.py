"""Notebook widgets: the pass explorer and the fusion view.

Both are thin: they call the library's public verbs (the pass pipelines, the
:class:`~relaybench.passes.instruments.Snapshots` instrument, :func:`relaybench.build`, the
compiled module's ``benchmark`` / ``profile`` / ``source``, and the views of
:mod:`relaybench.viz`) and lay the results out with ``ipywidgets``. Each is also driven from
Python, so a test or a script can do what a click does:

* :class:`PassExplorer` toggles and reorders the passes of a pipeline, runs them, steps through
  the passes that changed the program (text diff, graph, op counts), and times the configuration
  on the interpreter or a compiled target, keeping a table of every configuration timed; its
  "Compare" button (:meth:`PassExplorer.compare`) times the configurations again in interleaved
  rounds and reports medians with confidence intervals, and whether each difference is real. Its
  quantization toggle puts :func:`relaybench.quantize.quantize` (annotate, calibrate, realize)
  in front of the pipeline, under a qconfig chosen in the widget. A quantized program also runs
  on the simulated accelerator (target ``accel``): the pipeline then packs it for the
  accelerator (GraphPack) after quantization, and the timing says how much of the time is the
  accelerator's (simulated) and how much the CPU's.
* :class:`FusionView` lists the fused groups of a compiled module with their time per call and
  where each runs (the accelerator, with its cycles, or the CPU), and shows, for the group
  selected, its loop IR, LLVM IR, assembly (or accelerator program) and dataflow graph; below,
  the whole program's graph, where a click on a fused group opens that group's kernel.

A widget shows itself when it is the last expression of a cell (``_ipython_display_``); its
``widget`` attribute is the ``ipywidgets`` box. The output areas carry stable CSS classes
(``rb-ir-text``, ``rb-graph``, ``rb-results``, ...) and every pass check box is labelled with its
pass's name, so a browser can find them.
"""

from __future__ import annotations

import difflib
import html
import importlib
import time
from typing import Optional, Sequence

import numpy as np

__all__ = ["PassExplorer", "FusionView", "QUANTIZED_TARGETS", "ACCEL_TARGET", "PRECISIONS", "sqnr_db"]

_VIEW_MODULES = {"to_dot": "dot", "render_svg": "dot", "diff": "snapshot_diff"}


def _widgets():
    try:
        import ipywidgets
    except ImportError as err:  # pragma: no cover - ipywidgets is a dependency of the workbench
        raise ImportError("relaybench.viz widgets need ipywidgets: pip install ipywidgets") from err
    return ipywidgets


def _view(name: str):
    """A view of :mod:`relaybench.viz` (``to_dot``, ``render_svg``, ``diff``), or None when its
    module is not available, so the widgets fall back to plain text."""
    try:
        module = importlib.import_module(f"relaybench.viz.{_VIEW_MODULES[name]}")
    except ImportError:
        return None
    return getattr(module, name, None)


def _pre(text: str, css: str = "") -> str:
    style = "font-family: monospace; font-size: 12px; white-space: pre; overflow: auto; margin: 0"
    cls = f' class="{css}"' if css else ""
    return f"<pre{cls} style=\"{style}\">{html.escape(text)}</pre>"


def _graph_view(subject, cache: Optional[dict] = None) -> tuple:
    """``(html, svg)`` for the dataflow graph of a module, a function or a compiled module (its
    groups on the accelerator drawn apart): the SVG drawn through
    :func:`relaybench.viz.to_dot` and :func:`relaybench.viz.render_svg`, or, when those are not
    available or the drawing fails, the program's text (``svg`` is then None)."""
    if cache is not None and subject in cache:
        return cache[subject]
    to_dot, render_svg = _view("to_dot"), _view("render_svg")
    result = None
    note = "graph view unavailable (relaybench.viz.dot is missing)"
    if to_dot is not None and render_svg is not None:
        try:
            svg = render_svg(to_dot(subject))
            result = (f'<div style="overflow: auto; max-height: 600px">{svg}</div>', svg)
        except Exception as err:  # graphviz missing or failing: show the text instead
            note = f"graph view unavailable: {type(err).__name__}: {err}"
    if result is None:
        program = getattr(subject, "mod", subject)   # a compiled module: its optimized program
        text = program.astext() if hasattr(program, "astext") else str(program)
        result = (f"<p><i>{html.escape(note)}</i></p>" + _pre(text), None)
    if cache is not None:
        cache[subject] = result
    return result


def _diff_html(record, diff=None) -> str:
    """The program before and after a pass (a :class:`~relaybench.passes.instruments.PassRecord`)
    side by side with the changes marked: the side-by-side view of ``diff`` (a
    :class:`relaybench.viz.Diff` of the record) when given, else ``difflib``'s table of their text."""
    before, after, label = record.before, record.after, record.label
    note = ""
    if diff is not None:
        try:
            return diff.side_by_side()
        except Exception as err:  # fall back to the text diff, saying why
            note = f"<p><i>{html.escape(f'relaybench.viz.diff failed: {type(err).__name__}: {err}')}</i></p>"
    table = difflib.HtmlDiff(wrapcolumn=100).make_table(
        before.astext().splitlines(), after.astext().splitlines(),
        f"before {label}", f"after {label}", context=True, numlines=3)
    return note + f'<div style="font-family: monospace; font-size: 12px; overflow: auto">{table}</div>'


def _flatten(value) -> list:
    from ..backends.build import flatten_result
    return flatten_result(value)


def _max_error(got, want) -> float:
    a, b = _flatten(got), _flatten(want)
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        return float("inf")
    errs = [float(np.max(np.abs(x.astype("float64") - y.astype("float64")))) if x.size else 0.0
            for x, y in zip(a, b)]
    return max(errs, default=0.0)


def _agrees(got, want, rtol: float = 1e-4, atol: float = 1e-4) -> bool:
    a, b = _flatten(got), _flatten(want)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return False
        scale = float(np.max(np.abs(y))) if y.size else 0.0
        if not np.allclose(x, y, rtol=rtol, atol=atol * max(scale, 1.0), equal_nan=True):
            return False
    return True


def _bit_exact(got, want) -> bool:
    """Whether two results are the same arrays: shapes, dtypes and every bit of every value."""
    a, b = _flatten(got), _flatten(want)
    return len(a) == len(b) and all(x.shape == y.shape and x.dtype == y.dtype and
                                    x.tobytes() == y.tobytes() for x, y in zip(a, b))


def sqnr_db(got, want) -> float:
    """The signal-to-quantization-noise ratio of ``got`` against ``want`` in decibels,
    ``10 log10(sum want**2 / sum (got - want)**2)`` over every output together: ``inf`` when they
    are equal, ``-inf`` when the shapes differ or ``want`` is all zeros but ``got`` is not. Each
    bit of an ideal uniform quantizer adds about 6 dB; an int8 program within 1% of its float
    reference in RMS error scores 40 dB.

    >>> sqnr_db(np.array([1.0, -1.0]), np.array([1.0, -1.0]))
    inf
    >>> round(sqnr_db(np.array([1.1, -0.9]), np.array([1.0, -1.0])), 6)
    20.0
    """
    a, b = _flatten(got), _flatten(want)
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        return float("-inf")
    signal = sum(float(np.sum(np.square(y.astype("float64")))) for y in b)
    noise = sum(float(np.sum(np.square(x.astype("float64") - y.astype("float64")))) for x, y in zip(a, b))
    if not np.isfinite(noise):
        return float("-inf")
    if noise == 0.0:
        return float("inf")
    if signal == 0.0:
        return float("-inf")
    return 10.0 * float(np.log10(signal / noise))


def _random_inputs(main, seed: int, where: str) -> dict:
    """Seeded random arrays for the parameters of the (type-checked) function ``main``."""
    from ..ir.types import TensorType
    rng = np.random.default_rng(seed)
    inputs = {}
    for p in main.params:
        ty = p.checked_type or p.type_annotation
        if not isinstance(ty, TensorType) or not all(isinstance(d, int) for d in ty.shape):
            raise ValueError(f"{where}: input %{p.name_hint} has the type {ty}; random inputs need "
                             f"a tensor of known shape, so give its value in `inputs=`")
        shape, dtype = tuple(ty.shape), np.dtype(ty.dtype)
        if dtype.kind == "f":
            inputs[p.name_hint] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            inputs[p.name_hint] = rng.integers(0, 10, shape).astype(dtype)
        elif dtype.kind == "b":
            inputs[p.name_hint] = rng.integers(0, 2, shape).astype(dtype)
        else:
            raise ValueError(f"{where}: input %{p.name_hint}: no random values for dtype {dtype}; "
                             f"give its value in `inputs=`")
    return inputs


#: Where a quantized configuration may run: the interpreter (the reference) and the target kinds
#: whose code generators compile the realized program's int8 x int8 -> int32 (and int16)
#: conv2d and dense, checked against the interpreter on resnet18 and the digits CNN. The OpenCL
#: target (PoCL's CPU device) compiles them exactly too. The simulated accelerator runs the
#: packed int8 convolutions (and the rest on the CPU, through LLVM); it runs nothing but
#: quantized programs (:data:`ACCEL_TARGET`).
QUANTIZED_TARGETS = ("interpreter", "llvm", "opencl", "accel", "vm")

#: The target kind of the simulated accelerator: offered only for a quantized program (the
#: quantization toggle on, or a program that has int8 convolutions already); choosing it puts
#: GraphPack after quantization in the pipeline, as ``relaybench.build`` does for it.
ACCEL_TARGET = "accel"

#: The bits the widget offers: input and weight / accumulator, as qconfig knobs.
PRECISIONS = {
    "8/32": {"nbit_input": 8, "nbit_weight": 8, "nbit_activation": 32,
             "dtype_input": "int8", "dtype_weight": "int8", "dtype_activation": "int32"},
    "8/16": {"nbit_input": 8, "nbit_weight": 8, "nbit_activation": 16,
             "dtype_input": "int8", "dtype_weight": "int8", "dtype_activation": "int16"},
}

#: The calibrate modes that read a data set (the others need none).
_DATA_MODES = ("max", "percentile", "kl_divergence")


def _int8_convolutions(mod) -> int:
    """How many ``nn.conv2d`` calls of ``@main`` (fused groups' bodies included) read int8 data:
    the convolutions the accelerator can run."""
    from ..ir.expr import Call, Op
    from ..ir.functor import post_order
    from ..ir.types import TensorType
    from ..passes import InferType
    main = mod["main"]
    if main.checked_type is None:
        main = InferType()(mod)["main"]
    count = 0
    for node in post_order(main):
        if isinstance(node, Call) and isinstance(node.op, Op) and node.op.name == "nn.conv2d":
            data = node.args[0].type_or_none
            count += isinstance(data, TensorType) and str(data.dtype) == "int8"
    return count


def _default_target(targets: Sequence[str]) -> Optional[str]:
    """The target "Time it" starts on: ``llvm`` (the host CPU, always there) when offered, else
    the last one offered but the accelerator (choosing it changes the pipeline, so it is chosen
    on purpose), else the accelerator."""
    if "llvm" in targets:
        return "llvm"
    plain = [t for t in targets if t != ACCEL_TARGET]
    return (plain or list(targets) or [None])[-1]


def _known_targets() -> tuple:
    """Where a configuration can run: the interpreter, then every target kind with a code
    generator (:data:`relaybench.backends.target.KINDS`)."""
    from ..backends.target import KINDS
    return ("interpreter", *KINDS, "vm")


# ---------------------------------------------------------------------------------------------
# PassExplorer


class PassExplorer:
    """Toggle, reorder, run, step through and time the passes of a pipeline.

    ``mod`` (an IRModule or a Function) with ``params`` (name -> array) bound into ``@main`` as
    constants, as :func:`relaybench.build` does. ``pipeline``: the passes offered, in order, as a
    pipeline string, a list of pass names, Pass objects or ``(name, {options})`` pairs; by default
    Relay's build prefix (:data:`relaybench.passes.pipelines.DEFAULT_PASSES`), where FuseOps follows
    the chosen opt_level. A pass that appears twice gets the labels ``FoldConstant`` and
    ``FoldConstant#2``. ``targets``: where "Time it" may run (None: the interpreter and every
    compiled target relaybench has); ``inputs``: the values of ``@main``'s remaining parameters
    (default: seeded random arrays).

    What a click does, Python does too:

    >>> import relaybench as rb
    >>> from relaybench import op
    >>> x = rb.var("x", shape=(2,))
    >>> explorer = PassExplorer(rb.IRModule.from_expr(rb.Function([x], op.nn.relu(x + x))))
    >>> explorer.run()                            # the "Run passes" button
    >>> [r.name for r in explorer.steps]          # the passes that changed the program
    ['FuseOps']
    >>> explorer.set_enabled("FuseOps", False)    # a click on its check box: runs again
    >>> print(explorer.final_text)
    #[version = "0.0.5"]
    def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
      %0 = add(%x, %x) /* ty=Tensor[(2), float32] */;
      nn.relu(%0) /* ty=Tensor[(2), float32] */
    }
    >>> explorer.time("interpreter")["matches"]   # a row of explorer.results
    True

    **Running** applies the checked passes in their order in a
    ``PassContext(opt_level, instruments=[Snapshots()])``; a pass whose own opt_level is above the
    chosen one is reported as skipped, as in Relay. The context's ``config["relay.target"]`` is
    the chosen target (the host CPU's, ``llvm``, for the interpreter and the accelerator), as
    :func:`relaybench.build` sets it, so AlterOpLayout and Legalize apply that target's policies:
    ``llvm`` blocks convolutions into ``NCHW{x}c``, ``opencl`` keeps ``NCHW``. The stepper then
    goes over the passes that changed the program (:attr:`steps`) and starts on the last, so the
    view shows the final program. Once a run has happened, changing a check box, the order, the
    opt_level or the target's policies runs again at once (``auto_run``; set it to False to run
    only on the button).

    **Timing** runs the module the checked passes produced: the interpreter executes it; a
    compiled target builds it with :func:`relaybench.build` with the build's own pipeline
    disabled, so the program compiled is exactly the one shown, pass order included, and times it
    with ``GraphModule.benchmark`` (median). Every configuration's result is checked against the
    interpreter on the unoptimized program; :attr:`results` keeps one row per timing.

    **Quantization** (:meth:`set_quantize`, the "quantize" check box, or ``quantize=True`` or a
    dict of qconfig knobs here): the pipeline then starts with :func:`relaybench.quantize.quantize`
    under ``qconfig(**knobs)``, run inside the explorer's context, so its passes are recorded
    like the others and the stepper shows QuantizePrerequisites' passes that changed something,
    then QuantizeAnnotate, QuantizeCalibrate, QuantizeRealize and the FoldConstant that makes the
    weights int8. The knobs are Relay's defaults (the first conv2d and every dense left in float)
    changed by those given; the widget offers the calibrate mode, the bits (:data:`PRECISIONS`:
    8/32 or 8/16), the global scale, and whether the first conv2d and the dense layers are
    quantized. The data-driven calibrate modes read ``dataset`` (an iterable of input dicts)
    or, without one, ``calibration_samples`` seeded random input dicts (seeds ``seed + 1`` on, so
    the input timed is not among them). The quantized program is compared with two references:
    the interpreter on the quantized program (:meth:`quantized_reference`; integer arithmetic,
    so it must agree as closely as a float program does) and the interpreter on the float
    program, from which it differs by quantization error: the row's ``sqnr_db``
    (:func:`sqnr_db`) must reach ``min_sqnr_db`` (20 dB: an RMS error within 10% of the signal's;
    a well-calibrated 8/32 program scores 30 to 45 dB). A quantized configuration runs on
    :data:`QUANTIZED_TARGETS` only.

    **The accelerator** (target ``accel``, offered once the program is quantized: the toggle on,
    or a program given with int8 convolutions). Choosing it (the dropdown, or ``time("accel")``)
    puts :func:`~relaybench.passes.graph_pack.GraphPack`, with the design's batch and channel
    block, in front of the checked passes, as ``relaybench.build`` does for the accelerator:
    its step shows the packed layouts (``NCHW1n16c`` data, ``OIHW16o16i`` weights) and the
    fences FuseOps then respects. ``time("accel")`` builds the program shown for the
    accelerator and takes its time per run from ``GraphModule.profile``: the groups on the
    accelerator count their simulated cycles at the design's clock (``accel_ms``), the others
    their measured CPU time (``cpu_ms``); ``latency_ms`` is the sum. The row says how many of
    the calls run on the accelerator (``accel_groups`` of ``groups``; :attr:`accel_module` is
    the build, for :func:`relaybench.viz.to_dot` or :class:`FusionView`), and its ``matches``
    adds to the checks above that the output equals, bit for bit (``matches_llvm``), the
    output of the quantized program built for ``llvm`` by ``relaybench.build``
    (:meth:`llvm_reference`): the accelerator computes the same integers as the CPU.

    >>> import numpy as np
    >>> v, w = rb.var("v", shape=(1, 8)), rb.var("w", shape=(4, 8))
    >>> weights = {"w": np.linspace(-1, 1, 32, dtype="float32").reshape(4, 8)}
    >>> explorer = PassExplorer(rb.Function([v, w], op.nn.dense(v, w)), weights,
    ...                         targets=("interpreter",))
    >>> explorer.set_quantize(True, calibrate_mode="max", skip_dense_layer=False, skip_conv_layers=None)
    >>> explorer.run()
    >>> [r.name for r in explorer.steps if r.name.startswith("Quantize")]
    ['QuantizeAnnotate', 'QuantizeCalibrate', 'QuantizeRealize']
    >>> row = explorer.time("interpreter")
    >>> row["quantized"], row["matches"], row["sqnr_db"] > 30
    ('int8/int32, max on 4 random inputs', True, True)
    """

    def __init__(self, mod, params: Optional[dict] = None, *, opt_level: int = 3, pipeline=None,
                 targets: Optional[Sequence[str]] = None, inputs: Optional[dict] = None,
                 seed: int = 0, auto_run: bool = True, quantize=False, dataset=None,
                 calibration_samples: int = 4, min_sqnr_db: float = 20.0):
        from ..ir.expr import Function
        from ..ir.module import IRModule
        from ..passes import InferType
        from ..passes.bind_params import bind_params

        if isinstance(mod, Function):
            mod = IRModule.from_expr(mod)
        if not isinstance(mod, IRModule):
            raise TypeError(f"PassExplorer takes an IRModule or a Function, not {type(mod).__name__}")
        if params:
            mod = bind_params(mod, params)
        self.mod = InferType()(mod)
        self._entries = self._pipeline_entries(pipeline)
        known = _known_targets()
        if targets is None:
            targets = known
        unknown = [t for t in targets if t not in known]
        if unknown:
            raise ValueError(f"PassExplorer: unknown target {unknown[0]!r}; known: {', '.join(known)}")
        self.targets = tuple(targets)
        self.seed = seed
        self.inputs = dict(inputs) if inputs is not None else \
            _random_inputs(self.mod["main"], seed, "PassExplorer")
        self.auto_run = auto_run
        self.snapshots = None
        self.steps: list = []
        self.final = None
        self.results: list = []
        self.comparisons: list = []
        self.last_output = None
        self.run_count = 0
        self._ran_config = None
        self._step = 0
        self._reference = None
        self._graph_cache: dict = {}
        self._diffs: dict = {}
        self._quiet = False
        self.quantize = False
        self.quantized = None
        self.min_sqnr_db = float(min_sqnr_db)
        if isinstance(calibration_samples, bool) or not isinstance(calibration_samples, (int, np.integer)) \
                or calibration_samples < 1:
            raise ValueError(f"PassExplorer: calibration_samples must be a positive int, got "
                             f"{calibration_samples!r}")
        self.calibration_samples = int(calibration_samples)
        self._qknobs: dict = {}
        self._dataset = None
        self._dataset_version = 0
        self._random_dataset = None
        self._quantized_references: dict = {}
        self._llvm_references: dict = {}
        self.accel_module = None
        self._accel_final = None    # the program accel_module was built from
        self._input_int8 = _int8_convolutions(self.mod) > 0
        self._syncing = False
        self._build_widgets(opt_level)
        if not isinstance(quantize, (bool, dict)):
            raise TypeError(f"PassExplorer: quantize is True, False or a dict of qconfig knobs, not "
                            f"{type(quantize).__name__}")
        if quantize is not False or dataset is not None:
            knobs = dict(quantize) if isinstance(quantize, dict) else {}
            self.set_quantize(quantize is not False, dataset=dataset, **knobs)
        self._show_step()

    # ---- the pipeline ---------------------------------------------------------------------------
    @staticmethod
    def _pipeline_entries(pipeline) -> list:
        from ..passes.pipelines import DEFAULT_PASSES, build_pipeline
        if pipeline is None:
            items = [(name, dict(options)) for name, options in DEFAULT_PASSES]
        else:
            items = [(p.info.name, dict(p.info.options)) for p in build_pipeline(pipeline).passes]
        entries, seen = [], {}
        for name, options in items:
            seen[name] = seen.get(name, 0) + 1
            label = name if seen[name] == 1 else f"{name}#{seen[name]}"
            entries.append({"label": label, "name": name, "options": options})
        return entries

    @property
    def pass_names(self) -> list:
        """The labels of the passes offered, in their current order."""
        return [e["label"] for e in self._entries]

    @property
    def enabled(self) -> list:
        """The labels of the checked passes, in order."""
        return [e["label"] for e in self._entries if self.checkboxes[e["label"]].value]

    @property
    def disabled(self) -> list:
        return [e["label"] for e in self._entries if not self.checkboxes[e["label"]].value]

    @property
    def opt_level(self) -> int:
        return int(self.opt_level_slider.value)

    def _entry(self, label: str) -> dict:
        for e in self._entries:
            if e["label"] == label:
                return e
        raise KeyError(f"PassExplorer: no pass labelled {label!r}; the passes are "
                       f"{', '.join(self.pass_names)}")

    def _config(self) -> tuple:
        return (tuple(self.enabled), self.opt_level, self._quantize_key(), self._packs(),
                self._pass_target())

    def _pass_target(self) -> str:
        """The target whose policies the passes apply (their PassContext's
        ``config["relay.target"]``, as :func:`relaybench.build` sets it): the chosen compiled
        target, or the host CPU (``llvm``) for the interpreter, the VM and the accelerator, whose
        build leaves the groups it does not run to the CPU's policies."""
        from ..backends.target import Target
        if self.target in (None, "interpreter", "vm"):
            return "llvm"      # the VM's kernels are llvm's
        target = Target.parse(self.target)
        return str(target.host if target.kind == ACCEL_TARGET else target)

    # ---- the accelerator ------------------------------------------------------------------------
    @property
    def target(self) -> Optional[str]:
        """The target chosen in the dropdown ("Time it" runs there; ``accel`` adds GraphPack to
        the pipeline)."""
        return self.target_dropdown.value

    def accel_ready(self) -> bool:
        """Whether the accelerator is offered: the program is quantized (the toggle on, or
        int8 convolutions in the program given)."""
        return self.quantize or self._input_int8

    def _packs(self) -> bool:
        """Whether the pipeline packs the program for the accelerator (the accelerator chosen)."""
        return self.target == ACCEL_TARGET and self.accel_ready()

    @staticmethod
    def _graph_pack_options() -> dict:
        """GraphPack's batch and channel block: the default accelerator design's."""
        from ..backends.target import Target
        config = Target.parse(ACCEL_TARGET).accel_config()
        return {"bfactor": config.batch, "cfactor": config.block_out}

    def _choose_target(self, target: str) -> None:
        """Show ``target`` in the dropdown without its observer running the passes again (the
        caller does when the configuration changed)."""
        if self.target_dropdown.value != target:
            self._syncing = True
            try:
                self.target_dropdown.value = target
            finally:
                self._syncing = False

    def _on_target(self, change) -> None:
        """The dropdown changed: the passes apply the new target's policies (and GraphPack runs
        for the accelerator), so they run again."""
        if not self._syncing and self._ran_config is not None and self._config() != self._ran_config:
            self._click(self._changed)

    def llvm_reference(self):
        """The output of the quantized program (the last run's :attr:`quantized`, or the program
        given when it came quantized) built for ``llvm`` by :func:`relaybench.build` with its own
        pipeline, on :attr:`inputs`: what the accelerator's build must equal bit for bit. Kept
        per quantization configuration."""
        key = self._ran_config[2] if self._ran_config is not None else None
        if key not in self._llvm_references:
            from ..backends.build import build
            program = self.quantized if self.quantized is not None else self.mod
            self._llvm_references[key] = build(program, "llvm").run(**self.inputs)
        return self._llvm_references[key]

    # ---- quantization ---------------------------------------------------------------------------
    @property
    def qconfig(self):
        """The :class:`~relaybench.quantize.QConfig` quantization runs under (Relay's defaults
        changed by the knobs given to :meth:`set_quantize`)."""
        from ..quantize.qconfig import QConfig
        return QConfig(**self._qknobs)

    @property
    def quantize_knobs(self) -> dict:
        """The qconfig knobs that differ from Relay's defaults."""
        return dict(self._qknobs)

    def set_quantize(self, enabled: bool = True, *, precision: Optional[str] = None, dataset=None,
                     **knobs) -> None:
        """Turn quantization on or off and change its qconfig; re-runs when a run has happened
        and the configuration changed (what the widget's quantization controls call).

        ``precision``: a key of :data:`PRECISIONS` (``"8/32"``, ``"8/16"``), the bits of
        inputs and weights / accumulators; ``knobs``: any :func:`relaybench.quantize.qconfig`
        knob (``calibrate_mode``, ``global_scale``, ``skip_conv_layers``, ``skip_dense_layer``,
        ...), checked here, kept for later calls until changed; ``dataset``: the calibration
        data, an iterable of input dicts (kept too).
        """
        from ..quantize.qconfig import QCONFIG_DEFAULTS, QConfig
        merged = dict(self._qknobs)
        if precision is not None:
            if precision not in PRECISIONS:
                raise ValueError(f"PassExplorer.set_quantize: precision {precision!r} is not one of "
                                 f"{', '.join(repr(p) for p in PRECISIONS)}")
            merged.update(PRECISIONS[precision])
        merged.update(knobs)
        try:
            cfg = QConfig(**merged)
        except ValueError as err:
            raise ValueError(f"PassExplorer.set_quantize: {err}") from None
        if dataset is not None:
            self._dataset = self._check_dataset(dataset)
            self._dataset_version += 1
        self._qknobs = {k: v for k, v in cfg.as_dict().items() if v != QCONFIG_DEFAULTS[k]}
        self.quantize = bool(enabled)
        self._sync_quantize_widgets()
        if self._config() != self._ran_config:
            self._changed()

    def _check_dataset(self, dataset) -> list:
        if isinstance(dataset, dict) or not hasattr(dataset, "__iter__"):
            raise TypeError(f"PassExplorer: dataset is an iterable of input dicts, not "
                            f"{type(dataset).__name__}")
        items = list(dataset)
        if not items:
            raise ValueError("PassExplorer: the dataset is empty")
        names = [p.name_hint for p in self.mod["main"].params]
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                raise TypeError(f"PassExplorer: dataset item {index} is a {type(item).__name__}, "
                                f"not a dict of inputs")
            missing = [n for n in names if n not in item]
            if missing:
                raise ValueError(f"PassExplorer: dataset item {index} lacks the input {missing[0]!r} "
                                 f"of @main (inputs: {', '.join(names)})")
        return items

    def calibration_dataset(self) -> Optional[list]:
        """The input dicts QuantizeCalibrate reads: the ``dataset`` given, else, for the
        data-driven calibrate modes, ``calibration_samples`` seeded random input dicts (seeds
        ``seed + 1``, ``seed + 2``, ...); None for ``global_scale``, which reads none."""
        if self._dataset is not None:
            return self._dataset
        if self.qconfig.calibrate_mode not in _DATA_MODES:
            return None
        if self._random_dataset is None:
            main = self.mod["main"]
            try:
                self._random_dataset = [_random_inputs(main, self.seed + 1 + i, "PassExplorer calibration")
                                        for i in range(self.calibration_samples)]
            except ValueError as err:
                raise ValueError(f"{err} (or give the calibration data in `dataset=`)") from None
        return self._random_dataset

    def _quantize_key(self):
        if not self.quantize:
            return None
        return (tuple(sorted(self._qknobs.items())), self._dataset_version)

    def _quantize_label(self) -> str:
        """How the program is quantized, for the results: bits, calibrate mode and data."""
        if not self.quantize:
            return ""
        cfg = self.qconfig
        text = f"{cfg.dtype_input}/{cfg.dtype_activation}, "
        if cfg.calibrate_mode == "global_scale":
            return text + f"global_scale={cfg.global_scale:g}"
        data = self.calibration_dataset()
        source = "given" if self._dataset is not None else "random"
        return text + f"{cfg.calibrate_mode} on {len(data)} {source} inputs"

    def _quantized_module(self):
        """:attr:`mod` quantized by :func:`relaybench.quantize.quantize` under :attr:`qconfig`,
        in the current pass context (whose instruments see every pass)."""
        from ..quantize import qconfig, quantize
        dataset = self.calibration_dataset()
        with qconfig(**self._qknobs):
            return quantize(self.mod, None, dataset)

    def quantized_reference(self):
        """The interpreter's result on the quantized program (the last run's
        :attr:`quantized`), kept per quantization configuration."""
        if self.quantized is None:
            raise ValueError("PassExplorer.quantized_reference: quantization is off or has not run")
        key = self._ran_config[2]
        if key not in self._quantized_references:
            from ..backends.executor import create_executor
            run = create_executor("interpreter", mod=self.quantized).evaluate()
            self._quantized_references[key] = run(**self.inputs)
        return self._quantized_references[key]

    def _time_targets(self) -> list:
        """The targets "Time it" offers now: the explorer's, those with int8 kernels when
        quantized, the accelerator only for a quantized program."""
        ready = self.accel_ready()
        return [t for t in self.targets if (not self.quantize or t in QUANTIZED_TARGETS)
                and (t != ACCEL_TARGET or ready)]

    def _pipeline(self, pack: bool = False):
        """The checked passes in order, after GraphPack when ``pack``."""
        from ..passes.pipelines import build_pipeline
        level = self.opt_level
        items = [("GraphPack", self._graph_pack_options())] if pack else []
        for e in self._entries:
            if self.checkboxes[e["label"]].value:
                options = {k: (level if v == "opt_level" else v) for k, v in e["options"].items()}
                items.append((e["name"], options))
        return build_pipeline(items, name="explorer")

    def set_enabled(self, name: str, enabled: bool = True) -> None:
        """Check or uncheck the pass labelled ``name`` (re-runs when a run has happened)."""
        self._entry(name)
        self.checkboxes[name].value = bool(enabled)

    def move(self, name: str, delta: int) -> None:
        """Move the pass labelled ``name`` by ``delta`` places (negative: earlier), clamped to
        the list; re-runs when a run has happened."""
        entry = self._entry(name)
        i = self._entries.index(entry)
        j = min(max(i + int(delta), 0), len(self._entries) - 1)
        if i == j:
            return
        self._entries.insert(j, self._entries.pop(i))
        self.pass_box.children = [self.checkboxes[e["label"]] for e in self._entries]
        self._changed()

    # ---- running --------------------------------------------------------------------------------
    def run(self) -> None:
        """Run the checked passes in order under ``PassContext(opt_level, instruments=[Snapshots()])``
        (after quantization when it is on) and show the last pass that changed the program."""
        from ..passes.infra import PassContext
        from ..passes.instruments import Snapshots
        snaps = Snapshots()
        self._graph_cache.clear()   # the views of the last run's programs
        self._diffs.clear()
        quantizing = "quantization, then " if self.quantize else ""
        packing = "GraphPack for the accelerator, then " if self._packs() else ""
        self._status(f"running {quantizing}{packing}{len(self.enabled)} passes at opt_level "
                     f"{self.opt_level} ...")
        config = {"relay.target": self._pass_target()}   # AlterOpLayout, Legalize: the target's way
        with PassContext(opt_level=self.opt_level, instruments=[snaps], config=config):
            quantized = self._quantized_module() if self.quantize else None
            program = quantized if quantized is not None else self.mod
            # as relaybench.build: a program without int8 convolutions has nothing to pack
            pipeline = self._pipeline(pack=self._packs() and _int8_convolutions(program) > 0)
            final = pipeline(program)
        self.snapshots = snaps
        self.quantized = quantized
        self.final = final
        self.steps = [r for r in snaps.changed() if r.depth == 1]
        self._ran_config = self._config()
        self.run_count += 1
        ran = len([r for r in snaps.ran() if r.depth == 1])
        skipped = len([r for r in snaps.skipped() if r.depth == 1])
        quantized = f" (quantized: {html.escape(self._quantize_label())})" if self.quantize else ""
        self._status(f"run {self.run_count}{quantized}: {ran} passes ran, {skipped} skipped, "
                     f"{len(self.steps)} changed the program")
        self.pass_table.value = snaps.table()._repr_html_()
        n = len(self.steps)
        self._quiet = True
        try:
            self.step_slider.max = max(n - 1, 0)
            self.step_slider.value = max(n - 1, 0)
        finally:
            self._quiet = False
        self.step_slider.disabled = n == 0
        self._step = max(n - 1, 0)
        self._show_step()

    def step(self, i: int) -> None:
        """Show step ``i`` (0-based) of :attr:`steps`; negative counts from the end."""
        n = len(self.steps)
        if n == 0:
            raise IndexError("PassExplorer.step: no pass changed the program (run the passes first)")
        if not -n <= i < n:
            raise IndexError(f"PassExplorer.step: step {i} of {n} (0 to {n - 1})")
        self.step_slider.value = i % n   # the observer shows it

    @property
    def current(self):
        """The :class:`~relaybench.passes.instruments.PassRecord` shown (None before a run or when
        no pass changed the program)."""
        return self.steps[self._step] if self.steps else None

    @property
    def current_module(self):
        rec = self.current
        if rec is not None:
            return rec.after
        return self.final if self.final is not None else self.mod

    @property
    def current_text(self) -> str:
        """The program's text after the pass shown (the input program before a run)."""
        rec = self.current
        return rec.after_text if rec is not None else self.current_module.astext()

    @property
    def final_text(self) -> str:
        """The program's text after every checked pass (the input program before a run)."""
        return (self.final if self.final is not None else self.mod).astext()

    @property
    def current_svg(self) -> Optional[str]:
        """The SVG of the graph shown, or None when the graph is shown as text."""
        return self._graph()[1]

    def _graph(self) -> tuple:
        """``(html, svg)`` of the graph to show: the program after the current pass, or, with
        "mark changes" checked, :func:`relaybench.viz.diff`'s graph of the step (added and
        removed nodes highlighted). Once the final program has been timed on the accelerator,
        its graph (the last step's) is drawn from that build, the groups on the accelerator
        apart from those on the CPU."""
        rec = self.current
        if rec is not None and self.mark_changes_box.value:
            key = ("changes", rec.before, rec.after)
            if key not in self._graph_cache:
                d, render_svg = self._diff(rec), _view("render_svg")
                result = None
                if d is not None and render_svg is not None:
                    try:
                        svg = render_svg(d.graph())
                        result = (f'<div style="overflow: auto; max-height: 600px">{svg}</div>', svg)
                    except Exception:  # show the plain graph instead
                        result = None
                self._graph_cache[key] = result
            if self._graph_cache[key] is not None:
                return self._graph_cache[key]
        if self._accel_final is not None and self._accel_final is self.final and \
                self._step == len(self.steps) - 1:
            # the final program as the accelerator build compiled it: its groups on the
            # accelerator drawn apart from those on the CPU
            return _graph_view(self.accel_module, self._graph_cache)
        return _graph_view(self.current_module, self._graph_cache)

    def _show_step(self) -> None:
        rec = self.current
        total = len(self.steps)
        if rec is None:
            if self.snapshots is None:
                head = "the input program (press <b>Run passes</b>)"
            else:
                head = "no pass changed the program"
            self.step_label.value = f"<p>{head}</p>"
            self.ir_html.value = _pre(self.current_text)
        else:
            ops = f"{rec.ops_before} &rarr; {rec.ops_after}" if rec.ops_before != rec.ops_after \
                else f"{rec.ops_before} (same)"
            nodes = f"{rec.nodes_before} &rarr; {rec.nodes_after}"
            self.step_label.value = (f"<p>step {self._step + 1} of {total}: <b>{html.escape(rec.label)}</b>"
                                     f"{self._sequence_note(rec)}"
                                     f" &nbsp; operators {ops} &nbsp; nodes {nodes} &nbsp; "
                                     f"{rec.seconds * 1e3:.2f} ms{self._change_summary(rec)}</p>")
            self.ir_html.value = _diff_html(rec, self._diff(rec))
        self.ir_after.value = _pre(self.current_text)
        self.graph_html.value = self._graph()[0]
        self.prev_button.disabled = rec is None or self._step == 0
        self.next_button.disabled = rec is None or self._step >= total - 1

    def _sequence_note(self, rec) -> str:
        """`` (in Quantize)`` for a step run by quantization's sequences (the explorer's own
        pipeline goes unnamed)."""
        records = self.snapshots.records if self.snapshots is not None else []
        for parent in reversed(records[:rec.index]):
            if parent.depth < rec.depth:
                return "" if parent.name == "explorer" else f" (in {html.escape(parent.name)})"
        return ""

    def _diff(self, rec):
        """:func:`relaybench.viz.diff` of a step (kept), or None when that view is unavailable."""
        if rec not in self._diffs:
            diff = _view("diff")
            try:
                self._diffs[rec] = diff(rec) if diff is not None else None
            except Exception:  # the widget falls back to difflib's text diff
                self._diffs[rec] = None
        return self._diffs[rec]

    def _change_summary(self, rec) -> str:
        """The operators the pass removed and added, from the step's diff."""
        d = self._diff(rec)
        if d is None:
            return ""
        try:
            summary = d.summary()
        except Exception:  # the summary is an extra: the step shows without it
            return ""
        return f"<br><small>{html.escape(summary)}</small>"

    def _changed(self) -> None:
        """A check box, the order or the opt_level changed: re-run when a run has happened."""
        if self.auto_run and self.snapshots is not None:
            self.run()

    # ---- timing ---------------------------------------------------------------------------------
    def reference(self):
        """The interpreter's result on the unoptimized program (computed once)."""
        if self._reference is None:
            from ..backends.executor import create_executor
            self._reference = create_executor("interpreter", mod=self.mod).evaluate()(**self.inputs)
        return self._reference

    def time(self, target: Optional[str] = None, *, repeat: int = 3, number: int = 5) -> dict:
        """Time the current configuration on ``target`` (default: the one chosen in the
        dropdown); appends a row to :attr:`results` and returns it.

        The row: ``#``, ``target``, ``opt_level``, ``passes`` (the checked ones, in order),
        ``disabled``, ``quantized`` (how, or ""), ``latency_ms`` (median), ``speedup`` (over the
        first row), ``max_abs_error`` and ``sqnr_db`` against the interpreter on the unoptimized
        float program, and ``matches``: for a float configuration, whether the result equals
        that interpreter's (within 1e-4, relative to the output's magnitude); for a quantized
        one, whether it equals the interpreter's on the quantized program to that tolerance
        (``matches_quantized``, with ``quantized_max_abs_error``) and is within quantization
        error of the float result (``sqnr_db >= min_sqnr_db``). On the accelerator the row
        also has ``accel_ms`` (simulated), ``cpu_ms`` (measured), ``accel_groups`` and
        ``groups`` (calls on the accelerator, calls in all), ``matches_llvm`` (bit for bit the
        output of :meth:`llvm_reference`) and ``llvm_max_abs_error``; ``matches`` requires
        ``matches_llvm`` too. Choosing a target here chooses it in the dropdown, so timing on
        the accelerator runs the passes again with GraphPack when the last run had none.
        """
        from ..backends.executor import create_executor
        from ..passes.pipelines import DEFAULT_PASSES
        target = target if target is not None else self.target_dropdown.value
        if target not in self.targets:
            raise ValueError(f"PassExplorer.time: unknown target {target!r}; this explorer runs on "
                             f"{', '.join(self.targets)}")
        if self.quantize and target not in QUANTIZED_TARGETS:
            raise ValueError(f"PassExplorer.time: target {target!r} has no int8 kernels; a quantized "
                             f"configuration runs on {', '.join(self._time_targets())}")
        if target == ACCEL_TARGET and not self.accel_ready():
            raise ValueError("PassExplorer.time: the accelerator runs quantized programs (int8 "
                             "convolutions) and this program is float; turn quantization on "
                             "(the quantize check box, or set_quantize(True)) to time it there")
        self._choose_target(target)
        if self._ran_config != self._config():
            self.run()
        mod = self.final
        bar = self.progress
        bar.max, bar.value = repeat + 3, 0
        bar.description = target
        self._status(f"timing on {target} ...")
        reference = self.reference()
        bar.value += 1
        accel = None
        if target == "interpreter":
            run = create_executor("interpreter", mod=mod).evaluate()
            output = run(**self.inputs)
            bar.value += 1
            times = []
            for _ in range(repeat):
                start = time.perf_counter()
                run(**self.inputs)
                times.append((time.perf_counter() - start) * 1e3)
                bar.value += 1
            latency = float(np.median(times))
        elif target == "vm":
            # the Relay VM, its kernels for llvm: the explorer's passes only (the VM's own
            # normal forms, ToANormalForm and LambdaLift, still run)
            from ..backends.vm import VirtualMachine, compile as vm_compile
            names = {e["name"] for e in self._entries} | {name for name, _ in DEFAULT_PASSES}
            exe = vm_compile(mod, "llvm", opt_level=self.opt_level, disabled_pass=sorted(names))
            vm = VirtualMachine(exe)
            output = vm.invoke("main", **self.inputs)
            bar.value += 1
            times = []
            for _ in range(repeat):
                start = time.perf_counter()
                for _ in range(number):
                    vm.invoke("main", **self.inputs)
                times.append((time.perf_counter() - start) * 1e3 / number)
                bar.value += 1
            latency = float(np.median(times))
        else:
            from ..backends.build import build
            names = {e["name"] for e in self._entries} | {name for name, _ in DEFAULT_PASSES}
            graph = build(mod, target, opt_level=self.opt_level, disabled_pass=sorted(names))
            bar.value += 1
            output = graph.run(**self.inputs)
            if target == ACCEL_TARGET:
                latency, accel = self._accel_timing(graph, number)
            else:
                latency = graph.benchmark(number=number, repeat=repeat).median_ms
            bar.value += repeat
        bar.value = bar.max
        self.last_output = output
        first = self.results[0]["latency_ms"] if self.results else latency
        row = {"#": len(self.results), "target": target, "opt_level": self.opt_level,
               "passes": tuple(self.enabled), "disabled": tuple(self.disabled),
               "quantized": self._quantize_label(),
               "latency_ms": latency, "speedup": first / latency if latency > 0 else float("inf"),
               "max_abs_error": _max_error(output, reference), "sqnr_db": sqnr_db(output, reference)}
        if accel is not None:
            row.update(accel)
            llvm = self.llvm_reference()
            row["llvm_max_abs_error"] = _max_error(output, llvm)
            row["matches_llvm"] = _bit_exact(output, llvm)
        note = ""
        if self.quantize:
            qref = self.quantized_reference()
            row["quantized_max_abs_error"] = _max_error(output, qref)
            row["matches_quantized"] = _agrees(output, qref)
            within = row["sqnr_db"] >= self.min_sqnr_db
            row["matches"] = row["matches_quantized"] and within
            if not row["matches_quantized"]:
                note = " &mdash; <b>the result differs from the interpreter's on the quantized program</b>"
            elif not within:
                note = (f" &mdash; <b>SQNR {row['sqnr_db']:.1f} dB against the float result, below "
                        f"{self.min_sqnr_db:g} dB</b>")
            else:
                note = f", SQNR {row['sqnr_db']:.1f} dB against the float result"
        else:
            row["matches"] = _agrees(output, reference)
            if not row["matches"]:
                note = " &mdash; <b>the result differs from the interpreter's</b>"
        if accel is not None:
            note = (f" ({row['accel_ms']:.3f} ms simulated on the accelerator, {row['cpu_ms']:.3f} ms "
                    f"on the CPU; {row['accel_groups']} of {row['groups']} calls on the accelerator)"
                    + note)
            if row["matches_llvm"]:
                note += ", bit-exact with the llvm build"
            else:
                row["matches"] = False
                note += " &mdash; <b>the result differs from the llvm build of the quantized program</b>"
        self.results.append(row)
        self._show_results()
        if accel is not None:
            self._show_step()   # the final program's graph: now with the accelerator's groups
        self._status(f"{target}: {latency:.3f} ms{note}")
        return row

    # ---- comparing configurations -----------------------------------------------------------
    def _configuration(self, spec) -> dict:
        """A configuration to compare: a target name (the checked passes, the chosen
        opt_level) or a dict with ``target``, ``disabled`` (pass labels left out), ``opt_level``
        and an optional ``label``."""
        if isinstance(spec, str):
            spec = {"target": spec}
        if not isinstance(spec, dict):
            raise TypeError(f"PassExplorer.compare: a configuration is a target name or a dict "
                            f"(target, disabled, opt_level, label), not {type(spec).__name__}")
        unknown = set(spec) - {"target", "disabled", "opt_level", "label"}
        if unknown:
            raise ValueError(f"PassExplorer.compare: unknown configuration key {sorted(unknown)[0]!r} "
                             f"(the keys are target, disabled, opt_level, label)")
        target = spec.get("target", self.target)
        if target not in self.targets or target == ACCEL_TARGET:
            raise ValueError(f"PassExplorer.compare: target {target!r} cannot be compared here; "
                             f"the targets are {', '.join(t for t in self.targets if t != ACCEL_TARGET)}")
        disabled = tuple(spec.get("disabled", self.disabled))
        for label in disabled:
            self._entry(label)
        opt_level = int(spec.get("opt_level", self.opt_level))
        label = spec.get("label") or (f"{target}, opt_level {opt_level}"
                                      + (f", without {', '.join(disabled)}" if disabled else ""))
        return {"target": target, "disabled": disabled, "opt_level": opt_level, "label": label}

    def _program(self, config: dict):
        """The program the checked passes of ``config`` make (quantized first when the explorer
        quantizes), run as :meth:`run` runs them."""
        from ..passes.infra import PassContext
        from ..passes.pipelines import build_pipeline
        level = config["opt_level"]
        items = []
        for e in self._entries:
            if e["label"] not in config["disabled"]:
                items.append((e["name"], {k: (level if v == "opt_level" else v) for k, v in e["options"].items()}))
        target = "llvm" if config["target"] in ("interpreter", "vm") else config["target"]
        with PassContext(opt_level=level, config={"relay.target": target}):
            program = self._quantized_module() if self.quantize else self.mod
            return build_pipeline(items, name="explorer")(program)

    def _runner(self, config: dict):
        """A callable of no arguments running ``config``'s program on its target once, and its
        output."""
        from ..passes.pipelines import DEFAULT_PASSES
        mod = self._program(config)
        target = config["target"]
        inputs = self.inputs
        names = sorted({e["name"] for e in self._entries} | {name for name, _ in DEFAULT_PASSES})
        if target == "interpreter":
            from ..backends.executor import create_executor
            run = create_executor("interpreter", mod=mod).evaluate()
            return (lambda: run(**inputs)), run(**inputs)
        if target == "vm":
            from ..backends.vm import VirtualMachine, compile as vm_compile
            vm = VirtualMachine(vm_compile(mod, "llvm", opt_level=config["opt_level"], disabled_pass=names))
            return (lambda: vm.invoke("main", **inputs)), vm.invoke("main", **inputs)
        from ..backends.build import build
        graph = build(mod, target, opt_level=config["opt_level"], disabled_pass=names)
        return (lambda: graph.run(**inputs)), graph.run(**inputs)

    def compare(self, *configurations, rounds: int = 15, number: int = 3, confidence: float = 0.95):
        """Whether the configurations really differ in speed: each is built once, checked
        against the interpreter, then all are timed in ``rounds`` interleaved rounds of
        ``number`` calls (:func:`relaybench.viz.compare.interleaved`): per configuration the
        median time and its ``confidence`` interval, and its time over the first's (the median
        of the paired per-round ratios, with its interval) with a verdict: real when the
        interval leaves out 1. A configuration is a target name or a dict (``target``,
        ``disabled``, ``opt_level``, ``label``); with none given, the configurations of the rows
        timed so far (:attr:`results`). The :class:`~relaybench.viz.compare.Comparison` is
        kept in :attr:`comparisons` and shown under the timings (the "Compare" button)."""
        from .compare import interleaved
        if not configurations:
            seen, configurations = set(), []
            for r in self.results:
                key = (r["target"], r["disabled"], r["opt_level"])
                if key not in seen and r["target"] != ACCEL_TARGET:
                    seen.add(key)
                    configurations.append({"target": r["target"], "disabled": r["disabled"],
                                           "opt_level": r["opt_level"]})
        configs = [self._configuration(c) for c in configurations]
        if len(configs) < 2:
            raise ValueError("PassExplorer.compare: give two configurations or more (or time two "
                             "with Time it first)")
        labels = [c["label"] for c in configs]
        if len(set(labels)) != len(labels):
            raise ValueError(f"PassExplorer.compare: two configurations have the label "
                             f"{next(l for l in labels if labels.count(l) > 1)!r}; name them with 'label'")
        self._status(f"comparing {len(configs)} configurations in {rounds} interleaved rounds ...")
        reference = self.quantized_reference() if self.quantize and self.quantized is not None \
            else (None if self.quantize else self.reference())
        runners = {}
        for c in configs:
            run, output = self._runner(c)
            if reference is not None and not _agrees(output, reference):
                raise ValueError(f"PassExplorer.compare: {c['label']}: the result differs from the "
                                 f"interpreter's (max |error| {_max_error(output, reference):.3g}), "
                                 f"so its time would mean nothing")
            runners[c["label"]] = run
        bar = self.progress
        bar.max, bar.value, bar.description = rounds, 0, "compare"

        def progress(done, total):
            bar.value = done

        comparison = interleaved(runners, rounds=rounds, number=number, confidence=confidence,
                                 progress=progress)
        self.comparisons.append(comparison)
        self.compare_html.value = comparison._repr_html_()
        verdicts = "; ".join(f"{r['configuration']}: {r['verdict']}" for r in comparison.rows[1:])
        self._status(html.escape(f"compared against {labels[0]}: {verdicts}"))
        return comparison

    def _accel_timing(self, graph, number: int) -> tuple:
        """``(ms per run, row fields)`` of an accelerator build from its profile: the simulated
        time of the groups on the accelerator and the measured time of the others."""
        self.accel_module = graph
        self._accel_final = self.final
        profile = graph.profile(number=number)
        on_accel = {k.name for k in graph.kernels if k.accel}
        accel_ms = sum(r["ms/run"] for r in profile.groups if r["group"] in on_accel)
        cpu_ms = sum(r["ms/run"] for r in profile.groups if r["group"] not in on_accel)
        nodes = graph.graph.nodes
        fields = {"accel_ms": accel_ms, "cpu_ms": cpu_ms,
                  "accel_groups": sum(1 for n in nodes if n.kernel.accel), "groups": len(nodes)}
        return accel_ms + cpu_ms, fields

    def results_table(self):
        """:attr:`results` as a :class:`~relaybench.viz.Table` (order shown only when changed;
        a quantized row's error and SQNR are against the float program, its verdict says whether
        it is within quantization error)."""
        from .table import Table
        original = [e["label"] for e in sorted(self._entries, key=lambda e: self._order[e["label"]])]
        any_accel = any("accel_ms" in r for r in self.results)
        rows = []
        for r in self.results:
            in_order = [p for p in original if p in r["passes"]]
            order = "pipeline order" if list(r["passes"]) == in_order else " → ".join(r["passes"])
            if "matches_llvm" in r and not r["matches_llvm"]:
                verdict = "NO: differs from the llvm build"
            elif not r["quantized"]:
                verdict = "yes" if r["matches"] else "NO"
            elif r["matches"]:
                verdict = "yes, within quantization error"
            elif not r["matches_quantized"]:
                verdict = "NO: differs from the quantized program"
            else:
                verdict = "NO: too far from the float result"
            if r.get("matches_llvm") and r["matches"]:
                verdict += ("; " if r["quantized"] else ", ") + "bit-exact with llvm"
            row = {"#": r["#"], "target": r["target"], "opt_level": r["opt_level"],
                   "quantized": r["quantized"] or "-",
                   "disabled": ", ".join(r["disabled"]) or "-", "order": order,
                   "latency (ms)": f"{r['latency_ms']:.3f}"}
            if any_accel:   # the accelerator's rows split their time: simulated, measured
                accel = "accel_ms" in r
                row["accelerator (simulated) ms"] = f"{r['accel_ms']:.3f}" if accel else "-"
                row["CPU ms"] = f"{r['cpu_ms']:.3f}" if accel else "-"
                row["groups on the accelerator"] = f"{r['accel_groups']} of {r['groups']}" if accel else "-"
            row.update({"speedup": f"{r['speedup']:.2f}x", "max |error|": f"{r['max_abs_error']:.2g}",
                        "SQNR (dB)": f"{r['sqnr_db']:.1f}", "matches interpreter": verdict})
            rows.append(row)
        return Table(rows)

    def _show_results(self) -> None:
        self.results_html.value = self.results_table()._repr_html_() if self.results else \
            "<p><i>no timings yet: choose a target and press <b>Time it</b></i></p>"

    # ---- widgets --------------------------------------------------------------------------------
    def _status(self, text: str) -> None:
        self.status.value = f"<p>{text}</p>"

    def _build_widgets(self, opt_level: int) -> None:
        w = _widgets()
        self._order = {e["label"]: i for i, e in enumerate(self._entries)}
        self.checkboxes = {}
        for e in self._entries:
            box = w.Checkbox(value=True, description=e["label"], indent=False,
                             layout=w.Layout(width="auto"))
            box.add_class("rb-pass")
            box.observe(lambda change: self._changed(), names="value")
            self.checkboxes[e["label"]] = box
        self.pass_box = w.VBox([self.checkboxes[e["label"]] for e in self._entries])
        self.pass_box.add_class("rb-passes")
        self.move_select = w.Dropdown(options=self.pass_names, description="move",
                                      layout=w.Layout(width="260px"))
        self.up_button = w.Button(description="up", icon="arrow-up", layout=w.Layout(width="80px"))
        self.down_button = w.Button(description="down", icon="arrow-down", layout=w.Layout(width="80px"))
        self.up_button.on_click(lambda _: self.move(self.move_select.value, -1))
        self.down_button.on_click(lambda _: self.move(self.move_select.value, 1))
        self.opt_level_slider = w.IntSlider(value=opt_level, min=0, max=4, description="opt_level")
        self.opt_level_slider.observe(lambda change: self._changed(), names="value")
        self.run_button = w.Button(description="Run passes", button_style="primary")
        self.run_button.add_class("rb-run")
        self.run_button.on_click(lambda _: self._click(self.run))
        self.auto_run_box = w.Checkbox(value=self.auto_run, description="re-run on change",
                                       indent=False)
        self.auto_run_box.observe(lambda change: setattr(self, "auto_run", change["new"]), names="value")
        self.status = w.HTML()
        self.status.add_class("rb-status")
        quantize_box = self._build_quantize_widgets(w)

        self.prev_button = w.Button(description="prev", icon="step-backward", layout=w.Layout(width="80px"))
        self.next_button = w.Button(description="next", icon="step-forward", layout=w.Layout(width="80px"))
        self.step_slider = w.IntSlider(value=0, min=0, max=0, description="step", disabled=True)
        self.step_slider.observe(self._on_step, names="value")
        self.prev_button.on_click(lambda _: self._nudge(-1))
        self.next_button.on_click(lambda _: self._nudge(1))
        self.step_label = w.HTML()
        self.step_label.add_class("rb-step")
        self.ir_html = w.HTML()
        self.ir_html.add_class("rb-ir-text")
        self.ir_after = w.HTML()
        self.ir_after.add_class("rb-ir-after")
        after_box = w.Accordion(children=[self.ir_after])
        after_box.set_title(0, "the program after this pass")
        after_box.selected_index = None
        self.graph_html = w.HTML()
        self.graph_html.add_class("rb-graph")
        self.mark_changes_box = w.Checkbox(value=False, description="mark the pass's changes in the graph",
                                           indent=False, layout=w.Layout(width="auto"))
        self.mark_changes_box.add_class("rb-mark-changes")
        self.mark_changes_box.observe(lambda change: self._show_step(), names="value")
        self.pass_table = w.HTML()
        self.pass_table.add_class("rb-pass-table")
        table_box = w.Accordion(children=[self.pass_table])
        table_box.set_title(0, "every pass of the last run")
        table_box.selected_index = None

        offered = self._time_targets()
        self.target_dropdown = w.Dropdown(options=offered, description="target",
                                          value=_default_target(offered))
        self.target_dropdown.observe(self._on_target, names="value")
        self.time_button = w.Button(description="Time it", button_style="info")
        self.time_button.add_class("rb-time")
        self.time_button.on_click(lambda _: self._click(self.time))
        self.progress = w.IntProgress(value=0, min=0, max=1, description="")
        self.progress.add_class("rb-progress")
        self.results_html = w.HTML()
        self.results_html.add_class("rb-results")
        self._show_results()
        self.compare_button = w.Button(description="Compare", button_style="info",
                                       tooltip="time the configurations timed so far in interleaved rounds")
        self.compare_button.add_class("rb-compare")
        self.compare_button.on_click(lambda _: self._click(self.compare))
        self.compare_html = w.HTML()
        self.compare_html.add_class("rb-comparison")

        self.widget = w.VBox([
            w.HTML("<h4>Passes</h4>"),
            w.HBox([self.pass_box,
                    w.VBox([w.HBox([self.move_select, self.up_button, self.down_button]),
                            self.opt_level_slider, quantize_box,
                            w.HBox([self.run_button, self.auto_run_box]), self.status])]),
            w.HTML("<h4>Step through the passes that changed the program</h4>"),
            w.HBox([self.prev_button, self.step_slider, self.next_button]),
            self.step_label, self.ir_html, after_box, self.mark_changes_box, self.graph_html, table_box,
            w.HTML("<h4>Time this configuration</h4>"),
            w.HBox([self.target_dropdown, self.time_button, self.compare_button, self.progress]),
            self.results_html, self.compare_html,
        ])
        self.widget.add_class("rb-pass-explorer")

    def _build_quantize_widgets(self, w):
        """The quantization controls: the toggle, the calibrate mode, the bits, the global
        scale, and whether the first conv2d and the dense layers are quantized. Each calls
        :meth:`set_quantize` with its knob."""
        from ..quantize.qconfig import _CALIBRATE_MODES
        self.quantize_box = w.Checkbox(value=False, description="quantize (annotate, calibrate, realize)",
                                       indent=False, layout=w.Layout(width="auto"))
        self.quantize_box.add_class("rb-quantize")
        self.calibrate_dropdown = w.Dropdown(options=list(_CALIBRATE_MODES), description="calibrate",
                                             layout=w.Layout(width="260px"))
        self.precision_dropdown = w.Dropdown(options=list(PRECISIONS), description="bits",
                                             layout=w.Layout(width="180px"))
        self.global_scale_text = w.BoundedFloatText(value=8.0, min=1e-6, max=1e9, description="global scale",
                                                    layout=w.Layout(width="200px"))
        self.quantize_first_conv_box = w.Checkbox(value=False, description="quantize the first conv2d",
                                                  indent=False, layout=w.Layout(width="auto"))
        self.quantize_dense_box = w.Checkbox(value=False, description="quantize nn.dense", indent=False,
                                             layout=w.Layout(width="auto"))

        def on(widget, knobs_of):
            def changed(change):
                if not self._syncing:
                    self._click(lambda: self.set_quantize(self.quantize, **knobs_of(change["new"])))
            widget.observe(changed, names="value")

        def toggled(change):
            if not self._syncing:
                self._click(lambda: self.set_quantize(change["new"]))

        self.quantize_box.observe(toggled, names="value")
        on(self.calibrate_dropdown, lambda v: {"calibrate_mode": v})
        on(self.precision_dropdown, lambda v: {"precision": v})
        on(self.global_scale_text, lambda v: {"global_scale": v})
        on(self.quantize_first_conv_box, lambda v: {"skip_conv_layers": None if v else (0,)})
        on(self.quantize_dense_box, lambda v: {"skip_dense_layer": not v})
        box = w.VBox([self.quantize_box,
                      w.HBox([self.calibrate_dropdown, self.precision_dropdown, self.global_scale_text]),
                      w.HBox([self.quantize_first_conv_box, self.quantize_dense_box])])
        box.add_class("rb-quantize-options")
        self._sync_quantize_widgets()
        return box

    def _sync_quantize_widgets(self) -> None:
        """Show the quantization state in its controls (without their observers firing), and
        offer "Time it" on the targets that can run it."""
        cfg = self.qconfig
        self._syncing = True
        try:
            self.quantize_box.value = self.quantize
            self.calibrate_dropdown.value = cfg.calibrate_mode
            precision = f"{cfg.nbit_input}/{cfg.nbit_activation}"
            chosen = {k: getattr(cfg, k) for k in PRECISIONS["8/32"]}
            if PRECISIONS.get(precision) != chosen:   # knobs given one by one: show them as they are
                precision = f"{cfg.dtype_input}:{cfg.nbit_input}/{cfg.dtype_activation}:{cfg.nbit_activation}"
            options = list(PRECISIONS) + ([precision] if precision not in PRECISIONS else [])
            if list(self.precision_dropdown.options) != options:
                self.precision_dropdown.options = options
            self.precision_dropdown.value = precision
            self.global_scale_text.value = cfg.global_scale
            self.quantize_first_conv_box.value = cfg.skip_conv_layers is None or 0 not in cfg.skip_conv_layers
            self.quantize_dense_box.value = not cfg.skip_dense_layer
            for control in (self.calibrate_dropdown, self.precision_dropdown, self.quantize_first_conv_box,
                            self.quantize_dense_box):
                control.disabled = not self.quantize
            self.global_scale_text.disabled = not self.quantize or cfg.calibrate_mode != "global_scale"
            dropdown = getattr(self, "target_dropdown", None)
            if dropdown is not None:
                targets = self._time_targets()
                if list(dropdown.options) != targets:
                    value = dropdown.value
                    dropdown.options = targets
                    if targets:
                        dropdown.value = value if value in targets else _default_target(targets)
        finally:
            self._syncing = False

    def _click(self, action) -> None:
        try:
            action()
        except Exception as err:  # a click shows the error instead of losing it in the log
            self._status(f"<b>{html.escape(type(err).__name__)}</b>: {html.escape(str(err))}")

    def _on_step(self, change) -> None:
        if self._quiet:
            return
        self._step = int(change["new"])
        self._show_step()

    def _nudge(self, delta: int) -> None:
        if self.steps:
            self.step(min(max(self._step + delta, 0), len(self.steps) - 1))

    def _ipython_display_(self):
        from IPython.display import display
        display(self.widget)

    def __repr__(self) -> str:
        state = f"{len(self.steps)} steps" if self.snapshots is not None else "not run"
        quantized = f", quantized {self._quantize_label()}" if self.quantize else ""
        return (f"PassExplorer({len(self.enabled)} of {len(self._entries)} passes, "
                f"opt_level {self.opt_level}{quantized}, {state}, {len(self.results)} timings)")


# ---------------------------------------------------------------------------------------------
# FusionView


class FusionView:
    """The fused groups of a compiled module, with the code of the one selected.

    ``mod_or_compiled``: a :class:`~relaybench.backends.graph_executor.GraphModule` (from
    :func:`relaybench.build`), or a module or function, which is then built for ``target`` at
    ``opt_level`` with ``params``. ``profile``: time every group (``GraphModule.profile`` on
    seeded random inputs, or ``inputs``).

    :attr:`groups` has one row per distinct kernel: name, ops, pattern kind, anchor op, schedule
    rule, where it runs (``runs on``: ``CPU``, ``accelerator``, ``OpenCL device`` or ``CPU
    (reference interpreter)`` for a host kernel), calls per run and time per call. A module
    built for the accelerator adds ``cycles`` (the simulated cycles of a group's last call on
    the accelerator: filled once the module has run, as profiling does) and ``why on the CPU``
    (the build's reason for each group left to the CPU, ``compile_stats.cpu_reasons``), and a
    tab with the accelerator's program. :meth:`select` picks one (by name or index); the view
    then shows its loop IR, LLVM IR and assembly in tabs (:meth:`current_source`), its time per
    call and the dataflow graph of its Primitive function. Below, the whole program's graph
    (:meth:`program_svg`): hovering a node shows its type, attributes and Relay text, and a click
    on a fused group opens that group's kernel (:meth:`click` does it from Python).

    >>> import relaybench as rb
    >>> from relaybench import op
    >>> x = rb.var("x", shape=(2,))
    >>> view = FusionView(rb.build(rb.Function([x], op.nn.relu(x + x))), profile=False)
    >>> [(g["group"], g["ops"], g["pattern"], g["anchor"]) for g in view.groups]
    [('fused_add_nn_relu', 'add, nn.relu', 'BROADCAST', 'add')]
    >>> view.select("fused_add_nn_relu")
    >>> "for " in view.current_source("loops")
    True
    """

    SOURCES = (("loops", "loop IR"), ("llvm", "LLVM IR"), ("asm", "assembly"))
    #: the tab a module with accelerator groups adds
    ACCEL_SOURCE = ("accel", "accelerator program")

    def __init__(self, mod_or_compiled, params: Optional[dict] = None, *, target="llvm",
                 opt_level: int = 3, profile: bool = True, inputs: Optional[dict] = None,
                 seed: int = 0, number: int = 5):
        from ..backends.graph_executor import GraphModule
        if isinstance(mod_or_compiled, GraphModule):
            if params:
                raise ValueError("FusionView: params go with a module to build, not with a "
                                 "compiled GraphModule")
            self.module = mod_or_compiled
        else:
            from ..backends.build import build
            self.module = build(mod_or_compiled, target, params=params, opt_level=opt_level)
        self.kernels = self.module.kernels
        self.has_accel = any(k.accel for k in self.kernels)
        self.sources = self.SOURCES + ((self.ACCEL_SOURCE,) if self.has_accel else ())
        self.profile = None
        if profile:
            if inputs is None:
                inputs = self._random_inputs(seed)
            self.profile = self.module.profile(number=number, **inputs)
        self.groups = self._rows()
        self._sources: dict = {}
        self._graph_cache: dict = {}
        self.selected = None
        self._build_widgets()
        if self.kernels:
            self.select(self._default_group())

    def _random_inputs(self, seed: int) -> dict:
        rng = np.random.default_rng(seed)
        inputs = {}
        for name, (shape, dtype) in self.module.input_info().items():
            dt = np.dtype(dtype)
            if dt.kind == "f":
                inputs[name] = rng.standard_normal(shape).astype(dt)
            elif dt.kind in "iub":
                inputs[name] = rng.integers(0, 2 if dt.kind == "b" else 10, shape).astype(dt)
            else:
                raise ValueError(f"FusionView: input {name!r}: no random values for dtype {dt}; "
                                 f"give its value in `inputs=`")
        return inputs

    def _rows(self) -> list:
        from ..passes.fuse_ops import fused_groups
        timed = {r["group"]: r for r in self.profile.groups} if self.profile is not None else {}
        calls: dict = {}
        for name, *_ in self.module.groups:
            base = name.split("#")[0]
            calls[base] = calls.get(base, 0) + 1
        reasons = getattr(self.module.compile_stats, "cpu_reasons", None) or {}
        rows = []
        for i, k in enumerate(self.kernels):
            described = fused_groups(k.function)
            anchor = described[0].anchor if described else None
            t = timed.get(k.name, {})
            row = {"#": i, "group": k.name, "ops": ", ".join(k.ops) or "copy",
                   "pattern": k.pattern, "anchor": anchor or "", "rule": k.rule,
                   "runs on": self._where(k), "calls": calls.get(k.name, 0),
                   "ms/call": t.get("ms/call", ""), "%": t.get("%", "")}
            if self.has_accel:
                cycles = k.compiled.cycles if k.accel else None
                row["cycles"] = cycles if cycles is not None else ""
                row["why on the CPU"] = "" if k.accel else reasons.get(k.name, "")
            rows.append(row)
        return rows

    def _where(self, kernel) -> str:
        """Where the module runs a kernel: the accelerator, the reference interpreter on the
        host, the OpenCL device, or the CPU."""
        if kernel.accel:
            return "accelerator"
        if kernel.host:
            return "CPU (reference interpreter)"
        kind = getattr(self.module.target, "kind", "llvm")
        return "OpenCL device" if kind == "opencl" else "CPU"

    def _default_group(self) -> int:
        """The group taking the most time (the first when not profiled)."""
        if self.profile is None:
            return 0
        times = [r["ms/call"] * r["calls"] if isinstance(r["ms/call"], float) else 0.0
                 for r in self.groups]
        return int(np.argmax(times)) if times else 0

    def table(self):
        from .table import Table
        return Table(self.groups)

    def _index(self, name_or_index) -> int:
        if isinstance(name_or_index, (int, np.integer)):
            n = len(self.kernels)
            if not -n <= name_or_index < n:
                raise IndexError(f"FusionView.select: group {name_or_index} of {n}")
            return int(name_or_index) % n
        for i, k in enumerate(self.kernels):
            if k.name == name_or_index:
                return i
        raise KeyError(f"FusionView.select: no group named {name_or_index!r}; the groups are "
                       f"{', '.join(k.name for k in self.kernels)}")

    def select(self, name_or_index) -> None:
        """Show the group with this name or index in :attr:`groups`."""
        name = self.kernels[self._index(name_or_index)].name
        if self.group_select.value == name:
            self._show(name)
        else:
            self.group_select.value = name   # the observer shows it

    def current_source(self, kind: str = "loops") -> str:
        """The selected group's ``"loops"``, ``"llvm"`` or ``"asm"`` source, or its
        ``"accel"`` program (a group on the CPU has none: the text says why it is there)."""
        if self.selected is None:
            raise ValueError("FusionView: no group selected")
        key = (self.selected, kind)
        if key not in self._sources:
            k = self.current_kernel
            if kind == "accel" and not k.accel:
                reasons = getattr(self.module.compile_stats, "cpu_reasons", None) or {}
                why = reasons.get(k.name)
                self._sources[key] = (f"// {k.name}: runs on the {self._where(k)}"
                                      + (f" ({why})" if why else "") + ", so it has no accelerator program")
            else:
                self._sources[key] = self.module.source(kind, group=self.selected)
        return self._sources[key]

    @property
    def current_kernel(self):
        return self.kernels[self._index(self.selected)] if self.selected is not None else None

    def call_kernels(self) -> list:
        """For each call of the compiled program, in order (the clusters ``rb_call_K`` of its
        graph), the index in :attr:`kernels` of the kernel it runs."""
        index = {id(k): i for i, k in enumerate(self.kernels)}
        return [index[id(node.kernel)] for node in self.module.graph.nodes]

    def click(self, position: int) -> None:
        """What a click on a fused group of the program's graph does: open the kernel that call
        ``position`` runs (its loop IR, target source and time)."""
        calls = self.call_kernels()
        if not 0 <= int(position) < len(calls):
            raise IndexError(f"FusionView.click: call {position} of {len(calls)}")
        self.select(calls[int(position)])

    def program_svg(self) -> Optional[str]:
        """The SVG of the whole compiled program (its fused groups as clusters), or None when
        it could not be drawn."""
        return _graph_view(self.module, self._graph_cache)[1]

    def _program_html(self) -> str:
        """The program's graph, each fused group a click target: the click reads the group's
        call position from its cluster's id (``rb_call_K``), looks up the kernel that call runs
        and picks it in the group dropdown, which shows it (a browser runs this; Python does
        it with :meth:`click`)."""
        svg = self.program_svg()
        if svg is None:
            return _graph_view(self.module, self._graph_cache)[0]
        script = ("var g=event.target.closest('g.cluster');if(!g||!g.id)return;"
                  "var k=this.dataset.kernels.split(' ')[parseInt(g.id.slice(8))];"
                  "var s=this.closest('.rb-fusion-view').querySelector('.rb-group-select select');"
                  "if(!s||k===undefined)return;s.selectedIndex=parseInt(k);"
                  "s.dispatchEvent(new Event('change',{bubbles:true}));")
        kernels = " ".join(str(i) for i in self.call_kernels())
        return ('<style>.rb-program-graph g.cluster{cursor:pointer}</style>'
                f'<div class="rb-program-graph" data-kernels="{kernels}" onclick="{script}" '
                f'style="overflow: auto; max-height: 600px">{svg}</div>')

    @property
    def current_svg(self) -> Optional[str]:
        k = self.current_kernel
        return None if k is None else _graph_view(k.function, self._graph_cache)[1]

    def _show(self, name: str) -> None:
        self.selected = name
        for (kind, _title), box in zip(self.sources, self.source_html):
            box.value = _pre(self.current_source(kind))
        k = self.current_kernel
        row = self.groups[self._index(name)]
        where = f"runs on the {row['runs on']}"
        if row.get("cycles") != "" and row.get("cycles") is not None:
            where += f", {row['cycles']} cycles per call"
        elif row.get("why on the CPU"):
            where += f" ({row['why on the CPU']})"
        timed = f"; {row['ms/call']:.3f} ms per call, {row['calls']} calls" \
            if isinstance(row.get("ms/call"), float) else f"; {row['calls']} calls"
        self.group_label.value = (f"<p><b>{html.escape(k.name)}</b>: {html.escape(row['ops'])}; "
                                  f"pattern {html.escape(row['pattern'])}, anchor "
                                  f"{html.escape(row['anchor'] or '-')}, schedule "
                                  f"{html.escape(row['rule'])}; {html.escape(where)}"
                                  f"{html.escape(timed)}</p>")
        self.graph_html.value = _graph_view(k.function, self._graph_cache)[0]

    def _build_widgets(self) -> None:
        w = _widgets()
        self.table_html = w.HTML(self.table()._repr_html_())
        self.table_html.add_class("rb-fusion-table")
        self.group_select = w.Dropdown(options=[k.name for k in self.kernels], description="group",
                                       layout=w.Layout(width="520px"))
        self.group_select.add_class("rb-group-select")
        self.group_select.observe(lambda change: self._show(change["new"]), names="value")
        self.group_label = w.HTML()
        self.source_html = []
        for kind, _title in self.sources:
            box = w.HTML()
            box.add_class(f"rb-source-{kind}")
            self.source_html.append(box)
        self.tabs = w.Tab(children=self.source_html)
        for i, (_kind, title) in enumerate(self.sources):
            self.tabs.set_title(i, title)
        self.tabs.add_class("rb-source")
        self.graph_html = w.HTML()
        self.graph_html.add_class("rb-graph")
        self.program_html = w.HTML(self._program_html())
        self.program_html.add_class("rb-program")
        program_box = w.Accordion(children=[self.program_html])
        program_box.set_title(0, "the whole program: click a fused group to open its kernel")
        program_box.selected_index = 0
        self.widget = w.VBox([w.HTML("<h4>Fused groups</h4>"), self.table_html, self.group_select,
                              self.group_label, self.tabs, self.graph_html, program_box])
        self.widget.add_class("rb-fusion-view")

    def _ipython_display_(self):
        from IPython.display import display
        display(self.widget)

    def __repr__(self) -> str:
        return f"FusionView({len(self.kernels)} groups, selected {self.selected})"
