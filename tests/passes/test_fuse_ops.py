"""FuseOps and DefuseOps.

Each grouping test compares the fused program with an ``expected()`` program written by hand from
Relay's rules, and runs both programs in the interpreter on random inputs. ResNet-18's groups are
checked against a table written by hand; every model of the zoo gives the same results fused.
"""

import numpy as np
import pytest

import relaybench as rb
from relaybench import models, op
from relaybench.ir import Call, Function, Op, TensorType, var
from relaybench.ir.functor import ExprMutator
from relaybench.ir.structural import assert_structural_equal, structural_equal
from relaybench.op.registry import OpPattern
from relaybench.passes.fuse_ops import (DefuseOps, FuseOps, fused_groups, fused_groups_table,
                                        fusion_partition)
from relaybench.passes.infra import PassContext, parse_pipeline, typed
from relaybench.testing import chain, chain_reference, random_inputs
from relaybench.testing import run_infer_type

HEADER = '#[version = "0.0.5"]\n'


def parse(text):
    return rb.parse(HEADER + text)


def run(mod, *args):
    return rb.create_executor("interpreter", mod=mod).evaluate()(*args)


def assert_same_values(a, b):
    if hasattr(a, "constructor"):  # an ADT value: same constructor, same fields
        assert a.constructor is b.constructor
        assert_same_values(a.fields, b.fields)
        return
    if isinstance(a, (tuple, list)):
        assert isinstance(b, (tuple, list)) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same_values(x, y)
        return
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-6, atol=1e-7)


def assert_same_results(before, after, args=None, seed=0):
    args = random_inputs(before, seed=seed) if args is None else args
    assert_same_values(run(before, *args), run(after, *args))


def check(before_text, expected_text, args=None, **options):
    """Fuse ``before``; compare with ``expected``; same results; DefuseOps undoes it; FuseOps again
    changes nothing."""
    before = parse(before_text)
    after = FuseOps(**options)(before)
    expected = parse(expected_text)
    assert_structural_equal(run_infer_type(after["main"]), run_infer_type(expected["main"]), map_free_vars=True)
    assert_same_results(before, after, args)
    assert_structural_equal(run_infer_type(DefuseOps()(after)["main"]), run_infer_type(before["main"]), map_free_vars=True)
    assert FuseOps(**options)(after) is after
    return after


def group_ops(mod):
    return [g.ops for g in fused_groups(mod)]


# ---------------------------------------------------------------------------------------------
# convolutions and their epilogues


def test_conv_bias_add_relu_is_one_group():
    after = check("""
def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32], %b: Tensor[(4), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
  %1 = nn.bias_add(%0, %b);
  nn.relu(%1)
}""", """
def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32], %b: Tensor[(4), float32]) {
  %2 = fn (%p0: Tensor[(1, 3, 8, 8), float32], %p1: Tensor[(4, 3, 3, 3), float32], %p2: Tensor[(4), float32],
           Primitive=1) -> Tensor[(1, 4, 8, 8), float32] {
    %0 = nn.conv2d(%p0, %p1, padding=[1, 1, 1, 1]);
    %1 = nn.bias_add(%0, %p2);
    nn.relu(%1)
  };
  %2(%x, %w, %b)
}""")
    (g,) = fused_groups(after)
    assert g.ops == ("nn.conv2d", "nn.bias_add", "nn.relu")
    assert g.anchor == "nn.conv2d" and g.pattern is OpPattern.OUT_ELEMWISE_FUSABLE
    assert g.name == "fused_nn_conv2d_nn_bias_add_nn_relu"
    assert [str(t) for t in g.input_types] == [
        "Tensor[(1, 3, 8, 8), float32]", "Tensor[(4, 3, 3, 3), float32]", "Tensor[(4), float32]"]
    assert str(g.output_type) == "Tensor[(1, 4, 8, 8), float32]"


def test_conv_residual_add_relu_is_one_group():
    check("""
def @main(%x: Tensor[(1, 4, 8, 8), float32], %w: Tensor[(4, 4, 3, 3), float32], %r: Tensor[(1, 4, 8, 8), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
  %1 = add(%0, %r);
  nn.relu(%1)
}""", """
def @main(%x: Tensor[(1, 4, 8, 8), float32], %w: Tensor[(4, 4, 3, 3), float32], %r: Tensor[(1, 4, 8, 8), float32]) {
  %2 = fn (%p0: Tensor[(1, 4, 8, 8), float32], %p1: Tensor[(4, 4, 3, 3), float32], %p2: Tensor[(1, 4, 8, 8), float32],
           Primitive=1) -> Tensor[(1, 4, 8, 8), float32] {
    %0 = nn.conv2d(%p0, %p1, padding=[1, 1, 1, 1]);
    %1 = add(%0, %p2);
    nn.relu(%1)
  };
  %2(%x, %w, %r)
}""")


def test_an_input_used_twice_is_one_parameter():
    # the residual is the convolution's own input: one parameter serves both uses
    check("""
def @main(%x: Tensor[(1, 4, 8, 8), float32], %w: Tensor[(4, 4, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
  %1 = add(%0, %x);
  nn.relu(%1)
}""", """
def @main(%x: Tensor[(1, 4, 8, 8), float32], %w: Tensor[(4, 4, 3, 3), float32]) {
  %2 = fn (%p0: Tensor[(1, 4, 8, 8), float32], %p1: Tensor[(4, 4, 3, 3), float32],
           Primitive=1) -> Tensor[(1, 4, 8, 8), float32] {
    %0 = nn.conv2d(%p0, %p1, padding=[1, 1, 1, 1]);
    %1 = add(%0, %p0);
    nn.relu(%1)
  };
  %2(%x, %w)
}""")


