"""The pass explorer and the fusion view, driven from Python as a click would drive them.

The model is ``add(relu(bias_add(conv2d(x, w), b)), y)`` with ``w`` and ``b`` bound as parameters.
Its result is checked against a convolution written out in numpy, and the views against facts of
Relay's pipeline: CanonicalizeOps turns ``nn.bias_add`` into ``add``, FuseOps is the pass that
makes ``Primitive=1`` functions (one per operator at opt_level 0), and the convolution, its bias,
the relu and the residual add fuse into one group anchored on ``nn.conv2d``.
"""

import platform

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.ir import Call, Op
from relaybench.ir.functor import post_order

pytest.importorskip("ipywidgets")

C, O, H = 2, 4, 5


def _model():
    x = rb.var("x", shape=(1, C, H, H))
    w = rb.var("w", shape=(O, C, 3, 3))
    b = rb.var("b", shape=(O,))
    y = rb.var("y", shape=(1, O, H, H))
    conv = op.nn.conv2d(x, w, padding=(1, 1), channels=O, kernel_size=(3, 3))
    body = op.add(op.nn.relu(op.nn.bias_add(conv, b)), y)
    mod = rb.IRModule.from_expr(rb.Function([x, w, b, y], body))
    rng = np.random.default_rng(7)
    params = {"w": rng.standard_normal((O, C, 3, 3)).astype("float32"),
              "b": rng.standard_normal(O).astype("float32")}
    return mod, params


def _expected(inputs, params):
    """The model written out in numpy: a 3x3 convolution with padding 1 as a sum of shifted
    products, then bias, relu and the residual."""
    x, y = inputs["x"].astype("float64"), inputs["y"].astype("float64")
    w, b = params["w"].astype("float64"), params["b"].astype("float64")
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, O, H, H))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + H, j:j + H], w[:, :, i, j])
    out += b[None, :, None, None]
    return np.maximum(out, 0.0) + y


@pytest.fixture(scope="module")
def model():
    return _model()


@pytest.fixture
def explorer(model):
    mod, params = model
    return rb.viz.PassExplorer(mod, params, opt_level=3)


def test_widgets_have_labels_and_css_classes(explorer):
    assert "FuseOps" in explorer.pass_names
    assert explorer.pass_names[:2] == ["Legalize", "SimplifyInference"]
    # the default pipeline runs FoldConstant twice: the second gets its own label
    assert "FoldConstant" in explorer.pass_names and "FoldConstant#2" in explorer.pass_names
    for name in explorer.pass_names:
        assert explorer.checkboxes[name].description == name
        assert explorer.checkboxes[name].value is True
    assert "rb-ir-text" in explorer.ir_html._dom_classes
    assert "rb-graph" in explorer.graph_html._dom_classes
    assert "rb-results" in explorer.results_html._dom_classes
    # before a run the input program is shown: bias_add not yet canonicalized, nothing fused
    assert "nn.bias_add" in explorer.current_text and "Primitive=1" not in explorer.current_text
    assert explorer.snapshots is None and explorer.steps == []


def test_run_records_snapshots_and_steps_through_them(explorer):
    explorer.run_button.click()              # the button does what run() does
    assert explorer.run_count == 1
    assert explorer.snapshots is not None and len(explorer.snapshots) > len(explorer.pass_names)
    names = [r.name for r in explorer.steps]
    assert "CanonicalizeOps" in names and names[-1] == "FuseOps"
    # the stepper starts on the last pass that changed the program: the final, fused program
    assert explorer.step_slider.max == len(names) - 1
    assert "Primitive=1" in explorer.current_text
    assert explorer.current_text == explorer.final_text
    texts, shown = [], []
    for i in range(len(names)):
        explorer.step(i)
        assert explorer.current.name == names[i]
        assert names[i] in explorer.step_label.value
        texts.append(explorer.current_text)
        shown.append(explorer.ir_html.value)
    assert all(a != b for a, b in zip(texts, texts[1:]))
    assert len(set(shown)) == len(shown)
    step = names.index("CanonicalizeOps")
    assert "nn.bias_add" in explorer.steps[step].before_text
    assert "nn.bias_add" not in texts[step]
    # prev / next buttons move the stepper by one
    explorer.step(0)
    explorer.next_button.click()
    assert explorer.current.name == names[1]
    explorer.prev_button.click()
    assert explorer.current.name == names[0]
    with pytest.raises(IndexError, match="step 99"):
        explorer.step(99)


