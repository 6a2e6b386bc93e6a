"""The graph executor: a static dataflow program run as a fixed list of kernel calls.

``relaybench.build`` hands over ``@main`` after fusion: parameters, constants, calls of fused
``Primitive`` functions, tuples and tuple projections, and ``let`` bindings of those (as in Relay's
graph executor, a let-bound variable is the node of its value; a let of a function is refused,
and so is control flow). Fusion does not cross a let, as in Relay; ToGraphNormalForm before the
build removes the lets of a program without effects. :func:`extract_graph` reads it once, in
topological order and without recursion, as a list of nodes (one per call) over *tensor entries*
(each a static shape and dtype: an input, a constant, or one output of a node).

The memory plan is static, as in Relay's graph executor: every intermediate entry gets a storage,
and a storage is handed to a later entry once every reader of its current entry has run
(liveness by last use; best fit by size in bytes, growing the largest free storage when none
fits). Storages are dtype-agnostic byte pools, 64-byte aligned, each entry a numpy view of its
pool. Inputs and the graph's outputs have storages of their own that are never reused. A call
that moves no element (:func:`view_nodes`: a ``reshape``, a flatten) gets no storage and runs no
kernel: its result is its input's memory under another shape. Because the buffers never move,
each node's argument list is fixed at load time and :meth:`GraphModule.run` is a loop of kernel
calls; only an input given to ``run`` may be read where the caller holds it (the kernels'
argument arrays pointed at it, see :meth:`GraphModule.run`).

>>> import numpy as np, relaybench as rb
>>> from relaybench import op
>>> x = rb.var("x", shape=(4, 4))
>>> y = x
>>> for _ in range(6):
...     y = op.transpose(op.tanh(y))
>>> graph = rb.build(rb.IRModule.from_expr(rb.Function([x], y)), opt_level=0)
>>> plan = graph.memory_plan()
>>> plan.tensors, plan.storages
(12, 3)
>>> out = graph.run(x=np.eye(4, dtype="float32"))
>>> out.shape
(4, 4)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .. import config as _config
from ..errors import CompileError, ExecutionError
from ..ir.functor import post_order
from ..ir.expr import (Call, Constant, Function, GlobalVar, If, Let, Match, Op, RefCreate, RefRead,
                       RefWrite, Tuple, TupleGetItem, Var)
from ..ir.types import TensorType, dtype_itemsize, split_dtype
from .._table import Table

__all__ = ["GraphModule", "Graph", "GraphNode", "TensorEntry", "extract_graph", "plan_memory",
           "MemoryPlan", "BenchmarkResult", "Profile"]

_ALIGN = 64


# ---- the graph ---------------------------------------------------------------------------------

@dataclass
class TensorEntry:
    """One tensor of the graph: ``kind`` is ``"input"``, ``"constant"`` or ``"node"``."""

    index: int
    shape: tuple
    dtype: str
    kind: str
    source: object = None        # the input's name, the constant's array, or the node's index

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * dtype_itemsize(self.dtype)

    @property
    def type_text(self) -> str:
        return _tensor_text(self.shape, self.dtype)


@dataclass
class GraphNode:
    """A call of one fused group: its Primitive function and its input and output entries."""

    index: int
    name: str
    function: Function
    inputs: list
    outputs: list
    kernel: object = None        # the GroupKernel, filled in by the GraphModule


@dataclass
class Graph:
    """``@main`` as a node list: entries, nodes in execution order, inputs (name, entry), the
    flattened outputs (entries) and the result's nesting (an entry index or tuples of them)."""

    entries: list
    nodes: list
    inputs: list
    outputs: list
    result: object


def _tensor_text(shape, dtype) -> str:
    dims = ", ".join(str(d) for d in shape)
    if len(shape) == 1:
        dims += ","
    return f"Tensor[({dims}), {dtype}]"


_NOT_DATAFLOW = {If: "an if", Match: "a match", RefCreate: "a reference",
                 RefRead: "a reference read", RefWrite: "a reference write",
                 GlobalVar: "a global function"}


def _not_dataflow(what: str) -> CompileError:
    return CompileError(f"@main holds {what}: the graph executor runs static dataflow only "
                        "(inputs, constants, calls of fused operators, tuples, lets of tensors); "
                        "the interpreter (create_executor('interpreter')) runs every program")


def _children(node) -> tuple:
    """What a dataflow node depends on; a call of a Primitive function depends on its arguments
    only (the function's body is the kernel's business)."""
    if isinstance(node, Call):
        if isinstance(node.op, Function) and node.op.is_primitive:
            return node.args
        if isinstance(node.op, Op):
            return node.args
        raise _not_dataflow(_describe_callee(node.op))
    if isinstance(node, Tuple):
        return node.fields
    if isinstance(node, TupleGetItem):
        return (node.tuple_value,)
    if isinstance(node, (Var, Constant)):
        return ()
    for cls, what in _NOT_DATAFLOW.items():
        if isinstance(node, cls):
            raise _not_dataflow(what)
    if isinstance(node, Function):
        raise _not_dataflow("a function value (a closure)")
    raise _not_dataflow(f"a {type(node).__name__}")


