"""Converters of ONNX's control flow: ``If`` becomes Relay's ``if``; ``Loop`` and ``Scan`` are
either unrolled into the program or become recursive Relay functions, as the import option
``loops=`` asks:

* ``loops="unroll"`` (the default): ``Scan``, whose number of steps is static, is unrolled, and
  so is a ``Loop`` whose iterations are known at import time, so that the graph executor can
  compile them; a ``Loop`` whose trip count or condition depends on the data becomes a
  recursive function;
* ``loops="recursive"``: every ``Loop`` and ``Scan`` becomes a recursive function, never
  unrolled: the program stays the size of its body whatever the number of iterations.

A recursive function is Relay's way of writing a loop: a local ``let %loop = fn (...)`` that
calls itself with the next iteration's values, and returns them when the loop ends; the
interpreter and the VM run it. Scan outputs (the per-iteration values that ONNX stacks) are
accumulated by concatenating each iteration's value along the output axis to an accumulator
whose extent on that axis is ``?``, started empty; a ``Scan``'s accumulators are reshaped back to
their static extent at the end. Loop-carried values whose shape changes from one iteration to
the next get a type with ``?`` for the dims that change (the body is imported again over the
widened types until they agree).

The branches are subgraphs that read values of the enclosing graph by name; the walker imports
each in a scope that sees those values (``ctx.subgraph``), so a branch is an ordinary Relay
expression over the enclosing program's variables. Relay's ``if`` takes a scalar bool, ONNX's a
one-element tensor, which is reshaped. When the condition is known at import time only the
branch taken is imported.
"""

from __future__ import annotations

import numpy as np

from ... import op
from ...ir.expr import Call, Constant, Function, If, Let, Tuple, TupleGetItem, Var
from ...ir.symbolic import ANY
from ...ir.types import FuncType, TensorType, TupleType
from .importer import OnnxImportError

#: The values of the ``loops=`` import option.
LOOP_MODES = ("unroll", "recursive")


def if_(ctx, inputs, attrs):
    cond = inputs[0]
    count = len(ctx.node.output)
    known = ctx.try_static(cond)
    if known is not None:
        taken = attrs["then_branch"] if bool(known.reshape(-1)[0]) else attrs["else_branch"]
        out = ctx.subgraph(taken, [])
    else:
        if ctx.rank(cond) != 0:
            cond = op.reshape(cond, newshape=())
        if ctx.dtype(cond) != "bool":
            cond = op.cast(cond, dtype="bool")
        then = ctx.subgraph(attrs["then_branch"], [])
        other = ctx.subgraph(attrs["else_branch"], [])
        out = If(cond, then, other)
    if count == 1:
        return out
    if isinstance(out, Tuple):
        return list(out.fields)
    return [TupleGetItem(out, i) for i in range(count)]


# ---- helpers of the recursive forms ------------------------------------------------------------

def _fields(out) -> list:
    return list(out.fields) if isinstance(out, Tuple) else [out]


def _int64(value: int) -> Constant:
    return Constant(np.asarray(value, np.int64))


def _scalar(expr, dtype: str, ctx):
    """A one-element tensor as a scalar of ``dtype``."""
    if ctx.rank(expr) != 0:
        expr = op.reshape(expr, newshape=())
    if ctx.dtype(expr) != dtype:
        expr = op.cast(expr, dtype=dtype)
    return expr


def _join(a, b):
    """The type that holds values of tensor types ``a`` and ``b``: the dims that differ become
    ``?``; None when the dtypes or ranks differ."""
    if a == b:
        return a
    if not (isinstance(a, TensorType) and isinstance(b, TensorType)) or a.dtype != b.dtype \
            or len(a.shape) != len(b.shape):
        return None
    return TensorType(tuple(x if x == y else ANY for x, y in zip(a.shape, b.shape)), a.dtype)


