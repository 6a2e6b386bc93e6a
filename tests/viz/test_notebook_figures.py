"""Every stored tutorial notebook shows the figures it makes: a code cell that draws one
(``.plot(``, ``plt.subplots``, ``plt.figure``) has an image among its saved outputs, so a
reader sees it without running anything (notebook 08 once assigned its figure and showed
nothing)."""

import json
import pathlib
import re

import pytest

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[2] / "notebooks"
DRAWS = re.compile(r"\.plot\(|plt\.subplots\(|plt\.figure\(")
IMAGES = ("image/png", "image/svg+xml", "image/jpeg")


def figure_cells(path):
    nb = json.loads(path.read_text())
    for index, cell in enumerate(nb["cells"]):
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "code" and DRAWS.search(source):
            shown = any(kind in out.get("data", {}) for out in cell.get("outputs", []) for kind in IMAGES)
            yield index, source, shown


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.name)
def test_stored_notebook_shows_its_figures(path):
    missing = [(i, src.splitlines()[-1]) for i, src, shown in figure_cells(path) if not shown]
    assert missing == [], f"{path.name}: cells that make a figure and show none: {missing}"


def test_the_rule_sees_an_assigned_figure(tmp_path):
    nb = {"cells": [{"cell_type": "code", "source": "figure = result.plot()", "outputs": [
        {"output_type": "execute_result", "data": {"text/plain": "<Figure size 640x480>"}}]}]}
    path = tmp_path / "99_x.ipynb"
    path.write_text(json.dumps(nb))
    assert [shown for _, _, shown in figure_cells(path)] == [False]
