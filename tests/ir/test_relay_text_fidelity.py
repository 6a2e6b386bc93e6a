"""Relay fidelity of the text format and of small IR APIs: each test states Relay's (TVM <= 0.14)
documented behaviour and checks ours against values derived by hand, numpy or the interpreter."""

import numpy as np
import pytest

import relaybench as rb
from relaybench.errors import ParseError
from relaybench.ir import (Call, Constant, Function, GlobalVar, IRModule, Let, Op, Tuple, TupleGetItem,
                           Var, bind, const, structural_equal, structural_hash, var)
from relaybench.ir.adt import TypeData
from relaybench.ir.parser import parse, parse_expr
from relaybench.ir.printer import astext
from relaybench.ir.types import FuncType, TensorType, TupleType, TypeVar
from relaybench.testing import run_infer_type

HEADER = '#[version = "0.0.5"]\n'


def run(mod, *args):
    return rb.create_executor("interpreter", mod=mod).evaluate()(*args)


def parse_error(text, fn=parse) -> ParseError:
    with pytest.raises(ParseError) as info:
        fn(text)
    return info.value


# ---- parser: dtype shorthands -----------------------------------------------------------------

@pytest.mark.parametrize("written, dtype", [("int", "int32"), ("uint", "uint32"),
                                            ("float", "float32"), ("bool", "bool")])
def test_dtype_shorthands_read_as_relay_reads_them(written, dtype):
    # TVM's String2DLDataType: a missing width is 32 bits
    mod = parse(HEADER + f"def @main(%x: {written}, %y: Tensor[(2, 3), {written}]) {{ %y }}")
    x, y = mod["main"].params
    assert x.type_annotation == TensorType((), dtype)
    assert y.type_annotation == TensorType((2, 3), dtype)


def test_dtype_shorthand_program_runs_with_int32_values():
    mod = parse(HEADER + "def @main(%n: Tensor[(3), int]) { add(%n, 2147483647) }")
    n = np.array([0, 1, -5], dtype="int32")
    out = run(mod, n)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, (n.astype(np.int64) + 2147483647).astype(np.int32))


def test_invalid_vector_dtype_is_a_clear_parse_error():
    # valid vector dtypes (int8x4) parse: tests/ir/test_vector_dtypes.py
    err = parse_error(HEADER + "def @main(%x: Tensor[(2), int8x0]) { %x }")
    assert (err.line, err.column) == (2, 27)
    assert "int8x0" in err.message and "at least one lane" in err.message
    err = parse_error(HEADER + "def @main(%x: float31x4) { %x }")
    assert (err.line, err.column) == (2, 15) and "float31x4" in err.message


# ---- parser: sequencing -------------------------------------------------------------------------

def test_semicolon_sequences_as_a_let_of_an_unnamed_variable():
    e = parse_expr("(); ()")
    assert isinstance(e, Let) and e.var.name_hint == ""
    assert isinstance(e.value, Tuple) and not e.value.fields
    assert isinstance(e.body, Tuple) and not e.body.fields

    e = parse_expr("let %x = 1; %x; %x")
    x = e.var
    expected_inner = Let(Var(""), x, x)
    assert structural_equal(run_infer_type(e), run_infer_type(Let(x, const(1), expected_inner)))
    assert e.body.value is x and e.body.body is x


def test_sequencing_keeps_bindings_after_it_and_evaluates_to_the_last_value():
    mod = parse(HEADER + "def @main(%x: Tensor[(3), float32]) {\n"
                "  %0 = add(%x, 1f);\n  %0;\n  let %y = multiply(%0, 2f);\n  %y; %y\n}")
    x = np.array([1.0, -2.0, 0.5], dtype="float32")
    np.testing.assert_allclose(run(mod, x), (x + 1) * 2)
    # and the text round-trips
    again = parse(mod.astext())
    assert structural_equal(run_infer_type(mod), run_infer_type(again))


def test_trailing_semicolon_is_an_error_with_line_and_column():
    err = parse_error(HEADER + "def @main() {\n  ();\n}")
    assert (err.line, err.column) == (4, 1) and "expected an expression" in err.message


# ---- parser: literals ---------------------------------------------------------------------------

@pytest.mark.parametrize("text, dtype, value", [
    ("2147483647", "int32", 2147483647),
    ("2147483648", "int64", 2147483648),          # beyond int32 without a suffix: int64
    ("-2147483648", "int32", -2147483648),
    ("-2147483649", "int64", -2147483649),
    ("9223372036854775807", "int64", 9223372036854775807),
    ("--10", "int32", 10),                         # Relay reads a run of minus signs
    ("---10", "int32", -10),
    ("- -7i64", "int64", 7),
    ("--2.5f", "float32", 2.5),
])
def test_integer_and_negated_literals(text, dtype, value):
    c = parse_expr(text)
    assert isinstance(c, Constant)
    assert c.data.dtype.name == dtype and c.data.item() == value


