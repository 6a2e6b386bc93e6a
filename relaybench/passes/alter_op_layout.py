"""AlterOpLayout: every operator in the layouts the target's kernels want (Relay's
``alter_op_layout.cc``), driven by the ``FTVMAlterOpLayout`` attributes registered for the target.

**The registry.** For each call whose operator has an ``FTVMAlterOpLayout`` registration for the
current target (:func:`relaybench.op.register_alter_op_layout`; the registration of the highest
level wins, see :mod:`relaybench.op.registry`), the pass calls it as Relay does::

    fn(attrs, inputs, tinfos, out_type) -> None | dict | Call

``attrs`` are the call's attributes, ``inputs`` its arguments, ``tinfos`` their types and
``out_type`` the call's type, all as in the original program. The function returns ``None`` to
keep the call, a dict of the attributes to change (``{"data_layout": "NCHW16c", ...}``), or a new
call built on ``inputs`` (``rb.op.nn.conv2d(*inputs, **new_attrs)``, or another operator). The
layout rules (``FInferCorrectLayout``) of the new call's operator then say which layout each
input must come in, and of every following operator how the new layout carries through; a
``layout_transform`` is inserted where two layouts meet (see
:mod:`relaybench.passes._layout_rules`).

**The target.** The current target is the PassContext's ``config["relay.target"]`` (a target
string, a kind or a Target; ``rb.build`` sets it), ``llvm`` when none is given. Its strategy module
is imported first, since that is where a target registers its policies. For ``llvm`` that is
:func:`x86_conv2d_layouts`, the ``FTVMAlterOpLayout`` of ``nn.conv2d`` at level 0, described
below; a user's registration at a higher level (the default, 10) replaces it:

>>> import relaybench as rb
>>> from relaybench import op
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(1, 8, 4, 4), float32], %w: Tensor[(8, 8, 1, 1), float32]) {
...   nn.conv2d(%x, %w, channels=8, kernel_size=[1, 1])
... }''')
>>> def nhwc(attrs, inputs, tinfos, out_type):
...     return op.nn.conv2d(*inputs, **dict(attrs, data_layout="NHWC", kernel_layout="HWIO"))
>>> with op.attr_scope(), rb.PassContext(opt_level=3):
...     _ = op.register_alter_op_layout("nn.conv2d", nhwc, level=11)
...     print(AlterOpLayout()(mod)["main"].body.astext(show_types=False))
free_var %x: Tensor[(1, 8, 4, 4), float32];
free_var %w: Tensor[(8, 8, 1, 1), float32];
%0 = layout_transform(%x, src_layout="NCHW", dst_layout="NHWC");
%1 = layout_transform(%w, src_layout="OIHW", dst_layout="HWIO");
%2 = nn.conv2d(%0, %1, channels=8, kernel_size=[1, 1], data_layout="NHWC", kernel_layout="HWIO");
layout_transform(%2, src_layout="NHWC", dst_layout="NCHW")

**The x86 policy.** On a CPU a convolution runs fastest on *blocked* layouts: the data
``NCHW{x}c`` (channels in blocks of ``x``, innermost, so a vector register holds ``x`` channels of
one pixel), the kernel ``OIHW{x}i{y}o`` and the output ``NCHW{y}c``. The policy gives every
``nn.conv2d`` in ``NCHW`` / ``OIHW`` those layouts and lets the operators' layout rules carry the
new layout through what follows (ReLU, the batch-norm arithmetic, residual additions,
pooling...), so a ``layout_transform`` appears only where a layout-sensitive operator needs the
original order (``nn.batch_flatten`` not followed by a dense layer, see below) and at the
function's entry and exit. The kernels'
transforms are ``layout_transform`` calls on the weights, which FoldConstant folds once the
weights are bound constants.

**A dense layer after a flatten.** ``nn.dense(nn.batch_flatten(layout_transform(x, NCHW16c ->
NCHW)), W)`` with constant weights (a classifier after blocked convolutions) becomes
``nn.dense(nn.batch_flatten(x), W')``: the flattened blocked tensor holds the same features
per row in another order, so ``W``'s columns are put in that order once, at compile time, and
the transform back to NCHW, a gather of every element, is gone (:class:`FoldFlattenIntoDense`;
the DQN's 3136 features: 8 us -> a 1 us copy). A ``reshape`` to ``(N, features)`` is matched
too; weights that are not a constant, or larger than ``FOLD_FLATTEN_MAX_BYTES`` (64 MB), keep
the transform.

**Block sizes.** ``x`` is the largest divisor of the input channels not above ``max_block`` and
``y`` the largest divisor of the output channels not above it (``max_block``, the pass's option
that the policy reads through :func:`current_max_block`, is the SIMD width in float32 lanes: 16
for AVX-512, the default, 8 for AVX2). This is the x86 default of Relay's schedules; it gives 16
for every power-of-two channel count from 16 up. Because the block of a channel count depends
on that count alone, a convolution's output block is always the next convolution's input
block, and no transform is needed between them. One exception: a float convolution of a few
input channels and a large window (the DQN's first layer, see :func:`reads_input_as_is`) reads
``NCHW1c``, which is ``NCHW`` itself, so the input is read where it is: the transform to it
moves nothing, and becomes a ``reshape`` (:func:`transforms_as_reshapes`, run at the end of the
pass), which the graph executor runs as a view, no copy. An RGB image under a 3x3 or 7x7
window keeps ``NCHW3c``.

**Images as one row.** An operator may register ``FFlattenImage``, ``fn(attrs, tinfos,
out_type) -> bool``: whether the call, once in its blocked layouts, runs better on its image
as one row of ``H * W`` pixels (:func:`flatten_images`, run at the end of the pass). A 1x1
stride-1 convolution computes each pixel from the same pixel of its input, so
``(N, C, H, W, c)`` and ``(N, C, 1, H * W, c)`` are the same computation on the same memory,
and its register tiles may then take any number of pixels, not only a divisor of the width. The
x86 policy asks for it on hosts without AVX-512, where the 16 registers hold a tile of 6
pixels by 16 channels and no divisor of a width of 7, 14, 28 or 56 makes such a tile.

**Grouped convolutions.** A depthwise convolution (``groups`` equal to the input channels) is
blocked like the others, its kernel ``OIHW1i{y}o`` (one input channel per group). Other grouped
convolutions keep ``NCHW``, as Relay's x86 schedules do; the layout is transformed back around
them. ``nn.dense`` is left as it is.

>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(32, 3, 3, 3), float32]) {
...   %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=32, kernel_size=[3, 3]);
...   %1 = nn.relu(%0);
...   nn.max_pool2d(%1, pool_size=[2, 2], strides=[2, 2])
... }''')
>>> with rb.PassContext(opt_level=3):
...     out = AlterOpLayout()(mod)
>>> print(out["main"].astext(show_types=False))
fn (%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(32, 3, 3, 3), float32]) -> Tensor[(1, 32, 4, 4), float32] {
  %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NCHW3c");
  %1 = layout_transform(%w, src_layout="OIHW", dst_layout="OIHW3i16o");
  %2 = nn.conv2d(%0, %1, padding=[1, 1, 1, 1], channels=32, kernel_size=[3, 3], data_layout="NCHW3c", kernel_layout="OIHW3i16o", out_layout="NCHW16c");
  %3 = nn.relu(%2);
  %4 = nn.max_pool2d(%3, pool_size=[2, 2], strides=[2, 2], layout="NCHW16c");
  layout_transform(%4, src_layout="NCHW16c", dst_layout="NCHW")
}
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Optional

import numpy as np

from ..ir.expr import Constant
from ..ir.layout import Layout
from ..ir.types import TensorType
from ..op.registry import get_op_attr
from ._layout_rules import rewrite_layouts
from .dataflow_pattern import DFPatternCallback, is_constant, is_op, rewrite, wildcard
from .infra import module_pass, rewrite_each_function
from .legalize import current_target, registered_for

__all__ = ["AlterOpLayout", "channel_block", "int8_channel_block", "register_channel_block",
           "x86_conv2d_layouts", "current_max_block"]

_MAX_BLOCK: ContextVar = ContextVar("alter_op_layout_max_block", default=16)


def current_max_block() -> int:
    """The ``max_block`` option of the AlterOpLayout running now (16 outside one): the SIMD
    width, in float32 lanes, that a target's layout policy blocks channels for."""
    return _MAX_BLOCK.get()


