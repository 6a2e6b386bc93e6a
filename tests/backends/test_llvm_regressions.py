"""Regressions of the LLVM backend found by random-program testing, and the classes they stand for.

* Guarded reads. A ``select`` (or ``and``/``or``) whose unchosen side reads out of bounds was
  lowered to branches and phis; LLVM 22 miscompiled that control flow in loop bodies (the loop
  vectorizer took a predicated address from the first lane only: dilated pooling and
  convolution with padding; the SLP vectorizer and AVX-512 instruction selection: truncated
  ``mod`` on an odd-length vector loop). The code generator now emits no control flow for
  them: both sides are computed, reads not proven in bounds are clamped into the buffer.
* Integer division: ``x // 0``, ``x % 0`` and ``INT_MIN // -1`` trapped (SIGFPE) in compiled
  code; now numpy's answers (0, 0, ``INT_MIN``).
* Target options: an unknown option or ``-mcpu`` value was accepted silently.
* The in-memory kernel cache kept every module loaded forever; it is now bounded
  (``RB_KERNEL_CACHE_SIZE``) and frees what it drops once nothing uses it.

Every value is checked against a numpy formula written here (and, for Relay programs, the
reference interpreter).
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("llvmlite.ir", reason="the LLVM backend needs llvmlite (the `llvm` extra)")

import relaybench as rb  # noqa: E402
from relaybench import config, te  # noqa: E402
from relaybench.backends.llvm import build_kernel, get_jit, host_target  # noqa: E402
from relaybench.backends.llvm.codegen import _VectorLoop, value_range  # noqa: E402
from relaybench.backends.target import Target  # noqa: E402
from relaybench.errors import CompileError  # noqa: E402
from relaybench.te import loop_ir as L  # noqa: E402

RNG = np.random.default_rng(2024)
CORPUS = Path(__file__).resolve().parents[1] / "testing" / "corpus"


def interpret(mod, *args):
    return np.asarray(rb.create_executor("interpreter", mod=mod).evaluate()(*args))


def compiled(mod, opt_level, **inputs):
    return np.asarray(rb.build(mod, target="llvm", opt_level=opt_level).run(**inputs))


# ------------------------------------------------------------------ numpy formulas (references)


def pool2d_nchw(x, kind, size, strides, dilation, padding, count_include_pad=False):
    """Max or average pooling of an NCHW array, tap by tap; padding taps are skipped (and
    counted for the average only with ``count_include_pad``)."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (dh, dw) = size, strides, dilation
    top, left, bottom, right = padding
    out_h = (h + top + bottom - ((kh - 1) * dh + 1)) // sh + 1
    out_w = (w + left + right - ((kw - 1) * dw + 1)) // sw + 1
    best = np.full((n, c, out_h, out_w), -np.inf)
    total = np.zeros((n, c, out_h, out_w))
    count = np.zeros((out_h, out_w))
    for oy in range(out_h):
        for ox in range(out_w):
            for ky in range(kh):
                for kx in range(kw):
                    y, xx = oy * sh + ky * dh - top, ox * sw + kx * dw - left
                    if 0 <= y < h and 0 <= xx < w:
                        best[:, :, oy, ox] = np.maximum(best[:, :, oy, ox], x[:, :, y, xx])
                        total[:, :, oy, ox] += x[:, :, y, xx]
                        count[oy, ox] += 1
                    elif count_include_pad:
                        count[oy, ox] += 1
    if kind == "max":
        return best
    return total / np.maximum(count, 1)