def test_unchecking_fuse_ops_reruns_and_changes_what_is_shown(explorer):
    explorer.run()
    fused_text, fused_ir, fused_graph = (explorer.final_text, explorer.ir_html.value,
                                         explorer.graph_html.value)
    assert "Primitive=1" in fused_text
    explorer.checkboxes["FuseOps"].value = False    # a click on the check box re-runs
    assert explorer.run_count == 2
    assert "FuseOps" not in explorer.enabled and "FuseOps" in explorer.disabled
    assert "Primitive=1" not in explorer.final_text
    assert "Primitive=1" not in explorer.current_text
    assert "FuseOps" not in [r.name for r in explorer.snapshots]
    assert explorer.ir_html.value != fused_ir
    assert explorer.graph_html.value != fused_graph
    explorer.set_enabled("FuseOps", True)
    assert explorer.run_count == 3 and explorer.final_text == fused_text


def test_no_rerun_before_a_run_or_with_auto_run_off(explorer):
    explorer.set_enabled("FuseOps", False)
    assert explorer.run_count == 0 and explorer.snapshots is None
    explorer.run()
    explorer.auto_run_box.value = False
    explorer.set_enabled("FuseOps", True)
    assert explorer.run_count == 1 and "Primitive=1" not in explorer.final_text
    explorer.run()
    assert "Primitive=1" in explorer.final_text
    with pytest.raises(KeyError, match="no pass labelled 'Fusion'"):
        explorer.set_enabled("Fusion", False)


def test_opt_level_zero_fuses_every_operator_alone(explorer):
    explorer.run()
    explorer.opt_level_slider.value = 0     # re-runs
    # at opt_level 0 the opt_level-3 passes are skipped (bias_add stays) and FuseOps puts each
    # of the four operators in its own group
    assert explorer.run_count == 2
    assert "nn.bias_add" in explorer.final_text
    assert explorer.final_text.count("Primitive=1") == 4
    skipped = {r.name for r in explorer.snapshots.skipped()}
    assert {"CanonicalizeOps", "AlterOpLayout"} <= skipped


def test_move_changes_the_order_the_passes_run_in(explorer):
    before = list(explorer.pass_names)
    explorer.move("FuseOps", -2)
    after = explorer.pass_names
    assert after.index("FuseOps") == before.index("FuseOps") - 2
    assert sorted(after) == sorted(before)
    assert [c.description for c in explorer.pass_box.children] == after
    explorer.move("SimplifyInference", -5)       # clamped at the top
    assert explorer.pass_names[0] == "SimplifyInference"
    explorer.move("FuseOps", -100)
    assert explorer.pass_names[0] == "FuseOps"
    explorer.run()
    ran = [r.name for r in explorer.snapshots if r.depth == 1]
    assert ran[0] == "FuseOps"
    assert ran.index("CanonicalizeOps") > ran.index("FuseOps")
    # with the fusion done first, the later passes still change @main's unfused remainder
    # and the result still agrees (checked below by the timing rows)


def test_time_on_the_interpreter_and_llvm(model):
    mod, params = model
    explorer = rb.viz.PassExplorer(mod, params, opt_level=3)
    expected = _expected(explorer.inputs, params)
    # the OpenCL target joins when pyopencl is installed
    assert explorer.target_dropdown.options[:2] == ("interpreter", "llvm")
    row0 = explorer.time("interpreter")
    assert explorer.run_count == 1                 # timing runs the passes first
    np.testing.assert_allclose(explorer.last_output, expected, rtol=1e-4, atol=1e-4)
    row1 = explorer.time("llvm")
    np.testing.assert_allclose(explorer.last_output, expected, rtol=1e-4, atol=1e-4)
    assert explorer.results == [row0, row1]
    assert [r["target"] for r in explorer.results] == ["interpreter", "llvm"]
    assert all(r["matches"] and r["max_abs_error"] < 1e-3 for r in explorer.results)
    assert row0["speedup"] == 1.0
    assert row1["speedup"] == pytest.approx(row0["latency_ms"] / row1["latency_ms"])
    assert all(r["latency_ms"] > 0 for r in explorer.results)
    assert explorer.progress.value == explorer.progress.max
    # an earlier configuration stays in the table when the configuration changes
    explorer.set_enabled("FuseOps", False)
    explorer.target_dropdown.value = "llvm"
    explorer.time_button.click()
    assert len(explorer.results) == 3
    row2 = explorer.results[2]
    assert row2["disabled"] == ("FuseOps",) and row2["matches"]
    np.testing.assert_allclose(explorer.last_output, expected, rtol=1e-4, atol=1e-4)
    html = explorer.results_html.value
    assert html.count("<tr>") == 4 and "FuseOps" in html and "interpreter" in html
    with pytest.raises(ValueError, match="unknown target 'cuda'"):
        explorer.time("cuda")


