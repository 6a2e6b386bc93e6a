"""VirtualMachine.trace: the instructions a run executes, each with the value it wrote, counted
against what the program must do (hand-counted recursion depths and results)."""

import numpy as np
import pytest

import relaybench as rb

SUM = '''#[version = "0.0.5"]
def @main(%n: int32) -> int32 {
  if (equal(%n, 0)) { 0 } else { add(%n, @main(subtract(%n, 1))) }
}'''


def test_a_trace_follows_the_recursion():
    vm = rb.vm.VirtualMachine(rb.vm.compile(rb.parse(SUM), opt_level=0))
    t = vm.trace("main", np.int32(5), limit=10_000)
    assert int(t.result) == 15
    assert t.executed == len(t.steps)
    # @main(5) calls @main(4) ... @main(0): five invokes, six returns, depths 0..5
    assert sum(r["instruction"].startswith("invoke ") for r in t.steps) == 5
    rets = [r for r in t.steps if r["instruction"].startswith("ret ")]
    assert len(rets) == 6 and max(r["depth"] for r in t.steps) == 5
    # the returns, innermost first, carry the partial sums 0, 1, 3, 6, 10, 15
    assert [r["value"] for r in rets] == ["0", "1", "3", "6", "10", "15"]
    assert all(r["function"] == "main" for r in t.steps)
    assert t.steps[0]["step"] == 0 and t.steps[0]["pc"] == 0


def test_a_limited_trace_runs_to_the_end_and_says_how_much_it_left_out():
    vm = rb.vm.VirtualMachine(rb.vm.compile(rb.parse(SUM), opt_level=0))
    full = vm.trace("main", np.int32(20), limit=10_000)
    short = vm.trace("main", np.int32(20), limit=7)
    assert int(short.result) == 210 and len(short.steps) == 7
    assert short.executed == full.executed
    assert short.steps == full.steps[:7]
    assert f"{full.executed - 7} more instructions" in str(short)
    assert "<table" in short._repr_html_()
    with pytest.raises(ValueError, match="limit"):
        vm.trace("main", np.int32(1), limit=-1)


def test_tensor_values_show_on_one_line():
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) { nn.relu(%x) }''')
    vm = rb.vm.VirtualMachine(rb.vm.compile(mod, opt_level=3))
    x = np.array([[-1.5, 2.25, 3], [4, -5, 6]], "float32")
    t = vm.trace("main", x)
    np.testing.assert_array_equal(t.result, np.maximum(x, 0))
    assert t.steps[-1]["value"] == "float32[2, 3] [0, 2.25, 3, ...]"
    assert all("\n" not in r["value"] for r in t.steps)
