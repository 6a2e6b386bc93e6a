"""The LLVM JIT: LLVM IR in, callable machine code for the host CPU out.

One process-wide :class:`JIT` (``get_jit()``) compiles for the host (its triple, CPU name and
features, so AVX-512 is used where present). ``compile_module`` takes an ``llvmlite.ir.Module``
(or its text), verifies it, optimizes it at -O3 with LLVM's new pass manager, turns it into
object code and loads that into an MCJIT execution engine of its own. Object code is the one
path for every kernel: a kernel compiled now and one read back from the on-disk cache
(:mod:`.cache`) are loaded the same way, so a second process skips LLVM's optimizer and code
generator altogether.

Every function a module defines with external linkage gets a unique symbol (its name plus the
first hex digits of the kernel's cache key), so a module's object code is the same whichever
process loads it. ``CompiledModule`` maps the names back: ``address("vadd")``,
``function("vadd", argtypes)``.

Memory: the JIT keeps the ``RB_KERNEL_CACHE_SIZE`` most recently used modules loaded (a
repeated ``compile_module`` returns the same object). A module pushed out of that set stays
loaded exactly as long as something refers to it (a kernel, a ``function`` callable, a built
graph module); when the last reference goes, its engine is disposed and its machine code
freed, which one engine per module makes possible (MCJIT frees code only with its engine).
Asked for again, it is read back from the disk cache. An ``address`` is valid only while its
module is referred to.

The vectorizer on x86 prefers 256-bit vectors unless a function asks for more;
:func:`prefer_vector_width` adds the ``"prefer-vector-width"="512"`` attribute to an
``llvmlite.ir.Function``. ``source("llvm")`` shows the optimized IR and ``source("asm")`` the
assembly, where 512-bit registers appear as ``zmm``.

Example (needs llvmlite, the ``llvm`` extra)::

    >>> from llvmlite import ir
    >>> mod = ir.Module("demo")
    >>> fn = ir.Function(mod, ir.FunctionType(ir.IntType(64), [ir.IntType(64)]), "twice")
    >>> b = ir.IRBuilder(fn.append_basic_block("entry"))
    >>> _ = b.ret(b.mul(fn.args[0], ir.Constant(ir.IntType(64), 2)))
    >>> import ctypes
    >>> compiled = compile_module(mod, cache=False)
    >>> compiled.function("twice", [ctypes.c_int64], restype=ctypes.c_int64)(21)
    42
    >>> "ret i64" in compiled.source("llvm")
    True
"""

from __future__ import annotations

import ctypes
import functools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ... import config
from ...errors import CompileError
from .cache import CacheEntry, KernelCache, cache_key

__all__ = ["HostTarget", "JIT", "CompiledModule", "host_target", "get_jit", "compile_module",
           "prefer_vector_width", "known_cpus", "INT8_PATHS", "int8_path"]

_SOURCE_KINDS = ("llvm", "asm")


def _binding():
    """``llvmlite.binding``, initialized once for the native target; a clear error if absent."""
    try:
        import llvmlite.binding as llvm
    except ImportError:
        raise ImportError("the LLVM backend needs llvmlite: install the extra with "
                          "`pip install 'relaybench[llvm]'`") from None
    with _init_lock:
        global _initialized
        if not _initialized:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _initialized = True
    return llvm


_init_lock = threading.Lock()
_initialized = False


@dataclass(frozen=True)
class HostTarget:
    """The host as LLVM sees it: triple, CPU name and features (``+avx512f,...``)."""

    triple: str
    cpu: str
    features: str

    def create_target_machine(self):
        """A new target machine for the host (-O3, JIT code model).

        An MCJIT engine takes ownership of the machine it is given, so each user makes its own.
        """
        llvm = _binding()
        return llvm.Target.from_triple(self.triple).create_target_machine(
            cpu=self.cpu, features=self.features, opt=3, jit=True)

    @property
    def identity(self) -> str:
        """What compiled code depends on; part of every cache key."""
        return f"{self.triple}/{self.cpu}/{self.features}"

    @functools.cached_property
    def has_avx512(self) -> bool:
        return "+avx512f" in self.features.split(",")


