"""The simulator: hand-written programs checked bit-exactly against numpy integer arithmetic
and a step-by-step Python model of the ALU; padding loads; multi-batch designs; the timing
model against hand computations; deadlocks and transfers out of bounds."""

import dataclasses

import numpy as np
import pytest

from accel_programs import matmul_program, matmul_reference
from relaybench.backends.accel import (AccelConfig, AccelError, AluOp, DeadlockError, Dram,
                                       MemType, Opcode, PadValue, Program, RaceError, Simulator,
                                       Uop, alu, finish, gemm, load, store)

CFG = AccelConfig()


def _wrap32(v: int) -> int:
    return (v + (1 << 31)) % (1 << 32) - (1 << 31)


def test_gemm_bias_shift_clip_store_1x64_by_64x32():
    """(1x64) . (64x32) through LOAD INP/WGT, GEMM reset + accumulate, ALU ADD of a bias loaded
    into the accumulator, SHR, MAX/MIN clip, STORE, read back: equal to numpy."""
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (1, 64), dtype=np.int8)
    w = rng.integers(-128, 128, (64, 32), dtype=np.int8)
    bias = rng.integers(-5000, 5000, (32,), dtype=np.int32)
    dram = Dram(CFG)
    xr = dram.alloc_array("x", MemType.INP, x.reshape(4, 1, 16))            # 4 k-blocks
    # weight element (o, k) = w[16k:16k+16, 16o:16o+16]^T, stored o-major
    tiles = w.reshape(4, 16, 2, 16).transpose(2, 0, 3, 1)
    wr = dram.alloc_array("w", MemType.WGT, tiles)
    br = dram.alloc_array("bias", MemType.ACC, bias.reshape(2, 1, 16))
    yr = dram.alloc("y", MemType.OUT, 2)
    uops = [Uop(o, k, o * 4 + k) for o in range(2) for k in range(4)]        # 0..7 GEMM
    uops += [Uop(0, 2)]                                     # 8: ALU, acc[o] op acc[2 + o]
    program = Program([
        load(MemType.UOP, 0, 0, 1, len(uops)),
        load(MemType.INP, 0, xr.base, 1, 4),
        load(MemType.WGT, 0, wr.base, 1, 8, deps="push_next"),
        load(MemType.ACC, 2, br.base, 1, 2),
        gemm(8, 9, iter_out=2, reset=True, dst_factor_out=1, deps="pop_prev"),
        gemm(0, 8),
        alu(AluOp.ADD, 8, 9, iter_out=2, dst_factor_out=1, src_factor_out=1),
        alu(AluOp.SHR, 8, 9, iter_out=2, dst_factor_out=1, imm=6),
        alu(AluOp.MAX, 8, 9, iter_out=2, dst_factor_out=1, imm=-128),
        alu(AluOp.MIN, 8, 9, iter_out=2, dst_factor_out=1, imm=127, deps="push_next"),
        store(0, yr.base, 1, 2, deps="pop_prev"),
        finish(),
    ], uops, CFG)
    stats = Simulator(CFG).run(program, dram)
    acc = x.astype(np.int64) @ w.astype(np.int64) + bias
    expected = np.clip(acc >> 6, -128, 127).astype(np.int8)
    np.testing.assert_array_equal(dram.read("y").reshape(1, 32), expected)
    # 8 GEMM steps of 256 MACs; 4 ALU instructions x 2 steps x 16 lanes
    assert stats.gemm_macs == 8 * 256 and stats.gemm_ops == 2 * 8 * 256
    assert stats.alu_ops == 4 * 2 * 16
    assert stats.bytes_loaded == {"UOP": 9 * 4, "WGT": 8 * 256, "INP": 4 * 16, "ACC": 2 * 64,
                                  "ACC_8BIT": 0}
    assert stats.bytes_stored == {"OUT": 2 * 16}


@pytest.mark.parametrize("cfg", [CFG, AccelConfig.multi_batch(2), AccelConfig.multi_batch(4),
                                 AccelConfig.multi_batch(4, "square")],
                         ids=["batch1", "batch2", "batch4", "batch4-8x8"])
@pytest.mark.parametrize("double_buffer", [True, False])
def test_tiled_matmul_matches_numpy(cfg, double_buffer):
    rng = np.random.default_rng(1)
    m, k, n = 8 * cfg.batch * 9, 3 * cfg.block_in, 2 * cfg.block_out
    x = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (k, n), dtype=np.int8)
    # small buffers force several tiles
    small = dataclasses.replace(cfg, inp_buffer_bytes=cfg.inp_elem_bytes * 48,
                                acc_buffer_bytes=cfg.acc_elem_bytes * 64)
    program, dram, result = matmul_program(small, x, w, shift=9, double_buffer=double_buffer)
    stats = Simulator(small).run(program, dram)
    np.testing.assert_array_equal(result(), matmul_reference(x, w, 9))
    assert stats.gemm_macs == m * k * n
    stores = [i for i in program if getattr(i, "opcode", None) == Opcode.STORE]
    assert len(stores) > 2                                # the small buffers forced tiles


