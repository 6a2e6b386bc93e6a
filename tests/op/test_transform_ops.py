"""Transform and image operators.

Results run through the interpreter and are compared with numpy formulas written here (index
arithmetic, slicing, hand-computed pixels), never with the ops' own references; type relations
are checked against the shapes numpy gives for random shapes and attributes.
"""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import relaybench as rb
from relaybench import op
from relaybench.errors import TypeInferenceError
from relaybench.ir import ANY, Function, IRModule, SymVar, Tuple, TupleGetItem, const, var
from relaybench.ir.parser import parse
from relaybench.ir.printer import astext
from relaybench.ir.structural import assert_structural_equal
from relaybench.ir.type_infer import infer_expr
from relaybench.ir.types import IncompleteType, TensorType, TupleType
from relaybench.op.registry import OpPattern, get_opdef

f32, i32, i64 = "float32", "int32", "int64"
n, m = SymVar("n"), SymVar("m")
DTYPES = [f32, i32]


def T(*shape, dtype=f32):
    return TensorType(shape, dtype)


def v(name, *shape, dtype=f32):
    return var(name, shape=shape, dtype=dtype)


def raises(message):
    """pytest.raises for a TypeInferenceError whose text starts with ``message``."""
    return pytest.raises(TypeInferenceError, match="^" + re.escape(message))


def run(params, body, *args):
    """Run ``fn (params) { body }`` on ``args`` in the interpreter (which type-checks first)."""
    mod = IRModule.from_expr(Function(list(params), body))
    return rb.create_executor("interpreter", mod=mod).evaluate()(*args)


def same(got, expected):
    """Equal values, shape and dtype (floats to float32 rounding)."""
    expected = np.asarray(expected)
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    if np.issubdtype(expected.dtype, np.floating):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, expected)


def data(shape, dtype):
    """0, 1, 2, ... in ``shape``: every element tells where it came from."""
    return np.arange(int(np.prod(shape))).reshape(shape).astype(dtype)


def out_shape(expr):
    t = infer_expr(expr)
    assert isinstance(t, TensorType)
    return t.shape


# ---------------------------------------------------------------------------------------------
# Registry entries

PATTERNS = {
    "reshape": OpPattern.INJECTIVE, "reshape_like": OpPattern.INJECTIVE,
    "transpose": OpPattern.INJECTIVE, "squeeze": OpPattern.INJECTIVE,
    "expand_dims": OpPattern.BROADCAST, "concatenate": OpPattern.INJECTIVE,
    "split": OpPattern.INJECTIVE, "stack": OpPattern.INJECTIVE, "take": OpPattern.INJECTIVE,
    "strided_slice": OpPattern.INJECTIVE, "broadcast_to": OpPattern.BROADCAST,
    "tile": OpPattern.BROADCAST, "repeat": OpPattern.BROADCAST,
    "layout_transform": OpPattern.INJECTIVE, "shape_of": OpPattern.OPAQUE,
    "arange": OpPattern.OPAQUE, "one_hot": OpPattern.OUT_ELEMWISE_FUSABLE,
    "image.resize2d": OpPattern.INJECTIVE,
}


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_registry_entry(name):
    d = get_opdef(name)
    assert d.pattern == PATTERNS[name]          # TVM's TOpPattern for each
    assert d.reference is not None and len(d.doc) > 40
    assert d.type_rel([IncompleteType()] * len(d.inputs), d.make_attrs({})) is None


def test_attribute_defaults_are_relays():
    defaults = {
        "squeeze": {"axis": None},
        "expand_dims": {"axis": 0, "num_newaxis": 1},
        "stack": {"axis": 0},
        "take": {"batch_dims": 0, "axis": None, "mode": "clip"},
        "strided_slice": {"begin": (), "end": (), "strides": None, "axes": None, "slice_mode": "end"},
        "reshape_like": {"lhs_begin": 0, "lhs_end": None, "rhs_begin": 0, "rhs_end": None},
        "shape_of": {"dtype": "int32"},
        "one_hot": {"depth": 1, "axis": -1, "dtype": "float32"},
        "layout_transform": {"src_layout": "", "dst_layout": ""},
    }
    for name, expected in defaults.items():
        assert dict(get_opdef(name).make_attrs({})) == expected, name
    r = get_opdef("image.resize2d").make_attrs({"size": 4})
    assert r.size == (4, 4) and r.roi == (0.0, 0.0, 0.0, 0.0) and r.layout == "NCHW"
    assert (r.method, r.coordinate_transformation_mode, r.rounding_method) == ("linear", "half_pixel", "")
    assert (r.cubic_alpha, r.cubic_exclude, r.extrapolation_value, r.out_dtype) == (-0.5, 0, 0.0, "")


