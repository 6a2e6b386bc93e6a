"""The differential runner: it agrees on a correct program, and it can fail."""

import numpy as np
import pytest

import relaybench as rb
from relaybench.testing import CONFIGS, Config, random_program, run_differential
from relaybench.testing.differential import compare, normalize_message, reference_result, tolerance

PROGRAM = '''#[version = "0.0.5"]
def @main(%x_0: Tensor[(2, 3), float32], %x_1: Tensor[(3), int32]) {
  (nn.relu(%x_0), add(%x_1, 1))
}'''


def _perturb(case):
    """A configuration that gets the reference's result and changes one element of it."""
    out = reference_result(case)
    first = np.array(out[0] if isinstance(out, tuple) else out)
    first.reshape(-1)[0] += 1
    return (first,) + tuple(out[1:]) if isinstance(out, tuple) else first


def _crash(case):
    raise RuntimeError(f"kernel 17 failed at {case.mod['main'].params[0].name_hint}\nsecond line")


def test_config_table():
    assert {"graph-O0", "graph-O1", "graph-O2", "graph-O3", "pipeline-O0", "pipeline-O1",
            "pipeline-O2", "pipeline-O3", "text", "nhwc"} <= set(CONFIGS)
    for config in CONFIGS.values():
        assert config.description and callable(config.run)


def test_every_config_agrees_on_a_simple_program():
    report = run_differential(rb.parse(PROGRAM))
    assert report.ok, str(report)
    assert [o.config for o in report.outcomes] == list(CONFIGS)


def test_random_programs_run_on_every_config():
    for seed in (0, 1):
        report = run_differential(random_program(seed).mod, seed=seed)
        assert report.reference is None and len(report.outcomes) == len(CONFIGS)


def test_an_injected_wrong_result_is_a_mismatch():
    report = run_differential(rb.parse(PROGRAM), configs=[Config("perturb", "+1", _perturb)])
    (outcome,) = report.failures
    assert outcome.status == "mismatch" and outcome.output == 0
    assert outcome.max_abs == pytest.approx(1.0)
    assert outcome.failure_class() == "perturb: mismatch [add, nn.relu]"


def test_an_integer_difference_is_caught_exactly():
    mod = rb.parse('#[version = "0.0.5"]\ndef @main(%x_0: Tensor[(4), int32]) { negative(%x_0) }')
    report = run_differential(mod, configs=[Config("perturb", "+1", _perturb)])
    assert report.failures[0].status == "mismatch"
    assert tolerance(mod, "int32") == 0.0


def test_an_exception_is_a_crash_with_its_class():
    report = run_differential(rb.parse(PROGRAM), configs=[Config("boom", "raises", _crash)])
    (outcome,) = report.failures
    assert outcome.status == "crash" and outcome.error_type == "RuntimeError"
    assert outcome.detail == "kernel 17 failed at x_0"
    assert outcome.failure_class() == "boom: crash RuntimeError: kernel N failed at x_N"


def test_a_failing_reference_is_reported():
    mod = rb.parse('#[version = "0.0.5"]\ndef @main(%idx2_0: Tensor[(3), int32], '
                   '%x_1: Tensor[(2), float32]) { take(%x_1, %idx2_0, mode="fast") }')
    bad = {"idx2_0": np.array([0, 1, 5], "int32")}
    report = run_differential(mod, inputs=bad, configs=["graph-O0"])
    assert report.reference is not None and report.reference.status == "crash"
    assert report.outcomes == [] and not report.ok


def test_compare_details():
    mod = rb.parse(PROGRAM)
    a = np.array([1.0, np.nan, np.inf], "float32")
    assert compare(mod, a, a.copy()) is None
    assert compare(mod, a, np.array([1.0, np.nan, -np.inf], "float32")) is not None
    assert compare(mod, a, a.astype("float64"))[1].startswith("output 0: dtype")
    assert compare(mod, a, a[:2])[1].startswith("output 0: shape")
    assert compare(mod, (a, a), (a,))[1] == "1 outputs, expected 2"
    # within the float tolerance, and outside it
    rtol = tolerance(mod, "float32")
    assert 0 < rtol < 1e-3
    assert compare(mod, np.float32(100.0), np.float32(100.0 + 50 * rtol)) is None
    assert compare(mod, np.float32(100.0), np.float32(100.5)) is not None


def test_tolerance_grows_with_reduction_work():
    small = rb.parse('#[version = "0.0.5"]\ndef @main(%x_0: Tensor[(2), float32]) '
                     '{ sum(%x_0) }')
    large = rb.parse('#[version = "0.0.5"]\ndef @main(%x_0: Tensor[(8, 8, 8), float32]) '
                     '{ sum(%x_0) }')
    assert tolerance(small, "float32") < tolerance(large, "float32")
    double = rb.parse('#[version = "0.0.5"]\ndef @main(%x_0: Tensor[(8, 8, 8), float64]) '
                      '{ sum(%x_0) }')
    assert tolerance(double, "float64") < tolerance(large, "float32") / 1e6
    # a float64 output computed through float32 values gets float32's tolerance
    mixed = rb.parse('#[version = "0.0.5"]\ndef @main(%x_0: Tensor[(4), float32]) '
                     '{ cast(exp(%x_0), dtype="float64") }')
    assert tolerance(mixed, "float64") >= tolerance(small, "float32") / 2


def test_normalize_message():
    assert normalize_message("fused_nn_conv2d_add_1: index -3 of Tensor[(1, 2), float32] %x_7\n"
                             "more") == "fused_...: index N of Tensor[(...), float32] %v"


def test_a_device_without_the_programs_dtype_skips_it():
    """OpenCL on a device without cl_khr_fp16 (PoCL's CPU device has none): a float16 program
    is skipped there, not counted as a crash; the CPU configurations still run it."""
    pytest.importorskip("pyopencl")
    from relaybench.backends.opencl import get_device
    if get_device("opencl").features.fp16:
        pytest.skip("this OpenCL device has cl_khr_fp16")
    mod = rb.parse('#[version = "0.0.5"]\n'
                   'def @main(%x_0: Tensor[(3), float32]) { cast(%x_0, dtype="float16") }')
    report = run_differential(mod, configs=["opencl-O3", "graph-O3"])
    opencl, graph = report.outcomes
    assert opencl.status == "skipped" and "cl_khr_fp16" in opencl.detail
    assert opencl.failure_class() is None
    assert graph.status == "ok" and report.ok
