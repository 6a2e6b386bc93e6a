"""The GPU strategy: schedules for an OpenCL device, loops bound to work groups and work items.

Every stage that is computed (not inlined) is spread over the device: a loop bound to
``blockIdx.x`` runs one iteration per work group, one bound to ``threadIdx.x`` one per work item
of the group (:meth:`~relaybench.te.Stage.bind`). The rules, by the group's anchor:

``injective``
    elementwise, broadcast and injective stages: every output axis fused into one loop, split
    into blocks of :data:`THREADS` work items, one element per work item; neighbouring work
    items write neighbouring elements (coalesced).
``dense_shared``
    ``nn.dense`` (2-D, one reduction, :data:`DENSE_SHARED_MIN_ROWS` rows or more; batch 1 takes
    ``reduce_tree``): a work group computes :data:`TILE` output features of one
    row, one per work item; the reduction goes in steps of :data:`TILE`, and at each step the
    group copies the row's slice of the input and the ``TILE x TILE`` tile of the weights into
    ``shared`` memory together (each work item a column, so the reads of global memory are
    coalesced), waits at a barrier, then accumulates from the tiles. The fused epilogue (bias,
    relu) is a stage of its own after it.
``reduce_tree``
    a reduction computed at the root (a group's output, or softmax's maximum and sum, read by
    its elementwise output) over one axis of :data:`TREE_MIN` elements or more: one work group
    per output element; work item ``t`` of ``T`` (a power of two, up to :data:`THREADS`)
    reduces the elements ``t, t + T, ...`` into ``shared`` memory, then the group halves the
    partial results ``log2(T)`` times, a barrier between steps
    (:meth:`~relaybench.te.Schedule.tree_reduce`), and the first work item stores the result.
``reduce``
    shorter reductions computed at the root, or over several axes: one work item per element.
``direct``
    a convolution, pooling, a reduction, or dense where the tiles do not fit: one work item per
    output element, the reduction in a loop of its own inside it, computed in a register right
    where the fused epilogue (bias, residual, relu...) reads it (``compute_at`` the work item's
    loop). The convolution's padding is inlined: a read of the border is a ``select`` whose
    unchosen side is never loaded.
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
    for i0_i1_fused_outer in blockIdx.x(2):
        for i0_i1_fused_inner in threadIdx.x(256):
            if i0_i1_fused_outer * 256 + i0_i1_fused_inner < 400:
                relu[(i0_i1_fused_outer * 256 + i0_i1_fused_inner) // 100, (i0_i1_fused_outer * 256 + i0_i1_fused_inner) % 100] = max(p0[(i0_i1_fused_outer * 256 + i0_i1_fused_inner) // 100, (i0_i1_fused_outer * 256 + i0_i1_fused_inner) % 100], 0.0)
"""

from __future__ import annotations

from ... import te
from ...te.tensor import ComputeOp
from .x86 import _too_big_to_inline

__all__ = ["compute", "schedule", "THREADS", "TILE"]

THREADS = 256
"""Work items per work group for one-element-per-item stages."""

TILE = 32
"""Output features per work group, and reduction step, of the ``dense_shared`` rule."""

TREE_MIN = 64
"""A reduction computed at the root over one axis of at least this many elements is a tree in
shared memory (``reduce_tree``)."""


def compute(call, target):
    """The GPU kernels use every operator's own compute."""
    return None


def schedule(group, compute_at: bool = True):
    """The schedule of one fused group and the name of its rule (see the module).

    With ``compute_at=False`` (lowering's retry after a
    :class:`~relaybench.te.ComputeAtError`) no stage is computed inside another's loops.
    """
    s = te.create_schedule(group.outputs)
    output_ops = {t.op for t in group.outputs}
    keep = _too_big_to_inline(s, output_ops)
    for op in s.ops:
        if (isinstance(op, ComputeOp) and op not in output_ops and not op.reduce_axis
                and op not in keep):
            s[op].compute_inline()

    anchor = group.anchor
    anchor_op = group.anchor_tensors[0].op if group.anchor_tensors else None
    is_reduction = isinstance(anchor_op, ComputeOp) and bool(anchor_op.reduce_axis)
    rule, done = "injective", set()
    if is_reduction and anchor.op.name == "nn.dense" and _dense_fits(anchor_op):
        rule, done = "dense_shared", _schedule_dense_shared(s, anchor_op)
    elif is_reduction:
        rule = "direct"
        outputs = list(group.outputs)
        epilogue = outputs[0].op if len(outputs) == 1 else None
        if (compute_at and epilogue is not None and epilogue is not anchor_op
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
            made = schedule_reduce(s, op)
            if rule in ("injective", "reduce", "direct") and made == "reduce_tree":
                rule = "reduce_tree"
            elif rule == "injective":   # softmax: its reductions feed an elementwise output
                rule = made
        else:
            schedule_injective(s, op)
    return s, rule


def _bind_elements(stage, axes):
    """Fuse ``axes`` into one loop and bind it to work groups of up to :data:`THREADS` work
    items; gives the loop bound to ``threadIdx.x`` (None when there is no axis)."""
    if not axes:
        return None
    fused = axes[0]
    for axis in axes[1:]:
        fused = stage.fuse(fused, axis)
    threads = min(THREADS, fused.extent)
    block, thread = stage.split(fused, threads)
    stage.bind(block, "blockIdx.x")
    stage.bind(thread, "threadIdx.x")
    return thread


def schedule_injective(s, op):
    """One element per work item, the elements in row-major order across the work items."""
    return _bind_elements(s[op], list(op.axis))


def schedule_reduce(s, op) -> str:
    """A long reduction over one axis (:data:`TREE_MIN` elements or more) as a tree in shared
    memory, one work group per output element (``reduce_tree``); any other reduction one
    output element per work item, its reduction a loop inside the work item (``reduce``).
    Gives the rule's name."""
    axes = list(op.axis)
    if len(op.reduce_axis) != 1 or op.reduce_axis[0].extent < TREE_MIN or not axes:
        _bind_elements(s[op], axes)
        return "reduce"
    threads = min(THREADS, 1 << (op.reduce_axis[0].extent.bit_length() - 1))
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