def channel_block(channels: int, max_block: int = 16) -> int:
    """The block size of ``channels``: its largest divisor not above ``max_block``.

    >>> channel_block(64), channel_block(3), channel_block(24), channel_block(7, 8)
    (16, 3, 12, 7)
    """
    for b in range(min(max_block, channels), 0, -1):
        if channels % b == 0:
            return b
    return 1


def int8_channel_block(channels: int, max_block: int = 16) -> int:
    """The block size of ``channels`` for an 8-bit convolution: the largest power of two from 4
    to ``max_block`` that divides it, so that every block is whole ``vpdpbusd`` steps of 4 input
    channels and whole registers of int32 accumulators (24 channels: blocks of 8, where
    :func:`channel_block` would take 12 lanes, three quarters of a register); the float rule
    when none divides.

    >>> int8_channel_block(64), int8_channel_block(24), int8_channel_block(4), int8_channel_block(6)
    (16, 8, 4, 6)
    """
    b = max_block
    while b >= 4:
        if channels % b == 0:
            return b
        b //= 2
    return channel_block(channels, max_block)


def register_channel_block(channels: int, max_block: int = 16, register: int = 0) -> int:
    """:func:`channel_block`, but whole registers of ``register`` lanes where ``channels`` allows
    it: the largest multiple of ``register`` up to ``max_block`` that divides ``channels``. On a
    host whose registers hold 8 floats, 24 channels make 3 blocks of 8 rather than 2 of 12 (a
    register and a half, whose tiles the 16 registers fit badly).

    >>> register_channel_block(24), register_channel_block(24, 16, 8), register_channel_block(48, 16, 8)
    (12, 8, 16)
    >>> register_channel_block(3, 16, 8), register_channel_block(20, 16, 8)
    (3, 10)
    >>> register_channel_block(24, 4, 8)     # no multiple of 8 up to 4
    4
    """
    block = channel_block(channels, max_block)
    if 0 < register <= max_block and block % register and channels % register == 0:
        block = max(b for b in range(register, max_block + 1, register) if channels % b == 0)
    return block


