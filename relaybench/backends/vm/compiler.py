"""The VM compiler: a Relay module in, an :class:`~.vm.Executable` of bytecode out.

Relay's VM compiler (``src/relay/backend/vm/compiler.cc``), in its steps:

1. the ``params`` are bound into ``@main`` as constants;
2. Relay's default pipeline (:func:`relaybench.passes.pipelines.optimize`, FuseOps last) runs on
   every function of the module at ``opt_level``, with the target in the PassContext's
   ``config["relay.target"]`` as ``rb.build`` does;
3. :class:`~relaybench.passes.ToANormalForm` names every intermediate value, and
   :class:`~relaybench.passes.LambdaLift` turns each local closure into a global function whose
   first parameters are the captured variables (``Closure=1``);
4. each global function becomes a :class:`~.bytecode.VMFunction`. A call of a ``Primitive``
   (fused) function becomes ``AllocStorage`` and ``AllocTensor`` for its outputs (their static
   shapes read from the types) and ``InvokePacked`` of a kernel compiled by the graph
   executor's :func:`~relaybench.backends.build.compile_groups` (the same lowering, the same
   kernels, the same disk cache); a fused group that only reshapes becomes ``ReshapeTensor``
   (a view, no kernel), and ``shape_of`` of a tensor the ``ShapeOf`` instruction. A call whose
   types hold ``?`` or a symbolic ``n`` gets its outputs' shapes at run time: ``ShapeOf`` of its
   inputs, ``InvokePacked`` of the group's shape function, ``AllocStorage`` sized from each
   shape and ``AllocTensorReg`` (:mod:`.dynamic`); its kernel is compiled once for the symbolic
   extents where the kernel layer can (:mod:`.symbolic`), else once per shape met. A call of a global is ``Invoke``, of a lifted closure global
   ``AllocClosure``, of any other function value ``InvokeClosure``; constructors and tuples are
   ``AllocADT``; a ``match`` is a chain of ``GetTag`` / ``If`` tests per clause with ``GetField``
   for the bound fields (nested patterns included), ending in ``Fatal`` when no clause accepts
   the value; ``if`` tests its bool tensor against ``LoadConsti 1``. References use
   ``RefCreate``, ``RefRead`` and ``RefWrite``, beyond Relay's first instruction set.

Memory: a function's tensors are allocated where they are made. A storage block whose tensor is
dead (no later instruction of the function reads it, and it never escapes into a tuple, an ADT
object, a closure, a reference, a call's arguments or the result) is handed to a later
allocation of the same size in the same function (:func:`plan_storage_reuse`).

The compiler is iterative: expressions are compiled by generators driven from an explicit
stack, so the depth of a program's nesting never reaches Python's recursion limit.

>>> import relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%c: bool, %x: Tensor[(2), float32]) {
...   if (%c) { add(%x, %x) } else { %x }
... }''')
>>> exe = rb.vm.compile(mod, opt_level=0)
>>> print(exe.bytecode)
VM Function[0]: main(%c, %x)
# reg file size = 6
# instruction count = 9
0: load_consti $2 1
1: if $0 $2 +1 +6
2: alloc_storage $4 size=8 alignment=64 float32 cpu
3: alloc_tensor $5 $4 offset=0 shape=[2] float32
4: invoke_packed PackedFunc[0] (in: $1, out: $5)  # fused_add
5: move $3 $5
6: goto +2
7: move $3 $1
8: ret $3
"""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from ...errors import CompileError
from ...ir.expr import (Call, Constant, Constructor, Function, GlobalVar, If, Let, Match, Op,
                        PatternConstructor, PatternTuple, PatternVar, PatternWildcard, RefCreate,
                        RefRead, RefWrite, Tuple, TupleGetItem, Var)
from ...ir.module import IRModule
from ...ir.types import TensorType, TupleType
from . import bytecode as bc
from .dynamic import _nest, is_static_type

__all__ = ["compile", "prepare_module", "plan_storage_reuse"]

#: bytes every storage block is aligned to (the kernels' vector loads want 64)
ALIGNMENT = 64

#: operators that only change how a tensor's elements are indexed: a fused group made of one of
#: them becomes ``ReshapeTensor`` (a view) instead of a kernel copying the data
RESHAPE_OPS = frozenset({"reshape", "squeeze", "expand_dims", "nn.batch_flatten", "reshape_like"})


def _as_module(mod) -> IRModule:
    if isinstance(mod, IRModule):
        return mod
    if isinstance(mod, Function):
        return IRModule.from_expr(mod)
    raise TypeError(f"vm.compile takes an IRModule or a Function, not {type(mod).__name__}")


