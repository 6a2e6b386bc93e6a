"""Elementwise and broadcasting operators, casts, ``where`` and tensor initializers.

>>> import relaybench as rb
>>> from relaybench.ir.type_infer import infer_expr
>>> x, y = rb.var("x", shape=(4, 1, 3)), rb.var("y", shape=(5, 1))
>>> infer_expr(add(x, y)), infer_expr(less(x, y))
(Tensor[(4, 5, 3), float32], Tensor[(4, 5, 3), bool])
>>> infer_expr(cast(exp(x), dtype="float16"))
Tensor[(4, 1, 3), float16]
>>> print(rb.Function([x], clip(x, a_min=0.0, a_max=6.0)).astext(show_types=False))
fn (%x: Tensor[(4, 1, 3), float32]) {
  clip(%x, a_min=0f, a_max=6f)
}

Dtype rules, as Relay's relations and TOPI's kernels apply them:

* binary operators need both operands of one dtype (no implicit promotion); arithmetic ones
  (``add`` ... ``power``) take integer and floating-point tensors, not ``bool``;
* comparisons take any dtype and give ``bool``; ``logical_*`` take and give ``bool``;
* ``exp``, ``log``, ``sqrt``, ``rsqrt``, ``sigmoid``, ``tanh`` and ``erf`` need a floating-point
  tensor; ``round``, ``floor`` and ``ceil`` leave integers as they are.

Where this differs from Relay, deliberately: Relay types these math functions with
``IdentityRel`` and the shifts with ``BroadcastRel``, which do not look at the dtype, so
``log(%x: int32)`` type-checks there and fails only when a kernel is built. Here the relation
refuses it, so the error names the node before anything runs. Relay's behaviour is one
registration away, since type inference reads each operator's relation from the attribute
registry (``FTypeRelation``, the OpDef's relation at level 0)::

    with rb.op.attr_scope():
        rb.op.register_op_attr("log", "FTypeRelation", lambda types, attrs: types[0], level=11)
        ...   # log(%x: int32) now type-checks as in Relay; running it is a clear error

The interpreter then refuses the call when the op's semantics give another dtype than the type
says, and ``rb.build`` when no kernel computes that dtype.

Integer arithmetic is C's, as in TVM's kernels: ``divide`` and ``mod`` truncate toward zero
(``-7 / 2 == -3``, ``-7 mod 2 == -1``), ``floor_divide`` and ``floor_mod`` round toward minus
infinity (``-4``, ``1``); results wrap around on overflow. ``round`` rounds halves away from zero
(LLVM's ``llvm.round``, C's ``round``), not to even as ``numpy.round`` does.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.types import DTYPES, TensorType, check_dtype, convert_values
from ._layout import broadcast_layout, elemwise_layout
from ._rel import broadcast_shape, fail, known, relation, tensor
from . import _compute as C
from .registry import OpDef, OpPattern, register

__all__ = ["add", "subtract", "multiply", "divide", "floor_divide", "mod", "floor_mod", "power",
           "maximum", "minimum", "left_shift", "right_shift",
           "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
           "logical_and", "logical_or", "logical_xor", "logical_not",
           "negative", "abs", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "erf",
           "round", "floor", "ceil", "clip", "cast", "cast_like", "where",
           "zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "isnan", "isfinite",
           "isinf", "sign", "trunc", "copy", "trunc_divide", "trunc_mod"]


# ---------------------------------------------------------------------------------------------
# Dtype classes

FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})
INT_DTYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})

#: (accepted dtypes, the words an error uses for them)
ANY_DTYPE = (DTYPES, "a ")
NUMERIC = (FLOAT_DTYPES | INT_DTYPES, "a numeric (integer or floating-point) ")
FLOAT = (FLOAT_DTYPES, "a floating-point ")
INTEGER = (INT_DTYPES, "an integer ")
BOOL = (frozenset({"bool"}), "a bool ")


def require(t, what: str, kind) -> TensorType:
    """``t`` as a TensorType whose dtype is of ``kind``, or fail naming the argument."""
    t = tensor(t, what)
    allowed, words = kind
    if t.dtype not in allowed:
        fail(f"{what} must be {words}tensor, got {t}")
    return t


def _quiet(func):
    """A numpy reference ``func(*arrays)`` as an op reference ``(*arrays, attrs)``.

    Floating-point warnings are silenced (``log(0)`` is ``-inf``, integer division by zero gives
    0, as numpy defines it) and scalars come back as 0-d arrays.
    """
    def reference(*args):
        arrays = [np.asarray(a) for a in args[:-1]]
        with np.errstate(all="ignore"):
            return np.asarray(func(*arrays))
    reference.__name__ = getattr(func, "__name__", "reference")
    return reference


# ---------------------------------------------------------------------------------------------
# Relations

def _broadcast_relation(kind, name: str = "BroadcastRel", out_dtype=None):
    @relation(name)
    def rel(types, attrs):
        lhs, rhs = types
        if not (known(lhs) and known(rhs)):
            return None
        lhs, rhs = tensor(lhs, "lhs"), tensor(rhs, "rhs")
        if lhs.dtype != rhs.dtype:
            fail(f"operands have different dtypes: {lhs.dtype} and {rhs.dtype}")
        require(lhs, "lhs", kind)
        if lhs.shape == rhs.shape or not rhs.shape:
            shape = lhs.shape
        elif not lhs.shape:
            shape = rhs.shape
        else:
            shape = broadcast_shape(lhs, rhs)
        return TensorType(shape, out_dtype or lhs.dtype)
    rel.__doc__ = (f"``{name}``: {kind[1]}tensor and another of its dtype, numpy broadcasting of "
                   f"the shapes; the result is {out_dtype or 'of that dtype'}.")
    return rel


def _unary_relation(kind):
    @relation("IdentityRel")
    def rel(types, attrs):
        (t,) = types
        if not known(t):
            return None
        return require(t, "data", kind)
    rel.__doc__ = f"``IdentityRel``: the output has the input's type ({kind[1]}tensor)."
    return rel


broadcast_rel = _broadcast_relation(ANY_DTYPE)
broadcast_comp_rel = _broadcast_relation(ANY_DTYPE, "BroadcastCompRel", "bool")
identity_rel = _unary_relation(ANY_DTYPE)
_arith_rel = _broadcast_relation(NUMERIC)
# Relay registers the shifts with BroadcastRel and the math functions (exp, log, sqrt, ...) with
# IdentityRel, neither of which looks at the dtype, so ``log(%x: int32)`` type-checks there and
# fails only when compiled. Here a relation accepts what some executor can run: the shifts take
# integers, the math functions floating point.
_shift_rel = _broadcast_relation(INTEGER)
_math_unary_rel = _unary_relation(FLOAT)
_logical_rel = _broadcast_relation(BOOL)
_numeric_unary_rel = _unary_relation(NUMERIC)
_bool_unary_rel = _unary_relation(BOOL)


# ---------------------------------------------------------------------------------------------
# Binary operators (kBroadcast)

def _binary(name: str, func, doc: str, rel=_arith_rel):
    return register(OpDef(name, ("lhs", "rhs"), rel, OpPattern.BROADCAST, reference=_quiet(func),
                          compute=C.binary_compute(name), layout=broadcast_layout, doc=doc))


def _is_int(a) -> bool:
    return a.dtype.kind in "iu"


def _divide(a, b):
    if _is_int(a):
        # C division truncates toward zero: a - fmod(a, b) is an exact multiple of b
        return np.floor_divide(a - np.fmod(a, b), b)
    return np.true_divide(a, b)


def _floor_divide(a, b):
    return np.floor_divide(a, b) if _is_int(a) else np.floor(np.true_divide(a, b))


def _floor_mod(a, b):
    # numpy's remainder: the exact fmod, moved by b when its sign differs from b's (the formula
    # a - floor(a / b) * b overflows when a / b does: -1.8e308 floor_mod 0.5 would be inf)
    return np.remainder(a, b)


def _power(a, b):
    if not _is_int(a):
        return np.power(a, b)
    # integers: b < 0 gives the truncated value of 1 / a**|b|, which is 0 unless |a| == 1
    # (and 0 for a == 0, where C leaves it undefined)
    out = np.power(a, np.where(b < 0, 0, b).astype(b.dtype))
    if a.dtype.kind == "i":
        odd = np.bitwise_and(b, 1).astype(bool)
        neg = np.where(a == 1, 1, np.where(a == -1, np.where(odd, -1, 1), 0)).astype(a.dtype)
        out = np.where(b < 0, neg, out)
    return out.astype(a.dtype, copy=False)


add = _binary("add", np.add, "Elementwise sum with numpy broadcasting.")
subtract = _binary("subtract", np.subtract, "Elementwise difference with numpy broadcasting.")
multiply = _binary("multiply", np.multiply, "Elementwise product with numpy broadcasting.")
divide = _binary("divide", _divide, "Elementwise quotient with numpy broadcasting; integer "
                                    "division truncates toward zero (C's ``/``).")
floor_divide = _binary("floor_divide", _floor_divide, "Elementwise quotient rounded toward minus "
                                                      "infinity: ``floor(lhs / rhs)``.")
mod = _binary("mod", np.fmod, "Elementwise remainder of truncated division (C's ``%`` and "
                              "``fmod``): it has the sign of ``lhs``.")
floor_mod = _binary("floor_mod", _floor_mod, "Elementwise remainder of floor division, with the "
                                             "sign of ``rhs`` (numpy's ``remainder``: for floats "
                                             "the exact ``fmod``, plus ``rhs`` where the signs "
                                             "differ).")
power = _binary("power", _power, "Elementwise ``lhs ** rhs``; for integers a negative exponent "
                                 "gives the truncated ``1 / lhs**|rhs|``.")
maximum = _binary("maximum", np.maximum, "Elementwise maximum with numpy broadcasting.", broadcast_rel)
minimum = _binary("minimum", np.minimum, "Elementwise minimum with numpy broadcasting.", broadcast_rel)
left_shift = _binary("left_shift", np.left_shift, "Elementwise ``lhs << rhs`` of integers.",
                     _shift_rel)
right_shift = _binary("right_shift", np.right_shift, "Elementwise ``lhs >> rhs`` of integers "
                                                     "(arithmetic for signed ones).", _shift_rel)

equal = _binary("equal", np.equal, "``lhs == rhs`` elementwise; a bool tensor.", broadcast_comp_rel)
not_equal = _binary("not_equal", np.not_equal, "``lhs != rhs`` elementwise; a bool tensor.",
                    broadcast_comp_rel)
less = _binary("less", np.less, "``lhs < rhs`` elementwise; a bool tensor.", broadcast_comp_rel)
less_equal = _binary("less_equal", np.less_equal, "``lhs <= rhs`` elementwise; a bool tensor.",
                     broadcast_comp_rel)
greater = _binary("greater", np.greater, "``lhs > rhs`` elementwise; a bool tensor.",
                  broadcast_comp_rel)
greater_equal = _binary("greater_equal", np.greater_equal,
                        "``lhs >= rhs`` elementwise; a bool tensor.", broadcast_comp_rel)

logical_and = _binary("logical_and", np.logical_and, "Elementwise AND of bool tensors.", _logical_rel)
logical_or = _binary("logical_or", np.logical_or, "Elementwise OR of bool tensors.", _logical_rel)
logical_xor = _binary("logical_xor", np.logical_xor, "Elementwise XOR of bool tensors.", _logical_rel)


# ---------------------------------------------------------------------------------------------
# Unary operators (kElemWise)

def _unary(name: str, func, doc: str, rel=_math_unary_rel, attrs=None, normalize=None):
    return register(OpDef(name, ("data",), rel, OpPattern.ELEMWISE, attrs=dict(attrs or {}),
                          normalize=normalize, reference=_quiet(func),
                          compute=C.unary_compute(name), layout=elemwise_layout, doc=doc))


def _in_float64(func):
    """Compute in float64 and give back the input's dtype (for float16 inputs)."""
    def compute(x):
        return func(x.astype(np.float64)).astype(x.dtype)
    return compute


