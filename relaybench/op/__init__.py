"""Relay's operators, one OpDef each, grouped by family; ``op.add``, ``op.nn.conv2d``...

>>> from relaybench import op
>>> "nn.conv2d" in op.list_ops()
True

``op.table()`` lists the registered operators; ``op.missing()`` lists the operators of Relay
v0.14 that are not registered yet, each with a word on why (:data:`RELAY_MISSING`).

Each operator's attributes (pattern kind, compute, layout rules, target policies) live in an
attribute registry with levels and scopes that users and targets extend: see
:mod:`relaybench.op.registry` (``register_op_attr``, ``get_op_attr``, ``attr_scope``,
``register_op``...).
"""

from .registry import (OpAttrContext, OpDef, OpPattern, attr_scope, get_op_attr, get_opdef, list_ops,  # noqa: F401
                       lookup_opdef, op_attr_registrations, register, register_alter_op_layout,
                       register_compute, register_convert_op_layout, register_infer_correct_layout,
                       register_legalize, register_op, register_op_attr, register_pattern,
                       register_shape_func, table)
from . import tensor  # noqa: F401  (registers on import)
from .tensor import *  # noqa: F401,F403
from . import nn, transform  # noqa: F401,E402
from .transform import *  # noqa: F401,F403
from . import reduce  # noqa: F401,E402
from .reduce import *  # noqa: F401,F403,E402
from . import image  # noqa: F401,E402
from . import annotation  # noqa: F401,E402
from . import winograd  # noqa: F401,E402
from . import shape_funcs  # noqa: F401,E402  (the FShapeFunc of every op, level 0)
from ._relay_ops import RELAY_MISSING, missing  # noqa: F401,E402
