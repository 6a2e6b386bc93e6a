"""The search end to end: candidates measured in a child process (a crash or a hang there is a
failed record, not a failed search), logs written and read back, the best config applied, and
measurements from a CPU unlike the target's kept out of the choice."""

import json
import math
import sys

import numpy as np
import pytest

import relaybench as rb
from relaybench import autotune
from relaybench.autotune.record import cpu_matches, distill, host_cpu
from relaybench.autotune.tuner import _record

SMALL = autotune.Workload(
    "conv2d_NCHWc", ((1, 1, 8, 8, 16), (2, 1, 3, 3, 16, 16)), ("float32", "float32"),
    (1, 2, 8, 8, 16), "float32",
    (("data_layout", "NCHW16c"), ("dilation", (1, 1)), ("groups", 1),
     ("kernel_layout", "OIHW16i16o"), ("out_layout", "NCHW16c"), ("padding", (1, 1, 1, 1)),
     ("strides", (1, 1))))

# a measuring process that dies on candidates with tile_ow 1, hangs on tile_ow 2, and answers
# the others at once (the runner's handling of its process is under test, not the timing)
FRAGILE = r'''
import json, os, sys, time
from relaybench.autotune import measure
sys.stdout.write(measure._MARK + '"ready"\n'); sys.stdout.flush()
for line in sys.stdin:
    job = json.loads(line)
    if job[1]["tile_ow"] == 1:
        os._exit(7)
    if job[1]["tile_ow"] == 2:
        time.sleep(60)
    result = {"costs": [1e-3] * job[3], "error": None, "compile_seconds": 0.0, "cpu": None}
    sys.stdout.write(measure._MARK + json.dumps(result) + "\n")
    sys.stdout.flush()
'''


def test_a_crashing_or_hanging_candidate_fails_alone():
    configs = [dict(tile_ow=t, tile_oc=1, reduce_order="channels_first", unroll_rx=False,
                    parallel="oc_row") for t in (8, 1, 2, 4)]
    with autotune.LocalRunner(timeout=3, repeat=2, min_repeat_ms=1,
                              command=[sys.executable, "-c", FRAGILE]) as runner:
        results = runner.run(SMALL, configs)
    assert results[0]["error"] is None and len(results[0]["costs"]) == 2
    assert "died (exit code 7)" in results[1]["error"]
    assert "timed out after 3 s" in results[2]["error"]
    assert results[3]["error"] is None and results[3]["costs"] == [1e-3, 1e-3]
    assert runner.restarts == 2


