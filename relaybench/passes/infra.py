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
fn (%x: Tensor[(2), float32]) {
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
"""

from __future__ import annotations

import contextvars
import difflib
import inspect
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence

from ..ir.expr import Function
from ..ir.module import IRModule

__all__ = [
    "PassInfo", "Pass", "ModulePass", "FunctionPass", "Sequential", "PassContext", "PassInstrument",
    "module_pass", "function_pass", "register_pass", "get_pass", "list_passes", "parse_pipeline",
    "kebab_case",
]


def kebab_case(name: str) -> str:
    """``FoldConstant`` -> ``fold-constant``; ``ToANormalForm`` -> ``to-a-normal-form``."""
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", name)
    return s.lower()


@dataclass(frozen=True)
class PassInfo:
    """A pass's name (Relay's), its pipeline-string name, opt_level, required passes and doc."""

    name: str
    opt_level: int = 0
    required: tuple = ()
    doc: str = ""
    kebab: str = ""
    options: tuple = ()  # ((name, value), ...) the options this instance was made with

    def __post_init__(self):
        if not self.kebab:
            object.__setattr__(self, "kebab", kebab_case(self.name))

    @property
    def label(self) -> str:
        """The name with its options, as a pipeline string writes it: ``fuse-ops{fuse_opt_level=2}``."""
        if not self.options:
            return self.name
        return self.name + "{" + ", ".join(f"{k}={v}" for k, v in self.options) + "}"


# ---------------------------------------------------------------------------------------------
# The context


class PassInstrument:
    """Sees every pass run in a context. Override any of the hooks.

    ``run_after_pass`` receives the module the pass produced; ``run_skipped_pass`` is called for a
    pass the context (or an instrument's ``should_run``) left out, with the reason in words.
    """

    def enter_pass_ctx(self, ctx: "PassContext") -> None: ...
    def exit_pass_ctx(self, ctx: "PassContext") -> None: ...
    def should_run(self, mod: IRModule, info: PassInfo) -> bool: return True
    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None: ...
    def run_after_pass(self, mod: IRModule, info: PassInfo) -> None: ...
    def run_skipped_pass(self, mod: IRModule, info: PassInfo, reason: str) -> None: ...


_CURRENT: contextvars.ContextVar = contextvars.ContextVar("relaybench_pass_context", default=None)


class PassContext:
    """Decides which passes run and lets instruments watch them; use it as a context manager.

    ``opt_level``: passes whose opt_level is higher are skipped by a Sequential.
    ``required_pass`` / ``disabled_pass``: names (Relay's or kebab-case) always run / never run.
    ``config``: options read by passes (``{"relay.FuseOps.max_depth": 10}``).
    ``instruments``: :class:`PassInstrument` objects.
    """

    def __init__(self, opt_level: int = 2, required_pass: Iterable[str] = (),
                 disabled_pass: Iterable[str] = (), config: Optional[dict] = None,
                 instruments: Sequence[PassInstrument] = ()):
        self.opt_level = int(opt_level)
        self.required_pass = frozenset(_canonical(n) for n in required_pass)
        self.disabled_pass = frozenset(_canonical(n) for n in disabled_pass)
        self.config = dict(config or {})
        self.instruments = list(instruments)
        self._token = None
        self._depth = 0

    @staticmethod
    def current() -> "PassContext":
        ctx = _CURRENT.get()
        if ctx is None:
            ctx = PassContext()
            _CURRENT.set(ctx)
        return ctx

    def __enter__(self) -> "PassContext":
        self._token = _CURRENT.set(self)
        for inst in self.instruments:
            inst.enter_pass_ctx(self)
        return self

    def __exit__(self, *exc) -> bool:
        for inst in self.instruments:
            inst.exit_pass_ctx(self)
        _CURRENT.reset(self._token)
        self._token = None
        return False

    # ---- decisions -------------------------------------------------------------------------
    def why_skipped(self, info: PassInfo) -> Optional[str]:
        """None if ``info``'s pass is enabled here, else the reason in words."""
        names = {info.name, info.kebab}
        if names & self.disabled_pass:
            return "disabled by the pass context"
        if names & self.required_pass:
            return None
        if info.opt_level > self.opt_level:
            return f"opt_level {info.opt_level} > context opt_level {self.opt_level}"
        return None

    def pass_enabled(self, info: PassInfo) -> bool:
        return self.why_skipped(info) is None

    # ---- running ---------------------------------------------------------------------------
    def skip(self, p: "Pass", mod: IRModule, reason: str) -> None:
        for inst in self.instruments:
            inst.run_skipped_pass(mod, p.info, reason)

    def run_pass(self, p: "Pass", mod: IRModule) -> IRModule:
        """Run one pass under the instruments (the pass's own opt_level is not checked here)."""
        if not isinstance(mod, IRModule):
            raise TypeError(f"{p.info.name} runs on an IRModule, not {type(mod).__name__}")
        for inst in self.instruments:
            if not inst.should_run(mod, p.info):
                self.skip(p, mod, f"an instrument ({type(inst).__name__}) said not to run it")
                return mod
        for inst in self.instruments:
            inst.run_before_pass(mod, p.info)
        self._depth += 1
        try:
            out = p.transform(mod, self)
        finally:
            self._depth -= 1
        if not isinstance(out, IRModule):
            raise TypeError(f"pass {p.info.name} returned {type(out).__name__}, not an IRModule")
        out = _typed(out, mod, p)
        for inst in self.instruments:
            inst.run_after_pass(out, p.info)
        return out


def _canonical(name: str) -> str:
    return name


def _typed(out: IRModule, before: IRModule, p: "Pass") -> IRModule:
    """Every pass's output is typed: re-run inference on the functions that changed."""
    if getattr(p, "keeps_types", False):
        return out
    if out is before:
        return out
    stale = any(f.type_or_none is None or f.body.type_or_none is None for f in out.functions.values())
    if not stale:
        return out
    from ..ir.type_infer import infer_module
    return infer_module(out)


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


class ModulePass(Pass):
    """A pass given by ``fn(mod, ctx, **options) -> IRModule``."""

    def __init__(self, fn: Callable, info: PassInfo, options: Optional[dict] = None):
        self.fn, self.info, self.options = fn, info, dict(options or {})

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        return self.fn(mod, ctx, **self.options)


class FunctionPass(Pass):
    """A pass given by ``fn(func, mod, ctx, **options) -> Function``, applied to each global
    function that is not a Primitive (fused) or external one. Returns the same module object
    when no function changed."""

    def __init__(self, fn: Callable, info: PassInfo, options: Optional[dict] = None):
        self.fn, self.info, self.options = fn, info, dict(options or {})

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        new = {}
        changed = False
        for gv, func in mod.functions.items():
            if func.attrs.get("Primitive") or func.attrs.get("Compiler") or func.attrs.get("SkipOptimization"):
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

    A pass's ``required`` passes run before it when they are not already in the sequence
    ahead of it.
    """

    def __init__(self, passes: Sequence[Pass], opt_level: int = 0, name: str = "Sequential",
                 required: tuple = ()):
        self.passes = list(passes)
        for p in self.passes:
            if not isinstance(p, Pass):
                raise TypeError(f"Sequential takes passes, got {p!r}")
        self.info = PassInfo(name, opt_level, tuple(required), doc="a sequence of passes", kebab=name.lower())

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


def _first_doc_line(fn) -> str:
    doc = inspect.getdoc(fn) or ""
    return doc.strip().split("\n\n")[0].replace("\n", " ")


def _decorator(kind: type, skip: int, opt_level: int, name: Optional[str], required: tuple):
    def wrap(fn: Callable) -> Callable:
        pname = name or fn.__name__
        options = _options_of(fn, skip)
        doc = _first_doc_line(fn)

        def factory(**kwargs) -> Pass:
            unknown = [k for k in kwargs if k not in options]
            if unknown:
                raise TypeError(f"{pname} has no option {unknown[0]!r} "
                                f"(options: {', '.join(options) or 'none'})")
            values = {k: kwargs.get(k, default) for k, (default, _ann) in options.items()}
            shown = tuple((k, v) for k, v in kwargs.items())
            info = PassInfo(pname, opt_level, tuple(required), doc, options=shown)
            return kind(fn, info, values)

        factory.__name__ = factory.__qualname__ = pname
        factory.__doc__ = fn.__doc__
        factory.__wrapped__ = fn
        factory.info = PassInfo(pname, opt_level, tuple(required), doc)
        register_pass(pname, factory, opt_level, tuple(required), doc, options)
        return factory

    return wrap


def module_pass(opt_level: int = 0, name: Optional[str] = None, required: tuple = ()):
    """Make ``fn(mod, ctx, *, option=default...) -> IRModule`` a registered pass factory."""
    return _decorator(ModulePass, 2, opt_level, name, required)


def function_pass(opt_level: int = 0, name: Optional[str] = None, required: tuple = ()):
    """Make ``fn(func, mod, ctx, *, option=default...) -> Function`` a registered pass factory."""
    return _decorator(FunctionPass, 3, opt_level, name, required)


def _load_all() -> None:
    from . import _load_all_passes
    _load_all_passes()


def get_pass(name: str) -> Callable:
    """The factory of a pass, by Relay name or kebab-case name."""
    if name not in _REGISTRY:
        _load_all()
    entry = _REGISTRY.get(name)
    if entry is None:
        for e in _REGISTRY.values():
            if e.kebab == name:
                entry = e
                break
    if entry is None:
        names = list(_REGISTRY) + [e.kebab for e in _REGISTRY.values()]
        close = difflib.get_close_matches(name, names, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"unknown pass {name!r}{hint}")
    return entry.factory


def list_passes() -> list:
    """Every registered pass: (name, kebab name, opt_level, one-line doc), sorted by name."""
    _load_all()
    return [(e.name, e.kebab, e.opt_level, e.doc) for e in sorted(_REGISTRY.values(), key=lambda e: e.name)]


def pass_options(name: str) -> dict:
    """The options of a pass: name -> default."""
    get_pass(name)
    entry = _REGISTRY.get(name) or next(e for e in _REGISTRY.values() if e.kebab == name)
    return {k: d for k, (d, _a) in entry.options.items()}


# ---------------------------------------------------------------------------------------------
# Pipeline strings

_ITEM = re.compile(r"\s*([A-Za-z][\w-]*)\s*(\{([^{}]*)\})?\s*(,|$)")


def _option_value(text: str, default: Any, name: str, pass_name: str):
    text = text.strip()
    kind = type(default)
    try:
        if isinstance(default, bool):
            if text.lower() in ("true", "1"):
                return True
            if text.lower() in ("false", "0"):
                return False
            raise ValueError(text)
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            return float(text)
        if default is None or isinstance(default, str):
            if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
                return text[1:-1]
            if default is None:
                for conv in (int, float):
                    try:
                        return conv(text)
                    except ValueError:
                        pass
            return text
        if isinstance(default, (tuple, list)):
            items = [t.strip() for t in text.strip("[]()").split(";") if t.strip()]
            return tuple(items)
    except ValueError:
        pass
    raise ValueError(f"{pass_name}: option {name} expects a {kind.__name__}, got {text!r}")


def parse_pipeline(text: str) -> Sequential:
    """``"simplify-inference,fold-constant,fuse-ops{fuse_opt_level=2}"`` -> a Sequential.

    Names are kebab-case (or Relay's); options go in braces as ``name=value`` separated by
    commas. Errors name the position and the pass.
    """
    passes = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _ITEM.match(text, pos)
        if not m:
            raise ValueError(f"pipeline: cannot read {text[pos:pos + 20]!r} at position {pos}")
        name, body = m.group(1), m.group(3)
        factory = get_pass(name)
        kwargs = {}
        if body and body.strip():
            entry = next(e for e in _REGISTRY.values() if e.factory is factory)
            for item in body.split(","):
                if "=" not in item:
                    raise ValueError(f"pipeline: option {item.strip()!r} of {name} needs name=value")
                key, value = (s.strip() for s in item.split("=", 1))
                if key not in entry.options:
                    raise ValueError(f"pipeline: {name} has no option {key!r} "
                                     f"(options: {', '.join(entry.options) or 'none'})")
                kwargs[key] = _option_value(value, entry.options[key][0], key, name)
        passes.append(factory(**kwargs))
        pos = m.end()
    return Sequential(passes, name="pipeline")


_ = (time, Function)


def typed(mod: IRModule) -> IRModule:
    """``mod`` with every function typed (re-running inference only if some node lacks a type).

    Passes that read ``checked_type`` call this on their input.
    """
    if all(f.type_or_none is not None and f.body.type_or_none is not None for f in mod.functions.values()):
        return mod
    from ..ir.type_infer import infer_module
    return infer_module(mod)
