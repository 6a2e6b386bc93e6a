"""The accelerator experiment on small images (3x32x32): its columns add up, its simulated time
is the groups' cycles at the design's clock, its outputs are the llvm build's bit for bit, bad
input is refused by name, and `relaybench reproduce accelerator --quick` writes its files."""

import csv
import json

import numpy as np
import pytest

import relaybench as rb
from relaybench import cli
from relaybench.backends.accel.kernel import AccelKernel
from relaybench.experiments.accelerator import (CPU_ONLY, PAPER, AcceleratorMismatchError,
                                                AcceleratorResult, _compare, accelerator,
                                                check_designs, design_label)

pytest.importorskip("llvmlite")

SHAPE = (3, 32, 32)
DESIGNS = ("accel", "accel -batch=4")


@pytest.fixture(scope="module")
def result():
    return accelerator("resnet18", image_shape=SHAPE, designs=DESIGNS, number=1, repeat=1,
                       progress=False)


def _quantized(batch):
    mod, params = rb.models.resnet18(batch_size=batch, image_shape=SHAPE)
    with rb.quantize.qconfig(global_scale=8.0, skip_conv_layers=[0]):
        return rb.quantize.quantize(mod, params)


def test_rows_and_their_sums(result):
    assert [r["design"] for r in result.rows] == [CPU_ONLY, *DESIGNS]
    cpu_only = result.row("resnet18", CPU_ONLY)
    assert cpu_only["accel_ms"] == 0.0 and cpu_only["cpu_ms"] > 0
    assert cpu_only["total_ms"] == cpu_only["cpu_ms"]
    for design in DESIGNS:
        r = result.row("resnet18", design)
        assert r["error"] is None and r["exact"] is True
        assert r["input"] == "3x32x32"
        assert r["total_ms"] == pytest.approx(r["accel_ms"] + r["cpu_ms"], rel=1e-12)
        assert r["accel_ms"] > 0 and r["cpu_ms"] > 0
        assert r["speedup"] == pytest.approx(cpu_only["total_ms"] / r["total_ms"])
        assert 0 < r["gemm_utilization"] <= 1 and r["simulator_s"] > 0
        # the packed 3x3 and 1x1 convolutions go to the accelerator, the rest stays on the CPU
        assert r["accel_groups"] >= 10 and r["cpu_groups"] >= 5
    assert result.row("resnet18", "accel -batch=4")["batch"] == 4


@pytest.mark.parametrize("design", DESIGNS)
def test_simulated_time_is_the_groups_cycles_at_the_clock(result, design):
    """Rebuilt here: every accelerator call's cycles at 100 MHz, summed, per image; and the GEMM
    core can do no better than one block product per cycle."""
    batch = 4 if "batch=4" in design else 1
    lib = rb.build(_quantized(batch), target=design)
    lib.run(data=result.outputs[("resnet18", design)]["input"])
    calls = [compiled for _, _, compiled in lib.groups if isinstance(compiled, AccelKernel)]
    cycles = sum(k.last_stats.cycles for k in calls)
    macs = sum(k.plan.macs for k in calls)
    row = result.row("resnet18", design)
    assert row["accel_calls"] == len(calls)
    assert row["accel_cycles"] == cycles
    assert row["accel_ms"] == pytest.approx(cycles / 100e6 * 1e3 / batch, rel=1e-12)
    assert row["gemm_utilization"] == pytest.approx(macs / (cycles * 256), rel=1e-12)
    assert cycles >= macs // 256


@pytest.mark.parametrize("design", DESIGNS)
def test_accelerator_output_is_the_cpu_output(result, design):
    batch = 4 if "batch=4" in design else 1
    kept = result.outputs[("resnet18", design)]
    assert kept["input"].shape == (batch,) + SHAPE
    cpu = rb.build(_quantized(batch), target="llvm", opt_level=3)
    want = np.asarray(cpu.run(data=kept["input"]))
    np.testing.assert_array_equal(kept["accel"], want)
    np.testing.assert_array_equal(kept["cpu"], want)
    assert want.shape == (batch, 1000)
    # softmax rows: a real probability vector, not zeros
    np.testing.assert_allclose(want.sum(axis=1), 1.0, rtol=1e-4)


def test_a_mismatch_is_an_error_naming_the_place():
    want = np.zeros((1, 4), "float32")
    got = want.copy()
    got[0, 2] = 0.5
    with pytest.raises(AcceleratorMismatchError, match=r"resnet18 on 'accel'.* 1 of 4 "
                                                       r"elements.*0\.5.*\(0, 2\)"):
        _compare(want, got, "resnet18", "accel")
    with pytest.raises(AcceleratorMismatchError, match=r"output 0 is int8\[1, 4\]"):
        _compare(want, want.astype("int8"), "resnet18", "accel")
    _compare(want, want.copy(), "resnet18", "accel")   # equal: nothing raised


