"""The build cache: the optimized module of a build, kept on disk so that building the same
program again skips the passes.

A build spends most of its time, once its kernels are cached, in the default pipeline: type
inference after each pass, and FoldConstant computing the weights the kernels read (each layer's
weights in the blocked layout of its kernel, scale factors folded in, Winograd's transformed
weights, four times the size of the 3x3 ones). Those depend only on the program, its constants
and the settings, so :func:`relaybench.build` keeps the pipeline's result under
``RB_CACHE_DIR/builds``, one file per key:

    b"RBBUILD\\0" | format (u32) | header length (u32) | header (JSON) | constants

The header holds the optimized module as Relay text whose tensor constants are
``meta[relay.Constant][i]``, the source positions of its nodes (so errors still name the user's
text), and where each constant's bytes lie (64-byte aligned). A build that finds its key reads
the text back and maps the constants from the file (``mmap``, read-only): the weights come from
the page cache without a copy. The VM's compiler (:func:`relaybench.vm.compile`, and the AoT
compiler through it) uses the same cache for its optimized module.

The key (:func:`build_key`) holds what the pipeline's result depends on: the program's structure
(:func:`~relaybench.ir.structural.structural_hash` with constants by dtype and shape) and the
SHA-1 of every tensor constant's bytes, the opt level, the required and disabled passes, the
pass configuration, the default pipeline's passes, the target and the host CPU (layouts follow
the host's registers), the knobs and tuning logs the strategies read, and a digest of the
compiler's sources. The cache steps aside (no key) when ``RB_BUILD_CACHE=off``, when the build
has pass instruments (they are there to watch the passes run), inside a tuning dispatch context,
while a user's operator attribute is registered or a user's pass is registered under the name of
one of the default pipeline's, when a configuration value is not plain data, and for a
program of more than :data:`MAX_NODES` nodes (reading its text back would cost about what its
passes do). An entry is stored only when its text reads back to the same module
(:func:`~relaybench.ir.structural.structural_equal`, with the same nodes one for one and every
variable of the same name); entries beyond ``RB_BUILD_CACHE_MB``
(least recently used first) are removed, and a module larger than a quarter of that is not kept.
``rb.build`` writes a new entry's file from a thread of its own while its kernels compile (the
writes release the GIL) and waits for it before it returns.

>>> import numpy as np, tempfile, relaybench as rb
>>> from relaybench.backends.target import Target
>>> x = rb.var("x", shape=(2, 3))
>>> mod = rb.IRModule.from_expr(rb.Function([x], x * rb.const(np.full((2, 3), 2.0, "float32"))))
>>> key = build_key(mod, {}, Target.parse("llvm"), 3, (), (), {})
>>> len(key), key == build_key(mod, {}, Target.parse("llvm"), 2, (), (), {})
(64, False)
>>> cache = BuildCache(tempfile.mkdtemp())
>>> optimized = rb.passes.optimize(mod, 3)
>>> cache.store(key, optimized)
True
>>> again = cache.load(key)
>>> rb.ir.structural_equal(again, optimized), cache.stats["hits"]
(True, 1)
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import mmap
import os
import struct
import threading

import numpy as np

from .. import config
from .disk_cache import DiskCache, sources_digest

__all__ = ["BuildCache", "build_key", "get_build_cache", "BUILD_FORMAT"]

BUILD_FORMAT = 1
_MAGIC = b"RBBUILD\0"
_HEAD = struct.Struct("<8sII")       # magic, format, header length
_ALIGN = 64

#: the parts of the package the default pipeline's result depends on
_SOURCES = ("op", "te", "ir", "autotune", "quantize", "passes", "backends", "config.py")

_lock = threading.Lock()


def _plain(value) -> bool:
    """Whether ``value`` is data whose ``repr`` names it in every process."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def _steps_aside(mod, instruments, pass_config) -> bool:
    mode = str(config.get("RB_BUILD_CACHE")).lower()
    if mode not in ("on", "off"):
        raise ValueError(f"RB_BUILD_CACHE={mode!r}: the build cache is 'on' or 'off'")
    if mode == "off" or instruments:
        return True
    if not _plain(dict(pass_config or {})):
        return True
    if _larger_than(mod, MAX_NODES):
        return True
    from ..autotune.dispatch import current_context
    if current_context() is not None:
        return True
    from ..op.registry import has_user_registrations
    return has_user_registrations() or _a_default_pass_replaced()