def test_diamond_of_elementwise_branches_joins_the_conv():
    # relu's two users meet again at add, its post-dominator; every op on the way is elementwise
    check("""
def @main(%x: Tensor[(1, 4, 8, 8), float32], %w: Tensor[(4, 4, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
  %1 = nn.relu(%0);
  %2 = sigmoid(%1);
  %3 = multiply(%1, 2f);
  add(%2, %3)
}""", """
def @main(%x: Tensor[(1, 4, 8, 8), float32], %w: Tensor[(4, 4, 3, 3), float32]) {
  %5 = fn (%p0: Tensor[(1, 4, 8, 8), float32], %p1: Tensor[(4, 4, 3, 3), float32],
           Primitive=1) -> Tensor[(1, 4, 8, 8), float32] {
    %0 = nn.conv2d(%p0, %p1, padding=[1, 1, 1, 1]);
    %1 = nn.relu(%0);
    %2 = sigmoid(%1);
    %3 = multiply(%1, 2f);
    add(%2, %3)
  };
  %5(%x, %w)
}""")


def test_diamond_through_a_conv_splits_at_the_conv():
    # relu's post-dominator is add, but one path goes through a second conv: no fusion across it;
    # the second conv takes the residual add, whose other input is the first group's result
    check("""
def @main(%x: Tensor[(1, 4, 8, 8), float32], %w1: Tensor[(4, 4, 3, 3), float32], %w2: Tensor[(4, 4, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1, 1, 1]);
  %1 = nn.relu(%0);
  %2 = nn.conv2d(%1, %w2, padding=[1, 1, 1, 1]);
  add(%2, %1)
}""", """
def @main(%x: Tensor[(1, 4, 8, 8), float32], %w1: Tensor[(4, 4, 3, 3), float32], %w2: Tensor[(4, 4, 3, 3), float32]) {
  %1 = fn (%p0: Tensor[(1, 4, 8, 8), float32], %p1: Tensor[(4, 4, 3, 3), float32],
           Primitive=1) -> Tensor[(1, 4, 8, 8), float32] {
    %0 = nn.conv2d(%p0, %p1, padding=[1, 1, 1, 1]);
    nn.relu(%0)
  };
  %2 = %1(%x, %w1);
  %4 = fn (%p0: Tensor[(1, 4, 8, 8), float32], %p1: Tensor[(4, 4, 3, 3), float32],
           Primitive=1) -> Tensor[(1, 4, 8, 8), float32] {
    %3 = nn.conv2d(%p0, %p1, padding=[1, 1, 1, 1]);
    add(%3, %p0)
  };
  %4(%2, %w2)
}""")


def test_diamond_with_an_injective_branch():
    # the transpose on one branch keeps the conv group from reaching add (phase 0 allows only
    # elementwise and broadcast ops on the way); the branches then fuse into add themselves
    check("""
def @main(%x: Tensor[(1, 4, 8, 8), float32], %w: Tensor[(4, 4, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
  %1 = nn.relu(%0);
  %2 = transpose(%1, axes=[0, 1, 3, 2]);
  %3 = sigmoid(%1);
  add(%2, %3)
}""", """
def @main(%x: Tensor[(1, 4, 8, 8), float32], %w: Tensor[(4, 4, 3, 3), float32]) {
  %1 = fn (%p0: Tensor[(1, 4, 8, 8), float32], %p1: Tensor[(4, 4, 3, 3), float32],
           Primitive=1) -> Tensor[(1, 4, 8, 8), float32] {
    %0 = nn.conv2d(%p0, %p1, padding=[1, 1, 1, 1]);
    nn.relu(%0)
  };
  %2 = %1(%x, %w);
  %5 = fn (%p0: Tensor[(1, 4, 8, 8), float32], Primitive=1) -> Tensor[(1, 4, 8, 8), float32] {
    %3 = transpose(%p0, axes=[0, 1, 3, 2]);
    %4 = sigmoid(%p0);
    add(%3, %4)
  };
  %5(%2)
}""")


def test_two_convs_in_a_row_are_two_groups():
    after = check("""
def @main(%x: Tensor[(1, 4, 8, 8), float32], %w1: Tensor[(4, 4, 3, 3), float32], %w2: Tensor[(4, 4, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1, 1, 1]);
  %1 = nn.relu(%0);
  %2 = nn.conv2d(%1, %w2, padding=[1, 1, 1, 1]);
  nn.relu(%2)
}""", """
def @main(%x: Tensor[(1, 4, 8, 8), float32], %w1: Tensor[(4, 4, 3, 3), float32], %w2: Tensor[(4, 4, 3, 3), float32]) {
  %1 = fn (%p0: Tensor[(1, 4, 8, 8), float32], %p1: Tensor[(4, 4, 3, 3), float32],
           Primitive=1) -> Tensor[(1, 4, 8, 8), float32] {
    %0 = nn.conv2d(%p0, %p1, padding=[1, 1, 1, 1]);
    nn.relu(%0)
  };
  %2 = %1(%x, %w1);
  %4 = fn (%p0: Tensor[(1, 4, 8, 8), float32], %p1: Tensor[(4, 4, 3, 3), float32],
           Primitive=1) -> Tensor[(1, 4, 8, 8), float32] {
    %3 = nn.conv2d(%p0, %p1, padding=[1, 1, 1, 1]);
    nn.relu(%3)
  };
  %4(%2, %w2)
}""")
    assert group_ops(after) == [("nn.conv2d", "nn.relu")] * 2


