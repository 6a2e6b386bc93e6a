"""The dataflow pattern language: matching, rewriting to a fixpoint, partitioning."""

import sys

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.ir import (Call, Constant, Function, If, Let, Op, Tuple, TupleGetItem, TensorType,
                           TupleType, const, op_histogram, var)
from relaybench.ir.structural import assert_structural_equal, structural_equal
from relaybench.op.registry import OpPattern
from relaybench.passes.dataflow_pattern import (
    AltPattern, CallPattern, DFPatternCallback, NodeMap, PatternError, RewriteRecord, RewriteTrace,
    dominates, find_match, has_dtype, is_constant, is_expr, is_function, is_if, is_let, is_op, is_tuple,
    is_tuple_get_item, is_var, pattern_text, rewrite, wildcard)
from relaybench.testing import chain
from relaybench.testing import run_infer_type


@pytest.fixture(scope="module")
def chain100k():
    """One 100,000-operator chain shared by the scale tests (programs are immutable)."""
    return chain(100_000)


def run(func, *args):
    mod = rb.IRModule.from_expr(func)
    return rb.create_executor("interpreter", mod=mod).evaluate()(*args)


def conv_program():
    """conv2d -> bias_add -> relu, the usual fusion candidate."""
    data = var("data", shape=(1, 3, 8, 8))
    weight = var("weight", shape=(4, 3, 3, 3))
    bias = var("bias", shape=(4,))
    conv = op.nn.conv2d(data, weight, padding=(1, 1))
    biased = op.nn.bias_add(conv, bias)
    out = op.nn.relu(biased)
    return (data, weight, bias), (conv, biased, out)


def conv_bias_relu_pattern():
    return is_op("nn.relu")(is_op("nn.bias_add")(is_op("nn.conv2d")(wildcard(), wildcard()), wildcard()))


# =============================================================================================
# matching, kind by kind

def test_wildcard_matches_every_kind_of_node():
    x = var("x", shape=(2,))
    for e in (x, const(1.0), op.nn.relu(x), Tuple([x]), TupleGetItem(Tuple([x]), 0)):
        assert wildcard().match(e)


def test_call_pattern_checks_operator_arity_and_arguments():
    a, b = var("a", shape=(2,)), var("b", shape=(2,))
    p = is_op("add")(wildcard(), wildcard())
    assert p.match(op.add(a, b))
    assert not p.match(op.subtract(a, b))
    assert not p.match(a)
    assert not is_op("nn.relu")(wildcard(), wildcard()).match(op.nn.relu(a))     # arity
    assert not is_op("add")(wildcard(), is_constant()).match(op.add(a, b))


def test_call_pattern_without_arguments_matches_any_arguments():
    a, b, c = (var(n, shape=(2,)) for n in "abc")
    p = CallPattern(is_op("concatenate"), None)
    assert p.match(op.concatenate(Tuple([a, b, c])))
    assert pattern_text(p) == "concatenate(...)"
    assert not CallPattern(is_op("add"), None).match(op.concatenate(Tuple([a])))


def test_wildcard_callee_matches_any_operator_and_functions():
    a = var("a", shape=(2,))
    p = wildcard()(wildcard())
    assert p.match(op.nn.relu(a)) and p.match(op.exp(a))
    fn = Function([var("t", shape=(2,))], a)
    assert p.match(Call(fn, [a]))


def test_unknown_operator_is_an_error_naming_close_names():
    with pytest.raises(KeyError, match="nn.relu"):
        is_op("nn.rellu")


def test_one_sub_pattern_stands_for_one_expression():
    a, b = var("a", shape=(2,)), var("b", shape=(2,))
    x = wildcard()
    p = is_op("add")(x, x)
    assert p.match(op.add(a, a))
    assert not p.match(op.add(a, b))


def test_arguments_match_in_the_order_written():
    a = var("a", shape=(2,))
    p = is_op("add")(wildcard(), is_constant())
    assert p.match(op.add(a, const(1.0)))
    assert not p.match(op.add(const(1.0), a))          # no commutative matching, as in TVM
    both = p | is_op("add")(is_constant(), wildcard())
    assert both.match(op.add(const(1.0), a))


