"""QuantizeAnnotate places simulated_quantize where Relay's _annotate.py rules put them.

The expected programs are derived by hand from the rules (see relaybench/quantize/annotate.py):
conv2d quantizes its data as INPUT and its weight as WEIGHT and gives an ACTIVATION; a value
with a kind used twice is quantized as INPUT before its uses; add(ACTIVATION, INPUT) is an
ACTIVATION; dense is left alone unless skip_dense_layer=False.
"""

import pytest

import relaybench as rb
from relaybench.quantize import QuantizeAnnotate, qconfig

MODEL = '''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 2, 6, 6), float32], %w1: Tensor[(4, 2, 3, 3), float32],
          %w2: Tensor[(4, 4, 3, 3), float32], %wd: Tensor[(3, 144), float32]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1], channels=4, kernel_size=[3, 3]);
  %1 = nn.relu(%0);
  %2 = nn.conv2d(%1, %w2, padding=[1, 1], channels=4, kernel_size=[3, 3]);
  %3 = add(%2, %1);
  %4 = nn.relu(%3);
  %5 = nn.batch_flatten(%4);
  nn.dense(%5, %wd, units=3)
}'''

SQ = "relay.op.annotation.simulated_quantize"
HEAD = ('def @main(%x: Tensor[(1, 2, 6, 6), float32], %w1: Tensor[(4, 2, 3, 3), float32], '
        '%w2: Tensor[(4, 4, 3, 3), float32], %wd: Tensor[(3, 144), float32]')


def _scalars(n):
    return "".join(f", %s{i}: float32, %lo{i}: float32, %hi{i}: float32" for i in range(n))


def _sq(i, data, kind):
    return f"{SQ}({data}, %s{i}, %lo{i}, %hi{i}, kind={kind})"


def _annotate(**knobs):
    with qconfig(**knobs):
        return QuantizeAnnotate()(rb.parse(MODEL))


def _expected(body, n):
    return rb.passes.InferType()(rb.parse('#[version = "0.0.5"]\n' + HEAD + _scalars(n) + ") {\n" + body + "\n}"))


def test_every_conv_and_dense():
    """skip_conv_layers=None, skip_dense_layer=False: conv0 quantizes x and w1; its relu is an
    ACTIVATION used twice, so it is quantized as INPUT (one call shared by conv1 and add);
    the add is ACTIVATION + INPUT; dense quantizes the flattened ACTIVATION as INPUT."""
    got = _annotate(skip_conv_layers=None, skip_dense_layer=False)
    body = f'''
  %0 = {_sq(0, "%x", 1)};
  %1 = {_sq(1, "%w1", 2)};
  %2 = nn.conv2d(%0, %1, padding=[1, 1], channels=4, kernel_size=[3, 3]);
  %3 = nn.relu(%2);
  %4 = {_sq(2, "%3", 1)};
  %5 = {_sq(3, "%w2", 2)};
  %6 = nn.conv2d(%4, %5, padding=[1, 1], channels=4, kernel_size=[3, 3]);
  %7 = add(%6, %4);
  %8 = nn.relu(%7);
  %9 = nn.batch_flatten(%8);
  %10 = {_sq(4, "%9", 1)};
  %11 = {_sq(5, "%wd", 2)};
  nn.dense(%10, %11, units=3)'''
    rb.assert_structural_equal(got["main"], _expected(body, 6)["main"], map_free_vars=True)


def test_default_skips_first_conv_and_dense():
    """Defaults: skip_conv_layers=[0] leaves conv0 (and what precedes it) in float, so conv1
    quantizes the float relu as INPUT and the add quantizes it again with the same call;
    skip_dense_layer leaves the dense in float on the (unquantized) result."""
    got = _annotate()
    body = f'''
  %0 = nn.conv2d(%x, %w1, padding=[1, 1], channels=4, kernel_size=[3, 3]);
  %1 = nn.relu(%0);
  %2 = {_sq(0, "%1", 1)};
  %3 = {_sq(1, "%w2", 2)};
  %4 = nn.conv2d(%2, %3, padding=[1, 1], channels=4, kernel_size=[3, 3]);
  %5 = add(%4, %2);
  %6 = nn.relu(%5);
  %7 = nn.batch_flatten(%6);
  nn.dense(%7, %wd, units=3)'''
    rb.assert_structural_equal(got["main"], _expected(body, 2)["main"], map_free_vars=True)


