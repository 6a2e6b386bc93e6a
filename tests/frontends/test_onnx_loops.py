"""ONNX's Loop and Scan imported as recursive Relay functions (``from_onnx(..., loops=...)``):
small models written with onnx.helper, run on the interpreter and the VM, checked against ONNX
Runtime (an implementation independent of relaybench) and numpy."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

import relaybench as rb  # noqa: E402
from relaybench.frontends import from_onnx  # noqa: E402
from relaybench.frontends.onnx import OnnxImportError  # noqa: E402

F, INT, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
RNG = np.random.default_rng(7)


def tensor(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def onnxruntime_outputs(m, feeds: dict) -> list:
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def run(mod, kind: str, feeds: dict) -> list:
    names = [p.name_hint for p in mod["main"].params]
    out = rb.create_executor(kind, mod=mod, target="llvm").evaluate()(*[feeds[n] for n in names])
    return [np.asarray(o) for o in (out if isinstance(out, (list, tuple)) else [out])]


def loop_text(mod) -> str:
    return mod["main"].astext(show_meta_data=False)


def _loop_with_scan_outputs(static_trip: bool, stop_on_data: bool):
    """``for i in range(M) while sum(x) < limit: x = 2 x + i; emit x, emit sum(x)``: two
    carried values (x and a count) and two scan outputs (without ``stop_on_data``, the
    condition stays true and the limit is only compared)."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["i_f"], to=F),
         helper.make_node("Mul", ["x_in", "two"], ["x2"]),
         helper.make_node("Add", ["x2", "i_f"], ["x_out"]),
         helper.make_node("ReduceSum", ["x_out"], ["s"], keepdims=0),
         helper.make_node("Less", ["s", "limit"], ["below"]),
         helper.make_node("Identity", ["below" if stop_on_data else "c_in"], ["c_out"]),
         helper.make_node("Add", ["n_in", "one"], ["n_out"]),
         helper.make_node("Identity", ["x_out"], ["y_x"]),
         helper.make_node("Identity", ["s"], ["y_s"])],
        "body", [tensor("i", INT, []), tensor("c_in", BOOL, []), tensor("x_in", F, [3]),
                 tensor("n_in", INT, [])],
        [tensor("c_out", BOOL, []), tensor("x_out", F, [3]), tensor("n_out", INT, []),
         tensor("y_x", F, [3]), tensor("y_s", F, [])],
        [helper.make_tensor("two", F, [], [2.0]), helper.make_tensor("one", INT, [], [1])])
    inputs = [tensor("x0", F, [3]), tensor("limit", F, [])]
    inits = [helper.make_tensor("n0", INT, [], [0]), helper.make_tensor("cond", BOOL, [], [True])]
    if static_trip:
        inits.append(helper.make_tensor("M", INT, [], [4]))
    else:
        inputs.append(tensor("M", INT, []))
    node = helper.make_node("Loop", ["M", "cond", "x0", "n0"], ["x", "n", "ys_x", "ys_s"],
                            body=body)
    return model([node], inputs,
                 [tensor("x", F, [3]), tensor("n", INT, []), tensor("ys_x", F, ["k", 3]),
                  tensor("ys_s", F, ["k"])], inits)


@pytest.mark.parametrize("static_trip, stop_on_data, limit",
                         [(True, False, 40.0), (True, True, 1000.0), (True, True, 20.0),
                          (False, False, 40.0)])
def test_a_loop_with_scan_outputs_matches_onnxruntime(static_trip, stop_on_data, limit):
    """The trip count (4) or the data (the limit 20 stops it after 3 iterations) ends the loop;
    a trip count or condition that depends on the data makes a recursive function under either
    mode, a static loop is unrolled under ``loops="unroll"``."""
    m = _loop_with_scan_outputs(static_trip, stop_on_data)
    feeds = {"x0": np.array([1.0, -2.0, 3.0], np.float32), "limit": np.array(limit, np.float32)}
    if not static_trip:
        feeds["M"] = np.array(4, np.int64)
    expected = onnxruntime_outputs(m, feeds)
    assert expected[2].shape[0] == (3 if stop_on_data and limit < 100 else 4)
    for loops in ("unroll", "recursive"):
        mod, _ = from_onnx(m, loops=loops)
        unrolled = loops == "unroll" and static_trip and not stop_on_data
        assert ("let %loop" in loop_text(mod)) != unrolled
        for kind in ("interpreter", "vm"):
            got = run(mod, kind, feeds)
            assert len(got) == 4
            for g, e in zip(got, expected):
                assert g.shape == e.shape and g.dtype == e.dtype, (loops, kind)
                np.testing.assert_allclose(g, e, rtol=1e-6, err_msg=f"{loops} {kind}")


