"""The operator attribute registry: levels, targets, scopes, the helpers; pattern and compute
registrations changing what FuseOps and the lowering build; user-defined operators from the text
format to a compiled kernel; and the layering (the operator layer imports no pass and no view)."""

import doctest
import subprocess
import sys

import numpy as np
import pytest

import relaybench as rb
from relaybench import op, te
from relaybench.op import OpPattern, registry
from relaybench.op.registry import (OpAttrContext, attr_scope, get_op_attr, op_attr_registrations,
                                    register_compute, register_op, register_op_attr, register_pattern)
from relaybench.passes.fuse_ops import fused_groups

H = '#[version = "0.0.5"]\n'


def test_docstring_examples():
    assert doctest.testmod(registry).failed == 0


# ---------------------------------------------------------------------------------------------
# Levels, targets, scopes

def test_the_opdef_slots_are_the_level_0_registrations():
    d = op.nn.conv2d.opdef
    assert get_op_attr("nn.conv2d", "TOpPattern") is d.pattern is OpPattern.OUT_ELEMWISE_FUSABLE
    assert get_op_attr("nn.conv2d", "FTVMCompute") is d.compute
    assert get_op_attr("nn.conv2d", "FInferCorrectLayout") is d.layout
    assert get_op_attr(rb.Op.get("nn.conv2d"), "FTVMCompute") is d.compute     # an Op works too
    assert get_op_attr("nn.conv2d", "FNoSuchKey", default=7) == 7


def test_a_higher_level_overrides_a_lower_one_and_the_scope_undoes_it():
    before = get_op_attr("add", "FTVMLegalize")
    with attr_scope():
        register_op_attr("add", "FTVMLegalize", "ten", level=10)
        assert get_op_attr("add", "FTVMLegalize") == "ten"
        register_op_attr("add", "FTVMLegalize", "twelve", level=12)
        register_op_attr("add", "FTVMLegalize", "eleven", level=11)
        assert get_op_attr("add", "FTVMLegalize") == "twelve"
        assert [r[2] for r in op_attr_registrations("add") if r[1] == "FTVMLegalize"] == [12, 11, 10]
    assert get_op_attr("add", "FTVMLegalize") is before is None
    assert not [r for r in op_attr_registrations("add") if r[1] == "FTVMLegalize"]


def test_the_same_level_twice_is_an_error_naming_op_key_and_level():
    with attr_scope():
        register_op_attr("nn.relu", "FTVMLegalize", "a", level=13)
        with pytest.raises(ValueError, match=r"nn\.relu: FTVMLegalize is already registered at level 13"):
            register_op_attr("nn.relu", "FTVMLegalize", "b", level=13)
        # the built-in slot is level 0 for every target
        with pytest.raises(ValueError, match=r"nn\.relu: TOpPattern is already registered at level 0"):
            register_pattern("nn.relu", OpPattern.OPAQUE, level=0)


def test_bad_registrations_say_what_is_wrong():
    with attr_scope():
        with pytest.raises(KeyError, match="unknown operator 'nn.reluu'"):
            register_op_attr("nn.reluu", "FTVMLegalize", "x")
        with pytest.raises(ValueError, match="level of FTVMLegalize must be an int >= 0"):
            register_op_attr("nn.relu", "FTVMLegalize", "x", level=-1)
        with pytest.raises(ValueError, match="nn.relu: 'elementwise' is not a pattern kind"):
            register_pattern("nn.relu", "elementwise")


def test_scopes_nest_and_undo_on_an_exception():
    with attr_scope():
        register_op_attr("exp", "FShapeFunc", "outer", level=11)
        with pytest.raises(RuntimeError):
            with attr_scope():
                register_op_attr("exp", "FShapeFunc", "inner", level=12)
                assert get_op_attr("exp", "FShapeFunc") == "inner"
                raise RuntimeError("leave the inner scope")
        assert get_op_attr("exp", "FShapeFunc") == "outer"
    assert callable(get_op_attr("exp", "FShapeFunc"))   # the library's own, level 0, again


