"""GraphPack: the accelerator's packed layouts between a start and a stop operator (VTA's
``vta/python/vta/top/graphpack.py``, ``graph_pack``).

A VTA-like accelerator multiplies a ``(b x c)`` block of int8 data by a ``(c x c)`` block of int8
weights per step (``b`` = ``bfactor``, the batch block, and ``c`` = ``cfactor``, the channel
block: 1 and 16 by default). Its compile flow therefore starts by putting the quantized program's
convolutions in *packed* layouts, data ``NCHW{b}n{c}c`` (``[N/b, C/c, H, W, b, c]``) and weights
``OIHW{c}o{c}i`` (``[O/c, I/c, H, W, c, c]``), from just after a *start* operator up to a *stop*
operator: by default from the ``nn.max_pool2d`` after the first convolution (which has 3 input
channels and stays on the CPU, see ``qconfig(skip_conv_layers=[0])``) to the
``nn.global_avg_pool2d`` before the classifier.

The rewrite, for the calls that follow the start call in evaluation order up to the stop call
(the *packed region*):

* **start**: the start call is left as it is and its result (an ``NCHW`` tensor) is put in the
  packed layout by a ``layout_transform``;
* **convolutions**: a ``nn.conv2d`` of int8 data and int8 weights giving int32 (with
  ``pack_int32_results=False``, only one whose result is requantized to int8 inside the region)
  gets
  ``data_layout="NCHW{b}n{c}c"``, ``kernel_layout="OIHW{c}o{c}i"`` and the output in the data's
  layout; its weight is transformed too, at compile time when it is a constant (the
  ``layout_transform`` is folded, with every other transform of a constant the rewrite makes);
* **the operators between** follow the packed layout through their layout rules (Relay's
  ``FInferCorrectLayout``, :mod:`relaybench.op._layout`): elementwise ones (``nn.relu``,
  ``right_shift``, ``clip``, ``cast``, ``round``) as they are, a broadcast operand such as the
  ``(C, 1, 1)`` bias of an ``add`` transformed into the packed shape ``(1, C/c, 1, 1, 1, c)``
  (folded), the residual ``add`` of two packed tensors as it is, poolings with their ``layout``
  set to the packed one; an operator that cannot work on packed data (``reshape``,
  ``nn.batch_flatten``) gets its input back in the original layout;
* **dense layers**: a requantized int8 ``nn.dense`` (its int32 result becomes int8 through an
  epilogue of constants) becomes a 1x1 convolution of ``(N, K, 1, 1)`` data, packed like the
  others, with its epilogue in four dimensions and a ``reshape`` back to ``(N, M)`` after it (VTA
  packs dense layers as ``NC{b}n{c}c``; the integers are the same);
* **fusion boundaries**: the data of each packed convolution and each operand of a residual
  ``add`` (an ``add`` of two computed tensors) that is not a convolution's accumulator or a value
  fenced already go through ``annotation.stop_fusion``, as Relay's quantization partition fences
  them (``stop_fusion(cast_hint(...))``): FuseOps then makes each convolution with its epilogue
  (bias, the residual ``add`` of its block, shift, clip, cast) a group of its own, the unit the
  accelerator runs;
* **stop**: the stop call runs in the layout its rule gives it (a ``nn.global_avg_pool2d`` on the
  packed data, as in Relay) and its result is put back in its original layout by a
  ``layout_transform``. Calls after the stop get their inputs in the original layouts.

Nothing before the start call changes. Where the start and stop are: ``start_name`` /
``stop_name`` name the operators; with ``start_name_idx`` / ``stop_name_idx`` the call is the one
at that position of the program's evaluation order, counting every call, tuple and tuple field
(the ``%N`` of the printed program, as Relay counts in A-normal form without the constants);
without, the first call of ``start_name``, and the first call of ``stop_name`` after it.

Deliberately not done: bit-packing of weights narrower than 8 bits (``weight_bits`` must be 8;
VTA's ``bitpack``), packing of ``nn.conv2d_transpose`` and of a dense layer whose result is not
requantized or whose sizes the blocks do not divide (they stay in their layouts, fed unpacked
data), and VTA's ``copy`` after each int32-to-int8 ``cast``. What cannot be
packed is an error that names the call and its shape: a tensor at the start or a convolution's
data whose batch ``bfactor`` does not divide, or whose channels ``cfactor`` does not divide.

>>> import numpy as np, relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(1, 16, 8, 8), int8]) {
...   %0 = nn.max_pool2d(%x, pool_size=[2, 2], strides=[2, 2]);
...   %1 = nn.conv2d(%0, meta[relay.Constant][0], padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3], out_dtype="int32");
...   %2 = add(%1, meta[relay.Constant][1]);
...   %3 = right_shift(%2, 3);
...   %4 = clip(%3, a_min=-127f, a_max=127f);
...   %5 = cast(%4, dtype="int8");
...   nn.global_avg_pool2d(%5)
... }''', init_meta_table={"relay.Constant": [rb.const(np.ones((16, 16, 3, 3), "int8")),
...                                             rb.const(np.ones((16, 1, 1), "int32"))]})
>>> print(graph_pack(mod)["main"].astext(show_types=False, show_meta_data=False))
fn (%x: Tensor[(1, 16, 8, 8), int8]) -> Tensor[(1, 16, 1, 1), int8] {
  %0 = nn.max_pool2d(%x, pool_size=[2, 2], strides=[2, 2]);
  %1 = layout_transform(%0, src_layout="NCHW", dst_layout="NCHW1n16c");
  %2 = annotation.stop_fusion(%1);
  %3 = nn.conv2d(%2, meta[relay.Constant][0], padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3], data_layout="NCHW1n16c", kernel_layout="OIHW16o16i", out_dtype="int32");
  %4 = add(%3, meta[relay.Constant][1]);
  %5 = right_shift(%4, 3);
  %6 = clip(%5, a_min=-127f, a_max=127f);
  %7 = cast(%6, dtype="int8");
  %8 = nn.global_avg_pool2d(%7, layout="NCHW1n16c");
  layout_transform(%8, src_layout="NCHW1n16c", dst_layout="NCHW")
}
"""

