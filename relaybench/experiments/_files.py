"""What the experiments' results share when they are written and read back."""

from __future__ import annotations

import json
import math
from pathlib import Path

__all__ = ["save_figure", "read_result"]


def save_figure(result, path: Path, written: list) -> list:
    """``written`` with ``path`` appended once ``result.plot()`` is saved there as a PNG;
    unchanged when matplotlib is missing (the tables stand without the figure)."""
    try:
        figure = result.plot()
    except ImportError:
        return written
    figure.savefig(path, dpi=110)
    written.append(path)
    return written


def _number(value):
    return math.inf if value == "inf" else -math.inf if value == "-inf" else value


def read_result(path, experiment: str) -> tuple:
    """``(document, decode)``: the JSON written by an experiment's ``to_json`` (an error when it
    is not ``experiment``'s) and a function restoring the infinities of one of its rows."""
    path = Path(path)
    doc = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or doc.get("experiment") != experiment:
        article = "an" if experiment[0] in "aeiou" else "a"
        raise ValueError(f"{path}: not {article} {experiment} result (no 'experiment': "
                         f"'{experiment}' field)")
    return doc, (lambda row: {k: _number(v) for k, v in row.items()})
