"""Layout rules of the operators (Relay's ``FInferCorrectLayout``), and layout arithmetic.

A *layout rule* is an operator's built-in (level 0) ``FInferCorrectLayout`` attribute, given as
the ``layout`` slot of its OpDef; a user or a target may register another one at a higher level
(:func:`relaybench.op.register_op_attr`)::

    rule(attrs, layouts, old_layouts, types) -> LayoutDecision | None

``types`` are the input tensors' types in the original program (a tuple argument, such as
``concatenate``'s, counts as one input per field); ``old_layouts`` the layout each input had
there and ``layouts`` the layout each input comes in now (``None``: not known, a tensor no
layout-sensitive operator has named). The rule answers with the layout it wants each input in,
the layout of each output and, when the call must change to work in those layouts, the attributes
to change (``axis`` of ``nn.bias_add``, ``layout`` of a pooling, the axes of a reduction) or a
``build`` function that makes a different call (a ``nn.bias_add`` on a channel axis split into
blocks becomes an ``add``). ``None`` means the rule cannot reason about this call; the call then
gets its inputs back in their original layouts, like an operator without a rule.

Three kinds of operators, as in Relay:

* *layout-agnostic* ones (``nn.relu``, ``add``) work in whatever layout their inputs come in; a
  broadcast operand of lower rank (a ``(C, 1, 1)`` scale) is transformed with the same trick as
  Relay's: the axes it lacks are added in front (``expand_dims``) and the result is rearranged
  into the matching part of the new layout, ``CHW`` -> ``CHW16c``; an axis of extent 1 that the
  new layout splits into blocks stays 1 in both parts (a ``reshape`` adds the 1);
* *lightly layout-sensitive* ones (``nn.bias_add``, ``concatenate``, ``split``, the reductions,
  the poolings, ``nn.pad``, ``nn.softmax``, ``nn.batch_norm``) follow their input's layout and
  rewrite the attribute that names an axis, or fall back to the original layout when the axis
  they work on is split into blocks in a way they cannot follow;
* *heavily layout-sensitive* ones (``nn.conv2d``, ``layout_transform``) want the layouts their
  attributes name; AlterOpLayout and ConvertLayout change those attributes through the
  ``FTVMAlterOpLayout`` / ``FTVMConvertOpLayout`` attributes.

Operators without a rule (``nn.dense``, ``reshape``, ``transpose``, ``nn.batch_flatten``...) get
their inputs in the original layout.

The rules belong to the operator layer (each OpDef names its rule); the rewriter that applies
them to a program is :mod:`relaybench.passes._layout_rules`.

>>> from relaybench.ir.layout import Layout
>>> from relaybench.ir.types import TensorType
>>> from relaybench.op.registry import get_opdef
>>> attrs = get_opdef("nn.max_pool2d").make_attrs({"pool_size": (2, 2)})
>>> d = pool_layout(attrs, [Layout("NCHW16c")], [Layout("NCHW")], [TensorType((1, 32, 8, 8), "float32")])
>>> [str(x) for x in d.inputs], [str(x) for x in d.outputs], d.attrs
(['NCHW16c'], ['NCHW16c'], {'layout': 'NCHW16c', 'out_layout': ''})
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Optional

from ..ir.expr import Call, Op
from ..ir.layout import Layout
from ..ir.types import TensorType

__all__ = [
    "LayoutDecision", "transform_layout", "extents_of",
    "elemwise_layout", "broadcast_layout", "bias_add_layout", "conv2d_layout", "pool_layout",
    "concatenate_layout", "split_layout", "reduce_layout", "softmax_layout", "pad_layout",
    "layout_transform_layout", "batch_norm_layout", "dropout_layout", "original_layout",
]


@dataclass(frozen=True)
class LayoutDecision:
    """What a layout rule decided for one call.

    ``inputs``: the layout each (flattened) input should come in, ``None`` for an input that has
    no layout (a scalar, a 1-d statistics vector); ``outputs``: the layout of each output (one for
    a tensor, one per field for a tuple), ``None`` when not known; ``attrs``: attributes to change
    (``None``: keep them); ``build(args, attrs) -> Expr``: makes the new call when it is not the
    same operator with new attributes.
    """

    inputs: tuple
    outputs: tuple
    attrs: Optional[dict] = None
    build: Optional[Callable] = None


# =============================================================================================
# Layout arithmetic


@lru_cache(maxsize=None)
def _parsed(name: str) -> Optional[Layout]:
    try:
        out = Layout(name)
    except ValueError:
        return None
    return None if out.is_undef else out


def _layout(name) -> Optional[Layout]:
    """A Layout from a string (None for an empty string or an invalid one); parsed once."""
    if name is None or isinstance(name, Layout):
        return name
    return _parsed(name)


@lru_cache(maxsize=None)
def _primal(layout: Layout) -> str:
    return layout.primal


@lru_cache(maxsize=None)
def _factors(layout: Layout) -> dict:
    """Primal axis -> block factor, for the axes ``layout`` splits into blocks (do not modify)."""
    return {ax.primal_name: ax.factor for ax in layout.axes if not ax.is_primal}


@lru_cache(maxsize=None)
def _axes_key(layout: Layout) -> str:
    return "".join(sorted(layout.primal))


def _same_axes(a: Layout, b: Layout) -> bool:
    """Whether two layouts have the same primal axes (so a tensor converts between them)."""
    return _axes_key(a) == _axes_key(b)


def _join(axes) -> Optional[Layout]:
    """The layout of a sequence of LayoutAxis objects; None when empty or invalid."""
    return _layout("".join(str(ax) for ax in axes))


def _suffix(layout: Layout, rank: int) -> Optional[Layout]:
    """The layout of the last ``rank`` axes (what a right-aligned broadcast operand of that rank
    lines up with); None when those axes do not form a layout (a block without its axis)."""
    if rank > layout.ndim:
        return None
    return _join(layout.axes[layout.ndim - rank:])


def _restrict(layout: Layout, primals) -> Optional[Layout]:
    """The axes of ``layout`` (blocks included) whose primal axis is in ``primals``, in order."""
    return _join(ax for ax in layout.axes if ax.primal_name in primals)


@lru_cache(maxsize=None)
def _aligned_part(new: Layout, own_old: Layout) -> Layout:
    """The layout a broadcast operand whose axes are ``own_old`` takes against a tensor in
    ``new``: the part of ``new`` over the operand's axes when it is a suffix of ``new`` (so
    right-aligned broadcasting still lines the axes up), else the whole of ``new`` (the operand
    gets the missing axes, with extent 1, when it is transformed)."""
    mine = set(own_old.primal)
    inside = [ax.primal_name in mine for ax in new.axes]
    first = inside.index(True) if True in inside else len(inside)
    if all(inside[first:]):
        part = _restrict(new, mine)
        if part is not None:
            return part
    return new


def _divides(factor: int, extent) -> bool:
    return factor == 1 or (isinstance(extent, int) and extent % factor == 0)


@lru_cache(maxsize=65536)
def _extents(shape: tuple, layout: Layout) -> Optional[dict]:
    if len(shape) != layout.ndim:
        return None
    try:
        return layout.primal_extents(shape)
    except ValueError:
        return None


def extents_of(t, layout: Optional[Layout]) -> Optional[dict]:
    """The full extent of each primal axis of a tensor of type ``t`` in ``layout`` (a shared
    dict: do not modify it); None when the shape does not fit the layout."""
    if not isinstance(t, TensorType) or layout is None:
        return None
    return _extents(t.shape, layout)


def _fits(layout: Layout, extents: Optional[dict]) -> bool:
    """Whether a tensor with these primal extents can be put in ``layout``: every blocked axis
    divides evenly, or has extent 1 (a broadcast axis, which stays 1 in both parts) and the
    extents are known numbers (the reshape that adds the 1 needs them)."""
    if extents is None:
        return False
    special = False
    for p, f in _factors(layout).items():
        e = extents.get(p, 1)
        if _divides(f, e):
            continue
        if e != 1:
            return False
        special = True
    return not special or all(isinstance(e, int) for e in extents.values())


def _splits_evenly(layout: Layout, extents: Optional[dict]) -> bool:
    """Whether a tensor with these primal extents can be put in ``layout`` with every blocked
    axis split into whole blocks. Stricter than :func:`_fits`: an axis of extent 1 does not
    pass a block larger than 1, since only a broadcast operand may stand for a whole block with
    one element (a tensor that is joined, split or convolved along the axis needs its full
    extent in blocks)."""
    if extents is None:
        return False
    return all(_divides(f, extents.get(p, 1)) for p, f in _factors(layout).items())


def _unsplit(layout: Layout, primals) -> Layout:
    return _join(ax for ax in layout.axes if ax.is_primal or ax.primal_name not in primals)


@lru_cache(maxsize=None)
def _op(name: str):
    from .registry import OpCaller, get_opdef
    return OpCaller(get_opdef(name))


def _layout_transform(expr, src: Layout, dst: Layout):
    """``layout_transform(expr, src, dst)``; a transform of a transform is one transform (or none)."""
    if (isinstance(expr, Call) and isinstance(expr.op, Op) and expr.op.name == "layout_transform"
            and expr.attrs["dst_layout"] == src.name):
        src = Layout(expr.attrs["src_layout"])
        expr = expr.args[0]
    if src == dst:
        return expr
    return _op("layout_transform")(expr, src_layout=src.name, dst_layout=dst.name)


def transform_layout(expr, src, dst, extents: dict):
    """``expr`` (in layout ``src``, its primal axes of the given full ``extents``) as a tensor in
    layout ``dst``.

    ``dst`` may have primal axes ``src`` lacks: they are added in front with extent 1
    (``expand_dims``) before the rearrangement, as for a ``(C, 1, 1)`` scale broadcast against
    ``NCHW16c`` data. A blocked axis of ``dst`` whose extent is 1 stays 1 in both parts (the
    tensor only broadcasts along it): the rearrangement leaves the axis whole and a ``reshape``
    adds the 1 of the block.

    >>> import relaybench as rb
    >>> s = rb.var("s", shape=(32, 1, 1))
    >>> print(transform_layout(s, "CHW", "NCHW16c", {"C": 32, "H": 1, "W": 1}).astext(show_types=False))
    free_var %s: Tensor[(32, 1, 1), float32];
    %0 = expand_dims(%s);
    layout_transform(%0, src_layout="NCHW", dst_layout="NCHW16c")
    """
    src, dst = Layout(src), Layout(dst)
    if src == dst:
        return expr
    extra = [p for p in src.primal if p not in dst]
    if extra:
        raise ValueError(f"cannot transform layout {src} into {dst}: {dst} has no axis {extra[0]}")
    missing = [p for p in dst.primal if p not in src]
    extents = dict(extents)
    if missing:
        expr = _op("expand_dims")(expr, axis=0, num_newaxis=len(missing))
        src = Layout("".join(missing) + src.name)
        extents.update({p: 1 for p in missing})
    special = []
    for p in dst.primal:
        f = dst.factor_of(p)
        if f is not None and not _divides(f, extents[p]):
            if extents[p] != 1:
                raise ValueError(f"cannot transform layout {src} into {dst}: axis {p} of extent "
                                 f"{extents[p]} does not split into blocks of {f}")
            special.append(p)
    target = _unsplit(dst, special) if special else dst
    expr = _layout_transform(expr, src, target)
    if special:
        shape = []
        for ax in dst.axes:
            p = ax.primal_name
            if p in special:
                shape.append(1)
            elif ax.is_primal:
                shape.append(extents[p] // (dst.factor_of(p) or 1))
            else:
                shape.append(ax.factor)
        expr = _op("reshape")(expr, newshape=tuple(shape))
    return expr


def _normalize_axis(axis: int, ndim: int) -> Optional[int]:
    if not -ndim <= axis < ndim:
        return None
    return axis + ndim if axis < 0 else axis


# =============================================================================================
# The rules


def elemwise_layout(attrs, layouts, old_layouts, types):
    """Elementwise unary operators: the output has the input's layout, whatever it is."""
    return LayoutDecision((layouts[0],), (layouts[0],))


