"""AccelConfig: VTA's defaults, derived depths and widths, validation, the multi-batch helper."""

import dataclasses

import pytest

from relaybench.backends.accel import AccelConfig, AccelError, layout
from relaybench.backends.accel.isa import Opcode


def test_vta_defaults():
    cfg = AccelConfig()
    assert (cfg.inp_dtype, cfg.wgt_dtype, cfg.acc_dtype, cfg.out_dtype) == (
        "int8", "int8", "int32", "int8")
    assert (cfg.batch, cfg.block_in, cfg.block_out) == (1, 16, 16)
    assert (cfg.uop_buffer_bytes, cfg.inp_buffer_bytes, cfg.wgt_buffer_bytes,
            cfg.acc_buffer_bytes) == (32768, 32768, 262144, 131072)
    assert cfg.clock_mhz == 100.0
    # depths: 32 KiB / 16 B, 256 KiB / 256 B, 128 KiB / 64 B, 32 KiB / 4 B
    assert (cfg.inp_depth, cfg.wgt_depth, cfg.acc_depth, cfg.out_depth, cfg.uop_depth) == (
        2048, 1024, 2048, 2048, 8192)
    assert (cfg.inp_index_bits, cfg.wgt_index_bits, cfg.acc_index_bits,
            cfg.uop_index_bits) == (11, 10, 11, 13)
    assert cfg.macs_per_cycle == 256
    assert cfg.peak_ops_per_second == 2 * 256 * 100e6
    assert "256 MACs/cycle" in cfg.describe()


def test_instruction_layouts_fit_128_bits():
    cfg = AccelConfig()
    widths = {op: sum(bits for _, bits in layout(op, cfg)) for op in Opcode}
    # VTA's: 7 header bits, then mem 3+16+32+4*16+... ; GEMM 1+13+14+14+14+2*11+2*11+2*10
    assert widths[Opcode.GEMM] == 7 + 1 + 13 + 14 + 14 + 14 + 22 + 22 + 20
    assert widths[Opcode.ALU] == 7 + 1 + 13 + 14 + 14 + 14 + 22 + 22 + 3 + 1 + 16
    assert widths[Opcode.LOAD] == 7 + 3 + 16 + 32 + 16 * 3 + 4 * 4 + 2
    assert max(widths.values()) <= 128


@pytest.mark.parametrize("batch", [2, 4])
def test_multi_batch_keeps_mac_count(batch):
    cfg = AccelConfig.multi_batch(batch)
    assert cfg.batch == batch
    assert cfg.batch * cfg.block_in * cfg.block_out == 256
    assert cfg.inp_buffer_bytes == 32768 and cfg.acc_depth == 131072 // (batch * 16 * 4)


@pytest.mark.parametrize("change, message", [
    (dict(block_in=0), "block_in: expected a positive integer"),
    (dict(inp_dtype="float32"), "inp_dtype: 'float32' is not one of"),
    (dict(acc_buffer_bytes=1000), "acc_buffer_bytes: 1000 is not a multiple of the acc element"),
    (dict(clock_mhz=0), "clock_mhz"),
    (dict(acc_dtype="int8", out_dtype="int16"), "narrower than out_dtype"),
    (dict(acc_buffer_bytes=64 * 1024 * 1024), "exceed the 16-bit SRAM address"),
    (dict(wgt_buffer_bytes=4 * 1024 * 1024), "a micro-op needs"),
])
def test_invalid_configs_say_which_field(change, message):
    with pytest.raises(AccelError, match=message):
        dataclasses.replace(AccelConfig(), **change)


def test_multi_batch_splits():
    assert (lambda c: (c.batch, c.block_in, c.block_out))(AccelConfig.multi_batch(4, "square")) \
        == (4, 8, 8)
    narrow = AccelConfig.multi_batch(2, "block_out", wgt_buffer_bytes=128 * 1024)
    assert (narrow.block_in, narrow.block_out, narrow.wgt_depth) == (16, 8, 1024)
    with pytest.raises(AccelError, match=r"multi_batch\(3, split='block_in'\): 256 MACs per "
                                         r"cycle do not divide by batch=3"):
        AccelConfig.multi_batch(3)
    with pytest.raises(AccelError, match=r"128 MACs per row is not a square"):
        AccelConfig.multi_batch(2, "square")
    # splitting block_out at batch 2 makes the weight buffer 2048 deep: 11+11+11 bits
    with pytest.raises(AccelError, match=r"a micro-op needs 33 bits"):
        AccelConfig.multi_batch(2, "block_out")
