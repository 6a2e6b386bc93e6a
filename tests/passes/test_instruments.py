"""Instruments (PassTimer, Snapshots, PrintIR, VerifyEach) and well-formedness."""

import io
import time

import pytest

import relaybench as rb
from relaybench import op
from relaybench.errors import RelayError
from relaybench.ir.symbolic import ANY
from relaybench.ir.types import FuncType, TensorType, TupleType
from relaybench.passes.infra import PassContext, Sequential, function_pass, get_pass, module_pass
from relaybench.passes.instruments import (SIGNATURE_CHANGING_PASSES, PassTimer, PassVerificationError,
                                           PrintIR, Snapshots, VerifyEach, _refines)
from relaybench.passes.well_formed import (WellFormedError, check_well_formed, well_formed,
                                           well_formed_problems)
from relaybench.testing import run_infer_type


def _mod():
    """fn (%x) { multiply(add(%x, 0f), 2f) }"""
    x = rb.var("x", shape=(2, 3))
    return rb.IRModule.from_expr(rb.Function([x], op.multiply(op.add(x, rb.const(0.0)), rb.const(2.0))))


@pytest.fixture
def toys(scratch_registry):
    """Hand-made passes: one that removes ``add(e, 0)``, one that changes nothing, one that
    rebuilds the same program, one at opt_level 3 and one that fails."""

    @function_pass(opt_level=0)
    def ToyDropAddZero(func, mod, ctx):
        """add(e, 0f) -> e, at the root's first argument only."""
        body = func.body
        inner = body.args[0]
        if isinstance(inner, rb.Call) and inner.op.name == "add" and isinstance(inner.args[1], rb.Constant) \
                and float(inner.args[1].data) == 0.0:
            return rb.Function(func.params, rb.Call(body.op, [inner.args[0], body.args[1]], body.attrs),
                               func.ret_type, func.type_params, func.attrs)
        return func

    @module_pass(opt_level=0)
    def ToyNothing(mod, ctx):
        return mod

    @module_pass(opt_level=0)
    def ToyRebuild(mod, ctx):
        x = rb.var("x", shape=(2, 3))
        body = op.multiply(op.add(x, rb.const(0.0)), rb.const(2.0))
        return mod.with_functions({mod.get_global_var("main"): rb.Function([x], body)})

    @module_pass(opt_level=3)
    def ToyHigh(mod, ctx):
        return mod

    @module_pass(opt_level=0)
    def ToyBroken(mod, ctx):
        raise RuntimeError("toy failure\nsecond line")

    @module_pass(opt_level=0)
    def ToySleep(mod, ctx, *, seconds=0.02):
        time.sleep(seconds)
        return mod

    return dict(drop=ToyDropAddZero, nothing=ToyNothing, rebuild=ToyRebuild, high=ToyHigh,
                broken=ToyBroken, sleep=ToySleep)


# ---- Snapshots ---------------------------------------------------------------------------------


