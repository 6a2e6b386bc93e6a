"""ToANormalForm, ToGraphNormalForm and ToBasicBlockNormalForm: before/expected programs per rule,
the scope rules, round trips, effects, the interpreter before and after on the NLP models, and
20,000-node programs."""

import doctest

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.ir import Function, If, Let, Match, assert_structural_equal, post_order, structural_equal
from relaybench.ir.expr import Call, Tuple, TupleGetItem, expr_children
from relaybench.models.nlp import from_list, make_list, make_tree
from relaybench.passes import to_a_normal_form as anf_module
from relaybench.passes import to_basic_block_normal_form as bbnf_module
from relaybench.passes import to_graph_normal_form as gnf_module
from relaybench.testing import run_infer_type

H = '#[version = "0.0.5"]\n'
LIST = "type List[A] { Cons(A, List[A]), Nil, }\n"


def anf(mod):
    return rb.passes.ToANormalForm()(mod)


def gnf(mod):
    return rb.passes.ToGraphNormalForm()(mod)


def bbnf(mod):
    return rb.passes.ToBasicBlockNormalForm()(mod)


def run(mod, *args, **kwargs):
    return rb.create_executor("interpreter", mod=mod).evaluate()(*args, **kwargs)


def same_values(a, b):
    """Interpreter values compared leaf by leaf (tensors, tuples, ADT values)."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
        elif isinstance(x, tuple):
            assert isinstance(y, tuple) and len(x) == len(y)
            stack.extend(zip(x, y))
        else:
            assert type(x) is type(y) and x.constructor.name_hint == y.constructor.name_hint
            stack.extend(zip(x.fields, y.fields))


def in_anf(expr) -> bool:
    """Every call argument, tuple field, projection, condition and match subject is an atom,
    and no compound node has two users (outside Primitive functions)."""
    users = {}
    for node in post_order(expr):
        if isinstance(node, Function) and node.is_primitive:
            continue
        operands = ()
        if isinstance(node, Call):
            operands = (node.op,) + node.args
        elif isinstance(node, Tuple):
            operands = node.fields
        elif isinstance(node, TupleGetItem):
            operands = (node.tuple_value,)
        elif isinstance(node, If):
            operands = (node.cond,)
        elif isinstance(node, Match):
            operands = (node.data,)
        for o in operands:
            if not anf_module.is_atomic(o):
                return False
        for child in expr_children(node):
            if not anf_module.is_atomic(child):
                users[child] = users.get(child, 0) + 1
    return all(n == 1 for n in users.values())


def test_docstring_examples():
    for module in (anf_module, gnf_module, bbnf_module):
        assert doctest.testmod(module).failed == 0, module.__name__


@pytest.mark.parametrize("name, kebab", [
    ("ToANormalForm", "to-a-normal-form"), ("ToGraphNormalForm", "to-graph-normal-form"),
    ("ToBasicBlockNormalForm", "to-basic-block-normal-form")])
def test_pass_info(name, kebab):
    p = getattr(rb.passes, name)()
    assert p.info.name == name and p.info.opt_level == 1 and p.info.kebab == kebab


# ---- ToANormalForm ----------------------------------------------------------------------------

def test_anf_binds_each_node_once_in_evaluation_order():
    before = rb.parse(H + """
def @main(%x: Tensor[(2), float32]) {
  %0 = add(%x, %x);
  %1 = multiply(%0, 2f);
  subtract(%1, %0)
}""")
    expected = rb.parse(H + """
def @main(%x: Tensor[(2), float32]) {
  let %a = add(%x, %x);
  let %b = multiply(%a, 2f);
  let %c = subtract(%b, %a);
  %c
}""")
    after = anf(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    assert in_anf(after["main"])


def test_anf_names_tuples_and_projections():
    before = rb.parse(H + """
def @main(%x: Tensor[(2), float32]) {
  %0 = (%x, add(%x, %x));
  %0.1
}""")
    expected = rb.parse(H + """
