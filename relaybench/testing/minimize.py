"""Shrink a failing program while its failure persists, and save it as Relay text.

:func:`minimize` takes a program, a configuration of :data:`~.differential.CONFIGS` (or any
:class:`~.differential.Config`) and the failure it shows there, and tries smaller candidates:

1. for a program that :func:`~.random_programs.random_program` made from a seed, the program
   of that seed regenerated with every dimension capped lower (``max_dim`` 1, 2, ...);
2. dropping outputs: ``@main`` returning one field of its tuple, the tuple less one field, or
   one intermediate value;
3. dropping ops: a call's (or a tuple field's) result replaced by one of its inputs of the same
   type, or by a fresh parameter of that type;
4. parameters no longer used are removed.

A candidate that is not well typed is rejected (inference runs on each), and one is kept only if
the same failure (:func:`failure_key`) shows again; steps 2 to 4 repeat until none applies. The
result saved by :func:`save_failure` is a full module whose header comments give the failure and
the command that reproduces it (``relaybench fuzz --replay FILE``).

>>> from relaybench.testing.differential import Config
>>> from relaybench.testing import random_program
>>> def fails_on_exp(case):     # a configuration that "crashes" whenever exp is present
...     if "exp(" in case.mod.astext():
...         raise RuntimeError("exp is here")
...     return reference_result(case)
>>> fake = Config("fake", "fails on exp", fails_on_exp)
>>> prog = random_program(3, ops=["exp", "add", "multiply", "nn.relu"], min_ops=10)
>>> small = minimize(prog.mod, fake, program_seed=3, max_seconds=60)
>>> [n for n in _op_calls(small)]
['exp']
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Optional

from ..ir.expr import Call, Function, Op, Tuple, TupleGetItem, Var
from ..ir.functor import ExprMutator, post_order
from ..ir.module import IRModule
from ..ir.types import TensorType
from .differential import CONFIGS, Config, reference_result, run_differential

__all__ = ["minimize", "failure_key", "save_failure", "reproduce_command"]


def failure_key(report) -> Optional[str]:
    """What must stay the same while shrinking: the first failure's class, with a mismatch's op
    set left out (dropping ops changes it). None when the report has no failure."""
    if not report.failures:
        return None
    o = report.failures[0]
    if o.status == "mismatch":
        return f"{o.config}: mismatch"
    return o.failure_class()


def _op_calls(mod: IRModule) -> list:
    return [n.op.name for n in post_order(mod["main"].body)
            if isinstance(n, Call) and isinstance(n.op, Op)]


def _size(mod: IRModule) -> tuple:
    main = mod["main"]
    elements = 0
    for p in main.params:
        t = p.type_annotation
        if isinstance(t, TensorType):
            n = 1
            for d in t.shape:
                n *= d if isinstance(d, int) else 1
            elements += n
    return (len(_op_calls(mod)), len(post_order(main.body)), len(main.params), elements)


def _rebuild(main: Function, body, extra_params=()) -> Optional[IRModule]:
    """``@main`` with ``body``, keeping the parameters it still uses; None if not well typed."""
    from ..ir.analysis import free_vars
    from ..passes import InferType
    used = {id(v) for v in free_vars(body)}
    params = [p for p in list(main.params) + list(extra_params) if id(p) in used]
    try:
        return InferType()(IRModule.from_expr(Function(params, body)))
    except Exception:  # not well typed: the candidate is rejected
        return None


def _substitute(body, old, new):
    m = ExprMutator()
    m.memo[old] = new
    return m.visit(body)


def _candidates(mod: IRModule, fresh_count: list):
    """Smaller programs, most promising first (lazily)."""
    main = mod["main"]
    body = main.body
    if isinstance(body, Tuple) and len(body.fields) > 1:
        for f in body.fields:
            yield _rebuild(main, f)
        for i in range(len(body.fields)):
            rest = [f for j, f in enumerate(body.fields) if j != i]
            yield _rebuild(main, rest[0] if len(rest) == 1 else Tuple(rest))
    nodes = [n for n in post_order(body) if isinstance(n, (Call, TupleGetItem))
             and not (isinstance(n, Call) and not isinstance(n.op, Op))]
    for node in nodes:                     # an intermediate value as the only output
        if node is not body and isinstance(node.type_or_none, TensorType):
            yield _rebuild(main, node)
    for node in reversed(nodes):           # from the outputs back to the inputs
        t = node.type_or_none
        if isinstance(node, Call):
            for a in node.args:
                at = a.type_or_none
                if at is not None and t is not None and _same_type(at, t):
                    yield _rebuild(main, _substitute(body, node, a))
        if isinstance(t, TensorType):
            fresh_count[0] += 1
            v = Var(f"x_{900 + fresh_count[0]}", t)
            yield _rebuild(main, _substitute(body, node, v), [v])


def _same_type(a, b) -> bool:
    from ..ir.structural import structural_equal
    return structural_equal(a, b)


def minimize(mod: IRModule, config, failure: Optional[str] = None, *, seed: int = 0,
             program_seed: Optional[int] = None, max_seconds: float = 300.0,
             check: Optional[Callable[[IRModule], Optional[str]]] = None,
             log: Optional[Callable[[str], None]] = None) -> IRModule:
    """The smallest program found that still fails on ``config`` with ``failure`` (a
    :func:`failure_key`; by default the one ``mod`` shows now).

    ``seed`` picks the input values; ``program_seed``, when ``mod`` came from
    ``random_program(program_seed)``, lets its shapes shrink by regeneration. The search stops
    after about ``max_seconds`` with the best found. ``check(mod)`` (for tests) replaces the
    differential run: it returns the failure key of a program, or None.
    """
    cfg = CONFIGS[config] if isinstance(config, str) else config
    deadline = time.monotonic() + max_seconds
    say = log or (lambda message: None)

    def key_of(candidate: IRModule) -> Optional[str]:
        if check is not None:
            return check(candidate)
        try:
            return failure_key(run_differential(candidate, seed=seed, configs=[cfg]))
        except Exception as err:  # the inputs could not be made: not this failure
            return f"error {type(err).__name__}"

    if failure is None:
        failure = key_of(mod)
        if failure is None:
            raise ValueError(f"the program does not fail on {cfg.name}")
    best = mod
    if program_seed is not None:
        from .random_programs import random_program
        for max_dim in range(1, 8):
            if time.monotonic() > deadline:
                break
            try:
                small = random_program(program_seed, max_dim=max_dim).mod
            except Exception:
                continue
            if _size(small) < _size(best) and key_of(small) == failure:
                say(f"shapes capped at {max_dim}")
                best = small
                break
    fresh = [0]
    changed = True
    while changed and time.monotonic() < deadline:
        changed = False
        for candidate in _candidates(best, fresh):
            if time.monotonic() > deadline:
                break
            if candidate is None or _size(candidate) >= _size(best):
                continue
            if key_of(candidate) == failure:
                best = candidate
                say(f"{len(_op_calls(best))} ops")
                changed = True
                break
    return best


def reproduce_command(path, config: str) -> str:
    return f"relaybench fuzz --replay {path} --configs {config}"


def save_failure(mod: IRModule, path, config: str, failure: str, seed: int = 0,
                 note: str = "") -> Path:
    """Write ``mod`` as Relay text to ``path`` with header comments: the failure, the
    configuration and the command that reproduces it. Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"// {failure}",
             f"// reproduce: {reproduce_command(path, config)}"
             + (f" --input-seed {seed}" if seed else "")]
    if note:
        lines += [f"// {line}" for line in note.splitlines()]
    text = mod.astext(show_types=False) if _printable_without_types(mod) else mod.astext()
    path.write_text("\n".join(lines) + "\n" + text + ("" if text.endswith("\n") else "\n"),
                    encoding="utf-8")
    return path


def _printable_without_types(mod: IRModule) -> bool:
    try:
        from ..ir.parser import parse
        parse(mod.astext(show_types=False))
        return True
    except Exception:
        return False
