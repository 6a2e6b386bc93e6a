"""EliminateCommonSubexpr: before/expected programs (sharing is structure), scopes, the interpreter
before and after, duplicated convolutions, and a 20,000-op chain."""

import doctest

import numpy as np

import relaybench as rb
from relaybench import op
from relaybench.ir import assert_structural_equal, op_histogram
from relaybench.passes import eliminate_common_subexpr as cse_module
from relaybench.testing import run_infer_type

H = '#[version = "0.0.5"]\n'


def cse(mod):
    return rb.passes.EliminateCommonSubexpr()(mod)


def run(mod, *args):
    return rb.create_executor("interpreter", mod=mod).evaluate()(*args)


def check(before_text, expected_text):
    before, expected = rb.parse(H + before_text), rb.parse(H + expected_text)
    after = cse(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    return before, after


def unchanged(text):
    before = rb.parse(H + text)
    assert cse(before) is before


def test_docstring_examples():
    assert doctest.testmod(cse_module).failed == 0


def test_pass_info():
    p = rb.passes.EliminateCommonSubexpr()
    assert p.info.opt_level == 3 and p.info.kebab == "eliminate-common-subexpr"


# ---- merging in graph form ------------------------------------------------------------------------

def test_equal_calls_merge_and_then_their_users_merge():
    check("""
def @main(%x: Tensor[(4), float32]) {
  %0 = add(%x, 1f);
  %1 = add(%x, 1f);
  %2 = nn.relu(%0);
  %3 = nn.relu(%1);
  multiply(%2, %3)
}""", """
def @main(%x: Tensor[(4), float32]) {
  %0 = add(%x, 1f);
  %1 = nn.relu(%0);
  multiply(%1, %1)
}""")


def test_different_attrs_or_args_do_not_merge():
    unchanged("""
def @main(%x: Tensor[(2, 4), float32], %y: Tensor[(2, 4), float32]) {
  %0 = sum(%x, axis=[0]);
  %1 = sum(%x, axis=[1]);
  %2 = add(%x, 1f);
  %3 = add(%y, 1f);
  %4 = add(%x, 2f);
  (%0, %1, %2, %3, %4)
}""")


def test_equal_constants_in_different_nodes_count_as_the_same_argument():
    x = rb.var("x", shape=(3,))
    w = np.array([1.0, 2.0, 3.0], "float32")
    a, b = op.multiply(x, rb.const(w)), op.multiply(x, rb.const(w.copy()))
    after = cse(rb.IRModule.from_expr(rb.Function([x], op.add(a, b))))
    x2 = rb.var("x", shape=(3,))
    m = op.multiply(x2, rb.const(w))
    assert_structural_equal(run_infer_type(after), run_infer_type(rb.IRModule.from_expr(rb.Function([x2], op.add(m, m)))), map_free_vars=True)
    # but a constant of another dtype or value is another argument
    unchanged("def @main(%x: int32) { (add(%x, 1), add(%x, 2)) }")


def test_tuple_arguments_compare_field_by_field():
    check("""
def @main(%x: Tensor[(2), float32], %y: Tensor[(2), float32]) {
  %0 = concatenate((%x, %y));
  %1 = concatenate((%x, %y));
  %2 = concatenate((%y, %x));
  (%0, %1, %2)
}""", """
def @main(%x: Tensor[(2), float32], %y: Tensor[(2), float32]) {
  %0 = concatenate((%x, %y));
  %1 = concatenate((%y, %x));
  (%0, %0, %1)
}""")


def test_projections_merge():
    check("""
def @main(%x: Tensor[(4), float32]) {
  %0 = split(%x, indices_or_sections=2);
  %1 = split(%x, indices_or_sections=2);
  add(%0.0, %1.0)
}""", """
def @main(%x: Tensor[(4), float32]) {
  %0 = split(%x, indices_or_sections=2);
  %1 = %0.0;
  add(%1, %1)
}""")


def test_calls_without_arguments_functions_and_constructors_do_not_merge():
    unchanged("""
def @g(%x: float32) -> float32 { %x }
def @main(%x: float32, %f: fn (float32) -> float32) {
  (zeros(shape=[2], dtype="float32"), zeros(shape=[2], dtype="float32"), @g(%x), @g(%x), %f(%x), %f(%x))
}""")


def test_duplicated_convolutions():
    x = rb.var("data", shape=(1, 3, 8, 8))
    w = rb.var("w", shape=(4, 3, 3, 3))

    def branch():
        return op.nn.relu(op.nn.conv2d(x, w, padding=(1, 1), channels=4, kernel_size=(3, 3)))

    before = rb.IRModule.from_expr(rb.Function([x, w], op.add(branch(), branch())))
    other = op.nn.conv2d(x, w, padding=(0, 0), channels=4, kernel_size=(3, 3))  # not equal: padding
    kept = rb.IRModule.from_expr(rb.Function([x, w], rb.Tuple([branch(), other])))
    after = cse(before)
    assert op_histogram(after) == {"nn.conv2d": 1, "nn.relu": 1, "add": 1}
    y = branch()
    assert_structural_equal(run_infer_type(after), run_infer_type(rb.IRModule.from_expr(rb.Function([x, w], op.add(y, y)))))
    assert cse(kept) is kept
    rng = np.random.default_rng(0)
    data = rng.standard_normal((1, 3, 8, 8)).astype("float32")
    weight = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    np.testing.assert_allclose(run(after, data, weight), run(before, data, weight), rtol=1e-6)


def test_bound_weights_equal_by_value_merge_convolutions():
    x = rb.var("data", shape=(1, 2, 5, 5))
    w = np.random.default_rng(1).standard_normal((2, 2, 1, 1)).astype("float32")
    a = op.nn.conv2d(x, rb.const(w), channels=2, kernel_size=(1, 1))
    b = op.nn.conv2d(x, rb.const(w.copy()), channels=2, kernel_size=(1, 1))
    after = cse(rb.IRModule.from_expr(rb.Function([x], op.subtract(a, b))))
    assert op_histogram(after)["nn.conv2d"] == 1
    assert not np.any(run(after, np.ones((1, 2, 5, 5), "float32")))


# ---- scopes ---------------------------------------------------------------------------------------

def test_equal_calls_in_sibling_branches_stay_apart():
    unchanged("""
def @main(%c: bool, %x: float32) {
  if (%c) { add(%x, 1f) } else { multiply(add(%x, 1f), 2f) }
}""")


def test_branch_reuses_the_enclosing_computation():
    check("""
def @main(%c: bool, %x: float32) {
  %0 = exp(%x);
  %1 = if (%c) { add(exp(%x), 1f) } else { negative(exp(%x)) };
  multiply(%0, %1)
}""", """
def @main(%c: bool, %x: float32) {
  %0 = exp(%x);
  %1 = if (%c) { add(%0, 1f) } else { negative(%0) };
  multiply(%0, %1)
}""")


def test_nothing_is_hoisted_out_of_a_branch():
    # exp(%x) first appears in a branch; the one after the if must stay a computation of its own
    unchanged("""
def @main(%c: bool, %x: float32) {
  %0 = if (%c) { exp(%x) } else { %x };
  add(%0, exp(%x))
}""")


def test_closure_reuses_the_enclosing_computation_but_not_the_other_way():
    check("""
def @main(%x: float32) {
  %0 = exp(%x);
  %1 = fn (%y: float32) { add(exp(%x), %y) };
  %2 = fn (%z: float32) { multiply(log(%z), log(%z)) };
  (%0, %1(%x), %2(%x), log(%x))
}""", """
def @main(%x: float32) {
  %0 = exp(%x);
  %1 = fn (%y: float32) { add(%0, %y) };
  %2 = fn (%z: float32) { %3 = log(%z); multiply(%3, %3) };
  (%0, %1(%x), %2(%x), log(%x))
}""")


def test_match_clauses_are_scopes():
    prog = rb.parse(H + """
type Option[A] { Some(A), None }
def @main(%o: Option[float32], %x: float32) {
  %0 = exp(%x);
  %1 = match (%o) {
    Some(%v) => add(add(%v, exp(%x)), add(%v, exp(%x))),
    None => add(%x, exp(%x)),
  };
  %2 = match (%o) {
    Some(%w) => log(%x),
    None => negative(log(%x)),
  };
  (%0, %1, %2)
}""")
    expected = rb.parse(H + """
type Option[A] { Some(A), None }
def @main(%o: Option[float32], %x: float32) {
  %0 = exp(%x);
  %1 = match (%o) {
    Some(%v) => { %3 = add(%v, %0); add(%3, %3) },
    None => add(%x, %0),
  };
  %2 = match (%o) {
    Some(%w) => log(%x),
    None => negative(log(%x)),
  };
  (%0, %1, %2)
}""")
    assert_structural_equal(run_infer_type(cse(prog)), run_infer_type(expected), map_free_vars=True)


# ---- let-bound code --------------------------------------------------------------------------------

def test_let_bound_equal_value_becomes_the_earlier_variable():
    check("""
def @main(%x: float32) {
  let %a = add(%x, 1f);
  let %b = add(%x, 1f);
  let %c = multiply(%a, %b);
  let %d = multiply(%a, %a);
  subtract(%c, %d)
}""", """
def @main(%x: float32) {
  let %a = add(%x, 1f);
  let %c = multiply(%a, %a);
  subtract(%c, %c)
}""")


def test_graph_expression_after_a_binding_uses_the_variable():
    check("""
def @main(%x: float32) {
  let %a = exp(%x);
  add(%a, exp(%x))
}""", """
def @main(%x: float32) {
  let %a = exp(%x);
  add(%a, %a)
}""")


def test_binding_in_a_branch_is_not_seen_after_the_if():
    unchanged("""
def @main(%c: bool, %x: float32) {
  let %r = if (%c) { let %a = exp(%x); %a } else { %x };
  let %b = exp(%x);
  add(%r, %b)
}""")


def test_a_node_shared_by_two_branches_does_not_carry_one_branch_binding_to_the_other():
    x, c = rb.var("x", shape=()), rb.var("c", shape=(), dtype="bool")
    shared = op.exp(x)  # one node, used in both branches
    a = rb.var("a")
    before = rb.IRModule.from_expr(rb.Function(
        [c, x], rb.If(c, rb.Let(a, op.exp(x), op.add(a, shared)), op.negative(shared))))
    after = cse(before)
    expected = rb.parse(H + """
def @main(%c: bool, %x: float32) {
  if (%c) { let %a = exp(%x); add(%a, %a) } else { negative(exp(%x)) }
}""")
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    for flag in (True, False):
        np.testing.assert_allclose(run(after, np.bool_(flag), np.float32(0.5)),
                                   run(before, np.bool_(flag), np.float32(0.5)))


# ---- where the pass does not go ----------------------------------------------------------------------

def test_primitive_functions_are_left_alone():
    p = rb.var("p", shape=())
    prim = rb.Function([p], op.add(op.exp(p), op.exp(p))).with_attr("Primitive", 1)
    x = rb.var("x", shape=())
    before = rb.IRModule.from_expr(rb.Function([x], rb.Call(prim, [x])))
    assert cse(before) is before


# ---- meaning kept ----------------------------------------------------------------------------------

def test_interpreter_agrees_before_and_after_on_random_inputs():
    before = rb.parse(H + """
def @main(%c: bool, %x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  %0 = multiply(%x, %y);
  %1 = multiply(%x, %y);
  %2 = if (%c) { add(multiply(%x, %y), tanh(%1)) } else { subtract(tanh(%0), %y) };
  let %l = fn (%z: Tensor[(3), float32]) { add(tanh(%z), tanh(%z)) };
  (add(%0, %2), %l(%1), split(%2, indices_or_sections=3).1, split(%2, indices_or_sections=3).1)
}""")
    after = cse(before)
    assert sum(op_histogram(after).values()) < sum(op_histogram(before).values())
    rng = np.random.default_rng(2)
    for c in (True, False):
        x, y = rng.standard_normal(3).astype("float32"), rng.standard_normal(3).astype("float32")
        want, got = run(before, np.bool_(c), x, y), run(after, np.bool_(c), x, y)
        for w, g in zip(want, got):
            np.testing.assert_allclose(g, w, rtol=1e-6)


def test_resnet_has_nothing_to_merge():
    mod, _params = rb.models.get("resnet18", image_shape=(3, 32, 32), num_classes=10)
    assert cse(mod) is mod


# ---- scale --------------------------------------------------------------------------------------------

# Deep enough that any recursion on program depth fails (Python stops at 1,000 frames);
# tests/test_scale.py takes 100,000 operators through the whole pipeline.
DEEP = 20_000


def test_deep_op_chain_with_duplicates():
    x = rb.var("x", shape=(2,))
    one, add, neg = rb.const(1.0), rb.Op.get("add"), rb.Op.get("negative")
    y = e = x
    for _ in range(DEEP // 3):
        y = rb.Call(add, (rb.Call(neg, (y,)), rb.Call(neg, (y,))))  # two separate, equal calls
        n = rb.Call(neg, (e,))
        e = rb.Call(add, (n, n))
    after = cse(rb.IRModule.from_expr(rb.Function([x], op.add(y, one))))
    expected = rb.IRModule.from_expr(rb.Function([x], op.add(e, one)))
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)


# ---- fskip (Relay's EliminateCommonSubexpr(fskip=None)) --------------------------------------------

SKIP_TEXT = """
def @main(%x: Tensor[(4), float32]) {
  %0 = add(%x, 1f);
  %1 = add(%x, 1f);
  %2 = nn.relu(%x);
  %3 = nn.relu(%x);
  (multiply(%0, %2), multiply(%1, %3))
}"""


def _skip_add(call):
    return call.op.name == "add"


def test_fskip_exempts_the_calls_it_holds_for():
    # the adds stay two calls; the relus merge; the multiplies then differ in their first argument
    expected = """
def @main(%x: Tensor[(4), float32]) {
  %0 = add(%x, 1f);
  %1 = add(%x, 1f);
  %2 = nn.relu(%x);
  (multiply(%0, %2), multiply(%1, %2))
}"""
    for p in (rb.passes.EliminateCommonSubexpr(fskip=_skip_add), rb.passes.EliminateCommonSubexpr(_skip_add)):
        after = p(rb.parse(H + SKIP_TEXT))
        assert_structural_equal(run_infer_type(after), run_infer_type(rb.parse(H + expected)), map_free_vars=True)
    # without fskip everything merges
    assert op_histogram(cse(rb.parse(H + SKIP_TEXT))) == {"add": 1, "nn.relu": 1, "multiply": 1}


def test_fskip_sees_the_call_and_applies_in_let_form():
    seen = []

    def fskip(call):
        seen.append(call.op.name)
        return call.op.name == "exp"

    before = rb.parse(H + """
def @main(%x: float32) {
  let %a = exp(%x);
  let %b = exp(%x);
  let %c = negative(%x);
  let %d = negative(%x);
  (%a, %b, %c, %d)
}""")
    after = rb.passes.EliminateCommonSubexpr(fskip)(before)
    expected = rb.parse(H + """
def @main(%x: float32) {
  let %a = exp(%x);
  let %b = exp(%x);
  let %c = negative(%x);
  (%a, %b, %c, %c)
}""")
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    assert set(seen) == {"exp", "negative"}
    out = run(after, np.float32(0.5))
    np.testing.assert_allclose([float(v) for v in out], [np.exp(0.5), np.exp(0.5), -0.5, -0.5], rtol=1e-6)


def test_fskip_must_be_a_predicate():
    import pytest
    with pytest.raises(TypeError, match="fskip"):
        rb.passes.EliminateCommonSubexpr(fskip=3)(rb.parse(H + SKIP_TEXT))


def test_dropout_calls_are_not_merged():
    # Relay marks nn.dropout stateful: two dropouts are two random masks at training time
    unchanged("""
def @main(%x: Tensor[(4), float32]) {
  %0 = nn.dropout(%x);
  %1 = nn.dropout(%x);
  add(%0.0, %1.0)
}""")
