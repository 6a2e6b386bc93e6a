"""The Relay text printer: exact expected texts for every construct.

Graph form as TVM prints it: non-final calls, tuples, projections, ifs, matches, closures and
reference operations are bound to numbered temporaries; variables, globals, ops, constructors and
scalar constants are inline; other constants go to ``meta[relay.Constant][i]``.
"""

import sys

import numpy as np
import pytest

from relaybench import op
from relaybench.ir import (Call, Clause, Constant, Function, GlobalVar, If, IRModule, Let, Match, Op,
                           PatternConstructor, PatternTuple, PatternVar, PatternWildcard, RefCreate,
                           RefRead, RefWrite, Tuple, TupleGetItem, Var, const, define_adt, var)
from relaybench.ir.printer import astext, format_scalar
from relaybench.ir.symbolic import SymVar, floordiv
from relaybench.ir.types import (FuncType, IncompleteType, RefType, TensorType, TupleType, TypeCall,
                                 TypeVar, scalar_type)
from relaybench.op.registry import OpDef, OpPattern, lookup_opdef, register
from relaybench.op.tensor import identity_rel


def f32(*shape):
    return TensorType(shape, "float32")


def text_attrs_op():
    """An operator with attributes of every kind, owned by these tests."""
    name = "testing.text_attrs"
    if lookup_opdef(name) is None:
        def normalize(values):
            if values["mode"] not in ("same", "valid"):
                raise ValueError(f"mode must be 'same' or 'valid', got {values['mode']!r}")
            return values
        register(OpDef(name, ("data",), identity_rel, OpPattern.ELEMWISE,
                       attrs={"axis": 0, "scale": 1.0, "mode": "same", "flag": False,
                              "sizes": (1, 1), "pads": ((0, 0), (0, 0)), "layout": None},
                       normalize=normalize))
    return Op.get(name)


# ---------------------------------------------------------------------------------------------
# modules and functions

def test_module_header_and_def():
    x = var("x", shape=(1, 3))
    mod = IRModule.from_expr(Function([x], op.nn.relu(x), ret_type=f32(1, 3)))
    assert astext(mod) == (
        '#[version = "0.0.5"]\n'
        "def @main(%x: Tensor[(1, 3), float32]) -> Tensor[(1, 3), float32] {\n"
        "  nn.relu(%x)\n"
        "}")


def test_lone_function_prints_without_header():
    x = var("x", shape=(2,))
    assert astext(Function([x], x)) == "fn (%x: Tensor[(2), float32]) {\n  %x\n}"


def test_lone_expression_declares_its_free_variables():
    x, y = var("x", shape=(2,)), var("y")
    assert astext(op.add(x, y)) == (
        "free_var %x: Tensor[(2), float32];\n"
        "free_var %y;\n"
        "add(%x, %y)")


def test_defs_are_separated_by_a_blank_line_and_keep_module_order():
    mod = IRModule()
    mod["b"] = Function([], const(1))
    mod["a"] = Function([], Call(mod.get_global_var("b"), []))
    assert astext(mod) == (
        '#[version = "0.0.5"]\n'
        "def @b() {\n  1\n}\n\n"
        "def @a() {\n  @b()\n}")


def test_function_attributes_follow_the_parameters():
    p = var("p0", shape=(1, 3))
    fused = Function([p], op.nn.relu(p)).with_attr("Primitive", 1)
    x = var("x", shape=(1, 3))
    assert astext(Function([x], Call(fused, [x]))) == (
        "fn (%x: Tensor[(1, 3), float32]) {\n"
        "  %0 = fn (%p0: Tensor[(1, 3), float32], Primitive=1) {\n"
        "    nn.relu(%p0)\n"
        "  };\n"
        "  %0(%x)\n"
        "}")


def test_type_parameters_of_defs_and_closures():
    a, b = TypeVar("A"), TypeVar("B")
    x = var("x", a)
    y = var("y", b)
    mod = IRModule()
    mod["id"] = Function([x], Function([y], y, b, [b]), ret_type=FuncType([b], b, [b]), type_params=[a])
    assert astext(mod) == (
        '#[version = "0.0.5"]\n'
        "def @id[A](%x: A) -> fn [B](B) -> B {\n"
        "  fn [B](%y: B) -> B {\n"
        "    %y\n"
        "  }\n"
        "}")


