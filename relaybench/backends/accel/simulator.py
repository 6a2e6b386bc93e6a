"""The simulated accelerator: DRAM regions (:class:`Dram`) and a functional, timed simulator
(:class:`Simulator`) in the spirit of VTA's ``src/sim/sim_driver.cc``.

**DRAM.** :class:`Dram` is a byte-addressed memory holding named regions, one numpy array each,
shaped ``(count, *element shape)`` in the element type of a memory type (:class:`~.isa.MemType`):
a compiler allocates a region for every tensor, weight, bias and micro-op table, copies data in
(:meth:`Dram.alloc_array`, :meth:`Dram.write`) and reads results back (:meth:`Dram.read`). A
region's ``base`` is its address in elements of its memory type, which is what a LOAD's or
STORE's ``dram_base`` means (VTA's convention), so ``dram_base = region.base + offset``. Every
transfer must stay inside one region whose elements have the instruction's element type; a
transfer that leaves it is an :class:`~.config.AccelError` naming the instruction.

**Function.** :meth:`Simulator.run` executes the program on four SRAM arrays (numpy, the
configuration's integer types, bit-exact):

- LOAD copies a 2-D strided block with padding into a buffer; ACC_8BIT sign-extends.
- GEMM: ``acc[dst] += inp[src] . wgt[wgt]^T``, accumulated as the accumulator type wraps (two's
  complement; the sum is taken modulo ``2**acc_bits``, which is what sequential wrapping adds
  give). Each instruction's micro-op indices are gathered into numpy index arrays; the products
  run as one batched matrix product per chunk of steps, in floating point only where that is
  exact (``block_in * 2**(inp_bits-1) * 2**(wgt_bits-1) < 2**24`` for float32, ``2**53`` for
  float64, else int64), and are scattered into the accumulator with ``bincount``; there is no
  Python loop per step or per MAC.
- ALU on the accumulator, results wrapped to the accumulator type: MIN, MAX, ADD, MUL, and SHR
  (arithmetic right shift by a non-negative amount, an amount >= acc_bits giving 0 or -1; a
  negative amount shifts left by its magnitude, keeping the low acc_bits). The semantics are
  sequential, step by step, as in VTA: steps are vectorized whenever that is equivalent
  (distinct destinations and no step reading a destination written by an earlier step of the
  same instruction; repeated destinations of MIN/MAX/ADD/MUL use an order-independent
  ``ufunc.at``), and the rare remainder runs in the longest such segments.
- STORE writes OUT elements: the accumulator entries narrowed to the output type by keeping their
  low ``out_bits`` (a two's-complement truncation, no saturation; programs clip with ALU MIN/MAX
  first, as VTA's do). VTA writes the narrowed value into a separate output buffer when GEMM or
  ALU updates the accumulator; narrowing at STORE time gives the same bytes for every stream that
  stores what GEMM/ALU last computed, and also defines a STORE right after a LOAD ACC.

**Timing.** Three modules (load, compute, store) each run their instructions in program order
(:func:`~.isa.module_of`), in parallel with each other, synchronized by four dependence-token
queues: load->compute and compute->load, compute->store and store->compute. An instruction
whose ``pop_*`` flag is set starts no earlier than the cycle its token was pushed (tokens are
consumed first in, first out); its ``push_*`` flags push a token when it ends. Queues are
unbounded, the fetch module is not modelled (it is assumed to keep every command queue fed), and
each module's transfers get the full DRAM bandwidth (no contention between modules).
The cost of an instruction, in cycles:

- LOAD / STORE: ``latency + ceil(elements * element_bytes / dram_bytes_per_cycle)``, the
  latency being ``load_latency`` or ``store_latency``; padding elements count as transferred
  (they occupy the SRAM write port like the rest).
- GEMM: ``gemm_pipeline_depth + iter_out * iter_in * (uop_end - uop_bgn)`` (one micro-op per
  cycle, pipelined; a reset GEMM costs the same).
- ALU: ``alu_pipeline_depth + steps * ii`` with ``ii = alu_ii_tensor`` (2: two accumulator
  reads) or ``alu_ii_imm`` (1).
- FINISH: 1.

The schedule is computed first, event by event; a ``pop`` that no instruction will ever satisfy
is a deadlock, reported (:class:`DeadlockError`) naming each blocked instruction and its queue
before anything runs. Instructions then execute in the order of their start cycles, which
respects every token and every module's order. A program means what its instructions do in
program order; the tokens must make the hardware keep that order wherever two modules touch the
same SRAM elements (load and compute on INP and WGT, compute and store on the accumulator). The
simulator checks it: a conflicting pair that the schedule overlaps or runs in the other order is
a :class:`RaceError` naming both instructions and an element they share (``check_races=False``
turns the check off). :class:`RunStats` gathers the total cycles,
busy cycles per module, bytes moved per buffer, GEMM MACs, ALU operations, the GEMM core's
utilization and the per-instruction trace (:meth:`RunStats.timeline`, :meth:`RunStats.plot`).

>>> import numpy as np
>>> from relaybench.backends.accel import *
>>> cfg = AccelConfig()
>>> dram = Dram(cfg)
>>> x = dram.alloc_array("x", MemType.INP, np.arange(16, dtype=np.int8).reshape(1, 1, 16))
>>> w = dram.alloc_array("w", MemType.WGT, np.ones((1, 16, 16), dtype=np.int8))
>>> y = dram.alloc("y", MemType.OUT, 1)
>>> prog = Program([
...     load(MemType.INP, 0, x.base),
...     load(MemType.WGT, 0, w.base, deps="push_next"),
...     load(MemType.UOP, 0, 0),
...     gemm(0, 1, reset=True),
...     gemm(0, 1, deps="pop_prev push_next"),
...     store(0, y.base, deps="pop_prev"),
...     finish()], uops=[Uop(0, 0, 0)], config=cfg)
>>> stats = Simulator(cfg).run(prog, dram)
>>> dram.read("y").ravel()[:4], stats.cycles
(array([120, 120, 120, 120], dtype=int8), 137)
"""