def test_var_pattern_with_and_without_a_name():
    a = var("a", shape=(2,))
    assert is_var().match(a)
    assert is_var("a").match(a)
    assert not is_var("b").match(a)
    assert not is_var().match(const(1.0))
    assert not is_var().match(op.nn.relu(a))


def test_constant_pattern():
    assert is_constant().match(const(np.zeros((2, 2), "float32")))
    assert not is_constant().match(var("a", shape=()))


def test_expr_pattern_is_structural():
    a = var("a", shape=(2,))
    e = op.add(a, const(1.0))
    assert is_expr(e).match(e)
    assert is_expr(e).match(op.add(a, const(1.0)))          # a different node, same structure
    assert not is_expr(e).match(op.add(a, const(2.0)))
    assert is_expr(const(3.0)).match(const(3.0))
    assert not is_expr(const(3.0)).match(const(4.0))
    assert is_op("add").match(Op.get("add"))
    assert not is_op("add").match(Op.get("subtract"))


def test_tuple_and_projection_patterns():
    a, b = var("a", shape=(2,)), var("b", shape=(3,))
    t = Tuple([a, b])
    assert is_tuple([wildcard(), wildcard()]).match(t)
    assert is_tuple([is_var("a"), is_var("b")]).match(t)
    assert not is_tuple([is_var("b"), is_var("a")]).match(t)
    assert not is_tuple([wildcard()]).match(t)
    assert is_tuple(None).match(t)
    assert is_tuple_get_item(is_tuple(None), 1).match(TupleGetItem(t, 1))
    assert is_tuple_get_item(wildcard()).match(TupleGetItem(t, 0))
    assert not is_tuple_get_item(wildcard(), 0).match(TupleGetItem(t, 1))
    with pytest.raises(PatternError):
        is_tuple_get_item(wildcard(), -1)


def test_if_let_and_function_patterns():
    c = var("c", "bool")
    a = var("a", shape=(2,))
    cond = If(c, op.nn.relu(a), a)
    assert is_if(is_var("c"), is_op("nn.relu")(wildcard()), wildcard()).match(cond)
    assert not is_if(is_var("c"), wildcard(), is_op("nn.relu")(wildcard())).match(cond)
    t = var("t")
    let = Let(t, op.exp(a), op.add(t, t))
    tv = is_var("t")
    assert is_let(tv, is_op("exp")(wildcard()), is_op("add")(tv, tv)).match(let)
    assert not is_let(tv, is_op("log")(wildcard()), wildcard()).match(let)
    p = var("p", shape=(2,))
    fn = Function([p], op.nn.relu(p))
    pv = is_var()
    assert is_function([pv], is_op("nn.relu")(pv)).match(fn)
    assert not is_function([pv, wildcard()], wildcard()).match(fn)
    assert is_function(None, wildcard()).match(fn)


def test_alternatives():
    a = var("a", shape=(2,))
    p = (is_op("nn.relu") | is_op("sigmoid"))(wildcard())
    assert p.match(op.nn.relu(a)) and p.match(op.sigmoid(a))
    assert not p.match(op.tanh(a))
    assert isinstance(is_op("nn.relu")(a) | is_op("tanh")(a), AltPattern)


def test_alternatives_backtrack_when_a_later_sibling_fails():
    # the first alternative matches relu(a) locally, but then x must also be a: only the
    # second alternative (x under the relu) matches the whole call
    a = var("a", shape=(2,))
    x = wildcard()
    p = is_op("add")(x | is_op("nn.relu")(x), x)
    nm = find_match(p, op.add(op.nn.relu(a), a))
    assert nm is not None
    assert nm[x] == [a]
    assert find_match(p, op.add(a, a))[x] == [a]
    assert find_match(p, op.add(op.nn.relu(a), op.exp(a))) is None


def test_optional():
    data, weight = var("d", shape=(1, 2, 4, 4)), var("w", shape=(2, 2, 1, 1))
    conv = is_op("nn.conv2d")(wildcard(), wildcard())
    p = conv.optional(lambda q: is_op("nn.relu")(q))
    c = op.nn.conv2d(data, weight)
    assert p.match(c)
    assert p.match(op.nn.relu(c))
    assert not p.match(op.sigmoid(c))


