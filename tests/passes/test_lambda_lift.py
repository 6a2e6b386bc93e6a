"""LambdaLift: before/expected modules per rule (closed closures, captured variables, recursion,
nesting, generic functions), what it leaves alone, and the interpreter before and after on the
NLP models."""

import doctest

import numpy as np
import pytest

import relaybench as rb
from relaybench.ir import Function, assert_structural_equal, post_order
from relaybench.models.nlp import from_list, make_list, make_tree
from relaybench.passes import lambda_lift as lift_module
from relaybench.testing import run_infer_type

H = '#[version = "0.0.5"]\n'


def lift(mod):
    return rb.passes.LambdaLift()(mod)


def run(mod, *args, **kwargs):
    return rb.create_executor("interpreter", mod=mod).evaluate()(*args, **kwargs)


def local_closures(mod) -> list:
    """(global name, function) for every non-Primitive function literal inside a global, other
    than the Closure=1 function a lifted global returns."""
    out = []
    for gv, func in mod.functions.items():
        top = {func}
        if isinstance(func.body, Function) and func.body.attrs.get("Closure"):
            top.add(func.body)
        for node in post_order(func):
            if isinstance(node, Function) and node not in top and not node.is_primitive:
                out.append((gv.name_hint, node))
    return out


def test_docstring_example():
    assert doctest.testmod(lift_module).failed == 0


def test_pass_info():
    p = rb.passes.LambdaLift()
    assert p.info.name == "LambdaLift" and p.info.opt_level == 1 and p.info.kebab == "lambda-lift"


def test_closed_closure_becomes_the_global_itself():
    before = rb.parse(H + """
def @main(%x: Tensor[(2), float32]) {
  %0 = fn (%y: Tensor[(2), float32]) -> Tensor[(2), float32] { multiply(%y, %y) };
  %0(%x)
}""")
    expected = rb.parse(H + """
def @lifted_main(%y: Tensor[(2), float32]) -> Tensor[(2), float32] { multiply(%y, %y) }
def @main(%x: Tensor[(2), float32]) { @lifted_main(%x) }
""")
    assert_structural_equal(run_infer_type(lift(before)), run_infer_type(expected))


def test_capturing_closure_takes_its_captures_first_and_is_marked():
    before = rb.parse(H + """
def @main(%a: Tensor[(2), float32], %b: Tensor[(2), float32], %x: Tensor[(2), float32]) {
  let %f = fn (%y: Tensor[(2), float32]) { add(multiply(%y, %a), %b) };
  (%f(%x), %f(%a))
}""")
    expected = rb.parse(H + """
def @lifted_f(%a: Tensor[(2), float32], %b: Tensor[(2), float32]) {
  fn (%y: Tensor[(2), float32], Closure=1) { add(multiply(%y, %a), %b) }
}
def @main(%a: Tensor[(2), float32], %b: Tensor[(2), float32], %x: Tensor[(2), float32]) {
  let %f = @lifted_f(%a, %b);
  (%f(%x), %f(%a))
}""")
    after = lift(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected))
    args = [np.array(v, "float32") for v in ([1, 2], [3, 4], [5, 6])]
    for got, want in zip(run(after, *args), run(before, *args)):
        np.testing.assert_allclose(got, want)


def test_captured_let_and_pattern_variables_are_typed_parameters():
    before = rb.parse(H + """
type List[A] { Cons(A, List[A]), Nil, }
def @main(%l: List[Tensor[(2), float32]], %x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  match (%l) {
    Cons(%h, _) => {
      let %s = add(%h, %x);
      let %g = fn (%y: Tensor[(2), float32]) { multiply(%y, %s) };
      %g(%h)
    },
    Nil => %x,
  }
}""")
    expected = rb.parse(H + """
type List[A] { Cons(A, List[A]), Nil, }
def @lifted_g(%s: Tensor[(2), float32]) {
  fn (%y: Tensor[(2), float32], Closure=1) { multiply(%y, %s) }
}
def @main(%l: List[Tensor[(2), float32]], %x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  match (%l) {
    Cons(%h, _) => {
      let %s = add(%h, %x);
      let %g = @lifted_g(%s);
      %g(%h)
    },
    Nil => %x,
  }
}""")
    assert_structural_equal(run_infer_type(lift(before)), run_infer_type(expected))


