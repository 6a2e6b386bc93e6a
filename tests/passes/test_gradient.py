"""Gradient: every rule against central finite differences (float64), through the interpreter.

Each check builds ``fn``, runs ``gradient(fn)`` and the original in the reference interpreter, and
compares: the forward value with the original's output, and each returned gradient with the
numeric gradient of ``sum(output)`` (the seed of ones). Inputs are kept away from kinks (0 for
relu/abs, ties for max) by more than the difference step.
"""

import doctest
import sys

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.errors import RelayError
from relaybench.ir import TensorType, TupleType
from relaybench.ir.type_infer import infer_expr
from relaybench.passes.gradient import GRADIENTS, gradient
from relaybench.testing import run_infer_type

F64 = "float64"
RNG = np.random.default_rng(0)


# ---------------------------------------------------------------------------------------------
# Helpers

def _run(func):
    return rb.create_executor("interpreter", mod=rb.IRModule.from_expr(func)).evaluate()


def _total(value) -> float:
    if isinstance(value, tuple):
        return sum(_total(v) for v in value)
    value = np.asarray(value)
    return float(value.sum()) if value.dtype.kind == "f" else 0.0


def numeric_grad(run, args, i, h=1e-5):
    """Central differences of ``sum(run(*args))`` with respect to ``args[i]``."""
    args = [np.array(a, copy=True) for a in args]
    x = args[i]
    out = np.zeros(x.shape, dtype=np.float64)
    for idx in np.ndindex(*x.shape):
        orig = x[idx]
        x[idx] = orig + h
        up = _total(run(*args))
        x[idx] = orig - h
        down = _total(run(*args))
        x[idx] = orig
        out[idx] = (up - down) / (2 * h)
    return out


def _assert_close(actual, expected, rtol, atol):
    if isinstance(expected, tuple):
        assert isinstance(actual, tuple) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _assert_close(a, e, rtol, atol)
    else:
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def check_gradient(params, body, args, rtol=1e-4, atol=1e-6, skip=()):
    """Differentiate ``fn(params) = body``; compare value and gradients with the interpreter and
    finite differences. Returns the gradients."""
    func = rb.Function(params, body)
    grad_fn = gradient(func)
    out, grads = _run(grad_fn)(*args)
    run = _run(func)
    _assert_close(out, run(*args), 1e-12, 1e-12)
    assert len(grads) == len(params)
    for i, (p, g) in enumerate(zip(params, grads)):
        a = np.asarray(args[i])
        assert g.shape == a.shape and g.dtype == a.dtype, p.name_hint
        if a.dtype.kind != "f":
            assert not g.any(), f"integer input %{p.name_hint} has a nonzero gradient"
            continue
        if i in skip:
            continue
        np.testing.assert_allclose(g, numeric_grad(run, args, i), rtol=rtol, atol=atol,
                                   err_msg=f"gradient of %{p.name_hint}")
    return grads


def v(name, shape, dtype=F64):
    return rb.var(name, shape=shape, dtype=dtype)


def rand(*shape, low=-1.0, high=1.0):
    return RNG.uniform(low, high, size=shape).astype(F64)


def away_from_zero(*shape, margin=0.1):
    x = rand(*shape)
    return np.where(x >= 0, x + margin, x - margin)


def distinct(*shape):
    """Values with no ties (for max, maximum and max_pool)."""
    n = int(np.prod(shape))
    return (RNG.permutation(n) / n * 2 - 1 + RNG.uniform(0, 0.1 / n, n)).reshape(shape).astype(F64)


# ---------------------------------------------------------------------------------------------
# The hand-computed case and the output convention

def test_sum_of_squares_is_two_x():
    x = rb.var("x", shape=(4,))
    grad_fn = gradient(rb.Function([x], op.sum(x * x)))
    data = np.array([1.0, -2.0, 3.0, 0.5], dtype="float32")
    out, (dx,) = _run(grad_fn)(data)
    assert out == pytest.approx(14.25)
    np.testing.assert_array_equal(dx, 2 * data)


def test_gradient_type_is_value_and_tuple_of_gradients():
    x, w = v("x", (2, 3)), v("w", (4, 3))
    grad_fn = gradient(rb.Function([x, w], op.nn.dense(x, w)))
    mod = rb.passes.InferType()(rb.IRModule.from_expr(grad_fn))
    ft = mod["main"].checked_type
    assert ft.ret_type == TupleType([TensorType((2, 4), F64),
                                     TupleType([TensorType((2, 3), F64), TensorType((4, 3), F64)])])


def test_seed_is_ones_for_a_tensor_output():
    # d/dx of x * 3 with a seed of ones is 3 everywhere, whatever the shape
    x = v("x", (2, 3))
    out, (dx,) = _run(gradient(rb.Function([x], x * rb.const(3.0, F64))))(np.ones((2, 3)))
    np.testing.assert_array_equal(dx, np.full((2, 3), 3.0))


# ---------------------------------------------------------------------------------------------
# Elementwise and broadcasting rules

