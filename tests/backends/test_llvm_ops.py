"""Every operator with a compute, compiled for the host CPU, against its numpy reference.

Each case is one call in a ``Primitive`` function, type-checked, lowered by
:func:`~relaybench.backends.lowering.lower_primitive` (so the x86 strategy's computes and
schedules run: vectorized and parallel loops, ``conv2d_NCHWc``, the dense partial sums),
compiled by :func:`~relaybench.backends.llvm.build_kernel` and run on seeded random inputs; the
result must match the op's ``reference`` (the interpreter's semantics) in shape, dtype and value.

The cases come from ``CASES``, a table of case builders keyed by op name, one entry per op that
has a compute; ``test_every_compute_has_cases`` fails when an op gains a compute without one.

Tolerances: integer and bool results are exact. Float elementwise results allow a few ulps
(``rtol`` 4 ulp of the dtype): the reference and the kernel compute the same formula, but libm's
and numpy's ``exp``/``tanh``/``erf``/``pow`` may differ in the last bit, and vector code forms
``a * b + c`` as one fused multiply-add (``llvm.fmuladd``). Reductions, convolutions and products sum ``n``
terms in a different order than numpy; their tolerance grows with ``n`` (the ``red`` of a case)
and the magnitude of the terms. ``image.resize2d`` computes its coordinates in float32 for
every dtype (as the reference does), so its tolerance is float32's for float64 data too: vector
code forms ``(x + 0.5) * scale - 0.5`` with one fused multiply-add, the reference with two
roundings.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import pytest

pytest.importorskip("llvmlite.ir", reason="the LLVM backend needs llvmlite (the `llvm` extra)")

from relaybench.backends.llvm import build_kernel  # noqa: E402
from relaybench.backends.lowering import lower_primitive  # noqa: E402
from relaybench.errors import CompileError, TypeInferenceError  # noqa: E402
from relaybench.ir import Function, Tuple, var  # noqa: E402
from relaybench.ir.layout import Layout  # noqa: E402
from relaybench.ir.type_infer import infer_expr  # noqa: E402
from relaybench.op.registry import OpCaller, get_opdef, list_ops  # noqa: E402

f32, f64, i32, i64, i8, u8, b = "float32", "float64", "int32", "int64", "int8", "uint8", "bool"
FLOATS = (f32, f64)
INTS = (i32, i64, i8, u8)
NUMERIC = FLOATS + INTS


@dataclass
class Case:
    """One compiled call: ``inputs`` are (shape, dtype) pairs; ``domain`` picks the random values
    (``"any"``, ``"positive"``, ``"nonzero_rhs"``, ``"shift"``, ``"wide_shift"``) and
    ``arrays(rng)`` overrides them; ``red`` is the number of terms each output element sums (1:
    elementwise); ``tol_dtype`` is the precision the tolerance assumes when it is not the
    result's; ``marks`` are pytest marks of the case (a known failure)."""

    op: str
    inputs: list
    attrs: dict = field(default_factory=dict)
    label: str = ""
    tuple_input: bool = False
    domain: str = "any"
    arrays: Optional[Callable] = None
    red: int = 1
    tol_dtype: Optional[str] = None
    marks: list = field(default_factory=list)

    @property
    def id(self) -> str:
        dtypes = "-".join(dict.fromkeys(d for _, d in self.inputs)) or self.attrs.get("dtype", "")
        return "-".join(p for p in (self.op, dtypes, self.label) if p)


def _random(rng, shape, dtype, domain="any"):
    if dtype == "bool":
        return np.asarray(rng.random(shape) < 0.5)
    if np.dtype(dtype).kind in "iu":
        if domain in ("shift", "wide_shift"):
            bits = np.dtype(dtype).itemsize * 8
            lo, hi = (0, bits) if domain == "shift" else (-3 if dtype[0] == "i" else 0, bits + 5)
            return rng.integers(lo, hi, size=shape).astype(dtype)
        lo = 1 if domain in ("positive", "nonzero") else (0 if dtype.startswith("u") else -9)
        a = rng.integers(lo, 10, size=shape).astype(dtype)
        if domain == "nonzero":
            a[a == 0] = 3
        return a
    a = rng.uniform(0.1 if domain == "positive" else -3.0, 3.0, size=shape).astype(dtype)
    if domain == "nonzero":
        a[np.abs(a) < 0.1] = 0.5
    return a


def _inputs(case: Case, rng) -> list:
    if case.arrays is not None:
        return case.arrays(rng)
    out = []
    for k, (shape, dtype) in enumerate(case.inputs):
        domain = case.domain
        if domain == "nonzero_rhs":
            domain = "nonzero" if k == 1 else "any"
        elif domain in ("shift", "wide_shift"):
            domain = domain if k == 1 else "any"
        out.append(_random(rng, shape, dtype, domain))
    return out


# ---------------------------------------------------------------------------------------------
# The table: op name -> builder of its cases

CASES: dict = {}


def cases(*names):
    def register(builder):
        for name in names:
            CASES[name] = builder
        return builder
    return register


def _binary(name, dtypes, domain="any", shapes=(((2, 3, 16), (3, 1)), ((5,), ()))):
    out = []
    for dt in dtypes:
        for k, (lhs, rhs) in enumerate(shapes if dt == f32 else shapes[:1]):
            out.append(Case(name, [(lhs, dt), (rhs, dt)], label=f"s{k}", domain=domain))
    return out


@cases("add", "subtract", "multiply", "maximum", "minimum")
def _arith(name):
    return _binary(name, NUMERIC)


@cases("divide", "floor_divide", "mod", "floor_mod")
def _division(name):
    return _binary(name, NUMERIC, domain="nonzero_rhs")


@cases("power")
def _power(name):
    return _binary(name, FLOATS, domain="positive")