def test_op_attr_context_overrides_everything_for_its_block():
    with attr_scope():
        register_op_attr("tanh", "FTVMLegalize", "high", level=50)
        with OpAttrContext("tanh", "FTVMLegalize", "context"):
            assert get_op_attr("tanh", "FTVMLegalize") == "context"
            assert get_op_attr("tanh", "FTVMLegalize", target="llvm") == "context"
        assert get_op_attr("tanh", "FTVMLegalize") == "high"


def test_a_targets_registration_applies_to_that_target_only():
    with attr_scope():
        register_op_attr("sigmoid", "FTVMLegalize", "every", level=10)
        register_op_attr("sigmoid", "FTVMLegalize", "toy", level=10, target="toy")
        assert get_op_attr("sigmoid", "FTVMLegalize") == "every"
        assert get_op_attr("sigmoid", "FTVMLegalize", target="llvm") == "every"
        # at an equal level the target's own wins; a target string or object names its kind
        assert get_op_attr("sigmoid", "FTVMLegalize", target="toy -opt=1") == "toy"
        register_op_attr("sigmoid", "FTVMLegalize", "every, higher", level=11)
        assert get_op_attr("sigmoid", "FTVMLegalize", target="toy") == "every, higher"


def test_the_x86_layout_policy_is_the_llvm_registration():
    from relaybench.backends.strategy import x86  # noqa: F401  (registers the llvm policy)
    assert get_op_attr("nn.conv2d", "FTVMAlterOpLayout", target="llvm") is x86._conv2d_layouts
    assert get_op_attr("nn.conv2d", "FTVMAlterOpLayout") is None        # not for every target
    assert ("nn.conv2d", "FTVMAlterOpLayout", 0, "llvm") in op_attr_registrations("nn.conv2d")


def test_table_shows_the_registrations_beyond_the_opdef():
    from relaybench.backends.strategy import x86  # noqa: F401
    with attr_scope():
        register_pattern("nn.relu", OpPattern.OPAQUE, level=11)
        rows = {r["op"]: r for r in op.table(["nn.relu", "nn.conv2d", "add"]).rows}
        assert rows["nn.relu"]["pattern"] == "OPAQUE"
        assert rows["nn.relu"]["registered"] == "TOpPattern[level 11]"
        assert "FTVMAlterOpLayout[llvm, level 0]" in rows["nn.conv2d"]["registered"]
        assert "FTVMConvertOpLayout" not in rows["add"]["registered"]
    assert op.table(["nn.relu"]).rows[0]["pattern"] == "ELEMWISE"


# ---------------------------------------------------------------------------------------------
# Pattern and compute registrations change what is built

ADD_RELU = rb.parse(H + """
def @main(%x: Tensor[(4, 8), float32], %y: Tensor[(4, 8), float32]) {
  %0 = add(%x, %y);
  nn.relu(%0)
}""")


def _ops_of_groups(mod):
    return [g.ops for g in fused_groups(mod)]


def test_register_pattern_changes_fusion():
    with rb.PassContext(opt_level=2):
        assert _ops_of_groups(rb.passes.FuseOps()(ADD_RELU)) == [("add", "nn.relu")]
    with attr_scope():
        register_pattern("nn.relu", OpPattern.OPAQUE, level=11)
        with rb.PassContext(opt_level=2):
            fused = rb.passes.FuseOps()(ADD_RELU)
        assert sorted(_ops_of_groups(fused)) == [("add",), ("nn.relu",)]


def test_register_pattern_and_compute_change_what_rb_build_makes():
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((4, 8)).astype("float32") for _ in range(2))

    def relu_plus_one(inputs, attrs, out_type):
        (data,) = inputs
        zero, one = te.cast(data.dtype, 0.0), te.cast(data.dtype, 1.0)
        return te.compute(data.shape, lambda *i: te.maximum(data[i], zero) + one, name="relu_plus_one")

    with attr_scope():
        register_compute("nn.relu", relu_plus_one, level=11)
        register_pattern("nn.relu", OpPattern.OPAQUE, level=11)
        lib = rb.build(ADD_RELU, target="llvm", opt_level=2)
        # the registered compute ran (it adds 1, which the numpy formula of relu does not)
        np.testing.assert_allclose(lib.run(x=x, y=y), np.maximum(x + y, 0) + 1, rtol=1e-6)
        assert sorted(_ops_of_groups(lib.mod)) == [("add",), ("nn.relu",)]
    lib = rb.build(ADD_RELU, target="llvm", opt_level=2)
    np.testing.assert_allclose(lib.run(x=x, y=y), np.maximum(x + y, 0), rtol=1e-6)
    assert _ops_of_groups(lib.mod) == [("add", "nn.relu")]


