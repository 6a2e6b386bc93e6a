"""Many random programs through the differential runner, in worker processes.

:func:`fuzz` checks the programs of seeds ``S .. S+N-1`` (:func:`check_seed`: the generator,
then :func:`~.differential.run_differential`) in ``jobs`` worker processes. The main process
only hands out seeds and collects results, so a worker that dies (a segfault in generated code)
or runs past the per-program timeout is noticed, reported as a crash of that seed and of the
configuration it was running, and replaced; the run goes on. At the end a :class:`FuzzSummary`
groups the failures by class (:meth:`~.differential.Outcome.failure_class`) with their count and
example seeds, and writes each failing program (minimized, when asked, one per class) as Relay
text to a folder. ``relaybench fuzz`` and ``make fuzz`` are this function.

>>> summary = fuzz(range(2), jobs=1, configs=["text"], progress=None)
>>> summary.programs, summary.failed_seeds
(2, [])
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

from .differential import CONFIGS, Case, Outcome, _first_line, reference_result, run_config

__all__ = ["fuzz", "check_seed", "SeedResult", "FuzzSummary"]


@dataclass
class SeedResult:
    """One seed's program: how many ops, how long, and the failures (empty when all ok)."""

    seed: int
    ops: int = 0
    seconds: float = 0.0
    failures: list = field(default_factory=list)


def check_seed(seed: int, configs: Sequence, report: Optional[Callable] = None) -> SeedResult:
    """Generate the program of ``seed`` and run it on the reference and ``configs`` (names of
    :data:`CONFIGS` or :class:`~.differential.Config` s).

    ``report(config_name)`` is called before each configuration runs (the worker tells the main
    process, so that a hard crash is charged to the right configuration)."""
    from .random_programs import random_program
    start = time.perf_counter()
    result = SeedResult(seed)
    say = report or (lambda name: None)
    try:
        say("generator")
        prog = random_program(seed)
    except Exception as err:
        result.failures.append(Outcome("generator", "crash", _first_line(err),
                                       error_type=type(err).__name__))
        return result
    result.ops = len(prog.ops)
    case = Case(prog.mod, prog.all_inputs(), tuple(prog.params))
    try:
        say("interpreter")
        expected = reference_result(case)
    except Exception as err:
        result.failures.append(Outcome("interpreter", "crash", _first_line(err),
                                       error_type=type(err).__name__, ops=tuple(prog.ops)))
        return result
    for config in configs:
        say(config if isinstance(config, str) else config.name)
        outcome = run_config(case, config, expected)
        if outcome.status not in ("ok", "skipped"):
            result.failures.append(outcome)
    result.seconds = time.perf_counter() - start
    return result


def _worker(conn, configs) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the main process decides when to stop
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        kind, payload = job
        if kind == "seed":
            result = check_seed(payload, configs, lambda name: conn.send(("running", name)))
            conn.send(("done", result))
        elif kind == "minimize":
            conn.send(("done", _minimize_job(*payload)))


def _minimize_job(seed: int, config, failure: str, max_seconds: float):
    """The minimized program of ``seed`` on ``config`` as Relay text (None when it no longer
    fails)."""
    from .minimize import failure_key, minimize
    from .differential import run_differential
    from .random_programs import random_program
    prog = random_program(seed)
    mod = prog.mod
    key = failure_key(run_differential(mod, configs=[config]))
    if key is None:
        return None
    small = minimize(mod, config, key, program_seed=seed, max_seconds=max_seconds)
    return small.astext(), key


#: Jobs a worker process runs before a fresh one replaces it. LLVM's optimization pipeline, as
#: llvmlite drives it, keeps about 0.1 MB of native memory per kernel compiled (freed only at
#: process exit), and a random program compiles a dozen kernels over the configurations, so a
#: long-lived worker would grow by gigabytes over a long run.
WORKER_JOBS = 150


class _Slot:
    """One worker process, its pipe, the job it runs and how many it has run."""

    def __init__(self, ctx, configs):
        self.parent, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker, args=(child, list(configs)), daemon=True)
        self.process.start()
        child.close()
        self.job = None
        self.running = ""
        self.started = 0.0
        self.done = 0

    def give(self, job) -> None:
        self.job = job
        self.running = "starting"
        self.started = time.monotonic()
        self.parent.send(job)

    def stop(self, hard: bool = False) -> None:
        try:
            if not hard:
                self.parent.send(None)
                self.process.join(timeout=5)
        except (OSError, BrokenPipeError):
            pass
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=5)
        self.parent.close()