from __future__ import annotations

from typing import Optional, Union

from ..ir.expr import Call, Constant, Function, Op, Tuple, TupleGetItem, expr_children
from ..ir.functor import ExprMutator, post_order
from ..ir.layout import Layout
from ..ir.module import IRModule
from ..ir.types import TensorType
from ..op._layout import _layout_transform, extents_of
from ..op.annotation import stop_fusion
from ._layout_rules import LayoutRewriter, _Value
from .fold_constant import fold_constant
from .infra import module_pass, typed

__all__ = ["graph_pack", "GraphPack", "GraphPackError"]


class GraphPackError(ValueError):
    """A program graph_pack cannot pack: the message names the call, its position and its shape."""


def _positions(body) -> dict:
    """Each call, tuple and tuple field of ``body`` -> its position in evaluation order (the
    ``%N`` the printer gives it); nested functions are not entered."""
    out = {}
    for node in post_order(body, lambda n: () if isinstance(n, Function) else expr_children(n)):
        if isinstance(node, (Call, Tuple, TupleGetItem)):
            out[node] = len(out)
    return out


def _is_residual(call) -> bool:
    """An ``add`` that joins two computed tensors of the output's shape (a residual connection),
    not one that adds a bias or a scalar."""
    out = call.checked_type
    return all(not isinstance(a, Constant) and isinstance(a.checked_type, TensorType)
               and a.checked_type.ndim > 0 and tuple(a.checked_type.shape) == tuple(out.shape)
               for a in call.args)


