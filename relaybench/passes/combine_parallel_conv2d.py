"""CombineParallelConv2D: several convolutions of one input become one wider convolution.

An Inception block applies several ``nn.conv2d`` to the same tensor. When at least
``min_num_branches`` of them agree on everything but their number of output channels (kernel
size, strides, padding, dilation, ``groups=1``, layouts, output dtype), the pass replaces them by
one convolution whose weight is the concatenation of theirs along the output-channel axis, and
gives each branch back its channels with ``strided_slice``. One large kernel uses the hardware
better than several narrow ones.

The elementwise and broadcast operators that follow each convolution are combined too, level by
level, as long as every branch has the same operator there (same attributes) and the other
arguments line up per channel: a bias ``(C_k, 1, 1)`` or an ``nn.bias_add`` bias ``(C_k,)`` is
concatenated along its channel axis; an argument that does not vary along channels (a scalar, or
the very same ``(1, 1, H, W)`` tensor in every branch) is used as it is. The slices then come
after the last combined level.

The machinery (finding groups of parallel operators, extending branches, combining levels,
rewriting) is the :class:`ParallelOpCombiner` that CombineParallelDense reuses.

>>> import relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(1, 4, 8, 8), float32], %w1: Tensor[(2, 4, 3, 3), float32],
...           %w2: Tensor[(3, 4, 3, 3), float32], %w3: Tensor[(5, 4, 3, 3), float32]) {
...   %0 = nn.conv2d(%x, %w1, padding=[1, 1, 1, 1], channels=2, kernel_size=[3, 3]);
...   %1 = nn.conv2d(%x, %w2, padding=[1, 1, 1, 1], channels=3, kernel_size=[3, 3]);
...   %2 = nn.conv2d(%x, %w3, padding=[1, 1, 1, 1], channels=5, kernel_size=[3, 3]);
...   (nn.relu(%0), nn.relu(%1), nn.relu(%2))
... }''')
>>> print(rb.passes.CombineParallelConv2D()(mod)["main"].astext(show_types=False))
fn (%x: Tensor[(1, 4, 8, 8), float32], %w1: Tensor[(2, 4, 3, 3), float32], %w2: Tensor[(3, 4, 3, 3), float32], %w3: Tensor[(5, 4, 3, 3), float32]) -> (Tensor[(1, 2, 8, 8), float32], Tensor[(1, 3, 8, 8), float32], Tensor[(1, 5, 8, 8), float32]) {
  %0 = (%w1, %w2, %w3);
  %1 = concatenate(%0);
  %2 = nn.conv2d(%x, %1, padding=[1, 1, 1, 1], channels=10, kernel_size=[3, 3]);
  %3 = nn.relu(%2);
  %4 = strided_slice(%3, begin=[0, 0], end=[-1, 2], strides=[1, 1], slice_mode="size");
  %5 = strided_slice(%3, begin=[0, 2], end=[-1, 3], strides=[1, 1], slice_mode="size");
  %6 = strided_slice(%3, begin=[0, 5], end=[-1, 5], strides=[1, 1], slice_mode="size");
  (%4, %5, %6)
}
"""

from __future__ import annotations

from typing import Optional

from .. import op as _op
from ..ir.expr import Call, Constant, Expr, Function, Op, Tuple, expr_children
from ..ir.functor import FusedAwareMutator
from ..ir.layout import Layout
from ..ir.structural import structural_equal
from ..ir.types import TensorType
from ..op.registry import OpPattern
from .infra import module_pass, typed
from .to_a_normal_form import calc_scopes

__all__ = ["CombineParallelConv2D", "ParallelOpCombiner", "run_combiner"]


# ---------------------------------------------------------------------------------------------
# Helpers


def tensor_type(e: Expr) -> Optional[TensorType]:
    t = e.type_or_none
    return t if isinstance(t, TensorType) else None


def static_shape(e: Expr) -> Optional[tuple]:
    """The shape of a tensor-typed node when every dimension is a known int."""
    t = tensor_type(e)
    if t is None or not all(isinstance(d, int) for d in t.shape):
        return None
    return tuple(t.shape)


def _same_scalar(args: list) -> bool:
    """Whether every argument is the same node, or they are equal scalar constants."""
    first = args[0]
    if all(a is first for a in args):
        return True
    if all(isinstance(a, Constant) and a.data.ndim == 0 for a in args):
        return all(structural_equal(a, first) for a in args[1:])
    return False