@pytest.mark.parametrize("name, attrs, message", [
    ("strided_slice", {"begin": [0], "end": [1], "strides": [0]}, "strided_slice: strides cannot hold 0"),
    ("strided_slice", {"slice_mode": "stride"}, "strided_slice: slice_mode must be one of 'end', 'size'"),
    ("strided_slice", {"begin": [0, 0], "end": [1], "axes": [0]},
     "strided_slice: begin, end and axes must have one value per sliced axis, got 2, 1 and 1"),
    ("take", {"mode": "nan"}, "take: mode must be one of 'clip', 'wrap', 'fast', got 'nan'"),
    ("tile", {"reps": [2, 0]}, "tile: reps must be at least 1, got 0"),
    ("repeat", {"repeats": 0}, "repeat: repeats must be at least 1, got 0"),
    ("expand_dims", {"num_newaxis": -1}, "expand_dims: num_newaxis must be at least 0"),
    ("one_hot", {"depth": 0}, "one_hot: depth must be at least 1"),
    ("shape_of", {"dtype": "float31"}, "shape_of: dtype: unknown dtype 'float31'"),
    ("layout_transform", {"src_layout": "NCHW", "dst_layout": "OIHW"},
     "layout_transform: src_layout NCHW and dst_layout OIHW have different axes"),
    ("layout_transform", {"src_layout": "NCHW4", "dst_layout": "NCHW"},
     "layout_transform: invalid layout 'NCHW4'"),
    ("arange", {"step": 0}, "arange: step cannot be 0"),
    ("image.resize2d", {"method": "bilinear"}, "image.resize2d: method must be one of"),
    ("image.resize2d", {"size": (2, 2, 2)}, "image.resize2d: size must have 2 values"),
    ("image.resize2d", {"layout": "NCHW4h"}, "image.resize2d: layout='NCHW4h' splits H or W"),
    ("image.resize2d", {"roi": [0.0, 1.0]}, "image.resize2d: roi must have 4 values"),
    ("image.resize2d", {"coordinate_transformation_mode": "corners"},
     "image.resize2d: coordinate_transformation_mode must be one of"),
])
def test_bad_attributes(name, attrs, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        get_opdef(name).make_attrs(attrs)


# ---------------------------------------------------------------------------------------------
# reshape and reshape_like

@pytest.mark.parametrize("ishape, newshape, expected", [
    ((2, 3, 4), (4, 6), (4, 6)),
    ((2, 3, 4), (0, 0, 4), (2, 3, 4)),          # 0 copies the dim at its position
    ((2, 3, 4), (4, 0, 2), (4, 3, 2)),
    ((2, 3, 4), (6, -1), (6, 4)),               # -1 infers what is left
    ((2, 3, 4), (-1, 2, 2), (6, 2, 2)),
    ((2, 3, 4), (0, -2), (2, 3, 4)),            # -2 copies the rest
    ((2, 3, 4), (-2,), (2, 3, 4)),
    ((2, 3, 4, 5), (-3, -2), (6, 4, 5)),        # -3 merges two
    ((2, 3, 4, 5), (0, -3, 0), (2, 12, 5)),
    ((2, 3, 4, 5), (-3, -3), (6, 20)),
    ((6, 4), (-4, 2, 3, 0), (2, 3, 4)),         # -4 splits one into two
    ((6, 4), (-4, -1, 3, 0), (2, 3, 4)),
    ((6, 4), (-4, 3, -1, -1), (3, 2, 4)),
    ((2, 3, 4), (2, -4, -1, 1, -2), (2, 3, 1, 4)),
    ((2, 3, 4), (-1, 0, 0), (2, 3, 4)),         # -1 also steps over one input dim
])
def test_reshape_special_values(ishape, newshape, expected):
    assert out_shape(op.reshape(v("x", *ishape), newshape=newshape)) == expected


@pytest.mark.parametrize("dtype", DTYPES)
def test_reshape_runs(dtype):
    x = v("x", 2, 3, 4, dtype=dtype)
    arr = data((2, 3, 4), dtype)
    got = run([x], op.reshape(x, newshape=(-4, 1, 2, -3)), arr)
    # row-major order is kept: element k of the flat input is element k of the output
    same(got, np.arange(24).astype(dtype).reshape(1, 2, 12))
    got = run([x], op.reshape(x, newshape=(0, -1)), arr)
    assert got[1, 5] == 12 + 5 and got.shape == (2, 12)


def test_reshape_allowzero_and_symbolic():
    assert out_shape(op.reshape(v("x", 0, 4), newshape=(0, 2, 2), allowzero=1)) == (0, 2, 2)
    assert out_shape(op.reshape(v("x", 2, 4), newshape=(0, 2, 2))) == (2, 2, 2)
    assert out_shape(op.reshape(v("x", n, 2, 3), newshape=(-1, 3))) == (2 * n, 3)
    assert out_shape(op.reshape(v("x", n, 2, 3), newshape=(0, -3))) == (n, 6)
    assert out_shape(op.reshape(v("x", n, 6), newshape=(0, -4, 2, -1))) == (n, 2, 3)
    assert out_shape(op.reshape(v("x", 2 * n, 3), newshape=(-4, 2, -1, 0))) == (2, n, 3)
    assert out_shape(op.reshape(v("x", n, m), newshape=(-1,))) == (n * m,)
    assert out_shape(op.reshape(v("x", None, 3), newshape=(0, -1))) == (ANY, 3)


@pytest.mark.parametrize("ishape, newshape, message", [
    ((2, 3), (4, 2), "6 elements vs 8"),
    ((4, 6), (6, -1, 5), "24 elements do not divide into blocks of 30"),
    ((2, 3), (-4, 0, 2, 3), "-4 must be followed by two positive values or -1, got 0, 2"),
    ((2, 3), (0, 0, -3), "newshape (0, 0, -3) uses more input dimensions than the input's 2"),
    ((1, 12), (-3, -4, 2, -1), "newshape (-3, -4, 2, -1) uses more input dimensions than the input's 2"),
])
def test_reshape_errors(ishape, newshape, message):
    text = ", ".join(map(str, newshape))
    with raises(f"reshape: cannot reshape {T(*ishape)} to newshape=[{text}]: {message}"):
        infer_expr(op.reshape(v("x", *ishape), newshape=newshape))


@pytest.mark.parametrize("dtype", DTYPES)
def test_reshape_like(dtype):
    x, like = v("x", 2, 12, dtype=dtype), v("y", 3, 4, 5)
    assert out_shape(op.reshape_like(x, like, lhs_begin=1, rhs_end=2)) == (2, 3, 4)
    assert out_shape(op.reshape_like(v("a", 4, 6), v("b", 2, 12))) == (2, 12)
    assert out_shape(op.reshape_like(v("a", n, 6), v("b", 2, 3), lhs_begin=-1)) == (n, 2, 3)
    arr = data((2, 12), dtype)
    got = run([x, like], op.reshape_like(x, like, lhs_begin=1, rhs_end=2), arr, np.zeros((3, 4, 5), f32))
    same(got, np.arange(24).astype(dtype).reshape(2, 3, 4))
    with raises("reshape_like: cannot reshape Tensor[(2, 12), float32] to (2, 3, 5) (taken from "
                "Tensor[(3, 5), float32]): 24 elements vs 30"):
        infer_expr(op.reshape_like(v("a", 2, 12), v("b", 3, 5), lhs_begin=1))
    with raises("reshape_like: lhs_begin=2 and lhs_end=1 do not select a range of the data's 2 axes"):
        infer_expr(op.reshape_like(v("a", 2, 12), v("b", 3, 5), lhs_begin=2, lhs_end=1))


@st.composite
def reshape_cases(draw):
    """An input shape, a newshape using the special values, and its expected output shape, built
    side by side: every piece of newshape consumes input dims and says what it produces."""
    ishape = draw(st.lists(st.integers(1, 6), min_size=1, max_size=5))
    newshape, expected = [], []
    src, inferred = 0, False
    while src < len(ishape):
        d = ishape[src]
        kinds = ["literal", "copy", "split", "rest"]
        kinds += [] if inferred else ["infer"]
        kinds += ["merge"] if src + 1 < len(ishape) else []
        kind = draw(st.sampled_from(kinds))
        if kind == "literal":
            newshape.append(d); expected.append(d); src += 1
        elif kind == "copy":
            newshape.append(0); expected.append(d); src += 1
        elif kind == "infer":
            newshape.append(-1); expected.append(d); src += 1; inferred = True
        elif kind == "merge":
            newshape.append(-3); expected.append(d * ishape[src + 1]); src += 2
        elif kind == "split":
            a = draw(st.sampled_from([k for k in range(1, d + 1) if d % k == 0]))
            form = draw(st.sampled_from(["both", "left", "right"]))
            newshape += [-4, -1 if form == "left" else a, -1 if form == "right" else d // a]
            expected += [a, d // a]; src += 1
        else:
            newshape.append(-2); expected.extend(ishape[src:]); src = len(ishape)
    return tuple(ishape), tuple(newshape), tuple(expected)


@settings(max_examples=150, deadline=None)
@given(reshape_cases())
def test_reshape_relation_property(case):
    ishape, newshape, expected = case
    assert out_shape(op.reshape(v("x", *ishape), newshape=newshape)) == expected
    assert np.empty(ishape).reshape(expected).shape == expected   # numpy agrees it is a reshape


# ---------------------------------------------------------------------------------------------
# transpose, squeeze, expand_dims

@pytest.mark.parametrize("dtype", DTYPES)
def test_transpose_runs(dtype):
    x = v("x", 2, 3, 4, dtype=dtype)
    arr = data((2, 3, 4), dtype)
    got = run([x], op.transpose(x, axes=(2, 0, -2)), arr)
    same(got, np.einsum("ijk->kij", arr))          # out[k, i, j] = x[i, j, k]
    same(run([x], op.transpose(x), arr), np.einsum("ijk->kji", arr))
    assert out_shape(op.transpose(v("x", n, 3, m), axes=(2, 0, 1))) == (m, n, 3)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=0, max_size=5).flatmap(
    lambda s: st.tuples(st.just(s), st.permutations(range(len(s))))))
def test_transpose_relation_property(case):
    shape, perm = case
    assert out_shape(op.transpose(v("x", *shape), axes=tuple(perm))) == np.empty(shape).transpose(perm).shape


@pytest.mark.parametrize("dtype", DTYPES)
def test_squeeze_runs(dtype):
    x = v("x", 1, 3, 1, 2, dtype=dtype)
    arr = data((1, 3, 1, 2), dtype)
    same(run([x], op.squeeze(x), arr), arr.reshape(3, 2))
    same(run([x], op.squeeze(x, axis=(0,)), arr), arr.reshape(3, 1, 2))
    same(run([x], op.squeeze(x, axis=[-2, 0]), arr), arr.reshape(3, 2))


def test_squeeze_symbolic_and_errors():
    assert out_shape(op.squeeze(v("x", 1, n, None, 1))) == (n, ANY)   # symbolic dims are kept
    assert out_shape(op.squeeze(v("x", 2, n), axis=[1])) == (2,)      # listed: assumed to be 1
    with raises("squeeze: cannot squeeze axis 1 of Tensor[(1, 3), float32]: its extent is 3, not 1"):
        infer_expr(op.squeeze(v("x", 1, 3), axis=[1]))
    with raises("squeeze: axis 2 is out of range for rank 2"):
        infer_expr(op.squeeze(v("x", 1, 1), axis=[2]))
    with raises("squeeze: axis -2 is listed twice"):
        infer_expr(op.squeeze(v("x", 1, 1), axis=[0, -2]))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=0, max_size=5), st.data())