def test_broadcast_edge_counts_as_elementwise_only_at_the_output_shape():
    # dense -> add(bias): the dense result already has add's shape, an elementwise edge: fused.
    # dense -> add(y of a larger shape): the dense result is broadcast: the dense stands alone.
    check("""
def @main(%x: Tensor[(1, 4), float32], %w: Tensor[(3, 4), float32], %b: Tensor[(3), float32]) {
  %0 = nn.dense(%x, %w);
  add(%0, %b)
}""", """
def @main(%x: Tensor[(1, 4), float32], %w: Tensor[(3, 4), float32], %b: Tensor[(3), float32]) {
  %1 = fn (%p0: Tensor[(1, 4), float32], %p1: Tensor[(3, 4), float32], %p2: Tensor[(3), float32],
           Primitive=1) -> Tensor[(1, 3), float32] {
    %0 = nn.dense(%p0, %p1);
    add(%0, %p2)
  };
  %1(%x, %w, %b)
}""")
    check("""
def @main(%x: Tensor[(1, 4), float32], %w: Tensor[(3, 4), float32], %y: Tensor[(2, 3), float32]) {
  %0 = nn.dense(%x, %w);
  add(%0, %y)
}""", """
def @main(%x: Tensor[(1, 4), float32], %w: Tensor[(3, 4), float32], %y: Tensor[(2, 3), float32]) {
  %0 = fn (%p0: Tensor[(1, 4), float32], %p1: Tensor[(3, 4), float32], Primitive=1) -> Tensor[(1, 3), float32] {
    nn.dense(%p0, %p1)
  };
  %1 = %0(%x, %w);
  %2 = fn (%p0: Tensor[(1, 3), float32], %p1: Tensor[(2, 3), float32], Primitive=1) -> Tensor[(2, 3), float32] {
    add(%p0, %p1)
  };
  %2(%1, %y)
}""")


# ---------------------------------------------------------------------------------------------
# injective ops, reductions, tuples


def test_injective_chain_is_one_group():
    check("""
def @main(%x: Tensor[(2, 3, 4), float32]) {
  %0 = reshape(%x, newshape=[6, 4]);
  transpose(%0, axes=[1, 0])
}""", """
def @main(%x: Tensor[(2, 3, 4), float32]) {
  %1 = fn (%p0: Tensor[(2, 3, 4), float32], Primitive=1) -> Tensor[(4, 6), float32] {
    %0 = reshape(%p0, newshape=[6, 4]);
    transpose(%0, axes=[1, 0])
  };
  %1(%x)
}""")
    # an elementwise op in front joins too (phase 0: elementwise into an injective sink)
    after = check("""
def @main(%x: Tensor[(2, 3, 4), float32]) {
  %0 = exp(%x);
  %1 = reshape(%0, newshape=[6, 4]);
  transpose(%1, axes=[1, 0])
}""", """
def @main(%x: Tensor[(2, 3, 4), float32]) {
  %2 = fn (%p0: Tensor[(2, 3, 4), float32], Primitive=1) -> Tensor[(4, 6), float32] {
    %0 = exp(%p0);
    %1 = reshape(%0, newshape=[6, 4]);
    transpose(%1, axes=[1, 0])
  };
  %2(%x)
}""")
    (g,) = fused_groups(after)
    assert g.pattern is OpPattern.INJECTIVE and g.anchor == "transpose"  # the last of the strongest


def test_elementwise_fuses_into_a_reduction_but_not_after_it():
    after = check("""
def @main(%x: Tensor[(2, 5), float32]) {
  %0 = exp(%x);
  %1 = sum(%0, axis=[1]);
  nn.relu(%1)
}""", """
def @main(%x: Tensor[(2, 5), float32]) {
  %1 = fn (%p0: Tensor[(2, 5), float32], Primitive=1) -> Tensor[(2), float32] {
    %0 = exp(%p0);
    sum(%0, axis=[1])
  };
  %2 = %1(%x);
  %3 = fn (%p0: Tensor[(2), float32], Primitive=1) -> Tensor[(2), float32] {
    nn.relu(%p0)
  };
  %3(%2)
}""")
    reduce_group, relu_group = fused_groups(after)
    assert reduce_group.anchor == "sum" and reduce_group.pattern is OpPattern.COMM_REDUCE
    assert relu_group.pattern is OpPattern.ELEMWISE


def test_injective_op_does_not_fuse_into_a_reduction():
    # Relay fuses injective groups only along all-injective paths; a reduction ends them
    check("""
def @main(%x: Tensor[(2, 5), float32]) {
  %0 = transpose(%x, axes=[1, 0]);
  sum(%0, axis=[1])
}""", """
def @main(%x: Tensor[(2, 5), float32]) {
  %0 = fn (%p0: Tensor[(2, 5), float32], Primitive=1) -> Tensor[(5, 2), float32] {
    transpose(%p0, axes=[1, 0])
  };
  %1 = %0(%x);
  %2 = fn (%p0: Tensor[(5, 2), float32], Primitive=1) -> Tensor[(5), float32] {
    sum(%p0, axis=[1])
  };
  %2(%1)
}""")


def test_concatenate_of_two_relus_is_one_group():
    # the tuple joins concatenate in phase 1, the relus join the tuple in phase 2
    check("""
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(2, 3), float32]) {
  %0 = nn.relu(%x);
  %1 = nn.relu(%y);
  %2 = (%0, %1);
  concatenate(%2, axis=1)
}""", """
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(2, 3), float32]) {
  %3 = fn (%p0: Tensor[(2, 3), float32], %p1: Tensor[(2, 3), float32], Primitive=1) -> Tensor[(2, 6), float32] {
    %0 = nn.relu(%p0);
    %1 = nn.relu(%p1);
    %2 = (%0, %1);
    concatenate(%2, axis=1)
  };
  %3(%x, %y)
}""")


