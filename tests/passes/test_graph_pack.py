"""GraphPack / graph_pack: the accelerator's packed layouts between a start and a stop operator.

The packed convolution and layout_transform are checked against numpy formulas (packing written
out with reshape/transpose); the rewrite is checked on a small quantized network (a skipped
float first convolution, max pool, three int8 convolutions with a residual add, global average
pool, dense) and on the zoo's ResNet-18 at 32x32: the packed program agrees bit for bit with the
unpacked quantized one on the interpreter and on the llvm build, its convolutions have the packed
layouts and int8 operands, nothing outside the region changes, and each packed convolution with
its epilogue is a fused group of its own."""

import doctest
import importlib
import re

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.ir import assert_structural_equal, op_histogram, post_order
from relaybench.ir.analysis import free_vars
from relaybench.ir.builder import var
from relaybench.ir.expr import Call, Function
from relaybench.ir.module import IRModule
from relaybench.ir.type_infer import infer_expr
from relaybench.passes.fuse_ops import fused_groups
from relaybench.passes.graph_pack import GraphPackError, graph_pack

H = '#[version = "0.0.5"]\n'


# ---- helpers ---------------------------------------------------------------------------------

def pack_data(x, b, c):
    """NCHW -> NCHW{b}n{c}c by hand: [N/b, C/c, H, W, b, c]."""
    n, ch, h, w = x.shape
    return x.reshape(n // b, b, ch // c, c, h, w).transpose(0, 2, 4, 5, 1, 3)


def pack_kernel(w, c):
    """OIHW -> OIHW{c}o{c}i by hand: [O/c, I/c, H, W, c(o), c(i)]."""
    o, i, kh, kw = w.shape
    return w.reshape(o // c, c, i // c, c, kh, kw).transpose(0, 2, 4, 5, 1, 3)


def conv2d_numpy(x, w, stride, pad):
    """Integer NCHW/OIHW convolution in int32, written out with einsum over the windows."""
    x = np.pad(x.astype(np.int32), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    o, _, kh, kw = w.shape
    oh = (x.shape[2] - kh) // stride + 1
    ow = (x.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], o, oh, ow), np.int32)
    for r in range(kh):
        for s in range(kw):
            patch = x[:, :, r:r + stride * oh:stride, s:s + stride * ow:stride]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, r, s].astype(np.int32))
    return out


def interpret(mod, *args):
    return np.asarray(rb.create_executor("interpreter", mod=mod).evaluate()(*args))


def compiled(mod, **inputs):
    return np.asarray(rb.build(mod, target="llvm", opt_level=3).run(**inputs))


def small_net(batch=1, ch=16, mid=None, seed=0):
    """A float network with the shape of the accelerator's workloads: a first convolution (left in
    float by skip_conv_layers=[0]), max pool, two 3x3 convolutions with a residual add, a strided
    1x1 convolution, global average pool, dense. ``mid`` changes the channels of the first 3x3
    convolution (to make one the accelerator cannot pack)."""
    mid = ch if mid is None else mid
    rng = np.random.default_rng(seed)
    params = {}

    def weight(name, shape, scale=0.3):
        params[name] = (rng.standard_normal(shape) * scale).astype("float32")
        return var(name, shape=shape)

    data = var("data", shape=(batch, 3, 16, 16))
    x = op.nn.conv2d(data, weight("c0", (ch, 3, 3, 3)), padding=(1, 1), channels=ch, kernel_size=(3, 3))
    x = op.nn.relu(op.nn.bias_add(x, weight("b0", (ch,))))
    x = op.nn.max_pool2d(x, pool_size=(2, 2), strides=(2, 2))
    y = op.nn.conv2d(x, weight("c1", (mid, ch, 3, 3)), padding=(1, 1), channels=mid, kernel_size=(3, 3))
    y = op.nn.relu(op.nn.bias_add(y, weight("b1", (mid,))))
    y = op.nn.conv2d(y, weight("c2", (ch, mid, 3, 3)), padding=(1, 1), channels=ch, kernel_size=(3, 3))
    y = op.nn.bias_add(y, weight("b2", (ch,)))
    x = op.nn.relu(op.add(x, y))
    x = op.nn.conv2d(x, weight("c3", (2 * ch, ch, 1, 1)), strides=(2, 2), channels=2 * ch,
                     kernel_size=(1, 1))
    x = op.nn.relu(op.nn.bias_add(x, weight("b3", (2 * ch,))))
    x = op.nn.batch_flatten(op.nn.global_avg_pool2d(x))
    x = op.nn.dense(x, weight("fc", (10, 2 * ch)), units=10)
    others = [v for v in free_vars(x) if v.name_hint != "data"]
    return IRModule.from_expr(Function([data] + others, x)), params


