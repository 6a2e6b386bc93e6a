"""CanonicalizeOps: before/expected programs, the interpreter before and after, the zoo, and a
20,000-op chain."""

import doctest

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.ir import assert_structural_equal, op_histogram
from relaybench.passes import canonicalize_ops as co_module
from relaybench.testing import run_infer_type

H = '#[version = "0.0.5"]\n'


def canonicalize(mod):
    return rb.passes.CanonicalizeOps()(mod)


def run(mod, *args):
    return rb.create_executor("interpreter", mod=mod).evaluate()(*args)


def check(before_text, expected_text):
    before, expected = rb.parse(H + before_text), rb.parse(H + expected_text)
    after = canonicalize(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    return before, after


def test_docstring_examples():
    assert doctest.testmod(co_module).failed == 0


def test_pass_info():
    p = rb.passes.CanonicalizeOps()
    assert p.info.opt_level == 3 and p.info.kebab == "canonicalize-ops"


@pytest.mark.parametrize("shape, axis, expand", [
    ("(1, 4, 5, 6)", 1, "expand_dims(%b, axis=1, num_newaxis=2)"),
    ("(1, 4, 5, 6)", -3, "expand_dims(%b, axis=1, num_newaxis=2)"),
    ("(4, 5, 6)", 0, "expand_dims(%b, axis=1, num_newaxis=2)"),
    ("(2, 3, 4, 5)", 2, "expand_dims(%b, axis=1)"),
    ("(2, 3, 5, 4)", 3, "%b"),
    ("(3, 4)", -1, "%b"),
    ("(4,)", 0, "%b"),
])
def test_bias_add_becomes_expand_dims_and_add(shape, axis, expand):
    n = int(shape.strip("()").split(",")[axis].strip() if shape != "(4,)" else 4)
    check(f"""
def @main(%x: Tensor[{shape}, float32], %b: Tensor[({n}), float32]) {{
  nn.bias_add(%x, %b, axis={axis})
}}""", f"""
def @main(%x: Tensor[{shape}, float32], %b: Tensor[({n}), float32]) {{
  add(%x, {expand})
}}""")


def test_values_match_numpy():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4, 5)).astype("float32")
    b = rng.standard_normal(4).astype("float32")
    before = rb.parse(H + """
def @main(%x: Tensor[(2, 3, 4, 5), float32], %b: Tensor[(4), float32]) {
  nn.relu(nn.bias_add(%x, %b, axis=2))
}""")
    after = canonicalize(before)
    assert op_histogram(after)["nn.bias_add"] == 0
    want = np.maximum(x + b[None, None, :, None], 0)
    np.testing.assert_allclose(run(after, x, b), want, rtol=1e-6)
    np.testing.assert_allclose(run(after, x, b), run(before, x, b), rtol=1e-6)


def test_symbolic_batch_keeps_working():
    check("""
def @main(%x: Tensor[(n, 8), float32], %b: Tensor[(8), float32]) {
  nn.bias_add(%x, %b)
}""", """
def @main(%x: Tensor[(n, 8), float32], %b: Tensor[(8), float32]) {
  add(%x, %b)
}""")


def test_dense_and_other_ops_are_left_alone():
    before = rb.parse(H + """
def @main(%x: Tensor[(2, 8), float32], %w: Tensor[(4, 8), float32], %a: Tensor[(4), float32]) {
  nn.prelu(nn.dense(%x, %w), %a, axis=1)
}""")
    assert canonicalize(before) is before


def test_primitive_functions_are_left_alone():
    p, q = rb.var("p", shape=(1, 2)), rb.var("q", shape=(2,))
    prim = rb.Function([p, q], op.nn.bias_add(p, q)).with_attr("Primitive", 1)
    x, b = rb.var("x", shape=(1, 2)), rb.var("b", shape=(2,))
    before = rb.IRModule.from_expr(rb.Function([x, b], rb.Call(prim, [x, b])))
    assert canonicalize(before) is before


def test_inside_closures_and_lets():
    check("""
def @main(%x: Tensor[(1, 2, 3), float32], %b: Tensor[(2), float32]) {
  let %f = fn (%y: Tensor[(1, 2, 3), float32]) { nn.bias_add(%y, %b) };
  %f(%x)
}""", """
def @main(%x: Tensor[(1, 2, 3), float32], %b: Tensor[(2), float32]) {
  let %f = fn (%y: Tensor[(1, 2, 3), float32]) { add(%y, expand_dims(%b, axis=1)) };
  %f(%x)
}""")


def test_zoo_bias_adds_go_and_outputs_match():
    mod, params = rb.models.get("dqn", image_shape=(4, 36, 36), num_actions=4)
    assert op_histogram(mod)["nn.bias_add"] == 5  # 3 convolutions and 2 dense layers
    after = canonicalize(mod)
    hist = op_histogram(after)
    assert hist["nn.bias_add"] == 0 and hist["expand_dims"] == 3 and hist["nn.dense"] == 2
    bound_before = rb.passes.bind_params(mod, params)
    bound_after = rb.passes.bind_params(after, params)
    data = np.random.default_rng(0).uniform(0, 1, (1, 4, 36, 36)).astype("float32")
    np.testing.assert_allclose(run(bound_after, data), run(bound_before, data), rtol=1e-4, atol=1e-6)


# Deep enough that any recursion on program depth fails (Python stops at 1,000 frames);
# tests/test_scale.py takes 100,000 operators through the whole pipeline.
DEEP = 20_000


def test_deep_op_chain():
    x = rb.var("x", shape=(1, 2, 2))
    b = rb.var("b", shape=(2,))
    bias_add, relu, add = rb.Op.get("nn.bias_add"), rb.Op.get("nn.relu"), rb.Op.get("add")
    y = e = x
    for i in range(DEEP):
        if i % 10:
            y, e = rb.Call(relu, (y,)), rb.Call(relu, (e,))
        else:
            y, e = rb.Call(bias_add, (y, b)), rb.Call(add, (e, op.expand_dims(b, axis=1)))
    after = canonicalize(rb.IRModule.from_expr(rb.Function([x, b], y)))
    assert op_histogram(after) == {"nn.relu": DEEP * 9 // 10, "add": DEEP // 10,
                                     "expand_dims": DEEP // 10}
    assert_structural_equal(run_infer_type(after), run_infer_type(rb.IRModule.from_expr(rb.Function([x, b], e))), map_free_vars=True)