def x86_conv2d_layouts(attrs, inputs, tinfos, out_type, max_block: Optional[int] = None,
                       register: int = 0) -> Optional[dict]:
    """The x86 ``FTVMAlterOpLayout`` of ``nn.conv2d``: the blocked layouts for one call (the
    attributes to change), or None to leave it. ``max_block`` defaults to the running pass's
    option (:func:`current_max_block`); float blocks are whole registers of ``register`` lanes
    where the channels allow it (:func:`register_channel_block`; 0: any divisor)."""
    if max_block is None:
        max_block = current_max_block()
    if (attrs["data_layout"] != "NCHW" or attrs["kernel_layout"] != "OIHW"
            or attrs["out_layout"] not in ("", "NCHW")):
        return None
    data, weight = tinfos
    if not (isinstance(data, TensorType) and isinstance(weight, TensorType)
            and data.is_static and weight.is_static):
        return None
    in_channels, out_channels = data.shape[1], weight.shape[0]
    groups = attrs["groups"]
    if str(data.dtype) in ("int8", "uint8") and str(weight.dtype) in ("int8", "uint8"):
        ic, oc = int8_channel_block(in_channels, max_block), int8_channel_block(out_channels, max_block)
    else:
        ic = register_channel_block(in_channels, max_block, register)
        oc = register_channel_block(out_channels, max_block, register)
    if groups == 1:
        from ..ir.expr import Constant
        tile = winograd_tile(attrs, data, weight, out_type, ic, oc,
                             constant_weight=isinstance(inputs[1], Constant))
        if tile:
            return _winograd_call(inputs, attrs, tile, ic, oc)
        if reads_input_as_is(in_channels, weight.shape[2:], str(data.dtype)):
            ic = 1      # NCHW1c is NCHW: the data is read as it comes
        kernel = f"OIHW{ic}i{oc}o"
    elif groups == in_channels and out_channels % in_channels == 0:
        kernel = f"OIHW1i{oc}o"          # depthwise: one input channel per group
    else:
        return None
    return {"data_layout": f"NCHW{ic}c", "kernel_layout": kernel, "out_layout": f"NCHW{oc}c"}


SMALL_INPUT_CHANNELS = 4
"""See :func:`reads_input_as_is`."""

SMALL_INPUT_MIN_WINDOW = 64
"""See :func:`reads_input_as_is`."""


def reads_input_as_is(in_channels: int, kernel_size, dtype: str) -> bool:
    """Whether a float convolution reads its data in ``NCHW1c``, which is ``NCHW`` itself: at
    most :data:`SMALL_INPUT_CHANNELS` input channels (a network's first layer) and a window of
    at least :data:`SMALL_INPUT_MIN_WINDOW` taps. The network's input then needs no transform
    (the ``layout_transform`` to ``NCHW1c`` moves nothing: AlterOpLayout makes it a ``reshape``,
    which the graph executor runs as a view of the input).

    Measured on the 2-core AMD EPYC (Zen 4), the kernel in ``NCHW1c`` against ``NCHW{c}c``
    plus the transform: the DQN's 8x8 stride-4 layer on 4 frames 0.062 ms against 0.066 +
    0.014 ms (the run at two threads 0.14-0.17 ms instead of 0.15-0.25 ms, with the input read
    in place); ResNet-18's 7x7 layer on RGB 2.29 ms against 2.16 + 0.05 ms at one thread, 1.19
    against 1.10 + 0.04 at two; VGG-16's and MobileNet V2's 3x3 layers 1.82 against 1.68 +
    0.05 ms and 0.43 against 0.28 + 0.05 ms. A pixel's channels fill a quarter of a vector at
    most either way; a small window's kernel pays for reading them from separate planes.

    >>> reads_input_as_is(4, (8, 8), "float32"), reads_input_as_is(3, (7, 7), "float32")
    (True, False)
    """
    window = 1
    for k in kernel_size:
        window *= int(k)
    return in_channels <= SMALL_INPUT_CHANNELS and window >= SMALL_INPUT_MIN_WINDOW \
        and dtype == "float32"


