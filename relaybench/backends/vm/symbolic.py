"""Kernels compiled once for a symbolic signature: the sizes are arguments.

A fused group whose types hold symbolic extents (``x: Tensor[(n, 1, 128), float32]``) is
lowered with each extent as a loop-IR expression of *size variables*
(:class:`~relaybench.te.loop_ir.SizeVar`, one per name: ``n``), so its loops run to ``n`` and its
buffers are indexed with row-major strides computed from ``n``. The kernel takes one more
argument, an int64 buffer ``sizes`` holding the size variables' values in the order of their
names; the code generator reads them at the kernel's entry. Its cache key is its printed loop
IR, which names the size variables, so one kernel serves every length.

The schedule is the plain one: every elementwise, broadcast or injective stage is inlined into
the stage that reads it, and the outputs (and reductions) are loop nests over their whole
extents, with no split, vector or parallel loop (those need constant extents). When an operator's
compute needs a constant extent (a window's size, a comparison of extents), building the kernel
raises CompileError and the caller (:class:`~.dynamic.DynamicKernel`) compiles the group for each
shape it meets instead.

:class:`SymbolicKernel` checks its arrays before the machine code runs: each array's dtype and
rank, a size variable bound by the first input holding it as an extent and checked against the
others, and every extent (outputs included) against its expression of the sizes.

>>> import numpy as np, relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(n, 3), float32]) { nn.relu(add(%x, 1f)) }''')
>>> exe = rb.vm.compile(mod)
>>> print(exe.kernels[1].source("loops"))
def fused_add_nn_relu(p0: Buffer((n, 3), "float32"), relu: Buffer((n, 3), "float32"), sizes: Buffer((1,), "int64")):
    for i0 in serial(n):
        for i1 in serial(3):
            relu[i0, i1] = max(p0[i0, i1] + 1.0, 0.0)
>>> vm = rb.vm.VirtualMachine(exe)
>>> [vm.run(np.zeros((k, 3), "float32")).shape for k in (1, 4)]
[(1, 3), (4, 3)]
"""

from __future__ import annotations

import time

import numpy as np

from ... import te
from ...errors import CompileError, ExecutionError, RelayError
from ...ir.expr import Call, Constant, Function, Let, Op, Tuple, TupleGetItem
from ...ir.functor import post_order
from ...ir.symbolic import ANY, SymVar, evaluate, format_dim
from ...ir.types import TensorType

__all__ = ["symbolic_kernel", "lower_symbolic", "SymbolicKernel"]


def lower_symbolic(func: Function, target, name: str):
    """``(PrimFunc, constants, input types, output types, size names)`` of the Primitive
    function ``func`` lowered with symbolic extents (see the module). Raises CompileError when
    a compute or the lowering needs constant extents."""
    from ..lowering import (_constant_tensor, _distinct_outputs, _flatten_values, _lower_call,
                            _nest, _type_of, _unique_output_names)
    from ..strategy import get_strategy
    from .dynamic import flatten_tensor_types

    strategy = get_strategy(target)
    where = f"lowering {name} for symbolic shapes"
    inputs, input_types, values = [], [], {}
    for index, param in enumerate(func.params):
        ptype = _type_of(param, where)
        types = flatten_tensor_types(ptype)
        tensors = []
        for j, t in enumerate(types):
            if not isinstance(t, TensorType):
                raise CompileError(f"{where}: parameter %{param.name_hint} is {t}, not a tensor")
            suffix = "" if len(types) == 1 else f"_{j}"
            tensors.append(te.placeholder(t.shape, t.dtype, name=f"p{index}{suffix}"))
        inputs.extend(tensors)
        input_types.extend(types)
        values[param] = tensors[0] if isinstance(ptype, TensorType) else _nest(ptype, tensors)
    bound = {d.name for t in input_types for d in t.shape if isinstance(d, SymVar)}
    constants = []
    for node in post_order(func.body):
        if node in values or isinstance(node, Op):
            continue
        if isinstance(node, Constant):
            values[node] = _constant_tensor(node, constants, inputs)
        elif isinstance(node, Tuple):
            values[node] = [values[f] for f in node.fields]
        elif isinstance(node, TupleGetItem):
            values[node] = values[node.tuple_value][node.index]
        elif isinstance(node, Call) and isinstance(node.op, Op):
            values[node] = _lower_call(node, values, strategy, target, where, static=False)
        else:
            kind = "a let" if isinstance(node, Let) else type(node).__name__
            raise CompileError(f"{where}: {kind} cannot be lowered to a kernel")
    output_types = flatten_tensor_types(_type_of(func.body, where))
    for t in input_types + output_types:
        for d in t.shape:
            if d is ANY:
                raise CompileError(f"{where}: a dimension ? has no size a kernel could read")
            missing = {v.name for v in _symvars(d)} - bound
            if missing:
                raise CompileError(f"{where}: the extent {format_dim(d)} is not given by an "
                                   f"input's shape ({', '.join(sorted(missing))})")
    outputs = _distinct_outputs(_flatten_values(values[func.body]))
    _unique_output_names(inputs, outputs)
    schedule = te.create_schedule(outputs)
    output_ops = {schedule.op_of(t) for t in outputs}
    for op in schedule.ops:
        if isinstance(op, te.tensor.ComputeOp) and op not in output_ops and not op.reduce_axis:
            schedule[op.output].compute_inline()
    prim = te.lower(schedule, inputs, name=name)
    from ...te.simplify import simplify_func
    prim = simplify_func(prim)
    sizes = te.loop_ir.size_vars_of(prim.params)
    if not sizes:
        raise CompileError(f"{where}: no symbolic extent is left")
    prim = te.loop_ir.PrimFunc(name, prim.params + (te.loop_ir.Buffer("sizes", (len(sizes),),
                                                                     "int64"),), prim.body)
    return prim, constants, input_types, output_types, [v.name for v in sizes]


