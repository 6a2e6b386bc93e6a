"""Type inference: constraint generation, unification, the relation solver, resolution, errors."""

import re

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.errors import TypeInferenceError
from relaybench.ir import (ANY, Call, Clause, Function, GlobalVar, If, IRModule, Let, Match,
                           PatternConstructor, PatternTuple, PatternVar, PatternWildcard, RefCreate,
                           RefRead, RefWrite, SymVar, Tuple, TupleGetItem, Var, const, define_adt, var)
from relaybench.ir.type_infer import infer_expr
from relaybench.ir.type_solver import DimHole, TypeSolver, UnifyError
from relaybench.ir.types import (FuncType, IncompleteType, RefType, TensorType, TupleType, TypeCall,
                                 TypeRelation, TypeVar)
from relaybench.passes import InferType

f32, i32, b = "float32", "int32", "bool"
n, m = SymVar("n"), SymVar("m")


def T(*shape, dtype=f32):
    return TensorType(shape, dtype)


def scalar(dtype):
    return TensorType((), dtype)


def infer_mod(mod):
    return InferType()(mod)


def fails_with(text):
    """Expect a TypeInferenceError whose message starts with ``text``."""
    return pytest.raises(TypeInferenceError, match="^" + re.escape(text))


def list_adt():
    return define_adt("List", ["A"], lambda List, A: {"Cons": [A, List(A)], "Nil": []})


# ---------------------------------------------------------------------------------------------
# The pass and its API

def test_pass_returns_a_new_module_with_every_node_typed():
    x = var("x", shape=(1, 3))
    t = Var("t")                      # unannotated let variable
    body = Let(t, op.nn.relu(x), op.add(t, const(1.0)))
    mod = IRModule.from_expr(Function([x], body))
    out = infer_mod(mod)
    assert out is not mod
    main = out["main"]
    # as in Relay, what was inferred is written back: the let variable gets its annotation and
    # the function its return type, in new nodes; the input program is left as it was
    assert main is not mod["main"] and mod["main"].ret_type is None and t.type_annotation is None
    assert main.ret_type == T(1, 3) and main.body.var.type_annotation == T(1, 3)
    assert main.params[0] is x and main.body.value is body.value
    assert main.body.body.args[0] is main.body.var
    assert infer_mod(out)["main"] is main          # nothing left to write back
    assert main.checked_type == FuncType([T(1, 3)], T(1, 3))
    assert x.checked_type == T(1, 3)
    assert t.checked_type == T(1, 3)
    assert body.value.checked_type == T(1, 3)
    # each operator call records the types of its relation's variables, inputs then output
    assert body.value.type_args == (T(1, 3), T(1, 3))
    assert body.body.args[1].checked_type == scalar(f32)
    assert out.get_global_var("main").checked_type == main.checked_type
    relu_type = body.value.op.checked_type
    assert isinstance(relu_type, FuncType) and isinstance(relu_type.type_constraints[0], TypeRelation)
    assert relu_type.type_constraints[0].name == "IdentityRel"


def test_infer_expr_types_a_lone_expression_with_free_variables():
    x = var("x", shape=(2, 3))
    assert infer_expr(op.transpose(x) * const(2.0)) == T(3, 2)
    assert x.checked_type == T(2, 3)


def test_infer_type_rejects_an_expression():
    with pytest.raises(TypeError, match="IRModule"):
        InferType()(var("x", shape=()))


def test_free_var_is_inferred_from_its_use():
    x = var("x", shape=(2, 2))
    y = Var("y")
    body = If(const(True), x, y)
    assert infer_expr(body) == T(2, 2)
    assert y.checked_type == T(2, 2)


# ---------------------------------------------------------------------------------------------
# Functions, polymorphism, recursion

