"""AoT inputs: Lists, Trees and tuples laid out as native objects, checked against the parameter
types all the way down (a bad tensor inside a List is an error naming the input and the
element), with results compared with the reference interpreter and with numpy."""

import numpy as np
import pytest

import relaybench as rb
from relaybench.adt import from_python, to_python
from relaybench.backends.interpreter import ConstructorValue, RefValue
from relaybench.errors import ExecutionError


def aot(mod, **kw):
    return rb.build(mod, target="llvm", opt_level=0, executor="aot", **kw)


def prelude_module(text: str):
    mod = rb.IRModule().import_prelude()
    mod["main"] = rb.ir.parse_expr(text, mod=mod)
    return mod


SUM_ROWS = """
fn (%xs: List[Tensor[(1, 4), float32]]) -> Tensor[(1, 4), float32] {
  @foldl(fn (%acc: Tensor[(1, 4), float32], %x: Tensor[(1, 4), float32]) { add(%acc, %x) },
         zeros(shape=[1, 4], dtype="float32"), %xs)
}"""


def steps(n, seed=0, shape=(1, 4)):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype("float32") for _ in range(n)]


def test_list_of_tensors_matches_numpy_and_the_interpreter():
    mod = prelude_module(SUM_ROWS)
    lib = aot(mod)
    xs = steps(35)
    want = rb.create_executor("debug", mod=mod).evaluate()(from_python(xs))
    for value in (xs, from_python(xs)):
        got = lib.run(value)
        np.testing.assert_allclose(got, want, rtol=1e-6)
        np.testing.assert_allclose(got, np.sum(xs, axis=0), rtol=1e-5, atol=1e-6)
    # non-contiguous, read-only and shared elements give the same sums
    odd = [np.asfortranarray(np.tile(x, (1, 1))) for x in xs]
    odd[3] = np.repeat(xs[3], 2, axis=1)[:, ::2]
    odd[4] = xs[4].copy()
    odd[4].setflags(write=False)
    odd[5] = odd[6]
    np.testing.assert_allclose(lib.run(odd), np.sum(odd, axis=0), rtol=1e-5, atol=1e-6)
    assert lib.run([]).tolist() == [[0, 0, 0, 0]]


def test_long_list_converts_without_recursion_and_reuses_buffers():
    mod = prelude_module(SUM_ROWS)
    lib = aot(mod)
    xs = [np.full((1, 4), 1, "float32")] * 100_000
    np.testing.assert_array_equal(lib.run(xs), np.full((1, 4), 100_000, "float32"))
    # a shorter list after a long one, then the long one again (a fresh copy)
    np.testing.assert_array_equal(lib.run(xs[:3]), np.full((1, 4), 3, "float32"))
    np.testing.assert_array_equal(lib.run([x.copy() for x in xs]),
                                  np.full((1, 4), 100_000, "float32"))


def test_long_list_of_scalars_and_its_length():
    mod = prelude_module("fn (%xs: List[int32]) -> int32 { @length(%xs) }")
    lib = aot(mod)
    assert int(lib.run(list(range(100_000)))) == 100_000
    mod = prelude_module("fn (%xs: List[int32]) { @rev(%xs) }")
    got = to_python(aot(mod).run(list(range(1000))))
    assert [int(v) for v in got] == list(range(999, -1, -1))


def test_tree_matches_the_interpreter():
    mod = prelude_module("""
fn (%t: Tree[Tensor[(2), float32]]) {
  (@tmap(fn (%x: Tensor[(2), float32]) -> Tensor[(2), float32] { multiply(%x, 2f) }, %t),
   @size(%t))
}""")
    rng = np.random.default_rng(1)

    def leaf():
        return rng.standard_normal(2).astype("float32")

    tree = (leaf(), [(leaf(), [(leaf(), []), (leaf(), [])]), (leaf(), []),
                     (leaf(), [(leaf(), [(leaf(), [])])])])
    want = rb.create_executor("debug", mod=mod).evaluate()(from_python(tree, "Tree"))
    got = aot(mod).run(tree)
    assert int(got[1]) == int(want[1]) == 8
    stack = [(to_python(got[0]), to_python(want[0]), tree)]
    while stack:
        (g, gk), (w, wk), (x, xk) = stack.pop()
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(g, 2 * x)
        assert len(gk) == len(wk) == len(xk)
        stack.extend(zip(gk, wk, xk))


def test_nested_tuples_of_lists_match_the_interpreter():
    mod = prelude_module("""
fn (%p: (List[Tensor[(3), float32]], (List[int32], Tensor[(3), float32]))) {
  let %xs = %p.0;
  let %q = %p.1;
  (@foldl(fn (%a: Tensor[(3), float32], %x: Tensor[(3), float32]) { add(%a, %x) }, %q.1, %xs),
   @length(%q.0), @rev(%xs))
}""")
    xs = steps(5, shape=(3,))
    ns = [np.int32(k) for k in range(7)]
    base = np.arange(3, dtype="float32")
    arg = (from_python(xs), (from_python(ns), base))
    want = rb.create_executor("debug", mod=mod).evaluate()(arg)
    got = aot(mod).run(arg)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_allclose(got[0], base + np.sum(xs, axis=0), rtol=1e-5)
    assert int(got[1]) == int(want[1]) == 7
    for g, x in zip(to_python(got[2]), reversed(xs)):
        np.testing.assert_array_equal(g, x)