def dropout_layout(attrs, layouts, old_layouts, types):
    """``nn.dropout``: the output and the mask both have the input's layout."""
    return LayoutDecision((layouts[0],), (layouts[0], layouts[0]))


def original_layout(attrs, layouts, old_layouts, types):
    """Operators that need their inputs as the original program had them (``nn.batch_flatten``
    reads the NCHW order of the elements); the output's layout is not known."""
    return LayoutDecision(tuple(old_layouts), (None,))


def broadcast_layout(attrs, layouts, old_layouts, types):
    """Broadcasting operators (``add``, ``multiply``, ``where``, comparisons...).

    The output takes the layout of an input of the highest rank whose layout is known, preferring
    one whose layout has changed; every input of that rank is put in it, and a broadcast operand of
    lower rank is put in the matching part of it (see :func:`transform_layout`). Scalars stay as
    they are. When the new layout does not fit some input (an extent a block does not divide), the
    call keeps the original layout.
    """
    n = len(types)
    if not all(isinstance(t, TensorType) for t in types):
        return None
    ranks = [t.ndim for t in types]
    top = max(ranks)
    known = [k for k in range(n) if ranks[k] == top and layouts[k] is not None]
    if not known:
        if any(layouts[k] is not None for k in range(n)):
            return None
        return LayoutDecision((None,) * n, (None,))
    changed = [k for k in known if layouts[k] != old_layouts[k]]
    ref = (changed or known)[0]
    new, old = layouts[ref], old_layouts[ref] or layouts[ref]
    wants = []
    for k in range(n):
        if ranks[k] == 0:
            wants.append(None)
            continue
        own_old = old if ranks[k] == top else _suffix(old, ranks[k])
        if own_old is None:
            return None
        if old_layouts[k] is not None and old_layouts[k] != own_old:
            return None
        want = new if ranks[k] == top else _aligned_part(new, own_old)
        if not _fits(want, extents_of(types[k], own_old)):
            if layouts == old_layouts or new == old:
                return None
            filled = [o if o is not None else (old if ranks[j] == top else None)
                      for j, o in enumerate(old_layouts)]
            return broadcast_layout(attrs, filled, filled, types)
        wants.append(want)
    return LayoutDecision(tuple(wants), (new,))