def _a_default_pass_replaced() -> bool:
    """Whether a pass of the default pipeline is registered from outside the package (a user's
    pass under a default pass's name: the sources' digest does not see it). No pass can have
    been registered before the pass infrastructure is imported; a cached build does not import
    it."""
    import sys
    if "relaybench.passes.infra" not in sys.modules:
        return False
    from ..passes.infra import _REGISTRY
    from ..passes.pipelines import DEFAULT_PASSES
    for name, _ in DEFAULT_PASSES:
        entry = _REGISTRY.get(name)       # not imported yet: the package's, once it is
        if entry is not None and not str(getattr(entry.factory, "__module__", "")).startswith(
                "relaybench."):
            return True
    return False


#: a program of more nodes than this is not kept: reading it back (parsing and typing its text)
#: costs about what its passes do, and keeping it (printing, reading back to check) more
MAX_NODES = 50_000


def _larger_than(mod, limit: int) -> bool:
    """Whether ``mod``'s functions hold more than ``limit`` distinct nodes (counted only up to
    the limit)."""
    from ..ir.expr import expr_children
    seen: set = set()
    for gv in mod.functions:
        stack = [mod[gv]]
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if len(seen) > limit:
                return True
            stack.extend(expr_children(node))
    return False


def _tensor_constants(mod) -> list:
    """The module's constants of rank 1 or more, each once, in a fixed order (functions by name,
    then post-order)."""
    from ..ir.expr import Constant
    seen: set = set()
    out = []
    for node in _nodes(mod):
        if type(node) is Constant and node.data.ndim and id(node) not in seen:
            seen.add(id(node))
            out.append(node)
    return out


def build_key(mod, params, target, opt_level: int, required_pass, disabled_pass, pass_config,
              instruments=(), purpose: str = "graph") -> str | None:
    """The cache key of what :func:`relaybench.build` optimizes ``mod`` (an :class:`IRModule`)
    into with ``params`` (name -> array, bound into ``@main``) and these settings, or None where
    the cache steps aside (see the module). ``purpose`` names the compiler the result is for
    (``graph``, ``vm``): they prepare a module differently before the pipeline."""
    if _steps_aside(mod, instruments, pass_config):
        return None
    from ..autotune.dispatch import _knob_logs_stamp
    from ..ir.structural import structural_hash
    from .group_cache import LOWERING_KNOBS
    from .llvm.jit import host_target
    digest = hashlib.sha256()
    knobs = [(k, str(config.get(k))) for k in LOWERING_KNOBS]
    parts = (f"format={BUILD_FORMAT}", f"for={purpose}", sources_digest(_SOURCES), str(target),
             host_target().identity, repr(knobs), repr(_knob_logs_stamp()),
             f"opt_level={int(opt_level)}",
             repr(sorted(required_pass)), repr(sorted(disabled_pass)),
             repr(sorted(dict(pass_config or {}).items())), _default_passes(),
             str(structural_hash(mod, constant_data=False)))
    digest.update("\n".join(parts).encode())
    named = [(f"constant {i}", node.data) for i, node in enumerate(_tensor_constants(mod))]
    named += [(f"param {name}", np.asarray(value))
              for name, value in sorted((params or {}).items())]
    for (name, array), sha in zip(named, _sha1_all([a for _, a in named])):
        digest.update(f"\n{name}:{array.dtype.str}{array.shape}:".encode() + sha)
    return digest.hexdigest()


def _default_passes() -> str:
    """The default pipeline as the key names it: as shipped (the sources' digest holds it), or
    the passes a program set at run time. A cached build does not import the passes."""
    import sys
    pipelines = sys.modules.get("relaybench.passes.pipelines")
    if pipelines is None or pipelines.DEFAULT_PASSES == pipelines._SHIPPED_PASSES:
        return "default passes as shipped"
    return repr(pipelines.DEFAULT_PASSES)


def _sha1_all(arrays: list) -> list:
    """The SHA-1 of each array's bytes, on two threads when there are megabytes to hash
    (hashlib lets go of the interpreter while it hashes)."""
    out: list = [None] * len(arrays)
    total = sum(a.nbytes for a in arrays)
    order = sorted(range(len(arrays)), key=lambda i: -arrays[i].nbytes)
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    lanes = [[] for _ in range(2 if total > (8 << 20) and cores > 1 else 1)]
    loads = [0] * len(lanes)
    for i in order:                       # the largest first, each to the least loaded lane
        k = loads.index(min(loads))
        lanes[k].append(i)
        loads[k] += arrays[i].nbytes

    def work(lane):
        for i in lane:
            out[i] = hashlib.sha1(_bytes_of(arrays[i])).digest()

    helpers = [threading.Thread(target=work, args=(lane,)) for lane in lanes[1:]]
    for t in helpers:
        t.start()
    work(lanes[0])
    for t in helpers:
        t.join()
    return out