def test_snapshot_records_every_field(toys):
    t = toys
    mod = run_infer_type(_mod())     # typed and annotated: a rebuild of it is equal to it
    snaps = Snapshots()
    inner = Sequential([t["drop"](), t["high"]()], name="Inner")
    seq = Sequential([t["nothing"](), t["rebuild"](), inner], name="Outer")
    with PassContext(opt_level=2, instruments=[snaps]):
        out = seq(mod)
    assert len(snaps) == 6
    assert [(r.index, r.name, r.depth) for r in snaps] == [
        (0, "Outer", 0), (1, "ToyNothing", 1), (2, "ToyRebuild", 1), (3, "Inner", 1),
        (4, "ToyDropAddZero", 2), (5, "ToyHigh", 2)]
    outer, nothing, rebuild, inner_rec, drop, high = snaps.records

    # a pass that returned its input, and one that built an equal program anew
    assert nothing.before is mod and nothing.after is mod
    assert nothing.same_object and not nothing.changed and nothing.status == "ran"
    assert rebuild.before is mod and rebuild.after is not mod
    assert not rebuild.same_object and not rebuild.changed

    # the pass that changed the program
    assert (drop.kind, drop.opt_level, drop.status, drop.skipped, drop.reason) == ("function", 0, "ran", False, None)
    assert drop.label == "ToyDropAddZero" and drop.info.kebab == "toy-drop-add-zero"
    assert drop.before is rebuild.after and drop.after is out
    assert not drop.same_object and drop.changed
    # before: Function, %x, add, 0f, add(...), multiply, 2f, multiply(...) = 8 nodes, 2 ops
    assert (drop.ops_before, drop.ops_after, drop.nodes_before, drop.nodes_after) == (2, 1, 8, 5)
    assert drop.before_text == rebuild.after.astext()
    assert drop.after_text == out.astext()
    assert "add(%x, 0f" in drop.before_text and "add(" not in drop.after_text
    assert "multiply(%x, 2f" in drop.after_text
    assert drop.seconds > 0
    assert "-  %0 = add(%x, 0f" in drop.diff()
    assert nothing.diff() == ""

    # skipped: the same module before and after, with the reason
    assert (high.skipped, high.status, high.reason) == (True, "skipped", "opt_level 3 > context opt_level 2")
    assert (high.kind, high.opt_level, high.depth) == ("module", 3, 2)
    assert high.before is out and high.after is out and not high.changed and high.seconds == 0.0

    # sequences: their result is their last member's
    assert inner_rec.before is rebuild.after and inner_rec.after is out and inner_rec.kind == "sequential"
    assert outer.before is mod and outer.after is out and snaps.final is out
    assert outer.seconds >= inner_rec.seconds >= drop.seconds

    assert snaps.changed() == [outer, inner_rec, drop]
    assert snaps.skipped() == [high] and len(snaps.ran()) == 5
    assert snaps[4] is drop and snaps["ToyDropAddZero"] is drop and snaps["toy-high"] is high
    assert snaps[1:3] == [nothing, rebuild] and list(snaps) == snaps.records
    with pytest.raises(KeyError, match="no pass named 'Nope'"):
        snaps["Nope"]


def test_snapshot_table(toys):
    t = toys
    snaps = Snapshots()
    with PassContext(opt_level=2, instruments=[snaps]):
        Sequential([t["drop"](), t["high"](), t["nothing"]()], name="Outer")(_mod())
    rows = snaps.table().rows
    assert [r["pass"] for r in rows] == ["Outer", "  ToyDropAddZero", "  ToyHigh", "  ToyNothing"]
    assert rows[1]["ops"] == "2 -> 1" and rows[1]["nodes"] == "8 -> 5" and rows[1]["changed"] == "yes"
    assert rows[1]["status"] == "ran" and rows[1]["opt_level"] == 0
    assert rows[2]["status"] == "skipped: opt_level 3 > context opt_level 2"
    assert rows[3]["changed"] == "no (same module)" and rows[3]["ops"] == "1"
    assert [r["pass"] for r in snaps.table(changed_only=True).rows] == ["Outer", "  ToyDropAddZero"]
    assert "ToyDropAddZero" in str(snaps.table()) and "<table>" in snaps._repr_html_()


def test_snapshot_of_a_failed_pass_keeps_the_stack(toys):
    t = toys
    snaps, timer = Snapshots(), PassTimer()
    with PassContext(instruments=[snaps, timer]):
        with pytest.raises(RuntimeError):
            Sequential([t["broken"]()], name="Outer")(_mod())
        t["nothing"]()(_mod())
    broken = snaps["ToyBroken"]
    assert broken.failed and broken.status == "failed" and broken.after is None
    assert broken.error == "RuntimeError: toy failure"
    assert snaps["Outer"].failed
    assert snaps["ToyNothing"].depth == 0  # the stack unwound
    assert [r.depth for r in timer.records] == [0, 1, 0] and timer.records[1].failed