@cases("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
def _compare(name):
    return _binary(name, (f32, i32, i8, u8, b), shapes=(((2, 3, 16), (3, 1)),))


@cases("logical_and", "logical_or", "logical_xor")
def _logical(name):
    return _binary(name, (b,))


@cases("left_shift", "right_shift")
def _shift(name):
    # numpy's semantics past the width: amounts < 0 or >= bits give 0 (-1 for a negative value
    # shifted right)
    wide = [Case(name, [((4, 16), dt), ((4, 16), dt)], label="wide", domain="wide_shift")
            for dt in (i32, i8, u8)]
    return _binary(name, INTS, domain="shift") + wide


def _unary(name, dtypes, domain="any", shape=(3, 40)):
    return [Case(name, [(shape, dt)], domain=domain) for dt in dtypes]


@cases("exp", "sigmoid", "tanh", "erf")
def _transcendental(name):
    return _unary(name, FLOATS)


@cases("sin", "cos", "tan", "atan", "sinh", "cosh", "asinh", "asin", "acos", "atanh", "acosh")
def _trigonometric(name):
    """The C library's functions; asin, acos and atanh on (-1, 1), acosh from 1 up."""
    lo, hi = {"asin": (-0.99, 0.99), "acos": (-0.99, 0.99), "atanh": (-0.99, 0.99),
              "acosh": (1.0, 4.0)}.get(name, (-3.0, 3.0))
    return [Case(name, [((3, 40), dt)], arrays=lambda rng, dt=dt: [
        rng.uniform(lo, hi, size=(3, 40)).astype(dt)]) for dt in FLOATS]


@cases("log", "sqrt", "rsqrt")
def _positive_math(name):
    return _unary(name, FLOATS, domain="positive")


@cases("negative", "abs")
def _sign(name):
    return _unary(name, (f32, f64, i32, i64, i8))


@cases("round", "floor", "ceil")
def _rounding(name):
    # halves are where round-half-away and round-half-even differ: put some in
    def arrays(rng):
        x = (rng.integers(-12, 12, size=(3, 40)) / 4).astype(f32)
        return [x]
    return _unary(name, (f32, f64, i32)) + [Case(name, [((3, 40), f32)], label="halves",
                                                 arrays=arrays)]


@cases("logical_not")
def _not(name):
    return _unary(name, (b,))


@cases("nn.relu")
def _relu(name):
    return _unary(name, (f32, f64, i32, i8))


@cases("nn.leaky_relu")
def _leaky(name):
    return [Case(name, [((3, 40), dt)], {"alpha": 0.1}) for dt in FLOATS]


@cases("clip")
def _clip(name):
    return [Case(name, [((3, 40), dt)], {"a_min": -1.5, "a_max": 2.25}) for dt in (f32, f64)] + \
        [Case(name, [((3, 40), dt)], {"a_min": -2.5, "a_max": 4.5}) for dt in (i32, i8, u8)]


@cases("cast")
def _cast(name):
    pairs = [(f32, i32), (f32, i8), (f64, f32), (i32, f64), (i64, i8), (u8, f32), (i8, i32),
             (f32, b), (b, f32), (i32, b), (b, i32)]
    return [Case(name, [((3, 20), src)], {"dtype": dst}, label=f"to_{dst}") for src, dst in pairs]


@cases("cast_like")
def _cast_like(name):
    return [Case(name, [((3, 20), f32), ((1,), i32)]), Case(name, [((3, 20), u8), ((2,), f64)])]


@cases("where")
def _where(name):
    return [Case(name, [((2, 3, 16), b), ((3, 16), dt), ((16,), dt)]) for dt in (f32, i32, i8)] + \
        [Case(name, [((3, 1), b), ((2, 1, 5), f64), ((), f64)], label="bcast"),
         Case(name, [((), b), ((4, 16), u8), ((16,), u8)], label="scalar_cond")]


@cases("zeros", "ones")
def _fill(name):
    return [Case(name, [], {"shape": (3, 17), "dtype": dt}) for dt in (f32, i32, i8, b)]


@cases("full")
def _full(name):
    return [Case(name, [((), f32)], {"shape": (3, 17)}),
            Case(name, [((), f32)], {"shape": (2, 16), "dtype": i32}, label="to_int32"),
            Case(name, [((), i8)], {"shape": (5,), "dtype": b}, label="to_bool")]


@cases("zeros_like", "ones_like")
def _like(name):
    return [Case(name, [((3, 17), dt)]) for dt in (f32, i64, u8)]


@cases("full_like")
def _full_like(name):
    return [Case(name, [((3, 17), f32), ((), f32)]), Case(name, [((2, 16), i32), ((), i32)])]


@cases("nn.prelu")
def _prelu(name):
    return [Case(name, [((2, 3, 16), f32), ((3,), f32)]),
            Case(name, [((2, 16), f64), ((16,), f64)], {"axis": -1})]


@cases("nn.bias_add")
def _bias_add(name):
    return [Case(name, [((2, 3, 4, 16), f32), ((3,), f32)]),
            Case(name, [((2, 16), i32), ((16,), i32)], {"axis": -1}),
            Case(name, [((2, 5), i8), ((5,), i8)], {"axis": -1})]


# ---- injective transforms: f32 and one narrow dtype each, so vector lanes of 64 bytes vary

MOVE = (f32, i8)


@cases("reshape")
def _reshape(name):
    return [Case(name, [((2, 3, 16), dt)], {"newshape": (6, -1)}) for dt in MOVE] + \
        [Case(name, [((2, 3, 2), b)], {"newshape": (0, -1)})]


@cases("reshape_like")
def _reshape_like(name):
    return [Case(name, [((2, 3, 16), dt), ((16, 6), f32)]) for dt in MOVE]


@cases("expand_dims")
def _expand_dims(name):
    return [Case(name, [((2, 17), dt)], {"axis": 1, "num_newaxis": 2}) for dt in MOVE]


@cases("squeeze")
def _squeeze(name):
    return [Case(name, [((2, 1, 17, 1), f32)]), Case(name, [((2, 1, 17, 1), u8)], {"axis": (3,)})]


@cases("nn.batch_flatten")
def _batch_flatten(name):
    return [Case(name, [((2, 3, 2, 4), dt)]) for dt in MOVE]


@cases("transpose")
def _transpose(name):
    return [Case(name, [((2, 3, 16), f32)]),
            Case(name, [((2, 3, 16), i8)], {"axes": (1, -1, 0)}),
            Case(name, [((4, 16), i64)], {"axes": (1, 0)})]


@cases("concatenate")
def _concatenate(name):
    return [Case(name, [((2, 1), f32), ((2, 19), f32), ((2, 12), f32)], {"axis": 1},
                 tuple_input=True),
            Case(name, [((1, 16), i8), ((3, 16), i8)], {"axis": -2}, tuple_input=True)]


@cases("stack")
def _stack(name):
    return [Case(name, [((2, 16), f32)] * 3, {"axis": 1}, tuple_input=True),
            Case(name, [((5,), u8)] * 2, {"axis": -1}, tuple_input=True)]


@cases("split")
def _split(name):
    return [Case(name, [((2, 48), f32)], {"indices_or_sections": 3, "axis": 1}),
            Case(name, [((5, 16), i8)], {"indices_or_sections": (1, 3), "axis": 0})]


@cases("broadcast_to")
def _broadcast_to(name):
    return [Case(name, [((3, 1), dt)], {"shape": (2, 3, 16)}) for dt in MOVE]


@cases("tile")
def _tile(name):
    return [Case(name, [((2, 3), f32)], {"reps": (2, 1, 8)}),
            Case(name, [((2, 3), i8)], {"reps": (2,)})]


@cases("repeat")
def _repeat(name):
    return [Case(name, [((2, 8), f32)], {"repeats": 2, "axis": -1}),
            Case(name, [((2, 3), i8)], {"repeats": 3, "axis": 0})]


@cases("strided_slice")
def _strided_slice(name):
    return [Case(name, [((5, 6), f32)], {"begin": (1, -2), "end": (4, 0), "strides": (2, -1)},
                 label="negstride"),
            Case(name, [((7, 5), f32)], {"begin": (6, 4), "end": (-8, -6), "strides": (-2, -3)},
                 label="negstride_full"),
            Case(name, [((4, 3, 32), i8)], {"begin": (1,), "end": (3,), "axes": (1,)},
                 label="axes"),
            Case(name, [((5, 4), i32)], {"begin": (1, 0), "end": (2, -1), "slice_mode": "size"},
                 label="size")]


def _take_case(mode, axis, dt, batch_dims=0, data_shape=(3, 4), idx=None):
    idx = np.array([[0, 3], [-2, 7]], "int32") if idx is None else idx
    def arrays(rng):
        return [_random(rng, data_shape, dt), idx]
    return Case("take", [(data_shape, dt), (idx.shape, idx.dtype.name)],
                {"axis": axis, "mode": mode, "batch_dims": batch_dims},
                label=f"{mode}_axis{axis}_b{batch_dims}", arrays=arrays)


@cases("take")
def _take(name):
    out = [_take_case(mode, axis, f32) for mode in ("clip", "wrap") for axis in (None, 0, 1)]
    out += [_take_case("clip", 1, dt) for dt in (f64, i32, i64, i8, u8, b)]
    out.append(_take_case("fast", 0, f32, idx=np.array([[0, 2], [1, 1]], "int64")))
    out.append(_take_case("clip", 1, f32, batch_dims=1, data_shape=(2, 3, 4),
                          idx=np.array([[0, 2], [1, 1]], "int64")))
    return out


@cases("layout_transform")
def _layout_transform(name):
    specs = [((1, 32, 2, 3), "NCHW", "NCHW16c", f32), ((1, 2, 2, 3, 16), "NCHW16c", "NCHW", f32),
             ((1, 2, 2, 3, 4), "NCHW4c", "NCHW2c", i8), ((8, 4, 3, 3), "OIHW", "OIHW2i4o", f32),
             ((1, 4, 2, 3), "NCHW", "NHWC", u8)]
    return [Case(name, [(shape, dt)], {"src_layout": s, "dst_layout": d}, label=f"{s}_{d}")
            for shape, s, d, dt in specs]


@cases("one_hot")
def _one_hot(name):
    def arrays(rng):
        return [np.array([[0, 2], [3, -1]], "int32"), np.full((), 5.0, "float32"),
                np.zeros((), "float32")]
    out = [Case(name, [((2, 2), i32), ((), f32), ((), f32)], {"depth": 3, "axis": axis},
                label=f"axis{axis}", arrays=arrays) for axis in (-1, 1)]
    def int_arrays(rng):
        return [np.array([1, 0, 4], "int64"), np.full((), 7, "int8"), np.full((), -1, "int8")]
    out.append(Case(name, [((3,), i64), ((), i8), ((), i8)], {"depth": 4, "dtype": i8},
                    arrays=int_arrays))
    return out


@cases("nn.pad")
def _pad(name):
    out = [Case(name, [((2, 3), dt), ((), dt)], {"pad_width": ((1, 0), (2, 13))}) for dt in MOVE]
    for mode in ("edge", "reflect"):
        out.append(Case(name, [((3, 4), f32), ((), f32)],
                        {"pad_width": ((1, 2), (2, 3)), "pad_mode": mode}, label=mode))
    return out


# ---- reductions

REDUCE_ATTRS = [({}, "all"), ({"axis": 1}, "axis1"), ({"axis": (0, -1), "keepdims": True}, "keep"),
                ({"axis": 1, "exclude": True}, "exclude"), ({"axis": -1}, "last")]
REDUCE_SHAPE = (2, 3, 32)


def _reduced(shape, attrs):
    axis = attrs.get("axis")
    if axis is None:
        return int(np.prod(shape))
    axes = {a % len(shape) for a in (axis if isinstance(axis, tuple) else (axis,))}
    if attrs.get("exclude"):
        axes = set(range(len(shape))) - axes
    return int(np.prod([shape[a] for a in axes]))


@cases("sum", "max", "min", "mean")
def _reduce(name):
    out = [Case(name, [(REDUCE_SHAPE, f32)], attrs, label=label,
                red=_reduced(REDUCE_SHAPE, attrs)) for attrs, label in REDUCE_ATTRS]
    out += [Case(name, [(REDUCE_SHAPE, dt)], {"axis": 1}, label="axis1")
            for dt in (f64, i32, i8, u8)]
    out.append(Case(name, [((2, 3, 64), i8)], {"axis": 1}, label="lanes64"))
    if name == "mean":   # counts past the dtype's range: 192 int8 elements, 300 uint8 ones
        out += [Case(name, [((2, 3, 64), i8)], {"axis": (1, 2)}, label="count192"),
                Case(name, [((2, 300), u8)], {"axis": 1}, label="count300")]
    return out


@cases("prod")
def _prod(name):
    # values near 1 keep float products of many terms in range
    def near_one(dt):
        def arrays(rng):
            return [rng.uniform(0.8, 1.25, size=(2, 3, 8)).astype(dt)]
        return arrays
    out = [Case(name, [((2, 3, 8), dt)], attrs, label=label, arrays=near_one(dt),
                red=_reduced((2, 3, 8), attrs))
           for dt in FLOATS for attrs, label in REDUCE_ATTRS[:3]]
    out += [Case(name, [((2, 3, 8), dt)], {"axis": 1}, label="axis1") for dt in (i32, i64, i8)]
    return out


@cases("all", "any")
def _bool_reduce(name):
    return [Case(name, [((2, 3, 16), b)], attrs, label=label)
            for attrs, label in REDUCE_ATTRS[:4]] + \
        [Case(name, [((2, 3, 64), b)], {"axis": 1}, label="lanes64")]


@cases("argmax", "argmin")
def _arg_reduce(name):
    def ties(rng):  # small ints: ties, where first and last index differ
        return [rng.integers(0, 3, size=(2, 3, 16)).astype(f32)]
    out = [Case(name, [((2, 3, 16), dt)], attrs, label=label)
           for dt in (f32, i32) for attrs, label in REDUCE_ATTRS[1:3]]
    out += [Case(name, [((2, 3, 16), f32)], {"axis": -1, "select_last_index": last},
                 label=f"ties_last{last}", arrays=ties) for last in (False, True)]
    return out


@cases("variance")
def _variance(name):
    out = []
    for dt in FLOATS:
        for attrs, mean_shape, label in [({"axis": 1}, (2, 1, 32), "axis1"),
                                         ({"axis": (0, 2), "unbiased": True}, (1, 3, 1), "unb")]:
            out.append(Case(name, [((2, 3, 32), dt), (mean_shape, dt)], dict(attrs, keepdims=True),
                            label=label, red=64))
    return out


# ---- softmax, normalization

@cases("nn.softmax", "nn.log_softmax")
def _softmax(name):
    return [Case(name, [((2, 40), f32)], red=40), Case(name, [((2, 16, 3), f32)], {"axis": 1},
                                                       label="axis1", red=16),
            Case(name, [((4, 16), f64)], red=16)]


@cases("nn.batch_norm")
def _batch_norm(name):
    def arrays(dt, shape, c):
        def make(rng):
            return [_random(rng, shape, dt), _random(rng, (c,), dt), _random(rng, (c,), dt),
                    _random(rng, (c,), dt), _random(rng, (c,), dt, "positive")]
        return make
    return [Case(name, [((2, 3, 4, 16), dt)] + [((3,), dt)] * 4,
                 arrays=arrays(dt, (2, 3, 4, 16), 3)) for dt in FLOATS] + \
        [Case(name, [((2, 5, 16), f32)] + [((16,), f32)] * 4, {"axis": -1, "center": False},
              label="axis-1", arrays=arrays(f32, (2, 5, 16), 16))]


@cases("nn.layer_norm")
def _layer_norm(name):
    return [Case(name, [((3, 40), dt), ((40,), dt), ((40,), dt)], red=40) for dt in FLOATS] + \
        [Case(name, [((2, 16, 5), f32), ((16,), f32), ((16,), f32)],
              {"axis": 1, "center": False, "epsilon": 1e-3}, label="axis1", red=16),
         Case(name, [((2, 3, 16), f32), ((16,), f32), ((16,), f32)], {"scale": False},
              label="noscale", red=16)]


@cases("nn.lrn")
def _lrn(name):
    # alpha large enough that the window matters at these magnitudes
    return [Case(name, [((1, 7, 3, 16), f32)], {"size": 5, "alpha": 0.5}, red=5),
            Case(name, [((2, 6, 16), f64)], {"size": 4, "axis": 1, "alpha": 0.3, "beta": 0.5,
                                             "bias": 1.0}, label="even", red=4),
            Case(name, [((2, 3, 16), f32)], {"size": 3, "axis": -1, "alpha": 1e-4}, label="last",
                 red=3)]


@cases("nn.dropout")
def _dropout(name):
    return [Case(name, [((3, 40), dt)], {"rate": 0.25}) for dt in FLOATS]


# ---- matrix products

@cases("nn.dense")
def _dense(name):
    return [Case(name, [((2, 5), f32), ((3, 5), f32)], label="k5", red=5),
            Case(name, [((3, 64), f32), ((17, 64), f32)], label="k64", red=64),
            Case(name, [((2, 2, 32), f64), ((3, 32), f64)], label="3d", red=32),
            Case(name, [((2, 8), i32), ((5, 8), i32)]),
            Case(name, [((2, 64), i8), ((4, 64), i8)], {"out_dtype": i32}, label="to_int32"),
            Case(name, [((3, 16), f32), ((5, 16), f32)], label="k16", red=16),
            Case(name, [((3, 48), f32), ((5, 48), f32)], label="k48", red=48),
            Case(name, [((2, 128), u8), ((3, 128), u8)], {"out_dtype": i32}, label="u8_to_int32")]


@cases("nn.matmul")
def _matmul(name):
    return [Case(name, [((2, 24), f32), ((24, 16), f32)], red=24),
            Case(name, [((24, 2), f32), ((3, 24), f32)], {"transpose_a": True, "transpose_b": True},
                 label="tt", red=24),
            Case(name, [((3, 4), i32), ((5, 4), i32)], {"transpose_b": True}, label="nt")]


@cases("nn.batch_matmul")
def _batch_matmul(name):
    return [Case(name, [((2, 3, 20), f32), ((2, 16, 20), f32)], red=20),
            Case(name, [((1, 20, 3), f64), ((2, 20, 5), f64)],
                 {"transpose_a": True, "transpose_b": False}, label="bcast_ta", red=20),
            Case(name, [((2, 3, 4), i32), ((2, 4, 5), i32)], {"transpose_b": False}, label="nn")]


# ---- convolution

def _conv(data, weight, attrs, label, dt=f32, data_layout="NCHW", kernel_layout="OIHW",
          out_layout="", out_dtype=None, marks=()):
    attrs = dict(attrs, data_layout=data_layout, kernel_layout=kernel_layout, out_layout=out_layout)
    if out_dtype:
        attrs["out_dtype"] = out_dtype
    red = weight[1] * weight[2] * weight[3]
    return Case("nn.conv2d", [(Layout("NCHW").convert_shape(data, data_layout), dt),
                              (Layout("OIHW").convert_shape(weight, kernel_layout), dt)],
                attrs, label=label, red=red, marks=list(marks))


@cases("nn.contrib_conv2d_winograd_weight_transform")
def _winograd_weight(name):
    return [Case(name, [((4, 3, 3, 3), f32)], {"tile_size": 2}, label="f2"),
            Case(name, [((8, 5, 3, 3), f32)], {"tile_size": 4}, label="f4", red=9)]


@cases("nn.contrib_conv2d_winograd_without_weight_transform")
def _winograd_conv(name):
    # the weight as the transform gives it, (alpha, alpha, O, I); data NCHW or blocked
    return [Case(name, [((1, 3, 7, 6), f32), ((4, 4, 5, 3), f32)],
                 {"tile_size": 2, "padding": (1, 1), "channels": 5, "kernel_size": (3, 3)},
                 label="f2_pad", red=48),
            Case(name, [((1, 2, 9, 9, 4), f32), ((6, 6, 8, 8), f32)],
                 {"tile_size": 4, "padding": (1, 1), "channels": 8, "kernel_size": (3, 3),
                  "data_layout": "NCHW4c", "kernel_layout": "HWOI", "out_layout": "NCHW4c"},
                 label="f4_nchw4c", red=288)]


@cases("nn.conv2d")
def _conv2d(name):
    return [
        _conv((1, 3, 6, 6), (4, 3, 3, 3), {}, "plain"),
        _conv((1, 2, 7, 6), (3, 2, 3, 2), {"strides": (2, 1), "padding": (1, 0, 2, 1)},
              "stride_pad"),
        _conv((2, 2, 7, 7), (2, 2, 3, 3), {"dilation": (2, 2), "padding": (1, 1)}, "dilation"),
        _conv((1, 4, 5, 5), (6, 2, 3, 3), {"groups": 2, "padding": (1, 1)}, "groups"),
        _conv((1, 3, 6, 6), (6, 1, 3, 3), {"groups": 3, "padding": (1, 1), "strides": (2, 2)},
              "depthwise"),
        _conv((1, 3, 5, 5), (4, 3, 1, 1), {}, "f64_1x1", dt=f64),
        _conv((1, 4, 5, 5), (4, 4, 3, 3), {"padding": (1, 1)}, "i8_to_i32", dt=i8, out_dtype=i32),
        _conv((1, 2, 6, 5), (3, 2, 3, 2), {"strides": (2, 1), "padding": (1, 0, 2, 1)}, "nhwc",
              data_layout="NHWC", kernel_layout="HWIO"),
        _conv((1, 4, 5, 5), (6, 2, 3, 3), {"groups": 2, "padding": (1, 1)}, "nhwc_groups",
              data_layout="NHWC", kernel_layout="HWOI"),
        _conv((1, 3, 5, 5), (4, 3, 3, 3), {}, "to_nhwc", out_layout="NHWC"),
        # the x86 conv2d_NCHWc rule: blocked data and OIHW{i}i{o}o weights, groups=1
        _conv((1, 16, 6, 6), (16, 16, 3, 3), {"padding": (1, 1)}, "nchw8c",
              data_layout="NCHW8c", kernel_layout="OIHW8i8o"),
        _conv((1, 8, 7, 7), (16, 8, 3, 3), {"padding": (1, 1), "strides": (2, 2)}, "nchw4c_8o",
              data_layout="NCHW4c", kernel_layout="OIHW4i8o", out_layout="NCHW8c"),
        _conv((1, 16, 6, 6), (16, 16, 1, 1), {}, "nchw16c_1x1",
              data_layout="NCHW16c", kernel_layout="OIHW16i16o"),
        _conv((1, 8, 9, 9), (8, 8, 3, 3), {"dilation": (2, 2), "padding": (2, 1, 0, 2)},
              "nchw8c_dil", data_layout="NCHW8c", kernel_layout="OIHW8i8o"),
        _conv((2, 8, 6, 7), (8, 8, 1, 1), {"strides": (2, 2)}, "nchw8c_1x1_s2_batch2",
              data_layout="NCHW8c", kernel_layout="OIHW8i8o"),
        _conv((1, 16, 5, 5), (16, 16, 3, 3), {"padding": (1, 1)}, "nchw16c_i8_to_i32", dt=i8,
              data_layout="NCHW16c", kernel_layout="OIHW16i16o", out_dtype=i32),
        _conv((1, 3, 7, 7), (16, 3, 3, 3), {"padding": (1, 1)}, "nchw3c_first_layer",
              data_layout="NCHW3c", kernel_layout="OIHW3i16o", out_layout="NCHW16c"),
        _conv((1, 16, 6, 6), (8, 16, 3, 3), {"padding": (1, 1)}, "nchw16c_to_nchw",
              data_layout="NCHW16c", kernel_layout="OIHW16i8o", out_layout="NCHW"),
        # blocks that differ between data, weight and output: the op's own compute
        _conv((1, 4, 8, 5), (4, 4, 1, 2), {}, "out_block_differs", data_layout="NCHW2c",
              kernel_layout="OIHW2i4o"),
        _conv((1, 8, 6, 6), (8, 8, 3, 3), {"padding": (1, 1)}, "in_block_differs",
              data_layout="NCHW4c", kernel_layout="OIHW2i8o", out_layout="NCHW8c",),
        _conv((1, 8, 6, 6), (8, 8, 3, 3), {"padding": (1, 1)}, "out_layout_block_differs",
              data_layout="NCHW8c", kernel_layout="OIHW8i8o", out_layout="NCHW4c",),
        # the depthwise_conv2d_NCHWc rule
        _conv((1, 16, 6, 6), (16, 1, 3, 3), {"groups": 16, "padding": (1, 1)}, "depthwise_nchw8c",
              data_layout="NCHW8c", kernel_layout="OIHW1i8o"),
        _conv((1, 8, 5, 5), (8, 4, 3, 3), {"groups": 2, "dilation": (2, 1)}, "groups_nchw4c",
              data_layout="NCHW4c", kernel_layout="OIHW2i4o"),
    ]


@cases("nn.conv2d_transpose")
def _conv2d_transpose(name):
    specs = [((1, 2, 3, 4), (2, 3, 3, 2), {"strides": (2, 2), "padding": (1, 0, 0, 1)}, "NCHW"),
             ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": (2, 1), "padding": (1, 1),
                                           "output_padding": (1, 0)}, "NHWC"),
             ((1, 4, 3, 3), (4, 1, 2, 2), {"groups": 2, "dilation": (2, 1)}, "NCHW")]
    out = []
    for k, (data, weight, attrs, layout) in enumerate(specs):
        shape = data if layout == "NCHW" else (data[0], data[2], data[3], data[1])
        out.append(Case(name, [(shape, f32), (weight, f32)], dict(attrs, data_layout=layout),
                        label=f"v{k}_{layout}", red=weight[0] * weight[2] * weight[3]))
    return out


