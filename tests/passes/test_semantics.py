"""Every pass keeps the program's meaning: for every registered pass and every model of the zoo
(small variants, weights bound as constants and passed as arguments), the reference interpreter
gives the same outputs before and after, on random inputs. The default pipelines at opt_level
0-3 are checked the same way. Each run also goes through VerifyEach, so the output must be well
formed, type-check, and keep @main's type.

The passes are listed at collection time: a pass registered later is checked as soon as it
exists.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import relaybench as rb
from relaybench.backends.interpreter import ConstructorValue
from relaybench.models.nlp import make_list, make_tree
from relaybench.passes import bind_params
from relaybench.passes.infra import PassContext, Sequential, _REGISTRY, get_pass, list_passes
from relaybench.passes.instruments import VerifyEach
from relaybench.passes.pipelines import DEFAULT_PASSES, default_pipeline

RTOL, ATOL = 1e-4, 1e-5

# Passes left out of this harness, and why. They are tested in their own files.
EXCLUDED = {
    # reverse-mode AD returns the gradients along with the value: @main's interface changes by
    # definition, so "same outputs" does not apply
    "Gradient": "changes @main's interface (returns the gradients)",
    # the accelerator's packing needs a start and a stop operator (nn.max_pool2d ...
    # nn.global_avg_pool2d) and, as Relay's graph_pack, fails on a program without them
    "GraphPack": "needs the start and stop operators most models lack (test_graph_pack.py)",
}

# Passes that only act on the output of another pass run it first (besides InferType, which
# runs before every pass).
PREREQUISITES = {
    "DefuseOps": ["FuseOps"],
}

# Passes checked a second time after others, where they find more to do: batch_norm written out
# as multiply and add gives scales to fold and constants to evaluate.
ALSO_AFTER = {
    "FoldConstant": ["SimplifyInference"],
    "FoldScaleAxis": ["SimplifyInference"],
    "BackwardFoldScaleAxis": ["SimplifyInference"],
    "ForwardFoldScaleAxis": ["SimplifyInference"],
    "SimplifyExpr": ["SimplifyInference"],
    "EliminateCommonSubexpr": ["SimplifyInference"],
}

# Extra option sets a pass is checked with, besides its defaults.
EXTRA_OPTIONS = {
    "FuseOps": [{"fuse_opt_level": 0}],
    # two branches are enough: ResNet's projection shortcuts, CharRNN's i2h and i2o layers
    "CombineParallelConv2D": [{"min_num_branches": 2}],
    "CombineParallelDense": [{"min_num_branches": 2}, {"min_num_branches": 2, "to_batch_matmul": False}],
    "DeadCodeElimination": [{"inline_once": True}],
}


def _pass_names() -> list:
    names = []
    for name, *_rest in list_passes():
        entry = _REGISTRY.get(name)
        module = getattr(entry.factory, "__module__", "") or ""
        if not module.startswith("relaybench.passes."):
            continue  # a pass defined on the fly by a test or a notebook
        if name in EXCLUDED:
            continue
        names.append(name)
    return names


def _pass_cases() -> list:
    """(pass, options, passes run before it) for every pass, with an id for each."""
    cases = []
    for name in _pass_names():
        before = PREREQUISITES.get(name, [])
        cases.append(pytest.param(name, None, before, id=name))
        known = set(_REGISTRY[name].options)
        for options in EXTRA_OPTIONS.get(name, []):
            if set(options) <= known:
                label = ",".join(f"{k}={v}" for k, v in options.items())
                cases.append(pytest.param(name, options, before, id=f"{name}{{{label}}}"))
        after = ALSO_AFTER.get(name)
        if after and all(p in _REGISTRY for p in after):
            cases.append(pytest.param(name, None, before + after, id=f"{name}-after-{'-'.join(after)}"))
    return cases


def _pipeline_levels() -> list:
    missing = sorted({name for name, _ in DEFAULT_PASSES if name not in _REGISTRY})
    if missing:  # the pipeline is checked once all its passes exist
        return [pytest.param(-1, marks=pytest.mark.skip(reason=f"not registered yet: {', '.join(missing)}"),
                             id="missing-passes")]
    return [0, 1, 2, 3]


# ---------------------------------------------------------------------------------------------
# The zoo, small

VISION = dict(image_shape=(3, 32, 32), num_classes=10)
RECURRENT = dict(seq_len=3, input_size=8, hidden_size=16)

MODELS = {
    "resnet18": ("resnet18", VISION),
    "resnet34": ("resnet34", VISION),
    "resnet50": ("resnet50", VISION),
    "mobilenet_v2": ("mobilenet_v2", VISION),
    "vgg16": ("vgg16", VISION),
    "dqn": ("dqn", dict(image_shape=(4, 36, 36), num_actions=4)),
    "rnn": ("rnn", dict(RECURRENT, form="unrolled")),
    "rnn_loop": ("rnn", dict(RECURRENT, form="loop")),
    "gru": ("gru", dict(RECURRENT, form="unrolled")),
    "gru_loop": ("gru", dict(RECURRENT, form="loop")),
    "lstm": ("lstm", dict(RECURRENT, form="unrolled")),
    "lstm_loop": ("lstm", dict(RECURRENT, form="loop")),
    "char_rnn": ("char_rnn", dict(hidden_size=16, max_length=4)),
    "tree_lstm": ("tree_lstm", dict(input_size=8, hidden_size=16)),
}

VARIANTS = [f"{m}-{form}" for m in MODELS for form in ("bound", "unbound")]


def _inputs(model: str, mod, params: dict, rng) -> list:
    """Random values for the model's inputs (the parameters of @main that are not weights)."""
    out = []
    for p in mod["main"].params:
        if p.name_hint in params:
            continue
        if model.endswith("_loop"):
            t = p.type_annotation.args[0]
            out.append(make_list([rng.standard_normal(t.shape).astype(t.dtype)
                                  for _ in range(RECURRENT["seq_len"])]))
        elif model == "tree_lstm":
            t = p.type_annotation.args[0]

            def leaf_value():
                return rng.standard_normal(t.shape).astype(t.dtype)
            out.append(make_tree(leaf_value(), [make_tree(leaf_value()),
                                                make_tree(leaf_value(), [make_tree(leaf_value()),
                                                                         make_tree(leaf_value())])]))
        elif model == "char_rnn" and p.name_hint == "category":
            n = p.type_annotation.shape[1]
            out.append(np.eye(n, dtype="float32")[[int(rng.integers(n))]])
        elif model == "char_rnn":
            out.append(np.array(int(rng.integers(10)), "int32"))
        else:
            t = p.type_annotation
            out.append(rng.standard_normal(t.shape).astype(t.dtype))
    return out