def test_snapshot_text_is_lazy():
    mod, _params = rb.models.resnet18(image_shape=(3, 32, 32), num_classes=10, init_params=False)
    snaps = Snapshots()
    start = time.perf_counter()
    with PassContext(opt_level=3, instruments=[snaps]):
        Sequential([get_pass("InferType")() for _ in range(3)])(mod)
    table = snaps.table()
    assert time.perf_counter() - start < 20
    assert snaps._texts == {}  # no IR text was printed to build the table
    assert len(table.rows) == 4 and table.rows[1]["ops"] == str(rb.ir.count_ops(mod))
    text = snaps[1].after_text
    assert text.startswith('#[version = "0.0.5"]') and snaps[2].before_text is text


def test_eager_text_is_taken_while_running(toys):
    snaps = Snapshots(eager_text=True)
    with PassContext(instruments=[snaps]):
        toys["drop"]()(_mod())
    assert len(snaps._texts) == 2


# ---- PassTimer ---------------------------------------------------------------------------------


def test_timer_nests_and_sums(toys):
    t = toys
    timer = PassTimer()
    seq = Sequential([t["sleep"](seconds=0.02), Sequential([t["sleep"](seconds=0.01)], name="Inner")],
                     name="Outer")
    with PassContext(instruments=[timer]):
        seq(_mod())
    names = [(r.name, r.depth) for r in timer.records]
    assert names == [("Outer", 0), ("ToySleep", 1), ("Inner", 1), ("ToySleep", 2)]
    outer, sleep1, inner, sleep2 = timer.records
    assert sleep1.seconds >= 0.02 and sleep2.seconds >= 0.01
    assert outer.seconds >= sleep1.seconds + inner.seconds
    assert inner.seconds >= sleep2.seconds
    assert abs(outer.self_seconds - (outer.seconds - sleep1.seconds - inner.seconds)) < 1e-9
    assert timer.total == outer.seconds
    calls, total, own = timer.totals()["ToySleep"]
    assert calls == 2 and total == pytest.approx(sleep1.seconds + sleep2.seconds)
    summary = timer.summary().splitlines()
    assert summary[0].startswith("pass timing: 4 pass runs")
    assert summary[1].lstrip().startswith("Outer") and "100.0%" in summary[1]
    assert summary[2].startswith("    ToySleep{seconds=0.02}")
    assert summary[4].startswith("      ToySleep{seconds=0.01}")
    rows = timer.table().rows
    assert [r["pass"] for r in rows] == ["Outer", "  ToySleep{seconds=0.02}", "  Inner",
                                         "    ToySleep{seconds=0.01}"]
    assert float(rows[1]["ms"]) >= 20
    timer.reset()
    assert timer.records == [] and timer.total == 0


# ---- PrintIR -------------------------------------------------------------------------------------


def test_print_ir_only_around_named_passes(toys):
    t = toys
    buf = io.StringIO()
    seq = Sequential([t["nothing"](), t["drop"](), t["high"]()], name="Outer")
    with PassContext(opt_level=2, instruments=[PrintIR(["toy-drop-add-zero"], before=True, file=buf)]):
        seq(_mod())
    text = buf.getvalue()
    headers = [line for line in text.splitlines() if line.startswith("//")]
    assert headers == ["// IR before ToyDropAddZero", "// IR after ToyDropAddZero"]
    before, after = text.split("// IR after ToyDropAddZero\n")
    assert "add(%x, 0f" in before and "add(" not in after


def test_print_ir_every_pass_by_default(toys, capsys):
    t = toys
    with PassContext(opt_level=2, instruments=[PrintIR(show_types=False, show_skipped=True)]):
        Sequential([t["nothing"](), t["high"]()], name="Outer")(_mod())
    out = capsys.readouterr().out
    headers = [line for line in out.splitlines() if line.startswith("//")]
    assert headers == ["// IR after ToyNothing", "// skipped ToyHigh: opt_level 3 > context opt_level 2"]
    assert "/* ty=" not in out


def test_print_ir_names_a_sequence_explicitly(toys):
    buf = io.StringIO()
    with PassContext(instruments=[PrintIR("Outer", file=buf)]):
        Sequential([toys["nothing"]()], name="Outer")(_mod())
    assert buf.getvalue().splitlines()[0] == "// IR after Outer"


# ---- VerifyEach ----------------------------------------------------------------------------------


