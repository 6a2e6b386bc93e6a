"""Converters of ONNX's elementwise, comparison, logic, math and activation ops and reductions.

Each converter is ``convert(ctx, inputs, attrs) -> Expr`` (or a list for several outputs);
``inputs`` holds None for an optional input left out. :mod:`.table` maps op types and opsets to
them. Where ONNX and Relay differ, the converter says how it bridges them (``Round`` rounds
halves to even, Relay's ``round`` away from zero; integer ``Mod`` without ``fmod`` follows the
divisor's sign, Relay's ``floor_mod``).
"""

from __future__ import annotations

import numpy as np

from ... import op
from ...ir.expr import Constant
from ...op.tensor import FLOAT_DTYPES, INT_DTYPES


def scalar(value, dtype: str) -> Constant:
    """A 0-d constant of ``dtype``."""
    return Constant(np.asarray(value, dtype=dtype))


def unary(func):
    def convert(ctx, inputs, attrs):
        return func(inputs[0])
    convert.__name__ = f"unary_{getattr(func, '__name__', 'op')}"
    return convert


def binary(func):
    def convert(ctx, inputs, attrs):
        return func(inputs[0], inputs[1])
    convert.__name__ = f"binary_{getattr(func, '__name__', 'op')}"
    return convert


def legacy_broadcast(func):
    """Opsets before 7: ``broadcast=1`` with ``axis`` aligned the right operand at ``axis``."""
    def convert(ctx, inputs, attrs):
        a, b = inputs
        if attrs.get("broadcast", 0) and "axis" in attrs:
            rank_a, rank_b = ctx.rank(a), ctx.rank(b)
            axis = attrs["axis"] % rank_a if rank_a else 0
            trailing = rank_a - axis - rank_b
            if trailing > 0:
                b = op.expand_dims(b, axis=-1, num_newaxis=trailing)
        return func(a, b)
    return convert


def variadic(func):
    """``Sum``, ``Max``, ``Min``: a left fold of a binary op over every input."""
    def convert(ctx, inputs, attrs):
        out = inputs[0]
        for x in inputs[1:]:
            out = func(out, x)
        return out if len(inputs) > 1 else op.copy(out)
    return convert


def mean(ctx, inputs, attrs):
    total = variadic(op.add)(ctx, inputs, attrs)
    return op.divide(total, scalar(len(inputs), ctx.dtype(inputs[0])))


def identity(ctx, inputs, attrs):
    return op.copy(inputs[0])


def pow_(ctx, inputs, attrs):
    base, exponent = inputs
    if ctx.dtype(exponent) != ctx.dtype(base):
        exponent = op.cast(exponent, dtype=ctx.dtype(base))
    return op.power(base, exponent)


def div(ctx, inputs, attrs):
    return op.divide(inputs[0], inputs[1])


def mod(ctx, inputs, attrs):
    a, b = inputs
    if attrs.get("fmod", 0) or ctx.dtype(a) in FLOAT_DTYPES:
        return op.mod(a, b)
    return op.floor_mod(a, b)


def reciprocal(ctx, inputs, attrs):
    return op.divide(scalar(1, ctx.dtype(inputs[0])), inputs[0])


def round_half_even(ctx, inputs, attrs):
    """ONNX's ``Round`` rounds halves to even; Relay's ``round`` rounds them away from zero, so a
    half is rounded as ``2 * round(x / 2)`` instead."""
    x = inputs[0]
    dt = ctx.dtype(x)
    frac = op.subtract(x, op.floor(x))
    half = op.equal(frac, scalar(0.5, dt))
    even = op.multiply(op.round(op.multiply(x, scalar(0.5, dt))), scalar(2, dt))
    return op.where(half, even, op.round(x))


def not_(ctx, inputs, attrs):
    return op.logical_not(inputs[0])


