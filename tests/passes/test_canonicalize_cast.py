"""CanonicalizeCast: before/expected programs for each rule, what it leaves alone, and the
interpreter before and after."""

import doctest

import numpy as np
import pytest

import relaybench as rb
from relaybench.ir import assert_structural_equal, op_histogram
from relaybench.passes import canonicalize_cast as cast_module
from relaybench.testing import run_infer_type

H = '#[version = "0.0.5"]\n'


def canon(mod):
    return rb.passes.CanonicalizeCast()(mod)


def run(mod, *args):
    return rb.create_executor("interpreter", mod=mod).evaluate()(*args)


def test_docstring_example():
    assert doctest.testmod(cast_module).failed == 0


def test_pass_info():
    p = rb.passes.CanonicalizeCast()
    assert p.info.name == "CanonicalizeCast" and p.info.opt_level == 3 and p.info.kebab == "canonicalize-cast"


def test_dtype_bits():
    assert [cast_module.dtype_bits(d) for d in ("bool", "int8", "uint16", "float16", "float32", "int64")] == \
        [1, 8, 16, 16, 32, 64]


def test_each_elementwise_consumer_gets_its_own_upcast():
    before = rb.parse(H + """
def @main(%x: Tensor[(4), int8], %y: Tensor[(4), int32]) {
  %0 = cast(%x, dtype="int32");
  %1 = add(%0, %y);
  %2 = multiply(%0, %y);
  %3 = maximum(%0, %1);
  (%2, %3)
}""")
    # in evaluation order multiply comes first and keeps the original; add and maximum get copies
    expected = rb.parse(H + """
def @main(%x: Tensor[(4), int8], %y: Tensor[(4), int32]) {
  %0 = cast(%x, dtype="int32");
  %2 = multiply(%0, %y);
  %1 = add(cast(%x, dtype="int32"), %y);
  %3 = maximum(cast(%x, dtype="int32"), %1);
  (%2, %3)
}""")
    after = canon(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    assert op_histogram(after)["cast"] == 3
    x = np.array([-128, -1, 0, 127], "int8")
    y = np.array([1000, 2, -3, 40000], "int32")
    for got, want in zip(run(after, x, y), run(before, x, y)):
        np.testing.assert_array_equal(got, want)


def test_float16_upcast_into_broadcast_consumers():
    before = rb.parse(H + """
def @main(%x: Tensor[(2, 3), float16], %b: Tensor[(3), float32]) {
  %0 = cast(%x, dtype="float32");
  (add(%0, %b), nn.relu(%0))
}""")
    expected = rb.parse(H + """
def @main(%x: Tensor[(2, 3), float16], %b: Tensor[(3), float32]) {
  (add(cast(%x, dtype="float32"), %b), nn.relu(cast(%x, dtype="float32")))
}""")
    assert_structural_equal(run_infer_type(canon(before)), run_infer_type(expected), map_free_vars=True)


def test_consumer_using_the_cast_twice_gets_one_copy():
    before = rb.parse(H + """
def @main(%x: Tensor[(4), int8]) {
  %0 = cast(%x, dtype="int32");
  (negative(%0), add(%0, %0))
}""")
    expected = rb.parse(H + """
def @main(%x: Tensor[(4), int8]) {
  %1 = cast(%x, dtype="int32");
  (negative(cast(%x, dtype="int32")), add(%1, %1))
}""")
    assert_structural_equal(run_infer_type(canon(before)), run_infer_type(expected), map_free_vars=True)


def test_other_consumers_keep_sharing_the_original():
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 2, 4, 4), float16], %w: Tensor[(3, 2, 1, 1), float32]) {
  %0 = cast(%x, dtype="float32");
  %1 = nn.conv2d(%0, %w, channels=3, kernel_size=[1, 1]);
  %2 = nn.relu(%0);
  %3 = sum(%0);
  (%1, %2, %3)
}""")
    after = canon(before)
    assert after is before  # one elementwise consumer: nothing to duplicate


@pytest.mark.parametrize("text", [
    # narrowing and same-width casts are left alone
    'def @main(%x: Tensor[(4), float32]) { %0 = cast(%x, dtype="float16"); (negative(%0), exp(%0)) }',
    'def @main(%x: Tensor[(4), int32]) { %0 = cast(%x, dtype="float32"); (negative(%0), exp(%0)) }',
    # a single consumer
    'def @main(%x: Tensor[(4), int8]) { negative(cast(%x, dtype="int32")) }',
    # inside a Primitive function
    """def @main(%x: Tensor[(4), int8]) {
         %0 = fn (%p: Tensor[(4), int8], Primitive=1) { %1 = cast(%p, dtype="int32"); (negative(%1), abs(%1)) };
         %0(%x)
       }""",
])
def test_unchanged_programs_come_back_as_the_same_module(text):
    mod = rb.parse(H + text)
    assert canon(mod) is mod


def test_closures_and_branches_are_rewritten_too():
    before = rb.parse(H + """
def @main(%x: Tensor[(4), int8], %c: bool) {
  %5 = fn (%y: Tensor[(4), int8]) {
    %0 = cast(%y, dtype="int64");
    if (%c) { add(%0, %0) } else { subtract(%0, negative(%0)) }
  };
  %5(%x)
}""")
    after = canon(before)
    # add (using it twice) keeps the original; negative and subtract get copies
    assert op_histogram(after)["cast"] == 3
    x = np.array([-3, 5, 0, 100], "int8")
    for c in (True, False):
        np.testing.assert_array_equal(run(after, x, np.bool_(c)), run(before, x, np.bool_(c)))


def test_quantized_style_block_keeps_its_results():
    rng = np.random.default_rng(0)
    before = rb.parse(H + """
def @main(%x: Tensor[(8, 8), int8], %s: Tensor[(8), int32], %t: Tensor[(8), int32]) {
  %0 = cast(%x, dtype="int32");
  %1 = multiply(%0, %s);
  %2 = add(%0, %t);
  %3 = right_shift(%0, 1);
  %4 = clip(%3, a_min=-10f, a_max=10f);
  (%1, %2, %4, %0)
}""")
    after = canon(before)
    assert op_histogram(after)["cast"] == 3
    args = (rng.integers(-128, 128, (8, 8)).astype("int8"), rng.integers(-5, 5, 8).astype("int32"),
            rng.integers(-5, 5, 8).astype("int32"))
    for got, want in zip(run(after, *args), run(before, *args)):
        np.testing.assert_array_equal(got, want)
