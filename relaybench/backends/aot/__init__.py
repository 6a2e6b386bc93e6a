"""Ahead-of-time compilation of whole programs: every function of a module, control flow,
closures, ADTs and references included, in one native LLVM module (Relay's AoT compiler).

``rb.build(mod, target="llvm", executor="aot")`` (or :func:`compile`) prepares the module as
the VM does (optimize, FuseOps, A-normal form, lambda lifting, kernels compiled by the graph
executor's path, bytecode with explicit allocations), then turns that bytecode into LLVM IR
(:mod:`.compiler`) and runs it with one native call per invocation (:mod:`.runtime`).

>>> import numpy as np, relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%n: int32, %acc: int32) -> int32 {
...   if (equal(%n, 0)) { %acc } else { @main(subtract(%n, 1), add(%acc, %n)) }
... }''')
>>> lib = rb.build(mod, target="llvm", executor="aot", opt_level=0)
>>> lib.run(np.int32(100000), np.int32(0))   # a self tail call: a loop, not 100,000 frames
array(705082704, dtype=int32)
>>> 'br label %"pc0"' in lib.source("llvm")   # the tail call jumps back to the start
True
"""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from ...errors import CompileError

__all__ = ["compile", "AotModule"]


def compile(mod, target="llvm", params: Optional[dict] = None, opt_level: int = 3, *,
            instruments=(), required_pass=(), disabled_pass=(), config: Optional[dict] = None,
            num_threads: Optional[int] = None):
    """Compile every function of ``mod`` for the host CPU into one native module; returns an
    :class:`~.runtime.AotModule`. The keywords are :func:`relaybench.vm.compile`'s. Raises
    :class:`~relaybench.errors.CompileError` for a target other than the host CPU and for a
    program the native code cannot run (dynamic shapes, a kernel without machine code).
    ``num_threads`` (else the target's ``-num-threads``, else ``RB_NUM_THREADS``) is how many
    threads the kernels' parallel loops use, fixed in the native code."""
    from ..target import Target
    from ..vm.compiler import compile as vm_compile
    from .runtime import AotModule

    start = time.perf_counter()
    target = Target.parse(target)
    if target.kind != "llvm":
        raise CompileError(f"executor='aot' compiles for the host CPU (target llvm), not {target}")
    exe = vm_compile(mod, target, params, opt_level, instruments=instruments,
                     required_pass=required_pass, disabled_pass=disabled_pass, config=config)
    entries = ["main"] if "main" in exe.global_map else \
        [n for n, i in exe.global_map.items() if not exe.functions[i].closure_arity]
    from ... import config as knobs
    if num_threads is None:
        num_threads = target.num_threads if target.num_threads is not None else \
            knobs.num_threads()
    native = native_program(exe, entries, num_threads)
    stats = exe.compile_stats
    if stats is not None:
        stats.total_seconds = time.perf_counter() - start
    return AotModule(exe, native, compile_stats=stats, num_threads=num_threads)


class NativeProgram:
    """One compiled LLVM module of an executable's functions: the machine code (``compiled``),
    what the code generator knows of it (``program``), the IR as generated (``text``) and the
    static objects and arrays its code points into."""

    def __init__(self, compiled, program, text: str, statics: list, keep: list):
        self.compiled, self.program, self.text = compiled, program, text
        self.statics, self.keep = statics, keep


def native_program(exe, entries, num_threads: int = 1) -> NativeProgram:
    """Compile the functions of ``exe`` that ``entries`` (global names) reach, their parallel
    loops spread over ``num_threads`` threads."""
    from ..llvm.jit import compile_module
    from .compiler import emit_program
    from .runtime import _aligned_words

    statics: list = []
    held: list = []

    def static_object(words, keep=None):
        block = _aligned_words(len(words))
        block[:] = words
        statics.append(block)
        if keep is not None:
            held.append(keep)
        return block.ctypes.data

    def keep_array(array):
        array = np.require(array, requirements=("C", "A"))
        held.append(array)
        return array

    module, program = emit_program(exe, entries, static_object, keep_array, num_threads)
    text = str(module)
    compiled = compile_module(module, cache=False, name="aot_program")
    return NativeProgram(compiled, program, text, statics, held)


def __getattr__(name):
    if name == "AotModule":
        from .runtime import AotModule
        return AotModule
    raise AttributeError(name)