def bias_add_layout(attrs, layouts, old_layouts, types):
    """``nn.bias_add``: follows the data's layout and moves ``axis`` to where the channel axis
    went. When the new layout splits that axis into blocks, the call becomes an ``add`` with the
    bias transformed into the matching part of the layout (``C`` -> ``CHW16c``), which
    FoldConstant folds for a constant bias."""
    new, old = layouts[0], old_layouts[0] or layouts[0]
    if new is None:
        return LayoutDecision((None, None), (None,))
    axis = _normalize_axis(attrs["axis"], old.ndim)
    if axis is None:
        return None
    ax = old.axes[axis]
    if not ax.is_primal or old.factor_of(ax.name) is not None:
        # the bias runs along a block or a blocked axis: only the layout as it is
        return LayoutDecision((old, None), (old,)) if new == old else None
    bias_layout = _layout(ax.name)
    if new == old:
        return LayoutDecision((new, bias_layout), (new,))
    if ax.name not in new:
        return None
    f = new.factor_of(ax.name)
    if f is None:
        return LayoutDecision((new, bias_layout), (new,), attrs={"axis": new.index_of(ax.name)})
    part = _join(new.axes[new.index_of(ax.name):])
    if part is None or ax.name.lower() not in part or not _fits(part, extents_of(types[1], bias_layout)):
        return LayoutDecision((old, bias_layout), (old,))
    return LayoutDecision((new, part), (new,), build=_build_add)


