"""``relaybench.build``: a module in, an executable :class:`~.graph_executor.GraphModule` out.

The steps, each timed in :attr:`GraphModule.compile_stats`:

1. the parameters given in ``params`` are bound into ``@main`` as constants;
2. Relay's default pipeline (:func:`relaybench.passes.pipelines.optimize`) runs at ``opt_level``
   inside a :class:`~relaybench.passes.PassContext`; its last pass, FuseOps, turns ``@main`` into
   calls of ``Primitive`` functions (at opt_level 0 every operator is a group of its own);
3. ``@main`` is read as a static dataflow graph (:func:`.graph_executor.extract_graph`);
4. every *distinct* fused group is lowered to loop IR (:func:`.lowering.lower_primitive`) and
   compiled (:func:`.llvm.build_kernel`, or :func:`.opencl.build_kernel` for an ``opencl``
   target) once: groups that are structurally equal
   (:func:`~relaybench.ir.structural.structural_equal`, as ResNet's repeated blocks are) share a
   kernel. A group holding an operator that has no compute runs on the host through the
   reference interpreter (a *host kernel*, listed in ``GraphModule.host_groups``).

The passes run with the target in the PassContext's ``config["relay.target"]``, so that
AlterOpLayout and Legalize apply the target's own policies: ``llvm`` blocks convolutions into
``NCHW{x}c``, ``opencl`` keeps ``NCHW``. For an ``opencl`` target the module is an
:class:`.opencl.graph.OpenCLGraphModule`, its memory plan on the device.

>>> import numpy as np, relaybench as rb
>>> from relaybench import op
>>> x = rb.var("x", shape=(2, 8))
>>> mod = rb.IRModule.from_expr(rb.Function([x], op.nn.relu(x * rb.const(2.0))))
>>> graph = rb.build(mod, opt_level=3)
>>> [k.name for k in graph.kernels]
['fused_multiply_nn_relu']
>>> graph.run(x=np.full((2, 8), -1.5, "float32"))[0, :3]
array([0., 0., 0.], dtype=float32)
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

import numpy as np

from .._gc import gc_paused
from ..errors import CompileError, RelayError
from ..ir.expr import Call, Function, Op
from ..ir.functor import post_order
from ..ir.module import IRModule
from ..ir.types import TensorType
from .target import Target

__all__ = ["build", "GroupKernel", "HostKernel", "CompileStats", "compile_groups", "flatten_result"]


@dataclass
class CompileStats:
    """Where a build's time went, and where its kernels came from.

    ``llvm_compiled`` counts modules LLVM compiled in this build (``opencl_compiled`` the
    OpenCL programs the driver compiled), ``from_disk`` those read back from the kernel cache
    (``RB_CACHE_DIR``), ``from_memory`` those this process had compiled already;
    ``lowerings_cached`` the groups that were not lowered, their lowering read from the lowering
    cache (:mod:`.group_cache`); ``llvm_shared`` the kernels compiled into one module with others
    because they have phases in common (:func:`.llvm.codegen.share_phases`: the module counts
    once in ``llvm_compiled``, its other kernels in ``from_memory``).
    """

    optimize_seconds: float = 0.0
    lower_seconds: float = 0.0
    compile_seconds: float = 0.0
    total_seconds: float = 0.0
    groups: int = 0            # calls of fused groups in @main
    kernels: int = 0           # distinct groups, each compiled once
    host_kernels: int = 0      # groups run through the reference interpreter
    llvm_compiled: int = 0
    from_disk: int = 0
    from_memory: int = 0
    lowerings_cached: int = 0  # groups whose lowering came from the lowering cache
    llvm_shared: int = 0       # kernels compiled into a module shared with others (common phases)
    optimize_cached: bool = False  # the optimized module came from the build cache
    opencl_compiled: int = 0
    accel_kernels: int = 0     # groups run on the simulated accelerator
    cpu_reasons: dict = field(default_factory=dict)   # accel target: group -> why on the CPU

    def __repr__(self) -> str:
        return (f"CompileStats({self.groups} groups, {self.kernels} kernels "
                f"({self.host_kernels} on the host); optimize {self.optimize_seconds:.2f} s, "
                f"lower {self.lower_seconds:.2f} s, compile {self.compile_seconds:.2f} s, total "
                f"{self.total_seconds:.2f} s; LLVM compiled {self.llvm_compiled}, "
                + (f"OpenCL compiled {self.opencl_compiled}, " if self.opencl_compiled else "")
                + (f"on the accelerator {self.accel_kernels}, " if self.accel_kernels else "")
                + f"from the disk cache {self.from_disk}, from memory {self.from_memory}"
                + (f"; {self.lowerings_cached} lowerings cached" if self.lowerings_cached else "")
                + (f"; {self.llvm_shared} kernels in shared modules" if self.llvm_shared else "")
                + ("; passes from the build cache" if self.optimize_cached else "")
                + ")")


class HostKernel:
    """A fused group run by the reference interpreter, called like a compiled kernel: its flattened
    inputs, then its outputs (written in place)."""

    def __init__(self, name: str, func: Function, reason: str):
        from ..ir.module import IRModule as _Module
        from .executor import create_executor
        from .lowering import flatten_type
        self.name = name
        self.func = func
        self.reason = reason
        self.param_types = [p.checked_type or p.type_annotation for p in func.params]
        self.input_types = []
        self._arity = []
        for p, t in zip(func.params, self.param_types):
            types = flatten_type(t, f"{name}: parameter %{p.name_hint}")
            self.input_types.extend(types)
            self._arity.append(len(types))
        self.output_types = flatten_type(func.body.checked_type, f"{name}: result")
        plain = Function(func.params, func.body, func.ret_type)
        self._run = create_executor("interpreter", mod=_Module.from_expr(plain)).evaluate()

    def __call__(self, *arrays, num_threads: Optional[int] = None) -> None:
        from .lowering import _nest
        n_in = len(self.input_types)
        inputs, outputs = arrays[:n_in], arrays[n_in:]
        args, pos = [], 0
        for t, count in zip(self.param_types, self._arity):
            chunk = list(inputs[pos:pos + count])
            pos += count
            args.append(chunk[0] if isinstance(t, TensorType) else _as_tuple(_nest(t, chunk)))
        result = self._run(*args)
        flat = flatten_result(result)
        for out, value in zip(outputs, flat):
            np.copyto(out, value, casting="no")

    def source(self, kind: str = "loops") -> str:
        """The group's Relay text: a host kernel has no loop IR or machine code."""
        text = str(IRModule.from_expr(Function(self.func.params, self.func.body,
                                                self.func.ret_type)))
        if kind in ("loops", "relay"):
            return f"// {self.name}: host (reference) kernel: {self.reason}\n{text}"
        if kind in ("llvm", "asm"):
            return f"; {self.name}: host (reference) kernel, no {kind} code: {self.reason}"
        if kind == "opencl":
            return f"// {self.name}: host (reference) kernel, no OpenCL code: {self.reason}"
        raise ValueError(f"unknown source kind {kind!r}; known kinds: loops, llvm, asm, opencl")

    def __repr__(self) -> str:
        return f"HostKernel({self.name}: host (reference))"


