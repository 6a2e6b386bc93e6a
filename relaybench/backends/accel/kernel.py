"""A fused group compiled for the accelerator: called like a CPU kernel, run in the simulator.

:class:`AccelKernel` holds the group's program (:mod:`.lower`) and a DRAM image with a region per
tensor. A call copies the group's inputs into their regions (the data, and the weights and bias
the graph passes), runs the :class:`~.simulator.Simulator` and copies the output region back into
the output array. ``last_stats`` keeps the :class:`~.simulator.RunStats` of the latest call: the
simulated cycles and time at the design's clock, which the graph module's profile reports for
the group instead of the host's time spent simulating it. ``totals`` sums every call since
:meth:`AccelKernel.reset_totals` (calls, cycles, simulated seconds, GEMM MACs, the MACs the core
could have done, and the host's seconds spent writing, simulating and reading back): a program
run by the VM calls one group many times per run (a TreeLSTM's cell once per tree node).
"""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from ...errors import CompileError, ExecutionError
from ...ir.expr import Function
from ...ir.types import TensorType
from .config import AccelConfig
from .isa import disassemble
from .lower import ConvPlan, emit, lower_conv
from .simulator import Dram, Simulator

__all__ = ["AccelKernel"]


class AccelKernel:
    """One accelerator group: ``kernel(*inputs, *outputs)`` as the graph executor calls it."""

    rule = "accel conv2d_packed"
    pattern = "OUT_ELEMWISE_FUSABLE"

    def __init__(self, name: str, func: Function, plan: ConvPlan, config: AccelConfig):
        self.name, self.func, self.plan, self.config = name, func, plan, config
        self.input_types = [p.checked_type for p in func.params]
        self.output_types = [func.body.checked_type]
        for t in self.input_types + self.output_types:
            if not isinstance(t, TensorType):
                raise CompileError(f"{name}: an accelerator group takes and gives tensors")
        lowered = lower_conv(plan, config)
        self.dram = Dram(config)
        bases = {}
        for role, (region, mem_type, count) in lowered.regions.items():
            bases[role] = self.dram.alloc(region, mem_type, count).base
        self.lowered = emit(lowered, config, bases)
        self.program = self.lowered.program
        self.simulator = Simulator(config)
        self._region = {role: region for role, (region, _, _) in lowered.regions.items()}
        if plan.weight is not None:
            self.dram.write(self._region["weight"], plan.weight)
        if plan.has_bias and plan.bias is not None:
            self._write_bias(plan.bias)
        self.last_stats = None
        self.calls = 0
        self.reset_totals()

    def reset_totals(self) -> None:
        """Start :attr:`totals` again from zero."""
        self.totals = {"calls": 0, "cycles": 0, "seconds": 0.0, "gemm_macs": 0,
                       "possible_macs": 0, "host_seconds": 0.0}

    @property
    def flops(self) -> int:
        return 2 * self.plan.macs

    def _write_bias(self, raw):
        b = self.config.batch
        bias = self.plan.bias_values(raw)
        self.dram.write(self._region["bias"], np.broadcast_to(bias[:, None, :], (bias.shape[0], b,
                                                                              bias.shape[1])))

    def __call__(self, *arrays, num_threads: Optional[int] = None) -> None:
        started = time.perf_counter()
        n_in = len(self.input_types)
        if len(arrays) != n_in + 1:
            raise ExecutionError(f"{self.name}: {len(arrays)} arrays, expected {n_in} inputs and "
                                 f"1 output")
        for k, (array, t) in enumerate(zip(arrays, self.input_types + self.output_types)):
            if tuple(array.shape) != tuple(int(d) for d in t.shape) or str(array.dtype) != str(t.dtype):
                raise ExecutionError(f"{self.name}: argument {k} is {array.dtype}{list(array.shape)}, "
                                     f"expected {t}")
        plan = self.plan
        self.dram.write(self._region["data"], arrays[plan.data_param])
        if plan.weight_param is not None:
            self.dram.write(self._region["weight"], arrays[plan.weight_param])
        if plan.bias_param is not None:
            self._write_bias(arrays[plan.bias_param])
        if plan.residual_param is not None:
            self.dram.write(self._region["residual"], arrays[plan.residual_param])
        self.last_stats = stats = self.simulator.run(self.program, self.dram)
        self.calls += 1
        out = arrays[n_in]
        np.copyto(out, self.dram[self._region["out"]].array.reshape(out.shape), casting="no")
        totals = self.totals
        totals["calls"] += 1
        totals["cycles"] += stats.cycles
        totals["seconds"] += stats.seconds
        totals["gemm_macs"] += stats.gemm_macs
        totals["possible_macs"] += stats.cycles * self.config.macs_per_cycle
        totals["host_seconds"] += time.perf_counter() - started

    @property
    def cycles(self) -> Optional[int]:
        return None if self.last_stats is None else self.last_stats.cycles

    @property
    def simulated_seconds(self) -> Optional[float]:
        return None if self.last_stats is None else self.last_stats.seconds

    def source(self, kind: str = "accel") -> str:
        """``accel`` (or ``asm``): the instruction stream, disassembled; ``loops``/``relay``: the
        group's Relay text with the tiling."""
        t = self.lowered.tiling
        head = (f"// {self.name}: accelerator, tiles of {t.toc} channel blocks x {t.th} rows "
                f"(input channels in chunks of {t.tic} blocks), "
                f"{self.lowered.tiles} tiles, {len(self.program)} instructions, "
                f"{len(self.program.uops)} micro-ops")
        if kind in ("accel", "asm"):
            return head + "\n" + disassemble(self.program)
        if kind in ("loops", "relay"):
            from ...ir.module import IRModule
            return head + "\n" + str(IRModule.from_expr(Function(self.func.params, self.func.body,
                                                               self.func.ret_type)))
        if kind in ("llvm", "opencl"):
            return f"; {self.name}: an accelerator group has no {kind} code (source('accel'))"
        raise ValueError(f"unknown source kind {kind!r}; known kinds: accel, asm, loops, relay")

    def __repr__(self) -> str:
        return f"AccelKernel({self.name}: {len(self.program)} instructions)"
