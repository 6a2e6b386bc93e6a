"""Where a build's time goes: every pass and every kernel compile of one
:func:`relaybench.build`, as a bar chart, with the kernel cache's hits and misses.

:func:`compile_time` builds a module with a :class:`~relaybench.passes.instruments.PassTimer`
among its instruments and returns a :class:`CompileTimeView` of:

* each pass of the build's pipeline (the default pipeline's members, their own time: a
  sequence's members are timed inside it) and the passes it skipped at that opt_level (listed,
  0 s);
* each distinct fused group's lowering to loop IR and code generation
  (``GroupKernel.lower_seconds`` / ``compile_seconds``), with where its machine code came from:
  ``compiled`` (LLVM ran: a cache miss), ``disk`` (the kernel cache, ``RB_CACHE_DIR``: a hit),
  ``memory`` (loaded by this process already) or ``host`` (a group the reference interpreter
  runs);
* the build's :class:`~relaybench.backends.build.CompileStats` (optimize, lower, compile and
  total seconds; LLVM compiled, from disk, from memory).

The chart (:meth:`CompileTimeView.canvas`) has one bar per row, passes in blue and kernels
colored by their cache origin, each with a tooltip; a second build of the same module shows
its kernels as hits and its time moving from LLVM to the passes.

>>> import relaybench as rb
>>> from relaybench import op
>>> x = rb.var("x", shape=(8, 8))
>>> view = compile_time(rb.Function([x], op.nn.relu(op.tanh(x) + x)))
>>> [r["name"] for r in view.kernel_rows()]
['fused_tanh_add_nn_relu']
>>> view.kernel_rows()[0]["cache"] in ("compiled", "disk", "memory")
True
>>> [r["name"] for r in view.pass_rows()][-1]
'FuseOps{fuse_opt_level=3}'
>>> again = compile_time(rb.Function([x], op.nn.relu(op.tanh(x) + x)))
>>> again.kernel_rows()[0]["cache"], again.hits, again.misses
('memory', 1, 0)
"""

from __future__ import annotations

from typing import Optional

from .chart import Canvas

__all__ = ["compile_time", "CompileTimeView", "CACHE_COLORS"]

#: bar colors: a pass, and a kernel by where its code came from
PASS_COLOR = "#90caf9"
CACHE_COLORS = {"compiled": "#ef9a9a", "disk": "#a5d6a7", "memory": "#c5e1a5", "host": "#e0e0e0",
                None: "#ffcc80"}
_CACHE_WORDS = {"compiled": "LLVM compiled it (cache miss)", "disk": "read from the kernel cache (hit)",
                "memory": "loaded in this process already (hit)", "host": "runs on the host (no code)",
                None: "not an LLVM kernel"}


