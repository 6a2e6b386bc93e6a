"""Expressions, the builder, ScopeBuilder, ADTs and IRModule."""

import dataclasses

import numpy as np
import pytest

from relaybench import op
from relaybench.ir import (Attrs, Call, Clause, Constant, Function, GlobalVar, If, IRModule, Let,
                           Match, Op, PatternConstructor, PatternTuple, PatternVar, PatternWildcard, RefCreate,
                           RefRead, RefWrite, ScopeBuilder, Span, Tuple, TupleGetItem, Var, as_expr, const,
                           define_adt, free_vars, if_, let, tuple_, var)
from relaybench.ir.adt import TypeData
from relaybench.ir.expr import expr_children, pattern_vars
from relaybench.ir.types import (GlobalTypeVar, IncompleteType, TensorType, TupleType, TypeCall, TypeVar,
                                 scalar_type)


def f32(*shape):
    return TensorType(shape, "float32")


# ---------------------------------------------------------------------------------------------
# nodes

def test_var_fields():
    x = var("x", shape=(2, "n"), dtype="int8")
    assert x.name_hint == "x"
    assert x.type_annotation == TensorType((2, "n"), "int8")
    assert var("s", "bool").type_annotation == scalar_type("bool")
    assert var("u").type_annotation is None
    assert var("t", f32(3)).type_annotation == f32(3)


def test_var_validation():
    with pytest.raises(ValueError, match="either a type annotation or a shape"):
        var("x", f32(2), shape=(2,))
    with pytest.raises(TypeError, match="type annotation of %x is not a type"):
        Var("x", "float32")


def test_nodes_compare_by_identity():
    a, b = var("x", shape=(1,)), var("x", shape=(1,))
    assert a != b and a == a
    assert len({a, b}) == 2
    c1, c2 = const(1.0), const(1.0)
    assert c1 != c2
    assert Op.get("add") is Op.get("add")


@pytest.mark.parametrize("make, field, value", [
    (lambda: var("x"), "name_hint", "y"),
    (lambda: const(1.0), "data", np.zeros(1)),
    (lambda: Tuple([]), "fields", ()),
    (lambda: Call(Op.get("add"), [const(1.0), const(2.0)]), "args", ()),
    (lambda: Function([], const(1.0)), "body", const(2.0)),
    (lambda: GlobalVar("f"), "name_hint", "g"),
])
def test_nodes_are_immutable(make, field, value):
    node = make()
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(node, field, value)


def test_op_is_immutable():
    with pytest.raises(AttributeError, match="immutable"):
        Op.get("add").name = "sub"


def test_constant_data_is_a_read_only_copy():
    arr = np.arange(4, dtype="float32")
    c = Constant(arr)
    arr[0] = 99
    assert c.data[0] == 0
    with pytest.raises(ValueError, match="read-only"):
        c.data[1] = 5
    assert c.tensor_type == TensorType((4,), "float32")


def test_constant_rejects_unknown_dtype():
    with pytest.raises(ValueError, match="unknown dtype"):
        Constant(np.array(["a", "b"]))
    with pytest.raises(ValueError, match="unknown dtype"):
        Constant(np.array([1 + 2j]))


def test_children_lists():
    x, y = var("x", shape=()), var("y", shape=())
    call = x + y
    assert expr_children(call) == (call.op, x, y)
    f = Function([x, y], call)
    assert expr_children(f) == (x, y, call)
    t = Tuple([x, call])
    assert expr_children(t) == (x, call)
    assert expr_children(TupleGetItem(t, 1)) == (t,)
    lt = Let(y, x, y)
    assert expr_children(lt) == (y, x, y)
    cond = var("c", "bool")
    assert expr_children(If(cond, x, y)) == (cond, x, y)
    r = RefCreate(x)
    assert expr_children(r) == (x,)
    assert expr_children(RefRead(r)) == (r,)
    assert expr_children(RefWrite(r, y)) == (r, y)
    assert expr_children(x) == () and expr_children(const(1.0)) == ()


def test_call_validation_names_the_callee():
    x = var("x", shape=(1,))
    with pytest.raises(TypeError, match="argument of add: expected an expression, got int 3"):
        Call(Op.get("add"), [x, 3])
    with pytest.raises(TypeError, match=r"argument of @f: expected an expression"):
        Call(GlobalVar("f"), ["a"])
    with pytest.raises(TypeError, match="Call target"):
        Call("add", [x])