def _as_tuple(value):
    return tuple(_as_tuple(v) for v in value) if isinstance(value, list) else value


def flatten_result(value) -> list:
    """The arrays of a result (an array, or nested tuples or lists of them), in order."""
    out, stack = [], [value]
    while stack:
        v = stack.pop()
        if isinstance(v, (tuple, list)):
            stack.extend(reversed(v))
        else:
            out.append(np.asarray(v))
    return out


@dataclass
class GroupKernel:
    """One distinct fused group: its Primitive function, its loop IR (``lowered``, None for a host
    kernel) and its compiled code (a ``CompiledKernel``, or a :class:`HostKernel`)."""

    name: str
    function: Function
    lowered: object
    compiled: object
    host: bool = False
    lower_seconds: float = 0.0
    compile_seconds: float = 0.0
    constants: list = field(default_factory=list)

    @property
    def ops(self) -> list:
        if self.lowered is not None:
            return list(self.lowered.ops)
        return [n.op.name for n in post_order(self.function.body)
                if isinstance(n, Call) and isinstance(n.op, Op)]

    @property
    def pattern(self) -> str:
        if self.lowered is not None:
            return self.lowered.pattern
        return getattr(self.compiled, "pattern", "OPAQUE")

    @property
    def rule(self) -> str:
        if self.lowered is not None:
            return self.lowered.rule
        return getattr(self.compiled, "rule", "host (reference)")

    @property
    def flops(self) -> int:
        if self.lowered is not None:
            return int(self.lowered.flops)
        return int(getattr(self.compiled, "flops", 0))

    @property
    def accel(self) -> bool:
        """Whether the group runs on the simulated accelerator."""
        return hasattr(self.compiled, "simulated_seconds")

    @property
    def input_types(self) -> list:
        return list(self.lowered.input_types if self.lowered is not None
                    else self.compiled.input_types)

    @property
    def output_types(self) -> list:
        return list(self.lowered.output_types if self.lowered is not None
                    else self.compiled.output_types)

    def source(self, kind: str = "loops") -> str:
        return self.compiled.source(kind)

    def bind_call(self, arrays: Sequence[np.ndarray], num_threads: Optional[int]):
        """A function of no arguments running this kernel on ``arrays`` (fixed buffers)."""
        kernel = self.compiled
        bind = getattr(kernel, "bind", None)
        if bind is not None:
            try:
                params = inspect.signature(bind).parameters
            except (TypeError, ValueError):
                params = {}
            if "num_threads" in params:
                return bind(*arrays, num_threads=num_threads)
            if num_threads is None:
                return bind(*arrays)
        arrays = tuple(arrays)
        if num_threads is None:
            return lambda: kernel(*arrays)
        return lambda: kernel(*arrays, num_threads=num_threads)

    def __repr__(self) -> str:
        where = "host (reference)" if self.host else self.rule
        return f"GroupKernel({self.name}: {', '.join(self.ops) or 'copy'}; {where})"