def test_polymorphic_identity_used_at_two_types():
    a = TypeVar("A")
    p = Var("p", a)
    mod = IRModule()
    ident = mod.add("id", Function([p], p, ret_type=a, type_params=[a]))
    x, y = var("x", shape=(3,)), var("y", shape=(), dtype=i32)
    c1, c2 = Call(ident, [x]), Call(ident, [y])
    mod["main"] = Function([x, y], Tuple([c1, c2]))
    out = infer_mod(mod)
    assert out["main"].checked_type.ret_type == TupleType([T(3), scalar(i32)])
    assert c1.checked_type == T(3) and c2.checked_type == scalar(i32)
    assert out["id"].checked_type == FuncType([a], a, [a])
    assert p.checked_type is a


def test_type_parameters_are_rigid_inside_the_function():
    a = TypeVar("A")
    p = Var("p", a)
    fn = Function([p], op.add(p, const(1.0)), type_params=[a])
    with fails_with("add: lhs must be a tensor, got A"):
        infer_expr(fn)


def test_recursive_sum_over_a_list_adt():
    List = list_adt()
    mod = IRModule()
    mod.add_type_def(List)
    Cons, Nil = List["Cons"], List["Nil"]
    l, h, t = Var("l", List(scalar(i32))), Var("h"), Var("t")
    total = GlobalVar("sum")
    recursive_call = Call(total, [t])
    body = Match(l, [
        Clause(PatternConstructor(Cons, [PatternVar(h), PatternVar(t)]), op.add(h, recursive_call)),
        Clause(PatternConstructor(Nil, []), const(0)),
    ])
    mod.add(total, Function([l], body))          # no return annotation: inferred
    x = var("x", shape=(), dtype=i32)
    mod["main"] = Function([x], Call(total, [Cons(x, Cons(x, Nil()))]))
    out = infer_mod(mod)
    assert out["sum"].checked_type == FuncType([List(scalar(i32))], scalar(i32))
    assert h.checked_type == scalar(i32)
    assert t.checked_type == List(scalar(i32))
    assert recursive_call.checked_type == scalar(i32)
    assert out["main"].checked_type == FuncType([scalar(i32)], scalar(i32))
    assert Cons.checked_type == FuncType(Cons.inputs, TypeCall(List.header, List.type_vars), List.type_vars)


def test_polymorphic_recursive_length_with_annotation():
    List = list_adt()
    mod = IRModule()
    mod.add_type_def(List)
    Cons, Nil = List["Cons"], List["Nil"]
    a = TypeVar("a")
    l, t = Var("l", List(a)), Var("t")
    length = GlobalVar("length")
    body = Match(l, [
        Clause(PatternConstructor(Cons, [PatternWildcard(), PatternVar(t)]),
               op.add(const(1), Call(length, [t]))),
        Clause(PatternWildcard(), const(0)),
    ])
    mod.add(length, Function([l], body, ret_type=scalar(i32), type_params=[a]))
    x, y = var("x", shape=(2,)), var("y", shape=(), dtype=b)
    mod["main"] = Function([x, y], Tuple([Call(length, [Cons(x, Nil())]), Call(length, [Cons(y, Nil())])]))
    out = infer_mod(mod)
    assert out["main"].checked_type.ret_type == TupleType([scalar(i32), scalar(i32)])
    assert t.checked_type == List(a)


def test_polymorphic_constructor_and_global_passed_as_values():
    # foldr(f, acc, xs) with f = Cons, as the prelude's concat does; and @id returned as a closure
    List = list_adt()
    mod = IRModule()
    mod.add_type_def(List)
    Cons, Nil = List["Cons"], List["Nil"]
    a, bt = TypeVar("a"), TypeVar("b")
    f, acc, xs = Var("f", FuncType([a, bt], bt)), Var("acc", bt), Var("xs", List(a))
    h, t = Var("h"), Var("t")
    foldr = GlobalVar("foldr")
    body = Match(xs, [
        Clause(PatternConstructor(Cons, [PatternVar(h), PatternVar(t)]), Call(f, [h, Call(foldr, [f, acc, t])])),
        Clause(PatternWildcard(), acc),
    ])
    mod.add(foldr, Function([f, acc, xs], body, ret_type=bt, type_params=[a, bt]))
    c = TypeVar("c")
    p = Var("p", c)
    ident = mod.add("id", Function([p], p, ret_type=c, type_params=[c]))
    x = var("x", shape=(2,))
    concat = Call(foldr, [Cons, Cons(x, Nil()), Cons(x, Nil())])
    pick = Function([], ident, ret_type=FuncType([T(2)], T(2)))
    mod["main"] = Function([x], Tuple([concat, Call(Call(pick, []), [x])]))
    out = infer_mod(mod)
    assert out["main"].checked_type.ret_type == TupleType([List(T(2)), T(2)])
    assert concat.args[0].checked_type == FuncType(Cons.inputs, List(List.type_vars[0]), List.type_vars)