def isinf(ctx, inputs, attrs):
    x = inputs[0]
    pos, neg = attrs.get("detect_positive", 1), attrs.get("detect_negative", 1)
    inf = op.isinf(x)
    if pos and neg:
        return inf
    if not pos and not neg:
        return op.logical_and(inf, op.logical_not(inf))
    zero = scalar(0, ctx.dtype(x))
    side = op.greater(x, zero) if pos else op.less(x, zero)
    return op.logical_and(inf, side)


def bitshift(ctx, inputs, attrs):
    direction = attrs.get("direction", "")
    if direction not in ("LEFT", "RIGHT"):
        ctx.fail(f"direction must be LEFT or RIGHT, got {direction!r}")
    return (op.left_shift if direction == "LEFT" else op.right_shift)(inputs[0], inputs[1])


def cast(ctx, inputs, attrs):
    from .importer import dtype_of
    return op.cast(inputs[0], dtype=dtype_of(attrs["to"], f"{ctx.where}: attribute to"))


def cast_like(ctx, inputs, attrs):
    return op.cast(inputs[0], dtype=ctx.dtype(inputs[1]))


def clip(ctx, inputs, attrs):
    x = inputs[0]
    dt = ctx.dtype(x)
    if ctx.version < 11:
        lo, hi = attrs.get("min", None), attrs.get("max", None)
    else:
        lo = inputs[1] if len(inputs) > 1 else None
        hi = inputs[2] if len(inputs) > 2 else None
        lo_v, hi_v = ctx.try_static(lo), ctx.try_static(hi)
        if (lo is None or lo_v is not None) and (hi is None or hi_v is not None):
            lo = None if lo is None else lo_v.item()
            hi = None if hi is None else hi_v.item()
        else:
            out = x
            if lo is not None:
                out = op.maximum(out, lo)
            if hi is not None:
                out = op.minimum(out, hi)
            return out
    if dt in INT_DTYPES:
        out = x
        if lo is not None:
            out = op.maximum(out, scalar(lo, dt))
        if hi is not None:
            out = op.minimum(out, scalar(hi, dt))
        return out if out is not x else op.copy(x)
    info = np.finfo(np.dtype(dt) if dt != "bfloat16" else np.float32)
    return op.clip(x, a_min=float(info.min if lo is None else lo),
                   a_max=float(info.max if hi is None else hi))


# ---- activations ------------------------------------------------------------------------------

def relu(ctx, inputs, attrs):
    x = inputs[0]
    if ctx.dtype(x) in INT_DTYPES:
        return op.maximum(x, scalar(0, ctx.dtype(x)))
    return op.nn.relu(x)


def leaky_relu(ctx, inputs, attrs):
    return op.nn.leaky_relu(inputs[0], alpha=attrs.get("alpha", 0.01))


def prelu(ctx, inputs, attrs):
    x, slope = inputs
    zero = scalar(0, ctx.dtype(x))
    return op.where(op.less(x, zero), op.multiply(x, slope), x)


def elu(ctx, inputs, attrs):
    x = inputs[0]
    dt = ctx.dtype(x)
    alpha = scalar(attrs.get("alpha", 1.0), dt)
    neg = op.multiply(alpha, op.subtract(op.exp(x), scalar(1, dt)))
    return op.where(op.less(x, scalar(0, dt)), neg, x)


def celu(ctx, inputs, attrs):
    x = inputs[0]
    dt = ctx.dtype(x)
    alpha = attrs.get("alpha", 1.0)
    neg = op.multiply(scalar(alpha, dt),
                      op.subtract(op.exp(op.divide(x, scalar(alpha, dt))), scalar(1, dt)))
    zero = scalar(0, dt)
    return op.add(op.maximum(x, zero), op.minimum(zero, neg))