def _graph(body: Expr):
    """``(order, users)``: the nodes of ``body`` in post-order (Primitive functions not entered)
    and, for each, the list of its users (one entry per use; the root is used once by None)."""
    order, users = [], {body: [None]}
    seen = {body}
    stack = [(body, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        stack.append((node, True))
        if isinstance(node, Function) and node.is_primitive:
            continue
        kids = expr_children(node)
        for child in kids:
            users.setdefault(child, []).append(node)
        for child in reversed(kids):
            if child not in seen:
                seen.add(child)
                stack.append((child, False))
    return order, users


# ---------------------------------------------------------------------------------------------
# The combiner


class ParallelOpCombiner:
    """Finds groups of parallel calls of one operator and combines them, branch by branch.

    A *branch* is a candidate call followed by its chain of elementwise/broadcast consumers
    (each the only user of the previous node, with the same shape, in the same scope). A
    *group* is at least ``min_num_branches`` branches whose candidate calls share their first
    argument and can be combined. Subclasses say which calls are candidates, which can be
    combined, how to build the combined call, how to combine a following operator's other
    arguments, and how to give each branch its part of the result back.
    """

    op_name: str = ""

    def __init__(self, min_num_branches: int):
        if min_num_branches < 2:
            raise ValueError(f"{type(self).__name__}: min_num_branches must be at least 2, "
                             f"got {min_num_branches}")
        self.min_num_branches = min_num_branches
        self.op = Op.get(self.op_name)

    # ---- what subclasses define --------------------------------------------------------------
    def is_supported_op(self, call: Call) -> bool:
        raise NotImplementedError

    def can_be_combined(self, a: Call, b: Call) -> bool:
        raise NotImplementedError

    def make_combined_op(self, branches: list, m) -> Expr:
        """The combined call; ``m(expr)`` gives the rewritten form of an original node."""
        raise NotImplementedError

    def arg_plan(self, branches: list, depth: int, index: int):
        """How to combine argument ``index`` of the operators at level ``depth``: a plan
        object, or None when they cannot be combined."""
        raise NotImplementedError

    def make_combined_following(self, data: Expr, branches: list, depth: int, parent_index: int,
                                plans: dict, m) -> Expr:
        raise NotImplementedError

    def split_output(self, combined: Expr, branches: list, depth: int) -> list:
        """One expression per branch, standing for the branch's node at ``depth``."""
        raise NotImplementedError

    # ---- the algorithm -------------------------------------------------------------------------
    def find_groups(self, body: Expr) -> list:
        """``[(branches, depth, plans)]`` for each group worth combining."""
        order, users = _graph(body)
        info = calc_scopes(body)
        scope_of = info.scope_of
        candidates = [n for n in order if isinstance(n, Call) and n.op is self.op and n.args
                      and self.is_supported_op(n)]
        if len(candidates) < self.min_num_branches:
            return []
        cand_set = set(candidates)
        # nodes computed from a candidate: they cannot be weights or per-channel arguments
        tainted: set = set()
        for n in order:
            if n in cand_set or any(k in tainted for k in expr_children(n)):
                if not (isinstance(n, Function) and n.is_primitive):
                    tainted.add(n)

        by_input: dict = {}
        for c in candidates:
            if any(a in tainted for a in c.args[1:]):
                continue
            by_input.setdefault((c.args[0], scope_of.get(c)), []).append(c)
        groups = []
        for calls in by_input.values():
            subgroups: list = []
            for c in calls:
                for sg in subgroups:
                    if self.can_be_combined(sg[0], c):
                        sg.append(c)
                        break
                else:
                    subgroups.append([c])
            for sg in subgroups:
                if len(sg) >= self.min_num_branches:
                    groups.append(sg)

        out = []
        for sg in groups:
            branches = [self._extend(c, users, scope_of) for c in sg]
            depth = min(len(b) for b in branches)
            plans: dict = {}
            level = 1
            while level < depth:
                level_plans = self._check_level(branches, level, tainted)
                if level_plans is None:
                    break
                plans[level] = level_plans
                level += 1
            out.append((branches, level - 1, plans))
        return out

    def _extend(self, call: Call, users: dict, scope_of: dict) -> list:
        branch = [call]
        node = call
        scope = scope_of.get(call)
        while True:
            us = users.get(node, [])
            if len(us) != 1 or us[0] is None:
                break
            nxt = us[0]
            if not (isinstance(nxt, Call) and isinstance(nxt.op, Op) and nxt.op.opdef is not None):
                break
            if nxt.op.opdef.pattern > OpPattern.BROADCAST or scope_of.get(nxt) is not scope:
                break
            if sum(1 for a in nxt.args if a is node) != 1:
                break
            before, after = tensor_type(node), tensor_type(nxt)
            if before is None or after is None or tuple(before.shape) != tuple(after.shape):
                break
            branch.append(nxt)
            node = nxt
        return branch

    def _check_level(self, branches: list, depth: int, tainted: set) -> Optional[dict]:
        first = branches[0][depth]
        parent_index = next(i for i, a in enumerate(first.args) if a is branches[0][depth - 1])
        for b in branches:
            call = b[depth]
            if call.op is not first.op or call.attrs != first.attrs or len(call.args) != len(first.args):
                return None
            if call.args[parent_index] is not b[depth - 1]:
                return None
        plans = {"parent_index": parent_index}
        for i in range(len(first.args)):
            if i == parent_index:
                continue
            if any(b[depth].args[i] in tainted for b in branches):
                return None
            plan = self.arg_plan(branches, depth, i)
            if plan is None:
                return None
            plans[i] = plan
        return plans

    def rewrite(self, body: Expr, groups: list) -> Expr:
        """``body`` with each group's branches replaced by their parts of the combined result."""
        last_of: dict = {}     # the last combined node of a branch -> (group index, branch index)
        inputs: dict = {}      # group index -> the original nodes its combined form is built from
        for gi, (branches, depth, plans) in enumerate(groups):
            needed = [branches[0][0].args[0]]
            for b in branches:
                needed.extend(b[0].args[1:])
                for level in range(1, depth + 1):
                    pi = plans[level]["parent_index"]
                    needed.extend(a for i, a in enumerate(b[level].args) if i != pi)
            inputs[gi] = needed
            for bi, b in enumerate(branches):
                last_of[b[depth]] = (gi, bi)
        return _GroupRewriter(self, groups, last_of, inputs).visit(body)

    def combine(self, body: Expr) -> Expr:
        groups = self.find_groups(body)
        if not groups:
            return body
        return self.rewrite(body, groups)

    def build_group(self, group, m) -> list:
        branches, depth, plans = group
        combined = self.make_combined_op(branches, m)
        for level in range(1, depth + 1):
            combined = self.make_combined_following(combined, branches, level,
                                                    plans[level]["parent_index"], plans[level], m)
        return self.split_output(combined, branches, depth)


class _GroupRewriter(FusedAwareMutator):
    def __init__(self, combiner: ParallelOpCombiner, groups: list, last_of: dict, inputs: dict):
        super().__init__()
        self.combiner, self.groups, self.last_of, self.inputs = combiner, groups, last_of, inputs
        self.built: dict = {}

    def children_to_visit(self, expr):
        kids = super().children_to_visit(expr)
        hit = self.last_of.get(expr)
        if hit is not None:
            # the combined call is built from every branch's inputs: visit them first
            return tuple(kids) + tuple(self.inputs[hit[0]])
        return kids



    def visit_call(self, call):
        hit = self.last_of.get(call)
        if hit is None:
            return super().visit_call(call)
        gi, bi = hit
        parts = self.built.get(gi)
        if parts is None:
            parts = self.built[gi] = self.combiner.build_group(self.groups[gi], self.visit)
        return parts[bi]


# ---------------------------------------------------------------------------------------------
# Channel-concatenating combiners (conv2d, and dense without batch_matmul)


class ArgPlan:
    """How one argument of a combined following operator is formed: ``concat`` the branches'
    arguments along ``axis``, or use the ``shared`` argument as it is."""

    __slots__ = ("kind", "axis")

    def __init__(self, kind: str, axis: int = 0):
        self.kind, self.axis = kind, axis


_AXIS_PER_CHANNEL_OPS = ("nn.bias_add", "nn.prelu")


class ChannelConcatCombiner(ParallelOpCombiner):
    """Combines by concatenating along the output's channel axis and slicing it back."""

    def channel_pos(self, call: Call) -> int:
        raise NotImplementedError

    def branch_channels(self, branch: list) -> int:
        return static_shape(branch[0])[self.channel_pos(branch[0])]

    def arg_plan(self, branches, depth, index):
        call0 = branches[0][depth]
        out_shape = static_shape(call0)
        if out_shape is None:
            return None
        rank, cpos = len(out_shape), self.channel_pos(branches[0][0])
        args = [b[depth].args[index] for b in branches]
        types = [tensor_type(a) for a in args]
        if any(t is None for t in types) or any(not all(isinstance(d, int) for d in t.shape) for t in types):
            return None
        if len({t.dtype for t in types}) != 1 or len({len(t.shape) for t in types}) != 1:
            return None
        arg_rank = len(types[0].shape)
        name = call0.op.name
        if name in _AXIS_PER_CHANNEL_OPS:
            axis = call0.attrs.axis
            axis = axis + rank if axis < 0 else axis
            pos = 0 if (axis == cpos and arg_rank == 1) else None
            if pos is None:
                return None
        else:
            pos = cpos - rank + arg_rank
            if pos < 0:
                pos = None
        if pos is not None and all(t.shape[pos] == self.branch_channels(b) for t, b in zip(types, branches)):
            others = [tuple(d for i, d in enumerate(t.shape) if i != pos) for t in types]
            if all(o == others[0] for o in others):
                return ArgPlan("concat", pos)
            return None
        if (pos is None or types[0].shape[pos] == 1) and _same_scalar(args):
            return ArgPlan("shared")
        return None

    def make_combined_following(self, data, branches, depth, parent_index, plans, m):
        call0 = branches[0][depth]
        args = []
        for i in range(len(call0.args)):
            if i == parent_index:
                args.append(data)
                continue
            plan = plans[i]
            if plan.kind == "shared":
                args.append(m(call0.args[i]))
            else:
                args.append(_op.concatenate(Tuple([m(b[depth].args[i]) for b in branches]), axis=plan.axis))
        return Call(call0.op, args, call0.attrs)

    def split_output(self, combined, branches, depth):
        cpos = self.channel_pos(branches[0][0])
        out, offset = [], 0
        for b in branches:
            channels = self.branch_channels(b)
            begin = [0] * cpos + [offset]
            end = [-1] * cpos + [channels]
            out.append(_op.strided_slice(combined, begin=begin, end=end, strides=[1] * (cpos + 1),
                                         slice_mode="size"))
            offset += channels
        return out


class ParallelConv2DCombiner(ChannelConcatCombiner):
    op_name = "nn.conv2d"

    _SAME = ("strides", "padding", "dilation", "groups", "data_layout", "kernel_layout", "out_layout",
             "out_dtype")

    @staticmethod
    def _layouts(call: Call):
        a = call.attrs
        data = Layout(a.data_layout)
        out = Layout(a.out_layout) if a.out_layout else data
        return data, Layout(a.kernel_layout), out

    def is_supported_op(self, call):
        if call.attrs.groups != 1 or len(call.args) != 2:
            return False
        data, kernel, out = self._layouts(call)
        if data.is_blocked or kernel.is_blocked or out.is_blocked:
            return False
        if "C" not in out or "O" not in kernel:
            return False
        return static_shape(call) is not None and static_shape(call.args[1]) is not None

    def channel_pos(self, call):
        return self._layouts(call)[2].index_of("C")

    def can_be_combined(self, a, b):
        if any(a.attrs[k] != b.attrs[k] for k in self._SAME):
            return False
        ta, tb = tensor_type(a.args[1]), tensor_type(b.args[1])
        if ta.dtype != tb.dtype:
            return False
        kernel = self._layouts(a)[1]
        o = kernel.index_of("O")
        return all(da == db for i, (da, db) in enumerate(zip(ta.shape, tb.shape)) if i != o)

    def make_combined_op(self, branches, m):
        first = branches[0][0]
        o = self._layouts(first)[1].index_of("O")
        weights = [m(b[0].args[1]) for b in branches]
        total = sum(static_shape(b[0].args[1])[o] for b in branches)
        attrs = dict(first.attrs)
        attrs["channels"] = total
        return Call(first.op, [m(first.args[0]), _op.concatenate(Tuple(weights), axis=o)], attrs)


def run_combiner(mod, combiner: ParallelOpCombiner):
    """Apply ``combiner`` to every function of ``mod``; the same module when nothing combined."""
    work = typed(mod)
    new, changed = {}, False
    for gv, func in work.functions.items():
        if func.is_primitive or func.attrs.get("Compiler") or func.attrs.get("SkipOptimization"):
            new[gv] = func
            continue
        body = combiner.combine(func.body)
        if body is not func.body:
            func = Function(func.params, body, func.ret_type, func.type_params, func.attrs).with_span(func.span)
            changed = True
        new[gv] = func
    return work.with_functions(new) if changed else mod


@module_pass(opt_level=4)
def CombineParallelConv2D(mod, ctx, min_num_branches: int = 3):
    """Combine at least ``min_num_branches`` convolutions of one input into one wider convolution.

    The convolutions must agree on kernel size, strides, padding, dilation, layouts and output
    dtype, and have ``groups=1``. Following elementwise/broadcast operators that every branch
    applies alike are combined too; ``strided_slice`` gives each branch its channels back.
    """
    return run_combiner(mod, ParallelConv2DCombiner(min_num_branches))
