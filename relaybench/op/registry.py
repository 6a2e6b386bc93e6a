"""The operator registry: one :class:`OpDef` per operator holds everything about it.

An operator is defined in one place, in the file of its family (``op/nn.py`` for ``nn.*``), by
registering an OpDef; :func:`register` returns the builder function users call:

>>> from relaybench import op
>>> opdef = op.nn.conv2d.opdef
>>> opdef.name, opdef.inputs, opdef.pattern.name
('nn.conv2d', ('data', 'weight'), 'OUT_ELEMWISE_FUSABLE')

**Type relations.** ``type_rel(types, attrs)`` is a plain function of the current types of the
inputs (some may still be :class:`~relaybench.ir.IncompleteType`) and the call's attrs. It returns

* ``None`` when it needs to know more (the solver re-runs it when an input's type changes),
* the output type, or
* a list of ``len(inputs) + 1`` types, inputs then output, when it also determines inputs (conv2d
  infers its weight's shape from ``channels`` and ``kernel_size``).

It raises :class:`relaybench.errors.TypeInferenceError` with a reason in plain words when the types
cannot satisfy it ("data has 3 input channels but the weight expects 4"); inference adds the op, the
node and the program.
"""

from __future__ import annotations

import difflib
import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..ir.attrs import Attrs, freeze_value

__all__ = ["OpPattern", "OpDef", "OpCaller", "register", "get_opdef", "lookup_opdef", "list_ops"]


class OpPattern(enum.IntEnum):
    """Fusion pattern kinds, ordered as in Relay: a lower kind fuses more freely."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    COMM_REDUCE = 3
    OUT_ELEMWISE_FUSABLE = 4
    TUPLE = 7
    OPAQUE = 8


@dataclass
class OpDef:
    """Everything about one operator.

    ``inputs`` names the arguments (``variadic`` ops take any number); ``attrs`` maps each
    attribute to its default; ``normalize(dict) -> dict`` checks and canonicalizes given attrs
    (``padding=(1, 1)`` becomes ``(1, 1, 1, 1)``); ``reference(*arrays, attrs)`` is the numpy
    semantics; ``compute``, ``layout`` and ``quantize`` are the kernel, layout and quantization
    rules filled in by the layers that use them.
    """

    name: str
    inputs: tuple
    type_rel: Callable
    pattern: OpPattern = OpPattern.OPAQUE
    attrs: dict = field(default_factory=dict)
    normalize: Optional[Callable[[dict], dict]] = None
    reference: Optional[Callable] = None
    compute: Optional[Callable] = None
    layout: Optional[Callable] = None
    quantize: Optional[Callable] = None
    variadic: bool = False
    doc: str = ""
    support_level: int = 1

    @property
    def num_inputs(self) -> int:
        return -1 if self.variadic else len(self.inputs)

    def make_attrs(self, given) -> Attrs:
        """Complete ``given`` (a dict or Attrs) with defaults, check names, normalize.

        Raises ValueError naming the op and the attribute when an attribute is unknown or bad.
        """
        if isinstance(given, Attrs) and given._normalized_for == self.name:
            return given
        given = dict(given or {})
        unknown = [k for k in given if k not in self.attrs]
        if unknown:
            known = ", ".join(self.attrs) or "none"
            close = difflib.get_close_matches(unknown[0], list(self.attrs), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ValueError(f"{self.name}: unknown attribute {unknown[0]!r} (it takes: {known}){hint}")
        values = dict(self.attrs)
        values.update({k: freeze_value(v) for k, v in given.items()})
        if self.normalize is not None:
            try:
                values = self.normalize(values)
            except (TypeError, ValueError) as err:
                raise ValueError(f"{self.name}: {err}") from None
        out = Attrs(values)
        object.__setattr__(out, "_normalized_for", self.name)
        return out

    def non_default_attrs(self, attrs: Attrs) -> dict:
        """The attributes that differ from the defaults (what the text format prints)."""
        defaults = self.make_attrs({})
        return {k: v for k, v in attrs.items() if k not in defaults or defaults[k] != v}


_REGISTRY: dict = {}


class OpCaller:
    """The builder function of an operator: ``op.nn.conv2d(x, w, padding=(1, 1))`` makes a Call."""

    def __init__(self, opdef: OpDef):
        self.opdef = opdef
        self.__name__ = opdef.name.rsplit(".", 1)[-1]
        self.__qualname__ = self.__name__
        sig = ", ".join(opdef.inputs) + (", ..." if opdef.variadic else "")
        attrs = ", ".join(f"{k}={v!r}" for k, v in opdef.attrs.items())
        self.__doc__ = (f"{opdef.name}({sig}{', ' if attrs else ''}{attrs})\n\n{opdef.doc}").strip()

    def __call__(self, *args, **kwargs):
        from ..ir.builder import as_expr
        from ..ir.expr import Call, Op
        d = self.opdef
        args = list(args)
        if not d.variadic:
            for name in d.inputs[len(args):]:
                if name in kwargs:
                    args.append(kwargs.pop(name))
            if len(args) != len(d.inputs):
                raise TypeError(f"{d.name} takes {len(d.inputs)} inputs ({', '.join(d.inputs)}), "
                                f"got {len(args)}")
        return Call(Op.get(d.name), [as_expr(a) for a in args], d.make_attrs(kwargs))

    def __repr__(self) -> str:
        return f"<op {self.opdef.name}>"


def register(opdef: OpDef) -> OpCaller:
    """Add an operator; returns its builder function."""
    if opdef.name in _REGISTRY:
        raise ValueError(f"operator {opdef.name} is already registered")
    _REGISTRY[opdef.name] = opdef
    return OpCaller(opdef)


def _ensure_loaded() -> None:
    # the op families register themselves on import
    import relaybench.op  # noqa: F401


def lookup_opdef(name: str) -> Optional[OpDef]:
    _ensure_loaded()
    return _REGISTRY.get(name)


def get_opdef(name: str) -> OpDef:
    """The OpDef of ``name``; KeyError suggesting close names when there is none."""
    d = lookup_opdef(name)
    if d is None:
        close = difflib.get_close_matches(name, list(_REGISTRY), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"unknown operator {name!r}{hint}")
    return d


def list_ops() -> list:
    """Every registered operator's name, sorted."""
    _ensure_loaded()
    return sorted(_REGISTRY)


def table(names=None):
    """Every operator (or ``names``) with its inputs, pattern kind and attributes, as a Table."""
    from ..viz.table import Table
    _ensure_loaded()
    rows = []
    for name in names or sorted(_REGISTRY):
        d = _REGISTRY[name]
        rows.append({"op": name, "inputs": ", ".join(d.inputs) + (", ..." if d.variadic else ""),
                     "pattern": d.pattern.name, "attrs": ", ".join(d.attrs)})
    return Table(rows)