def _jit_stats() -> dict:
    try:
        from .llvm.jit import _jit
    except ImportError:
        return {}
    return dict(_jit.stats) if _jit is not None else {}


def _opencl_stats() -> dict:
    import sys
    runtime = sys.modules.get(f"{__package__}.opencl.runtime")
    return dict(runtime.stats) if runtime is not None else {}


def _llvm_kernel(func, target: Target, plan=None):
    from .llvm import build_kernel
    return build_kernel(func, plan=plan)


def _opencl_kernel(func, target: Target):
    from .opencl import build_kernel
    return build_kernel(func, target, lazy=True)   # built with the others: see _link_kernels


def _link_kernels(kernels: dict, target: Target, stats: CompileStats) -> None:
    """Build the OpenCL kernels of a build as one program (one call of the driver's compiler
    for the whole model)."""
    if target.kind != "opencl":
        return
    from .opencl import OpenCLKernel, build_kernels
    t0 = time.perf_counter()
    distinct = {id(k.compiled): k.compiled for k in kernels.values()
                if isinstance(k.compiled, OpenCLKernel)}
    try:
        build_kernels(list(distinct.values()))
    except RelayError:
        raise
    except Exception as err:  # a failure inside the driver: name the groups
        raise CompileError(f"building the OpenCL program of {len(distinct)} kernels failed: "
                           f"{type(err).__name__}: {err}") from err
    stats.compile_seconds += time.perf_counter() - t0


#: target kind -> the code generator: (PrimFunc, Target) -> a compiled kernel
CODE_GENERATORS = {"llvm": _llvm_kernel, "opencl": _opencl_kernel}


def _graph_module_class(target: Target):
    if target.kind == "opencl":
        from .opencl.graph import OpenCLGraphModule
        return OpenCLGraphModule
    from .graph_executor import GraphModule
    return GraphModule


def _has_no_compute(err: CompileError) -> bool:
    return "has no compute" in str(err)


def compile_groups(functions: Iterable[Function], target=None, stats: CompileStats | None = None,
                   num_threads: Optional[int] = None, stream=None) -> dict:
    """Lower and compile each distinct Primitive function of ``functions`` once.

    Returns a dict from each function (by identity) to its :class:`GroupKernel`; functions that
    are structurally equal map to the same one. Kernel names are the groups' names
    (``fused_nn_conv2d_add_nn_relu``), made unique with ``_1``, ``_2``, ... in order of first use.
    ``stream`` is a :class:`.llvm.jit.CompileStream` the build started already
    (:class:`_EarlyHelper`): the LLVM kernels join it, and it ends here.
    """
    from ..ir.structural import structural_equal, structural_hash
    from .group_cache import group_key, key_prefix
    from .lowering import group_name

    target = Target.parse(target)
    stats = stats if stats is not None else CompileStats()
    if target.host.kind == "llvm":
        # the idle cores are measured over the lowering, for the LLVM prefetcher's helpers
        from .llvm.compile_worker import mark_cpu
        mark_cpu()
    prefetchers: dict = {}   # target kind -> its CODE_PREFETCHERS object, once a group needs it
    if stream is not None:
        prefetchers["llvm"] = _LLVMPrefetch(stream)
    by_identity: dict = {}
    by_hash: dict = {}
    names: dict = {}
    prefix = key_prefix(target)
    misses = 0           # groups lowered here (not read from the lowering cache)
    pending: list = []   # [func, name, its GroupKernel or the lowering to generate code for,
    #                       its lowering cache key or None]
    try:
        for func in functions:
            if func in by_identity:
                continue
            key = structural_hash(func)
            bucket = by_hash.setdefault(key, [])
            found = next((k for f, k in bucket if structural_equal(f, func)), None)
            if found is None:
                base = group_name(func)
                count = names.get(base, 0)
                names[base] = count + 1
                name = base if count == 0 else f"{base}_{count}"
                cache_key = group_key(func, name, target, prefix)
                kernel = _from_group_cache(func, name, target, cache_key, stats)
                if kernel is None:
                    misses += 1
                    if misses == 3 and target.host.kind == "llvm" and stream is None:
                        # compiles to come: a helper process may start while the rest is lowered
                        from .llvm.compile_worker import prestart
                        prestart()
                    kernel = _lower_one(func, name, target, stats)
                    kind = None if isinstance(kernel, GroupKernel) else kernel[2].kind
                    if kind in CODE_PREFETCHERS:
                        if kind not in prefetchers:
                            prefetchers[kind] = CODE_PREFETCHERS[kind]()
                        # the kernel may compile while the rest is lowered
                        prefetchers[kind].lowered(kernel[0].prim_func)
                found = [func, name, kernel, cache_key]
                pending.append(found)
                bucket.append((func, found))
            by_identity[func] = found
    except BaseException:
        for prefetch in prefetchers.values():
            prefetch.abandon()
        from .llvm.compile_worker import clear_mark, release_spare
        clear_mark()
        release_spare()
        raise
    # every group lowered: the code generator may compile the kernels on several cores at once
    plans = _prefetch(pending, stats, prefetchers)
    for entry in pending:
        func, name, lowered, cache_key = entry
        if not isinstance(lowered, GroupKernel):
            plan, ahead = plans.get(id(lowered[0].prim_func), (None, 0.0))
            lowered = _generate_one(func, name, lowered, stats, num_threads, plan, ahead)
            if cache_key is not None:
                _to_group_cache(cache_key, lowered)
        entry[2] = lowered
    return {func: entry[2] for func, entry in by_identity.items()}