def prepare_module(mod, target="llvm", params: Optional[dict] = None, opt_level: int = 3, *,
                   instruments=(), required_pass=(), disabled_pass=(),
                   config: Optional[dict] = None) -> IRModule:
    """Steps 1-3 of the compiler: ``mod`` bound, optimized and fused, in A-normal form, with
    every local closure lifted to a global function."""
    from ...passes import InferType, LambdaLift, ToANormalForm
    from ...passes.infra import PassContext
    from ..build import optimized_module, pass_config
    from ..target import Target

    target = Target.parse(target)
    mod = _as_module(mod)
    if target.kind == "opencl":
        from ..opencl import get_device
        get_device(target)  # no matching device: say so before optimizing
    mod, _ = optimized_module(mod, params, target, opt_level, instruments, required_pass,
                              disabled_pass, config, graph=False)
    config = pass_config(config, target)
    with PassContext(opt_level=opt_level, required_pass=("ToANormalForm", "LambdaLift"),
                     config=config, instruments=instruments):
        mod = InferType()(mod)
        mod = ToANormalForm()(mod)
        mod = LambdaLift()(mod)
        mod = InferType()(mod)
    return mod


def compile(mod, target="llvm", params: Optional[dict] = None, opt_level: int = 3, *,
            instruments=(), required_pass=(), disabled_pass=(), config: Optional[dict] = None):
    """Compile every global function of ``mod`` to VM bytecode and its fused groups to kernels
    for ``target``; returns an :class:`~.vm.Executable`.

    ``params`` (name -> array) are bound into ``@main`` first; ``opt_level`` and the other
    keywords make the PassContext of Relay's default pipeline, as for ``rb.build``. Raises
    :class:`~relaybench.errors.CompileError` naming the function and the node it cannot compile.
    """
    from ..build import CompileStats, _jit_stats, _link_kernels, compile_groups
    from ..target import Target
    from .vm import Executable

    start = time.perf_counter()
    target = Target.parse(target)
    stats = CompileStats()
    jit_before = _jit_stats()
    prepared = prepare_module(mod, target, params, opt_level, instruments=instruments,
                              required_pass=required_pass, disabled_pass=disabled_pass,
                              config=config)
    stats.optimize_seconds = time.perf_counter() - start
    module = _ModuleCompiler(prepared)
    functions = module.run()
    static = [f for f, kind in zip(module.packed, module.packed_kinds) if kind == "kernel"]
    kernels = compile_groups(static, target, stats)
    _link_kernels(kernels, target, stats)
    packed = [_packed_entry(f, kind, kernels, target, stats)
              for f, kind in zip(module.packed, module.packed_kinds)]
    for func in functions:   # the kernels' names, known now, into the listings
        func.instructions = [
            bc.InvokePacked(i.packed_index, i.arity, i.output_size, i.args,
                            packed[i.packed_index].name, i.span)
            if isinstance(i, bc.InvokePacked) else i for i in func.instructions]
    jit_after = _jit_stats()
    for key, attr in (("compiled", "llvm_compiled"), ("from_disk", "from_disk"),
                      ("from_memory", "from_memory")):
        setattr(stats, attr, jit_after.get(key, 0) - jit_before.get(key, 0))
    stats.groups = module.packed_calls
    stats.kernels = len({id(k) for k in packed})
    stats.total_seconds = time.perf_counter() - start
    return Executable(functions, dict(module.global_index), module.constants, packed, target,
                      prepared, stats)


def packed_kinds_of(exe) -> list:
    """Per ``PackedFunc[i]`` of ``exe``: ``kernel``, ``shape`` or ``dynamic`` (see
    :func:`_packed_entry`)."""
    from .dynamic import DynamicKernel, ShapeFuncKernel
    return ["shape" if isinstance(k, ShapeFuncKernel) else
            "dynamic" if isinstance(k, DynamicKernel) else "kernel" for k in exe.kernels]


def _packed_entry(func: Function, kind: str, kernels: dict, target, stats):
    """``PackedFunc[i]`` of the executable: a compiled static group, the shape function of a
    group (``shape``), or the kernel of a group whose types are not static (``dynamic``)."""
    from ..lowering import group_name
    from .dynamic import DynamicKernel, ShapeFuncKernel
    if kind == "kernel":
        return kernels[func]
    if kind == "shape":
        return ShapeFuncKernel(func, f"{group_name(func)}_shape_func", target)
    return DynamicKernel(func, group_name(func), target, stats)


# ---------------------------------------------------------------------------------------------
# the module: one VMFunction per global, kernels and constants shared

