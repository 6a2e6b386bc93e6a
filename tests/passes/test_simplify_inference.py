"""SimplifyInference: before/expected programs written by hand after Relay's rewrite rules, numpy
formulas, the interpreter before and after, the zoo, and a 20,000-op chain."""

import doctest

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.ir import assert_structural_equal, op_histogram
from relaybench.passes import simplify_inference as si_module
from relaybench.testing import run_infer_type

H = '#[version = "0.0.5"]\n'


def simplify(mod):
    return rb.passes.SimplifyInference()(mod)


def run(mod, *args):
    return rb.create_executor("interpreter", mod=mod).evaluate()(*args)


def check(before_text, expected_text):
    before, expected = rb.parse(H + before_text), rb.parse(H + expected_text)
    after = simplify(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    return before, after


BN_PARAMS = ("%g: Tensor[(3), float32], %b: Tensor[(3), float32], "
             "%m: Tensor[(3), float32], %v: Tensor[(3), float32]")


def test_docstring_examples():
    assert doctest.testmod(si_module).failed == 0


def test_pass_info():
    p = rb.passes.SimplifyInference()
    assert p.info.opt_level == 0 and p.info.kebab == "simplify-inference"


# ---- batch norm ---------------------------------------------------------------------------------

def test_batch_norm_nchw():
    check(f"""
def @main(%x: Tensor[(2, 3, 4, 5), float32], {BN_PARAMS}) {{
  %0 = nn.batch_norm(%x, %g, %b, %m, %v, epsilon=0.001f);
  nn.relu(%0.0)
}}""", f"""
def @main(%x: Tensor[(2, 3, 4, 5), float32], {BN_PARAMS}) {{
  %0 = divide(1f, sqrt(add(%v, 0.001f)));
  %1 = multiply(%0, %g);
  %2 = add(multiply(negative(%m), %1), %b);
  %3 = add(multiply(%x, expand_dims(%1, axis=1, num_newaxis=2)), expand_dims(%2, axis=1, num_newaxis=2));
  nn.relu(%3)
}}""")


def test_batch_norm_without_scale_and_center():
    check(f"""
def @main(%x: Tensor[(2, 3, 4), float32], {BN_PARAMS}) {{
  nn.batch_norm(%x, %g, %b, %m, %v, scale=False, center=False).0
}}""", f"""
def @main(%x: Tensor[(2, 3, 4), float32], {BN_PARAMS}) {{
  %0 = divide(1f, sqrt(add(%v, 1e-05f)));
  %1 = multiply(negative(%m), %0);
  add(multiply(%x, expand_dims(%0, axis=1)), expand_dims(%1, axis=1))
}}""")


@pytest.mark.parametrize("axis", [3, -1])
def test_batch_norm_on_the_last_axis_needs_no_expand_dims(axis):
    check(f"""
def @main(%x: Tensor[(2, 4, 4, 3), float32], {BN_PARAMS}) {{
  nn.batch_norm(%x, %g, %b, %m, %v, axis={axis}, center=False).0
}}""", f"""
def @main(%x: Tensor[(2, 4, 4, 3), float32], {BN_PARAMS}) {{
  %0 = multiply(divide(1f, sqrt(add(%v, 1e-05f))), %g);
  add(multiply(%x, %0), multiply(negative(%m), %0))
}}""")


def test_batch_norm_statistics_fields_and_whole_tuple():
    check(f"""
def @main(%x: Tensor[(2, 3), float32], {BN_PARAMS}) {{
  %0 = nn.batch_norm(%x, %g, %b, %m, %v, scale=False);
  (%0.1, %0.2, %0)
}}""", f"""
def @main(%x: Tensor[(2, 3), float32], {BN_PARAMS}) {{
  %0 = divide(1f, sqrt(add(%v, 1e-05f)));
  %1 = add(multiply(negative(%m), %0), %b);
  (%m, %v, (add(multiply(%x, %0), %1), %m, %v))
}}""")


def test_batch_norm_constants_take_the_data_dtype():
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 2, 2), float64], %p: Tensor[(2), float64]) {
  nn.batch_norm(%x, %p, %p, %p, %p).0
}""")
    after = simplify(before)
    consts = [n for n in rb.ir.post_order(after["main"]) if isinstance(n, rb.Constant)]
    assert sorted(c.data.item() for c in consts) == [1e-5, 1.0]
    assert all(c.data.dtype == np.float64 for c in consts)
    assert after["main"].body.checked_type == rb.TensorType((1, 2, 2), "float64")


def test_batch_norm_matches_the_numpy_formula():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4, 4)).astype("float32")
    g, b, m = (rng.standard_normal(3).astype("float32") for _ in range(3))
    v = rng.uniform(0.5, 2.0, 3).astype("float32")
    before = rb.parse(H + f"""
