"""The pass infrastructure: passes, sequences, the context that decides what runs, and instruments.

A pass is pure: an IRModule in, a new IRModule out, with every function typed again. Passes are
defined by decorating a function:

>>> import relaybench as rb
>>> from relaybench.passes.infra import function_pass, PassContext, Sequential
>>> @function_pass(opt_level=1)
... def DoubleOutputs(func, mod, ctx):
...     return rb.Function(func.params, rb.op.multiply(func.body, rb.const(2.0)), None,
...                        func.type_params, func.attrs)
>>> x = rb.var("x", shape=(2,))
>>> mod = rb.IRModule.from_expr(rb.Function([x], x))
>>> print(DoubleOutputs()(mod)["main"].astext(show_types=False))
fn (%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  multiply(%x, 2f)
}

A :class:`Sequential` runs the passes its :class:`PassContext` enables (``opt_level``,
``required_pass``, ``disabled_pass``); a pass left out is reported to the instruments as skipped,
never dropped silently:

>>> with PassContext(opt_level=0):
...     out = Sequential([DoubleOutputs()])(mod)
>>> out is mod
True

Pipelines can be written as strings of kebab-case names with options:
``parse_pipeline("fold-constant,fuse-ops{fuse_opt_level=2}")``.

>>> from relaybench.passes.infra import unregister_pass
>>> unregister_pass("DoubleOutputs")

Instruments (:mod:`relaybench.passes.instruments`) see every pass: ``enter_pass_ctx`` and
``exit_pass_ctx`` around the ``with`` block; for each pass ``should_run`` (a veto; passes in
``required_pass`` are not asked), then ``run_before_pass``, the pass, and ``run_after_pass`` with
the (typed) result, or ``run_failed_pass`` when the pass raised; ``run_skipped_pass`` for a pass
left out, with the reason. Hooks of several instruments run in the order the instruments were
given. With the knob ``RB_DEBUG`` at 3 or more, every context also prints the IR after each pass.
"""

from __future__ import annotations

import contextvars
import dataclasses
import difflib
import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence

from .._gc import gc_paused
from ..ir.analysis import ops_used
from ..ir.expr import Function
from ..ir.module import IRModule

__all__ = [
    "PassInfo", "Pass", "ModulePass", "FunctionPass", "Sequential", "PassContext", "PassInstrument",
    "module_pass", "function_pass", "register_pass", "unregister_pass", "get_pass", "list_passes",
    "pass_options", "passes_table", "parse_pipeline", "kebab_case", "typed",
]


def kebab_case(name: str) -> str:
    """A Relay pass name in kebab-case, for pipeline strings.

    A word starts at a capital after a lower-case letter, or at the last capital of a run
    followed by a lower-case letter; digits stay with the word before them.

    >>> [kebab_case(n) for n in ("FoldConstant", "ToANormalForm", "CombineParallelConv2D", "ToCPS")]
    ['fold-constant', 'to-a-normal-form', 'combine-parallel-conv2d', 'to-cps']
    """
    s = re.sub(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z0-9])(?=[A-Z][a-z])", "-", name)
    return s.lower()


@dataclass(frozen=True)
class PassInfo:
    """A pass's name (Relay's), its pipeline-string name, opt_level, required passes and doc.

    ``kind`` is ``"module"``, ``"function"`` or ``"sequential"`` (empty for other passes).
    """

    name: str
    opt_level: int = 0
    required: tuple = ()
    doc: str = ""
    kebab: str = ""
    options: tuple = ()  # ((name, value), ...) the options this instance was made with
    kind: str = ""

    def __post_init__(self):
        if not self.kebab:
            object.__setattr__(self, "kebab", kebab_case(self.name))

    @property
    def label(self) -> str:
        """The name with its options, as a pipeline string writes it: ``fuse-ops{fuse_opt_level=2}``."""
        if not self.options:
            return self.name
        return self.name + "{" + ", ".join(f"{k}={v}" for k, v in self.options) + "}"

    @property
    def is_sequential(self) -> bool:
        """Whether the pass only runs other passes (its result is the last of theirs)."""
        return self.kind == "sequential"

    def matches(self, names) -> bool:
        """Whether this pass is named (by its Relay or kebab-case name) in ``names``."""
        return self.name in names or self.kebab in names


