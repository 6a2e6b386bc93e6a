"""FoldConstant: before/expected programs, values checked against numpy, the interpreter before and
after, the zoo, and a 20,000-op chain."""

import doctest

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.ir import assert_structural_equal, op_histogram
from relaybench.passes import fold_constant as fold_module
from relaybench.testing import run_infer_type

H = '#[version = "0.0.5"]\n'


def fold(mod):
    return rb.passes.FoldConstant()(mod)


def run(mod, *args):
    return rb.create_executor("interpreter", mod=mod).evaluate()(*args)


def fn(params, body):
    return rb.IRModule.from_expr(rb.Function(params, body))


def test_docstring_examples():
    assert doctest.testmod(fold_module).failed == 0


def test_pass_info():
    p = rb.passes.FoldConstant()
    assert p.info.name == "FoldConstant" and p.info.opt_level == 2 and p.info.kebab == "fold-constant"


# ---- operator calls -------------------------------------------------------------------------

def test_scalar_arithmetic_folds_to_one_constant():
    before = rb.parse(H + """
def @main(%x: float32) {
  %0 = add(1f, 2f);
  %1 = multiply(%0, 4f);
  subtract(%x, %1)
}""")
    expected = rb.parse(H + "def @main(%x: float32) { subtract(%x, 12f) }")
    assert_structural_equal(run_infer_type(fold(before)), run_infer_type(expected), map_free_vars=True)


def test_tensor_folding_matches_numpy():
    a = np.arange(6, dtype="float32").reshape(2, 3)
    b = np.array([1.0, -2.0, 0.5], dtype="float32")
    x = rb.var("x", shape=(3, 2))
    folded_part = op.transpose(op.nn.relu(op.add(rb.const(a), rb.const(b))))
    after = fold(fn([x], op.multiply(x, folded_part)))
    x2 = rb.var("x", shape=(3, 2))
    want = np.maximum(a + b, 0).T
    assert_structural_equal(run_infer_type(after), run_infer_type(fn([x2], op.multiply(x2, rb.const(want)))), map_free_vars=True)


@pytest.mark.parametrize("dtype, text, value", [
    ("int8", "add(100i8, 27i8)", 127),
    ("int64", "multiply(3i64, 5i64)", 15),
    ("float64", "divide(1f64, 4f64)", 0.25),
    ("float16", "cast(1.5f, dtype=\"float16\")", 1.5),
    ("int32", "cast(2.75f, dtype=\"int32\")", 2),
    ("bool", "greater(2f, 1f)", True),
    ("uint8", "cast(255f, dtype=\"uint8\")", 255),
])
def test_folded_constants_keep_their_dtype(dtype, text, value):
    mod = rb.parse(H + f"def @main() {{ {text} }}")
    body = fold(mod)["main"].body
    assert isinstance(body, rb.Constant)
    assert body.data.dtype == np.dtype(dtype) and body.data.shape == ()
    assert body.data.item() == value


def test_tuple_valued_operator_folds_to_a_tuple_and_projects():
    data = np.arange(4, dtype="float32")
    x = rb.var("x", shape=(2,))
    parts = op.split(rb.const(data), indices_or_sections=2)
    after = fold(fn([x], op.add(x, rb.TupleGetItem(parts, 1))))
    x2 = rb.var("x", shape=(2,))
    assert_structural_equal(run_infer_type(after), run_infer_type(fn([x2], op.add(x2, rb.const(data[2:])))), map_free_vars=True)
    whole = fold(fn([], parts))["main"].body
    assert isinstance(whole, rb.Tuple) and all(isinstance(f, rb.Constant) for f in whole.fields)
    np.testing.assert_array_equal(whole.fields[0].data, [0, 1])


def test_tuple_of_constants_as_argument():
    a, b = np.ones((1, 2), "float32"), np.zeros((2, 2), "float32")
    after = fold(fn([], op.concatenate(rb.Tuple([rb.const(a), rb.const(b)]), axis=0)))
    np.testing.assert_array_equal(after["main"].body.data, np.concatenate([a, b]))


def test_zero_argument_calls_are_not_folded():
    before = rb.parse(H + 'def @main() { add(zeros(shape=[2]), ones(shape=[2], dtype="float32")) }')
    assert fold(before) is before


def test_dropout_is_not_folded_even_on_a_constant():
    # Relay marks nn.dropout stateful and leaves it to SimplifyInference; its arithmetic around
    # it still folds.
    before = rb.parse(H + 'def @main() { %0 = nn.dropout(add(1f, 2f), rate=0.25f); multiply(%0.0, 2f) }')
    after = fold(before)
    expected = rb.parse(H + 'def @main() { %0 = nn.dropout(3f, rate=0.25f); multiply(%0.0, 2f) }')
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    # SimplifyInference then removes it, and folding finishes the job: 3 * 2, by hand.
    with rb.PassContext(opt_level=3):
        done = fold(rb.passes.SimplifyInference()(after))
    body = done["main"].body
    assert isinstance(body, rb.Constant) and float(body.data) == 6.0