#: the operators an int32 epilogue is made of, between a convolution (or a fence) and an add
_EPILOGUE = frozenset({"add", "subtract", "multiply", "right_shift", "left_shift", "nn.relu", "clip",
                       "cast", "maximum", "minimum"})


def _fenced_already(expr, limit: int = 16) -> bool:
    """Whether an operand of a residual ``add`` reaches, through its first operands and
    epilogue operators, a convolution or a ``stop_fusion``: a convolution's accumulator then
    fuses with the ``add`` (the accelerator adds the other operand in its accumulator), and a
    fenced value (what quantization requantized to int8) is loaded as it is."""
    for _ in range(limit):
        if not (isinstance(expr, Call) and isinstance(expr.op, Op)):
            return False
        name = expr.op.name
        if name in ("nn.conv2d", "annotation.stop_fusion"):
            return True
        if name not in _EPILOGUE or not expr.args:
            return False
        expr = expr.args[0]
    return False


def _where(call, positions) -> str:
    return f"{call.op.name} (%{positions[call]})"


def _find(positions: dict, name: str, idx: Optional[int], after: int, role: str, start_desc: str = ""):
    """The call of operator ``name`` chosen by ``idx`` (its position) or, without one, the first
    after position ``after``."""
    calls = [(p, n) for n, p in positions.items()
             if isinstance(n, Call) and isinstance(n.op, Op) and n.op.name == name]
    calls.sort(key=lambda pn: pn[0])
    where = ", ".join(f"%{p}" for p, _ in calls) or "none"
    if idx is not None:
        for p, n in calls:
            if p == idx:
                if p <= after:
                    raise GraphPackError(f"graph_pack: the {role} call {name} (%{p}) does not come after "
                                         f"the start {start_desc}")
                return n
        raise GraphPackError(f"graph_pack: no call of {name} at position %{idx} for the {role} "
                             f"({role}_name_idx={idx}); the calls of {name} are at: {where}")
    for p, n in calls:
        if p > after:
            return n
    if role == "stop" and calls:
        raise GraphPackError(f"graph_pack: no call of {name} after the start {start_desc}; the calls of "
                             f"{name} are at: {where}")
    raise GraphPackError(f"graph_pack: the program has no call of {name} (the {role}_name)")