def _fixed_point(ctx, what: str, types: list, import_body):
    """Import a body over variables of ``types`` (``import_body(vars) -> (carried outputs,
    other outputs)``) until the carried outputs' types are the variables' types, widening the
    dims that change to ``?``. Returns ``(vars, carried outputs, other outputs)``."""
    for _ in range(2 + max([len(t.shape) for t in types if isinstance(t, TensorType)] or [0])):
        vars_ = [Var(f"{what}{j}", t) for j, t in enumerate(types)]
        carried, others = import_body(vars_)
        widened = []
        for j, (t, f) in enumerate(zip(types, carried)):
            joined = _join(t, ctx.type(f))
            if joined is None:
                ctx.fail(f"{what} value {j} changes from {t} to {ctx.type(f)} in an iteration; "
                         f"a recursive loop keeps each value's dtype and rank")
            widened.append(joined)
        if widened == types:
            return vars_, carried, others
        types = widened
    ctx.fail(f"the types of the {what} values do not settle")


def _accumulator(ctx, y, axis: int, j: int):
    """The type of scan output ``j``'s accumulator (``y``'s type with a ``?`` inserted at
    ``axis``) and its empty start."""
    t = ctx.type(y)
    if not isinstance(t, TensorType):
        ctx.fail(f"scan output {j} is not a tensor ({t})")
    rank = len(t.shape) + 1
    if not -rank <= axis < rank:
        ctx.fail(f"scan output {j}: axis {axis} is out of range for rank {rank}")
    axis %= rank
    if not all(isinstance(d, int) for d in t.shape):
        ctx.fail(f"scan output {j} has shape {tuple(str(d) for d in t.shape)}; a recursive loop "
                 f"needs the per-iteration shape of its scan outputs known at import time")
    shape = list(t.shape)
    empty = Constant(np.zeros(shape[:axis] + [0] + shape[axis:], dtype=t.dtype))
    return TensorType(tuple(shape[:axis]) + (ANY,) + tuple(shape[axis:]), t.dtype), empty, axis


def _append(acc, y, axis: int, reverse: bool):
    """The accumulator with this iteration's scan output added at the end (at the front for a
    reversed output)."""
    item = op.expand_dims(y, axis=axis)
    return op.concatenate([item, acc] if reverse else [acc, item], axis=axis)


# ---- Scan ----------------------------------------------------------------------------------------

def scan(ctx, inputs, attrs):
    """Scan: the body runs once per slice of the scan inputs, carrying its state variables from
    step to step; the scan outputs are the steps' outputs stacked along their axis. The number
    of steps is the static extent of the scanned axis. Under ``loops="unroll"`` the steps are
    unrolled into the program in order; under ``loops="recursive"`` they are a recursive
    function over the step index (:func:`_recursive_scan`). Scan-8 has a leading batch axis on
    every input and output and optional ``sequence_lens``: each batch element is scanned on
    its own (its length known at import time) and the results are stacked."""
    if ctx.version < 9:
        return _scan8(ctx, inputs, attrs)
    body = attrs["body"]
    m = attrs["num_scan_inputs"]
    n = len(inputs) - m
    if n < 0:
        ctx.fail(f"num_scan_inputs={m} but the node has {len(inputs)} inputs")
    k = len(body.output) - n
    return _scan_core(ctx, body, list(inputs[:n]), list(inputs[n:]),
                      attrs.get("scan_input_axes", [0] * m),
                      attrs.get("scan_input_directions", [0] * m),
                      attrs.get("scan_output_axes", [0] * k),
                      attrs.get("scan_output_directions", [0] * k), None)


