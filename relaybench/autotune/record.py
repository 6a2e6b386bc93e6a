"""Tuning logs: one JSON object per line, one line per measured candidate (AutoTVM's records).

A record holds the workload, the config, the measured times (seconds per call; empty when the
candidate failed, ``error`` saying why), the target, the CPU the measurement ran on and whether it
matched the target's (``trusted``), the runner, and the versions of what compiled it. Appending
is the only write, so a search that stops half way leaves a usable log.

>>> from relaybench.autotune.space import Workload
>>> w = Workload("t", ((8,),), ("float32",), (8,), "float32")
>>> r = Record(w, {"tile": 2}, [2e-6, 3e-6, 2.5e-6], target="llvm")
>>> Record.from_json(r.to_json()).cost
2e-06
"""

from __future__ import annotations

import json
import math
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

from .shipped import LOG_DIR, _has_avx512, _log_avx512, host_cpu, shipped_logs  # noqa: F401
from .space import Workload

__all__ = ["Record", "load_records", "save_records", "best_by_workload", "distill", "host_cpu",
           "versions", "shipped_logs", "LOG_DIR"]


@dataclass
class Record:
    workload: Workload
    config: dict
    costs: list
    error: str | None = None
    target: str = "llvm"
    cpu: dict = field(default_factory=dict)
    trusted: bool = True
    runner: str = "local"
    flops: int = 0
    compile_seconds: float = 0.0
    timestamp: float = field(default_factory=time.time)
    versions: dict = field(default_factory=dict)
    num_threads: int = 0          # the threads the kernel ran on (0: not recorded)

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.costs) and self.trusted

    @property
    def cost(self) -> float:
        """The time per call of the fastest repeat (seconds), ``inf`` for a failed candidate.
        The fastest, not the median: on a machine shared with other work, the slower repeats
        are those the other work interrupted, and they say nothing about the kernel."""
        if not self.ok:
            return math.inf
        return min(self.costs)

    @property
    def gflops(self) -> float:
        return self.flops / self.cost / 1e9 if self.ok and self.flops else 0.0

    def to_json(self) -> str:
        return json.dumps({
            "workload": self.workload.to_json(), "config": self.config, "costs": self.costs,
            "error": self.error, "target": self.target, "cpu": self.cpu, "trusted": self.trusted,
            "runner": self.runner, "flops": self.flops,
            "compile_seconds": round(self.compile_seconds, 4), "timestamp": self.timestamp,
            "versions": self.versions, "num_threads": self.num_threads}, sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> "Record":
        d = json.loads(line)
        return cls(Workload.from_json(d["workload"]), d["config"], list(d["costs"]),
                   d.get("error"), d.get("target", "llvm"), d.get("cpu", {}),
                   bool(d.get("trusted", True)), d.get("runner", "local"), int(d.get("flops", 0)),
                   float(d.get("compile_seconds", 0.0)), float(d.get("timestamp", 0.0)),
                   d.get("versions", {}), int(d.get("num_threads", 0)))


def load_records(paths) -> list:
    """The records of one JSON-lines file or several; a line that does not parse is an error
    naming the file and line."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    out = []
    for path in paths:
        path = Path(path)
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                out.append(Record.from_json(line))
            except (ValueError, KeyError, TypeError) as err:
                raise ValueError(f"{path}:{number}: not a tuning record: {err}") from None
    return out


def save_records(path, records) -> None:
    """Append ``records`` to the JSON-lines file ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        for record in records:
            out.write(record.to_json() + "\n")


#: how much faster than the default config (the strategy's own rule) a tuned config must have
#: measured to be chosen over it: differences smaller than this are within the noise of a
#: machine shared with other work
DEFAULT_MARGIN = 0.03


def best_by_workload(records, margin: float = DEFAULT_MARGIN) -> dict:
    """workload key -> a record of its fastest config among the trusted successes. A config
    measured several times (the search's confirmation round) counts by the median of its
    records, so one lucky measurement on a busy machine does not decide; the record returned is
    that config's median one. The default config keeps its place unless another was measured
    faster by more than ``margin`` (a fraction of the default's time). A config that the
    template's space now excludes (a constraint added since it was measured) is passed over."""
    by_config: dict = {}
    for record in records:
        if not record.ok:
            continue
        key = (record.workload.key, json.dumps(record.config, sort_keys=True))
        by_config.setdefault(key, []).append(record)
    best: dict = {}
    defaults: dict = {}
    spaces: dict = {}   # workload key -> its template's space (None: a template not ours)
    for (workload_key, config_text), rows in by_config.items():
        if not _still_valid(rows[0], spaces):
            continue
        rows = sorted(rows, key=lambda r: r.cost)
        middle = rows[(len(rows) - 1) // 2]
        if _is_default(middle, spaces):
            defaults[workload_key] = middle
        if workload_key not in best or middle.cost < best[workload_key].cost:
            best[workload_key] = middle
    for key, default in defaults.items():
        if best[key] is not default and best[key].cost > default.cost * (1 - margin):
            best[key] = default
    return best


def _space(record, spaces: dict | None):
    """``record``'s template's space for its workload (None for a template this package does
    not define), made once per workload in ``spaces``: a log holds many records of each."""
    key = record.workload.key
    if spaces is not None and key in spaces:
        return spaces[key]
    from ..backends.strategy.x86 import TEMPLATES
    make = TEMPLATES.get(record.workload.template)
    space = None if make is None else make(record.workload)
    if spaces is not None:
        spaces[key] = space
    return space


def _still_valid(record, spaces: dict | None = None) -> bool:
    """Whether ``record``'s config is one of its template's space today (True for a template
    this package does not define)."""
    space = _space(record, spaces)
    return space is None or space.valid(space.complete(record.config))


def _is_default(record, spaces: dict | None = None) -> bool:
    """Whether ``record``'s config is its template's default (the strategy's own rule)."""
    space = _space(record, spaces)
    return space is not None and space.default() == record.config


def distill(records) -> list:
    """Per workload, its best record and its default config's record (when measured): what a
    shipped log keeps of a search, the best to build with and the default to compare against."""
    from ..backends.strategy.x86 import space_of
    best = best_by_workload(records)
    out = []
    for key, record in best.items():
        default = space_of(record.workload).default()
        rows = [r for r in records if r.workload.key == key and r.config == default]
        kept = best_by_workload(rows).get(key)    # the default's median record, as chosen
        if kept is not None and kept is not record:
            out.append(kept)
        out.append(record)
    return out


def cpu_matches(a: dict, b: dict) -> bool:
    """Whether measurements on CPU ``a`` stand for CPU ``b``."""
    return all(a.get(k) == b.get(k) for k in ("model", "llvm_cpu", "features"))


def versions() -> dict:
    import llvmlite
    import numpy
    from .. import __version__
    from ..backends.llvm.codegen import _CODEGEN_VERSION
    return {"relaybench": __version__, "codegen": _CODEGEN_VERSION[:12],
            "llvmlite": llvmlite.__version__, "numpy": numpy.__version__,
            "python": platform.python_version()}