_SERIES_TERMS = 40    # enough for |x| < 2.5 to float64 accuracy (the last term is below 1e-17)
_FRACTION_DEPTH = 30  # enough for |x| >= 2.5


def _erf64(x):
    """erf in float64, relative error about 1e-15.

    For ``|x| < 2.5`` the series ``erf(x) = 2/sqrt(pi) exp(-x^2) sum_n (2x^2)^n x / (1*3*...*(2n+1))``,
    whose terms are all positive (no cancellation); above, Laplace's continued fraction
    ``erfc(x) = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))``, evaluated
    from its tail.
    """
    a = np.abs(x)
    near = a < 2.5
    out = np.empty_like(a)
    s = a[near]
    two_s2 = 2 * s * s
    term, total = s.copy(), s.copy()
    for n in range(1, _SERIES_TERMS):
        term *= two_s2 / (2 * n + 1)
        total += term
    out[near] = (2 / math.sqrt(math.pi)) * np.exp(-s * s) * total
    f = a[~near]
    tail = f.copy()
    for k in range(_FRACTION_DEPTH, 0, -1):
        tail = f + (k / 2) / tail
    out[~near] = 1 - np.exp(-f * f) / (math.sqrt(math.pi) * tail)
    return np.copysign(out, x)


def _sigmoid(x):
    e = np.exp(-np.abs(x))        # never overflows
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