def test_squeeze_relation_property(shape, draw):
    ones = [i for i, d in enumerate(shape) if d == 1]
    axes = draw.draw(st.none() | st.lists(st.sampled_from(ones), unique=True) if ones else st.none())
    if axes is not None and draw.draw(st.booleans()):
        axes = [a - len(shape) for a in axes]                     # negative spelling
    expected = np.squeeze(np.empty(shape), axis=None if axes is None else tuple(axes)).shape
    assert out_shape(op.squeeze(v("x", *shape), axis=axes)) == expected


@pytest.mark.parametrize("dtype", DTYPES)
def test_expand_dims_runs(dtype):
    x = v("x", 2, 3, dtype=dtype)
    arr = data((2, 3), dtype)
    same(run([x], op.expand_dims(x, axis=1, num_newaxis=2), arr), arr.reshape(2, 1, 1, 3))
    same(run([x], op.expand_dims(x, axis=-1), arr), arr[:, :, None])
    same(run([x], op.expand_dims(x, axis=0, num_newaxis=0), arr), arr)
    assert out_shape(op.expand_dims(v("x", n, m), axis=-2)) == (n, 1, m)
    with raises("expand_dims: axis 3 is out of range for inserting into rank 2 (it must be in [-3, 2])"):
        infer_expr(op.expand_dims(v("x", 2, 3), axis=3))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=0, max_size=4), st.data())
def test_expand_dims_relation_property(shape, draw):
    axis = draw.draw(st.integers(-len(shape) - 1, len(shape)))
    k = draw.draw(st.integers(0, 3))
    expected = np.empty(shape)
    pivot = axis % (len(shape) + 1)            # numpy's reading of a negative insertion axis
    for _ in range(k):
        expected = np.expand_dims(expected, pivot)
    assert out_shape(op.expand_dims(v("x", *shape), axis=axis, num_newaxis=k)) == expected.shape


# ---------------------------------------------------------------------------------------------
# concatenate, stack, split

@pytest.mark.parametrize("dtype", DTYPES)
def test_concatenate_runs(dtype):
    a, b = v("a", 2, 3, dtype=dtype), v("b", 2, 1, dtype=dtype)
    x, y = data((2, 3), dtype), (100 + data((2, 1), dtype)).astype(dtype)
    expected = np.empty((2, 4), dtype)
    expected[:, :3], expected[:, 3:] = x, y
    same(run([a, b], op.concatenate(Tuple([a, b]), axis=-1), x, y), expected)
    same(run([a, b], op.concatenate([a, b, a], axis=1), x, y)[:, 4:], x)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=4), st.data())
def test_concatenate_relation_property(shape, draw):
    axis = draw.draw(st.integers(-len(shape), len(shape) - 1))
    extents = draw.draw(st.lists(st.integers(0, 4), min_size=1, max_size=4))
    shapes = [tuple(e if i == axis % len(shape) else d for i, d in enumerate(shape)) for e in extents]
    fields = Tuple([v(f"x{i}", *s) for i, s in enumerate(shapes)])
    expected = np.concatenate([np.empty(s) for s in shapes], axis=axis).shape
    assert out_shape(op.concatenate(fields, axis=axis)) == expected


@pytest.mark.parametrize("dtype", DTYPES)
def test_stack_runs(dtype):
    a, b = v("a", 2, 3, dtype=dtype), v("b", 2, 3, dtype=dtype)
    x, y = data((2, 3), dtype), (10 + data((2, 3), dtype)).astype(dtype)
    expected = np.empty((2, 2, 3), dtype)
    expected[:, 0], expected[:, 1] = x, y                  # out[i, k, j] = field_k[i, j]
    same(run([a, b], op.stack(Tuple([a, b]), axis=1), x, y), expected)
    expected = np.empty((2, 3, 2), dtype)
    expected[..., 0], expected[..., 1] = x, y
    same(run([a, b], op.stack([a, b], axis=-1), x, y), expected)


def test_stack_shapes_and_errors():
    assert out_shape(op.stack(Tuple([v("a", n, 3), v("b", n, 3), v("c", n, 3)]))) == (3, n, 3)
    assert out_shape(op.stack(Tuple([v("a", None, 3), v("b", 4, 3)]), axis=2)) == (4, 3, 2)
    assert out_shape(op.stack(Tuple([v("a"), v("b")]))) == (2,)
    with raises("stack: field 1 has shape (2, 4) but field 0 has (2, 3): dimension 1 differs (3 vs 4)"):
        infer_expr(op.stack(Tuple([v("a", 2, 3), v("b", 2, 4)])))
    with raises("stack: field 1 has dtype int32 but field 0 has float32"):
        infer_expr(op.stack(Tuple([v("a", 2), v("b", 2, dtype=i32)])))
    with raises("stack: axis -4 is out of range for inserting into rank 2"):
        infer_expr(op.stack(Tuple([v("a", 2, 3)]), axis=-4))
    with raises("stack: the input tuple is empty: nothing to stack"):
        infer_expr(op.stack(Tuple([])))


