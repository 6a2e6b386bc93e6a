"""Declared knobs: every setting relaybench reads from the environment, in one table.

A knob has a name (``RB_`` prefix), a type, a default and a one-line description. Its value
comes from, in order: the innermost :class:`Context` that sets it, then the environment, then
the default. An empty environment variable counts as unset.

>>> from relaybench import config
>>> with config.Context(RB_DEBUG=3):
...     print(config.get("RB_DEBUG"))
...     with config.Context(RB_DEBUG=4):
...         print(config.get("RB_DEBUG"))
...     print(config.get("RB_DEBUG"))
3
4
3
>>> config.KNOBS["RB_TARGET"].default
'llvm'

Overrides are held in a :mod:`contextvars` variable, so they are scoped to the current thread
(or asyncio task) and undone on leaving the ``with`` block, even on an exception.
:func:`describe` renders the table as markdown; the README's table is its output.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

__all__ = ["Knob", "KNOBS", "Context", "get", "describe", "num_threads"]


def _parse_int(text: str) -> int:
    return int(text.strip(), 10)


def _parse_path(text: str) -> Path:
    return Path(text).expanduser()


def _parse_str(text: str) -> str:
    return text.strip()


# type name -> (Python type accepted as an override, parser for environment text)
_TYPES: dict[str, tuple[type, Callable[[str], Any]]] = {
    "int": (int, _parse_int),
    "path": (Path, _parse_path),
    "str": (str, _parse_str),
}


@dataclass(frozen=True)
class Knob:
    """One setting: its name, type (``"int"``, ``"path"`` or ``"str"``), default and doc."""

    name: str
    type: str
    default: Any
    doc: str
    minimum: int | None = None  # for int knobs: the smallest accepted value

    def convert(self, value: Any, source: str) -> Any:
        """Turn ``value`` (environment text or a Python value) into this knob's type.

        Raises ``ValueError`` naming the knob, the value and where it came from.
        """
        pytype, parse = _TYPES[self.type]
        if isinstance(value, str):
            try:
                result = parse(value)
            except ValueError:
                raise ValueError(
                    f"{self.name}={value!r} (from {source}) is not a valid {self.type}: "
                    f"{self.doc}") from None
        elif self.type == "path" and isinstance(value, os.PathLike):
            result = Path(value).expanduser()
        elif isinstance(value, pytype) and not isinstance(value, bool):
            result = value
        else:
            raise ValueError(f"{self.name}={value!r} (from {source}) is not a valid {self.type}: "
                             f"{self.doc}")
        if self.minimum is not None and result < self.minimum:
            raise ValueError(f"{self.name}={value!r} (from {source}) is below the minimum "
                             f"{self.minimum}: {self.doc}")
        return result


def _table(*knobs: Knob) -> Mapping[str, Knob]:
    return MappingProxyType({knob.name: knob for knob in knobs})


KNOBS: Mapping[str, Knob] = _table(
    Knob("RB_DEBUG", "int", 0,
         "verbosity: 0 quiet, 3 prints the IR after each pass, 4 also the generated kernels",
         minimum=0),
    Knob("RB_CACHE_DIR", "path", "~/.cache/relaybench",
         "where compiled kernels, group lowerings and optimized modules are cached on disk"),
    Knob("RB_OPENCL_BINARIES", "str", "auto",
         "whether built OpenCL programs' binaries are kept in RB_CACHE_DIR: on, off, or auto "
         "(every driver but PoCL, which keeps its own cache of compiled kernels and compiles "
         "every kernel once more when asked for the binary)"),
    Knob("RB_NUM_THREADS", "int", 0,
         "threads for compiled CPU kernels; 0 means the number of cores", minimum=0),
    Knob("RB_AOT_STACK_MB", "int", 256,
         "native stack (MiB) an AoT-compiled run gets when its recursion is deeper than the "
         "calling thread's stack allows; deeper still is an error", minimum=1),
    Knob("RB_TARGET", "str", "llvm",
         "the default build target when none is given"),
    Knob("RB_KERNEL_CACHE_SIZE", "int", 512,
         "compiled kernel modules kept loaded in memory; beyond it the least recently used are "
         "freed once no kernel uses them (the disk cache keeps them all)", minimum=0),
    Knob("RB_X86_INT8", "str", "auto",
         "how LLVM kernels compute int8 dot products: auto (the best the host's features "
         "allow), vnni (vpdpbusd), avx512bw or avx2 (vpmaddwd on widened pairs), generic"),
    Knob("RB_GPU_CONV", "str", "auto",
         "how the OpenCL target schedules nn.conv2d (NCHW/OIHW float32, groups 1): direct (one "
         "output per work item), splitk (direct, the input channels cut in slices summed by a "
         "second launch where the outputs are few), tiled (work groups of output tiles, input "
         "and weight chunks in local memory), blocked (the same tiles read from device memory, "
         "no local copies), winograd (Winograd's F(4x4,3x3) or F(2x2,3x3) for every 3x3 "
         "stride-1 layer, auto's choice for the others), auto (per "
         "layer: on a GPU Winograd where the layer is large enough, else tiled where the tiles "
         "fill the device, splitk elsewhere; on a CPU device tiled where the shape suits it); "
         "the rule name in lib.profile() says which ran"),
    Knob("RB_GPU_VECTOR", "int", 4,
         "elements per work item of an elementwise (injective) OpenCL stage whose innermost "
         "axis they divide: 1, 2, 4, 8 or 16; the work item reads and writes them as one "
         "vector (float4...) where the code generator can", minimum=1),
    Knob("RB_WINOGRAD", "str", "auto",
         "Winograd convolution on llvm for float32 3x3 stride-1 convolutions (one group): auto "
         "(where the layout rule expects it to win), on (every such convolution, tile size by "
         "the rule), 2 or 4 (every one, F(2x2,3x3) or F(4x4,3x3)), off (never, on opencl "
         "too, whose own choice is RB_GPU_CONV's)"),
    Knob("RB_LOWERING_CACHE", "str", "on",
         "on: a build whose kernels are cached skips lowering their groups, reading each one's "
         "manifest from memory or RB_CACHE_DIR/groups (llvm); off: every group is lowered"),
    Knob("RB_BUILD_CACHE", "str", "on",
         "on: relaybench.build keeps the optimized module of each build in RB_CACHE_DIR/builds "
         "(constants mapped from the file), so building the same program again skips the "
         "passes; off: the passes always run"),
    Knob("RB_BUILD_CACHE_MB", "int", 2048,
         "the most MiB RB_CACHE_DIR/builds holds (least recently used entries removed first); a "
         "build whose constants take more than a quarter of it is not kept", minimum=0),
    Knob("RB_AUTOTUNE_LOG", "str", "shipped",
         "a tuning log (JSON lines, relaybench.autotune) whose best config per workload every "
         "llvm build uses, as inside apply_history_best; 'shipped' for the logs shipped with "
         "the package; empty: the strategies' hand-picked configs"),
)


_overrides: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "relaybench_config_overrides", default=MappingProxyType({}))


def _knob(name: str) -> Knob:
    try:
        return KNOBS[name]
    except KeyError:
        raise KeyError(f"unknown knob {name!r}; known knobs: {', '.join(KNOBS)}") from None


def get(name: str) -> Any:
    """The typed value of knob ``name``: Context override, else environment, else default."""
    knob = _knob(name)
    scoped = _overrides.get()
    if name in scoped:
        return scoped[name]
    text = os.environ.get(name, "")
    if text.strip():
        return knob.convert(text, "the environment")
    return knob.convert(knob.default, "the default")


def num_threads() -> int:
    """``RB_NUM_THREADS`` resolved: 0 becomes the number of cores."""
    return get("RB_NUM_THREADS") or os.cpu_count() or 1


class Context:
    """Override knobs inside a ``with`` block; contexts nest, the innermost wins.

    Values are checked on construction, so a bad override fails where it is written. A Context
    object may be entered again, also while it is already active.
    """

    def __init__(self, **overrides: Any):
        self.overrides = MappingProxyType(
            {name: _knob(name).convert(value, "Context") for name, value in overrides.items()})
        self._tokens: list[contextvars.Token] = []

    def __enter__(self) -> Context:
        merged = {**_overrides.get(), **self.overrides}
        self._tokens.append(_overrides.set(MappingProxyType(merged)))
        return self

    def __exit__(self, *exc_info) -> None:
        _overrides.reset(self._tokens.pop())

    def __repr__(self) -> str:
        args = ", ".join(f"{name}={value!r}" for name, value in self.overrides.items())
        return f"Context({args})"


def describe() -> str:
    """All knobs as a markdown table: name, type, default, description."""
    rows = ["| knob | type | default | description |", "| --- | --- | --- | --- |"]
    for knob in KNOBS.values():
        rows.append(f"| `{knob.name}` | {knob.type} | `{knob.default}` | {knob.doc} |")
    return "\n".join(rows) + "\n"
