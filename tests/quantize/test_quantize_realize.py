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


# ---- where the realized program departs from the simulated one (as in Relay) -----------------

BIAS_RELU6 = '''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 1, 1, 2), float32], %w1: Tensor[(1, 1, 1, 1), float32], %b: Tensor[(1, 1, 1), float32],
          %w2: Tensor[(1, 1, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w1, kernel_size=[1, 1]);
  %1 = add(%0, %b);
  %2 = clip(%1, a_min=0f, a_max=6f);
  nn.conv2d(%2, %w2, kernel_size=[1, 1])
}'''


def _round_half_away(v):
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def test_bias_add_rounds_twice_in_the_realized_program():
    """The smallest program where the realized form differs from the simulated one: MobileNet's
    conv -> bias -> ReLU6 -> conv on two values. The bias (a WEIGHT at its power-of-two scale
    2**-6, 67 steps) is added exactly in the simulated program, while the realized add brings it
    to the accumulator's smaller scale s_acc = s_x * s_w1 first, as Relay's UnifyDTypeScale does:
    67 * 2**-6 / s_acc = 17866.67 becomes 17867. The second value, 48.4987 steps of the next
    conv's input scale in the simulation, becomes 48.5005 and rounds up: one step apart, as
    Relay's realized and simulated forms are (hand-computed below with numpy)."""
    mod = rb.parse(BIAS_RELU6)
    f32 = np.float32
    x = np.array([-0.19, 0.24], "float32").reshape(1, 1, 1, 2)
    params = {"w1": np.full((1, 1, 1, 1), -2.09, "float32"), "b": np.full((1, 1, 1), 1.05, "float32"),
              "w2": np.full((1, 1, 1, 1), 0.75, "float32")}
    out = {}
    for simulated in (True, False):
        with qconfig(skip_conv_layers=None, calibrate_mode="max", do_simulation=simulated):
            out[simulated] = _run(quantize(mod, params, dataset=[{"x": x}]), x).reshape(-1)

    # the scales: max |x| / 128 for INPUT values, a power of two / 128 for the constants
    s_x, s_w1, s_b, s_w2 = f32(0.24 / 128), f32(2.0 ** -5), f32(2.0 ** -6), f32(2.0 ** -7)
    relu6 = np.clip(x.reshape(-1) * f32(-2.09) + f32(1.05), 0, 6)
    s_out = f32(relu6.max() / 128)
    x_int = np.clip(_round_half_away(x.reshape(-1) / s_x), -127, 127)
    assert x_int.tolist() == [-101, 127]
    w1_int, b_int, w2_int = -67, 67, 96                      # -2.09 * 32, 1.05 * 64, 0.75 * 128
    s_acc = float(s_x) * float(s_w1)
    acc = x_int * w1_int
    bias_exact = b_int * float(s_b) / s_acc
    assert abs(bias_exact - 17866.6667) < 1e-3
    simulated_steps = (acc + bias_exact) * s_acc / float(s_out)
    realized_steps = (acc + np.floor(bias_exact + 0.5)) * s_acc / float(s_out)
    np.testing.assert_allclose(simulated_steps, [127.6709, 48.4987], atol=1e-3)
    np.testing.assert_allclose(realized_steps, [127.6726, 48.5005], atol=1e-3)
    q_sim = np.clip(_round_half_away(simulated_steps), -127, 127)
    q_real = np.clip(np.floor(realized_steps + 0.5), -127, 127)
    assert q_sim.tolist() == [127, 48] and q_real.tolist() == [127, 49]

    step = float(s_out) * w2_int * float(s_w2)
    np.testing.assert_allclose(out[True], q_sim * step, rtol=1e-6)
    np.testing.assert_allclose(out[False], q_real * step, rtol=1e-6)
    # one step apart at one value: 42.7 dB
    assert np.abs(out[True] - out[False]).max() <= step * (1 + 1e-6)
    assert 42.5 < _sqnr(out[True], out[False]) < 43.0


