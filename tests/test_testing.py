"""relaybench.testing: the helpers tests and notebooks share."""

import doctest

import numpy as np
import pytest

import relaybench.testing as rt
from relaybench import op
from relaybench.ir import Call, Constant, Function, IRModule, Op, SymVar, var
from relaybench.ir.analysis import op_histogram
from relaybench.ir.types import TensorType, TupleType


def test_reexports():
    from relaybench.ir import structural
    assert rt.assert_structural_equal is structural.assert_structural_equal
    assert rt.structural_equal is structural.structural_equal


def test_chain_shape_of_the_program():
    f = rt.chain(5, shape=(2, 3))
    assert isinstance(f, Function) and len(f.params) == 1
    assert f.params[0].type_annotation == TensorType((2, 3), "float32")
    assert op_histogram(f) == {"add": 3, "multiply": 2}
    # walking from the outermost call: 5 ops that start with add also end with add
    names = []
    node = f.body
    while isinstance(node, Call):
        names.append(node.op.name)
        c = node.args[1]
        assert isinstance(c, Constant) and c.data.shape == () and c.data.dtype.name == "float32"
        assert float(c.data) == (rt.CHAIN_ADD if node.op.name == "add" else rt.CHAIN_MULTIPLY)
        node = node.args[0]
    assert node is f.params[0]
    assert names == ["add", "multiply", "add", "multiply", "add"]


def test_chain_of_zero_is_the_identity_and_negative_is_refused():
    f = rt.chain(0)
    assert f.body is f.params[0]
    with pytest.raises(ValueError, match="non-negative"):
        rt.chain(-1)


def test_chain_dtype():
    f = rt.chain(2, dtype="float64")
    assert f.params[0].type_annotation.dtype == "float64"
    assert f.body.args[1].data.dtype.name == "float64"


def test_chain_builds_the_same_structure_each_time():
    rt.assert_structural_equal(rt.chain(30), rt.chain(30))
    assert not rt.structural_equal(rt.chain(30), rt.chain(31))


def test_chain_reference_stays_bounded():
    x = np.array([1e6, -1e6, 0.0], dtype="float32")
    y = rt.chain_reference(200, x)
    np.testing.assert_allclose(y, [1.0, 1.0, 1.0], rtol=1e-5)
    np.testing.assert_allclose(rt.chain_reference(1, x), x + 1)


def test_random_inputs_follow_annotations():
    a = var("a", shape=(2, 3), dtype="float32")
    b = var("b", shape=(4,), dtype="int64")
    c = var("c", shape=(), dtype="bool")
    d = var("d", TupleType([TensorType((2,), "uint8"), TensorType((1,), "float16")]))
    f = Function([a, b, c, d], a)
    xs = rt.random_inputs(f)
    assert [x.shape for x in xs[:3]] == [(2, 3), (4,), ()]
    assert [x.dtype.name for x in xs[:3]] == ["float32", "int64", "bool"]
    assert isinstance(xs[3], tuple) and xs[3][0].dtype.name == "uint8" and xs[3][1].dtype.name == "float16"
    assert xs[1].min() >= -8 and xs[1].max() < 8 and xs[3][0].min() >= 0


def test_random_inputs_are_reproducible():
    f = rt.chain(3, shape=(5,))
    a, b, c = rt.random_inputs(f, seed=1), rt.random_inputs(f, seed=1), rt.random_inputs(f, seed=2)
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[0], c[0])


def test_random_inputs_of_a_module_use_main():
    x = var("x", shape=(3,))
    mod = IRModule.from_expr(op.add(x, x))
    (arr,) = rt.random_inputs(mod)
    assert arr.shape == (3,) and arr.dtype.name == "float32"


def test_random_inputs_symbolic_dims():
    n = SymVar("n")
    x = var("x", TensorType((n, 2 * n + 1)))
    f = Function([x], x)
    with pytest.raises(ValueError, match="parameter %x: dimension 0 of Tensor\\[\\(n, 2\\*n \\+ 1\\), float32\\]"):
        rt.random_inputs(f)
    (arr,) = rt.random_inputs(f, sizes={"n": 3})
    assert arr.shape == (3, 7)
    with pytest.raises(ValueError, match="dimension 0"):
        rt.random_inputs(Function([var("y", shape=(None,))], x))


def test_random_inputs_needs_types():
    with pytest.raises(ValueError, match="parameter %u has no type"):
        rt.random_inputs(Function([var("u")], var("u")))
    with pytest.raises(TypeError, match="needs a Function or an IRModule"):
        rt.random_inputs(Op.get("add"))


def test_docstring_examples():
    result = doctest.testmod(rt)
    assert result.attempted >= 2 and result.failed == 0
