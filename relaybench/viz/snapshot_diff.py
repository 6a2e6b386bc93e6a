"""What a pass changed: two programs compared as text and as dataflow graphs.

:func:`diff` takes two modules (or functions, or one :class:`~relaybench.passes.instruments.PassRecord`
of a :class:`~relaybench.passes.Snapshots` instrument, which holds the module before and after its
pass) and returns a :class:`Diff`:

* ``.text``: a unified diff of the printed programs (``mod.astext()``); ``.changed``,
  ``.added_lines``, ``.removed_lines``;
* ``.side_by_side()``: the two texts in two columns, changed lines marked (HTML with inline styles);
* ``.added`` / ``.removed``: the dataflow-graph nodes (:class:`relaybench.viz.dot.GraphNode`) the
  change introduced and took away; ``.graph()``: the graph after the change with the added nodes
  in green and the removed ones as dashed red ghosts;
* in a notebook, the side-by-side text above the graph.

Nodes are matched in two steps. First by a *structural signature* computed bottom-up over the
graph (a node's operator and attributes, a variable's name and type, a constant's shape, dtype and
contents, and the signatures of its inputs), pairing equal signatures count by count, so two
identical ``add`` nodes before and one after leave one ``add`` removed. Then nodes whose own key is
equal are paired along edges from nodes already paired (an input at the same argument position, or
a user reading them at the same position, starting from the two outputs), so a node whose input
was rewritten counts as kept, not as removed and added again:

>>> import numpy as np, relaybench as rb
>>> x = rb.var("x", shape=(2,))
>>> c1, c2 = rb.const(np.ones(2, "float32")), rb.const(np.full(2, 2, "float32"))
>>> mod = rb.IRModule.from_expr(rb.Function([x], x + (c1 + c2)))
>>> d = diff(mod, rb.passes.FoldConstant()(mod))
>>> sorted(n.name for n in d.removed), sorted(n.name for n in d.added)
(['add', 'const', 'const'], ['const'])
"""

from __future__ import annotations

import difflib
import html
from collections import Counter
from typing import Optional

from ..ir.expr import Expr
from ..ir.module import IRModule
from .dot import DataflowGraph, GraphvizError, RelayDigraph, dataflow_graph, draw, render_svg

__all__ = ["diff", "Diff", "match_graphs"]

_ADDED_BORDER = "#2e7d32"
_ADDED_FILL = "#a5d6a7"
_REMOVED = "#c62828"

_ROW_STYLES = {
    "added": "background:#e6ffec",
    "removed": "background:#ffebe9",
    "changed": "background:#fff8c5",
    "equal": "",
}

_MAX_SVG_NODES = 5000  # larger graphs are not drawn inline (the text diff still is)


def _text_of(obj) -> str:
    if isinstance(obj, (IRModule, Expr)):
        return obj.astext()
    raise TypeError(f"diff: expected an IRModule, a Function or an expression, got {type(obj).__name__}")


def _signatures(graph: DataflowGraph, intern: dict) -> list:
    """Each node's structural signature as a small int (``intern`` is shared by both graphs)."""
    out = []
    for node in graph.nodes:
        key = (node.key, tuple(out[i] for i in node.inputs))
        sig = intern.get(key)
        if sig is None:
            sig = intern[key] = len(intern)
        out.append(sig)
    return out


def match_graphs(before: DataflowGraph, after: DataflowGraph, rounds: int = 8) -> dict:
    """Pairs of nodes (``{after index: before index}``) that are the same computation.

    Step 1 pairs equal structural signatures, count by count. Step 2 pairs the two outputs if they
    have the same key, then, until nothing changes (at most ``rounds`` times), pairs an unpaired
    node with an unpaired node of the same key and arity that is its counterpart along an edge:
    the user, at the same argument position, of a paired input (bottom-up), or the input, at the
    same position, of a paired user (top-down).
    """
    intern: dict = {}
    sig_b = _signatures(before, intern)
    sig_a = _signatures(after, intern)
    by_sig: dict = {}
    for i, s in enumerate(sig_b):
        by_sig.setdefault(s, []).append(i)
    cursor: dict = {}
    a2b: dict = {}
    b2a: dict = {}
    for j, s in enumerate(sig_a):
        cands = by_sig.get(s)
        if cands is None:
            continue
        k = cursor.get(s, 0)
        if k < len(cands):
            cursor[s] = k + 1
            a2b[j] = cands[k]
            b2a[cands[k]] = j

    bn, an = before.nodes, after.nodes

    def same(j: int, i: int) -> bool:
        return an[j].key == bn[i].key and len(an[j].inputs) == len(bn[i].inputs)

    def pair(j: int, i: int) -> None:
        a2b[j] = i
        b2a[i] = j

    for j, i in zip(after.outputs, before.outputs):
        if j not in a2b and i not in b2a and same(j, i):
            pair(j, i)

    users_b = before.consumers()
    users_a = after.consumers()
    for _ in range(rounds):
        progress = False
        for node in an:  # bottom-up: inputs before users
            j = node.index
            if j in a2b:
                continue
            for pos, src in enumerate(node.inputs):
                i_src = a2b.get(src)
                if i_src is None:
                    continue
                hit = next((u for u, upos in users_b[i_src] if upos == pos and u not in b2a and same(j, u)), None)
                if hit is not None:
                    pair(j, hit)
                    progress = True
                    break
        for node in reversed(an):  # top-down: users before inputs
            j = node.index
            if j in a2b:
                continue
            for user, pos in users_a[j]:
                i_user = a2b.get(user)
                if i_user is None:
                    continue
                inputs = bn[i_user].inputs
                if pos < len(inputs) and inputs[pos] not in b2a and same(j, inputs[pos]):
                    pair(j, inputs[pos])
                    progress = True
                    break
        if not progress:
            break
    return a2b