def test_countdown_loop_with_if():
    mod = IRModule()
    loop = GlobalVar("loop")
    i = var("i", shape=(), dtype=i32)
    cond = op.greater(i, const(0))
    body = If(cond, Call(loop, [op.subtract(i, const(1))]), i)
    mod.add(loop, Function([i], body))
    out = infer_mod(mod)
    assert out["loop"].checked_type == FuncType([scalar(i32)], scalar(i32))
    assert cond.checked_type == scalar(b)
    assert body.checked_type == scalar(i32)


def test_mutual_recursion_without_return_annotations():
    mod = IRModule()
    even, odd = GlobalVar("even"), GlobalVar("odd")
    x, y = var("x", shape=(), dtype=i32), var("y", shape=(), dtype=i32)
    mod.add(even, Function([x], If(op.equal(x, const(0)), const(True),
                                   Call(odd, [op.subtract(x, const(1))]))))
    mod.add(odd, Function([y], If(op.equal(y, const(0)), const(False),
                                  Call(even, [op.subtract(y, const(1))]))))
    z = var("z", shape=(), dtype=i32)
    mod["main"] = Function([z], Call(even, [z]))
    out = infer_mod(mod)
    for name in ("even", "odd", "main"):
        assert out[name].checked_type == FuncType([scalar(i32)], scalar(b))


def test_let_recursion_of_an_annotated_closure():
    fty = FuncType([scalar(i32)], scalar(i32))
    f = Var("f", fty)
    k = var("k", shape=(), dtype=i32)
    inner_call = Call(f, [op.subtract(k, const(1))])
    closure = Function([k], If(op.equal(k, const(0)), const(0), inner_call))
    outer_call = Call(f, [const(10)])
    prog = Let(f, closure, outer_call)
    assert infer_expr(prog) == scalar(i32)
    assert closure.checked_type == fty
    assert inner_call.checked_type == scalar(i32)
    assert f.checked_type == fty


def test_let_recursion_without_an_annotation_is_monomorphic():
    f = Var("f")
    k = var("k", shape=(), dtype=i32)
    closure = Function([k], If(op.equal(k, const(0)), const(0.0), Call(f, [op.subtract(k, const(1))])))
    assert infer_expr(Let(f, closure, Call(f, [const(3)]))) == scalar(f32)
    assert f.checked_type == FuncType([scalar(i32)], scalar(f32))


def test_closure_capturing_a_variable_infers_its_parameter():
    x = var("x", shape=(4, 2))
    y = Var("y")
    g = Var("g")
    closure = Function([y], op.multiply(x, y))
    prog = Function([x], Let(g, closure, Call(g, [x])))
    assert infer_expr(prog) == FuncType([T(4, 2)], T(4, 2))
    assert y.checked_type == T(4, 2)
    assert g.checked_type == FuncType([T(4, 2)], T(4, 2))


def test_higher_order_function_argument():
    fty = FuncType([T(3)], T(3))
    f = Var("f", fty)
    x = var("x", shape=(3,))
    apply_twice = Function([f, x], Call(f, [Call(f, [x])]))
    y = Var("y")
    prog = Call(apply_twice, [Function([y], op.negative(y)), const([1.0, 2.0, 3.0])])
    assert infer_expr(prog) == T(3)
    assert y.checked_type == T(3)


# ---------------------------------------------------------------------------------------------
# Tuples, match, refs, if

