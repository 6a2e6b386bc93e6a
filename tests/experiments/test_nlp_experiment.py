"""The NLP experiment at tiny sizes: the trees it measures, the engines' values checked against
the reference interpreter before timing (the PyTorch twins included where torch is installed),
and the table written beside the paper's figures."""

import numpy as np
import pytest

from relaybench.experiments import nlp as N

TINY = {"lstm": dict(seq_len=3, input_size=8, hidden_size=8),
        "tree_lstm": dict(input_size=4, hidden_size=4),
        "tree_lstm_random": dict(input_size=4, hidden_size=4)}


def count(tree):
    total, stack = 0, [tree]
    while stack:
        t = stack.pop()
        total += 1
        stack.extend(t[1])
    return total


def test_trees_have_31_nodes():
    rng = np.random.default_rng(0)
    assert count(N.full_tree(5, lambda: 0)) == 31
    assert count(N.random_tree(31, lambda: 0, rng)) == 31


def test_table_of_aot_against_the_interpreter(tmp_path):
    result = N.nlp(models=["lstm", "tree_lstm_random"], engines=["aot", "interpreter"],
                   repeat=1, number=1, sizes=TINY)
    assert set(result.times) == {"lstm", "tree_lstm_random"}
    assert all(t["aot"] > 0 for t in result.times.values())
    md, js = result.write(tmp_path)
    text = md.read_text()
    assert "aot ms" in text and "paper: Relay AoT vs PyTorch" in text


def test_pytorch_twins_compute_what_relay_computes():
    pytest.importorskip("torch")
    # _check raises when an engine's value differs from the interpreter's
    result = N.nlp(models=["lstm", "tree_lstm"], engines=["interpreter", "aot", "torch",
                                                         "torchscript"],
                   repeat=1, number=1, sizes=TINY)
    assert {"torch", "torchscript", "aot"} <= set(result.times["tree_lstm"])


def test_reproduce_nlp_writes_the_table(tmp_path, monkeypatch, capsys):
    from relaybench import cli
    monkeypatch.setitem(N.CONFIGS, "tree_lstm", (TINY["tree_lstm"], "TreeLSTM, 31 nodes"))
    out = tmp_path / "nlp"
    assert cli.main(["reproduce", "nlp", "--out", str(out), "--quick", "--models",
                     "tree_lstm", "--threads", "1"]) == 0
    text = (out / "nlp.md").read_text()
    assert "TreeLSTM, 31 nodes" in text and "2.0x" in text     # the paper's figure beside
    assert "aot ms" in capsys.readouterr().out
