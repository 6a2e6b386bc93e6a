"""DeadCodeElimination: before/expected programs, effects kept, the interpreter before and after, and
20,000-binding chains."""

import doctest

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.backends.interpreter import RefValue
from relaybench.ir import assert_structural_equal, count_ops
from relaybench.passes import dead_code_elimination as dce_module
from relaybench.passes.dead_code_elimination import is_pure
from relaybench.testing import run_infer_type

H = '#[version = "0.0.5"]\n'


def dce(mod, **options):
    return rb.passes.DeadCodeElimination(**options)(mod)


def run(mod, *args):
    return rb.create_executor("interpreter", mod=mod).evaluate()(*args)


def check(before_text, expected_text, **options):
    before, expected = rb.parse(H + before_text), rb.parse(H + expected_text)
    after = dce(before, **options)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    return before, after


def test_docstring_examples():
    assert doctest.testmod(dce_module).failed == 0


def test_pass_info():
    p = rb.passes.DeadCodeElimination(inline_once=True)
    assert p.info.name == "DeadCodeElimination" and p.info.opt_level == 1
    assert p.info.label == "DeadCodeElimination{inline_once=True}"


# ---- what goes ------------------------------------------------------------------------------

def test_unused_pure_binding_goes():
    check("""
def @main(%x: float32) {
  let %a = add(%x, 1f);
  let %b = multiply(%x, 2f);
  negative(%b)
}""", """
def @main(%x: float32) {
  let %b = multiply(%x, 2f);
  negative(%b)
}""")


def test_bindings_that_only_feed_dead_ones_go_in_one_run():
    check("""
def @main(%x: float32) {
  let %a = add(%x, 1f);
  let %b = multiply(%a, %a);
  let %c = (%a, %b);
  %x
}""", "def @main(%x: float32) { %x }")


def test_unused_function_goes_even_if_its_body_has_effects():
    check("""
def @main(%r: Ref[float32], %x: float32) {
  let %f = fn () { ref_write(%r, %x) };
  %x
}""", "def @main(%r: Ref[float32], %x: float32) { %x }")


def test_unused_recursive_function_goes():
    check("""
def @main(%x: int32) {
  let %loop: fn (int32) -> int32 = fn (%i: int32) -> int32 {
    if (less(%i, 10)) { %loop(add(%i, 1)) } else { %i }
  };
  %x
}""", "def @main(%x: int32) { %x }")


def test_dead_bindings_in_branches_closures_and_values_go():
    check("""
def @main(%c: bool, %x: float32) {
  let %f = fn (%y: float32) {
    let %dead = exp(%y);
    negative(%y)
  };
  let %v = (let %dead2 = log(%x); add(%x, 1f));
  if (%c) {
    let %dead3 = sqrt(%x);
    %f(%v)
  } else {
    %v
  }
}""", """
def @main(%c: bool, %x: float32) {
  let %f = fn (%y: float32) { negative(%y) };
  let %v = add(%x, 1f);
  if (%c) { %f(%v) } else { %v }
}""")


def test_every_global_function_is_cleaned():
    check("""
def @f(%x: float32) -> float32 { let %d = exp(%x); %x }
def @main(%x: float32) { let %d = log(%x); @f(%x) }""", """
def @f(%x: float32) -> float32 { %x }
def @main(%x: float32) { @f(%x) }""")


# ---- what stays -----------------------------------------------------------------------------

def test_used_bindings_stay_and_the_module_comes_back_unchanged():
    before = rb.parse(H + """
def @main(%x: float32) {
  let %a = add(%x, 1f);
  let %b = multiply(%a, %a);
  %b
}""")
    assert dce(before) is before


def test_graph_form_comes_back_unchanged():
    before = rb.parse(H + "def @main(%x: float32) { %0 = add(%x, 1f); multiply(%0, %0) }")
    assert dce(before) is before
    assert dce(before, inline_once=True) is before


