"""``rb.build(mod, target="opencl")``: every anchor kind of the GPU strategy, integer and
elementwise operators, and models of the zoo against the reference interpreter; the device's
errors, the graph module's checks, the sources and the program cache."""

import numpy as np
import pytest

import relaybench as rb
from relaybench import config
from relaybench.backends.target import Target
from relaybench.errors import CompileError, ExecutionError


def _inputs(mod, seed=0, low=-2.0, high=2.0):
    from relaybench.passes import InferType
    main = InferType()(mod)["main"]
    rng = np.random.default_rng(seed)
    values = {}
    for p in main.params:
        t = p.checked_type
        shape = tuple(int(d) for d in t.shape)
        if t.dtype.startswith(("int", "uint")):
            values[p.name_hint] = rng.integers(-9, 10, shape).astype(t.dtype)
        else:
            values[p.name_hint] = rng.uniform(low, high, shape).astype(t.dtype)
    return values


def _reference(mod, values):
    main = mod["main"]
    return rb.create_executor("interpreter", mod=mod).evaluate()(
        *[values[p.name_hint] for p in main.params])


def _flat(value):
    return list(value) if isinstance(value, tuple) else [value]


def _check(mod, target, opt_level, values=None, rtol=1e-5, atol=1e-5):
    values = values if values is not None else _inputs(mod)
    expected = _reference(mod, values)
    lib = rb.build(mod, target=target, opt_level=opt_level)
    got = lib.run(**values)
    for e, g in zip(_flat(expected), _flat(got)):
        e = np.asarray(e)
        assert g.shape == e.shape and g.dtype == e.dtype
        if e.dtype.kind == "f":
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, e)
    return lib


ELEMENTWISE = rb.parse('''#[version = "0.0.5"]
def @main(%a: Tensor[(3, 5), int32], %b: Tensor[(3, 5), int32], %x: Tensor[(4, 7), float32],
          %y: Tensor[(7), float32], %s: Tensor[(3, 5), int32]) {
  %0 = add(%b, 10);
  (floor_divide(%a, %0), floor_mod(%a, %0), divide(%a, %0), mod(%a, %0),
   right_shift(%a, clip(%s, a_min=0, a_max=31)), multiply(%a, %b),
   cast(multiply(%x, 100f), dtype="int8"), cast(%x, dtype="uint8"),
   nn.relu(add(%x, %y)), sigmoid(%x), tanh(%x), clip(%x, a_min=-0.5, a_max=0.5),
   where(greater(%x, 0f), %x, negative(%x)), transpose(%x), exp(%y), sqrt(abs(%x)),
   round(multiply(%x, 2f)), maximum(%x, %y), greater_equal(%a, %b))
}''')


@pytest.mark.parametrize("opt_level", [0, 3])
def test_elementwise_and_integer_ops(target, opt_level):
    _check(ELEMENTWISE, target, opt_level)


REDUCTIONS = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(3, 10), float32], %z: Tensor[(2, 3, 4, 5), float32],
          %long: Tensor[(2, 1000), float32], %n: Tensor[(5, 300), int32],
          %p: Tensor[(2, 8, 14, 14), float32]) {
  (nn.softmax(%x), nn.log_softmax(%x), sum(%x, axis=[1]), max(%z, axis=[1, 3]),
   mean(%z, axis=[0, 2], keepdims=True), sum(%x), argmax(%x, axis=[1]), prod(%x, axis=[0]),
   nn.softmax(%long), min(%long, axis=[1]), sum(%n, axis=[1]), max(%n, axis=[1]),
   mean(%p, axis=[2, 3]), max(%p, axis=[1, 3]))
}''')


@pytest.mark.parametrize("opt_level", [0, 3])
def test_reductions_and_softmax(target, opt_level):
    """Short reductions one work item per output; over 1000 and 300 elements a tree in shared
    memory (256 work items per group, 1000 not a multiple of it), and over two axes taken as
    one: the 14 x 14 pixels of each channel (196 elements) and axes 1 and 3 (112, apart)."""
    lib = _check(REDUCTIONS, target, opt_level)
    rules = {k.name: k.rule for k in lib.kernels}
    assert [r for n, r in rules.items() if n.startswith("fused_nn_softmax")] == \
        ["reduce", "reduce_tree"]
    assert sum(r == "reduce_tree" for r in rules.values()) == 6


DENSE = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(9, 70), float32], %w: Tensor[(40, 70), float32], %b: Tensor[(40), float32],
          %v: Tensor[(5, 70), float32], %u: Tensor[(2, 3, 70), float32],
          %one: Tensor[(1, 70), float32], %row: Tensor[(1, 70), float32]) {
  (nn.relu(nn.bias_add(nn.dense(%x, %w), %b)), nn.dense(%x, %v), nn.dense(%u, %w),
   nn.batch_matmul(%u, %u, transpose_b=True), nn.dense(%one, %w),
   nn.relu(nn.bias_add(nn.dense(%row, %w), %b)))
}''')