def test_verify_each_accepts_good_passes(toys):
    with PassContext(instruments=[VerifyEach()]):
        out = Sequential([toys["drop"](), toys["rebuild"]()])(_mod())
    assert rb.structural_equal(run_infer_type(out), run_infer_type(_mod()))


def test_verify_each_catches_a_rebound_variable(scratch_registry):
    @function_pass(opt_level=0)
    def ToyRebind(func, mod, ctx):
        """let %x = %x * 2 in %x, reusing the parameter %x as the let variable."""
        x = func.params[0]
        return rb.Function(func.params, rb.Let(x, op.multiply(func.body, rb.const(2.0)), x))

    with PassContext(instruments=[VerifyEach()]):
        with pytest.raises(PassVerificationError) as info:
            ToyRebind()(_mod())
    assert info.value.pass_name == "ToyRebind"
    assert str(info.value).startswith("after pass ToyRebind: the program is not well formed: "
                                      "in @main: %x is bound twice (by a function parameter and by a let)")
    assert isinstance(info.value, RelayError)


def test_verify_each_catches_a_changed_main_type(scratch_registry):
    @function_pass(opt_level=0)
    def ToyToDouble(func, mod, ctx):
        return rb.Function(func.params, op.cast(func.body, dtype="float64"))

    with PassContext(instruments=[VerifyEach()]):
        with pytest.raises(PassVerificationError, match=r"after pass ToyToDouble: @main's type changed from "
                           r"fn \(Tensor\[\(2, 3\), float32\]\) -> Tensor\[\(2, 3\), float32\] to "
                           r"fn \(Tensor\[\(2, 3\), float32\]\) -> Tensor\[\(2, 3\), float64\]"):
            ToyToDouble()(_mod())
    # a pass allowed to change the signature goes through
    for spelling in ["ToyToDouble", "toy-to-double"]:
        with PassContext(instruments=[VerifyEach(allow_signature_change=[spelling])]):
            out = ToyToDouble()(_mod())
        assert str(out["main"].checked_type).endswith("float64]")
    assert "Gradient" in SIGNATURE_CHANGING_PASSES


def test_verify_each_catches_ill_typed_output(scratch_registry):
    @module_pass(opt_level=0)
    def ToyIllTyped(mod, ctx):
        main = mod["main"]
        y = rb.var("y", shape=(5,))
        # an untyped output would fail in the infrastructure's own re-typing; give it stale types
        body = op.add(main.params[0], y)
        new = rb.Function(main.params, body, main.ret_type)
        new.set_checked_type(main.checked_type)
        body.set_checked_type(main.body.checked_type)
        return mod.with_functions({mod.get_global_var("main"): new})

    mod = rb.passes.InferType()(_mod())
    with PassContext(instruments=[VerifyEach(well_formed=False)]):
        with pytest.raises(PassVerificationError, match="after pass ToyIllTyped: the program no longer "
                                                        "type-checks: "):
            ToyIllTyped()(mod)


def test_verify_each_catches_stale_types(scratch_registry):
    @module_pass(opt_level=0)
    def ToyStaleType(mod, ctx):
        main = mod["main"]
        body = op.sum(main.params[0], axis=0)
        new = rb.Function(main.params, op.expand_dims(body, axis=0) * rb.const(1.0))
        new.set_checked_type(FuncType([TensorType((2, 3), "float32")], TensorType((2, 3), "float32")))
        new.body.set_checked_type(TensorType((2, 3), "float32"))
        return mod.with_functions({mod.get_global_var("main"): new})

    mod = rb.passes.InferType()(_mod())
    with PassContext(instruments=[VerifyEach()]):
        with pytest.raises(PassVerificationError, match=r"@main carries the type .* but its body has the type"):
            ToyStaleType()(mod)


def test_verify_each_catches_an_unknown_global():
    # the infrastructure's re-typing already rejects such an output, so check the module directly
    x = rb.var("x", shape=(2, 3))
    bad = rb.IRModule.from_expr(rb.Function([x], rb.Call(rb.GlobalVar("nowhere"), [x])))
    with pytest.raises(PassVerificationError, match="after pass ToyCallsNowhere: the program is not well "
                                                    "formed: in @main: @nowhere is not a function of the module"):
        VerifyEach().verify(bad, "ToyCallsNowhere")


