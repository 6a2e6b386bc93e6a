"""``quantize(mod, params, dataset)``: Relay's ``relay.quantize.quantize``.

1. ``prerequisite_optimize``: the parameters bound, then SpecializeConstantArgs (weights that
   ``@main`` passes down to a recursive function become constants there, so its layers are
   quantized too), ToGraphNormalForm (``let`` bindings of dataflow values become plain sharing,
   which the rewriters walk), SimplifyInference, FoldConstant,
   FoldScaleAxis, CanonicalizeOps, FoldConstant (at opt_level 3), so that batch norms have
   become constant scales folded into the weights and biases are plain ``add`` s.
2. QuantizeAnnotate, QuantizeCalibrate (with ``dataset``), InferType, QuantizeRealize (left out
   with ``do_simulation``: the result then is the simulated program) and FoldConstant, which
   quantizes the weights at compile time. They run in a PassContext of opt_level 3 that
   requires the three quantize passes, with the instruments of the current context (so a
   Snapshots instrument sees each pass).
"""

from __future__ import annotations

from typing import Iterable, Optional

from ..ir.module import IRModule
from ..passes.infra import PassContext, Sequential, get_pass
from .annotate import _WEIGHTS_BOUND, QuantizeAnnotate
from .calibrate import QuantizeCalibrate
from .qconfig import current_qconfig
from .realize import QuantizeRealize

__all__ = ["quantize", "prerequisite_optimize"]


def _context(required=()):
    outer = PassContext.current()
    return PassContext(opt_level=3, required_pass=required, disabled_pass=outer.disabled_pass,
                       config=outer.config, instruments=outer.instruments)


def prerequisite_optimize(mod: IRModule, params: Optional[dict] = None) -> IRModule:
    """``mod`` with ``params`` bound and the passes quantization expects run (see the module)."""
    from ..passes.bind_params import bind_params
    if params:
        mod = bind_params(mod, params)
    seq = Sequential([get_pass(name)() for name in ("SpecializeConstantArgs", "ToGraphNormalForm",
                                                    "SimplifyInference", "FoldConstant",
                                                    "FoldScaleAxis", "CanonicalizeOps", "FoldConstant")],
                     name="QuantizePrerequisites")
    with _context():
        return seq(mod)


def quantize(mod: IRModule, params: Optional[dict] = None, dataset: Optional[Iterable] = None) -> IRModule:
    """``mod`` quantized under the current qconfig: annotated, calibrated (on ``dataset``, an
    iterable of input dicts, for the data-driven calibrate modes) and realized (see the module).
    """
    if not isinstance(mod, IRModule):
        raise TypeError(f"quantize takes an IRModule, not {type(mod).__name__}")
    cfg = current_qconfig()
    if cfg.partition_conversions != "disabled":
        raise ValueError(f"qconfig: partition_conversions={cfg.partition_conversions!r} is not "
                         f"supported (only 'disabled')")
    mod = prerequisite_optimize(mod, params)
    passes = [QuantizeAnnotate(), QuantizeCalibrate(dataset), get_pass("InferType")()]
    if not cfg.do_simulation:
        passes.append(QuantizeRealize())
    passes.append(get_pass("FoldConstant")())
    token = _WEIGHTS_BOUND.set(True)
    try:
        with _context(("QuantizeAnnotate", "QuantizeCalibrate", "QuantizeRealize")):
            return Sequential(passes, name="Quantize")(mod)
    finally:
        _WEIGHTS_BOUND.reset(token)