class _ModuleCompiler:
    def __init__(self, mod: IRModule):
        self.mod = mod
        self.global_index: dict = {}
        self.functions: list = []
        self.constants: list = []
        self._constant_index: dict = {}
        self.packed: list = []           # distinct Primitive functions, in order of first use
        self.packed_kinds: list = []     # per entry: "kernel", "shape" or "dynamic"
        self._packed_index: dict = {}    # (kind, structural hash) -> [(function, index)]
        self._by_identity: dict = {}
        self.packed_calls = 0
        self._constructor_funcs: dict = {}
        self._op_groups: dict = {}        # see op_group
        for gv, func in mod.functions.items():
            if func.is_primitive:
                continue
            self.global_index[gv.name_hint] = len(self.functions)
            self.functions.append(None)

    def run(self) -> list:
        for gv, func in self.mod.functions.items():
            if func.is_primitive:
                continue
            index = self.global_index[gv.name_hint]
            self.functions[index] = _FunctionCompiler(self, gv.name_hint, func).run()
        return self.functions

    # -- shared tables
    def is_closure_global(self, gv: GlobalVar) -> bool:
        func = self.mod[gv]
        return isinstance(func.body, Function) and bool(func.body.attrs.get("Closure"))

    def function_index(self, gv: GlobalVar, where: str) -> int:
        index = self.global_index.get(gv.name_hint)
        if index is None:
            raise CompileError(f"{where}: @{gv.name_hint} is not a function of the module")
        return index

    def constant(self, node: Constant) -> int:
        index = self._constant_index.get(node)
        if index is None:
            from ..graph_executor import contiguous
            index = self._constant_index[node] = len(self.constants)
            self.constants.append(contiguous(node.data))
        return index

    def shape_constant(self, shape: tuple) -> int:
        key = ("shape", tuple(shape))
        index = self._constant_index.get(key)
        if index is None:
            index = self._constant_index[key] = len(self.constants)
            self.constants.append(np.array(shape, dtype="int64"))
        return index

    def packed_function(self, func: Function, kind: str = "kernel") -> int:
        """The kernel index of ``func``; structurally equal groups share one. ``kind``: the
        group's compiled kernel (``kernel``), its shape function (``shape``) or its kernel for
        types that are not static (``dynamic``)."""
        from ...ir.structural import structural_equal, structural_hash
        if kind != "shape":
            self.packed_calls += 1
        index = self._by_identity.get((kind, func))
        if index is not None:
            return index
        bucket = self._packed_index.setdefault((kind, structural_hash(func)), [])
        for other, index in bucket:
            if structural_equal(other, func):
                break
        else:
            index = len(self.packed)
            self.packed.append(func)
            self.packed_kinds.append(kind)
            bucket.append((func, index))
        self._by_identity[(kind, func)] = index
        return index

    def op_group(self, call: Call, op_call: Call, make, inline, is_scalar) -> tuple:
        """The Primitive function of a group that is one operator call (``op_call``, of its
        parameters in order: every group at opt_level 0, or an operator called outside any
        group) called by ``call``, and the positions of the arguments it takes (its scalar
        constants inlined). Groups of one op with equal attrs, argument types and inlined
        scalars share one function, made (``make()``), inlined and type-checked once, and so
        one kernel index without a structural hash: a chain of 20,000 such calls handles a
        handful of groups, not 20,000."""
        key = (op_call.op.name, op_call.attrs, tuple(
            ("scalar", a.data.dtype.name, a.data.item()) if is_scalar(a) else a.checked_type
            for a in call.args))
        try:
            found = self._op_groups.get(key)
        except TypeError:        # an attribute value that does not hash: no sharing
            key, found = None, None
        if found is None:
            func = make()
            kept = [i for i, a in enumerate(call.args) if not is_scalar(a)]
            if len(kept) != len(call.args):
                func, _ = inline(func, list(call.args))
            found = (func, kept)
            if key is not None:
                self._op_groups[key] = found
        return found

    def constructor_function(self, con: Constructor) -> int:
        """A VM function ``fn (fields...) { Con(fields...) }``: a constructor used as a value."""
        index = self._constructor_funcs.get(con)
        if index is None:
            n = len(con.inputs)
            code = [bc.AllocADT(n, con.tag, tuple(range(n)), con), bc.Ret(n)]
            index = self._constructor_funcs[con] = len(self.functions)
            self.functions.append(bc.VMFunction(con.name_hint, [f"f{i}" for i in range(n)], n + 1,
                                                code, source=con))
        return index


# ---------------------------------------------------------------------------------------------
# one function: expressions compiled by generators on an explicit stack

