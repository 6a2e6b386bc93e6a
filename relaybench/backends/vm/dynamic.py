"""Dynamic shapes in the VM: the shape function of a fused group, and kernels for groups whose
types are not static.

A call whose type holds ``?`` or a symbolic ``n`` cannot have its outputs allocated from the
type. As in Relay's VM (``src/relay/backend/vm/compiler.cc``, ``EmitShapeFunc``), the compiler
emits, before the kernel runs:

* ``ShapeOf`` of each input tensor (or the tensor itself for a parameter a data dependent
  operator reads, as ``arange``'s bounds);
* ``InvokePacked`` of the group's :class:`ShapeFuncKernel`, which writes each output's shape into
  an int64 tensor of the output's (static) rank. It runs the operators' shape functions
  (``FShapeFunc``, :mod:`relaybench.op.shape_funcs`) over the group's body in post-order;
* ``AllocStorage`` sized from that shape and ``AllocTensorReg`` for each output.

The kernel itself is a :class:`DynamicKernel`. It first tries to compile the group once for its
symbolic signature (the sizes passed as arguments, see :func:`symbolic_kernel`); when the kernel
layer cannot do that for one of the group's operators, the group is compiled for each distinct
tuple of input shapes the program meets (the same lowering and disk cache as a static group),
and the compiled kernels are kept, so each shape is compiled once.

>>> import relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(?, 2), float32]) { nn.relu(%x) }''')
>>> exe = rb.vm.compile(mod, opt_level=0)
>>> print(exe.bytecode)
VM Function[0]: main(%x)
# reg file size = 6
# instruction count = 8
0: shape_of $1 $0
1: alloc_storage $2 size=16 alignment=64 int64 cpu
2: alloc_tensor $3 $2 offset=0 shape=[2] int64
3: invoke_packed PackedFunc[0] (in: $1, out: $3)  # fused_nn_relu_shape_func
4: alloc_storage $4 size=bytes($3) alignment=64 float32 cpu
5: alloc_tensor_reg $5 $4 offset=0 $3 float32
6: invoke_packed PackedFunc[1] (in: $0, out: $5)  # fused_nn_relu
7: ret $5
>>> exe.kernels
[ShapeFuncKernel(fused_nn_relu_shape_func), DynamicKernel(fused_nn_relu: symbolic)]
"""

from __future__ import annotations

import numpy as np

from ...errors import CompileError, ExecutionError
from ...ir.expr import Call, Constant, Function, Let, Op, Tuple, TupleGetItem, Var
from ...ir.functor import post_order
from ...ir.types import TensorType, TupleType
from ..lowering import _flatten_values

__all__ = ["is_static_type", "ShapeFuncKernel", "DynamicKernel", "group_data_params",
           "flatten_tensor_types"]


def is_static_type(ty) -> bool:
    """Whether every tensor of ``ty`` (nested tuples included) has a static shape."""
    stack = [ty]
    while stack:
        t = stack.pop()
        if isinstance(t, TupleType):
            stack.extend(t.fields)
        elif isinstance(t, TensorType):
            if not all(isinstance(d, (int, np.integer)) for d in t.shape):
                return False
    return True


def flatten_tensor_types(ty) -> list:
    """The TensorTypes of ``ty`` in order (tuples flattened), static or not."""
    out, stack = [], [ty]
    while stack:
        t = stack.pop()
        if isinstance(t, TupleType):
            stack.extend(reversed(t.fields))
        else:
            out.append(t)
    return out


def _nest(ty, flat: list, make=list):
    """``flat`` values arranged as ``ty``'s tuples, in order: each tuple made by ``make`` from
    its fields (a list by default)."""
    it = iter(flat)
    done, stack = [], [(ty, False)]
    while stack:
        t, expanded = stack.pop()
        if not isinstance(t, TupleType):
            done.append(next(it))
        elif not expanded:
            stack.append((t, True))
            stack.extend((f, False) for f in reversed(t.fields))
        else:
            n = len(t.fields)
            fields = done[len(done) - n:] if n else []
            del done[len(done) - n:]
            done.append(make(list(fields)))
    return done[0]


