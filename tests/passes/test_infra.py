"""The pass infrastructure: contexts, sequences, instruments' hooks, the registry, pipeline strings."""

import numpy as np
import pytest

import relaybench as rb
from relaybench import config, op
from relaybench.passes import infra
from relaybench.testing import run_infer_type
from relaybench.passes.infra import (FunctionPass, ModulePass, PassContext, PassInfo, PassInstrument,
                                     Sequential, function_pass, get_pass, kebab_case, module_pass,
                                     parse_pipeline)


def _mod():
    x = rb.var("x", shape=(2,))
    return rb.IRModule.from_expr(rb.Function([x], op.add(x, rb.const(1.0))))


class Recorder(PassInstrument):
    """Writes every hook call into a shared list of events."""

    def __init__(self, tag, events, veto=()):
        self.tag, self.events, self.veto = tag, events, set(veto)

    def enter_pass_ctx(self, ctx):
        self.events.append((self.tag, "enter"))

    def exit_pass_ctx(self, ctx):
        self.events.append((self.tag, "exit"))

    def should_run(self, mod, info):
        self.events.append((self.tag, "should_run", info.name))
        return info.name not in self.veto

    def run_before_pass(self, mod, info):
        self.events.append((self.tag, "before", info.name))

    def run_after_pass(self, mod, info):
        self.events.append((self.tag, "after", info.name))

    def run_failed_pass(self, mod, info, error):
        self.events.append((self.tag, "failed", info.name, type(error).__name__))

    def run_skipped_pass(self, mod, info, reason):
        self.events.append((self.tag, "skipped", info.name, reason))


@pytest.fixture
def toys(scratch_registry):
    """Four module passes at opt_levels 0-3 that record that they ran and change nothing."""
    ran = []

    def make(name, level):
        def fn(mod, ctx):
            ran.append(name)
            return mod
        fn.__name__ = name
        fn.__doc__ = f"{name}: records that it ran."
        return module_pass(opt_level=level)(fn)

    factories = {f"ToyLevel{i}": make(f"ToyLevel{i}", i) for i in range(4)}
    return factories, ran


# ---- names ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name, kebab", [
    ("FoldConstant", "fold-constant"), ("ToANormalForm", "to-a-normal-form"),
    ("CombineParallelConv2D", "combine-parallel-conv2d"), ("ToCPS", "to-cps"),
    ("SimplifyFCTranspose", "simplify-fc-transpose"), ("InferType", "infer-type"),
    ("FuseOps", "fuse-ops"), ("EliminateCommonSubexpr", "eliminate-common-subexpr"),
])
def test_kebab_case(name, kebab):
    assert kebab_case(name) == kebab


def test_registered_passes_have_unique_kebab_names():
    kebabs = [k for _n, k, _l, _d in infra.list_passes()]
    assert len(kebabs) == len(set(kebabs))


def test_get_pass_by_relay_and_kebab_name_and_suggestion():
    assert get_pass("InferType") is get_pass("infer-type")
    with pytest.raises(KeyError, match="did you mean infer-type"):
        get_pass("infer-typ")
    with pytest.raises(TypeError):
        get_pass(3)


# ---- the context decides ----------------------------------------------------------------------


def test_opt_level_gates_passes_and_reports_skipped(toys):
    f, ran = toys
    events = []
    seq = Sequential([f[f"ToyLevel{i}"]() for i in range(4)])
    with PassContext(opt_level=1, instruments=[Recorder("a", events)]):
        seq(_mod())
    assert ran == ["ToyLevel0", "ToyLevel1"]
    skipped = [(e[2], e[3]) for e in events if e[1] == "skipped"]
    assert skipped == [("ToyLevel2", "opt_level 2 > context opt_level 1"),
                       ("ToyLevel3", "opt_level 3 > context opt_level 1")]


@pytest.mark.parametrize("spelling", ["ToyLevel3", "toy-level3"])
def test_required_pass_runs_above_opt_level(toys, spelling):
    f, ran = toys
    with PassContext(opt_level=0, required_pass=[spelling]):
        Sequential([f["ToyLevel2"](), f["ToyLevel3"]()])(_mod())
    assert ran == ["ToyLevel3"]


