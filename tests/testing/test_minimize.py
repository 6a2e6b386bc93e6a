"""The minimizer shrinks a synthetic failure to a tiny program and saves it."""

import relaybench as rb
from relaybench.ir.expr import Call
from relaybench.ir.functor import post_order
from relaybench.testing import Config, minimize, random_program, save_failure
from relaybench.testing.differential import reference_result
from relaybench.testing.minimize import failure_key


def _ops(mod):
    return [n.op.name for n in post_order(mod["main"].body)
            if isinstance(n, Call) and hasattr(n.op, "name")]


def _fails_on_take(case):
    """A configuration that 'crashes' whenever the program holds a take."""
    if "take" in _ops(case.mod):
        raise RuntimeError("take is not supported here")
    return reference_result(case)


def _perturbs_after_transpose(case):
    """A configuration whose result is wrong whenever a transpose feeds a multiply."""
    out = reference_result(case)
    calls = [n for n in post_order(case.mod["main"].body) if isinstance(n, Call)]
    if any(c.op.name == "multiply" and any(isinstance(a, Call) and a.op.name == "transpose"
                                           for a in c.args) for c in calls):
        return tuple(o + 1 for o in out) if isinstance(out, tuple) else out + 1
    return out


def _seed_with(ops, name, min_ops=12):
    for seed in range(200):
        prog = random_program(seed, ops=ops, min_ops=min_ops)
        if name in prog.ops and len(prog.ops) >= min_ops:
            return seed, prog
    raise AssertionError(f"no seed makes {name}")


def test_shrinks_a_synthetic_crash_to_the_op():
    ops = ["take", "add", "multiply", "nn.relu", "transpose", "concatenate", "sum"]
    seed, prog = _seed_with(ops, "take")
    config = Config("fake", "fails on take", _fails_on_take)
    small = minimize(prog.mod, config, program_seed=seed, max_seconds=120)
    assert _ops(small) == ["take"], rb.IRModule.astext(small)
    assert len(small["main"].params) <= 2


def test_shrinks_a_synthetic_mismatch_keeping_the_pattern():
    ops = ["transpose", "multiply", "add", "nn.relu", "tile", "negative"]
    config = Config("fake", "wrong after transpose", _perturbs_after_transpose)
    for seed in range(300):
        prog = random_program(seed, ops=ops, min_ops=10)
        if failure_key(rb.testing.run_differential(prog.mod, configs=[config])):
            break
    else:
        raise AssertionError("no seed shows the synthetic mismatch")
    small = minimize(prog.mod, config, "fake: mismatch", max_seconds=120)
    assert sorted(_ops(small)) == ["multiply", "transpose"]


def test_saved_program_parses_and_names_the_failure(tmp_path):
    prog = random_program(2)
    path = save_failure(prog.mod, tmp_path / "one.rly", "graph-O3",
                        "graph-O3: crash CompileError: boom", note="seed 2")
    text = path.read_text()
    lines = text.splitlines()
    assert lines[0] == "// graph-O3: crash CompileError: boom"
    assert "relaybench fuzz --replay" in lines[1] and "--configs graph-O3" in lines[1]
    assert rb.structural_equal(rb.parse(text), prog.mod, map_free_vars=True)