def test_int64_literal_computes_with_int64_values():
    mod = parse(HEADER + "def @main(%x: Tensor[(2), int64]) { add(%x, 3000000000) }")
    x = np.array([1, -7], dtype="int64")
    np.testing.assert_array_equal(run(mod, x), x + 3000000000)


def test_binary_minus_then_negative_literal():
    mod = parse(HEADER + "def @main(%x: Tensor[(2), int32]) { %x - -3 }")
    x = np.array([1, 2], dtype="int32")
    np.testing.assert_array_equal(run(mod, x), x + 3)


@pytest.mark.parametrize("text, column, message", [
    ("1e40f", 5, "literal 1e40f does not fit in float32"),
    ("3.5e38f32", 5, "literal 3.5e38f32 does not fit in float32"),
    ("-1e39", 5, "literal -1e39 does not fit in float32"),
    ("70000f16", 5, "literal 70000f16 does not fit in float16"),
    ("1e309f64", 5, "literal 1e309f64 does not fit in float64"),
])
def test_float_literal_overflow_is_a_parse_error_not_inf(text, column, message):
    err = parse_error(f"(1, {text})", parse_expr)
    assert (err.line, err.column) == (1, column)
    assert err.message.startswith(message)


def test_float_literals_near_the_limit_still_parse():
    assert parse_expr("3.4e38f").data.item() == pytest.approx(3.4e38, rel=1e-6)
    assert parse_expr("1e308f64").data.item() == 1e308
    assert parse_expr("65504f16").data.item() == 65504.0


# ---- parser: extern types -----------------------------------------------------------------------

def test_extern_type_declares_a_type_without_constructors():
    mod = parse(HEADER + "extern type Foo\nextern type Bar[A]\n"
                "def @f(%x: Foo, %y: Bar[int32]) -> Foo { %x }")
    foo = mod.get_global_type_var("Foo")
    bar = mod.get_global_type_var("Bar")
    assert isinstance(mod.type_definitions[foo], TypeData)
    assert mod.type_definitions[foo].constructors == ()
    assert len(mod.type_definitions[bar].type_vars) == 1
    x, y = mod["f"].params
    assert x.type_annotation.func is foo and y.type_annotation.func is bar
    assert structural_equal(run_infer_type(parse(mod.astext())), run_infer_type(mod))


def test_extern_type_with_constructors_is_an_error():
    err = parse_error(HEADER + "extern type Foo { A }")
    assert (err.line, err.column) == (2, 17)
    assert "an external type may not have any constructors" in err.message
    err = parse_error(HEADER + "extern Foo")
    assert (err.line, err.column) == (2, 8) and "expected 'type' after 'extern'" in err.message


# ---- parser: init_module, init_meta_table -------------------------------------------------------

def _base_module():
    return parse(HEADER + "type L { N, C(int32, L) }\n"
                 "def @double(%x: Tensor[(2), float32]) { multiply(%x, 2f) }")


def test_parse_into_an_existing_module():
    base = _base_module()
    mod = parse(HEADER + "def @main(%x: Tensor[(2), float32]) {\n  %0 = C(1, N);\n"
                "  add(@double(%x), 1f)\n}", init_module=base)
    assert sorted(gv.name_hint for gv in mod.get_global_vars()) == ["double", "main"]
    assert [gv.name_hint for gv in base.get_global_vars()] == ["double"]  # left as it was
    call = mod["main"].body.args[0]
    assert call.op is base.get_global_var("double")
    x = np.array([1.5, -3.0], dtype="float32")
    np.testing.assert_allclose(run(mod, x), x * 2 + 1)


def test_parse_into_a_module_replaces_a_def_of_the_same_name():
    base = _base_module()
    mod = parse(HEADER + "def @double(%x: Tensor[(2), float32]) { add(%x, %x) }",
                init_module=base)
    assert mod["double"].body.op.name == "add"
    assert mod.get_global_var("double") is base.get_global_var("double")
    assert base["double"].body.op.name == "multiply"


def test_parse_into_a_module_refuses_a_second_definition_of_its_type():
    err = parse_error(HEADER + "type L { Nil }", lambda t: parse(t, init_module=_base_module()))
    assert (err.line, err.column) == (2, 6) and "duplicate definition of type L" in err.message