def test_call_with_a_variable_is_not_folded_and_module_is_returned_unchanged():
    before = rb.parse(H + "def @main(%x: float32) { add(multiply(%x, 2f), 1f) }")
    assert fold(before) is before


def test_failing_evaluation_is_left_for_run_time():
    # mode="fast" promises in-range indices; index 7 breaks the promise, but only if it runs
    before = rb.parse(H + """
def @main(%c: bool, %x: Tensor[(3), float32]) {
  if (%c) {
    add(%x, take(meta[relay.Constant][0], 7, mode="fast"))
  } else {
    %x
  }
}
#[metadata]
{"relay.Constant": [{"dtype": "float32", "shape": [3], "data": "AACAPwAAAEAAAEBA"}]}
""")
    after = fold(before)
    assert after is before
    x = np.ones(3, "float32")
    np.testing.assert_array_equal(run(after, np.bool_(False), x), x)


def test_shape_of_static_shape_folds_even_when_the_data_is_not_constant():
    before = rb.parse(H + """
def @main(%x: Tensor[(2, 5), float32]) {
  (shape_of(%x), shape_of(%x, dtype="int64"), shape_of(sum(%x)))
}""")
    fields = fold(before)["main"].body.fields
    assert [f.data.dtype.name for f in fields] == ["int32", "int64", "int32"]
    np.testing.assert_array_equal(fields[0].data, [2, 5])
    np.testing.assert_array_equal(fields[1].data, [2, 5])
    assert fields[2].data.shape == (0,)


def test_shape_of_symbolic_shape_is_not_folded():
    before = rb.parse(H + "def @main(%x: Tensor[(n, 5), float32]) { shape_of(%x) }")
    assert fold(before) is before


# ---- if, projections, let ---------------------------------------------------------------------

def test_if_with_constant_condition_picks_the_branch():
    before = rb.parse(H + """
def @main(%x: float32) {
  %0 = greater(2f, 1f);
  if (%0) { add(%x, 1f) } else { negative(%x) }
}""")
    expected = rb.parse(H + "def @main(%x: float32) { add(%x, 1f) }")
    assert_structural_equal(run_infer_type(fold(before)), run_infer_type(expected), map_free_vars=True)
    before_false = rb.parse(H + "def @main(%x: float32) { if (False) { add(%x, 1f) } else { negative(%x) } }")
    expected_false = rb.parse(H + "def @main(%x: float32) { negative(%x) }")
    assert_structural_equal(run_infer_type(fold(before_false)), run_infer_type(expected_false), map_free_vars=True)


def test_if_with_variable_condition_stays():
    before = rb.parse(H + "def @main(%c: bool, %x: float32) { if (%c) { %x } else { negative(%x) } }")
    assert fold(before) is before


def test_projection_of_a_literal_tuple():
    before = rb.parse(H + "def @main(%x: float32, %y: float32) { (%x, add(%y, 1f)).1 }")
    expected = rb.parse(H + "def @main(%x: float32, %y: float32) { add(%y, 1f) }")
    assert_structural_equal(run_infer_type(fold(before)), run_infer_type(expected), map_free_vars=True)


def test_projection_that_would_drop_an_effect_stays():
    before = rb.parse(H + "def @main(%r: Ref[float32], %x: float32) { (ref_write(%r, %x), %x).1 }")
    assert fold(before) is before


def test_let_bound_constants_are_substituted():
    before = rb.parse(H + """
def @main(%x: float32) {
  let %c = add(1f, 1f);
  let %t = (%c, 5f);
  let %y = multiply(%x, %c);
  add(%y, %t.1)
}""")
    expected = rb.parse(H + """
def @main(%x: float32) {
  let %y = multiply(%x, 2f);
  add(%y, 5f)
}""")
    assert_structural_equal(run_infer_type(fold(before)), run_infer_type(expected), map_free_vars=True)


def test_let_bound_non_constant_stays():
    before = rb.parse(H + "def @main(%x: float32) { let %y = add(%x, 1f); multiply(%y, %y) }")
    assert fold(before) is before


# ---- where the pass does not go -----------------------------------------------------------------

def test_primitive_functions_are_left_alone():
    p = rb.var("p", shape=())
    prim = rb.Function([p], op.add(p, op.add(rb.const(1.0), rb.const(2.0)))).with_attr("Primitive", 1)
    x = rb.var("x", shape=())
    before = fn([x], rb.Call(prim, [op.multiply(x, rb.const(1.0))]))
    assert fold(before) is before


def test_closures_are_folded_inside():
    before = rb.parse(H + """
def @main(%x: float32) {
  let %f = fn (%y: float32) { add(%y, multiply(2f, 3f)) };
  %f(%x)
}""")
    expected = rb.parse(H + """
def @main(%x: float32) {
  let %f = fn (%y: float32) { add(%y, 6f) };
  %f(%x)
}""")
    assert_structural_equal(run_infer_type(fold(before)), run_infer_type(expected), map_free_vars=True)


def test_every_global_function_is_folded():
    before = rb.parse(H + """
def @f(%x: float32) -> float32 { add(%x, add(1f, 1f)) }
def @main(%x: float32) { @f(multiply(%x, negative(1f))) }""")
    expected = rb.parse(H + """
def @f(%x: float32) -> float32 { add(%x, 2f) }
def @main(%x: float32) { @f(multiply(%x, -1f)) }""")
    assert_structural_equal(run_infer_type(fold(before)), run_infer_type(expected), map_free_vars=True)