WINOGRAD_MODES = ("auto", "on", "off", "2", "4")
"""The values of ``RB_WINOGRAD``."""


def winograd_mode() -> str:
    """``RB_WINOGRAD``, checked."""
    from .. import config
    mode = str(config.get("RB_WINOGRAD")).strip().lower()
    if mode not in WINOGRAD_MODES:
        raise ValueError(f"RB_WINOGRAD={mode!r}: expected one of {', '.join(WINOGRAD_MODES)}")
    return mode


def winograd_tile(attrs, data, weight, out_type, ic: int, oc: int,
                  constant_weight: bool = True) -> int:
    """The Winograd tile size for an ``nn.conv2d`` call (0: the direct convolution), by
    ``RB_WINOGRAD`` and the rule that ``bench/winograd.py`` measured (see the module text).

    Only float32 3x3 convolutions of stride 1, dilation 1 and one group qualify, with channel
    blocks of at least 8 lanes (the matrix products are vectorized over output channels and the
    transforms over input channels). ``auto`` takes F(4x4, 3x3) where the weight is a constant
    (its transform is then folded at compile time), the input and the output have at least
    :data:`WINOGRAD_MIN_CHANNELS` channels and the output at least :data:`WINOGRAD_MIN_SIZE`
    rows and columns, and the direct convolution elsewhere; ``on`` every qualifying call,
    F(4x4) when the output is at least 8 wide, else F(2x2); ``2`` and ``4`` force a tile.

    The rule follows ``bench/winograd.py`` on one thread of an idle AVX-512 machine: F(4x4)
    took 0.3-0.7x the direct kernel's time on every ResNet-18 and VGG-16 layer (ResNet-18's
    64 -> 64 at 56x56: 0.64 ms against 2.01 ms), and also on smaller ones down to 16 channels
    and 7x7 outputs, where the gain is small against its compile time; F(2x2) fell in between.
    Measured one layer at a time, its weights stayed in the cache; in the network they do not,
    and outputs below 28x28 with large weights take F(2x2) (:data:`WINOGRAD_F4_MAX_WEIGHT_BYTES`).

    >>> attrs = {"kernel_size": (3, 3), "strides": (1, 1), "dilation": (1, 1), "groups": 1}
    >>> from relaybench.ir.types import TensorType
    >>> x, w = TensorType((1, 128, 112, 112), "float32"), TensorType((128, 128, 3, 3), "float32")
    >>> winograd_tile(attrs, x, w, TensorType((1, 128, 112, 112), "float32"), 16, 16)
    4
    >>> x, w = TensorType((1, 32, 56, 56), "float32"), TensorType((32, 32, 3, 3), "float32")
    >>> winograd_tile(attrs, x, w, TensorType((1, 32, 56, 56), "float32"), 16, 16)
    0
    >>> x, w = TensorType((1, 512, 7, 7), "float32"), TensorType((512, 512, 3, 3), "float32")
    >>> winograd_tile(attrs, x, w, TensorType((1, 512, 7, 7), "float32"), 16, 16)
    2
    """
    mode = winograd_mode()
    if mode == "off":
        return 0
    kh, kw = (int(d) for d in weight.shape[2:])
    if (kh, kw) != (3, 3) or tuple(attrs["strides"]) != (1, 1) or tuple(attrs["dilation"]) != (1, 1) \
            or attrs["groups"] != 1 or min(ic, oc) < 8 or not isinstance(out_type, TensorType) \
            or not all(str(t.dtype) == "float32" for t in (data, weight, out_type)):
        return 0
    oh, ow = int(out_type.shape[2]), int(out_type.shape[3])
    if mode in ("2", "4"):
        return int(mode)
    if mode == "on":
        return 4 if min(oh, ow) >= 8 else 2
    in_channels, out_channels = int(data.shape[1]), int(out_type.shape[1])
    if constant_weight and min(in_channels, out_channels) >= WINOGRAD_MIN_CHANNELS \
            and min(oh, ow) >= WINOGRAD_MIN_SIZE:
        if min(oh, ow) < WINOGRAD_F4_MIN_SIZE and \
                36 * in_channels * out_channels * 4 > WINOGRAD_F4_MAX_WEIGHT_BYTES:
            return 2
        return 4
    return 0


