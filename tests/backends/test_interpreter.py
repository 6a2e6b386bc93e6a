"""The reference interpreter, checked against values computed by hand or in plain Python."""

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.backends.interpreter import Closure, ConstructorValue, Interpreter, RefValue
from relaybench.errors import ExecutionError


def run_text(text, *args, entry="main"):
    mod = rb.parse(text)
    ex = rb.create_executor("interpreter", mod=mod)
    return ex.evaluate(mod.get_global_var(entry))(*args)


HEADER = '#[version = "0.0.5"]\n'


# ---- values and basic forms ---------------------------------------------------------------------

def test_arith_and_tuples():
    out = run_text(HEADER + """
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  %0 = add(%x, %y);
  %1 = multiply(%0, %x);
  (%0, %1, (%x,)).1
}""", np.array([1, 2, 3], "float32"), np.array([10, 20, 30], "float32"))
    np.testing.assert_array_equal(out, [11, 44, 99])


def test_tuple_value_is_a_python_tuple():
    out = run_text(HEADER + "def @main(%x: float32) { (%x, (%x, 2f)) }", np.float32(1.5))
    assert isinstance(out, tuple) and isinstance(out[1], tuple)
    assert out[0] == 1.5 and out[1][1] == 2.0


def test_if_takes_one_branch_only():
    text = HEADER + """
def @main(%c: bool, %r: Ref[float32]) -> float32 {
  if (%c) {
    let %_ = ref_write(%r, 1f);
    ref_read(%r)
  } else {
    ref_read(%r)
  }
}"""
    r = RefValue(np.float32(0.0))
    assert run_text(text, np.bool_(False), r) == 0.0 and r.value == 0.0
    assert run_text(text, np.bool_(True), r) == 1.0 and r.value == 1.0


def test_let_and_graph_sharing_evaluate_once():
    # a shared node whose evaluation has an effect: the effect happens once
    r = rb.var("r")
    x = rb.var("x", shape=())
    bump = rb.RefWrite(r, op.add(rb.RefRead(r), rb.const(1.0)))
    shared = rb.Tuple([bump, bump])
    body = rb.Let(rb.var("_"), shared, rb.RefRead(r))
    func = rb.Function([r, x], op.add(body, x))
    cell = RefValue(np.float32(10.0))
    out = Interpreter(rb.IRModule()).evaluate(func)(cell, np.float32(0.5))
    assert out == 11.5


def test_closures_capture_their_environment():
    out = run_text(HEADER + """
def @main(%x: float32) -> float32 {
  let %add_x = fn (%y: float32) -> float32 { add(%x, %y) };
  let %twice = fn (%f: fn (float32) -> float32, %v: float32) -> float32 { %f(%f(%v)) };
  %twice(%add_x, 1f)
}""", np.float32(5))
    assert out == 11.0


def test_function_value_returned_to_python():
    out = run_text(HEADER + """
def @main(%x: float32) -> fn (float32) -> float32 {
  fn (%y: float32) -> float32 { multiply(%x, %y) }
}""", np.float32(3))
    assert isinstance(out, Closure)
    interp = Interpreter(rb.IRModule())
    assert interp.apply(out, [np.float32(4)]) == 12.0


def test_references():
    out = run_text(HEADER + """
def @main() -> float32 {
  let %r = ref(1f);
  let %_ = ref_write(%r, add(ref_read(%r), 41f));
  ref_read(%r)
}""")
    assert out == 42.0


# ---- recursion ----------------------------------------------------------------------------------

def test_global_recursion_factorial():
    text = HEADER + """
def @fact(%n: int32) -> int32 {
  if (equal(%n, 0)) { 1 } else { multiply(%n, @fact(subtract(%n, 1))) }
}"""
    assert run_text(text, np.int32(10), entry="fact") == 3628800


def test_let_recursion_loop_counts_down():
    text = HEADER + """
def @main(%n: int32) -> int32 {
  let %loop: fn (int32, int32) -> int32 = fn (%i: int32, %acc: int32) -> int32 {
    if (equal(%i, 0)) { %acc } else { %loop(subtract(%i, 1), add(%acc, %i)) }
  };
  %loop(%n, 0)
}"""
    assert run_text(text, np.int32(100)) == 5050


def test_deep_recursion_does_not_touch_python_stack():
    # 50,000 nested (non-tail) calls: add(1, @count(n - 1))
    text = HEADER + """
def @count(%n: int32) -> int32 {
  if (equal(%n, 0)) { 0 } else { add(1, @count(subtract(%n, 1))) }
}"""
    assert run_text(text, np.int32(50_000), entry="count") == 50_000


def test_mutual_recursion():
    text = HEADER + """
def @even(%n: int32) -> bool {
  if (equal(%n, 0)) { True } else { @odd(subtract(%n, 1)) }
}
def @odd(%n: int32) -> bool {
  if (equal(%n, 0)) { False } else { @even(subtract(%n, 1)) }
}"""
    assert bool(run_text(text, np.int32(1001), entry="odd"))
    assert not bool(run_text(text, np.int32(1001), entry="even"))