def group_data_params(func: Function) -> list:
    """Per parameter of the Primitive function ``func``: whether a data dependent operator
    (``TShapeDataDependent``) reads its value, so its shape function needs the tensor, not its
    shape. Raises CompileError when such an operator reads a value computed inside the group."""
    from ...op.registry import get_op_attr
    params = {p: i for i, p in enumerate(func.params)}
    wants = [False] * len(func.params)
    for node in post_order(func.body):
        if not (isinstance(node, Call) and isinstance(node.op, Op)):
            continue
        if not get_op_attr(node.op.name, "TShapeDataDependent", default=False):
            continue
        for arg in node.args:
            if isinstance(arg, Var) and arg in params:
                wants[params[arg]] = True
            elif not isinstance(arg, Constant):
                raise CompileError(f"{node.op.name} reads the value of {type(arg).__name__} "
                                   "computed in its fused group; its shape is not known before "
                                   "the group runs")
    return wants


class ShapeFuncKernel:
    """The shape function of one fused group, called as a kernel: ``(*inputs, *outputs)``, each
    input the int64 shape of a parameter's tensor (or, for a data dependent parameter, the tensor
    itself), each output an int64 tensor of one output's rank, written in place."""

    def __init__(self, func: Function, name: str, target=None):
        self.function = func
        self.name = name
        self.target = target
        self.data_params = group_data_params(func)
        self.param_types = [p.checked_type or p.type_annotation for p in func.params]
        self.input_counts = [len(flatten_tensor_types(t)) for t in self.param_types]
        self.output_types = flatten_tensor_types(func.body.checked_type)
        self.constants = ()
        self.compiled = self
        from ...op.registry import get_op_attr
        self._order = post_order(func.body)      # walked at every call: computed once
        self._wants_data = {node: bool(get_op_attr(node.op.name, "TShapeDataDependent",
                                                   default=False))
                            for node in self._order
                            if isinstance(node, Call) and isinstance(node.op, Op)}

    def __call__(self, *arrays, num_threads=None) -> None:
        n_in = sum(self.input_counts)
        inputs, outputs = arrays[:n_in], arrays[n_in:]
        if len(outputs) != len(self.output_types):
            raise ExecutionError(f"shape function of {self.name}: {len(outputs)} outputs given, "
                                 f"it writes {len(self.output_types)}")
        values, k = [], 0
        for t, count, data in zip(self.param_types, self.input_counts, self.data_params):
            flat = [a if data else tuple(int(d) for d in np.asarray(a).reshape(-1))
                    for a in inputs[k:k + count]]
            values.append(_nest(t, flat))
            k += count
        shapes = self.shapes(values)
        for out, shape, t in zip(outputs, shapes, self.output_types):
            if len(shape) != len(t.shape):
                raise ExecutionError(f"shape function of {self.name}: an output of rank "
                                     f"{len(shape)}, the type {t} says {len(t.shape)}")
            out[...] = shape

    def shapes(self, param_values: list) -> list:
        """The output shapes for the parameters' shapes (or values): the operators' shape
        functions run over the group's body in post-order."""
        from ...op.shape_funcs import shape_of_call
        func = self.function
        env = dict(zip(func.params, param_values))
        wants_data = self._wants_data
        for node in self._order:
            cls = type(node)
            if cls is Var:
                if node not in env:
                    raise CompileError(f"shape function of {self.name}: free variable "
                                       f"%{node.name_hint}")
            elif cls is Constant:
                env[node] = tuple(np.shape(node.data))
            elif cls is Tuple:
                env[node] = [env[f] for f in node.fields]
            elif cls is TupleGetItem:
                env[node] = env[node.tuple_value][node.index]
            elif cls is Let:
                raise CompileError(f"shape function of {self.name}: a let in a fused group")
            elif cls is Call:
                if not isinstance(node.op, Op):
                    raise CompileError(f"shape function of {self.name}: a call of "
                                       f"{type(node.op).__name__} in a fused group")
                if wants_data[node]:
                    args = [a.data if isinstance(a, Constant) else env[a] for a in node.args]
                else:
                    args = [env[a] for a in node.args]
                try:
                    out = shape_of_call(node.op.name, node.attrs, args, self.target)
                except ValueError as err:
                    raise ExecutionError(f"{self.name}: {err}{_at(node)}") from None
                env[node] = list(out) if isinstance(node.checked_type, TupleType) else out[0]
            elif cls in (Op, Function):
                continue
        return _flatten_values(env[func.body])

    def source(self, kind: str = "loops") -> str:
        return f"shape function of {self.function.astext(show_types=True)}"

    def __repr__(self) -> str:
        return f"ShapeFuncKernel({self.name})"


