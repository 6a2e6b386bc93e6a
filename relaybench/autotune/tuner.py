"""``tune``: extract a model's tunable workloads and search each one's space (AutoTVM's
``extract_from_program`` and ``XGBTuner.tune``).

The search of one workload, in rounds of ``batch`` candidates:

1. the first round measures the default config (the hand-picked rule, so tuning never loses to
   it) and random valid configs;
2. each later round fits the cost model (:class:`~.model.GradientBoostedTrees`) to every
   measurement so far and runs simulated annealing (:func:`~.model.anneal`) on its predictions,
   from the best measured configs and random ones; the best predicted configs not yet measured
   are measured next, with one in ten taken at random instead (exploration);
3. it stops after ``trials`` measurements, when the space is exhausted, or after
   ``early_stopping`` measurements without a better one;
4. with ``confirm``, the default and the best few are measured again side by side, twice in
   opposite orders (on a busy machine a single measurement can be far off); the choice is then
   by each config's median record (:func:`~.record.best_by_workload`).

Every measurement is appended to ``log`` as soon as it is made (:mod:`.record`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from .record import Record, cpu_matches, host_cpu, save_records, versions
from .space import Workload

__all__ = ["Task", "extract_tasks", "tune", "tune_task", "TuningResult"]


@dataclass
class Task:
    """One tunable workload of a model: its space, the anchor's flops, the groups using it."""

    workload: Workload
    space: object
    flops: int
    groups: list = field(default_factory=list)

    def __repr__(self) -> str:
        return f"Task({self.workload}; {len(self.space)} configs, used by {len(self.groups)})"


def extract_tasks(mod, target="llvm", params=None, opt_level: int = 3) -> list:
    """The distinct tunable workloads of ``mod`` as ``build`` would compile it (the same passes,
    the target's layouts), in order of first use."""
    from ..backends.graph_executor import extract_graph
    from ..backends.lowering import anchor_flops, group_name
    from ..backends.strategy.x86 import space_of, workload_of
    from ..backends.target import Target
    from ..ir.expr import Call, Function, Op
    from ..ir.module import IRModule
    from ..ir.functor import post_order
    from ..passes import InferType
    from ..passes.bind_params import bind_params
    from ..passes.pipelines import optimize
    target = Target.parse(target)
    if target.kind != "llvm":
        raise ValueError(f"tuning: the llvm target has search spaces, not {target}")
    mod = mod if isinstance(mod, IRModule) else IRModule.from_expr(mod)
    if params:
        mod = bind_params(mod, params)
    optimized = optimize(mod, opt_level, config={"relay.target": str(target)})
    if optimized["main"].checked_type is None:
        optimized = InferType()(optimized)
    graph = extract_graph(optimized["main"])
    tasks: dict = {}
    for node in graph.nodes:
        func = node.function
        if not isinstance(func, Function):
            continue
        for call in post_order(func.body):
            if not (isinstance(call, Call) and isinstance(call.op, Op)):
                continue
            workload = workload_of(call)
            if workload is None:
                continue
            task = tasks.get(workload.key)
            if task is None:
                task = tasks[workload.key] = Task(workload, space_of(workload),
                                                  anchor_flops(call))
            task.groups.append(group_name(func))
    return list(tasks.values())


