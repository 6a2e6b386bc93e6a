"""The Relay text parser: the nodes it builds, and its errors with exact lines and columns."""

import sys

import numpy as np
import pytest

from relaybench import op
from relaybench.errors import ParseError
from relaybench.ir import (Call, Constant, Constructor, Function, If, Let, Match, Op,
                           PatternConstructor, PatternTuple, PatternVar, PatternWildcard, RefCreate,
                           RefRead, RefWrite, Tuple, TupleGetItem, Var)
from relaybench.ir.parser import MAX_DEPTH, parse, parse_expr
from relaybench.ir.symbolic import ANY, SymVar, floordiv, mod
from relaybench.ir.types import (FuncType, IncompleteType, RefType, TensorType, TupleType, TypeCall,
                                 TypeVar, scalar_type)

H = '#[version = "0.0.5"]\n'


def main_body(text):
    return parse(H + text)["main"].body


def f32(*shape):
    return TensorType(shape, "float32")


def parse_error(text, parse_fn=parse) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse_fn(text)
    return info.value


# ---------------------------------------------------------------------------------------------
# the header

def test_missing_header_asks_for_it():
    err = parse_error("def @main() { 1 }")
    assert (err.line, err.column) == (1, 1)
    assert '#[version = "0.0.5"]' in err.message


def test_other_version_is_refused():
    err = parse_error('#[version = "0.0.4"]\ndef @main() { 1 }')
    assert (err.line, err.column) == (1, 13)
    assert err.message == 'unsupported version "0.0.4"; this parser reads #[version = "0.0.5"]'


def test_error_text_shows_the_line_and_a_caret():
    err = parse_error(H + "def @main(%x: Tensor[(1, 3), float32] {\n  %x\n}", lambda t: parse(t, "model.rly"))
    assert str(err) == (
        "model.rly:2:39: expected ')' but found '{'\n"
        "  def @main(%x: Tensor[(1, 3), float32] {\n"
        "                                        ^")
    assert err.source_name == "model.rly"
    assert err.expected == "')'"


def test_empty_module_and_top_level_expression():
    assert len(parse(H)) == 0
    mod = parse(H + "fn (%x: float32) { %x }")
    assert isinstance(mod["main"], Function)


# ---------------------------------------------------------------------------------------------
# functions, bindings and lets

def test_def_parameters_return_type_and_body():
    mod = parse(H + "def @main(%x: Tensor[(1, 3), float32], %y) -> Tensor[(1, 3), float32] {\n"
                    "  nn.relu(%x)\n}")
    f = mod["main"]
    assert [p.name_hint for p in f.params] == ["x", "y"]
    assert f.params[0].type_annotation == f32(1, 3)
    assert f.params[1].type_annotation is None
    assert f.ret_type == f32(1, 3)
    assert isinstance(f.body, Call) and f.body.op is Op.get("nn.relu")
    assert f.body.args[0] is f.params[0]
    assert mod.get_global_var("main").name_hint == "main"


def test_graph_bindings_are_shared_nodes():
    body = main_body("def @main(%x: float32) {\n"
                     "  %0 = add(%x, %x);\n"
                     "  %1 = multiply(%0, %0) /* ty=float32 */;\n"
                     "  (%1, %0)\n}")
    assert isinstance(body, Tuple)
    mul, add = body.fields
    assert mul.args[0] is mul.args[1] is add
    assert add.op.name == "add"


def test_inline_nested_calls_are_distinct_nodes():
    body = main_body("def @main(%x: float32) { multiply(add(%x, %x), add(%x, %x)) }")
    assert body.args[0] is not body.args[1]


def test_let_chain_with_annotations_and_shadowing():
    body = main_body("def @main(%x: float32) {\n"
                     "  let %y: float32 = add(%x, 1f);\n"
                     "  let %y = multiply(%y, %y);\n"
                     "  %y\n}")
    assert isinstance(body, Let) and isinstance(body.body, Let)
    first, second = body.var, body.body.var
    assert first is not second
    assert first.type_annotation == scalar_type("float32") and second.type_annotation is None
    assert body.body.value.args[0] is first
    assert body.body.body is second


def test_parenthesized_block():
    body = main_body("def @main(%x: float32) {\n  %0 = (\n    let %v = %x;\n    %v\n  );\n  add(%0, %x)\n}")
    assert isinstance(body.args[0], Let)