# ---------------------------------------------------------------------------------------------
# The context


class PassInstrument:
    """Sees every pass run in a context. Override any of the hooks.

    ``run_after_pass`` receives the module the pass produced; ``run_failed_pass`` the module the
    pass was given and the exception it raised (the exception then propagates);
    ``run_skipped_pass`` is called for a pass the context (or an instrument's ``should_run``) left
    out, with the reason in words.
    """

    def enter_pass_ctx(self, ctx: "PassContext") -> None: ...
    def exit_pass_ctx(self, ctx: "PassContext") -> None: ...
    def should_run(self, mod: IRModule, info: PassInfo) -> bool: return True
    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None: ...
    def run_after_pass(self, mod: IRModule, info: PassInfo) -> None: ...
    def run_failed_pass(self, mod: IRModule, info: PassInfo, error: BaseException) -> None: ...
    def run_skipped_pass(self, mod: IRModule, info: PassInfo, reason: str) -> None: ...


_CURRENT: contextvars.ContextVar = contextvars.ContextVar("relaybench_pass_context", default=None)

#: the level of the knob RB_DEBUG from which every pass context prints the IR after each pass
DEBUG_PRINT_LEVEL = 3


class PassContext:
    """Decides which passes run and lets instruments watch them; use it as a context manager.

    ``opt_level``: passes whose opt_level is higher are skipped by a Sequential.
    ``required_pass`` / ``disabled_pass``: names (Relay's or kebab-case) always run / never run
    (disabled wins when a name is in both).
    ``config``: options read by passes (``{"relay.FuseOps.max_depth": 10}``); see :meth:`get_config`.
    ``instruments``: :class:`PassInstrument` objects.

    Contexts nest: :meth:`current` is the innermost one entered (a default ``opt_level=2``
    context when none is).

    >>> with PassContext(opt_level=3, disabled_pass=["fold-constant"]) as ctx:
    ...     PassContext.current() is ctx
    True
    >>> ctx.why_skipped(PassInfo("FoldConstant", opt_level=2))
    'disabled by the pass context'
    >>> ctx.why_skipped(PassInfo("AlterOpLayout", opt_level=3)) is None
    True
    >>> PassContext(opt_level=1).why_skipped(PassInfo("EliminateCommonSubexpr", opt_level=3))
    'opt_level 3 > context opt_level 1'
    """

    def __init__(self, opt_level: int = 2, required_pass: Iterable[str] = (),
                 disabled_pass: Iterable[str] = (), config: Optional[dict] = None,
                 instruments: Sequence[PassInstrument] = ()):
        if isinstance(required_pass, str) or isinstance(disabled_pass, str):
            raise TypeError("required_pass and disabled_pass are lists of pass names, not one string")
        self.opt_level = int(opt_level)
        self.required_pass = frozenset(_canonical(n) for n in required_pass)
        self.disabled_pass = frozenset(_canonical(n) for n in disabled_pass)
        self.config = dict(config or {})
        self.instruments = list(instruments)
        for inst in self.instruments:
            if not isinstance(inst, PassInstrument):
                raise TypeError(f"instruments must be PassInstrument objects, got {inst!r}")
        self._tokens: list = []
        self._depth = 0

    @staticmethod
    def current() -> "PassContext":
        """The innermost context entered (a default one, opt_level 2, if none is)."""
        ctx = _CURRENT.get()
        if ctx is None:
            ctx = PassContext()
            _CURRENT.set(ctx)
        return ctx

    def __enter__(self) -> "PassContext":
        self._tokens.append(_CURRENT.set(self))
        for inst in self.instruments:
            inst.enter_pass_ctx(self)
        return self

    def __exit__(self, *exc) -> bool:
        try:
            for inst in self.instruments:
                inst.exit_pass_ctx(self)
        finally:
            _CURRENT.reset(self._tokens.pop())
        return False

    def __repr__(self) -> str:
        parts = [f"opt_level={self.opt_level}"]
        if self.required_pass:
            parts.append(f"required_pass={sorted(self.required_pass)}")
        if self.disabled_pass:
            parts.append(f"disabled_pass={sorted(self.disabled_pass)}")
        if self.config:
            parts.append(f"config={self.config}")
        if self.instruments:
            parts.append(f"instruments=[{', '.join(type(i).__name__ for i in self.instruments)}]")
        return f"PassContext({', '.join(parts)})"

    @property
    def depth(self) -> int:
        """How many passes are running in this context right now (nested ones counted)."""
        return self._depth

    def get_config(self, key: str, default: Any = None) -> Any:
        """The value of a config option, e.g. ``ctx.get_config("relay.FuseOps.max_depth", 256)``."""
        return self.config.get(key, default)

    # ---- decisions -------------------------------------------------------------------------
    def why_skipped(self, info: PassInfo) -> Optional[str]:
        """None if ``info``'s pass is enabled here, else the reason in words."""
        if info.matches(self.disabled_pass):
            return "disabled by the pass context"
        if info.matches(self.required_pass):
            return None
        if info.opt_level > self.opt_level:
            return f"opt_level {info.opt_level} > context opt_level {self.opt_level}"
        return None

    def pass_enabled(self, info: PassInfo) -> bool:
        return self.why_skipped(info) is None

    def is_required(self, info: PassInfo) -> bool:
        """Whether the pass is named in ``required_pass`` (and not disabled)."""
        return info.matches(self.required_pass) and not info.matches(self.disabled_pass)

    # ---- running ---------------------------------------------------------------------------
    def active_instruments(self) -> list:
        """The instruments that see passes now: this context's, plus an IR printer when the knob
        ``RB_DEBUG`` is at least 3."""
        from .. import config
        if config.get("RB_DEBUG") >= DEBUG_PRINT_LEVEL:
            return self.instruments + [_debug_printer()]
        return self.instruments

    def skip(self, p: "Pass", mod: IRModule, reason: str) -> None:
        """Report ``p`` as skipped (with ``reason``) to the instruments."""
        for inst in self.active_instruments():
            inst.run_skipped_pass(mod, p.info, reason)

    def run_pass(self, p: "Pass", mod: IRModule) -> IRModule:
        """Run one pass under the instruments (the pass's own opt_level is not checked here).

        An instrument's ``should_run`` may veto the pass (then it is reported skipped), except
        for passes in ``required_pass``. An exception raised by the pass gets a note naming it.
        """
        if not isinstance(mod, IRModule):
            raise TypeError(f"{p.info.name} runs on an IRModule, not {type(mod).__name__}")
        instruments = self.active_instruments()
        if not self.is_required(p.info):
            for inst in instruments:
                if not inst.should_run(mod, p.info):
                    self.skip(p, mod, f"an instrument ({type(inst).__name__}) said not to run it")
                    return mod
        for inst in instruments:
            inst.run_before_pass(mod, p.info)
        self._depth += 1
        try:
            with gc_paused():
                out = p.transform(mod, self)
                if not isinstance(out, IRModule):
                    raise TypeError(f"pass {p.info.name} returned {type(out).__name__}, not an IRModule")
                out = _typed(out, mod, p)
        except BaseException as err:
            self._depth -= 1
            _note(err, p.info)
            for inst in instruments:
                inst.run_failed_pass(mod, p.info, err)
            raise
        self._depth -= 1
        for inst in instruments:
            inst.run_after_pass(out, p.info)
        return out