def test_concatenate_of_conv_groups_keeps_the_convs_apart():
    # a conv group never fuses into a tuple; the tuple and concatenate form their own group.
    # Parameters are numbered in the order the group's ops are met: exp's input first.
    check("""
def @main(%x: Tensor[(1, 4, 8, 8), float32], %w: Tensor[(4, 4, 1, 1), float32], %y: Tensor[(1, 4, 8, 8), float32]) {
  %0 = nn.conv2d(%x, %w);
  %1 = nn.relu(%0);
  %2 = exp(%y);
  %3 = (%1, %2);
  concatenate(%3, axis=1)
}""", """
def @main(%x: Tensor[(1, 4, 8, 8), float32], %w: Tensor[(4, 4, 1, 1), float32], %y: Tensor[(1, 4, 8, 8), float32]) {
  %1 = fn (%p0: Tensor[(1, 4, 8, 8), float32], %p1: Tensor[(4, 4, 1, 1), float32],
           Primitive=1) -> Tensor[(1, 4, 8, 8), float32] {
    %0 = nn.conv2d(%p0, %p1);
    nn.relu(%0)
  };
  %2 = %1(%x, %w);
  %5 = fn (%p0: Tensor[(1, 4, 8, 8), float32], %p1: Tensor[(1, 4, 8, 8), float32],
           Primitive=1) -> Tensor[(1, 8, 8, 8), float32] {
    %3 = exp(%p0);
    %4 = (%p1, %3);
    concatenate(%4, axis=1)
  };
  %5(%y, %2)
}""")


def test_split_and_tuple_getitem():
    # split's post-dominator is the output tuple, which nothing fuses into: split stands alone and
    # returns a tuple; each projection joins the relu or sigmoid that uses it
    check("""
def @main(%x: Tensor[(2, 6), float32]) {
  %0 = split(%x, indices_or_sections=2, axis=1);
  %1 = nn.relu(%0.0);
  %2 = sigmoid(%0.1);
  (%1, %2)
}""", """
def @main(%x: Tensor[(2, 6), float32]) {
  %0 = fn (%p0: Tensor[(2, 6), float32], Primitive=1) -> (Tensor[(2, 3), float32], Tensor[(2, 3), float32]) {
    split(%p0, indices_or_sections=2, axis=1)
  };
  %1 = %0(%x);
  %3 = fn (%p0: (Tensor[(2, 3), float32], Tensor[(2, 3), float32]), Primitive=1) -> Tensor[(2, 3), float32] {
    %2 = %p0.0;
    nn.relu(%2)
  };
  %5 = fn (%p0: (Tensor[(2, 3), float32], Tensor[(2, 3), float32]), Primitive=1) -> Tensor[(2, 3), float32] {
    %4 = %p0.1;
    sigmoid(%4)
  };
  (%3(%1), %5(%1))
}""")


def test_opaque_op_stands_alone():
    check("""
def @main(%x: Tensor[(2, 4), float32], %g: Tensor[(4), float32], %b: Tensor[(4), float32]) {
  %0 = nn.relu(%x);
  %1 = nn.layer_norm(%0, %g, %b);
  nn.relu(%1)
}""", """
def @main(%x: Tensor[(2, 4), float32], %g: Tensor[(4), float32], %b: Tensor[(4), float32]) {
  %0 = fn (%p0: Tensor[(2, 4), float32], Primitive=1) -> Tensor[(2, 4), float32] {
    nn.relu(%p0)
  };
  %1 = %0(%x);
  %2 = fn (%p0: Tensor[(2, 4), float32], %p1: Tensor[(4), float32], %p2: Tensor[(4), float32],
           Primitive=1) -> Tensor[(2, 4), float32] {
    nn.layer_norm(%p0, %p1, %p2)
  };
  %3 = %2(%1, %g, %b);
  %4 = fn (%p0: Tensor[(2, 4), float32], Primitive=1) -> Tensor[(2, 4), float32] {
    nn.relu(%p0)
  };
  %4(%3)
}""")


def test_shape_of_is_left_as_a_plain_call():
    check("""
def @main(%x: Tensor[(2, 4), float32]) {
  %0 = exp(%x);
  shape_of(%0)
}""", """
def @main(%x: Tensor[(2, 4), float32]) {
  %0 = fn (%p0: Tensor[(2, 4), float32], Primitive=1) -> Tensor[(2, 4), float32] {
    exp(%p0)
  };
  %1 = %0(%x);
  shape_of(%1)
}""")


def test_a_group_without_operators_stays_plain():
    # the tuple fuses into its projection (phase 1), but a group with no operator call is no
    # kernel: it is left as plain expressions, not wrapped in a function
    before = parse("""
def @main(%x: Tensor[(2), float32], %y: Tensor[(3), float32]) {
  %0 = (%x, %y);
  %0.1
}""")
    after = FuseOps()(before)
    assert_structural_equal(run_infer_type(after["main"]), run_infer_type(before["main"]), map_free_vars=True)
    assert fused_groups(after) == []
    assert FuseOps()(after) is after
    # with an operator after the projection, all three form one kernel
    check("""
def @main(%x: Tensor[(2), float32], %y: Tensor[(3), float32]) {
  %0 = (%x, %y);
  nn.relu(%0.1)
}""", """
def @main(%x: Tensor[(2), float32], %y: Tensor[(3), float32]) {
  %3 = fn (%p0: Tensor[(2), float32], %p1: Tensor[(3), float32], Primitive=1) -> Tensor[(3), float32] {
    %0 = (%p0, %p1);
    %1 = %0.1;
    nn.relu(%1)
  };
  %3(%x, %y)
}""")


# ---------------------------------------------------------------------------------------------
# constants


