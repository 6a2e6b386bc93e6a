"""PartialEvaluate: before/expected programs written by hand, the reference interpreter before and
after on random inputs, the zoo's recurrent models over static structures, and a 20,000-op chain."""

import doctest

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.backends.interpreter import Interpreter, RefValue
from relaybench.ir import (Call, Function, If, Let, Match, Tuple, assert_structural_equal, count_ops, post_order,
                           var)
from relaybench.ir.functor import ExprMutator
from relaybench.models.nlp import from_list, make_list
from relaybench.passes import partial_evaluate as pe_module
from relaybench.passes.well_formed import check_well_formed
from relaybench.testing import run_infer_type

H = '#[version = "0.0.5"]\n'

LIST = """
type List[A] {
  Cons(A, List[A]),
  Nil,
}

def @map[A, B](%f: fn (A) -> B, %xs: List[A]) -> List[B] {
  match (%xs) {
    Cons(%y, %rest) => Cons(%f(%y), @map(%f, %rest)),
    Nil => Nil,
  }
}
"""

LOOP = """
def @loop(%n: int32, %acc: float32) -> float32 {
  if (equal(%n, 0)) { %acc } else { @loop(subtract(%n, 1), multiply(%acc, 2f)) }
}
"""


def pe(mod, **options):
    out = rb.passes.PartialEvaluate(**options)(mod)
    check_well_formed(out)
    return out


def run(mod, *args, entry="main"):
    return Interpreter(mod).evaluate(mod.get_global_var(entry))(*args)


def check_same_outputs(before, after, *args):
    want, got = run(before, *args), run(after, *args)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


def main_equal(after, expected_text):
    assert_structural_equal(run_infer_type(after)["main"], run_infer_type(rb.parse(H + expected_text))["main"], map_free_vars=True)


def let_free(fn: Function) -> Function:
    """A straight-line function (a chain of lets) in graph form: each let's value put in place of
    its variable, shared where the variable was used twice."""
    m = ExprMutator()
    body = fn.body
    while isinstance(body, Let):
        m.memo[body.var] = m.visit(body.value)
        body = body.body
    return Function(fn.params, m.visit(body), fn.ret_type)


def control_flow(expr) -> list:
    return [n for n in post_order(expr) if isinstance(n, (If, Match))]


def test_docstring_examples():
    assert doctest.testmod(pe_module).failed == 0


def test_pass_info():
    p = rb.passes.PartialEvaluate()
    assert p.info.name == "PartialEvaluate" and p.info.opt_level == 1 and p.info.kebab == "partial-evaluate"
    assert rb.passes.infra.pass_options("partial-evaluate") == {"max_unroll": 1000}
    with pytest.raises(ValueError, match="max_unroll"):
        rb.passes.PartialEvaluate(max_unroll=0)(rb.parse(H + "def @main(%x: float32) { %x }"))


# ---- static values ------------------------------------------------------------------------------

def test_static_arithmetic_folds():
    before = rb.parse(H + """
def @main(%x: float32) {
  %0 = add(1f, 2f);
  %1 = multiply(%0, 4f);
  subtract(%x, %1)
}""")
    after = pe(before)
    main_equal(after, "def @main(%x: float32) { subtract(%x, 12f) }")
    check_same_outputs(before, after, np.float32(5))


def test_static_tensors_fold_to_the_numpy_value():
    a = np.arange(6, dtype="float32").reshape(2, 3)
    b = np.array([1.0, -2.0, 0.5], dtype="float32")
    x = var("x", shape=(3, 2))
    before = rb.IRModule.from_expr(Function([x], op.multiply(x, op.transpose(op.nn.relu(op.add(rb.const(a), rb.const(b)))))))
    after = pe(before)
    x2 = var("x", shape=(3, 2))
    expected = Function([x2], op.multiply(x2, rb.const(np.maximum(a + b, 0).T)))
    assert_structural_equal(run_infer_type(after)["main"], run_infer_type(expected), map_free_vars=True)
    check_same_outputs(before, after, np.ones((3, 2), "float32"))


def test_graph_sharing_stays_shared_and_dynamic_code_becomes_lets():
    before = rb.parse(H + """
def @main(%x: float32) {
  %0 = add(%x, %x);
  %1 = multiply(%0, %0);
  (%1, %0)
}""")
    after = pe(before)
    main_equal(after, """
def @main(%x: float32) {
  let %a = add(%x, %x);
  let %b = multiply(%a, %a);
  (%b, %a)
}""")


