"""qconfig: Relay's knobs and defaults, nesting, and errors that name the knob."""

import pytest

import relaybench as rb
from relaybench.quantize import QCONFIG_DEFAULTS, current_qconfig, qconfig


def test_defaults_are_relays():
    cfg = current_qconfig()
    expected = {"nbit_input": 8, "nbit_weight": 8, "nbit_activation": 32, "dtype_input": "int8",
                "dtype_weight": "int8", "dtype_activation": "int32",
                "calibrate_mode": "global_scale", "global_scale": 8.0, "weight_scale": "power2",
                "skip_conv_layers": (0,), "skip_dense_layer": True, "do_simulation": False,
                "round_for_shift": True, "debug_enabled_ops": None, "rounding": "UPWARD",
                "partition_conversions": "disabled"}
    for knob, value in expected.items():
        assert getattr(cfg, knob) == value, knob
        assert QCONFIG_DEFAULTS[knob] == value or knob == "skip_conv_layers"


def test_nesting_restores_and_starts_from_defaults():
    with qconfig(global_scale=4.0, skip_conv_layers=[1, 2]) as outer:
        assert rb.quantize.current_qconfig() is outer
        assert current_qconfig().skip_conv_layers == (1, 2)
        with qconfig(nbit_activation=16, dtype_activation="int16"):
            inner = current_qconfig()
            assert (inner.nbit_activation, inner.dtype_activation) == (16, "int16")
            # as in Relay, a nested block starts from the defaults, not from the outer block
            assert inner.global_scale == 8.0
        assert current_qconfig().global_scale == 4.0
        assert current_qconfig().nbit_activation == 32
    assert current_qconfig().global_scale == 8.0


def test_restored_after_an_exception():
    with pytest.raises(RuntimeError):
        with qconfig(global_scale=2.0):
            raise RuntimeError("boom")
    assert current_qconfig().global_scale == 8.0


@pytest.mark.parametrize("knobs, words", [
    ({"calibrate_mode": "minmax"}, "calibrate_mode"),
    ({"weight_scale": "mean"}, "weight_scale"),
    ({"global_scale": -1.0}, "global_scale"),
    ({"global_scale": float("nan")}, "global_scale"),
    ({"nbit_input": 0}, "nbit_input"),
    ({"nbit_input": 16}, "nbit_input is 16 but dtype_input int8"),
    ({"dtype_weight": "float32"}, "dtype_weight"),
    ({"skip_conv_layers": [-1]}, "skip_conv_layers"),
    ({"skip_conv_layers": 0}, "skip_conv_layers"),
    ({"skip_dense_layer": "yes"}, "skip_dense_layer"),
    ({"rounding": "DOWN"}, "rounding"),
    ({"debug_enabled_ops": ["nn.conv3x3"]}, "debug_enabled_ops"),
    ({"nbit_activations": 32}, "unknown knob 'nbit_activations'; did you mean nbit_activation?"),
])
def test_bad_knob_is_named(knobs, words):
    with pytest.raises(ValueError, match="qconfig: .*") as err:
        qconfig(**knobs)
    assert words in str(err.value)


def test_qconfig_is_read_only():
    with pytest.raises(AttributeError):
        current_qconfig().global_scale = 1.0