def test_init_meta_table_entries_follow_the_texts_own_metadata():
    own = np.array([1.0, 2.0], dtype="float32")
    extra = np.array([10.0, 20.0], dtype="float32")
    text = astext(IRModule.from_expr(Function([], const(own))))
    assert "meta[relay.Constant][0]" in text
    text = text.replace("meta[relay.Constant][0]",
                        "add(meta[relay.Constant][0], meta[relay.Constant][1])")
    mod = parse(text, init_meta_table={"relay.Constant": [extra]})
    np.testing.assert_array_equal(run(mod), own + extra)
    err = parse_error(HEADER + "def @main() { meta[relay.Constant][1] }",
                      lambda t: parse(t, init_meta_table={"relay.Constant": [Constant(extra)]}))
    assert (err.line, err.column) == (2, 15)
    with pytest.raises(ValueError, match="relay.Function"):
        parse(HEADER + "def @main() { 1 }", init_meta_table={"relay.Function": []})


# ---- quoted names -------------------------------------------------------------------------------

def test_names_that_need_quoting_round_trip_with_their_names():
    a, b, c = var("input:0", shape=(2,)), var("a b", shape=(2,)), var('q"x', shape=(2,))
    p = var("p.0", shape=(2,))
    mod = IRModule()
    mod["my f"] = Function([p], p)
    mod["main"] = Function([a, b, c], Call(mod.get_global_var("my f"), [a + b + c]))
    text = mod.astext(show_types=False)
    assert 'def @"my f"(%"p.0": Tensor[(2), float32])' in text
    assert '%"a b"' in text and '%"q\\"x"' in text
    again = parse(text)
    assert [p.name_hint for p in again["main"].params] == ["input:0", "a b", 'q"x']
    assert [gv.name_hint for gv in again.get_global_vars()] == ["my f", "main"]
    assert structural_equal(run_infer_type(again), run_infer_type(mod))


def test_quoted_plain_name_is_the_plain_variable():
    f = parse_expr('fn (%"x": float32) { add(%x, %"x") }')
    assert f.body.args[0] is f.params[0] and f.body.args[1] is f.params[0]


def test_bad_quoted_name_is_a_parse_error():
    err = parse_error('fn (%"": float32) { 1 }', parse_expr)
    assert (err.line, err.column) == (1, 5) and "empty quoted name" in err.message


# ---- printer options ------------------------------------------------------------------------------

def test_header_for_a_lone_expression_is_an_option():
    x = var("x", shape=(2,))
    e = op_add(x, const(1.0))
    assert astext(e) == "free_var %x: Tensor[(2), float32];\nadd(%x, 1f)"  # default unchanged
    text = astext(e, show_header=True)
    assert text == HEADER + "free_var %x: Tensor[(2), float32];\nadd(%x, 1f)"
    assert structural_equal(run_infer_type(parse_expr(text)), run_infer_type(e), map_free_vars=True)


def op_add(a, b):
    return Call(Op.get("add"), [a, b])


def test_constant_types_option():
    c = const(np.zeros((3,), "float32"))
    x = var("x", shape=(3,))
    f = Function([x], op_add(op_add(x, c), const(2, "int32")))
    plain = astext(f, show_meta_data=False)
    assert plain == ("fn (%x: Tensor[(3), float32]) {\n  %0 = add(%x, meta[relay.Constant][0]);\n"
                     "  add(%0, 2)\n}")
    text = astext(f, show_meta_data=False, show_constant_types=True)
    assert text == ("fn (%x: Tensor[(3), float32]) {\n"
                    "  %0 = add(%x, meta[relay.Constant][0] /* ty=Tensor[(3), float32] */);\n"
                    "  add(%0, 2 /* ty=int32 */)\n}")
    with_meta = astext(f, show_constant_types=True)
    again = parse_expr(with_meta)
    assert structural_equal(run_infer_type(again), run_infer_type(f))


def test_spans_option_prints_where_the_parser_found_each_node():
    src = HEADER + "def @main(%x: Tensor[(2), float32]) {\n  %0 = add(%x, 1f);\n  negative(%0)\n}"
    mod = rb.passes.InferType()(parse(src, source_name="m.rly"))
    text = astext(mod, show_spans=True)
    assert "%0 = add(%x, 1f /* span=m.rly:3:16 */) /* ty=Tensor[(2), float32] span=m.rly:3:8 */;" in text
    assert "negative(%0) /* ty=Tensor[(2), float32] span=m.rly:4:3 */" in text
    assert "span=" not in astext(mod)
    untyped = astext(parse(src, source_name="m.rly"), show_spans=True, show_types=False)
    assert "%0 = add(%x, 1f /* span=m.rly:3:16 */) /* span=m.rly:3:8 */;" in untyped
    assert structural_equal(run_infer_type(parse(text)), run_infer_type(mod))


# ---- structural equality: the empty tuple is a value ---------------------------------------------

def test_empty_tuple_is_a_value_not_a_shared_node():
    x = var("x", shape=(2,))
    unit = Tuple([])
    shared = Tuple([unit, unit, x])
    distinct = Tuple([Tuple([]), Tuple([]), x])
    assert structural_equal(run_infer_type(shared), run_infer_type(distinct))
    assert structural_hash(shared) == structural_hash(distinct)
    # a non-empty tuple's sharing still counts
    t = Tuple([x])
    assert not structural_equal(run_infer_type(Tuple([t, t])), run_infer_type(Tuple([Tuple([x]), Tuple([x])])))


