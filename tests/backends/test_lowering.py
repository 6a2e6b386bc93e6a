"""Lowering fused groups with the x86 strategy: each rule's loop structure, and the compiled
kernel's result against the reference interpreter running the same group (or numpy)."""

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.backends.lowering import anchor_flops, lower_primitive
from relaybench.backends.target import Target
from relaybench.errors import CompileError
from relaybench.ir.expr import Call, Function
from relaybench.ir.functor import post_order
from relaybench.passes.bind_params import bind_params

pytest.importorskip("llvmlite")
from relaybench.backends.llvm import build_kernel  # noqa: E402


def _groups(mod, params=None, opt_level=3):
    if params:
        mod = bind_params(mod, params)
    fused = rb.passes.optimize(mod, opt_level=opt_level)
    found, seen = [], set()
    for node in post_order(fused["main"].body):
        if isinstance(node, Call) and isinstance(node.op, Function) and node.op not in seen:
            seen.add(node.op)
            found.append(node.op)
    return found


def _group_with(groups, op_name):
    for g in groups:
        names = [n.op.name for n in post_order(g.body) if isinstance(n, Call)
                 and hasattr(n.op, "name")]
        if op_name in names:
            return g
    raise AssertionError(f"no group with {op_name}")


def _run_both(group, seed=0):
    lowered = lower_primitive(group)
    kernel = build_kernel(lowered.prim_func)
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal([int(d) for d in t.shape]).astype(t.dtype)
              for t in lowered.input_types]
    outputs = [np.empty([int(d) for d in t.shape], t.dtype) for t in lowered.output_types]
    kernel(*inputs, *lowered.constants, *outputs)
    mod = rb.IRModule.from_expr(Function(group.params, group.body))
    ref = rb.create_executor("interpreter", mod=mod).evaluate()(*inputs)
    refs = list(ref) if isinstance(ref, (list, tuple)) else [ref]
    for got, want in zip(outputs, refs):
        want = np.asarray(want)
        scale = max(1.0, float(np.abs(want).max()))
        assert np.abs(got - want).max() <= 2e-5 * scale
    return lowered, kernel


