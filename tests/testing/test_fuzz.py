"""The fuzz driver: worker processes, hard crashes and timeouts noticed, a summary by class."""

import itertools
import os
import signal
import time

from relaybench.cli import main
from relaybench.testing import Config, fuzz
from relaybench.testing.differential import reference_result


def segfault_on_odd_seeds(case):
    """Kills its own process (as a crash inside generated code would) on odd programs."""
    if len(case.mod["main"].params) % 2:
        os.kill(os.getpid(), signal.SIGSEGV)
    return reference_result(case)


def hang(case):
    time.sleep(60)


def wrong_after_exp(case):
    """Adds 1 to every output of a program that computes exp."""
    out = reference_result(case)
    if "exp(" not in case.mod.astext():
        return out
    return tuple(o + 1 for o in out) if isinstance(out, tuple) else out + 1


def test_a_dying_worker_is_a_crash_of_its_seed_and_the_run_goes_on():
    config = Config("segv", "dies on some programs", segfault_on_odd_seeds)
    lines = []
    summary = fuzz(range(6), jobs=2, configs=[config], timeout=60, progress=lines.append)
    assert summary.programs == 6
    died = [k for k in summary.classes if "WorkerDied" in k]
    assert died == ["segv: crash WorkerDied: worker killed by signal SIGSEGV"], summary.table()
    import relaybench as rb
    odd = [s for s in range(6) if len(rb.testing.random_program(s).mod["main"].params) % 2]
    assert summary.failed_seeds == odd and 0 < len(odd) < 6
    assert any("SIGSEGV" in line for line in lines)


def test_a_program_past_the_timeout_fails_and_is_killed():
    start = time.monotonic()
    summary = fuzz(range(2), jobs=2, configs=[Config("hang", "sleeps", hang)], timeout=5,
                   progress=None)
    assert time.monotonic() - start < 50
    assert summary.failed_seeds == [0, 1]
    assert list(summary.classes) == ["hang: timeout Timeout: no result within N s"]


def test_failing_programs_are_written_and_minimized(tmp_path):
    import relaybench as rb
    config = Config("exp-wrong", "wrong after exp", wrong_after_exp)
    # the first two seeds whose program calls exp (about one in twenty-five does)
    seeds = list(itertools.islice((s for s in range(1000) if "exp" in rb.testing.random_program(s).ops), 2))
    summary = fuzz(seeds, jobs=2, configs=[config], out=tmp_path, minimize=True,
                   progress=None)
    assert summary.failed_seeds == sorted(seeds)
    minimized = sorted(tmp_path.glob("min_*.rly"))
    assert len(minimized) == len(summary.classes) == 2
    for path in minimized:
        text = path.read_text()
        assert text.startswith("// exp-wrong: mismatch")
        mod = rb.parse(text)
        ops = [n.op.name for n in rb.ir.functor.post_order(mod["main"].body)
               if isinstance(n, rb.Call)]
        assert ops == ["exp"], text
    assert {p.name for p in tmp_path.glob("seed*.rly")} == {f"seed{s}.rly" for s in seeds}


def test_cli_fuzz_writes_failures_and_exits_nonzero(tmp_path, capsys):
    assert main(["fuzz", "--n", "2", "--seed", "5", "--jobs", "1", "--configs", "text"]) == 0
    out = capsys.readouterr().out
    assert "2 programs" in out and "0 failed" in out
    assert main(["fuzz", "--list"]) == 0
    assert "graph-O3" in capsys.readouterr().out
    assert main(["fuzz", "--configs", "nope"]) == 1


def test_cli_replay(tmp_path, capsys):
    good = tmp_path / "good.rly"
    good.write_text('// a comment first\n#[version = "0.0.5"]\n'
                    'def @main(%x_0: Tensor[(3), float32]) { nn.relu(%x_0) }\n')
    assert main(["fuzz", "--replay", str(good), "--configs", "graph-O0,text"]) == 0
    out = capsys.readouterr().out
    assert "graph-O0: ok" in out and "text: ok" in out


def record_pid(case):
    """Notes which process ran it (in the folder RB_TEST_PIDS names)."""
    from pathlib import Path
    Path(os.environ["RB_TEST_PIDS"], str(os.getpid())).touch()
    return reference_result(case)


def test_workers_are_replaced_after_their_share_of_jobs(tmp_path, monkeypatch):
    import sys
    fuzz_module = sys.modules["relaybench.testing.fuzz"]   # the module, not the function
    monkeypatch.setattr(fuzz_module, "WORKER_JOBS", 2)
    monkeypatch.setenv("RB_TEST_PIDS", str(tmp_path))
    summary = fuzz(range(7), jobs=1, configs=[Config("pid", "records its pid", record_pid)],
                   timeout=60, progress=None)
    assert summary.programs == 7 and summary.ok
    assert len(list(tmp_path.iterdir())) == 4      # 2 + 2 + 2 + 1 programs
