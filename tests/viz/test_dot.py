"""to_dot and render_svg: facts about the drawn graph checked against the program, counted by hand
or by a plain walk over the IR."""

import re
import sys
import time

import graphviz
import numpy as np
import pytest

import relaybench as rb
from relaybench.ir import Call, Constant, Function, Op, Tuple, TupleGetItem, var
from relaybench.ir.functor import post_order
from relaybench.op.registry import OpPattern
from relaybench.passes.fuse_ops import fused_groups
from relaybench.viz import render_svg, to_dot
from relaybench.viz.dot import PATTERN_COLORS, GraphvizError, RelayDigraph, legend

HEADER = '#[version = "0.0.5"]\n'
NODE = re.compile(r"^\s*(n\d+) \[(.*)\]$")
EDGE = re.compile(r"^\s*(n\d+) -> (n\d+)(?: \[(.*)\])?$")


def parse(text):
    return rb.parse(HEADER + text)


def nodes_of(g):
    """{node id: attribute text} of the DOT source."""
    out = {}
    for line in g.source.splitlines():
        m = NODE.match(line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def edges_of(g):
    out = []
    for line in g.source.splitlines():
        m = EDGE.match(line)
        if m:
            label = re.search(r'label="([^"]*)"', m.group(3) or "")
            out.append((m.group(1), m.group(2), label.group(1) if label else None))
    return out


def label_of(attrs):
    m = re.match(r'label=("([^"]*)"|(\S+))', attrs)
    return m.group(2) if m.group(2) is not None else m.group(3)


def by_label(g):
    return {label_of(a): (n, a) for n, a in nodes_of(g).items()}


CONV = """
def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1, 1, 1]);
  %1 = add(%0, 1f);
  %2 = nn.relu(%1);
  %3 = sum(%2, axis=[1]);
  %4 = reshape(%3, newshape=[16]);
  nn.dense(expand_dims(%4, axis=0), ones(shape=[5, 16], dtype="float32"), units=5)
}"""


def test_conv_program_nodes_labels_and_colors():
    g = to_dot(parse(CONV))
    assert isinstance(g, graphviz.Digraph)
    nodes = by_label(g)
    # 2 parameters, 1 scalar constant, 8 calls; only attributes that differ from the defaults show
    assert len(nodes_of(g)) == 11
    assert set(nodes) == {"%x", "%w", "const ()", "nn.conv2d\\n3x3 s2 p1", "add", "nn.relu", "sum\\naxis=[1]",
                          "reshape\\nnewshape=[16]", "expand_dims",
                          "ones\\nshape=[5,16]", "nn.dense\\nunits=5"}
    colors = {label: re.search(r'fillcolor="([^"]*)"', a).group(1) for label, (_, a) in nodes.items()
              if "fillcolor" in a}
    assert colors["nn.conv2d\\n3x3 s2 p1"] == PATTERN_COLORS[OpPattern.OUT_ELEMWISE_FUSABLE]
    assert colors["nn.dense\\nunits=5"] == PATTERN_COLORS[OpPattern.OUT_ELEMWISE_FUSABLE]
    assert colors["add"] == PATTERN_COLORS[OpPattern.BROADCAST]
    assert colors["nn.relu"] == PATTERN_COLORS[OpPattern.ELEMWISE]
    assert colors["sum\\naxis=[1]"] == PATTERN_COLORS[OpPattern.COMM_REDUCE]
    assert colors["reshape\\nnewshape=[16]"] == PATTERN_COLORS[OpPattern.INJECTIVE]
    assert len(set(PATTERN_COLORS[k] for k in (OpPattern.ELEMWISE, OpPattern.BROADCAST, OpPattern.INJECTIVE,
                                                OpPattern.COMM_REDUCE, OpPattern.OUT_ELEMWISE_FUSABLE,
                                                OpPattern.OPAQUE))) == 6
    # parameters and constants are plain text; the constant shows its shape, not its value 1
    for label in ("%x", "%w", "const ()"):
        assert "shape=plaintext" in nodes[label][1]
    # edges carry the shapes computed by hand: conv 8x8, 3x3, stride 2, pad 1 -> 4x4
    ids = {label: n for label, (n, _) in nodes.items()}
    edges = {(a, b): lab for a, b, lab in edges_of(g)}
    assert edges[(ids["%x"], ids["nn.conv2d\\n3x3 s2 p1"])] == "(1, 3, 8, 8) float32"
    assert edges[(ids["%w"], ids["nn.conv2d\\n3x3 s2 p1"])] == "(4, 3, 3, 3) float32"
    assert edges[(ids["nn.conv2d\\n3x3 s2 p1"], ids["add"])] == "(1, 4, 4, 4) float32"
    assert edges[(ids["nn.relu"], ids["sum\\naxis=[1]"])] == "(1, 4, 4, 4) float32"
    assert edges[(ids["sum\\naxis=[1]"], ids["reshape\\nnewshape=[16]"])] == "(1, 4, 4) float32"
    assert edges[(ids["expand_dims"], ids["nn.dense\\nunits=5"])] == "(1, 16) float32"
    assert len(edges) == 10


def test_without_types_edges_have_no_labels():
    g = to_dot(parse(CONV), types=False)
    assert all(lab is None for _, _, lab in edges_of(g))
    assert len(edges_of(g)) == 10


def test_untyped_function_and_expression_are_inferred():
    x = var("x", shape=(2, 3))
    y = rb.op.nn.relu(x)
    g = to_dot(Function([x], y))
    assert edges_of(g) == [("n0", "n1", "(2, 3) float32")]
    g2 = to_dot(y)  # a bare expression: its free variable becomes the parameter
    assert edges_of(g2) == [("n0", "n1", "(2, 3) float32")]


def test_layouts_and_layout_transform_highlighted():
    mod = parse("""
def @main(%x: Tensor[(1, 16, 8, 8), float32], %w: Tensor[(16, 16, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3]);
  nn.relu(%0)
}""")
    with rb.PassContext(opt_level=3):
        alt = rb.passes.AlterOpLayout()(rb.passes.InferType()(mod))
    g = to_dot(alt)
    nodes = nodes_of(g)
    transforms = [a for a in nodes.values() if label_of(a).startswith("layout_transform")]
    assert sorted(label_of(a) for a in transforms) == [
        "layout_transform\\nNCHW->NCHW16c", "layout_transform\\nNCHW16c->NCHW", "layout_transform\\nOIHW->OIHW16i16o"]
    for a in transforms:
        assert "penwidth=3" in a and "bold" in a
    others = [a for a in nodes.values() if a not in transforms]
    assert not any("penwidth" in a for a in others)
    conv = [a for a in nodes.values() if label_of(a).startswith("nn.conv2d")]
    assert [label_of(a) for a in conv] == ["nn.conv2d\\n3x3 p1\\nNCHW16c/OIHW16i16o"]
    assert ("(1, 1, 8, 8, 16) float32" in [lab for _, _, lab in edges_of(g)])


def test_constant_shows_shape_not_values():
    x = var("x", shape=(2, 3))
    c = rb.const(np.full((2, 3), 3.25, "float32"))
    g = to_dot(Function([x], x * c))
    assert "const (2, 3)" in by_label(g)
    assert "3.25" not in g.source


def test_tuples_and_projections_are_small_nodes():
    mod = parse("""
def @main(%x: Tensor[(2, 6), float32]) {
  %0 = split(%x, indices_or_sections=2, axis=1);
  %1 = %0.0;
  %2 = add(%1, %0.1);
  %3 = (%2, %1);
  concatenate(%3, axis=1)
}""")
    g = to_dot(mod)
    labels = sorted(label_of(a) for a in nodes_of(g).values())
    assert labels == sorted(["%x", "split\\nindices_or_sections=2 axis=1", ".0", ".1", "add", "tuple",
                             "concatenate\\naxis=1"])
    small = [a for a in nodes_of(g).values() if label_of(a) in (".0", ".1", "tuple")]
    assert all("fontsize=8" in a for a in small)
    edges = edges_of(g)
    assert ("((2, 3) float32, (2, 3) float32)" in [lab for _, _, lab in edges])
    # x->split, split->.0, split->.1, .0->add, .1->add, add->tuple, .0->tuple, tuple->concatenate
    assert len(edges) == 8


def count_program_nodes(mod):
    """Calls of operators (inside fused functions too), parameters of @main, constants, tuples and
    projections, counted with a plain walk over the whole program."""
    main = mod["main"]
    calls = consts = tuples = 0
    for node in post_order(main):
        if isinstance(node, Call) and isinstance(node.op, Op):
            calls += 1
        elif isinstance(node, Constant):
            consts += 1
        elif isinstance(node, (Tuple, TupleGetItem)):
            tuples += 1
    return calls + consts + tuples + len(main.params)


def test_fused_groups_are_clusters():
    mod = rb.passes.InferType()(parse(CONV))
    fused = rb.passes.FuseOps()(mod)
    g = to_dot(fused)
    groups = fused_groups(fused)
    clusters = re.findall(r"subgraph (cluster_\d+) \{", g.source)
    assert len(clusters) == len(groups) == 5
    labels = re.findall(r'label="(fused_[^"]*)"', g.source)
    assert labels == [f"{grp.name}\\n" + {"OUT_ELEMWISE_FUSABLE": "out-elemwise-fusable", "COMM_REDUCE": "reduce",
                                          "INJECTIVE": "injective", "ELEMWISE": "elementwise",
                                          "BROADCAST": "broadcast", "OPAQUE": "opaque"}[grp.pattern.name]
                      for grp in groups]
    assert "fused_nn_conv2d_add_nn_relu\\nout-elemwise-fusable" in labels
    # the same operators are drawn fused or not: clusters change nothing in the node count
    assert len(nodes_of(g)) == len(nodes_of(to_dot(mod))) == count_program_nodes(fused)


def test_small_resnet_counts():
    mod, params = rb.models.get("resnet18", image_shape=(3, 32, 32))
    mod = rb.passes.InferType()(mod)
    g = to_dot(mod)
    assert len(nodes_of(g)) == count_program_nodes(mod)
    fused = rb.passes.optimize(rb.passes.bind_params(mod, params), 3)
    gf = to_dot(fused)
    assert len(nodes_of(gf)) == count_program_nodes(fused)
    assert len(re.findall(r"subgraph cluster_\d+ \{", gf.source)) == len(fused_groups(fused))
    # NCHWc convolutions after layout alteration show their layouts
    assert any("NCHW" in label_of(a) and "c/OIHW" in label_of(a) for a in nodes_of(gf).values())


def test_dot_is_deterministic():
    a = to_dot(rb.passes.FuseOps()(rb.passes.InferType()(parse(CONV)))).source
    b = to_dot(rb.passes.FuseOps()(rb.passes.InferType()(parse(CONV)))).source
    assert a == b
    ids = [n for n in nodes_of(to_dot(parse(CONV)))]
    assert ids == [f"n{i}" for i in range(len(ids))]


def test_render_svg_has_one_group_per_node():
    g = to_dot(rb.passes.FuseOps()(rb.passes.InferType()(parse(CONV))))
    svg = render_svg(g)
    assert svg.startswith("<svg")
    assert svg.count('class="node"') == len(nodes_of(g)) == 11
    assert svg.count('class="cluster"') == 5
    assert svg.count('class="edge"') == 10
    assert render_svg(g.source) == svg


def test_digraph_displays_through_graphviz_pure():
    g = to_dot(parse(CONV))
    assert isinstance(g, RelayDigraph) and isinstance(g, graphviz.Digraph)
    bundle = g._repr_mimebundle_()
    assert set(bundle) == {"image/svg+xml"}
    assert bundle["image/svg+xml"].count('class="node"') == 11
    assert g.pipe(format="svg", encoding="utf-8").count('class="node"') == 11
    assert legend().pipe(format="svg").count(b'class="node"') == 8


def test_missing_executable_is_named(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(GraphvizError, match="graphviz-pure"):
        render_svg("digraph { a }")


def test_render_error_names_the_tool():
    with pytest.raises(GraphvizError, match="failed"):
        render_svg("digraph { a -> }")


def test_chain_of_20000_ops_without_recursion():
    x = var("x", shape=(4,))
    relu, neg = Op.get("nn.relu"), Op.get("negative")
    y = x
    for i in range(20000):
        y = relu(y) if i % 2 else neg(y)
    mod = rb.passes.InferType()(rb.IRModule.from_expr(Function([x], y)))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(400)
    try:
        g = to_dot(mod)
        source = g.source
    finally:
        sys.setrecursionlimit(limit)
    nodes = nodes_of(g)
    assert len(nodes) == 20001
    assert len(edges_of(g)) == 20000
    assert sum(label_of(a) == "nn.relu" for a in nodes.values()) == 10000
    assert source.endswith('n19999 -> n20000 [label="(4) float32"]\n}\n')


@pytest.mark.slow
def test_resnet50_renders():
    mod, params = rb.models.get("resnet50")
    for m in (rb.passes.InferType()(mod), rb.passes.optimize(rb.passes.bind_params(mod, params), 3)):
        g = to_dot(m)
        n = len(nodes_of(g))
        assert n == count_program_nodes(m)
        start = time.perf_counter()
        svg = render_svg(g)
        print(f"resnet50: {n} nodes, SVG in {time.perf_counter() - start:.2f} s")
        assert svg.count('class="node"') == n


def test_max_label_clips_attribute_lines():
    mod = parse("""
def @main(%x: Tensor[(2, 3, 4), float32]) {
  transpose(%x, axes=[2, 0, 1])
}""")
    assert "transpose\\naxes=[2,0,1]" in by_label(to_dot(mod))
    assert "transpose\\naxes=[2..." in by_label(to_dot(mod, max_label=10))  # 10 characters a line


def test_highlight_rules_by_name():
    from relaybench.viz.dot import is_layout_op, is_quantize_op
    assert is_layout_op("layout_transform") and not is_layout_op("transpose")
    for name in ("qnn.conv2d", "qnn.requantize", "annotation.stop_fusion", "relay.op.annotation.simulated_quantize",
                 "simulated_quantize"):
        assert is_quantize_op(name), name
    for name in ("nn.conv2d", "quantile", "cast"):
        assert not is_quantize_op(name), name