def _note(err: BaseException, info: PassInfo) -> None:
    """Add "in pass NAME" to an exception's notes (once per pass it crosses)."""
    if not isinstance(err, Exception):
        return
    note = f"while running pass {info.label}"
    notes = getattr(err, "__notes__", [])
    if note not in notes:
        err.add_note(note)


_DEBUG_PRINTER: list = []


def _debug_printer() -> PassInstrument:
    if not _DEBUG_PRINTER:
        from .instruments import PrintIR
        _DEBUG_PRINTER.append(PrintIR(after=True, show_skipped=True))
    return _DEBUG_PRINTER[0]


def _canonical(name: str) -> str:
    if not isinstance(name, str):
        raise TypeError(f"a pass is named by a str, not {name!r}")
    return name.strip()


def _typed(out: IRModule, before: IRModule, p: "Pass") -> IRModule:
    """Every pass's output is typed: re-run inference when a function of it is not typed."""
    if getattr(p, "keeps_types", False):
        return out
    if out is before:
        return out
    return typed(out)


# ---------------------------------------------------------------------------------------------
# Passes


class Pass:
    """Base of every pass. Calling it runs it in the current :class:`PassContext`."""

    info: PassInfo
    keeps_types = False

    def __call__(self, mod: IRModule) -> IRModule:
        return PassContext.current().run_pass(self, mod)

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        raise NotImplementedError(f"{type(self).__name__}.transform")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.info.label} opt_level={self.info.opt_level}>"


