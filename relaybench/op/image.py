"""Image operators (``image.*``): ``image.resize2d``, and ``image.resize1d`` / ``image.resize3d``
(the same attributes and formulas over one or three spatial axes; see the end of the file).

>>> import relaybench as rb
>>> from relaybench.ir.type_infer import infer_expr
>>> x = rb.var("x", shape=("n", 3, 32, 32))
>>> infer_expr(resize2d(x, size=(64, 48), method="nearest_neighbor"))
Tensor[(n, 3, 64, 48), float32]
>>> infer_expr(resize2d(rb.var("y", shape=(1, 32, 32, 3), dtype="uint8"), size=(8, 8), layout="NHWC",
...                     out_dtype="float32"))
Tensor[(1, 8, 8, 3), float32]

The numpy reference follows TVM's kernel (``topi.image.resize2d``) step by step: an output pixel
``x`` maps to the input coordinate given by ``coordinate_transformation_mode``

* ``half_pixel``: ``(x + 0.5) * in / out - 0.5``
* ``align_corners``: ``x * (in - 1) / (out - 1)`` (0 when ``out == 1``)
* ``asymmetric``: ``x * in / out``
* ``pytorch_half_pixel``: like ``half_pixel``, but 0 when ``out == 1``
* ``tf_half_pixel_for_nn``: ``(x + 0.5) * in / out``
* ``tf_crop_and_resize``: ``roi`` start plus ``x`` steps across the roi (pixels outside the input
  become ``extrapolation_value``),
* ``half_pixel_symmetric``: ``half_pixel`` shifted so that the output stays centred on the input
  when ``size`` is not exactly ``in * scale``: ``in / 2 * (1 - out / (in * scale))`` is added
  (0 without ``scale``),

where ``in / out`` is the scale's inverse: ``scale`` (one float per resized axis, ONNX Resize's
``scales``) makes the mapping use ``1 / scale`` and an output length of ``in * scale`` (of which
``size`` is the floor) in place of ``out``; without it the scale is ``out / in``,

computed in float32 as TVM does, for every data dtype (float64 data too), each operation
rounded to float32 in the reference and in compiled kernels alike (the code generator does not
fuse a coordinate's multiply and add), so that a coordinate landing half-way between pixels
picks the same pixel everywhere. ``nearest_neighbor`` then rounds the coordinate
(``rounding_method``; by default ``round``, halves away from zero, for ``align_corners`` and
``floor`` otherwise, the floor and ceil nudged by 1e-5 as in TVM) and clamps it into the image;
``linear`` interpolates the two neighbours along each axis (width first, then height) with
``a * (1 - t) + b * t``, neighbours clamped into the image; ``cubic`` uses the four neighbours
and the cubic convolution weights of ``cubic_alpha`` (``cubic_exclude=1`` zeroes the weights of
neighbours outside the image and renormalizes). ``antialias=1`` makes a ``linear`` or
``cubic`` downsampling (scale below 1) a low-pass filter, as ONNX Resize does: the kernel
stretched by ``1 / scale`` (``max(0, 1 - |d * scale|)``, or the cubic kernel at ``d * scale``)
over every neighbour it reaches (``2 * ceil(1 / scale)`` for linear, ``2 * ceil(2 / scale)``
for cubic, clamped into the image), the weights normalized to sum 1. Pixel values are computed
in float32 (float64 for float64 data, where TVM would use float32) and cast to ``out_dtype``,
truncating toward zero for integer types.

>>> x = np.arange(8, dtype="float32").reshape(1, 1, 1, 8)
>>> smooth = resize2d(rb.const(x), size=(1, 4), method="linear", scale=(1.0, 0.5), antialias=1)
>>> rb.create_executor("interpreter").evaluate(smooth)
array([[[[0.625, 2.5  , 4.5  , 6.375]]]], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from ..ir.layout import Layout
from ..ir.types import TensorType, check_dtype
from . import _compute as C
from ._rel import as_int, fail, int_tuple, known, relation, tensor
from .registry import OpDef, OpPattern, register

__all__ = ["resize1d", "resize2d", "resize3d"]

_METHODS = ("nearest_neighbor", "linear", "cubic")
_COORDINATE_MODES = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel",
                     "tf_half_pixel_for_nn", "tf_crop_and_resize", "half_pixel_symmetric")
_ROUNDING = ("", "round", "round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _number(value, name: str) -> float:
    if isinstance(value, str):          # the text format writes non-finite floats as strings
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"{name} must be a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    return float(value)


def _choice(value, name: str, options) -> str:
    if value not in options:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, options))}, got {value!r}")
    return value


def _scale_and_antialias(a: dict, n: int) -> None:
    """Check ``scale`` (None, or ``n`` positive numbers) and ``antialias`` (0 or 1)."""
    if a["scale"] is not None:
        if not isinstance(a["scale"], (list, tuple)) or len(a["scale"]) != n:
            raise ValueError(f"scale must have {n} values (one per resized axis), got "
                             f"{a['scale']!r}")
        a["scale"] = tuple(_number(v, "scale") for v in a["scale"])
        if not all(np.isfinite(v) and v > 0 for v in a["scale"]):
            raise ValueError(f"scale must be positive, got {a['scale']!r}")
    a["antialias"] = as_int(a["antialias"], "antialias", minimum=0)
    if a["antialias"] > 1:
        raise ValueError(f"antialias must be 0 or 1, got {a['antialias']}")


def _normalize_resize2d(a: dict) -> dict:
    if a["size"] is not None:
        a["size"] = int_tuple(a["size"], (2,), "size", minimum=1)
    _scale_and_antialias(a, 2)
    roi = (0.0,) * 4 if a["roi"] is None else a["roi"]
    if not isinstance(roi, (list, tuple)) or len(roi) != 4:
        raise ValueError(f"roi must have 4 values (start_h, start_w, end_h, end_w), got {roi!r}")
    a["roi"] = tuple(_number(v, "roi") for v in roi)
    if not isinstance(a["layout"], str):
        raise ValueError(f"layout must be a layout string, got {a['layout']!r}")
    layout = Layout(a["layout"])
    if sorted(layout.primal) != sorted("NCHW"):
        raise ValueError(f"layout={a['layout']!r} must have the axes N, C, H, W")
    if layout.factor_of("H") or layout.factor_of("W"):
        raise ValueError(f"layout={a['layout']!r} splits H or W; only C (and N) may be blocked")
    a["method"] = _choice(a["method"], "method", _METHODS)
    a["coordinate_transformation_mode"] = _choice(
        a["coordinate_transformation_mode"], "coordinate_transformation_mode", _COORDINATE_MODES)
    a["rounding_method"] = _choice(a["rounding_method"], "rounding_method", _ROUNDING)
    a["cubic_alpha"] = _number(a["cubic_alpha"], "cubic_alpha")
    a["cubic_exclude"] = as_int(a["cubic_exclude"], "cubic_exclude", minimum=0)
    if a["cubic_exclude"] > 1:
        raise ValueError(f"cubic_exclude must be 0 or 1, got {a['cubic_exclude']}")
    a["extrapolation_value"] = _number(a["extrapolation_value"], "extrapolation_value")
    a["out_dtype"] = "" if a["out_dtype"] in ("", None) else check_dtype(a["out_dtype"])
    return a


@relation("Resize2DRel")
def resize2d_rel(types, attrs):
    """``Resize2DRel``: data's shape with H and W replaced by ``size``; dtype ``out_dtype`` (or
    the data's)."""
    (data,) = types
    if not known(data):
        return None
    data = tensor(data, "data")
    if attrs.size is None:
        fail("size (the output height and width) is not given")
    layout = Layout(attrs.layout)
    try:
        extents = layout.primal_extents(data.shape)
    except ValueError as err:
        fail(f"data {data} does not fit layout {attrs.layout}: {err}")
    extents["H"], extents["W"] = attrs.size
    return TensorType(layout.shape_from_extents(extents), attrs.out_dtype or data.dtype)


