"""The dataflow graph of a Relay program, drawn with Graphviz.

:func:`to_dot` turns ``@main`` of a module (or a function, or any expression) into a
``graphviz.Digraph``: one node per operator call, labelled with the operator and its key
attributes (``nn.conv2d`` / ``3x3 s2 p1``, layouts when they are not NCHW); one edge per use of a
value, labelled with the value's shape and dtype and colored by its dtype class
(:data:`DTYPE_COLORS`: 8-bit integers blue, int16 teal, int32 magenta, float16/bfloat16 olive,
float32 the neutral gray), so the int8 region of a quantized program stands out from its float
parts; each call of a fused ``Primitive`` function drawn as a cluster of its operators, labelled
with the group's name and pattern kind. Nodes are filled by pattern kind
(:data:`PATTERN_COLORS`); ``layout_transform`` and quantization operators have a thick border.
Parameters and constants are small plain-text nodes (a constant shows its shape, never its
values); tuples and projections are small boxes.

:func:`render_svg` runs the ``graphviz-pure`` executable (the pip-installed Graphviz, so no
system package is needed) and returns the SVG text. The digraphs :func:`to_dot` returns draw
themselves in a notebook through it.

>>> import relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
...   %0 = nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1, 1, 1]);
...   nn.relu(%0)
... }''')
>>> g = to_dot(mod, tooltips=False)
>>> for line in g.source.splitlines()[4:]:
...     print(line.strip())
n0 [label="%x\\n(1, 3, 8, 8) float32" fontsize=10 height=0.2 shape=plaintext]
n1 [label="%w\\n(4, 3, 3, 3) float32" fontsize=10 height=0.2 shape=plaintext]
n2 [label="nn.conv2d\\n3x3 s2 p1" fillcolor="#f4b6b6" shape=box style="rounded,filled"]
n3 [label="nn.relu" fillcolor="#c8e6c9" shape=box style="rounded,filled"]
n0 -> n2
n1 -> n2
n2 -> n3 [label=" (1, 4, 4, 4) float32 "]
}

Parameters and constants show their shape and dtype on their own node, so the edges leaving
them go unlabelled (labels side by side on an operator's inputs would run into each other). Each
node's ``tooltip`` (:func:`node_tooltip`: its full type, every attribute and the Relay text it
came from) is the SVG ``<title>`` a browser shows on hover, in a notebook and in a saved file.

The walk is iterative (:func:`relaybench.ir.functor.post_order`), and node names are a counter in
visit order (``n0``, ``n1``, ...), so the same program gives the same DOT text every time.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Optional

import graphviz

from ..ir.expr import (Call, Constant, Constructor, Expr, Function, GlobalVar, If, Let, Match, Op,
                       RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var, expr_children)
from ..ir.functor import post_order
from ..ir.module import IRModule
from ..ir.types import TensorType, TupleType, Type
from ..op.registry import OpPattern

__all__ = ["to_dot", "render_svg", "RelayDigraph", "GraphvizError", "PATTERN_COLORS", "PATTERN_NAMES",
           "DTYPE_COLORS", "dtype_class", "edge_style", "DataflowGraph", "GraphNode", "dataflow_graph",
           "is_layout_op", "is_quantize_op", "find_graphviz", "legend", "ACCEL_CLUSTER", "CPU_CLUSTER"]

#: fill color of an operator node by its pattern kind (the legend of every drawing)
PATTERN_COLORS = {
    OpPattern.ELEMWISE: "#c8e6c9",             # green: elementwise
    OpPattern.BROADCAST: "#bbdefb",            # blue: broadcast
    OpPattern.INJECTIVE: "#fff59d",            # yellow: injective
    OpPattern.COMM_REDUCE: "#ffcc80",          # orange: reduce
    OpPattern.OUT_ELEMWISE_FUSABLE: "#f4b6b6",  # red: conv2d, dense, pooling
    OpPattern.TUPLE: "#eeeeee",
    OpPattern.OPAQUE: "#d7ccc8",               # brown-grey: opaque
}

#: the legend's words for each pattern kind
PATTERN_NAMES = {
    OpPattern.ELEMWISE: "elementwise", OpPattern.BROADCAST: "broadcast",
    OpPattern.INJECTIVE: "injective", OpPattern.COMM_REDUCE: "reduce",
    OpPattern.OUT_ELEMWISE_FUSABLE: "out-elemwise-fusable", OpPattern.TUPLE: "tuple",
    OpPattern.OPAQUE: "opaque",
}

#: the color and pen width of an edge by the dtype class of the value it carries
#: (:func:`dtype_class`). Saturated hues, so a line reads against the pastel node fills, and none
#: of them the purple of ``layout_transform``, the orange of quantization operators or the
#: green and red of :func:`relaybench.viz.diff`. The int8 pen is the widest, so the int8
#: region is the boldest part of a drawing; the other classes are a little wider than float32,
#: the common case, which is the drawing's plain gray edge (written without attributes), as are
#: ``bool`` and every other dtype.
DTYPE_COLORS = {
    "int8": ("#1565c0", 2.5),       # blue: int8 and uint8, the quantized data and weights
    "int16": ("#00838f", 2.0),      # teal: int16 and uint16 (8/16 accumulators)
    "int32": ("#ad1457", 2.0),      # magenta: int32 and uint32 (the accumulators)
    "float16": ("#9e9d24", 2.0),    # olive: float16 and bfloat16
    "float32": ("#555555", 1.0),    # gray: the edge attributes' default
}

#: the legend's words for each dtype class
DTYPE_NAMES = {"int8": "int8, uint8", "int16": "int16, uint16", "int32": "int32, uint32",
               "float16": "float16, bfloat16", "float32": "float32"}

_DTYPE_CLASSES = {"int8": "int8", "uint8": "int8", "int16": "int16", "uint16": "int16",
                  "int32": "int32", "uint32": "int32", "float16": "float16", "bfloat16": "float16",
                  "float32": "float32"}

_LAYOUT_BORDER = "#6a1b9a"    # purple: layout_transform

#: the attributes of a fused group's cluster that runs on the simulated accelerator: a thick dark
#: goldenrod border around a light yellow background, a color no node fill, edge, operator
#: border or diff mark uses, so the accelerator's share of a program reads at a glance
ACCEL_CLUSTER = {"style": "rounded,filled,bold", "color": "#b8860b", "fillcolor": "#fff3c4",
                 "penwidth": "2.5"}
#: the attributes of a fused group's cluster that runs on the CPU (every cluster of a drawing
#: that does not say where its groups run): a thin dashed gray border
CPU_CLUSTER = {"style": "rounded,dashed", "color": "#757575"}
_QUANTIZE_BORDER = "#e65100"  # dark orange: quantization and annotation operators
_QUANTIZE_PREFIXES = ("qnn.", "annotation.", "relay.op.annotation")

_GRAPH_ATTRS = {"rankdir": "TB", "newrank": "true"}
#: the drawings' font: DejaVu Sans, whose metrics Graphviz lays the labels out with, is what a
#: browser on Linux draws for it (and draws for "Helvetica" as well, about a fifth wider than
#: Helvetica's metrics, so labels laid out for Helvetica ran into each other there); where it is
#: missing, the SVG falls back to narrower fonts (:data:`FONT_FAMILY`), which fit all the more
FONT = "DejaVu Sans"
#: the SVG's ``font-family``: the font laid out with, then narrower ones
FONT_FAMILY = "DejaVu Sans,Arial,Helvetica,sans-serif"
_NODE_ATTRS = {"fontname": FONT, "fontsize": "11"}
_EDGE_ATTRS = {"fontname": FONT, "fontsize": "9", "color": DTYPE_COLORS["float32"][0]}

_RENDER_TIMEOUT = 120.0


def dtype_class(t: Optional[Type]) -> Optional[str]:
    """The key of :data:`DTYPE_COLORS` for a value of type ``t``: its dtype's class for a tensor,
    the common class of a tuple's fields when they all share one, else None (bool, int64,
    float64, mixed tuples, functions, an unknown type).

    >>> from relaybench.ir.types import TensorType, TupleType
    >>> dtype_class(TensorType((2, 3), "uint8")), dtype_class(TensorType((), "bfloat16"))
    ('int8', 'float16')
    >>> dtype_class(TupleType([TensorType((2,), "int32"), TensorType((2,), "int32")]))
    'int32'
    >>> dtype_class(TensorType((2,), "bool")) is None
    True
    """
    if isinstance(t, TensorType):
        return _DTYPE_CLASSES.get(str(t.dtype))
    if isinstance(t, TupleType) and t.fields:
        classes = {dtype_class(f) for f in t.fields}
        return classes.pop() if len(classes) == 1 else None
    return None


def edge_style(t: Optional[Type]) -> dict:
    """The attributes that color an edge carrying a value of type ``t`` (``color``,
    ``fontcolor`` for its label, ``penwidth``), or ``{}`` for the plain gray edge (float32, bool,
    and the dtypes :data:`DTYPE_COLORS` has no class for)."""
    cls = dtype_class(t)
    if cls is None or cls == "float32":
        return {}
    color, width = DTYPE_COLORS[cls]
    return {"color": color, "fontcolor": color, "penwidth": f"{width:g}"}


def is_layout_op(name: str) -> bool:
    """Whether the operator named ``name`` only changes a tensor's layout."""
    return name == "layout_transform"