def test_double_buffering_beats_serial_execution():
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, (512, 64), dtype=np.int8)
    w = rng.integers(-128, 128, (64, 64), dtype=np.int8)
    small = dataclasses.replace(CFG, inp_buffer_bytes=16 * 256, acc_buffer_bytes=64 * 256)
    runs = {}
    for double in (True, False):
        program, dram, result = matmul_program(small, x, w, shift=8, double_buffer=double)
        runs[double] = Simulator(small).run(program, dram)
        np.testing.assert_array_equal(result(), matmul_reference(x, w, 8))
    assert runs[True].gemm_macs == runs[False].gemm_macs
    assert runs[True].cycles < 0.85 * runs[False].cycles
    assert runs[True].utilization > runs[False].utilization
    # loads overlap compute: the modules' busy cycles add up to more than the total
    assert sum(runs[True].busy.values()) > runs[True].cycles


def test_cycle_counts_match_hand_computation():
    """load_latency 32, 8 bytes/cycle, GEMM pipeline depth 4, ALU depth 4, II 1 with an
    immediate, STORE latency 32."""
    dram = Dram(CFG)
    xr = dram.alloc("x", MemType.INP, 2)
    wr = dram.alloc("w", MemType.WGT, 1)
    yr = dram.alloc("y", MemType.OUT, 2)
    program = Program([
        load(MemType.INP, 0, xr.base, 1, 2),                   # 0 load: 32 + 2*16/8 = 36
        load(MemType.WGT, 0, wr.base, deps="push_next"),       # 1 load: 32 + 256/8 = 64
        load(MemType.UOP, 0, 0, 1, 2),                         # 2 compute: 32 + ceil(8/8) = 33
        gemm(0, 2, deps="pop_prev"),                           # 3 compute: 4 + 2
        alu(AluOp.SHR, 0, 2, iter_in=3, imm=1, deps="push_next"),  # 4 compute: 4 + 6
        store(0, yr.base, 1, 2, deps="pop_prev"),              # 5 store: 32 + 2*16/8 = 36
        finish(),                                              # 6 compute: 1
    ], [Uop(0, 0, 0), Uop(1, 1, 0)], CFG)
    stats = Simulator(CFG).run(program, dram)
    spans = {index: (start, end) for _, start, end, index, _ in stats.timeline()}
    assert spans == {0: (0, 36), 1: (36, 100), 2: (0, 33), 3: (100, 106), 4: (106, 116),
                     5: (116, 152), 6: (116, 117)}
    assert stats.cycles == 152
    assert stats.busy == {"load": 100, "compute": 33 + 6 + 10 + 1, "store": 36}
    assert stats.seconds == pytest.approx(152 / 100e6)
    assert stats.utilization == pytest.approx(2 * 256 / (152 * 256))
    assert stats.timeline()[0] == ("load", 0, 36, 0, "LOAD INP sram=0 dram=0 y=1 x=2 stride=2")
    assert "cycles          152" in str(stats)


def test_deadlock_names_the_blocked_instruction():
    program = Program([load(MemType.INP, 0, 0), gemm(0, 1, deps="pop_prev"), finish()])
    with pytest.raises(DeadlockError, match=r"instruction 1 \(GEMM .*\) on the compute module "
                                            r"waits for a token on load->compute"):
        Simulator(CFG).run(program, Dram(CFG))
    # a cycle: load waits for compute, compute waits for load
    program = Program([load(MemType.INP, 0, 0, deps="pop_next push_next"),
                       gemm(0, 1, deps="pop_prev push_prev")])
    with pytest.raises(DeadlockError, match=r"instruction 0 .* compute->load, .*; instruction 1 "):
        Simulator(CFG).run(program, Dram(CFG))


