"""SimplifyExpr: each rule against a hand-written expected program, the cases it must leave
alone, and the interpreter's results before and after on random inputs."""

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.ir import Call, Function, Tuple, const, var
from relaybench.ir.functor import ExprMutator
from relaybench.ir.structural import assert_structural_equal
from relaybench.passes.dataflow_pattern import RewriteTrace
from relaybench.passes.infra import PassContext, Sequential, parse_pipeline
from relaybench.passes.simplify_expr import RULES
from relaybench.testing import random_inputs
from relaybench.testing import run_infer_type

SimplifyExpr = rb.passes.SimplifyExpr


def run(func_or_mod, args):
    mod = func_or_mod if isinstance(func_or_mod, rb.IRModule) else rb.IRModule.from_expr(func_or_mod)
    return rb.create_executor("interpreter", mod=mod).evaluate()(*args)


def simplify(func, **options):
    return SimplifyExpr(**options)(rb.IRModule.from_expr(func))["main"]


def same_results(before, after, sizes=None, seed=0):
    args = random_inputs(before, seed=seed, sizes=sizes)
    np.testing.assert_array_equal(run(after, args), run(before, args))


def check(before, expected, sizes=None):
    """The pass turns ``before`` into ``expected``, and both compute the same."""
    after = simplify(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(expected), map_free_vars=True)
    same_results(before, after, sizes)
    return after


def unchanged(before):
    """The pass leaves ``before`` alone: the very same module comes back."""
    mod = rb.IRModule.from_expr(before)
    assert SimplifyExpr()(mod) is mod


# =============================================================================================
# the pass itself

def test_pass_registration():
    assert SimplifyExpr.info.opt_level == 0
    assert SimplifyExpr.info.kebab == "simplify-expr"
    assert len({r.__name__ for r in RULES}) == len(RULES) == 12
    x = var("x", shape=(2,))
    mod = rb.IRModule.from_expr(Function([x], x * const(1.0)))
    with PassContext(opt_level=0):
        out = Sequential([SimplifyExpr()])(mod)
    assert out is not mod and out["main"].body is out["main"].params[0]


def test_disabled_rules_and_pipeline_string():
    x = var("x", shape=(2,))
    before = Function([x], op.nn.relu(op.nn.relu(x * const(1.0))))
    kept = simplify(before, disabled_rules=("EliminateIdentity",))
    assert_structural_equal(run_infer_type(kept), run_infer_type(Function([x], op.nn.relu(x * const(1.0)))), map_free_vars=True)
    seq = parse_pipeline("simplify-expr{disabled_rules=[EliminateIdentity;SimplifyRelu]}")
    mod = rb.IRModule.from_expr(before)
    assert seq(mod) is mod
    with pytest.raises(ValueError, match="no rule 'Nope'"):
        SimplifyExpr(disabled_rules=("Nope",))(mod)


def test_trace_records_each_rule_that_fired():
    x = var("x", shape=(2, 3))
    before = Function([x], op.nn.relu(op.nn.relu(op.transpose(op.transpose(x)))) + const(0.0))
    trace = RewriteTrace()
    after = simplify(before, trace=trace)
    assert_structural_equal(run_infer_type(after), run_infer_type(Function([x], op.nn.relu(x))), map_free_vars=True)
    assert trace.counts() == {"SimplifyTranspose": 1, "EliminateIdentity": 1, "SimplifyRelu": 1}
    assert all(r.before.type_or_none is not None for r in trace)   # rules saw a typed program


def test_nothing_to_do_returns_the_same_module():
    x = var("x", shape=(2, 3))
    unchanged(Function([x], op.reshape(x, newshape=(3, 2))))      # a reshape to another shape
    unchanged(Function([x], op.nn.relu(x)))


def test_zoo_model_without_opportunities_is_returned_as_is():
    mod, _ = rb.models.get("resnet18", image_shape=(3, 32, 32), num_classes=10)
    assert SimplifyExpr()(mod) is mod


