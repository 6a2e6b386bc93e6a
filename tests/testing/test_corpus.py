"""Every saved program in tests/testing/corpus/ agrees with the interpreter on every
configuration (each file is a minimized program that once showed a bug)."""

from pathlib import Path

import pytest

import relaybench as rb
from relaybench.testing import run_differential

CORPUS = sorted((Path(__file__).parent / "corpus").glob("*.rly"))


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_corpus_program(path):
    text = path.read_text(encoding="utf-8")
    assert text.startswith("//"), f"{path.name}: the first line says what the bug was"
    report = run_differential(rb.parse(text))
    assert report.ok, f"{path.name}:\n{report}"