def _build_add(args, attrs):
    return _op("add")(args[0], args[1])


def conv2d_layout(attrs, layouts, old_layouts, types):
    """Convolutions: the data, kernel and output layouts their attributes name, whatever the
    inputs come in (a pass changes the attributes through its hook)."""
    data, kernel = _layout(attrs["data_layout"]), _layout(attrs["kernel_layout"])
    out = _layout(attrs["out_layout"] or attrs["data_layout"])
    return LayoutDecision((data, kernel), (out,))


def layout_transform_layout(attrs, layouts, old_layouts, types):
    """``layout_transform``: its input in ``src_layout``, its output in ``dst_layout``."""
    return LayoutDecision((_layout(attrs["src_layout"]),), (_layout(attrs["dst_layout"]),))


def pool_layout(attrs, layouts, old_layouts, types):
    """Poolings (windowed, global, adaptive): follow the input's layout when it keeps H and W
    whole (``NCHW16c``, ``NHWC``), rewriting ``layout``; otherwise the ``layout`` attribute's."""
    own = _layout(attrs["layout"])
    out = _layout(attrs["out_layout"] or attrs["layout"])
    cur = layouts[0]
    # the call as it is reads its input in ``layout``; it adopts an input layout that changed
    if (out != own or cur is None or cur == old_layouts[0] or cur == own or not _same_axes(cur, own)
            or cur.factor_of("H") is not None or cur.factor_of("W") is not None):
        return LayoutDecision((own,), (out,))
    return LayoutDecision((cur,), (cur,), attrs={"layout": cur.name, "out_layout": ""})