WINOGRAD_MIN_CHANNELS = 64
"""``RB_WINOGRAD=auto``: the fewest input and output channels for which Winograd is taken (it
wins below too, by less, and each Winograd kernel takes about a second of LLVM's time to
compile)."""

WINOGRAD_MIN_SIZE = 7
"""``RB_WINOGRAD=auto``: the smallest output height and width for which Winograd is taken."""

WINOGRAD_F4_MIN_SIZE = 28
WINOGRAD_F4_MAX_WEIGHT_BYTES = 16 << 20
"""``RB_WINOGRAD=auto``: below an output of :data:`WINOGRAD_F4_MIN_SIZE` rows and columns,
F(2x2, 3x3) where F(4x4)'s transformed weights (36 values per input and output channel, 4x
the direct kernel's) would exceed this many bytes, half the 32 MB last-level cache of the AMD
EPYCs measured. Few output tiles use each weight few times (a 7x7 output has 4 tiles of 4x4),
and in the network weights larger than that cache come from memory on every run: ResNet-18's
512-channel 7x7 layers have 38 MB each. There (AVX-512), ResNet-18 in one process, the two
rules alternating: one thread 25.7 -> 23.9 ms (the 7x7 layers 2.75-2.89 -> 2.13-2.14 ms a
call), two threads 16.7 -> 15.0 ms; VGG-16's 14x14 layers 2.94 -> 2.83 ms a call. Its
256-channel 14x14 layers (9.4 MB) keep F(4x4): a bound of 4 MB gave them F(2x2), and raising
it to 16 MB made ResNet-18 0.94x the time at one thread and 0.95x at two (AMD EPYC without
AVX-512, one process, the two rules alternating, each built first once); one such layer
alone with the caches flushed took 3.2 ms in F(4x4) against 3.6 ms in F(2x2). The DQN's
64-channel 7x7 layer (0.6 MB of weights) keeps F(4x4)."""


def _winograd_call(inputs, attrs, tile: int, ic: int, oc: int):
    """``nn.conv2d`` as the Winograd convolution of its weight's transform (blocked ``HWOI{oc}o``,
    folded at compile time when the weight is a constant), data and output blocked."""
    from ..op import layout_transform
    from ..op.winograd import (contrib_conv2d_winograd_weight_transform,
                               contrib_conv2d_winograd_without_weight_transform)
    data, weight = inputs
    transformed = layout_transform(contrib_conv2d_winograd_weight_transform(weight, tile_size=tile),
                                   src_layout="HWOI", dst_layout=f"HWOI{oc}o")
    keep = {k: attrs[k] for k in ("padding", "channels", "kernel_size", "out_dtype")}
    return contrib_conv2d_winograd_without_weight_transform(
        data, transformed, tile_size=tile, data_layout=f"NCHW{ic}c", kernel_layout=f"HWOI{oc}o",
        out_layout=f"NCHW{oc}c", **keep)


def _hook(fn):
    """The rewriter's hook calling a registered ``FTVMAlterOpLayout`` with Relay's arguments."""
    def hook(call, types, layouts):
        return fn(call.attrs, list(call.args), [a.checked_type for a in call.args], call.checked_type)
    return hook


def alter_layout_hooks(target) -> dict:
    """Operator name -> rewriter hook, for every operator with an ``FTVMAlterOpLayout`` for
    ``target`` (the target's own policies loaded first)."""
    return {name: _hook(fn) for name, fn in registered_for(target, "FTVMAlterOpLayout").items()}


@module_pass(opt_level=3)
def AlterOpLayout(mod, ctx, *, max_block: int = 16):
    """Put every operator in the layouts the current target's kernels want (its registered
    ``FTVMAlterOpLayout``); on ``llvm``, every NCHW convolution in the blocked layouts of x86
    kernels (NCHW16c, OIHW16i16o).

    With the x86 policy, the data, kernel and output layouts of each ``nn.conv2d`` become
    ``NCHW{x}c``, ``OIHW{x}i{y}o`` and ``NCHW{y}c`` with ``x``, ``y`` the largest divisors of the
    input and output channels not above ``max_block``; the following operators adopt the new
    layout through their layout rules and ``layout_transform`` is inserted only where layouts
    disagree.
    """
    if max_block < 1:
        raise ValueError(f"AlterOpLayout: max_block must be at least 1, got {max_block}")
    hooks = alter_layout_hooks(current_target(ctx))
    if not hooks:
        return mod
    token = _MAX_BLOCK.set(max_block)
    try:
        out = rewrite_layouts(mod, hooks)
    finally:
        _MAX_BLOCK.reset(token)
    return flatten_images(transforms_as_reshapes(fold_flatten_into_dense(out)),
                          current_target(ctx))


