"""The record of Relay v0.14's operators that relaybench lacks: ``op.RELAY_MISSING`` and
``op.missing()``."""

from relaybench import op

WORDS = {"math", "training", "sparse", "vision", "dynamic", "variant", "niche", "device", "bitserial"}

ADDED = ["nn.conv1d", "nn.conv3d", "nn.max_pool1d", "nn.max_pool3d", "nn.avg_pool1d", "nn.avg_pool3d",
         "nn.adaptive_max_pool1d", "nn.adaptive_max_pool2d", "nn.adaptive_max_pool3d",
         "nn.adaptive_avg_pool1d", "nn.adaptive_avg_pool3d", "nn.upsampling", "nn.upsampling3d",
         "image.resize1d", "image.resize3d", "gather", "gather_nd", "scatter_nd", "ndarray_size",
         "collapse_sum_like", "collapse_sum_to", "annotation.stop_fusion", "reverse", "cumsum",
         "cumprod", "argsort", "sort", "topk", "nn.space_to_depth", "nn.depth_to_space",
         "nn.instance_norm", "nn.group_norm", "nn.l2_normalize", "nn.conv1d_transpose",
         "nn.conv3d_transpose", "nn.mirror_pad", "isnan", "isfinite", "isinf", "sign", "trunc", "copy",
         "trunc_divide", "trunc_mod", "broadcast_to_like", "slice_like"]


def test_missing_names_are_not_registered_and_have_a_reason():
    registered = set(op.list_ops())
    assert not registered & set(op.RELAY_MISSING)
    assert set(op.RELAY_MISSING.values()) <= WORDS
    assert set(ADDED) <= registered


def test_missing_table_lists_them_and_filters_by_reason():
    rows = op.missing().rows
    assert [r["op"] for r in rows] == sorted(op.RELAY_MISSING)
    vision = op.missing("vision").rows
    assert vision and all(r["reason"] == "vision" and r["op"].startswith("vision.") for r in vision)
    assert {"log10", "nn.cross_entropy", "vision.roi_align"} <= {r["op"] for r in rows}
