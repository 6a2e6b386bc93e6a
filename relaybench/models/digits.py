"""A small CNN for scikit-learn's handwritten digits, with weights trained by the project.

The zoo's other workloads carry seeded random weights; this one carries trained weights, so the
passes that change numerics (quantization above all) can be judged by accuracy on real data.
The data set is scikit-learn's ``load_digits``: 1,797 grey 8x8 images of the digits 0 to 9, pixel
values 0 to 16. :func:`load_digits_split` divides it the same way every time (stratified 80/20,
seeded), scales the pixels to [0, 1] and shapes them NCHW ``(N, 1, 8, 8)`` float32; the test split
never takes part in training.

The network, :func:`digits_cnn`::

    data (N, 1, 8, 8)
    conv1   3x3, 1 -> 16, pad 1, bias, ReLU        (N, 16, 8, 8)
    conv2   3x3, 16 -> 32, pad 1, bias, ReLU       (N, 32, 8, 8)
    max_pool2d 2x2, stride 2                       (N, 32, 4, 4)
    conv3   3x3, 32 -> 32, pad 1, bias, ReLU       (N, 32, 4, 4)
    batch_flatten                                  (N, 512)
    fc      dense 512 -> 10, bias                  (N, 10) logits
    softmax (unless softmax=False)

19,178 parameters; three convolutions and one dense layer for quantization to act on. The
weights ship in ``relaybench/models/data/digits_cnn.npz`` with ``digits_cnn.json`` beside them,
which records how they were trained (command, seed, epochs, optimizer, accuracy).
``relaybench train-digits`` (:func:`relaybench.experiments.train_digits`) trains them again with
the project's own Gradient pass.

>>> import relaybench as rb
>>> from relaybench import models
>>> mod, params = models.digits_cnn(batch_size=4, softmax=False)
>>> rb.passes.InferType()(mod)["main"].body.checked_type
Tensor[(4, 10), float32]
>>> [name for name in params][:3], params["fc_weight"].shape
(['conv1_weight', 'conv1_bias', 'conv2_weight'], (10, 512))
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from importlib import resources

import numpy as np

from .. import op
from ._registry import register_model
from .vision import _conv, _data, _dense, _Weights

__all__ = ["digits_cnn", "load_digits_split", "DigitsSplit", "digits_weights_info",
           "DIGITS_WEIGHTS", "DIGITS_NOTE"]

IMAGE_SHAPE = (1, 8, 8)
NUM_CLASSES = 10

# the trained weights and their note, inside the package (see pyproject's package-data)
DIGITS_WEIGHTS = "digits_cnn.npz"
DIGITS_NOTE = "digits_cnn.json"


def _data_file(name: str):
    return resources.files("relaybench.models") / "data" / name


# ---------------------------------------------------------------------------------------------
# the data set


@dataclass(frozen=True)
class DigitsSplit:
    """The digits divided into a training and a held-apart test split.

    ``x_*`` are float32 ``(N, 1, 8, 8)`` in [0, 1] (the pixels divided by 16), ``y_*`` int64
    labels, ``train_index`` / ``test_index`` the rows of ``load_digits()`` each split took (sorted).
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    train_index: np.ndarray
    test_index: np.ndarray
    seed: int

    def fingerprint(self) -> str:
        """A short hash of the test split's rows: the weights' note records it, so a test can tell
        that the accuracy is measured on the split the weights never saw."""
        return hashlib.sha256(self.test_index.astype("<i8").tobytes()).hexdigest()[:16]


def _load_digits():
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ImportError("the digits data set comes from scikit-learn: pip install scikit-learn "
                          "(or relaybench[test])") from None
    bunch = load_digits()
    return np.asarray(bunch.images), np.asarray(bunch.target)


