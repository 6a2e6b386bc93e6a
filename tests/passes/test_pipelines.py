"""Pipelines: Relay's default sequence, gated by opt_level, and pipelines built from names."""

import time

import pytest

import relaybench as rb
from relaybench.ir.analysis import count_ops
from relaybench.ir.expr import Call, Function
from relaybench.ir.functor import post_order
from relaybench.passes.infra import (PassContext, Sequential, _REGISTRY, function_pass, get_pass,
                                     list_passes, module_pass)
from relaybench.passes.instruments import PassTimer, Snapshots
from relaybench.passes.pipelines import (DEFAULT_PASSES, build_pipeline, default_pipeline, optimize,
                                         pipeline_text)
from relaybench.testing import run_infer_type

# Relay's build prefix and each pass's opt_level in Relay (relay-tvm-notes §3.1)
RELAY_PREFIX = [
    ("Legalize", 1), ("SimplifyInference", 0), ("EliminateCommonSubexpr", 3), ("CombineParallelConv2D", 4),
    ("CombineParallelDense", 4), ("FoldConstant", 2), ("FoldScaleAxis", 3), ("SimplifyExpr", 0),
    ("CanonicalizeCast", 3), ("CanonicalizeOps", 3), ("InferType", 0), ("AlterOpLayout", 3),
    ("FoldConstant", 2), ("FuseOps", 0),
]


def _require_default_passes():
    list_passes()
    missing = sorted({name for name, _ in DEFAULT_PASSES if name not in _REGISTRY})
    assert not missing, f"default pipeline passes not registered: {', '.join(missing)}"


def _small_resnet():
    mod, params = rb.models.resnet18(image_shape=(3, 32, 32), num_classes=10)
    return rb.passes.bind_params(mod, params)


def test_default_passes_are_relays_prefix():
    assert [name for name, _ in DEFAULT_PASSES] == [name for name, _ in RELAY_PREFIX]


def test_default_pipeline_order_and_fuse_opt_level():
    _require_default_passes()
    for level in range(4):
        seq = default_pipeline(level)
        assert [p.info.name for p in seq] == [name for name, _ in RELAY_PREFIX]
        assert seq.info.name == "default_pipeline"
        fuse = seq.passes[-1]
        if "fuse_opt_level" in _REGISTRY["FuseOps"].options:
            assert dict(fuse.info.options) == {"fuse_opt_level": level}
    with PassContext(opt_level=1):
        assert default_pipeline()[-1].info.options == default_pipeline(1)[-1].info.options


def test_registered_opt_levels_are_relays():
    _require_default_passes()
    for name, level in RELAY_PREFIX:
        assert _REGISTRY[name].opt_level == level, name


@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
def test_default_pipeline_gated_by_opt_level(opt_level):
    _require_default_passes()
    snaps = Snapshots()
    with PassContext(opt_level=opt_level, instruments=[snaps]):
        default_pipeline(opt_level)(_small_resnet())
    top = [r for r in snaps if r.depth == 1]
    assert snaps[0].name == "default_pipeline" and snaps[0].depth == 0
    assert [r.name for r in top] == [name for name, _ in RELAY_PREFIX]
    for rec, (name, level) in zip(top, RELAY_PREFIX):
        if level > opt_level:
            assert rec.skipped and rec.reason == f"opt_level {level} > context opt_level {opt_level}", name
        else:
            assert not rec.skipped, name


def _primitive_functions(mod):
    out = []
    for f in mod.functions.values():
        out.extend(n for n in post_order(f) if isinstance(n, Function) and n.is_primitive)
    return out


def test_opt_level_0_puts_each_operator_in_its_own_function():
    _require_default_passes()
    with PassContext(opt_level=0):
        out = default_pipeline(0)(_small_resnet())
    prims = _primitive_functions(out)
    assert prims and all(count_ops(p) == 1 for p in prims)
    main = out["main"]
    direct = [n for n in post_order(main.body) if isinstance(n, Call) and not isinstance(n.op, Function)
              and n not in {c for p in prims for c in post_order(p.body)}]
    assert all(not hasattr(c.op, "opdef") for c in direct)  # no operator is called outside a group


def test_opt_level_2_fuses_operators_together():
    _require_default_passes()
    with PassContext(opt_level=2):
        out = default_pipeline(2)(_small_resnet())
    prims = _primitive_functions(out)
    assert max(count_ops(p) for p in prims) >= 2


def test_optimize_is_the_pipeline_in_a_context():
    _require_default_passes()
    mod = _small_resnet()
    timer = PassTimer()
    out = optimize(mod, opt_level=3, instruments=[timer])
    with PassContext(opt_level=3):
        expected = default_pipeline(3)(mod)
    rb.assert_structural_equal(run_infer_type(out), run_infer_type(expected))
    assert timer.records[0].name == "default_pipeline"
    assert PassContext.current().opt_level != 3 or PassContext.current().instruments == []


