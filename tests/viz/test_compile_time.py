"""The compile-time view (relaybench.viz.compile_time): every pass and kernel of a build, with
the kernel cache's misses and hits, checked against what a separate instrument and the build's
own statistics record."""

import gc
import re

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.passes.instruments import Snapshots
from relaybench.viz import compile_time


def unique_program(rows):
    """A program whose kernel no earlier test compiled: its shape is its own."""
    x = rb.var("x", shape=(rows, 3))
    return rb.Function([x], op.nn.relu(op.tanh(x) * rb.const(np.float32(2.0))))


def test_passes_are_those_the_pipeline_ran():
    x = rb.var("x", shape=(4, 4))
    fn = rb.Function([x], op.nn.relu(x + x))
    view = compile_time(fn)
    snaps = Snapshots()
    rb.build(fn, instruments=[snaps])
    members = [r for r in snaps if r.depth == 1]
    assert [r["name"] for r in view.pass_rows()] == [r.label for r in members]
    assert [r["skipped"] for r in view.pass_rows()] == [r.skipped for r in members]
    assert all(r["seconds"] == 0.0 for r in view.pass_rows() if r["skipped"])
    # the kernels' time is the build's lowering and code generation
    stats = view.stats
    assert view.kernel_seconds == pytest.approx(stats.lower_seconds + stats.compile_seconds, abs=1e-6)
    assert view.pass_seconds <= stats.optimize_seconds


def test_a_miss_then_a_memory_hit_then_a_disk_hit(tmp_path):
    with rb.config.Context(RB_CACHE_DIR=str(tmp_path), RB_KERNEL_CACHE_SIZE=0):
        first = compile_time(unique_program(37))
        assert [r["cache"] for r in first.kernel_rows()] == ["compiled"]
        assert (first.misses, first.hits) == (1, 0)
        assert first.stats.llvm_compiled == 1
        second = compile_time(unique_program(37))
        assert [r["cache"] for r in second.kernel_rows()] == ["memory"]
        assert (second.misses, second.hits) == (0, 1) and second.stats.from_memory == 1
        del first, second
        gc.collect()      # nothing holds the kernel now: the next build reads the disk cache
        third = compile_time(unique_program(37))
        assert [r["cache"] for r in third.kernel_rows()] == ["disk"]
        assert third.stats.from_disk == 1


def test_chart_has_one_bar_per_row_with_tooltips():
    view = compile_time(unique_program(5))
    svg = view.svg()
    passes = re.findall(r'<g class="rb-pass"><title>([^<]*)</title>', svg)
    kernels = re.findall(r'<g class="rb-kernel"><title>([^<]*)</title><rect [^>]*fill="([^"]*)"', svg)
    assert len(passes) == len(view.pass_rows()) and len(kernels) == len(view.kernel_rows()) == 1
    assert "ops: tanh, multiply, nn.relu" in kernels[0][0]
    assert "kernel cache:" in svg and view.table().rows[-1]["kind"] == "kernel"
