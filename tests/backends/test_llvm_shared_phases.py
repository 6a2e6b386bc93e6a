"""Kernels compiled together that have a phase in common share one LLVM module, the common phase
compiled once (relaybench.backends.llvm.codegen.share_phases); checked against numpy and the
interpreter, and against the same kernels compiled alone."""

import numpy as np
import pytest

pytest.importorskip("llvmlite.ir", reason="the LLVM backend needs llvmlite (the `llvm` extra)")

import relaybench as rb  # noqa: E402
from relaybench import config, op  # noqa: E402
from relaybench.backends.group_cache import get_group_cache  # noqa: E402
from relaybench.backends.llvm import codegen  # noqa: E402
from relaybench.backends.llvm.cache import cache_key  # noqa: E402
from relaybench.backends.llvm.codegen import (KernelPlan, build_kernel,  # noqa: E402
                                              kernel_from_manifest, share_phases)
from relaybench.backends.llvm.jit import host_target  # noqa: E402
from relaybench.te import loop_ir as L  # noqa: E402

N = 24


def phased(name, scale, second):
    """``T = scale * A + 1`` (parallel over rows; the phase the kernels may share), then
    ``second(T)`` into the last parameter (parallel). Temporaries come after the parameters,
    so T's place among the arguments depends on how many parameters the kernel has."""
    A = L.Buffer("A", (N, N), "float32")
    T = L.Buffer("T", (N, N), "float32")
    i, j = L.Var("i"), L.Var("j")
    first = L.For(i, 0, N, "parallel", L.For(j, 0, N, "vectorized", L.Store(
        T, (i, j), L.Load(A, (i, j)) * scale + 1.0)))
    params, then = second(T)
    return L.PrimFunc(name, (A,) + params, L.Allocate(T, L.seq(first, then)))


def plus_transpose(T, sign=1.0):
    out = L.Buffer("out", (N, N), "float32")
    i, j = L.Var("i"), L.Var("j")
    return (out,), L.For(i, 0, N, "parallel", L.For(j, 0, N, "serial", L.Store(
        out, (i, j), L.Load(T, (i, j)) + L.Load(T, (j, i)) * sign)))


def minus_transpose(T):
    return plus_transpose(T, -1.0)


def times_c(T):
    C = L.Buffer("C", (N, N), "float32")
    out = L.Buffer("out", (N, N), "float32")
    i, j = L.Var("i"), L.Var("j")
    return (C, out), L.For(i, 0, N, "parallel", L.For(j, 0, N, "vectorized", L.Store(
        out, (i, j), L.Load(T, (i, j)) * L.Load(C, (i, j)))))


@pytest.fixture
def small_phases(monkeypatch):
    """Every common phase shared, however short (the test's phases are a few lines)."""
    monkeypatch.setattr(codegen, "SHARE_MIN_TEXT", 1)


def test_common_phase_compiled_once_and_each_kernel_agrees_with_numpy(small_phases):
    fa = phased("shared_a", 2.0, plus_transpose)
    fb = phased("shared_b", 2.0, times_c)
    fc = phased("shared_c", 3.0, minus_transpose)   # no phase in common: compiled alone
    plans = [KernelPlan(f) for f in (fa, fb, fc)]
    groups = share_phases(plans)
    assert len(groups) == 1 and groups[0].plans == plans[:2] and plans[2].shared is None
    ka, kb, kc = (build_kernel(f, plan=p, cache=False) for f, p in zip((fa, fb, fc), plans))
    assert ka.compiled_module is kb.compiled_module is not kc.compiled_module
    text = ka.source("llvm")
    assert text.count("define internal") == 1 and "@shared_0(" in text
    assert [p.name for p in ka.kernel.phases] == ["k0_kernel_0", "k0_kernel_1"]
    assert [p.name for p in kb.kernel.phases] == ["k1_kernel_0", "k1_kernel_1"]
    # each kernel's manifest keeps its own key beside the shared module's
    assert ka.manifest["key"] == cache_key(plans[0].key_text, host_target().identity)
    assert ka.manifest["digest"] == kb.manifest["digest"] == ka.compiled_module.key
    rng = np.random.default_rng(3)
    a, c = (rng.standard_normal((N, N)).astype("float32") for _ in range(2))
    t2, t3 = 2 * a + 1, 3 * a + 1
    for threads in (1, 2):
        for kernel, args, want in ((ka, (a,), t2 + t2.T), (kb, (a, c), t2 * c),
                                   (kc, (a,), t3 - t3.T)):
            out = np.zeros((N, N), "float32")
            kernel(*args, out, num_threads=threads)
            np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-5)  # a * s + 1 fused
    # read back from the manifest (a build whose lowering is cached): the same module
    again = kernel_from_manifest(kb.manifest, "shared_b", fb)
    out = np.zeros((N, N), "float32")
    again(a, c, out)
    np.testing.assert_allclose(out, t2 * c, rtol=1e-6)