def test_signature_refinement():
    def fn(ret):
        return FuncType([TensorType((ANY, 3), "float32")], ret)

    assert _refines(fn(TensorType((ANY, 3), "float32")), fn(TensorType((4, 3), "float32")))
    assert not _refines(fn(TensorType((4, 3), "float32")), fn(TensorType((ANY, 3), "float32")))
    assert not _refines(fn(TensorType((ANY, 3), "float32")), fn(TensorType((4, 3), "int32")))
    assert _refines(TupleType([TensorType((ANY,), "int32")]), TupleType([TensorType((2,), "int32")]))
    assert not _refines(TupleType([TensorType((2,), "int32")]), TensorType((2,), "int32"))


def test_verify_each_on_a_zoo_model_through_real_passes():
    mod, params = rb.models.lstm(seq_len=2, input_size=4, hidden_size=8, form="loop")
    with PassContext(opt_level=3, instruments=[VerifyEach()]):
        out = Sequential([get_pass(n)() for n in ("InferType", "ToANormalForm", "DeadCodeElimination")])(mod)
    assert well_formed(out)


# ---- well-formedness -----------------------------------------------------------------------------


def _one(problems):
    assert len(problems) == 1, problems
    return problems[0]


def test_well_formed_accepts_scoping_done_right():
    x, y, f, n = rb.var("x", shape=(2,)), rb.var("y", shape=(2,)), rb.var("f"), rb.var("n", shape=(2,))
    # a recursive let-bound closure sees itself; lets shadow nothing
    loop = rb.Function([n], rb.Call(f, [n]))
    body = rb.Let(f, loop, rb.Let(y, x + x, rb.Tuple([y, y])))
    assert well_formed(rb.IRModule.from_expr(rb.Function([x], body)))
    # the same subexpression shared by two uses is one node, not two bindings
    shared = rb.Let(y, x * x, y)
    assert well_formed(rb.IRModule.from_expr(rb.Function([x], rb.Tuple([shared, shared]))))
    # a lone expression may have free variables
    assert well_formed(op.add(x, y))


def test_well_formed_finds_a_variable_bound_twice():
    x, y = rb.var("x", shape=(2,)), rb.var("y", shape=(2,))
    inner = rb.Function([y], y)
    twice = rb.Function([x], rb.Tuple([rb.Call(inner, [x]), rb.Call(rb.Function([y], y * y), [x])]))
    assert _one(well_formed_problems(rb.IRModule.from_expr(twice))) == \
        "in @main: %y is bound twice (by a function parameter and by a function parameter)"
    same_params = rb.Function([x, x], x)
    assert _one(well_formed_problems(rb.IRModule.from_expr(same_params))) == \
        "in @main: %x is bound twice (by a function parameter and by a function parameter)"


def test_well_formed_finds_a_variable_out_of_scope():
    x, y, z = rb.var("x", shape=(2,)), rb.var("y", shape=(2,)), rb.var("z", shape=(2,))
    out_of_let = rb.Function([x], rb.Tuple([rb.Let(y, x, y), y]))
    assert _one(well_formed_problems(rb.IRModule.from_expr(out_of_let))) == \
        "in @main: %y is used outside the scope of its let"
    out_of_fn = rb.Function([x], rb.Tuple([rb.Function([z], z), z]))
    assert _one(well_formed_problems(rb.IRModule.from_expr(out_of_fn))) == \
        "in @main: %z is used outside the scope of its function parameter"
    unbound = rb.IRModule()
    unbound["main"] = rb.Function([x], op.add(x, z))
    assert _one(well_formed_problems(unbound)) == "in @main: %z is used but never bound"
    self_use = rb.Function([x], rb.Let(y, op.add(x, y), y))
    assert _one(well_formed_problems(rb.IRModule.from_expr(self_use))) == \
        "in @main: %y is used in the value of its own let"
    # as an expression: free variables are fine, out-of-scope uses are not
    assert _one(well_formed_problems(rb.Tuple([rb.Let(y, x, y), y]))) == "%y is used outside the scope of its let"


