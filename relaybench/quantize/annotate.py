"""QuantizeAnnotate: simulated_quantize calls placed by per-operator rules (Relay's
``python/tvm/relay/quantize/_annotate.py`` and ``src/relay/quantize/annotate.cc``).

The pass rewrites each function forward (:mod:`relaybench.quantize._rewrite`), giving every
value either nothing (a float value) or a *kind* (:class:`~relaybench.quantize.QAnnotateKind`):
INPUT (a value quantized to ``nbit_input`` bits), WEIGHT, or ACTIVATION (an accumulator of
``nbit_activation`` bits). ``attach(x, kind)`` wraps ``x`` in
``relay.op.annotation.simulated_quantize(x, %dom_scale, %clip_min, %clip_max, kind=...)``, the
same call for the same ``x`` and kind. The rules, by operator:

* ``nn.conv2d``, ``nn.dense`` (not with ``skip_dense_layer``): data attached as INPUT unless it
  already is INPUT, weight as WEIGHT; the result is ACTIVATION. A weight computed at run time
  (a call that FoldConstant could not fold; under ``quantize``, which binds the parameters
  first, a variable too) leaves the call in float; a variable weight annotated by this pass
  alone is taken for a weight still to bind.
* ``add``: one float side is attached as INPUT (as WEIGHT when it is a constant, the bias that
  batch_norm leaves); ACTIVATION + ACTIVATION attaches the right one as INPUT; INPUT + INPUT is
  INPUT; otherwise ACTIVATION.
* ``multiply``: an ACTIVATION or INPUT left side times a float right side (WEIGHT if constant,
  else INPUT) is ACTIVATION; other cases stay in float (Relay raises).
* ``nn.relu``, ``clip``, ``reshape``, ``strided_slice``, ``nn.avg_pool2d``, ``nn.batch_flatten``,
  ``transpose``, ``annotation.stop_fusion``: keep the kind of their input.
* ``nn.max_pool2d``: an ACTIVATION input is attached as INPUT; the result is INPUT.
* ``concatenate``: float fields are attached as ACTIVATION; the result is ACTIVATION.
* ``nn.global_avg_pool2d``: takes its input as it is, and stops the quantization: every
  operator visited after it stays in float.

Only calls whose operands and result are float32 are annotated; others (float64, integer
arithmetic) stay as they are. A value with a kind that is used more than once is attached as INPUT before each use (Relay's
``fmulti_ref``), and a value with a kind that reaches an operator without a rule, a
control-flow boundary (a ``let``, a branch, a closure's body; see
:mod:`relaybench.quantize._rewrite`) or the function's result, is used as it is (an ACTIVATION
attached as INPUT first under ``store_lowbit_output``, so an accelerator that stores int8 only
can give it). ``skip_conv_layers`` leaves the conv2d layers of these
indices (in the order they are visited) in float, and every operator visited before the
skipped conv2d too; ``debug_enabled_ops`` restricts the rules to those operators. The scalars
``%dom_scale``, ``%clip_min``, ``%clip_max`` of each call are new parameters of ``@main``,
after its own, which QuantizeCalibrate binds; in the module's other functions (a recursive
cell called from ``@main``, whose calls fix its signature) they are NaN constants that
QuantizeCalibrate replaces. Every global function is annotated, control flow included, so a
model whose layers sit in a recursive function (a TreeLSTM; its weights made constants by
:mod:`~relaybench.passes.specialize_constant_args` first) is quantized too.

>>> import relaybench as rb
>>> from relaybench.quantize import qconfig
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(1, 2, 4, 4), float32], %w: Tensor[(2, 2, 1, 1), float32]) {
...   nn.relu(nn.conv2d(%x, %w, kernel_size=[1, 1]))
... }''')
>>> with qconfig(skip_conv_layers=None):
...     print(QuantizeAnnotate()(mod)["main"].astext(show_types=False))  # doctest: +ELLIPSIS
fn (%x: Tensor[(1, 2, 4, 4), float32], %w: Tensor[(2, 2, 1, 1), float32], %dom_scale: float32, ...) -> Tensor[(1, 2, 4, 4), float32] {
  %0 = relay.op.annotation.simulated_quantize(%x, %dom_scale, %clip_min, %clip_max, kind=1);
  %1 = relay.op.annotation.simulated_quantize(%w, %dom_scale1, %clip_min1, %clip_max1, kind=2);
  %2 = nn.conv2d(%0, %1, kernel_size=[1, 1]);
  nn.relu(%2)
}
"""

