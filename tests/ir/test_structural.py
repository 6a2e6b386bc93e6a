"""Structural equality and hashing.

Conventions checked here (see relaybench/ir/structural.py):

* bound variables and type parameters are equal when bound at corresponding places;
* free variables are equal only when identical, unless ``map_free_vars=True`` (then a bijection);
* sharing is structure, as in TVM's graph equality: ``%0 = f(%x); g(%0, %0)`` is NOT equal to
  ``g(f(%x), f(%x))``; constants, ops, globals and constructors are values, shared or not;
* ``Call.type_args``, checked types and spans are ignored;
* ``structural_hash`` agrees: equal implies the same hash.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relaybench import op
from relaybench.ir import (Attrs, Call, Clause, Function, GlobalVar, If, IRModule, Let, Match,
                           PatternConstructor, PatternTuple, PatternVar, PatternWildcard, RefCreate, RefRead,
                           RefWrite, ScopeBuilder, Span, Tuple, TupleGetItem, const, define_adt, var)
from relaybench.ir.structural import (assert_structural_equal, first_difference, structural_equal,
                                      structural_hash)
from relaybench.ir.symbolic import SymVar
from relaybench.ir.types import (FuncType, GlobalTypeVar, IncompleteType, RefType, TensorType, TupleType,
                                 TypeCall, TypeRelation, TypeVar, scalar_type)
from relaybench.testing import chain

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def f32(*shape):
    return TensorType(shape, "float32")


def equal(a, b, map_free_vars=False):
    """structural_equal, checked to be symmetric and, when true, matched by the hashes."""
    result = structural_equal(a, b, map_free_vars)
    assert structural_equal(b, a, map_free_vars) == result, "structural_equal is not symmetric here"
    if result:
        assert structural_hash(a, map_free_vars) == structural_hash(b, map_free_vars), "equal but hashes differ"
    return result


def make_list():
    return define_adt("List", ["A"], lambda List, A: {"Cons": [A, List(A)], "Nil": []})


# ---------------------------------------------------------------------------------------------
# bound variables

def test_alpha_equivalent_functions():
    x, y = var("x", shape=(2,)), var("y", shape=(2,))
    a, b = var("a", shape=(2,)), var("b", shape=(2,))
    assert equal(Function([x, y], op.subtract(x, y)), Function([a, b], op.subtract(a, b)))
    assert not equal(Function([x, y], op.subtract(x, y)), Function([a, b], op.subtract(b, a)))


def test_swapped_parameters_are_not_equal_even_with_the_same_var_objects():
    x, y = var("x", shape=(2,)), var("y", shape=(2,))
    body = op.subtract(x, y)
    assert not equal(Function([x, y], body), Function([y, x], body))
    assert not equal(Function([x, y], body), Function([y, x], body), map_free_vars=True)


def test_parameter_annotations_must_match():
    x, y = var("x", shape=(2,)), var("y", shape=(3,))
    assert not equal(Function([x], x), Function([y], y))
    u, w = var("u"), var("w")
    assert equal(Function([u], u), Function([w], w))
    assert not equal(Function([u], u), Function([x], x))


def test_function_fields():
    x, y = var("x", shape=(2,)), var("y", shape=(2,))
    base = Function([x], x)
    assert not equal(base, Function([y], y, ret_type=f32(2)))
    assert equal(Function([x], x, f32(2)), Function([y], y, f32(2)))
    assert not equal(Function([x], x, f32(2)), Function([y], y, f32(3)))
    assert not equal(base, Function([y], y, attrs={"Primitive": 1}))
    assert equal(Function([x], x, attrs={"Primitive": 1}), Function([y], y, attrs={"Primitive": 1}))
    assert not equal(Function([x], x), Function([x, y], x))


def test_alpha_equivalent_lets():
    x = var("x", shape=())
    t, u = var("t"), var("u")
    assert equal(Let(t, op.add(x, x), op.multiply(t, t)), Let(u, op.add(x, x), op.multiply(u, u)))
    assert not equal(Let(t, op.add(x, x), op.multiply(t, t)), Let(u, op.add(x, x), op.multiply(u, x)))
    assert not equal(Let(t, x, t), Let(var("v", shape=()), x, x))
    # the let variable's annotation counts
    assert not equal(Let(var("p", shape=(1,)), x, x), Let(var("q", shape=(2,)), x, x))


def test_recursive_let_binds_before_its_value():
    fx, gx = var("fx", shape=()), var("gx", shape=())
    f, g = var("f"), var("g")
    lhs = Let(f, Function([fx], Call(f, [fx])), f)
    rhs = Let(g, Function([gx], Call(g, [gx])), g)
    assert equal(lhs, rhs)


def test_scope_builder_programs_compare_structurally():
    def build(name):
        x = var(name, shape=())
        c = var("c" + name, "bool")
        sb = ScopeBuilder()
        t = sb.let("t", op.add(x, x))
        with sb.if_scope(c):
            sb.ret(op.multiply(t, t))
        with sb.else_scope():
            sb.ret(t)
        return Function([x, c], sb.get())

    assert equal(build("x"), build("y"))


def test_match_with_pattern_vars():
    lst = make_list()
    d = var("d")

    def prog(h, t, swap=False):
        first = Clause(PatternConstructor(lst["Cons"], [PatternVar(h), PatternVar(t)]), t if swap else h)
        return Match(d, [first, Clause(PatternWildcard(), const(0.0))])

    h1, t1, h2, t2 = var("h"), var("t"), var("a"), var("b")
    assert equal(prog(h1, t1), prog(h2, t2))
    assert not equal(prog(h1, t1), prog(h2, t2, swap=True))
    # a different constructor, a partial match, fewer clauses
    other = Match(d, [Clause(PatternConstructor(lst["Nil"]), const(1.0)), Clause(PatternWildcard(), const(0.0))])
    assert not equal(prog(h1, t1), other)
    partial = Match(d, prog(h1, t1).clauses, complete=False)
    assert not equal(prog(h1, t1), partial)
    assert not equal(prog(h1, t1), Match(d, prog(h2, t2).clauses[:1]))


def test_match_constructors_from_equal_adts_compare_by_name():
    d = var("d")
    a, b = make_list(), make_list()  # two separate definitions, same names and tags
    h1, h2 = var("h"), var("g")
    ma = Match(d, [Clause(PatternConstructor(a["Cons"], [PatternVar(h1), PatternWildcard()]), h1)])
    mb = Match(d, [Clause(PatternConstructor(b["Cons"], [PatternVar(h2), PatternWildcard()]), h2)])
    assert equal(ma, mb)
    assert equal(a["Cons"](const(1.0), a["Nil"]()), b["Cons"](const(1.0), b["Nil"]()))
    other = define_adt("Seq", ["A"], lambda Seq, A: {"Cons": [A, Seq(A)], "Nil": []})
    assert not equal(a["Cons"], other["Cons"])  # same name and tag, another ADT
    assert not equal(a["Cons"], a["Nil"])


def test_tuple_patterns():
    p, q = var("p"), var("q")
    assert equal(PatternTuple([PatternVar(p), PatternWildcard()]), PatternTuple([PatternVar(q), PatternWildcard()]))
    assert not equal(PatternTuple([PatternVar(p)]), PatternTuple([PatternVar(q), PatternWildcard()]))
    assert not equal(PatternTuple([PatternWildcard()]), PatternTuple([PatternVar(q)]))


# ---------------------------------------------------------------------------------------------
# free variables

def test_free_vars_equal_only_when_identical():
    x, y = var("x", shape=(2,)), var("x", shape=(2,))
    assert equal(op.add(x, const(1.0)), op.add(x, const(1.0)))
    assert not equal(op.add(x, const(1.0)), op.add(y, const(1.0)))


def test_map_free_vars_pairs_them_on_first_meeting():
    x, y, z, w = (var(n, shape=(2,)) for n in "xyzw")
    assert equal(op.add(x, y), op.add(z, w), map_free_vars=True)
    assert equal(op.add(x, x), op.add(z, z), map_free_vars=True)
    # the pairing is a bijection
    assert not equal(op.add(x, x), op.add(z, w), map_free_vars=True)
    assert not equal(op.add(x, y), op.add(z, z), map_free_vars=True)
    # (x, y) ~ (y, x) is the bijection x->y, y->x: equal with mapping, not without
    assert equal(op.add(x, y), op.add(y, x), map_free_vars=True)
    assert not equal(op.add(x, y), op.add(y, x))


def test_mapped_free_vars_must_have_equal_annotations():
    x, z = var("x", shape=(2,)), var("z", shape=(3,))
    assert not equal(op.add(x, x), op.add(z, z), map_free_vars=True)


def test_free_vars_inside_functions():
    p, q = var("p", shape=()), var("q", shape=())
    free1, free2 = var("k", shape=()), var("k", shape=())
    lhs, rhs = Function([p], op.add(p, free1)), Function([q], op.add(q, free2))
    assert not equal(lhs, rhs)
    assert equal(lhs, rhs, map_free_vars=True)


def test_bound_var_does_not_match_a_free_var():
    x, y = var("x", shape=()), var("y", shape=())
    assert not equal(Function([x], x), Function([y], x))
    assert not equal(Function([x], x), Function([y], x), map_free_vars=True)


# ---------------------------------------------------------------------------------------------
# sharing (graph equality)

def test_shared_subexpression_is_not_equal_to_two_copies():
    """TVM's convention: %0 = f(x); g(%0, %0) computes f once; g(f(x), f(x)) twice."""
    x = var("x", shape=(2,))
    shared = op.nn.relu(x)
    dag = op.add(shared, shared)
    tree = op.add(op.nn.relu(x), op.nn.relu(x))
    assert not equal(dag, tree)
    assert not equal(tree, dag)
    assert not equal(Function([x], dag), Function([x], tree))


