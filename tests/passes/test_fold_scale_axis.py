"""FoldScaleAxis: before/expected programs for the backward and forward folds, the cases that must
not fold, the folded weights against numpy, the zoo before and after, and a 20,000-op chain."""

import doctest

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.ir import assert_structural_equal, op_histogram, post_order
from relaybench.passes import fold_scale_axis
from relaybench.testing import run_infer_type

H = '#[version = "0.0.5"]\n'


def backward(mod):
    with rb.PassContext(opt_level=3):
        return rb.passes.BackwardFoldScaleAxis()(mod)


def forward(mod):
    with rb.PassContext(opt_level=3):
        return rb.passes.ForwardFoldScaleAxis()(mod)


def module(params, body):
    return rb.IRModule.from_expr(rb.Function(params, body))


def typed(mod):
    return rb.passes.InferType()(mod)


def run(mod, *args):
    return rb.create_executor("interpreter", mod=mod).evaluate()(*args)


def random_args(mod, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal([int(d) for d in p.type_annotation.shape]).astype("float32")
            for p in mod["main"].params]


def check_same_outputs(before, after, seed=0):
    args = random_args(before, seed)
    np.testing.assert_allclose(run(after, *args), run(before, *args), rtol=1e-5, atol=1e-5)


def positive(shape, seed=1):
    return rb.const(np.random.default_rng(seed).uniform(0.5, 2.0, shape).astype("float32"))


def squeeze(s, axes):
    return op.squeeze(s, axis=axes)


def expand(s, n):
    """Relay's ExpandBiasToMatchAxis form: a 1-d scale followed by ``n`` axes of 1."""
    return op.expand_dims(s, axis=1, num_newaxis=n)


def test_docstring_examples():
    assert doctest.testmod(fold_scale_axis).failed == 0


def test_pass_info_and_sequence():
    for name, kebab in (("BackwardFoldScaleAxis", "backward-fold-scale-axis"),
                        ("ForwardFoldScaleAxis", "forward-fold-scale-axis")):
        p = rb.passes.get_pass(name)()
        assert (p.info.name, p.info.opt_level, p.info.kebab) == (name, 3, kebab)
    seq = rb.passes.FoldScaleAxis()
    assert (seq.info.name, seq.info.opt_level, seq.info.kebab) == ("FoldScaleAxis", 3, "fold-scale-axis")
    assert [p.info.name for p in seq] == ["BackwardFoldScaleAxis", "ForwardFoldScaleAxis", "FoldConstant"]
    assert [p.info.name for p in rb.passes.parse_pipeline("fold-scale-axis")] == ["FoldScaleAxis"]


# ---------------------------------------------------------------------------------------------
# Backward: conv -> ... -> multiply

def test_backward_scale_after_conv_goes_into_the_weight():
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 3, 4, 4), float32], %w: Tensor[(2, 3, 3, 3), float32], %s: Tensor[(2, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=2, kernel_size=[3, 3]);
  multiply(%0, %s)
}""")
    after = backward(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(typed(rb.parse(H + """
