"""sin ... atanh, bitwise_*, reinterpret, einsum and scatter_elements against numpy, on the
interpreter and (for the ops with a kernel) compiled for LLVM."""

from __future__ import annotations

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.errors import TypeInferenceError
from relaybench.ir.type_infer import infer_expr

RNG = np.random.default_rng(7)

# (op, numpy formula written independently, input range, has a kernel)
MATH = [
    ("sin", np.sin, (-3, 3), True), ("cos", np.cos, (-3, 3), True), ("tan", np.tan, (-1.2, 1.2), True),
    ("asin", np.arcsin, (-0.99, 0.99), False), ("acos", np.arccos, (-0.99, 0.99), False),
    ("atan", np.arctan, (-5, 5), False), ("sinh", np.sinh, (-3, 3), True),
    ("cosh", np.cosh, (-3, 3), True), ("asinh", np.arcsinh, (-5, 5), True),
    ("acosh", np.arccosh, (1.01, 5), True), ("atanh", np.arctanh, (-0.95, 0.95), True),
]


def _run(fn, *args, target="interpreter"):
    mod = rb.IRModule.from_expr(fn)
    if target == "interpreter":
        return rb.create_executor("interpreter", mod=mod).evaluate()(*args)
    lib = rb.build(mod, target=target)
    return lib.run(**{p.name_hint: a for p, a in zip(fn.params, args)})


@pytest.mark.parametrize("name,formula,bounds,compiled", MATH, ids=[m[0] for m in MATH])
def test_math_op(name, formula, bounds, compiled):
    x = rb.var("x", shape=(4, 5))
    fn = rb.Function([x], getattr(op, name)(x))
    data = RNG.uniform(*bounds, size=(4, 5)).astype("float32")
    expected = formula(data.astype(np.float64))
    np.testing.assert_allclose(_run(fn, data), expected, rtol=1e-6, atol=1e-6)
    if compiled:
        np.testing.assert_allclose(_run(fn, data, target="llvm"), expected, rtol=2e-5, atol=2e-6)
    with pytest.raises(TypeInferenceError, match="floating-point"):
        infer_expr(getattr(op, name)(rb.var("i", shape=(2,), dtype="int32")))


def test_bitwise_ops():
    a = rb.var("a", shape=(6,), dtype="int32")
    b = rb.var("b", shape=(6,), dtype="int32")
    fn = rb.Function([a, b], rb.Tuple([op.bitwise_and(a, b), op.bitwise_or(a, b),
                                       op.bitwise_xor(a, b), op.bitwise_not(a)]))
    x = np.array([0, 1, -1, 12, 255, -100], "int32")
    y = np.array([3, 3, 7, 10, 15, 99], "int32")
    out = _run(fn, x, y)
    # by hand: 12 & 10 = 8, 12 | 10 = 14, 12 ^ 10 = 6, ~12 = -13
    assert out[0][3] == 8 and out[1][3] == 14 and out[2][3] == 6 and out[3][3] == -13
    np.testing.assert_array_equal(out[0], x & y)
    np.testing.assert_array_equal(out[3], ~x)
    with pytest.raises(TypeInferenceError, match="integer or bool"):
        infer_expr(op.bitwise_and(rb.var("f", shape=(2,)), rb.var("g", shape=(2,))))


def test_reinterpret_reads_the_bits():
    x = rb.var("x", shape=(3,))
    fn = rb.Function([x], op.reinterpret(x, dtype="int32"))
    out = _run(fn, np.array([1.0, -2.0, 0.0], "float32"))
    np.testing.assert_array_equal(out, [0x3F800000, -0x40000000, 0])   # IEEE 754 by hand
    with pytest.raises(TypeInferenceError, match="element sizes differ"):
        infer_expr(op.reinterpret(x, dtype="int64"))


@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]),
    ("ij->", [(3, 4)]),
    ("...ij->...ji", [(2, 3, 4)]),
    ("i,j", [(3,), (4,)]),
    ("ij,ij,ij->i", [(2, 3), (2, 3), (2, 3)]),
])
def test_einsum(equation, shapes):
    vs = [rb.var(f"x{i}", shape=s) for i, s in enumerate(shapes)]
    data = [RNG.standard_normal(s).astype("float32") for s in shapes]
    fn = rb.Function(vs, op.einsum(vs, equation=equation))
    expected = np.einsum(equation, *[d.astype(np.float64) for d in data])
    assert infer_expr(fn.body).shape == expected.shape
    np.testing.assert_allclose(_run(fn, *data), expected, rtol=1e-5, atol=1e-5)


def test_einsum_matrix_product_by_hand_and_errors():
    a, b = rb.var("a", shape=(2, 2)), rb.var("b", shape=(2, 2))
    fn = rb.Function([a, b], op.einsum([a, b], equation="ij,jk->ik"))
    out = _run(fn, np.array([[1, 2], [3, 4]], "float32"), np.array([[5, 6], [7, 8]], "float32"))
    np.testing.assert_array_equal(out, [[19, 22], [43, 50]])
    with pytest.raises(TypeInferenceError, match="subscript 'j' is 2 in one operand but 3"):
        infer_expr(op.einsum([a, rb.var("c", shape=(3, 2))], equation="ij,jk->ik"))
    with pytest.raises(TypeInferenceError, match="rank 2 but its subscripts 'ijk'"):
        infer_expr(op.einsum([a], equation="ijk->i"))


@pytest.mark.parametrize("reduction", ["update", "add", "mul", "max"])
def test_scatter_elements(reduction):
    data = np.arange(12, dtype="float32").reshape(3, 4)
    indices = np.array([[1, 0, 2, 0], [2, 2, 0, 1]], "int64")
    updates = np.array([[10, 20, 30, 40], [50, 60, 70, 80]], "float32")
    d, i, u = rb.var("d", shape=(3, 4)), rb.var("i", shape=(2, 4), dtype="int64"), rb.var("u", shape=(2, 4))
    fn = rb.Function([d, i, u], op.scatter_elements(d, i, u, axis=0, reduction=reduction))
    expected = data.copy()       # the loop of ONNX's definition, written out
    for r in range(2):
        for c in range(4):
            k = indices[r, c]
            if reduction == "update":
                expected[k, c] = updates[r, c]
            elif reduction == "add":
                expected[k, c] += updates[r, c]
            elif reduction == "mul":
                expected[k, c] *= updates[r, c]
            else:
                expected[k, c] = max(expected[k, c], updates[r, c])
    np.testing.assert_array_equal(_run(fn, data, indices, updates), expected)