def test_scalar_constants_stay_inside_tensor_constants_are_arguments():
    x = var("x", shape=(2, 3))
    c = rb.const(np.arange(3, dtype="float32"))
    before = rb.IRModule.from_expr(Function([x], op.nn.relu(op.add(op.multiply(x, c), rb.const(2.0)))))
    after = FuseOps()(before)

    p0, p1 = var("p0", shape=(2, 3)), var("p1", shape=(3,))
    body = op.nn.relu(op.add(op.multiply(p0, p1), rb.const(2.0)))
    prim = Function([p0, p1], body, TensorType((2, 3), "float32"), attrs={"Primitive": 1})
    assert_structural_equal(run_infer_type(after["main"]), run_infer_type(Function([x], Call(prim, [x, c]))), map_free_vars=True)
    assert_same_results(before, after)

    # link_params (the option or the context's config) keeps the tensor constant in the body
    (p0,) = [var("p0", shape=(2, 3))]
    body = op.nn.relu(op.add(op.multiply(p0, c), rb.const(2.0)))
    prim = Function([p0], body, TensorType((2, 3), "float32"), attrs={"Primitive": 1})
    linked = FuseOps(link_params=True)(before)
    assert_structural_equal(run_infer_type(linked["main"]), run_infer_type(Function([x], Call(prim, [x]))), map_free_vars=True)
    with PassContext(config={"relay.FuseOps.link_params": True}):
        assert structural_equal(run_infer_type(FuseOps()(before)["main"]), run_infer_type(linked["main"]), map_free_vars=True)
    assert_same_results(before, linked)


# ---------------------------------------------------------------------------------------------
# options: fuse_opt_level, max_depth


CONV_ADD_RELU = """
def @main(%x: Tensor[(1, 4, 8, 8), float32], %w: Tensor[(4, 4, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
  %1 = add(%0, 1f);
  nn.relu(%1)
}"""

CONV_ADD_RELU_UNFUSED = """
def @main(%x: Tensor[(1, 4, 8, 8), float32], %w: Tensor[(4, 4, 3, 3), float32]) {
  %0 = fn (%p0: Tensor[(1, 4, 8, 8), float32], %p1: Tensor[(4, 4, 3, 3), float32],
           Primitive=1) -> Tensor[(1, 4, 8, 8), float32] {
    nn.conv2d(%p0, %p1, padding=[1, 1, 1, 1])
  };
  %1 = %0(%x, %w);
  %2 = fn (%p0: Tensor[(1, 4, 8, 8), float32], %p1: float32, Primitive=1) -> Tensor[(1, 4, 8, 8), float32] {
    add(%p0, %p1)
  };
  %3 = %2(%1, 1f);
  %4 = fn (%p0: Tensor[(1, 4, 8, 8), float32], Primitive=1) -> Tensor[(1, 4, 8, 8), float32] {
    nn.relu(%p0)
  };
  %4(%3)
}"""


def test_fuse_opt_level_0_puts_every_op_alone():
    # even the scalar constant becomes an argument: it is its own group
    check(CONV_ADD_RELU, CONV_ADD_RELU_UNFUSED, fuse_opt_level=0)
    before, expected = parse(CONV_ADD_RELU), parse(CONV_ADD_RELU_UNFUSED)
    with PassContext(opt_level=0):  # fuse_opt_level=-1 follows the context
        assert_structural_equal(run_infer_type(FuseOps()(before)["main"]), run_infer_type(expected["main"]), map_free_vars=True)
    with PassContext(opt_level=3):  # an explicit level wins over the context
        assert_structural_equal(run_infer_type(FuseOps(fuse_opt_level=0)(before)["main"]), run_infer_type(expected["main"]),
                                map_free_vars=True)
        assert len(fused_groups(FuseOps()(before))) == 1
    assert_structural_equal(run_infer_type(parse_pipeline("fuse-ops{fuse_opt_level=0}")(before)["main"]),
                            run_infer_type(expected["main"]), map_free_vars=True)


UNARY_CHAIN = """
def @main(%x: Tensor[(3), float32]) {
  %0 = nn.relu(%x);
  %1 = exp(%0);
  %2 = negative(%1);
  %3 = sigmoid(%2);
  %4 = tanh(%3);
  abs(%4)
}"""


def test_max_depth_splits_groups():
    before = parse(UNARY_CHAIN)
    pairs = [("nn.relu", "exp"), ("negative", "sigmoid"), ("tanh", "abs")]
    assert group_ops(FuseOps(max_depth=2)(before)) == pairs
    triples = [("nn.relu", "exp", "negative"), ("sigmoid", "tanh", "abs")]
    with PassContext(config={"relay.FuseOps.max_depth": 3}):
        assert group_ops(FuseOps()(before)) == triples
    assert group_ops(FuseOps(max_depth=1)(before)) == [(name,) for pair in pairs for name in pair]
    assert group_ops(FuseOps()(before)) == [tuple(name for pair in pairs for name in pair)]
    assert_same_results(before, FuseOps(max_depth=2)(before))
    assert group_ops(parse_pipeline("fuse-ops{max_depth=2}")(before)) == pairs
    with pytest.raises(ValueError, match="FuseOps: max_depth"):
        FuseOps(max_depth=-1)(before)
    with pytest.raises(ValueError, match="FuseOps: fuse_opt_level"):
        FuseOps(fuse_opt_level=-2)(before)


def test_max_depth_splits_a_two_output_path_by_nodes():
    # max_depth counts graph nodes, scalar constants included: add(x, 1f) is two nodes
    before = parse("""
def @main(%x: Tensor[(3), float32]) {
  %0 = add(%x, 1f);
  %1 = multiply(%0, 2f);
  %2 = add(%1, 3f);
  multiply(%2, 4f)
}""")
    assert group_ops(FuseOps(max_depth=4)(before)) == [("add", "multiply"), ("add", "multiply")]
    assert group_ops(FuseOps(max_depth=8)(before)) == [("add", "multiply", "add", "multiply")]


# ---------------------------------------------------------------------------------------------
# control flow: each branch, clause, closure body and let value is fused on its own


BRANCHES_X = [np.linspace(-2, 2, 4, dtype="float32")]