# ---- the numpy reference -----------------------------------------------------------------------

def resize_ratio(out_size: int, in_size: int, scale=None) -> tuple:
    """``(in / out in float32, the output length)`` of one axis: ``in / out`` and ``out`` without
    a ``scale``, ``1 / scale`` and ``in * scale`` with one (the reference and the compute share
    it)."""
    f = np.float32
    if scale is None:
        return f(in_size) / f(out_size), float(out_size)
    return f(1.0 / scale), float(scale) * in_size


def _source_coords(out_size: int, in_size: int, mode: str, start: float, end: float,
                   scale=None):
    """The input coordinate of every output position along one axis, in float32 (TVM's order of
    operations)."""
    f = np.float32
    x = np.arange(out_size, dtype=f)
    n_in = f(in_size)
    ratio, length = resize_ratio(out_size, in_size, scale)
    if mode in ("half_pixel", "pytorch_half_pixel"):
        c = (x + f(0.5)) * ratio - f(0.5)
        if mode == "pytorch_half_pixel" and length == 1:
            c = np.zeros_like(x)
    elif mode == "half_pixel_symmetric":
        c = (x + f(0.5)) * ratio + f(in_size / 2 * (1 - out_size / length) - 0.5)
    elif mode == "align_corners":
        c = (n_in - f(1)) / f(length - 1) * x if length != 1 else np.zeros_like(x)
    elif mode == "asymmetric":
        c = ratio * x
    elif mode == "tf_half_pixel_for_nn":
        c = (x + f(0.5)) * ratio
    else:  # tf_crop_and_resize
        s, e = f(start), f(end)
        if length != 1:
            c = s * (n_in - f(1)) + x * (e - s) * (n_in - f(1)) / f(length - 1)
        else:
            c = np.full_like(x, f(0.5) * (s + e) * (n_in - f(1)))
    return c.astype(f)


