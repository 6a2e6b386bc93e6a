"""Reductions run through the interpreter, against reductions written here in plain Python, and
their shape relation against the shapes numpy's reductions produce."""

import doctest
import itertools
import math
import re
import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import relaybench as rb
from relaybench import op
from relaybench.errors import TypeInferenceError
from relaybench.ir import SymVar, var
from relaybench.ir.type_infer import infer_expr
from relaybench.ir.types import IncompleteType, TensorType
from relaybench.op.registry import OpPattern, get_opdef

n, m = SymVar("n"), SymVar("m")
REDUCE = ["sum", "mean", "max", "min", "prod", "all", "any", "argmax", "argmin", "variance"]


def T(*shape, dtype="float32"):
    return TensorType(shape, dtype)


def v(name, *shape, dtype="float32"):
    return var(name, shape=shape, dtype=dtype)


def raises(message):
    return pytest.raises(TypeInferenceError, match="^" + re.escape(message))


def run(make, *arrays):
    """Run ``make(*params)`` as @main through the interpreter; check the result's type too."""
    params = [var(f"p{i}", shape=a.shape, dtype=a.dtype.name) for i, a in enumerate(arrays)]
    mod = rb.IRModule.from_expr(rb.Function(params, make(*params)))
    out = rb.create_executor("interpreter", mod=mod).evaluate()(*arrays)
    typed = rb.passes.InferType()(mod)["main"].body.checked_type
    assert typed == TensorType(out.shape, out.dtype.name), (typed, out.shape, out.dtype)
    return out


def reduced_axes(ndim, axis, exclude):
    """Relay's rule, written again: None or [] reduces everything; exclude takes the complement."""
    if axis is None or axis == ():
        return list(range(ndim))
    axis = [axis] if isinstance(axis, int) else list(axis)
    picked = sorted(a % ndim for a in axis)
    return [i for i in range(ndim) if i not in picked] if exclude else picked


def reduce_python(func, x, axis, keepdims=False, exclude=False, dtype=None):
    """Apply ``func`` to the row-major list of the reduced elements at every output position."""
    axes = reduced_axes(x.ndim, axis, exclude)
    kept = [i for i in range(x.ndim) if i not in axes]
    out_shape = [x.shape[i] for i in kept]
    values = []
    for pos in itertools.product(*(range(x.shape[i]) for i in kept)):
        index = [slice(None)] * x.ndim
        for i, p in zip(kept, pos):
            index[i] = p
        values.append(func(x[tuple(index)].ravel().tolist()))
    out = np.array(values, dtype=dtype or x.dtype).reshape(out_shape)
    if keepdims:
        out = out.reshape([1 if i in axes else d for i, d in enumerate(x.shape)])
    return out


def trunc_div(a, b):
    q = abs(a) // b
    return q if a >= 0 else -q


def first_index(values, best):
    target = best(values)
    return values.index(target)


def last_index(values, best):
    target = best(values)
    return len(values) - 1 - values[::-1].index(target)


PYTHON = {
    "sum": lambda vals: math.fsum(vals) if isinstance(vals[0], float) else sum(vals),
    "prod": math.prod,
    "max": max,
    "min": min,
    "mean": lambda vals: (statistics.fmean(vals) if isinstance(vals[0], float)
                          else trunc_div(sum(vals), len(vals))),
}

AXES = [(None, False, False), (1, False, False), ((0, 2), False, False), ((-1,), True, False),
        ((1,), False, True), ((0, -1), True, True), ((), False, False), ((0, 1, 2), True, False)]


def sample(dtype, shape=(3, 4, 5), name="sum"):
    rng = np.random.default_rng(abs(hash((dtype, shape, name))) % 2**32)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.startswith("int"):
        return rng.integers(-2, 3, shape).astype(dtype) if name == "prod" else \
            rng.integers(-30, 31, shape).astype(dtype)
    if name == "prod":
        return rng.uniform(0.6, 1.5, shape).astype(dtype)
    return rng.uniform(-5, 5, shape).astype(dtype)


# ---------------------------------------------------------------------------------------------
# Registry entries and attributes

