"""The lowering cache: what a build needs from a fused group's lowering, kept per group so that
a build whose kernels are cached neither lowers its groups nor prints their loop IR.

TVM's compile engine keeps the lowered function of each (fused function, target) in memory; this
cache does the same and also keeps, on disk under ``RB_CACHE_DIR/groups``, a small manifest per
group: the kernel's parameters and phases, the key of its object code in the LLVM kernel cache,
the group's input and output types, anchor, pattern, rule and flop count. A build that finds a
group's manifest loads the object code and makes the kernel straight away; the loop IR is
lowered again only when something asks for it (``lib.kernels[i].source("loops")``), and is then
checked against the compiled kernel's.

The key (:func:`group_key`) holds everything a lowering depends on: the group's structure with
its tensor constants reduced to dtype and shape (they reach the kernel as arguments; scalars,
which are written into the code, count by value), the kernel's name, the target and the host CPU,
the knobs that steer the strategies (``RB_WINOGRAD``, ``RB_X86_INT8``, ``RB_AUTOTUNE_LOG`` and
the tuning logs' modification times), and a digest of the sources of the layers that lower
(operators, tensor expressions, strategies, code generation), so a changed compiler never reads
an old manifest. The cache steps aside (no key) for a target other than ``llvm``, inside a
tuning dispatch context (``apply_history_best``, ``ApplyConfig``), while a user's operator
attribute is registered above level 0, and when ``RB_LOWERING_CACHE=off``.

>>> import numpy as np, relaybench as rb
>>> from relaybench import op
>>> from relaybench.backends.target import Target
>>> x = rb.var("x", shape=(4, 8))
>>> fused = rb.passes.optimize(rb.IRModule.from_expr(rb.Function([x], op.nn.relu(x))), 2)
>>> group = fused["main"].body.op
>>> key = group_key(group, "fused_nn_relu", Target.parse("llvm"))
>>> len(key), key == group_key(group, "fused_nn_relu", Target.parse("llvm"))
(64, True)
>>> with rb.config.Context(RB_LOWERING_CACHE="off"):
...     group_key(group, "fused_nn_relu", Target.parse("llvm")) is None
True
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict

from .. import config
from .disk_cache import DiskCache, sources_digest

__all__ = ["GroupCache", "group_key", "key_prefix", "get_group_cache", "MANIFEST_FORMAT"]

MANIFEST_FORMAT = 1

#: knobs that change what a strategy chooses (the others change where things are kept or how
#: they run, not a kernel's code)
LOWERING_KNOBS = ("RB_WINOGRAD", "RB_X86_INT8", "RB_AUTOTUNE_LOG", "RB_GPU_CONV",
                  "RB_GPU_VECTOR")

#: the parts of the package a lowering or its code generation depends on
_SOURCES = ("op", "te", "ir", "autotune", "quantize", "backends/strategy", "backends/llvm",
            "backends/lowering.py", "backends/target.py", "backends/build.py",
            "backends/group_cache.py")

_lock = threading.Lock()


def _steps_aside(target) -> bool:
    mode = str(config.get("RB_LOWERING_CACHE")).lower()
    if mode not in ("on", "off"):
        raise ValueError(f"RB_LOWERING_CACHE={mode!r}: the lowering cache is 'on' or 'off'")
    if target.kind != "llvm" or mode == "off":
        return True
    from ..autotune.dispatch import current_context
    if current_context() is not None:
        return True
    from ..op.registry import has_user_registrations
    return has_user_registrations()


def key_prefix(target) -> str | None:
    """What every group's key for ``target`` holds besides the group (the format, the sources,
    the target and host, the knobs, the tuning logs' stamps), or None where the cache steps
    aside: a build works it out once for all its groups (:func:`group_key`'s ``prefix``)."""
    if _steps_aside(target):
        return None
    from ..autotune.dispatch import _knob_logs_stamp
    from .llvm.jit import host_target
    knobs = [(k, str(config.get(k))) for k in LOWERING_KNOBS]
    return "\n".join((f"format={MANIFEST_FORMAT}", sources_digest(_SOURCES), str(target),
                      host_target().identity, repr(knobs), repr(_knob_logs_stamp())))


def group_key(func, name: str, target, prefix=False) -> str | None:
    """The cache key of the lowering of ``func`` (a Primitive function) named ``name`` for
    ``target``, or None where the cache steps aside (see the module). ``prefix`` is
    :func:`key_prefix` of ``target`` when the caller has it already."""
    if prefix is False:
        prefix = key_prefix(target)
    if prefix is None:
        return None
    from ..ir.structural import structural_hash
    text = f"{prefix}\n{name}\n{structural_hash(func, constant_data=False)}"
    return hashlib.sha256(text.encode()).hexdigest()


class GroupCache(DiskCache):
    """Manifests (JSON) by :func:`group_key`, in memory (the ``RB_KERNEL_CACHE_SIZE`` most
    recent) and on disk under ``RB_CACHE_DIR/groups``."""

    subdir = "groups"
    suffix = ".json"

    def __init__(self, directory=None):
        super().__init__(directory)
        self._memory: OrderedDict[str, dict] = OrderedDict()

    def load(self, key: str) -> dict | None:
        with _lock:
            found = self._memory.get(key)
            if found is not None:
                self._memory.move_to_end(key)
                self.stats["hits"] += 1
                return found
        data = self.read(key)
        if data is None:
            return None
        try:
            manifest = json.loads(data.decode("utf-8"))
            if manifest.get("format") != MANIFEST_FORMAT:
                raise ValueError(f"format {manifest.get('format')!r}, not {MANIFEST_FORMAT}")
        except (ValueError, UnicodeDecodeError, AttributeError) as err:
            self.discard(key, f"not a manifest: {err}")
            return None
        self.stats["hits"] += 1
        self._keep(key, manifest)
        return manifest

    def store(self, key: str, manifest: dict) -> None:
        manifest = dict(manifest, format=MANIFEST_FORMAT)
        self.write(key, json.dumps(manifest, sort_keys=True).encode("utf-8"))
        self._keep(key, manifest)

    def forget(self) -> None:
        """Empty the memory (the disk keeps its entries)."""
        with _lock:
            self._memory.clear()

    def _keep(self, key: str, manifest: dict) -> None:
        with _lock:
            self._memory[key] = manifest
            self._memory.move_to_end(key)
            limit = max(16, config.get("RB_KERNEL_CACHE_SIZE"))
            while len(self._memory) > limit:
                self._memory.popitem(last=False)


_cache: GroupCache | None = None


def get_group_cache() -> GroupCache:
    """The process-wide :class:`GroupCache`."""
    global _cache
    with _lock:
        if _cache is None:
            _cache = GroupCache()
        return _cache