def test_attribute_constraints_compare_normalized_values():
    (data, weight, _), (conv, _, _) = conv_program()
    conv_p = is_op("nn.conv2d")(wildcard(), wildcard())
    assert conv_p.has_attr({"padding": [1, 1, 1, 1]}).match(conv)
    assert conv_p.has_attr({"padding": (1, 1)}).match(conv)       # normalized like the op's attrs
    assert conv_p.has_attr(strides=(1, 1)).match(conv)
    assert not conv_p.has_attr({"padding": [0, 0, 0, 0]}).match(conv)
    assert not conv_p.has_attr({"no_such_attr": 1}).match(conv)
    clip = op.clip(data, a_min=0, a_max=6)
    assert is_op("clip")(wildcard()).has_attr({"a_min": 0, "a_max": 6.0}).match(clip)


def test_op_pattern_kind_attribute():
    a = var("a", shape=(1, 2, 4, 4))
    elemwise = wildcard().has_attr({"TOpPattern": OpPattern.ELEMWISE})
    assert elemwise(wildcard()).match(op.nn.relu(a))
    assert not elemwise(wildcard()).match(op.nn.conv2d(a, var("w", shape=(2, 2, 1, 1))))
    # asked of the call itself, the operator's registry attributes answer
    assert wildcard().has_attr({"TOpPattern": int(OpPattern.ELEMWISE)}).match(op.exp(a))


def test_function_attribute_constraint():
    p = var("p", shape=(2,))
    fn = Function([p], p).with_attr("Composite", "identity")
    assert wildcard().has_attr({"Composite": "identity"}).match(fn)
    assert not wildcard().has_attr({"Composite": "other"}).match(fn)
    assert not wildcard().has_attr({"Composite": "identity"}).match(p)


def test_where_constraint():
    a = var("a", shape=(2,))

    def positive_scalar(e):
        return isinstance(e, Constant) and e.data.ndim == 0 and float(e.data) > 0

    p = is_op("add")(wildcard(), is_constant().where(positive_scalar))
    assert p.match(op.add(a, const(2.0)))
    assert not p.match(op.add(a, const(-2.0)))
    assert not p.match(op.add(a, const(np.ones(2, "float32"))))
    assert pattern_text(p) == "add(*, is_constant().where(positive_scalar))"
    with pytest.raises(PatternError):
        wildcard().where(3)


def test_type_dtype_and_shape_constraints():
    a = var("a", shape=(1, 3), dtype="float32")
    b = var("b", shape=(1, 3), dtype="int32")
    assert wildcard().has_type(TensorType((1, 3), "float32")).match(a)
    assert not wildcard().has_type(TensorType((1, 3), "int32")).match(a)
    assert wildcard().has_type(TensorType).match(a)
    assert not wildcard().has_type(TupleType).match(a)
    assert wildcard().has_dtype("float32").match(a)
    assert not wildcard().has_dtype("float32").match(b)
    assert has_dtype("int32").match(b)
    assert wildcard().has_shape((1, 3)).match(a)
    assert not wildcard().has_shape((3, 1)).match(a)
    assert not wildcard().has_shape((1, 3, 1)).match(a)
    assert is_constant().has_shape(()).has_dtype("float32").match(const(2.0))


def test_symbolic_shape_constraint():
    x = var("x", shape=("n", 4))
    y = op.transpose(x)                                # (4, n), typed on demand
    assert wildcard().has_shape(("n", 4)).match(x)
    assert not wildcard().has_shape(("m", 4)).match(x)
    assert is_op("transpose")(wildcard()).has_shape((4, "n")).match(y)
    assert not wildcard().has_shape((4, 4)).match(y)
    assert not wildcard().has_shape((None, 4)).match(x)   # ? matches only ?
    assert wildcard().has_shape((None, 4)).match(var("z", shape=(None, 4)))


def test_type_constraint_types_the_program_on_demand():
    a = var("a", shape=(2, 3))
    e = op.nn.relu(op.add(a, a))
    assert e.type_or_none is None
    assert is_op("nn.relu")(wildcard()).has_shape((2, 3)).match(e)
    assert e.checked_type == TensorType((2, 3))