def test_zoo_model_with_redundant_ops_added_comes_back_to_the_original():
    mod, params = rb.models.get("dqn")
    main = mod["main"]
    data = main.params[0]
    # feed the data through NCHW -> NHWC -> NCHW, and reshape, cast and scale the output for nothing
    sub = ExprMutator()
    there = op.layout_transform(data, src_layout="NCHW", dst_layout="NHWC")
    sub.memo[data] = op.layout_transform(there, src_layout="NHWC", dst_layout="NCHW")
    body = sub.visit(main.body)
    out_type = rb.passes.InferType()(mod)["main"].body.checked_type
    n = int(np.prod(out_type.shape))
    body = op.reshape(op.reshape(body, newshape=(n,)), newshape=out_type.shape)
    body = op.cast(body, dtype=out_type.dtype) * const(1.0)
    noisy = rb.IRModule.from_expr(Function(main.params, body))
    trace = RewriteTrace()
    after = SimplifyExpr(trace=trace)(noisy)
    assert_structural_equal(run_infer_type(after["main"]), run_infer_type(main), map_free_vars=True)
    assert set(trace.counts()) == {"SimplifyLayoutTransform", "SimplifyReshape", "EliminateNoOpReshape",
                                   "EliminateSameCast", "EliminateIdentity"}
    args = random_inputs(noisy["main"], seed=3)
    np.testing.assert_allclose(run(after, args), run(noisy, args), rtol=1e-6)


def test_several_rules_over_several_rounds():
    x = var("x", shape=(2, 3, 4))
    t = op.transpose(op.transpose(x, axes=(1, 0, 2)), axes=(1, 0, 2))
    r = op.reshape(op.reshape(t, newshape=(6, 4)), newshape=(24,))
    c = op.cast(r, dtype="float32") + const(0.0)
    k = op.clip(op.clip(c, a_min=-1.0, a_max=2.0), a_min=0.0, a_max=5.0)
    before = Function([x], op.nn.relu(op.nn.relu(k)) * const(1.0))
    expected = Function([x], op.clip(op.reshape(x, newshape=(24,)), a_min=0.0, a_max=2.0))
    check(before, expected)


def test_primitive_functions_are_not_entered():
    p = var("p", shape=(2,))
    prim = Function([p], op.nn.relu(op.nn.relu(p))).with_attr("Primitive", 1)
    x = var("x", shape=(2,))
    before = Function([x], Call(prim, [x]))
    unchanged(before)


# =============================================================================================
# reshapes

def test_consecutive_reshapes_collapse():
    x = var("x", shape=(2, 3, 4))
    before = Function([x], op.reshape(op.reshape(x, newshape=(6, 4)), newshape=(24,)))
    check(before, Function([x], op.reshape(x, newshape=(24,))))


def test_a_chain_of_reshapes_collapses_to_one():
    x = var("x", shape=(2, 3, 4))
    y = x
    for shape in [(6, 4), (4, 6), (24,), (2, 12), (3, 8), (8, 3)]:
        y = op.reshape(y, newshape=shape)
    check(Function([x], y), Function([x], op.reshape(x, newshape=(8, 3))))


def test_reshape_after_squeeze_expand_dims_or_reshape_like():
    x = var("x", shape=(1, 3, 4))
    check(Function([x], op.reshape(op.squeeze(x, axis=(0,)), newshape=(12,))),
          Function([x], op.reshape(x, newshape=(12,))))
    check(Function([x], op.reshape(op.expand_dims(x, axis=1), newshape=(3, 4))),
          Function([x], op.reshape(x, newshape=(3, 4))))
    like = var("like", shape=(3, 4))
    check(Function([x, like], op.reshape(op.reshape_like(x, like), newshape=(-1,))),
          Function([x, like], op.reshape(x, newshape=(-1,))))


def test_outer_newshape_is_kept_only_when_it_means_the_same_on_the_input():
    x = var("x", shape=(2, 3, 4))
    # -1 means the same on x: kept as written
    check(Function([x], op.reshape(op.reshape(x, newshape=(6, 4)), newshape=(-1,))),
          Function([x], op.reshape(x, newshape=(-1,))))
    # 0 copies the input's first dim, 6 on the inner result but 2 on x: the shape is spelled out
    check(Function([x], op.reshape(op.reshape(x, newshape=(6, 4)), newshape=(0, 2, 2))),
          Function([x], op.reshape(x, newshape=(6, 2, 2))))


