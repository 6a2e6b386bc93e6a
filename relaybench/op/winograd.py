"""Winograd convolution (Relay's ``nn.contrib_conv2d_winograd_weight_transform`` and
``nn.contrib_conv2d_winograd_without_weight_transform``, ``python/tvm/relay/op/nn/nn.py``).

A 3x3 convolution of stride 1 computes each ``m x m`` tile of its output from an
``alpha x alpha`` tile of its input (``alpha = m + r - 1``, ``r = 3``) as Lavin and Gray's
``F(m x m, r x r)``::

    Y = A^T [ (G g G^T) * (B^T d B) ] A          (* elementwise)

``G g G^T`` transforms a kernel once (the weight transform, folded at compile time when the
weights are constants), ``B^T d B`` transforms each input tile, the elementwise products summed
over the input channels are one matrix product per tile position (``alpha^2`` of them), and
``A^T . A`` turns each product back into an output tile. ``F(2x2, 3x3)`` does 16 multiplications
per tile where the direct convolution does 36 (2.25x fewer), ``F(4x4, 3x3)`` 36 instead of 144
(4x fewer).

**The matrices** are computed exactly, in rational arithmetic (:mod:`fractions`), from the
interpolation points (:data:`POINTS`: 0, 1, -1, 2, -2, 1/2, -1/2, ... then infinity), by the
Toom-Cook construction: with ``V`` the ``alpha x alpha`` matrix evaluating a polynomial of degree
``alpha - 1`` at the points (the point at infinity reads the leading coefficient), ``Vg`` and
``Vh`` its first ``r`` and ``m`` columns (with the infinity row moved to the last coefficient),
the product of polynomials ``g * h = V^-1 [(Vg g) * (Vh h)]`` transposed is the correlation:
``A^T = Vh^T``, ``G = Vg``, ``B^T = V^-T``. Each row of ``B^T`` is then scaled to small integers
and the matching row of ``G`` divided by the same factor (their product is unchanged), which
gives Lavin's tables:

>>> a_t, g, b_t = winograd_matrices(2, 3)
>>> [[str(v) for v in row] for row in b_t]
[['1', '0', '-1', '0'], ['0', '1', '1', '0'], ['0', '-1', '1', '0'], ['0', '-1', '0', '1']]
>>> [[str(v) for v in row] for row in g]
[['1', '0', '0'], ['1/2', '1/2', '1/2'], ['1/2', '-1/2', '1/2'], ['0', '0', '1']]

**Layouts.** The data comes in ``NCHW`` or ``NCHW{x}c`` and the output goes in ``out_layout``
(``NCHW`` or ``NCHW{y}c``; empty: the data's). The transformed weight is
``(alpha, alpha, O, I)``, layout ``HWOI`` (``H`` and ``W`` are the tile axes), or blocked
``HWOI{y}o`` (the output channels in blocks of ``y``, innermost: one vector of output channels
per input channel, what the x86 kernel multiplies with); ``kernel_layout`` names it. (Relay keeps
``kernel_layout`` of the untransformed weight there; here it describes the tensor passed.)

>>> import relaybench as rb
>>> from relaybench.ir.type_infer import infer_expr
>>> w = contrib_conv2d_winograd_weight_transform(rb.var("w", shape=(32, 16, 3, 3)), tile_size=4)
>>> infer_expr(w)
Tensor[(6, 6, 32, 16), float32]
>>> y = contrib_conv2d_winograd_without_weight_transform(rb.var("x", shape=(1, 16, 7, 7)), w,
...     tile_size=4, padding=1, channels=32, kernel_size=3)
>>> infer_expr(y)
Tensor[(1, 32, 7, 7), float32]
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache
from math import gcd, lcm

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .. import te
from ..errors import CompileError
from ..ir.layout import Layout
from ..ir.symbolic import add, format_dim, sub
from ..ir.types import TensorType
from . import nn as _nn
from ._compute import padded, shape_of
from ._layout import conv2d_layout
from ._rel import as_int, fail, known, provably_different, relation, same_dim, tensor
from .registry import OpDef, OpPattern, register

__all__ = ["contrib_conv2d_winograd_weight_transform",
           "contrib_conv2d_winograd_without_weight_transform", "winograd_matrices",
           "winograd_float_matrices", "winograd_weight_transform_matrix", "POINTS",
           "winograd_weight_transform_blocked",
           "winograd_conv2d_compute"]

POINTS = (Fraction(0), Fraction(1), Fraction(-1), Fraction(2), Fraction(-2), Fraction(1, 2),
          Fraction(-1, 2), Fraction(3), Fraction(-3), Fraction(1, 3), Fraction(-1, 3))
"""The finite interpolation points, in the order they are taken; infinity is always the last."""

MAX_ALPHA = len(POINTS) + 1
"""The largest input tile (``tile_size + kernel - 1``) the points allow."""


def _inverse(matrix):
    """The inverse of a square matrix of Fractions (Gauss-Jordan elimination, exact)."""
    n = len(matrix)
    rows = [list(row) + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = next(r for r in range(col, n) if rows[r][col] != 0)
        rows[col], rows[pivot] = rows[pivot], rows[col]
        scale = rows[col][col]
        rows[col] = [v / scale for v in rows[col]]
        for r in range(n):
            if r != col and rows[r][col] != 0:
                factor = rows[r][col]
                rows[r] = [a - factor * b for a, b in zip(rows[r], rows[col])]
    return [row[n:] for row in rows]


def _evaluation(points, columns: int, alpha: int):
    """``alpha x columns``: row j evaluates a polynomial of ``columns`` coefficients at point j;
    the last row (the point at infinity) reads the leading coefficient."""
    rows = [[p ** k for k in range(columns)] for p in points[:alpha - 1]]
    rows.append([Fraction(int(k == columns - 1)) for k in range(columns)])
    return rows


@lru_cache(maxsize=None)
def winograd_matrices(tile_size: int, kernel_size: int = 3):
    """``(A^T, G, B^T)`` of ``F(m, r)`` (``m = tile_size``, ``r = kernel_size``) as tuples of rows of
    Fractions: ``A^T`` is ``m x alpha``, ``G`` is ``alpha x r``, ``B^T`` is ``alpha x alpha``
    (``alpha = m + r - 1``), such that the correlation ``y[i] = sum_k g[k] d[i + k]`` of ``m``
    outputs is ``A^T [(G g) * (B^T d)]`` exactly.

    >>> a_t, g, b_t = winograd_matrices(4)
    >>> len(a_t), len(a_t[0]), len(g), len(b_t)
    (4, 6, 6, 6)
    >>> [str(v) for v in b_t[0]]
    ['4', '0', '-5', '0', '1', '0']
    """
    m, r = int(tile_size), int(kernel_size)
    alpha = m + r - 1
    if m < 1 or r < 1 or alpha > MAX_ALPHA:
        raise ValueError(f"Winograd F({m}, {r}): tile_size and kernel_size must be at least 1 with "
                         f"tile_size + kernel_size - 1 at most {MAX_ALPHA}")
    v = _evaluation(POINTS, alpha, alpha)
    a_t = [list(row) for row in zip(*_evaluation(POINTS, m, alpha))]      # Vh^T
    g = _evaluation(POINTS, r, alpha)                                      # Vg
    b_t = [list(row) for row in zip(*_inverse(v))]                         # V^-T
    for j, row in enumerate(b_t):           # rows of B^T as small integers, G's rows compensate
        denominator = lcm(*(x.denominator for x in row))
        numerator = gcd(*(int(x * denominator) for x in row))
        scale = Fraction(denominator, numerator)
        b_t[j] = [x * scale for x in row]
        g[j] = [x / scale for x in g[j]]
    return tuple(map(tuple, a_t)), tuple(map(tuple, g)), tuple(map(tuple, b_t))


@lru_cache(maxsize=None)
def winograd_float_matrices(tile_size: int, kernel_size: int = 3):
    """:func:`winograd_matrices` as float64 arrays."""
    return tuple(np.array([[float(x) for x in row] for row in mat]) for mat in
                 winograd_matrices(tile_size, kernel_size))


# =============================================================================================
# Attributes

def _tile_attr(value) -> int:
    m = as_int(value, "tile_size", minimum=1)
    if m + 2 > MAX_ALPHA:
        raise ValueError(f"tile_size={m} is too large (at most {MAX_ALPHA - 2} for a 3x3 kernel)")
    return m


def _normalize_weight_transform(a: dict) -> dict:
    a["tile_size"] = _tile_attr(a["tile_size"])
    return a


def _normalize_winograd(a: dict) -> dict:
    a = _nn._normalize_conv2d(a)
    a["tile_size"] = _tile_attr(a["tile_size"])
    if a["kernel_size"] is not None and a["kernel_size"][0] != a["kernel_size"][1]:
        raise ValueError(f"kernel_size={a['kernel_size']} must be square")
    if a["tile_size"] + (a["kernel_size"] or (3,))[0] - 1 > MAX_ALPHA:
        raise ValueError(f"tile_size={a['tile_size']} with kernel_size={a['kernel_size']} makes a "
                         f"tile larger than {MAX_ALPHA}")
    return a


# =============================================================================================
# nn.contrib_conv2d_winograd_weight_transform

@relation("Conv2DWinogradWeightTransformRel")
def _float_only(t, what: str) -> None:
    """The transforms' fractions (1/2, 1/6, ...) have no integer or boolean arithmetic."""
    if not str(t.dtype).startswith(("float", "bfloat")):
        fail(f"{what} {t}: Winograd needs a floating-point dtype, got {t.dtype}")


