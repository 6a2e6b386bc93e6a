"""The build cache (relaybench.backends.build_cache): a second build of the same program, its
parameters and settings skips the passes, maps its weights from the cache's file, and computes
what numpy and the interpreter compute; any change to what the passes see misses."""

import os

import numpy as np
import pytest

import relaybench as rb
from relaybench import config, op
from relaybench.backends.build_cache import BuildCache, build_key, get_build_cache
from relaybench.backends.group_cache import get_group_cache
from relaybench.backends.target import Target
from relaybench.passes.instruments import PassTimer

from test_group_cache import cache_dir  # noqa: F401  (an empty RB_CACHE_DIR, a fixture)


def net():
    """conv2d (3x3, padding 1) + bias + relu, then dense: a module whose weights are params."""
    x = rb.var("x", shape=(1, 4, 10, 10))
    w = rb.var("w", shape=(16, 4, 3, 3))
    b = rb.var("b", shape=(16,))
    d = rb.var("d", shape=(3, 1600))
    y = op.nn.relu(op.nn.bias_add(op.nn.conv2d(x, w, padding=1), b))
    return rb.IRModule.from_expr(rb.Function([x, w, b, d],
                                             op.nn.dense(op.reshape(y, newshape=(1, -1)), d)))


def params(seed):
    rng = np.random.default_rng(seed)
    return {"w": rng.standard_normal((16, 4, 3, 3)).astype("float32"),
            "b": rng.standard_normal(16).astype("float32"),
            "d": rng.standard_normal((3, 1600)).astype("float32")}


def numpy_net(x, p):
    h, w = x.shape[2:]
    padded = np.pad(x.astype("float64"), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, 16, h, w))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", padded[:, :, i:i + h, j:j + w], p["w"][:, :, i, j])
    y = np.maximum(out + p["b"][None, :, None, None], 0)
    return y.reshape(1, -1) @ p["d"].T.astype("float64")


X = np.random.default_rng(7).standard_normal((1, 4, 10, 10)).astype("float32")


