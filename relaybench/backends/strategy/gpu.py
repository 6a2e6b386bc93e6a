"""The GPU strategy: schedules for an OpenCL device, loops bound to work groups and work items.

Every stage that is computed (not inlined) is spread over the device: a loop bound to
``blockIdx.x`` runs one iteration per work group, one bound to ``threadIdx.x`` one per work item
of the group (:meth:`~relaybench.te.Stage.bind`). The rules, by the group's anchor:

``injective``
    elementwise, broadcast and injective stages: every output axis fused into one loop, split
    into blocks of :data:`THREADS` work items, one element per work item; neighbouring work
    items write neighbouring elements (coalesced). Where ``RB_GPU_VECTOR`` (4) divides the
    innermost axis of a float32 or float64 stage, each work item takes that many neighbouring
    elements, which the code generator writes as one vector store (``float4``), with a vector
    load of each input read along the same axis (:func:`schedule_injective`).
``dense_shared``
    ``nn.dense`` (2-D, one reduction, :data:`DENSE_SHARED_MIN_ROWS` rows or more; batch 1 takes
    ``reduce_tree``): a work group computes :data:`TILE` output features of one
    row, one per work item; the reduction goes in steps of :data:`TILE`, and at each step the
    group copies the row's slice of the input and the ``TILE x TILE`` tile of the weights into
    ``shared`` memory together (each work item a column, so the reads of global memory are
    coalesced), waits at a barrier, then accumulates from the tiles. The fused epilogue (bias,
    relu) is a stage of its own after it.
``conv2d_tiled``
    ``nn.conv2d`` in ``NCHW`` / ``OIHW``, float32, one group (``RB_GPU_CONV``: ``tiled``, or
    ``auto``: on a GPU where :func:`_gpu_tiles_pay`, on a CPU device for
    :data:`CONV_AUTO_MIN_CHANNELS` output channels and :data:`CONV_AUTO_MIN_GROUPS` work
    groups or more). A work group computes a tile of 64 (or 32: :data:`CONV_MIN_GROUPS`)
    output channels x up to 8 x 8 output pixels of one image: work item ``(x, y, z)`` the row
    ``y`` x the 4 channels ``4z..4z+3`` x 4 columns from ``4x`` (2, or the tile's width where
    neither divides it), up to 16 accumulators in its registers (a ``local`` stage computed at
    its thread loop). The reduction goes over the input channels in chunks (8, or fewer where
    the tiles would pass :data:`CONV_LOCAL_BYTES`); per chunk the group copies the chunk's input patch (the padding
    written as zeros) and the weights of its channels into ``shared`` memory together, work
    item ``x + X * (y + Y * z)`` copying the elements at that position plus multiples of the
    group's size (neighbouring work items read neighbouring addresses), then a barrier; each
    work item accumulates from the tiles, then a barrier. The fused epilogue (bias, residual
    add, relu) is applied as the accumulators are stored: one launch, the convolution never
    in device memory. Tile sizes divide the output where a divisor near 8 exists (56 -> 8,
    28 and 14 -> 7); other tiles are partial and guarded. Each input value of the patch is
    read from device memory once per chunk instead of once per output channel, each weight
    once per tile of pixels.

    Direct tiles rather than implicit GEMM: the tiles are regions of the input that lowering
    infers from affine indices (the chunk, rows ``oh * stride + ry``), so the shared
    copies are plain ``cache_read`` stages; im2col's column index ``(c, ry, rx)`` would need
    ``// (kh * kw)`` and ``%`` in the reads, which no region can be inferred from, and a
    3 x 3 window would have to be copied as 9 separate columns. The GEMM view gains most where
    the window is 1 x 1, where the two are the same loops here.
``conv2d_blocked``
    (``RB_GPU_CONV=blocked``) the same work groups, register tiles and loop order as
    ``conv2d_tiled`` without the ``shared`` copies and their barriers: each work item reads its
    inputs and weights from device memory, leaving the reuse between work items to the
    device's caches. Each input value read serves ``oc_block`` outputs, each weight
    ``ow_block``, where ``direct`` reads two values per multiply-add.
``conv2d_winograd``
    (``RB_GPU_CONV=winograd``, and ``auto`` on a GPU where :func:`_gpu_winograd_pays`) a
    float32 3 x 3 convolution of stride 1 in Winograd's form, F(4x4, 3x3) (F(2x2, 3x3) below
    8 x 8 outputs): the OpenCL target's ``FTVMAlterOpLayout`` (:func:`gpu_conv2d_layouts`)
    replaces the call by the weight's transform (folded at compile time) and
    ``nn.contrib_conv2d_winograd_without_weight_transform``, data and output staying ``NCHW``,
    and its compute puts the tiles innermost (:func:`compute`). Three launches: the input
    transform, one work item per (channel, tile), its ``alpha x alpha`` values unrolled (the
    select chains over the tile axes fold in the code generator); the ``alpha^2`` matrix
    products, work groups of 64 output channels x up to 64 tiles, each work item a 4 x 4
    register tile, the reduction in chunks of 16 input channels copied to local memory, the
    tile axis padded to whole blocks (no guard in the inner loop), and the input channels cut
    into slices where the products are thin (:data:`WINOGRAD_SPLIT_ITEMS`); and the output
    transform, one work item per ``m x m`` output tile, adding the slices and applying the
    fused epilogue as it stores.
``reduce_tree``
    a reduction computed at the root (a group's output, softmax's maximum and sum read by
    its elementwise output, or the anchor of a group with few outputs that an epilogue reads,
    as ``nn.dense`` + bias + relu at batch 1, the epilogue then applied by the tree's first
    work item in the same launch: :data:`TREE_FIRST_MAX_OUTPUTS`) over
    :data:`TREE_MIN` elements or more (one axis, or several taken as one in row-major order,
    as a mean over the pixels of ``NCHW``): one work group
    per output element; work item ``t`` of ``T`` (a power of two, up to :data:`THREADS`)
    reduces the elements ``t, t + T, ...`` into ``shared`` memory, then the group halves the
    partial results ``log2(T)`` times, a barrier between steps
    (:meth:`~relaybench.te.Schedule.tree_reduce`), and the first work item stores the result.
``reduce``
    shorter reductions computed at the root: one work item per element.
``direct``
    a convolution, pooling, a reduction, or dense where the tiles do not fit: one work item per
    output element, the reduction in a loop of its own inside it, computed in a register right
    where the fused epilogue (bias, residual, relu...) reads it (``compute_at`` the work item's
    loop). The convolution's padding is inlined: a read of the border is a ``select`` whose
    unchosen side is never loaded.
``direct_splitk``
    (``RB_GPU_CONV=splitk``, and ``auto`` on a GPU where it does not tile) ``direct`` for a
    convolution with few outputs and a long reduction (:data:`SPLITK_MAX_OUTPUTS`,
    :data:`SPLITK_MIN_REDUCTION`: the last stages of a network at batch 1, where one work item
    per output leaves most of the device idle): the input channels are cut in 2 to 16 slices
    (:meth:`~relaybench.te.Schedule.rfactor`), a first launch computes each slice's partial
    sums, one work item per partial (the slices outermost, so neighbouring work items still
    read neighbouring pixels), and the second adds the slices and applies the epilogue.
``*_at_root``
    when the epilogue reads the anchor where no region can be inferred (lowering's
    :class:`~relaybench.te.ComputeAtError`), the anchor is computed first into a whole buffer
    with one work item per element, then the epilogue.

A stage that is not an output and not a reduction is inlined into its readers, except one that
would copy too many expression nodes into them (the x86 strategy's
:func:`~relaybench.backends.strategy.x86._too_big_to_inline`). Every stage computed at the root
(a reduction feeding another stage, softmax's maximum and sum) becomes a kernel launch of its
own in the OpenCL code generator: a launch ends only when every work group has finished, the one
barrier there is between work groups.

Layouts: this target registers no ``FTVMAlterOpLayout``, so AlterOpLayout (run with
``relay.target`` set to the build's target) keeps convolutions in ``NCHW`` / ``OIHW``, the
layout these kernels read; any layout an operator's compute takes still runs here, through the
operator's own compute (a program written in ``NHWC`` stays so).

>>> import relaybench as rb
>>> from relaybench import op
>>> from relaybench.backends.lowering import lower_primitive
>>> x = rb.var("x", shape=(4, 100))
>>> fused = rb.passes.optimize(rb.IRModule.from_expr(rb.Function([x], op.nn.relu(x))), 2)
>>> print(lower_primitive(fused["main"].body.op, "opencl").prim_func)
def fused_nn_relu(p0: Buffer((4, 100), "float32"), relu: Buffer((4, 100), "float32")):
    for i0_i1_fused_outer_inner in threadIdx.x(100):
        for i0_i1_fused_inner in vectorized(4):
            relu[(i0_i1_fused_outer_inner * 4 + i0_i1_fused_inner) // 100, (i0_i1_fused_outer_inner * 4 + i0_i1_fused_inner) % 100] = max(p0[(i0_i1_fused_outer_inner * 4 + i0_i1_fused_inner) // 100, (i0_i1_fused_outer_inner * 4 + i0_i1_fused_inner) % 100], 0.0)
"""