@pytest.mark.parametrize("dtype", DTYPES)
def test_split_runs(dtype):
    x = v("x", 2, 6, dtype=dtype)
    arr = data((2, 6), dtype)
    parts = run([x], op.split(x, indices_or_sections=(1, 4), axis=1), arr)
    assert len(parts) == 3
    for got, want in zip(parts, (arr[:, 0:1], arr[:, 1:4], arr[:, 4:6])):
        same(got, want)
    parts = run([x], op.split(x, indices_or_sections=3, axis=-1), arr)
    for k, got in enumerate(parts):
        same(got, arr[:, 2 * k:2 * k + 2])
    got = run([x], TupleGetItem(op.split(x, indices_or_sections=2), 1), arr)
    same(got, arr[1:2])
    assert infer_expr(op.split(v("x", 4), indices_or_sections=())) == TupleType([T(4)])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=3), st.data())
def test_split_relation_property(shape, draw):
    axis = draw.draw(st.integers(0, len(shape) - 1))
    dim = shape[axis]
    if draw.draw(st.booleans()):
        ios = draw.draw(st.sampled_from([k for k in range(1, dim + 1) if dim % k == 0]))
        expected = [p.shape for p in np.split(np.empty(shape), ios, axis=axis)]
    else:
        ios = tuple(sorted(draw.draw(st.sets(st.integers(1, dim - 1), max_size=3)))) if dim > 1 else ()
        expected = [p.shape for p in np.split(np.empty(shape), list(ios), axis=axis)]
    t = infer_expr(op.split(v("x", *shape), indices_or_sections=ios, axis=axis))
    assert [f.shape for f in t.fields] == expected


# ---------------------------------------------------------------------------------------------
# take

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("itype", [i32, i64])
def test_take_modes(dtype, itype):
    x, i = v("x", 2, 3, 4, dtype=dtype), v("i", 5, dtype=itype)
    arr = data((2, 3, 4), dtype)
    idx = np.array([0, 2, -1, 3, 7], itype)
    clipped = np.array([0, 2, 0, 2, 2])        # clip: into [0, 2]; negative indices give 0
    wrapped = np.array([0, 2, 2, 0, 1])        # wrap: modulo 3
    for mode, pos in (("clip", clipped), ("wrap", wrapped)):
        got = run([x, i], op.take(x, i, axis=1, mode=mode), arr, idx)
        expected = np.stack([arr[:, p, :] for p in pos], axis=1)
        same(got, expected)
    fast = np.array([1, 0, 2, 2, 1], itype)
    same(run([x, i], op.take(x, i, axis=1, mode="fast"), arr, fast),
         np.stack([arr[:, p, :] for p in fast], axis=1))
    # axis=None reads the flattened data
    flat_idx = np.array([5, 23, 30, -4, 0], itype)
    got = run([x, i], op.take(x, i), arr, flat_idx)
    same(got, np.array([5, 23, 23, 0, 0]).astype(dtype))
    got = run([x, i], op.take(x, i, axis=-1, mode="wrap"), arr, flat_idx)
    same(got, arr[:, :, [1, 3, 2, 0, 0]])


def test_take_fast_mode_out_of_range_is_an_error_in_the_reference():
    x, i = v("x", 3), v("i", 1, dtype=i64)
    with pytest.raises(Exception, match="index 3 is out of range for an axis of extent 3"):
        run([x, i], op.take(x, i, axis=0, mode="fast"), np.zeros(3, f32), np.array([3]))


@pytest.mark.parametrize("itype", [i32, i64])
def test_take_batch_dims(itype):
    x, i = v("x", 2, 3, 4), v("i", 2, 5, dtype=itype)
    arr = data((2, 3, 4), f32)
    idx = np.array([[0, 1, 3, 3, 2], [3, 0, 0, 1, 2]], itype)
    got = run([x, i], op.take(x, i, axis=2, batch_dims=1), arr, idx)
    expected = np.empty((2, 3, 5), f32)
    for b in range(2):
        for r in range(3):
            for k in range(5):
                expected[b, r, k] = arr[b, r, idx[b, k]]
    same(got, expected)
    assert out_shape(op.take(v("x", n, 7, 4), v("i", n, 3, dtype=i64), axis=1, batch_dims=-1)) == (n, 3, 4)
    with raises("take: batch dimension 0 differs: data Tensor[(2, 3), float32] has 2, indices "
                "Tensor[(3, 5), int32] have 3"):
        infer_expr(op.take(v("x", 2, 3), v("i", 3, 5, dtype=i32), axis=1, batch_dims=1))
    with raises("take: batch_dims=2 is larger than axis 1"):
        infer_expr(op.take(v("x", 2, 3), v("i", 2, 3, dtype=i32), axis=1, batch_dims=2))


def test_take_errors():
    with raises("take: indices must have an integer dtype, got Tensor[(2), float32]"):
        infer_expr(op.take(v("x", 3), v("i", 2), axis=0))
    with raises("take: axis 1 is out of range for rank 1"):
        infer_expr(op.take(v("x", 3), v("i", 2, dtype=i32), axis=1))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3),
       st.lists(st.integers(0, 3), min_size=0, max_size=3), st.data())
def test_take_relation_property(dshape, ishape, draw):
    axis = draw.draw(st.none() | st.integers(-len(dshape), len(dshape) - 1))
    expected = np.take(np.empty(dshape), np.zeros(ishape, "int64"), axis=axis).shape
    assert out_shape(op.take(v("x", *dshape), v("i", *ishape, dtype=i64), axis=axis)) == expected


# ---------------------------------------------------------------------------------------------
# strided_slice

@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_slice_runs(dtype):
    x = v("x", 3, 4, 5, dtype=dtype)
    arr = data((3, 4, 5), dtype)
    cases = [
        (dict(begin=[1, -1, 0], end=[3, 0, 5], strides=[1, -2, 2]), arr[1:3, -1:0:-2, 0:5:2]),
        (dict(begin=[0], end=[2]), arr[0:2]),
        (dict(begin=[-10, 2], end=[10, 100]), arr[-10:10, 2:100]),
        (dict(begin=[None, None], end=[None, None], strides=[-1, -1]), arr[::-1, ::-1]),
        (dict(begin=[1], end=[3], axes=[2]), arr[:, :, 1:3]),
        (dict(begin=[1, 0], end=[-1, 2], strides=[2], axes=[2, 0]), arr[0:2, :, 1:-1:2]),
        (dict(begin=[1, 2], end=[2, -1], slice_mode="size", strides=[5, 5]), arr[1:3, 2:]),
        (dict(begin=[2, 0], end=[0, 4]), arr[2:0, 0:4]),                    # empty
    ]
    for attrs, expected in cases:
        same(run([x], op.strided_slice(x, **attrs), arr), expected)


