"""The benchmarks' peers compute the same function as relaybench's zoo.

``bench/torch_models.py`` rebuilds ResNet-18, MobileNet V2, VGG-16 and the DQN in PyTorch; with
relaybench's weights loaded, the PyTorch module and the ONNX file exported from it must agree with
relaybench's reference interpreter, or ``bench/vision.py`` would compare different computations.
"""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

NEEDS_BENCH = "the benchmark peers need the bench extra: pip install -e '.[bench]'"
torch = pytest.importorskip("torch", reason=NEEDS_BENCH)
ort = pytest.importorskip("onnxruntime", reason=NEEDS_BENCH)
pytest.importorskip("onnx", reason=NEEDS_BENCH)

import relaybench as rb  # noqa: E402
from relaybench import models  # noqa: E402


def _load_torch_models():
    path = Path(__file__).resolve().parents[2] / "bench" / "torch_models.py"
    spec = importlib.util.spec_from_file_location("bench_torch_models", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tm = _load_torch_models()

# (zoo name, keyword arguments shared by both builders, input shape); small images keep it fast
CASES = [
    ("resnet18", {"image_shape": (3, 32, 32), "num_classes": 10}, (1, 3, 32, 32)),
    ("mobilenet_v2", {"image_shape": (3, 32, 32), "num_classes": 10}, (1, 3, 32, 32)),
    ("vgg16", {"image_shape": (3, 32, 32), "num_classes": 10}, (1, 3, 32, 32)),
    ("dqn", {"image_shape": (4, 84, 84), "num_actions": 18}, (1, 4, 84, 84)),
]


def _input(name, shape):
    rng = np.random.default_rng(7)
    if name == "dqn":   # frames in [0, 1]
        return rng.uniform(0.0, 1.0, shape).astype("float32")
    return rng.standard_normal(shape).astype("float32")


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def case(request):
    name, kwargs, shape = request.param
    mod, params = getattr(models, name)(**kwargs)
    data = _input(name, shape)
    expected = rb.create_executor("interpreter", mod=mod).evaluate()(data, **params)
    net = tm.load_params(tm.build(name, **kwargs), params)
    return name, net, data, np.asarray(expected)


def _check(actual, expected):
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-6)


def test_reference_output_is_informative(case):
    """The comparison would prove little on a constant or one-hot output."""
    name, _, _, expected = case
    assert expected.dtype == np.float32 and np.all(np.isfinite(expected))
    if name == "dqn":
        assert expected.shape == (1, 18) and np.ptp(expected) > 0.1
    else:
        assert expected.shape == (1, 10)
        np.testing.assert_allclose(expected.sum(), 1.0, rtol=1e-5)
        assert 0.12 < expected.max() < 0.9    # far from uniform (0.1) and from one-hot


def test_torch_module_matches_interpreter(case):
    _, net, data, expected = case
    with torch.no_grad():
        actual = net(torch.from_numpy(data)).numpy()
    _check(actual, expected)


def test_onnx_export_matches_interpreter(case, tmp_path):
    name, net, data, expected = case
    path = tm.export_onnx(net, data, tmp_path / f"{name}.onnx")
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["data"]
    actual = session.run(None, {"data": data})[0]
    _check(actual, expected)


def test_batch_norm_epsilon_matters():
    """The ResNet's epsilon (2e-5) against the default (1e-5): with a moving variance of the
    epsilon's size in the first batch norm (its gamma scaled so activations keep their size) the
    difference shows, so the match above really checks the epsilon."""
    kwargs = {"image_shape": (3, 32, 32), "num_classes": 10}
    mod, params = models.resnet18(**kwargs)
    params = dict(params, bn0_moving_var=np.full(64, 1e-5, "float32"),
                  bn0_gamma=(params["bn0_gamma"] * np.sqrt(3e-5)).astype("float32"))
    data = _input("resnet18", (1, 3, 32, 32))
    expected = rb.create_executor("interpreter", mod=mod).evaluate()(data, **params)
    net = tm.load_params(tm.build("resnet18", **kwargs), params)
    with torch.no_grad():
        _check(net(torch.from_numpy(data)).numpy(), expected)
        for layer in net.modules():
            if isinstance(layer, torch.nn.BatchNorm2d):
                layer.eps = 1e-5
        wrong = net(torch.from_numpy(data)).numpy()
    assert not np.allclose(wrong, expected, rtol=1e-4, atol=1e-6)


def test_load_params_refuses_mismatches():
    kwargs = {"image_shape": (3, 32, 32), "num_classes": 10}
    _, params = models.resnet18(**kwargs)
    with pytest.raises(ValueError, match="stage1_unit1_conv1_weight"):
        bad = dict(params, stage1_unit1_conv1_weight=np.zeros((64, 64, 1, 1), "float32"))
        tm.load_params(tm.build("resnet18", **kwargs), bad)
    with pytest.raises(ValueError, match="does not fill"):
        tm.load_params(tm.build("resnet18", **kwargs), {k: v for k, v in params.items() if k != "bn0_beta"})
    with pytest.raises(KeyError, match="extra_weight"):
        tm.load_params(tm.build("resnet18", **kwargs), dict(params, extra_weight=np.zeros(3, "float32")))
    with pytest.raises(ValueError, match="no PyTorch twin"):
        tm.build("resnet50")
