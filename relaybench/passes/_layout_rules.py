"""The layout rewriter that AlterOpLayout and ConvertLayout share (Relay's ``transform_layout.h``).

The operators' layout rules (``FInferCorrectLayout``, in :mod:`relaybench.op._layout`, read
through the attribute registry so a registration at a higher level replaces a built-in rule) say
how each operator follows a layout; the passes decide where a layout changes through *hooks*, one
per operator name::

    hook(call, types, layouts) -> None | dict | Call

``types`` are the call's (flattened) input types in the original program and ``layouts`` the
layouts its inputs have there. The hook answers

* ``None``: leave the call as it is;
* a dict: the attributes to change (``{"data_layout": "NCHW16c", ...}``); the operator's layout
  rule then says which layout each input must come in;
* a :class:`~relaybench.ir.expr.Call` built on the call's own arguments (Relay's form): the call
  is replaced by it. An argument of the new call that *is* one of the original arguments stands
  for that input, and is transformed into the layout the new operator's rule wants; any other
  argument is an expression of the original arguments in their original layouts, used as it is
  (a weight the hook transformed itself). A new operator without a layout rule gets its inputs
  in their original layouts. This form needs the call's inputs to be tensors (not tuples).

The rewriter (:func:`rewrite_layouts`) walks each function once, children first, keeping for
every rewritten value its layout in the original program and its layout now, and inserts a
``layout_transform`` only where a consumer wants its input in a layout other than the one it comes
in (the same transform of the same value is made once). The function's result is transformed
back to its original layout, so the function keeps its type. Weights go through
``layout_transform`` too, which FoldConstant folds once they are bound constants.

>>> import relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(1, 8, 4, 4), float32], %w: Tensor[(16, 8, 1, 1), float32]) {
...   %0 = nn.conv2d(%x, %w, channels=16, kernel_size=[1, 1]);
...   nn.relu(%0)
... }''')
>>> def nchw8c(call, types, layouts):
...     return {"data_layout": "NCHW8c", "kernel_layout": "OIHW8i8o", "out_layout": "NCHW8c"}
>>> out = rewrite_layouts(rb.passes.InferType()(mod), {"nn.conv2d": nchw8c})
>>> print(out["main"].astext(show_types=False))
fn (%x: Tensor[(1, 8, 4, 4), float32], %w: Tensor[(16, 8, 1, 1), float32]) -> Tensor[(1, 16, 4, 4), float32] {
  %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NCHW8c");
  %1 = layout_transform(%w, src_layout="OIHW", dst_layout="OIHW8i8o");
  %2 = nn.conv2d(%0, %1, channels=16, kernel_size=[1, 1], data_layout="NCHW8c", kernel_layout="OIHW8i8o", out_layout="NCHW8c");
  %3 = nn.relu(%2);
  layout_transform(%3, src_layout="NCHW8c", dst_layout="NCHW")
}

The same hook in Relay's form, returning the new call:

>>> def nchw8c_call(call, types, layouts):
...     return rb.op.nn.conv2d(*call.args, **dict(call.attrs, data_layout="NCHW8c",
...                            kernel_layout="OIHW8i8o", out_layout="NCHW8c"))
>>> again = rewrite_layouts(rb.passes.InferType()(mod), {"nn.conv2d": nchw8c_call})
>>> rb.structural_equal(again["main"], out["main"])
True

Everything is iterative: the rewriter is a memoized post-order functor, so a chain of 100,000
operators goes through.
"""

from __future__ import annotations

from ..ir.expr import (Call, Constant, Constructor, Function, GlobalVar, Op, Tuple, TupleGetItem, Var,
                       expr_children)
from ..ir.functor import ExprFunctor, ExprMutator
from ..ir.layout import Layout
from ..ir.types import TensorType, TupleType
from ..op._layout import (LayoutDecision, _same_axes, _splits_evenly, batch_norm_layout,  # noqa: F401
                          bias_add_layout, broadcast_layout, concatenate_layout, conv2d_layout,
                          dropout_layout, elemwise_layout, extents_of, layout_transform_layout,
                          original_layout, pad_layout, pool_layout, reduce_layout, softmax_layout,
                          split_layout, transform_layout)
from ..op.registry import get_op_attr

