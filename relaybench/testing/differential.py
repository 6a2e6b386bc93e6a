"""The differential runner: one program, the reference interpreter, and every other way to run it.

:func:`run_differential` runs ``@main`` on the reference interpreter, then on each configuration
of :data:`CONFIGS` (the graph executor at each opt_level, each default pipeline then interpreted,
the text round trip, ConvertLayout to NHWC then built), and compares every output with the
reference. A configuration is one entry of the table: a name, a one-line description and a
function ``run(case) -> result``; a new executor or target (the VM, AoT, OpenCL, the accelerator)
is one more entry.

Each (program, configuration) gets an :class:`Outcome`:

* ``ok``;
* ``mismatch``: which output, the largest absolute and relative error (or the shape or dtype that
  differs);
* ``crash``: the exception's class and the first line of its message. The project has no kind of
  error that means "this program is legitimately refused" (a :class:`~relaybench.errors.
  CompileError` is raised for a failure as much as for a refusal), so every exception counts;
* ``skipped``: the configuration's device cannot hold the program's data types (float16 or
  float64 on an OpenCL device without ``cl_khr_fp16`` / ``cl_khr_fp64``), decided before
  building, from the device's own list of extensions (:class:`NotApplicable`). Not a failure.

Integer and bool outputs must be equal; float outputs within a tolerance that grows with the
dtype's epsilon and the reduction work of the program (:func:`tolerance`). NaN matches NaN and
an infinity the same infinity.

:meth:`Outcome.failure_class` names the class a failure falls in for a summary: the
configuration and either the exception type with its message normalized (numbers and names
replaced) or ``mismatch`` with the program's op set.

>>> import relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x_0: Tensor[(2, 3), float32]) { nn.relu(%x_0) }''')
>>> report = run_differential(mod, configs=["graph-O0", "text"])
>>> [(o.config, o.status) for o in report.outcomes]
[('graph-O0', 'ok'), ('text', 'ok')]
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from ..ir.module import IRModule
from .random_programs import domain_of, input_values

__all__ = ["Case", "Config", "CONFIGS", "Outcome", "Report", "run_differential", "compare",
           "tolerance", "run_config", "reference_result", "RoundTripError"]


class RoundTripError(Exception):
    """``parse(mod.astext())`` is not structurally equal to ``mod``."""


@dataclass
class Case:
    """One program and its inputs: ``inputs`` holds every parameter of ``@main`` (name ->
    array); ``weights`` names those that configurations that take params bind as constants."""

    mod: IRModule
    inputs: dict
    weights: tuple = ()

    @classmethod
    def of(cls, mod: IRModule, seed: int = 0, inputs: Optional[dict] = None) -> "Case":
        """The case of ``mod`` with inputs from the domains its parameter names give
        (:func:`~relaybench.testing.random_programs.input_values`), or ``inputs``."""
        from ..passes import InferType
        if not _has_type(mod):
            mod = InferType()(mod)
        values = dict(input_values(mod, seed))
        if inputs:
            values.update(inputs)
        weights = tuple(k for k in values if domain_of(k)[2])
        return cls(mod, values, weights)

    @property
    def params(self) -> dict:
        return {k: self.inputs[k] for k in self.weights}

    @property
    def free_inputs(self) -> dict:
        return {k: v for k, v in self.inputs.items() if k not in self.weights}

    def ordered(self, func) -> list:
        return [self.inputs[p.name_hint] for p in func.params]


def _has_type(mod: IRModule) -> bool:
    return mod["main"].type_or_none is not None


@dataclass(frozen=True)
class Config:
    """One way to run a program: ``run(case)`` returns ``@main``'s result (an array or a tuple).

    ``prepare(case)``, when given, turns the case into the one the configuration checks (the
    program quantized, say): its result on the reference interpreter, not the original's, is
    what ``run`` must reproduce."""

    name: str
    description: str
    run: Callable[[Case], object]
    prepare: Optional[Callable[[Case], "Case"]] = None


# ---------------------------------------------------------------------------------------------
# The configurations

def reference_result(case: Case):
    """``@main`` on the reference interpreter."""
    from ..backends.executor import create_executor
    run = create_executor("interpreter", mod=case.mod).evaluate()
    return run(*case.ordered(case.mod["main"]))


def _graph(opt_level: int, **knobs):
    def run(case: Case):
        from ..backends.build import build
        from ..config import Context
        with Context(**knobs):
            lib = build(case.mod, target="llvm", params=case.params, opt_level=opt_level)
        return lib.run(**case.free_inputs)
    return run


def _pipeline(opt_level: int):
    def run(case: Case):
        from ..backends.executor import create_executor
        from ..passes.bind_params import bind_params
        from ..passes.infra import PassContext
        from ..passes.pipelines import default_pipeline
        mod = bind_params(case.mod, case.params) if case.params else case.mod
        with PassContext(opt_level=opt_level):
            mod = default_pipeline(opt_level)(mod)
        main = mod["main"]
        values = case.free_inputs
        return create_executor("interpreter", mod=mod).evaluate()(
            *[values[p.name_hint] for p in main.params])
    return run


def _text_round_trip(case: Case):
    from ..backends.executor import create_executor
    from ..ir.parser import parse
    from ..ir.structural import first_difference, structural_equal
    text = case.mod.astext()
    back = parse(text)
    if not structural_equal(back, case.mod, map_free_vars=True):
        where = first_difference(back, case.mod)
        raise RoundTripError(f"parse(astext()) differs from the program: {where}")
    return create_executor("interpreter", mod=back).evaluate()(*case.ordered(back["main"]))


def _convert_nhwc(case: Case):
    from ..backends.build import build
    from ..passes import ConvertLayout, InferType
    from ..passes.infra import PassContext
    with PassContext(opt_level=3):
        mod = ConvertLayout(desired_layouts={"nn.conv2d": ["NHWC", "default"]})(
            InferType()(case.mod))
    lib = build(mod, target="llvm", params=case.params, opt_level=3)
    return lib.run(**case.free_inputs)


def _accel(opt_level: int):
    def run(case: Case):
        from ..backends.build import build
        lib = build(case.mod, target="accel", params=case.params, opt_level=opt_level)
        return lib.run(**case.free_inputs)
    return run


def _vm(opt_level: int):
    def run(case: Case):
        from ..backends.vm import VirtualMachine, compile as vm_compile
        exe = vm_compile(case.mod, target="llvm", params=case.params or None, opt_level=opt_level)
        main = case.mod["main"]
        values = case.free_inputs
        return VirtualMachine(exe).invoke("main", *[values[p.name_hint] for p in main.params
                                                    if p.name_hint in values])
    return run


def _quantized(case: Case) -> Case:
    """The case's program quantized by Relay's passes with a global scale (every conv2d and
    dense in int8, none skipped), its weights bound; the other inputs unchanged."""
    from ..quantize import qconfig, quantize
    with qconfig(calibrate_mode="global_scale", global_scale=8.0, skip_conv_layers=None,
                 skip_dense_layer=False):
        mod = quantize(case.mod, case.params)
    return Case(mod, case.free_inputs, ())


CONFIGS: dict = {c.name: c for c in [
    Config("graph-O0", "rb.build at opt_level 0, graph executor (LLVM)", _graph(0)),
    Config("graph-O1", "rb.build at opt_level 1, graph executor (LLVM)", _graph(1)),
    Config("graph-O2", "rb.build at opt_level 2, graph executor (LLVM)", _graph(2)),
    Config("graph-O3", "rb.build at opt_level 3 with RB_WINOGRAD=on (every 3x3 stride-1 "
           "float32 convolution in Winograd's form), graph executor (LLVM)",
           _graph(3, RB_WINOGRAD="on")),
    Config("pipeline-O0", "default_pipeline(0), then the interpreter", _pipeline(0)),
    Config("pipeline-O1", "default_pipeline(1), then the interpreter", _pipeline(1)),
    Config("pipeline-O2", "default_pipeline(2), then the interpreter", _pipeline(2)),
    Config("pipeline-O3", "default_pipeline(3), then the interpreter", _pipeline(3)),
    Config("text", "parse(astext()) structurally equal, then the interpreter", _text_round_trip),
    Config("nhwc", "ConvertLayout(nn.conv2d -> NHWC), rb.build at opt_level 3", _convert_nhwc),
    Config("quantize-O3", "rb.quantize.quantize (global scale, every conv2d and dense in int8), "
           "then rb.build at opt_level 3, against the quantized program on the interpreter",
           _graph(3), prepare=_quantized),
    Config("accel-O3", "the program quantized as for quantize-O3, then rb.build(target='accel'): "
           "packed int8 convolutions in the simulated accelerator, the rest on the CPU",
           _accel(3), prepare=_quantized),
    Config("vm-O0", "rb.vm.compile at opt_level 0, the VM (LLVM kernels)", _vm(0)),
    Config("vm-O3", "rb.vm.compile at opt_level 3, the VM (LLVM kernels)", _vm(3)),
]}
"""Every configuration a program is checked on, by name."""


class NotApplicable(Exception):
    """Raised by a configuration's ``run`` for a program its device cannot run at all (the
    outcome is ``skipped``)."""


def _opencl(opt_level: int, **knobs):
    def run(case: Case):
        from ..backends.build import build
        from ..backends.opencl import get_device
        from ..config import Context
        features = get_device("opencl").features
        used = set(_float_dtypes(case.mod))
        for dtype, present, extension in (("float16", features.fp16, "cl_khr_fp16"),
                                          ("float64", features.fp64, "cl_khr_fp64")):
            if dtype in used and not present:
                raise NotApplicable(f"{dtype}: the device {features.name} lacks {extension}")
        with Context(**knobs):
            lib = build(case.mod, target="opencl", params=case.params, opt_level=opt_level)
        return lib.run(**case.free_inputs)
    return run


def _opencl_present() -> bool:
    import importlib.util
    return importlib.util.find_spec("pyopencl") is not None


if _opencl_present():  # the OpenCL backend's extra is installed (PoCL, or a GPU's driver)
    CONFIGS["opencl-O3"] = Config("opencl-O3", "rb.build(target='opencl') at opt_level 3 "
                                  "with RB_GPU_CONV=winograd (every 3x3 stride-1 float32 "
                                  "convolution in Winograd's form), graph executor on the "
                                  "OpenCL device", _opencl(3, RB_GPU_CONV="winograd"))


# ---------------------------------------------------------------------------------------------
# Comparing

_EPS = {"float16": 2.0 ** -10, "float32": 2.0 ** -23, "float64": 2.0 ** -52,
        "bfloat16": 2.0 ** -7}


# ops whose computes (and references) do part of their arithmetic in float32 whatever the
# tensors' dtype (resize's source coordinates, as in Relay): their programs get float32's epsilon
_FLOAT32_INSIDE = frozenset({"image.resize2d"})


def _float_dtypes(mod: IRModule) -> set:
    """The float dtypes of every value of ``@main`` (a float64 output may carry a float32
    value's rounding)."""
    from ..ir.functor import post_order
    from ..ir.types import TensorType, TupleType
    if not _has_type(mod):
        from ..passes import InferType
        mod = InferType()(mod)
    out, stack = set(), [p.type_annotation for p in mod["main"].params]
    stack += [n.type_or_none for n in post_order(mod["main"].body)]
    while stack:
        t = stack.pop()
        if isinstance(t, TensorType) and t.dtype in _EPS:
            out.add(t.dtype)
        elif isinstance(t, TupleType):
            stack.extend(t.fields)
    return out


def _reduction_work(mod: IRModule) -> int:
    """A bound on how many roundings can pile up in one output element: the calls, plus the
    elements that every reducing call (a reduction, conv, dense, pooling, softmax, a norm)
    reads."""
    from ..ir.expr import Call, Op
    from ..ir.functor import post_order
    from ..ir.types import TensorType, TupleType
    from ..op.registry import OpPattern

    def size(t) -> int:
        if isinstance(t, TensorType):
            return int(np.prod([d if isinstance(d, int) else 1 for d in t.shape], dtype=np.int64))
        if isinstance(t, TupleType):
            return sum(size(f) for f in t.fields)
        return 1

    if not _has_type(mod):
        from ..passes import InferType
        mod = InferType()(mod)
    work = 0
    for node in post_order(mod["main"].body):
        if not (isinstance(node, Call) and isinstance(node.op, Op)):
            continue
        work += 1
        pattern = getattr(node.op.opdef, "pattern", OpPattern.ELEMWISE)
        if pattern >= OpPattern.COMM_REDUCE:
            work += sum(size(a.type_or_none) for a in node.args)
    return work


def tolerance(mod: IRModule, dtype: str) -> float:
    """The relative tolerance for a float output of ``dtype`` of ``mod`` (0 for the rest): the
    epsilon of the least precise float dtype in the program, times its reduction work."""
    eps = _EPS.get(dtype)
    if eps is None:
        return 0.0
    if _FLOAT32_INSIDE.intersection(_ops_of(mod)):
        eps = max(eps, _EPS["float32"])
    eps = max([eps] + [_EPS[d] for d in _float_dtypes(mod)])
    return min(16 * eps * _reduction_work(mod), 2048 * eps ** 0.5)


@dataclass
class Outcome:
    """How one configuration did on one program."""

    config: str
    status: str                      # "ok", "mismatch", "crash" or "skipped"
    detail: str = ""
    output: Optional[int] = None     # which output (flattened) differs
    max_abs: float = 0.0
    max_rel: float = 0.0
    error_type: str = ""
    ops: tuple = ()
    seconds: float = 0.0

    def failure_class(self) -> Optional[str]:
        """``config: crash Type: normalized message`` or ``config: mismatch [ops]``; None when
        ok."""
        if self.status in ("ok", "skipped"):
            return None
        if self.status == "mismatch":
            return f"{self.config}: mismatch [{', '.join(sorted(set(self.ops)))}]"
        return f"{self.config}: {self.status} {self.error_type}: {normalize_message(self.detail)}"

    def __str__(self) -> str:
        if self.status == "ok":
            return f"{self.config}: ok"
        if self.status == "mismatch":
            return f"{self.config}: mismatch: {self.detail}"
        return f"{self.config}: {self.status}: {self.error_type}: {self.detail}"


def normalize_message(message: str) -> str:
    """A message with what varies between programs replaced: variable names, numbers, shapes."""
    text = message.splitlines()[0] if message else ""
    text = re.sub(r"%[\w.]+", "%v", text)
    text = re.sub(r"Tensor\[\([^)]*\)", "Tensor[(...)", text)
    text = re.sub(r"(?<![A-Za-z0-9.])-?\d+(\.\d+)?(e-?\d+)?", "N", text)
    text = re.sub(r"fused_[\w]+", "fused_...", text)
    return text[:160]


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else ""


def compare(mod: IRModule, expected, actual) -> Optional[tuple]:
    """None when ``actual`` matches ``expected``; else ``(output index, detail, max_abs,
    max_rel)``."""
    from ..backends.build import flatten_result
    want, got = flatten_result(expected), flatten_result(actual)
    if len(want) != len(got):
        return (None, f"{len(got)} outputs, expected {len(want)}", 0.0, 0.0)
    for i, (w, a) in enumerate(zip(want, got)):
        w, a = np.asarray(w), np.asarray(a)
        if w.shape != a.shape:
            return i, f"output {i}: shape {a.shape}, expected {w.shape}", 0.0, 0.0
        if w.dtype != a.dtype:
            return i, f"output {i}: dtype {a.dtype}, expected {w.dtype}", 0.0, 0.0
        if w.dtype.kind != "f":
            bad = w != a
            if bad.any():
                k = int(np.argmax(bad.ravel()))
                diff = np.abs(w.astype(np.float64) - a.astype(np.float64))
                return (i, f"output {i} ({w.dtype}{list(w.shape)}): {int(bad.sum())} of {w.size} "
                        f"differ, first at flat index {k}: {a.ravel()[k]!r}, expected "
                        f"{w.ravel()[k]!r}", float(diff.max()), float("inf"))
            continue
        rtol = tolerance(mod, w.dtype.name)
        w64, a64 = w.astype(np.float64), a.astype(np.float64)
        same_special = (np.isnan(w64) & np.isnan(a64)) | (np.isinf(w64) & (w64 == a64))
        finite = np.isfinite(w64)
        scale = max(1.0, float(np.abs(w64[finite]).max()) if finite.any() else 1.0)
        with np.errstate(invalid="ignore"):
            diff = np.abs(w64 - a64)
        both_finite = finite & np.isfinite(a64)
        with np.errstate(invalid="ignore"):
            close = both_finite & (diff <= rtol * scale + rtol * np.abs(w64))
        bad = ~same_special & ~close
        if bad.any():
            k = int(np.argmax(bad.ravel()))
            d = diff[np.isfinite(diff)]
            max_abs = float(d.max()) if d.size else float("inf")
            with np.errstate(invalid="ignore", divide="ignore"):
                rel = diff / np.maximum(np.abs(w64), 1e-30)
            r = rel[np.isfinite(rel)]
            max_rel = float(r.max()) if r.size else float("inf")
            return (i, f"output {i} ({w.dtype}{list(w.shape)}): {int(bad.sum())} of {w.size} "
                    f"differ (rtol {rtol:.2g}), first at flat index {k}: {a.ravel()[k]!r}, "
                    f"expected {w.ravel()[k]!r}; max abs error {max_abs:.3g}, max rel error "
                    f"{max_rel:.3g}", max_abs, max_rel)
    return None


@dataclass
class Report:
    """The reference's result (or its crash) and every configuration's outcome."""

    reference: Optional[Outcome]
    outcomes: list = field(default_factory=list)

    @property
    def failures(self) -> list:
        out = [self.reference] if self.reference is not None and self.reference.status != "ok" \
            else []
        return out + [o for o in self.outcomes if o.status not in ("ok", "skipped")]

    @property
    def ok(self) -> bool:
        return not self.failures

    def __str__(self) -> str:
        lines = [str(o) for o in ([self.reference] if self.reference else []) + self.outcomes]
        return "\n".join(lines)


def _ops_of(mod: IRModule) -> tuple:
    from ..ir.expr import Call, Op
    from ..ir.functor import post_order
    return tuple(sorted({n.op.name for n in post_order(mod["main"].body)
                         if isinstance(n, Call) and isinstance(n.op, Op)}))


def run_config(case: Case, config, expected) -> Outcome:
    """Run one configuration (a name or a :class:`Config`) and compare with ``expected``."""
    config = CONFIGS[config] if isinstance(config, str) else config
    start = time.perf_counter()
    ops = _ops_of(case.mod)
    try:
        if config.prepare is not None:
            case = config.prepare(case)
            expected = reference_result(case)
        actual = config.run(case)
    except NotApplicable as err:
        return Outcome(config.name, "skipped", str(err), ops=ops,
                       seconds=time.perf_counter() - start)
    except Exception as err:  # every exception is a crash of this configuration
        return Outcome(config.name, "crash", _first_line(err), error_type=type(err).__name__,
                       ops=ops, seconds=time.perf_counter() - start)
    seconds = time.perf_counter() - start
    try:
        diff = compare(case.mod, expected, actual)
    except Exception as err:  # a result that is not arrays at all
        return Outcome(config.name, "mismatch", f"result not comparable: {err}", ops=ops,
                       seconds=seconds)
    if diff is None:
        return Outcome(config.name, "ok", ops=ops, seconds=seconds)
    index, detail, max_abs, max_rel = diff
    return Outcome(config.name, "mismatch", detail, output=index, max_abs=max_abs,
                   max_rel=max_rel, ops=ops, seconds=seconds)


def run_differential(mod: IRModule, inputs: Optional[dict] = None, seed: int = 0,
                     configs: Optional[Sequence] = None) -> Report:
    """Run ``mod`` on the reference interpreter and on ``configs`` (names or :class:`Config` s;
    default every entry of :data:`CONFIGS`) and compare.

    Inputs come from the parameters' names and ``seed``, updated with ``inputs``. When the
    reference itself fails, the report holds that crash (as configuration ``interpreter``) and
    nothing else.
    """
    case = Case.of(mod, seed, inputs)
    chosen = list(CONFIGS.values()) if configs is None else \
        [CONFIGS[c] if isinstance(c, str) else c for c in configs]
    start = time.perf_counter()
    try:
        expected = reference_result(case)
    except Exception as err:
        return Report(Outcome("interpreter", "crash", _first_line(err),
                              error_type=type(err).__name__, ops=_ops_of(case.mod),
                              seconds=time.perf_counter() - start))
    report = Report(None)
    for config in chosen:
        report.outcomes.append(run_config(case, config, expected))
    return report
