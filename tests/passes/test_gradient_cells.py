"""Relay's gradient helpers (std/gradient.rly): GradCell, @FromGradCell, @AddGradCell,
@MultiplyGradCell, checked on the interpreter against hand-computed values and numpy finite
differences."""

import itertools

import numpy as np
import pytest

import relaybench as rb
from relaybench.ir import structural_equal
from relaybench.passes.gradient import import_gradient_cells

_HEADER = '''#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  let %mul = fn (%a: Tensor[(3), float32], %b: Tensor[(3), float32]) { multiply(%a, %b) };
  let %add = fn (%a: Tensor[(3), float32], %b: Tensor[(3), float32]) { add(%a, %b) };
  let %one = One(fn () { ones_like(%x) });
  let %zero = Zero(fn () { zeros_like(%x) });
'''


def _run(body: str, x, y):
    mod = rb.parse(_HEADER + body + "\n}\n", init_module=import_gradient_cells())
    return rb.create_executor("interpreter", mod=mod).evaluate()(x, y)


X = np.array([1.0, -2.0, 3.5], "float32")
Y = np.array([4.0, 0.5, -6.0], "float32")


def test_the_helpers_load_and_type_check():
    mod = import_gradient_cells()
    cell = mod.get_type("GradCell")
    assert [c.name_hint for c in cell.constructors] == ["Raw", "One", "Zero"]
    assert str(mod["FromGradCell"].checked_type) == "fn [T](GradCell[T]) -> T"
    for name, what in (("AddGradCell", "add"), ("MultiplyGradCell", "multiply")):
        assert str(mod[name].checked_type) == \
            "fn [T](fn (T, T) -> T, GradCell[T], GradCell[T]) -> GradCell[T]", what
    again = import_gradient_cells(mod)
    assert again is mod and len(mod.get_global_vars()) == 3
    # the text prints and reads back
    assert structural_equal(rb.parse(mod.astext()), mod)


# what each helper gives for each pair of cells (Raw cells hold x and y): the constructor of the
# result and its value, worked out by hand from the definitions
_CELLS = {"%zero": ("Zero", np.zeros(3, "float32")), "%one": ("One", np.ones(3, "float32")),
          "Raw(%x)": ("Raw", X), "Raw(%y)": ("Raw", Y)}


def _expected(helper, left, right):
    (lk, lv), (rk, rv) = _CELLS[left], _CELLS[right]
    if helper == "AddGradCell":
        if lk == "Zero":
            return rk, rv
        if rk == "Zero":
            return lk, lv
        return "Raw", lv + rv
    if lk == "Zero":
        return lk, lv
    if rk == "Zero":
        return rk, rv
    if lk == "One":
        return rk, rv
    if rk == "One":
        return lk, lv
    return "Raw", lv * rv


@pytest.mark.parametrize("helper", ["AddGradCell", "MultiplyGradCell"])
def test_each_pair_of_cells(helper):
    pairs = list(itertools.product(_CELLS, repeat=2))
    op = "%add" if helper == "AddGradCell" else "%mul"
    lets = "".join(f"  let %c{i} = @{helper}({op}, {a}, {b});\n" for i, (a, b) in enumerate(pairs))
    fields = ", ".join(f"(%c{i}, @FromGradCell(%c{i}))" for i in range(len(pairs)))
    out = _run(lets + f"  ({fields})", X, Y)
    for (left, right), (cell, value) in zip(pairs, out):
        kind, expected = _expected(helper, left, right)
        assert cell.name == kind, (helper, left, right)
        np.testing.assert_array_equal(value, expected, err_msg=f"{helper}({left}, {right})")


def test_zero_and_one_are_handed_on_without_arithmetic():
    # multiplying by a one gives back the very cell, so a Raw adjoint keeps its value, and a zero
    # stays a thunk whose adjoint is never made unless it is read
    out = _run("  (@MultiplyGradCell(%mul, %one, Raw(%y)), @MultiplyGradCell(%mul, Raw(%y), %zero),"
               " @AddGradCell(%add, %zero, %zero))", X, Y)
    assert out[0].name == "Raw"
    np.testing.assert_array_equal(out[0].fields[0], Y)
    assert out[1].name == "Zero" and out[2].name == "Zero"


def _finite_difference(f, args, i, eps=1e-3):
    """d sum(f(args)) / d args[i], by central differences in float64."""
    args = [a.astype("float64") for a in args]
    grad = np.zeros_like(args[i])
    for k in range(args[i].size):
        hi = [a.copy() for a in args]
        lo = [a.copy() for a in args]
        hi[i].flat[k] += eps
        lo[i].flat[k] -= eps
        grad.flat[k] = (f(*hi).sum() - f(*lo).sum()) / (2 * eps)
    return grad


def test_reverse_mode_with_cells_matches_finite_differences():
    # f(x, y) = x * y * y + x, swept backward by hand with cells: the seed is One, each use of a
    # value adds its contribution to the value's cell, which starts as Zero
    body = '''  let %t = multiply(%x, %y);
  let %dt = @MultiplyGradCell(%mul, %one, Raw(%y));
  let %dx = @AddGradCell(%add, @AddGradCell(%add, %zero, @MultiplyGradCell(%mul, %dt, Raw(%y))), %one);
  let %dy = @AddGradCell(%add, @AddGradCell(%add, %zero, @MultiplyGradCell(%mul, %one, Raw(%t))),
                         @MultiplyGradCell(%mul, %dt, Raw(%x)));
  (@FromGradCell(%dx), @FromGradCell(%dy))'''
    dx, dy = _run(body, X, Y)

    def f(x, y):
        return x * y * y + x

    np.testing.assert_allclose(dx, _finite_difference(f, [X, Y], 0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dy, _finite_difference(f, [X, Y], 1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dx, Y * Y + 1)
    np.testing.assert_allclose(dy, 2 * X * Y)
