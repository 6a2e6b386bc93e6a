"""The model zoo's registry: every workload is a function ``NAME(batch_size=1, ...) -> (mod, params)``."""

from __future__ import annotations

import difflib
from typing import Callable

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