def @main(%x: Tensor[(2), float32]) {
  let %a = add(%x, %x);
  let %t = (%x, %a);
  let %p = %t.1;
  %p
}""")
    assert_structural_equal(run_infer_type(anf(before)), run_infer_type(expected), map_free_vars=True)


def test_anf_node_used_in_one_branch_is_bound_inside_it():
    before = rb.parse(H + """
def @main(%x: Tensor[(2), float32], %c: bool) {
  if (%c) { %0 = add(%x, %x); multiply(%0, %0) } else { %x }
}""")
    expected = rb.parse(H + """
def @main(%x: Tensor[(2), float32], %c: bool) {
  let %r = if (%c) {
    let %a = add(%x, %x);
    let %b = multiply(%a, %a);
    %b
  } else {
    %x
  };
  %r
}""")
    assert_structural_equal(run_infer_type(anf(before)), run_infer_type(expected), map_free_vars=True)


def test_anf_node_used_by_both_branches_is_bound_before_the_if():
    before = rb.parse(H + """
def @main(%x: Tensor[(2), float32], %c: bool) {
  %0 = add(%x, %x);
  if (%c) { multiply(%0, %0) } else { negative(%0) }
}""")
    expected = rb.parse(H + """
def @main(%x: Tensor[(2), float32], %c: bool) {
  let %a = add(%x, %x);
  let %r = if (%c) {
    let %b = multiply(%a, %a);
    %b
  } else {
    let %n = negative(%a);
    %n
  };
  %r
}""")
    assert_structural_equal(run_infer_type(anf(before)), run_infer_type(expected), map_free_vars=True)


def test_anf_condition_is_bound_in_the_enclosing_scope():
    before = rb.parse(H + """
def @main(%x: float32) {
  if (less(%x, 0f)) { negative(%x) } else { %x }
}""")
    expected = rb.parse(H + """
def @main(%x: float32) {
  let %c = less(%x, 0f);
  let %r = if (%c) { let %n = negative(%x); %n } else { %x };
  %r
}""")
    assert_structural_equal(run_infer_type(anf(before)), run_infer_type(expected), map_free_vars=True)


def test_anf_closure_body_is_a_scope_and_captured_nodes_stay_outside():
    before = rb.parse(H + """
def @main(%x: Tensor[(2), float32]) {
  %0 = add(%x, %x);
  %1 = fn (%y: Tensor[(2), float32]) { multiply(%y, %0) };
  %1(%0)
}""")
    expected = rb.parse(H + """
def @main(%x: Tensor[(2), float32]) {
  let %a = add(%x, %x);
  let %f = fn (%y: Tensor[(2), float32]) { let %b = multiply(%y, %a); %b };
  let %r = %f(%a);
  %r
}""")
    assert_structural_equal(run_infer_type(anf(before)), run_infer_type(expected), map_free_vars=True)


def test_anf_match_clauses_are_scopes():
    before = rb.parse(H + LIST + """
def @main(%l: List[Tensor[(2), float32]], %x: Tensor[(2), float32]) {
  %0 = add(%x, %x);
  match (%l) {
    Cons(%h, _) => multiply(%h, %0),
    Nil => %0,
  }
}""")
    expected = rb.parse(H + LIST + """
def @main(%l: List[Tensor[(2), float32]], %x: Tensor[(2), float32]) {
  let %a = add(%x, %x);
  let %m = match (%l) {
    Cons(%h, _) => { let %b = multiply(%h, %a); %b },
    Nil => %a,
  };
  %m
}""")
    assert_structural_equal(run_infer_type(anf(before)), run_infer_type(expected), map_free_vars=True)


def test_anf_keeps_existing_let_variables():
    before = rb.parse(H + """
def @main(%x: Tensor[(2), float32]) {
  let %a: Tensor[(2), float32] = add(%x, %x);
  let %b = %a;
  let %c = (let %t = negative(%b); multiply(%t, %t));
  subtract(%c, 1f)
}""")
    expected = rb.parse(H + """