def @main(%x: Tensor[(2, 3, 4, 4), float32], {BN_PARAMS}) {{
  nn.batch_norm(%x, %g, %b, %m, %v, epsilon=0.01f).0
}}""")
    after = simplify(before)
    assert op_histogram(after)["nn.batch_norm"] == 0
    c = (slice(None), None, None)
    want = (x - m[c]) / np.sqrt(v[c] + 0.01) * g[c] + b[c]
    np.testing.assert_allclose(run(after, x, g, b, m, v), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run(after, x, g, b, m, v), run(before, x, g, b, m, v), rtol=1e-5, atol=1e-6)


# ---- dropout ---------------------------------------------------------------------------------------

def test_dropout_output_is_the_data():
    check("""
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = nn.dropout(%x, rate=0.3f);
  nn.relu(%0.0)
}""", "def @main(%x: Tensor[(2, 3), float32]) { nn.relu(%x) }")


def test_dropout_whole_tuple_and_mask():
    check("""
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = nn.dropout(%x);
  (%0, %0.1)
}""", """
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = ones_like(%x);
  ((%x, %0), %0)
}""")


# ---- layer norm --------------------------------------------------------------------------------------

def test_layer_norm_last_axis():
    check("""
def @main(%x: Tensor[(2, 5), float32], %g: Tensor[(5), float32], %b: Tensor[(5), float32]) {
  nn.layer_norm(%x, %g, %b)
}""", """
def @main(%x: Tensor[(2, 5), float32], %g: Tensor[(5), float32], %b: Tensor[(5), float32]) {
  %0 = mean(%x, axis=[-1], keepdims=True);
  %1 = variance(%x, %0, axis=[-1], keepdims=True);
  %2 = divide(subtract(%x, %0), sqrt(add(%1, 1e-05f)));
  add(multiply(%2, %g), %b)
}""")


def test_layer_norm_middle_axis_without_center():
    check("""
def @main(%x: Tensor[(2, 4, 3), float32], %g: Tensor[(4), float32], %b: Tensor[(4), float32]) {
  nn.layer_norm(%x, %g, %b, axis=1, epsilon=0.1f, center=False)
}""", """
def @main(%x: Tensor[(2, 4, 3), float32], %g: Tensor[(4), float32], %b: Tensor[(4), float32]) {
  %0 = mean(%x, axis=[1], keepdims=True);
  %1 = variance(%x, %0, axis=[1], keepdims=True);
  %2 = divide(subtract(%x, %0), sqrt(add(%1, 0.1f)));
  multiply(%2, expand_dims(%g, axis=1))
}""")


def test_layer_norm_matches_the_numpy_formula():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4, 6)).astype("float32")
    g, b = rng.standard_normal(4).astype("float32"), rng.standard_normal(4).astype("float32")
    before = rb.parse(H + """