def _round_half_away(x):
    if _is_int(x):
        return x
    t = np.trunc(x)
    frac = x - t                  # exact
    away = np.where(np.abs(frac) >= 0.5, np.sign(x), 0).astype(x.dtype)
    return np.copysign(t + away, x)   # -0.3 rounds to -0.0, as C's round does


def _int_identity(func):
    return lambda x: x if _is_int(x) else func(x)


negative = _unary("negative", np.negative, "Elementwise negation.", _numeric_unary_rel)
abs = _unary("abs", np.absolute, "Elementwise absolute value.", _numeric_unary_rel)  # noqa: A001
exp = _unary("exp", np.exp, "Elementwise e**x.")
log = _unary("log", np.log, "Elementwise natural logarithm (``-inf`` at 0, nan below).")
sqrt = _unary("sqrt", np.sqrt, "Elementwise square root.")
rsqrt = _unary("rsqrt", lambda x: 1 / np.sqrt(x), "Elementwise ``1 / sqrt(x)``.")
sigmoid = _unary("sigmoid", _sigmoid, "Elementwise logistic function ``1 / (1 + exp(-x))``.")
tanh = _unary("tanh", np.tanh, "Elementwise hyperbolic tangent.")
erf = _unary("erf", _in_float64(_erf64), "Elementwise Gauss error function (GELU's building "
                                         "block), accurate to float64 rounding.")
