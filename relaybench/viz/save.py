"""``rb.viz.save(view, path)``: any view written as SVG, PNG or HTML, for a paper or a slide.

The format is the path's suffix (``.svg``, ``.png``, ``.html``). What each view writes:

* a graph: a ``graphviz`` digraph (:func:`relaybench.viz.to_dot`, :func:`~relaybench.viz.legend`),
  or what :func:`~relaybench.viz.to_dot` draws (an ``IRModule``, a ``Function``, a compiled
  ``GraphModule``): drawn by Graphviz (``graphviz-pure``), so SVG and PNG are Graphviz's own; the
  SVG keeps every node's tooltip;
* a diff (:func:`relaybench.viz.diff`): its graph (added nodes green, removed ones as ghosts) as
  SVG or PNG, its side-by-side text and graph as HTML;
* a chart: the memory plan (:func:`relaybench.viz.memory_plan`), the compile-time view
  (:func:`relaybench.viz.compile_time`), or anything with a ``canvas()``
  (:class:`~relaybench.viz.chart.Canvas`);
* a table (:class:`~relaybench.viz.Table`, a ``Profile``): HTML, or a drawn grid as SVG / PNG;
* a matplotlib ``Figure`` (an experiment's ``.plot()``): through ``savefig``;
* the widgets: the graph they show now (:class:`~relaybench.viz.PassExplorer`'s step,
  :class:`~relaybench.viz.FusionView`'s program).

An HTML file is one self-contained page (inline SVG, inline styles, no scripts).

>>> import os, tempfile, relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(2, 2), float32]) { nn.relu(%x) }''')
>>> folder = tempfile.mkdtemp()
>>> for name in ("graph.svg", "graph.png", "graph.html"):
...     _ = save(mod, os.path.join(folder, name))
>>> open(os.path.join(folder, "graph.svg")).read().startswith("<svg")
True
>>> open(os.path.join(folder, "graph.png"), "rb").read(4) == b"\\x89PNG"
True
>>> save(mod, os.path.join(folder, "graph.pdf"))
Traceback (most recent call last):
...
ValueError: rb.viz.save: cannot write '.pdf'; the formats are .svg, .png, .html
"""

from __future__ import annotations

import html as _html
import os
import sys

__all__ = ["save", "FORMATS"]

#: the formats :func:`save` writes, by suffix
FORMATS = (".svg", ".png", ".html")


def _page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{_html.escape(title)}</title>'
            f'</head><body style="font-family:sans-serif">\n{body}\n</body></html>\n')


def _digraph_of(view):
    """The Graphviz drawing a view is, or holds, or None."""
    import graphviz
    from .dot import RelayDigraph
    if isinstance(view, (graphviz.Digraph, graphviz.Graph)):
        return view
    from ..ir.expr import Expr
    from ..ir.module import IRModule
    ge = sys.modules.get("relaybench.backends.graph_executor")
    if isinstance(view, (IRModule, Expr)) or (ge is not None and isinstance(view, ge.GraphModule)):
        from .dot import to_dot
        return to_dot(view)
    widgets = sys.modules.get("relaybench.viz.widgets")
    if widgets is not None and isinstance(view, widgets.PassExplorer):
        from .dot import to_dot
        return to_dot(view.current_module)
    if widgets is not None and isinstance(view, widgets.FusionView):
        from .dot import to_dot
        return to_dot(view.module)
    return None if not isinstance(view, RelayDigraph) else view


def _table_canvas(table):
    """A table drawn as a grid: a bold header, then each row; column widths from the longest
    cell (the DejaVu Sans advance of an average character)."""
    from .chart import Canvas
    rows = list(table.rows)
    cols = list(rows[0]) if rows else []
    cells = [[str(c) for c in cols]] + [[str(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(row[i]) for row in cells) * 6.2 + 12 for i in range(len(cols))]
    row_h = 15.0
    c = Canvas(max(sum(widths), 40) + 8, row_h * len(cells) + 8, css_class="rb-table-chart")
    y = 4.0
    for k, row in enumerate(cells):
        x = 4.0
        if k == 0:
            c.rect(4, y, sum(widths), row_h, fill="#eeeeee", stroke="#bdbdbd")
        for i, text in enumerate(row):
            c.text(x + 6, y + row_h * 0.72, text, size=10, bold=(k == 0))
            x += widths[i]
        y += row_h
        c.line(4, y, 4 + sum(widths), y, stroke="#e0e0e0")
    return c


def save(view, path) -> str:
    """Write ``view`` to ``path`` as SVG, PNG or HTML (by its suffix; see the module) and return
    the path. Raises ValueError for another suffix and TypeError for an object that is no view."""
    path = os.fspath(path)
    fmt = os.path.splitext(path)[1].lower()
    if fmt not in FORMATS:
        raise ValueError(f"rb.viz.save: cannot write {fmt or path!r}; the formats are {', '.join(FORMATS)}")
    data = _render(view, fmt)
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(path, mode, **({} if mode == "wb" else {"encoding": "utf-8"})) as f:
        f.write(data)
    return path


def _render(view, fmt: str):
    title = type(view).__name__
    # a chart
    canvas = getattr(view, "canvas", None)
    if callable(canvas):
        c = canvas()
        if fmt == ".png":
            return c.png()
        svg = c.svg()
        if fmt == ".svg":
            return svg
        extra = ""
        table = getattr(view, "table", None)
        if callable(table):
            extra = table()._repr_html_()
        return _page(title, svg + extra)
    # a diff: its graph; in HTML the side-by-side text as well
    diff_module = sys.modules.get("relaybench.viz.snapshot_diff")
    if diff_module is not None and isinstance(view, diff_module.Diff):
        g = view.graph()
        if fmt == ".html":
            from .dot import render_svg
            return _page("diff", view.side_by_side() + render_svg(g))
        return _graph_bytes(g, fmt)
    # a table
    from .._table import Table
    if isinstance(view, Table):
        if fmt == ".html":
            return _page(title, view._repr_html_())
        c = _table_canvas(view)
        return c.png() if fmt == ".png" else c.svg()
    # a matplotlib figure
    mpl = sys.modules.get("matplotlib.figure")
    if mpl is not None and isinstance(view, mpl.Figure):
        import io
        buf = io.BytesIO()
        view.savefig(buf, format="png" if fmt == ".png" else "svg", metadata={"Date": None}
                     if fmt == ".svg" else None, bbox_inches="tight")
        data = buf.getvalue()
        if fmt == ".png":
            return data
        svg = data.decode("utf-8")
        svg = svg[svg.find("<svg"):]
        return svg if fmt == ".svg" else _page("figure", svg)
    g = _digraph_of(view)
    if g is not None:
        if fmt == ".html":
            from .dot import render_svg
            return _page(getattr(g, "name", None) or "graph", render_svg(g))
        return _graph_bytes(g, fmt)
    raise TypeError(f"rb.viz.save: a {type(view).__name__} is not a view; it saves graphs (a digraph, "
                    f"a module, a function, a compiled module), diffs, charts (memory_plan, "
                    f"compile_time), tables, matplotlib figures and the widgets' graphs")


def _graph_bytes(g, fmt: str):
    from .dot import _run_graphviz, render_svg
    if fmt == ".svg":
        return render_svg(g)
    return _run_graphviz(g.source, getattr(g, "engine", None) or "dot", "png")