def test_well_formed_match_scoping_and_constructors():
    mod = rb.IRModule().import_prelude()
    cons, nil = mod.get_constructor("Cons"), mod.get_constructor("Nil")
    list_t = rb.ir.TypeCall(mod.get_global_type_var("List"), [TensorType((2,), "float32")])
    xs, h, t = rb.var("xs", list_t), rb.var("h"), rb.var("t")
    good = rb.Match(xs, [rb.Clause(rb.PatternConstructor(cons, [rb.PatternVar(h), rb.PatternVar(t)]), h),
                         rb.Clause(rb.PatternConstructor(nil, []), op.zeros(shape=(2,), dtype="float32"))])
    mod["head_or_zero"] = rb.Function([xs], good)
    assert well_formed(mod)
    bad = rb.Tuple([rb.Match(xs, [rb.Clause(rb.PatternVar(h), h)]), h])
    mod["bad"] = rb.Function([xs], bad)
    assert _one(well_formed_problems(mod)) == "in @bad: %h is used outside the scope of its match pattern"
    del mod.functions[mod.get_global_var("bad")]

    other = rb.ir.define_adt("Other", [], {"Thing": []})
    thing = other.constructors[0]
    mod["makes_thing"] = rb.Function([], rb.Call(thing, []))
    assert _one(well_formed_problems(mod)) == \
        "in @makes_thing: constructor Thing belongs to Other, which is not a type of the module"
    mod.add_type_def(other)
    assert well_formed(mod)
    impostor = rb.Constructor("Thing", (), other.header, 0)
    mod["makes_impostor"] = rb.Function([], rb.Call(impostor, []))
    assert _one(well_formed_problems(mod)) == \
        "in @makes_impostor: constructor Thing is not one of the module's Other constructors"


def test_well_formed_global_vars():
    x = rb.var("x", shape=(2,))
    mod = rb.IRModule.from_expr(rb.Function([x], x))
    mod["calls_main"] = rb.Function([x], rb.Call(mod.get_global_var("main"), [x]))
    # each global function is checked on its own (as Relay does): two may share a parameter
    assert well_formed(mod)
    assert _one(well_formed_problems(rb.IRModule.from_expr(
        rb.Function([x], rb.Call(rb.GlobalVar("main"), [x]))))) == \
        "in @main: @main is not the module's @main (another GlobalVar of the same name)"
    with pytest.raises(WellFormedError, match="@g is not a function of the module"):
        check_well_formed(rb.IRModule.from_expr(rb.Function([x], rb.Call(rb.GlobalVar("g"), [x]))))


@pytest.mark.parametrize("name, kwargs", [
    ("resnet18", dict(image_shape=(3, 32, 32), num_classes=10)),
    ("lstm", dict(seq_len=2, input_size=4, hidden_size=8, form="loop")),
    ("char_rnn", dict(hidden_size=8, max_length=2)),
    ("tree_lstm", dict(input_size=4, hidden_size=8)),
])
def test_zoo_models_are_well_formed(name, kwargs):
    mod, _params = rb.models.get(name, **kwargs)
    assert well_formed_problems(mod) == []


def test_well_formed_is_iterative():
    """A let chain 20,000 deep (each let aliasing the one before), with one stray use at the
    bottom, goes through without recursion (Python stops at 1,000 frames)."""
    n = 20_000
    x = rb.var("x", shape=(2,))
    names = [rb.var(f"v{i}", shape=(2,)) for i in range(n)]
    stray = rb.var("stray", shape=(2,))
    body = rb.Tuple([op.add(names[-1], rb.const(1.0)), stray])
    for i in range(n - 1, -1, -1):
        body = rb.Let(names[i], names[i - 1] if i else x, body)
    mod = rb.IRModule()
    mod["main"] = rb.Function([x], body)
    assert _one(well_formed_problems(mod)) == "in @main: %stray is used but never bound"
