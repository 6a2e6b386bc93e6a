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

**The attribute registry.** Besides its OpDef, an operator has a table of attributes keyed by
Relay's names, which users and targets extend (Relay's ``tvm.ir.register_op_attr`` and
``Op.get_attr``): ``TOpPattern`` (the fusion pattern kind), ``FTVMCompute`` (the kernel),
``FInferCorrectLayout`` (the layout rule), ``FTVMAlterOpLayout``, ``FTVMConvertOpLayout``,
``FTVMLegalize``, ``FShapeFunc``, or any other key a pass chooses to read.
:func:`get_op_attr` answers with the registration of the highest *level*:

* the OpDef's slots (``pattern``, ``compute``, ``layout``) are the level-0 registrations of
  ``TOpPattern``, ``FTVMCompute`` and ``FInferCorrectLayout``, read through the same table;
* a target registers its own policies for its kind (``target="llvm"``; the x86 layout policy
  of ``nn.conv2d`` is ``FTVMAlterOpLayout`` at level 0 for ``llvm``), also at level 0, the
  library's own level;
* a user registers at level 10 by default (:func:`register_op_attr` and the helpers
  :func:`register_pattern`, :func:`register_compute`, :func:`register_alter_op_layout`,
  :func:`register_convert_op_layout`, :func:`register_legalize`, :func:`register_shape_func`).

A registration at a higher level overrides a lower one; registering the same key of the same op
for the same target at the same level twice is an error. A registration made for one target
kind applies only when that target is asked for (``get_op_attr(..., target="llvm")``) and, at an
equal level, wins over one made for every target; ``target=None`` asks for the registrations
made for every target.

>>> get_op_attr("nn.relu", "TOpPattern")
<OpPattern.ELEMWISE: 0>
>>> with attr_scope():
...     _ = register_pattern("nn.relu", OpPattern.OPAQUE, level=11)
...     get_op_attr("nn.relu", "TOpPattern")
<OpPattern.OPAQUE: 8>
>>> get_op_attr("nn.relu", "TOpPattern")
<OpPattern.ELEMWISE: 0>
>>> with attr_scope():
...     _ = register_pattern("nn.relu", OpPattern.OPAQUE)
...     register_pattern("nn.relu", OpPattern.INJECTIVE)
Traceback (most recent call last):
...
ValueError: nn.relu: TOpPattern is already registered at level 10 (for every target); register at a higher level to override it

**Scopes.** Every registration above level 0 made inside ``with attr_scope():`` is undone when the
scope exits, and so is every operator registered inside it (:func:`register_op`), with all its
attributes: a test or a notebook registers its own without leaking them into what runs next.
``OpAttrContext(op, key, value)`` is Relay's shorthand: inside it, ``value`` overrides every other
registration of that key. Level-0 registrations are the library's and are never undone, so a
target's module imported for the first time inside a scope keeps its policies. The registry is
one per process; scopes nest and must exit in the order they were entered.

>>> with OpAttrContext("nn.relu", "FTVMLegalize", lambda attrs, inputs, types: None):
...     callable(get_op_attr("nn.relu", "FTVMLegalize"))
True
>>> get_op_attr("nn.relu", "FTVMLegalize") is None
True

**User-defined operators.** :func:`register_op` adds an operator from Python (its relation,
numpy reference, compute and pattern kind); the text parser, the printer, type inference, the
interpreter, FuseOps and ``rb.build`` then treat it like a built-in one:

