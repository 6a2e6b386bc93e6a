"""SpecializeConstantArgs: a parameter every call gives the same constant (or, from inside the
function, the parameter itself) becomes that constant; anything else keeps its parameter. Each
rewritten program computes what the original did on the reference interpreter."""

import numpy as np
import pytest

import relaybench as rb
from relaybench.passes.bind_params import bind_params
from relaybench.passes.specialize_constant_args import SpecializeConstantArgs

W = np.array([1.0, -2.0, 0.5], "float32")

RECURSIVE = '''#[version = "0.0.5"]
def @down(%n: int32, %w: Tensor[(3), float32], %b: Tensor[(3), float32]) -> Tensor[(3), float32] {
  if (less(%n, 1)) { %b } else {
    let %f = fn (%k: int32) -> Tensor[(3), float32] { @down(%k, %w, %b) };
    add(%f(subtract(%n, 1)), multiply(%w, %b))
  }
}
def @main(%n: int32, %w: Tensor[(3), float32], %b: Tensor[(3), float32]) {
  @down(%n, %w, %b)
}'''


def _run(mod, *args):
    return np.asarray(rb.create_executor("debug", mod).evaluate()(*args))


def test_weights_passed_down_a_recursion_through_a_closure_become_constants():
    mod = rb.parse(RECURSIVE)
    bound = bind_params(mod, {"w": W})
    out = SpecializeConstantArgs()(bound)
    assert [p.name_hint for p in out["down"].params] == ["n", "b"]
    assert [p.name_hint for p in out["main"].params] == ["n", "b"]
    b = np.array([0.25, 1.0, -3.0], "float32")
    got = _run(out, np.int32(4), b)
    want = b + 4 * (W * b)       # by hand: four levels each add w * b to the leaf's b
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_array_equal(got, _run(mod, np.int32(4), W, b))


def test_different_constants_or_a_value_keep_the_parameter():
    mod = rb.parse('''#[version = "0.0.5"]
def @scale(%x: Tensor[(3), float32], %w: Tensor[(3), float32]) -> Tensor[(3), float32] {
  multiply(%x, %w)
}
def @main(%x: Tensor[(3), float32], %w: Tensor[(3), float32], %v: Tensor[(3), float32]) {
  add(@scale(%x, %w), @scale(%x, %v))
}''')
    bound = bind_params(mod, {"w": W, "v": 2 * W})
    out = SpecializeConstantArgs()(bound)
    assert [p.name_hint for p in out["scale"].params] == ["x", "w"]   # two different constants
    same = bind_params(mod, {"w": W, "v": W.copy()})                   # equal bytes, two objects
    out = SpecializeConstantArgs()(same)
    assert [p.name_hint for p in out["scale"].params] == ["x"]
    x = np.array([1.0, 2.0, 3.0], "float32")
    np.testing.assert_array_equal(_run(out, x), 2 * x * W)


def test_a_function_used_as_a_value_keeps_its_signature():
    mod = rb.parse('''#[version = "0.0.5"]
def @scale(%x: Tensor[(3), float32], %w: Tensor[(3), float32]) -> Tensor[(3), float32] {
  multiply(%x, %w)
}
def @apply(%f: fn (Tensor[(3), float32], Tensor[(3), float32]) -> Tensor[(3), float32],
           %x: Tensor[(3), float32], %w: Tensor[(3), float32]) -> Tensor[(3), float32] {
  %f(%x, %w)
}
def @main(%x: Tensor[(3), float32], %w: Tensor[(3), float32]) {
  add(@apply(@scale, %x, %w), @scale(%x, %w))
}''')
    out = SpecializeConstantArgs()(bind_params(mod, {"w": W}))
    assert [p.name_hint for p in out["scale"].params] == ["x", "w"]
    assert [p.name_hint for p in out["apply"].params] == ["f", "x"]
    x = np.array([1.0, 2.0, 3.0], "float32")
    np.testing.assert_array_equal(_run(out, x), 2 * x * W)


def test_constants_flow_down_a_chain_and_nothing_changes_without_them():
    mod = rb.parse('''#[version = "0.0.5"]
def @inner(%x: Tensor[(3), float32], %w: Tensor[(3), float32]) -> Tensor[(3), float32] {
  multiply(%x, %w)
}
def @outer(%x: Tensor[(3), float32], %w: Tensor[(3), float32]) -> Tensor[(3), float32] {
  @inner(add(%x, %w), %w)
}
def @main(%x: Tensor[(3), float32], %w: Tensor[(3), float32]) {
  @outer(%x, %w)
}''')
    assert SpecializeConstantArgs()(mod) is mod
    out = SpecializeConstantArgs()(bind_params(mod, {"w": W}))
    assert [p.name_hint for p in out["outer"].params] == ["x"]
    assert [p.name_hint for p in out["inner"].params] == ["x"]
    x = np.array([1.0, 2.0, 3.0], "float32")
    np.testing.assert_array_equal(_run(out, x), (x + W) * W)


def test_a_long_recursion_chain_of_functions():
    """Many functions in a chain: the pass repeats without Python recursion on their number."""
    n = 60
    lines = ['#[version = "0.0.5"]']
    for k in range(n):
        call = f"@f{k + 1}(add(%x, %w), %w)" if k + 1 < n else "multiply(%x, %w)"
        lines.append(f"def @f{k}(%x: Tensor[(3), float32], %w: Tensor[(3), float32]) "
                     f"-> Tensor[(3), float32] {{ {call} }}")
    lines.append("def @main(%x: Tensor[(3), float32], %w: Tensor[(3), float32]) { @f0(%x, %w) }")
    mod = bind_params(rb.parse("\n".join(lines)), {"w": W})
    out = SpecializeConstantArgs()(mod)
    assert all(len(out[f"f{k}"].params) == 1 for k in range(n))
    x = np.array([1.0, 2.0, 3.0], "float32")
    np.testing.assert_allclose(_run(out, x), (x + (n - 1) * W) * W, rtol=1e-6)
