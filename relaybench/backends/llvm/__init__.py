"""The LLVM backend for the CPU: the code generator from loop IR (:mod:`.codegen`), the JIT
(:mod:`.jit`), the on-disk kernel cache (:mod:`.cache`) and the runtime that checks arguments
and runs parallel loops on a thread pool (:mod:`.runtime`).

llvmlite (the ``llvm`` extra) is imported only when something is compiled or loaded; the cache
and the runtime need numpy only. The names below come from their submodules on first use.
"""

from ..._lazy import lazy_attributes

#: name -> the submodule that defines it, imported on first use: a build whose kernels are all
#: cached loads them without the code generator (and llvmlite's IR builder) ever imported
_LAZY = {
    **dict.fromkeys(("CacheEntry", "KernelCache", "cache_key"), ".cache"),
    **dict.fromkeys(("CompiledKernel", "build_kernel"), ".codegen"),
    **dict.fromkeys(("JIT", "CompiledModule", "HostTarget", "compile_module", "get_jit",
                     "host_target", "known_cpus", "prefer_vector_width"), ".jit"),
    **dict.fromkeys(("Kernel", "ScalarSpec", "TensorSpec", "parallel_for", "split_range",
                     "thread_pool"), ".runtime"),
}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
