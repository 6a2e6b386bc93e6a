"""The timing harness of ``bench/vision.py``: interleaving, statistics, the table, and the
relaybench column's engine. None of this needs the peers installed."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import relaybench as rb
from relaybench import op


def _load_vision():
    path = Path(__file__).resolve().parents[2] / "bench" / "vision.py"
    spec = importlib.util.spec_from_file_location("bench_vision", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module         # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


vision = _load_vision()


def _recording_engines(log, keys=("pytorch", "onnxruntime", "relaybench")):
    engines = []
    for key in keys:
        def run(data, key=key):
            log.append(("run", key))
            return data * 2

        def prepare(key=key):
            log.append(("prepare", key))

        engines.append(vision.Engine(key, key, run, prepare))
    return engines


def test_repetitions_are_interleaved_round_robin(monkeypatch):
    monkeypatch.setattr(vision, "PAUSE_S", 0.0)
    monkeypatch.setattr(vision, "WARMUP_S", 0.0)    # warm-up: the --warmup calls alone
    log = []
    engines = _recording_engines(log)
    result = vision.time_interleaved(engines, np.ones(3, "float32"), repeat=4, number=2, warmup=1)
    assert result["number"] == {"pytorch": 2, "onnxruntime": 2, "relaybench": 2}
    assert all(len(t) == 4 and min(t) > 0 for t in result["times_s"].values())
    timed = log[3 * 2:]                         # after each engine's prepare and warm-up call
    blocks = [timed[i:i + 3] for i in range(0, len(timed), 3)]
    assert all(b[0][0] == "prepare" and b[1:] == [("run", b[0][1])] * 2 for b in blocks)
    firsts = [blocks[r * 3][0][1] for r in range(4)]
    assert firsts == ["pytorch", "onnxruntime", "relaybench", "pytorch"]
    for r in range(4):                          # every engine once per repetition
        assert sorted(b[0][1] for b in blocks[r * 3:r * 3 + 3]) == ["onnxruntime", "pytorch", "relaybench"]


def test_automatic_number_fills_a_block(monkeypatch):
    monkeypatch.setattr(vision, "PAUSE_S", 0.0)
    monkeypatch.setattr(vision, "AUTO_BLOCK_S", 0.01)
    engines = _recording_engines([], keys=("pytorch",))
    result = vision.time_interleaved(engines, np.ones(3, "float32"), repeat=1, number=0, warmup=1)
    assert result["number"]["pytorch"] > 10     # a call of microseconds: many per 10 ms block


def test_the_block_size_is_counted_after_the_warm_up(monkeypatch):
    """An engine whose first calls are slow (page faults, cold caches) still gets blocks of
    about AUTO_BLOCK_S: its calls are counted after a warm-up of at least WARMUP_S."""
    import time
    monkeypatch.setattr(vision, "PAUSE_S", 0.0)
    monkeypatch.setattr(vision, "AUTO_BLOCK_S", 0.02)
    monkeypatch.setattr(vision, "WARMUP_S", 0.03)
    monkeypatch.setattr(vision, "PROBE_S", 0.01)
    calls = []

    def run(data):
        calls.append(1)
        time.sleep(0.01 if len(calls) <= 2 else 0.0005)   # two slow calls, then 0.5 ms

    engine = vision.Engine("relaybench", "relaybench", run)
    result = vision.time_interleaved([engine], np.ones(3, "float32"), repeat=1, number=0,
                                     warmup=2)
    # 20 ms of 0.5 ms calls (fewer where sleeps run long), not 2 of the first calls' 10 ms
    assert result["number"]["relaybench"] > 4


def test_summary_and_table():
    stats = vision.summarize([0.004, 0.001, 0.003, 0.002, 0.005])
    assert stats["median_s"] == pytest.approx(0.003)
    assert (stats["q1_s"], stats["q3_s"]) == (pytest.approx(0.002), pytest.approx(0.004))
    assert (stats["min_s"], stats["max_s"]) == (0.001, 0.005)

    def res(label, median):
        return {"label": label, "median_s": median, "q1_s": median * 0.9, "q3_s": median * 1.1}

    rows = [{"label": "DQN", "threads": 2,
             "engines": {"pytorch": res("PyTorch eager", 0.004), "onnxruntime": res("ONNX Runtime", 0.002),
                         "relaybench": res("relaybench (interpreter)", 0.008)}}]
    text = vision.table(rows)
    head, rule, line = text.splitlines()
    assert "relaybench (interpreter) (ms)" in head and "relaybench (interpreter) vs PyTorch" in head
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells == ["DQN", "2", "4.00 ±10%", "2.00 ±10%", "8.00 ±10%", "2.00x", "0.50x", "4.00"]
    assert "relaybench (interpreter) time / ONNX Runtime's" in head
    rows[0]["handoff_ns"] = [72.4, 451.0]
    note = vision.table(rows).splitlines()[-1]
    assert "DQN 2 threads 72 / 451 ns" in note and note.startswith("Round trip")


def test_the_handoff_between_two_threads_is_a_round_trip_in_nanoseconds():
    """Two threads hand a counter back and forth: a round trip in nanoseconds, more than one
    (not a speed check: on one core the probe declines). Below a second: on two cores busy
    with other tests the threads may take turns on one, milliseconds a trip (2.7 ms seen)."""
    import math
    import os
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import peak
    value = peak.handoff_ns(rounds=200, repeat=1)     # few: the other tests share the cores
    if len(os.sched_getaffinity(0)) < 2:
        assert math.isnan(value)
    else:
        assert 1.0 < value < 1e9


def test_layer_tables_set_convolutions_against_the_peak_and_dense_against_memory():
    def kernel(group, rule, ms, gflops, fma):
        return {"group": group, "rule": rule, "calls": 1, "ms_per_call": ms, "gflops": gflops,
                "of_fma_peak": gflops / fma, "of_sgemm": 0.5}
    row = {"label": "DQN", "threads": 1, "load": "0.10 0.20 0.30",
           "peak": {"fma_gflops": 100.0, "sgemm_gflops": 80.0, "stream_gbs": 20.0,
                    "cache_gbs": 40.0},
           "kernels": [kernel("fused_conv", "conv2d_NCHWc", 2.0, 40.0, 100.0),
                       kernel("fused_dense", "dense", 1.0, 2.5, 100.0)],
           "kernels_tuned": [kernel("fused_conv", "conv2d_NCHWc", 1.0, 80.0, 100.0),
                             kernel("fused_dense", "dense", 0.5, 5.0, 100.0)]}
    text = vision.layer_tables(row)
    assert "memory 20.0 GB/s, " in text and "(load 0.10 0.20 0.30)" in text
    assert "| fused_conv | 1 | 2.000 | 1.000 | 40 | 80 | 80% |" in text
    # a batch-1 dense layer reads 4 bytes per 2 flops: 5 GFLOP/s is 10 GB/s, half of 20
    assert "| fused_dense | 1.000 | 0.500 | 5.0 | 10.0 | 50% | 25% |" in text
    assert "40.0 GB/s streaming the largest dense weights' size" in text


def test_the_tuned_engine_builds_with_the_log(tmp_path):
    from relaybench import autotune
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 16, 8, 8), float32], %w: Tensor[(16, 16, 3, 3), float32]) {
  nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3])
}''')
    w = np.random.default_rng(0).standard_normal((16, 16, 3, 3)).astype("float32")
    (task,) = autotune.extract_tasks(mod, params={"w": w})
    config = dict(task.space.default(), tile_ow=4, tile_oc=1)
    log = tmp_path / "log.jsonl"
    autotune.save_records(log, [autotune.Record(task.workload, config, [1e-5])])
    engine = vision.relaybench_engine(mod, {"w": w}, threads=1, tuning_log=[log])
    assert (engine.key, engine.label) == ("relaybench_tuned", "relaybench tuned")
    assert engine.info["tuned_workloads"] == 1
    data = np.random.default_rng(1).standard_normal((1, 16, 8, 8)).astype("float32")
    ref = rb.create_executor("interpreter", mod=mod).evaluate()(data, w)
    np.testing.assert_allclose(vision._first_output(engine.run(data)), np.asarray(ref),
                               rtol=1e-4, atol=1e-4)


def test_relaybench_engine_runs_the_model():
    x = rb.var("x", shape=(2, 3), dtype="float32")
    w = rb.var("w", shape=(2, 3), dtype="float32")
    mod = rb.IRModule.from_expr(rb.Function([x, w], op.nn.relu(op.multiply(x, w))))
    w_value = np.array([[1, -2, 3], [-4, 5, -6]], "float32")
    engine = vision.relaybench_engine(mod, {"w": w_value}, threads=1)
    if hasattr(rb, "build"):
        assert engine.label == "relaybench" and engine.info["compiled"]
    else:   # the interpreter must never be passed off as compiled code
        assert engine.label == "relaybench (interpreter)" and not engine.info["compiled"]
        if vision.numpy_blas_threads() is not None:
            assert engine.info["blas_threads"] == 1
    engine.prepare()
    data = np.arange(6, dtype="float32").reshape(2, 3) - 2
    np.testing.assert_allclose(np.asarray(vision._first_output(engine.run(data))),
                               np.maximum(data * w_value, 0), rtol=1e-6)


def test_check_agreement_names_the_engine_that_differs():
    good = vision.Engine("pytorch", "PyTorch eager", lambda d: d + 1.0)
    also = vision.Engine("onnxruntime", "ONNX Runtime", lambda d: d + 1.0 + 1e-7)
    bad = vision.Engine("relaybench", "relaybench (interpreter)", lambda d: d + 1.1)
    data = np.ones(4, "float32")
    diffs = vision.check_agreement([good, also], data)
    assert diffs["pytorch"] == 0 and diffs["onnxruntime"] < 1e-6
    with pytest.raises(RuntimeError, match=r"relaybench \(interpreter\): output differs"):
        vision.check_agreement([good, also, bad], data)
