"""rb.viz.save: every kind of view written as SVG, PNG and HTML, each file read back (the SVG
parsed as XML, the PNG opened by Pillow) and checked for what the view holds."""

import io
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.viz import Table, compile_time, diff, memory_plan, save, to_dot

SVG_NS = "{http://www.w3.org/2000/svg}"


def texts(svg_text):
    root = ET.fromstring(svg_text)
    return [t.text or "" for t in root.iter(f"{SVG_NS}text")]


def png_size(data):
    from PIL import Image
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return Image.open(io.BytesIO(data)).size


@pytest.fixture(scope="module")
def program():
    x = rb.var("x", shape=(2, 8))
    return rb.IRModule.from_expr(rb.Function([x], op.nn.relu(x * rb.const(np.float32(3.0)))))


def views(program):
    built = rb.build(program, opt_level=0)
    return {
        "graph": to_dot(program),
        "module": program,
        "diff": diff(program, rb.passes.FuseOps()(rb.passes.InferType()(program))),
        "memory": memory_plan(built),
        "compile": compile_time(program),
        "table": Table([{"pass": "FuseOps", "ms": 1.5}, {"pass": "FoldConstant", "ms": 0.25}]),
    }


@pytest.mark.parametrize("kind", ["graph", "module", "diff", "memory", "compile", "table"])
def test_every_view_in_every_format(program, kind, tmp_path):
    view = views(program)[kind]
    svg = open(save(view, tmp_path / "v.svg"), encoding="utf-8").read()
    words = " ".join(texts(svg))
    want = {"graph": "nn.relu", "module": "multiply", "diff": "nn.relu", "memory": "storage 0",
            "compile": "FuseOps", "table": "FoldConstant"}[kind]
    assert want in words, (kind, words[:300])
    width, height = png_size(open(save(view, tmp_path / "v.png"), "rb").read())
    assert width > 50 and height > 20
    page = open(save(view, tmp_path / "v.html"), encoding="utf-8").read()
    assert page.startswith("<!DOCTYPE html>") and want in page and "<script" not in page


def test_saved_graph_keeps_the_tooltips(program, tmp_path):
    svg = open(save(program, tmp_path / "g.svg"), encoding="utf-8").read()
    titles = [t.text for t in ET.fromstring(svg).iter(f"{SVG_NS}title")]
    assert any(t.startswith("nn.relu (n") and "type: Tensor[(2, 8), float32]" in t for t in titles)


def test_figure_and_errors(tmp_path):
    matplotlib = pytest.importorskip("matplotlib.figure")
    fig = matplotlib.Figure(figsize=(2, 1))
    fig.add_subplot().bar([0, 1], [1, 2])
    assert png_size(open(save(fig, tmp_path / "f.png"), "rb").read())[0] > 50
    assert open(save(fig, tmp_path / "f.svg")).read().startswith("<svg")
    with pytest.raises(ValueError, match="the formats are .svg, .png, .html"):
        save(fig, tmp_path / "f.jpg")
    with pytest.raises(TypeError, match="a int is not a view"):
        save(3, tmp_path / "x.svg")
