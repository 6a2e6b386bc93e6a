"""Quantizing programs with control flow: branches, lets, closures and a recursive function
(TreeLSTM) whose weights @main passes down. Checked against the float program (within the
quantization's error) and against integer facts the realized program must keep."""

import numpy as np
import pytest

import relaybench as rb
from relaybench.backends.vm import VirtualMachine, compile as vm_compile
from relaybench.experiments.nlp import full_tree
from relaybench.ir import post_order
from relaybench.ir.expr import Call, Op
from relaybench.quantize import qconfig, quantize

DENSE = {"skip_dense_layer": False, "skip_conv_layers": None}


def _denses(mod):
    out = []
    for func in mod.functions.values():
        out += [n for n in post_order(func) if isinstance(n, Call) and isinstance(n.op, Op)
                and n.op.name == "nn.dense"]
    return out


def _tree_lstm(size=16):
    mod, params = rb.models.tree_lstm(input_size=size, hidden_size=size)
    rng = np.random.default_rng(3)
    tree = full_tree(3, lambda: (0.5 * rng.standard_normal((1, size))).astype("float32"))
    return mod, params, rb.adt.from_python(tree, "Tree")


def test_tree_lstm_layers_in_the_recursive_cell_are_quantized():
    mod, params, tree = _tree_lstm()
    with qconfig(**DENSE):
        q = quantize(mod, params)
    assert [p.name_hint for p in q["tree_lstm"].params] == ["tree"]   # weights became constants
    denses = _denses(q)
    assert len(denses) == 4
    for d in denses:
        assert [str(a.checked_type.dtype) for a in d.args] == ["int8", "int8"]
        assert str(d.checked_type.dtype) == "int32"
    want = rb.create_executor("debug", mod).evaluate()(tree, *params.values())
    got = rb.create_executor("debug", q).evaluate()(tree)
    for w, g in zip(want, got):
        # inputs on a 1/16 grid (global scale 8), weights on a power-of-two grid: a few steps
        assert np.max(np.abs(np.asarray(w) - np.asarray(g))) < 0.2
    # the VM's compiled kernels run the same integers: the float gates agree to rounding
    vm_out = VirtualMachine(vm_compile(q, target="llvm")).invoke("main", tree)
    for g, v in zip(got, vm_out):
        np.testing.assert_allclose(np.asarray(v), np.asarray(g), rtol=1e-5, atol=1e-6)


def test_store_lowbit_output_keeps_an_accumulator_on_the_int8_grid():
    """With the knob, the dense's int32 result is requantized to int8 (scale 8/128) before it is
    dequantized: every output times 16 is an integer in [-127, 127]. Without it, the
    accumulator is dequantized at its own, finer scale."""
    x = rb.var("x", shape=(1, 32))
    w = rb.var("w", shape=(16, 32))
    mod = rb.IRModule.from_expr(rb.Function([x, w], rb.op.nn.dense(x, w)))
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((16, 32)).astype("float32")}
    data = rng.standard_normal((1, 32)).astype("float32")
    out = {}
    for lowbit in (False, True):
        with qconfig(store_lowbit_output=lowbit, **DENSE):
            q = quantize(mod, params)
        out[lowbit] = np.asarray(rb.create_executor("debug", q).evaluate()(data)) * 16
    grid = out[True]
    assert np.array_equal(grid, np.round(grid)) and np.abs(grid).max() <= 127
    assert not np.array_equal(out[False], np.round(out[False]))


def test_branches_and_lets_are_quantized_each():
    x, c = rb.var("x", shape=(1, 16)), rb.var("c", shape=(), dtype="bool")
    w1, w2 = rb.var("w1", shape=(8, 16)), rb.var("w2", shape=(8, 16))
    a = rb.var("a")
    body = rb.Let(a, rb.op.nn.relu(x), rb.If(c, rb.op.nn.dense(a, w1), rb.op.nn.dense(a, w2)))
    mod = rb.IRModule.from_expr(rb.Function([x, c, w1, w2], body))
    rng = np.random.default_rng(1)
    params = {"w1": rng.uniform(-1, 1, (8, 16)).astype("float32"),
              "w2": rng.uniform(-1, 1, (8, 16)).astype("float32")}
    with qconfig(**DENSE):
        q = quantize(mod, params)
    assert len(_denses(q)) == 2 and all(str(d.args[1].checked_type.dtype) == "int8"
                                        for d in _denses(q))
    data = rng.uniform(-1, 1, (1, 16)).astype("float32")
    run = rb.create_executor("debug", q).evaluate()
    for flag, weight in ((True, params["w1"]), (False, params["w2"])):
        want = np.maximum(data, 0) @ weight.T
        got = np.asarray(run(data, np.bool_(flag)))
        assert np.max(np.abs(got - want)) < 0.1


def test_data_driven_calibration_of_another_function_is_refused_by_name():
    mod, params, tree = _tree_lstm()
    with qconfig(calibrate_mode="max", **DENSE):
        with pytest.raises(ValueError, match=r"@tree_lstm.*global_scale"):
            quantize(mod, params, dataset=[{"tree": tree}])
