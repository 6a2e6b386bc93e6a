"""Search spaces, the cost model and the annealing, on hand-made spaces with known answers."""

import numpy as np
import pytest

from relaybench.autotune.model import GradientBoostedTrees, anneal, config_features
from relaybench.autotune.space import ConfigSpace, Workload
from relaybench.backends.strategy import x86


def _space():
    space = ConfigSpace("t")
    space.define_knob("tile", [1, 2, 4, 8], default=4)
    space.define_knob("order", ["a", "b", "c"])
    space.define_knob("unroll", [False, True])
    space.constraint = lambda c: c["tile"] != 8 or not c["unroll"]
    return space


def test_configs_are_numbered_in_mixed_radix():
    space = _space()
    assert len(space) == 24
    assert space.get(0) == {"tile": 1, "order": "a", "unroll": False}
    assert space.get(23) == {"tile": 8, "order": "c", "unroll": True}
    assert [space.index_of(space.get(i)) for i in range(24)] == list(range(24))
    assert not space.valid(space.get(23)) and space.valid(space.get(22))
    with pytest.raises(IndexError, match="outside the space"):
        space.get(24)


def test_a_config_from_an_older_space_is_completed_with_defaults():
    space = _space()
    assert space.complete({"tile": 2, "gone": 1}) == {"tile": 2, "order": "a", "unroll": False}
    assert space.complete({"tile": 3})["tile"] == 4     # not a value of the knob


def test_boosted_trees_learn_a_step_and_a_product():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, size=(200, 2))
    y = np.where(x[:, 0] > 0.5, 2.0, 0.0) + np.where(x[:, 1] > 0.3, 1.0, 0.0)
    model = GradientBoostedTrees(rounds=60).fit(x, y)
    test = np.array([[0.2, 0.1], [0.8, 0.1], [0.2, 0.9], [0.9, 0.9]])
    np.testing.assert_allclose(model.predict(test), [0.0, 2.0, 1.0, 3.0], atol=0.1)


def test_annealing_finds_the_best_valid_config_of_a_known_score():
    space = _space()
    rng = np.random.default_rng(1)
    # the best config by the score is invalid (tile 8 unrolled): the best valid one must win
    def score(c):
        return np.log2(c["tile"]) + (c["order"] == "b") + 0.5 * c["unroll"]
    best = anneal(space, score, rng, 3, set(), [])
    assert best[0] == {"tile": 8, "order": "b", "unroll": False} or \
        best[0] == {"tile": 4, "order": "b", "unroll": True}
    assert all(space.valid(c) for c in best)
    assert score(best[0]) == 4.0
    features = config_features(space, space.get(5))
    assert features.shape[0] == 1 + 3 + 1   # tile (log2), order (one-hot), unroll


def test_x86_spaces_default_to_the_hand_picked_rule(monkeypatch):
    monkeypatch.setattr(x86, "narrow_host", lambda: False)     # a host with AVX-512
    w = Workload("conv2d_NCHWc", ((1, 4, 56, 56, 16), (4, 4, 3, 3, 16, 16)),
                 ("float32", "float32"), (1, 4, 56, 56, 16), "float32",
                 (("padding", (1, 1, 1, 1)), ("strides", (1, 1))))
    space = x86.space_of(w)
    assert space.default()["tile_ow"] == x86.conv_width_tile(56) == 14
    assert space.default()["tile_oc"] == 1
    assert all(c["tile_ow"] * c["tile_oc"] <= x86.MAX_TILE_REGISTERS
               for c in (space.get(i) for i in range(len(space))) if space.valid(c))
    narrow = Workload("conv2d_NCHWc", w.arg_shapes, w.arg_dtypes, (1, 32, 7, 7, 16), "float32",
                      w.attrs)
    assert x86.space_of(narrow).default()["tile_oc"] == 2     # two blocks for 7 columns
    dense = Workload("dense", ((1, 512), (1000, 512)), ("float32", "float32"), (1, 1000),
                     "float32")
    assert x86.space_of(dense).knobs[0].values == (16, 32, 64, 128)
    assert Workload.from_json(w.to_json()) == w
    # 16 vector registers (no AVX-512): 2 columns x 2 channel blocks, 4 columns for odd blocks,
    # where the convolution sums few products per output value (8 channels x 3 x 3); with more
    # the image is computed over its pixels, 6 at a time
    monkeypatch.setattr(x86, "narrow_host", lambda: True)
    few = Workload("conv2d_NCHWc", ((1, 1, 56, 56, 8), (4, 1, 3, 3, 8, 16)), w.arg_dtypes,
                   (1, 4, 56, 56, 16), "float32", w.attrs)
    assert (x86.space_of(few).default()["tile_ow"], x86.space_of(few).default()["tile_oc"]) == \
        (2, 2)
    odd = Workload("conv2d_NCHWc", few.arg_shapes, w.arg_dtypes, (1, 3, 56, 56, 16), "float32",
                   w.attrs)
    assert (x86.space_of(odd).default()["tile_ow"], x86.space_of(odd).default()["tile_oc"]) == (4, 1)
    assert [x86.space_of(w).default()[k] for k in ("plane", "tile_ow", "tile_oc")] == [True, 6, 1]
