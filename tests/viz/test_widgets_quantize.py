"""The pass explorer's quantization toggle, driven from Python as the widget drives it.

The model is ``dense(batch_flatten(relu(bias_add(conv2d(x, w), b))), d)`` with the weights bound.
The explorer's quantized program is checked against the library's verb applied by hand
(``rb.quantize.quantize`` under the same qconfig), its operators' types against what
quantization promises (int8 operands, int32 or int16 accumulators), and its results against the
model written out in numpy, within quantization error.
"""

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.ir import Call, Op
from relaybench.ir.functor import post_order
from relaybench.testing import assert_structural_equal
from relaybench.viz import widgets
from relaybench.viz.widgets import PRECISIONS, QUANTIZED_TARGETS, sqnr_db

pytest.importorskip("ipywidgets")

C, O, H, UNITS = 3, 4, 6, 5
ALL = {"skip_conv_layers": None, "skip_dense_layer": False}   # quantize every conv2d and dense


def _model():
    x = rb.var("x", shape=(1, C, H, H))
    w = rb.var("w", shape=(O, C, 3, 3))
    b = rb.var("b", shape=(O,))
    d = rb.var("d", shape=(UNITS, O * H * H))
    conv = op.nn.conv2d(x, w, padding=(1, 1), channels=O, kernel_size=(3, 3))
    body = op.nn.dense(op.nn.batch_flatten(op.nn.relu(op.nn.bias_add(conv, b))), d, units=UNITS)
    mod = rb.IRModule.from_expr(rb.Function([x, w, b, d], body))
    rng = np.random.default_rng(11)
    params = {"w": rng.standard_normal((O, C, 3, 3)).astype("float32") * 0.5,
              "b": rng.standard_normal(O).astype("float32") * 0.1,
              "d": rng.standard_normal((UNITS, O * H * H)).astype("float32") * 0.2}
    return mod, params


def _expected(x, params):
    """The float model in numpy: a 3x3 convolution with padding 1 as a sum of shifted products,
    bias, relu, flatten, a matrix product."""
    x = x.astype("float64")
    w, b, d = (params[k].astype("float64") for k in ("w", "b", "d"))
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, O, H, H))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + H, j:j + H], w[:, :, i, j])
    out = np.maximum(out + b[None, :, None, None], 0.0)
    return out.reshape(1, -1) @ d.T


@pytest.fixture(scope="module")
def model():
    return _model()


def _interpret(mod, inputs):
    return rb.create_executor("interpreter", mod=mod).evaluate()(**inputs)


def _by_hand(model, dataset=None, **knobs):
    mod, params = model
    with rb.quantize.qconfig(**knobs):
        return rb.quantize.quantize(mod, params, dataset)


def _anchor_calls(mod):
    """Every nn.conv2d and nn.dense call of ``@main``, fused functions' bodies included, typed."""
    main = rb.passes.InferType()(mod)["main"]
    calls = [e for e in post_order(main) if isinstance(e, Call) and isinstance(e.op, Op)
             and e.op.name in ("nn.conv2d", "nn.dense")]
    return calls


def _quantize_steps(explorer):
    return [r.name for r in explorer.steps if r.name.startswith("Quantize")]