def is_quantize_op(name: str) -> bool:
    """Whether the operator named ``name`` belongs to quantization (``qnn.*``, annotations,
    ``simulated_quantize``)."""
    return name.startswith(_QUANTIZE_PREFIXES) or name.endswith("simulated_quantize")


# ---------------------------------------------------------------------------------------------
# The graph model shared by the drawing and the diff


@dataclass(eq=False)
class GraphNode:
    """One node of a :class:`DataflowGraph`.

    ``kind`` is ``"call"``, ``"var"``, ``"const"``, ``"tuple"``, ``"getitem"`` or ``"other"``;
    ``name`` is short (the operator's name, ``%x``, ``const``, ``tuple``, ``.0``, ``if``...);
    ``key`` identifies what the node computes apart from its inputs (the operator and its
    attributes, a variable's name and type, a constant's shape, dtype and contents);
    ``inputs`` are the indices of the nodes it reads, in argument order, and ``input_types``
    the types flowing along those edges; ``cluster`` the index of its fused group, if any.
    """

    index: int
    kind: str
    name: str
    label: str
    key: tuple
    inputs: list = field(default_factory=list)
    input_types: list = field(default_factory=list)
    cluster: Optional[int] = None
    pattern: Optional[OpPattern] = None
    expr: Optional[Expr] = None

    @property
    def id(self) -> str:
        return f"n{self.index}"


@dataclass(eq=False)
class Cluster:
    """One call of a fused primitive function: its group name and pattern kind, its nodes, and,
    when the drawing knows it (:func:`to_dot`'s ``accel_groups``), where it runs."""

    index: int
    name: str
    pattern: Optional[OpPattern]
    anchor: Optional[str]
    nodes: list = field(default_factory=list)
    call: Optional[Call] = None       # the call of the Primitive function this cluster draws
    position: Optional[int] = None    # the call's index among @main's calls, in evaluation order
    device: Optional[str] = None      # "accelerator" or "CPU" when known, else None
    cycles: Optional[int] = None      # an accelerator group's simulated cycles (its last call)
    kernel: Optional[str] = None      # the name of the kernel a compiled module runs for it


@dataclass(eq=False)
class DataflowGraph:
    """The nodes (in visit order, inputs before their users), the fused-group clusters and the
    indices of the output nodes of one function."""

    nodes: list
    clusters: list
    outputs: list

    def consumers(self) -> list:
        """For each node, the ``(user index, argument position)`` pairs that read it."""
        users = [[] for _ in self.nodes]
        for node in self.nodes:
            for pos, i in enumerate(node.inputs):
                users[i].append((node.index, pos))
        return users