def _scan_core(ctx, body, states, scanned, in_axes, in_dirs, out_axes, out_dirs, steps):
    n, m = len(states), len(scanned)
    k = len(body.output) - n
    if k < 0 or len(body.input) != n + m:
        ctx.fail(f"the body has {len(body.input)} inputs and {len(body.output)} outputs for "
                 f"{n} state and {m} scan inputs")
    axes = []
    for j, (a, x) in enumerate(zip(in_axes, scanned)):
        rank = ctx.rank(x)
        if not -rank <= a < rank:
            ctx.fail(f"scan input {j}: axis {a} is out of range for rank {rank}")
        axes.append(a % rank)
    if steps is None:
        lengths = {ctx.shape(x)[a] for x, a in zip(scanned, axes)}
        if len(lengths) != 1 or not isinstance(next(iter(lengths)), int):
            ctx.fail(f"the scan inputs' scanned extents {sorted(map(str, lengths))} must be one "
                     f"static number")
        steps = lengths.pop()
    if ctx.loops == "recursive":
        return _recursive_scan(ctx, body, states, scanned, axes, in_dirs, out_axes, out_dirs,
                               steps)
    collected = [[] for _ in range(k)]
    for t in range(steps):
        slices = []
        for x, a, d in zip(scanned, axes, in_dirs):
            i = steps - 1 - t if d else t
            slices.append(op.squeeze(op.strided_slice(x, begin=(i,), end=(i + 1,), axes=(a,)),
                                     axis=[a]))
        fields = _fields(ctx.subgraph(body, states + slices))
        states = fields[:n]
        for j in range(k):
            collected[j].append(fields[n + j])
    results = list(states)
    for j in range(k):
        if not collected[j]:
            ctx.fail(f"scan output {j} of a scan of no steps has no known shape")
        items = collected[j][::-1] if out_dirs[j] else collected[j]
        rank = ctx.rank(items[0]) + 1
        results.append(op.stack(items, axis=out_axes[j] % rank))
    return results


def _recursive_scan(ctx, body, states, scanned, axes, in_dirs, out_axes, out_dirs, steps: int):
    """Scan as a local function ``%scan(%step, %state..., %acc...)``: while ``%step < steps`` it
    takes the step's slice of every scan input (index ``step``, or ``steps - 1 - step`` for a
    reversed input) along its axis, runs the body, appends the scan outputs to their
    accumulators and calls itself with the next step; then it returns the states and the
    accumulators, which are reshaped to their static extents."""
    n = len(states)
    step = Var("step", TensorType((), "int64"))
    slices = []
    for x, a, d in zip(scanned, axes, in_dirs):
        index = op.subtract(_int64(steps - 1), step) if d else step
        slices.append(op.take(x, index, axis=a))

    def import_body(vars_):
        fields = _fields(ctx.subgraph(body, vars_ + slices))
        return fields[:n], fields[n:]
    vars_, new_states, ys = _fixed_point(ctx, "state", [ctx.type(s) for s in states], import_body)
    accs, starts, acc_axes, acc_vars = [], [], [], []
    for j, y in enumerate(ys):
        t, empty, axis = _accumulator(ctx, y, out_axes[j], j)
        acc_vars.append(Var(f"scan_output{j}", t))
        starts.append(empty)
        acc_axes.append(axis)
        accs.append(_append(acc_vars[j], y, axis, bool(out_dirs[j])))
    types = [v.type_annotation for v in vars_ + acc_vars]
    result_t = TupleType(tuple(types))
    scan_var = Var("scan", FuncType([step.type_annotation] + types, result_t))
    again = Call(scan_var, [op.add(step, _int64(1))] + new_states + accs)
    fn = Function([step] + vars_ + acc_vars,
                  If(op.less(step, _int64(steps)), again, Tuple(vars_ + acc_vars)), result_t)
    result = Let(scan_var, fn, Call(scan_var, [_int64(0)] + list(states) + starts))
    outs = [TupleGetItem(result, j) for j in range(n)]
    for j, (v, axis) in enumerate(zip(acc_vars, acc_axes)):
        shape = list(v.type_annotation.shape)
        shape[axis] = steps
        outs.append(op.reshape(TupleGetItem(result, n + j), newshape=tuple(shape)))
    return outs


