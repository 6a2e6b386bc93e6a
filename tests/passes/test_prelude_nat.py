"""The prelude's Peano naturals (Relay's ``std/nat.rly``): nat_double, nat_add, nat_nth,
nat_update and nat_iterate on the interpreter, against hand-computed values; and the partial
evaluator running them at compile time."""

import numpy as np
import pytest

import relaybench as rb
from relaybench.backends.interpreter import ConstructorValue


@pytest.fixture(scope="module")
def prelude():
    mod = rb.IRModule().import_prelude()
    return mod, rb.create_executor("interpreter", mod=mod)


def call(prelude, name, *args):
    mod, ex = prelude
    return ex.evaluate(mod.get_global_var(name))(*args)


def nat(mod, n):
    zero, succ = mod.get_constructor("zero"), mod.get_constructor("succ")
    v = ConstructorValue(zero, ())
    for _ in range(n):
        v = ConstructorValue(succ, (v,))
    return v


def count(value) -> int:
    n = 0
    while value.name == "succ":
        n += 1
        value = value.fields[0]
    assert value.name == "zero"
    return n


def to_list(mod, values):
    cons, nil = mod.get_constructor("Cons"), mod.get_constructor("Nil")
    out = ConstructorValue(nil, ())
    for v in reversed(values):
        out = ConstructorValue(cons, (np.int32(v), out))
    return out


def from_list(value):
    out = []
    while value.name == "Cons":
        out.append(int(value.fields[0]))
        value = value.fields[1]
    assert value.name == "Nil"
    return out


@pytest.mark.parametrize("n", [0, 1, 5])
def test_nat_double(prelude, n):
    assert count(call(prelude, "nat_double", nat(prelude[0], n))) == 2 * n


@pytest.mark.parametrize("a, b", [(0, 0), (0, 3), (2, 0), (3, 4)])
def test_nat_add(prelude, a, b):
    mod = prelude[0]
    assert count(call(prelude, "nat_add", nat(mod, a), nat(mod, b))) == a + b


def test_nat_nth(prelude):
    mod = prelude[0]
    xs = to_list(mod, [7, 8, 9])
    assert [int(call(prelude, "nat_nth", xs, nat(mod, i))) for i in range(3)] == [7, 8, 9]


@pytest.mark.parametrize("index, expected", [(0, [0, 2, 3, 4]), (2, [1, 2, 0, 4]), (3, [1, 2, 3, 0])])
def test_nat_update_replaces_one_element_and_keeps_the_rest(prelude, index, expected):
    mod = prelude[0]
    got = call(prelude, "nat_update", to_list(mod, [1, 2, 3, 4]), nat(mod, index), np.int32(0))
    assert from_list(got) == expected


def test_nat_update_past_the_end_is_an_error(prelude):
    mod = prelude[0]
    with pytest.raises(rb.errors.RelayError):
        call(prelude, "nat_update", to_list(mod, [1]), nat(mod, 3), np.int32(0))


def with_prelude(text):
    return rb.parse('#[version = "0.0.5"]\n' + text, init_module=rb.IRModule().import_prelude())


def nat_text(n):
    return "succ(" * n + "zero" + ")" * n


@pytest.mark.parametrize("n", [0, 1, 4])
def test_nat_iterate_applies_f_n_times(n):
    mod = with_prelude(f"""
def @main(%x: int32) -> int32 {{
  @nat_iterate(fn (%y: int32) -> int32 {{ multiply(%y, 3) }}, {nat_text(n)})(%x)
}}""")
    out = rb.create_executor("interpreter", mod=mod).evaluate()(np.int32(2))
    assert int(out) == 2 * 3 ** n


def test_nat_functions_compose_in_a_program():
    # nat_double(nat_add(2, 3)) is 10: as an int, and as the number of times x + 1 is applied
    mod = with_prelude(f"""
def @main(%x: int32) -> (int32, int32) {{
  %0 = @nat_double(@nat_add({nat_text(2)}, {nat_text(3)}));
  (@nat_to_int(%0), @nat_iterate(fn (%y: int32) -> int32 {{ add(%y, 1) }}, %0)(%x))
}}""")
    a, b = rb.create_executor("interpreter", mod=mod).evaluate()(np.int32(5))
    assert (int(a), int(b)) == (10, 15)
