"""The Relay virtual machine: an :class:`Executable` of bytecode and the machine that runs it.

Relay's VM (``src/runtime/vm/vm.cc``) is register based: each call pushes a frame holding its
function's register file and program counter; ``Ret`` pops it and writes the result into the
caller's destination register. The run loop is a ``while`` over instructions with a dispatch
table keyed by instruction class; frames live on a Python list, so a recursion of any depth in
the program (a 100,000-element list folded, a tree of depth 10,000) runs with a constant Python
stack.

Values are the interpreter's (:mod:`relaybench.backends.interpreter`), so results of the two
compare directly: tensors are numpy arrays, tuples are Python tuples, ADT objects are
:class:`~relaybench.backends.interpreter.ConstructorValue`, references are
:class:`~relaybench.backends.interpreter.RefValue`. Closures are :class:`VMClosure` (a VM
function and its captured values); the VM takes them back as arguments.

>>> import numpy as np, relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%n: int32) -> int32 {
...   if (equal(%n, 0)) { 0 } else { add(%n, @main(subtract(%n, 1))) }
... }''')
>>> vm = rb.vm.VirtualMachine(rb.vm.compile(mod, opt_level=0))
>>> vm.invoke("main", np.int32(100))
array(5050, dtype=int32)
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ...errors import ExecutionError, RelayError
from ...ir.types import FuncType, RefType, TensorType, TupleType, TypeCall
from ..interpreter import ConstructorValue, RefValue, _short as _short_tensor, _to_value
from . import bytecode as bc

__all__ = ["Executable", "VirtualMachine", "VMClosure", "Trace"]


def _short(value, depth: int = 3) -> str:
    """A value for an error message, cut ``depth`` levels down: a List of 100,000 elements
    prints as ``Cons(0, Cons(1, Cons(2, ...)))``, without recursion on its length."""
    if isinstance(value, np.generic):
        return repr(value.item())
    if depth <= 1 and (isinstance(value, (tuple, RefValue)) or
                       isinstance(value, ConstructorValue) and value.fields):
        return "..."
    if isinstance(value, ConstructorValue):
        if not value.fields:
            return value.name
        return f"{value.name}({', '.join(_short(f, depth - 1) for f in value.fields)})"
    if isinstance(value, tuple):
        inner = ", ".join(_short(f, depth - 1) for f in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, RefValue):
        return f"ref({_short(value.value, depth - 1)})"
    return _short_tensor(value)


class VMClosure:
    """A function value of the VM: VM function ``func_index`` and the values it captured."""

    __slots__ = ("func_index", "captured", "name")

    def __init__(self, func_index: int, captured: tuple, name: str = ""):
        self.func_index, self.captured, self.name = func_index, tuple(captured), name

    def __repr__(self) -> str:
        return f"<vm closure {self.name or 'fn'}, {len(self.captured)} captured>"


class Executable:
    """The compiled module: VM functions (``functions``, by name in ``global_map``), the
    constant pool, the kernels (``kernels[i]`` is ``PackedFunc[i]``, a
    :class:`~relaybench.backends.build.GroupKernel`), the target and the compiled module.

    ``bytecode`` lists every function's instructions; in a notebook the executable shows each
    function's bytecode next to the Relay it came from.
    """

    def __init__(self, functions: list, global_map: dict, constants: list, kernels: list,
                 target, module, compile_stats=None):
        self.functions = functions
        self.global_map = global_map
        self.constants = constants
        self.kernels = kernels
        self.target = target
        self.module = module
        self.compile_stats = compile_stats

    @property
    def bytecode(self) -> "Bytecode":
        """Every VM function's listing, in index order (a str; in a notebook, a table of each
        function's bytecode beside its Relay)."""
        return Bytecode("\n\n".join(f.text(i) for i, f in enumerate(self.functions)), self)

    def save(self, path) -> None:
        """Write the executable (bytecode, constants, kernels) to one file; see
        :mod:`.serialize`."""
        from .serialize import save_executable
        save_executable(self, path)

    @classmethod
    def load(cls, path) -> "Executable":
        """The executable saved in ``path`` by :meth:`save`; a file that is not one raises
        :class:`~.serialize.ExecutableFormatError` saying why."""
        from .serialize import load_executable
        return load_executable(path)

    def function(self, name: str) -> bc.VMFunction:
        return self.functions[self.global_map[name]]

    def source(self, kind: str = "loops", group: int = 0) -> str:
        """The loop IR (``loops``), LLVM IR (``llvm``) or assembly of kernel ``group``."""
        return self.kernels[group].source(kind)

    def __repr__(self) -> str:
        return (f"Executable({len(self.functions)} functions, {len(self.kernels)} kernels, "
                f"{len(self.constants)} constants, target {self.target})")

    def _repr_html_(self) -> str:
        import html as _html
        rows = []
        for i, f in enumerate(self.functions):
            relay = ""
            if f.source is not None:
                relay = f.source.astext(show_types=False) if hasattr(f.source, "astext") \
                    else str(f.source)
            rows.append("<tr><td style='vertical-align:top;text-align:left'><pre>"
                        f"{_html.escape(f.text(i))}</pre></td>"
                        "<td style='vertical-align:top;text-align:left'><pre>"
                        f"{_html.escape(relay)}</pre></td></tr>")
        return ("<table><tr><th>bytecode</th><th>Relay</th></tr>" + "".join(rows) + "</table>"
                f"<p>{_html.escape(repr(self))}</p>")