# ---------------------------------------------------------------------------------------------
# A user-defined operator

def _softplus_rel(types, attrs):
    return types[0]


def _softplus_compute(inputs, attrs, out_type):
    (x,) = inputs
    one = te.cast(x.dtype, 1.0)
    return te.compute(x.shape, lambda *i: te.log(one + te.exp(x[i])), name="softplus")


def _register_softplus():
    return register_op("my.softplus", ("data",), _softplus_rel, pattern=OpPattern.ELEMWISE,
                       reference=lambda x, attrs: np.log1p(np.exp(x)).astype(x.dtype),
                       compute=_softplus_compute, doc="log(1 + exp(x)), elementwise")


SOFTPLUS_TEXT = H + """
def @main(%x: Tensor[(2, 16), float32]) {
  %0 = my.softplus(%x);
  nn.relu(%0)
}"""


def test_a_user_operator_is_parsed_typed_interpreted_fused_and_compiled():
    x = np.linspace(-4, 4, 32, dtype="float32").reshape(2, 16)
    expected = np.maximum(np.log1p(np.exp(x.astype("float64"))), 0)
    with attr_scope():
        softplus = _register_softplus()
        mod = rb.parse(SOFTPLUS_TEXT)
        assert rb.parse(str(mod)) is not None and "my.softplus(%x)" in str(mod)     # prints, round-trips
        assert rb.passes.InferType()(mod)["main"].checked_type.ret_type == rb.TensorType((2, 16), "float32")
        got = rb.create_executor("interpreter", mod=mod).evaluate()(x)
        np.testing.assert_allclose(got, expected, rtol=1e-5)
        lib = rb.build(mod, target="llvm", opt_level=3)
        assert _ops_of_groups(lib.mod) == [("my.softplus", "nn.relu")]      # one fused kernel
        np.testing.assert_allclose(lib.run(x=x), expected, rtol=1e-5)
        assert isinstance(softplus(rb.var("y", shape=(3,))), rb.Call)
    # gone with its scope: it does not leak into later tests (random programs cover every op)
    assert "my.softplus" not in op.list_ops()
    assert not op_attr_registrations("my.softplus")
    with pytest.raises(rb.errors.ParseError, match="my.softplus"):
        rb.parse(SOFTPLUS_TEXT)


def test_a_user_operator_can_be_registered_again_in_a_later_scope():
    for _ in range(2):
        with attr_scope():
            _register_softplus()
            register_op_attr("my.softplus", "FTVMLegalize", "mine")
            assert rb.Op.get("my.softplus").opdef.name == "my.softplus"
    assert "my.softplus" not in op.list_ops()


def test_register_op_rejects_what_the_text_format_cannot_name_or_a_taken_name():
    with attr_scope():
        with pytest.raises(ValueError, match="not a dotted name"):
            register_op("my softplus", ("data",), _softplus_rel)
        with pytest.raises(ValueError, match="operator nn.relu is already registered"):
            register_op("nn.relu", ("data",), _softplus_rel)


# ---------------------------------------------------------------------------------------------
# Layering

def _modules_after(statement: str) -> set:
    code = f"import sys; {statement}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_the_operator_layer_imports_no_pass_and_no_view():
    loaded = _modules_after("import relaybench.op; relaybench.op.table()")
    assert "relaybench.op.nn" in loaded
    assert not {m for m in loaded if m.startswith(("relaybench.passes", "relaybench.viz"))}


def test_the_views_reexport_the_table():
    from relaybench._table import Table
    from relaybench.viz import Table as ViewTable
    from relaybench.viz.table import Table as ViewTable2
    assert Table is ViewTable is ViewTable2
    assert isinstance(op.table(["add"]), Table)