def test_if_with_a_static_condition_takes_its_branch():
    before = rb.parse(H + """
def @main(%x: float32) {
  if (greater(2f, 1f)) { add(%x, 1f) } else { subtract(%x, 1f) }
}""")
    after = pe(before)
    main_equal(after, "def @main(%x: float32) { add(%x, 1f) }")
    check_same_outputs(before, after, np.float32(3))


def test_if_with_a_dynamic_condition_keeps_both_branches_evaluated():
    before = rb.parse(H + """
def @main(%c: bool, %x: float32) {
  if (%c) { add(%x, add(1f, 1f)) } else { %x }
}""")
    after = pe(before)
    main_equal(after, "def @main(%c: bool, %x: float32) { if (%c) { add(%x, 2f) } else { %x } }")
    for c in (True, False):
        check_same_outputs(before, after, np.bool_(c), np.float32(3))


def test_closure_applied_to_a_static_value_is_inlined():
    before = rb.parse(H + """
def @main(%x: float32) {
  let %scale = fn (%y: float32) { multiply(%y, %x) };
  let %inc = fn (%y: float32) { add(%y, 1f) };
  add(%scale(2f), %inc(2f))
}""")
    after = pe(before)
    main_equal(after, """
def @main(%x: float32) {
  let %s = multiply(2f, %x);
  add(%s, 3f)
}""")
    check_same_outputs(before, after, np.float32(1.5))


def test_match_on_a_static_constructor_takes_its_clause():
    before = rb.parse(H + """
type Option[A] {
  Some(A),
  None,
}

def @main(%x: float32) -> float32 {
  match (Some(%x)) {
    None => 0f,
    Some(%y) => add(%y, 1f),
  }
}""")
    after = pe(before)
    main_equal(after, """
type Option[A] {
  Some(A),
  None,
}

def @main(%x: float32) -> float32 { add(%x, 1f) }""")
    check_same_outputs(before, after, np.float32(2))


def test_match_on_a_dynamic_value_keeps_every_clause():
    text = """
type Option[A] {
  Some(A),
  None,
}
"""
    before = rb.parse(H + text + """
def @main(%o: Option[float32]) -> float32 {
  match (%o) {
    Some(%y) => add(%y, add(1f, 1f)),
    None => 0f,
  }
}""")
    after = pe(before)
    main_equal(after, text + """
def @main(%o: Option[float32]) -> float32 {
  match (%o) {
    Some(%z) => add(%z, 2f),
    None => 0f,
  }
}""")
    some, none = before.get_constructor("Some"), before.get_constructor("None")
    from relaybench.backends.interpreter import ConstructorValue
    for v in (ConstructorValue(some, (np.float32(4),)), ConstructorValue(none, ())):
        assert run(after, v) == run(before, v)


def test_match_on_a_partially_static_tuple():
    """A clause whose static part cannot match is dropped; when a clause's fate depends on a
    dynamic part, the scrutinee is built and the match emitted."""
    lists = """
type List[A] {
  Cons(A, List[A]),
  Nil,
}
"""
    before = rb.parse(H + lists + """
def @main(%xs: List[float32]) -> float32 {
  %0 = match ((%xs, Nil)) {
    (Cons(%a, _), Cons(_, _)) => %a,
    _ => 0f,
  };
  %1 = match ((%xs, Cons(1f, Nil))) {
    (Cons(%c, _), Cons(%d, _)) => add(%c, %d),
    _ => 0f,
  };
  add(%0, %1)
}""")
    after = pe(before)
    main_equal(after, lists + """
def @main(%xs: List[float32]) -> float32 {
  let %l = Cons(1f, Nil);
  let %t = (%xs, %l);
  let %m = match (%t) {
    (Cons(%c, _), Cons(%d, _)) => add(%c, %d),
    _ => 0f,
  };
  add(0f, %m)
}""")
    for n in (0, 2):
        xs = make_list([np.float32(5)] * n, before)
        assert run(after, xs) == run(before, xs) == (6.0 if n else 0.0)


# ---- unfolding ----------------------------------------------------------------------------------

