"""Schedules: how each compute stage's loops are split, reordered, fused, annotated or inlined.

A :class:`Schedule` holds one :class:`Stage` per operation reachable from its outputs. A stage
starts with one loop per output axis followed by one per reduce axis; its primitives replace leaf
axes by new ones and record the relation, so lowering can recover every original index from the
loop variables (``i = i_outer * 4 + i_inner`` after a split, ``i = f // 8``, ``j = f % 8`` after a
fuse). A split whose factor does not divide the extent adds a guard around the loop body.
``compute_inline`` substitutes a stage into its readers; ``compute_at`` computes a producer inside
one loop of its consumer, over the region that loop's iteration reads, into a buffer of that
region's size; ``Schedule.cache_write`` moves a stage's computation into a new stage whose
result the original one copies. For GPUs, ``bind`` maps a loop to the work groups or the work
items of a launch (``blockIdx.x``, ``threadIdx.x``, ...), and ``Schedule.cache_read`` stages a
tensor's tile in a ``shared`` buffer that the threads of a group fill together (lowering puts a
barrier after the fill and after the use).

>>> from relaybench import te
>>> A = te.placeholder((8,), name="A")
>>> B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
>>> s = te.create_schedule(B)
>>> outer, inner = s[B].split(B.op.axis[0], factor=4)
>>> s[B].vectorize(inner)
>>> print(te.lower(s, [A], name="add_one"))
def add_one(A: Buffer((8,), "float32"), B: Buffer((8,), "float32")):
    for i_outer in serial(2):
        for i_inner in vectorized(4):
            B[i_outer * 4 + i_inner] = A[i_outer * 4 + i_inner] + 1.0
"""

from __future__ import annotations

from dataclasses import dataclass

from relaybench.errors import CompileError
from relaybench.te.tensor import ComputeOp, IterVar, Tensor

__all__ = ["Schedule", "Stage", "Split", "Fuse", "create_schedule"]


@dataclass(frozen=True)
class Split:
    """``parent = outer * factor + inner``."""

    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: int


@dataclass(frozen=True)
class Fuse:
    """``outer = fused // extent(inner)``, ``inner = fused % extent(inner)``."""

    outer: IterVar
    inner: IterVar
    fused: IterVar


