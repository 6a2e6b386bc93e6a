"""The ``relaybench`` command line.

Each subcommand is one entry in :data:`COMMANDS`: its name, a one-line help, a function that
declares its arguments and a function that runs it and returns the exit status. A new
subcommand (``bench``, ``reproduce``, ...) is one more entry; :func:`main` builds the parser
from the table.

    $ relaybench version
    relaybench 0.1.0
    $ relaybench show model.rly            # parsed, type-checked, printed
    $ relaybench show model.rly --no-types # parsed and printed as is
    $ relaybench show model.rly --passes fold-constant,fuse-ops --format svg --out model.svg
    $ relaybench show model.onnx           # an ONNX model, imported and printed
    $ relaybench import model.onnx --out model.rly   # and model.npz with the weights
    $ relaybench bench resnet18 --target llvm --image-shape 3,64,64
    $ relaybench reproduce composability --out results/ --models resnet18,dqn --quick
    $ relaybench reproduce quantization --out results/ --quick
    $ relaybench reproduce accelerator --out results/ --quick
    $ relaybench reproduce nlp --out results/ --quick
    $ relaybench train-digits --epochs 20 --seed 0 --out weights/
    $ relaybench fuzz --n 300 --seed 1000 --jobs 2 --out fuzz-out --minimize
    $ relaybench fuzz --replay fuzz-out/min_0_seed1036.rly

Errors that relaybench raises on purpose (a parse error, a type error, an unknown model or pass)
are printed to stderr without a traceback and give exit status 1; a bad command line gives
status 2.
"""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

__all__ = ["Command", "COMMANDS", "main"]

# Optional packages reported by `relaybench version --verbose`, read from their metadata only
# (nothing is imported).
_OPTIONAL_PACKAGES = ("llvmlite", "pyopencl", "onnx", "onnxruntime", "torch", "graphviz",
                      "jupyterlab", "ipywidgets", "matplotlib")


