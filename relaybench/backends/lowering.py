"""Lowering a fused group (a ``Primitive=1`` function made by FuseOps) to loop IR.

``lower_primitive(func, target)`` builds the group's tensor expressions, one operator ``compute``
per call (the target's strategy may substitute its own compute for the anchor, as TVM's x86
``conv2d_NCHWc`` does; a compute registered above level 0, :func:`relaybench.op.register_compute`,
replaces both), hands them to the target's strategy, which inlines the injective and
elementwise stages into the anchor and schedules it, and lowers the schedule to a
:class:`~relaybench.te.loop_ir.PrimFunc`. The anchor is the call of the highest pattern kind among
those whose values the outputs read (``ones_like(nn.conv2d(...))`` reads only the convolution's
shape, so its anchor is ``ones_like``); when the rule's ``compute_at`` cannot be lowered, the
group is scheduled again with the anchor computed at the root. Index arithmetic is then simplified
(:mod:`relaybench.te.simplify`) so that blocked layouts read memory with affine offsets.

The PrimFunc's parameters are, in order: one buffer per tensor of the function's parameters
(tuple parameters flattened), one per non-scalar constant of the body (their values are in
``LoweredFunc.constants``), then one per output tensor (a tuple result flattened).

>>> import relaybench as rb
>>> from relaybench import op
>>> x = rb.var("x", shape=(2, 16))
>>> mod = rb.IRModule.from_expr(rb.Function([x], op.nn.relu(x * rb.const(2.0))))
>>> fused = rb.passes.optimize(mod, opt_level=2)
>>> group = fused["main"].body.op          # the Primitive function called by main
>>> lowered = lower_primitive(group)
>>> lowered.name, lowered.pattern, lowered.ops
('fused_multiply_nn_relu', 'BROADCAST', ['multiply', 'nn.relu'])
>>> print(lowered.prim_func)
def fused_multiply_nn_relu(p0: Buffer((2, 16), "float32"), relu: Buffer((2, 16), "float32")):
    for i0 in serial(2):
        for i1_inner in vectorized(16):
            relu[i0, i1_inner] = max(p0[i0, i1_inner] * 2.0, 0.0)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import te
from ..errors import CompileError
from ..ir.expr import Call, Constant, Function, Let, Op, Tuple, TupleGetItem, Var
from ..ir.functor import post_order
from ..ir.types import TensorType, TupleType
from ..op.registry import get_op_attr, op_attr_registrations
from ..te.loop_ir import PrimFunc
from .target import Target

__all__ = ["LoweredFunc", "DeferredLowering", "GroupInfo", "lower_primitive", "group_name",
           "group_constants", "flatten_type", "anchor_flops"]


@dataclass
class LoweredFunc:
    """A fused group lowered to loop IR, with what the executors and the profile need."""

    name: str
    prim_func: PrimFunc
    input_types: list
    output_types: list
    constants: list = field(default_factory=list)
    anchor: str | None = None
    pattern: str = "OPAQUE"
    ops: list = field(default_factory=list)
    flops: int = 0
    rule: str = ""

    def source(self) -> str:
        """The loop IR, printed."""
        return str(self.prim_func)

    def __repr__(self) -> str:
        return (f"LoweredFunc({self.name}: {self.pattern}, anchor={self.anchor}, rule={self.rule}, "
                f"{len(self.input_types)} inputs, {len(self.output_types)} outputs)")

    def _repr_html_(self) -> str:
        from ..viz.html import html
        return html(self)


class DeferredLowering(LoweredFunc):
    """A lowering known from the lowering cache (:mod:`.group_cache`): every field but the loop
    IR, which ``relower()`` makes on first use of ``prim_func``."""

    def __init__(self, relower, **fields):
        self._relower = relower
        self._prim = None
        super().__init__(prim_func=None, **fields)

    @property
    def prim_func(self) -> PrimFunc:
        if self._prim is None:
            self._prim = self._relower()
        return self._prim

    @prim_func.setter
    def prim_func(self, value) -> None:
        if value is not None:
            self._prim = value


def group_constants(func: Function) -> list:
    """The data of the group's constants of rank 1 or more, in the order
    :func:`lower_primitive` makes them kernel arguments (``LoweredFunc.constants``)."""
    out = []
    for node in post_order(func.body):
        if isinstance(node, Constant):
            data = np.asarray(node.data)
            if data.ndim > 0:
                out.append(data)
    return out


@dataclass
class GroupInfo:
    """What a strategy's schedule rule is given about one group."""

    name: str
    outputs: list                 # te.Tensors, the group's results in order
    inputs: list                  # te placeholders (params, then constants)
    calls: dict                   # te ComputeOp -> the Relay Call whose compute produced it
    anchor: Call | None           # the call with the highest pattern kind
    anchor_tensors: list          # the te tensors the anchor call produced
    target: Target


