"""The lowering cache (relaybench.backends.group_cache): a build whose kernels are cached skips
lowering, and its kernels compute what numpy and an uncached build compute."""

import json

import numpy as np
import pytest

import relaybench as rb
from relaybench import config, op
from relaybench.backends.group_cache import get_group_cache, group_key
from relaybench.backends.target import Target
from relaybench.ir.structural import structural_hash


def conv_net(weight, bias, floor=0.0):
    x = rb.var("x", shape=(1, 4, 10, 10))
    y = op.nn.conv2d(x, rb.const(weight), padding=1)
    y = op.maximum(op.nn.bias_add(y, rb.const(bias)), rb.const(np.float32(floor)))
    return rb.IRModule.from_expr(rb.Function([x], op.nn.dense(op.reshape(y, newshape=(1, -1)),
                                                              rb.const(np.ones((3, 800), "float32")))))


def numpy_net(x, weight, bias, floor=0.0):
    n, c, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, weight.shape[0], h, w), "float64")
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", padded[:, :, i:i + h, j:j + w], weight[:, :, i, j])
    y = np.maximum(out + bias[None, :, None, None], floor)
    return y.reshape(1, -1) @ np.ones((3, 800)).T


@pytest.fixture
def cache_dir(tmp_path):
    """An empty RB_CACHE_DIR and a lowering cache with nothing in memory."""
    get_group_cache().forget()
    with config.Context(RB_CACHE_DIR=tmp_path):
        yield tmp_path
    get_group_cache().forget()


def weights(seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((8, 4, 3, 3)).astype("float32"),
            rng.standard_normal(8).astype("float32"))