def _types_of(manifest_types: list) -> list:
    return [TensorType(tuple(shape), dtype) for shape, dtype in manifest_types]


def _from_group_cache(func: Function, name: str, target: Target, cache_key, stats: CompileStats):
    """The group's GroupKernel made from its manifest in the lowering cache and its object code
    in the kernel cache (see :mod:`.group_cache`), or None when either is missing."""
    if cache_key is None:
        return None
    from .group_cache import get_group_cache
    from .llvm.codegen import kernel_from_manifest
    from .lowering import DeferredLowering, _op_names, group_constants
    t0 = time.perf_counter()
    manifest = get_group_cache().load(cache_key)
    if manifest is None:
        return None
    constants = group_constants(func)
    inputs, outputs = _types_of(manifest["inputs"]), _types_of(manifest["outputs"])
    # the kernel's parameters must be the group's tensors, in order (a manifest that does not
    # match is not used: the kernel checks every array against these specs)
    expected = [(list(t.shape), t.dtype) for t in inputs] + \
        [(list(c.shape), c.dtype.name) for c in constants] + \
        [(list(t.shape), t.dtype) for t in outputs]
    if [(list(shape), dtype) for _, shape, dtype, _ in manifest["kernel"]["params"]] != expected:
        return None
    from .. import config
    from .group_cache import LOWERING_KNOBS
    knobs = {k: config.get(k) for k in LOWERING_KNOBS}

    def relower():
        from .llvm.codegen import KernelPlan
        from .llvm.cache import cache_key as llvm_key
        from .llvm.jit import host_target
        with config.Context(**knobs):
            prim_func = _lower_one(func, name, target, CompileStats())[0].prim_func
        # a kernel sharing a module with others (codegen.share_phases) keeps its own key
        if llvm_key(KernelPlan(prim_func).key_text, host_target().identity) != \
                manifest["kernel"].get("key", manifest["kernel"]["digest"]):
            import warnings
            warnings.warn(f"fused group {name}: the loop IR lowered again differs from the one "
                          "its cached kernel was compiled from (a stale entry of the lowering "
                          "cache under RB_CACHE_DIR/groups; RB_LOWERING_CACHE=off bypasses it)",
                          stacklevel=3)
        return prim_func

    lowered = DeferredLowering(relower, name=name, input_types=inputs, output_types=outputs,
                               constants=constants, anchor=manifest["anchor"],
                               pattern=manifest["pattern"], ops=_op_names(func),
                               flops=manifest["flops"], rule=manifest["rule"])
    t1 = time.perf_counter()
    jit_before = _jit_stats()
    compiled = kernel_from_manifest(manifest["kernel"], name, lambda: lowered.prim_func)
    if compiled is None:
        return None
    t2 = time.perf_counter()
    stats.lower_seconds += t1 - t0
    stats.compile_seconds += t2 - t1
    stats.lowerings_cached += 1
    from .graph_executor import contiguous
    kernel = GroupKernel(name, func, lowered, compiled, lower_seconds=t1 - t0,
                         compile_seconds=t2 - t1, constants=[contiguous(c) for c in constants])
    jit_after = _jit_stats()
    kernel.cache_origin = ("disk" if jit_after.get("from_disk", 0) > jit_before.get("from_disk", 0)
                           else "memory")
    kernel.shared_with = manifest["kernel"].get("shared_with")
    stats.llvm_shared += bool(kernel.shared_with)
    return kernel


def _to_group_cache(cache_key: str, kernel: GroupKernel) -> None:
    manifest = getattr(kernel.compiled, "manifest", None)
    if manifest is None or kernel.host:
        return
    from .group_cache import get_group_cache
    lowered = kernel.lowered
    get_group_cache().store(cache_key, {
        "inputs": [[list(t.shape), t.dtype] for t in lowered.input_types],
        "outputs": [[list(t.shape), t.dtype] for t in lowered.output_types],
        "anchor": lowered.anchor, "pattern": lowered.pattern, "flops": int(lowered.flops),
        "rule": lowered.rule, "kernel": manifest})


