"""ExprVisitor / ExprMutator / post_order and the analyses built on them."""

from collections import Counter

import numpy as np
import pytest

from relaybench import op
from relaybench.ir import (Call, Clause, Constant, Function, If, Let, Match, Op, PatternConstructor,
                           PatternTuple, PatternVar, PatternWildcard, RefCreate, RefRead, RefWrite, Tuple,
                           TupleGetItem, Var, all_vars, bound_vars, const, count_nodes, count_ops,
                           define_adt, free_vars, op_histogram, var)
from relaybench.ir.functor import ExprMutator, ExprVisitor, post_order, post_order_visit
from relaybench.ir.module import IRModule
from relaybench.ir.structural import structural_equal
from relaybench.testing import chain


class KindCounter(ExprVisitor):
    """Counts handler calls per node class."""

    def __init__(self):
        super().__init__()
        self.counts = Counter()

    def _dispatch(self, node):
        self.counts[type(node).__name__] += 1
        return super()._dispatch(node)


def count_kinds(e):
    v = KindCounter()
    v.visit(e)
    return v.counts


def sample_program():
    """fn (%x, %y) { let %t = (add(%x, %y), %x); if (%c) { %t.0 } else { multiply(%t.0, 2f) } }"""
    x, y, t = var("x", shape=(2,)), var("y", shape=(2,)), var("t")
    c = var("c", "bool")
    tup = Tuple([op.add(x, y), x])
    body = Let(t, tup, If(c, TupleGetItem(t, 0), op.multiply(TupleGetItem(t, 0), const(2.0))))
    return Function([x, y], body), (x, y, t, c)


# ---------------------------------------------------------------------------------------------
# visitor

def test_visitor_visits_every_node_once():
    f, (x, y, t, c) = sample_program()
    counts = count_kinds(f)
    assert counts == Counter({"Function": 1, "Let": 1, "Tuple": 1, "If": 1, "TupleGetItem": 2, "Call": 2,
                              "Op": 2, "Var": 4, "Constant": 1})


def test_shared_node_is_visited_once():
    x = var("x", shape=(2,))
    shared = op.add(x, x)
    e = op.multiply(shared, shared)
    counts = count_kinds(e)
    assert counts["Call"] == 2 and counts["Var"] == 1
    # visit() on an already-visited node is a memo lookup
    v = KindCounter()
    v.visit(e)
    v.visit(shared)
    assert v.counts["Call"] == 2


def test_visitor_children_before_parents():
    x = var("x", shape=(2,))
    a = op.add(x, const(1.0))
    b = op.nn.relu(a)
    order = []

    class Recorder(ExprVisitor):
        def visit_call(self, call):
            super().visit_call(call)
            order.append(call.op.name)

    Recorder().visit(b)
    assert order == ["add", "nn.relu"]


def test_visitor_sees_match_and_refs():
    lst = define_adt("List", ["A"], lambda List, A: {"Cons": [A, List(A)], "Nil": []})
    h, tl, r = var("h"), var("tl"), var("r")
    m = Match(lst["Nil"](), [Clause(PatternConstructor(lst["Cons"], [PatternVar(h), PatternVar(tl)]), h),
                             Clause(PatternWildcard(), const(0.0))])
    e = Let(r, RefCreate(m), Tuple([RefRead(r), RefWrite(r, const(1.0))]))
    counts = count_kinds(e)
    assert counts["Match"] == 1 and counts["RefCreate"] == 1 and counts["RefRead"] == 1
    assert counts["RefWrite"] == 1 and counts["Constructor"] == 1  # Nil, the callee
    assert counts["Var"] == 2  # %r and %h; pattern vars are not expression children


def test_children_to_visit_override_skips_primitive_bodies():
    x, p = var("x", shape=(2,)), var("p", shape=(2,))
    prim = Function([p], op.nn.relu(op.add(p, p))).with_attr("Primitive", 1)
    e = Call(prim, [op.multiply(x, x)])

    class OuterCalls(ExprVisitor):
        def __init__(self):
            super().__init__()
            self.ops = []

        def children_to_visit(self, expr):
            if isinstance(expr, Function) and expr.is_primitive:
                return ()
            return super().children_to_visit(expr)

        def visit_function(self, fn):
            if not fn.is_primitive:
                super().visit_function(fn)

        def visit_call(self, call):
            super().visit_call(call)
            if isinstance(call.op, Op):
                self.ops.append(call.op.name)

    v = OuterCalls()
    v.visit(e)
    assert v.ops == ["multiply"]
    assert count_kinds(e)["Call"] == 4  # the default visitor goes inside


