"""Relay's operators, one OpDef each, grouped by family; ``op.add``, ``op.nn.conv2d``...

>>> from relaybench import op
>>> "nn.conv2d" in op.list_ops()
True
"""

from .registry import OpDef, OpPattern, get_opdef, list_ops, lookup_opdef, register, table  # noqa: F401
from . import tensor  # noqa: F401  (registers on import)
from .tensor import *  # noqa: F401,F403
from . import nn, transform  # noqa: F401,E402
from .transform import *  # noqa: F401,F403
from . import reduce  # noqa: F401,E402
from .reduce import *  # noqa: F401,F403,E402
from . import image  # noqa: F401,E402
