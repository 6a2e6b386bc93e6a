"""The VM's instruction set: one frozen dataclass per instruction, printed as Relay prints them.

The instructions are Relay's (``include/tvm/runtime/vm/bytecode.h``): ``Move, Ret, Invoke,
InvokeClosure, InvokePacked, AllocTensor, AllocTensorReg, AllocStorage, AllocADT, AllocClosure,
GetField, GetTag, If, Goto, LoadConst, LoadConsti, ShapeOf, ReshapeTensor, Fatal``. References
need three more, as in Relay's later VM: ``RefCreate`` (a new cell), ``RefRead`` and
``RefWrite``. Every instruction names its registers (``$3``); a function's registers are its
parameters first, then the values it computes, each written once on each path.

Jumps are relative: ``If`` compares two registers and moves by ``true_offset`` or
``false_offset``, ``Goto`` by ``pc_offset``.

>>> print(Invoke(2, 0, (0, 1)))
invoke $2 VMFunc[0]($0, $1)
>>> print(If(3, 4, 1, 5))
if $3 $4 +1 +5
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

__all__ = ["Instruction", "Move", "Ret", "Invoke", "InvokeClosure", "InvokePacked", "AllocTensor",
           "AllocTensorReg", "AllocStorage", "AllocADT", "AllocClosure", "GetField", "GetTag", "If",
           "Goto", "LoadConst", "LoadConsti", "ShapeOf", "ReshapeTensor", "Fatal", "RefCreate",
           "RefRead", "RefWrite", "VMFunction", "format_function"]


def _regs(regs) -> str:
    return ", ".join(f"${r}" for r in regs)


def _offset(n: int) -> str:
    return f"{n:+d}"


class Instruction:
    """The base of every instruction; ``dst``, where an instruction has one, is the register
    it writes."""

    def text(self) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.text()


@dataclass(frozen=True)
class Move(Instruction):
    """``$dst = $src``: a branch's result into the register the branches share."""

    src: int
    dst: int

    def text(self) -> str:
        return f"move ${self.dst} ${self.src}"


@dataclass(frozen=True)
class Ret(Instruction):
    """Return ``$result`` to the caller's frame."""

    result: int

    def text(self) -> str:
        return f"ret ${self.result}"


@dataclass(frozen=True)
class Invoke(Instruction):
    """Call the VM function ``func_index`` on ``args``; its result into ``$dst``."""

    dst: int
    func_index: int
    args: tuple

    def text(self) -> str:
        return f"invoke ${self.dst} VMFunc[{self.func_index}]({_regs(self.args)})"


@dataclass(frozen=True)
class InvokeClosure(Instruction):
    """Call the closure in ``$closure`` on ``args``: its captured values come first."""

    dst: int
    closure: int
    args: tuple

    def text(self) -> str:
        return f"invoke_closure ${self.dst} ${self.closure}({_regs(self.args)})"


@dataclass(frozen=True)
class InvokePacked(Instruction):
    """Run compiled kernel ``packed_index``: ``args`` are its ``arity`` tensors, the last
    ``output_size`` of them the outputs it writes in place."""

    packed_index: int
    arity: int
    output_size: int
    args: tuple
    name: str = ""
    span: object = field(default=None, compare=False)

    def text(self) -> str:
        n_in = self.arity - self.output_size
        return (f"invoke_packed PackedFunc[{self.packed_index}] (in: {_regs(self.args[:n_in])}, "
                f"out: {_regs(self.args[n_in:])})" + (f"  # {self.name}" if self.name else ""))


@dataclass(frozen=True)
class AllocStorage(Instruction):
    """A new block of ``size`` bytes, aligned to ``alignment``, for tensors of ``dtype_hint``.

    Sized at run time when ``shape_register`` is given: the block then holds one tensor of
    ``dtype_hint`` whose shape is the int64 tensor in that register (a shape function's output),
    and ``size`` is 0."""

    dst: int
    size: int
    alignment: int
    dtype_hint: str
    device: str = "cpu"
    shape_register: Optional[int] = None

    def text(self) -> str:
        size = self.size if self.shape_register is None else f"bytes(${self.shape_register})"
        return (f"alloc_storage ${self.dst} size={size} alignment={self.alignment} "
                f"{self.dtype_hint} {self.device}")


@dataclass(frozen=True)
class AllocTensor(Instruction):
    """A tensor of a static ``shape`` and ``dtype`` at ``offset`` bytes into ``$storage``."""

    dst: int
    storage: int
    offset: int
    shape: tuple
    dtype: str

    def text(self) -> str:
        return (f"alloc_tensor ${self.dst} ${self.storage} offset={self.offset} "
                f"shape={list(self.shape)} {self.dtype}")


@dataclass(frozen=True)
class AllocTensorReg(Instruction):
    """A tensor whose shape is the int64 tensor in ``$shape_register``, in ``$storage``."""

    dst: int
    storage: int
    offset: int
    shape_register: int
    dtype: str

    def text(self) -> str:
        return (f"alloc_tensor_reg ${self.dst} ${self.storage} offset={self.offset} "
                f"${self.shape_register} {self.dtype}")


