"""The random program generator: well typed, deterministic, covering its op table."""

from collections import Counter

import numpy as np
import pytest

import relaybench as rb
from relaybench.ir.structural import structural_equal
from relaybench.op.registry import get_opdef, list_ops
from relaybench.passes import InferType
from relaybench.testing import random_program
from relaybench.testing.random_programs import (DOMAINS, NOT_GENERATED, OP_GENERATORS, domain_of,
                                                input_values, leaf_values, uncovered_ops)

SEEDS = range(300)


@pytest.fixture(scope="module")
def programs():
    return [random_program(seed) for seed in SEEDS]


def test_reachable_as_rb_testing():
    assert rb.testing.random_program is random_program
    mod, params = random_program(1)          # unpacks as (mod, params)
    assert isinstance(mod, rb.IRModule) and isinstance(params, dict)


def test_well_typed_for_many_seeds(programs):
    for prog in programs:
        # type inference from scratch, on the text too (no types carried over)
        InferType()(rb.IRModule.from_expr(rb.Function(prog.mod["main"].params,
                                                      prog.mod["main"].body)))
        assert 3 <= len(prog.ops) <= 25 + 2, (prog.seed, prog.ops)   # +2: a chain's helper
        main = prog.mod["main"]
        names = {p.name_hint for p in main.params}
        assert names == set(prog.inputs) | set(prog.params)
        for p in main.params:
            value = prog.all_inputs()[p.name_hint]
            assert value.shape == tuple(p.type_annotation.shape)
            assert value.dtype == np.dtype(p.type_annotation.dtype)
            # dims are drawn in 1..8; a leaf sized by a grown value (a bias for a flattened
            # tensor) may be longer
            assert all(1 <= d <= 8 * 8 * 8 for d in value.shape)
        assert sum(v.size for v in prog.all_inputs().values()) < 50_000


def test_deterministic_per_seed():
    for seed in (0, 5, 77):
        a, b = random_program(seed), random_program(seed)
        assert structural_equal(a.mod, b.mod, map_free_vars=True)
        assert a.ops == b.ops
        for name in a.inputs:
            np.testing.assert_array_equal(a.inputs[name], b.inputs[name])
    assert not structural_equal(random_program(1).mod, random_program(2).mod)


def test_covers_the_op_table(programs):
    seen = Counter(name for prog in programs for name in set(prog.ops))
    missing = sorted(set(OP_GENERATORS) - set(seen))
    assert not missing, f"never generated in {len(SEEDS)} seeds: {missing}"


def test_table_covers_the_registry():
    with_compute = {n for n in list_ops() if get_opdef(n).compute is not None}
    assert set(OP_GENERATORS) <= set(list_ops())
    # every op with a compute is generated or left out with a reason
    assert set(uncovered_ops()) == with_compute - set(OP_GENERATORS)
    assert all(NOT_GENERATED.get(n) for n in uncovered_ops()), uncovered_ops()


def test_features_appear(programs):
    """Rank-0 values, bools, integer dtypes, bound constants, weights, tuple results."""
    texts = [prog.mod.astext() for prog in programs]
    assert any("meta[" in t for t in texts)
    assert any(prog.params for prog in programs)
    assert any(isinstance(prog.mod["main"].body, rb.Tuple) for prog in programs)
    dtypes = {p.type_annotation.dtype for prog in programs for p in prog.mod["main"].params}
    assert {"float32", "float64", "int32", "int8", "uint8", "bool"} <= dtypes
    assert any(p.type_annotation.shape == () for prog in programs
               for p in prog.mod["main"].params)
    layouts = " ".join(texts)
    for needle in ('data_layout="NHWC"', 'kernel_layout="HWIO"', 'layout="NHWC"', "ceil_mode=True",
                   "exclude=True", "keepdims=True", "dilation=[2", 'mode="fast"', "groups="):
        assert needle in layouts, needle


def test_smaller_dims_make_smaller_programs():
    def elements(prog):
        return sum(v.size for v in prog.all_inputs().values())
    big = sum(elements(random_program(seed)) for seed in range(40))
    small = sum(elements(random_program(seed, max_dim=2)) for seed in range(40))
    assert small * 4 < big


def test_op_subset():
    prog = random_program(4, ops=["add", "nn.relu"], min_ops=5, max_ops=5)
    assert set(prog.ops) <= {"add", "nn.relu"} and len(prog.ops) == 5
    with pytest.raises(ValueError, match="no generator"):
        random_program(4, ops=["no_such_op"])


def test_domains_from_names():
    assert domain_of("pos_3") == ("pos", None, False)
    assert domain_of("idx5_w7") == ("idx", 5, True)
    assert domain_of("data") == ("x", None, False)
    rng = np.random.default_rng(0)
    pos = leaf_values("pos", (200,), "float32", rng)
    assert (pos > 0).all() and (pos * 2 == np.round(pos * 2)).all()
    nz = leaf_values("nz", (200,), "float32", rng)
    assert (nz != 0).all() and set(np.abs(nz)) <= {0.5, 1.0, 2.0, 4.0}
    idx = leaf_values("idx", (200,), "int32", rng, limit=3)
    assert idx.min() >= 0 and idx.max() < 3
    x = leaf_values("x", (200,), "uint8", rng)
    assert x.dtype == np.uint8 and x.max() <= 8
    assert set(DOMAINS) >= {"x", "pos", "nz", "sh", "idx", "pw"}


def test_input_values_follow_the_names():
    mod = rb.parse('#[version = "0.0.5"]\n'
                   'def @main(%pos_0: Tensor[(50), float32], %nz_1: Tensor[(50), int32]) {'
                   ' divide(log(%pos_0), cast(%nz_1, dtype="float32")) }')
    values = input_values(mod, seed=3)
    assert (values["pos_0"] > 0).all() and (values["nz_1"] != 0).all()
    again = input_values(mod, seed=3)
    np.testing.assert_array_equal(values["nz_1"], again["nz_1"])
