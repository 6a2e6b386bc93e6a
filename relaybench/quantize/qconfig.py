"""The quantization configuration: Relay's ``qconfig`` knobs, scoped by a ``with`` block.

``qconfig(**knobs)`` is a context manager (Relay's ``relay.quantize.qconfig``): inside it,
:func:`current_qconfig` is a :class:`QConfig` holding the given knobs and Relay's defaults for
the others (a nested block starts from the defaults too, as in Relay, and the enclosing
configuration is back when it exits). Outside every block the defaults apply.

==========================  ===============  =====================================================
knob                        default          meaning
==========================  ===============  =====================================================
nbit_input                  8                bits of INPUT-kind values (the data of conv2d/dense)
nbit_weight                 8                bits of WEIGHT-kind values (constants)
nbit_activation             32               bits of ACTIVATION-kind values (accumulators)
dtype_input                 "int8"           dtype the realized program gives INPUT values
dtype_weight                "int8"           dtype of the realized weights
dtype_activation            "int32"          accumulator dtype (``out_dtype`` of conv2d/dense)
calibrate_mode              "global_scale"   "global_scale", "max", "percentile", "kl_divergence"
global_scale                8.0              the range of every activation in "global_scale" mode
weight_scale                "power2"         "power2" (max |w| up to a power of 2) or "max"
skip_conv_layers            [0]              indices of the conv2d layers left in float
skip_dense_layer            True             leave every nn.dense in float
do_simulation               False            quantize() stops after calibration (simulated form)
round_for_shift             True             round (half up) before a right shift requantizes
debug_enabled_ops           None             only these ops are annotated (None: all)
rounding                    "UPWARD"         "UPWARD" or "TONEAREST": fixed-point requantization
calibrate_chunk_by          -1               accepted for Relay's scripts; statistics are
                                             gathered in one pass here
partition_conversions       "disabled"       only "disabled" is realized here
store_lowbit_output         False            an accumulator leaving the quantized operators is
                                             stored in INPUT bits (int8) before it is
                                             dequantized (older Relay's knob, for VTA-like
                                             accelerators, which store int8 only)
==========================  ===============  =====================================================

A bad value is a ValueError naming the knob:

>>> with qconfig(nbit_activation=16, dtype_activation="int16"):
...     current_qconfig().nbit_activation, current_qconfig().dtype_activation
(16, 'int16')
>>> current_qconfig().nbit_activation
32
>>> qconfig(calibrate_mode="minmax")
Traceback (most recent call last):
...
ValueError: qconfig: calibrate_mode must be one of 'global_scale', 'max', 'percentile', 'kl_divergence', got 'minmax'
"""

from __future__ import annotations

import contextvars
import difflib
import enum
import math

import numpy as np

__all__ = ["QAnnotateKind", "QConfig", "qconfig", "current_qconfig", "QCONFIG_DEFAULTS"]


class QAnnotateKind(enum.IntEnum):
    """What a simulated_quantize quantizes (Relay's ``QAnnotateKind``): the ``kind`` attribute."""

    IDENTITY = 0
    INPUT = 1
    WEIGHT = 2
    ACTIVATION = 3


#: every knob with Relay's default, in Relay's order (``store_lowbit_output`` from older Relay)
QCONFIG_DEFAULTS: dict = {
    "nbit_input": 8, "nbit_weight": 8, "nbit_activation": 32,
    "dtype_input": "int8", "dtype_weight": "int8", "dtype_activation": "int32",
    "calibrate_mode": "global_scale", "global_scale": 8.0, "weight_scale": "power2",
    "skip_dense_layer": True, "skip_conv_layers": (0,), "do_simulation": False,
    "round_for_shift": True, "debug_enabled_ops": None, "rounding": "UPWARD",
    "calibrate_chunk_by": -1, "partition_conversions": "disabled",
    "store_lowbit_output": False,
}

_CALIBRATE_MODES = ("global_scale", "max", "percentile", "kl_divergence")
_WEIGHT_SCALES = ("power2", "max")
_ROUNDINGS = ("UPWARD", "TONEAREST")
_PARTITIONS = ("disabled", "enabled", "fully_integral")
_INT_DTYPES = ("int8", "int16", "int32", "int64")


def _fail(knob: str, message: str):
    raise ValueError(f"qconfig: {knob} {message}")


def _check_nbit(knob, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 2 <= value <= 32:
        _fail(knob, f"must be an int of 2 to 32 bits, got {value!r}")
    return int(value)


def _check_dtype(knob, value):
    if value not in _INT_DTYPES:
        _fail(knob, f"must be a signed integer dtype ({', '.join(_INT_DTYPES)}), got {value!r}")
    return value


def _one_of(choices):
    def check(knob, value):
        if value not in choices:
            _fail(knob, f"must be one of {', '.join(repr(c) for c in choices)}, got {value!r}")
        return value
    return check


def _check_bool(knob, value):
    if not isinstance(value, (bool, np.bool_)):
        _fail(knob, f"must be True or False, got {value!r}")
    return bool(value)


def _check_global_scale(knob, value):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) \
            or not math.isfinite(float(value)) or float(value) <= 0:
        _fail(knob, f"must be a positive finite number, got {value!r}")
    return float(value)


