"""AlterOpLayout: every convolution in the layout the target's kernels want (Relay's
``alter_op_layout.cc`` with the x86 ``FTVMAlterOpLayout``).

On a CPU a convolution runs fastest on *blocked* layouts: the data ``NCHW{x}c`` (channels in
blocks of ``x``, innermost, so a vector register holds ``x`` channels of one pixel), the kernel
``OIHW{x}i{y}o`` and the output ``NCHW{y}c``. This pass gives every ``nn.conv2d`` in ``NCHW`` /
``OIHW`` those layouts and lets the operators' layout rules carry the new layout through what
follows (ReLU, the batch-norm arithmetic, residual additions, pooling...), so a
``layout_transform`` appears only where a layout-sensitive operator needs the original order
(``nn.batch_flatten``) and at the function's entry and exit. The kernels' transforms are
``layout_transform`` calls on the weights, which FoldConstant folds once the weights are bound
constants.

**Block sizes.** ``x`` is the largest divisor of the input channels not above ``max_block`` and
``y`` the largest divisor of the output channels not above it (``max_block`` is the SIMD width in
float32 lanes: 16 for AVX-512, the default, 8 for AVX2). This is the x86 default of Relay's
schedules; it gives 16 for every power-of-two channel count from 16 up, and 3 for an RGB input
(``NCHW3c``, which is NHWC for the first convolution). Because the block of a channel count depends
on that count alone, a convolution's output block is always the next convolution's input block,
and no transform is needed between them.

**Grouped convolutions.** A depthwise convolution (``groups`` equal to the input channels) is
blocked like the others, its kernel ``OIHW1i{y}o`` (one input channel per group). Other grouped
convolutions keep ``NCHW``, as Relay's x86 schedules do; the layout is transformed back around
them. ``nn.dense`` is left as it is.

>>> import relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(32, 3, 3, 3), float32]) {
...   %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=32, kernel_size=[3, 3]);
...   %1 = nn.relu(%0);
...   nn.max_pool2d(%1, pool_size=[2, 2], strides=[2, 2])
... }''')
>>> with rb.PassContext(opt_level=3):
...     out = AlterOpLayout()(mod)
>>> print(out["main"].astext(show_types=False))
fn (%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(32, 3, 3, 3), float32]) {
  %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NCHW3c");
  %1 = layout_transform(%w, src_layout="OIHW", dst_layout="OIHW3i16o");
  %2 = nn.conv2d(%0, %1, padding=[1, 1, 1, 1], channels=32, kernel_size=[3, 3], data_layout="NCHW3c", kernel_layout="OIHW3i16o", out_layout="NCHW16c");
  %3 = nn.relu(%2);
  %4 = nn.max_pool2d(%3, pool_size=[2, 2], strides=[2, 2], layout="NCHW16c");
  layout_transform(%4, src_layout="NCHW16c", dst_layout="NCHW")
}
"""

from __future__ import annotations

from functools import partial
from typing import Optional

from ..ir.types import TensorType
from ._layout_rules import rewrite_layouts
from .infra import module_pass

__all__ = ["AlterOpLayout", "channel_block", "x86_conv2d_layouts"]


def channel_block(channels: int, max_block: int = 16) -> int:
    """The block size of ``channels``: its largest divisor not above ``max_block``.

    >>> channel_block(64), channel_block(3), channel_block(24), channel_block(7, 8)
    (16, 3, 12, 7)
    """
    for b in range(min(max_block, channels), 0, -1):
        if channels % b == 0:
            return b
    return 1


def x86_conv2d_layouts(call, types, layouts, max_block: int = 16) -> Optional[dict]:
    """The blocked layouts for one ``nn.conv2d`` (the attributes to change), or None to leave it."""
    attrs = call.attrs
    if (attrs["data_layout"] != "NCHW" or attrs["kernel_layout"] != "OIHW"
            or attrs["out_layout"] not in ("", "NCHW")):
        return None
    data, weight = types
    if not (isinstance(data, TensorType) and isinstance(weight, TensorType)
            and data.is_static and weight.is_static):
        return None
    in_channels, out_channels = data.shape[1], weight.shape[0]
    groups = attrs["groups"]
    ic = channel_block(in_channels, max_block)
    oc = channel_block(out_channels, max_block)
    if groups == 1:
        kernel = f"OIHW{ic}i{oc}o"
    elif groups == in_channels and out_channels % in_channels == 0:
        kernel = f"OIHW1i{oc}o"          # depthwise: one input channel per group
    else:
        return None
    return {"data_layout": f"NCHW{ic}c", "kernel_layout": kernel, "out_layout": f"NCHW{oc}c"}


@module_pass(opt_level=3)
def AlterOpLayout(mod, ctx, *, max_block: int = 16):
    """Put every NCHW convolution in the blocked layouts of x86 kernels (NCHW16c, OIHW16i16o).

    The data, kernel and output layouts of each ``nn.conv2d`` become ``NCHW{x}c``,
    ``OIHW{x}i{y}o`` and ``NCHW{y}c`` with ``x``, ``y`` the largest divisors of the input and
    output channels not above ``max_block``; the following operators adopt the new layout through
    their layout rules and ``layout_transform`` is inserted only where layouts disagree.
    """
    if max_block < 1:
        raise ValueError(f"AlterOpLayout: max_block must be at least 1, got {max_block}")
    return rewrite_layouts(mod, {"nn.conv2d": partial(x86_conv2d_layouts, max_block=max_block)})
