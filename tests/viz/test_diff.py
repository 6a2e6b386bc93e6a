"""diff: the nodes a pass added and removed, checked against what each pass does by hand; the text
and HTML views; a 20,000-operator chain."""

import re
import sys
from collections import Counter

import numpy as np
import pytest

import relaybench as rb
from relaybench.ir import Function, Op, var
from relaybench.viz import Diff, diff

HEADER = '#[version = "0.0.5"]\n'


def parse(text):
    return rb.passes.InferType()(rb.parse(HEADER + text))


def names(nodes):
    return Counter(n.name for n in nodes)


def fold_example():
    x = var("x", shape=(2,))
    c1, c2 = rb.const(np.ones(2, "float32")), rb.const(np.full(2, 2, "float32"))
    return rb.passes.InferType()(rb.IRModule.from_expr(Function([x], x + (c1 + c2))))


def test_fold_constant_removes_an_add_and_two_constants():
    mod = fold_example()
    d = diff(mod, rb.passes.FoldConstant()(mod))
    assert isinstance(d, Diff) and d.changed
    assert names(d.removed) == Counter({"add": 1, "const": 2})
    assert names(d.added) == Counter({"const": 1})
    assert [n.label for n in d.added] == ["const (2) float32"]
    # the folded constant holds 1 + 2
    np.testing.assert_array_equal(d.added[0].expr.data, np.full(2, 3, "float32"))
    # text: the line computing %0 and the outer add become one add; two metadata constants become one
    assert (d.added_lines, d.removed_lines) == (2, 4)
    assert "-  %0 = add(meta[relay.Constant][0], meta[relay.Constant][1])" in d.text
    assert "+  add(%x, meta[relay.Constant][0])" in d.text
    assert d.summary() == "removed: add, const x2; added: const"


def test_eliminate_common_subexpr_removes_the_duplicate():
    mod = parse("""
def @main(%x: Tensor[(4), float32], %y: Tensor[(4), float32]) {
  %0 = add(%x, %y);
  %1 = add(%x, %y);
  %2 = multiply(%0, %1);
  %3 = add(%x, %y);
  subtract(%2, %3)
}""")
    d = diff(mod, rb.passes.EliminateCommonSubexpr()(mod))
    assert names(d.removed) == Counter({"add": 2})
    assert d.added == []
    assert (d.added_lines, d.removed_lines) == (2, 4)


def test_fuse_ops_keeps_every_node():
    mod = parse("""
def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
  %1 = add(%0, 1f);
  %2 = nn.relu(%1);
  sum(%2, axis=[1])
}""")
    fused = rb.passes.FuseOps()(mod)
    d = diff(mod, fused)
    assert d.changed and d.added_lines > 0
    assert d.added == [] and d.removed == []  # the same operators, now grouped
    g = d.graph()
    assert len(re.findall(r"subgraph cluster_\d+ \{", g.source)) == 2
    assert "#2e7d32" not in g.source and "dashed" not in g.source.replace('style="rounded,dashed"', "")


def test_alter_op_layout_adds_transforms():
    mod = parse("""
def @main(%x: Tensor[(1, 16, 8, 8), float32], %w: Tensor[(16, 16, 3, 3), float32]) {
  nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3])
}""")
    with rb.PassContext(opt_level=3):
        alt = rb.passes.AlterOpLayout()(mod)
    d = diff(mod, alt)
    # NCHW conv2d replaced by an NCHW16c one between three layout transforms (data, weight, result)
    assert names(d.removed) == Counter({"nn.conv2d": 1})
    assert names(d.added) == Counter({"nn.conv2d": 1, "layout_transform": 3})
    assert [n.label for n in d.removed] == ["nn.conv2d\\n3x3 p1"]


def test_duplicate_operators_are_counted():
    before = parse("""
def @main(%x: Tensor[(4), float32]) {
  %0 = nn.relu(%x);
  %1 = nn.relu(%x);
  %2 = nn.relu(%x);
  %3 = add(%0, %1);
  add(%3, %2)
}""")
    after = parse("""
def @main(%x: Tensor[(4), float32]) {
  %0 = nn.relu(%x);
  %1 = add(%0, %0);
  add(%1, %0)
}""")
    d = diff(before, after)
    assert names(d.removed) == Counter({"nn.relu": 2})
    assert d.added == []
    back = diff(after, before)
    assert names(back.added) == Counter({"nn.relu": 2}) and back.removed == []


def test_unchanged():
    mod = fold_example()
    d = diff(mod, mod)
    assert not d.changed
    assert d.text == "" and (d.added_lines, d.removed_lines) == (0, 0)
    assert d.added == [] and d.removed == []
    assert 'class="rb-diff-added"' not in d.side_by_side()


