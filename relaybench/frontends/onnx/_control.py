"""Converters of ONNX's control flow: ``If`` becomes Relay's ``if``; ``Scan``, whose number of
steps is static, is unrolled; ``Loop`` is unrolled when its iterations are known at import time,
and otherwise becomes a recursive Relay function (a local ``let`` of a function that calls
itself), which the interpreter and the VM run.

The branches are subgraphs that read values of the enclosing graph by name; the walker imports
each in a scope that sees those values (``ctx.subgraph``), so a branch is an ordinary Relay
expression over the enclosing program's variables. Relay's ``if`` takes a scalar bool, ONNX's a
one-element tensor, which is reshaped. When the condition is known at import time only the
branch taken is imported.
"""

from __future__ import annotations

from ... import op
from ...ir.expr import If, Tuple, TupleGetItem


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


def scan(ctx, inputs, attrs):
    """Scan (opset 9 on): the body runs once per slice of the scan inputs, carrying its state
    variables from step to step. The number of steps is the static extent of the scanned
    axis, so the steps are unrolled into the program in order (each one the body imported
    with the previous step's states and this step's slices); the scan outputs are the steps'
    outputs stacked along their axis."""
    if ctx.version < 9:
        ctx.fail("Scan-8 (with a batch axis and sequence_lens) is not supported")
    body = attrs["body"]
    m = attrs["num_scan_inputs"]
    n = len(inputs) - m
    states, scanned = list(inputs[:n]), list(inputs[n:])
    in_axes = attrs.get("scan_input_axes", [0] * m)
    in_dirs = attrs.get("scan_input_directions", [0] * m)
    k = len(body.output) - n
    out_axes = attrs.get("scan_output_axes", [0] * k)
    out_dirs = attrs.get("scan_output_directions", [0] * k)
    axes = [a % ctx.rank(x) for a, x in zip(in_axes, scanned)]
    lengths = {ctx.shape(x)[a] for x, a in zip(scanned, axes)}
    if len(lengths) != 1 or not isinstance(next(iter(lengths)), int):
        ctx.fail(f"the scan inputs' scanned extents {sorted(map(str, lengths))} must be one "
                 f"static number")
    steps = lengths.pop()
    collected = [[] for _ in range(k)]
    for t in range(steps):
        slices = []
        for x, a, d in zip(scanned, axes, in_dirs):
            i = steps - 1 - t if d else t
            slices.append(op.squeeze(op.strided_slice(x, begin=(i,), end=(i + 1,), axes=(a,)),
                                     axis=[a]))
        out = ctx.subgraph(body, states + slices)
        fields = list(out.fields) if isinstance(out, Tuple) else [out]
        states = fields[:n]
        for j in range(k):
            collected[j].append(fields[n + j])
    results = list(states)
    for j in range(k):
        items = collected[j][::-1] if out_dirs[j] else collected[j]
        rank = ctx.rank(items[0]) + 1
        results.append(op.stack(items, axis=out_axes[j] % rank))
    return results


def _scalar(expr, dtype: str, ctx):
    """A one-element tensor as a scalar of ``dtype``."""
    if ctx.rank(expr) != 0:
        expr = op.reshape(expr, newshape=())
    if ctx.dtype(expr) != dtype:
        expr = op.cast(expr, dtype=dtype)
    return expr


def _recursive_loop(ctx, body, trip, cond, carried: list):
    """Loop whose iterations depend on the data, as Relay writes a loop: a local function
    ``%loop(%i, %cond, %v...)`` that returns the carried values when the condition is false or
    the trip count is reached, and otherwise runs the body and calls itself with the body's
    condition and values. The carried values keep their types from one iteration to the next
    (ONNX allows a shape to change; relaybench then reports it)."""
    import numpy as np
    from ...ir.expr import Call, Constant, Function, If, Let, Var
    from ...ir.types import FuncType, TensorType, TupleType
    types = [ctx.type(v) for v in carried]
    i_var = Var("iteration", TensorType((), "int64"))
    c_var = Var("cond", TensorType((), "bool"))
    vars_ = [Var(f"carried{j}", t) for j, t in enumerate(types)]
    result_t = TupleType(tuple(types))
    loop_var = Var("loop", FuncType([i_var.type_annotation, c_var.type_annotation] + types,
                                    result_t))
    out = ctx.subgraph(body, [i_var, c_var] + vars_)
    fields = list(out.fields) if isinstance(out, Tuple) else [out]
    if len(fields) != 1 + len(carried):
        ctx.fail("a loop with scan outputs must have its iterations known at import time")
    for j, (f, t) in enumerate(zip(fields[1:], types)):
        if ctx.type(f) != t:
            ctx.fail(f"loop-carried value {j} changes from {t} to {ctx.type(f)} in an iteration; "
                     f"relaybench's recursive loop keeps each value's type")
    go = c_var
    if trip is not None:
        go = op.logical_and(go, op.less(i_var, _scalar(trip, "int64", ctx)))
    again = Call(loop_var, [op.add(i_var, Constant(np.asarray(1, np.int64))),
                            _scalar(fields[0], "bool", ctx)] + fields[1:])
    fn = Function([i_var, c_var] + vars_, If(go, again, Tuple(vars_)), result_t)
    start = Constant(np.asarray(True)) if cond is None else _scalar(cond, "bool", ctx)
    call = Call(loop_var, [Constant(np.asarray(0, np.int64)), start] + carried)
    return Let(loop_var, fn, call)


def loop(ctx, inputs, attrs):
    """Loop with a trip count known at import time and a condition that stays known: the body
    is unrolled, each iteration imported with the previous one's carried values; the scan
    outputs are stacked. Otherwise (a trip count or a condition that depends on the data) the
    loop becomes a recursive function (:func:`_recursive_loop`), when it has no scan
    outputs."""
    import numpy as np
    from ...ir.expr import Constant
    body = attrs["body"]
    trip = inputs[0] if inputs else None
    cond = inputs[1] if len(inputs) > 1 else None
    carried = list(inputs[2:])
    n = len(carried)
    k = len(body.output) - 1 - n
    static_trip = trip is None or ctx.try_static(trip) is not None
    static_cond = cond is None or ctx.try_static(cond) is not None
    if k == 0 and (not (static_trip and static_cond)
                   or not _condition_is_static(ctx, body, carried)):
        result = _recursive_loop(ctx, body, trip, cond, carried)
        return [TupleGetItem(result, j) for j in range(n)]
    count = None if trip is None else int(np.asarray(ctx.static(trip, "M")).reshape(-1)[0])
    go = True if cond is None else bool(np.asarray(ctx.static(cond, "cond")).reshape(-1)[0])
    collected = [[] for _ in range(k)]
    i = 0
    while go and (count is None or i < count):
        if i >= 10000:
            ctx.fail("more than 10000 iterations to unroll")
        out = ctx.subgraph(body, [Constant(np.asarray(i, dtype=np.int64)),
                                  Constant(np.asarray(go))] + carried)
        fields = list(out.fields) if isinstance(out, Tuple) else [out]
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
    import numpy as np
    from ...ir.expr import Constant, Var
    stand_ins = [Var(f"v{j}", ctx.type(c)) for j, c in enumerate(carried)]
    try:
        out = ctx.subgraph(body, [Constant(np.asarray(0, np.int64)), Constant(np.asarray(True))]
                           + stand_ins)
    except Exception:
        return False
    first = out.fields[0] if isinstance(out, Tuple) else out
    return ctx.try_static(first) is not None