def test_resnet50_snapshots_through_the_pipeline_take_seconds():
    _require_default_passes()
    mod, params = rb.models.resnet50(image_shape=(3, 64, 64), num_classes=10)
    mod = rb.passes.bind_params(mod, params)
    snaps = Snapshots()
    start = time.perf_counter()
    with PassContext(opt_level=3, instruments=[snaps]):
        default_pipeline(3)(mod)
    rows = snaps.table().rows
    assert time.perf_counter() - start < 60
    assert len(rows) >= len(RELAY_PREFIX) + 1
    assert snaps._texts == {}
    assert any(r["changed"] == "yes" for r in rows[1:])


# ---- build_pipeline -----------------------------------------------------------------------------


@pytest.fixture
def toys(scratch_registry):
    @module_pass(opt_level=0)
    def ToyOptions(mod, ctx, *, flag=False, count=1, scale=1.0, label="a", layers=(), extra=None,
                   layouts={}):  # noqa: B006 (a default read, never mutated)
        return mod

    @function_pass(opt_level=0)
    def ToyPlain(func, mod, ctx):
        return func

    return ToyOptions, ToyPlain


def test_build_pipeline_from_each_kind_of_spec(toys):
    options, plain = toys
    from_text = build_pipeline("toy-plain, toy-options{count=2}")
    assert [p.info.label for p in from_text] == ["ToyPlain", "ToyOptions{count=2}"]
    assert from_text.info.name == "pipeline"
    mixed = build_pipeline(["toy-plain", "ToyOptions{flag=true}, infer-type", plain(),
                            ("ToyOptions", {"label": "b"})], name="mine")
    assert [p.info.label for p in mixed] == ["ToyPlain", "ToyOptions{flag=True}", "InferType", "ToyPlain",
                                             "ToyOptions{label=b}"]
    assert mixed.info.name == "mine"
    assert build_pipeline(mixed) is mixed
    assert [p.info.name for p in build_pipeline(plain())] == ["ToyPlain"]
    x = rb.var("x", shape=(2,))
    mod = rb.IRModule.from_expr(rb.Function([x], x))
    assert mixed(mod)["main"].checked_type is not None


@pytest.mark.parametrize("spec, error, message", [
    (["toy-plain", "toy-plan"], ValueError, "pipeline item 1 ('toy-plan'): pipeline 'toy-plan', position 0: "
                                            "unknown pass 'toy-plan'; did you mean toy-plain"),
    (["toy-plain", ("ToyOptions", {"depth": 2})], ValueError,
     "pipeline item 1 ('ToyOptions'): ToyOptions has no option 'depth'"),
    (["toy-plain", ("Nope", {})], ValueError, "pipeline item 1 ('Nope'): unknown pass 'Nope'"),
    (["toy-plain", 3], TypeError, "pipeline item 1: expected a pass name, a Pass or (name, options), got 3"),
    (3, TypeError, "a pipeline is a string, a Pass or a list of them, not int"),
    ("toy-options{count=1.5}", ValueError, "ToyOptions: option count expects a int, got '1.5'"),
])
def test_build_pipeline_errors_name_the_item(toys, spec, error, message):
    with pytest.raises(error) as info:
        build_pipeline(spec)
    assert message in str(info.value)


def test_pipeline_text_round_trips(toys):
    options, plain = toys
    seq = Sequential([plain(), options(flag=True, count=-2, scale=0.25, label="two words", layers=(0, 3),
                                       extra="none", layouts={"nn.conv2d": ["NHWC", "default"]}),
                      options(label="3x", extra=None), get_pass("InferType")()])
    text = pipeline_text(seq)
    assert text.startswith("toy-plain,toy-options{flag=true, count=-2, scale=0.25, label='two words', "
                           "layers=(0, 3), extra='none', layouts={nn.conv2d: [NHWC, default]}}")
    again = build_pipeline(text)
    assert [p.info.name for p in again] == [p.info.name for p in seq]
    for a, b in zip(again, seq):
        assert a.info.options == b.info.options
        assert getattr(a, "options", None) == getattr(b, "options", None)


def test_pipeline_text_of_the_default_pipeline():
    _require_default_passes()
    seq = default_pipeline(2)
    text = pipeline_text(seq)
    assert text.startswith("legalize,simplify-inference,eliminate-common-subexpr,combine-parallel-conv2d,")
    assert [p.info.label for p in build_pipeline(text)] == [p.info.label for p in seq]