def test_a_loop_whose_carried_shape_grows_gets_a_dynamic_type():
    """``x = concat(x, [i])`` three times: the carried value's extent changes each iteration,
    so the recursive form types it ``Tensor[(?), float32]``."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["i_f"], to=F),
         helper.make_node("Unsqueeze", ["i_f", "zero"], ["i_1"]),
         helper.make_node("Concat", ["x_in", "i_1"], ["x_out"], axis=0),
         helper.make_node("Identity", ["c_in"], ["c_out"])],
        "body", [tensor("i", INT, []), tensor("c_in", BOOL, []), tensor("x_in", F, None)],
        [tensor("c_out", BOOL, []), tensor("x_out", F, None)],
        [helper.make_tensor("zero", INT, [1], [0])])
    m = model([helper.make_node("Loop", ["M", "", "x0"], ["x"], body=body)],
              [tensor("x0", F, [2])], [tensor("x", F, None)],
              [helper.make_tensor("M", INT, [], [3])])
    x0 = np.array([5.0, 6.0], np.float32)
    mod, _ = from_onnx(m, loops="recursive")
    assert "Tensor[(?), float32]" in loop_text(mod)
    for kind in ("interpreter", "vm"):
        (got,) = run(mod, kind, {"x0": x0})
        np.testing.assert_array_equal(got, [5, 6, 0, 1, 2])


def _scan_model():
    """A running sum ``s += a_t * b_t`` over ``a`` (4, 2) read forward along axis 0 and ``b``
    (2, 4) read backward along axis 1; scan outputs ``s`` stacked along axis 0 and ``a_t - b_t``
    stacked backward along axis 1."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["a_t", "b_t"], ["p"]),
         helper.make_node("Add", ["s_in", "p"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["y_s"]),
         helper.make_node("Sub", ["a_t", "b_t"], ["y_d"])],
        "body", [tensor("s_in", F, [2]), tensor("a_t", F, [2]), tensor("b_t", F, [2])],
        [tensor("s_out", F, [2]), tensor("y_s", F, [2]), tensor("y_d", F, [2])])
    node = helper.make_node("Scan", ["s0", "a", "b"], ["s", "ys", "yd"], body=body,
                            num_scan_inputs=2, scan_input_axes=[0, 1],
                            scan_input_directions=[0, 1], scan_output_axes=[0, 1],
                            scan_output_directions=[0, 1])
    return model([node], [tensor("s0", F, [2]), tensor("a", F, [4, 2]), tensor("b", F, [2, 4])],
                 [tensor("s", F, [2]), tensor("ys", F, [4, 2]), tensor("yd", F, [2, 4])])


def test_scan_forward_and_reverse_matches_onnxruntime_and_numpy():
    m = _scan_model()
    feeds = {"s0": RNG.standard_normal(2).astype(np.float32),
             "a": RNG.standard_normal((4, 2)).astype(np.float32),
             "b": RNG.standard_normal((2, 4)).astype(np.float32)}
    expected = onnxruntime_outputs(m, feeds)
    a, b_rev = feeds["a"], feeds["b"].T[::-1]            # the steps' slices, in order
    sums = feeds["s0"] + np.cumsum(a * b_rev, axis=0)
    np.testing.assert_allclose(expected[1], sums, rtol=1e-6)
    np.testing.assert_allclose(expected[2], (a - b_rev)[::-1].T, rtol=1e-6)
    texts = {}
    for loops in ("unroll", "recursive"):
        mod, _ = from_onnx(m, loops=loops)
        texts[loops] = loop_text(mod)
        for kind in ("interpreter", "vm"):
            got = run(mod, kind, feeds)
            for g, e in zip(got, expected):
                assert g.shape == e.shape and g.dtype == e.dtype, (loops, kind)
                np.testing.assert_allclose(g, e, rtol=1e-5, err_msg=f"{loops} {kind}")
    assert "let %scan" in texts["recursive"] and "%scan(" in texts["recursive"]
    assert "let %scan" not in texts["unroll"]
    # the recursive program holds the body once; the unrolled one once per step
    assert texts["recursive"].count("multiply(") == 1 and texts["unroll"].count("multiply(") == 4


def test_scan8_batch_axis_and_sequence_lens():
    """Scan-8: a batch axis on every input; batch element 1 runs 2 of its 3 steps, its scan
    output padded with zeros."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["y"])],
        "body", [tensor("s_in", F, [2]), tensor("x_t", F, [2])],
        [tensor("s_out", F, [2]), tensor("y", F, [2])])
    node = helper.make_node("Scan", ["lens", "s0", "x"], ["s", "ys"], body=body,
                            num_scan_inputs=1)
    m = model([node], [tensor("s0", F, [2, 2]), tensor("x", F, [2, 3, 2])],
              [tensor("s", F, [2, 2]), tensor("ys", F, [2, 3, 2])],
              [helper.make_tensor("lens", INT, [2], [3, 2])], opset=8)
    s0 = np.array([[0, 0], [10, 10]], np.float32)
    x = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    run_sums = s0[:, None, :] + np.cumsum(x, axis=1)
    run_sums[1, 2] = 0
    for loops in ("unroll", "recursive"):
        mod, _ = from_onnx(m, loops=loops)
        s, ys = run(mod, "interpreter", {"s0": s0, "x": x})
        np.testing.assert_array_equal(ys, run_sums)
        np.testing.assert_array_equal(s, [run_sums[0, 2], run_sums[1, 1]])


def test_bad_loops_option_and_bad_scan_are_named():
    with pytest.raises(ValueError, match="loops='while'"):
        from_onnx(_scan_model(), loops="while")
    m = _scan_model()
    m.graph.node[0].attribute[-1].CopyFrom(helper.make_attribute("scan_input_axes", [0, 5]))
    with pytest.raises(OnnxImportError, match="Scan node 's'.*scan input 1: axis 5"):
        from_onnx(m, loops="recursive")


@pytest.mark.parametrize("name", ["test_scan9_sum", "test_scan_sum", "test_scan9_multi_state",
                                  "test_range_float_type_positive_delta_expanded"])
def test_node_cases_pass_with_recursive_loops(name):
    """ONNX's own Scan and Loop node tests, imported with ``loops="recursive"``."""
    from relaybench.frontends.onnx import backend as B
    cases = dict(B.node_cases())
    status, why = B.run_case(name, cases[name],
                             lambda m: B.RelaybenchBackend.prepare(m, loops="recursive"))
    assert status == "pass", why
    model, _ = B.load_case(cases[name])
    text = str(from_onnx(model, loops="recursive")[0])
    assert ("%loop(" if "range" in name else "%scan(") in text