def test_same_sharing_on_both_sides_is_equal():
    def dag(v):
        s = op.nn.relu(v)
        return Function([v], op.add(s, op.multiply(s, s)))

    def tree(v):
        return Function([v], op.add(op.nn.relu(v), op.multiply(op.nn.relu(v), op.nn.relu(v))))

    assert equal(dag(var("x", shape=(2,))), dag(var("y", shape=(2,))))
    assert equal(tree(var("x", shape=(2,))), tree(var("y", shape=(2,))))
    assert not equal(dag(var("x", shape=(2,))), tree(var("y", shape=(2,))))


def test_sharing_must_correspond_one_to_one():
    x = var("x", shape=(2,))
    a, b = op.nn.relu(x), op.nn.relu(x)
    # lhs: (a, a, b); rhs: (a, b, b): the same nodes, shared differently
    assert not equal(Tuple([a, a, b]), Tuple([a, b, b]))
    assert equal(Tuple([a, a, b]), Tuple([b, b, a]))


def test_constants_ops_and_globals_may_be_shared_or_not():
    x = var("x", shape=(2,))
    one = const(1.0)
    assert equal(op.add(op.add(x, one), one), op.add(op.add(x, const(1.0)), const(1.0)))
    gv = GlobalVar("f")
    assert equal(Tuple([Call(gv, []), gv]), Tuple([Call(GlobalVar("f"), []), GlobalVar("f")]))


