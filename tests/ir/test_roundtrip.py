"""Text round trips: ``parse(astext(p))`` is structurally equal to ``p`` for every test program, and
printing the parsed program gives the same text again."""

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relaybench import op
from relaybench.ir import (Call, Clause, Function, GlobalVar, If, IRModule, Let, Match,
                           PatternConstructor, PatternTuple, PatternVar, PatternWildcard, RefCreate,
                           RefRead, RefWrite, Tuple, TupleGetItem, Var, const, define_adt, var)
from relaybench.ir.parser import parse, parse_expr
from relaybench.ir.printer import astext, format_scalar
from relaybench.ir.structural import assert_structural_equal
from relaybench.ir.symbolic import SymVar, floordiv
from relaybench.ir.types import FuncType, RefType, TensorType, TupleType, TypeCall, TypeVar, scalar_type
from relaybench.testing import chain

PRELUDE = os.path.join(os.path.dirname(__file__), "..", "..", "relaybench", "ir", "std", "prelude.rly")


def f32(*shape):
    return TensorType(shape, "float32")


def check(program):
    """Print, parse, compare structurally, and print again."""
    text = astext(program)
    if isinstance(program, IRModule):
        back = parse(text)
        assert_structural_equal(back, program)
    else:
        back = parse_expr(text)
        assert_structural_equal(back, program, map_free_vars=True)
    assert astext(back) == text
    return back


def rng():
    return np.random.default_rng(0)


# ---------------------------------------------------------------------------------------------
# the test programs

def mlp():
    r = rng()
    x = var("x", shape=(1, 8))
    w1 = const(r.standard_normal((16, 8)).astype("float32"))
    b1 = const(r.standard_normal(16).astype("float32"))
    w2 = const(r.standard_normal((4, 16)).astype("float32"))
    h = op.nn.relu(op.nn.bias_add(op.nn.dense(x, w1, units=16), b1))
    return IRModule.from_expr(Function([x], op.nn.dense(h, w2), ret_type=f32(1, 4)))


def conv_block():
    r = rng()
    x = var("data", shape=(1, 3, 8, 8))
    w = const(r.standard_normal((8, 3, 3, 3)).astype("float32"))
    c = op.nn.conv2d(x, w, strides=(2, 2), padding=(1, 1), channels=8, kernel_size=(3, 3))
    y = op.nn.relu(op.add(c, const(0.5)))
    return IRModule.from_expr(Function([x], op.multiply(y, y)))


def shape_ops():
    x = var("x", shape=(2, 6))
    parts = op.split(x, indices_or_sections=3, axis=1)
    t = op.transpose(op.reshape(TupleGetItem(parts, 0), newshape=(4, 1)), axes=(1, 0))
    cat = op.concatenate(Tuple([TupleGetItem(parts, 1), TupleGetItem(parts, 2)]), axis=0)
    return IRModule.from_expr(Function([x], Tuple([t, cat])))


def list_module():
    List = define_adt("List", ["A"], lambda L, A: {"Cons": [A, L(A)], "Nil": []})
    cons, nil = List["Cons"], List["Nil"]
    mod = IRModule()
    mod.add_type_def(List)
    length, map_ = GlobalVar("length"), GlobalVar("map")
    a, b = TypeVar("A"), TypeVar("B")
    xs, rest = var("xs", TypeCall(List.header, [a])), var("rest")
    mod[length] = Function([xs], Match(xs, [
        Clause(PatternConstructor(cons, [PatternWildcard(), PatternVar(rest)]),
               op.add(const(1), Call(length, [rest]))),
        Clause(PatternConstructor(nil), const(0)),
    ]), scalar_type("int32"), [a])
    a2, b2 = TypeVar("A"), TypeVar("B")
    f = var("f", FuncType([a2], b2))
    ys, h, t = var("xs", TypeCall(List.header, [a2])), var("h"), var("t")
    mod[map_] = Function([f, ys], Match(ys, [
        Clause(PatternConstructor(cons, [PatternVar(h), PatternVar(t)]),
               cons(Call(f, [h]), Call(map_, [f, t]))),
        Clause(PatternConstructor(nil), nil()),
    ]), TypeCall(List.header, [b2]), [a2, b2])
    n = var("n", "int32")
    main_xs = cons(const(1), cons(const(2), nil()))
    k = var("n", "int32")
    mod["main"] = Function([n], Call(length, [Call(map_, [Function([k], op.add(k, n)), main_xs])]))
    return mod