def _bytes_of(array: np.ndarray):
    """The bytes of ``array`` in C order, without a copy when it is contiguous."""
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return memoryview(array.reshape(-1).view(np.uint8))


def _pad(n: int) -> int:
    return -n % _ALIGN


def _nodes(mod) -> list:
    """Every node of every function of ``mod``, functions by name, each in post-order."""
    from ..ir.functor import post_order
    out: list = []
    for gv in sorted(mod.functions, key=lambda g: g.name_hint):
        out.extend(post_order(mod[gv]))
    return out


def _spans_of(mod, again):
    """The source positions of ``mod``'s nodes (``[[count, nodes], [index, source, line,
    column, end line, end column], ...]``, by :func:`_nodes`' order), or None when ``again``
    (``mod`` read back from its text) does not have the same nodes one for one: another
    count, another kind of node, or a variable of another name (a graph's inputs are named by
    them)."""
    from ..ir.expr import GlobalVar, Var
    mine, theirs = _nodes(mod), _nodes(again)
    if len(mine) != len(theirs):
        return None
    out: list = [[len(mine)]]
    for i, (a, b) in enumerate(zip(mine, theirs)):
        if type(a) is not type(b):
            return None
        if isinstance(a, (Var, GlobalVar)) and a.name_hint != b.name_hint:
            return None
        span = a.span
        if span is not None:
            out.append([i, span.source_name, span.line, span.column, span.end_line,
                        span.end_column])
    return out


def _put_spans(mod, spans: list) -> None:
    """Give ``mod``'s nodes the positions :func:`_spans_of` recorded (the parser gave them
    positions in the cache's text: those go)."""
    from ..ir.expr import Span
    nodes = _nodes(mod)
    if not spans or spans[0] != [len(nodes)]:
        raise ValueError(f"{len(nodes)} nodes read back, the header counts {spans[:1]}")
    at = {row[0]: Span(row[1], row[2], row[3], row[4], row[5]) for row in spans[1:]}
    for i, node in enumerate(nodes):
        node.with_span(at.get(i))