class _LLVMPrefetch:
    """Compiles a build's LLVM kernels that no cache holds ahead of the one-by-one code
    generation, several at once.

    :meth:`lowered` is called with each group's PrimFunc as soon as it is lowered: it plans the
    kernel (:class:`.llvm.codegen.KernelPlan`) and, once a helper process was started ahead
    (:func:`.llvm.compile_worker.prestart`, from the build's third group to compile on, when a
    core is idle), hands every kernel that will be a module of its own (one that cannot share
    phases with another, :func:`.llvm.codegen.may_share`) to it at once, so that LLVM runs while
    the build lowers the rest. :meth:`finish` compiles the rest, the shared modules first
    (:func:`.llvm.codegen.compile_ahead`), and returns ``{id(prim_func): (its KernelPlan for
    _llvm_kernel, its share of the seconds spent here)}``: the time to plan it, and of LLVM's
    time with the others its part by its own LLVM seconds."""

    def __init__(self, stream=None):
        self.plans: dict = {}
        self.spent: dict = {}
        self.stream = stream
        self.waiting: list = []   # plans lowered before the stream started

    def lowered(self, prim_func) -> None:
        from .llvm.codegen import KernelPlan, may_share
        t0 = time.perf_counter()
        try:
            plan = KernelPlan(prim_func)
        except Exception:  # raised again, naming the group, when its kernel is built
            return
        self.plans[id(prim_func)] = plan
        self.waiting.append(plan)
        if self.stream is None:
            from .llvm.jit import get_jit
            self.stream = get_jit().stream()
            if self.stream is not None:
                _submit_spin_pool(self.stream)
        if self.stream is not None:
            for known in self.waiting:
                if not may_share(known):
                    self.stream.submit(known.module_generate, known.module_key,
                                       known.func.name)
            self.waiting.clear()
        self.spent[id(prim_func)] = time.perf_counter() - t0

    def abandon(self) -> None:
        if self.stream is not None:
            self.stream.abandon()

    def finish(self, prim_funcs: list) -> dict:
        from .llvm.codegen import KernelPlan, compile_ahead
        start = time.perf_counter()
        plans, spent = {}, {}
        for prim_func in prim_funcs:
            t0 = time.perf_counter()
            plan = self.plans.get(id(prim_func))
            if plan is None:
                try:
                    plan = KernelPlan(prim_func)
                except Exception:  # raised again, naming the group, when its kernel is built
                    continue
            plans[id(prim_func)] = plan
            spent[id(prim_func)] = self.spent.get(id(prim_func), 0.0) + time.perf_counter() - t0
        if not plans:
            self.abandon()
            return {}
        t0 = time.perf_counter()
        if len(plans) > 1 or self.stream is not None:
            llvm = compile_ahead(list(plans.values()), stream=self.stream)
        else:
            llvm = {}
        pool = time.perf_counter() - t0
        weights = {k: llvm.get(plan.key_text, 0.0) for k, plan in plans.items()}
        total = sum(weights.values())
        for k in plans:
            spent[k] += pool * (weights[k] / total if total > 0 else 1.0 / len(plans))
        rest = (time.perf_counter() - start - pool) / len(plans)
        return {k: (plan, spent[k] + rest) for k, plan in plans.items()}


def _submit_spin_pool(stream) -> None:
    """Hand the graph executor's thread pool (:mod:`.llvm.spinpool`) to ``stream`` unless this
    process has it: compiled at its first use otherwise, after every kernel, with no helper
    left to overlap it."""
    from .llvm.spinpool import compile_job
    job = compile_job()
    if job is not None:
        stream.submit(*job)


class _EarlyHelper:
    """A helper process started while a build's passes run, on a cache that has not even the
    graph executor's thread pool compiled (a first build: every kernel will compile too). The
    helper's start and the pool's compile then overlap the passes, which leave a core idle,
    rather than the lowering; the build hands the stream to :func:`compile_groups`.

    :meth:`passes_start` is called where the passes begin (the build cache missed): it starts
    the helper when a core was idle since this object was made (:func:`.llvm.compile_worker
    .prestart`, at least 20 ms of measurement, the parameters bound meanwhile)."""

    def __init__(self, target: Target):
        self.stream = None
        self.armed = False
        if target.kind != "llvm":   # the thread pool is the CPU graph executor's
            return
        from .llvm import spinpool
        job = spinpool.compile_job()
        if job is None:
            return
        from .llvm.cache import cache_key
        from .llvm.jit import get_jit
        jit = get_jit()
        if jit.cache.path(cache_key(job[1], jit.target.identity)).exists():
            return
        from .llvm.compile_worker import mark_cpu
        mark_cpu()
        self.armed = True

    def passes_start(self) -> None:
        if not self.armed:
            return
        self.armed = False
        from .llvm.compile_worker import prestart
        if prestart():
            from .llvm.jit import get_jit
            self.stream = get_jit().stream()
            if self.stream is not None:
                _submit_spin_pool(self.stream)

    def abandon(self) -> None:
        if self.stream is not None:
            self.stream.abandon()
            self.stream = None
        from .llvm.compile_worker import release_spare
        release_spare()


#: target kind -> makes the object that compiles a build's kernels ahead of the one-by-one code
#: generation: ``lowered(prim_func)`` after each group is lowered, ``finish(prim_funcs)`` ->
#: {id(prim_func): (what CODE_GENERATORS takes as ``plan``, seconds spent on it)}, ``abandon()``
#: when the build fails
CODE_PREFETCHERS = {"llvm": _LLVMPrefetch}