def test_strided_slice_symbolic_and_errors():
    x = v("x", n, 6)
    assert out_shape(op.strided_slice(x, begin=[0, 1], end=[None, 5])) == (n, 4)
    assert out_shape(op.strided_slice(x, begin=[None], end=[None], strides=[2])) == ((n + 1) // 2, 6)
    assert out_shape(op.strided_slice(x, begin=[0], end=[2 ** 31 - 1], strides=[3])) == ((n + 2) // 3, 6)
    assert out_shape(op.strided_slice(x, begin=[None], end=[None], strides=[-1])) == (n, 6)
    assert out_shape(op.strided_slice(x, begin=[0], end=[-1], slice_mode="size")) == (n, 6)
    assert out_shape(op.strided_slice(x, begin=[1], end=[3])) == (ANY, 6)   # depends on n
    assert out_shape(op.strided_slice(v("x", None, 6), begin=[0, 2], end=[None, 3])) == (ANY, 1)
    with raises("strided_slice: begin, end and strides slice 3 axes but the data has rank 2"):
        infer_expr(op.strided_slice(v("x", 2, 3), begin=[0, 0, 0], end=[1, 1, 1]))
    with raises("strided_slice: axes [1, -1] lists an axis twice"):
        infer_expr(op.strided_slice(v("x", 2, 3), begin=[0, 0], end=[1, 1], axes=[1, -1]))
    with raises("strided_slice: axis 2 is out of range for rank 2"):
        infer_expr(op.strided_slice(v("x", 2, 3), begin=[0], end=[1], axes=[2]))


bound = st.none() | st.integers(-8, 8)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=4), st.data())
def test_strided_slice_relation_property(shape, draw):
    k = draw.draw(st.integers(0, len(shape)))
    begin = draw.draw(st.lists(bound, min_size=k, max_size=k))
    end = draw.draw(st.lists(bound, min_size=k, max_size=k))
    strides = draw.draw(st.lists(st.integers(-3, 3).filter(bool), min_size=k, max_size=k))
    expected = np.empty(shape)[tuple(slice(b, e, s) for b, e, s in zip(begin, end, strides))].shape
    expr = op.strided_slice(v("x", *shape), begin=begin, end=end, strides=strides)
    assert out_shape(expr) == expected
    # and the values: slicing numbers that name their position
    arr = data(shape, f32)
    d = get_opdef("strided_slice")
    want = arr[tuple(slice(b, e, s) for b, e, s in zip(begin, end, strides))]
    np.testing.assert_array_equal(d.reference(arr, expr.attrs), want)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=4), st.data())
def test_strided_slice_axes_and_size_mode_property(shape, draw):
    axes = draw.draw(st.lists(st.integers(0, len(shape) - 1), unique=True, max_size=len(shape)))
    begin = [draw.draw(st.integers(0, 7)) for _ in axes]
    sizes = [draw.draw(st.integers(-1, 7)) for _ in axes]
    index = [slice(None)] * len(shape)
    for a, b, s in zip(axes, begin, sizes):
        index[a] = slice(b, None if s < 0 else b + s)
    expected = np.empty(shape)[tuple(index)].shape
    expr = op.strided_slice(v("x", *shape), begin=begin, end=sizes, axes=axes, slice_mode="size")
    assert out_shape(expr) == expected


# ---------------------------------------------------------------------------------------------
# broadcast_to, tile, repeat

@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast_to_runs(dtype):
    x = v("x", 3, 1, dtype=dtype)
    arr = data((3, 1), dtype)
    got = run([x], op.broadcast_to(x, shape=(2, 3, 4)), arr)
    i, j, k = np.indices((2, 3, 4))
    same(got, arr[j, 0])                       # out[i, j, k] = x[j, 0]
    assert out_shape(op.broadcast_to(v("x", n, 1), shape=[5, 4])) == (5, 4)
    with raises("broadcast_to: cannot broadcast Tensor[(2, 3), float32] to (4, 3): dimension 0 has "
                "extent 2, neither 1 nor 4"):
        infer_expr(op.broadcast_to(v("x", 2, 3), shape=(4, 3)))
    with raises("broadcast_to: cannot broadcast Tensor[(2, 3), float32] to (3,): the data has more "
                "dimensions"):
        infer_expr(op.broadcast_to(v("x", 2, 3), shape=(3,)))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=0, max_size=4), st.data())
def test_broadcast_to_relation_property(target, draw):
    k = draw.draw(st.integers(0, len(target)))
    dshape = [draw.draw(st.sampled_from([1, d])) for d in target[len(target) - k:]]
    expected = np.broadcast_to(np.empty(dshape), target).shape
    assert out_shape(op.broadcast_to(v("x", *dshape), shape=target)) == expected


@pytest.mark.parametrize("dtype", DTYPES)
def test_tile_runs(dtype):
    x = v("x", 2, 3, dtype=dtype)
    arr = data((2, 3), dtype)
    got = run([x], op.tile(x, reps=(2, 1, 2)), arr)
    i, j, k = np.indices((2, 2, 6))
    same(got, arr[j % 2, k % 3])               # out[i, j, k] = x[j mod 2, k mod 3]
    got = run([x], op.tile(x, reps=(3,)), arr)
    j, k = np.indices((2, 9))
    same(got, arr[j, k % 3])
    assert out_shape(op.tile(v("x", n, 3), reps=(2, 2))) == (2 * n, 6)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=4), st.lists(st.integers(1, 3), max_size=4))
def test_tile_relation_property(shape, reps):
    expected = np.tile(np.empty(shape), reps).shape
    assert out_shape(op.tile(v("x", *shape), reps=reps)) == expected


