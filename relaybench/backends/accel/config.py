"""The simulated accelerator's hardware configuration: :class:`AccelConfig`.

The design is VTA's (``apache/tvm-vta``, ``config/vta_config.json`` and ``include/vta/hw_spec.h``):
a GEMM core that multiplies a ``BATCH x BLOCK_IN`` tile of int8 inputs by the transpose of a
``BLOCK_OUT x BLOCK_IN`` tile of int8 weights and adds the ``BATCH x BLOCK_OUT`` product into an
int32 accumulator tile, once per cycle, next to a tensor ALU working on the accumulator; four
on-chip buffers (micro-ops, inputs, weights, accumulator) filled and drained by DMA.

Every buffer is addressed in *elements*, not bytes, as in VTA: an input element is one
``(batch, block_in)`` int8 tile, a weight element one ``(block_out, block_in)`` tile, an
accumulator element one ``(batch, block_out)`` int32 tile, an output element the same tile
narrowed to int8, a micro-op one 32-bit word. The output buffer has no storage of its own: as in
VTA it has the accumulator's depth and each index names the accumulator entry narrowed to the
output type.

VTA's defaults, every field changeable:

>>> from relaybench.backends.accel import AccelConfig
>>> cfg = AccelConfig()
>>> cfg.macs_per_cycle, cfg.inp_depth, cfg.wgt_depth, cfg.acc_depth, cfg.uop_depth
(256, 2048, 1024, 2048, 8192)
>>> two = AccelConfig.multi_batch(2)          # same 256 MACs per cycle, two images at a time
>>> two.batch, two.block_in, two.block_out, two.macs_per_cycle
(2, 8, 16, 256)

The timing fields (``load_latency``, ``store_latency``, ``dram_bytes_per_cycle``, the pipeline
depths and ALU initiation intervals) feed the simulator's cost model; see
:mod:`relaybench.backends.accel.simulator` for the formulas. The defaults model VTA on a PYNQ
board: a 100 MHz clock and a 64-bit memory bus (8 bytes per cycle).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ...errors import RelayError

__all__ = ["AccelConfig", "AccelError", "DEFAULT_CONFIG"]


class AccelError(RelayError):
    """A fault of the simulated accelerator: a bad configuration, an instruction field out of
    range, a transfer outside its DRAM region, or a deadlocked instruction stream. The message
    names the place (the field, the instruction and its index)."""


_INT_DTYPES = ("int8", "int16", "int32")

# Fixed ISA field widths (VTA's hw_spec_const.h): they do not depend on the buffer sizes.
INSN_BITS = 128
UOP_BITS = 32
OPCODE_BITS = 3
MEMOP_ID_BITS = 3
SRAM_ADDR_BITS = 16
DRAM_ADDR_BITS = 32
SIZE_BITS = 16
STRIDE_BITS = 16
PAD_BITS = 4
PAD_VALUE_BITS = 2
LOOP_ITER_BITS = 14
ALU_OPCODE_BITS = 3
ALU_IMM_BITS = 16


def _index_bits(depth: int) -> int:
    """Bits needed to hold every index of a buffer of ``depth`` elements."""
    return max(1, (depth - 1).bit_length())


@dataclass(frozen=True)
class AccelConfig:
    """One accelerator design. Frozen: derive variants with :func:`dataclasses.replace` or
    :meth:`multi_batch`; every variant is validated on construction (:class:`AccelError`)."""

    inp_dtype: str = "int8"
    wgt_dtype: str = "int8"
    acc_dtype: str = "int32"
    out_dtype: str = "int8"
    batch: int = 1
    block_in: int = 16
    block_out: int = 16
    uop_buffer_bytes: int = 32 * 1024
    inp_buffer_bytes: int = 32 * 1024
    wgt_buffer_bytes: int = 256 * 1024
    acc_buffer_bytes: int = 128 * 1024
    clock_mhz: float = 100.0
    dram_bytes_per_cycle: int = 8
    load_latency: int = 32
    store_latency: int = 32
    gemm_pipeline_depth: int = 4
    alu_pipeline_depth: int = 4
    alu_ii_tensor: int = 2
    alu_ii_imm: int = 1

    def __post_init__(self):
        for name in ("inp_dtype", "wgt_dtype", "acc_dtype", "out_dtype"):
            value = getattr(self, name)
            if value not in _INT_DTYPES:
                raise AccelError(f"AccelConfig.{name}: {value!r} is not one of {_INT_DTYPES}")
        for name in ("batch", "block_in", "block_out", "uop_buffer_bytes", "inp_buffer_bytes",
                     "wgt_buffer_bytes", "acc_buffer_bytes", "dram_bytes_per_cycle",
                     "alu_ii_tensor", "alu_ii_imm"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise AccelError(f"AccelConfig.{name}: expected a positive integer, got {value!r}")
        for name in ("load_latency", "store_latency", "gemm_pipeline_depth", "alu_pipeline_depth"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
                raise AccelError(f"AccelConfig.{name}: expected an integer >= 0, got {value!r}")
        if not self.clock_mhz > 0:
            raise AccelError(f"AccelConfig.clock_mhz: expected a positive clock, "
                             f"got {self.clock_mhz!r}")
        if self.bits(self.acc_dtype) < self.bits(self.out_dtype):
            raise AccelError(f"AccelConfig: acc_dtype {self.acc_dtype} is narrower than "
                             f"out_dtype {self.out_dtype}")
        for buf, elem in (("uop", 4), ("inp", self.inp_elem_bytes), ("wgt", self.wgt_elem_bytes),
                          ("acc", self.acc_elem_bytes)):
            size = getattr(self, f"{buf}_buffer_bytes")
            if size % elem:
                raise AccelError(f"AccelConfig.{buf}_buffer_bytes: {size} is not a multiple of "
                                 f"the {buf} element ({elem} bytes)")
            depth = size // elem
            if depth > 1 << SRAM_ADDR_BITS:
                raise AccelError(f"AccelConfig.{buf}_buffer_bytes: {depth} elements exceed the "
                                 f"{SRAM_ADDR_BITS}-bit SRAM address of LOAD/STORE")
        uop_fields = self.acc_index_bits + self.uop_src_bits + self.wgt_index_bits
        if uop_fields > UOP_BITS:
            raise AccelError(f"AccelConfig: a micro-op needs {uop_fields} bits (dst "
                             f"{self.acc_index_bits}, src {self.uop_src_bits}, wgt "
                             f"{self.wgt_index_bits}), more than the {UOP_BITS}-bit word")
        from .isa import layout_widths  # the ISA's layouts depend on the depths

        for opcode, width in layout_widths(self).items():
            if width > INSN_BITS:
                raise AccelError(f"AccelConfig: the {opcode} instruction needs {width} bits, "
                                 f"more than the {INSN_BITS}-bit instruction word")

    # ----- the multi-batch helper ---------------------------------------------------------------

    @classmethod
    def multi_batch(cls, batch: int, split: str = "block_in", **overrides) -> "AccelConfig":
        """A design computing ``batch`` rows at once with the same MAC count as the base design
        (``batch * block_in * block_out`` kept; the base is ``AccelConfig(**overrides)``).

        ``split`` says which block gives up the factor: ``"block_in"`` (the default: the
        reduction width shrinks, an accumulator element keeps its ``block_out`` lanes per row,
        and with VTA's buffers the micro-op fields still fit 32 bits), ``"block_out"``, or
        ``"square"`` (``block_in == block_out``, the packed layouts' ``c x c`` weight blocks;
        possible when the MAC count over ``batch`` is a square, e.g. batch 4: 8 x 8). Buffer
        sizes stay in bytes; the depths follow."""
        base = cls(**overrides)
        macs = base.batch * base.block_in * base.block_out
        where = f"AccelConfig.multi_batch({batch}, split={split!r})"
        if not isinstance(batch, int) or batch < 1 or macs % batch:
            raise AccelError(f"{where}: {macs} MACs per cycle do not divide by batch={batch}")
        per_row = macs // batch
        if split == "square":
            block = math.isqrt(per_row)
            if block * block != per_row:
                raise AccelError(f"{where}: {per_row} MACs per row is not a square")
            return dataclasses.replace(base, batch=batch, block_in=block, block_out=block)
        keep = {"block_in": "block_out", "block_out": "block_in"}.get(split)
        if keep is None:
            raise AccelError(f"{where}: split must be 'block_in', 'block_out' or 'square'")
        kept = getattr(base, keep)
        if per_row % kept:
            raise AccelError(f"{where}: {per_row} MACs per row do not split into "
                             f"{keep}={kept} x {split}")
        return dataclasses.replace(base, batch=batch, **{split: per_row // kept})

    # ----- derived sizes --------------------------------------------------------------------------

    @staticmethod
    def bits(dtype: str) -> int:
        return np.dtype(dtype).itemsize * 8

    @property
    def inp_bits(self) -> int:
        return self.bits(self.inp_dtype)

    @property
    def wgt_bits(self) -> int:
        return self.bits(self.wgt_dtype)

    @property
    def acc_bits(self) -> int:
        return self.bits(self.acc_dtype)

    @property
    def out_bits(self) -> int:
        return self.bits(self.out_dtype)

    @property
    def inp_shape(self) -> tuple[int, int]:
        """Shape of one input element (a row block of the activations)."""
        return (self.batch, self.block_in)

    @property
    def wgt_shape(self) -> tuple[int, int]:
        """Shape of one weight element: ``(block_out, block_in)``, multiplied transposed."""
        return (self.block_out, self.block_in)

    @property
    def acc_shape(self) -> tuple[int, int]:
        """Shape of one accumulator (and output) element."""
        return (self.batch, self.block_out)

    @property
    def inp_elem_bytes(self) -> int:
        return self.batch * self.block_in * self.inp_bits // 8

    @property
    def wgt_elem_bytes(self) -> int:
        return self.block_out * self.block_in * self.wgt_bits // 8

    @property
    def acc_elem_bytes(self) -> int:
        return self.batch * self.block_out * self.acc_bits // 8

    @property
    def out_elem_bytes(self) -> int:
        return self.batch * self.block_out * self.out_bits // 8

    @property
    def uop_depth(self) -> int:
        return self.uop_buffer_bytes // 4

    @property
    def inp_depth(self) -> int:
        return self.inp_buffer_bytes // self.inp_elem_bytes

    @property
    def wgt_depth(self) -> int:
        return self.wgt_buffer_bytes // self.wgt_elem_bytes

    @property
    def acc_depth(self) -> int:
        return self.acc_buffer_bytes // self.acc_elem_bytes

    @property
    def out_depth(self) -> int:
        """The output buffer shares the accumulator's depth (VTA)."""
        return self.acc_depth

    @property
    def uop_index_bits(self) -> int:
        return _index_bits(self.uop_depth)

    @property
    def inp_index_bits(self) -> int:
        return _index_bits(self.inp_depth)

    @property
    def wgt_index_bits(self) -> int:
        return _index_bits(self.wgt_depth)

    @property
    def acc_index_bits(self) -> int:
        return _index_bits(self.acc_depth)

    @property
    def uop_src_bits(self) -> int:
        """A micro-op's src index names an input element (GEMM) or an accumulator one (ALU)."""
        return max(self.inp_index_bits, self.acc_index_bits)

    @property
    def macs_per_cycle(self) -> int:
        return self.batch * self.block_in * self.block_out

    @property
    def peak_ops_per_second(self) -> float:
        """Two operations (multiply, add) per MAC, every cycle."""
        return 2.0 * self.macs_per_cycle * self.clock_mhz * 1e6

    def describe(self) -> str:
        """A few lines naming the design: the GEMM shape, buffer sizes and depths, the clock."""
        kib = lambda n: f"{n / 1024:g} KiB"  # noqa: E731
        return "\n".join([
            f"GEMM core: ({self.batch}x{self.block_in}) {self.inp_dtype} . "
            f"({self.block_in}x{self.block_out}) {self.wgt_dtype} -> {self.acc_dtype}, "
            f"{self.macs_per_cycle} MACs/cycle",
            f"uop {kib(self.uop_buffer_bytes)} ({self.uop_depth}), "
            f"inp {kib(self.inp_buffer_bytes)} ({self.inp_depth}), "
            f"wgt {kib(self.wgt_buffer_bytes)} ({self.wgt_depth}), "
            f"acc {kib(self.acc_buffer_bytes)} ({self.acc_depth}); out {self.out_dtype} shares acc",
            f"clock {self.clock_mhz:g} MHz, DRAM {self.dram_bytes_per_cycle} B/cycle, peak "
            f"{self.peak_ops_per_second / 1e9:g} GOPS",
        ])


DEFAULT_CONFIG = AccelConfig()