def @main(%x: Tensor[(1, 3, 4, 4), float32], %w: Tensor[(2, 3, 3, 3), float32], %s: Tensor[(2, 1, 1), float32]) {
  %0 = squeeze(%s, axis=[1, 2]);
  %1 = expand_dims(%0, axis=1, num_newaxis=3);
  %2 = multiply(%w, %1);
  nn.conv2d(%x, %2, padding=[1, 1, 1, 1], channels=2, kernel_size=[3, 3])
}"""))), map_free_vars=True)
    check_same_outputs(before, after)


def test_backward_through_bias_relu_and_residual_add():
    x = rb.var("x", shape=(1, 4, 5, 5))
    w1, w2 = rb.var("w1", shape=(8, 4, 3, 3)), rb.var("w2", shape=(8, 4, 1, 1))
    b, bias = rb.var("b", shape=(8, 1, 1)), rb.var("bias", shape=(8,))
    s = positive((8, 1, 1))

    def conv1(w):
        return op.nn.conv2d(x, w, padding=1, channels=8, kernel_size=3)

    def conv2(w):
        return op.nn.conv2d(x, w, channels=8, kernel_size=1)

    # relu(conv1 + b) + bias_add(conv2, bias), then the scale: a scale after relu must be positive
    before = module([x, w1, w2, b, bias],
                    op.multiply(op.add(op.nn.relu(op.add(conv1(w1), b)), op.nn.bias_add(conv2(w2), bias)), s))
    after = backward(before)
    sq = squeeze(s, [1, 2])
    exp = module([x, w1, w2, b, bias],
                 op.add(op.nn.relu(op.add(conv1(op.multiply(w1, expand(sq, 3))), op.multiply(b, expand(sq, 2)))),
                        op.nn.bias_add(conv2(op.multiply(w2, expand(sq, 3))), op.multiply(bias, sq))))
    assert_structural_equal(run_infer_type(after), run_infer_type(typed(exp)), map_free_vars=True)
    check_same_outputs(before, after)


def test_backward_combines_scales_and_handles_dense():
    x, w = rb.var("x", shape=(2, 6)), rb.var("w", shape=(3, 6))
    s1, s2 = rb.var("s1", shape=(3,)), rb.var("s2", shape=(1, 3))
    before = module([x, w, s1, s2], op.multiply(s2, op.multiply(op.nn.dense(x, w), s1)))
    after = backward(before)
    exp = module([x, w, s1, s2], op.nn.dense(x, op.multiply(w, expand(op.multiply(squeeze(s2, [0]), s1), 1))))
    assert_structural_equal(run_infer_type(after), run_infer_type(typed(exp)), map_free_vars=True)
    check_same_outputs(before, after)


@pytest.mark.parametrize("case", ["height_axis", "used_twice", "relu_unknown_sign", "relu_negative",
                                  "broadcasts_bigger", "not_a_conv", "ones_not_reaching_the_channels"])
def test_backward_leaves_these_alone(case):
    x, w = rb.var("x", shape=(1, 3, 4, 4)), rb.var("w", shape=(2, 3, 1, 1))
    conv = op.nn.conv2d(x, w, channels=2, kernel_size=1)
    s = rb.var("s", shape=(2, 1, 1))
    params = [x, w, s]
    if case == "height_axis":           # varies along H, not along the channels
        params[2] = s = rb.var("s", shape=(4, 1))
        body = op.multiply(conv, s)
    elif case == "used_twice":          # the convolution's output is read elsewhere too
        body = rb.Tuple([op.multiply(conv, s), conv])
    elif case == "relu_unknown_sign":   # relu(x) * s == relu(x * s) needs s > 0
        body = op.multiply(op.nn.relu(conv), s)
    elif case == "relu_negative":
        params = [x, w]
        body = op.multiply(op.nn.relu(conv), rb.const(np.array([1.0, -2.0], "float32").reshape(2, 1, 1)))
    elif case == "broadcasts_bigger":   # the product is bigger than the convolution's output
        params[2] = s = rb.var("s", shape=(3, 2, 1, 1))
        body = op.multiply(conv, s)
    elif case == "ones_not_reaching_the_channels":   # Relay needs the scale's channel size to match
        params[2] = s = rb.var("s", shape=(1, 1, 1))
        body = op.multiply(conv, s)
    else:
        body = op.multiply(op.nn.max_pool2d(conv, pool_size=2), s)
    mod = typed(module(params, body))
    assert backward(mod) is mod
    assert forward(mod) is mod


# ---------------------------------------------------------------------------------------------
# Forward: multiply -> ... -> conv

def test_forward_scale_before_conv_goes_into_the_weight():
    before = rb.parse(H + """
def @main(%x: Tensor[(1, 3, 4, 4), float32], %w: Tensor[(2, 3, 3, 3), float32], %s: Tensor[(3, 1, 1), float32]) {
  %0 = multiply(%x, %s);
  nn.conv2d(%0, %w, padding=[1, 1, 1, 1], channels=2, kernel_size=[3, 3])
}""")
    after = forward(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(typed(rb.parse(H + """