def test_call_attrs_are_completed_and_checked_by_the_op():
    x = var("x", shape=(1,))
    call = Call(Op.get("add"), [x, x])
    assert isinstance(call.attrs, Attrs) and len(call.attrs) == 0
    with pytest.raises(ValueError, match="add: unknown attribute 'axis'"):
        Call(Op.get("add"), [x, x], {"axis": 1})
    # a call of a function keeps its attrs as given
    g = Call(GlobalVar("g"), [x], {"k": [1, 2]})
    assert g.attrs.k == (1, 2)


def test_unknown_operator_suggests_a_name():
    with pytest.raises(KeyError, match="unknown operator 'ad'; did you mean add"):
        Op.get("ad")


def test_other_node_validation():
    x = var("x", shape=(1,))
    with pytest.raises(TypeError, match="function parameter must be a Var"):
        Function([const(1.0)], x)
    with pytest.raises(TypeError, match="Function body"):
        Function([x], 1.0)
    with pytest.raises(ValueError, match="non-negative int"):
        TupleGetItem(Tuple([x]), -1)
    with pytest.raises(TypeError, match="indexed by an int"):
        x["a"]
    with pytest.raises(TypeError, match="let must bind a Var"):
        Let(const(1.0), x, x)
    with pytest.raises(TypeError, match="Tuple field"):
        Tuple([x, 2])
    with pytest.raises(TypeError, match="If"):
        If(x, x, None)
    with pytest.raises(TypeError, match="match clause must be a Clause"):
        Match(x, [x])


def test_function_fields_and_attrs():
    x = var("x", shape=(2,))
    a = TypeVar("A")
    f = Function([x], x, f32(2), [a], {"Primitive": 1})
    assert f.params == (x,) and f.type_params == (a,) and f.ret_type == f32(2)
    assert isinstance(f.attrs, Attrs) and f.is_primitive
    g = Function([x], x)
    assert not g.is_primitive and len(g.attrs) == 0
    h = g.with_attr("Inline", 1)
    assert h is not g and h.attrs.Inline == 1 and len(g.attrs) == 0
    assert h.params == g.params and h.body is g.body


def test_checked_type_and_span():
    x = var("x", shape=(2,))
    with pytest.raises(ValueError, match="run relaybench.passes.InferType"):
        x.checked_type
    assert x.type_or_none is None
    x.set_checked_type(f32(2))
    assert x.checked_type == f32(2)
    assert x.span is None
    span = Span("model.rly", 3, 5)
    assert x.with_span(span) is x and x.span is span
    assert str(span) == "model.rly:3:5"


def test_tuple_projection_sugar():
    t = tuple_(var("a", shape=()), 1.0)
    item = t[1]
    assert isinstance(item, TupleGetItem) and item.tuple_value is t and item.index == 1
    assert isinstance(t.fields[1], Constant)


def test_patterns_bind_left_to_right():
    lst = define_adt("List", ["A"], lambda List, A: {"Cons": [A, List(A)], "Nil": []})
    a, b, c = var("a"), var("b"), var("c")
    inner = PatternConstructor(lst["Cons"], [PatternTuple([PatternVar(b), PatternWildcard()]), PatternVar(c)])
    p = PatternConstructor(lst["Cons"], [PatternVar(a), inner])
    assert pattern_vars(p) == [a, b, c]
    assert pattern_vars(PatternWildcard()) == []


# ---------------------------------------------------------------------------------------------
# const() and as_expr()

@pytest.mark.parametrize("value, dtype", [
    (1.0, "float32"),
    (1, "int32"),
    (True, "bool"),
    (np.arange(3, dtype="int64"), "int64"),
    (np.ones(2, dtype="float64"), "float64"),
    (np.float16(2), "float16"),
    ([1.0, 2.0], "float32"),
    ([1, 2], "int32"),
    ([[True, False]], "bool"),
])
def test_const_dtype_rules(value, dtype):
    c = const(value)
    assert c.data.dtype.name == dtype
    np.testing.assert_array_equal(c.data, np.asarray(value).astype(dtype))


def test_const_explicit_dtype_and_shape():
    c = const(3, "float16")
    assert c.data.dtype.name == "float16" and c.data.shape == () and c.data == 3
    assert const([[1.0, 2.0]]).data.shape == (1, 2)
    c2 = const(c)
    assert c2 is c