def test_short_phases_and_kernels_alone_are_not_shared():
    plans = [KernelPlan(phased("short_a", 2.0, plus_transpose)),
             KernelPlan(phased("short_b", 2.0, times_c))]
    assert share_phases(plans) == [] and all(p.shared is None for p in plans)
    # a phase the same in several plans may be shared, whichever it is: here the second one
    both = [KernelPlan(phased("second_a", 2.0, plus_transpose)),
            KernelPlan(phased("second_b", 4.0, plus_transpose))]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(codegen, "SHARE_MIN_TEXT", 1)
        assert [g.plans for g in share_phases(both)] == [both]
    assert plans[0].phase_keys()[0][0] < codegen.SHARE_MIN_TEXT
    A = L.Buffer("A", (4,), "float32")
    i = L.Var("i")
    plain = KernelPlan(L.PrimFunc("plain", (A,), L.For(i, 0, 4, "parallel",
                                                       L.Store(A, (i,), 1.0))))
    assert plain.phase_keys() is None


def test_shared_module_groups_at_most_the_limit(small_phases, monkeypatch):
    monkeypatch.setattr(codegen, "SHARE_MAX_KERNELS", 2)
    plans = [KernelPlan(phased(f"limit_{k}", 5.0, times_c if k % 2 else plus_transpose))
             for k in range(5)]
    groups = share_phases(plans)
    assert [len(g.plans) for g in groups] == [2, 2] and plans[4].shared is None


def _winograd_pair():
    """Two 3x3 convolutions of one shape: the first with a bias and a ReLU, the second with a
    bias, the block's input added back and a ReLU: Winograd kernels that differ only after the
    products."""
    rng = np.random.default_rng(5)
    x = rb.var("data", shape=(1, 24, 9, 9))
    params = {f"{n}{k}": (rng.standard_normal((24, 24, 3, 3) if n == "w" else (24,))
                          .astype("float32") * (0.15 if n == "w" else 1.0))
              for k in (1, 2) for n in ("w", "b")}
    w1, b1, w2, b2 = (rb.var(n, shape=v.shape) for n, v in params.items())
    y = op.nn.relu(op.nn.bias_add(op.nn.conv2d(x, w1, padding=1, channels=24, kernel_size=3),
                                  b1))
    y = op.nn.bias_add(op.nn.conv2d(y, w2, padding=1, channels=24, kernel_size=3), b2)
    body = op.nn.relu(op.add(y, x))
    return rb.IRModule.from_expr(rb.Function([x, w1, b1, w2, b2], body)), params


def test_winograd_pair_shares_its_module_and_agrees_with_the_interpreter(tmp_path):
    mod, params = _winograd_pair()
    data = np.random.default_rng(6).standard_normal((1, 24, 9, 9)).astype("float32")
    want = np.asarray(rb.create_executor("interpreter", mod=mod).evaluate()(data,
                                                                            *params.values()))
    get_group_cache().forget()
    with config.Context(RB_CACHE_DIR=tmp_path, RB_WINOGRAD="on"):
        lib = rb.build(mod, target="llvm", params=params)
        view = rb.viz.compile_time(mod, params=params)
    get_group_cache().forget()
    winograd = [k for k in lib.kernels if "winograd" in k.name]
    assert len(winograd) == 2 and lib.compile_stats.llvm_shared == 2
    assert winograd[0].compiled.compiled_module is winograd[1].compiled.compiled_module
    assert [k.cache_origin for k in winograd] == ["compiled", "compiled"]
    for threads in (1, 2):
        lib.set_num_threads(threads)
        np.testing.assert_allclose(np.asarray(lib.run(data=data)), want, rtol=1e-4, atol=1e-4)
    details = [row["detail"] for row in view.rows if "winograd" in row["name"]]
    assert len(details) == 2 and all("one module with fused_" in d for d in details)


def test_the_largest_modules_are_compiled_first(small_phases, monkeypatch):
    """compile_ahead hands the helpers the longest compiles first (by their loop IR); a shared
    module is one job, its LLVM time split among its kernels."""
    from relaybench.backends.llvm import jit
    seen = []

    def record(self, jobs, cache=True, stream=None):
        seen.extend(jobs)
        return {key: 1.0 for _, key, _ in jobs}
    monkeypatch.setattr(jit.JIT, "compile_ahead", record)
    plans = [KernelPlan(phased("order_a", 7.0, plus_transpose)),
             KernelPlan(phased("order_b", 7.0, times_c)),
             KernelPlan(L.PrimFunc("order_small", (L.Buffer("A", (4,), "float32"),),
                                   L.Store(L.Buffer("A", (4,), "float32"), (0,), 1.0)))]
    plans.insert(0, plans.pop())      # the small one first among the plans
    seconds = codegen.compile_ahead(plans)
    assert [name for _, _, name in seen] == ["order_a+order_b", "order_small"]
    assert [len(key) for _, key, _ in seen] == sorted((len(k) for _, k, _ in seen), reverse=True)
    assert seconds[plans[1].key_text] == seconds[plans[2].key_text] == 0.5
    assert seconds[plans[0].key_text] == 1.0