def test_sharing_difference_is_reported():
    x = var("x", shape=(2,))
    s = op.nn.relu(x)
    diff = first_difference(Function([x], op.add(s, s)),
                            Function([x], op.add(op.nn.relu(x), op.nn.relu(x))))
    assert diff.path == "body.args[1]"
    assert "sharing differs" in diff.reason


# ---------------------------------------------------------------------------------------------
# types

def test_type_params_are_alpha_renamed():
    a, b = TypeVar("A"), TypeVar("B")
    assert equal(FuncType([a], a, [a]), FuncType([b], b, [b]))
    assert equal(FuncType([a, b], a, [a, b]), FuncType([b, a], b, [b, a]))
    assert not equal(FuncType([a, b], a, [a, b]), FuncType([a, b], b, [a, b]))
    assert not equal(FuncType([a], a, [a]), FuncType([a], a, []))


def test_type_params_of_different_kinds_differ():
    from relaybench.ir.types import TypeKind
    a, s = TypeVar("A"), TypeVar("S", TypeKind.ShapeVar)
    b = TypeVar("B")
    assert not equal(FuncType([a], a, [a]), FuncType([s], s, [s]))
    assert not equal(TupleType([a]), TupleType([s]), map_free_vars=True)
    assert equal(TupleType([a]), TupleType([b]), map_free_vars=True)
    diff = first_difference(FuncType([a], a, [a]), FuncType([s], s, [s]))
    assert diff.path == "type_params[0]" and "different kinds: Type vs ShapeVar" in diff.reason


