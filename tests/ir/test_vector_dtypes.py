"""Vector dtypes as Relay and TVM write them (``int8x4``: an element dtype, ``x``, a lane count):
read and printed by the text format, kept by TensorType, understood by the dtype helpers, type
checked, and refused with a clear error by the executors, which compute on scalar elements."""

import numpy as np
import pytest

import relaybench as rb
from relaybench.errors import CompileError, ExecutionError, ParseError, TypeInferenceError
from relaybench.ir import structural_equal
from relaybench.ir.parser import parse
from relaybench.ir.types import (TensorType, TupleType, check_dtype, dtype_bits, dtype_itemsize,
                                 dtype_lanes, numpy_dtype, split_dtype)

HEADER = '#[version = "0.0.5"]\n'


# ---- the dtype helpers ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, element, lanes, bits, itemsize", [
    ("int8x4", "int8", 4, 32, 4),
    ("float32x4", "float32", 4, 128, 16),
    ("uint8x16", "uint8", 16, 128, 16),
    ("float16x8", "float16", 8, 128, 16),
    ("bfloat16x2", "bfloat16", 2, 32, 4),
    ("int64x2", "int64", 2, 128, 16),
    ("boolx8", "bool", 8, 8, 8),          # bool is 1 bit (TVM's uint1), a byte in memory
    ("float32", "float32", 1, 32, 4),
    ("bool", "bool", 1, 1, 1),
])
def test_helpers_count_lanes(dtype, element, lanes, bits, itemsize):
    assert split_dtype(dtype) == (element, lanes)
    assert dtype_lanes(dtype) == lanes
    assert dtype_bits(dtype) == bits
    assert dtype_itemsize(dtype) == itemsize


def test_one_lane_is_the_scalar_dtype():
    assert check_dtype("int8x1", vector=True) == "int8"
    assert TensorType((2,), "float32x1") == TensorType((2,), "float32")


def test_numpy_dtype_puts_the_lanes_last():
    # TVM's NDArray.numpy() of a vector tensor: the element dtype, the lanes as a last axis
    assert numpy_dtype("uint16") == np.dtype("uint16")
    a = np.zeros((2, 3), numpy_dtype("int8x4"))
    assert a.shape == (2, 3, 4) and a.dtype == np.int8
    assert numpy_dtype("float32x4").itemsize == 16
    with pytest.raises(ValueError, match="numpy has no bfloat16"):
        numpy_dtype("bfloat16x2")


@pytest.mark.parametrize("dtype, words", [
    ("int8x0", "at least one lane"),
    ("int7x4", "its element int7 is not one of"),
    ("float8x4", "its element float8 is not one of"),
    ("foo32x4", "unknown dtype 'foo32x4'"),
    ("int8x", "unknown dtype 'int8x'"),
    ("intx4", "its element int is not one of"),   # the width shorthand is the parser's only
])
def test_invalid_dtypes_raise_value_error(dtype, words):
    for check in (split_dtype, dtype_bits, lambda d: check_dtype(d, vector=True),
                  lambda d: TensorType((2,), d)):
        with pytest.raises(ValueError, match=words):
            check(dtype)


def test_scalar_places_refuse_a_vector_dtype():
    # an operator's dtype attribute names a scalar element type
    with pytest.raises(ValueError, match=r"vector dtype 'int8x4' \(4 lanes of int8\) is not allowed"):
        check_dtype("int8x4")
    with pytest.raises(ParseError, match="vector dtype 'float32x4'") as info:
        parse(HEADER + 'def @main(%x: Tensor[(2), float32]) {\n  cast(%x, dtype="float32x4")\n}')
    assert info.value.line == 3


# ---- the text format --------------------------------------------------------------------------