@pytest.mark.parametrize("name", REDUCE)
def test_registry_entry(name):
    d = get_opdef(name)
    assert d.pattern == OpPattern.COMM_REDUCE
    assert d.reference is not None and d.doc
    assert getattr(op, name).opdef is d
    assert d.type_rel([IncompleteType()] * len(d.inputs), d.make_attrs({})) is None
    defaults = {"axis": None, "keepdims": False, "exclude": False}
    if name in ("argmax", "argmin"):
        defaults["select_last_index"] = False
    if name == "variance":
        defaults["unbiased"] = False
        assert d.inputs == ("data", "mean")
    assert dict(d.make_attrs({})) == defaults


def test_attribute_normalization():
    d = get_opdef("sum")
    assert d.make_attrs({"axis": 1}).axis == (1,)
    assert d.make_attrs({"axis": [0, -1]}).axis == (0, -1)
    assert d.make_attrs({"axis": np.int64(2)}).axis == (2,)
    assert d.make_attrs({"axis": []}).axis is None          # Relay: an empty list means every axis
    assert d.make_attrs({"keepdims": 1}).keepdims is True
    with pytest.raises(ValueError, match=re.escape("sum: axis must be an int, got 'x'")):
        d.make_attrs({"axis": "x"})
    with pytest.raises(ValueError, match=re.escape("sum: keepdims must be True or False, got 2")):
        d.make_attrs({"keepdims": 2})
    with pytest.raises(ValueError, match="argmax: unknown attribute 'unbiased'"):
        get_opdef("argmax").make_attrs({"unbiased": True})


# ---------------------------------------------------------------------------------------------
# Values

@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "mean"])
def test_reductions(name, dtype):
    x = sample(dtype, name=name)
    tol = {"float32": 2e-6, "float64": 1e-12}.get(dtype, 0)
    for axis, keepdims, exclude in AXES:
        got = run(lambda a: getattr(op, name)(a, axis=axis, keepdims=keepdims, exclude=exclude), x)
        expected = reduce_python(PYTHON[name], x, axis, keepdims, exclude)
        assert got.dtype == dtype
        assert got.shape == expected.shape, (axis, keepdims, exclude)
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("name", ["all", "any"])
def test_logical_reductions(name):
    x = sample("bool", (3, 4, 2))
    x[0] = True          # some all-true and all-false rows
    x[1] = False
    for axis, keepdims, exclude in AXES:
        got = run(lambda a: getattr(op, name)(a, axis=axis, keepdims=keepdims, exclude=exclude), x)
        expected = reduce_python({"all": all, "any": any}[name], x, axis, keepdims, exclude)
        assert got.dtype == bool and got.tolist() == expected.tolist()


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "bool"])
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_reductions(name, dtype):
    rng = np.random.default_rng(3)
    x = rng.integers(0, 4, (3, 4, 5)).astype(dtype)       # many ties
    best = max if name == "argmax" else min
    for axis, keepdims, exclude in AXES:
        for last in (False, True):
            got = run(lambda a: getattr(op, name)(a, axis=axis, keepdims=keepdims, exclude=exclude,
                                                  select_last_index=last), x)
            pick = last_index if last else first_index
            expected = reduce_python(lambda vals: pick(vals, best), x, axis, keepdims, exclude,
                                     dtype="int32")
            assert got.dtype == np.int32
            assert got.tolist() == expected.tolist(), (axis, keepdims, exclude, last)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_variance_and_std(dtype):
    x = sample(dtype)
    for axis, keepdims, exclude in AXES:
        for unbiased in (False, True):
            if unbiased and len(reduced_axes(3, axis, exclude)) == 0:
                continue
            got = run(lambda a: op.variance(a, axis=axis, keepdims=keepdims, exclude=exclude,
                                            unbiased=unbiased), x)
            formula = statistics.variance if unbiased else statistics.pvariance
            if not reduced_axes(3, axis, exclude):
                formula = lambda vals: 0.0          # noqa: E731  (the variance of one value)
            expected = reduce_python(formula, x.astype("float64"), axis, keepdims, exclude)
            assert got.dtype == dtype
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    got = run(lambda a: op.std(a, axis=1), x)
    np.testing.assert_allclose(got, reduce_python(statistics.pstdev, x.astype("float64"), 1),
                               rtol=1e-5)