class Bytecode(str):
    """The listing of an executable: a str that a notebook shows as HTML, each function's
    instructions next to the Relay it came from."""

    def __new__(cls, text: str, exe: Executable):
        self = super().__new__(cls, text)
        self.exe = exe
        return self

    def _repr_html_(self) -> str:
        return self.exe._repr_html_()


class _Frame:
    __slots__ = ("code", "pc", "regs", "ret_dst", "func")

    def __init__(self, func: bc.VMFunction, args):
        self.func = func
        self.code = func.instructions
        self.pc = 0
        regs = list(args)
        regs.extend([None] * (func.num_registers - len(regs)))
        self.regs = regs
        self.ret_dst = None


def _buffer(value) -> np.ndarray:
    """A tensor value as a kernel argument: a C-contiguous, aligned numpy array."""
    if type(value) is np.ndarray and value.flags.c_contiguous and value.flags.aligned:
        return value
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        return np.require(np.asarray(value), requirements=("C", "A"))
    raise ExecutionError(f"a kernel takes tensors, got {_short(value)}")


def _aligned(nbytes: int, alignment: int) -> np.ndarray:
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    offset = (-raw.ctypes.data) % alignment
    return raw[offset:offset + nbytes]


def _one_line(value) -> str:
    """A register's value on one line of a trace: a tensor as its type and first elements."""
    if isinstance(value, np.ndarray) and value.ndim > 0:
        flat = value.reshape(-1)
        head = ", ".join(np.format_float_positional(v, precision=4, trim="-")
                         if value.dtype.kind == "f" else str(v) for v in flat[:3].tolist())
        more = ", ..." if flat.size > 3 else ""
        return f"{value.dtype}{list(value.shape)} [{head}{more}]"
    return " ".join(_short(value, 2).split())


class Trace:
    """The instructions a run executed (:meth:`VirtualMachine.trace`): ``steps`` holds one row
    per recorded instruction (``step``, ``depth``, ``function``, ``pc``, ``instruction``,
    ``value``); it prints as a table and renders as one in a notebook."""

    def __init__(self, limit: int):
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValueError(f"trace: limit must be an int >= 0, got {limit!r}")
        self.limit = limit
        self.steps: list = []
        self.executed = 0
        self.result = None
        self._pending = None     # (row, frame, register) whose value shows once it is written

    def record(self, depth: int, frame, ins) -> None:
        self._settle()
        self.executed += 1
        if len(self.steps) >= self.limit:
            return
        row = {"step": self.executed - 1, "depth": depth, "function": frame.func.name,
               "pc": frame.pc, "instruction": ins.text(), "value": ""}
        self.steps.append(row)
        if isinstance(ins, bc.Ret):
            row["value"] = _one_line(frame.regs[ins.result])
        elif not isinstance(ins, (bc.Invoke, bc.InvokeClosure)) and getattr(ins, "dst", None) is not None:
            # fresh storage and the tensors made in it hold whatever was there: their size and
            # type only
            fresh = isinstance(ins, (bc.AllocStorage, bc.AllocTensor, bc.AllocTensorReg))
            self._pending = (row, frame, ins.dst, fresh)

    def _settle(self) -> None:
        if self._pending is not None:
            row, frame, dst, fresh = self._pending
            self._pending = None
            value = frame.regs[dst] if dst < len(frame.regs) else None
            if value is None:
                return
            if fresh and isinstance(value, np.ndarray):
                row["value"] = (f"{value.nbytes} bytes" if value.dtype == np.uint8 and value.ndim == 1
                                else f"{value.dtype}{list(value.shape)} (not written yet)")
            else:
                row["value"] = _one_line(value)

    def table(self):
        from ..._table import Table
        self._settle()
        rows = [dict(r, instruction=("  " * r["depth"]) + r["instruction"]) for r in self.steps]
        return Table(rows)

    def __str__(self) -> str:
        more = self.executed - len(self.steps)
        return str(self.table()) + (f"\n... {more} more instructions" if more > 0 else "")

    __repr__ = __str__

    def _repr_html_(self) -> str:
        more = self.executed - len(self.steps)
        tail = f"<p>... {more} more instructions</p>" if more > 0 else ""
        return self.table()._repr_html_() + tail