def test_shadowing_type_parameter_is_renamed():
    a1, a2 = TypeVar("A"), TypeVar("A")
    x, y = var("x", a1), var("y", a2)
    f = Function([x], Function([y], Tuple([x, y]), type_params=[a2]), type_params=[a1])
    assert astext(f) == (
        "fn [A](%x: A) {\n"
        "  fn [A1](%y: A1) {\n"
        "    (%x, %y)\n"
        "  }\n"
        "}")


# ---------------------------------------------------------------------------------------------
# graph form

def test_calls_are_bound_in_order_and_the_last_is_inline():
    x = var("x", shape=(1, 3))
    y = op.nn.relu(op.multiply(x, const(2.0)))
    assert astext(Function([x], op.add(y, x))) == (
        "fn (%x: Tensor[(1, 3), float32]) {\n"
        "  %0 = multiply(%x, 2f);\n"
        "  %1 = nn.relu(%0);\n"
        "  add(%1, %x)\n"
        "}")


def test_arguments_are_bound_depth_first_left_to_right():
    # Relay's order: each argument's subexpressions are bound before the next argument's, and a
    # node shared by both arguments where it is first reached
    a, b = var("a", shape=(2,)), var("b", shape=(2,))
    shared = op.exp(a)
    left = op.multiply(op.negative(a), shared)
    right = op.subtract(op.log(b), shared)
    assert astext(Function([a, b], op.add(left, right))) == (
        "fn (%a: Tensor[(2), float32], %b: Tensor[(2), float32]) {\n"
        "  %0 = negative(%a);\n"
        "  %1 = exp(%a);\n"
        "  %2 = multiply(%0, %1);\n"
        "  %3 = log(%b);\n"
        "  %4 = subtract(%3, %1);\n"
        "  add(%2, %4)\n"
        "}")


def test_nested_tuples_are_bound_depth_first_left_to_right():
    a, b = var("a", shape=(2,)), var("b", shape=(2,))
    body = Tuple([Tuple([op.negative(a), op.exp(a)]),
                  Tuple([op.log(b), Tuple([op.tanh(b), op.sigmoid(b)])]),
                  op.concatenate(Tuple([a, op.add(a, b)]))])
    assert astext(Function([a, b], body)) == (
        "fn (%a: Tensor[(2), float32], %b: Tensor[(2), float32]) {\n"
        "  %0 = negative(%a);\n"
        "  %1 = exp(%a);\n"
        "  %2 = (%0, %1);\n"
        "  %3 = log(%b);\n"
        "  %4 = tanh(%b);\n"
        "  %5 = sigmoid(%b);\n"
        "  %6 = (%4, %5);\n"
        "  %7 = (%3, %6);\n"
        "  %8 = add(%a, %b);\n"
        "  %9 = (%a, %8);\n"
        "  %10 = concatenate(%9);\n"
        "  (%2, %7, %10)\n"
        "}")


def test_shared_node_is_bound_once():
    x = var("x", shape=(2,))
    s = op.add(x, x)
    text = astext(Function([x], op.multiply(s, s)))
    assert text == "fn (%x: Tensor[(2), float32]) {\n  %0 = add(%x, %x);\n  multiply(%0, %0)\n}"


def test_shared_final_value_is_bound_too():
    x = var("x", shape=(2,))
    s = op.add(x, x)
    inner = Function([], s)
    text = astext(Function([x], Tuple([inner, s])))
    assert text == (
        "fn (%x: Tensor[(2), float32]) {\n"
        "  %0 = add(%x, %x);\n"
        "  %1 = fn () {\n"
        "    %0\n"
        "  };\n"
        "  (%1, %0)\n"
        "}")


def test_node_used_in_both_branches_is_bound_before_the_if():
    x, c = var("x", shape=(2,)), var("c", "bool")
    s = op.add(x, x)
    text = astext(Function([x, c], If(c, op.multiply(s, s), op.subtract(s, x))))
    assert text == (
        "fn (%x: Tensor[(2), float32], %c: bool) {\n"
        "  %0 = add(%x, %x);\n"
        "  if (%c) {\n"
        "    multiply(%0, %0)\n"
        "  } else {\n"
        "    subtract(%0, %x)\n"
        "  }\n"
        "}")