def test_as_expr():
    x = var("x", shape=())
    assert as_expr(x) is x
    t = as_expr([x, 2.0])
    assert isinstance(t, Tuple) and t.fields[0] is x and t.fields[1].data.dtype.name == "float32"
    assert isinstance(as_expr((1, 2)), Constant)
    with pytest.raises(TypeError, match="cannot make an expression from str"):
        as_expr("abc")


# ---------------------------------------------------------------------------------------------
# operator sugar

@pytest.mark.parametrize("build, op_name", [
    (lambda x, y: x + y, "add"),
    (lambda x, y: x - y, "subtract"),
    (lambda x, y: x * y, "multiply"),
    (lambda x, y: x / y, "divide"),
])
def test_binary_operator_sugar(build, op_name):
    x, y = var("x", shape=(2,)), var("y", shape=(2,))
    call = build(x, y)
    assert isinstance(call, Call) and call.op is Op.get(op_name)
    assert call.args == (x, y)


def test_sugar_with_python_numbers_on_either_side():
    x = var("x", shape=(2,))
    r = 2.0 - x
    assert r.op is Op.get("subtract") and r.args[1] is x
    assert isinstance(r.args[0], Constant) and float(r.args[0].data) == 2.0
    assert r.args[0].data.dtype.name == "float32"
    m = x * 3.0
    assert m.op.name == "multiply" and m.args[0] is x and float(m.args[1].data) == 3.0
    n = -x
    assert n.op.name == "negative" and n.args == (x,)


def test_op_builders_match_sugar():
    x, y = var("x", shape=(2,)), var("y", shape=(2,))
    a, b = op.add(x, y), x + y
    assert a.op is b.op and a.args == b.args and a.attrs == b.attrs
    with pytest.raises(TypeError, match="add takes 2 inputs"):
        op.add(x)


# ---------------------------------------------------------------------------------------------
# let / if helpers and ScopeBuilder

def test_let_and_if_helpers():
    x, y = var("x", shape=()), var("y", shape=())
    e = let(y, 1.0, y)
    assert isinstance(e, Let) and e.var is y and isinstance(e.value, Constant) and e.body is y
    c = var("c", "bool")
    i = if_(c, x, 0.0)
    assert isinstance(i, If) and i.cond is c and i.true_branch is x and isinstance(i.false_branch, Constant)


def test_scope_builder_let_chain():
    x = var("x", shape=(3,))
    sb = ScopeBuilder()
    t = sb.let("t", x + x)
    u = sb.let(var("u", shape=(3,)), t * t)
    sb.ret(u - t)
    body = sb.get()
    assert isinstance(body, Let) and body.var is t and body.value.op.name == "add"
    inner = body.body
    assert isinstance(inner, Let) and inner.var is u and inner.var.type_annotation == f32(3)
    assert inner.value.args == (t, t)
    assert inner.body.op.name == "subtract" and inner.body.args == (u, t)


def test_scope_builder_let_with_annotation():
    sb = ScopeBuilder()
    v = sb.let("v", const(1.0), scalar_type("float32"))
    sb.ret(v)
    assert sb.get().var.type_annotation == scalar_type("float32")


def test_scope_builder_if_else():
    x = var("x", shape=())
    c = var("c", "bool")
    sb = ScopeBuilder()
    t = sb.let("t", x + x)
    with sb.if_scope(c):
        u = sb.let("u", t * t)
        sb.ret(u)
    with sb.else_scope():
        sb.ret(t)
    out = sb.get()
    assert isinstance(out, Let) and out.var is t
    branch = out.body
    assert isinstance(branch, If) and branch.cond is c
    assert isinstance(branch.true_branch, Let) and branch.true_branch.var is u
    assert branch.true_branch.body is u
    assert branch.false_branch is t


def test_scope_builder_nested_ifs():
    x = var("x", shape=())
    c1, c2 = var("c1", "bool"), var("c2", "bool")
    sb = ScopeBuilder()
    with sb.if_scope(c1):
        with sb.if_scope(c2):
            sb.ret(x)
        with sb.else_scope():
            sb.ret(x + x)
    with sb.else_scope():
        sb.ret(x * x)
    out = sb.get()
    assert isinstance(out, If) and out.cond is c1
    assert isinstance(out.true_branch, If) and out.true_branch.cond is c2
    assert out.false_branch.op.name == "multiply"