class VirtualMachine:
    """Runs an :class:`Executable`. ``invoke(name, *args)`` calls a global function;
    ``invoke_closure(closure, *args)`` a closure the VM returned."""

    def __init__(self, exe: Executable, num_threads: Optional[int] = None):
        self.exe = exe
        self.num_threads = num_threads
        self._kernels = [(k.compiled, tuple(k.constants), k.name) for k in exe.kernels]
        self._handlers = {
            bc.Move: self._move, bc.Ret: None, bc.Invoke: None, bc.InvokeClosure: None,
            bc.InvokePacked: self._invoke_packed, bc.AllocStorage: self._alloc_storage,
            bc.AllocTensor: self._alloc_tensor, bc.AllocTensorReg: self._alloc_tensor_reg,
            bc.AllocADT: self._alloc_adt, bc.AllocClosure: self._alloc_closure,
            bc.GetField: self._get_field, bc.GetTag: self._get_tag, bc.If: self._if,
            bc.Goto: self._goto, bc.LoadConst: self._load_const, bc.LoadConsti: self._load_consti,
            bc.ShapeOf: self._shape_of, bc.ReshapeTensor: self._reshape_tensor,
            bc.Fatal: self._fatal, bc.RefCreate: self._ref_create, bc.RefRead: self._ref_read,
            bc.RefWrite: self._ref_write,
        }

    # ---- public ------------------------------------------------------------------------------
    def invoke(self, name: str = "main", *args, **kwargs):
        """Call global ``@name`` on ``args`` (in order, or by parameter name); the inputs are
        checked against the parameters' types, as the interpreter checks them."""
        index = self.exe.global_map.get(name)
        if index is None:
            raise ExecutionError(f"no function @{name} in the executable (have: "
                                 f"{', '.join('@' + n for n in self.exe.global_map)})")
        func = self.exe.functions[index]
        if func.closure_arity:
            raise ExecutionError(f"@{name} builds a closure; call it from the program")
        params = list(func.source.params) if func.source is not None else []
        values = _bind_arguments(f"@{name}", params, args, kwargs)
        return self._execute(func, values)

    def run(self, *args, **kwargs):
        """``invoke("main", ...)``."""
        return self.invoke("main", *args, **kwargs)

    def trace(self, name: str = "main", *args, limit: int = 200, **kwargs) -> "Trace":
        """Run ``@name`` as :meth:`invoke` does, recording its first ``limit`` instructions: for
        each the call depth, the VM function, the pc, the instruction and the value it wrote (a
        call's value shows at its ``ret``). The run goes on to the end after the last recorded
        step; ``Trace.result`` is its result and ``Trace.executed`` how many instructions it ran.

        >>> import numpy as np, relaybench as rb
        >>> mod = rb.parse('''#[version = "0.0.5"]
        ... def @main(%n: int32) -> int32 {
        ...   if (equal(%n, 0)) { 0 } else { add(%n, @main(subtract(%n, 1))) }
        ... }''')
        >>> t = rb.vm.VirtualMachine(rb.vm.compile(mod, opt_level=0)).trace("main", np.int32(3), limit=4)
        >>> t.result, len(t.steps), t.executed > 4
        (array(6, dtype=int32), 4, True)
        >>> t.steps[0]["function"], t.steps[0]["pc"]
        ('main', 0)
        """
        index = self.exe.global_map.get(name)
        if index is None:
            raise ExecutionError(f"no function @{name} in the executable (have: "
                                 f"{', '.join('@' + n for n in self.exe.global_map)})")
        func = self.exe.functions[index]
        params = list(func.source.params) if func.source is not None else []
        values = _bind_arguments(f"@{name}", params, args, kwargs)
        trace = Trace(limit)
        trace.result = self._execute(func, values, trace)
        return trace

    def invoke_closure(self, closure: VMClosure, *args):
        """Call a closure value on ``args``."""
        if not isinstance(closure, VMClosure):
            raise ExecutionError("invoke_closure takes a closure of this VM, not "
                                 f"{_short(closure)}")
        func = self.exe.functions[closure.func_index]
        n = len(func.params) - len(closure.captured)
        if len(args) != n:
            raise ExecutionError(f"{func.name} takes {n} arguments, got {len(args)}")
        return self._execute(func, list(closure.captured) + [_to_value(a) for a in args])

    # ---- the machine ---------------------------------------------------------------------------
    def _execute(self, func: bc.VMFunction, args: list, trace: Optional["Trace"] = None):
        functions = self.exe.functions
        handlers = self._handlers
        frames: list = []
        frame = _Frame(func, args)
        while True:
            ins = frame.code[frame.pc]
            cls = type(ins)
            if trace is not None:
                trace.record(len(frames), frame, ins)
            if cls is bc.Invoke:
                callee = _Frame(functions[ins.func_index], [frame.regs[r] for r in ins.args])
                callee.ret_dst = ins.dst
                frames.append(frame)
                frame = callee
            elif cls is bc.InvokeClosure:
                closure = frame.regs[ins.closure]
                if not isinstance(closure, VMClosure):
                    raise ExecutionError(f"@{frame.func.name}: cannot call {_short(closure)}: it "
                                         "is not a function")
                target = functions[closure.func_index]
                args = list(closure.captured)
                args.extend(frame.regs[r] for r in ins.args)
                if len(args) != len(target.params):
                    raise ExecutionError(f"@{frame.func.name}: {target.name} takes "
                                         f"{len(target.params) - len(closure.captured)} arguments, "
                                         f"got {len(ins.args)}")
                callee = _Frame(target, args)
                callee.ret_dst = ins.dst
                frames.append(frame)
                frame = callee
            elif cls is bc.Ret:
                value = frame.regs[ins.result]
                if not frames:
                    return value
                dst = frame.ret_dst
                frame = frames.pop()
                frame.regs[dst] = value
                frame.pc += 1
            else:
                handlers[cls](frame, ins)

    # one method per instruction: each reads and writes the frame's registers and moves its pc
    def _move(self, frame, ins):
        frame.regs[ins.dst] = frame.regs[ins.src]
        frame.pc += 1

    def _invoke_packed(self, frame, ins):
        kernel, constants, name = self._kernels[ins.packed_index]
        regs = frame.regs
        arrays = [_buffer(regs[r]) for r in ins.args]
        n_in = ins.arity - ins.output_size
        try:
            if self.num_threads is None:
                kernel(*arrays[:n_in], *constants, *arrays[n_in:])
            else:
                kernel(*arrays[:n_in], *constants, *arrays[n_in:], num_threads=self.num_threads)
        except RelayError as err:
            raise ExecutionError(f"@{frame.func.name}: kernel {name}"
                                 f"{' at ' + str(ins.span) if ins.span else ''}: {err}") from err
        except (TypeError, ValueError) as err:
            raise ExecutionError(f"@{frame.func.name}: kernel {name}"
                                 f"{' at ' + str(ins.span) if ins.span else ''}: {err}") from err
        frame.pc += 1

    def _alloc_storage(self, frame, ins):
        size = ins.size
        if ins.shape_register is not None:   # sized at run time, from a shape function
            shape = np.asarray(frame.regs[ins.shape_register]).reshape(-1)
            if (shape < 0).any():
                raise ExecutionError(f"@{frame.func.name}: a tensor of shape {shape.tolist()}")
            size = int(np.prod(shape, dtype=np.int64)) * np.dtype(ins.dtype_hint).itemsize
        frame.regs[ins.dst] = _aligned(size, ins.alignment)
        frame.pc += 1

    def _alloc_tensor(self, frame, ins):
        storage = frame.regs[ins.storage]
        frame.regs[ins.dst] = np.ndarray(ins.shape, dtype=ins.dtype, buffer=storage,
                                         offset=ins.offset)
        frame.pc += 1

    def _alloc_tensor_reg(self, frame, ins):
        storage = frame.regs[ins.storage]
        shape = tuple(int(d) for d in np.asarray(frame.regs[ins.shape_register]).reshape(-1))
        frame.regs[ins.dst] = np.ndarray(shape, dtype=ins.dtype, buffer=storage, offset=ins.offset)
        frame.pc += 1

    def _alloc_adt(self, frame, ins):
        regs = frame.regs
        fields = tuple(regs[r] for r in ins.fields)
        frame.regs[ins.dst] = fields if ins.constructor is None else \
            ConstructorValue(ins.constructor, fields)
        frame.pc += 1

    def _alloc_closure(self, frame, ins):
        regs = frame.regs
        frame.regs[ins.dst] = VMClosure(ins.func_index, tuple(regs[r] for r in ins.free_vars),
                                        self.exe.functions[ins.func_index].name)
        frame.pc += 1

    def _get_field(self, frame, ins):
        obj = frame.regs[ins.object]
        if isinstance(obj, tuple):
            fields = obj
        elif isinstance(obj, ConstructorValue):
            fields = obj.fields
        else:
            raise ExecutionError(f"@{frame.func.name}: field {ins.field_index} of "
                                 f"{_short(obj)}, which is not a tuple or an ADT object")
        if ins.field_index >= len(fields):
            raise ExecutionError(f"@{frame.func.name}: field {ins.field_index} of "
                                 f"{_short(obj)}, which has {len(fields)}")
        frame.regs[ins.dst] = fields[ins.field_index]
        frame.pc += 1

    def _get_tag(self, frame, ins):
        obj = frame.regs[ins.object]
        if not isinstance(obj, ConstructorValue):
            raise ExecutionError(f"@{frame.func.name}: the tag of {_short(obj)}, which is not an "
                                 "ADT object")
        frame.regs[ins.dst] = obj.tag
        frame.pc += 1

    def _if(self, frame, ins):
        regs = frame.regs
        frame.pc += ins.true_offset if regs[ins.test] == regs[ins.target] else ins.false_offset

    def _goto(self, frame, ins):
        frame.pc += ins.pc_offset

    def _load_const(self, frame, ins):
        frame.regs[ins.dst] = self.exe.constants[ins.const_index]
        frame.pc += 1

    def _load_consti(self, frame, ins):
        frame.regs[ins.dst] = ins.value
        frame.pc += 1

    def _shape_of(self, frame, ins):
        frame.regs[ins.dst] = np.array(np.shape(frame.regs[ins.tensor]), dtype="int64")
        frame.pc += 1

    def _reshape_tensor(self, frame, ins):
        shape = tuple(int(d) for d in np.asarray(frame.regs[ins.shape]).reshape(-1))
        frame.regs[ins.dst] = np.reshape(_buffer(frame.regs[ins.tensor]), shape)
        frame.pc += 1

    def _fatal(self, frame, ins):
        if ins.subject is not None:
            raise ExecutionError(f"{ins.message}: {_short(frame.regs[ins.subject])}")
        raise ExecutionError(ins.message)

    def _ref_create(self, frame, ins):
        frame.regs[ins.dst] = RefValue(frame.regs[ins.value])
        frame.pc += 1

    def _ref_read(self, frame, ins):
        ref = frame.regs[ins.ref]
        if not isinstance(ref, RefValue):
            raise ExecutionError(f"@{frame.func.name}: ref_read of {_short(ref)}, not a reference")
        frame.regs[ins.dst] = ref.value
        frame.pc += 1

    def _ref_write(self, frame, ins):
        ref = frame.regs[ins.ref]
        if not isinstance(ref, RefValue):
            raise ExecutionError(f"@{frame.func.name}: ref_write to {_short(ref)}, not a reference")
        ref.value = frame.regs[ins.value]
        frame.regs[ins.dst] = ()
        frame.pc += 1