round = _unary("round", _round_half_away, "Elementwise rounding to the nearest integer, halves "  # noqa: A001
                                          "away from zero; integers are kept.", _numeric_unary_rel)
floor = _unary("floor", _int_identity(np.floor), "Elementwise floor; integers are kept.",
               _numeric_unary_rel)
ceil = _unary("ceil", _int_identity(np.ceil), "Elementwise ceiling; integers are kept.",
              _numeric_unary_rel)
logical_not = _unary("logical_not", np.logical_not, "Elementwise NOT of a bool tensor.",
                     _bool_unary_rel)


# ---- clip ------------------------------------------------------------------------------------

def _as_float(value, name: str):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        return float(value)       # "inf" and "-inf" come back from the text format as strings
    except ValueError:
        raise ValueError(f"{name} must be a number, got {value!r}") from None


def _normalize_clip(a: dict) -> dict:
    a["a_min"], a["a_max"] = _as_float(a["a_min"], "a_min"), _as_float(a["a_max"], "a_max")
    if a["a_min"] is not None and a["a_max"] is not None and a["a_min"] > a["a_max"]:
        raise ValueError(f"a_min={a['a_min']} is greater than a_max={a['a_max']}")
    return a


@relation("IdentityRel")
def _clip_rel(types, attrs):
    """``IdentityRel`` once both bounds are given."""
    (t,) = types
    if not known(t):
        return None
    if attrs.a_min is None or attrs.a_max is None:
        fail("a_min and a_max must both be given")
    return require(t, "data", NUMERIC)


