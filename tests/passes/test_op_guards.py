"""Passes that act on a few operators look at the operators a function calls first.

A function without them is returned as it is, without a walk. These tests hold each such pass's
list of operators to what its rewrite actually does: on random programs without the operators,
the rewrite itself (called past the check) leaves the function equal to what it was.
"""

import numpy as np
import pytest
import relaybench as rb
from relaybench import op
from relaybench.ir import structural_equal
from relaybench.ir.analysis import ops_used
from relaybench.passes import PassContext, infra
from relaybench.passes import canonicalize_cast, canonicalize_ops, fold_constant, fold_scale_axis
from relaybench.passes import legalize, simplify_inference
from relaybench.passes._layout_rules import LayoutRewriter
from relaybench.passes.alter_op_layout import alter_layout_hooks
from relaybench.testing.random_programs import random_program


def test_ops_used_counts_nested_and_fused_functions():
    x = rb.var("x", shape=(2, 3))
    y = rb.var("y", shape=(2, 3))
    inner = rb.Function([y], op.nn.relu(op.exp(y)))
    body = op.add(rb.Call(inner, [op.negative(x)]), op.sum(x, axis=1, keepdims=True))
    func = rb.Function([x], body)
    assert ops_used(func) == {"add", "nn.relu", "exp", "negative", "sum"}
    assert ops_used(func) is ops_used(func)                 # remembered per node
    mod = rb.IRModule.from_expr(func)
    assert ops_used(mod) == ops_used(func)
    assert ops_used(rb.Function([x], x)) == frozenset()


def _programs(count=40, seed=700):
    for s in range(seed, seed + count):
        prog = random_program(s, max_ops=12)
        yield rb.passes.InferType()(prog.mod)


# pass -> (the operators it names, the rewrite past the check)
def _legalize(func, mod):
    return legalize._Legalizer(legalize._legalizations("llvm")).visit(func)


def _alter(func, mod):
    return LayoutRewriter(alter_layout_hooks("llvm")).rewrite_function(func)


def _rules():
    legalize.load_target_policies("llvm")
    return {
        "Legalize": (set(legalize._legalizations("llvm")), _legalize),
        "AlterOpLayout": (set(alter_layout_hooks("llvm")), _alter),
        "BackwardFoldScaleAxis": (fold_scale_axis._ANCHORS, lambda f, m: fold_scale_axis._Backward(f).run()),
        "ForwardFoldScaleAxis": (fold_scale_axis._ANCHORS, lambda f, m: fold_scale_axis._Forward(f).run()),
        "SimplifyInference": (simplify_inference._ALL_RULES,
                              lambda f, m: simplify_inference._InferenceSimplifier(f, m).visit(f)),
        "CanonicalizeOps": (set(canonicalize_ops._RULES),
                            lambda f, m: canonicalize_ops._Canonicalizer(f, m).visit(f)),
        "CanonicalizeCast": ({"cast"}, lambda f, m: canonicalize_cast._CastCanonicalizer().visit(f)),
    }


def test_each_guard_names_every_operator_its_rewrite_touches():
    rules = _rules()
    tried = dict.fromkeys(rules, 0)
    for mod in _programs():
        func = mod["main"]
        used = ops_used(func)
        for name, (ops, rewrite) in rules.items():
            if used & set(ops):
                continue
            tried[name] += 1
            out = rewrite(func, mod)
            assert structural_equal(out, func), f"{name} rewrote a function without {sorted(ops)}"
    assert all(n >= 10 for n in tried.values()), tried


def test_guarded_passes_return_their_input_and_still_act():
    x = rb.var("x", shape=(1, 4, 6, 6))
    plain = rb.IRModule.from_expr(rb.Function([x], op.nn.relu(op.add(x, rb.const(1.0)))))
    with PassContext(opt_level=3):
        for name in ("Legalize", "AlterOpLayout", "FoldScaleAxis", "SimplifyInference",
                     "CanonicalizeOps", "CanonicalizeCast"):
            assert infra.get_pass(name)()(plain) is plain, name
    # with the operator there, the pass does its work: bias_add becomes expand_dims + add
    b = rb.var("b", shape=(4,))
    mod = rb.IRModule.from_expr(rb.Function([x, b], op.nn.bias_add(x, b)))
    with PassContext(opt_level=3):
        out = infra.get_pass("CanonicalizeOps")()(mod)
    assert ops_used(out) == {"expand_dims", "add"}
    xv = np.random.default_rng(0).standard_normal((1, 4, 6, 6)).astype("float32")
    bv = np.arange(4, dtype="float32")
    got = rb.create_executor("interpreter", mod=out).evaluate()(xv, bv)
    np.testing.assert_allclose(got, xv + bv[None, :, None, None])


def test_fold_constant_remembers_functions_it_left_alone():
    x = rb.var("x", shape=(3,))
    func = rb.Function([x], op.add(x, rb.const(1.0)))
    assert fold_constant.fold_constant(func) is func
    assert func.body in fold_constant._FIXED_POINTS
    foldable = rb.Function([x], op.add(x, op.multiply(rb.const(2.0), rb.const(3.0))))
    out = fold_constant.fold_constant(foldable)
    assert out is not foldable and foldable.body not in fold_constant._FIXED_POINTS
    assert isinstance(out.body.args[1], rb.Constant) and float(out.body.args[1].data) == 6.0


def test_infer_type_keeps_a_typed_function_and_retypes_a_replaced_callee():
    x = rb.var("x", shape=(2,))
    mod = rb.passes.InferType()(rb.IRModule.from_expr(rb.Function([x], op.add(x, x))))
    assert rb.passes.InferType()(mod) is mod
    # two functions: main calls @f; @f is replaced by one of another dtype, main's call follows
    text = '''#[version = "0.0.5"]
def @f(%a: Tensor[(2), float32]) { add(%a, %a) }
def @main(%x: Tensor[(2), float32]) { @f(%x) }'''
    typed = rb.passes.InferType()(rb.parse(text))
    assert str(typed["main"].body.checked_type) == "Tensor[(2), float32]"
    a = rb.var("a", shape=(2,))
    f = typed.get_global_var("f")
    replaced = typed.with_functions({**typed.functions,
                                     f: rb.Function([a], op.cast(a, dtype="float16"))})
    # main's return type, written by the first inference, no longer holds: checked again, it fails
    with pytest.raises(rb.errors.TypeInferenceError, match="float32 vs float16"):
        rb.passes.InferType()(replaced)


def test_infer_type_on_a_function_typed_in_place_writes_its_return_type_only():
    from relaybench.ir.type_infer import infer_module
    x = rb.var("x", shape=(2,))
    mod = rb.IRModule.from_expr(rb.Function([x], op.multiply(op.add(x, x), x)))
    assert not infra.is_typed(mod)
    infra.typed(mod)            # types mod's nodes in place, as passes that read types do
    assert infra.is_typed(mod) and mod["main"].ret_type is None
    out = rb.passes.InferType()(mod)
    assert out["main"].body is mod["main"].body          # not solved again, not rebuilt
    assert str(out["main"].ret_type) == "Tensor[(2), float32]"
    assert structural_equal(out, infer_module(rb.IRModule.from_expr(
        rb.Function([x], op.multiply(op.add(x, x), x)))))