def selu(ctx, inputs, attrs):
    x = inputs[0]
    dt = ctx.dtype(x)
    alpha = attrs.get("alpha", 1.67326319217681884765625)
    gamma = attrs.get("gamma", 1.05070102214813232421875)
    neg = op.subtract(op.multiply(scalar(alpha, dt), op.exp(x)), scalar(alpha, dt))
    out = op.where(op.greater(x, scalar(0, dt)), x, neg)
    return op.multiply(scalar(gamma, dt), out)


def thresholded_relu(ctx, inputs, attrs):
    x = inputs[0]
    dt = ctx.dtype(x)
    return op.where(op.greater(x, scalar(attrs.get("alpha", 1.0), dt)), x, scalar(0, dt))


def hard_sigmoid(ctx, inputs, attrs):
    x = inputs[0]
    dt = ctx.dtype(x)
    y = op.add(op.multiply(x, scalar(attrs.get("alpha", 0.2), dt)), scalar(attrs.get("beta", 0.5), dt))
    return op.clip(y, a_min=0.0, a_max=1.0)


def hard_swish(ctx, inputs, attrs):
    x = inputs[0]
    dt = ctx.dtype(x)
    y = op.clip(op.add(op.multiply(x, scalar(1 / 6, dt)), scalar(0.5, dt)), a_min=0.0, a_max=1.0)
    return op.multiply(x, y)


def softplus(ctx, inputs, attrs):
    """``log(1 + exp(x))`` written as ``max(x, 0) + log(1 + exp(-|x|))`` so large inputs do not
    overflow."""
    x = inputs[0]
    dt = ctx.dtype(x)
    tail = op.log(op.add(scalar(1, dt), op.exp(op.negative(op.abs(x)))))
    return op.add(op.maximum(x, scalar(0, dt)), tail)


def softsign(ctx, inputs, attrs):
    x = inputs[0]
    dt = ctx.dtype(x)
    return op.divide(x, op.add(scalar(1, dt), op.abs(x)))


def mish(ctx, inputs, attrs):
    x = inputs[0]
    return op.multiply(x, op.tanh(softplus(ctx, inputs, attrs)))


def gelu(ctx, inputs, attrs):
    x = inputs[0]
    dt = ctx.dtype(x)
    if attrs.get("approximate", "none") == "tanh":
        inner = op.multiply(scalar(np.sqrt(2 / np.pi), dt),
                            op.add(x, op.multiply(scalar(0.044715, dt),
                                                  op.multiply(x, op.multiply(x, x)))))
        return op.multiply(op.multiply(scalar(0.5, dt), x), op.add(scalar(1, dt), op.tanh(inner)))
    cdf = op.add(scalar(1, dt), op.erf(op.multiply(x, scalar(1 / np.sqrt(2), dt))))
    return op.multiply(op.multiply(scalar(0.5, dt), x), cdf)


def shrink(ctx, inputs, attrs):
    x = inputs[0]
    dt = ctx.dtype(x)
    lambd, bias = attrs.get("lambd", 0.5), attrs.get("bias", 0.0)
    low = op.add(x, scalar(bias, dt))
    high = op.subtract(x, scalar(bias, dt))
    return op.where(op.less(x, scalar(-lambd, dt)), low,
                    op.where(op.greater(x, scalar(lambd, dt)), high, scalar(0, dt)))


def sigmoid(ctx, inputs, attrs):
    return op.sigmoid(inputs[0])


def swish(ctx, inputs, attrs):
    x = inputs[0]
    alpha = scalar(attrs.get("alpha", 1.0), ctx.dtype(x))
    return op.multiply(x, op.sigmoid(op.multiply(x, alpha)))


# ---- softmax -----------------------------------------------------------------------------------

def _flattened(ctx, x, axis: int, func):
    """Opsets < 13: softmax over the input coerced to 2-D at ``axis``."""
    shape = ctx.static_shape(x)
    axis = axis % len(shape) if shape else 0
    inner = int(np.prod(shape[axis:], dtype=np.int64))
    flat = op.reshape(x, newshape=(-1, inner))
    return op.reshape(func(flat, axis=1), newshape=shape)