@pytest.mark.parametrize("value", [
    "ref_write(%r, %x)",            # writes a reference
    "ref(%x)",                      # makes a reference
    "ref_read(%r)",                 # reads one (may differ later)
    "@g(%x)",                       # calls a global function
    "%h(%x)",                       # calls a closure
    "(add(%x, 1f), ref_write(%r, %x))",  # an effect inside a tuple
])
def test_unused_bindings_with_effects_stay(value):
    before = rb.parse(H + f"""
def @g(%x: float32) -> float32 {{ %x }}
def @main(%r: Ref[float32], %h: fn (float32) -> float32, %x: float32) {{
  let %u = {value};
  %x
}}""")
    assert dce(before) is before


def test_uses_by_a_kept_effect_keep_their_bindings():
    before = rb.parse(H + """
def @main(%r: Ref[float32], %x: float32) {
  let %a = add(%x, 1f);
  let %u = ref_write(%r, %a);
  ref_read(%r)
}""")
    assert dce(before) is before


def test_ignore_impurity_drops_unused_effects_too():
    check("""
def @main(%r: Ref[float32], %x: float32) {
  let %a = add(%x, 1f);
  let %u = ref_write(%r, %a);
  %x
}""", "def @main(%r: Ref[float32], %x: float32) { %x }", ignore_impurity=True)


def test_primitive_functions_are_left_alone():
    p = rb.var("p", shape=())
    d = rb.var("d")
    prim = rb.Function([p], rb.Let(d, op.exp(p), op.negative(p))).with_attr("Primitive", 1)
    x = rb.var("x", shape=())
    before = rb.IRModule.from_expr(rb.Function([x], rb.Call(prim, [x])))
    assert dce(before) is before


# ---- inline_once -------------------------------------------------------------------------------

def test_inline_once_moves_single_uses():
    check("""
def @main(%x: float32) {
  let %a = add(%x, 1f);
  let %b = multiply(%a, 2f);
  let %c = negative(%x);
  subtract(%b, %c)
}""", """
def @main(%x: float32) {
  %0 = add(%x, 1f);
  %1 = multiply(%0, 2f);
  %2 = negative(%x);
  subtract(%1, %2)
}""", inline_once=True)


def test_inline_once_keeps_values_used_twice_or_with_effects():
    check("""
def @main(%r: Ref[float32], %x: float32) {
  let %a = add(%x, 1f);
  let %b = multiply(%a, %a);
  let %s = ref(%b);
  let %dead = exp(%x);
  ref_read(%s)
}""", """
def @main(%r: Ref[float32], %x: float32) {
  let %a = add(%x, 1f);
  let %s = ref(multiply(%a, %a));
  ref_read(%s)
}""", inline_once=True)


def test_inline_once_keeps_a_recursive_function():
    before = rb.parse(H + """
def @main(%x: int32) {
  let %loop: fn (int32) -> int32 = fn (%i: int32) -> int32 {
    if (less(%i, 10)) { %loop(add(%i, 1)) } else { %i }
  };
  %loop(%x)
}""")
    after = dce(before, inline_once=True)
    assert after is before
    assert run(after, np.int32(3)) == 10


def test_inline_once_does_not_move_a_value_into_a_closure():
    # Relay counts a use from inside a nested function as two uses: the closure below runs twice,
    # so moving %a into it would compute the exp twice. %b, bound and used in the closure's own
    # body, and %c, used once in a branch of the same function, still move.
    before = rb.parse(H + """
def @main(%x: float32, %p: bool) {
  let %a = exp(%x);
  let %f = fn (%y: float32) -> float32 {
    let %b = multiply(%y, 2f);
    add(%a, %b)
  };
  let %c = negative(%x);
  if (%p) { %f(%f(%c)) } else { %x }
}""")
    expected = rb.parse(H + """
def @main(%x: float32, %p: bool) {
  let %a = exp(%x);
  let %f = fn (%y: float32) -> float32 {
    add(%a, multiply(%y, 2f))
  };
  if (%p) { %f(%f(negative(%x))) } else { %x }
}""")
    after = dce(before, inline_once=True)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    x = np.float32(0.5)
    # exp(0.5) + 2 * (exp(0.5) + 2 * -0.5), by hand
    want = np.exp(x) + 2 * (np.exp(x) + 2 * -x)
    np.testing.assert_allclose(run(after, x, np.bool_(True)), want, rtol=1e-6)
    np.testing.assert_allclose(run(before, x, np.bool_(True)), want, rtol=1e-6)


