"""Lowering tensor expressions to loop IR.

``lower(outputs_or_schedule, inputs, name)`` gives a :class:`~relaybench.te.loop_ir.PrimFunc`
whose parameters are the input buffers then the output buffers. Each stage that is not inlined
becomes one loop nest over its leaf axes, in producer-before-consumer order; intermediate stages
live in ``allocate``'d temporaries. A reduction stores its initial value, then updates the element
inside the reduce loops; the initialisation sits just outside the first reduce loop (over the
output loops that come after it, when a reorder put some inside). Stages marked
``compute_inline`` are substituted into their readers. A stage placed with ``compute_at`` is
computed inside its consumer's loop, over the region that one iteration of that loop reads: the
reads' indices are taken as affine forms of the loop variables, the loops outside (and including)
the attachment point fixed and the ones inside ranging over their extents; bounds that may fall
outside the tensor are guarded. Its buffer has the region's shape and is allocated at that
loop; every read of it becomes ``index - start`` per axis, written over the inner loop variables
only (``conv[0, 0, conv_ow, conv_oc_i]``), so that unrolled inner loops read constant offsets
and a code generator can keep a small accumulator tile in registers. A stage may be attached
inside a stage that is itself attached (a GPU work item's accumulators computed at its thread
loop, the ``shared`` tiles they read at their reduction's outer loop); the region of a
``shared`` stage is taken over every value of the fixed loops bound to ``threadIdx``, since
the work group fills it together for all its work items.

>>> from relaybench import te
>>> A = te.placeholder((2, 3), name="A")
>>> k = te.reduce_axis(3, name="k")
>>> S = te.compute((2,), lambda i: te.sum(A[i, k], axis=[k]), name="S")
>>> print(lower([S], [A], name="row_sum"))
def row_sum(A: Buffer((2, 3), "float32"), S: Buffer((2,), "float32")):
    for i in serial(2):
        S[i] = 0.0
        for k in serial(3):
            S[i] = S[i] + A[i, k]
"""

from __future__ import annotations

from relaybench.errors import CompileError
from relaybench.te import loop_ir
from relaybench.te.loop_ir import (Allocate, Barrier, Binary, Buffer, For, IfThenElse, IntImm,
                                   Load, PrimFunc, Store, Var, children, free_vars, map_children,
                                   seq, substitute)
from relaybench.te.schedule import Fuse, Schedule, Split, Stage, create_schedule
from relaybench.te.tensor import ComputeOp, IterVar, PlaceholderOp, Reduce, Tensor, TensorLoad

__all__ = ["lower", "ComputeAtError"]


class ComputeAtError(CompileError):
    """A ``compute_at`` that lowering cannot carry out: the region its readers use cannot be
    inferred (an index that is not affine in the loop variables even over their ranges, as a
    read through an index tensor; reads that move differently with the outer loops, as
    ``y + transpose(y)``) or the attachment itself is inconsistent. A strategy can then schedule
    the group again without attaching the stage (computed at the root, into a whole buffer)."""

_COMBINE = {
    "sum": lambda acc, x: acc + x,
    "prod": lambda acc, x: acc * x,
    "max": loop_ir.max_expr,
    "min": loop_ir.min_expr,
}