def softmax(ctx, inputs, attrs):
    axis = attrs.get("axis", 1 if ctx.version < 13 else -1)
    if ctx.version < 13:
        return _flattened(ctx, inputs[0], axis, op.nn.softmax)
    return op.nn.softmax(inputs[0], axis=axis)


def log_softmax(ctx, inputs, attrs):
    axis = attrs.get("axis", 1 if ctx.version < 13 else -1)
    if ctx.version < 13:
        return _flattened(ctx, inputs[0], axis, op.nn.log_softmax)
    return op.nn.log_softmax(inputs[0], axis=axis)


def hardmax(ctx, inputs, attrs):
    x = inputs[0]
    axis = attrs.get("axis", 1 if ctx.version < 13 else -1)

    def one_hot_max(data, axis):
        rank = ctx.rank(data)
        depth = ctx.static_shape(data)[axis]
        idx = op.argmax(data, axis=axis)
        dt = ctx.dtype(x)
        return op.one_hot(idx, scalar(1, dt), scalar(0, dt), depth=depth, axis=axis % rank, dtype=dt)
    if ctx.version < 13:
        return _flattened(ctx, x, axis, one_hot_max)
    return one_hot_max(x, axis % ctx.rank(x))


# ---- reductions -----------------------------------------------------------------------------------

def _reduce_axes(ctx, inputs, attrs, axes_input_since: int):
    """The axes of a reduction: an attribute before ``axes_input_since``, an input from then on;
    None means every axis (or none with ``noop_with_empty_axes``)."""
    if ctx.version >= axes_input_since:
        axes = inputs[1] if len(inputs) > 1 else None
        axes = None if axes is None else [int(a) for a in ctx.static(axes, "axes").reshape(-1)]
    else:
        axes = attrs.get("axes")
    if axes is not None and len(axes) == 0:
        axes = None
    return axes


def reduction(func, axes_input_since: int = 18, prepare=None, finish=None):
    """A reduction ``func`` (Relay's ``sum``, ``max`` ...) with ONNX's ``axes`` and ``keepdims``;
    ``prepare`` maps the data first (``x * x`` for ReduceSumSquare), ``finish`` the result."""
    def convert(ctx, inputs, attrs):
        x = inputs[0]
        axes = _reduce_axes(ctx, inputs, attrs, axes_input_since)
        keepdims = bool(attrs.get("keepdims", 1))
        if axes is None and attrs.get("noop_with_empty_axes", 0):
            return op.copy(x) if prepare is None else prepare(ctx, x)
        data = x if prepare is None else prepare(ctx, x)
        if ctx.rank(x) == 0:
            out = op.copy(data)
        else:
            shape = ctx.shape(x)
            if any(shape[a] == 0 for a in (axes if axes is not None else range(len(shape)))):
                out = _empty_reduction(ctx, x, data, axes, keepdims, func)
            else:
                out = func(data, axis=axes, keepdims=keepdims)
        return out if finish is None else finish(ctx, out)
    return convert


_EMPTY_IDENTITY = {"sum": 0, "prod": 1, "max": "min", "min": "max"}


def _empty_reduction(ctx, x, data, axes, keepdims, func):
    """A reduction over an empty axis gives the reduction's identity (0 for a sum, -inf ...)."""
    shape = list(ctx.static_shape(x))
    axes = range(len(shape)) if axes is None else [a % len(shape) for a in axes]
    out_shape = [1 if i in axes else d for i, d in enumerate(shape) if keepdims or i not in axes]
    dt = ctx.dtype(data)
    kind = _EMPTY_IDENTITY.get(func.opdef.name.split(".")[-1] if hasattr(func, "opdef") else "", 0)
    if kind in ("min", "max"):
        info = np.finfo(dt) if dt in FLOAT_DTYPES else np.iinfo(dt)
        value = -np.inf if kind == "min" and dt in FLOAT_DTYPES else (
            np.inf if dt in FLOAT_DTYPES else (info.min if kind == "min" else info.max))
    else:
        value = kind
    return Constant(np.full(out_shape, value, dtype=dt))