def test_function_type_params_bind_annotations():
    a, b = TypeVar("A"), TypeVar("B")
    x, y = var("x", a), var("y", b)
    assert equal(Function([x], x, a, [a]), Function([y], y, b, [b]))
    assert not equal(Function([x], x, a, [a]), Function([y], y, a, [b]))


def test_free_type_vars():
    a, b = TypeVar("A"), TypeVar("A")
    assert equal(TupleType([a]), TupleType([a]))
    assert not equal(TupleType([a]), TupleType([b]))
    assert equal(TupleType([a, a]), TupleType([b, b]), map_free_vars=True)
    assert not equal(TupleType([a, a]), TupleType([b, TypeVar("C")]), map_free_vars=True)


def test_structural_types():
    n = SymVar("n")
    assert equal(TensorType((n + n, 3)), TensorType((2 * n, 3)))
    assert not equal(TensorType((n,)), TensorType((SymVar("m"),)))
    assert not equal(f32(2, 3), TensorType((2, 3), "float16"))
    assert not equal(f32(2, 3), f32(2, 3, 1))
    assert equal(TupleType([f32(1), scalar_type("bool")]), TupleType([f32(1), scalar_type("bool")]))
    assert not equal(TupleType([f32(1)]), TupleType([f32(1), f32(1)]))
    assert equal(RefType(f32(1)), RefType(f32(1)))
    assert not equal(RefType(f32(1)), f32(1))
    assert equal(IncompleteType(), IncompleteType())
    assert equal(GlobalTypeVar("List"), GlobalTypeVar("List"))
    assert not equal(GlobalTypeVar("List"), GlobalTypeVar("Tree"))
    assert equal(TypeCall(GlobalTypeVar("List"), [f32(1)]), TypeCall(GlobalTypeVar("List"), [f32(1)]))
    assert not equal(TypeCall(GlobalTypeVar("List"), [f32(1)]), TypeCall(GlobalTypeVar("List"), [f32(2)]))


def rel_a(types, attrs):
    return None


def rel_b(types, attrs):
    return None


def test_type_relations():
    a = TypeVar("A")
    mk = lambda rel, attrs=None: FuncType([a], a, [a], [TypeRelation(rel, [a, a], 1, attrs)])  # noqa: E731
    assert equal(mk(rel_a), mk(rel_a))
    assert not equal(mk(rel_a), mk(rel_b))
    assert equal(mk(rel_a, Attrs(axis=1)), mk(rel_a, Attrs(axis=1)))
    assert not equal(mk(rel_a, Attrs(axis=1)), mk(rel_a, Attrs(axis=2)))


def test_type_data():
    assert equal(make_list(), make_list())
    tree = define_adt("Tree", ["A"], lambda Tree, A: {"Rose": [A, Tree(A)]})
    assert not equal(make_list(), tree)
    renamed = define_adt("List", ["A"], lambda List, A: {"Cons": [A, List(A)], "Empty": []})
    assert not equal(make_list(), renamed)
    other_field = define_adt("List", ["A"], lambda List, A: {"Cons": [List(A), A], "Nil": []})
    assert not equal(make_list(), other_field)
    b_named = define_adt("List", ["B"], lambda List, B: {"Cons": [B, List(B)], "Nil": []})
    assert equal(make_list(), b_named)  # type variables are alpha-renamed


def test_var_annotations_with_types_of_every_kind():
    lst = make_list()
    t = TupleType([TypeCall(lst.header, [f32(2)]), RefType(scalar_type("int32"))])
    assert equal(Function([var("x", t)], const(1.0)), Function([var("y", t)], const(1.0)))


# ---------------------------------------------------------------------------------------------
# constants, attrs, ignored fields

