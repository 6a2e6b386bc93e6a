import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from relaybench import cli

ROOT = Path(__file__).resolve().parent.parent


def test_version(capsys):
    assert cli.main(["version"]) == 0
    out = capsys.readouterr().out.strip()
    assert out == f"relaybench {metadata.version('relaybench')}"


def test_version_verbose_lists_dependencies(capsys):
    assert cli.main(["version", "--verbose"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("relaybench ")
    assert any(line.startswith("python 3.") for line in lines)
    numpy_line = next(line for line in lines if line.startswith("numpy "))
    assert numpy_line == f"numpy {metadata.version('numpy')}"
    # and the OpenCL devices: PoCL's CPU device comes with pyopencl[pocl]
    assert any(line.startswith("opencl devices") for line in lines)
    try:
        from relaybench.backends.opencl.runtime import list_devices
        devices = list_devices()
    except ImportError:
        devices = []
    for platform_name, device_name, kind in devices:
        assert any(platform_name in line and device_name in line for line in lines)


def test_python_dash_m_runs_the_cli():
    done = subprocess.run([sys.executable, "-m", "relaybench", "version"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("relaybench ")


@pytest.mark.parametrize("argv, complaint", [
    ([], "required: COMMAND"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["show"], "required: FILE.rly"),
    (["version", "--bogus"], "unrecognized arguments: --bogus"),
])
def test_bad_arguments_exit_with_status_2(capsys, argv, complaint):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert complaint in capsys.readouterr().err


def test_every_command_has_help(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"])
    assert info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps long help lines
    for name, command in cli.COMMANDS.items():
        assert name in out
        assert " ".join(command.help.split()) in out


def test_show_missing_file_fails_cleanly(capsys, tmp_path):
    missing = tmp_path / "missing.rly"
    assert cli.main(["show", str(missing)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"relaybench: cannot read {missing}")
    assert "Traceback" not in err


# --- `show` needs the parser and type inference ---------------------------------------------

@pytest.fixture
def frontend():
    """The parser and InferType, which `show` needs (an import error fails the test)."""
    from relaybench import parse  # noqa: F401
    from relaybench.passes import InferType  # noqa: F401


ADD = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3), float32]) {
  add(%x, %x)
}
"""


def test_show_prints_typed_program(frontend, tmp_path, capsys):
    path = tmp_path / "add.rly"
    path.write_text(ADD)
    assert cli.main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "def @main" in out
    assert "add(%x, %x)" in out
    assert "ty=Tensor[(1, 3), float32]" in out


def test_show_no_types_skips_inference(frontend, tmp_path, capsys):
    path = tmp_path / "add.rly"
    path.write_text(ADD)
    assert cli.main(["show", "--no-types", str(path)]) == 0
    out = capsys.readouterr().out
    assert "add(%x, %x)" in out
    assert "ty=" not in out


def test_show_parse_error_names_file_line_and_column(frontend, tmp_path, capsys):
    path = tmp_path / "broken.rly"
    path.write_text('#[version = "0.0.5"]\ndef @main(%x: Tensor[(1, 3), float32] {\n  %x\n}\n')
    assert cli.main(["show", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{path}:2:" in captured.err
    assert "Traceback" not in captured.err


def test_show_type_error_exits_1(frontend, tmp_path, capsys):
    path = tmp_path / "mismatch.rly"
    path.write_text('#[version = "0.0.5"]\n'
                    'def @main(%x: Tensor[(1, 3), float32], %y: Tensor[(4, 5), float32]) {\n'
                    '  add(%x, %y)\n'
                    '}\n')
    assert cli.main(["show", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("relaybench: ")
    assert "add" in err
    assert "Traceback" not in err
    # without inference the same program prints
    assert cli.main(["show", "--no-types", str(path)]) == 0


# --- `show --passes --format` ----------------------------------------------------------------

ADD_RELU = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3), float32]) {
  %0 = add(%x, %x);
  nn.relu(%0)
}
"""


@pytest.fixture
def add_relu(frontend, tmp_path):
    path = tmp_path / "add_relu.rly"
    path.write_text(ADD_RELU)
    return path


@pytest.fixture
def dot_module():
    import relaybench.viz.dot  # noqa: F401  (an import error fails the test)


def test_show_runs_the_pipeline_before_printing(add_relu, capsys):
    from relaybench import parse
    from relaybench.passes import InferType
    from relaybench.passes.infra import PassContext
    from relaybench.passes.pipelines import build_pipeline

    assert cli.main(["show", str(add_relu), "--passes", "fuse-ops"]) == 0
    out = capsys.readouterr().out
    with PassContext(opt_level=3):
        expected = build_pipeline("fuse-ops")(InferType()(parse(ADD_RELU))).astext()
    assert out == expected + "\n"
    # add and relu in one primitive function, called once
    assert out.count("Primitive=1") == 1
    assert "%1(%x)" in out


def test_show_default_pipeline_at_opt_level_0_fuses_nothing(add_relu, capsys):
    assert cli.main(["show", str(add_relu), "--passes", "default", "--opt-level", "0"]) == 0
    assert capsys.readouterr().out.count("Primitive=1") == 2     # one group per operator
    assert cli.main(["show", str(add_relu), "--passes", "default"]) == 0
    assert capsys.readouterr().out.count("Primitive=1") == 1


def test_show_unknown_pass_names_the_closest(add_relu, capsys):
    assert cli.main(["show", str(add_relu), "--passes", "fold-constnt,fuse-ops"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("relaybench: --passes: ")
    assert "unknown pass 'fold-constnt'; did you mean fold-constant" in captured.err
    assert "Traceback" not in captured.err


def test_show_dot_and_svg(add_relu, dot_module, capsys, tmp_path):
    assert cli.main(["show", str(add_relu), "--passes", "fuse-ops", "--format", "dot"]) == 0
    dot = capsys.readouterr().out
    assert dot.lstrip().startswith("digraph")
    assert "nn.relu" in dot and "add" in dot
    assert "cluster" in dot                                # the fused group
    svg_path = tmp_path / "out" / "g.svg"
    svg_path.parent.mkdir()
    assert cli.main(["show", str(add_relu), "--format", "svg", "--out", str(svg_path)]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"wrote {svg_path}" in captured.err
    svg = svg_path.read_text()
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert "nn.relu" in svg


def test_show_out_to_a_missing_folder_fails(add_relu, capsys, tmp_path):
    bad = tmp_path / "no" / "such" / "dir" / "x.txt"
    assert cli.main(["show", str(add_relu), "--out", str(bad)]) == 1
    assert capsys.readouterr().err.startswith(f"relaybench: cannot write {bad}")


# --- bench -------------------------------------------------------------------------------------

def test_bench_prints_compile_time_timing_and_profile(capsys):
    # at opt_level 2 AlterOpLayout stays off: the DQN's six fused groups (see
    # tests/experiments/test_composability.py) and no layout_transform
    argv = ["bench", "dqn", "--image-shape", "4,36,36", "--number", "1", "--repeat", "2",
            "--threads", "1", "--opt-level", "2"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "dqn (data 1x4x36x36 float32) on llvm at opt_level 2, 1 threads"
    assert lines[1].startswith("compile: ") and "6 groups" in lines[1]
    assert lines[2].startswith("run: ") and "(median of 2 rounds of 1;" in lines[2]
    assert "fused_nn_conv2d" in out and "fused_nn_dense" in out
    assert "layout_transform" not in out
    total = [line for line in lines if line.split()[:1] == ["total"]]
    assert len(total) == 1 and total[0].split()[1] == "6"   # six kernel calls per run


def test_bench_unknown_model(capsys):
    assert cli.main(["bench", "resnet19"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("relaybench: unknown model 'resnet19'; did you mean")
    assert "resnet18" in err


def test_bench_image_shape_for_a_model_without_images(capsys):
    assert cli.main(["bench", "lstm", "--image-shape", "3,32,32"]) == 1
    assert "takes no --image-shape" in capsys.readouterr().err


# --- reproduce ---------------------------------------------------------------------------------

def test_reproduce_composability_writes_table_figure_and_data(capsys, tmp_path):
    from relaybench.experiments import ComposabilityResult

    out_dir = tmp_path / "comp"
    argv = ["reproduce", "composability", "--out", str(out_dir), "--models", "dqn",
            "--image-shape", "4,36,36", "--number", "1", "--repeat", "1", "--no-progress"]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err == ""                               # no progress when asked
    lines = captured.out.splitlines()
    assert lines[0].split() == ["configuration", "dqn"]
    assert lines[2].split() == ["baseline", "1.00"]
    assert lines[10].split()[:2] == ["+", "AlterOpLayout"]
    names = sorted(p.name for p in out_dir.iterdir())
    assert names == ["composability.csv", "composability.json", "composability.md",
                     "composability.png"]
    for name in names:
        assert f"wrote {out_dir / name}" in captured.out
    loaded = ComposabilityResult.load(out_dir / "composability.csv")
    assert [r["configuration"] for r in loaded.rows][0] == "baseline"
    assert len(loaded.rows) == 9 and {r["input"] for r in loaded.rows} == {"1x4x36x36"}
    assert (out_dir / "composability.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out_dir / "composability.md").read_text()
    assert "| configuration | dqn |" in md and "| baseline | 1.00 |" in md


def test_reproduce_unknown_target_and_model(capsys, tmp_path):
    argv = ["reproduce", "composability", "--out", str(tmp_path), "--models", "dqn"]
    assert cli.main(argv + ["--targets", "cuda"]) == 1
    assert "available targets: llvm, opencl" in capsys.readouterr().err
    assert cli.main(["reproduce", "composability", "--out", str(tmp_path),
                     "--models", "dqn,vgg61"]) == 1
    assert "unknown model 'vgg61'; did you mean vgg16" in capsys.readouterr().err


@pytest.mark.parametrize("argv, complaint", [
    (["reproduce", "composability"], "required: --out"),
    (["reproduce", "fig7", "--out", "x"], "invalid choice: 'fig7'"),
    (["bench", "dqn", "--image-shape", "4,36"], "expected CHANNELS,HEIGHT,WIDTH"),
    (["bench", "dqn", "--number", "0"], "expected a positive integer"),
    (["show", "x.rly", "--format", "png"], "invalid choice: 'png'"),
])
def test_bad_arguments_of_the_new_commands_exit_with_status_2(capsys, argv, complaint):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert complaint in capsys.readouterr().err


def test_cache_lists_and_clears_each_kind(capsys, tmp_path):
    import numpy as np
    import relaybench as rb
    from relaybench import config, op
    from relaybench.backends.group_cache import get_group_cache
    with config.Context(RB_CACHE_DIR=tmp_path):
        x = rb.var("x", shape=(4,))
        mod = rb.IRModule.from_expr(rb.Function([x], op.nn.relu(x * rb.const(
            np.arange(4, dtype="float32")))))
        rb.build(mod)
        builds = len(list((tmp_path / "builds").iterdir()))
        kernels = len(list((tmp_path / "llvm").iterdir()))
        assert builds == 1 and kernels >= 1
        assert cli.main(["cache"]) == 0
        out = capsys.readouterr().out
        assert f"RB_CACHE_DIR {tmp_path}" in out
        assert any(line.split()[:3] == ["builds", str(builds), "entries"]
                   for line in out.splitlines())
        assert any(line.split()[:3] == ["llvm", str(kernels), "entries"]
                   for line in out.splitlines())
        assert cli.main(["cache", "--clear", "builds"]) == 0
        assert "builds  removed 1 entries" in capsys.readouterr().out
        assert not list((tmp_path / "builds").iterdir())
        assert len(list((tmp_path / "llvm").iterdir())) == kernels      # the others stay
        get_group_cache().forget()
        assert not rb.build(mod).compile_stats.optimize_cached           # the passes ran again