def quantized(mod, params):
    """The accelerator's quantization settings (Relay's VTA tutorials)."""
    with rb.quantize.qconfig(global_scale=8.0, skip_conv_layers=[0]):
        return rb.quantize.quantize(mod, params)


@pytest.fixture(scope="module")
def small_q():
    return quantized(*small_net())


@pytest.fixture(scope="module")
def small_packed(small_q):
    return graph_pack(small_q)


def image(shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def calls(mod, name):
    return [n for n in post_order(mod["main"].body)
            if isinstance(n, Call) and getattr(n.op, "name", None) == name]


def printed_positions(mod, name):
    """The ``%N`` of each call of ``name`` in the printed program."""
    return [int(m) for m in re.findall(r"%(\d+) = " + re.escape(name) + r"\(", str(mod))]


def test_doctest():
    module = importlib.import_module("relaybench.passes.graph_pack")
    assert doctest.testmod(module).failed == 0
    assert rb.passes.graph_pack is graph_pack     # the function, not its module


# ---- operators in packed layouts ---------------------------------------------------------------

@pytest.mark.parametrize("b, stride, pad", [(1, 1, 1), (2, 2, 0)])
def test_packed_conv2d_matches_numpy(b, stride, pad):
    rng = np.random.default_rng(3)
    n, c, o = 2, 32, 48
    x = rng.integers(-128, 128, (n, c, 7, 7)).astype("int8")
    w = rng.integers(-128, 128, (o, c, 3, 3)).astype("int8")
    dl, kl = f"NCHW{b}n16c", "OIHW16o16i"
    xp, wp = pack_data(x, b, 16), pack_kernel(w, 16)
    mod = rb.parse(H + f'''
def @main(%x: Tensor[{tuple(xp.shape)}, int8], %w: Tensor[{tuple(wp.shape)}, int8]) {{
  nn.conv2d(%x, %w, strides=[{stride}, {stride}], padding=[{pad}, {pad}, {pad}, {pad}], channels={o},
            kernel_size=[3, 3], data_layout="{dl}", kernel_layout="{kl}", out_dtype="int32")
}}''')
    expect = pack_data(conv2d_numpy(x, w, stride, pad), b, 16)
    out_type = rb.passes.InferType()(mod)["main"].body.checked_type
    assert tuple(out_type.shape) == expect.shape and out_type.dtype == "int32"
    np.testing.assert_array_equal(interpret(mod, xp, wp), expect)
    np.testing.assert_array_equal(compiled(mod, x=np.ascontiguousarray(xp), w=np.ascontiguousarray(wp)), expect)


def test_packed_layout_transform_matches_numpy():
    x = np.arange(2 * 32 * 3 * 2, dtype="int32").reshape(2, 32, 3, 2)
    mod = rb.parse(H + '''
def @main(%x: Tensor[(2, 32, 3, 2), int32]) {
  %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NCHW2n16c");
  (%0, layout_transform(%0, src_layout="NCHW2n16c", dst_layout="NCHW"))
}''')
    packed, back = rb.create_executor("interpreter", mod=mod).evaluate()(x)
    np.testing.assert_array_equal(packed, pack_data(x, 2, 16))
    np.testing.assert_array_equal(back, x)
    lib = rb.build(mod, target="llvm", opt_level=3)
    out = lib.run(x=x)
    np.testing.assert_array_equal(out[0], pack_data(x, 2, 16))
    np.testing.assert_array_equal(out[1], x)


def test_conv2d_relation_rejects_partial_channel_block():
    mod = rb.parse(H + '''
def @main(%x: Tensor[(1, 1, 4, 4, 1, 16), int8], %w: Tensor[(1, 1, 3, 3, 16, 8), int8]) {
  nn.conv2d(%x, %w, channels=16, kernel_size=[3, 3], data_layout="NCHW1n16c", kernel_layout="OIHW16o16i", out_dtype="int32")
}''')
    with pytest.raises(rb.errors.TypeInferenceError, match="nn.conv2d"):
        rb.passes.InferType()(mod)


# ---- the small quantized network ---------------------------------------------------------------

def test_small_net_bit_exact_interpreter_and_llvm(small_q, small_packed):
    x = image((1, 3, 16, 16))
    np.testing.assert_array_equal(interpret(small_packed, x), interpret(small_q, x))
    np.testing.assert_array_equal(compiled(small_packed, data=x), compiled(small_q, data=x))


def test_packed_convolutions_have_packed_layouts_and_int8_operands(small_packed):
    convs = calls(small_packed, "nn.conv2d")
    packed = [c for c in convs if c.attrs["data_layout"] == "NCHW1n16c"]
    assert len(convs) == 4 and len(packed) == 3       # the float first convolution stays
    for conv in packed:
        assert conv.attrs["kernel_layout"] == "OIHW16o16i"
        assert conv.attrs["out_layout"] in ("", "NCHW1n16c")
        data_t, weight_t, out_t = conv.args[0].checked_type, conv.args[1].checked_type, conv.checked_type
        assert (data_t.dtype, weight_t.dtype, out_t.dtype) == ("int8", "int8", "int32")
        assert data_t.ndim == 6 and tuple(data_t.shape[-2:]) == (1, 16)
        assert weight_t.ndim == 6 and tuple(weight_t.shape[-2:]) == (16, 16)
        assert tuple(out_t.shape[-2:]) == (1, 16)
        # the weight was packed at compile time
        assert isinstance(conv.args[1], rb.ir.expr.Constant)
    # the biases were packed to broadcast against the packed output: (1, C/16, 1, 1, 1, 16)
    biases = 0
    for add in calls(small_packed, "add"):
        if add.checked_type.ndim != 6:
            continue
        const = [a for a in add.args if isinstance(a, rb.ir.expr.Constant) and a.checked_type.ndim > 0]
        for c in const:
            assert tuple(c.checked_type.shape[:1]) == (1,) and tuple(c.checked_type.shape[-2:]) == (1, 16)
            biases += 1
    assert biases == 3


def test_packed_weights_and_biases_hold_the_original_values(small_q, small_packed):
    """The folded packed constants are the original ones rearranged (checked by hand packing)."""
    orig = [c for c in calls(small_q, "nn.conv2d") if c.attrs["out_dtype"] == "int32"]
    new = [c for c in calls(small_packed, "nn.conv2d") if c.attrs["data_layout"] == "NCHW1n16c"]
    for a, b in zip(orig, new):
        np.testing.assert_array_equal(b.args[1].data, pack_kernel(a.args[1].data, 16))


def test_nothing_before_the_start_and_after_the_stop_is_packed(small_q, small_packed):
    transforms = calls(small_packed, "layout_transform")
    assert len(transforms) == 2                       # in at the start, out at the stop: no others
    pack_in, pack_out = sorted(transforms, key=lambda t: t.attrs["src_layout"] != "NCHW")
    assert (pack_in.attrs["src_layout"], pack_in.attrs["dst_layout"]) == ("NCHW", "NCHW1n16c")
    assert (pack_out.attrs["src_layout"], pack_out.attrs["dst_layout"]) == ("NCHW1n16c", "NCHW")
    # the start call and everything before it is the original program
    start = pack_in.args[0]
    assert start.op.name == "nn.max_pool2d"
    assert_structural_equal(start, calls(small_q, "nn.max_pool2d")[0], map_free_vars=True)
    # the stop runs on the packed data, then is unpacked
    stop = pack_out.args[0]
    assert stop.op.name == "nn.global_avg_pool2d" and stop.attrs["layout"] == "NCHW1n16c"
    # every packed tensor lies between the two
    inside = set(post_order(stop)) - set(post_order(start))
    for node in post_order(small_packed["main"].body):
        t = node.checked_type
        if isinstance(node, Call) and isinstance(t, rb.ir.types.TensorType) and t.ndim == 6:
            assert node in inside
    # after the stop: the original operators on the unpacked value
    assert [c.op.name for c in calls(small_packed, "nn.batch_flatten")] == ["nn.batch_flatten"]
    assert calls(small_packed, "nn.batch_flatten")[0].args[0] is pack_out


def test_each_packed_convolution_with_its_epilogue_is_one_fused_group(small_packed):
    opt = rb.passes.optimize(small_packed, opt_level=3, disabled_pass=["AlterOpLayout"])
    groups = [g for g in fused_groups(opt) if "nn.conv2d" in g.ops]
    packed = [g for g in groups if g.input_types[0].ndim == 6]
    assert len(packed) == 3
    for g in groups:
        assert g.ops.count("nn.conv2d") == 1
    # the first packed convolution keeps its bias, relu and requantization with it
    assert packed[0].ops == ("nn.conv2d", "add", "nn.relu", "add", "right_shift", "clip", "cast")
    # stop_fusion before each packed convolution's data; the residual add's operands: the
    # convolution's accumulator as it is (the add joins that convolution's group), the other
    # one behind a stop_fusion (here the one quantization put on the requantized shortcut)
    for conv in calls(small_packed, "nn.conv2d")[1:]:
        assert conv.args[0].op.name == "annotation.stop_fusion"
    residual = [a for a in calls(small_packed, "add")
                if not any(isinstance(x, rb.ir.expr.Constant) for x in a.args)]
    assert len(residual) == 1

    def reaches(expr):
        names = []
        while isinstance(expr, Call) and isinstance(expr.op, rb.ir.expr.Op):
            names.append(expr.op.name)
            if expr.op.name in ("nn.conv2d", "annotation.stop_fusion"):
                break
            expr = expr.args[0]
        return names[-1] if names else None
    assert sorted(reaches(x) for x in residual[0].args) == ["annotation.stop_fusion", "nn.conv2d"]
    # the convolution before the residual add: bias add, residual add, relu in its group
    assert any(g.ops[:4] == ("nn.conv2d", "add", "add", "nn.relu") for g in packed)


def test_batch_block(small_q):
    mod, params = small_net(batch=2)
    q = quantized(mod, params)
    packed = graph_pack(q, bfactor=2)
    convs = [c for c in calls(packed, "nn.conv2d") if c.attrs["data_layout"] == "NCHW2n16c"]
    assert len(convs) == 3
    assert tuple(convs[0].args[0].checked_type.shape) == (1, 1, 8, 8, 2, 16)
    x = image((2, 3, 16, 16), seed=5)
    np.testing.assert_array_equal(interpret(packed, x), interpret(q, x))
    np.testing.assert_array_equal(compiled(packed, data=x), compiled(q, data=x))


def test_start_and_stop_by_position(small_q):
    """``start_name_idx`` / ``stop_name_idx`` are the ``%N`` of the printed program."""
    relus = printed_positions(small_q, "nn.relu")
    # start after the first int8 convolution's relu, stop at the relu after the residual add
    packed = graph_pack(small_q, start_name="nn.relu", start_name_idx=relus[1],
                        stop_name="nn.relu", stop_name_idx=relus[2])
    kinds = [c.attrs["data_layout"] for c in calls(packed, "nn.conv2d")]
    assert kinds == ["NCHW", "NCHW", "NCHW1n16c", "NCHW"]
    # in after the start relu, out after the stop relu, and the residual's shortcut (computed
    # before the start) brought in for the packed add
    t = calls(packed, "layout_transform")
    assert sorted(x.args[0].op.name for x in t) == ["left_shift", "nn.relu", "nn.relu"]
    x = image((1, 3, 16, 16), seed=2)
    np.testing.assert_array_equal(interpret(packed, x), interpret(small_q, x))
    np.testing.assert_array_equal(compiled(packed, data=x), compiled(small_q, data=x))


def test_function_in_function_out(small_q, small_packed):
    out = graph_pack(small_q["main"])
    assert isinstance(out, Function)
    assert_structural_equal(out, small_packed["main"], map_free_vars=True)


def test_pass_registered_and_seen_by_snapshots(small_q, small_packed):
    assert rb.passes.get_pass("graph-pack") is rb.passes.GraphPack
    assert "GraphPack" in [name for name, *_ in rb.passes.list_passes()]
    snaps = rb.passes.Snapshots()
    with rb.PassContext(opt_level=3, instruments=[snaps]):
        out = rb.passes.build_pipeline("graph-pack{bfactor=1, cfactor=16}")(small_q)
    assert "GraphPack" in [r.name for r in snaps.changed()]
    assert_structural_equal(out["main"], small_packed["main"], map_free_vars=True)


# ---- errors ------------------------------------------------------------------------------------

def test_error_channels_not_a_multiple_of_cfactor(small_q):
    where = printed_positions(small_q, "nn.max_pool2d")[0]
    with pytest.raises(GraphPackError, match=rf"nn.max_pool2d \(%{where}\).*Tensor\[\(1, 16, 8, 8\), "
                                              r"float32\] has channels 16, not a multiple of cfactor=32"):
        graph_pack(small_q, cfactor=32)


def test_error_batch_not_a_multiple_of_bfactor(small_q):
    with pytest.raises(GraphPackError, match=r"nn.max_pool2d .* has batch 1, not a multiple of bfactor=2"):
        graph_pack(small_q, bfactor=2)


def test_error_convolution_that_cannot_be_packed():
    q = quantized(*small_net(mid=24))
    where = printed_positions(q, "nn.conv2d")[1]
    with pytest.raises(GraphPackError, match=rf"nn.conv2d \(%{where}\): weight Tensor\[\(24, 16, 3, 3\), "
                                              r"int8\] has output channels 24, not a multiple of cfactor=16"):
        graph_pack(q)


def test_error_start_and_stop_not_found(small_q):
    with pytest.raises(GraphPackError, match="no call of nn.avg_pool2d"):
        graph_pack(small_q, start_name="nn.avg_pool2d")
    pool = printed_positions(small_q, "nn.max_pool2d")[0]
    with pytest.raises(GraphPackError, match=rf"no call of nn.max_pool2d at position %{pool + 1}.*at: %{pool}"):
        graph_pack(small_q, start_name_idx=pool + 1)
    # the stop must come after the start
    with pytest.raises(GraphPackError, match="no call of nn.max_pool2d after the start"):
        graph_pack(small_q, start_name="nn.global_avg_pool2d", stop_name="nn.max_pool2d")


def test_error_start_not_in_nchw():
    mod = rb.parse(H + '''
def @main(%x: Tensor[(1, 8, 8, 16), float32]) {
  %0 = nn.max_pool2d(%x, pool_size=[2, 2], layout="NHWC");
  nn.global_avg_pool2d(%0, layout="NHWC")
}''')
    with pytest.raises(GraphPackError, match=r"nn.max_pool2d \(%0\) gives its result .* in layout NHWC"):
        graph_pack(mod)


def test_bias_variable_is_not_a_residual():
    """An ``add`` of a (C, 1, 1) bias that is a variable (weights left unbound) is packed as a
    broadcast operand, with no fusion boundary; the result still matches the original."""
    mod = rb.parse(H + '''
def @main(%x: Tensor[(1, 16, 4, 4), int8], %w: Tensor[(16, 16, 1, 1), int8], %b: Tensor[(16, 1, 1), int32]) {
  %0 = nn.max_pool2d(%x, pool_size=[1, 1]);
  %1 = nn.conv2d(%0, %w, channels=16, kernel_size=[1, 1], out_dtype="int32");
  %2 = add(%1, %b);
  nn.global_avg_pool2d(%2)
}''')
    packed = graph_pack(mod)
    (add,) = calls(packed, "add")
    assert add.args[0].op.name == "nn.conv2d" and add.args[1].op.name == "layout_transform"
    # the weight variable is transformed at run time
    conv = add.args[0]
    assert conv.args[1].op.name == "layout_transform" and conv.attrs["kernel_layout"] == "OIHW16o16i"
    rng = np.random.default_rng(4)
    args = [rng.integers(-100, 100, (1, 16, 4, 4)).astype("int8"),
            rng.integers(-100, 100, (16, 16, 1, 1)).astype("int8"),
            rng.integers(-1000, 1000, (16, 1, 1)).astype("int32")]
    expect = (conv2d_numpy(args[0], args[1], 1, 0) + args[2]).mean(axis=(2, 3), keepdims=True)
    np.testing.assert_array_equal(interpret(packed, *args), np.trunc(expect).astype("int32"))
    np.testing.assert_array_equal(compiled(packed, x=args[0], w=args[1], b=args[2]),
                                  interpret(mod, *args))


def test_error_options():
    mod = rb.parse(H + 'def @main(%x: Tensor[(1, 16, 4, 4), float32]) { nn.relu(%x) }')
    with pytest.raises(GraphPackError, match="weight_bits=4"):
        graph_pack(mod, weight_bits=4)
    with pytest.raises(GraphPackError, match="cfactor must be a positive int"):
        graph_pack(mod, cfactor=0)


# ---- ResNet-18 ---------------------------------------------------------------------------------

def test_resnet18_packed_bit_exact():
    mod, params = rb.models.resnet18(image_shape=(3, 32, 32), num_classes=10)
    q = quantized(mod, params)
    packed = graph_pack(q)
    convs = calls(packed, "nn.conv2d")
    assert sum(c.attrs["data_layout"] == "NCHW1n16c" for c in convs) == 19 == len(convs) - 1
    assert op_histogram(packed["main"])["layout_transform"] == 2
    for c in convs[1:]:
        assert c.attrs["kernel_layout"] == "OIHW16o16i"
        assert [a.checked_type.dtype for a in c.args] == ["int8", "int8"]
    x = image((1, 3, 32, 32), seed=7)
    np.testing.assert_array_equal(compiled(packed, data=x), compiled(q, data=x))
    np.testing.assert_array_equal(interpret(packed, x), interpret(q, x))
    assert infer_expr(packed["main"]).ret_type == infer_expr(q["main"]).ret_type


def test_int32_results_can_stay_unpacked(small_q):
    """``pack_int32_results=False`` (what the accelerator's build asks for): the convolution
    whose int32 result flows to the stop without becoming int8 stays in NCHW; the others are
    packed; the result is the same bit for bit."""
    packed = graph_pack(small_q, pack_int32_results=False)
    convs = calls(packed, "nn.conv2d")
    kinds = [c.attrs["data_layout"] for c in convs]
    assert kinds == ["NCHW", "NCHW1n16c", "NCHW1n16c", "NCHW"]
    assert convs[-1].checked_type.dtype == "int32"
    x = image((1, 3, 16, 16), seed=9)
    np.testing.assert_array_equal(interpret(packed, x), interpret(small_q, x))
    np.testing.assert_array_equal(compiled(packed, data=x), compiled(small_q, data=x))