# ---- ADTs and the prelude -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def prelude():
    mod = rb.IRModule().import_prelude()
    return mod, rb.create_executor("interpreter", mod=mod)


def to_list(mod, values):
    cons, nil = mod.get_constructor("Cons"), mod.get_constructor("Nil")
    out = ConstructorValue(nil, ())
    for v in reversed(values):
        out = ConstructorValue(cons, (v, out))
    return out


def from_list(value):
    out = []
    while value.name == "Cons":
        out.append(value.fields[0])
        value = value.fields[1]
    assert value.name == "Nil"
    return out


def ints(xs):
    return [np.int32(x) for x in xs]


def glob(ex, mod, name):
    return ex.evaluate(mod.get_global_var(name))


def test_prelude_length_nth_update(prelude):
    mod, ex = prelude
    xs = to_list(mod, ints([5, 6, 7, 8]))
    assert glob(ex, mod, "length")(xs) == 4
    assert glob(ex, mod, "nth")(xs, np.int32(2)) == 7
    assert [int(v) for v in from_list(glob(ex, mod, "update")(xs, np.int32(1), np.int32(60)))] == [5, 60, 7, 8]
    assert glob(ex, mod, "hd")(xs) == 5
    assert [int(v) for v in from_list(glob(ex, mod, "tl")(xs))] == [6, 7, 8]


def _fn(text, mod):
    """A closure value from a Relay function written in text, in the prelude's module."""
    expr = rb.ir.parse_expr(text, mod=mod)
    return Interpreter(mod).evaluate(expr)


def test_prelude_map_folds_filter(prelude):
    mod, ex = prelude
    xs = to_list(mod, ints([1, 2, 3, 4, 5]))
    double = Interpreter(mod).run(rb.ir.parse_expr("fn (%x: int32) -> int32 { multiply(%x, 2) }"),
                                  Interpreter(mod).globals)
    sub = Interpreter(mod).run(rb.ir.parse_expr("fn (%a: int32, %b: int32) -> int32 { subtract(%a, %b) }"),
                               Interpreter(mod).globals)
    big = Interpreter(mod).run(rb.ir.parse_expr("fn (%x: int32) -> bool { greater(%x, 2) }"),
                               Interpreter(mod).globals)
    assert [int(v) for v in from_list(glob(ex, mod, "map")(double, xs))] == [2, 4, 6, 8, 10]
    # foldl(-, 100, [1..5]) = ((((100-1)-2)-3)-4)-5 ; foldr(-, 100, [1..5]) = 1-(2-(3-(4-(5-100))))
    assert glob(ex, mod, "foldl")(sub, np.int32(100), xs) == 100 - 15
    assert glob(ex, mod, "foldr")(sub, np.int32(100), xs) == 1 - (2 - (3 - (4 - (5 - 100))))
    assert [int(v) for v in from_list(glob(ex, mod, "filter")(big, xs))] == [3, 4, 5]
    assert glob(ex, mod, "sum")(xs) == 15


def test_prelude_zip_concat_rev_iterate(prelude):
    mod, ex = prelude
    xs, ys = to_list(mod, ints([1, 2, 3])), to_list(mod, ints([10, 20]))
    pairs = from_list(glob(ex, mod, "zip")(xs, ys))
    assert [(int(a), int(b)) for a, b in pairs] == [(1, 10), (2, 20)]
    assert [int(v) for v in from_list(glob(ex, mod, "concat")(xs, ys))] == [1, 2, 3, 10, 20]
    assert [int(v) for v in from_list(glob(ex, mod, "rev")(xs))] == [3, 2, 1]
    inc = Interpreter(mod).run(rb.ir.parse_expr("fn (%x: int32) -> int32 { add(%x, 3) }"),
                               Interpreter(mod).globals)
    five_times = glob(ex, mod, "iterate")(inc, np.int32(5))
    assert Interpreter(mod).apply(five_times, [np.int32(1)]) == 16


def test_prelude_trees_and_nats(prelude):
    mod, ex = prelude
    rose = mod.get_constructor("Rose")

    def tree(v, *children):
        return ConstructorValue(rose, (np.int32(v), to_list(mod, list(children))))

    t = tree(1, tree(2, tree(4)), tree(3))
    assert glob(ex, mod, "size")(t) == 4
    neg = Interpreter(mod).run(rb.ir.parse_expr("fn (%x: int32) -> int32 { negative(%x) }"),
                               Interpreter(mod).globals)
    mapped = glob(ex, mod, "tmap")(neg, t)
    assert int(mapped.fields[0]) == -1
    assert int(from_list(mapped.fields[1])[0].fields[0]) == -2
    zero, succ = mod.get_constructor("zero"), mod.get_constructor("succ")

    def nat(n):
        v = ConstructorValue(zero, ())
        for _ in range(n):
            v = ConstructorValue(succ, (v,))
        return v

    assert glob(ex, mod, "nat_to_int")(glob(ex, mod, "nat_add")(nat(3), nat(4))) == 7
    assert glob(ex, mod, "nat_nth")(to_list(mod, ints([7, 8, 9])), nat(2)) == 9