UNARY = [
    ("negative", op.negative, rand),
    ("exp", op.exp, rand),
    ("log", op.log, lambda *s: rand(*s, low=0.5, high=2.0)),
    ("sqrt", op.sqrt, lambda *s: rand(*s, low=0.5, high=2.0)),
    ("rsqrt", op.rsqrt, lambda *s: rand(*s, low=0.5, high=2.0)),
    ("sigmoid", op.sigmoid, rand),
    ("tanh", op.tanh, rand),
    ("erf", op.erf, rand),
    ("abs", op.abs, away_from_zero),
    ("nn.relu", op.nn.relu, away_from_zero),
    ("nn.leaky_relu", lambda x: op.nn.leaky_relu(x, alpha=0.2), away_from_zero),
    ("clip", lambda x: op.clip(x, a_min=-0.5, a_max=0.5),
     lambda *s: np.where(np.abs(np.abs(rand(*s)) - 0.5) < 0.05, 0.3, rand(*s))),
]


@pytest.mark.parametrize("name,build,data", UNARY, ids=[u[0] for u in UNARY])
def test_unary(name, build, data):
    x = v("x", (2, 3))
    # multiply by a non-constant weight so the seed is not uniform
    w = v("w", (2, 3))
    check_gradient([x, w], op.multiply(build(x), w), [data(2, 3), rand(2, 3)])


BINARY = [
    ("add", op.add, rand, rand),
    ("subtract", op.subtract, rand, rand),
    ("multiply", op.multiply, rand, rand),
    ("divide", op.divide, rand, lambda *s: rand(*s, low=0.5, high=2.0)),
    ("power", op.power, lambda *s: rand(*s, low=0.5, high=2.0), rand),
    ("maximum", op.maximum, distinct, lambda *s: distinct(*s) + 0.013),
    ("minimum", op.minimum, distinct, lambda *s: distinct(*s) + 0.013),
]


