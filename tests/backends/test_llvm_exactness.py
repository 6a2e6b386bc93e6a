"""Compiled code that must agree with the reference interpreter to the last bit (or the last ulp),
found by random-program testing, and the classes they stand for.

* Contraction into a fused multiply-add before a step. The code generator turns ``a * b - c`` in
  vector code into ``llvm.fmuladd``; where the value then goes through ``floor``/``ceil``/
  ``round``, a comparison or a cast to an integer, the skipped rounding can move the result by a
  whole step: ``image.resize2d`` (nearest, ``round_prefer_floor``, 2 -> 7 columns) picked
  column 1 for output 3 instead of 0, and linear/cubic weights drifted by a float32 ulp of the
  coordinate (7e-7 relative in float64). Values feeding a step are no longer contracted.
* Truncated integer ``mod`` by zero gave ``x`` (its compute was ``x - trunc(x / y) * y``); it is 0
  as numpy's ``fmod``, and every integer division op by 0 and ``INT_MIN`` by -1 agrees with the
  interpreter for every integer dtype.
* Float ``mod``/``floor_mod`` were ``x - trunc(x / y) * y`` and ``x - floor(x / y) * y``, ``inf``
  where ``x / y`` overflows (``-1.7e308 mod 0.5``); now C's exact ``fmod`` (LLVM ``frem``) and
  numpy's ``remainder`` (``fmod``, then the sign fix-up), bit for bit, signed zeros included.
* NaN: float ``max``/``min`` compiled to ``maxps``/``minps``, which drop a NaN on one side, so
  max/min reductions, max pooling, ``maximum``/``minimum``, ``clip`` and ``argmax``/``argmin``
  skipped NaN where numpy (the interpreter's references) propagates it; argmax now gives the first
  NaN's index, as numpy.
* ``cast`` from float64 to float16 killed the process: x86 has no instruction for it and LLVM
  calls a library routine the JIT does not link. It now goes through float32 rounded to odd,
  which rounds on to half exactly as one rounding (ties included), as numpy's ``astype``.

Each is checked against numpy (a formula written here, or a hand-computed value) and the
reference interpreter.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llvmlite.ir", reason="the LLVM backend needs llvmlite (the `llvm` extra)")

import relaybench as rb  # noqa: E402
from relaybench import te  # noqa: E402
from relaybench.backends.llvm import build_kernel  # noqa: E402
from relaybench.te import loop_ir as L  # noqa: E402

H = '#[version = "0.0.5"]\n'
RNG = np.random.default_rng(7)


def interpret(mod, *args):
    value = rb.create_executor("interpreter", mod=mod).evaluate()(*args)
    return [np.asarray(v) for v in value] if isinstance(value, (list, tuple)) else np.asarray(value)


def compiled(mod, opt_level, **inputs):
    value = rb.build(mod, target="llvm", opt_level=opt_level).run(**inputs)
    return [np.asarray(v) for v in value] if isinstance(value, (list, tuple)) else np.asarray(value)


def same_bits(got, want) -> bool:
    """Equal values, NaN where NaN, and the same sign of zero."""
    got, want = np.asarray(got), np.asarray(want)
    return (got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True)
            and np.array_equal(np.signbit(got), np.signbit(want)))


# ------------------------------------------------------------------------------ image.resize2d

def test_nearest_half_way_coordinate_is_not_fused():
    """2 -> 7 columns, half_pixel: column 3 maps to (3.5 * float32(2/7)) - 0.5 = 0.5 exactly
    (3.5 * 0.2857143f rounds to 1.0f), and round_prefer_floor takes pixel 0 there; fused, the
    coordinate was 0.50000006 and the pixel 1."""
    mod = rb.parse(H + '''def @main(%x: Tensor[(1, 1, 2, 2), float32]) {
  image.resize2d(%x, size=[2, 7], method="nearest_neighbor", rounding_method="round_prefer_floor")
}''')
    x = np.array([[[[10, 20], [30, 40]]]], "float32")
    by_hand = np.array([10, 10, 10, 10, 20, 20, 20], "float32")  # ceil(c - 0.5), clamped
    np.testing.assert_array_equal(interpret(mod, x)[0, 0, 0], by_hand)
    for opt_level in (0, 1, 2, 3):
        np.testing.assert_array_equal(compiled(mod, opt_level, x=x)[0, 0, 0], by_hand)


_MODES = ["half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel",
          "tf_half_pixel_for_nn", "tf_crop_and_resize"]
_ROUNDINGS = ["", "round", "round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
_RESIZES = ([f'method="nearest_neighbor", rounding_method="{r}"' for r in _ROUNDINGS]
            + ['method="linear"', 'method="cubic"', 'method="cubic", cubic_exclude=1'])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", _MODES)
def test_resize2d_sweep_agrees_with_the_interpreter(mode, dtype):
    """Every method and rounding method, upsampling one axis while downsampling the other (and
    the other way round, with sizes whose ratios put coordinates half-way between pixels):
    nearest pixels exactly, interpolated values to the ulp."""
    calls = []
    for size_in, size_out in (((2, 9), (7, 4)), ((8, 3), (3, 8))):
        for resize in _RESIZES:
            calls.append((size_in, f'image.resize2d(%x, size=[{size_out[0]}, '
                                   f'{size_out[1]}], coordinate_transformation_mode="{mode}", '
                                   f'roi=[0.1, 0.25, 0.8, 0.9], {resize})'))
    inputs = sorted({s for s, _ in calls})
    params = ", ".join(f"%x{k}: Tensor[(1, 2, {h}, {w}), {dtype}]" for k, (h, w) in
                       enumerate(inputs))
    body = ", ".join(text.replace("%x", f"%x{inputs.index(s)}", 1) for s, text in calls)
    mod = rb.parse(H + f"def @main({params}) {{ ({body}) }}")
    args = [RNG.standard_normal((1, 2, h, w)).astype(dtype) for h, w in inputs]
    want = interpret(mod, *args)
    tol = 1e-6 if dtype == "float32" else 1e-13  # a fused product in the pixel sums
    for opt_level in (0, 3):
        got = compiled(mod, opt_level, **{f"x{k}": a for k, a in enumerate(args)})
        for (size_in, text), g, w in zip(calls, got, want):
            if "nearest" in text:
                np.testing.assert_array_equal(g, w, err_msg=text)
            else:
                np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=text)


# ------------------------------------------------------------------ integer division by 0, -1

_INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


def _integer_division_by_hand(op, x, y):
    """Relay's integer division ops in Python integers: ``divide``/``mod`` truncate toward zero,
    ``floor_*`` round toward minus infinity; by 0 both give 0, and the quotient wraps into the
    dtype (``INT_MIN / -1`` is ``INT_MIN``), as numpy."""
    out = []
    for a, b in zip(x.tolist(), y.tolist()):
        if b == 0:
            out.append(0)
            continue
        floor_q = a // b
        trunc_q = floor_q + 1 if (a % b != 0 and (a < 0) != (b < 0)) else floor_q
        value = {"divide": trunc_q, "floor_divide": floor_q, "mod": a - trunc_q * b,
                 "floor_mod": a - floor_q * b}[op]
        out.append(value)
    bits = np.dtype(x.dtype).itemsize * 8
    wrapped = [v % (1 << bits) for v in out]
    if x.dtype.kind == "i":
        wrapped = [v - (1 << bits) if v >= 1 << (bits - 1) else v for v in wrapped]
    return np.array(wrapped, dtype=x.dtype)


@pytest.mark.parametrize("dtype", _INT_DTYPES)
def test_integer_division_family_by_zero_and_minus_one(dtype):
    """``mod`` by 0 gave ``x`` compiled (its compute was ``x - trunc(x / y) * y``); every op by
    0 and ``INT_MIN`` by -1 now agrees with the interpretation by hand, compiled and
    interpreted, with no crash and no numpy warning."""
    info = np.iinfo(dtype)
    if info.min == 0:
        x = np.array([0, 1, 7, info.max, info.max, 5, 3, 0, 9, 200 % (info.max + 1)], dtype)
        y = np.array([0, 0, 2, 1, 0, 3, info.max, 1, 4, 0], dtype)
    else:
        x = np.array([0, 1, -7, info.min, info.min, 5, -3, info.max, 7, -7], dtype)
        y = np.array([0, 0, 2, -1, 0, -1, 0, -1, -2, -2], dtype)
    ops = ["divide", "mod", "floor_divide", "floor_mod"]
    body = ", ".join(f"{op}(%x, %y)" for op in ops)
    mod = rb.parse(H + f"def @main(%x: Tensor[(10), {dtype}], %y: Tensor[(10), {dtype}]) "
                       f"{{ ({body}) }}")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        interpreted = interpret(mod, x, y)
    results = [interpreted] + [compiled(mod, level, x=x, y=y) for level in (0, 3)]
    for outputs in results:
        for op, got in zip(ops, outputs):
            np.testing.assert_array_equal(got, _integer_division_by_hand(op, x, y), err_msg=op)


# --------------------------------------------------------------------------------- float mod

def _float_operands(dtype):
    big = float(np.finfo(dtype).max)
    edge = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 3.0, -3.0, big, -big, np.inf, -np.inf, np.nan,
            1e-30, 7.5, -7.5, -1.7e308 if dtype == "float64" else -3.3e38]
    xs, ys = np.meshgrid(edge, edge)
    scale = 10.0 ** RNG.integers(-5, 30 if dtype == "float64" else 20, 96)
    x = np.concatenate([xs.ravel(), RNG.standard_normal(96) * scale])
    y = np.concatenate([ys.ravel(), RNG.standard_normal(96) * 10.0 ** RNG.integers(-5, 5, 96)])
    return x.astype(dtype), y.astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_mod_and_floor_mod_are_numpy_bit_for_bit(dtype):
    """``mod`` is C's ``fmod`` and ``floor_mod`` numpy's ``remainder``, to the bit: large
    quotients (``-1.7e308 mod 0.5`` is -0.0, not inf), signed zeros, infinite divisors, NaN."""
    x, y = _float_operands(dtype)
    n = x.size
    mod = rb.parse(H + f"def @main(%x: Tensor[({n}), {dtype}], %y: Tensor[({n}), {dtype}]) "
                       f"{{ (mod(%x, %y), floor_mod(%x, %y)) }}")
    with np.errstate(all="ignore"):
        want = [np.fmod(x, y), np.remainder(x, y)]
    assert same_bits(np.fmod(np.array([-1.7e308]), 0.5), np.array([-0.0]))
    for outputs in [interpret(mod, x, y)] + [compiled(mod, level, x=x, y=y) for level in (0, 3)]:
        for name, got, expected in zip(("mod", "floor_mod"), outputs, want):
            assert same_bits(got, expected), (name, x[~np.isclose(got, expected, equal_nan=True)])


def test_fmod_intrinsic_in_vector_and_scalar_code():
    """``te.fmod`` (LLVM ``frem``) against numpy's ``fmod``, as vector code and as a scalar
    loop, and the loop IR evaluator the same."""
    X = te.placeholder((7,), "float64", name="X")
    Y = te.placeholder((7,), "float64", name="Y")
    Z = te.compute((7,), lambda i: te.fmod(X[i], Y[i]), name="Z")
    x = np.array([-1.7e308, 7.5, -7.5, 5.0, -0.0, np.inf, 1e300])
    y = np.array([0.5, 2.0, 2.0, np.inf, 3.0, 2.0, 1e-300])
    for vectorize in (False, True):
        schedule = te.create_schedule([Z])
        if vectorize:
            schedule[Z].vectorize(Z.op.axis[0])
        func = te.lower(schedule, [X, Y], name=f"fmod_{int(vectorize)}")
        kernel = build_kernel(func, cache=False)
        z, evaluated = np.zeros(7), np.zeros(7)
        kernel(x, y, z)
        te.evaluate(func, x, y, evaluated)
        with np.errstate(all="ignore"):
            assert same_bits(z, np.fmod(x, y)) and same_bits(evaluated, np.fmod(x, y))


# ---------------------------------------------------------------------------------------- NaN

def _nan_data(dtype):
    x = RNG.standard_normal((4, 9)).astype(dtype)
    x[0, 3] = x[1, 0] = x[1, 7] = x[2, 8] = np.nan
    return x


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_nan_propagates_through_max_min_and_arg_reductions(dtype):
    """numpy propagates NaN through max/min (and argmax/argmin give the first NaN's index, or
    the last with ``select_last_index``); compiled reductions skipped it."""
    x = _nan_data(dtype)
    y = RNG.standard_normal((4, 9)).astype(dtype)
    y[3, 3] = np.nan
    programs = {
        "max(%x, axis=[1])": np.max(x, axis=1),
        "min(%x, axis=[1])": np.min(x, axis=1),
        "max(%x)": np.max(x),
        "argmax(%x, axis=[1])": np.argmax(x, axis=1).astype("int32"),
        "argmin(%x, axis=[1])": np.argmin(x, axis=1).astype("int32"),
        "argmax(%x, axis=[1], select_last_index=True)": np.array([3, 7, 8, 0], "int32"),
        "argmin(%x)": np.array(np.argmin(x), "int32"),
        "maximum(%x, %y)": np.maximum(x, y),
        "minimum(%y, %x)": np.minimum(y, x),
        "clip(%x, a_min=-0.5, a_max=0.5)": np.clip(x, -0.5, 0.5),
        "nn.relu(%y)": np.maximum(y, 0),
    }
    programs["argmax(%x, axis=[1], select_last_index=True)"][3] = np.argmax(x[3][::-1]) * -1 + 8
    body = ", ".join(programs)
    mod = rb.parse(H + f"def @main(%x: Tensor[(4, 9), {dtype}], %y: Tensor[(4, 9), {dtype}]) "
                       f"{{ ({body}) }}")
    assert np.isnan(programs["max(%x, axis=[1])"][:3]).all()
    for outputs in [interpret(mod, x, y)] + [compiled(mod, level, x=x, y=y) for level in (0, 3)]:
        for text, got, want in zip(programs, outputs, programs.values()):
            np.testing.assert_array_equal(got, want, err_msg=text)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_max_min_against_a_constant_either_side_to_the_bit(dtype):
    """Against a constant bound the code generator compares once (``x`` beyond the bound or
    unordered): the result is numpy's, NaN and the sign of a zero included, whichever side the
    constant is on, in vector code and in a loop's scalar rest."""
    edge = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1.0, -1.0, 0.25, -0.25], dtype)
    x = np.concatenate([edge, RNG.standard_normal(42).astype(dtype)]).reshape(3, 17)
    programs = {
        "maximum(%x, 0f)": lambda x: np.maximum(x, x.dtype.type(0)),
        "maximum(0f, %x)": lambda x: np.maximum(x.dtype.type(0), x),
        "minimum(%x, -0f)": lambda x: np.minimum(x, x.dtype.type(-0.0)),
        "minimum(-0f, %x)": lambda x: np.minimum(x.dtype.type(-0.0), x),
        "maximum(%x, -0.25f)": lambda x: np.maximum(x, x.dtype.type(-0.25)),
        "nn.relu(%x)": lambda x: np.maximum(x, x.dtype.type(0)),
        "clip(%x, a_min=-0.25, a_max=0.25)": lambda x: np.clip(x, -0.25, 0.25),
    }
    suffix = "f" if dtype == "float32" else "f64"
    body = ", ".join(text.replace("f)", suffix + ")").replace("f,", suffix + ",")
                     for text in programs)
    mod = rb.parse(H + f"def @main(%x: Tensor[(3, 17), {dtype}]) {{ ({body}) }}")
    for outputs in [compiled(mod, level, x=x) for level in (0, 3)]:
        for text, got in zip(programs, outputs):
            assert same_bits(got, programs[text](x)), text


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_max_pool_propagates_nan(layout):
    x = RNG.standard_normal((1, 8, 6, 6)).astype("float32")
    x[0, 2, 1, 1] = x[0, 5, 4, 5] = np.nan
    want = np.full((1, 8, 3, 3), -np.inf, "float32")  # 3x3 windows, stride 2, padding 1
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    for r in range(3):
        for c in range(3):
            want[:, :, r, c] = np.max(padded[:, :, 2 * r:2 * r + 3, 2 * c:2 * c + 3], axis=(2, 3))
    assert np.isnan(want).sum() == 4 + 1  # four windows hold the first NaN, one the second
    data = x if layout == "NCHW" else x.transpose(0, 2, 3, 1).copy()
    shape = ", ".join(map(str, data.shape))
    mod = rb.parse(H + f'''def @main(%x: Tensor[({shape}), float32]) {{
  nn.max_pool2d(%x, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1], layout="{layout}")
}}''')
    for got in [interpret(mod, data)] + [compiled(mod, level, x=data) for level in (0, 3)]:
        got = got if layout == "NCHW" else got.transpose(0, 3, 1, 2)
        np.testing.assert_array_equal(got, want)


