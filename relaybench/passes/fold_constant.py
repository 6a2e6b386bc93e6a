"""FoldConstant: compute at compile time what depends only on constants (Relay's ``fold_constant.cc``).

Rules, applied bottom-up in one walk:

* a call of a primitive operator whose arguments are all constants (or tuples of constants) is
  evaluated by the operator's reference (the numpy function the reference interpreter runs for
  it, called directly) and replaced by a ``Constant`` (a tuple of them for a tuple-valued
  operator). The result has exactly the dtype and shape type inference gave the call;
* ``shape_of(e)`` of a statically shaped ``e`` becomes the constant shape, whatever ``e`` is;
* ``if (c) {a} else {b}`` with a constant ``c`` becomes the branch taken;
* ``(a, b, ...).i`` of a literal tuple becomes its field (when the fields dropped are pure);
* ``let %v = <constant>; body`` becomes ``body`` with the constant in place of ``%v`` (a tuple of
  constants too, so its projections fold).

Not folded, as in Relay: calls without arguments (``zeros``, ``ones``: the constant would only be
bigger), operators that mark the program rather than compute, and stateful ones such as
``nn.dropout``, which is SimplifyInference's to remove (:data:`NOT_FOLDED`), and anything
inside a ``Primitive`` (fused) function. A call whose evaluation fails (an index out of range in a
branch that never runs, say) is left for run time, where it fails only if it runs.

>>> import relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(2), float32]) {
...   let %c = add(1f, 2f);
...   %0 = shape_of(%x);
...   (multiply(%x, %c), %0)
... }''')
>>> print(FoldConstant()(mod)["main"].astext(show_types=False, show_meta_data=False))
fn (%x: Tensor[(2), float32]) -> (Tensor[(2), float32], Tensor[(1), int32]) {
  %0 = multiply(%x, 3f);
  (%0, meta[relay.Constant][0])
}
"""

from __future__ import annotations

import re
from typing import Optional

import weakref

import numpy as np

from ..ir.expr import Call, Constant, Expr, Function, Let, Op, Tuple
from ..ir.functor import FusedAwareMutator
from ..ir.types import TensorType, TupleType, Type
from .dead_code_elimination import PurityAnalysis
from .infra import function_pass

__all__ = ["FoldConstant", "fold_constant", "NOT_FOLDED", "STATEFUL", "TypeOracle"]

# Operators Relay marks stateful (TOpIsStateful): ``nn.dropout`` is random at training time, so
# its value is not a function of its input; it is left for SimplifyInference to remove, even on a
# constant input.
STATEFUL = frozenset({"nn.dropout"})

# Operators that annotate the program instead of computing a value (Relay's TNonComputational
# and device placement ops): folding them would erase the annotation. The stateful ones too.
NOT_FOLDED = frozenset({"annotation.stop_fusion", "annotation.cast_hint", "on_device", "device_copy"}) | STATEFUL


def _is_constant(e: Expr) -> bool:
    """A constant, or a (nested) tuple of constants."""
    stack = [e]
    while stack:
        node = stack.pop()
        if isinstance(node, Tuple):
            stack.extend(node.fields)
        elif not isinstance(node, Constant):
            return False
    return True


def _value_of(e: Expr):
    """The interpreter's value of a constant expression: an array, or a tuple of values."""
    return e.data if isinstance(e, Constant) else tuple(_value_of(f) for f in e.fields)


def _as_value(out):
    """An operator reference's result as an interpreter value (arrays and tuples of them)."""
    if isinstance(out, np.ndarray):
        return out
    if isinstance(out, (tuple, list)):
        return tuple(_as_value(v) for v in out)
    if isinstance(out, (bool, int, float, np.generic)):
        return np.asarray(out)
    return out


