"""The x86 strategy: computes and schedules for the host CPU (AVX-512 where present).

Rules, by the group's anchor (the call with the highest pattern kind):

``conv2d_NCHWc``
    ``nn.conv2d`` with data in ``NCHW{x}c`` and weights in ``OIHW{x}i{o}o`` (what AlterOpLayout
    makes), ``groups=1``, the blocks agreeing. The compute splits the input channels into block
    and lane (two reduce axes, as TVM's ``conv2d_NCHWc``); the padded input is a stage computed
    first, in parallel. The output runs in parallel over (output-channel block, row) pairs, in
    tiles of ``ow_tile`` columns (the largest divisor of the width up to 14; two channel blocks
    when rows are 8 columns or narrower): the convolution accumulates in a register tile
    (``compute_at`` the tile, the reduce loops outside it, the columns unrolled and the
    output-channel lanes vectorized innermost, so each weight vector feeds ``ow_tile`` FMAs with a
    broadcast input each), then the fused epilogue (bias, residual, relu...) is applied as the
    tile is stored. With the ``plane`` knob the convolution is computed over the image's pixels
    as one axis (a reduction stage of shape ``(N, C, 1, H * W, c)`` seen as the image by an
    inlined view, :data:`PLANE_VIEW`): the register tiles run along the pixels across the rows,
    the last one shorter where the tile does not divide them (rule ``conv2d_NCHWc_tail``).
``depthwise_conv2d_NCHWc``
    a depthwise ``nn.conv2d`` (multiplier 1) in ``NCHW{x}c``: the same tiles over the window;
    the padded rows of one channel block are computed per output row, where they stay in L1.
``conv2d_NCHW``
    ``nn.conv2d`` in ``NCHW``/``OIHW`` (plain or depthwise), as before AlterOpLayout: a tile of
    up to 8 output channels x up to 16 columns in vector lanes, the padded input computed first.
``dense``
    ``nn.dense``: per output element, 16-lane partial sums over the reduction in a register
    (contiguous vector loads of both operands), summed at the end; parallel over the features.

**int8.** A ``conv2d_NCHWc`` or ``dense`` of int8/uint8 operands into int32 (what
quantization realizes) takes its reduction four values at a time: the innermost reduce loop,
of 4 consecutive input channels (conv: the channel lane split ``rcio x rcii``, so the block
must be a multiple of 4) or of 4 consecutive ``k`` per vector lane (dense: lane ``l`` of block
``ko`` sums ``k = 4 * (lanes * ko + l) + 0..3``), is tensorized
(:meth:`~relaybench.te.Stage.tensorize`) into a ``dot_sum`` inside the vectorized lane loop,
which the LLVM code generator computes with one ``vpdpbusd`` per vector (AVX-512 VNNI), or
``vpmaddwd`` on int16 pairs (AVX-512BW, AVX2), or plain widening arithmetic, as
``RB_X86_INT8`` or the host's features choose (:func:`relaybench.backends.llvm.jit.int8_path`).
The layouts are the float ones (``NCHW{x}c``, ``OIHW{x}i{y}o``): a weight vector holds the
4 input channels of the 16 output lanes as 4 rows of 16 bytes, which one byte shuffle turns
into lanes of 4 (shared by the whole register tile). Other int8 shapes (a channel block or a
reduction not a multiple of 4) keep the rules above with widening multiplies.
``reduce_tiled``
    a reduction anchoring its group (pooling, global pooling...) whose innermost data axis is a
    lane block: accumulated in a vector register per output position, the outer axes parallel.
``reduce``
    any other reduction (softmax's stages, sum...): the innermost data axis vectorized when it
    is a lane block with the reduce loops outside it; the outer data axes fused and parallel.
``injective``
    elementwise, broadcast and injective groups: the innermost axis split into vector lanes
    (vectorized) when it divides, the axis above kept as a row loop, the rest fused into one
    parallel loop.

**Knobs.** The ``conv2d_NCHWc`` (and ``depthwise_conv2d_NCHWc``) and float ``dense`` rules
read their decisions from a config (:data:`TEMPLATES`, :func:`space_of`): the register tile's
columns and channel blocks, the order of the reduce loops (channel blocks outside or inside the
window), unrolling the window's columns, the parallel axis; the dense partial sums' width (one
register or several independent accumulators) and the reduction's unrolling. A call's
:func:`workload_of` (op, shapes, dtypes, layout attributes) is looked up in the active tuning
context (:mod:`relaybench.autotune`: ``apply_history_best``); untuned, each knob takes the
hand-picked value described above, so an untuned build compiles the same loops as always.

**Legalize.** On the vnni path, int8 x int8 convolutions and dense layers are rewritten to
uint8 data (``+ 128``) minus ``128 x`` the weights' sums (:func:`legalize_int8_conv2d`), so the
kernels use ``vpdpbusd`` directly.

**Layouts.** Importing this module registers the llvm target's ``FTVMAlterOpLayout`` of
``nn.conv2d``, :func:`relaybench.passes.alter_op_layout.x86_conv2d_layouts`, which puts
convolutions in the blocked layouts the rules above schedule.

Every stage that is not an output and not a reduction is inlined into its readers, except a
convolution's padding and, in groups without a convolution, a stage that would copy more than
:data:`INLINE_BUDGET` expression nodes into its readers (one read at many points, as a cubic
resize reads 16, by a reader that is itself inlined the same way): it gets a buffer of its own.

The tiled rules compute the anchor inside its epilogue's loops (``compute_at``), which needs the
region each tile reads to be inferable. When it is not (an epilogue reading the anchor through
an index tensor, or both straight and transposed), lowering raises
:class:`~relaybench.te.ComputeAtError` and asks for the schedule again with
``compute_at=False``: the anchor computed at the root into a whole buffer, the epilogue an
injective stage reading it (rules ``conv2d_NCHWc_at_root``, ``conv2d_NCHW_at_root``,
``dense_at_root``; a tiled reduction becomes ``reduce``).
"""

from __future__ import annotations

import functools
import re

import numpy as np

from ... import te
from ...op._compute import _operand, padded, shape_of
from ...op.registry import register_alter_op_layout, register_legalize, register_op_attr
from ...passes.alter_op_layout import x86_conv2d_layouts
from ...te.tensor import ComputeOp
from . import x86_winograd

__all__ = ["compute", "schedule", "VECTOR_BYTES", "PARALLEL_MIN_WORK", "TEMPLATES",
           "workload_of", "space_of", "tuning_config", "narrow_host"]

# The layout policy of this target: AlterOpLayout on llvm blocks NCHW convolutions for these
# schedules (``conv2d_NCHWc``). Registered at level 0, the library's own level, which no scope
# undoes; a user's registration at a higher level replaces it.
def _conv2d_layouts(attrs, inputs, tinfos, out_type):
    """:func:`x86_conv2d_layouts` with float channel blocks of whole registers on a host without
    AVX-512 (8 lanes: 24 channels in 3 blocks of 8, not 2 of 12). MobileNet V2's 24-channel
    projections ran 2.6-3x faster so on an AVX2 host (``bench/RESULTS.md``)."""
    return x86_conv2d_layouts(attrs, inputs, tinfos, out_type,
                              register=8 if narrow_host() else 0)


register_alter_op_layout("nn.conv2d", _conv2d_layouts, level=0, target="llvm")


def flattens_image(attrs, tinfos, out_type) -> bool:
    """The ``FFlattenImage`` of ``nn.conv2d`` on llvm (see
    :func:`relaybench.passes.alter_op_layout.flatten_images`): a float 1x1 stride-1 unpadded
    convolution in blocked layouts runs on its image as one row, on a host without AVX-512.
    There a register tile of 6 pixels by a block of 16 channels (12 of the 16 registers) takes
    the pixels along the row whatever the width, with a shorter tile at the end; in the image
    only a divisor of the width could (7 and 14 have none near 6). MobileNet V2's 1x1 layers,
    one at a time, one thread (AMD EPYC, AVX2): 960 -> 320 channels at 7x7 731 -> 489 us,
    576 -> 96 at 14x14 455 -> 383 us, 16 -> 96 at 112x112 1267 -> 803 us."""
    if not narrow_host():
        return False
    data, weight = tinfos
    if _NCHWC.match(attrs["data_layout"] or "") is None or \
            _OIHWIO.match(attrs["kernel_layout"] or "") is None or attrs["groups"] != 1:
        return False
    if str(data.dtype) != "float32" or str(weight.dtype) != "float32" or \
            str(out_type.dtype) != "float32" or len(weight.shape) != 6:
        return False
    return (tuple(int(d) for d in weight.shape[2:4]) == (1, 1)
            and all(int(d) == 1 for d in attrs["strides"])
            and all(int(d) == 1 for d in attrs["dilation"])
            and all(int(d) == 0 for d in attrs["padding"]))


