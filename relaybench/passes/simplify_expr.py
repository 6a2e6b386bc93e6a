"""SimplifyExpr (Relay's, opt_level 0): local algebraic simplifications written as pattern rewrites.

Each rule is a named :class:`~relaybench.passes.dataflow_pattern.DFPatternCallback`; the pass
applies them all with :func:`~relaybench.passes.dataflow_pattern.rewrite` until none fires.
Shapes come from ``checked_type``, so a rule fires only when the replacement has exactly the
type of what it replaces.

=============================  ==========================================================
rule                           rewrite
=============================  ==========================================================
SimplifyReshape                ``reshape(reshape|squeeze|expand_dims|reshape_like(x))``
                               -> ``reshape(x)`` to the final shape
EliminateNoOpReshape           ``reshape|squeeze|expand_dims|reshape_like(x)`` -> ``x``
                               when the type does not change
SimplifyTranspose              ``transpose(transpose(x))`` -> one transpose (or ``x``)
EliminateNoOpTranspose         ``transpose(x)`` with the identity permutation -> ``x``
SimplifyLayoutTransform        ``layout_transform(layout_transform(x, A->B), B->C)`` ->
                               ``layout_transform(x, A->C)``, or ``x`` when ``C`` is ``A``
EliminateNoOpLayoutTransform   ``layout_transform(x, A->A)`` -> ``x``
EliminateSameCast              ``cast(x, dtype)`` / ``cast_like(x, y)`` to x's dtype -> ``x``
EliminateIdentity              ``x + 0``, ``0 + x``, ``x - 0``, ``x * 1``, ``1 * x``, ``x / 1``
                               -> ``x`` (0 and 1: constants of x's dtype whose every element
                               is 0 or 1, or zeros/ones/zeros_like/ones_like) when the result
                               has x's type (broadcasting could grow it)
SimplifyClip                   ``clip(clip(x, a1, b1), a2, b2)`` -> one clip
SimplifyRelu                   ``relu(relu(x))`` -> ``relu(x)``; ``relu(clip(x, a>=0, b))``
                               -> the clip; ``clip(relu(x), a>=0, b)`` -> ``clip(x, a, b)``
SimplifyConcatenate            ``concatenate((x,))`` -> ``x``
EliminateNoOpStridedSlice      a ``strided_slice`` with positive strides that keeps the type
                               -> ``x``
=============================  ==========================================================

``x * 0`` is not folded (``nan * 0`` is ``nan``). ``x + 0`` is folded, as in TVM, although for
``x = -0.0`` the sum is ``+0.0`` (equal, with the other sign). As in TVM, a match whose interior
node is also used elsewhere is left alone (``reshape(%r)`` when ``%r = reshape(%x)`` has another
use), so no computation is duplicated.

>>> import relaybench as rb
>>> from relaybench import op
>>> x = rb.var("x", shape=(2, 3, 4))
>>> body = op.reshape(op.reshape(op.transpose(op.transpose(x, axes=(1, 0, 2)), axes=(1, 0, 2)),
...                              newshape=(6, 4)), newshape=(24,)) * rb.const(1.0)
>>> mod = rb.IRModule.from_expr(rb.Function([x], body))
>>> trace = RewriteTrace()
>>> print(SimplifyExpr(trace=trace)(mod)["main"].astext(show_types=False))
fn (%x: Tensor[(2, 3, 4), float32]) -> Tensor[(24), float32] {
  reshape(%x, newshape=[24])
}
>>> trace.counts()["SimplifyReshape"], trace.counts()["EliminateIdentity"]
(1, 1)
"""

from __future__ import annotations

import math

import numpy as np

from .. import op as _op
from ..ir.expr import Call, Constant, Op
from ..ir.layout import Layout
from ..ir.symbolic import ANY
from ..ir.types import TensorType
from .dataflow_pattern import DFPatternCallback, RewriteTrace, is_constant, is_op, is_tuple, rewrite, wildcard
from .infra import function_pass, typed

__all__ = ["SimplifyExpr", "RULES", "SimplifyReshape", "EliminateNoOpReshape", "SimplifyTranspose",
           "EliminateNoOpTranspose", "SimplifyLayoutTransform", "EliminateNoOpLayoutTransform",
           "EliminateSameCast", "EliminateIdentity", "SimplifyClip", "SimplifyRelu", "SimplifyConcatenate",
           "EliminateNoOpStridedSlice", "RewriteTrace"]


# ---- type helpers -------------------------------------------------------------------------------

def _tensor_type(e):
    t = e.type_or_none
    return t if isinstance(t, TensorType) else None