# ---- pooling

POOLS = [({"pool_size": (2, 2), "strides": (2, 2)}, "k2s2"),
         ({"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1)}, "pad"),
         ({"pool_size": (3, 2), "strides": (2, 2), "padding": (1, 0, 0, 1), "ceil_mode": True},
          "ceil"),
         ({"pool_size": (2, 2), "dilation": (2, 1), "padding": (1, 1)}, "dilation")]
POOL_LAYOUTS = {"NCHW": (1, 2, 7, 6), "NHWC": (1, 7, 6, 2), "NCHW16c": (1, 1, 7, 6, 16)}


@cases("nn.max_pool2d", "nn.avg_pool2d")
def _pool(name):
    out = [Case(name, [(POOL_LAYOUTS["NCHW"], f32)], attrs, label=label, red=9)
           for attrs, label in POOLS]
    for layout in ("NHWC", "NCHW16c"):
        out.append(Case(name, [(POOL_LAYOUTS[layout], f32)], dict(POOLS[2][0], layout=layout),
                        label=f"ceil_{layout}", red=9))
    out.append(Case(name, [(POOL_LAYOUTS["NCHW"], i32)], POOLS[1][0], label="pad", red=9))
    out.append(Case(name, [(POOL_LAYOUTS["NCHW"], u8)], POOLS[2][0], label="ceil", red=9))
    if name == "nn.avg_pool2d":
        out.append(Case(name, [(POOL_LAYOUTS["NCHW"], f32)],
                        dict(POOLS[2][0], count_include_pad=True), label="ceil_incl", red=9))
    return out


@cases("nn.global_max_pool2d", "nn.global_avg_pool2d")
def _global_pool(name):
    return [Case(name, [(shape, f32)], {"layout": layout}, label=layout, red=42)
            for layout, shape in POOL_LAYOUTS.items()] + \
        [Case(name, [((1, 2, 3, 3), i32)], label="NCHW"), Case(name, [((1, 2, 3, 3), f64)]),
         Case(name, [((1, 2, 12, 12), i8)], label="count144")]


@cases("nn.adaptive_avg_pool2d")
def _adaptive(name):
    return [Case(name, [((1, 2, 7, 9), f32)], {"output_size": (3, 4)}, red=12),
            Case(name, [((1, 2, 5, 5), f32)], {"output_size": (5, 2)}, label="widen", red=3),
            Case(name, [((1, 2, 6, 6), i32)], {"output_size": (4, 4)})]


# ---- image

RESIZE_MODES = ["half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel",
                "tf_half_pixel_for_nn", "tf_crop_and_resize"]


@cases("image.resize2d")
def _resize(name):
    out = []
    roi = (0.1, -0.2, 0.9, 1.1)
    for method in ("nearest_neighbor", "linear", "cubic"):
        for mode in RESIZE_MODES if method != "cubic" else RESIZE_MODES[:3]:
            attrs = {"size": (7, 5), "method": method, "coordinate_transformation_mode": mode}
            if mode == "tf_crop_and_resize":
                attrs.update(roi=roi, extrapolation_value=-1.0)
            out.append(Case(name, [((1, 2, 4, 6), f32)], attrs, label=f"{method}_{mode}", red=16))
    for rounding in ("round", "round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
        out.append(Case(name, [((1, 2, 4, 6), f32)],
                        {"size": (8, 9), "method": "nearest_neighbor", "rounding_method": rounding,
                         "coordinate_transformation_mode": "asymmetric"}, label=f"nn_{rounding}"))
    out += [
        Case(name, [((1, 2, 5, 4), f32)], {"size": (3, 7), "method": "cubic", "cubic_exclude": 1,
                                           "cubic_alpha": -0.75}, label="cubic_exclude", red=16),
        Case(name, [((1, 5, 4, 3), f32)], {"size": (6, 5), "layout": "NHWC"}, label="nhwc", red=4),
        Case(name, [((1, 1, 4, 3, 16), f32)], {"size": (6, 2), "layout": "NCHW16c"},
             label="nchw16c", red=4),
        Case(name, [((1, 2, 4, 6), f64)], {"size": (5, 9), "method": "cubic"}, label="cubic",
             red=16),
        Case(name, [((1, 3, 4, 6), u8)], {"size": (7, 5)}, label="linear", red=4),
        Case(name, [((1, 3, 4, 6), u8)], {"size": (7, 5), "out_dtype": f32}, label="to_f32", red=4),
        Case(name, [((1, 2, 4, 6), i32)], {"size": (3, 8), "method": "nearest_neighbor"},
             label="nearest"),
    ]
    for case in out:   # coordinates are float32 for every dtype, as in the reference
        case.tol_dtype = f32
    return out


# ---- 1-D and 3-D convolution and pooling, upsampling, resize1d/3d

@cases("nn.conv1d", "nn.conv3d")
def _conv_nd(name):
    three = name == "nn.conv3d"
    data, weight = ((1, 4, 4, 5, 6), (6, 2, 2, 3, 2)) if three else ((2, 4, 9), (6, 2, 3))
    n = 3 if three else 1
    red = 2 * (12 if three else 3)
    layouts = ("NDHWC", "DHWIO") if three else ("NWC", "WIO")
    return [Case(name, [(data, f32), (weight, f32)], {"groups": 2, "padding": (1,) * n}, red=red),
            Case(name, [(data, f64), (weight, f64)], {"groups": 2, "strides": (2,) * n,
                                                      "dilation": (1,) * (n - 1) + (2,)},
                 label="stride_dil", red=red),
            Case(name, [(data, i8), (weight, i8)], {"groups": 2, "out_dtype": i32}, label="to_i32"),
            Case(name, [(Layout("NC" + ("DHW" if three else "W")).convert_shape(data, layouts[0]), f32),
                        (Layout("OI" + ("DHW" if three else "W")).convert_shape(
                            (6, 4) + weight[2:], layouts[1]), f32)],
                 {"data_layout": layouts[0], "kernel_layout": layouts[1]}, label="channels_last",
                 red=2 * red)]


@cases("nn.conv1d_transpose", "nn.conv3d_transpose")
def _conv_transpose_nd(name):
    three = name == "nn.conv3d_transpose"
    data, weight = ((1, 4, 2, 3, 3), (4, 3, 2, 2, 3)) if three else ((2, 4, 5), (4, 3, 3))
    n = 3 if three else 1
    red = 4 * (12 if three else 3)
    return [Case(name, [(data, f32), (weight, f32)], {"strides": (2,) * n, "padding": (1,) * n,
                                                      "output_padding": (1,) * n}, red=red),
            Case(name, [(data, f64), ((4, 1) + weight[2:], f64)], {"groups": 2, "dilation": (2,) * n},
                 label="groups_dil", red=red)]


POOLS_ND = [({"pool_size": 2, "strides": 2}, "k2s2"),
            ({"pool_size": 3, "strides": 2, "padding": 1, "ceil_mode": True}, "pad_ceil"),
            ({"pool_size": 2, "dilation": 2, "padding": 1}, "dilation")]


@cases("nn.max_pool1d", "nn.avg_pool1d", "nn.max_pool3d", "nn.avg_pool3d")
def _pool_nd(name):
    three = name.endswith("3d")
    shape = (1, 2, 5, 6, 7) if three else (2, 3, 11)
    red = 27 if three else 3
    out = [Case(name, [(shape, f32)], attrs, label=label, red=red) for attrs, label in POOLS_ND]
    last = (1, 5, 6, 7, 2) if three else (2, 11, 3)
    out.append(Case(name, [(last, f32)], dict(POOLS_ND[1][0], layout="NDHWC" if three else "NWC"),
                    label="channels_last", red=red))
    out.append(Case(name, [(shape, i32)], POOLS_ND[1][0], label="pad_ceil", red=red))
    if name.startswith("nn.avg"):
        out.append(Case(name, [(shape, f32)], dict(POOLS_ND[1][0], count_include_pad=True),
                        label="incl", red=red))
    return out


@cases("nn.adaptive_max_pool1d", "nn.adaptive_avg_pool1d", "nn.adaptive_max_pool2d",
       "nn.adaptive_max_pool3d", "nn.adaptive_avg_pool3d")
def _adaptive_nd(name):
    rank = int(name[-2])
    shape = {1: (2, 3, 9), 2: (1, 2, 7, 9), 3: (1, 2, 5, 6, 7)}[rank]
    size = {1: (4,), 2: (3, 4), 3: (2, 4, 3)}[rank]
    return [Case(name, [(shape, f32)], {"output_size": size}, red=27),
            Case(name, [(shape, f64)], {"output_size": 1}, label="global", red=400),
            Case(name, [(shape, i32)], {"output_size": size})]


@cases("nn.upsampling")
def _upsampling(name):
    return [Case(name, [((1, 2, 3, 4), f32)], {"scale_h": 2.0, "scale_w": 1.5, "method": method,
                                               "align_corners": corners},
                 label=f"{method}_{corners}", red=16, tol_dtype=f32)
            for method in ("nearest_neighbor", "bilinear", "bicubic") for corners in (False, True)] + \
        [Case(name, [((1, 3, 4, 2), f32)], {"scale_h": 0.5, "scale_w": 2.0, "layout": "NHWC"},
              label="nhwc")]


@cases("nn.upsampling3d")
def _upsampling3d(name):
    return [Case(name, [((1, 2, 2, 3, 4), f32)], {"scale_d": 2.0, "scale_h": 1.5, "scale_w": 0.5,
                                                  "method": method,
                                                  "coordinate_transformation_mode": mode},
                 label=f"{method}_{mode}", red=8, tol_dtype=f32)
            for method in ("nearest_neighbor", "trilinear") for mode in RESIZE_MODES[:4]]


@cases("image.resize1d", "image.resize3d")
def _resize_nd(name):
    three = name == "image.resize3d"
    shape, size = ((1, 2, 3, 4, 5), (5, 2, 7)) if three else ((2, 3, 7), (11,))
    roi = (0.1, -0.2, 0.0, 0.9, 1.1, 1.0) if three else (0.1, 0.9)
    out = []
    for method in ("nearest_neighbor", "linear", "cubic"):
        for mode in RESIZE_MODES if method != "cubic" else RESIZE_MODES[:3]:
            attrs = {"size": size, "method": method, "coordinate_transformation_mode": mode}
            if mode == "tf_crop_and_resize":
                attrs.update(roi=roi, extrapolation_value=-1.0)
            out.append(Case(name, [(shape, f32)], attrs, label=f"{method}_{mode}", red=64))
    out.append(Case(name, [(shape, u8)], {"size": size, "out_dtype": f32}, label="to_f32", red=8))
    for case in out:
        case.tol_dtype = f32
    return out


@cases("nn.space_to_depth", "nn.depth_to_space")
def _block(name):
    shape = (1, 3, 4, 6) if name == "nn.space_to_depth" else (1, 8, 3, 2)
    return [Case(name, [(shape, f32)], {"block_size": 2}),
            Case(name, [((shape[0], shape[2], shape[3], shape[1]), i8)],
                 {"block_size": 2, "layout": "NHWC"}, label="nhwc")] + \
        ([Case(name, [(shape, f32)], {"block_size": 2, "mode": "CRD"}, label="crd")]
         if name == "nn.depth_to_space" else [])


@cases("nn.instance_norm", "nn.group_norm")
def _channel_norm(name):
    extra = {"num_groups": 2} if name == "nn.group_norm" else {}
    return [Case(name, [((2, 4, 3, 5), dt), ((4,), dt), ((4,), dt)], dict(extra), red=30)
            for dt in FLOATS] + \
        [Case(name, [((2, 5, 4), f32), ((4,), f32), ((4,), f32)],
              dict(extra, axis=-1, center=False, epsilon=1e-3), label="last", red=10)]


@cases("nn.l2_normalize")
def _l2_normalize(name):
    return [Case(name, [((3, 40), dt)], {"axis": (1,)}, red=40) for dt in FLOATS] + \
        [Case(name, [((2, 3, 16), f32)], {"eps": 1e-3}, label="all", red=96)]


@cases("nn.mirror_pad")
def _mirror_pad(name):
    return [Case(name, [((3, 4, 5), dt)], {"pad_width": ((1, 2), (0, 3), (2, 2)), "mode": mode},
                 label=mode) for dt in (f32, i8) for mode in ("SYMMETRIC", "REFLECT")]


# ---- gathers, scatters, scans, sorting, collapse_sum, the other new elementwise ops

def _index_arrays(data, index, extent, dt=f32, lo=0):
    def make(rng):
        return [_random(rng, data, dt), rng.integers(lo, extent, size=index).astype(i32)]
    return make


@cases("gather")
def _gather(name):
    return [Case(name, [((3, 4), dt), ((3, 6), i32)], {"axis": 1},
                 arrays=_index_arrays((3, 4), (3, 6), 4, dt)) for dt in ALL_DTYPES] + \
        [Case(name, [((5, 2, 3), i8), ((2, 2, 3), i32)], {"axis": 0},
              arrays=_index_arrays((5, 2, 3), (2, 2, 3), 5, i8), label="axis0")]


@cases("gather_nd")
def _gather_nd(name):
    return [Case(name, [((3, 4, 5), dt), ((2, 3, 2), i32)],
                 arrays=_index_arrays((3, 4, 5), (2, 3, 2), 3, dt)) for dt in ALL_DTYPES] + \
        [Case(name, [((3, 4, 5), i64), ((1, 3, 2), i32)], {"batch_dims": 1},
              arrays=_index_arrays((3, 4, 5), (1, 3, 2), 4, i64), label="batch"),
         Case(name, [((2, 3), f64), ((2,), i32)], arrays=_index_arrays((2, 3), (2,), 2, f64),
              label="scalar")]


@cases("scatter_nd")
def _scatter_nd(name):
    def arrays(dt):
        def make(rng):
            return [_random(rng, (4, 3), dt), rng.integers(0, 4, size=(1, 5)).astype(i32),
                    _random(rng, (5, 3), dt)]
        return make
    return [Case(name, [((4, 3), dt), ((1, 5), i32), ((5, 3), dt)], {"mode": mode}, label=mode,
                 arrays=arrays(dt), red=5)
            for dt in ALL_DTYPES for mode in ("update", "add", "mul", "min", "max")
            if dt != b or mode == "update"]


@cases("ndarray_size")
def _ndarray_size(name):
    return [Case(name, [((3, 4, 5), f32)]), Case(name, [((7,), i8)], {"dtype": "int64"}, label="i64")]


@cases("reverse")
def _reverse(name):
    return [Case(name, [((3, 4, 16), dt)], {"axis": axis}, label=f"axis{axis}")
            for dt in (f32, i8) for axis in (0, -1)]


@cases("cumsum", "cumprod")
def _scan(name):
    return [Case(name, [((3, 8), f32)], {"axis": 1}, red=8),
            Case(name, [((3, 4), i32)], {"exclusive": True}, label="flat_excl"),
            Case(name, [((4, 3), i8)], {"axis": 0, "dtype": "int64"}, label="to_i64"),
            Case(name, [((2, 5), f64)], {"axis": -1, "exclusive": True}, label="excl", red=5)]


def _ties(shape, dt):
    def make(rng):
        return [rng.integers(-3, 4, size=shape).astype(dt)]
    return make


@cases("argsort", "sort", "topk")
def _sorting(name):
    extra = {"k": 3} if name == "topk" else {}
    out = [Case(name, [((3, 7), dt)], dict(extra), label="ties", arrays=_ties((3, 7), dt))
           for dt in (f32, i32, u8)]
    out.append(Case(name, [((4, 3, 5), f64)], dict(extra, axis=0, is_ascend=name != "topk"),
                    label="axis0"))
    if name == "topk":
        out += [Case(name, [((3, 7), f32)], {"k": 0, "ret_type": kind}, label=f"all_{kind}")
                for kind in ("values", "indices")]
    return out


@cases("collapse_sum_like")
def _collapse_sum_like(name):
    return [Case(name, [((2, 4, 3), dt), ((4, 1), dt)], red=6) for dt in (f32, i32)]


@cases("collapse_sum_to")
def _collapse_sum_to(name):
    def arrays(dt):
        def make(rng):
            return [_random(rng, (2, 4, 3), dt), np.array([1, 3], "int32")]
        return make
    return [Case(name, [((2, 4, 3), dt), ((2,), i32)], {"shape": (1, 3)}, arrays=arrays(dt), red=8)
            for dt in NUMERIC]


@cases("annotation.stop_fusion", "copy")
def _identity(name):
    return [Case(name, [((3, 40), dt)]) for dt in (f32, i8, b)]


@cases("relay.op.annotation.simulated_quantize")
def _simulated_quantize(name):
    def arrays(dt, scale):
        def make(rng):
            data = _random(rng, (3, 40), dt) * 3
            data[0, :4] = (0.25, -0.25, 0.75, -0.75)          # halves at scale 0.5
            return [data] + [np.asarray(v, "float32") for v in (scale, -7.0, 7.0)]
        return make
    scalars = [((), f32)] * 3
    return [Case(name, [((3, 40), dt)] + scalars, {"kind": kind}, label=f"k{kind}-s{scale}",
                 arrays=arrays(dt, scale))
            for dt in FLOATS for kind in (0, 1) for scale in (0.5, 0.3)]


@cases("isnan", "isfinite", "isinf")
def _float_tests(name):
    def arrays(rng):
        a = _random(rng, (3, 8), f32)
        a[0, :3] = (np.nan, np.inf, -np.inf)
        return [a]
    return [Case(name, [((3, 8), f32)], arrays=arrays), Case(name, [((3, 8), i32)])]


@cases("trunc", "sign")
def _trunc_sign(name):
    def zeros(rng):
        x = (rng.integers(-8, 8, size=(3, 40)) / 4).astype(f32)   # zeros and halves among them
        return [x]
    return _unary(name, NUMERIC) + [Case(name, [((3, 40), f32)], label="zeros", arrays=zeros)]


@cases("trunc_divide", "trunc_mod")
def _trunc_division(name):
    return _binary(name, NUMERIC, domain="nonzero_rhs")


@cases("broadcast_to_like")
def _broadcast_to_like(name):
    return [Case(name, [((3, 1), dt), ((2, 3, 16), i32)]) for dt in (f32, i8)]


@cases("slice_like")
def _slice_like(name):
    return [Case(name, [((4, 5, 16), f32), ((2, 3), f64)]),
            Case(name, [((4, 5, 16), i8), ((2, 3, 8), f32)], {"axes": (-1,)}, label="last")]


def _large_cases():
    """A few cases above the strategy's PARALLEL_MIN_WORK, so that the parallel loops (the
    runtime's thread pool) run too."""
    return [
        Case("add", [((64, 300), f32), ((300,), f32)], label="parallel"),
        Case("transpose", [((48, 40, 16), i8)], {"axes": (2, 0, 1)}, label="parallel"),
        Case("sum", [((64, 512), f32)], {"axis": 1}, label="parallel", red=512),
        Case("nn.max_pool2d", [((1, 32, 32, 32), f32)], POOLS[1][0], label="parallel", red=9),
        Case("nn.avg_pool2d", [((1, 2, 32, 32, 16), f32)], dict(POOLS[2][0], layout="NCHW16c"),
             label="parallel", red=9),
        Case("nn.softmax", [((256, 80), f32)], label="parallel", red=80),
        Case("nn.dense", [((64, 32), f32), ((64, 32), f32)], label="parallel", red=32),
        _conv((1, 16, 16, 16), (32, 16, 3, 3), {"padding": (1, 1)}, "nchw16c_parallel",
              data_layout="NCHW16c", kernel_layout="OIHW16i16o"),
    ]


def _function(case: Case):
    opdef = get_opdef(case.op)
    params = [var(f"x{k}", shape=s, dtype=d) for k, (s, d) in enumerate(case.inputs)]
    args = [Tuple(params)] if case.tuple_input else params
    call = OpCaller(opdef)(*args, **case.attrs)
    func = Function(params, call).with_attr("Primitive", 1)
    infer_expr(func)
    return func, call


ALL_DTYPES = (f32, f64, i32, i64, i8, u8, b)

#: Ops whose relations accept bool tensors but for which bool has no meaning worth compiling
#: (sums, products, means, convolutions of truth values).
BOOL_MEANINGLESS = {"nn.bias_add", "nn.conv2d", "nn.conv2d_transpose", "nn.dense", "nn.matmul",
                    "nn.batch_matmul", "nn.avg_pool2d", "nn.max_pool2d", "nn.global_avg_pool2d",
                    "nn.global_max_pool2d", "nn.adaptive_avg_pool2d", "nn.conv1d", "nn.conv3d",
                    "nn.conv1d_transpose", "nn.conv3d_transpose", "nn.max_pool1d", "nn.max_pool3d",
                    "nn.avg_pool1d", "nn.avg_pool3d", "nn.adaptive_max_pool1d",
                    "nn.adaptive_avg_pool1d", "nn.adaptive_max_pool2d", "nn.adaptive_max_pool3d",
                    "nn.adaptive_avg_pool3d"}

#: (op, dtype) pairs the relation accepts and the compute refuses with a CompileError naming the
#: op: integer powers need a loop over the exponent's bits, which computes cannot express.
REFUSED = {("power", dt) for dt in INTS}


def _accepts(case: Case) -> bool:
    try:
        _function(case)
    except TypeInferenceError:
        return False
    return True


def _dtype_sweep(name, table_cases):
    """One case per dtype the op's type relation accepts and the table does not cover: the
    table's first plain case (no fixed arrays) with its data dtype replaced."""
    template = next((c for c in table_cases if c.arrays is None and not c.marks and c.inputs),
                    None)
    if template is None:
        return []
    k = 1 if name == "where" else 0          # where's data is its second input
    data = template.inputs[k][1]
    covered = {c.inputs[k][1] for c in table_cases if len(c.inputs) > k}
    out = []
    for dt in ALL_DTYPES:
        if dt in covered or (dt == b and name in BOOL_MEANINGLESS):
            continue
        inputs = [(shape, dt if d == data else d) for shape, d in template.inputs]
        case = Case(name, inputs, dict(template.attrs), label="sweep",
                    tuple_input=template.tuple_input, domain=template.domain, red=template.red,
                    tol_dtype=template.tol_dtype)
        if _accepts(case):
            out.append(case)
    return out


def _all_cases():
    out = []
    for name in sorted(CASES):
        table = CASES[name](name)
        out += table + _dtype_sweep(name, table)
    return out + _large_cases()


ALL_CASES = _all_cases()


# ---------------------------------------------------------------------------------------------
# Running a case

def _tolerance(case: Case, dtype, arrays, want):
    """(rtol, atol) of a float result: a few ulps for elementwise ops; for a sum of ``red``
    terms, ``red`` ulps of the largest term (a product of two inputs at most)."""
    eps = float(np.finfo(case.tol_dtype or dtype).eps)
    if case.red <= 1:
        return 4 * eps, 4 * eps
    scale = max([1.0] + [float(np.abs(a).max(initial=0)) for a in arrays
                         if np.asarray(a).dtype.kind == "f"])
    return 4 * eps * case.red, 4 * eps * case.red * scale * scale


def run_case(case: Case):
    """Lower, compile and run ``case``; return (results, the reference's results, arrays)."""
    func, call = _function(case)
    lowered = lower_primitive(func)
    kernel = build_kernel(lowered.prim_func)
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    arrays = _inputs(case, rng)
    outs = [np.zeros(tuple(int(d) for d in t.shape), t.dtype) for t in lowered.output_types]
    kernel(*arrays, *lowered.constants, *outs)
    with np.errstate(all="ignore"):
        ref = get_opdef(case.op).reference(*([list(arrays)] if case.tuple_input else arrays),
                                           call.attrs)
    refs = [np.asarray(r) for r in (ref if isinstance(ref, (list, tuple)) else [ref])]
    return outs, refs, arrays


def _refused(case: Case) -> bool:
    return any((case.op, d) in REFUSED for _, d in case.inputs)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in ALL_CASES
                                  if not _refused(c)])
def test_op_compiled(case):
    outs, refs, arrays = run_case(case)
    assert len(outs) == len(refs), f"{case.id}: {len(outs)} outputs, reference has {len(refs)}"
    for k, (got, want) in enumerate(zip(outs, refs)):
        where = f"{case.id} output {k}"
        assert got.shape == want.shape, f"{where}: shape {got.shape}, reference {want.shape}"
        assert got.dtype == want.dtype, f"{where}: dtype {got.dtype}, reference {want.dtype}"
        if got.dtype.kind == "f":
            rtol, atol = _tolerance(case, got.dtype, arrays, want)
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=where)
        else:
            np.testing.assert_array_equal(got, want, err_msg=where)