def _scan8(ctx, inputs, attrs):
    """Scan-8: ``(sequence_lens, states..., scan inputs...)``, every tensor with a leading batch
    axis and the scan inputs scanned along axis 1. Each batch element is scanned on its own
    over its sequence length (``sequence_lens`` known at import time, or the full extent) and
    its scan outputs are padded with zeros to the full extent; the elements are stacked."""
    body = attrs["body"]
    m = attrs["num_scan_inputs"]
    lens, rest = inputs[0] if inputs else None, list(inputs[1:])
    n = len(rest) - m
    if n < 0:
        ctx.fail(f"num_scan_inputs={m} but the node has {len(inputs)} inputs")
    states, scanned = rest[:n], rest[n:]
    k = len(body.output) - n
    dirs = attrs.get("directions", [0] * m)
    if not scanned:
        ctx.fail("Scan-8 needs at least one scan input")
    for j, x in enumerate(states + scanned):
        if ctx.rank(x) < (2 if j >= n else 1):
            ctx.fail(f"input {j + 1} has rank {ctx.rank(x)}; Scan-8's inputs have a batch axis")
    batch, full = ctx.shape(scanned[0])[0], ctx.shape(scanned[0])[1]
    if not (isinstance(batch, int) and isinstance(full, int)):
        ctx.fail(f"the batch and sequence extents ({batch}, {full}) must be known at import time")
    if lens is None:
        lengths = [full] * batch
    else:
        lengths = [int(v) for v in np.asarray(ctx.static(lens, "sequence_lens")).reshape(-1)]
        if len(lengths) != batch or not all(0 <= v <= full for v in lengths):
            ctx.fail(f"sequence_lens {lengths} must give {batch} lengths within 0 ... {full}")

    def row(x, b):
        return op.take(x, _int64(b), axis=0)
    per_batch = []
    for b in range(batch):
        xs = [row(x, b) for x in scanned]
        if lengths[b] != full:
            xs = [op.strided_slice(x, begin=(0,), end=(lengths[b],), axes=(0,)) for x in xs]
        outs = _scan_core(ctx, body, [row(s, b) for s in states], xs, [0] * m, dirs,
                          [0] * k, [0] * k, lengths[b])
        for j in range(k):
            y = outs[n + j]
            missing = full - lengths[b]
            if missing:
                pad = [(0, missing)] + [(0, 0)] * (ctx.rank(y) - 1)
                outs[n + j] = op.nn.pad(y, pad_width=pad)
        per_batch.append(outs)
    return [op.stack([outs[j] for outs in per_batch], axis=0) for j in range(n + k)]


# ---- Loop ----------------------------------------------------------------------------------------

def _recursive_loop(ctx, body, trip, cond, carried: list):
    """Loop as Relay writes a loop: a local function ``%loop(%i, %cond, %v..., %acc...)`` that
    returns the carried values and the scan outputs' accumulators when the condition is false
    or the trip count is reached, and otherwise runs the body and calls itself with the body's
    condition and values, each scan output appended to its accumulator (stacked along a new
    first axis of extent ``?``). A carried value whose shape changes between iterations is
    typed with ``?`` for the dims that change."""
    n = len(carried)
    i_var = Var("iteration", TensorType((), "int64"))
    c_var = Var("cond", TensorType((), "bool"))
    flag = []

    def import_body(vars_):
        fields = _fields(ctx.subgraph(body, [i_var, c_var] + vars_))
        flag[:] = fields[:1]
        return fields[1:1 + n], fields[1 + n:]
    vars_, new_carried, ys = _fixed_point(ctx, "carried", [ctx.type(v) for v in carried],
                                          import_body)
    acc_vars, starts, accs = [], [], []
    for j, y in enumerate(ys):
        t, empty, _ = _accumulator(ctx, y, 0, j)
        acc_vars.append(Var(f"scan_output{j}", t))
        starts.append(empty)
        accs.append(_append(acc_vars[j], y, 0, False))
    types = [v.type_annotation for v in vars_ + acc_vars]
    result_t = TupleType(tuple(types))
    loop_var = Var("loop", FuncType([i_var.type_annotation, c_var.type_annotation] + types,
                                    result_t))
    go = c_var
    if trip is not None:
        go = op.logical_and(go, op.less(i_var, _scalar(trip, "int64", ctx)))
    again = Call(loop_var, [op.add(i_var, _int64(1)), _scalar(flag[0], "bool", ctx)]
                 + new_carried + accs)
    fn = Function([i_var, c_var] + vars_ + acc_vars, If(go, again, Tuple(vars_ + acc_vars)),
                  result_t)
    start = Constant(np.asarray(True)) if cond is None else _scalar(cond, "bool", ctx)
    call = Call(loop_var, [_int64(0), start] + list(carried) + starts)
    return Let(loop_var, fn, call)