def _shape_text(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def _type_label(t: Optional[Type], limit: int) -> str:
    if t is None:
        return ""
    if isinstance(t, TensorType):
        text = f"{_shape_text(t.shape)} {t.dtype}"
    elif isinstance(t, TupleType):
        fields = [_type_label(f, limit) for f in t.fields]
        if len(fields) > 2 and len(set(fields)) == 1:   # a short label: the fields counted
            text = f"{len(fields)} x {fields[0]}"
        else:
            text = "(" + ", ".join(fields) + ")"
    else:
        text = str(t)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _ints(value) -> tuple:
    if isinstance(value, (tuple, list)):
        return tuple(value)
    return (value,)


def _compact(values) -> str:
    """``(2, 2)`` as ``2``, ``(1, 0, 1, 0)`` as ``1,0,1,0``."""
    values = _ints(values)
    if values and all(v == values[0] for v in values):
        return str(values[0])
    return ",".join(str(v) for v in values)


def _layout_axes(layout: str) -> list:
    return re.findall(r"\d*[A-Za-z]", layout or "")


def _kernel_size(call: Call, layout: str) -> Optional[tuple]:
    ks = call.attrs.get("kernel_size")
    if ks:
        return _ints(ks)
    if len(call.args) < 2:
        return None
    wt = call.args[1].type_or_none
    if not isinstance(wt, TensorType):
        return None
    axes = _layout_axes(layout)
    if len(axes) != len(wt.shape) or "H" not in axes or "W" not in axes:
        return None
    return (wt.shape[axes.index("H")], wt.shape[axes.index("W")])


def _window_label(size, strides, padding, dilation) -> list:
    parts = []
    if size is not None:
        parts.append("x".join(str(s) for s in size))
    if strides is not None and any(s != 1 for s in _ints(strides)):
        parts.append("s" + _compact(strides))
    if padding is not None and any(p != 0 for p in _ints(padding)):
        parts.append("p" + _compact(padding))
    if dilation is not None and any(d != 1 for d in _ints(dilation)):
        parts.append("d" + _compact(dilation))
    return parts


def _conv_attrs(call: Call) -> list:
    a = call.attrs
    data_layout = a.get("data_layout", "NCHW")
    kernel_layout = a.get("kernel_layout", "OIHW")
    parts = _window_label(_kernel_size(call, kernel_layout), a.get("strides"), a.get("padding"), a.get("dilation"))
    if a.get("groups", 1) != 1:
        parts.append(f"g{a.get('groups')}")
    lines = [" ".join(parts)] if parts else []
    out_layout = a.get("out_layout") or data_layout
    if data_layout != "NCHW" or kernel_layout not in ("OIHW", "IOHW") or out_layout != data_layout:
        text = f"{data_layout}/{kernel_layout}"
        if out_layout != data_layout:
            text += f"->{out_layout}"
        lines.append(text)
    return lines


def _pool_attrs(call: Call) -> list:
    a = call.attrs
    parts = _window_label(_ints(a["pool_size"]) if "pool_size" in a else None, a.get("strides"),
                          a.get("padding"), a.get("dilation"))
    lines = [" ".join(parts)] if parts else []
    layout = a.get("layout", "NCHW")
    if layout != "NCHW":
        lines.append(layout)
    return lines


def _layout_attrs(call: Call) -> list:
    return [f"{call.attrs.get('src_layout', '')}->{call.attrs.get('dst_layout', '')}"]


def _value_text(v) -> str:
    if isinstance(v, (tuple, list)):
        return "[" + ",".join(_value_text(x) for x in v) + "]"
    if isinstance(v, str):
        return v
    return str(v)


def _default_attrs(call: Call) -> list:
    """The attributes that differ from the operator's defaults, ``k=v``."""
    opdef = call.op.opdef if isinstance(call.op, Op) else None
    defaults = opdef.attrs if opdef is not None else {}
    parts = []
    for k, v in call.attrs.items():
        if k in defaults and defaults[k] == v:
            continue
        if k in defaults and isinstance(v, tuple) and _ints(defaults[k]) == v:
            continue
        parts.append(f"{k}={_value_text(v)}")
    return [" ".join(parts)] if parts else []


# operator name -> the lines of key attributes under the name (everything else: non-default attrs)
_ATTR_LABELS = {
    "nn.conv2d": _conv_attrs, "nn.conv2d_transpose": _conv_attrs,
    "nn.max_pool2d": _pool_attrs, "nn.avg_pool2d": _pool_attrs,
    "nn.global_avg_pool2d": _pool_attrs, "nn.global_max_pool2d": _pool_attrs,
    "nn.adaptive_avg_pool2d": _pool_attrs,
    "layout_transform": _layout_attrs,
}


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:max(limit - 3, 1)] + "..."


def _call_label(call: Call, limit: int) -> str:
    name = call.op.name
    lines = _ATTR_LABELS.get(name, _default_attrs)(call)
    return "\\n".join(_clip(line, limit) for line in [name, *lines] if line)


_DIGESTS: dict = {}


def _const_digest(c: Constant) -> str:
    """A digest of a constant's contents (cached per node: graphs are drawn and diffed often)."""
    import hashlib
    import weakref
    ref = _DIGESTS.get(id(c))
    if ref is not None and ref[0]() is c:
        return ref[1]
    data = c.data
    h = hashlib.blake2b(digest_size=12)
    h.update(f"{data.dtype.str}{data.shape}".encode())
    h.update(memoryview(data if data.flags.c_contiguous else data.copy()).cast("B"))
    digest = h.hexdigest()
    key = id(c)
    _DIGESTS[key] = (weakref.ref(c, lambda _r, k=key: _DIGESTS.pop(k, None)), digest)
    return digest


def _callee_text(op: Expr) -> str:
    if isinstance(op, (GlobalVar, Constructor)):
        return ("@" if isinstance(op, GlobalVar) else "") + op.name_hint
    if isinstance(op, Var):
        return "%" + op.name_hint
    if isinstance(op, Function):
        return "fn"
    return type(op).__name__


_OTHER_NAMES = {If: "if", Match: "match", Function: "fn", RefCreate: "ref", RefRead: "ref_read",
                RefWrite: "ref_write", GlobalVar: "global", Constructor: "constructor"}


def _children(e: Expr) -> tuple:
    """What the drawing descends into: arguments of calls (never a callee function's body),
    a let's value and body (its variable is an alias of the value), nothing of a function literal."""
    if isinstance(e, Call):
        if isinstance(e.op, Var):
            return (e.op,) + e.args
        return e.args
    if isinstance(e, Function):
        return ()
    if isinstance(e, Let):
        return (e.value, e.body)
    return tuple(c for c in expr_children(e) if not isinstance(c, Op))


