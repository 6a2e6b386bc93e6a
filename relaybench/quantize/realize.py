"""QuantizeRealize: simulated_quantize replaced by integer arithmetic (Relay's
``src/relay/quantize/realize.cc``).

The pass rewrites each function forward (:mod:`relaybench.quantize._rewrite`); a quantized
value is a :class:`QRealizeIntExpr`: an integer-valued expression ``data``, its ``dtype`` and its
scale ``dom_scale`` (a float32 number), standing for the real value ``data * dom_scale``. Used by
an operator without a rule, or as the result, it is dequantized:
``multiply(cast(data, "float32"), dom_scale)``. The rules, by operator:

* ``simulated_quantize`` of a float ``x`` (quantize):
  ``clip(round(multiply(x, 1 / dom_scale)), clip_min, clip_max)``, still float32 (the consumer
  casts it; FoldConstant makes the weights int8 constants). Of a quantized value at scale ``s_in``
  (requantize) to scale ``s_out``: only a clip when the scales are equal; when ``s_out / s_in`` is a
  power of two ``2**k``, ``right_shift(add(data, 2**(k-1)), k)`` (the add with
  ``round_for_shift``: halves round up) or ``left_shift(data, -k)``; otherwise a fixed-point
  multiply in int64 (:func:`fixed_point_multiply`); then the clip, and a cast to the value's dtype.
* ``nn.conv2d``, ``nn.dense`` with both inputs quantized: data cast to ``dtype_input`` (when
  it is not), weight cast to ``dtype_weight``, the op with ``out_dtype=dtype_activation``; the
  scale is the product of the two scales. A layer left in float takes dequantized data.
* ``multiply`` of two quantized values: both in ``dtype_activation``, scales multiplied.
* ``add``, ``concatenate``: the operands are brought to one dtype (``dtype_activation``; for
  ``concatenate`` of two values whose second is ``dtype_input``, that one) and to the smallest of
  their scales ``s``: each is multiplied by ``s_i / s`` (a left shift for a power of two, a
  multiply for an integer, a fixed-point multiply otherwise). An operand that was an INPUT
  simulated_quantize is cast to ``dtype_input`` and back around an ``annotation.stop_fusion``,
  as Relay does, so that it is stored as int8.
* ``nn.relu``, ``reshape``, ``strided_slice``, ``nn.batch_flatten``, ``transpose``,
  ``annotation.stop_fusion``: applied to the integer data, scale kept. ``clip``: its bounds
  divided by the scale.
* ``nn.max_pool2d``: on the data cast to ``dtype_input``; ``nn.avg_pool2d``,
  ``nn.global_avg_pool2d``: on the data in ``dtype_activation`` (integer averages truncate).

Fixed-point requantization (``rounding``): a factor ``f`` is written ``m * 2**-n`` with ``m`` a
31-bit integer (``frexp``); ``x * f`` is ``(x * m + r) >> n`` in int64 where ``r = 2**(n-1)``
("UPWARD": halves up) or, for negative ``x``, ``2**(n-1) - 1`` ("TONEAREST": halves away from
zero).

Where the realized program departs from the simulated one (both as in Relay, whose simulation
does not model them):

* ``add`` (and ``concatenate``) rounds a second time. The simulated program adds ``b * s_b``
  to ``acc * s_acc`` exactly; the realized one brings the operand of the larger scale to the
  smaller one, ``round(b * s_b / s_acc)``, an error of up to half a step of ``s_acc``. The bias
  that batch_norm leaves (a WEIGHT of its own power-of-two scale) and the INPUT side of a
  residual add both take it. It moves a value by one step of the next requantization only
  where the value lies within that error of a rounding boundary there. With scales that are
  all powers of two (the default ``global_scale`` 8 and ``weight_scale="power2"``) the second
  rounding is exact and the two programs agree bit for bit. In a deep network such a one-step change is a perturbation
  like any other: MobileNet V2 at 3x32x32 (``calibrate_mode="max"``) gives simulated and
  realized outputs 15.7 dB apart, as far apart as the simulated program is from itself when its
  input is scaled by 1 + 1e-4 (16.2 dB); the simulated program with each add's operand rounded
  onto the smaller scale agrees with the realized one to 98.8 dB.
* The accumulators are ``dtype_activation`` integers: with ``nbit_activation=16`` and
  ``dtype_activation="int16"`` a conv2d or dense sum beyond the int16 range wraps, where the
  simulated program (whose conv2d is float32, and whose only ACTIVATION clips are on
  ``concatenate`` fields) keeps it. The simulated 8/16 program is the 8/32 one.

>>> import relaybench as rb
>>> from relaybench.quantize import qconfig, QuantizeAnnotate, QuantizeCalibrate
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(1, 4), float32]) {
...   nn.dense(%x, meta[relay.Constant][0], units=2)
... }''', init_meta_table={"relay.Constant": [rb.const([[0.5, -1, 0.25, 2], [1, 1, 1, 1]])]})
>>> with qconfig(skip_dense_layer=False, skip_conv_layers=None, global_scale=4.0):
...     mod = QuantizeRealize()(QuantizeCalibrate()(QuantizeAnnotate()(mod)))
>>> print(rb.passes.FoldConstant()(mod)["main"].astext(show_types=False))  # doctest: +ELLIPSIS
fn (%x: Tensor[(1, 4), float32]) -> Tensor[(1, 2), float32] {
  %0 = multiply(%x, 32f);
  %1 = round(%0);
  %2 = clip(%1, a_min=-127f, a_max=127f);
  %3 = cast(%2, dtype="int8");
  %4 = nn.dense(%3, meta[relay.Constant][0], units=2, out_dtype="int32");
  %5 = cast(%4, dtype="float32");
  multiply(%5, 0.00048828125f)
}
...
    {"dtype": "int8", "shape": [2, 4], "data": "IMAQf0BAQEA="}
...
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.expr import Call, Constant, Function, Op, Tuple
from ..passes.infra import function_pass
from ._rewrite import PendingTuple, TempExpr, forward_rewrite, realize
from .annotate import SIMULATED_QUANTIZE
from .qconfig import QAnnotateKind, current_qconfig

__all__ = ["QuantizeRealize", "realize_function", "QRealizeIntExpr", "REALIZE_RULES",
           "fixed_point_multiplier"]


def _op(name: str, *args, **attrs) -> Call:
    return Call(Op.get(name), list(args), attrs)


def _scalar(value, dtype: str) -> Constant:
    return Constant(np.asarray(value, dtype=dtype))


def _cast(expr, dtype: str):
    return _op("cast", expr, dtype=dtype)


class QRealizeIntExpr(TempExpr):
    """``data`` (of ``dtype``, integer-valued) standing for ``data * dom_scale``."""

    def __init__(self, data, dom_scale, dtype: str):
        self.data, self.dom_scale, self.dtype = data, float(np.float32(dom_scale)), dtype

    def realize(self):
        return _op("multiply", _cast(self.data, "float32"), _scalar(self.dom_scale, "float32"))


def _clip(data, lo: float, hi: float, dtype: str):
    if dtype.startswith("int"):
        info = np.iinfo(dtype)
        lo, hi = max(lo, float(info.min)), min(hi, float(info.max))
    return _op("clip", data, a_min=float(lo), a_max=float(hi))


def fixed_point_multiplier(factor: float) -> tuple:
    """``(m, n)`` with ``factor ~= m * 2**-n`` and ``m`` an integer below ``2**31`` (Relay's
    ``GetFixedPointMultiplierShift``, as one right shift): ``n`` is at most 62.

    >>> fixed_point_multiplier(0.75)
    (1610612736, 31)
    """
    if not factor > 0 or not math.isfinite(factor):
        raise ValueError(f"QuantizeRealize: a requantization factor must be positive, got {factor}")
    significand, exponent = math.frexp(factor)
    m = int(round(significand * (1 << 31)))
    if m == 1 << 31:
        m //= 2
        exponent += 1
    n = 31 - exponent
    if n > 62:
        m >>= n - 62
        n = 62
    if n < 1:
        raise ValueError(f"QuantizeRealize: a requantization factor of {factor} is too large "
                         f"for a 32-bit fixed-point multiply")
    return m, n


def fixed_point_multiply(data, factor: float, dtype: str, rounding: str):
    """``data * factor`` rounded, computed in int64 and cast to ``dtype`` (see the module)."""
    m, n = fixed_point_multiplier(factor)
    x = _cast(data, "int64")
    prod = _op("multiply", x, _scalar(m, "int64"))
    half = 1 << (n - 1)
    if rounding == "UPWARD":
        bias = _scalar(half, "int64")
    else:
        bias = _op("where", _op("less", x, _scalar(0, "int64")), _scalar(half - 1, "int64"),
                   _scalar(half, "int64"))
    return _op("right_shift", _op("add", prod, bias), _scalar(n, "int64"))


def _is_power_of_two(value: float) -> bool:
    return value > 0 and math.log2(value) == int(math.log2(value))


def _mul_and_div(data, s1: float, s2: float, dtype: str, cfg):
    """``data * s1 / s2`` in ``dtype`` (``s1 >= s2``): a left shift, an integer multiply or a
    fixed-point multiply (Relay's ``MulAndDiv``)."""
    if s1 == s2:
        return data
    factor = float(np.float32(s1) / np.float32(s2))
    shift = math.log2(factor)
    if shift == int(shift) and shift > 0:
        return _op("left_shift", data, _scalar(int(shift), dtype))
    if factor == int(factor):
        return _op("multiply", data, _scalar(int(factor), dtype))
    return _cast(fixed_point_multiply(data, factor, dtype, cfg.rounding), dtype)


def _is_sq_of_kind(expr, kind) -> bool:
    return (isinstance(expr, Call) and isinstance(expr.op, Op) and expr.op.name == SIMULATED_QUANTIZE
            and expr.attrs.kind == kind)


# ---- the rules --------------------------------------------------------------------------------

def _scalar_value(expr, what: str, call) -> float:
    if not isinstance(expr, Constant) or expr.data.size != 1:
        raise ValueError(f"QuantizeRealize: the {what} of a simulated_quantize is not a constant "
                         f"scalar (run QuantizeCalibrate first)")
    return float(np.float32(expr.data.reshape(())))


def _quantize(cfg, call, args):
    if call.attrs.kind == QAnnotateKind.IDENTITY:
        return args[0]
    dom_scale = _scalar_value(args[1], "dom_scale", call)
    clip_min = _scalar_value(args[2], "clip_min", call)
    clip_max = _scalar_value(args[3], "clip_max", call)
    if dom_scale <= 0:
        raise ValueError(f"QuantizeRealize: a simulated_quantize has dom_scale {dom_scale}; "
                         f"scales must be positive")
    n = args[0]
    if isinstance(n, QRealizeIntExpr):
        out = _quantize_int(cfg, n, dom_scale, clip_min, clip_max)
        if cfg.store_lowbit_output and call.attrs.kind == QAnnotateKind.INPUT \
                and out.dtype != cfg.dtype_input and out.dtype.startswith("int"):
            # stored in INPUT bits (the clip keeps it in range), fenced as the data of a layer is
            data = _op("annotation.stop_fusion", _cast(out.data, cfg.dtype_input))
            out = QRealizeIntExpr(data, out.dom_scale, cfg.dtype_input)
        return out
    if isinstance(n, TempExpr):
        n = n.realize()
    # the bounds are kept inside what the kind's dtype holds once the float is cast to it:
    # float32(2**31 - 1) is 2**31, which int32 does not hold
    limit = _float32_limit(cfg.get_dtype_by_kind(call.attrs.kind))
    scaled = _op("multiply", n, _scalar(1.0 / np.float32(dom_scale), "float32"))
    rounded = _op("clip", _op("round", scaled), a_min=max(clip_min, -limit), a_max=min(clip_max, limit))
    return QRealizeIntExpr(rounded, dom_scale, "float32")


def _quantize_int(cfg, n, dom_scale: float, clip_min: float, clip_max: float):
    """A simulated_quantize of an integer value: requantized to ``dom_scale`` and clipped."""
    data, dtype = n.data, n.dtype
    if not dtype.startswith("int"):             # a quantized float constant: make it integer
        dtype = cfg.dtype_activation
        data = _cast(data, dtype)
    if n.dom_scale == dom_scale:
        return QRealizeIntExpr(_clip(data, clip_min, clip_max, dtype), dom_scale, dtype)
    ratio = float(np.float32(dom_scale) / np.float32(n.dom_scale))
    shift = math.log2(ratio)
    if shift == int(shift):
        shift = int(shift)
        if shift > 0:
            if cfg.round_for_shift:
                data = _op("add", data, _scalar(1 << (shift - 1), dtype))
            data = _op("right_shift", data, _scalar(shift, dtype))
        else:
            data = _op("left_shift", data, _scalar(-shift, dtype))
        return QRealizeIntExpr(_clip(data, clip_min, clip_max, dtype), dom_scale, dtype)
    factor = float(np.float32(n.dom_scale) / np.float32(dom_scale))
    data = fixed_point_multiply(data, factor, dtype, cfg.rounding)
    data = _cast(_clip(data, clip_min, clip_max, "int64"), dtype)
    return QRealizeIntExpr(data, dom_scale, dtype)


def _float32_limit(dtype: str) -> float:
    """The largest float32 that the integer ``dtype`` holds."""
    top = np.iinfo(dtype).max
    value = np.float32(top)
    if float(value) > top:
        value = np.nextafter(value, np.float32(0))
    return float(value)


def _with_attrs(call, **changes) -> dict:
    attrs = dict(call.attrs.items())
    attrs.update(changes)
    return attrs


def _conv_dense(cfg, call, args):
    lhs, rhs = args
    if not (isinstance(lhs, QRealizeIntExpr) and isinstance(rhs, QRealizeIntExpr)):
        # a layer left in float (skipped) whose data is quantized: it gets the dequantized data
        return None
    ldata = lhs.data if lhs.dtype == cfg.dtype_input else _cast(lhs.data, cfg.dtype_input)
    rdata = _cast(rhs.data, cfg.dtype_weight)
    out = Call(call.op, [ldata, rdata], _with_attrs(call, out_dtype=cfg.dtype_activation), call.type_args)
    return QRealizeIntExpr(out, np.float32(lhs.dom_scale) * np.float32(rhs.dom_scale), cfg.dtype_activation)


def _multiply(cfg, call, args):
    lhs, rhs = args
    if not (isinstance(lhs, QRealizeIntExpr) and isinstance(rhs, QRealizeIntExpr)):
        return None
    dtype = cfg.dtype_activation
    ldata = lhs.data if lhs.dtype == dtype else _cast(lhs.data, dtype)
    rdata = rhs.data if rhs.dtype == dtype else _cast(rhs.data, dtype)
    return QRealizeIntExpr(Call(call.op, [ldata, rdata], call.attrs, call.type_args),
                           np.float32(lhs.dom_scale) * np.float32(rhs.dom_scale), dtype)


def _unify(cfg, ref_args, values, dtype=None):
    """The operands brought to one dtype and the smallest scale (Relay's ``UnifyDTypeScale``):
    (new data, dtype, scale)."""
    if dtype is None:
        dtype = (cfg.dtype_input if len(values) == 2 and values[1].dtype == cfg.dtype_input
                 else cfg.dtype_activation)
    out = []
    for ref, v in zip(ref_args, values):
        data = v.data
        if v.dtype != dtype:
            data = _cast(data, dtype)
        elif _is_sq_of_kind(ref, QAnnotateKind.INPUT):
            data = _cast(_op("annotation.stop_fusion", _cast(data, cfg.dtype_input)), dtype)
        out.append(data)
    scale = min(v.dom_scale for v in values)
    out = [_mul_and_div(d, v.dom_scale, scale, dtype, cfg) for d, v in zip(out, values)]
    return out, dtype, scale


def _add(cfg, call, args):
    if not all(isinstance(a, QRealizeIntExpr) for a in args):
        return None
    data, dtype, scale = _unify(cfg, call.args, args, cfg.dtype_activation)
    return QRealizeIntExpr(Call(call.op, data, call.attrs, call.type_args), scale, dtype)


def _concatenate(cfg, call, args):
    tup = args[0]
    if not isinstance(tup, PendingTuple) or not all(isinstance(f, QRealizeIntExpr) for f in tup.fields):
        return None
    data, dtype, scale = _unify(cfg, tup.ref.fields, tup.fields)
    return QRealizeIntExpr(Call(call.op, [Tuple(data)], call.attrs, call.type_args), scale, dtype)


def _identity(cfg, call, args):
    n = args[0]
    if not isinstance(n, QRealizeIntExpr):
        return None
    rest = [realize(a) for a in args[1:]]
    return QRealizeIntExpr(Call(call.op, [n.data] + rest, call.attrs, call.type_args), n.dom_scale, n.dtype)


def _clip_rule(cfg, call, args):
    n = args[0]
    if not isinstance(n, QRealizeIntExpr):
        return None
    lo, hi = call.attrs.a_min / n.dom_scale, call.attrs.a_max / n.dom_scale
    return QRealizeIntExpr(_clip(n.data, lo, hi, n.dtype), n.dom_scale, n.dtype)


def _max_pool(cfg, call, args):
    n = args[0]
    if not isinstance(n, QRealizeIntExpr):
        return None
    data = _cast(n.data, cfg.dtype_input)
    return QRealizeIntExpr(Call(call.op, [data], call.attrs, call.type_args), n.dom_scale, cfg.dtype_input)


def _avg_pool(cfg, call, args):
    n = args[0]
    if not isinstance(n, QRealizeIntExpr):
        return None
    data = n.data if n.dtype == cfg.dtype_activation else _cast(n.data, cfg.dtype_activation)
    return QRealizeIntExpr(Call(call.op, [data], call.attrs, call.type_args), n.dom_scale,
                           cfg.dtype_activation)


#: operator name -> rule(qconfig, call, argument values) -> value or None (Relay's
#: ``FQRealizeRewrite`` registrations)
REALIZE_RULES: dict = {
    SIMULATED_QUANTIZE: _quantize, "nn.conv2d": _conv_dense, "nn.dense": _conv_dense,
    "multiply": _multiply, "add": _add, "concatenate": _concatenate, "nn.relu": _identity,
    "reshape": _identity, "strided_slice": _identity, "nn.batch_flatten": _identity,
    "transpose": _identity, "annotation.stop_fusion": _identity, "clip": _clip_rule,
    "nn.max_pool2d": _max_pool, "nn.avg_pool2d": _avg_pool, "nn.global_avg_pool2d": _avg_pool,
}


def realize_function(func: Function) -> Function:
    """``func`` with its simulated_quantize calls realized in integers (see the module)."""
    cfg = current_qconfig()

    def rule_of(name):
        rule = REALIZE_RULES.get(name)
        return None if rule is None else (lambda call, args: rule(cfg, call, args))

    body = forward_rewrite(func, "QuantizeRealize", rule_of)
    if body is func.body:
        return func
    return Function(func.params, body, None, func.type_params, func.attrs)


@function_pass(opt_level=1)
def QuantizeRealize(func, mod, ctx):
    """Replace simulated_quantize by integer arithmetic: int8 conv2d/dense, requantization."""
    return realize_function(func)