@pytest.mark.parametrize("case", [c for c in ALL_CASES if _refused(c)],
                         ids=[c.id for c in ALL_CASES if _refused(c)])
def test_refused_dtypes_name_the_op(case):
    func, _ = _function(case)
    with pytest.raises(CompileError, match=f"^{case.op}: no compute for"):
        lower_primitive(func)


def test_every_compute_has_cases():
    with_compute = {name for name in list_ops() if get_opdef(name).compute is not None}
    assert with_compute - set(CASES) == set(), "ops with a compute but no compiled test cases"
    assert set(CASES) - with_compute == set(), "cases for ops that have no compute"


#: Ops whose first input is not the data the dtype sweep varies (indices, a fill value).
NOT_DATA = {"one_hot", "zeros", "ones"}


def test_cases_cover_dtypes():
    """The matrix is what it claims: every dtype an op's relation accepts (on the op's first
    case) has a case, unless bool is meaningless for it or the compute refuses it."""
    seen = {(c.op, c.inputs[1 if c.op == "where" else 0][1]) for c in ALL_CASES if c.inputs}
    missing = []
    for name in sorted(set(CASES) - NOT_DATA):
        template = CASES[name](name)[0]
        k = 1 if name == "where" else 0
        for dt in ALL_DTYPES:
            inputs = [(shape, dt if d == template.inputs[k][1] else d)
                      for shape, d in template.inputs]
            case = Case(name, inputs, dict(template.attrs), tuple_input=template.tuple_input)
            if (name, dt) in seen or (dt == b and name in BOOL_MEANINGLESS) or not _accepts(case):
                continue
            missing.append((name, dt))
    assert missing == []
