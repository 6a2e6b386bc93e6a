"""QuantizeRealize and quantize(): the realized program against the simulated one, against fp32,
its dtypes, the compiled path, and the passes as the instruments see them."""

import numpy as np
import pytest

import relaybench as rb
from relaybench.ir.functor import post_order
from relaybench.passes.instruments import Snapshots, VerifyEach
from relaybench.quantize import QuantizeAnnotate, QuantizeCalibrate, QuantizeRealize, qconfig, quantize

CNN = '''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 8, 8), float32], %w1: Tensor[(8, 3, 3, 3), float32], %b1: Tensor[(8), float32],
          %w2: Tensor[(8, 8, 3, 3), float32], %b2: Tensor[(8), float32], %wd: Tensor[(10, 128), float32]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1], channels=8, kernel_size=[3, 3]);
  %1 = nn.bias_add(%0, %b1);
  %2 = nn.relu(%1);
  %3 = nn.conv2d(%2, %w2, padding=[1, 1], channels=8, kernel_size=[3, 3]);
  %4 = nn.bias_add(%3, %b2);
  %5 = add(%4, %2);
  %6 = nn.relu(%5);
  %7 = nn.max_pool2d(%6, pool_size=[2, 2], strides=[2, 2]);
  %8 = nn.batch_flatten(%7);
  nn.dense(%8, %wd, units=10)
}'''

KNOBS = {"skip_conv_layers": None, "skip_dense_layer": False}


def _cnn(seed=0):
    rng = np.random.default_rng(seed)
    params = {"w1": rng.normal(0, 0.3, (8, 3, 3, 3)), "b1": rng.normal(0, 0.1, 8),
              "w2": rng.normal(0, 0.15, (8, 8, 3, 3)), "b2": rng.normal(0, 0.1, 8),
              "wd": rng.normal(0, 0.1, (10, 128))}
    params = {k: v.astype("float32") for k, v in params.items()}
    inputs = [{"x": rng.normal(0, 1, (1, 3, 8, 8)).astype("float32")} for _ in range(4)]
    return rb.parse(CNN), params, inputs


def _run(mod, *args):
    return rb.create_executor("interpreter", mod=mod).evaluate()(*args)


def _sqnr(ref, got):
    return 10 * np.log10(np.sum(ref.astype("float64") ** 2) / np.sum((ref - got).astype("float64") ** 2))


def test_realized_equals_simulated_bit_exact_with_power2_scales():
    """global_scale 8 and power2 weight scales make every scale a power of two: the simulated
    program's divisions and products are exact in float32, and every requantized value here is
    a relu output (>= 0), where the realized shift's halves-up rounding and the simulated
    halves-away rounding agree, so the two programs agree bit for bit."""
    mod, params, inputs = _cnn()
    with qconfig(do_simulation=True, **KNOBS):
        simulated = quantize(mod, params)
    with qconfig(**KNOBS):
        realized = quantize(mod, params)
    fp32 = rb.passes.bind_params(mod, params)
    for batch in inputs:
        sim, real = _run(simulated, batch["x"]), _run(realized, batch["x"])
        np.testing.assert_array_equal(real, sim)
        ref = _run(fp32, batch["x"])
        assert _sqnr(ref, real) > 20.0


