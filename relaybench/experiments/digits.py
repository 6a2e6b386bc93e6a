"""Training the zoo's digits CNN with the project's own automatic differentiation.

The loss is a Relay program: the network's logits (:func:`relaybench.models.digits_cnn` with
``softmax=False``), then softmax cross-entropy against one-hot labels, averaged over the batch::

    fn (%data, %label, %conv1_weight, ..., %fc_bias) {
      mean(negative(sum(multiply(%label, nn.log_softmax(logits)), axis=[1])))
    }

:func:`relaybench.passes.gradient` (first-order reverse mode) turns it into
``fn (...) -> (loss, (d/d%data, d/d%label, d/d%conv1_weight, ...))``; :func:`loss_gradient_module`
keeps the loss and the weights' adjoints only, so dead-code elimination drops the adjoints of the
data and the labels. Every operator of the network has a gradient rule (``nn.conv2d`` through a
transposed convolution, ``nn.max_pool2d`` through window masks, ``nn.log_softmax``...), and the
gradient program is static dataflow, so it is compiled with ``rb.build`` for the LLVM target and run
on the graph executor (``executor="interpreter"`` runs the same program on the reference
interpreter, slower). The optimizer is Adam, written in numpy, over shuffled minibatches; the
last incomplete batch of an epoch is left out (each epoch shuffles differently, so every image is
still seen). Everything is seeded: the initial weights (``digits_cnn(pretrained=False,
seed=seed)``), the split and the order of the batches.

:func:`train_digits` returns a :class:`DigitsTrainingResult` (``.table()`` of the epochs,
``.plot()``, ``.save()`` of the weights and their note); ``relaybench train-digits`` is the same
from the command line and writes the weights the zoo ships.

>>> from relaybench.experiments.digits import loss_gradient_module
>>> mod, names = loss_gradient_module(batch_size=8)
>>> names[:2], len(mod["main"].params)
(['conv1_weight', 'conv1_bias'], 10)
"""

from __future__ import annotations

import functools
import json
import platform
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from .. import op
from .._table import Table
from ..ir.builder import var
from ..ir.expr import Function, Tuple, TupleGetItem
from ..ir.module import IRModule
from ..models.digits import (DIGITS_NOTE, DIGITS_WEIGHTS, NUM_CLASSES, digits_cnn,
                             load_digits_split)

__all__ = ["train_digits", "DigitsTrainingResult", "loss_module", "loss_gradient_module",
           "predict_digits", "digits_accuracy"]

# the settings that train the shipped weights (the CLI's defaults)
DEFAULTS = {"epochs": 20, "batch_size": 32, "learning_rate": 2e-3, "seed": 0}


# ---------------------------------------------------------------------------------------------
# the loss and its gradient as Relay programs


def loss_module(batch_size: int, dtype: str = "float32"):
    """``(mod, weight_names)``: ``@main(%data, %label, *weights)`` is the mean softmax
    cross-entropy of the digits CNN's logits against the one-hot ``%label`` ``(N, 10)``."""
    net, _ = digits_cnn(batch_size=batch_size, dtype=dtype, softmax=False, init_params=False)
    main = net["main"]
    data, weights = main.params[0], list(main.params[1:])
    label = var("label", shape=(batch_size, NUM_CLASSES), dtype=dtype)
    picked = op.sum(op.multiply(label, op.nn.log_softmax(main.body, axis=-1)), axis=[1])
    loss = op.mean(op.negative(picked))
    func = Function([data, label] + weights, loss)
    return IRModule.from_expr(func), [w.name_hint for w in weights]


def loss_gradient_module(batch_size: int, dtype: str = "float32"):
    """``(mod, weight_names)``: ``@main(%data, %label, *weights) -> (loss, (dloss/dw, ...))``,
    one adjoint per weight in ``weight_names``' order, made by the Gradient pass from
    :func:`loss_module`."""
    from ..passes.gradient import gradient
    mod, names = loss_module(batch_size, dtype)
    grad = gradient(mod["main"], mod)
    adjoints = TupleGetItem(grad.body, 1)
    skip = 2                                  # the data's and the labels' adjoints
    body = Tuple([TupleGetItem(grad.body, 0),
                  Tuple([TupleGetItem(adjoints, skip + i) for i in range(len(names))])])
    return IRModule.from_expr(Function(grad.params, body)), names


# ---------------------------------------------------------------------------------------------
# running programs on batches


def _runner(mod, executor: str, num_threads: Optional[int] = None) -> Callable:
    """A function of ``@main``'s arguments by name, on the graph executor (``"llvm"``) or on the
    reference interpreter (``"interpreter"``)."""
    if executor == "llvm":
        from ..backends.build import build
        lib = build(mod, target="llvm", opt_level=3, num_threads=num_threads)
        return lambda **inputs: lib.run(**inputs)
    if executor == "interpreter":
        from ..backends.executor import create_executor
        run = create_executor("interpreter", mod=mod).evaluate()
        order = [p.name_hint for p in mod["main"].params]
        return lambda **inputs: run(*[inputs[n] for n in order])
    raise ValueError(f"executor is 'llvm' or 'interpreter', not {executor!r}")