def test_loop_ir_min_max_are_numpys_in_the_evaluator_and_compiled():
    """``max(a, b)``/``min(a, b)`` of the loop IR: numpy's maximum/minimum on every pair of
    NaN, infinities and signed zeros, as vector code and in the evaluator."""
    values = np.array([np.nan, -np.inf, -1.0, -0.0, 0.0, 2.0, np.inf], "float32")
    a_values, b_values = (v.ravel().copy() for v in np.meshgrid(values, values))
    n = a_values.size
    A, B = L.Buffer("A", (n,), "float32"), L.Buffer("B", (n,), "float32")
    MX, MN = L.Buffer("MX", (n,), "float32"), L.Buffer("MN", (n,), "float32")
    i = L.Var("i")
    body = L.For(i, 0, n, "serial", L.seq(
        L.Store(MX, (i,), L.max_expr(L.Load(A, (i,)), L.Load(B, (i,)))),
        L.Store(MN, (i,), L.min_expr(L.Load(A, (i,)), L.Load(B, (i,))))))
    func = L.PrimFunc("min_max", (A, B, MX, MN), body)
    kernel = build_kernel(func, cache=False)
    got = [np.zeros(n, "float32"), np.zeros(n, "float32")]
    kernel(a_values, b_values, *got)
    evaluated = [np.zeros(n, "float32"), np.zeros(n, "float32")]
    L.evaluate(func, a_values, b_values, *evaluated)
    for result in (got, evaluated):
        assert same_bits(result[0], np.maximum(a_values, b_values))
        assert same_bits(result[1], np.minimum(a_values, b_values))