def test_recursive_let_closure_sees_itself():
    body = main_body("def @main() {\n"
                     "  let %f = fn (%n: int32) -> int32 { %f(%n) };\n"
                     "  %f(1)\n}")
    assert body.value.body.op is body.var


def test_closure_with_type_parameters_scoped_over_its_signature_and_body():
    f = parse_expr("fn [A](%x: A) -> A { let %y: A = %x; %y }")
    (a,) = f.type_params
    assert isinstance(a, TypeVar) and a.name_hint == "A"
    assert f.params[0].type_annotation is a and f.ret_type is a
    assert f.body.var.type_annotation is a


def test_def_type_parameters_and_function_attributes():
    mod = parse(H + "def @f[A, B](%x: A, %y: B, Primitive=1, Name=\"k\") -> (A, B) { (%x, %y) }")
    f = mod["f"]
    a, b = f.type_params
    assert f.ret_type == TupleType([a, b])
    assert dict(f.attrs) == {"Primitive": 1, "Name": "k"}


def test_globals_may_refer_to_later_definitions():
    mod = parse(H + "def @even(%n: int32) -> bool {\n"
                    "  if (equal(%n, 0)) { True } else { @odd(subtract(%n, 1)) }\n"
                    "}\n"
                    "def @odd(%n: int32) -> bool {\n"
                    "  if (equal(%n, 0)) { False } else { @even(subtract(%n, 1)) }\n"
                    "}\n")
    even, odd = mod.get_global_var("even"), mod.get_global_var("odd")
    assert mod["even"].body.false_branch.op is odd
    assert mod["odd"].body.false_branch.op is even


def test_free_var_declarations_in_a_lone_expression():
    e = parse_expr("free_var %x: Tensor[(2), float32];\nfree_var %y;\nadd(%x, %y)")
    x, y = e.args
    assert isinstance(x, Var) and x.type_annotation == f32(2) and y.type_annotation is None


def test_lone_expression_looks_names_up_in_a_module():
    mod = parse(H + "type List[A] { Cons(A, List[A]), Nil }\ndef @f() { 1 }")
    e = parse_expr("Cons(@f(), Nil)", mod=mod)
    assert e.op is mod.get_constructor("Cons")
    assert e.args[0].op is mod.get_global_var("f")


# ---------------------------------------------------------------------------------------------
# calls, attributes, operators

def test_calls_of_globals_locals_constructors_and_parenthesized_callees():
    mod = parse(H + "type T { K(int32) }\n"
                    "def @g(%a: int32) { %a }\n"
                    "def @main(%f: fn (int32) -> int32) {\n"
                    "  (@g(1), %f(2), K(3), (%f)(4), (fn (%z: int32) { %z })(5))\n}")
    g, f_call, k, paren, lam = mod["main"].body.fields
    assert g.op is mod.get_global_var("g")
    assert f_call.op is mod["main"].params[0]
    assert isinstance(k.op, Constructor) and k.op.name_hint == "K"
    assert paren.op is mod["main"].params[0]
    assert isinstance(lam.op, Function)


def test_op_attributes_are_completed_and_normalized():
    body = main_body("def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {\n"
                     "  nn.conv2d(%x, %w, padding=[1, 1], channels=4, kernel_size=[3, 3])\n}")
    assert body.attrs.padding == (1, 1, 1, 1)
    assert body.attrs.kernel_size == (3, 3)
    assert body.attrs.channels == 4
    assert body.attrs.strides == (1, 1)  # a default
    assert body.attrs == op.nn.conv2d.opdef.make_attrs({"padding": (1, 1), "channels": 4, "kernel_size": (3, 3)})


def test_attribute_value_kinds():
    f = parse_expr('fn (%f) { %f(a=1, b=-2, c=0.5f, d=1e-05, e="NCHW", g=True, h=False, '
                   'i=None, j=[1, [2, 3]], k=(4, 5), l=-1.5) }')
    assert f.body.op is f.params[0]
    attrs = dict(f.body.attrs)
    assert attrs == {"a": 1, "b": -2, "c": 0.5, "d": 1e-05, "e": "NCHW", "g": True, "h": False,
                     "i": None, "j": (1, (2, 3)), "k": (4, 5), "l": -1.5}
    assert isinstance(attrs["c"], float) and isinstance(attrs["a"], int)