def test_tuple_projection_waits_for_the_tuple_type():
    p = Var("p")
    item = TupleGetItem(p, 1)
    g = Var("g")
    x, y = var("x", shape=(2,)), var("y", shape=(), dtype=i32)
    prog = Let(g, Function([p], item), Call(g, [Tuple([x, y])]))
    assert infer_expr(prog) == scalar(i32)
    assert item.checked_type == scalar(i32)
    assert p.checked_type == TupleType([T(2), scalar(i32)])


def test_tuple_projection_out_of_range():
    x = var("x", shape=(2,))
    with fails_with("tuple index 2 is out of range for (Tensor[(2), float32], Tensor[(2), float32]) "
                    "(2 fields)") as info:
        infer_expr(TupleGetItem(Tuple([x, x]), 2))
    assert isinstance(info.value.node, TupleGetItem)


def test_match_with_constructor_tuple_and_wildcard_patterns():
    Option = define_adt("Option", ["A"], lambda Option, A: {"Some": [A], "None_": []})
    mod = IRModule()
    mod.add_type_def(Option)
    Some = Option["Some"]
    a, c = Var("a"), Var("c")
    data = Var("data", TupleType([Option(T(3)), scalar(i32)]))
    clauses = [
        Clause(PatternTuple([PatternConstructor(Some, [PatternVar(a)]), PatternWildcard()]), a),
        Clause(PatternTuple([PatternWildcard(), PatternVar(c)]),
               op.multiply(op.nn.relu(const([1.0, 1.0, 1.0])), const(2.0))),
    ]
    match = Match(data, clauses)
    mod["main"] = Function([data], match)
    infer_mod(mod)
    assert a.checked_type == T(3)
    assert c.checked_type == scalar(i32)
    assert match.checked_type == T(3)


def test_match_clauses_must_agree():
    List = list_adt()
    mod = IRModule()
    mod.add_type_def(List)
    l = Var("l", List(scalar(f32)))
    match = Match(l, [Clause(PatternConstructor(List["Nil"], []), const(0)),
                      Clause(PatternWildcard(), const(1.0))])
    mod["main"] = Function([l], match)
    with fails_with("clause 1 of the match has a different type: cannot unify int32 with float32: "
                    "dtypes differ (int32 vs float32)") as info:
        infer_mod(mod)
    assert info.value.node is match


def test_constructor_pattern_against_the_wrong_adt():
    List = list_adt()
    Box = define_adt("Box", [], {"Box": [scalar(f32)]})
    mod = IRModule()
    mod.add_type_def(List)
    mod.add_type_def(Box)
    l = Var("l", List(scalar(f32)))
    box_pattern = PatternConstructor(Box["Box"], [PatternWildcard()])
    mod["main"] = Function([l], Match(l, [Clause(box_pattern, const(0))]))
    with fails_with("pattern Box(...) does not match the matched value: cannot unify List[float32] with Box"):
        infer_mod(mod)


def test_unconstrained_adt_argument_is_left_as_a_hole():
    List = list_adt()
    mod = IRModule()
    mod.add_type_def(List)
    nil = List["Nil"]()
    mod["main"] = Function([], nil)
    infer_mod(mod)
    t = nil.checked_type
    assert isinstance(t, TypeCall) and t.func is List.header and isinstance(t.args[0], IncompleteType)


def test_constructor_needs_its_type_in_the_module():
    List = list_adt()
    with fails_with("constructor Nil belongs to type List, which the module does not define"):
        infer_expr(List["Nil"]())


def test_references():
    r = Var("r")
    create = RefCreate(const(1.0))
    write = RefWrite(r, const(2.0))
    read = RefRead(r)
    prog = Let(r, create, Let(Var("_"), write, read))
    assert infer_expr(prog) == scalar(f32)
    assert create.checked_type == RefType(scalar(f32))
    assert write.checked_type == TupleType([])
    assert r.checked_type == RefType(scalar(f32))


def test_reference_of_unknown_type_is_solved_by_a_write():
    r = Var("r")
    read = RefRead(r)
    prog = Function([r], Let(Var("_"), RefWrite(r, const(3)), read))
    assert infer_expr(prog) == FuncType([RefType(scalar(i32))], scalar(i32))