def _stratified_test_rows(labels: np.ndarray, test_fraction: float, seed: int) -> np.ndarray:
    """Rows for the test split: ``ceil(test_fraction * N)`` in all, each class contributing in
    proportion to its size (largest remainders get the rows left over, ties to the smaller
    class label), drawn per class from ``numpy.random.default_rng(seed)``.

    Written out here rather than taken from ``sklearn.model_selection`` so that the split, and
    with it the recorded accuracy, does not move with a scikit-learn release."""
    n = len(labels)
    n_test = math.ceil(test_fraction * n)
    classes, counts = np.unique(labels, return_counts=True)
    exact = counts * (n_test / n)
    take = np.floor(exact).astype(int)
    order = sorted(range(len(classes)), key=lambda i: (-(exact[i] - take[i]), classes[i]))
    for i in order[:n_test - int(take.sum())]:
        take[i] += 1
    rng = np.random.default_rng(seed)
    rows = []
    for cls, k in zip(classes, take):
        members = np.flatnonzero(labels == cls)
        rows.append(rng.permutation(members)[:k])
    return np.sort(np.concatenate(rows))


def load_digits_split(seed: int = 0, test_fraction: float = 0.2) -> DigitsSplit:
    """scikit-learn's digits, split the same way for the same ``seed`` (stratified, 360 test
    images of 1,797 at the default 0.2), scaled to [0, 1], NCHW float32.

    >>> split = load_digits_split()
    >>> split.x_train.shape, split.x_test.shape, float(split.x_test.max())
    ((1437, 1, 8, 8), (360, 1, 8, 8), 1.0)
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"load_digits_split: test_fraction must be in (0, 1), got {test_fraction}")
    images, labels = _load_digits()
    test = _stratified_test_rows(labels, test_fraction, seed)
    train = np.setdiff1d(np.arange(len(labels)), test)
    x = (images.astype(np.float32) / np.float32(16.0)).reshape((-1,) + IMAGE_SHAPE)
    y = labels.astype(np.int64)
    return DigitsSplit(x[train], y[train], x[test], y[test], train, test, seed)


# ---------------------------------------------------------------------------------------------
# the network


def digits_weights_info() -> dict:
    """The note saved with the trained weights: how they were trained and their accuracy."""
    path = _data_file(DIGITS_NOTE)
    if not path.is_file():
        raise FileNotFoundError(f"digits_cnn: no training note at {path}; train the weights with "
                                f"`relaybench train-digits`")
    return json.loads(path.read_text())


def _trained_params(names: list, dtype: str) -> dict:
    path = _data_file(DIGITS_WEIGHTS)
    if not path.is_file():
        raise FileNotFoundError(f"digits_cnn: no trained weights at {path}; train them with "
                                f"`relaybench train-digits`, or pass pretrained=False")
    with path.open("rb") as f, np.load(f) as saved:
        missing = [n for n in names if n not in saved.files]
        if missing:
            raise ValueError(f"digits_cnn: {path.name} lacks the weights {', '.join(missing)}")
        return {n: saved[n].astype(dtype) for n in names}


@register_model
def digits_cnn(batch_size: int = 1, dtype: str = "float32", seed: int = 0, softmax: bool = True,
               pretrained: bool = True, init_params: bool = True):
    """The digits CNN (see the module docstring): ``@main(%data, %conv1_weight, ...)``.

    ``pretrained=True`` gives the trained weights shipped with the package (``seed`` is then
    unused); ``pretrained=False`` draws He-normal weights from ``seed``, which is where training
    starts. ``softmax=False`` returns the logits; ``init_params=False`` builds the module alone.
    """
    w = _Weights(dtype)
    data = _data(batch_size, IMAGE_SHAPE, dtype)
    # the pixels are in [0, 1] with mean square about 0.2
    x = op.nn.relu(_conv(w, data, "conv1", 1, 16, 3, padding=1, bias=True, input_moment=0.2))
    x = op.nn.relu(_conv(w, x, "conv2", 16, 32, 3, padding=1, bias=True))
    x = op.nn.max_pool2d(x, pool_size=(2, 2), strides=(2, 2))
    x = op.nn.relu(_conv(w, x, "conv3", 32, 32, 3, padding=1, bias=True))
    x = op.nn.batch_flatten(x)
    x = _dense(w, x, "fc", 32 * 4 * 4, NUM_CLASSES, last=True)
    if softmax:
        x = op.nn.softmax(x)
    mod = w.module(data, x)
    if not init_params:
        return mod, {}
    if pretrained:
        return mod, _trained_params([v.name_hint for v in w.vars], dtype)
    return mod, w.params(seed)