from __future__ import annotations

import functools

from ... import config, te
from ...errors import CompileError
from ...ir.expr import Op
from ...ir.types import TensorType
from ...op.registry import OpPattern, get_op_attr, register_alter_op_layout
from ...op.winograd import winograd_conv2d_compute
from ...te.tensor import ComputeOp
from ..opencl.codegen import VECTOR_DTYPES
from .x86 import _too_big_to_inline

__all__ = ["compute", "schedule", "conv_mode", "THREADS", "TILE"]

THREADS = 256
"""Work items per work group for one-element-per-item stages."""

TILE = 32
"""Output features per work group, and reduction step, of the ``dense_shared`` rule."""

TREE_MIN = 64
"""A reduction computed at the root over at least this many elements is a tree in
shared memory (``reduce_tree``)."""


WINOGRAD_OP = "nn.contrib_conv2d_winograd_without_weight_transform"


def compute(call, target):
    """Every operator's own compute, except Winograd convolution in ``NCHW``: its compute with
    the tiles innermost (``tiles_inner``, see ``conv2d_winograd`` in the module text)."""
    if call.op.name == WINOGRAD_OP and _plain_winograd(call.attrs):
        n, oc, oh, ow = (int(d) for d in call.checked_type.shape)
        ic = int(call.args[0].checked_type.shape[1])
        m = int(call.attrs.tile_size)
        tiles = n * -(-oh // m) * -(-ow // m)
        return functools.partial(winograd_conv2d_compute, tiles_inner=True,
                                 pad_tiles=_winograd_tile_threads(tiles) * WINOGRAD_REGISTER_TILE,
                                 split_k=_winograd_split_k(ic, oc, m, tiles))
    return None


def _plain_winograd(attrs) -> bool:
    return (attrs.data_layout == "NCHW" and attrs.kernel_layout == "HWOI"
            and (attrs.out_layout or "NCHW") == "NCHW")


def schedule(group, compute_at: bool = True):
    """The schedule of one fused group and the name of its rule (see the module).

    With ``compute_at=False`` (lowering's retry after a
    :class:`~relaybench.te.ComputeAtError`) no stage is computed inside another's loops.
    """
    s = te.create_schedule(group.outputs)
    if (compute_at and group.anchor is not None and group.anchor.op.name == WINOGRAD_OP
            and _plain_winograd(group.anchor.attrs)):
        _schedule_winograd(s, group)
        return s, "conv2d_winograd"
    output_ops = {t.op for t in group.outputs}
    keep = _too_big_to_inline(s, output_ops)
    for op in s.ops:
        if (isinstance(op, ComputeOp) and op not in output_ops and not op.reduce_axis
                and op not in keep):
            s[op].compute_inline()

    anchor = group.anchor
    anchor_op = group.anchor_tensors[0].op if group.anchor_tensors else None
    # a reduction operator (sum, mean, max...) may be a tree over several axes; a convolution's
    # or a pooling's window stays one work item per output (see schedule_reduce)
    reduce_anchor = anchor is not None and isinstance(anchor.op, Op) and \
        get_op_attr(anchor.op.name, "TOpPattern") == OpPattern.COMM_REDUCE
    is_reduction = isinstance(anchor_op, ComputeOp) and bool(anchor_op.reduce_axis)
    rule, done = "injective", set()
    tiling = _conv_tiling(group, anchor_op) if is_reduction and compute_at else None
    if tiling is not None:
        rule = "conv2d_tiled" if tiling.shared else "conv2d_blocked"
        done = _schedule_conv_tiled(s, group, anchor_op, tiling)
    elif is_reduction and anchor.op.name == "nn.dense" and _dense_fits(anchor_op):
        rule, done = "dense_shared", _schedule_dense_shared(s, anchor_op)
    elif is_reduction:
        rule = "direct"
        outputs = list(group.outputs)
        epilogue = outputs[0].op if len(outputs) == 1 else None
        factor = _split_k_factor(group, anchor_op) if compute_at else 1
        if factor > 1:   # the partials become a stage of their own (the loop below)
            s.rfactor(anchor_op.output, factor)
            rule = "direct_splitk"
        if _tree_first(anchor_op):
            if (compute_at and factor == 1 and epilogue is not None
                    and epilogue is not anchor_op and not epilogue.reduce_axis
                    and not s[epilogue].inlined
                    and tuple(epilogue.output.shape) == tuple(anchor_op.output.shape)):
                rule, done = "reduce_tree", _schedule_tree_epilogue(s, anchor_op, epilogue)
            # else the reduction at the root as a tree, then the epilogue (the loop below)
        elif (compute_at and epilogue is not None and epilogue is not anchor_op
                and not epilogue.reduce_axis and not s[epilogue].inlined
                and not s[anchor_op].inlined):
            thread = schedule_injective(s, epilogue)
            if thread is not None:
                s[anchor_op].compute_at(s[epilogue], thread)
                done = {epilogue, anchor_op}
        elif not compute_at:
            rule = "direct_at_root"
    for op in s.ops:
        if not isinstance(op, ComputeOp) or op in done or s[op].inlined:
            continue
        if op.reduce_axis:
            made = schedule_reduce(s, op, several=reduce_anchor)
            if rule in ("injective", "reduce", "direct") and made == "reduce_tree":
                rule = "reduce_tree"
            elif rule == "injective":   # softmax: its reductions feed an elementwise output
                rule = made
        else:
            schedule_injective(s, op, vector=True)
    return s, rule


def _bind_elements(stage, axes, lanes: int = 1):
    """Fuse ``axes`` into one loop and bind it to work groups of up to :data:`THREADS` work
    items, each ``lanes`` neighbouring elements in a ``vectorized`` loop (``lanes`` divides the
    extent); gives the loop bound to ``threadIdx.x`` (None when there is no axis)."""
    if not axes:
        return None
    fused = axes[0]
    for axis in axes[1:]:
        fused = stage.fuse(fused, axis)
    if lanes > 1:
        fused, lane = stage.split(fused, lanes)
        stage.vectorize(lane)
    threads = min(THREADS, fused.extent)
    block, thread = stage.split(fused, threads)
    stage.bind(block, "blockIdx.x")
    stage.bind(thread, "threadIdx.x")
    return thread


VECTOR_LANE_CHOICES = (1, 2, 4, 8, 16)
"""The values of ``RB_GPU_VECTOR``."""


def vector_lanes() -> int:
    """``RB_GPU_VECTOR``, checked."""
    lanes = config.get("RB_GPU_VECTOR")
    if lanes not in VECTOR_LANE_CHOICES:
        raise CompileError(f"RB_GPU_VECTOR={lanes}: expected one of "
                           f"{', '.join(map(str, VECTOR_LANE_CHOICES))}")
    return lanes


def schedule_injective(s, op, vector: bool = False):
    """One element per work item, the elements in row-major order across the work items; with
    ``vector``, :func:`vector_lanes` neighbouring elements per work item where they divide the
    innermost axis of a float32 or float64 output (the code generator writes them as one vector
    store, and each input it reads along the same axis as one vector load)."""
    axes = list(op.axis)
    lanes = vector_lanes() if vector else 1
    if not (lanes > 1 and axes and op.output.dtype in VECTOR_DTYPES
            and int(axes[-1].extent) % lanes == 0):
        lanes = 1
    return _bind_elements(s[op], axes, lanes)


def schedule_reduce(s, op, several: bool = False) -> str:
    """A long reduction (:data:`TREE_MIN` elements or more, over one axis, or with ``several``
    over several axes taken as one) as a tree in shared memory, one work group per output
    element (``reduce_tree``); any other reduction one output element per work item, its
    reduction a loop inside the work item (``reduce``). Gives the rule's name.

    ``several`` is for the reduction operators (``sum``, ``mean``, ``max``... over axes); a
    convolution's or a pooling's window (input channels x rows x columns) stays a loop in one
    work item per output, the form the GPU measurements chose (see :func:`conv_mode`)."""
    axes = list(op.axis)
    if _reduce_extent(op) < TREE_MIN or not axes or (len(op.reduce_axis) > 1 and not several):
        _bind_elements(s[op], axes)
        return "reduce"
    threads = _tree_threads(op)
    partials = s.tree_reduce(op.output, threads)
    final = s[op.output]
    group = axes[0]
    for axis in axes[1:]:
        group = final.fuse(group, axis)
    final.bind(group, "blockIdx.x")
    for partial in partials:
        stage = s[partial]
        stage.set_scope("shared")
        stage.compute_at(final, group)
        stage.bind(partial.op.axis[-1], "threadIdx.x")
    return "reduce_tree"


def _reduce_extent(op) -> int:
    """How many elements each output of ``op`` reduces (its reduce axes together)."""
    extent = 1
    for k in op.reduce_axis:
        extent *= int(k.extent)
    return extent


def _tree_threads(op) -> int:
    """The work items of ``op``'s tree: a power of two, at most :data:`THREADS`."""
    return min(THREADS, 1 << (_reduce_extent(op).bit_length() - 1))


def _schedule_tree_epilogue(s, op, epilogue) -> set:
    """The tree of ``op`` (see :func:`schedule_reduce`) inside the work groups of its
    elementwise ``epilogue`` (``nn.dense`` + bias + relu at batch 1): one work group per output
    element reduces into ``shared`` memory as a ``reduce_tree``, and its first work item
    applies the epilogue to the sum and stores the result, in one launch. Gives the stages it
    placed."""
    partials = s.tree_reduce(op.output, _tree_threads(op))
    out = s[epilogue]
    group = epilogue.axis[0]
    for axis in epilogue.axis[1:]:
        group = out.fuse(group, axis)
    out.bind(group, "blockIdx.x")
    final = s[op.output]
    final.set_scope("shared")
    final.compute_at(out, group)
    for partial in partials:
        stage = s[partial]
        stage.set_scope("shared")
        stage.compute_at(out, group)
        stage.bind(partial.op.axis[-1], "threadIdx.x")
    return {epilogue, s.op_of(op.output)} | {p.op for p in partials}


TREE_FIRST_MAX_OUTPUTS = 16384
"""A reduction over one axis of :data:`TREE_MIN` elements or more with at most this many output
elements (``nn.dense`` at batch 1: a row of features, each the sum over a long row of the
weights) is a ``reduce_tree`` even when an epilogue (bias, relu) reads it: one work group per
output reads its row of the weights coalesced, and its first work item applies an elementwise
epilogue of the same shape to the sum as it stores it (:func:`_schedule_tree_epilogue`, one
launch; any other epilogue is a launch of its own after the tree, computed at the root). One
work item per output with the reduction in a loop would read the weights
column-wise, a row apart from its neighbour: VGG-16's first dense layer (25088 x 4096) took 3.4
ms that way on an H100, over 20 times what the memory allows."""


def _tree_first(op) -> bool:
    """Whether the anchor ``op`` is reduced as a tree at the root despite an epilogue (see
    :data:`TREE_FIRST_MAX_OUTPUTS`)."""
    if len(op.reduce_axis) != 1 or op.reduce_axis[0].extent < TREE_MIN or not op.axis:
        return False
    outputs = 1
    for axis in op.axis:
        outputs *= int(axis.extent)
    return outputs <= TREE_FIRST_MAX_OUTPUTS


DENSE_SHARED_MIN_ROWS = 8
"""``dense_shared`` takes inputs of at least this many rows; with fewer (batch 1) each weight
is used about once, tiles save nothing, and a tree per output feature (``reduce_tree``: one
work group reading one row of the weights, coalesced) keeps far more work items busy."""


def _dense_fits(op) -> bool:
    """Whether ``dense_shared`` applies: ``out[i, j] = sum_k x[i, k] * w[j, k]`` with at least
    one tile of features and of the reduction, and :data:`DENSE_SHARED_MIN_ROWS` rows."""
    if len(op.axis) != 2 or len(op.reduce_axis) != 1 or len(op.inputs) != 2:
        return False
    return (op.axis[0].extent >= DENSE_SHARED_MIN_ROWS and op.axis[1].extent >= TILE
            and op.reduce_axis[0].extent >= TILE)


def _schedule_dense_shared(s, dense) -> set:
    """Schedules the dense stage and its two shared tiles; gives their operations."""
    stage = s[dense]
    x, w = dense.inputs
    i, j = dense.axis
    (k,) = dense.reduce_axis
    j_outer, j_inner = stage.split(j, TILE)
    k_outer, k_inner = stage.split(k, TILE)
    stage.reorder(i, j_outer, k_outer, j_inner, k_inner)
    stage.bind(i, "blockIdx.y")
    stage.bind(j_outer, "blockIdx.x")
    stage.bind(j_inner, "threadIdx.x")
    done = set()
    for tensor in (x, w):
        cache = s.cache_read(tensor, "shared", [s[dense]])
        cache_stage = s[cache]
        cache_stage.compute_at(s[dense], k_outer)
        # the tile's columns run along the reduction: work item t copies column t of each row
        cache_stage.bind(cache.op.axis[1], "threadIdx.x")
        done.add(cache.op)
    done.add(s.op_of(dense))
    return done


# ---- conv2d_tiled

CONV_MODES = ("direct", "splitk", "tiled", "blocked", "winograd", "auto")
"""The values of ``RB_GPU_CONV``."""

CONV_LOCAL_BYTES = 32 * 1024
"""The most local memory one work group of ``conv2d_tiled`` takes for its two tiles: the
reduction chunk is the largest that fits (OpenCL promises 32 KiB; an H100 gives 48)."""

CONV_TILE_PIXELS = 8
"""The most output rows, and columns, one work group of ``conv2d_tiled`` computes."""

CONV_MIN_GROUPS = 128
"""A tile of 32 output channels instead of 64 where 64 would give fewer work groups than this:
a GPU runs one work group per compute unit or more (an H100 has 132), and a batch-1 network's
later stages have few pixels (ResNet-18's 28 x 28 stage: 16 tiles of 7 x 7)."""

CONV_AUTO_MIN_CHANNELS = 32
CONV_AUTO_MIN_GROUPS = 64
"""``RB_GPU_CONV=auto`` on a CPU device (PoCL) tiles a convolution with at least this many
output channels and work groups; with fewer, most of a tile is idle or most of the device is
(the last stages of a network at batch 1: 14 x 14 and 7 x 7 pixels), and ``direct``, one work
item per output, spreads the work wider. A GPU has a rule of its own (see
:func:`conv_mode`)."""


def conv_mode() -> str:
    """``RB_GPU_CONV``, checked: ``direct``, ``splitk``, ``tiled``, ``blocked`` or ``auto``.
    ``auto`` chooses per layer: on a GPU ``tiled`` where :func:`_gpu_tiles_pay` says and
    ``splitk`` elsewhere; on a CPU device ``tiled`` for :data:`CONV_AUTO_MIN_CHANNELS` and
    :data:`CONV_AUTO_MIN_GROUPS`, ``direct`` elsewhere.

    Measured with ``bench/gpu.py --conv direct,tiled,blocked`` on an H100 (NVIDIA's OpenCL),
    every convolution of ResNet-18, MobileNet V2, VGG-16 and the DQN at batch 1: ``direct`` was
    the fastest on all but the 3-channel stems and a few 1 x 1 layers of MobileNet V2 (by 10 to
    20 microseconds), and 1.5 to 7 times faster than ``tiled`` on the 3 x 3 layers (the device
    caches give one work item per output the reuse that the local copies buy with barriers);
    ``splitk`` then took ResNet-18 from 1.87 to 1.12 ms of kernels (see
    :data:`SPLITK_MIN_REDUCTION`). With each warp's work items on few output channels (the
    channels the slowest axis of the work group), ``tiled`` ran VGG-16's layers of 56 x 56
    pixels and more 1.9 to 2.8 times faster than ``direct`` (0.658 -> 0.232 ms for 64
    channels of 224 x 224: 16 TFLOP/s), and lost where the tiles are fewer or partial (see
    :func:`_gpu_tiles_pay`). On PoCL's CPU device ``tiled`` ran ResNet-18's 3 x 3 layers
    2 to 3 times faster than ``direct``: its work groups are loops on one core, where the tiles
    stay in the core's caches."""
    mode = config.get("RB_GPU_CONV").lower()
    if mode not in CONV_MODES:
        raise CompileError(f"RB_GPU_CONV={mode!r}: expected one of {', '.join(CONV_MODES)}")
    return mode


SPLITK_ITEMS = 1 << 18
"""``direct_splitk`` splits a convolution's reduction in two, four, eight or sixteen slices
while the partial results stay at most this many (an H100 keeps 132 x 2048 work items in
flight)."""

SPLITK_MIN_SLICE = 16
"""The fewest input channels one slice of ``direct_splitk`` reduces."""

SPLITK_MAX_OUTPUTS = 65536
SPLITK_MIN_REDUCTION = 1024
"""``direct_splitk`` splits a convolution with at most this many outputs and at least this many
multiply-adds per output (input channels x window). Measured on an H100 (``bench/gpu.py --conv
direct,splitk``): ResNet-18's 3 x 3 layers of 14 x 14 and 7 x 7 outputs ran 1.7 to 3.3 times
faster split (0.225 -> 0.068 ms for 512 channels of 7 x 7); at 28 x 28 x 128 outputs (100352)
splitting lost a little, and MobileNet V2's 1 x 1 layers (at most 960 multiply-adds per
output) gained less device time than their second launch cost the host (1.12 -> 1.70 ms end
to end)."""


def _split_k_factor(group, op) -> int:
    """How many slices ``direct_splitk`` cuts the reduction of the convolution ``op`` into
    under ``RB_GPU_CONV`` (1: none): for a convolution :data:`SPLITK_MAX_OUTPUTS` and
    :data:`SPLITK_MIN_REDUCTION` admit, a power of two while the partials stay within
    :data:`SPLITK_ITEMS` and each slice has :data:`SPLITK_MIN_SLICE` input channels."""
    anchor = group.anchor
    if anchor is None or anchor.op.name != "nn.conv2d" or not op.reduce_axis:
        return 1
    mode = conv_mode()
    if mode == "winograd":   # auto's choice for what Winograd does not take
        mode = "auto"
    if mode != "splitk" and not (mode == "auto" and device_kind(group.target) == "gpu"):
        return 1
    outputs, reduction = 1, 1
    for axis in op.axis:
        outputs *= int(axis.extent)
    for axis in op.reduce_axis:
        reduction *= int(axis.extent)
    if outputs > SPLITK_MAX_OUTPUTS or reduction < SPLITK_MIN_REDUCTION:
        return 1
    channels = int(op.reduce_axis[0].extent)
    factor = 1
    while (factor < 16 and outputs * factor * 2 <= SPLITK_ITEMS
           and channels // (factor * 2) >= SPLITK_MIN_SLICE):
        factor *= 2
    return factor


GPU_TILED_MIN_GROUPS = 192
GPU_TILED_MIN_CHANNELS = 64
GPU_TILED_MIN_REDUCTION = 128


def _gpu_tiles_pay(oc, oh, ow, reduction, groups) -> bool:
    """``auto``'s choice of ``tiled`` on a GPU: whole 8 x 8 pixel tiles, at least
    :data:`GPU_TILED_MIN_CHANNELS` output channels, :data:`GPU_TILED_MIN_GROUPS` work groups
    and :data:`GPU_TILED_MIN_REDUCTION` multiply-adds per output. Measured on an H100: every
    layer of VGG-16 and ResNet-18 that passes ran 1.6 to 2.8 times faster tiled (the stems,
    64 channels of 224 x 224 and 112 x 112, the layers of 128 and 256 channels at 112 x 112
    and 56 x 56); ResNet-18's 64 channels of 56 x 56 (49 work groups, fewer than the 132
    compute units) ran 1.5 times slower, the 7 x 7 tiles of 28 x 28 outputs 2 to 7 times, and
    MobileNet V2's 1 x 1 layers of 16 to 24 input channels lost to the chunks' copies."""
    return (oh % CONV_TILE_PIXELS == 0 and ow % CONV_TILE_PIXELS == 0
            and oc >= GPU_TILED_MIN_CHANNELS and groups >= GPU_TILED_MIN_GROUPS
            and reduction >= GPU_TILED_MIN_REDUCTION)


def device_kind(target) -> str:
    """The type of the device an ``opencl`` target runs on: its ``-device=`` option, else that
    of the device it picks (:func:`~relaybench.backends.opencl.get_device`), else ``gpu`` (no
    OpenCL installed: code for the target as written)."""
    kind = target.options.get("device")
    if kind:
        return str(kind)
    try:
        from ..opencl import get_device
        return get_device(target).features.kind
    except (ImportError, CompileError):
        return "gpu"


class _ConvTiling:
    """The tile of one convolution (see :func:`_schedule_conv_tiled`): work items along the
    output channels (``oc_threads``, each ``oc_block`` channels), rows (``oh_threads``, one row
    each) and columns (``ow_threads``, each ``ow_block`` columns), and the input channels of
    one reduction chunk."""

    def __init__(self, oc_threads, oc_block, oh_threads, ow_threads, ow_block, chunk, data,
                 weight, shared=True):
        self.oc_threads, self.oc_block = oc_threads, oc_block
        self.oh_threads = oh_threads
        self.ow_threads, self.ow_block = ow_threads, ow_block
        self.chunk = chunk
        self.data, self.weight = data, weight
        self.shared = shared    # False: conv2d_blocked, the same tiles read from device memory

    @property
    def threads(self) -> int:
        return self.oc_threads * self.oh_threads * self.ow_threads


def _conv_tiling(group, op):
    """The tiling of ``conv2d_tiled`` for the anchor ``op`` under ``RB_GPU_CONV``, or None
    (``direct``): the convolution must be ``nn.conv2d`` in ``NCHW`` / ``OIHW`` (output
    ``NCHW``), float32, one group, a reduction chunk of one input channel must fit in
    :data:`CONV_LOCAL_BYTES`, and the group must have one output, of the convolution's shape
    (the convolution itself, or its elementwise epilogue)."""
    anchor = group.anchor
    if anchor is None or anchor.op.name != "nn.conv2d":
        return None
    mode = conv_mode()
    if mode == "winograd":   # auto's choice for what Winograd does not take
        mode = "auto"
    gpu = mode == "auto" and device_kind(group.target) == "gpu"
    if (mode in ("direct", "splitk") or len(group.outputs) != 1
            or group.outputs[0].shape != op.output.shape):
        return None
    attrs = anchor.attrs
    if (attrs.data_layout != "NCHW" or attrs.kernel_layout != "OIHW"
            or (attrs.out_layout or "NCHW") != "NCHW" or attrs.groups != 1
            or op.output.dtype != "float32" or len(op.axis) != 4 or len(op.reduce_axis) != 3
            or len(op.inputs) != 2):
        return None
    n, oc, oh, ow = (a.extent for a in op.axis)
    ic, kh, kw = (a.extent for a in op.reduce_axis)
    weight = next((t for t in reversed(op.inputs) if t.shape == (oc, ic, kh, kw)), None)
    if weight is None:
        return None
    data = next(t for t in op.inputs if t is not weight)
    if mode == "auto" and not gpu and oc < CONV_AUTO_MIN_CHANNELS:
        return None
    oc_block = 4
    oh_threads = _tile_extent(oh)
    width = _tile_extent(ow)
    ow_block = next((b for b in (4, 2) if width % b == 0), width)
    ow_threads = width // ow_block
    pixel_tiles = n * -(-oh // oh_threads) * -(-ow // width)
    # at most THREADS work items per group, which every device takes
    oc_threads = min(16, -(-oc // oc_block), THREADS // (oh_threads * ow_threads))
    if pixel_tiles * -(-oc // (oc_threads * oc_block)) < CONV_MIN_GROUPS:
        oc_threads = min(8, oc_threads)
    groups = pixel_tiles * -(-oc // (oc_threads * oc_block))
    if mode == "auto" and not gpu and groups < CONV_AUTO_MIN_GROUPS:
        return None
    if gpu and not _gpu_tiles_pay(oc, oh, ow, ic * kh * kw, groups):
        return None
    sh, sw = attrs.strides
    dh, dw = attrs.dilation
    patch = (((oh_threads - 1) * sh + (kh - 1) * dh + 1)
             * ((ow_threads * ow_block - 1) * sw + (kw - 1) * dw + 1))
    per_channel = 4 * (oc_threads * oc_block * kh * kw + patch)
    # the largest chunk of at most 8 channels that divides them (no partial chunk) and fits
    candidates = [c for c in range(min(8, ic), 0, -1) if ic % c == 0]
    chunk = next((c for c in candidates if c * per_channel <= CONV_LOCAL_BYTES), None)
    if chunk is None:
        return None
    return _ConvTiling(oc_threads, oc_block, oh_threads, ow_threads, ow_block, chunk, data,
                       weight, shared=mode != "blocked")


def _tile_extent(extent: int) -> int:
    """Output rows (or columns) per work group: the largest divisor of ``extent`` up to
    :data:`CONV_TILE_PIXELS`, so that no tile is partial (56 -> 8, 28 -> 7, 14 -> 7); when that
    is under half of it (a prime extent), a partial last tile, guarded, is cheaper."""
    best = next(d for d in range(min(CONV_TILE_PIXELS, extent), 0, -1) if extent % d == 0)
    return best if 2 * best >= min(CONV_TILE_PIXELS, extent) else min(CONV_TILE_PIXELS, extent)


def _schedule_conv_tiled(s, group, conv, tiling) -> set:
    """Schedules the group's output, the convolution's accumulators and its two local tiles;
    gives their operations (see :func:`_conv_tiling` for what the rule needs)."""
    t = tiling
    out = group.outputs[0]
    if s.op_of(out) is conv:    # no epilogue: the output copies the accumulators
        acc = s.cache_write(conv.output)
    else:
        acc = conv.output
    caches = [s.cache_read(tensor, "shared", [s[acc]]) for tensor in (t.data, t.weight)
              if t.shared]
    result, acc_op = s.op_of(out), s.op_of(acc)
    stage = s[out]
    n, oc, oh, ow = result.axis
    oc_outer, oc_thread, oc_block = _tile_axis(stage, oc, t.oc_threads, t.oc_block)
    oh_outer, oh_thread = stage.split(oh, t.oh_threads)
    ow_outer, ow_thread, ow_block = _tile_axis(stage, ow, t.ow_threads, t.ow_block)
    stage.reorder(n, oc_outer, oh_outer, ow_outer, oh_thread, oc_thread, ow_thread, oc_block,
                  ow_block)
    pixels = stage.fuse(oh_outer, ow_outer)
    stage.bind(n, "blockIdx.z")
    stage.bind(oc_outer, "blockIdx.y")
    stage.bind(pixels, "blockIdx.x")
    # the channels slowest among the work items: the 32 of a warp (NVIDIA) read few distinct
    # weights (with the channels second, a warp's 16 channel groups hit one bank of local
    # memory, their weights 4 x 72 floats apart)
    stage.bind(oc_thread, "threadIdx.z")
    stage.bind(oh_thread, "threadIdx.y")
    stage.bind(ow_thread, "threadIdx.x")
    stage.unroll(oc_block)
    stage.unroll(ow_block)
    # the accumulators: one work item's oc_block x ow_block outputs, in its registers
    accumulate = s[acc]
    accumulate.set_scope("local")
    accumulate.compute_at(stage, ow_thread)
    a_n, a_oc, a_oh, a_ow = acc_op.axis
    rc, ry, rx = acc_op.reduce_axis
    rc_outer, rc_inner = accumulate.split(rc, t.chunk)
    accumulate.reorder(rc_outer, rc_inner, ry, rx, a_n, a_oc, a_oh, a_ow)
    accumulate.unroll(rx)
    accumulate.unroll(a_oc)
    accumulate.unroll(a_ow)
    _fill_shared(s, caches, accumulate, rc_outer,
                 [("threadIdx.z", t.oc_threads), ("threadIdx.y", t.oh_threads),
                  ("threadIdx.x", t.ow_threads)])
    return {result, acc_op} | {cache.op for cache in caches}


def _fill_shared(s, caches, accumulate, at, threads) -> None:
    """Compute each ``shared`` copy in ``caches`` at ``accumulate``'s loop ``at``, spread over
    the work group's items ``threads`` (``(tag, extent)``, slowest first): every work item
    copies neighbouring elements, its linear id in the group (``x + X * (y + Y * z)``) the
    copy's position in the tile, so reads are coalesced."""
    for cache in caches:
        fill = s[cache]
        fill.compute_at(accumulate, at)
        axes = list(cache.op.axis)
        fused = axes[0]
        for axis in axes[1:]:
            fused = fill.fuse(fused, axis)
        inner = 1
        for _, extent in threads:
            inner *= extent
        _, item = fill.split(fused, inner)
        for tag, extent in threads[:-1]:
            inner //= extent
            outer, item = fill.split(item, inner)
            fill.bind(outer, tag)
        fill.bind(item, threads[-1][0])


def _tile_axis(stage, axis, threads: int, block: int) -> tuple:
    """``axis`` cut for a work group: ``(outer, thread, block)`` loops, ``threads`` work items
    of ``block`` consecutive elements each per iteration of ``outer``."""
    outer, inner = stage.split(axis, threads * block)
    thread, reg = stage.split(inner, block)
    return outer, thread, reg


# ---- conv2d_winograd

GPU_WINOGRAD_MIN_ITEMS = 32768
GPU_WINOGRAD_MIN_FLOPS = 500e6
"""``auto`` on a GPU takes Winograd where its matrix products keep at least
:data:`GPU_WINOGRAD_MIN_ITEMS` work items busy (tile positions x 64-channel blocks x tile
blocks x slices, 256 work items a group, fewer where the tiles are few), or where the direct
convolution would take :data:`GPU_WINOGRAD_MIN_FLOPS` or more. Measured with ``bench/gpu.py
--conv winograd,splitk`` on an H200 (NVIDIA's OpenCL), every 3 x 3 stride-1 layer of
ResNet-18 and VGG-16, Winograd (fused multiply-adds, whole tile blocks, split-K) against the
best direct kernel of earlier runs: ResNet-18's 64 channels of 56 x 56 0.055 -> 0.036 ms, 128
of 28 x 28 0.062 -> 0.035 ms, 256 of 14 x 14 0.065 -> 0.046 ms, 512 of 7 x 7 (F(2x2)) 0.068
-> 0.048 ms; VGG-16's layers 1.4 to 4.7 times faster (64 channels of 224 x 224 0.232 -> 0.112
ms, 512 of 28 x 28 0.713 -> 0.150 ms, 512 of 14 x 14 0.225 -> 0.083 ms). All pass the rule;
what it leaves out (the DQN's 64 channels of 7 x 7: 1024 work items, 7 MFLOP) is too small
to keep a device busy."""


def gpu_winograd_tile(attrs, data, weight, out_type, device: str, mode: str = "",
                      constant_weight: bool = True) -> int:
    """The Winograd tile size the OpenCL target takes for an ``nn.conv2d`` call (0: none), by
    ``mode`` (default ``RB_GPU_CONV``; ``RB_WINOGRAD=off`` turns it off on every target):
    ``winograd``, F(4x4, 3x3) for every qualifying convolution (float32, 3 x 3, stride 1,
    dilation 1, one group, ``NCHW`` / ``OIHW``) whose output is 8 or more wide and high,
    F(2x2, 3x3) for smaller ones; ``auto`` on a GPU ``device`` where the weight is a constant
    (its transform folded at compile time) and :func:`_gpu_winograd_pays`; any other mode
    none.

    >>> from relaybench.ir.types import TensorType as T
    >>> attrs = {"kernel_size": (3, 3), "strides": (1, 1), "dilation": (1, 1), "groups": 1,
    ...          "data_layout": "NCHW", "kernel_layout": "OIHW", "out_layout": ""}
    >>> x, w = T((1, 512, 28, 28), "float32"), T((512, 512, 3, 3), "float32")
    >>> y = T((1, 512, 28, 28), "float32")
    >>> [gpu_winograd_tile(attrs, x, w, y, "cpu", mode) for mode in ("winograd", "auto", "direct")]
    [4, 0, 0]
    >>> gpu_winograd_tile(attrs, x, w, y, "gpu", "auto")
    4
    """
    mode = mode or conv_mode()
    if mode not in ("winograd", "auto") or (mode == "auto" and device != "gpu"):
        return 0
    from ...passes.alter_op_layout import winograd_mode
    if winograd_mode() == "off":
        return 0
    if (attrs["data_layout"] != "NCHW" or attrs["kernel_layout"] != "OIHW"
            or attrs["out_layout"] not in ("", "NCHW")):
        return 0
    if not all(isinstance(t, TensorType) and t.is_static for t in (data, weight, out_type)):
        return 0
    if (tuple(int(d) for d in weight.shape[2:]) != (3, 3) or tuple(attrs["strides"]) != (1, 1)
            or tuple(attrs["dilation"]) != (1, 1) or attrs["groups"] != 1
            or not all(str(t.dtype) == "float32" for t in (data, weight, out_type))):
        return 0
    ic, oc = int(data.shape[1]), int(weight.shape[0])
    oh, ow = int(out_type.shape[2]), int(out_type.shape[3])
    if mode == "auto" and not (constant_weight
                               and _gpu_winograd_pays(ic, oc, oh, ow, int(out_type.shape[0]))):
        return 0
    return 4 if min(oh, ow) >= 8 else 2


def _gpu_winograd_pays(ic: int, oc: int, oh: int, ow: int, batch: int) -> bool:
    """``auto``'s choice of Winograd on a GPU (see :data:`GPU_WINOGRAD_MIN_ITEMS`)."""
    m = 4 if min(oh, ow) >= 8 else 2
    tiles = batch * -(-oh // m) * -(-ow // m)
    items = _winograd_items(oc, m, tiles) * _winograd_split_k(ic, oc, m, tiles)
    flops = 2 * batch * oc * oh * ow * ic * 9
    return items >= GPU_WINOGRAD_MIN_ITEMS or flops >= GPU_WINOGRAD_MIN_FLOPS


WINOGRAD_SPLIT_ITEMS = 65536
WINOGRAD_SPLIT_MIN_SLICE = 64
"""The matrix products of a layer whose tiles keep fewer than :data:`WINOGRAD_SPLIT_ITEMS` work
items busy are cut along the input channels into 2, 4 or 8 slices of at least
:data:`WINOGRAD_SPLIT_MIN_SLICE` channels, each slice a product of its own (its own work
items), the output transform adding them: the later layers of a network at batch 1 (14 x 14
outputs are 16 tiles of 4 x 4, a product per tile position of 16 columns)."""


def _winograd_items(oc: int, m: int, tiles: int) -> int:
    """Work items of the matrix products of one slice (see :func:`_schedule_winograd`)."""
    tile_threads = _winograd_tile_threads(tiles)
    k_threads = min(WINOGRAD_THREADS, -(-oc // WINOGRAD_REGISTER_TILE))
    groups = (m + 2) ** 2 * -(-oc // (k_threads * WINOGRAD_REGISTER_TILE)) * \
        -(-tiles // (tile_threads * WINOGRAD_REGISTER_TILE))
    return groups * k_threads * tile_threads


def _winograd_split_k(ic: int, oc: int, m: int, tiles: int) -> int:
    """The slices of the input channels the matrix products are cut into (see
    :data:`WINOGRAD_SPLIT_ITEMS`).

    >>> _winograd_split_k(512, 512, 4, 16), _winograd_split_k(128, 128, 4, 49)
    (4, 2)
    >>> _winograd_split_k(64, 64, 4, 3136), _winograd_split_k(96, 64, 4, 16)
    (1, 1)
    """
    items = _winograd_items(oc, m, tiles)
    split = 1
    while (split < 8 and items * split < WINOGRAD_SPLIT_ITEMS and ic % (split * 2) == 0
           and ic // (split * 2) >= WINOGRAD_SPLIT_MIN_SLICE):
        split *= 2
    return split


def _winograd_tile_threads(tiles: int) -> int:
    """Work items along the tiles in one work group of the matrix products: enough for the
    tiles at :data:`WINOGRAD_REGISTER_TILE` each, a power of two, at most
    :data:`WINOGRAD_THREADS`."""
    need = -(-tiles // WINOGRAD_REGISTER_TILE)
    return min(WINOGRAD_THREADS, 1 << max(0, (need - 1).bit_length()))


def gpu_conv2d_layouts(attrs, inputs, tinfos, out_type):
    """The OpenCL target's ``FTVMAlterOpLayout`` of ``nn.conv2d``: Winograd's convolution of the
    weight's transform (``HWOI``, folded at compile time when the weight is a constant) where
    :func:`gpu_winograd_tile` takes it, data and output staying ``NCHW``; else None (the
    convolution as it is)."""
    from ...ir.expr import Constant
    from ...op.winograd import (contrib_conv2d_winograd_weight_transform,
                                contrib_conv2d_winograd_without_weight_transform)
    from ...passes.infra import PassContext
    from ...passes.legalize import TARGET_CONFIG
    from ..target import Target
    data, weight = tinfos
    value = PassContext.current().get_config(TARGET_CONFIG)
    target = value if isinstance(value, Target) else Target.parse(str(value or "opencl"))
    tile = gpu_winograd_tile(attrs, data, weight, out_type, device_kind(target),
                             constant_weight=isinstance(inputs[1], Constant))
    if not tile:
        return None
    keep = {k: attrs[k] for k in ("padding", "channels", "kernel_size", "out_dtype")}
    transformed = contrib_conv2d_winograd_weight_transform(inputs[1], tile_size=tile)
    return contrib_conv2d_winograd_without_weight_transform(
        inputs[0], transformed, tile_size=tile, data_layout="NCHW", kernel_layout="HWOI",
        out_layout="", **keep)


register_alter_op_layout("nn.conv2d", gpu_conv2d_layouts, level=0, target="opencl")

WINOGRAD_REGISTER_TILE = 4
"""Output channels, and tiles, of one work item's register tile in the matrix products
(4 x 4 accumulators)."""

WINOGRAD_THREADS = 16
"""Work items along the output channels, and at most along the tiles, of one work group of the
matrix products (16 x 16: a tile of 64 channels x 64 tiles)."""

WINOGRAD_CHUNK = 16
"""Input channels per step of the matrix products' reduction (both tiles in local memory:
2 x 64 x 16 floats, 8 KiB)."""


def _schedule_winograd(s, group) -> None:
    """``conv2d_winograd``: three launches. ``winograd_data_pack``, one work item per (input
    channel, tile) computing the tile's ``alpha x alpha`` transform (unrolled; the padding
    inlined as reads of zero); ``winograd_bgemm``, the ``alpha^2`` matrix products as
    ``dense_shared``-like tiles of 64 output channels x up to 64 tiles per work group
    (:data:`WINOGRAD_THREADS`), each work item a 4 x 4 register tile, the reduction in chunks
    of :data:`WINOGRAD_CHUNK` input channels copied to local memory, one product per slice
    of the input channels where the compute cut them (:func:`_winograd_split_k`); and the
    output, one work item per ``m x m`` output tile (the inverse transform unrolled and
    inlined into the fused epilogue: bias, residual, relu)."""
    packed = _named_op(s, "winograd_data_pack")
    product = _named_op(s, "winograd_bgemm")
    output_ops = {t.op for t in group.outputs}
    for op in s.ops:   # the padding and the inverse transform go into their readers
        if (isinstance(op, ComputeOp) and op not in output_ops and not op.reduce_axis
                and op is not packed and not s[op].inlined):
            s[op].compute_inline()

    # the input transform: work items over (channel, tile), the tile positions unrolled
    stage = s[packed]
    eps, nu, c, p = packed.axis
    stage.reorder(c, p, eps, nu)
    _bind_elements(stage, [c, p])
    stage.unroll(eps)
    stage.unroll(nu)

    # the matrix products
    tiles = int(product.axis[4].extent)
    channels = int(product.axis[3].extent)
    reduction = int(product.reduce_axis[0].extent)
    rt = WINOGRAD_REGISTER_TILE
    p_threads = _winograd_tile_threads(tiles)
    k_threads = min(WINOGRAD_THREADS, -(-channels // rt))   # as _gpu_winograd_pays counts
    chunk = next(c for c in (WINOGRAD_CHUNK, 8, 4, 2, 1) if reduction % c == 0)
    acc = s.cache_write(product.output)
    acc_op, copy = s.op_of(acc), s[product]
    weight = next(t for t in acc_op.inputs if t.op is not packed)
    caches = [s.cache_read(t, "shared", [s[acc]]) for t in (weight, packed.output)]
    sl, e, u, k, p = product.axis
    eu = copy.fuse(copy.fuse(sl, e), u)
    k_outer, k_thread, k_reg = _tile_axis(copy, k, k_threads, rt)
    p_outer, p_thread, p_reg = _tile_axis(copy, p, p_threads, rt)
    copy.reorder(eu, k_outer, p_outer, k_thread, p_thread, k_reg, p_reg)
    copy.bind(eu, "blockIdx.z")
    copy.bind(k_outer, "blockIdx.y")
    copy.bind(p_outer, "blockIdx.x")
    copy.bind(k_thread, "threadIdx.y")
    copy.bind(p_thread, "threadIdx.x")
    copy.unroll(k_reg)
    copy.unroll(p_reg)
    accumulate = s[acc]
    accumulate.set_scope("local")
    accumulate.compute_at(copy, p_thread)
    a_s, a_e, a_u, a_k, a_p = acc_op.axis
    (rc,) = acc_op.reduce_axis
    rc_outer, rc_inner = accumulate.split(rc, chunk)
    accumulate.reorder(rc_outer, rc_inner, a_s, a_e, a_u, a_k, a_p)
    accumulate.unroll(rc_inner)
    accumulate.unroll(a_k)
    accumulate.unroll(a_p)
    _fill_shared(s, caches, accumulate, rc_outer,
                 [("threadIdx.y", k_threads), ("threadIdx.x", p_threads)])

    # the output: one work item per m x m tile of one channel, the tile unrolled
    m = group.anchor.attrs.tile_size
    for out in group.outputs:
        stage = s[s.op_of(out)]
        axes = list(stage.op.axis)
        if len(axes) != 4:
            schedule_injective(s, stage.op)
            continue
        n, k, y, x = axes
        y_outer, y_inner = stage.split(y, m)
        x_outer, x_inner = stage.split(x, m)
        stage.reorder(n, k, y_outer, x_outer, y_inner, x_inner)
        _bind_elements(stage, [n, k, y_outer, x_outer])
        stage.unroll(y_inner)
        stage.unroll(x_inner)


def _named_op(s, name: str):
    found = [op for op in s.ops if isinstance(op, ComputeOp) and op.name == name]
    if len(found) != 1:
        raise CompileError(f"conv2d_winograd: expected one stage {name!r}, found {len(found)}")
    return found[0]
