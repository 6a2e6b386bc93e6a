"""The composability experiment on small versions of ResNet-18 and the DQN.

The facts checked come from the models' structure, counted by hand or by another route:

* the DQN is three (conv2d, bias_add, relu), a batch_flatten, (dense, bias_add, relu) and
  (dense, bias_add): 15 operators, so 15 kernels at the baseline; fused, each conv2d and dense
  takes its bias_add and relu along, and batch_flatten (injective) cannot join a conv2d's
  group: 6 kernels. It computes nothing from constants alone, so FoldConstant leaves 6.
* ResNet-18's baseline is Relay's opt_level 0, built here directly with ``opt_level=0`` (where
  FuseOps puts every operator in a group of its own): the same number of kernel calls, each of
  one operator. Its batch norms compute scales from constants, which FoldConstant removes.
* layout_transform is inserted by AlterOpLayout only.

Timings are never asserted, only the relations between the fields of each row.
"""

import importlib
import io
import json

import numpy as np
import pytest

import relaybench as rb
from relaybench.experiments import ComposabilityResult, OutputMismatchError, composability

# the module (the package's attribute of the same name is the function)
composability_module = importlib.import_module("relaybench.experiments.composability")

SHAPES = {"resnet18": (3, 32, 32), "dqn": (4, 36, 36)}
# The paper's order, written out by hand.
EXPECTED_CONFIGURATIONS = [
    "baseline", "+ FuseOps", "+ FoldConstant", "+ EliminateCommonSubexpr",
    "+ CombineParallelConv2D", "+ FoldScaleAxis", "+ CanonicalizeCast", "+ CanonicalizeOps",
    "+ AlterOpLayout",
]


@pytest.fixture(scope="module")
def result():
    return composability(["resnet18", "dqn"], image_shape=SHAPES, number=1, repeat=1,
                         progress=False)


def rows_of(result, model):
    return {r["configuration"]: r for r in result.rows if r["model"] == model}


def test_rows_cover_every_model_and_configuration_in_order(result):
    assert len(result.rows) == 2 * 9
    for model, shape in SHAPES.items():
        rows = [r for r in result.rows if r["model"] == model]
        assert [r["configuration"] for r in rows] == EXPECTED_CONFIGURATIONS
        for r in rows:
            assert r["target"] == "llvm"
            assert r["input"] == "1x" + "x".join(map(str, shape))
            assert r["median_ms"] > 0 and r["compile_s"] > 0
            assert r["kernels"] >= r["distinct_kernels"] >= 1
    assert result.models == ["resnet18", "dqn"]
    assert result.configurations == EXPECTED_CONFIGURATIONS


def test_speedup_is_over_the_baseline_of_the_same_model(result):
    for model in SHAPES:
        rows = rows_of(result, model)
        base = rows["baseline"]["median_ms"]
        assert rows["baseline"]["speedup"] == 1.0
        for r in rows.values():
            assert r["speedup"] == pytest.approx(base / r["median_ms"], rel=1e-12)


def test_dqn_kernel_counts_follow_its_layers(result):
    kernels = {c: r["kernels"] for c, r in rows_of(result, "dqn").items()}
    assert kernels["baseline"] == 15
    assert kernels["+ FuseOps"] == 6
    assert kernels["+ FoldConstant"] == 6


def test_resnet_baseline_is_opt_level_0_with_one_kernel_per_operator(result):
    mod, params = rb.models.get("resnet18", image_shape=SHAPES["resnet18"])
    level0 = rb.build(mod, params=params, opt_level=0)
    assert all(len(kernel.ops) == 1 for kernel in level0.kernels)
    rows = rows_of(result, "resnet18")
    assert rows["baseline"]["kernels"] == len(level0.graph.nodes)
    assert rows["baseline"]["distinct_kernels"] == len(level0.kernels)
    assert rows["+ FuseOps"]["kernels"] < rows["baseline"]["kernels"]
    # the batch norms' scales, computed from constants, fold away
    assert rows["+ FoldConstant"]["kernels"] < rows["+ FuseOps"]["kernels"]


def test_layout_transform_appears_only_with_alter_op_layout(result):
    for model in SHAPES:
        rows = rows_of(result, model)
        for config in EXPECTED_CONFIGURATIONS[:-1]:
            assert rows[config]["layout_transforms"] == 0, (model, config)
    # ResNet-18's RGB input goes into NCHW3c; the DQN's first layer reads its input as it is
    # and its dense layer reads the last convolution's blocked output: no transform at all
    assert rows_of(result, "resnet18")["+ AlterOpLayout"]["layout_transforms"] > 0
    assert rows_of(result, "dqn")["+ AlterOpLayout"]["layout_transforms"] == 0


def test_a_configuration_that_changes_the_output_is_caught(monkeypatch):
    real_build = composability_module._build

    def wrong_fold_constant(mod, target, params, disabled_pass, required_pass, num_threads):
        if "FoldConstant" in required_pass:  # as if FoldConstant doubled a weight
            params = dict(params, dense2_weight=params["dense2_weight"] * 2)
        return real_build(mod, target, params, disabled_pass, required_pass, num_threads)

    monkeypatch.setattr(composability_module, "_build", wrong_fold_constant)
    with pytest.raises(OutputMismatchError, match=r"dqn on llvm, configuration '\+ FoldConstant'"):
        composability(["dqn"], image_shape={"dqn": (4, 36, 36)}, number=1, repeat=1,
                      progress=False)


