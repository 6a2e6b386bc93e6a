"""The ``relaybench`` command line.

Each subcommand is one entry in :data:`COMMANDS`: its name, a one-line help, a function that
declares its arguments and a function that runs it and returns the exit status. A new
subcommand (``bench``, ``reproduce``, ...) is one more entry; :func:`main` builds the parser
from the table.

    $ relaybench version
    relaybench 0.1.0
    $ relaybench show model.rly            # parsed, type-checked, printed
    $ relaybench show model.rly --no-types # parsed and printed as is

Errors that relaybench raises on purpose (a parse error, a type error) are printed to stderr
without a traceback and give exit status 1; a bad command line gives status 2.
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
                        help="also list Python, numpy and the optional packages installed")


def _run_version(args: argparse.Namespace) -> int:
    print(f"relaybench {_version_of('relaybench') or 'unknown (not installed)'}")
    if args.verbose:
        print(f"python {platform.python_version()} ({sys.executable})")
        for package in ("numpy", *_OPTIONAL_PACKAGES):
            print(f"{package} {_version_of(package) or 'not installed'}")
    return 0


# --- show ----------------------------------------------------------------------------------

def _configure_show(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="FILE.rly", help="a program in Relay text")
    parser.add_argument("--types", action=argparse.BooleanOptionalAction, default=True,
                        help="run type inference and print the types (default: on)")


def _run_show(args: argparse.Namespace) -> int:
    from relaybench.errors import ParseError, RelayError

    try:
        text = args.file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        return _fail(f"cannot read {args.file}: {err}")

    from relaybench import parse

    try:
        mod = parse(text)
        if args.types:
            from relaybench.passes import InferType
            mod = InferType()(mod)
    except ParseError as err:
        if err.source_name == "<string>":  # name the file in the message
            err = ParseError(err.message, err.line, err.column, err.source_line,
                             str(args.file), err.expected)
        return _fail(str(err))
    except RelayError as err:  # TypeInferenceError and its kin
        return _fail(str(err))
    print(mod.astext())
    return 0


# --- the table -----------------------------------------------------------------------------

COMMANDS: dict[str, Command] = {
    command.name: command
    for command in (
        Command("version", "print the version (with -v, also those of the dependencies)",
                _configure_version, _run_version),
        Command("show", "parse a Relay text file, infer its types and print it",
                _configure_show, _run_show),
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
    return args.run(args)