def test_type_constraint_on_an_untypeable_program_names_the_pattern():
    y = var("y")                                   # no annotation: inference cannot finish
    with pytest.raises(PatternError, match=r"has_dtype\('float32'\)"):
        is_op("nn.relu")(wildcard()).has_dtype("float32").match(op.nn.relu(y))


def test_pattern_text():
    x = wildcard()
    p = is_op("add")(is_op("nn.relu")(x) | is_var("a"), is_constant()).has_dtype("float32")
    assert pattern_text(p) == "add((nn.relu(*) | is_var('a')), is_constant()).has_dtype('float32')"
    assert repr(is_tuple_get_item(is_tuple([x, x]), 1)) == "(*, *).1"
    d = dominates(is_op("nn.conv2d")(x, x), x, is_op("add")(x, x))
    assert str(d) == "dominates(nn.conv2d(*, *), *, add(*, *))"


def test_bad_pattern_arguments_are_errors():
    with pytest.raises(PatternError):
        is_op("add")(3, wildcard())
    with pytest.raises(PatternError):
        wildcard().has_dtype("float31")
    with pytest.raises(PatternError):
        wildcard().has_type("float32")
    with pytest.raises(PatternError):
        wildcard().has_attr(["padding"])


# =============================================================================================
# dominator patterns

def _elemwise():
    return wildcard().has_attr({"TOpPattern": OpPattern.ELEMWISE})(wildcard())


def diamond():
    """conv2d -> relu -> relu, conv2d -> leaky_relu, joined by an add."""
    data = var("data", shape=(1, 3, 8, 8))
    weight = var("weight", shape=(4, 3, 3, 3))
    conv = op.nn.conv2d(data, weight, padding=(1, 1))
    r1 = op.nn.relu(conv)
    r2 = op.nn.relu(r1)
    leaky = op.nn.leaky_relu(conv, alpha=0.0)
    out = op.add(r2, leaky)
    return (data, weight), (conv, r1, r2, leaky, out)


def diamond_pattern():
    parent = is_op("nn.conv2d")(wildcard(), wildcard())
    path = _elemwise()
    child = is_op("add")(wildcard(), wildcard())
    return dominates(parent, path, child), parent, path, child


def test_dominator_matches_a_diamond_after_a_conv():
    (_, _), (conv, r1, r2, leaky, out) = diamond()
    dom, parent, path, child = diamond_pattern()
    nm = find_match(dom, out)
    assert nm is not None
    assert nm[parent] == [conv]
    assert nm[child] == [out]
    assert set(nm[path]) == {r1, r2, leaky} and len(nm[path]) == 3
    assert not dom.match(r2)          # the child pattern does not match a relu


def test_dominator_via_the_method_form():
    (_, _), (_, _, _, _, out) = diamond()
    conv = is_op("nn.conv2d")(wildcard(), wildcard())
    p = is_op("add")(wildcard(), wildcard()).dominates(conv, _elemwise())
    assert p.match(out)


def test_dominator_rejects_a_path_node_the_path_pattern_refuses():
    data = var("data", shape=(1, 3, 8, 8))
    weight = var("weight", shape=(4, 3, 3, 3))
    conv = op.nn.conv2d(data, weight, padding=(1, 1))
    out = op.add(op.nn.relu(conv), op.nn.softmax(conv))        # softmax is not elementwise
    dom, *_ = diamond_pattern()
    assert not dom.match(out)


def test_dominator_rejects_an_input_that_bypasses_the_parent():
    data = var("data", shape=(1, 3, 8, 8))
    weight = var("weight", shape=(4, 3, 3, 3))
    conv = op.nn.conv2d(data, weight, padding=(1, 1))
    other = var("other", shape=(1, 4, 8, 8))
    out = op.add(op.nn.relu(conv), op.nn.relu(other))           # one branch never reaches the conv
    dom, *_ = diamond_pattern()
    assert not dom.match(out)


