"""The digits CNN: its split, its trained weights' accuracy on the interpreter and on the graph
executor, the gradient program of its loss against finite differences, and its training."""

import importlib.util
import json

import numpy as np
import pytest

pytest.importorskip("sklearn")

import numpy_vision as nv
import relaybench as rb
from relaybench import models
from relaybench.experiments import digits as ex
from relaybench.models import digits as dg

NAMES = ["conv1_weight", "conv1_bias", "conv2_weight", "conv2_bias", "conv3_weight", "conv3_bias",
         "fc_weight", "fc_bias"]


@pytest.fixture(scope="module")
def split():
    return dg.load_digits_split()


@pytest.fixture(scope="module")
def trained():
    return models.digits_cnn(batch_size=1)[1]


@pytest.fixture(scope="module")
def note():
    return dg.digits_weights_info()


def numpy_logits(data, params):
    """The network written again in float64 numpy (im2col convolutions of numpy_vision)."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    x = data.astype(np.float64)
    x = nv.relu(nv.conv2d(x, p["conv1_weight"], p["conv1_bias"], pad=1))
    x = nv.relu(nv.conv2d(x, p["conv2_weight"], p["conv2_bias"], pad=1))
    x = nv.max_pool(x, 2, 2, 0)
    x = nv.relu(nv.conv2d(x, p["conv3_weight"], p["conv3_bias"], pad=1))
    return nv.dense(x.reshape(len(x), -1), p["fc_weight"], p["fc_bias"])


def numpy_loss(data, labels, params):
    z = numpy_logits(data, params)
    z = z - z.max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -log_p[np.arange(len(labels)), labels].mean()


# ---------------------------------------------------------------------------------------------
# the data split


def test_split_is_deterministic_disjoint_and_stratified(split):
    from sklearn.datasets import load_digits
    again = dg.load_digits_split()
    np.testing.assert_array_equal(split.test_index, again.test_index)
    np.testing.assert_array_equal(split.x_train, again.x_train)
    assert len(split.test_index) == 360 and len(split.train_index) == 1437
    assert not set(split.test_index) & set(split.train_index)
    assert sorted(np.concatenate([split.test_index, split.train_index])) == list(range(1797))
    # the arrays are scikit-learn's images over 16, NCHW float32
    raw = load_digits()
    assert split.x_test.shape == (360, 1, 8, 8) and split.x_test.dtype == np.float32
    np.testing.assert_array_equal(split.x_test[:, 0], raw.images[split.test_index] / 16.0)
    np.testing.assert_array_equal(split.y_train, raw.target[split.train_index])
    # every class gives a fifth of its images, to within one
    for cls in range(10):
        members = int((raw.target == cls).sum())
        assert abs(int((split.y_test == cls).sum()) - members * 0.2) < 1.0
    other = dg.load_digits_split(seed=1)
    assert not np.array_equal(other.test_index, split.test_index)


def test_split_rejects_a_bad_fraction():
    with pytest.raises(ValueError, match="test_fraction"):
        dg.load_digits_split(test_fraction=1.5)


# ---------------------------------------------------------------------------------------------
# the zoo entry and its weights


def test_registered_with_trained_weights(trained, note):
    assert "digits_cnn" in models.list_models()
    mod, params = models.get("digits_cnn", batch_size=4)
    assert [p.name_hint for p in mod["main"].params] == ["data"] + NAMES
    assert list(params) == NAMES
    assert sum(a.size for a in params.values()) == 19178
    for p in mod["main"].params[1:]:
        assert p.type_annotation == rb.ir.TensorType(params[p.name_hint].shape, "float32")
    assert rb.passes.InferType()(mod)["main"].body.checked_type == rb.ir.TensorType((4, 10), "float32")
    with np.load(dg._data_file(dg.DIGITS_WEIGHTS)) as saved:
        for name in NAMES:
            np.testing.assert_array_equal(trained[name], saved[name])
    # the untrained start is seeded
    _, a = models.digits_cnn(pretrained=False, seed=3)
    _, b = models.digits_cnn(pretrained=False, seed=3)
    assert all(np.array_equal(a[n], b[n]) for n in NAMES)
    assert not np.array_equal(a["conv1_weight"], trained["conv1_weight"])
    assert note["model"] == "digits_cnn" and note["test_accuracy"] >= 0.97


def test_note_names_the_test_split(split, note):
    assert note["test_split_fingerprint"] == split.fingerprint()
    assert note["test_images"] == len(split.y_test) == 360
    assert "train-digits" in note["command"] and "gradient" in note["trained_by"]


def test_missing_weights_say_how_to_train_them(monkeypatch, tmp_path):
    monkeypatch.setattr(dg, "_data_file", lambda name: tmp_path / name)
    with pytest.raises(FileNotFoundError, match="train-digits"):
        models.digits_cnn()
    mod, params = models.digits_cnn(pretrained=False)   # random weights need no file
    assert list(params) == NAMES


def test_softmax_output_is_the_softmax_of_the_logits(split, trained):
    data = split.x_test[:5]
    mod, _ = models.digits_cnn(batch_size=5)
    out = rb.create_executor("interpreter", mod=mod).evaluate()(data, *[trained[n] for n in NAMES])
    np.testing.assert_allclose(out, nv.softmax(numpy_logits(data, trained)), rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# accuracy of the trained weights on the held-apart split


def test_interpreter_reaches_the_recorded_accuracy(split, trained, note):
    mod, _ = models.digits_cnn(batch_size=len(split.y_test), softmax=False)
    run = rb.create_executor("interpreter", mod=mod).evaluate()
    logits = run(split.x_test, *[trained[n] for n in NAMES])
    reference = numpy_logits(split.x_test, trained)
    np.testing.assert_allclose(logits, reference, rtol=1e-4, atol=1e-4 * np.abs(reference).max())
    accuracy = float(np.mean(np.argmax(logits, axis=1) == split.y_test))
    assert accuracy == float(np.mean(np.argmax(reference, axis=1) == split.y_test))
    assert abs(accuracy - note["test_accuracy"]) <= 0.005
    assert accuracy >= 0.97


@pytest.mark.parametrize("batch_size", [360, 64])
def test_compiled_model_reaches_the_recorded_accuracy(split, trained, note, batch_size):
    """All 360 test images through rb.build (llvm): one batch, or batches of 64 with the last
    one padded."""
    predictions = ex.predict_digits(split.x_test, trained, "llvm", batch_size=batch_size)
    assert predictions.shape == (360,)
    expected = np.argmax(numpy_logits(split.x_test, trained), axis=1)
    assert np.mean(predictions == expected) >= 0.995     # ties may go either way in float32
    accuracy = float(np.mean(predictions == split.y_test))
    assert abs(accuracy - note["test_accuracy"]) <= 0.005
    assert accuracy >= 0.97


def test_compiled_logits_match_numpy(split, trained):
    mod, params = models.digits_cnn(batch_size=32, softmax=False)
    lib = rb.build(mod, target="llvm", params=params, opt_level=3)
    out = lib.run(data=split.x_test[:32])
    ref = numpy_logits(split.x_test[:32], trained)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


# ---------------------------------------------------------------------------------------------
# the gradient program of the loss


# (weight, index) checked by finite differences: one entry of every layer
PROBES = [("conv1_weight", (3, 0, 1, 2)), ("conv1_bias", (7,)), ("conv2_weight", (5, 11, 0, 1)),
          ("conv2_bias", (20,)), ("conv3_weight", (9, 30, 2, 2)), ("conv3_bias", (4,)),
          ("fc_weight", (6, 200)), ("fc_bias", (1,))]


def _finite_differences(data, labels, params, step=1e-6):
    out = {}
    for name, index in PROBES:
        plus = {k: v.astype(np.float64).copy() for k, v in params.items()}
        minus = {k: v.astype(np.float64).copy() for k, v in params.items()}
        plus[name][index] += step
        minus[name][index] -= step
        out[name, index] = (numpy_loss(data, labels, plus) - numpy_loss(data, labels, minus)) / (2 * step)
    return out


@pytest.fixture(scope="module")
def gradient_case(split):
    """Eight training images and the untrained weights (their loss is far from zero)."""
    data, labels = split.x_train[:8], split.y_train[:8]
    _, params = models.digits_cnn(pretrained=False, seed=0)
    return data, labels, params, _finite_differences(data, labels, params)


def test_loss_program_is_softmax_cross_entropy(gradient_case):
    data, labels, params, _ = gradient_case
    mod, names = ex.loss_module(8)
    run = rb.create_executor("interpreter", mod=mod).evaluate()
    loss = run(data, np.eye(10, dtype=np.float32)[labels], *[params[n] for n in names])
    np.testing.assert_allclose(loss, numpy_loss(data, labels, params), rtol=1e-5)


def test_gradient_matches_finite_differences_in_float64(gradient_case):
    data, labels, params, numeric = gradient_case
    mod, names = ex.loss_gradient_module(8, "float64")
    assert names == NAMES
    run = rb.create_executor("interpreter", mod=mod).evaluate()
    loss, grads = run(data.astype(np.float64), np.eye(10)[labels],
                      *[params[n].astype(np.float64) for n in names])
    np.testing.assert_allclose(loss, numpy_loss(data, labels, params), rtol=1e-12)
    assert len(grads) == len(NAMES)
    for (name, index), expected in numeric.items():
        g = grads[NAMES.index(name)]
        assert g.shape == params[name].shape
        np.testing.assert_allclose(g[index], expected, rtol=1e-5, atol=1e-8, err_msg=name)


def test_compiled_gradient_matches_finite_differences(gradient_case):
    """The float32 program the training runs, compiled by rb.build for llvm."""
    data, labels, params, numeric = gradient_case
    mod, names = ex.loss_gradient_module(8)
    lib = rb.build(mod, target="llvm", opt_level=3)
    loss, grads = lib.run(data=data, label=np.eye(10, dtype=np.float32)[labels],
                          **{n: params[n] for n in names})
    np.testing.assert_allclose(loss, numpy_loss(data, labels, params), rtol=1e-5)
    scale = max(abs(v) for v in numeric.values())
    for (name, index), expected in numeric.items():
        np.testing.assert_allclose(grads[NAMES.index(name)][index], expected, rtol=1e-3,
                                   atol=1e-4 * scale, err_msg=name)


# ---------------------------------------------------------------------------------------------
# training


def test_training_is_deterministic_and_lowers_the_loss(split):
    first = ex.train_digits(epochs=2, batch_size=32, train_limit=256)
    second = ex.train_digits(epochs=2, batch_size=32, train_limit=256)
    for name in NAMES:
        np.testing.assert_array_equal(first.params[name], second.params[name])
    _, start = models.digits_cnn(pretrained=False, seed=0)
    before = numpy_loss(split.x_train[:256], split.y_train[:256], start)
    after = numpy_loss(split.x_train[:256], split.y_train[:256], first.params)
    assert after < 0.5 * before
    assert [r["epoch"] for r in first.history] == [1, 2]
    assert first.history[1]["loss"] < first.history[0]["loss"]
    assert len(first.table().rows) == 2
    if importlib.util.find_spec("matplotlib") is not None:
        figure = first.plot()
        assert [ax.get_ylabel() for ax in figure.axes] == ["training loss", "test accuracy (%)"]


def test_training_on_the_interpreter_agrees_with_the_compiled_run():
    compiled = ex.train_digits(epochs=1, batch_size=32, train_limit=64)
    interpreted = ex.train_digits(epochs=1, batch_size=32, train_limit=64, executor="interpreter")
    for name in NAMES:
        np.testing.assert_allclose(interpreted.params[name], compiled.params[name], rtol=1e-3,
                                   atol=1e-5, err_msg=name)


def test_training_rejects_too_few_images():
    with pytest.raises(ValueError, match="fewer than one batch"):
        ex.train_digits(epochs=1, batch_size=64, train_limit=10)


def test_cli_trains_and_writes_weights_and_note(tmp_path, split, capsys):
    from relaybench.cli import main
    assert main(["train-digits", "--epochs", "1", "--batch-size", "64", "--out", str(tmp_path)]) == 0
    assert "test accuracy" in capsys.readouterr().out
    note = json.loads((tmp_path / "digits_cnn.json").read_text())
    assert note["epochs"] == 1 and note["batch_size"] == 64 and note["seed"] == 0
    assert note["test_split_fingerprint"] == split.fingerprint()
    with np.load(tmp_path / "digits_cnn.npz") as saved:
        params = {n: saved[n] for n in NAMES}
    accuracy = float(np.mean(np.argmax(numpy_logits(split.x_test, params), 1) == split.y_test))
    assert abs(accuracy - note["test_accuracy"]) <= 0.005