def _describe_callee(op) -> str:
    from ..ir.expr import Constructor
    if isinstance(op, Constructor):
        return f"an ADT constructor ({op.name_hint})"
    if isinstance(op, GlobalVar):
        return f"a call of @{op.name_hint}"
    if isinstance(op, Function):
        return "a call of a function that is not a fused (Primitive) group"
    return f"a call of {type(op).__name__}"


def _dataflow_order(body, let_values: dict) -> list:
    """The nodes ``body`` depends on, children first, each once (an explicit stack).

    As in Relay's graph executor, a ``let`` of a tensor (or a tuple of tensors) is dataflow: its
    variable stands for the node of its value, so a use of the variable depends on the value and
    the ``let`` itself is its body. ``let_values`` is filled with variable -> value as the walk
    meets each binding (before any use of the variable, which lies inside the binding's body). A
    ``let`` of a function value has no node to stand for and is refused."""

    def children(node):
        if isinstance(node, Let):
            if isinstance(node.value, Function):
                raise _not_dataflow(f"a let binding of a function value (%{node.var.name_hint})")
            let_values[node.var] = node.value
            return (node.value, node.body)
        if isinstance(node, Var):
            value = let_values.get(node)
            return () if value is None else (value,)
        return _children(node)

    return post_order(body, children)


def _vector_dtype_error(where: str, dtype: str) -> CompileError:
    element, lanes = split_dtype(dtype)
    return CompileError(f"{where}: vector dtype {dtype} ({lanes} lanes of {element}) cannot be run: "
                        "the graph executor's kernels compute on scalar elements; Relay uses vector "
                        "dtypes inside kernels only. Write the lanes as a last axis "
                        f"(Tensor[(..., {lanes}), {element}])")


def _check_scalar_dtypes(entries: list, node_entries: list, func: Function, index: int) -> None:
    """A call of a kernel reads and writes scalar-element tensors only: no operator here computes
    on a vector dtype (``int8x4``), which type inference lets through the operators that do not
    look at dtypes (``reshape``, ``transpose``, ...). The error names the call and its operators."""
    for i in node_entries:
        entry = entries[i]
        if split_dtype(entry.dtype)[1] > 1:
            ops = sorted({n.name for n in post_order(func.body) if isinstance(n, Op)})
            what = ", ".join(ops) if ops else "a fused group"
            raise _vector_dtype_error(f"@main: call {index} ({what}) on {entry.type_text}",
                                      entry.dtype)


def _wrap_op_call(call: Call) -> Function:
    """A call of an operator outside any fused group (FuseOps left out) as a group of its own."""
    from ..ir.type_infer import infer_expr
    params = [Var(f"p{i}", a.checked_type) for i, a in enumerate(call.args)]
    func = Function(params, Call(call.op, params, call.attrs, call.type_args),
                    call.checked_type).with_attr("Primitive", 1)
    infer_expr(func)
    return func


def contiguous(data) -> np.ndarray:
    """``data`` as a C-contiguous, aligned array of the same shape. Unlike
    ``np.ascontiguousarray``, which gives a rank-0 array back with shape ``(1,)``, a rank-0 value
    stays rank-0: its entry, buffer and result keep the type ``Tensor[(), dtype]``."""
    return np.require(data, requirements=("C", "A"))


def _is_scalar_constant(expr) -> bool:
    return isinstance(expr, Constant) and np.ndim(expr.data) == 0


def _inline_scalar_constants(func: Function, args) -> tuple:
    """``func`` with its parameters bound to rank-0 constant arguments put in its body, and the
    remaining arguments: a scalar becomes an immediate of the kernel, not a buffer (at opt_level
    0, where FoldConstant does not run, batch_norm's epsilon arrives this way)."""
    from ..ir.functor import ExprMutator
    from ..ir.type_infer import infer_expr
    mutator = ExprMutator()
    kept_params, kept_args = [], []
    for param, arg in zip(func.params, args):
        if _is_scalar_constant(arg):
            mutator.memo[param] = arg
        else:
            kept_params.append(param)
            kept_args.append(arg)
    body = mutator.visit(func.body)
    inlined = Function(kept_params, body, func.ret_type, func.type_params, func.attrs)
    infer_expr(inlined)
    return inlined, kept_args


