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
outside the tensor are guarded.

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
from relaybench.te.loop_ir import (Allocate, Binary, Buffer, For, IfThenElse, IntImm, Load,
                                   PrimFunc, Store, Var, map_children, seq, substitute)
from relaybench.te.schedule import Fuse, Schedule, Split, Stage, create_schedule
from relaybench.te.tensor import ComputeOp, IterVar, PlaceholderOp, Reduce, Tensor, TensorLoad

__all__ = ["lower"]

_COMBINE = {
    "sum": lambda acc, x: acc + x,
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
    output_ops = {t.op for t in schedule.outputs}
    for op in schedule.ops:
        if isinstance(op, PlaceholderOp) and op not in input_ops:
            raise CompileError(f"lower {name}: the placeholder {op.name} is read but is not "
                               "among the inputs")
        if op in output_ops and schedule[op].inlined:
            raise CompileError(f"lower {name}: the output {op.name} cannot be inlined")
        attach = schedule[op].attach if isinstance(op, ComputeOp) else None
        if attach is not None and (attach[0].inlined or attach[0].op not in schedule.stages):
            raise CompileError(f"lower {name}: {op.name} is computed at {attach[0].op.name}, "
                               "which is inlined or not part of these outputs")

    buffers: dict = {}
    used_names: set = set()
    params = []
    for tensor in inputs + list(schedule.outputs):
        if tensor.op in buffers:
            raise CompileError(f"lower {name}: {tensor.name} is given twice")
        buffers[tensor.op] = Buffer(tensor.name, tensor.shape, tensor.dtype)
        used_names.add(tensor.name)
        params.append(buffers[tensor.op])
    temporaries = []
    for op in schedule.ops:
        if op not in buffers and not schedule[op].inlined:
            unique, n = op.name, 0
            while unique in used_names:
                n += 1
                unique = f"{op.name}_{n}"
            used_names.add(unique)
            buffers[op] = Buffer(unique, op.output.shape, op.output.dtype)
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


class _Lowering:
    def __init__(self, schedule: Schedule, buffers: dict, name: str):
        self.schedule = schedule
        self.buffers = buffers
        self.name = name
        self.inlined_bodies: dict = {}

    # ---- expressions: TensorLoad -> Load, inlined producers substituted
    def materialize(self, expr):
        memo: dict = {}

        def visit(node):
            if node in memo:
                return memo[node]
            if isinstance(node, TensorLoad):
                indices = tuple(visit(i) for i in node.indices)
                op = node.tensor.op
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
        return self.emit(stage, leaves, roots, guards, stage.kinds)

    def emit(self, stage: Stage, leaves, roots, guards, kinds):
        """The loop nest of ``stage`` over ``leaves``; ``roots`` gives each original axis."""
        op = stage.op
        buffer = self.buffers[op]
        index = tuple(roots[axis] for axis in op.axis)
        body = op.body
        if not isinstance(body, Reduce):
            value = substitute(self.materialize(body), roots)
            inserts = self.attached_nests(stage, leaves, value)
            return self.nest(kinds, leaves, self.guard(guards, Store(buffer, index, value)),
                             inserts)

        source = substitute(self.materialize(body.source), roots)
        inserts = self.attached_nests(stage, leaves, source)
        update = Store(buffer, index, _COMBINE[body.combiner](Load(buffer, index), source))
        first_reduce = next(p for p, leaf in enumerate(leaves) if leaf.iter_kind == "reduce")
        outer, inner = leaves[:first_reduce], leaves[first_reduce:]
        init = Store(buffer, index, body.init)
        data_guards = [g for g in guards if g[0] == "data"]
        init_nest = self.nest(kinds, [v for v in inner if v.iter_kind == "data"],
                              self.guard(data_guards, init), {})
        update_nest = self.nest(kinds, inner, self.guard(guards, update), inserts)
        return self.nest(kinds, outer, seq(init_nest, update_nest), inserts)

    # ---- compute_at
    def attached_nests(self, consumer: Stage, leaves, reads) -> dict:
        """The nests of the stages attached to ``consumer``, keyed by the loop they go in."""
        inserts: dict = {}
        for op in self.schedule.ops:
            stage = self.schedule[op]
            if stage.attach is None or stage.attach[0] is not consumer:
                continue
            where = f"lower {self.name}: compute_at of {op.name} in {consumer.op.name}"
            axis = stage.attach[1]
            position = next((p for p, leaf in enumerate(leaves) if leaf is axis), None)
            if position is None:
                raise CompileError(f"{where}: {axis.name} is no longer one of its loops")
            if consumer.attach is not None:
                raise CompileError(f"{where}: {consumer.op.name} is itself attached elsewhere")
            if list(stage.leaf_iter_vars) != list(op.axis) + list(op.reduce_axis):
                raise CompileError(f"{where}: an attached stage cannot be split, fused or "
                                   "reordered")
            readers = [o.name for o in self.schedule.ops
                       if isinstance(o, ComputeOp) and not self.schedule[o].inlined
                       and op in self.reads_through_inlined(o)]
            if readers != [consumer.op.name] or op in self.output_ops:
                raise CompileError(f"{where}: {op.name} must be read by {consumer.op.name} "
                                   f"only and not be an output (read by {readers})")
            fixed = set(leaves[:position + 1])
            inserts.setdefault(axis, []).append(self.region_nest(stage, reads, fixed, where))
        return inserts

    def reads_through_inlined(self, op) -> set:
        """The operations ``op`` reads, looking through the inlined ones."""
        found, stack = set(), [t.op for t in op.inputs]
        while stack:
            producer = stack.pop()
            if producer in found:
                continue
            found.add(producer)
            if self.schedule[producer].inlined:
                stack.extend(t.op for t in producer.inputs)
        return found

    def region_nest(self, stage: Stage, reads, fixed: set, where: str):
        op = stage.op
        buffer = self.buffers[op]
        loads = _loads_of(reads, buffer)
        if not loads:
            raise CompileError(f"{where}: the consumer does not read {op.name} directly")
        roots, guards, kinds, new_vars = {}, [], {}, []
        for d, axis in enumerate(op.axis):
            forms = []
            for load in loads:
                form = _linear(load.indices[d])
                if form is None:
                    raise CompileError(f"{where}: index {load.indices[d]} of {op.name} is not "
                                       "affine in the loop variables")
                forms.append(form)
            outer_forms = [{v: c for v, c in coefs.items() if v in fixed} for coefs, _ in forms]
            if any(f != outer_forms[0] for f in outer_forms[1:]):
                raise CompileError(f"{where}: reads of {op.name} along axis {d} move "
                                   "differently with the outer loops")
            inner_spans = [_span({v: c for v, c in coefs.items() if v not in fixed}, const)
                           for coefs, const in forms]
            whole_spans = [_span(coefs, const) for coefs, const in forms]
            low = min(lo for lo, _ in inner_spans)
            high = max(hi for _, hi in inner_spans)
            start = loop_ir.const(low)
            for v, c in outer_forms[0].items():
                start = v * c + start
            if high == low:  # one element along this axis: no loop
                roots[axis] = start
            else:
                var = IterVar(f"{op.name}_{axis.name}", "int64", high - low + 1, "data")
                new_vars.append(var)
                roots[axis] = start + var
                kinds[var] = stage.kinds.get(axis, "serial")
            if min(lo for lo, _ in whole_spans) < 0:
                guards.append(("data", roots[axis] >= 0))
            if max(hi for _, hi in whole_spans) >= axis.extent:
                guards.append(("data", roots[axis] < axis.extent))
        for axis in op.reduce_axis:
            roots[axis] = axis
            kinds[axis] = stage.kinds.get(axis, "serial")
        leaves = new_vars + list(op.reduce_axis)
        return self.emit(stage, leaves, roots, guards, kinds)

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
        for leaf in reversed(loops):
            if leaf in inserts:
                body = seq(*inserts[leaf], body)
            body = For(leaf, 0, leaf.extent, kinds.get(leaf, "serial"), body)
        return body


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
        map_children(node, lambda c: stack.append(c) or c)
    return found


def _linear(expr):
    """``expr`` as ``({var: coefficient}, constant)`` when it is affine with integer constants."""
    if isinstance(expr, IntImm):
        return {}, expr.value
    if isinstance(expr, Var):
        return {expr: 1}, 0
    if isinstance(expr, Binary) and expr.op in ("+", "-", "*"):
        a, b = _linear(expr.a), _linear(expr.b)
        if a is None or b is None:
            return None
        if expr.op == "*":
            if a[0] and b[0]:
                return None
            coefs, c0 = (a if a[0] else b)
            factor = b[1] if a[0] else a[1]
            return {v: c * factor for v, c in coefs.items()}, c0 * factor
        sign = 1 if expr.op == "+" else -1
        coefs = dict(a[0])
        for v, c in b[0].items():
            coefs[v] = coefs.get(v, 0) + sign * c
        return {v: c for v, c in coefs.items() if c}, a[1] + sign * b[1]
    return None


def _span(coefs: dict, const: int) -> tuple:
    """The least and greatest value of ``const + sum(c * v)`` with each ``v`` in its range."""
    low = high = const
    for v, c in coefs.items():
        reach = c * (v.extent - 1)
        low += min(0, reach)
        high += max(0, reach)
    return low, high