class _Packer(LayoutRewriter):
    """The layout rewriter confined to the packed region, with the start packed, the stop
    unpacked, the int8 convolutions in the packed layouts and their fusion boundaries marked."""

    def __init__(self, start, stop, region, positions, bfactor: int, cfactor: int):
        super().__init__({"nn.conv2d": self._conv2d_hook})
        self.start, self.stop, self.region, self.positions = start, stop, region, positions
        self.bfactor, self.cfactor = bfactor, cfactor
        self.data_layout = Layout(f"NCHW{bfactor}n{cfactor}c")
        self.kernel_layout = Layout(f"OIHW{cfactor}o{cfactor}i")
        self._fenced: dict = {}
        self.unpacked: set = set()     # convolutions left in NCHW (see _not_requantized)

    # ---- checks ---------------------------------------------------------------------------------
    def _check_divides(self, call, what: str, t, extents: dict, axes: str) -> None:
        factors = {"N": ("bfactor", self.bfactor), "C": ("cfactor", self.cfactor),
                   "O": ("cfactor", self.cfactor), "I": ("cfactor", self.cfactor)}
        names = {"N": "batch", "C": "channels", "O": "output channels", "I": "input channels"}
        for axis in axes:
            knob, f = factors[axis]
            extent = extents[axis]
            if not isinstance(extent, int) or extent % f:
                into = self.data_layout if axis in "NC" else self.kernel_layout
                raise GraphPackError(f"graph_pack: {_where(call, self.positions)}: {what} {t} has "
                                     f"{names[axis]} {extent}, not a multiple of {knob}={f}; it "
                                     f"cannot be packed into {into}")

    # ---- the hook -------------------------------------------------------------------------------
    def _conv2d_hook(self, call, types, layouts):
        data_t, weight_t = types
        out_t = call.checked_type
        if not (data_t.dtype == "int8" and weight_t.dtype == "int8" and out_t.dtype == "int32"):
            return None
        if call in self.unpacked:
            return None
        self._check_divides(call, "data", data_t, extents_of(data_t, layouts[0]), "NC")
        groups = call.attrs["groups"]
        wext = dict(extents_of(weight_t, layouts[1]))
        wext["O"] = wext["O"] // groups if isinstance(wext["O"], int) else wext["O"]
        what = "weight" if groups == 1 else f"weight (per group of {groups})"
        self._check_divides(call, what, weight_t, wext, "OI")
        return {"data_layout": self.data_layout.name, "kernel_layout": self.kernel_layout.name,
                "out_layout": ""}

    # ---- the walk -------------------------------------------------------------------------------
    def _call(self, call):
        if call is self.start:
            return self._pack_start(call)
        if call not in self.region:
            return self._fallback(call)
        v = super()._call(call)
        v = self._mark_boundaries(call, v)
        if call is self.stop:
            return _Value(self.realize(v), None, None, call)
        return v

    def _pack_start(self, call):
        v = self._fallback(call)
        t = call.checked_type
        if not isinstance(t, TensorType) or t.ndim != 4:
            raise GraphPackError(f"graph_pack: the start {_where(call, self.positions)} gives {t}; "
                                 f"packing starts from a 4-d NCHW tensor")
        layout = next((call.attrs[k] for k in ("out_layout", "layout", "data_layout")
                       if call.attrs is not None and call.attrs.get(k)), "NCHW")
        if layout != "NCHW":
            raise GraphPackError(f"graph_pack: the start {_where(call, self.positions)} gives its "
                                 f"result {t} in layout {layout}; packing starts from NCHW")
        self._check_divides(call, "its result", t, extents_of(t, Layout("NCHW")), "NC")
        packed = _layout_transform(v.expr, Layout("NCHW"), self.data_layout)
        return _Value(packed, Layout("NCHW"), self.data_layout, call)

    def _fence(self, expr):
        """``annotation.stop_fusion(expr)``, one per value (an existing one kept)."""
        if isinstance(expr, Call) and isinstance(expr.op, Op) and expr.op.name == "annotation.stop_fusion":
            return expr
        out = self._fenced.get(expr)
        if out is None:
            out = self._fenced[expr] = stop_fusion(expr)
        return out

    def _mark_boundaries(self, call, v):
        """The fusion boundaries of a packed convolution (its data) and of a residual ``add``
        (both operands)."""
        expr = v.expr
        if not (isinstance(expr, Call) and isinstance(expr.op, Op)):
            return v
        name = expr.op.name
        if name == "nn.conv2d" and expr.attrs["data_layout"] == self.data_layout.name:
            args = [self._fence(expr.args[0])] + list(expr.args[1:])
        elif name == "add" and call.op.name == "add" and _is_residual(call):
            args = [a if _fenced_already(a) else self._fence(a) for a in expr.args]
        else:
            return v
        if all(a is b for a, b in zip(args, expr.args)):
            return v
        new = Call(expr.op, args, expr.attrs, expr.type_args).with_span(expr.span)
        return _Value(new, v.old, v.new, v.node)


def _users(body) -> dict:
    """Each node of ``body`` -> the nodes that take it as an operand (nested functions not
    entered)."""
    users: dict = {}
    for node in post_order(body, lambda n: () if isinstance(n, Function) else expr_children(n)):
        for child in expr_children(node) if not isinstance(node, Function) else ():
            users.setdefault(child, []).append(node)
    return users


def _is_op(node, name: str) -> bool:
    return isinstance(node, Call) and isinstance(node.op, Op) and node.op.name == name