def test_a_shared_reference_inside_a_list_is_one_object():
    mod = prelude_module("""
fn (%rs: List[Ref[int32]]) -> int32 {
  @foldl(fn (%acc: int32, %r: Ref[int32]) {
    let %_ = ref_write(%r, add(ref_read(%r), 1));
    add(%acc, ref_read(%r)) }, 0, %rs)
}""")
    r = RefValue(np.array(0, "int32"))
    want_ref = RefValue(np.array(0, "int32"))
    want = rb.create_executor("debug", mod=mod).evaluate()(from_python([want_ref] * 3))
    got = aot(mod).run(from_python([r] * 3))
    assert int(got) == int(want) == 6 and int(r.value) == int(want_ref.value) == 3


def test_bad_elements_are_errors_naming_the_input_and_the_element():
    mod = prelude_module(SUM_ROWS)
    lib = aot(mod)
    xs = steps(6)
    bad_dtype = list(xs)
    bad_dtype[3] = xs[3].astype("float64")
    with pytest.raises(ExecutionError, match=r"%xs\[3\].*dtype float32.*float64") as info:
        lib.run(bad_dtype)
    assert info.value.input_name == "xs"
    bad_shape = list(xs)
    bad_shape[4] = np.zeros((1, 5), "float32")
    with pytest.raises(ExecutionError, match=r"%xs\[4\].*shape.*\[1, 5\]"):
        lib.run(bad_shape)
    bad_rank = list(xs)
    bad_rank[0] = np.zeros(4, "float32")
    with pytest.raises(ExecutionError, match=r"%xs\[0\].*shape"):
        lib.run(bad_rank)
    not_tensor = list(xs)
    not_tensor[5] = (xs[5],)
    with pytest.raises(ExecutionError, match=r"%xs\[5\].*expected Tensor"):
        lib.run(from_python(not_tensor))
    # the good list still runs after the errors
    np.testing.assert_allclose(lib.run(xs), np.sum(xs, axis=0), rtol=1e-5, atol=1e-6)


def test_bad_values_in_a_tree_and_a_tuple_are_named():
    mod = prelude_module("""
fn (%p: (Tensor[(2), float32], Tree[Tensor[(2), float32]])) -> int32 { @size(%p.1) }""")
    lib = aot(mod)
    x = np.zeros(2, "float32")
    good = (x, from_python((x, [(x, []), (x, [])]), "Tree"))
    assert int(lib.run(good)) == 3
    bad = (x, from_python((x, [(x, []), (np.zeros(3, "float32"), [])]), "Tree"))
    with pytest.raises(ExecutionError, match=r"%p\.1\.children\[1\]\.value.*shape"):
        lib.run(bad)
    with pytest.raises(ExecutionError, match=r"%p\.0.*dtype"):
        lib.run((np.zeros(2, "int32"), good[1]))
    some = ConstructorValue(mod.get_constructor("Cons"), (x, from_python([])))
    with pytest.raises(ExecutionError, match=r"%p\.1.*Tree"):
        lib.run((x, some))


def _elements(value):
    out = []
    while value.constructor.name_hint == "Cons":
        out.append(np.asarray(value.fields[0]))
        value = value.fields[1]
    assert value.constructor.name_hint == "Nil"
    return out


@pytest.mark.parametrize("shape", [(), (2, 3)])
@pytest.mark.parametrize("n", [0, 1, 20])
def test_a_list_of_tensors_returned_is_the_interpreters(shape, n):
    """A List of tensors of one shape comes back through the gathered path; each element is its
    own value (changing one changes no other), and the next run does not change them."""
    dims = ", ".join(str(d) for d in shape)
    text = f"""
fn (%x: Tensor[({dims}), float32], %n: int32) -> List[Tensor[({dims}), float32]] {{
  let %go = fn (%i: int32, %acc: List[Tensor[({dims}), float32]]) -> List[Tensor[({dims}), float32]] {{
    if (less(%i, %n)) {{
      %go(add(%i, 1), Cons(multiply(%x, cast(%i, dtype="float32")), %acc))
    }} else {{ %acc }}
  }};
  %go(0, Nil)
}}"""
    mod = prelude_module(text)
    lib = aot(mod)
    x = np.arange(1, 1 + int(np.prod(shape)), dtype="float32").reshape(shape)
    got = lib.run(x, np.int32(n))
    want = rb.create_executor("debug", mod=mod).evaluate()(x, np.int32(n))
    got_list, want_list = _elements(got), _elements(want)
    assert len(got_list) == len(want_list) == n
    for g, w in zip(got_list, want_list):
        assert g.shape == shape and g.dtype == np.float32
        np.testing.assert_array_equal(g, w)
    if n > 1:
        kept = [g.copy() for g in got_list]
        got_list[0][...] = -1
        np.testing.assert_array_equal(got_list[1], kept[1])
        lib.run(2 * x, np.int32(n))
        np.testing.assert_array_equal(_elements(got)[1], kept[1])


def test_a_list_of_mixed_shapes_or_tuples_comes_back_whole():
    """Elements of different shapes, and tuples, take the general path."""
    mod = prelude_module("""
fn (%x: Tensor[(2), float32]) -> List[(Tensor[(2), float32], int32)] {
  Cons((%x, 1), Cons((add(%x, %x), 2), Nil))
}""")
    got = aot(mod).run(np.array([1.0, 2.0], "float32"))
    first, rest = got.fields
    np.testing.assert_array_equal(first[0], [1.0, 2.0])
    assert int(first[1]) == 1
    np.testing.assert_array_equal(rest.fields[0][0], [2.0, 4.0])