def _conv_layouts(mod):
    return sorted((e.attrs.data_layout, e.attrs.kernel_layout) for e in post_order(mod["main"])
                  if isinstance(e, Call) and isinstance(e.op, Op) and e.op.name == "nn.conv2d")


def test_the_passes_apply_the_chosen_targets_policies(model):
    # the program timed on a target is laid out as rb.build lays it out for that target
    pyopencl = pytest.importorskip("pyopencl")
    if not pyopencl.get_platforms():
        pytest.skip("no OpenCL platform")
    mod, params = model
    explorer = rb.viz.PassExplorer(mod, params, targets=("interpreter", "llvm", "opencl"))
    llvm_row = explorer.time("llvm")
    assert _conv_layouts(explorer.final) == _conv_layouts(rb.build(mod, "llvm", params=params).mod)
    assert any(layout != "NCHW" for layout, _ in _conv_layouts(explorer.final))   # NCHW{x}c
    opencl_row = explorer.time("opencl")
    assert explorer.run_count == 2                   # choosing OpenCL ran the passes again
    assert _conv_layouts(explorer.final) == _conv_layouts(rb.build(mod, "opencl", params=params).mod)
    assert _conv_layouts(explorer.final) == [("NCHW", "OIHW")]
    assert llvm_row["matches"] and opencl_row["matches"]
    np.testing.assert_allclose(explorer.last_output, _expected(explorer.inputs, params), rtol=1e-4, atol=1e-4)
    explorer.time("interpreter")                     # the interpreter: the host CPU's policies
    assert _conv_layouts(explorer.final) == _conv_layouts(rb.build(mod, "llvm", params=params).mod)


def test_a_moved_pass_order_computes_the_same_result(model):
    mod, params = model
    explorer = rb.viz.PassExplorer(mod, params, targets=("interpreter",))
    explorer.move("FuseOps", -100)
    row = explorer.time("interpreter")
    assert row["passes"][0] == "FuseOps" and row["matches"]
    np.testing.assert_allclose(explorer.last_output, _expected(explorer.inputs, params),
                               rtol=1e-4, atol=1e-4)
    assert "FuseOps → " in explorer.results_html.value


def test_graph_is_drawn_as_svg(explorer):
    explorer.run()
    svg = explorer.current_svg
    assert svg.lstrip().startswith("<svg") and svg in explorer.graph_html.value
    # the fused program's graph draws the Primitive groups as clusters; the unfused one has none
    assert "cluster" in svg
    explorer.set_enabled("FuseOps", False)
    assert "<svg" in explorer.current_svg and "cluster" not in explorer.current_svg


def test_diff_and_marked_changes(explorer):
    explorer.run()
    explorer.step([r.name for r in explorer.steps].index("CanonicalizeOps"))
    assert "rb-diff-" in explorer.ir_html.value         # relaybench.viz.diff's side-by-side table
    assert "removed: nn.bias_add" in explorer.step_label.value
    plain = explorer.graph_html.value
    explorer.mark_changes_box.value = True
    marked = explorer.graph_html.value
    # the marked graph keeps the removed nn.bias_add; the program after the pass has none
    assert "<svg" in marked and "bias_add" in marked and "bias_add" not in plain
    explorer.mark_changes_box.value = False
    assert explorer.graph_html.value == plain


def test_text_views_when_the_graph_and_diff_views_are_missing(model, monkeypatch):
    from relaybench.viz import widgets
    monkeypatch.setattr(widgets, "_view", lambda name: None)
    mod, params = model
    explorer = rb.viz.PassExplorer(mod, params)
    explorer.run()
    assert explorer.current_svg is None
    assert "graph view unavailable" in explorer.graph_html.value
    assert "Primitive=1" in explorer.graph_html.value          # the program's text instead
    assert 'class="diff"' in explorer.ir_html.value            # difflib's side-by-side table
    assert "Primitive=1" in explorer.ir_html.value


@pytest.fixture(scope="module")
def compiled(model):
    mod, params = model
    return rb.build(mod, "llvm", params=params, opt_level=3)