def _prefetch(pending: list, stats: CompileStats, prefetchers: dict) -> dict:
    by_kind: dict = {}
    for _, _, lowered, _ in pending:
        if not isinstance(lowered, GroupKernel):
            by_kind.setdefault(lowered[2].kind, []).append(lowered[0].prim_func)
    plans: dict = {}
    try:
        for kind, prim_funcs in by_kind.items():
            prefetch = prefetchers.pop(kind, None)
            if prefetch is None and kind in CODE_PREFETCHERS:
                prefetch = CODE_PREFETCHERS[kind]()
            if prefetch is not None:
                found = prefetch.finish(prim_funcs)
                stats.compile_seconds += sum(seconds for _, seconds in found.values())
                plans.update(found)
    finally:
        for prefetch in prefetchers.values():
            prefetch.abandon()
        from .llvm.compile_worker import clear_mark, release_spare
        clear_mark()
        release_spare()
    return plans


def _accel_kernel(func: Function, name: str, target: Target, stats: CompileStats):
    """The group as an accelerator kernel when it qualifies (:func:`.accel.lower.plan_group`
    and a tiling that fits the buffers), else None: it runs on the host CPU."""
    from .accel.kernel import AccelKernel
    from .accel.lower import choose_tiling, plan_group
    config = target.accel_config()
    t0 = time.perf_counter()
    plan = plan_group(func, config)
    why = plan if isinstance(plan, str) else None
    if why is None:
        tiling = choose_tiling(plan, config)
        why = tiling if isinstance(tiling, str) else None
    if why is not None:
        stats.cpu_reasons[name] = why
        return None
    try:
        kernel = AccelKernel(name, func, plan, config)
    except RelayError as err:
        raise CompileError(f"fused group {name}: the accelerator's lowering failed: {err}") from err
    seconds = time.perf_counter() - t0
    stats.compile_seconds += seconds
    stats.accel_kernels += 1
    return GroupKernel(name, func, None, kernel, compile_seconds=seconds)


def _lower_one(func: Function, name: str, target: Target, stats: CompileStats):
    """The group's GroupKernel when it needs no code generation (an accelerator kernel, one the
    host runs), else ``(LoweredFunc, lowering seconds, the target to generate code for)``."""
    from .lowering import lower_primitive

    if target.kind == "accel":
        found = _accel_kernel(func, name, target, stats)
        if found is not None:
            return found
        target = target.host
    where = f"fused group {name}"
    t0 = time.perf_counter()
    try:
        lowered = lower_primitive(func, target, name=name)
    except CompileError as err:
        if not _has_no_compute(err):
            raise CompileError(f"{where}: {err}") from err
        stats.lower_seconds += time.perf_counter() - t0
        stats.host_kernels += 1
        return GroupKernel(name, func, None, HostKernel(name, func, str(err)), host=True,
                           lower_seconds=time.perf_counter() - t0)
    except RelayError:
        raise
    except Exception as err:  # a failure inside a compute or a schedule rule: name the group
        raise CompileError(f"{where}: lowering failed: {type(err).__name__}: {err}") from err
    seconds = time.perf_counter() - t0
    stats.lower_seconds += seconds
    return lowered, seconds, target


def _generate_one(func: Function, name: str, lowering: tuple, stats: CompileStats,
                  num_threads: Optional[int], plan=None, ahead: float = 0.0) -> GroupKernel:
    """Generate the code of a lowered group; ``plan`` and ``ahead`` (its seconds, counted in
    ``stats`` already) come from the target's prefetcher, when it has one."""
    lowered, lower_seconds, target = lowering
    where = f"fused group {name}"
    t1 = time.perf_counter()
    generate = CODE_GENERATORS.get(target.kind)
    if generate is None:
        raise CompileError(f"{where}: no code generator for target {target}")
    jit_before = _jit_stats()
    try:
        compiled = (generate(lowered.prim_func, target) if plan is None
                    else generate(lowered.prim_func, target, plan=plan))
    except RelayError as err:
        if str(err).startswith(where):
            raise
        raise CompileError(f"{where}: {err}") from err
    except Exception as err:  # a failure inside the code generator: name the group
        raise CompileError(f"{where}: code generation failed: {type(err).__name__}: {err}") \
            from err
    t2 = time.perf_counter()
    stats.compile_seconds += t2 - t1
    from .graph_executor import contiguous
    constants = [contiguous(c) for c in lowered.constants]
    kernel = GroupKernel(name, func, lowered, compiled, lower_seconds=lower_seconds,
                         compile_seconds=t2 - t1 + ahead, constants=constants)
    # where its machine code came from, for the compile-time view (relaybench.viz.compile_time):
    # "compiled" (LLVM ran), "disk" (the kernel cache) or "memory" (loaded in this process)
    jit_after = _jit_stats()
    kernel.cache_origin = next((origin for key, origin in (("compiled", "compiled"), ("from_disk", "disk"),
                                                           ("from_memory", "memory"))
                                if jit_after.get(key, 0) > jit_before.get(key, 0)), None)
    shared = getattr(plan, "shared", None)
    if shared is not None:  # its module holds other kernels too: where the first found it
        stats.llvm_shared += 1
        kernel.shared_with = compiled.manifest["shared_with"]
        if getattr(shared, "origin", None) is None:
            shared.origin = kernel.cache_origin
        elif kernel.cache_origin == "memory":
            kernel.cache_origin = shared.origin
    return kernel


