"""The model zoo's registry: every workload is a function ``NAME(batch_size=1, ...) -> (mod, params)``."""

from __future__ import annotations

import difflib
from typing import Callable

from .._table import Table

_MODELS: dict = {}


def register_model(fn: Callable) -> Callable:
    """Add a workload under its function's name."""
    _MODELS[fn.__name__] = fn
    return fn


def get(name: str, **kwargs):
    """``(mod, params)`` of the workload ``name``; keyword arguments go to its function."""
    try:
        fn = _MODELS[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(_MODELS), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"unknown model {name!r}{hint} (have: {', '.join(sorted(_MODELS))})") from None
    return fn(**kwargs)


def list_models() -> list:
    return sorted(_MODELS)


class ModelSummary:
    """The facts about one workload that the zoo's table shows."""

    def __init__(self, name: str, mod, params: dict):
        from ..ir.analysis import op_histogram
        from ..passes import InferType
        self.name = name
        self.mod = mod
        self.params = params
        self.num_params = int(sum(p.size for p in params.values()))
        from collections import Counter
        from ..ir.module import prelude_module
        prelude = {gv.name_hint for gv in prelude_module().functions}
        own = [f for gv, f in mod.functions.items() if gv.name_hint not in prelude]
        self.histogram = Counter()
        for f in own:  # the model's own functions; the prelude's are shared by all
            self.histogram.update(op_histogram(f))
        self.num_ops = sum(self.histogram.values())
        self.num_functions = len(own)
        main = InferType()(mod)["main"]
        self.input_types = [str(p.checked_type) for p in main.params if p.name_hint not in params]
        self.output_type = str(main.body.checked_type)

    def top_ops(self, n: int = 4) -> str:
        return ", ".join(f"{name} x{count}" for name, count in self.histogram.most_common(n))

    def row(self) -> dict:
        return {"model": self.name, "parameters": f"{self.num_params:,}", "ops": self.num_ops,
                "globals": self.num_functions, "inputs": "; ".join(self.input_types),
                "output": self.output_type, "most used ops": self.top_ops()}


def summary(names=None, **kwargs) -> Table:
    """A table of the zoo: parameters, operator counts, input and output types of each model.

    ``kwargs`` go to every model's function (``batch_size=2``).
    """
    rows = []
    for name in names or list_models():
        mod, params = get(name, **kwargs)
        rows.append(ModelSummary(name, mod, params).row())
    return Table(rows)