def test_long_list_through_recursive_length(prelude):
    mod, ex = prelude
    xs = to_list(mod, ints(range(20_000)))
    assert glob(ex, mod, "length")(xs) == 20_000


def test_match_tuple_and_wildcard_patterns():
    text = HEADER + """
type Option[A] {
  Some(A),
  None,
}
def @pick(%a: Option[int32], %b: Option[int32]) -> int32 {
  match ((%a, %b)) {
    (Some(%x), Some(%y)) => add(%x, %y),
    (Some(%x), _) => %x,
    (_, Some(%y)) => negative(%y),
    _ => 0,
  }
}"""
    mod = rb.parse(text)
    ex = rb.create_executor("interpreter", mod=mod)
    some, none = mod.get_constructor("Some"), mod.get_constructor("None")
    pick = ex.evaluate(mod.get_global_var("pick"))
    S = lambda v: ConstructorValue(some, (np.int32(v),))  # noqa: E731
    N = ConstructorValue(none, ())
    assert pick(S(2), S(3)) == 5
    assert pick(S(2), N) == 2
    assert pick(N, S(3)) == -3
    assert pick(N, N) == 0


def test_partial_match_failure_names_the_match():
    mod = rb.IRModule().import_prelude()
    ex = rb.create_executor("interpreter", mod=mod)
    with pytest.raises(ExecutionError, match="no clause of the match accepts Nil"):
        ex.evaluate(mod.get_global_var("hd"))(to_list(mod, []))


# ---- dynamic shapes and errors ------------------------------------------------------------------

def test_symbolic_shapes_run_at_any_size():
    text = HEADER + """
def @main(%x: Tensor[(n, 2), float32]) {
  concatenate((%x, %x))
}"""
    mod = rb.parse(text)
    run = rb.create_executor("interpreter", mod=mod).evaluate()
    for n in (1, 3, 7):
        x = np.arange(2 * n, dtype="float32").reshape(n, 2)
        np.testing.assert_array_equal(run(x), np.concatenate([x, x]))


def test_input_dtype_and_shape_checked():
    x = rb.var("x", shape=(2, 3))
    run = rb.create_executor("interpreter", mod=rb.IRModule.from_expr(rb.Function([x], op.nn.relu(x)))).evaluate()
    with pytest.raises(ExecutionError, match="input %x: expected dtype float32, given int32"):
        run(np.zeros((2, 3), "int32"))
    with pytest.raises(ExecutionError, match=r"input %x: expected shape Tensor\[\(2, 3\), float32\], given \[3, 2\]"):
        run(np.zeros((3, 2), "float32"))
    with pytest.raises(ExecutionError, match="takes 1 arguments, got 2"):
        run(np.zeros((2, 3), "float32"), np.zeros((2, 3), "float32"))


def test_keyword_arguments_by_parameter_name():
    x, y = rb.var("x", shape=(2,)), rb.var("y", shape=(2,))
    run = rb.create_executor("interpreter", mod=rb.IRModule.from_expr(rb.Function([x, y], x - y))).evaluate()
    np.testing.assert_array_equal(run(y=np.ones(2, "float32"), x=np.full(2, 3, "float32")), [2, 2])
    with pytest.raises(ExecutionError, match="no parameter named 'z'"):
        run(z=np.ones(2, "float32"))


def test_op_failure_names_the_op_and_the_place():
    # a reshape that type-checks with Any but fails on the actual value
    text = HEADER + """
def @main(%x: Tensor[(?), float32]) {
  reshape(%x, newshape=[2, 3])
}"""
    mod = rb.parse(text, "prog.rly")
    run = rb.create_executor("interpreter", mod=mod).evaluate()
    np.testing.assert_array_equal(run(np.arange(6, dtype="float32")), np.arange(6).reshape(2, 3))
    with pytest.raises(ExecutionError, match=r"reshape at prog.rly:4:3: 5 elements vs 6"):
        run(np.arange(5, dtype="float32"))


def test_a_long_op_program_runs():
    # 20,000 operators, 20 times Python's recursion limit; tests/test_scale.py runs 100,000,
    # fused, through the interpreter
    from relaybench.testing import chain, chain_reference
    mod = rb.IRModule.from_expr(chain(20_000))
    x = np.linspace(-1, 1, 4).astype("float32")
    out = rb.create_executor("interpreter", mod=mod).evaluate()(x)
    np.testing.assert_allclose(out, chain_reference(20_000, x), rtol=1e-5)