@pytest.mark.parametrize("call, line, column, message", [
    ("nn.conv2d(%x, %x, paddin=[1, 1])", 3, 21,
     "nn.conv2d: unknown attribute 'paddin' (it takes: "),
    ("nn.conv2d(%x, %x, channels=2, padding=[1, 1, 1])", 3, 33,
     "nn.conv2d: padding must have 1 or 2 or 4 values, got (1, 1, 1)"),
])
def test_attribute_errors_point_at_the_attribute(call, line, column, message):
    err = parse_error(H + f"def @main(%x: float32) {{\n  {call}\n}}")
    assert (err.line, err.column) == (line, column)
    assert err.message.startswith(message)


def test_unknown_operator_is_named_with_close_matches():
    err = parse_error(H + "def @main(%x: float32) {\n  nn.rleu(%x)\n}")
    assert (err.line, err.column) == (3, 3)
    # the closest name comes first; more nn.* ops may follow it
    assert err.message.startswith("unknown operator 'nn.rleu'; did you mean nn.relu")


@pytest.mark.parametrize("text, expected", [
    ("%a + %b * %c", ("add", "a", ("multiply", "b", "c"))),
    ("%a * %b + %c", ("add", ("multiply", "a", "b"), "c")),
    ("%a - %b - %c", ("subtract", ("subtract", "a", "b"), "c")),
    ("%a / %b / %c", ("divide", ("divide", "a", "b"), "c")),
    ("(%a + %b) * %c", ("multiply", ("add", "a", "b"), "c")),
    ("%a < %b == %c", ("equal", ("less", "a", "b"), "c")),
    ("%a + %b >= %c - %a", ("greater_equal", ("add", "a", "b"), ("subtract", "c", "a"))),
    ("%a != %b", ("not_equal", "a", "b")),
    ("%a <= %b", ("less_equal", "a", "b")),
    ("%a > %b", ("greater", "a", "b")),
])
def test_binary_operators_desugar_with_relay_precedences(text, expected):
    e = parse_expr(f"free_var %a: float32; free_var %b: float32; free_var %c: float32; {text}")

    def shape(node):
        if isinstance(node, Var):
            return node.name_hint
        return (node.op.name,) + tuple(shape(a) for a in node.args)
    assert shape(e) == expected


def test_unary_minus_makes_a_negative_literal_and_binary_minus_subtracts():
    e = parse_expr("free_var %x: int32; (-1, %x - 1, %x -2, add(%x, -3i64), -2.5f)")
    neg, sub1, sub2, call, negf = e.fields
    assert neg.data.item() == -1 and neg.data.dtype == np.int32
    assert sub1.op.name == "subtract" and sub1.args[1].data.item() == 1
    assert sub2.op.name == "subtract" and sub2.args[1].data.item() == 2
    assert call.args[1].data.item() == -3 and call.args[1].data.dtype == np.int64
    assert negf.data.item() == -2.5
    assert parse_error("free_var %x: int32; -%x", parse_expr).message.startswith("unary '-' applies only")


# ---------------------------------------------------------------------------------------------
# literals

@pytest.mark.parametrize("text, dtype, value", [
    ("1", "int32", 1),
    ("0i64", "int64", 0),
    ("3i8", "int8", 3),
    ("12i16", "int16", 12),
    ("5i32", "int32", 5),
    ("7u8", "uint8", 7),
    ("9u16", "uint16", 9),
    ("9u32", "uint32", 9),
    ("18446744073709551615u64", "uint64", 2 ** 64 - 1),
    ("1f", "float32", 1.0),
    ("2.5f", "float32", 2.5),
    ("2.5", "float32", 2.5),
    ("1e+30f", "float32", np.float32(1e30)),
    ("1e-05f", "float32", np.float32(1e-5)),
    ("0.1f", "float32", np.float32(0.1)),
    ("1f64", "float64", 1.0),
    ("0.1f64", "float64", 0.1),
    ("1f16", "float16", 1.0),
    ("True", "bool", True),
    ("False", "bool", False),
])
def test_scalar_literals(text, dtype, value):
    c = parse_expr(text)
    assert isinstance(c, Constant) and c.data.shape == ()
    assert c.data.dtype.name == dtype
    assert c.data.item() == value


def test_negative_zero_keeps_its_sign():
    c = parse_expr("-0f")
    assert c.data.item() == 0.0 and np.signbit(c.data)