MOVES_NOTHING_MAX_ELEMENTS = 1 << 22
"""The largest tensor whose ``layout_transform`` :func:`moves_nothing` checks (it transforms an
index array of the tensor's size); a larger one keeps its transform."""


def moves_nothing(src_layout: str, dst_layout: str, shape) -> bool:
    """Whether ``layout_transform`` from ``src_layout`` to ``dst_layout`` leaves every element
    of a tensor of ``shape`` where it is in memory (only axes of extent 1 move), so that it is
    a ``reshape``. Checked on an index array; tensors over :data:`MOVES_NOTHING_MAX_ELEMENTS`
    elements, or of unknown shape, answer False.

    >>> moves_nothing("NCHW", "NCHW1c", (1, 4, 84, 84)), moves_nothing("NCHW", "NCHW4c", (1, 4, 8, 8))
    (True, False)
    >>> moves_nothing("NCHW16c", "NCHW", (1, 1, 7, 7, 16)), moves_nothing("NCHW", "NHWC", (2, 1, 3, 3))
    (False, True)
    """
    if not all(isinstance(d, (int, np.integer)) for d in shape):
        return False
    size = int(np.prod(shape, dtype=np.int64))
    if size > MOVES_NOTHING_MAX_ELEMENTS:
        return False
    src = Layout(src_layout)
    if src.is_undef or Layout(dst_layout).is_undef:
        return False
    shape = tuple(int(d) for d in shape)
    try:
        dst_shape = tuple(int(d) for d in src.convert_shape(shape, dst_layout))
    except ValueError:
        return False
    # the axes of extent above 1, by name, must come in the same order (a cheap refusal of
    # most transforms, the weights' among them, before the index array is made)
    if _named_axes(src_layout, shape) != _named_axes(dst_layout, dst_shape):
        return False
    try:
        index = np.arange(size, dtype=np.int64).reshape(shape)
        moved = np.ascontiguousarray(src.transform_array(index, dst_layout))
    except ValueError:
        return False
    return bool(np.array_equal(moved.ravel(), np.arange(size, dtype=np.int64)))


def _named_axes(layout: str, shape) -> list:
    """The upper-case names of ``layout``'s axes whose extent in ``shape`` is not 1, in order,
    with consecutive repeats merged (``NCHW16c`` of ``(1, 2, 7, 7, 16)``: C, H, W, C)."""
    names = [c.upper() for c in layout if c.isalpha()]
    out: list = []
    for name, extent in zip(names, shape):
        if extent != 1 and (not out or out[-1] != name):
            out.append(name)
    return out


def transforms_as_reshapes(mod):
    """``mod`` with each ``layout_transform`` that moves nothing (:func:`moves_nothing`, the
    input's type static) replaced by the ``reshape`` it is (the same module when there is
    none)."""
    from ..ir.functor import ExprMutator
    from ..op import reshape

    class Rewriter(ExprMutator):
        def visit_call(self, call):
            new = super().visit_call(call)
            if getattr(call.op, "name", None) != "layout_transform":
                return new
            ty, out = getattr(call.args[0], "checked_type", None), call.checked_type
            if not isinstance(ty, TensorType) or not isinstance(out, TensorType) or \
                    not ty.is_static or not out.is_static:
                return new
            if not moves_nothing(call.attrs.src_layout, call.attrs.dst_layout, tuple(ty.shape)):
                return new
            return reshape(new.args[0], newshape=[int(d) for d in out.shape])

    return rewrite_each_function(mod, lambda func: Rewriter().visit(func),
                                 ops=("layout_transform",))


def flatten_hooks(target) -> dict:
    """Operator name -> its ``FFlattenImage`` for ``target`` (the target's policies loaded)."""
    return registered_for(target, "FFlattenImage")


def _full_and_flat(ty):
    """``(shape, flat shape)`` of a static rank-5 blocked image type ``(N, C, H, W, c)`` with
    ``H > 1``; None otherwise."""
    if not isinstance(ty, TensorType) or not ty.is_static or len(ty.shape) != 5:
        return None
    shape = tuple(int(d) for d in ty.shape)
    if shape[2] <= 1:
        return None
    return shape, (shape[0], shape[1], 1, shape[2] * shape[3], shape[4])


