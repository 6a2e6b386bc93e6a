"""The LLVM backend for the CPU: the code generator from loop IR (:mod:`.codegen`), the JIT
(:mod:`.jit`), the on-disk kernel cache (:mod:`.cache`) and the runtime that checks arguments
and runs parallel loops on a thread pool (:mod:`.runtime`).

llvmlite (the ``llvm`` extra) is imported only when something is compiled; the cache and the
runtime need numpy only.
"""

from .cache import CacheEntry, KernelCache, cache_key
from .codegen import CompiledKernel, build_kernel
from .jit import (JIT, CompiledModule, HostTarget, compile_module, get_jit,
                  host_target, known_cpus, prefer_vector_width)
from .runtime import (Kernel, ScalarSpec, TensorSpec, parallel_for, split_range,
                      thread_pool)

__all__ = ["CacheEntry", "KernelCache", "cache_key", "JIT", "CompiledModule", "HostTarget",
           "compile_module", "get_jit", "host_target", "known_cpus", "prefer_vector_width",
           "Kernel", "ScalarSpec", "TensorSpec", "parallel_for", "split_range", "thread_pool",
           "build_kernel", "CompiledKernel"]
