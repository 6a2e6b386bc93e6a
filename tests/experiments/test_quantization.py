"""The quantization experiment: its measures against hand values, the digits table against a
numpy forward pass, the zoo agreement on the DQN, and `relaybench reproduce quantization`."""

import csv
import json
import math

import numpy as np
import pytest

from relaybench import cli
from relaybench.experiments.quantization import (CALIBRATE_MODES, QuantizationResult,
                                                 digits_accuracy_table, sqnr_db, top1_agreement,
                                                 zoo_agreement)

pytest.importorskip("llvmlite")


# ---- the measures ----------------------------------------------------------------------------

def test_sqnr_hand_values():
    # signal 3^2 + 4^2 = 25, noise 0.5^2 = 0.25: 10 log10(100) = 20 dB
    assert sqnr_db([3.0, 4.0], [3.0, 4.5]) == pytest.approx(20.0)
    # signal 4, noise 0.1^2 + 0.1^2 = 0.02: 10 log10(200) = 23.0103 dB
    assert sqnr_db(np.ones((2, 2)), [[1.1, 0.9], [1.0, 1.0]]) == pytest.approx(23.0103, abs=1e-4)
    # the noise is summed over every output, not averaged per row: 10 log10(8 / 2) = 6.0206 dB
    assert sqnr_db([[2.0, 0.0], [0.0, 2.0]], [[1.0, 0.0], [0.0, 1.0]]) == pytest.approx(6.0206,
                                                                                       abs=1e-4)
    assert sqnr_db([1.0, -2.0], [1.0, -2.0]) == math.inf
    with pytest.raises(ValueError, match="shapes"):
        sqnr_db([1.0, 2.0], [1.0, 2.0, 3.0])


def test_top1_agreement_hand_values():
    reference = np.array([[0.1, 0.9, 0.0], [0.5, 0.2, 0.3], [0.0, 0.1, 0.2]])
    quantized = np.array([[0.2, 0.8, 0.0], [0.1, 0.6, 0.3], [0.0, 0.0, 0.5]])
    # rows 0 and 2 keep their largest score where it was, row 1 does not
    assert top1_agreement(reference, quantized) == pytest.approx(200 / 3)
    # a batch axis in front: (inputs, batch, classes) counts every row
    assert top1_agreement(reference[None], quantized[None]) == pytest.approx(200 / 3)
    assert top1_agreement([1.0, 3.0, 2.0], [0.0, 5.0, 1.0]) == 100.0
    with pytest.raises(ValueError, match="shapes"):
        top1_agreement(reference, quantized[:2])


# ---- the digits table ------------------------------------------------------------------------

def _numpy_digits_logits(x: np.ndarray, p: dict) -> np.ndarray:
    """The digits CNN written out in numpy (float64): three 3x3 convolutions with padding 1,
    a 2x2 max pool after the second, a dense layer."""
    def conv(x, w, b):
        n, c, h, wd = x.shape
        padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        # windows[n, c, i, j, ki, kj] = padded[n, c, i + ki, j + kj]
        windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
        return np.einsum("ncijkl,ockl->noij", windows, w) + b[None, :, None, None]

    relu = lambda v: np.maximum(v, 0.0)  # noqa: E731
    p = {k: v.astype(np.float64) for k, v in p.items()}
    x = relu(conv(x.astype(np.float64), p["conv1_weight"], p["conv1_bias"]))
    x = relu(conv(x, p["conv2_weight"], p["conv2_bias"]))
    n, c, h, w = x.shape
    x = x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))
    x = relu(conv(x, p["conv3_weight"], p["conv3_bias"]))
    return x.reshape(n, -1) @ p["fc_weight"].T + p["fc_bias"]


def test_digits_table_fp32_matches_numpy_and_8_32_loses_at_most_a_point():
    from relaybench.models import digits_cnn, load_digits_split
    rows = digits_accuracy_table(["max"], ["8/32"], calibration_images=360, progress=False)
    split = load_digits_split()
    _, params = digits_cnn(softmax=False)
    predicted = np.argmax(_numpy_digits_logits(split.x_test, params), axis=-1)
    correct = int(np.sum(predicted == split.y_test))

    by_precision = {r["precision"]: r for r in rows}
    assert set(by_precision) == {"fp32", "8/32"}
    fp32 = by_precision["fp32"]
    assert (fp32["correct"], fp32["images"]) == (correct, 360)
    assert fp32["accuracy"] == pytest.approx(100 * correct / 360)
    assert by_precision["8/32"]["calibrate_mode"] == "max"
    assert by_precision["8/32"]["accuracy"] >= fp32["accuracy"] - 1.0


def test_digits_table_pads_a_short_last_batch():
    # 50 test images in batches of 32: the second batch is padded and its padding dropped
    from relaybench.models import digits_cnn, load_digits_split
    rows = digits_accuracy_table(["global_scale"], [], test_images=50, batch_size=32,
                                 progress=False)
    split = load_digits_split()
    _, params = digits_cnn(softmax=False)
    predicted = np.argmax(_numpy_digits_logits(split.x_test[:50], params), axis=-1)
    assert rows == [{"precision": "fp32", "calibrate_mode": "-", "images": 50,
                     "correct": int(np.sum(predicted == split.y_test[:50])),
                     "accuracy": pytest.approx(100 * np.mean(predicted == split.y_test[:50]))}]


