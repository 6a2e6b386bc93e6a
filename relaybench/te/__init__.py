"""The kernel layer: tensor expressions, schedules, and lowering to the loop IR.

A kernel is described as tensor expressions (:func:`placeholder`, :func:`compute`, reductions
over :func:`reduce_axis`), scheduled (:func:`create_schedule`: split, reorder, fuse, vectorize,
parallel, unroll, tensorize, compute_inline, compute_at, cache_write) and lowered
(:func:`lower`) to a :class:`~relaybench.te.loop_ir.PrimFunc` that every code generator reads, and
that :func:`evaluate` runs on numpy arrays as the reference.

>>> import numpy as np
>>> from relaybench import te
>>> X = te.placeholder((2, 3), name="X")
>>> Y = te.compute((2, 3), lambda i, j: te.maximum(X[i, j], 0.0), name="relu")
>>> func = te.lower([Y], [X], name="relu")
>>> print(func)
def relu(X: Buffer((2, 3), "float32"), relu: Buffer((2, 3), "float32")):
    for i in serial(2):
        for j in serial(3):
            relu[i, j] = max(X[i, j], 0.0)
>>> x = np.array([[-1, 2, -3], [4, -5, 6]], "float32")
>>> y = np.empty_like(x)
>>> te.evaluate(func, x, y)
>>> y.tolist()
[[0.0, 2.0, 0.0], [4.0, 0.0, 6.0]]
"""

from relaybench.te import loop_ir
from relaybench.te.compute import (abs, cast, ceil, compute, erf, exp, floor, fmod, if_then_else,
                                   log, max, max_value, maximum, min, min_value, minimum,
                                   placeholder, power, prod, reduce_axis, round, rsqrt, sigmoid,
                                   sqrt, sum, tanh)
from relaybench.te.loop_ir import PrimFunc, evaluate, logical_and, logical_not, logical_or
from relaybench.te.lower import ComputeAtError, lower
from relaybench.te.schedule import Schedule, Stage, create_schedule
from relaybench.te.tensor import IterVar, Tensor

__all__ = [
    "loop_ir", "placeholder", "compute", "reduce_axis", "sum", "prod", "max", "min", "if_then_else",
    "cast", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "abs", "floor", "ceil",
    "round", "power", "fmod", "maximum", "minimum", "max_value", "min_value", "lower", "evaluate",
    "create_schedule", "Schedule", "Stage", "PrimFunc", "Tensor", "IterVar", "logical_and",
    "logical_or", "logical_not", "ComputeAtError",
]
