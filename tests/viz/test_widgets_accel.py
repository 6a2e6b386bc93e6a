"""The simulated accelerator in the workbench: the pass explorer's ``accel`` target, GraphPack as
a step, accelerator groups drawn apart from CPU groups, and the fusion view's column.

The explorer's model is a small residual network: a float first convolution (3 channels: the
accelerator's block is 16, so quantization leaves it in float, as ``skip_conv_layers=[0]``
says), a max-pool (where GraphPack's packed region starts), two 16-channel convolutions with a
bias and a residual add, a global average pool (where it stops) and a dense layer. Its results
are checked against the model written out in numpy (within quantization error) and against the
quantized program built for ``llvm`` by hand (bit for bit). The drawing and the fusion view are
checked against the compiled module's own kernel list (``GroupKernel.accel``, the simulator's
cycles, ``compile_stats.cpu_reasons``), never against the drawing code.
"""

import re

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.backends.target import Target
from relaybench.ir import Call, Op
from relaybench.ir.functor import post_order
from relaybench.viz.dot import ACCEL_CLUSTER, CPU_CLUSTER, to_dot
from relaybench.viz.widgets import sqnr_db

pytest.importorskip("ipywidgets")

C, F, H, UNITS = 3, 16, 8, 10
QCONFIG = {"skip_conv_layers": [0]}      # Relay's defaults: the first conv2d and the dense in float
CONFIG = Target.parse("accel").accel_config()
PACKED_DATA = f"NCHW{CONFIG.batch}n{CONFIG.block_out}c"
PACKED_KERNEL = f"OIHW{CONFIG.block_out}o{CONFIG.block_out}i"


def _model():
    x = rb.var("x", shape=(1, C, H, H))
    w0, w1 = rb.var("w0", shape=(F, C, 3, 3)), rb.var("w1", shape=(F, F, 3, 3))
    w2, b1, d = rb.var("w2", shape=(F, F, 3, 3)), rb.var("b1", shape=(F,)), rb.var("d", shape=(UNITS, F))

    def conv(data, w):
        return op.nn.conv2d(data, w, padding=(1, 1), channels=F, kernel_size=(3, 3))

    y = op.nn.max_pool2d(op.nn.relu(conv(x, w0)), pool_size=(2, 2), strides=(2, 2))
    z = op.nn.relu(op.nn.bias_add(conv(y, w1), b1))
    z = op.nn.relu(op.add(conv(z, w2), y))
    out = op.nn.dense(op.nn.batch_flatten(op.nn.global_avg_pool2d(z)), d, units=UNITS)
    mod = rb.IRModule.from_expr(rb.Function([x, w0, w1, b1, w2, d], out))
    rng = np.random.default_rng(3)
    params = {"w0": rng.standard_normal((F, C, 3, 3)).astype("float32") * 0.4,
              "w1": rng.standard_normal((F, F, 3, 3)).astype("float32") * 0.1,
              "b1": rng.standard_normal(F).astype("float32") * 0.1,
              "w2": rng.standard_normal((F, F, 3, 3)).astype("float32") * 0.1,
              "d": rng.standard_normal((UNITS, F)).astype("float32") * 0.5}
    return mod, params


def _conv(x, w):
    """A 3x3 convolution with padding 1, as a sum of shifted products."""
    n, _, h, width = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, width))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + h, j:j + width], w[:, :, i, j])
    return out