def lower(outputs, inputs, name: str = "main") -> PrimFunc:
    """Lower ``outputs`` (a tensor, a list of tensors, or a Schedule) to a PrimFunc.

    ``inputs`` lists the placeholders, in parameter order; every placeholder the outputs read
    must be among them.
    """
    schedule = outputs if isinstance(outputs, Schedule) else create_schedule(outputs)
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    for tensor in inputs:
        if not isinstance(tensor, Tensor) or not isinstance(tensor.op, PlaceholderOp):
            raise CompileError(f"lower {name}: input {tensor!r} is not a placeholder")
    input_ops = {t.op for t in inputs}
    output_ops = {schedule.op_of(t) for t in schedule.outputs}
    for op in schedule.ops:
        if isinstance(op, PlaceholderOp) and op not in input_ops:
            raise CompileError(f"lower {name}: the placeholder {op.name} is read but is not "
                               "among the inputs")
        if op in output_ops and schedule[op].inlined:
            raise CompileError(f"lower {name}: the output {op.name} cannot be inlined")
        attach = schedule[op].attach if isinstance(op, ComputeOp) else None
        if attach is not None and (attach[0].inlined or attach[0].op not in schedule.stages):
            raise ComputeAtError(f"lower {name}: {op.name} is computed at {attach[0].op.name}, "
                                 "which is inlined or not part of these outputs")
        seen, chain = {op}, attach
        while chain is not None:  # a stage attached in an attached stage: no cycle
            if chain[0].op in seen:
                raise ComputeAtError(f"lower {name}: compute_at of {op.name}: the stages are "
                                     "attached in a cycle")
            seen.add(chain[0].op)
            chain = chain[0].attach

    buffers: dict = {}
    used_names: set = set()
    params = []
    for tensor in inputs + list(schedule.outputs):
        op = schedule.op_of(tensor)
        if op in buffers:
            raise CompileError(f"lower {name}: {tensor.name} is given twice")
        buffers[op] = Buffer(tensor.name, tensor.shape, tensor.dtype)
        used_names.add(tensor.name)
        params.append(buffers[op])
    temporaries = []
    for op in schedule.ops:
        if op not in buffers and not schedule[op].inlined:
            unique, n = op.name, 0
            while unique in used_names:
                n += 1
                unique = f"{op.name}_{n}"
            used_names.add(unique)
            buffers[op] = Buffer(unique, op.output.shape, op.output.dtype)
            if schedule[op].attach is None:  # attached stages allocate their region locally
                temporaries.append(buffers[op])

    lowering = _Lowering(schedule, buffers, name)
    lowering.output_ops = output_ops
    nests = [lowering.stage(schedule[op]) for op in schedule.ops
             if isinstance(op, ComputeOp) and not schedule[op].inlined
             and schedule[op].attach is None]
    body = seq(*nests)
    for buffer in reversed(temporaries):
        body = Allocate(buffer, body)
    return PrimFunc(name, params, body)


class _Region:
    """Where an attached stage is computed: its local buffer and, per axis, the region's start
    as ``({fixed loop variable: coefficient}, low)``."""

    def __init__(self, op, position, fixed, local, starts):
        self.op = op
        self.position = position
        self.fixed = fixed
        self.local = local
        self.starts = starts


