"""The accelerator ISA: field checks, module assignment, the 128-bit encoding round trip and
the disassembler's text."""

import dataclasses

import numpy as np
import pytest

from relaybench.backends.accel import (AccelConfig, AccelError, AluInsn, AluOp, DepFlags,
                                       FinishInsn, GemmInsn, MemInsn, MemType, Module, Opcode,
                                       PadValue, Program, Uop, alu, decode, decode_uop,
                                       disassemble, encode, encode_uop, finish, gemm, load,
                                       module_of, store)

CONFIGS = [AccelConfig(), AccelConfig.multi_batch(2), AccelConfig.multi_batch(4)]


def _random_deps(rng, module):
    flags = dict(zip(("pop_prev", "pop_next", "push_prev", "push_next"),
                     (bool(v) for v in rng.integers(0, 2, 4))))
    if module is Module.LOAD:
        flags.update(pop_prev=False, push_prev=False)
    if module is Module.STORE:
        flags.update(pop_next=False, push_next=False)
    return DepFlags(**flags)


def _random_insn(rng, cfg):
    """One random valid instruction, every field drawn over its full range."""
    kind = rng.integers(0, 5)
    u = lambda bits: int(rng.integers(0, 1 << bits))  # noqa: E731
    if kind in (0, 1):
        mem = MemType.OUT if kind == 1 else MemType(rng.choice([0, 1, 2, 3, 5]))
        depth = {MemType.UOP: cfg.uop_depth, MemType.WGT: cfg.wgt_depth,
                 MemType.INP: cfg.inp_depth}.get(mem, cfg.acc_depth)
        pads = (0, 0, 0, 0) if kind == 1 or mem == MemType.UOP else tuple(
            int(v) for v in rng.integers(0, 8, 4))
        y, x = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        extent = (pads[0] + y + pads[1]) * (pads[2] + x + pads[3])
        insn = MemInsn(opcode=Opcode.STORE if kind == 1 else Opcode.LOAD, mem_type=mem,
                       sram_base=int(rng.integers(0, depth - extent + 1)), dram_base=u(32),
                       y_size=y, x_size=x, x_stride=u(16), y_pad_0=pads[0], y_pad_1=pads[1],
                       x_pad_0=pads[2], x_pad_1=pads[3],
                       pad_value=PadValue(rng.integers(0, 3)) if any(pads) else PadValue.ZERO,
                       deps=DepFlags())
    elif kind == 4:
        return FinishInsn(deps=_random_deps(rng, Module.COMPUTE))
    else:
        bgn = int(rng.integers(0, cfg.uop_depth))
        common = dict(uop_bgn=bgn, uop_end=int(rng.integers(bgn + 1, cfg.uop_depth + 1)),
                      iter_out=u(14), iter_in=u(14), reset=bool(rng.integers(0, 2)),
                      dst_factor_out=u(cfg.acc_index_bits), dst_factor_in=u(cfg.acc_index_bits))
        if kind == 2:
            insn = GemmInsn(src_factor_out=u(cfg.inp_index_bits),
                            src_factor_in=u(cfg.inp_index_bits),
                            wgt_factor_out=u(cfg.wgt_index_bits),
                            wgt_factor_in=u(cfg.wgt_index_bits), **common)
        else:
            insn = AluInsn(alu_op=AluOp(rng.integers(0, 5)), use_imm=bool(rng.integers(0, 2)),
                           imm=int(rng.integers(-32768, 32768)),
                           src_factor_out=u(cfg.acc_index_bits),
                           src_factor_in=u(cfg.acc_index_bits), **common)
    return dataclasses.replace(insn, deps=_random_deps(rng, module_of(insn)))


@pytest.mark.parametrize("cfg", CONFIGS, ids=["batch1", "batch2", "batch4"])
def test_encode_decode_round_trip(cfg):
    rng = np.random.default_rng(7)
    insns = [_random_insn(rng, cfg) for _ in range(400)]
    for insn in insns:
        word = encode(insn, cfg)
        assert 0 <= word < 1 << 128
        assert word & 7 == int(insn.opcode)                       # opcode in the low 3 bits
        assert decode(word, cfg) == insn
    program = Program(insns, (), cfg)
    again = Program.from_bytes(program.to_bytes(), (), cfg)
    assert again.instructions == program.instructions
    assert len(program.to_bytes()) == 16 * len(insns)
    for _ in range(200):
        uop = Uop(int(rng.integers(0, cfg.acc_depth)), int(rng.integers(0, cfg.inp_depth)),
                  int(rng.integers(0, cfg.wgt_depth)))
        word = encode_uop(uop, cfg)
        assert 0 <= word < 1 << 32
        assert decode_uop(word, cfg) == uop


