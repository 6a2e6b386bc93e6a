"""Interleaved comparisons (relaybench.viz.compare and PassExplorer.compare): the median's
interval checked against the binomial distribution by hand, and verdicts on configurations
whose order of speed is known."""

import math
import time

import pytest

import relaybench as rb
from relaybench import op
from relaybench.viz import PassExplorer
from relaybench.viz.compare import interleaved, median_interval


def test_median_interval_by_hand():
    # n = 10: P(Binom(10, 1/2) <= 1) = 11/1024, so [x(2), x(9)] holds the median with
    # probability 1 - 22/1024 = 0.9785; [x(3), x(8)] only 1 - 2 * 56/1024 = 0.8906
    lo, hi, level = median_interval(list(range(10, 0, -1)))
    assert (lo, hi) == (2.0, 9.0) and level == pytest.approx(1 - 22 / 1024)
    # n = 5 cannot reach 95%: the whole range, with its level 1 - 2/32
    assert median_interval([3, 1, 2, 5, 4]) == (1.0, 5.0, pytest.approx(1 - 2 / 32))
    # the level returned is the binomial's, for every n up to 40
    for n in range(6, 41):
        xs = list(range(n))
        lo, hi, level = median_interval(xs)
        k = int(lo) + 1
        assert level == pytest.approx(1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n)
        assert level >= 0.95


def test_interleaved_tells_a_slow_runner_from_a_fast_one():
    result = interleaved({"fast": lambda: time.sleep(0.0002), "slow": lambda: time.sleep(0.003)},
                         rounds=9, number=2)
    fast, slow = result.rows
    assert fast["verdict"] == "baseline" and slow["verdict"].startswith("slower")
    assert slow["ratio_low"] > 1.0 and slow["median_ms"] > 2.5
    assert fast["low_ms"] <= fast["median_ms"] <= fast["high_ms"]
    assert len(result.times_ms["fast"]) == len(result.times_ms["slow"]) == 9


def test_pass_explorer_compares_interpreter_and_compiled_code():
    x = rb.var("x", shape=(16, 16))
    y = x
    for _ in range(6):
        y = op.tanh(op.nn.relu(y) + x)
    explorer = PassExplorer(rb.Function([x], y), targets=("interpreter", "llvm"))
    explorer.run()
    explorer.time("interpreter")
    explorer.time("llvm")
    comparison = explorer.compare(rounds=7, number=2)    # the configurations timed so far
    assert [r["configuration"] for r in comparison.rows] == ["interpreter, opt_level 3", "llvm, opt_level 3"]
    # compiled and fused, twelve operators run as one kernel: faster than the interpreter, for real
    assert comparison.rows[1]["verdict"].startswith("faster") and comparison.rows[1]["ratio_high"] < 1
    assert explorer.comparisons == [comparison]
    assert "rb-comparison-view" in explorer.compare_html.value and "faster" in explorer.status.value
    # a configuration of its own passes: FuseOps left out, named
    c2 = explorer.compare("llvm", {"target": "llvm", "disabled": ["FuseOps"], "label": "unfused"}, rounds=3, number=1)
    assert [r["configuration"] for r in c2.rows] == ["llvm, opt_level 3", "unfused"]
    with pytest.raises(KeyError, match="no pass labelled .Fusion."):
        explorer.compare("llvm", {"disabled": ["Fusion"]})
    with pytest.raises(ValueError, match="two configurations or more"):
        explorer.compare("llvm")