def test_if_branches_are_fused_separately():
    # exp is used by both branches: it is computed outside them and fuses with neither
    before_text = """
def @main(%x: Tensor[(4), float32], %c: bool) {
  %0 = exp(%x);
  if (%c) {
    %1 = add(%0, 1f);
    nn.relu(%1)
  } else {
    negative(%0)
  }
}"""
    expected_text = """
def @main(%x: Tensor[(4), float32], %c: bool) {
  %0 = fn (%p0: Tensor[(4), float32], Primitive=1) -> Tensor[(4), float32] {
    exp(%p0)
  };
  %1 = %0(%x);
  if (%c) {
    %3 = fn (%p0: Tensor[(4), float32], Primitive=1) -> Tensor[(4), float32] {
      %2 = add(%p0, 1f);
      nn.relu(%2)
    };
    %3(%1)
  } else {
    %4 = fn (%p0: Tensor[(4), float32], Primitive=1) -> Tensor[(4), float32] {
      negative(%p0)
    };
    %4(%1)
  }
}"""
    for c in (True, False):
        check(before_text, expected_text, args=BRANCHES_X + [np.bool_(c)])


def test_a_value_only_one_branch_uses_is_part_of_that_branch():
    # in a dataflow graph, exp used by the true branch alone is evaluated only there: it joins
    # that branch's group (the false branch stays unfused with the condition)
    before_text = """
def @main(%x: Tensor[(4), float32], %c: bool) {
  %0 = exp(%x);
  if (%c) {
    %1 = add(%0, 1f);
    nn.relu(%1)
  } else {
    negative(%x)
  }
}"""
    expected_text = """
def @main(%x: Tensor[(4), float32], %c: bool) {
  if (%c) {
    %2 = fn (%p0: Tensor[(4), float32], Primitive=1) -> Tensor[(4), float32] {
      %0 = exp(%p0);
      %1 = add(%0, 1f);
      nn.relu(%1)
    };
    %2(%x)
  } else {
    %3 = fn (%p0: Tensor[(4), float32], Primitive=1) -> Tensor[(4), float32] {
      negative(%p0)
    };
    %3(%x)
  }
}"""
    for c in (True, False):
        check(before_text, expected_text, args=BRANCHES_X + [np.bool_(c)])


def test_closure_body_is_fused_on_its_own():
    # exp is used outside the closure too: it is computed once outside and captured; the body's
    # add and relu form a group of their own, and nothing crosses the function boundary
    check("""
def @main(%x: Tensor[(4), float32], %y: Tensor[(4), float32]) {
  %0 = exp(%y);
  %1 = fn (%z: Tensor[(4), float32]) {
    %2 = add(%z, %0);
    nn.relu(%2)
  };
  %3 = %1(%x);
  multiply(%3, %0)
}""", """
def @main(%x: Tensor[(4), float32], %y: Tensor[(4), float32]) {
  %0 = fn (%p0: Tensor[(4), float32], Primitive=1) -> Tensor[(4), float32] {
    exp(%p0)
  };
  %1 = %0(%y);
  %4 = fn (%z: Tensor[(4), float32]) {
    %3 = fn (%p0: Tensor[(4), float32], %p1: Tensor[(4), float32], Primitive=1) -> Tensor[(4), float32] {
      %2 = add(%p0, %p1);
      nn.relu(%2)
    };
    %3(%z, %1)
  };
  %5 = %4(%x);
  %6 = fn (%p0: Tensor[(4), float32], %p1: Tensor[(4), float32], Primitive=1) -> Tensor[(4), float32] {
    multiply(%p0, %p1)
  };
  %6(%5, %1)
}""")


def test_a_value_only_a_closure_uses_is_part_of_its_body():
    # exp(%y) is referenced only inside the closure, so it is evaluated by the body on each call
    # and fuses there
    check("""
def @main(%x: Tensor[(4), float32], %y: Tensor[(4), float32]) {
  %0 = exp(%y);
  %1 = fn (%z: Tensor[(4), float32]) {
    %2 = add(%z, %0);
    nn.relu(%2)
  };
  %3 = %1(%x);
  %1(%3)
}""", """
def @main(%x: Tensor[(4), float32], %y: Tensor[(4), float32]) {
  %4 = fn (%z: Tensor[(4), float32]) {
    %3 = fn (%p0: Tensor[(4), float32], %p1: Tensor[(4), float32], Primitive=1) -> Tensor[(4), float32] {
      %0 = exp(%p0);
      %1 = add(%p1, %0);
      nn.relu(%1)
    };
    %3(%y, %z)
  };
  %5 = %4(%x);
  %4(%5)
}""")


def test_let_values_are_fused_within_but_not_across():
    check("""
def @main(%x: Tensor[(4), float32]) {
  let %a = nn.relu(exp(%x));
  let %b = negative(%a);
  %b
}""", """
def @main(%x: Tensor[(4), float32]) {
  %1 = fn (%p0: Tensor[(4), float32], Primitive=1) -> Tensor[(4), float32] {
    %0 = exp(%p0);
    nn.relu(%0)
  };
  let %a = %1(%x);
  %2 = fn (%p0: Tensor[(4), float32], Primitive=1) -> Tensor[(4), float32] {
    negative(%p0)
  };
  let %b = %2(%a);
  %b
}""")


def test_match_clauses_are_fused():
    t = (np.float32([1, -2, 3, -4]), np.float32([0.5, 0.5, -9, 1]))
    check("""
def @main(%t: (Tensor[(4), float32], Tensor[(4), float32])) {
  match (%t) {
    (%a, %b) => {
      %0 = add(%a, %b);
      nn.relu(%0)
    },
  }
}""", """
def @main(%t: (Tensor[(4), float32], Tensor[(4), float32])) {
  match (%t) {
    (%a, %b) => {
      %1 = fn (%p0: Tensor[(4), float32], %p1: Tensor[(4), float32], Primitive=1) -> Tensor[(4), float32] {
        %0 = add(%p0, %p1);
        nn.relu(%0)
      };
      %1(%a, %b)
    },
  }
}""", args=[t])