def test_encoding_bit_positions():
    # header: opcode bits 0-2, then pop_prev, pop_next, push_prev, push_next
    word = encode(finish(deps="pop_next push_prev"))
    assert word == 3 | 1 << 4 | 1 << 5
    # LOAD: mem_type at bit 7, sram_base at 10, dram_base at 26, y_size at 58
    word = encode(load(MemType.INP, sram_base=5, dram_base=9, y_size=3, x_size=1))
    assert word & 0x7F == 0 and (word >> 7) & 7 == 2
    assert (word >> 10) & 0xFFFF == 5 and (word >> 26) & 0xFFFFFFFF == 9
    assert (word >> 58) & 0xFFFF == 3
    # a negative immediate is stored in two's complement in the top field
    word = encode(alu(AluOp.MAX, 0, 1, imm=-128))
    assert word >> (127 - 16) == 0x10000 - 128
    # micro-op: dst, then src from bit 11, wgt from bit 22
    assert encode_uop(Uop(3, 5, 7)) == 3 | 5 << 11 | 7 << 22


def test_decode_rejects_garbage():
    with pytest.raises(AccelError, match="unknown opcode 7"):
        decode(7)
    with pytest.raises(AccelError, match="sets bits past the FINISH fields"):
        decode(3 | 1 << 100)


def test_modules_follow_vta():
    assert module_of(load(MemType.INP, 0, 0)) is Module.LOAD
    assert module_of(load(MemType.WGT, 0, 0)) is Module.LOAD
    for mem in (MemType.UOP, MemType.ACC, MemType.ACC_8BIT):
        assert module_of(load(mem, 0, 0)) is Module.COMPUTE
    assert module_of(gemm(0, 1)) is Module.COMPUTE
    assert module_of(alu(AluOp.ADD, 0, 1)) is Module.COMPUTE
    assert module_of(finish()) is Module.COMPUTE
    assert module_of(store(0, 0)) is Module.STORE


def test_disassembler_text():
    program = Program([
        load(MemType.INP, 0, 128, 14, 14, 56, pads=(1, 1, 1, 1), deps="pop_next push_next"),
        load(MemType.WGT, 0, 4, 1, 9, pad_value=PadValue.MIN),
        load(MemType.UOP, 0, 0, 1, 2),
        gemm(0, 1, iter_out=196, reset=True, dst_factor_out=1),
        gemm(0, 2, 14, 14, dst_factor_out=14, dst_factor_in=1, src_factor_out=16,
             src_factor_in=1, wgt_factor_out=0, wgt_factor_in=0, deps="pop_prev"),
        alu(AluOp.ADD, 0, 1, 196, dst_factor_out=1, src_factor_out=1),
        alu(AluOp.MAX, 0, 1, 196, imm=-128, dst_factor_out=1, deps="push_prev push_next"),
        load(MemType.INP, 0, 10, 2, 3, 5, pads=(0, 0, 1, 0), pad_value=PadValue.MIN),
        store(0, 64, 14, 14, 28, deps="pop_prev"),
        finish(),
    ], uops=[Uop(0, 0, 0), Uop(1, 2, 3)])
    assert str(program) == "\n".join([
        "   0 load     LOAD INP sram=0 dram=128 y=14 x=14 stride=56 pad=(1,1,1,1) "
        "[pop_next push_next]",
        "   1 load     LOAD WGT sram=0 dram=4 y=1 x=9 stride=9",
        "   2 compute  LOAD UOP sram=0 dram=0 y=1 x=2 stride=2",
        "   3 compute  GEMM reset uop=[0,1) iter=(196,1) dst=(1,0) src=(0,0) wgt=(0,0)",
        "   4 compute  GEMM uop=[0,2) iter=(14,14) dst=(14,1) src=(16,1) wgt=(0,0) [pop_prev]",
        "   5 compute  ALU ADD tensor uop=[0,1) iter=(196,1) dst=(1,0) src=(1,0)",
        "   6 compute  ALU MAX imm=-128 uop=[0,1) iter=(196,1) dst=(1,0) src=(0,0) "
        "[push_prev push_next]",
        "   7 load     LOAD INP sram=0 dram=10 y=2 x=3 stride=5 pad=(0,0,1,0) pad_value=min",
        "   8 store    STORE OUT sram=0 dram=64 y=14 x=14 stride=28 [pop_prev]",
        "   9 compute  FINISH",
        "micro-ops (2):",
        "   0 dst=0 src=0 wgt=0",
        "   1 dst=1 src=2 wgt=3",
    ])
    assert disassemble(program.instructions[:1]).startswith("   0 load     LOAD INP")
    assert "<pre>" in program._repr_html_()
    assert program.counts() == {"load": 3, "compute": 6, "store": 1}


