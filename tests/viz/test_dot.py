"""to_dot and render_svg: facts about the drawn graph checked against the program, counted by hand
or by a plain walk over the IR."""

import functools
import html as _html
import re
import sys
import time

import graphviz
import numpy as np
import pytest

import relaybench as rb
from relaybench.ir import Call, Constant, Function, Op, Tuple, TupleGetItem, Var, var
from relaybench.ir.functor import post_order
from relaybench.op.registry import OpPattern
from relaybench.passes.fuse_ops import fused_groups
from relaybench.viz import render_svg, to_dot
from relaybench.viz.dot import (DTYPE_COLORS, PATTERN_COLORS, GraphvizError, RelayDigraph, dtype_class, edge_style,
                                 legend)

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
            out.append((m.group(1), m.group(2), label.group(1).strip() if label else None))
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


X, W = "%x\\n(1, 3, 8, 8) float32", "%w\\n(4, 3, 3, 3) float32"


def test_conv_program_nodes_labels_and_colors():
    g = to_dot(parse(CONV))
    assert isinstance(g, graphviz.Digraph)
    nodes = by_label(g)
    # 2 parameters, 1 scalar constant, 8 calls; only attributes that differ from the defaults show
    assert len(nodes_of(g)) == 11
    assert set(nodes) == {X, W, "const () float32", "nn.conv2d\\n3x3 s2 p1", "add", "nn.relu", "sum\\naxis=[1]",
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
    # parameters and constants are plain text showing their types (a constant its shape and
    # dtype, not its value 1), so the edges leaving them go unlabelled
    for label in (X, W, "const () float32"):
        assert "shape=plaintext" in nodes[label][1]
    # edges carry the shapes computed by hand: conv 8x8, 3x3, stride 2, pad 1 -> 4x4
    ids = {label: n for label, (n, _) in nodes.items()}
    edges = {(a, b): lab for a, b, lab in edges_of(g)}
    assert edges[(ids[X], ids["nn.conv2d\\n3x3 s2 p1"])] is None
    assert edges[(ids[W], ids["nn.conv2d\\n3x3 s2 p1"])] is None
    assert edges[(ids["const () float32"], ids["add"])] is None
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
    assert edges_of(g) == [("n0", "n1", None)] and label_of(nodes_of(g)["n0"]) == "%x\\n(2, 3) float32"
    g2 = to_dot(y)  # a bare expression: its free variable becomes the parameter
    assert edges_of(g2) == [("n0", "n1", None)] and label_of(nodes_of(g2)["n0"]) == "%x\\n(2, 3) float32"


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
    assert "const (2, 3) float32" in by_label(g)
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
    assert labels == sorted(["%x\\n(2, 6) float32", "split\\nindices_or_sections=2 axis=1", ".0", ".1", "add", "tuple",
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
    # 6 pattern kinds, the layout and quantization borders, a dot in each of the two group
    # borders (accelerator, CPU), and two dots per dtype-class edge
    svg = legend().pipe(format="svg")
    assert svg.count(b'class="node"') == 8 + 2 + 2 * 5 and svg.count(b'class="edge"') == 5
    assert b"fused group on the accelerator" in svg and b"fused group on the CPU" in svg


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
    assert source.endswith('n19999 -> n20000 [label=" (4) float32 "]\n}\n')


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


# ---------------------------------------------------------------------------------------------
# Edges colored by dtype: the int8 region of a quantized program


def edge_attrs_of(g):
    """[(tail label, head label, {attribute: value})] of the DOT source, labels' first lines."""
    first = {n: label_of(a).split("\\n")[0] for n, a in nodes_of(g).items()}
    out = []
    for line in g.source.splitlines():
        m = EDGE.match(line)
        if m:
            attrs = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', m.group(3) or ""))
            attrs = {k: v.strip('"').strip() for k, v in attrs.items()}
            out.append((first[m.group(1)], first[m.group(2)], attrs))
    return out


def expected_uses(mod):
    """Each use of a value by a call of ``@main`` as (producer, consumer op, dtype), from a walk
    over the type-checked IR: the producer named as the drawing names it (``%x``, ``const
    (shape) dtype``, the operator)."""
    main = rb.passes.InferType()(mod)["main"]
    uses = []
    for e in post_order(main.body):
        if not isinstance(e, Call):
            continue
        for a in e.args:
            if isinstance(a, Var):
                name = "%" + a.name_hint
            elif isinstance(a, Constant):
                name = "const (" + ", ".join(str(d) for d in a.data.shape) + ") " + a.data.dtype.name
            else:
                name = a.op.name
            uses.append((name, e.op.name, a.checked_type.dtype))
    return uses


CONV1 = """
def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
  nn.conv2d(%x, %w, padding=[1, 1, 1, 1])
}"""


def _quantized_conv(**knobs):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    with rb.quantize.qconfig(skip_conv_layers=None, global_scale=4.0, **knobs):
        return rb.quantize.quantize(parse(CONV1), params={"w": w})


@pytest.mark.parametrize("accumulator", ["int32", "int16"])
def test_quantized_conv_edges_are_colored_by_the_inferred_dtype(accumulator):
    from collections import Counter
    nbit = {"int32": 32, "int16": 16}[accumulator]
    qmod = _quantized_conv(nbit_activation=nbit, dtype_activation=accumulator)
    uses = expected_uses(qmod)
    # the realized program by hand: the data and the weight enter the conv2d as int8, its
    # accumulator leaves it as int32 (int16), everything else is float32
    assert sorted((p, c) for p, c, d in uses if d == "int8") == [("cast", "nn.conv2d"),
                                                                  ("const (4, 3, 3, 3) int8", "nn.conv2d")]
    assert [(p, c) for p, c, d in uses if d == accumulator] == [("nn.conv2d", "cast")]
    assert {d for p, c, d in uses} == {"int8", accumulator, "float32"}
    color = {"int8": DTYPE_COLORS["int8"][0], accumulator: DTYPE_COLORS[accumulator][0], "float32": None}
    drawn = edge_attrs_of(to_dot(qmod))
    assert Counter((p, c, color[d]) for p, c, d in uses) == Counter((p, c, a.get("color")) for p, c, a in drawn)
    # the three integer classes and float32 are told apart, with the int8 pen the widest
    colors = {DTYPE_COLORS[k][0] for k in ("int8", "int16", "int32", "float16", "float32")}
    assert len(colors) == 5
    assert DTYPE_COLORS["int8"][1] > max(DTYPE_COLORS[k][1] for k in ("int16", "int32", "float32"))
    for p, c, a in drawn:
        if a.get("color") is not None:
            assert a["fontcolor"] == a["color"] and float(a["penwidth"]) > 1
        else:
            assert "fontcolor" not in a and "penwidth" not in a and a.get("label", "float32").endswith("float32")
        # a parameter's or a constant's edge goes unlabelled: its node says the type
        assert ("label" in a) == (not (p.startswith("%") or p.startswith("const")))


def test_edge_colors_by_dtype_class():
    from relaybench.ir.types import TensorType, TupleType
    program = parse("""
def @main(%x: Tensor[(2, 2), float32]) {
  %0 = cast(%x, dtype="uint8");
  %1 = cast(%0, dtype="bfloat16");
  %2 = cast(%1, dtype="float16");
  %3 = cast(%2, dtype="int64");
  %4 = cast(%3, dtype="uint16");
  %5 = cast(%4, dtype="uint32");
  %6 = greater(%5, 1u32);
  %7 = cast(%6, dtype="float64");
  cast(%7, dtype="float32")
}""")
    edges = edge_attrs_of(to_dot(program))
    assert edges[0][0] == "%x" and edges[0][2] == {}      # the input's float32: its node says it
    drawn = {a["label"].split(" ")[-1]: a.get("color") for t, _, a in edges if not t.startswith(("%", "const"))}
    assert drawn == {"uint8": DTYPE_COLORS["int8"][0], "bfloat16": DTYPE_COLORS["float16"][0],
                     "float16": DTYPE_COLORS["float16"][0], "int64": None, "uint16": DTYPE_COLORS["int16"][0],
                     "uint32": DTYPE_COLORS["int32"][0], "bool": None, "float64": None}
    assert dtype_class(TupleType([TensorType((2,), "int8"), TensorType((3,), "uint8")])) == "int8"
    assert dtype_class(TupleType([TensorType((2,), "int8"), TensorType((3,), "float32")])) is None
    assert edge_style(TensorType((2,), "float32")) == {} and edge_style(None) == {}
    # without types nothing is labelled or colored
    assert all(a == {} for _, _, a in edge_attrs_of(to_dot(program, types=False)))


def test_quantized_program_renders_its_int8_edges():
    qmod = _quantized_conv()
    svg = render_svg(to_dot(qmod))
    edges = re.findall(r'<g id="edge\d+" class="edge">.*?</g>', svg, re.S)
    int8 = [e for e in edges if f'stroke="{DTYPE_COLORS["int8"][0]}"' in e]
    int32 = [e for e in edges if f'stroke="{DTYPE_COLORS["int32"][0]}"' in e]
    assert len(edges) == len(expected_uses(qmod))
    assert len(int8) == 2 and len(int32) == 1
    # the cast's int8 edge is labelled; the weight's edge is not: its node says int8
    assert sum("int8 </text>" in e for e in int8) == 1 and "int32" in int32[0]
    assert "const (4, 3, 3, 3) int8</text>" in svg


def test_fused_quantized_program_keeps_the_colors():
    qmod = _quantized_conv()
    fused = rb.passes.FuseOps(fuse_opt_level=2)(rb.passes.InferType()(qmod))
    drawn = edge_attrs_of(to_dot(fused))
    int8 = [(p, c) for p, c, a in drawn if a.get("color") == DTYPE_COLORS["int8"][0]]
    # inside the conv2d's group the parameters are the int8 values; the weight enters as int8
    assert ("cast", "nn.conv2d") in int8 and ("const (4, 3, 3, 3) int8", "nn.conv2d") in int8
    assert all(a.get("label", "int8").endswith("int8") for p, c, a in drawn
               if a.get("color") == DTYPE_COLORS["int8"][0])


# ---------------------------------------------------------------------------------------------
# Readable labels on every model of the zoo

SVG_TEXT = re.compile(r'<text[^>]*?text-anchor="(\w+)" x="([-\d.]+)" y="([-\d.]+)"[^>]*?'
                      r'font-size="([\d.]+)"[^>]*>([^<]*)</text>')


@functools.lru_cache(maxsize=None)
def _dejavu():
    ft2font = pytest.importorskip("matplotlib.ft2font")
    from matplotlib import font_manager
    return ft2font.FT2Font(font_manager.findfont("DejaVu Sans", fallback_to_default=False))


@functools.lru_cache(maxsize=None)
def text_width(text, size):
    """The width in points of ``text`` drawn in DejaVu Sans at ``size`` points, measured with
    FreeType (the font matplotlib ships): what a browser on Linux draws a drawing's labels in."""
    font = _dejavu()
    font.set_size(size, 72)
    font.set_text(text, 0.0)
    return font.get_width_height()[0] / 64.0


def text_boxes(svg):
    """(element class, text, x0, y0, x1, y1) of every text of an SVG drawn by Graphviz: its
    width as DejaVu Sans draws it, its height the font size."""
    boxes = []
    for part in re.split(r'(?=<g id="[^"]*" class="(?:node|edge|cluster)")', svg):
        kind = re.match(r'<g id="[^"]*" class="(\w+)"', part)
        for m in SVG_TEXT.finditer(part):
            anchor, x, y, size, text = m.groups()
            x, y, size = float(x), float(y), float(size)
            text = _html.unescape(text).strip()   # the glyphs drawn (labels are padded with spaces)
            width = text_width(text, size)
            x0 = {"middle": x - width / 2, "end": x - width}.get(anchor, x)
            boxes.append((kind.group(1) if kind else "", text, x0, y - 0.8 * size, x0 + width, y + 0.2 * size))
    return boxes


#: the least room between two texts side by side, in points, for them to read as two
GAP = 2.0


def colliding_edge_labels(svg):
    """The pairs of texts closer than :data:`GAP` side by side (or overlapping) where one of them
    labels an edge."""
    boxes = sorted(text_boxes(svg), key=lambda b: b[3])    # top to bottom: a sweep over y
    found = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if b[3] >= a[5]:
                break                                          # every later box starts below a
            if "edge" in (a[0], b[0]) and a[2] < b[4] + GAP and b[2] < a[4] + GAP:
                found.append((a[1], b[1]))
    return found


def test_text_boxes_find_the_collision_of_two_labels_side_by_side():
    # two labels centered 40 points apart, each about 85 wide at 9 points: they overlap
    assert 80 < text_width("(1, 3, 8, 8) float32", 9.0) < 90
    svg = ('<g id="edge1" class="edge"><text text-anchor="middle" x="100" y="50" font-size="9.00">'
           '(1, 3, 8, 8) float32</text></g><g id="edge2" class="edge"><text text-anchor="middle" '
           'x="140" y="50" font-size="9.00">(4, 3, 3, 3) float32</text></g>')
    assert colliding_edge_labels(svg) == [("(1, 3, 8, 8) float32", "(4, 3, 3, 3) float32")]
    assert colliding_edge_labels(svg.replace('x="140"', 'x="200"')) == []


def _zoo_model(name):
    import inspect
    fn = getattr(rb.models, name)
    kwargs = {"image_shape": (3, 64, 64)} if "image_shape" in inspect.signature(fn).parameters else {}
    mod, params = rb.models.get(name, **kwargs)
    return rb.passes.optimize(rb.passes.bind_params(mod, params) if params else mod, 3)


@pytest.mark.parametrize("name", rb.models.list_models())
def test_zoo_labels_are_readable(name):
    """Every zoo model, optimized (fused, layouts altered): a parameter or constant shows its
    shape and dtype on its own node and its edges carry no label, every node has a tooltip with
    its type, and in the drawn SVG no edge label overlaps another text."""
    fused = _zoo_model(name)
    g = to_dot(fused)
    nodes = nodes_of(g)
    own = {n for n, a in nodes.items() if "shape=plaintext" in a}   # parameters and constants
    assert own, name
    main = fused["main"]
    consts = [c for c in post_order(main) if isinstance(c, Constant)]
    const_labels = [label_of(a) for n, a in nodes.items() if label_of(a).startswith("const ")]
    assert sorted(const_labels) == sorted(
        "const (" + ", ".join(str(d) for d in c.data.shape) + f") {c.data.dtype.name}" for c in consts)
    for tail, head, label in edges_of(g):
        assert (label is None) == (tail in own), (name, tail, head, label)
    assert all(re.search(r'tooltip="[^"]*\\ntype: ', a) for a in nodes.values()), name
    assert colliding_edge_labels(render_svg(g)) == [], name


# ---------------------------------------------------------------------------------------------
# Hover: every node's tooltip in the SVG


def test_hover_shows_type_attrs_and_relay_text():
    from relaybench.ir.types import type_str
    mod = rb.passes.InferType()(parse(CONV))
    svg = render_svg(to_dot(mod))
    titles = [_html.unescape(t) for t in re.findall(r'<g id="node\d+" class="node">\s*<title>([^<]*)</title>', svg)]
    assert len(titles) == len(nodes_of(to_dot(mod))) == 11
    conv = next(t for t in titles if t.startswith("nn.conv2d"))
    call = next(n for n in post_order(mod["main"]) if isinstance(n, Call) and n.op.name == "nn.conv2d")
    lines = conv.split("\n")
    assert lines[1] == f"type: {type_str(call.checked_type)}" == "type: Tensor[(1, 4, 4, 4), float32]"
    assert "- data_layout=\"NCHW\"" in lines and "- groups=1" in lines   # every attribute, defaults too
    assert lines[-2] == ("relay: %n2 = nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1, 1, 1]) "
                         "/* ty=Tensor[(1, 4, 4, 4), float32] */")
    assert lines[-1] == "source: line 4:8"   # the header, a blank line, the def, then the conv2d
    x = next(t for t in titles if t.startswith("%x"))
    assert "type: Tensor[(1, 3, 8, 8), float32]" in x
    # inline in a notebook's HTML, so that JupyterLab hovers the nodes: the same SVG
    page = to_dot(mod).inline()._repr_html_()
    assert page.startswith('<div class="rb-graph-view"') and svg in page


def test_fused_groups_have_ids_and_tooltips():
    fused = rb.passes.FuseOps()(rb.passes.InferType()(parse(CONV)))
    svg = render_svg(to_dot(fused))
    ids = [(i, _html.unescape(t)) for i, t in
           re.findall(r'<g id="(rb_call_\d+)" class="cluster">\s*<title>([^<]*)</title>', svg)]
    assert [i for i, _ in ids] == [f"rb_call_{k}" for k in range(5)]
    assert ids[0][1].startswith("fused_nn_conv2d_add_nn_relu (out-elemwise-fusable)")
    assert "ops: nn.conv2d, add, nn.relu" in ids[0][1]
    # a compiled module: each group's tooltip names the kernel that runs it
    gm = rb.build(parse(CONV), opt_level=3)
    titles = [_html.unescape(t) for t in re.findall(r'class="cluster">\s*<title>([^<]*)</title>',
                                                    render_svg(to_dot(gm)))]
    assert len(titles) == len(gm.graph.nodes)
    assert all(f"kernel: {n.kernel.name}" in t for n, t in zip(gm.graph.nodes, titles))