def test_existing_primitive_functions_are_left_alone():
    before = typed(parse("""
def @main(%x: Tensor[(4), float32]) {
  %1 = fn (%p0: Tensor[(4), float32], Primitive=1) {
    %0 = exp(%p0);
    nn.relu(%0)
  };
  %2 = %1(%x);
  %3 = negative(%2);
  sigmoid(%3)
}"""))
    after = FuseOps()(before)
    first, second = fused_groups(after)
    assert first.function is before["main"].body.args[0].args[0].op  # untouched
    assert second.ops == ("negative", "sigmoid")
    assert_same_results(before, after)


# ---------------------------------------------------------------------------------------------
# the helpers


def test_fused_groups_and_partition_agree():
    before = parse("""
def @main(%x: Tensor[(1, 4, 8, 8), float32], %w: Tensor[(4, 4, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
  %1 = nn.relu(%0);
  %2 = mean(%1, axis=[2, 3]);
  %3 = multiply(%2, 2f);
  nn.softmax(%3)
}""")
    after = FuseOps()(before)
    table = [(g.ops, g.anchor, g.pattern) for g in fused_groups(after)]
    assert table == [(("nn.conv2d", "nn.relu"), "nn.conv2d", OpPattern.OUT_ELEMWISE_FUSABLE),
                     (("mean",), "mean", OpPattern.COMM_REDUCE),
                     (("multiply",), "multiply", OpPattern.BROADCAST),
                     (("nn.softmax",), "nn.softmax", OpPattern.OUT_ELEMWISE_FUSABLE)]
    main = typed(before)["main"]
    part = fusion_partition(main)
    by_name = {c.op.name: n for c, n in part.items()}
    assert by_name == {"nn.conv2d": 0, "nn.relu": 0, "mean": 1, "multiply": 2, "nn.softmax": 3}
    assert set(fusion_partition(main, fuse_opt_level=0).values()) == {0, 1, 2, 3, 4}
    text = str(fused_groups_table(after))
    assert "fused_nn_conv2d_nn_relu" in text and "COMM_REDUCE" in text
    assert all(g.global_name == "main" for g in fused_groups(after))


def test_fused_program_round_trips_through_text():
    after = FuseOps()(parse(CONV_ADD_RELU))
    assert_structural_equal(run_infer_type(rb.parse(after.astext())), run_infer_type(after))
    assert "Primitive=1" in after.astext()


@pytest.mark.parametrize("text", [CONV_ADD_RELU, UNARY_CHAIN])
def test_fused_program_carries_the_types_inference_gives(text):
    # the rewrite keeps each node's type; inference from scratch on the printed program agrees
    for after in (FuseOps()(parse(text)), FuseOps(fuse_opt_level=0)(parse(text))):
        assert all(n.type_or_none is not None for n in rb.ir.post_order(after["main"])
                   if not isinstance(n, Op))
        fresh = rb.passes.InferType()(rb.parse(after.astext()))
        assert fresh.astext() == after.astext()
        back = DefuseOps()(after)
        assert rb.passes.InferType()(rb.parse(back.astext())).astext() == back.astext()


def test_fuse_ops_is_registered():
    names = {name: level for name, _kebab, level, _doc in rb.passes.list_passes()}
    assert names["FuseOps"] == 0 and names["DefuseOps"] == 3
    assert rb.passes.FuseOps is FuseOps


# ---------------------------------------------------------------------------------------------
# scale: a 20,000-op chain


# Deep enough that any recursion on program depth fails (Python stops at 1,000 frames);
# tests/test_scale.py takes 100,000 operators through the whole pipeline.
DEEP = 20_000