@pytest.mark.parametrize("spelling", ["ToyLevel0", "toy-level0"])
def test_disabled_pass_is_skipped_even_if_required(toys, spelling):
    f, ran = toys
    events = []
    with PassContext(opt_level=3, disabled_pass=[spelling], required_pass=["ToyLevel0"],
                     instruments=[Recorder("a", events)]):
        Sequential([f["ToyLevel0"](), f["ToyLevel1"]()])(_mod())
    assert ran == ["ToyLevel1"]
    assert ("a", "skipped", "ToyLevel0", "disabled by the pass context") in events


def test_pass_names_must_be_a_list():
    with pytest.raises(TypeError, match="lists of pass names"):
        PassContext(required_pass="FoldConstant")


def test_nested_contexts_and_current():
    outer, inner = PassContext(opt_level=3), PassContext(opt_level=0)
    with outer:
        assert PassContext.current() is outer
        with inner:
            assert PassContext.current() is inner
            with outer:  # a context may be entered again while active
                assert PassContext.current() is outer
            assert PassContext.current() is inner
        assert PassContext.current() is outer
    assert PassContext.current() is not outer


def test_inner_context_decides(toys):
    f, ran = toys
    seq = Sequential([f["ToyLevel2"]()])
    with PassContext(opt_level=3):
        with PassContext(opt_level=1):
            seq(_mod())
        assert ran == []
        seq(_mod())
    assert ran == ["ToyLevel2"]


def test_config_is_read_by_passes(scratch_registry):
    seen = []

    @module_pass(opt_level=0)
    def ToyReadsConfig(mod, ctx):
        seen.append(ctx.get_config("toy.depth", 7))
        return mod

    ToyReadsConfig()(_mod())
    with PassContext(config={"toy.depth": 3}):
        ToyReadsConfig()(_mod())
    assert seen == [7, 3]


# ---- instruments' hooks --------------------------------------------------------------------------


def test_hook_order_with_two_instruments_and_nesting(toys):
    f, _ran = toys
    events = []
    inner = Sequential([f["ToyLevel0"](), f["ToyLevel3"]()], name="Inner")
    outer = Sequential([f["ToyLevel1"](), inner], name="Outer")
    with PassContext(opt_level=2, instruments=[Recorder("a", events), Recorder("b", events)]):
        outer(_mod())
    expected = [("a", "enter"), ("b", "enter")]
    for name in ["Outer", "ToyLevel1"]:
        expected += [("a", "should_run", name), ("b", "should_run", name),
                     ("a", "before", name), ("b", "before", name)]
    expected += [("a", "after", "ToyLevel1"), ("b", "after", "ToyLevel1")]
    for name in ["Inner", "ToyLevel0"]:
        expected += [("a", "should_run", name), ("b", "should_run", name),
                     ("a", "before", name), ("b", "before", name)]
    expected += [("a", "after", "ToyLevel0"), ("b", "after", "ToyLevel0")]
    reason = "opt_level 3 > context opt_level 2"
    expected += [("a", "skipped", "ToyLevel3", reason), ("b", "skipped", "ToyLevel3", reason)]
    expected += [("a", "after", "Inner"), ("b", "after", "Inner"),
                 ("a", "after", "Outer"), ("b", "after", "Outer"),
                 ("a", "exit"), ("b", "exit")]
    assert events == expected


def test_should_run_veto_skips_the_pass(toys):
    f, ran = toys
    events = []
    with PassContext(opt_level=3, instruments=[Recorder("a", events, veto={"ToyLevel1"})]):
        Sequential([f["ToyLevel0"](), f["ToyLevel1"]()])(_mod())
    assert ran == ["ToyLevel0"]
    assert ("a", "skipped", "ToyLevel1", "an instrument (Recorder) said not to run it") in events
    assert ("a", "before", "ToyLevel1") not in events


def test_required_pass_is_not_vetoed(toys):
    f, ran = toys
    events = []
    with PassContext(opt_level=3, required_pass=["ToyLevel1"],
                     instruments=[Recorder("a", events, veto={"ToyLevel1"})]):
        f["ToyLevel1"]()(_mod())
    assert ran == ["ToyLevel1"]
    assert not any(e[1] == "should_run" for e in events)