class _DenseAsConv(ExprMutator):
    """Each requantized int8 ``nn.dense`` of the region as a 1x1 ``nn.conv2d`` on a 1x1 image,
    the form the accelerator's GEMM core runs (VTA packs dense as ``NC{b}n{c}c``; a dense of
    ``(N, K)`` by ``(M, K)`` is the convolution of ``(N, K, 1, 1)`` data by ``(M, K, 1, 1)``
    weights, sum for sum the same integers).

    A dense qualifies when its data and weight are int8, it gives int32, ``N`` is a multiple of
    ``bfactor`` and ``K``, ``M`` of ``cfactor``, and its result flows, one user at a time, through
    epilogue operators whose other operand is a constant (a bias of shape ``(M,)`` or
    ``(1, M)``, a scalar) to a ``cast`` to int8: the whole chain moves to four dimensions (the
    constants get two trailing unit axes) and one ``reshape`` after the cast gives the
    ``(N, M)`` result back, so FuseOps makes the convolution and its epilogue one group. Other
    dense calls stay as they are (they run on the CPU)."""

    def __init__(self, body, region: set, bfactor: int, cfactor: int):
        super().__init__()
        self.chains: dict = {}          # the chain's last call (the cast) -> [dense, ops...]
        self.four_d: dict = {}          # the chain's last call -> its result in four dimensions
        users = _users(body)
        for node in region:
            if not _is_op(node, "nn.dense"):
                continue
            chain = self._chain(node, users, region, bfactor, cfactor)
            if chain is not None:
                self.chains[chain[-1]] = chain

    @staticmethod
    def _chain(dense, users, region, bfactor, cfactor):
        data_t, weight_t = (a.checked_type for a in dense.args)
        out_t = dense.checked_type
        if not (str(data_t.dtype) == "int8" and str(weight_t.dtype) == "int8"
                and str(out_t.dtype) == "int32" and data_t.ndim == 2):
            return None
        (n, k), m = data_t.shape, weight_t.shape[0]
        if not all(isinstance(v, int) for v in (n, k, m)) or n % bfactor or k % cfactor or m % cfactor:
            return None
        chain, node = [dense], dense
        residuals = 0
        for _ in range(32):
            following = users.get(node, [])
            if len(following) != 1:
                return None
            node = following[0]
            if node not in region or not isinstance(node, Call) or not isinstance(node.op, Op):
                return None
            if _cast_to(node, "int8"):
                chain.append(node)
                return chain
            if node.op.name not in _EPILOGUE or (node.op.name == "cast" and not _cast_to(node, "int32")):
                return None
            others = [a for a in node.args if a is not chain[-1]]
            residual = (node.op.name == "add" and len(node.args) == 2 and len(others) == 1
                        and not isinstance(others[0], Constant)
                        and _full_operand(others[0], out_t, residuals))
            if residual:
                residuals += 1
            elif len(node.args) > 1 and (node.args[0] is not chain[-1] or not all(
                    isinstance(a, Constant) and a.data.ndim <= 2
                    and (a.data.ndim < 2 or a.data.shape[0] == 1) for a in others)):
                return None
            chain.append(node)
        return None

    def visit_call(self, call):
        chain = self.chains.get(call)
        if chain is None:
            return super().visit_call(call)
        from ..op import cast, reshape
        from ..op import nn as _nn
        dense = chain[0]
        n, k = dense.args[0].checked_type.shape
        m = dense.args[1].checked_type.shape[0]
        four_d = self.four_d.get(dense.args[0])
        # a dense fed by another packed dense reads its four-dimensional result directly, so the
        # value between them stays packed
        data = four_d if four_d is not None else reshape(self.visit(dense.args[0]), newshape=[n, k, 1, 1])
        weight = reshape(self.visit(dense.args[1]), newshape=[m, k, 1, 1])
        value = _nn.conv2d(data, weight, channels=m, kernel_size=[1, 1], out_dtype="int32")
        for node in chain[1:]:
            if node is chain[-1]:
                value = cast(value, dtype="int8")
                break
            rest = [a for a in node.args if a is not chain[chain.index(node) - 1]]
            args = [value] + [self._four_d(a, n, m) for a in rest]
            value = Call(node.op, args, node.attrs, node.type_args).with_span(node.span)
        self.four_d[call] = value
        return reshape(value, newshape=[n, m]).with_span(call.span)

    def _four_d(self, operand, n: int, m: int):
        """An operand of the chain in four dimensions: a constant with two trailing unit axes,
        a computed ``(n, m)`` tensor (a residual) reshaped to ``(n, m, 1, 1)``."""
        from ..op import reshape
        if isinstance(operand, Constant):
            if operand.data.ndim == 0:
                return operand
            return reshape(operand, newshape=list(operand.data.shape) + [1, 1])
        return reshape(self.visit(operand), newshape=[n, m, 1, 1])