def _drive(root, visit):
    """Run the generator ``visit(root)``; each expression a generator yields is compiled by a
    generator of its own, pushed on a list, and its register sent back."""
    stack = [visit(root)]
    value = None
    while stack:
        try:
            sub = stack[-1].send(value)
        except StopIteration as stop:
            stack.pop()
            value = stop.value
            continue
        stack.append(visit(sub))
        value = None
    return value


def _where(node) -> str:
    span = getattr(node, "span", None)
    return f" at {span}" if span else ""


class _FunctionCompiler:
    def __init__(self, module: _ModuleCompiler, name: str, func: Function):
        self.module = module
        self.name = name
        self.func = func
        self.code: list = []
        self.regions: list = []      # per instruction: the branch regions it lies in
        self._region: tuple = ()
        self._region_count = 0
        self.env: dict = {}
        self.num_registers = 0

    def new_register(self) -> int:
        self.num_registers += 1
        return self.num_registers - 1

    def emit(self, ins) -> int:
        self.code.append(ins)
        self.regions.append(self._region)
        return len(self.code) - 1

    def enter_region(self) -> tuple:
        saved = self._region
        self._region_count += 1
        self._region = saved + (self._region_count,)
        return saved

    def run(self) -> bc.VMFunction:
        func = self.func
        params = list(func.params)
        closure_arity = 0
        if isinstance(func.body, Function) and func.body.attrs.get("Closure"):
            closure_arity = len(params)
            params += list(func.body.params)
            body = func.body.body
        else:
            body = func.body
        for p in params:
            self.env[p] = self.new_register()
        result = _drive(body, self.visit)
        self.emit(bc.Ret(result))
        code = plan_storage_reuse(self.code, self.regions)
        return bc.VMFunction(self.name, [p.name_hint for p in params], self.num_registers, code,
                             source=func, closure_arity=closure_arity)

    def fail(self, node, what: str) -> CompileError:
        return CompileError(f"@{self.name}: {what}{_where(node)}")

    # -- the visitors, one per node class (generators returning the result's register)
    def visit(self, node):
        handler = _VISITORS.get(type(node))
        if handler is None:
            raise self.fail(node, f"the VM cannot compile a {type(node).__name__}")
        return handler(self, node)

    def visit_var(self, node: Var):
        reg = self.env.get(node)
        if reg is None:
            raise self.fail(node, f"free variable %{node.name_hint}")
        return reg
        yield  # unreached: makes the visitor a generator, as the others are

    def visit_constant(self, node: Constant):
        dst = self.new_register()
        self.emit(bc.LoadConst(dst, self.module.constant(node)))
        return dst
        yield  # unreached (a generator)

    def visit_global(self, node: GlobalVar):
        if self.module.is_closure_global(node):
            raise self.fail(node, f"@{node.name_hint} makes a closure and must be called")
        dst = self.new_register()
        self.emit(bc.AllocClosure(dst, self.module.function_index(node, f"@{self.name}"), ()))
        return dst
        yield  # unreached (a generator)

    def visit_constructor(self, node: Constructor):
        dst = self.new_register()
        if not node.inputs:
            self.emit(bc.AllocADT(dst, node.tag, (), node))
        else:
            self.emit(bc.AllocClosure(dst, self.module.constructor_function(node), ()))
        return dst
        yield  # unreached (a generator)

    def visit_function(self, node: Function):
        if node.is_primitive:
            raise self.fail(node, "a Primitive function used as a value (it can only be called)")
        raise self.fail(node, "a local function is left (LambdaLift lifts them)")
        yield  # unreached (a generator)

    def visit_op(self, node: Op):
        raise self.fail(node, f"operator {node.name} used as a value (call it in a function)")
        yield  # unreached (a generator)

    def visit_tuple(self, node: Tuple):
        regs = []
        for f in node.fields:
            regs.append((yield f))
        dst = self.new_register()
        self.emit(bc.AllocADT(dst, 0, tuple(regs)))
        return dst

    def visit_get_item(self, node: TupleGetItem):
        obj = yield node.tuple_value
        dst = self.new_register()
        self.emit(bc.GetField(dst, obj, node.index))
        return dst

    def visit_let(self, node: Let):
        while isinstance(node, Let):   # a chain of lets is a loop, not a nesting
            value = node.value
            if isinstance(value, Function) and value.is_primitive:
                self.env[node.var] = value   # called through the variable: InvokePacked
            else:
                self.env[node.var] = yield value
            node = node.body
        return (yield node)

    def visit_if(self, node: If):
        cond = yield node.cond
        one = self.new_register()
        self.emit(bc.LoadConsti(one, 1))
        branch = self.emit(None)
        dst = self.new_register()
        saved = self.enter_region()
        true_reg = yield node.true_branch
        self.emit(bc.Move(true_reg, dst))
        jump = self.emit(None)
        self._region = saved
        self.enter_region()
        false_start = len(self.code)
        false_reg = yield node.false_branch
        self.emit(bc.Move(false_reg, dst))
        self._region = saved
        self.code[branch] = bc.If(cond, one, 1, false_start - branch)
        self.code[jump] = bc.Goto(len(self.code) - jump)
        return dst

    def visit_match(self, node: Match):
        data = yield node.data
        dst = self.new_register()
        jumps_to_end = []
        saved = self._region
        for clause in node.clauses:
            self._region = saved
            self.enter_region()
            failures = self.compile_pattern(clause.lhs, data)
            rhs = yield clause.rhs
            self.emit(bc.Move(rhs, dst))
            jumps_to_end.append(self.emit(None))
            for pc in failures:
                test = self.code[pc]
                self.code[pc] = bc.If(test.test, test.target, 1, len(self.code) - pc)
        self._region = saved
        self.emit(bc.Fatal(f"@{self.name}: no clause of the match{_where(node)} accepts the "
                           "value", subject=data))
        for pc in jumps_to_end:
            self.code[pc] = bc.Goto(len(self.code) - pc)
        return dst

    def compile_pattern(self, pattern, reg: int) -> list:
        """Tests and bindings of one clause's pattern on the value in ``reg``; returns the
        program counters of its ``If`` tests, whose failure offsets the caller fills in."""
        failures = []
        stack = [(pattern, reg)]
        while stack:
            p, r = stack.pop()
            if isinstance(p, PatternWildcard):
                continue
            if isinstance(p, PatternVar):
                self.env[p.var] = r
                continue
            if isinstance(p, PatternConstructor):
                tag = self.new_register()
                self.emit(bc.GetTag(tag, r))
                want = self.new_register()
                self.emit(bc.LoadConsti(want, p.constructor.tag))
                failures.append(self.emit(bc.If(tag, want, 1, 0)))
            elif not isinstance(p, PatternTuple):
                raise self.fail(p, f"unknown pattern {type(p).__name__}")
            fields = []
            for i, sub in enumerate(p.patterns):
                if isinstance(sub, PatternWildcard):
                    continue
                field = self.new_register()
                self.emit(bc.GetField(field, r, i))
                fields.append((sub, field))
            stack.extend(reversed(fields))
        return failures

    def visit_ref_create(self, node: RefCreate):
        value = yield node.value
        dst = self.new_register()
        self.emit(bc.RefCreate(dst, value))
        return dst

    def visit_ref_read(self, node: RefRead):
        ref = yield node.ref
        dst = self.new_register()
        self.emit(bc.RefRead(dst, ref))
        return dst

    def visit_ref_write(self, node: RefWrite):
        ref = yield node.ref
        value = yield node.value
        dst = self.new_register()
        self.emit(bc.RefWrite(dst, ref, value))
        return dst

    def visit_call(self, node: Call):
        callee = node.op
        if isinstance(callee, Var) and isinstance(self.env.get(callee), Function):
            callee = self.env[callee]
        if isinstance(callee, Op) or isinstance(callee, Function) and callee.is_primitive:
            return (yield from self.call_packed(node, callee))
        args = []
        for a in node.args:
            args.append((yield a))
        args = tuple(args)
        dst = self.new_register()
        if isinstance(callee, Constructor):
            if len(callee.inputs) != len(args):
                raise self.fail(node, f"constructor {callee.name_hint} takes "
                                      f"{len(callee.inputs)} fields, got {len(args)}")
            self.emit(bc.AllocADT(dst, callee.tag, args, callee))
        elif isinstance(callee, GlobalVar):
            index = self.module.function_index(callee, f"@{self.name}")
            if self.module.is_closure_global(callee):
                self.emit(bc.AllocClosure(dst, index, args))
            else:
                self.emit(bc.Invoke(dst, index, args))
        else:
            closure = yield callee
            self.emit(bc.InvokeClosure(dst, closure, args))
        return dst

    def call_packed(self, node: Call, callee):
        from ..graph_executor import _inline_scalar_constants, _is_scalar_constant, _wrap_op_call
        from ..lowering import flatten_type
        if node.type_or_none is None:
            raise self.fail(node, "the call is not type-checked")
        op_call = node if isinstance(callee, Op) else _single_op_body(callee)
        if op_call is None:
            func, arg_nodes = callee, list(node.args)
            if any(_is_scalar_constant(a) for a in arg_nodes):
                func, arg_nodes = _inline_scalar_constants(func, arg_nodes)
        else:
            func, kept = self.module.op_group(
                node, op_call, lambda: callee if isinstance(callee, Function)
                else _wrap_op_call(node), _inline_scalar_constants, _is_scalar_constant)
            arg_nodes = [node.args[i] for i in kept]
        regs = []
        for a in arg_nodes:
            regs.append((yield a))
        where = f"@{self.name}: the call of {_group_name(func)}{_where(node)}"
        reshaped = self.reshape_only(func, regs, node, where)
        if reshaped is not None:
            return reshaped
        shape = self.shape_of_only(func, regs)
        if shape is not None:
            return shape
        inputs = []
        for p, r in zip(func.params, regs):
            inputs.extend(self.flatten_register(r, p.checked_type or p.type_annotation))
        if not (is_static_type(node.checked_type) and
                all(is_static_type(p.checked_type or p.type_annotation) for p in func.params)):
            outputs = self.alloc_dynamic_outputs(func, inputs, node)
            index = self.module.packed_function(func, "dynamic")
            self.emit(bc.InvokePacked(index, len(inputs) + len(outputs), len(outputs),
                                      tuple(inputs + outputs), span=node.span))
            return self.nest_registers(node.checked_type, outputs)
        outputs = []
        for t in flatten_type(node.checked_type, where):
            shape = tuple(int(d) for d in t.shape)
            nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(t.dtype).itemsize
            storage = self.new_register()
            self.emit(bc.AllocStorage(storage, nbytes, ALIGNMENT, t.dtype))
            tensor = self.new_register()
            self.emit(bc.AllocTensor(tensor, storage, 0, shape, t.dtype))
            outputs.append(tensor)
        index = self.module.packed_function(func)
        self.emit(bc.InvokePacked(index, len(inputs) + len(outputs), len(outputs),
                                  tuple(inputs + outputs), span=node.span))
        return self.nest_registers(node.checked_type, outputs)

    def reshape_only(self, func: Function, regs: list, node: Call, where: str):
        """``ReshapeTensor`` for a group that is one reshaping operator of its only parameter."""
        body = func.body
        if not (len(func.params) == 1 and isinstance(body, Call) and isinstance(body.op, Op)
                and body.op.name in RESHAPE_OPS and body.args and body.args[0] is func.params[0]
                and all(isinstance(a, Var) for a in body.args[1:])):
            return None
        src, out = func.params[0].checked_type, node.checked_type
        if not (isinstance(src, TensorType) and isinstance(out, TensorType)
                and src.dtype == out.dtype):
            return None
        if is_static_type(out):
            shape = self.new_register()
            self.emit(bc.LoadConst(shape, self.module.shape_constant(tuple(int(d)
                                                                           for d in out.shape))))
        else:
            (shape,) = self.emit_shape_func(func, [regs[0]], node)
        dst = self.new_register()
        self.emit(bc.ReshapeTensor(dst, regs[0], shape))
        return dst

    def shape_of_only(self, func: Function, regs: list):
        """``ShapeOf`` for a group that is ``shape_of`` of its only parameter, a tensor whose
        shape is not static (as Relay's VM does: the shape is read at run time), then a
        ``cast`` kernel when the dtype asked for is not int64. A static shape stays the
        group's kernel, a constant for the code generators that only take static programs."""
        body = func.body
        if not (len(func.params) == 1 and isinstance(body, Call) and isinstance(body.op, Op)
                and body.op.name == "shape_of" and body.args[0] is func.params[0]
                and isinstance(func.params[0].checked_type, TensorType)
                and not is_static_type(func.params[0].checked_type)):
            return None
        shape = self.new_register()
        self.emit(bc.ShapeOf(shape, regs[0]))
        dtype = body.attrs.dtype
        if dtype == "int64":
            return shape
        from ...ir.type_infer import infer_expr
        from ...op import cast
        rank = len(func.params[0].checked_type.shape)
        p = Var("p0", TensorType((rank,), "int64"))
        group = Function([p], cast(p, dtype=dtype)).with_attr("Primitive", 1)
        infer_expr(group)
        storage = self.new_register()
        self.emit(bc.AllocStorage(storage, max(rank, 1) * np.dtype(dtype).itemsize, ALIGNMENT,
                                  dtype))
        out = self.new_register()
        self.emit(bc.AllocTensor(out, storage, 0, (rank,), dtype))
        self.emit(bc.InvokePacked(self.module.packed_function(group), 2, 1, (shape, out)))
        return out

    def emit_shape_func(self, func: Function, inputs: list, node: Call) -> list:
        """``ShapeOf`` of the group's inputs (the tensors themselves for the parameters a data
        dependent operator reads) and ``InvokePacked`` of its shape function; returns the
        registers of the outputs' shapes (int64 tensors, one per output tensor)."""
        from .dynamic import flatten_tensor_types, group_data_params
        try:
            wants_data = group_data_params(func)
        except CompileError as err:
            raise self.fail(node, f"the call of {_group_name(func)}: {err}") from None
        args, k = [], 0
        for p, data in zip(func.params, wants_data):
            n = len(flatten_tensor_types(p.checked_type or p.type_annotation))
            for r in inputs[k:k + n]:
                if data:
                    args.append(r)
                else:
                    shape = self.new_register()
                    self.emit(bc.ShapeOf(shape, r))
                    args.append(shape)
            k += n
        outs = []
        for t in flatten_tensor_types(node.checked_type):
            storage = self.new_register()
            self.emit(bc.AllocStorage(storage, 8 * max(len(t.shape), 1), ALIGNMENT, "int64"))
            tensor = self.new_register()
            self.emit(bc.AllocTensor(tensor, storage, 0, (len(t.shape),), "int64"))
            outs.append(tensor)
        index = self.module.packed_function(func, "shape")
        self.emit(bc.InvokePacked(index, len(args) + len(outs), len(outs), tuple(args + outs),
                                  span=node.span))
        return outs

    def alloc_dynamic_outputs(self, func: Function, inputs: list, node: Call) -> list:
        """The output tensors of a call whose type is not static: the shape function's results,
        then ``AllocStorage`` sized from each shape and ``AllocTensorReg``."""
        from .dynamic import flatten_tensor_types
        shapes = self.emit_shape_func(func, inputs, node)
        outputs = []
        for t, shape in zip(flatten_tensor_types(node.checked_type), shapes):
            storage = self.new_register()
            self.emit(bc.AllocStorage(storage, 0, ALIGNMENT, t.dtype, shape_register=shape))
            tensor = self.new_register()
            self.emit(bc.AllocTensorReg(tensor, storage, 0, shape, t.dtype))
            outputs.append(tensor)
        return outputs

    def flatten_register(self, reg: int, ty) -> list:
        """The registers of the tensors of a value of type ``ty`` (tuples taken apart)."""
        if not isinstance(ty, TupleType):
            return [reg]
        out, stack = [], [(reg, ty)]
        while stack:
            r, t = stack.pop()
            if isinstance(t, TupleType):
                fields = []
                for i, ft in enumerate(t.fields):
                    f = self.new_register()
                    self.emit(bc.GetField(f, r, i))
                    fields.append((f, ft))
                stack.extend(reversed(fields))
            else:
                out.append(r)
        return out

    def nest_registers(self, ty, outputs: list) -> int:
        """The result of a kernel: its one tensor, or tuples (``AllocADT``) of its tensors."""
        if not isinstance(ty, TupleType):
            return outputs[0]
        def alloc_adt(fields: list) -> int:
            dst = self.new_register()
            self.emit(bc.AllocADT(dst, 0, tuple(fields)))
            return dst
        return _nest(ty, outputs, alloc_adt)