def abs_(ctx, x):
    return op.abs(x)


def log_sum_exp(axes_input_since: int):
    """``log(sum(exp(x)))`` computed as ``m + log(sum(exp(x - m)))`` with the maximum ``m``."""
    def convert(ctx, inputs, attrs):
        x = inputs[0]
        axes = _reduce_axes(ctx, inputs, attrs, axes_input_since)
        keepdims = bool(attrs.get("keepdims", 1))
        if axes is None and attrs.get("noop_with_empty_axes", 0):
            return op.copy(x)
        shape = ctx.shape(x)
        if any(shape[a] == 0 for a in (axes if axes is not None else range(len(shape)))):
            empty = _empty_reduction(ctx, x, x, axes, keepdims, op.sum)
            return op.log(empty)
        if ctx.dtype(x) not in FLOAT_DTYPES:
            return op.log(op.sum(op.exp(x), axis=axes, keepdims=keepdims))
        m = op.max(x, axis=axes, keepdims=True)
        finite = op.where(op.isfinite(m), m, scalar(0, ctx.dtype(x)))
        s = op.sum(op.exp(op.subtract(x, finite)), axis=axes, keepdims=True)
        out = op.add(op.log(s), finite)
        if not keepdims:
            out = op.squeeze(out, axis=axes if axes is not None else None)
        return out
    return convert


def arg_reduce(func):
    def convert(ctx, inputs, attrs):
        x = inputs[0]
        out = func(x, axis=attrs.get("axis", 0), keepdims=bool(attrs.get("keepdims", 1)),
                   select_last_index=bool(attrs.get("select_last_index", 0)))
        return op.cast(out, dtype="int64")
    return convert


def cumsum(ctx, inputs, attrs):
    x, axis = inputs
    axis = int(ctx.static(axis, "axis").reshape(-1)[0])
    exclusive, reverse = bool(attrs.get("exclusive", 0)), bool(attrs.get("reverse", 0))
    if reverse:
        x = op.reverse(x, axis=axis)
    out = op.cumsum(x, axis=axis, exclusive=exclusive)
    return op.reverse(out, axis=axis) if reverse else out


def where(ctx, inputs, attrs):
    return op.where(inputs[0], inputs[1], inputs[2])


def sum_square(ctx, x):
    return op.multiply(x, x)


def l2_finish(ctx, x):
    return op.sqrt(x)


def log_finish(ctx, x):
    return op.log(x)


def cumprod(ctx, inputs, attrs):
    x, axis = inputs
    axis = int(ctx.static(axis, "axis").reshape(-1)[0])
    exclusive, reverse = bool(attrs.get("exclusive", 0)), bool(attrs.get("reverse", 0))
    if reverse:
        x = op.reverse(x, axis=axis)
    out = op.cumprod(x, axis=axis, exclusive=exclusive)
    return op.reverse(out, axis=axis) if reverse else out


def bitcast(ctx, inputs, attrs):
    from .importer import dtype_of
    return op.reinterpret(inputs[0], dtype=dtype_of(attrs["to"], f"{ctx.where}: attribute to"))


def optional_has_element(ctx, inputs, attrs):
    """Only tensors are imported, so an input that is there has an element."""
    present = bool(inputs) and inputs[0] is not None
    return Constant(np.asarray(present))