def test_deep_chain_fuses_without_recursion():
    n = DEEP
    mod = rb.IRModule.from_expr(chain(n))
    after = FuseOps()(mod)
    groups = fused_groups(after)
    # every op brings its scalar constant: 256 graph nodes make a group of 128 ops
    assert [g.num_ops for g in groups] == [128] * (n // 128) + [n % 128]
    assert sum(g.num_ops for g in groups) == n
    back = DefuseOps()(after)
    assert rb.ir.count_ops(back) == n and not fused_groups(back)
    assert FuseOps()(after) is after


def test_chain_max_depth_and_values():
    mod = rb.IRModule.from_expr(chain(1000))
    after = FuseOps(max_depth=10)(mod)
    assert [g.num_ops for g in fused_groups(after)] == [5] * 200
    x = np.linspace(-1, 1, 4, dtype="float32")
    np.testing.assert_allclose(run(after, x), chain_reference(1000, x), rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# ResNet-18: the groups Relay forms, written by hand


class _DecomposeBatchNorm(ExprMutator):
    """``batch_norm(x, γ, β, μ, σ²)[0]`` with constant statistics -> ``x * scale + shift``, the
    scale and shift computed here with numpy (what SimplifyInference and FoldConstant leave)."""

    def visit_tuple_getitem(self, node):
        bn = node.tuple_value
        if node.index == 0 and isinstance(bn, Call) and isinstance(bn.op, Op) and bn.op.name == "nn.batch_norm":
            gamma, beta, mean, variance = (a.data for a in bn.args[1:])
            scale = gamma / np.sqrt(variance + np.float32(bn.attrs.epsilon))
            shift = beta - mean * scale
            x = self.visit(bn.args[0])
            return op.add(op.multiply(x, rb.const(scale[:, None, None])), rb.const(shift[:, None, None]))
        return super().visit_tuple_getitem(node)


CBR = ("nn.conv2d", "multiply", "add", "nn.relu")          # conv, batch-norm scale and shift, relu
CBAR = ("nn.conv2d", "multiply", "add", "add", "nn.relu")  # ... with the residual add before the relu
CB = ("nn.conv2d", "multiply", "add")                      # the 1x1 shortcut conv and its batch norm

# A unit whose shape changes has a shortcut conv; its residual add goes to the main branch's
# group (the first to reach it), so the shortcut group ends at its batch norm.
RESNET18_GROUPS = (
    [CBR, ("nn.max_pool2d",)]
    + [CBR, CBAR, CBR, CBAR]                     # stage 1
    + [CBR, CB, CBAR, CBR, CBAR] * 3             # stages 2, 3, 4
    + [("nn.global_avg_pool2d",), ("nn.batch_flatten",), ("nn.dense", "nn.bias_add"), ("nn.softmax",)])
# inputs of each kind of group: data, weight, scale, shift (+ the residual)
RESNET18_ARITY = {CBR: 4, CBAR: 5, CB: 4, ("nn.dense", "nn.bias_add"): 3}


@pytest.fixture(scope="module")
def resnet18():
    mod, params = models.resnet18(image_shape=(3, 32, 32), num_classes=10)
    bound = rb.passes.bind_params(mod, params)
    data = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    return bound, data


def _check_resnet18_groups(fused):
    groups = fused_groups(fused)
    assert [g.ops for g in groups] == RESNET18_GROUPS
    assert len(groups) == 25
    for g in groups:
        assert len(g.input_types) == RESNET18_ARITY.get(g.ops, 1), g.ops
        assert g.anchor == g.ops[0]
    # the weights and batch-norm constants are passed to the groups, not copied into them
    calls = [n for n in rb.ir.post_order(fused["main"]) if isinstance(n, Call) and isinstance(n.op, Function)]
    assert sum(isinstance(a, rb.ir.Constant) for c in calls for a in c.args) == 20 * 3 + 2


def test_resnet18_groups(resnet18):
    bound, data = resnet18
    simplified = bound.with_functions({bound.get_global_var("main"): _DecomposeBatchNorm().visit(bound["main"])})
    fused = FuseOps()(simplified)
    _check_resnet18_groups(fused)
    assert_same_values(run(bound, data), run(fused, data))
    assert FuseOps()(fused) is fused
    assert_structural_equal(run_infer_type(DefuseOps()(fused)["main"]), run_infer_type(simplified["main"]), map_free_vars=True)


def test_resnet18_groups_after_the_library_pipeline(resnet18):
    bound, data = resnet18
    seq = rb.passes.Sequential([rb.passes.SimplifyInference(), rb.passes.FoldConstant(), FuseOps()])
    with PassContext(opt_level=3):
        fused = seq(bound)
    _check_resnet18_groups(fused)
    assert_same_values(run(bound, data), run(fused, data))


# ---------------------------------------------------------------------------------------------
# the zoo: same results fused, FuseOps idempotent, DefuseOps its inverse


def _nlp_inputs(name):
    from relaybench.models.nlp import make_list, make_tree
    rng = np.random.default_rng(1)
    if name.endswith("loop"):
        return [make_list([rng.standard_normal((2, 6)).astype("float32") for _ in range(5)])]
    if name == "char_rnn":
        category = np.zeros((1, 18), "float32")
        category[0, 3] = 1
        return [category, np.int32(26)]
    if name == "tree_lstm":
        def x():
            return rng.standard_normal((1, 5)).astype("float32")
        leaves = [make_tree(x()) for _ in range(3)]
        return [make_tree(x(), [make_tree(x(), leaves[:2]), leaves[2]])]
    return [rng.standard_normal((5, 2, 6)).astype("float32")]


RNN_SMALL = dict(batch_size=2, seq_len=5, input_size=6, hidden_size=8)
ZOO = {
    "mobilenet_v2": lambda: models.mobilenet_v2(image_shape=(3, 32, 32), num_classes=10),
    "vgg16": lambda: models.vgg16(image_shape=(3, 32, 32), num_classes=10),
    "resnet50": lambda: models.resnet50(image_shape=(3, 32, 32), num_classes=10),
    "dqn": lambda: models.dqn(),
    "rnn-unrolled": lambda: models.rnn(form="unrolled", **RNN_SMALL),
    "gru-loop": lambda: models.gru(form="loop", **RNN_SMALL),
    "lstm-unrolled": lambda: models.lstm(form="unrolled", **RNN_SMALL),
    "lstm-loop": lambda: models.lstm(form="loop", **RNN_SMALL),
    "char_rnn": lambda: models.char_rnn(hidden_size=16, max_length=6),
    "tree_lstm": lambda: models.tree_lstm(input_size=5, hidden_size=7),
}
VISION = {"mobilenet_v2", "vgg16", "resnet50", "dqn"}


@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_model_same_results_fused(name):
    mod, params = ZOO[name]()
    if name in VISION:
        t = mod["main"].params[0].type_annotation
        args = [np.random.default_rng(0).uniform(0, 1, tuple(int(s) for s in t.shape)).astype(t.dtype)]
    else:
        args = _nlp_inputs(name)
    fused = FuseOps()(mod)
    groups = fused_groups(fused)
    assert groups and all(g.num_ops >= 1 for g in groups)
    assert sum(g.num_ops for g in groups) == rb.ir.count_ops(mod)  # every op in exactly one group
    ex_before = rb.create_executor("interpreter", mod=mod).evaluate()
    ex_after = rb.create_executor("interpreter", mod=fused).evaluate()
    assert_same_values(ex_before(*args, **params), ex_after(*args, **params))
    assert FuseOps()(fused) is fused
    back, typed_mod = run_infer_type(DefuseOps()(fused)), run_infer_type(mod)
    for gv, func in typed_mod.functions.items():
        assert_structural_equal(back[gv.name_hint], func, map_free_vars=True)


def test_docstring_examples():
    import doctest

    from relaybench.passes import fuse_ops
    result = doctest.testmod(fuse_ops)
    assert result.attempted >= 2 and result.failed == 0