def test_dominator_rejects_a_parent_used_outside_the_child():
    (_, _), (conv, _, _, _, out) = diamond()
    dom, *_ = diamond_pattern()

    class Tag(DFPatternCallback):
        def __init__(self):
            super().__init__()
            self.pattern = dom

        def callback(self, pre, post, node_map):
            return op.negative(post)

    escaping = Tuple([out, conv])                 # the conv flows out without passing the add
    assert rewrite(Tag(), escaping) is escaping
    contained = Tuple([out])
    assert rewrite(Tag(), contained) is not contained


def test_dominator_walks_100k_nodes_without_recursion(chain100k):
    f = chain100k
    p = dominates(is_var("x"), wildcard(), is_op("multiply")(wildcard(), wildcard()))
    assert p.match(f.body)
    assert not dominates(is_var("y"), is_op("add")(wildcard(), wildcard()), wildcard()).match(f.body)


# =============================================================================================
# rewriting

class NegateNegate(DFPatternCallback):
    def __init__(self):
        super().__init__()
        self.x = wildcard()
        self.pattern = is_op("negative")(is_op("negative")(self.x))

    def callback(self, pre, post, node_map):
        return node_map[self.x][0]


class FoldAddConstants(DFPatternCallback):
    """add(add(x, c1), c2) -> add(x, c1 + c2)."""

    def __init__(self):
        super().__init__()
        self.x, self.c1, self.c2 = wildcard(), is_constant(), is_constant()
        self.pattern = is_op("add")(is_op("add")(self.x, self.c1), self.c2)

    def callback(self, pre, post, node_map):
        c = node_map[self.c1][0].data + node_map[self.c2][0].data
        return op.add(node_map[self.x][0], const(c))


def test_rewrite_returns_the_same_object_when_nothing_fires():
    a = var("a", shape=(2,))
    e = op.exp(op.negative(a))
    assert rewrite(NegateNegate(), e) is e
    assert rewrite([NegateNegate(), FoldAddConstants()], e) is e


def test_rewrite_runs_to_a_fixpoint():
    a = var("a", shape=(3,))
    e = a
    for i in range(1, 11):
        e = op.add(e, const(float(i)))
    trace = RewriteTrace()
    out = rewrite(FoldAddConstants(), e, trace=trace)
    assert isinstance(out, Call) and out.args[0] is a
    np.testing.assert_allclose(out.args[1].data, 55.0)
    assert max(r.round for r in trace) >= 2          # one round cannot fold a chain of ten
    x = np.array([1.0, 2.0, 3.0], "float32")
    np.testing.assert_allclose(run(Function([a], out), x), x + 55)


def test_rules_enable_each_other_across_rounds():
    a = var("a", shape=(2,))
    e = op.negative(op.negative(op.add(op.add(op.negative(op.negative(a)), const(1.0)), const(2.0))))
    out = rewrite([FoldAddConstants(), NegateNegate()], e)
    assert_structural_equal(run_infer_type(out), run_infer_type(op.add(a, const(3.0))), map_free_vars=True)


def test_node_map_has_an_entry_for_every_sub_pattern():
    a = var("a", shape=(2,))
    one = const(1.0)
    e = op.exp(op.add(a, one))
    x, c, add = wildcard(), is_constant(), is_op("add")
    add_call = add(x, c)
    pattern = is_op("exp")(add_call)
    got = {}

    class Record(DFPatternCallback):
        def __init__(self):
            super().__init__()
            self.pattern = pattern

        def callback(self, pre, post, node_map):
            got["map"], got["pre"] = node_map, pre
            return post

    rewrite(Record(), e)
    nm = got["map"]
    assert isinstance(nm, NodeMap)
    assert got["pre"] is e
    assert set(nm) == {pattern, add_call, add, x, c, pattern.op}
    assert nm[pattern] == [e]
    assert nm[add_call] == [e.args[0]]
    assert nm[add] == [Op.get("add")]
    assert nm[x] == [a] and nm[c] == [one]