def test_node_used_only_in_one_branch_stays_in_it():
    x, c = var("x", shape=(2,)), var("c", "bool")
    s = op.add(x, x)
    text = astext(Function([x, c], If(c, op.multiply(s, s), x)))
    assert text == (
        "fn (%x: Tensor[(2), float32], %c: bool) {\n"
        "  if (%c) {\n"
        "    %0 = add(%x, %x);\n"
        "    multiply(%0, %0)\n"
        "  } else {\n"
        "    %x\n"
        "  }\n"
        "}")


def test_closure_numbering_follows_tvm_inner_first():
    x = var("x", shape=(2,))
    p = var("p", shape=(2,))
    g = Function([p], op.nn.relu(op.add(p, p)))
    text = astext(Function([x], Call(g, [x])))
    assert text == (
        "fn (%x: Tensor[(2), float32]) {\n"
        "  %1 = fn (%p: Tensor[(2), float32]) {\n"
        "    %0 = add(%p, %p);\n"
        "    nn.relu(%0)\n"
        "  };\n"
        "  %1(%x)\n"
        "}")


def test_tuples_projection_and_unit():
    x, y = var("x", shape=(2,)), var("y", shape=(2,))
    t = Tuple([x, y])
    text = astext(Function([x, y], Tuple([TupleGetItem(t, 1), Tuple([x]), Tuple([])])))
    assert text == (
        "fn (%x: Tensor[(2), float32], %y: Tensor[(2), float32]) {\n"
        "  %0 = (%x, %y);\n"
        "  %1 = %0.1;\n"
        "  %2 = (%x,);\n"
        "  %3 = ();\n"
        "  (%1, %2, %3)\n"
        "}")


def test_projection_of_a_variable_is_inline():
    t = var("t", TupleType([f32(2), f32(2)]))
    assert astext(Function([t], TupleGetItem(t, 0))) == (
        "fn (%t: (Tensor[(2), float32], Tensor[(2), float32])) {\n  %t.0\n}")


# ---------------------------------------------------------------------------------------------
# let, names

def test_let_chain():
    x = var("x", shape=(2,))
    a, b = var("a", shape=(2,)), var("b")
    e = Let(a, op.add(x, x), Let(b, op.multiply(a, op.add(a, x)), b))
    assert astext(Function([x], e)) == (
        "fn (%x: Tensor[(2), float32]) {\n"
        "  let %a: Tensor[(2), float32] = add(%x, %x);\n"
        "  %0 = add(%a, %x);\n"
        "  let %b = multiply(%a, %0);\n"
        "  %b\n"
        "}")


def test_two_variables_with_one_name_in_scope_are_renamed():
    x = var("x", shape=(2,))
    v1, v2 = var("v"), var("v")
    e = Let(v1, op.add(x, x), Let(v2, op.multiply(v1, v1), op.add(v2, v1)))
    assert astext(Function([x], e)) == (
        "fn (%x: Tensor[(2), float32]) {\n"
        "  let %v = add(%x, %x);\n"
        "  let %v1 = multiply(%v, %v);\n"
        "  add(%v1, %v)\n"
        "}")


def test_inner_parameter_shadowing_an_outer_one_is_renamed():
    x = var("x", shape=(2,))
    inner_x = var("x", shape=(2,))
    text = astext(Function([x], Function([inner_x], op.add(inner_x, x))))
    assert text == (
        "fn (%x: Tensor[(2), float32]) {\n"
        "  fn (%x1: Tensor[(2), float32]) {\n"
        "    add(%x1, %x)\n"
        "  }\n"
        "}")


def test_sibling_scopes_reuse_a_name():
    x = var("x", shape=(2,))
    p, q = var("p"), var("p")
    text = astext(Function([x], Tuple([Function([p], p), Function([q], q)])))
    assert "%0 = fn (%p) {\n    %p\n  };" in text
    assert "%1 = fn (%p) {\n    %p\n  };" in text


