"""Strategies: per target, the compute and the schedule of each fused group's anchor op.

A strategy module has two functions:

* ``compute(call, target)``: a compute to use for this call instead of the op's own (or None), as
  TVM's x86 ``conv2d_NCHWc`` splits the input channels into block and lane;
* ``schedule(group, compute_at=True) -> (Schedule, rule name)``: the schedule of one group
  (:class:`~relaybench.backends.lowering.GroupInfo`); with ``compute_at=False`` no stage is
  attached inside another's loops (lowering's fallback when a region cannot be inferred).

``get_strategy(target)`` picks the module for a target; ``llvm`` is :mod:`.x86`.
"""

from __future__ import annotations

from ..target import Target

__all__ = ["get_strategy"]


def get_strategy(target):
    target = Target.parse(target)
    if target.kind == "llvm":
        from . import x86
        return x86
    from ...errors import CompileError
    raise CompileError(f"no strategy for target {target}")