@pytest.mark.parametrize("text, message", [
    ("300i8", "literal 300i8 does not fit in int8"),
    ("-1u8", "literal -1u8 does not fit in uint8"),
    # without a suffix, an integer too big for int32 is an int64 (as in Relay); with i32, an error
    ("2147483648i32", "literal 2147483648i32 does not fit in int32"),
    ("9223372036854775808", "literal 9223372036854775808 does not fit in int64"),
    ("1.5i64", "integer literal 1.5i64 has a fraction or an exponent"),
    ("1q", "unknown literal suffix 'q' in 1q"),
])
def test_bad_literals(text, message):
    err = parse_error(f"(1, {text})", parse_expr)
    assert (err.line, err.column) == (1, 5)
    assert err.message.startswith(message)


# ---------------------------------------------------------------------------------------------
# comments and metadata

def test_comments_are_ignored():
    body = main_body("// a line comment\n"
                     "def @main(%x: float32) /* ty=float32 */ {\n"
                     "  /* nested /* block */ comment */\n"
                     "  %0 = add(%x, %x) /* ty=float32 */; // trailing\n"
                     "  %0\n}")
    assert body.op.name == "add"


def test_meta_constants_come_from_the_metadata_section():
    text = (H + "def @main(%x: Tensor[(3), float32]) {\n"
            "  %0 = add(%x, meta[relay.Constant][0]);\n"
            "  (%0, meta[relay.Constant][0], meta[relay.Constant][1])\n"
            "}\n"
            "#[metadata]\n"
            '{"relay.Constant": [\n'
            '  {"dtype": "float32", "shape": [3], "data": "AACAPwAAAEAAAEBA"},\n'
            '  {"dtype": "int64", "shape": [2, 1], "data": "BwAAAAAAAAD4/////////w=="}\n'
            "]}")
    body = parse(text)["main"].body
    add, w, idx = body.fields
    assert add.args[1] is w
    np.testing.assert_array_equal(w.data, np.array([1, 2, 3], dtype="float32"))
    assert idx.data.dtype == np.int64 and idx.data.tolist() == [[7], [-8]]


def test_missing_metadata_entry_or_section():
    text = H + "def @main() {\n  meta[relay.Constant][1]\n}\n"
    err = parse_error(text + '#[metadata]\n{"relay.Constant": [{"dtype": "int32", "shape": [], "data": "AQAAAA=="}]}')
    assert (err.line, err.column) == (3, 3)
    assert err.message == "meta[relay.Constant][1] is not in the #[metadata] section (it holds 1 constants)"
    err = parse_error(text)
    assert (err.line, err.column) == (3, 3)
    assert "the text has none" in err.message


def test_damaged_metadata_section():
    err = parse_error(H + "def @main() { 1 }\n#[metadata]\n{\"relay.Constant\": [}")
    assert (err.line, err.column) == (4, 21)
    assert err.message.startswith("the #[metadata] section is not valid JSON")
    err = parse_error(H + "def @main() { 1 }\n#[metadata]\n"
                      '{"relay.Constant": [{"dtype": "int32", "shape": [2], "data": "AQAAAA=="}]}')
    assert "bad entry relay.Constant[0]" in err.message and "4 bytes of data for shape [2]" in err.message


# ---------------------------------------------------------------------------------------------
# types

def param_type(text):
    return parse(H + f"type List[A] {{ Cons(A, List[A]), Nil }}\ndef @main(%x: {text}) {{ %x }}")["main"].params[0].type_annotation


@pytest.mark.parametrize("text, expected", [
    ("float32", scalar_type("float32")),
    ("Tensor[(1, 3), float32]", f32(1, 3)),
    ("Tensor[(3), float32]", f32(3)),
    ("Tensor[(3,), float32]", f32(3)),
    ("Tensor[(), int8]", scalar_type("int8")),
    ("Tensor[(?, 3), bool]", TensorType((ANY, 3), "bool")),
    ("Tensor[(n, 2*n + 1), float32]", TensorType((SymVar("n"), 2 * SymVar("n") + 1), "float32")),
    ("Tensor[(n // 2, n % 3, (n + 1) * m), float32]",
     TensorType((floordiv(SymVar("n"), 2), mod(SymVar("n"), 3), (SymVar("n") + 1) * SymVar("m")), "float32")),
    ("Tensor[(-n + 5), float32]", TensorType((5 - SymVar("n"),), "float32")),
    ("(int32, Tensor[(2), float32])", TupleType([scalar_type("int32"), f32(2)])),
    ("(int32,)", TupleType([scalar_type("int32")])),
    ("(int32)", scalar_type("int32")),
    ("()", TupleType([])),
    ("fn (int32, float32) -> bool", FuncType([scalar_type("int32"), scalar_type("float32")], scalar_type("bool"))),
    ("Ref[int64]", RefType(scalar_type("int64"))),
])
def test_types(text, expected):
    assert param_type(text) == expected