def _run_jobs(jobs_list: list, n_workers: int, configs, timeout: float,
              on_result: Callable, on_lost: Callable) -> None:
    """Run ``jobs_list`` on ``n_workers`` processes; ``on_result(job, result)`` for each answer,
    ``on_lost(job, config, why)`` for a job whose worker died or timed out."""
    ctx = multiprocessing.get_context("spawn")
    pending = list(reversed(jobs_list))
    slots = [_Slot(ctx, configs) for _ in range(min(n_workers, len(jobs_list)))]
    try:
        for s in slots:
            if pending:
                s.give(pending.pop())
        while any(s.job is not None for s in slots):
            busy = [s for s in slots if s.job is not None]
            now = time.monotonic()
            wait_for = max(0.05, min(s.started + timeout - now for s in busy))
            ready = wait([s.parent for s in busy] + [s.process.sentinel for s in busy],
                         timeout=wait_for)
            for s in busy:
                lost = None
                if s.parent in ready:
                    try:
                        while s.parent.poll():
                            kind, payload = s.parent.recv()
                            if kind == "running":
                                s.running = payload
                            else:
                                on_result(s.job, payload)
                                s.job = None
                                s.done += 1
                                break
                    except (EOFError, OSError):
                        lost = "died"
                if s.job is not None and lost is None and s.process.sentinel in ready \
                        and not s.parent.poll():
                    lost = "died"
                if s.job is not None and lost is None and \
                        time.monotonic() - s.started > timeout:
                    lost = "timeout"
                if lost is not None:
                    s.stop(hard=True)
                    if lost == "died":
                        code = s.process.exitcode
                        why = (f"worker killed by signal {signal.Signals(-code).name}"
                               if code is not None and code < 0 else f"worker exited ({code})")
                    else:
                        why = f"no result within {timeout:g} s"
                    on_lost(s.job, s.running, lost, why)
                    index = slots.index(s)
                    slots[index] = s = _Slot(ctx, configs)
                if s.job is None and pending:
                    if s.done >= WORKER_JOBS:  # a fresh process: see WORKER_JOBS
                        s.stop()
                        index = slots.index(s)
                        slots[index] = s = _Slot(ctx, configs)
                    s.give(pending.pop())
    finally:
        for s in slots:
            s.stop()


@dataclass
class FuzzSummary:
    """The run's totals and its failures by class: class -> list of seeds."""

    programs: int = 0
    seconds: float = 0.0
    ops: int = 0
    classes: dict = field(default_factory=OrderedDict)
    examples: dict = field(default_factory=dict)     # class -> the first failure's Outcome
    failed_seeds: list = field(default_factory=list)
    written: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.classes

    def table(self) -> str:
        rate = self.programs / self.seconds if self.seconds else 0.0
        lines = [f"{self.programs} programs ({self.ops} ops) in {self.seconds:.1f} s "
                 f"({rate:.2f} programs/s); {len(self.failed_seeds)} failed, "
                 f"{len(self.classes)} failure classes"]
        for key, seeds in sorted(self.classes.items(), key=lambda kv: -len(kv[1])):
            shown = ", ".join(str(s) for s in seeds[:5]) + (", ..." if len(seeds) > 5 else "")
            lines.append(f"  {len(seeds):4d}  {key}")
            lines.append(f"        seeds {shown}")
            lines.append(f"        e.g. {self.examples[key]}"[:300])
        return "\n".join(lines)