def extract_graph(main: Function) -> Graph:
    """Read a type-checked, fused ``@main`` as a :class:`Graph`; a CompileError says what is not
    static dataflow or not statically shaped."""
    from .lowering import flatten_type

    entries: list = []
    values: dict = {}
    inputs: list = []

    def new_entry(ty: TensorType, kind: str, source) -> int:
        entries.append(TensorEntry(len(entries), tuple(int(d) for d in ty.shape), ty.dtype, kind,
                                   source))
        return len(entries) - 1

    for p in main.params:
        ptype = p.checked_type or p.type_annotation
        if not isinstance(ptype, TensorType):
            raise CompileError(f"input %{p.name_hint}: the graph executor takes tensor inputs, "
                               f"not {ptype}")
        flatten_type(ptype, f"input %{p.name_hint}")
        values[p] = new_entry(ptype, "input", p.name_hint)
        inputs.append((p.name_hint, values[p]))

    nodes: list = []
    let_values: dict = {}
    for node in _dataflow_order(main.body, let_values):
        if isinstance(node, Var):
            if node in let_values:
                values[node] = values[let_values[node]]
            elif node not in values:
                raise CompileError(f"@main: free variable %{node.name_hint}")
        elif isinstance(node, Let):
            values[node] = values[node.body]
        elif isinstance(node, Constant):
            data = contiguous(node.data)
            values[node] = new_entry(TensorType(data.shape, data.dtype.name), "constant", data)
        elif isinstance(node, Tuple):
            values[node] = tuple(values[f] for f in node.fields)
        elif isinstance(node, TupleGetItem):
            value = values[node.tuple_value]
            if not isinstance(value, tuple):
                raise CompileError(f"@main: projection .{node.index} of a tensor")
            values[node] = value[node.index]
        elif isinstance(node, Call):
            func = node.op if isinstance(node.op, Function) else _wrap_op_call(node)
            call_args = node.args
            if any(_is_scalar_constant(a) for a in call_args):
                func, call_args = _inline_scalar_constants(func, call_args)
            args = _flat([values[a] for a in call_args])
            out_type = node.checked_type
            if out_type is None:
                raise CompileError("@main is not type-checked (run InferType)")
            index = len(nodes)
            types = flatten_type(out_type, f"@main: the result of call {index}")
            outs = [new_entry(t, "node", index) for t in types]
            _check_scalar_dtypes(entries, args + outs, func, index)
            nodes.append(GraphNode(index, "", func, args, outs))
            values[node] = _nest(out_type, outs)
    result = values[main.body]
    for name, index in inputs:  # an input no call reads (returned as it is) is checked here
        if split_dtype(entries[index].dtype)[1] > 1:
            raise _vector_dtype_error(f"input %{name}", entries[index].dtype)
    return Graph(entries, nodes, inputs, _flat([result]), result)


def _flat(values) -> list:
    out, stack = [], list(reversed(values))
    while stack:
        v = stack.pop()
        if isinstance(v, tuple):
            stack.extend(reversed(v))
        else:
            out.append(v)
    return out


def _nest(ty, flat: list):
    from ..ir.types import TupleType
    if not isinstance(ty, TupleType):
        return flat[0]
    it = iter(flat)
    # nested tuple types, rebuilt without recursion on depth of the program (types are shallow)
    def build(t):
        if isinstance(t, TupleType):
            return tuple(build(f) for f in t.fields)
        return next(it)
    return build(ty)


# ---- the memory plan ---------------------------------------------------------------------------

@dataclass
class MemoryPlan:
    """The static plan: ``storage_of`` maps each node output entry to its storage id,
    ``storage_bytes`` the size of each storage; ``tensors``/``storages`` count them, and
    ``planned_bytes`` vs ``unplanned_bytes`` (every tensor its own buffer) shows the reuse.
    ``views`` maps the output of each view call (:data:`VIEW_OPS`) to the entry whose memory it
    reads (an input, a constant or a node output, which then lives as long as the view is
    read). Input and constant bytes are not part of the plan."""

    storage_of: dict = field(default_factory=dict)
    storage_bytes: list = field(default_factory=list)
    dedicated: set = field(default_factory=set)      # storages of graph outputs, never reused
    views: dict = field(default_factory=dict)
    tensors: int = 0
    unplanned_bytes: int = 0
    input_bytes: int = 0
    constant_bytes: int = 0

    @property
    def storages(self) -> int:
        return len(self.storage_bytes)

    @property
    def planned_bytes(self) -> int:
        return int(sum(self.storage_bytes))

    def __repr__(self) -> str:
        saved = 1 - self.planned_bytes / self.unplanned_bytes if self.unplanned_bytes else 0.0
        views = f", {len(self.views)} views" if self.views else ""
        return (f"MemoryPlan({self.tensors} tensors in {self.storages} storages{views}; "
                f"{_bytes_text(self.planned_bytes)} planned vs {_bytes_text(self.unplanned_bytes)} "
                f"without reuse ({saved:.0%} saved); inputs {_bytes_text(self.input_bytes)}, "
                f"constants {_bytes_text(self.constant_bytes)})")