def _check_skip_conv_layers(knob, value):
    if value is None:
        return None
    if isinstance(value, (int, str)) or not hasattr(value, "__iter__"):
        _fail(knob, f"must be a list of conv2d indices (ints >= 0) or None, got {value!r}")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            _fail(knob, f"must hold conv2d indices (ints >= 0), got {v!r}")
        out.append(int(v))
    return tuple(out)


def _check_debug_enabled_ops(knob, value):
    if value is None:
        return None
    if isinstance(value, str) or not hasattr(value, "__iter__"):
        _fail(knob, f"must be a list of operator names or None, got {value!r}")
    from ..op.registry import lookup_opdef
    out = []
    for name in value:
        if not isinstance(name, str) or lookup_opdef(name) is None:
            _fail(knob, f"names an unknown operator {name!r}")
        out.append(name)
    return tuple(out)


def _check_chunk_by(knob, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or (value < 1 and value != -1):
        _fail(knob, f"must be -1 or a positive int, got {value!r}")
    return int(value)


_CHECKS = {
    "nbit_input": _check_nbit, "nbit_weight": _check_nbit, "nbit_activation": _check_nbit,
    "dtype_input": _check_dtype, "dtype_weight": _check_dtype, "dtype_activation": _check_dtype,
    "calibrate_mode": _one_of(_CALIBRATE_MODES), "global_scale": _check_global_scale,
    "weight_scale": _one_of(_WEIGHT_SCALES), "skip_dense_layer": _check_bool,
    "skip_conv_layers": _check_skip_conv_layers, "do_simulation": _check_bool,
    "round_for_shift": _check_bool, "debug_enabled_ops": _check_debug_enabled_ops,
    "rounding": _one_of(_ROUNDINGS), "calibrate_chunk_by": _check_chunk_by,
    "partition_conversions": _one_of(_PARTITIONS), "store_lowbit_output": _check_bool,
}


class QConfig:
    """One quantization configuration: the knobs as read-only attributes.

    ``get_nbit_by_kind`` / ``get_dtype_by_kind`` give the bits and dtype of a
    :class:`QAnnotateKind` (Relay's ``QConfig.get_nbit_by_kind``).
    """

    __slots__ = ("_knobs",)

    def __init__(self, **knobs):
        values = dict(QCONFIG_DEFAULTS)
        for knob, value in knobs.items():
            if knob not in _CHECKS:
                close = difflib.get_close_matches(knob, list(_CHECKS), n=1)
                hint = f"; did you mean {close[0]}?" if close else ""
                raise ValueError(f"qconfig: unknown knob {knob!r}{hint}")
            values[knob] = _CHECKS[knob](knob, value)
        for kind in ("input", "weight", "activation"):
            nbit, dtype = values[f"nbit_{kind}"], values[f"dtype_{kind}"]
            if nbit > np.iinfo(dtype).bits:
                _fail(f"nbit_{kind}", f"is {nbit} but dtype_{kind} {dtype} holds only "
                      f"{np.iinfo(dtype).bits} bits")
        object.__setattr__(self, "_knobs", values)

    def __getattr__(self, name):
        try:
            return object.__getattribute__(self, "_knobs")[name]
        except KeyError:
            raise AttributeError(f"QConfig has no knob {name!r}") from None

    def __setattr__(self, name, value):
        raise AttributeError("a QConfig is read-only; use `with qconfig(...)` to change knobs")

    def as_dict(self) -> dict:
        return dict(self._knobs)

    def get_nbit_by_kind(self, kind) -> int:
        return self._knobs[f"nbit_{QAnnotateKind(kind).name.lower()}"]

    def get_dtype_by_kind(self, kind) -> str:
        return self._knobs[f"dtype_{QAnnotateKind(kind).name.lower()}"]

    def __repr__(self) -> str:
        changed = {k: v for k, v in self._knobs.items() if QCONFIG_DEFAULTS[k] != v}
        return "qconfig(" + ", ".join(f"{k}={v!r}" for k, v in changed.items()) + ")"


_CURRENT: contextvars.ContextVar = contextvars.ContextVar("relaybench_qconfig", default=None)
_DEFAULT = QConfig()


def current_qconfig() -> QConfig:
    """The configuration of the innermost ``with qconfig(...)`` block (the defaults outside)."""
    cfg = _CURRENT.get()
    return _DEFAULT if cfg is None else cfg


class qconfig:
    """``with qconfig(**knobs):`` makes a :class:`QConfig` of these knobs (Relay's defaults for
    the others) current inside the block. The knobs are checked when it is made."""

    def __init__(self, **knobs):
        self.config = QConfig(**knobs)
        self._tokens: list = []

    def __enter__(self) -> QConfig:
        self._tokens.append(_CURRENT.set(self.config))
        return self.config

    def __exit__(self, *exc) -> bool:
        _CURRENT.reset(self._tokens.pop())
        return False

    def __repr__(self) -> str:
        return repr(self.config)
