"""``image.resize1d`` / ``image.resize2d`` with a given ``scale``, ``antialias=1`` and the
``half_pixel_symmetric`` mapping (ONNX Resize's forms), against a direct numpy formula in
float64: every output sample is a weighted sum over the input samples of a kernel at the
(scaled) distance, normalized, indices clamped into the input."""

from __future__ import annotations

import numpy as np
import pytest

from relaybench import te
from relaybench.ir import var
from relaybench.ir.type_infer import infer_expr
from relaybench.op.registry import OpCaller, get_opdef

RNG = np.random.default_rng(11)


def _kernel(d, method, alpha):
    d = abs(d)
    if method == "linear":
        return max(0.0, 1.0 - d)
    if d <= 1:
        return (alpha + 2) * d ** 3 - (alpha + 3) * d ** 2 + 1
    if d < 2:
        return alpha * d ** 3 - 5 * alpha * d ** 2 + 8 * alpha * d - 4 * alpha
    return 0.0


def _resample_matrix(n_in, n_out, scale, mode, method, antialias, alpha=-0.75, exclude=0):
    """(n_out, n_in) weights of a 1-d resize, written from the definitions."""
    length = scale * n_in
    m = np.zeros((n_out, n_in))
    for x in range(n_out):
        if mode == "half_pixel":
            c = (x + 0.5) / scale - 0.5
        elif mode == "half_pixel_symmetric":
            c = n_in / 2 * (1 - n_out / length) + (x + 0.5) / scale - 0.5
        elif mode == "asymmetric":
            c = x / scale
        else:  # align_corners
            c = x * (n_in - 1) / (length - 1)
        if method == "nearest_neighbor":          # round_prefer_floor
            m[x, min(max(int(np.ceil(c - 0.5)), 0), n_in - 1)] = 1
            continue
        stretch = min(scale, 1.0) if antialias else 1.0
        weights = {}
        for j in range(int(np.floor(c)) - 12, int(np.floor(c)) + 13):
            w = _kernel((j - c) * stretch, method, alpha)
            if exclude and not 0 <= j < n_in:
                w = 0.0
            weights[j] = w
        total = sum(weights.values())
        for j, w in weights.items():
            m[x, min(max(j, 0), n_in - 1)] += w / total
    return m


def _both(name, x, attrs):
    """The op's reference (numpy) and its compiled compute on ``x``."""
    opdef = get_opdef(name)
    call = OpCaller(opdef)(var("x", shape=x.shape, dtype=str(x.dtype)), **attrs)
    out_type = infer_expr(call)
    holder = te.placeholder(x.shape, str(x.dtype), name="x")
    func = te.lower([opdef.compute([holder], call.attrs, out_type)], [holder], name="resize")
    got = np.empty(tuple(int(d) for d in out_type.shape), out_type.dtype)
    te.evaluate(func, x, got)
    return np.asarray(opdef.reference(x, call.attrs)), got


@pytest.mark.parametrize("method, mode, antialias, scale, exclude", [
    ("linear", "half_pixel", 1, 0.6, 0), ("cubic", "half_pixel", 1, 0.7, 0),
    ("cubic", "half_pixel", 1, 0.6, 1), ("linear", "half_pixel_symmetric", 0, 0.7, 0),
    ("linear", "half_pixel_symmetric", 0, 1.7, 0), ("cubic", "align_corners", 0, 0.6, 0),
    ("linear", "asymmetric", 0, 1.35, 0), ("nearest_neighbor", "half_pixel", 0, 0.6, 0),
    ("linear", "half_pixel", 1, 1.5, 0)])
def test_resize1d_with_scale_matches_the_formula(method, mode, antialias, scale, exclude):
    x = RNG.standard_normal((2, 3, 9)).astype("float32")
    out = int(np.floor(9 * scale))
    attrs = dict(size=(out,), method=method, coordinate_transformation_mode=mode,
                 scale=(scale,), antialias=antialias, cubic_alpha=-0.75, cubic_exclude=exclude,
                 rounding_method="round_prefer_floor" if method == "nearest_neighbor" else "")
    want = x.astype(np.float64) @ _resample_matrix(9, out, scale, mode, method, antialias,
                                                    exclude=exclude).T
    ref, got = _both("image.resize1d", x, attrs)
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_resize2d_antialias_per_axis_and_default_unchanged():
    x = RNG.standard_normal((1, 2, 8, 7)).astype("float32")
    attrs = dict(size=(4, 3), method="linear", scale=(0.5, 0.45), antialias=1)
    mh = _resample_matrix(8, 4, 0.5, "half_pixel", "linear", 1)
    mw = _resample_matrix(7, 3, 0.45, "half_pixel", "linear", 1)
    want = np.einsum("hy,ncyx,wx->nchw", mh, x.astype(np.float64), mw)
    ref, got = _both("image.resize2d", x, attrs)
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # without scale or antialias the op maps with out / in, as it always did
    plain, _ = _both("image.resize2d", x, dict(size=(4, 3), method="linear"))
    mh = _resample_matrix(8, 4, 4 / 8, "half_pixel", "linear", 0)
    mw = _resample_matrix(7, 3, 3 / 7, "half_pixel", "linear", 0)
    np.testing.assert_allclose(plain, np.einsum("hy,ncyx,wx->nchw", mh, x.astype(np.float64), mw),
                               rtol=1e-5, atol=1e-5)


def test_bad_scale_and_antialias_are_named():
    x = var("x", shape=(1, 1, 4, 4))
    with pytest.raises(Exception, match="scale must have 2 values"):
        infer_expr(OpCaller(get_opdef("image.resize2d"))(x, size=(2, 2), scale=(0.5,)))
    with pytest.raises(Exception, match="antialias must be 0 or 1"):
        infer_expr(OpCaller(get_opdef("image.resize2d"))(x, size=(2, 2), antialias=2))