_CAST_VALUES = np.array([-1.0, -2.5, 300.0, 70000.0, 1e10, -3e9, 3e9, np.nan, np.inf, -np.inf,
                         2.0 ** 63, 1.5 * 2 ** 63, 1e20, -1e20, 0.5, -0.5, 255.9, 127.5, -128.9,
                         65535.0, 2.0 ** 31, -2.0 ** 31, 2.0 ** 32])


@pytest.mark.parametrize("source", ["float32", "float64"])
@pytest.mark.parametrize("target", ["int8", "int16", "int32", "int64",
                                    "uint8", "uint16", "uint32", "uint64"])
def test_float_to_int_casts_out_of_range_as_x86_converts(source, target):
    """Out-of-range conversions (undefined in LLVM, left to the machine by numpy) are defined
    as x86's conversion instructions give them; numpy converting one element at a time runs
    exactly those instructions, so it is the independent check. Vector and scalar code."""
    import warnings
    import relaybench as rb
    for n in (len(_CAST_VALUES), 48):
        values = np.resize(_CAST_VALUES, n).astype(source)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = np.array([np.array([v]).astype(target)[0] for v in values], target)
        mod = rb.parse(f'#[version = "0.0.5"]\ndef @main(%x: Tensor[({n}), {source}]) '
                       f'{{ cast(%x, dtype="{target}") }}')
        reference = np.asarray(rb.create_executor("interpreter", mod=mod).evaluate()(values))
        np.testing.assert_array_equal(reference, expected)
        for level in (0, 3):
            np.testing.assert_array_equal(rb.build(mod, opt_level=level).run(x=values), expected)


@pytest.mark.parametrize("n", [5, 4096])     # scalar and vector code
def test_float64_to_float16_rounds_once_as_numpy(n):
    mod = rb.parse('#[version = "0.0.5"]\n'
                   f'def @main(%x: Tensor[({n}), float64]) {{ cast(%x, dtype="float16") }}')
    lib = rb.build(mod, target="llvm")
    rng = np.random.default_rng(n)
    with np.errstate(all="ignore"):
        halves = rng.integers(0, 0x7c00, n).astype(np.uint16).view(np.float16)
        up = np.nextafter(halves, np.float16(np.inf))
        ties = (halves.astype(np.float64) + up.astype(np.float64)) / 2   # halfway: to even
        nudge = np.abs(ties) * 2.0 ** rng.integers(-52, -20, n) * rng.choice([-1, 1], n)
        x = np.where(rng.random(n) < 0.5, ties, ties + nudge) * rng.choice([-1, 1], n)
        x[:5] = [np.inf, -1e300, 65520.0, 65519.99, 1e-300]
        expected = x.astype(np.float16)
    got = lib.run(x=x)
    np.testing.assert_array_equal(got.view(np.uint16), expected.view(np.uint16))
