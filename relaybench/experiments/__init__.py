"""Reproductions of the Relay paper's experiments; each returns a result with ``.table()`` and
``.plot()``.

* :func:`composability` (``experiments/composability.py``): the speedup from enabling Relay's
  optimization passes one after another, on the paper's vision workloads.
"""

from .composability import (CONFIGURATIONS, PASS_ORDER, ComposabilityResult, OutputMismatchError,
                            composability)

__all__ = ["composability", "ComposabilityResult", "OutputMismatchError", "CONFIGURATIONS",
           "PASS_ORDER"]
