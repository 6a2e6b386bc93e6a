"""The x86 strategy's ``dense_rows`` rule (a batch of one, or a reduction that is not a whole
number of vector registers): partial sums per row folded in halves plus the tail, against
numpy, with its knobs and its place among the rules."""

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.autotune.dispatch import ApplyConfig
from relaybench.ir import Function, IRModule
from relaybench.ir.builder import const, var

RNG = np.random.default_rng(11)


def _build(x_shape, n, epilogue, config=None):
    x = var("x", shape=x_shape)
    w = RNG.standard_normal((n, x_shape[-1])).astype("float32")
    b = RNG.standard_normal(n).astype("float32")
    y = op.nn.dense(x, const(w))
    if epilogue:
        y = op.tanh(op.add(y, const(b)))
    mod = IRModule.from_expr(Function([x], y))
    if config is None:
        return rb.build(mod, target="llvm"), w, b
    with ApplyConfig({"dense_rows": config}):
        return rb.build(mod, target="llvm"), w, b


@pytest.mark.parametrize("x_shape, n, epilogue", [
    ((1, 204), 128, True),      # CharRNN's hidden layer: 12 blocks of 16 and a tail of 12
    ((1, 37), 58, False),       # rows in pairs (58 = 2 x 29), a tail of 5
    ((1, 256), 64, True),       # no tail
    ((3, 20), 7, False),        # a batch of 3 whose reduction is not a multiple of 16
    ((2, 3, 36), 5, True),      # batch dimensions
])
def test_dense_rows_against_numpy(x_shape, n, epilogue):
    lib, w, b = _build(x_shape, n, epilogue)
    assert any(row["rule"] == "dense_rows" for row in lib.profile(number=1, x=np.zeros(
        x_shape, "float32")).rows)
    x = RNG.standard_normal(x_shape).astype("float32")
    got = np.asarray(lib.run(x=x))
    want = x.astype("float64") @ w.T.astype("float64")
    if epilogue:
        want = np.tanh(want + b)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("config", [{"rows": 1, "width": 16}, {"rows": 8, "width": 32},
                                    {"rows": 16, "width": 16}])
def test_dense_rows_every_knob_gives_the_same_numbers(config):
    lib, w, _ = _build((1, 300), 32, False, config)
    x = RNG.standard_normal((1, 300)).astype("float32")
    np.testing.assert_allclose(np.asarray(lib.run(x=x)), x @ w.T, rtol=1e-5, atol=1e-5)


def test_dense_rows_space_and_default():
    from relaybench.autotune.space import Workload
    from relaybench.backends.strategy.x86 import dense_rows_space
    space = dense_rows_space(Workload("dense_rows", ((1, 204), (58, 204)),
                                      ("float32", "float32"), (1, 58), "float32"))
    assert [k.values for k in space.knobs] == [(1, 2), (16, 32)]
    assert space.default() == {"rows": 2, "width": 16}