def test_failing_pass_is_reported_and_named(scratch_registry):
    @module_pass(opt_level=0)
    def ToyFails(mod, ctx, *, reason="broken"):
        raise ValueError(reason)

    events = []
    with PassContext(instruments=[Recorder("a", events)]):
        with pytest.raises(ValueError, match="broken") as info:
            Sequential([ToyFails()], name="Outer")(_mod())
    assert info.value.__notes__ == ["while running pass ToyFails", "while running pass Outer"]
    assert events[-3:] == [("a", "failed", "ToyFails", "ValueError"), ("a", "failed", "Outer", "ValueError"),
                           ("a", "exit")]


def test_pass_must_return_a_module(scratch_registry):
    @module_pass(opt_level=0)
    def ToyReturnsFunction(mod, ctx):
        return mod["main"]

    with pytest.raises(TypeError, match="ToyReturnsFunction returned Function, not an IRModule"):
        ToyReturnsFunction()(_mod())
    with pytest.raises(TypeError, match="runs on an IRModule"):
        ToyReturnsFunction()(_mod()["main"])


# ---- function passes, identity, types ------------------------------------------------------------


def _primitive_module():
    """@main calls @prim (Primitive), @ext (Compiler), @skip (SkipOptimization) and @plain."""
    mod = rb.IRModule()
    gvs = {}
    for name, attrs in [("prim", {"Primitive": 1}), ("ext", {"Compiler": "accel"}),
                        ("skip", {"SkipOptimization": 1}), ("plain", {})]:
        x = rb.var("x", shape=(2,))
        gvs[name] = mod.add(name, rb.Function([x], op.add(x, rb.const(1.0)), attrs=attrs))
    x = rb.var("x", shape=(2,))
    body = x
    for gv in gvs.values():
        body = rb.Call(gv, [body])
    mod["main"] = rb.Function([x], body)
    return mod


def test_function_pass_skips_primitive_external_and_skip_optimization(scratch_registry):
    visited = []

    @function_pass(opt_level=0)
    def ToyDoubleBody(func, mod, ctx):
        visited.append(func)
        return rb.Function(func.params, op.multiply(func.body, rb.const(2.0)), func.ret_type,
                           func.type_params, func.attrs)

    mod = run_infer_type(_primitive_module())
    out = ToyDoubleBody()(mod)
    names = {gv.name_hint for gv, f in mod.functions.items() if any(f is v for v in visited)}
    assert names == {"plain", "main"}
    for name in ["prim", "ext", "skip"]:
        assert out[name] is mod[name]
    x = np.array([1.0, 2.0], "float32")
    run = rb.create_executor("interpreter", mod=out).evaluate()
    # main doubles ((x + 1) + 1 + 1 + 1) * 2 from plain, then * 2 from main
    np.testing.assert_allclose(run(x), (x + 4) * 2 * 2)


def test_unchanged_module_is_the_same_object(scratch_registry):
    @function_pass(opt_level=0)
    def ToyIdentity(func, mod, ctx):
        return func

    @module_pass(opt_level=0)
    def ToyModuleIdentity(mod, ctx):
        return mod

    mod = _primitive_module()
    assert ToyIdentity()(mod) is mod
    assert Sequential([ToyIdentity(), ToyModuleIdentity()])(mod) is mod
    with PassContext(opt_level=0):
        assert Sequential([get_pass("InferType")(), ToyIdentity()])(mod) is not mod


def test_output_is_typed_again(scratch_registry):
    @module_pass(opt_level=0)
    def ToyNewMain(mod, ctx):
        x = rb.var("x", shape=(3, 2))
        return mod.with_functions({mod.get_global_var("main"): rb.Function([x], op.sum(x, axis=0))})

    out = ToyNewMain()(_mod())
    assert str(out["main"].checked_type) == "fn (Tensor[(3, 2), float32]) -> Tensor[(2), float32]"
    assert str(out["main"].body.checked_type) == "Tensor[(2), float32]"