@dataclass
class TuningResult:
    """What a search found: every record, and per workload the measured costs in order."""

    tasks: list
    records: list = field(default_factory=list)
    seconds: dict = field(default_factory=dict)

    def history(self, task) -> list:
        """``[(trial, seconds or inf)]`` of ``task``'s measurements in order."""
        key = task.workload.key
        return [(i, r.cost) for i, r in enumerate(
            [r for r in self.records if r.workload.key == key])]

    def best(self, task) -> Record | None:
        """The record of ``task``'s best config, as ``apply_history_best`` chooses it."""
        from .record import best_by_workload
        return best_by_workload(self.records).get(task.workload.key)

    def default(self, task) -> Record | None:
        """The median record of ``task``'s default config."""
        from .record import best_by_workload
        default = task.space.default()
        return best_by_workload([r for r in self.records if r.config == default]) \
            .get(task.workload.key)

    def table(self):
        from .._table import Table
        rows = []
        for task in self.tasks:
            best, default = self.best(task), self.default(task)
            rows.append({
                "workload": str(task.workload),
                "trials": len(self.history(task)),
                "default ms": f"{default.cost * 1e3:.3f}" if default else "-",
                "best ms": f"{best.cost * 1e3:.3f}" if best else "-",
                "speedup": f"{default.cost / best.cost:.2f}x" if best and default else "-",
                "best GFLOP/s": f"{best.gflops:.1f}" if best else "-",
                "tuning s": f"{self.seconds.get(task.workload.key, 0.0):.1f}"})
        return Table(rows)

    def plot(self, ax=None):
        """Convergence: the best GFLOP/s so far against the trial, one line per workload."""
        import matplotlib.pyplot as plt
        if ax is None:
            _, ax = plt.subplots(figsize=(6, 3.5))
        for k, task in enumerate(self.tasks):
            best, curve = 0.0, []
            for _, cost in self.history(task):
                if math.isfinite(cost) and task.flops:
                    best = max(best, task.flops / cost / 1e9)
                curve.append(best)
            ax.plot(range(1, len(curve) + 1), curve, marker=".", label=f"{k}: {task.workload.template}")
        ax.set_xlabel("trial")
        ax.set_ylabel("best GFLOP/s so far")
        ax.legend(fontsize=7)
        return ax


def _record(task, config, result, target, runner_name) -> Record:
    mine = host_cpu()
    worker = result.get("cpu") or {}
    # a measurement on a worker whose CPU is not the target's is kept in the log (with that
    # CPU) but never chosen; a failure has no CPU to check
    trusted = cpu_matches(worker, mine) if worker else True
    return Record(task.workload, dict(config), list(result.get("costs") or []),
                  result.get("error"), str(target), worker or mine, trusted, runner_name,
                  task.flops, float(result.get("compile_seconds") or 0.0), versions=versions(),
                  num_threads=int(result.get("num_threads") or 0))


def tune_task(task, runner, trials: int, batch: int = 8, early_stopping: int | None = None,
              log=None, target="llvm", seed: int = 0, progress: bool = True,
              records: list | None = None, confirm: int = 0) -> list:
    """Search ``task``'s space with ``runner`` (see the module); returns its records. With
    ``confirm``, the default and the ``confirm`` fastest configs are measured again at the end
    (twice each, interleaved)."""
    from .model import GradientBoostedTrees, anneal, config_features
    from .progress import Progress
    space = task.space
    rng = np.random.default_rng(seed)
    trials = min(trials, len(space))
    out: list = []
    measured: dict = {}        # space index -> log(1 / seconds), or None when it failed
    best_cost, since_best = math.inf, 0
    bar = Progress(f"{task.workload.template} {task.workload.out_shape}", trials, progress)
    runner_name = getattr(runner, "name", type(runner).__name__)
    while len(out) < trials:
        want = min(batch, trials - len(out))
        if not measured:
            chosen = [space.default()]
            chosen += _random_valid(space, rng, want - 1, {space.index_of(chosen[0])})
        else:
            chosen = _model_choice(space, measured, rng, want, GradientBoostedTrees, anneal,
                                   config_features)
        if not chosen:
            break   # every valid config measured
        results = runner.run(task.workload, chosen)
        new = [_record(task, c, r, target, runner_name) for c, r in zip(chosen, results)]
        if log is not None:
            save_records(log, new)
        for record in new:
            index = space.index_of(record.config)
            measured[index] = -math.log(record.cost) if record.ok else None
            if record.cost < best_cost:
                best_cost, since_best = record.cost, 0
            else:
                since_best += 1
        out.extend(new)
        if records is not None:
            records.extend(new)
        bar.update(len(out), task.flops / best_cost / 1e9 if math.isfinite(best_cost) else 0.0)
        if early_stopping is not None and since_best >= early_stopping:
            break
    if confirm and out:
        again = _confirm(task, runner, out, confirm, target, runner_name)
        if log is not None:
            save_records(log, again)
        out.extend(again)
        if records is not None:
            records.extend(again)
    bar.close()
    return out