def _reference(layouts, old_layouts, candidates):
    """The input whose layout the call adopts: the first whose layout changed, else the first known."""
    known = [k for k in candidates if layouts[k] is not None]
    changed = [k for k in known if layouts[k] != old_layouts[k]]
    return (changed or known or [None])[0]


def concatenate_layout(attrs, layouts, old_layouts, types):
    """``concatenate``: every field in one layout, the first changed one; ``axis`` follows its
    axis. Joining along a blocked axis joins the outer blocks, which is right when every field's
    extent along it is a multiple of the block; when some field's is not (a 1-channel tensor
    joined to a ``NCHW8c`` convolution output), every field keeps the original layout."""
    n = len(types)
    ref = _reference(layouts, old_layouts, range(n))
    if ref is None:
        return LayoutDecision((None,) * n, (None,))
    new, old = layouts[ref], old_layouts[ref] or layouts[ref]
    if any(o is not None and o != old for o in old_layouts):
        return None
    axis = _normalize_axis(attrs["axis"], old.ndim)
    if axis is None or not old.axes[axis].is_primal:
        return None if new != old else LayoutDecision((old,) * n, (old,))
    if new == old:
        return LayoutDecision((old,) * n, (old,))
    name = old.axes[axis].name
    if name not in new or not all(_splits_evenly(new, extents_of(t, old)) for t in types):
        return LayoutDecision((old,) * n, (old,))
    return LayoutDecision((new,) * n, (new,), attrs={"axis": new.index_of(name)})