def _as_expr(value, t: Optional[Type]) -> Optional[Expr]:
    """The constant expression of an evaluated value, cast to the dtype ``t`` says; None if the value
    does not fit ``t`` (then the call stays as it is)."""
    if isinstance(value, tuple):
        fields_t = t.fields if isinstance(t, TupleType) else (None,) * len(value)
        if len(fields_t) != len(value):
            return None
        fields = [_as_expr(v, ft) for v, ft in zip(value, fields_t)]
        return None if any(f is None for f in fields) else Tuple(fields)
    if not isinstance(value, np.ndarray):
        return None  # a closure or an ADT value: not a tensor constant
    if isinstance(t, TensorType):
        if len(t.shape) != value.ndim or any(isinstance(d, int) and d != s
                                             for d, s in zip(t.shape, value.shape)):
            return None
        if value.dtype != t.dtype:
            value = value.astype(t.dtype)
    elif t is not None:
        return None
    # the operator's reference made the array for this call alone: no copy needed (a view of
    # an argument's data is copied)
    return Constant.adopt(value)


class TypeOracle:
    """``oracle(e)``: the checked type of ``e``, a node of ``func``, or None. The first time a type
    is missing, the function is typed (in place, as InferType does), so a pass that needs types
    only for the few calls it rewrites pays for inference only when there are such calls."""

    def __init__(self, func: Function, mod=None):
        self.func, self.mod, self.inferred = func, mod, False

    def __call__(self, e: Expr) -> Optional[Type]:
        t = e.type_or_none
        if t is None and not self.inferred:
            self.inferred = True
            from ..ir.type_infer import infer_expr, infer_module
            if self.mod is not None and any(f is self.func for f in self.mod.functions.values()):
                infer_module(self.mod)
            else:
                infer_expr(self.func, self.mod)
            t = e.type_or_none
        return t


class _ConstantFolder(FusedAwareMutator):
    def __init__(self, func: Function, mod):
        super().__init__()
        self.type_of = TypeOracle(func, mod)
        self.purity = PurityAnalysis()

    def children_to_visit(self, expr: Expr):
        if isinstance(expr, Let):
            return ()  # visit_let walks the chain: each binding before the body
        inner = _blocked_transform_of(expr)
        if inner is not None:
            # the weight, not its transform: both calls fold in one step (visit_call)
            return (inner.args[0],)
        return super().children_to_visit(expr)

    # ---- nodes -------------------------------------------------------------------------------
    def visit_let(self, let):
        kept = []
        node = let
        while isinstance(node, Let):
            value = self.visit(node.value)
            if _is_constant(value):
                self.memo[node.var] = value  # uses of the variable see the constant (or tuple)
            else:
                kept.append((node, value))
            node = node.body
        body = self.visit(node)
        for old, value in reversed(kept):
            if value is old.value and body is old.body:
                body = old
            else:
                body = Let(old.var, value, body).with_span(old.span)
        return body

    def visit_if(self, node):
        new = super().visit_if(node)
        cond = new.cond
        if isinstance(cond, Constant) and cond.data.size == 1:
            return new.true_branch if bool(cond.data.reshape(()).item()) else new.false_branch
        return new

    def visit_tuple_getitem(self, node):
        new = super().visit_tuple_getitem(node)
        tup = new.tuple_value
        if isinstance(tup, Tuple) and new.index < len(tup.fields):
            others = [f for i, f in enumerate(tup.fields) if i != new.index]
            if all(self.purity.visit(f) for f in others):
                return tup.fields[new.index]
        return new

    def visit_call(self, call):
        op = call.op
        if isinstance(op, Op) and op.opdef is not None and op.name not in NOT_FOLDED:
            if op.name == "shape_of":
                folded = self._shape_of(call)
                if folded is not None:
                    return folded
            elif call.args:  # calls without arguments are not folded
                if op.name == "layout_transform":
                    folded = self._blocked_weight_transform(call)
                    if folded is not None:
                        return folded
                args = [self.visit(a) for a in call.args]
                if all(_is_constant(a) for a in args):
                    folded = self._evaluate(call, op.opdef, args)
                    if folded is not None:
                        return folded
        return super().visit_call(call)

    # ---- helpers -----------------------------------------------------------------------------
    def _shape_of(self, call: Call) -> Optional[Constant]:
        t = self.type_of(call.args[0])
        if isinstance(t, TensorType) and all(isinstance(d, int) for d in t.shape):
            return Constant(np.array(t.shape, dtype=call.attrs.dtype).reshape(len(t.shape)))
        return None

    def _blocked_weight_transform(self, call: Call) -> Optional[Constant]:
        """``layout_transform(nn.contrib_conv2d_winograd_weight_transform(w), HWOI ->
        HWOI{b}o)`` of a constant ``w`` (the x86 Winograd weights) folded in one step
        (:func:`~relaybench.op.winograd.winograd_weight_transform_blocked`): the values of
        folding the two calls one after the other (to the last bit of a float32 product),
        without the pass over the unblocked transform."""
        inner = _blocked_transform_of(call)
        if inner is None:
            return None
        match = re.fullmatch(r"HWOI(\d+)o", call.attrs.dst_layout)
        weight = self.visit(inner.args[0])
        if not isinstance(weight, Constant) or weight.data.ndim != 4:
            return None
        from ..op.winograd import winograd_weight_transform_blocked
        value = winograd_weight_transform_blocked(weight.data, int(inner.attrs.tile_size),
                                                  int(match.group(1)))
        return None if value is None else _as_expr(value, self.type_of(call))

    def _evaluate(self, call: Call, opdef, args: list) -> Optional[Expr]:
        """The call's value as a constant expression, computed by the operator's reference (what
        the interpreter runs); None if it cannot be computed here."""
        if opdef.reference is None:
            return None
        try:
            value = _as_value(opdef.reference(*[_value_of(a) for a in args], call.attrs))
        except Exception:  # the call fails at run time too, if it ever runs: leave it there
            return None
        return _as_expr(value, self.type_of(call))