def _clip(x, attrs):
    lo, hi = attrs.a_min, attrs.a_max
    if _is_int(x):
        # integer tensors clip to the integers inside [a_min, a_max], within the dtype's range
        info = np.iinfo(x.dtype)
        lo = int(min(max(math.ceil(lo) if math.isfinite(lo) else lo, info.min), info.max))
        hi = int(max(min(math.floor(hi) if math.isfinite(hi) else hi, info.max), info.min))
    with np.errstate(all="ignore"):
        return np.asarray(np.clip(x, lo, hi)).astype(x.dtype, copy=False)


clip = register(OpDef(
    "clip", ("data",), _clip_rel, OpPattern.ELEMWISE, attrs={"a_min": None, "a_max": None},
    normalize=_normalize_clip, reference=_clip, compute=C.clip_compute, layout=elemwise_layout,
    doc="Clamp each element into ``[a_min, a_max]`` (both required; ReLU6 is "
        "``clip(x, a_min=0, a_max=6)``). Integer tensors clip to the integers inside the bounds."))


# ---- cast ------------------------------------------------------------------------------------

def _normalize_cast(a: dict) -> dict:
    if a["dtype"] not in (None, ""):
        a["dtype"] = check_dtype(a["dtype"])
    else:
        a["dtype"] = None
    return a


@relation("CastRel")
def _cast_rel(types, attrs):
    """``CastRel``: the input's shape with ``dtype``."""
    (t,) = types
    if not known(t):
        return None
    t = tensor(t, "data")
    if attrs.dtype is None:
        fail("dtype must be given")
    return TensorType(t.shape, attrs.dtype)


cast = register(OpDef(
    "cast", ("data",), _cast_rel, OpPattern.ELEMWISE, attrs={"dtype": None},
    normalize=_normalize_cast, reference=lambda x, attrs: convert_values(x, attrs.dtype),
    compute=C.cast_compute, layout=elemwise_layout,
    doc="Convert to ``dtype``; floats become integers by truncation toward zero (out of range "
        "as x86 converts: see ``relaybench.ir.types.convert_values``), and any nonzero value "
        "becomes True."))


@relation("CastLikeRel")
def _cast_like_rel(types, attrs):
    """``CastLikeRel``: the data's shape with the dtype of ``dtype_like``."""
    data, like = types
    if not (known(data) and known(like)):
        return None
    data, like = tensor(data, "data"), tensor(like, "dtype_like")
    return TensorType(data.shape, like.dtype)


cast_like = register(OpDef(
    "cast_like", ("data", "dtype_like"), _cast_like_rel, OpPattern.ELEMWISE,
    reference=lambda x, like, attrs: convert_values(x, like.dtype), compute=C.cast_compute,
    doc="Convert ``data`` to the dtype of ``dtype_like`` (whose values are not read)."))


# ---------------------------------------------------------------------------------------------
# where

@relation("WhereRel")
def _where_rel(types, attrs):
    """``WhereRel``: x and y of one dtype; the three shapes broadcast together."""
    if not all(known(t) for t in types):
        return None
    cond, x, y = (tensor(t, what) for t, what in zip(types, ("condition", "x", "y")))
    if x.dtype != y.dtype:
        fail(f"x and y have different dtypes: {x.dtype} and {y.dtype}")
    xy = TensorType(broadcast_shape(x, y), x.dtype)
    return TensorType(broadcast_shape(cond, xy), x.dtype)