def @main(%x: Tensor[(2), float32]) {
  let %a: Tensor[(2), float32] = add(%x, %x);
  let %b = %a;
  let %t = negative(%b);
  let %c = multiply(%t, %t);
  let %d = subtract(%c, 1f);
  %d
}""")
    assert_structural_equal(run_infer_type(anf(before)), run_infer_type(expected), map_free_vars=True)


def test_anf_binds_let_bound_recursive_closure_to_its_own_variable():
    before = rb.parse(H + """
def @main(%n: int32) {
  let %f = fn (%i: int32) -> int32 {
    if (less(%i, 1)) { 0 } else { add(%i, %f(subtract(%i, 1))) }
  };
  %f(%n)
}""")
    expected = rb.parse(H + """
def @main(%n: int32) {
  let %f = fn (%i: int32) -> int32 {
    let %c = less(%i, 1);
    let %r = if (%c) { 0 } else {
      let %d = subtract(%i, 1);
      let %e = %f(%d);
      let %s = add(%i, %e);
      %s
    };
    %r
  };
  let %o = %f(%n);
  %o
}""")
    after = anf(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    assert run(after, np.int32(4)) == run(before, np.int32(4)) == 10


def test_anf_leaves_primitive_functions_alone():
    before = rb.parse(H + """
def @main(%x: Tensor[(2), float32]) {
  %0 = fn (%p: Tensor[(2), float32], Primitive=1) { %1 = add(%p, %p); multiply(%1, %1) };
  %0(%x)
}""")
    expected = rb.parse(H + """
def @main(%x: Tensor[(2), float32]) {
  let %r = fn (%p: Tensor[(2), float32], Primitive=1) { %1 = add(%p, %p); multiply(%1, %1) }(%x);
  %r
}""")
    assert_structural_equal(run_infer_type(anf(before)), run_infer_type(expected), map_free_vars=True)


def test_anf_is_idempotent_and_returns_the_same_module():
    mod = rb.parse(H + """
def @main(%x: Tensor[(2), float32], %c: bool) {
  %0 = add(%x, %x);
  if (%c) { multiply(%0, %0) } else { %0 }
}""")
    once = anf(mod)
    assert once is not mod
    assert anf(once) is once
    atom = rb.parse(H + "def @main(%x: float32) { %x }")
    assert anf(atom) is atom


def test_anf_of_a_vision_model_is_in_anf_and_computes_the_same():
    mod, params = rb.models.get("mobilenet_v2", image_shape=(3, 32, 32), num_classes=10)
    after = anf(mod)
    assert in_anf(after["main"])
    assert sum(1 for n in post_order(after["main"]) if isinstance(n, Let)) >= rb.ir.count_ops(mod)
    data = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    np.testing.assert_allclose(run(after, data, **params), run(mod, data, **params), rtol=1e-5, atol=1e-6)


# ---- ToGraphNormalForm ------------------------------------------------------------------------

def test_gnf_turns_lets_into_sharing():
    before = rb.parse(H + """
def @main(%x: Tensor[(2), float32]) {
  let %a = add(%x, %x);
  let %b = %a;
  let %unused = negative(%x);
  multiply(%b, %a)
}""")
    expected = rb.parse(H + """
def @main(%x: Tensor[(2), float32]) {
  %0 = add(%x, %x);
  multiply(%0, %0)
}""")
    assert_structural_equal(run_infer_type(gnf(before)), run_infer_type(expected), map_free_vars=True)


def test_gnf_inlines_into_branches_and_closures():
    before = rb.parse(H + """
def @main(%x: Tensor[(2), float32], %c: bool) {
  let %a = add(%x, %x);
  let %f = fn (%y: Tensor[(2), float32]) { let %m = multiply(%y, %a); %m };
  if (%c) { %f(%a) } else { %a }
}""")
    expected = rb.parse(H + """