def _expected(x, params):
    """The float model in numpy."""
    p = {k: v.astype("float64") for k, v in params.items()}
    y = np.maximum(_conv(x.astype("float64"), p["w0"]), 0.0)
    y = y.reshape(1, F, H // 2, 2, H // 2, 2).max(axis=(3, 5))
    z = np.maximum(_conv(y, p["w1"]) + p["b1"][None, :, None, None], 0.0)
    z = np.maximum(_conv(z, p["w2"]) + y, 0.0)
    return z.mean(axis=(2, 3)) @ p["d"].T


@pytest.fixture(scope="module")
def model():
    return _model()


def _quantized_by_hand(model):
    mod, params = model
    with rb.quantize.qconfig(**QCONFIG):
        return rb.quantize.quantize(mod, params)


def _int8_convs(mod):
    main = rb.passes.InferType()(mod)["main"]
    return [e for e in post_order(main) if isinstance(e, Call) and isinstance(e.op, Op)
            and e.op.name == "nn.conv2d" and str(e.args[0].checked_type.dtype) == "int8"]


# ---- the explorer's accelerator target ------------------------------------------------------------

def test_the_accelerator_is_offered_only_for_a_quantized_program(model):
    mod, params = model
    explorer = rb.viz.PassExplorer(mod, params)
    assert "accel" in explorer.targets and "accel" not in explorer.target_dropdown.options
    with pytest.raises(ValueError, match="the accelerator runs quantized programs .* turn quantization on"):
        explorer.time("accel")
    explorer.quantize_box.value = True
    assert "accel" in explorer.target_dropdown.options
    assert explorer.target != "accel"           # offered, not chosen: the pipeline stays as it was
    explorer.quantize_box.value = False
    assert "accel" not in explorer.target_dropdown.options
    # a program given already quantized (int8 convolutions) runs there with the toggle off
    quantized = _quantized_by_hand(model)
    given = rb.viz.PassExplorer(quantized, targets=("interpreter", "llvm", "accel"))
    assert not given.quantize and "accel" in given.target_dropdown.options
    row = given.time("accel")
    assert "GraphPack" in [r.name for r in given.steps] and row["accel_groups"] >= 1
    by_hand = rb.build(quantized, target="llvm").run(x=given.inputs["x"])
    assert row["matches_llvm"] and np.array_equal(given.last_output, by_hand) and row["matches"]


def test_choosing_the_accelerator_puts_graph_pack_after_quantization(model):
    mod, params = model
    explorer = rb.viz.PassExplorer(mod, params, quantize=dict(QCONFIG))
    explorer.run()
    assert "GraphPack" not in [r.name for r in explorer.steps]
    explorer.target_dropdown.value = "accel"    # the click re-runs the passes, packing
    names = [r.name for r in explorer.steps]
    assert explorer.run_count == 2 and names.count("GraphPack") == 1
    pack = names.index("GraphPack")
    assert names.index("QuantizeRealize") < pack < names.index("FuseOps")
    explorer.step(pack)
    record = explorer.current
    assert PACKED_DATA not in record.before_text and PACKED_KERNEL not in record.before_text
    assert PACKED_DATA in explorer.current_text and PACKED_KERNEL in explorer.current_text
    # every int8 convolution of the quantized program is packed, data and weights
    convs = _int8_convs(record.after)
    assert len(convs) == len(_int8_convs(_quantized_by_hand(model))) == 2
    for conv in convs:
        assert conv.attrs.data_layout == PACKED_DATA and conv.attrs.kernel_layout == PACKED_KERNEL
        assert tuple(conv.args[0].checked_type.shape) == (1, F // CONFIG.block_out, H // 2, H // 2,
                                                          CONFIG.batch, CONFIG.block_out)
    # the step's diff names the layout transforms it added
    assert "layout_transform" in explorer.step_label.value
    explorer.target_dropdown.value = "llvm"     # leaving the accelerator: no packing any more
    assert "GraphPack" not in [r.name for r in explorer.steps]


def test_time_on_the_accelerator_is_bit_exact_with_llvm(model):
    mod, params = model
    explorer = rb.viz.PassExplorer(mod, params, quantize=dict(QCONFIG))
    row = explorer.time("accel")                # chooses it: the passes run with GraphPack
    assert explorer.target == "accel" and "GraphPack" in [r.name for r in explorer.steps]
    # bit for bit the quantized program built for llvm by hand ...
    x = explorer.inputs["x"]
    by_hand = rb.build(_quantized_by_hand(model), target="llvm").run(x=x)
    out = explorer.last_output
    assert out.dtype == by_hand.dtype and np.array_equal(out, by_hand)
    assert row["matches_llvm"] and row["llvm_max_abs_error"] == 0.0
    # ... which is the float model within quantization error
    expected = _expected(x, params)
    assert row["sqnr_db"] == pytest.approx(sqnr_db(out, expected), abs=0.5) and row["sqnr_db"] > 25
    assert row["matches_quantized"] and row["matches"]
    # the time: the accelerator's groups at their simulated cycles, the rest measured on the CPU
    lib = explorer.accel_module
    accel_nodes = [n for n in lib.graph.nodes if n.kernel.accel]
    assert row["groups"] == len(lib.graph.nodes) and row["accel_groups"] == len(accel_nodes) >= 1
    simulated = sum(n.kernel.compiled.cycles / (CONFIG.clock_mhz * 1e6) for n in accel_nodes) * 1e3
    assert row["accel_ms"] == pytest.approx(simulated, abs=1e-3 * len(accel_nodes)) and simulated > 0
    assert row["cpu_ms"] > 0 and row["latency_ms"] == pytest.approx(row["accel_ms"] + row["cpu_ms"])
    table = explorer.results_html.value
    for column in ("accelerator (simulated) ms", "CPU ms", "groups on the accelerator"):
        assert column in table
    assert f"{row['accel_groups']} of {row['groups']}" in table and "bit-exact with llvm" in table
    assert "simulated on the accelerator" in explorer.status.value
    # the final program's graph is now drawn from the build: its accelerator groups apart
    assert explorer.current is explorer.steps[-1]
    assert explorer.current_svg.count(f'fill="{ACCEL_CLUSTER["fillcolor"]}"') == row["accel_groups"]
    explorer.step(0)
    assert ACCEL_CLUSTER["fillcolor"] not in explorer.current_svg
    explorer.step(-1)
    # a CPU row of the same table leaves the accelerator's columns empty
    llvm_row = explorer.time("llvm")
    assert llvm_row["matches"] and "accel_ms" not in llvm_row
    assert "GraphPack" not in [r.name for r in explorer.steps]
    assert np.array_equal(explorer.last_output, by_hand)


def test_a_result_unlike_the_llvm_builds_is_a_failure(model, monkeypatch):
    mod, params = model
    explorer = rb.viz.PassExplorer(mod, params, quantize=dict(QCONFIG))
    explorer.run()
    wrong = explorer.llvm_reference() + np.float32(1e-6)
    monkeypatch.setattr(explorer, "llvm_reference", lambda: wrong)
    row = explorer.time("accel")
    assert row["matches_quantized"] and not row["matches_llvm"] and not row["matches"]
    assert row["llvm_max_abs_error"] > 0
    assert "NO: differs from the llvm build" in explorer.results_html.value


# ---- accelerator groups drawn apart ---------------------------------------------------------------

@pytest.fixture(scope="module")
def resnet_accel():
    mod, params = rb.models.resnet18(batch_size=1, image_shape=(3, 32, 32))
    with rb.quantize.qconfig(global_scale=8.0, skip_conv_layers=[0]):
        q = rb.quantize.quantize(mod, params)
    lib = rb.build(q, target="accel")
    lib.run(data=np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32"))
    return lib


_CLUSTER = re.compile(r"subgraph cluster_\d+ \{\n\t\t(.*)\n")


def _cluster_attrs(source: str) -> list:
    """The attribute line of every cluster of a DOT text."""
    return _CLUSTER.findall(source)


def test_the_dot_of_an_accelerator_build_colors_its_groups(resnet_accel):
    lib = resnet_accel
    on_accel = [n.kernel.accel for n in lib.graph.nodes]    # one per call, from the kernels
    assert 0 < sum(on_accel) < len(on_accel)
    clusters = _cluster_attrs(to_dot(lib).source)
    accel_color = f'color="{ACCEL_CLUSTER["color"]}"'
    cpu_color = f'color="{CPU_CLUSTER["color"]}"'
    assert len(clusters) == len(lib.graph.nodes)
    assert sum(accel_color in c for c in clusters) == sum(on_accel)
    assert sum(cpu_color in c for c in clusters) == len(on_accel) - sum(on_accel)
    # each accelerator cluster says its simulated cycles, as its kernel counted them
    cycles = sorted(n.kernel.compiled.cycles for n in lib.graph.nodes if n.kernel.accel)
    drawn = sorted(int(m) for c in clusters for m in re.findall(r'label="[^"]*?accelerator, (\d+) cycles', c))
    assert drawn == cycles and all(c > 0 for c in cycles)
    # the same drawing from the optimized module and the call positions of the accelerator's groups
    positions = {i: n.kernel.compiled.cycles for i, n in enumerate(lib.graph.nodes) if n.kernel.accel}
    # (the tooltips left out: the compiled module's also name the kernel each group runs)
    assert to_dot(lib.mod, accel_groups=positions, tooltips=False).source == to_dot(lib, tooltips=False).source
    # the module's notebook view lists where each call runs
    calls = rb.viz.html(lib)
    assert "runs on" in calls and calls.count(">accelerator</td>") == sum(on_accel)


def test_a_cpu_build_draws_every_group_on_the_cpu(model):
    mod, params = model
    lib = rb.build(mod, target="llvm", params=params)
    clusters = _cluster_attrs(to_dot(lib).source)
    assert len(clusters) == len(lib.graph.nodes)
    assert all("\\nCPU" in c and ACCEL_CLUSTER["color"] not in c for c in clusters)
    # a module drawn without saying where its groups run keeps the plain cluster label
    assert not any("\\nCPU" in c for c in _cluster_attrs(to_dot(lib.mod).source))


def test_accel_groups_that_name_no_group_are_errors(resnet_accel):
    lib = resnet_accel
    with pytest.raises(ValueError, match=r"accel_groups names 'fused_nope', which is no fused group of "
                                         r"@main; its groups .* are: 0 \(fused_layout_transform\)"):
        to_dot(lib.mod, accel_groups=["fused_nope"])
    with pytest.raises(ValueError, match="no fused group"):
        to_dot(lib.mod, accel_groups=[len(lib.graph.nodes) + 5])
    with pytest.raises(TypeError, match="not a float"):
        to_dot(lib.mod, accel_groups=[1.5])
    with pytest.raises(ValueError, match=r"is -3; a group's value is True, False or its simulated cycles"):
        to_dot(lib.mod, accel_groups={0: -3})
    with pytest.raises(ValueError, match="compiled module's kernels say themselves"):
        to_dot(lib, accel_groups=[0])
    accel_color = f'color="{ACCEL_CLUSTER["color"]}"'
    # a Primitive function marks the calls of that very function ...
    first = next(i for i, n in enumerate(lib.graph.nodes) if n.kernel.accel)
    source = to_dot(lib.mod, accel_groups=[lib.graph.nodes[first].function]).source
    marked = [accel_color in c for c in _cluster_attrs(source)]
    assert marked[first] and sum(marked) == sum(n.function is lib.graph.nodes[first].function
                                                for n in lib.graph.nodes)
    # ... a group's name every call of a group so named (its kernel's name without the _1, _2)
    name = "fused_nn_conv2d_add_nn_relu_add_right_shift_clip_cast"
    source = to_dot(lib.mod, accel_groups=[name]).source
    named = [re.sub(r"_\d+$", "", n.kernel.name) == name for n in lib.graph.nodes]
    assert sum(named) >= 2
    assert [accel_color in c for c in _cluster_attrs(source)] == named


# ---- the fusion view's column ---------------------------------------------------------------------

def test_fusion_view_says_where_each_group_runs(resnet_accel):
    lib = resnet_accel
    view = rb.viz.FusionView(lib, profile=False)    # the fixture has run it: cycles are known
    reasons = lib.compile_stats.cpu_reasons
    assert len(view.groups) == len(lib.kernels)
    for row, k in zip(view.groups, lib.kernels):
        assert row["group"] == k.name
        if k.accel:
            assert row["runs on"] == "accelerator" and row["cycles"] == k.compiled.cycles > 0
            assert row["why on the CPU"] == "" and k.name not in reasons
        else:
            assert row["runs on"] == "CPU" and row["cycles"] == ""
            assert row["why on the CPU"] == reasons[k.name] != ""
    assert "runs on" in view.table_html.value and "why on the CPU" in view.table_html.value
    assert [view.tabs.get_title(i) for i in range(4)] == ["loop IR", "LLVM IR", "assembly",
                                                          "accelerator program"]
    accel = next(r for r in view.groups if r["runs on"] == "accelerator")
    view.select(accel["group"])
    assert "GEMM" in view.current_source("accel") and "GEMM" in view.source_html[3].value
    assert f"runs on the accelerator, {accel['cycles']} cycles per call" in view.group_label.value
    cpu = next(r for r in view.groups if r["runs on"] == "CPU" and "nn.conv2d" in r["ops"])
    view.select(cpu["group"])
    assert "runs on the CPU" in view.current_source("accel")
    assert cpu["why on the CPU"] in view.group_label.value


def test_fusion_view_of_a_cpu_build_has_no_accelerator_columns(model):
    mod, params = model
    view = rb.viz.FusionView(mod, params, profile=False)
    assert {r["runs on"] for r in view.groups} == {"CPU"}
    assert all("cycles" not in r for r in view.groups) and len(view.source_html) == 3