def _pixelwise(call) -> bool:
    """Whether ``call`` computes each element from the elements at the same place (an
    elementwise or broadcast operator whose attributes name no axis but the channels)."""
    from ..op.registry import OpPattern
    pattern = get_op_attr(call.op, "TOpPattern")
    if pattern is None or int(pattern) > OpPattern.BROADCAST:
        return False
    for key, value in dict(call.attrs).items():
        if "layout" in key or "shape" in key or "axes" in key:
            return False
        if "axis" in key and value not in (1, -4):
            return False
    return True


def flatten_images(mod, target):
    """``mod`` with each call whose operator's ``FFlattenImage`` (for ``target``) says so computed
    on its image as one row: ``f(x, w)`` of type ``(N, O, H, W, o)`` becomes ``reshape(f(x', w),
    (N, O, H, W, o))`` with ``x'`` the ``(N, C, 1, H * W, c)`` view of ``x``. The one-row form
    then carries through the pixelwise operators that follow (a bias, a clip, a residual
    addition: their other operands reshaped the same way when they have the full shape, kept
    when they broadcast over the image) and into the next such call, so that a fused group is
    one-row throughout and a ``reshape`` stands only where a row meets an operator that needs
    the image (a depthwise convolution, a pool): a view, no copy. The same module when no
    call asks for it."""
    from ..ir.expr import Call
    from ..ir.functor import ExprMutator
    from ..op import reshape

    hooks = flatten_hooks(target)
    if not hooks:
        return mod

    class Rewriter(ExprMutator):
        def __init__(self):
            super().__init__()
            # id(reshape back to the image) -> (that reshape, the row, the image's shape)
            self.flat = {}
            self.rows = {}      # id(image) -> (the image, its reshape to a row)

        def row_of(self, arg, ty, shapes):
            """``arg`` as one row of the image ``shapes`` (full, flat), or None."""
            full, flat = shapes
            known = self.flat.get(id(arg))
            if known is not None:
                return known[1] if known[2][2:4] == full[2:4] else None
            if tuple(int(d) for d in ty.shape) == full:
                made = self.rows.get(id(arg))
                if made is None:    # one reshape of a value, however many read it as a row
                    made = self.rows[id(arg)] = (arg, reshape(arg, newshape=list(flat)))
                return made[1]
            return None

        def back(self, row, full):
            out = reshape(row, newshape=list(full))
            self.flat[id(out)] = (out, row, full)
            return out

        def visit_call(self, call):
            new = super().visit_call(call)
            name = getattr(call.op, "name", None)
            if name is None or not isinstance(new, Call):
                return new
            hook = hooks.get(name)
            if hook is not None and len(call.args) == 2:
                shapes = _full_and_flat(call.args[0].checked_type)
                out = _full_and_flat(call.checked_type)
                if shapes and out and shapes[0][2:4] == out[0][2:4] and hook(
                        call.attrs, [a.checked_type for a in call.args], call.checked_type):
                    row = self.row_of(new.args[0], call.args[0].checked_type, shapes)
                    return self.back(Call(new.op, (row, new.args[1]), new.attrs,
                                          new.type_args), out[0])
                return new
            if not any(id(a) in self.flat for a in new.args) or not _pixelwise(call):
                return new
            out = _full_and_flat(call.checked_type)
            if out is None:
                return new
            args = []
            for arg, old in zip(new.args, call.args):
                ty = old.checked_type
                if not isinstance(ty, TensorType) or not ty.is_static:
                    return new
                row = self.row_of(arg, ty, out)
                if row is None:
                    # kept as it is when it broadcasts over the image: extent 1 where H and W are
                    if any(int(d) != 1 for d in ty.shape[-3:-1]):
                        return new
                    row = arg
                args.append(row)
            return self.back(Call(new.op, tuple(args), new.attrs, new.type_args), out[0])

    return rewrite_each_function(mod, lambda func: Rewriter().visit(func), ops=tuple(hooks))


FOLD_FLATTEN_MAX_BYTES = 64 << 20
"""The largest dense weights :class:`FoldFlattenIntoDense` permutes."""