def mutual_recursion():
    mod = IRModule()
    even, odd = GlobalVar("even"), GlobalVar("odd")
    n, m = var("n", "int32"), var("n", "int32")
    mod[even] = Function([n], If(op.equal(n, const(0)), const(True), Call(odd, [op.subtract(n, const(1))])),
                         scalar_type("bool"))
    mod[odd] = Function([m], If(op.equal(m, const(0)), const(False), Call(even, [op.subtract(m, const(1))])),
                        scalar_type("bool"))
    return mod


def closures():
    x = var("x", shape=(2,))
    y = var("x", shape=(2,))
    a = TypeVar("A")
    z = var("z", a)
    ident = Function([z], z, a, [a])
    adder = Function([y], op.add(x, y))
    f = var("f", FuncType([f32(2)], f32(2)))
    return Function([x], Let(f, adder, Tuple([Call(f, [x]), Call(ident, [x]), adder])))


def references():
    x, r = var("x", shape=(2,)), var("r", RefType(f32(2)))
    return Function([x], Let(r, RefCreate(x), Tuple([RefWrite(r, op.add(RefRead(r), x)), RefRead(r)])))


def branches_sharing():
    x, c = var("x", shape=(2,)), var("c", "bool")
    s = op.add(x, x)
    inner = If(c, op.multiply(s, x), s)
    return Function([x, c], If(c, op.subtract(inner, s), inner))


def lets_and_names():
    x = var("x", shape=(2,))
    v1, v2, v3 = var("v"), var("v"), Var("0")
    e = Let(v1, op.add(x, x), Let(v2, op.add(Let(v3, v1, v3), v1), op.multiply(v2, v1)))
    return Function([x], e)


def recursive_let():
    n = var("n", "int32")
    f = var("f", FuncType([scalar_type("int32")], scalar_type("int32")))
    body = If(op.less(n, const(1)), const(0), op.add(n, Call(f, [op.subtract(n, const(1))])))
    return Function([], Let(f, Function([n], body, scalar_type("int32")), Call(f, [const(10)])))


def symbolic_dims():
    n, m = SymVar("n"), SymVar("m")
    x = var("x", TensorType((n, 2 * n + 1, None), "float32"))
    y = var("y", TensorType((floordiv(n, 4) + 1, n * m, 3), "float32"))
    return IRModule.from_expr(Function([x, y], Tuple([x, y]), TupleType([x.type_annotation, y.type_annotation])))


def fused():
    x = var("x", shape=(1, 4))
    p0, p1 = var("p0", shape=(1, 4)), var("p1", shape=(1, 4))
    g1 = Function([p0], op.nn.relu(op.add(p0, p0))).with_attr("Primitive", 1)
    g2 = Function([p1], op.multiply(p1, const(2.0))).with_attr("Primitive", 1)
    return IRModule.from_expr(Function([x], Call(g2, [Call(g1, [x])])))


def scalars():
    values = [const(1), const(np.int64(-4)), const(np.int8(-3)), const(np.int16(9)), const(np.uint8(7)),
              const(np.uint16(8)), const(np.uint32(9)), const(np.uint64(2 ** 63)), const(1.5), const(-0.0),
              const(np.float64(0.1)), const(np.float16(0.333)), const(True), const(False),
              const(np.float32("nan")), const(np.float32("-inf")), const(np.arange(6, dtype="int64").reshape(2, 3))]
    return Function([], Tuple(values))


def patterns():
    List = define_adt("List", ["A"], lambda L, A: {"Cons": [A, L(A)], "Nil": []})
    mod = IRModule()
    mod.add_type_def(List)
    lt = TypeCall(List.header, [scalar_type("int32")])
    p = var("p", TupleType([lt, lt]))
    x, y, rest = var("x"), var("y"), var("rest")
    m = Match(p, [
        Clause(PatternTuple([PatternConstructor(List["Cons"], [PatternVar(x), PatternWildcard()]),
                             PatternConstructor(List["Cons"], [PatternVar(y), PatternVar(rest)])]),
               Let(var("s"), op.add(x, y), List["Cons"](x, rest))),
        Clause(PatternWildcard(), List["Nil"]()),
    ], complete=False)
    mod["main"] = Function([p], m)
    return mod