class _Builder:
    def __init__(self, types: bool, max_label: int):
        self.types = types
        self.max_label = max_label
        self.nodes: list = []
        self.clusters: list = []
        self.labels: dict = {}
        self.calls = 0   # calls drawn outside any cluster: @main's calls, in evaluation order

    def add(self, kind, name, label, key, expr, inputs=(), cluster=None, pattern=None) -> int:
        index = len(self.nodes)
        input_types = []
        node_inputs = []
        for src, t in inputs:
            node_inputs.append(src)
            input_types.append(t)
        node = GraphNode(index, kind, name, label, key, node_inputs, input_types, cluster, pattern, expr)
        self.nodes.append(node)
        if cluster is not None:
            self.clusters[cluster].nodes.append(index)
        return index

    def type_of(self, e: Expr) -> Optional[Type]:
        if not self.types:
            return None
        t = e.type_or_none
        if t is None and isinstance(e, Var):
            t = e.type_annotation
        return t

    def walk(self, root: Expr, env: dict, cluster: Optional[int]) -> int:
        """Add the nodes of ``root`` (``env`` maps already-drawn expressions to nodes); return the
        node of its value."""
        order = post_order(root, _children)
        let_value = {e.var: e.value for e in order if isinstance(e, Let)}
        for e in order:
            if e in env:
                continue
            handler = _HANDLERS.get(type(e), _Builder._other)
            env[e] = handler(self, e, env, cluster, let_value)
        return env[root]

    def inputs(self, args, env) -> list:
        return [(env[a], self.type_of(a)) for a in args]

    def _var(self, e: Var, env, cluster, let_value):
        if e in let_value:
            return env[let_value[e]]
        t = e.type_annotation if e.type_annotation is not None else e.type_or_none
        label = "%" + e.name_hint
        if self.types and t is not None:   # its edges go unlabelled: the node says the type
            label += "\\n" + _type_label(t, self.max_label)
        return self.add("var", "%" + e.name_hint, label, ("var", e.name_hint, str(t)), e,
                        cluster=cluster)

    def _const(self, e: Constant, env, cluster, let_value):
        shape = _shape_text(e.data.shape)
        label = f"const {shape}" + (f" {e.data.dtype.name}" if self.types else "")
        return self.add("const", "const", label,
                        ("const", e.data.shape, e.data.dtype.name, _const_digest(e)), e, cluster=cluster)

    def _tuple(self, e: Tuple, env, cluster, let_value):
        return self.add("tuple", "tuple", "tuple", ("tuple", len(e.fields)), e, self.inputs(e.fields, env), cluster)

    def _getitem(self, e: TupleGetItem, env, cluster, let_value):
        return self.add("getitem", f".{e.index}", f".{e.index}", ("getitem", e.index), e,
                        self.inputs([e.tuple_value], env), cluster)

    def _let(self, e: Let, env, cluster, let_value):
        return env[e.body]

    def _call(self, e: Call, env, cluster, let_value):
        op = e.op
        if cluster is None:
            self.calls += 1
            if isinstance(op, Function) and op.is_primitive:
                return self._fused(e, env)
        args = ([op] if isinstance(op, Var) else []) + list(e.args)
        inputs = self.inputs(args, env)
        if isinstance(op, Op):
            opdef = op.opdef
            pattern = OpPattern(int(opdef.pattern)) if opdef is not None else OpPattern.OPAQUE
            key = ("call", op.name, e.attrs)
            if op.name in _ATTR_LABELS:  # these labels may read the arguments' types
                label = _call_label(e, self.max_label)
            else:
                label = self.labels.get(key)
                if label is None:
                    label = self.labels[key] = _call_label(e, self.max_label)
            return self.add("call", op.name, label, key, e, inputs, cluster, pattern)
        name = _callee_text(op)
        return self.add("call", name, name, ("call", name, e.attrs), e, inputs, cluster, OpPattern.OPAQUE)

    def _fused(self, call: Call, env) -> int:
        from ..passes.fuse_ops import fused_groups
        fn = call.op
        group = fused_groups(fn)[0]
        index = len(self.clusters)
        self.clusters.append(Cluster(index, group.name, group.pattern, group.anchor, call=call,
                                     position=self.calls - 1))
        inner = {p: env[a] for p, a in zip(fn.params, call.args)}
        return self.walk(fn.body, inner, index)

    def _other(self, e: Expr, env, cluster, let_value):
        name = _OTHER_NAMES.get(type(e), type(e).__name__)
        if isinstance(e, (GlobalVar, Constructor)):
            name = _callee_text(e)
        kids = [c for c in _children(e)]
        return self.add("other", name, name, ("other", name), e, self.inputs(kids, env), cluster)


_HANDLERS = {
    Var: _Builder._var, Constant: _Builder._const, Tuple: _Builder._tuple,
    TupleGetItem: _Builder._getitem, Let: _Builder._let, Call: _Builder._call,
}


def _as_function(obj, types: bool) -> Function:
    """``@main`` of a module, a function, or an expression wrapped in one; typed when ``types``."""
    from ..passes import InferType
    if isinstance(obj, IRModule):
        if "main" not in obj:
            raise ValueError("to_dot: the module has no @main to draw")
        main = obj["main"]
        if types and main.body.type_or_none is None:
            main = InferType()(obj)["main"]
        return main
    if isinstance(obj, Expr):
        fn = obj if isinstance(obj, Function) else None
        body = obj.body if fn is not None else obj
        if types and body.type_or_none is None:
            return InferType()(IRModule.from_expr(obj))["main"]
        if fn is None:
            return IRModule.from_expr(obj)["main"]
        return fn
    raise TypeError(f"to_dot: expected an IRModule, a Function or an expression, got {type(obj).__name__}")


def dataflow_graph(mod_or_function, *, types: bool = True, max_label: int = 40,
                   accel_groups=None) -> DataflowGraph:
    """The :class:`DataflowGraph` that :func:`to_dot` draws (and :func:`relaybench.viz.diff`
    compares). A compiled module (:class:`~relaybench.backends.graph_executor.GraphModule`)
    gives the graph of its optimized ``@main``, each cluster's ``device`` read from the kernel
    the module runs for that call; ``accel_groups`` (see :func:`to_dot`) says it for a module."""
    if _is_compiled(mod_or_function):
        if accel_groups is not None:
            raise ValueError("to_dot: accel_groups goes with a module; a compiled module's kernels "
                             "say themselves which groups run on the accelerator")
        fn, marks = _compiled_devices(mod_or_function)
    else:
        fn, marks = _as_function(mod_or_function, types), None
    b = _Builder(types, max_label)
    env: dict = {}
    for p in fn.params:
        env[p] = b._var(p, env, None, {})
    out = b.walk(fn.body, env, None)
    graph = DataflowGraph(b.nodes, b.clusters, [out])
    if marks is not None:
        for cluster in graph.clusters:
            on_accel, cycles, kernel = marks[cluster.call]
            cluster.device = "accelerator" if on_accel else "CPU"
            cluster.cycles = cycles
            cluster.kernel = kernel
    elif accel_groups is not None:
        _mark_accel_groups(graph, accel_groups)
    return graph


def _is_compiled(obj) -> bool:
    """Whether ``obj`` is a module compiled by :func:`relaybench.build` (imported only when the
    backends are loaded already: nothing else can have made one)."""
    executor = sys.modules.get("relaybench.backends.graph_executor")
    return executor is not None and isinstance(obj, executor.GraphModule)


def _compiled_devices(gm) -> tuple:
    """``@main`` of a compiled module (the optimized program its graph was read from) and, for
    each of its calls, ``(runs on the accelerator, simulated cycles of its last call or None)``
    from the kernel the module runs for it. The graph's nodes are the calls of ``@main`` in the
    order the graph executor reads them (:func:`~relaybench.backends.graph_executor.extract_graph`),
    so the two are paired by that same walk, not by names (structurally equal groups share a
    kernel, and a group whose scalar constants were inlined is a new function)."""
    from ..backends.graph_executor import _dataflow_order
    main = gm.mod["main"]
    calls = [n for n in _dataflow_order(main.body, {}) if isinstance(n, Call)]
    nodes = gm.graph.nodes
    if len(calls) != len(nodes):
        raise ValueError(f"to_dot: the compiled module runs {len(nodes)} calls but its @main makes "
                         f"{len(calls)}: the module and its graph disagree")
    marks = {}
    for call, node in zip(calls, nodes):
        kernel = node.kernel
        on_accel = bool(getattr(kernel, "accel", False))
        marks[call] = (on_accel, getattr(kernel.compiled, "cycles", None) if on_accel else None,
                       kernel.name)
    return main, marks