def test_recursive_closure_without_captures_calls_the_global():
    before = rb.parse(H + """
def @main(%n: int32) {
  let %f = fn (%i: int32) -> int32 {
    if (less(%i, 1)) { 0 } else { add(%i, %f(subtract(%i, 1))) }
  };
  %f(%n)
}""")
    expected = rb.parse(H + """
def @lifted_f(%i: int32) -> int32 {
  if (less(%i, 1)) { 0 } else { add(%i, @lifted_f(subtract(%i, 1))) }
}
def @main(%n: int32) {
  let %f = @lifted_f;
  %f(%n)
}""")
    after = lift(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected))
    assert run(after, np.int32(6)) == run(before, np.int32(6)) == 21


def test_recursive_closure_with_captures_rebuilds_itself_through_the_global():
    before = rb.parse(H + """
def @main(%a: Tensor[(2), float32], %n: int32) {
  let %f = fn (%i: int32, %acc: Tensor[(2), float32]) -> Tensor[(2), float32] {
    if (less(%i, 1)) { %acc } else { %f(subtract(%i, 1), add(%acc, %a)) }
  };
  %f(%n, %a)
}""")
    expected = rb.parse(H + """
def @lifted_f(%a: Tensor[(2), float32]) {
  fn (%i: int32, %acc: Tensor[(2), float32], Closure=1) -> Tensor[(2), float32] {
    if (less(%i, 1)) { %acc } else { @lifted_f(%a)(subtract(%i, 1), add(%acc, %a)) }
  }
}
def @main(%a: Tensor[(2), float32], %n: int32) {
  let %f = @lifted_f(%a);
  %f(%n, %a)
}""")
    after = lift(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected))
    a = np.array([1.5, -1.0], "float32")
    np.testing.assert_allclose(run(after, a, np.int32(3)), 4 * a)
    np.testing.assert_allclose(run(before, a, np.int32(3)), 4 * a)


def test_nested_closures_are_lifted_innermost_first():
    before = rb.parse(H + """
def @main(%a: Tensor[(2), float32], %x: Tensor[(2), float32]) {
  let %outer = fn (%y: Tensor[(2), float32]) {
    let %inner = fn (%z: Tensor[(2), float32]) { add(%z, %a) };
    %inner(multiply(%y, %y))
  };
  %outer(%x)
}""")
    expected = rb.parse(H + """
def @lifted_inner(%a: Tensor[(2), float32]) {
  fn (%z: Tensor[(2), float32], Closure=1) { add(%z, %a) }
}
def @lifted_outer(%a: Tensor[(2), float32]) {
  fn (%y: Tensor[(2), float32], Closure=1) {
    let %inner = @lifted_inner(%a);
    %inner(multiply(%y, %y))
  }
}
def @main(%a: Tensor[(2), float32], %x: Tensor[(2), float32]) {
  let %outer = @lifted_outer(%a);
  %outer(%x)
}""")
    after = lift(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected))
    assert not local_closures(after)
    a, x = np.array([1.0, 2.0], "float32"), np.array([3.0, -1.0], "float32")
    np.testing.assert_allclose(run(after, a, x), x * x + a)