def test_writing_the_wrong_type_to_a_reference():
    r = Var("r")
    write = RefWrite(r, const(1))
    with fails_with("the value written does not match the reference: cannot unify float32 with int32") as info:
        infer_expr(Let(r, RefCreate(const(1.0)), write))
    assert info.value.node is write


def test_if_condition_must_be_a_bool_scalar():
    x = var("x", shape=(2,))
    node = If(op.less(x, x), x, x)
    with fails_with("the condition of if must be a bool scalar: cannot unify bool with Tensor[(2), bool]: "
                    "ranks differ (0 vs 1)"):
        infer_expr(node)


def test_if_branches_must_agree():
    x, y = var("x", shape=(1, 3)), var("y", shape=(1, 4))
    node = If(const(True), x, y)
    with pytest.raises(TypeInferenceError) as info:
        infer_expr(node)
    assert str(info.value).startswith(
        "the branches of if have different types: cannot unify Tensor[(1, 3), float32] with "
        "Tensor[(1, 4), float32]: dimension 1 conflicts (3 vs 4)")
    assert info.value.node is node and info.value.op is None


# ---------------------------------------------------------------------------------------------
# Symbolic dimensions

def test_concatenate_of_two_n_by_3_is_2n():
    x = var("x", shape=(n, 3))
    y = op.concatenate(Tuple([x, x]), axis=0)
    assert infer_expr(y) == T(2 * n, 3)
    assert infer_expr(y).shape[0] == n + n


def test_function_over_n_called_at_4_and_at_5():
    mod = IRModule()
    a = var("a", shape=(n, 3))
    f = mod.add("f", Function([a], op.concatenate(Tuple([a, op.nn.relu(a)]), axis=0)))
    p, q = var("p", shape=(4, 3)), var("q", shape=(5, 3))
    c4, c5 = Call(f, [p]), Call(f, [q])
    mod["main"] = Function([p, q], Tuple([c4, c5]))
    out = infer_mod(mod)
    assert out["f"].checked_type == FuncType([T(n, 3)], T(2 * n, 3))
    assert c4.checked_type == T(8, 3) and c5.checked_type == T(10, 3)
    assert a.checked_type == T(n, 3)      # inside its function, n stays symbolic


def test_module_order_does_not_matter():
    # @main is added before the function it calls: @f is still inferred first
    mod = IRModule()
    f = GlobalVar("f")
    p, q = var("p", shape=(4, 3)), var("q", shape=(5, 3))
    c4, c5 = Call(f, [p]), Call(f, [q])
    mod["main"] = Function([p, q], Tuple([c4, c5]))
    a = var("a", shape=(n, 3))
    mod.add(f, Function([a], op.transpose(a)))
    infer_mod(mod)
    assert c4.checked_type == T(3, 4) and c5.checked_type == T(3, 5)


def test_relation_over_an_unknown_dimension_waits_for_it():
    # inside the closure, @f's n is a dimension hole until the closure is called with (4, 3);
    # the add then compares 2*$k with 8 only once $k is known
    mod = IRModule()
    a = var("a", shape=(n, 3))
    f = mod.add("f", Function([a], op.concatenate(Tuple([a, a]), axis=0)))
    p, r, h = Var("p"), Var("r"), Var("h")
    added = op.add(r, const(np.ones((8, 3), "float32")))
    x = var("x", shape=(4, 3))
    mod["main"] = Function([x], Let(h, Function([p], Let(r, Call(f, [p]), added)), Call(h, [x])))
    infer_mod(mod)
    assert p.checked_type == T(4, 3) and r.checked_type == T(8, 3) and added.checked_type == T(8, 3)
    y = var("y", shape=(5, 3))
    mod["main"] = Function([y], Let(h, Function([p], Let(r, Call(f, [p]), added)), Call(h, [y])))
    with pytest.raises(TypeInferenceError, match="^add: cannot broadcast Tensor.*10, 3.*8, 3"):
        infer_mod(mod)