__all__ = [
    "LayoutRewriter", "rewrite_layouts",
    # the rules, defined in relaybench.op._layout
    "LayoutDecision", "transform_layout", "extents_of",
    "elemwise_layout", "broadcast_layout", "bias_add_layout", "conv2d_layout", "pool_layout",
    "concatenate_layout", "split_layout", "reduce_layout", "softmax_layout", "pad_layout",
    "layout_transform_layout", "batch_norm_layout", "dropout_layout", "original_layout",
]


class _Value:
    """A rewritten value: its expression now, and its layout in the original program and now
    (a Layout, None when unknown, or a tuple of those for a tuple's fields). ``node`` is the
    original node (its type describes the value in the original layout)."""

    __slots__ = ("expr", "old", "new", "node")

    def __init__(self, expr, old, new, node):
        self.expr, self.old, self.new, self.node = expr, old, new, node


def _tensor_layout(layout):
    return layout is None or isinstance(layout, Layout)


class LayoutRewriter:
    """Rewrites one function's layouts: ``hooks`` maps an operator name to
    ``hook(call, types, layouts) -> dict | None``, the attributes to change on that call (its
    inputs' original types and layouts given); the operators' layout rules do the rest."""

    def __init__(self, hooks: dict):
        self.hooks = dict(hooks)
        self._transforms: dict = {}
        self._plans: dict = {}
        rewriter = self

        class _Walker(ExprFunctor):
            def children_to_visit(self, expr):
                return rewriter._children(expr)

            def _dispatch(self, node):
                return rewriter._visit(node)

        self._walker = _Walker()

    # ---- driving -----------------------------------------------------------------------------
    def rewrite_function(self, func):
        body = self.realize(self._walker.visit(func.body))
        if body is func.body:
            return func
        return Function(func.params, body, func.ret_type, func.type_params, func.attrs).with_span(func.span)

    def _children(self, expr):
        if isinstance(expr, Function) and expr.attrs.get("Primitive"):
            return ()
        return expr_children(expr)

    def _visit(self, node):
        if isinstance(node, (Var, Constant, GlobalVar, Op, Constructor)):
            return _Value(node, None, None, node)
        if isinstance(node, Function) and node.attrs.get("Primitive"):
            return _Value(node, None, None, node)
        if isinstance(node, Call):
            return self._call(node)
        if isinstance(node, Tuple):
            return self._tuple(node)
        if isinstance(node, TupleGetItem):
            return self._getitem(node)
        return self._generic(node)

    def value(self, node) -> _Value:
        return self._walker.memo[node]

    # ---- transforms ----------------------------------------------------------------------------
    def transform(self, expr, src: Layout, dst: Layout, extents: dict):
        """``expr`` from ``src`` to ``dst`` (made once per value and pair of layouts)."""
        if src == dst:
            return expr
        key = (expr, src.name, dst.name)
        out = self._transforms.get(key)
        if out is None:
            out = transform_layout(expr, src, dst, extents)
            self._transforms[key] = out
        return out

    def _field_transform(self, expr, t, t_layout, have, want, where: str):
        """``expr`` from layout ``have`` to ``want``; ``t`` is its type in the original program,
        where it was in ``t_layout`` (the primal extents do not depend on the layout)."""
        if have is None or want is None or have == want:
            return expr
        extents = extents_of(t, t_layout)
        if extents is None:
            raise ValueError(f"{where}: a value of type {t} does not fit its layout {t_layout}")
        return self.transform(expr, have, want, extents)

    def realize(self, v: _Value):
        """The value in its original layout."""
        if isinstance(v.old, tuple):
            if all(o == n for o, n in zip(v.old, v.new)):
                return v.expr
            fields = []
            t = v.node.checked_type
            for i, (o, n) in enumerate(zip(v.old, v.new)):
                e = v.expr.fields[i] if isinstance(v.expr, Tuple) else TupleGetItem(v.expr, i)
                fields.append(self._field_transform(e, t.fields[i], o, n, o, "a tuple field")
                              if o is not None and o != n else e)
            return Tuple(fields)
        if v.old is None or v.new is None or v.old == v.new:
            return v.expr
        return self._field_transform(v.expr, v.node.checked_type, v.old, v.new, v.old, "a value")

    # ---- nodes ------------------------------------------------------------------------------
    def _generic(self, node):
        """Any other node: its children in their original layouts, the node rebuilt."""
        rebuild = ExprMutator()
        for child in self._children(node):
            rebuild.memo[child] = self.realize(self.value(child))
        return _Value(rebuild._dispatch(node), None, None, node)

    def _tuple(self, node):
        exprs, olds, news = [], [], []
        for f in node.fields:
            v = self.value(f)
            if _tensor_layout(v.old):
                exprs.append(v.expr)
                olds.append(v.old)
                news.append(v.new)
            else:
                exprs.append(self.realize(v))
                olds.append(None)
                news.append(None)
        same = all(a is b for a, b in zip(exprs, node.fields))
        expr = node if same else Tuple(exprs).with_span(node.span)
        return _Value(expr, tuple(olds), tuple(news), node)

    def _getitem(self, node):
        v = self.value(node.tuple_value)
        expr = node if v.expr is node.tuple_value else TupleGetItem(v.expr, node.index).with_span(node.span)
        if isinstance(v.old, tuple):
            return _Value(expr, v.old[node.index], v.new[node.index], node)
        return _Value(expr, None, None, node)

    def _fallback(self, call):
        """The call with its arguments in their original layouts; its output's layout unknown."""
        op = self.realize(self.value(call.op))
        args = [self.realize(self.value(a)) for a in call.args]
        if op is call.op and all(a is b for a, b in zip(args, call.args)):
            return _Value(call, None, None, call)
        return _Value(Call(op, args, call.attrs, call.type_args).with_span(call.span), None, None, call)

    def _flatten(self, call):
        """The call's inputs one tensor each (a tuple argument's fields separately):
        ``[(arg index, field index or None, expr, old, new, type)]``; None when an argument is
        neither a tensor nor a tuple of tensors."""
        out = []
        for i, a in enumerate(call.args):
            v = self.value(a)
            t = a.checked_type
            if isinstance(t, TensorType) and _tensor_layout(v.old):
                out.append((i, None, v.expr, v.old, v.new, t))
            elif isinstance(t, TupleType) and all(isinstance(f, TensorType) for f in t.fields):
                olds = v.old if isinstance(v.old, tuple) else (None,) * len(t.fields)
                news = v.new if isinstance(v.new, tuple) else (None,) * len(t.fields)
                for j, ft in enumerate(t.fields):
                    e = v.expr.fields[j] if isinstance(v.expr, Tuple) else TupleGetItem(v.expr, j)
                    out.append((i, j, e, olds[j], news[j], ft))
            else:
                return None
        return out

    def _decide(self, rule, attrs, layouts, old_layouts, types):
        """The rule's decision, None when it cannot decide."""
        try:
            return rule(attrs, layouts, old_layouts, types)
        except ValueError:
            return None

    def _plan(self, call, opdef, rule, old_in, new_in, types):
        """What to do with a call (see :meth:`_make_plan`), or None to fall back. Rules are pure
        functions of the call's attributes and types and the layouts, so the plan of a call
        without a hook is made once per distinct question (a long chain of like operators asks
        the same one); a hook sees the call's arguments, so its calls are planned one by one."""
        if opdef.name in self.hooks:
            return self._make_plan(call, opdef, rule, old_in, new_in, types)
        key = (opdef.name, call.attrs, tuple(old_in), tuple(new_in), tuple(types), call.checked_type)
        try:
            return self._plans[key]
        except KeyError:
            pass
        except TypeError:             # something unhashable in the attributes
            key = None
        plan = self._make_plan(call, opdef, rule, old_in, new_in, types)
        if key is not None:
            self._plans[key] = plan
        return plan

    def _replacement(self, call, opdef, new_call, n: int):
        """A hook's new call as ``(op, attrs, arg map)``: each argument of the new call is the
        index of the original input it is, or the expression the hook built."""
        if not isinstance(new_call.op, Op):
            raise ValueError(f"the layout hook of {opdef.name} returned a call of {new_call.op!r}; "
                             f"it must call an operator")
        if len(call.args) != n:
            raise ValueError(f"the layout hook of {opdef.name} returned a new call, which needs the "
                             f"call's inputs to be tensors; return a dict of attributes instead")
        position = {id(a): i for i, a in enumerate(call.args)}
        arg_map = tuple(position.get(id(a), a) for a in new_call.args)
        d = new_call.op.opdef
        attrs = d.make_attrs(new_call.attrs) if d is not None else new_call.attrs
        return new_call.op, attrs, arg_map

    def _given_type(self, call, expr):
        """The type of an expression a hook built from the call's arguments."""
        from ..ir.type_infer import infer_expr
        sub = ExprMutator()
        for i, a in enumerate(call.args):
            sub.memo[a] = Var(f"input{i}", a.checked_type)
        return infer_expr(sub.visit(expr))

    def _make_plan(self, call, opdef, rule, old_in, new_in, types):
        """``(src_old, cur, wants, op, attrs, arg_map, old_out, new_out, build)`` or None.

        ``src_old``/``cur``: the layout each input had in the original program / has now;
        ``wants``: the layout each argument of the new call is wanted in; ``arg_map``: None when
        the new call takes the inputs in order, else for each of its arguments the index of the
        input it is or the expression a hook built (taken as it is)."""
        n = len(types)
        d_old = self._decide(rule, call.attrs, old_in, old_in, types)
        if d_old is None or len(d_old.inputs) != n:
            return None
        if any(o is not None and r is not None and o != r for o, r in zip(old_in, d_old.inputs)):
            return None                       # the op reads its input in another layout than it has
        src_old = [o if o is not None else r for o, r in zip(old_in, d_old.inputs)]
        if any(s is not None and extents_of(t, s) is None for s, t in zip(src_old, types)):
            return None
        cur = [c if c is not None else s for c, s in zip(new_in, src_old)]
        old_out = tuple(d_old.outputs)
        op, attrs, arg_map, new_rule = call.op, call.attrs, None, rule
        hook = self.hooks.get(opdef.name)
        if hook is not None:
            changes = hook(call, types, src_old)
            if isinstance(changes, Call):
                op, attrs, arg_map = self._replacement(call, opdef, changes, n)
                if op is call.op and arg_map == tuple(range(n)):
                    arg_map = None            # the same operator on the same inputs: new attributes
                    if attrs == call.attrs:
                        attrs = call.attrs
                else:
                    new_rule = get_op_attr(op, "FInferCorrectLayout")
            elif changes:
                if not isinstance(changes, dict):
                    raise TypeError(f"the layout hook of {opdef.name} returned {changes!r}; it returns "
                                    f"None, a dict of attributes to change or a new call")
                attrs = opdef.make_attrs(dict(attrs, **changes))
        if arg_map is not None:
            d_new = self._replaced_decision(call, new_rule, attrs, arg_map, cur, src_old, types, old_out)
            if d_new.attrs and op.opdef is not None:
                attrs = op.opdef.make_attrs(dict(attrs, **d_new.attrs))
        elif attrs is call.attrs and all(c == s for c, s in zip(cur, src_old)):
            d_new = d_old                     # nothing changed: the call stays as it is
        else:
            d_new = self._decide(rule, attrs, cur, src_old, types)
            if d_new is None or len(d_new.inputs) != n:
                d_new, attrs = d_old, call.attrs
            elif d_new.attrs:
                attrs = opdef.make_attrs(dict(attrs, **d_new.attrs))
        if attrs is not call.attrs and attrs == call.attrs:
            attrs = call.attrs
        wants = []
        for k, w in enumerate(d_new.inputs):
            i = k if arg_map is None else arg_map[k]
            if isinstance(i, int) and w is None and cur[i] is not None and cur[i] != old_in[i]:
                w = old_in[i]                 # no layout wanted: the input as it was
            wants.append(w)
        new_out = tuple(d_new.outputs)
        if len(old_out) != len(new_out):
            raise ValueError(f"the layout rule of {opdef.name} gave {len(old_out)} and {len(new_out)} "
                             f"outputs for one call")
        for o, c in zip(old_out, new_out):
            if (o is None) != (c is None) or (o is not None and not _same_axes(o, c)):
                raise ValueError(f"the layout rule of {opdef.name} maps an output of layout {o} to {c}, "
                                 f"which cannot be converted back")
        return (src_old, cur, wants, op, attrs, arg_map, old_out, new_out, d_new.build)

    def _replaced_decision(self, call, rule, attrs, arg_map, cur, src_old, types, old_out):
        """The layouts of a hook's new call: its operator's rule decides for the arguments that
        are inputs; an argument the hook built is taken as it is. Without a rule, or when it
        cannot decide, the inputs come in their original layouts and the result is in the
        original call's output layout."""
        keep = LayoutDecision(tuple(src_old[i] if isinstance(i, int) else None for i in arg_map), old_out)
        if rule is None:
            return keep
        new_types = [types[i] if isinstance(i, int) else self._given_type(call, i) for i in arg_map]
        d = self._decide(rule, attrs, [cur[i] if isinstance(i, int) else None for i in arg_map],
                         [src_old[i] if isinstance(i, int) else None for i in arg_map], new_types)
        if d is None or len(d.inputs) != len(arg_map) or len(d.outputs) != len(old_out):
            return keep
        if any((o is None) != (c is None) or (o is not None and not _same_axes(o, c))
               for o, c in zip(old_out, d.outputs)):
            return keep                       # the rule cannot place the result: as it was
        return d

    def _call(self, call):
        op = call.op
        opdef = op.opdef if isinstance(op, Op) else None
        rule = get_op_attr(op.name, "FInferCorrectLayout") if opdef is not None else None
        if rule is None:
            return self._fallback(call)
        flat = self._flatten(call)
        if flat is None:
            return self._fallback(call)
        types = [f[5] for f in flat]
        plan = self._plan(call, opdef, rule, [f[3] for f in flat], [f[4] for f in flat], types)
        if plan is None:
            return self._fallback(call)
        src_old, cur, wants, new_op, attrs, arg_map, old_out, new_out, build = plan
        if arg_map is not None:
            args = self._replaced_args(call, opdef, flat, types, src_old, cur, wants, arg_map)
        else:
            args = self._new_args(call, opdef, flat, types, src_old, cur, wants)
        if build is not None:
            expr = build(args, attrs)
        elif new_op is op and attrs is call.attrs and all(x is y for x, y in zip(args, call.args)):
            expr = call
        else:
            expr = Call(new_op, args, attrs, ()).with_span(call.span)
        if isinstance(call.checked_type, TupleType):
            return _Value(expr, old_out, new_out, call)
        return _Value(expr, old_out[0], new_out[0], call)

    def _new_args(self, call, opdef, flat, types, src_old, cur, wants):
        """The call's arguments, each (or each tuple field) in the layout wanted."""
        exprs = [self._field_transform(f[2], types[k], src_old[k], cur[k], wants[k],
                                       f"input {k} of {opdef.name}")
                 for k, f in enumerate(flat)]
        if len(exprs) == len(call.args) and all(f[1] is None for f in flat):
            return exprs
        args, k = [], 0
        for a in call.args:
            if isinstance(a.checked_type, TensorType):
                args.append(exprs[k])
                k += 1
                continue
            count = len(a.checked_type.fields)
            fields = exprs[k:k + count]
            if all(e is f[2] for e, f in zip(fields, flat[k:k + count])):
                args.append(self.value(a).expr)
            else:
                args.append(Tuple(fields))
            k += count
        return args

    def _replaced_args(self, call, opdef, flat, types, src_old, cur, wants, arg_map):
        """The arguments of a hook's new call: an input in the layout wanted, or the expression the
        hook built with the inputs in their original layouts put in."""
        args, sub = [], None
        for k, i in enumerate(arg_map):
            if isinstance(i, int):
                args.append(self._field_transform(flat[i][2], types[i], src_old[i], cur[i], wants[k],
                                                  f"input {i} of {opdef.name}"))
                continue
            if sub is None:
                sub = ExprMutator()
                for a in call.args:
                    sub.memo[a] = self.realize(self.value(a))
            args.append(sub.visit(i))
        return args


def rewrite_layouts(mod, hooks: dict):
    """``mod`` with the layouts of every function rewritten (see the module docstring); the same
    module object when nothing changed. Functions marked ``Primitive``, ``Compiler`` or
    ``SkipOptimization`` are left alone."""
    from .infra import rewrite_each_function
    # layouts change only where a hooked operator asks: without one, every rule keeps its input's
    return rewrite_each_function(mod, lambda func: LayoutRewriter(hooks).rewrite_function(func),
                                 ops=hooks)

