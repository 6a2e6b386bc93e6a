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
are those of a dense layer, so the same tile rules apply. It is also the search space of the
``conv2d_winograd`` template (:func:`winograd_space`): ``rb.autotune.tune`` measures other
tiles, and a tuning log's best one is used as the other templates' are.
"""

from __future__ import annotations

from ... import te
from ...te.tensor import ComputeOp

__all__ = ["OPS", "schedule", "gemm_tile", "tile_budget", "winograd_space",
           "MAX_TILE_REGISTERS", "NARROW_TILE_VECTORS"]

OPS = ("nn.contrib_conv2d_winograd_without_weight_transform",)
"""The operators this module schedules (as a group's anchor)."""

MAX_TILE_REGISTERS = 24
"""Accumulator vectors of the matrix products' register tile (of 32, the rest for the weight
vectors and the broadcast inputs)."""


NARROW_TILE_VECTORS = 4
"""The register tile's accumulators on a host without AVX-512: 16 ``ymm`` registers, a vector
of 16 floats taking two, so four vectors (8 registers) leave room for the weights and the
broadcast inputs. Measured on ResNet-18's Winograd layers (AMD EPYC, AVX2): the 24-vector tile
spilled and ran 1.1-2.3x slower on the 56x56, 28x28 and 14x14 layers."""


def tile_budget() -> int:
    """Accumulator vectors of a register tile on this host: :data:`MAX_TILE_REGISTERS` with
    AVX-512, :data:`NARROW_TILE_VECTORS` without."""
    from .x86 import narrow_host
    return NARROW_TILE_VECTORS if narrow_host() else MAX_TILE_REGISTERS


def gemm_tile(tiles: int, channel_blocks: int, budget: int | None = None) -> tuple:
    """``(tile_p, tile_k)``: input tiles x output-channel vectors per register tile. Two channel
    vectors when the blocks pair up (each broadcast input feeds two FMAs), and the largest
    divisor of the tile count that fits ``budget`` accumulators (default :func:`tile_budget`).

    >>> gemm_tile(196, 4, 24), gemm_tile(16, 32, 24), gemm_tile(49, 3, 24)
    ((7, 2), (8, 2), (7, 3))
    >>> gemm_tile(196, 4, 4), gemm_tile(49, 8, 4)
    ((2, 2), (1, 2))
    """
    budget = tile_budget() if budget is None else budget
    tile_k = next((k for k in (2, 3, 1) if channel_blocks % k == 0), 1)
    limit = max(1, budget // tile_k)
    tile_p = max(d for d in range(1, min(tiles, limit) + 1) if tiles % d == 0)
    return tile_p, tile_k


def winograd_space(workload):
    """The knobs of the ``conv2d_winograd`` template: the matrix products' register tile,
    ``tile_p`` input tiles (a divisor of the tile count) x ``tile_k`` output-channel vectors (a
    divisor of the channel blocks), at most :data:`MAX_TILE_REGISTERS` accumulators; the default
    is :func:`gemm_tile`'s.

    >>> from relaybench.autotune.space import Workload
    >>> w = Workload("conv2d_winograd", ((1, 4, 56, 56, 16), (6, 6, 4, 64, 16)),
    ...              ("float32", "float32"), (1, 4, 56, 56, 16), "float32", (("tile_size", 4),))
    >>> space = winograd_space(w)
    >>> space.default() == dict(zip(("tile_p", "tile_k"), gemm_tile(196, 4))), len(space)
    (True, 15)
    """
    from ...autotune.space import ConfigSpace
    m = int(workload.attr_dict["tile_size"])
    n, _, oh, ow = workload.out_shape[:4]
    tiles = n * -(-oh // m) * -(-ow // m)
    o_blocks = workload.arg_shapes[1][2]
    tile_p, tile_k = gemm_tile(tiles, o_blocks)
    space = ConfigSpace("conv2d_winograd")
    space.define_knob("tile_p", [d for d in range(1, min(tiles, MAX_TILE_REGISTERS) + 1)
                                 if tiles % d == 0], default=tile_p,
                      doc="input tiles per register tile (each a row of the matrix product)")
    space.define_knob("tile_k", [k for k in (1, 2, 3, 4) if o_blocks % k == 0], default=tile_k,
                      doc="output-channel vectors per register tile")
    space.constraint = lambda c: c["tile_p"] * c["tile_k"] <= MAX_TILE_REGISTERS
    return space


def _named(s, name):
    return next((op for op in s.ops if isinstance(op, ComputeOp) and op.name == name), None)


def schedule(group, compute_at: bool = True):
    """The schedule of a group anchored by a Winograd convolution, and the rule's name; the
    register tile is the active tuning context's config, else the default
    (:func:`winograd_space`)."""
    from .x86 import PARALLEL_MIN_WORK, _work, lane_block, schedule_injective, tuning_config
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
        config = tuning_config(group.anchor)[1]
        if config is not None and p.extent % config["tile_p"] == 0 \
                and k.extent % config["tile_k"] == 0:
            tile_p, tile_k = config["tile_p"], config["tile_k"]
        else:
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