def _cluster_key_text(cluster: Cluster) -> str:
    return f"{cluster.position} ({cluster.name})"


def _matches(cluster: Cluster, key) -> bool:
    if isinstance(key, bool):
        raise TypeError(f"to_dot: accel_groups: {key!r} names no group (give call positions, group "
                        f"names or Primitive functions)")
    if isinstance(key, int) or (hasattr(key, "__index__") and not isinstance(key, (str, Expr))):
        return cluster.position == int(key.__index__())
    if isinstance(key, str):
        return cluster.name == key
    if isinstance(key, Function):
        return cluster.call is not None and cluster.call.op is key
    if isinstance(key, Call):
        return cluster.call is key
    raise TypeError(f"to_dot: accel_groups: a group is named by its call's position in @main, its "
                    f"name, its Primitive function or its call, not a {type(key).__name__}")


def _mark_accel_groups(graph: DataflowGraph, accel_groups) -> None:
    """Set each cluster's ``device`` (and ``cycles``) from ``accel_groups`` (see :func:`to_dot`);
    a key that names no fused group is an error listing the groups there are."""
    from collections.abc import Mapping
    if isinstance(accel_groups, Mapping):
        items = list(accel_groups.items())
    elif isinstance(accel_groups, (str, bytes)) or not hasattr(accel_groups, "__iter__"):
        raise TypeError(f"to_dot: accel_groups is a collection or a mapping of groups, not "
                        f"{type(accel_groups).__name__}")
    else:
        items = [(key, True) for key in accel_groups]
    on_accel: dict = {}
    for key, value in items:
        matched = [c for c in graph.clusters if _matches(c, key)]
        if not matched:
            groups = ", ".join(_cluster_key_text(c) for c in graph.clusters) or "none"
            raise ValueError(f"to_dot: accel_groups names {key!r}, which is no fused group of "
                             f"@main; its groups (call position and name) are: {groups}")
        if value is None or value is False:
            continue
        if isinstance(value, bool):
            cycles = None
        elif isinstance(value, int) and value >= 0:
            cycles = int(value)
        else:
            raise ValueError(f"to_dot: accel_groups[{key!r}] is {value!r}; a group's value is True, "
                             f"False or its simulated cycles (an int >= 0)")
        for c in matched:
            on_accel[c.index] = cycles
    for c in graph.clusters:
        c.device = "accelerator" if c.index in on_accel else "CPU"
        c.cycles = on_accel.get(c.index)


# ---------------------------------------------------------------------------------------------
# Drawing


class GraphvizError(RuntimeError):
    """The Graphviz executable is missing, failed or ran out of time."""


class InlineSVG:
    """SVG text shown in a notebook as HTML (inline, so its ``<title>`` tooltips work)."""

    def __init__(self, svg: str):
        self.svg = svg

    def _repr_html_(self) -> str:
        return f'<div class="rb-graph-view" style="overflow:auto;max-height:800px">{self.svg}</div>'


class RelayDigraph(graphviz.Digraph):
    """A ``graphviz.Digraph`` that renders through ``graphviz-pure`` (see :func:`render_svg`), so
    it shows itself in a notebook without a system Graphviz."""

    def pipe(self, format=None, renderer=None, formatter=None, neato_no_op=None, quiet=False, *,
             engine=None, encoding=None):
        fmt = format or self.format or "svg"
        data = _run_graphviz(self.source, engine or self.engine or "dot", fmt)
        return data.decode(encoding) if encoding is not None else data

    def inline(self) -> "InlineSVG":
        """The drawing as HTML holding the SVG inline, so that hovering a node in JupyterLab
        shows its tooltip (a cell's plain ``graph`` is shown as an image, whose nodes a browser
        does not hover; JupyterLab shows an inline SVG only in outputs made in this session)."""
        return InlineSVG(render_svg(self))

    def _repr_image_svg_xml(self) -> str:
        return render_svg(self)

    def _repr_svg_(self) -> str:
        return render_svg(self)


def _node_attrs(node: GraphNode, graph: Optional[DataflowGraph] = None) -> dict:
    """A node's DOT attributes; given its graph, its ``tooltip`` too (:func:`node_tooltip`)."""
    kind = node.kind
    if kind == "call":
        attrs = {"label": node.label, "shape": "box", "style": "rounded,filled",
                 "fillcolor": PATTERN_COLORS.get(node.pattern, PATTERN_COLORS[OpPattern.OPAQUE])}
        if is_layout_op(node.name):
            attrs.update(style="rounded,filled,bold", penwidth="3", color=_LAYOUT_BORDER)
        elif is_quantize_op(node.name):
            attrs.update(style="rounded,filled,bold", penwidth="3", color=_QUANTIZE_BORDER)
    elif kind == "var":
        attrs = {"label": node.label, "shape": "plaintext", "fontsize": "10", "height": "0.2"}
    elif kind == "const":
        attrs = {"label": node.label, "shape": "plaintext", "fontsize": "9", "fontcolor": "#616161",
                 "height": "0.2"}
    elif kind in ("tuple", "getitem"):
        attrs = {"label": node.label, "shape": "box", "fontsize": "8", "height": "0.2", "width": "0.3",
                 "margin": "0.02"}
    else:
        attrs = {"label": node.label, "shape": "ellipse", "style": "filled", "fillcolor": "#ffffff"}
    if graph is not None and node.expr is not None:
        attrs["tooltip"] = _tooltip_text(node_tooltip(node, graph))
    return attrs


# ---- what hovering a node shows ---------------------------------------------------------------

#: the longest tooltip line, in characters (a call's Relay text, an attribute's value)
TOOLTIP_LINE = 240


def _ref_text(node: GraphNode) -> str:
    """How a node is named in the Relay text of a tooltip: a parameter by its name, a scalar
    constant by its value, anything else by its node id (``%n3``)."""
    from ..ir.printer import format_scalar
    if node.kind == "var":
        return node.name
    if node.kind == "const" and isinstance(node.expr, Constant) and node.expr.data.ndim == 0:
        return format_scalar(node.expr.data) or "const"
    return f"%{node.id}"


