"""FoldScaleAxis: per-channel scalings folded into the convolution weights (Relay's
``fold_scale_axis.cc``).

After SimplifyInference a batch norm is a multiplication by a per-channel scale and an addition.
A multiplication right after a convolution (or a dense layer) scales its output channels, which
is the same as scaling the weights' output channels; one right before a convolution scales its
input channels, which is the same as scaling the weights' input channels. Moving the scale into
the weights leaves the network one elementwise operation lighter per batch norm, and once the
weights are constants, FoldConstant computes the scaled weights at compile time. Accelerators
without a vector multiplier (the paper's VTA) need every such scale gone.

Three passes, as in Relay:

* ``BackwardFoldScaleAxis`` (opt_level 3): ``multiply(e, s)`` where ``s`` scales one axis of ``e``
  (its shape, right-aligned against ``e``'s, is 1 everywhere else) and ``e`` is, through any
  chain of these, the output channels of a convolution: ``nn.conv2d`` / ``nn.dense`` (their
  output-channel axis unsplit; the weight's ``O`` axis is scaled), ``nn.relu`` and
  ``nn.leaky_relu`` (only for a scale known positive: ``relu(x) * s == relu(x * s)`` needs
  ``s > 0``), ``add`` / ``subtract`` (both sides scaled; a broadcast operand such as a bias is
  multiplied by the scale), ``nn.bias_add`` (the bias is scaled) and another ``multiply`` by a
  per-channel scale (the scales combine). Every value on the chain must be used only by the next
  one, since its value changes.
* ``ForwardFoldScaleAxis`` (opt_level 3): ``multiply(x, s)`` where ``s`` scales the channel axis and
  every use of the product can take its input scaled: ``nn.conv2d`` (scaling the weight's ``I``
  axis; for a depthwise convolution with one output channel per group, its ``O`` axis),
  ``nn.dense``, and through ``nn.relu`` / ``nn.leaky_relu`` (scale known positive), ``add`` /
  ``subtract`` with a broadcast operand (divided by the scale, known nonzero) and ``multiply``.
* ``FoldScaleAxis`` (opt_level 3): the sequence backward, forward, FoldConstant.

The rewritten programs have Relay's forms: a scale ``s`` is first made a 1-d tensor of the channels,
``squeeze(s, axis=[its other axes])`` (a scalar is ``repeat``-ed along the channels), and laid
along the axis it multiplies with ``expand_dims(.., axis=1, num_newaxis=k)``: the weight becomes
``multiply(%w, expand_dims(squeeze(s, axis=[1, 2]), axis=1, num_newaxis=3))`` for an OIHW
convolution's output channels, a bias ``divide(%b, expand_dims(.., axis=1, num_newaxis=2))``
before an NCHW convolution.

"Known positive" and "known nonzero" mean a constant (or a reshaping of one) whose every element
is; a scale that is not constant folds only where no sign is needed. A scale along any other axis,
or one that would broadcast the value to a bigger shape, is left alone. Programs are handled in
graph form (a ``let``-bound value is not followed); nothing inside ``Primitive`` functions is
touched.

>>> import numpy as np, relaybench as rb
>>> s = rb.const(np.array([1.0, 2.0], "float32").reshape(2, 1, 1))
>>> x, w = rb.var("x", shape=(1, 3, 4, 4)), rb.var("w", shape=(2, 3, 1, 1))
>>> y = rb.op.multiply(rb.op.nn.conv2d(x, w, channels=2, kernel_size=1), s)
>>> mod = rb.IRModule.from_expr(rb.Function([x, w], y))
>>> with rb.PassContext(opt_level=3):
...     out = BackwardFoldScaleAxis()(mod)
>>> print(out["main"].astext(show_types=False, show_meta_data=False))
fn (%x: Tensor[(1, 3, 4, 4), float32], %w: Tensor[(2, 3, 1, 1), float32]) -> Tensor[(1, 2, 4, 4), float32] {
  %0 = squeeze(meta[relay.Constant][0], axis=[1, 2]);
  %1 = expand_dims(%0, axis=1, num_newaxis=3);
  %2 = multiply(%w, %1);
  nn.conv2d(%x, %2, channels=2, kernel_size=[1, 1])
}
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir.expr import Call, Constant, Function, Op, expr_children
from ..ir.functor import FusedAwareMutator, post_order
from ..ir.layout import Layout
from ..ir.types import TensorType
from .infra import Sequential, get_pass, module_pass, register_pass, rewrite_each_function

__all__ = ["BackwardFoldScaleAxis", "ForwardFoldScaleAxis", "FoldScaleAxis"]

# what a scale must be known to be: nothing, nonzero (to divide by it), positive (to move it
# through a ReLU)
_ANY, _NONZERO, _POSITIVE = 0, 1, 2


# =============================================================================================
# Shared pieces


#: the operators a scale folds into; a function without them has nothing to fold
_ANCHORS = frozenset({"nn.conv2d", "nn.dense"})


def _op(name: str, *args, **attrs) -> Call:
    from ..op.registry import OpCaller, get_opdef
    return OpCaller(get_opdef(name))(*args, **attrs)


def _op_name(node) -> Optional[str]:
    if isinstance(node, Call) and isinstance(node.op, Op):
        return node.op.name
    return None


def _tensor(node) -> Optional[TensorType]:
    t = node.type_or_none
    return t if isinstance(t, TensorType) else None


def _walk(body) -> list:
    """Every node under ``body``, children before parents, without entering Primitive functions."""
    return post_order(body, lambda node: () if isinstance(node, Function)
                      and node.attrs.get("Primitive") else expr_children(node))


def _users(body, nodes) -> dict:
    """node -> [(user, argument position)]; a function's result gets the user ``None``."""
    users: dict = {body: [(None, 0)]}
    for node in nodes:
        if isinstance(node, Function) and node.attrs.get("Primitive"):
            continue
        if isinstance(node, Function):
            users.setdefault(node.body, []).append((None, 0))
        for i, child in enumerate(expr_children(node)):
            users.setdefault(child, []).append((node, i))
    return users


