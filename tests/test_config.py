import doctest
import os
import threading
from pathlib import Path

import pytest

from relaybench import config


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in config.KNOBS:
        monkeypatch.delenv(name, raising=False)


def test_defaults(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert config.get("RB_DEBUG") == 0
    assert config.get("RB_NUM_THREADS") == 0
    assert config.get("RB_TARGET") == "llvm"
    assert config.get("RB_CACHE_DIR") == tmp_path / ".cache" / "relaybench"


def test_every_knob_is_declared_with_a_doc():
    assert set(config.KNOBS) == {"RB_DEBUG", "RB_CACHE_DIR", "RB_NUM_THREADS", "RB_TARGET",
                                 "RB_KERNEL_CACHE_SIZE", "RB_X86_INT8", "RB_GPU_CONV",
                                 "RB_AUTOTUNE_LOG", "RB_AOT_STACK_MB", "RB_WINOGRAD",
                                 "RB_OPENCL_BINARIES", "RB_LOWERING_CACHE", "RB_GPU_VECTOR",
                                 "RB_BUILD_CACHE", "RB_BUILD_CACHE_MB"}
    for name, knob in config.KNOBS.items():
        assert knob.name == name
        assert knob.doc and "\n" not in knob.doc
        assert knob.type in {"int", "path", "str"}


def test_environment_overrides_default(monkeypatch, tmp_path):
    monkeypatch.setenv("RB_DEBUG", "4")
    monkeypatch.setenv("RB_TARGET", "opencl")
    monkeypatch.setenv("RB_CACHE_DIR", str(tmp_path / "kernels"))
    monkeypatch.setenv("RB_NUM_THREADS", " 2 ")
    assert config.get("RB_DEBUG") == 4
    assert isinstance(config.get("RB_DEBUG"), int)
    assert config.get("RB_TARGET") == "opencl"
    assert config.get("RB_CACHE_DIR") == tmp_path / "kernels"
    assert isinstance(config.get("RB_CACHE_DIR"), Path)
    assert config.get("RB_NUM_THREADS") == 2


def test_path_knob_expands_user(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RB_CACHE_DIR", "~/rb")
    assert config.get("RB_CACHE_DIR") == tmp_path / "rb"


def test_empty_environment_value_means_unset(monkeypatch):
    monkeypatch.setenv("RB_DEBUG", "")
    assert config.get("RB_DEBUG") == 0


def test_bad_environment_value_names_knob_and_value(monkeypatch):
    monkeypatch.setenv("RB_DEBUG", "verbose")
    with pytest.raises(ValueError, match=r"RB_DEBUG='verbose'.*environment"):
        config.get("RB_DEBUG")
    monkeypatch.setenv("RB_NUM_THREADS", "-1")
    with pytest.raises(ValueError, match=r"RB_NUM_THREADS='-1'.*minimum 0"):
        config.get("RB_NUM_THREADS")


def test_unknown_knob_lists_known_ones():
    with pytest.raises(KeyError) as info:
        config.get("RB_DEBGU")
    message = str(info.value)
    assert "RB_DEBGU" in message
    for name in config.KNOBS:
        assert name in message
    with pytest.raises(KeyError, match="RB_NOPE"):
        config.Context(RB_NOPE=1)


def test_context_overrides_environment_and_restores(monkeypatch):
    monkeypatch.setenv("RB_DEBUG", "1")
    with config.Context(RB_DEBUG=3):
        assert config.get("RB_DEBUG") == 3
        assert config.get("RB_TARGET") == "llvm"  # untouched knobs fall through
    assert config.get("RB_DEBUG") == 1


def test_context_nesting_innermost_wins():
    with config.Context(RB_DEBUG=3, RB_TARGET="opencl"):
        with config.Context(RB_DEBUG=4):
            assert config.get("RB_DEBUG") == 4
            assert config.get("RB_TARGET") == "opencl"
        assert config.get("RB_DEBUG") == 3
    assert config.get("RB_DEBUG") == 0
    assert config.get("RB_TARGET") == "llvm"


def test_context_restores_after_exception():
    with pytest.raises(RuntimeError):
        with config.Context(RB_DEBUG=4):
            raise RuntimeError("boom")
    assert config.get("RB_DEBUG") == 0


def test_context_object_can_be_reentered():
    ctx = config.Context(RB_DEBUG=2)
    with ctx:
        with config.Context(RB_DEBUG=4):
            with ctx:
                assert config.get("RB_DEBUG") == 2
            assert config.get("RB_DEBUG") == 4
        assert config.get("RB_DEBUG") == 2
    assert config.get("RB_DEBUG") == 0


def test_context_converts_and_checks_values():
    with config.Context(RB_DEBUG="3", RB_CACHE_DIR="/tmp/rb"):
        assert config.get("RB_DEBUG") == 3
        assert config.get("RB_CACHE_DIR") == Path("/tmp/rb")
    with pytest.raises(ValueError, match="RB_DEBUG"):
        config.Context(RB_DEBUG="lots")
    with pytest.raises(ValueError, match="RB_DEBUG"):
        config.Context(RB_DEBUG=-1)
    with pytest.raises(ValueError, match="RB_NUM_THREADS"):
        config.Context(RB_NUM_THREADS=2.5)
    with pytest.raises(ValueError, match="RB_DEBUG"):
        config.Context(RB_DEBUG=True)


def test_context_is_local_to_its_thread():
    seen = {}
    inside = threading.Event()
    release = threading.Event()

    def scoped():
        with config.Context(RB_DEBUG=4):
            inside.set()
            release.wait(5)
            seen["worker"] = config.get("RB_DEBUG")

    worker = threading.Thread(target=scoped)
    worker.start()
    assert inside.wait(5)
    seen["main"] = config.get("RB_DEBUG")
    release.set()
    worker.join(5)
    assert seen == {"main": 0, "worker": 4}


def test_num_threads_resolves_zero_to_cores(monkeypatch):
    assert config.num_threads() == (os.cpu_count() or 1)
    with config.Context(RB_NUM_THREADS=3):
        assert config.num_threads() == 3


def test_describe_is_a_markdown_table_of_every_knob():
    lines = config.describe().strip().splitlines()
    assert lines[0].startswith("| knob | type | default |")
    assert set(lines[1]) <= set("|- ")
    assert len(lines) == 2 + len(config.KNOBS)
    for name, line in zip(config.KNOBS, lines[2:]):
        assert line.startswith(f"| `{name}` |")
        assert line.count("|") == 5
    assert "3 prints the IR after each pass" in config.describe()


def test_the_readme_table_is_describe():
    """The README's table of knobs is ``describe()``'s output, row for row."""
    from pathlib import Path
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    table = config.describe().strip()
    assert table in readme, "README.md's knob table differs from relaybench.config.describe()"


def test_module_docstring_example_runs():
    result = doctest.testmod(config, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