def _no_any(t: TensorType) -> bool:
    return all(d is not ANY for d in t.shape)


def _same_type(a, b) -> bool:
    """Both tensors of one type, with no ``?`` dims (two ``?`` may differ at run time)."""
    ta, tb = _tensor_type(a), _tensor_type(b)
    return ta is not None and tb is not None and ta == tb and _no_any(ta)


def _reshape_family():
    """The ops that only reshape their data (``x`` the data, which stays in row-major order)."""
    x = wildcard()
    return x, (is_op("reshape")(x) | is_op("squeeze")(x) | is_op("expand_dims")(x)
               | is_op("reshape_like")(x, wildcard()))


# ---- reshapes -----------------------------------------------------------------------------------

class SimplifyReshape(DFPatternCallback):
    """``reshape(r(x))`` with ``r`` any reshaping op -> one ``reshape(x)`` to the final shape:
    the outer newshape if it means the same on x, else the final shape spelled out."""

    def __init__(self):
        super().__init__(require_type=True)
        self.x, inner = _reshape_family()
        self.pattern = is_op("reshape")(inner)

    def callback(self, pre, post, node_map):
        from ..op.transform import infer_reshape
        xt, out = _tensor_type(node_map.pre[self.x][0]), _tensor_type(pre)
        if xt is None or out is None or not (_no_any(xt) and _no_any(out)):
            return post
        candidates = [(post.attrs.newshape, post.attrs.allowzero)]
        if out.is_static:
            candidates.append((out.shape, 1 if 0 in out.shape else 0))
        for newshape, allowzero in candidates:
            try:
                shape = tuple(infer_reshape(xt.shape, newshape, allowzero))
            except ValueError:
                continue
            if shape == tuple(out.shape):
                return _op.reshape(node_map[self.x][0], newshape=newshape, allowzero=allowzero)
        return post


class EliminateNoOpReshape(DFPatternCallback):
    """A reshaping op whose result has its input's type -> the input."""

    def __init__(self):
        super().__init__(require_type=True)
        self.x, self.pattern = _reshape_family()

    def callback(self, pre, post, node_map):
        if _same_type(pre, node_map.pre[self.x][0]):
            return node_map[self.x][0]
        return post


# ---- transposes ---------------------------------------------------------------------------------

def _permutation(call, rank: int) -> tuple:
    axes = call.attrs.axes
    if axes is None:
        return tuple(range(rank - 1, -1, -1))
    return tuple(a + rank if a < 0 else a for a in axes)


class SimplifyTranspose(DFPatternCallback):
    """``transpose(transpose(x, a), b)`` -> ``transpose(x, c)`` with ``c[j] = a[b[j]]``, or ``x``
    when ``c`` is the identity."""

    def __init__(self):
        super().__init__(require_type=True)
        self.x = wildcard()
        self.inner = is_op("transpose")(self.x)
        self.pattern = is_op("transpose")(self.inner)

    def callback(self, pre, post, node_map):
        xt = _tensor_type(node_map.pre[self.x][0])
        if xt is None:
            return post
        rank = xt.ndim
        a = _permutation(node_map.pre[self.inner][0], rank)
        b = _permutation(pre, rank)
        composed = tuple(a[j] for j in b)
        x = node_map[self.x][0]
        if composed == tuple(range(rank)):
            return x
        return _op.transpose(x, axes=composed)


class EliminateNoOpTranspose(DFPatternCallback):
    """``transpose(x)`` whose permutation is the identity -> ``x``."""

    def __init__(self):
        super().__init__(require_type=True)
        self.x = wildcard()
        self.pattern = is_op("transpose")(self.x)

    def callback(self, pre, post, node_map):
        xt = _tensor_type(node_map.pre[self.x][0])
        if xt is not None and _permutation(pre, xt.ndim) == tuple(range(xt.ndim)):
            return node_map[self.x][0]
        return post


# ---- layouts ------------------------------------------------------------------------------------

class SimplifyLayoutTransform(DFPatternCallback):
    """``layout_transform(layout_transform(x, A->B), B->C)`` -> ``layout_transform(x, A->C)``,
    or ``x`` when ``C`` is ``A`` (the second transform undoes the first)."""

    def __init__(self):
        super().__init__(require_type=True)
        self.x = wildcard()
        self.inner = is_op("layout_transform")(self.x)
        self.pattern = is_op("layout_transform")(self.inner)

    def callback(self, pre, post, node_map):
        inner = node_map.pre[self.inner][0]
        src, mid = Layout(inner.attrs.src_layout), Layout(inner.attrs.dst_layout)
        mid2, dst = Layout(pre.attrs.src_layout), Layout(pre.attrs.dst_layout)
        if mid != mid2 or src.is_undef or dst.is_undef:
            return post
        x_pre, x = node_map.pre[self.x][0], node_map[self.x][0]
        if src == dst:
            return x if _same_type(pre, x_pre) else post
        xt, out = _tensor_type(x_pre), _tensor_type(pre)
        if xt is None or out is None:
            return post
        try:
            shape = src.convert_shape(xt.shape, dst)
        except ValueError:
            return post
        if tuple(shape) != tuple(out.shape) or not _no_any(out):
            return post
        return _op.layout_transform(x, src_layout=src.name, dst_layout=dst.name)