@pytest.mark.parametrize("build, message", [
    (lambda: gemm(0, 1, iter_out=1 << 14), r"GEMM: iter_out=16384 does not fit in 14 bits"),
    (lambda: alu(AluOp.ADD, 0, 1, iter_in=-1), r"ALU ADD: iter_in=-1 does not fit in 14 bits"),
    (lambda: gemm(3, 3), r"GEMM: empty micro-op range uop_bgn=3, uop_end=3"),
    (lambda: alu(AluOp.SHR, 0, 1, imm=40000), r"ALU SHR: imm=40000 does not fit in a signed"),
    (lambda: load(MemType.INP, 0, 1 << 32), r"LOAD INP: dram_base=4294967296 does not fit"),
    (lambda: load(MemType.INP, 0, 0, pads=(16, 0, 0, 0)),
     r"LOAD INP: y_pad_0=16 does not fit in 4"),
    (lambda: load(MemType.INP, 0, 0, x_size=1 << 16), r"LOAD INP: x_size=65536 does not fit"),
    (lambda: load(9, 0, 0), r"LOAD: 9 is not a valid MemType"),
    (lambda: gemm(0, 1, deps="pop_prev push_later"), r"unknown flag 'push_later'"),
    (lambda: Uop(-1, 0), r"Uop: dst_idx=-1"),
])
def test_field_overflow_on_construction(build, message):
    with pytest.raises(AccelError, match=message):
        build()


@pytest.mark.parametrize("insn, message", [
    (load(MemType.INP, 2047, 0, 1, 2), r"instruction 0 \(LOAD INP .*\): sram_base: elements "
     r"\[2047, 2049\) go past the INP buffer of 2048 elements"),
    (load(MemType.WGT, 1000, 0, 5, 5), r"past the WGT buffer of 1024"),
    (load(MemType.INP, 1900, 0, 14, 14, pads=(1, 1, 1, 1)), r"\[1900, 2156\)"),
    (gemm(0, 8193), r"uop_end=8193 is past the micro-op buffer of 8192"),
    (gemm(0, 1, dst_factor_out=2048), r"dst_factor_out=2048 does not fit in 11 bits"),
    (gemm(0, 1, wgt_factor_in=1024), r"wgt_factor_in=1024 does not fit in 10 bits"),
    (store(0, 0, mem_type=MemType.ACC), r"STORE writes the OUT buffer only, not ACC"),
    (load(MemType.OUT, 0, 0), r"OUT cannot be loaded"),
    (load(MemType.UOP, 0, 0, pads=(1, 0, 0, 0)), r"a LOAD UOP cannot pad"),
    (load(MemType.INP, 0, 0, deps="pop_prev"), r"the load module has no previous module"),
    (store(0, 0, deps="push_next"), r"the store module has no next module"),
])
def test_configuration_checks_name_the_instruction(insn, message):
    with pytest.raises(AccelError, match=message):
        Program([insn])


def test_uop_checks_and_program_uop_range():
    with pytest.raises(AccelError, match=r"micro-op 1 .*: src_idx=4096 does not fit in 11 bits"):
        Program([finish()], uops=[Uop(0, 0, 0), Uop(0, 4096, 0)])
    with pytest.raises(AccelError, match=r"reads past the program's 2 micro-ops"):
        Program([load(MemType.UOP, 0, 1, 1, 2)], uops=[Uop(0, 0), Uop(1, 1)])