def test_incomplete_adt_and_polymorphic_function_types():
    assert isinstance(param_type("_"), IncompleteType)
    t = param_type("List[Tensor[(2), float32]]")
    assert isinstance(t, TypeCall) and t.func.name_hint == "List" and t.args == (f32(2),)
    ft = param_type("fn [B](B) -> List[B]")
    (b,) = ft.type_params
    assert ft.arg_types == (b,) and ft.ret_type.args == (b,)


@pytest.mark.parametrize("text, line, column, message", [
    ("def @main(%x: Foo) { %x }", 2, 15, "unknown type Foo"),
    ("def @main(%x: Tensor[(1, 3), float33]) { %x }", 2, 30, "unknown dtype float33; did you mean float32"),
    ("def @main(%x: Tensor[(1, n // m), float32]) { %x }", 2, 28, "bad dimension expression"),
    ("def @main(%x: Tensor[(1, %), float32]) { %x }", 2, 26, "expected a dimension"),
])
def test_type_errors(text, line, column, message):
    err = parse_error(H + text)
    assert (err.line, err.column) == (line, column)
    assert err.message.startswith(message)


# ---------------------------------------------------------------------------------------------
# ADTs and match

LIST = ("type List[A] {\n"
        "  Cons(A, List[A]),\n"
        "  Nil,\n"
        "}\n")


def test_type_definitions_recursive_and_referring_to_earlier_ones():
    mod = parse(H + LIST + "type Tree[A] { Rose(A, List[Tree[A]]) }\ntype nat { zero, succ(nat) }\n")
    lst, tree, nat = mod.get_type("List"), mod.get_type("Tree"), mod.get_type("nat")
    cons, nil = lst.constructors
    (a,) = lst.type_vars
    assert (cons.name_hint, cons.tag, nil.name_hint, nil.tag) == ("Cons", 0, "Nil", 1)
    assert cons.inputs == (a, TypeCall(lst.header, [a]))
    assert cons.belong_to is lst.header
    rose = tree["Rose"]
    (ta,) = tree.type_vars
    assert rose.inputs[1] == TypeCall(lst.header, [TypeCall(tree.header, [ta])])
    assert nat["succ"].inputs == (TypeCall(nat.header, []),)


def test_recursive_length_with_match():
    mod = parse(H + LIST + "def @length[A](%xs: List[A]) -> int32 {\n"
                           "  match (%xs) {\n"
                           "    Cons(_, %rest) => {\n"
                           "      %0 = @length(%rest);\n"
                           "      add(1, %0)\n"
                           "    },\n"
                           "    Nil => 0,\n"
                           "  }\n"
                           "}\n")
    f = mod["length"]
    m = f.body
    assert isinstance(m, Match) and m.complete and m.data is f.params[0]
    cons_clause, nil_clause = m.clauses
    pat = cons_clause.lhs
    assert isinstance(pat, PatternConstructor) and pat.constructor is mod.get_constructor("Cons")
    wild, rest = pat.patterns
    assert isinstance(wild, PatternWildcard) and isinstance(rest, PatternVar)
    assert cons_clause.rhs.args[1].args[0] is rest.var
    assert cons_clause.rhs.args[1].op is mod.get_global_var("length")
    assert nil_clause.lhs.constructor.name_hint == "Nil" and nil_clause.lhs.patterns == ()
    assert nil_clause.rhs.data.item() == 0


def test_partial_match_and_tuple_patterns():
    mod = parse(H + LIST + "def @main(%p: (int32, List[int32])) {\n"
                           "  match? (%p) {\n"
                           "    (%h, Cons(_, %t)) => Cons(%h, %t),\n"
                           "    (_, %u: List[int32]) => %u\n"
                           "  }\n}")
    m = mod["main"].body
    assert not m.complete
    first, second = m.clauses
    assert isinstance(first.lhs, PatternTuple)
    h = first.lhs.patterns[0].var
    assert first.rhs.args[0] is h
    assert second.lhs.patterns[1].var.type_annotation.func.name_hint == "List"


