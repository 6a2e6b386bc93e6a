"""Helpers for tests and notebooks.

* :func:`assert_structural_equal`: compare two programs, with the path to the first difference.
* :func:`run_infer_type`: a program as ``InferType`` leaves it (Relay's ``run_infer_type``), to
  compare a pass's output with an expected program written without the types inference fills in.
* :func:`chain`: a program of ``n`` chained operators, for scale tests.
* :func:`random_inputs`: numpy arrays for a function's parameters, from their annotations.
* :func:`random_program`: a random well-typed program over every op with a compute
  (``random_programs.py``); :func:`run_differential`: the program on the interpreter and on every
  configuration of :data:`CONFIGS`, compared (``differential.py``); :func:`minimize`: a failing
  program shrunk while it fails (``minimize.py``); :func:`fuzz`: many seeds in worker processes,
  with a summary by failure class (``fuzz.py``, behind ``relaybench fuzz``).

>>> from relaybench.testing import chain, random_inputs
>>> f = chain(4)
>>> [p.name_hint for p in f.params], len(random_inputs(f))
(['x'], 1)
>>> random_inputs(f)[0].shape, random_inputs(f)[0].dtype.name
((4,), 'float32')
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir.structural import assert_structural_equal, first_difference, structural_equal, structural_hash
from .differential import CONFIGS, Config, Outcome, Report, run_differential
from .fuzz import fuzz
from .minimize import minimize, save_failure
from .random_programs import (NOT_GENERATED, OP_GENERATORS, RandomProgram, input_values,
                              random_program, uncovered_ops)

__all__ = ["assert_structural_equal", "structural_equal", "structural_hash", "first_difference",
           "run_infer_type",
           "chain", "random_inputs", "CHAIN_ADD", "CHAIN_MULTIPLY",
           "random_program", "RandomProgram", "OP_GENERATORS", "NOT_GENERATED", "uncovered_ops",
           "input_values", "run_differential", "Config", "CONFIGS", "Outcome", "Report",
           "minimize", "save_failure", "fuzz"]

def run_infer_type(program):
    """``program`` (a Function, an expression or an IRModule) after ``InferType``: its parameters,
    ``let`` variables and return types annotated with what inference finds, as Relay leaves a
    program; the same kind of object comes back.

    Expected programs in pass tests are written without those annotations; a pass's output, typed
    on the way, carries them. Relay's tests compare ``run_infer_type(expected)``; so do ours. A
    program that cannot be typed alone (free variables, globals of another module) is returned as
    it is, to be compared as written.

    >>> import relaybench as rb
    >>> x = rb.var("x", shape=(2,))
    >>> print(run_infer_type(rb.Function([x], rb.op.nn.relu(x))).astext(show_types=False))
    fn (%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
      nn.relu(%x)
    }
    """
    from ..errors import TypeInferenceError
    from ..ir.expr import Expr, Function
    from ..ir.module import IRModule
    from ..ir.type_infer import infer_module
    try:
        if isinstance(program, IRModule):
            return infer_module(program)
        if isinstance(program, Expr):
            body = program if isinstance(program, Function) else Function([], program)
            main = infer_module(IRModule.from_expr(body))["main"]
            return main if isinstance(program, Function) else main.body
    except (TypeInferenceError, ValueError, KeyError):
        pass
    return program


# The constants chain() alternates with: y -> (y + 1) * 0.5 stays bounded (it tends to 1), so a
# chain of any length can also be run and compared numerically.
CHAIN_ADD = 1.0
CHAIN_MULTIPLY = 0.5


def chain(n: int, shape=(4,), dtype: str = "float32"):
    """``fn (%x) { multiply(add(... multiply(add(%x, 1f), 0.5f) ...)) }`` with ``n`` operators.

    Operators alternate ``add`` (with :data:`CHAIN_ADD`) and ``multiply`` (with
    :data:`CHAIN_MULTIPLY`), starting with ``add``; each operator gets its own scalar constant.
    Built without recursion, so ``n`` may be 100,000 or more.
    """
    from .. import op
    from ..ir.builder import const, var
    from ..ir.expr import Function

    if n < 0:
        raise ValueError(f"chain length must be non-negative, got {n}")
    x = var("x", shape=shape, dtype=dtype)
    y = x
    for i in range(n):
        if i % 2 == 0:
            y = op.add(y, const(CHAIN_ADD, dtype))
        else:
            y = op.multiply(y, const(CHAIN_MULTIPLY, dtype))
    return Function([x], y)


def chain_reference(n: int, x: np.ndarray) -> np.ndarray:
    """What :func:`chain` (``n``) computes on ``x``, with numpy, in ``x``'s dtype."""
    y = np.array(x, copy=True)
    add = np.asarray(CHAIN_ADD, dtype=y.dtype)
    mul = np.asarray(CHAIN_MULTIPLY, dtype=y.dtype)
    for i in range(n):
        y = y + add if i % 2 == 0 else y * mul
    return y


def random_inputs(func_or_mod, seed: int = 0, sizes: Optional[dict] = None) -> list:
    """Random numpy arrays for the parameters of a function (or a module's ``@main``).

    Each parameter's type comes from its annotation (or, failing that, its checked type).
    Floats are standard normal, signed ints uniform in [-8, 8), unsigned ints in [0, 8), bools
    fair coins. Tuple-typed parameters get tuples of arrays. Symbolic dimensions take their value
    from ``sizes`` (name -> int); a missing one, or an ``Any`` dimension, raises ValueError naming
    the parameter.

    The same ``seed`` gives the same arrays.
    """
    from ..ir.expr import Function
    from ..ir.module import IRModule
    from ..ir.symbolic import evaluate, free_symvars
    from ..ir.types import TensorType, TupleType

    func = func_or_mod["main"] if isinstance(func_or_mod, IRModule) else func_or_mod
    if not isinstance(func, Function):
        raise TypeError(f"random_inputs needs a Function or an IRModule, got {type(func).__name__}")
    rng = np.random.default_rng(seed)
    sizes = dict(sizes or {})

    def tensor(t: TensorType, where: str) -> np.ndarray:
        shape = []
        for i, d in enumerate(t.shape):
            if isinstance(d, int):
                shape.append(d)
                continue
            names = [v.name for v in free_symvars(d)]
            if not names or any(name not in sizes for name in names):
                raise ValueError(f"{where}: dimension {i} of {t} is not known; "
                                 f"give its size with sizes={{...}}")
            shape.append(evaluate(d, sizes))
        dtype = np.dtype(t.dtype) if t.dtype != "bfloat16" else None
        if dtype is None:
            raise ValueError(f"{where}: numpy has no bfloat16")
        if dtype.kind == "f":
            return rng.standard_normal(shape).astype(dtype)
        if dtype.kind == "i":
            return rng.integers(-8, 8, size=shape).astype(dtype)
        if dtype.kind == "u":
            return rng.integers(0, 8, size=shape).astype(dtype)
        return rng.random(shape) < 0.5

    def value(t, where: str):
        # tuple types nest only as deep as the program's signature wrote them
        if isinstance(t, TensorType):
            return tensor(t, where)
        if isinstance(t, TupleType):
            return tuple(value(f, f"{where}.{i}") for i, f in enumerate(t.fields))
        raise ValueError(f"{where}: cannot make a random value of type {t}")

    out = []
    for p in func.params:
        t = p.type_annotation if p.type_annotation is not None else p.type_or_none
        if t is None:
            raise ValueError(f"parameter %{p.name_hint} has no type: annotate it or run InferType first")
        out.append(value(t, f"parameter %{p.name_hint}"))
    return out
