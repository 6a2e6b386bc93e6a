"""Schedules: how each compute stage's loops are split, reordered, fused, annotated or inlined.

A :class:`Schedule` holds one :class:`Stage` per operation reachable from its outputs. A stage
starts with one loop per output axis followed by one per reduce axis; its primitives replace leaf
axes by new ones and record the relation, so lowering can recover every original index from the
loop variables (``i = i_outer * 4 + i_inner`` after a split, ``i = f // 8``, ``j = f % 8`` after a
fuse). A split whose factor does not divide the extent adds a guard around the loop body.
``compute_inline`` substitutes a stage into its readers; ``compute_at`` computes a producer inside
one loop of its consumer, over the region that loop's iteration reads, into a buffer of that
region's size; ``Schedule.cache_write`` moves a stage's computation into a new stage whose
result the original one copies.

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

    def vectorize(self, axis: IterVar):
        """Mark ``axis`` vectorized."""
        self._annotate(axis, "vectorized")

    def parallel(self, axis: IterVar):
        """Mark ``axis`` parallel."""
        self._annotate(axis, "parallel")

    def unroll(self, axis: IterVar):
        """Mark ``axis`` unrolled."""
        self._annotate(axis, "unrolled")

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
        for original, now in list(self.replaced.items()):
            if now is op:
                self.replaced[original] = copy
        self.replaced[op] = copy
        self.ops = _post_order(self.outputs, self.op_of)
        stages = {}
        for each in self.ops:
            stages[each] = self.stages.get(each) or Stage(each)
        self.stages = stages
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