def test_consecutive_reshapes_with_symbolic_dims():
    x = var("x", shape=("n", 4, 2))
    before = Function([x], op.reshape(op.reshape(x, newshape=(0, 8)), newshape=(0, 2, 4)))
    after = check(before, Function([x], op.reshape(x, newshape=(0, 2, 4))), sizes={"n": 3})
    assert after.body.checked_type == rb.TensorType(("n", 2, 4))


def test_reshapes_to_the_same_type_are_dropped():
    x = var("x", shape=(2, 3))
    check(Function([x], op.nn.relu(op.reshape(x, newshape=(2, 3)))), Function([x], op.nn.relu(x)))
    check(Function([x], op.nn.relu(op.squeeze(x))), Function([x], op.nn.relu(x)))
    check(Function([x], op.nn.relu(op.expand_dims(x, axis=0, num_newaxis=0))), Function([x], op.nn.relu(x)))
    like = var("like", shape=(2, 3))
    check(Function([x, like], op.nn.relu(op.reshape_like(x, like))), Function([x, like], op.nn.relu(x)))
    # a reshape that does change the shape stays
    unchanged(Function([x], op.nn.relu(op.reshape(x, newshape=(6,)))))


def test_reshape_with_unknown_dims_is_kept():
    # both sides are (?, 4), but two ? need not be the same extent
    y = var("y", shape=(None, 4))
    unchanged(Function([y], op.reshape(y, newshape=(-1, 4))))


def test_a_shared_inner_reshape_is_left_alone():
    x = var("x", shape=(2, 3, 4))
    inner = op.reshape(x, newshape=(6, 4))
    unchanged(Function([x], Tuple([op.reshape(inner, newshape=(24,)), inner])))


# =============================================================================================
# transposes and layouts

def test_transposes_that_cancel():
    x = var("x", shape=(2, 3, 4))
    check(Function([x], op.transpose(op.transpose(x, axes=(1, 0, 2)), axes=(1, 0, 2)) + const(1.0)),
          Function([x], x + const(1.0)))
    check(Function([x], op.exp(op.transpose(op.transpose(x)))), Function([x], op.exp(x)))
    check(Function([x], op.exp(op.transpose(op.transpose(x, axes=(2, 0, 1)), axes=(-2, -1, 0)))),
          Function([x], op.exp(x)))


def test_transposes_compose():
    x = var("x", shape=(2, 3, 4))
    before = Function([x], op.transpose(op.transpose(x, axes=(1, 2, 0)), axes=(1, 2, 0)))
    check(before, Function([x], op.transpose(x, axes=(2, 0, 1))))
    four = var("x", shape=(2, 3, 4, 5))
    before = Function([four], op.transpose(op.transpose(four, axes=(0, 2, 3, 1)), axes=(3, 1, 0, 2)))
    # out[j] = in[a[b[j]]]: a = (0, 2, 3, 1), b = (3, 1, 0, 2) -> (1, 2, 0, 3)
    check(before, Function([four], op.transpose(four, axes=(1, 2, 0, 3))))


def test_identity_transpose_is_dropped():
    x = var("x", shape=(2, 3, 4))
    check(Function([x], op.exp(op.transpose(x, axes=(0, 1, 2)))), Function([x], op.exp(x)))
    v = var("v", shape=(5,))
    check(Function([v], op.exp(op.transpose(v))), Function([v], op.exp(v)))
    unchanged(Function([x], op.transpose(x, axes=(0, 2, 1))))


def test_layout_transform_and_its_inverse_cancel():
    x = var("x", shape=(1, 32, 4, 4))
    nhwc = op.layout_transform(x, src_layout="NCHW", dst_layout="NHWC")
    before = Function([x], op.nn.relu(op.layout_transform(nhwc, src_layout="NHWC", dst_layout="NCHW")))
    check(before, Function([x], op.nn.relu(x)))


def test_layout_transforms_merge():
    x = var("x", shape=(1, 32, 4, 4))
    blocked = op.layout_transform(x, src_layout="NCHW", dst_layout="NCHW16c")
    before = Function([x], op.layout_transform(blocked, src_layout="NCHW16c", dst_layout="NCHW8c"))
    check(before, Function([x], op.layout_transform(x, src_layout="NCHW", dst_layout="NCHW8c")))
    noop = Function([x], op.exp(op.layout_transform(x, src_layout="NCHW", dst_layout="NCHW")))
    check(noop, Function([x], op.exp(x)))


