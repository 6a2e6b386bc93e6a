"""Every model of the zoo on the VM (small shapes), at opt_level 0 and 3, against the reference
interpreter: the vision models, the recurrent cells in both forms (the loop form recurses over
a List), CharRNN (sampling in a recursive loop, emitting a List) and TreeLSTM (a recursion
over a Rose tree through the prelude's map and foldl).

Tolerances as in tests/backends/test_build_zoo.py: the classifiers end in a softmax (most
probabilities near 1/num_classes), compared with ``rtol=1e-4``; the recurrent states are of
order 1. CharRNN's output is a List of int32 indices: compared exactly.
"""

import numpy as np
import pytest

import relaybench as rb
from relaybench.models.nlp import from_list, make_list, make_tree

from vm_testing import run_both

TOL = dict(rtol=1e-4, atol=1e-5)
SMALL_IMAGE = dict(image_shape=(3, 32, 32), num_classes=10)
VISION = {
    "resnet18": SMALL_IMAGE, "resnet34": SMALL_IMAGE, "resnet50": SMALL_IMAGE,
    "vgg16": SMALL_IMAGE, "mobilenet_v2": dict(SMALL_IMAGE, width_multiplier=0.25),
    "dqn": dict(image_shape=(4, 36, 36), num_actions=4), "digits_cnn": {},
}
RECURRENT = dict(batch_size=2, seq_len=3, input_size=6, hidden_size=8)


def test_every_zoo_model_is_covered():
    covered = set(VISION) | {"rnn", "gru", "lstm", "char_rnn", "tree_lstm"}
    assert set(rb.models.list_models()) == covered


def tensor_inputs(mod, params, seed):
    main = rb.passes.InferType()(mod)["main"]
    rng = np.random.default_rng(seed)
    return {p.name_hint: rng.standard_normal(tuple(int(d) for d in p.checked_type.shape))
            .astype(p.checked_type.dtype) for p in main.params if p.name_hint not in params}


@pytest.mark.parametrize("name", sorted(VISION))
def test_vision_model(name):
    mod, params = rb.models.get(name, **VISION[name])
    inputs = tensor_inputs(mod, params, sum(map(ord, name)))
    out = run_both(mod, kwargs=inputs, params=params, **TOL)
    assert out.shape[0] == 1 and np.isfinite(out).all()


@pytest.mark.parametrize("kind", ["rnn", "gru", "lstm"])
def test_recurrent_cells_in_both_forms(kind):
    data = np.random.default_rng(5).standard_normal((3, 2, 6)).astype("float32")
    for form, arg in (("unrolled", data), ("loop", make_list(list(data)))):
        mod, params = rb.models.get(kind, form=form, **RECURRENT)
        state = run_both(mod, (arg,), params=params, **TOL)
        assert all(np.abs(s).max() > 0 for s in (state if isinstance(state, tuple) else (state,)))


def test_char_rnn():
    mod, params = rb.models.get("char_rnn", hidden_size=16, max_length=6)
    category = np.zeros((1, 18), "float32")
    category[0, 3] = 1
    out = run_both(mod, (category, np.int32(26)), params=params)
    letters = from_list(out)
    assert 1 <= len(letters) <= 6 and all(v.dtype == np.int32 for v in letters)


def test_tree_lstm():
    mod, params = rb.models.get("tree_lstm", input_size=5, hidden_size=7)
    rng = np.random.default_rng(3)

    def x():
        return rng.standard_normal((1, 5)).astype("float32")

    leaves = [make_tree(x()) for _ in range(4)]
    tree = make_tree(x(), [make_tree(x(), leaves[:3]), make_tree(x(), leaves[3:])])
    h, c = run_both(mod, (tree,), params=params, **TOL)
    assert h.shape == c.shape == (1, 7)