register_op_attr("nn.conv2d", "FFlattenImage", flattens_image, level=0, target="llvm")


def _vnni_applies(data_type, weight_type, out_type) -> bool:
    """An int8 x int8 -> int32 call on a host (or ``RB_X86_INT8``) computing with vpdpbusd."""
    from ..llvm.jit import int8_path
    return (str(data_type.dtype) == "int8" and str(weight_type.dtype) == "int8"
            and str(out_type.dtype) == "int32" and int8_path() == "vnni")


def _shifted_to_uint8(data):
    """``data + 128`` as uint8 (int8 ``v`` becomes ``v + 128``, exactly)."""
    from ... import op
    from ...ir.builder import const
    return op.cast(op.add(op.cast(data, dtype="int32"), const(128, "int32")), dtype="uint8")


def legalize_int8_conv2d(attrs, inputs, types):
    """x86's ``FTVMLegalize`` of ``nn.conv2d``: int8 data x int8 weights into int32 becomes
    ``conv2d(data + 128 as uint8, weights) - 128 * sum(weights)`` per output channel (Relay's
    x86 int8 legalization), so that VNNI's ``u8 x s8`` ``vpdpbusd`` applies with no correction
    inside the kernel; the correction folds to a constant when the weights are. The padding is
    made explicit first, with 128 (the shifted zero). Input channels that are not a multiple of 4
    (the ``dot_sum`` rule's step: an image's 3 channels) are padded with zero channels in both
    the data and the weights, which adds nothing to any sum. Only NCHW/OIHW convolutions of one
    group, and only on the vnni path.
    """
    from ... import op
    from ...ir.builder import const
    data_type, weight_type, out_type = types
    if not _vnni_applies(data_type, weight_type, out_type):
        return None
    if (attrs["data_layout"] != "NCHW" or attrs["kernel_layout"] != "OIHW"
            or attrs["out_layout"] not in ("", "NCHW")
            or not data_type.is_static or not weight_type.is_static):
        return None
    if attrs["groups"] != 1:
        return _legalize_int8_depthwise(attrs, inputs, data_type, weight_type)
    data, weight = inputs
    channels = int(data_type.shape[1])
    if channels % 4:
        extra = 4 - channels % 4
        data = op.nn.pad(data, const(0, "int8"), pad_width=((0, 0), (0, extra), (0, 0), (0, 0)))
        weight = op.nn.pad(weight, const(0, "int8"), pad_width=((0, 0), (0, extra), (0, 0), (0, 0)))
    shifted = _shifted_to_uint8(data)
    top, left, bottom, right = (int(p) for p in attrs["padding"])
    if top or left or bottom or right:
        shifted = op.nn.pad(shifted, const(128, "uint8"),
                            pad_width=((0, 0), (0, 0), (top, bottom), (left, right)))
    conv = op.nn.conv2d(shifted, weight, **dict(attrs, padding=(0, 0, 0, 0)))
    sums = op.sum(op.cast(weight, dtype="int32"), axis=(1, 2, 3))
    correction = op.reshape(op.multiply(sums, const(128, "int32")), newshape=(1, -1, 1, 1))
    return op.subtract(conv, correction)


def _legalize_int8_depthwise(attrs, inputs, data_type, weight_type):
    """The depthwise case of :func:`legalize_int8_conv2d` (one group per channel, multiplier 1,
    no dilation): the data shifted to uint8 and padded with 128 as there, and the kernel widened
    with zero columns to a multiple of 4 taps (3x3 becomes 3x4) with one more column of right
    padding per added tap, which leaves every output where it was; the depthwise ``dot_sum`` rule
    then sums 4 taps of a row per ``vpdpbusd`` step. (Keeping the data int8, with the padding
    inside the kernel and the sign flips there, measured slower: an int8 row padded per output
    row costs more than the separate padding pass over the tensor.)"""
    from ... import op
    from ...ir.builder import const
    channels = int(data_type.shape[1])
    if (attrs["groups"] != channels or int(weight_type.shape[0]) != channels
            or int(weight_type.shape[1]) != 1 or tuple(attrs["dilation"]) != (1, 1)):
        return None
    data, weight = inputs
    kw = int(weight_type.shape[3])
    extra = -kw % 4
    if extra:
        weight = op.nn.pad(weight, const(0, "int8"), pad_width=((0, 0), (0, 0), (0, 0), (0, extra)))
    top, left, bottom, right = (int(p) for p in attrs["padding"])
    shifted = op.nn.pad(_shifted_to_uint8(data), const(128, "uint8"),
                        pad_width=((0, 0), (0, 0), (top, bottom), (left, right + extra)))
    kernel_size = (int(weight_type.shape[2]), kw + extra)
    conv = op.nn.conv2d(shifted, weight, **dict(attrs, padding=(0, 0, 0, 0), kernel_size=kernel_size))
    sums = op.sum(op.cast(weight, dtype="int32"), axis=(1, 2, 3))
    correction = op.reshape(op.multiply(sums, const(128, "int32")), newshape=(1, -1, 1, 1))
    return op.subtract(conv, correction)


def legalize_int8_dense(attrs, inputs, types):
    """x86's ``FTVMLegalize`` of ``nn.dense``: int8 x int8 into int32 becomes
    ``dense(data + 128 as uint8, weights) - 128 * sum(weights, axis=1)`` on the vnni path
    (see :func:`legalize_int8_conv2d`), when the reduction is a multiple of 16 (the
    ``dot_sum`` rule)."""
    from ... import op
    from ...ir.builder import const
    data_type, weight_type, out_type = types
    if not _vnni_applies(data_type, weight_type, out_type) or not weight_type.is_static \
            or int(weight_type.shape[-1]) % 16:
        return None
    data, weight = inputs
    dense = op.nn.dense(_shifted_to_uint8(data), weight, **dict(attrs))
    sums = op.sum(op.cast(weight, dtype="int32"), axis=(1,))
    return op.subtract(dense, op.multiply(sums, const(128, "int32")))


register_legalize("nn.conv2d", legalize_int8_conv2d, level=0, target="llvm")
register_legalize("nn.dense", legalize_int8_dense, level=0, target="llvm")

VECTOR_BYTES = 64
"""Bytes per vector register (AVX-512)."""

PARALLEL_MIN_WORK = 16384
"""Below this many element-operations a loop nest runs on one thread (the pool costs more)."""

DENSE_ROWS_PARALLEL_MIN_WORK = 1 << 17
"""Multiply-adds below which the ``dense_rows`` rule stays on one core: a matrix-vector product
of 256 x 256 takes about 3 us on one, about what waking the other cores costs."""

_NCHWC = re.compile(r"^NCHW(\d+)c$")
_OIHWIO = re.compile(r"^OIHW(\d+)i(\d+)o$")