def test_constants_compare_by_dtype_shape_and_bytes():
    assert equal(const(1.0), const(1.0))
    assert equal(const(np.arange(6).reshape(2, 3)), const(np.arange(6).reshape(2, 3)))
    assert not equal(const(1.0), const(2.0))
    assert not equal(const(1.0), const(1.0, "float64"))
    assert not equal(const([1.0]), const(1.0))
    assert not equal(const(np.zeros((2, 3))), const(np.zeros((3, 2))))
    assert not equal(const(0.0), const(-0.0))  # different bytes
    assert equal(const(np.float32("nan")), const(np.float32("nan")))  # same bytes
    big = np.random.default_rng(0).standard_normal((64, 64)).astype("float32")
    changed = big.copy()
    changed[63, 63] += 1
    assert equal(const(big), const(big.copy()))
    assert not equal(const(big), const(changed))


def test_call_attrs_compare_by_value():
    x = var("x", shape=(2,))
    f = GlobalVar("f")
    assert equal(Call(f, [x], {"axis": 1, "keep": True}), Call(f, [x], {"keep": True, "axis": 1}))
    assert equal(Call(f, [x], {"pad": [1, 1]}), Call(f, [x], {"pad": (1, 1)}))
    assert not equal(Call(f, [x], {"axis": 1}), Call(f, [x], {"axis": 2}))
    assert not equal(Call(f, [x], {"axis": 1}), Call(f, [x], {"axes": 1}))
    assert not equal(Call(f, [x], {"axis": 1}), Call(f, [x]))
    assert equal(Call(f, [x], {"w": np.ones(3)}), Call(f, [x], {"w": np.ones(3)}))
    assert not equal(Call(f, [x], {"w": np.ones(3)}), Call(f, [x], {"w": np.zeros(3)}))
    assert not equal(Call(f, [x], {"mode": "a"}), Call(f, [x], {"mode": "b"}))


def test_attrs_standalone():
    assert equal(Attrs(a=1, b=(1, 2)), Attrs(b=(1, 2), a=1))
    assert not equal(Attrs(a=1), Attrs(a=1, b=2))
    assert equal(Attrs(), Attrs())


def test_type_args_checked_types_and_spans_are_ignored():
    x = var("x", shape=(2,))
    f = GlobalVar("f")
    a = Call(f, [x], type_args=[f32(2)])
    b = Call(f, [x])
    assert equal(a, b)
    a.set_checked_type(f32(2))
    b.set_checked_type(scalar_type("int8"))
    a.with_span(Span("a.rly", 1, 1))
    assert equal(a, b)


def test_different_node_kinds():
    x = var("x", shape=())
    assert not equal(Tuple([x]), TupleGetItem(Tuple([x]), 0))
    assert not equal(x, const(1.0))
    assert not equal(f32(1), x)
    assert not equal(RefCreate(x), RefRead(x))
    assert equal(RefWrite(x, x), RefWrite(x, x))
    assert not equal(TupleGetItem(Tuple([x, x]), 0), TupleGetItem(Tuple([x, x]), 1))
    c = var("c", "bool")
    assert not equal(If(c, x, const(0.0)), If(c, const(0.0), x))
    assert not equal(op.add(x, x), op.multiply(x, x))
    assert not equal(GlobalVar("f"), GlobalVar("g"))
    assert equal(GlobalVar("f"), GlobalVar("f"))


def test_lists_of_nodes():
    x, y = var("x", shape=()), var("y", shape=())
    assert equal([op.add(x, x), x], [op.add(y, y), y], map_free_vars=True)
    assert not equal([x], [x, x])


# ---------------------------------------------------------------------------------------------
# modules

def test_modules():
    def build(order, extra=None):
        mod = IRModule()
        mod.add_type_def(make_list())
        for name in order:
            v = var("v", shape=(2,))
            mod[name] = Function([v], op.add(v, Call(GlobalVar("helper"), [v])) if name == "main" else v)
        if extra:
            mod[extra] = Function([], const(1.0))
        return mod

    assert equal(build(["main", "helper"]), build(["helper", "main"]))
    assert not equal(build(["main", "helper"]), build(["main", "helper"], extra="more"))
    plain = IRModule()
    for name, fn in build(["main", "helper"]).items():
        plain[name.name_hint] = fn
    assert not equal(build(["main", "helper"]), plain)  # no type definitions
    diff = first_difference(build(["main", "helper"]), build(["main", "helper"], extra="more"))
    assert diff.path == "<root>" and "functions only in the rhs: more" in diff.reason