def _same_shape(a: Optional[TensorType], b: Optional[TensorType]) -> bool:
    return a is not None and b is not None and a.shape == b.shape and a.dtype == b.dtype


def _scales_axis(scale: Optional[TensorType], data: Optional[TensorType], axis: int) -> bool:
    """Whether a tensor of type ``scale``, broadcast against ``data``, scales ``data`` along
    ``axis`` (Relay's ``MatchBroadcastToLeftAxes``): a scalar (when the axis has a static size, so
    it can be repeated along it), or a tensor that reaches ``axis`` with the same size there and
    is 1 everywhere else."""
    if scale is None or data is None or scale.ndim > data.ndim or scale.dtype != data.dtype:
        return False
    if scale.ndim == 0:
        return isinstance(data.shape[axis], int)
    lead = data.ndim - scale.ndim
    if axis < lead or scale.shape[axis - lead] != data.shape[axis]:
        return False
    return all(d == 1 for i, d in enumerate(scale.shape) if lead + i != axis)


def _squeezed(scale, scale_type: TensorType, data_type: TensorType, axis: int):
    """The per-channel values of ``scale`` as a 1-d tensor of the channels, in Relay's form:
    ``squeeze(scale, axis=[its other axes])`` (the scale itself when it has none), and for a
    scalar ``repeat(expand_dims(scale, axis=0), repeats=C, axis=0)``."""
    if scale_type.ndim == 0:
        one = _op("expand_dims", scale, axis=0, num_newaxis=1)
        return _op("repeat", one, repeats=int(data_type.shape[axis]), axis=0)
    lead = data_type.ndim - scale_type.ndim
    drop = tuple(i for i in range(scale_type.ndim) if lead + i != axis)
    return _op("squeeze", scale, axis=drop) if drop else scale