from __future__ import annotations

from contextvars import ContextVar

import numpy as np

from ..ir.expr import Call, Constant, Function, Op, Tuple, Var
from ..ir.types import TensorType, TupleType
from ..passes.infra import function_pass
from ._rewrite import PendingTuple, TempExpr, forward_rewrite
from .qconfig import QAnnotateKind, current_qconfig

__all__ = ["QuantizeAnnotate", "annotate_function", "SIMULATED_QUANTIZE", "ANNOTATE_RULES"]

SIMULATED_QUANTIZE = "relay.op.annotation.simulated_quantize"

INPUT, WEIGHT, ACTIVATION = QAnnotateKind.INPUT, QAnnotateKind.WEIGHT, QAnnotateKind.ACTIVATION


class QAnnotateExpr(TempExpr):
    """An expression and its kind; realized, the expression itself (an ACTIVATION under
    ``store_lowbit_output``: the expression attached as INPUT, ``lowbit`` being the annotator)."""

    def __init__(self, expr, kind: QAnnotateKind):
        self.expr, self.kind = expr, QAnnotateKind(kind)
        self.lowbit = None

    def realize(self):
        if self.lowbit is not None and self.kind == ACTIVATION:
            return self.lowbit.attach(self.expr, INPUT)
        return self.expr


def _expr_kind(value):
    if isinstance(value, QAnnotateExpr):
        return value.expr, value.kind
    if isinstance(value, TempExpr):
        return value.realize(), None
    return value, None


def _is_constant(expr) -> bool:
    return isinstance(expr, Constant)


class _Annotator:
    """The state of one run: the conv2d counter, the stop flag, the attached calls and the new
    scalar parameters."""

    def __init__(self, cfg, scalars_as_params: bool = True):
        self.cfg = cfg
        self.scalars_as_params = scalars_as_params
        self.conv2d_counter = 0
        self.stopped = False
        self.cache: dict = {}
        self.new_params: list = []

    # ---- Relay's QuantizeContext ------------------------------------------------------------
    def check_to_skip(self, call: Call) -> bool:
        """Whether ``call`` stays in float: after a global_avg_pool2d, and while the conv2d
        counter is at a skipped index (the skipped conv2d itself counts)."""
        if self.stopped:
            return True
        skipped = self.cfg.skip_conv_layers
        if skipped is not None:
            is_conv = call.op.name == "nn.conv2d"
            if self.conv2d_counter in skipped:
                if is_conv:
                    self.conv2d_counter += 1
                return True
            if is_conv:
                self.conv2d_counter += 1
        return False

    def attach(self, data, kind, sign: bool = True):
        """``simulated_quantize(data, ...)`` of ``kind``: ``data`` itself when it already is one
        of that kind, the same call when ``data`` was attached with ``kind`` before."""
        kind = QAnnotateKind(kind)
        if (isinstance(data, Call) and isinstance(data.op, Op) and data.op.name == SIMULATED_QUANTIZE
                and data.attrs.kind == kind and data.attrs.sign == sign):
            return data
        key = (data, int(kind), sign)
        if key in self.cache:
            return self.cache[key]
        if self.scalars_as_params:
            scalar = TensorType((), "float32")
            scalars = [Var(name, scalar) for name in ("dom_scale", "clip_min", "clip_max")]
            self.new_params.extend(scalars)
        else:
            scalars = [Constant(np.float32(np.nan)) for _ in range(3)]
        call = Call(Op.get(SIMULATED_QUANTIZE), [data] + scalars,
                    {"kind": int(kind), "sign": sign, "rounding": "round"})
        self.cache[key] = call
        return call

    def multi_ref(self, value):
        expr, _kind = _expr_kind(value)
        return QAnnotateExpr(self.attach(expr, INPUT), INPUT)

    # ---- the rules --------------------------------------------------------------------------
    def rule_of(self, op_name: str):
        rule = ANNOTATE_RULES.get(op_name)
        if rule is None:
            return None
        enabled = self.cfg.debug_enabled_ops
        if enabled is not None and op_name not in enabled:
            return None

        def apply(call, args):
            if not _all_float32(call):
                if call.op.name == "nn.conv2d":
                    self.check_to_skip(call)   # it still counts for skip_conv_layers
                return None
            out = rule(self, call, args)
            if isinstance(out, QAnnotateExpr) and self.cfg.store_lowbit_output:
                out.lowbit = self
            return out
        return apply


