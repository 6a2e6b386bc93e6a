"""Strategies: per target, the compute and the schedule of each fused group's anchor op.

A strategy module has two functions:

* ``compute(call, target)``: a compute to use for this call instead of the op's own (or None), as
  TVM's x86 ``conv2d_NCHWc`` splits the input channels into block and lane;
* ``schedule(group, compute_at=True) -> (Schedule, rule name)``: the schedule of one group
  (:class:`~relaybench.backends.lowering.GroupInfo`); with ``compute_at=False`` no stage is
  attached inside another's loops (lowering's fallback when a region cannot be inferred).

``get_strategy(target)`` picks the module for a target from :data:`STRATEGIES`: ``llvm`` is
:mod:`.x86`, ``opencl`` is :mod:`.gpu`.
"""

from __future__ import annotations

from ..target import Target

__all__ = ["get_strategy", "STRATEGIES"]

#: target kind -> the strategy module (imported when first asked for)
STRATEGIES = {"llvm": "x86", "opencl": "gpu"}


def get_strategy(target):
    import importlib
    target = Target.parse(target)
    name = STRATEGIES.get(target.kind)
    if name is None:
        from ...errors import CompileError
        raise CompileError(f"no strategy for target {target}")
    return importlib.import_module(f"{__name__}.{name}")