@pytest.mark.parametrize("mode", ["max", "percentile"])
def test_realized_within_one_step_of_simulated(mode):
    """With data-calibrated scales (not powers of two) requantization is a 31-bit fixed-point
    multiply with halves-up rounding, while the simulated program divides in float32 and
    rounds halves away from zero: at one requantization the two differ by at most one step of
    the output scale. Checked on conv -> relu -> max_pool (requantized to int8 at the pool)."""
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(6, 3, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1], channels=6, kernel_size=[3, 3]);
  %1 = nn.relu(%0);
  nn.max_pool2d(%1, pool_size=[2, 2], strides=[2, 2])
}''')
    rng = np.random.default_rng(5)
    params = {"w": rng.normal(0, 0.3, (6, 3, 3, 3)).astype("float32")}
    data = [{"x": rng.normal(0, 1, (1, 3, 8, 8)).astype("float32")} for _ in range(6)]
    with qconfig(calibrate_mode=mode, weight_scale="max", do_simulation=True, **KNOBS):
        simulated = quantize(mod, params, dataset=data)
    with qconfig(calibrate_mode=mode, weight_scale="max", **KNOBS):
        realized = quantize(mod, params, dataset=data)
    step = float(realized["main"].body.args[1].data)    # the dequantize's scale
    fixed = [n for n in post_order(realized["main"].body)
             if isinstance(n, rb.Call) and n.op.name == "right_shift"]
    assert fixed, "a non-power-of-two requantization uses a fixed-point multiply"
    for batch in data[:3]:
        sim, real = _run(simulated, batch["x"]), _run(realized, batch["x"])
        assert np.max(np.abs(sim - real)) <= step * (1 + 1e-5)
        assert np.mean(sim == real) > 0.9


def test_realized_ops_are_int8_with_int32_accumulation():
    mod, params, _ = _cnn()
    with qconfig(**KNOBS):
        realized = quantize(mod, params)
    anchors = [n for n in post_order(realized["main"].body)
               if isinstance(n, rb.Call) and n.op.name in ("nn.conv2d", "nn.dense")]
    assert len(anchors) == 3
    for call in anchors:
        assert [a.checked_type.dtype for a in call.args] == ["int8", "int8"]
        assert call.checked_type.dtype == "int32" and call.attrs.out_dtype == "int32"
        assert isinstance(call.args[1], rb.Constant)      # weights quantized at compile time
    # no simulated_quantize is left, and the result is float32 again
    assert "simulated_quantize" not in realized.astext()
    assert realized["main"].checked_type.ret_type == rb.TensorType((1, 10), "float32")


def test_int16_accumulation():
    mod, params, inputs = _cnn()
    with qconfig(nbit_activation=16, dtype_activation="int16", **KNOBS):
        realized = quantize(mod, params)
    anchors = [n for n in post_order(realized["main"].body)
               if isinstance(n, rb.Call) and n.op.name in ("nn.conv2d", "nn.dense")]
    assert {n.checked_type.dtype for n in anchors} == {"int16"}
    assert {a.checked_type.dtype for n in anchors for a in n.args} == {"int8"}


@pytest.mark.parametrize("mode", ["global_scale", "max"])
def test_compiled_agrees_with_interpreter(mode):
    mod, params, inputs = _cnn(1)
    with qconfig(calibrate_mode=mode, **KNOBS):
        realized = quantize(mod, params, dataset=inputs)
    lib = rb.build(realized, target="llvm", opt_level=3)
    for batch in inputs[:2]:
        np.testing.assert_array_equal(np.asarray(lib.run(x=batch["x"])), _run(realized, batch["x"]))


def test_each_pass_visible_to_snapshots():
    mod, params, _ = _cnn()
    snaps = Snapshots()
    # VerifyEach checks each pass's output (QuantizeAnnotate and QuantizeCalibrate may change
    # @main's parameters: they add and bind the scalars)
    with rb.PassContext(instruments=[snaps, VerifyEach()]):
        with qconfig(**KNOBS):
            quantize(mod, params)
    ran = [r.name for r in snaps.ran()]
    for name in ("QuantizeAnnotate", "QuantizeCalibrate", "QuantizeRealize", "FoldScaleAxis"):
        assert name in ran
    assert ran.index("QuantizeAnnotate") < ran.index("QuantizeCalibrate") < ran.index("QuantizeRealize")
    assert all(r.changed for r in snaps.records if r.name.startswith("Quantize") and r.depth > 0)


def test_passes_by_pipeline_string_equal_quantize():
    mod, params, _ = _cnn()
    bound = rb.quantize.prerequisite_optimize(mod, params)
    with qconfig(**KNOBS):
        staged = rb.passes.parse_pipeline("quantize-annotate,quantize-calibrate,quantize-realize,"
                                          "fold-constant")(bound)
        whole = quantize(mod, params)
    rb.assert_structural_equal(staged["main"], whole["main"])


def test_realize_needs_calibration():
    mod, params, _ = _cnn()
    with qconfig(**KNOBS):
        annotated = QuantizeAnnotate()(rb.quantize.prerequisite_optimize(mod, params))
        with pytest.raises(ValueError, match="dom_scale of a simulated_quantize is not a constant"):
            QuantizeRealize()(annotated)


def test_calibrated_program_is_the_simulation():
    """do_simulation stops after calibration: the result is annotate + calibrate."""
    mod, params, _ = _cnn()
    with qconfig(do_simulation=True, **KNOBS):
        sim = quantize(mod, params)
        staged = QuantizeCalibrate()(QuantizeAnnotate()(rb.quantize.prerequisite_optimize(mod, params)))
    rb.assert_structural_equal(sim["main"], rb.passes.FoldConstant()(staged)["main"])


def test_partition_conversions_not_supported_is_named():
    mod, params, _ = _cnn()
    with qconfig(partition_conversions="enabled"):
        with pytest.raises(ValueError, match="partition_conversions='enabled' is not supported"):
            quantize(mod, params)


def test_float_layer_after_quantized_data_gets_dequantized_data():
    """A dense left in float (skip_dense_layer) after a quantized conv takes the conv's
    dequantized result; the float dense then equals the simulated program's (power-of-two
    scales: bit for bit)."""
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 2, 4, 4), float32], %w: Tensor[(3, 2, 3, 3), float32], %wd: Tensor[(5, 48), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1], channels=3, kernel_size=[3, 3]);
  %1 = nn.relu(%0);
  %2 = nn.batch_flatten(%1);
  nn.dense(%2, %wd, units=5)
}''')
    rng = np.random.default_rng(2)
    params = {"w": rng.normal(0, 0.3, (3, 2, 3, 3)).astype("float32"),
              "wd": rng.normal(0, 0.3, (5, 48)).astype("float32")}
    x = rng.normal(0, 1, (1, 2, 4, 4)).astype("float32")
    with qconfig(skip_conv_layers=None):
        realized = quantize(mod, params)
        with qconfig(skip_conv_layers=None, do_simulation=True):
            simulated = quantize(mod, params)
    dense = realized["main"].body
    assert dense.op.name == "nn.dense" and dense.checked_type.dtype == "float32"
    assert dense.args[0].checked_type.dtype == "float32"
    np.testing.assert_array_equal(_run(realized, x), _run(simulated, x))