def test_annotated_function_over_n_solves_a_linear_dimension():
    mod = IRModule()
    a = var("a", shape=(2 * n,))
    half = mod.add("half", Function([a], op.reshape(a, newshape=(-1, 2)), ret_type=T(n, 2)))
    x = var("x", shape=(8,))
    call = Call(half, [x])
    mod["main"] = Function([x], call)
    infer_mod(mod)
    assert call.checked_type == T(4, 2)


def test_symbolic_call_with_a_symbolic_argument():
    mod = IRModule()
    a = var("a", shape=(n, 3))
    f = mod.add("f", Function([a], op.concatenate(Tuple([a, a]), axis=0)))
    x = var("x", shape=(m + 1, 3))
    call = Call(f, [x])
    mod["main"] = Function([x], call)
    infer_mod(mod)
    assert call.checked_type == T(2 * m + 2, 3)


def test_call_with_an_inconsistent_instantiation():
    mod = IRModule()
    a, c = var("a", shape=(n,)), var("c", shape=(n,))
    f = mod.add("f", Function([a, c], op.add(a, c)))
    x, y = var("x", shape=(4,)), var("y", shape=(5,))
    mod["main"] = Function([x, y], Call(f, [x, y]))
    with fails_with("argument 1 of @f: cannot unify Tensor[(4), float32] with Tensor[(5), float32]: "
                    "dimension 0 conflicts (4 vs 5)"):
        infer_mod(mod)


def test_distinct_symbolic_dims_do_not_unify():
    x, y = var("x", shape=(n, 2)), var("y", shape=(m, 2))
    with fails_with("the branches of if have different types: cannot unify Tensor[(n, 2), float32] with "
                    "Tensor[(m, 2), float32]: dimension n conflicts with m (axis 0)"):
        infer_expr(Function([x, y], If(const(True), x, y)))


def test_closure_shares_the_enclosing_symbolic_dim():
    # the closure's parameter mentions the enclosing function's n, so calls do not re-bind n
    x = var("x", shape=(n,))
    y = var("y", shape=(n,))
    g = Var("g")
    z = var("z", shape=(m,))
    prog = Function([x, z], Let(g, Function([y], op.add(x, y)), Call(g, [z])))
    with pytest.raises(TypeInferenceError, match="argument 0 of %g: .*dimension n conflicts with m"):
        infer_expr(prog)


def test_closure_polymorphic_in_its_own_symbolic_dim():
    y = var("y", shape=(n,))
    g = Var("g")
    c2, c3 = Call(g, [const([1.0, 2.0])]), Call(g, [const([1.0, 2.0, 3.0])])
    prog = Let(g, Function([y], op.concatenate(Tuple([y, y]))), Tuple([c2, c3]))
    assert infer_expr(prog) == TupleType([T(4), T(6)])


def test_any_dims_broadcast_and_unify():
    x, y = var("x", shape=(None, 3)), var("y", shape=(4, 1))
    assert infer_expr(op.add(x, y)) == T(4, 3)
    z = var("z", shape=(None,))
    assert infer_expr(op.add(z, const([1.0]))) == T(ANY)
    w = var("w", shape=(2, None))
    assert infer_expr(If(const(True), w, var("v", shape=(2, 7)))) == T(2, 7)


def test_any_argument_to_a_symbolic_function():
    mod = IRModule()
    a = var("a", shape=(n, 3))
    f = mod.add("f", Function([a], op.concatenate(Tuple([a, a]), axis=0)))
    x = var("x", shape=(None, 3))
    call = Call(f, [x])
    mod["main"] = Function([x], call)
    infer_mod(mod)
    assert call.checked_type == T(ANY, 3)


# ---------------------------------------------------------------------------------------------
# Errors

def test_argument_mismatch_names_both_types_and_the_argument():
    mod = IRModule()
    a = var("a", shape=(1, 3))
    f = mod.add("f", Function([a], a))
    x = var("x", shape=(1, 4))
    call = Call(f, [x])
    mod["main"] = Function([x], call)
    with pytest.raises(TypeInferenceError) as info:
        infer_mod(mod)
    err = info.value
    assert err.reason == ("argument 0 of @f: cannot unify Tensor[(1, 3), float32] with "
                          "Tensor[(1, 4), float32]: dimension 1 conflicts (3 vs 4)")
    assert err.node is call
    assert err.program is None or "@f(%x)" in err.program


