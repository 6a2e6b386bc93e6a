"""Passes: each takes an IRModule and returns a new one, typed.

>>> import relaybench as rb
>>> x = rb.var("x", shape=(2, 2))
>>> mod = rb.passes.InferType()(rb.IRModule.from_expr(rb.Function([x], x * x)))
>>> mod["main"].checked_type
fn (Tensor[(2, 2), float32]) -> Tensor[(2, 2), float32]

Every pass lives in its own file of this package, named after it (``fold_constant.py`` defines
``FoldConstant``), and registers itself with a decorator from :mod:`relaybench.passes.infra`;
``relaybench.passes.NAME`` finds it by its Relay name. ``list_passes()`` lists them all with their
opt_level and a line of doc.
"""

from __future__ import annotations

import importlib
import pkgutil

from .infra import (FunctionPass, ModulePass, Pass, PassContext, PassInfo, PassInstrument, Sequential,  # noqa: F401
                    function_pass, get_pass, list_passes, module_pass, parse_pipeline, register_pass)
# Imported eagerly: importing the submodule ``relaybench.passes.bind_params`` anywhere would
# otherwise make the package attribute the module, not the function.
from .bind_params import bind_params, bind_params_by_name  # noqa: E402,F401
# Likewise the accelerator's graph_pack, named after its file.
from .graph_pack import graph_pack  # noqa: E402,F401

# modules of this package that hold infrastructure, not passes
_NOT_PASSES = {"bind_params", "infra", "instruments", "pipelines", "pattern", "dataflow_pattern", "well_formed"}

# public names defined by infrastructure modules, loaded on first use
_LAZY = {
    "PassTimer": "instruments", "Snapshots": "instruments", "PrintIR": "instruments",
    "VerifyEach": "instruments", "PassVerificationError": "instruments",
    "default_pipeline": "pipelines", "build_pipeline": "pipelines", "optimize": "pipelines",
    "pipeline_text": "pipelines", "passes_table": "infra", "pass_options": "infra",
    "unregister_pass": "infra", "check_well_formed": "well_formed", "WellFormedError": "well_formed",
}

_loaded = False


def _load_all_passes() -> None:
    """Import every pass module once (each registers its passes)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_") or info.name in _NOT_PASSES:
            continue
        importlib.import_module(f"{__name__}.{info.name}")
    # the quantization passes (QuantizeAnnotate, QuantizeCalibrate, QuantizeRealize) live in
    # relaybench.quantize, with their qconfig
    importlib.import_module("relaybench.quantize")


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    else:
        from . import infra
        if name not in infra._REGISTRY:
            _load_all_passes()
        entry = infra._REGISTRY.get(name)
        if entry is None:
            # a pass module by its file name (relaybench.passes.gradient), once all are imported
            if name in globals():
                return globals()[name]
            raise AttributeError(f"module 'relaybench.passes' has no attribute {name!r}")
        value = entry.factory
    globals()[name] = value
    return value


def __dir__():
    from . import infra
    _load_all_passes()
    return sorted(set(globals()) | set(infra._REGISTRY) | set(_LAZY))