def _symvars(dim) -> list:
    from ...ir.symbolic import free_symvars
    return [] if isinstance(dim, int) else free_symvars(dim)


def symbolic_kernel(func: Function, name: str, target, stats=None) -> "SymbolicKernel":
    """The group compiled once for its symbolic signature (the host CPU's code generator).
    Raises CompileError when it cannot be."""
    from ..target import Target
    target = Target.parse(target)
    if target.kind != "llvm":
        raise CompileError(f"{name}: symbolic kernels are built for the host CPU (llvm), "
                           f"not {target}")
    t0 = time.perf_counter()
    try:
        prim, constants, input_types, output_types, sizes = lower_symbolic(func, target, name)
    except RelayError:
        raise
    except Exception as err:   # a compute that needs constant extents: name the group
        raise CompileError(f"{name}: lowering for symbolic shapes failed: "
                           f"{type(err).__name__}: {err}") from None
    t1 = time.perf_counter()
    from ..llvm import build_kernel
    try:
        compiled = build_kernel(prim, parallel=False)
    except RelayError:
        raise
    except Exception as err:
        raise CompileError(f"{name}: code generation for symbolic shapes failed: "
                           f"{type(err).__name__}: {err}") from None
    if stats is not None:
        stats.lower_seconds += t1 - t0
        stats.compile_seconds += time.perf_counter() - t1
    from ..graph_executor import contiguous
    return SymbolicKernel(name, func, prim, compiled, [contiguous(c) for c in constants],
                          input_types, output_types, sizes)


class SymbolicKernel:
    """A kernel compiled once for symbolic extents, called as a static one: ``(*inputs,
    *outputs)``; it checks the arrays (see the module) and passes the sizes."""

    def __init__(self, name, function, prim_func, compiled, constants, input_types,
                 output_types, sizes):
        self.name = name
        self.function = function
        self.prim_func = prim_func
        self.compiled = compiled
        self.constants = constants
        self.input_types = input_types
        self.output_types = output_types
        self.sizes = sizes

    def __call__(self, *arrays, num_threads=None) -> None:
        n_in = len(self.input_types)
        inputs, outputs = arrays[:n_in], arrays[n_in:]
        types = self.input_types + self.output_types
        if len(arrays) != len(types):
            raise ExecutionError(f"kernel {self.name}: {len(arrays)} arrays given, it takes "
                                 f"{len(types)}")
        env: dict = {}
        for k, (a, t) in enumerate(zip(arrays, types)):
            what = self._argument(k)
            if not isinstance(a, np.ndarray) or a.dtype.name != t.dtype or a.ndim != len(t.shape):
                given = (f"{a.dtype.name}{list(a.shape)}" if isinstance(a, np.ndarray)
                         else type(a).__name__)
                raise ExecutionError(f"kernel {self.name}: {what}: expected {t}, given {given}",
                                     input_name=what, expected=str(t), given=given)
            if k < n_in:
                for d, s in zip(t.shape, a.shape):
                    if isinstance(d, SymVar):
                        env.setdefault(d.name, int(s))
        for k, (a, t) in enumerate(zip(arrays, types)):
            for axis, (d, s) in enumerate(zip(t.shape, a.shape)):
                want = d if isinstance(d, int) else evaluate(d, env)
                if want != s:
                    raise ExecutionError(
                        f"kernel {self.name}: {self._argument(k)}: axis {axis} is {s}, but "
                        f"{format_dim(d)} = {want} (with {_sizes_text(env)})",
                        input_name=self._argument(k), expected=want, given=int(s))
        sizes = np.array([env[n] for n in self.sizes], dtype="int64")
        self.compiled(*inputs, *self.constants, *outputs, sizes)

    def _argument(self, k: int) -> str:
        n_in = len(self.input_types)
        return f"input {k}" if k < n_in else f"output {k - n_in}"

    def source(self, kind: str = "loops") -> str:
        return self.compiled.source(kind) if kind != "loops" else str(self.prim_func)

    def __repr__(self) -> str:
        return f"SymbolicKernel({self.name}: sizes {', '.join(self.sizes)})"


def _sizes_text(env: dict) -> str:
    return ", ".join(f"{k} = {v}" for k, v in sorted(env.items())) or "no sizes"