def _with_kind(info: PassInfo, kind: str) -> PassInfo:
    return info if info.kind else dataclasses.replace(info, kind=kind)


class ModulePass(Pass):
    """A pass given by ``fn(mod, ctx, **options) -> IRModule``."""

    def __init__(self, fn: Callable, info: PassInfo, options: Optional[dict] = None):
        self.fn, self.info, self.options = fn, _with_kind(info, "module"), dict(options or {})

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        return self.fn(mod, ctx, **self.options)


#: function attributes that make a FunctionPass leave a global function alone
SKIPPED_FUNCTION_ATTRS = ("Primitive", "Compiler", "Extern", "SkipOptimization")


def rewrite_each_function(mod: IRModule, rewrite: Callable, ops: Optional[Iterable[str]] = None) -> IRModule:
    """``mod`` typed, with ``rewrite(func) -> Function`` applied to each global function a
    FunctionPass would visit (not Primitive, external or ``SkipOptimization`` ones); the same
    module object when no function changed. For module passes that rewrite function by function
    but need the whole module typed first (AlterOpLayout, Legalize, FoldScaleAxis).

    ``ops``, where given, names the operators the rewrite acts on: a function that calls none of
    them is left alone without a walk (:func:`~relaybench.ir.analysis.ops_used`), and a module
    with no such function is returned as it is, without typing it."""
    if ops is not None:
        ops = frozenset(ops)
        if not any(ops_used(f) & ops for f in mod.functions.values()):
            return mod
    typed_mod = typed(mod)
    new, changed = {}, False
    for gv, func in typed_mod.functions.items():
        if any(func.attrs.get(a) for a in SKIPPED_FUNCTION_ATTRS) or (
                ops is not None and not ops_used(func) & ops):
            new[gv] = func
            continue
        out = rewrite(func)
        changed |= out is not func
        new[gv] = out
    return typed_mod.with_functions(new) if changed else mod


class FunctionPass(Pass):
    """A pass given by ``fn(func, mod, ctx, **options) -> Function``, applied to each global
    function that is not a Primitive (fused), external or ``SkipOptimization`` one. Returns the
    same module object when no function changed."""

    def __init__(self, fn: Callable, info: PassInfo, options: Optional[dict] = None):
        self.fn, self.info, self.options = fn, _with_kind(info, "function"), dict(options or {})

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        new = {}
        changed = False
        for gv, func in mod.functions.items():
            if any(func.attrs.get(a) for a in SKIPPED_FUNCTION_ATTRS):
                new[gv] = func
                continue
            out = self.fn(func, mod, ctx, **self.options)
            if not isinstance(out, Function):
                raise TypeError(f"function pass {self.info.name} returned {type(out).__name__} for "
                                f"@{gv.name_hint}, not a Function")
            changed |= out is not func
            new[gv] = out
        return mod.with_functions(new) if changed else mod