def test_toggling_on_steps_through_annotate_calibrate_realize(model):
    mod, params = model
    explorer = rb.viz.PassExplorer(mod, params, targets=("interpreter",))
    explorer.run()
    float_text, float_steps = explorer.final_text, [r.label for r in explorer.steps]
    assert _quantize_steps(explorer) == []
    explorer.set_quantize(True, **ALL)          # re-runs at once: a run has happened
    assert explorer.run_count == 2 and explorer.quantize_box.value is True
    names = [r.name for r in explorer.steps]
    assert _quantize_steps(explorer) == ["QuantizeAnnotate", "QuantizeCalibrate", "QuantizeRealize"]
    # quantization comes first: its passes, then the FoldConstant that makes the weights int8,
    # then the float pipeline's steps
    realize = names.index("QuantizeRealize")
    assert names.index("QuantizeAnnotate") < names.index("QuantizeCalibrate") < realize
    assert names[realize + 1] == "FoldConstant" and names[-1] == "FuseOps"
    assert all(r.depth == 1 for r in explorer.steps)
    # each quantize snapshot is what its pass makes: simulated_quantize calls placed, then their
    # scalars bound, then integer arithmetic
    annotate, calibrate, realized = (explorer.snapshots[n] for n in _quantize_steps(explorer))
    assert "simulated_quantize" in annotate.after_text and "%dom_scale" in annotate.after_text
    assert "%dom_scale" not in calibrate.after_text and "simulated_quantize" in calibrate.after_text
    assert "simulated_quantize" not in realized.after_text and 'out_dtype="int32"' in realized.after_text
    # after QuantizeRealize the conv2d and the dense take int8 and accumulate in int32
    calls = _anchor_calls(realized.after)
    assert sorted(c.op.name for c in calls) == ["nn.conv2d", "nn.dense"]
    for c in calls:
        assert [a.checked_type.dtype for a in c.args] == ["int8", "int8"], c.op.name
        assert c.checked_type.dtype == "int32"
    # and so they do in the final program, where the x86 Legalize may have made the data uint8
    # (x + 128, with the weight's sum times 128 subtracted) for the u8 x s8 dot products
    calls = _anchor_calls(explorer.final)
    assert sorted(c.op.name for c in calls) == ["nn.conv2d", "nn.dense"]
    for c in calls:
        assert c.args[0].checked_type.dtype in ("int8", "uint8"), c.op.name
        assert c.args[1].checked_type.dtype == "int8" and c.checked_type.dtype == "int32"
    assert "Primitive=1" in explorer.final_text     # and the float pipeline fused it
    # toggling off restores the float pipeline
    explorer.set_quantize(False)
    assert explorer.run_count == 3 and explorer.quantized is None
    assert explorer.final_text == float_text and [r.label for r in explorer.steps] == float_steps
    assert all(a.checked_type.dtype == "float32" for c in _anchor_calls(explorer.final) for a in c.args)


def test_final_program_computes_what_quantize_by_hand_does(model):
    mod, params = model
    explorer = rb.viz.PassExplorer(mod, params, targets=("interpreter",), quantize=dict(ALL))
    explorer.run()
    by_hand = _by_hand(model, **ALL)
    assert_structural_equal(explorer.quantized, by_hand)
    got = _interpret(explorer.final, explorer.inputs)
    want = _interpret(by_hand, explorer.inputs)
    np.testing.assert_array_equal(got, want)
    # within quantization error of the float model written out in numpy
    assert sqnr_db(got, _expected(explorer.inputs["x"], params)) > 25


def test_default_qconfig_leaves_the_first_conv_and_the_dense_in_float(model):
    mod, params = model
    explorer = rb.viz.PassExplorer(mod, params, targets=("interpreter",), quantize=True)
    explorer.run()
    # Relay's defaults: skip_conv_layers=[0] (and what comes before it), skip_dense_layer
    assert explorer.quantize_knobs == {} and not explorer.quantize_first_conv_box.value
    assert all(a.checked_type.dtype == "float32" for c in _anchor_calls(explorer.final) for a in c.args)
    np.testing.assert_array_equal(_interpret(explorer.final, explorer.inputs),
                                  _interpret(_by_hand(model), explorer.inputs))
    explorer.quantize_first_conv_box.value = True      # the check box sets skip_conv_layers=None
    assert explorer.qconfig.skip_conv_layers is None and explorer.run_count == 2
    dtypes = {c.op.name: c.args[1].checked_type.dtype for c in _anchor_calls(explorer.final)}
    assert dtypes == {"nn.conv2d": "int8", "nn.dense": "float32"}
    explorer.quantize_dense_box.value = True
    assert explorer.qconfig.skip_dense_layer is False
    dtypes = {c.op.name: c.args[1].checked_type.dtype for c in _anchor_calls(explorer.final)}
    assert dtypes == {"nn.conv2d": "int8", "nn.dense": "int8"}


