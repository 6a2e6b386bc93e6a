"""Data layouts: which tensor axis holds which logical dimension.

A layout string names each axis of a tensor with a letter. Upper-case letters are *primal*
axes (``N`` batch, ``C`` channels, ``H``/``W`` spatial, ``O``/``I`` a kernel's output and input
channels); a lower-case letter preceded by a factor is a *sub-axis* that splits its primal axis
into blocks: ``NCHW16c`` is ``[N, C // 16, H, W, 16]``, and its element ``[n, co, h, w, ci]`` is
element ``[n, co * 16 + ci, h, w]`` of the ``NCHW`` tensor (the primal axis keeps the outer,
major part). Kernels use the same scheme: ``OIHW16i16o``.

Operators state their shape rules once, in a canonical layout (``NCHW`` for data, ``OIHW`` for
conv kernels), and convert shapes (and, in their numpy references, arrays) between the layout a
call uses and the canonical one:

>>> Layout("NCHW16c").convert_shape((1, 4, 7, 7, 16), "NCHW")
(1, 64, 7, 7)
>>> Layout("NCHW").convert_shape((1, 64, 7, 7), "NHWC")
(1, 7, 7, 64)
>>> Layout("NCHW").convert_shape((1, 64, 7, 7), "NCHW16c")
(1, 4, 7, 7, 16)
>>> Layout("OIHW16i16o").primal, Layout("OIHW16i16o").factor_of("I")
('OIHW', 16)
>>> BijectiveLayout("NHWC", "NCHW").backward_shape((1, 3, 224, 224))
(1, 224, 224, 3)

Shapes may hold symbolic dims; a blocked split of a symbolic extent is a floor division:

>>> from relaybench.ir.symbolic import SymVar
>>> Layout("NCHW").convert_shape((1, SymVar("c"), 7, 7), "NCHW8c")
(1, c // 8, 7, 7, 8)
"""

from __future__ import annotations

from typing import Iterable, Optional, Union

from .symbolic import ANY, as_dim, floordiv, mul

__all__ = ["Layout", "LayoutAxis", "BijectiveLayout"]

#: how many distinct layout strings are kept parsed before the table starts over
_INTERN_LIMIT = 4096


class LayoutAxis:
    """One axis of a layout: a letter, and for a sub-axis (lower case) its block factor."""

    __slots__ = ("name", "factor")

    def __init__(self, name: str, factor: Optional[int] = None):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "factor", factor)

    def __setattr__(self, key, value):
        raise AttributeError("LayoutAxis is immutable")

    @property
    def is_primal(self) -> bool:
        return self.name.isupper()

    @property
    def primal_name(self) -> str:
        return self.name.upper()

    def __eq__(self, other) -> bool:
        return isinstance(other, LayoutAxis) and (self.name, self.factor) == (other.name, other.factor)

    def __hash__(self) -> int:
        return hash((self.name, self.factor))

    def __str__(self) -> str:
        return self.name if self.factor is None else f"{self.factor}{self.name}"

    def __repr__(self) -> str:
        return f"LayoutAxis({str(self)!r})"


def _parse(name: str) -> tuple:
    axes = []
    digits = ""
    for ch in name:
        if ch.isdigit():
            digits += ch
            continue
        if not ("A" <= ch <= "Z" or "a" <= ch <= "z"):
            raise ValueError(f"invalid layout {name!r}: unexpected character {ch!r}")
        if ch.isupper():
            if digits:
                raise ValueError(f"invalid layout {name!r}: a primal axis ({ch}) cannot have a factor")
            axes.append(LayoutAxis(ch))
        else:
            if not digits or int(digits) <= 0:
                raise ValueError(f"invalid layout {name!r}: the sub-axis {ch} needs a positive factor "
                                 f"before it (like 16{ch})")
            axes.append(LayoutAxis(ch, int(digits)))
        digits = ""
    if digits:
        raise ValueError(f"invalid layout {name!r}: a factor must be followed by an axis letter")
    seen = set()
    for ax in axes:
        if ax.name in seen:
            raise ValueError(f"invalid layout {name!r}: axis {ax.name} appears twice")
        seen.add(ax.name)
    for ax in axes:
        if not ax.is_primal and ax.primal_name not in seen:
            raise ValueError(f"invalid layout {name!r}: sub-axis {ax.name} has no primal axis "
                             f"{ax.primal_name}")
    return tuple(axes)