where = register(OpDef(
    "where", ("condition", "x", "y"), _where_rel, OpPattern.BROADCAST,
    reference=lambda c, x, y, attrs: np.asarray(np.where(c.astype(bool, copy=False), x, y)),
    compute=C.where_compute,
    layout=broadcast_layout,
    doc="Choose ``x`` where ``condition`` is true (nonzero), ``y`` elsewhere; the three broadcast "
        "together."))


# ---------------------------------------------------------------------------------------------
# Initializers

def _normalize_init(a: dict) -> dict:
    shape = a["shape"]
    if not isinstance(shape, (list, tuple)):
        shape = (shape,)
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, int) or d < 0:
            raise ValueError(f"shape must be a list of non-negative ints, got {a['shape']!r}")
    a["shape"] = tuple(shape)
    if a["dtype"] not in (None, ""):
        a["dtype"] = check_dtype(a["dtype"])
    else:
        a["dtype"] = ""
    return a


@relation("InitOpRel")
def _init_rel(types, attrs):
    """``InitOpRel``: a tensor of the attrs' ``shape`` and ``dtype``."""
    return TensorType(attrs.shape, attrs.dtype or "float32")


@relation("FullRel")
def _full_rel(types, attrs):
    """``FullRel``: a scalar fill value; the attrs' shape, and their dtype or the fill value's."""
    (fill,) = types
    if not known(fill):
        return None
    fill = tensor(fill, "fill_value")
    if fill.ndim:
        fail(f"fill_value must be a scalar, got {fill}")
    return TensorType(attrs.shape, attrs.dtype or fill.dtype)


@relation("FullLikeRel")
def _full_like_rel(types, attrs):
    """``FullLikeRel``: the data's type; the fill value must be a scalar."""
    data, fill = types
    if not (known(data) and known(fill)):
        return None
    data, fill = tensor(data, "data"), tensor(fill, "fill_value")
    if fill.ndim:
        fail(f"fill_value must be a scalar, got {fill}")
    return data


_INIT_ATTRS = {"shape": (), "dtype": "float32"}

zeros = register(OpDef(
    "zeros", (), _init_rel, OpPattern.ELEMWISE, attrs=dict(_INIT_ATTRS), normalize=_normalize_init,
    reference=lambda attrs: np.zeros(attrs.shape, attrs.dtype), compute=C.constant_fill(0, "zeros"),
    doc="A tensor of ``shape`` and ``dtype`` filled with 0."))
ones = register(OpDef(
    "ones", (), _init_rel, OpPattern.ELEMWISE, attrs=dict(_INIT_ATTRS), normalize=_normalize_init,
    reference=lambda attrs: np.ones(attrs.shape, attrs.dtype), compute=C.constant_fill(1, "ones"),
    doc="A tensor of ``shape`` and ``dtype`` filled with 1."))
full = register(OpDef(
    "full", ("fill_value",), _full_rel, OpPattern.ELEMWISE, attrs={"shape": (), "dtype": ""},
    normalize=_normalize_init,
    reference=lambda fill, attrs: np.full(attrs.shape, fill, attrs.dtype or fill.dtype),
    compute=C.full_compute,
    doc="A tensor of ``shape`` filled with the scalar ``fill_value``, in ``dtype`` (by default the "
        "fill value's)."))
zeros_like = register(OpDef(
    "zeros_like", ("data",), identity_rel, OpPattern.ELEMWISE,
    reference=lambda x, attrs: np.zeros_like(x), compute=C.constant_fill(0, "zeros_like"),
    layout=elemwise_layout,
    doc="Zeros of the data's shape and dtype."))