PROGRAMS = {
    "mlp": mlp, "conv_block": conv_block, "shape_ops": shape_ops, "list_module": list_module,
    "mutual_recursion": mutual_recursion, "closures": closures, "references": references,
    "branches_sharing": branches_sharing, "lets_and_names": lets_and_names,
    "recursive_let": recursive_let, "symbolic_dims": symbolic_dims, "fused": fused,
    "scalars": scalars, "patterns": patterns,
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_round_trips(name):
    check(PROGRAMS[name]())


@pytest.mark.parametrize("name", ["mlp", "closures", "list_module"])
def test_program_round_trips_inside_a_module_and_alone(name):
    program = PROGRAMS[name]()
    if isinstance(program, IRModule):
        for fn in program.functions.values():
            if not any(isinstance(n, GlobalVar) for n in _nodes(fn)):
                check(fn)
    else:
        check(IRModule.from_expr(program))


def _nodes(expr):
    from relaybench.ir.functor import post_order
    return post_order(expr)


def test_the_prelude_round_trips():
    with open(PRELUDE) as f:
        mod = parse(f.read(), "prelude.rly")
    assert {"List", "Option", "Tree", "nat"} <= {gt.name_hint for gt in mod.type_definitions}
    assert "length" in mod and "foldl" in mod
    check(mod)


def test_typed_program_round_trips_ignoring_the_type_comments():
    mod = conv_block()
    main = mod["main"]
    for node in _nodes(main):
        if isinstance(node, Call):
            node.set_checked_type(f32(1, 8, 4, 4))
    text = astext(mod)
    assert text.count("/* ty=Tensor[(1, 8, 4, 4), float32] */") == 4
    back = parse(text)
    assert_structural_equal(back, mod)
    assert astext(back) == astext(mod, show_types=False)


def test_metadata_section_round_trips_every_dtype():
    arrays = [np.arange(6, dtype=d).reshape(2, 3) for d in
              ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
               "float16", "float32", "float64")]
    arrays.append(np.array([[True, False, True]]))
    arrays.append(np.zeros((0, 3), dtype="float32"))
    program = Function([], Tuple([const(a) for a in arrays]))
    back = check(program)
    for a, c in zip(arrays, back.body.fields):
        assert c.data.dtype == a.dtype and c.data.shape == a.shape
        np.testing.assert_array_equal(c.data, a)


def test_chain_round_trips():
    mod = IRModule.from_expr(chain(10_000))
    check(mod)


# ---------------------------------------------------------------------------------------------
# property-based

@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=2 ** 32 - 1), st.sampled_from(["float16", "float32", "float64"]))
def test_float_scalars_round_trip_bit_exactly(bits, dtype):
    if dtype == "float16":
        value = np.array(bits & 0xFFFF, dtype="uint16").view("float16")
    elif dtype == "float32":
        value = np.array(bits, dtype="uint32").view("float32")
    else:
        value = np.array((bits << 32) | (bits * 2654435761 & 0xFFFFFFFF), dtype="uint64").view("float64")
    text = format_scalar(value)
    if not np.isfinite(value):
        assert text is None
        return
    back = parse_expr(text).data
    assert back.dtype == value.dtype
    assert back.tobytes() == value.tobytes(), (text, value)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]),
       st.integers(min_value=-2 ** 63, max_value=2 ** 64 - 1))
def test_int_scalars_round_trip(dtype, value):
    info = np.iinfo(dtype)
    value = info.min + value % (int(info.max) - int(info.min) + 1)
    c = np.array(value, dtype=dtype)
    back = parse_expr(format_scalar(c)).data
    assert back.dtype == c.dtype and back.item() == value


_BINARY = ["add", "subtract", "multiply", "divide", "maximum"]


@st.composite
def dag_programs(draw):
    """A random dataflow graph over two inputs: random operators, sharing, scalars, tuples, lets."""
    x, y = var("x", shape=(2,)), var("y", shape=(2,))
    pool = [x, y]
    lets = []
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["binary", "binary", "scalar", "unary", "tuple", "let"]))
        a = draw(st.sampled_from(pool))
        if kind == "binary":
            node = getattr(op, draw(st.sampled_from(_BINARY)))(a, draw(st.sampled_from(pool)))
        elif kind == "scalar":
            value = draw(st.floats(allow_nan=False, allow_infinity=False, width=32))
            node = op.multiply(a, const(np.float32(value)))
        elif kind == "unary":
            node = op.nn.relu(a) if draw(st.booleans()) else op.negative(a)
        elif kind == "tuple":
            node = TupleGetItem(Tuple([a, draw(st.sampled_from(pool))]), draw(st.integers(0, 1)))
        else:
            v = var(draw(st.sampled_from(["v", "x", "t"])))
            lets.append((v, a))
            node = v
        pool.append(node)
    body = Tuple(draw(st.lists(st.sampled_from(pool), min_size=1, max_size=4)))
    for v, value in reversed(lets):
        body = Let(v, value, body)
    return Function([x, y], body)


@settings(max_examples=150, deadline=None)
@given(dag_programs())
def test_random_programs_round_trip(program):
    check(program)
    check(IRModule.from_expr(program))