def _expand_to(scale, rank: int, index: int):
    """A 1-d per-channel ``scale`` laid along axis ``index`` of a tensor of rank ``rank`` (to
    multiply a weight or a broadcast operand), as Relay's ``ExpandBiasToMatchAxis`` writes it:
    ``expand_dims(scale, axis=1, num_newaxis=rank - index - 1)``, or the scale itself when the
    axis is the last one."""
    n = rank - index - 1
    return _op("expand_dims", scale, axis=1, num_newaxis=n) if n > 0 else scale


def _constant_value(expr) -> Optional[np.ndarray]:
    """The value of a constant, seen through reshaping operators; None when not constant."""
    while _op_name(expr) in ("expand_dims", "reshape", "squeeze"):
        expr = expr.args[0]
    return expr.data if isinstance(expr, Constant) else None


def _known(expr, level: int) -> bool:
    if level == _ANY:
        return True
    value = _constant_value(expr)
    if value is None:
        return False
    return bool(np.all(value > 0)) if level == _POSITIVE else bool(np.all(value != 0))


def _unsplit_index(layout: str, axis: str) -> Optional[int]:
    """The position of ``axis`` in ``layout`` when it is not split into blocks, else None."""
    lay = Layout(layout)
    if axis not in lay or lay.factor_of(axis) is not None:
        return None
    return lay.index_of(axis)


def _weight_axis(call, kind: str) -> Optional[int]:
    """For ``nn.conv2d``/``nn.dense``, the weight axis that its output channels (``kind="out"``)
    or input channels (``"in"``) scale; None when it cannot be scaled that way."""
    name = _op_name(call)
    if name == "nn.dense":
        w = _tensor(call.args[1])
        return None if w is None or w.ndim != 2 else (0 if kind == "out" else 1)
    if name != "nn.conv2d":
        return None
    a = call.attrs
    if kind == "out":
        return _unsplit_index(a["kernel_layout"], "O")
    data = _tensor(call.args[0])
    c = _unsplit_index(a["data_layout"], "C")
    if data is None or c is None:
        return None
    if a["groups"] == 1:
        return _unsplit_index(a["kernel_layout"], "I")
    out = _tensor(call)
    oc = None if out is None else _unsplit_index(a["out_layout"] or a["data_layout"], "C")
    if oc is not None and a["groups"] == data.shape[c] and out.shape[oc] == data.shape[c]:
        return _unsplit_index(a["kernel_layout"], "O")   # depthwise, one output channel per group
    return None


def _channel_axis(call, kind: str) -> Optional[int]:
    """The axis of the output (``kind="out"``) or data (``"in"``) of a convolution or dense layer
    whose channels scale its weight (None when there is none)."""
    name = _op_name(call)
    if _weight_axis(call, kind) is None:
        return None
    if name == "nn.dense":
        t = _tensor(call) if kind == "out" else _tensor(call.args[0])
        return None if t is None else t.ndim - 1
    a = call.attrs
    layout = (a["out_layout"] or a["data_layout"]) if kind == "out" else a["data_layout"]
    return _unsplit_index(layout, "C")


def _product(factors: list):
    out = factors[0]
    for f in factors[1:]:
        out = _op("multiply", out, f)
    return out


def _rebuilt(func, body):
    if body is func.body:
        return func
    return Function(func.params, body, func.ret_type, func.type_params, func.attrs).with_span(func.span)


# =============================================================================================
# Backward: a scale after a convolution goes into its weight