class Stage:
    """The loops of one operation; see the module's docstring."""

    def __init__(self, op):
        self.op = op
        self.inlined = False
        if isinstance(op, ComputeOp):
            self.leaf_iter_vars = list(op.axis) + list(op.reduce_axis)
        else:
            self.leaf_iter_vars = []
        self.relations: list = []
        self.kinds: dict = {}
        self.attach = None  # (consumer stage, its loop) after compute_at
        self.scope = "global"  # where an attached stage's region buffer lives (set_scope)

    def __repr__(self):
        return f"Stage({self.op.name}, leaves=[{', '.join(v.name for v in self.leaf_iter_vars)}])"

    def _position(self, axis, what: str) -> int:
        for position, leaf in enumerate(self.leaf_iter_vars):
            if leaf is axis:
                return position
        name = getattr(axis, "name", repr(axis))
        raise CompileError(f"stage {self.op.name}: {what}: {name} is not a current loop of this "
                           f"stage (loops: {', '.join(v.name for v in self.leaf_iter_vars)})")

    def _check_compute(self, what: str):
        if not isinstance(self.op, ComputeOp):
            raise CompileError(f"stage {self.op.name}: {what} applies to compute stages only")

    def split(self, axis: IterVar, factor: int):
        """Replace ``axis`` by ``(outer, inner)`` loops, the inner one of extent ``factor``."""
        self._check_compute("split")
        position = self._position(axis, "split")
        factor = int(factor)
        if factor <= 0:
            raise CompileError(f"stage {self.op.name}: split of {axis.name}: factor must be "
                               f"positive, got {factor}")
        outer = IterVar(f"{axis.name}_outer", "int64", -(-axis.extent // factor), axis.iter_kind)
        inner = IterVar(f"{axis.name}_inner", "int64", factor, axis.iter_kind)
        self.leaf_iter_vars[position:position + 1] = [outer, inner]
        self.relations.append(Split(axis, outer, inner, factor))
        return outer, inner

    def fuse(self, outer: IterVar, inner: IterVar) -> IterVar:
        """Replace two adjacent loops (``outer`` directly around ``inner``) by one."""
        self._check_compute("fuse")
        first = self._position(outer, "fuse")
        second = self._position(inner, "fuse")
        if second != first + 1:
            raise CompileError(f"stage {self.op.name}: fuse needs {outer.name} directly around "
                               f"{inner.name}")
        if outer.iter_kind != inner.iter_kind:
            raise CompileError(f"stage {self.op.name}: cannot fuse the {outer.iter_kind} axis "
                               f"{outer.name} with the {inner.iter_kind} axis {inner.name}")
        fused = IterVar(f"{outer.name}_{inner.name}_fused", "int64", outer.extent * inner.extent,
                        outer.iter_kind)
        self.leaf_iter_vars[first:second + 1] = [fused]
        self.relations.append(Fuse(outer, inner, fused))
        return fused

    def reorder(self, *axes: IterVar):
        """Put ``axes`` in this order, in the positions they occupy together."""
        self._check_compute("reorder")
        positions = [self._position(a, "reorder") for a in axes]
        if len(set(positions)) != len(positions):
            raise CompileError(f"stage {self.op.name}: reorder names an axis twice")
        for position, axis in zip(sorted(positions), axes):
            self.leaf_iter_vars[position] = axis

    def _annotate(self, axis: IterVar, kind: str):
        self._check_compute(kind)
        self._position(axis, kind)
        if kind in ("vectorized", "parallel") and axis.iter_kind == "reduce":
            raise CompileError(f"stage {self.op.name}: the reduce axis {axis.name} cannot be "
                               f"{kind} (each iteration updates the same element)")
        self.kinds[axis] = kind

    def tensorize(self, axis: IterVar, intrinsic: str = "dot_sum"):
        """Keep the reduce loop ``axis`` as one expression instead of a loop, for a code
        generator to map onto a dot-product instruction. The one intrinsic is ``"dot_sum"``:
        ``axis`` must be the stage's innermost loop and its reduction a sum of products; the
        update becomes ``acc + dot_sum(axis < extent: a * b)``
        (:class:`~relaybench.te.loop_ir.DotSum`), which x86 computes with ``vpdpbusd`` when
        ``axis`` steps through 4 consecutive int8 values of both operands."""
        self._check_compute("tensorize")
        self._position(axis, "tensorize")
        if intrinsic != "dot_sum":
            raise CompileError(f"stage {self.op.name}: tensorize {axis.name}: unknown intrinsic "
                               f"{intrinsic!r}; known: dot_sum")
        if axis.iter_kind != "reduce":
            raise CompileError(f"stage {self.op.name}: tensorize {axis.name}: dot_sum replaces "
                               "a reduce loop, and this is a data axis")
        self.kinds[axis] = "tensorized"

    def vectorize(self, axis: IterVar):
        """Mark ``axis`` vectorized."""
        self._annotate(axis, "vectorized")

    def parallel(self, axis: IterVar):
        """Mark ``axis`` parallel."""
        self._annotate(axis, "parallel")

    def unroll(self, axis: IterVar):
        """Mark ``axis`` unrolled."""
        self._annotate(axis, "unrolled")

    def bind(self, axis: IterVar, tag: str):
        """Run ``axis`` on a GPU axis: ``tag`` is one of ``blockIdx.x|y|z`` (a work group per
        iteration) or ``threadIdx.x|y|z`` (a work item of the group per iteration). The
        iterations must be independent; a reduce axis cannot be bound.

        >>> from relaybench import te
        >>> A = te.placeholder((64,), name="A")
        >>> B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
        >>> s = te.create_schedule(B)
        >>> bx, tx = s[B].split(B.op.axis[0], factor=32)
        >>> s[B].bind(bx, "blockIdx.x"); s[B].bind(tx, "threadIdx.x")
        >>> print(te.lower(s, [A], name="double"))
        def double(A: Buffer((64,), "float32"), B: Buffer((64,), "float32")):
            for i_outer in blockIdx.x(2):
                for i_inner in threadIdx.x(32):
                    B[i_outer * 32 + i_inner] = A[i_outer * 32 + i_inner] * 2.0
        """
        from relaybench.te.loop_ir import THREAD_TAGS
        if tag not in THREAD_TAGS:
            raise CompileError(f"stage {self.op.name}: bind of {axis.name} to {tag!r}: expected "
                               f"one of {', '.join(THREAD_TAGS)}")
        self._check_compute("bind")
        self._position(axis, "bind")
        if axis.iter_kind == "reduce":
            raise CompileError(f"stage {self.op.name}: the reduce axis {axis.name} cannot be "
                               f"bound to {tag} (each iteration updates the same element)")
        bound = [a.name for a, k in self.kinds.items() if k == tag and a is not axis]
        if bound:
            raise CompileError(f"stage {self.op.name}: {tag} is bound to {bound[0]} already")
        self.kinds[axis] = tag

    def set_scope(self, scope: str):
        """Keep this stage's buffer in ``scope`` (``global``, ``shared`` or ``local``) when it is
        computed at a loop of its consumer: a ``shared`` region is filled by the threads of a
        work group together, with barriers around its use."""
        from relaybench.te.loop_ir import SCOPES
        if scope not in SCOPES:
            raise CompileError(f"stage {self.op.name}: unknown scope {scope!r}; expected one of "
                               f"{', '.join(SCOPES)}")
        self.scope = scope

    def compute_inline(self):
        """Substitute this stage's body where it is read, instead of storing it."""
        self._check_compute("compute_inline")
        if self.op.reduce_axis:
            raise CompileError(f"stage {self.op.name}: a reduction cannot be inlined")
        if self.relations or self.kinds or self.attach:
            raise CompileError(f"stage {self.op.name}: an inlined stage cannot also be scheduled")
        self.inlined = True

    def compute_at(self, consumer: "Stage", axis: IterVar):
        """Compute, inside the ``axis`` loop of ``consumer``, the part of this stage it reads there.

        The region is inferred from the reads, which must be affine in the loop variables
        (``y + ry``, ``2 * i + 1``). The stage then writes a buffer of the region's shape,
        allocated at that loop (one per iteration, and so one per thread of a parallel loop), and
        its readers index it relative to the region's start. Its own loops follow its leaf order
        and kinds (split, reorder, vectorize, unroll on its data and reduce axes); a data axis
        whose region is one element wide gives no loop. The readers may be ``consumer`` or
        stages attached to ``consumer`` at the same loop or one inside it (padding attached at
        a row loop, read by a convolution attached further in).
        """
        self._check_compute("compute_at")
        if self.inlined:
            raise CompileError(f"stage {self.op.name}: an inlined stage cannot be compute_at")
        if consumer is self:
            raise CompileError(f"stage {self.op.name}: compute_at into itself")
        consumer._position(axis, f"compute_at of {self.op.name}")
        self.attach = (consumer, axis)


class Schedule:
    """One :class:`Stage` per operation that ``outputs`` depend on; ``s[tensor]`` is its stage.

    :meth:`cache_write` replaces a tensor's operation inside this schedule only; :meth:`op_of`
    gives the operation that computes a tensor here.
    """

    def __init__(self, outputs):
        if isinstance(outputs, Tensor):
            outputs = [outputs]
        self.outputs = tuple(outputs)
        for out in self.outputs:
            if not isinstance(out, Tensor) or not isinstance(out.op, ComputeOp):
                raise CompileError(f"create_schedule: output {out!r} is not a computed tensor")
        self.replaced: dict = {}  # original op -> the op that computes its tensor here
        self.ops = _post_order(self.outputs, self.op_of)
        self.stages = {op: Stage(op) for op in self.ops}

    def op_of(self, tensor):
        """The operation that computes ``tensor`` (or stands for ``op``) in this schedule."""
        op = tensor.op if isinstance(tensor, Tensor) else tensor
        return self.replaced.get(op, op)

    def __getitem__(self, tensor) -> Stage:
        op = self.op_of(tensor)
        try:
            return self.stages[op]
        except KeyError:
            raise CompileError(f"schedule: {getattr(op, 'name', op)!r} is not computed for these "
                               "outputs") from None

    def _replace(self, op, new) -> None:
        """Make ``new`` compute what ``op`` computed (and what ``op`` stood for), then rebuild
        the operations and stages reachable from the outputs (new ones get a fresh stage)."""
        for original, now in list(self.replaced.items()):
            if now is op:
                self.replaced[original] = new
        self.replaced[op] = new
        self.ops = _post_order(self.outputs, self.op_of)
        stages = {}
        for each in self.ops:
            stages[each] = self.stages.get(each) or Stage(each)
        self.stages = stages

    def cache_write(self, tensor: Tensor) -> Tensor:
        """Compute ``tensor`` into a new stage ``<name>_local`` and make ``tensor`` a copy of it.

        As in TVM: the new tensor has the body of ``tensor`` over fresh data axes (the same
        reduce axes), and ``tensor``'s stage becomes an elementwise copy over its original data
        axes, so ``tensor`` keeps its buffer (and stays the output). Typical use: tile the
        copy, ``compute_at`` the cache inside a tile and reorder its reduction there, so that
        the accumulators live in a small local buffer.

        >>> from relaybench import te
        >>> A = te.placeholder((4, 8), name="A")
        >>> k = te.reduce_axis(8, name="k")
        >>> S = te.compute((4,), lambda i: te.sum(A[i, k], axis=[k]), name="S")
        >>> s = te.create_schedule(S)
        >>> SL = s.cache_write(S)
        >>> print(te.lower(s, [A], name="row_sum"))
        def row_sum(A: Buffer((4, 8), "float32"), S: Buffer((4,), "float32")):
            S_local = allocate((4,), "float32")
            for i_c in serial(4):
                S_local[i_c] = 0.0
                for k in serial(8):
                    S_local[i_c] = S_local[i_c] + A[i_c, k]
            for i in serial(4):
                S[i] = S_local[i]
        """
        from relaybench.te.loop_ir import substitute

        op = self.op_of(tensor)
        stage = self[tensor]
        if not isinstance(op, ComputeOp):
            raise CompileError(f"schedule: cache_write of {op.name}: only a compute stage can be "
                               "cached")
        if stage.relations or stage.kinds or stage.attach or stage.inlined:
            raise CompileError(f"schedule: cache_write of {op.name}: call it before scheduling "
                               "the stage")
        fresh = tuple(IterVar(f"{a.name}_c", "int64", a.extent, "data") for a in op.axis)
        body = substitute(op.body, dict(zip(op.axis, fresh)))
        cache = ComputeOp(f"{op.name}_local", fresh, body, op.output.shape)
        copy = ComputeOp(op.name, op.axis, cache.output[tuple(op.axis)], op.output.shape)
        self._replace(op, copy)
        return cache.output


    def tree_reduce(self, tensor: Tensor, factor: int) -> list:
        """Compute the reduction ``tensor`` as ``factor`` partial reductions combined pairwise,
        as a GPU work group reduces in ``shared`` memory.

        ``factor`` is a power of two. The first new stage ``<name>_rf`` has the data axes and
        one more of extent ``factor``: lane ``t`` reduces the elements ``t, t + factor, ...``
        (the lanes past the end start from the reduction's initial value). Several reduce axes
        are taken as one, in row-major order (the last the fastest: neighbouring lanes read
        neighbouring elements where the reduced axes are a tensor's innermost), each axis's
        index recovered with ``//`` and ``%``. Each next stage
        ``<name>_rf1``, ``<name>_rf2``, ... combines lane ``t`` with lane ``t + half`` over half
        as many lanes, and ``tensor`` becomes the combination of the last two lanes. Returns
        the new stages' tensors, first to last, for the caller to place: typically each
        computed at the work group's loop in ``shared`` scope with its lane axis bound to
        ``threadIdx.x``, so that each step is one barrier apart.

        >>> from relaybench import te
        >>> A = te.placeholder((2, 10), name="A")
        >>> k = te.reduce_axis(10, name="k")
        >>> S = te.compute((2,), lambda i: te.sum(A[i, k], axis=[k]), name="S")
        >>> s = te.create_schedule(S)
        >>> [t.name for t in s.tree_reduce(S, 4)]
        ['S_rf', 'S_rf1']
        >>> print(te.lower(s, [A], name="row_sum"))
        def row_sum(A: Buffer((2, 10), "float32"), S: Buffer((2,), "float32")):
            S_rf = allocate((2, 4), "float32")
            S_rf1 = allocate((2, 2), "float32")
            for i_rf in serial(2):
                for lane in serial(4):
                    S_rf[i_rf, lane] = 0.0
                    for k_outer in serial(3):
                        S_rf[i_rf, lane] = S_rf[i_rf, lane] + select(k_outer * 4 + lane < 10, A[i_rf, k_outer * 4 + lane], 0.0)
            for i_rf in serial(2):
                for lane in serial(2):
                    S_rf1[i_rf, lane] = S_rf[i_rf, lane] + S_rf[i_rf, lane + 2]
            for i in serial(2):
                S[i] = S_rf1[i, 0] + S_rf1[i, 1]
        """
        from relaybench.te.loop_ir import const, select, substitute
        from relaybench.te.tensor import Reduce

        op = self.op_of(tensor)
        stage = self[tensor]
        factor = int(factor)
        if not isinstance(op, ComputeOp) or not isinstance(op.body, Reduce) \
                or not op.reduce_axis:
            raise CompileError(f"schedule: tree_reduce of {op.name}: a reduction is needed")
        if factor < 2 or factor & (factor - 1):
            raise CompileError(f"schedule: tree_reduce of {op.name}: the factor must be a power "
                               f"of two from 2, got {factor}")
        if stage.relations or stage.kinds or stage.attach or stage.inlined:
            raise CompileError(f"schedule: tree_reduce of {op.name}: call it before scheduling "
                               "the stage")
        body = op.body
        reduced = list(op.reduce_axis)
        extent = 1
        for k in reduced:
            extent *= int(k.extent)
        from relaybench.te.compute import _COMBINERS
        combine = _COMBINERS[body.combiner]
        data = tuple(IterVar(f"{a.name}_rf", "int64", a.extent, "data") for a in op.axis)
        lane = IterVar("lane", "int64", factor, "data")
        name = "_".join(k.name for k in reduced)
        outer = IterVar(f"{name}_outer", "int64", -(-extent // factor), "reduce")
        index = outer * factor + lane
        positions, stride = {}, extent
        for i, k in enumerate(reduced):
            stride //= int(k.extent)
            position = index // stride if stride > 1 else index
            positions[k] = position if i == 0 else position % int(k.extent)
        source = substitute(body.source, {**dict(zip(op.axis, data)), **positions})
        if extent % factor:
            source = select(index < extent, source, body.init)
        from relaybench.te.tensor import TensorLoad
        first = ComputeOp(f"{op.name}_rf", data + (lane,),
                          Reduce(body.combiner, source, (outer,), body.init, body.dtype),
                          op.output.shape + (factor,))
        made, last, width = [first], first, factor // 2
        while width >= 2:
            axes = tuple(IterVar(f"{a.name}_rf", "int64", a.extent, "data") for a in op.axis)
            t = IterVar("lane", "int64", width, "data")
            prev = last.output
            value = combine(TensorLoad(prev, axes + (t,), prev.dtype),
                            TensorLoad(prev, axes + (t + width,), prev.dtype))
            last = ComputeOp(f"{op.name}_rf{len(made)}", axes + (t,), value,
                             op.output.shape + (width,))
            made.append(last)
            width //= 2
        prev = last.output
        value = combine(TensorLoad(prev, tuple(op.axis) + (const(0),), prev.dtype),
                        TensorLoad(prev, tuple(op.axis) + (const(1),), prev.dtype))
        final = ComputeOp(op.name, op.axis, value, op.output.shape)
        self._replace(op, final)
        return [m.output for m in made]

    def rfactor(self, tensor: Tensor, factor: int) -> Tensor:
        """Split the reduction ``tensor`` in ``factor`` partial reductions over slices of its
        first reduce axis, then reduce the partials (TVM's ``rfactor``, the split-K of a GPU
        kernel whose outputs are too few to fill the device).

        The new stage ``<name>_rf`` has one more data axis, first, of extent ``factor``: lane
        ``t`` reduces the first reduce axis over its ``t``-th slice of ``ceil(extent / factor)``
        elements (the lanes past the end start from the reduction's initial value), and every
        other reduce axis whole. ``tensor`` becomes the reduction of ``<name>_rf`` over the
        lanes. Returns the new stage's tensor, for the caller to place (computed at the root,
        one work item per partial, its lanes the outermost so that neighbouring work items
        read neighbouring addresses).

        >>> from relaybench import te
        >>> A = te.placeholder((2, 10), name="A")
        >>> k = te.reduce_axis(10, name="k")
        >>> S = te.compute((2,), lambda i: te.sum(A[i, k], axis=[k]), name="S")
        >>> s = te.create_schedule(S)
        >>> s.rfactor(S, 4).name
        'S_rf'
        >>> print(te.lower(s, [A], name="row_sum"))
        def row_sum(A: Buffer((2, 10), "float32"), S: Buffer((2,), "float32")):
            S_rf = allocate((4, 2), "float32")
            for lane in serial(4):
                for i_rf in serial(2):
                    S_rf[lane, i_rf] = 0.0
                    for k_inner in serial(3):
                        S_rf[lane, i_rf] = S_rf[lane, i_rf] + select(lane * 3 + k_inner < 10, A[i_rf, lane * 3 + k_inner], 0.0)
            for i in serial(2):
                S[i] = 0.0
                for lane_r in serial(4):
                    S[i] = S[i] + S_rf[lane_r, i]
        """
        from relaybench.te.loop_ir import select, substitute
        from relaybench.te.tensor import Reduce, TensorLoad

        op = self.op_of(tensor)
        stage = self[tensor]
        factor = int(factor)
        if not isinstance(op, ComputeOp) or not isinstance(op.body, Reduce) \
                or not op.reduce_axis:
            raise CompileError(f"schedule: rfactor of {op.name}: a reduction is needed")
        if factor < 2:
            raise CompileError(f"schedule: rfactor of {op.name}: the factor must be 2 or more, "
                               f"got {factor}")
        if stage.relations or stage.kinds or stage.attach or stage.inlined:
            raise CompileError(f"schedule: rfactor of {op.name}: call it before scheduling the "
                               "stage")
        body = op.body
        k, rest = op.reduce_axis[0], op.reduce_axis[1:]
        chunk = -(-int(k.extent) // factor)
        data = tuple(IterVar(f"{a.name}_rf", "int64", a.extent, "data") for a in op.axis)
        lane = IterVar("lane", "int64", factor, "data")
        inner = IterVar(f"{k.name}_inner", "int64", chunk, "reduce")
        others = tuple(IterVar(a.name, "int64", a.extent, "reduce") for a in rest)
        index = lane * chunk + inner
        source = substitute(body.source, {**dict(zip(op.axis, data)), k: index,
                                          **dict(zip(rest, others))})
        if chunk * factor != int(k.extent):
            source = select(index < k.extent, source, body.init)
        partial = ComputeOp(f"{op.name}_rf", (lane,) + data,
                            Reduce(body.combiner, source, (inner,) + others, body.init,
                                   body.dtype),
                            (factor,) + tuple(op.output.shape))
        lanes = IterVar("lane_r", "int64", factor, "reduce")
        value = TensorLoad(partial.output, (lanes,) + tuple(op.axis), body.dtype)
        final = ComputeOp(op.name, op.axis,
                          Reduce(body.combiner, value, (lanes,), body.init, body.dtype),
                          op.output.shape)
        self._replace(op, final)
        return partial.output

    def cache_read(self, tensor: Tensor, scope: str, readers) -> Tensor:
        """A copy stage ``<name>_<scope>`` of ``tensor`` that ``readers`` (tensors or stages)
        read instead of ``tensor``; its stage keeps ``scope``.

        As in TVM: ``compute_at`` the copy inside a loop of its reader, and only the region
        that loop's iteration reads is copied, into a buffer of that region's shape. With
        ``scope="shared"`` and the copy's loops bound to threads, the threads of a work group
        fill a tile together, and lowering puts a :class:`~relaybench.te.loop_ir.Barrier`
        after the fill, and after the reader's use unless the loop is bound to work groups.
        (On a device, the sum below, outside any thread loop, is made by the group's first
        work item: see :mod:`relaybench.backends.opencl.codegen`.)

        >>> from relaybench import te
        >>> A = te.placeholder((4, 8), name="A")
        >>> k = te.reduce_axis(8, name="k")
        >>> S = te.compute((4,), lambda i: te.sum(A[i, k], axis=[k]), name="S")
        >>> s = te.create_schedule(S)
        >>> AS = s.cache_read(A, "shared", [S])
        >>> s[S].bind(S.op.axis[0], "blockIdx.x")
        >>> s[AS].compute_at(s[S], S.op.axis[0])
        >>> s[AS].bind(AS.op.axis[1], "threadIdx.x")
        >>> print(te.lower(s, [A], name="row_sum"))
        def row_sum(A: Buffer((4, 8), "float32"), S: Buffer((4,), "float32")):
            for i in blockIdx.x(4):
                A_shared = allocate((1, 8), "float32", "shared")
                for A_shared_i1 in threadIdx.x(8):
                    A_shared[0, A_shared_i1] = A[i, A_shared_i1]
                barrier()
                S[i] = 0.0
                for k in serial(8):
                    S[i] = S[i] + A_shared[0, k]
        """
        from relaybench.te.loop_ir import SCOPES, map_children
        from relaybench.te.tensor import TensorLoad

        if scope not in SCOPES:
            raise CompileError(f"schedule: cache_read of {tensor.name}: unknown scope {scope!r}; "
                               f"expected one of {', '.join(SCOPES)}")
        source = self.op_of(tensor)
        if source not in self.stages:
            raise CompileError(f"schedule: cache_read of {tensor.name}: not read by these "
                               "outputs")
        fresh = tuple(IterVar(f"i{d}", "int64", extent, "data")
                      for d, extent in enumerate(tensor.shape))
        cache = ComputeOp(f"{tensor.name}_{scope}", fresh, tensor[fresh], tensor.shape)
        readers = readers if isinstance(readers, (list, tuple)) else [readers]
        for reader in readers:
            old = self.op_of(reader.op if isinstance(reader, Stage) else reader)
            if not isinstance(old, ComputeOp) or old not in self.stages:
                raise CompileError(f"schedule: cache_read of {tensor.name}: the reader "
                                   f"{getattr(old, 'name', old)} is not a compute stage here")
            if source not in {self.op_of(t) for t in old.inputs}:
                raise CompileError(f"schedule: cache_read of {tensor.name}: {old.name} does not "
                                   f"read it")
            memo: dict = {}

            def visit(node, memo=memo):
                if node in memo:
                    return memo[node]
                out = map_children(node, visit)
                if isinstance(out, TensorLoad) and self.op_of(out.tensor) is source:
                    out = TensorLoad(cache.output, out.indices, out.dtype)
                memo[node] = out
                return out

            new = ComputeOp(old.name, old.axis, visit(old.body), old.output.shape)
            for original, now in list(self.replaced.items()):
                if now is old:
                    self.replaced[original] = new
            self.replaced[old] = new
            stage = self.stages.pop(old)
            stage.op = new
            self.stages[new] = stage
        self.ops = _post_order(self.outputs, self.op_of)
        stages = {}
        for each in self.ops:
            stages[each] = self.stages.get(each) or Stage(each)
        self.stages = stages
        stages[cache].scope = scope
        return cache.output


def _post_order(outputs, op_of) -> list:
    """Operations reachable from ``outputs``, producers before consumers (iteratively)."""
    order, done = [], set()
    stack = [(op_of(t), False) for t in reversed(outputs)]
    while stack:
        op, expanded = stack.pop()
        if op in done:
            continue
        if expanded:
            done.add(op)
            order.append(op)
            continue
        stack.append((op, True))
        for tensor in reversed(op.inputs):
            if op_of(tensor) not in done:
                stack.append((op_of(tensor), False))
    return order


def create_schedule(outputs) -> Schedule:
    """The default schedule of ``outputs`` (a tensor or a list): one loop nest per stage."""
    return Schedule(outputs)