def _bytes_text(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _round_up(n: int) -> int:
    return max(_ALIGN, (n + _ALIGN - 1) // _ALIGN * _ALIGN)


VIEW_OPS = frozenset({"reshape", "reshape_like", "nn.batch_flatten", "squeeze", "expand_dims"})
"""Operators that keep every element where it is in memory: a call whose group is made of
these alone, from one tensor to one of the same bytes, is a *view*. Its result is the input's
memory under another shape; the call runs no kernel. (AlterOpLayout turns a ``layout_transform``
that moves nothing, ``NCHW`` to ``NCHW1c`` say, into a ``reshape``.)"""


def view_nodes(graph: Graph) -> set:
    """The indices of the calls of ``graph`` that are views (:data:`VIEW_OPS`): a group of
    those operators alone (its kernel's ``ops``), one input, one output of the same dtype and
    byte size, not a graph output.

    >>> import relaybench as rb
    >>> from relaybench import op
    >>> x = rb.var("x", shape=(2, 3, 4))
    >>> y = op.exp(op.nn.batch_flatten(op.tanh(x)))
    >>> gm = rb.build(rb.IRModule.from_expr(rb.Function([x], y)), opt_level=0)
    >>> [gm.graph.nodes[i].name for i in sorted(view_nodes(gm.graph))]
    ['fused_nn_batch_flatten']
    >>> gm.memory_plan().views, gm.memory_plan().storage_of
    ({2: 1}, {1: 0, 2: 0, 3: 1})
    """
    outputs = set(graph.outputs)
    found = set()
    for node in graph.nodes:
        ops = list(getattr(node.kernel, "ops", None) or ())
        if not ops or not VIEW_OPS.issuperset(ops) or len(node.inputs) != 1 \
                or len(node.outputs) != 1 or node.outputs[0] in outputs:
            continue
        src, dst = graph.entries[node.inputs[0]], graph.entries[node.outputs[0]]
        if src.dtype == dst.dtype and src.nbytes == dst.nbytes:
            found.add(node.index)
    return found


def plan_memory(graph: Graph, views=()) -> MemoryPlan:
    """Storage ids for the node outputs of ``graph`` (see the module): an entry's storage is freed
    after its last reader runs, and an allocation takes the smallest free storage that fits, else
    grows the largest free one, else makes a new one. A node's outputs never share a storage with
    its inputs. The calls whose indices are in ``views`` (see :func:`view_nodes`) get no storage:
    their output is their input's memory, read until the view's last reader has run."""
    plan = MemoryPlan()
    outputs = set(graph.outputs)
    views = set(views)
    root: dict = {}                  # view output -> the entry whose memory it is
    for node in graph.nodes:
        if node.index in views:
            source = node.inputs[0]
            root[node.outputs[0]] = root.get(source, source)
    plan.views = dict(root)
    last_use: dict = {}
    for node in graph.nodes:
        if node.index not in views:
            for e in node.inputs:
                last_use[root.get(e, e)] = node.index
    free: list = []                  # storage ids free now
    sizes = plan.storage_bytes
    for entry in graph.entries:
        if entry.kind == "input":
            plan.input_bytes += entry.nbytes
        elif entry.kind == "constant":
            plan.constant_bytes += entry.nbytes
    for node in graph.nodes:
        if node.index in views:
            out = node.outputs[0]
            sid = plan.storage_of.get(root[out])
            if sid is not None:
                plan.storage_of[out] = sid
            continue
        for e in node.outputs:
            need = _round_up(graph.entries[e].nbytes)
            plan.tensors += 1
            plan.unplanned_bytes += need
            if e in outputs:
                sid = len(sizes)
                sizes.append(need)
                plan.dedicated.add(sid)
            else:
                sid = _take(free, sizes, need)
            plan.storage_of[e] = sid
        released = [root.get(e, e) for e in node.inputs]
        released = [e for e in released if last_use.get(e) == node.index]
        released += [e for e in node.outputs if e not in last_use]      # never read
        for e in dict.fromkeys(released):
            sid = plan.storage_of.get(e)
            if sid is not None and sid not in plan.dedicated:
                free.append(sid)
    return plan


def _take(free: list, sizes: list, need: int) -> int:
    best = None
    for i, sid in enumerate(free):
        if sizes[sid] >= need and (best is None or sizes[sid] < sizes[free[best]]):
            best = i
    if best is None and free:
        best = max(range(len(free)), key=lambda i: sizes[free[i]])
        sizes[free[best]] = need                                          # grow the largest
    if best is None:
        sizes.append(need)
        return len(sizes) - 1
    return free.pop(best)


def _aligned_pool(nbytes: int) -> np.ndarray:
    raw = np.empty(nbytes + _ALIGN, dtype=np.uint8)
    offset = (-raw.ctypes.data) % _ALIGN
    return raw[offset:offset + nbytes]


def _view(pool: np.ndarray, shape: tuple, dtype: str) -> np.ndarray:
    return np.ndarray(shape, dtype=dtype, buffer=pool, offset=0)


# ---- results -----------------------------------------------------------------------------------

def _ms_text(ms: float) -> str:
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    if ms >= 1:
        return f"{ms:.2f}"
    return f"{ms:.3g}"


class BenchmarkResult:
    """Per-repeat mean times of ``number`` runs each, in milliseconds, and their statistics."""

    def __init__(self, times_ms: list, number: int, repeat: int):
        self.times_ms = [float(t) for t in times_ms]
        self.number = number
        self.repeat = repeat
        arr = np.asarray(self.times_ms)
        self.median_ms = float(np.median(arr))
        self.mean_ms = float(arr.mean())
        self.std_ms = float(arr.std())
        self.min_ms = float(arr.min())
        self.max_ms = float(arr.max())

    @property
    def results(self) -> list:
        """The per-repeat times in seconds, as TVM's ``BenchmarkResult.results``."""
        return [t / 1e3 for t in self.times_ms]

    def __repr__(self) -> str:
        return (f"{_ms_text(self.median_ms)} ms ± {_ms_text(self.std_ms)} "
                f"(median of {self.repeat} x {self.number})")

    __str__ = __repr__

    def _repr_html_(self) -> str:
        from ..viz.html import html
        return html(self)


class Profile(Table):
    """Time per fused group, in the order the groups first run, with a total row.

    ``rows`` (the groups, then the total) print as a table; ``total_ms`` is the sum of the
    groups' median times per run.
    """

    def __init__(self, rows: list, total_ms: float, number: int):
        super().__init__(rows)
        self.total_ms = total_ms
        self.number = number

    @property
    def groups(self) -> list:
        return self.rows[:-1]


# ---- the executable ----------------------------------------------------------------------------

class _ViewCall:
    """The bound call of a view (:func:`view_nodes`): nothing to run, as a call from Python or
    as steps of compiled code (``native``, a :class:`~relaybench.backends.llvm.runtime.NativeCall`
    of none)."""

    def __init__(self, native):
        self.native = native

    def __call__(self) -> None:
        pass


def _native_runs(calls: list) -> list:
    """What runs ``calls`` (bound kernel calls) in order: each stretch of consecutive calls
    that can all be made from compiled code (their ``native`` attribute, see
    :class:`~relaybench.backends.llvm.runtime.NativeCall`) becomes one
    :class:`~relaybench.backends.llvm.spinpool.Steps` program, so the stretch costs one call
    from Python instead of one per kernel (a few microseconds each, as long as a small kernel
    runs); the other calls stay as they are."""
    if not any(getattr(call, "native", None) is not None for call in calls):
        return list(calls)
    from .llvm.runtime import join_native
    from .llvm.spinpool import Steps
    runs: list = []
    stretch: list = []

    def flush():
        if len(stretch) == 1:
            runs.append(stretch[0])
        elif stretch:
            native = join_native(stretch)
            if native is None:      # two pools: each call as it is
                runs.extend(stretch)
            else:
                runs.append(Steps(native.steps, native.pool, native.keep))
        stretch.clear()

    for call in calls:
        native = getattr(call, "native", None)
        if native is None:
            flush()
            runs.append(call)
        else:
            if stretch and native.pool is not None and \
                    any(c.native.pool not in (None, native.pool) for c in stretch):
                flush()
            stretch.append(call)
    flush()
    return runs


class GraphModule:
    """A compiled static graph: ``run(**inputs)``, ``set_input`` / ``get_output``, ``benchmark``,
    ``profile``, ``source``, ``memory_plan`` (made by :func:`relaybench.build`)."""

    _VIEWS = True
    """Whether view calls (:func:`view_nodes`) alias their input's memory instead of running."""

    def __init__(self, mod, graph: Graph, kernels: dict, *, target=None,
                 num_threads: Optional[int] = None, compile_stats=None):
        self.mod = mod
        self.target = target
        self.compile_stats = compile_stats
        self._graph = graph
        node_names: dict = {}
        distinct: dict = {}
        for node in graph.nodes:
            node.kernel = kernels[node.function]
            base = node.kernel.name
            count = node_names.get(base, 0)
            node_names[base] = count + 1
            node.name = base if count == 0 else f"{base}#{count}"
            distinct.setdefault(id(node.kernel), node.kernel)
        self._kernels = list(distinct.values())
        self.host_groups = [k.name for k in self._kernels if k.host]
        self._views = view_nodes(graph) if self._VIEWS else set()
        self._plan = plan_memory(graph, self._views)
        self._allocate()
        self._input_specs = {name: graph.entries[e] for name, e in graph.inputs}
        self._input_set = {name: False for name in self._input_specs}
        self._input_slots: dict = {}     # input name -> where its pointer sits (see run)
        self._held: dict = {}            # input name -> the caller's array read in place
        self._num_threads = None
        self.set_num_threads(num_threads)

    # -- buffers and calls
    def _allocate(self) -> None:
        graph, plan = self._graph, self._plan
        pools = [_aligned_pool(n) for n in plan.storage_bytes]
        arrays: list = [None] * len(graph.entries)
        for entry in graph.entries:
            if entry.kind == "input":
                arrays[entry.index] = _view(_aligned_pool(_round_up(entry.nbytes)), entry.shape,
                                            entry.dtype)
            elif entry.kind == "constant":
                arrays[entry.index] = entry.source
            elif entry.index in plan.views:      # the memory of an earlier entry, reshaped
                arrays[entry.index] = arrays[plan.views[entry.index]].reshape(entry.shape)
            else:
                arrays[entry.index] = _view(pools[plan.storage_of[entry.index]], entry.shape,
                                            entry.dtype)
        self._arrays = arrays
        self._pools = pools
        # outputs that are not written by a node (an input or a constant given back) are copied
        self._output_arrays = []
        self._output_copies = []
        for e in graph.outputs:
            entry = graph.entries[e]
            if entry.kind == "node":
                self._output_arrays.append(arrays[e])
            else:
                dst = np.empty(entry.shape, entry.dtype)
                self._output_arrays.append(dst)
                self._output_copies.append((dst, arrays[e]))

    def _bind_calls(self) -> None:
        from .llvm.runtime import NativeCall
        from .llvm.spinpool import Steps
        view = _ViewCall(NativeCall(()))
        calls = []
        for node in self._graph.nodes:
            if node.index in self._views:
                calls.append(view)
                continue
            args = [self._arrays[e] for e in node.inputs] + list(node.kernel.constants) + \
                   [self._arrays[e] for e in node.outputs]
            call = node.kernel.bind_call(args, self._num_threads)
            native = getattr(call, "native", None)
            if isinstance(native, NativeCall) and native.steps:
                # called alone too (profile) through the argument arrays, so an input pointed
                # elsewhere (run) is read there on every path
                program = Steps(native.steps, native.pool, native.keep)
                program.native = native
                call = program
            calls.append(call)
        self._calls = calls
        self._run_list = _native_runs(calls)
        self._input_slots = self._find_input_slots()
        for name, array in list(self._held.items()):
            if name in self._input_slots:
                self._point_input(name, array)
            else:       # no longer read in place: its values go to the input's buffer
                np.copyto(self._arrays[self._input_specs[name].index], array)
                del self._held[name]

    def _find_input_slots(self) -> dict:
        """For each input that every reader reads through compiled code's argument arrays
        (:attr:`~relaybench.backends.llvm.runtime.NativeCall.args`), the places its buffer's
        pointer sits in them: ``run`` writes a caller's array's pointer there instead of copying
        the values. An input that a host kernel or a Python call reads, or that is a graph
        output, has none."""
        graph, plan = self._graph, self._plan
        readers: dict = {}
        for node in graph.nodes:
            if node.index not in self._views:
                for e in node.inputs:
                    readers.setdefault(plan.views.get(e, e), []).append(node.index)
        outputs = set(graph.outputs)
        slots = {}
        for name, spec in self._input_specs.items():
            e = spec.index
            reading = readers.get(e, [])
            if not reading or e in outputs or spec.nbytes == 0:
                continue
            natives = [getattr(self._calls[i], "native", None) for i in reading]
            if any(n is None or not n.args for n in natives):
                continue
            pointer = self._arrays[e].ctypes.data
            found = []
            for native in natives:
                for array in native.args:
                    found.extend((array, int(i)) for i in np.flatnonzero(array == pointer))
            if found:
                slots[name] = found
        return slots

    def _point_input(self, name: str, array: np.ndarray) -> None:
        address = array.ctypes.data
        for args, i in self._input_slots[name]:
            args[i] = address

    # -- threads
    @property
    def num_threads(self) -> int:
        """Threads the kernels use."""
        return self._num_threads

    def set_num_threads(self, n: Optional[int]) -> None:
        """Run the kernels on ``n`` threads (0: one per core; None: ``RB_NUM_THREADS`` as it is
        now). The count is fixed in the kernels' bound calls until the next change."""
        if n is None:
            n = _config.num_threads()
        n = int(n)
        if n < 0:
            raise ValueError(f"num_threads must be >= 0 (0: one per core), got {n}")
        if n == 0:
            import os
            n = os.cpu_count() or 1
        self._num_threads = n
        self._bind_calls()

    # -- inputs
    @property
    def input_names(self) -> list:
        return [name for name, _ in self._graph.inputs]

    def input_info(self) -> dict:
        """``{name: (shape, dtype)}`` of every input, in order."""
        return {name: (e.shape, e.dtype) for name, e in self._input_specs.items()}

    def _checked(self, name: str, value) -> np.ndarray:
        spec = self._input_specs.get(name)
        if spec is None:
            raise ExecutionError(f"no input named {name!r}; the inputs are "
                                 f"{', '.join(self.input_names) or 'none'}",
                                 input_name=name, expected=self.input_names, given=name)
        dtype = np.dtype(spec.dtype)
        if isinstance(value, np.ndarray):
            array = value
        else:
            try:
                array = np.asarray(value, dtype=dtype)
            except (TypeError, ValueError) as err:
                given = type(value).__name__
                raise ExecutionError(f"input {name!r}: cannot convert {given} to "
                                     f"{spec.type_text}: {err}", input_name=name,
                                     expected=spec.type_text, given=given) from None
        if array.dtype != dtype or array.shape != spec.shape:
            # the messages are made only for a wrong input: a run's checks stay cheap
            expected, given = spec.type_text, _tensor_text(array.shape, array.dtype.name)
            what = "dtype" if array.dtype != dtype else "shape"
            raise ExecutionError(f"input {name!r}: wrong {what}: expected {expected}, given {given}",
                                 input_name=name, expected=expected, given=given)
        return array

    def set_input(self, name: Optional[str] = None, value=None, /, **inputs) -> None:
        """Copy inputs into the module's input buffers: ``set_input("x", a)`` or
        ``set_input(x=a, y=b)``. Every value is checked before any is copied. (``name`` and
        ``value`` are positional only, so inputs of those names are keywords like any other.)"""
        if name is not None:
            if name in inputs:
                raise ExecutionError(f"input {name!r} given twice", input_name=name)
            inputs = {name: value, **inputs}
        checked = {n: self._checked(n, v) for n, v in inputs.items()}
        for n, array in checked.items():
            np.copyto(self._arrays[self._input_specs[n].index], array)
            self._input_set[n] = True
            if self._held.pop(n, None) is not None:
                self._point_input(n, self._arrays[self._input_specs[n].index])

    def _take_inputs(self, inputs: dict) -> None:
        """``run``'s inputs: each read in place where the compiled code can be pointed at it (a
        C-contiguous array of the input's dtype, aligned to its element size), else copied."""
        checked = {n: self._checked(n, v) for n, v in inputs.items()}
        for n, array in checked.items():
            if self._held.get(n) is array:
                # the kernels point at it already; its memory cannot have moved (numpy does
                # not resize an array another reference, this one, holds)
                continue
            if n in self._input_slots and array.flags.c_contiguous \
                    and array.ctypes.data % array.dtype.itemsize == 0:
                self._point_input(n, array)
                self._held[n] = array
                self._input_set[n] = True
            else:
                self.set_input(**{n: array})

    # -- running
    def run(self, **inputs):
        """Set ``inputs`` (all checked first), run every kernel, return the result: an array, or a
        tuple for a tuple result (copies; the module's buffers are reused by the next run).

        An input array that compiled code can read where it is (C-contiguous, of the input's
        dtype, aligned to its element size, and every kernel reading it compiled) is not copied:
        the kernels are pointed at it, and they read it there until the input is given again
        (a ``run()`` or ``benchmark()`` without it reads it again, as it is then). ``set_input``
        always copies."""
        if inputs:
            self._take_inputs(inputs)
        missing = [n for n, ok in self._input_set.items() if not ok]
        if missing:
            spec = self._input_specs[missing[0]]
            raise ExecutionError(f"input {missing[0]!r} ({spec.type_text}) was not given; the "
                                 f"inputs are {', '.join(self.input_names)}",
                                 input_name=missing[0], expected=spec.type_text, given=None)
        self._execute()
        return self._result()

    def _execute(self) -> None:
        for call in self._run_list:
            call()
        for dst, src in self._output_copies:
            np.copyto(dst, src)

    def _result(self):
        graph = self._graph
        copies = {}
        for e, array in zip(graph.outputs, self._output_arrays):
            if e not in copies:
                copies[e] = array.copy()
        if not isinstance(graph.result, tuple):
            return copies[graph.result]

        def build(value):
            if isinstance(value, tuple):
                return tuple(build(v) for v in value)
            return copies[value]
        return build(graph.result)

    def get_num_outputs(self) -> int:
        """The number of output tensors (a tuple result flattened)."""
        return len(self._graph.outputs)

    def get_output(self, index: int) -> np.ndarray:
        """A copy of output ``index`` (of the flattened result) as the last run left it."""
        n = len(self._output_arrays)
        if not -n <= index < n:
            raise IndexError(f"output {index} of {n}")
        return self._output_arrays[index].copy()

    def _check_ready(self) -> None:
        missing = [n for n, ok in self._input_set.items() if not ok]
        if missing:
            raise ExecutionError(f"input {missing[0]!r} was not given; set every input "
                                 f"({', '.join(self.input_names)}) before timing",
                                 input_name=missing[0])

    def benchmark(self, number: int = 10, repeat: int = 5, warmup: int = 1,
                  **inputs) -> BenchmarkResult:
        """Time ``repeat`` rounds of ``number`` runs (after ``warmup`` runs) on the inputs set; the
        result holds the per-run mean of each round."""
        if number < 1 or repeat < 1:
            raise ValueError(f"number and repeat must be >= 1, got {number} and {repeat}")
        if inputs:
            self.set_input(**inputs)
        self._check_ready()
        execute = self._execute
        for _ in range(warmup):
            execute()
        times = []
        clock = time.perf_counter
        for _ in range(repeat):
            start = clock()
            for _ in range(number):
                execute()
            times.append((clock() - start) * 1e3 / number)
        return BenchmarkResult(times, number, repeat)

    def profile(self, number: int = 10, warmup: int = 1, **inputs) -> Profile:
        """Time every kernel call ``number`` times; one row per distinct fused group, in the order
        groups first run: ops, pattern, schedule rule, calls per run, median ms per call, ms per
        run, share of the total, GFLOP/s (when the anchor op counts flops). Each kernel is
        called from Python here, so its time includes that call's microsecond or so, which a
        run (one call into compiled code for all of them) does not pay. A group on the
        simulated accelerator (rule ``accel ...``) counts the time its simulated cycles take at
        the design's clock, the host's time spent simulating it does not."""
        if number < 1:
            raise ValueError(f"number must be >= 1, got {number}")
        if inputs:
            self.set_input(**inputs)
        self._check_ready()
        for _ in range(warmup):
            self._execute()
        samples = [[] for _ in self._calls]
        clock = time.perf_counter
        for _ in range(number):
            for i, call in enumerate(self._calls):
                start = clock()
                call()
                samples[i].append(clock() - start)
        return self._profile_table(samples, number)

    def _profile_table(self, samples: list, number: int) -> Profile:
        """The :class:`Profile` of ``samples``: for each call of :attr:`_calls`, in execution
        order, the seconds it took in each run. Backends that time calls by other means (the
        OpenCL device's profiling events) build their table here too, so every profile has the
        same rows and columns."""
        per_kernel: dict = {}
        for node, times in zip(self._graph.nodes, samples):
            slot = per_kernel.setdefault(id(node.kernel), (node.kernel, [], []))
            simulated = getattr(node.kernel.compiled, "simulated_seconds", None)
            if simulated is not None:   # an accelerator group: its simulated time, not the host's
                times = [simulated] * len(times)
            slot[1].extend(times)
            slot[2].append(node.index)
        total_ms = 0.0
        stats = []
        views = getattr(self, "_views", set())
        for kernel, times, nodes in per_kernel.values():
            per_call = float(np.median(times)) * 1e3
            per_run = per_call * len(nodes)
            total_ms += per_run
            stats.append((kernel, per_call, per_run, len(nodes)))
        rows = []
        for i, (kernel, per_call, per_run, calls) in enumerate(stats):
            gflops = kernel.flops / (per_call * 1e-3) / 1e9 if kernel.flops and per_call else None
            rule = "view" if views.issuperset(per_kernel[id(kernel)][2]) else kernel.rule
            rows.append({"#": i, "group": kernel.name, "ops": ", ".join(kernel.ops) or "copy",
                         "pattern": kernel.pattern, "rule": rule, "calls": calls,
                         "ms/call": round(per_call, 4), "ms/run": round(per_run, 4),
                         "%": round(100 * per_run / total_ms, 1) if total_ms else 0.0,
                         "GFLOP/s": round(gflops, 1) if gflops is not None else ""})
        total_flops = sum(k.flops * c for k, _, _, c in stats)
        rows.append({"#": "", "group": "total", "ops": "", "pattern": "", "rule": "",
                     "calls": sum(c for *_, c in stats), "ms/call": "",
                     "ms/run": round(total_ms, 4), "%": 100.0,
                     "GFLOP/s": round(total_flops / (total_ms * 1e-3) / 1e9, 1)
                     if total_flops and total_ms else ""})
        return Profile(rows, total_ms, number)

    # -- looking inside
    @property
    def kernels(self) -> list:
        """The distinct fused groups (:class:`~relaybench.backends.build.GroupKernel`: name,
        lowered, compiled), in order of first use."""
        return list(self._kernels)

    @property
    def groups(self) -> list:
        """Every call, in execution order: ``(name, lowered, compiled)``; a call is named after
        its kernel, with ``#1``, ``#2``, ... for the kernel's further calls."""
        return [(n.name, n.kernel.lowered, n.kernel.compiled) for n in self._graph.nodes]

    @property
    def graph(self) -> Graph:
        return self._graph

    def memory_plan(self) -> MemoryPlan:
        """The static memory plan's summary (see :class:`MemoryPlan`)."""
        return self._plan

    def source(self, kind: str = "loops", group=None) -> str:
        """The ``"loops"`` (loop IR), ``"llvm"`` or ``"asm"`` source of one group's kernel (by
        name or index in :attr:`kernels`) or, with ``group=None``, of all of them; ``"accel"``:
        the instruction stream of an accelerator group (``group=None``: of every one)."""
        if group is None and kind == "accel":
            chosen = [k for k in self._kernels if getattr(k, "accel", False)]
            if not chosen:
                raise ValueError("no group of this module runs on the accelerator")
        elif group is None:
            chosen = self._kernels
        elif isinstance(group, int):
            chosen = [self._kernels[group]]
        else:
            chosen = [k for k in self._kernels if k.name == group]
            if not chosen:
                by_node = {n.name: n.kernel for n in self._graph.nodes}
                if group not in by_node:
                    raise KeyError(f"no group named {group!r}; the kernels are "
                                   f"{', '.join(k.name for k in self._kernels)}")
                chosen = [by_node[group]]
        texts = [k.source(kind) for k in chosen]
        return texts[0] if len(texts) == 1 else "\n\n".join(texts)

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {e.type_text}" for n, e in self._input_specs.items())
        host = f", {len(self.host_groups)} on the host" if self.host_groups else ""
        return (f"GraphModule(({ins}); {len(self._graph.nodes)} calls of "
                f"{len(self._kernels)} kernels{host}; {self._plan.storages} storages)")

    def _repr_html_(self) -> str:
        from ..viz.html import html
        return html(self)