def node_tooltip(node: GraphNode, graph: DataflowGraph) -> str:
    """What hovering ``node`` shows (the SVG ``<title>`` of its shape): the node and its kind,
    its full type, every attribute of a call (defaults included, one a line), the Relay text
    of the call with its inputs named by their node ids (``%n3``) and its type, and where the
    parser found it when the program was parsed from text.

    >>> import relaybench as rb
    >>> g = dataflow_graph(rb.parse('''#[version = "0.0.5"]
    ... def @main(%x: Tensor[(1, 4), float32]) { nn.softmax(%x) }'''))
    >>> print(node_tooltip(g.nodes[1], g))
    nn.softmax (n1)
    type: Tensor[(1, 4), float32]
    attrs:
    - axis=-1
    relay: %n1 = nn.softmax(%x) /* ty=Tensor[(1, 4), float32] */
    source: line 2:42
    """
    from ..ir.printer import _attr_text
    from ..ir.types import type_str
    e = node.expr
    t = e.type_or_none if e is not None else None
    if t is None and isinstance(e, Var):
        t = e.type_annotation
    ty = type_str(t) if t is not None else "(not inferred)"
    head = f"{node.name} ({node.id})" if node.kind == "call" else f"{node.name} ({node.kind}, {node.id})"
    lines = [head, f"type: {ty}"]
    if node.kind == "call" and isinstance(e, Call):
        attrs = dict(e.attrs.items()) if e.attrs else {}
        if attrs:
            lines.append("attrs:")
            lines.extend(_clip(f"- {k}={_attr_text(v)}", TOOLTIP_LINE) for k, v in attrs.items())
        opdef = e.op.opdef if isinstance(e.op, Op) else None
        shown = opdef.non_default_attrs(e.attrs) if opdef is not None and e.attrs else attrs
        args = [_ref_text(graph.nodes[i]) for i in node.inputs]
        args += [f"{k}={_attr_text(v)}" for k, v in shown.items()]
        lines.append(_clip(f"relay: %{node.id} = {node.name}({', '.join(args)}) /* ty={ty} */",
                           TOOLTIP_LINE))
    elif node.kind == "var":
        lines.append(f"relay: {node.name}: {ty}")
    elif node.kind == "const" and isinstance(e, Constant):
        lines.append(f"relay: meta[relay.Constant] /* ty={ty} */ ({e.data.size} values, "
                     f"{e.data.nbytes} bytes)")
    elif node.kind in ("tuple", "getitem"):
        args = [_ref_text(graph.nodes[i]) for i in node.inputs]
        text = f"({', '.join(args)})" if node.kind == "tuple" else f"{args[0]}{node.name}"
        lines.append(f"relay: %{node.id} = {text} /* ty={ty} */")
    span = getattr(e, "span", None) if e is not None else None
    if span is not None:
        lines.append(f"source: line {span.line}:{span.column}")
    return "\n".join(lines)


def _tooltip_text(text: str) -> str:
    """A tooltip as a DOT string's contents, on one line of DOT text: backslashes doubled and
    quotes escaped, so that Graphviz's escapes (``\\N``, ``\\G``) read as the text they are,
    and each line break written ``\\n``."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def cluster_tooltip(cluster: Cluster, graph: DataflowGraph) -> str:
    """What hovering a fused group's box shows: its name, pattern kind, the kernel a compiled
    module runs for it, where it runs, its operators and its call's result type."""
    from ..ir.types import type_str
    pattern = PATTERN_NAMES.get(cluster.pattern, "") if cluster.pattern is not None else ""
    lines = [f"{cluster.name} ({pattern})", f"call #{cluster.position} of @main"]
    if cluster.kernel is not None:
        lines.append(f"kernel: {cluster.kernel}")
    if cluster.device is not None:
        lines.append(f"runs on: {cluster.device}"
                     + (f", {cluster.cycles} cycles" if cluster.cycles is not None else ""))
    ops = [graph.nodes[i].name for i in cluster.nodes if graph.nodes[i].kind == "call"]
    lines.append("ops: " + ", ".join(ops))
    t = cluster.call.type_or_none if cluster.call is not None else None
    if t is not None:
        lines.append(f"type: {type_str(t)}")
    return "\n".join(lines)


def _cluster_attrs(cluster: Cluster, graph: Optional[DataflowGraph] = None) -> dict:
    """A cluster's label (group name and pattern kind, then where it runs when that is known:
    ``accelerator, 1234 cycles`` or ``CPU``) and border: :data:`ACCEL_CLUSTER` for a group on
    the accelerator, :data:`CPU_CLUSTER` otherwise. Given the graph, its SVG group gets the id
    ``rb_call_K`` (K the call's position in ``@main``: what a click in the FusionView reads)
    and the tooltip :func:`cluster_tooltip`."""
    pattern = PATTERN_NAMES.get(cluster.pattern, "") if cluster.pattern is not None else ""
    label = f"{cluster.name}\\n{pattern}"
    if cluster.device == "accelerator":
        label += "\\naccelerator" + (f", {cluster.cycles} cycles" if cluster.cycles is not None else "")
    elif cluster.device is not None:
        label += f"\\n{cluster.device}"
    style = ACCEL_CLUSTER if cluster.device == "accelerator" else CPU_CLUSTER
    attrs = {"label": label, **style, "fontsize": "9", "fontname": FONT, "labeljust": "l"}
    if graph is not None:
        attrs["id"] = f"rb_call_{cluster.position}"
        attrs["tooltip"] = _tooltip_text(cluster_tooltip(cluster, graph))
    return attrs


_PLAIN_ID = re.compile(r"([A-Za-z_][A-Za-z0-9_]*|-?(\.[0-9]+|[0-9]+(\.[0-9]*)?))\Z")
_DOT_KEYWORDS = frozenset({"node", "edge", "graph", "digraph", "subgraph", "strict"})
_UNESCAPED_QUOTE = re.compile(r'(?<!\\)"')


def _quote(value: str) -> str:
    """A DOT ID as the ``graphviz`` package writes it: bare when it may be, else in quotes (with
    inner quotes escaped and escape sequences such as ``\\n`` kept)."""
    if _PLAIN_ID.match(value) and value.lower() not in _DOT_KEYWORDS:
        return value
    return '"' + _UNESCAPED_QUOTE.sub('\\\\"', value) + '"'


def _statement(head: str, attrs: dict) -> str:
    """``\\tHEAD [label=... k=v ...]\\n`` with the label first and the other keys sorted, as
    ``graphviz.Digraph.node`` writes it (written here directly: graphs of 100,000 nodes are drawn)."""
    parts = []
    label = attrs.get("label")
    if label is not None:
        parts.append(f"label={_quote(label)}")
    for k in sorted(attrs):
        if k != "label":
            parts.append(f"{k}={_quote(str(attrs[k]))}")
    return f"\t{head} [{' '.join(parts)}]\n" if parts else f"\t{head}\n"