class _Backward:
    """One function's backward folding: analysis, then one rewriting walk."""

    def __init__(self, func):
        self.func = func
        self.nodes = _walk(func.body)
        self.users = _users(func.body, self.nodes)
        # node -> (axis, needs a positive scale, for a multiply: the position of the scaled input)
        self.absorbs: dict = {}
        for node in self.nodes:
            found = self._absorb(node)
            if found is not None:
                self.absorbs[node] = found

    def _chain(self, node):
        """How ``node`` can take a scale, if only one user reads it."""
        if len(self.users.get(node, ())) != 1:
            return None
        return self.absorbs.get(node)

    def _absorb(self, node):
        name = _op_name(node)
        t = _tensor(node)
        if name is None or t is None:
            return None
        if name in ("nn.conv2d", "nn.dense"):
            axis = _channel_axis(node, "out")
            return None if axis is None else (axis, False, None)
        if name in ("nn.relu", "nn.leaky_relu"):
            inner = self._chain(node.args[0])
            return None if inner is None else (inner[0], True, None)
        if name == "nn.bias_add":
            inner = self._chain(node.args[0])
            if inner is None or node.attrs["axis"] % t.ndim != inner[0]:
                return None
            return (inner[0], inner[1], None)
        if name in ("add", "subtract"):
            axes, positive = set(), False
            for a in node.args:
                if not _same_shape(_tensor(a), t):
                    continue                  # a broadcast operand: multiplied by the scale
                inner = self._chain(a)
                if inner is None:
                    return None
                axes.add(inner[0])
                positive |= inner[1]
            if len(axes) != 1:
                return None
            return (axes.pop(), positive, None)
        if name == "multiply":
            for i in (0, 1):
                a, b = node.args[i], node.args[1 - i]
                inner = self._chain(a) if _same_shape(_tensor(a), t) else None
                if inner is None or not _scales_axis(_tensor(b), t, inner[0]):
                    continue
                if inner[1] and not _known(b, _POSITIVE):
                    continue
                return (inner[0], inner[1], i)
        return None

    def run(self):
        # roots, from the outputs inwards, so a chain is claimed by its outermost multiply
        self.scale_of: dict = {}     # node on a chain -> [scale operands] (their product scales it)
        self.roots: dict = {}        # root multiply -> the input that replaces it
        for node in reversed(self.nodes):
            if node in self.scale_of or _op_name(node) != "multiply":
                continue
            t = _tensor(node)
            for i in (0, 1):
                x, s = node.args[i], node.args[1 - i]
                inner = self._chain(x) if _same_shape(_tensor(x), t) else None
                if inner is None or not _scales_axis(_tensor(s), t, inner[0]):
                    continue
                if inner[1] and not _known(s, _POSITIVE):
                    continue
                self.roots[node] = x
                self._claim(x, [(s, t, inner[0])])
                break
        if not self.roots:
            return self.func
        return _rebuilt(self.func, _BackwardRewriter(self).visit(self.func.body))

    def _claim(self, start, factors):
        stack = [(start, factors)]
        while stack:
            node, scale = stack.pop()
            self.scale_of[node] = scale
            name = _op_name(node)
            t = _tensor(node)
            if name in ("nn.relu", "nn.leaky_relu", "nn.bias_add"):
                stack.append((node.args[0], scale))
            elif name in ("add", "subtract"):
                for a in node.args:
                    if _same_shape(_tensor(a), t):
                        stack.append((a, scale))
            elif name == "multiply":
                axis, _positive, i = self.absorbs[node]
                stack.append((node.args[i], scale + [(node.args[1 - i], t, axis)]))