class _Lowering:
    def __init__(self, schedule: Schedule, buffers: dict, name: str):
        self.schedule = schedule
        self.buffers = buffers
        self.name = name
        self.inlined_bodies: dict = {}
        self.loop_kinds: dict = {}  # loop variable -> its kind (serial, threadIdx.x, ...)

    # ---- expressions: TensorLoad -> Load, inlined producers substituted
    def materialize(self, expr):
        memo: dict = {}

        def visit(node):
            if node in memo:
                return memo[node]
            if isinstance(node, TensorLoad):
                indices = tuple(visit(i) for i in node.indices)
                op = self.schedule.op_of(node.tensor)
                if self.schedule[op].inlined:
                    out = substitute(self.inlined_body(op), dict(zip(op.axis, indices)))
                else:
                    out = Load(self.buffers[op], indices)
            elif isinstance(node, Reduce):
                raise CompileError(f"lower {self.name}: a reduction inside an expression")
            else:
                out = map_children(node, visit)
            memo[node] = out
            return out

        return visit(expr)

    def inlined_body(self, op: ComputeOp):
        if op not in self.inlined_bodies:
            self.inlined_bodies[op] = self.materialize(op.body)
        return self.inlined_bodies[op]

    # ---- one stage
    def stage(self, stage: Stage):
        leaves = stage.leaf_iter_vars
        values = {leaf: leaf for leaf in leaves}
        guards = []  # (root-kind, condition), for splits that do not divide their extent
        for relation in reversed(stage.relations):
            if isinstance(relation, Split):
                values[relation.parent] = (values[relation.outer] * relation.factor
                                           + values[relation.inner])
            elif isinstance(relation, Fuse):
                fused = values[relation.fused]
                values[relation.outer] = fused // relation.inner.extent
                values[relation.inner] = fused % relation.inner.extent
        for relation in stage.relations:
            if isinstance(relation, Split) and (relation.outer.extent * relation.factor
                                                != relation.parent.extent):
                guards.append((relation.parent.iter_kind,
                               values[relation.parent] < relation.parent.extent))
        op = stage.op
        roots = {axis: values[axis] for axis in tuple(op.axis) + tuple(op.reduce_axis)}
        value = self.stage_value(op, roots)
        inserts, value = self.attached_nests(stage, leaves, value, stage.kinds)
        index = tuple(roots[axis] for axis in op.axis)
        return self.emit(op, leaves, value, self.buffers[op], index, guards, stage.kinds, inserts)

    def stage_value(self, op: ComputeOp, roots: dict):
        """The stage's body (its reduction's source) with loads and the loop values in place."""
        body = op.body.source if isinstance(op.body, Reduce) else op.body
        return substitute(self.materialize(body), roots)

    def emit(self, op: ComputeOp, leaves, value, buffer, index, guards, kinds, inserts):
        """The loop nest over ``leaves`` storing ``value`` (a reduction's source) at ``index``."""
        body = op.body
        inserts = _guard_inserts(leaves, guards, inserts, kinds)
        if not isinstance(body, Reduce):
            return self.nest(kinds, leaves, self.guard(guards, Store(buffer, index, value)),
                             inserts)
        if any(kinds.get(leaf) == "tensorized" for leaf in leaves):
            leaves, value = self.tensorized(op, leaves, value, kinds)
        update = Store(buffer, index, _COMBINE[body.combiner](Load(buffer, index), value))
        first_reduce = next((p for p, leaf in enumerate(leaves) if leaf.iter_kind == "reduce"),
                            len(leaves))
        outer, inner = leaves[:first_reduce], leaves[first_reduce:]
        init = Store(buffer, index, body.init)
        data_guards = [g for g in guards if g[0] == "data"]
        init_nest = self.nest(kinds, [v for v in inner if v.iter_kind == "data"],
                              self.guard(data_guards, init), {})
        update_nest = self.nest(kinds, inner, self.guard(guards, update), inserts)
        return self.nest(kinds, outer, seq(init_nest, update_nest), inserts)

    def tensorized(self, op: ComputeOp, leaves, value, kinds):
        """The leaves without the tensorized (innermost reduce) loop, and the reduction's
        source as one :class:`~relaybench.te.loop_ir.DotSum` over it."""
        where = f"lower {self.name}: tensorize of {op.name}"
        axis = leaves[-1]
        if kinds.get(axis) != "tensorized":
            axis = next(leaf for leaf in leaves if kinds.get(leaf) == "tensorized")
            raise CompileError(f"{where}: {axis.name} must be the innermost loop (it is inside "
                               f"{leaves[-1].name})")
        if op.body.combiner != "sum":
            raise CompileError(f"{where}: dot_sum needs a sum, not a {op.body.combiner}")
        if not (isinstance(value, Binary) and value.op == "*"):
            raise CompileError(f"{where}: dot_sum needs a product as the summed value, got "
                               f"{loop_ir.to_text(value)}")
        return leaves[:-1], loop_ir.dot_sum(axis, axis.extent, value.a, value.b)

    # ---- compute_at
    def attached_nests(self, consumer: Stage, leaves, value, kinds, outer_fixed=frozenset(),
                       leaf_map=None):
        """The nests of the stages attached to ``consumer``, keyed by the loop they go in, and
        ``value`` with its reads of them made region-relative.

        Regions are inferred readers first: the consumer's value, then each attached stage's
        body in its region (so a stage may be read by another attached stage inside its loop).
        ``consumer`` may itself be attached: ``leaves`` are then its loops in its region,
        ``leaf_map`` maps its leaf axes to them, and ``outer_fixed`` are the loops outside it
        (its consumer's, up to where it is attached). The region of a ``shared`` stage is
        relaxed over the fixed loops bound to ``threadIdx``: it holds what the whole work
        group reads, not one work item, since the group fills it together.
        """
        attached = [op for op in self.schedule.ops
                    if isinstance(op, ComputeOp) and self.schedule[op].attach is not None
                    and self.schedule[op].attach[0] is consumer]
        if not attached:
            return {}, value
        self.loop_kinds.update({leaf: kinds.get(leaf, "serial") for leaf in leaves})
        attached_buffers = {self.buffers[op] for op in attached}
        value = _affine_reads(value, attached_buffers)
        readers = {consumer.op: (len(leaves), value)}  # op -> (attach position, its values)
        regions, nests = {}, {}
        for op in reversed(attached):  # consumers before their producers
            stage = self.schedule[op]
            where = f"lower {self.name}: compute_at of {op.name} in {consumer.op.name}"
            axis = stage.attach[1]
            loop = leaf_map.get(axis) if leaf_map is not None else axis
            if loop is None:
                raise ComputeAtError(f"{where}: {axis.name} spans one element of the region of "
                                     f"{consumer.op.name}, so it has no loop there; attach "
                                     "at a loop of more than one iteration")
            position = next((p for p, leaf in enumerate(leaves) if leaf is loop), None)
            if position is None:
                raise ComputeAtError(f"{where}: {axis.name} is no longer one of its loops")
            names = [o.name for o in self.schedule.ops
                     if isinstance(o, ComputeOp) and not self.schedule[o].inlined
                     and op in self.reads_through_inlined(o)]
            buffer = self.buffers[op]
            loads = []
            for reader, (at, reads) in readers.items():
                found = _loads_of(reads, buffer)
                if found and at < position:
                    raise ComputeAtError(f"{where}: its reader {reader.name} is computed outside "
                                         f"the {axis.name} loop")
                loads.extend(found)
            if (op in self.output_ops or not loads
                    or any(n not in {r.name for r in readers} for n in names)):
                raise ComputeAtError(f"{where}: {op.name} must be read by {consumer.op.name} "
                                     "only (or by stages attached to it inside that loop) and "
                                     f"not be an output (read by {names})")
            fixed = set(leaves[:position + 1]) | set(outer_fixed)
            if stage.scope == "shared":
                fixed = {v for v in fixed
                         if not str(self.loop_kinds.get(v, "")).startswith("threadIdx")}
            region, nest_of = self.region(stage, loads, fixed, position, where)
            nest_of = (nest_of[0], _affine_reads(nest_of[1], attached_buffers))
            regions[buffer] = region
            nests[op] = nest_of
            readers[op] = (position, nest_of[1])
        rewrite = _RegionRewriter(regions)
        inserts: dict = {}
        for op in attached:
            stage = self.schedule[op]
            region = regions[self.buffers[op]]
            builder, reads = nests[op]
            inserts.setdefault(stage.attach[1], []).append(
                (region.local, builder(rewrite(reads))))
        return inserts, rewrite(value)

    def reads_through_inlined(self, op) -> set:
        """The operations ``op`` reads, looking through the inlined ones."""
        op_of = self.schedule.op_of
        found, stack = set(), [op_of(t) for t in op.inputs]
        while stack:
            producer = stack.pop()
            if producer in found:
                continue
            found.add(producer)
            if self.schedule[producer].inlined:
                stack.extend(op_of(t) for t in producer.inputs)
        return found

    def region(self, stage: Stage, loads, fixed: set, position: int, where: str):
        """The region of ``stage`` that ``loads`` read with the ``fixed`` loops fixed; gives the
        :class:`_Region` and ``(build, values)``: its body's values in the region and the
        function that makes its loop nest from them (once the values' reads are rewritten)."""
        op = stage.op
        buffer = self.buffers[op]
        extents, starts, global_guards = {}, [], []
        for d, axis in enumerate(op.axis):
            forms = []
            for load in loads:
                form = _linear(load.indices[d], fixed)
                if form is None:
                    raise ComputeAtError(f"{where}: index {load.indices[d]} of {op.name} is not "
                                         "affine in the loop variables")
                forms.append(form)
            outer_forms = [{v: c for v, c in coefs.items() if _is_fixed(v, fixed)}
                           for coefs, _ in forms]
            if any(f != outer_forms[0] for f in outer_forms[1:]):
                raise ComputeAtError(f"{where}: reads of {op.name} along axis {d} move "
                                     "differently with the outer loops")
            inner_spans = [_span({v: c for v, c in coefs.items() if not _is_fixed(v, fixed)},
                                 const) for coefs, const in forms]
            whole_spans = [_span(coefs, const) for coefs, const in forms]
            low = min(lo for lo, _ in inner_spans)
            high = max(hi for _, hi in inner_spans)
            extents[axis] = high - low + 1
            starts.append((outer_forms[0], low))
            global_guards.append((min(lo for lo, _ in whole_spans) < 0,
                                  max(hi for _, hi in whole_spans) >= axis.extent))
        for axis in op.reduce_axis:
            extents[axis] = axis.extent
        # The stage's own loops, with the region's extents.
        guards = []
        for relation in stage.relations:
            if isinstance(relation, Split):
                whole = extents[relation.parent]
                if whole <= relation.factor:
                    extents[relation.outer], extents[relation.inner] = 1, whole
                else:
                    extents[relation.outer] = -(-whole // relation.factor)
                    extents[relation.inner] = relation.factor
            elif isinstance(relation, Fuse):
                extents[relation.fused] = extents[relation.outer] * extents[relation.inner]
        values, leaves, kinds = {}, [], {}
        loop_of = {}
        for leaf in stage.leaf_iter_vars:
            kind = stage.kinds.get(leaf, "serial")
            if leaf.iter_kind == "reduce":
                loop = leaf if extents[leaf] == leaf.extent else IterVar(
                    leaf.name, "int64", extents[leaf], "reduce")
            elif extents[leaf] == 1:
                values[leaf] = loop_ir.const(0)
                continue
            else:
                loop = IterVar(f"{op.name}_{leaf.name}", "int64", extents[leaf], "data")
            values[leaf] = loop
            loop_of[leaf] = loop
            leaves.append(loop)
            kinds[loop] = kind
        for relation in reversed(stage.relations):
            if isinstance(relation, Split):
                if extents[relation.outer] == 1:
                    values[relation.parent] = values[relation.inner]
                else:
                    values[relation.parent] = (values[relation.outer] * relation.factor
                                               + values[relation.inner])
            elif isinstance(relation, Fuse):
                fused, inner = values[relation.fused], extents[relation.inner]
                values[relation.outer] = fused // inner
                values[relation.inner] = fused % inner
        for relation in stage.relations:
            if isinstance(relation, Split) and (extents[relation.outer] * extents[relation.inner]
                                                != extents[relation.parent]):
                guards.append((relation.parent.iter_kind,
                               values[relation.parent] < extents[relation.parent]))
        roots, local_index = {}, []
        for d, axis in enumerate(op.axis):
            coefs, low = starts[d]
            start = loop_ir.const(low)
            for v, c in coefs.items():
                start = (v.expr if isinstance(v, _Opaque) else v) * c + start
            roots[axis] = start + values[axis]
            local_index.append(values[axis])
            below, above = global_guards[d]
            if below:
                guards.append(("data", roots[axis] >= 0))
            if above:
                guards.append(("data", roots[axis] < axis.extent))
        for axis in op.reduce_axis:
            roots[axis] = values[axis]
        if not any(leaf.iter_kind == "reduce" for leaf in leaves) and op.reduce_axis:
            raise ComputeAtError(f"{where}: the reduction has no reduce loop left")
        local = Buffer(buffer.name, tuple(extents[a] for a in op.axis), buffer.dtype,
                       stage.scope)
        region = _Region(op, position, fixed, local, starts)
        reads = self.stage_value(op, roots)
        index = tuple(local_index)
        # stages attached in this one: their regions are fixed by the loops outside it too
        inserts, reads = self.attached_nests(stage, leaves, reads, kinds, fixed, loop_of)

        def build(rewritten):
            return self.emit(op, leaves, rewritten, local, index, guards, kinds, inserts)

        return region, (build, reads)

    @staticmethod
    def guard(guards, stmt):
        if not guards:
            return stmt
        cond = guards[0][1]
        for _, more in guards[1:]:
            cond = loop_ir.logical_and(cond, more)
        return IfThenElse(cond, stmt)

    @staticmethod
    def nest(kinds, loops, body, inserts):
        """Loops around ``body``; ``inserts[loop]`` lists ``(buffer, nest)`` pairs computed at
        the top of that loop's body, each in its own buffer allocated there. A ``shared`` buffer
        is filled by the threads of a work group together: a barrier follows the fill (every
        part is written before any is read; fills one after another that do not read each
        other share one) and, unless the loop is bound to work groups (each runs one
        iteration), the use (no thread refills it while another still reads it, when the loop
        goes round again)."""
        for leaf in reversed(loops):
            once = kinds.get(leaf, "serial").startswith("blockIdx")
            items = list(inserts.get(leaf, ()))
            # a barrier before the first statement that reads a shared buffer filled since the
            # last one (independent fills wait at one barrier together), and before the body
            barrier_after, pending = [False] * len(items), []
            for k, (buffer, stmt) in enumerate(items):
                if pending and any(_loads_of(stmt, b) for b in pending):
                    barrier_after[k - 1], pending = True, []
                if buffer.scope == "shared":
                    pending.append(buffer)
            if pending:
                barrier_after[-1] = True
            first_shared = next((k for k, (buffer, _) in enumerate(items)
                                 if buffer.scope == "shared"), None)
            for k in reversed(range(len(items))):
                buffer, stmt = items[k]
                body = Allocate(buffer, seq(
                    stmt, Barrier() if barrier_after[k] else None, body,
                    Barrier() if k == first_shared and not once else None))
            body = For(leaf, 0, leaf.extent, kinds.get(leaf, "serial"), body)
        return body


def _guard_inserts(leaves, guards, inserts, kinds) -> dict:
    """``inserts`` with each stage computed at a loop of the consumer put under the consumer's
    guards (data splits that do not divide their extent) that the loops out to that one decide:
    the consumer's iterations past the end read nothing, so their producers need not run (on
    a GPU, the work items past the end of a launch; loop nests with no loop bound to the GPU's
    axes are left as they were). Nests that fill ``shared`` buffers (or hold any barrier) stay
    unguarded: all the work items of a group fill them together, between barriers, and their
    reads are guarded by their own regions."""
    data = [(kind, cond) for kind, cond in guards if kind == "data"]
    if not data or not inserts or not any(str(kinds.get(leaf, "")).startswith(
            ("threadIdx", "blockIdx")) for leaf in leaves):
        return inserts    # CPU loop nests keep their code as it was
    out, seen = {}, set()
    for leaf in leaves:
        seen.add(leaf)
        items = inserts.get(leaf)
        if not items:
            continue
        decided = [g for g in data if free_vars(g[1]) <= seen]
        out[leaf] = [(buffer, stmt if not decided or _synchronizes(buffer, stmt)
                      else _Lowering.guard(decided, stmt)) for buffer, stmt in items]
    return out


def _synchronizes(buffer, stmt) -> bool:
    """Whether ``buffer`` is ``shared`` or ``stmt`` holds a barrier or a ``shared`` buffer."""
    if buffer.scope == "shared":
        return True
    stack = [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, Barrier) or (isinstance(node, Allocate)
                                          and node.buffer.scope == "shared"):
            return True
        stack.extend(children(node))
    return False


class _RegionRewriter:
    """Replaces loads of attached stages' whole-tensor buffers by loads of their local buffers,
    at ``index - start`` per axis, written over the loop variables inside the attachment."""

    def __init__(self, regions: dict):
        self.regions = regions

    def __call__(self, expr):
        memo: dict = {}

        def visit(node):
            if node in memo:
                return memo[node]
            out = map_children(node, visit)
            if isinstance(out, Load) and out.buffer in self.regions:
                region = self.regions[out.buffer]
                indices = []
                for index, (_, low) in zip(out.indices, region.starts):
                    coefs, const = _linear(index, region.fixed)
                    local = None
                    for v, c in coefs.items():
                        if not _is_fixed(v, region.fixed):
                            term = v if c == 1 else v * c
                            local = term if local is None else local + term
                    offset = loop_ir.const(const - low)
                    local = offset if local is None else local + offset
                    indices.append(local)
                out = Load(region.local, tuple(indices))
            memo[node] = out
            return out

        return visit(expr)


def _affine_reads(expr, buffers: set):
    """``expr`` with the indices of its loads of ``buffers`` that are not affine simplified over
    the ranges of their loop variables: an injective reader such as ``tile`` with one repetition
    reads ``(f // 7 * 8 + c) % 32``, which is ``f // 7 * 8 + c`` when that stays below 32, an
    affine form once the fused loop ``f`` is fixed, so the region of an attached stage can still
    be inferred. (Indices that stay non-affine make lowering raise :class:`ComputeAtError`.)"""
    from relaybench.te.simplify import simplify

    memo: dict = {}

    def visit(node):
        if node in memo:
            return memo[node]
        out = map_children(node, visit)
        if isinstance(out, Load) and out.buffer in buffers:
            indices, changed = [], False
            for index in out.indices:
                if _linear(index) is None:
                    ranges = {v: (0, v.extent - 1) for v in free_vars(index)
                              if isinstance(v, IterVar)}
                    index, changed = simplify(index, ranges), True
                indices.append(index)
            if changed:
                out = Load(out.buffer, tuple(indices))
        memo[node] = out
        return out

    return visit(expr)


def _loads_of(expr, buffer) -> list:
    """Every Load of ``buffer`` in ``expr``."""
    found, stack, seen = [], [expr], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Load) and node.buffer is buffer:
            found.append(node)
        stack.extend(children(node))
    return found