def test_names_that_would_clash_with_temporaries_or_break_the_syntax():
    # names that are not plain identifiers are quoted and kept (they used to be rewritten to
    # %v0 and %input_0_a, which lost the name); an empty name prints %v, as in Relay
    zero, dotted, empty = Var("0"), Var("input:0.a"), Var("")
    text = astext(Function([zero, dotted, empty], Tuple([zero, dotted, empty])))
    assert text == 'fn (%"0", %"input:0.a", %v) {\n  (%"0", %"input:0.a", %v)\n}'


def test_let_that_is_not_in_tail_position_is_parenthesized():
    x, v = var("x", shape=(2,)), var("v")
    text = astext(Function([x], op.add(Let(v, op.negative(x), v), x)))
    assert text == (
        "fn (%x: Tensor[(2), float32]) {\n"
        "  %0 = (\n"
        "    let %v = negative(%x);\n"
        "    %v\n"
        "  );\n"
        "  add(%0, %x)\n"
        "}")


def test_recursive_let_closure():
    n = var("n", "int32")
    f = var("f", FuncType([scalar_type("int32")], scalar_type("int32")))
    body = If(op.equal(n, const(0)), const(0), Call(f, [op.subtract(n, const(1))]))
    e = Let(f, Function([n], body), Call(f, [const(10)]))
    assert astext(e) == (
        "let %f: fn (int32) -> int32 = fn (%n: int32) {\n"
        "  %0 = equal(%n, 0);\n"
        "  if (%0) {\n"
        "    0\n"
        "  } else {\n"
        "    %1 = subtract(%n, 1);\n"
        "    %f(%1)\n"
        "  }\n"
        "};\n"
        "%f(10)")


# ---------------------------------------------------------------------------------------------
# constants and attributes

@pytest.mark.parametrize("value, dtype, text", [
    (1, "int32", "1"),
    (-7, "int32", "-7"),
    (0, "int64", "0i64"),
    (-5, "int64", "-5i64"),
    (3, "int8", "3i8"),
    (12, "int16", "12i16"),
    (7, "uint8", "7u8"),
    (9, "uint16", "9u16"),
    (9, "uint32", "9u32"),
    (2 ** 64 - 1, "uint64", "18446744073709551615u64"),
    (1.0, "float32", "1f"),
    (2.5, "float32", "2.5f"),
    (-0.5, "float32", "-0.5f"),
    (0.1, "float32", "0.1f"),
    (1e30, "float32", "1e+30f"),
    (-0.0, "float32", "-0f"),
    (1.0, "float64", "1f64"),
    (0.1, "float64", "0.1f64"),
    (1.0, "float16", "1f16"),
    (0.333, "float16", "0.333f16"),
    (True, "bool", "True"),
    (False, "bool", "False"),
])
def test_scalar_constants_inline(value, dtype, text):
    assert format_scalar(np.array(value, dtype=dtype)) == text
    assert astext(Function([], Constant(np.array(value, dtype=dtype)))) == f"fn () {{\n  {text}\n}}"


def test_float32_scalar_prints_the_shortest_exact_digits():
    assert format_scalar(np.array(np.float32(1) / np.float32(3))) == "0.33333334f"
    assert format_scalar(np.array(16777217, dtype="float32")) == "16777216f"
    assert format_scalar(np.array(123456789, dtype="float32")) == "123456790f"
    assert format_scalar(np.array(1e-5, dtype="float32")) == "1e-05f"
    assert format_scalar(np.array(1e20, dtype="float64")) == "1e+20f64"


def test_non_finite_and_array_constants_go_to_the_metadata_section():
    x = var("x", shape=(3,))
    w = const(np.array([1.0, 2.0, 3.0], dtype="float32"))
    inf = const(np.float32("inf"))
    mask = const(np.array([[True, False]]))
    text = astext(Function([x], Tuple([op.add(x, w), op.multiply(x, w), inf, mask])))
    assert text == (
        "fn (%x: Tensor[(3), float32]) {\n"
        "  %0 = add(%x, meta[relay.Constant][0]);\n"
        "  %1 = multiply(%x, meta[relay.Constant][0]);\n"
        "  (%0, %1, meta[relay.Constant][1], meta[relay.Constant][2])\n"
        "}\n"
        "#[metadata]\n"
        "{\n"
        '  "relay.Constant": [\n'
        '    {"dtype": "float32", "shape": [3], "data": "AACAPwAAAEAAAEBA"},\n'
        '    {"dtype": "float32", "shape": [], "data": "AACAfw=="},\n'
        '    {"dtype": "bool", "shape": [1, 2], "data": "AQA="}\n'
        "  ]\n"
        "}")