def test_scope_builder_misuse():
    x = var("x", shape=())
    c = var("c", "bool")
    sb = ScopeBuilder()
    with pytest.raises(ValueError, match="no return value"):
        sb.get()
    sb.ret(x)  # the builder is still usable after the error
    with pytest.raises(ValueError, match="already returned"):
        sb.ret(x)
    assert sb.get() is x
    with pytest.raises(ValueError, match="must follow an if_scope"):
        ScopeBuilder().else_scope()
    sb2 = ScopeBuilder()
    with sb2.if_scope(c):
        sb2.ret(x)
    with pytest.raises(ValueError, match="without else_scope"):
        sb2.get()


# ---------------------------------------------------------------------------------------------
# ADTs

def make_list():
    return define_adt("List", ["A"], lambda List, A: {"Cons": [A, List(A)], "Nil": []})


def test_define_list():
    lst = make_list()
    assert isinstance(lst, TypeData) and lst.name == "List"
    assert isinstance(lst.header, GlobalTypeVar) and lst.header.name_hint == "List"
    (a,) = lst.type_vars
    cons, nil = lst["Cons"], lst["Nil"]
    assert (cons.tag, nil.tag) == (0, 1)
    assert cons.inputs == (a, TypeCall(lst.header, [a]))
    assert nil.inputs == ()
    assert cons.belong_to is lst.header and nil.belong_to is lst.header
    assert lst(scalar_type("int32")) == TypeCall(lst.header, [scalar_type("int32")])
    assert str(lst) == "type List[A] {\n  Cons(A, List[A]),\n  Nil,\n}"
    assert repr(lst) == "TypeData(List)"


def test_define_tree_over_list():
    lst = make_list()
    tree = define_adt("Tree", ["A"], lambda Tree, A: {"Rose": [A, lst(Tree(A))]})
    (a,) = tree.type_vars
    rose = tree["Rose"]
    assert rose.inputs == (a, TypeCall(lst.header, [TypeCall(tree.header, [a])]))
    assert str(tree) == "type Tree[A] {\n  Rose(A, List[Tree[A]]),\n}"


def test_define_adt_from_a_dict():
    nat = define_adt("nat", [], {"zero": [], "succ": []})
    assert [c.name_hint for c in nat.constructors] == ["zero", "succ"]
    assert str(nat) == "type nat {\n  zero,\n  succ,\n}"


def test_unknown_constructor_lists_the_known_ones():
    with pytest.raises(KeyError, match="has no constructor 'Foo' \\(it has Cons, Nil\\)"):
        make_list()["Foo"]


def test_constructor_from_another_adt_is_rejected():
    lst = make_list()
    with pytest.raises(ValueError, match="does not belong to"):
        TypeData(GlobalTypeVar("Other"), [], [lst["Nil"]])


def test_constructor_call_sugar_and_match():
    lst = make_list()
    one = lst["Cons"](1.0, lst["Nil"]())
    assert isinstance(one, Call) and one.op is lst["Cons"] and isinstance(one.args[0], Constant)
    assert one.args[1].op is lst["Nil"] and one.args[1].args == ()
    h, t = var("h"), var("t")
    m = Match(one, [Clause(PatternConstructor(lst["Cons"], [PatternVar(h), PatternVar(t)]), h),
                    Clause(PatternWildcard(), const(0.0))], complete=False)
    assert not m.complete and len(m.clauses) == 2
    assert free_vars(m) == []


# ---------------------------------------------------------------------------------------------
# IRModule

def test_module_add_and_lookup():
    x = var("x", shape=(3,))
    mod = IRModule()
    f = Function([x], x + x)
    gv = mod.add("main", f)
    assert isinstance(gv, GlobalVar) and gv.name_hint == "main"
    assert mod["main"] is f and mod[gv] is f
    assert mod.get_global_var("main") is gv
    assert "main" in mod and gv in mod and GlobalVar("main") not in mod
    assert len(mod) == 1 and list(mod) == [gv] and mod.get_global_vars() == [gv]
    assert dict(mod.items()) == {gv: f}
    assert repr(mod) == "IRModule(functions=[@main])"


def test_module_setitem_replaces_keeping_the_global_var():
    x = var("x", shape=(3,))
    mod = IRModule()
    gv = mod.add("main", Function([x], x))
    g = Function([x], x * x)
    mod["main"] = g
    assert mod["main"] is g and mod.get_global_var("main") is gv and len(mod) == 1


def test_module_missing_name_suggests():
    mod = IRModule()
    mod["main"] = Function([], const(1.0))
    with pytest.raises(KeyError, match="no global function or type named 'mian'.*did you mean main"):
        mod["mian"]
    with pytest.raises(KeyError, match="'zzz' in the module\"?$"):
        mod.get_global_var("zzz")