def split_layout(attrs, layouts, old_layouts, types):
    """``split``: follows the input's layout; ``axis`` follows its axis. Along an axis split into
    blocks of ``f`` the pieces split the outer blocks, so each piece's extent (each index) must
    be a multiple of ``f`` and the indices are divided by it."""
    new, old = layouts[0], old_layouts[0] or layouts[0]
    sections = attrs["indices_or_sections"]
    count = sections if isinstance(sections, int) else len(sections) + 1
    if new is None:
        return LayoutDecision((None,), (None,) * count)
    keep = LayoutDecision((old,), (old,) * count)
    if new == old:
        return keep
    axis = _normalize_axis(attrs["axis"], old.ndim)
    if axis is None or not old.axes[axis].is_primal or old.factor_of(old.axes[axis].name):
        return keep
    name = old.axes[axis].name
    extents = extents_of(types[0], old)
    if name not in new or not _splits_evenly(new, extents):
        return keep
    f = new.factor_of(name) or 1
    if isinstance(sections, int):
        piece = extents[name] // sections if isinstance(extents[name], int) else None
        if f > 1 and (piece is None or piece % f):
            return keep
        new_sections = sections
    else:
        if any(i % f for i in sections):
            return keep
        new_sections = tuple(i // f for i in sections)
    return LayoutDecision((new,), (new,) * count,
                          attrs={"axis": new.index_of(name), "indices_or_sections": new_sections})


def _reduced(attrs, ndim: int) -> tuple:
    axis = attrs["axis"]
    if axis is None:
        return tuple(range(ndim))
    axes = sorted({a + ndim if a < 0 else a for a in axis})
    if attrs.get("exclude"):
        return tuple(i for i in range(ndim) if i not in axes)
    return tuple(axes)


def reduce_layout(attrs, layouts, old_layouts, types):
    """Reductions (``sum``, ``mean``, ``max``...): follow the input's layout; a reduced axis split
    into blocks reduces both its parts. The output's layout is the input's without the reduced
    axes (with them, of extent 1, under ``keepdims``, which a blocked reduced axis cannot have:
    the call then keeps the original layout). The axes are rewritten as a plain list of the new
    layout's positions (``exclude`` and negative axes resolved); a reduction over no axis at all
    (``exclude=True`` listing every axis) is the identity on each element and keeps that form."""
    new, old = layouts[0], old_layouts[0] or layouts[0]
    if new is None:
        return LayoutDecision((None,), (None,))
    axes = _reduced(attrs, old.ndim)
    reduced = {old.axes[i].primal_name for i in axes}
    closed = all((ax.primal_name in reduced) == (i in axes) for i, ax in enumerate(old.axes))

    def out_of(layout):
        if attrs["keepdims"]:
            if any(layout.factor_of(p) is not None for p in reduced):
                return None
            return layout
        return _join(ax for ax in layout.axes if ax.primal_name not in reduced)

    old_out = out_of(old) if closed else None
    keep = LayoutDecision((old,), (old_out,))
    if new == old or not closed:
        return keep
    if not _same_axes(new, old) or (attrs["keepdims"] and out_of(new) is None):
        return keep
    new_axes = tuple(i for i, ax in enumerate(new.axes) if ax.primal_name in reduced)
    if old_out is None and out_of(new) is not None:
        return keep
    return LayoutDecision((new,), (out_of(new),), attrs=_reduce_attrs(new_axes, new.ndim))


def _reduce_attrs(axes: tuple, ndim: int) -> dict:
    """The ``axis`` and ``exclude`` of a reduction over exactly ``axes`` of a rank-``ndim``
    tensor. An empty ``axis`` means *every* axis (Relay's convention), so a reduction over no
    axis (``exclude=True`` with every axis listed, in the original program) is written that
    way again rather than as an empty list."""
    if not axes:
        return {"axis": tuple(range(ndim)), "exclude": True}
    return {"axis": axes, "exclude": False}


def softmax_layout(attrs, layouts, old_layouts, types):
    """``nn.softmax``, ``nn.log_softmax``: follow the input's layout unless it splits ``axis``."""
    new, old = layouts[0], old_layouts[0] or layouts[0]
    if new is None:
        return LayoutDecision((None,), (None,))
    keep = LayoutDecision((old,), (old,))
    axis = _normalize_axis(attrs["axis"], old.ndim)
    if new == old or axis is None:
        return keep
    ax = old.axes[axis]
    if not ax.is_primal or old.factor_of(ax.name) or ax.name not in new or new.factor_of(ax.name):
        return keep
    return LayoutDecision((new,), (new,), attrs={"axis": new.index_of(ax.name)})


def pad_layout(attrs, layouts, old_layouts, types):
    """``nn.pad``: follows the input's layout, moving each axis's ``(before, after)``; an axis
    split into blocks can only be left unpadded."""
    new, old = layouts[0], old_layouts[0] or layouts[0]
    if new is None:
        return LayoutDecision((None, None), (None,))
    keep = LayoutDecision((old, None), (old,))
    if new == old or not _same_axes(new, old):
        return keep
    width = dict(zip((str(ax) for ax in old.axes), attrs["pad_width"]))
    for ax in old.axes:
        padded = width[str(ax)] != (0, 0)
        if padded and (not ax.is_primal or old.factor_of(ax.name) or new.factor_of(ax.name)):
            return keep
    new_width = tuple(width[ax.name] if ax.is_primal else (0, 0) for ax in new.axes)
    return LayoutDecision((new, None), (new,), attrs={"pad_width": new_width})


def batch_norm_layout(attrs, layouts, old_layouts, types):
    """``nn.batch_norm``: follows the data's layout and moves ``axis``, unless the new layout
    splits that axis into blocks; the statistics vectors have no layout."""
    new, old = layouts[0], old_layouts[0] or layouts[0]
    n = len(types)
    if new is None:
        return LayoutDecision((None,) * n, (None, None, None))
    keep = LayoutDecision((old,) + (None,) * (n - 1), (old, None, None))
    axis = _normalize_axis(attrs["axis"], old.ndim)
    if new == old or axis is None:
        return keep
    ax = old.axes[axis]
    if not ax.is_primal or old.factor_of(ax.name) or ax.name not in new or new.factor_of(ax.name):
        return keep
    return LayoutDecision((new,) + (None,) * (n - 1), (new, None, None),
                          attrs={"axis": new.index_of(ax.name)})
