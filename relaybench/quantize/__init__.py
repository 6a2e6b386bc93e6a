"""Quantization (Relay's ``relay.quantize``): annotate, calibrate, realize.

``quantize(mod, params, dataset)`` runs the whole of it under the current :func:`qconfig`:

>>> import numpy as np, relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(1, 4), float32], %w: Tensor[(2, 4), float32]) {
...   nn.dense(%x, %w, units=2)
... }''')
>>> w = np.array([[0.5, -1, 0.25, 2], [1, 1, 1, 1]], "float32")
>>> with rb.quantize.qconfig(skip_dense_layer=False, skip_conv_layers=None, global_scale=4.0):
...     qmod = rb.quantize.quantize(mod, params={"w": w})
>>> [p.name_hint for p in qmod["main"].params]
['x']
>>> x = np.array([[1.0, 2.0, -1.5, 0.5]], "float32")
>>> rb.create_executor("interpreter", mod=qmod).evaluate()(x)
array([[-0.8828125,  2.       ]], dtype=float32)

The passes: :func:`QuantizeAnnotate` (simulated_quantize calls placed by per-operator rules),
:func:`QuantizeCalibrate` (their scales), :func:`QuantizeRealize` (integer arithmetic), each
registered with the pass infrastructure (``rb.passes.QuantizeAnnotate`` finds it too).
"""

from .qconfig import QAnnotateKind, QConfig, QCONFIG_DEFAULTS, current_qconfig, qconfig  # noqa: F401
from .annotate import QuantizeAnnotate  # noqa: F401
from .calibrate import QuantizeCalibrate  # noqa: F401
from .realize import QuantizeRealize  # noqa: F401
from ._pipeline import prerequisite_optimize, quantize  # noqa: F401

__all__ = ["qconfig", "current_qconfig", "QConfig", "QAnnotateKind", "QuantizeAnnotate",
           "QuantizeCalibrate", "QuantizeRealize", "quantize", "prerequisite_optimize"]