def window(kind: str):
    """Hann, Hamming and Blackman windows of a size known at import time."""
    def convert(ctx, inputs, attrs):
        from .importer import dtype_of
        n = int(np.asarray(ctx.static(inputs[0], "size")).reshape(-1)[0])
        periodic = bool(attrs.get("periodic", 1))
        dt = dtype_of(attrs.get("output_datatype", 1), f"{ctx.where}: output_datatype")
        denom = n if periodic else n - 1
        k = np.arange(n, dtype=np.float64)
        phase = 2 * np.pi * k / max(denom, 1)
        if kind == "hann":
            w = 0.5 - 0.5 * np.cos(phase)
        elif kind == "hamming":
            w = 25 / 46 - (1 - 25 / 46) * np.cos(phase)
        else:
            w = 0.42 - 0.5 * np.cos(phase) + 0.08 * np.cos(2 * phase)
        return Constant(w.astype(dt))
    return convert


def lp_normalization(ctx, inputs, attrs):
    x = inputs[0]
    axis, p = attrs.get("axis", -1), attrs.get("p", 2)
    if p == 1:
        norm = op.sum(op.abs(x), axis=[axis], keepdims=True)
    elif p == 2:
        norm = op.sqrt(op.sum(op.multiply(x, x), axis=[axis], keepdims=True))
    else:
        ctx.fail(f"p={p}: only 1 and 2 are defined")
    zero = scalar(0, ctx.dtype(x))
    # a zero vector stays zero (ONNX's definition), not 0 / 0
    return op.divide(x, op.where(op.equal(norm, zero), scalar(1, ctx.dtype(x)), norm))


def rms_normalization(ctx, inputs, attrs):
    x, scale = inputs[0], inputs[1]
    rank = ctx.rank(x)
    axis = attrs.get("axis", -1) % rank
    dt = ctx.dtype(x)
    axes = list(range(axis, rank))
    xf = op.cast(x, dtype="float32") if dt != "float32" and dt != "float64" else x
    cdt = "float64" if dt == "float64" else "float32"
    ms = op.mean(op.multiply(xf, xf), axis=axes, keepdims=True)
    normed = op.multiply(xf, op.rsqrt(op.add(ms, scalar(attrs.get("epsilon", 1e-5), cdt))))
    if cdt != dt:
        normed = op.cast(normed, dtype=dt)
    return op.multiply(normed, scale)


def _nll(ctx, log_prob, target, weight, attrs):
    """ONNX's negative log-likelihood: ``-log_prob[n, target[n, ...], ...] * weight[target]``,
    zero where the target is ``ignore_index``; ``mean`` divides by the summed weights."""
    dt = ctx.dtype(log_prob)
    c = ctx.static_shape(log_prob)[1]
    tdt = ctx.dtype(target)
    ignore = attrs.get("ignore_index")
    keep = None
    safe = target
    if ignore is not None:
        keep = op.not_equal(target, scalar(ignore, tdt))
        safe = op.where(keep, target, scalar(0, tdt))
    picked = op.sum(op.multiply(log_prob, op.one_hot(safe, scalar(1, dt), scalar(0, dt), depth=c,
                                                     axis=1, dtype=dt)), axis=[1])
    w = op.ones_like(picked) if weight is None else op.take(weight, safe, axis=0, mode="fast")
    if keep is not None:
        w = op.where(keep, w, scalar(0, dt))
    loss = op.negative(op.multiply(picked, w))
    reduction = attrs.get("reduction", "mean")
    if reduction == "none":
        return loss
    if reduction == "sum":
        return op.sum(loss)
    if reduction == "mean":
        return op.divide(op.sum(loss), op.sum(w))
    ctx.fail(f"reduction={reduction!r}")


def nll_loss(ctx, inputs, attrs):
    weight = inputs[2] if len(inputs) > 2 else None
    return _nll(ctx, inputs[0], inputs[1], weight, attrs)


def softmax_cross_entropy(ctx, inputs, attrs):
    scores, labels = inputs[0], inputs[1]
    weight = inputs[2] if len(inputs) > 2 else None
    log_prob = op.nn.log_softmax(scores, axis=1)
    loss = _nll(ctx, log_prob, labels, weight, attrs)
    return [loss, log_prob]