def test_map_over_a_static_list_of_three_unrolls():
    before = rb.parse(H + LIST + """
def @main(%a: float32, %b: float32, %c: float32, %w: float32) -> List[float32] {
  @map(fn (%v: float32) -> float32 { multiply(%v, %w) }, Cons(%a, Cons(%b, Cons(%c, Nil))))
}""")
    after = pe(before)
    main_equal(after, LIST + """
def @main(%a: float32, %b: float32, %c: float32, %w: float32) -> List[float32] {
  let %ma = multiply(%a, %w);
  let %mb = multiply(%b, %w);
  let %mc = multiply(%c, %w);
  let %l3 = Cons(%mc, Nil);
  let %l2 = Cons(%mb, %l3);
  Cons(%ma, %l2)
}""")
    args = [np.float32(v) for v in (1, 2, 3, 0.5)]
    assert [float(v) for v in from_list(run(after, *args))] == [0.5, 1.0, 1.5]
    assert [float(v) for v in from_list(run(before, *args))] == [0.5, 1.0, 1.5]


def test_counting_loop_unrolls_fully():
    before = rb.parse(H + LOOP + "def @main(%x: float32) -> float32 { @loop(3, %x) }")
    after = pe(before)
    main_equal(after, LOOP + """
def @main(%x: float32) -> float32 {
  let %a = multiply(%x, 2f);
  let %b = multiply(%a, 2f);
  multiply(%b, 2f)
}""")
    check_same_outputs(before, after, np.float32(1.25))


def test_loop_on_a_dynamic_bound_is_residualized():
    before = rb.parse(H + LOOP + "def @main(%n: int32, %x: float32) -> float32 { @loop(%n, %x) }")
    after = pe(before)
    expected = rb.parse(H + """
def @loop(%n: int32, %acc: float32) -> float32 {
  let %c = equal(%n, 0);
  if (%c) {
    %acc
  } else {
    let %m = subtract(%n, 1);
    let %a = multiply(%acc, 2f);
    @loop(%m, %a)
  }
}
def @main(%n: int32, %x: float32) -> float32 { @loop(%n, %x) }""")
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    for n in range(4):
        check_same_outputs(before, after, np.int32(n), np.float32(1.5))


def test_static_counter_with_a_dynamic_bound_stops_after_one_step():
    """The counter goes up but the bound is dynamic: the recursive call is under dynamic control
    and makes no progress, so it calls the global (with the counter's value) instead of unrolling."""
    text = """
def @count(%i: int32, %n: int32, %acc: float32) -> float32 {
  if (less(%i, %n)) { @count(add(%i, 1), %n, multiply(%acc, 2f)) } else { %acc }
}
"""
    before = rb.parse(H + text + "def @main(%n: int32, %x: float32) -> float32 { @count(0, %n, %x) }")
    after = pe(before)
    assert_structural_equal(run_infer_type(after)["main"], run_infer_type(rb.parse(H + text + """
def @main(%n: int32, %x: float32) -> float32 {
  let %c = less(0, %n);
  if (%c) {
    let %a = multiply(%x, 2f);
    @count(1, %n, %a)
  } else {
    %x
  }
}"""))["main"], map_free_vars=True)
    for n in range(4):
        check_same_outputs(before, after, np.int32(n), np.float32(1.0))


def test_local_recursive_closure_on_a_dynamic_bound_becomes_one_residual_function():
    before = rb.parse(H + """
def @main(%n: int32, %x: float32, %w: float32) -> float32 {
  let %loop = fn (%i: int32, %acc: float32) -> float32 {
    if (equal(%i, 0)) { %acc } else { %loop(subtract(%i, 1), multiply(%acc, %w)) }
  };
  %loop(%n, %x)
}""")
    after = pe(before)
    main_equal(after, """
def @main(%n: int32, %x: float32, %w: float32) -> float32 {
  let %loop = fn (%i: int32, %acc: float32) -> float32 {
    let %c = equal(%i, 0);
    if (%c) {
      %acc
    } else {
      let %j = subtract(%i, 1);
      let %a = multiply(%acc, %w);
      %loop(%j, %a)
    }
  };
  %loop(%n, %x)
}""")
    for n in range(4):
        check_same_outputs(before, after, np.int32(n), np.float32(1.0), np.float32(3.0))