def test_parse_and_print_round_trip():
    text = (HEADER + "def @main(%x: Tensor[(2, 3), int8x4], %y: float32x4, "
            "%z: (Tensor[(n), uint8x16], boolx2)) -> Tensor[(2, 3), int8x4] {\n  %x\n}")
    mod = parse(text)
    x, y, z = mod["main"].params
    assert x.type_annotation == TensorType((2, 3), "int8x4")
    assert y.type_annotation == TensorType((), "float32x4")
    assert z.type_annotation.fields[0].dtype == "uint8x16"
    assert z.type_annotation.fields[1] == TensorType((), "boolx2")
    assert mod.astext() == text
    assert structural_equal(parse(mod.astext()), mod)


def test_shorthand_vector_dtypes_print_with_their_width():
    mod = parse(HEADER + "def @main(%x: Tensor[(2), intx4], %y: Tensor[(2), float32x1]) { %x }")
    x, y = mod["main"].params
    assert str(x.type_annotation) == "Tensor[(2), int32x4]"
    assert str(y.type_annotation) == "Tensor[(2), float32]"


@pytest.mark.parametrize("dtype, column, words", [
    ("int8x0", 27, "at least one lane"),
    ("int7x4", 27, "int7"),
    ("uintx0", 27, "at least one lane"),
    ("foo32x4", 27, "unknown dtype foo32x4"),
])
def test_invalid_vector_dtype_is_a_parse_error_with_line_and_column(dtype, column, words):
    with pytest.raises(ParseError) as info:
        parse(HEADER + f"def @main(%x: Tensor[(2), {dtype}]) {{ %x }}")
    assert (info.value.line, info.value.column) == (2, column)
    assert words in info.value.message


# ---- type checking -----------------------------------------------------------------------------

def test_dataflow_over_vector_tensors_type_checks():
    mod = parse(HEADER + "def @main(%x: Tensor[(2, 3), int8x4], %y: Tensor[(2, 3), int8x4]) {\n"
                "  let %t = (%x, %y);\n  (reshape(%t.1, newshape=[6]), %t.0)\n}")
    typed = rb.passes.InferType()(mod)
    assert typed["main"].checked_type.ret_type == TupleType(
        [TensorType((6,), "int8x4"), TensorType((2, 3), "int8x4")])


def test_arithmetic_on_a_vector_dtype_is_a_type_error_naming_the_op():
    mod = parse(HEADER + "def @main(%x: Tensor[(2, 3), int8x4]) { add(%x, %x) }")
    with pytest.raises(TypeInferenceError, match=r"add: .*Tensor\[\(2, 3\), int8x4\]"):
        rb.passes.InferType()(mod)


def test_mismatched_lanes_do_not_unify():
    mod = parse(HEADER + "def @main(%x: Tensor[(2), int8x4], %y: Tensor[(2), int8x8]) {\n"
                "  let %z: Tensor[(2), int8x8] = %x;\n  (%z, %y)\n}")
    with pytest.raises(TypeInferenceError, match="int8x4"):
        rb.passes.InferType()(mod)


# ---- executors ---------------------------------------------------------------------------------

_RESHAPE = HEADER + "def @main(%x: Tensor[(2, 3), int8x4]) { reshape(%x, newshape=[6]) }"


def test_interpreter_refuses_a_vector_input_naming_it():
    mod = parse(_RESHAPE)
    run = rb.create_executor("interpreter", mod=mod).evaluate()
    for value in (np.zeros((2, 3), "int8"), np.zeros((2, 3), numpy_dtype("int8x4"))):
        with pytest.raises(ExecutionError, match="input %x: expected dtype int8x4"):
            run(value)


@pytest.mark.parametrize("body, where", [
    ("reshape(%x, newshape=[6])", r"call 0 \(reshape\) on Tensor\[\(2, 3\), int8x4\]"),
    ("(%x, transpose(%x))", r"call 0 \(transpose\)"),
    ("%x", "input %x"),
])
def test_build_refuses_a_vector_dtype_naming_the_call(body, where):
    mod = parse(HEADER + f"def @main(%x: Tensor[(2, 3), int8x4]) {{ {body} }}")
    for opt_level in (0, 3):
        with pytest.raises(CompileError, match=where) as info:
            rb.build(mod, opt_level=opt_level)
        assert "vector dtype int8x4 (4 lanes of int8) cannot be run" in str(info.value)
