"""Types: construction, equality, hashing, printing, validation."""

import dataclasses

import numpy as np
import pytest

from relaybench.ir.symbolic import ANY, SymVar
from relaybench.ir.types import (DTYPES, FuncType, GlobalTypeVar, IncompleteType, RefType, TensorType,
                                 TupleType, TypeCall, TypeKind, TypeRelation, TypeVar, check_dtype,
                                 scalar_type, type_str, unit_type)


def some_relation(types, attrs):
    return None


def other_relation(types, attrs):
    return None


# ---------------------------------------------------------------------------------------------
# TensorType

def test_tensor_type_fields_are_normalized():
    t = TensorType([1, "n", None], np.float32)
    assert t.shape == (1, SymVar("n"), ANY)
    assert t.dtype == "float32"
    assert t.ndim == 3
    assert not t.is_static
    assert TensorType((2, 3)).is_static and TensorType((2, 3)).concrete_shape == (2, 3)
    assert TensorType((np.int64(5),)).shape == (5,)
    assert type(TensorType((np.int64(5),)).shape[0]) is int


def test_concrete_shape_of_a_symbolic_type_raises():
    with pytest.raises(ValueError, match="symbolic or dynamic"):
        TensorType(("n", 2)).concrete_shape


def test_tensor_type_default_dtype_is_float32():
    assert TensorType((2,)).dtype == "float32"


def test_tensor_types_compare_and_hash_by_value():
    a = TensorType((2, "n"), "int8")
    b = TensorType([2, SymVar("n")], "int8")
    assert a == b and hash(a) == hash(b)
    assert a != TensorType((2, "m"), "int8")
    assert a != TensorType((2, "n"), "int16")
    assert a != TensorType((2, "n", 1), "int8")
    assert len({a, b, TensorType((2, "n"), "uint8")}) == 2


def test_symbolic_dims_compare_by_canonical_form():
    n = SymVar("n")
    assert TensorType((n + n,)) == TensorType((2 * n,))
    assert TensorType(((n + 1) * 2 - 2,)) == TensorType((2 * n,))


@pytest.mark.parametrize("dtype", ["float33", "int", "complex64", "string"])
def test_bad_dtype(dtype):
    with pytest.raises(ValueError, match="unknown dtype"):
        TensorType((1,), dtype)


def test_non_dtype_object():
    with pytest.raises(ValueError, match="not a dtype"):
        check_dtype(object())


def test_check_dtype_accepts_numpy_dtypes():
    assert check_dtype(np.dtype("int64")) == "int64"
    assert check_dtype(np.bool_) == "bool"
    assert "bfloat16" in DTYPES


def test_negative_dim():
    with pytest.raises(ValueError, match="cannot be negative: -3"):
        TensorType((2, -3))


def test_bool_dim():
    with pytest.raises(TypeError, match="bool"):
        TensorType((True,))


def test_types_are_immutable():
    t = TensorType((1,))
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.dtype = "int32"
    with pytest.raises(dataclasses.FrozenInstanceError):
        TupleType([t]).fields = ()


# ---------------------------------------------------------------------------------------------
# the other types

def test_tuple_type():
    a, b = scalar_type("int32"), TensorType((2,))
    assert TupleType([a, b]) == TupleType((a, b))
    assert hash(TupleType([a, b])) == hash(TupleType((a, b)))
    assert TupleType([a, b]) != TupleType([b, a])
    assert unit_type() == TupleType(())
    with pytest.raises(TypeError, match="not a type"):
        TupleType([a, 3])


def test_type_vars_compare_by_identity():
    a1, a2 = TypeVar("A"), TypeVar("A")
    assert a1 == a1 and a1 != a2
    # as in Relay, == on types is structural: alpha-equivalent function types are equal
    assert FuncType([a1], a1, [a1]) == FuncType([a2], a2, [a2])
    assert FuncType([a1], a1) != FuncType([a2], a2)  # free type variables still by identity
    assert a1.kind is TypeKind.Type
    g1, g2 = GlobalTypeVar("List"), GlobalTypeVar("List")
    assert g1 != g2 and g1.kind is TypeKind.AdtHandle
    assert IncompleteType() != IncompleteType()


def test_func_type_equality():
    t = TensorType((3,))
    f = FuncType([t, t], t)
    assert f == FuncType((t, t), t) and hash(f) == hash(FuncType((t, t), t))
    assert f != FuncType([t], t)
    assert f.type_params == () and f.type_constraints == ()


def test_type_relation_and_call_and_ref():
    a = TypeVar("A")
    r1 = TypeRelation(some_relation, [a, a], 1, None)
    assert r1 == TypeRelation(some_relation, (a, a), 1, None)
    assert r1 != TypeRelation(other_relation, (a, a), 1, None)
    assert r1.name == "some_relation"
    lst = GlobalTypeVar("List")
    assert TypeCall(lst, [a]) == TypeCall(lst, (a,))
    assert RefType(scalar_type("int64")) == RefType(scalar_type("int64"))
    assert RefType(scalar_type("int64")) != RefType(scalar_type("int32"))


# ---------------------------------------------------------------------------------------------
# printing

A = TypeVar("A")
LIST = GlobalTypeVar("List")


@pytest.mark.parametrize("t, text", [
    (TensorType((1, 3, 224, 224)), "Tensor[(1, 3, 224, 224), float32]"),
    (TensorType((3,), "int64"), "Tensor[(3), int64]"),
    (TensorType((1, "n", None)), "Tensor[(1, n, ?), float32]"),
    (TensorType((2 * SymVar("n") + 1,)), "Tensor[(2*n + 1), float32]"),
    (scalar_type("float32"), "float32"),
    (scalar_type("bool"), "bool"),
    (TupleType([]), "()"),
    (TupleType([scalar_type("int32")]), "(int32,)"),
    (TupleType([scalar_type("int32"), TensorType((2, 3))]), "(int32, Tensor[(2, 3), float32])"),
    (FuncType([scalar_type("float32")], scalar_type("float32")), "fn (float32) -> float32"),
    (FuncType([A, TypeCall(LIST, [A])], TypeCall(LIST, [A]), [A]), "fn [A](A, List[A]) -> List[A]"),
    (FuncType([], TupleType([])), "fn () -> ()"),
    (A, "A"),
    (LIST, "List"),
    (TypeCall(LIST, [scalar_type("int32")]), "List[int32]"),
    (IncompleteType(), "_"),
    (RefType(scalar_type("int64")), "Ref[int64]"),
    (TypeRelation(some_relation, [A, A], 1, None), "some_relation(A, A)"),
    (FuncType([A], A, [A], [TypeRelation(some_relation, [A, A], 1, None)]),
     "fn [A](A) -> A where some_relation(A, A)"),
])
def test_type_text(t, text):
    assert str(t) == text
    assert repr(t) == text
    assert type_str(t) == text


def test_type_text_with_chosen_names():
    a = TypeVar("A")
    assert type_str(FuncType([a], a, [a]), {a: "T"}) == "fn [T](T) -> T"


def test_html_repr_escapes():
    import re
    shown = TypeCall(LIST, [A])._repr_html_()
    assert re.sub(r"<[^>]+>", "", shown) == "List[A]"   # the text, once the markup is removed
    assert "&gt;" in FuncType([], A)._repr_html_() and "->" not in FuncType([], A)._repr_html_()


def test_deeply_nested_type_prints_without_recursion():
    t = scalar_type("int32")
    for _ in range(20000):
        t = TupleType([t])
    text = type_str(t)
    assert text.startswith("((((") and text.endswith(",),)")
    assert text.count("int32") == 1