def test_tune_logs_every_measurement_and_the_best_one_is_applied(tmp_path):
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 16, 8, 8), float32], %w: Tensor[(32, 16, 3, 3), float32],
          %d: Tensor[(16, 2048), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=32, kernel_size=[3, 3]);
  %1 = nn.relu(%0);
  nn.dense(reshape(%1, newshape=[1, 2048]), %d)
}''')
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((32, 16, 3, 3)).astype("float32"),
              "d": rng.standard_normal((16, 2048)).astype("float32")}
    log = tmp_path / "tune.jsonl"
    runner = autotune.LocalRunner(timeout=20, repeat=3, min_repeat_ms=1)
    with runner:
        result = autotune.tune(mod, "llvm", trials=6, runner=runner, params=params, log=log,
                               batch=3, progress=False, confirm=1)
    assert [t.workload.template for t in result.tasks] == ["conv2d_NCHWc", "dense_rows"]
    lines = log.read_text().splitlines()
    # 6 searched and 4 confirming (the default and the best, twice each) per workload
    assert len(lines) == len(result.records) == 20
    first = json.loads(lines[0])
    assert {"workload", "config", "costs", "target", "cpu", "versions", "trusted"} <= set(first)
    assert first["cpu"]["model"] == host_cpu()["model"] and first["trusted"]
    assert first["num_threads"] == rb.config.num_threads()
    for task in result.tasks:
        history = result.history(task)
        assert len(history) == 10 and all(math.isfinite(c) for _, c in history)
        assert result.default(task) is not None   # the hand-picked config is always measured
        mine = [r for r in result.records if r.workload == task.workload]
        searched, confirmed = mine[:6], [r.config for r in mine[6:]]
        default = task.space.default()
        assert default in [r.config for r in searched]
        assert confirmed[0] == confirmed[3] == default
        fastest_other = next(r.config for r in sorted(searched, key=lambda r: r.cost)
                             if r.ok and r.config != default)
        assert confirmed[1] == confirmed[2] == fastest_other
    with autotune.apply_history_best(log) as applied:
        lib = rb.build(mod, target="llvm", params=params)
    assert applied.used == {t.workload.key: result.best(t).config for t in result.tasks}
    x = rng.standard_normal((1, 16, 8, 8)).astype("float32")
    ref = rb.create_executor("interpreter", mod=mod).evaluate()(x, params["w"], params["d"])
    np.testing.assert_allclose(lib.run(x=x), np.asarray(ref), rtol=1e-4, atol=1e-3)


def test_a_config_measured_several_times_counts_by_its_median():
    task = autotune.Task(SMALL, autotune.ConfigSpace("conv2d_NCHWc"), 100)
    mine = {"costs": None, "cpu": host_cpu()}
    rows = [_record(task, {"tile_ow": 8}, dict(mine, costs=[c]), "llvm", "local")
            for c in (1e-6, 9e-3, 8e-3)]              # one lucky measurement of three
    rows += [_record(task, {"tile_ow": 4}, dict(mine, costs=[c]), "llvm", "local")
             for c in (2e-3, 3e-3)]
    best = autotune.best_by_workload(rows)[SMALL.key]
    assert best.config == {"tile_ow": 4} and best.cost == 2e-3


def test_a_measurement_on_another_cpu_is_recorded_but_never_chosen():
    task = autotune.Task(SMALL, autotune.ConfigSpace("conv2d_NCHWc"), 100)
    other = dict(host_cpu(), model="Some Other CPU")
    assert not cpu_matches(other, host_cpu())
    fast = _record(task, {"tile_ow": 8}, {"costs": [1e-9], "cpu": other}, "llvm", "dask:x")
    slow = _record(task, {"tile_ow": 4}, {"costs": [1e-3], "cpu": host_cpu()}, "llvm", "local")
    assert not fast.trusted and slow.trusted
    assert json.loads(fast.to_json())["cpu"]["model"] == "Some Other CPU"
    best = autotune.best_by_workload([fast, slow])
    assert best[SMALL.key].config == {"tile_ow": 4}


def test_dask_runner_measures_on_a_local_cluster():
    distributed = __import__("pytest").importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        runner = autotune.DaskRunner(client, timeout=20, repeat=2, min_repeat_ms=1)
        assert runner.name.startswith("dask:")
        configs = [dict(tile_ow=t, tile_oc=1, reduce_order="channels_first", unroll_rx=False,
                        parallel="oc_row") for t in (8, 4)]
        results = runner.run(SMALL, configs)
        runner.close()
    for result in results:
        assert result["error"] is None and len(result["costs"]) == 2
        assert cpu_matches(result["cpu"], host_cpu())


def test_distill_keeps_the_choice_and_the_default_to_compare_with():
    task = autotune.Task(SMALL, autotune.ConfigSpace("conv2d_NCHWc"), 100)
    from relaybench.backends.strategy.x86 import space_of
    default = space_of(SMALL).default()
    fast = dict(default, tile_ow=4)
    mine = {"cpu": host_cpu()}
    rows = [_record(task, c, dict(mine, costs=[t]), "llvm", "local")
            for c, t in ((default, 5e-3), (default, 1e-4), (default, 6e-3), (fast, 2e-3),
                         (dict(default, tile_ow=2), 9e-3))]
    kept = distill(rows)
    assert [(r.config, r.cost) for r in kept] == [(default, 5e-3), (fast, 2e-3)]
    assert autotune.best_by_workload(kept)[SMALL.key].config == fast


def test_the_shipped_log_covers_resnet18():
    from relaybench.autotune.record import LOG_DIR
    logs = sorted(LOG_DIR.glob("*.jsonl"))   # every log, whichever this host would use
    assert logs, "no tuning log shipped in relaybench/autotune/logs"
    best = autotune.ApplyHistoryBest(logs)
    mod, params = rb.models.get("resnet18")
    for task in autotune.extract_tasks(mod, params=params):
        if task.workload.template == "conv2d_winograd":
            continue     # tuned since the log was made: its layers take the default tile
        record = best.best[task.workload.key]
        config = task.space.complete(record.config)   # a knob added since: its default
        assert task.space.valid(config) and record.trusted and record.cpu["model"]
        assert {"relaybench", "codegen", "llvmlite"} <= set(record.versions)


def test_shipped_logs_follow_the_hosts_vector_registers(monkeypatch):
    from relaybench.autotune import shipped as record
    logs = sorted(record.LOG_DIR.glob("*.jsonl"))
    kinds = {p: record._log_avx512(p) for p in logs}
    for wide in (True, False):
        features = "+avx2,+avx512f" if wide else "+avx2,-avx512f"
        monkeypatch.setattr(record, "host_cpu", lambda f=features: {"model": "x", "llvm_cpu": "y",
                                                                    "features": f})
        assert record.shipped_logs() == [p for p in logs if kinds[p] in (None, wide)]


def test_a_log_of_the_other_vector_registers_is_applied_with_a_warning(monkeypatch, tmp_path):
    import warnings
    from relaybench.autotune import shipped as record
    logs = {wide: next(p for p in sorted(record.LOG_DIR.glob("*.jsonl"))
                       if record._log_avx512(p) is wide) for wide in (True, False)}
    for wide in (True, False):
        features = "+avx2,+avx512f" if wide else "+avx2,-avx512f"
        monkeypatch.setattr(record, "host_cpu", lambda f=features: {"model": "x", "llvm_cpu": "y",
                                                                    "features": f})
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            same = autotune.apply_history_best(logs[wide])     # this host's kind: no warning
        with pytest.warns(UserWarning, match="tuning log .* was measured on a CPU "
                          + ("without AVX-512" if wide else "with AVX-512")):
            other = autotune.apply_history_best(logs[not wide])
        assert len(same) > 0 and len(other) > 0       # applied all the same


def test_the_default_keeps_its_place_within_the_noise_margin():
    from relaybench.autotune.record import DEFAULT_MARGIN
    from relaybench.backends.strategy.x86 import space_of
    task = autotune.Task(SMALL, space_of(SMALL), 100)
    default = task.space.default()
    other = dict(default, tile_ow=4)
    mine = {"cpu": host_cpu()}

    def rows(other_cost):
        return [_record(task, default, dict(mine, costs=[1e-3]), "llvm", "local"),
                _record(task, other, dict(mine, costs=[other_cost]), "llvm", "local")]
    close = 1e-3 * (1 - DEFAULT_MARGIN / 2)      # faster, but within the margin
    assert autotune.best_by_workload(rows(close))[SMALL.key].config == default
    assert autotune.best_by_workload(rows(close), margin=0.0)[SMALL.key].config == other
    assert autotune.best_by_workload(rows(0.5e-3))[SMALL.key].config == other