def test_module_type_definitions_compared_by_name():
    a, b = IRModule(), IRModule()
    a.add_type_def(make_list())
    b.add_type_def(define_adt("List", ["A"], lambda List, A: {"Cons": [A, List(A)], "Nil": [A]}))
    diff = first_difference(a, b)
    assert diff is not None
    assert diff.path == 'types["List"].constructors[1]'


# ---------------------------------------------------------------------------------------------
# assert_structural_equal messages

def conv_module(x, padding, width=4):
    mod = IRModule()
    v = var(x, shape=(1, width))
    mod["main"] = Function([v], op.add(Call(GlobalVar("conv"), [v], {"padding": padding}), v))
    return mod


def test_message_names_the_path_and_both_sides():
    with pytest.raises(AssertionError) as info:
        assert_structural_equal(conv_module("x", (1, 1)), conv_module("y", (0, 0)))
    message = str(info.value)
    first = message.splitlines()[0]
    assert first == 'not structurally equal at @main.body.args[0].attrs["padding"]: attribute values differ'
    assert "lhs: (1, 1)" in message and "rhs: (0, 0)" in message
    assert "@conv(%x" in message and "@conv(%y" in message  # the calls around the difference


def test_message_for_a_type_difference():
    with pytest.raises(AssertionError) as info:
        assert_structural_equal(conv_module("x", (1, 1)), conv_module("x", (1, 1), width=5))
    message = str(info.value)
    assert message.startswith("not structurally equal at @main.params[0].type_annotation.shape[1]: "
                              "dimensions differ: 4 vs 5")
    assert "Tensor[(1, 4), float32]" in message and "Tensor[(1, 5), float32]" in message


def test_message_for_free_vars_suggests_mapping():
    x, y = var("x", shape=()), var("y", shape=())
    with pytest.raises(AssertionError, match=r"at args\[0\]: different free variables %x and %y "
                                             r"\(map_free_vars=True pairs free variables\)"):
        assert_structural_equal(op.add(x, x), op.add(y, y))
    assert_structural_equal(op.add(x, x), op.add(y, y), map_free_vars=True)


@pytest.mark.parametrize("lhs, rhs, path, reason", [
    (lambda: op.add(var("x", shape=()), const(1.0)), lambda: op.multiply(var("x", shape=()), const(1.0)),
     "op", "different operators: add vs multiply"),
    (lambda: Tuple([const(1.0)]), lambda: Tuple([const(1.0), const(1.0)]),
     "<root>", "different numbers of fields: 1 vs 2"),
    (lambda: const(1.0), lambda: const(1.0, "float16"),
     "<root>", "constants have different dtypes: float32 vs float16"),
    (lambda: const([1.0]), lambda: const([1.0, 2.0]),
     "<root>", "constants have different shapes: (1,) vs (2,)"),
    (lambda: TupleGetItem(Tuple([]), 0), lambda: TupleGetItem(Tuple([]), 1),
     "<root>", "different tuple indices: 0 vs 1"),
    (lambda: f32(1), lambda: TensorType((1,), "int8"), "dtype", "dtypes differ: float32 vs int8"),
    (lambda: f32(1), lambda: f32(1, 1), "<root>", "ranks differ: 1 vs 2"),
    (lambda: Function([], const(1.0)), lambda: Function([], const(1.0), f32()), "ret_type", "missing on the lhs"),
    (lambda: const(1.0), lambda: Tuple([]), "<root>", "different kinds of node: Constant vs Tuple"),
    (lambda: Call(GlobalVar("f"), [], {"a": 1}), lambda: Call(GlobalVar("f"), [], {"b": 1}), "attrs",
     "attributes differ: only the lhs has a; only the rhs has b"),
])
def test_first_difference(lhs, rhs, path, reason):
    diff = first_difference(lhs(), rhs())
    assert diff is not None
    assert (diff.path, diff.reason) == (path, reason)
    assert first_difference(lhs(), lhs(), map_free_vars=True) is None


def test_first_difference_is_the_first_in_program_order():
    x = var("x", shape=())
    lhs = Tuple([op.add(x, const(1.0)), op.add(x, const(2.0))])
    rhs = Tuple([op.add(x, const(3.0)), op.multiply(x, const(2.0))])
    assert first_difference(lhs, rhs).path == "fields[0].args[1]"