#: True while :func:`~relaybench.quantize.quantize` annotates a program whose parameters it has
#: bound: a weight that is still a variable then is a run-time input, not an unbound weight.
_WEIGHTS_BOUND: ContextVar = ContextVar("quantize_weights_bound", default=False)


def _all_float32(call: Call) -> bool:
    """Whether the call's result and operands are float32 tensors (or tuples of them), as far as
    type inference has said: quantization simulates float32 arithmetic, so calls on other
    dtypes (float64, integers) stay as they are."""
    stack = [call.type_or_none] + [a.type_or_none for a in call.args]
    while stack:
        t = stack.pop()
        if isinstance(t, TupleType):
            stack.extend(t.fields)
        elif isinstance(t, TensorType) and str(t.dtype) != "float32":
            return False
    return True


def _forward(call: Call, args) -> Call:
    return Call(call.op, args, call.attrs, call.type_args)


def _conv_dense(a: _Annotator, call, args):
    if call.op.name == "nn.dense" and a.cfg.skip_dense_layer:
        return None
    if a.check_to_skip(call):
        return None
    lhs, lkind = _expr_kind(args[0])
    rhs, rkind = _expr_kind(args[1])
    if rkind is None and not _is_constant(rhs) and (
            not isinstance(rhs, Var) or _WEIGHTS_BOUND.get()):
        return None   # a weight computed at run time stays in float
    if lkind is None or lkind == ACTIVATION:
        lhs = a.attach(lhs, INPUT)
    if rkind is not None:
        raise ValueError(f"QuantizeAnnotate: the weight of {call.op.name} is a quantized value "
                         f"({rkind.name}); only a float weight can be annotated")
    rhs = a.attach(rhs, WEIGHT)
    return QAnnotateExpr(_forward(call, [lhs, rhs]), ACTIVATION)


def _multiply(a: _Annotator, call, args):
    if a.check_to_skip(call):
        return None
    lhs, lkind = _expr_kind(args[0])
    rhs, rkind = _expr_kind(args[1])
    if lkind in (ACTIVATION, INPUT) and rkind is None:
        if lkind == ACTIVATION:
            lhs = a.attach(lhs, INPUT)
        rhs = a.attach(rhs, WEIGHT if _is_constant(rhs) else INPUT)
        return QAnnotateExpr(_forward(call, [lhs, rhs]), ACTIVATION)
    return None