class EliminateNoOpLayoutTransform(DFPatternCallback):
    """``layout_transform(x, A->A)`` -> ``x``."""

    def __init__(self):
        super().__init__(require_type=True)
        self.x = wildcard()
        self.pattern = is_op("layout_transform")(self.x)

    def callback(self, pre, post, node_map):
        if Layout(pre.attrs.src_layout) == Layout(pre.attrs.dst_layout) and \
                _same_type(pre, node_map.pre[self.x][0]):
            return node_map[self.x][0]
        return post


# ---- casts --------------------------------------------------------------------------------------

class EliminateSameCast(DFPatternCallback):
    """``cast(x, dtype)`` or ``cast_like(x, y)`` where x already has that dtype -> ``x``."""

    def __init__(self):
        super().__init__(require_type=True)
        self.x = wildcard()
        self.pattern = is_op("cast")(self.x) | is_op("cast_like")(self.x, wildcard())

    def callback(self, pre, post, node_map):
        pt, xt = _tensor_type(pre), _tensor_type(node_map.pre[self.x][0])
        if pt is not None and xt is not None and pt == xt:
            return node_map[self.x][0]
        return post


# ---- arithmetic identities ----------------------------------------------------------------------

# (op, position of the neutral operand) -> the neutral value
_NEUTRAL = {("add", 1): 0, ("add", 0): 0, ("subtract", 1): 0,
            ("multiply", 1): 1, ("multiply", 0): 1, ("divide", 1): 1}

_FILLED = {"zeros": 0, "zeros_like": 0, "ones": 1, "ones_like": 1}


def _is_all(e, value) -> bool:
    """Whether ``e`` is a constant (or zeros/ones/zeros_like/ones_like) whose every element is ``value``."""
    if type(e) is Constant:
        return e.data.size > 0 and e.data.dtype != np.bool_ and bool(np.all(e.data == value))
    if type(e) is Call and type(e.op) is Op:
        return _FILLED.get(e.op.name) == value
    return False


def _all_zero(e) -> bool:
    return _is_all(e, 0)


def _all_one(e) -> bool:
    return _is_all(e, 1)


class EliminateIdentity(DFPatternCallback):
    """``x + 0``, ``0 + x``, ``x - 0``, ``x * 1``, ``1 * x``, ``x / 1`` -> ``x`` when the result
    has x's type (a neutral operand that broadcasts x to a bigger shape is kept)."""

    def __init__(self):
        super().__init__(require_type=True)
        self.x = x = wildcard()
        filled = (is_constant() | is_op("zeros")() | is_op("ones")() | is_op("zeros_like")(wildcard())
                  | is_op("ones_like")(wildcard()))
        zero, one = filled.where(_all_zero), filled.where(_all_one)
        add, mul = is_op("add"), is_op("multiply")
        self.pattern = (add(x, zero) | add(zero, x) | is_op("subtract")(x, zero)
                        | mul(x, one) | mul(one, x) | is_op("divide")(x, one))

    def callback(self, pre, post, node_map):
        name = pre.op.name
        for pos in (1, 0):
            want = _NEUTRAL.get((name, pos))
            if want is None or not _is_all(pre.args[pos], want):
                continue
            x_pre = pre.args[1 - pos]
            pt, xt, ct = _tensor_type(pre), _tensor_type(x_pre), _tensor_type(pre.args[pos])
            if pt is None or xt is None or ct is None or pt != xt:
                continue
            if ct.ndim == 0 or _no_any(pt):   # a scalar never grows x; else no "?" to hide a change
                return post.args[1 - pos]
        return post


# ---- clip and relu ------------------------------------------------------------------------------

def _integral(v) -> bool:
    return math.isinf(v) or float(v).is_integer()