def test_closure_returned_by_a_function_and_names_kept_unique():
    before = rb.parse(H + """
def @lifted_main(%q: float32) { %q }
def @adder(%k: float32) -> fn (float32) -> float32 {
  fn (%v: float32) -> float32 { add(%v, %k) }
}
def @main(%x: float32) {
  %0 = fn (%u: float32) -> float32 { negative(%u) };
  (@adder(2f)(%x), %0(%x), @lifted_main(%x))
}""")
    after = lift(before)
    assert {gv.name_hint for gv in after.functions} == {"lifted_main", "lifted_main_1", "adder",
                                                        "lifted_adder", "main"}
    expected_adder = rb.parse(H + """
def @lifted_adder(%k: float32) { fn (%v: float32, Closure=1) -> float32 { add(%v, %k) } }
def @adder(%k: float32) -> fn (float32) -> float32 { @lifted_adder(%k) }
""")
    assert_structural_equal(run_infer_type(after["adder"]), run_infer_type(expected_adder["adder"]))
    assert_structural_equal(run_infer_type(after["lifted_adder"]), run_infer_type(expected_adder["lifted_adder"]))
    assert [float(v) for v in run(after, np.float32(5))] == [7.0, -5.0, 5.0]


def test_generic_closures_take_the_type_variables_they_mention():
    before = rb.parse(H + """
def @compose[A, B, C](%f: fn (B) -> C, %g: fn (A) -> B) -> fn (A) -> C {
  fn (%x: A) -> C { %f(%g(%x)) }
}
def @main(%x: float32) {
  @compose(fn (%a: float32) -> float32 { add(%a, 1f) }, fn (%b: float32) -> float32 { multiply(%b, 3f) })(%x)
}""")
    after = lift(before)
    lifted = after["lifted_compose"]
    assert [tv.name_hint for tv in lifted.type_params] == ["A", "C", "B"]
    assert lifted.body.attrs.get("Closure") == 1 and not local_closures(after)
    assert float(run(after, np.float32(2))) == float(run(before, np.float32(2))) == 7.0


def test_leaves_primitive_functions_and_lifted_globals_alone():
    mod = rb.parse(H + """
def @main(%x: Tensor[(2), float32]) {
  %0 = fn (%p: Tensor[(2), float32], Primitive=1) { add(%p, %p) };
  %0(%x)
}""")
    assert lift(mod) is mod
    once = lift(rb.parse(H + """
def @main(%a: float32) { let %f = fn (%y: float32) { add(%y, %a) }; %f(%a) }"""))
    assert lift(once) is once


@pytest.mark.parametrize("name", ["tree_lstm", "lstm", "char_rnn"])
def test_nlp_models_keep_their_outputs(name):
    rng = np.random.default_rng(3)
    if name == "tree_lstm":
        mod, params = rb.models.get(name, input_size=3, hidden_size=4)
        leaf = lambda: make_tree(rng.standard_normal((1, 3)).astype("float32"))  # noqa: E731
        inputs = (make_tree(rng.standard_normal((1, 3)).astype("float32"),
                            [leaf(), make_tree(rng.standard_normal((1, 3)).astype("float32"), [leaf(), leaf()])]),)
    elif name == "lstm":
        mod, params = rb.models.get(name, form="loop", input_size=3, hidden_size=4)
        inputs = (make_list([rng.standard_normal((1, 3)).astype("float32") for _ in range(4)]),)
    else:
        mod, params = rb.models.get(name, hidden_size=6, max_length=4)
        inputs = (np.eye(18, dtype="float32")[None, 5], np.int32(1))
    after = lift(mod)
    assert local_closures(mod) and not local_closures(after)
    assert lift(after) is after
    got, want = run(after, *inputs, **params), run(mod, *inputs, **params)
    if name == "char_rnn":
        assert [int(c) for c in from_list(got)] == [int(c) for c in from_list(want)]
    else:
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_tree_lstm_closures_capture_the_weights():
    mod, _ = rb.models.get("tree_lstm", input_size=3, hidden_size=4)
    after = lift(mod)
    lifted = [gv.name_hint for gv in after.functions if gv.name_hint.startswith("lifted_tree_lstm")]
    assert len(lifted) == 3
    captured = sorted(len(after[n].params) for n in lifted if after[n].body.attrs.get("Closure"))
    assert captured == [3, 8]  # add_fc captures fx and fh's weight and bias; run_child all 8 weights