def _as_module(mod) -> IRModule:
    if isinstance(mod, IRModule):
        return mod
    if isinstance(mod, Function):
        return IRModule.from_expr(mod)
    raise TypeError(f"build takes an IRModule or a Function, not {type(mod).__name__}")


def _pack_for_accel(mod: IRModule, target: Target) -> IRModule:
    """``mod`` through :func:`~relaybench.passes.graph_pack` with the design's batch and block,
    unless it is packed already or ``@main`` has no int8 convolution or dense layer to pack: then
    the requantized dense layers of its other functions are packed
    (:func:`_pack_dense_functions`), and whatever is not packed runs on the CPU."""
    from ..passes import InferType
    from ..passes.graph_pack import graph_pack
    config = target.accel_config()
    mod = InferType()(mod)
    main = mod["main"]
    convs = [n for n in post_order(main.body)
             if isinstance(n, Call) and isinstance(n.op, Op) and n.op.name == "nn.conv2d"]
    if any("n" in (c.attrs.data_layout or "").lower().replace("nchw", "") for c in convs):
        return mod   # packed already
    int8 = [c for c in convs if str(c.args[0].checked_type.dtype) == "int8"]
    dense = [n for n in post_order(main.body) if isinstance(n, Call) and isinstance(n.op, Op)
             and n.op.name == "nn.dense" and str(n.args[0].checked_type.dtype) == "int8"]
    if not int8 and not dense:
        return _pack_dense_functions(mod, config)
    from ..passes.graph_pack import GraphPackError
    # a network of convolutions packs between its first pooling and its global pooling (VTA's
    # ResNet flow); one of dense layers only (a multilayer perceptron) packs from end to end
    region = {} if int8 else {"start_name": None, "stop_name": None}
    try:
        return graph_pack(mod, bfactor=config.batch, cfactor=config.block_out,
                          pack_int32_results=False, **region)
    except GraphPackError:
        # no start and stop to pack between, or shapes the blocks do not divide: the program
        # runs on the CPU (compile_stats.cpu_reasons says why for each group)
        return mod


def _pack_dense_functions(mod: IRModule, config) -> IRModule:
    """The requantized int8 dense layers of the module's other functions (a recursive cell that
    ``@main`` calls, as in a quantized TreeLSTM) packed for the accelerator, each function from
    end to end (:func:`~relaybench.passes.graph_pack.graph_pack` with ``start_name=None``,
    ``stop_name=None``; closures nested in a function are not entered)."""
    from ..passes.graph_pack import GraphPackError, _pack_function
    from ..passes.fold_constant import fold_constant
    from ..passes.infra import SKIPPED_FUNCTION_ATTRS, typed
    for gv in list(mod.functions):
        func = mod[gv]
        if gv.name_hint == "main" or any(func.attrs.get(a) for a in SKIPPED_FUNCTION_ATTRS):
            continue
        if not any(isinstance(n, Call) and isinstance(n.op, Op) and n.op.name == "nn.dense"
                   and str(n.args[0].checked_type.dtype) == "int8" for n in post_order(func.body)):
            continue
        try:
            packed = _pack_function(func, config.batch, config.block_out, None, None, None, None,
                                    pack_int32_results=False, pack_dense=True, mod=mod,
                                    name=gv.name_hint)
        except GraphPackError:
            continue     # left as it is: its groups run on the CPU
        mod = typed(mod.with_functions({**mod.functions, gv: packed}))
        mod = typed(mod.with_functions({**mod.functions, gv: fold_constant(mod[gv], mod)}))
    return mod


def build(mod, target="llvm", params: Optional[dict] = None, opt_level: int = 3, *,
          instruments: Sequence = (), required_pass: Iterable[str] = (),
          disabled_pass: Iterable[str] = (), config: Optional[dict] = None,
          num_threads: Optional[int] = None, executor: str = "graph"):
    """Optimize ``mod``, compile every fused group of ``@main``, return a GraphModule.

    ``executor="aot"`` compiles every function of the module instead (control flow, closures,
    ADTs and references included) into one native module and returns an
    :class:`~relaybench.backends.aot.runtime.AotModule` (see :mod:`relaybench.backends.aot`).

    ``params`` (name -> array) are bound into ``@main`` as constants first. ``opt_level``,
    ``instruments``, ``required_pass``, ``disabled_pass`` and ``config`` make the
    :class:`~relaybench.passes.PassContext` the default pipeline runs in. ``num_threads`` (else
    the target's ``-num-threads``, else ``RB_NUM_THREADS``) is how many threads the kernels use.

    Raises :class:`~relaybench.errors.CompileError` when ``@main`` is not static dataflow (the
    interpreter and the VM run everything), or when a group cannot be compiled (the group named).
    """
    if executor == "aot":
        from .aot import compile as aot_compile
        return aot_compile(mod, target, params, opt_level, instruments=instruments,
                           required_pass=required_pass, disabled_pass=disabled_pass,
                           config=config, num_threads=num_threads)
    if executor != "graph":
        raise ValueError(f"build: executor must be 'graph' or 'aot', not {executor!r}")
    with gc_paused():   # a large program's nodes: see relaybench._gc
        return _build_graph(mod, target, params, opt_level, instruments, required_pass,
                            disabled_pass, config, num_threads)