def _single_op_body(func: Function):
    """The call when ``func``'s body is one operator call of its parameters, in order."""
    body = func.body
    if (isinstance(body, Call) and isinstance(body.op, Op) and len(body.args) == len(func.params)
            and all(a is p for a, p in zip(body.args, func.params))):
        return body
    return None


def _group_name(func: Function) -> str:
    from ..lowering import group_name
    return group_name(func)


_VISITORS = {
    Var: _FunctionCompiler.visit_var, Constant: _FunctionCompiler.visit_constant,
    GlobalVar: _FunctionCompiler.visit_global, Constructor: _FunctionCompiler.visit_constructor,
    Function: _FunctionCompiler.visit_function, Op: _FunctionCompiler.visit_op,
    Tuple: _FunctionCompiler.visit_tuple, TupleGetItem: _FunctionCompiler.visit_get_item,
    Let: _FunctionCompiler.visit_let, If: _FunctionCompiler.visit_if,
    Match: _FunctionCompiler.visit_match, RefCreate: _FunctionCompiler.visit_ref_create,
    RefRead: _FunctionCompiler.visit_ref_read, RefWrite: _FunctionCompiler.visit_ref_write,
    Call: _FunctionCompiler.visit_call,
}


# ---------------------------------------------------------------------------------------------
# memory reuse