#: The ways an int8 dot product (four ``8-bit x 8-bit`` products summed into an ``int32``
#: lane, :class:`~relaybench.te.loop_ir.DotSum`) can be computed, best first, with the host
#: features each needs: AVX-512 VNNI's ``vpdpbusd`` (``u8 x s8``; 256- and 128-bit forms need
#: AVX-512VL), the operands widened to int16 and multiplied in pairs by ``vpmaddwd`` on 512-bit
#: (AVX-512BW) or 256-bit (AVX2) registers, or plain widening multiplies and adds.
INT8_PATHS = {
    "vnni": ("+avx512vnni", "+avx512bw", "+avx512vl"),
    "avx512bw": ("+avx512bw",),
    "avx2": ("+avx2",),
    "generic": (),
}


def int8_path() -> str:
    """The int8 dot-product path kernels compiled now use: ``RB_X86_INT8`` when it names one
    (the host must have its features), else (``auto``) the best the host's features allow.
    Chosen from the features LLVM reports for the host, never from the CPU's name."""
    choice = config.get("RB_X86_INT8").lower()
    features = set(host_target().features.split(","))
    if choice == "auto":
        return next(path for path, needs in INT8_PATHS.items() if features.issuperset(needs))
    if choice not in INT8_PATHS:
        raise CompileError(f"RB_X86_INT8={choice!r}: expected auto or one of "
                           f"{', '.join(INT8_PATHS)}")
    missing = sorted(set(INT8_PATHS[choice]) - features)
    if missing:
        raise CompileError(f"RB_X86_INT8={choice}: this host's CPU lacks {', '.join(missing)}")
    return choice


_host: HostTarget | None = None
_host_lock = threading.Lock()


def host_target() -> HostTarget:
    """The process's :class:`HostTarget`, made on first use."""
    global _host
    llvm = _binding()
    with _host_lock:
        if _host is None:
            _host = HostTarget(llvm.get_process_triple(), llvm.get_host_cpu_name(),
                               llvm.get_host_cpu_features().flatten())
        return _host


_cpus: frozenset | None = None


def known_cpus() -> frozenset:
    """The CPU names LLVM knows for the host's target (``znver4``, ``haswell``, ...).

    llvmlite has no call that lists them; LLVM prints the list on stderr when a target machine
    is made for the CPU ``help``. That is done once, with file descriptor 2 sent to a temporary
    file meanwhile (other threads' writes to stderr in that moment land there too).
    """
    global _cpus
    llvm = _binding()
    with _host_lock:
        if _cpus is None:
            _cpus = frozenset(_parse_cpu_help(_captured_stderr(
                lambda: llvm.Target.from_triple(llvm.get_process_triple())
                .create_target_machine(cpu="help"))))
        return _cpus


def _captured_stderr(fn) -> str:
    """What ``fn()`` writes to file descriptor 2 (LLVM writes there, not to ``sys.stderr``)."""
    import os
    import sys
    import tempfile
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        try:
            os.dup2(sink.fileno(), 2)
            fn()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        return sink.read().decode("utf-8", "replace")


def _parse_cpu_help(text: str) -> list[str]:
    """The names in LLVM's ``Available CPUs for this target:`` listing (``  name - text``)."""
    names, listing = [], False
    for line in text.splitlines():
        if line.startswith("Available CPUs"):
            listing = True
        elif line.startswith("Available"):
            listing = False
        elif listing and line.startswith("  ") and " - " in line:
            names.append(line.split()[0])
    return names


def prefer_vector_width(function, bits: int = 512) -> None:
    """Ask LLVM to vectorize ``function`` (an ``llvmlite.ir.Function``) with ``bits``-wide vectors.

    llvmlite's attribute set accepts only LLVM's keyword attributes, so the set is swapped for
    one that also takes quoted string attributes (``"key"="value"``); its printing is unchanged.
    """
    attrs = function.attributes
    cls = _string_attribute_set()
    if not isinstance(attrs, cls):
        new = cls()
        for name in attrs:
            new.add(name)
        new.alignstack = attrs.alignstack
        new.personality = attrs.personality
        function.attributes = attrs = new
    for name in [a for a in attrs if a.startswith('"prefer-vector-width"')]:
        attrs.discard(name)
    attrs.add(f'"prefer-vector-width"="{int(bits)}"')


@functools.cache
def _string_attribute_set():
    from llvmlite.ir.values import FunctionAttributes

    class FunctionAttributesWithStrings(FunctionAttributes):
        """LLVM's keyword function attributes, plus quoted string ones (``"key"="value"``)."""

        def add(self, name):
            if name.startswith('"'):
                return set.add(self, name)
            return super().add(name)

    return FunctionAttributesWithStrings


def _dispose_engine(engine) -> None:
    engine.close()


