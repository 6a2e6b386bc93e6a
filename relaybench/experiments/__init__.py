"""Reproductions of the Relay paper's experiments; each returns a result with ``.table()`` and
``.plot()``.

* :func:`composability` (``experiments/composability.py``): the speedup from enabling Relay's
  optimization passes one after another, on the paper's vision workloads.
* :func:`train_digits` (``experiments/digits.py``): trains the zoo's digits CNN on scikit-learn's
  handwritten digits with the project's Gradient pass; ``relaybench train-digits``.
* :func:`quantization` (``experiments/quantization.py``): int8 against float32: accuracy on the
  digits' test split per calibrate mode, agreement on the zoo, speed;
  ``relaybench reproduce quantization``.
* :func:`accelerator` (``experiments/accelerator.py``): ResNets on the CPU only against the
  simulated VTA-like designs (single- and multi-batch), bit-exact, simulated and measured time
  per image side by side; ``relaybench reproduce accelerator``.
"""

from .composability import (CONFIGURATIONS, PASS_ORDER, ComposabilityResult, OutputMismatchError,
                            composability)
from .accelerator import AcceleratorMismatchError, AcceleratorResult, accelerator
from .quantization import (QuantizationResult, digits_accuracy_table, quantization,
                           quantization_speed, zoo_agreement)

__all__ = ["composability", "ComposabilityResult", "OutputMismatchError", "CONFIGURATIONS",
           "PASS_ORDER", "train_digits", "DigitsTrainingResult", "quantization",
           "QuantizationResult", "digits_accuracy_table", "zoo_agreement", "quantization_speed",
           "accelerator", "AcceleratorResult", "AcceleratorMismatchError"]


def __getattr__(name: str):
    # digits.py is loaded on first use, so `python -m relaybench.experiments.digits` runs it fresh
    if name in ("train_digits", "DigitsTrainingResult"):
        from . import digits
        return getattr(digits, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
