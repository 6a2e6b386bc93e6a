"""The paper's workloads, built with the builder and seeded random weights, and a small CNN
with trained weights for scikit-learn's handwritten digits (``digits_cnn``).

``relaybench.models.NAME(batch_size=1, ...)`` and ``relaybench.models.get(NAME)`` both return
``(mod, params)``: a module whose ``@main`` takes the input(s) then the weights, and a dict from
weight name to numpy array.
"""

from ._registry import ModelSummary, Table, get, list_models, register_model, summary  # noqa: F401
from .vision import *  # noqa: F401,F403
from .nlp import *  # noqa: F401,F403
from .digits import *  # noqa: F401,F403
