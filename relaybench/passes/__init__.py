"""Passes: each takes an IRModule and returns a new one.

>>> import relaybench as rb
>>> x = rb.var("x", shape=(2, 2))
>>> mod = rb.passes.InferType()(rb.IRModule.from_expr(rb.Function([x], x * x)))
>>> mod["main"].checked_type
fn (Tensor[(2, 2), float32]) -> Tensor[(2, 2), float32]

Each pass is listed once in ``_PASSES`` (its public name -> the module and attribute that define
it) and loaded on first use, so importing ``relaybench.passes`` stays cheap. Adding a pass is one
line there.
"""

from __future__ import annotations

import importlib

_PASSES = {
    "InferType": ("relaybench.ir.type_infer", "InferType"),
}

__all__ = sorted(_PASSES)


def __getattr__(name):
    entry = _PASSES.get(name)
    if entry is None:
        raise AttributeError(f"module 'relaybench.passes' has no attribute {name!r}")
    value = getattr(importlib.import_module(entry[0]), entry[1])
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_PASSES))