def test_map_over_a_dynamic_list_calls_the_global_map_with_the_closure():
    """The recursion is dynamic and the function argument is the same static closure each time:
    as in Relay, the global @map is not copied into a local recursive let specialized to the
    closure; one step is unfolded and the recursive call goes to @map itself, the closure made
    residual (let-bound) and passed."""
    before = rb.parse(H + LIST + """
def @main(%xs: List[float32], %w: float32) -> List[float32] {
  @map(fn (%v: float32) -> float32 { multiply(%v, %w) }, %xs)
}""")
    after = pe(before)
    main_equal(after, LIST + """
def @main(%xs: List[float32], %w: float32) -> List[float32] {
  let %f = fn (%v: float32) -> float32 {
    multiply(%v, %w)
  };
  match (%xs) {
    Cons(%y, %rest) => {
      let %m = multiply(%y, %w);
      let %r = @map(%f, %rest);
      Cons(%m, %r)
    },
    Nil => Nil,
  }
}""")
    cons, nil = before.get_constructor("Cons"), before.get_constructor("Nil")
    for n in (0, 1, 4):
        xs = make_list([np.float32(i) for i in range(n)], before)
        want = [float(v) for v in from_list(run(before, xs, np.float32(3)))]
        assert [float(v) for v in from_list(run(after, xs, np.float32(3)))] == want == [3.0 * i for i in range(n)]
    assert cons and nil


def test_global_recursive_function_stays_global():
    """@f is called with a dynamic %x and a static step 2: one step is unfolded, and the recursive
    call that is not unfolded calls the global @f with the static step as a constant (as Relay's
    partial evaluator does), rather than a local recursive let specialized to step 2."""
    funcs = """
def @f(%x: int32, %k: int32) -> int32 {
  if (less(%x, 0)) { %x } else { @f(subtract(%x, %k), %k) }
}
"""
    before = rb.parse(H + funcs + "def @main(%x: int32) -> int32 { @f(%x, 2) }")
    after = pe(before)
    main_equal(after, funcs + """
def @main(%x: int32) -> int32 {
  let %c = less(%x, 0);
  if (%c) {
    %x
  } else {
    let %y = subtract(%x, 2);
    @f(%y, 2)
  }
}""")
    assert sorted(gv.name_hint for gv in after.functions) == ["f", "main"]
    # the first negative value reached from x in steps of 2, by hand
    for x, want in ((-3, -3), (0, -2), (5, -1), (6, -2)):
        assert int(run(after, np.int32(x))) == want == int(run(before, np.int32(x)))


def test_closure_built_by_polymorphic_functions_escapes_with_concrete_types():
    """@iterate and @compose are polymorphic; unfolded at int32, the closure they build and @main
    returns gets int32 annotations (the type arguments of the calls are substituted)."""
    funcs = """
def @compose[A, B, C](%f: fn (B) -> C, %g: fn (A) -> B) -> fn (A) -> C {
  fn (%x: A) -> C { %f(%g(%x)) }
}

def @iterate[A](%f: fn (A) -> A, %n: int32) -> fn (A) -> A {
  if (equal(%n, 0)) { fn (%x: A) -> A { %x } } else { @compose(%f, @iterate(%f, subtract(%n, 1))) }
}
"""
    before = rb.parse(H + funcs + """
def @main(%k: int32) -> fn (int32) -> int32 {
  @iterate(fn (%y: int32) -> int32 { add(%y, %k) }, 3)
}""")
    after = pe(before)
    main_equal(after, funcs + """
def @main(%k: int32) -> fn (int32) -> int32 {
  let %f = fn (%x: int32) -> int32 {
    let %a = add(%x, %k);
    let %b = add(%a, %k);
    add(%b, %k)
  };
  %f
}""")
    results = [Interpreter(m).apply(run(m, np.int32(2)), [np.int32(1)]) for m in (before, after)]
    assert results == [7, 7]


def test_max_unroll_bounds_a_static_loop():
    before = rb.parse(H + LOOP + "def @main(%x: float32) -> float32 { @loop(10, %x) }")
    after = pe(before, max_unroll=4)
    main_equal(after, LOOP + """
def @main(%x: float32) -> float32 {
  let %a = multiply(%x, 2f);
  let %b = multiply(%a, 2f);
  let %c = multiply(%b, 2f);
  let %d = multiply(%c, 2f);
  @loop(6, %d)
}""")
    check_same_outputs(before, after, np.float32(1.0))
    assert count_ops(pe(before)["main"]) == 10


