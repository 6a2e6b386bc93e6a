"""The LLVM backend for the CPU: the code generator from loop IR (:mod:`.codegen`), the JIT
(:mod:`.jit`), the on-disk kernel cache (:mod:`.cache`) and the runtime that checks arguments
and runs parallel loops on a thread pool (:mod:`.runtime`).

llvmlite (the ``llvm`` extra) is imported only when something is compiled or loaded; the cache
and the runtime need numpy only. The names below come from their submodules on first use.
"""

import importlib

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


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:   # a submodule not imported yet
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