def test_dense_shared_tiles_and_direct(target):
    """9 rows x 40 features x 70 inputs take the shared-memory tiles (a partial last tile of
    each); 5 features, or one row, a tree per output over the 70 inputs; a 3-D input and
    batch_matmul too."""
    lib = _check(DENSE, target, 3)
    rules = {k.name: k.rule for k in lib.kernels}
    assert rules["fused_nn_dense_add_nn_relu"] == "dense_shared"
    assert rules["fused_nn_dense"] == "reduce_tree"   # 5 features: a tree over 70 inputs
    assert list(rules.values()).count("reduce_tree") == 5
    # one row + bias + relu: the tree's first work item applies the epilogue, one launch
    tree = next(k for k in lib.kernels if k.rule == "reduce_tree" and "nn.relu" in k.ops)
    text = tree.source("opencl")
    assert text.count("__kernel void") == 1
    assert "if (get_local_id(0) == 0) relu[" in text
    shared = next(k for k in lib.kernels if k.rule == "dense_shared")
    text = shared.source("opencl")
    assert "__local float" in text and "barrier(CLK_LOCAL_MEM_FENCE);" in text


CONVOLUTIONS = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 4, 9, 9), float32], %w: Tensor[(8, 4, 3, 3), float32],
          %b: Tensor[(8), float32], %dw: Tensor[(4, 1, 3, 3), float32],
          %gw: Tensor[(6, 2, 3, 3), float32], %r: Tensor[(1, 8, 9, 9), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=8, kernel_size=[3, 3]);
  %1 = nn.relu(add(nn.bias_add(%0, %b), %r));
  (%1,
   nn.conv2d(%x, %w, strides=[2, 2], padding=[0, 1, 2, 1], dilation=[2, 1], channels=8,
             kernel_size=[3, 3]),
   nn.conv2d(%x, %dw, padding=[1, 1, 1, 1], groups=4, channels=4, kernel_size=[3, 3]),
   nn.conv2d(%x, %gw, padding=[1, 1, 1, 1], groups=2, channels=6, kernel_size=[3, 3]),
   nn.max_pool2d(%1, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1]),
   nn.avg_pool2d(%x, pool_size=[2, 2], strides=[2, 2], count_include_pad=False),
   nn.global_avg_pool2d(%x))
}''')


@pytest.mark.parametrize("opt_level", [0, 3])
def test_convolutions_and_pooling(target, opt_level):
    lib = _check(CONVOLUTIONS, target, opt_level)
    # AlterOpLayout is left out for the GPU: every convolution reads NCHW, no blocked layout
    assert not any("layout_transform" in k.ops for k in lib.kernels)
    convs = [k for k in lib.kernels if "nn.conv2d" in k.ops]
    assert convs and all(len(k.input_types[0].shape) == 4 for k in convs)


def _mlp():
    x = rb.var("x", shape=(4, 64))
    w1, b1 = rb.var("w1", shape=(128, 64)), rb.var("b1", shape=(128,))
    w2, b2 = rb.var("w2", shape=(10, 128)), rb.var("b2", shape=(10,))
    from relaybench import op
    h = op.nn.relu(op.nn.bias_add(op.nn.dense(x, w1), b1))
    out = op.nn.softmax(op.nn.bias_add(op.nn.dense(h, w2), b2))
    mod = rb.IRModule.from_expr(rb.Function([x, w1, b1, w2, b2], out))
    rng = np.random.default_rng(3)
    params = {"w1": rng.normal(0, 0.1, (128, 64)).astype("float32"),
              "b1": rng.normal(0, 0.1, 128).astype("float32"),
              "w2": rng.normal(0, 0.1, (10, 128)).astype("float32"),
              "b2": rng.normal(0, 0.1, 10).astype("float32")}
    return mod, params


ZOO = {
    "mlp": (_mlp, {}),
    "dqn": (lambda: rb.models.get("dqn", image_shape=(4, 44, 44)), {}),
    "resnet18": (lambda: rb.models.get("resnet18", image_shape=(3, 16, 16), num_classes=10), {}),
    "mobilenet_v2": (lambda: rb.models.get("mobilenet_v2", image_shape=(3, 16, 16),
                                           num_classes=10), {}),
}


@pytest.mark.parametrize("name,opt_level", [("mlp", 0), ("mlp", 3), ("dqn", 0), ("dqn", 3),
                                            ("resnet18", 3), ("mobilenet_v2", 3)])
def test_zoo_models_agree_with_the_interpreter(target, name, opt_level):
    mod, params = ZOO[name][0]()
    main = mod["main"]
    data = main.params[0]
    shape = tuple(int(d) for d in data.type_annotation.shape)
    x = np.random.default_rng(0).uniform(0, 1, shape).astype("float32")
    expected = rb.create_executor("interpreter", mod=mod).evaluate()(
        x, *[params[p.name_hint] for p in main.params[1:]])
    lib = rb.build(mod, target=target, params=params, opt_level=opt_level)
    got = lib.run(**{data.name_hint: x})
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * max(scale, 1.0))


def test_graph_executor_and_profile(target):
    x = rb.var("x", shape=(2, 8))
    mod = rb.IRModule.from_expr(rb.Function([x], rb.op.nn.relu(x * rb.const(3.0))))
    run = rb.create_executor("graph", mod, target=target).evaluate()
    value = np.linspace(-1, 1, 16, dtype="float32").reshape(2, 8)
    np.testing.assert_array_equal(run(value), np.maximum(value * 3, 0))
    lib = run.graph_module
    assert "__kernel void fused_multiply_nn_relu" in lib.source("opencl", group=0)
    assert "threadIdx.x" in lib.source("loops", group=0)
    profile = lib.profile(number=2)
    assert profile.rows[0]["group"] == "fused_multiply_nn_relu"
    assert lib.benchmark(number=2, repeat=2).median_ms > 0


def test_inputs_are_checked_before_the_device_runs(target):
    x = rb.var("x", shape=(2, 3))
    lib = rb.build(rb.IRModule.from_expr(rb.Function([x], x + x)), target=target)
    with pytest.raises(ExecutionError, match=r"input 'x': wrong dtype: expected "
                                             r"Tensor\[\(2, 3\), float32\], given "
                                             r"Tensor\[\(2, 3\), float64\]"):
        lib.run(x=np.zeros((2, 3)))
    with pytest.raises(ExecutionError, match="input 'x': wrong shape"):
        lib.run(x=np.zeros((3, 2), "float32"))
    np.testing.assert_array_equal(lib.run(x=np.ones((2, 3), "float32")), np.full((2, 3), 2.0))


def test_no_matching_platform_lists_what_is_present():
    from relaybench.backends.opencl import list_devices
    x = rb.var("x", shape=(2,))
    mod = rb.IRModule.from_expr(rb.Function([x], x + x))
    with pytest.raises(CompileError) as info:
        rb.build(mod, target="opencl -platform=no-such-vendor")
    text = str(info.value)
    assert "no OpenCL device matches -platform=no-such-vendor; present:" in text
    for platform, device, kind in list_devices():
        assert f"platform {platform!r}" in text and f"{device} ({kind})" in text


def test_no_gpu_lists_the_devices_present():
    from relaybench.backends.opencl import get_device, list_devices
    if any(kind == "gpu" for _, _, kind in list_devices()):
        pytest.skip("a GPU is present: -device=gpu matches")
    with pytest.raises(CompileError, match=r"no OpenCL device matches -device=gpu; present:\n"
                                           r"platform '"):
        get_device("opencl -device=gpu")


def test_target_options():
    assert Target.parse("opencl -device=cpu -platform=pocl").options == {
        "device": "cpu", "platform": "pocl"}
    with pytest.raises(CompileError, match="-device must be gpu or cpu, got 'fpga'"):
        Target.parse("opencl -device=fpga")
    with pytest.raises(CompileError, match="unknown option -mcpu; opencl takes -device"):
        Target.parse("opencl -mcpu=native")


def test_program_cache_on_disk(target, tmp_path):
    """A program is read back from the disk cache by a process that has not built it, and a
    damaged entry is rebuilt, never trusted."""
    from relaybench import te
    from relaybench.backends.opencl import build_kernel, runtime
    X = te.placeholder((16,), name="X")
    Y = te.compute((16,), lambda i: X[i] * 7.0 + 0.25, name="Y")
    s = te.create_schedule(Y)
    s[Y].bind(Y.op.axis[0], "threadIdx.x")
    func = te.lower(s, [X], name="cache_probe")
    x = np.arange(16, dtype="float32")

    def fresh_build():
        runtime._programs.clear()   # as a new process would start
        kernel = build_kernel(func, target)
        out = np.zeros(16, "float32")
        kernel(x, out)
        np.testing.assert_array_equal(out, x * 7 + 0.25)

    with config.Context(RB_CACHE_DIR=str(tmp_path), RB_OPENCL_BINARIES="on"):
        before = dict(runtime.stats)
        fresh_build()
        entries = list((tmp_path / "opencl").glob("*.rbcl"))
        assert len(entries) == 1
        assert runtime.stats["compiled"] == before["compiled"] + 1
        fresh_build()
        assert runtime.stats["from_disk"] == before["from_disk"] + 1
        entries[0].write_bytes(entries[0].read_bytes()[:-7])   # truncated
        fresh_build()
        assert runtime.stats["compiled"] == before["compiled"] + 2
        assert "binary of" in runtime._disk.last_damage


def test_binaries_kept_by_the_knob(target, tmp_path):
    """``RB_OPENCL_BINARIES``: ``off`` keeps nothing on disk; ``auto`` keeps the binary for
    every driver but PoCL (which caches by itself, and compiles again when asked for it); an
    unknown value is an error naming the knob."""
    from relaybench import te
    from relaybench.backends.opencl import build_kernel, get_device, runtime
    X = te.placeholder((8,), name="X")
    Y = te.compute((8,), lambda i: X[i] * 3.0 - 0.5, name="Y")
    s = te.create_schedule(Y)
    s[Y].bind(Y.op.axis[0], "threadIdx.x")
    func = te.lower(s, [X], name="binary_probe")
    pocl = runtime.POCL_PLATFORM in get_device(target).key
    for mode, kept in (("off", False), ("auto", not pocl)):
        folder = tmp_path / mode
        with config.Context(RB_CACHE_DIR=str(folder), RB_OPENCL_BINARIES=mode):
            runtime._programs.clear()
            out = np.zeros(8, "float32")
            build_kernel(func, target)(np.arange(8, dtype="float32"), out)
        np.testing.assert_array_equal(out, np.arange(8) * 3 - 0.5)
        assert bool(list(folder.glob("opencl/*.rbcl"))) == kept, mode
    with config.Context(RB_CACHE_DIR=str(tmp_path / "bad"), RB_OPENCL_BINARIES="always"):
        runtime._programs.clear()
        with pytest.raises(CompileError, match="RB_OPENCL_BINARIES='always': expected auto"):
            build_kernel(func, target)


def test_host_kernel_between_device_kernels(target, monkeypatch):
    """A group that cannot be compiled (here: made so) runs on the host through the interpreter,
    its inputs read back from the device and its outputs written to it."""
    from relaybench.backends import lowering
    real = lowering.lower_primitive

    def no_relu(func, target=None, name=None):
        lowered = real(func, target, name=name)
        if "nn.relu" in lowered.ops:
            raise CompileError(f"lowering {lowered.name}: nn.relu has no compute; it cannot be "
                               "part of a compiled kernel")
        return lowered

    monkeypatch.setattr(lowering, "lower_primitive", no_relu)
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(2, 5), float32]) { add(nn.relu(multiply(%x, 2f)), 1f) }''')
    lib = rb.build(mod, target=target, opt_level=0)
    assert lib.host_groups == ["fused_nn_relu"]
    x = np.linspace(-1, 1, 10, dtype="float32").reshape(2, 5)
    np.testing.assert_allclose(lib.run(x=x), np.maximum(x * 2, 0) + 1, rtol=1e-6)
    assert "host (reference) kernel, no OpenCL code" in lib.source("opencl", group="fused_nn_relu")