def _side_by_side_rows(a: list, b: list, context: Optional[int]) -> list:
    """``(kind, left line number, left text, right line number, right text)``; kind ``fold`` for a
    run of unchanged lines left out."""
    rows = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    opcodes = matcher.get_opcodes()
    for n, (tag, i1, i2, j1, j2) in enumerate(opcodes):
        if tag == "equal":
            length = i2 - i1
            head = 0 if n == 0 else (context if context is not None else length)
            tail = 0 if n == len(opcodes) - 1 else (context if context is not None else length)
            if context is None or head + tail >= length:
                for k in range(length):
                    rows.append(("equal", i1 + k + 1, a[i1 + k], j1 + k + 1, b[j1 + k]))
                continue
            for k in range(head):
                rows.append(("equal", i1 + k + 1, a[i1 + k], j1 + k + 1, b[j1 + k]))
            rows.append(("fold", None, f"{length - head - tail} unchanged lines", None, ""))
            for k in range(length - tail, length):
                rows.append(("equal", i1 + k + 1, a[i1 + k], j1 + k + 1, b[j1 + k]))
        else:
            for k in range(max(i2 - i1, j2 - j1)):
                left = i1 + k if i1 + k < i2 else None
                right = j1 + k if j1 + k < j2 else None
                kind = "changed" if left is not None and right is not None else ("removed" if right is None else "added")
                rows.append((kind, None if left is None else left + 1, "" if left is None else a[left],
                             None if right is None else right + 1, "" if right is None else b[right]))
    return rows


