"""Random Relay programs, well typed by construction, for differential testing.

:func:`random_program` (``seed`` -> :class:`RandomProgram`) grows a dataflow program of 3 to 25
operator calls over every operator that has a tensor-expression compute. The operators come from
one table, :data:`OP_GENERATORS` (op name -> the function that makes one well-typed call of it,
attrs included); the registry's ops with a compute that the table leaves out are listed, with the
reason, in :data:`NOT_GENERATED`, and :func:`uncovered_ops` checks the two against the registry.

Values are kept exact where the comparison needs them exact. Every leaf (a parameter of
``@main`` or a bound constant) takes small values from a *domain* (:data:`DOMAINS`: halves in
[-4, 4], positive halves, powers of two, shift amounts, in-range indices) and the domain is written
in the parameter's name (``%pos_3``, ``%nz_w5``), so the inputs of a program saved as text are
known again from the text alone (:func:`input_values`). The generator tracks for every value a
bound on its magnitude and whether it is still exactly representable; an operator whose result
jumps on a rounding difference (``floor``, comparisons, a cast to an integer, ``argmax``,
``floor_mod``, ...) only takes exact operands, and one with a restricted domain (``log``,
``sqrt``, a divisor) takes a fresh leaf of a safe domain. So a difference between two executors
is a bug, never rounding.

>>> from relaybench.testing import random_program
>>> prog = random_program(7)
>>> 3 <= len(prog.ops) <= 25
True
>>> from relaybench.ir.structural import structural_equal
>>> structural_equal(prog.mod, random_program(7).mod)
True
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from ..ir.expr import Call, Constant, Function, Op, Tuple, TupleGetItem, Var
from ..ir.module import IRModule
from ..ir.types import TensorType, TupleType

__all__ = ["random_program", "RandomProgram", "GeneratorError", "OP_GENERATORS", "NOT_GENERATED",
           "uncovered_ops", "DOMAINS", "domain_of", "leaf_values", "input_values"]


class GeneratorError(Exception):
    """The generator made a call its op's type relation rejects: a bug of the generator."""


# ---------------------------------------------------------------------------------------------
# Leaf domains: what values a parameter or constant holds, read back from its name.

def _halves(rng, shape, lo, hi):
    return rng.integers(2 * lo, 2 * hi + 1, size=shape) / 2.0


def _x(rng, shape, dtype, limit):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("float"):
        return _halves(rng, shape, -4, 4)
    lo = 0 if dtype.startswith("uint") else -8
    return rng.integers(lo, 9, size=shape)


def _pos(rng, shape, dtype, limit):
    if dtype.startswith("float"):
        return rng.integers(1, 9, size=shape) / 2.0
    return rng.integers(1, 9, size=shape)


def _nz(rng, shape, dtype, limit):
    if dtype.startswith("float"):
        mag = np.array([0.5, 1.0, 2.0, 4.0])[rng.integers(0, 4, size=shape)]
    else:
        mag = rng.integers(1, 5, size=shape)
    if dtype.startswith("uint"):
        return mag
    return np.where(rng.random(shape) < 0.5, -mag, mag)


def _sh(rng, shape, dtype, limit):
    return rng.integers(0, 4, size=shape)


def _idx(rng, shape, dtype, limit):
    return rng.integers(0, max(int(limit or 1), 1), size=shape)


def _pw(rng, shape, dtype, limit):
    return np.array([-2.0, -1.0, 0.0, 0.5, 1.0, 2.0, 3.0])[rng.integers(0, 7, size=shape)]


DOMAINS: dict = {
    "x": (_x, "halves in [-4, 4] (floats), integers in [-8, 8] ([0, 8] unsigned), fair bools"),
    "pos": (_pos, "positive: halves in [0.5, 4], integers in [1, 8]"),
    "nz": (_nz, "nonzero divisors: +-{0.5, 1, 2, 4} (floats, so quotients stay exact), +-[1, 4]"),
    "sh": (_sh, "shift amounts in [0, 3]"),
    "idx": (_idx, "indices in [0, N) for a name idxN_..."),
    "pw": (_pw, "exponents in {-2, -1, 0, 0.5, 1, 2, 3}"),
}
"""Leaf domains by name: (values(rng, shape, dtype, limit), description)."""

# a leaf's name: domain, optional limit, '_', 'w' for a weight, a number
_NAME = re.compile(r"^([a-z]+?)(\d*)_(w?)(\d+)$")

# per-domain magnitude bound and fraction bits (for the exactness bookkeeping)
_DOMAIN_BOUND = {"x": (8.0, 1), "pos": (8.0, 1), "nz": (4.0, 1), "sh": (3.0, 0), "idx": (8.0, 0),
                 "pw": (3.0, 1)}


def domain_of(name: str) -> tuple:
    """``(domain, limit, is_weight)`` read from a leaf's name; ``("x", None, False)`` for a
    name that does not follow the convention (a hand-written program's ``%data``)."""
    m = _NAME.match(name)
    if m is None or m.group(1) not in DOMAINS:
        return "x", None, False
    return m.group(1), int(m.group(2)) if m.group(2) else None, bool(m.group(3))


def leaf_values(domain: str, shape, dtype: str, rng, limit=None) -> np.ndarray:
    """An array of ``shape`` and ``dtype`` drawn from ``domain`` (a key of :data:`DOMAINS`)."""
    values = DOMAINS[domain][0](rng, tuple(shape), dtype, limit)
    return np.asarray(values).astype(dtype)


def input_values(mod_or_func, seed: int = 0) -> dict:
    """Values for every parameter of ``@main``: name -> array, from the domain its name gives.

    The same program and ``seed`` give the same arrays. Raises ValueError naming a parameter
    whose type is not a static tensor type.
    """
    func = mod_or_func["main"] if isinstance(mod_or_func, IRModule) else mod_or_func
    rng = np.random.default_rng(seed)
    out = {}
    for p in func.params:
        t = p.type_annotation if p.type_annotation is not None else p.type_or_none
        if not isinstance(t, TensorType) or not all(isinstance(d, int) for d in t.shape):
            raise ValueError(f"parameter %{p.name_hint}: needs a static tensor type, has {t}")
        domain, limit, _ = domain_of(p.name_hint)
        out[p.name_hint] = leaf_values(domain, t.shape, t.dtype, rng, limit)
    return out


# ---------------------------------------------------------------------------------------------
# Values under construction

_MANTISSA = {"float16": 11, "float32": 24, "float64": 53}
FLOATS = ("float32", "float32", "float32", "float32", "float64")
INTS = ("int32", "int32", "int32", "int64", "int8", "uint8")