class CompiledModule:
    """One module's machine code, in an MCJIT engine of its own.

    ``origin`` is ``"compiled"`` (LLVM ran in this process) or ``"disk"`` (object code read from
    the kernel cache); a repeated ``compile_module`` call in the same process returns the very
    same object while it is loaded. ``key`` is the cache key. The engine, and with it the
    machine code, is disposed when the object is garbage (``loaded`` tells until then).
    """

    def __init__(self, jit: JIT, key: str, origin: str, entry: CacheEntry,
                 addresses: dict[str, int], engine=None):
        self._jit = jit
        self.key = key
        self.origin = origin
        self._entry = entry
        self._addresses = addresses
        self._asm: str | None = None
        self._release = None
        if engine is not None:
            self._release = weakref.finalize(self, _dispose_engine, engine)
            self._release.atexit = False  # daemon threads may still run it while Python exits

    @property
    def loaded(self) -> bool:
        """Whether the machine code is still in memory (always, while this object exists)."""
        return self._release is None or self._release.alive

    @property
    def function_names(self) -> list[str]:
        return sorted(self._addresses)

    def symbol(self, name: str) -> str:
        """The unique symbol of function ``name`` in the engine."""
        self._check_name(name)
        return self._entry.symbols[name]

    def address(self, name: str) -> int:
        """The machine address of function ``name``; valid while this module is referred to."""
        self._check_name(name)
        return self._addresses[name]

    def function(self, name: str, argtypes: Sequence[Any], restype: Any = None):
        """A ctypes callable for ``name`` (a CFUNCTYPE: calls release the GIL).

        The callable keeps this module, and so the engine holding its machine code, alive.
        """
        callable_ = ctypes.CFUNCTYPE(restype, *argtypes)(self.address(name))
        callable_.compiled_module = self
        return callable_

    def source(self, kind: str = "llvm") -> str:
        """``"llvm"``: the optimized LLVM IR; ``"asm"``: the host assembly."""
        if kind == "llvm":
            return self._entry.llvm_ir
        if kind == "asm":
            if self._asm is None:
                llvm = _binding()
                module = llvm.parse_assembly(self._entry.llvm_ir)
                with self._jit.lock:
                    self._asm = self._jit.machine.emit_assembly(module)
            return self._asm
        raise ValueError(f"unknown source kind {kind!r}; known kinds: {', '.join(_SOURCE_KINDS)}")

    def _check_name(self, name: str) -> None:
        if name not in self._addresses:
            raise KeyError(f"module {self.key[:12]} defines no function {name!r}; it defines "
                           f"{', '.join(self.function_names) or 'nothing'}")

    def __repr__(self) -> str:
        return (f"CompiledModule({', '.join(self.function_names)}; key={self.key[:12]}, "
                f"origin={self.origin})")


