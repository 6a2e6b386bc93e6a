"""Schedule search for the x86 strategies (Relay's AutoTVM, in numpy).

Each tunable rule of :mod:`relaybench.backends.strategy.x86` declares its knobs as a
:class:`ConfigSpace` (register tile, channel blocks, the reduce loops' order, unrolling, the
parallel axis, the dense partial sums' width); a :class:`Workload` (op, shapes, dtypes, layout)
plus a config is one kernel. :func:`tune` extracts a model's workloads, measures candidates in a
separate process (:class:`LocalRunner`) or on a Dask cluster (:class:`DaskRunner`), searches with
a cost model and simulated annealing, and logs every measurement as a JSON line;
:func:`apply_history_best` makes ``build`` use the best config of each workload::

    result = rb.autotune.tune(mod, "llvm", trials=32, params=params, log="resnet18.jsonl")
    with rb.autotune.apply_history_best("resnet18.jsonl"):
        lib = rb.build(mod, target="llvm", params=params)

Untuned workloads keep the strategies' hand-picked configs; ``RB_AUTOTUNE_LOG=shipped`` applies
the logs shipped in ``relaybench/autotune/logs`` to every build. The kernel cache is keyed by the
loop IR, which the config shapes, so tuned and untuned kernels never share an entry.
"""

from .._lazy import lazy_attributes

#: name -> the submodule that defines it, imported on first use (a build reads the dispatch
#: context and the shipped logs; the tuner, the runners and their subprocess machinery load only
#: for tuning)
_LAZY = {
    **dict.fromkeys(("ApplyConfig", "ApplyHistoryBest", "DispatchContext", "apply_history_best",
                     "config_for", "current_context"), ".dispatch"),
    **dict.fromkeys(("DaskRunner", "LocalRunner", "measure_candidate", "task_function"),
                    ".measure"),
    **dict.fromkeys(("Record", "best_by_workload", "load_records", "save_records"), ".record"),
    "shipped_logs": ".shipped",
    **dict.fromkeys(("ConfigSpace", "Knob", "Workload"), ".space"),
    **dict.fromkeys(("Task", "TuningResult", "extract_tasks", "tune", "tune_task"), ".tuner"),
}

__all__ = ["ApplyConfig", "ApplyHistoryBest", "DispatchContext", "apply_history_best",
           "config_for", "current_context", "DaskRunner", "LocalRunner", "measure_candidate",
           "task_function", "Record", "best_by_workload", "load_records", "save_records",
           "shipped_logs", "ConfigSpace", "Knob", "Workload", "Task", "TuningResult",
           "extract_tasks", "tune", "tune_task"]


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)