def test_a_second_build_skips_the_passes_and_agrees_with_numpy(cache_dir):
    p = params(0)
    first = rb.build(net(), params=p)
    assert not first.compile_stats.optimize_cached
    assert len(list((cache_dir / "builds").glob("*.rbbuild"))) == 1
    second = rb.build(net(), params=p)
    assert second.compile_stats.optimize_cached
    assert "passes from the build cache" in repr(second.compile_stats)
    assert rb.ir.structural_equal(second.mod, first.mod)
    np.testing.assert_allclose(second.run(x=X), numpy_net(X, p), rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(second.run(x=X), first.run(x=X))
    # the weights are the file's pages, read-only, not copies
    from relaybench.ir.expr import Constant
    from relaybench.ir.functor import post_order
    big = [n.data for n in post_order(second.mod["main"])
           if isinstance(n, Constant) and n.data.size > 100]
    assert big and all(not a.flags.writeable and a.base is not None for a in big)


def test_the_interpreter_agrees_with_a_cached_build(cache_dir):
    p = params(1)
    rb.build(net(), params=p)
    lib = rb.build(net(), params=p)
    assert lib.compile_stats.optimize_cached
    want = rb.create_executor("interpreter", mod=net()).evaluate()(X, p["w"], p["b"], p["d"])
    np.testing.assert_allclose(lib.run(x=X), np.asarray(want), rtol=1e-4, atol=1e-4)


def test_a_changed_weight_misses_and_is_computed_afresh(cache_dir):
    p = params(2)
    rb.build(net(), params=p)
    q = {k: v.copy() for k, v in p.items()}
    q["w"][3, 1, 2, 0] += 1.0        # one element of one parameter
    lib = rb.build(net(), params=q)
    assert not lib.compile_stats.optimize_cached
    np.testing.assert_allclose(lib.run(x=X), numpy_net(X, q), rtol=1e-4, atol=1e-3)
    # the same for a constant in the program itself
    x = rb.var("x", shape=(4,))
    one = rb.build(rb.Function([x], x * rb.const(np.arange(4, dtype="float32"))))
    two = rb.build(rb.Function([x], x * rb.const(np.arange(1, 5, dtype="float32"))))
    assert not two.compile_stats.optimize_cached
    ones = np.ones(4, "float32")
    np.testing.assert_array_equal(one.run(x=ones), [0, 1, 2, 3])
    np.testing.assert_array_equal(two.run(x=ones), [1, 2, 3, 4])


def test_the_settings_are_in_the_key():
    mod, p = net(), params(3)
    llvm = Target.parse("llvm")
    base = build_key(mod, p, llvm, 3, (), (), {})
    assert base == build_key(net(), {k: v.copy() for k, v in p.items()}, llvm, 3, (), (), {})
    others = [build_key(mod, p, llvm, 2, (), (), {}),
              build_key(mod, p, llvm, 3, (), ("FoldConstant",), {}),
              build_key(mod, p, llvm, 3, ("FoldConstant",), (), {}),
              build_key(mod, p, llvm, 3, (), (), {"relay.FuseOps.max_depth": 4}),
              build_key(mod, p, Target.parse("llvm -num-threads=1"), 3, (), (), {}),
              build_key(mod, dict(p, b=p["b"][::-1].copy()), llvm, 3, (), (), {})]
    with config.Context(RB_WINOGRAD="off"):
        others.append(build_key(mod, p, llvm, 3, (), (), {}))
    assert len({base, *others}) == len(others) + 1


def test_it_steps_aside_to_let_the_passes_be_watched(cache_dir):
    p = params(4)
    rb.build(net(), params=p)
    timer = PassTimer()
    lib = rb.build(net(), params=p, instruments=[timer])
    assert not lib.compile_stats.optimize_cached
    assert any(r.name == "FoldConstant" for r in timer.records)
    with config.Context(RB_BUILD_CACHE="off"):
        assert not rb.build(net(), params=p).compile_stats.optimize_cached
        assert build_key(net(), p, Target.parse("llvm"), 3, (), (), {}) is None
    # a configuration value that is not plain data has no stable key
    assert build_key(net(), p, Target.parse("llvm"), 3, (), (), {"x": object()}) is None


def test_a_damaged_entry_is_removed_and_rebuilt(cache_dir):
    p = params(5)
    rb.build(net(), params=p)
    (entry,) = (cache_dir / "builds").glob("*.rbbuild")
    data = entry.read_bytes()
    entry.write_bytes(data[: len(data) // 2])
    cache = get_build_cache()
    damaged = cache.stats["damaged"]
    lib = rb.build(net(), params=p)
    assert not lib.compile_stats.optimize_cached
    assert cache.stats["damaged"] == damaged + 1 and "bytes" in cache.last_damage
    np.testing.assert_allclose(lib.run(x=X), numpy_net(X, p), rtol=1e-4, atol=1e-3)
    assert rb.build(net(), params=p).compile_stats.optimize_cached     # stored again


def test_a_text_that_does_not_read_back_is_not_kept(tmp_path, monkeypatch):
    mod = rb.passes.optimize(net(), 3)
    other = rb.passes.optimize(rb.IRModule.from_expr(
        rb.Function([rb.var("x", shape=(2,))], rb.const(np.zeros(2, "float32")))), 3)
    from relaybench.ir import printer
    real = printer.module_text_and_constants
    monkeypatch.setattr(printer, "module_text_and_constants", lambda m: real(other))
    assert BuildCache(tmp_path).store("k" * 64, mod) is False
    assert not list(tmp_path.rglob("*.rbbuild"))


def test_the_folder_keeps_its_size(tmp_path):
    cache = BuildCache(tmp_path)
    mods = []
    for k in range(4):
        x = rb.var("x", shape=(1 << 16,))
        mods.append(rb.IRModule.from_expr(
            rb.Function([x], x + rb.const(np.full(1 << 16, k, "float32")))))   # 256 KiB each
    with config.Context(RB_BUILD_CACHE_MB=1):
        for k, m in enumerate(mods[:3]):
            assert cache.store(f"{k}" * 64, m)
            os.utime(cache.path(f"{k}" * 64), (1e9 + k, 1e9 + k))   # stored in this order
        files = sorted(p.name[0] for p in (tmp_path / "builds").glob("*.rbbuild"))
        assert files == ["0", "1", "2"]
        assert cache.load("0" * 64) is not None      # used: now the most recent
        big = rb.var("x", shape=(1 << 17,))
        assert not cache.store("9" * 64, rb.IRModule.from_expr(
            rb.Function([big], big + rb.const(np.ones(1 << 17, "float32")))))  # over a quarter
        assert cache.store("3" * 64, mods[3])
        files = sorted(p.name[0] for p in (tmp_path / "builds").glob("*.rbbuild"))
    assert files == ["0", "2", "3"]
    got = cache.load("3" * 64)
    np.testing.assert_array_equal(got["main"].body.args[1].data, np.full(1 << 16, 3, "float32"))



def test_a_cached_module_keeps_the_source_positions(cache_dir):
    """Errors name the user's text (prog.rly:line:column), not the cache's: the positions travel
    beside the text and are put back on the nodes."""
    from relaybench.backends.interpreter import ConstructorValue
    from relaybench.errors import ExecutionError
    text = """#[version = "0.0.5"]
type Option[A] { Some(A), None }
def @main(%o: Option[int32]) -> int32 {
  match (%o) {
    Some(%v) => add(%v, %v),
  }
}
"""
    hits = get_build_cache().stats["hits"]
    for _ in range(2):
        mod = rb.parse(text, "prog.rly")
        vm = rb.vm.VirtualMachine(rb.vm.compile(mod))
        assert vm.run(ConstructorValue(mod.get_constructor("Some"), (np.int32(4),))) == 8
        with pytest.raises(ExecutionError, match=r"no clause of the match at prog\.rly:4:3"):
            vm.run(ConstructorValue(mod.get_constructor("None"), ()))
    assert get_build_cache().stats["hits"] == hits + 1


def test_a_module_whose_names_would_change_is_not_kept(tmp_path):
    """Two lets of one name print as %t and %t1: read back, a name would differ, so the module
    is not kept (a graph's inputs are named by their variables)."""
    from relaybench.ir.expr import Let
    x = rb.var("x", shape=(2,))
    a, b = rb.var("t", shape=(2,)), rb.var("t", shape=(2,))
    body = Let(a, op.add(x, x), Let(b, op.multiply(a, a), op.add(a, b)))
    mod = rb.passes.optimize(rb.IRModule.from_expr(rb.Function([x], body)), 0)
    assert BuildCache(tmp_path).store("t" * 64, mod) is False


def test_a_cache_folder_that_cannot_be_written_does_not_stop_a_build(tmp_path):
    """RB_CACHE_DIR a file, not a folder: no cache can read or keep anything, and the build
    still compiles and runs (every cache a miss)."""
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    get_group_cache().forget()
    with config.Context(RB_CACHE_DIR=blocked):
        cache = BuildCache()
        assert cache.store("b" * 64, rb.passes.optimize(net(), 0)) is False
        assert "Not a directory" in cache.last_write_error
        assert cache.load("b" * 64) is None
        x = rb.var("x", shape=(3,))
        lib = rb.build(rb.Function([x], x * rb.const(np.full(3, 2.0, "float32"))))
        assert not lib.compile_stats.optimize_cached
        np.testing.assert_array_equal(lib.run(x=np.ones(3, "float32")), [2, 2, 2])
    get_group_cache().forget()


def test_passes_named_by_a_generator_are_disabled_on_a_miss_too(cache_dir):
    """The key reads the pass names and so does the pipeline: a generator is read once."""
    x = rb.var("x", shape=(4,))
    mod = rb.IRModule.from_expr(rb.Function([x], op.add(x, op.add(rb.const(np.ones(4, "float32")),
                                                                  rb.const(np.ones(4, "float32"))))))
    lib = rb.build(mod, disabled_pass=(name for name in ["FoldConstant"]))
    from relaybench.ir.expr import Call
    from relaybench.ir.functor import post_order
    adds = [n for n in post_order(lib.mod["main"]) if isinstance(n, Call)
            and getattr(n.op, "name", None) == "add"]
    assert len(adds) == 2          # 1 + 1 was not folded
    np.testing.assert_array_equal(lib.run(x=np.zeros(4, "float32")), [2, 2, 2, 2])


def test_a_users_pass_under_a_default_name_steps_aside(monkeypatch):
    from relaybench.passes import infra
    rb.passes.FoldConstant                       # the package's passes registered
    mine = infra._Entry("FoldConstant", "fold-constant", 2, (), "a user's",
                        lambda **options: rb.passes.FoldConstant())
    mine.factory.__module__ = "my_notebook"
    monkeypatch.setitem(infra._REGISTRY, "FoldConstant", mine)
    assert build_key(net(), params(0), Target.parse("llvm"), 3, (), (), {}) is None
    monkeypatch.undo()
    assert build_key(net(), params(0), Target.parse("llvm"), 3, (), (), {}) is not None


def test_a_program_of_many_nodes_is_not_kept(monkeypatch):
    """Reading a very large program's text back costs about what its passes do: above
    MAX_NODES (counted only up to the limit) the cache steps aside."""
    from relaybench.backends import build_cache
    from relaybench.ir.functor import post_order
    mod = net()
    nodes = len(post_order(mod["main"]))
    monkeypatch.setattr(build_cache, "MAX_NODES", nodes)
    assert build_key(mod, params(0), Target.parse("llvm"), 3, (), (), {}) is not None
    monkeypatch.setattr(build_cache, "MAX_NODES", nodes - 1)
    assert build_key(mod, params(0), Target.parse("llvm"), 3, (), (), {}) is None


def test_a_new_entry_is_written_behind_the_build_and_is_there_when_it_returns(cache_dir,
                                                                              monkeypatch):
    """The entry's file (the weights, 160 MB for ResNet-18) is written by a thread of its own
    while the kernels compile, under the caller's settings; rb.build returns once it is on
    disk, and the next build finds it."""
    import threading
    import time
    writers = []
    write = BuildCache.write

    def slow_write(self, key, data):
        writers.append(threading.current_thread() is threading.main_thread())
        time.sleep(0.2)
        return write(self, key, data)
    monkeypatch.setattr(BuildCache, "write", slow_write)
    p = params(4)
    lib = rb.build(net(), params=p)
    assert writers == [False]                               # not in the build's thread
    assert len(list((cache_dir / "builds").glob("*.rbbuild"))) == 1
    again = rb.build(net(), params=p)
    assert again.compile_stats.optimize_cached
    np.testing.assert_allclose(again.run(x=X), numpy_net(X, p), rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(again.run(x=X), lib.run(x=X))
    # a store in the background keeps to the folder of the caller's config.Context; a load
    # waits for it
    elsewhere = cache_dir / "elsewhere"
    with config.Context(RB_CACHE_DIR=elsewhere):
        cache = BuildCache()
        assert cache.store("e" * 64, rb.passes.optimize(net(), 0), background=True)
        found = cache.load("e" * 64)
    assert found is not None and (elsewhere / "builds" / ("e" * 64 + ".rbbuild")).exists()
    assert rb.ir.structural_equal(found, rb.passes.optimize(net(), 0))


def test_a_cached_build_in_a_new_process_loads_neither_the_passes_nor_the_tuning_records(
        tmp_path):
    """A build that finds its entry (and its kernels) runs no pass, so a new process building
    it imports neither the pass infrastructure nor the tuning records and their spaces (about a
    tenth of a cached build's time, in imports); its answer against numpy."""
    import json
    import subprocess
    import sys
    child = """
import json, sys
import numpy as np
import relaybench as rb
from relaybench import op
rng = np.random.default_rng(6)
w = rng.standard_normal((24, 40)).astype("float32")
b = rng.standard_normal(24).astype("float32")
x = rng.standard_normal((2, 40)).astype("float32")
vw, vb, vx = rb.var("w", shape=(24, 40)), rb.var("b", shape=(24,)), rb.var("x", shape=(2, 40))
mod = rb.IRModule.from_expr(rb.Function([vx, vw, vb], op.nn.relu(op.nn.bias_add(
    op.nn.dense(vx, vw), vb))))
lib = rb.build(mod, params={"w": w, "b": b})
err = float(np.abs(np.asarray(lib.run(x=x)) - np.maximum(x @ w.T + b, 0)).max())
print(json.dumps([lib.compile_stats.optimize_cached, err,
                  [m for m in ("relaybench.passes.infra", "relaybench.passes.pipelines",
                               "relaybench.autotune.record", "relaybench.autotune.space")
                   if m in sys.modules]]))
"""
    env = dict(os.environ, RB_CACHE_DIR=str(tmp_path))
    runs = [json.loads(subprocess.run([sys.executable, "-c", child], env=env, check=True,
                                      capture_output=True, text=True).stdout.splitlines()[-1])
            for _ in range(2)]
    (first_cached, first_err, first_loaded), (cached, err, loaded) = runs
    assert not first_cached and cached and loaded == []
    assert "relaybench.passes.infra" in first_loaded     # the first build ran the passes
    assert first_err < 1e-4 and err < 1e-4