class BuildCache(DiskCache):
    """Optimized modules by :func:`build_key`, on disk under ``RB_CACHE_DIR/builds``."""

    subdir = "builds"
    suffix = ".rbbuild"

    def __init__(self, directory: str | os.PathLike | None = None):
        super().__init__(directory)
        self._pending: list[threading.Thread] = []    # background writes not yet done
        self._pending_lock = threading.Lock()

    def load(self, key: str):
        """The optimized module stored under ``key`` (typed), or None."""
        if self._pending:
            self.flush()
        path = self.path(key)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:         # none stored, or a folder that cannot be read
            self.stats["misses"] += 1
            return None
        try:
            size = os.fstat(fd).st_size
            if size < _HEAD.size:
                self.discard(key, "shorter than its header")
                return None
            buf = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        try:
            mod = self._decode(buf, size)
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, json.JSONDecodeError) as err:
            self.discard(key, f"not a build cache entry: {err}")
            return None
        try:
            os.utime(path)       # recently used: the last to be removed
        except OSError:
            pass
        self.stats["hits"] += 1
        return mod

    @staticmethod
    def _decode(buf, size: int):
        from ..errors import RelayError
        from ..ir.expr import Constant
        from ..ir.parser import parse
        from ..ir.type_infer import infer_module
        magic, fmt, head_len = _HEAD.unpack_from(buf, 0)
        if magic != _MAGIC:
            raise ValueError("wrong magic bytes")
        if fmt != BUILD_FORMAT:
            raise ValueError(f"format {fmt}, not {BUILD_FORMAT}")
        if _HEAD.size + head_len > size:
            raise ValueError("truncated header")
        header = json.loads(bytes(buf[_HEAD.size:_HEAD.size + head_len]).decode("utf-8"))
        if header["size"] != size:
            raise ValueError(f"{size} bytes, the header says {header['size']}")
        constants = []
        for spec in header["constants"]:
            dtype, shape = np.dtype(spec["dtype"]), tuple(spec["shape"])
            count = int(np.prod(shape, dtype=np.int64))
            if spec["offset"] + count * dtype.itemsize > size:
                raise ValueError("a constant beyond the end of the file")
            array = np.frombuffer(buf, dtype, count, spec["offset"]).reshape(shape)
            constants.append(Constant.of_readonly(array))
        try:
            mod = parse(header["text"], source_name="<build cache>",
                        init_meta_table={"relay.Constant": constants})
        except RelayError as err:
            raise ValueError(f"its text does not parse: {err}") from None
        _put_spans(mod, header["spans"])
        return infer_module(mod)

    def store(self, key: str, mod, background: bool = False) -> bool:
        """Keep ``mod`` (the pipeline's typed result) under ``key``; False when it is not kept
        (larger than a quarter of ``RB_BUILD_CACHE_MB``, its text does not read back to the
        same module, or the file cannot be written).

        With ``background``, the module is printed and checked now and its file written by a
        thread of its own (the writes release the GIL, so a build goes on compiling its kernels
        meanwhile); True then means the entry is on its way. :meth:`flush` waits for such
        writes, as :meth:`load` does first and Python does at exit; a write that fails leaves
        no entry (``last_write_error`` says why)."""
        from ..ir.parser import parse
        from ..ir.printer import module_text_and_constants
        from ..ir.structural import structural_equal
        from ..errors import RelayError
        limit = int(config.get("RB_BUILD_CACHE_MB")) << 20
        text, constants = module_text_and_constants(mod)
        arrays = [np.ascontiguousarray(c.data) for c in constants]
        if sum(a.nbytes for a in arrays) > limit // 4:
            return False
        try:
            again = parse(text, source_name="<build cache>",
                          init_meta_table={"relay.Constant": list(constants)})
        except RelayError:
            return False
        if not structural_equal(again, mod):
            return False
        spans = _spans_of(mod, again)
        if spans is None:
            return False
        specs, offset = [], 0
        for a in arrays:
            specs.append({"dtype": a.dtype.str, "shape": list(a.shape), "offset": offset})
            offset += a.nbytes + _pad(a.nbytes)
        # the header's own length decides where the constants start: fix it by iterating
        base = 0
        while True:
            header = {"text": text, "size": 0, "spans": spans, "constants": [
                dict(s, offset=s["offset"] + base) for s in specs]}
            header["size"] = base + offset
            head = json.dumps(header).encode("utf-8")
            start = _HEAD.size + len(head)
            start += _pad(start)
            if start == base:
                break
            base = start
        parts = [_HEAD.pack(_MAGIC, BUILD_FORMAT, len(head)), head,
                 b"\0" * (base - _HEAD.size - len(head))]
        for a in arrays:
            parts += [_bytes_of(a), b"\0" * _pad(a.nbytes)]
        if not background:
            return self._write_and_evict(key, parts, limit)
        # the caller's settings (RB_CACHE_DIR in a config.Context, say) hold in the thread too
        writer = threading.Thread(target=contextvars.copy_context().run,
                                  args=(self._write_and_evict, key, parts, limit),
                                  name=f"build-cache-{key[:12]}")
        with self._pending_lock:
            self._pending.append(writer)
        writer.start()   # not a daemon: Python waits for it at exit, so no entry is cut short
        return True

    def _write_and_evict(self, key: str, parts: list, limit: int) -> bool:
        try:
            if not self.write(key, parts):
                return False
            self._evict(limit)
            return True
        finally:
            with self._pending_lock:
                me = threading.current_thread()
                if me in self._pending:
                    self._pending.remove(me)

    def flush(self) -> None:
        """Wait for the entries :meth:`store` is writing in the background."""
        while True:
            with self._pending_lock:
                pending = list(self._pending)
            if not pending:
                return
            for writer in pending:
                writer.join()

    def _evict(self, limit: int) -> None:
        """Remove the least recently used entries while the folder holds more than ``limit``
        bytes."""
        entries = []
        try:
            with os.scandir(self.directory) as it:
                for e in it:
                    if e.name.endswith(self.suffix):
                        try:
                            st = e.stat()
                        except FileNotFoundError:
                            continue
                        entries.append((st.st_mtime_ns, st.st_size, e.path))
        except FileNotFoundError:
            return
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= limit:
                break
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            total -= size


_cache: BuildCache | None = None


def get_build_cache() -> BuildCache:
    """The process-wide :class:`BuildCache`."""
    global _cache
    with _lock:
        if _cache is None:
            _cache = BuildCache()
        return _cache