def test_fusion_view_lists_every_group(compiled):
    view = rb.viz.FusionView(compiled)
    # one row per distinct kernel, and (no two groups alike here) one per Primitive function
    assert len(view.groups) == len(compiled.kernels) == len(compiled.groups)
    assert len(view.groups) == compiled.mod.astext().count("Primitive=1")
    conv = [g for g in view.groups if "nn.conv2d" in g["ops"]]
    assert len(conv) == 1
    row = conv[0]
    assert row["ops"] == "nn.conv2d, add, nn.relu, add"
    assert row["anchor"] == "nn.conv2d" and row["pattern"] == "OUT_ELEMWISE_FUSABLE"
    assert row["calls"] == 1 and row["ms/call"] > 0
    assert "rb-fusion-table" in view.table_html._dom_classes
    assert row["group"] in view.table_html.value
    assert list(view.group_select.options) == [g["group"] for g in view.groups]


def test_fusion_view_shows_the_selected_groups_code(compiled):
    view = rb.viz.FusionView(compiled, profile=False)
    conv = next(g for g in view.groups if g["anchor"] == "nn.conv2d")
    others = [g["group"] for g in view.groups if g is not conv]
    view.select(others[0])
    assert view.selected == others[0]
    view.select(conv["#"])
    assert view.selected == conv["group"]
    loops = view.current_source("loops")
    assert "for " in loops and conv["group"] in loops
    assert "define" in view.current_source("llvm")
    asm = view.current_source("asm")
    if platform.machine() in ("x86_64", "AMD64"):
        assert "zmm" in asm or "ymm" in asm
    loops_tab, llvm_tab, asm_tab = view.source_html
    assert "for " in loops_tab.value and "define" in llvm_tab.value
    assert [view.tabs.get_title(i) for i in range(3)] == ["loop IR", "LLVM IR", "assembly"]
    assert "nn.conv2d" in view.group_label.value
    with pytest.raises(KeyError, match="no group named 'nope'"):
        view.select("nope")


def test_fusion_view_builds_a_module(model):
    mod, params = model
    view = rb.viz.FusionView(mod, params, opt_level=0, profile=False)
    # at opt_level 0 every operator is its own group: conv2d, bias_add, relu, add
    assert sorted(g["ops"] for g in view.groups) == ["add", "nn.bias_add", "nn.conv2d", "nn.relu"]


def test_a_pipeline_of_my_own(model):
    mod, params = model
    explorer = rb.viz.PassExplorer(mod, params, pipeline="canonicalize-ops,fuse-ops{fuse_opt_level=0}")
    assert explorer.pass_names == ["CanonicalizeOps", "FuseOps"]
    explorer.run()
    assert [r.name for r in explorer.steps] == ["CanonicalizeOps", "FuseOps"]
    # bias_add became expand_dims + add; fuse_opt_level=0 puts each of the five operators alone
    assert explorer.final_text.count("Primitive=1") == 5
    assert "nn.bias_add" not in explorer.final_text


def test_fusion_view_click_on_a_group_opens_its_kernel():
    import html as _html
    import re
    x = rb.var("x", shape=(1, 4, 8, 8))
    w = rb.var("w", shape=(4, 4, 3, 3))
    y = op.nn.relu(op.nn.conv2d(x, w, padding=(1, 1)))
    y = op.nn.max_pool2d(y, pool_size=(2, 2), strides=(2, 2))
    y = op.tanh(op.reshape(y, newshape=(1, 64)))
    view = rb.viz.FusionView(rb.build(rb.Function([x, w], y)), profile=False)
    nodes = view.module.graph.nodes
    assert len(nodes) >= 2
    page = view.program_html.value
    # every call is a cluster with its position as id, and the page maps each to its kernel
    ids = re.findall(r'<g id="rb_call_(\d+)" class="cluster">', page)
    assert [int(i) for i in ids] == list(range(len(nodes)))
    kernels = re.search(r'data-kernels="([^"]*)"', page).group(1).split()
    assert [view.kernels[int(k)].name for k in kernels] == [n.kernel.name for n in nodes]
    assert "onclick=" in page and "rb-group-select" in page
    for position in reversed(range(len(nodes))):
        view.click(position)
        assert view.selected == nodes[position].kernel.name
        assert _html.escape(nodes[position].kernel.name) in view.group_label.value
        assert view.current_source("loops") == nodes[position].kernel.source("loops")
    with pytest.raises(IndexError, match="call 99"):
        view.click(99)