class CompileTimeView:
    """One build's time: ``rows`` (passes, then kernels; see the module), ``stats`` (its
    CompileStats), ``module`` (the GraphModule built), ``hits`` / ``misses`` (kernels whose
    code came from a cache / that LLVM compiled)."""

    def __init__(self, rows: list, stats, module, target: str):
        self.rows = rows
        self.stats = stats
        self.module = module
        self.target = target

    def pass_rows(self) -> list:
        return [r for r in self.rows if r["kind"] == "pass"]

    def kernel_rows(self) -> list:
        return [r for r in self.rows if r["kind"] == "kernel"]

    @property
    def hits(self) -> int:
        return sum(1 for r in self.kernel_rows() if r["cache"] in ("disk", "memory"))

    @property
    def misses(self) -> int:
        return sum(1 for r in self.kernel_rows() if r["cache"] == "compiled")

    @property
    def pass_seconds(self) -> float:
        return sum(r["seconds"] for r in self.pass_rows())

    @property
    def kernel_seconds(self) -> float:
        return sum(r["seconds"] for r in self.kernel_rows())

    def summary(self) -> str:
        s = self.stats
        return (f"build for {self.target}: {s.total_seconds:.2f} s: passes {self.pass_seconds:.2f} s "
                f"({len(self.pass_rows())}), kernels {self.kernel_seconds:.2f} s "
                f"({len(self.kernel_rows())}: lower {s.lower_seconds:.2f} s, compile "
                f"{s.compile_seconds:.2f} s); kernel cache: {self.hits} hits, {self.misses} misses"
                + (f"; {s.lowerings_cached} groups not lowered (the lowering cache)"
                   if s.lowerings_cached else ""))

    def table(self):
        from .table import Table
        return Table([{"kind": r["kind"], "name": r["name"], "ms": round(r["seconds"] * 1e3, 2),
                       "detail": r["detail"], "cache": r["cache"] or "-"} for r in self.rows])

    def canvas(self, width: float = 900.0) -> Canvas:
        """The bar chart: one row per pass and kernel (name at the left, milliseconds at the
        bar's end), passes blue, kernels by cache origin (:data:`CACHE_COLORS`), a legend."""
        left, top, row, right = 260.0, 44.0, 13.0, 70.0
        rows = self.rows
        height = top + row * max(len(rows), 1) + 20
        c = Canvas(width, height, css_class="rb-compile-time")
        c.text(8, 16, self.summary(), size=11, bold=True)
        x = 8.0
        for label, color in (("pass", PASS_COLOR), ("kernel: LLVM compiled (miss)", CACHE_COLORS["compiled"]),
                             ("kernel: disk cache (hit)", CACHE_COLORS["disk"]),
                             ("kernel: in memory (hit)", CACHE_COLORS["memory"])):
            c.rect(x, 24, 10, 9, fill=color)
            c.text(x + 14, 32, label, size=9)
            x += 14 + 6.2 * len(label) + 16
        longest = max((r["seconds"] for r in rows), default=0.0) or 1e-9
        scale = (width - left - right) / longest
        for i, r in enumerate(rows):
            y = top + i * row
            name = r["name"] if len(r["name"]) <= 44 else r["name"][:41] + "..."
            c.text(left - 6, y + row * 0.75, name, size=8.5, anchor="end",
                   color="#333333" if r["kind"] == "kernel" or not r["skipped"] else "#9e9e9e")
            color = PASS_COLOR if r["kind"] == "pass" else CACHE_COLORS.get(r["cache"], CACHE_COLORS[None])
            tip = f"{r['name']}: {r['seconds'] * 1e3:.2f} ms\n{r['detail']}"
            c.rect(left, y + 1.5, r["seconds"] * scale, row - 3, fill=color, tooltip=tip,
                   css=f"rb-{r['kind']}")
            c.text(left + r["seconds"] * scale + 4, y + row * 0.75, f"{r['seconds'] * 1e3:.1f} ms",
                   size=8, color="#616161")
        return c

    def svg(self) -> str:
        return self.canvas().svg()

    def _repr_html_(self) -> str:
        return f'<div class="rb-compile-view" style="overflow-x:auto">{self.svg()}</div>'

    def __repr__(self) -> str:
        return f"CompileTimeView({self.summary()})"


def _pass_rows(timer, snapshots) -> list:
    """The pipeline's passes in the order they came: the members of the top sequence (depth
    1), each with its time from the timer (which sees the same passes run, in the same order),
    and those skipped at 0 s."""
    ran = iter([t for t in timer.records if t.depth == 1])
    rows = []
    for r in snapshots:
        if r.depth != 1:
            continue
        if r.skipped:
            rows.append({"kind": "pass", "name": r.label, "seconds": 0.0, "skipped": True,
                         "detail": f"skipped: {r.status}", "cache": None})
            continue
        t = next(ran, None)
        seconds = float(t.seconds) if t is not None else float(r.seconds)
        inner = f"; {t.self_seconds * 1e3:.2f} ms outside the passes it ran" if t is not None else ""
        rows.append({"kind": "pass", "name": r.label, "seconds": seconds, "skipped": False,
                     "detail": f"pass{inner}" + (" (failed)" if t is not None and t.failed else ""),
                     "cache": None})
    return rows


def _kernel_rows(module) -> list:
    rows = []
    for k in module.kernels:
        cache = "host" if k.host else getattr(k, "cache_origin", None)
        seconds = float(k.lower_seconds + k.compile_seconds)
        detail = (f"lower {k.lower_seconds * 1e3:.2f} ms, code {k.compile_seconds * 1e3:.2f} ms; "
                  f"{_CACHE_WORDS.get(cache, cache)}; ops: {', '.join(k.ops) or 'copy'}")
        shared = getattr(k, "shared_with", None)
        if shared:
            detail += f"; one module with {', '.join(shared)} (common phases compiled once)"
        rows.append({"kind": "kernel", "name": k.name, "seconds": seconds, "skipped": False,
                     "detail": detail, "cache": cache})
    return rows


def compile_time(mod, params: Optional[dict] = None, target="llvm", opt_level: int = 3,
                 **build_options) -> CompileTimeView:
    """Build ``mod`` (see :func:`relaybench.build`; ``build_options`` go to it) with the passes
    timed, and return the :class:`CompileTimeView` of where the time went."""
    from ..backends.build import build
    from ..passes.instruments import PassTimer, Snapshots
    timer, snaps = PassTimer(), Snapshots()
    instruments = list(build_options.pop("instruments", ())) + [timer, snaps]
    module = build(mod, target, params=params, opt_level=opt_level, instruments=instruments,
                   **build_options)
    stats = module.compile_stats
    rows = _pass_rows(timer, snaps) + _kernel_rows(module)
    return CompileTimeView(rows, stats, module, str(target))
