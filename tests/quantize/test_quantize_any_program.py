"""rb.quantize.quantize on programs that are not the zoo's: what it cannot quantize stays as it
is (float64 and integer arithmetic, weights computed at run time, simulated_quantize calls with
their scales given), lets are quantized like dataflow, and the result runs compiled exactly as
on the interpreter (the differential tester's ``quantize-O3``)."""

import numpy as np

import relaybench as rb
from relaybench.quantize import qconfig, quantize
from relaybench.testing import run_differential

ALL_LAYERS = dict(calibrate_mode="global_scale", global_scale=8.0, skip_conv_layers=None,
                  skip_dense_layer=False)


def _ops(mod):
    from relaybench.ir.expr import Call, Op
    from relaybench.ir.functor import post_order
    return [n.op.name for n in post_order(mod["main"].body)
            if isinstance(n, Call) and isinstance(n.op, Op)]


def test_float64_and_integer_calls_stay_as_they_are():
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 4), float64], %w: Tensor[(3, 4), float64], %i: Tensor[(3), int32]) {
  (nn.dense(%x, %w, units=3), add(%i, %i))
}''')
    w = np.arange(12, dtype="float64").reshape(3, 4) / 7
    with qconfig(**ALL_LAYERS):
        q = quantize(mod, {"w": w})
    assert "relay.op.annotation.simulated_quantize" not in _ops(q) and "cast" not in _ops(q)
    x, i = np.array([[1.0, -2.0, 0.5, 3.0]]), np.array([1, -2, 7], "int32")
    dense, ints = rb.create_executor("interpreter", mod=q).evaluate()(x, i)
    np.testing.assert_allclose(np.asarray(dense), x @ w.T, rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(ints), 2 * i)


def test_a_weight_computed_from_an_input_stays_in_float():
    """Under quantize (parameters bound), a conv2d whose weight is a run-time input is not a
    layer with weights: it stays float32, the one with a bound weight becomes int8."""
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 4, 5, 5), float32], %k: Tensor[(4, 4, 1, 1), float32], %w: Tensor[(4, 4, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w, channels=4, kernel_size=[1, 1]);
  nn.conv2d(%0, %k, channels=4, kernel_size=[1, 1])
}''')
    rng = np.random.default_rng(0)
    w = rng.uniform(-1, 1, (4, 4, 1, 1)).astype("float32")
    with qconfig(**ALL_LAYERS):
        q = rb.passes.InferType()(quantize(mod, {"w": w}))
    text = str(q)
    assert text.count("int8") >= 2 and 'out_dtype="int32"' in text
    convs = [line for line in text.splitlines() if "nn.conv2d" in line]
    assert len(convs) == 2 and any("%k" in c and "float32" in c for c in convs)
    x = rng.uniform(-1, 1, (1, 4, 5, 5)).astype("float32")
    k = rng.uniform(-1, 1, (4, 4, 1, 1)).astype("float32")
    got = np.asarray(rb.create_executor("interpreter", mod=q).evaluate()(x, k))
    want = np.einsum("oc,nchw->nohw", k[:, :, 0, 0], np.einsum("oc,nchw->nohw", w[:, :, 0, 0], x))
    assert np.abs(got - want).max() < 0.1 * np.abs(want).max()   # int8 rounding only


def test_simulated_quantize_with_given_scales_is_kept():
    """A simulated_quantize whose scalars are constants is calibrated already: calibration
    leaves it (even of kind WEIGHT on a variable), and realize keeps its value."""
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: float32) {
  nn.relu(relay.op.annotation.simulated_quantize(%x, 0.5f, -127f, 127f, kind=2))
}''')
    with qconfig(**ALL_LAYERS):
        q = quantize(mod)
    run = rb.create_executor("interpreter", mod=q).evaluate()
    # round(x / 0.5) clipped to [-127, 127], times 0.5; relu after
    assert float(run(np.float32(1.3))) == 1.5 and float(run(np.float32(-3.0))) == 0.0


def test_let_bound_dataflow_is_quantized():
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(2, 8), float32], %w: Tensor[(4, 8), float32]) {
  let %y = nn.dense(%x, %w, units=4);
  nn.relu(%y)
}''')
    w = np.random.default_rng(1).uniform(-1, 1, (4, 8)).astype("float32")
    with qconfig(**ALL_LAYERS):
        q = quantize(mod, {"w": w})
    assert 'out_dtype="int32"' in str(q)


def test_quantize_config_of_the_differential_tester():
    """``quantize-O3`` compares the compiled quantized program with the quantized program on
    the interpreter (integer arithmetic: exact), not with the float program."""
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x_0: Tensor[(1, 8, 6, 6), float32], %x_w1: Tensor[(8, 8, 3, 3), float32]) {
  nn.relu(nn.conv2d(%x_0, %x_w1, padding=[1, 1, 1, 1], channels=8, kernel_size=[3, 3]))
}''')
    report = run_differential(mod, configs=["quantize-O3"])
    assert report.ok, str(report)
