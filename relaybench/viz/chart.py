"""A small drawing surface for the workbench's charts: rectangles, lines and text, each with an
optional tooltip, written out as SVG (for a notebook, a browser or a paper) or PNG (through
Pillow, for a slide).

The memory plan (:mod:`relaybench.viz.memory`) and the compile-time view
(:mod:`relaybench.viz.compile_time`) draw on a :class:`Canvas`; the charts have few shapes, so a
list of shapes drawn twice is all they need, and the SVG carries a ``<title>`` per shape that
a browser shows on hover (matplotlib's SVG has none).

>>> c = Canvas(120, 40)
>>> c.rect(10, 10, 50, 20, fill="#90caf9", tooltip="a buffer: 64 bytes")
>>> c.text(70, 24, "64 B")
>>> svg = c.svg()
>>> svg.startswith("<svg") and "<title>a buffer: 64 bytes</title>" in svg
True
>>> c.png()[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
True

Output depends only on the shapes (no ids, no dates), so a chart compares equal from run to run.
"""

from __future__ import annotations

import html as _html
import io
from typing import Optional

__all__ = ["Canvas", "FONT_FAMILY", "palette"]

#: the SVG font: the one Graphviz drawings use (see :data:`relaybench.viz.dot.FONT_FAMILY`)
FONT_FAMILY = "DejaVu Sans,Arial,Helvetica,sans-serif"

#: fill colors for series (storages, pass kinds): distinct mid-tones readable on white and dark
_PALETTE = ("#90caf9", "#a5d6a7", "#ffcc80", "#ce93d8", "#80cbc4", "#f48fb1", "#e6ee9c",
            "#bcaaa4", "#b0bec5", "#fff59d", "#9fa8da", "#ffab91")


def palette(i: int) -> str:
    """The ``i``-th series color (cycling)."""
    return _PALETTE[i % len(_PALETTE)]


def _esc(text) -> str:
    return _html.escape(str(text), quote=True)


def _num(v: float) -> str:
    return f"{v:.2f}".rstrip("0").rstrip(".")


class Canvas:
    """Shapes on a ``width`` x ``height`` surface (points, y down), drawn as SVG or PNG."""

    def __init__(self, width: float, height: float, *, css_class: str = "rb-chart"):
        self.width, self.height = float(width), float(height)
        self.css_class = css_class
        self.shapes: list = []

    def rect(self, x: float, y: float, w: float, h: float, *, fill: str = "#90caf9",
             stroke: str = "#555555", tooltip: Optional[str] = None, css: str = "") -> None:
        self.shapes.append(("rect", (x, y, max(w, 0.5), h), {"fill": fill, "stroke": stroke,
                                                             "tooltip": tooltip, "css": css}))

    def line(self, x1: float, y1: float, x2: float, y2: float, *, stroke: str = "#9e9e9e",
             dashed: bool = False) -> None:
        self.shapes.append(("line", (x1, y1, x2, y2), {"stroke": stroke, "dashed": dashed}))

    def text(self, x: float, y: float, text: str, *, size: float = 10, anchor: str = "start",
             color: str = "#333333", bold: bool = False, tooltip: Optional[str] = None) -> None:
        self.shapes.append(("text", (x, y), {"text": str(text), "size": size, "anchor": anchor,
                                             "color": color, "bold": bold, "tooltip": tooltip}))

    # ---- SVG ------------------------------------------------------------------------------------
    def svg(self) -> str:
        """The drawing as SVG text (from ``<svg`` on); every shape with a tooltip has a
        ``<title>`` a browser shows on hover."""
        out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="{_esc(self.css_class)}" '
               f'width="{_num(self.width)}pt" height="{_num(self.height)}pt" '
               f'viewBox="0 0 {_num(self.width)} {_num(self.height)}" font-family="{FONT_FAMILY}">',
               f'<rect x="0" y="0" width="{_num(self.width)}" height="{_num(self.height)}" fill="white"/>']
        for kind, geo, a in self.shapes:
            title = f"<title>{_esc(a['tooltip'])}</title>" if a.get("tooltip") else ""
            if kind == "rect":
                x, y, w, h = geo
                css = f' class="{_esc(a["css"])}"' if a["css"] else ""
                body = (f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(w)}" height="{_num(h)}" '
                        f'fill="{a["fill"]}" stroke="{a["stroke"]}" stroke-width="0.6"/>')
                out.append(f"<g{css}>{title}{body}</g>" if title or css else body)
            elif kind == "line":
                x1, y1, x2, y2 = geo
                dash = ' stroke-dasharray="3,3"' if a["dashed"] else ""
                out.append(f'<line x1="{_num(x1)}" y1="{_num(y1)}" x2="{_num(x2)}" y2="{_num(y2)}" '
                           f'stroke="{a["stroke"]}" stroke-width="0.8"{dash}/>')
            else:
                x, y = geo
                anchor = {"start": "start", "middle": "middle", "end": "end"}[a["anchor"]]
                weight = ' font-weight="bold"' if a["bold"] else ""
                text = (f'<text x="{_num(x)}" y="{_num(y)}" font-size="{_num(a["size"])}" '
                        f'text-anchor="{anchor}" fill="{a["color"]}"{weight}>{_esc(a["text"])}</text>')
                out.append(f"<g>{title}{text}</g>" if title else text)
        out.append("</svg>")
        return "\n".join(out)

    # ---- PNG ------------------------------------------------------------------------------------
    def png(self, scale: float = 2.0) -> bytes:
        """The drawing as PNG bytes at ``scale`` pixels per point (Pillow draws it)."""
        try:
            from PIL import Image, ImageDraw
        except ImportError as err:  # pragma: no cover - Pillow comes with matplotlib
            raise ImportError("writing a chart as PNG needs Pillow (pip install pillow)") from err
        img = Image.new("RGB", (max(1, round(self.width * scale)), max(1, round(self.height * scale))),
                        "white")
        draw = ImageDraw.Draw(img)
        fonts: dict = {}
        for kind, geo, a in self.shapes:
            if kind == "rect":
                x, y, w, h = (v * scale for v in geo)
                draw.rectangle([x, y, x + w, y + h], fill=a["fill"], outline=a["stroke"])
            elif kind == "line":
                x1, y1, x2, y2 = (v * scale for v in geo)
                draw.line([x1, y1, x2, y2], fill=a["stroke"], width=max(1, round(scale * 0.8)))
            else:
                x, y = (v * scale for v in geo)
                size = round(a["size"] * scale)
                font = fonts.get(size)
                if font is None:
                    font = fonts[size] = _font(size)
                anchor = {"start": "ls", "middle": "ms", "end": "rs"}[a["anchor"]]
                draw.text((x, y), a["text"], fill=a["color"], font=font, anchor=anchor)
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        return buf.getvalue()

    def _repr_svg_(self) -> str:
        return self.svg()


def _font(size: int):
    """DejaVu Sans at ``size`` pixels (matplotlib ships it; the system may have it too), else
    Pillow's own font."""
    from PIL import ImageFont
    for path in _font_paths():
        try:
            return ImageFont.truetype(path, size)
        except OSError:
            continue
    return ImageFont.load_default(size=size)


def _font_paths() -> list:
    paths = ["DejaVuSans.ttf"]
    try:
        from matplotlib import font_manager
        paths.insert(0, font_manager.findfont("DejaVu Sans", fallback_to_default=True))
    except ImportError:
        pass
    return paths
