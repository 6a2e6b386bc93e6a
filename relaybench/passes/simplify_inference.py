"""SimplifyInference: training-time operators rewritten into the arithmetic of inference.

Relay's ``simplify_inference.cc``, rule by rule:

* ``nn.batch_norm(x, gamma, beta, mean, var)`` (``BatchNormToInferUnpack``)::

      scale = divide(1, sqrt(add(var, epsilon)))      # then multiply(scale, gamma) if scale=True
      shift = multiply(negative(mean), scale)          # then add(shift, beta)       if center=True
      out   = add(multiply(x, expand(scale)), expand(shift))

  where ``expand(v)`` is ``expand_dims(v, axis=1, num_newaxis=ndim - axis - 1)`` so the vector
  lines up with ``axis`` (nothing when ``axis`` is the last one). Field 0 of the batch norm is
  ``out``; fields 1 and 2 are the moving mean and variance (what the inference batch norm returns),
  so every ``nn.batch_norm`` goes, not only those read through ``.0``.
* ``nn.dropout(x)``: field 0 is ``x``, field 1 (the mask) ``ones_like(x)``.
* ``nn.layer_norm(x, gamma, beta)`` (``LayerNormToInferUnpack``)::

      mean = mean(x, axis=[axis], keepdims=True)
      var  = variance(x, mean, axis=[axis], keepdims=True)
      out  = divide(subtract(x, mean), sqrt(add(var, epsilon)))
      out  = multiply(out, expand(gamma))             # if scale=True
      out  = add(out, expand(beta))                   # if center=True

Constants (``epsilon``, ``1``) have the data's dtype. Nothing inside ``Primitive`` functions is
touched. With the weights bound, FoldConstant then turns ``scale`` and ``shift`` into constants.

>>> import relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(1, 2, 3, 3), float32], %g: Tensor[(2), float32], %p: Tensor[(2), float32]) {
...   %0 = nn.batch_norm(%x, %g, %p, %p, %p);
...   %0.0
... }''')
>>> print(SimplifyInference()(mod)["main"].astext(show_types=False))  # doctest: +ELLIPSIS
fn (%x: Tensor[(1, 2, 3, 3), float32], %g: Tensor[(2), float32], %p: Tensor[(2), float32]) -> Tensor[(1, 2, 3, 3), float32] {
  %0 = add(%p, 1e-05f);
  %1 = sqrt(%0);
  %2 = divide(1f, %1);
  %3 = multiply(%2, %g);
  %4 = expand_dims(%3, axis=1, num_newaxis=2);
  %5 = multiply(%x, %4);
  %6 = negative(%p);
  %7 = multiply(%6, %3);
  %8 = add(%7, %p);
  %9 = expand_dims(%8, axis=1, num_newaxis=2);
  add(%5, %9)
}
"""

from __future__ import annotations

import numpy as np

from ..ir.analysis import ops_used
from ..ir.expr import Call, Constant, Expr, Function, Op, Tuple, TupleGetItem
from ..ir.functor import FusedAwareMutator
from ..ir.types import TensorType
from .fold_constant import TypeOracle
from .infra import function_pass

__all__ = ["SimplifyInference", "simplify_inference", "expand_to_axis"]


def _op(name: str, *args, **attrs) -> Call:
    return Call(Op.get(name), args, attrs)


def _scalar(value: float, dtype: str) -> Constant:
    return Constant(np.asarray(value, dtype=dtype))


def expand_to_axis(vector: Expr, ndim: int, axis: int) -> Expr:
    """``vector`` (of length ``shape[axis]``) reshaped to broadcast along ``axis`` of an ``ndim``-d
    tensor: ``expand_dims(vector, axis=1, num_newaxis=ndim - axis - 1)``, or ``vector`` itself when
    ``axis`` is the last (Relay's ``ExpandBiasToMatchAxis``). ``axis`` must be non-negative."""
    pad = ndim - axis - 1
    if pad > 0:
        return _op("expand_dims", vector, axis=1, num_newaxis=pad)
    return vector


def _data_type(type_of, call: Call):
    t = type_of(call.args[0])
    return t if isinstance(t, TensorType) else None