def conv2d_nchw(x, w, strides, dilation, padding, groups):
    """Grouped 2-D convolution, NCHW data and OIHW weights, tap by tap over zero padding."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (dh, dw) = strides, dilation
    top, left, bottom, right = padding
    padded = np.zeros((n, c, h + top + bottom, wd + left + right))
    padded[:, :, top:top + h, left:left + wd] = x
    out_h = (h + top + bottom - ((kh - 1) * dh + 1)) // sh + 1
    out_w = (wd + left + right - ((kw - 1) * dw + 1)) // sw + 1
    out = np.zeros((n, o, out_h, out_w))
    per_group = o // groups
    for oc in range(o):
        g = oc // per_group
        for ky in range(kh):
            for kx in range(kw):
                window = padded[:, g * cg:(g + 1) * cg,
                                ky * dh:ky * dh + (out_h - 1) * sh + 1:sh,
                                kx * dw:kx * dw + (out_w - 1) * sw + 1:sw]
                out[:, oc] += np.einsum("nchw,c->nhw", window, w[oc, :, ky, kx])
    return out


# ----------------------------------------------------------------- the three reported programs


@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
def test_nhwc_depthwise_conv2d_with_dilation(opt_level):
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 3, 3), float32], %w: Tensor[(2, 2, 1, 3), float32]) {
  nn.conv2d(%x, %w, padding=[1, 1, 1, 1], dilation=[1, 2], groups=3, channels=3,
            kernel_size=[2, 2], data_layout="NHWC", kernel_layout="HWIO")
}''')
    x = RNG.standard_normal((1, 3, 3, 3)).astype("float32")
    w = RNG.standard_normal((2, 2, 1, 3)).astype("float32")
    expected = conv2d_nchw(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), (1, 1), (1, 2),
                           (1, 1, 1, 1), groups=3).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(interpret(mod, x, w), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(compiled(mod, opt_level, x=x, w=w), expected, rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("opt_level", [0, 3])
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool2d_with_dilation_and_padding(kind, opt_level):
    mod = rb.parse(f'''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 6, 7), float32]) {{
  nn.{kind}_pool2d(%x, pool_size=[2, 2], dilation=[2, 2], padding=[1, 1, 1, 1])
}}''')
    x = RNG.standard_normal((1, 3, 6, 7)).astype("float32")
    expected = pool2d_nchw(x, kind, (2, 2), (1, 1), (2, 2), (1, 1, 1, 1))
    np.testing.assert_allclose(interpret(mod, x), expected, rtol=1e-6)
    np.testing.assert_allclose(compiled(mod, opt_level, x=x), expected, rtol=1e-6)


@pytest.mark.parametrize("opt_level", [0, 3])
def test_truncated_mod_on_an_odd_vector_length(opt_level):
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(3, 5), int32], %y: Tensor[(3, 5), int32]) { mod(%x, %y) }''')
    x = np.full((3, 5), 4, "int32")
    y = np.full((3, 5), -3, "int32")
    got = compiled(mod, opt_level, x=x, y=y)
    np.testing.assert_array_equal(got, np.ones((3, 5), "int32"))  # 4 mod -3 is 1 (truncated)
    x = RNG.integers(-50, 50, (3, 5)).astype("int32")
    y = RNG.integers(1, 9, (3, 5)).astype("int32") * RNG.choice([-1, 1], (3, 5)).astype("int32")
    np.testing.assert_array_equal(compiled(mod, opt_level, x=x, y=y), np.fmod(x, y))


# ------------------------------------------------------- elementwise division, systematically


def _division_reference(op, x, y):
    """Relay's meaning: ``divide`` truncates integers, ``mod`` is truncated (``fmod``),
    ``floor_*`` round toward minus infinity; integer division by zero gives 0 (numpy)."""
    if np.issubdtype(x.dtype, np.floating):
        return {"divide": x / y, "floor_divide": np.floor(x / y),
                "floor_mod": x - np.floor(x / y) * y, "mod": np.fmod(x, y)}[op]
    with np.errstate(divide="ignore", over="ignore"):
        if op == "floor_divide":
            return np.floor_divide(x, y)
        if op == "floor_mod":
            return np.mod(x, y)
        if op == "mod":
            return np.fmod(x, y)
        quotient = np.abs(x.astype("int64")) // np.maximum(np.abs(y.astype("int64")), 1)
        return np.where(y == 0, 0, np.sign(x) * np.sign(y) * quotient).astype(x.dtype)


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 8), (4, 13)])
@pytest.mark.parametrize("dtype", ["int32", "int64", "float32"])
@pytest.mark.parametrize("op", ["floor_mod", "mod", "floor_divide", "divide"])
def test_division_family_on_odd_and_even_lengths(op, dtype, shape):
    text = ", ".join(str(s) for s in shape)
    mod = rb.parse(f'''#[version = "0.0.5"]
def @main(%x: Tensor[({text}), {dtype}], %y: Tensor[({text}), {dtype}]) {{ {op}(%x, %y) }}''')
    if dtype.startswith("int"):
        x = RNG.integers(-40, 40, shape).astype(dtype)
        y = (RNG.integers(1, 7, shape) * RNG.choice([-1, 1], shape)).astype(dtype)
    else:  # halves: every quotient and product below is exact
        x = (RNG.integers(-40, 40, shape) / 2).astype(dtype)
        y = (RNG.integers(1, 7, shape) * RNG.choice([-1, 1], shape) / 2).astype(dtype)
    expected = _division_reference(op, x, y)
    for opt_level in (0, 3):
        np.testing.assert_allclose(compiled(mod, opt_level, x=x, y=y), expected, rtol=1e-6)
    np.testing.assert_allclose(interpret(mod, x, y), expected, rtol=1e-6)


@pytest.mark.parametrize("op", ["floor_mod", "floor_divide", "divide", "mod"])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_division_by_zero_and_minus_one_does_not_trap(op, dtype):
    """x // 0 and x % 0 are 0, INT_MIN // -1 wraps (numpy); compiled code used to die of
    SIGFPE (and truncated ``mod`` by zero gave x)."""
    low = np.iinfo(dtype).min
    mod = rb.parse(f'''#[version = "0.0.5"]
def @main(%x: Tensor[(2, 5), {dtype}], %y: Tensor[(2, 5), {dtype}]) {{ {op}(%x, %y) }}''')
    x = np.array([[4, -4, 7, low, low], [3, -9, 0, 5, -5]], dtype)
    y = np.array([[0, -3, 2, -1, 0], [0, 4, 0, -1, -1]], dtype)
    expected = _division_reference(op, x, y)
    np.testing.assert_array_equal(interpret(mod, x, y), expected)
    for opt_level in (0, 3):
        np.testing.assert_array_equal(compiled(mod, opt_level, x=x, y=y), expected)


@pytest.mark.parametrize("lanes", [5, 8])
def test_division_by_a_lane_varying_divisor_in_vector_code(lanes):
    """``select(b != 0, a // b, -7)`` and ``a % b`` over lanes where b is 0 or -1: numpy's
    answers, as vector code (the select needs no branch)."""
    A = L.Buffer("A", (lanes,), "int32")
    B = L.Buffer("B", (lanes,), "int32")
    Q = L.Buffer("Q", (lanes,), "int32")
    R = L.Buffer("R", (lanes,), "int32")
    j = L.Var("j")
    a, b = L.Load(A, (j,)), L.Load(B, (j,))
    loop = L.For(j, 0, lanes, "vectorized", L.seq(
        L.Store(Q, (j,), L.select(L.not_equal(b, L.const(0, "int32")), a // b,
                                  L.const(-7, "int32"))),
        L.Store(R, (j,), a % b)))
    assert _VectorLoop.plan(loop) is not None
    kernel = build_kernel(L.PrimFunc("divide_lanes", (A, B, Q, R), loop), cache=False)
    a_values = np.array([7, -7, -2**31, 9, 5, 6, -1, 3][:lanes], "int32")
    b_values = np.array([0, 2, -1, -1, 0, -4, 3, 0][:lanes], "int32")
    q, r = np.zeros(lanes, "int32"), np.zeros(lanes, "int32")
    kernel(a_values, b_values, q, r)
    with np.errstate(divide="ignore", over="ignore"):
        np.testing.assert_array_equal(q, np.where(b_values != 0,
                                                  np.floor_divide(a_values, b_values), -7))
        np.testing.assert_array_equal(r, np.mod(a_values, b_values))


# ----------------------------------------------------- pooling and convolution, systematically


POOL_CASES = [  # (shape NCHW, pool size, strides, dilation, padding)
    ((1, 3, 6, 7), (2, 2), (1, 1), (2, 2), (1, 1, 1, 1)),
    ((2, 2, 5, 5), (3, 2), (2, 1), (1, 2), (1, 0, 2, 1)),
    ((1, 4, 7, 9), (2, 3), (1, 2), (3, 2), (2, 1, 1, 2)),
    ((1, 1, 4, 3), (3, 3), (1, 1), (2, 1), (2, 2, 2, 2)),
]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: "x".join(map(str, c[0])))
def test_pool2d_dilation_padding_shapes(case, kind, layout):
    shape, size, strides, dilation, padding = case
    x = RNG.standard_normal(shape).astype("float32")
    expected = pool2d_nchw(x, kind, size, strides, dilation, padding)
    if layout == "NHWC":
        x, expected = x.transpose(0, 2, 3, 1).copy(), expected.transpose(0, 2, 3, 1)
    text = ", ".join(map(str, x.shape))
    attrs = (f"pool_size={list(size)}, strides={list(strides)}, dilation={list(dilation)}, "
             f"padding={list(padding)}, layout=\"{layout}\"")
    mod = rb.parse(f'''#[version = "0.0.5"]
def @main(%x: Tensor[({text}), float32]) {{ nn.{kind}_pool2d(%x, {attrs}) }}''')
    for opt_level in (0, 3):
        np.testing.assert_allclose(compiled(mod, opt_level, x=x), expected, rtol=1e-5,
                                   atol=1e-6)


CONV_CASES = [  # (data NCHW, out channels, groups, kernel, strides, dilation, padding)
    ((1, 3, 3, 3), 3, 3, (2, 2), (1, 1), (1, 2), (1, 1, 1, 1)),
    ((1, 4, 6, 5), 4, 4, (3, 3), (1, 1), (2, 2), (2, 2, 2, 2)),
    ((2, 4, 5, 7), 6, 2, (2, 3), (2, 1), (2, 1), (1, 0, 1, 2)),
    ((1, 3, 7, 6), 5, 1, (3, 2), (1, 2), (1, 3), (0, 2, 1, 1)),
]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[0][1]}to{c[1]}g{c[2]}")
def test_conv2d_dilation_padding_shapes(case, layout):
    shape, out_channels, groups, kernel, strides, dilation, padding = case
    x = RNG.standard_normal(shape).astype("float32")
    w = RNG.standard_normal((out_channels, shape[1] // groups) + kernel).astype("float32")
    expected = conv2d_nchw(x, w, strides, dilation, padding, groups)
    kernel_layout = "OIHW"
    if layout == "NHWC":
        x, expected = x.transpose(0, 2, 3, 1).copy(), expected.transpose(0, 2, 3, 1)
        w, kernel_layout = w.transpose(2, 3, 1, 0).copy(), "HWIO"
    mod = rb.parse(f'''#[version = "0.0.5"]
def @main(%x: Tensor[({", ".join(map(str, x.shape))}), float32],
          %w: Tensor[({", ".join(map(str, w.shape))}), float32]) {{
  nn.conv2d(%x, %w, strides={list(strides)}, padding={list(padding)},
            dilation={list(dilation)}, groups={groups}, channels={out_channels},
            kernel_size={list(kernel)}, data_layout="{layout}", kernel_layout="{kernel_layout}")
}}''')
    for opt_level in (0, 3):
        np.testing.assert_allclose(compiled(mod, opt_level, x=x, w=w), expected, rtol=1e-4,
                                   atol=1e-4)


# ------------------------------------------------------------- guarded reads at the loop level


def test_value_range_by_hand():
    i, j = L.Var("i"), L.Var("j")
    ranges = {i: (0, 9), j: (2, 4)}
    assert value_range(i * 3 - j, ranges) == (-4, 25)
    assert value_range(i // 4, ranges) == (0, 2)
    assert value_range((i - 5) // 2, ranges) == (-3, 2)  # floor: -5 // 2 is -3
    assert value_range(i % 4, ranges) == (0, 3)
    assert value_range(j % 7, ranges) == (2, 4)  # one period: exact
    assert value_range(L.min_expr(L.max_expr(i - 1, 0), 5), ranges) == (0, 5)
    assert value_range(L.select(i < 3, j, L.const(-1)), ranges) == (-1, 4)
    assert value_range(i + L.Var("k"), ranges) is None  # k's range is not known
    big = L.cast("int32", i * 1_000_000_000)
    assert value_range(big, ranges) is None  # could wrap in int32


def test_guarded_reads_out_of_bounds_serial_and_flat():
    """Padding read with a flat index and a guard on a 2-D buffer, in a serial loop: no
    branch is left, and the unchosen reads stay inside the buffer."""
    A = L.Buffer("A", (3, 4), "float32")
    C = L.Buffer("C", (5, 6), "float32")
    i, j = L.Var("i"), L.Var("j")
    inside = L.logical_and(L.logical_and(i >= 1, i < 4), L.logical_and(j >= 1, j < 5))
    body = L.Store(C, (i, j), L.select(inside, L.Load(A, ((i - 1) * 4 + j - 1,)) * 2.0, -1.0))
    func = L.PrimFunc("pad2d", (A, C), L.For(i, 0, 5, "serial", L.For(j, 0, 6, "serial", body)))
    kernel = build_kernel(func, cache=False)
    a = RNG.standard_normal((3, 4)).astype("float32")
    c = np.zeros((5, 6), "float32")
    kernel(a, c)
    np.testing.assert_array_equal(c, np.pad(a * 2, 1, constant_values=-1.0))
    assert "select_true" not in kernel.source("llvm") and " phi " not in kernel.source("llvm")


@pytest.mark.parametrize("lanes", [3, 5, 7, 16])
def test_guarded_reads_in_vector_code_of_odd_length(lanes):
    """``select(0 <= j - 1 < n, A[j - 1], B[j + 1])``: both sides read out of bounds in some
    lane; the lanes run as one vector and each reads a clamped element."""
    A = L.Buffer("A", (lanes - 1,), "float32")
    B = L.Buffer("B", (lanes - 1,), "float32")
    C = L.Buffer("C", (lanes,), "float32")
    j = L.Var("j")
    inside = L.logical_and(j >= 1, j < lanes)
    loop = L.For(j, 0, lanes, "vectorized",
                 L.Store(C, (j,), L.select(inside, L.Load(A, (j - 1,)), L.Load(B, (j + 1,)))))
    assert _VectorLoop.plan(loop) is not None
    kernel = build_kernel(L.PrimFunc("shift", (A, B, C), loop), cache=False)
    a = RNG.standard_normal(lanes - 1).astype("float32")
    b = RNG.standard_normal(lanes - 1).astype("float32")
    c = np.zeros(lanes, "float32")
    kernel(a, b, c)
    np.testing.assert_array_equal(c, np.concatenate([b[1:2], a]))


def test_corpus_programs_parse():
    for name in ("nhwc_depthwise_conv2d_dilation", "max_pool2d_dilation_padding",
                 "mod_int32_odd_vector_length", "floor_mod_int32_by_zero"):
        path = CORPUS / f"{name}.rly"
        text = path.read_text()
        assert text.startswith("// ")
        mod = rb.parse(text)
        assert "main" in [g.name_hint for g in mod.functions]


# ------------------------------------------------------------------------------ target options


def test_target_options_are_checked():
    host = host_target().cpu
    assert Target.parse(f"llvm -mcpu={host} -num-threads=2").options == {
        "mcpu": host, "num-threads": "2"}
    assert Target.parse("llvm -mcpu=native").options["mcpu"] == "native"
    with pytest.raises(CompileError, match=r"unknown option -mcpus; llvm takes -mcpu .*"
                                           r"-num-threads"):
        Target.parse("llvm -mcpus=native")
    with pytest.raises(CompileError, match="-mcpu=foo is not a CPU LLVM knows"):
        Target.parse("llvm -mcpu=foo")
    with pytest.raises(CompileError, match=r"close: .*znver4"):
        Target.parse("llvm -mcpu=znver9")
    other = "haswell" if host != "haswell" else "znver3"
    with pytest.raises(CompileError, match=f"-mcpu={other} is not this host's CPU"):
        Target.parse(f"llvm -mcpu={other}")
    with pytest.raises(CompileError, match="given twice"):
        Target.parse("llvm -num-threads=1 -num-threads=2")
    with pytest.raises(CompileError, match="has no value"):
        Target.parse("llvm -mcpu=")
    with pytest.raises(CompileError, match="unknown option -foo"):
        rb.build(rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32]) { nn.relu(%x) }'''), target="llvm -foo=1")


# ------------------------------------------------------------------ the bounded in-memory cache


def _scale_kernel(k: int):
    """A distinct small kernel for each ``k``: ``Y = X * k + 1``."""
    X = te.placeholder((32,), name="X")
    Y = te.compute((32,), lambda i: X[i] * float(k) + 1.0, name="Y")
    return build_kernel(te.lower([Y], [X], name="scale"))


def _check_scale(kernel, k):
    x = np.arange(32, dtype="float32")
    y = np.zeros(32, "float32")
    kernel(x, y)
    np.testing.assert_array_equal(y, x * np.float32(k) + 1)


def test_cache_stays_bounded_and_evicted_kernels_come_back(tmp_path):
    jit = get_jit()
    with config.Context(RB_KERNEL_CACHE_SIZE=4, RB_CACHE_DIR=tmp_path):
        first = _scale_kernel(0)
        gone = weakref.ref(first.compiled_module)
        _check_scale(first, 0)
        del first
        evicted = jit.stats["evicted"]
        for k in range(1, 13):
            _check_scale(_scale_kernel(k), k)
            assert jit.cached <= 4
        gc.collect()
        assert jit.stats["evicted"] >= evicted + 8
        assert gone() is None  # dropped, nothing used it: its engine was disposed
        from_disk = jit.stats["from_disk"]
        again = _scale_kernel(0)  # reloaded from the disk cache, still right
        assert again.compiled_module.origin == "disk"
        assert jit.stats["from_disk"] == from_disk + 1
        _check_scale(again, 0)


def test_a_kernel_in_use_survives_eviction(tmp_path):
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(4, 6), float32], %y: Tensor[(4, 6), float32]) {
  multiply(nn.relu(add(%x, %y)), %y)
}''')
    x = RNG.standard_normal((4, 6)).astype("float32")
    y = RNG.standard_normal((4, 6)).astype("float32")
    jit = get_jit()
    with config.Context(RB_KERNEL_CACHE_SIZE=2, RB_CACHE_DIR=tmp_path):
        lib = rb.build(mod, target="llvm", opt_level=3)
        held = _scale_kernel(1000)
        held_module = weakref.ref(held.compiled_module)
        for k in range(12):  # pushes both out of the JIT's own set
            _scale_kernel(2000 + k)
        gc.collect()
        assert jit.cached <= 2
        assert held_module() is not None and held_module().loaded
        _check_scale(held, 1000)
        np.testing.assert_allclose(np.asarray(lib.run(x=x, y=y)), np.maximum(x + y, 0) * y,
                                   rtol=1e-6)
        assert _scale_kernel(1000).compiled_module is held.compiled_module  # found, not reloaded