class Sequential(Pass):
    """Runs passes in order, each only if the context enables it (else it is reported skipped).

    A pass's ``required`` passes run before it when they have not already run in this sequence.
    Sequences nest; instruments see the sequence itself as a pass around its members.
    """

    keeps_types = True  # every member already typed its own result

    def __init__(self, passes: Sequence[Pass], opt_level: int = 0, name: str = "Sequential",
                 required: tuple = ()):
        self.passes = list(passes)
        for p in self.passes:
            if not isinstance(p, Pass):
                raise TypeError(f"Sequential takes passes, got {p!r}")
        self.info = PassInfo(name, opt_level, tuple(required), doc="a sequence of passes",
                             kebab=kebab_case(name), kind="sequential")

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        done: set = set()
        for p in self.passes:
            reason = ctx.why_skipped(p.info)
            if reason is not None:
                ctx.skip(p, mod, reason)
                continue
            for req in p.info.required:
                if req not in done:
                    mod = ctx.run_pass(get_pass(req)(), mod)
                    done.add(req)
            mod = ctx.run_pass(p, mod)
            done.add(p.info.name)
        return mod

    def __iter__(self):
        return iter(self.passes)

    def __len__(self) -> int:
        return len(self.passes)

    def __getitem__(self, index):
        return self.passes[index]

    def __repr__(self) -> str:
        return f"Sequential([{', '.join(p.info.label for p in self.passes)}])"


# ---------------------------------------------------------------------------------------------
# The registry and the decorators


@dataclass
class _Entry:
    name: str
    kebab: str
    opt_level: int
    required: tuple
    doc: str
    factory: Callable
    options: dict = field(default_factory=dict)  # option name -> (default, annotation)


_REGISTRY: dict = {}


def register_pass(name: str, factory: Callable, opt_level: int = 0, required: tuple = (),
                  doc: str = "", options: Optional[dict] = None) -> None:
    """Add a pass factory (``factory(**options) -> Pass``) under its Relay name."""
    entry = _Entry(name, kebab_case(name), opt_level, tuple(required), doc, factory, options or {})
    _REGISTRY[name] = entry


def unregister_pass(name: str) -> None:
    """Remove a pass from the registry (for passes defined on the fly, in a notebook or a test)."""
    if _REGISTRY.pop(name, None) is None:
        raise KeyError(f"no registered pass named {name!r}")


def _options_of(fn: Callable, skip: int) -> dict:
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())[skip:]
    out = {}
    for p in params:
        if p.kind not in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD):
            continue
        if p.default is p.empty:
            raise TypeError(f"pass option {p.name} of {fn.__name__} needs a default")
        out[p.name] = (p.default, p.annotation)
    return out


def _positional_options_of(fn: Callable, skip: int) -> tuple:
    """The options a factory also takes by position, in order: those the pass function declares
    before its ``*`` (Relay's passes take their first options positionally, as
    ``ConvertLayout({"nn.conv2d": ["NHWC", "default"]})`` or ``FuseOps(2)``)."""
    params = list(inspect.signature(fn).parameters.values())[skip:]
    return tuple(p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD)


def _bind_options(pname: str, options: dict, positional: tuple, args: tuple, kwargs: dict) -> dict:
    """The options given to the factory of pass ``pname``: ``args`` bound to the positional
    options in order, then ``kwargs``; an unknown, extra or twice-given option is a TypeError
    naming the pass."""
    if len(args) > len(positional):
        takes = (f"{len(positional)} positional option(s) ({', '.join(positional)})"
                 if positional else "its options by keyword only")
        raise TypeError(f"{pname} takes {takes}, got {len(args)} positional argument(s); "
                        f"options: {', '.join(options) or 'none'}")
    given = dict(zip(positional, args))
    for k in kwargs:
        if k in given:
            raise TypeError(f"{pname}: option {k!r} given both by position and by keyword")
    unknown = [k for k in kwargs if k not in options]
    if unknown:
        raise TypeError(f"{pname} has no option {unknown[0]!r} "
                        f"(options: {', '.join(options) or 'none'})")
    given.update(kwargs)
    return given


def _first_doc_line(fn) -> str:
    doc = inspect.getdoc(fn) or ""
    return doc.strip().split("\n\n")[0].replace("\n", " ")