def test_match_on_a_tuple_written_inline():
    mod = parse(H + LIST + "def @main(%a: List[int32], %b: List[int32]) {\n"
                           "  match (%a, %b) { (Nil, _) => 0, _ => 1 }\n}")
    data = mod["main"].body.data
    assert isinstance(data, Tuple) and len(data.fields) == 2


def test_pattern_variables_are_scoped_to_their_clause():
    err = parse_error(H + LIST + "def @main(%a: List[int32]) {\n"
                                 "  match (%a) { Cons(%x, _) => 0, Nil => %x }\n}")
    assert (err.line, err.column) == (7, 41)
    assert err.message == "undefined variable %x"


def test_unknown_and_duplicate_constructors():
    err = parse_error(H + LIST + "def @main(%a: List[int32]) {\n  match (%a) { Conz(_, _) => 0 }\n}")
    assert (err.line, err.column) == (7, 16)
    assert err.message == "unknown constructor Conz; did you mean Cons?"
    err = parse_error(H + "type T { A, B }\ntype U { B }")
    assert (err.line, err.column) == (3, 10)
    assert err.message == "constructor name B is already defined"


# ---------------------------------------------------------------------------------------------
# if, tuples, references

def test_if_tuples_and_projection():
    body = main_body("def @main(%c: bool, %t: ((int32, int32), int32)) {\n"
                     "  if (%c) { %t.0.1 } else { (%t.1,).0 }\n}")
    assert isinstance(body, If)
    proj = body.true_branch
    assert isinstance(proj, TupleGetItem) and proj.index == 1 and proj.tuple_value.index == 0
    other = body.false_branch
    assert other.index == 0 and isinstance(other.tuple_value, Tuple) and len(other.tuple_value.fields) == 1
    assert main_body("def @main() { () }").fields == ()


def test_references():
    body = main_body("def @main(%x: float32) {\n"
                     "  let %r = ref(%x);\n"
                     "  %0 = ref_write(%r, add(%x, %x));\n"
                     "  (%0, ref_read(%r))\n}")
    assert isinstance(body.value, RefCreate) and body.value.value.name_hint == "x"
    write, read = body.body.fields
    assert isinstance(write, RefWrite) and write.ref is body.var
    assert isinstance(read, RefRead) and read.ref is body.var


# ---------------------------------------------------------------------------------------------
# spans

def test_nodes_carry_their_source_position():
    mod = parse(H + "def @main(%x: float32) {\n"
                    "  let %y = add(%x, 1f);\n"
                    "  %y\n}", "prog.rly")
    f = mod["main"]
    assert (f.span.source_name, f.span.line, f.span.column) == ("prog.rly", 2, 1)
    assert (f.params[0].span.line, f.params[0].span.column) == (2, 11)
    let = f.body
    assert (let.span.line, let.span.column) == (3, 3)
    assert (let.var.span.line, let.var.span.column) == (3, 7)
    assert (let.value.span.line, let.value.span.column) == (3, 12)
    assert (let.value.args[1].span.line, let.value.args[1].span.column) == (3, 20)


# ---------------------------------------------------------------------------------------------
# errors