def test_debug_enabled_ops_limits_the_rules():
    got = _annotate(skip_conv_layers=None, debug_enabled_ops=["nn.conv2d"])
    text = got["main"].astext()
    kinds = [c.attrs.kind for c in rb.ir.functor.post_order(got["main"].body)
             if isinstance(c, rb.Call) and c.op.name == SQ]
    # conv0 and conv1 are annotated (4 calls); relu, add, dense have no rule here, so conv1's
    # data is conv0's ACTIVATION quantized as INPUT by conv1's own rule
    assert kinds == [1, 2, 1, 2]
    assert "nn.dense(%" in text


def test_skip_second_conv():
    got = _annotate(skip_conv_layers=[1])
    calls = [c for c in rb.ir.functor.post_order(got["main"].body)
             if isinstance(c, rb.Call) and c.op.name == SQ]
    # conv0 quantized (x INPUT, w1 WEIGHT); then the counter stands at the skipped index 1
    # until conv1 is visited, so the relu after conv0 is skipped too (it takes conv0's result
    # as a float), conv1 is skipped, and the add and relu after it see only float values
    assert [c.attrs.kind for c in calls] == [1, 2]
    relu = got["main"].body.args[0].args[0].args[0].args[1]
    assert relu.op.name == "nn.relu" and relu.args[0].op.name == "nn.conv2d"
    assert calls[0].args[0].name_hint == "x" and calls[1].args[0].name_hint == "w1"


def test_annotated_program_runs_and_keeps_types():
    got = _annotate(skip_conv_layers=None, skip_dense_layer=False)
    assert got["main"].checked_type.ret_type == rb.TensorType((1, 3), "float32")
    # 6 calls -> 18 scalar parameters after the 4 of the model
    assert len(got["main"].params) == 4 + 18
    assert rb.parse(got.astext()) is not None


def test_a_let_is_a_boundary():
    """The dataflow in a let's value is annotated; the value the let binds is plain (float), so
    the relu after it has nothing to annotate."""
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 4), float32], %w: Tensor[(2, 4), float32]) {
  let %y = nn.dense(%x, %w); nn.relu(%y)
}''')
    with qconfig(skip_dense_layer=False, skip_conv_layers=None):
        got = QuantizeAnnotate()(mod)["main"]
    let = got.body
    assert isinstance(let, rb.ir.Let) and let.value.op.name == "nn.dense"
    assert [a.op.name for a in let.value.args] == [SQ, SQ]
    assert let.body.op.name == "nn.relu" and let.body.args[0] is let.var


def test_max_pool_and_concatenate_rules():
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 2, 4, 4), float32], %w: Tensor[(2, 2, 1, 1), float32], %y: Tensor[(1, 2, 2, 2), float32]) {
  %0 = nn.conv2d(%x, %w, kernel_size=[1, 1]);
  %1 = nn.max_pool2d(%0, pool_size=[2, 2], strides=[2, 2]);
  concatenate((%1, %y), axis=1)
}''')
    with qconfig(skip_conv_layers=None):
        got = QuantizeAnnotate()(mod)
    calls = [c for c in rb.ir.functor.post_order(got["main"].body)
             if isinstance(c, rb.Call) and c.op.name == SQ]
    # x INPUT, w WEIGHT; max_pool's ACTIVATION input quantized as INPUT; the float %y
    # field of the concatenate is quantized as ACTIVATION
    assert [c.attrs.kind for c in calls] == [1, 2, 1, 3]
    assert calls[2].args[0].op.name == "nn.conv2d"
    assert calls[3].args[0].name_hint == "y"