def _conv_block(channels_in=16, channels_out=32, size=10, groups=1, bias=True, stride=1):
    rng = np.random.default_rng(1)
    x = rb.var("data", shape=(1, channels_in, size, size))
    w = rb.var("w", shape=(channels_out, channels_in // groups, 3, 3))
    y = op.nn.conv2d(x, w, padding=(1, 1), strides=(stride, stride), groups=groups,
                     channels=channels_out, kernel_size=(3, 3))
    params = {"w": rng.standard_normal((channels_out, channels_in // groups, 3, 3))
              .astype("float32")}
    args = [x, w]
    if bias:
        b = rb.var("b", shape=(channels_out,))
        y = op.nn.relu(op.nn.bias_add(y, b))
        params["b"] = rng.standard_normal(channels_out).astype("float32")
        args.append(b)
    return rb.IRModule.from_expr(rb.Function(args, y)), params


@pytest.fixture
def wide_host(monkeypatch):
    """The register tiles of a host with AVX-512 (32 vector registers), whatever this one has."""
    from relaybench.backends.strategy import x86
    monkeypatch.setattr(x86, "narrow_host", lambda: False)
    return x86


def test_conv2d_nchwc_register_tile(wide_host):
    mod, params = _conv_block()
    group = _group_with(_groups(mod, params), "nn.conv2d")
    lowered, kernel = _run_both(group)
    assert lowered.rule == "conv2d_NCHWc" and lowered.anchor == "nn.conv2d"
    text = lowered.source()
    # the accumulator tile (10 columns x 16 lanes) lives inside the row loop, filled by the
    # unrolled width tile with the lanes vectorized; the padded input is computed first
    assert "allocate((1, 1, 1, 10, 16)" in text
    assert "unrolled(10)" in text and "vectorized(16)" in text and "parallel(" in text
    assert text.index("pad = allocate((1, 1, 12, 12, 16)") < text.index("conv2d_NCHWc = allocate")
    # rows of 5 columns take two output-channel blocks per tile
    mod, params = _conv_block(channels_in=16, channels_out=64, size=5)
    narrow, _ = _run_both(_group_with(_groups(mod, params), "nn.conv2d"))
    assert "allocate((1, 2, 1, 5, 16)" in narrow.source()
    assert lowered.flops == 2 * 32 * 10 * 10 * 16 * 9
    assert "zmm" in kernel.source("asm") or "ymm" in kernel.source("asm")


def test_register_tiles_of_a_host_without_avx512(monkeypatch):
    """16 vector registers: 2 columns x 2 output-channel blocks (a larger tile would spill its
    accumulators) where the convolution sums few products per output value (8 channels x 3 x
    3), 6 pixels of the image's plane (across its rows) where it sums more (16 x 3 x 3); for a
    depthwise convolution up to 7 columns of 8 lanes (half a block)."""
    from relaybench.backends.strategy import x86
    monkeypatch.setattr(x86, "narrow_host", lambda: True)
    monkeypatch.setenv("RB_AUTOTUNE_LOG", "none")
    mod, params = _conv_block(channels_in=8)
    lowered, _ = _run_both(_group_with(_groups(mod, params), "nn.conv2d"))
    assert "allocate((1, 2, 1, 2, 16)" in lowered.source()
    mod, params = _conv_block()
    lowered, _ = _run_both(_group_with(_groups(mod, params), "nn.conv2d"))
    # 100 pixels: 16 tiles of 6, the last one of 4
    assert "allocate((1, 1, 1, 6, 16)" in lowered.source()
    assert lowered.rule == "conv2d_NCHWc_tail"
    mod, params = _conv_block(channels_in=32, channels_out=32, groups=32, size=12)
    lowered, _ = _run_both(_group_with(_groups(mod, params), "nn.conv2d"))
    assert "depthwise_conv2d_NCHWc = allocate((1, 1, 1, 6, 8)" in lowered.source()


def test_conv2d_without_epilogue_uses_a_cache_stage(wide_host):
    mod, params = _conv_block(bias=False, stride=2)
    group = _group_with(_groups(mod, params), "nn.conv2d")
    lowered, _ = _run_both(group)
    assert lowered.rule == "conv2d_NCHWc"
    assert "_local = allocate(" in lowered.source()


def test_depthwise_conv2d_nchwc(wide_host):
    mod, params = _conv_block(channels_in=32, channels_out=32, groups=32)
    group = _group_with(_groups(mod, params), "nn.conv2d")
    lowered, _ = _run_both(group)
    assert lowered.rule == "depthwise_conv2d_NCHWc"
    assert "depthwise_conv2d_NCHWc = allocate((1, 1, 1, 10, 16)" in lowered.source()


@pytest.mark.parametrize("parallel", ["oc_row", "oc"])
@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_conv2d_reads_its_input_without_a_padded_copy(wide_host, stride, parallel):
    """The padding is read in place: no padded copy of the input. The interior rows (a loop
    cut where the guards turn, or, when the rows share the parallel loop with the channel
    blocks, an ``if`` on the row) and the interior tiles read the input with no guard at all;
    the edges keep theirs. 30 columns: three tiles of 10 (stride 1), three of 5 (stride 2)."""
    mod, params = _conv_block(channels_in=32, channels_out=32, groups=32, size=30,
                              stride=stride)
    group = _group_with(_groups(mod, params), "nn.conv2d")
    with rb.autotune.ApplyConfig({"depthwise_conv2d_NCHWc": {"parallel": parallel}}):
        lowered, _ = _run_both(group)
    text = lowered.source()
    assert "pad = allocate" not in text and "select(" in text
    if parallel == "oc":
        assert f"serial(1, {30 // stride - 1})" in text or f"serial(1, {30 // stride})" in text
    else:
        assert f"_in <= {30 // stride - 2}:" in text or f"_in <= {30 // stride - 1}:" in text
    tiles = [t[:t.index("for i3_inner")] for t in text.split("= allocate((1, 1, 1, ")[1:]]
    assert any("select(" not in t and "max(" not in t and "min(" not in t for t in tiles)
    assert any("select(" in t for t in tiles)


def test_conv2d_nchw_at_opt_level_0():
    mod, params = _conv_block(channels_in=3, channels_out=4, size=6)
    group = _group_with(_groups(mod, params, opt_level=0), "nn.conv2d")
    lowered, _ = _run_both(group)
    assert lowered.rule == "conv2d_NCHW"
    # 4 output channels x 6 columns (in vector lanes) accumulated per row
    assert "conv2d_local = allocate((1, 4, 1, 6)" in lowered.source()
    for kw in [dict(channels_in=32, channels_out=32, size=10, groups=32, stride=2, bias=False),
               dict(channels_in=8, channels_out=12, size=7, bias=False)]:
        mod, params = _conv_block(**kw)
        lowered, _ = _run_both(_group_with(_groups(mod, params, opt_level=0), "nn.conv2d"))
        assert lowered.rule == "conv2d_NCHW"


def test_dense_partial_sums_against_numpy():
    rng = np.random.default_rng(2)
    x = rb.var("x", shape=(2, 64))
    w = rb.var("w", shape=(24, 64))
    b = rb.var("b", shape=(24,))
    mod = rb.IRModule.from_expr(rb.Function([x, w, b], op.nn.bias_add(op.nn.dense(x, w), b)))
    wv = rng.standard_normal((24, 64)).astype("float32")
    bv = rng.standard_normal(24).astype("float32")
    group = _group_with(_groups(mod, {"w": wv, "b": bv}), "nn.dense")
    lowered = lower_primitive(group)
    assert lowered.rule == "dense"
    assert "dense_partial = allocate((1, 1, 16)" in lowered.source()
    kernel = build_kernel(lowered.prim_func)
    xv = rng.standard_normal((2, 64)).astype("float32")
    out = np.empty((2, 24), "float32")
    # the weights and bias are constants of main, passed as the group's parameters
    named = {tuple(t.shape): v for t, v in zip(lowered.input_types[1:], [wv, bv])}
    args = [xv] + [named[tuple(t.shape)] for t in lowered.input_types[1:]] + list(
        lowered.constants)
    kernel(*args, out)
    np.testing.assert_allclose(out, xv @ wv.T + bv, rtol=1e-5, atol=1e-5)


def test_max_pool_accumulates_in_registers():
    x = rb.var("x", shape=(1, 2, 9, 9, 16))
    y = op.nn.max_pool2d(x, pool_size=(3, 3), strides=(2, 2), padding=(1, 1), layout="NCHW16c")
    group = _groups(rb.IRModule.from_expr(rb.Function([x], y)))[0]
    lowered, _ = _run_both(group)
    assert lowered.rule == "reduce_tiled"
    assert "max_pool2d_local = allocate((1, 1, 1, 1, 16)" in lowered.source()


def test_softmax_and_mean():
    x = rb.var("x", shape=(3, 40))
    mod = rb.IRModule.from_expr(rb.Function([x], op.nn.softmax(x)))
    lowered, _ = _run_both(_groups(mod)[0])
    assert lowered.rule == "reduce"
    mod = rb.IRModule.from_expr(rb.Function([x], op.mean(x, axis=1)))
    _run_both(_groups(mod)[0])


def test_injective_group_is_flattened_and_vectorized():
    x = rb.var("x", shape=(4, 64, 128))
    y = op.nn.relu(op.transpose(x, axes=(0, 2, 1)) * rb.const(3.0))
    lowered, _ = _run_both(_groups(rb.IRModule.from_expr(rb.Function([x], y)))[0])
    assert lowered.rule == "injective"
    assert "vectorized(16)" in lowered.source() and "parallel(" in lowered.source()


def test_tuple_results_constants_and_passthrough():
    x = rb.var("x", shape=(4, 6))
    parts = op.split(x + rb.const(np.arange(6, dtype="float32")), indices_or_sections=2, axis=1)
    mod = rb.IRModule.from_expr(rb.Function([x], rb.Tuple([parts[0], parts[1]])))
    for group in _groups(mod, opt_level=2):
        lowered, _ = _run_both(group)
    # a group that returns its parameter unchanged writes a copy
    y = rb.var("y", shape=(3,))
    f = Function([y], y, attrs={"Primitive": 1})
    with pytest.raises(CompileError, match="not type-checked"):
        lower_primitive(f)
    f = rb.passes.InferType()(rb.IRModule.from_expr(f))["main"]
    lowered = lower_primitive(f)
    kernel = build_kernel(lowered.prim_func)
    out = np.empty(3, "float32")
    kernel(np.array([1, 2, 3], "float32"), out)
    assert out.tolist() == [1.0, 2.0, 3.0]


def test_outputs_of_the_same_op_get_distinct_buffers():
    x = rb.var("x", shape=(2, 3))
    f = Function([x], rb.Tuple([op.nn.relu(x), op.nn.relu(x * rb.const(-1.0))]),
                 attrs={"Primitive": 1})
    f = rb.passes.InferType()(rb.IRModule.from_expr(f))["main"]
    lowered, _ = _run_both(f)
    assert [b.name for b in lowered.prim_func.params] == ["p0", "relu", "relu_1"]


def test_group_names_follow_tvm():
    mod, params = _conv_block()
    names = [lower_primitive(g).name for g in _groups(mod, params)]
    assert "fused_nn_conv2d_add_nn_relu" in names


def test_errors_name_the_place():
    n = rb.ir.SymVar("n") if hasattr(rb.ir, "SymVar") else None
    if n is not None:
        x = rb.var("x", shape=(n, 4))
        mod = rb.passes.InferType()(rb.IRModule.from_expr(rb.Function([x], op.nn.relu(x))))
        with pytest.raises(CompileError, match="not static"):
            lower_primitive(mod["main"])
    from relaybench.op.registry import get_opdef, list_ops
    missing = [name for name in list_ops() if get_opdef(name).compute is None
               and name in ("shape_of", "arange", "nn.dropout")]
    if missing and missing[0] == "shape_of":
        x = rb.var("x", shape=(2, 3))
        mod = rb.passes.InferType()(rb.IRModule.from_expr(rb.Function([x], op.shape_of(x))))
        with pytest.raises(CompileError, match="shape_of has no compute"):
            lower_primitive(mod["main"])


def test_anchor_flops_formula():
    mod, params = _conv_block(channels_in=8, channels_out=16, size=6, stride=2)
    fused = rb.passes.optimize(bind_params(mod, params), opt_level=0)
    conv = next(n for n in post_order(fused["main"]) if isinstance(n, Call)
                and getattr(n.op, "name", "") == "nn.conv2d")
    # 16 output channels x 3 x 3 outputs, each 8 x 3 x 3 multiply-adds
    assert anchor_flops(conv) == 2 * 16 * 3 * 3 * 8 * 9


def test_target_parse():
    assert Target.parse(None).kind == "llvm"
    assert Target.parse("llvm -num-threads=1").num_threads == 1
    with pytest.raises(CompileError, match="num-threads"):
        Target.parse("llvm -num-threads=x")
    with pytest.raises(CompileError, match="-key=value"):
        Target.parse("llvm mcpu")


# ---- groups whose anchor is unused, or read where no region can be inferred ------------------

def _primitive(params, body):
    """A Primitive function over ``params`` (type-checked), as FuseOps makes them."""
    f = Function(params, body, attrs={"Primitive": 1})
    return rb.passes.InferType()(rb.IRModule.from_expr(f))["main"]


def _rewrapped(group, epilogue):
    """``group`` with ``epilogue`` applied to its result, still one Primitive function."""
    return _primitive(group.params, epilogue(group.body))


@pytest.mark.parametrize("like", ["ones_like", "zeros_like", "full_like"])
def test_group_that_only_reads_the_anchors_shape(like):
    """``ones_like(nn.conv2d(...))`` fused at opt_level >= 1 used to take the convolution as the
    group's anchor, whose stage the outputs never read ("'conv2d' is not computed for these
    outputs"). The anchor is now chosen among the calls the outputs read."""
    make = {"ones_like": lambda y: op.ones_like(y), "zeros_like": lambda y: op.zeros_like(y),
            "full_like": lambda y: op.full_like(y, rb.const(3.0))}[like]
    fill = {"ones_like": 1.0, "zeros_like": 0.0, "full_like": 3.0}[like]
    for opt_level in (1, 3):
        mod, params = _conv_block(bias=False)
        conv = _group_with(_groups(mod, params, opt_level=opt_level), "nn.conv2d")
        lowered, kernel = _run_both(_rewrapped(conv, make))
        assert lowered.anchor != "nn.conv2d" and lowered.flops == 0
        assert "conv2d" not in lowered.source().split("\n", 1)[1]     # no stage computes it
        out = np.empty([int(d) for d in lowered.output_types[0].shape], "float32")
        kernel(*[np.zeros([int(d) for d in t.shape], t.dtype) for t in lowered.input_types],
               *lowered.constants, out)
        assert (out == fill).all()
    x, w = rb.var("x", shape=(4, 32)), rb.var("w", shape=(16, 32))
    p = rb.var("p", shape=(1, 2, 8, 8, 16))
    pool = op.nn.max_pool2d(p, pool_size=(2, 2), layout="NCHW16c")
    for params, body in [([x, w], make(op.nn.dense(x, w))),
                         ([p], make(pool)),
                         # a tuple whose live part is the epilogue of an unused reduction
                         ([x, w], rb.Tuple([make(op.nn.dense(x, w)), op.nn.relu(x)]))]:
        lowered, _ = _run_both(_primitive(params, body))
        assert lowered.anchor not in ("nn.dense", "nn.max_pool2d")


def _swap_hw(rank):
    axes = list(range(rank))
    axes[2], axes[3] = axes[3], axes[2]
    return axes


@pytest.mark.parametrize("opt_level,conv,rule", [
    (1, dict(), "conv2d_NCHW_at_root"),
    (3, dict(), "conv2d_NCHWc_at_root"),
    (3, dict(channels_in=16, channels_out=16, groups=16), "depthwise_conv2d_NCHWc_at_root"),
])
def test_epilogue_reading_the_anchor_transposed_computes_it_at_the_root(opt_level, conv, rule):
    """The tiled rules compute the convolution inside the epilogue's column tiles; an epilogue
    that reads it transposed as well (``y + transpose(y)``) has reads that move differently,
    so no tile region exists: the strategy schedules the group again with the convolution
    computed at the root, and the result agrees with the interpreter."""
    mod, params = _conv_block(bias=False, **conv)
    group = _group_with(_groups(mod, params, opt_level=opt_level), "nn.conv2d")
    rank = len(group.body.checked_type.shape)
    lowered, _ = _run_both(_rewrapped(
        group, lambda y: op.nn.relu(op.add(y, op.transpose(y, axes=_swap_hw(rank))))))
    assert lowered.rule == rule and lowered.anchor == "nn.conv2d"


def test_dense_and_pool_epilogues_reading_them_transposed():
    x, w = rb.var("x", shape=(16, 32)), rb.var("w", shape=(16, 32))
    y = op.nn.dense(x, w)
    lowered, _ = _run_both(_primitive([x, w], op.add(y, op.transpose(y))))
    assert lowered.rule == "dense_at_root"
    p = rb.var("p", shape=(1, 2, 8, 8, 16))
    pool = op.nn.max_pool2d(p, pool_size=(2, 2), layout="NCHW16c")
    lowered, _ = _run_both(_primitive([p], op.add(pool, op.transpose(pool, axes=_swap_hw(5)))))
    assert lowered.rule == "reduce"


def test_tile_of_one_after_conv2d_keeps_the_register_tile(wide_host):
    """``tile(nn.conv2d(...), reps=[1])`` reads the convolution at ``(c_outer * 8 + c_inner) % 32``
    (used to fail: "index ... is not affine"); over the loops' ranges that is affine, so the
    tiled rule still applies. (On a plane of 49 pixels in tiles of 6, a host without AVX-512,
    the last tile's pixels reach 53 in the loops' ranges, ``// 7 % 7`` stays, and the
    convolution is computed at the root.)"""
    for opt_level, rule in ((1, "conv2d_NCHW"), (3, "conv2d_NCHWc")):
        mod, params = _conv_block(bias=False, size=7)
        group = _group_with(_groups(mod, params, opt_level=opt_level), "nn.conv2d")
        rank = len(group.body.checked_type.shape)
        lowered, _ = _run_both(_rewrapped(group, lambda y: op.tile(y, reps=[1] * rank)))
        assert lowered.rule == rule