def _edge_attrs(t: Optional[Type], limit: int, labelled: bool = True) -> str:
    """The bracketed attributes of an edge carrying a value of type ``t`` (without the
    brackets): its shape-and-dtype label first (unless not ``labelled``; a space each side), then
    :func:`edge_style`'s, sorted; empty for an untyped edge."""
    if t is None:
        return ""
    # a space each side: Graphviz packs the labels of neighbouring edges edge to edge, and
    # the spaces keep them a word apart
    parts = [f"label={_quote(' ' + _type_label(t, limit) + ' ')}"] if labelled else []
    style = edge_style(t)
    parts.extend(f"{k}={_quote(style[k])}" for k in sorted(style))
    return " ".join(parts)


#: the kinds of node that show their own type, whose edges go unlabelled
_SELF_LABELLED = frozenset({"var", "const"})


def draw(graph: DataflowGraph, name: str = "main", *, node_extra=None, extra=None,
         tooltips: bool = True) -> RelayDigraph:
    """Draw a :class:`DataflowGraph`; ``node_extra(node) -> dict`` adds or changes a node's
    attributes, ``extra(digraph)`` adds statements at the end (the diff's removed nodes).

    Labels stay apart: a parameter or a constant shows its shape and dtype on its own node, so
    the edges leaving it go unlabelled (an operator's inputs from the weights would otherwise be
    labelled side by side, their texts running into each other); an edge out of an operator
    is labelled with its value's type, and Graphviz places those labels as nodes of the layout,
    so they do not collide. Every node and fused group has a tooltip (:func:`node_tooltip`,
    :func:`cluster_tooltip`) unless ``tooltips`` is False."""
    g = RelayDigraph(name=name, graph_attr=_GRAPH_ATTRS, node_attr=_NODE_ATTRS, edge_attr=_EDGE_ATTRS)
    emitted = set()

    def node_statement(target, node):
        attrs = _node_attrs(node, graph if tooltips else None)
        if node_extra is not None:
            attrs.update(node_extra(node) or {})
        target.body.append(_statement(node.id, attrs))

    for node in graph.nodes:
        if node.cluster is None:
            node_statement(g, node)
            continue
        if node.cluster in emitted:
            continue
        emitted.add(node.cluster)
        cluster = graph.clusters[node.cluster]
        with g.subgraph(name=f"cluster_{cluster.index}") as sub:
            sub.attr(**_cluster_attrs(cluster, graph if tooltips else None))
            for i in cluster.nodes:
                node_statement(sub, graph.nodes[i])
    limit = 2 * 40
    attrs_of: dict = {}   # (type, labelled) -> the edge's attribute text, made once per type
    body = g.body
    nodes = graph.nodes
    for node in nodes:
        for src, t in zip(node.inputs, node.input_types):
            key = (t, nodes[src].kind not in _SELF_LABELLED)
            try:
                text = attrs_of.get(key)
            except TypeError:  # a type that does not hash
                text = None
            if text is None:
                text = _edge_attrs(t, limit, key[1])
                try:
                    attrs_of[key] = text
                except TypeError:
                    pass
            body.append(f"\tn{src} -> {node.id} [{text}]\n" if text else f"\tn{src} -> {node.id}\n")
    if extra is not None:
        extra(g)
    return g


def legend() -> RelayDigraph:
    """A small drawing of the colors and borders :func:`to_dot` uses: the fill of each pattern
    kind, the borders of layout and quantization operators, the borders of fused groups on the
    accelerator and on the CPU, and the edge of each dtype class."""
    g = RelayDigraph(name="legend", graph_attr={"rankdir": "LR"}, node_attr=_NODE_ATTRS)
    for kind in (OpPattern.ELEMWISE, OpPattern.BROADCAST, OpPattern.INJECTIVE, OpPattern.COMM_REDUCE,
                 OpPattern.OUT_ELEMWISE_FUSABLE, OpPattern.OPAQUE):
        g.node(f"k{int(kind)}", label=PATTERN_NAMES[kind], shape="box", style="rounded,filled",
               fillcolor=PATTERN_COLORS[kind])
    g.node("layout", label="layout_transform", shape="box", style="rounded,filled,bold", penwidth="3",
           color=_LAYOUT_BORDER, fillcolor=PATTERN_COLORS[OpPattern.INJECTIVE])
    g.node("quantize", label="quantization", shape="box", style="rounded,filled,bold", penwidth="3",
           color=_QUANTIZE_BORDER, fillcolor=PATTERN_COLORS[OpPattern.OPAQUE])
    # the fused groups' borders: on the accelerator, on the CPU
    for key, label, style in (("accel", "fused group on the accelerator", ACCEL_CLUSTER),
                              ("cpu", "fused group on the CPU", CPU_CLUSTER)):
        with g.subgraph(name=f"cluster_{key}") as sub:
            sub.attr(label=label, fontsize="9", fontname=FONT, **style)
            sub.node(f"{key}_group", label="", shape="point", width="0.05", color=style["color"])
    # the edge colors: one short labelled edge per dtype class, between two dots
    with g.subgraph(name="cluster_dtypes") as sub:
        sub.attr(label="edges by dtype", style="rounded,dashed", color="#9e9e9e", fontsize="9",
                 fontname=FONT)
        for cls in reversed(DTYPE_COLORS):   # Graphviz stacks them bottom-up: int8 ends on top
            color, width = DTYPE_COLORS[cls]
            sub.node(f"{cls}_from", label="", shape="point", width="0.05", color=color)
            sub.node(f"{cls}_to", label="", shape="point", width="0.05", color=color)
            sub.edge(f"{cls}_from", f"{cls}_to", label=DTYPE_NAMES[cls], color=color, fontcolor=color,
                     penwidth=f"{width:g}", fontname=FONT, fontsize="9")
    return g