def test_subclasses_dispatch_through_their_base_and_strangers_are_refused():
    class NamedVar(Var):
        pass

    seen = []

    class Recorder(ExprVisitor):
        def visit_var(self, v):
            seen.append(v.name_hint)

    Recorder().visit(op.add(NamedVar("s"), var("t")))
    assert seen == ["s", "t"]

    class NotANode:
        pass

    with pytest.raises(TypeError, match="Recorder cannot visit NotANode"):
        Recorder().visit(NotANode())


# ---------------------------------------------------------------------------------------------
# mutator

def test_identity_mutator_returns_the_same_program():
    f, _ = sample_program()
    assert ExprMutator().visit(f) is f
    mod_fn = chain(50)
    assert ExprMutator().visit(mod_fn) is mod_fn


class ReluToTanh(ExprMutator):
    """Replaces nn.relu by negative (any rewrite of one op will do)."""

    def visit_call(self, call):
        new = super().visit_call(call)
        if isinstance(new.op, Op) and new.op.name == "nn.relu":
            return op.negative(new.args[0])
        return new


def test_mutator_rebuilds_only_the_path_to_a_change():
    x, y = var("x", shape=(2,)), var("y", shape=(2,))
    left = op.add(x, const(1.0))          # untouched
    right = op.nn.relu(op.multiply(y, y))  # rewritten
    inner_right = right.args[0]
    top = op.subtract(left, right)
    f = Function([x, y], top)
    g = ReluToTanh().visit(f)
    assert g is not f
    assert g.params == f.params
    assert g.body is not top and g.body.op.name == "subtract"
    assert g.body.args[0] is left  # the unchanged subtree is reused, not copied
    assert g.body.args[1].op.name == "negative"
    assert g.body.args[1].args[0] is inner_right


def test_mutator_keeps_sharing():
    x = var("x", shape=(2,))
    shared = op.nn.relu(op.add(x, x))
    e = Tuple([shared, op.multiply(shared, shared)])
    out = ReluToTanh().visit(e)
    first = out.fields[0]
    assert first.op.name == "negative"
    # the shared node was rewritten once, and every use sees the same new node
    assert out.fields[1].args[0] is first and out.fields[1].args[1] is first
    assert count_nodes(out) == count_nodes(e)


def test_substitution_through_the_memo():
    x, y, z = var("x", shape=(2,)), var("y", shape=(2,)), var("z", shape=(2,))
    body = op.add(op.multiply(x, y), x)
    m = ExprMutator()
    m.memo[x] = z
    out = m.visit(body)
    assert out.op.name == "add" and out.args[1] is z
    assert out.args[0].args == (z, y)
    assert free_vars(out) == [z, y]
    assert body.args[1] is x  # the original is untouched


def test_mutator_renames_binders_consistently():
    f, (x, y, t, c) = sample_program()

    class Rename(ExprMutator):
        def visit_var(self, v):
            return Var(v.name_hint + "_r", v.type_annotation)

    g = Rename().visit(f)
    assert [p.name_hint for p in g.params] == ["x_r", "y_r"]
    assert g.body.var.name_hint == "t_r"
    # each variable was renamed once (memoized), so uses and binders agree
    assert g.body.body.true_branch.tuple_value is g.body.var
    assert g.body.value.fields[1] is g.params[0]
    assert structural_equal(f, g, map_free_vars=True)


def test_mutator_rebuilds_match_and_patterns():
    lst = define_adt("List", ["A"], lambda List, A: {"Cons": [A, List(A)], "Nil": []})
    h, tl, d = var("h"), var("tl"), var("d")
    clause = Clause(PatternConstructor(lst["Cons"], [PatternVar(h), PatternTuple([PatternVar(tl)])]), h)
    keep = Clause(PatternWildcard(), const(0.0))
    m = Match(d, [clause, keep])
    h2 = var("h2")
    mut = ExprMutator()
    mut.memo[h] = h2
    out = mut.visit(m)
    assert out is not m and out.data is d
    new_clause = out.clauses[0]
    assert new_clause.lhs.patterns[0].var is h2 and new_clause.rhs is h2
    assert new_clause.lhs.patterns[1] is clause.lhs.patterns[1]  # unchanged sub-pattern reused
    assert out.clauses[1] is keep
    assert ExprMutator().visit(m) is m


def test_mutator_keeps_function_fields_and_spans():
    from relaybench.ir import Span
    from relaybench.ir.types import TensorType
    x, z = var("x", shape=(2,)), var("z", shape=(2,))
    span = Span("a.rly", 1, 1)
    f = Function([x], op.add(x, x), TensorType((2,)), attrs={"Inline": 1})
    f.body.with_span(span)
    m = ExprMutator()
    m.memo[x] = z
    g = m.visit(f)
    assert g.params == (z,) and g.ret_type == TensorType((2,)) and g.attrs == f.attrs
    assert g.body.span is span