def test_launch_names_do_not_clash_across_groups(target):
    """Regression: the groups of a build share one program; ``fused_mean`` (two launches) named
    its second launch ``fused_mean_1``, the name of the next group: the program did not
    compile. Launches are now ``<group>__<k>``."""
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(4, 6), float32], %y: Tensor[(3, 5), float32]) {
  (mean(%x, axis=[1]), mean(%y, axis=[0]))
}''')
    lib = _check(mod, target, 3)
    assert [[launch.name for launch in k.compiled.launches] for k in lib.kernels] == [
        ["fused_mean__0", "fused_mean__1"], ["fused_mean_1__0", "fused_mean_1__1"]]


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
def test_narrow_integer_select_keeps_its_type(target, dtype):
    """Regression: max pooling of int8 with padding is ``max(x, select(inside, x[...], MIN))``;
    C's ``?:`` promoted the two chars to int and ``max(char, int)`` did not compile."""
    mod = rb.parse(f'''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 2, 4, 4), {dtype}]) {{
  (nn.max_pool2d(%x, pool_size=[3, 3], padding=[1, 1, 1, 1]),
   where(greater(%x, %x), %x, maximum(%x, %x)))
}}''')
    x = np.random.default_rng(5).integers(0 if dtype == "uint8" else -100, 100,
                                          (1, 2, 4, 4)).astype(dtype)
    _check(mod, target, 3, values={"x": x})