def test_show_meta_data_false_omits_the_section():
    x = var("x", shape=(3,))
    w = const(np.zeros(3, dtype="float32"))
    text = astext(Function([x], op.add(x, w)), show_meta_data=False)
    assert text == "fn (%x: Tensor[(3), float32]) {\n  add(%x, meta[relay.Constant][0])\n}"


def test_metadata_of_a_module_is_numbered_across_defs():
    mod = IRModule()
    a = const(np.zeros(2, dtype="float32"))
    b = const(np.ones(2, dtype="int32"))
    mod["f"] = Function([], a)
    mod["g"] = Function([], Tuple([b, a]))
    text = astext(mod)
    assert "def @f() {\n  meta[relay.Constant][0]\n}" in text
    assert "(meta[relay.Constant][1], meta[relay.Constant][0])" in text
    assert text.count('"dtype"') == 2


def test_conv2d_prints_only_attributes_that_differ_from_the_defaults():
    x, w = var("x", shape=(1, 3, 8, 8)), var("w", shape=(64, 3, 3, 3))
    c = op.nn.conv2d(x, w, padding=(1, 1), channels=64, kernel_size=(3, 3))
    assert astext(Function([x, w], c)) == (
        "fn (%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(64, 3, 3, 3), float32]) {\n"
        "  nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=64, kernel_size=[3, 3])\n"
        "}")
    assert "nn.conv2d(%x, %w)" in astext(Function([x, w], op.nn.conv2d(x, w)))


def test_attribute_values_of_every_kind():
    attr_op = text_attrs_op()
    x = var("x", shape=(2,))
    call = Call(attr_op, [x], {"axis": -1, "scale": 0.5, "mode": "valid", "flag": True,
                               "sizes": (2, 3), "pads": ((1, 2), (3, 4)), "layout": 'say "hi"\n'})
    assert astext(Function([x], call)) == (
        "fn (%x: Tensor[(2), float32]) {\n"
        '  testing.text_attrs(%x, axis=-1, scale=0.5f, mode="valid", flag=True, sizes=[2, 3], '
        'pads=[[1, 2], [3, 4]], layout="say \\"hi\\"\\n")\n'
        "}")
    default = Call(attr_op, [x], {"scale": 1.0, "layout": None, "sizes": [1, 1]})
    assert astext(Function([x], default)) == "fn (%x: Tensor[(2), float32]) {\n  testing.text_attrs(%x)\n}"


def test_attrs_of_a_call_to_a_non_operator_are_all_printed():
    f = var("f")
    assert astext(Function([f], Call(f, [], {"k": 1}))) == "fn (%f) {\n  %f(k=1)\n}"


# ---------------------------------------------------------------------------------------------
# control flow, ADTs, references

def test_if_else():
    c, x = var("c", "bool"), var("x", shape=(2,))
    assert astext(Function([c, x], If(c, x, op.negative(x)))) == (
        "fn (%c: bool, %x: Tensor[(2), float32]) {\n"
        "  if (%c) {\n"
        "    %x\n"
        "  } else {\n"
        "    negative(%x)\n"
        "  }\n"
        "}")


def list_module():
    List = define_adt("List", ["A"], lambda L, A: {"Cons": [A, L(A)], "Nil": []})
    mod = IRModule()
    mod.add_type_def(List)
    length = GlobalVar("length")
    a = TypeVar("A")
    xs, rest = var("xs", TypeCall(List.header, [a])), var("rest")
    body = Match(xs, [
        Clause(PatternConstructor(List["Cons"], [PatternWildcard(), PatternVar(rest)]),
               op.add(const(1), Call(length, [rest]))),
        Clause(PatternConstructor(List["Nil"]), const(0)),
    ])
    mod[length] = Function([xs], body, scalar_type("int32"), [a])
    return mod, List