def test_table_has_a_speedup_column_per_model(result):
    table = result.table()
    assert isinstance(table, rb.viz.Table)
    assert [r["configuration"] for r in table.rows] == EXPECTED_CONFIGURATIONS
    assert list(table.rows[0]) == ["configuration", "resnet18", "dqn"]
    assert table.rows[0]["resnet18"] == table.rows[0]["dqn"] == "1.00"
    for row, value in zip(table.rows, (r["speedup"] for r in result.rows if r["model"] == "dqn")):
        assert float(row["dqn"]) == pytest.approx(value, abs=0.005)
    kernels = result.table("kernels")
    assert kernels.rows[0]["dqn"] == 15
    assert "+ AlterOpLayout" in str(table)
    with pytest.raises(ValueError, match="unknown metric 'speed'"):
        result.table("speed")
    html = result._repr_html_()
    assert "<table>" in html and "resnet18" in html


def test_plot_draws_one_series_per_model(result):
    from matplotlib.figure import Figure
    fig = result.plot()
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert len(ax.containers) == 2                     # one group of bars per model
    assert [len(c) for c in ax.containers] == [9, 9]
    heights = [bar.get_height() for bar in ax.containers[1]]
    assert heights == pytest.approx([r["speedup"] for r in result.rows if r["model"] == "dqn"])
    assert [t.get_text() for t in ax.get_xticklabels()] == EXPECTED_CONFIGURATIONS
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["resnet18", "dqn"]
    assert "Speedup" in ax.get_title() and "speedup" in ax.get_ylabel()
    lines = result.plot(kind="line", log=True).axes[0]
    assert lines.get_yscale() == "log"
    assert len(lines.get_lines()) == 2 + 1             # the models and the 1x line


def test_csv_and_json_round_trip(result, tmp_path):
    from_csv = ComposabilityResult.load(result.to_csv(tmp_path / "c.csv"))
    assert from_csv.rows == result.rows
    from_json = ComposabilityResult.load(result.to_json(tmp_path / "c.json"))
    assert from_json.rows == result.rows
    assert from_json.settings["number"] == 1 and from_json.settings["models"] == ["resnet18", "dqn"]
    assert str(from_json.table()) == str(result.table())
    (tmp_path / "other.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="not a composability result"):
        ComposabilityResult.load(tmp_path / "other.json")


def test_unknown_model_and_target_fail_before_compiling():
    with pytest.raises(KeyError, match="did you mean resnet18"):
        composability(["resnet19"], progress=False)
    with pytest.raises(ValueError, match="'cuda' has no backend yet; available targets: llvm, "
                                         "opencl"):
        composability(["dqn"], targets=["cuda"], progress=False)
    with pytest.raises(ValueError, match="interpreter is not a target"):
        composability(["dqn"], targets="interpreter", progress=False)


def test_one_image_shape_resizes_only_models_with_as_many_channels():
    kwargs = composability_module._model_kwargs
    assert kwargs("resnet18", (3, 32, 32)) == {"image_shape": (3, 32, 32)}
    assert kwargs("dqn", (3, 32, 32)) == {}               # four stacked frames stay
    assert kwargs("dqn", (4, 36, 36)) == {"image_shape": (4, 36, 36)}
    assert kwargs("dqn", {"resnet18": (3, 16, 16)}) == {}
    assert kwargs("vgg16", None) == {}


def test_text_progress_bar():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    log = io.StringIO()
    bar = composability_module._Progress(2, stream=log)
    bar.update("dqn llvm baseline")
    bar.update("dqn llvm baseline", step=1)
    bar.update("dqn llvm + FuseOps")
    bar.update("dqn llvm + FuseOps", step=1)
    bar.close()
    assert log.getvalue() == "[1/2] dqn llvm baseline\n[2/2] dqn llvm + FuseOps\n"

    term = Terminal()
    bar = composability_module._Progress(4, stream=term)
    bar.update("x", step=1)
    bar.close()
    assert term.getvalue() == "\r\x1b[K[######..................] 1/4 x\n"

    quiet = io.StringIO()
    bar = composability_module._Progress(4, enabled=False, stream=quiet)
    bar.update("x", step=1)
    bar.close()
    assert quiet.getvalue() == ""


def test_outputs_are_compared_with_a_tolerance_relative_to_the_output():
    compare = composability_module._compare
    ref = [np.array([10.0, 1e-9], dtype="float32")]
    compare([ref[0] * (1 + 5e-5)], ref, "here")          # within rtol 1e-4
    compare([np.array([10.0, 5e-5], dtype="float32")], ref, "here")  # near zero: atol 1e-4
    with pytest.raises(OutputMismatchError, match=r"here: output 0 differs .* at \(0,\)"):
        compare([np.array([10.01, 0.0], dtype="float32")], ref, "here")
    with pytest.raises(OutputMismatchError, match="shape"):
        compare([np.zeros(3, "float32")], ref, "here")