def _at(node) -> str:
    span = getattr(node, "span", None)
    return f" at {span}" if span else ""


class DynamicKernel:
    """The kernel of a fused group whose types are not static, called as a static one:
    ``(*inputs, *outputs)``.

    A kernel compiled once for the group's symbolic signature runs every shape when the kernel
    layer can build one (:attr:`symbolic` is then set); otherwise each distinct tuple of input
    shapes gets a kernel of its own, compiled at the first call that meets it and kept
    (:attr:`specialized`)."""

    def __init__(self, func: Function, name: str, target, stats=None):
        self.function = func
        self.name = name
        self.target = target
        self.stats = stats
        self.constants = ()
        self.compiled = self
        self.param_types = [p.checked_type or p.type_annotation for p in func.params]
        self.input_count = sum(len(flatten_tensor_types(t)) for t in self.param_types)
        self.specialized: dict = {}
        self.symbolic = None
        self.symbolic_error: str | None = None
        self._build_symbolic()

    def _build_symbolic(self) -> None:
        from .symbolic import symbolic_kernel
        try:
            func = _named_dims(self.function)
            self.symbolic = symbolic_kernel(func, self.name, self.target, self.stats)
        except CompileError as err:
            self.symbolic_error = str(err)

    def __call__(self, *arrays, num_threads=None) -> None:
        if self.symbolic is not None:
            self.symbolic(*arrays, num_threads=num_threads)
            return
        inputs = arrays[:self.input_count]
        key = tuple((a.shape, a.dtype.str) for a in inputs)
        kernel = self.specialized.get(key)
        if kernel is None:
            kernel = self.specialized[key] = self._specialize(inputs)
        args = list(inputs) + list(kernel.constants) + list(arrays[self.input_count:])
        if num_threads is None:
            kernel.compiled(*args)
        else:
            kernel.compiled(*args, num_threads=num_threads)

    def _specialize(self, inputs):
        """The group with each parameter typed by the arrays given, compiled."""
        from ...ir.functor import ExprMutator
        from ...ir.type_infer import infer_expr
        from ..build import CompileStats, _link_kernels, compile_groups
        from ..target import Target
        func = self.function
        flat = iter(inputs)
        mutator = ExprMutator()
        params = []
        for p, t in zip(func.params, self.param_types):
            concrete = _nest(t, [TensorType(tuple(a.shape), a.dtype.name)
                                 for a in [next(flat) for _ in flatten_tensor_types(t)]])
            new = Var(p.name_hint, _as_type(concrete))
            mutator.memo[p] = new
            params.append(new)
        body = mutator.visit(func.body)
        static = Function(params, body, None, func.type_params, func.attrs)
        try:
            infer_expr(static)
        except Exception as err:
            raise ExecutionError(f"kernel {self.name}: the inputs' shapes "
                                 f"{[list(a.shape) for a in inputs]} do not fit the group: {err}") \
                from None
        if not is_static_type(static.body.checked_type):
            # the output's shape depends on the inputs' values (arange): the reference runs it
            return _ValueDependentRun(self.name, static)
        stats = self.stats if self.stats is not None else CompileStats()
        kernels = compile_groups([static], self.target, stats)
        _link_kernels(kernels, Target.parse(self.target), stats)   # OpenCL builds here
        return kernels[static]

    def source(self, kind: str = "loops") -> str:
        if self.symbolic is not None:
            return self.symbolic.source(kind)
        if not self.specialized:
            return (f"// {self.name}: compiled for each shape it meets; none met yet "
                    f"({self.symbolic_error})")
        return "\n\n".join(k.source(kind) for k in self.specialized.values())

    def __repr__(self) -> str:
        how = "symbolic" if self.symbolic is not None else f"{len(self.specialized)} shapes"
        return f"DynamicKernel({self.name}: {how})"