def test_adt_definition_and_recursive_length_with_match():
    mod, _ = list_module()
    assert astext(mod) == (
        '#[version = "0.0.5"]\n'
        "type List[A] {\n"
        "  Cons(A, List[A]),\n"
        "  Nil,\n"
        "}\n"
        "\n"
        "def @length[A](%xs: List[A]) -> int32 {\n"
        "  match (%xs) {\n"
        "    Cons(_, %rest) => {\n"
        "      %0 = @length(%rest);\n"
        "      add(1, %0)\n"
        "    },\n"
        "    Nil => 0,\n"
        "  }\n"
        "}")


def test_partial_match_tuple_patterns_and_constructor_calls():
    _, List = list_module()
    p = var("p", TupleType([scalar_type("int32"), TypeCall(List.header, [scalar_type("int32")])]))
    h, t = var("h"), var("t")
    pat = PatternTuple([PatternVar(h), PatternConstructor(List["Cons"], [PatternWildcard(), PatternVar(t)])])
    m = Match(p, [Clause(pat, List["Cons"](h, t))], complete=False)
    assert astext(Function([p], m)) == (
        "fn (%p: (int32, List[int32])) {\n"
        "  match? (%p) {\n"
        "    (%h, Cons(_, %t)) => Cons(%h, %t),\n"
        "  }\n"
        "}")


def test_adt_without_type_parameters():
    nat = define_adt("nat", [], lambda nat: {"zero": [], "succ": [nat()]})
    assert astext(nat) == "type nat {\n  zero,\n  succ(nat),\n}"


def test_references():
    x, r = var("x", shape=(2,)), var("r")
    e = Let(r, RefCreate(x), Tuple([RefWrite(r, op.add(x, x)), RefRead(r)]))
    assert astext(Function([x], e)) == (
        "fn (%x: Tensor[(2), float32]) {\n"
        "  let %r = ref(%x);\n"
        "  %0 = add(%x, %x);\n"
        "  %1 = ref_write(%r, %0);\n"
        "  %2 = ref_read(%r);\n"
        "  (%1, %2)\n"
        "}")


# ---------------------------------------------------------------------------------------------
# types

@pytest.mark.parametrize("t, text", [
    (scalar_type("float32"), "float32"),
    (scalar_type("bool"), "bool"),
    (f32(1, 3), "Tensor[(1, 3), float32]"),
    (f32(3), "Tensor[(3), float32]"),
    (TensorType((None, 3), "int8"), "Tensor[(?, 3), int8]"),
    (TensorType((SymVar("n"), 2 * SymVar("n") + 1), "float32"), "Tensor[(n, 2*n + 1), float32]"),
    (TensorType((floordiv(SymVar("n"), 2),), "float32"), "Tensor[(n // 2), float32]"),
    (TupleType([f32(1), scalar_type("int32")]), "(Tensor[(1), float32], int32)"),
    (TupleType([scalar_type("int32")]), "(int32,)"),
    (TupleType([]), "()"),
    (FuncType([f32(2), scalar_type("int32")], f32(2)), "fn (Tensor[(2), float32], int32) -> Tensor[(2), float32]"),
    (RefType(scalar_type("int64")), "Ref[int64]"),
    (IncompleteType(), "_"),
])
def test_type_text(t, text):
    assert astext(t) == text


def test_polymorphic_func_type_and_adt_instance():
    a = TypeVar("A")
    List = define_adt("List", ["A"], lambda L, A: {"Cons": [A, L(A)], "Nil": []})
    assert astext(FuncType([a], TypeCall(List.header, [a]), [a])) == "fn [A](A) -> List[A]"


def test_deeply_nested_type_prints():
    t = scalar_type("int32")
    for _ in range(20000):
        t = TupleType([t])
    text = astext(t)
    assert text.startswith("((((") and text.endswith("int32" + ",)" * 20000)


# ---------------------------------------------------------------------------------------------
# checked types

def typed_program():
    x = var("x", shape=(1, 3))
    y = op.nn.relu(x)
    y.set_checked_type(f32(1, 3))
    z = op.add(y, x)
    z.set_checked_type(f32(1, 3))
    f = Function([x], z)
    f.set_checked_type(FuncType([f32(1, 3)], f32(1, 3)))
    return IRModule.from_expr(f), x, y, z, f