def test_variance_with_a_given_mean():
    x = np.array([[1.0, 2.0, 3.0, 6.0], [0.0, 0.0, 4.0, 4.0]], "float32")
    centre = np.array([[0.0], [2.0]], "float32")
    got = run(lambda a, c: op.variance(a, c, axis=1), x, centre)
    # mean of (x - centre)**2 per row: (1 + 4 + 9 + 36) / 4 and (4 + 4 + 4 + 4) / 4
    assert got.tolist() == [12.5, 4.0]


def test_integer_semantics():
    assert run(lambda a: op.sum(a), np.array([100, 100], "int8")).tolist() == -56   # wraps in int8
    x = np.array([[-3, -4], [3, 4], [1, 2]], "int32")
    assert run(lambda a: op.mean(a, axis=1), x).tolist() == [-3, 3, 1]         # truncated
    x = np.array([[1, 2, 3, 4]], "int32")
    assert run(lambda a: op.variance(a, axis=1), x).tolist() == [1]        # 5 / 4 truncated
    assert run(lambda a: op.prod(a, axis=0), np.array([[-3], [5]], "int64")).tolist() == [-15]


def test_scalars_and_empty_axes():
    assert run(lambda a: op.sum(a), np.array(2.5, "float32")).tolist() == 2.5
    assert run(lambda a: op.argmax(a), np.array(7, "int32")).tolist() == 0
    empty = np.zeros((2, 0), "float32")
    assert run(lambda a: op.sum(a, axis=1), empty).tolist() == [0.0, 0.0]
    assert run(lambda a: op.prod(a, axis=1), empty).tolist() == [1.0, 1.0]
    assert run(lambda a: op.all(a, axis=1), empty.astype(bool)).tolist() == [True, True]
    assert run(lambda a: op.max(a, axis=0), empty).shape == (0,)


# ---------------------------------------------------------------------------------------------
# The relation against numpy's reductions

axis_st = st.one_of(st.none(), st.integers(-5, 4), st.lists(st.integers(-5, 4), max_size=3))


def expected_error(ndim, axis):
    """The first problem in ``axis``, in order, as the relation reports it; None when fine."""
    if axis is None or axis == []:
        return None
    axis = [axis] if isinstance(axis, int) else axis
    seen = []
    for a in axis:
        if not -ndim <= a < ndim:
            return f"axis {a} is out of range for rank {ndim}"
        a %= ndim
        if a in seen:
            return f"axis {axis} names axis {a} twice"
        seen.append(a)
    return None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 4), max_size=4), axis_st, st.booleans(), st.booleans(),
       st.sampled_from(["sum", "argmin"]))
def test_reduce_shapes_agree_with_numpy(shape, axis, keepdims, exclude, name):
    call = getattr(op, name)(v("x", *shape), axis=axis, keepdims=keepdims, exclude=exclude)
    problem = expected_error(len(shape), axis)
    if problem is not None:
        with raises(f"{name}: {problem}") as info:
            infer_expr(call)
        assert info.value.relation == ("ReduceRel" if name == "sum" else "ArgReduceRel")
        return
    axes = reduced_axes(len(shape), None if axis == [] else axis, exclude)
    expected = np.sum(np.zeros(shape), axis=tuple(axes), keepdims=keepdims).shape
    assert infer_expr(call) == T(*expected, dtype="float32" if name == "sum" else "int32")