class SimplifyClip(DFPatternCallback):
    """``clip(clip(x, a1, b1), a2, b2)`` -> ``clip(x, max(a1, a2), min(b1, b2))``; when the two
    ranges do not meet, the result is the constant the outer clip pins everything to. Integer
    tensors are merged only when every bound is an integer."""

    def __init__(self):
        super().__init__(require_type=True)
        self.x = wildcard()
        self.inner = is_op("clip")(self.x)
        self.pattern = is_op("clip")(self.inner)

    def callback(self, pre, post, node_map):
        inner = node_map.pre[self.inner][0]
        a1, b1 = inner.attrs.a_min, inner.attrs.a_max
        a2, b2 = pre.attrs.a_min, pre.attrs.a_max
        xt = _tensor_type(node_map.pre[self.x][0])
        if xt is None or None in (a1, b1, a2, b2):
            return post
        if not xt.dtype.startswith(("float", "bfloat")) and not all(_integral(v) for v in (a1, b1, a2, b2)):
            return post
        lo, hi = max(a1, a2), min(b1, b2)
        if lo > hi:
            lo = hi = a2 if b1 < a2 else b2
        return _op.clip(node_map[self.x][0], a_min=lo, a_max=hi)


class SimplifyRelu(DFPatternCallback):
    """``relu(relu(x))`` -> ``relu(x)``; ``relu(clip(x, a, b))`` -> the clip and
    ``clip(relu(x), a, b)`` -> ``clip(x, a, b)``, both when ``a >= 0``."""

    def __init__(self):
        super().__init__(require_type=True)
        self.x = wildcard()
        relu, clip = is_op("nn.relu"), is_op("clip")
        self.pattern = relu(relu(self.x)) | relu(clip(self.x)) | clip(relu(self.x))

    def callback(self, pre, post, node_map):
        inner = pre.args[0]
        if pre.op.name == "nn.relu":
            if inner.op.name == "nn.relu" or inner.attrs.a_min >= 0:
                return post.args[0]
            return post
        if pre.attrs.a_min >= 0:
            return _op.clip(node_map[self.x][0], a_min=pre.attrs.a_min, a_max=pre.attrs.a_max)
        return post


# ---- concatenate, strided_slice -----------------------------------------------------------------

class SimplifyConcatenate(DFPatternCallback):
    """``concatenate((x,))`` -> ``x``."""

    def __init__(self):
        super().__init__(require_type=True)
        self.x = wildcard()
        self.pattern = is_op("concatenate")(is_tuple([self.x]))

    def callback(self, pre, post, node_map):
        if _tensor_type(pre) == _tensor_type(node_map.pre[self.x][0]):
            return node_map[self.x][0]
        return post


class EliminateNoOpStridedSlice(DFPatternCallback):
    """``strided_slice(x, ...)`` with positive strides whose result has x's type -> ``x`` (a
    slice that keeps every extent with positive strides starts at 0 and steps by 1, or the
    axis has at most one element)."""

    def __init__(self):
        super().__init__(require_type=True)
        self.x = wildcard()
        self.pattern = is_op("strided_slice")(self.x)

    def callback(self, pre, post, node_map):
        strides = pre.attrs.strides or ()
        if pre.attrs.slice_mode != "size" and any(s < 0 for s in strides):
            return post
        if _same_type(pre, node_map.pre[self.x][0]):
            return node_map[self.x][0]
        return post


RULES = (SimplifyReshape, EliminateNoOpReshape, SimplifyTranspose, EliminateNoOpTranspose,
         SimplifyLayoutTransform, EliminateNoOpLayoutTransform, EliminateSameCast, EliminateIdentity,
         SimplifyClip, SimplifyRelu, SimplifyConcatenate, EliminateNoOpStridedSlice)
"""The rules of SimplifyExpr, in the order each round applies them."""

_RULE_NAMES = tuple(r.__name__ for r in RULES)


@function_pass(opt_level=0)
def SimplifyExpr(func, mod, ctx, *, disabled_rules: tuple = (), trace=None):
    """Simplify local patterns: merge consecutive reshapes, transposes, layout transforms and
    clips, and drop no-op reshapes, casts, transposes, slices and arithmetic identities.

    ``disabled_rules``: names of rules (see :data:`RULES`) to leave out. ``trace``: a list (a
    :class:`RewriteTrace`) that receives one record per rewrite.
    """
    unknown = [r for r in disabled_rules if r not in _RULE_NAMES]
    if unknown:
        raise ValueError(f"SimplifyExpr has no rule {unknown[0]!r} (rules: {', '.join(_RULE_NAMES)})")
    typed(mod)          # types the module's functions (this one included) when they are not yet
    rules = [rule() for rule in RULES if rule.__name__ not in disabled_rules]
    return rewrite(rules, func, mod, trace=trace)
