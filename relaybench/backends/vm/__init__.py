"""The Relay virtual machine: every Relay program compiled, control flow, closures, ADTs and
references included.

``compile(mod, target, params, opt_level)`` gives an :class:`Executable` (bytecode, constants,
kernels); :class:`VirtualMachine` runs it. ``rb.create_executor("vm", mod, target=...)`` puts
it behind the interpreter's interface. See :mod:`.compiler` for the pipeline, :mod:`.bytecode`
for the instruction set and :mod:`.vm` for the machine; :mod:`.dynamic` and :mod:`.symbolic`
for dynamic shapes (shape functions at run time, kernels compiled once for symbolic extents);
:mod:`.serialize` for ``exe.save(path)`` / ``Executable.load(path)``.
"""

from .bytecode import VMFunction  # noqa: F401
from .compiler import compile  # noqa: F401  (Relay's name, shadowing the builtin here)
from .vm import Executable, Trace, VirtualMachine, VMClosure  # noqa: F401

__all__ = ["compile", "Executable", "Trace", "VirtualMachine", "VMClosure", "VMFunction"]
