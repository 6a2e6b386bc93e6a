"""The x86 schedule of Winograd convolution (``nn.contrib_conv2d_winograd_without_weight_transform``,
whose compute :func:`relaybench.op.winograd.winograd_conv2d_compute` makes the stages below).

The data comes in ``NCHW{x}c`` and the result goes out in ``NCHW{y}c`` (what AlterOpLayout gives
the convolution's neighbours, so no layout transform appears around it); the transformed weight
is ``HWOI{y}o``: for each tile position and input channel, one vector of ``y`` output channels.

``winograd_pad``
    the input padded to whole tiles, computed first, in parallel (as the direct rule's ``pad``).
``winograd_data_pack``
    ``B^T d B`` of every input tile: parallel over (tile, channel block), the ``alpha x alpha``
    tile positions unrolled (their ``select`` chains fold to straight-line sums, the zero
    coefficients left out, the shared partial sums computed once) and the channel lanes
    vectorized.
``winograd_bgemm``
    one matrix product per tile position, ``M[e, u] = V[e, u] U[e, u]`` summed over the input
    channels: a register tile of ``tile_p`` tiles x ``tile_k`` output-channel vectors
    (``compute_at`` the tile, the input-channel loops outside it, the tile unrolled, the output
    lanes vectorized: each weight vector feeds ``tile_p`` FMAs with a broadcast input each),
    parallel over (tile position, channel-block group, tile group); the tile groups run inside
    the channel-block groups so a block of weights is reused from cache by every tile.
``winograd_conv2d``
    ``A^T M A`` with the fused epilogue (bias, residual, relu...) applied as each output tile is
    stored: parallel over (image, channel block, tile row), the ``m x m`` outputs of a tile
    unrolled, the channel lanes vectorized.

The register tile (:func:`gemm_tile`) is the hand-picked default; the matrix products' shapes
are those of a dense layer, so the same tile rules apply.
"""

from __future__ import annotations

from ... import te
from ...te.tensor import ComputeOp

__all__ = ["OPS", "schedule", "gemm_tile", "MAX_TILE_REGISTERS"]

OPS = ("nn.contrib_conv2d_winograd_without_weight_transform",)
"""The operators this module schedules (as a group's anchor)."""

MAX_TILE_REGISTERS = 24
"""Accumulator vectors of the matrix products' register tile (of 32, the rest for the weight
vectors and the broadcast inputs)."""


def gemm_tile(tiles: int, channel_blocks: int) -> tuple:
    """``(tile_p, tile_k)``: input tiles x output-channel vectors per register tile. Two channel
    vectors when the blocks pair up (each broadcast input feeds two FMAs), and the largest
    divisor of the tile count that fits the registers.

    >>> gemm_tile(196, 4), gemm_tile(16, 32), gemm_tile(49, 3)
    ((7, 2), (8, 2), (7, 3))
    """
    tile_k = next((k for k in (2, 3, 1) if channel_blocks % k == 0), 1)
    limit = max(1, MAX_TILE_REGISTERS // tile_k)
    tile_p = max(d for d in range(1, min(tiles, limit) + 1) if tiles % d == 0)
    return tile_p, tile_k


def _named(s, name):
    return next((op for op in s.ops if isinstance(op, ComputeOp) and op.name == name), None)


def schedule(group, compute_at: bool = True):
    """The schedule of a group anchored by a Winograd convolution, and the rule's name."""
    from .x86 import PARALLEL_MIN_WORK, _work, lane_block, schedule_injective
    s = te.create_schedule(group.outputs)
    output_ops = {t.op for t in group.outputs}
    anchor_t = group.anchor_tensors[0]
    pad, pack, gemm = (_named(s, n) for n in ("winograd_pad", "winograd_data_pack", "winograd_bgemm"))
    keep = {op for op in (pad, pack) if op is not None}
    for op in s.ops:
        if isinstance(op, ComputeOp) and op not in output_ops and not op.reduce_axis \
                and op not in keep and op is not anchor_t.op:
            s[op].compute_inline()
    outputs = list(group.outputs)
    fits = len(outputs) == 1 and tuple(outputs[0].shape) == tuple(anchor_t.shape)
    if fits and outputs[0].op is not anchor_t.op:
        s[anchor_t.op].compute_inline()
    rule = "conv2d_winograd" if compute_at else "conv2d_winograd_at_root"

    if pad is not None:
        schedule_injective(s, pad)

    if pack is not None:
        stage = s[pack]
        eps, nu, p, cb, cl = pack.axis
        stage.reorder(p, cb, eps, nu, cl)
        stage.unroll(eps)
        stage.unroll(nu)
        if lane_block(cl.extent, pack.output.dtype):
            stage.vectorize(cl)
        fused = stage.fuse(p, cb)
        if _work(pack) * 8 >= PARALLEL_MIN_WORK:
            stage.parallel(fused)

    if gemm is not None:
        gemm_t = gemm.output
        eps, nu, k, p, col = gemm.axis
        tile_p, tile_k = gemm_tile(p.extent, k.extent)
        vector = lane_block(col.extent, gemm_t.dtype)
        if compute_at:
            local = s.cache_write(gemm_t).op
            out_stage = s[gemm_t]
            eps, nu, k, p, col = out_stage.op.axis
        else:
            local, out_stage = None, s[gemm]
        ko, ki = out_stage.split(k, tile_k)
        po, pi = out_stage.split(p, tile_p)
        if local is None:
            out_stage.reorder(eps, nu, ko, po, *gemm.reduce_axis, ki, pi, col)
        else:
            out_stage.reorder(eps, nu, ko, po, ki, pi, col)
        out_stage.unroll(ki)
        out_stage.unroll(pi)
        if vector:
            out_stage.vectorize(col)
        fused = out_stage.fuse(out_stage.fuse(out_stage.fuse(eps, nu), ko), po)
        if _work(gemm) >= PARALLEL_MIN_WORK:
            out_stage.parallel(fused)
        if local is not None:
            lstage = s[local]
            lstage.compute_at(out_stage, fused)
            le, lu, lk, lp, lcol = local.axis
            lstage.reorder(le, lu, *local.reduce_axis, lk, lp, lcol)
            lstage.unroll(lk)
            lstage.unroll(lp)
            if vector:
                lstage.vectorize(lcol)

    m = group.anchor.attrs.tile_size
    if fits:
        _schedule_output(s, outputs[0].op, m, lane_block, PARALLEL_MIN_WORK, _work)
    else:
        _schedule_output(s, anchor_t.op, m, lane_block, PARALLEL_MIN_WORK, _work)
        for out in outputs:
            if out.op is not anchor_t.op and not s[out.op].inlined:
                schedule_injective(s, out.op)
    return s, rule


def _schedule_output(s, op, m, lane_block, min_work, work):
    """The output transform (and its epilogue): the ``m x m`` outputs of a tile unrolled, the
    channel lanes vectorized, parallel over (image, channel block, tile row)."""
    stage = s[op]
    axes = list(op.axis)
    lanes = axes[4] if len(axes) == 5 else None
    n, ob, y, x = axes[:4]
    yo, yi = stage.split(y, m)
    xo, xi = stage.split(x, m)
    tail = [lanes] if lanes is not None else []
    stage.reorder(n, ob, yo, xo, yi, xi, *tail)
    stage.unroll(yi)
    stage.unroll(xi)
    if lanes is not None and lane_block(lanes.extent, op.output.dtype):
        stage.vectorize(lanes)
    fused = stage.fuse(stage.fuse(n, ob), yo)
    if work(op) * 8 >= min_work:
        stage.parallel(fused)
