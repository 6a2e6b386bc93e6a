"""Weights are packed into the layout each kernel reads when the model is compiled: no fused
group computes anything from constants alone (a layout_transform, transpose or reshape of a
weight would be repacking it at every inference)."""

import pytest

import relaybench as rb
from relaybench.backends.graph_executor import extract_graph
from relaybench.ir.expr import Call, Constant, Op, Var
from relaybench.ir.functor import post_order
from relaybench.passes.bind_params import bind_params
from relaybench.passes.pipelines import optimize


def _constant_only_calls(func) -> list:
    """The op calls of ``func`` whose every input is a constant (directly or through other such
    calls)."""
    constant = set()
    found = []
    for node in post_order(func.body):
        if isinstance(node, Constant):
            constant.add(node)
        elif isinstance(node, Call) and isinstance(node.op, Op) and node.args \
                and all(a in constant for a in node.args):
            constant.add(node)
            found.append(node.op.name)
    return found


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "dqn"])
def test_no_group_repacks_weights_per_inference(name):
    mod, params = rb.models.get(name)
    optimized = optimize(bind_params(mod, params), 3, config={"relay.target": "llvm"})
    graph = extract_graph(optimized["main"])
    blocked = 0
    for node in graph.nodes:
        assert _constant_only_calls(node.function) == [], node.function
        kinds = {graph.entries[i].kind for i in node.inputs}
        assert kinds != {"constant"}, f"group {node.index} reads constants only"
        params = {p: entry for p, entry in zip(node.function.params, node.inputs)}
        for call in post_order(node.function.body):
            if isinstance(call, Call) and isinstance(call.op, Op) and call.op.name == "nn.conv2d":
                weight = call.args[1]
                assert isinstance(weight, (Constant, Var))
                entry = graph.entries[params[weight]] if weight in params else None
                if entry is not None and entry.kind == "constant" and len(entry.shape) == 6:
                    blocked += 1     # OIHW{i}i{o}o, a constant of the graph: read as stored
    assert blocked > 0


def test_the_check_sees_a_weight_transform_left_in_a_group():
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 4), float32]) {
  nn.dense(%x, transpose(meta[relay.Constant][0], axes=[1, 0]))
}''', init_meta_table={"relay.Constant": [rb.const(__import__("numpy").ones((4, 3), "float32"))]})
    assert _constant_only_calls(mod["main"]) == ["transpose"]
