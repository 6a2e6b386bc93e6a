"""The simulated accelerator's instruction set: VTA's (``include/vta/hw_spec.h``).

Five instructions, each a frozen dataclass with keyword-only fields:

- :class:`MemInsn` (``LOAD`` / ``STORE``): a 2-D strided DMA between DRAM and one on-chip buffer.
  ``y_size`` rows of ``x_size`` elements are read from DRAM at ``dram_base + y * x_stride + x``;
  a LOAD surrounds them with ``y_pad_0`` / ``y_pad_1`` rows and ``x_pad_0`` / ``x_pad_1`` columns
  of padding (``pad_value``: zero, or the element type's minimum or maximum) and writes the padded
  block contiguously from ``sram_base``, row by row (row length ``x_pad_0 + x_size + x_pad_1``).
  A STORE reads ``y_size * x_size`` contiguous OUT elements from ``sram_base`` and writes them with
  the same DRAM pattern (no padding). ``sram_base`` and ``dram_base`` count elements of the
  memory type, as in VTA: DRAM byte address = ``dram_base * element bytes``.
- :class:`GemmInsn`: ``for i < iter_out, j < iter_in, k in [uop_bgn, uop_end)``:
  ``acc[dst] += inp[src] . wgt[wgt]^T`` (or ``acc[dst] = 0`` when ``reset``) where
  ``dst = uop[k].dst_idx + i * dst_factor_out + j * dst_factor_in`` and likewise ``src`` and
  ``wgt``.
- :class:`AluInsn`: the same loops over the accumulator, ``acc[dst] = op(acc[dst], acc[src])``
  (tensor-tensor) or ``op(acc[dst], imm)`` (``use_imm``), op one of :class:`AluOp` MIN, MAX,
  ADD, SHR (arithmetic; a negative amount shifts left), MUL. ``imm`` is a signed 16-bit field.
- :class:`FinishInsn`: the end of the stream.

:class:`Uop` ``(dst_idx, src_idx, wgt_idx)`` is a micro-op; GEMM and ALU run a range of them out
of the micro-op buffer, which LOAD UOP fills from DRAM.

Every instruction carries :class:`DepFlags`: ``pop_prev`` / ``pop_next`` wait for a token from the
previous / next module, ``push_prev`` / ``push_next`` give one when the instruction completes. The
modules form the pipeline load -> compute -> store (:func:`module_of`): LOAD of INP or WGT runs on
the load module; LOAD of UOP, ACC or ACC_8BIT, GEMM, ALU and FINISH on the compute module; STORE
on the store module. The load module has no previous module and the store module no next one.

Field widths are VTA's: the fixed ones (14-bit loop counts, 16-bit sizes and strides, 4-bit pads,
32-bit DRAM address, 16-bit immediate) are checked when an instruction is built; the ones set by
the buffer depths (micro-op range, index factors, SRAM ranges) by :func:`validate` against an
:class:`~.config.AccelConfig`, which :class:`Program` runs on every instruction. Each error names
the instruction and the field.

:func:`encode` packs an instruction into one 128-bit integer, fields from the least significant
bit in the order of :func:`layout` (the opcode and the four flags first, as in VTA);
:func:`decode` inverts it exactly. Micro-ops pack into 32 bits: dst, then src, then wgt.

>>> from relaybench.backends.accel.isa import *
>>> prog = Program([
...     load(MemType.INP, sram_base=0, dram_base=128, y_size=14, x_size=14, x_stride=56,
...          pads=(1, 1, 1, 1), deps="push_next"),
...     gemm(uop_bgn=0, uop_end=9, iter_out=14, iter_in=14, dst_factor_out=14, dst_factor_in=1,
...          src_factor_out=16, src_factor_in=1, deps="pop_prev"),
...     alu(AluOp.SHR, uop_bgn=9, uop_end=10, iter_out=196, dst_factor_out=1, src_factor_out=1,
...         imm=8),
...     finish()])
>>> print(prog)
   0 load     LOAD INP sram=0 dram=128 y=14 x=14 stride=56 pad=(1,1,1,1) [push_next]
   1 compute  GEMM uop=[0,9) iter=(14,14) dst=(14,1) src=(16,1) wgt=(0,0) [pop_prev]
   2 compute  ALU SHR imm=8 uop=[9,10) iter=(196,1) dst=(1,0) src=(1,0)
   3 compute  FINISH
>>> decode(encode(prog.instructions[1])) == prog.instructions[1]
True
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from enum import Enum, IntEnum

import numpy as np

from .config import (ALU_IMM_BITS, ALU_OPCODE_BITS, DRAM_ADDR_BITS, INSN_BITS, LOOP_ITER_BITS,
                     MEMOP_ID_BITS, OPCODE_BITS, PAD_BITS, PAD_VALUE_BITS, SIZE_BITS,
                     SRAM_ADDR_BITS, STRIDE_BITS, UOP_BITS, AccelConfig, AccelError)

__all__ = ["Opcode", "MemType", "AluOp", "PadValue", "Module", "DepFlags", "Uop", "MemInsn",
           "GemmInsn", "AluInsn", "FinishInsn", "Instruction", "Program", "load", "store", "gemm",
           "alu", "finish", "module_of", "validate", "layout", "encode", "decode", "encode_uop",
           "decode_uop", "disassemble", "format_insn"]


class Opcode(IntEnum):
    LOAD = 0
    STORE = 1
    GEMM = 2
    FINISH = 3
    ALU = 4


class MemType(IntEnum):
    """The buffer a LOAD fills or a STORE drains. ACC_8BIT loads output-typed (int8) DRAM
    elements into the accumulator, sign-extended."""
    UOP = 0
    WGT = 1
    INP = 2
    ACC = 3
    OUT = 4
    ACC_8BIT = 5


class AluOp(IntEnum):
    MIN = 0
    MAX = 1
    ADD = 2
    SHR = 3
    MUL = 4


class PadValue(IntEnum):
    """What a padding LOAD writes: zero, or the element type's minimum (for max-pooling) or
    maximum."""
    ZERO = 0
    MIN = 1
    MAX = 2


class Module(str, Enum):
    LOAD = "load"
    COMPUTE = "compute"
    STORE = "store"


_DEP_NAMES = ("pop_prev", "pop_next", "push_prev", "push_next")


@dataclass(frozen=True)
class DepFlags:
    """The four dependence flags. ``DepFlags.parse("pop_prev push_next")`` builds one from text."""
    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False

    @classmethod
    def parse(cls, text: "str | DepFlags | None") -> "DepFlags":
        if text is None:
            return cls()
        if isinstance(text, DepFlags):
            return text
        words = text.replace(",", " ").split()
        unknown = [w for w in words if w not in _DEP_NAMES]
        if unknown:
            raise AccelError(f"dependence flags: unknown flag {unknown[0]!r} "
                             f"(expected some of {', '.join(_DEP_NAMES)})")
        return cls(**{w: True for w in words})

    def __str__(self) -> str:
        names = [n for n in _DEP_NAMES if getattr(self, n)]
        return "[" + " ".join(names) + "]" if names else ""


def _check_uint(kind: str, name: str, value, bits: int):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise AccelError(f"{kind}: {name} must be an integer, got {value!r}")
    if value < 0 or value >= 1 << bits:
        raise AccelError(f"{kind}: {name}={value} does not fit in {bits} bits "
                         f"(0 <= {name} <= {(1 << bits) - 1})")


def _freeze(obj, name, value):
    object.__setattr__(obj, name, value)


@dataclass(frozen=True)
class Uop:
    """A micro-op: accumulator index, source index (an input element for GEMM, an accumulator
    element for ALU) and weight index."""
    dst_idx: int
    src_idx: int
    wgt_idx: int = 0

    def __post_init__(self):
        for name in ("dst_idx", "src_idx", "wgt_idx"):
            _check_uint("Uop", name, getattr(self, name), UOP_BITS)
            _freeze(self, name, int(getattr(self, name)))


@dataclass(frozen=True, kw_only=True)
class MemInsn:
    """LOAD or STORE: see the module docstring for the access pattern."""
    opcode: Opcode
    mem_type: MemType
    sram_base: int
    dram_base: int
    y_size: int
    x_size: int
    x_stride: int
    y_pad_0: int = 0
    y_pad_1: int = 0
    x_pad_0: int = 0
    x_pad_1: int = 0
    pad_value: PadValue = PadValue.ZERO
    deps: DepFlags = field(default_factory=DepFlags)

    def __post_init__(self):
        if self.opcode not in (Opcode.LOAD, Opcode.STORE):
            raise AccelError(f"MemInsn: opcode must be LOAD or STORE, got {self.opcode!r}")
        _freeze(self, "opcode", Opcode(self.opcode))
        kind = self.opcode.name
        try:
            _freeze(self, "mem_type", MemType(self.mem_type))
            _freeze(self, "pad_value", PadValue(self.pad_value))
        except ValueError as err:
            raise AccelError(f"{kind}: {err}") from None
        kind = f"{kind} {self.mem_type.name}"
        for name, bits in (("sram_base", SRAM_ADDR_BITS), ("dram_base", DRAM_ADDR_BITS),
                           ("y_size", SIZE_BITS), ("x_size", SIZE_BITS),
                           ("x_stride", STRIDE_BITS), ("y_pad_0", PAD_BITS),
                           ("y_pad_1", PAD_BITS), ("x_pad_0", PAD_BITS), ("x_pad_1", PAD_BITS)):
            _check_uint(kind, name, getattr(self, name), bits)
            _freeze(self, name, int(getattr(self, name)))
        _freeze(self, "deps", DepFlags.parse(self.deps))

    @property
    def pads(self) -> tuple[int, int, int, int]:
        return (self.y_pad_0, self.y_pad_1, self.x_pad_0, self.x_pad_1)

    @property
    def sram_extent(self) -> int:
        """Elements written (LOAD, padding included) or read (STORE) in the on-chip buffer."""
        return ((self.y_pad_0 + self.y_size + self.y_pad_1)
                * (self.x_pad_0 + self.x_size + self.x_pad_1))


_LOOP_FIELDS = ("dst_factor_out", "dst_factor_in", "src_factor_out", "src_factor_in")


@dataclass(frozen=True, kw_only=True)
class GemmInsn:
    """A GEMM over the micro-ops ``[uop_bgn, uop_end)`` in two affine loops; ``reset`` zeroes
    the destinations instead of accumulating."""
    uop_bgn: int
    uop_end: int
    iter_out: int = 1
    iter_in: int = 1
    dst_factor_out: int = 0
    dst_factor_in: int = 0
    src_factor_out: int = 0
    src_factor_in: int = 0
    wgt_factor_out: int = 0
    wgt_factor_in: int = 0
    reset: bool = False
    deps: DepFlags = field(default_factory=DepFlags)

    opcode = Opcode.GEMM

    def __post_init__(self):
        _check_loops(self, "GEMM", _LOOP_FIELDS + ("wgt_factor_out", "wgt_factor_in"))

    @property
    def steps(self) -> int:
        """Micro-op executions: ``iter_out * iter_in * (uop_end - uop_bgn)``."""
        return self.iter_out * self.iter_in * (self.uop_end - self.uop_bgn)


@dataclass(frozen=True, kw_only=True)
class AluInsn:
    """A tensor-ALU instruction over the accumulator; ``use_imm`` takes ``imm`` (signed 16-bit)
    as the second operand instead of ``acc[src]``."""
    alu_op: AluOp
    uop_bgn: int
    uop_end: int
    iter_out: int = 1
    iter_in: int = 1
    dst_factor_out: int = 0
    dst_factor_in: int = 0
    src_factor_out: int = 0
    src_factor_in: int = 0
    use_imm: bool = False
    imm: int = 0
    reset: bool = False
    deps: DepFlags = field(default_factory=DepFlags)

    opcode = Opcode.ALU

    def __post_init__(self):
        try:
            _freeze(self, "alu_op", AluOp(self.alu_op))
        except ValueError as err:
            raise AccelError(f"ALU: {err}") from None
        kind = f"ALU {self.alu_op.name}"
        _check_loops(self, kind, _LOOP_FIELDS)
        _freeze(self, "use_imm", bool(self.use_imm))
        if isinstance(self.imm, bool) or not isinstance(self.imm, (int, np.integer)):
            raise AccelError(f"{kind}: imm must be an integer, got {self.imm!r}")
        low, high = -(1 << (ALU_IMM_BITS - 1)), (1 << (ALU_IMM_BITS - 1)) - 1
        if not low <= self.imm <= high:
            raise AccelError(f"{kind}: imm={self.imm} does not fit in a signed {ALU_IMM_BITS}-bit "
                             f"immediate ({low} <= imm <= {high})")
        _freeze(self, "imm", int(self.imm))

    @property
    def steps(self) -> int:
        return self.iter_out * self.iter_in * (self.uop_end - self.uop_bgn)


@dataclass(frozen=True, kw_only=True)
class FinishInsn:
    """The end of the stream (runs on the compute module)."""
    deps: DepFlags = field(default_factory=DepFlags)

    opcode = Opcode.FINISH

    def __post_init__(self):
        _freeze(self, "deps", DepFlags.parse(self.deps))


Instruction = MemInsn | GemmInsn | AluInsn | FinishInsn


def _check_loops(insn, kind: str, factor_names):
    for name in ("uop_bgn", "uop_end"):
        _check_uint(kind, name, getattr(insn, name), SRAM_ADDR_BITS)
    if insn.uop_end <= insn.uop_bgn:
        raise AccelError(f"{kind}: empty micro-op range uop_bgn={insn.uop_bgn}, "
                         f"uop_end={insn.uop_end} (need uop_bgn < uop_end)")
    for name in ("iter_out", "iter_in"):
        _check_uint(kind, name, getattr(insn, name), LOOP_ITER_BITS)
    for name in factor_names:
        _check_uint(kind, name, getattr(insn, name), SRAM_ADDR_BITS)
    for name in ("uop_bgn", "uop_end", "iter_out", "iter_in") + tuple(factor_names):
        _freeze(insn, name, int(getattr(insn, name)))
    _freeze(insn, "reset", bool(insn.reset))
    _freeze(insn, "deps", DepFlags.parse(insn.deps))


# ----- convenience constructors (what a code generator calls) ------------------------------------

def load(mem_type, sram_base: int, dram_base: int, y_size: int = 1, x_size: int = 1,
         x_stride: int | None = None, pads=(0, 0, 0, 0), pad_value=PadValue.ZERO,
         deps=None) -> MemInsn:
    """LOAD ``y_size x x_size`` elements (``x_stride`` defaults to ``x_size``); ``pads`` is
    ``(y_pad_0, y_pad_1, x_pad_0, x_pad_1)``; ``deps`` a :class:`DepFlags` or its text."""
    y0, y1, x0, x1 = pads
    return MemInsn(opcode=Opcode.LOAD, mem_type=mem_type, sram_base=sram_base,
                   dram_base=dram_base, y_size=y_size, x_size=x_size,
                   x_stride=x_size if x_stride is None else x_stride, y_pad_0=y0, y_pad_1=y1,
                   x_pad_0=x0, x_pad_1=x1, pad_value=pad_value, deps=DepFlags.parse(deps))


def store(sram_base: int, dram_base: int, y_size: int = 1, x_size: int = 1,
          x_stride: int | None = None, deps=None, mem_type=MemType.OUT) -> MemInsn:
    """STORE ``y_size x x_size`` OUT elements (the accumulator narrowed) to DRAM."""
    return MemInsn(opcode=Opcode.STORE, mem_type=mem_type, sram_base=sram_base,
                   dram_base=dram_base, y_size=y_size, x_size=x_size,
                   x_stride=x_size if x_stride is None else x_stride, deps=DepFlags.parse(deps))


def gemm(uop_bgn: int, uop_end: int, iter_out: int = 1, iter_in: int = 1, *, reset=False,
         deps=None, **factors) -> GemmInsn:
    """GEMM; ``factors`` are ``dst/src/wgt_factor_out/in`` (default 0)."""
    return GemmInsn(uop_bgn=uop_bgn, uop_end=uop_end, iter_out=iter_out, iter_in=iter_in,
                    reset=reset, deps=DepFlags.parse(deps), **factors)


def alu(alu_op, uop_bgn: int, uop_end: int, iter_out: int = 1, iter_in: int = 1, *,
        imm: int | None = None, deps=None, **factors) -> AluInsn:
    """ALU; tensor-immediate when ``imm`` is given, tensor-tensor otherwise."""
    return AluInsn(alu_op=alu_op, uop_bgn=uop_bgn, uop_end=uop_end, iter_out=iter_out,
                   iter_in=iter_in, use_imm=imm is not None, imm=0 if imm is None else imm,
                   deps=DepFlags.parse(deps), **factors)


def finish(deps=None) -> FinishInsn:
    return FinishInsn(deps=DepFlags.parse(deps))


# ----- modules and validation against a configuration ----------------------------------------

_COMPUTE_LOADS = (MemType.UOP, MemType.ACC, MemType.ACC_8BIT)


def module_of(insn: Instruction) -> Module:
    """The module that runs ``insn`` (VTA's split)."""
    if isinstance(insn, MemInsn):
        if insn.opcode == Opcode.STORE:
            return Module.STORE
        return Module.COMPUTE if insn.mem_type in _COMPUTE_LOADS else Module.LOAD
    return Module.COMPUTE


def sram_depth(config: AccelConfig, mem_type: MemType) -> int:
    return {MemType.UOP: config.uop_depth, MemType.WGT: config.wgt_depth,
            MemType.INP: config.inp_depth, MemType.ACC: config.acc_depth,
            MemType.OUT: config.out_depth, MemType.ACC_8BIT: config.acc_depth}[mem_type]


def validate(insn: Instruction, config: AccelConfig, index: int | None = None):
    """Check the fields that depend on the configuration (micro-op range, factor widths, SRAM
    ranges, which memory types a LOAD/STORE may name, which flags a module may use); raise
    :class:`AccelError` naming the instruction and the field."""
    where = f"instruction {index} ({format_insn(insn)})" if index is not None else format_insn(insn)

    def fail(msg):
        raise AccelError(f"{where}: {msg}")

    module = module_of(insn)
    deps = insn.deps
    if module is Module.LOAD and (deps.pop_prev or deps.push_prev):
        fail("the load module has no previous module (pop_prev/push_prev not allowed)")
    if module is Module.STORE and (deps.pop_next or deps.push_next):
        fail("the store module has no next module (pop_next/push_next not allowed)")
    if isinstance(insn, MemInsn):
        if insn.opcode == Opcode.STORE:
            if insn.mem_type != MemType.OUT:
                fail(f"mem_type: STORE writes the OUT buffer only, not {insn.mem_type.name}")
            if any(insn.pads):
                fail("a STORE cannot pad (y_pad/x_pad must be 0)")
        else:
            if insn.mem_type == MemType.OUT:
                fail("mem_type: OUT cannot be loaded (load ACC or ACC_8BIT)")
            if insn.mem_type == MemType.UOP and any(insn.pads):
                fail("a LOAD UOP cannot pad")
        if insn.x_size == 0 or insn.y_size == 0:
            fail("empty transfer (y_size and x_size must be >= 1)")
        depth = sram_depth(config, insn.mem_type)
        if insn.sram_base + insn.sram_extent > depth:
            fail(f"sram_base: elements [{insn.sram_base}, {insn.sram_base + insn.sram_extent}) "
                 f"go past the {insn.mem_type.name} buffer of {depth} elements")
        return
    if isinstance(insn, (GemmInsn, AluInsn)):
        if insn.uop_end > config.uop_depth:
            fail(f"uop_end={insn.uop_end} is past the micro-op buffer of {config.uop_depth}")
        src_bits = config.inp_index_bits if isinstance(insn, GemmInsn) else config.acc_index_bits
        widths = {"dst_factor_out": config.acc_index_bits, "dst_factor_in": config.acc_index_bits,
                  "src_factor_out": src_bits, "src_factor_in": src_bits,
                  "wgt_factor_out": config.wgt_index_bits, "wgt_factor_in": config.wgt_index_bits}
        for name, bits in widths.items():
            if hasattr(insn, name) and getattr(insn, name) >= 1 << bits:
                fail(f"{name}={getattr(insn, name)} does not fit in {bits} bits")


def validate_uop(uop: Uop, config: AccelConfig, index: int | None = None):
    where = f"micro-op {index}" if index is not None else "micro-op"
    for name, bits in (("dst_idx", config.acc_index_bits), ("src_idx", config.uop_src_bits),
                       ("wgt_idx", config.wgt_index_bits)):
        if getattr(uop, name) >= 1 << bits:
            raise AccelError(f"{where} {uop}: {name}={getattr(uop, name)} does not fit in "
                             f"{bits} bits")


# ----- binary encoding ---------------------------------------------------------------------------

_HEADER = (("opcode", OPCODE_BITS), ("pop_prev", 1), ("pop_next", 1), ("push_prev", 1),
           ("push_next", 1))


def layout(opcode: Opcode, config: AccelConfig) -> tuple[tuple[str, int], ...]:
    """The ``(field, bits)`` of an instruction word, from the least significant bit."""
    opcode = Opcode(opcode)
    if opcode in (Opcode.LOAD, Opcode.STORE):
        body = (("mem_type", MEMOP_ID_BITS), ("sram_base", SRAM_ADDR_BITS),
                ("dram_base", DRAM_ADDR_BITS), ("y_size", SIZE_BITS), ("x_size", SIZE_BITS),
                ("x_stride", STRIDE_BITS), ("y_pad_0", PAD_BITS), ("y_pad_1", PAD_BITS),
                ("x_pad_0", PAD_BITS), ("x_pad_1", PAD_BITS), ("pad_value", PAD_VALUE_BITS))
    elif opcode == Opcode.FINISH:
        body = ()
    else:
        ub, ab = config.uop_index_bits, config.acc_index_bits
        loops = (("reset", 1), ("uop_bgn", ub), ("uop_end", ub + 1),
                 ("iter_out", LOOP_ITER_BITS), ("iter_in", LOOP_ITER_BITS),
                 ("dst_factor_out", ab), ("dst_factor_in", ab))
        if opcode == Opcode.GEMM:
            ib, wb = config.inp_index_bits, config.wgt_index_bits
            body = loops + (("src_factor_out", ib), ("src_factor_in", ib),
                            ("wgt_factor_out", wb), ("wgt_factor_in", wb))
        else:
            body = loops + (("src_factor_out", ab), ("src_factor_in", ab),
                            ("alu_op", ALU_OPCODE_BITS), ("use_imm", 1), ("imm", ALU_IMM_BITS))
    return _HEADER + body


def layout_widths(config: AccelConfig) -> dict[str, int]:
    """Bits used by each instruction format (must be <= 128; :class:`AccelConfig` checks)."""
    return {op.name: sum(bits for _, bits in layout(op, config)) for op in Opcode}


def _default_config(config):
    if config is not None:
        return config
    from .config import DEFAULT_CONFIG
    return DEFAULT_CONFIG


def encode(insn: Instruction, config: AccelConfig | None = None) -> int:
    """Pack ``insn`` into a 128-bit integer (see :func:`layout`)."""
    config = _default_config(config)
    validate(insn, config)
    word, shift = 0, 0
    for name, bits in layout(insn.opcode, config):
        if name == "opcode":
            value = int(insn.opcode)
        elif name in _DEP_NAMES:
            value = int(getattr(insn.deps, name))
        else:
            value = int(getattr(insn, name))
            if name == "imm":
                value &= (1 << bits) - 1
        if not 0 <= value < 1 << bits:
            raise AccelError(f"{format_insn(insn)}: {name}={value} does not fit in {bits} bits")
        word |= value << shift
        shift += bits
    return word


_CLASSES = {Opcode.LOAD: MemInsn, Opcode.STORE: MemInsn, Opcode.GEMM: GemmInsn,
            Opcode.ALU: AluInsn, Opcode.FINISH: FinishInsn}


def decode(word: int, config: AccelConfig | None = None) -> Instruction:
    """Unpack a 128-bit word produced by :func:`encode`."""
    config = _default_config(config)
    if not 0 <= word < 1 << INSN_BITS:
        raise AccelError(f"decode: {word:#x} is not a {INSN_BITS}-bit instruction word")
    try:
        opcode = Opcode(word & ((1 << OPCODE_BITS) - 1))
    except ValueError:
        raise AccelError(f"decode: {word:#x} has unknown opcode {word & 7}") from None
    values, shift = {}, 0
    for name, bits in layout(opcode, config):
        values[name] = (word >> shift) & ((1 << bits) - 1)
        shift += bits
    if word >> shift:
        raise AccelError(f"decode: {word:#x} sets bits past the {opcode.name} fields")
    values.pop("opcode")
    deps = DepFlags(**{n: bool(values.pop(n)) for n in _DEP_NAMES})
    if "imm" in values and values["imm"] >= 1 << (ALU_IMM_BITS - 1):
        values["imm"] -= 1 << ALU_IMM_BITS
    if opcode in (Opcode.LOAD, Opcode.STORE):
        values["opcode"] = opcode
    if "reset" in values:
        values["reset"] = bool(values["reset"])
    return _CLASSES[opcode](deps=deps, **values)


def encode_uop(uop: Uop, config: AccelConfig | None = None) -> int:
    """Pack a micro-op into 32 bits: dst_idx, then src_idx, then wgt_idx."""
    config = _default_config(config)
    validate_uop(uop, config)
    ab, sb = config.acc_index_bits, config.uop_src_bits
    return uop.dst_idx | uop.src_idx << ab | uop.wgt_idx << (ab + sb)


def decode_uop(word: int, config: AccelConfig | None = None) -> Uop:
    config = _default_config(config)
    ab, sb, wb = config.acc_index_bits, config.uop_src_bits, config.wgt_index_bits
    return Uop(word & ((1 << ab) - 1), (word >> ab) & ((1 << sb) - 1),
               (word >> (ab + sb)) & ((1 << wb) - 1))


def decode_uop_words(words: np.ndarray, config: AccelConfig):
    """Vectorized :func:`decode_uop`: three int64 arrays (dst, src, wgt)."""
    words = np.asarray(words, dtype=np.int64)
    ab, sb, wb = config.acc_index_bits, config.uop_src_bits, config.wgt_index_bits
    return (words & ((1 << ab) - 1), (words >> ab) & ((1 << sb) - 1),
            (words >> (ab + sb)) & ((1 << wb) - 1))


# ----- text ---------------------------------------------------------------------------------------

def format_insn(insn: Instruction) -> str:
    """One instruction as text, e.g. ``LOAD INP sram=0 dram=128 y=14 x=14 stride=56
    pad=(1,1,1,1) [pop_next push_next]``."""
    if isinstance(insn, MemInsn):
        text = (f"{insn.opcode.name} {insn.mem_type.name} sram={insn.sram_base} "
                f"dram={insn.dram_base} y={insn.y_size} x={insn.x_size} stride={insn.x_stride}")
        if any(insn.pads):
            text += " pad=({},{},{},{})".format(*insn.pads)
            if insn.pad_value != PadValue.ZERO:
                text += f" pad_value={insn.pad_value.name.lower()}"
    elif isinstance(insn, (GemmInsn, AluInsn)):
        if isinstance(insn, GemmInsn):
            text = "GEMM reset" if insn.reset else "GEMM"
        else:
            text = f"ALU {insn.alu_op.name}" + (" reset" if insn.reset else "")
            text += f" imm={insn.imm}" if insn.use_imm else " tensor"
        text += (f" uop=[{insn.uop_bgn},{insn.uop_end}) iter=({insn.iter_out},{insn.iter_in})"
                 f" dst=({insn.dst_factor_out},{insn.dst_factor_in})"
                 f" src=({insn.src_factor_out},{insn.src_factor_in})")
        if isinstance(insn, GemmInsn):
            text += f" wgt=({insn.wgt_factor_out},{insn.wgt_factor_in})"
    else:
        text = "FINISH"
    flags = str(insn.deps)
    return f"{text} {flags}" if flags else text


def disassemble(program, config: AccelConfig | None = None) -> str:
    """One line per instruction: its index, its module, the instruction and its flags; then
    the micro-op table when the program carries one."""
    insns = program.instructions if isinstance(program, Program) else list(program)
    lines = [f"{i:4d} {module_of(insn).value:<8s} {format_insn(insn)}"
             for i, insn in enumerate(insns)]
    uops = program.uops if isinstance(program, Program) else ()
    if uops:
        lines.append(f"micro-ops ({len(uops)}):")
        lines += [f"{k:4d} dst={u.dst_idx} src={u.src_idx} wgt={u.wgt_idx}"
                  for k, u in enumerate(uops)]
    return "\n".join(lines)


# ----- programs -------------------------------------------------------------------------------

class Program:
    """An instruction stream and its micro-op table, validated against a configuration.

    ``uops`` (optional) is the program's micro-op table. When it is given, the ``dram_base`` of
    every LOAD UOP counts from the table's start: the simulator places the table in DRAM and
    relocates those loads (:meth:`relocated`). Without a table, LOAD UOP addresses are absolute
    DRAM addresses of a UOP region the caller wrote (:meth:`Dram.alloc_uops`)."""

    def __init__(self, instructions, uops=(), config: AccelConfig | None = None):
        self.config = _default_config(config)
        self.instructions = tuple(instructions)
        self.uops = tuple(uops)
        for i, insn in enumerate(self.instructions):
            if not isinstance(insn, (MemInsn, GemmInsn, AluInsn, FinishInsn)):
                raise AccelError(f"instruction {i}: {insn!r} is not an accelerator instruction")
            validate(insn, self.config, i)
        for k, uop in enumerate(self.uops):
            if not isinstance(uop, Uop):
                raise AccelError(f"micro-op {k}: {uop!r} is not a Uop")
            validate_uop(uop, self.config, k)
        for i, insn in enumerate(self.instructions):
            if (self.uops and isinstance(insn, MemInsn) and insn.mem_type == MemType.UOP
                    and insn.dram_base + insn.y_size * insn.x_stride - insn.x_stride
                    + insn.x_size > len(self.uops)):
                raise AccelError(f"instruction {i} ({format_insn(insn)}): dram_base: reads past "
                                 f"the program's {len(self.uops)} micro-ops")

    def __len__(self):
        return len(self.instructions)

    def __iter__(self):
        return iter(self.instructions)

    def __str__(self):
        return disassemble(self)

    def __repr__(self):
        return f"<Program: {len(self.instructions)} instructions, {len(self.uops)} micro-ops>"

    def _repr_html_(self):
        return f"<pre>{html.escape(str(self))}</pre>"

    def counts(self) -> dict[str, int]:
        """Instructions per module."""
        out = {m.value: 0 for m in Module}
        for insn in self.instructions:
            out[module_of(insn).value] += 1
        return out

    def encode(self) -> list[int]:
        """The instruction words (128-bit integers)."""
        return [encode(insn, self.config) for insn in self.instructions]

    def to_bytes(self) -> bytes:
        """The instruction stream as VTA's DMA sees it: 16 little-endian bytes per instruction."""
        return b"".join(w.to_bytes(INSN_BITS // 8, "little") for w in self.encode())

    def uop_words(self) -> np.ndarray:
        return np.array([encode_uop(u, self.config) for u in self.uops], dtype=np.uint32)

    @classmethod
    def from_bytes(cls, data: bytes, uops=(), config: AccelConfig | None = None) -> "Program":
        size = INSN_BITS // 8
        if len(data) % size:
            raise AccelError(f"Program.from_bytes: {len(data)} bytes is not a whole number of "
                             f"{size}-byte instructions")
        words = [int.from_bytes(data[i:i + size], "little") for i in range(0, len(data), size)]
        return cls([decode(w, config) for w in words], uops, config)

    def relocated(self, uop_base: int) -> "Program":
        """The program with its LOAD UOP addresses moved by ``uop_base`` (the DRAM element
        where its micro-op table was placed) and no table of its own."""
        import dataclasses

        moved = [dataclasses.replace(insn, dram_base=insn.dram_base + uop_base)
                 if isinstance(insn, MemInsn) and insn.mem_type == MemType.UOP else insn
                 for insn in self.instructions]
        return Program(moved, (), self.config)