def test_functions_and_pass_records():
    mod = fold_example()
    snaps = rb.passes.Snapshots()
    with rb.PassContext(opt_level=3, instruments=[snaps]):
        rb.passes.Sequential([rb.passes.FoldConstant(), rb.passes.EliminateCommonSubexpr()])(mod)
    record = next(r for r in snaps if r.name == "FoldConstant")
    d = diff(record)
    assert names(d.removed) == Counter({"add": 1, "const": 2}) and names(d.added) == Counter({"const": 1})
    assert d.text.startswith("--- before FoldConstant\n+++ after FoldConstant\n")
    unchanged = next(r for r in snaps if r.name == "EliminateCommonSubexpr")
    assert not diff(unchanged).changed
    f = diff(mod["main"], record.after["main"])
    assert names(f.removed) == Counter({"add": 1, "const": 2})
    with pytest.raises(TypeError, match="pass record"):
        diff(mod)


def test_side_by_side_marks_lines():
    mod = fold_example()
    d = diff(mod, rb.passes.FoldConstant()(mod))
    page = d.side_by_side(context=None)
    rows = re.findall(r'<tr class="rb-diff-(\w+)">', page)
    before_lines, after_lines = d.before_text.splitlines(), d.after_text.splitlines()
    # every line shows once on its side: equal and changed rows hold one line of each text
    assert rows.count("equal") + rows.count("changed") + rows.count("removed") == len(before_lines)
    assert rows.count("equal") + rows.count("changed") + rows.count("added") == len(after_lines)
    assert rows.count("removed") + rows.count("changed") == 4 and rows.count("added") + rows.count("changed") == 2
    assert "background:#ffebe9" in page  # inline styles, no stylesheet needed
    assert "add(%x, meta[relay.Constant][0])" in page
    folded = d.side_by_side(context=0)
    assert "rb-diff-fold" in folded and folded.count('<tr class="rb-diff-equal">') == 0


def test_graph_highlights_added_and_ghosts_removed():
    mod = fold_example()
    d = diff(mod, rb.passes.FoldConstant()(mod))
    source = d.graph().source
    # after: %x, the folded constant, add; the constant is the added node
    assert re.findall(r"^\s*(n\d+) \[", source, re.M) == ["n0", "n1", "n2"]
    assert re.search(r'n1 \[label="const \(2\) float32".*color="#2e7d32"', source)
    assert not re.search(r'n[02] \[.*#2e7d32', source)
    ghosts = re.findall(r'^\s*(r\d+) \[label=(?:"([^"]*)"|(\S+))', source, re.M)
    assert sorted(quoted or plain for _, quoted, plain in ghosts) == ["add", "const (2) float32", "const (2) float32"]
    # ghost edges: the two old constants into the old add, the old add into the kept add (n2)
    ghost_edges = re.findall(r"^\s*(\w+) -> (\w+) \[color=\"#c62828\" style=dashed\]", source, re.M)
    assert len(ghost_edges) == 3 and ghost_edges[-1][1] == "n2"
    html = d._repr_html_()
    assert "<table" in html and "<svg" in html
    assert html.count('class="node"') == 6


def test_many_removed_nodes_are_listed():
    before = parse("""
def @main(%x: Tensor[(4), float32]) {
  %0 = nn.relu(%x);
  %1 = nn.relu(%0);
  %2 = nn.relu(%1);
  negative(%2)
}""")
    after = parse("""
def @main(%x: Tensor[(4), float32]) {
  negative(%x)
}""")
    d = diff(before, after)
    assert names(d.removed) == Counter({"nn.relu": 3})
    source = d.graph(max_ghosts=2).source
    assert "3 x nn.relu" in source and not re.search(r"^\s*r\d+ \[", source, re.M)


def test_chain_of_20000_ops_without_recursion():
    x = var("x", shape=(4,))
    relu, neg = Op.get("nn.relu"), Op.get("negative")

    def build(odd):
        y = x
        for i in range(20000):
            y = neg(y) if i == odd else relu(y)
        return rb.passes.InferType()(rb.IRModule.from_expr(Function([x], y)))

    a, b = build(10000), build(-1)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(400)
    try:
        d = diff(a, b)
        removed, added = names(d.removed), names(d.added)
        source = d.graph().source
    finally:
        sys.setrecursionlimit(limit)
    assert (d.added_lines, d.removed_lines) == (1, 1)
    assert removed == Counter({"negative": 1}) and added == Counter({"nn.relu": 1})
    assert source.count('color="#2e7d32"') == 1