def to_dot(mod_or_function, *, types: bool = True, max_label: int = 40,
           accel_groups=None, tooltips: bool = True) -> RelayDigraph:
    """The dataflow graph of ``@main`` (or of a Function or an expression) as a ``graphviz.Digraph``.

    ``types`` labels each edge with the shape and dtype of the value it carries (type inference
    runs first when the program is not typed yet); ``max_label`` bounds each line of a node's
    label; ``tooltips`` gives every node and fused group the tooltip a browser shows on hover
    (:func:`node_tooltip`, :func:`cluster_tooltip`). Fused primitive functions are drawn as ``cluster_K`` subgraphs labelled with the
    group's name and pattern kind (the strongest among its operators', as
    :func:`relaybench.passes.fuse_ops.fused_groups` reports it). :func:`legend` draws the colors.

    Each typed edge is colored by the dtype class of its value (:func:`edge_style`, the table
    :data:`DTYPE_COLORS`): a realized quantized program shows its int8 values in bold blue and
    its int32 accumulators in magenta, between float32 edges in the plain gray. The attributes
    are made once per type, like the label.

    >>> import numpy as np, relaybench as rb
    >>> mod = rb.parse('''#[version = "0.0.5"]
    ... def @main(%x: Tensor[(1, 4), float32], %w: Tensor[(2, 4), float32]) {
    ...   nn.dense(%x, %w, units=2)
    ... }''')
    >>> w = np.array([[0.5, -1, 0.25, 2], [1, 1, 1, 1]], "float32")
    >>> with rb.quantize.qconfig(skip_dense_layer=False, skip_conv_layers=None):
    ...     qmod = rb.quantize.quantize(mod, params={"w": w})
    >>> for line in to_dot(qmod).source.splitlines():
    ...     if " -> " in line:
    ...         print(line.strip())
    n0 -> n2
    n1 -> n2
    n2 -> n3 [label=" (1, 4) float32 "]
    n3 -> n4 [label=" (1, 4) float32 "]
    n4 -> n5 [label=" (1, 4) float32 "]
    n5 -> n7 [label=" (1, 4) int8 " color="#1565c0" fontcolor="#1565c0" penwidth=2.5]
    n6 -> n7 [color="#1565c0" fontcolor="#1565c0" penwidth=2.5]
    n7 -> n8 [label=" (1, 2) int32 " color="#ad1457" fontcolor="#ad1457" penwidth=2]
    n8 -> n10 [label=" (1, 2) float32 "]
    n9 -> n10

    **Where each group runs.** Given a compiled module (``to_dot(rb.build(q, target="accel"))``)
    the drawing is of its optimized ``@main``, and each fused group's cluster says where the
    module runs that call: on the simulated accelerator (:data:`ACCEL_CLUSTER`, a thick
    goldenrod border on a light yellow background, labelled ``accelerator`` and, once the
    module has run, the simulated cycles of the group's last call) or on the CPU
    (:data:`CPU_CLUSTER`, labelled ``CPU``); :func:`legend` shows both. For a module that is not
    compiled, ``accel_groups`` says it: the groups on the accelerator, or a mapping from a group
    to True, False or its cycles. A group is named by the position of its call among
    ``@main``'s calls in evaluation order (the index into ``GraphModule.groups`` of the module
    built from it), by its name (every group of that name), by its Primitive function or by
    its call; a name that matches no group is an error listing them.

    >>> fused = rb.passes.FuseOps()(rb.parse('''#[version = "0.0.5"]
    ... def @main(%x: Tensor[(1, 16, 4, 4), int8], %w: Tensor[(16, 16, 1, 1), int8]) {
    ...   %0 = nn.conv2d(%x, %w, kernel_size=[1, 1], out_dtype="int32");
    ...   nn.relu(nn.max_pool2d(%0, pool_size=[2, 2]))
    ... }'''))
    >>> for line in to_dot(fused, accel_groups={0: 120}, tooltips=False).source.splitlines():
    ...     if line.strip().startswith("color="):
    ...         print(line.strip())
    color="#b8860b" fillcolor="#fff3c4" fontname="DejaVu Sans" fontsize=9 label="fused_nn_conv2d\\nout-elemwise-fusable\\naccelerator, 120 cycles" labeljust=l penwidth=2.5 style="rounded,filled,bold"
    color="#757575" fontname="DejaVu Sans" fontsize=9 label="fused_nn_max_pool2d_nn_relu\\nout-elemwise-fusable\\nCPU" labeljust=l style="rounded,dashed"
    """
    graph = dataflow_graph(mod_or_function, types=types, max_label=max_label,
                           accel_groups=accel_groups)
    return draw(graph, tooltips=tooltips)


# ---------------------------------------------------------------------------------------------
# Rendering


def find_graphviz() -> str:
    """The Graphviz executable to run: ``graphviz-pure`` next to the running Python (a virtual
    environment's ``bin``), else ``graphviz-pure`` or ``dot`` on PATH."""
    bindir = os.path.dirname(sys.executable)
    looked = []
    for name in ("graphviz-pure", "graphviz-pure.exe"):
        path = os.path.join(bindir, name)
        looked.append(path)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    for name in ("graphviz-pure", "dot"):
        looked.append(f"{name} on PATH")
        found = shutil.which(name)
        if found:
            return found
    raise GraphvizError("render_svg: no Graphviz executable found (looked for " + ", ".join(looked)
                        + "); install it with `pip install graphviz-pure` (the relaybench[lab] extra)")


def _run_graphviz(source: str, engine: str, fmt: str, timeout: float = _RENDER_TIMEOUT) -> bytes:
    exe = find_graphviz()
    try:
        proc = subprocess.run([exe, f"-K{engine}", f"-T{fmt}"], input=source.encode("utf-8"),
                              capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise GraphvizError(f"render_svg: {exe} -K{engine} -T{fmt} ran past {timeout:g} s "
                            f"on a graph of {source.count(chr(10))} lines") from None
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip()
        raise GraphvizError(f"render_svg: {exe} -K{engine} -T{fmt} failed (exit {proc.returncode}): "
                            f"{err[:2000]}")
    return proc.stdout


def render_svg(digraph_or_dot_source, engine: str = "dot", *, timeout: float = _RENDER_TIMEOUT) -> str:
    """SVG text (from ``<svg`` on, ready to embed in HTML) of a ``graphviz`` graph or DOT source,
    drawn by the ``graphviz-pure`` executable (:func:`find_graphviz`) within ``timeout`` seconds."""
    if isinstance(digraph_or_dot_source, (graphviz.Digraph, graphviz.Graph)):
        source = digraph_or_dot_source.source
    elif isinstance(digraph_or_dot_source, str):
        source = digraph_or_dot_source
    else:
        raise TypeError("render_svg: expected a graphviz graph or DOT source text, got "
                        f"{type(digraph_or_dot_source).__name__}")
    svg = _run_graphviz(source, engine, "svg", timeout).decode("utf-8")
    start = svg.find("<svg")
    return _titles_from_tooltips(svg[start:] if start >= 0 else svg)


# Graphviz writes a tooltip as the ``xlink:title`` of a link around the shape, and the element's
# ``<title>`` as its DOT name (``n3``); browsers show the ``<title>``, so it takes the tooltip.
_TITLED = re.compile(r'<title>[^<]*</title>(\s*<g id="a_[^"]*"><a xlink:title="([^"]*)">)')


def _titles_from_tooltips(svg: str) -> str:
    """The SVG with each tooltip also in its element's ``<title>`` (what a browser shows on
    hover, in JupyterLab and in a saved file alike), and :data:`FONT` with its fallbacks."""
    svg = svg.replace(f'font-family="{FONT}"', f'font-family="{FONT_FAMILY}"')
    return _TITLED.sub(lambda m: f"<title>{m.group(2)}</title>{m.group(1)}", svg)