def _decorator(kind: type, skip: int, opt_level: int, name: Optional[str], required: tuple):
    kind_name = "module" if kind is ModulePass else "function"

    def wrap(fn: Callable) -> Callable:
        pname = name or fn.__name__
        options = _options_of(fn, skip)
        positional = _positional_options_of(fn, skip)
        doc = _first_doc_line(fn)

        def factory(*args, **kwargs) -> Pass:
            kwargs = _bind_options(pname, options, positional, args, kwargs)
            values = {k: kwargs.get(k, default) for k, (default, _ann) in options.items()}
            shown = tuple((k, v) for k, v in kwargs.items())
            info = PassInfo(pname, opt_level, tuple(required), doc, options=shown, kind=kind_name)
            return kind(fn, info, values)

        factory.__name__ = factory.__qualname__ = pname
        factory.__doc__ = fn.__doc__
        factory.__wrapped__ = fn
        factory.__module__ = fn.__module__
        factory.info = PassInfo(pname, opt_level, tuple(required), doc, kind=kind_name)
        register_pass(pname, factory, opt_level, tuple(required), doc, options)
        return factory

    return wrap


def module_pass(opt_level: int = 0, name: Optional[str] = None, required: tuple = ()):
    """Make ``fn(mod, ctx, *, option=default...) -> IRModule`` a registered pass factory.

    The factory takes the options by keyword; options declared before the ``*``
    (``fn(mod, ctx, option=default, *, other=default)``) are also taken by position, in order."""
    return _decorator(ModulePass, 2, opt_level, name, required)


def function_pass(opt_level: int = 0, name: Optional[str] = None, required: tuple = ()):
    """Make ``fn(func, mod, ctx, *, option=default...) -> Function`` a registered pass factory
    (options before the ``*`` are also taken by position, as for :func:`module_pass`)."""
    return _decorator(FunctionPass, 3, opt_level, name, required)


def _load_all() -> None:
    from . import _load_all_passes
    _load_all_passes()


def _entry(name: str) -> _Entry:
    if not isinstance(name, str):
        raise TypeError(f"a pass is named by a str, not {name!r}")
    if name not in _REGISTRY:
        _load_all()
    entry = _REGISTRY.get(name)
    if entry is None:
        for e in _REGISTRY.values():
            if e.kebab == name:
                return e
        names = list(_REGISTRY) + [e.kebab for e in _REGISTRY.values()]
        close = difflib.get_close_matches(name, names, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"unknown pass {name!r}{hint}")
    return entry


def get_pass(name: str) -> Callable:
    """The factory of a pass, by Relay name or kebab-case name."""
    return _entry(name).factory


def list_passes() -> list:
    """Every registered pass: (name, kebab name, opt_level, one-line doc), sorted by name."""
    _load_all()
    return [(e.name, e.kebab, e.opt_level, e.doc) for e in sorted(_REGISTRY.values(), key=lambda e: e.name)]


def pass_options(name: str) -> dict:
    """The options of a pass: name -> default."""
    return {k: d for k, (d, _a) in _entry(name).options.items()}


def passes_table():
    """Every registered pass as a :class:`~relaybench.viz.table.Table`: name, kebab-case name,
    opt_level, options with their defaults, and the first line of its doc."""
    from .._table import Table
    _load_all()
    rows = []
    for e in sorted(_REGISTRY.values(), key=lambda e: e.name):
        opts = ", ".join(f"{k}={d!r}" for k, (d, _a) in e.options.items())
        rows.append({"name": e.name, "kebab": e.kebab, "opt_level": e.opt_level,
                     "options": opts, "doc": e.doc})
    return Table(rows)


# ---------------------------------------------------------------------------------------------
# Pipeline strings