@pytest.mark.parametrize("text, line, column, message", [
    ("def @main(%x: float32) {\n  add(%y, %x)\n}", 3, 7, "undefined variable %y"),
    ("def @main(%x: float32) {\n  %0\n}", 3, 3, "undefined variable %0"),
    ("def @main(%x: float32) {\n  @mian(%x)\n}", 3, 3, "undefined global @mian; did you mean @main?"),
    ("def @main() { 1 }\ndef @main() { 2 }", 3, 5, "duplicate definition of @main"),
    ("type T { A }\ntype T { B }", 3, 6, "duplicate definition of type T"),
    ("def @main() {\n  %0 = 1;\n  %0 = 2;\n  %0\n}", 4, 3, "%0 is already bound in this block"),
    ("def @main() {\n  1 $ 2\n}", 3, 5, "unexpected character '$'"),
    ("def @main() {\n  /* open\n}", 3, 3, "unterminated comment"),
    ("def @main() {\n  1\n}\ngarbage", 5, 1, "expected a definition ('def' or 'type') but found 'garbage'"),
    ("junk\ndef @main() { 1 }", 2, 1, "expected a definition ('def' or 'type') but found 'junk'"),
    ("def @main() {\n  (1 2)\n}", 3, 6, "expected ')' or ',' but found '2'"),
    ("def @main(%x: float32) {\n  %x.a\n}", 3, 6, "expected a tuple index after '.' but found 'a'"),
    ("def @main() {\n  \"s\"\n}", 3, 3, "expected an expression but found '\"s\"'"),
    ("def @main() {\n  add(1, 2\n}", 4, 1, "expected ')' but found '}'"),
    ("def @main() {\n  1", 3, 4, "expected '}' but found end of input"),
    ("def @main() {\n  if (True) { 1 }\n}", 4, 1, "expected 'else' but found '}'"),
    ("def @main() {\n  let x = 1; x\n}", 3, 7, "expected a variable like %x after 'let' but found 'x'"),
    ("def main() { 1 }", 2, 5, "expected a global name like @main but found 'main'"),
    ("def @main(x) { 1 }", 2, 11, "expected a parameter (%x: T) or an attribute (Name=value) but found 'x'"),
])
def test_errors_name_the_place(text, line, column, message):
    err = parse_error(H + text)
    assert err.message == message or err.message.startswith(message)
    assert (err.line, err.column) == (line, column)


def test_too_deep_nesting_is_a_parse_error_not_a_crash():
    deep = H + "def @main() {\n  " + "add(" * 1000 + "1" + ", 1)" * 1000 + "\n}"
    err = parse_error(deep)
    assert err.message.startswith("expression nested too deeply")
    assert (err.line, err.column) == (3, 3 + 4 * MAX_DEPTH)
    ok = H + "def @main() {\n  " + "add(" * (MAX_DEPTH - 2) + "1" + ", 1)" * (MAX_DEPTH - 2) + "\n}"
    assert parse(ok)["main"].body.op.name == "add"
    deep_type = H + "def @main(%x: " + "(" * 5000 + "int32" + ",)" * 5000 + ") { %x }"
    assert parse_error(deep_type).message.startswith("expression nested too deeply")
    assert sys.getrecursionlimit() < 20000


def test_recursion_limit_is_restored():
    before = sys.getrecursionlimit()
    parse(H + "def @main() { 1 }")
    with pytest.raises(ParseError):
        parse(H + "def @main() { ( }")
    assert sys.getrecursionlimit() == before


# ---------------------------------------------------------------------------------------------
# scale

def test_100k_bindings_parse_with_loops():
    lines = [H + "def @main(%x: Tensor[(4), float32]) {", "  %0 = add(%x, 1f);"]
    for i in range(1, 100_000):
        lines.append(f"  %{i} = multiply(%{i - 1}, 2f) /* ty=Tensor[(4), float32] */;")
    lines.append("  %99999\n}")
    mod = parse("\n".join(lines))
    node = mod["main"].body
    count = 0
    while isinstance(node, Call):
        count += 1
        node = node.args[0]
    assert count == 100_000 and node is mod["main"].params[0]


def test_100k_let_chain_parses_with_loops():
    lines = ["fn (%x: int32) {"]
    lines.extend(f"  let %v{i} = add(%v{i - 1}, 1);" if i else "  let %v0 = %x;" for i in range(100_000))
    lines.append("  %v99999\n}")
    f = parse_expr("\n".join(lines))
    node, count = f.body, 0
    while isinstance(node, Let):
        count += 1
        node = node.body
    assert count == 100_000 and node.name_hint == "v99999"


def test_tokens_are_the_same_whatever_the_scanning_window(monkeypatch):
    """The tokenizer scans the text window by window; a token cut by a window's end is rescanned."""
    from relaybench.ir import _tokens
    text = (H + "def @main(%t: ((float32, float32), Tensor[(n // 2, n % 3), float32])) {\n"
                "  %0 = multiply(%t.0.1, 0.5f) /* ty=float32 */; // note\n"
                "  %1 = add(%0, 1.5e+10f64) /* a /* nested */ comment */;\n"
                '  nn.conv2d(%1, %1, data_layout="NC\\"HW", padding=[1, 1]) != %0\n}')
    expected = _tokens.tokenize(text)
    for window in (1, 2, 3, 5, 8, 13, 21, 64):
        monkeypatch.setattr(_tokens, "_WINDOW", window)
        assert _tokens.tokenize(text) == expected, window