@pytest.mark.parametrize("dtype", DTYPES)
def test_repeat_runs(dtype):
    x = v("x", 2, 3, dtype=dtype)
    arr = data((2, 3), dtype)
    got = run([x], op.repeat(x, repeats=2, axis=1), arr)
    same(got, arr[:, np.arange(6) // 2])        # out[:, k] = x[:, k // 2]
    got = run([x], op.repeat(x, repeats=3, axis=-2), arr)
    same(got, arr[np.arange(6) // 3])
    assert out_shape(op.repeat(v("x", n, 3), repeats=4)) == (4 * n, 3)
    with raises("repeat: axis 2 is out of range for rank 2"):
        infer_expr(op.repeat(v("x", 2, 3), repeats=2, axis=2))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=4), st.integers(1, 3), st.data())
def test_repeat_relation_property(shape, repeats, draw):
    axis = draw.draw(st.integers(-len(shape), len(shape) - 1))
    expected = np.repeat(np.empty(shape), repeats, axis=axis).shape
    assert out_shape(op.repeat(v("x", *shape), repeats=repeats, axis=axis)) == expected


# ---------------------------------------------------------------------------------------------
# layout_transform

@pytest.mark.parametrize("dtype", DTYPES)
def test_layout_transform_nchw_nchw4c_round_trip(dtype):
    x = v("x", 2, 8, 3, 5, dtype=dtype)
    arr = data((2, 8, 3, 5), dtype)
    packed = op.layout_transform(x, src_layout="NCHW", dst_layout="NCHW4c")
    assert out_shape(packed) == (2, 2, 3, 5, 4)
    got = run([x], packed, arr)
    # out[b, co, h, w, ci] = x[b, 4 * co + ci, h, w]
    b, co, h, w, ci = np.indices((2, 2, 3, 5, 4))
    same(got, arr[b, 4 * co + ci, h, w])
    same(got, arr.reshape(2, 2, 4, 3, 5).transpose(0, 1, 3, 4, 2))
    back = run([x], op.layout_transform(packed, src_layout="NCHW4c", dst_layout="NCHW"), arr)
    same(back, arr)


def test_layout_transform_other_pairs():
    x = v("x", 1, 32, 2, 3)
    arr = data((1, 32, 2, 3), f32)
    same(run([x], op.layout_transform(x, src_layout="NCHW", dst_layout="NHWC"), arr),
         np.einsum("nchw->nhwc", arr))
    nhwc = v("y", 1, 2, 3, 32)
    assert out_shape(op.layout_transform(nhwc, src_layout="NHWC", dst_layout="NCHW16c")) == (1, 2, 2, 3, 16)
    got = run([x], op.layout_transform(x, src_layout="NCHW", dst_layout="NCHW16c"), arr)
    n_, co, h, w, ci = np.indices(got.shape)
    same(got, arr[n_, 16 * co + ci, h, w])
    # a kernel: OIHW -> OIHW4i4o, out[oo, io, h, w, ii, oi] = k[4 * oo + oi, 4 * io + ii, h, w]
    k = v("k", 8, 4, 3, 3)
    karr = data((8, 4, 3, 3), f32)
    got = run([k], op.layout_transform(k, src_layout="OIHW", dst_layout="OIHW4i4o"), karr)
    assert got.shape == (2, 1, 3, 3, 4, 4)
    oo, io, h, w, ii, oi = np.indices(got.shape)
    same(got, karr[4 * oo + oi, 4 * io + ii, h, w])
    assert out_shape(op.layout_transform(v("k", 64, 32, 3, 3), src_layout="OIHW",
                                         dst_layout="OIHW16i16o")) == (4, 2, 3, 3, 16, 16)
    # blocked to blocked goes through the full extent
    assert out_shape(op.layout_transform(v("z", 1, 4, 7, 7, 16), src_layout="NCHW16c",
                                         dst_layout="NCHW8c")) == (1, 8, 7, 7, 8)
    assert out_shape(op.layout_transform(v("z", n, 4, 7, 7, 16), src_layout="NCHW16c",
                                         dst_layout="NHWC")) == (n, 7, 7, 64)


def test_layout_transform_errors():
    with raises("layout_transform: cannot transform Tensor[(1, 6, 4, 4), float32] from NCHW to NCHW4c: "
                "axis C of extent 6 cannot be split into blocks of 4"):
        infer_expr(op.layout_transform(v("x", 1, 6, 4, 4), src_layout="NCHW", dst_layout="NCHW4c"))
    with raises("layout_transform: cannot transform Tensor[(1, 6, 4), float32] from NCHW to NHWC: "
                "layout NCHW has 4 axes but the shape has 3"):
        infer_expr(op.layout_transform(v("x", 1, 6, 4), src_layout="NCHW", dst_layout="NHWC"))
    with raises("layout_transform: src_layout and dst_layout must both be given"):
        infer_expr(op.layout_transform(v("x", 1, 6, 4, 4)))


# ---------------------------------------------------------------------------------------------
# shape_of, arange, one_hot

def test_shape_of():
    x = v("x", 2, 3, 4)
    got = run([x], op.shape_of(x), np.zeros((2, 3, 4), f32))
    same(got, np.array([2, 3, 4], i32))
    got = run([x], op.shape_of(x, dtype="int64"), np.zeros((2, 3, 4), f32))
    same(got, np.array([2, 3, 4], i64))
    assert infer_expr(op.shape_of(v("y", n, None, 3))) == T(3, dtype=i32)
    y = v("y", n, 3, dtype=i32)
    same(run([y], op.shape_of(y), np.zeros((5, 3), i32)), np.array([5, 3], i32))


@pytest.mark.parametrize("dtype", DTYPES)
def test_arange(dtype):
    got = run([], op.arange(2, 9, 3, dtype=dtype))
    same(got, np.array([2, 5, 8], dtype))
    got = run([], op.arange(4, dtype=dtype))
    same(got, np.array([0, 1, 2, 3], dtype))
    got = run([], op.arange(5, 0, -2, dtype=dtype))
    same(got, np.array([5, 3, 1], dtype))
    assert infer_expr(op.arange(0, 10, 4, dtype=dtype)) == T(3, dtype=dtype)
    assert infer_expr(op.arange(3, 1, dtype=dtype)) == T(0, dtype=dtype)      # empty


def test_arange_float_and_dynamic():
    same(run([], op.arange(0.0, 1.0, 0.25)), np.array([0.0, 0.25, 0.5, 0.75], f32))
    assert infer_expr(op.arange(0.5, 2.0, 0.5)) == T(3)
    assert infer_expr(op.arange(const(1.0), const(4.0))) == T(3)            # scalar constants count
    stop = v("stop")                                                       # a scalar float32
    call = op.arange(stop)
    assert infer_expr(call) == T(ANY)                                      # Relay's dynamic dim
    same(run([stop], call, np.array(3.0, f32)), np.array([0.0, 1.0, 2.0], f32))
    with raises("arange: start must be a scalar of dtype int32 (dtype=int32), got float32"):
        infer_expr(op.arange(v("s"), 5, dtype="int32"))
    with raises("arange: stop must be a scalar of dtype float32 (dtype=float32), got Tensor[(2), float32]"):
        infer_expr(op.arange(0.0, v("s", 2)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("itype", [i32, i64])
def test_one_hot(dtype, itype):
    i = v("i", 2, 3, dtype=itype)
    idx = np.array([[0, 3, 1], [-1, 4, 2]], itype)
    on, off = const(7, dtype), const(-2, dtype)
    got = run([i], op.one_hot(i, on, off, depth=4, dtype=dtype), idx)
    expected = np.full((2, 3, 4), -2, dtype)
    for a in range(2):
        for b in range(3):
            if 0 <= idx[a, b] < 4:
                expected[a, b, idx[a, b]] = 7        # -1 and 4 are out of range: all off
    same(got, expected)
    got = run([i], op.one_hot(i, on, off, depth=4, axis=0, dtype=dtype), idx)
    same(got, np.moveaxis(expected, -1, 0))
    got = run([i], op.one_hot(i, on, off, depth=4, axis=1, dtype=dtype), idx)
    same(got, np.moveaxis(expected, -1, 1))


def test_one_hot_shapes_and_errors():
    on, off = const(1.0), const(0.0)
    got = infer_expr(op.one_hot(v("i", n, dtype=i64), on, off, depth=10, dtype="int32"))
    assert got == T(n, 10, dtype=i32)
    assert infer_expr(op.one_hot(v("i", dtype=i32), on, off, depth=3)) == T(3)
    with raises("one_hot: on_value must be a scalar, got Tensor[(2), float32]"):
        infer_expr(op.one_hot(v("i", 4, dtype=i32), v("a", 2), off, depth=3))
    with raises("one_hot: indices must have an integer dtype, got Tensor[(4), float32]"):
        infer_expr(op.one_hot(v("i", 4), on, off, depth=3))
    with raises("one_hot: axis 3 is out of range for inserting into rank 1"):
        infer_expr(op.one_hot(v("i", 4, dtype=i32), on, off, depth=3, axis=3))


# ---------------------------------------------------------------------------------------------
# image.resize2d: hand-computed pixels

IMG2 = np.array([[1, 2], [3, 4]], f32).reshape(1, 1, 2, 2)
IMG4 = np.arange(16, dtype=f32).reshape(1, 1, 4, 4)


def resize(img, **attrs):
    x = v("x", *img.shape, dtype=img.dtype.name)
    return run([x], op.image.resize2d(x, **attrs), img)


# upsampling 2x2 -> 4x4; input coordinates per output position (the same for rows and columns):
#   asymmetric:    0, 0.5, 1, 1.5
#   half_pixel:    -0.25, 0.25, 0.75, 1.25
#   align_corners: 0, 1/3, 2/3, 1
UP_NEAREST = {
    "asymmetric": [0, 0, 1, 1],            # floor
    "half_pixel": [0, 0, 0, 1],            # floor(-0.25) = -1, clamped to 0
    "align_corners": [0, 0, 1, 1],         # round
}


@pytest.mark.parametrize("mode", sorted(UP_NEAREST))
def test_resize_nearest_upsampling(mode):
    got = resize(IMG2, size=(4, 4), method="nearest_neighbor", coordinate_transformation_mode=mode)
    rows = cols = UP_NEAREST[mode]
    same(got, IMG2[0, 0][np.ix_(rows, cols)].reshape(1, 1, 4, 4))


def test_resize_linear_upsampling():
    got = resize(IMG2, size=(4, 4), method="linear", coordinate_transformation_mode="asymmetric")
    same(got, np.array([[1, 1.5, 2, 2], [2, 2.5, 3, 3], [3, 3.5, 4, 4], [3, 3.5, 4, 4]], f32)[None, None])
    got = resize(IMG2, size=(4, 4), method="linear", coordinate_transformation_mode="half_pixel")
    same(got, np.array([[1, 1.25, 1.75, 2], [1.5, 1.75, 2.25, 2.5],
                        [2.5, 2.75, 3.25, 3.5], [3, 3.25, 3.75, 4]], f32)[None, None])
    got = resize(IMG2, size=(4, 4), method="linear", coordinate_transformation_mode="align_corners")
    row = np.array([1, 4 / 3, 5 / 3, 2])
    same(got, (row[None, :] + np.array([0, 2 / 3, 4 / 3, 2])[:, None]).astype(f32)[None, None])


@pytest.mark.parametrize("method, mode, expected", [
    # 4x4 -> 2x2 of v[y, x] = 4y + x; coordinates: asymmetric 0, 2; half_pixel 0.5, 2.5;
    # align_corners 0, 3
    ("nearest_neighbor", "asymmetric", [[0, 2], [8, 10]]),
    ("nearest_neighbor", "half_pixel", [[0, 2], [8, 10]]),
    ("nearest_neighbor", "align_corners", [[0, 3], [12, 15]]),
    ("linear", "asymmetric", [[0, 2], [8, 10]]),
    ("linear", "half_pixel", [[2.5, 4.5], [10.5, 12.5]]),
    ("linear", "align_corners", [[0, 3], [12, 15]]),
])
def test_resize_downsampling(method, mode, expected):
    got = resize(IMG4, size=(2, 2), method=method, coordinate_transformation_mode=mode)
    same(got, np.array(expected, f32)[None, None])


def test_resize_integer_data_truncates_and_keeps_its_dtype():
    img = IMG2.astype(i32)
    got = resize(img, size=(4, 4), method="linear", coordinate_transformation_mode="asymmetric")
    same(got, np.array([[1, 1, 2, 2], [2, 2, 3, 3], [3, 3, 4, 4], [3, 3, 4, 4]], i32)[None, None])
    got = resize(img, size=(3, 1), method="nearest_neighbor", coordinate_transformation_mode="asymmetric")
    # rows: floor(0), floor(2/3), floor(4/3) = 0, 0, 1; the single column: 0
    same(got, np.array([[1], [1], [3]], i32)[None, None])
    got = resize(img, size=(4, 4), method="linear", coordinate_transformation_mode="asymmetric",
                 out_dtype="float32")
    assert got.dtype == np.float32 and got[0, 0, 1, 1] == 2.5


def test_resize_rounding_methods():
    # 1x4 -> 1x8 asymmetric: coordinates 0, 0.5, 1, ..., 3.5
    img = np.array([10, 20, 30, 40], f32).reshape(1, 1, 1, 4)
    cases = {
        "round": [10, 20, 20, 30, 30, 40, 40, 40],           # halves away from zero
        "round_prefer_floor": [10, 10, 20, 20, 30, 30, 40, 40],
        "round_prefer_ceil": [10, 20, 20, 30, 30, 40, 40, 40],
        "floor": [10, 10, 20, 20, 30, 30, 40, 40],
        "ceil": [10, 20, 20, 30, 30, 40, 40, 40],
    }
    for rounding, row in cases.items():
        got = resize(img, size=(1, 8), method="nearest_neighbor", coordinate_transformation_mode="asymmetric",
                     rounding_method=rounding)
        same(got, np.array(row, f32).reshape(1, 1, 1, 8))


def test_resize_other_coordinate_modes():
    # tf_half_pixel_for_nn: (x + 0.5) * 0.5 = 0.25, 0.75, 1.25, 1.75 -> floor 0, 0, 1, 1
    got = resize(IMG2, size=(4, 4), method="nearest_neighbor",
                 coordinate_transformation_mode="tf_half_pixel_for_nn")
    same(got, IMG2[0, 0][np.ix_([0, 0, 1, 1], [0, 0, 1, 1])][None, None])
    # pytorch_half_pixel: like half_pixel, but a single output pixel reads coordinate 0
    got = resize(IMG4, size=(1, 1), method="linear", coordinate_transformation_mode="pytorch_half_pixel")
    same(got, np.array([[[[0]]]], f32))
    got = resize(IMG4, size=(1, 1), method="linear", coordinate_transformation_mode="half_pixel")
    same(got, np.array([[[[7.5]]]], f32))         # (0.5) * 4 - 0.5 = 1.5 on both axes: 4*1.5 + 1.5
    # tf_crop_and_resize over roi (0, 0, 2, 2) of a 2x2 image: coordinates 0, 1, 2; 2 is outside
    got = resize(IMG2, size=(3, 3), method="linear", coordinate_transformation_mode="tf_crop_and_resize",
                 roi=(0.0, 0.0, 2.0, 2.0), extrapolation_value=-1.0)
    same(got, np.array([[1, 2, -1], [3, 4, -1], [-1, -1, -1]], f32)[None, None])


def test_resize_cubic_hand_computed():
    # one row [0, 0, 1, 0] to 8 columns, asymmetric: coordinates 0, 0.5, ..., 3.5. At a half
    # coordinate (t = 0.5, alpha = -0.5) the four weights are -1/16, 9/16, 9/16, -1/16; at an
    # integer one they are 0, 1, 0, 0. Neighbours outside the row are clamped to its ends.
    row = np.array([0, 0, 1, 0], f32).reshape(1, 1, 1, 4)
    got = resize(row, size=(1, 8), method="cubic", coordinate_transformation_mode="asymmetric")
    same(got, np.array([0, -1 / 16, 0, 9 / 16, 1, 9 / 16, 0, -1 / 16], f32).reshape(1, 1, 1, 8))
    # cubic_exclude drops the neighbours outside and renormalizes: at 0.5 the taps are x = -1..2,
    # x = -1 is dropped, leaving (9/16, 9/16, -1/16) / (17/16) on [0, 0, 1]; at 3.5 the taps are
    # x = 2..5, leaving (-1/16, 9/16) / (8/16) on [1, 0]
    got = resize(row, size=(1, 8), method="cubic", coordinate_transformation_mode="asymmetric",
                 cubic_exclude=1)
    assert got[0, 0, 0, 1] == pytest.approx(-1 / 17) and got[0, 0, 0, 7] == pytest.approx(-1 / 8)
    assert got[0, 0, 0, 3] == pytest.approx(9 / 16) and got[0, 0, 0, 4] == 1


def test_resize_cubic_reproduces_linear_ramps():
    # cubic convolution (alpha -0.5) is exact on linear functions away from the border and returns
    # the sample itself at integer coordinates
    ramp = np.tile(np.arange(8, dtype=f32) * 3 + 1, (8, 1)).reshape(1, 1, 8, 8)   # v = 3x + 1
    got = resize(ramp, size=(8, 15), method="cubic", coordinate_transformation_mode="align_corners")
    coords = np.arange(15) * 0.5                                    # 7 / 14 per output step
    interior = (coords >= 1) & (coords <= 5)
    np.testing.assert_allclose(got[0, 0, 3, interior], 3 * coords[interior] + 1, rtol=1e-5)
    np.testing.assert_allclose(got[0, 0, :, ::2], ramp[0, 0], rtol=1e-6)
    # with cubic_exclude the weights of outside neighbours are dropped: at coordinate 0.5 from a
    # constant image the result is still the constant
    const_img = np.full((1, 1, 4, 4), 5.0, f32)
    got = resize(const_img, size=(8, 8), method="cubic", cubic_exclude=1)
    np.testing.assert_allclose(got, 5.0, rtol=1e-6)


def test_resize_layouts():
    img = np.arange(2 * 8 * 2 * 2, dtype=f32).reshape(2, 8, 2, 2)
    nchw = resize(img, size=(4, 4), method="linear", coordinate_transformation_mode="asymmetric")
    nhwc = resize(np.ascontiguousarray(img.transpose(0, 2, 3, 1)), size=(4, 4), layout="NHWC",
                  method="linear", coordinate_transformation_mode="asymmetric")
    same(nhwc, nchw.transpose(0, 2, 3, 1))
    packed = img.reshape(2, 2, 4, 2, 2).transpose(0, 1, 3, 4, 2)          # NCHW4c
    got = resize(np.ascontiguousarray(packed), size=(4, 4), layout="NCHW4c", method="linear",
                 coordinate_transformation_mode="asymmetric")
    same(got, nchw.reshape(2, 2, 4, 4, 4).transpose(0, 1, 3, 4, 2))
    # and the hand-computed first channel of the NCHW result
    c0 = img[0, 0]                       # [[0, 1], [2, 3]]
    assert nchw[0, 0, 1].tolist() == [1.0, 1.5, 2.0, 2.0] and c0[1, 0] == 2.0


def test_resize_shapes_and_errors():
    x = v("x", n, 3, 10, 10)
    assert out_shape(op.image.resize2d(x, size=(5, 7))) == (n, 3, 5, 7)
    assert out_shape(op.image.resize2d(v("x", 1, 10, 10, 3), size=(4, 4), layout="NHWC")) == (1, 4, 4, 3)
    packed = op.image.resize2d(v("x", 1, 2, 10, 10, 16), size=(4, 4), layout="NCHW16c")
    assert out_shape(packed) == (1, 2, 4, 4, 16)
    assert infer_expr(op.image.resize2d(v("x", 1, 1, 4, 4, dtype="uint8"), size=(2, 2),
                                        out_dtype="float32")).dtype == f32
    with raises("image.resize2d: data Tensor[(1, 3, 4), float32] does not fit layout NCHW: layout NCHW has "
                "4 axes but the shape has 3"):
        infer_expr(op.image.resize2d(v("x", 1, 3, 4), size=(2, 2)))
    with raises("image.resize2d: size (the output height and width) is not given"):
        infer_expr(op.image.resize2d(v("x", 1, 3, 4, 4)))


# ---------------------------------------------------------------------------------------------
# Text round trips of calls with list and string attributes

def round_trip(body, *params):
    mod = IRModule.from_expr(Function(list(params), body))
    text = astext(mod)
    back = parse(text)
    assert_structural_equal(back, mod)
    assert astext(back) == text
    return text


def test_text_round_trip():
    x = v("x", 4, 6, 8)
    i = v("i", 3, dtype=i64)
    text = round_trip(op.split(x, indices_or_sections=[1, 3], axis=1), x)
    assert "split(%x, indices_or_sections=[1, 3], axis=1)" in text
    text = round_trip(op.strided_slice(x, begin=[None, -1, 0], end=[2, 0, 100], strides=[1, -2, 3]), x)
    assert "begin=[None, -1, 0], end=[2, 0, 100], strides=[1, -2, 3]" in text
    round_trip(op.strided_slice(x, begin=[1], end=[2], axes=[2], slice_mode="size"), x)
    round_trip(op.take(x, i, axis=1, mode="wrap"), x, i)
    round_trip(op.tile(op.repeat(x, repeats=2, axis=-1), reps=[1, 2]), x)
    round_trip(op.squeeze(op.expand_dims(x, axis=1, num_newaxis=2), axis=[1, 2]), x)
    round_trip(op.reshape(x, newshape=[-4, 2, -1, -3]), x)
    round_trip(op.stack([x, x], axis=-1), x)
    text = round_trip(op.layout_transform(x, src_layout="NCW", dst_layout="NCW2c"), x)
    assert 'src_layout="NCW", dst_layout="NCW2c"' in text
    y = v("y", 1, 3, 4, 4)
    text = round_trip(op.image.resize2d(y, size=[8, 6], roi=[0.1, 0.2, 0.9, 0.8], method="cubic",
                                        coordinate_transformation_mode="tf_crop_and_resize",
                                        extrapolation_value=float("-inf")), y)
    assert "size=[8, 6], roi=[0.1f, 0.2f, 0.9f, 0.8f]" in text
    text = round_trip(op.arange(1, 7, 2, dtype="int64"))
    assert "start=1, stop=7, step=2" in text
    round_trip(op.one_hot(i, const(1.0), const(0.0), depth=5, axis=0), i)
    round_trip(op.broadcast_to(op.shape_of(x, dtype="int64"), shape=[2, 3]), x)
