"""Tune the zoo's workloads of chosen templates and append the records to a tuning log (by
default the one shipped for this machine, which ``RB_AUTOTUNE_LOG=shipped`` builds use).

    python bench/tune_zoo.py [--models resnet18,mobilenet_v2,vgg16,dqn] [--templates dense_rows]
                             [--trials 16] [--log relaybench/autotune/logs/x86_znver4.jsonl]

Each workload is measured on one thread (``RB_NUM_THREADS=1`` as the shipped log's records are),
the default config first, then the search, then a confirming round of the default and the best
(see :func:`relaybench.autotune.tune`). A workload already in the log for these templates is
tuned again only with ``--again``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHIPPED = HERE.parent / "relaybench" / "autotune" / "logs" / "x86_znver4.jsonl"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet18,mobilenet_v2,vgg16,dqn")
    parser.add_argument("--templates", default="dense_rows")
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--log", type=Path, default=SHIPPED)
    parser.add_argument("--again", action="store_true")
    args = parser.parse_args(argv)
    os.environ["RB_NUM_THREADS"] = "1"
    os.environ["RB_AUTOTUNE_LOG"] = ""
    import relaybench as rb
    from relaybench.autotune.record import load_records
    templates = set(args.templates.split(","))
    done = set()
    if args.log.exists() and not args.again:
        done = {r.workload.key for r in load_records(args.log)}
    seen = set()
    with rb.autotune.LocalRunner() as runner:
        for name in args.models.split(","):
            mod, params = rb.models.get(name)
            tasks = [t for t in rb.autotune.extract_tasks(mod, params=params)
                     if t.workload.template in templates and t.workload.key not in done | seen]
            seen |= {t.workload.key for t in tasks}
            if not tasks:
                print(f"{name}: nothing to tune")
                continue
            result = rb.autotune.tune(mod, trials=args.trials, runner=runner, log=args.log,
                                      tasks=tasks, progress=False, confirm=1)
            for task in result.tasks:
                best = min((r for r in result.records if r.workload == task.workload and r.ok),
                           key=lambda r: r.cost)
                print(f"{name}: {task.workload} best {best.config} {best.cost * 1e6:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