def winograd_weight_transform_rel(types, attrs):
    """The OIHW weight ``(O, I, r, r)`` becomes ``(alpha, alpha, O, I)``."""
    (weight,) = types
    if not known(weight):
        return None
    weight = tensor(weight, "weight")
    _float_only(weight, "weight")
    if weight.ndim != 4:
        fail(f"weight {weight} must be OIHW (rank 4)")
    o, i, kh, kw = weight.shape
    if not (isinstance(kh, int) and isinstance(kw, int)) or kh != kw:
        fail(f"weight {weight}: the kernel must be square with a static size")
    alpha = attrs.tile_size + kh - 1
    if alpha > MAX_ALPHA:
        fail(f"tile_size={attrs.tile_size} with a {kh}x{kw} kernel makes a tile larger than "
             f"{MAX_ALPHA}")
    return TensorType((alpha, alpha, o, i), weight.dtype)


def winograd_weight_transform_matrix(tile_size: int, kernel_size: int = 3) -> np.ndarray:
    """``kron(G, G)``: the ``(alpha^2, r^2)`` float64 matrix taking a flattened ``r x r`` kernel
    ``g`` to the flattened ``G g G^T`` (row ``e * alpha + u``, column ``k * r + l``).

    >>> winograd_weight_transform_matrix(2).shape
    (16, 9)
    """
    _, g, _ = winograd_float_matrices(tile_size, kernel_size)
    return np.kron(g, g)