def flatten_type(ty, where: str) -> list:
    """The TensorTypes of ``ty`` (a tensor or nested tuples of tensors), in order, each checked
    to have a static shape."""
    out, stack = [], [ty]
    while stack:
        t = stack.pop()
        if isinstance(t, TupleType):
            stack.extend(reversed(t.fields))
        elif isinstance(t, TensorType):
            for d in t.shape:
                if not isinstance(d, (int, np.integer)):
                    raise CompileError(f"{where}: shape {tuple(t.shape)} is not static (dimension "
                                       f"{d}); compiled kernels need static shapes")
            out.append(t)
        else:
            raise CompileError(f"{where}: a compiled kernel takes tensors and tuples of tensors, "
                               f"not {t}")
    return out


def group_name(func: Function) -> str:
    """TVM's name for a fused function: ``fused_`` and its ops in order (``fused_nn_conv2d_add``)."""
    names = _op_names(func)
    if not names:
        return "fused_copy"
    text = "fused_" + "_".join(n.replace(".", "_") for n in names)
    return text if len(text) <= 80 else text[:72] + f"_{len(names)}ops"


def _op_names(func: Function) -> list:
    return [node.op.name for node in post_order(func.body)
            if isinstance(node, Call) and isinstance(node.op, Op)]


def _pattern_of(call: Call) -> int:
    """The call's pattern kind: its operator's ``TOpPattern`` of the highest level."""
    pattern = get_op_attr(call.op.name, "TOpPattern")
    return int(pattern) if pattern is not None else 8


def anchor_flops(call: Call | None) -> int:
    """Floating-point operations (a multiply-add counts 2) of the anchor call, 0 when the op has no
    meaningful count. A Winograd convolution counts as the direct convolution it replaces, so
    its GFLOP/s is an effective rate, comparable with the direct kernels' (and above the
    device's peak where the fewer multiplications pay)."""
    if call is None:
        return 0
    name = call.op.name
    out_types = flatten_type(call.checked_type, name)
    out_size = int(np.prod([int(d) for d in out_types[0].shape], dtype=np.int64))
    arg_shapes = [tuple(int(d) for d in t.shape) for a in call.args
                  for t in flatten_type(a.checked_type, name)]
    if name == "nn.conv2d":
        from ..ir.layout import Layout
        ext = Layout(call.attrs.kernel_layout).primal_extents(arg_shapes[1])
        return 2 * out_size * ext["I"] * ext["H"] * ext["W"]
    if name == "nn.contrib_conv2d_winograd_without_weight_transform":
        # the direct convolution's count (an effective rate: Winograd multiplies less)
        from ..ir.layout import Layout
        ext = Layout(call.attrs.kernel_layout).primal_extents(arg_shapes[1])
        r = ext["H"] - int(call.attrs.tile_size) + 1
        return 2 * out_size * ext["I"] * r * r
    if name in ("nn.dense", "nn.matmul"):
        k = arg_shapes[1][-1] if name == "nn.dense" or call.attrs.transpose_b else arg_shapes[1][0]
        return 2 * out_size * k
    if name == "nn.batch_matmul":
        x = arg_shapes[0]
        return 2 * out_size * (x[1] if call.attrs.transpose_a else x[2])
    return 0


