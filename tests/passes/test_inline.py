"""Inline: before/expected modules, fresh bindings per call site, effects kept in order, recursive
and polymorphic functions left alone, the interpreter before and after, and 20,000 call sites."""

import doctest

import numpy as np

import relaybench as rb
from relaybench.backends.interpreter import RefValue
from relaybench.ir import assert_structural_equal, bound_vars, count_ops
from relaybench.passes import inline as inline_module
from relaybench.testing import run_infer_type

H = '#[version = "0.0.5"]\n'


def inline(mod):
    return rb.passes.Inline()(mod)


def run(mod, *args, entry="main"):
    ex = rb.create_executor("interpreter", mod=mod)
    return ex.evaluate(mod.get_global_var(entry))(*args)


def check(before_text, expected_text):
    before, expected = rb.parse(H + before_text), rb.parse(H + expected_text)
    after = inline(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    return before, after


def test_docstring_examples():
    assert doctest.testmod(inline_module).failed == 0


def test_pass_info():
    p = rb.passes.Inline()
    assert p.info.name == "Inline" and p.info.opt_level == 1 and p.info.kebab == "inline"


# ---- inlining ----------------------------------------------------------------------------------

def test_call_is_replaced_by_the_body_and_the_function_removed():
    check("""
def @f(%a: float32, %b: float32, Inline=1) -> float32 { multiply(add(%a, %b), %a) }
def @main(%x: float32, %y: float32) { negative(@f(%x, exp(%y))) }""", """
def @main(%x: float32, %y: float32) { negative(multiply(add(%x, exp(%y)), %x)) }""")


def test_functions_without_the_attribute_stay():
    before = rb.parse(H + """
def @f(%a: float32) -> float32 { add(%a, 1f) }
def @g(%a: float32, Inline=0) -> float32 { add(%a, 2f) }
def @main(%x: float32) { @g(@f(%x)) }""")
    assert inline(before) is before


def test_inlinable_functions_calling_each_other_expand_fully():
    check("""
def @sq(%a: float32, Inline=1) -> float32 { multiply(%a, %a) }
def @quad(%a: float32, Inline=1) -> float32 { @sq(@sq(%a)) }
def @other(%a: float32) -> float32 { @quad(%a) }
def @main(%x: float32) { @other(@quad(%x)) }""", """
def @other(%a: float32) -> float32 { %0 = multiply(%a, %a); multiply(%0, %0) }
def @main(%x: float32) { %1 = multiply(%x, %x); @other(multiply(%1, %1)) }""")


def test_each_call_site_gets_fresh_bindings():
    before, after = check("""
def @f(%a: float32, Inline=1) -> float32 {
  let %t = add(%a, 1f);
  multiply(%t, %t)
}
def @main(%x: float32) { @f(@f(%x)) }""", """
def @main(%x: float32) {
  let %t1 = add((let %t0 = add(%x, 1f); multiply(%t0, %t0)), 1f);
  multiply(%t1, %t1)
}""")
    lets = [v for v in bound_vars(after["main"]) if v.name_hint == "t"]
    assert len(lets) == 2 and lets[0] is not lets[1]
    np.testing.assert_allclose(run(after, np.float32(2.0)), run(before, np.float32(2.0)))
    assert run(after, np.float32(2.0)) == 100.0


def test_closed_subexpressions_are_not_shared_between_copies():
    # each call of @counter makes its own reference cell
    before = rb.parse(H + """
def @counter(%u: (), Inline=1) -> float32 {
  let %r = ref(0f);
  let %w = ref_write(%r, add(ref_read(%r), 1f));
  ref_read(%r)
}
def @main() { add(@counter(()), @counter(())) }""")
    after = inline(before)
    assert "counter" not in after
    refs = [n for n in rb.ir.post_order(after["main"]) if isinstance(n, rb.RefCreate)]
    assert len(refs) == 2
    assert run(after) == run(before) == 2.0


def test_arguments_with_effects_run_once_and_in_order():
    before, after = check("""
def @twice(%a: float32, %b: float32, Inline=1) -> float32 { add(add(%b, %b), %a) }
def @main(%r: Ref[float32], %x: float32) {
  @twice(ref_read(%r), (let %w = ref_write(%r, %x); 1f))
}""", """
def @main(%r: Ref[float32], %x: float32) {
  let %a: float32 = ref_read(%r);
  let %b: float32 = (let %w = ref_write(%r, %x); 1f);
  add(add(%b, %b), %a)
}""")
    r1, r2 = RefValue(np.float32(5.0)), RefValue(np.float32(5.0))
    assert run(before, r1, np.float32(9.0)) == run(after, r2, np.float32(9.0)) == 7.0
    assert r1.value == r2.value == 9.0


def test_use_as_a_value_becomes_a_function():
    check("""
def @inc(%a: float32, Inline=1) -> float32 { add(%a, 1f) }
def @apply(%f: fn (float32) -> float32, %x: float32) -> float32 { %f(%x) }
def @main(%x: float32) { @apply(@inc, %x) }""", """
def @apply(%f: fn (float32) -> float32, %x: float32) -> float32 { %f(%x) }
def @main(%x: float32) { @apply(fn (%a: float32) -> float32 { add(%a, 1f) }, %x) }""")


def test_an_entry_point_marked_inline_stays():
    # nothing calls @g: it is an entry point and stays; @f was used, is inlined, and goes
    check("""
def @f(%a: float32, Inline=1) -> float32 { add(%a, 1f) }
def @g(%a: float32, Inline=1) -> float32 { @f(%a) }""", """
def @g(%a: float32, Inline=1) -> float32 { add(%a, 1f) }""")


# ---- left alone -----------------------------------------------------------------------------------

def test_recursive_inline_function_is_left_alone():
    before = rb.parse(H + """
def @count(%i: int32, Inline=1) -> int32 {
  if (less(%i, 10)) { @count(add(%i, 1)) } else { %i }
}
def @main(%x: int32) { @count(%x) }""")
    assert inline(before) is before
    assert run(before, np.int32(4)) == 10


def test_mutually_recursive_inline_functions_are_left_alone():
    before = rb.parse(H + """
def @even(%i: int32, Inline=1) -> bool { if (equal(%i, 0)) { True } else { @odd(subtract(%i, 1)) } }
def @odd(%i: int32) -> bool { if (equal(%i, 0)) { False } else { @even(subtract(%i, 1)) } }
def @main(%x: int32) { @even(%x) }""")
    assert inline(before) is before


def test_polymorphic_functions_are_left_alone():
    before = rb.parse(H + """
def @id[A](%a: A, Inline=1) -> A { %a }
def @first(%a: Tensor[(n, 2), float32], Inline=1) -> Tensor[(2), float32] { take(%a, 0, axis=0) }
def @main(%x: Tensor[(3, 2), float32]) { @first(@id(%x)) }""")
    assert inline(before) is before


# ---- meaning kept ---------------------------------------------------------------------------------

def test_interpreter_agrees_before_and_after_on_random_inputs():
    before = rb.parse(H + """
def @layer(%x: Tensor[(2, 3), float32], %w: Tensor[(4, 3), float32], Inline=1) -> Tensor[(2, 4), float32] {
  let %y = nn.dense(%x, %w);
  nn.relu(%y)
}
def @head(%h: Tensor[(2, 4), float32], Inline=1) -> Tensor[(2, 4), float32] {
  let %g = fn (%z: Tensor[(2, 4), float32]) { nn.softmax(%z) };
  %g(%h)
}
def @main(%x: Tensor[(2, 3), float32], %w: Tensor[(4, 3), float32]) {
  (@head(@layer(%x, %w)), @layer(negative(%x), %w))
}""")
    after = inline(before)
    assert list(after.functions) == [after.get_global_var("main")]
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 3)).astype("float32"), rng.standard_normal((4, 3)).astype("float32")
    for got, want in zip(run(after, x, w), run(before, x, w)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_input_module_is_not_changed():
    before = rb.parse(H + """
def @f(%a: float32, Inline=1) -> float32 { add(%a, 1f) }
def @main(%x: float32) { @f(%x) }""")
    text = before.astext(show_types=False)
    inline(before)
    assert before.astext(show_types=False) == text and "f" in before


# ---- scale -----------------------------------------------------------------------------------------

# Deep enough that any recursion on program depth fails (Python stops at 1,000 frames);
# tests/test_scale.py takes 100,000 operators through the whole pipeline.
DEEP = 20_000


def test_deep_nested_call_sites():
    mod = rb.parse(H + """
def @step(%a: Tensor[(2), float32], Inline=1) -> Tensor[(2), float32] { add(%a, 1f) }
def @main(%x: Tensor[(2), float32]) { %x }""")
    step = mod.get_global_var("step")
    x = rb.var("x", shape=(2,))
    y = x
    for _ in range(DEEP):
        y = rb.Call(step, (y,))
    mod["main"] = rb.Function([x], y)
    after = inline(mod)
    assert "step" not in after and count_ops(after) == DEEP
    np.testing.assert_array_equal(run(after, np.zeros(2, "float32")), [DEEP, DEEP])


def test_lstm_cell_inlined_into_the_recursive_loop():
    from relaybench.models.nlp import make_list
    mod, params = rb.models.get("lstm", seq_len=3, input_size=4, hidden_size=5, form="loop")
    marked = mod.copy()
    marked["lstm_cell"] = mod["lstm_cell"].with_attr("Inline", 1)
    after = inline(marked)
    assert "lstm_cell" not in after and "lstm_loop" in after
    assert rb.ir.op_histogram(after["lstm_loop"])["nn.dense"] == 2
    rng = np.random.default_rng(1)
    xs = make_list([rng.standard_normal((1, 4)).astype("float32") for _ in range(3)])
    want = rb.create_executor("interpreter", mod=mod).evaluate()(xs, **params)
    got = rb.create_executor("interpreter", mod=after).evaluate()(xs, **params)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)