def winograd_weight_transform_blocked(w, tile_size: int, block: int):
    """``layout_transform(weight_transform(w), "HWOI", f"HWOI{block}o")`` in one step, or None
    when ``block`` does not divide the output channels: the same matrix product as the weight
    transform's reference with the kernels taken in ``(O / block, I, block)`` order, which
    writes the blocked layout directly (what FoldConstant folds the x86 Winograd weights to,
    with no second pass over the transformed weights, four times the size of the weights). The
    values are the two steps' up to the product's last bit (the matrix library may round a
    column differently by its position).

    >>> from types import SimpleNamespace
    >>> from relaybench.ir.layout import Layout
    >>> w = np.random.default_rng(0).standard_normal((32, 8, 3, 3)).astype("float32")
    >>> u = _weight_transform_reference(w, SimpleNamespace(tile_size=4))
    >>> blocked = winograd_weight_transform_blocked(w, 4, 16)
    >>> two_steps = Layout("HWOI").transform_array(u, "HWOI16o")
    >>> blocked.shape, bool(np.allclose(blocked, two_steps, rtol=1e-7, atol=1e-7))
    ((6, 6, 2, 8, 16), True)
    """
    w = np.asarray(w)
    o, i, kh, kw = w.shape
    if block <= 0 or o % block:
        return None
    rows = w.reshape(o // block, block, i, kh * kw).transpose(0, 2, 1, 3)
    return _transform_kernels(rows, tile_size, (o // block, i, block))


def _weight_transform_reference(w, attrs):
    """``G g G^T`` of every (O, I) pair as one matrix product ``kron(G, G) @ w.reshape(O * I,
    r * r).T``, which comes out ``(alpha * alpha, O * I)``: the result's layout with no copy. A
    float32 weight is transformed in float32 (nine products summed per entry, so the rounding
    stays within a few ulps); the arithmetic is otherwise float64."""
    w = np.asarray(w)
    o, i, kh, kw = w.shape
    return _transform_kernels(w.reshape(o, i, kh * kw), attrs.tile_size, (o, i))


def _transform_kernels(kernels, tile_size: int, shape: tuple):
    """``G g G^T`` of each flattened ``r x r`` kernel of ``kernels`` (``(..., r * r)``, in the
    order the result takes them), as ``(alpha, alpha) + shape``."""
    r = int(round(kernels.shape[-1] ** 0.5))
    alpha = tile_size + r - 1
    k = winograd_weight_transform_matrix(tile_size, r)
    flat = np.ascontiguousarray(kernels).reshape(-1, r * r)
    if kernels.dtype == np.float32:
        # written straight into an array of the result's shape, which owns its memory, so a
        # folded constant can hold it without a copy (a reshaped view would be copied)
        out = np.empty((alpha, alpha) + tuple(shape), np.float32)
        np.matmul(k.astype(np.float32), flat.T, out=out.reshape(alpha * alpha, flat.shape[0]))
        return out
    u = np.matmul(k, flat.T.astype(np.float64))
    return np.ascontiguousarray(u.reshape((alpha, alpha) + tuple(shape)), dtype=kernels.dtype)


def _lin(coefficients, terms):
    """``sum(c * t)`` over the non-zero coefficients (a coefficient of 1 or -1 multiplies nothing),
    or None when every coefficient is 0."""
    out = None
    for c, t in zip(coefficients, terms):
        if c == 0:
            continue
        if c == 1:
            out = t if out is None else out + t
        elif c == -1:
            out = -t if out is None else out - t
        else:
            term = t * te.cast(t.dtype, float(c))
            out = term if out is None else out + term
    return out


def _chain(index, values):
    """``values[index]`` for a loop index with constant-foldable equality tests: a ``select``
    chain, which becomes one value once the loop over ``index`` is unrolled."""
    out = values[-1]
    for k in range(len(values) - 2, -1, -1):
        out = te.if_then_else(te.loop_ir.equal(index, k), values[k], out)
    return out


def _zero_if_none(value, dtype):
    return value if value is not None else te.cast(dtype, 0.0)


def winograd_weight_transform_compute(inputs, attrs, out_type):
    """``G g G^T`` per (output, input) channel pair, the constants unrolled into the body."""
    (w,) = inputs
    dt = out_type.dtype
    r = int(w.shape[2])
    _, g, _ = winograd_matrices(attrs.tile_size, r)

    def body(eps, nu, o, i):
        taps = [[te.cast(dt, w[o, i, k, l]) for l in range(r)] for k in range(r)]
        rows = [_lin(g[e], [_zero_if_none(_lin(g[u], taps[k]), dt) for k in range(r)])
                for e in range(len(g)) for u in range(len(g))]
        rows = [_zero_if_none(v, dt) for v in rows]
        alpha = len(g)
        return _chain(eps, [_chain(nu, rows[e * alpha:(e + 1) * alpha]) for e in range(alpha)])
    return te.compute(shape_of(out_type), body, name="winograd_weight_transform")


contrib_conv2d_winograd_weight_transform = register(OpDef(
    "nn.contrib_conv2d_winograd_weight_transform", ("weight",), winograd_weight_transform_rel,
    OpPattern.OPAQUE, attrs={"tile_size": 4}, normalize=_normalize_weight_transform,
    reference=_weight_transform_reference, compute=winograd_weight_transform_compute,
    doc="The Winograd transform ``G g G^T`` of an OIHW weight for tiles of ``tile_size`` outputs: "
        "``(alpha, alpha, O, I)`` with ``alpha = tile_size + kernel - 1``; folded at compile time "
        "when the weight is a constant."))


# =============================================================================================
# nn.contrib_conv2d_winograd_without_weight_transform

@relation("Conv2DWinogradRel")
def winograd_conv2d_rel(types, attrs):
    """Data in ``data_layout``, the transformed weight ``(alpha, alpha, O, I)`` in
    ``kernel_layout`` (``H`` and ``W`` are the tile axes); the output as ``nn.conv2d``'s with a
    stride and dilation of 1."""
    data, weight = types
    if not known(data):
        return None
    if tuple(attrs.strides) != (1, 1) or tuple(attrs.dilation) != (1, 1) or attrs.groups != 1:
        fail(f"Winograd needs strides=(1, 1), dilation=(1, 1) and groups=1, got strides="
             f"{attrs.strides}, dilation={attrs.dilation}, groups={attrs.groups}")
    data, (n, c, h, w) = _nn._conv_data(data, attrs)
    _float_only(data, "data")
    r = (attrs.kernel_size or (3, 3))[0]
    alpha = attrs.tile_size + r - 1
    kl = Layout(attrs.kernel_layout)
    implied = None
    if attrs.channels is not None:
        implied = TensorType(_nn._convert((alpha, alpha, attrs.channels, c), Layout("HWOI"), kl,
                                          f"the weight implied by channels={attrs.channels}"),
                             data.dtype)
    if known(weight):
        weight = tensor(weight, "weight")
        if weight.ndim != kl.ndim:
            fail(f"weight {weight} has rank {weight.ndim} but kernel_layout {kl} needs rank {kl.ndim}")
        a1, a2, o, i = _nn._convert(weight.shape, kl, "HWOI", lambda: f"weight {weight}")
        if provably_different(a1, alpha) or provably_different(a2, alpha):
            fail(f"the transformed weight's tile is {format_dim(a1)}x{format_dim(a2)} but "
                 f"tile_size={attrs.tile_size} with a {r}x{r} kernel needs {alpha}x{alpha}")
        if not same_dim(i, c):
            fail(f"data has {format_dim(c)} input channels but the weight expects {format_dim(i)}")
        if attrs.channels is not None and provably_different(o, attrs.channels):
            fail(f"channels={attrs.channels} but the weight has {format_dim(o)} output channels")
        channels = o
    elif implied is not None:
        channels = attrs.channels
    else:
        return None
    pt, pl, pb, pr = attrs.padding
    out_hw = (sub(add(h, pt + pb), r - 1), sub(add(w, pl + pr), r - 1))
    for extent, axis in zip(out_hw, "HW"):
        if isinstance(extent, int) and extent < 1:
            fail(f"the {r}x{r} kernel is larger than the padded input's {axis}")
    out = _nn._conv_output(n, channels, out_hw, attrs, data.dtype)
    return out if known(weight) else [data, implied, out]


def _winograd_reference(x, u, attrs):
    """Winograd in float64 numpy: tiles of the padded input transformed, multiplied with the
    transformed weight summed over the input channels, transformed back and cropped."""
    m = attrs.tile_size
    r = (attrs.kernel_size or (3, 3))[0]
    a_t, _, b_t = winograd_float_matrices(m, r)
    out_dtype = attrs.out_dtype or x.dtype.name
    xn = Layout(attrs.data_layout).transform_array(x, "NCHW").astype(np.float64)
    un = Layout(attrs.kernel_layout).transform_array(u, "HWOI").astype(np.float64)
    n, c, h, w = xn.shape
    pt, pl, pb, pr = attrs.padding
    oh, ow = h + pt + pb - r + 1, w + pl + pr - r + 1
    nh, nw = -(-oh // m), -(-ow // m)
    hp, wp = nh * m + r - 1, nw * m + r - 1
    xp = np.pad(xn, ((0, 0), (0, 0), (pt, hp - h - pt), (pl, wp - w - pl)))
    alpha = m + r - 1
    d = sliding_window_view(xp, (alpha, alpha), axis=(2, 3))[:, :, ::m, ::m]   # N C nh nw a a
    v = np.einsum("ei,nctsij,uj->euntsc", b_t, d, b_t, optimize=True)
    v = v.reshape(alpha, alpha, n * nh * nw, c)                                      # e u P C
    mm = np.matmul(v, un.transpose(0, 1, 3, 2))                                      # e u P O
    mm = mm.reshape(alpha, alpha, n, nh, nw, -1)
    y = np.einsum("he,euntso,wu->nothsw", a_t, mm, a_t, optimize=True)              # N O nh m nw m
    y = y.reshape(n, y.shape[1], nh * m, nw * m)[:, :, :oh, :ow]
    y = _nn._finish(y, out_dtype)
    return np.ascontiguousarray(Layout("NCHW").transform_array(y, attrs.out_layout or attrs.data_layout))


_NCHWC = re.compile(r"^NCHW(\d+)c$")
_HWOIO = re.compile(r"^HWOI(\d+)o$")


def _block(layout: str, plain: str, pattern, what: str) -> int:
    """The block of a ``plain`` or blocked layout (1 for the plain one)."""
    if layout == plain:
        return 1
    found = pattern.match(layout)
    if not found:
        raise CompileError(f"nn.contrib_conv2d_winograd_without_weight_transform: the kernel "
                           f"takes {what} in {plain} or its blocked form, not {layout!r}")
    return int(found.group(1))


def winograd_conv2d_compute(inputs, attrs, out_type, tiles_inner: bool = False,
                            pad_tiles: int = 1, split_k: int = 1):
    """Winograd convolution as three stages and the padded input: ``winograd_data_pack``
    (``B^T d B`` of every input tile, ``(alpha, alpha, P, C / x, x)`` for ``P`` tiles and the
    data's channel block ``x``), ``winograd_bgemm`` (for each of the ``alpha^2`` tile positions,
    the products summed over the input channels: ``(alpha, alpha, O / y, P, y)``) and
    ``winograd_conv2d`` (``A^T M A`` cropped, in the output layout). The constant matrices are
    unrolled into the bodies as ``select`` chains over the tile axes, which a schedule unrolling
    those axes turns into straight-line arithmetic with the zero coefficients left out.

    With ``tiles_inner`` (plain ``NCHW`` / ``HWOI`` only; the GPU's compute) the tiles are the
    innermost axis of both intermediates, ``(alpha, alpha, C, P)`` and ``(alpha, alpha, O, P)``:
    a matrix product ``M = U V`` per tile position with ``V`` read along its rows, so
    neighbouring work items, on neighbouring tiles, read and write neighbouring addresses.
    ``pad_tiles`` then rounds the tile axis up to a multiple (the transform of a tile past the
    end is zero), so that a schedule's blocks of tiles are all whole: no guard in the products'
    inner loop; and the products are ``(S, alpha, alpha, O, P)`` for ``split_k = S`` slices of
    the input channels, each slice's sum a product of its own (more work items where the
    products are thin), the output transform adding the ``S`` partial products first."""
    data, weight = inputs
    dt = out_type.dtype
    x_block = _block(attrs.data_layout, "NCHW", _NCHWC, "the data")
    y_block = _block(attrs.out_layout or attrs.data_layout, "NCHW", _NCHWC, "the output")
    w_block = _block(attrs.kernel_layout, "HWOI", _HWOIO, "the transformed weight")
    if tiles_inner and (x_block, y_block, w_block) != (1, 1, 1):
        raise CompileError("the Winograd compute with the tiles innermost takes NCHW data and "
                           f"output and an HWOI weight, not {attrs.data_layout} / "
                           f"{attrs.out_layout or attrs.data_layout} / {attrs.kernel_layout}")
    m = attrs.tile_size
    alpha = int(weight.shape[0])
    r = alpha - m + 1
    a_t, _, b_t = winograd_matrices(m, r)
    n_, c_blocks, h, w = (int(d) for d in data.shape[:4])
    out_shape = shape_of(out_type)
    oh, ow = int(out_shape[2]), int(out_shape[3])
    o_blocks = int(weight.shape[2])
    nh, nw = -(-oh // m), -(-ow // m)
    tiles = n_ * nh * nw
    hp, wp = nh * m + r - 1, nw * m + r - 1
    pt, pl = attrs.padding[0], attrs.padding[1]
    pads = [(0, 0), (0, 0), (pt, hp - h - pt), (pl, wp - w - pl)] + [(0, 0)] * (data.ndim - 4)
    src = data if all(p == (0, 0) for p in pads) else padded(data, pads, te.cast(data.dtype, 0),
                                                             "winograd_pad")

    def data_pack(eps, nu, p, cb, cl):
        b, t = p // (nh * nw), (p // nw) % nh
        s = p % nw
        def at(i, j):
            index = (b, cb, t * m + i, s * m + j) + ((cl,) if x_block > 1 else ())
            return te.cast(dt, src[index])
        d = [[at(i, j) for j in range(alpha)] for i in range(alpha)]
        rows = []
        for e in range(alpha):
            col = [_zero_if_none(_lin(b_t[e], [d[i][j] for i in range(alpha)]), dt)
                   for j in range(alpha)]
            rows.append(_chain(nu, [_zero_if_none(_lin(b_t[u], col), dt) for u in range(alpha)]))
        return _chain(eps, rows)
    if tiles_inner:
        padded_tiles = -(-tiles // pad_tiles) * pad_tiles

        def pack(eps, nu, c, p):
            value = data_pack(eps, nu, p, c, 0)
            if padded_tiles == tiles:
                return value
            return te.if_then_else(p < tiles, value, te.cast(dt, 0.0))
        packed = te.compute((alpha, alpha, c_blocks, padded_tiles), pack,
                            name="winograd_data_pack")
        if split_k < 1 or c_blocks % split_k:
            raise CompileError(f"the Winograd compute: split_k={split_k} does not divide the "
                               f"{c_blocks} input channels")
        per_slice = c_blocks // split_k
        rc = te.reduce_axis(per_slice, name="rc")
        product = te.compute(
            (split_k, alpha, alpha, o_blocks, padded_tiles),
            lambda sl, eps, nu, k, p: te.sum(
                te.cast(dt, weight[eps, nu, k, sl * per_slice + rc])
                * packed[eps, nu, sl * per_slice + rc, p], axis=[rc]),
            name="winograd_bgemm")

        def at_product(e, u, k, p, col):
            out = product[0, e, u, k, p]
            for sl in range(1, split_k):
                out = out + product[sl, e, u, k, p]
            return out
    else:
        packed = te.compute((alpha, alpha, tiles, c_blocks, x_block), data_pack,
                            name="winograd_data_pack")

        rco = te.reduce_axis(c_blocks, name="rco")
        rci = te.reduce_axis(x_block, name="rci")

        def bgemm(eps, nu, k, p, col):
            ci = rco * x_block + rci
            u = weight[eps, nu, k, ci, col] if w_block > 1 else weight[eps, nu, k, ci]
            return te.sum(packed[eps, nu, p, rco, rci] * te.cast(dt, u), axis=[rco, rci])
        product = te.compute((alpha, alpha, o_blocks, tiles, w_block), bgemm,
                             name="winograd_bgemm")

        def at_product(e, u, k, p, col):
            return product[e, u, k, p, col]

    def inverse(*i):
        b, ob, y, x = i[:4]
        if y_block == w_block:
            k, col = ob, (i[4] if y_block > 1 else 0)
        else:
            co = ob * y_block + i[4] if y_block > 1 else ob
            k, col = co // w_block, co % w_block
        p = (b * nh + y // m) * nw + x // m
        mm = [[at_product(e, u, k, p, col) for u in range(alpha)] for e in range(alpha)]
        rows = []
        for hi in range(m):
            s = [_zero_if_none(_lin(a_t[hi], [mm[e][u] for e in range(alpha)]), dt)
                 for u in range(alpha)]
            rows.append(_chain(x % m, [_zero_if_none(_lin(a_t[wi], s), dt) for wi in range(m)]))
        return _chain(y % m, rows)
    return te.compute(out_shape, inverse, name="winograd_conv2d")


contrib_conv2d_winograd_without_weight_transform = register(OpDef(
    "nn.contrib_conv2d_winograd_without_weight_transform", ("data", "weight"), winograd_conv2d_rel,
    OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"tile_size": 4, "strides": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1,
           "channels": None, "kernel_size": None, "data_layout": "NCHW", "kernel_layout": "HWOI",
           "out_layout": "", "out_dtype": ""},
    normalize=_normalize_winograd, reference=_winograd_reference, compute=winograd_conv2d_compute,
    layout=conv2d_layout,
    doc="Winograd convolution F(tile_size x tile_size, 3x3) (stride 1, dilation 1, one group) with "
        "an already transformed weight ``(alpha, alpha, O, I)`` (``kernel_layout`` ``HWOI`` or "
        "``HWOI{y}o``; see ``nn.contrib_conv2d_winograd_weight_transform``); data and output in "
        "``NCHW`` or ``NCHW{x}c``."))

# Relay's names: relay.nn.contrib_conv2d_winograd_*
_nn.contrib_conv2d_winograd_weight_transform = contrib_conv2d_winograd_weight_transform
_nn.contrib_conv2d_winograd_without_weight_transform = contrib_conv2d_winograd_without_weight_transform