class _PipelineText:
    """A cursor over a pipeline string; errors name the position."""

    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def error(self, message: str, pos: Optional[int] = None) -> ValueError:
        pos = self.pos if pos is None else pos
        return ValueError(f"pipeline {self.text!r}, position {pos}: {message}\n  {self.text}\n  {' ' * pos}^")

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        self.skip_space()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, ch: str, what: str) -> None:
        if self.peek() != ch:
            found = repr(self.text[self.pos]) if self.pos < len(self.text) else "the end"
            raise self.error(f"expected {ch!r} {what}, found {found}")
        self.pos += 1

    def name(self, what: str) -> str:
        self.skip_space()
        m = re.compile(r"[A-Za-z_][\w\-.]*").match(self.text, self.pos)
        if not m:
            found = repr(self.text[self.pos]) if self.pos < len(self.text) else "the end"
            raise self.error(f"expected {what}, found {found}")
        self.pos = m.end()
        return m.group(0)

    def raw_value(self) -> str:
        """The text of one option value: up to a ``,`` or ``}`` outside brackets and quotes."""
        self.skip_space()
        start = self.pos
        closing = {"(": ")", "[": "]", "{": "}"}
        stack: list = []
        text = self.text
        while self.pos < len(text):
            ch = text[self.pos]
            if ch in "\"'":
                end = text.find(ch, self.pos + 1)
                if end < 0:
                    raise self.error("unterminated string", self.pos)
                self.pos = end + 1
                continue
            if ch in closing:
                stack.append(closing[ch])
            elif ch in ")]}":
                if not stack:
                    if ch == "}":
                        break
                    raise self.error(f"unbalanced {ch!r}")
                if stack.pop() != ch:
                    raise self.error(f"unbalanced {ch!r}")
            elif ch == "," and not stack:
                break
            self.pos += 1
        if stack:
            raise self.error(f"missing {stack[-1]!r}")
        value = text[start:self.pos].strip()
        if not value:
            raise self.error("missing value", start)
        return value


_BARE_WORDS = {"true": True, "false": False, "none": None, "null": None}


def _literal(text: str):
    """Parse an option value: numbers, true/false/none, quoted or bare strings, [lists],
    (tuples) and {dicts} (items separated by ``,`` or ``;``)."""
    items, pos = _literal_at(text, 0)
    if text[pos:].strip():
        raise ValueError(f"unexpected {text[pos:].strip()!r}")
    return items


def _literal_at(text: str, pos: int):
    # recursion here follows the brackets of one option value, written by hand
    while pos < len(text) and text[pos].isspace():
        pos += 1
    if pos >= len(text):
        raise ValueError("missing value")
    ch = text[pos]
    if ch in "\"'":
        end = text.find(ch, pos + 1)
        if end < 0:
            raise ValueError("unterminated string")
        return text[pos + 1:end], end + 1
    if ch in "[({":
        close = {"[": "]", "(": ")", "{": "}"}[ch]
        pos += 1
        items: list = []
        while True:
            while pos < len(text) and text[pos].isspace():
                pos += 1
            if pos < len(text) and text[pos] == close:
                pos += 1
                break
            item, pos = _literal_at(text, pos)
            if ch == "{":
                while pos < len(text) and text[pos].isspace():
                    pos += 1
                if pos >= len(text) or text[pos] != ":":
                    raise ValueError("a dict item needs key: value")
                value, pos = _literal_at(text, pos + 1)
                item = (item, value)
            items.append(item)
            while pos < len(text) and text[pos].isspace():
                pos += 1
            if pos < len(text) and text[pos] in ",;":
                pos += 1
            elif pos >= len(text) or text[pos] != close:
                raise ValueError(f"missing {close!r}")
        if ch == "{":
            return dict(items), pos
        return (items if ch == "[" else tuple(items)), pos
    m = re.compile(r"[^,;:\[\](){}\s]+").match(text, pos)
    if not m:
        raise ValueError(f"unexpected {ch!r}")
    word = m.group(0)
    if word.lower() in _BARE_WORDS:
        return _BARE_WORDS[word.lower()], m.end()
    for conv in (int, float):
        try:
            return conv(word), m.end()
        except ValueError:
            pass
    return word, m.end()