def test_node_map_entries_are_rewritten_versions_with_the_originals_alongside():
    a = var("a", shape=(2,))
    inner = op.negative(op.negative(a))
    e = op.exp(op.add(inner, const(1.0)))
    x = wildcard()
    got = {}

    class FoldThenRecord(DFPatternCallback):
        """Two matches in one traversal: the lower one is rewritten before the upper one's
        callback runs, so the upper one sees its input rewritten."""

        def __init__(self):
            super().__init__()
            self.pattern = is_op("exp")(is_op("add")(x, is_constant())) | NegateNegate().pattern

        def callback(self, pre, post, node_map):
            if pre.op.name == "negative":
                return post.args[0].args[0]
            if not got:                  # the first round's call (later rounds see it folded)
                got["post"], got["pre"], got["post_node"] = node_map[x], node_map.pre[x], post
            return post

    out = rewrite(FoldThenRecord(), e)
    assert got["post"] == [a]
    assert got["pre"] == [inner]
    assert got["post_node"].args[0].args[0] is a
    assert_structural_equal(run_infer_type(out), run_infer_type(op.exp(op.add(a, const(1.0)))), map_free_vars=True)


def test_trace_names_the_rule_and_the_node():
    a = var("a", shape=(2,))
    n2 = op.negative(op.negative(a))
    e = op.exp(n2)
    trace = RewriteTrace()
    out = rewrite(NegateNegate(), e, trace=trace)
    assert len(trace) == 1
    rec = trace[0]
    assert isinstance(rec, RewriteRecord)
    assert rec.rule == "NegateNegate" and rec.round == 0
    assert rec.before is n2 and rec.after is a
    assert out.args[0] is a
    assert str(rec) == "round 0  NegateNegate  negative(negative(...)) -> %a"
    assert trace.counts() == {"NegateNegate": 1}
    assert "NegateNegate" in str(trace.table())
    plain = []
    rewrite(NegateNegate(), e, trace=plain)          # any list will do
    assert [r.rule for r in plain] == ["NegateNegate"]


def test_rule_name_can_be_set():
    class Named(NegateNegate):
        name = "double-negation"

    trace = RewriteTrace()
    rewrite(Named(), op.negative(op.negative(var("a", shape=(1,)))), trace=trace)
    assert trace[0].rule == "double-negation"


def test_a_match_whose_interior_is_used_elsewhere_is_not_rewritten():
    a = var("a", shape=(2,))
    n1 = op.negative(a)
    shared = Tuple([op.negative(n1), n1])            # n1 is interior to the match and used again
    assert rewrite(NegateNegate(), shared) is shared
    alone = Tuple([op.negative(n1), a])
    assert_structural_equal(run_infer_type(rewrite(NegateNegate(), alone)), run_infer_type(Tuple([a, a])), map_free_vars=True)


def test_matches_do_not_overlap_and_are_taken_from_the_output():
    a = var("a", shape=(2,))
    e = op.negative(op.negative(op.negative(a)))
    trace = RewriteTrace()
    out = rewrite(NegateNegate(), e, trace=trace)
    # the outer two negations are taken first, so the innermost one stays
    assert_structural_equal(run_infer_type(out), run_infer_type(op.negative(a)), map_free_vars=True)
    assert len(trace) == 1 and trace[0].before is e


def test_rewrite_once_runs_a_single_round():
    class Wrap(DFPatternCallback):
        def __init__(self):
            super().__init__(rewrite_once=True)
            self.pattern = is_op("exp")(wildcard())

        def callback(self, pre, post, node_map):
            return op.exp(op.exp(post.args[0]))      # would never reach a fixpoint

    a = var("a", shape=(2,))
    out = rewrite(Wrap(), op.exp(a))
    assert_structural_equal(run_infer_type(out), run_infer_type(op.exp(op.exp(a))), map_free_vars=True)


def test_a_callback_must_return_an_expression():
    class Bad(DFPatternCallback):
        def __init__(self):
            super().__init__()
            self.pattern = is_op("exp")(wildcard())

        def callback(self, pre, post, node_map):
            return 3

    with pytest.raises(PatternError, match="Bad returned int"):
        rewrite(Bad(), op.exp(var("a", shape=(2,))))


def test_a_rule_without_pattern_is_an_error():
    class Empty(DFPatternCallback):
        pass

    with pytest.raises(PatternError, match="Empty has no pattern"):
        rewrite(Empty(), var("a", shape=(2,)))
    with pytest.raises(PatternError):
        rewrite([object()], var("a", shape=(2,)))