def test_padding_loads_match_numpy_pad():
    rng = np.random.default_rng(3)
    image = rng.integers(-100, 100, (5, 7, 1, 16), dtype=np.int8)   # 5 rows of 7 elements
    dram = Dram(CFG)
    region = dram.alloc_array("image", MemType.INP, image)
    # the 3x4 window at row 1, column 2, padded (1, 2, 2, 1); then the whole image with the
    # element type's minimum as padding (what max-pooling wants)
    program = Program([
        load(MemType.INP, 0, region.base + 1 * 7 + 2, 3, 4, 7, pads=(1, 2, 2, 1)),
        load(MemType.INP, 100, region.base, 5, 7, 7, pads=(1, 1, 1, 1),
             pad_value=PadValue.MIN),
    ], (), CFG)
    sim = Simulator(CFG)
    stats = sim.run(program, dram)
    window = np.pad(image[1:4, 2:6], ((1, 2), (2, 1), (0, 0), (0, 0)))
    np.testing.assert_array_equal(sim.inp[:6 * 7].reshape(window.shape), window)
    whole = np.pad(image, ((1, 1), (1, 1), (0, 0), (0, 0)), constant_values=-128)
    np.testing.assert_array_equal(sim.inp[100:100 + 7 * 9].reshape(whole.shape), whole)
    assert stats.bytes_loaded["INP"] == (12 + 35) * 16               # padding is not DRAM traffic
    # padding costs cycles: 32 + 6*7*16/8, then 32 + 7*9*16/8
    assert stats.busy["load"] == 32 + 84 + 32 + 126


def _alu_reference(acc, uops, insn):
    """The ALU's sequential meaning, step by step on Python integers."""
    acc = acc.astype(np.int64).copy()
    for i in range(insn.iter_out):
        for j in range(insn.iter_in):
            for u in uops[insn.uop_bgn:insn.uop_end]:
                d = u.dst_idx + i * insn.dst_factor_out + j * insn.dst_factor_in
                s = u.src_idx + i * insn.src_factor_out + j * insn.src_factor_in
                for lane in range(acc.shape[1]):
                    a = int(acc[d, lane])
                    b = insn.imm if insn.use_imm else int(acc[s, lane])
                    if insn.reset:
                        r = 0
                    elif insn.alu_op == AluOp.MIN:
                        r = min(a, b)
                    elif insn.alu_op == AluOp.MAX:
                        r = max(a, b)
                    elif insn.alu_op == AluOp.ADD:
                        r = a + b
                    elif insn.alu_op == AluOp.MUL:
                        r = a * b
                    elif b >= 0:
                        r = a >> b
                    else:                       # only the low 32 bits of a << -b are kept
                        r = a << -b if -b < 32 else 0
                    acc[d, lane] = _wrap32(r)
    return acc


@pytest.mark.parametrize("seed", range(6))
def test_alu_matches_sequential_semantics(seed):
    """Random ALU instructions over a small accumulator window, so destinations repeat and
    sources read what earlier steps of the same instruction wrote."""
    rng = np.random.default_rng(seed)
    rows = 12
    init = rng.integers(-(1 << 31), 1 << 31, (rows, 16), dtype=np.int64)
    init[:4] = rng.integers(-40, 40, (4, 16))                       # small values and shifts
    dram = Dram(CFG)
    region = dram.alloc_array("acc", MemType.ACC, init.reshape(rows, 1, 16))
    out = dram.alloc("acc_out", MemType.ACC, 1)   # noqa: F841 - keeps regions apart
    uops = [Uop(int(rng.integers(0, 6)), int(rng.integers(0, 6))) for _ in range(4)]
    insns, expected = [load(MemType.UOP, 0, 0, 1, 4), load(MemType.ACC, 0, region.base, 1, rows)], \
        init.copy()
    for _ in range(10):
        op = AluOp(rng.integers(0, 5))
        imm = None
        if rng.integers(0, 2):
            imm = int(rng.integers(-40, 40)) if op == AluOp.SHR else int(rng.integers(-300, 300))
        bgn = int(rng.integers(0, 4))
        insn = alu(op, bgn, int(rng.integers(bgn + 1, 5)), int(rng.integers(1, 3)),
                   int(rng.integers(1, 3)), imm=imm, dst_factor_out=int(rng.integers(0, 3)),
                   dst_factor_in=int(rng.integers(0, 2)), src_factor_out=int(rng.integers(0, 3)),
                   src_factor_in=int(rng.integers(0, 2)))
        insns.append(insn)
        expected = _alu_reference(expected, uops, insn)
    sim = Simulator(CFG)
    sim.run(Program(insns, uops, CFG), dram)
    np.testing.assert_array_equal(sim.acc[:rows].reshape(rows, 16), expected)