def test_bad_settings_name_the_knob():
    with pytest.raises(ValueError, match="calibrate mode 'minmax'"):
        digits_accuracy_table(["minmax"], progress=False)
    with pytest.raises(ValueError, match="precision '4/8'"):
        digits_accuracy_table(["max"], ["4/8"], progress=False)
    with pytest.raises(KeyError, match="resnet181"):
        zoo_agreement(["resnet181"], progress=False)
    with pytest.raises(ValueError, match="calibration images"):
        digits_accuracy_table(["max"], ["8/32"], calibration_images=10, progress=False)


# ---- the zoo agreement -----------------------------------------------------------------------

def test_zoo_agreement_on_dqn():
    rows = zoo_agreement(["dqn"], ["global_scale", "max"], num_inputs=4, calibration_inputs=1,
                         progress=False)
    assert [(r["model"], r["calibrate_mode"], r["input"], r["inputs"]) for r in rows] == [
        ("dqn", "global_scale", "1x4x84x84", 4), ("dqn", "max", "1x4x84x84", 4)]
    for r in rows:
        # DQN's two quantized convolutions in int8 keep the Q-values to a few percent
        # (about 33 dB); a wrong scale or a broken requantization falls far below
        assert 25.0 < r["sqnr_db"] < 60.0
        assert r["top1_agreement"] in (0.0, 25.0, 50.0, 75.0, 100.0)
        assert r["top1_agreement"] >= 75.0


# ---- the result and the command line ---------------------------------------------------------

def test_result_tables_and_files(tmp_path):
    accuracy = [{"precision": "fp32", "calibrate_mode": "-", "accuracy": 98.0, "correct": 49,
                 "images": 50},
                {"precision": "8/32", "calibrate_mode": "max", "accuracy": 96.0, "correct": 48,
                 "images": 50}]
    agreement = [{"model": "dqn", "input": "1x4x84x84", "calibrate_mode": "max",
                  "top1_agreement": 100.0, "sqnr_db": math.inf, "inputs": 4}]
    result = QuantizationResult(accuracy, agreement, settings={"test_images": 50})
    assert result.measured == ["accuracy", "agreement"]
    assert result.table("accuracy").rows == [{"precision": "fp32", "max": "98.00"},
                                             {"precision": "8/32", "max": "96.00"}]
    paper = {r["precision"]: r for r in result.paper_table().rows}
    assert paper["8/32"]["ResNet-18, ImageNet (paper) %"] == "69.4"
    assert paper["8/32"]["here: points lost"] == "2.00"
    assert result.table("agreement", "sqnr_db").rows[0]["max SQNR dB"] == "inf"
    written = result.write(tmp_path)
    names = {p.name for p in written}
    assert {"quantization_accuracy.md", "quantization_accuracy.csv",
            "quantization_agreement.json"} <= names
    assert "quantization_speed.csv" not in names
    loaded = QuantizationResult.load(tmp_path / "quantization_agreement.json")
    assert loaded.agreement == agreement
    md = (tmp_path / "quantization_accuracy.md").read_text()
    assert "skip_conv_layers=[0]" in md and "| 8/32 | 96.00 |" in md


def test_reproduce_quantization_quick_writes_the_tables(capsys, tmp_path):
    from relaybench.models import digits_weights_info
    out_dir = tmp_path / "results"
    argv = ["reproduce", "quantization", "--out", str(out_dir), "--quick", "--models", "dqn",
            "--threads", "1", "--no-progress"]
    assert cli.main(argv) == 0
    stdout = capsys.readouterr().out
    for name in ("accuracy", "agreement", "speed"):
        for suffix in ("md", "csv", "json"):
            path = out_dir / f"quantization_{name}.{suffix}"
            assert path.is_file(), path
            assert f"wrote {path}" in stdout

    with (out_dir / "quantization_accuracy.csv").open() as f:
        accuracy = list(csv.DictReader(f))
    assert [(r["precision"], r["calibrate_mode"]) for r in accuracy] == [
        ("fp32", "-")] + [(p, m) for p in ("8/32", "8/16") for m in CALIBRATE_MODES]
    # the float32 accuracy is the one recorded when the weights were trained
    fp32 = float(accuracy[0]["accuracy"])
    assert fp32 == pytest.approx(100 * digits_weights_info()["test_accuracy"], abs=0.01)
    assert all(float(r["accuracy"]) >= fp32 - 1.0 for r in accuracy if r["precision"] == "8/32")

    agreement = json.loads((out_dir / "quantization_agreement.json").read_text())
    assert [r["calibrate_mode"] for r in agreement["agreement"]] == list(CALIBRATE_MODES)
    assert agreement["settings"]["num_inputs"] == 8
    speed = json.loads((out_dir / "quantization_speed.json").read_text())["speed"]
    assert [(r["model"], r["threads"]) for r in speed] == [("dqn", 1)]
    assert speed[0]["speedup"] == pytest.approx(speed[0]["fp32_ms"] / speed[0]["int8_ms"])
    assert "calibrate_mode" in (out_dir / "quantization_speed.md").read_text()


def test_reproduce_quantization_bad_target_and_model(capsys, tmp_path):
    argv = ["reproduce", "quantization", "--out", str(tmp_path), "--no-progress"]
    assert cli.main(argv + ["--targets", "opencl"]) == 1
    assert "llvm target only" in capsys.readouterr().err
    assert cli.main(argv + ["--models", "resnet181"]) == 1
    err = capsys.readouterr().err
    assert "unknown model 'resnet181'" in err and "Traceback" not in err