def _option_value(text: str, default: Any, name: str, pass_name: str):
    """Convert the text of option ``name`` to the type of its default."""
    try:
        value = _literal(text)
    except ValueError as err:
        raise ValueError(f"{pass_name}: option {name}: cannot read {text!r}: {err}") from None
    kind = type(default)
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        if value in (0, 1) and not isinstance(value, float):
            return bool(value)
        if isinstance(value, str) and value.lower() in ("yes", "no", "on", "off"):
            return value.lower() in ("yes", "on")
    elif isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(default, float):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif isinstance(default, str):
        return value if isinstance(value, str) else text.strip()
    elif default is None:
        return value
    elif isinstance(default, (tuple, list)):
        if isinstance(value, (list, tuple)):
            return kind(value)
        if not isinstance(value, dict):
            return kind([value])
    elif isinstance(default, dict):
        if isinstance(value, dict):
            return value
    else:
        raise ValueError(f"{pass_name}: option {name} (a {kind.__name__}) cannot be set in a "
                         f"pipeline string")
    raise ValueError(f"{pass_name}: option {name} expects a {kind.__name__}, got {text.strip()!r}")


def parse_pipeline(text: str) -> Sequential:
    """``"simplify-inference,fold-constant,fuse-ops{fuse_opt_level=2}"`` -> a Sequential.

    Names are kebab-case (or Relay's); options go in braces as ``name=value`` separated by
    commas (option names may be written with ``-`` for ``_``). A value is read according to the
    option's default: ``true``/``false`` for a bool, a number, a string (quoted or bare), a list
    ``[a, b]`` or ``[a; b]``, a dict ``{nn.conv2d: [NHWC, default]}``. Errors name the position,
    the pass and the option.

    >>> p = parse_pipeline("infer-type, InferType")
    >>> [q.info.name for q in p]
    ['InferType', 'InferType']
    >>> parse_pipeline("infer-type{x=1}")
    Traceback (most recent call last):
    ...
    ValueError: pipeline 'infer-type{x=1}', position 11: InferType has no option 'x' (options: none)
      infer-type{x=1}
                 ^
    """
    if not isinstance(text, str):
        raise TypeError(f"a pipeline string is a str, not {type(text).__name__}")
    cur = _PipelineText(text)
    passes = []
    while cur.peek():
        if passes:
            cur.expect(",", "between passes")
        cur.skip_space()
        start = cur.pos
        name = cur.name("a pass name")
        try:
            entry = _entry(name)
        except KeyError as err:
            raise cur.error(err.args[0], start) from None
        kwargs = {}
        if cur.peek() == "{":
            cur.pos += 1
            while cur.peek() != "}":
                if kwargs:
                    cur.expect(",", f"between options of {name}")
                cur.skip_space()
                key_pos = cur.pos
                key = cur.name(f"an option name of {name}").replace("-", "_")
                if key not in entry.options:
                    raise cur.error(f"{entry.name} has no option {key!r} "
                                    f"(options: {', '.join(entry.options) or 'none'})", key_pos)
                if key in kwargs:
                    raise cur.error(f"option {key} of {entry.name} given twice", key_pos)
                cur.expect("=", f"after option {key} of {entry.name}")
                value_pos = cur.pos
                raw = cur.raw_value()
                try:
                    kwargs[key] = _option_value(raw, entry.options[key][0], key, entry.name)
                except ValueError as err:
                    raise cur.error(str(err), value_pos) from None
                if not cur.peek():
                    raise cur.error(f"missing '}}' after the options of {name}")
            cur.pos += 1
        passes.append(entry.factory(**kwargs))
        if cur.peek() and cur.peek() != ",":
            raise cur.error(f"expected ',' after {name}")
    return Sequential(passes, name="pipeline")


def is_typed(mod: IRModule) -> bool:
    """Whether inference has typed every function of ``mod`` (their nodes are immutable, and
    inference types a function's every node at once, so a typed function and body say it)."""
    return all(f.type_or_none is not None and f.body.type_or_none is not None
               for f in mod.functions.values())


def typed(mod: IRModule) -> IRModule:
    """``mod`` with every function typed (re-running inference only if some node lacks a type).

    Passes that read ``checked_type`` call this on their input.
    """
    if is_typed(mod):
        return mod
    from ..ir.type_infer import infer_module
    return infer_module(mod)