def test_8_16_accumulates_in_int16(model):
    mod, params = model
    explorer = rb.viz.PassExplorer(mod, params, targets=("interpreter",))
    explorer.set_quantize(True, precision="8/16", **ALL)
    explorer.run()
    assert explorer.precision_dropdown.value == "8/16"
    assert explorer.qconfig.nbit_activation == 16 and explorer.qconfig.dtype_activation == "int16"
    for c in _anchor_calls(explorer.final):
        assert c.args[0].checked_type.dtype in ("int8", "uint8") and c.args[1].checked_type.dtype == "int8"
        assert c.checked_type.dtype == "int16"
    by_hand = _by_hand(model, **PRECISIONS["8/16"], **ALL)
    np.testing.assert_array_equal(_interpret(explorer.final, explorer.inputs), _interpret(by_hand, explorer.inputs))
    # the dropdown sets it back
    explorer.precision_dropdown.value = "8/32"
    assert explorer.qconfig.dtype_activation == "int32" and explorer.run_count == 2


def test_max_calibration_on_seeded_random_inputs(model):
    mod, params = model
    explorer = rb.viz.PassExplorer(mod, params, targets=("interpreter",), seed=5)
    explorer.set_quantize(True, calibrate_mode="max", **ALL)
    data = explorer.calibration_dataset()
    # four input dicts drawn with the seeds after the explorer's own, never the input timed
    assert len(data) == 4
    for i, item in enumerate(data):
        np.testing.assert_array_equal(
            item["x"], np.random.default_rng(6 + i).standard_normal((1, C, H, H)).astype("float32"))
    assert not any(np.array_equal(item["x"], explorer.inputs["x"]) for item in data)
    explorer.run()
    # "max": the input's scale is max |x| over the data set, so its dom_scale is that / 2**7
    calibrated = explorer.snapshots["QuantizeCalibrate"].after["main"]
    sq = [e for e in post_order(calibrated.body) if isinstance(e, Call) and isinstance(e.op, Op)
          and e.op.name.endswith("simulated_quantize") and getattr(e.args[0], "name_hint", None) == "x"]
    assert len(sq) == 1
    peak = max(float(np.max(np.abs(item["x"]))) for item in data)
    assert float(sq[0].args[1].data) == pytest.approx(peak / 128, rel=1e-6)
    np.testing.assert_array_equal(_interpret(explorer.final, explorer.inputs),
                                  _interpret(_by_hand(model, data, calibrate_mode="max", **ALL), explorer.inputs))
    assert explorer._quantize_label() == "int8/int32, max on 4 random inputs"


def test_a_dataset_of_my_own(model):
    mod, params = model
    rng = np.random.default_rng(99)
    dataset = [{"x": rng.uniform(-2, 2, (1, C, H, H)).astype("float32")} for _ in range(3)]
    explorer = rb.viz.PassExplorer(mod, params, targets=("interpreter",),
                                   quantize={"calibrate_mode": "percentile", **ALL}, dataset=iter(dataset))
    assert explorer.calibrate_dropdown.value == "percentile"
    explorer.run()
    np.testing.assert_array_equal(
        _interpret(explorer.final, explorer.inputs),
        _interpret(_by_hand(model, dataset, calibrate_mode="percentile", **ALL), explorer.inputs))
    assert explorer._quantize_label() == "int8/int32, percentile on 3 given inputs"
    # the dropdown changes the mode; the data set stays
    explorer.calibrate_dropdown.value = "kl_divergence"
    assert explorer.qconfig.calibrate_mode == "kl_divergence" and explorer.calibration_dataset() is not None
    np.testing.assert_array_equal(
        _interpret(explorer.final, explorer.inputs),
        _interpret(_by_hand(model, dataset, calibrate_mode="kl_divergence", **ALL), explorer.inputs))