@pytest.mark.parametrize("name,build,da,db", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("shapes", [((2, 3), (2, 3)), ((2, 1, 3), (4, 1)), ((3,), (2, 3)), ((), (2, 3))],
                         ids=["same", "both-broadcast", "rank-broadcast", "scalar"])
def test_binary_with_broadcasting(name, build, da, db, shapes):
    sa, sb = shapes
    a, b = v("a", sa), v("b", sb)
    out_shape = np.broadcast_shapes(sa, sb)
    w = v("w", out_shape)
    check_gradient([a, b, w], op.multiply(build(a, b), w), [da(*sa), db(*sb), rand(*out_shape)])


def test_power_with_constant_exponent():
    x = v("x", (5,))
    check_gradient([x], op.power(x, rb.const(3.0, F64)), [rand(5)])
    # with a constant exponent no log of the base is built
    grad_fn = gradient(rb.Function([x], op.power(x, rb.const(3.0, F64))))
    assert "log" not in rb.ir.op_histogram(grad_fn)


def test_where_and_cast():
    c, x, y = v("c", (2, 3), "bool"), v("x", (2, 3)), v("y", (3,))
    mask = np.array([[True, False, True], [False, False, True]])
    check_gradient([c, x, y], op.where(c, x, y) * op.exp(x), [mask, rand(2, 3), rand(3)])
    # through float32 and back: d/dx sum(cast(cast(x) * 2) * x) = 4x (up to float32 rounding)
    x = v("x", (4,))
    data = rand(4)
    (dx,) = check_gradient([x], op.cast(op.cast(x, dtype="float32") * rb.const(2.0), dtype=F64) * x,
                           [data], skip=(0,))
    np.testing.assert_allclose(dx, 4 * data, rtol=1e-6)


def test_fills_cast_like_and_dropout():
    x, value = v("x", (2, 3)), v("value", ())
    w = v("w", (2, 3))
    body = (op.full(value, shape=(2, 3), dtype=F64) * w + op.full_like(x, value) * x
            + op.nn.dropout(op.cast_like(x, w), rate=0.3)[0] * w)
    check_gradient([x, value, w], body, [rand(2, 3), np.array(0.7), rand(2, 3)])


def test_integer_parameter_gets_zero_gradient():
    x, i = v("x", (3,)), v("i", (3,), "int32")
    grads = check_gradient([x, i], x * op.cast(i, dtype=F64), [rand(3), np.array([1, 2, 3], "int32")])
    assert grads[1].dtype == np.int32


# ---------------------------------------------------------------------------------------------
# Reductions

@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("axis,keepdims,exclude", [(None, False, False), ((1,), False, False),
                                                   ((0, 2), True, False), ((-1,), False, True)])
def test_sum_and_mean(reduce, axis, keepdims, exclude):
    x = v("x", (2, 3, 4))
    y = getattr(op, reduce)(x, axis=axis, keepdims=keepdims, exclude=exclude)
    w = v("w", infer_expr(y).shape)
    check_gradient([x, w], op.multiply(op.exp(y), w), [rand(2, 3, 4), rand(*w.type_annotation.shape)])


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_max_and_min(reduce):
    x = v("x", (3, 4))
    y = getattr(op, reduce)(x, axis=1)
    w = v("w", (3,))
    check_gradient([x, w], y * w, [distinct(3, 4), rand(3)])


# ---------------------------------------------------------------------------------------------
# Shape and layout rules

def _weighted(y_expr, shape):
    w = v("w", shape)
    return w, op.multiply(y_expr, w)


@pytest.mark.parametrize("case", ["reshape", "batch_flatten", "transpose", "transpose-default", "squeeze",
                                  "expand_dims", "broadcast_to", "reshape_like"])
def test_shape_ops(case):
    x = v("x", (2, 1, 3))
    build = {
        "reshape": lambda: op.reshape(x, newshape=(3, 2)),
        "batch_flatten": lambda: op.nn.batch_flatten(x),
        "transpose": lambda: op.transpose(x, axes=(2, 0, 1)),
        "transpose-default": lambda: op.transpose(x),
        "squeeze": lambda: op.squeeze(x, axis=[1]),
        "expand_dims": lambda: op.expand_dims(x, axis=1, num_newaxis=2),
        "broadcast_to": lambda: op.broadcast_to(x, shape=(4, 2, 5, 3)),
        "reshape_like": lambda: op.reshape_like(x, rb.const(np.zeros((6,)), F64)),
    }[case]
    y = build()
    w, body = _weighted(y, infer_expr(y).shape)
    check_gradient([x, w], body, [rand(2, 1, 3), rand(*w.type_annotation.shape)])


def test_concatenate_and_split():
    a, b = v("a", (2, 3)), v("b", (2, 4))
    cat = op.concatenate(rb.Tuple([a, b]), axis=1)
    parts = op.split(op.exp(cat), indices_or_sections=[2, 5], axis=1)
    # only two of the three pieces are used: the third's adjoint is zero
    body = op.sum(parts[0] * parts[0]) + op.sum(op.tanh(parts[2]))
    check_gradient([a, b], body, [rand(2, 3), rand(2, 4)])


def test_stack():
    a, b = v("a", (3,)), v("b", (3,))
    y = op.stack(rb.Tuple([a, op.exp(b)]), axis=1)
    w, body = _weighted(y, (3, 2))
    check_gradient([a, b, w], body, [rand(3), rand(3), rand(3, 2)])


@pytest.mark.parametrize("mode,axis", [("clip", 0), ("clip", 1), ("wrap", None), ("fast", -1)])
def test_take(mode, axis):
    x = v("x", (3, 4))
    idx = np.array([[0, 2], [2, 5 if mode != "fast" else 1]], dtype="int32")
    if mode == "wrap":
        idx = np.array([[0, 13], [-1, 2]], dtype="int32")
    i = v("i", idx.shape, "int32")
    y = op.take(x, i, axis=axis, mode=mode)
    w, body = _weighted(y, infer_expr(y).shape)
    check_gradient([x, i, w], body, [rand(3, 4), idx, rand(*w.type_annotation.shape)])


@pytest.mark.parametrize("begin,end,strides,axes", [
    ((1, 0), (3, 5), None, None),
    ((0, 1), (4, 5), (2, 3), None),
    ((3,), (0,), (-1,), None),
    ((1,), (6,), (2,), (1,)),
    ((0, 4), (-1, 0), (2, -2), None),
])
def test_strided_slice(begin, end, strides, axes):
    x = v("x", (4, 6))
    y = op.strided_slice(x, begin=begin, end=end, strides=strides, axes=axes)
    w, body = _weighted(y, infer_expr(y).shape)
    check_gradient([x, w], body, [rand(4, 6), rand(*w.type_annotation.shape)])


def test_pad_repeat_tile():
    x, value = v("x", (2, 3)), v("value", ())
    y = op.nn.pad(x, value, pad_width=((1, 0), (2, 1)))
    w, body = _weighted(y, (3, 6))
    check_gradient([x, value, w], body, [rand(2, 3), np.array(0.5), rand(3, 6)])
    y = op.repeat(x, repeats=2, axis=1)
    w, body = _weighted(y, (2, 6))
    check_gradient([x, w], body, [rand(2, 3), rand(2, 6)])
    y = op.tile(x, reps=(2, 1, 2))
    w, body = _weighted(y, (2, 2, 6))
    check_gradient([x, w], body, [rand(2, 3), rand(2, 2, 6)])


# ---------------------------------------------------------------------------------------------
# Matrix products, bias, softmax

def test_dense_and_bias_add():
    x, w, b = v("x", (3, 5)), v("w", (4, 5)), v("b", (4,))
    y = op.nn.bias_add(op.nn.dense(x, w), b)
    check_gradient([x, w, b], op.tanh(y), [rand(3, 5), rand(4, 5), rand(4)])


def test_dense_with_leading_axes():
    x, w = v("x", (2, 3, 5)), v("w", (4, 5))
    check_gradient([x, w], op.tanh(op.nn.dense(x, w)), [rand(2, 3, 5), rand(4, 5)])
    x = v("x", (5,))
    check_gradient([x, w], op.tanh(op.nn.dense(x, w)), [rand(5), rand(4, 5)])
    a, b = v("a", (5,)), v("b", (5, 4))
    check_gradient([a, b], op.tanh(op.nn.matmul(a, b)), [rand(5), rand(5, 4)])


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul(ta, tb):
    a_shape = (2, 5, 3) if ta else (2, 3, 5)
    b_shape = (4, 5) if tb else (5, 4)
    a, b = v("a", a_shape), v("b", b_shape)
    y = op.nn.matmul(a, b, transpose_a=ta, transpose_b=tb)
    check_gradient([a, b], op.tanh(y), [rand(*a_shape), rand(*b_shape)])


@pytest.mark.parametrize("ta,tb", [(False, True), (False, False), (True, False), (True, True)])
@pytest.mark.parametrize("batches", [(2, 2), (1, 2)])
def test_batch_matmul(ta, tb, batches):
    bx, by = batches
    xs = (bx, 5, 3) if ta else (bx, 3, 5)
    ys = (by, 4, 5) if tb else (by, 5, 4)
    x, y = v("x", xs), v("y", ys)
    out = op.nn.batch_matmul(x, y, transpose_a=ta, transpose_b=tb)
    check_gradient([x, y], op.tanh(out), [rand(*xs), rand(*ys)])


@pytest.mark.parametrize("kind", ["softmax", "log_softmax"])
@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax(kind, axis):
    x = v("x", (3, 4))
    y = getattr(op.nn, kind)(x, axis=axis)
    w, body = _weighted(y, (3, 4))
    check_gradient([x, w], body, [rand(3, 4), rand(3, 4)])


def test_prelu():
    x, alpha = v("x", (2, 3, 2)), v("alpha", (3,))
    y = op.nn.prelu(x, alpha, axis=1)
    w, body = _weighted(y, (2, 3, 2))
    check_gradient([x, alpha, w], body, [away_from_zero(2, 3, 2), rand(3), rand(2, 3, 2)])


def test_batch_norm_inference():
    x = v("x", (2, 3, 2, 2))
    gamma, beta, mean, var = v("gamma", (3,)), v("beta", (3,)), v("mean", (3,)), v("var", (3,))
    y = op.nn.batch_norm(x, gamma, beta, mean, var, epsilon=1e-3)
    w, body = _weighted(y[0], (2, 3, 2, 2))
    # the moving statistics are also outputs (the inputs passed through): use them too
    body = body + op.sum(y[1] * y[1]) + op.sum(op.exp(y[2]))
    check_gradient([x, gamma, beta, mean, var, w], body,
                   [rand(2, 3, 2, 2), rand(3), rand(3), rand(3), rand(3, low=0.5, high=1.5),
                    rand(2, 3, 2, 2)])


@pytest.mark.parametrize("axis", [-1, 1])
def test_layer_norm(axis):
    c = 4 if axis == -1 else 3
    x, gamma, beta = v("x", (2, 3, 4)), v("gamma", (c,)), v("beta", (c,))
    y = op.nn.layer_norm(x, gamma, beta, axis=axis, epsilon=1e-3)
    w, body = _weighted(y, (2, 3, 4))
    check_gradient([x, gamma, beta, w], body, [rand(2, 3, 4), rand(c), rand(c), rand(2, 3, 4)])


def test_batch_norm_without_scale_and_center():
    x, gamma, beta, mean, var = v("x", (2, 3)), v("g", (3,)), v("b", (3,)), v("m", (3,)), v("s", (3,))
    y = op.nn.batch_norm(x, gamma, beta, mean, var, axis=1, scale=False, center=False)[0]
    w, body = _weighted(y, (2, 3))
    grads = check_gradient([x, gamma, beta, mean, var, w], body,
                           [rand(2, 3), rand(3), rand(3), rand(3), rand(3, low=0.5, high=1.5), rand(2, 3)])
    assert not grads[1].any() and not grads[2].any()


# ---------------------------------------------------------------------------------------------
# Convolution and pooling

CONV = [
    dict(),
    dict(strides=(2, 2)),
    dict(padding=(1, 2)),
    dict(strides=(2, 1), padding=(1, 0, 2, 1), dilation=(2, 1)),
    dict(strides=(3, 3), padding=(1, 1)),
    dict(groups=2),
    dict(groups=4, padding=(1, 1), strides=(2, 2)),
]


@pytest.mark.parametrize("attrs", CONV, ids=[str(a) for a in CONV])
def test_conv2d(attrs):
    groups = attrs.get("groups", 1)
    x, w = v("x", (2, 4, 7, 6)), v("w", (6 if groups != 4 else 4, 4 // groups, 3, 2))
    y = op.nn.conv2d(x, w, kernel_size=(3, 2), **attrs)
    wy, body = _weighted(y, infer_expr(y).shape)
    check_gradient([x, w, wy], body, [rand(2, 4, 7, 6), rand(*w.type_annotation.shape),
                                      rand(*wy.type_annotation.shape)])


POOL = [
    dict(pool_size=(2, 2), strides=(2, 2)),
    dict(pool_size=(3, 3), strides=(2, 2), padding=(1, 1)),
    dict(pool_size=(3, 2), strides=(1, 2), padding=(0, 1, 2, 0)),
    dict(pool_size=(2, 2), strides=(2, 2), dilation=(2, 1), ceil_mode=True),
    dict(pool_size=(3, 3), strides=(3, 3), ceil_mode=True, padding=(1, 1)),
]


@pytest.mark.parametrize("attrs", POOL, ids=[str(a) for a in POOL])
def test_max_pool2d(attrs):
    x = v("x", (2, 2, 7, 6))
    y = op.nn.max_pool2d(x, **attrs)
    w, body = _weighted(y, infer_expr(y).shape)
    check_gradient([x, w], body, [distinct(2, 2, 7, 6), rand(*w.type_annotation.shape)])


def test_max_pool2d_ties_go_to_the_first_tap():
    # on a constant input every tap of a window holds the maximum: the first one (row-major)
    # gets the window's adjoint, as an argmax would pick
    x = v("x", (1, 1, 4, 4))
    y = op.nn.max_pool2d(x, pool_size=(2, 2), strides=(2, 2))
    w = v("w", (1, 1, 2, 2))
    weights = np.array([[[[1.0, 2.0], [3.0, 4.0]]]])
    _, (dx, _) = _run(gradient(rb.Function([x, w], y * w)))(np.ones((1, 1, 4, 4)), weights)
    expected = np.zeros((4, 4))
    expected[0::2, 0::2] = [[1.0, 2.0], [3.0, 4.0]]
    np.testing.assert_array_equal(dx[0, 0], expected)


@pytest.mark.parametrize("include_pad", [False, True])
@pytest.mark.parametrize("attrs", POOL, ids=[str(a) for a in POOL])
def test_avg_pool2d(attrs, include_pad):
    x = v("x", (2, 2, 7, 6))
    y = op.nn.avg_pool2d(x, count_include_pad=include_pad, **attrs)
    w, body = _weighted(y, infer_expr(y).shape)
    check_gradient([x, w], body, [rand(2, 2, 7, 6), rand(*w.type_annotation.shape)])


def test_pools_in_nhwc():
    x = v("x", (1, 5, 4, 3))
    y = op.nn.max_pool2d(x, pool_size=(2, 2), strides=(1, 2), layout="NHWC")
    w, body = _weighted(y, infer_expr(y).shape)
    check_gradient([x, w], body, [distinct(1, 5, 4, 3), rand(*w.type_annotation.shape)])
    y = op.nn.avg_pool2d(x, pool_size=(3, 2), padding=(1, 0), layout="NHWC")
    w, body = _weighted(y, infer_expr(y).shape)
    check_gradient([x, w], body, [rand(1, 5, 4, 3), rand(*w.type_annotation.shape)])


@pytest.mark.parametrize("kind", ["global_avg_pool2d", "global_max_pool2d"])
def test_global_pools(kind):
    x = v("x", (2, 3, 3, 4))
    y = getattr(op.nn, kind)(x)
    w, body = _weighted(y, (2, 3, 1, 1))
    check_gradient([x, w], body, [distinct(2, 3, 3, 4), rand(2, 3, 1, 1)])


# ---------------------------------------------------------------------------------------------
# Graph structure: sharing, tuples, lets, if

def test_node_used_several_times_accumulates():
    x = v("x", (3,))
    e = op.exp(x)
    body = e * e + op.tanh(e) * e        # e is used four times
    check_gradient([x], body, [rand(3)])
    xs = np.array([0.1, -0.3, 0.7])
    _, (dx,) = _run(gradient(rb.Function([x], body)))(xs)
    ex = np.exp(xs)
    # d/dx (e^2 + tanh(e) e) = (2e + (1 - tanh(e)^2) e + tanh(e)) e
    np.testing.assert_allclose(dx, (2 * ex + (1 - np.tanh(ex) ** 2) * ex + np.tanh(ex)) * ex, rtol=1e-12)


def test_parameter_used_twice_in_one_call():
    x = v("x", (2, 2))
    _, (dx,) = _run(gradient(rb.Function([x], op.nn.dense(x, x))))(np.eye(2))
    # sum(x @ x.T): d/dx = (ones @ x) + (ones.T @ x)... for x = I: each entry 2
    np.testing.assert_allclose(dx, np.full((2, 2), 2.0))


def test_tuples_and_projections():
    a, b = v("a", (2,)), v("b", (2,))
    t = rb.Tuple([op.exp(a), a * b, b])
    body = op.sum(t[0] * t[1]) + op.sum(op.tanh(t[1])) * rb.const(2.0, F64)
    check_gradient([a, b], body, [rand(2), rand(2)])


def test_tuple_output():
    a, b = v("a", (2,)), v("b", (3,))
    body = rb.Tuple([op.exp(a), op.sum(b * b)])
    func = rb.Function([a, b], body)
    out, (da, db) = _run(gradient(func))(np.array([0.0, 1.0]), np.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(da, np.exp([0.0, 1.0]))
    np.testing.assert_allclose(db, [2.0, 4.0, 6.0])


def test_tuple_parameter():
    t = rb.var("t", rb.ir.TupleType([TensorType((2,), F64), TensorType((2,), F64)]))
    body = op.sum(t[0] * t[0] * rb.const(3.0, F64))
    out, (dt,) = _run(gradient(rb.Function([t], body)))((np.array([1.0, 2.0]), np.array([5.0, 6.0])))
    assert isinstance(dt, tuple)
    np.testing.assert_allclose(dt[0], [6.0, 12.0])
    np.testing.assert_array_equal(dt[1], [0.0, 0.0])


def test_unused_parameter_and_constant_paths():
    x, y = v("x", (2,)), v("y", (2,))
    body = op.exp(rb.const(np.array([1.0, 2.0]), F64)) * x
    out, (dx, dy) = _run(gradient(rb.Function([x, y], body)))(np.ones(2), np.ones(2))
    np.testing.assert_allclose(dx, np.exp([1.0, 2.0]))
    np.testing.assert_array_equal(dy, [0.0, 0.0])


def test_a_normal_form_lets():
    text = """
    #[version = "0.0.5"]
    def @main(%x: Tensor[(3), float64], %w: Tensor[(3), float64]) {
      let %a = multiply(%x, %w);
      let %b = exp(%a);
      let %c = add(%b, %a);
      multiply(%c, %x)
    }
    """
    func = rb.parse(text)["main"]
    check_gradient(list(func.params), func.body, [rand(3), rand(3)])


def test_if_branches_are_differentiated_separately():
    c, x, y = v("c", (), "bool"), v("x", (3,)), v("y", (3,))
    shared = op.exp(x)
    body = rb.If(c, shared * y, op.tanh(shared) + x) * shared
    func = rb.Function([c, x, y], body)
    grad_fn = gradient(func)
    # the backward pass branches too: an If besides the forward one
    ifs = [n for n in rb.ir.post_order(grad_fn) if isinstance(n, rb.If)]
    assert len(ifs) == 2
    # the gradient program prints and parses back
    mod = rb.passes.InferType()(rb.IRModule.from_expr(grad_fn))
    rb.ir.assert_structural_equal(run_infer_type(rb.parse(mod.astext())), run_infer_type(mod))
    for flag in (True, False):
        check_gradient([c, x, y], body, [np.array(flag), rand(3), rand(3)])


def test_if_on_a_condition_computed_from_the_parameters():
    x = v("x", (3,))
    s = op.sum(x)
    body = rb.If(op.greater(s, rb.const(0.0, F64)), x * s, op.negative(x) * op.exp(s))
    for data in (rand(3, low=0.2, high=1.0), rand(3, low=-1.0, high=-0.2)):
        check_gradient([x], body, [data])


def test_nested_if_and_let_inside_branch():
    text = """
    #[version = "0.0.5"]
    def @main(%c: bool, %d: bool, %x: Tensor[(2), float64], %y: Tensor[(2), float64]) {
      let %s = multiply(%x, %y);
      let %r = if (%c) {
        let %t = exp(%s);
        if (%d) { multiply(%t, %x) } else { %y }
      } else {
        tanh(%s)
      };
      add(%r, %s)
    }
    """
    func = rb.parse(text)["main"]
    for c, d in [(True, True), (True, False), (False, True)]:
        check_gradient(list(func.params), func.body, [np.array(c), np.array(d), rand(2), rand(2)])


# ---------------------------------------------------------------------------------------------
# End-to-end models

def test_symbolic_batch():
    # a batch dimension n (Relax-style symbolic shape): one gradient program for every batch size
    x, w, b = v("x", ("n", 4)), v("w", (3, 4)), v("b", (3,))
    body = op.nn.log_softmax(op.nn.bias_add(op.nn.dense(x, w), b)) * rb.const(np.array([1.0, 2.0, 3.0]))
    body = op.sum(op.tanh(body), axis=1)
    for n in (1, 3):
        check_gradient([x, w, b], body, [rand(n, 4), rand(3, 4), rand(3)])


def test_mlp():
    x, w1, b1, w2, b2 = v("x", (4, 6)), v("w1", (5, 6)), v("b1", (5,)), v("w2", (3, 5)), v("b2", (3,))
    h = op.nn.relu(op.nn.bias_add(op.nn.dense(x, w1), b1))
    logits = op.nn.bias_add(op.nn.dense(h, w2), b2)
    loss = op.negative(op.mean(op.nn.log_softmax(logits)))
    check_gradient([x, w1, b1, w2, b2], loss,
                   [rand(4, 6), rand(5, 6), rand(5), rand(3, 5), rand(3)])


def test_cnn():
    x = v("x", (2, 2, 8, 8))
    w1, b1 = v("w1", (4, 2, 3, 3)), v("b1", (4,))
    wd, bd = v("wd", (3, 4 * 4 * 4)), v("bd", (3,))
    h = op.nn.relu(op.nn.bias_add(op.nn.conv2d(x, w1, padding=(1, 1)), b1))
    h = op.nn.max_pool2d(h, pool_size=(2, 2), strides=(2, 2))
    logits = op.nn.bias_add(op.nn.dense(op.nn.batch_flatten(h), wd), bd)
    labels = rb.const(np.eye(3)[[0, 2]], F64)
    loss = op.negative(op.sum(op.nn.log_softmax(logits) * labels))
    args = [rand(2, 2, 8, 8), rand(4, 2, 3, 3), rand(4), rand(3, 64), rand(3)]
    check_gradient([x, w1, b1, wd, bd], loss, args, rtol=1e-4, atol=1e-6)


class _ToFloat64(rb.ir.ExprMutator):
    """A float32 program in float64 (parameters and constants), for exact finite differences."""

    def visit_var(self, var):
        t = var.type_annotation
        return rb.var(var.name_hint, shape=t.shape, dtype=F64) if t.dtype == "float32" else var

    def visit_constant(self, c):
        return rb.const(c.data.astype(F64)) if c.data.dtype == np.float32 else c


def test_model_zoo_resnet18_directional_derivatives():
    # ResNet-18 (conv, batch_norm, max_pool with padding, residual adds, global pool, dense) in
    # float64: <gradient, d> equals the central difference of the output along random directions d
    mod, params = rb.models.get("resnet18", batch_size=1, image_shape=(3, 16, 16), num_classes=10)
    f64 = _ToFloat64().visit(mod["main"])
    f64 = rb.passes.InferType()(rb.IRModule.from_expr(f64))["main"]
    weights = rb.const(RNG.standard_normal((1, 10)))      # softmax sums to 1: weight the outputs
    func = rb.Function(f64.params, op.multiply(f64.body, weights))
    args = [RNG.uniform(0, 1, size=(1, 3, 16, 16))]
    args += [params[p.name_hint].astype(F64) for p in f64.params[1:]]
    out, grads = _run(gradient(func))(*args)
    run = _run(func)
    np.testing.assert_allclose(out, run(*args), rtol=1e-12)
    h = 1e-6
    for _ in range(2):
        dirs = [RNG.standard_normal(a.shape) * (a.std() + 1e-3) for a in args]
        up = _total(run(*[a + h * d for a, d in zip(args, dirs)]))
        down = _total(run(*[a - h * d for a, d in zip(args, dirs)]))
        analytic = sum(float((g * d).sum()) for g, d in zip(grads, dirs))
        assert analytic == pytest.approx((up - down) / (2 * h), rel=1e-5)


def test_model_zoo_dqn_through_the_pass():
    # a zoo model in float32 through the Gradient pass: the program type-checks and runs, and
    # its forward value is the model's
    mod, params = rb.models.get("dqn", batch_size=1)
    func = mod["main"]
    names = [p.name_hint for p in func.params]
    grad_mod = rb.passes.Gradient()(mod)
    ret = grad_mod["main"].checked_type.ret_type
    assert len(ret.fields[1].fields) == len(names)
    shape = [int(d) for d in func.params[0].type_annotation.shape]
    data = RNG.uniform(0, 1, size=shape).astype("float32")
    args = [data] + [params[n] for n in names[1:]]
    out, grads = _run(grad_mod["main"])(*args)
    np.testing.assert_allclose(out, _run(func)(*args), rtol=1e-5, atol=1e-5)
    for g, a in zip(grads, args):
        assert g.shape == np.asarray(a).shape and np.isfinite(g).all()


# ---------------------------------------------------------------------------------------------
# Depth, errors, the pass

def _chain(n):
    x = v("x", (3,))
    y = x
    c = rb.const(np.array([0.5, 1.0, 1.5]), F64)
    for i in range(n):
        y = op.multiply(y, c) if i % 3 == 0 else op.add(y, c) if i % 3 == 1 else op.tanh(y)
    return x, y


def test_chain_of_10000_ops_runs():
    assert sys.getrecursionlimit() < 20_000
    x, y = _chain(10_000)
    grad_fn = gradient(rb.Function([x], y))
    data = np.array([0.1, 0.2, 0.3])
    out, (dx,) = _run(grad_fn)(data)
    np.testing.assert_allclose(out, _run(rb.Function([x], y))(data))
    assert np.isfinite(dx).all()
    # against a forward-mode derivative computed by hand along the chain in numpy
    val, der = data.copy(), np.ones(3)
    c = np.array([0.5, 1.0, 1.5])
    for i in range(10_000):
        if i % 3 == 0:
            val, der = val * c, der * c
        elif i % 3 == 1:
            val = val + c
        else:
            val, der = np.tanh(val), der * (1 - np.tanh(val) ** 2)
    np.testing.assert_allclose(dx, der, rtol=1e-9, atol=1e-300)


# Deep enough that any recursion on program depth fails (Python stops at 1,000 frames);
# tests/test_scale.py takes 100,000 operators through the whole pipeline.
DEEP = 20_000


def test_deep_chain_of_ops_differentiates_and_typechecks():
    x, y = _chain(DEEP)
    grad_fn = gradient(rb.Function([x], y))
    mod = rb.passes.InferType()(rb.IRModule.from_expr(grad_fn))
    assert mod["main"].checked_type.ret_type.fields[1].fields[0] == TensorType((3,), F64)


def test_deeply_nested_ifs():
    # 1,500 ifs, each nested in the true branch of the previous: branch sweeps nest as deep
    c, x = v("c", (), "bool"), v("x", (2,))
    e = x
    k = rb.const(np.array(1.001))
    for _ in range(1500):
        e = rb.If(c, e * k, op.tanh(x))
    run = _run(gradient(rb.Function([c, x], e)))
    data = np.array([1.0, 2.0])
    _, (_, dx) = run(np.array(True), data)
    np.testing.assert_allclose(dx, np.full(2, 1.001 ** 1500), rtol=1e-12)
    _, (_, dx) = run(np.array(False), data)
    np.testing.assert_allclose(dx, 1 - np.tanh(data) ** 2, rtol=1e-12)


@pytest.mark.parametrize("text,message", [
    ("""#[version = "0.0.5"]
     def @main(%x: Tensor[(2), float32]) {
       let %f = fn (%y: Tensor[(2), float32]) { multiply(%y, %y) };
       %f(%x)
     }""", "closures"),
    ("""#[version = "0.0.5"]
     def @sq(%y: Tensor[(2), float32]) { multiply(%y, %y) }
     def @main(%x: Tensor[(2), float32]) { @sq(%x) }""", "calls of global functions"),
    ("""#[version = "0.0.5"]
     def @main(%x: Tensor[(2), float32]) {
       let %r = ref(%x);
       ref_read(%r)
     }""", "references"),
    ("""#[version = "0.0.5"]
     type Box { B(Tensor[(2), float32]) }
     def @main(%x: Tensor[(2), float32], %b: Box) {
       match (%b) { B(%y) => multiply(%y, %x) }
     }""", "match expressions are not supported"),
    ("""#[version = "0.0.5"]
     type Box { B(Tensor[(2), float32]) }
     def @main(%x: Tensor[(2), float32]) -> Box { B(%x) }""", "ADT constructors are not supported"),
])
def test_unsupported_constructs_are_named(text, message):
    mod = rb.parse(text)
    with pytest.raises(RelayError, match=message) as err:
        gradient(mod["main"], mod)
    # the message names the node: what it is and where the parser found it
    assert str(err.value).startswith("Gradient: ") and "(the " in str(err.value)
    assert "<string>:" in str(err.value)


def test_fused_functions_are_refused():
    x = rb.var("x", shape=(2,))
    p = rb.var("p", shape=(2,))
    fused = rb.Function([p], op.exp(p)).with_attr("Primitive", 1)
    with pytest.raises(RelayError, match="fused .Primitive. functions are not supported"):
        gradient(rb.Function([x], rb.Call(fused, [x])))


def test_operator_without_rule_is_named():
    x = rb.var("x", shape=(1, 3, 4, 4))
    assert "nn.lrn" not in GRADIENTS
    with pytest.raises(RelayError, match=r"Gradient: no gradient rule for the operator nn\.lrn "
                                         r"\(the nn\.lrn call: nn\.lrn\(%0\)\)"):
        gradient(rb.Function([x], op.nn.lrn(op.exp(x))))


def test_conv2d_in_nhwc_is_refused_with_the_reason():
    x, w = rb.var("x", shape=(1, 5, 5, 2)), rb.var("w", shape=(3, 3, 2, 4))
    func = rb.Function([x, w], op.nn.conv2d(x, w, data_layout="NHWC", kernel_layout="HWIO"))
    with pytest.raises(RelayError, match="nn.conv2d: gradients need data_layout NCHW"):
        gradient(func)


def test_gradient_pass_on_a_module():
    text = """
    #[version = "0.0.5"]
    def @helper(%a: Tensor[(2), float32]) -> Tensor[(2), float32] { add(%a, %a) }
    def @main(%x: Tensor[(2), float32], %y: Tensor[(2), float32]) -> Tensor[(2), float32] {
      multiply(%x, %y)
    }
    """
    mod = rb.parse(text)
    factory = rb.passes.Gradient
    assert factory.info.opt_level == 4
    out = factory()(mod)
    assert out is not mod
    rb.ir.assert_structural_equal(run_infer_type(out["helper"]), run_infer_type(mod["helper"]))
    ft = out["main"].checked_type
    t2 = TensorType((2,), "float32")
    assert ft.ret_type == TupleType([t2, TupleType([t2, t2])])
    xs, ys = np.array([1.0, 2.0], "float32"), np.array([3.0, -1.0], "float32")
    value, (dx, dy) = rb.create_executor("interpreter", mod=out).evaluate()(xs, ys)
    np.testing.assert_array_equal(value, xs * ys)
    np.testing.assert_array_equal(dx, ys)
    np.testing.assert_array_equal(dy, xs)
    # by name in a pipeline string, on another function; a pipeline runs it only when asked for
    assert rb.passes.parse_pipeline("gradient{func_name=helper}")(mod) is mod
    with rb.PassContext(required_pass=["Gradient"]):
        other = rb.passes.parse_pipeline("gradient{func_name=helper}")(mod)
    _, (da,) = rb.create_executor("interpreter", mod=other).evaluate(other.get_global_var("helper"))(xs)
    np.testing.assert_array_equal(da, [2.0, 2.0])
    # a context below opt_level 4 skips it in a Sequential
    with rb.PassContext(opt_level=3):
        assert rb.passes.Sequential([factory()])(mod) is mod


def test_docstring_examples():
    from relaybench.passes import gradient as module
    result = doctest.testmod(module)
    assert result.attempted >= 3 and result.failed == 0


def test_gradient_pass_names_a_missing_function():
    x = rb.var("x", shape=(2,))
    mod = rb.IRModule.from_expr(rb.Function([x], x))
    with pytest.raises(RelayError, match="@nope"):
        rb.passes.Gradient(func_name="nope")(mod)