# ---- inputs --------------------------------------------------------------------------------------

def _bind_arguments(where: str, params: list, args: tuple, kwargs: dict) -> list:
    """The argument values in parameter order, each checked against its parameter's type."""
    if kwargs:
        by_name = {p.name_hint: i for i, p in enumerate(params)}
        args = list(args) + [None] * (len(params) - len(args))
        for name, value in kwargs.items():
            if name not in by_name:
                raise ExecutionError(f"{where}: no parameter named {name!r} (have: "
                                     f"{', '.join(p.name_hint for p in params)})", input_name=name)
            if args[by_name[name]] is not None:
                raise ExecutionError(f"{where}: input {name!r} given twice", input_name=name)
            args[by_name[name]] = value
    if len(args) != len(params):
        raise ExecutionError(f"{where} takes {len(params)} arguments, got {len(args)}",
                             expected=len(params), given=len(args))
    values = []
    sizes: dict = {}     # symbolic extent -> (its value, the input that set it)
    for p, a in zip(params, args):
        if a is None:
            raise ExecutionError(f"{where}: missing argument %{p.name_hint}",
                                 input_name=p.name_hint)
        values.append(_check_value(p, _to_value(a), sizes))
    return values


def _check_symbolic(param, t: TensorType, shape: tuple, sizes: dict) -> None:
    """Every symbolic extent ``n`` of the parameters takes one value: the first input that has
    it sets it, the others must agree (``x: Tensor[(n, 4)]``, ``y: Tensor[(n,)]``)."""
    from ...ir.symbolic import SymVar
    for axis, (d, s) in enumerate(zip(t.shape, shape)):
        if not isinstance(d, SymVar):
            continue
        seen = sizes.setdefault(d.name, (s, param.name_hint))
        if seen[0] != s:
            raise ExecutionError(f"input %{param.name_hint}: axis {axis} is {d.name} = {s}, but "
                                 f"%{seen[1]} gave {d.name} = {seen[0]}",
                                 input_name=param.name_hint, expected=seen[0], given=s)