def test_function_pass_must_return_a_function(scratch_registry):
    @function_pass(opt_level=0)
    def ToyReturnsBody(func, mod, ctx):
        return func.body

    with pytest.raises(TypeError, match="ToyReturnsBody returned Call for @main, not a Function"):
        ToyReturnsBody()(_mod())


def test_required_passes_run_first_once(scratch_registry):
    order = []

    @module_pass(opt_level=0)
    def ToyPrep(mod, ctx):
        order.append("prep")
        return mod

    @module_pass(opt_level=0, required=("ToyPrep",))
    def ToyUsesPrep(mod, ctx):
        order.append("uses")
        return mod

    with PassContext(opt_level=0):
        Sequential([ToyUsesPrep(), ToyUsesPrep()])(_mod())
        Sequential([ToyPrep(), ToyUsesPrep()])(_mod())
    assert order == ["prep", "uses", "uses", "prep", "uses"]


def test_factory_options_and_info(scratch_registry):
    @module_pass(opt_level=2)
    def ToyWithOptions(mod, ctx, *, depth=3, name="x"):
        """A toy with options.

        More text that is not the first paragraph."""
        return mod

    p = ToyWithOptions(depth=5)
    assert isinstance(p, ModulePass) and p.options == {"depth": 5, "name": "x"}
    assert p.info == PassInfo("ToyWithOptions", 2, (), "A toy with options.", "toy-with-options",
                              (("depth", 5),), "module")
    assert p.info.label == "ToyWithOptions{depth=5}"
    assert ToyWithOptions.info.opt_level == 2
    assert infra.pass_options("toy-with-options") == {"depth": 3, "name": "x"}
    with pytest.raises(TypeError, match="ToyWithOptions has no option 'width' .options: depth, name."):
        ToyWithOptions(width=2)
    with pytest.raises(TypeError, match="needs a default"):
        @module_pass()
        def ToyNoDefault(mod, ctx, *, depth):
            return mod
    row = [r for r in infra.passes_table().rows if r["name"] == "ToyWithOptions"][0]
    assert row == {"name": "ToyWithOptions", "kebab": "toy-with-options", "opt_level": 2,
                   "options": "depth=3, name='x'", "doc": "A toy with options."}


def test_function_pass_kind(scratch_registry):
    @function_pass(opt_level=1)
    def ToyKind(func, mod, ctx):
        return func

    assert isinstance(ToyKind(), FunctionPass) and ToyKind().info.kind == "function"
    assert Sequential([]).info.is_sequential


def test_passes_table_lists_every_registered_pass():
    table = infra.passes_table()
    assert [r["name"] for r in table.rows] == [n for n, *_ in infra.list_passes()]
    infer = [r for r in table.rows if r["name"] == "InferType"][0]
    assert infer["kebab"] == "infer-type" and infer["opt_level"] == 0
    assert "InferType" in str(table)


# ---- pipeline strings --------------------------------------------------------------------------


@pytest.fixture
def typed_options(scratch_registry):
    @module_pass(opt_level=0)
    def ToyOptions(mod, ctx, *, flag=False, count=1, scale=1.0, label="a", layers=(), extra=None,
                   layouts={}):  # noqa: B006 (a default read, never mutated)
        return mod

    @function_pass(opt_level=0)
    def ToyPlain(func, mod, ctx):
        return func

    return ToyOptions


def _options(seq, i=0):
    return dict(seq.passes[i].info.options)


def test_pipeline_names_and_whitespace(typed_options):
    seq = parse_pipeline("  toy-plain , ToyPlain,toy-options{ } ")
    assert [p.info.name for p in seq] == ["ToyPlain", "ToyPlain", "ToyOptions"]
    assert seq.info.name == "pipeline" and _options(seq, 2) == {}
    assert len(parse_pipeline("")) == 0