@dataclass(frozen=True)
class Command:
    """One subcommand: ``configure`` adds its arguments, ``run`` returns the exit status."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _version_of(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _fail(message: str) -> int:
    print(f"relaybench: {message}", file=sys.stderr)
    return 1


# --- version -------------------------------------------------------------------------------

def _configure_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also list Python, numpy, the optional packages installed and the "
                             "OpenCL devices")


def _run_version(args: argparse.Namespace) -> int:
    print(f"relaybench {_version_of('relaybench') or 'unknown (not installed)'}")
    if args.verbose:
        print(f"python {platform.python_version()} ({sys.executable})")
        for package in ("numpy", *_OPTIONAL_PACKAGES):
            print(f"{package} {_version_of(package) or 'not installed'}")
        print(_opencl_devices())
    return 0


def _opencl_devices() -> str:
    """The OpenCL platforms and devices the ``opencl`` target can use, one per line."""
    try:
        from .backends.opencl.runtime import devices_text
        text = devices_text()
    except ImportError:
        return "opencl devices: none (pyopencl is not installed)"
    except Exception as err:  # a broken driver must not hide the rest of the report
        return f"opencl devices: none ({type(err).__name__}: {err})"
    return "opencl devices:\n" + "\n".join("  " + line for line in text.splitlines())


# --- show ----------------------------------------------------------------------------------

_SHOW_FORMATS = ("text", "dot", "svg")


def _configure_show(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="FILE.rly",
                        help="a program in Relay text, or an ONNX model (FILE.onnx)")
    parser.add_argument("--types", action=argparse.BooleanOptionalAction, default=True,
                        help="run type inference and print the types (default: on)")
    parser.add_argument("--passes", metavar="PIPELINE",
                        help="passes to run first: a pipeline string "
                             "('fold-constant,fuse-ops{fuse_opt_level=2}') or 'default' for "
                             "Relay's default pipeline at --opt-level")
    parser.add_argument("--opt-level", type=int, default=3, metavar="N",
                        help="the pass context's opt_level for --passes (default: 3)")
    parser.add_argument("--format", choices=_SHOW_FORMATS, default="text",
                        help="Relay text, Graphviz DOT source, or SVG drawn by graphviz-pure "
                             "(default: text)")
    parser.add_argument("--out", type=Path, metavar="PATH",
                        help="write to PATH instead of standard output")


def _run_pipeline(mod, spec: str, opt_level: int):
    """``mod`` after the pipeline ``spec`` (a pipeline string or ``default``) at ``opt_level``."""
    from relaybench.passes.infra import PassContext
    from relaybench.passes.pipelines import build_pipeline, default_pipeline

    with PassContext(opt_level=opt_level):
        if spec.strip() == "default":
            pipeline = default_pipeline(opt_level)
        else:
            pipeline = build_pipeline(spec)
        return pipeline(mod)


def _render(mod, fmt: str, types: bool) -> str:
    if fmt == "text":
        return mod.astext(show_types=types)
    import relaybench.viz as viz
    graph = viz.to_dot(mod, types=types)
    if fmt == "dot":
        return graph.source
    return viz.render_svg(graph)


def _emit(text: str, out: Path | None) -> int:
    if out is None:
        print(text if text.endswith("\n") else text + "\n", end="")
        return 0
    try:
        out.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    except OSError as err:
        return _fail(f"cannot write {out}: {err}")
    print(f"relaybench: wrote {out}", file=sys.stderr)
    return 0


def _run_show(args: argparse.Namespace) -> int:
    from relaybench.errors import ParseError, RelayError

    if args.passes is not None and args.opt_level < 0:
        return _fail(f"--opt-level must be at least 0, got {args.opt_level}")
    if args.file.suffix.lower() == ".onnx":  # an ONNX model: imported, weights as parameters
        loaded = _load_onnx(args.file, [], None, freeze=False)
        if isinstance(loaded, int):
            return loaded
        mod = loaded[0]
        text = None
    else:
        try:
            text = args.file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            return _fail(f"cannot read {args.file}: {err}")

    from relaybench import parse

    try:
        mod = parse(text) if text is not None else mod
        if args.types or args.passes is not None:  # passes need a typed program
            from relaybench.passes import InferType
            mod = InferType()(mod)
    except ParseError as err:
        if err.source_name == "<string>":  # name the file in the message
            err = ParseError(err.message, err.line, err.column, err.source_line,
                             str(args.file), err.expected)
        return _fail(str(err))
    except RelayError as err:  # TypeInferenceError and its kin
        return _fail(str(err))
    if args.passes is not None:
        try:
            mod = _run_pipeline(mod, args.passes, args.opt_level)
        except (KeyError, ValueError, TypeError) as err:  # an unknown pass or option
            return _fail(f"--passes: {err.args[0] if err.args else err}")
        except RelayError as err:
            return _fail(f"{args.file}: {err}")
    try:
        rendered = _render(mod, args.format, args.types)
    except ImportError as err:
        return _fail(f"--format {args.format} needs the graphviz package: {err}")
    except (OSError, RuntimeError) as err:  # the Graphviz executable missing or failing
        return _fail(f"--format {args.format}: {err}")
    return _emit(rendered, args.out)


# --- import (ONNX) -------------------------------------------------------------------------

def _input_shape(text: str) -> tuple:
    """``NAME=1,3,224,224`` (a dim may be a name, or ``?``) as ``(name, shape)``."""
    name, sep, dims = text.rpartition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=D0,D1,..., got {text!r}")
    shape = []
    for d in dims.split(",") if dims else []:
        d = d.strip()
        shape.append(int(d) if d.lstrip("-").isdigit() else None if d in ("?", "") else d)
    return name, tuple(shape)


def _load_onnx(path: Path, shapes, opset, freeze: bool):
    """``(mod, params)`` of an ONNX file, or the exit status of a clear error."""
    from relaybench.errors import RelayError
    from relaybench.frontends import from_onnx
    if not path.exists():
        return _fail(f"cannot read {path}: no such file")
    try:
        return from_onnx(str(path), shape=dict(shapes) or None, opset=opset, freeze_params=freeze)
    except ImportError as err:
        return _fail(f"{path}: {err}")
    except RelayError as err:
        message = str(err)
        return _fail(message if message.startswith(str(path)) else f"{path}: {message}")


def _configure_import(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="MODEL.onnx", help="an ONNX model")
    parser.add_argument("--out", type=Path, metavar="PATH.rly", required=True,
                        help="the Relay text to write; the weights go to PATH.npz beside it")
    parser.add_argument("--shape", type=_input_shape, action="append", default=[],
                        metavar="NAME=D0,D1,...",
                        help="fix an input's shape (a dim may be a name or ?); repeatable")
    parser.add_argument("--opset", type=int, metavar="N",
                        help="read the model as this opset of the default domain")
    parser.add_argument("--freeze-params", action="store_true",
                        help="keep the weights in the text as constants (no .npz)")


def _run_import(args: argparse.Namespace) -> int:
    import numpy as np
    loaded = _load_onnx(args.file, args.shape, args.opset, args.freeze_params)
    if isinstance(loaded, int):
        return loaded
    mod, params = loaded
    status = _emit(mod.astext(show_types=False), args.out)
    if status or args.freeze_params:
        return status
    weights = args.out.with_suffix(".npz")
    try:
        np.savez(weights, **params)
    except OSError as err:
        return _fail(f"cannot write {weights}: {err}")
    print(f"relaybench: wrote {weights} ({len(params)} parameters)", file=sys.stderr)
    return 0


# --- shared by bench and reproduce ---------------------------------------------------------

def _image_shape(text: str) -> tuple:
    try:
        shape = tuple(int(part) for part in text.replace("x", ",").split(","))
    except ValueError:
        shape = ()
    if len(shape) != 3 or min(shape) < 1:
        raise argparse.ArgumentTypeError(
            f"expected CHANNELS,HEIGHT,WIDTH (three positive integers, e.g. 3,224,224), "
            f"got {text!r}")
    return shape


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _names(values) -> list:
    """``["a,b", "c"]`` -> ``["a", "b", "c"]``: lists may be given with commas or spaces."""
    return [name.strip() for value in values or () for name in value.split(",") if name.strip()]


def _unknown_model(err: KeyError) -> int:
    return _fail(err.args[0] if err.args else str(err))


# --- bench ---------------------------------------------------------------------------------

def _configure_bench(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL",
                        help="a model of the zoo (resnet18, mobilenet_v2, dqn, vgg16, ...)")
    parser.add_argument("--target", default="llvm", help="the target (default: llvm)")
    parser.add_argument("--opt-level", type=int, default=3, metavar="N",
                        help="the optimization level (default: 3)")
    parser.add_argument("--threads", type=_positive, metavar="N",
                        help="threads the kernels use (default: RB_NUM_THREADS or all cores)")
    parser.add_argument("--number", type=_positive, default=10, metavar="N",
                        help="runs per timed round (default: 10)")
    parser.add_argument("--repeat", type=_positive, default=5, metavar="N",
                        help="timed rounds; the median is reported (default: 5)")
    parser.add_argument("--image-shape", type=_image_shape, metavar="C,H,W",
                        help="the input image of a vision model (default: the model's own)")


def _run_bench(args: argparse.Namespace) -> int:
    import time

    import numpy as np

    from relaybench import build, models
    from relaybench.errors import RelayError

    if args.opt_level < 0:
        return _fail(f"--opt-level must be at least 0, got {args.opt_level}")
    kwargs = {}
    if args.image_shape is not None:
        kwargs["image_shape"] = args.image_shape
    try:
        mod, params = models.get(args.model, **kwargs)
    except KeyError as err:
        return _unknown_model(err)
    except TypeError:
        return _fail(f"model {args.model!r} takes no --image-shape")
    except ValueError as err:
        return _fail(f"model {args.model!r}: {err}")
    try:
        start = time.perf_counter()
        graph = build(mod, target=args.target, params=params, opt_level=args.opt_level,
                      num_threads=args.threads)
        seconds = time.perf_counter() - start
        rng = np.random.default_rng(0)
        inputs = {name: rng.standard_normal(shape).astype(dtype)
                  for name, (shape, dtype) in graph.input_info().items()}
        graph.set_input(**inputs)
        result = graph.benchmark(number=args.number, repeat=args.repeat)
        profile = graph.profile(number=args.number)
    except RelayError as err:
        return _fail(f"{args.model}: {err}")
    shapes = ", ".join(f"{name} {'x'.join(str(d) for d in shape)} {dtype}"
                       for name, (shape, dtype) in graph.input_info().items())
    print(f"{args.model} ({shapes}) on {graph.target} at opt_level {args.opt_level}, "
          f"{graph.num_threads} threads")
    print(f"compile: {seconds:.2f} s; {graph.compile_stats}")
    print(f"run: {result.median_ms:.4g} ms ± {result.std_ms:.2g} ms (median of {args.repeat} "
          f"rounds of {args.number}; min {result.min_ms:.4g}, max {result.max_ms:.4g})")
    print()
    print(f"per kernel (median of {args.number} calls each):")
    print(profile)
    return 0


# --- reproduce -----------------------------------------------------------------------------

# the experiments; each runs through its function in _REPRODUCERS (at the end of this section)
_EXPERIMENTS = ("composability", "quantization", "accelerator", "nlp")


def _configure_reproduce(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("experiment", choices=_EXPERIMENTS, help="the experiment to run")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="the folder for the experiment's .csv, .json, .md and .png files")
    parser.add_argument("--models", nargs="+", metavar="MODEL",
                        help="models, by comma or space (default: composability: resnet18, "
                             "mobilenet_v2, dqn, vgg16; quantization: resnet18, mobilenet_v2, "
                             "vgg16, dqn for the agreement, resnet18, mobilenet_v2 for the speed; "
                             "accelerator: resnet18, resnet34, resnet50, tree_lstm)")
    parser.add_argument("--targets", nargs="+", metavar="TARGET",
                        help="targets, by comma or space (default: llvm; quantization runs on "
                             "llvm only); accelerator: the designs, e.g. accel 'accel -batch=4' "
                             "(the default)")
    parser.add_argument("--image-shape", type=_image_shape, metavar="C,H,W",
                        help="the input of every model whose own input has C channels "
                             "(default: the models' own; with --quick, 3,32,32)")
    parser.add_argument("--quick", action="store_true",
                        help="small inputs (3,32,32; DQN keeps its own) and few timing runs "
                             "(--number 1 --repeat 3), to try the experiment out; quantization "
                             "also measures fewer models (resnet18 and dqn, resnet18's speed) "
                             "on fewer random inputs; accelerator: resnet18 only")
    parser.add_argument("--number", type=_positive, metavar="N",
                        help="runs per timed round (default: 10; 1 with --quick)")
    parser.add_argument("--repeat", type=_positive, metavar="N",
                        help="timed rounds, the median is reported (default: 5; 3 with --quick)")
    parser.add_argument("--threads", type=_positive, metavar="N",
                        help="threads the kernels use (default: RB_NUM_THREADS or all cores; "
                             "quantization's speed table: 1 and 2)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                        help="show progress on stderr (default: on)")


def _markdown(table, title: str, note: str) -> str:
    rows = table.rows
    cols = list(rows[0]) if rows else []
    lines = [f"# {title}", "", note, ""]
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "|".join("---" if c == cols[0] else "---:" for c in cols) + "|")
    for r in rows:
        lines.append("| " + " | ".join(str(r[c]) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def _run_reproduce(args: argparse.Namespace) -> int:
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        return _fail(f"cannot create {args.out}: {err}")
    return _REPRODUCERS[args.experiment](args)


def _reproduce_composability(args: argparse.Namespace) -> int:
    from relaybench.errors import RelayError
    from relaybench.experiments import composability

    models = _names(args.models) or None
    targets = _names(args.targets) or ["llvm"]
    image_shape = args.image_shape
    if image_shape is None and args.quick:
        image_shape = (3, 32, 32)
    number = args.number or (1 if args.quick else 10)
    repeat = args.repeat or (3 if args.quick else 5)
    kwargs = {} if models is None else {"models": models}
    try:
        result = composability(targets=targets, image_shape=image_shape, number=number,
                               repeat=repeat, num_threads=args.threads, progress=args.progress,
                               **kwargs)
    except KeyError as err:
        return _unknown_model(err)
    except (ValueError, RelayError) as err:
        return _fail(str(err))
    table = result.table()
    written = [result.to_csv(args.out / "composability.csv"),
               result.to_json(args.out / "composability.json")]
    inputs = "; ".join(dict.fromkeys(f"{r['model']} {r['input']}" for r in result.rows))
    note = (f"Speedup over the baseline (opt_level 0: every operator its own kernel) as passes "
            f"are enabled one after another; targets {', '.join(result.targets)}; inputs "
            f"{inputs}; median of {repeat} rounds of {number} runs.")
    md = args.out / "composability.md"
    md.write_text(_markdown(table, "Composability: speedup from successively enabling passes",
                            note), encoding="utf-8")
    written.append(md)
    try:
        figure = result.plot()
    except ImportError as err:
        print(f"relaybench: no figure: {err}", file=sys.stderr)
    else:
        png = args.out / "composability.png"
        figure.savefig(png, dpi=120)
        written.append(png)
    print(table)
    for path in written:
        print(f"wrote {path}")
    return 0


def _reproduce_quantization(args: argparse.Namespace) -> int:
    """The digits accuracy, the zoo agreement and the speed tables
    (:func:`relaybench.experiments.quantization`), written as quantization_*.md/.csv/.json."""
    from relaybench.errors import RelayError
    from relaybench.experiments import quantization

    targets = _names(args.targets)
    if any(t.split()[0] != "llvm" for t in targets):
        return _fail(f"quantization runs on the llvm target only, not {', '.join(targets)}")
    models = _names(args.models)
    if args.quick:
        agreement_models = models or ["resnet18", "dqn"]
        speed_models = models or ["resnet18"]
    else:
        agreement_models = models or None
        speed_models = models or None
    image_shape = args.image_shape
    if image_shape is None and args.quick:
        image_shape = (3, 32, 32)
    kwargs = {"number": args.number or (1 if args.quick else 10),
              "repeat": args.repeat or (3 if args.quick else 5)}
    if args.quick:
        kwargs.update(num_inputs=8, calibration_inputs=2)
    if agreement_models is not None:
        kwargs["models"] = agreement_models
    if speed_models is not None:
        kwargs["speed_models"] = speed_models
    if args.threads is not None:
        kwargs["threads"] = [args.threads]
    try:
        result = quantization(image_shape=image_shape, progress=args.progress, **kwargs)
        written = result.write(args.out)
    except KeyError as err:
        return _unknown_model(err)
    except (ValueError, OSError, RelayError) as err:
        return _fail(str(err))
    for name, table in result.tables().items():
        print(f"{name}:\n{table}\n")
    for path in written:
        print(f"wrote {path}")
    return 0


def _reproduce_accelerator(args: argparse.Namespace) -> int:
    """The ResNets on the CPU only and on the simulated accelerator designs
    (:func:`relaybench.experiments.accelerator`), written as accelerator.md/.csv/.json/.png.
    ``--targets`` names the designs; the images are 3x224x224 (3x32x32 with ``--quick``)."""
    from relaybench.errors import RelayError
    from relaybench.experiments import accelerator

    if args.threads is not None:
        return _fail("accelerator: --threads is not taken (the CPU parts use RB_NUM_THREADS)")
    models = _names(args.models) or (["resnet18"] if args.quick else None)
    designs = _names(args.targets) or None
    image_shape = args.image_shape or ((3, 32, 32) if args.quick else (3, 224, 224))
    kwargs = {"number": args.number or (1 if args.quick else 5),
              "repeat": args.repeat or (3 if args.quick else 5)}
    if models is not None:
        kwargs["models"] = models
    if designs is not None:
        kwargs["designs"] = designs
    try:
        result = accelerator(image_shape=image_shape, progress=args.progress, **kwargs)
        written = result.write(args.out)
    except KeyError as err:
        return _unknown_model(err)
    except (ValueError, OSError, RelayError) as err:
        return _fail(str(err))
    print(result.table())
    print()
    print(result.paper_table())
    failed = [r for r in result.rows if r["error"]]
    for r in failed:
        print(f"relaybench: {r['model']} on {r['design']!r} failed: {r['error']}",
              file=sys.stderr)
    for path in written:
        print(f"wrote {path}")
    return 1 if failed else 0


def _reproduce_nlp(args: argparse.Namespace) -> int:
    """The recurrent models and TreeLSTM on relaybench AoT, the VM, the interpreter, PyTorch,
    TorchScript and ONNX Runtime (:func:`relaybench.experiments.nlp`), written as nlp.md and
    nlp.json beside the paper's speedups. ``--models`` picks among rnn, gru, lstm, char_rnn,
    tree_lstm, tree_lstm_random; ``--threads`` defaults to 2."""
    from relaybench.errors import RelayError
    from relaybench.experiments.nlp import MODELS, nlp

    models = _names(args.models) or list(MODELS)
    kwargs = {"number": args.number or (2 if args.quick else 20),
              "repeat": args.repeat or (3 if args.quick else 7),
              "threads": args.threads or 2}
    try:
        result = nlp(models=models, **kwargs)
        written = result.write(args.out)
    except (ValueError, OSError, RelayError) as err:
        return _fail(str(err))
    print(result.to_markdown())
    for path in written:
        print(f"wrote {path}")
    return 0


_REPRODUCERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "composability": _reproduce_composability,
    "quantization": _reproduce_quantization,
    "accelerator": _reproduce_accelerator,
    "nlp": _reproduce_nlp,
}


# --- train-digits --------------------------------------------------------------------------

def _configure_train_digits(parser: argparse.ArgumentParser) -> None:
    # no defaults here: train_digits' own (relaybench.experiments.digits.DEFAULTS) apply
    parser.add_argument("--epochs", type=_positive, metavar="N",
                        help="passes over the training split")
    parser.add_argument("--batch-size", type=_positive, metavar="N", help="images per step")
    parser.add_argument("--learning-rate", type=float, metavar="LR", help="Adam's step size")
    parser.add_argument("--seed", type=int,
                        help="seed of the split, the initial weights and the batches")
    parser.add_argument("--executor", choices=("llvm", "interpreter"), default="llvm",
                        help="what runs the gradient program (default: llvm, the graph executor)")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="the folder for digits_cnn.npz and digits_cnn.json (default: the "
                             "package's relaybench/models/data, where the zoo loads them from)")


def _run_train_digits(args: argparse.Namespace) -> int:
    from relaybench.errors import RelayError
    from relaybench.experiments.digits import train_digits
    out = args.out or Path(__file__).resolve().parent / "models" / "data"
    try:
        given = {"epochs": args.epochs, "batch_size": args.batch_size,
                 "learning_rate": args.learning_rate, "seed": args.seed}
        result = train_digits(executor=args.executor, progress=print,
                              **{k: v for k, v in given.items() if v is not None})
        weights, note = result.save(out)
    except (ImportError, ValueError, OSError, RelayError) as err:
        return _fail(str(err))
    print(f"test accuracy {100 * result.test_accuracy:.2f}% on {result.settings['test_images']} "
          f"images; wrote {weights} and {note}")
    return 0


# --- fuzz ----------------------------------------------------------------------------------

def _configure_fuzz(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=_positive, default=100, metavar="N",
                        help="how many programs: seeds SEED .. SEED+N-1 (default: 100)")
    parser.add_argument("--seed", type=int, default=0, metavar="S",
                        help="the first seed (default: 0)")
    parser.add_argument("--jobs", type=_positive, metavar="J",
                        help="worker processes (default: one per core)")
    parser.add_argument("--configs", nargs="+", metavar="CONFIG",
                        help="configurations, by comma or space (default: all; see --list)")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="write each failing program (Relay text) to DIR")
    parser.add_argument("--minimize", action="store_true",
                        help="also write one minimized program per failure class to DIR")
    parser.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                        help="per program; a program past it is a failure (default: 120)")
    parser.add_argument("--replay", type=Path, metavar="FILE.rly",
                        help="rerun one saved program on the configurations instead")
    parser.add_argument("--input-seed", type=int, default=0, metavar="K",
                        help="with --replay: the seed of the input values (default: 0)")
    parser.add_argument("--list", action="store_true",
                        help="list the configurations and the ops the generator leaves out")


def _run_fuzz(args: argparse.Namespace) -> int:
    from relaybench.testing.differential import CONFIGS

    configs = _names(args.configs) or None
    unknown = [c for c in configs or () if c not in CONFIGS]
    if unknown:
        return _fail(f"unknown configuration {unknown[0]!r}; known: {', '.join(CONFIGS)}")
    if args.list:
        from relaybench.testing.random_programs import OP_GENERATORS, uncovered_ops
        for config in CONFIGS.values():
            print(f"{config.name:12s} {config.description}")
        print(f"\n{len(OP_GENERATORS)} ops generated; registry ops with a compute left out:")
        for name, why in sorted(uncovered_ops().items()) or [("(none)", "")]:
            print(f"  {name} {why}")
        return 0
    if args.replay is not None:
        return _replay(args.replay, configs, args.input_seed)
    if args.minimize and args.out is None:
        return _fail("--minimize needs --out DIR")
    from relaybench.testing.fuzz import fuzz

    def progress(line: str) -> None:
        print(line, flush=True)

    summary = fuzz(range(args.seed, args.seed + args.n), jobs=args.jobs, configs=configs,
                   timeout=args.timeout, out=args.out, minimize=args.minimize,
                   progress=progress)
    print()
    print(summary.table())
    if summary.written:
        print(f"wrote {len(summary.written)} programs to {args.out}")
    return 0 if summary.ok else 1


def _replay(path: Path, configs, input_seed: int) -> int:
    from relaybench.errors import RelayError
    from relaybench.ir.parser import parse
    from relaybench.testing.differential import run_differential

    try:
        mod = parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        return _fail(f"cannot read {path}: {err}")
    except RelayError as err:
        return _fail(f"{path}: {err}")
    report = run_differential(mod, seed=input_seed, configs=configs)
    print(report)
    return 0 if report.ok else 1


# --- cache -------------------------------------------------------------------------------

#: the folders under RB_CACHE_DIR, and what each keeps
_CACHE_KINDS = {"llvm": "compiled LLVM kernels (object code)",
                "opencl": "OpenCL program binaries",
                "groups": "fused groups' lowerings (manifests)",
                "builds": "optimized modules (Relay text and weights)"}


def _configure_cache(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clear", choices=(*_CACHE_KINDS, "all"), metavar="KIND",
                        help="remove one kind of entry (" + ", ".join(_CACHE_KINDS)
                             + ") or all of them")


def _run_cache(args: argparse.Namespace) -> int:
    from . import config
    root = Path(config.get("RB_CACHE_DIR")).expanduser()
    kinds = list(_CACHE_KINDS) if args.clear in (None, "all") else [args.clear]
    print(f"RB_CACHE_DIR {root}")
    for kind in kinds:
        folder = root / kind
        files = [f for f in folder.iterdir() if f.is_file()] if folder.is_dir() else []
        size = sum(f.stat().st_size for f in files)
        if args.clear:
            for f in files:
                f.unlink(missing_ok=True)
            print(f"  {kind:7s} removed {len(files)} entries, {size / 2**20:.1f} MiB")
        else:
            print(f"  {kind:7s} {len(files):6d} entries {size / 2**20:9.1f} MiB  "
                  f"{_CACHE_KINDS[kind]}")
    return 0


# --- the table -----------------------------------------------------------------------------

COMMANDS: dict[str, Command] = {
    command.name: command
    for command in (
        Command("version", "print the version (with -v, also those of the dependencies)",
                _configure_version, _run_version),
        Command("show", "parse a Relay text file, infer its types, run passes and print it "
                "(text, DOT or SVG)", _configure_show, _run_show),
        Command("import", "import an ONNX model as Relay text (and its weights as .npz)",
                _configure_import, _run_import),
        Command("bench", "build a model of the zoo, time it and profile every kernel",
                _configure_bench, _run_bench),
        Command("reproduce", "run one of the paper's experiments and write its table and figure",
                _configure_reproduce, _run_reproduce),
        Command("train-digits", "train the zoo's digits CNN with the project's Gradient pass and "
                "save its weights", _configure_train_digits, _run_train_digits),
        Command("fuzz", "check random programs on every executor against the interpreter "
                "(or --replay a saved one)", _configure_fuzz, _run_fuzz),
        Command("cache", "list what RB_CACHE_DIR holds (kernels, lowerings, optimized modules), "
                "or --clear a kind", _configure_cache, _run_cache),
    )
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every command in :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="relaybench",
        description="The Relay deep-learning compiler, as a research workbench.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS.values():
        sub = subparsers.add_parser(command.name, help=command.help, description=command.help)
        command.configure(sub)
        sub.set_defaults(run=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except BrokenPipeError:  # `relaybench bench ... | head`: the reader left; stop quietly
        import os
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