def test_module_add_errors():
    x = var("x", shape=(3,))
    mod = IRModule()
    mod["f"] = Function([x], x)
    with pytest.raises(ValueError, match="already defines @f"):
        mod.add("f", Function([x], x), update=False)
    with pytest.raises(ValueError, match="different @f"):
        mod.add(GlobalVar("f"), Function([x], x))
    with pytest.raises(TypeError, match="must be a Function, got Var"):
        mod["g"] = x
    with pytest.raises(TypeError, match="named by a str or a GlobalVar"):
        mod[3]


def test_module_remove():
    mod = IRModule()
    mod["f"] = Function([], const(1.0))
    mod["g"] = Function([], const(2.0))
    mod.remove("f")
    assert "f" not in mod and len(mod) == 1
    with pytest.raises(KeyError):
        mod.remove("f")


def test_module_type_definitions():
    lst = make_list()
    mod = IRModule()
    handle = mod.add_type_def(lst)
    assert handle is lst.header
    assert mod["List"] is lst and mod[lst.header] is lst and mod.get_type("List") is lst
    assert mod.get_global_type_var("List") is lst.header
    assert mod.get_constructor("Cons") is lst["Cons"]
    assert mod.lookup_tag(1, "List") is lst["Nil"] and mod.lookup_tag(0, lst.header) is lst["Cons"]
    assert "List" in mod and lst.header in mod
    assert repr(mod) == "IRModule(functions=[], types=[List])"
    with pytest.raises(KeyError, match="no constructor named 'Conss'"):
        mod.get_constructor("Conss")
    with pytest.raises(ValueError, match="already defines a type named List"):
        mod.add_type_def(make_list())
    with pytest.raises(TypeError, match="must be a TypeData"):
        mod.add_type_def(lst.header)


def test_module_type_def_update_replaces_constructors():
    mod = IRModule()
    mod.add_type_def(make_list())
    new = define_adt("List", [], {"Empty": []})
    mod.add_type_def(new, update=True)
    assert mod["List"] is new and mod.get_constructor("Empty") is new["Empty"]
    with pytest.raises(KeyError):
        mod.get_constructor("Cons")


def test_constructor_name_clash_between_types():
    mod = IRModule()
    mod.add_type_def(make_list())
    with pytest.raises(ValueError, match="constructor Nil of Other clashes"):
        mod.add_type_def(define_adt("Other", [], {"Nil": []}))


def test_from_expr_wraps_free_vars_in_order():
    x, y = var("x", shape=(2,)), var("y", shape=(2,))
    body = op.multiply(op.add(y, x), y)
    mod = IRModule.from_expr(body)
    main = mod["main"]
    assert isinstance(main, Function) and main.params == (y, x) and main.body is body
    f = Function([x], x)
    assert IRModule.from_expr(f)["main"] is f


def test_from_expr_with_existing_functions_and_types():
    lst = make_list()
    helper = Function([], const(1.0))
    mod = IRModule.from_expr(Call(GlobalVar("helper"), []), functions={"helper": helper},
                             type_defs={lst.header: lst})
    assert mod["helper"] is helper and mod["List"] is lst
    assert mod["main"].params == ()


def test_update_and_copy():
    x = var("x", shape=(2,))
    a = IRModule()
    gv_main = a.add("main", Function([x], x))
    a.add_type_def(make_list())
    b = a.copy()
    assert b is not a and b["main"] is a["main"] and b.get_global_var("main") is gv_main
    assert b["List"] is a["List"]
    b["extra"] = Function([x], x + x)
    assert "extra" not in a  # a copy is independent
    c = IRModule()
    c["main"] = Function([x], x * x)
    a.update(c)
    assert a["main"] is c["main"] and len(a) == 1
    assert a.get_global_var("main") is c.get_global_var("main")


def test_with_functions():
    x = var("x", shape=(2,))
    a = IRModule()
    a.add_type_def(make_list())
    gv = a.add("main", Function([x], x))
    g = Function([x], x + x)
    b = a.with_functions({gv: g})
    assert b["main"] is g and a["main"] is not g and b["List"] is a["List"]


def test_tuple_type_fields_of_vars():
    t = TupleType([f32(2), scalar_type("int32")])
    v = var("p", t)
    assert v.type_annotation.fields[1] == scalar_type("int32")
    assert isinstance(var("q", IncompleteType()).type_annotation, IncompleteType)