def @main(%x: Tensor[(1, 3, 4, 4), float32], %w: Tensor[(2, 3, 3, 3), float32], %s: Tensor[(3, 1, 1), float32]) {
  %0 = squeeze(%s, axis=[1, 2]);
  %1 = expand_dims(%0, axis=1, num_newaxis=2);
  %2 = multiply(%w, %1);
  nn.conv2d(%x, %2, padding=[1, 1, 1, 1], channels=2, kernel_size=[3, 3])
}"""))), map_free_vars=True)
    check_same_outputs(before, after)


def test_forward_through_add_and_relu_into_two_convs():
    x = rb.var("x", shape=(1, 4, 5, 5))
    w1, w2, b = rb.var("w1", shape=(6, 4, 3, 3)), rb.var("w2", shape=(2, 4, 1, 1)), rb.var("b", shape=(4, 1, 1))
    s = positive((4, 1, 1))

    def convs(h, v1, v2):
        return rb.Tuple([op.nn.conv2d(h, v1, padding=1, channels=6, kernel_size=3),
                         op.nn.conv2d(h, v2, channels=2, kernel_size=1)])

    before = module([x, w1, w2, b], convs(op.nn.relu(op.add(op.multiply(x, s), b)), w1, w2))
    after = forward(before)
    sq = squeeze(s, [1, 2])
    h = op.nn.relu(op.add(x, op.divide(b, expand(sq, 2))))
    exp = module([x, w1, w2, b], convs(h, op.multiply(w1, expand(sq, 2)), op.multiply(w2, expand(sq, 2))))
    assert_structural_equal(run_infer_type(after), run_infer_type(typed(exp)), map_free_vars=True)
    args = random_args(before)
    for a, e in zip(run(after, *args), run(before, *args)):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)


def test_forward_depthwise_and_dense():
    x, w = rb.var("x", shape=(1, 4, 5, 5)), rb.var("w", shape=(4, 1, 3, 3))
    s = rb.var("s", shape=(4, 1, 1))
    before = module([x, w, s], op.nn.conv2d(op.multiply(s, x), w, groups=4, channels=4, kernel_size=3))
    after = forward(before)
    # depthwise, one output channel per group: input channel c is output channel c
    exp = module([x, w, s], op.nn.conv2d(x, op.multiply(w, expand(squeeze(s, [1, 2]), 3)), groups=4, channels=4,
                                         kernel_size=3))
    assert_structural_equal(run_infer_type(after), run_infer_type(typed(exp)), map_free_vars=True)
    check_same_outputs(before, after)

    d, v, t = rb.var("d", shape=(2, 6)), rb.var("v", shape=(3, 6)), rb.var("t", shape=(6,))
    before = module([d, v, t], op.nn.dense(op.multiply(d, t), v))
    exp = module([d, v, t], op.nn.dense(d, op.multiply(v, t)))
    assert_structural_equal(run_infer_type(forward(before)), run_infer_type(typed(exp)), map_free_vars=True)
    check_same_outputs(before, forward(before))


@pytest.mark.parametrize("case", ["also_returned", "pooled_too", "relu_unknown_sign", "grouped"])
def test_forward_leaves_these_alone(case):
    x, w = rb.var("x", shape=(1, 4, 4, 4)), rb.var("w", shape=(2, 4, 1, 1))
    s = rb.var("s", shape=(4, 1, 1))
    scaled = op.multiply(x, s)
    if case == "also_returned":         # every use of the product must take it scaled
        body = rb.Tuple([op.nn.conv2d(scaled, w, channels=2, kernel_size=1), scaled])
    elif case == "pooled_too":
        body = rb.Tuple([op.nn.conv2d(scaled, w, channels=2, kernel_size=1), op.nn.max_pool2d(scaled)])
    elif case == "relu_unknown_sign":
        body = op.nn.conv2d(op.nn.relu(scaled), w, channels=2, kernel_size=1)
    else:                               # a grouped convolution mixes channels within each group
        w = rb.var("w", shape=(2, 2, 1, 1))
        body = op.nn.conv2d(scaled, w, groups=2, channels=2, kernel_size=1)
    mod = typed(module([x, w, s], body))
    assert forward(mod) is mod


# ---------------------------------------------------------------------------------------------
# FoldScaleAxis with FoldConstant: the weights against numpy

def test_fold_scale_axis_folds_into_constant_weights():
    rng = np.random.default_rng(3)
    wv = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    sv = rng.uniform(0.5, 2.0, 4).astype("float32")
    tv = rng.uniform(0.5, 2.0, 3).astype("float32")
    x = rb.var("x", shape=(1, 3, 6, 6))
    before = module([x], op.multiply(op.nn.conv2d(op.multiply(x, rb.const(tv.reshape(3, 1, 1))), rb.const(wv),
                                                  padding=1, channels=4, kernel_size=3),
                                     rb.const(sv.reshape(4, 1, 1))))
    with rb.PassContext(opt_level=3):
        after = rb.passes.FoldScaleAxis()(before)
    body = after["main"].body
    assert body.op.name == "nn.conv2d" and body.args[0] is after["main"].params[0]
    folded = body.args[1].data
    np.testing.assert_allclose(folded, wv * sv[:, None, None, None] * tv[None, :, None, None], rtol=1e-6)
    check_same_outputs(before, after)


# ---------------------------------------------------------------------------------------------
# The zoo

SMALL = dict(image_shape=(3, 32, 32), num_classes=10)


@pytest.mark.parametrize("name, multiplies", [("resnet18", 20), ("mobilenet_v2", 52)])
def test_zoo_batch_norm_scales_fold_into_the_convolutions(name, multiplies):
    mod, params = rb.models.get(name, **SMALL)
    with rb.PassContext(opt_level=3):
        inference = rb.passes.SimplifyInference()(mod)
        bound = rb.passes.FoldConstant()(rb.passes.bind_params(inference, params))
        assert op_histogram(bound["main"])["multiply"] == multiplies    # one per batch norm
        after = rb.passes.FoldScaleAxis()(bound)
        # with the weights as parameters the scales are expressions of them; they fold too
        unbound = rb.passes.BackwardFoldScaleAxis()(inference)
    assert op_histogram(after["main"])["multiply"] == 0
    convs = [n for n in post_order(unbound["main"].body) if isinstance(n, rb.Call) and n.op.name == "nn.conv2d"]
    assert all(c.args[1].op.name == "multiply" for c in convs)
    data = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    expected = run(mod, data, *params.values())
    np.testing.assert_allclose(run(after, data), expected, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(run(unbound, data, *params.values()), expected, rtol=1e-4, atol=1e-7)


# Deep enough that any recursion on program depth fails (Python stops at 1,000 frames);
# tests/test_scale.py takes 100,000 operators through the whole pipeline.
DEEP = 20_000


def test_deep_chain_of_relus():
    x, w = rb.var("x", shape=(1, 2, 2, 2)), rb.var("w", shape=(2, 2, 1, 1))
    y = op.nn.conv2d(x, w, channels=2, kernel_size=1)
    for _ in range(DEEP):
        y = op.nn.relu(y)
    before = module([x, w], op.multiply(y, positive((2, 1, 1))))
    after = backward(before)
    body = after["main"].body
    assert body.op.name == "nn.relu"
    hist = op_histogram(after["main"])
    assert hist["nn.relu"] == DEEP and hist["multiply"] == 1    # the one on the weight


# ---------------------------------------------------------------------------------------------
# Relay's forms (tests/python/relay/test_pass_fold_scale_axis.py): the scale squeezed to the
# channels, laid along the weight's axis with expand_dims; the results unchanged

def conv3x3(x, w, channels, **layouts):
    return op.nn.conv2d(x, w, channels=channels, kernel_size=(3, 3), padding=(1, 1), **layouts)


def test_relay_fold_fwd_simple():
    x, w, in_bias = rb.var("x", shape=(2, 4, 10, 10)), rb.var("weight", shape=(2, 4, 3, 3)), rb.var("in_bias", shape=(4, 1, 1))
    in_scale = positive((4, 1, 1))
    before = module([x, w, in_bias], conv3x3(op.add(op.nn.relu(op.multiply(x, in_scale)), in_bias), w, 2))
    sq = op.squeeze(in_scale, axis=[1, 2])
    expected = module([x, w, in_bias], conv3x3(
        op.add(op.nn.relu(x), op.divide(in_bias, op.expand_dims(sq, axis=1, num_newaxis=2))),
        op.multiply(w, op.expand_dims(sq, axis=1, num_newaxis=2)), 2))
    after = forward(typed(before))
    assert_structural_equal(run_infer_type(after), run_infer_type(typed(expected)), map_free_vars=True)
    check_same_outputs(before, after)


def test_relay_fold_fwd_dual_path_depthwise_nhwc():
    x, w, in_bias = rb.var("x", shape=(2, 4, 10, 3)), rb.var("weight", shape=(3, 3, 1, 3)), rb.var("in_bias", shape=(3,))
    in_scale = positive((3,))
    nhwc = dict(data_layout="NHWC", kernel_layout="HWIO", groups=3)

    def body(h, w1, w2):
        return op.add(conv3x3(h, w1, 3, **nhwc), conv3x3(h, w2, 3, **nhwc))

    h = op.subtract(op.nn.relu(op.multiply(in_scale, x)), in_bias)
    before = module([x, w, in_bias], body(h, w, w))
    # HWIO's O is the last axis: the 1-d scale multiplies the weight as it is
    h2 = op.subtract(op.nn.relu(x), op.divide(in_bias, in_scale))
    expected = module([x, w, in_bias], body(h2, op.multiply(w, in_scale), op.multiply(w, in_scale)))
    after = forward(typed(before))
    assert_structural_equal(run_infer_type(after), run_infer_type(typed(expected)), map_free_vars=True)
    check_same_outputs(before, after)


def test_relay_fold_fwd_negative_scale_and_dense():
    x, w = rb.var("x", shape=(2, 4, 10, 10)), rb.var("weight", shape=(4, 4, 3, 3))
    in_scale = rb.const(-np.random.default_rng(2).uniform(0.5, 1, (4, 1, 1)).astype("float32"))
    before = module([x, w], conv3x3(op.multiply(x, in_scale), w, 4))
    sq = op.squeeze(in_scale, axis=[1, 2])
    expected = module([x, w], conv3x3(x, op.multiply(w, op.expand_dims(sq, axis=1, num_newaxis=2)), 4))
    after = forward(typed(before))
    assert_structural_equal(run_infer_type(after), run_infer_type(typed(expected)), map_free_vars=True)
    check_same_outputs(before, after)

    d, v, b = rb.var("x", shape=(3, 5)), rb.var("weight", shape=(4, 5)), rb.var("in_bias", shape=(5,))
    s = positive((5,))
    before = module([d, v, b], op.nn.dense(op.add(op.nn.relu(op.multiply(d, s)), b), v))
    expected = module([d, v, b], op.nn.dense(op.add(op.nn.relu(d), op.divide(b, s)), op.multiply(v, s)))
    after = forward(typed(before))
    assert_structural_equal(run_infer_type(after), run_infer_type(typed(expected)), map_free_vars=True)
    check_same_outputs(before, after)


def test_relay_fold_bwd_simple():
    x, w, out_bias = rb.var("x", shape=(2, 4, 10, 10)), rb.var("weight", shape=(8, 4, 3, 3)), rb.var("out_bias", shape=(8,))
    out_scale = positive((8, 1, 1))

    def bias():
        return op.expand_dims(out_bias, axis=1, num_newaxis=2)

    before = module([x, w, out_bias], op.multiply(op.nn.relu(op.add(conv3x3(x, w, 8), bias())), out_scale))
    sq = op.squeeze(out_scale, axis=[1, 2])   # one node, shared by the weight and the bias
    expected = module([x, w, out_bias], op.nn.relu(op.add(
        conv3x3(x, op.multiply(w, op.expand_dims(sq, axis=1, num_newaxis=3)), 8),
        op.multiply(bias(), op.expand_dims(sq, axis=1, num_newaxis=2)))))
    after = backward(typed(before))
    assert_structural_equal(run_infer_type(after), run_infer_type(typed(expected)), map_free_vars=True)
    check_same_outputs(before, after)


def test_relay_fold_bwd_dual_path_and_dual_consumer():
    x, w = rb.var("x", shape=(2, 4, 10, 10)), rb.var("weight", shape=(4, 4, 3, 3))
    out_scale = positive((4, 1, 1))

    def fold(sq):
        return op.multiply(w, op.expand_dims(sq, axis=1, num_newaxis=3))

    # two paths meet in an add, then the scale: one squeezed scale for both weights
    before = module([x, w], op.multiply(op.add(op.nn.relu(conv3x3(x, w, 4)), op.nn.relu(conv3x3(x, w, 4))),
                                        out_scale))
    sq = op.squeeze(out_scale, axis=[1, 2])
    expected = module([x, w], op.add(op.nn.relu(conv3x3(x, fold(sq), 4)), op.nn.relu(conv3x3(x, fold(sq), 4))))
    after = backward(typed(before))
    assert_structural_equal(run_infer_type(after), run_infer_type(typed(expected)), map_free_vars=True)
    check_same_outputs(before, after)

    # three scales, one per convolution: each gets its own squeeze
    y0 = op.nn.relu(op.multiply(conv3x3(x, w, 4), out_scale))
    y1 = op.nn.relu(op.multiply(conv3x3(y0, w, 4), out_scale))
    y2 = op.nn.relu(op.multiply(conv3x3(y0, w, 4), out_scale))
    before = module([x, w], op.add(y1, y2))

    def squeezed():
        return op.squeeze(out_scale, axis=[1, 2])

    e0 = op.nn.relu(conv3x3(x, fold(squeezed()), 4))
    expected = module([x, w], op.add(op.nn.relu(conv3x3(e0, fold(squeezed()), 4)),
                                     op.nn.relu(conv3x3(e0, fold(squeezed()), 4))))
    after = backward(typed(before))
    assert_structural_equal(run_infer_type(after), run_infer_type(typed(expected)), map_free_vars=True)
    check_same_outputs(before, after)


def test_relay_fold_bwd_scalar_constant_scale():
    # a scalar scale is repeated along the channels; with constant weights it all folds away
    rng = np.random.default_rng(5)
    wv, bv = rng.standard_normal((4, 3, 3, 3)).astype("float32"), rng.standard_normal((4, 1, 1)).astype("float32")
    x = rb.var("data", shape=(1, 3, 8, 8))
    before = module([x], op.multiply(op.nn.relu(op.add(conv3x3(x, rb.const(wv), 4), rb.const(bv))),
                                     rb.const(np.float32(2.0))))
    two = op.repeat(op.expand_dims(rb.const(np.float32(2.0)), axis=0, num_newaxis=1), repeats=4, axis=0)
    unfolded = module([x], op.nn.relu(op.add(
        conv3x3(x, op.multiply(rb.const(wv), op.expand_dims(two, axis=1, num_newaxis=3)), 4),
        op.multiply(rb.const(bv), op.expand_dims(two, axis=1, num_newaxis=2)))))
    # the repeated scale is one node, shared by the weight and the bias
    assert_structural_equal(run_infer_type(backward(typed(before))), run_infer_type(typed(unfolded)), map_free_vars=True)
    with rb.PassContext(opt_level=3):
        after = rb.passes.FoldScaleAxis()(typed(before))
    body = after["main"].body
    assert body.op.name == "nn.relu" and op_histogram(after) == {"nn.relu": 1, "add": 1, "nn.conv2d": 1}
    conv, b = body.args[0].args
    np.testing.assert_allclose(conv.args[1].data, wv * 2, rtol=1e-6)
    np.testing.assert_allclose(b.data, bv * 2, rtol=1e-6)
    check_same_outputs(before, after)