def test_tables_files_and_the_paper(result, tmp_path):
    table = result.table()
    assert [r["design"] for r in table.rows] == ["cpu only", "accel", "accel -batch=4 (batch 4)"]
    paper = result.paper_table().rows
    assert [r["configuration"] for r in paper] == ["cpu only", "single-batch", "multi-batch"]
    assert [r[next(k for k in r if k.startswith("paper"))] for r in paper] == ["307", "65", "61"]
    assert PAPER["resnet18"] == {"cpu only": 307.0, "single-batch": 65.0, "multi-batch": 61.0}
    assert "this host's int8 CPU path" in result.notes()
    back = AcceleratorResult.load(result.to_json(tmp_path / "a.json"))
    assert [r["total_ms"] for r in back.rows] == [r["total_ms"] for r in result.rows]
    with result.to_csv(tmp_path / "a.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["design"] for r in rows] == [CPU_ONLY, *DESIGNS]
    text = result.to_markdown(tmp_path / "a.md").read_text()
    assert "simulated" in text and "measured" in text and "| 307 |" in text
    assert result.plot().axes


def test_bad_input_is_refused_by_name():
    with pytest.raises(KeyError, match="resnet19"):
        accelerator("resnet19", image_shape=SHAPE, progress=False)
    with pytest.raises(ValueError, match="'llvm' is not an accelerator target"):
        check_designs(["accel", "llvm"])
    with pytest.raises(ValueError, match=r"design 'accel -batch=3'.*batch"):
        check_designs("accel -batch=3")
    with pytest.raises(ValueError, match="design 'cuda'.*unknown target kind"):
        accelerator("resnet18", image_shape=SHAPE, designs=["cuda"], progress=False)
    with pytest.raises(ValueError, match="no designs"):
        check_designs([])
    with pytest.raises(ValueError, match="number and repeat"):
        accelerator("resnet18", image_shape=SHAPE, number=0, progress=False)
    assert design_label("accel -batch=4") == "multi-batch"


def test_cli_quick_writes_its_files(capsys, tmp_path):
    out = tmp_path / "results"
    assert cli.main(["reproduce", "accelerator", "--out", str(out), "--quick",
                     "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "single-batch" in printed and "307" in printed
    for suffix in (".md", ".csv", ".json", ".png"):
        assert (out / f"accelerator{suffix}").stat().st_size > 0
    doc = json.loads((out / "accelerator.json").read_text())
    assert doc["settings"]["image_shape"] == [3, 32, 32]
    assert [r["design"] for r in doc["rows"]] == [CPU_ONLY, *DESIGNS]
    for r in doc["rows"][1:]:
        assert r["exact"] is True
        assert r["total_ms"] == pytest.approx(r["accel_ms"] + r["cpu_ms"])


def test_cli_bad_design_and_model(capsys, tmp_path):
    assert cli.main(["reproduce", "accelerator", "--out", str(tmp_path), "--quick",
                     "--targets", "llvm"]) == 1
    assert "'llvm' is not an accelerator target" in capsys.readouterr().err
    assert cli.main(["reproduce", "accelerator", "--out", str(tmp_path), "--quick",
                     "--models", "resnet19"]) == 1
    assert "resnet19" in capsys.readouterr().err


def test_a_design_that_fails_to_build_is_recorded(monkeypatch):
    """A build error of one design is kept in its row (the other measurements stay); the table
    and the paper's comparison say "failed"."""
    from relaybench.backends import build as build_module
    from relaybench.errors import CompileError
    real = build_module.build

    def failing(mod, target="llvm", **kwargs):
        if str(target).startswith("accel"):
            raise CompileError("fused group g: micro-op out of range")
        return real(mod, target=target, **kwargs)

    monkeypatch.setattr(build_module, "build", failing)
    result = accelerator("resnet18", image_shape=SHAPE, designs=["accel -batch=4"], number=1,
                         repeat=1, progress=False)
    row = result.row("resnet18", "accel -batch=4")
    assert row["error"] == "CompileError: fused group g: micro-op out of range"
    assert row["total_ms"] is None and row["batch"] == 4
    assert result.row("resnet18", CPU_ONLY)["cpu_ms"] > 0
    assert result.table().rows[1]["ms/image"] == "failed"
    assert result.paper_table().rows[1]["here ms/image"] == "failed"


def test_tree_lstm_rows_run_by_the_vm():
    """The recursive model: its three requantized cell layers on the accelerator, called once
    per node of the 31-node tree; the simulated time is their cycles at the clock."""
    result = accelerator("tree_lstm", designs=["accel"], number=1, repeat=1, progress=False)
    assert [r["design"] for r in result.rows] == [CPU_ONLY, "accel"]
    cpu_only, r = result.row("tree_lstm", CPU_ONLY), result.row("tree_lstm", "accel")
    assert cpu_only["cpu_ms"] > 0 and cpu_only["accel_ms"] == 0.0
    assert r["error"] is None and r["exact"] is True and r["input"] == "31-node tree"
    assert r["accel_groups"] == 3 and r["accel_calls"] == 3 * 31
    assert r["accel_ms"] == pytest.approx(r["accel_cycles"] / (r["clock_mhz"] * 1e6) * 1e3)
    assert r["total_ms"] == pytest.approx(r["accel_ms"] + r["cpu_ms"], rel=1e-12)
    assert 0 < r["gemm_utilization"] <= 1
    assert result.outputs[("tree_lstm", "accel")]["unpacked_cpu_max_abs_diff"] < 1e-5
    assert "TreeLSTM" in result.notes()