def test_checked_types_are_shown_after_bindings_and_the_final_value():
    mod, *_ = typed_program()
    assert astext(mod) == (
        '#[version = "0.0.5"]\n'
        "def @main(%x: Tensor[(1, 3), float32]) /* ty=Tensor[(1, 3), float32] */ {\n"
        "  %0 = nn.relu(%x) /* ty=Tensor[(1, 3), float32] */;\n"
        "  add(%0, %x) /* ty=Tensor[(1, 3), float32] */\n"
        "}")


def test_show_types_false_hides_them():
    mod, *_ = typed_program()
    assert astext(mod, show_types=False) == (
        '#[version = "0.0.5"]\n'
        "def @main(%x: Tensor[(1, 3), float32]) {\n"
        "  %0 = nn.relu(%x);\n"
        "  add(%0, %x)\n"
        "}")


def test_checked_type_of_a_let_value_and_of_a_closure():
    x, v = var("x", shape=(2,)), var("v")
    a = op.add(x, x)
    a.set_checked_type(f32(2))
    g = Function([], x)
    g.set_checked_type(FuncType([], f32(2)))
    e = Function([x], Let(v, a, Tuple([g, v])))
    assert astext(e) == (
        "fn (%x: Tensor[(2), float32]) {\n"
        "  let %v = add(%x, %x) /* ty=Tensor[(2), float32] */;\n"
        "  %0 = fn () /* ty=Tensor[(2), float32] */ {\n"
        "    %x\n"
        "  } /* ty=fn () -> Tensor[(2), float32] */;\n"
        "  (%0, %v)\n"
        "}")


# ---------------------------------------------------------------------------------------------
# marking a node

def test_mark_underlines_a_binding():
    mod, x, y, z, f = typed_program()
    assert astext(mod, show_types=False, mark=y) == (
        '#[version = "0.0.5"]\n'
        "def @main(%x: Tensor[(1, 3), float32]) {\n"
        "  %0 = nn.relu(%x);\n"
        "  ^^^^^^^^^^^^^^^^\n"
        "  add(%0, %x)\n"
        "}")


def test_mark_underlines_the_final_value_and_a_variable():
    mod, x, y, z, f = typed_program()
    assert astext(mod, mark=z).splitlines()[3:5] == [
        "  add(%0, %x) /* ty=Tensor[(1, 3), float32] */",
        "  ^^^^^^^^^^^",
    ]
    assert astext(mod, show_types=False, mark=x).splitlines()[1:3] == [
        "def @main(%x: Tensor[(1, 3), float32]) {",
        "          ^^",
    ]


def test_mark_inside_a_nested_block():
    x, c = var("x", shape=(2,)), var("c", "bool")
    bad = op.negative(x)
    text = astext(Function([x, c], If(c, op.add(bad, x), x)), mark=bad)
    assert text.splitlines()[2:4] == [
        "    %0 = negative(%x);",
        "    ^^^^^^^^^^^^^^^^^",
    ]


def test_mark_of_a_node_not_in_the_program_prints_it_unmarked():
    mod, *_ = typed_program()
    assert astext(mod, mark=op.negative(var("y"))) == astext(mod)


# ---------------------------------------------------------------------------------------------
# scale

def test_100k_op_chain_prints_in_a_few_seconds():
    x = var("x", shape=(4,))
    y = x
    one, two = const(1.0), const(2.0)
    for i in range(100_000):
        y = op.add(y, one) if i % 2 == 0 else op.multiply(y, two)
    text = astext(IRModule.from_expr(Function([x], y)))
    lines = text.splitlines()
    assert sys.getrecursionlimit() < 20000
    assert len(lines) == 100_003  # header, def, 99,999 bindings, the last call, }
    assert lines[2] == "  %0 = add(%x, 1f);"
    assert lines[-3] == "  %99998 = add(%99997, 1f);"
    assert lines[-2] == "  multiply(%99998, 2f)"


def test_deep_nesting_of_blocks_prints_without_recursion():
    c = var("c", "bool")
    e = const(0)
    for i in range(1500):
        e = If(c, const(i), e)
    text = astext(Function([c], e))
    assert text.count("if (%c) {") == 1500
    assert text.splitlines()[-2] == "  }"
