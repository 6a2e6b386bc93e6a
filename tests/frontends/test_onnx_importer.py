"""The ONNX importer: models written with onnx.helper, checked against ONNX's own reference
evaluator (onnx.reference, an implementation independent of relaybench) and numpy."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import relaybench as rb  # noqa: E402
from relaybench.frontends import from_onnx  # noqa: E402
from relaybench.frontends.onnx import NeedsStaticValue, OnnxImportError, UnsupportedOps  # noqa: E402
from relaybench.frontends.onnx.backend import RelaybenchBackend  # noqa: E402

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def model(nodes, inputs, outputs, initializers=(), opset=13):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def tensor(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def run_interpreter(mod, params, *inputs):
    names = [p.name_hint for p in mod["main"].params]
    values = list(inputs) + [params[n] for n in names[len(inputs):]]
    return rb.create_executor("interpreter", mod=mod).evaluate()(*values)


def conv_model():
    w = numpy_helper.from_array(RNG.standard_normal((4, 3, 3, 3)).astype("float32"), "w")
    b = numpy_helper.from_array(RNG.standard_normal(4).astype("float32"), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["y"])]
    return model(nodes, [tensor("x", F, ["N", 3, 8, 8])], [tensor("y", F, None)], [w, b])


def test_symbolic_batch_stays_symbolic_and_matches_the_reference():
    m = conv_model()
    mod, params = from_onnx(m)
    assert params == {}
    mod = rb.passes.InferType()(mod)
    assert str(mod["main"].params[0].checked_type) == "Tensor[(N, 3, 8, 8), float32]"
    assert str(mod["main"].body.checked_type) == "Tensor[(N, 4), float32]"
    x = RNG.standard_normal((2, 3, 8, 8)).astype("float32")
    (expected,) = ReferenceEvaluator(m).run(None, {"x": x})
    np.testing.assert_allclose(run_interpreter(mod, params, x), expected, rtol=1e-5, atol=1e-5)


def test_shape_fixes_a_symbolic_dim_and_compiles_for_llvm():
    m = conv_model()
    mod, params = from_onnx(m, shape={"x": (1, 3, 8, 8)})
    x = RNG.standard_normal((1, 3, 8, 8)).astype("float32")
    (expected,) = ReferenceEvaluator(m).run(None, {"x": x})
    lib = rb.build(mod, target="llvm", params=params)
    np.testing.assert_allclose(lib.run(x=x), expected, rtol=1e-5, atol=1e-5)


def test_freeze_params_false_makes_weights_parameters():
    m = conv_model()
    mod, params = from_onnx(m, shape={"x": (1, 3, 8, 8)}, freeze_params=False)
    assert sorted(params) == ["b", "w"]
    assert [p.name_hint for p in mod["main"].params] == ["x", "w", "b"]
    x = RNG.standard_normal((1, 3, 8, 8)).astype("float32")
    (expected,) = ReferenceEvaluator(m).run(None, {"x": x})
    np.testing.assert_allclose(run_interpreter(mod, params, x), expected, rtol=1e-5, atol=1e-5)
    text = mod.astext(show_types=False)
    assert rb.parse(text).astext(show_types=False) == text   # the text round-trips


def test_shape_computations_of_a_static_model_are_folded_into_a_plain_reshape():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus_one"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "axes"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]
    m = model(nodes, [tensor("x", F, [2, 3, 4])], [tensor("y", F, None)], inits)
    mod, _ = from_onnx(m)
    body = mod["main"].body
    assert body.op.name == "reshape" and tuple(body.attrs.newshape) == (2, -1)
    x = RNG.standard_normal((2, 3, 4)).astype("float32")
    np.testing.assert_array_equal(run_interpreter(mod, {}, x), x.reshape(2, 12))


def test_every_unsupported_op_is_listed_in_one_error():
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("FancyOp", ["a"], ["b"], name="fancy_1"),
             helper.make_node("FancyOp", ["b"], ["c"], name="fancy_2"),
             helper.make_node("Frobnicate", ["c"], ["y"], name="frob", domain="com.example")]
    m = helper.make_model(helper.make_graph(nodes, "g", [tensor("x", F, [2])], [tensor("y", F, None)]),
                          opset_imports=[helper.make_opsetid("", 13),
                                         helper.make_opsetid("com.example", 1)])
    with pytest.raises(UnsupportedOps) as info:
        from_onnx(m)
    text = str(info.value)
    assert "2 ONNX op type(s) have no converter" in text
    assert "FancyOp (opset 13): 2 node(s): 'fancy_1', 'fancy_2'" in text
    assert "com.example.Frobnicate (opset 1): 1 node(s): 'frob'" in text


def test_a_damaged_file_gives_a_clear_error(tmp_path):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"\x08\x07garbage that is not a protobuf \xff\xff")
    with pytest.raises(OnnxImportError, match="not a readable ONNX model"):
        from_onnx(str(path))
    with pytest.raises(OnnxImportError, match="no graph"):
        from_onnx(onnx.ModelProto())


def test_an_input_produced_by_nothing_names_the_node_and_input():
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")]
    m = model(nodes, [tensor("x", F, [2])], [tensor("y", F, None)])
    with pytest.raises(OnnxImportError, match="Add node 'adder': input 1 'ghost' is not produced"):
        from_onnx(m)


def test_a_shape_given_as_a_graph_input_needs_a_static_value():
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="r")]
    m = model(nodes, [tensor("x", F, [2, 3]), tensor("shape", TensorProto.INT64, [2])],
              [tensor("y", F, None)])
    with pytest.raises(NeedsStaticValue, match="Reshape node 'r': input shape .* must be known"):
        from_onnx(m)
    # the backend binds the value it is given and imports again
    rep = RelaybenchBackend.prepare(m)
    x = np.arange(6, dtype="float32").reshape(2, 3)
    (out,) = rep.run([x, np.array([3, 2], np.int64)])
    np.testing.assert_array_equal(out, x.reshape(3, 2))


def _if_model(cond_from_constant: bool):
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["t"])], "then", [],
                               [tensor("t", F, [3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [tensor("e", F, [3])])
    nodes = []
    inputs = [tensor("x", F, [3])]
    inits = []
    if cond_from_constant:
        inits = [numpy_helper.from_array(np.array([True]), "c")]
    else:
        inputs.append(tensor("c", TensorProto.BOOL, [1]))
    nodes.append(helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g))
    return model(nodes, inputs, [tensor("y", F, [3])], inits)


def test_if_becomes_relay_if_and_runs_both_ways():
    m = _if_model(cond_from_constant=False)
    mod, params = from_onnx(m)
    assert type(mod["main"].body).__name__ == "If"
    x = np.array([1.0, -2.0, 3.0], "float32")
    for c in (True, False):
        (expected,) = ReferenceEvaluator(m).run(None, {"x": x, "c": np.array([c])})
        np.testing.assert_array_equal(run_interpreter(mod, params, x, np.array([c])), expected)


def test_a_constant_condition_keeps_the_branch_over_graph_inputs():
    # regression: a node whose inputs are all constants was evaluated at import time even when
    # its result (the branch taken) reads a graph input
    m = _if_model(cond_from_constant=True)
    mod, params = from_onnx(m)
    x = np.array([1.0, -2.0, 3.0], "float32")
    np.testing.assert_array_equal(run_interpreter(mod, params, x), x * x)


def _doubling_loop(trip: int):
    """``while sum(x) < limit and i < trip: x = 2 x; n += 1`` as an ONNX Loop: its condition
    depends on the data, so it cannot be unrolled at import time."""
    INT, BOOL = TensorProto.INT64, TensorProto.BOOL
    body = helper.make_graph(
        [helper.make_node("Mul", ["x_in", "two"], ["x_out"]),
         helper.make_node("ReduceSum", ["x_out"], ["s"], keepdims=0),
         helper.make_node("Less", ["s", "limit"], ["c_out"]),
         helper.make_node("Add", ["n_in", "one"], ["n_out"])],
        "body", [tensor("i", INT, []), tensor("c_in", BOOL, []), tensor("x_in", F, [3]),
                 tensor("n_in", INT, [])],
        [tensor("c_out", BOOL, []), tensor("x_out", F, [3]), tensor("n_out", INT, [])],
        [helper.make_tensor("two", F, [], [2.0]), helper.make_tensor("one", INT, [], [1])])
    return model([helper.make_node("Loop", ["M", "cond", "x0", "n0"], ["x", "n"], body=body)],
                 [tensor("x0", F, [3]), tensor("cond", BOOL, []), tensor("limit", F, [])],
                 [tensor("x", F, [3]), tensor("n", INT, [])],
                 [helper.make_tensor("M", INT, [], [trip]), helper.make_tensor("n0", INT, [], [0])],
                 opset=17)


@pytest.mark.parametrize("trip, limit, expected_n", [(50, 100.0, 5), (3, 100.0, 3), (50, 1.0, 1)])
def test_a_data_dependent_loop_becomes_a_recursive_function(trip, limit, expected_n):
    """[1, 2, 3] doubles until its sum reaches the limit (5 times for 100: sum 192) or the trip
    count ends it; the body runs once before the first test of its own condition (limit 1)."""
    mod, _ = from_onnx(_doubling_loop(trip))
    text = mod["main"].astext(show_meta_data=False)
    assert "let %loop" in text and "%loop(" in text
    x0 = np.array([1, 2, 3], "float32")
    args = (x0, np.array(True), np.float32(limit))
    expected = x0 * 2.0 ** expected_n
    for kind in ("interpreter", "vm"):
        x, n = rb.create_executor(kind, mod=mod, target="llvm").evaluate()(*args)
        np.testing.assert_array_equal(x, expected)
        assert int(n) == expected_n
    ref = ReferenceEvaluator(_doubling_loop(trip)).run(None, {"x0": x0, "cond": np.array(True),
                                                                "limit": np.float32(limit)})
    np.testing.assert_array_equal(ref[0], expected)


@pytest.mark.parametrize("opset", [11, 13])
def test_opset_selects_the_converter(opset):
    """Squeeze takes its axes as an attribute before opset 13 and as an input from 13."""
    if opset < 13:
        nodes = [helper.make_node("Squeeze", ["x"], ["y"], axes=[1])]
        inits = []
    else:
        nodes = [helper.make_node("Squeeze", ["x", "axes"], ["y"])]
        inits = [numpy_helper.from_array(np.array([1], np.int64), "axes")]
    m = model(nodes, [tensor("x", F, [2, 1, 3])], [tensor("y", F, None)], inits, opset=opset)
    mod, _ = from_onnx(m)
    x = RNG.standard_normal((2, 1, 3)).astype("float32")
    np.testing.assert_array_equal(run_interpreter(mod, {}, x), x[:, 0, :])


def test_cli_import_and_show(tmp_path, capsys):
    from relaybench.cli import main
    path = tmp_path / "conv.onnx"
    m = conv_model()
    onnx.save(m, str(path))
    out = tmp_path / "conv.rly"
    assert main(["import", str(path), "--out", str(out), "--shape", "x=1,3,8,8"]) == 0
    weights = np.load(tmp_path / "conv.npz")
    assert sorted(weights.files) == ["b", "w"]
    mod = rb.parse(out.read_text())
    x = RNG.standard_normal((1, 3, 8, 8)).astype("float32")
    (expected,) = ReferenceEvaluator(m).run(None, {"x": x})
    got = run_interpreter(mod, dict(weights), x)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    capsys.readouterr()
    assert main(["show", str(path)]) == 0
    assert "nn.conv2d" in capsys.readouterr().out
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not onnx")
    assert main(["show", str(bad)]) == 1
    assert "not a readable ONNX model" in capsys.readouterr().err


def test_docstring_examples():
    import doctest

    import relaybench.frontends.onnx as frontend
    from relaybench.frontends.onnx import importer
    for module in (frontend, importer):
        result = doctest.testmod(module)
        assert result.attempted and not result.failed, module.__name__


def test_converter_table_lists_every_op_once_in_order():
    from relaybench.frontends.onnx import CONVERTERS, supported_ops
    rows = supported_ops()
    assert len({name for name, _, _ in rows}) == len(CONVERTERS)
    for entries in CONVERTERS.values():
        versions = [since for since, _ in entries]
        assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert ("Conv", 1, "conv") in rows


def test_pretrained_rnet_keeps_its_symbolic_batch_through_the_flatten():
    """MTCNN's RNet (facenet-pytorch's weights, exported by PyTorch with a symbolic batch):
    the exporter's Shape -> Gather -> Unsqueeze -> Concat -> Reshape becomes one reshape."""
    import os
    path = os.path.join(os.path.dirname(__file__), "data", "mtcnn_rnet.onnx")
    m = onnx.load(path)
    mod, params = from_onnx(m, freeze_params=False)
    mod = rb.passes.InferType()(mod)
    assert str(mod["main"].body.checked_type) == \
        "(Tensor[(batch, 4), float32], Tensor[(batch, 2), float32])"
    assert "reshape(%17, newshape=[0, -1])" in mod.astext(show_types=False)
    images = RNG.uniform(-1, 1, (3, 3, 24, 24)).astype("float32")
    expected = ReferenceEvaluator(m).run(None, {"image": images})
    got = run_interpreter(mod, params, images)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
