"""Neural-network operators (``nn.*``)."""

from __future__ import annotations

import numpy as np

from .registry import OpDef, OpPattern, register
from .tensor import identity_rel

__all__ = ["relu"]

relu = register(OpDef("nn.relu", ("data",), identity_rel, OpPattern.ELEMWISE,
                      reference=lambda x, attrs: np.maximum(x, 0).astype(x.dtype), doc="max(x, 0)."))