def test_layout_transforms_that_disagree_on_the_middle_layout_are_kept():
    x = var("x", shape=(1, 32, 4, 4))
    nhwc = op.layout_transform(x, src_layout="NCHW", dst_layout="NHWC")
    unchanged(Function([x], op.layout_transform(nhwc, src_layout="NWHC", dst_layout="NCHW")))


# =============================================================================================
# casts and arithmetic identities

def test_cast_to_the_same_dtype_is_dropped():
    x = var("x", shape=(2, 3))
    check(Function([x], op.exp(op.cast(x, dtype="float32"))), Function([x], op.exp(x)))
    like = var("like", shape=(4,))
    check(Function([x, like], op.exp(op.cast_like(x, like))), Function([x, like], op.exp(x)))
    unchanged(Function([x], op.cast(x, dtype="float16")))
    i = var("i", shape=(3,), dtype="int32")
    unchanged(Function([i], op.cast(i, dtype="int64")))


@pytest.mark.parametrize("form", ["x+0", "0+x", "x-0", "x*1", "1*x", "x/1"])
def test_arithmetic_identities(form):
    x = var("x", shape=(2, 3))
    zero, one = const(0.0), const(1.0)
    body = {"x+0": op.add(x, zero), "0+x": op.add(zero, x), "x-0": op.subtract(x, zero),
            "x*1": op.multiply(x, one), "1*x": op.multiply(one, x), "x/1": op.divide(x, one)}[form]
    check(Function([x], op.exp(body)), Function([x], op.exp(x)))


def test_arithmetic_identities_on_integers_and_with_tensor_constants():
    i = var("i", shape=(2, 3), dtype="int32")
    check(Function([i], op.negative(op.add(const(0, "int32"), i))), Function([i], op.negative(i)))
    check(Function([i], op.negative(op.divide(i, const(1, "int32")))), Function([i], op.negative(i)))
    x = var("x", shape=(2, 3))
    zeros_row = const(np.zeros(3, "float32"))          # broadcasts to x's shape without growing it
    check(Function([x], op.exp(x + zeros_row)), Function([x], op.exp(x)))
    ones_block = const(np.ones((2, 3), "float32"))
    check(Function([x], op.exp(ones_block * x)), Function([x], op.exp(x)))


def test_zeros_and_ones_operators_are_neutral_too():
    x = var("x", shape=(2, 3))
    check(Function([x], op.exp(op.zeros_like(x) + x)), Function([x], op.exp(x)))
    check(Function([x], op.exp(x * op.ones(shape=(2, 3), dtype="float32"))), Function([x], op.exp(x)))
    check(Function([x], op.exp(x - op.zeros(shape=(3,), dtype="float32"))), Function([x], op.exp(x)))


def test_scalar_identity_on_unknown_dims():
    y = var("y", shape=(None, 3))
    before = Function([y], op.exp(y + const(0.0)))
    after = simplify(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(Function([y], op.exp(y))), map_free_vars=True)
    arg = np.random.default_rng(0).standard_normal((5, 3)).astype("float32")
    np.testing.assert_array_equal(run(after, [arg]), run(before, [arg]))


def test_identities_that_must_not_fire():
    x = var("x", shape=(2, 3))
    unchanged(Function([x], x * const(0.0)))              # nan * 0 is nan, not 0
    unchanged(Function([x], x + const(1.0)))
    unchanged(Function([x], const(0.0) - x))              # 0 - x is -x
    unchanged(Function([x], const(1.0) / x))
    unchanged(Function([x], x * const(np.array([1.0, 2.0, 1.0], "float32"))))
    unchanged(Function([x], x + op.ones_like(x)))
    row = var("row", shape=(3,))
    unchanged(Function([row], row + const(np.zeros((2, 3), "float32"))))   # broadcasting grows row
    y = var("y", shape=(None, 3))
    unchanged(Function([y], y + const(np.zeros(3, "float32"))))             # ? could hide a 1


def test_nan_survives_because_x_times_zero_is_kept():
    x = var("x", shape=(3,))
    before = Function([x], op.multiply(x, const(0.0)) + const(0.0))
    after = simplify(before)
    assert_structural_equal(run_infer_type(after), run_infer_type(Function([x], op.multiply(x, const(0.0)))), map_free_vars=True)
    got = run(after, [np.array([np.nan, 1.0, -2.0], "float32")])
    assert np.isnan(got[0]) and got[1] == 0