def test_relation_error_starts_with_the_op_and_marks_the_call():
    x, w = var("x", shape=(1, 3, 8, 8)), var("w", shape=(8, 4, 3, 3))
    call = op.nn.conv2d(x, w)
    with pytest.raises(TypeInferenceError) as info:
        infer_expr(op.nn.relu(call))
    err = info.value
    assert str(err).startswith("nn.conv2d: data has 3 input channels but the weight expects 4")
    assert err.op == "nn.conv2d" and err.relation == "Conv2DRel" and err.node is call
    assert err.reason == "data has 3 input channels but the weight expects 4"
    if err.program is not None:
        assert "nn.conv2d(%x, %w)" in err.program and "^" in err.program


def test_relation_error_found_by_the_solver():
    # the weight's type is known only after the closure is called, so the relation waits, then fails
    x = var("x", shape=(1, 3, 8, 8))
    w = Var("w")
    g = Var("g")
    call = op.nn.conv2d(x, w)
    prog = Let(g, Function([w], call), Call(g, [var("k", shape=(8, 4, 3, 3))]))
    with fails_with("nn.conv2d: data has 3 input channels but the weight expects 4") as info:
        infer_expr(prog)
    assert info.value.node is call and info.value.op == "nn.conv2d"


def test_occurs_check():
    f = Var("f")
    prog = Function([f], Call(f, [f]))
    with fails_with("calling %f: cannot unify _ with fn (_) -> _: occurs check: a type cannot contain itself"):
        infer_expr(prog)


def test_unsolvable_program_needs_annotations():
    x = Var("x")
    mod = IRModule.from_expr(Function([x], x))
    with fails_with("could not infer the type of %x: more type annotations needed") as info:
        infer_mod(mod)
    assert info.value.node is x


def test_unsolved_relation_is_reported_with_its_op():
    x = Var("x")
    call = op.nn.relu(x)
    with pytest.raises(TypeInferenceError) as info:
        infer_expr(Function([x], call))
    assert str(info.value).startswith("nn.relu: could not infer the type of the nn.relu call: more type "
                                      "annotations needed (the type of its data is not known)")
    assert info.value.node is call


def test_op_used_as_a_value():
    op_node = rb.Op.get("nn.relu")
    with fails_with("the operator nn.relu must be called; it cannot be used as a value") as info:
        infer_expr(Tuple([op_node]))
    assert info.value.node is op_node


def test_wrong_number_of_arguments():
    mod = IRModule()
    a = var("a", shape=())
    f = mod.add("f", Function([a], a))
    mod["main"] = Function([a], Call(f, [a, a]))
    with fails_with("@f takes 1 argument, got 2"):
        infer_mod(mod)
    x = var("x", shape=(2,))
    with fails_with("nn.relu: takes 1 input (data), got 2"):
        infer_expr(Call(rb.Op.get("nn.relu"), [x, x]))


def test_calling_a_non_function():
    x = var("x", shape=(2,))
    with fails_with("%x is not a function: it has type Tensor[(2), float32]"):
        infer_expr(Call(x, [x]))


def test_return_annotation_mismatch():
    x = var("x", shape=(2,))
    fn = Function([x], x, ret_type=T(3))
    with fails_with("the function's body does not match its return type: cannot unify Tensor[(3), float32] "
                    "with Tensor[(2), float32]: dimension 0 conflicts (3 vs 2)"):
        infer_expr(fn)


def test_let_annotation_mismatch():
    v = var("v", shape=(), dtype=i32)
    node = Let(v, const(1.0), v)
    with fails_with("the value of let %v: cannot unify int32 with float32: dtypes differ (int32 vs float32)") \
            as info:
        infer_expr(node)
    assert info.value.node is node


def test_undefined_global():
    with fails_with("@nowhere is not defined in the module"):
        infer_expr(Call(GlobalVar("nowhere"), []), mod=IRModule())


