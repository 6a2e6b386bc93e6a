"""FuseOps and DefuseOps: operator fusion, Relay's central optimization, and its inverse.

FuseOps groups the operators of each function into *fused* functions, ``fn (%p0, ...,
Primitive=1) { ... }``, each of which the kernel layer turns into one kernel. It follows Relay's
algorithm (``src/relay/transforms/fuse_ops.cc`` and ``graph_partitioner.cc``) step by step:

1. **The indexed dataflow graph** (:class:`IndexedGraph`). Its nodes are the calls, tuples,
   projections, variables and constants of the function in post-DFS order (children before
   parents); each use of a node by an operator is an edge labelled with the consumer's pattern kind
   (:class:`~relaybench.op.registry.OpPattern`). A ``BROADCAST`` edge whose argument already has
   the output's shape counts as ``ELEMWISE``. Tuple fields and projections are ``INJECTIVE`` edges.
   Scalar constants are ``ELEMWISE`` nodes (they fuse into their consumer); tensor constants,
   variables, ``let``, ``if``, ``match``, references and calls of anything but an operator are
   ``OPAQUE``. A node used where fusion may not follow it (a function's result, a ``let``'s value,
   a branch, a condition, a callee, a field of a tuple that holds a non-tensor) is *external*.
2. **The post-dominator tree** (:class:`PostDominatorTree`), built in one pass in reverse
   topological order: a node's parent is the least common ancestor of its consumers, and the
   parent edge carries the strongest pattern kind met on the way.
3. **Grouping** (:class:`GraphPartitioner`) with a union-find over the nodes, in three phases over
   the nodes in post-DFS order. Phase 0 fuses an ``OUT_ELEMWISE_FUSABLE`` group (``nn.conv2d``,
   ``nn.dense``, pooling...) into its immediate post-dominator when the edge is ``ELEMWISE`` and
   every node on every path up to it is at most ``BROADCAST``. In phases 0 and 1 an elementwise or
   broadcast group fuses into a post-dominator reached through injective nodes, which may itself be
   a reduction or a fused convolution. Phase 1 fuses ``INJECTIVE`` groups and tuples along
   all-injective paths (after phase 0, so convolutions take their epilogues first). Phase 2 fuses
   injective groups into a tuple that was itself fused into an injective consumer
   (``concatenate((relu(a), relu(b)))`` becomes one group). Reductions only ever receive fusion;
   ``OPAQUE`` operators stand alone; no group grows beyond ``max_depth`` graph nodes.
4. **Rewriting**: each group becomes a call of a new ``Primitive=1`` function whose parameters
   ``%p0, %p1, ...`` are the group's inputs in order of first use; scalar constants fused into a
   group stay in its body, tensor constants are passed as arguments (as Relay does; with
   ``link_params`` they stay in the body too). A group without an operator call (a tuple and its
   projection) is no kernel and stays as it was; ``shape_of``, which reads no values, stays a
   plain call.

With ``fuse_opt_level=0`` (or a PassContext at opt_level 0) every operator becomes its own
primitive function. Fusion never crosses a function, branch or clause boundary: the body of every
nested function, each branch of an ``if`` and each clause of a ``match`` is grouped on its own. A
node belongs to the outermost of these regions that uses it (a value only one branch uses is
computed in that branch), and a node used from another region too stays the output of its group.
``let`` values are fused each on its own, as Relay does. Existing primitive functions are left
alone, so running FuseOps twice changes nothing.

>>> import relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
...   %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
...   %1 = add(%0, 1f);
...   nn.relu(%1)
... }''')
>>> print(FuseOps()(mod)["main"].astext(show_types=False))
fn (%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) -> Tensor[(1, 4, 8, 8), float32] {
  %2 = fn (%p0: Tensor[(1, 3, 8, 8), float32], %p1: Tensor[(4, 3, 3, 3), float32], Primitive=1) -> Tensor[(1, 4, 8, 8), float32] {
    %0 = nn.conv2d(%p0, %p1, padding=[1, 1, 1, 1]);
    %1 = add(%0, 1f);
    nn.relu(%1)
  };
  %2(%x, %w)
}
>>> [(g.name, g.anchor, g.pattern.name) for g in fused_groups(FuseOps()(mod))]
[('fused_nn_conv2d_add_nn_relu', 'nn.conv2d', 'OUT_ELEMWISE_FUSABLE')]

DefuseOps inlines every primitive function call back into plain operators:
``DefuseOps()(FuseOps()(mod))`` is ``mod`` again.
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..ir.attrs import Attrs
from ..ir.expr import (Call, Constant, Expr, Function, If, Let, Match, Op, RefCreate, RefRead,
                       RefWrite, Tuple, TupleGetItem, Var, expr_children)
from ..ir.functor import ExprMutator, post_order
from ..ir.module import IRModule
from ..ir.types import FuncType, TensorType, TupleType, Type
from ..op.registry import OpPattern, get_op_attr
from .infra import PassContext, module_pass, typed

__all__ = ["FuseOps", "DefuseOps", "fuse_function", "IndexedGraph", "PostDominatorTree", "GraphPartitioner",
           "FusedGroup", "fused_groups", "fused_groups_table", "fusion_partition", "MAX_FUSED_OPS"]

#: Relay's default limit on the number of graph nodes in one fused group (``kMaxFusedOps``)
MAX_FUSED_OPS = 256

ELEMWISE = int(OpPattern.ELEMWISE)
BROADCAST = int(OpPattern.BROADCAST)
INJECTIVE = int(OpPattern.INJECTIVE)
COMM_REDUCE = int(OpPattern.COMM_REDUCE)
OUT_ELEMWISE_FUSABLE = int(OpPattern.OUT_ELEMWISE_FUSABLE)
TUPLE = int(OpPattern.TUPLE)
OPAQUE = int(OpPattern.OPAQUE)

# Scalar constants of these dtypes fuse into their consumers (Relay's "simple" constants).
_SIMPLE_CONST_DTYPES = frozenset(np.dtype(n) for n in ("int32", "int64", "float32", "float64", "bool"))

# Operators that compute nothing from their input's values (Relay's ``TNonComputational``): their
# calls are left as plain calls, not wrapped in a primitive function.
_NON_COMPUTATIONAL = frozenset({"shape_of"})

# The expression classes that are nodes of the indexed graph (operators, global variables,
# constructors and function literals are not).
_GRAPH_NODE_TYPES = (Var, Constant, Call, Tuple, TupleGetItem, Let, If, Match, RefCreate, RefRead,
                     RefWrite)

_PRIMITIVE_ATTRS = Attrs({"Primitive": 1})


def _left_alone(func: Function) -> bool:
    """Functions fusion does not enter: fused kernels and functions for external compilers."""
    attrs = func.attrs
    return bool(attrs.get("Primitive") or attrs.get("Compiler"))


# ---------------------------------------------------------------------------------------------
# 1. The indexed dataflow graph


def _post_dfs(root: Function) -> list:
    """Every node under ``root`` in post-DFS order, children in evaluation order, without entering
    functions fusion leaves alone."""
    return post_order(root, lambda node: () if isinstance(node, Function) and node is not root
                      and _left_alone(node) else expr_children(node))


def _regions(root: Function) -> dict:
    """The dataflow region of each node: fusion never joins nodes of different regions.

    The root function's parameters and body are region 0; the body (and parameters) of each nested
    function, each branch of an ``if`` and each clause of a ``match`` open a new region. Regions
    are filled outermost first, so a node shared between an outer and an inner region belongs to
    the outer one (and its use inside is a use from outside its region).
    """
    region: dict = {}
    queue: deque = deque()
    for p in root.params:
        queue.append((p, 0))
    queue.append((root.body, 0))
    count = 1
    while queue:
        start, rid = queue.popleft()
        stack = [start]
        while stack:
            e = stack.pop()
            if e in region:
                continue
            region[e] = rid
            if isinstance(e, Function):
                if _left_alone(e):
                    continue
                for p in e.params:
                    queue.append((p, count))
                queue.append((e.body, count))
                count += 1
            elif isinstance(e, If):
                stack.append(e.cond)
                queue.append((e.true_branch, count))
                queue.append((e.false_branch, count + 1))
                count += 2
            elif isinstance(e, Match):
                stack.append(e.data)
                for clause in e.clauses:
                    queue.append((clause.rhs, count))
                    count += 1
            else:
                stack.extend(reversed(expr_children(e)))
    return region


class IndexedGraph:
    """Relay's ``IndexedForwardGraph`` of one function.

    ``nodes[i]`` is the i-th node in post-DFS order; ``pattern[i]`` its pattern kind (an int of
    :class:`OpPattern`); ``extern[i]`` whether it is used where fusion cannot follow;
    ``outputs[i]`` the ``(consumer index, edge pattern)`` pairs of its uses inside its region.
    """

    def __init__(self, func: Function):
        order = _post_dfs(func)
        self.nodes: list = [e for e in order if isinstance(e, _GRAPH_NODE_TYPES)]
        self.index: dict = {e: i for i, e in enumerate(self.nodes)}
        n = len(self.nodes)
        self.pattern: list = [OPAQUE] * n
        self.extern: list = [False] * n
        self.outputs: list = [[] for _ in range(n)]
        self._region = _regions(func)
        self._mark(func.body)
        for p in func.params:
            self._mark(p)
        for e in order:
            handler = self._HANDLERS.get(type(e))
            if handler is not None:
                handler(self, e)

    def __len__(self) -> int:
        return len(self.nodes)

    # -- building --------------------------------------------------------------------------
    def _mark(self, child: Expr) -> None:
        """``child`` is used where fusion cannot follow it."""
        i = self.index.get(child)
        if i is not None:
            self.extern[i] = True

    def _edge(self, child: Expr, consumer: Expr, pattern: int) -> None:
        i = self.index.get(child)
        if i is None:
            return
        region = self._region
        if region.get(child) != region.get(consumer):
            self.extern[i] = True
            return
        self.outputs[i].append((self.index[consumer], pattern))

    def _call(self, call: Call) -> None:
        me = self.index[call]
        if isinstance(call.op, Op):
            pattern = get_op_attr(call.op.name, "TOpPattern")
            pattern = int(pattern) if pattern is not None else OPAQUE
        else:
            pattern = OPAQUE
            self._mark(call.op)
        self.pattern[me] = pattern
        out_type = call.type_or_none
        for arg in call.args:
            edge = pattern
            if edge == BROADCAST:
                arg_type = arg.type_or_none
                if (isinstance(arg_type, TensorType) and isinstance(out_type, TensorType)
                        and tuple(arg_type.shape) == tuple(out_type.shape)):
                    edge = ELEMWISE
            self._edge(arg, call, edge)

    def _tuple(self, tup: Tuple) -> None:
        self.pattern[self.index[tup]] = TUPLE
        for f in tup.fields:
            if isinstance(f.type_or_none, TensorType):
                self._edge(f, tup, INJECTIVE)
            else:
                self._mark(f)

    def _tuple_getitem(self, node: TupleGetItem) -> None:
        t = node.tuple_value.type_or_none
        if isinstance(t, TupleType) and all(isinstance(f, TensorType) for f in t.fields):
            self.pattern[self.index[node]] = INJECTIVE
            self._edge(node.tuple_value, node, INJECTIVE)
        else:
            self._mark(node.tuple_value)

    def _constant(self, c: Constant) -> None:
        d = c.data
        if d.ndim == 0 and d.dtype in _SIMPLE_CONST_DTYPES:
            self.pattern[self.index[c]] = ELEMWISE

    def _function(self, fn: Function) -> None:
        if _left_alone(fn):
            return
        for p in fn.params:
            self._mark(p)
        self._mark(fn.body)

    def _boundary(self, node: Expr) -> None:
        for child in expr_children(node):
            self._mark(child)

    _HANDLERS = {
        Call: _call, Tuple: _tuple, TupleGetItem: _tuple_getitem, Constant: _constant,
        Function: _function, Let: _boundary, If: _boundary, Match: _boundary,
        RefCreate: _boundary, RefRead: _boundary, RefWrite: _boundary,
    }


# ---------------------------------------------------------------------------------------------
# 2. The post-dominator tree


class PostDominatorTree:
    """``parent[i]``: the index of node i's immediate post-dominator (-1 for none); ``depth[i]``;
    ``pattern[i]``: the strongest pattern kind on the edges and paths from node i to its parent.

    Built in reverse post-DFS order, so a node's consumers are in the tree before it: its parent is
    the least common ancestor of its consumers. External nodes are roots.
    """

    def __init__(self, graph: IndexedGraph):
        n = len(graph)
        self.parent = [-1] * n
        self.depth = [1] * n
        self.pattern = [OPAQUE] * n
        for i in range(n - 1, -1, -1):
            if graph.extern[i]:
                continue
            outs = graph.outputs[i]
            if not outs:
                self.pattern[i] = ELEMWISE
                continue
            parent, edge = outs[0]
            pattern = max(ELEMWISE, edge)
            for consumer, edge in outs[1:]:
                parent, pattern = self._lca(parent, consumer, pattern)
                pattern = max(pattern, edge)
            self.parent[i] = parent
            self.pattern[i] = pattern
            if parent >= 0:
                self.depth[i] = self.depth[parent] + 1

    def _lca(self, a: int, b: int, pattern: int):
        parent, depth, pat = self.parent, self.depth, self.pattern
        while a != b:
            if a < 0 or b < 0:
                return -1, pattern
            if depth[a] < depth[b]:
                pattern = max(pattern, pat[b])
                b = parent[b]
            elif depth[b] < depth[a]:
                pattern = max(pattern, pat[a])
                a = parent[a]
            else:
                pattern = max(pattern, pat[a], pat[b])
                a, b = parent[a], parent[b]
        return a, pattern


# ---------------------------------------------------------------------------------------------
# 3. Grouping


class GraphPartitioner:
    """Relay's union-find grouping of the graph's nodes into fused groups.

    After :meth:`partition`, :meth:`find` gives each node's group: the index of the group's root,
    which is the node whose value the group produces. ``pattern``, ``anchor`` (the index of the
    group's ``OUT_ELEMWISE_FUSABLE`` node or -1) and ``num_nodes`` are read at a root.
    """

    def __init__(self, graph: IndexedGraph, opt_level: int = 2, max_depth: int = MAX_FUSED_OPS):
        self.graph = graph
        self.opt_level = opt_level
        self.max_depth = max_depth
        n = len(graph)
        self.parent = list(range(n))
        self.pattern = list(graph.pattern)
        self.anchor = [i if graph.pattern[i] == OUT_ELEMWISE_FUSABLE else -1 for i in range(n)]
        self.num_nodes = [1] * n

    def find(self, i: int) -> int:
        parent = self.parent
        root = i
        while parent[root] != root:
            root = parent[root]
        while parent[i] != root:
            parent[i], i = root, parent[i]
        return root

    def partition(self) -> "GraphPartitioner":
        if self.opt_level == 0 or len(self.graph) == 0:
            return self
        tree = PostDominatorTree(self.graph)
        for phase in range(3):
            self._run_fuse(tree, phase)
        return self

    # -- paths between a node and its post-dominator ---------------------------------------
    def _reachable(self, src: int, sink: int) -> list:
        """The nodes on paths from ``src``'s consumers up to and including ``sink``, each once."""
        outputs = self.graph.outputs
        first = outputs[src]
        if len(first) == 1 and first[0][0] == sink:
            return [sink]  # the common case: a single use by the post-dominator itself
        seen = set()
        out = []
        stack = [c for c, _ in reversed(first)]
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            out.append(node)
            if node != sink:
                stack.extend(c for c, _ in reversed(outputs[node]) if c not in seen)
        return out

    def _check_path(self, src: int, sink: int, cond) -> bool:
        pattern, find = self.pattern, self.find
        return all(cond(pattern[find(node)], node == sink) for node in self._reachable(src, sink))

    def _merge(self, child: int, parent: int) -> None:
        child, parent = self.find(child), self.find(parent)
        if child == parent:
            return
        self.num_nodes[parent] += self.num_nodes[child]
        self.parent[child] = parent
        if self.anchor[child] >= 0:
            if self.anchor[parent] >= 0 or (self.pattern[child] > BROADCAST and self.pattern[parent] > BROADCAST):
                nodes = self.graph.nodes
                raise AssertionError(
                    f"FuseOps: cannot merge two complex groups (anchors at {_describe(nodes[self.anchor[child]])} "
                    f"and {_describe(nodes[parent])})")
            self.anchor[parent] = self.anchor[child]
            self.pattern[parent] = max(self.pattern[child], self.pattern[parent])

    def _commit_fuse(self, src: int, sink: int) -> None:
        target = sink
        self._merge(src, target)
        for node in self._reachable(src, sink):
            if node != sink:
                self._merge(node, target)

    def _count_fused_nodes(self, child: int, dom_parent: int) -> int:
        """The size of ``dom_parent``'s group if ``child`` and everything between them joined it
        (Relay's count: each node on the way adds the size recorded at its own group entry)."""
        total = self.num_nodes[self.find(dom_parent)] + self.num_nodes[child]
        for node in self._reachable(child, dom_parent):
            if node != dom_parent:
                total += self.num_nodes[node]
        return total

    # -- the phases ---------------------------------------------------------------------------
    def _run_fuse(self, tree: PostDominatorTree, phase: int) -> None:
        graph, pattern, find = self.graph, self.pattern, self.find
        for nid in range(len(graph)):
            kind = pattern[nid]  # the node's own group entry, as Relay reads it
            if kind == OPAQUE:
                continue
            dom = tree.parent[nid]
            if dom < 0:
                continue
            if self._count_fused_nodes(nid, dom) > self.max_depth:
                continue
            if phase == 2:
                # fuse injective ops into an intermediate tuple already fused into its consumer
                if kind > INJECTIVE:
                    continue
                dom_root = find(dom)
                if pattern[dom_root] == TUPLE:
                    continue
                if pattern[dom] == TUPLE and pattern[dom_root] <= INJECTIVE:
                    if self._check_path(nid, dom, lambda k, is_sink: k <= INJECTIVE):
                        self._commit_fuse(nid, dom)
                continue
            if find(nid) == find(dom):
                continue
            if pattern[dom] == TUPLE:
                continue  # never fuse into a tuple in phases 0 and 1
            if kind == OUT_ELEMWISE_FUSABLE:
                if phase != 0:
                    continue
                if tree.pattern[nid] == ELEMWISE:
                    if self._check_path(nid, dom, lambda k, is_sink: k <= BROADCAST):
                        self._commit_fuse(nid, dom)
            elif kind <= BROADCAST:
                if tree.pattern[nid] <= INJECTIVE or tree.pattern[nid] == COMM_REDUCE:
                    if self._check_path(nid, dom, _broadcast_path_ok):
                        self._commit_fuse(nid, dom)
            elif kind in (INJECTIVE, TUPLE):
                if phase != 1:
                    continue  # after phase 0, so convolutions take their epilogues first
                if self._check_path(nid, dom, lambda k, is_sink: k <= INJECTIVE):
                    self._commit_fuse(nid, dom)
            # COMM_REDUCE groups never start a fusion: they only receive one


def _broadcast_path_ok(kind: int, is_sink: bool) -> bool:
    # ops on parallel branches may be injective; the sink may be a reduction or a fused conv
    if not is_sink:
        return kind <= INJECTIVE
    return kind <= INJECTIVE or kind in (COMM_REDUCE, OUT_ELEMWISE_FUSABLE)


def _describe(e: Expr) -> str:
    if isinstance(e, Call) and isinstance(e.op, Op):
        return f"a call of {e.op.name}"
    return f"a {type(e).__name__}"


# ---------------------------------------------------------------------------------------------
# 4. Rewriting


class _TypedMutator(ExprMutator):
    """An ExprMutator whose rebuilt nodes keep the type of the node they replace: every rewrite
    here computes the same value, so the result needs no new type inference."""

    def _dispatch(self, node):
        out = super()._dispatch(node)
        if out is not node and out.type_or_none is None:
            t = node.type_or_none
            if t is not None:
                out.set_checked_type(t)
        return out


class _GroupInfo:
    __slots__ = ("params", "args", "by_arg")

    def __init__(self):
        self.params: list = []
        self.args: list = []
        self.by_arg: dict = {}

    def param_for(self, arg: Expr, arg_type: Type) -> Var:
        p = self.by_arg.get(arg)
        if p is None:
            p = Var(f"p{len(self.params)}", arg_type)
            p.set_checked_type(arg_type)
            self.params.append(p)
            self.args.append(arg)
            self.by_arg[arg] = p
        return p


class _FuseRewriter(_TypedMutator):
    """Replaces each group by a call of a new primitive function (Relay's ``FuseMutator``)."""

    def __init__(self, graph: IndexedGraph, partitioner: GraphPartitioner, link_params: bool):
        super().__init__()
        find = partitioner.find
        roots = [find(i) for i in range(len(graph.nodes))]
        # a group with no operator call (a tuple and its projection) is no kernel: its nodes are
        # left as plain expressions
        kernels = {roots[i] for i, e in enumerate(graph.nodes)
                   if isinstance(e, Call) and isinstance(e.op, Op) and e.op.name not in _NON_COMPUTATIONAL}
        self.group = {e: roots[i] for i, e in enumerate(graph.nodes) if roots[i] in kernels}
        self.nodes = graph.nodes
        self.link_params = link_params
        self.info: dict = {}

    def children_to_visit(self, expr: Expr):
        if isinstance(expr, Function) and _left_alone(expr):
            return ()
        return expr_children(expr)

    def visit_function(self, fn):
        if _left_alone(fn):
            return fn
        return super().visit_function(fn)

    def _info(self, g: int) -> _GroupInfo:
        info = self.info.get(g)
        if info is None:
            info = self.info[g] = _GroupInfo()
        return info

    def _new_args(self, args, g: int) -> list:
        out = []
        for a in args:
            new = self.visit(a)
            if self.group.get(a) == g or (self.link_params and isinstance(new, Constant)):
                out.append(new)
                continue
            t = a.type_or_none
            if t is None:
                raise ValueError(f"FuseOps: an argument ({_describe(a)}) has no type; run InferType first")
            out.append(self._info(g).param_for(new, t))
        return out

    def _is_root(self, e: Expr, g: int) -> bool:
        return self.nodes[g] is e

    def _make_function(self, g: int, ret_type: Type, body: Expr) -> Expr:
        info = self._info(g)
        func = Function(info.params, body, ret_type, (), _PRIMITIVE_ATTRS)
        func.set_checked_type(FuncType([p.checked_type for p in info.params], ret_type))
        return Call(func, info.args)

    def visit_call(self, call):
        g = self.group.get(call)
        if g is None or not isinstance(call.op, Op) or call.op.name in _NON_COMPUTATIONAL:
            return super().visit_call(call)
        new = Call(call.op, self._new_args(call.args, g), call.attrs, call.type_args).with_span(call.span)
        new.set_checked_type(call.checked_type)
        if self._is_root(call, g):
            return self._make_function(g, call.checked_type, new)
        return new

    def visit_tuple(self, tup):
        g = self.group.get(tup)
        if g is None or self._is_root(tup, g):
            return super().visit_tuple(tup)
        return Tuple(self._new_args(tup.fields, g)).with_span(tup.span)

    def visit_tuple_getitem(self, node):
        g = self.group.get(node)
        if g is None:
            return super().visit_tuple_getitem(node)
        if self._is_root(node, g):
            if self.group.get(node.tuple_value) != g:
                return super().visit_tuple_getitem(node)  # a projection standing alone
            new_tuple = self._new_args([node.tuple_value], g)[0]
            body = TupleGetItem(new_tuple, node.index)
            body.set_checked_type(node.checked_type)
            return self._make_function(g, node.checked_type, body)
        new_tuple = self._new_args([node.tuple_value], g)[0]
        return TupleGetItem(new_tuple, node.index).with_span(node.span)


def fuse_function(func: Function, fuse_opt_level: int = 2, max_depth: int = MAX_FUSED_OPS,
                  link_params: bool = False) -> Function:
    """``func`` (typed) with its operators grouped into primitive functions."""
    graph = IndexedGraph(func)
    parts = GraphPartitioner(graph, fuse_opt_level, max_depth).partition()
    return _FuseRewriter(graph, parts, link_params).visit(func)


def fusion_partition(func: Function, fuse_opt_level: int = 2, max_depth: int = MAX_FUSED_OPS) -> dict:
    """Which group each operator call of ``func`` (typed) would join: call -> group number.

    Groups are numbered 0, 1, ... in the order their results are computed. This is FuseOps'
    grouping without the rewrite, for views that color the original program by group.
    """
    graph = IndexedGraph(func)
    parts = GraphPartitioner(graph, fuse_opt_level, max_depth).partition()
    roots = {}
    for i, e in enumerate(graph.nodes):
        if isinstance(e, Call) and isinstance(e.op, Op) and e.op.name not in _NON_COMPUTATIONAL:
            roots[e] = parts.find(i)
    # a group's root is its result, so ordering roots by post-DFS index orders the groups
    rank = {root: k for k, root in enumerate(sorted(set(roots.values())))}
    return {e: rank[root] for e, root in roots.items()}


def _option(value, default, ctx: PassContext, key: str):
    if value != default:
        return value
    return ctx.config.get(key, default)


@module_pass(opt_level=0)
def FuseOps(mod: IRModule, ctx: PassContext, fuse_opt_level: int = -1, *, max_depth: int = MAX_FUSED_OPS,
            link_params: bool = False) -> IRModule:
    """Group operators into primitive functions, one kernel each (Relay's operator fusion).

    ``fuse_opt_level``: -1 uses the PassContext's opt_level; 0 puts every operator in its own
    function. ``max_depth``: the most graph nodes in one group (default 256, or the context's
    ``relay.FuseOps.max_depth``). ``link_params``: keep tensor constants inside the fused functions
    instead of passing them as arguments (or the context's ``relay.FuseOps.link_params``).
    """
    level = ctx.opt_level if fuse_opt_level == -1 else int(fuse_opt_level)
    if level < 0:
        raise ValueError(f"FuseOps: fuse_opt_level must be -1 or at least 0, got {fuse_opt_level}")
    depth = int(_option(max_depth, MAX_FUSED_OPS, ctx, "relay.FuseOps.max_depth"))
    if depth < 0:
        raise ValueError(f"FuseOps: max_depth must be at least 0, got {depth}")
    link = bool(_option(link_params, False, ctx, "relay.FuseOps.link_params"))
    typed_mod = typed(mod)
    new = {}
    changed = False
    for gv, func in typed_mod.functions.items():
        if _left_alone(func):
            new[gv] = func
            continue
        out = fuse_function(func, level, depth, link)
        changed |= out is not func
        new[gv] = out
    return typed_mod.with_functions(new) if changed else mod


# ---------------------------------------------------------------------------------------------
# DefuseOps


class _Defuser(_TypedMutator):
    def visit_call(self, call):
        new = super().visit_call(call)
        fn = new.op
        if isinstance(fn, Function) and fn.is_primitive:
            if len(fn.params) != len(new.args):
                raise ValueError(f"DefuseOps: a primitive function of {len(fn.params)} parameters is "
                                 f"called with {len(new.args)} arguments")
            sub = _TypedMutator()
            for p, a in zip(fn.params, new.args):
                sub.memo[p] = a
            return sub.visit(fn.body)
        return new


@module_pass(opt_level=3)
def DefuseOps(mod: IRModule, ctx: PassContext) -> IRModule:
    """Inline every call of a primitive (fused) function back into plain operators."""
    new = {}
    changed = False
    for gv, func in mod.functions.items():
        if func.attrs.get("Primitive") or func.attrs.get("Compiler"):
            new[gv] = func
            continue
        out = _Defuser().visit(func)
        changed |= out is not func
        new[gv] = out
    return mod.with_functions(new) if changed else mod


# ---------------------------------------------------------------------------------------------
# Describing the fused functions


_MAX_NAME = 80  # Relay's kMaxFuncNameLength


@dataclass(frozen=True, eq=False)
class FusedGroup:
    """One primitive function: its operators in evaluation order, its anchor (the operator with
    the strongest pattern kind, the last one on ties, as Relay's lowering picks the schedule), the
    group's pattern kind (the strongest of its operators'), its inputs' and output's types."""

    index: int
    name: str
    ops: tuple
    anchor: Optional[str]
    pattern: Optional[OpPattern]
    input_types: tuple
    output_type: Optional[Type]
    function: Function
    global_name: str

    @property
    def num_ops(self) -> int:
        return len(self.ops)

    def row(self) -> dict:
        return {"#": self.index, "function": self.name, "ops": ", ".join(self.ops),
                "anchor": self.anchor or "", "pattern": self.pattern.name if self.pattern is not None else "",
                "inputs": ", ".join(str(t) for t in self.input_types), "output": str(self.output_type)}

    def __repr__(self) -> str:
        pattern = self.pattern.name if self.pattern is not None else None
        return f"FusedGroup({self.index}, {self.name}, pattern={pattern})"


def _group_name(ops) -> str:
    name = "fused_" + "_".join(o.replace(".", "_") for o in ops) if ops else "fused"
    if len(name) > _MAX_NAME:
        digest = hashlib.sha1(name.encode()).hexdigest()[:16]
        name = f"{name[:_MAX_NAME]}_{digest}_"
    return name


def _describe_group(index: int, fn: Function, global_name: str) -> FusedGroup:
    ops = []
    anchor, best = None, -1
    for node in post_order(fn.body):
        if isinstance(node, Call) and isinstance(node.op, Op):
            ops.append(node.op.name)
            kind = get_op_attr(node.op.name, "TOpPattern")
            kind = int(kind) if kind is not None else OPAQUE
            if kind >= best:
                anchor, best = node.op.name, kind
    inputs = tuple(p.type_annotation if p.type_annotation is not None else p.type_or_none for p in fn.params)
    out = fn.ret_type if fn.ret_type is not None else fn.body.type_or_none
    return FusedGroup(index, _group_name(ops), tuple(ops), anchor,
                      OpPattern(best) if best >= 0 else None, inputs, out, fn, global_name)


def fused_groups(mod) -> list:
    """Every primitive function of ``mod`` (an IRModule or a Function) as a :class:`FusedGroup`,
    in the order they are called (global primitive functions, then any never called directly)."""
    if isinstance(mod, Function):
        roots = [("main", mod)]
    else:
        roots = [(gv.name_hint, f) for gv, f in mod.functions.items()]
    found: dict = {}
    order: list = []
    for gname, func in roots:
        if func.is_primitive:
            if func not in found:
                found[func] = gname
                order.append(func)
            continue
        uncalled = []
        for node in _post_dfs(func):
            if isinstance(node, Call) and isinstance(node.op, Function) and node.op.is_primitive:
                if node.op not in found:
                    found[node.op] = gname
                    order.append(node.op)
            elif isinstance(node, Function) and node.is_primitive:
                uncalled.append(node)
        for fn in uncalled:
            if fn not in found:
                found[fn] = gname
                order.append(fn)
    return [_describe_group(i, fn, found[fn]) for i, fn in enumerate(order)]


def fused_groups_table(mod):
    """:func:`fused_groups` as a table (prints aligned, renders as HTML in a notebook)."""
    from .._table import Table
    return Table([g.row() for g in fused_groups(mod)])