def pass_config(config, target: Target) -> dict:
    """A copy of the PassContext ``config`` with ``relay.target`` set (unless given): the passes
    apply the target's policies; on the accelerator, the CPU's to what it leaves."""
    config = dict(config or {})
    config.setdefault("relay.target", str(target.host if target.kind == "accel" else target))
    return config


def optimized_module(mod: IRModule, params, target: Target, opt_level, instruments,
                     required_pass, disabled_pass, config, graph: bool = True,
                     write_behind: bool = False, on_miss=None) -> tuple:
    """``(mod with params bound, through the default pipeline and typed, whether that came
    from the build cache)``: what ``rb.build`` (``graph=True``: dataflow lets made graph edges
    first) and the VM's compiler (``graph=False``) optimize. The build cache
    (:mod:`.build_cache`) keys it by the inputs as given, so a build that finds its key neither
    binds the parameters, nor packs for the accelerator, nor optimizes. With
    ``write_behind``, a new entry's file is written by a thread while the caller goes on (it
    calls the cache's ``flush()`` before it returns). ``on_miss()`` is called once the
    parameters are bound, when the passes are to run."""
    from .build_cache import build_key, get_build_cache

    required_pass, disabled_pass = tuple(required_pass), tuple(disabled_pass)  # read twice
    config = pass_config(config, target)
    key = build_key(mod, params, target, opt_level, required_pass, disabled_pass, config,
                    instruments, purpose="graph" if graph else "vm")
    if key is not None:
        found = get_build_cache().load(key)
        if found is not None:
            return found, True
    from ..ir.expr import Let
    from ..ir.functor import post_order
    from ..passes.bind_params import bind_params
    from ..passes.infer_type import InferType
    from ..passes.pipelines import optimize
    from ..passes.to_graph_normal_form import ToGraphNormalForm
    if params:
        mod = bind_params(mod, params)
    if on_miss is not None:
        on_miss()
    if graph and any(type(n) is Let for n in post_order(mod["main"])):
        # dataflow lets become graph edges, so FuseOps fuses across them (lets with effects stay)
        mod = ToGraphNormalForm()(mod)
    if target.kind == "accel":
        # VTA's flow: the quantized program packed for the accelerator; the CPU's policies for
        # the rest (AlterOpLayout blocks the NCHW convolutions left to the CPU and leaves the
        # packed ones as they are)
        mod = _pack_for_accel(mod, target)
    optimized = optimize(mod, opt_level, instruments=instruments, required_pass=required_pass,
                         disabled_pass=disabled_pass, config=config)
    if graph and optimized["main"].checked_type is None:
        optimized = InferType()(optimized)
    if key is not None:
        get_build_cache().store(key, optimized, background=write_behind)
    return optimized, False


def _build_graph(mod, target, params, opt_level, instruments, required_pass, disabled_pass,
                 config, num_threads):
    from .graph_executor import extract_graph

    start = time.perf_counter()
    target = Target.parse(target)
    mod = _as_module(mod)
    if target.kind == "opencl":
        from .opencl import get_device
        get_device(target)  # no matching device: say so before optimizing
    stats = CompileStats()
    jit_before = _jit_stats()
    opencl_before = _opencl_stats()
    # a new entry of the build cache (ResNet-18: 160 MB of weights) is written while the
    # kernels compile, and is on disk before the build returns
    early = _EarlyHelper(target)
    try:
        optimized, stats.optimize_cached = optimized_module(
            mod, params, target, opt_level, instruments, required_pass, disabled_pass, config,
            write_behind=True, on_miss=early.passes_start)
        stats.optimize_seconds = time.perf_counter() - start
        graph = extract_graph(optimized["main"])
    except BaseException:
        early.abandon()
        raise
    kernels = compile_groups([node.function for node in graph.nodes], target, stats,
                             stream=early.stream)
    _link_kernels(kernels, target, stats)
    jit_after = _jit_stats()
    for key, attr in (("compiled", "llvm_compiled"), ("from_disk", "from_disk"),
                      ("from_memory", "from_memory")):
        setattr(stats, attr, jit_after.get(key, 0) - jit_before.get(key, 0))
    opencl_after = _opencl_stats()
    for key, attr in (("compiled", "opencl_compiled"), ("from_disk", "from_disk"),
                      ("from_memory", "from_memory")):
        setattr(stats, attr, getattr(stats, attr) + opencl_after.get(key, 0)
                - opencl_before.get(key, 0))
    stats.groups = len(graph.nodes)
    stats.kernels = len({id(k) for k in kernels.values()})
    if num_threads is None and target.num_threads is not None:
        num_threads = target.num_threads
    module = _graph_module_class(target)(optimized, graph, kernels, target=target,
                                         num_threads=num_threads, compile_stats=stats)
    from .build_cache import get_build_cache
    get_build_cache().flush()
    stats.total_seconds = time.perf_counter() - start
    return module