def test_infer_expr_with_a_module_uses_its_globals():
    mod = IRModule()
    a = var("a", shape=(n,))
    f = mod.add("f", Function([a], op.nn.relu(a)))
    assert infer_expr(Call(f, [const([1.0, 2.0])]), mod=mod) == T(2)


# ---------------------------------------------------------------------------------------------
# The solver on its own

def test_unify_merges_holes_and_refines_any():
    s = TypeSolver()
    a, c = IncompleteType(), IncompleteType()
    s.unify(a, c)
    s.unify(c, T(ANY, 3))
    assert s.resolve(a) == T(ANY, 3)
    assert s.unify(a, T(5, 3)) == T(5, 3)
    assert s.resolve(c) == T(5, 3)


def test_unify_function_types_renames_type_parameters():
    s = TypeSolver()
    a1, a2 = TypeVar("A"), TypeVar("B")
    f1 = FuncType([a1], a1, [a1])
    f2 = FuncType([a2], a2, [a2])
    assert s.unify(f1, f2) == f1
    with pytest.raises(UnifyError):
        s.unify(FuncType([a1], a1, [a1]), FuncType([a2], T(), [a2]))


def test_dimension_holes_solve_linear_equations():
    s = TypeSolver()
    d = s.fresh_dim()
    assert isinstance(d, DimHole) and str(d).startswith("$")
    s.unify(T(3 * d + 1), T(13))
    assert s.resolve(T(d, 2 * d)) == T(4, 8)
    e = s.fresh_dim()
    with pytest.raises(UnifyError, match="has no integer solution"):
        s.unify(T(2 * e), T(7))


def test_union_find_is_iterative_on_long_chains():
    s = TypeSolver()
    holes = [IncompleteType() for _ in range(200000)]
    for x, y in zip(holes, holes[1:]):
        s.unify(x, y)
    s.unify(holes[0], T(1))
    assert s.resolve(holes[-1]) == T(1) and s.resolve(holes[0]) == T(1)


def test_deeply_nested_types_unify_without_recursion():
    s = TypeSolver()
    deep_a, deep_b = T(1), IncompleteType()
    hole = deep_b
    for _ in range(50000):
        deep_a = TupleType([deep_a])
        deep_b = TupleType([deep_b])
    s.unify(deep_a, deep_b)
    assert s.resolve(hole) == T(1)


# ---------------------------------------------------------------------------------------------
# Scale: 20,000 operators, 20 times Python's recursion limit (any recursion on program depth
# fails at 1,000 frames); tests/test_scale.py type-checks 100,000

DEEP = 20_000


def test_a_long_chain_of_ops_type_checks_in_seconds():
    x = var("x", shape=(2, 3))
    y = x
    for i in range(DEEP):
        y = op.add(y, const(1.0)) if i % 2 else op.nn.relu(y)
    fn = Function([x], y)
    out = infer_mod(IRModule.from_expr(fn))
    assert out["main"].checked_type == FuncType([T(2, 3)], T(2, 3))
    assert y.checked_type == T(2, 3)


def test_a_long_chain_of_lets_type_checks():
    x = var("x", shape=(4,))
    vars_ = [Var(f"v{i}") for i in range(DEEP)]
    body = vars_[-1]
    for i in range(len(vars_) - 1, -1, -1):
        prev = vars_[i - 1] if i else x
        body = Let(vars_[i], op.multiply(prev, const(2.0)), body)
    assert infer_expr(Function([x], body)) == FuncType([T(4)], T(4))
    assert vars_[DEEP // 2].checked_type == T(4)


def test_a_long_chain_of_unannotated_ops_solved_by_the_worklist():
    # the parameter's type comes last (from the call), so every relation waits, then runs
    p = Var("p")
    y = p
    for _ in range(DEEP):
        y = op.negative(y)
    g = Var("g")
    prog = Let(g, Function([p], y), Call(g, [const([1.0, 2.0])]))
    assert infer_expr(prog) == T(2)
    assert y.checked_type == T(2)