def _add(a: _Annotator, call, args):
    if a.check_to_skip(call):
        return None
    lhs, lkind = _expr_kind(args[0])
    rhs, rkind = _expr_kind(args[1])
    if lkind is None and rkind is None:
        return None
    if lkind is None:
        lhs = a.attach(lhs, INPUT)
        return QAnnotateExpr(_forward(call, [lhs, rhs]), INPUT)
    if rkind is None:
        rhs = a.attach(rhs, WEIGHT if _is_constant(rhs) else INPUT)
        return QAnnotateExpr(_forward(call, [lhs, rhs]), ACTIVATION)
    if lkind == INPUT and rkind == INPUT:
        return QAnnotateExpr(_forward(call, [lhs, rhs]), INPUT)
    if lkind == ACTIVATION and rkind == ACTIVATION:
        rhs = a.attach(rhs, INPUT)
        return QAnnotateExpr(_forward(call, [lhs, rhs]), ACTIVATION)
    if {lkind, rkind} == {ACTIVATION, INPUT}:
        return QAnnotateExpr(_forward(call, [lhs, rhs]), ACTIVATION)
    raise ValueError(f"QuantizeAnnotate: add of a {lkind.name} and a {rkind.name} value "
                     f"cannot be annotated")


def _identity(a: _Annotator, call, args):
    if a.check_to_skip(call):
        return None
    expr, kind = _expr_kind(args[0])
    if kind is None:
        return None
    return QAnnotateExpr(_forward(call, [expr] + [_expr_kind(x)[0] for x in args[1:]]), kind)


def _max_pool(a: _Annotator, call, args):
    if a.check_to_skip(call):
        return None
    expr, kind = _expr_kind(args[0])
    if kind is None:
        return None
    if kind == ACTIVATION:
        expr = a.attach(expr, INPUT)
    return QAnnotateExpr(_forward(call, [expr]), INPUT)


def _concatenate(a: _Annotator, call, args):
    if a.check_to_skip(call):
        return None
    tup = args[0]
    if not isinstance(tup, PendingTuple):
        return None
    exprs, kinds = zip(*[_expr_kind(f) for f in tup.fields])
    exprs = [a.attach(e, ACTIVATION) if k is None else e for e, k in zip(exprs, kinds)]
    return QAnnotateExpr(_forward(call, [Tuple(exprs)]), ACTIVATION)


def _global_avg_pool(a: _Annotator, call, args):
    if a.check_to_skip(call):
        return None
    expr, kind = _expr_kind(args[0])
    if kind is None:
        return None
    a.stopped = True
    return _forward(call, [expr])


#: operator name -> rule(annotator, call, argument values) -> value or None (Relay's
#: ``FQAnnotateRewrite`` registrations)
ANNOTATE_RULES: dict = {
    "nn.conv2d": _conv_dense, "nn.dense": _conv_dense, "multiply": _multiply, "add": _add,
    "reshape": _identity, "clip": _identity, "nn.relu": _identity, "strided_slice": _identity,
    "nn.avg_pool2d": _identity, "nn.batch_flatten": _identity, "transpose": _identity,
    "annotation.stop_fusion": _identity, "nn.max_pool2d": _max_pool,
    "concatenate": _concatenate, "nn.global_avg_pool2d": _global_avg_pool,
}


def annotate_function(func: Function, scalars_as_params: bool = True) -> Function:
    """``func`` with simulated_quantize calls placed by the current qconfig (see the module).
    With ``scalars_as_params=False`` (a global function other than ``@main``, whose signature
    its calls fix) the three scalars of each call are float32 NaN constants instead of new
    parameters, for QuantizeCalibrate to replace."""
    a = _Annotator(current_qconfig(), scalars_as_params)
    body = forward_rewrite(func, "QuantizeAnnotate", a.rule_of, a.multi_ref)
    if body is func.body and not a.new_params:
        return func
    return Function(tuple(func.params) + tuple(a.new_params), body, None, func.type_params, func.attrs)


@function_pass(opt_level=1)
def QuantizeAnnotate(func, mod, ctx):
    """Place simulated_quantize calls (kinds INPUT, WEIGHT, ACTIVATION) by per-operator rules."""
    main = any(gv.name_hint == "main" and f is func for gv, f in mod.functions.items())
    return annotate_function(func, scalars_as_params=main)
