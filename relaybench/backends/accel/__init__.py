"""The simulated accelerator target: a VTA-like design (the Relay paper ran ResNet on VTA).

Three parts, one file each:

- :mod:`.config`: :class:`AccelConfig`, the hardware (GEMM shape, buffer sizes, clock, DRAM
  bandwidth, latencies), VTA's defaults, every field changeable.
- :mod:`.isa`: the instructions (LOAD/STORE :class:`MemInsn`, :class:`GemmInsn`,
  :class:`AluInsn`, :class:`FinishInsn`), micro-ops (:class:`Uop`), dependence flags
  (:class:`DepFlags`), builders (:func:`load`, :func:`store`, :func:`gemm`, :func:`alu`,
  :func:`finish`), the 128-bit encoding (:func:`encode` / :func:`decode`), the disassembler
  and :class:`Program`.
- :mod:`.simulator`: :class:`Dram` (named regions a compiler places tensors in) and
  :class:`Simulator`, which runs a program bit-exactly on numpy SRAM arrays and times it with
  the load, compute and store modules running concurrently (:class:`RunStats`).

How a code generator uses it: allocate DRAM regions for inputs, weights (tiles of
``(block_out, block_in)``), biases (ACC elements) and outputs (OUT elements) with
:meth:`Dram.alloc_array` / :meth:`Dram.alloc`; emit micro-ops into a list and instructions that
address DRAM as ``region.base + offset`` (in elements); wrap them in ``Program(insns, uops,
config)`` (LOAD UOP addresses then count from the start of ``uops``); ``Simulator(config).run(
program, dram)``; read the results with :meth:`Dram.read`. Only numpy is needed.
"""

from .config import DEFAULT_CONFIG, AccelConfig, AccelError
from .isa import (AluInsn, AluOp, DepFlags, FinishInsn, GemmInsn, MemInsn, MemType, Module,
                  Opcode, PadValue, Program, Uop, alu, decode, decode_uop, disassemble, encode,
                  encode_uop, finish, format_insn, gemm, layout, load, module_of, store, validate)
from .simulator import (DeadlockError, Dram, RaceError, Region, RunStats, Simulator, TraceEntry,
                        instruction_cycles, schedule)

__all__ = ["AccelConfig", "AccelError", "DEFAULT_CONFIG", "AluInsn", "AluOp", "DepFlags",
           "FinishInsn", "GemmInsn", "MemInsn", "MemType", "Module", "Opcode", "PadValue",
           "Program", "Uop", "alu", "decode", "decode_uop", "disassemble", "encode", "encode_uop",
           "finish", "format_insn", "gemm", "layout", "load", "module_of", "store", "validate",
           "DeadlockError", "RaceError", "Dram", "Region", "RunStats", "Simulator", "TraceEntry",
           "instruction_cycles", "schedule"]