from __future__ import annotations

import bisect
import html
import math
from dataclasses import dataclass, field

import numpy as np

from .config import DEFAULT_CONFIG, AccelConfig, AccelError
from .isa import (AluInsn, AluOp, FinishInsn, GemmInsn, MemInsn, MemType, Module, Opcode,
                  PadValue, Program, decode_uop_words, encode_uop, format_insn, module_of,
                  validate_uop)

__all__ = ["Dram", "Region", "Simulator", "RunStats", "TraceEntry", "DeadlockError", "RaceError",
           "instruction_cycles", "schedule"]


class DeadlockError(AccelError):
    """An instruction waits for a dependence token that no instruction will ever push."""


class RaceError(AccelError):
    """Two instructions on different modules touch the same SRAM elements, one of them writing,
    and no chain of dependence tokens and module order makes them run in program order."""


# ----- DRAM --------------------------------------------------------------------------------------

def element_type(config: AccelConfig, mem_type: MemType) -> tuple[tuple[int, ...], np.dtype]:
    """The DRAM element of a memory type: its shape and dtype."""
    mem_type = MemType(mem_type)
    if mem_type == MemType.UOP:
        return (), np.dtype(np.uint32)
    if mem_type == MemType.WGT:
        return config.wgt_shape, np.dtype(config.wgt_dtype)
    if mem_type == MemType.INP:
        return config.inp_shape, np.dtype(config.inp_dtype)
    if mem_type == MemType.ACC:
        return config.acc_shape, np.dtype(config.acc_dtype)
    return config.acc_shape, np.dtype(config.out_dtype)          # OUT, ACC_8BIT


def element_bytes(config: AccelConfig, mem_type: MemType) -> int:
    shape, dtype = element_type(config, mem_type)
    return int(np.prod(shape, dtype=np.int64)) * dtype.itemsize


@dataclass
class Region:
    """A named DRAM region: ``array`` has shape ``(count, *element shape)``; ``base`` is its
    address in elements of ``mem_type`` (the ``dram_base`` of its first element)."""
    name: str
    mem_type: MemType
    base: int
    count: int
    byte_offset: int
    array: np.ndarray = field(repr=False)

    @property
    def nbytes(self) -> int:
        return self.array.nbytes