class JIT:
    """The host's -O3 pipeline, the kernel cache, and the loaded modules.

    ``stats`` counts ``compiled`` (LLVM ran), ``from_disk`` (loaded from the cache),
    ``from_memory`` (the same key loaded earlier in this process and still loaded) and
    ``evicted`` (modules pushed out of the ``RB_KERNEL_CACHE_SIZE`` most recently used; each is
    freed when nothing else refers to it). ``cached`` is how many modules the JIT itself holds,
    ``loaded`` how many are in memory (those, plus the evicted ones still in use).
    """

    def __init__(self, cache: KernelCache | None = None):
        _binding()
        self.target = host_target()
        self.cache = cache if cache is not None else KernelCache()
        self.lock = threading.RLock()
        self.machine = self.target.create_target_machine()  # optimizes and emits code
        self._recent: OrderedDict[str, CompiledModule] = OrderedDict()  # least recent first
        self._loaded: weakref.WeakValueDictionary[str, CompiledModule] = \
            weakref.WeakValueDictionary()
        self.stats = {"compiled": 0, "from_disk": 0, "from_memory": 0, "evicted": 0}
        self._fresh: dict[str, tuple] = {}  # key -> (CacheEntry, seconds) from compile_ahead

    @property
    def cached(self) -> int:
        return len(self._recent)

    @property
    def loaded(self) -> int:
        return len(self._loaded)

    def compile_module(self, module, *, key: str | None = None, cache: bool = True,
                       name: str = "module") -> CompiledModule:
        """Compile ``module`` (an ``llvmlite.ir.Module`` or LLVM IR text, or with a ``key`` a
        function that makes one) and load it.

        ``key`` replaces the IR text in the cache key when the caller has a better name for the
        kernel (printed loop IR, say); ``module`` may then be a function called only when the
        module must be compiled. ``cache=False`` neither reads nor writes the disk cache.
        ``name`` names the module in error messages. Raises :class:`CompileError` when LLVM
        rejects the IR.
        """
        # making and printing a module is most of a build whose kernels are all cached: with a
        # key, the module is made and printed only when it must be compiled
        if key is None and callable(module):
            raise TypeError("compile_module: a module made on demand needs a key")
        text = str(module) if key is None else None
        digest = cache_key(text if key is None else key, self.target.identity)
        with self.lock:
            known = self._from_memory(digest)
            if known is not None:
                return known
            fresh = self._fresh.pop(digest, None)  # compiled by compile_ahead
            entry = fresh[0] if fresh is not None else (self.cache.load(digest) if cache else None)
            origin = "disk" if fresh is None else "compiled"
            if entry is None:
                if text is None:
                    text = str(module() if callable(module) else module)
                entry = self._compile(text, digest, name)
                origin = "compiled"
                if cache:
                    self.cache.store(digest, entry)
            engine, addresses = self._load(entry, name)
            self.stats["compiled" if origin == "compiled" else "from_disk"] += 1
            compiled = CompiledModule(self, digest, origin, entry, addresses, engine)
            if fresh is not None:
                compiled.llvm_seconds = fresh[1]  # spent by compile_ahead, not in this call
            self._loaded[digest] = compiled
            self._remember(compiled)
        if config.get("RB_DEBUG") >= 4:
            print(f"; {name}: {compiled!r}\n{entry.llvm_ir}")
        return compiled

    def load_cached(self, digest: str, name: str = "module") -> CompiledModule | None:
        """The module whose cache key is ``digest`` (a :attr:`CompiledModule.key`) when this
        process has it loaded or the disk cache holds it, else None: it never compiles."""
        with self.lock:
            known = self._from_memory(digest)
            if known is not None:
                return known
            entry = self.cache.load(digest)
            if entry is None:
                return None
            engine, addresses = self._load(entry, name)
            self.stats["from_disk"] += 1
            compiled = CompiledModule(self, digest, "disk", entry, addresses, engine)
            self._loaded[digest] = compiled
            self._remember(compiled)
        return compiled

    def _from_memory(self, digest: str) -> CompiledModule | None:
        """The module of ``digest`` if this process has it loaded (counted, made most recent)."""
        known = self._loaded.get(digest)
        if known is not None:
            self.stats["from_memory"] += 1
            self._remember(known)
        return known

    def _compile(self, text: str, digest: str, name: str) -> CacheEntry:
        llvm = _binding()
        try:
            from .compile_worker import compile_object
            obj, optimized, symbols = compile_object(llvm, self.machine, self.target.triple,
                                                     text, digest)
        except RuntimeError as err:
            raise CompileError(f"LLVM rejected module {name!r}: {err}") from None
        return CacheEntry(obj, optimized, symbols)

    def compile_ahead(self, jobs: Sequence[tuple], *, cache: bool = True,
                      stream: "CompileStream | None" = None) -> dict:
        """Compile the modules of ``jobs`` that are neither loaded nor in the disk cache, on
        several cores at once, ahead of the :meth:`compile_module` calls that will ask for them.

        Each job is ``(module, key, name)`` as :meth:`compile_module` takes them (``module`` may
        be a function making the module). The object code waits in this JIT until
        ``compile_module`` is called with the same key (it then counts as ``compiled``, its
        origin ``"compiled"``) and, with ``cache``, is in the disk cache at once. Fewer than 3
        modules to compile, or one core, compile nothing here (the calls compile them one by
        one). A module whose making or compiling fails is left to its ``compile_module`` call,
        which raises the error naming it. ``stream`` (from :meth:`stream`) is a pool fed
        already: ``jobs`` join what it compiles, ahead of what it has not started, and this
        call ends it. Returns ``{key: LLVM seconds}`` of those compiled.
        """
        from .compile_worker import WorkerPool, worker_count
        todo, seen = [], set()
        with self.lock:
            for module, key, name in jobs:
                digest = cache_key(key, self.target.identity)
                if digest in seen or digest in self._loaded or digest in self._fresh:
                    continue
                if stream is not None and digest in stream.keys:
                    continue
                seen.add(digest)
                if cache and self.cache.path(digest).exists():
                    continue
                todo.append((module, key, name, digest))
        if stream is None:
            workers = worker_count(len(todo))
            if workers == 0:
                return {}
            pool = WorkerPool(self._compile_here, self._host(), workers)
        else:
            pool = stream.pool
            pool.add_helpers(worker_count(len(todo), busy=pool.helpers))
        keys = {digest: key for _, key, _, digest in todo}
        if stream is not None:
            keys.update(stream.keys)
        texts = [((lambda m=module: str(m() if callable(m) else m)), digest, name)
                 for module, key, name, digest in todo]
        # a stream's pool runs helpers already: the rest goes ahead of what they have not started
        done = pool.run(texts, first=stream is not None)
        seconds = {}
        for digest, (value, spent) in done.items():
            entry = CacheEntry(*value)
            if cache:
                self.cache.store(digest, entry)
            with self.lock:
                self._fresh[digest] = (entry, spent)
            seconds[keys[digest]] = spent
        return seconds

    def stream(self, *, cache: bool = True) -> "CompileStream | None":
        """A pool compiling modules in a helper process while the caller goes on
        (:meth:`CompileStream.submit`), when a helper was started ahead
        (:func:`.compile_worker.prestart`: a core was idle); else None. A build lowering its
        groups hands it each kernel that will have a module of its own as soon as it is
        lowered; :meth:`compile_ahead` with ``stream=`` adds the rest and ends it."""
        from .compile_worker import WorkerPool, has_spare
        if not has_spare():
            return None
        pool = WorkerPool(self._compile_here, self._host())
        pool.add_helpers(1)
        return CompileStream(self, pool, cache)

    def _compile_here(self, text, digest, name):
        with self.lock:
            from .compile_worker import compile_object
            return compile_object(_binding(), self.machine, self.target.triple, text, digest)

    def _host(self) -> tuple:
        return (self.target.triple, self.target.cpu, self.target.features)

    def _remember(self, compiled: CompiledModule) -> None:
        """Make ``compiled`` the most recently used; let go of the least recently used beyond
        ``RB_KERNEL_CACHE_SIZE`` (read now, so a ``config.Context`` applies)."""
        recent = self._recent
        recent[compiled.key] = compiled
        recent.move_to_end(compiled.key)
        limit = config.get("RB_KERNEL_CACHE_SIZE")
        while len(recent) > limit:
            recent.popitem(last=False)
            self.stats["evicted"] += 1

    def _load(self, entry: CacheEntry, name: str):
        """A new engine holding ``entry``'s object code, and its functions' addresses."""
        llvm = _binding()
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""),
                                            self.target.create_target_machine())
        try:
            engine.add_object_file(llvm.ObjectFileRef.from_data(entry.object_code))
            engine.finalize_object()
            addresses = {}
            for original, symbol in entry.symbols.items():
                address = engine.get_function_address(symbol)
                if not address:
                    raise CompileError(f"module {name!r}: symbol {symbol!r} (function "
                                       f"{original!r}) not found after loading its object code")
                addresses[original] = address
        except BaseException:
            engine.close()
            raise
        return engine, addresses