def _is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def _is_int(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


@dataclass
class Value:
    """A tensor value of the program being grown: its expression and type, a bound on the
    magnitude of its elements, its fraction bits, and whether it is exact (every element the
    exact result of the operations on the leaves)."""

    expr: object
    type: TensorType
    bound: float = 8.0
    frac: int = 1
    exact: bool = True
    layout: str = ""
    uses: int = 0

    @property
    def shape(self) -> tuple:
        return tuple(self.type.shape)

    @property
    def dtype(self) -> str:
        return self.type.dtype

    @property
    def ndim(self) -> int:
        return len(self.type.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


def _exact_after(dtype: str, exact: bool, bound: float, frac: int) -> bool:
    """Whether a float value of this magnitude and granularity is still exactly representable."""
    if not _is_float(dtype):
        return exact
    if not exact or not math.isfinite(bound):
        return False
    return bound * 2.0 ** frac < 2.0 ** (_MANTISSA.get(dtype, 24) - 2)


@dataclass
class RandomProgram:
    """What :func:`random_program` returns: the module, the bound weights given as ``params``
    (name -> array, to pass to ``rb.build(..., params=...)``), the ``inputs`` of the other
    parameters, and the op calls in order. Unpacks as ``mod, params``."""

    seed: int
    mod: IRModule
    params: dict
    inputs: dict
    ops: list = field(default_factory=list)

    def __iter__(self):
        return iter((self.mod, self.params))

    def all_inputs(self) -> dict:
        return {**self.inputs, **self.params}


class _Grower:
    """The state of one program being grown: the rng, the values so far and the leaves."""

    def __init__(self, seed: int, max_dim: int, constant_rate: float, weight_rate: float):
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.max_dim = max_dim
        self.constant_rate = constant_rate
        self.weight_rate = weight_rate
        self.values: list = []
        self.params: list = []
        self.ops: list = []
        self.leaf_count = 0

    # -- random choices
    def choice(self, options):
        return options[int(self.rng.integers(0, len(options)))]

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def int(self, lo: int, hi: int) -> int:
        return int(self.rng.integers(lo, hi + 1))

    def dim(self, lo: int = 1, hi: int = 8) -> int:
        d = self.int(lo, hi)
        return max(lo, min(d, self.max_dim))

    def shape(self, lo_rank: int = 0, hi_rank: int = 4) -> tuple:
        return tuple(self.dim() for _ in range(self.int(lo_rank, hi_rank)))

    def float_dtype(self) -> str:
        return self.choice(FLOATS)

    def numeric_dtype(self) -> str:
        return self.choice(FLOATS + INTS[:3]) if self.chance(0.8) else self.choice(INTS)

    # -- leaves
    def leaf(self, shape, dtype: str, domain: str = "x", limit=None, weight: bool = False,
             constant: Optional[bool] = None) -> Value:
        """A fresh leaf: a parameter of @main (an input, or a weight when ``weight``) or, at the
        constant rate, a bound constant."""
        shape = tuple(int(d) for d in shape)
        n = self.leaf_count
        self.leaf_count += 1
        bound, frac = _DOMAIN_BOUND[domain]
        if limit is not None:
            bound = float(limit)
        if constant is None:
            constant = self.chance(self.constant_rate)
        if constant:
            data = leaf_values(domain, shape, dtype, np.random.default_rng([self.seed, n]), limit)
            expr = Constant(np.array(data, order="C"))
        else:
            is_weight = weight and self.chance(self.weight_rate)
            name = f"{domain}{limit if limit is not None else ''}_{'w' if is_weight else ''}{n}"
            expr = Var(name, TensorType(shape, dtype))
            self.params.append(expr)
        return Value(expr, TensorType(shape, dtype), bound, frac, True)

    def pick(self, pred: Callable[[Value], bool] = lambda v: True, fresh: float = 0.0):
        """A value of the program that satisfies ``pred`` (the least used of a few candidates),
        or None (always None with probability ``fresh``)."""
        if fresh and self.chance(fresh):
            return None
        found = [v for v in self.values if pred(v)]
        if not found:
            return None
        few = [found[int(self.rng.integers(0, len(found)))] for _ in range(2)]
        return min(few, key=lambda v: v.uses)

    def operand(self, pred, make: Callable[[], Value], fresh: float = 0.15) -> Value:
        v = self.pick(pred, fresh)
        return v if v is not None else make()

    def tensor(self, pred=lambda v: True, shape=None, dtype=None, fresh: float = 0.15,
               domain: str = "x") -> Value:
        """A value satisfying ``pred``, or a fresh leaf of ``shape``/``dtype``."""
        def make():
            return self.leaf(shape if shape is not None else self.shape(),
                             dtype if dtype is not None else self.numeric_dtype(), domain)
        return self.operand(pred, make, fresh)

    # -- calls
    def call(self, name: str, args: list, attrs: Optional[dict] = None, *, bound=None, frac=None,
             exact=None, layout: str = ""):
        """Add the call ``name(args, **attrs)``; returns its Value (a list of Values, one per
        field, for a tuple-valued op, each read with TupleGetItem)."""
        from ..op.registry import get_opdef
        opdef = get_opdef(name)
        exprs, types = [], []
        for a in args:
            if isinstance(a, (list, tuple)):
                for v in a:
                    v.uses += 1
                exprs.append(Tuple([v.expr for v in a]))
                types.append(TupleType([v.type for v in a]))
            else:
                a.uses += 1
                exprs.append(a.expr)
                types.append(a.type)
        call_attrs = opdef.make_attrs(attrs or {})
        try:
            out = opdef.type_rel(types, call_attrs)
        except Exception as err:
            raise GeneratorError(f"{name}{tuple(str(t) for t in types)} {dict(attrs or {})}: "
                                 f"{err}") from err
        if isinstance(out, (list, tuple)) and not isinstance(out, (TensorType, TupleType)):
            out = out[-1]
        if out is None:
            raise GeneratorError(f"{name}: the relation could not decide the output type")
        expr = Call(Op.get(name), exprs, call_attrs)
        self.ops.append(name)
        flat = [a for x in args for a in (x if isinstance(x, (list, tuple)) else [x])]
        if bound is None:
            bound = max((a.bound for a in flat), default=1.0)
        if frac is None:
            frac = max((a.frac for a in flat), default=0)
        if exact is None:
            exact = all(a.exact for a in flat)

        def value(e, t):
            if not all(isinstance(d, int) and d > 0 for d in t.shape):
                raise GeneratorError(f"{name}: empty or non-static output {t}")
            if t.dtype == "bool":
                return Value(e, t, 1.0, 0, True, layout)
            return Value(e, t, bound, frac, _exact_after(t.dtype, exact, bound, frac), layout)

        if isinstance(out, TupleType):
            fields = [value(TupleGetItem(expr, i), t) for i, t in enumerate(out.fields)]
            return fields
        return value(expr, out)

    def add(self, v):
        """Make ``v`` (a Value or a list of them) available to later calls."""
        for x in (v if isinstance(v, list) else [v]):
            self.values.append(x)
        return v


# ---------------------------------------------------------------------------------------------
# Predicates and shape helpers

def _num(v: Value) -> bool:
    return v.dtype != "bool"


def _flt(v: Value) -> bool:
    return _is_float(v.dtype)


def _exact_num(v: Value) -> bool:
    return v.dtype != "bool" and v.exact


def _broadcast_partner(g: _Grower, v: Value) -> tuple:
    """A shape that broadcasts with ``v``'s: a suffix of it with some dims made 1, sometimes a
    longer one, sometimes rank 0."""
    r = g.int(0, 3)
    if r == 0:
        return ()
    if r == 3 and v.ndim < 4:    # longer: new leading dims (and v's unit dims widened)
        lead = tuple(g.dim(1, 3) for _ in range(g.int(1, 4 - v.ndim)))
        return lead + tuple(g.dim(1, 3) if d == 1 and g.chance(0.5) else d for d in v.shape)
    keep = g.int(0, v.ndim)
    tail = v.shape[v.ndim - keep:]
    return tuple(1 if g.chance(0.3) else d for d in tail)


def _binary_operands(g: _Grower, pred, rhs_domain: Optional[str] = None,
                     rhs_dtype_pred=None) -> tuple:
    lhs = g.tensor(pred, dtype=None, fresh=0.1)
    if lhs.dtype == "bool" or not pred(lhs):
        lhs = g.leaf(g.shape(), g.numeric_dtype())
    shape = _broadcast_partner(g, lhs)
    if rhs_domain is not None:
        rhs = g.leaf(shape, lhs.dtype, rhs_domain)
    else:
        rhs = g.pick(lambda v: v.dtype == lhs.dtype and pred(v) and v is not lhs
                     and _broadcasts(v.shape, lhs.shape), fresh=0.4)
        if rhs is None:
            rhs = g.leaf(shape, lhs.dtype, constant=g.chance(0.5) if not shape else None)
    if rhs_domain is None and g.chance(0.3):
        lhs, rhs = rhs, lhs
    return lhs, rhs


def _broadcasts(a: tuple, b: tuple) -> bool:
    for x, y in zip(reversed(a), reversed(b)):
        if x != y and x != 1 and y != 1:
            return False
    return True


def _factor_shape(g: _Grower, size: int) -> tuple:
    """A random shape with ``size`` elements, each dim at most 8 when the prime factors allow
    (they do for products of dims up to 8)."""
    primes, rest, p = [], size, 2
    while rest > 1 and p * p <= rest:
        while rest % p == 0:
            primes.append(p)
            rest //= p
        p += 1
    if rest > 1:
        primes.append(rest)
    g.rng.shuffle(primes)
    dims = []
    for q in primes:
        if dims and dims[-1] * q <= 8 and g.chance(0.6):
            dims[-1] *= q
        else:
            dims.append(q)
    while len(dims) < 4 and g.chance(0.25):   # unit dims
        dims.insert(g.int(0, len(dims)), 1)
    if size == 1 and g.chance(0.3):
        return ()
    return tuple(dims)


def _axis_list(g: _Grower, ndim: int) -> list:
    axes = [a for a in range(ndim) if g.chance(0.5)]
    return [a - ndim if g.chance(0.3) else a for a in axes]


# ---------------------------------------------------------------------------------------------
# One generator per op (or family). Each takes the grower, adds one call (or a short chain
# whose last call is the op) and returns the new Value(s).

def _gen_unary_float(name, domain=None, exp_like=False):
    def gen(g: _Grower):
        if domain is not None:
            x = g.leaf(g.shape(), g.float_dtype(), domain)
        else:
            limit = 6.0 if exp_like else float("inf")
            x = g.tensor(lambda v: _flt(v) and v.bound <= limit,
                         dtype=g.float_dtype())
        return g.call(name, [x], exact=False, bound=60.0 if exp_like else max(x.bound, 4.0))
    return gen


def _gen_unary_keep(name):
    """negative, abs: any numeric dtype, exact."""
    def gen(g: _Grower):
        x = g.tensor(_num)
        return g.call(name, [x])
    return gen


def _gen_rounding(name):
    """round, floor, ceil: a float operand must be exact (halves make round's ties count)."""
    def gen(g: _Grower):
        x = g.tensor(lambda v: _exact_num(v), dtype=g.float_dtype())
        return g.call(name, [x])
    return gen


def _gen_logical_not(g: _Grower):
    x = g.tensor(lambda v: v.dtype == "bool", dtype="bool")
    return g.call("logical_not", [x])


def _gen_arith(name, exact_only=False):
    def gen(g: _Grower):
        pred = _exact_num if exact_only else _num
        lhs, rhs = _binary_operands(g, pred)
        if name == "multiply":
            return g.call(name, [lhs, rhs], bound=lhs.bound * rhs.bound, frac=lhs.frac + rhs.frac)
        if name in ("add", "subtract"):
            return g.call(name, [lhs, rhs], bound=lhs.bound + rhs.bound)
        return g.call(name, [lhs, rhs])
    return gen


def _gen_division(name):
    """divide, floor_divide, mod, floor_mod: the divisor is a fresh nonzero leaf (a power of two
    for floats, so that quotients stay exact); a float numerator of the floor/mod kinds is exact."""
    def gen(g: _Grower):
        needs_exact = name != "divide"

        def ok(v: Value) -> bool:
            # no integer numerator that may have wrapped to the dtype's minimum (whose
            # quotient by -1 overflows)
            limit = np.iinfo(v.dtype).max if _is_int(v.dtype) else 2 ** 20
            return _num(v) and (v.exact or not needs_exact) and v.bound < limit
        lhs = g.tensor(ok, fresh=0.1)
        if not ok(lhs):
            lhs = g.leaf(lhs.shape, lhs.dtype)
        rhs = g.leaf(_broadcast_partner(g, lhs), lhs.dtype, "nz")
        frac = lhs.frac + 1 if name == "divide" else lhs.frac
        return g.call(name, [lhs, rhs], bound=lhs.bound * 2, frac=frac)
    return gen


def _gen_power(g: _Grower):
    dtype = g.float_dtype()
    base = g.leaf(g.shape(), dtype, "pos")
    expo = g.leaf(_broadcast_partner(g, base), dtype, "pw")
    return g.call("power", [base, expo], exact=False, bound=64.0)


def _gen_compare(name):
    def gen(g: _Grower):
        pred = (lambda v: v.exact) if name in ("equal", "not_equal") else _exact_num
        lhs, rhs = _binary_operands(g, pred)
        return g.call(name, [lhs, rhs])
    return gen


def _gen_logical(name):
    def gen(g: _Grower):
        lhs = g.tensor(lambda v: v.dtype == "bool", dtype="bool")
        rhs = g.pick(lambda v: v.dtype == "bool" and _broadcasts(v.shape, lhs.shape), fresh=0.3)
        if rhs is None:
            rhs = g.leaf(_broadcast_partner(g, lhs), "bool")
        return g.call(name, [lhs, rhs])
    return gen


def _gen_shift(name):
    def gen(g: _Grower):
        lhs = g.tensor(lambda v: _is_int(v.dtype), dtype=g.choice(INTS))
        rhs = g.leaf(_broadcast_partner(g, lhs), lhs.dtype, "sh")
        return g.call(name, [lhs, rhs], bound=lhs.bound * 8)
    return gen


def _gen_where(g: _Grower):
    cond = g.tensor(lambda v: v.dtype == "bool" or _exact_num(v), dtype="bool")
    x = g.pick(lambda v: _num(v) and _broadcasts(v.shape, cond.shape), fresh=0.2)
    if x is None:
        x = g.leaf(_broadcast_partner(g, cond), g.numeric_dtype())
    both = np.broadcast_shapes(cond.shape, x.shape)
    y = g.pick(lambda v: v.dtype == x.dtype and _broadcasts(v.shape, both) and v is not x,
               fresh=0.3)
    if y is None:
        y = g.leaf(both[len(both) - g.int(0, len(both)):], x.dtype)
    return g.call("where", [cond, x, y], bound=max(x.bound, y.bound), frac=max(x.frac, y.frac),
                  exact=x.exact and y.exact)


def _gen_clip(g: _Grower):
    x = g.tensor(_num)
    lo = g.int(-8, 4) / 2.0
    hi = lo + g.int(0, 8) / 2.0
    if x.dtype == "uint8":
        lo, hi = abs(lo), abs(lo) + hi - lo
    return g.call("clip", [x], {"a_min": lo, "a_max": hi})


def _gen_cast(g: _Grower):
    x = g.tensor(lambda v: True)
    to = g.choice(FLOATS + INTS + ("bool",))
    if (_is_int(to) or to == "bool") and not x.exact:
        x = g.leaf(x.shape, x.dtype)
    if _is_int(to) and x.dtype != "bool" and x.bound > 100:
        x = g.leaf(x.shape, x.dtype)
    return g.call("cast", [x], {"dtype": to})


def _gen_cast_like(g: _Grower):
    x = g.tensor(lambda v: v.exact and v.bound <= 100)
    like = g.tensor(lambda v: True, fresh=0.3)
    return g.call("cast_like", [x, like])


def _gen_relu(g: _Grower):
    return g.call("nn.relu", [g.tensor(_num, fresh=0.1)])


def _gen_leaky_relu(g: _Grower):
    x = g.tensor(_flt, dtype=g.float_dtype())
    alpha = g.choice([0.25, 0.5, 0.1])
    return g.call("nn.leaky_relu", [x], {"alpha": alpha}, frac=x.frac + 2,
                  exact=x.exact and alpha != 0.1)


def _gen_prelu(g: _Grower):
    x = g.tensor(lambda v: _flt(v) and v.ndim >= 1, shape=g.shape(1, 4), dtype=g.float_dtype())
    axis = g.int(-x.ndim, x.ndim - 1)
    alpha = g.leaf((x.shape[axis],), x.dtype, weight=True)
    return g.call("nn.prelu", [x, alpha], {"axis": axis}, bound=x.bound * alpha.bound,
                  frac=x.frac + alpha.frac)


def _gen_bias_add(g: _Grower):
    x = g.tensor(lambda v: _num(v) and v.ndim >= 1, shape=g.shape(1, 4))
    axis = g.int(-x.ndim, x.ndim - 1)
    bias = g.leaf((x.shape[axis],), x.dtype, weight=True)
    return g.call("nn.bias_add", [x, bias], {"axis": axis}, bound=x.bound + bias.bound)


def _gen_full(g: _Grower):
    dtype = g.choice(FLOATS + INTS + ("bool",))
    fill = g.leaf((), g.choice(FLOATS + INTS[:1]) if dtype != "bool" else "bool")
    if _is_int(dtype) and not _is_int(fill.dtype):
        fill = g.leaf((), "int32")
    return g.call("full", [fill], {"shape": g.shape(), "dtype": dtype})


def _gen_full_like(g: _Grower):
    x = g.tensor(_num)
    fill = g.leaf((), x.dtype)
    return g.call("full_like", [x, fill])


def _gen_constant_fill(name):
    def gen(g: _Grower):
        return g.call(name, [], {"shape": g.shape(), "dtype": g.choice(FLOATS + INTS + ("bool",))},
                      bound=1.0, frac=0, exact=True)
    return gen


def _gen_like(name):
    def gen(g: _Grower):
        return g.call(name, [g.tensor(lambda v: True)], bound=1.0, frac=0, exact=True)
    return gen


# -- transforms

def _gen_reshape(g: _Grower):
    x = g.tensor(lambda v: True)
    new = list(_factor_shape(g, x.size))
    if new and g.chance(0.3):
        new[g.int(0, len(new) - 1)] = -1
    k = 0
    while k < min(len(new), x.ndim) and new[k] == x.shape[k] and g.chance(0.3):
        new[k] = 0
        k += 1
    if k < x.ndim and g.chance(0.1) and -1 not in new:  # -2: copy the remaining dims
        new = [0] * k + [-2]
    return g.call("reshape", [x], {"newshape": tuple(new)})


def _gen_reshape_like(g: _Grower):
    x = g.tensor(lambda v: True)
    like = g.pick(lambda v: v.size == x.size and v is not x, fresh=0.5)
    if like is None:
        like = g.leaf(_factor_shape(g, x.size), g.choice(FLOATS + INTS))
    return g.call("reshape_like", [x, like])


def _gen_transpose(g: _Grower):
    x = g.tensor(lambda v: v.ndim >= 1, shape=g.shape(1, 4))
    if g.chance(0.2):
        return g.call("transpose", [x], {"axes": None})
    axes = [int(a) for a in g.rng.permutation(x.ndim)]
    axes = [a - x.ndim if g.chance(0.2) else a for a in axes]
    return g.call("transpose", [x], {"axes": tuple(axes)})


def _gen_tile(g: _Grower):
    x = g.tensor(lambda v: v.ndim <= 3 and v.size <= 64, shape=g.shape(0, 3))
    reps = tuple(g.int(1, 3) for _ in range(g.int(1, x.ndim + 1)))
    return g.call("tile", [x], {"reps": reps})


def _gen_repeat(g: _Grower):
    x = g.tensor(lambda v: v.ndim >= 1 and v.size <= 128, shape=g.shape(1, 3))
    return g.call("repeat", [x], {"repeats": g.int(1, 3), "axis": g.int(-x.ndim, x.ndim - 1)})


def _gen_concatenate(g: _Grower):
    x = g.tensor(lambda v: v.ndim >= 1, shape=g.shape(1, 4))
    axis = g.int(0, x.ndim - 1)
    parts = [x]
    for _ in range(g.int(1, 2)):
        other = g.pick(lambda v: v.dtype == x.dtype and v.ndim == x.ndim and all(
            a == b for i, (a, b) in enumerate(zip(v.shape, x.shape)) if i != axis), fresh=0.4)
        if other is None:
            shape = list(x.shape)
            shape[axis] = g.dim(1, 4)
            other = g.leaf(shape, x.dtype)
        parts.append(other)
    g.rng.shuffle(parts)
    if g.chance(0.3):
        axis -= x.ndim
    return g.call("concatenate", [parts], {"axis": axis})


def _gen_stack(g: _Grower):
    x = g.tensor(lambda v: v.ndim <= 3, shape=g.shape(0, 3))
    parts = [x]
    for _ in range(g.int(1, 2)):
        other = g.pick(lambda v: v.dtype == x.dtype and v.shape == x.shape and v is not x,
                       fresh=0.5)
        parts.append(other if other is not None else g.leaf(x.shape, x.dtype))
    return g.call("stack", [parts], {"axis": g.int(-x.ndim - 1, x.ndim)})


def _gen_split(g: _Grower):
    x = g.tensor(lambda v: v.ndim >= 1 and max(v.shape) >= 2, shape=(g.dim(2, 8),) + g.shape(0, 2))
    axes = [a for a in range(x.ndim) if x.shape[a] >= 2] or [0]
    axis = g.choice(axes)
    d = x.shape[axis]
    if g.chance(0.5):
        sections = g.choice([s for s in range(1, d + 1) if d % s == 0])
        ios = sections
    else:
        cuts = sorted({g.int(1, max(1, d - 1)) for _ in range(g.int(1, 3))})
        ios = tuple(c for c in cuts if 0 < c < d) or (1,)
    if g.chance(0.3):
        axis -= x.ndim
    return g.call("split", [x], {"indices_or_sections": ios, "axis": axis})


def _gen_strided_slice(g: _Grower):
    x = g.tensor(lambda v: v.ndim >= 1, shape=g.shape(1, 4))
    use_axes = g.chance(0.3)
    axes = sorted({g.int(0, x.ndim - 1) for _ in range(g.int(1, x.ndim))}) if use_axes \
        else list(range(x.ndim))
    size_mode = g.chance(0.15)
    begin, end, strides = [], [], []
    for a in axes:
        d = x.shape[a]
        if size_mode:
            b = g.int(0, d - 1)
            begin.append(b)
            end.append(g.choice([-1, g.int(1, d - b)]))
            strides.append(1)
            continue
        s = g.choice([1, 1, 2, 3, -1, -2])
        if s > 0:
            b = g.int(0, d - 1)
            e = g.int(b + 1, d)
        else:
            b = g.int(0, d - 1)
            e = g.int(-1, b - 1) if b >= 1 else -1
            if e == -1:
                e = -d - 1   # past the start: the slice runs down to index 0
        if g.chance(0.3) and b > 0:
            b -= d
        begin.append(b)
        end.append(e)
        strides.append(s)
    attrs = {"begin": tuple(begin), "end": tuple(end), "strides": tuple(strides),
             "slice_mode": "size" if size_mode else "end"}
    if use_axes:
        attrs["axes"] = tuple(axes)
    return g.call("strided_slice", [x], attrs)


def _gen_take(g: _Grower):
    x = g.tensor(lambda v: v.ndim >= 1 and v.ndim <= 3, shape=g.shape(1, 3))
    axis = None if g.chance(0.25) else g.int(-x.ndim, x.ndim - 1)
    extent = x.size if axis is None else x.shape[axis]
    mode = g.choice(["clip", "wrap", "fast"])
    ishape = g.shape(0, 2)
    itype = g.choice(["int32", "int32", "int64"])
    if mode == "fast":
        idx = g.leaf(ishape, itype, "idx", limit=extent)
    else:
        idx = g.pick(lambda v: _is_int(v.dtype) and v.ndim <= 2 and v.exact and v.bound <= 64,
                     fresh=0.6) or g.leaf(ishape, itype)
    return g.call("take", [x, idx], {"axis": axis, "mode": mode})


def _gen_squeeze(g: _Grower):
    x = g.tensor(lambda v: 1 in v.shape, shape=tuple(g.choice([1, g.dim()]) for _ in range(3)))
    units = [a for a, d in enumerate(x.shape) if d == 1]
    if not units or g.chance(0.3):
        return g.call("squeeze", [x], {"axis": None})
    axes = [a - x.ndim if g.chance(0.3) else a for a in units if g.chance(0.7)] or [units[0]]
    return g.call("squeeze", [x], {"axis": tuple(axes)})


def _gen_expand_dims(g: _Grower):
    x = g.tensor(lambda v: v.ndim <= 3, shape=g.shape(0, 3))
    return g.call("expand_dims", [x], {"axis": g.int(-x.ndim - 1, x.ndim),
                                       "num_newaxis": g.int(0, 2)})


def _gen_broadcast_to(g: _Grower):
    x = g.tensor(lambda v: v.ndim <= 3, shape=g.shape(0, 3))
    shape = tuple(g.dim(1, 4) if d == 1 and g.chance(0.6) else d for d in x.shape)
    shape = tuple(g.dim(1, 3) for _ in range(g.int(0, 4 - x.ndim))) + shape
    return g.call("broadcast_to", [x], {"shape": shape})


def _gen_batch_flatten(g: _Grower):
    x = g.tensor(lambda v: v.ndim >= 2, shape=g.shape(2, 4))
    return g.call("nn.batch_flatten", [x])


def _gen_layout_transform(g: _Grower):
    blocked = g.pick(lambda v: v.layout.startswith("NCHW") and v.ndim == 5, fresh=0.6)
    if blocked is not None:
        return g.call("layout_transform", [blocked],
                      {"src_layout": blocked.layout, "dst_layout": g.choice(["NCHW", "NHWC"])})
    x = g.tensor(lambda v: v.ndim == 4, shape=_image_shape(g))
    src = g.choice(["NCHW", "NHWC"])
    c = x.shape[src.index("C")]
    options = ["NHWC" if src == "NCHW" else "NCHW"]
    options += [f"NCHW{b}c" for b in (2, 4, c) if c % b == 0 and b > 1]
    dst = g.choice(options)
    return g.call("layout_transform", [x], {"src_layout": src, "dst_layout": dst}, layout=dst)


def _gen_pad(g: _Grower):
    x = g.tensor(lambda v: v.ndim >= 1 and v.ndim <= 4, shape=g.shape(1, 4))
    mode = g.choice(["constant", "constant", "edge", "reflect"])
    width = []
    for d in x.shape:
        limit = d - 1 if mode == "reflect" else 2
        width.append((g.int(0, min(2, limit)), g.int(0, min(2, limit))))
    value = g.leaf((), x.dtype)
    return g.call("nn.pad", [x, value], {"pad_width": tuple(width), "pad_mode": mode},
                  bound=max(x.bound, value.bound))


def _gen_one_hot(g: _Grower):
    idx = g.pick(lambda v: _is_int(v.dtype) and v.ndim <= 2 and v.exact, fresh=0.5)
    if idx is None:
        idx = g.leaf(g.shape(0, 2), g.choice(["int32", "int64"]))
    dtype = g.choice(FLOATS + INTS[:1])
    on, off = g.leaf((), dtype), g.leaf((), dtype)
    return g.call("one_hot", [idx, on, off], {"depth": g.int(1, 6), "axis": g.int(-1, idx.ndim),
                                              "dtype": dtype})


def _gen_resize2d(g: _Grower):
    layout = g.choice(["NCHW", "NHWC"])
    x = g.tensor(lambda v: _flt(v) and v.ndim == 4, shape=_image_shape(g), dtype=g.float_dtype())
    method = g.choice(["nearest_neighbor", "linear", "cubic"])
    modes = ["half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"]
    if method == "nearest_neighbor":
        modes.append("tf_half_pixel_for_nn")
    attrs = {"size": (g.dim(1, 8), g.dim(1, 8)), "layout": layout, "method": method,
             "coordinate_transformation_mode": g.choice(modes)}
    if method == "nearest_neighbor" and g.chance(0.5):
        attrs["rounding_method"] = g.choice(["round", "round_prefer_floor", "round_prefer_ceil",
                                             "floor", "ceil"])
    exact = method == "nearest_neighbor"
    return g.call("image.resize2d", [x], attrs, exact=exact and x.exact,
                  bound=x.bound * (1 if exact else 2))


# -- reductions

def _gen_reduce(name):
    def gen(g: _Grower):
        if name in ("all", "any"):
            x = g.tensor(lambda v: v.dtype == "bool", dtype="bool")
        elif name in ("argmax", "argmin", "max", "min"):
            x = g.tensor(lambda v: _num(v) and (v.exact or name in ("max", "min")))
        else:
            x = g.tensor(_num)
        attrs = {"axis": None if g.chance(0.3) else tuple(_axis_list(g, x.ndim)),
                 "keepdims": g.chance(0.4), "exclude": g.chance(0.2)}
        if name in ("argmax", "argmin"):
            attrs["select_last_index"] = g.chance(0.3)
        from ..op.reduce import reduce_axes
        axes = reduce_axes(x.ndim, attrs["axis"], attrs["exclude"])
        count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
        if name == "sum":
            return g.call(name, [x], attrs, bound=x.bound * count)
        if name == "prod":
            bound = math.inf if count * math.log2(max(x.bound, 1.0)) > 1000 else x.bound ** count
            return g.call(name, [x], attrs, bound=bound, frac=x.frac * count)
        if name == "mean":
            return g.call(name, [x], attrs, exact=x.exact and count & (count - 1) == 0,
                          frac=x.frac + max(count, 1).bit_length())
        if name in ("argmax", "argmin"):
            return g.call(name, [x], attrs, bound=float(max(count, 1)), frac=0, exact=True)
        return g.call(name, [x], attrs)
    return gen


def _gen_variance(g: _Grower):
    x = g.tensor(lambda v: _flt(v) and v.ndim >= 1, shape=g.shape(1, 4), dtype=g.float_dtype())
    axis = None if g.chance(0.3) else tuple(_axis_list(g, x.ndim))
    exclude = g.chance(0.2)
    from ..op.reduce import reduce_axes
    axes = reduce_axes(x.ndim, axis, exclude)
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    mean = g.call("mean", [x], {"axis": axis, "keepdims": True, "exclude": exclude}, exact=False)
    unbiased = count > 1 and g.chance(0.3)
    return g.call("variance", [x, mean], {"axis": axis, "keepdims": g.chance(0.4),
                                          "exclude": exclude, "unbiased": unbiased},
                  exact=False, bound=x.bound * x.bound * 4)


# -- nn

def _image_shape(g: _Grower) -> tuple:
    return (g.dim(1, 2), g.dim(1, 6), g.dim(1, 8), g.dim(1, 8))


def _nchw(v: Value, layout: str) -> tuple:
    return tuple(v.shape[layout.index(a)] for a in "NCHW")


def _from_nchw(shape, layout: str) -> tuple:
    return tuple(shape["NCHW".index(a)] for a in layout)


def _gen_conv2d(g: _Grower):
    if g.chance(0.3):
        x = g.tensor(lambda v: v.ndim == 4 and v.dtype == "float32" and not v.layout,
                     shape=_image_shape(g), dtype="float32")
        return _winograd_conv2d(g, x)
    dl = g.choice(["NCHW", "NHWC"])
    kl = g.choice(["OIHW", "HWIO"] if dl == "NHWC" else ["OIHW", "OIHW", "HWIO"])
    dtype = g.choice(["float32", "float32", "float64", "int32"])
    x = g.tensor(lambda v: v.ndim == 4 and v.dtype == dtype and not v.layout, shape=_image_shape(g),
                 dtype=dtype)
    n, c, h, w = _nchw(x, dl)
    kind = g.choice(["plain", "plain", "depthwise", "grouped"])
    if kind == "depthwise":
        groups, channels = c, c * g.int(1, 2)
    elif kind == "grouped":
        groups = g.choice([d for d in range(1, c + 1) if c % d == 0])
        channels = groups * g.int(1, 2)
    else:
        groups, channels = 1, g.dim(1, 8)
    kh, kw = g.int(1, 3), g.int(1, 3)
    dh, dw = g.int(1, 2), g.int(1, 2)
    sh, sw = g.int(1, 2), g.int(1, 2)
    pads = [g.int(0, 2) for _ in range(4)]      # top, left, bottom, right
    two = g.chance(0.4)
    if two:                                     # (top and bottom, left and right)
        pads[2], pads[3] = pads[0], pads[1]
    if h + pads[0] + pads[2] < dh * (kh - 1) + 1:
        kh, dh = 1, 1
    if w + pads[1] + pads[3] < dw * (kw - 1) + 1:
        kw, dw = 1, 1
    oihw = {"O": channels, "I": c // groups, "H": kh, "W": kw}
    weight = g.leaf(tuple(oihw[a] for a in kl), dtype, weight=True)
    padding = (pads[0], pads[1]) if two else tuple(pads)
    attrs = {"strides": (sh, sw), "padding": padding, "dilation": (dh, dw), "groups": groups,
             "channels": channels, "kernel_size": (kh, kw), "data_layout": dl, "kernel_layout": kl}
    if g.chance(0.2):
        attrs["out_layout"] = g.choice(["NCHW", "NHWC"])
    k = (c // groups) * kh * kw
    return g.call("nn.conv2d", [x, weight], attrs, bound=x.bound * weight.bound * k,
                  frac=x.frac + weight.frac)


def _winograd_conv2d(g: _Grower, x: Value):
    """A float32 NCHW/OIHW convolution of Winograd's kind (3x3, stride 1, dilation 1, one
    group), which AlterOpLayout rewrites into the weight transform and the Winograd
    convolution where ``RB_WINOGRAD`` (llvm) or ``RB_GPU_CONV`` (opencl) says so; padded so
    that the output has at least one pixel."""
    n, c, h, w = x.shape
    channels = g.dim(1, 8)
    pads = [g.int(0, 2) for _ in range(4)]
    pads[0] = max(pads[0], 3 - h - pads[2])
    pads[1] = max(pads[1], 3 - w - pads[3])
    weight = g.leaf((channels, c, 3, 3), "float32", weight=True)
    attrs = {"strides": (1, 1), "padding": tuple(pads), "dilation": (1, 1), "groups": 1,
             "channels": channels, "kernel_size": (3, 3), "data_layout": "NCHW",
             "kernel_layout": "OIHW"}
    return g.call("nn.conv2d", [x, weight], attrs, bound=x.bound * weight.bound * c * 9,
                  frac=x.frac + weight.frac)


def _gen_conv2d_transpose(g: _Grower):
    dtype = g.choice(["float32", "float32", "float64"])
    x = g.tensor(lambda v: v.ndim == 4 and v.dtype == dtype and not v.layout, shape=_image_shape(g),
                 dtype=dtype)
    n, c, h, w = x.shape
    groups = g.choice([1, 1] + [d for d in range(2, c + 1) if c % d == 0])
    channels = groups * g.int(1, 2)
    kh, kw = g.int(1, 3), g.int(1, 3)
    sh, sw = g.int(1, 2), g.int(1, 2)
    dh, dw = g.int(1, 2), g.int(1, 2)
    pads = [g.int(0, kh - 1), g.int(0, kw - 1), g.int(0, kh - 1), g.int(0, kw - 1)]
    if (h - 1) * sh + dh * (kh - 1) + 1 - pads[0] - pads[2] < 1:
        pads[0] = pads[2] = 0
    if (w - 1) * sw + dw * (kw - 1) + 1 - pads[1] - pads[3] < 1:
        pads[1] = pads[3] = 0
    pads = tuple(pads)
    out_pad = (g.int(0, sh - 1), g.int(0, sw - 1))
    weight = g.leaf((c, channels // groups, kh, kw), dtype, weight=True)
    attrs = {"strides": (sh, sw), "padding": pads, "output_padding": out_pad,
             "dilation": (dh, dw), "groups": groups, "channels": channels,
             "kernel_size": (kh, kw)}
    k = c * kh * kw
    return g.call("nn.conv2d_transpose", [x, weight], attrs, bound=x.bound * weight.bound * k,
                  frac=x.frac + weight.frac)


def _fully_padded(extent: int, k: int, s: int, d: int, p0: int, p1: int, ceil: bool) -> bool:
    """Whether some pooling window along one axis reads padding only (its max would be the
    dtype's lowest value, its average a division by zero: values no comparison can trust)."""
    span = extent + p0 + p1 - d * (k - 1) - 1
    if span < 0:
        return True
    out = (-(-span // s) if ceil else span // s) + 1
    for o in range(out):
        start = o * s - p0
        if not any(0 <= start + d * t < extent for t in range(k)):
            return True
    return False


def _pool_attrs(g: _Grower, h: int, w: int, with_dilation: bool = True) -> dict:
    """Pool size, strides, dilation, padding and ceil_mode such that every window reads at
    least one element of the input."""
    size, pad, dil, stride = [], [0, 0, 0, 0], [], []
    axes = []
    for i, extent in enumerate((h, w)):
        k = g.int(1, 3)
        d = g.int(1, 2) if with_dilation else 1
        p0, p1 = g.int(0, k - 1), g.int(0, k - 1)
        if extent + p0 + p1 < d * (k - 1) + 1:
            k, d, p0, p1 = 1, 1, 0, 0
        axes.append([extent, k, g.int(1, 2), d, p0, p1])
    ceil = g.chance(0.3)
    for axis in axes:
        if _fully_padded(*axis, ceil):
            axis[4] = axis[5] = 0
            if axis[0] < axis[3] * (axis[1] - 1) + 1:    # the window no longer fits
                axis[1] = axis[3] = 1
    if any(_fully_padded(*axis, ceil) for axis in axes):
        ceil = False
    for i, (extent, k, s, d, p0, p1) in enumerate(axes):
        size.append(k)
        stride.append(s)
        dil.append(d)
        pad[i], pad[i + 2] = p0, p1
    attrs = {"pool_size": tuple(size), "strides": tuple(stride), "padding": tuple(pad),
             "ceil_mode": ceil}
    if with_dilation:
        attrs["dilation"] = tuple(dil)
    return attrs


def _pool_input(g: "_Grower"):
    """A layout (NCHW or NHWC) and a 4-d numeric tensor for a pooling op to read in it."""
    layout = g.choice(["NCHW", "NHWC"])
    x = g.tensor(lambda v: v.ndim == 4 and _num(v) and not v.layout, shape=_image_shape(g),
                 dtype=g.choice(FLOATS + ("int32",)))
    return layout, x


def _gen_pool(name):
    def gen(g: _Grower):
        layout, x = _pool_input(g)
        _, _, h, w = _nchw(x, layout)
        attrs = _pool_attrs(g, h, w)
        attrs["layout"] = layout
        if name == "nn.avg_pool2d":
            attrs["count_include_pad"] = g.chance(0.5)
            return g.call(name, [x], attrs, exact=False)
        return g.call(name, [x], attrs)
    return gen


def _gen_global_pool(name):
    def gen(g: _Grower):
        layout, x = _pool_input(g)
        exact = None if name == "nn.global_max_pool2d" else False
        return g.call(name, [x], {"layout": layout}, exact=exact)
    return gen


def _gen_adaptive_avg_pool2d(g: _Grower):
    layout = g.choice(["NCHW", "NHWC"])
    x = g.tensor(lambda v: v.ndim == 4 and _flt(v) and not v.layout, shape=_image_shape(g),
                 dtype=g.float_dtype())
    _, _, h, w = _nchw(x, layout)
    size = (g.int(1, h), g.int(1, w)) if g.chance(0.7) else (g.int(1, h),)
    return g.call("nn.adaptive_avg_pool2d", [x], {"output_size": size, "layout": layout},
                  exact=False)


def _gen_dense(g: _Grower):
    dtype = g.choice(["float32", "float32", "float64", "int32"])
    x = g.tensor(lambda v: v.ndim in (1, 2, 3) and v.dtype == dtype, shape=g.shape(1, 3),
                 dtype=dtype)
    k = x.shape[-1]
    units = g.dim(1, 8)
    weight = g.leaf((units, k), dtype, weight=True)
    return g.call("nn.dense", [x, weight], {"units": units if g.chance(0.5) else None},
                  bound=x.bound * weight.bound * k, frac=x.frac + weight.frac)


def _gen_matmul(g: _Grower):
    dtype = g.choice(["float32", "float32", "float64", "int32"])
    x = g.tensor(lambda v: v.ndim == 2 and v.dtype == dtype, shape=(g.dim(), g.dim()), dtype=dtype)
    ta, tb = g.chance(0.3), g.chance(0.4)
    k = x.shape[0] if ta else x.shape[1]
    n = g.dim()
    y = g.leaf((n, k) if tb else (k, n), dtype, weight=True)
    return g.call("nn.matmul", [x, y], {"transpose_a": ta, "transpose_b": tb},
                  bound=x.bound * y.bound * k, frac=x.frac + y.frac)


def _gen_batch_matmul(g: _Grower):
    dtype = g.choice(["float32", "float32", "float64", "int32"])
    x = g.tensor(lambda v: v.ndim == 3 and v.dtype == dtype, shape=(g.dim(1, 3), g.dim(), g.dim()),
                 dtype=dtype)
    ta, tb = g.chance(0.3), g.chance(0.7)
    b = x.shape[0]
    k = x.shape[1] if ta else x.shape[2]
    n = g.dim()
    y = g.pick(lambda v: v.dtype == dtype and v.shape == ((b, n, k) if tb else (b, k, n)),
               fresh=0.3) or g.leaf((b, n, k) if tb else (b, k, n), dtype, weight=True)
    return g.call("nn.batch_matmul", [x, y], {"transpose_a": ta, "transpose_b": tb},
                  bound=x.bound * y.bound * k, frac=x.frac + y.frac)


def _gen_softmax(name):
    def gen(g: _Grower):
        x = g.tensor(lambda v: _flt(v) and v.ndim >= 1 and v.bound <= 64, shape=g.shape(1, 4),
                     dtype=g.float_dtype())
        return g.call(name, [x], {"axis": g.int(-x.ndim, x.ndim - 1)}, exact=False,
                      bound=1.0 if name == "nn.softmax" else 128.0)
    return gen


def _gen_batch_norm(g: _Grower):
    x = g.tensor(lambda v: _flt(v) and v.ndim >= 2 and not v.layout, shape=g.shape(2, 4),
                 dtype=g.float_dtype())
    axis = g.choice([1, 1, -1, 0]) if x.ndim > 1 else 0
    c = x.shape[axis]
    gamma, beta, mean = (g.leaf((c,), x.dtype, weight=True) for _ in range(3))
    var = g.leaf((c,), x.dtype, "pos", weight=True)
    outs = g.call("nn.batch_norm", [x, gamma, beta, mean, var],
                  {"axis": axis, "center": g.chance(0.8), "scale": g.chance(0.8)},
                  exact=False, bound=x.bound * 40)
    return outs[0] if g.chance(0.7) else outs


def _gen_layer_norm(g: _Grower):
    # normalizing divides by the spread: of values equal but for rounding it magnifies the
    # rounding (by up to 1/sqrt(epsilon)), so the input must be exact
    x = g.tensor(lambda v: _flt(v) and v.ndim >= 1 and v.exact, shape=g.shape(1, 4),
                 dtype=g.float_dtype())
    axis = g.int(-x.ndim, x.ndim - 1)
    c = x.shape[axis]
    gamma, beta = g.leaf((c,), x.dtype, weight=True), g.leaf((c,), x.dtype, weight=True)
    return g.call("nn.layer_norm", [x, gamma, beta], {"axis": axis, "center": g.chance(0.8),
                                                     "scale": g.chance(0.8)},
                  exact=False, bound=40.0)


def _gen_lrn(g: _Grower):
    x = g.tensor(lambda v: _flt(v) and v.ndim == 4 and not v.layout, shape=_image_shape(g),
                 dtype=g.float_dtype())
    return g.call("nn.lrn", [x], {"size": g.choice([1, 3, 5]), "axis": g.choice([1, -1]),
                                  "bias": g.choice([1.0, 2.0]), "alpha": g.choice([1e-4, 0.5]),
                                  "beta": g.choice([0.75, 0.5])}, exact=False)


def _gen_dropout(g: _Grower):
    x = g.tensor(_flt, dtype=g.float_dtype())
    outs = g.call("nn.dropout", [x], {"rate": g.choice([0.0, 0.5])})
    return outs[0] if g.chance(0.7) else outs


# -- 1-D and 3-D convolutions and poolings, upsampling, resize1d/3d

def _spatial_input(g: _Grower, spatial: str, layout: str, dtypes, pred=lambda v: True):
    """A tensor of rank ``2 + len(spatial)`` to read in ``layout`` (axes N, C and ``spatial``),
    of one of ``dtypes``, small enough for 3-D windows."""
    hi = 8 if len(spatial) == 1 else 5
    extents = {"N": g.dim(1, 2), "C": g.dim(1, 4), **{a: g.dim(1, hi) for a in spatial}}
    return g.tensor(lambda v: v.ndim == 2 + len(spatial) and v.dtype in dtypes and pred(v)
                    and not v.layout, shape=tuple(extents[a] for a in layout), dtype=g.choice(dtypes))


def _extents(v: Value, layout: str) -> dict:
    return dict(zip(layout, v.shape))


def _gen_conv_nd(spatial: str):
    name = "nn.conv1d" if spatial == "W" else "nn.conv3d"
    layouts = [("NC" + spatial, "OI" + spatial), ("N" + spatial + "C", spatial + "IO")]

    def gen(g: _Grower):
        dl, kl = g.choice(layouts)
        x = _spatial_input(g, spatial, dl, (g.choice(["float32", "float32", "float64", "int32"]),))
        ext = _extents(x, dl)
        c = ext["C"]
        groups = g.choice([d for d in range(1, c + 1) if c % d == 0]) if g.chance(0.4) else 1
        channels = groups * g.int(1, 2)
        ks, ss, ds, before, after = [], [], [], [], []
        for a in spatial:
            k, d, s, p0, p1 = g.int(1, 3), g.int(1, 2), g.int(1, 2), g.int(0, 1), g.int(0, 1)
            if ext[a] + p0 + p1 < d * (k - 1) + 1:
                k, d = 1, 1
            ks.append(k)
            ss.append(s)
            ds.append(d)
            before.append(p0)
            after.append(p1)
        oi = {"O": channels, "I": c // groups, **dict(zip(spatial, ks))}
        weight = g.leaf(tuple(oi[a] for a in kl), x.dtype, weight=True)
        attrs = {"strides": tuple(ss), "padding": tuple(before + after), "dilation": tuple(ds),
                 "groups": groups, "channels": channels, "kernel_size": tuple(ks),
                 "data_layout": dl, "kernel_layout": kl}
        taps = (c // groups) * int(np.prod(ks))
        return g.call(name, [x, weight], attrs, bound=x.bound * weight.bound * taps,
                      frac=x.frac + weight.frac)
    return gen


def _pool_attrs_nd(g: _Grower, extents: list) -> dict:
    """As :func:`_pool_attrs` for any number of spatial axes: every window reads the input."""
    axes = []
    for extent in extents:
        k, d = g.int(1, 3), g.int(1, 2)
        p0, p1 = g.int(0, k - 1), g.int(0, k - 1)
        if extent + p0 + p1 < d * (k - 1) + 1:
            k, d, p0, p1 = 1, 1, 0, 0
        axes.append([extent, k, g.int(1, 2), d, p0, p1])
    ceil = g.chance(0.3)
    for axis in axes:
        if _fully_padded(*axis, ceil):
            axis[4] = axis[5] = 0
            if axis[0] < axis[3] * (axis[1] - 1) + 1:
                axis[1] = axis[3] = 1
    if any(_fully_padded(*axis, ceil) for axis in axes):
        ceil = False
    return {"pool_size": tuple(a[1] for a in axes), "strides": tuple(a[2] for a in axes),
            "dilation": tuple(a[3] for a in axes),
            "padding": tuple(a[4] for a in axes) + tuple(a[5] for a in axes), "ceil_mode": ceil}


_SPATIAL_LAYOUTS = {"W": ("NCW", "NWC"), "HW": ("NCHW", "NHWC"), "DHW": ("NCDHW", "NDHWC")}


def _gen_pool_nd(kind: str, spatial: str):
    name = f"nn.{kind}_pool{'1d' if spatial == 'W' else '3d'}"

    def gen(g: _Grower):
        layout = g.choice(_SPATIAL_LAYOUTS[spatial])
        x = _spatial_input(g, spatial, layout, FLOATS + ("int32",))
        ext = _extents(x, layout)
        attrs = _pool_attrs_nd(g, [ext[a] for a in spatial])
        attrs["layout"] = layout
        if kind == "avg":
            attrs["count_include_pad"] = g.chance(0.5)
            return g.call(name, [x], attrs, exact=False)
        return g.call(name, [x], attrs)
    return gen


def _gen_adaptive_nd(kind: str, spatial: str):
    name = f"nn.adaptive_{kind}_pool{ {'W': '1d', 'HW': '2d', 'DHW': '3d'}[spatial] }"

    def gen(g: _Grower):
        layout = g.choice(_SPATIAL_LAYOUTS[spatial])
        dtypes = FLOATS + ("int32",) if kind == "max" else FLOATS
        x = _spatial_input(g, spatial, layout, dtypes)
        ext = _extents(x, layout)
        size = tuple(g.int(1, ext[a]) for a in spatial)
        if g.chance(0.2):
            size = (g.int(1, min(ext[a] for a in spatial)),)
        return g.call(name, [x], {"output_size": size, "layout": layout},
                      exact=None if kind == "max" else False)
    return gen


def _scale(g: _Grower, extent: int) -> float:
    """A scale whose rounded product with ``extent`` is between 1 and 12."""
    options = [s for s in (0.5, 1.0, 1.5, 2.0, 2.5, 3.0) if 1 <= int(np.rint(extent * s)) <= 12]
    return g.choice(options)


def _gen_upsampling(g: _Grower):
    layout = g.choice(["NCHW", "NHWC"])
    x = _spatial_input(g, "HW", layout, FLOATS)
    ext = _extents(x, layout)
    method = g.choice(["nearest_neighbor", "bilinear", "bicubic"])
    exact = method == "nearest_neighbor"
    return g.call("nn.upsampling", [x], {"scale_h": _scale(g, ext["H"]), "scale_w": _scale(g, ext["W"]),
                                         "layout": layout, "method": method,
                                         "align_corners": g.chance(0.5)},
                  exact=exact and x.exact, bound=x.bound * (1 if exact else 2))


def _gen_upsampling3d(g: _Grower):
    layout = g.choice(["NCDHW", "NDHWC"])
    x = _spatial_input(g, "DHW", layout, FLOATS)
    ext = _extents(x, layout)
    method = g.choice(["nearest_neighbor", "trilinear"])
    exact = method == "nearest_neighbor"
    modes = ["half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"]
    return g.call("nn.upsampling3d", [x], {"scale_d": _scale(g, ext["D"]), "scale_h": _scale(g, ext["H"]),
                                           "scale_w": _scale(g, ext["W"]), "layout": layout,
                                           "method": method,
                                           "coordinate_transformation_mode": g.choice(modes)},
                  exact=exact and x.exact, bound=x.bound * (1 if exact else 2))


def _gen_resize_nd(spatial: str):
    name = "image.resize1d" if spatial == "W" else "image.resize3d"

    def gen(g: _Grower):
        layout = g.choice(_SPATIAL_LAYOUTS[spatial])
        x = _spatial_input(g, spatial, layout, FLOATS, pred=_flt)
        method = g.choice(["nearest_neighbor", "linear", "cubic"])
        modes = ["half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"]
        if method == "nearest_neighbor":
            modes.append("tf_half_pixel_for_nn")
        attrs = {"size": tuple(g.dim(1, 8 if spatial == "W" else 4) for _ in spatial), "layout": layout,
                 "method": method, "coordinate_transformation_mode": g.choice(modes)}
        if method == "nearest_neighbor" and g.chance(0.5):
            attrs["rounding_method"] = g.choice(["round", "round_prefer_floor", "round_prefer_ceil",
                                                 "floor", "ceil"])
        exact = method == "nearest_neighbor"
        return g.call(name, [x], attrs, exact=exact and x.exact,
                      bound=x.bound * (1 if exact else 2 ** len(spatial)))
    return gen


def _gen_block(name: str):
    def gen(g: _Grower):
        layout = g.choice(["NCHW", "NHWC"])
        b = g.choice([1, 2, 2])
        if name == "nn.space_to_depth":
            ext = {"N": g.dim(1, 2), "C": g.dim(1, 3), "H": b * g.dim(1, 3), "W": b * g.dim(1, 3)}
            ok = (lambda v: v.shape[layout.index("H")] % b == 0 and v.shape[layout.index("W")] % b == 0)
            attrs = {"block_size": b, "layout": layout}
        else:
            ext = {"N": g.dim(1, 2), "C": b * b * g.dim(1, 2), "H": g.dim(1, 4), "W": g.dim(1, 4)}
            ok = (lambda v: v.shape[layout.index("C")] % (b * b) == 0)
            attrs = {"block_size": b, "layout": layout, "mode": g.choice(["DCR", "CRD"])}
        x = g.tensor(lambda v: v.ndim == 4 and not v.layout and ok(v),
                     shape=tuple(ext[a] for a in layout))
        return g.call(name, [x], attrs)
    return gen


# -- gathers, scatters, scans, sorting, collapse_sum, annotations

def _gen_gather(g: _Grower):
    x = g.tensor(lambda v: 1 <= v.ndim <= 3, shape=g.shape(1, 3))
    axis = g.int(0, x.ndim - 1)
    shape = tuple(g.dim(1, 6) if a == axis else g.int(1, d) for a, d in enumerate(x.shape))
    idx = g.leaf(shape, g.choice(["int32", "int64"]), "idx", limit=x.shape[axis])
    return g.call("gather", [x, idx], {"axis": axis - x.ndim if g.chance(0.3) else axis})


def _gen_gather_nd(g: _Grower):
    x = g.tensor(lambda v: 1 <= v.ndim <= 3, shape=g.shape(1, 3))
    b = g.int(0, x.ndim - 1) if g.chance(0.3) else 0
    m = g.int(1, x.ndim - b)
    places = tuple(x.shape[:b]) + tuple(g.dim(1, 4) for _ in range(g.int(0, 2)))
    limit = min(x.shape[b:b + m])
    idx = g.leaf((m,) + places, g.choice(["int32", "int64"]), "idx", limit=limit)
    attrs = {"batch_dims": b}
    if g.chance(0.2):
        attrs["index_rank"] = m
    return g.call("gather_nd", [x, idx], attrs)


def _gen_scatter_nd(g: _Grower):
    x = g.tensor(lambda v: 1 <= v.ndim <= 3 and _num(v), shape=g.shape(1, 3))
    m = g.int(1, x.ndim)
    places = tuple(g.dim(1, 4) for _ in range(g.int(0, 2)))
    idx = g.leaf((m,) + places, g.choice(["int32", "int64"]), "idx", limit=min(x.shape[:m]))
    count = int(np.prod(places, dtype=np.int64))
    updates = g.pick(lambda v: v.dtype == x.dtype and v.shape == places + x.shape[m:], fresh=0.5)
    if updates is None:
        updates = g.leaf(places + x.shape[m:], x.dtype)
    mode = g.choice(["update", "add", "mul", "min", "max"])
    bound, frac = max(x.bound, updates.bound), max(x.frac, updates.frac)
    if mode == "add":
        bound = x.bound + count * updates.bound
    elif mode == "mul":
        bound = x.bound * max(updates.bound, 1.0) ** count
        frac = x.frac + updates.frac * count
    return g.call("scatter_nd", [x, idx, updates], {"mode": mode}, bound=bound, frac=frac)


def _gen_ndarray_size(g: _Grower):
    x = g.tensor(lambda v: True)
    return g.call("ndarray_size", [x], {"dtype": g.choice(["int32", "int64", "float32"])},
                  bound=float(x.size), frac=0, exact=True)


def _gen_reverse(g: _Grower):
    x = g.tensor(lambda v: v.ndim >= 1, shape=g.shape(1, 4))
    return g.call("reverse", [x], {"axis": g.int(-x.ndim, x.ndim - 1)})


def _gen_scan(name: str):
    def gen(g: _Grower):
        x = g.tensor(lambda v: _num(v) and v.size <= 64 and (name == "cumsum" or v.bound <= 4),
                     shape=g.shape(0, 3))
        axis = None if g.chance(0.3) or x.ndim == 0 else g.int(-x.ndim, x.ndim - 1)
        n = x.size if axis is None else x.shape[axis]
        dtype = ""
        if g.chance(0.3) and (x.exact or not _is_float(x.dtype)):
            dtype = g.choice(["int32", "int64", "float32", "float64"])
        out = dtype or x.dtype
        # a float value cast to an integer truncates: only an exact one gives the same integers
        if name == "cumsum":
            bound, frac = x.bound * n, x.frac
        else:
            bound = math.inf if n * math.log2(max(x.bound, 1.0)) > 1000 else max(x.bound, 1.0) ** n
            frac = x.frac * n
        if _is_int(out):
            frac = 0
        return g.call(name, [x], {"axis": axis, "dtype": dtype, "exclusive": g.chance(0.3)},
                      bound=bound, frac=frac)
    return gen


def _gen_sorting(name: str):
    def gen(g: _Grower):
        # the order of elements equal but for rounding is a coin toss: indices need exact values
        x = g.tensor(lambda v: _num(v) and v.ndim >= 1 and (v.exact or name == "sort"),
                     shape=g.shape(1, 3))
        axis = g.int(-x.ndim, x.ndim - 1)
        attrs = {"axis": axis, "is_ascend": g.chance(0.5)}
        if name == "sort":
            return g.call(name, [x], attrs)
        attrs["dtype"] = g.choice(["int32", "int64"])
        extent = x.shape[axis]
        if name == "argsort":
            return g.call(name, [x], attrs, bound=float(extent), frac=0, exact=True)
        attrs["k"] = g.choice([0, g.int(1, extent)])
        attrs["ret_type"] = g.choice(["both", "values", "indices"])
        outs = g.call(name, [x], attrs)
        if attrs["ret_type"] == "both":
            outs[1].bound, outs[1].frac, outs[1].exact = float(extent), 0, True
        elif attrs["ret_type"] == "indices":
            outs.bound, outs.frac, outs.exact = float(extent), 0, True
        return outs
    return gen


def _collapsed_target(g: _Grower, shape: tuple) -> tuple:
    """A shape that broadcasts to ``shape``: a nonempty suffix of it with some dims made 1."""
    keep = g.int(1, len(shape))
    return tuple(1 if g.chance(0.4) else d for d in shape[len(shape) - keep:])


def _gen_collapse_sum(name: str):
    def gen(g: _Grower):
        x = g.tensor(lambda v: _num(v) and v.ndim >= 1, shape=g.shape(1, 4))
        target = _collapsed_target(g, x.shape)
        bound = x.bound * x.size / max(int(np.prod(target)), 1)
        if name == "collapse_sum_like":
            like = g.pick(lambda v: v.dtype == x.dtype and v.shape == target, fresh=0.5)
            like = like or g.leaf(target, x.dtype)
            return g.call(name, [x, like], bound=bound)
        shape = Value(Constant(np.array(target, dtype="int32")), TensorType((len(target),), "int32"))
        return g.call(name, [x, shape], {"shape": target}, bound=bound)
    return gen


def _gen_stop_fusion(g: _Grower):
    return g.call("annotation.stop_fusion", [g.tensor(lambda v: True)])


def _gen_simulated_quantize(g: _Grower):
    """An exact float32 value quantized to ``nbit`` bits at a power-of-two scale: the division
    is exact, so the rounding (halves away from zero) sees the same value everywhere."""
    x = g.tensor(lambda v: v.dtype == "float32" and v.exact, dtype="float32")
    k = g.int(0, 2)
    scale = 2.0 ** -k
    cmax = float(2 ** (g.choice([3, 4, 8]) - 1) - 1)
    scalars = [Value(Constant(np.asarray(v, dtype="float32")), TensorType((), "float32"), abs(v), 0)
               for v in (scale, -cmax, cmax)]
    return g.call("relay.op.annotation.simulated_quantize", [x] + scalars,
                  {"kind": g.choice([1, 2, 3])}, bound=min(x.bound + scale, cmax * scale), frac=k)


# -- more elementwise ops, broadcast_to_like, slice_like, the channel normalizations

def _gen_test(name: str):
    """isnan, isfinite, isinf: a bool of an exact numeric value."""
    def gen(g: _Grower):
        return g.call(name, [g.tensor(_exact_num)], bound=1.0, frac=0, exact=True)
    return gen


def _gen_sign(g: _Grower):
    # the sign jumps at zero: the operand must be exact
    return g.call("sign", [g.tensor(_exact_num)], bound=1.0, frac=0)


def _gen_copy(g: _Grower):
    return g.call("copy", [g.tensor(lambda v: True)])


def _gen_broadcast_to_like(g: _Grower):
    x = g.tensor(lambda v: v.ndim <= 3, shape=g.shape(0, 3))
    shape = tuple(g.dim(1, 4) if d == 1 and g.chance(0.6) else d for d in x.shape)
    shape = tuple(g.dim(1, 3) for _ in range(g.int(0, 4 - x.ndim))) + shape
    like = (g.pick(lambda v: v.shape == shape and v is not x, fresh=0.5)
            or g.leaf(shape, g.choice(FLOATS + INTS)))
    return g.call("broadcast_to_like", [x, like])


def _gen_slice_like(g: _Grower):
    x = g.tensor(lambda v: v.ndim >= 1, shape=g.shape(1, 4))
    axes = None if g.chance(0.4) else tuple(sorted({g.int(0, x.ndim - 1) for _ in range(g.int(1, x.ndim))}))
    rank = x.ndim if axes is None else max(axes) + 1
    shape = tuple(g.int(1, x.shape[a]) for a in range(rank))
    like = g.pick(lambda v: v.shape == shape and v is not x, fresh=0.5) or g.leaf(shape, g.choice(FLOATS))
    if axes is not None and g.chance(0.3):
        axes = tuple(a - x.ndim for a in axes)
    return g.call("slice_like", [x, like], {"axes": axes})


def _gen_channel_norm(name: str):
    def gen(g: _Grower):
        # normalizing divides by the spread, which magnifies the rounding of values equal but for
        # it (see layer_norm): the input must be exact
        x = g.tensor(lambda v: _flt(v) and v.ndim >= 2 and v.exact and not v.layout, shape=g.shape(2, 4),
                     dtype=g.float_dtype())
        axis = g.choice([a for a in range(1, x.ndim)] + [-1])
        c = x.shape[axis]
        gamma, beta = g.leaf((c,), x.dtype, weight=True), g.leaf((c,), x.dtype, weight=True)
        attrs = {"axis": axis, "center": g.chance(0.8), "scale": g.chance(0.8)}
        if name == "nn.group_norm":
            attrs["num_groups"] = g.choice([d for d in range(1, c + 1) if c % d == 0])
        return g.call(name, [x, gamma, beta], attrs, exact=False, bound=40.0)
    return gen


def _gen_l2_normalize(g: _Grower):
    x = g.tensor(lambda v: _flt(v) and v.ndim >= 1, shape=g.shape(1, 4), dtype=g.float_dtype())
    axis = tuple(_axis_list(g, x.ndim)) if g.chance(0.7) else ()
    return g.call("nn.l2_normalize", [x], {"eps": g.choice([1e-12, 1e-3, 1.0]), "axis": axis},
                  exact=False, bound=max(1.0, x.bound))


def _gen_conv_transpose_nd(spatial: str):
    name = "nn.conv1d_transpose" if spatial == "W" else "nn.conv3d_transpose"

    def gen(g: _Grower):
        x = _spatial_input(g, spatial, "NC" + spatial, (g.choice(["float32", "float32", "float64"]),))
        ext = _extents(x, "NC" + spatial)
        c = ext["C"]
        groups = g.choice([1, 1] + [d for d in range(2, c + 1) if c % d == 0])
        channels = groups * g.int(1, 2)
        ks, ss, ds, before, after, out_pad = [], [], [], [], [], []
        for a in spatial:
            k, s, d = g.int(1, 3), g.int(1, 2), g.int(1, 2)
            p0, p1 = g.int(0, k - 1), g.int(0, k - 1)
            if (ext[a] - 1) * s + d * (k - 1) + 1 - p0 - p1 < 1:
                p0 = p1 = 0
            ks.append(k)
            ss.append(s)
            ds.append(d)
            before.append(p0)
            after.append(p1)
            out_pad.append(g.int(0, s - 1))
        weight = g.leaf((c, channels // groups) + tuple(ks), x.dtype, weight=True)
        attrs = {"strides": tuple(ss), "padding": tuple(before + after), "output_padding": tuple(out_pad),
                 "dilation": tuple(ds), "groups": groups, "channels": channels, "kernel_size": tuple(ks)}
        taps = c * int(np.prod(ks))
        return g.call(name, [x, weight], attrs, bound=x.bound * weight.bound * taps,
                      frac=x.frac + weight.frac)
    return gen


def _gen_mirror_pad(g: _Grower):
    x = g.tensor(lambda v: 1 <= v.ndim <= 4, shape=g.shape(1, 4))
    mode = g.choice(["SYMMETRIC", "REFLECT"])
    width = []
    for d in x.shape:
        limit = min(2, d if mode == "SYMMETRIC" else d - 1)
        width.append((g.int(0, limit), g.int(0, limit)))
    return g.call("nn.mirror_pad", [x], {"pad_width": tuple(width), "mode": mode})


# ---------------------------------------------------------------------------------------------
# The table

OP_GENERATORS: dict = {
    # elementwise
    "negative": _gen_unary_keep("negative"),
    "abs": _gen_unary_keep("abs"),
    "exp": _gen_unary_float("exp", exp_like=True),
    "log": _gen_unary_float("log", domain="pos"),
    "sqrt": _gen_unary_float("sqrt", domain="pos"),
    "rsqrt": _gen_unary_float("rsqrt", domain="pos"),
    "sigmoid": _gen_unary_float("sigmoid"),
    "tanh": _gen_unary_float("tanh"),
    "erf": _gen_unary_float("erf"),

    "round": _gen_rounding("round"),
    "floor": _gen_rounding("floor"),
    "ceil": _gen_rounding("ceil"),
    "logical_not": _gen_logical_not,
    "clip": _gen_clip,
    "cast": _gen_cast,
    "cast_like": _gen_cast_like,
    "nn.relu": _gen_relu,
    "nn.leaky_relu": _gen_leaky_relu,
    "nn.prelu": _gen_prelu,
    "nn.dropout": _gen_dropout,
    "full": _gen_full,
    "full_like": _gen_full_like,
    "ones": _gen_constant_fill("ones"),
    "zeros": _gen_constant_fill("zeros"),
    "ones_like": _gen_like("ones_like"),
    "zeros_like": _gen_like("zeros_like"),
    # broadcasting binary
    "add": _gen_arith("add"),
    "subtract": _gen_arith("subtract"),
    "multiply": _gen_arith("multiply"),
    "maximum": _gen_arith("maximum"),
    "minimum": _gen_arith("minimum"),
    "divide": _gen_division("divide"),
    "floor_divide": _gen_division("floor_divide"),
    "mod": _gen_division("mod"),
    "floor_mod": _gen_division("floor_mod"),
    "power": _gen_power,
    "equal": _gen_compare("equal"),
    "not_equal": _gen_compare("not_equal"),
    "less": _gen_compare("less"),
    "less_equal": _gen_compare("less_equal"),
    "greater": _gen_compare("greater"),
    "greater_equal": _gen_compare("greater_equal"),
    "logical_and": _gen_logical("logical_and"),
    "logical_or": _gen_logical("logical_or"),
    "logical_xor": _gen_logical("logical_xor"),
    "left_shift": _gen_shift("left_shift"),
    "right_shift": _gen_shift("right_shift"),
    "where": _gen_where,
    "nn.bias_add": _gen_bias_add,
    # transforms
    "reshape": _gen_reshape,
    "reshape_like": _gen_reshape_like,
    "transpose": _gen_transpose,
    "tile": _gen_tile,
    "repeat": _gen_repeat,
    "concatenate": _gen_concatenate,
    "stack": _gen_stack,
    "split": _gen_split,
    "strided_slice": _gen_strided_slice,
    "take": _gen_take,
    "squeeze": _gen_squeeze,
    "expand_dims": _gen_expand_dims,
    "broadcast_to": _gen_broadcast_to,
    "nn.batch_flatten": _gen_batch_flatten,
    "layout_transform": _gen_layout_transform,
    "nn.pad": _gen_pad,
    "one_hot": _gen_one_hot,
    "image.resize2d": _gen_resize2d,
    # reductions
    "sum": _gen_reduce("sum"),
    "prod": _gen_reduce("prod"),
    "max": _gen_reduce("max"),
    "min": _gen_reduce("min"),
    "mean": _gen_reduce("mean"),
    "all": _gen_reduce("all"),
    "any": _gen_reduce("any"),
    "argmax": _gen_reduce("argmax"),
    "argmin": _gen_reduce("argmin"),
    "variance": _gen_variance,
    # nn
    "nn.conv2d": _gen_conv2d,
    "nn.conv2d_transpose": _gen_conv2d_transpose,
    "nn.max_pool2d": _gen_pool("nn.max_pool2d"),
    "nn.avg_pool2d": _gen_pool("nn.avg_pool2d"),
    "nn.global_max_pool2d": _gen_global_pool("nn.global_max_pool2d"),
    "nn.global_avg_pool2d": _gen_global_pool("nn.global_avg_pool2d"),
    "nn.adaptive_avg_pool2d": _gen_adaptive_avg_pool2d,
    "nn.dense": _gen_dense,
    "nn.matmul": _gen_matmul,
    "nn.batch_matmul": _gen_batch_matmul,
    "nn.softmax": _gen_softmax("nn.softmax"),
    "nn.log_softmax": _gen_softmax("nn.log_softmax"),
    "nn.batch_norm": _gen_batch_norm,
    "nn.layer_norm": _gen_layer_norm,
    "nn.lrn": _gen_lrn,
    "nn.conv1d": _gen_conv_nd("W"),
    "nn.conv3d": _gen_conv_nd("DHW"),
    "nn.max_pool1d": _gen_pool_nd("max", "W"),
    "nn.max_pool3d": _gen_pool_nd("max", "DHW"),
    "nn.avg_pool1d": _gen_pool_nd("avg", "W"),
    "nn.avg_pool3d": _gen_pool_nd("avg", "DHW"),
    "nn.adaptive_max_pool1d": _gen_adaptive_nd("max", "W"),
    "nn.adaptive_max_pool2d": _gen_adaptive_nd("max", "HW"),
    "nn.adaptive_max_pool3d": _gen_adaptive_nd("max", "DHW"),
    "nn.adaptive_avg_pool1d": _gen_adaptive_nd("avg", "W"),
    "nn.adaptive_avg_pool3d": _gen_adaptive_nd("avg", "DHW"),
    "nn.upsampling": _gen_upsampling,
    "nn.upsampling3d": _gen_upsampling3d,
    "nn.space_to_depth": _gen_block("nn.space_to_depth"),
    "nn.depth_to_space": _gen_block("nn.depth_to_space"),
    "image.resize1d": _gen_resize_nd("W"),
    "image.resize3d": _gen_resize_nd("DHW"),
    # gathers, scatters, scans, sorting, collapse_sum, annotations
    "gather": _gen_gather,
    "gather_nd": _gen_gather_nd,
    "scatter_nd": _gen_scatter_nd,
    "ndarray_size": _gen_ndarray_size,
    "reverse": _gen_reverse,
    "cumsum": _gen_scan("cumsum"),
    "cumprod": _gen_scan("cumprod"),
    "argsort": _gen_sorting("argsort"),
    "sort": _gen_sorting("sort"),
    "topk": _gen_sorting("topk"),
    "collapse_sum_like": _gen_collapse_sum("collapse_sum_like"),
    "collapse_sum_to": _gen_collapse_sum("collapse_sum_to"),
    "annotation.stop_fusion": _gen_stop_fusion,
    "relay.op.annotation.simulated_quantize": _gen_simulated_quantize,
    "isnan": _gen_test("isnan"),
    "isfinite": _gen_test("isfinite"),
    "isinf": _gen_test("isinf"),
    "sign": _gen_sign,
    "trunc": _gen_rounding("trunc"),
    "copy": _gen_copy,
    "trunc_divide": _gen_division("trunc_divide"),
    "trunc_mod": _gen_division("trunc_mod"),
    "broadcast_to_like": _gen_broadcast_to_like,
    "slice_like": _gen_slice_like,
    "nn.instance_norm": _gen_channel_norm("nn.instance_norm"),
    "nn.group_norm": _gen_channel_norm("nn.group_norm"),
    "nn.l2_normalize": _gen_l2_normalize,
    "nn.conv1d_transpose": _gen_conv_transpose_nd("W"),
    "nn.conv3d_transpose": _gen_conv_transpose_nd("DHW"),
    "nn.mirror_pad": _gen_mirror_pad,
}
"""Op name -> generator of one well-typed call (attrs, operand dtypes and domains)."""

NOT_GENERATED: dict = {
    **{name: "defined on [-1, 1] (acosh: from 1 up) and nan outside, where the fuzzer's values "
             "go; the op x dtype tests (tests/backends/test_llvm_ops.py) cover it on its domain"
       for name in ("asin", "acos", "atanh", "acosh")},
    **{name: "the C library's function in compiled code and numpy's own float32 one in the "
             "reference differ by ulps, which tan near its poles and chains of later ops "
             "magnify beyond any tolerance (seed 50196); the op x dtype tests cover it"
       for name in ("sin", "cos", "tan", "atan", "sinh", "cosh", "asinh")},
    **{name: "a variant AlterOpLayout makes from nn.conv2d (RB_WINOGRAD), whose weight must be "
             "the Winograd transform's output; tests/backends/test_winograd.py and the op x "
             "dtype tests cover it"
       for name in ("nn.contrib_conv2d_winograd_weight_transform",
                    "nn.contrib_conv2d_winograd_without_weight_transform")},
}
"""Registry ops with a compute that :data:`OP_GENERATORS` leaves out, with the reason."""


def uncovered_ops() -> dict:
    """Every registered op that has a compute but no generator: name -> reason (from
    :data:`NOT_GENERATED`, or "no generator yet" for an op added to the registry since)."""
    from ..op.registry import get_opdef, list_ops
    out = {}
    for name in list_ops():
        if get_opdef(name).compute is not None and name not in OP_GENERATORS:
            out[name] = NOT_GENERATED.get(name, "no generator yet")
    return out


# ---------------------------------------------------------------------------------------------

def random_program(seed: int, min_ops: int = 3, max_ops: int = 25, *, max_dim: int = 8,
                   ops: Optional[list] = None, constant_rate: Optional[float] = None,
                   weight_rate: float = 0.5) -> RandomProgram:
    """A random well-typed program of ``min_ops`` to ``max_ops`` op calls, from ``seed``.

    ``max_dim`` caps every dimension drawn: a smaller one gives a program of the same seed with
    smaller shapes (the choices that depend on a shape may then differ; the minimizer tries it
    as a candidate like any other). ``ops``
    restricts the table to those op names. ``constant_rate`` is the chance that a leaf is a
    bound constant (drawn per program when None); a weight leaf that is a parameter is named
    ``..._w<k>`` and listed in ``params`` with its value, the rest in ``inputs``.

    ``@main`` returns every value no other call uses (a tuple when there are several).
    Raises :class:`GeneratorError` if a generator makes a call its type relation rejects.
    """
    from ..passes import InferType

    names = sorted(OP_GENERATORS) if ops is None else list(ops)
    unknown = [n for n in names if n not in OP_GENERATORS]
    if unknown:
        raise ValueError(f"no generator for {', '.join(unknown)}")
    rng = np.random.default_rng([seed, 0x5eed])
    if constant_rate is None:
        constant_rate = float(rng.choice([0.0, 0.15, 0.4]))
    g = _Grower(seed, max_dim, constant_rate, weight_rate)
    target = g.int(min_ops, max_ops)
    for _ in range(g.int(1, 3)):
        dtype = g.numeric_dtype() if g.chance(0.85) else "bool"
        g.add(g.leaf(g.shape(), dtype, constant=False))
    while len(g.ops) < target:
        name = g.choice(names)
        g.add(OP_GENERATORS[name](g))
    sinks = [v for v in g.values if not v.uses and isinstance(v.expr, (Call, TupleGetItem))]
    if not sinks:
        sinks = [g.values[-1]]
    if len(sinks) > 6:  # keep the last few; the rest feed nothing and drop out
        sinks = sinks[-6:]
    body = sinks[0].expr if len(sinks) == 1 else Tuple([v.expr for v in sinks])
    from ..ir.analysis import free_vars
    reachable = {id(v) for v in free_vars(body)}
    params = [p for p in g.params if id(p) in reachable]
    func = Function(params, body)
    mod = InferType()(IRModule.from_expr(func))
    values = input_values(mod, seed)
    weights = {k: v for k, v in values.items() if domain_of(k)[2]}
    inputs = {k: v for k, v in values.items() if not domain_of(k)[2]}
    return RandomProgram(seed, mod, weights, inputs, _op_names(mod))


def _op_names(mod: IRModule) -> list:
    from ..ir.functor import post_order
    return [n.op.name for n in post_order(mod["main"].body)
            if isinstance(n, Call) and isinstance(n.op, Op)]