class _BackwardRewriter(FusedAwareMutator):
    def __init__(self, plan: _Backward):
        super().__init__()
        self.plan = plan
        self.scales: dict = {}       # id of a chain's factor list -> their product, built once


    def _scale(self, factors):
        """The product of the scales, each as a 1-d tensor of the channels; made once per chain,
        so every weight and operand the chain scales shares it (as in Relay, where the one scale
        expression is handed down the chain)."""
        key = id(factors)            # one list per chain, kept alive by the plan
        out = self.scales.get(key)
        if out is None:
            out = self.scales[key] = _product([_squeezed(self.visit(f), _tensor(f), t, axis)
                                               for f, t, axis in factors])
        return out

    def visit_call(self, call):
        plan = self.plan
        if call in plan.roots:
            return self.visit(plan.roots[call])
        new = super().visit_call(call)
        factors = plan.scale_of.get(call)
        if factors is None:
            return new
        name = _op_name(call)
        t = _tensor(call)
        if name in ("nn.conv2d", "nn.dense"):
            axis = _weight_axis(call, "out")
            w = new.args[1]
            scaled = _op("multiply", w, _expand_to(self._scale(factors), _tensor(call.args[1]).ndim, axis))
            return Call(new.op, (new.args[0], scaled), new.attrs).with_span(call.span)
        if name in ("nn.relu", "nn.leaky_relu"):
            return new
        if name == "nn.bias_add":
            bias = _op("multiply", new.args[1], self._scale(factors))
            return Call(new.op, (new.args[0], bias), new.attrs).with_span(call.span)
        if name in ("add", "subtract"):
            axis = plan.absorbs[call][0]
            args = [n if _same_shape(_tensor(a), t)
                    else _op("multiply", n, _expand_to(self._scale(factors), t.ndim, axis))
                    for a, n in zip(call.args, new.args)]
            return Call(new.op, tuple(args), new.attrs).with_span(call.span)
        if name == "multiply":
            return new.args[plan.absorbs[call][2]]
        raise AssertionError(f"BackwardFoldScaleAxis: {name} cannot take a scale")


@module_pass(opt_level=3)
def BackwardFoldScaleAxis(mod, ctx):
    """Fold a per-channel ``multiply`` after a convolution (or dense layer) into its weight.

    The scale may reach the convolution through ReLU (positive scales), additions (a bias is
    scaled too), ``nn.bias_add`` and other per-channel multiplications; each value on the way must
    have no other use.
    """
    return rewrite_each_function(mod, lambda func: _Backward(func).run(), ops=_ANCHORS)


# =============================================================================================
# Forward: a scale before a convolution goes into its weight


class _Scaled:
    """A value ``base * scale`` whose multiplication is still pending (``scale`` is a 1-d tensor of
    the channels, along ``axis``)."""

    __slots__ = ("base", "scale", "axis")

    def __init__(self, base, scale, axis):
        self.base, self.scale, self.axis = base, scale, axis