ones_like = register(OpDef(
    "ones_like", ("data",), identity_rel, OpPattern.ELEMWISE,
    reference=lambda x, attrs: np.ones_like(x), compute=C.constant_fill(1, "ones_like"),
    layout=elemwise_layout,
    doc="Ones of the data's shape and dtype."))
full_like = register(OpDef(
    "full_like", ("data", "fill_value"), _full_like_rel, OpPattern.ELEMWISE,
    reference=lambda x, fill, attrs: np.full_like(x, fill), compute=C.full_compute,
    layout=broadcast_layout,
    doc="The scalar ``fill_value`` in the data's shape and dtype."))


# ---------------------------------------------------------------------------------------------
# More elementwise operators: isnan, isfinite, isinf, sign, trunc, copy; trunc_divide, trunc_mod

@relation("IdentityCompRel")
def _test_rel(types, attrs):
    """``IdentityCompRel``: a bool tensor of the (numeric) input's shape."""
    (t,) = types
    if not known(t):
        return None
    t = require(t, "data", NUMERIC)
    return TensorType(t.shape, "bool")


def _float_test(func, for_ints: bool):
    """``func`` on floats; every element ``for_ints`` on integers (never NaN, never infinite)."""
    return lambda x: func(x) if x.dtype.kind == "f" else np.full(x.shape, for_ints)


isnan = _unary("isnan", _float_test(np.isnan, False), "Elementwise: whether an element is NaN; a "
               "bool tensor.", _test_rel)
isfinite = _unary("isfinite", _float_test(np.isfinite, True), "Elementwise: whether an element is "
                  "neither NaN nor infinite; a bool tensor.", _test_rel)
isinf = _unary("isinf", _float_test(np.isinf, False), "Elementwise: whether an element is "
               "infinite; a bool tensor.", _test_rel)


def _sign(x):
    """TVM's sign: 1 above zero, -1 below, 0 otherwise (NaN and -0.0 give 0)."""
    one, zero = np.ones((), x.dtype), np.zeros((), x.dtype)
    if x.dtype.kind == "u":
        return np.where(x > 0, one, zero)
    return np.where(x > 0, one, np.where(x < 0, -one, zero)).astype(x.dtype)


sign = _unary("sign", _sign, "Elementwise sign: 1 above zero, -1 below, 0 otherwise (NaN gives 0, "
              "as TVM's select does).", _numeric_unary_rel)
trunc = _unary("trunc", _int_identity(np.trunc), "Elementwise rounding toward zero; integers are "
               "kept.", _numeric_unary_rel)
copy = _unary("copy", lambda x: x.copy(), "A copy of the data.", identity_rel)


def _trunc_divide(a, b):
    if _is_int(a):
        return _divide(a, b)
    return np.trunc(a / b)


trunc_divide = _binary("trunc_divide", _trunc_divide, "Elementwise quotient rounded toward zero "
                       "(integers as ``divide``; floats ``trunc(lhs / rhs)``).")
trunc_mod = _binary("trunc_mod", np.fmod, "Elementwise remainder of truncated division, with the "
                    "sign of ``lhs`` (``mod``).")


# ---------------------------------------------------------------------------------------------
# Trigonometric and hyperbolic functions, bitwise operators (Relay's sin ... atanh, bitwise_*)

__all__ += ["sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
            "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"]


def _math_compute(name: str, formula):
    """A kernel for a float unary op from the loop IR's intrinsic of the same name (the C
    library's function in compiled code: ``asinf``/``asin``, OpenCL's builtin)."""
    if formula is None:
        return None
    return C.elementwise(name, lambda x, attrs: formula(x))


def _math(name: str, func, formula, doc: str):
    return register(OpDef(name, ("data",), _math_unary_rel, OpPattern.ELEMWISE,
                          reference=_quiet(func), compute=_math_compute(name, formula),
                          layout=elemwise_layout, doc=doc))


def _intrin(name, x):
    from ..te import loop_ir
    return loop_ir.call(name, x)