def test_fixed_point_rounding_modes():
    """x * 0.5 by the fixed-point multiply (m = 2**30, n = 31): UPWARD rounds halves up,
    TONEAREST rounds them away from zero (hand-computed)."""
    from relaybench.quantize.realize import fixed_point_multiplier, fixed_point_multiply
    assert fixed_point_multiplier(0.5) == (1 << 30, 31)
    assert fixed_point_multiplier(3.0) == (3 << 29, 29)        # 3 = 0.75 * 2**2
    x = rb.const(np.array([-3, -1, 1, 3, 5, -4], "int32"))
    up = _run(rb.IRModule.from_expr(rb.Function([], fixed_point_multiply(x, 0.5, "int32", "UPWARD"))))
    near = _run(rb.IRModule.from_expr(rb.Function([], fixed_point_multiply(x, 0.5, "int32", "TONEAREST"))))
    np.testing.assert_array_equal(up, [-1, 0, 1, 2, 3, -2])
    np.testing.assert_array_equal(near, [-2, -1, 1, 2, 3, -2])


def test_activation_saturation_keeps_its_sign():
    """A float field of a concatenate is quantized as an int32 ACTIVATION at scale 8 / 2**31;
    its clip bound float32(2**31 - 1) is 2**31, which int32 does not hold: the realized clip
    stays below it, so a saturated 8.0 (or 100.0) stays positive after the cast to int32."""
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 1, 2, 2), float32], %w: Tensor[(1, 1, 1, 1), float32], %y: Tensor[(1, 1, 2, 2), float32]) {
  %0 = nn.conv2d(%x, %w, channels=1, kernel_size=[1, 1]);
  concatenate((%0, %y), axis=1)
}''')
    params = {"w": np.ones((1, 1, 1, 1), "float32")}
    x = np.zeros((1, 1, 2, 2), "float32")
    y = np.array([8.0, -8.0, 100.0, 1.5], "float32").reshape(1, 1, 2, 2)
    with qconfig(skip_conv_layers=None):
        realized = quantize(mod, params)
    got = _run(realized, x, y)[0, 1].reshape(-1)
    np.testing.assert_allclose(got, [8.0, -8.0, 8.0, 1.5], rtol=1e-6)
    lib = rb.build(realized, target="llvm", opt_level=3)
    np.testing.assert_array_equal(np.asarray(lib.run(x=x, y=y))[0, 1].reshape(-1), got)