def test_fused_functions_are_not_looked_into():
    before = rb.parse(H + """
def @main(%x: float32) {
  %0 = fn (%p: float32, Primitive=1) { add(%p, add(1f, 1f)) };
  %0(%x)
}""")
    assert pe(before) is before


def test_global_marked_skip_optimization_is_called_not_unfolded():
    before = rb.parse(H + """
def @helper(%x: float32) -> float32 { add(%x, add(1f, 1f)) }
def @main(%x: float32) -> float32 { @helper(multiply(2f, 3f)) }""")
    before["helper"] = before["helper"].with_attr("SkipOptimization", 1)
    after = pe(before)
    assert after["helper"] is before["helper"]
    assert_structural_equal(run_infer_type(after)["main"], run_infer_type(rb.parse(H + """
def @helper(%x: float32) -> float32 { add(%x, add(1f, 1f)) }
def @main(%x: float32) -> float32 { @helper(6f) }"""))["main"], map_free_vars=True)
    check_same_outputs(before, after, np.float32(1))


def test_unchanged_module_comes_back_as_is():
    before = rb.passes.InferType()(rb.parse(H + "def @main(%x: float32, %y: float32) { add(%x, %y) }"))
    assert pe(before) is before


# ---- references ---------------------------------------------------------------------------------

def test_reference_created_written_and_read_statically_folds():
    before = rb.parse(H + """
def @main(%x: float32) -> float32 {
  let %r = ref(1f);
  let %u = ref_write(%r, add(ref_read(%r), 2f));
  let %v = ref_write(%r, multiply(ref_read(%r), %x));
  ref_read(%r)
}""")
    after = pe(before)
    main_equal(after, "def @main(%x: float32) -> float32 { multiply(3f, %x) }")
    check_same_outputs(before, after, np.float32(2))


def test_reference_written_under_a_dynamic_if_is_read_at_run_time():
    before = rb.parse(H + """
def @main(%c: bool, %x: float32) -> float32 {
  let %r = ref(1f);
  let %u = if (%c) { ref_write(%r, %x) } else { () };
  add(ref_read(%r), 2f)
}""")
    after = pe(before)
    main_equal(after, """
def @main(%c: bool, %x: float32) -> float32 {
  let %r = ref(1f);
  let %u = if (%c) {
    let %w = ref_write(%r, %x);
    ()
  } else {
    ()
  };
  let %v = ref_read(%r);
  add(%v, 2f)
}""")
    for c in (True, False):
        check_same_outputs(before, after, np.bool_(c), np.float32(7))


def test_reference_passed_to_unknown_code_is_read_at_run_time():
    before = rb.parse(H + """
def @main(%f: fn (Ref[float32]) -> (), %x: float32) -> float32 {
  let %r = ref(%x);
  let %u = %f(%r);
  ref_read(%r)
}""")
    after = pe(before)
    main_equal(after, """
def @main(%f: fn (Ref[float32]) -> (), %x: float32) -> float32 {
  let %r = ref(%x);
  let %u = %f(%r);
  ref_read(%r)
}""")
    interp = Interpreter(before)
    setter = interp.run(rb.ir.parse_expr("fn (%r: Ref[float32]) { ref_write(%r, 5f) }"), interp.globals)
    assert run(before, setter, np.float32(1)) == run(after, setter, np.float32(1)) == 5.0


def test_residual_closure_reads_a_reference_at_run_time_with_its_latest_value():
    before = rb.parse(H + """
def @main(%apply: fn (fn () -> float32) -> float32, %x: float32) -> float32 {
  let %r = ref(%x);
  let %get = fn () -> float32 { ref_read(%r) };
  let %u = ref_write(%r, 2f);
  %apply(%get)
}""")
    after = pe(before)
    main_equal(after, """
def @main(%apply: fn (fn () -> float32) -> float32, %x: float32) -> float32 {
  let %r = ref(2f);
  let %get = fn () -> float32 { ref_read(%r) };
  %apply(%get)
}""")
    interp = Interpreter(before)
    twice = interp.run(rb.ir.parse_expr("fn (%g: fn () -> float32) -> float32 { multiply(%g(), 2f) }"),
                       interp.globals)
    assert run(before, twice, np.float32(9)) == run(after, twice, np.float32(9)) == 4.0
    assert isinstance(RefValue(0), RefValue)