@functools.lru_cache(maxsize=8)
def _classifier(batch_size: int, executor: str) -> Callable:
    """The digits CNN's logits for a batch of ``batch_size``, built once per executor."""
    mod, _ = digits_cnn(batch_size=batch_size, softmax=False, init_params=False)
    return _runner(mod, executor)


def predict_digits(images: np.ndarray, params: dict, executor: str = "llvm",
                   batch_size: Optional[int] = None) -> np.ndarray:
    """The predicted class of every image ``(N, 1, 8, 8)``: the argmax of the digits CNN's
    logits with ``params``, in batches of ``batch_size`` (default: all at once); a last short
    batch is padded with zeros and its padding dropped."""
    n = len(images)
    batch_size = int(batch_size or n)
    run = _classifier(batch_size, executor)
    out = []
    for start in range(0, n, batch_size):
        chunk = images[start:start + batch_size]
        short = batch_size - len(chunk)
        if short:
            chunk = np.concatenate([chunk, np.zeros((short,) + chunk.shape[1:], chunk.dtype)])
        scores = np.asarray(run(data=chunk, **params))
        out.append(np.argmax(scores, axis=-1)[:batch_size - short])
    return np.concatenate(out)


def digits_accuracy(images: np.ndarray, labels: np.ndarray, params: dict, executor: str = "llvm",
                    batch_size: Optional[int] = None) -> float:
    """The fraction of ``images`` the digits CNN with ``params`` classifies as ``labels``."""
    predictions = predict_digits(images, params, executor, batch_size)
    return float(np.mean(predictions == np.asarray(labels)))


# ---------------------------------------------------------------------------------------------
# the result