# =============================================================================================
# clip and relu

def test_consecutive_clips_merge():
    x = var("x", shape=(4, 5))
    check(Function([x], op.clip(op.clip(x, a_min=0.0, a_max=6.0), a_min=1.0, a_max=10.0)),
          Function([x], op.clip(x, a_min=1.0, a_max=6.0)))
    check(Function([x], op.clip(op.clip(x, a_min=-1.0, a_max=1.0), a_min=-0.5, a_max=0.5)),
          Function([x], op.clip(x, a_min=-0.5, a_max=0.5)))


def test_clips_with_disjoint_ranges_pin_to_a_constant():
    x = var("x", shape=(4, 5))
    check(Function([x], op.clip(op.clip(x, a_min=0.0, a_max=1.0), a_min=2.0, a_max=3.0)),
          Function([x], op.clip(x, a_min=2.0, a_max=2.0)))
    check(Function([x], op.clip(op.clip(x, a_min=5.0, a_max=6.0), a_min=0.0, a_max=1.0)),
          Function([x], op.clip(x, a_min=1.0, a_max=1.0)))


def test_integer_clips_merge_only_with_integer_bounds():
    i = var("i", shape=(4, 5), dtype="int32")
    check(Function([i], op.clip(op.clip(i, a_min=-3, a_max=5), a_min=0, a_max=7)),
          Function([i], op.clip(i, a_min=0, a_max=5)))
    unchanged(Function([i], op.clip(op.clip(i, a_min=0.2, a_max=0.8), a_min=0.5, a_max=3)))


def test_consecutive_relus_collapse():
    x = var("x", shape=(2, 3))
    check(Function([x], op.nn.relu(op.nn.relu(x))), Function([x], op.nn.relu(x)))
    check(Function([x], op.nn.relu(op.nn.relu(op.nn.relu(op.nn.relu(op.nn.relu(x)))))),
          Function([x], op.nn.relu(x)))


def test_relu_and_clip():
    x = var("x", shape=(2, 3))
    check(Function([x], op.nn.relu(op.clip(x, a_min=0.0, a_max=6.0))),
          Function([x], op.clip(x, a_min=0.0, a_max=6.0)))
    check(Function([x], op.clip(op.nn.relu(x), a_min=1.0, a_max=6.0)),
          Function([x], op.clip(x, a_min=1.0, a_max=6.0)))
    unchanged(Function([x], op.nn.relu(op.clip(x, a_min=-1.0, a_max=6.0))))   # relu cuts [-1, 0)
    unchanged(Function([x], op.clip(op.nn.relu(x), a_min=-1.0, a_max=6.0)))   # x < 0 gives 0, not x


# =============================================================================================
# concatenate and strided_slice

def test_concatenate_of_one_tensor():
    x = var("x", shape=(2, 3))
    check(Function([x], op.exp(op.concatenate(Tuple([x]), axis=1))), Function([x], op.exp(x)))
    y = var("y", shape=(2, 3))
    unchanged(Function([x, y], op.concatenate(Tuple([x, y]), axis=1)))


def test_strided_slice_that_keeps_everything():
    x = var("x", shape=(4, 5))
    check(Function([x], op.exp(op.strided_slice(x, begin=(0, 0), end=(4, 5)))), Function([x], op.exp(x)))
    check(Function([x], op.exp(op.strided_slice(x, begin=(0,), end=(100,), strides=(1,)))),
          Function([x], op.exp(x)))
    unchanged(Function([x], op.strided_slice(x, begin=(1,), end=(4,))))
    unchanged(Function([x], op.strided_slice(x, begin=(3,), end=(-5,), strides=(-1,))))   # reverses
    one = var("one", shape=(1, 5))
    # a stride of 2 over an axis of one element keeps it: still the identity
    check(Function([one], op.exp(op.strided_slice(one, begin=(0,), end=(1,), strides=(2,)))),
          Function([one], op.exp(one)))


def test_docstring_examples():
    import doctest
    from relaybench.passes import simplify_expr
    result = doctest.testmod(simplify_expr)
    assert result.attempted >= 5 and result.failed == 0
