"""A plain table: aligned text for ``print``, HTML in a notebook.

It lives at the bottom of the package, beside ``config`` and ``errors``, because every layer
returns tables (the operator registry, the pass list, the graph executor's profile); the views
package re-exports it as :class:`relaybench.viz.Table`.

>>> print(Table([{"op": "add", "pattern": "BROADCAST"}, {"op": "nn.relu", "pattern": "ELEMWISE"}]))
op       pattern
-------  ---------
add      BROADCAST
nn.relu  ELEMWISE
"""

from __future__ import annotations


class Table:
    """A list of rows that prints as aligned text and renders as HTML in a notebook."""

    def __init__(self, rows: list):
        self.rows = rows

    def __str__(self) -> str:
        if not self.rows:
            return "(empty)"
        cols = list(self.rows[0])
        widths = {c: max(len(c), *(len(str(r[c])) for r in self.rows)) for c in cols}
        lines = ["  ".join(c.ljust(widths[c]) for c in cols).rstrip()]
        lines.append("  ".join("-" * widths[c] for c in cols))
        for r in self.rows:
            lines.append("  ".join(str(r[c]).ljust(widths[c]) for c in cols).rstrip())
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        import html
        if not self.rows:
            return "<p>(empty)</p>"
        cols = list(self.rows[0])
        head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(r[c]))}</td>" for c in cols) + "</tr>"
                       for r in self.rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