class DigitsTrainingResult:
    """What :func:`train_digits` produced: ``params`` (name -> float32 array), ``history`` (one
    row per epoch: mean training loss, training and test accuracy, seconds), ``test_accuracy``
    (of the final weights on the held-apart split) and ``settings``."""

    def __init__(self, params: dict, history: list, settings: dict, test_accuracy: float,
                 train_accuracy: float, test_fingerprint: str, seconds: float):
        self.params = params
        self.history = history
        self.settings = settings
        self.test_accuracy = test_accuracy
        self.train_accuracy = train_accuracy
        self.test_fingerprint = test_fingerprint
        self.seconds = seconds

    def table(self) -> Table:
        """One row per epoch."""
        return Table([{"epoch": r["epoch"], "loss": f"{r['loss']:.4f}",
                       "train accuracy": f"{100 * r['train_accuracy']:.2f}%",
                       "test accuracy": f"{100 * r['test_accuracy']:.2f}%",
                       "seconds": f"{r['seconds']:.2f}"} for r in self.history])

    def plot(self):
        """The training loss and the test accuracy by epoch, as a matplotlib Figure."""
        try:
            from matplotlib.figure import Figure
        except ImportError as err:
            raise ImportError("DigitsTrainingResult.plot needs matplotlib "
                              "(pip install matplotlib)") from err
        epochs = [r["epoch"] for r in self.history]
        fig = Figure(figsize=(7.0, 3.4), layout="constrained")
        left, right = fig.subplots(1, 2)
        left.plot(epochs, [r["loss"] for r in self.history])
        left.set(xlabel="epoch", ylabel="training loss", yscale="log")
        right.plot(epochs, [100 * r["test_accuracy"] for r in self.history])
        right.set(xlabel="epoch", ylabel="test accuracy (%)")
        return fig

    def note(self) -> dict:
        """How the weights were trained, as the JSON note saved beside them."""
        s = self.settings
        command = (f"relaybench train-digits --epochs {s['epochs']} --batch-size {s['batch_size']} "
                   f"--learning-rate {s['learning_rate']} --seed {s['seed']} "
                   f"--executor {s['executor']}")
        return {
            "model": "digits_cnn",
            "command": command,
            "data": "sklearn.datasets.load_digits, pixels / 16, NCHW (N, 1, 8, 8) float32; "
                    "stratified split, 1437 train / 360 test "
                    "(relaybench.models.digits.load_digits_split(seed))",
            "test_split_fingerprint": self.test_fingerprint,
            "trained_by": "relaybench.passes.gradient (first-order reverse mode) of the Relay "
                          "softmax cross-entropy loss, "
                          + ("compiled with rb.build (llvm) and run on the graph executor"
                             if s["executor"] == "llvm" else "run on the reference interpreter")
                          + "; Adam in numpy",
            "optimizer": {"name": "adam", "learning_rate": s["learning_rate"], "beta1": 0.9,
                          "beta2": 0.999, "epsilon": 1e-8},
            "seed": s["seed"], "epochs": s["epochs"], "batch_size": s["batch_size"],
            "train_accuracy": round(self.train_accuracy, 6),
            "test_accuracy": round(self.test_accuracy, 6),
            "test_images": int(s["test_images"]),
            "training_seconds": round(self.seconds, 1),
            "machine": platform.machine(),
        }

    def save(self, directory) -> tuple:
        """Write ``digits_cnn.npz`` and ``digits_cnn.json`` into ``directory``; returns both paths."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        weights, note = directory / DIGITS_WEIGHTS, directory / DIGITS_NOTE
        np.savez_compressed(weights, **self.params)
        note.write_text(json.dumps(self.note(), indent=2) + "\n")
        return weights, note

    def __repr__(self) -> str:
        return (f"DigitsTrainingResult(epochs={len(self.history)}, "
                f"test_accuracy={self.test_accuracy:.4f})")


# ---------------------------------------------------------------------------------------------
# training


def train_digits(epochs: int = DEFAULTS["epochs"], batch_size: int = DEFAULTS["batch_size"],
                 learning_rate: float = DEFAULTS["learning_rate"], seed: int = DEFAULTS["seed"],
                 executor: str = "llvm", num_threads: Optional[int] = None,
                 train_limit: Optional[int] = None,
                 progress: Optional[Callable[[str], None]] = None) -> DigitsTrainingResult:
    """Train the digits CNN from ``digits_cnn(pretrained=False, seed=seed)`` with Adam on the
    gradient program of :func:`loss_gradient_module` (see the module docstring).

    ``executor`` runs the gradient program (``"llvm"``: compiled, graph executor;
    ``"interpreter"``); ``train_limit`` trains on the first that many training images only (for
    quick checks); ``progress`` receives one line per epoch.
    """
    if epochs < 1 or batch_size < 1:
        raise ValueError(f"train_digits: epochs and batch_size must be positive, got {epochs}, "
                         f"{batch_size}")
    start = time.perf_counter()
    split = load_digits_split(seed=seed)
    x_train, y_train = split.x_train, split.y_train
    if train_limit is not None:
        x_train, y_train = x_train[:train_limit], y_train[:train_limit]
    if len(x_train) < batch_size:
        raise ValueError(f"train_digits: {len(x_train)} training images, fewer than one batch "
                         f"of {batch_size}")
    onehot = np.eye(NUM_CLASSES, dtype=np.float32)[y_train]

    mod, names = loss_gradient_module(batch_size)
    step = _runner(mod, executor, num_threads)
    _, params = digits_cnn(pretrained=False, seed=seed)
    params = {n: params[n].astype(np.float32) for n in names}
    m = {n: np.zeros_like(p) for n, p in params.items()}
    v = {n: np.zeros_like(p) for n, p in params.items()}
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    rng = np.random.default_rng(seed)
    history, t = [], 0
    for epoch in range(1, epochs + 1):
        began = time.perf_counter()
        order = rng.permutation(len(x_train))
        losses = []
        for b in range(len(order) // batch_size):
            rows = order[b * batch_size:(b + 1) * batch_size]
            loss, grads = step(data=x_train[rows], label=onehot[rows], **params)
            losses.append(float(loss))
            t += 1
            correction = np.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
            for name, g in zip(names, grads):
                m[name] = beta1 * m[name] + (1 - beta1) * g
                v[name] = beta2 * v[name] + (1 - beta2) * g * g
                update = learning_rate * correction * m[name] / (np.sqrt(v[name]) + eps)
                params[name] = (params[name] - update).astype(np.float32)
        row = {"epoch": epoch, "loss": float(np.mean(losses)),
               "train_accuracy": digits_accuracy(x_train, y_train, params),
               "test_accuracy": digits_accuracy(split.x_test, split.y_test, params),
               "seconds": time.perf_counter() - began}
        history.append(row)
        if progress is not None:
            progress(f"epoch {epoch:3d}  loss {row['loss']:.4f}  train {100 * row['train_accuracy']:.2f}%"
                     f"  test {100 * row['test_accuracy']:.2f}%  ({row['seconds']:.1f} s)")
    settings = {"epochs": epochs, "batch_size": batch_size, "learning_rate": learning_rate,
                "seed": seed, "executor": executor, "train_images": len(x_train),
                "test_images": len(split.x_test)}
    return DigitsTrainingResult(params, history, settings, history[-1]["test_accuracy"],
                                history[-1]["train_accuracy"], split.fingerprint(),
                                time.perf_counter() - start)


def main(argv=None) -> int:
    """``python -m relaybench.experiments.digits``: the same as ``relaybench train-digits``."""
    from ..cli import main as cli_main
    return cli_main(["train-digits"] + list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    raise SystemExit(main())
