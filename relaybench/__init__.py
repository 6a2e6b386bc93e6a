"""relaybench: the Relay deep-learning compiler in Python, as a research workbench.

>>> import relaybench as rb
>>> from relaybench import op
>>> x = rb.var("x", shape=(1, 3), dtype="float32")
>>> mod = rb.IRModule.from_expr(rb.Function([x], op.nn.relu(x)))
>>> mod = rb.passes.InferType()(mod)
>>> mod["main"].body.checked_type
Tensor[(1, 3), float32]
"""

from . import errors
from .ir import (ANY, Call, Clause, Constant, Constructor, Function, GlobalVar, If, IRModule, Let, Match,
                 Op, PatternConstructor, PatternTuple, PatternVar, PatternWildcard, RefCreate, RefRead,
                 RefWrite, ScopeBuilder, SymVar, TensorType, Tuple, TupleGetItem, TupleType, Var, const,
                 define_adt, var)

__version__ = "0.1.0"

_LAZY = {
    "op": ("relaybench.op", None),
    "passes": ("relaybench.passes", None),
    "frontends": ("relaybench.frontends", None),
    "quantize": ("relaybench.quantize", None),
    "autotune": ("relaybench.autotune", None),
    "config": ("relaybench.config", None),
    "PassContext": ("relaybench.passes.infra", "PassContext"),
    "models": ("relaybench.models", None),
    "ir": ("relaybench.ir", None),
    "create_executor": ("relaybench.backends.executor", "create_executor"),
    "build": ("relaybench.backends.build", "build"),
    "vm": ("relaybench.backends.vm", None),
    "aot": ("relaybench.backends.aot", None),
    "adt": ("relaybench.adt", None),
    "viz": ("relaybench.viz", None),
    "experiments": ("relaybench.experiments", None),
    "testing": ("relaybench.testing", None),
    "parse": ("relaybench.ir.parser", "parse"),
    "bind": ("relaybench.ir.builder", "bind"),
    "structural_equal": ("relaybench.ir.structural", "structural_equal"),
    "structural_hash": ("relaybench.ir.structural", "structural_hash"),
    "assert_structural_equal": ("relaybench.ir.structural", "assert_structural_equal"),
}


def __getattr__(name):
    import importlib
    if name in _LAZY:
        module, attr = _LAZY[name]
        mod = importlib.import_module(module)
        value = mod if attr is None else getattr(mod, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'relaybench' has no attribute {name!r}")