def test_alu_wrapping_and_store_narrowing_by_hand():
    vals = np.array([2147483647, 3, -7, 300, -129, 255, 128, -1] + [0] * 8, dtype=np.int32)
    dram = Dram(CFG)
    a = dram.alloc_array("a", MemType.ACC, np.stack([vals, vals, vals, vals]).reshape(4, 1, 16))
    y = dram.alloc("y", MemType.OUT, 4)
    program = Program([
        load(MemType.UOP, 0, 0, 1, 4),
        load(MemType.ACC, 0, a.base, 1, 4),
        alu(AluOp.ADD, 0, 1, imm=1),                 # row 0 + 1
        alu(AluOp.SHR, 1, 2, imm=-31),               # row 1 << 31
        alu(AluOp.SHR, 2, 3, imm=1),                 # row 2 >> 1 (arithmetic)
        alu(AluOp.MUL, 3, 4, imm=-1000, deps="push_next"),  # row 3 * -1000
        store(0, y.base, 1, 4, deps="pop_prev"),
    ], [Uop(0, 0), Uop(1, 0), Uop(2, 0), Uop(3, 0)], CFG)
    sim = Simulator(CFG)
    sim.run(program, dram)
    acc = sim.acc[:4, 0, :8]
    assert acc[0].tolist() == [-2147483648, 4, -6, 301, -128, 256, 129, 0]
    assert acc[1].tolist() == [-2147483648, -2147483648, -2147483648, 0, -2147483648,
                               -2147483648, 0, -2147483648]
    assert acc[2].tolist() == [1073741823, 1, -4, 150, -65, 127, 64, -1]
    assert acc[3].tolist() == [_wrap32(2147483647 * -1000), -3000, 7000, -300000, 129000,
                               -255000, -128000, 1000]
    # STORE keeps the low 8 bits: 301 -> 45, -129 -> 127 (row 2's 150 -> -106)
    out = dram.read("y")[:, 0, :8]
    assert out[0].tolist() == [0, 4, -6, 45, -128, 0, -127, 0]
    assert out[2].tolist() == [-1, 1, -4, -106, -65, 127, 64, -1]


def test_acc_8bit_load_sign_extends():
    data = np.arange(-8, 8, dtype=np.int8).reshape(1, 1, 16)
    dram = Dram(CFG)
    r = dram.alloc_array("b", MemType.ACC_8BIT, data)
    sim = Simulator(CFG)
    sim.run(Program([load(MemType.ACC_8BIT, 5, r.base)]), dram)
    assert sim.acc[5, 0].tolist() == list(range(-8, 8))
    assert sim.acc.dtype == np.int32


def test_transfers_outside_regions_are_errors():
    dram = Dram(CFG)
    x = dram.alloc("x", MemType.INP, 4)
    w = dram.alloc("w", MemType.WGT, 1)
    sim = Simulator(CFG)
    with pytest.raises(AccelError, match=r"instruction 0 \(LOAD INP .*\): reads/writes elements "
                                         r"up to 4 of DRAM region 'x', which holds 4"):
        sim.run(Program([load(MemType.INP, 0, x.base, 1, 5)]), dram)
    with pytest.raises(AccelError, match=r"lies in region 'w' of WGT elements, not INP"):
        sim.run(Program([load(MemType.INP, 0, w.base * 16)]), dram)
    with pytest.raises(AccelError, match=r"dram_base=100000 .* is in no DRAM region"):
        sim.run(Program([load(MemType.INP, 0, 100000)]), dram)
    with pytest.raises(AccelError, match=r"no region named 'nope'"):
        dram.read("nope")
    with pytest.raises(AccelError, match=r"values in \[0, 300\] do not fit int8"):
        dram.write("x", np.linspace(0, 300, 64).astype(int))
    with pytest.raises(AccelError, match=r"exists already"):
        dram.alloc("x", MemType.INP, 1)


def test_runtime_index_past_buffer_names_the_step():
    dram = Dram(CFG)
    program = Program([load(MemType.UOP, 0, 0), gemm(0, 1, iter_out=3, dst_factor_out=1000)],
                      [Uop(100, 0, 0)], CFG)
    with pytest.raises(AccelError, match=r"instruction 1 \(GEMM .*\): dst \(acc\) index 2100 at "
                                         r"step \(i=2, j=0, uop=0\) is past the buffer of 2048"):
        Simulator(CFG).run(program, dram)


def test_configuration_mismatch_is_an_error():
    other = AccelConfig.multi_batch(2)
    with pytest.raises(AccelError, match="the program was built for another configuration"):
        Simulator(other).run(Program([finish()]), Dram(other))
    with pytest.raises(AccelError, match="the DRAM was built for another configuration"):
        Simulator(CFG).run(Program([finish()]), Dram(other))
    with pytest.raises(AccelError, match="expected a Program, got list"):
        Simulator(CFG).run([finish()], Dram(CFG))


