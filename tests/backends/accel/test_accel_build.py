"""rb.build(target="accel"): packed int8 convolution groups lowered to the accelerator's
instruction stream and run in its simulator, bit for bit what the CPU computes (the reference
interpreter on the same packed program, and the llvm build of the quantized model)."""

import numpy as np
import pytest

import relaybench as rb
from relaybench.backends.accel import AccelConfig
from relaybench.backends.accel.kernel import AccelKernel
from relaybench.backends.accel.lower import choose_tiling, plan_group
from relaybench.errors import CompileError
from relaybench.ir.expr import Function

from accel_programs import quantized_mlp

pytest.importorskip("llvmlite")


def _packed_conv(c, o, h, k, pad, stride, epilogue, b=1, block=16):
    conv = (f'nn.conv2d(%x, %w, strides=[{stride}, {stride}], padding=[{pad}, {pad}, {pad}, {pad}], '
            f'channels={o}, kernel_size=[{k}, {k}], data_layout="NCHW{b}n{block}c", '
            f'kernel_layout="OIHW{block}o{block}i", out_dtype="int32")')
    oh = (h + 2 * pad - k) // stride + 1
    body = {"cast": f'cast({conv}, dtype="int8")',
            "requantize": f'cast(clip(right_shift(add(nn.relu(add({conv}, %b)), 8), 4), '
                          f'a_min=-127f, a_max=127f), dtype="int8")',
            "residual": f'cast(clip(right_shift(nn.relu(add(add({conv}, %b), '
                        f'left_shift(cast(%r, dtype="int32"), 3))), 5), a_min=-127f, a_max=127f), '
                        f'dtype="int8")'}[epilogue]
    params = [f"%x: Tensor[(1, {c // block}, {h}, {h}, {b}, {block}), int8]",
              f"%w: Tensor[({o // block}, {c // block}, {k}, {k}, {block}, {block}), int8]"]
    if epilogue != "cast":
        params.append(f"%b: Tensor[(1, {o // block}, 1, 1, 1, {block}), int32]")
    if epilogue == "residual":
        params.append(f"%r: Tensor[(1, {o // block}, {oh}, {oh}, {b}, {block}), int8]")
    mod = rb.parse(f'#[version = "0.0.5"]\ndef @main({", ".join(params)}) {{\n  {body}\n}}')
    return rb.passes.InferType()(mod)


def _args(mod, seed):
    rng = np.random.default_rng(seed)
    out = []
    for p in mod["main"].params:
        t = p.checked_type
        shape = tuple(int(d) for d in t.shape)
        if str(t.dtype) == "int8":
            out.append(rng.integers(-128, 128, shape).astype("int8"))
        else:
            out.append(rng.integers(-5000, 5000, shape).astype("int32"))
    return out


CASES = [
    # (c, o, h, kernel, pad, stride, epilogue)
    (16, 16, 5, 3, 1, 1, "cast"),
    (32, 48, 9, 3, 1, 2, "requantize"),
    (64, 32, 12, 1, 0, 1, "requantize"),
    (32, 32, 14, 3, 1, 1, "residual"),    # several tiles: double buffering
    (512, 32, 7, 3, 1, 1, "requantize"),  # the weights of a channel block fill half the buffer
    (1024, 32, 5, 3, 1, 1, "residual"),   # they do not: the input channels in chunks
]


@pytest.mark.parametrize("c,o,h,k,pad,stride,epilogue", CASES)
def test_packed_conv_group_on_the_accelerator_is_exact(c, o, h, k, pad, stride, epilogue):
    mod = _packed_conv(c, o, h, k, pad, stride, epilogue)
    args = _args(mod, c + o + h)
    want = np.asarray(rb.create_executor("interpreter", mod=mod).evaluate()(*args))
    main = mod["main"]
    config = AccelConfig()
    plan = plan_group(Function(main.params, main.body, main.ret_type), config)
    assert not isinstance(plan, str), plan
    kernel = AccelKernel("g", Function(main.params, main.body, main.ret_type), plan, config)
    out = np.zeros(want.shape, "int8")
    kernel(*args, out)
    np.testing.assert_array_equal(out, want)
    stats = kernel.last_stats
    if c == 1024:
        assert kernel.lowered.tiling.tic < c // 16
    assert stats.gemm_macs == plan.macs           # every MAC once, none twice
    assert stats.cycles >= plan.macs // config.macs_per_cycle
    text = kernel.source("accel")
    assert "GEMM" in text and "STORE" in text and "FINISH" in text


def test_double_buffering_overlaps_loads_with_compute():
    """With several tiles, the load module works while the compute module does: the run takes
    fewer cycles than the sum of every module's busy cycles."""
    mod = _packed_conv(64, 64, 28, 3, 1, 1, "requantize")
    main = mod["main"]
    func = Function(main.params, main.body, main.ret_type)
    kernel = AccelKernel("g", func, plan_group(func, AccelConfig()), AccelConfig())
    assert kernel.lowered.tiles >= 4
    out = np.zeros((1, 4, 28, 28, 1, 16), "int8")
    kernel(*_args(mod, 0), out)
    stats = kernel.last_stats
    assert stats.cycles < sum(stats.busy.values())
    assert stats.cycles < stats.busy["load"] + stats.busy["compute"]