def _blocked_transform_of(expr):
    """The Winograd weight transform ``expr`` puts in a blocked layout, when ``expr`` is
    ``layout_transform(nn.contrib_conv2d_winograd_weight_transform(w), "HWOI", "HWOI{b}o")``;
    else None."""
    if not (isinstance(expr, Call) and isinstance(expr.op, Op)
            and expr.op.name == "layout_transform" and len(expr.args) == 1):
        return None
    inner = expr.args[0]
    if (isinstance(inner, Call) and isinstance(inner.op, Op) and len(inner.args) == 1
            and inner.op.name == "nn.contrib_conv2d_winograd_weight_transform"
            and expr.attrs.src_layout == "HWOI"
            and re.fullmatch(r"HWOI\d+o", expr.attrs.dst_layout)):
        return inner
    return None


def fold_constant(func: Function, mod=None) -> Function:
    """``func`` with its constant subexpressions folded; the same object when nothing folds.

    The body of a function that came back unchanged is remembered, and not walked again: a
    pipeline runs FoldConstant three times, mostly on functions the passes between left alone."""
    if func.body in _FIXED_POINTS:
        return func
    with np.errstate(all="ignore"):  # 1/0 gives inf here as at run time, without a warning
        out = _ConstantFolder(func, mod).visit(func)
    if out is func:
        _FIXED_POINTS.add(func.body)
    return out


#: bodies of functions FoldConstant left as they were (nodes are immutable, so they stay so; a
#: function rebuilt around the same body, with a return type written, is one of them too)
_FIXED_POINTS: "weakref.WeakSet" = weakref.WeakSet()


@function_pass(opt_level=2)
def FoldConstant(func, mod, ctx):
    """Evaluate the subexpressions that depend only on constants and put their values in place.

    Folds operator calls with constant arguments, ``shape_of`` of static shapes, ``if`` on a
    constant, projections of literal tuples and let-bound constants (and tuples of them); never
    inside Primitive functions.
    """
    return fold_constant(func, mod)