def lower_primitive(func: Function, target=None, name: str | None = None) -> LoweredFunc:
    """Lower one Primitive function to loop IR with the target's strategy (see the module)."""
    from .strategy import get_strategy

    target = Target.parse(target)
    strategy = get_strategy(target)
    name = name or group_name(func)
    where = f"lowering {name}"
    _type_of(func.body, where)

    inputs: list = []
    input_types: list = []
    values: dict = {}
    for index, param in enumerate(func.params):
        ptype = _type_of(param, where)
        types = flatten_type(ptype, f"{where}: parameter %{param.name_hint}")
        tensors = []
        for j, t in enumerate(types):
            suffix = "" if len(types) == 1 else f"_{j}"
            tensors.append(te.placeholder(tuple(int(d) for d in t.shape), t.dtype,
                                          name=f"p{index}{suffix}"))
        inputs.extend(tensors)
        input_types.extend(types)
        values[param] = tensors[0] if isinstance(ptype, TensorType) else _nest(ptype, tensors)

    constants: list = []
    calls: dict = {}
    call_order: list = []
    for node in post_order(func.body):
        if node in values:
            continue
        if isinstance(node, Var):
            raise CompileError(f"{where}: free variable %{node.name_hint}")
        if isinstance(node, Constant):
            values[node] = _constant_tensor(node, constants, inputs)
        elif isinstance(node, Tuple):
            values[node] = [values[f] for f in node.fields]
        elif isinstance(node, TupleGetItem):
            values[node] = values[node.tuple_value][node.index]
        elif isinstance(node, Let):
            raise CompileError(f"{where}: let bindings inside a fused group are not supported; "
                               "run ToGraphNormalForm before FuseOps")
        elif isinstance(node, Call) and isinstance(node.op, Op):
            values[node] = _lower_call(node, values, strategy, target, where)
            produced = _flatten_values(values[node])
            for t in produced:
                if hasattr(t.op, "body"):
                    calls.setdefault(t.op, node)
            call_order.append((node, produced))
        elif isinstance(node, (Op, Function)):
            if isinstance(node, Function):
                raise CompileError(f"{where}: nested functions cannot be lowered to a kernel")
        else:
            raise CompileError(f"{where}: {type(node).__name__} cannot be lowered to a kernel")

    result = values[func.body]
    outputs = _flatten_values(result)
    output_types = flatten_type(_type_of(func.body, where), f"{where}: result")
    outputs = _distinct_outputs(outputs)
    _unique_output_names(inputs, outputs)
    anchor, anchor_tensors, anchor_pattern = _live_anchor(call_order, outputs)
    group = GroupInfo(name, outputs, inputs, calls, anchor, anchor_tensors, target)
    schedule, rule = strategy.schedule(group)
    try:
        prim_func = te.lower(schedule, inputs, name=name)
    except te.ComputeAtError:
        # the rule attached the anchor inside its epilogue's loops, but the epilogue reads it
        # where no region can be inferred (through an index tensor, or both straight and
        # transposed): compute the anchor at the root instead
        schedule, rule = strategy.schedule(group, compute_at=False)
        prim_func = te.lower(schedule, inputs, name=name)
    from ..te.simplify import simplify_func
    # loops are partitioned where the strategy's rule asks (see simplify_func): each partition
    # is a copy of the loop's body for LLVM to compile
    partition = rule.removesuffix("_at_root") in getattr(strategy, "PARTITIONED_RULES", ())
    prim_func = simplify_func(prim_func, partition=partition)
    pattern = "OPAQUE"
    if anchor is not None:
        from ..op.registry import OpPattern
        pattern = OpPattern(anchor_pattern).name
    return LoweredFunc(name, prim_func, input_types, output_types, constants,
                       anchor.op.name if anchor is not None else None, pattern,
                       _op_names(func), anchor_flops(anchor), rule)