def _reads(ins) -> tuple:
    return _READS[type(ins)](ins)


#: per instruction class: the registers it reads
_READS = {
    bc.Move: lambda i: (i.src,), bc.Ret: lambda i: (i.result,), bc.Invoke: lambda i: i.args,
    bc.InvokeClosure: lambda i: (i.closure,) + tuple(i.args), bc.InvokePacked: lambda i: i.args,
    bc.AllocStorage: lambda i: () if i.shape_register is None else (i.shape_register,),
    bc.AllocTensor: lambda i: (i.storage,),
    bc.AllocTensorReg: lambda i: (i.storage, i.shape_register), bc.AllocADT: lambda i: i.fields,
    bc.AllocClosure: lambda i: i.free_vars, bc.GetField: lambda i: (i.object,),
    bc.GetTag: lambda i: (i.object,), bc.If: lambda i: (i.test, i.target), bc.Goto: lambda i: (),
    bc.LoadConst: lambda i: (), bc.LoadConsti: lambda i: (), bc.ShapeOf: lambda i: (i.tensor,),
    bc.ReshapeTensor: lambda i: (i.tensor, i.shape),
    bc.Fatal: lambda i: (i.subject,) if i.subject is not None else (),
    bc.RefCreate: lambda i: (i.value,), bc.RefRead: lambda i: (i.ref,),
    bc.RefWrite: lambda i: (i.ref, i.value),
}