@pytest.mark.parametrize("text, expected", [
    ("flag=true", {"flag": True}), ("flag=False", {"flag": False}), ("flag=1", {"flag": True}),
    ("count=12", {"count": 12}), ("count=-3", {"count": -3}),
    ("scale=0.5", {"scale": 0.5}), ("scale=2", {"scale": 2.0}), ("scale=1e-3", {"scale": 1e-3}),
    ("label=NHWC", {"label": "NHWC"}), ("label='a, b}'", {"label": "a, b}"}), ('label="7"', {"label": "7"}),
    ("layers=[0; 2]", {"layers": (0, 2)}), ("layers=[0, 2]", {"layers": (0, 2)}),
    ("layers=3", {"layers": (3,)}), ("layers=[]", {"layers": ()}),
    ("extra=none", {"extra": None}), ("extra=4", {"extra": 4}), ("extra=[a, 1.5]", {"extra": ["a", 1.5]}),
    ("layouts={nn.conv2d: [NHWC, default]}", {"layouts": {"nn.conv2d": ["NHWC", "default"]}}),
    ("layouts={'nn.conv2d': ['NCHW', 'OIHW'], nn.max_pool2d: [NHWC]}",
     {"layouts": {"nn.conv2d": ["NCHW", "OIHW"], "nn.max_pool2d": ["NHWC"]}}),
    ("count=2, flag=true, label=x", {"count": 2, "flag": True, "label": "x"}),
    ("scale-factor=3", None),
])
def test_pipeline_option_values(typed_options, text, expected):
    if expected is None:  # an option name with '-' is read as '_'; scale_factor is not an option
        with pytest.raises(ValueError, match="ToyOptions has no option 'scale_factor'"):
            parse_pipeline("toy-options{" + text + "}")
        return
    seq = parse_pipeline("toy-options{" + text + "}, toy-plain")
    assert _options(seq) == expected
    for key, value in expected.items():
        assert seq.passes[0].options[key] == value
        assert type(seq.passes[0].options[key]) is type(value)


@pytest.mark.parametrize("text, message, position", [
    ("toy-plain,fold-constnt", "unknown pass 'fold-constnt'; did you mean fold-constant", 10),
    ("toy-options{count=x}", "ToyOptions: option count expects a int, got 'x'", 18),
    ("toy-options{flag=maybe}", "ToyOptions: option flag expects a bool, got 'maybe'", 17),
    ("toy-options{scale=[1]}", "ToyOptions: option scale expects a float", 18),
    ("toy-options{layouts=[1]}", "ToyOptions: option layouts expects a dict", 20),
    ("toy-options{depth=1}", "ToyOptions has no option 'depth'", 12),
    ("toy-options{count=1, count=2}", "option count of ToyOptions given twice", 21),
    ("toy-options{count 1}", "expected '=' after option count of ToyOptions", 18),
    ("toy-options{count=1", "missing '}' after the options of toy-options", 19),
    ("toy-options{count=}", "missing value", 18),
    ("toy-options{layers=[1, 2}", "unbalanced '}'", 24),
    ("toy-options{label='abc}", "unterminated string", 18),
    ("toy-plain,,toy-plain", "expected a pass name, found ','", 10),
    ("toy-plain toy-plain", "expected ',' after toy-plain", 10),
    ("toy-plain{flag=true}", "ToyPlain has no option 'flag' (options: none)", 10),
])
def test_pipeline_errors_name_position_pass_and_option(typed_options, text, message, position):
    with pytest.raises(ValueError) as info:
        parse_pipeline(text)
    text_of_error = str(info.value)
    assert message in text_of_error
    assert f"position {position}:" in text_of_error
    caret_line = text_of_error.splitlines()[-1]
    assert caret_line == "  " + " " * position + "^"


# ---- RB_DEBUG ---------------------------------------------------------------------------------------


def test_rb_debug_3_prints_the_ir_after_each_pass(toys, capsys):
    f, _ran = toys
    seq = Sequential([f["ToyLevel0"](), f["ToyLevel3"]()], name="Outer")
    with config.Context(RB_DEBUG=3):
        with PassContext(opt_level=2):
            seq(_mod())
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "// IR after ToyLevel0"
    assert lines[1] == '#[version = "0.0.5"]'
    assert "add(%x, 1f" in out
    assert "// skipped ToyLevel3: opt_level 3 > context opt_level 2" in lines
    assert "// IR after Outer" not in out  # a sequence's result is its last member's
    with config.Context(RB_DEBUG=2):
        with PassContext(opt_level=2):
            seq(_mod())
    assert capsys.readouterr().out == ""