def @main(%x: Tensor[(2), float32], %c: bool) {
  %0 = add(%x, %x);
  %1 = fn (%y: Tensor[(2), float32]) { multiply(%y, %0) };
  if (%c) { %1(%0) } else { %0 }
}""")
    assert_structural_equal(run_infer_type(gnf(before)), run_infer_type(expected), map_free_vars=True)


def test_gnf_keeps_a_let_only_a_closure_uses():
    """Inlined, the value would move into the closure and be computed at each of its calls: the
    let stays (a value also used outside becomes shared, computed once, as above)."""
    before = rb.parse(H + """
def @main(%x: Tensor[(2), float32]) {
  let %a = exp(%x);
  let %f = fn (%y: Tensor[(2), float32]) { multiply(%y, %a) };
  add(%f(%x), %f(%x))
}""")
    out = gnf(before)
    lets = [n for n in post_order(out["main"]) if isinstance(n, Let)]
    assert [n.var.name_hint for n in lets] == ["a"]
    x = np.array([0.5, -1.0], "float32")
    run = rb.create_executor("debug", out).evaluate()
    np.testing.assert_allclose(run(x), 2 * x * np.exp(x), rtol=1e-6)


def test_gnf_keeps_recursive_closures_as_lets():
    before = rb.parse(H + """
def @main(%n: int32) {
  let %f = fn (%i: int32) -> int32 {
    let %c = less(%i, 1);
    if (%c) { 0 } else { add(%i, %f(subtract(%i, 1))) }
  };
  let %r = %f(%n);
  %r
}""")
    expected = rb.parse(H + """
def @main(%n: int32) {
  let %f = fn (%i: int32) -> int32 {
    if (less(%i, 1)) { 0 } else { add(%i, %f(subtract(%i, 1))) }
  };
  %f(%n)
}""")
    after = gnf(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    assert run(after, np.int32(5)) == 15


def test_gnf_keeps_effectful_lets_in_order():
    before = rb.parse(H + """
def @main(%x: Tensor[(2), float32]) {
  let %r = ref(%x);
  let %old = ref_read(%r);
  let %w = add(%x, %x);
  let %u = ref_write(%r, %w);
  let %new = ref_read(%r);
  let %d = subtract(%new, %old);
  multiply(%d, %d)
}""")
    expected = rb.parse(H + """
def @main(%x: Tensor[(2), float32]) {
  let %r = ref(%x);
  let %old = ref_read(%r);
  let %u = ref_write(%r, add(%x, %x));
  let %new = ref_read(%r);
  %0 = subtract(%new, %old);
  multiply(%0, %0)
}""")
    after = gnf(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    x = np.array([1.0, -2.0], "float32")
    np.testing.assert_allclose(run(after, x), x * x)
    np.testing.assert_allclose(run(before, x), x * x)


def test_gnf_keeps_calls_that_may_have_effects_when_refs_exist():
    before = rb.parse(H + """
def @bump(%r: Ref[float32]) { ref_write(%r, add(ref_read(%r), 1f)) }
def @main() {
  let %r = ref(0f);
  let %u1 = @bump(%r);
  let %u2 = @bump(%r);
  ref_read(%r)
}""")
    after = gnf(before)
    assert after is before
    assert run(after) == 2.0


def test_gnf_without_lets_returns_the_same_module():
    mod, _ = rb.models.get("resnet18", image_shape=(3, 32, 32), num_classes=10)
    assert gnf(mod) is mod


# ---- round trips ------------------------------------------------------------------------------

ROUND_TRIP_PROGRAMS = [
    """
def @main(%x: Tensor[(2), float32]) {
  %0 = add(%x, %x);
  %1 = (%0, multiply(%0, 3f));
  %2 = %1.1;
  subtract(%2, %0)
}""",
    """
def @main(%x: Tensor[(2), float32], %c: bool) {
  %0 = add(%x, %x);
  %1 = negative(%x);
  %2 = if (%c) { %3 = multiply(%0, %1); add(%3, %3) } else { %0 };
  %4 = fn (%y: Tensor[(2), float32]) { subtract(%y, %1) };
  %4(%2)
}""",
    LIST + """