#: per instruction class: the registers whose values it lets escape the function's control
#: (stored in an object, passed to a call, returned)
_ESCAPES = {
    bc.Ret: lambda i: (i.result,), bc.Invoke: lambda i: i.args,
    bc.InvokeClosure: lambda i: i.args, bc.AllocADT: lambda i: i.fields,
    bc.AllocClosure: lambda i: i.free_vars, bc.RefCreate: lambda i: (i.value,),
    bc.RefWrite: lambda i: (i.value,),
}


def plan_storage_reuse(code: list, regions: list) -> list:
    """``code`` with each ``AllocStorage`` that can take over a dead block of the same size
    replaced by a ``Move`` of that block's register.

    A block is dead at program counter P when every tensor made in it (and every register the
    tensor reaches through ``Move`` or ``ReshapeTensor``) is last read before P, and none of
    them escapes. Jumps in a function only go forward, so "last read before P" holds on every
    path. The block must also have been allocated on every path to P: its ``AllocStorage``
    lies in a branch region that encloses P (``regions`` holds each instruction's regions).
    """
    # alias classes: a tensor and the registers it is moved or reshaped into
    parent: dict = {}

    def find(r):
        while parent.get(r, r) != r:
            r = parent[r]
        return r

    def union(a, b):
        ra, rb_ = find(a), find(b)
        if ra != rb_:
            parent[rb_] = ra

    storage_of: dict = {}       # tensor register -> storage register
    for ins in code:
        if isinstance(ins, (bc.AllocTensor, bc.AllocTensorReg)):
            storage_of[ins.dst] = ins.storage
            union(ins.storage, ins.dst)
        elif isinstance(ins, bc.Move) or isinstance(ins, bc.ReshapeTensor):
            src = ins.src if isinstance(ins, bc.Move) else ins.tensor
            union(src, ins.dst)
    last_use: dict = {}
    escaped: set = set()
    for pc, ins in enumerate(code):
        for r in _reads(ins):
            root = find(r)
            last_use[root] = pc
        esc = _ESCAPES.get(type(ins))
        if esc is not None:
            escaped.update(find(r) for r in esc(ins))
    # the register a branch's result is moved into is in the class of both branches' values,
    # so a tensor that leaves a branch lives as long as the if's result does
    free: list = []             # (size, storage register, region) of dead blocks, by last use
    pending: list = []          # blocks not yet dead: (last use, size, register, region)
    out = list(code)
    for pc, ins in enumerate(code):
        if pending:
            still = []
            for item in pending:
                (free.append(item[1:]) if item[0] < pc else still.append(item))
            pending = still
        if not isinstance(ins, bc.AllocStorage) or ins.shape_register is not None:
            continue        # a block sized at run time is neither handed on nor taken over
        region = regions[pc]
        reused = None
        for k, (size, reg, reg_region) in enumerate(free):
            if size == ins.size and region[:len(reg_region)] == reg_region:
                reused = free.pop(k)
                break
        root = find(ins.dst)
        if reused is not None:
            size, reg, reg_region = reused
            out[pc] = bc.Move(reg, ins.dst)
            block = (size, reg, reg_region)
        else:
            block = (ins.size, ins.dst, region)
        if root in escaped:
            continue        # never handed on
        pending.append((last_use.get(root, pc),) + block)
    return out