def test_rewrite_keeps_the_meaning():
    a = var("a", shape=(3,))
    e = op.negative(op.negative(op.add(op.add(op.add(a, const(1.0)), const(2.0)), const(3.0))))
    out = rewrite([FoldAddConstants(), NegateNegate()], e)
    x = np.array([0.5, -1.0, 2.0], "float32")
    np.testing.assert_allclose(run(Function([a], out), x), run(Function([a], e), x))
    assert op_histogram(out) == {"add": 1}


def test_primitive_functions_are_left_alone():
    p = var("p", shape=(2,))
    prim = Function([p], op.negative(op.negative(p))).with_attr("Primitive", 1)
    a = var("a", shape=(2,))
    e = Call(prim, [op.negative(op.negative(a))])
    out = rewrite(NegateNegate(), e)
    assert out.op is prim                      # not entered
    assert out.args[0] is a


class AddToSubtract(DFPatternCallback):
    """add(x, c) -> subtract(x, -c), where x matches ``operand``."""

    def __init__(self, operand=None):
        super().__init__()
        self.x, self.c = operand or wildcard(), is_constant()
        self.pattern = is_op("add")(self.x, self.c)

    def callback(self, pre, post, node_map):
        return op.subtract(node_map[self.x][0], const(-node_map[self.c][0].data))


def _bottom(e):
    """The deepest call of a chain (walked with a loop)."""
    while isinstance(e, Call) and isinstance(e.args[0], Call):
        e = e.args[0]
    return e


def test_rewrite_100k_chain_without_recursion(chain100k):
    assert sys.getrecursionlimit() < 20_000
    f = chain100k
    x = f.params[0]
    trace = RewriteTrace()
    # every add is a candidate; only the deepest one (on %x) matches, so the whole chain is rebuilt
    out = rewrite(AddToSubtract(is_var("x")), f, trace=trace)
    assert len(trace) == 1
    assert op_histogram(out) == {"add": 49_999, "subtract": 1, "multiply": 50_000}
    bottom = _bottom(out.body)
    assert bottom.op.name == "subtract" and bottom.args[0] is x
    np.testing.assert_allclose(bottom.args[1].data, -1.0)


def test_rewrite_everywhere_on_a_chain():
    f = chain(6)
    trace = RewriteTrace()
    out = rewrite(AddToSubtract(), f, trace=trace)
    assert len(trace) == 3
    x = out.params[0]
    expected = x
    for i in range(6):
        expected = op.subtract(expected, const(-1.0)) if i % 2 == 0 else op.multiply(expected, const(0.5))
    assert_structural_equal(run_infer_type(out), run_infer_type(Function([x], expected)), map_free_vars=True)
    v = np.linspace(-1, 1, 4).astype("float32")
    np.testing.assert_allclose(run(out, v), run(f, v))


# =============================================================================================
# partitioning

def test_partition_wraps_conv_bias_relu_into_a_function():
    (data, weight, bias), (_, _, out) = conv_program()
    part = conv_bias_relu_pattern().partition(out, attrs={"Composite": "conv_bias_relu"})

    p0 = var("FunctionVar_0_0", shape=(1, 3, 8, 8))
    p1 = var("FunctionVar_0_1", shape=(4, 3, 3, 3))
    p2 = var("FunctionVar_0_2", shape=(4,))
    body = op.nn.relu(op.nn.bias_add(op.nn.conv2d(p0, p1, padding=(1, 1)), p2))
    fn = Function([p0, p1, p2], body, attrs={"Composite": "conv_bias_relu",
                                             "PartitionedFromPattern": "nn.conv2d_nn.bias_add_nn.relu_"})
    expected = Call(fn, [data, weight, bias])
    assert_structural_equal(run_infer_type(part), run_infer_type(expected), map_free_vars=True)

    # the partitioned program computes the same
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(v.type_annotation.shape).astype("float32") for v in (data, weight, bias)]
    np.testing.assert_allclose(run(Function([data, weight, bias], part), *args),
                               run(Function([data, weight, bias], out), *args), rtol=1e-5, atol=1e-6)