# ---- meaning kept ------------------------------------------------------------------------------

def test_interpreter_agrees_before_and_after_on_random_inputs():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3)).astype("float32")
    b = rng.standard_normal((4,)).astype("float32")
    x = rb.var("x", shape=(2, 3))
    scale = op.sqrt(op.add(op.abs(rb.const(b)), rb.const(1.0)))
    wt = op.transpose(op.transpose(rb.const(w)))
    y = op.multiply(op.nn.dense(x, wt), scale)
    y = op.add(y, op.sum(op.exp(rb.const(b)), axis=[0], keepdims=True))
    before = fn([x], op.nn.softmax(y))
    after = fold(before)
    assert op_histogram(after) == {"nn.dense": 1, "multiply": 1, "add": 1, "nn.softmax": 1}
    for _ in range(3):
        data = rng.standard_normal((2, 3)).astype("float32")
        np.testing.assert_allclose(run(after, data), run(before, data), rtol=1e-6, atol=1e-7)


def test_input_module_is_not_changed():
    before = rb.parse(H + "def @main(%x: float32) { add(%x, add(1f, 2f)) }")
    text = before.astext(show_types=False)
    fold(before)
    assert before.astext(show_types=False) == text


def test_resnet_batch_norm_scale_and_shift_fold_to_constants():
    mod, params = rb.models.get("resnet18", image_shape=(3, 32, 32), num_classes=10)
    bound = rb.passes.bind_params(mod, params)
    simplified = rb.passes.SimplifyInference()(bound)
    assert op_histogram(simplified)["expand_dims"] == 40
    after = fold(simplified)
    hist = op_histogram(after)
    for gone in ("expand_dims", "sqrt", "divide", "negative", "nn.batch_norm"):
        assert hist[gone] == 0, gone
    # what is left: per conv, one multiply by a constant scale and one add of a constant shift
    assert hist["nn.conv2d"] == 20 and hist["multiply"] == 20
    for node in rb.ir.post_order(after["main"]):
        if isinstance(node, rb.Call) and node.op.name == "multiply":
            assert isinstance(node.args[1], rb.Constant) and node.args[1].data.shape[1:] == (1, 1)
    data = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype("float32")
    np.testing.assert_allclose(run(after, data), run(bound, data), rtol=1e-4, atol=1e-6)


# ---- scale ---------------------------------------------------------------------------------------

# Deep enough that any recursion on program depth fails (Python stops at 1,000 frames);
# tests/test_scale.py takes 100,000 operators through the whole pipeline.
DEEP = 20_000


def test_deep_constant_chain_folds_to_one_constant():
    y = rb.const(0.0)
    one = rb.const(1.0)
    for _ in range(DEEP):
        y = op.add(y, one)
    x = rb.var("x", shape=())
    after = fold(fn([x], op.multiply(x, y)))
    x2 = rb.var("x", shape=())
    assert_structural_equal(run_infer_type(after), run_infer_type(fn([x2], op.multiply(x2, rb.const(float(DEEP))))), map_free_vars=True)


def test_deep_chain_with_nothing_to_fold_comes_back_unchanged():
    x = rb.var("x", shape=(2,))
    y, one = x, rb.const(1.0)
    for _ in range(DEEP):
        y = op.add(y, one)
    before = rb.passes.InferType()(fn([x], y))
    assert fold(before) is before


def test_blocked_winograd_weights_fold_in_one_step(monkeypatch):
    """``layout_transform(weight_transform(w), HWOI -> HWOI16o)`` of a constant (the x86
    Winograd weights) folds to the two steps' values without computing the unblocked
    transform: the weight transform's own reference is never called."""
    from relaybench.ir.expr import Constant
    from relaybench.ir.layout import Layout
    from relaybench.op import layout_transform, registry
    from types import SimpleNamespace

    from relaybench.op.winograd import (_weight_transform_reference,
                                        contrib_conv2d_winograd_weight_transform)
    w = np.random.default_rng(3).standard_normal((32, 24, 3, 3)).astype("float32")
    expected = Layout("HWOI").transform_array(_weight_transform_reference(w, SimpleNamespace(tile_size=4)),
                                              "HWOI16o")
    expr = layout_transform(contrib_conv2d_winograd_weight_transform(rb.const(w), tile_size=4),
                            src_layout="HWOI", dst_layout="HWOI16o")
    opdef = registry.get_opdef("nn.contrib_conv2d_winograd_weight_transform")

    def unexpected(*args):
        raise AssertionError("the unblocked transform was computed")
    monkeypatch.setattr(opdef, "reference", unexpected)
    folded = rb.passes.FoldConstant()(rb.IRModule.from_expr(rb.Function([], expr)))
    body = folded["main"].body
    assert isinstance(body, Constant) and body.data.shape == (6, 6, 2, 24, 16)
    np.testing.assert_allclose(body.data, expected, rtol=1e-6, atol=1e-6)