def test_inline_once_does_not_move_a_value_into_a_closure_used_once():
    # Even a closure called once is not looked into (Relay does not count calls of local
    # functions); the value used in it stays bound outside, and is still not dead.
    check("""
def @main(%x: float32) {
  let %a = exp(%x);
  let %f = fn () -> float32 { %a };
  %f()
}""", """
def @main(%x: float32) {
  let %a = exp(%x);
  %0 = fn () -> float32 { %a };
  %0()
}""", inline_once=True)


# ---- purity --------------------------------------------------------------------------------------

def test_purity_analysis():
    r, x = rb.var("r"), rb.var("x", shape=())
    g = rb.GlobalVar("g")
    assert is_pure(op.add(x, rb.const(1.0)))
    assert is_pure(rb.Function([], rb.RefWrite(r, x)))  # making a function runs nothing
    assert not is_pure(rb.Tuple([x, rb.RefWrite(r, x)]))
    assert not is_pure(rb.Call(g, [x]))
    assert not is_pure(op.add(rb.RefRead(r), x))
    assert not is_pure(rb.If(rb.const(True), x, rb.RefRead(r)))


# ---- meaning kept --------------------------------------------------------------------------------

def test_interpreter_agrees_before_and_after():
    before = rb.parse(H + """
def @main(%r: Ref[float32], %x: Tensor[(3), float32]) {
  let %a = exp(%x);
  let %b = add(%a, 1f);
  let %w = ref_write(%r, sum(%b));
  let %unused = multiply(%b, %b);
  let %f = fn (%y: Tensor[(3), float32]) { let %z = negative(%y); add(%y, %a) };
  (%f(%x), ref_read(%r))
}""")
    rng = np.random.default_rng(0)
    for options in ({}, {"inline_once": True}):
        after = dce(before, **options)
        assert "unused" not in after.astext(show_types=False) and "%z" not in after.astext(show_types=False)
        data = rng.standard_normal(3).astype("float32")
        r1, r2 = RefValue(np.float32(0)), RefValue(np.float32(0))
        want, got = run(before, r1, data), run(after, r2, data)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
        np.testing.assert_allclose(got[1], np.sum(np.exp(data) + 1), rtol=1e-6)
        assert r1.value == r2.value


# ---- scale -----------------------------------------------------------------------------------------

# Deep enough that any recursion on program depth fails (Python stops at 1,000 frames);
# tests/test_scale.py takes 100,000 operators through the whole pipeline.
N = 20_000


def test_deep_binding_chain_half_dead():
    x = rb.var("x", shape=(2,))
    one, two = rb.const(1.0), rb.const(2.0)
    add, mul = rb.Op.get("add"), rb.Op.get("multiply")
    sb, expected_sb = rb.ScopeBuilder(), rb.ScopeBuilder()
    y = ey = x
    for i in range(N // 2):
        sb.let(f"d{i}", rb.Call(mul, (y, two)))  # dead
        y = sb.let(f"a{i}", rb.Call(add, (y, one)))
        ey = expected_sb.let(f"a{i}", rb.Call(add, (ey, one)))
    sb.ret(y)
    expected_sb.ret(ey)
    before = rb.IRModule.from_expr(rb.Function([x], sb.get()))
    after = dce(before)
    assert count_ops(after) == N // 2
    expected = rb.IRModule.from_expr(rb.Function([x], expected_sb.get()))
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)


def test_deep_binding_chain_inlined_once_becomes_a_graph():
    x = rb.var("x", shape=(2,))
    one, add = rb.const(1.0), rb.Op.get("add")
    sb = rb.ScopeBuilder()
    y = g = x
    for i in range(N):
        y = sb.let(f"a{i}", rb.Call(add, (y, one)))
        g = rb.Call(add, (g, one))
    sb.ret(y)
    after = dce(rb.IRModule.from_expr(rb.Function([x], sb.get())), inline_once=True)
    assert_structural_equal(run_infer_type(after), run_infer_type(rb.IRModule.from_expr(rb.Function([x], g))), map_free_vars=True)
