"""Every vision model of the zoo, compiled at opt_level 0 and 3, agrees with the interpreter.

The reference is the reference interpreter on the unoptimized model, computed once per model
with one seeded input. Each model is built once per opt_level.

Tolerances: the classifiers end in ``nn.softmax`` over 1000 classes, so a typical probability is
about 1e-3. An error ``d`` in the logits moves a probability ``p`` by about ``p * d``; with
``rtol=1e-4`` and ``atol=1e-7`` a typical class (p ~ 1e-3) is held to a logit error of about
2e-4, and the classes that matter (large p) to about 1e-4, while the far tail (p < 1e-5), where
float32 rounding of ``exp`` dominates, is bounded by ``atol`` in absolute terms. The DQN returns
Q-values of order 1, compared with ``rtol=1e-4`` and ``atol=1e-5``. A wrong kernel (a bad index,
a missed reduction step) gives errors of order 1 on the logits and fails either way.
"""

import time

import numpy as np
import pytest

import relaybench as rb
from relaybench.models import vision
from relaybench.passes.bind_params import bind_params

VISION = sorted(vision.__all__)
TOLERANCE = {"dqn": dict(rtol=1e-4, atol=1e-5)}
DEFAULT_TOLERANCE = dict(rtol=1e-4, atol=1e-7)


def make_input(name, shape, dtype):
    rng = np.random.default_rng(sum(map(ord, name)))
    if name == "dqn":      # frames of an Atari game, in [0, 1)
        return rng.uniform(0.0, 1.0, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def reference(name):
    """(module, params, inputs, the interpreter's output) of one zoo model."""
    mod, params = rb.models.get(name)
    main = rb.passes.InferType()(mod)["main"]
    inputs = {p.name_hint: make_input(name, tuple(int(d) for d in p.checked_type.shape),
                                      p.checked_type.dtype)
              for p in main.params if p.name_hint not in params}
    ref = rb.create_executor("interpreter", mod=bind_params(mod, params)).evaluate()(**inputs)
    return mod, params, inputs, np.asarray(ref)


# One test per model runs both opt_levels, so the interpreter's reference (up to ~15 s for
# VGG-16) is computed once per model even when pytest-xdist spreads the tests over workers.
@pytest.mark.parametrize("name", VISION)
def test_zoo_model_agrees_with_interpreter_at_opt_level_0_and_3(name):
    mod, params, inputs, ref = reference(name)
    for opt_level in (0, 3):
        start = time.perf_counter()
        graph = rb.build(mod, params=params, opt_level=opt_level)
        built = time.perf_counter()
        out = graph.run(**inputs)
        ran = time.perf_counter()
        print(f"{name} opt_level={opt_level}: build {built - start:.1f} s, run "
              f"{ran - built:.2f} s; {graph.compile_stats}; {graph.memory_plan()}")
        assert out.shape == ref.shape and out.dtype == ref.dtype
        np.testing.assert_allclose(out, ref, **TOLERANCE.get(name, DEFAULT_TOLERANCE),
                                   err_msg=f"{name} at opt_level {opt_level}")
        assert not graph.host_groups
        stats = graph.compile_stats
        assert stats.kernels == len(graph.kernels) <= stats.groups == len(graph.groups)
        plan = graph.memory_plan()
        assert plan.storages < plan.tensors and plan.planned_bytes < plan.unplanned_bytes
        if opt_level == 3 and name.startswith("resnet"):
            assert stats.kernels < stats.groups          # repeated blocks share their kernels