>>> import numpy as np, relaybench as rb
>>> with attr_scope():
...     double = register_op("my.double", ("data",), lambda types, attrs: types[0],
...                          pattern=OpPattern.ELEMWISE, reference=lambda x, attrs: 2 * x)
...     mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(2), float32]) { my.double(%x) }''')
...     rb.create_executor("interpreter", mod=mod).evaluate()(np.array([1.0, 2.0], "float32"))
array([2., 4.], dtype=float32)
>>> "my.double" in list_ops()
False
"""

from __future__ import annotations

import difflib
import enum
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..ir.attrs import Attrs, freeze_value

__all__ = ["OpPattern", "OpDef", "OpCaller", "register", "register_op", "get_opdef", "lookup_opdef",
           "list_ops", "table", "register_op_attr", "get_op_attr", "op_attr_registrations",
           "has_user_registrations",
           "attr_scope", "OpAttrContext", "register_pattern", "register_compute",
           "register_infer_correct_layout", "register_alter_op_layout", "register_convert_op_layout",
           "register_legalize", "register_shape_func"]


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


_OP_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def register(opdef: OpDef) -> OpCaller:
    """Add an operator; returns its builder function.

    The operator families (``op/nn.py``...) register theirs on import; a user's operator
    registered inside :func:`attr_scope` is removed when the scope exits (see :func:`register_op`).
    Raises ValueError for a name already taken or one the text format cannot write.
    """
    if not isinstance(opdef, OpDef):
        raise TypeError(f"register takes an OpDef, not {type(opdef).__name__}")
    if not isinstance(opdef.name, str) or not _OP_NAME.match(opdef.name):
        raise ValueError(f"operator name {opdef.name!r} is not a dotted name (such as my.softplus)")
    if opdef.name in _REGISTRY:
        raise ValueError(f"operator {opdef.name} is already registered")
    if not callable(opdef.type_rel):
        raise TypeError(f"{opdef.name}: the type relation must be a function, not {opdef.type_rel!r}")
    opdef.pattern = _as_pattern(opdef.name, opdef.pattern)
    _REGISTRY[opdef.name] = opdef
    if _SCOPES:
        _SCOPES[-1].append(lambda name=opdef.name: _remove_op(name))
    return OpCaller(opdef)


def register_op(name: str, inputs, type_rel: Callable, *, pattern=OpPattern.OPAQUE,
                attrs: Optional[dict] = None, reference: Optional[Callable] = None,
                compute: Optional[Callable] = None, layout: Optional[Callable] = None,
                normalize: Optional[Callable] = None, variadic: bool = False,
                doc: str = "") -> OpCaller:
    """Add a user-defined operator (Relay's ``register_op`` with its attributes in one call).

    ``inputs`` names the arguments; ``type_rel(types, attrs)`` is the type relation (see the
    module); ``attrs`` maps each attribute to its default; ``reference(*arrays, attrs)`` is the
    numpy semantics the interpreter runs; ``compute(inputs, attrs, out_type)`` the tensor
    expression a compiled kernel runs (:mod:`relaybench.op._compute`); ``pattern`` its fusion
    kind; ``layout`` its layout rule (:mod:`relaybench.op._layout`). Inside :func:`attr_scope`
    the operator and its attributes are removed when the scope exits. Returns the builder.
    """
    if isinstance(inputs, str):
        inputs = (inputs,)
    return register(OpDef(name, tuple(inputs), type_rel, pattern, attrs=dict(attrs or {}),
                          normalize=normalize, reference=reference, compute=compute, layout=layout,
                          variadic=variadic, doc=doc))


def _remove_op(name: str) -> None:
    """Forget an operator and every attribute registered for it."""
    from ..ir.expr import Op
    _REGISTRY.pop(name, None)
    for key in [k for k in _ATTRS if k[0] == name]:
        del _ATTRS[key]
    Op._table.pop(name, None)


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


# =============================================================================================
# The attribute registry

#: attribute key -> the OpDef slot that holds its level-0 value
BUILTIN_KEYS = {"TOpPattern": "pattern", "FTVMCompute": "compute", "FInferCorrectLayout": "layout",
                "FTypeRelation": "type_rel"}

DEFAULT_LEVEL = 10
"""The level of a user's registration when none is given (Relay's)."""


@dataclass(frozen=True)
class _Registration:
    op: str
    key: str
    value: Any
    level: int
    target: Optional[str]


# (op name, key) -> registrations, best first: higher level, then a target's before every target's
_ATTRS: dict = {}
# the undo journals of the open scopes, innermost last
_SCOPES: list = []


def _as_pattern(op_name: str, value) -> OpPattern:
    try:
        return OpPattern(int(value))
    except (TypeError, ValueError):
        kinds = ", ".join(p.name for p in OpPattern)
        raise ValueError(f"{op_name}: {value!r} is not a pattern kind ({kinds})") from None


def _op_name(op) -> str:
    name = getattr(op, "name", op)
    if not isinstance(name, str):
        raise TypeError(f"an operator is named by a string, not {op!r}")
    return name


def _target_kind(target) -> Optional[str]:
    """The kind of a target given as None, a kind (``"llvm"``), a target string
    (``"llvm -mcpu=native"``) or a Target."""
    if target is None:
        return None
    kind = getattr(target, "kind", target)
    if not isinstance(kind, str) or not kind.strip():
        raise TypeError(f"a target is a kind such as 'llvm', not {target!r}")
    return kind.split()[0]


def _where(target: Optional[str]) -> str:
    return "for every target" if target is None else f"for target {target}"


def register_op_attr(op_name: str, key: str, value: Any = None, level: int = DEFAULT_LEVEL,
                     target=None):
    """Register ``value`` as the attribute ``key`` of the operator ``op_name`` (Relay's
    ``tvm.ir.register_op_attr``); without a value, a decorator registering the function it
    decorates.

    ``level``: a registration at a higher level overrides a lower one; level 0 is the library's
    own (the OpDef's slots, the targets' policies) and is never undone by a scope. ``target``:
    a target kind (``"llvm"``, ``"opencl"``) the registration is made for, or None for every
    target. Raises KeyError for an unknown operator and ValueError when the key is already
    registered for that op, target and level.
    """
    if value is None:
        def decorate(fn):
            register_op_attr(op_name, key, fn, level, target)
            return fn
        return decorate
    name = _op_name(op_name)
    opdef = get_opdef(name)
    if not isinstance(key, str) or not key:
        raise TypeError(f"{name}: an attribute key is a non-empty string, not {key!r}")
    if isinstance(level, bool) or not isinstance(level, int) or level < 0:
        raise ValueError(f"{name}: the level of {key} must be an int >= 0, got {level!r}")
    kind = _target_kind(target)
    if key == "TOpPattern":
        value = _as_pattern(name, value)
    entries = _ATTRS.setdefault((name, key), [])
    builtin = (level == 0 and kind is None and key in BUILTIN_KEYS
               and getattr(opdef, BUILTIN_KEYS[key]) is not None)
    if builtin or any(e.level == level and e.target == kind for e in entries):
        raise ValueError(f"{name}: {key} is already registered at level {level} ({_where(kind)}); "
                         f"register at a higher level to override it")
    reg = _Registration(name, key, value, level, kind)
    entries.append(reg)
    entries.sort(key=lambda e: (-e.level, e.target is None))
    if level > 0 and _SCOPES:
        _SCOPES[-1].append(lambda: _unregister(reg))
    return value


def _unregister(reg: _Registration) -> None:
    entries = _ATTRS.get((reg.op, reg.key))
    if entries and reg in entries:
        entries.remove(reg)
        if not entries:
            del _ATTRS[(reg.op, reg.key)]


def has_user_registrations(keys=("FTVMCompute", "TOpPattern")) -> bool:
    """Whether any operator has a registration above level 0 (a user's) of one of ``keys``:
    what a kernel's lowering reads, so the lowering cache steps aside while one exists."""
    return any(e.level > 0 for (_, key), entries in _ATTRS.items() if key in keys
               for e in entries)


def get_op_attr(op_name, key: str, target=None, default: Any = None) -> Any:
    """The attribute ``key`` of an operator (a name or an Op) registered at the highest level,
    for ``target`` (a kind, a target string or a Target: its registrations and those for every
    target; None: only those for every target); ``default`` when there is none (Relay's
    ``Op.get(name).get_attr(key)``)."""
    name = getattr(op_name, "name", op_name)
    entries = _ATTRS.get((name, key))
    if entries:
        kind = _target_kind(target)
        for e in entries:
            if e.target is None or e.target == kind:
                return e.value
    slot = BUILTIN_KEYS.get(key)
    if slot is not None:
        opdef = _REGISTRY.get(name)
        if opdef is None:
            opdef = lookup_opdef(name)
        if opdef is not None:
            value = getattr(opdef, slot)
            if value is not None:
                return value
    return default


def op_attr_registrations(op_name=None) -> list:
    """The registrations in the table (the OpDef's slots not included), of one operator or of
    all: ``[(op, key, level, target)]``, best first for each key."""
    name = None if op_name is None else _op_name(op_name)
    out = []
    for (op, key), entries in sorted(_ATTRS.items()):
        if name is None or op == name:
            out.extend((e.op, e.key, e.level, e.target) for e in entries)
    return out


class attr_scope:
    """``with attr_scope(): ...``: every registration above level 0 made inside, and every operator
    registered inside, is undone when the block exits (normally or by an exception)."""

    def __init__(self):
        self._journal: Optional[list] = None

    def __enter__(self) -> "attr_scope":
        _ensure_loaded()            # the built-in operators are never part of a scope
        if self._journal is not None:
            raise RuntimeError("an attr_scope cannot be entered twice")
        self._journal = []
        _SCOPES.append(self._journal)
        return self

    def __exit__(self, *exc) -> bool:
        journal, self._journal = self._journal, None
        if _SCOPES and _SCOPES[-1] is journal:
            _SCOPES.pop()
        else:                       # exited out of order: still undo what it holds
            _SCOPES[:] = [j for j in _SCOPES if j is not journal]
        for undo in reversed(journal):
            undo()
        return False


class OpAttrContext(attr_scope):
    """Relay's ``OpAttrContext(op, key, value)``: inside the block, ``value`` is the operator's
    attribute ``key`` for every target, above every other registration; on exit the previous
    ones apply again."""

    def __init__(self, op_name, key: str, value: Any, target=None):
        super().__init__()
        self.op_name, self.key, self.value, self.target = _op_name(op_name), key, value, target

    def __enter__(self) -> "OpAttrContext":
        super().__enter__()
        try:
            top = max([e.level for e in _ATTRS.get((self.op_name, self.key), ())], default=0)
            register_op_attr(self.op_name, self.key, self.value, max(top + 1, DEFAULT_LEVEL), self.target)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self


# ---- the helpers, named as Relay's ------------------------------------------------------------

def register_pattern(op_name: str, pattern, level: int = DEFAULT_LEVEL):
    """Register the fusion pattern kind (``TOpPattern``) of an operator; FuseOps and the
    lowering read it."""
    return register_op_attr(op_name, "TOpPattern", _as_pattern(_op_name(op_name), pattern), level)


def register_compute(op_name: str, compute: Optional[Callable] = None, level: int = DEFAULT_LEVEL,
                     target=None):
    """Register the compute (``FTVMCompute``): ``compute(inputs, attrs, out_type) -> te.Tensor``
    (a list for a tuple-valued op); above level 0 it replaces the op's own compute and the
    target strategy's choice. Without ``compute``, a decorator."""
    return register_op_attr(op_name, "FTVMCompute", compute, level, target)


def register_infer_correct_layout(op_name: str, rule: Optional[Callable] = None,
                                  level: int = DEFAULT_LEVEL):
    """Register the layout rule (``FInferCorrectLayout``, see :mod:`relaybench.op._layout`)."""
    return register_op_attr(op_name, "FInferCorrectLayout", rule, level)


def register_alter_op_layout(op_name: str, alter_layout: Optional[Callable] = None,
                             level: int = DEFAULT_LEVEL, target=None):
    """Register ``FTVMAlterOpLayout``: ``fn(attrs, inputs, tinfos, out_type)`` returning None
    (keep the call), a dict of attributes to change, or a new call (see
    :mod:`relaybench.passes.alter_op_layout`). Without the function, a decorator."""
    return register_op_attr(op_name, "FTVMAlterOpLayout", alter_layout, level, target)


def register_convert_op_layout(op_name: str, convert_layout: Optional[Callable] = None,
                               level: int = DEFAULT_LEVEL):
    """Register ``FTVMConvertOpLayout``: ``fn(attrs, inputs, tinfos, desired_layouts)`` returning
    None, a dict of attributes to change, or a new call (see
    :mod:`relaybench.passes.convert_layout`). Without the function, a decorator."""
    return register_op_attr(op_name, "FTVMConvertOpLayout", convert_layout, level)


def register_legalize(op_name: str, legal_op: Optional[Callable] = None, level: int = DEFAULT_LEVEL,
                      target=None):
    """Register ``FTVMLegalize``: ``fn(attrs, inputs, types) -> Expr | None`` (``types``: the
    inputs' types, then the output's), see :mod:`relaybench.passes.legalize`. Without the
    function, a decorator."""
    return register_op_attr(op_name, "FTVMLegalize", legal_op, level, target)


def register_shape_func(op_name: str, data_dependent: bool, shape_func: Optional[Callable] = None,
                        level: int = DEFAULT_LEVEL):
    """Register the shape function (``FShapeFunc``) of an operator and whether it reads its
    inputs' values, not only their shapes (``TShapeDataDependent``). Without the function, a
    decorator."""
    if shape_func is None:
        def decorate(fn):
            register_shape_func(op_name, data_dependent, fn, level)
            return fn
        return decorate
    register_op_attr(op_name, "TShapeDataDependent", bool(data_dependent), level)
    return register_op_attr(op_name, "FShapeFunc", shape_func, level)


#: keys every operator carries at level 0 (:mod:`relaybench.op.shape_funcs`): the table leaves
#: those registrations out, as it leaves out the OpDef's slots, and shows a user's above them
_EVERY_OP_KEYS = frozenset({"FShapeFunc", "TShapeDataDependent"})


def _registered_text(name: str) -> str:
    parts = []
    for (op, key), entries in sorted(_ATTRS.items()):
        if op == name:
            parts.extend(f"{key}[{e.target + ', ' if e.target else ''}level {e.level}]" for e in entries
                         if not (key in _EVERY_OP_KEYS and e.level == 0))
    return ", ".join(parts)


def table(names=None):
    """Every operator (or ``names``) with its inputs, pattern kind, attributes and the attributes
    registered beyond its OpDef (``FTVMAlterOpLayout[llvm, level 0]``), as a Table. The pattern
    shown is the one FuseOps uses (the registration of the highest level).

    Relay's operators not registered yet: :func:`relaybench.op.missing` (a Table with the reason
    for each)."""
    from .._table import Table
    _ensure_loaded()
    rows = []
    for name in names or sorted(_REGISTRY):
        d = get_opdef(name)
        rows.append({"op": name, "inputs": ", ".join(d.inputs) + (", ..." if d.variadic else ""),
                     "pattern": get_op_attr(name, "TOpPattern").name, "attrs": ", ".join(d.attrs),
                     "registered": _registered_text(name)})
    return Table(rows)