def _full_operand(expr, out_t, residuals: int) -> bool:
    """Whether ``expr`` can be the one computed tensor a dense chain adds (a residual): an
    int32 value of the dense's result shape, and none taken yet."""
    t = expr.checked_type
    return (residuals == 0 and isinstance(t, TensorType) and str(t.dtype) == "int32"
            and tuple(t.shape) == tuple(out_t.shape))


def _region(positions, start, stop) -> set:
    start_at = positions[start] if start is not None else -1
    stop_at = positions[stop] if stop is not None else len(positions)
    return {n for n, p in positions.items() if start_at < p <= stop_at}


def _pack_function(func: Function, bfactor, cfactor, start_name, stop_name, start_name_idx,
                   stop_name_idx, pack_int32_results: bool = True, pack_dense: bool = True,
                   mod: Optional[IRModule] = None, name: str = "main") -> Function:
    positions = _positions(func.body)
    start = stop = None
    if start_name is not None:
        start = _find(positions, start_name, start_name_idx, -1, "start")
    if stop_name is not None:
        stop = _find(positions, stop_name, stop_name_idx,
                     positions[start] if start is not None else -1, "stop",
                     _where(start, positions) if start is not None else "")
    region = _region(positions, start, stop)
    if pack_dense:
        rewriter = _DenseAsConv(func.body, region, bfactor, cfactor)
        body = rewriter.visit(func.body)
        if body is not func.body:
            # typing fills in the new nodes' types in place, so the start and the stop are the
            # rewriter's images of the old ones
            func = Function(func.params, body, func.ret_type, func.type_params, func.attrs)
            if mod is None:
                func = typed(IRModule.from_expr(func))["main"]
            else:
                gv = mod.get_global_var(name)
                func = typed(mod.with_functions({**mod.functions, gv: func}))[gv]
            start = rewriter.memo[start] if start is not None else None
            stop = rewriter.memo[stop] if stop is not None else None
            positions = _positions(func.body)
            region = _region(positions, start, stop)
    packer = _Packer(start, stop, region, positions, bfactor, cfactor)
    if not pack_int32_results:
        packer.unpacked = _not_requantized(func.body, region)
    return packer.rewrite_function(func)


def _cast_to(node, dtype: str) -> bool:
    return (isinstance(node, Call) and isinstance(node.op, Op) and node.op.name == "cast"
            and str(node.attrs["dtype"]) == dtype)


def _not_requantized(body, region: set) -> set:
    """The convolutions of the region whose int32 result does not become int8 inside it: each
    call on the way from the convolution has one user and is an epilogue operator, up to a value
    whose users are all ``cast`` s to int8. (A VTA-like accelerator stores int8 only, so such a convolution, the last
    one before the stop's dequantization, is left in NCHW for the CPU's own layouts.)"""
    users = _users(body)
    out = set()
    for conv in region:
        if not (isinstance(conv, Call) and isinstance(conv.op, Op) and conv.op.name == "nn.conv2d"):
            continue
        node, requantized = conv, False
        for _ in range(32):
            following = users.get(node, [])
            if following and all(_cast_to(u, "int8") for u in following):
                requantized = True
                break
            if len(following) != 1:
                break
            node = following[0]
            if not (isinstance(node, Call) and isinstance(node.op, Op)) \
                    or node.op.name not in _EPILOGUE or node not in region \
                    or (node.op.name == "cast" and not _cast_to(node, "int32")):
                break
        if not requantized:
            out.add(conv)
    return out


