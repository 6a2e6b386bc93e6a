"""``create_executor(kind, mod, target)``: Relay's interface to run a module.

>>> import numpy as np, relaybench as rb
>>> x = rb.var("x", shape=(3,))
>>> mod = rb.IRModule.from_expr(rb.Function([x], x + x))
>>> rb.create_executor("interpreter", mod=mod).evaluate()(np.ones(3, "float32"))
array([2., 2., 2.], dtype=float32)
"""

from __future__ import annotations

from typing import Optional

from ..ir.expr import Expr
from ..ir.module import IRModule


class Executor:
    """Runs expressions of a module. ``evaluate()`` gives ``@main`` as a Python function."""

    def __init__(self, mod: Optional[IRModule], target=None):
        self.mod = mod if mod is not None else IRModule()
        self.target = target

    def evaluate(self, expr: Optional[Expr] = None, binds: Optional[dict] = None):
        raise NotImplementedError


class InterpreterExecutor(Executor):
    """The reference interpreter. The module is type-checked first, as in Relay."""

    def __init__(self, mod: Optional[IRModule], target=None):
        super().__init__(mod, target)
        from ..passes import InferType
        from .interpreter import Interpreter
        if len(self.mod):
            self.mod = InferType()(self.mod)
        self._interp = Interpreter(self.mod)

    def evaluate(self, expr: Optional[Expr] = None, binds: Optional[dict] = None):
        if expr is not None and not isinstance(expr, IRModule):
            from ..ir.expr import GlobalVar
            if not isinstance(expr, GlobalVar):
                from ..ir.type_infer import infer_expr
                infer_expr(expr, self.mod)
        return self._interp.evaluate(expr, binds)


_KINDS = {"interpreter": InterpreterExecutor, "debug": InterpreterExecutor}


def create_executor(kind: str = "interpreter", mod: Optional[IRModule] = None, device=None, target=None):
    """An executor of ``kind`` for ``mod``: ``"interpreter"`` now; ``"graph"`` and ``"vm"`` as they land."""
    try:
        cls = _KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown executor kind {kind!r}; available: {', '.join(sorted(_KINDS))}") from None
    return cls(mod, target)
