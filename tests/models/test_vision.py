"""The vision workloads: types, text round trip, the interpreter against plain numpy, sizes."""

import numpy as np
import pytest

import numpy_vision as nv
import relaybench as rb
from relaybench import models
from relaybench.ir import TensorType, op_histogram

SMALL = {"image_shape": (3, 32, 32), "num_classes": 10}

# name -> (small build kwargs, the numpy network's logits or Q-values)
CASES = {
    "resnet18": (SMALL, lambda d, p: nv.resnet_logits(d, p, (2, 2, 2, 2), bottleneck=False)),
    "resnet34": (SMALL, lambda d, p: nv.resnet_logits(d, p, (3, 4, 6, 3), bottleneck=False)),
    "resnet50": (SMALL, lambda d, p: nv.resnet_logits(d, p, (3, 4, 6, 3), bottleneck=True)),
    "mobilenet_v2": (SMALL, nv.mobilenet_v2_logits),
    "vgg16": (SMALL, nv.vgg16_logits),
    "dqn": ({}, nv.dqn_q_values),
}
CLASSIFIERS = [n for n in CASES if n != "dqn"]


def expected(name, data, params):
    """What @main returns: the classifiers end in a softmax, the DQN gives its Q-values."""
    out = CASES[name][1](data, params)
    return out if name == "dqn" else nv.softmax(out)

_BUILT: dict = {}


def build(name, batch_size=1, **extra):
    """Build once per configuration (the modules are immutable; the arrays are not written)."""
    kwargs = dict(CASES[name][0], **extra)
    key = (name, batch_size, tuple(sorted(kwargs.items())))
    if key not in _BUILT:
        _BUILT[key] = models.get(name, batch_size=batch_size, **kwargs)
    return _BUILT[key]


def input_for(mod, seed=0):
    t = mod["main"].params[0].type_annotation
    rng = np.random.default_rng(seed)
    shape = tuple(int(s) for s in t.shape)
    if shape[1] == 4:                               # DQN: stacked frames in [0, 1)
        return rng.uniform(0.0, 1.0, shape).astype(t.dtype)
    return rng.standard_normal(shape).astype(t.dtype)


def run(mod, data, params):
    return rb.create_executor("interpreter", mod=mod).evaluate()(data, **params)


def assert_close(out, ref):
    """rtol 1e-5, with an absolute floor a millionth of the output's scale."""
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6 * float(np.abs(ref).max()))


# ---------------------------------------------------------------------------------------------
# registry and signature

def test_registry_has_every_vision_model():
    assert set(CASES) <= set(models.list_models())
    mod, params = models.get("dqn", num_actions=4, init_params=False)
    assert params == {}
    assert mod["main"].params[-1].type_annotation.shape == (4,)
    with pytest.raises(KeyError, match="resnet18"):
        models.get("resnet19")


@pytest.mark.parametrize("name", sorted(CASES))
def test_main_takes_data_then_every_weight(name):
    mod, params = build(name)
    names = [p.name_hint for p in mod["main"].params]
    assert names[0] == "data"
    assert names[1:] == list(params)
    for p in mod["main"].params[1:]:
        a = params[p.name_hint]
        assert p.type_annotation == TensorType(a.shape, "float32") and a.dtype == np.float32


# ---------------------------------------------------------------------------------------------
# (1) types, (2) text

@pytest.mark.parametrize("name", sorted(CASES))
def test_type_checks_to_batch_by_classes(name):
    mod, _ = build(name)
    classes = 18 if name == "dqn" else 10
    typed = rb.passes.InferType()(mod)
    assert typed["main"].body.checked_type == TensorType((1, classes), "float32")
    assert typed["main"].checked_type.ret_type == TensorType((1, classes), "float32")


@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v2"])
def test_batch_and_dtype_reach_every_type(name):
    mod, params = models.get(name, batch_size=3, dtype="float16", **SMALL)
    typed = rb.passes.InferType()(mod)
    assert typed["main"].body.checked_type == TensorType((3, 10), "float16")
    assert all(a.dtype == np.float16 for a in params.values())
    assert typed["main"].params[0].checked_type == TensorType((3, 3, 32, 32), "float16")