def @main(%l: List[Tensor[(2), float32]], %x: Tensor[(2), float32]) {
  %0 = exp(%x);
  %1 = match (%l) {
    Cons(%h, %t) => { %2 = add(%h, %0); multiply(%2, %2) },
    Nil => %0,
  };
  (%1, %0)
}""",
]


@pytest.mark.parametrize("text", ROUND_TRIP_PROGRAMS)
def test_anf_then_gnf_gives_back_the_graph(text):
    mod = rb.parse(H + text)
    back = gnf(anf(mod))
    assert_structural_equal(run_infer_type(back), run_infer_type(mod))


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_anf_then_gnf_round_trips_vision_models(name):
    mod, _ = rb.models.get(name, image_shape=(3, 32, 32), num_classes=10)
    after = anf(mod)
    assert not structural_equal(run_infer_type(after), run_infer_type(mod))
    assert_structural_equal(run_infer_type(gnf(after)), run_infer_type(mod))


# ---- ToBasicBlockNormalForm -----------------------------------------------------------------

def test_bbnf_leaves_dataflow_programs_alone():
    mod, _ = rb.models.get("resnet18", image_shape=(3, 32, 32), num_classes=10)
    assert bbnf(mod) is mod


def test_bbnf_binds_nodes_used_across_branches_only():
    before = rb.parse(H + """
def @main(%x: Tensor[(2), float32], %c: bool) {
  %0 = add(%x, %x);
  %1 = negative(%x);
  %2 = multiply(%1, %1);
  if (%c) { %3 = exp(%0); subtract(%3, %3) } else { add(%0, %2) }
}""")
    expected = rb.parse(H + """
def @main(%x: Tensor[(2), float32], %c: bool) {
  let %a = add(%x, %x);
  if (%c) { %3 = exp(%a); subtract(%3, %3) } else { %1 = negative(%x); add(%a, multiply(%1, %1)) }
}""")
    assert_structural_equal(run_infer_type(bbnf(before)), run_infer_type(expected), map_free_vars=True)


def test_bbnf_binds_nodes_captured_by_closures_and_used_outside():
    before = rb.parse(H + """
def @main(%x: Tensor[(2), float32]) {
  %0 = add(%x, %x);
  %1 = fn (%y: Tensor[(2), float32]) { %2 = multiply(%y, %0); add(%2, %2) };
  %3 = %1(%0);
  (%3, %3)
}""")
    expected = rb.parse(H + """
def @main(%x: Tensor[(2), float32]) {
  let %a = add(%x, %x);
  %1 = fn (%y: Tensor[(2), float32]) { %2 = multiply(%y, %a); add(%2, %2) };
  %3 = %1(%a);
  (%3, %3)
}""")
    assert_structural_equal(run_infer_type(bbnf(before)), run_infer_type(expected), map_free_vars=True)


def test_bbnf_keeps_lets_and_nested_scopes():
    before = rb.parse(H + """
def @main(%x: Tensor[(2), float32], %c: bool, %d: bool) {
  let %v = exp(%x);
  %0 = negative(%v);
  if (%c) {
    %1 = add(%0, %0);
    if (%d) { multiply(%1, %0) } else { %1 }
  } else {
    %x
  }
}""")
    expected = rb.parse(H + """
