"""The VM calling accelerator groups: a quantized TreeLSTM, its recursive cell's requantized
dense layers packed and run in the simulator once per tree node, the rest on the CPU. Checked
bit for bit against the same packed program run by the VM on the CPU (llvm), and within a float
rounding against the unpacked llvm build."""

import numpy as np
import pytest

import relaybench as rb
from relaybench.backends.accel.kernel import AccelKernel
from relaybench.backends.build import _pack_for_accel, flatten_result
from relaybench.backends.target import Target
from relaybench.backends.vm import VirtualMachine, compile as vm_compile
from relaybench.experiments.accelerator import TREE_QCONFIG
from relaybench.experiments.nlp import full_tree

pytest.importorskip("llvmlite")

SIZE = 32
NODES = 7


def _quantized(batch):
    mod, params = rb.models.tree_lstm(batch_size=batch, input_size=SIZE, hidden_size=SIZE)
    with rb.quantize.qconfig(**TREE_QCONFIG):
        return rb.quantize.quantize(mod, params)


def _tree(batch, seed=0):
    rng = np.random.default_rng(seed)
    tree = full_tree(3, lambda: rng.standard_normal((batch, SIZE)).astype("float32"))
    return rb.adt.from_python(tree, "Tree")


def _values(result):
    return [np.asarray(v) for v in flatten_result(result)]


@pytest.mark.parametrize("design,batch", [("accel", 1), ("accel -batch=4", 4)])
def test_tree_lstm_cell_layers_run_on_the_accelerator(design, batch):
    q = _quantized(batch)
    exe = vm_compile(q, target=design)
    accel = [k.compiled for k in exe.kernels if isinstance(k.compiled, AccelKernel)]
    # ioux (with the iouh result added as a residual), iouh and fx; fh sits in a closure
    assert len(accel) == 3
    assert sum(k.plan.residual_param is not None for k in accel) == 1
    for k in accel:
        k.reset_totals()
    tree = _tree(batch)
    got = _values(VirtualMachine(exe).invoke("main", tree))
    assert all(k.totals["calls"] == NODES for k in accel)
    assert all(k.totals["cycles"] > 0 and k.totals["gemm_macs"] > 0 for k in accel)
    packed = _pack_for_accel(q, Target.parse(design))
    want = _values(VirtualMachine(vm_compile(packed, target="llvm")).invoke("main", tree))
    for w, g in zip(want, got):
        assert w.dtype == g.dtype and np.array_equal(w, g)
    plain = _values(VirtualMachine(vm_compile(q, target="llvm")).invoke("main", tree))
    for p, g in zip(plain, got):
        np.testing.assert_allclose(g, p, rtol=1e-6, atol=1e-6)


def test_the_simulated_macs_are_the_layers_macs():
    """GEMM MACs per call: batch x K x M of each layer (the core multiplies whole blocks)."""
    q = _quantized(1)
    exe = vm_compile(q, target="accel")
    accel = [k.compiled for k in exe.kernels if isinstance(k.compiled, AccelKernel)]
    VirtualMachine(exe).invoke("main", _tree(1))
    macs = sorted(k.last_stats.gemm_macs for k in accel)
    assert macs == sorted([SIZE * 3 * SIZE, SIZE * 3 * SIZE, SIZE * SIZE])