class Diff:
    """The difference between two programs (see :func:`diff`)."""

    def __init__(self, before, after, *, context: int = 3, before_label: str = "before",
                 after_label: str = "after"):
        self.before = before
        self.after = after
        self.context = context
        self.before_label = before_label
        self.after_label = after_label
        self.before_text = _text_of(before)
        self.after_text = _text_of(after)
        self._a_lines = self.before_text.splitlines()
        self._b_lines = self.after_text.splitlines()
        lines = list(difflib.unified_diff(self._a_lines, self._b_lines, before_label, after_label,
                                          n=context, lineterm=""))
        self.text = "\n".join(lines) + ("\n" if lines else "")
        body = lines[2:]
        self.added_lines = sum(1 for line in body if line.startswith("+"))
        self.removed_lines = sum(1 for line in body if line.startswith("-"))
        self._graphs = None

    # -- text --------------------------------------------------------------------------------
    @property
    def changed(self) -> bool:
        """Whether the printed programs differ."""
        return self.before_text != self.after_text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return (f"Diff({self.before_label} -> {self.after_label}: +{self.added_lines} -{self.removed_lines} lines"
                + (")" if self.changed else ", unchanged)"))

    def side_by_side(self, context: Optional[int] = -1) -> str:
        """The two texts in two columns as an HTML table: removed lines red, added green, changed
        yellow (``rb-diff-removed``, ``rb-diff-added``, ``rb-diff-changed``). Runs of unchanged
        lines longer than twice ``context`` (the diff's own by default; ``None`` shows all) fold."""
        if context == -1:
            context = self.context
        rows = _side_by_side_rows(self._a_lines, self._b_lines, context)
        cell = "padding:0 6px;white-space:pre;vertical-align:top;text-align:left"
        num = "padding:0 4px;color:#8c8c8c;text-align:right;vertical-align:top;user-select:none"
        out = ['<table class="rb-diff" style="border-collapse:collapse;font-family:monospace;'
               'font-size:12px;line-height:1.35">',
               f'<thead><tr><th colspan="2" style="{cell}">{html.escape(self.before_label)}</th>'
               f'<th colspan="2" style="{cell}">{html.escape(self.after_label)}</th></tr></thead><tbody>']
        for kind, ln, left, rn, right in rows:
            if kind == "fold":
                out.append(f'<tr class="rb-diff-fold"><td colspan="4" style="{cell};color:#8c8c8c;'
                           f'background:#f6f8fa">⋯ {html.escape(left)} ⋯</td></tr>')
                continue
            lstyle = _ROW_STYLES[kind] if kind in ("removed", "changed") else ""
            rstyle = _ROW_STYLES[kind] if kind in ("added", "changed") else ""
            out.append(f'<tr class="rb-diff-{kind}">'
                       f'<td style="{num}">{"" if ln is None else ln}</td>'
                       f'<td style="{cell};{lstyle}">{html.escape(left)}</td>'
                       f'<td style="{num}">{"" if rn is None else rn}</td>'
                       f'<td style="{cell};{rstyle}">{html.escape(right)}</td></tr>')
        out.append("</tbody></table>")
        return "\n".join(out)

    # -- graph -------------------------------------------------------------------------------
    def _match(self):
        if self._graphs is None:
            gb = dataflow_graph(self.before)
            ga = dataflow_graph(self.after)
            a2b = match_graphs(gb, ga)
            matched_b = set(a2b.values())
            added = [n for n in ga.nodes if n.index not in a2b]
            removed = [n for n in gb.nodes if n.index not in matched_b]
            self._graphs = (gb, ga, a2b, added, removed)
        return self._graphs

    @property
    def added(self) -> list:
        """The nodes of the graph after the change that have no counterpart before it."""
        return self._match()[3]

    @property
    def removed(self) -> list:
        """The nodes of the graph before the change that have no counterpart after it."""
        return self._match()[4]

    def summary(self) -> str:
        """``removed: 2 x const, add; added: const`` (nodes counted by name)."""
        def counts(nodes):
            c = Counter(n.name for n in nodes)
            return ", ".join(f"{k} x{v}" if v > 1 else k for k, v in sorted(c.items())) or "nothing"
        return f"removed: {counts(self.removed)}; added: {counts(self.added)}"

    def graph(self, *, max_ghosts: int = 60) -> RelayDigraph:
        """The graph after the change: added nodes with a green border (and fill, for parameters and
        constants), removed nodes of the graph before as dashed red ghosts wired to their
        neighbours (above ``max_ghosts`` removed nodes, one box lists them by count instead)."""
        gb, ga, a2b, added, removed = self._match()
        added_ids = {n.index for n in added}
        b2a = {i: j for j, i in a2b.items()}

        def mark(node):
            if node.index not in added_ids:
                return None
            if node.kind == "call":
                style = "rounded,filled,bold"
                return {"color": _ADDED_BORDER, "penwidth": "3", "style": style}
            return {"shape": "box", "style": "filled", "fillcolor": _ADDED_FILL, "color": _ADDED_BORDER,
                    "penwidth": "2"}

        def ghosts(g):
            if not removed:
                return
            if len(removed) > max_ghosts:
                c = Counter(n.name for n in removed)
                lines = [f"{v} x {k}" for k, v in sorted(c.items())]
                g.node("removed", label="removed:\\l" + "\\l".join(lines) + "\\l", shape="box", style="dashed",
                       color=_REMOVED, fontcolor=_REMOVED)
                return
            removed_ids = {n.index for n in removed}
            for node in removed:
                g.node(f"r{node.index}", label=node.label, shape="box", style="rounded,dashed", color=_REMOVED,
                       fontcolor=_REMOVED)
            users_b = gb.consumers()
            for node in removed:
                for src in node.inputs:
                    tail = f"r{src}" if src in removed_ids else f"n{b2a[src]}"
                    g.edge(tail, f"r{node.index}", style="dashed", color=_REMOVED)
                for user, _pos in users_b[node.index]:
                    if user not in removed_ids:
                        g.edge(f"r{node.index}", f"n{b2a[user]}", style="dashed", color=_REMOVED)

        return draw(ga, node_extra=mark, extra=ghosts)

    def _repr_html_(self) -> str:
        parts = [self.side_by_side()]
        if self.changed:
            gb, ga, *_ = self._match()
            parts.append(f"<p style=\"font-family:monospace;font-size:12px\">{html.escape(self.summary())}</p>")
            if len(ga.nodes) + len(self.removed) <= _MAX_SVG_NODES:
                try:
                    parts.append(f'<div class="rb-diff-graph">{render_svg(self.graph())}</div>')
                except GraphvizError as err:
                    parts.append(f"<pre>{html.escape(str(err))}</pre>")
        return "\n".join(parts)


def diff(before, after=None, *, context: int = 3) -> Diff:
    """Compare two programs: ``diff(mod_before, mod_after)`` (IRModules or Functions), or
    ``diff(record)`` with a :class:`~relaybench.passes.instruments.PassRecord` (``snaps[3]``), which
    holds the module before and after its pass."""
    before_label, after_label = "before", "after"
    if after is None:
        if not (hasattr(before, "before") and hasattr(before, "after")):
            raise TypeError("diff: give two programs, or one pass record (with .before and .after); got "
                            f"{type(before).__name__} alone")
        record = before
        label = getattr(record, "label", None) or getattr(record, "name", "")
        before_label, after_label = f"before {label}".strip(), f"after {label}".strip()
        before = record.before
        after = record.after if record.after is not None else record.before
    return Diff(before, after, context=context, before_label=before_label, after_label=after_label)
