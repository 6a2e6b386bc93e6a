"""Views of IR objects and results for notebooks and terminals.

* :func:`to_dot` (``viz/dot.py``): the dataflow graph of a module or function as a
  ``graphviz.Digraph``, fused groups as clusters, edges colored by dtype (the int8 region of a
  quantized program in blue); :func:`render_svg` draws it, :func:`legend` its colors.
* :func:`diff` (``viz/snapshot_diff.py``): two snapshots side by side, text and graph.
* :func:`html` (``viz/html.py``): the rich notebook view of any IR object or result.
* :class:`PassExplorer`, :class:`FusionView` (``viz/widgets.py``): the widgets; the explorer's
  quantization toggle runs :func:`relaybench.quantize.quantize` before its pipeline.
* :class:`Table`: rows of results, printed or shown as HTML.
* :func:`memory_plan` (``viz/memory.py``): each buffer's lifetime over a compiled program's
  steps and the storage it shares, with the bytes reuse saves (graph executor and VM).
* :func:`compile_time` (``viz/compile_time.py``): a build's time per pass and per kernel as a
  bar chart, with the kernel cache's hits and misses.
* :func:`save` (``viz/save.py``): any view written as SVG, PNG or HTML.

Everything but :class:`Table` and :func:`html` (both light) is imported on first use, so
``import relaybench`` stays light.
"""

from __future__ import annotations

import importlib

from .table import Table  # noqa: F401
# Imported eagerly (it needs the standard library only): the function ``html`` shares its name
# with its module, and importing ``relaybench.viz.html`` anywhere (a compiled module's
# ``_repr_html_`` does) would otherwise make the package attribute the module, not the function.
from .html import html  # noqa: E402,F401

_LAZY = {
    "to_dot": "dot", "render_svg": "dot", "legend": "dot", "diff": "snapshot_diff", "Diff": "snapshot_diff",
    "PassExplorer": "widgets", "FusionView": "widgets", "memory_plan": "memory",
    "MemoryPlanView": "memory", "compile_time": "compile_time", "CompileTimeView": "compile_time",
    "save": "save",
}

__all__ = ["Table", "html", *_LAZY]


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'relaybench.viz' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