def test_timeline_plot():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, (64, 32), dtype=np.int8)
    w = rng.integers(-128, 128, (32, 16), dtype=np.int8)
    program, dram, _ = matmul_program(CFG, x, w)
    stats = Simulator(CFG).run(program, dram)
    ax = stats.plot()
    assert len(ax.patches) == len(program)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["load", "compute", "store"]


def test_gemm_accumulation_wraps_as_int32():
    """-128 * -128 summed over 16 lanes is 2**18 per step; 32766 steps into one accumulator
    entry pass 2**31 and wrap, as the hardware's int32 adder does."""
    dram = Dram(CFG)
    x = dram.alloc_array("x", MemType.INP, np.full((1, 1, 16), -128, dtype=np.int8))
    w = dram.alloc_array("w", MemType.WGT, np.full((1, 16, 16), -128, dtype=np.int8))
    y = dram.alloc("y", MemType.OUT, 1)
    program = Program([
        load(MemType.UOP, 0, 0),
        load(MemType.INP, 0, x.base),
        load(MemType.WGT, 0, w.base, deps="push_next"),
        gemm(0, 1, iter_out=16383, iter_in=2, deps="pop_prev push_next"),
        store(0, y.base, deps="pop_prev"),
    ], [Uop(0, 0, 0)], CFG)
    sim = Simulator(CFG)
    stats = sim.run(program, dram)
    total = 16383 * 2 * 16 * 128 * 128
    assert total > 2 ** 31
    assert sim.acc[0, 0].tolist() == [_wrap32(total)] * 16
    assert dram.read("y")[0, 0, 0] == ((_wrap32(total) + 128) % 256) - 128
    assert stats.gemm_steps == 32766


def test_races_without_tokens_are_errors():
    """A STORE that does not wait for the ALU writing what it stores, and a LOAD that overwrites
    an input a GEMM still reads: the schedule runs them out of program order."""
    dram = Dram(CFG)
    a = dram.alloc_array("a", MemType.ACC, np.ones((1, 1, 16), dtype=np.int32))
    y = dram.alloc("y", MemType.OUT, 1)
    racy_store = Program([
        load(MemType.UOP, 0, 0),
        load(MemType.ACC, 0, a.base),
        alu(AluOp.ADD, 0, 1, imm=5),
        store(0, y.base),
    ], [Uop(0, 0)], CFG)
    with pytest.raises(RaceError, match=r"race on the acc buffer: instruction 1 \(LOAD ACC .*\) "
                                        r"on the compute module writes element 0, which "
                                        r"instruction 3 \(STORE OUT .*\) on the store module "
                                        r"reads, and no dependence token orders them"):
        Simulator(CFG).run(racy_store, dram)
    # the same stream runs when told not to look, and the store then saw the old value
    Simulator(CFG).run(racy_store, dram, check_races=False)
    assert dram.read("y")[0, 0, 0] == 0
    x = dram.alloc("x", MemType.INP, 2)
    racy_load = Program([
        load(MemType.UOP, 0, 0),
        load(MemType.INP, 0, x.base, deps="push_next"),
        gemm(0, 1, iter_out=100, deps="pop_prev"),
        load(MemType.INP, 0, x.base + 1),                 # should pop_next the GEMM's token
    ], [Uop(0, 0, 0)], CFG)
    with pytest.raises(RaceError, match=r"race on the inp buffer: instruction 2 \(GEMM .*\) on "
                                        r"the compute module reads element 0, which instruction "
                                        r"3 \(LOAD INP .*\) on the load module writes"):
        Simulator(CFG).run(racy_load, dram)
    fixed = Program([
        load(MemType.UOP, 0, 0),
        load(MemType.INP, 0, x.base, deps="push_next"),
        gemm(0, 1, iter_out=100, deps="pop_prev push_prev"),
        load(MemType.INP, 0, x.base + 1, deps="pop_next"),
    ], [Uop(0, 0, 0)], CFG)
    stats = Simulator(CFG).run(fixed, dram)
    assert stats.trace[3].start == stats.trace[2].end
    # disjoint halves may overlap in time: loading element 1 while the GEMM reads element 0
    halves = Program([
        load(MemType.UOP, 0, 0),
        load(MemType.INP, 0, x.base, deps="push_next"),
        gemm(0, 1, iter_out=100, deps="pop_prev"),
        load(MemType.INP, 1, x.base + 1),
    ], [Uop(0, 0, 0)], CFG)
    stats = Simulator(CFG).run(halves, dram)
    assert stats.trace[3].start < stats.trace[2].end