def test_docstring_examples():
    import doctest
    from relaybench.ir import structural
    result = doctest.testmod(structural, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 5 and result.failed == 0


def test_equal_values_do_not_raise():
    assert_structural_equal(conv_module("x", (1, 1)), conv_module("y", (1, 1)))
    assert first_difference(conv_module("x", (1, 1)), conv_module("y", (1, 1))) is None


# ---------------------------------------------------------------------------------------------
# hashing

def test_hash_is_deterministic_and_alpha_invariant():
    x, y = var("x", shape=(2,)), var("y", shape=(2,))
    f = Function([x], op.multiply(x, const(2.0)))
    assert structural_hash(f) == structural_hash(f)
    assert structural_hash(f) == structural_hash(Function([y], op.multiply(y, const(2.0))))
    assert isinstance(structural_hash(f), int)


@pytest.mark.parametrize("make_a, make_b", [
    (lambda: op.add(const(1.0), const(2.0)), lambda: op.add(const(2.0), const(1.0))),
    (lambda: op.add(const(1.0), const(2.0)), lambda: op.multiply(const(1.0), const(2.0))),
    (lambda: const(1.0), lambda: const(1.0, "float64")),
    (lambda: f32(2, 3), lambda: f32(3, 2)),
    (lambda: Call(GlobalVar("f"), [], {"axis": 1}), lambda: Call(GlobalVar("f"), [], {"axis": 2})),
    (lambda: Function([var("x", shape=(2,))], const(1.0)), lambda: Function([var("x", shape=(3,))], const(1.0))),
    (lambda: GlobalVar("f"), lambda: GlobalVar("g")),
    (lambda: chain(10), lambda: chain(11)),
])
def test_different_values_hash_differently(make_a, make_b):
    a, b = make_a(), make_b()
    assert not structural_equal(a, b)
    assert structural_hash(a) != structural_hash(b)


def test_hash_distinguishes_sharing_and_positions():
    x = var("x", shape=(2,))
    s = op.nn.relu(x)
    dag = Function([x], op.add(s, s))
    tree = Function([x], op.add(op.nn.relu(x), op.nn.relu(x)))
    assert structural_hash(dag) != structural_hash(tree)
    p, q = var("p", shape=()), var("q", shape=())
    assert structural_hash(Function([p, q], op.subtract(p, q))) != structural_hash(Function([p, q], op.subtract(q, p)))


def test_hash_of_free_vars():
    x, y = var("x", shape=(2,)), var("y", shape=(2,))
    assert structural_hash(op.add(x, y)) != structural_hash(op.add(y, x))
    assert structural_hash(op.add(x, y), map_free_vars=True) == structural_hash(op.add(y, x), map_free_vars=True)
    assert structural_hash(op.add(x, x), map_free_vars=True) != structural_hash(op.add(x, y), map_free_vars=True)


def test_hash_agrees_with_python_equality_of_attr_values():
    f = GlobalVar("f")
    a, b = Call(f, [], {"v": 1}), Call(f, [], {"v": 1.0})
    assert structural_equal(a, b)  # Attrs compare with ==, and 1 == 1.0
    assert structural_hash(a) == structural_hash(b)


def test_hash_of_modules_and_types():
    assert structural_hash(conv_module("x", (1, 1))) == structural_hash(conv_module("y", (1, 1)))
    assert structural_hash(conv_module("x", (1, 1))) != structural_hash(conv_module("x", (0, 1)))
    a, b = TypeVar("A"), TypeVar("B")
    assert structural_hash(FuncType([a], a, [a])) == structural_hash(FuncType([b], b, [b]))
    assert structural_hash(make_list()) == structural_hash(make_list())


def test_hash_is_the_same_in_another_process():
    code = ("from relaybench.testing import chain; from relaybench.ir.structural import structural_hash; "
            "print(structural_hash(chain(20)))")
    outs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        outs.append(int(done.stdout))
    assert outs[0] == outs[1] == structural_hash(chain(20))


# ---------------------------------------------------------------------------------------------
# property: programs generated from the same description are equal and hash alike; programs from
# different descriptions are different

_leaf = st.one_of(st.tuples(st.just("var"), st.integers(0, 5)),
                  st.tuples(st.just("const"), st.sampled_from([0.0, 1.0, 2.5])))


def _grow(kids):
    return st.one_of(
        st.tuples(st.sampled_from(["add", "multiply"]), kids, kids),
        st.tuples(st.just("tuple"), st.lists(kids, max_size=3)),
        st.tuples(st.just("get"), kids, st.integers(0, 2)),
        st.tuples(st.just("let"), kids, kids),
        st.tuples(st.just("fn"), kids),
    )


_trees = st.recursive(_leaf, _grow, max_leaves=15)


def _build(tree, env, names):
    """(program, canonical description); variables are chosen modulo the variables in scope.
    Hypothesis keeps the trees small, so recursion is fine here."""
    tag = tree[0]
    if tag == "var":
        i = tree[1] % len(env)
        return env[i], ("var", i)
    if tag == "const":
        return const(tree[1]), tree
    if tag in ("add", "multiply"):
        (a, ca), (b, cb) = _build(tree[1], env, names), _build(tree[2], env, names)
        return getattr(op, tag)(a, b), (tag, ca, cb)
    if tag == "tuple":
        built = [_build(t, env, names) for t in tree[1]]
        return Tuple([e for e, _ in built]), ("tuple",) + tuple(c for _, c in built)
    if tag == "get":
        a, ca = _build(tree[1], env, names)
        return TupleGetItem(a, tree[2]), ("get", ca, tree[2])
    if tag == "let":
        v = var(next(names))
        value, cv = _build(tree[1], env, names)
        body, cb = _build(tree[2], env + [v], names)
        return Let(v, value, body), ("let", cv, cb)
    p = var(next(names), shape=(2,))
    body, cb = _build(tree[1], env + [p], names)
    return Function([p], body), ("fn", cb)


def _program(tree, prefix):
    names = (f"{prefix}{i}" for i in range(10**6))
    params = [var(next(names), shape=(2,)), var(next(names), shape=(2,))]
    body, canon = _build(tree, params, names)
    return Function(params, body), canon


@settings(max_examples=150, deadline=None)
@given(_trees, _trees)
def test_equality_follows_the_description(t1, t2):
    a, ca = _program(t1, "a")
    a2, _ = _program(t1, "b")
    b, cb = _program(t2, "c")
    assert structural_equal(a, a2)
    assert structural_hash(a) == structural_hash(a2)
    assert structural_equal(a, b) == (ca == cb)
    if ca == cb:
        assert structural_hash(a) == structural_hash(b)


# ---------------------------------------------------------------------------------------------
# scale: 20,000 operators, 20 times Python's recursion limit (tests/test_scale.py compares and
# hashes 100,000)

N = 20_000


@pytest.fixture(scope="module")
def two_chains():
    return chain(N), chain(N)


def test_long_chains_compare_and_hash(two_chains):
    a, b = two_chains
    assert structural_equal(a, b)
    assert structural_hash(a) == structural_hash(b)


def test_long_chains_that_differ_at_the_bottom(two_chains):
    a, _ = two_chains
    # the same chain, except the innermost constant
    x = var("x", shape=(4,))
    y = op.add(x, const(7.0))
    for i in range(1, N):
        y = op.add(y, const(1.0)) if i % 2 == 0 else op.multiply(y, const(0.5))
    b = Function([x], y)
    assert not structural_equal(a, b)
    assert structural_hash(a) != structural_hash(b)
    with pytest.raises(AssertionError) as info:
        assert_structural_equal(a, b)
    first = str(info.value).splitlines()[0]
    assert first == (f"not structurally equal at body.args[0]{{x{N - 1}}}.args[1]: "
                     "constants have different values")


def test_long_let_chains():
    def let_chain(prefix):
        x = var(prefix, shape=())
        sb = ScopeBuilder()
        cur = x
        for i in range(N):
            cur = sb.let(f"{prefix}{i}", op.add(cur, const(1.0)))
        sb.ret(cur)
        return Function([x], sb.get())

    a, b = let_chain("a"), let_chain("b")
    assert structural_equal(a, b)
    assert structural_hash(a) == structural_hash(b)