# ---- the zoo's recurrences over static structures -------------------------------------------------

def _lstm_expected(xs, w, hidden):
    """PyTorch's LSTM over ``xs`` from zero state, as a dataflow graph (written independently of
    the model's code)."""
    w_ih, w_hh, b_ih, b_hh = w
    h = op.zeros(shape=(1, hidden), dtype="float32")
    c = op.zeros(shape=(1, hidden), dtype="float32")
    for x in xs:
        gates = op.split(op.add(op.add(op.nn.dense(x, w_ih), b_ih), op.add(op.nn.dense(h, w_hh), b_hh)),
                         indices_or_sections=4, axis=1)
        i, f, g, o = op.sigmoid(gates[0]), op.sigmoid(gates[1]), op.tanh(gates[2]), op.sigmoid(gates[3])
        c = op.add(op.multiply(f, c), op.multiply(i, g))
        h = op.multiply(o, op.tanh(c))
    return Tuple([h, c])


def test_lstm_loop_over_a_static_list_becomes_straight_line_code():
    mod, params = rb.models.get("lstm", seq_len=3, input_size=4, hidden_size=5, form="loop")
    cons, nil = mod.get_constructor("Cons"), mod.get_constructor("Nil")
    names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    xs = [var(f"x{i}", shape=(1, 4)) for i in range(3)]
    w = [var(n, shape=params[n].shape) for n in names]
    items = Call(nil, [])
    for x in reversed(xs):
        items = Call(cons, [x, items])
    state = Tuple([op.zeros(shape=(1, 5), dtype="float32"), op.zeros(shape=(1, 5), dtype="float32")])
    before = mod.copy()
    before["main"] = Function(xs + w, Call(mod.get_global_var("lstm_loop"), [items, state] + w))
    after = pe(before)

    main = after["main"]
    assert not control_flow(main) and not any(isinstance(n, rb.GlobalVar) for n in post_order(main))
    xs2 = [var(f"x{i}", shape=(1, 4)) for i in range(3)]
    w2 = [var(n, shape=params[n].shape) for n in names]
    assert_structural_equal(run_infer_type(let_free(main)), run_infer_type(Function(xs2 + w2, _lstm_expected(xs2, w2, 5))), map_free_vars=True)

    rng = np.random.default_rng(0)
    args = [rng.standard_normal((1, 4)).astype("float32") for _ in range(3)] + [params[n] for n in names]
    for got, want in zip(run(after, *args), run(before, *args)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _tree_lstm_expected(x, w, hidden):
    """Child-Sum TreeLSTM of a root ``x[0]`` with two leaves ``x[1]``, ``x[2]``, as a dataflow
    graph: the sums over children start from zero and run left to right (a foldl)."""
    ioux_w, ioux_b, iouh_w, iouh_b, fx_w, fx_b, fh_w, fh_b = w

    def linear(v, weight, bias):
        return op.add(op.nn.dense(v, weight), bias)

    def node(xv, children):
        h_sum = op.zeros(shape=(1, hidden), dtype="float32")
        for h, _c in children:
            h_sum = op.add(h_sum, h)
        fx = linear(xv, fx_w, fx_b)
        c_sum = op.zeros(shape=(1, hidden), dtype="float32")
        for h, c in children:
            c_sum = op.add(c_sum, op.multiply(op.sigmoid(op.add(fx, linear(h, fh_w, fh_b))), c))
        gates = op.split(op.add(linear(xv, ioux_w, ioux_b), linear(h_sum, iouh_w, iouh_b)),
                         indices_or_sections=3, axis=1)
        i, o, u = op.sigmoid(gates[0]), op.sigmoid(gates[1]), op.tanh(gates[2])
        c = op.add(op.multiply(i, u), c_sum)
        return op.multiply(o, op.tanh(c)), c

    h, c = node(x[0], [node(x[1], []), node(x[2], [])])
    return Tuple([h, c])


def test_tree_lstm_over_a_static_tree_shape_becomes_straight_line_code():
    mod, params = rb.models.get("tree_lstm", input_size=3, hidden_size=2)
    rose, cons, nil = (mod.get_constructor(n) for n in ("Rose", "Cons", "Nil"))
    names = ("ioux_weight", "ioux_bias", "iouh_weight", "iouh_bias", "fx_weight", "fx_bias", "fh_weight", "fh_bias")

    def items(values):
        out = Call(nil, [])
        for v in reversed(values):
            out = Call(cons, [v, out])
        return out

    x = [var(f"x{i}", shape=(1, 3)) for i in range(3)]
    w = [var(n, shape=params[n].shape) for n in names]
    tree = Call(rose, [x[0], items([Call(rose, [x[1], items([])]), Call(rose, [x[2], items([])])])])
    before = mod.copy()
    before["main"] = Function(x + w, Call(mod.get_global_var("tree_lstm"), [tree] + w))
    after = pe(before)

    main = after["main"]
    assert not control_flow(main) and not any(isinstance(n, rb.GlobalVar) for n in post_order(main))
    x2 = [var(f"x{i}", shape=(1, 3)) for i in range(3)]
    w2 = [var(n, shape=params[n].shape) for n in names]
    assert_structural_equal(run_infer_type(let_free(main)), run_infer_type(Function(x2 + w2, _tree_lstm_expected(x2, w2, 2))), map_free_vars=True)

    rng = np.random.default_rng(1)
    args = [rng.standard_normal((1, 3)).astype("float32") for _ in range(3)] + [params[n] for n in names]
    for got, want in zip(run(after, *args), run(before, *args)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_char_rnn_sampling_loop_with_a_static_length_unrolls_around_its_dynamic_exit():
    mod, params = rb.models.get("char_rnn", hidden_size=8, max_length=3)
    after = pe(mod)
    main = after["main"]
    assert not any(isinstance(n, rb.GlobalVar) for n in post_order(main))
    # one dynamic "end of name?" test per step
    assert len(control_flow(main)) == 3
    category = np.eye(18, dtype="float32")[[4]]
    for start in (0, 7, 30):
        got = run(after, category, np.int32(start), *params.values())
        want = run(mod, category, np.int32(start), *params.values())
        assert [int(v) for v in from_list(got)] == [int(v) for v in from_list(want)]


def test_lstm_loop_over_a_dynamic_list_terminates_and_calls_the_loop():
    mod, params = rb.models.get("lstm", seq_len=2, input_size=3, hidden_size=4, form="loop")
    after = pe(mod)
    main = after["main"]
    assert len(control_flow(main)) == 1
    assert any(isinstance(n, rb.GlobalVar) and n.name_hint == "lstm_loop" for n in post_order(main))
    rng = np.random.default_rng(2)
    for n in (0, 1, 3):
        xs = make_list([rng.standard_normal((1, 3)).astype("float32") for _ in range(n)])
        for got, want in zip(run(after, xs, *params.values()), run(mod, xs, *params.values())):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# ---- depth --------------------------------------------------------------------------------------

# Deep enough that any recursion on program depth fails (Python stops at 1,000 frames);
# tests/test_scale.py takes 100,000 operators through the whole pipeline.
DEEP = 20_000


def test_deep_op_chain():
    x = var("x", shape=(2,))
    y, one = x, rb.const(1.0)
    for _ in range(DEEP):
        y = op.add(y, one)
    after = rb.passes.PartialEvaluate()(rb.IRModule.from_expr(Function([x], y)))
    # a let per add, each adding one to the previous one
    body, prev, lets = after["main"].body, after["main"].params[0], 0
    while isinstance(body, Let):
        value = body.value
        assert value.op.name == "add" and value.args[0] is prev and float(value.args[1].data) == 1.0
        prev, body, lets = body.var, body.body, lets + 1
    assert lets == DEEP - 1 and body.op.name == "add" and body.args[0] is prev


def test_deep_op_static_chain_folds():
    y, one = rb.const(np.float32(0)), rb.const(np.float32(1))
    for _ in range(DEEP):
        y = op.add(y, one)
    x = var("x", shape=())
    after = pe(rb.IRModule.from_expr(Function([x], op.multiply(x, y))))
    x2 = var("x", shape=())
    assert_structural_equal(run_infer_type(after)["main"], run_infer_type(Function([x2], op.multiply(x2, rb.const(np.float32(DEEP))))),
                            map_free_vars=True)