def test_a_cached_build_skips_lowering_and_agrees_with_numpy(cache_dir):
    w, b = weights(0)
    first = rb.build(conv_net(w, b))
    assert first.compile_stats.lowerings_cached == 0
    assert len(list((cache_dir / "groups").glob("*.json"))) == first.compile_stats.kernels
    get_group_cache().forget()        # the manifests from disk, as in a new process
    second = rb.build(conv_net(w, b))
    stats = second.compile_stats
    assert stats.lowerings_cached == stats.kernels and stats.llvm_compiled == 0
    x = np.random.default_rng(1).standard_normal((1, 4, 10, 10)).astype("float32")
    np.testing.assert_allclose(second.run(x=x), numpy_net(x, w, b), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(second.run(x=x), first.run(x=x), rtol=0, atol=0)
    # the loop IR is lowered again on demand, the same text as the uncached build's
    for old, new in zip(first.kernels, second.kernels):
        assert new.source("loops") == old.source("loops")
        assert (new.rule, new.pattern, new.flops, new.ops) == (old.rule, old.pattern, old.flops,
                                                               old.ops)


def test_other_weights_of_the_same_shapes_share_the_lowering(cache_dir):
    w0, b0 = weights(0)
    w1, b1 = weights(5)
    rb.build(conv_net(w0, b0))
    lib = rb.build(conv_net(w1, b1))
    assert lib.compile_stats.lowerings_cached == lib.compile_stats.kernels
    x = np.random.default_rng(2).standard_normal((1, 4, 10, 10)).astype("float32")
    np.testing.assert_allclose(lib.run(x=x), numpy_net(x, w1, b1), rtol=1e-4, atol=1e-3)


def test_a_scalar_constant_counts_by_value(cache_dir):
    w, b = weights(0)
    rb.build(conv_net(w, b, floor=0.0))
    lib = rb.build(conv_net(w, b, floor=0.5))   # the scalar is written into the kernel's code
    assert lib.compile_stats.lowerings_cached < lib.compile_stats.kernels
    x = np.random.default_rng(3).standard_normal((1, 4, 10, 10)).astype("float32")
    np.testing.assert_allclose(lib.run(x=x), numpy_net(x, w, b, 0.5), rtol=1e-4, atol=1e-3)


def test_the_structural_hash_without_constant_data():
    a = rb.const(np.zeros((2, 3), "float32"))
    b = rb.const(np.ones((2, 3), "float32"))
    c = rb.const(np.ones((3, 2), "float32"))
    assert structural_hash(a) != structural_hash(b)
    assert structural_hash(a, constant_data=False) == structural_hash(b, constant_data=False)
    assert structural_hash(b, constant_data=False) != structural_hash(c, constant_data=False)
    assert structural_hash(rb.const(1.0), constant_data=False) != \
        structural_hash(rb.const(2.0), constant_data=False)


def group_of(mod):
    fused = rb.passes.optimize(mod, opt_level=3, config={"relay.target": "llvm"})
    from relaybench.ir.expr import Call, Function
    from relaybench.ir.functor import post_order
    return next(n.op for n in post_order(fused["main"].body)
                if isinstance(n, Call) and isinstance(n.op, Function))


def test_the_key_follows_knobs_target_and_registrations():
    w, b = weights(0)
    group = group_of(conv_net(w, b))
    llvm = Target.parse("llvm")
    key = group_key(group, "g", llvm)
    assert key is not None and key == group_key(group, "g", llvm)
    assert group_key(group, "g2", llvm) != key
    with config.Context(RB_WINOGRAD="off"):
        assert group_key(group, "g", llvm) != key
    with config.Context(RB_LOWERING_CACHE="off"):
        assert group_key(group, "g", llvm) is None
    assert group_key(group, "g", Target.parse("opencl")) is None
    with rb.autotune.ApplyConfig({}):
        assert group_key(group, "g", llvm) is None       # inside a tuning context: no cache
    from relaybench.op.registry import attr_scope, register_compute
    with attr_scope():
        register_compute("nn.relu", lambda inputs, attrs, out: inputs[0], level=11)
        assert group_key(group, "g", llvm) is None       # a user's compute: no cache
    assert group_key(group, "g", llvm) == key


def test_a_damaged_manifest_is_discarded(cache_dir):
    w, b = weights(0)
    rb.build(conv_net(w, b))
    for path in (cache_dir / "groups").glob("*.json"):
        path.write_text("{not json")
    get_group_cache().forget()
    lib = rb.build(conv_net(w, b))
    assert lib.compile_stats.lowerings_cached == 0
    assert get_group_cache().stats["damaged"] >= lib.compile_stats.kernels
    manifest = json.loads(next((cache_dir / "groups").glob("*.json")).read_text())
    assert manifest["format"] == 1 and manifest["kernel"]["digest"]
    x = np.random.default_rng(4).standard_normal((1, 4, 10, 10)).astype("float32")
    np.testing.assert_allclose(lib.run(x=x), numpy_net(x, w, b), rtol=1e-4, atol=1e-3)


def test_missing_object_code_lowers_again(cache_dir):
    w, b = weights(0)
    rb.build(conv_net(w, b))
    from relaybench.backends.llvm.jit import get_jit
    jit = get_jit()
    for path in (cache_dir / "llvm").glob("*"):
        path.unlink()
    jit._loaded.clear()
    jit._recent.clear()
    lib = rb.build(conv_net(w, b))
    assert lib.compile_stats.lowerings_cached == 0 and lib.compile_stats.llvm_compiled > 0
    x = np.random.default_rng(5).standard_normal((1, 4, 10, 10)).astype("float32")
    np.testing.assert_allclose(lib.run(x=x), numpy_net(x, w, b), rtol=1e-4, atol=1e-3)


def test_a_manifest_that_does_not_match_the_group_is_not_used(cache_dir):
    w, b = weights(0)
    rb.build(conv_net(w, b))
    for path in (cache_dir / "groups").glob("*.json"):
        manifest = json.loads(path.read_text())
        for param in manifest["kernel"]["params"]:
            param[1] = [d + 1 for d in param[1]]      # every shape off by one
        path.write_text(json.dumps(manifest))
    get_group_cache().forget()
    lib = rb.build(conv_net(w, b))
    assert lib.compile_stats.lowerings_cached == 0
    x = np.random.default_rng(6).standard_normal((1, 4, 10, 10)).astype("float32")
    np.testing.assert_allclose(lib.run(x=x), numpy_net(x, w, b), rtol=1e-4, atol=1e-3)