def test_groups_the_accelerator_cannot_run_say_why():
    config = AccelConfig()
    mod = rb.passes.InferType()(rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 16, 4, 4), int8], %w: Tensor[(16, 16, 3, 3), int8]) {
  nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3], out_dtype="int32")
}'''))
    main = mod["main"]
    assert "not packed" in plan_group(Function(main.params, main.body), config)
    mod = rb.passes.InferType()(rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 1, 4, 4, 1, 16), int8], %w: Tensor[(1, 1, 3, 3, 16, 16), int8]) {
  nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3], data_layout="NCHW1n16c",
            kernel_layout="OIHW16o16i", out_dtype="int32")
}'''))
    main = mod["main"]   # an int32 result: the STORE writes int8
    assert "int32" in plan_group(Function(main.params, main.body), config)
    wide = _packed_conv(16, 16, 1100, 1, 0, 1, "cast")   # one row is 1100 input elements
    main = wide["main"]
    plan = plan_group(Function(main.params, main.body), config)
    assert "input buffer" in choose_tiling(plan, config)
    with pytest.raises(CompileError, match="batch"):
        rb.build(mod, target="accel -batch=3")       # 256 MACs are no square split by 3


def _quantized_resnet(shape=(3, 32, 32)):
    mod, params = rb.models.resnet18(image_shape=shape)
    with rb.quantize.qconfig(global_scale=8.0, skip_conv_layers=[0]):
        return rb.quantize.quantize(mod, params)


def test_resnet18_on_the_accelerator_is_bit_exact_with_the_cpu():
    """VTA's flow: quantize (global scale 8, the first convolution in float), graph_pack, build;
    the packed convolutions run in the simulator, the rest on the CPU, and the output equals the
    llvm build of the same quantized model exactly."""
    q = _quantized_resnet()
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype("float32")
    acc = rb.build(q, target="accel")
    cpu = rb.build(q, target="llvm")
    np.testing.assert_array_equal(acc.run(data=x), cpu.run(data=x))
    on_accel = [k for k in acc.kernels if k.accel]
    assert acc.compile_stats.accel_kernels == len(on_accel) >= 10
    assert all(k.compiled.last_stats.cycles > 0 for k in on_accel)
    # why each of the others stays on the CPU
    reasons = acc.compile_stats.cpu_reasons
    assert "not packed" in reasons["fused_nn_conv2d_add_nn_relu"]   # the float first convolution
    rows = acc.profile(number=1, data=x).groups
    accel_rows = [r for r in rows if str(r["rule"]).startswith("accel")]
    k = on_accel[0]
    row = next(r for r in accel_rows if r["group"] == k.name)
    assert row["ms/call"] == round(k.compiled.last_stats.seconds * 1e3, 4)
    first = next(i for i, g in enumerate(acc.kernels) if g.accel)
    assert acc.source("accel", group=first).count("GEMM") >= 2
    assert acc.source("accel").count("FINISH") == len(on_accel)
    with pytest.raises(ValueError, match="accelerator"):
        cpu.source("accel")


def test_a_target_dict_names_the_cpu_part():
    from relaybench.backends.target import Target
    t = Target.parse({"accel": "accel -batch=4", "cpu": "llvm -num-threads=1"})
    assert t.kind == "accel" and t.accel_config().batch == 4
    assert t.host.kind == "llvm" and t.host.num_threads == 1
    with pytest.raises(CompileError, match="'cpu'"):
        Target.parse({"accel": "accel", "cpu": "opencl"})
    with pytest.raises(CompileError, match="keys"):
        Target.parse({"gpu": "opencl"})
    q = _quantized_resnet((3, 16, 16))
    x = np.random.default_rng(2).standard_normal((1, 3, 16, 16)).astype("float32")
    lib = rb.build(q, target={"accel": "accel", "cpu": "llvm"})
    np.testing.assert_array_equal(lib.run(data=x), rb.build(q, target="llvm").run(data=x))
    assert lib.compile_stats.accel_kernels > 0


def test_a_tile_that_fills_the_accumulator_half_exactly():
    """Multi-batch design (4 x 8 x 8): a 1x1 stride-2 convolution whose tile and bias fill half
    the accumulator to the last entry; no entry is kept for a residual it does not have."""
    config = AccelConfig.multi_batch(4, split="square")
    mod = _packed_conv(256, 512, 14, 1, 0, 2, "requantize", b=4, block=8)
    main = mod["main"]
    func = Function(main.params, main.body, main.ret_type)
    plan = plan_group(func, config)
    tiling = choose_tiling(plan, config)
    assert tiling.toc * tiling.th * 7 + tiling.toc == config.acc_depth // 2
    kernel = AccelKernel("g", func, plan, config)
    args = _args(mod, 11)
    want = np.asarray(rb.create_executor("interpreter", mod=mod).evaluate()(*args))
    out = np.zeros(want.shape, "int8")
    kernel(*args, out)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("batch", [1, 4])
def test_dense_layers_run_on_the_accelerator(batch):
    """A quantized multilayer perceptron: its requantized dense layers run on the accelerator as
    1x1 convolutions (VTA's dense), the last one on the CPU; the result equals the llvm build of
    the same quantized model exactly, on the single- and the multi-batch design."""
    q, _ = quantized_mlp(batch=batch, sizes=(64, 32, 48, 10), seed=3)
    x = np.random.default_rng(4).standard_normal((batch, 64)).astype("float32")
    target = "accel" if batch == 1 else f"accel -batch={batch}"
    acc = rb.build(q, target=target)
    np.testing.assert_array_equal(acc.run(x=x), rb.build(q, target="llvm").run(x=x))
    assert acc.compile_stats.accel_kernels == 2
    assert "GEMM" in acc.source("accel")