def @main(%x: Tensor[(3, 4, 6), float32], %g: Tensor[(4), float32], %b: Tensor[(4), float32]) {
  nn.layer_norm(%x, %g, %b, axis=-2)
}""")
    after = simplify(before)
    assert op_histogram(after)["nn.layer_norm"] == 0
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    want = (x - mean) / np.sqrt(var + 1e-5) * g[None, :, None] + b[None, :, None]
    np.testing.assert_allclose(run(after, x, g, b), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(run(after, x, g, b), run(before, x, g, b), rtol=1e-4, atol=1e-5)


# ---- what stays -------------------------------------------------------------------------------------

def test_program_without_these_ops_comes_back_unchanged():
    before = rb.parse(H + "def @main(%x: Tensor[(2, 3), float32]) { nn.softmax(nn.relu(%x)) }")
    assert simplify(before) is before


def test_primitive_functions_are_left_alone():
    p = rb.var("p", shape=(1, 2))
    prim = rb.Function([p], rb.TupleGetItem(op.nn.dropout(p), 0)).with_attr("Primitive", 1)
    x = rb.var("x", shape=(1, 2))
    before = rb.IRModule.from_expr(rb.Function([x], rb.Call(prim, [x])))
    assert simplify(before) is before


def test_let_bound_batch_norm_and_closures():
    before, after = check(f"""
def @main(%x: Tensor[(2, 3), float32], {BN_PARAMS}) {{
  let %t = nn.batch_norm(%x, %g, %b, %m, %v, center=False, scale=False);
  let %f = fn (%y: Tensor[(2, 3), float32]) {{ nn.dropout(%y).0 }};
  %f(%t.0)
}}""", f"""
def @main(%x: Tensor[(2, 3), float32], {BN_PARAMS}) {{
  %0 = divide(1f, sqrt(add(%v, 1e-05f)));
  let %t = (add(multiply(%x, %0), multiply(negative(%m), %0)), %m, %v);
  let %f = fn (%y: Tensor[(2, 3), float32]) {{ %y }};
  %f(%t.0)
}}""")
    rng = np.random.default_rng(3)
    args = [rng.standard_normal((2, 3)).astype("float32")] + [rng.uniform(0.5, 1.5, 3).astype("float32")
                                                              for _ in range(4)]
    np.testing.assert_allclose(run(after, *args), run(before, *args), rtol=1e-5)


# ---- the zoo ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, kwargs", [
    ("resnet18", {"image_shape": (3, 32, 32), "num_classes": 10}),
    ("mobilenet_v2", {"image_shape": (3, 32, 32), "num_classes": 10}),
])
def test_zoo_batch_norms_all_go_and_outputs_match(name, kwargs):
    mod, params = rb.models.get(name, **kwargs)
    bound = rb.passes.bind_params(mod, params)
    n_bn = op_histogram(bound)["nn.batch_norm"]
    assert n_bn > 0
    after = simplify(bound)
    hist = op_histogram(after)
    assert hist["nn.batch_norm"] == 0
    assert hist["expand_dims"] == 2 * n_bn and hist["sqrt"] == n_bn
    data = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    np.testing.assert_allclose(run(after, data), run(bound, data), rtol=1e-4, atol=1e-6)


def test_vgg_dropout_goes():
    mod, params = rb.models.get("vgg16", image_shape=(3, 32, 32), num_classes=10)
    assert op_histogram(mod)["nn.dropout"] == 2
    after = simplify(mod)
    assert op_histogram(after)["nn.dropout"] == 0
    assert sum(op_histogram(after).values()) == sum(op_histogram(mod).values()) - 2


# ---- scale ---------------------------------------------------------------------------------------------

# Deep enough that any recursion on program depth fails (Python stops at 1,000 frames);
# tests/test_scale.py takes 100,000 operators through the whole pipeline.
DEEP = 20_000


def test_deep_chain_of_dropouts():
    x = rb.var("x", shape=(2,))
    y = x
    for _ in range(DEEP):
        y = rb.TupleGetItem(op.nn.dropout(y), 0)
    after = simplify(rb.IRModule.from_expr(rb.Function([x], op.negative(y))))
    x2 = rb.var("x", shape=(2,))
    expected = rb.IRModule.from_expr(rb.Function([x2], op.negative(x2)))
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