class _Opaque:
    """A term of an index that only the fixed (outer) loops move, in any form (``f % 14`` of a
    fused parallel loop): one coefficient-1 term of the affine form, with its bounds."""

    def __init__(self, expr, bounds):
        self.expr = expr
        self.key = loop_ir.to_text(expr)
        self.bounds = bounds

    def __hash__(self):
        return hash(self.key)

    def __eq__(self, other):
        return isinstance(other, _Opaque) and other.key == self.key


def _is_fixed(v, fixed) -> bool:
    return isinstance(v, _Opaque) or v in fixed


def _opaque(expr, fixed):
    """``expr`` as one opaque term when every variable in it is a fixed loop, else None."""
    if not fixed:
        return None
    variables = free_vars(expr)
    if not variables or not all(v in fixed and isinstance(v, IterVar) for v in variables):
        return None
    from relaybench.te.simplify import bounds
    b = bounds(expr, {v: (0, v.extent - 1) for v in variables})
    return None if b is None else ({_Opaque(expr, b): 1}, 0)


def _linear(expr, fixed=frozenset()):
    """``expr`` as ``({var: coefficient}, constant)`` when it is affine with integer constants;
    a part that only ``fixed`` loops move may take any form (an :class:`_Opaque` term)."""
    if isinstance(expr, IntImm):
        return {}, expr.value
    if isinstance(expr, Var):
        return {expr: 1}, 0
    if isinstance(expr, Binary) and expr.op in ("+", "-", "*"):
        a, b = _linear(expr.a, fixed), _linear(expr.b, fixed)
        if a is None or b is None:
            return _opaque(expr, fixed)
        if expr.op == "*":
            if a[0] and b[0]:
                return _opaque(expr, fixed)
            coefs, c0 = (a if a[0] else b)
            factor = b[1] if a[0] else a[1]
            return {v: c * factor for v, c in coefs.items()}, c0 * factor
        sign = 1 if expr.op == "+" else -1
        coefs = dict(a[0])
        for v, c in b[0].items():
            coefs[v] = coefs.get(v, 0) + sign * c
        return {v: c for v, c in coefs.items() if c}, a[1] + sign * b[1]
    return _opaque(expr, fixed)


def _span(coefs: dict, const: int) -> tuple:
    """The least and greatest value of ``const + sum(c * v)`` with each ``v`` in its range."""
    low = high = const
    for v, c in coefs.items():
        lo, hi = v.bounds if isinstance(v, _Opaque) else (0, v.extent - 1)
        low += min(c * lo, c * hi)
        high += max(c * lo, c * hi)
    return low, high