def @main(%x: Tensor[(2), float32], %c: bool, %d: bool) {
  let %v = exp(%x);
  if (%c) {
    let %n = negative(%v);
    let %a = add(%n, %n);
    if (%d) { multiply(%a, %n) } else { %a }
  } else {
    %x
  }
}""")
    after = bbnf(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    assert bbnf(after) is after


# ---- meaning: NLP models, effects ---------------------------------------------------------------

NF_PASSES = [anf, gnf, bbnf, lambda m: gnf(anf(m)), lambda m: bbnf(anf(m))]
NF_IDS = ["anf", "gnf", "bbnf", "anf-gnf", "anf-bbnf"]


def _nlp_cases():
    rng = np.random.default_rng(7)
    size = dict(input_size=3, hidden_size=4)
    seq = [rng.standard_normal((1, 3)).astype("float32") for _ in range(3)]
    tree = make_tree(seq[0], [make_tree(seq[1]), make_tree(seq[2], [make_tree(seq[0])])])
    return [
        ("lstm", dict(form="loop", **size), lambda: (make_list(seq),)),
        ("gru", dict(form="unrolled", seq_len=3, **size), lambda: (np.stack(seq),)),
        ("tree_lstm", size, lambda: (tree,)),
        ("char_rnn", dict(hidden_size=6, max_length=4),
         lambda: (np.eye(18, dtype="float32")[None, 2], np.int32(3))),
    ]


@pytest.mark.parametrize("case", _nlp_cases(), ids=lambda c: c[0])
@pytest.mark.parametrize("convert", NF_PASSES, ids=NF_IDS)
def test_normal_forms_keep_nlp_model_outputs(case, convert):
    name, kwargs, inputs = case
    mod, params = rb.models.get(name, **kwargs)
    after = convert(mod)
    got, want = run(after, *inputs(), **params), run(mod, *inputs(), **params)
    if name == "char_rnn":
        assert [int(c) for c in from_list(got)] == [int(c) for c in from_list(want)]
    else:
        same_values(got, want)


def test_anf_of_nlp_models_is_in_anf():
    for name, kwargs, _ in _nlp_cases():
        mod, _ = rb.models.get(name, **kwargs)
        after = anf(mod)
        for gv, func in after.functions.items():
            assert in_anf(func.body), f"{name}: @{gv.name_hint}"


def test_effects_keep_their_order_through_every_normal_form():
    mod = rb.parse(H + """
def @main(%x: Tensor[(2), float32], %c: bool) {
  let %r = ref(%x);
  let %before = ref_read(%r);
  %0 = multiply(%x, 3f);
  let %u = if (%c) { ref_write(%r, %0) } else { ref_write(%r, negative(%0)) };
  let %after = ref_read(%r);
  (%before, %after, add(%after, %0))
}""")
    x = np.array([1.0, 2.0], "float32")
    for convert in NF_PASSES:
        after = convert(mod)
        for c in (True, False):
            got, want = run(after, x, np.bool_(c)), run(mod, x, np.bool_(c))
            same_values(got, want)
            np.testing.assert_allclose(want[1], 3 * x if c else -3 * x)


# ---- scale --------------------------------------------------------------------------------------

# Deep enough that any recursion on program depth fails (Python stops at 1,000 frames);
# tests/test_scale.py takes 100,000 operators through the whole pipeline.
N = 20_000


def _long_graph():
    x = rb.var("x", shape=(2,))
    y = x
    for i in range(N):
        y = op.negative(y) if i % 2 else op.add(y, x)
    return rb.IRModule.from_expr(Function([x], y))


def _long_let_chain():
    x = rb.var("x", shape=(2,))
    vs = [rb.var(f"v{i}") for i in range(N)]
    body = vs[-1]
    for i in range(N - 1, -1, -1):
        prev = vs[i - 1] if i else x
        body = Let(vs[i], op.add(prev, x) if i % 2 else op.negative(prev), body)
    return rb.IRModule.from_expr(Function([x], body))


def test_deep_graph_through_every_normal_form():
    mod = _long_graph()
    a = anf(mod)
    assert isinstance(a["main"].body, Let)
    g = gnf(a)
    assert_structural_equal(run_infer_type(g), run_infer_type(mod))
    assert bbnf(mod) is mod


def test_deep_let_chain_through_every_normal_form():
    mod = _long_let_chain()
    g = gnf(mod)
    assert not isinstance(g["main"].body, Let) and rb.ir.count_ops(g) == N
    assert anf(mod)["main"].body.var is mod["main"].body.var
    assert bbnf(mod) is mod