@pytest.mark.parametrize("name", sorted(CASES))
def test_text_round_trip(name):
    mod, params = build(name)
    text = mod.astext()
    assert "meta[" not in text                 # weights are parameters, not constants
    assert len(text) < 60_000
    back = rb.parse(text)
    assert rb.structural_equal(back, mod)
    assert rb.structural_equal(rb.parse(back.astext()), back)


# ---------------------------------------------------------------------------------------------
# (3) the interpreter against the numpy networks

@pytest.mark.parametrize("name", sorted(CASES))
def test_interpreter_matches_numpy(name):
    mod, params = build(name)
    data = input_for(mod)
    out = run(mod, data, params)
    ref = expected(name, data, params)
    assert out.dtype == np.float32 and out.shape == ref.shape
    assert_close(out, ref)


@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_outputs_are_meaningful_probabilities(name):
    """The weights' scales keep the logits of order one: the softmax neither saturates nor stays
    uniform (each logit differs from the mean by a fair fraction of one)."""
    mod, params = build(name)
    data = input_for(mod)
    logits = CASES[name][1](data, params)
    assert 0.2 < logits.std() < 20
    probs = run(mod, data, params)
    np.testing.assert_allclose(probs.sum(axis=-1), 1.0, rtol=1e-5)
    assert probs.max() < 0.95


def test_batch_of_two_is_two_batches_of_one():
    mod2, params = build("resnet18", batch_size=2)
    mod1, params1 = build("resnet18")
    data = input_for(mod2, seed=3)
    out = run(mod2, data, params)
    assert out.shape == (2, 10)
    assert_close(out, expected("resnet18", data, params))
    for i in range(2):
        np.testing.assert_allclose(run(mod1, data[i:i + 1], params1)[0], out[i], rtol=1e-6, atol=1e-9)
    assert np.abs(out[0] - out[1]).max() > 1e-3


def test_dqn_q_values_follow_the_input():
    mod, params = build("dqn")
    a, b = input_for(mod, seed=1), input_for(mod, seed=2)
    qa, qb = run(mod, a, params), run(mod, b, params)
    assert np.abs(qa - qb).max() > 1e-3 and np.isfinite(qa).all()


# ---------------------------------------------------------------------------------------------
# (4) sizes at ImageNet shape

# torchvision's trainable parameter counts (batch-norm moving statistics are buffers there)
TRAINABLE = {"resnet18": 11_689_512, "resnet34": 21_797_672, "resnet50": 25_557_032,
             "mobilenet_v2": 3_504_872, "vgg16": 138_357_544,
             # Nature DQN, by hand: conv 4*32*8*8+32, 32*64*4*4+64, 64*64*3*3+64; dense 7*7*64*512+512, 512*18+18
             "dqn": (4 * 32 * 64 + 32) + (32 * 64 * 16 + 64) + (64 * 64 * 9 + 64) + (3136 * 512 + 512)
             + (512 * 18 + 18)}


def weight_sizes(mod):
    return {p.name_hint: int(np.prod(p.type_annotation.shape)) for p in mod["main"].params[1:]}


@pytest.mark.parametrize("name", sorted(TRAINABLE))
def test_parameter_count_at_imagenet_size(name):
    mod, params = models.get(name, init_params=False)
    assert params == {}
    sizes = weight_sizes(mod)
    stats = [n for n in sizes if n.endswith(("_moving_mean", "_moving_var"))]
    trainable = sum(s for n, s in sizes.items() if n not in stats)
    assert trainable == TRAINABLE[name]
    # every batch norm has its two statistics, as long as its gamma
    gammas = {n[:-len("_gamma")]: s for n, s in sizes.items() if n.endswith("_gamma")}
    assert len(stats) == 2 * len(gammas)
    assert all(sizes[f"{bn}_moving_mean"] == sizes[f"{bn}_moving_var"] == s for bn, s in gammas.items())
    out = rb.passes.InferType()(mod)["main"].body.checked_type
    assert out == TensorType((1, 18 if name == "dqn" else 1000), "float32")