def _kind_of(value) -> str:
    return _KIND_NAMES.get(type(value), type(value).__name__)


_KIND_NAMES = {np.ndarray: "a tensor", tuple: "a tuple", ConstructorValue: "an ADT object",
               RefValue: "a reference", VMClosure: "a closure"}

#: parameter type class -> (the value class it takes, what to call it in an error)
_EXPECTED = {TensorType: (np.ndarray, "a tensor"), TupleType: (tuple, "a tuple"),
             TypeCall: (ConstructorValue, "an ADT object"), RefType: (RefValue, "a reference"),
             FuncType: (VMClosure, "a closure")}


_NUMPY_DTYPES: dict = {}


def _numpy_dtype(name: str):
    """``np.dtype(name)``, made once per name (comparing dtype objects is faster than their
    names, which numpy computes on every access)."""
    found = _NUMPY_DTYPES.get(name)
    if found is None:
        found = _NUMPY_DTYPES[name] = np.dtype(name)
    return found


def _check_value(param, value, sizes: Optional[dict] = None):
    """``value`` as the argument of ``param``: a tensor checked for dtype and shape (and made
    contiguous; each symbolic extent checked against ``sizes``, the values the inputs before it
    gave), other values checked to be of the parameter type's kind."""
    t = param.checked_type or param.type_annotation
    expected = _EXPECTED.get(type(t))
    if expected is None:
        return value
    cls, what = expected
    if not isinstance(value, cls):
        raise ExecutionError(f"input %{param.name_hint}: expected {what} of type {t}, given "
                             f"{_kind_of(value)} {_short(value)}", input_name=param.name_hint,
                             expected=str(t), given=_kind_of(value))
    if cls is np.ndarray:
        if value.dtype != _numpy_dtype(t.dtype):
            raise ExecutionError(f"input %{param.name_hint}: expected dtype {t.dtype}, given "
                                 f"{value.dtype.name}", input_name=param.name_hint,
                                 expected=t.dtype, given=value.dtype.name)
        if len(value.shape) != len(t.shape) or any(
                isinstance(d, int) and d != s for d, s in zip(t.shape, value.shape)):
            raise ExecutionError(f"input %{param.name_hint}: expected shape {t}, given "
                                 f"{list(value.shape)}", input_name=param.name_hint,
                                 expected=str(t), given=tuple(value.shape))
        if sizes is not None:
            _check_symbolic(param, t, value.shape, sizes)
        flags = value.flags
        if flags.c_contiguous and flags.aligned:
            return value
        return np.require(value, requirements=("C", "A"))
    if cls is tuple and len(value) != len(t.fields):
        raise ExecutionError(f"input %{param.name_hint}: expected a {len(t.fields)}-tuple of type "
                             f"{t}, given a {len(value)}-tuple", input_name=param.name_hint,
                             expected=str(t), given=len(value))
    if cls is ConstructorValue:
        adt = getattr(value.constructor.belong_to, "name_hint", None)
        want = getattr(t.func, "name_hint", None)
        if adt is not None and want is not None and adt != want:
            raise ExecutionError(f"input %{param.name_hint}: expected {t}, given a value of "
                                 f"{adt} ({_short(value)})", input_name=param.name_hint,
                                 expected=str(t), given=adt)
    return value
