"""The ONNX backend node tests (onnx/backend/test/data/node) against relaybench's backend.

Every case runs on the reference interpreter; the cases in ``node_expected_failures.py`` are
strict expected failures (a regression fails, a newly passing case shows as XPASS and fails
too). A subset of common ops also runs compiled for LLVM. Each case is judged as ONNX's runner
judges it: its rtol/atol, dtypes and shapes exact, against the outputs stored with the case.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import os

import pytest

pytest.importorskip("onnx")

from relaybench.frontends.onnx import backend as B  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "node_expected_failures", os.path.join(os.path.dirname(__file__), "node_expected_failures.py"))
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
EXPECTED_FAILURES = _module.EXPECTED_FAILURES

CASES = dict(B.node_cases())


def expected_failure(name: str):
    """The reason ``name`` is expected to fail, or None."""
    for reason, patterns in EXPECTED_FAILURES.items():
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            return reason
    return None


def _interpreter(model):
    return B.RelaybenchBackend.prepare(model)


def _llvm(model):
    return B.RelaybenchBackend.prepare(model, target="llvm")


@pytest.mark.parametrize("name", sorted(CASES))
def test_node_case(name, request):
    reason = expected_failure(name)
    if reason is not None:
        request.applymarker(pytest.mark.xfail(reason=reason, strict=True))
    status, why = B.run_case(name, CASES[name], _interpreter)
    assert status == "pass", f"{status}: {why}"


def test_every_expected_failure_names_a_case():
    """A pattern that matches no case is stale (the case was renamed or removed)."""
    stale = [p for patterns in EXPECTED_FAILURES.values() for p in patterns
             if not fnmatch.filter(CASES, p)]
    assert not stale


LLVM_CASES = [
    "test_conv_with_strides_padding", "test_maxpool_2d_pads", "test_averagepool_2d_pads",
    "test_gemm_default_matrix_bias", "test_matmul_3d", "test_softmax_axis_1",
    "test_batchnorm_example", "test_concat_2d_axis_1", "test_reshape_reordered_all_dims",
    "test_globalaveragepool", "test_flatten_axis1", "test_reduce_mean_default_axes_keepdims_example",
    "test_slice", "test_gather_0", "test_where_example", "test_tan", "test_erf",
    "test_mod_mixed_sign_int32", "test_argmax_default_axis_example",
    "test_resize_upsample_sizes_nearest", "test_instancenorm_example",
    "test_layer_normalization_2d_axis0", "test_lrn", "test_convtranspose",
    "test_depthtospace_example", "test_split_equal_parts_1d_opset18", "test_expand_dim_changed",
    "test_prelu_example", "test_hardswish", "test_gelu_default_1", "test_qlinearconv",
    "test_quantizelinear", "test_matmulinteger", "test_round",
    "test_linear_attention_linear",   # a graph input named `value`, as set_input's parameter
    "test_range_float_type_positive_delta_expanded",   # a Loop bounded by graph inputs: bound
]


@pytest.mark.parametrize("name", LLVM_CASES)
def test_node_case_llvm(name):
    status, why = B.run_case(name, CASES[name], _llvm)
    assert status == "pass", f"{status}: {why}"