OPS = {
    "resnet18": {"nn.conv2d": 20, "nn.batch_norm": 20, "nn.relu": 17, "add": 8, "nn.max_pool2d": 1},
    "resnet34": {"nn.conv2d": 36, "nn.batch_norm": 36, "nn.relu": 33, "add": 16, "nn.max_pool2d": 1},
    "resnet50": {"nn.conv2d": 53, "nn.batch_norm": 53, "nn.relu": 49, "add": 16, "nn.max_pool2d": 1},
    "mobilenet_v2": {"nn.conv2d": 52, "nn.batch_norm": 52, "clip": 35, "add": 10},
    "vgg16": {"nn.conv2d": 13, "nn.bias_add": 16, "nn.relu": 15, "nn.max_pool2d": 5, "nn.dense": 3,
              "nn.dropout": 2, "nn.softmax": 1},
    "dqn": {"nn.conv2d": 3, "nn.bias_add": 5, "nn.relu": 4, "nn.dense": 2, "nn.batch_flatten": 1},
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_operator_counts(name):
    hist = op_histogram(build(name)[0])
    for op_name, count in OPS[name].items():
        assert hist[op_name] == count, op_name


def test_mobilenet_v2_depthwise_convolutions_and_width():
    mod, params = build("mobilenet_v2")
    calls = [n for n in rb.ir.post_order(mod["main"]) if isinstance(n, rb.Call)
             and getattr(n.op, "name", "") == "nn.conv2d"]
    depthwise = [c for c in calls if c.attrs.groups > 1]
    assert len(depthwise) == 17
    assert all(c.attrs.groups == c.attrs.channels for c in depthwise)
    assert params["block1_depthwise_weight"].shape == (96, 1, 3, 3)     # 16 channels expanded 6x
    half, _ = models.mobilenet_v2(width_multiplier=0.5, init_params=False, **SMALL)
    wide, _ = models.mobilenet_v2(width_multiplier=1.4, init_params=False, **SMALL)
    hs, ws = weight_sizes(half), weight_sizes(wide)
    assert half["main"].params[1].type_annotation.shape == (16, 3, 3, 3)
    assert hs["conv_last_weight"] == 1280 * 160                      # 320 * 0.5; 1280 kept
    assert ws["conv_last_weight"] == 1792 * 448                      # 320 * 1.4; 1280 * 1.4
    assert rb.passes.InferType()(half)["main"].body.checked_type == TensorType((1, 10), "float32")


# ---------------------------------------------------------------------------------------------
# weights

def test_weights_are_seeded_and_scaled():
    _, a = models.resnet18(**SMALL)
    _, b = models.resnet18(**SMALL)
    _, c = models.resnet18(seed=1, **SMALL)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["conv0_weight"], c["conv0_weight"])
    w = a["stage3_unit1_conv2_weight"]                                  # He: sqrt(2 / (256 * 9))
    assert abs(w.std() / np.sqrt(2 / (256 * 9)) - 1) < 0.05 and abs(w.mean()) < 0.01
    assert abs(a["conv0_weight"].std() / np.sqrt(1 / (3 * 49)) - 1) < 0.1   # unit-variance images
    for k, v in a.items():
        if k.endswith("_moving_var"):
            assert v.min() >= 0.5 and v.max() <= 1.5
        elif k.endswith("_gamma"):
            residual = k.endswith(("_bn2_gamma",)) and k.startswith("stage")
            lo, hi = (0.2, 0.4) if residual else (0.8, 1.2)
            assert lo <= v.min() and v.max() <= hi, k
        elif k.endswith(("_beta", "_moving_mean", "_bias")):
            assert np.abs(v).max() < 1.0


def test_too_small_images_are_refused():
    with pytest.raises(ValueError, match="vgg16"):
        models.vgg16(image_shape=(3, 16, 16), init_params=False)
    with pytest.raises(ValueError, match="dqn"):
        models.dqn(image_shape=(4, 20, 20), init_params=False)
    with pytest.raises(ValueError, match="image_shape"):
        models.resnet18(image_shape=(32, 32), init_params=False)