def _live_anchor(call_order: list, outputs: list) -> tuple:
    """The anchor among the calls whose values the outputs read: ``(call, its live tensors, its
    pattern kind)``, the call with the highest pattern kind, the last one among equals from
    OUT_ELEMWISE_FUSABLE up (``(None, [], -1)`` for a group of copies).

    A call whose value the group only looks at for its shape (``ones_like``, ``zeros_like``,
    ``full_like``, ``reshape_like`` of a convolution) or whose tuple fields go unread has no
    stage in the kernel; choosing it as the anchor would schedule a stage that is not computed.
    """
    live, stack = set(), [t.op for t in outputs]
    while stack:
        op = stack.pop()
        if op in live:
            continue
        live.add(op)
        stack.extend(t.op for t in op.inputs)
    anchor, anchor_tensors, anchor_pattern = None, [], -1
    for call, produced in call_order:
        used = [t for t in produced if t.op in live]
        if not used:
            continue
        pattern = _pattern_of(call)
        if pattern > anchor_pattern or (pattern == anchor_pattern and pattern >= 3):
            anchor, anchor_tensors, anchor_pattern = call, used, pattern
    return anchor, anchor_tensors, anchor_pattern


def _lower_call(call: Call, values: dict, strategy, target, where: str, static: bool = True):
    """The te tensors of one call (its op's compute on the values of its arguments); with
    ``static=False`` the output type may hold symbolic extents (the VM's symbolic kernels)."""
    opdef = call.op.opdef
    name = call.op.name
    args = [values[a] for a in call.args]
    out_type = _type_of(call, where)
    out_arg = list(out_type.fields) if isinstance(out_type, TupleType) else out_type
    if static:
        flatten_type(out_type, f"{where}: {name}")
    # a compute registered above level 0 (a user's) wins over the strategy's choice, which wins
    # over the operator's own (level 0)
    compute = get_op_attr(name, "FTVMCompute", target=target) if opdef is not None else None
    if compute is None or _compute_level(name, target) == 0:
        compute = strategy.compute(call, target) or compute
    if compute is None:
        raise CompileError(f"{where}: {name} has no compute; it cannot be part of a compiled "
                           "kernel")
    result = compute(args, call.attrs, out_arg)
    return list(result) if isinstance(result, (list, tuple)) else result


def _compute_level(name: str, target) -> int:
    """The level of the ``FTVMCompute`` of ``name`` that applies on ``target`` (0: built-in)."""
    for op, key, level, kind in op_attr_registrations(name):
        if key == "FTVMCompute" and kind in (None, target.kind):
            return level
    return 0


def _type_of(node, where: str):
    try:
        return node.checked_type
    except ValueError:
        raise CompileError(f"{where}: the function is not type-checked; run "
                           "relaybench.passes.InferType() first") from None


def _nest(ty, tensors: list):
    """Tensors of a flattened tuple type, re-nested like the type."""
    it = iter(tensors)

    def build(t):
        if isinstance(t, TupleType):
            return [build(f) for f in t.fields]
        return next(it)
    return build(ty)


def _constant_tensor(node: Constant, constants: list, inputs: list):
    """A constant of a fused group as a tensor: a scalar inlined as a rank-0 compute, any other
    one a placeholder appended to ``inputs`` with its data to ``constants`` (the kernel's
    extra arguments)."""
    data = np.asarray(node.data)
    if data.ndim == 0:
        return te.compute((), lambda v=data.item(), d=data.dtype.name: te.loop_ir.const(v, d),
                          name="const")
    tensor = te.placeholder(data.shape, data.dtype.name, name=f"c{len(constants)}")
    constants.append(data)
    inputs.append(tensor)
    return tensor


def _flatten_values(value) -> list:
    out, stack = [], [value]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(reversed(v))
        else:
            out.append(v)
    return out


def _unique_output_names(inputs: list, outputs: list) -> None:
    """Rename output stages whose names repeat (``relu`` twice becomes ``relu``, ``relu_1``):
    each is a parameter of the kernel. The stages were made for this lowering only."""
    used = {t.name for t in inputs}
    for t in outputs:
        name, k = t.name, 0
        while name in used:
            k += 1
            name = f"{t.name}_{k}"
        if name != t.name:
            t.op.name = name
            t.name = name
        used.add(name)


def _distinct_outputs(outputs: list) -> list:
    """Outputs as compute stages of their own: a placeholder, or a tensor given twice, becomes a
    copy (a kernel writes each output buffer once)."""
    seen, result = set(), []
    for t in outputs:
        if not hasattr(t.op, "body") or t.op in seen:
            src = t
            t = te.compute(src.shape, lambda *i, s=src: s[i], name=f"{src.name}_copy")
        seen.add(t.op)
        result.append(t)
    return result