def test_bad_quantize_settings_are_named(model):
    mod, params = model
    explorer = rb.viz.PassExplorer(mod, params, targets=("interpreter",))
    with pytest.raises(ValueError, match="set_quantize: qconfig: calibrate_mode must be one of"):
        explorer.set_quantize(True, calibrate_mode="minmax")
    with pytest.raises(ValueError, match="precision '4/8' is not one of '8/32', '8/16'"):
        explorer.set_quantize(True, precision="4/8")
    with pytest.raises(ValueError, match="unknown knob 'global_scal'; did you mean global_scale"):
        explorer.set_quantize(True, global_scal=4.0)
    assert explorer.quantize is False and explorer.quantize_knobs == {}   # nothing changed
    with pytest.raises(TypeError, match="dataset item 1 is a list"):
        explorer.set_quantize(True, dataset=[{"x": np.zeros((1, C, H, H), "float32")}, [1]])
    with pytest.raises(ValueError, match="dataset item 0 lacks the input 'x'"):
        explorer.set_quantize(True, dataset=[{"y": 1}])
    with pytest.raises(TypeError, match="quantize is True, False or a dict"):
        rb.viz.PassExplorer(mod, params, quantize="int8")
    # the global scale box sets the knob (kept while quantization is off)
    explorer.global_scale_text.value = 4.0
    assert explorer.qconfig.global_scale == 4.0 and explorer.quantize is False


def test_time_compares_with_the_float_model_within_quantization_error(model):
    mod, params = model
    targets = ("interpreter", "llvm", "opencl") if _has_opencl() else ("interpreter", "llvm")
    explorer = rb.viz.PassExplorer(mod, params, targets=targets)
    expected = _expected(explorer.inputs["x"], params)
    float_row = explorer.time("llvm")
    assert float_row["quantized"] == "" and float_row["matches"] and float_row["sqnr_db"] > 80
    explorer.set_quantize(True, **ALL)
    quantized = _interpret(_by_hand(model, **ALL), explorer.inputs)
    for target in targets:
        row = explorer.time(target)
        assert row["quantized"] == "int8/int32, global_scale=8"
        # the compiled int8 program computes what the interpreter computes on it ...
        assert row["matches_quantized"] and row["quantized_max_abs_error"] < 1e-5
        np.testing.assert_allclose(explorer.last_output, quantized, rtol=1e-6, atol=1e-6)
        # ... which is the float model up to quantization error, as the row says
        assert row["sqnr_db"] == pytest.approx(sqnr_db(explorer.last_output, expected), abs=0.5)
        assert row["sqnr_db"] > 25 and row["matches"]
        assert row["max_abs_error"] == pytest.approx(float(np.max(np.abs(explorer.last_output - expected))),
                                                     rel=1e-3, abs=1e-5)
        assert row["max_abs_error"] > 1e-4    # quantized: not the float result
    html = explorer.results_html.value
    assert html.count("<tr>") == 1 + 1 + len(targets)
    assert "within quantization error" in html and "int8/int32, global_scale=8" in html
    # the SQNR bar decides the verdict
    explorer.min_sqnr_db = 200.0
    row = explorer.time("interpreter")
    assert row["matches_quantized"] and not row["matches"]
    assert "too far from the float result" in explorer.results_html.value


