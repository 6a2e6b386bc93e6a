"""A program of 100,000 chained operators goes through every step of the foundation.

Python's default recursion limit is about 1,000 frames, so any step that recursed on program depth
would raise RecursionError here.
"""

import sys

import numpy as np

import relaybench as rb
from relaybench import op
from relaybench.ir import TensorType, structural_equal, structural_hash

N = 100_000


def _chain(n):
    x = rb.var("x", shape=(4,), dtype="float32")
    y = x
    one, two = rb.const(1.0), rb.const(2.0)
    for i in range(n):
        y = op.add(y, one) if i % 2 == 0 else op.multiply(y, two)
    return rb.IRModule.from_expr(rb.Function([x], y))


def test_100k_chain_builds_prints_parses_typechecks_hashes():
    assert sys.getrecursionlimit() < 20_000
    mod = _chain(N)
    assert rb.ir.count_ops(mod) == N

    typed = rb.passes.InferType()(mod)
    body = typed["main"].body
    assert body.checked_type == TensorType((4,), "float32")
    assert body.op.name == "multiply" if N % 2 == 0 else "add"

    text = typed.astext()
    lines = text.splitlines()
    assert lines[0] == '#[version = "0.0.5"]'
    assert f"%{N - 2} = " in text and f"%{N - 1} = " not in text  # N-1 bindings, the last call inline

    parsed = rb.parse(text)
    assert rb.ir.count_ops(parsed) == N
    assert structural_equal(parsed, typed)       # the text carries the return type InferType wrote
    assert structural_hash(parsed) == structural_hash(typed)
    retyped = rb.passes.InferType()(parsed)
    assert retyped["main"].body.checked_type == TensorType((4,), "float32")


def test_chain_value_by_hand():
    # the first few ops of the chain, checked by hand through their numpy references
    mod = _chain(4)
    ops = [c.op.opdef for c in rb.ir.post_order(mod["main"].body) if isinstance(c, rb.Call)]
    x = np.arange(4, dtype="float32")
    y = x
    for d in ops:
        y = d.reference(y, np.float32(1.0 if d.name == "add" else 2.0), None)
    np.testing.assert_allclose(y, (((x + 1) * 2) + 1) * 2)


def test_100k_chain_through_the_default_pipeline():
    from relaybench.passes import PassContext, Snapshots
    from relaybench.testing import chain, chain_reference

    mod = rb.IRModule.from_expr(chain(N))
    snapshots = Snapshots()
    with PassContext(opt_level=3, instruments=[snapshots]):
        out = rb.passes.default_pipeline(3)(mod)
    ran = [r.name for r in snapshots.ran() if r.depth == 1]
    assert ran[:2] == ["Legalize", "SimplifyInference"] and ran[-1] == "FuseOps"
    assert rb.ir.count_ops(out) == N  # nothing to fold or merge: every op survives, fused
    assert out["main"].body.checked_type == TensorType((4,), "float32")
    x = np.linspace(-1, 1, 4).astype("float32")
    got = rb.create_executor("interpreter", mod=out).evaluate()(x)
    np.testing.assert_allclose(got, chain_reference(N, x), rtol=1e-5)