def _axis(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis


def _batch_norm(type_of, call: Call, args: list, index: int):
    if index:  # the moving statistics, what the inference batch norm returns beside its output
        return args[index + 2]
    t = _data_type(type_of, call)
    if t is None:
        return None
    x, gamma, beta, mean, var = args
    a = call.attrs
    ndim, axis = len(t.shape), _axis(a.axis, len(t.shape))
    scale = _op("divide", _scalar(1.0, t.dtype), _op("sqrt", _op("add", var, _scalar(a.epsilon, t.dtype))))
    if a.scale:
        scale = _op("multiply", scale, gamma)
    shift = _op("multiply", _op("negative", mean), scale)
    if a.center:
        shift = _op("add", shift, beta)
    out = _op("multiply", x, expand_to_axis(scale, ndim, axis))
    return _op("add", out, expand_to_axis(shift, ndim, axis))


def _dropout(type_of, call: Call, args: list, index: int):
    return args[0] if index == 0 else _op("ones_like", args[0])


def _layer_norm(type_of, call: Call, args: list):
    t = _data_type(type_of, call)
    if t is None:
        return None
    x, gamma, beta = args
    a = call.attrs
    ndim = len(t.shape)
    mean = _op("mean", x, axis=(a.axis,), keepdims=True)
    var = _op("variance", x, mean, axis=(a.axis,), keepdims=True)
    out = _op("divide", _op("subtract", x, mean), _op("sqrt", _op("add", var, _scalar(a.epsilon, t.dtype))))
    axis = _axis(a.axis, ndim)
    if a.scale:
        out = _op("multiply", out, expand_to_axis(gamma, ndim, axis))
    if a.center:
        out = _op("add", out, expand_to_axis(beta, ndim, axis))
    return out


# Tuple-valued ops: name -> (number of fields, rule(types, original call, rewritten args, field
# index) -> the field's replacement or None). Each field is built only when it is used.
_TUPLE_RULES = {"nn.batch_norm": (3, _batch_norm), "nn.dropout": (2, _dropout)}
# Tensor-valued ops: name -> rule(types, original call, rewritten args) -> replacement or None
_RULES = {"nn.layer_norm": _layer_norm}
_ALL_RULES = frozenset(_TUPLE_RULES) | frozenset(_RULES)


def _rule_op(e: Expr):
    return e.op.name if isinstance(e, Call) and isinstance(e.op, Op) else None


class _InferenceSimplifier(FusedAwareMutator):
    def __init__(self, func: Function, mod):
        super().__init__()
        self.type_of = TypeOracle(func, mod)
        self.fields: dict = {}  # tuple-valued call -> its fields built so far

    def children_to_visit(self, expr: Expr):
        if isinstance(expr, TupleGetItem) and _rule_op(expr.tuple_value) in _TUPLE_RULES:
            return expr.tuple_value.args  # the field is built from the arguments alone
        return super().children_to_visit(expr)


    def _field(self, call: Call, index: int):
        n, rule = _TUPLE_RULES[call.op.name]
        built = self.fields.setdefault(call, [None] * n)
        if built[index] is None:
            built[index] = rule(self.type_of, call, [self.visit(a) for a in call.args], index)
        return built[index]

    def visit_tuple_getitem(self, node):
        call = node.tuple_value
        if _rule_op(call) in _TUPLE_RULES and node.index < _TUPLE_RULES[call.op.name][0]:
            field = self._field(call, node.index)
            if field is not None:
                return field
        return super().visit_tuple_getitem(node)

    def visit_call(self, call):
        name = _rule_op(call)
        if name in _TUPLE_RULES:  # used as a whole: the tuple of its fields
            fields = [self._field(call, i) for i in range(_TUPLE_RULES[name][0])]
            if all(f is not None for f in fields):
                return Tuple(fields)
        elif name in _RULES:
            out = _RULES[name](self.type_of, call, [self.visit(a) for a in call.args])
            if out is not None:
                return out
        return super().visit_call(call)


def simplify_inference(func: Function, mod=None) -> Function:
    """``func`` with batch norm, dropout and layer norm unpacked; the same object if it has none."""
    if not ops_used(func) & _ALL_RULES:
        return func
    return _InferenceSimplifier(func, mod).visit(func)


@function_pass(opt_level=0)
def SimplifyInference(func, mod, ctx):
    """Rewrite ``nn.batch_norm``, ``nn.dropout`` and ``nn.layer_norm`` into elementwise arithmetic."""
    return simplify_inference(func, mod)