@dataclass(frozen=True)
class AllocADT(Instruction):
    """An ADT object of ``tag`` holding ``fields``; ``constructor`` None makes a tuple."""

    dst: int
    tag: int
    fields: tuple
    constructor: object = field(default=None, compare=False)

    def text(self) -> str:
        what = self.constructor.name_hint if self.constructor is not None else "tuple"
        return f"alloc_data ${self.dst} tag({self.tag}) {what} [{_regs(self.fields)}]"


@dataclass(frozen=True)
class AllocClosure(Instruction):
    """A closure of VM function ``func_index`` capturing ``free_vars`` (its first parameters)."""

    dst: int
    func_index: int
    free_vars: tuple

    def text(self) -> str:
        return f"alloc_closure ${self.dst} VMFunc[{self.func_index}] [{_regs(self.free_vars)}]"


@dataclass(frozen=True)
class GetField(Instruction):
    """Field ``field_index`` of the tuple or ADT object in ``$object``."""

    dst: int
    object: int
    field_index: int

    def text(self) -> str:
        return f"get_field ${self.dst} ${self.object}[{self.field_index}]"


@dataclass(frozen=True)
class GetTag(Instruction):
    """The constructor tag of the ADT object in ``$object``, as an int."""

    dst: int
    object: int

    def text(self) -> str:
        return f"get_tag ${self.dst} ${self.object}"


@dataclass(frozen=True)
class If(Instruction):
    """Move by ``true_offset`` when ``$test`` equals ``$target``, else by ``false_offset``."""

    test: int
    target: int
    true_offset: int
    false_offset: int

    def text(self) -> str:
        return (f"if ${self.test} ${self.target} {_offset(self.true_offset)} "
                f"{_offset(self.false_offset)}")


@dataclass(frozen=True)
class Goto(Instruction):
    """Move by ``pc_offset``."""

    pc_offset: int

    def text(self) -> str:
        return f"goto {_offset(self.pc_offset)}"


@dataclass(frozen=True)
class LoadConst(Instruction):
    """Constant ``const_index`` of the executable's pool."""

    dst: int
    const_index: int

    def text(self) -> str:
        return f"load_const ${self.dst} Const[{self.const_index}]"


@dataclass(frozen=True)
class LoadConsti(Instruction):
    """The integer ``value`` (the target of an ``If``)."""

    dst: int
    value: int

    def text(self) -> str:
        return f"load_consti ${self.dst} {self.value}"


@dataclass(frozen=True)
class ShapeOf(Instruction):
    """The shape of the tensor in ``$tensor``, as an int64 tensor."""

    dst: int
    tensor: int

    def text(self) -> str:
        return f"shape_of ${self.dst} ${self.tensor}"


@dataclass(frozen=True)
class ReshapeTensor(Instruction):
    """The tensor in ``$tensor`` seen with the shape in ``$shape`` (no copy)."""

    dst: int
    tensor: int
    shape: int

    def text(self) -> str:
        return f"reshape_tensor ${self.dst} ${self.tensor} ${self.shape}"


@dataclass(frozen=True)
class Fatal(Instruction):
    """Stop with an error: ``message`` says what failed and where in the Relay source;
    ``subject`` (a register, or None) holds the value it failed on, shown in the error."""

    message: str = "fatal"
    subject: Optional[int] = None

    def text(self) -> str:
        return f"fatal  # {self.message}"


@dataclass(frozen=True)
class RefCreate(Instruction):
    """A new reference cell holding ``$value``."""

    dst: int
    value: int

    def text(self) -> str:
        return f"ref_create ${self.dst} ${self.value}"


@dataclass(frozen=True)
class RefRead(Instruction):
    """The value held by the reference in ``$ref``."""

    dst: int
    ref: int

    def text(self) -> str:
        return f"ref_read ${self.dst} ${self.ref}"


@dataclass(frozen=True)
class RefWrite(Instruction):
    """Put ``$value`` in the reference ``$ref``; ``$dst`` gets the empty tuple."""

    dst: int
    ref: int
    value: int

    def text(self) -> str:
        return f"ref_write ${self.dst} ${self.ref} ${self.value}"


@dataclass
class VMFunction:
    """One compiled function: its parameters (captured values first for a closure's code), its
    register file size and its instructions. ``source`` is the Relay it came from."""

    name: str
    params: list
    num_registers: int
    instructions: list
    source: object = None
    closure_arity: int = 0   # how many leading parameters are captured values

    def text(self, index: int) -> str:
        return format_function(self, index)


def format_function(func: VMFunction, index: int) -> str:
    """Relay's listing of a VM function: a header, then one numbered instruction a line."""
    lines = [f"VM Function[{index}]: {func.name}({', '.join('%' + p for p in func.params)})",
             f"# reg file size = {func.num_registers}",
             f"# instruction count = {len(func.instructions)}"]
    width = len(str(max(len(func.instructions) - 1, 0)))
    for pc, ins in enumerate(func.instructions):
        lines.append(f"{pc:>{width}}: {ins.text()}")
    return "\n".join(lines)