def fuzz(seeds: Iterable[int], jobs: Optional[int] = None, configs: Optional[Sequence] = None,
         timeout: float = 120.0, out: Optional[Path] = None, minimize: bool = False,
         minimize_seconds: float = 120.0, progress: Optional[Callable[[str], None]] = print
         ) -> FuzzSummary:
    """Check the programs of ``seeds`` on ``configs`` (default all of :data:`CONFIGS`; names, or
    :class:`~.differential.Config` s whose ``run`` a worker process can import) in ``jobs``
    worker processes (default: one per core); see the module docstring.

    ``out``: the folder failing programs are written to (``seed<S>.rly``, and with
    ``minimize`` one ``min_<class number>_seed<S>.rly`` per class). ``progress`` receives
    progress lines (None: quiet).
    """
    seeds = list(seeds)
    configs = list(CONFIGS) if configs is None else list(configs)
    unknown = [c for c in configs if isinstance(c, str) and c not in CONFIGS]
    if unknown:
        raise ValueError(f"unknown configuration {unknown[0]!r}; known: {', '.join(CONFIGS)}")
    jobs = jobs or os.cpu_count() or 1
    say = progress or (lambda line: None)
    summary = FuzzSummary()
    by_seed: dict = {}
    start = time.perf_counter()

    def add(seed: int, outcome: Outcome) -> None:
        key = outcome.failure_class()
        summary.classes.setdefault(key, []).append(seed)
        summary.examples.setdefault(key, outcome)
        by_seed.setdefault(seed, []).append(outcome)

    def on_result(job, result: SeedResult) -> None:
        summary.programs += 1
        summary.ops += result.ops
        for o in result.failures:
            add(result.seed, o)
        if result.failures:
            say(f"[{summary.programs}/{len(seeds)}] seed {result.seed}: "
                + "; ".join(str(o)[:160] for o in result.failures))
        elif summary.programs % 25 == 0 or summary.programs == len(seeds):
            say(f"[{summary.programs}/{len(seeds)}] {len(by_seed)} failed so far")

    def on_lost(job, running: str, kind: str, why: str) -> None:
        seed = job[1]
        summary.programs += 1
        status = "crash" if kind == "died" else "timeout"
        error = "WorkerDied" if kind == "died" else "Timeout"
        add(seed, Outcome(running or "worker", status, why, error_type=error))
        say(f"[{summary.programs}/{len(seeds)}] seed {seed}: {running}: {why}")

    _run_jobs([("seed", s) for s in seeds], jobs, configs, timeout, on_result, on_lost)
    summary.seconds = time.perf_counter() - start
    summary.failed_seeds = sorted(by_seed)
    if out is not None and by_seed:
        summary.written = _write_failures(summary, by_seed, Path(out), minimize, jobs, configs,
                                          max(timeout, minimize_seconds * 1.5),
                                          minimize_seconds, say)
    return summary


def _write_failures(summary: FuzzSummary, by_seed: dict, out: Path, minimize: bool, jobs: int,
                    configs, timeout: float, minimize_seconds: float, say) -> list:
    from .minimize import save_failure
    from .random_programs import random_program
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for seed, outcomes in sorted(by_seed.items()):
        try:
            mod = random_program(seed).mod
        except Exception:
            continue
        first = outcomes[0]
        note = "\n".join(str(o)[:300] for o in outcomes)
        written.append(save_failure(mod, out / f"seed{seed}.rly", first.config,
                                    first.failure_class(), note=f"seed {seed}\n{note}"))
    if not minimize:
        return written
    jobs_list, classes, shown = [], list(summary.classes), set()
    by_name = {c if isinstance(c, str) else c.name: c for c in configs}
    for key in classes:
        example = summary.examples[key]
        # one program failing alike on several configurations is shrunk once
        alike = (summary.classes[key][0], example.status, example.error_type, example.detail)
        if alike in shown:
            continue
        shown.add(alike)
        # the generator's and the interpreter's failures, hard crashes and timeouts stay as
        # they are (shrinking them would need a process per candidate)
        config = by_name.get(example.config)
        if config is None or example.error_type in ("WorkerDied", "Timeout"):
            continue
        seed = summary.classes[key][0]
        jobs_list.append(("minimize", (seed, config, key, minimize_seconds)))

    def on_result(job, result) -> None:
        seed, config, key, _ = job[1]
        config = config if isinstance(config, str) else config.name
        if result is None:
            say(f"minimize seed {seed} on {config}: no longer fails")
            return
        text, found = result
        from ..ir.parser import parse
        path = out / f"min_{classes.index(key)}_seed{seed}.rly"
        written.append(save_failure(parse(text), path, config, found,
                                    note=f"minimized from seed {seed}; class {key}"))
        say(f"minimized seed {seed} on {config}: {path}")

    def on_lost(job, running, kind, why) -> None:
        seed, config, key, _ = job[1]
        config = config if isinstance(config, str) else config.name
        say(f"minimize seed {seed} on {config}: {why} (the unminimized program is "
            f"seed{seed}.rly)")

    _run_jobs(jobs_list, jobs, configs, timeout, on_result, on_lost)
    return written
