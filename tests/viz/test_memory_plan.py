"""The memory plan drawn (relaybench.viz.memory_plan): lifetimes and storages read from the
graph executor and the VM, checked against hand-counted chains and against the rule every plan
must keep (two buffers of one storage never live at the same step)."""

import re

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.backends.vm import compile as vm_compile
from relaybench.viz import memory_plan


def chain(n_pairs=3, shape=(4, 4)):
    x = rb.var("x", shape=shape)
    y = x
    for _ in range(n_pairs):
        y = op.transpose(op.tanh(y))
    return rb.IRModule.from_expr(rb.Function([x], y))


def overlapping(view):
    """Pairs of buffers in one storage whose lifetimes share a step."""
    bad = []
    for i, a in enumerate(view.buffers):
        for b in view.buffers[i + 1:]:
            if a["storage"] == b["storage"] and a["first"] <= b["last"] and b["first"] <= a["last"]:
                bad.append((a["buffer"], b["buffer"]))
    return bad


def test_graph_executor_chain_by_hand():
    # six calls at opt_level 0; each intermediate is written by call i and read by call i + 1, so
    # two storages take turns, and the result has a storage of its own: 3 x 64 bytes planned
    # against 6 x 64 without reuse
    view = memory_plan(rb.build(chain(), opt_level=0))
    assert view.executor == "graph executor"
    assert view.steps == ["fused_tanh", "fused_transpose"] * 3
    assert [(b["first"], b["last"]) for b in view.buffers] == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 5)]
    assert [b["storage"] for b in view.buffers] == [0, 1, 0, 1, 0, 2]
    assert [b["bytes"] for b in view.buffers] == [4 * 4 * 4] * 6
    assert view.buffers[-1]["output"] and view.storages[2]["dedicated"]
    assert (view.planned_bytes, view.unplanned_bytes, view.saved_bytes) == (192, 384, 192)
    # step 0 holds the first call's output only (inputs are not planned); later steps two
    assert view.live_bytes() == [64, 128, 128, 128, 128, 128]


def test_vm_chain_by_hand():
    # the VM's storage planning hands each dead block on: two blocks of 64 bytes serve six
    # tensors; each alloc_storage after the first two became a move of a dead block
    view = memory_plan(vm_compile(chain(), "llvm", opt_level=0))
    assert view.executor == "VM"
    assert view.steps == ["fused_tanh", "fused_transpose"] * 3
    assert [b["storage"] for b in view.buffers] == [0, 1, 0, 1, 0, 1]
    assert [(b["first"], b["last"]) for b in view.buffers] == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 5)]
    assert (view.planned_bytes, view.unplanned_bytes) == (128, 384)
    assert overlapping(view) == []


@pytest.fixture(scope="module")
def resnet():
    mod, params = rb.models.get("resnet18", image_shape=(3, 32, 32))
    return mod, params


def test_graph_executor_plan_of_resnet_keeps_the_rule(resnet):
    mod, params = resnet
    gm = rb.build(mod, params=params, opt_level=3)
    view = memory_plan(gm)
    assert overlapping(view) == []
    # the buffers are the outputs of the graph's calls, their bytes from their types; a view
    # (the flatten before the dense layer) has none of its own
    views = gm.memory_plan().views
    assert len(views) == 1
    entries = [gm.graph.entries[e] for n in gm.graph.nodes for e in n.outputs if e not in views]
    assert [b["bytes"] for b in view.buffers] == [int(np.prod(e.shape)) * np.dtype(e.dtype).itemsize
                                                  for e in entries]
    sizes = {s["storage"]: s["bytes"] for s in view.storages}
    assert all(b["bytes"] <= sizes[b["storage"]] for b in view.buffers)
    assert view.planned_bytes == sum(sizes.values()) == gm.memory_plan().planned_bytes
    assert view.unplanned_bytes == sum(-(-b["bytes"] // 64) * 64 for b in view.buffers)
    assert 0 < view.saved_bytes < view.unplanned_bytes
    assert len(view.steps) == len(gm.graph.nodes)


def test_vm_plan_of_resnet_keeps_the_rule(resnet):
    mod, params = resnet
    exe = vm_compile(rb.passes.bind_params(mod, params), "llvm", opt_level=3)
    view = memory_plan(exe)
    assert overlapping(view) == []
    sizes = {s["storage"]: s["bytes"] for s in view.storages}
    assert all(b["bytes"] <= sizes[b["storage"]] for b in view.buffers)
    assert view.planned_bytes < view.unplanned_bytes
    assert len(view.steps) == sum(1 for ins in exe.function("main").instructions
                                  if type(ins).__name__ == "InvokePacked")


def test_drawing_has_a_bar_and_a_tooltip_per_buffer():
    view = memory_plan(rb.build(chain(), opt_level=0))
    svg = view.svg()
    bars = re.findall(r'<g class="rb-buffer"><title>([^<]*)</title><rect', svg)
    assert len(bars) == len(view.buffers) == 6
    assert bars[0].startswith("%1: (4, 4) float32, 64 bytes") and "storage 0" in bars[0]
    assert "192 B saved (50%)" in svg
    assert view._repr_html_().count("<svg") == 1


def test_not_a_compiled_program_is_named():
    with pytest.raises(TypeError, match="memory_plan: expected a GraphModule"):
        memory_plan(chain())