class _Forward(FusedAwareMutator):
    def __init__(self, func):
        super().__init__()
        self.func = func
        nodes = _walk(func.body)
        self.users = _users(func.body, nodes)
        self.wants: dict = {}        # node -> (axis, level): every user takes it scaled
        for node in reversed(nodes):
            want = self._want(node)
            if want is not None:
                self.wants[node] = want
        self.scaled: dict = {}       # original node -> _Scaled

    def _ask(self, user, pos):
        """Whether ``user`` can take its argument at ``pos`` (a call argument) scaled: (axis, level)."""
        name = _op_name(user)
        if name is None or pos == 0:
            return None
        i = pos - 1                   # expr_children of a call are (op, *args)
        t = _tensor(user)
        if name in ("nn.conv2d", "nn.dense"):
            if i != 0:
                return None
            axis = _channel_axis(user, "in")
            return None if axis is None else (axis, _ANY)
        if name in ("nn.relu", "nn.leaky_relu"):
            up = self.wants.get(user)
            return None if up is None else (up[0], _POSITIVE)
        if name in ("add", "subtract", "multiply"):
            arg, other = user.args[i], user.args[1 - i]
            if other is arg or not _same_shape(_tensor(arg), t):
                return None
            if name != "multiply" and _same_shape(_tensor(other), t):
                return None               # dividing a whole tensor costs what the fold saves
            up = self.wants.get(user)
            if up is None:
                return None
            return (up[0], max(up[1], _NONZERO) if name != "multiply" else up[1])
        return None

    def _want(self, node):
        users = self.users.get(node, ())
        if not users:
            return None
        axes, level = set(), _ANY
        for user, pos in users:
            if user is None:
                return None
            ask = self._ask(user, pos)
            if ask is None:
                return None
            axes.add(ask[0])
            level = max(level, ask[1])
        return (axes.pop(), level) if len(axes) == 1 else None

    # ---- rewriting --------------------------------------------------------------------------

    def _pending(self, node, base, scale, axis, value=None):
        """Record ``node`` as ``base`` scaled along ``axis``; give back its value for a reader that
        does not take it scaled after all (``value`` when the caller has it)."""
        self.scaled[node] = _Scaled(base, scale, axis)
        if value is None:
            value = _op("multiply", base, _expand_to(scale, _tensor(node).ndim, axis))
        return value

    def visit_call(self, call):
        new = super().visit_call(call)
        name = _op_name(call)
        if name is None:
            return new
        t = _tensor(call)
        want = self.wants.get(call)
        if name == "multiply" and want is not None:
            for i in (0, 1):
                x, s = call.args[i], call.args[1 - i]
                if not (_same_shape(_tensor(x), t) and _scales_axis(_tensor(s), t, want[0])
                        and _known(s, want[1])):
                    continue
                scale = _squeezed(new.args[1 - i], _tensor(s), t, want[0])
                inner = self.scaled.get(x)
                if inner is not None and inner.axis == want[0]:
                    return self._pending(call, inner.base, _op("multiply", inner.scale, scale), want[0], new)
                return self._pending(call, new.args[i], scale, want[0], new)
        pending = [self.scaled.get(a) for a in call.args]
        if not any(p is not None for p in pending):
            return new
        first = pending[0]
        if name in ("nn.conv2d", "nn.dense") and first is not None:
            axis = _weight_axis(call, "in")
            if axis is not None and first.axis == _channel_axis(call, "in"):
                w = _op("multiply", new.args[1], _expand_to(first.scale, _tensor(call.args[1]).ndim, axis))
                return Call(new.op, (first.base, w), new.attrs).with_span(call.span)
            return new
        if want is None:
            return new
        if name in ("nn.relu", "nn.leaky_relu") and first is not None:
            return self._pending(call, Call(new.op, (first.base,), new.attrs), first.scale, first.axis)
        if name in ("add", "subtract", "multiply"):
            i = 0 if pending[0] is not None else 1
            p, other = pending[i], new.args[1 - i]
            if pending[1 - i] is not None:
                return new
            if name != "multiply":
                other = _op("divide", other, _expand_to(p.scale, t.ndim, p.axis))
            args = (p.base, other) if i == 0 else (other, p.base)
            return self._pending(call, Call(new.op, args, new.attrs), p.scale, p.axis)
        return new

    def run(self):
        if not any(_op_name(n) == "multiply" for n in self.wants):
            return self.func
        return _rebuilt(self.func, self.visit(self.func.body))


@module_pass(opt_level=3)
def ForwardFoldScaleAxis(mod, ctx):
    """Fold a per-channel ``multiply`` before convolutions (or dense layers) into their weights.

    Every use of the scaled value must take it: convolutions, dense layers, and through ReLU
    (positive scales), additions of a broadcast operand (nonzero scales; the operand is divided)
    and multiplications.
    """
    return rewrite_each_function(mod, lambda func: _Forward(func).run(), ops=_ANCHORS)


# =============================================================================================
# The sequence


def FoldScaleAxis() -> Sequential:
    """Backward, then forward scale folding, then FoldConstant (Relay's ``FoldScaleAxis``).

    A Sequential: its members run only where the context enables them, so run it in
    ``PassContext(opt_level=3)`` (at the default opt_level 2 only FoldConstant runs, as in Relay).
    """
    seq = Sequential([BackwardFoldScaleAxis(), ForwardFoldScaleAxis(), get_pass("FoldConstant")()],
                     opt_level=3, name="FoldScaleAxis")
    return seq


register_pass("FoldScaleAxis", FoldScaleAxis, opt_level=3,
              doc="Fold per-channel scales into convolution weights: backward, forward, FoldConstant.")