def test_partition_refuses_a_match_whose_interior_is_used_outside():
    (data, weight, bias), (conv, biased, out) = conv_program()
    both = Tuple([out, biased])                       # bias_add's result escapes the match
    assert conv_bias_relu_pattern().partition(both) is both
    # the smaller pattern that ends at the escaping node is fine
    small = is_op("nn.bias_add")(is_op("nn.conv2d")(wildcard(), wildcard()), wildcard())
    got = small.partition(both)
    assert isinstance(got.fields[1], Call) and isinstance(got.fields[1].op, Function)
    assert got.fields[0].args[0] is got.fields[1]


def test_partition_check_can_refuse():
    (_, _, _), (_, _, out) = conv_program()
    p = conv_bias_relu_pattern()
    assert p.partition(out, check=lambda e: False) is out
    assert p.partition(out, check=lambda e: e.op.name == "nn.relu") is not out


def test_partition_numbers_groups_from_the_output_and_names_their_parameters():
    a = var("a", shape=(2,))
    first = op.exp(op.negative(a))
    second = op.exp(op.negative(first))
    part = is_op("exp")(is_op("negative")(wildcard())).partition(second)
    assert isinstance(part, Call) and isinstance(part.op, Function)
    outer = part.op
    inner_call = part.args[0]
    assert [p.name_hint for p in outer.params] == ["FunctionVar_0_0"]
    assert [p.name_hint for p in inner_call.op.params] == ["FunctionVar_1_0"]
    assert inner_call.args[0] is a
    assert outer.attrs["PartitionedFromPattern"] == "negative_exp_"


def test_partition_embeds_named_constants_and_passes_wildcard_constants():
    a = var("a", shape=(2,))
    e = op.multiply(op.add(a, const(1.0)), const(2.0))
    named = is_op("multiply")(is_op("add")(wildcard(), is_constant()), wildcard())
    part = named.partition(e)
    fn = part.op
    assert len(fn.params) == 2                              # a and the 2f matched by a wildcard
    assert isinstance(part.args[1], Constant) and float(part.args[1].data) == 2.0
    assert isinstance(fn.body.args[0].args[1], Constant)   # 1f stays inside


def test_partition_leaves_partitioned_functions_alone():
    (_, _, _), (_, _, out) = conv_program()
    p = conv_bias_relu_pattern()
    once = p.partition(out)
    assert p.partition(once) is once


def test_partition_of_a_dominator_pattern():
    (data, weight), (_, _, _, _, out) = diamond()
    dom, *_ = diamond_pattern()
    part = dom.partition(out)
    assert isinstance(part.op, Function)
    assert part.args == (data, weight)
    assert part.op.attrs["PartitionedFromPattern"] == "nn.conv2d_nn.relu_nn.relu_nn.leaky_relu_add_"
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(v.type_annotation.shape).astype("float32") for v in (data, weight)]
    np.testing.assert_allclose(run(Function([data, weight], part), *args),
                               run(Function([data, weight], out), *args), rtol=1e-5, atol=1e-6)


def test_partition_100k_chain_without_recursion(chain100k):
    f = chain100k
    x = f.params[0]
    first_pair = is_op("multiply")(is_op("add")(is_var("x"), is_constant()), is_constant())
    part = first_pair.partition(f.body)
    bottom = _bottom(part)
    assert isinstance(bottom.op, Function) and bottom.args == (x,)
    assert bottom.op.attrs["PartitionedFromPattern"] == "add_multiply_"
    assert op_histogram(part) == {"add": 50_000, "multiply": 50_000}

    pair = is_op("multiply")(is_op("add")(wildcard(), is_constant()), is_constant())
    small = chain(6)
    small_part = Function(small.params, pair.partition(small.body))
    assert op_histogram(small_part.body) == {"add": 3, "multiply": 3}
    v = np.linspace(-1, 1, 4).astype("float32")
    np.testing.assert_allclose(run(small_part, v), run(small, v))


def test_docstring_examples():
    import doctest
    from relaybench.passes import dataflow_pattern
    result = doctest.testmod(dataflow_pattern)
    assert result.attempted > 10 and result.failed == 0
