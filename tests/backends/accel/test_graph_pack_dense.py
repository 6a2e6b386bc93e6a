"""graph_pack on dense layers: a requantized int8 dense packs as a 1x1 convolution (VTA's dense),
checked against the unpacked quantized program on the interpreter, bit for bit."""

import numpy as np

import relaybench as rb
from relaybench.ir import op_histogram, post_order
from relaybench.ir.expr import Call
from relaybench.passes.fuse_ops import fused_groups
from relaybench.passes.graph_pack import graph_pack

from accel_programs import quantized_mlp


def interpret(mod, *args):
    return np.asarray(rb.create_executor("interpreter", mod=mod).evaluate()(*args))


def test_requantized_dense_layers_pack_as_1x1_convolutions():
    """Each dense whose result is requantized to int8 becomes a packed 1x1 convolution whose
    epilogue fuses with it; the value between two of them stays packed; the last dense (its int32
    result is dequantized) stays a dense. The packed program computes the same integers."""
    q, x = quantized_mlp()
    packed = graph_pack(q, start_name=None, stop_name=None, pack_int32_results=False)
    hist = op_histogram(packed["main"])
    assert hist["nn.conv2d"] == 2 and hist["nn.dense"] == 1
    convs = [n for n in post_order(packed["main"].body)
             if isinstance(n, Call) and getattr(n.op, "name", "") == "nn.conv2d"]
    assert all(c.attrs["data_layout"] == "NCHW1n16c" and c.attrs["kernel_layout"] == "OIHW16o16i"
               for c in convs)
    # packed -> NCHW once before the last dense, NCHW -> packed once at the first
    assert hist["layout_transform"] == 2
    np.testing.assert_array_equal(interpret(packed, x), interpret(q, x))
    opt = rb.passes.optimize(packed, opt_level=3, disabled_pass=["AlterOpLayout"])
    conv_groups = [g for g in fused_groups(opt) if "nn.conv2d" in g.ops]
    assert len(conv_groups) == 2
    assert all(g.ops[0] == "nn.conv2d" and g.ops[-1] == "cast" and "right_shift" in g.ops
               for g in conv_groups)


def test_dense_the_blocks_do_not_divide_stays_a_dense():
    q, x = quantized_mlp(sizes=(24, 32, 10))      # K = 24 is not a multiple of cfactor 16
    packed = graph_pack(q, start_name=None, stop_name=None, pack_int32_results=False)
    assert "nn.conv2d" not in op_histogram(packed["main"])
    np.testing.assert_array_equal(interpret(packed, x), interpret(q, x))
    packed = graph_pack(q, start_name=None, stop_name=None, pack_dense=False)
    assert "nn.conv2d" not in op_histogram(packed["main"])