def test_symbolic_dims_are_kept():
    x = v("x", n, 3, m)
    assert infer_expr(op.sum(x, axis=1)) == T(n, m)
    assert infer_expr(op.mean(x, axis=1, keepdims=True)) == T(n, 1, m)
    assert infer_expr(op.max(x, axis=(0, 2))) == T(3)
    assert infer_expr(op.argmax(x, axis=1, exclude=True)) == T(3, dtype="int32")
    assert infer_expr(op.min(x, axis=-1, exclude=True, keepdims=True)) == T(1, 1, m)
    assert infer_expr(op.prod(v("y", None, 2 * n), axis=0)) == T(2 * n)
    assert infer_expr(op.sum(v("y", None, 4))) == T()
    assert infer_expr(op.variance(x, axis=0)) == T(3, m)
    assert infer_expr(op.variance(v("y", None, 4), v("c", 1, 4), axis=0)) == T(4)


@pytest.mark.parametrize("make, message, relation", [
    (lambda: op.sum(v("x", 2, dtype="bool")),
     "sum: data must be a numeric (integer or floating-point) tensor, got Tensor[(2), bool]", "ReduceRel"),
    (lambda: op.all(v("x", 2)), "all: data must be a bool tensor, got Tensor[(2), float32]", "ReduceRel"),
    (lambda: op.sum(v("x"), axis=0), "sum: axis 0 is out of range for rank 0", "ReduceRel"),
    (lambda: op.mean(v("x", 2, 3), axis=(1, -1)), "mean: axis [1, -1] names axis 1 twice", "ReduceRel"),
    (lambda: op.max(v("x", 2, 0), axis=1),
     "max: axis 1 of Tensor[(2, 0), float32] is empty, and the max of no elements is undefined", "ReduceRel"),
    (lambda: op.argmin(v("x", 0, 3), axis=1, exclude=True),
     "argmin: axis 0 of Tensor[(0, 3), float32] is empty, and the argmin of no elements is undefined",
     "ArgReduceRel"),
    (lambda: op.argmax(v("x", 2, 3), axis=2), "argmax: axis 2 is out of range for rank 2", "ArgReduceRel"),
    (lambda: op.variance(v("x", 2, 3), v("c", 2), axis=1),
     "variance: mean Tensor[(2), float32] must have the rank of data Tensor[(2, 3), float32] "
     "(a mean taken with keepdims=True)", "VarianceRel"),
    (lambda: op.variance(v("x", 2, 3), v("c", 3, 1), axis=1),
     "variance: mean Tensor[(3, 1), float32] does not broadcast to data Tensor[(2, 3), float32]: "
     "dimension 0 is 3, not 1 or 2", "VarianceRel"),
    (lambda: op.variance(v("x", 2, 3), v("c", 2, 1, dtype="float64"), axis=1),
     "variance: mean has dtype float64 but data has float32", "VarianceRel"),
    (lambda: op.variance(v("x", 2, 3, dtype="bool")),
     "mean: data must be a numeric (integer or floating-point) tensor, got Tensor[(2, 3), bool]",
     "ReduceRel"),
])
def test_errors(make, message, relation):
    with raises(message) as info:
        infer_expr(make())
    assert info.value.op == message.split(":")[0] and info.value.relation == relation


# ---------------------------------------------------------------------------------------------
# Text

def test_text_round_trip():
    x = v("x", 2, n, 4)
    body = rb.Tuple([
        op.sum(x, axis=[0, -1], keepdims=True, exclude=True),
        op.argmin(x, axis=1, select_last_index=True),
        op.variance(x, axis=(1, 2), unbiased=True),
        op.mean(x),
        op.any(op.less(x, rb.const(0.0))),
    ])
    mod = rb.IRModule.from_expr(rb.Function([x], body))
    text = mod.astext()
    assert "sum(%x, axis=[0, -1], keepdims=True, exclude=True)" in text
    assert "argmin(%x, axis=[1], select_last_index=True)" in text
    assert re.search(r"%(\d+) = mean\(%x, axis=\[1, 2\], keepdims=True\);\n"
                     r"  %\d+ = variance\(%x, %\1, axis=\[1, 2\], unbiased=True\)", text)
    back = rb.parse(text)
    assert rb.structural_equal(back, mod)
    assert rb.passes.InferType()(back)["main"].body.checked_type.fields[2] == T(2)


def test_docstring_examples():
    from relaybench.op import reduce
    result = doctest.testmod(reduce)
    assert result.attempted >= 4 and result.failed == 0
