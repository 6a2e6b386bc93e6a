"""Which config a strategy uses for a workload: the dispatch contexts (AutoTVM's
``DispatchContext``, ``ApplyHistoryBest``, ``ApplyConfig``).

A strategy with knobs asks :func:`config_for` while it builds a kernel. The innermost active
context that knows the workload answers; then the log named by the ``RB_AUTOTUNE_LOG`` knob, if
set; else the space's default config (the strategy's hand-picked rule). Contexts are held in a
:mod:`contextvars` variable, so they are scoped like ``config.Context``.

>>> from relaybench.autotune.space import ConfigSpace, Workload
>>> space = ConfigSpace("t"); space.define_knob("tile", [1, 2, 4], default=4)
>>> w = Workload("t", ((8,),), ("float32",), (8,), "float32")
>>> config_for(w, space)
{'tile': 4}
>>> with ApplyConfig({w.key: {"tile": 2}}):
...     config_for(w, space)
{'tile': 2}
"""

from __future__ import annotations

import contextvars
from pathlib import Path

__all__ = ["DispatchContext", "ApplyConfig", "ApplyHistoryBest", "apply_history_best",
           "config_for", "current_context"]

_stack: contextvars.ContextVar[tuple] = contextvars.ContextVar("relaybench_autotune_dispatch",
                                                               default=())


class DispatchContext:
    """A source of configs, active inside ``with``. ``used`` records, per workload key, the config
    this context gave (what a build really compiled)."""

    def __init__(self):
        self.used: dict = {}
        self._tokens: list = []

    def lookup(self, workload) -> dict | None:
        raise NotImplementedError

    def __enter__(self):
        self._tokens.append(_stack.set(_stack.get() + (self,)))
        return self

    def __exit__(self, *exc_info) -> None:
        _stack.reset(self._tokens.pop())


class ApplyConfig(DispatchContext):
    """Fixed configs: a dict from workload key (or template name, for every workload of it) to a
    config. What a measurement compiles a candidate with."""

    def __init__(self, configs: dict):
        super().__init__()
        self.configs = dict(configs)

    def lookup(self, workload):
        return self.configs.get(workload.key, self.configs.get(workload.template))


class ApplyHistoryBest(DispatchContext):
    """The fastest config measured per workload in a tuning log (records that failed or were
    measured where the worker's CPU did not match the target's are skipped)."""

    def __init__(self, records):
        super().__init__()
        from .record import best_by_workload, load_records
        source = None
        if isinstance(records, (str, Path)) or (isinstance(records, (list, tuple)) and records
                                               and isinstance(records[0], (str, Path))):
            source = records
            records = load_records(records)
        self.best = best_by_workload(records)
        _warn_other_registers(self.best.values(), source)

    def lookup(self, workload):
        record = self.best.get(workload.key)
        return record.config if record is not None else None

    def __len__(self) -> int:
        return len(self.best)

    def __repr__(self) -> str:
        return f"ApplyHistoryBest({len(self.best)} workloads)"


def _warn_other_registers(records, source) -> None:
    """Warn when every record was measured on a CPU whose vector registers are not this host's
    (AVX-512's 32 or not): its register tiles were chosen for those and may spill here. The
    shipped logs of the other kind are never applied by default (see ``shipped_logs``)."""
    from .shipped import _has_avx512, host_cpu
    kinds = {_has_avx512(r.cpu) for r in records if r.cpu}
    if len(kinds) != 1:
        return
    try:
        wide = _has_avx512(host_cpu())
    except Exception:   # no llvmlite: nothing is compiled here
        return
    (measured,) = kinds
    if measured != wide:
        import warnings
        what = f"tuning log {source}" if source is not None else "these tuning records"
        have = "with AVX-512 (32 vector registers)" if measured else "without AVX-512"
        host = "this host has none" if measured else "this host has AVX-512"
        warnings.warn(f"{what} was measured on a CPU {have}; {host}, so its register tiles "
                      "may not suit it (tune here, or leave RB_AUTOTUNE_LOG=shipped, which "
                      "applies only logs of this host's kind)", stacklevel=4)


def apply_history_best(log) -> ApplyHistoryBest:
    """A context that builds with the best config of each workload in ``log`` (a JSON-lines
    path, a list of paths, or records) and the default config elsewhere::

        with rb.autotune.apply_history_best("tuning.jsonl"):
            lib = rb.build(mod, target="llvm", params=params)
    """
    return ApplyHistoryBest(log)


_knob_logs: dict = {}


def _knob_logs_stamp():
    """``(RB_AUTOTUNE_LOG, its files' paths and modification times)``, or None when unset."""
    from .. import config
    path = str(config.get("RB_AUTOTUNE_LOG") or "").strip()
    if not path:
        return None
    if path == "shipped":
        from .shipped import shipped_logs
        paths = shipped_logs()
    else:
        paths = [Path(path).expanduser()]
    return path, tuple((str(p), p.stat().st_mtime_ns if p.exists() else 0) for p in paths)


def _knob_context():
    """The context of the log ``RB_AUTOTUNE_LOG`` names (re-read when the file changes)."""
    found = _knob_logs_stamp()
    if found is None:
        return None
    path, stamp = found
    paths = [Path(p) for p, _ in stamp]
    cached = _knob_logs.get(path)
    if cached is None or cached[0] != stamp:
        existing = [p for p in paths if p.exists()]
        cached = (stamp, ApplyHistoryBest(existing) if existing else ApplyHistoryBest([]))
        _knob_logs[path] = cached
    return cached[1]


def current_context():
    """The innermost active dispatch context, or None."""
    stack = _stack.get()
    return stack[-1] if stack else None


def config_for(workload, space) -> dict:
    """The config to compile ``workload`` with (see the module): always a complete, valid config
    of ``space``."""
    contexts = list(reversed(_stack.get()))
    knob = _knob_context()
    if knob is not None:
        contexts.append(knob)
    for context in contexts:
        found = context.lookup(workload)
        if found is not None:
            config = space.complete(found)
            if not space.valid(config):
                config = space.default()
            context.used[workload.key] = config
            return config
    return space.default()