class CompileStream:
    """Modules compiled in helper processes as they are handed over (:meth:`JIT.stream`)."""

    def __init__(self, jit: JIT, pool, cache: bool):
        self.jit = jit
        self.pool = pool
        self.cache = cache
        self.keys: dict = {}   # digest -> key of the modules handed over

    def submit(self, module, key: str, name: str) -> None:
        """Make ``module``'s text now (a function making the module, or the module) and queue
        it, unless it is loaded, in the disk cache, or handed over already. A module that
        cannot be made is left to its :meth:`JIT.compile_module` call, which raises the error."""
        jit = self.jit
        digest = cache_key(key, jit.target.identity)
        with jit.lock:
            if digest in self.keys or digest in jit._loaded or digest in jit._fresh:
                return
        if self.cache and jit.cache.path(digest).exists():
            return
        try:
            text = str(module() if callable(module) else module)
        except Exception:
            return
        self.keys[digest] = key
        self.pool.put(text, digest, name)

    def abandon(self) -> None:
        """Stop: the build failed (the helper closes after the module it is compiling)."""
        self.pool.abandon()


_jit: JIT | None = None
_jit_lock = threading.Lock()


def get_jit() -> JIT:
    """The process-wide :class:`JIT`, made on first use."""
    global _jit
    with _jit_lock:
        if _jit is None:
            _jit = JIT()
        return _jit


def compile_module(module, **options) -> CompiledModule:
    """``get_jit().compile_module(module, **options)``: see :meth:`JIT.compile_module`."""
    return get_jit().compile_module(module, **options)