class Dram:
    """The accelerator's DRAM: named regions, each a numpy array, at aligned byte addresses.

    >>> import numpy as np
    >>> from relaybench.backends.accel import Dram, MemType
    >>> dram = Dram()
    >>> a = dram.alloc("a", MemType.INP, 4)
    >>> b = dram.alloc("b", MemType.ACC, 2)
    >>> (a.base, a.array.shape), (b.base, b.array.shape, str(b.array.dtype))
    ((0, (4, 1, 16)), (4, (2, 1, 16), 'int32'))
    """

    def __init__(self, config: AccelConfig | None = None):
        self.config = config or DEFAULT_CONFIG
        sizes = [element_bytes(self.config, m) for m in MemType]
        self.alignment = math.lcm(*sizes)
        self._regions: dict[str, Region] = {}
        self._offsets: list[int] = []          # sorted byte offsets
        self._by_offset: list[Region] = []
        self._top = 0

    def alloc(self, name: str, mem_type, count: int) -> Region:
        """A zeroed region of ``count`` elements of ``mem_type``."""
        mem_type = MemType(mem_type)
        if name in self._regions:
            raise AccelError(f"Dram.alloc: a region named {name!r} exists already")
        if not isinstance(count, (int, np.integer)) or count < 1:
            raise AccelError(f"Dram.alloc({name!r}): count must be a positive integer, "
                             f"got {count!r}")
        shape, dtype = element_type(self.config, mem_type)
        elem = element_bytes(self.config, mem_type)
        offset = -(-self._top // self.alignment) * self.alignment
        base = offset // elem
        if base + count > 1 << 32:
            raise AccelError(f"Dram.alloc({name!r}): past the 32-bit DRAM address space of "
                             f"{mem_type.name} elements")
        region = Region(name, mem_type, base, int(count), offset,
                        np.zeros((int(count),) + tuple(shape), dtype=dtype))
        self._regions[name] = region
        self._offsets.append(offset)
        self._by_offset.append(region)
        self._top = offset + int(count) * elem
        return region

    def alloc_array(self, name: str, mem_type, data) -> Region:
        """A region holding ``data``: shaped ``(count, *element shape)`` or anything of that
        many values, cast to the element type (values must fit it)."""
        shape, dtype = element_type(self.config, MemType(mem_type))
        data = np.asarray(data)
        per = int(np.prod(shape, dtype=np.int64)) or 1
        if data.size % per or data.size == 0:
            raise AccelError(f"Dram.alloc_array({name!r}): {data.size} values do not make whole "
                             f"{MemType(mem_type).name} elements of shape {shape}")
        region = self.alloc(name, mem_type, data.size // per)
        self.write(name, data)
        return region

    def alloc_uops(self, name: str, uops) -> Region:
        """A UOP region holding the encoded micro-ops ``uops``."""
        for k, uop in enumerate(uops):
            validate_uop(uop, self.config, k)
        words = np.array([encode_uop(u, self.config) for u in uops], dtype=np.uint32)
        return self.alloc_array(name, MemType.UOP, words)

    def place_uops(self, uops, name: str = "program.uops") -> Region:
        """Write a program's micro-op table into the region ``name``, reusing it when it has the
        same length (each run of a program writes its table again)."""
        region = self._regions.get(name)
        if region is not None and region.count == len(uops) and region.mem_type == MemType.UOP:
            region.array[:] = [encode_uop(u, self.config) for u in uops]
            return region
        if region is not None:
            name = f"{name}.{len(self._regions)}"
        return self.alloc_uops(name, uops)

    def __getitem__(self, name: str) -> Region:
        try:
            return self._regions[name]
        except KeyError:
            raise AccelError(f"Dram: no region named {name!r} "
                             f"(regions: {', '.join(self._regions) or 'none'})") from None

    def __contains__(self, name: str) -> bool:
        return name in self._regions

    @property
    def regions(self) -> list[Region]:
        return list(self._regions.values())

    def write(self, name: str, data):
        region = self[name]
        data = np.asarray(data)
        if data.size != region.array.size:
            raise AccelError(f"Dram.write({name!r}): {data.size} values for a region of "
                             f"{region.array.size} ({region.count} x {region.array.shape[1:]})")
        info = np.iinfo(region.array.dtype)
        if data.size and (data.min() < info.min or data.max() > info.max):
            raise AccelError(f"Dram.write({name!r}): values in [{data.min()}, {data.max()}] do "
                             f"not fit {region.array.dtype}")
        region.array[...] = data.reshape(region.array.shape)

    def read(self, name: str) -> np.ndarray:
        return self[name].array.copy()

    def locate(self, mem_type: MemType, dram_base: int, where: str) -> tuple[Region, int]:
        """The region holding element ``dram_base`` of ``mem_type`` and the element's index in
        it; ``where`` names the instruction in the error."""
        elem = element_bytes(self.config, mem_type)
        byte = dram_base * elem
        k = bisect.bisect_right(self._offsets, byte) - 1
        region = self._by_offset[k] if k >= 0 else None
        if region is None or byte >= region.byte_offset + region.nbytes:
            raise AccelError(f"{where}: dram_base={dram_base} ({mem_type.name} elements, byte "
                             f"{byte}) is in no DRAM region")
        if element_type(self.config, region.mem_type) != element_type(self.config, mem_type):
            raise AccelError(f"{where}: dram_base={dram_base} lies in region {region.name!r} of "
                             f"{region.mem_type.name} elements, not {mem_type.name}")
        return region, (byte - region.byte_offset) // elem

    def __repr__(self):
        return (f"<Dram: {len(self._regions)} regions, {self._top} bytes: "
                + ", ".join(f"{r.name}:{r.mem_type.name}[{r.count}]@{r.base}"
                            for r in self._regions.values()) + ">")


# ----- timing ------------------------------------------------------------------------------------

_MODULES = (Module.LOAD, Module.COMPUTE, Module.STORE)
_MODULE_RANK = {m: k for k, m in enumerate(_MODULES)}
# (module, flag) -> the token queue it pops from / pushes to
_POPS = {(Module.LOAD, "pop_next"): "compute->load", (Module.COMPUTE, "pop_prev"): "load->compute",
         (Module.COMPUTE, "pop_next"): "store->compute",
         (Module.STORE, "pop_prev"): "compute->store"}
_PUSHES = {(Module.LOAD, "push_next"): "load->compute",
           (Module.COMPUTE, "push_prev"): "compute->load",
           (Module.COMPUTE, "push_next"): "compute->store",
           (Module.STORE, "push_prev"): "store->compute"}
QUEUES = ("load->compute", "compute->load", "compute->store", "store->compute")


def instruction_cycles(insn, config: AccelConfig) -> int:
    """The cost model of the module docstring, in cycles."""
    if isinstance(insn, MemInsn):
        latency = config.store_latency if insn.opcode == Opcode.STORE else config.load_latency
        nbytes = insn.sram_extent * element_bytes(config, insn.mem_type)
        return latency + -(-nbytes // config.dram_bytes_per_cycle)
    if isinstance(insn, GemmInsn):
        return config.gemm_pipeline_depth + insn.steps
    if isinstance(insn, AluInsn):
        ii = config.alu_ii_imm if insn.use_imm else config.alu_ii_tensor
        return config.alu_pipeline_depth + insn.steps * ii
    return 1


def schedule(program: Program) -> tuple[list[int], list[int], dict[str, int]]:
    """Start and end cycle of every instruction, and the tokens left in each queue at the end.
    Raises :class:`DeadlockError` when some instruction can never start."""
    config = program.config
    insns = program.instructions
    queues = {m: [] for m in _MODULES}
    for i, insn in enumerate(insns):
        queues[module_of(insn)].append(i)
    pops, pushes = [], []
    for insn in insns:
        m = module_of(insn)
        pops.append([q for (mm, flag), q in _POPS.items() if mm is m and getattr(insn.deps, flag)])
        pushes.append([q for (mm, flag), q in _PUSHES.items()
                       if mm is m and getattr(insn.deps, flag)])
    tokens = {q: [] for q in QUEUES}
    consumed = {q: 0 for q in QUEUES}
    pos = {m: 0 for m in _MODULES}
    free = {m: 0 for m in _MODULES}
    start = [0] * len(insns)
    end = [0] * len(insns)
    remaining = len(insns)
    while remaining:
        moved = False
        for m in _MODULES:
            queue = queues[m]
            while pos[m] < len(queue):
                i = queue[pos[m]]
                if any(consumed[q] >= len(tokens[q]) for q in pops[i]):
                    break
                t = free[m]
                for q in pops[i]:
                    t = max(t, tokens[q][consumed[q]])
                    consumed[q] += 1
                start[i] = t
                end[i] = free[m] = t + instruction_cycles(insns[i], config)
                for q in pushes[i]:
                    tokens[q].append(end[i])
                pos[m] += 1
                remaining -= 1
                moved = True
        if not moved:
            blocked = []
            for m in _MODULES:
                if pos[m] < len(queues[m]):
                    i = queues[m][pos[m]]
                    waits = [q for q in pops[i] if consumed[q] >= len(tokens[q])]
                    blocked.append(f"instruction {i} ({format_insn(insns[i])}) on the {m.value} "
                                   f"module waits for a token on {' and '.join(waits)}, "
                                   f"which no remaining instruction pushes")
            raise DeadlockError("deadlock: " + "; ".join(blocked))
    left = {q: len(tokens[q]) - consumed[q] for q in QUEUES}
    return start, end, left


# ----- results -----------------------------------------------------------------------------------

class _Where:
    """Where an error happened: the instruction, formatted only when an error says it."""

    __slots__ = ("index", "insn")

    def __init__(self, index: int, insn):
        self.index, self.insn = index, insn

    def __str__(self) -> str:
        return f"instruction {self.index} ({format_insn(self.insn)})"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


@dataclass(frozen=True)
class TraceEntry:
    """One instruction's time on its module; ``text`` (the disassembly) is made when read."""
    index: int
    module: str
    insn: object = field(repr=False)
    start: int = 0
    end: int = 0

    @property
    def text(self) -> str:
        return format_insn(self.insn)


@dataclass
class RunStats:
    """What a run did and how long it took (cycles at ``clock_mhz``)."""
    config: AccelConfig
    cycles: int
    busy: dict[str, int]
    bytes_loaded: dict[str, int]
    bytes_stored: dict[str, int]
    gemm_macs: int
    gemm_steps: int
    alu_ops: int
    alu_steps: int
    instructions: dict[str, int]
    leftover_tokens: dict[str, int]
    trace: list[TraceEntry] = field(repr=False)

    @property
    def seconds(self) -> float:
        return self.cycles / (self.config.clock_mhz * 1e6)

    @property
    def gemm_ops(self) -> int:
        """Two operations per MAC."""
        return 2 * self.gemm_macs

    @property
    def utilization(self) -> float:
        """GEMM MACs over what the core could do in the run's cycles."""
        return self.gemm_macs / (self.cycles * self.config.macs_per_cycle) if self.cycles else 0.0

    @property
    def gops(self) -> float:
        return self.gemm_ops / self.seconds / 1e9 if self.cycles else 0.0

    def timeline(self) -> list[tuple[str, int, int, int, str]]:
        """Rows ``(module, start, end, index, text)`` in start order, for a timeline plot."""
        return [(e.module, e.start, e.end, e.index, e.text)
                for e in sorted(self.trace, key=lambda e: (e.start, e.index))]

    def table(self) -> str:
        load, stored = self.bytes_loaded, self.bytes_stored
        lines = [f"cycles          {self.cycles} ({self.seconds * 1e3:.4g} ms at "
                 f"{self.config.clock_mhz:g} MHz)"]
        for m, busy in self.busy.items():
            share = busy / self.cycles if self.cycles else 0.0
            lines.append(f"  {m:<13s} {busy} busy ({share:.1%}), "
                         f"{self.instructions[m]} instructions")
        lines.append("bytes loaded    " + ", ".join(f"{k} {v}" for k, v in load.items() if v))
        lines.append("bytes stored    " + ", ".join(f"{k} {v}" for k, v in stored.items() if v))
        lines.append(f"GEMM            {self.gemm_macs} MACs in {self.gemm_steps} steps, "
                     f"utilization {self.utilization:.1%}, {self.gops:.3g} GOPS")
        lines.append(f"ALU             {self.alu_ops} ops in {self.alu_steps} steps")
        if any(self.leftover_tokens.values()):
            lines.append("tokens left     " + ", ".join(
                f"{k} {v}" for k, v in self.leftover_tokens.items() if v))
        return "\n".join(lines)

    __str__ = table

    def _repr_html_(self):
        return f"<pre>{html.escape(self.table())}</pre>"

    def plot(self, ax=None):
        """A Gantt chart of the three modules (needs matplotlib, the ``lab`` extra)."""
        try:
            import matplotlib.pyplot as plt
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError("RunStats.plot needs matplotlib: "
                              "pip install relaybench[lab]") from err
        if ax is None:
            _, ax = plt.subplots(figsize=(10, 2.5))
        colors = {"LOAD": "tab:blue", "GEMM": "tab:red", "ALU": "tab:orange",
                  "STORE": "tab:green", "FINISH": "black"}
        for module, start, end, _, text in self.timeline():
            row = 2 - _MODULE_RANK[Module(module)]
            ax.barh(row, end - start, left=start, color=colors.get(text.split()[0], "grey"),
                    edgecolor="white", linewidth=0.3)
        ax.set_yticks([2, 1, 0], [m.value for m in _MODULES])
        ax.set_xlabel("cycle")
        return ax


# ----- the simulator -----------------------------------------------------------------------------

_CHUNK = 1 << 14        # GEMM steps per batched product


class Simulator:
    """Runs :class:`~.isa.Program` streams on a fresh set of SRAM buffers each time.

    ``run(program, dram)`` returns :class:`RunStats`; results are in ``dram``'s regions. After a
    run the buffers stay readable for inspection: ``inp``, ``wgt``, ``acc`` (shaped
    ``(depth, *element shape)``) and ``uop`` (rows dst, src, wgt)."""

    def __init__(self, config: AccelConfig | None = None):
        self.config = config or DEFAULT_CONFIG
        cfg = self.config
        bound = cfg.block_in * (1 << (cfg.inp_bits - 1)) * (1 << (cfg.wgt_bits - 1))
        self._dot_dtype = (np.float32 if bound < 1 << 24 else
                           np.float64 if bound < 1 << 53 else np.int64)

    # -- state -------------------------------------------------------------------------------

    def _reset(self):
        cfg = self.config
        self.inp = np.zeros((cfg.inp_depth,) + cfg.inp_shape, dtype=cfg.inp_dtype)
        self.wgt = np.zeros((cfg.wgt_depth,) + cfg.wgt_shape, dtype=cfg.wgt_dtype)
        self.acc = np.zeros((cfg.acc_depth,) + cfg.acc_shape, dtype=cfg.acc_dtype)
        self.uop = np.zeros((3, cfg.uop_depth), dtype=np.int64)        # dst, src, wgt
        self._inp_dot = self.inp.astype(self._dot_dtype)
        self._wgt_dot = self.wgt.astype(self._dot_dtype)

    def run(self, program: Program, dram: Dram, check_races: bool = True) -> RunStats:
        """Execute and time ``program`` on ``dram``. With ``check_races`` (the default), a
        conflicting pair of instructions that the schedule runs out of program order, or at
        the same time, is a :class:`RaceError` naming both (the results would depend on timing
        on the hardware)."""
        if not isinstance(program, Program):
            raise AccelError(f"Simulator.run: expected a Program, got {type(program).__name__} "
                             f"(wrap the instructions: Program(instructions, uops, config))")
        if not isinstance(dram, Dram):
            raise AccelError(f"Simulator.run: expected a Dram, got {type(dram).__name__}")
        if program.config != self.config:
            raise AccelError("Simulator.run: the program was built for another configuration")
        if dram.config != self.config:
            raise AccelError("Simulator.run: the DRAM was built for another configuration")
        if program.uops:
            program = program.relocated(dram.place_uops(program.uops).base)
        start, end, left = schedule(program)
        self._reset()
        self._stats = {"load": {m.name: 0 for m in MemType}, "store": {m.name: 0 for m in MemType},
                       "gemm_steps": 0, "alu_steps": 0}
        insns = program.instructions
        order = sorted(range(len(insns)),
                       key=lambda i: (start[i], _MODULE_RANK[module_of(insns[i])], i))
        self._access = [[] for _ in insns]
        for i in order:
            insn = insns[i]
            self._index = i
            self._where = _Where(i, insn)
            _EXECUTE[type(insn)](self, insn, dram)
        if check_races:
            _check_races(insns, start, end, self._access)
        busy = {m.value: 0 for m in _MODULES}
        count = {m.value: 0 for m in _MODULES}
        trace = []
        for i, insn in enumerate(insns):
            m = module_of(insn).value
            busy[m] += end[i] - start[i]
            count[m] += 1
            trace.append(TraceEntry(i, m, insn, start[i], end[i]))
        cfg, st = self.config, self._stats
        return RunStats(config=cfg, cycles=max(end, default=0), busy=busy,
                        bytes_loaded={k: v for k, v in st["load"].items() if k != "OUT"},
                        bytes_stored={"OUT": st["store"]["OUT"]},
                        gemm_macs=st["gemm_steps"] * cfg.macs_per_cycle,
                        gemm_steps=st["gemm_steps"],
                        alu_ops=st["alu_steps"] * cfg.batch * cfg.block_out,
                        alu_steps=st["alu_steps"], instructions=count, leftover_tokens=left,
                        trace=trace)

    # -- LOAD / STORE ----------------------------------------------------------------------------

    def _dram_rows(self, insn: MemInsn, dram: Dram):
        """The DRAM region and the ``(y_size, x_size)`` element indices an instruction touches."""
        region, local = dram.locate(insn.mem_type, insn.dram_base, self._where)
        rows = (local + np.arange(insn.y_size, dtype=np.int64)[:, None] * insn.x_stride
                + np.arange(insn.x_size, dtype=np.int64)[None, :])
        if rows[-1, -1] >= region.count:
            raise AccelError(f"{self._where}: reads/writes elements up to {rows[-1, -1]} of "
                             f"DRAM region {region.name!r}, which holds {region.count}")
        return region, rows

    def _load(self, insn: MemInsn, dram: Dram):
        if insn.opcode == Opcode.STORE:
            return self._store(insn, dram)
        region, rows = self._dram_rows(insn, dram)
        data = region.array[rows]                                 # (y, x, *elem)
        self._stats["load"][insn.mem_type.name] += data.nbytes
        if any(insn.pads):
            y0, y1, x0, x1 = insn.pads
            shape = (y0 + insn.y_size + y1, x0 + insn.x_size + x1) + data.shape[2:]
            padded = np.full(shape, self._pad_value(insn), dtype=data.dtype)
            padded[y0:y0 + insn.y_size, x0:x0 + insn.x_size] = data
            data = padded
        data = data.reshape((-1,) + data.shape[2:])
        lo, hi = insn.sram_base, insn.sram_base + data.shape[0]
        kind = insn.mem_type
        if kind != MemType.UOP:
            buffer = {MemType.INP: "inp", MemType.WGT: "wgt"}.get(kind, "acc")
            self._access[self._index].append((buffer, True, (lo, hi)))
        if kind == MemType.UOP:
            self.uop[:, lo:hi] = decode_uop_words(data, self.config)
        elif kind == MemType.INP:
            self.inp[lo:hi] = data
            self._inp_dot[lo:hi] = data
        elif kind == MemType.WGT:
            self.wgt[lo:hi] = data
            self._wgt_dot[lo:hi] = data
        else:                                                     # ACC, ACC_8BIT (sign-extends)
            self.acc[lo:hi] = data

    def _pad_value(self, insn: MemInsn):
        if insn.pad_value == PadValue.ZERO:
            return 0
        _, dtype = element_type(self.config, insn.mem_type)
        info = np.iinfo(dtype)
        return info.min if insn.pad_value == PadValue.MIN else info.max

    def _store(self, insn: MemInsn, dram: Dram):
        region, rows = self._dram_rows(insn, dram)
        n = insn.y_size * insn.x_size
        # Narrowing keeps the low out_bits (two's complement), no saturation.
        data = self.acc[insn.sram_base:insn.sram_base + n].astype(self.config.out_dtype)
        self._access[self._index].append(("acc", False, (insn.sram_base, insn.sram_base + n)))
        region.array[rows] = data.reshape((insn.y_size, insn.x_size) + data.shape[1:])
        self._stats["store"]["OUT"] += data.nbytes

    # -- micro-op loops ------------------------------------------------------------------------

    def _loop_indices(self, insn, which: int, factor_out: int, factor_in: int, depth: int,
                      name: str) -> np.ndarray:
        """The index every step of ``insn`` uses for one micro-op field (0 dst, 1 src, 2 wgt),
        in execution order: i (iter_out), then j (iter_in), then the micro-op."""
        base = self.uop[which, insn.uop_bgn:insn.uop_end]
        idx = (base[None, None, :]
               + (np.arange(insn.iter_out, dtype=np.int64) * factor_out)[:, None, None]
               + (np.arange(insn.iter_in, dtype=np.int64) * factor_in)[None, :, None]).ravel()
        if idx.size and idx.max() >= depth:
            p = int(np.argmax(idx >= depth))
            i, rest = divmod(p, insn.iter_in * (insn.uop_end - insn.uop_bgn))
            j, k = divmod(rest, insn.uop_end - insn.uop_bgn)
            raise AccelError(f"{self._where}: {name} index {int(idx[p])} at step (i={i}, j={j}, "
                             f"uop={insn.uop_bgn + k}) is past the buffer of {depth} elements")
        return idx

    def _gemm(self, insn: GemmInsn, dram: Dram):
        cfg = self.config
        dst = self._loop_indices(insn, 0, insn.dst_factor_out, insn.dst_factor_in,
                                 cfg.acc_depth, "dst (acc)")
        touched = np.unique(dst)
        access = self._access[self._index]
        access.append(("acc", True, touched))
        if insn.reset:
            self.acc[dst] = 0
            return
        src = self._loop_indices(insn, 1, insn.src_factor_out, insn.src_factor_in,
                                 cfg.inp_depth, "src (inp)")
        wgt = self._loop_indices(insn, 2, insn.wgt_factor_out, insn.wgt_factor_in,
                                 cfg.wgt_depth, "wgt")
        access.append(("inp", False, np.unique(src)))
        access.append(("wgt", False, np.unique(wgt)))
        lanes = cfg.batch * cfg.block_out
        total = np.zeros(cfg.acc_depth * lanes, dtype=np.int64)
        lane = np.arange(lanes, dtype=np.int64)
        for lo in range(0, dst.size, _CHUNK):
            d, s, w = dst[lo:lo + _CHUNK], src[lo:lo + _CHUNK], wgt[lo:lo + _CHUNK]
            a = self._inp_dot[s]                                  # (n, batch, block_in)
            b = self._wgt_dot[w]                                  # (n, block_out, block_in)
            prod = np.matmul(a, b.transpose(0, 2, 1))             # (n, batch, block_out)
            flat = (d[:, None] * lanes + lane[None, :]).ravel()
            if self._dot_dtype is np.int64:
                np.add.at(total, flat, prod.reshape(-1))
            else:
                # float64 sums of exact integer products stay exact below 2**53.
                total += np.bincount(flat, weights=prod.reshape(-1).astype(np.float64),
                                     minlength=total.size).astype(np.int64)
        acc = self.acc.reshape(cfg.acc_depth, lanes)
        acc[touched] = (acc[touched].astype(np.int64)
                        + total.reshape(cfg.acc_depth, lanes)[touched]).astype(cfg.acc_dtype)
        self._stats["gemm_steps"] += dst.size

    def _alu(self, insn: AluInsn, dram: Dram):
        cfg = self.config
        dst = self._loop_indices(insn, 0, insn.dst_factor_out, insn.dst_factor_in,
                                 cfg.acc_depth, "dst (acc)")
        self._stats["alu_steps"] += dst.size
        self._access[self._index].append(("acc", True, np.unique(dst)))
        lanes = cfg.batch * cfg.block_out
        acc = self.acc.reshape(cfg.acc_depth, lanes)
        if insn.reset:
            acc[dst] = 0
            return
        if insn.use_imm:
            src = None
        else:
            src = self._loop_indices(insn, 1, insn.src_factor_out, insn.src_factor_in,
                                     cfg.acc_depth, "src (acc)")
        repeated, raw = _hazards(dst, src)
        if not repeated.any() and not raw.any():
            self._alu_segment(acc, insn, dst, src)
        elif not raw.any() and insn.alu_op != AluOp.SHR:
            # Only repeated destinations, of an order-independent op: one ufunc.at.
            self._alu_at(acc, insn, dst, src)
        else:
            lo = 0
            while lo < dst.size:
                repeated, raw = _hazards(dst[lo:], None if src is None else src[lo:])
                bad = repeated | raw
                hi = dst.size if not bad.any() else lo + max(1, int(np.argmax(bad)))
                self._alu_segment(acc, insn, dst[lo:hi], None if src is None else src[lo:hi])
                lo = hi

    def _operand(self, acc, insn, src):
        if src is None:
            return np.int64(insn.imm)
        return acc[src].astype(np.int64)

    def _alu_segment(self, acc, insn, dst, src):
        """Steps with distinct destinations, none reading an earlier step's destination."""
        b = self._operand(acc, insn, src)
        a = acc[dst].astype(np.int64)
        acc[dst] = _ALU_OPS[insn.alu_op](a, b).astype(self.config.acc_dtype)

    def _alu_at(self, acc, insn, dst, src):
        """MIN, MAX, ADD, MUL with repeated destinations: applied in any order, same result
        (ADD and MUL modulo 2**64, then narrowed)."""
        touched = np.unique(dst)
        work = np.zeros_like(acc, dtype=np.int64)
        work[touched] = acc[touched]
        b = self._operand(acc, insn, src)
        if src is None:
            b = np.broadcast_to(b, (dst.size, acc.shape[1]))
        ufunc = {AluOp.MIN: np.minimum, AluOp.MAX: np.maximum, AluOp.ADD: np.add,
                 AluOp.MUL: np.multiply}[insn.alu_op]
        ufunc.at(work, dst, b)
        acc[touched] = work[touched].astype(self.config.acc_dtype)

    def _finish(self, insn: FinishInsn, dram: Dram):
        pass


def _first_common(x, y):
    """An element two accesses share (each a ``(lo, hi)`` range or a sorted index array), or
    None."""
    if isinstance(x, tuple) and isinstance(y, tuple):
        lo, hi = max(x[0], y[0]), min(x[1], y[1])
        return lo if lo < hi else None
    if isinstance(x, tuple):
        x, y = y, x
    if isinstance(y, tuple):
        inside = x[(x >= y[0]) & (x < y[1])]
        return int(inside[0]) if inside.size else None
    common = np.intersect1d(x, y, assume_unique=True)
    return int(common[0]) if common.size else None


def _check_races(insns, start, end, access):
    """Raise :class:`RaceError` for the first pair of instructions on neighbouring modules that
    conflict on a buffer (load/compute on INP and WGT, compute/store on ACC) and that the
    schedule does not run in program order, one after the other. Within a module, starts and
    ends grow with program order, so the candidates for each instruction are found by
    bisection."""
    by_module = {m: [] for m in _MODULES}
    for i, insn in enumerate(insns):
        by_module[module_of(insn)].append(i)
    for first, second, buffers in ((Module.LOAD, Module.COMPUTE, ("inp", "wgt")),
                                   (Module.COMPUTE, Module.STORE, ("acc",))):
        others = by_module[first]
        starts = [start[i] for i in others]
        ends = [end[i] for i in others]
        for b in by_module[second]:
            k = bisect.bisect_left(others, b)
            earlier = others[bisect.bisect_right(ends, start[b], 0, k):k]
            later = others[k:bisect.bisect_left(starts, end[b], k)]
            for a in earlier + later:
                for buf, a_writes, a_set in access[a]:
                    if buf not in buffers:
                        continue
                    for buf_b, b_writes, b_set in access[b]:
                        if buf_b != buf or not (a_writes or b_writes):
                            continue
                        element = _first_common(a_set, b_set)
                        if element is None:
                            continue
                        p, q = min(a, b), max(a, b)
                        does = {a: "writes" if a_writes else "reads",
                                b: "writes" if b_writes else "reads"}
                        raise RaceError(
                            f"race on the {buf} buffer: instruction {p} ({format_insn(insns[p])}) "
                            f"on the {module_of(insns[p]).value} module {does[p]} element "
                            f"{element}, which instruction {q} ({format_insn(insns[q])}) on the "
                            f"{module_of(insns[q]).value} module {does[q]}, and no dependence "
                            f"token orders them: scheduled [{start[p]}, {end[p]}) and "
                            f"[{start[q]}, {end[q]})")


def _shift(a: np.ndarray, b) -> np.ndarray:
    """SHR: arithmetic right shift by b >= 0, left shift by -b for b < 0 (int64 lanes; the
    caller narrows to the accumulator type, which keeps the low bits of a left shift)."""
    b = np.broadcast_to(np.asarray(b, dtype=np.int64), np.broadcast_shapes(np.shape(a),
                                                                            np.shape(b)))
    right = np.right_shift(a, np.clip(b, 0, 63))
    left = np.left_shift(a, np.clip(-b, 0, 63))
    return np.where(b >= 0, right, left)


_ALU_OPS = {AluOp.MIN: np.minimum, AluOp.MAX: np.maximum, AluOp.ADD: np.add,
            AluOp.MUL: np.multiply, AluOp.SHR: _shift}


def _hazards(dst: np.ndarray, src: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Per step of an ALU instruction: whether its destination was written by an earlier step
    (``repeated``) and whether its source was (``raw``, a read after write inside the
    instruction). Steps free of both can run as one vectorized update with the sequential
    meaning."""
    n = dst.size
    steps = np.arange(n)
    order = np.argsort(dst, kind="stable")
    sorted_d = dst[order]
    is_first = np.ones(n, dtype=bool)
    is_first[1:] = sorted_d[1:] != sorted_d[:-1]
    # the sorted position where each step's group of equal destinations begins
    group_first = np.maximum.accumulate(np.where(is_first, steps, 0))
    first_writer = np.empty(n, dtype=np.int64)
    first_writer[order] = order[group_first]
    repeated = first_writer < steps
    if src is None:
        return repeated, np.zeros(n, dtype=bool)
    k = np.minimum(np.searchsorted(sorted_d, src), n - 1)
    writer = np.where(sorted_d[k] == src, order[group_first[k]], n)
    return repeated, writer < steps


_EXECUTE = {MemInsn: Simulator._load, GemmInsn: Simulator._gemm, AluInsn: Simulator._alu,
            FinishInsn: Simulator._finish}
