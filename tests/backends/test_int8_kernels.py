"""int8 conv2d and dense on the LLVM target: every dot-product path (``RB_X86_INT8``) agrees bit
for bit with exact integer arithmetic (numpy int64 formulas written here), the VNNI kernels use
``vpdpbusd``, and the loop IR's ``dot_sum`` / ``tensorize`` mean what they say."""

import numpy as np
import pytest

import relaybench as rb
from relaybench import config, te
from relaybench.errors import CompileError
from relaybench.te import loop_ir as L

pytest.importorskip("llvmlite")

from relaybench.backends.llvm.jit import INT8_PATHS, host_target, int8_path  # noqa: E402

FEATURES = set(host_target().features.split(","))
PATHS = [p for p, needs in INT8_PATHS.items() if FEATURES.issuperset(needs)]
HAS_VNNI = "vnni" in PATHS


def _random(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _dense_module(m, k, n, dx, dw):
    return rb.parse(f'''#[version = "0.0.5"]
def @main(%x: Tensor[({m}, {k}), {dx}], %w: Tensor[({n}, {k}), {dw}]) {{
  nn.dense(%x, %w, units={n}, out_dtype="int32")
}}''')


def _conv_module(c, o, h, w, k, pad, stride, groups, dx, dw):
    return rb.parse(f'''#[version = "0.0.5"]
def @main(%x: Tensor[(1, {c}, {h}, {w}), {dx}], %w: Tensor[({o}, {c // groups}, {k}, {k}), {dw}]) {{
  nn.conv2d(%x, %w, strides=[{stride}, {stride}], padding=[{pad}, {pad}, {pad}, {pad}],
            groups={groups}, channels={o}, kernel_size=[{k}, {k}], out_dtype="int32")
}}''')


def _dense_reference(x, w):
    """Exact: int64 products and sums, wrapped to int32 as the accumulator wraps."""
    return (x.astype(np.int64) @ w.astype(np.int64).T).astype(np.int32)


def _conv_reference(x, w, pad, stride, groups):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x.astype(np.int64), [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    per_group = o // groups
    for oc in range(o):
        g = oc // per_group
        for y in range(kh):
            for xx in range(kw):
                window = xp[:, g * cg:(g + 1) * cg, y:y + stride * oh:stride,
                            xx:xx + stride * ow:stride]
                out[:, oc] += np.einsum("ncij,c->nij", window, w[oc, :, y, xx].astype(np.int64))
    return out.astype(np.int32)


def _build(mod, path):
    with config.Context(RB_X86_INT8=path):
        return rb.build(mod, target="llvm", opt_level=3)


def _asm(lib):
    return lib.source("asm")


DENSE_CASES = [
    # (m, k, n, data dtype, weight dtype)
    (1, 256, 24, "int8", "int8"),        # 16 lanes of 4
    (3, 96, 17, "uint8", "int8"),        # 8 lanes; n not a multiple of 16
    (2, 48, 5, "int8", "int8"),          # 4 lanes
    (2, 30, 7, "int8", "int8"),          # k not a multiple of 4: the widening rule
    (1, 64, 16, "uint8", "uint8"),       # u8 x u8: pairs of int16 on every path
    (1, 128, 8, "int8", "uint8"),        # s8 x u8: swapped for vpdpbusd
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("m,k,n,dx,dw", DENSE_CASES)
def test_int8_dense_matches_exact_integer_formula(path, m, k, n, dx, dw):
    rng = np.random.default_rng(m * 1000 + k + n)
    x, w = _random(rng, (m, k), dx), _random(rng, (n, k), dw)
    lib = _build(_dense_module(m, k, n, dx, dw), path)
    out = np.asarray(lib.run(x=x, w=w))
    np.testing.assert_array_equal(out, _dense_reference(x, w))


def test_int8_dense_extremes_do_not_saturate():
    """All -128 data and weights: every pair of products is 32768, past int16 (a pmaddubsw
    path would saturate), and the VNNI s8 x s8 correction is the largest it gets."""
    x = np.full((1, 64), -128, np.int8)
    w = np.full((16, 64), -128, np.int8)
    w[1] = 127
    for path in PATHS:
        out = np.asarray(_build(_dense_module(1, 64, 16, "int8", "int8"), path).run(x=x, w=w))
        np.testing.assert_array_equal(out, _dense_reference(x, w))
        assert out[0, 0] == 64 * 128 * 128


CONV_CASES = [
    # (c, o, h, w, kernel, pad, stride, groups, data dtype)
    (32, 32, 8, 8, 3, 1, 1, 1, "int8"),      # blocks of 16: vpdpbusd over 16 output lanes
    (16, 24, 7, 9, 3, 1, 2, 1, "uint8"),     # 8 output lanes, stride 2, odd sizes
    (8, 4, 6, 6, 1, 0, 1, 1, "int8"),        # 1x1, 4 lanes
    (12, 16, 5, 5, 3, 2, 1, 1, "int8"),      # block of 12 channels (3 steps of 4), pad 2
    (3, 16, 9, 9, 3, 1, 1, 1, "int8"),       # 3 input channels: the widening rule
    (16, 16, 8, 8, 3, 1, 1, 16, "int8"),     # depthwise
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("c,o,h,w,k,pad,stride,groups,dx", CONV_CASES)
def test_int8_conv2d_matches_exact_integer_formula(path, c, o, h, w, k, pad, stride, groups, dx):
    rng = np.random.default_rng(c * 100 + o + h)
    x = _random(rng, (1, c, h, w), dx)
    wt = _random(rng, (o, c // groups, k, k), "int8")
    lib = _build(_conv_module(c, o, h, w, k, pad, stride, groups, dx, "int8"), path)
    out = np.asarray(lib.run(x=x, w=wt))
    np.testing.assert_array_equal(out, _conv_reference(x, wt, pad, stride, groups))


@pytest.mark.skipif(not HAS_VNNI, reason="the host has no AVX-512 VNNI")
def test_vnni_kernels_use_vpdpbusd_and_the_fallbacks_do_not():
    conv = _conv_module(32, 32, 8, 8, 3, 1, 1, 1, "int8", "int8")
    dense = _dense_module(1, 256, 32, "uint8", "int8")
    for mod in (conv, dense):
        assert "vpdpbusd" in _asm(_build(mod, "vnni"))
        fallback = _asm(_build(mod, "avx512bw"))
        # vpmaddwd; on a VNNI host LLVM merges it with the following add into vpdpwssd
        assert "vpdpbusd" not in fallback
        assert "vpmaddwd" in fallback or "vpdpwssd" in fallback
    assert "dot_sum(" in _build(conv, "vnni").source("loops")


def test_auto_picks_from_the_host_features():
    with config.Context(RB_X86_INT8="auto"):
        assert int8_path() == PATHS[0]


def test_unknown_or_unsupported_path_is_a_clear_error():
    with config.Context(RB_X86_INT8="sse9"), pytest.raises(CompileError, match="RB_X86_INT8"):
        int8_path()
    missing = [p for p in INT8_PATHS if p not in PATHS]
    for path in missing:
        with config.Context(RB_X86_INT8=path), pytest.raises(CompileError, match="lacks"):
            int8_path()


def test_random_int8_programs_agree_with_the_interpreter():
    """Random shapes, dtypes and paths against the reference interpreter (cheap sizes)."""
    rng = np.random.default_rng(7)
    for trial in range(6):
        path = PATHS[trial % len(PATHS)]
        dx = ["int8", "uint8"][int(rng.integers(2))]
        if trial % 2:
            m, k, n = int(rng.integers(1, 4)), int(rng.choice([16, 32, 64, 40])), \
                int(rng.integers(1, 20))
            mod = _dense_module(m, k, n, dx, "int8")
            args = {"x": _random(rng, (m, k), dx), "w": _random(rng, (n, k), "int8")}
        else:
            c = int(rng.choice([4, 8, 16, 32]))
            o = int(rng.choice([4, 8, 16, 32]))
            h = int(rng.integers(3, 9))
            kernel = int(rng.choice([1, 3]))
            pad = int(rng.integers(0, 2)) if kernel == 3 else 0
            stride = int(rng.integers(1, 3))
            mod = _conv_module(c, o, h, h, kernel, pad, stride, 1, dx, "int8")
            args = {"x": _random(rng, (1, c, h, h), dx),
                    "w": _random(rng, (o, c, kernel, kernel), "int8")}
        ref = rb.create_executor("interpreter", mod=mod).evaluate()(*args.values())
        out = _build(mod, path).run(**args)
        np.testing.assert_array_equal(np.asarray(out), np.asarray(ref))


def test_the_path_is_part_of_the_kernel_cache_key():
    """The same program built under two paths in one process gets two kernels."""
    mod = _dense_module(1, 64, 16, "int8", "int8")
    first = _asm(_build(mod, "generic"))
    second = _asm(_build(mod, PATHS[0]))
    if PATHS[0] != "generic":
        assert first != second


# ------------------------------------------------------------------ the loop IR and te parts

def test_dot_sum_evaluates_exactly_and_prints():
    A = L.Buffer("A", (8,), "int8")
    B = L.Buffer("B", (8,), "uint8")
    C = L.Buffer("C", (2,), "int32")
    i, k = L.Var("i"), L.Var("k")
    value = L.dot_sum(k, 4, L.cast("int32", L.Load(A, (i * 4 + k,))),
                      L.cast("int32", L.Load(B, (i * 4 + k,))))
    func = L.PrimFunc("dots", (A, B, C), L.For(i, 0, 2, "serial", L.Store(C, (i,), value)))
    assert "dot_sum(k < 4: int32(A[i * 4 + k]) * int32(B[i * 4 + k]))" in str(func)
    a = np.array([-128, -128, 127, 5, 1, 2, 3, 4], np.int8)
    b = np.array([255, 255, 255, 0, 1, 1, 1, 1], np.uint8)
    c = np.zeros(2, np.int32)
    L.evaluate(func, a, b, c)
    assert c.tolist() == [-128 * 255 * 2 + 127 * 255, 10]


def test_tensorize_leaves_a_dot_sum_that_lowers_and_runs():
    X = te.placeholder((2, 16), name="X", dtype="uint8")
    W = te.placeholder((8, 16), name="W", dtype="int8")
    ko = te.reduce_axis(4, name="ko")
    k4 = te.reduce_axis(4, name="k4")
    Y = te.compute((2, 8), lambda i, j: te.sum(
        te.cast("int32", X[i, ko * 4 + k4]) * te.cast("int32", W[j, ko * 4 + k4]),
        axis=[ko, k4]), name="Y")
    s = te.create_schedule([Y])
    s[Y].tensorize(k4)
    func = te.lower(s, [X, W], name="dots")
    assert "dot_sum(k4 < 4:" in str(func) and "for k4" not in str(func)
    rng = np.random.default_rng(1)
    x, w = _random(rng, (2, 16), "uint8"), _random(rng, (8, 16), "int8")
    y = np.zeros((2, 8), np.int32)
    te.evaluate(func, x, w, y)
    np.testing.assert_array_equal(y, _dense_reference(x, w))


def test_tensorize_rejects_a_data_axis_and_an_inner_loop():
    X = te.placeholder((4, 8), name="X", dtype="int32")
    k = te.reduce_axis(8, name="k")
    Y = te.compute((4,), lambda i: te.sum(X[i, k] * X[i, k], axis=[k]), name="Y")
    s = te.create_schedule([Y])
    with pytest.raises(CompileError, match="data axis"):
        s[Y].tensorize(Y.op.axis[0])
    s[Y].tensorize(k)
    s[Y].reorder(k, Y.op.axis[0])
    with pytest.raises(CompileError, match="innermost"):
        te.lower(s, [X], name="bad")


@pytest.mark.skipif(not HAS_VNNI, reason="the host has no AVX-512 VNNI")
def test_vnni_legalize_shifts_int8_data_to_uint8_and_keeps_the_value():
    """On the vnni path, Legalize makes int8 x int8 conv2d and dense uint8 x int8 minus 128 x
    the weights' sums; the interpreter gives the same result before and after."""
    from relaybench.passes.legalize import Legalize
    rng = np.random.default_rng(3)
    cases = [(_conv_module(8, 16, 5, 5, 3, 1, 1, 1, "int8", "int8"),
              (_random(rng, (1, 8, 5, 5), "int8"), _random(rng, (16, 8, 3, 3), "int8"))),
             (_dense_module(2, 32, 5, "int8", "int8"),
              (_random(rng, (2, 32), "int8"), _random(rng, (5, 32), "int8")))]
    for mod, args in cases:
        with config.Context(RB_X86_INT8="vnni"), rb.PassContext(
                opt_level=3, config={"relay.target": "llvm"}):
            legal = Legalize()(mod)
        text = str(legal)
        assert "uint8" in text and "subtract" in text
        before = rb.create_executor("interpreter", mod=mod).evaluate()(*args)
        after = rb.create_executor("interpreter", mod=legal).evaluate()(*args)
        np.testing.assert_array_equal(np.asarray(after), np.asarray(before))
        with config.Context(RB_X86_INT8="avx512bw"), rb.PassContext(
                opt_level=3, config={"relay.target": "llvm"}):
            assert "uint8" not in str(Legalize()(mod))   # only the vnni path wants uint8


@pytest.mark.skipif(not HAS_VNNI, reason="the host has no AVX-512 VNNI")
def test_vnni_signed_times_signed_inside_the_kernel_is_exact():
    """Without Legalize (opt_level 0) an int8 x int8 dense reaches the kernel as is: vpdpbusd
    on the sign-flipped data minus its correction, still exact."""
    rng = np.random.default_rng(4)
    mod = _dense_module(2, 128, 20, "int8", "int8")
    x, w = _random(rng, (2, 128), "int8"), _random(rng, (20, 128), "int8")
    x[0, :] = -128
    with config.Context(RB_X86_INT8="vnni"):
        lib = rb.build(mod, target="llvm", opt_level=0)
    assert "vpdpbusd" in lib.source("asm")
    np.testing.assert_array_equal(np.asarray(lib.run(x=x, w=w)), _dense_reference(x, w))


@pytest.mark.skipif(not HAS_VNNI, reason="the host has no AVX-512 VNNI")
def test_vnni_legalize_pads_odd_input_channels_to_steps_of_four():
    """An image's 3 channels (or any count not a multiple of 4) get zero channels in the data
    and the weights on the vnni path, so that the first convolution runs vpdpbusd too; exact."""
    from relaybench.passes.legalize import Legalize
    rng = np.random.default_rng(5)
    for c in (3, 6):
        mod = _conv_module(c, 16, 9, 9, 3, 1, 2, 1, "int8", "int8")
        x, wt = _random(rng, (1, c, 9, 9), "int8"), _random(rng, (16, c, 3, 3), "int8")
        with config.Context(RB_X86_INT8="vnni"), rb.PassContext(
                opt_level=3, config={"relay.target": "llvm"}):
            legal = rb.passes.InferType()(Legalize()(mod))
        padded = -(-c // 4) * 4
        assert f"(1, {padded}, 9, 9), int8" in str(legal)
        lib = _build(mod, "vnni")
        assert "vpdpbusd" in lib.source("asm")
        np.testing.assert_array_equal(np.asarray(lib.run(x=x, w=wt)), _conv_reference(x, wt, 1, 2, 1))


def test_int8_convolutions_take_power_of_two_channel_blocks():
    """24 channels: float32 convolutions block them by 12, int8 ones by 8 (whole registers of
    int32 accumulators, whole steps of 4), and the result stays exact."""
    from relaybench.passes.alter_op_layout import channel_block, int8_channel_block
    assert (channel_block(24), int8_channel_block(24), int8_channel_block(48)) == (12, 8, 16)
    rng = np.random.default_rng(6)
    mod = _conv_module(24, 24, 6, 6, 1, 0, 1, 1, "uint8", "int8")
    x, wt = _random(rng, (1, 24, 6, 6), "uint8"), _random(rng, (24, 24, 1, 1), "int8")
    for path in PATHS:
        lib = _build(mod, path)
        assert "NCHW8c" in str(lib.mod) and "NCHW12c" not in str(lib.mod)
        np.testing.assert_array_equal(np.asarray(lib.run(x=x, w=wt)), _conv_reference(x, wt, 0, 1, 1))


def test_int8_pooling_in_blocked_layout_keeps_its_lanes_and_stays_exact():
    """An int8 max pool after a blocked convolution (16 channels of int8: a quarter of a
    register) is scheduled by the tiled reduction rule, not element by element, and equals
    numpy's window maximum."""
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 16, 10, 10), int8], %w: Tensor[(16, 16, 1, 1), int8]) {
  %0 = nn.conv2d(%x, %w, channels=16, kernel_size=[1, 1], out_dtype="int32");
  %1 = clip(right_shift(%0, 4), a_min=-127f, a_max=127f);
  %2 = nn.max_pool2d(cast(%1, dtype="int8"), pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1]);
  clip(%2, a_min=-100f, a_max=100f)
}''')
    rng = np.random.default_rng(7)
    x, wt = _random(rng, (1, 16, 10, 10), "int8"), _random(rng, (16, 16, 1, 1), "int8")
    lib = rb.build(mod, target="llvm", opt_level=3)
    rules = [row["rule"] for row in lib.profile(number=1, x=x, w=wt).groups]
    assert "reduce_tiled" in rules
    conv = np.clip(_conv_reference(x, wt, 0, 1, 1) >> 4, -127, 127).astype(np.int8)
    padded = np.pad(conv, [(0, 0), (0, 0), (1, 1), (1, 1)], constant_values=-128)
    want = np.stack([np.stack([padded[0, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max(axis=(1, 2))
                               for j in range(5)], -1) for i in range(5)], -2)[None]
    np.testing.assert_array_equal(np.asarray(lib.run(x=x, w=wt)), np.clip(want, -100, 100))


@pytest.mark.skipif(not HAS_VNNI, reason="the host has no AVX-512 VNNI")
@pytest.mark.parametrize("c,h,k,pad,stride", [(32, 9, 3, 1, 1), (24, 11, 3, 1, 2), (16, 8, 5, 2, 1),
                                              (16, 7, 4, 1, 1)])
def test_vnni_depthwise_sums_four_taps_per_step_exactly(c, h, k, pad, stride):
    """On the vnni path a depthwise int8 convolution's kernel is widened to a multiple of 4 taps
    (zero weights, one more column of right padding each) and each step of ``vpdpbusd`` sums 4
    taps of a row; the output equals the exact integer formula, stride, odd channel blocks and
    kernel widths included."""
    rng = np.random.default_rng(c + h + k)
    mod = _conv_module(c, c, h, h, k, pad, stride, c, "int8", "int8")
    x, wt = _random(rng, (1, c, h, h), "int8"), _random(rng, (c, 1, k, k), "int8")
    x[0, 0] = -128
    wt[0] = -128
    lib = _build(mod, "vnni")
    assert "dot_sum(" in lib.source("loops") and "vpdpbusd" in lib.source("asm")
    np.testing.assert_array_equal(np.asarray(lib.run(x=x, w=wt)), _conv_reference(x, wt, pad, stride, c))