def test_quantized_configurations_run_only_on_targets_with_int8_kernels(model, monkeypatch):
    mod, params = model
    monkeypatch.setattr(widgets, "QUANTIZED_TARGETS", ("interpreter",))
    explorer = rb.viz.PassExplorer(mod, params, targets=("interpreter", "llvm"))
    assert explorer.target_dropdown.options == ("interpreter", "llvm")
    explorer.quantize_box.value = True          # the toggle, before any run: no run yet
    assert explorer.quantize and explorer.run_count == 0
    assert explorer.target_dropdown.options == ("interpreter",)
    with pytest.raises(ValueError, match="target 'llvm' has no int8 kernels; a quantized configuration "
                                         "runs on interpreter"):
        explorer.time("llvm")
    explorer.quantize_box.value = False
    assert explorer.target_dropdown.options == ("interpreter", "llvm")
    assert set(QUANTIZED_TARGETS) >= {"interpreter", "llvm"}


def test_sqnr_by_hand():
    assert sqnr_db(np.array([3.0, 4.0]), np.array([3.0, 4.0])) == float("inf")
    # signal 25, noise 0.25: 10 log10(100) = 20 dB
    assert sqnr_db(np.array([3.5, 4.0]), np.array([3.0, 4.0])) == pytest.approx(20.0)
    assert sqnr_db(np.zeros(2), np.zeros(3)) == float("-inf")
    assert sqnr_db(np.ones(2), np.zeros(2)) == float("-inf")


def _has_opencl():
    try:
        import pyopencl as cl
        return bool(cl.get_platforms())
    except Exception:
        return False


def test_the_realize_step_draws_its_int8_region(model):
    from relaybench.viz.dot import DTYPE_COLORS
    mod, params = model
    explorer = rb.viz.PassExplorer(mod, params, targets=("interpreter",), quantize=dict(ALL))
    explorer.run()
    names = [r.name for r in explorer.steps]
    explorer.step(names.index("QuantizeAnnotate"))
    int8 = f'stroke="{DTYPE_COLORS["int8"][0]}"'
    assert explorer.current_svg is not None and int8 not in explorer.current_svg   # still float
    explorer.step(names.index("QuantizeRealize"))
    svg = explorer.current_svg
    assert int8 in svg and f'stroke="{DTYPE_COLORS["int32"][0]}"' in svg
    # the diff view of the step (added nodes marked) keeps the edge colors
    explorer.mark_changes_box.value = True
    marked = explorer.current_svg
    assert marked != svg and int8 in marked
    # the step says which sequence ran it: quantization's, or (unnamed) the explorer's pipeline
    assert "<b>QuantizeRealize</b> (in Quantize)" in explorer.step_label.value
    explorer.step(names.index("CanonicalizeOps"))
    assert "<b>CanonicalizeOps</b> (in QuantizePrerequisites)" in explorer.step_label.value
    explorer.step(-1)
    assert "FuseOps" in explorer.step_label.value and "(in " not in explorer.step_label.value


def test_the_vm_is_a_target_and_agrees_with_the_interpreter():
    """The PassExplorer times its configuration on the Relay VM too (kernels for llvm), float
    and quantized, each checked as on the other targets."""
    import numpy as np
    import relaybench as rb
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 8, 6, 6), float32], %w: Tensor[(8, 8, 3, 3), float32]) {
  nn.relu(nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=8, kernel_size=[3, 3]))
}''')
    w = np.random.default_rng(0).standard_normal((8, 8, 3, 3)).astype("float32")
    explorer = rb.viz.PassExplorer(mod, {"w": w})
    assert "vm" in explorer.targets
    row = explorer.time("vm")
    assert row["target"] == "vm" and row["matches"] and row["latency_ms"] > 0
    x = explorer.inputs["x"]
    want = np.maximum(0, np.einsum("ocij,cij->o", w, np.pad(x[0], ((0, 0), (1, 1), (1, 1)))[:, :3, :3]))
    np.testing.assert_allclose(np.asarray(explorer.last_output)[0, :, 0, 0], want, rtol=1e-4, atol=1e-4)
    explorer.set_quantize(True)
    row = explorer.time("vm")
    assert row["matches_quantized"] and row["matches"]