def test_parsed_unit_values_compare_equal_to_a_shared_one():
    parsed = parse_expr("((), ())")
    unit = Tuple([])
    assert structural_equal(run_infer_type(parsed), run_infer_type(Tuple([unit, unit])))


# ---- rb.bind ------------------------------------------------------------------------------------

def test_bind_a_parameter_removes_it_and_substitutes_the_value():
    x, y = var("x", shape=(3,)), var("y", shape=(3,))
    f = Function([x, y], op_add(x, Call(Op.get("multiply"), [y, y])))
    yv = np.array([1.0, 2.0, 3.0], dtype="float32")
    g = rb.bind(f, {y: const(yv)})
    assert g.params == (x,)
    c = g.body.args[1].args[0]
    assert isinstance(c, Constant) and g.body.args[1].args[1] is c
    xv = np.array([0.5, -1.0, 4.0], dtype="float32")
    np.testing.assert_allclose(run(IRModule.from_expr(g), xv), xv + yv * yv)


def test_bind_free_variables_of_an_expression():
    x, y, z = var("x", shape=(2,)), var("y", shape=(2,)), var("z", shape=(2,))
    e = op_add(x, y)
    b = bind(e, {x: z, y: np.ones(2, "float32")})
    assert b.args[0] is z and isinstance(b.args[1], Constant)
    assert bind(e, {}) is e


def test_bind_appends_the_free_variables_a_value_brings_in():
    x, y, w = var("x", shape=(2,)), var("y", shape=(2,)), var("w", shape=(2,))
    f = Function([x, y], op_add(x, y))
    g = bind(f, {y: op_add(w, w)})
    assert g.params == (x, w)  # as Relay: a new free variable becomes a parameter
    xv, wv = np.array([1.0, 2.0], "float32"), np.array([3.0, -4.0], "float32")
    np.testing.assert_allclose(run(IRModule.from_expr(g), xv, wv), xv + 2 * wv)


def test_bind_refuses_a_variable_bound_inside():
    x, v = var("x", shape=(2,)), var("v", shape=(2,))
    e = Let(v, x, op_add(v, v))
    with pytest.raises(ValueError, match="%v is bound inside"):
        bind(e, {v: const(np.zeros(2, "float32"))})
    with pytest.raises(TypeError, match="must be a Var"):
        bind(e, {"x": x})


def test_bind_is_not_recursive_on_depth():
    x, y = var("x", shape=(1,)), var("y", shape=(1,))
    e = x
    for _ in range(20_000):
        e = op_add(e, y)
    b = bind(Function([x, y], e), {y: const(np.ones(1, "float32"))})
    assert b.params == (x,)


# ---- == on types is structural ------------------------------------------------------------------

def test_func_types_compare_up_to_renaming_of_type_params():
    a, b = TypeVar("A"), TypeVar("B")
    t = TensorType((3,))
    f1, f2 = FuncType([a, t], a, [a]), FuncType([b, t], b, [b])
    assert f1 == f2 and hash(f1) == hash(f2)
    assert FuncType([a, t], t, [a]) != f2
    assert FuncType([a], a, [a]) != FuncType([b, b], b, [b])
    # nested: the inner function type's own parameter, and a tuple holding them
    g1 = FuncType([FuncType([a], a, [a])], t)
    g2 = FuncType([FuncType([b], b, [b])], t)
    assert g1 == g2 and hash(g1) == hash(g2)
    assert TupleType([f1]) == TupleType([f2]) and hash(TupleType([f1])) == hash(TupleType([f2]))
    # free type variables still compare by identity, as structural_equal does
    assert FuncType([a], a) != FuncType([b], b)
    assert FuncType([a], a) == FuncType([a], a)
    # a parsed type equals its hand-built twin
    f = parse_expr("fn [T](%x: T) -> T { %x }")
    tp = f.type_params[0]
    assert FuncType([tp], tp, [tp]) == FuncType([a], a, [a])


def test_the_largest_float_as_printed_reads_back():
    """The printer writes float32's largest value with 8 digits, a hair above it in float64; it
    rounds to the largest value, so it is no overflow."""
    import numpy as np
    import relaybench as rb
    big = np.float32(np.finfo(np.float32).max)
    x = rb.var("x", shape=(2,), dtype="float32")
    mod = rb.IRModule.from_expr(rb.Function([x], rb.op.multiply(x, rb.const(big))))
    text = mod.astext()
    assert "3.4028235e+38f" in text
    back = rb.parse(text)
    rb.ir.assert_structural_equal(run_infer_type(back), run_infer_type(mod))