def _twice_rounded_adds(func):
    """``func`` (a calibrated simulated program) with the operand of each quantized ``add`` that
    has the larger scale rounded onto the smaller one, ``round(a / s) * s``: the second rounding
    of Relay's realized add. The scale of a value: a simulated_quantize's dom_scale; a conv2d of
    two scaled values, the product; an add, the smaller; a clip keeps its input's."""
    from relaybench.ir.expr import Call, Op
    scale, memo = {}, {}

    def op(name, *args):
        return Call(Op.get(name), list(args), None)

    for node in post_order(func.body):
        if not isinstance(node, Call):
            continue
        args = [memo.get(a, a) for a in node.args]
        scales = [scale.get(a) for a in node.args]
        name = node.op.name
        if name == "relay.op.annotation.simulated_quantize":
            scale[node] = float(node.args[1].data)
        elif name == "nn.conv2d" and None not in scales:
            scale[node] = float(np.float32(scales[0]) * np.float32(scales[1]))
        elif name == "add" and None not in scales:
            s = min(scales)
            c = rb.const(np.float32(s))
            args = [a if sa == s else op("multiply", op("round", op("divide", a, c)), c)
                    for a, sa in zip(args, scales)]
            scale[node] = s
        elif name == "clip" and scales[0] is not None:
            scale[node] = scales[0]
        memo[node] = Call(node.op, args, node.attrs, node.type_args)
    return rb.passes.InferType()(rb.IRModule.from_expr(rb.Function(func.params, memo[func.body])))


def test_mobilenet_v2_realized_is_the_simulation_with_adds_rounded_twice():
    """MobileNet V2 at 3x32x32, calibrated by "max": the realized and simulated outputs are
    about 15.5 dB apart (the simulated program is as far from itself with its input scaled by
    1 + 1e-4: each one-step change at a requantization spreads through the blocks), and the
    whole difference is the second rounding of the adds (biases and residuals): with it
    written into the simulated program, the two agree to 98.8 dB. So every other rule
    (requantization, clip, depthwise conv2d, the residual's stop_fusion) agrees with the
    simulation; a clip bound one accumulator step off already brings this to 92 dB."""
    mod, params = rb.models.mobilenet_v2(image_shape=(3, 32, 32))
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    data = [{"data": np.random.default_rng(i).standard_normal((1, 3, 32, 32)).astype("float32")}
            for i in range(1, 4)]
    with qconfig(calibrate_mode="max"):
        simulated = QuantizeCalibrate(data)(QuantizeAnnotate()(rb.quantize.prerequisite_optimize(mod, params)))
        realized = quantize(mod, params, dataset=data)
    real, sim = _run(realized, x), _run(simulated, x)
    twice = _run(_twice_rounded_adds(simulated["main"]), x)
    assert _sqnr(real, twice) > 95.0
    assert 12.0 < _sqnr(real, sim) < 20.0


def test_int16_accumulators_wrap_where_the_simulation_does_not():
    """8/16 (nbit_activation=16, dtype_activation="int16"): the conv2d accumulates in int16, and
    3 * 127 * 96 = 36576 wraps to 36576 - 65536 = -28960, while the simulated program (the same
    as the 8/32 one: no simulated_quantize models the accumulator) keeps 36576, as Relay's."""
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 1, 2), float32], %w: Tensor[(1, 3, 1, 1), float32]) {
  nn.conv2d(%x, %w, channels=1, kernel_size=[1, 1])
}''')
    params = {"w": np.full((1, 3, 1, 1), 0.75, "float32")}
    x = np.array([1.0, 0.5] * 3, "float32").reshape(1, 3, 1, 2)
    a16 = {"nbit_activation": 16, "dtype_activation": "int16"}
    out, progs = {}, {}
    for name, knobs in (("8/32", {}), ("8/16", a16)):
        for simulated in (True, False):
            with qconfig(skip_conv_layers=None, calibrate_mode="max", do_simulation=simulated, **knobs):
                progs[name, simulated] = quantize(mod, params, dataset=[{"x": x}])
            out[name, simulated] = _run(progs[name, simulated], x).reshape(-1)
    rb.assert_structural_equal(progs["8/16", True]["main"], progs["8/32", True]["main"])
    s_acc = 2.0 ** -7 * 2.0 ** -7                       # 1.0 / 128 and the power-of-two 1 / 128
    acc = np.array([3 * 127 * 96, 3 * 64 * 96])         # 1.0 saturates at 127; 0.5 is 64; 0.75 is 96
    wrapped = (acc + 2 ** 15) % 2 ** 16 - 2 ** 15
    assert wrapped.tolist() == [-28960, 18432]
    np.testing.assert_allclose(out["8/16", True], acc * s_acc, rtol=1e-6)
    np.testing.assert_allclose(out["8/32", False], acc * s_acc, rtol=1e-6)
    np.testing.assert_allclose(out["8/16", False], wrapped * s_acc, rtol=1e-6)