def _round_nearest(c, method: str):
    f = np.float32
    if method == "round":                       # llvm.round: halves away from zero
        r = np.sign(c) * np.floor(np.abs(c) + f(0.5))
    elif method == "round_prefer_floor":
        r = np.ceil(c - f(0.5))
    elif method == "round_prefer_ceil":
        r = np.floor(c + f(0.5))
    elif method == "floor":
        r = np.floor(c + f(1e-5))
    else:  # ceil
        r = np.ceil(c - f(1e-5))
    return r.astype(np.int64)


def _cubic_weights(t, alpha):
    t2, t3 = t * t, t * t * t
    return [alpha * (t3 - 2 * t2 + t),
            (alpha + 2) * t3 - (3 + alpha) * t2 + 1,
            -(alpha + 2) * t3 + (3 + 2 * alpha) * t2 - alpha * t,
            -alpha * t3 + alpha * t2]


def antialias_offsets(count: int, scale: float) -> range:
    """The neighbours (offsets from ``floor(c)``) an antialiased kernel of support ``count / 2``
    (linear 1, cubic 2) reaches at ``scale`` below 1."""
    start = int(np.floor(-(count // 2) / scale)) + 1
    return range(start, 2 - start)


def _antialias_kernel(d, count: int, alpha, calc):
    """The linear (``count`` 2) or cubic kernel at distance ``d`` (already scaled)."""
    d = np.abs(d)
    if count == 2:
        return np.maximum(calc(1) - d, calc(0))
    a = calc(alpha)
    d2, d3 = d * d, d * d * d
    near = (a + calc(2)) * d3 - (a + calc(3)) * d2 + calc(1)
    far = a * d3 - calc(5) * a * d2 + calc(8) * a * d - calc(4) * a
    return np.where(d <= 1, near, np.where(d < 2, far, calc(0))).astype(calc)


def _taps(c, extent: int, count: int, calc, alpha=None, exclude=0, antialias=None):
    """Clamped neighbour indices and their weights along one axis (``count`` 2: linear, 4: cubic;
    ``antialias``: the scale of an antialiased downsampling)."""
    base = np.floor(c).astype(np.int64)
    t = (c - np.floor(c)).astype(calc)
    if antialias is not None and antialias < 1:
        offsets = antialias_offsets(count, antialias)
        s = calc(antialias)
        weights = [_antialias_kernel((calc(i) - t) * s, count, alpha, calc) for i in offsets]
        if exclude:
            weights = [np.where((base + i < 0) | (base + i >= extent), calc(0), w)
                       for i, w in zip(offsets, weights)]
        total = weights[0]
        for w in weights[1:]:
            total = total + w
        total = np.where(total == 0, calc(1), total)
        index = [np.clip(base + i, 0, extent - 1) for i in offsets]
        return index, [w / total for w in weights]
    if count == 2:
        weights = [calc(1) - t, t]
        first = base
    else:
        weights = _cubic_weights(t, calc(alpha))
        first = base - 1
        if exclude:
            weights = [np.where((first + i < 0) | (first + i >= extent), calc(0), w)
                       for i, w in enumerate(weights)]
            total = weights[0] + weights[1] + weights[2] + weights[3]
            weights = [w / total for w in weights]
    index = [np.clip(first + i, 0, extent - 1) for i in range(count)]
    return index, weights


def antialias_scale(attrs, j: int, out_size: int, in_size: int):
    """The scale of axis ``j`` when ``antialias`` is on (``scale`` or ``out / in``), else None."""
    if not getattr(attrs, "antialias", 0):
        return None
    scale = getattr(attrs, "scale", None)
    return scale[j] if scale is not None else out_size / in_size


def _resize_nchw(x, attrs):
    out_h, out_w = attrs.size
    _, _, h, w = x.shape
    mode = attrs.coordinate_transformation_mode
    roi = attrs.roi
    calc = np.float64 if x.dtype == np.float64 else np.float32
    data = x.astype(calc)
    sy, sx = attrs.scale or (None, None)
    cy = _source_coords(out_h, h, mode, roi[0], roi[2], sy)
    cx = _source_coords(out_w, w, mode, roi[1], roi[3], sx)
    if attrs.method == "nearest_neighbor":
        rounding = attrs.rounding_method or ("round" if mode == "align_corners" else "floor")
        iy = np.clip(_round_nearest(cy, rounding), 0, h - 1)
        ix = np.clip(_round_nearest(cx, rounding), 0, w - 1)
        out = data[:, :, iy[:, None], ix[None, :]]
    else:
        count = 2 if attrs.method == "linear" else 4
        ys, wy = _taps(cy, h, count, calc, attrs.cubic_alpha, attrs.cubic_exclude,
                       antialias_scale(attrs, 0, out_h, h))
        xs, wx = _taps(cx, w, count, calc, attrs.cubic_alpha, attrs.cubic_exclude,
                       antialias_scale(attrs, 1, out_w, w))
        out = None
        for yi, wyi in zip(ys, wy):
            rows = data[:, :, yi, :]
            col = None
            for xi, wxi in zip(xs, wx):
                term = rows[:, :, :, xi] * wxi
                col = term if col is None else col + term
            term = col * wyi[:, None]
            out = term if out is None else out + term
    if mode == "tf_crop_and_resize":
        outside = ((cy < 0) | (cy > h - 1))[:, None] | ((cx < 0) | (cx > w - 1))[None, :]
        out = np.where(outside, calc(attrs.extrapolation_value), out)
    return out.astype(attrs.out_dtype or x.dtype)


def _resize2d_ref(x, attrs):
    layout = Layout(attrs.layout)
    out = _resize_nchw(layout.transform_array(x, "NCHW"), attrs)
    return np.ascontiguousarray(Layout("NCHW").transform_array(out, layout))


resize2d = register(OpDef(
    "image.resize2d", ("data",), resize2d_rel, OpPattern.INJECTIVE,
    attrs={"size": None, "roi": None, "layout": "NCHW", "method": "linear",
           "coordinate_transformation_mode": "half_pixel", "rounding_method": "",
           "cubic_alpha": -0.5, "cubic_exclude": 0, "extrapolation_value": 0.0, "out_dtype": "",
           "scale": None, "antialias": 0},
    normalize=_normalize_resize2d, reference=_resize2d_ref, compute=C.resize2d_compute,
    support_level=5,
    doc="Resize the H and W axes of an image batch to ``size`` (any layout over N, C, H, W with "
        "only C or N blocked: NCHW, NHWC, NCHW16c). ``method`` is ``nearest_neighbor``, "
        "``linear`` or ``cubic``; ``coordinate_transformation_mode`` maps output pixels to input "
        "coordinates (``half_pixel``, ``align_corners``, ``asymmetric``, ``pytorch_half_pixel``, "
        "``tf_half_pixel_for_nn``, ``tf_crop_and_resize`` with ``roi`` = (start_h, start_w, "
        "end_h, end_w) as fractions and ``extrapolation_value`` outside); ``rounding_method`` "
        "picks the nearest pixel (``round``, ``round_prefer_floor``, ``round_prefer_ceil``, "
        "``floor``, ``ceil``; empty: ``round`` for align_corners, else ``floor``); ``scale`` "
        "(h, w) makes the mapping use the given scale, of which ``size`` is the floor of in * "
        "scale; ``antialias=1`` low-pass filters a linear or cubic downsampling. See the module "
        "docstring for the formulas."))


# ---- image.resize1d, image.resize3d: the same over one or three spatial axes -------------------

def _normalize_resize_nd(spatial: str, default_layout: str):
    n = len(spatial)

    def normalize(a: dict) -> dict:
        if a["size"] is not None:
            a["size"] = int_tuple(a["size"], (n,), "size", minimum=1)
        _scale_and_antialias(a, n)
        roi = (0.0,) * (2 * n) if a["roi"] is None else a["roi"]
        if not isinstance(roi, (list, tuple)) or len(roi) != 2 * n:
            raise ValueError(f"roi must have {2 * n} values (the starts of {', '.join(spatial)}, then "
                             f"their ends), got {roi!r}")
        a["roi"] = tuple(_number(v, "roi") for v in roi)
        if not isinstance(a["layout"], str):
            raise ValueError(f"layout must be a layout string, got {a['layout']!r}")
        layout = Layout(a["layout"])
        if sorted(layout.primal) != sorted(default_layout):
            raise ValueError(f"layout={a['layout']!r} must have the axes {', '.join(default_layout)}")
        if any(layout.factor_of(s) for s in spatial):
            raise ValueError(f"layout={a['layout']!r} splits a spatial axis; only C (and N) may be "
                             f"blocked")
        a["method"] = _choice(a["method"], "method", _METHODS)
        a["coordinate_transformation_mode"] = _choice(
            a["coordinate_transformation_mode"], "coordinate_transformation_mode", _COORDINATE_MODES)
        a["rounding_method"] = _choice(a["rounding_method"], "rounding_method", _ROUNDING)
        a["cubic_alpha"] = _number(a["cubic_alpha"], "cubic_alpha")
        a["cubic_exclude"] = as_int(a["cubic_exclude"], "cubic_exclude", minimum=0)
        if a["cubic_exclude"] > 1:
            raise ValueError(f"cubic_exclude must be 0 or 1, got {a['cubic_exclude']}")
        a["extrapolation_value"] = _number(a["extrapolation_value"], "extrapolation_value")
        a["out_dtype"] = "" if a["out_dtype"] in ("", None) else check_dtype(a["out_dtype"])
        return a
    return normalize


def _resize_nd_rel(spatial: str, name: str):
    @relation(name)
    def rel(types, attrs):
        (data,) = types
        if not known(data):
            return None
        data = tensor(data, "data")
        if attrs.size is None:
            fail(f"size (the output extents of {', '.join(spatial)}) is not given")
        layout = Layout(attrs.layout)
        try:
            extents = layout.primal_extents(data.shape)
        except ValueError as err:
            fail(f"data {data} does not fit layout {attrs.layout}: {err}")
        for axis, size in zip(spatial, attrs.size):
            extents[axis] = size
        return TensorType(layout.shape_from_extents(extents), attrs.out_dtype or data.dtype)
    rel.__doc__ = (f"``{name}``: data's shape with {', '.join(spatial)} replaced by ``size``; dtype "
                   f"``out_dtype`` (or the data's).")
    return rel


def _resize_ncs(x, attrs):
    """Resize the trailing spatial axes of ``x`` (``N, C, *spatial``), as ``_resize_nchw`` does
    for two: the nearest element, or the neighbours weighted axis by axis (the last innermost)."""
    n_sp = x.ndim - 2
    mode, roi = attrs.coordinate_transformation_mode, attrs.roi
    calc = np.float64 if x.dtype == np.float64 else np.float32
    data = x.astype(calc)
    extents = x.shape[2:]
    scales = attrs.scale or (None,) * n_sp
    coords = [_source_coords(out, n, mode, roi[j], roi[n_sp + j], scales[j])
              for j, (out, n) in enumerate(zip(attrs.size, extents))]
    if attrs.method == "nearest_neighbor":
        rounding = attrs.rounding_method or ("round" if mode == "align_corners" else "floor")
        near = [np.clip(_round_nearest(c, rounding), 0, n - 1) for c, n in zip(coords, extents)]
        out = data[(slice(None), slice(None)) + np.ix_(*near)]
    else:
        count = 2 if attrs.method == "linear" else 4
        taps = [_taps(c, n, count, calc, attrs.cubic_alpha, attrs.cubic_exclude,
                      antialias_scale(attrs, j, out, n))
                for j, (c, out, n) in enumerate(zip(coords, attrs.size, extents))]

        def combine(k, part):
            if k == n_sp:
                return part
            total = None
            for index, weight in zip(*taps[k]):
                shape = [1] * part.ndim
                shape[2 + k] = -1
                term = combine(k + 1, np.take(part, index, axis=2 + k)) * weight.reshape(shape)
                total = term if total is None else total + term
            return total
        out = combine(0, data)
    if mode == "tf_crop_and_resize":
        outside = np.zeros(out.shape[2:], dtype=bool)
        for k, (c, n) in enumerate(zip(coords, extents)):
            shape = [1] * n_sp
            shape[k] = -1
            outside = outside | ((c < 0) | (c > n - 1)).reshape(shape)
        out = np.where(outside, calc(attrs.extrapolation_value), out)
    return out.astype(attrs.out_dtype or x.dtype)


def _resize_nd_reference(spatial: str):
    canonical = "NC" + spatial

    def reference(x, attrs):
        layout = Layout(attrs.layout)
        out = _resize_ncs(layout.transform_array(x, canonical), attrs)
        return np.ascontiguousarray(Layout(canonical).transform_array(out, layout))
    return reference


def _resize_nd_attrs(spatial: str) -> dict:
    return {"size": None, "roi": None, "layout": "NC" + spatial, "method": "linear",
            "coordinate_transformation_mode": "half_pixel", "rounding_method": "",
            "cubic_alpha": -0.5, "cubic_exclude": 0, "extrapolation_value": 0.0, "out_dtype": "",
            "scale": None, "antialias": 0}


resize1d = register(OpDef(
    "image.resize1d", ("data",), _resize_nd_rel("W", "Resize1DRel"), OpPattern.INJECTIVE,
    attrs=_resize_nd_attrs("W"), normalize=_normalize_resize_nd("W", "NCW"),
    reference=_resize_nd_reference("W"), compute=C.resize_nd_compute("W", "resize1d"),
    support_level=5,
    doc="Resize the W axis of a batch of 1-d signals (``NCW``, ``NWC``, ``NCW16c``) to ``size`` "
        "(one value), with the attributes and formulas of ``image.resize2d``; ``roi`` is "
        "(start_w, end_w)."))

resize3d = register(OpDef(
    "image.resize3d", ("data",), _resize_nd_rel("DHW", "Resize3DRel"), OpPattern.INJECTIVE,
    attrs=_resize_nd_attrs("DHW"), normalize=_normalize_resize_nd("DHW", "NCDHW"),
    reference=_resize_nd_reference("DHW"), compute=C.resize_nd_compute("DHW", "resize3d"),
    support_level=5,
    doc="Resize the D, H and W axes of a batch of volumes (``NCDHW``, ``NDHWC``) to ``size`` "
        "(three values), with the attributes and formulas of ``image.resize2d`` (``linear`` is "
        "trilinear: W innermost, then H, then D); ``roi`` is (start_d, start_h, start_w, end_d, "
        "end_h, end_w)."))