class _ValueDependentRun:
    """A group whose output shape follows from its inputs' values, not their shapes (``arange``
    with bounds given at run time): no kernel can be compiled for its type, so the reference
    interpreter runs it and its results are copied into the outputs the shape function sized."""

    def __init__(self, name: str, func: Function):
        from ...ir.module import IRModule
        from ..executor import create_executor
        self.name = name
        self.function = func
        self.constants = ()
        self.compiled = self
        plain = Function(func.params, func.body, None)
        self._run = create_executor("interpreter", mod=IRModule.from_expr(plain)).evaluate()
        self._arity = [len(flatten_tensor_types(p.checked_type)) for p in func.params]

    def __call__(self, *arrays, num_threads=None) -> None:
        from ..build import flatten_result
        args, pos = [], 0
        for p, count in zip(self.function.params, self._arity):
            chunk = list(arrays[pos:pos + count])
            pos += count
            args.append(chunk[0] if isinstance(p.checked_type, TensorType)
                        else _as_tuple(_nest(p.checked_type, chunk)))
        for out, value in zip(arrays[pos:], flatten_result(self._run(*args))):
            if out.shape != np.shape(value):
                raise ExecutionError(f"kernel {self.name}: the shape function gave "
                                     f"{list(out.shape)}, the group computed "
                                     f"{list(np.shape(value))}")
            np.copyto(out, value, casting="no")

    def source(self, kind: str = "loops") -> str:
        return f"// {self.name}: run by the reference (its output shape depends on values)"


def _as_tuple(value):
    return tuple(_as_tuple(v) for v in value) if isinstance(value, list) else value


def _named_dims(func: Function) -> Function:
    """``func`` with each ``?`` of its parameters' types made a size variable of its own
    (``any_0``, ``any_1``, ...) and its types inferred again, so that a kernel can be compiled
    once for them (``concatenate`` of ``(?, 4)`` and ``(n, 4)`` gives ``(any_0 + n, 4)``);
    ``func`` itself when it has none."""
    from ...ir.functor import ExprMutator
    from ...ir.symbolic import ANY, SymVar, free_symvars
    from ...ir.type_infer import infer_expr
    types = [p.checked_type or p.type_annotation for p in func.params]
    if all(d is not ANY for t in types for tt in flatten_tensor_types(t)
           for d in getattr(tt, "shape", ())):
        return func
    taken = {v.name for t in types for tt in flatten_tensor_types(t)
             for d in getattr(tt, "shape", ()) if not isinstance(d, int) and d is not ANY
             for v in free_symvars(d)}
    counter = iter(range(1 << 30))

    def fresh():
        while True:
            name = f"any_{next(counter)}"
            if name not in taken:
                return SymVar(name)

    def rename(t):
        if isinstance(t, TupleType):
            return TupleType([rename(f) for f in t.fields])
        if isinstance(t, TensorType):
            return TensorType(tuple(fresh() if d is ANY else d for d in t.shape), t.dtype)
        return t
    mutator = ExprMutator()
    params = []
    for p, t in zip(func.params, types):
        new = Var(p.name_hint, rename(t))
        mutator.memo[p] = new
        params.append(new)
    renamed = Function(params, mutator.visit(func.body), None, func.type_params, func.attrs)
    try:
        infer_expr(renamed)
    except Exception as err:
        raise CompileError(f"naming the ? extents: {err}") from None
    return renamed


def _as_type(nested):
    if isinstance(nested, list):
        return TupleType([_as_type(f) for f in nested])
    return nested