sin = _math("sin", np.sin, lambda x: _intrin("sin", x), "Elementwise sine.")
cos = _math("cos", np.cos, lambda x: _intrin("cos", x), "Elementwise cosine.")
tan = _math("tan", np.tan, lambda x: _intrin("tan", x), "Elementwise tangent.")
asin = _math("asin", np.arcsin, lambda x: _intrin("asin", x),
             "Elementwise arcsine (nan outside [-1, 1]).")
acos = _math("acos", np.arccos, lambda x: _intrin("acos", x),
             "Elementwise arccosine (nan outside [-1, 1]).")
atan = _math("atan", np.arctan, lambda x: _intrin("atan", x), "Elementwise arctangent.")
sinh = _math("sinh", np.sinh, lambda x: _intrin("sinh", x), "Elementwise hyperbolic sine.")
cosh = _math("cosh", np.cosh, lambda x: _intrin("cosh", x), "Elementwise hyperbolic cosine.")
asinh = _math("asinh", np.arcsinh, lambda x: _intrin("asinh", x),
              "Elementwise inverse hyperbolic sine.")
acosh = _math("acosh", np.arccosh, lambda x: _intrin("acosh", x),
              "Elementwise inverse hyperbolic cosine (nan below 1).")
atanh = _math("atanh", np.arctanh, lambda x: _intrin("atanh", x),
              "Elementwise inverse hyperbolic tangent (nan outside [-1, 1]).")

# The loop IR has no bitwise operators yet: these ops have no kernel, so they are OPAQUE (FuseOps
# leaves each alone) and a build runs them on the host from their numpy references.
_bitwise_rel = _broadcast_relation((INT_DTYPES | {"bool"}, "an integer or bool "))


def _bitwise(name: str, func, doc: str, inputs=("lhs", "rhs"), rel=_bitwise_rel):
    return register(OpDef(name, inputs, rel, OpPattern.OPAQUE, reference=_quiet(func),
                          layout=broadcast_layout if len(inputs) == 2 else elemwise_layout,
                          doc=doc + " (No kernel yet: a build runs it on the host.)"))


bitwise_and = _bitwise("bitwise_and", np.bitwise_and, "Elementwise ``lhs & rhs`` of integers.")
bitwise_or = _bitwise("bitwise_or", np.bitwise_or, "Elementwise ``lhs | rhs`` of integers.")
bitwise_xor = _bitwise("bitwise_xor", np.bitwise_xor, "Elementwise ``lhs ^ rhs`` of integers.")
bitwise_not = _bitwise("bitwise_not", np.invert, "Elementwise ``~x`` of integers (every bit "
                       "flipped).", ("data",),
                       _unary_relation((INT_DTYPES | {"bool"}, "an integer or bool ")))


# ---------------------------------------------------------------------------------------------
# reinterpret (Relay's bit cast)

__all__ += ["reinterpret"]


def _normalize_reinterpret(a: dict) -> dict:
    if a["dtype"] is None:
        raise ValueError("dtype is not given")
    a["dtype"] = check_dtype(a["dtype"])
    return a


def _reinterpret_rel(types, attrs):
    (t,) = types
    if not known(t):
        return None
    t = tensor(t, "data")
    if np.dtype(t.dtype).itemsize != np.dtype(attrs.dtype).itemsize or "bool" in (t.dtype, attrs.dtype):
        fail(f"cannot reinterpret {t.dtype} as {attrs.dtype}: the element sizes differ (or one is "
             f"bool)")
    return TensorType(t.shape, attrs.dtype)


_reinterpret_rel.relation_name = "ReinterpretRel"

reinterpret = register(OpDef(
    "reinterpret", ("data",), _reinterpret_rel, OpPattern.OPAQUE, attrs={"dtype": None},
    normalize=_normalize_reinterpret,
    reference=lambda x, attrs: np.array(x, order="C").view(attrs.dtype),
    doc="The same bits read as another dtype of the same element size (``float32`` as "
        "``int32``); no value is converted. (No kernel yet: OPAQUE, a build runs it on the "
        "host.)"))