class FoldFlattenIntoDense(DFPatternCallback):
    """``nn.dense(flatten(layout_transform(x, S -> D)), W)`` with ``W`` a constant becomes
    ``nn.dense(nn.batch_flatten(x), W')``, ``W'`` being ``W`` with its columns in the order
    ``x``'s layout holds the elements (``flatten`` is ``nn.batch_flatten`` or a ``reshape`` to
    ``(N, features)``). Each row of the flattened ``x`` in layout ``S`` holds the same features
    as the row in layout ``D``, permuted: the dot products are the same sums in another order,
    and the transform back to ``D`` (a gather of every element) is gone. A classifier's dense
    layer after blocked convolutions then reads their output as it is (the DQN's 3136 x 512
    layer, ResNet-18's and MobileNet V2's after their global pool).

    Weights over :data:`FOLD_FLATTEN_MAX_BYTES` keep the transform: permuting them is a copy
    of all of them at every build that runs the passes (VGG-16's first dense layer, 411 MB:
    about 1 s on the 2-core virtual machine measured, where a fresh array fills at
    0.4 GB/s), to save a transform of the activations (25,088 floats there, about 50 us of a
    run of 85-150 ms)."""

    def __init__(self):
        super().__init__(require_type=True)
        self.x = wildcard()
        self.transform = is_op("layout_transform")(self.x)
        self.flat = is_op("nn.batch_flatten")(self.transform) | is_op("reshape")(self.transform)
        self.weight = is_constant()
        self.pattern = is_op("nn.dense")(self.flat, self.weight)

    def callback(self, pre, post, node_map):
        from .. import op as _op
        flat = node_map.pre[self.flat][0]
        transform = node_map.pre[self.transform][0]
        x_type = getattr(node_map.pre[self.x][0], "checked_type", None)
        flat_type = getattr(flat, "checked_type", None)
        weight = node_map.pre[self.weight][0]
        if not isinstance(x_type, TensorType) or not isinstance(flat_type, TensorType) or \
                not isinstance(weight, Constant):
            return post
        w = weight.data
        if w.ndim != 2 or w.shape[1] != flat_type.shape[-1] or \
                w.nbytes > FOLD_FLATTEN_MAX_BYTES:
            return post
        found = _feature_order(transform, x_type, flat_type)
        if found is None:
            return post
        permuted = Constant.adopt(_permuted_columns(w, transform, *found))
        return _op.nn.dense(_op.nn.batch_flatten(node_map[self.x][0]), permuted,
                            **dict(pre.attrs))


def _permuted_columns(w, transform, order, out_shape):
    """``w[:, order]`` in an array of its own: each row of ``w`` (a tensor in the transform's
    destination layout, flattened) put in the source layout by the same transform, a copy of
    large strides rather than a gather; checked against ``order`` on the first row. Weights
    of a classifier can be hundreds of MB (VGG-16's first dense layer: 411 MB), and a fresh
    array of that size is slow to fill on a virtual machine: one is made, no more."""
    src, dst = Layout(transform.attrs.src_layout), Layout(transform.attrs.dst_layout)
    rows = w.shape[0]
    try:
        moved = dst.transform_array(w.reshape((rows,) + tuple(out_shape[1:])), src.name)
    except ValueError:
        moved = None
    if moved is not None and moved.size == w.size:
        out = np.empty(w.shape, w.dtype)
        out.reshape(moved.shape)[...] = moved
        if np.array_equal(out[0], w[0, order]):
            return out
    return np.take(w, order, axis=1)


def _feature_order(transform, x_type, flat_type):
    """For ``layout_transform`` call ``transform`` from ``x``'s layout, followed by a flatten to
    ``flat_type`` ``(N, F)``: the index, in the flattened transform's row, of each element of a
    row of ``x`` flattened as it is, and the transform's output shape; None when ``x``
    flattened does not hold the same rows."""
    x_shape = tuple(x_type.shape)
    if not all(isinstance(d, int) for d in x_shape) or len(flat_type.shape) != 2 or \
            not all(isinstance(d, int) for d in flat_type.shape):
        return None
    n, features = flat_type.shape
    if not x_shape or x_shape[0] != n:
        return None
    src, dst = Layout(transform.attrs.src_layout), Layout(transform.attrs.dst_layout)
    if src.is_undef or dst.is_undef:
        return None
    try:
        out_shape = src.convert_shape(x_shape, dst.name)
        index = np.arange(int(np.prod(out_shape)), dtype=np.int64).reshape(out_shape)
        back = np.ascontiguousarray(dst.transform_array(index, src.name))
    except ValueError:
        return None
    if back.shape != x_shape:
        return None
    rows = back.reshape(n, -1)
    if rows.shape[1] != features or np.any(rows // features != np.arange(n)[:, None]):
        return None
    order = rows % features
    if np.any(order != order[0]):
        return None
    return order[0], out_shape


def fold_flatten_into_dense(mod):
    """``mod`` with :class:`FoldFlattenIntoDense` applied to each function (the same module
    when it does not apply)."""
    return rewrite_each_function(
        mod, lambda func: rewrite(FoldFlattenIntoDense(), func, mod),
        ops=("layout_transform",))