@functools.lru_cache(maxsize=None)
def _case(variant: str):
    """(typed module, arguments, reference outputs) of a zoo variant."""
    model, form = variant.rsplit("-", 1)
    name, kwargs = MODELS[model]
    mod, params = rb.models.get(name, **kwargs)
    rng = np.random.default_rng(7)
    args = _inputs(model, mod, params, rng)
    if form == "bound":
        mod = bind_params(mod, params)
    else:
        args = args + [params[p.name_hint] for p in mod["main"].params if p.name_hint in params]
    with PassContext(opt_level=0):
        mod = rb.passes.InferType()(mod)
    expected = _run(mod, args)
    return mod, tuple(args), expected


def _run(mod, args):
    return rb.create_executor("interpreter", mod=mod).evaluate()(*args)


def _flatten(value) -> list:
    """The leaves of an interpreter value, with their paths (lists/ADTs by constructor name)."""
    out, stack = [], [("out", value)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, tuple):
            out.append((path, "tuple", len(v)))
            stack.extend((f"{path}.{i}", f) for i, f in reversed(list(enumerate(v))))
        elif isinstance(v, ConstructorValue):
            out.append((path, "adt", v.name))
            stack.extend((f"{path}/{v.name}.{i}", f) for i, f in reversed(list(enumerate(v.fields))))
        else:
            out.append((path, "tensor", np.asarray(v)))
    return out


def assert_same_outputs(actual, expected, what: str) -> None:
    a, e = _flatten(actual), _flatten(expected)
    assert [(p, k) for p, k, _ in a] == [(p, k) for p, k, _ in e], \
        f"{what}: the output's structure changed"
    for (path, kind, av), (_p, _k, ev) in zip(a, e):
        if kind != "tensor":
            assert av == ev, f"{what}: {path} is {av}, expected {ev}"
            continue
        assert av.shape == ev.shape and av.dtype == ev.dtype, \
            f"{what}: {path} is {av.dtype}{list(av.shape)}, expected {ev.dtype}{list(ev.shape)}"
        np.testing.assert_allclose(av, ev, rtol=RTOL, atol=ATOL, err_msg=f"{what}: {path}")


def _check(variant: str, passes: list, opt_level: int, what: str):
    mod, args, expected = _case(variant)
    functions = dict(mod.functions)
    with PassContext(opt_level=opt_level, instruments=[VerifyEach()]):
        out = Sequential(passes, name="under_test")(mod)
    assert dict(mod.functions) == functions and all(
        mod.functions[gv] is f for gv, f in functions.items()), f"{what} changed its input module in place"
    # the same module, or one of the same structure, computes the same outputs
    if out is not mod and not rb.structural_equal(out, mod):
        assert_same_outputs(_run(out, args), expected, f"{what} on {variant}")
    return out


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("pass_name, options, before", _pass_cases())
def test_pass_keeps_semantics(pass_name, options, before, variant):
    passes = [get_pass(p)() for p in before]
    passes.append(get_pass(pass_name)(**(options or {})))
    _check(variant, passes, 4, pass_name)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("opt_level", _pipeline_levels())
def test_default_pipeline_keeps_semantics(opt_level, variant):
    _check(variant, [default_pipeline(opt_level)], opt_level, f"default_pipeline({opt_level})")


def test_every_model_runs():
    """The harness's own check: every variant builds, runs, and its inputs are used."""
    for variant in VARIANTS:
        mod, args, expected = _case(variant)
        assert len(args) == len(mod["main"].params)
        assert _flatten(expected), variant
