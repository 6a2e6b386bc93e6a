"""Relay v0.14's operators that relaybench does not define yet, each with a word on why.

:data:`RELAY_MISSING` names every operator of Relay's core set (``python/tvm/relay/op``: tensor,
transform, reduce, algorithm, nn, image, vision, annotation; not the ``dyn.*``, ``qnn.*``,
``memory.*`` and ``vm.*`` namespaces, which belong to the VM and the quantizer) that the registry
lacks. The word says why:

* ``math`` — an elementwise function whose kernel needs an intrinsic the kernel layer lacks;
* ``training`` — a gradient or loss operator, used only when training;
* ``sparse`` — sparse tensors, out of scope;
* ``vision`` — detection pre/post-processing (boxes, NMS), data-dependent;
* ``dynamic`` — an output shape that depends on values (``unique``, ``argwhere``);
* ``variant`` — a schedule-specific variant of an op relaybench has (winograd, NCHWc, gemm),
  which its strategies produce from the plain op instead;
* ``niche`` — rarely used by CNN, RNN or transformer models; not yet done;
* ``device`` — heterogeneous placement and memory planning, not modelled;
* ``bitserial`` — low-bit packed kernels.

>>> from relaybench.op import _relay_ops
>>> "nn.conv3d" in _relay_ops.RELAY_MISSING
False
>>> _relay_ops.RELAY_MISSING["log10"]
'math'
"""

from __future__ import annotations

__all__ = ["RELAY_MISSING", "missing"]

RELAY_MISSING: dict = {
    # elementwise math
    "log2": "math", "log10": "math", "fast_exp": "math", "fast_tanh": "math",
    "fast_erf": "math", "fixed_point_multiply": "niche",
    # transforms
    "strided_set": "niche", "meshgrid": "niche", "reverse_sequence": "niche",
    "sequence_mask": "niche", "matrix_set_diag": "niche", "adv_index": "niche",
    "unravel_index": "niche", "sparse_to_dense": "sparse",
    "searchsorted": "niche", "trilu": "niche", "stft": "niche", "invert_permutation": "niche",
    "argwhere": "dynamic", "unique": "dynamic", "auto_scheduler_layout_transform": "variant",
    "meta_schedule_layout_transform": "variant",
    # nn
    "nn.fast_softmax": "math", "nn.space_to_batch_nd": "niche", "nn.batch_to_space_nd": "niche",
    "nn.correlation": "niche", "nn.dilate": "niche", "nn.fifo_buffer": "niche",
    "nn.deformable_conv2d": "niche", "nn.cross_entropy": "training",
    "nn.cross_entropy_with_logits": "training", "nn.nll_loss": "training",
    "nn.conv2d_backward_weight": "training", "nn.max_pool2d_grad": "training",
    "nn.avg_pool2d_grad": "training", "nn.sparse_dense": "sparse", "nn.sparse_transpose": "sparse",
    "nn.sparse_add": "sparse", "nn.sparse_conv2d": "sparse",
    "nn.internal.sparse_dense_padded": "sparse", "nn.bitpack": "bitserial",
    "nn.bitserial_conv2d": "bitserial", "nn.bitserial_dense": "bitserial",
    "nn.contrib_conv2d_winograd_nnpack_weight_transform": "variant",
    "nn.contrib_conv2d_gemm_without_weight_transform": "variant",
    "nn.contrib_conv2d_gemm_weight_transform": "variant",
    "nn.contrib_conv3d_winograd_without_weight_transform": "variant",
    "nn.contrib_conv3d_winograd_weight_transform": "variant", "nn.contrib_conv2d_NCHWc": "variant",
    "nn.contrib_depthwise_conv2d_NCHWc": "variant", "nn.contrib_dense_pack": "variant",
    # image
    "image.crop_and_resize": "niche", "image.dilation2d": "niche", "image.affine_grid": "niche",
    "image.grid_sample": "niche",
    # vision
    "vision.multibox_prior": "vision", "vision.multibox_transform_loc": "vision",
    "vision.get_valid_counts": "vision", "vision.non_max_suppression": "vision",
    "vision.all_class_non_max_suppression": "vision", "vision.roi_align": "vision",
    "vision.roi_pool": "vision", "vision.proposal": "vision", "vision.yolo_reorg": "vision",
    # annotation and placement
    "on_device": "device", "device_copy": "device", "annotation.checkpoint": "training",
    "annotation.compiler_begin": "device", "annotation.compiler_end": "device",
}
"""Relay op name -> one word on why relaybench lacks it (see the module docstring)."""


def missing(reason=None):
    """The Relay ops the registry lacks (those of one ``reason`` when given) as a Table with
    their reason; an op registered since is left out."""
    from .._table import Table
    from .registry import list_ops
    have = set(list_ops())
    rows = [{"op": name, "reason": why} for name, why in sorted(RELAY_MISSING.items())
            if name not in have and (reason is None or why == reason)]
    return Table(rows)
