"""CombineParallelDense: several dense layers of one input become one batched matmul.

When at least ``min_num_branches`` ``nn.dense`` calls share their input, the pass combines them
(Relay's two strategies):

* ``to_batch_matmul=True`` (Relay's default): denses whose weights have the same shape are
  stacked into one ``nn.batch_matmul(stack((x, x, ...)), stack((w1, w2, ...)))``; each branch
  takes its slice back with ``split`` along the batch axis and ``squeeze``. Following
  elementwise/broadcast operators are combined too: their other arguments (of equal shape in
  every branch) are stacked, and one that is the same in every branch is used as it is;
  ``nn.bias_add`` becomes an ``add`` of the stacked ``(B, 1, units)`` biases.
* ``to_batch_matmul=False``: denses whose weights have the same input size (the number of units
  may differ) become one dense over the concatenated weights; following operators' per-unit
  arguments are concatenated, and each branch is sliced back with ``strided_slice``.

>>> import relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(2, 4), float32], %w1: Tensor[(3, 4), float32],
...           %w2: Tensor[(3, 4), float32], %w3: Tensor[(3, 4), float32]) {
...   (nn.dense(%x, %w1), nn.dense(%x, %w2), nn.dense(%x, %w3))
... }''')
>>> print(rb.passes.CombineParallelDense()(mod)["main"].astext(show_types=False))
fn (%x: Tensor[(2, 4), float32], %w1: Tensor[(3, 4), float32], %w2: Tensor[(3, 4), float32], %w3: Tensor[(3, 4), float32]) -> (Tensor[(2, 3), float32], Tensor[(2, 3), float32], Tensor[(2, 3), float32]) {
  %0 = (%x, %x, %x);
  %1 = stack(%0);
  %2 = (%w1, %w2, %w3);
  %3 = stack(%2);
  %4 = nn.batch_matmul(%1, %3);
  %5 = split(%4, indices_or_sections=3);
  %6 = %5.0;
  %7 = squeeze(%6, axis=[0]);
  %8 = %5.1;
  %9 = squeeze(%8, axis=[0]);
  %10 = %5.2;
  %11 = squeeze(%10, axis=[0]);
  (%7, %9, %11)
}
"""

from __future__ import annotations

from .. import op as _op
from ..ir.expr import Call, Op, Tuple, TupleGetItem
from .combine_parallel_conv2d import (ArgPlan, ChannelConcatCombiner, ParallelOpCombiner, _same_scalar,
                                      run_combiner, static_shape, tensor_type)
from .infra import module_pass

__all__ = ["CombineParallelDense"]


class _DenseMixin:
    op_name = "nn.dense"

    def is_supported_op(self, call):
        data, weight = static_shape(call.args[0]), static_shape(call.args[1])
        return data is not None and weight is not None and len(weight) == 2 and static_shape(call) is not None


class ParallelDenseToBatchCombiner(_DenseMixin, ParallelOpCombiner):
    """Stacks same-shaped denses into one ``nn.batch_matmul``."""

    def is_supported_op(self, call):
        return super().is_supported_op(call) and len(static_shape(call.args[0])) == 2

    def can_be_combined(self, a, b):
        ta, tb = tensor_type(a.args[1]), tensor_type(b.args[1])
        return a.attrs == b.attrs and ta.dtype == tb.dtype and tuple(ta.shape) == tuple(tb.shape)

    def make_combined_op(self, branches, m):
        first = branches[0][0]
        data = _op.stack(Tuple([m(b[0].args[0]) for b in branches]), axis=0)
        weights = _op.stack(Tuple([m(b[0].args[1]) for b in branches]), axis=0)
        return _op.nn.batch_matmul(data, weights, out_dtype=first.attrs.out_dtype, transpose_a=False,
                                   transpose_b=True)

    def arg_plan(self, branches, depth, index):
        call0 = branches[0][depth]
        out_shape = static_shape(call0)
        args = [b[depth].args[index] for b in branches]
        types = [tensor_type(a) for a in args]
        if out_shape is None or any(t is None for t in types):
            return None
        shapes = [tuple(t.shape) for t in types]
        if len({t.dtype for t in types}) != 1 or len(set(shapes)) != 1:
            return None
        shape = shapes[0]
        if not all(isinstance(d, int) for d in shape):
            return None
        name = call0.op.name
        if name == "nn.bias_add":
            axis = call0.attrs.axis
            if (axis + len(out_shape) if axis < 0 else axis) != len(out_shape) - 1 or len(shape) != 1:
                return None
            return ArgPlan("shared") if _same_scalar(args) else ArgPlan("stack", 1)
        if "axis" in call0.attrs:
            return None
        if len(shape) > len(out_shape):
            return None
        if _same_scalar(args):
            return ArgPlan("shared")  # broadcasts over the batch of branches as it did over one
        return ArgPlan("stack", len(out_shape) - len(shape))

    def make_combined_following(self, data, branches, depth, parent_index, plans, m):
        call0 = branches[0][depth]
        op, attrs = call0.op, call0.attrs
        if op.name == "nn.bias_add":
            op, attrs = Op.get("add"), None  # the stacked bias is (B, 1, units): a plain broadcast
        args = []
        for i in range(len(call0.args)):
            if i == parent_index:
                args.append(data)
                continue
            plan = plans[i]
            if plan.kind == "shared":
                args.append(m(call0.args[i]))
                continue
            parts = []
            for b in branches:
                a = m(b[depth].args[i])
                if plan.axis:  # bring the argument to the rank of one branch's output
                    a = _op.expand_dims(a, axis=0, num_newaxis=plan.axis)
                parts.append(a)
            args.append(_op.stack(Tuple(parts), axis=0))
        return Call(op, args, attrs)

    def split_output(self, combined, branches, depth):
        parts = _op.split(combined, indices_or_sections=len(branches), axis=0)
        return [_op.squeeze(TupleGetItem(parts, i), axis=[0]) for i in range(len(branches))]


class ParallelDenseToDenseCombiner(_DenseMixin, ChannelConcatCombiner):
    """Concatenates the weights of denses with the same input size into one wider dense."""

    def channel_pos(self, call):
        return len(static_shape(call)) - 1

    def can_be_combined(self, a, b):
        ta, tb = tensor_type(a.args[1]), tensor_type(b.args[1])
        return (a.attrs.out_dtype == b.attrs.out_dtype and ta.dtype == tb.dtype
                and ta.shape[1] == tb.shape[1])

    def make_combined_op(self, branches, m):
        first = branches[0][0]
        weights = _op.concatenate(Tuple([m(b[0].args[1]) for b in branches]), axis=0)
        units = sum(static_shape(b[0].args[1])[0] for b in branches)
        return _op.nn.dense(m(first.args[0]), weights, units=units, out_dtype=first.attrs.out_dtype)


@module_pass(opt_level=4)
def CombineParallelDense(mod, ctx, min_num_branches: int = 3, to_batch_matmul: bool = True):
    """Combine at least ``min_num_branches`` dense layers of one input.

    With ``to_batch_matmul`` (the default) same-shaped denses become one ``nn.batch_matmul`` over
    stacked weights, split back per branch; otherwise denses with the same input size become one
    dense over concatenated weights, sliced back per branch. Following elementwise/broadcast
    operators that every branch applies alike are combined too.
    """
    combiner = (ParallelDenseToBatchCombiner(min_num_branches) if to_batch_matmul
                else ParallelDenseToDenseCombiner(min_num_branches))
    return run_combiner(mod, combiner)