def test_mutator_on_every_node_kind_changes_consistently():
    x, z = var("x", shape=()), var("z", shape=())
    r = var("r")
    c = var("c", "bool")
    e = Let(r, RefCreate(x), Tuple([RefRead(r), RefWrite(r, x), If(c, x, TupleGetItem(Tuple([x]), 0))]))
    m = ExprMutator()
    m.memo[x] = z
    out = m.visit(e)
    assert free_vars(out) == [z, c]
    expected = Let(r, RefCreate(z), Tuple([RefRead(r), RefWrite(r, z), If(c, z, TupleGetItem(Tuple([z]), 0))]))
    assert structural_equal(out, expected)


# ---------------------------------------------------------------------------------------------
# post_order and analyses

def test_post_order_lists_each_node_once_children_first():
    x = var("x", shape=(2,))
    a = op.add(x, x)
    b = op.multiply(a, a)
    order = post_order(b)
    assert order == [b.op, a.op, x, a, b]
    assert order.index(a) < order.index(b) and order.index(x) < order.index(a)
    assert len(order) == len(set(order)) == 5
    seen = []
    post_order_visit(b, seen.append)
    assert seen == order


def test_free_and_bound_vars():
    f, (x, y, t, c) = sample_program()
    assert free_vars(f) == [c]
    assert set(bound_vars(f)) == {x, y, t} and len(bound_vars(f)) == 3
    assert free_vars(f.body) == [x, y, c]
    assert set(all_vars(f)) == {x, y, t, c}


def test_pattern_vars_are_bound():
    lst = define_adt("List", ["A"], lambda List, A: {"Cons": [A, List(A)], "Nil": []})
    h, tl, d = var("h"), var("tl"), var("d")
    m = Match(d, [Clause(PatternConstructor(lst["Cons"], [PatternVar(h), PatternVar(tl)]), op.add(h, h))])
    assert free_vars(m) == [d]
    assert bound_vars(m) == [h, tl]


def test_op_histogram_counts_distinct_calls():
    x = var("x", shape=(2,))
    shared = op.add(x, x)
    e = op.multiply(shared, op.add(shared, const(1.0)))
    assert op_histogram(e) == Counter({"add": 2, "multiply": 1})
    assert count_ops(e) == 3
    mod = IRModule()
    mod["main"] = Function([x], e)
    mod["g"] = Function([x], op.nn.relu(x))
    assert op_histogram(mod) == Counter({"add": 2, "multiply": 1, "nn.relu": 1})


# ---------------------------------------------------------------------------------------------
# scale: 20,000 chained operators, 20 times Python's recursion limit (tests/test_scale.py takes
# 100,000 through every step)

N = 20_000


@pytest.fixture(scope="module")
def long_chain():
    return chain(N)


def test_visit_a_long_chain(long_chain):
    class CountCalls(ExprVisitor):
        def __init__(self):
            super().__init__()
            self.count = 0

        def visit_call(self, call):
            self.count += 1
            super().visit_call(call)

    v = CountCalls()
    v.visit(long_chain)
    assert v.count == N
    assert count_ops(long_chain) == N
    assert op_histogram(long_chain) == Counter({"add": N // 2, "multiply": N // 2})
    assert free_vars(long_chain) == []
    assert len(post_order(long_chain)) == 2 * N + 4  # calls and constants; add, multiply, %x, the function


def test_mutate_a_long_chain(long_chain):
    class AddToSubtract(ExprMutator):
        def visit_call(self, call):
            new = super().visit_call(call)
            if new.op.name == "add":
                return Call(Op.get("subtract"), new.args, new.attrs)
            return new

    out = AddToSubtract().visit(long_chain)
    assert op_histogram(out) == Counter({"subtract": N // 2, "multiply": N // 2})
    # the constants were reused, not copied
    assert out.body.args[1] is long_chain.body.args[1]
    assert ExprMutator().visit(long_chain) is long_chain


def test_evaluate_a_small_chain_against_numpy():
    """chain() computes what its docstring says (checked with a tiny evaluator over post_order)."""
    from relaybench.testing import chain_reference
    f = chain(9)
    x = np.array([0.0, 1.0, -3.0, 10.0], dtype="float32")
    values = {f.params[0]: x}
    for node in post_order(f.body):
        if isinstance(node, Constant):
            values[node] = node.data
        elif isinstance(node, Call):
            a, b = (values[arg] for arg in node.args)
            values[node] = a + b if node.op.name == "add" else a * b
    np.testing.assert_allclose(values[f.body], chain_reference(9, x))
    np.testing.assert_allclose(chain_reference(2, x), (x + 1) * 0.5)
