"""What the accelerator tests share: instruction streams of a tiled int8 matrix product with a
requantizing epilogue (shift right, clip to int8), emitted by hand the way a lowering would, and a
quantized multilayer perceptron."""

import numpy as np

import relaybench as rb
from relaybench import op
from relaybench.ir.analysis import free_vars
from relaybench.ir.builder import var
from relaybench.ir.expr import Function
from relaybench.ir.module import IRModule

from relaybench.backends.accel import (AluOp, Dram, MemType, Program, Uop, alu, finish, gemm, load,
                                       store)


def pack_inputs(cfg, x):
    """(M, K) -> INP elements ordered (m block, k block), each (batch, block_in)."""
    m, k = x.shape
    b, bi = cfg.inp_shape
    return x.reshape(m // b, b, k // bi, bi).transpose(0, 2, 1, 3)


def pack_weights(cfg, w):
    """(K, N) -> WGT elements ordered (n block, k block), each (block_out, block_in) = w^T."""
    k, n = w.shape
    bo, bi = cfg.wgt_shape
    return w.reshape(k // bi, bi, n // bo, bo).transpose(2, 0, 3, 1)


def unpack_outputs(cfg, out, m, n):
    b, bo = cfg.acc_shape
    return out.reshape(m // b, n // bo, b, bo).transpose(0, 2, 1, 3).reshape(m, n)


def matmul_program(cfg, x, w, shift=0, double_buffer=True):
    """``clip((x @ w) >> shift, -128, 127)`` as int8, tiled over rows; all weights stay on chip.

    Returns ``(program, dram, read_result)``. With ``double_buffer`` the input and accumulator
    buffers are split in halves and the load of tile t+1 overlaps the compute of tile t (tokens
    guard each half); without it every stage waits for the previous tile to leave."""
    m, k = x.shape
    n = w.shape[1]
    b, bi = cfg.inp_shape
    bo = cfg.block_out
    mb, kb, nb = m // b, k // bi, n // bo
    assert kb * nb <= cfg.wgt_depth, "the helper keeps every weight tile on chip"
    dram = Dram(cfg)
    xr = dram.alloc_array("x", MemType.INP, pack_inputs(cfg, x))
    wr = dram.alloc_array("w", MemType.WGT, pack_weights(cfg, w))
    yr = dram.alloc("y", MemType.OUT, mb * nb)
    halves = 2 if double_buffer else 1
    inp_half, acc_half = cfg.inp_depth // halves, cfg.acc_depth // halves
    rows = min(inp_half // kb, acc_half // nb)            # row blocks per tile
    uops, gemm_uops, alu_uops = [], [], []
    for h in range(halves):
        bgn = len(uops)
        uops += [Uop(h * acc_half + j, h * inp_half + i, j * kb + i)
                 for j in range(nb) for i in range(kb)]
        gemm_uops.append((bgn, len(uops)))
        alu_uops.append((len(uops), len(uops) + 1))
        uops.append(Uop(h * acc_half, 0))
    insns = [load(MemType.UOP, 0, 0, 1, len(uops)),
             load(MemType.WGT, 0, wr.base, 1, kb * nb)]
    lag = halves                                          # tiles in flight per stage
    for t, r0 in enumerate(range(0, mb, rows)):
        r = min(rows, mb - r0)
        h = t % halves
        insns.append(load(MemType.INP, h * inp_half, xr.base + r0 * kb, 1, r * kb,
                          deps="push_next" + (" pop_next" if t >= lag else "")))
        g0, g1 = gemm_uops[h]
        a0, a1 = alu_uops[h]
        wait_store = " pop_next" if t >= lag else ""
        steps = dict(iter_out=r * nb, dst_factor_out=1)
        insns.append(gemm(a0, a1, reset=True, deps="pop_prev" + wait_store, **steps))
        insns.append(gemm(g0, g1, iter_out=r, dst_factor_out=nb, src_factor_out=kb))
        if shift:
            insns.append(alu(AluOp.SHR, a0, a1, imm=shift, **steps))
        insns.append(alu(AluOp.MAX, a0, a1, imm=-128, **steps))
        insns.append(alu(AluOp.MIN, a0, a1, imm=127, deps="push_prev push_next", **steps))
        insns.append(store(h * acc_half, yr.base + r0 * nb, r, nb, nb,
                           deps="pop_prev push_prev"))
    insns.append(finish())
    program = Program(insns, uops, cfg)
    return program, dram, lambda: unpack_outputs(cfg, dram.read("y"), m, n)


def matmul_reference(x, w, shift=0):
    acc = x.astype(np.int64) @ w.astype(np.int64)
    return np.clip(acc.astype(np.int32) >> shift, -128, 127).astype(np.int8)


def quantized_mlp(batch=1, sizes=(64, 32, 48, 10), seed=0):
    """A multilayer perceptron of dense + bias + relu layers, every layer quantized (the last
    one's int32 result dequantized to float)."""
    rng = np.random.default_rng(seed)
    x = var("x", shape=(batch, sizes[0]))
    h, params = x, {}
    for i, (k, m) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = var(f"w{i}", shape=(m, k))
        params[f"w{i}"] = rng.normal(0, 0.2, (m, k)).astype("float32")
        h = op.nn.dense(h, w)
        if i < len(sizes) - 2:
            b = var(f"b{i}", shape=(m,))
            params[f"b{i}"] = rng.normal(0, 0.1, (m,)).astype("float32")
            h = op.nn.relu(op.nn.bias_add(h, b))
    mod = IRModule.from_expr(Function(free_vars(h), h))
    data = [{"x": rng.normal(0, 1, (batch, sizes[0])).astype("float32")} for _ in range(4)]
    with rb.quantize.qconfig(skip_dense_layer=False, skip_conv_layers=None):
        return rb.quantize.quantize(mod, params, data), data[0]["x"]