def _check_options(bfactor, cfactor, weight_bits) -> None:
    for name, value in (("bfactor", bfactor), ("cfactor", cfactor)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise GraphPackError(f"graph_pack: {name} must be a positive int, got {value!r}")
    if weight_bits != 8:
        raise GraphPackError(f"graph_pack: weight_bits={weight_bits!r} is not supported: the weights "
                             f"are int8 (weight_bits=8); bit-packing narrower weights is not done")


def graph_pack(mod_or_expr: Union[IRModule, Function], bfactor: int = 1, cfactor: int = 16,
               weight_bits: int = 8, start_name: Optional[str] = "nn.max_pool2d",
               stop_name: Optional[str] = "nn.global_avg_pool2d", start_name_idx: Optional[int] = None,
               stop_name_idx: Optional[int] = None, pack_int32_results: bool = True,
               pack_dense: bool = True):
    """The program with its packed region in the accelerator's layouts (see the module).

    ``pack_int32_results=False`` leaves in NCHW the convolutions whose int32 result does not
    become int8 inside the region (the last one, whose result flows to the stop's
    dequantization): an accelerator that stores int8 only cannot run them, and the CPU runs
    them faster in its own blocked layout. (Relay's graph_pack packs them all, the default.)

    ``start_name=None`` starts the packed region at the program's beginning (nothing is packed
    at a start; each packed convolution's data is transformed where it is read), and
    ``stop_name=None`` ends it at the program's end. ``pack_dense`` packs the requantized int8
    ``nn.dense`` calls of the region as 1x1 convolutions (see :class:`_DenseAsConv`).

    Takes an IRModule (its ``@main`` is packed) or a Function, and returns the same kind, typed.
    FoldConstant runs on the result, so that the transformed weights and biases become packed
    constants (a quantized program has nothing else left to fold).
    """
    _check_options(bfactor, cfactor, weight_bits)
    if isinstance(mod_or_expr, IRModule):
        mod = typed(mod_or_expr)
        gv = mod.get_global_var("main")
        func = _pack_function(mod[gv], bfactor, cfactor, start_name, stop_name, start_name_idx,
                              stop_name_idx, pack_int32_results, pack_dense, mod)
        mod = typed(mod.with_functions({**mod.functions, gv: func}))
        func = fold_constant(mod[gv], mod)
        return typed(mod.with_functions({**mod.functions, gv: func}))
    if not isinstance(mod_or_expr, Function):
        raise TypeError(f"graph_pack takes an IRModule or a Function, not {type(mod_or_expr).__name__}")
    out = graph_pack(IRModule.from_expr(mod_or_expr), bfactor, cfactor, weight_bits, start_name,
                     stop_name, start_name_idx, stop_name_idx, pack_int32_results, pack_dense)
    return out["main"]


@module_pass(opt_level=0)
def GraphPack(mod, ctx, bfactor: int = 1, cfactor: int = 16, weight_bits: int = 8,
              start_name: str = "nn.max_pool2d", stop_name: str = "nn.global_avg_pool2d",
              start_name_idx=None, stop_name_idx=None, pack_int32_results: bool = True,
              pack_dense: bool = True):
    """Put the region of ``@main`` between a start and a stop operator in the accelerator's packed
    layouts (``NCHW{bfactor}n{cfactor}c`` data, ``OIHW{cfactor}o{cfactor}i`` weights)."""
    return graph_pack(mod, bfactor, cfactor, weight_bits, start_name, stop_name, start_name_idx,
                      stop_name_idx, pack_int32_results, pack_dense)