#: (source layout, destination layout, shape) -> the converted shape, for shapes of ints
_CONVERTED: dict = {}
_CONVERTED_LIMIT = 8192


class Layout:
    """A parsed layout string (``"NCHW"``, ``"NHWC"``, ``"NCHW16c"``, ``"OIHW16i16o"``).

    ``Layout("")`` is the undefined layout (``is_undef``). Layouts compare by their string.
    A layout is immutable, so each string is parsed once: ``Layout("NCHW")`` called again gives
    back the same object (shape relations build layouts on every call they check).
    """

    __slots__ = ("name", "axes", "_index", "_primal")

    #: string -> its Layout, filled as layouts are first made (bounded by _INTERN_LIMIT)
    _interned: dict = {}

    def __new__(cls, name: Union[str, "Layout"]):
        if isinstance(name, Layout):
            if type(name) is cls:
                return name
            name = name.name
        if not isinstance(name, str):
            raise TypeError(f"a layout is a string like 'NCHW', not {name!r}")
        if name == "__undef__":
            name = ""
        known = cls._interned.get(name) if cls is Layout else None
        if known is not None:
            return known
        axes = _parse(name)
        self = object.__new__(cls)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "axes", axes)
        object.__setattr__(self, "_index", {ax.name: i for i, ax in enumerate(axes)})
        object.__setattr__(self, "_primal", "".join(ax.name for ax in axes if ax.is_primal))
        if cls is Layout:
            if len(cls._interned) >= _INTERN_LIMIT:
                cls._interned.clear()
            cls._interned[name] = self
        return self

    def __reduce__(self):
        return (type(self), (self.name,))

    def __setattr__(self, key, value):
        raise AttributeError("Layout is immutable")

    # ---- queries ------------------------------------------------------------------------
    @property
    def is_undef(self) -> bool:
        return not self.axes

    @property
    def ndim(self) -> int:
        return len(self.axes)

    def __len__(self) -> int:
        return len(self.axes)

    @property
    def primal(self) -> str:
        """The primal axes in order: ``"NCHW"`` for ``NCHW16c``."""
        return self._primal

    @property
    def is_blocked(self) -> bool:
        return any(not ax.is_primal for ax in self.axes)

    def __contains__(self, axis: str) -> bool:
        return axis in self._index

    def index_of(self, axis: str) -> int:
        """The position of axis ``axis`` (a letter); ValueError when the layout lacks it."""
        try:
            return self._index[axis]
        except KeyError:
            raise ValueError(f"layout {self.name or '(undefined)'} has no axis {axis}") from None

    def factor_of(self, axis: str) -> Optional[int]:
        """The block factor of ``axis``'s sub-axis (``16`` for ``C`` in ``NCHW16c``), or None."""
        i = self._index.get(axis.lower())
        return None if i is None else self.axes[i].factor

    def has_same_axes(self, other: Union[str, "Layout"]) -> bool:
        """Whether both layouts describe the same primal axes (so shapes convert between them)."""
        return sorted(self.primal) == sorted(Layout(other).primal)

    # ---- shapes ---------------------------------------------------------------------------
    def primal_extents(self, shape: Iterable) -> dict:
        """The full extent of each primal axis: outer times inner block for a blocked axis."""
        shape = tuple(as_dim(d) for d in shape)
        if len(shape) != len(self.axes):
            raise ValueError(f"layout {self.name} has {len(self.axes)} axes but the shape has "
                             f"{len(shape)}")
        out = {}
        for ax, dim in zip(self.axes, shape):
            if not ax.is_primal:
                if isinstance(dim, int) and dim != ax.factor:
                    raise ValueError(f"axis {ax.name} of layout {self.name} has extent {dim} "
                                     f"but its block factor is {ax.factor}")
                continue
            f = self.factor_of(ax.name)
            out[ax.name] = dim if f is None else mul(dim, f)
        return out

    def shape_from_extents(self, extents: dict) -> tuple:
        """A shape in this layout from full primal extents (splitting blocked axes)."""
        out = []
        for ax in self.axes:
            if not ax.is_primal:
                out.append(ax.factor)
                continue
            if ax.name not in extents:
                raise ValueError(f"no extent for axis {ax.name} of layout {self.name}")
            ext = extents[ax.name]
            f = self.factor_of(ax.name)
            if f is None:
                out.append(ext)
            elif isinstance(ext, int):
                if ext % f:
                    raise ValueError(f"axis {ax.name} of extent {ext} cannot be split into blocks of "
                                     f"{f} (layout {self.name})")
                out.append(ext // f)
            else:
                out.append(ANY if ext is ANY else floordiv(ext, f))
        return tuple(out)

    def convert_shape(self, shape: Iterable, dst: Union[str, "Layout"]) -> tuple:
        """``shape`` (in this layout) as the shape of the same tensor in layout ``dst``.

        Shapes of plain ints are converted once per (layout, layout, shape) and remembered:
        type inference converts the same few shapes again after every pass."""
        dst = Layout(dst)
        key = None
        if type(shape) is tuple and all(type(d) is int for d in shape):
            key = (self.name, dst.name, shape)
            found = _CONVERTED.get(key)
            if found is not None:
                return found
        if not self.has_same_axes(dst):
            raise ValueError(f"cannot convert between layouts {self.name} and {dst.name}: "
                             f"they have different axes")
        out = dst.shape_from_extents(self.primal_extents(shape))
        if key is not None:
            if len(_CONVERTED) >= _CONVERTED_LIMIT:
                _CONVERTED.clear()
            _CONVERTED[key] = out
        return out

    # ---- arrays ---------------------------------------------------------------------------
    def transform_array(self, array, dst: Union[str, "Layout"]):
        """A numpy array in this layout rearranged into layout ``dst`` (a copy or a view)."""
        import numpy as np
        dst = Layout(dst)
        if not self.has_same_axes(dst):
            raise ValueError(f"cannot convert between layouts {self.name} and {dst.name}: "
                             f"they have different axes")
        arr = np.asarray(array)
        ext = self.primal_extents(arr.shape)
        order = []
        for p in self.primal:
            order.append(self._index[p])
            if p.lower() in self._index:
                order.append(self._index[p.lower()])
        arr = arr.transpose(order).reshape([ext[p] for p in self.primal])
        split_shape, labels = [], []
        for p in self.primal:
            f = dst.factor_of(p)
            if f is None:
                split_shape.append(ext[p])
                labels.append(p)
            else:
                if ext[p] % f:
                    raise ValueError(f"axis {p} of extent {ext[p]} cannot be split into blocks of "
                                     f"{f} (layout {dst.name})")
                split_shape += [ext[p] // f, f]
                labels += [p, p.lower()]
        arr = arr.reshape(split_shape)
        return arr.transpose([labels.index(ax.name) for ax in dst.axes])

    # ---- identity -------------------------------------------------------------------------
    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            try:
                other = Layout(other)
            except ValueError:
                return False
        return isinstance(other, Layout) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("Layout", self.name))

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Layout({self.name!r})"


class BijectiveLayout:
    """A pair of layouts over the same primal axes, mapping shapes both ways.

    ``forward_shape`` maps a shape in ``src`` to ``dst``; ``backward_shape`` maps back.
    """

    __slots__ = ("src", "dst")

    def __init__(self, src: Union[str, Layout], dst: Union[str, Layout]):
        src, dst = Layout(src), Layout(dst)
        if src.is_undef or dst.is_undef or not src.has_same_axes(dst):
            raise ValueError(f"layouts {src.name or '(undefined)'} and {dst.name or '(undefined)'} "
                             f"are not convertible into each other")
        object.__setattr__(self, "src", src)
        object.__setattr__(self, "dst", dst)

    def __setattr__(self, key, value):
        raise AttributeError("BijectiveLayout is immutable")

    def forward_shape(self, shape: Iterable) -> tuple:
        return self.src.convert_shape(shape, self.dst)

    def backward_shape(self, shape: Iterable) -> tuple:
        return self.dst.convert_shape(shape, self.src)

    def forward_array(self, array):
        return self.src.transform_array(array, self.dst)

    def backward_array(self, array):
        return self.dst.transform_array(array, self.src)

    def __repr__(self) -> str:
        return f"BijectiveLayout({self.src.name!r}, {self.dst.name!r})"

