"""The NLP experiment at tiny sizes: the trees it measures, the engines' values checked against
the reference interpreter before timing (the PyTorch twins included where torch is installed),
and the table written beside the paper's figures."""

import json

import numpy as np
import pytest

from relaybench.experiments import nlp as N

TINY = {"rnn": dict(seq_len=2, input_size=4, hidden_size=4),
        "lstm": dict(seq_len=3, input_size=8, hidden_size=8),
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
                   repeat=1, number=1, sizes=TINY, isolate=False)
    assert result.mode == "in-process"
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
                   repeat=1, number=1, sizes=TINY, isolate=False)
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


def test_isolated_mode_times_each_engine_in_its_own_process(tmp_path):
    result = N.nlp(models=["rnn"], engines=["aot", "interpreter"], threads=2, repeat=2,
                   number=1, sizes=TINY, children=2)     # isolated by default at 2 threads
    assert result.mode == "isolated"
    t = result.times["rnn"]
    assert set(t) == {"aot", "interpreter"} and all(v > 0 for v in t.values())
    assert len(result.rounds["rnn"]["aot"]) == 2        # one round from each of 2 processes
    md, js = result.write(tmp_path)
    assert "isolated" in md.read_text().splitlines()[0]
    assert json.loads(js.read_text())["mode"] == "isolated"


def test_one_thread_stays_in_process():
    result = N.nlp(models=["rnn"], engines=["aot"], threads=1, repeat=1, number=1, sizes=TINY)
    assert result.mode == "in-process" and result.times["rnn"]["aot"] > 0


def test_isolated_random_trees_on_onnxruntime():
    pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    result = N.nlp(models=["tree_lstm_random"], engines=["aot", "onnxruntime"], threads=2,
                   repeat=1, number=1, sizes=TINY, isolate=True)
    assert result.mode == "isolated"
    assert result.times["tree_lstm_random"]["onnxruntime"] > 0
    assert any("exports the new tree" in n for n in result.notes)