def loop(ctx, inputs, attrs):
    """Loop. Under ``loops="unroll"``, a loop with a trip count known at import time and a
    condition that stays known is unrolled, each iteration imported with the previous one's
    carried values, and its scan outputs stacked; any other loop (and every loop under
    ``loops="recursive"``) becomes a recursive function (:func:`_recursive_loop`)."""
    body = attrs["body"]
    trip = inputs[0] if inputs else None
    cond = inputs[1] if len(inputs) > 1 else None
    carried = list(inputs[2:])
    n = len(carried)
    k = len(body.output) - 1 - n
    if k < 0 or len(body.input) != 2 + n:
        ctx.fail(f"the body has {len(body.input)} inputs and {len(body.output)} outputs for "
                 f"{n} loop-carried values")
    static_trip = trip is None or ctx.try_static(trip) is not None
    static_cond = cond is None or ctx.try_static(cond) is not None
    if ctx.loops == "recursive" or not (static_trip and static_cond) \
            or not _condition_is_static(ctx, body, carried):
        try:
            result = _recursive_loop(ctx, body, trip, cond, carried)
        except OnnxImportError:
            # a body that needs the iteration number at import time (a Slice at it, say) can
            # only be unrolled: ask for the trip count and condition as values
            if ctx.loops == "unroll" and not static_trip:
                ctx.static(trip, "M")
            if ctx.loops == "unroll" and not static_cond:
                ctx.static(cond, "cond")
            raise
        if ctx.loops == "unroll":
            # what a caller can bind to values to have this loop unrolled instead
            ctx.importer.loop_bounds.extend(ctx.importer.name_of(v) for v, known in
                                            ((trip, static_trip), (cond, static_cond))
                                            if not known)
        return [TupleGetItem(result, j) for j in range(n + k)]
    count = None if trip is None else int(np.asarray(ctx.static(trip, "M")).reshape(-1)[0])
    go = True if cond is None else bool(np.asarray(ctx.static(cond, "cond")).reshape(-1)[0])
    collected = [[] for _ in range(k)]
    i = 0
    while go and (count is None or i < count):
        if i >= 10000:
            ctx.fail("more than 10000 iterations to unroll (import with loops='recursive')")
        fields = _fields(ctx.subgraph(body, [Constant(np.asarray(i, dtype=np.int64)),
                                             Constant(np.asarray(go))] + carried))
        flag = ctx.try_static(fields[0])
        if flag is None:
            ctx.fail("the loop condition depends on the data; only loops whose iterations are "
                     "known at import time are unrolled")
        go = bool(np.asarray(flag).reshape(-1)[0])
        carried = fields[1:1 + n]
        for j in range(k):
            collected[j].append(fields[1 + n + j])
        i += 1
    results = list(carried)
    for j in range(k):
        if not collected[j]:
            ctx.fail("a scan output of a loop that runs no iteration has no known shape")
        results.append(op.stack(collected[j], axis=0))
    return results


def _condition_is_static(ctx, body, carried: list) -> bool:
    """Whether the body's condition output is known at import time whatever the carried values
    are (imported once over stand-in variables)."""
    stand_ins = [Var(f"v{j}", ctx.type(c)) for j, c in enumerate(carried)]
    try:
        out = ctx.subgraph(body, [Constant(np.asarray(0, np.int64)), Constant(np.asarray(True))]
                           + stand_ins)
    except Exception:
        return False
    first = out.fields[0] if isinstance(out, Tuple) else out
    return ctx.try_static(first) is not None
