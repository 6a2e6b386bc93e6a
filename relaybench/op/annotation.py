"""Annotation operators (``annotation.*``): calls that mark a program for the passes.

``annotation.stop_fusion(data)`` is the identity, with the pattern kind OPAQUE so that FuseOps
never puts it in a group with another operator: fusion stops at it on both sides, as in Relay
(``src/relay/op/annotation/annotation.cc``).

``relay.op.annotation.simulated_quantize(data, dom_scale, clip_min, clip_max, kind, sign,
rounding)`` is the quantizer's mark (Relay's ``python/tvm/relay/quantize/_quantize.py``): it
simulates in float32 what quantizing ``data`` to integers of the scale ``dom_scale`` does,

    ``round(clip(data / dom_scale, clip_min, clip_max)) * dom_scale``

with ``round`` taking halves away from zero (as ``round``) and the three scalars float32. ``kind``
says what is quantized (:class:`relaybench.quantize.QAnnotateKind`: 0 IDENTITY, 1 INPUT,
2 WEIGHT, 3 ACTIVATION); the IDENTITY kind is the identity, whatever the scalars (the
calibration's statistics collector uses it). QuantizeAnnotate places these calls,
QuantizeCalibrate gives them their scalars, QuantizeRealize replaces them by integer arithmetic.

>>> import numpy as np, relaybench as rb
>>> from relaybench.ir.type_infer import infer_expr
>>> infer_expr(stop_fusion(rb.var("x", shape=(2, 3))))
Tensor[(2, 3), float32]
>>> x = np.array([0.3, -0.3, 0.75, -0.75, 9.0], "float32")
>>> sq = simulated_quantize(rb.const(x), rb.const(0.5), rb.const(-7.0), rb.const(7.0), kind=1)
>>> rb.create_executor("interpreter").evaluate(sq)
array([ 0.5, -0.5,  1. , -1. ,  3.5], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType
from . import _compute as C
from ._rel import fail, known, relation, tensor
from ._layout import elemwise_layout
from .registry import OpDef, OpPattern, register
from .tensor import _round_half_away, identity_rel

__all__ = ["stop_fusion", "simulated_quantize"]

stop_fusion = register(OpDef(
    "annotation.stop_fusion", ("data",), identity_rel, OpPattern.OPAQUE,
    reference=lambda x, attrs: x, compute=C.identity_compute("stop_fusion"),
    layout=elemwise_layout,
    doc="The identity; its pattern kind OPAQUE keeps FuseOps from fusing across it, so the "
        "operators before it and after it become separate kernels. Layout-agnostic: it keeps "
        "whatever layout its input comes in."))


# ---- relay.op.annotation.simulated_quantize --------------------------------------------------

#: the ``kind`` of an identity simulated_quantize (Relay's ``QAnnotateKind.IDENTITY``)
_IDENTITY_KIND = 0
_SQ_SCALARS = ("dom_scale", "clip_min", "clip_max")


def _normalize_simulated_quantize(a: dict) -> dict:
    kind = a["kind"]
    if isinstance(kind, bool) or not isinstance(kind, (int, np.integer)) or not 0 <= int(kind) <= 3:
        raise ValueError(f"kind must be 0 (IDENTITY), 1 (INPUT), 2 (WEIGHT) or 3 (ACTIVATION), "
                         f"got {kind!r}")
    a["kind"] = int(kind)
    if not isinstance(a["sign"], (bool, np.bool_)) and a["sign"] not in (0, 1):
        raise ValueError(f"sign must be a bool, got {a['sign']!r}")
    a["sign"] = bool(a["sign"])
    if a["rounding"] != "round":
        raise ValueError(f"rounding must be 'round' (the only mode Relay realizes), got {a['rounding']!r}")
    return a


@relation("SimulatedQuantizeRel")
def _simulated_quantize_rel(types, attrs):
    """``SimulatedQuantizeRel``: float data; dom_scale, clip_min and clip_max float32 scalars;
    the output is the data's type."""
    data = types[0]
    if not known(data):
        return None
    data = tensor(data, "data")
    if not data.dtype.startswith("float"):
        fail(f"data must be a float tensor, got {data.dtype}")
    scalar = TensorType((), "float32")
    for name, t in zip(_SQ_SCALARS, types[1:]):
        if known(t):
            t = tensor(t, name)
            if tuple(t.shape) != () or t.dtype != "float32":
                fail(f"{name} must be a float32 scalar, got {t}")
    return [data, scalar, scalar, scalar, data]


def _simulated_quantize_reference(x, dom_scale, clip_min, clip_max, attrs):
    if attrs.kind == _IDENTITY_KIND:
        return x
    scale = np.float32(dom_scale)
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = (x / scale).astype(x.dtype, copy=False)
    clipped = np.clip(scaled, np.float32(clip_min), np.float32(clip_max)).astype(x.dtype, copy=False)
    return (_round_half_away(clipped) * scale).astype(x.dtype, copy=False)


def _simulated_quantize_compute(inputs, attrs, out_type):
    from relaybench import te
    data, dom_scale, clip_min, clip_max = inputs
    if attrs.kind == _IDENTITY_KIND:
        return te.compute(data.shape, lambda *i: data[i], name="simulated_quantize")

    def body(*i):
        # the float32 scalars in the data's dtype, as numpy promotes them in the reference
        scale = te.cast(data.dtype, dom_scale[()])
        scaled = data[i] / scale
        clipped = te.maximum(te.minimum(scaled, te.cast(data.dtype, clip_max[()])),
                             te.cast(data.dtype, clip_min[()]))
        return C._round_half_away(clipped) * scale
    return te.compute(data.shape, body, name="simulated_quantize")


simulated_quantize = register(OpDef(
    "relay.op.annotation.simulated_quantize", ("data",) + _SQ_SCALARS, _simulated_quantize_rel,
    OpPattern.ELEMWISE, attrs={"kind": _IDENTITY_KIND, "sign": True, "rounding": "round"},
    normalize=_normalize_simulated_quantize, reference=_simulated_quantize_reference,
    compute=_simulated_quantize_compute,
    doc="Simulated quantization: ``round(clip(data / dom_scale, clip_min, clip_max)) * dom_scale`` "
        "in float32 (halves rounded away from zero); ``kind`` 0 (IDENTITY) is the identity. "
        "Placed by QuantizeAnnotate, given its scalars by QuantizeCalibrate and replaced by "
        "integer arithmetic by QuantizeRealize (relaybench.quantize)."))