def _confirm(task, runner, records, count, target, runner_name) -> list:
    """The default and the ``count`` fastest configs measured again, twice, in opposite
    orders, so that the choice between them rests on measurements taken side by side (a busy
    machine slows whichever candidates run while it is busy)."""
    default = task.space.default()
    ranked = sorted((r for r in records if r.ok), key=lambda r: r.cost)
    configs = [default]
    for record in ranked:
        if len(configs) > count:
            break
        if record.config not in configs:
            configs.append(record.config)
    order = configs + configs[::-1]
    results = runner.run(task.workload, order)
    return [_record(task, c, r, target, runner_name) for c, r in zip(order, results)]


def _random_valid(space, rng, count, exclude) -> list:
    out, tries = [], 0
    while len(out) < count and tries < 50 * (count + 1):
        tries += 1
        config = space.random(rng)
        index = space.index_of(config)
        if space.valid(config) and index not in exclude:
            exclude.add(index)
            out.append(config)
    return out


def _model_choice(space, measured, rng, want, model_class, anneal, features) -> list:
    """The next candidates: the model's best predictions by annealing, one in ten random."""
    done = set(measured)
    ok = {i: v for i, v in measured.items() if v is not None}
    n_random = max(0, int(round(want * 0.1)))
    if len(ok) >= 4:
        floor = min(ok.values()) - 1.0
        rows = sorted(measured)
        x = np.stack([features(space, space.get(i)) for i in rows])
        y = np.array([measured[i] if measured[i] is not None else floor for i in rows])
        model = model_class().fit(x, y)
        cache: dict = {}

        def score(config):
            index = space.index_of(config)
            if index not in cache:
                cache[index] = float(model.predict(features(space, config)[None, :])[0])
            return cache[index]
        starts = [space.get(i) for i in sorted(ok, key=lambda i: -ok[i])[:8]]
        chosen = anneal(space, score, rng, want - n_random, done, starts)
    else:
        chosen = []
        n_random = want
    exclude = done | {space.index_of(c) for c in chosen}
    chosen += _random_valid(space, rng, want - len(chosen), exclude)
    return chosen


def tune(mod, target="llvm", trials: int = 32, runner=None, params=None, log=None,
         batch: int = 8, early_stopping: int | None = None, tasks=None, seed: int = 0,
         progress: bool = True, opt_level: int = 3, confirm: int = 0) -> TuningResult:
    """Tune every tunable workload of ``mod`` (or the given ``tasks``) with up to ``trials``
    measurements each (plus ``2 * (confirm + 1)`` for the confirmation round), appending every
    record to ``log`` (a JSON-lines path) when given.

    ``runner``: :class:`~.measure.LocalRunner` (the default, made and closed here) or
    :class:`~.measure.DaskRunner`. Build with the result through
    :func:`~.dispatch.apply_history_best` (``log`` or ``result.records``).
    """
    from .measure import LocalRunner
    if tasks is None:
        tasks = extract_tasks(mod, target, params, opt_level)
    own = runner is None
    runner = runner or LocalRunner()
    result = TuningResult(list(tasks))
    try:
        for k, task in enumerate(tasks):
            t0 = time.perf_counter()
            tune_task(task, runner, trials, batch, early_stopping, log, target, seed + k,
                      progress, result.records, confirm)
            result.seconds[task.workload.key] = time.perf_counter() - t0
    finally:
        if own:
            runner.close()
    return result