def lanes(dtype: str) -> int:
    """Vector lanes of ``dtype`` in one register."""
    return max(1, VECTOR_BYTES // np.dtype(dtype).itemsize)


def lane_block(extent: int, dtype: str) -> bool:
    """Whether an innermost axis of ``extent`` fills whole vectors of ``dtype``: a multiple of
    the register's lanes, or (narrow types: 16 int8 channels in an NCHW16c block) a part of one
    register of at least 4 lanes that divides it, up to 64 lanes either way."""
    width = lanes(dtype)
    return 4 <= extent <= 64 and (extent % width == 0 or width % extent == 0)


# ------------------------------------------------------------------------------------ computes

def _conv_kind(call):
    """``"NCHWc"``, ``"depthwise_NCHWc"`` or None for a conv2d call."""
    if call.op.name != "nn.conv2d":
        return None
    a = call.attrs
    if (a.data_layout == "NCHW" and a.kernel_layout == "OIHW"
            and (a.out_layout or "NCHW") == "NCHW"):
        channels_in = int(call.args[0].checked_type.shape[1])
        channels_out = int(call.checked_type.shape[1])
        if a.groups == 1 or a.groups == channels_in == channels_out:
            return "NCHW"
        return None
    data = _NCHWC.match(a.data_layout or "")
    out = _NCHWC.match(a.out_layout or a.data_layout or "")
    if not data or not out:
        return None
    kernel = _OIHWIO.match(a.kernel_layout or "")
    block = int(data.group(1))
    if (a.groups == 1 and kernel and int(kernel.group(1)) == block
            and int(kernel.group(2)) == int(out.group(1))):
        return "NCHWc"
    if (a.groups > 1 and kernel and int(kernel.group(1)) == 1 and int(kernel.group(2)) == block
            and int(out.group(1)) == block):
        (dshape, wshape) = [tuple(int(d) for d in arg.checked_type.shape) for arg in call.args]
        if dshape[1] * block == a.groups and wshape[0] * block == a.groups:
            return "depthwise_NCHWc"
    return None


def depthwise_conv2d_nchwc_compute(inputs, attrs, out_type):
    """Depthwise conv2d (channel multiplier 1) in NCHW{b}c x OIHW1i{b}o: each channel lane reads
    its own lane of the padded input."""
    data, weight = inputs
    dt = out_type.dtype
    sh, sw = attrs.strides
    dh, dw = attrs.dilation
    _, _, kh, kw, _, _ = weight.shape
    src = _padded_rows_and_columns(data, attrs)
    ry = te.reduce_axis(kh, name="ry")
    rx = te.reduce_axis(kw, name="rx")

    def body(n, co, oh, ow, ci):
        value = src[n, co, oh * sh + ry * dh, ow * sw + rx * dw, ci]
        return te.sum(_operand(value, dt) * _operand(weight[co, 0, ry, rx, 0, ci], dt),
                      axis=[ry, rx])
    return te.compute(shape_of(out_type), body, name="depthwise_conv2d_NCHWc")


def depthwise_conv2d_nchwc_int8_compute(inputs, attrs, out_type):
    """Depthwise conv2d in NCHW{b}c x OIHW1i{b}o of uint8/int8 operands into int32 with a
    kernel width that is a multiple of 4 (what the vnni Legalize makes): the taps of a row split
    as ``4 * rxo + rcii``, the innermost ``rcii`` for ``dot_sum`` (each channel lane's 4
    consecutive taps, ``b`` bytes apart in the data and in the weights)."""
    data, weight = inputs
    dt = out_type.dtype
    sh, sw = attrs.strides
    _, _, kh, kw, _, _ = weight.shape
    src = _padded_rows_and_columns(data, attrs)
    ry = te.reduce_axis(kh, name="ry")
    rxo = te.reduce_axis(kw // 4, name="rxo")
    rcii = te.reduce_axis(4, name="rcii")

    def body(n, co, oh, ow, ci):
        tap = rxo * 4 + rcii
        value = src[n, co, oh * sh + ry, ow * sw + tap, ci]
        return te.sum(_operand(value, dt) * _operand(weight[co, 0, ry, tap, 0, ci], dt),
                      axis=[ry, rxo, rcii])
    return te.compute(shape_of(out_type), body, name="depthwise_conv2d_NCHWc")


def _padded_rows_and_columns(data, attrs):
    """``data`` (NCHW{x}c) with the convolution's padding of H and W, as a stage named ``pad``."""
    pt, pl, pb, pr = attrs.padding
    if not (pt or pl or pb or pr):
        return data
    pads = [(0, 0), (0, 0), (pt, pb), (pl, pr), (0, 0)]
    return padded(data, pads, te.cast(data.dtype, 0), "pad")


def conv2d_nchwc_compute(inputs, attrs, out_type, plane: bool = False):
    """conv2d in NCHW{ib}c x OIHW{ib}i{ob}o -> NCHW{ob}c with the input channels as two reduce
    axes (block ``rco`` and lane ``rci``) and the padded input as a stage ``pad``.

    With ``plane``, the convolution is computed over the output plane's pixels as one axis
    (``conv2d_NCHWc`` of shape ``(N, C, 1, H * W, c)``, pixel ``p`` at row ``p // W`` and
    column ``p % W``), and the result is that tensor seen as the image (a stage
    ``conv2d_NCHWc_plane``, inlined into its readers): a register tile of consecutive pixels may
    then cross the rows (see :func:`conv2d_nchwc_space`)."""
    data, weight = inputs
    dt = out_type.dtype
    sh, sw = attrs.strides
    dh, dw = attrs.dilation
    oc_blocks, ic_blocks, kh, kw, ib, ob = weight.shape
    src = _padded_rows_and_columns(data, attrs)
    rco = te.reduce_axis(ic_blocks, name="rco")
    ry = te.reduce_axis(kh, name="ry")
    rx = te.reduce_axis(kw, name="rx")
    rci = te.reduce_axis(ib, name="rci")

    def body(n, oco, oh, ow, oci):
        value = src[n, rco, oh * sh + ry * dh, ow * sw + rx * dw, rci]
        return te.sum(_operand(value, dt) * _operand(weight[oco, rco, ry, rx, rci, oci], dt),
                      axis=[rco, ry, rx, rci])
    shape = shape_of(out_type)
    if not plane:
        return te.compute(shape, body, name="conv2d_NCHWc")
    n, c, h, w, lanes = shape
    flat = te.compute((n, c, 1, h * w, lanes),
                      lambda n, oco, _, p, oci: body(n, oco, p // w, p % w, oci),
                      name="conv2d_NCHWc")
    return te.compute(shape, lambda n, oco, oh, ow, oci: flat[n, oco, 0, oh * w + ow, oci],
                      name=PLANE_VIEW)


#: the stage that shows a convolution computed over its plane's pixels as the image (see
#: :func:`conv2d_nchwc_compute`)
PLANE_VIEW = "conv2d_NCHWc_plane"


def _reduction_of(tensor):
    """The convolution's reduction stage behind ``tensor`` (its plane view's input)."""
    op = tensor.op
    if op.name == PLANE_VIEW:
        return op.inputs[0]
    return tensor


def _int8_dot(call) -> bool:
    """Whether ``call`` multiplies int8/uint8 operands into an int32 result (the int8 rules)."""
    dtypes = [str(arg.checked_type.dtype) for arg in call.args[:2]]
    return (all(d in ("int8", "uint8") for d in dtypes)
            and str(call.checked_type.dtype) == "int32")


def conv2d_nchwc_int8_compute(inputs, attrs, out_type):
    """conv2d in NCHW{ib}c x OIHW{ib}i{ob}o with int8/uint8 operands into int32: the channel
    lane ``rci`` split as ``4 * rcio + rcii``, the innermost ``rcii`` for ``dot_sum``."""
    data, weight = inputs
    dt = out_type.dtype
    sh, sw = attrs.strides
    dh, dw = attrs.dilation
    oc_blocks, ic_blocks, kh, kw, ib, ob = weight.shape
    src = _padded_rows_and_columns(data, attrs)
    rco = te.reduce_axis(ic_blocks, name="rco")
    ry = te.reduce_axis(kh, name="ry")
    rx = te.reduce_axis(kw, name="rx")
    rcio = te.reduce_axis(ib // 4, name="rcio")
    rcii = te.reduce_axis(4, name="rcii")

    def body(n, oco, oh, ow, oci):
        channel = rcio * 4 + rcii
        value = src[n, rco, oh * sh + ry * dh, ow * sw + rx * dw, channel]
        return te.sum(_operand(value, dt) * _operand(weight[oco, rco, ry, rx, channel, oci], dt),
                      axis=[rco, ry, rx, rcio, rcii])
    return te.compute(shape_of(out_type), body, name="conv2d_NCHWc")


def dense_int8_compute(inputs, attrs, out_type):
    """dense of int8/uint8 operands into int32 as ``width``-lane partial sums where lane ``l``
    of reduction block ``ko`` takes the 4 consecutive ``k`` from ``4 * (width * ko + l)``
    (both operands read as contiguous vectors of ``4 * width`` bytes), then their sum; None
    when the reduction is not a multiple of 16."""
    x, w = inputs
    dt = out_type.dtype
    k_total = x.shape[-1]
    width = next((n for n in (16, 8, 4) if k_total % (4 * n) == 0), None)
    if width is None:
        return None
    shape = shape_of(out_type)
    ko = te.reduce_axis(k_total // (4 * width), name="ko")
    k4 = te.reduce_axis(4, name="k4")

    def partial_body(*i):
        k = ko * (4 * width) + i[-1] * 4 + k4
        return te.sum(_operand(x[i[:-2] + (k,)], dt) * _operand(w[i[-2], k], dt),
                      axis=[ko, k4])
    partial = te.compute(shape + (width,), partial_body, name="dense_partial")
    ki = te.reduce_axis(width, name="ki")
    return te.compute(shape, lambda *i: te.sum(partial[i + (ki,)], axis=[ki]), name="dense")


def dense_compute(inputs, attrs, out_type, width: int | None = None):
    """dense as ``width``-lane partial sums over the reduction (default: one register's lanes),
    then their sum. A width of several registers keeps several independent accumulators, so the
    additions of one are not waiting for the previous one's."""
    x, w = inputs
    dt = out_type.dtype
    k_total = x.shape[-1]
    width = width or lanes(dt)
    if k_total % width or k_total < 2 * width:
        return None
    shape = shape_of(out_type)
    ko = te.reduce_axis(k_total // width, name="ko")
    partial = te.compute(shape + (width,), lambda *i: te.sum(
        _operand(x[i[:-2] + (ko * width + i[-1],)], dt)
        * _operand(w[i[-2], ko * width + i[-1]], dt), axis=[ko]), name="dense_partial")
    ki = te.reduce_axis(width, name="ki")
    return te.compute(shape, lambda *i: te.sum(partial[i + (ki,)], axis=[ki]), name="dense")


def dense_rows_compute(inputs, attrs, out_type, width: int | None = None):
    """dense along the weight's rows, for a batch of one (a matrix-vector product) or a
    reduction that is not a whole number of registers: per output, ``width``-lane partial sums
    over the reduction's whole blocks of ``width`` (``dense_rows_partial``), folded in halves
    down to two lanes (``dense_fold<h>``: the register's upper half added to its lower half),
    plus the products of the last ``K mod width`` elements (``dense_tail``); None when the
    reduction is shorter than ``width``."""
    x, w = inputs
    dt = out_type.dtype
    k_total = int(x.shape[-1])
    width = width or lanes(dt)
    blocks = k_total // width
    if blocks < 1 or width < 2 or width & (width - 1):
        return None
    shape = shape_of(out_type)
    ko = te.reduce_axis(blocks, name="ko")
    folded = te.compute(shape + (width,), lambda *i: te.sum(
        _operand(x[i[:-2] + (ko * width + i[-1],)], dt)
        * _operand(w[i[-2], ko * width + i[-1]], dt), axis=[ko]), name="dense_rows_partial")
    half = width
    while half > 2:
        half //= 2
        folded = te.compute(shape + (half,), lambda *i, t=folded, h=half:
                            t[i] + t[i[:-1] + (i[-1] + h,)], name=f"dense_fold{half}")
    done = blocks * width
    if done == k_total:
        return te.compute(shape, lambda *i: folded[i + (0,)] + folded[i + (1,)], name="dense")
    kt = te.reduce_axis(k_total - done, name="kt")
    tail = te.compute(shape, lambda *i: te.sum(
        _operand(x[i[:-1] + (done + kt,)], dt) * _operand(w[i[-1], done + kt], dt), axis=[kt]),
        name="dense_tail")
    return te.compute(shape, lambda *i: folded[i + (0,)] + folded[i + (1,)] + tail[i],
                      name="dense")


def _dense_by_rows(call) -> bool:
    """Whether a float ``nn.dense`` takes :func:`dense_rows_compute`: a batch of one, or a
    reduction that is not a multiple of one register's lanes (but at least one register)."""
    x_type = call.args[0].checked_type
    if not getattr(x_type, "is_static", False) or _int8_dot(call):
        return False
    width = lanes(str(call.checked_type.dtype))
    k_total = int(x_type.shape[-1])
    batch = int(np.prod([int(d) for d in x_type.shape[:-1]], dtype=np.int64))
    return k_total >= width and (batch == 1 or k_total % width != 0)


def compute(call, target):
    """The compute this strategy uses for ``call`` instead of the op's own, or None."""
    kind = _conv_kind(call)
    if kind == "NCHWc":
        block = int(call.args[1].checked_type.shape[4])
        if _int8_dot(call) and block % 4 == 0:
            return conv2d_nchwc_int8_compute
        _, config = tuning_config(call)
        if config is not None and config.get("plane"):
            return functools.partial(conv2d_nchwc_compute, plane=True)
        return conv2d_nchwc_compute
    if kind == "depthwise_NCHWc":
        kw = int(call.args[1].checked_type.shape[3])
        if _int8_dot(call) and kw % 4 == 0 and tuple(call.attrs.dilation) == (1, 1):
            return depthwise_conv2d_nchwc_int8_compute
        return depthwise_conv2d_nchwc_compute
    if call.op.name == "nn.dense":
        int8 = _int8_dot(call)
        by_rows = _dense_by_rows(call)
        _, config = tuning_config(call)

        def dense(inputs, attrs, out_type):
            out = None
            if int8:
                out = dense_int8_compute(inputs, attrs, out_type)
            if out is None and by_rows:
                out = dense_rows_compute(inputs, attrs, out_type,
                                         width=config["width"] if config else None)
            if out is None:
                out = dense_compute(inputs, attrs, out_type,
                                    width=config["width"] if config else None)
            return out if out is not None else call.op.opdef.compute(inputs, attrs, out_type)
        return dense
    return None


# ------------------------------------------------------------------------------- search spaces

#: The most accumulator registers a convolution's register tile may hold (``tile_ow`` x
#: ``tile_oc`` vectors): 32 vector registers, less the weight vectors and the broadcast input.
MAX_TILE_REGISTERS = 28


def workload_of(call):
    """The :class:`~relaybench.autotune.space.Workload` of a tunable call (a convolution the
    ``conv2d_NCHWc``, ``depthwise_conv2d_NCHWc`` or ``conv2d_winograd`` rules schedule, a float
    ``nn.dense``), or None."""
    from ...autotune.space import Workload
    if call is None:
        return None
    kind = _conv_kind(call)
    if kind in ("NCHWc", "depthwise_NCHWc"):
        template = "conv2d_NCHWc" if kind == "NCHWc" else "depthwise_conv2d_NCHWc"
        a = call.attrs
        attrs = (("data_layout", a.data_layout), ("dilation", tuple(int(d) for d in a.dilation)),
                 ("groups", int(a.groups)), ("kernel_layout", a.kernel_layout),
                 ("out_layout", a.out_layout or a.data_layout),
                 ("padding", tuple(int(p) for p in a.padding)),
                 ("strides", tuple(int(d) for d in a.strides)))
    elif call.op.name == "nn.dense" and not _int8_dot(call):
        template, attrs = ("dense_rows" if _dense_by_rows(call) else "dense"), ()
    elif call.op.name in x86_winograd.OPS:
        a = call.attrs
        template = "conv2d_winograd"
        attrs = (("data_layout", a.data_layout), ("kernel_layout", a.kernel_layout),
                 ("out_layout", a.out_layout or a.data_layout),
                 ("padding", tuple(int(p) for p in a.padding)), ("tile_size", int(a.tile_size)))
    else:
        return None
    types = [arg.checked_type for arg in call.args]
    out = call.checked_type
    if not all(getattr(t, "is_static", False) for t in types + [out]):
        return None
    return Workload(template, tuple(tuple(int(d) for d in t.shape) for t in types),
                    tuple(str(t.dtype) for t in types), tuple(int(d) for d in out.shape),
                    str(out.dtype), attrs)


def narrow_host() -> bool:
    """Whether this host's vector registers are 16 (no AVX-512), a 16-float vector taking two:
    the register tiles' defaults are smaller there (:func:`conv2d_nchwc_space`,
    :func:`.x86_winograd.tile_budget`)."""
    try:
        from ..llvm.jit import host_target
        return not host_target().has_avx512
    except ImportError:  # no llvmlite: nothing will be compiled here
        return False


#: the rules whose kernels lowering partitions where a padding guard turns (see
#: :func:`relaybench.te.simplify.simplify_func`): the depthwise convolution, which reads its
#: padding in place, and pooling, whose windows cross the padding. Elsewhere the guard sits in
#: a copy of the input that costs little beside the convolution after it, and the copies of
#: the body would cost compile time (ResNet-18's Winograd kernels took 0.05-0.13 s more each).
#: And the tiles of a row whose width they do not divide (``_tail``): the last tile of each row
#: is guarded, the others are not
PARTITIONED_RULES = frozenset({"depthwise_conv2d_NCHWc", "reduce", "conv2d_NCHWc_tail",
                               "depthwise_conv2d_NCHWc_tail"})


#: the fewest multiply-adds per output value (input channels x window) for which a host
#: without AVX-512 computes a convolution's image over its pixels by default (the ``plane``
#: knob of :func:`conv2d_nchwc_space`). Each register tile of pixels works out its pixels'
#: rows and columns and sums a whole reduction: with a few input channels and a small window
#: (MobileNet V2's and VGG-16's first layers: 3 channels, 3x3) that costs more than the
#: longer tiles gain (1.2-1.5x slower in the networks, AMD EPYC, AVX2)
PLANE_MIN_TAPS = 128


def _divisors(n: int, limit: int) -> list:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def conv2d_nchwc_space(workload):
    """The knobs of the ``conv2d_NCHWc`` and ``depthwise_conv2d_NCHWc`` rules; the defaults are
    the hand-picked tiles (``ow_tile`` the largest divisor of the width up to 14, two channel
    blocks for rows of 8 columns or fewer). On a host without AVX-512 (16 vector registers, a
    16-float vector taking two) a ``conv2d_NCHWc`` tile is 2 columns x 2 channel blocks (4
    columns where the blocks do not pair; an image as one row: 6 pixels of a block of 16) and a
    depthwise one up to 7 columns of 8 lanes, the window's columns unrolled (4 columns of one
    block for a block of lanes not a multiple of 16): measured on ResNet-18's and MobileNet V2's
    layers (AMD EPYC, AVX2),
    the 14-column tiles spilled and ran 1.3-3.3x (depthwise 1.4-2.5x) slower, and the 12-lane
    layers ran 2.6-2.9x slower on 2 x 2 tiles than on 2 x 1. There, a width with no divisor
    from 2 to 4 (7) takes a whole row of 8-lane vectors, the block's halves one after the other
    (``vector``): 1x1 layers of 7x7 outputs ran 1.3-1.7x faster so than on 1 x 2 tiles of
    whole blocks. There, too, an image whose convolution has :data:`PLANE_MIN_TAPS` taps or
    more is computed over its pixels as one axis (``plane``) in tiles of 6 pixels of 16 lanes
    (8 of 8) that cross its rows, the last one shorter: ResNet-18's stride-2 layers in the
    network's per-kernel profile, one thread, 0.76-0.95 of the time (the 3x3 one of 7x7 outputs
    3.23 -> 2.45 ms), the whole network 0.96-0.98 at one and two threads; the DQN 0.89-0.90."""
    from ...autotune.space import ConfigSpace
    n, oc_blocks, oh, ow, block = workload.out_shape
    space = ConfigSpace(workload.template)
    tile, vector = conv_width_tile(ow), block
    blocks = 2 if tile <= 8 and oc_blocks % 2 == 0 and oc_blocks >= 4 else 1
    if narrow_host():
        # 16 registers (no AVX-512): 2 x 2 vectors, or 4 columns where the blocks do not pair
        # (a depthwise tile: 4 columns of one block); a block of lanes that is not a multiple
        # of a register's 8 (12: a register and a half) takes 2 columns of one block
        whole = block % 8 == 0
        blocks = 2 if oc_blocks % 2 == 0 and workload.template == "conv2d_NCHWc" and whole else 1
        tile = conv_width_tile(ow, 2 if blocks == 2 or not whole else 4)
        if block == 8 and workload.template == "conv2d_NCHWc":
            # blocks of one register: up to 8 columns of one block
            tile, blocks = conv_width_tile(ow, 8), 1
        elif tile == 1 and whole and workload.out_dtype == "float32" and ow > 1:
            # a prime width (7): a row of up to 8 columns of 8 lanes, one register each
            tile, blocks, vector = conv_width_tile(ow, 8), 1, 8
    depthwise = narrow_host() and workload.template == "depthwise_conv2d_NCHWc"
    if depthwise and block % 16 == 0 and workload.out_dtype == "float32":
        # a depthwise tile of up to 7 columns of 8 lanes, the block's halves one after the
        # other, the window's columns unrolled, the threads sharing channel blocks: measured in
        # MobileNet V2 against the configs the tuner had found on the layers alone (one thread,
        # AMD EPYC, AVX2), 576 channels at 14x14 184 -> 57 us, 144 at 56x56 603 -> 269 us, 192
        # at 28x28 stride 2 130 -> 30 us
        tile, blocks, vector = conv_width_tile(ow, 7), 1, 8
    row = oh == 1 and ow >= 8 and workload.template == "conv2d_NCHWc"
    # an image of several rows may be computed over its pixels as one axis (``plane``): a
    # register tile of consecutive pixels then crosses the rows, any width up to 12, the last
    # tile of the plane shorter where the width does not divide the pixels
    plane_ok = (workload.template == "conv2d_NCHWc" and oh > 1 and workload.out_dtype ==
                "float32" and all(d == "float32" for d in workload.arg_dtypes))
    widths = _divisors(ow, 28)
    if plane_ok:
        widths = sorted(set(widths) | set(range(2, min(oh * ow, 12) + 1)))
    if row:
        # an image as one row (see flattens_image): tiles of any width up to 12, the last one
        # shorter where the width does not divide the row
        widths = sorted(set(widths) | set(range(2, min(ow, 12) + 1)))
        if narrow_host() and workload.out_dtype == "float32" and block in (8, 16):
            # 6 pixels by a block of 16 (12 accumulators, two registers a pixel, 8 loads for
            # 12 multiply-adds), or 8 pixels by a block of 8 (one load a multiply-add; 12
            # pixels, or 3 blocks of 4 pixels, ran 1.15-1.8x slower: the loads, the spills).
            # Blocks of 8 that come in threes: 3 pixels by 3 blocks (9 accumulators, 6 loads
            # for 9 multiply-adds); MobileNet V2's 24-channel projections in the network, one
            # thread (AMD EPYC, AVX2), 144 -> 24 at 56x56 500-509 -> 371-412 us, 96 -> 24
            # 262 -> 181 us (ONNX Runtime's 325 and 240)
            vector, blocks, tile = block, 1, 6 if block == 16 else 8
            if block == 8 and oc_blocks % 3 == 0:
                blocks, tile = 3, 3
    parallel = "oc_tile" if row else "oc" if depthwise else "oc_row"
    # the rule before the plane knob: what a logged config without that knob was measured with
    legacy = {"tile_ow": tile, "tile_oc": blocks, "vector": vector, "parallel": parallel,
              "plane": False}
    data_shape, weight_shape = workload.arg_shapes[:2]
    taps = data_shape[1] * data_shape[-1] * weight_shape[2] * weight_shape[3]
    plane = plane_ok and narrow_host() and block in (8, 16) and taps >= PLANE_MIN_TAPS
    if plane:
        # without AVX-512, the tile of a row (6 pixels of 16 lanes) on the plane's pixels:
        # widths of 7, 14 and 28 have no divisor near 6 (their tiles were 7 columns of 8
        # lanes, or 2 columns of 2 blocks: 7 or 8 accumulators). Threads share channel blocks
        # where there are 8 or more (each sweeps whole planes), else (block, tile) pairs
        vector, blocks, tile = block, 1, 6 if block == 16 else 8
        parallel = "oc" if oc_blocks >= 8 else "oc_tile"
    space.define_knob("tile_ow", widths, default=tile,
                      doc="output columns per register tile (each a vector of output channels)")
    space.define_knob("tile_oc", _divisors(oc_blocks, 4), default=blocks,
                      doc="output-channel blocks per register tile")
    data_shape = workload.arg_shapes[0]
    # a few input channels in blocks of one (a first layer's NCHW1c, see
    # alter_op_layout.reads_input_as_is): the channels inside the window, as a blocked layout
    # has them
    few = len(data_shape) == 5 and data_shape[-1] == 1 and data_shape[1] <= 4
    space.define_knob("reduce_order", ["channels_first", "window_first"],
                      default="window_first" if few else "channels_first",
                      doc="reduce loops: input-channel blocks outside the window, or inside it")
    # a depthwise window's columns unrolled on a host without AVX-512: its loop then holds
    # a few multiply-adds each (one vector per tile column); MobileNet V2's 576 channels at 14x14
    # alone 282 -> 111 us, 144 at 56x56 517 -> 258 us, 192 at 28x28 stride 2 126 -> 36 us (one
    # thread, AMD EPYC, AVX2)
    space.define_knob("unroll_rx", [False, True], default=depthwise,
                      doc="unroll the window's columns")
    # an image as one row: the (channel block, tile) pairs in either order, the threads sharing
    # them. Tiles outside (``tile_oc``) read the input once and the weights once a tile, the
    # other order the weights once and the input once a channel block. Measured on MobileNet
    # V2's layers alone, one thread (AMD EPYC, AVX2), caches flushed or not, neither order won
    # throughout (576 -> 96 channels at 14x14 252 against 277 us, 144 -> 24 at 56x56 476
    # against 455 us): the channel blocks outside, the tuner choosing
    if plane_ok:
        space.define_knob("plane", [False, True], default=plane,
                          doc="compute the image over its pixels as one axis, the register "
                          "tiles crossing its rows")
    space.define_knob("parallel", ["oc_row", "oc"] + (["oc_tile", "tile_oc"] if row or plane_ok
                                                      else []),
                      default=parallel,
                      doc="threads share (channel block, row) pairs, channel blocks, (channel "
                      "block, register tile) pairs or (register tile, channel block) pairs")
    halves = narrow_host() and block > 8 and block % 8 == 0 and workload.out_dtype == "float32"
    space.define_knob("vector", [block] + ([8] if halves else []),
                      default=vector, doc="lanes of a register tile's vectors: the whole "
                      "channel block, or 8 (one register of 16 without AVX-512), the block's "
                      "parts one after the other")
    # the parallel loop has two iterations or more wherever it can: a config tuned on one
    # thread runs on every thread count (a row can always share its tiles)
    split = n == 1 and (oc_blocks * oh >= 2 or row)

    def constraint(c):
        if c["tile_ow"] * c["tile_oc"] > MAX_TILE_REGISTERS:
            return False
        if c.get("plane"):
            if c["parallel"] == "oc_row":      # the same loops as oc_tile on a plane
                return False
            tiles = -(-(oh * ow) // c["tile_ow"])
        elif row:
            tiles = -(-ow // c["tile_ow"])
        elif ow % c["tile_ow"] or c["parallel"] in ("oc_tile", "tile_oc"):
            return False    # an image's rows: tiles that divide them, (block, row) pairs
        else:
            tiles = 1
        outer = oc_blocks // c["tile_oc"] * (oh if c["parallel"] == "oc_row" else tiles
                                             if c["parallel"] in ("oc_tile", "tile_oc") else 1)
        return outer >= 2 or not split
    space.constraint = constraint
    if plane_ok:
        space.legacy = ("plane", legacy)
    return space


def dense_space(workload):
    """The knobs of the ``dense`` rule: the partial sums' width (one register's lanes by
    default; more are independent accumulators) and the reduction loop's unrolling."""
    from ...autotune.space import ConfigSpace
    k_total = workload.arg_shapes[0][-1]
    width = lanes(workload.out_dtype)
    widths = [w for w in (width, 2 * width, 4 * width, 8 * width)
              if k_total % w == 0 and k_total >= 2 * w] or [width]
    space = ConfigSpace("dense")
    space.define_knob("width", widths, default=width,
                      doc="lanes of partial sums (a multiple of a register: independent chains)")
    space.define_knob("unroll_k", [1, 2, 4, 8], default=1,
                      doc="reduction blocks unrolled per loop trip")
    space.constraint = lambda c: (k_total // c["width"]) % c["unroll_k"] == 0
    return space


def dense_rows_space(workload):
    """The knobs of the ``dense_rows`` rule: the output rows computed together (their partial
    sums are independent accumulators, so more rows hide the additions' latency; a divisor of
    the output features) and the partial sums' width (one or two registers)."""
    from ...autotune.space import ConfigSpace
    k_total = workload.arg_shapes[0][-1]
    features = workload.out_shape[-1]
    width = lanes(workload.out_dtype)
    rows = [r for r in (1, 2, 4, 8, 16) if features % r == 0]
    space = ConfigSpace("dense_rows")
    space.define_knob("rows", rows, default=dense_rows_default(features),
                      doc="output rows per block (independent accumulators)")
    space.define_knob("width", [w for w in (width, 2 * width) if k_total >= w],
                      default=width, doc="lanes of partial sums per row")
    space.constraint = lambda c: c["rows"] * c["width"] // width <= MAX_TILE_REGISTERS
    return space


def dense_rows_default(features: int) -> int:
    """The ``dense_rows`` rule's rows per block: the largest of 4, 2, 1 dividing
    ``features``."""
    return next(r for r in (4, 2, 1) if features % r == 0)


#: template name -> the function making a workload's search space
TEMPLATES = {"conv2d_NCHWc": conv2d_nchwc_space, "depthwise_conv2d_NCHWc": conv2d_nchwc_space,
             "dense": dense_space, "dense_rows": dense_rows_space,
             "conv2d_winograd": x86_winograd.winograd_space}


def space_of(workload):
    """The search space of ``workload``'s template."""
    return TEMPLATES[workload.template](workload)


def tuning_config(call):
    """``(workload, config)`` for a tunable call: the config of the active tuning context
    (:func:`relaybench.autotune.config_for`), else the default; ``(None, None)`` for a call with
    no knobs."""
    workload = workload_of(call)
    if workload is None:
        return None, None
    from ...autotune.dispatch import config_for
    return workload, config_for(workload, space_of(workload))


# ----------------------------------------------------------------------------------- schedules

def schedule(group, compute_at: bool = True):
    """The schedule of one fused group and the name of the rule that made it.

    With ``compute_at=False`` no stage is attached inside another's loops: the anchor is computed
    at the root into a whole buffer and its epilogue reads that buffer. Lowering asks for this
    when the tiled rule's ``compute_at`` cannot be carried out (a
    :class:`~relaybench.te.ComputeAtError`: the epilogue reads the anchor through indices that
    are not affine over the loops' ranges, or both straight and transposed); the rule's name
    then ends in ``_at_root``.
    """
    if group.anchor is not None and group.anchor.op.name in x86_winograd.OPS:
        return x86_winograd.schedule(group, compute_at)   # rule conv2d_winograd
    s = te.create_schedule(group.outputs)
    output_ops = {t.op for t in group.outputs}
    anchor = group.anchor
    kind = _conv_kind(anchor) if anchor is not None else None
    keep = set()
    if kind in ("NCHWc", "depthwise_NCHWc", "NCHW"):
        conv = _reduction_of(group.anchor_tensors[0]).op
        pad = next((t.op for t in conv.inputs if t.op.name == "pad"
                    and isinstance(t.op, ComputeOp)), None)
        if pad is not None:
            keep.add(pad)
    if kind is None:
        keep |= _too_big_to_inline(s, output_ops)
    rows = anchor is not None and anchor.op.name == "nn.dense" and any(
        op.name == "dense_rows_partial" for op in s.ops)
    if rows:
        keep |= {op for op in s.ops if op.name.startswith("dense_fold")}
    for op in s.ops:
        if isinstance(op, ComputeOp) and op not in output_ops and not op.reduce_axis \
                and op not in keep:
            s[op].compute_inline()

    rule = "injective"
    done = set()
    if kind in ("NCHWc", "depthwise_NCHWc"):
        rule = "conv2d_NCHWc" if kind == "NCHWc" else "depthwise_conv2d_NCHWc"
        if compute_at:
            if _schedule_conv_nchwc(s, group, keep, tuning_config(anchor)[1]):
                rule += "_tail"     # the last tile of each row shorter: partitioned
        else:
            rule += "_at_root"
            _schedule_conv_nchwc_simple(s, _reduction_of(group.anchor_tensors[0]).op,
                                        next(iter(keep), None),
                                        list(group.outputs))
        done = set(s.ops)
    elif kind == "NCHW" and compute_at and _schedule_conv_nchw(s, group, keep):
        rule = "conv2d_NCHW"
        done = set(s.ops)
    elif kind == "NCHW":
        rule = "conv2d_NCHW_at_root"
    elif rows:
        rule = "dense_rows" if compute_at else "dense_rows_at_root"
        if compute_at and _schedule_dense_rows(s, group, tuning_config(anchor)[1]):
            done = set(s.ops)
    elif anchor is not None and anchor.op.name == "nn.dense" and any(
            op.name == "dense_partial" for op in s.ops):
        rule = "dense" if compute_at else "dense_at_root"
        if compute_at and _schedule_dense(s, group, tuning_config(anchor)[1]):
            done = set(s.ops)
    elif any(isinstance(op, ComputeOp) and op.reduce_axis for op in s.ops):
        rule = "reduce"
        if compute_at and len(group.outputs) == 1 and anchor is not None \
                and group.anchor_tensors:
            red = group.anchor_tensors[0]
            if isinstance(red.op, ComputeOp) and red.op.reduce_axis and \
                    tuple(red.shape) == tuple(group.outputs[0].shape) and \
                    _tile_reduction(s, red, group.outputs[0]):
                rule = "reduce_tiled"
                done = set(s.ops) | set(s.stages)
    for op in s.ops:
        if not isinstance(op, ComputeOp) or op in done or s[op].inlined:
            continue
        if op.reduce_axis:
            schedule_reduce(s, op)
        else:
            schedule_injective(s, op)
    return s, rule


#: The most expression nodes a stage may bring into its readers by being inlined (its expanded
#: body times the number of places it is read). Stages that read their input at many points
#: (cubic resize reads 16) multiply when chained: three chained cubic resizes inlined are one
#: expression of some 10^5 nodes, minutes of compiling for a few hundred outputs.
INLINE_BUDGET = 2048


def _too_big_to_inline(s, output_ops) -> set:
    """The injective stages whose inlining would copy more than :data:`INLINE_BUDGET` nodes
    into their readers; they are computed into buffers of their own instead."""
    from ...te.loop_ir import children
    from ...te.tensor import TensorLoad

    def walk(body):
        """(node count with inlined producers expanded, loads per producer op)"""
        size, loads, stack = 0, {}, [body]
        while stack:
            node = stack.pop()
            if isinstance(node, TensorLoad):
                producer = s.op_of(node.tensor)
                loads[producer] = loads.get(producer, 0) + 1
                size += expanded.get(producer, 1)
                stack.extend(node.indices)
                continue
            size += 1
            stack.extend(children(node))
        return size, loads

    expanded: dict = {}   # inlined op -> its body's expanded size
    reads: dict = {}      # op -> how many loads of it its readers hold
    bodies = {}
    for op in s.ops:
        if isinstance(op, ComputeOp):
            bodies[op] = walk(op.body)[1]
            for producer, count in bodies[op].items():
                reads[producer] = reads.get(producer, 0) + count
    kept = set()
    for op in s.ops:   # producers first
        if not isinstance(op, ComputeOp) or op in output_ops or op.reduce_axis:
            continue
        size = walk(op.body)[0]
        if reads.get(op, 0) > 1 and size * reads[op] > INLINE_BUDGET:
            kept.add(op)
        else:
            expanded[op] = size
    return kept


def _work(op) -> int:
    size = int(np.prod(op.output.shape, dtype=np.int64)) if op.output.shape else 1
    for axis in op.reduce_axis:
        size *= axis.extent
    return size


def _fuse_all(stage, axes):
    fused = axes[0]
    for axis in axes[1:]:
        fused = stage.fuse(fused, axis)
    return fused


def schedule_injective(s, op):
    """Innermost axis in vector lanes when it divides; the axis above it kept as a serial loop
    when there are enough rows to share out (so each row's indices are computed once, not per
    vector), and the rest fused into one parallel loop."""
    stage = s[op]
    axes = list(op.axis)
    if not axes:
        return
    width = lanes(op.output.dtype)
    last = axes[-1]
    vector = None
    if last.extent % width == 0:
        outer, vector = stage.split(last, width)
        axes = axes[:-1] + ([outer] if outer.extent > 1 or len(axes) == 1 else [])
    elif last.extent >= 4 and last.extent <= 64 and len(axes) > 1:
        vector = last
        axes = axes[:-1]
    row = None
    if vector is None and len(axes) >= 4 and last.extent < width \
            and np.prod([a.extent for a in axes[:-2]]) >= 64:
        # a short innermost axis (3 channels of an image) that is not vectorized: the row above
        # it stays a loop of its own too, so indices along it are affine (loop partitioning
        # takes a padding guard out of its interior, and LLVM can vectorize across it)
        axes = axes[:-2]
    elif len(axes) >= 3 and np.prod([a.extent for a in axes[:-1]]) >= 64:
        row = axes[-1]
        axes = axes[:-1]
    fused = _fuse_all(stage, axes) if axes else None
    if vector is not None:
        stage.vectorize(vector)
    if fused is not None and _work(op) >= PARALLEL_MIN_WORK and fused.extent > 1:
        stage.parallel(fused)
    del row


def schedule_reduce(s, op):
    """Reduce loops outside a vectorized lane block; outer data axes fused and parallel."""
    stage = s[op]
    data, reduce = list(op.axis), list(op.reduce_axis)
    vector = None
    if data and len(data) > 1 and lane_block(data[-1].extent, op.output.dtype):
        vector = data[-1]
        data = data[:-1]
        stage.reorder(*data, *reduce, vector)
    fused = _fuse_all(stage, data) if data else None
    if vector is not None:
        stage.vectorize(vector)
    if fused is not None and fused.extent > 1 and _work(op) >= PARALLEL_MIN_WORK:
        stage.parallel(fused)


def conv_width_tile(width: int, limit: int = 14) -> int:
    """Output columns per register tile: the largest divisor of ``width`` up to ``limit`` (so no
    tile is partial), one accumulator register per column and output-channel lane block."""
    return max(d for d in range(1, min(width, limit) + 1) if width % d == 0)


def _schedule_conv_nchwc(s, group, keep, config=None):
    """The tiled rule of ``conv2d_NCHWc`` and ``depthwise_conv2d_NCHWc`` with the knobs of
    ``config`` (:func:`conv2d_nchwc_space`; None: the defaults). True when the register tile
    does not divide the width: the last tile of each row is shorter, its loads and stores
    guarded (lowering partitions the loops, see ``PARTITIONED_RULES``)."""
    image = group.anchor_tensors[0]
    conv_t = _reduction_of(image)
    conv = conv_t.op
    plane = conv_t is not image     # computed over the plane's pixels (conv2d_nchwc_compute)
    outputs = [t for t in group.outputs]
    pad = next(iter(keep), None)
    if len(outputs) != 1 or tuple(outputs[0].shape) != tuple(image.shape):
        _schedule_conv_nchwc_simple(s, conv, pad, outputs)
        return False
    if outputs[0].op is conv:
        local = s.cache_write(conv_t).op
        out_stage = s[conv_t]
    else:
        local = conv
        out_stage = s[outputs[0]]
    n, oco, oh, ow, oci = out_stage.op.axis
    if plane:
        # the tiles run along the plane's pixels, across its rows: the image's rows and
        # columns fused, the pixel tile's accumulators computed over the flat pixels
        ow, oh = out_stage.fuse(oh, ow), None
    config = config or conv2d_nchwc_space(workload_of(group.anchor)).default()
    tile, blocks = config["tile_ow"], config["tile_oc"]
    ow_outer, ow_inner = out_stage.split(ow, tile)
    oco_outer, oco_inner = out_stage.split(oco, blocks)
    half = config.get("vector", oci.extent) < oci.extent
    tiles_first = config["parallel"] == "tile_oc" and n.extent == 1
    outer = [oh, ow_outer, oco_outer] if tiles_first else [oco_outer, oh, ow_outer]
    outer = [axis for axis in outer if axis is not None]
    if half:
        # a register tile of part of the lanes (8 of a block of 16 on a host of 16 registers):
        # twice the columns per tile for the same registers, the block's halves one after the
        # other
        oci_outer, oci = out_stage.split(oci, config["vector"])
        out_stage.reorder(n, *outer, oci_outer, oco_inner, ow_inner, oci)
    else:
        out_stage.reorder(n, *outer, oco_inner, ow_inner, oci)
    out_stage.vectorize(oci)
    # one image: the (channel block, row) pairs share the threads, the channel blocks alone
    # (each thread then sweeps whole planes) or the (channel block, tile) pairs (an image as
    # one row); a batch: the images
    attach = ow_outer
    if plane and config["parallel"] in ("oc_row", "oc_tile") and n.extent == 1:
        par = attach = out_stage.fuse(oco_outer, ow_outer)
    elif plane and tiles_first:
        par = attach = out_stage.fuse(ow_outer, oco_outer)
    elif config["parallel"] == "oc_row" and not plane:
        par = out_stage.fuse(oco_outer, oh)
    elif config["parallel"] == "oc_tile" and n.extent == 1:
        par = attach = out_stage.fuse(out_stage.fuse(oco_outer, oh), ow_outer)
    elif tiles_first:
        par = attach = out_stage.fuse(out_stage.fuse(oh, ow_outer), oco_outer)
    else:
        par = oco_outer
    out_stage.parallel(n if n.extent > 1 else par)

    conv_stage = s[local]
    conv_stage.compute_at(out_stage, oci_outer if half else attach)
    cn, coco, coh, cow, coci = local.axis
    reduce, dot = _dot_axis(local)
    if config["reduce_order"] == "window_first" and len(reduce) >= 3:
        # the window's rows and columns outside the input-channel blocks
        named = {axis.name: axis for axis in reduce}
        window = [named[k] for k in ("ry", "rx") if k in named]
        reduce = window + [axis for axis in reduce if axis not in window]
    conv_stage.reorder(cn, coh, *reduce, coco, cow, coci, *dot)
    conv_stage.unroll(coco)
    conv_stage.unroll(cow)
    conv_stage.vectorize(coci)
    if config["unroll_rx"]:
        rx = next((axis for axis in reduce if axis.name in ("rx", "rxo")), None)
        if rx is not None:
            conv_stage.unroll(rx)
    for axis in dot:
        conv_stage.tensorize(axis)
    if pad is not None and group.anchor.attrs.groups > 1 and n.extent == 1:
        # depthwise: the padding is read in place, through its guard (a padded copy, whole or
        # per output row, costs as much as the few flops of the convolution); loop
        # partitioning (simplify_func) takes the guard out of the interior rows and tiles.
        # MobileNet V2's depthwise layers, one thread (AMD EPYC, AVX-512): 1.87 ms in all with
        # three padded rows copied per output row, 0.86 ms read in place
        s[pad].compute_inline()
    elif pad is not None:
        # the padded input is computed once, before the convolution, in parallel
        schedule_injective(s, pad)
    return ow.extent % tile != 0


def _schedule_conv_nchwc_simple(s, conv, pad, outputs):
    """Groups whose shape the tiled rule does not fit (several outputs): the convolution with its
    reduction outside the vectorized lane block, parallel over (batch, channel block, row)."""
    if pad is not None:
        schedule_injective(s, pad)
    stage = s[conv]
    n, oco, oh, ow, oci = conv.axis
    reduce, dot = _dot_axis(conv)
    stage.reorder(n, oco, oh, ow, *reduce, oci, *dot)
    stage.vectorize(oci)
    for axis in dot:
        stage.tensorize(axis)
    stage.parallel(stage.fuse(stage.fuse(n, oco), oh))
    for out in outputs:
        if out.op is not conv and not s[out].inlined:
            schedule_injective(s, out.op)


def _dot_axis(op):
    """``(other reduce axes, [the int8 rules' 4-step axis])``, or ``(all, [])`` without one."""
    reduce = list(op.reduce_axis)
    if reduce and reduce[-1].name in ("rcii", "k4") and reduce[-1].extent == 4:
        return reduce[:-1], reduce[-1:]
    return reduce, []


def _tile_reduction(s, red, out) -> bool:
    """A reduction whose innermost data axis is a lane block, accumulated in registers: the
    output (``red`` itself through cache_write, or its elementwise epilogue) vectorized over the
    lanes, parallel over an outer axis, the reduction computed at its innermost outer loop with
    the reduce loops outside the lanes."""
    axes = list(out.op.axis)
    if len(axes) < 2 or not lane_block(axes[-1].extent, out.dtype):
        return False
    if red.op is out.op:
        local = s.cache_write(red).op
        out_stage = s[red]
    else:
        local = red.op
        out_stage = s[out]
    axes = list(out_stage.op.axis)
    out_stage.vectorize(axes[-1])
    if _work(local) >= PARALLEL_MIN_WORK:
        outer = axes[:-2]
        if outer and outer[0].extent > 1:
            out_stage.parallel(outer[0])
        elif outer:
            out_stage.parallel(_fuse_all(out_stage, outer))
    stage = s[local]
    stage.compute_at(out_stage, axes[-2])
    data = list(local.axis)
    stage.reorder(*data[:-1], *local.reduce_axis, data[-1])
    stage.vectorize(data[-1])
    return True


def _schedule_dense(s, group, config=None) -> bool:
    """dense: per output element, the 16-lane partial sums accumulated in a register over the
    reduction blocks, then summed; the epilogue applied as the element is stored; parallel over
    the rows (batch > 1) or the output features. ``config`` (:func:`dense_space`) may unroll
    the reduction loop by ``unroll_k`` blocks."""
    dense = group.anchor_tensors[0].op
    partial = next((t.op for t in dense.inputs if t.op.name == "dense_partial"), None)
    if partial is None or len(group.outputs) != 1:
        return False
    out = group.outputs[0]
    if tuple(out.shape) != tuple(dense.output.shape) or len(out.shape) != 2:
        return False
    out_stage = s[out]
    i, j = out.op.axis
    par = i if i.extent > 1 else j
    if _work(partial) >= PARALLEL_MIN_WORK:
        out_stage.parallel(par)
    if out.op is not dense:
        s[dense].compute_at(out_stage, j)
    stage = s[partial]
    stage.compute_at(out_stage, j)
    pi, pj, lane = partial.axis
    reduce, dot = _dot_axis(partial)
    unroll = config["unroll_k"] if config and not dot else 1
    inner = None
    if unroll > 1 and len(reduce) == 1 and reduce[0].extent % unroll == 0:
        outer, inner = stage.split(reduce[0], unroll)
        reduce = [outer, inner]
    stage.reorder(pi, pj, *reduce, lane, *dot)
    stage.vectorize(lane)
    if inner is not None:
        stage.unroll(inner)
    for axis in dot:
        stage.tensorize(axis)
    return True


def _schedule_dense_rows(s, group, config=None) -> bool:
    """dense by rows (:func:`dense_rows_compute`): the output features in blocks of ``rows``
    (:func:`dense_rows_space`), parallel over the blocks (or the batch); per block the rows'
    partial sums accumulated in registers over the reduction (the rows unrolled inside the
    reduction loop, so each block of the input is loaded once for all of them), folded, the
    tail added, and the epilogue applied to the block's outputs as one vector."""
    dense = group.anchor_tensors[0].op
    if len(group.outputs) != 1:
        return False
    out = group.outputs[0]
    if tuple(out.shape) != tuple(dense.output.shape):
        return False
    stages, tail, partial = [], None, None
    pending = [t.op for t in dense.inputs]
    while pending:
        op = pending.pop()
        if op.name == "dense_tail":
            tail = op
        elif op.name.startswith("dense_fold"):
            stages.append(op)
            pending.extend(t.op for t in op.inputs)
        elif op.name == "dense_rows_partial":
            partial = op
    if partial is None:
        return False
    features = int(out.shape[-1])
    rows = config["rows"] if config else dense_rows_default(features)
    if features % rows:
        return False
    out_stage = s[out]
    axes = list(out.op.axis)
    block, row = out_stage.split(axes[-1], rows)
    batch = [a for a in axes[:-1]]
    if rows > 1:
        out_stage.vectorize(row)
    if _work(partial) >= DENSE_ROWS_PARALLEL_MIN_WORK:
        busy = [a for a in batch if a.extent > 1]
        out_stage.parallel(busy[0] if busy else block)
    if out.op is not dense and not s[dense].inlined:
        s[dense].compute_at(out_stage, block)
        s[dense].vectorize(dense.axis[-1])
    stage = s[partial]
    stage.compute_at(out_stage, block)
    *outer, n, lane = partial.axis
    stage.reorder(*outer, *partial.reduce_axis, n, lane)
    stage.unroll(n)
    stage.vectorize(lane)
    for op in stages:
        fold = s[op]
        fold.compute_at(out_stage, block)
        *_, n, lane = op.axis
        fold.unroll(n)
        fold.vectorize(lane)
    if tail is not None:
        stage = s[tail]
        stage.compute_at(out_stage, block)
        *outer, n = tail.axis
        stage.reorder(*outer, *tail.reduce_axis, n)
        stage.unroll(n)
    return True


def _schedule_conv_nchw(s, group, keep) -> bool:
    """conv2d in NCHW x OIHW (plain or depthwise), as at opt_level 0 before AlterOpLayout: a
    register tile of ``oc_tile`` output channels x ``width`` output columns (the columns in vector
    lanes, each input vector shared by the channels, each weight broadcast), the reduction
    outside the tile, the padded input computed first."""
    conv_t = group.anchor_tensors[0]
    outputs = list(group.outputs)
    if len(outputs) != 1 or tuple(outputs[0].shape) != tuple(conv_t.shape):
        return False
    conv = conv_t.op
    if outputs[0].op is conv:
        local = s.cache_write(conv_t).op
        out_stage = s[conv_t]
    else:
        local = conv
        out_stage = s[outputs[0]]
    n, oc, oh, ow = out_stage.op.axis
    oc_tile = max(d for d in range(1, min(oc.extent, 8) + 1) if oc.extent % d == 0)
    width = max(d for d in range(1, min(ow.extent, lanes(conv_t.dtype)) + 1)
                if ow.extent % d == 0)
    oc_outer, oc_inner = out_stage.split(oc, oc_tile)
    ow_outer, ow_inner = out_stage.split(ow, width)
    out_stage.reorder(n, oc_outer, oh, ow_outer, oc_inner, ow_inner)
    out_stage.vectorize(ow_inner)
    if _work(local) >= PARALLEL_MIN_WORK:
        out_stage.parallel(n if n.extent > 1 else out_stage.fuse(oc_outer, oh))
    stage = s[local]
    stage.compute_at(out_stage, ow_outer)
    cn, coc, coh, cow = local.axis
    stage.reorder(cn, coh, *local.reduce_axis, coc, cow)
    stage.unroll(coc)
    stage.vectorize(cow)
    for pad in keep:   # the padded input is computed once, before the convolution
        schedule_injective(s, pad)
    return True
