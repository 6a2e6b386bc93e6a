"""IRModule: the global functions and type definitions of a program.

>>> from relaybench.ir import IRModule, var, Function
>>> x = var("x", shape=(3,))
>>> mod = IRModule.from_expr(Function([x], x + x))
>>> mod.get_global_var("main")
GlobalVar(@main)
>>> print(mod.astext(show_types=False))
#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  add(%x, %x)
}
"""

from __future__ import annotations

from typing import Iterator, Optional, Union

from .adt import TypeData
from .expr import Constructor, Expr, Function, GlobalVar
from .types import GlobalTypeVar

__all__ = ["IRModule"]


class IRModule:
    """Global functions (``@name``) and ADT definitions, looked up by name or by handle.

    A module is a container that passes do not mutate: a pass builds a new module. Building a
    module by hand uses ``mod["f"] = function`` and :meth:`add_type_def`.
    """

    def __init__(self, functions: Optional[dict] = None, type_definitions: Optional[dict] = None):
        self.functions: dict = {}
        self.type_definitions: dict = {}
        self._global_vars: dict = {}
        self._type_vars: dict = {}
        self._constructors: dict = {}
        for td in (type_definitions or {}).values() if isinstance(type_definitions, dict) else (type_definitions or []):
            self.add_type_def(td)
        for key, func in (functions or {}).items():
            self.add(key, func)

    # ---- functions -----------------------------------------------------------------------
    def _gvar(self, key: Union[str, GlobalVar], create: bool) -> GlobalVar:
        if isinstance(key, GlobalVar):
            existing = self._global_vars.get(key.name_hint)
            if existing is not None and existing is not key:
                raise ValueError(f"module already has a different @{key.name_hint}")
            return key
        if not isinstance(key, str):
            raise TypeError(f"a global function is named by a str or a GlobalVar, not {key!r}")
        gv = self._global_vars.get(key)
        if gv is None:
            if not create:
                raise KeyError(self._missing(key))
            gv = GlobalVar(key)
        return gv

    def _missing(self, name: str) -> str:
        import difflib
        close = difflib.get_close_matches(name, list(self._global_vars) + list(self._type_vars), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        return f"no global function or type named {name!r} in the module{hint}"

    def add(self, key: Union[str, GlobalVar], func: Function, update: bool = True) -> GlobalVar:
        """Add (or, with ``update``, replace) a global function; returns its GlobalVar."""
        if not isinstance(func, Function):
            raise TypeError(f"a global must be a Function, got {type(func).__name__}")
        gv = self._gvar(key, create=True)
        if not update and gv in self.functions:
            raise ValueError(f"module already defines @{gv.name_hint}")
        self._global_vars[gv.name_hint] = gv
        self.functions[gv] = func
        return gv

    def __setitem__(self, key: Union[str, GlobalVar], func: Function) -> None:
        self.add(key, func)

    def __getitem__(self, key: Union[str, GlobalVar, GlobalTypeVar]):
        if isinstance(key, GlobalTypeVar):
            return self.type_definitions[key]
        if isinstance(key, str) and key not in self._global_vars and key in self._type_vars:
            return self.type_definitions[self._type_vars[key]]
        gv = self._gvar(key, create=False)
        try:
            return self.functions[gv]
        except KeyError:
            raise KeyError(self._missing(gv.name_hint)) from None

    def __contains__(self, key) -> bool:
        if isinstance(key, GlobalVar):
            return key in self.functions
        if isinstance(key, GlobalTypeVar):
            return key in self.type_definitions
        return key in self._global_vars or key in self._type_vars

    def remove(self, key: Union[str, GlobalVar]) -> None:
        gv = self._gvar(key, create=False)
        del self.functions[gv]
        del self._global_vars[gv.name_hint]

    def get_global_var(self, name: str) -> GlobalVar:
        return self._gvar(name, create=False)

    def get_global_vars(self) -> list:
        return list(self.functions)

    def items(self):
        return self.functions.items()

    def __iter__(self) -> Iterator[GlobalVar]:
        return iter(self.functions)

    def __len__(self) -> int:
        return len(self.functions)

    # ---- types ---------------------------------------------------------------------------
    def add_type_def(self, data: TypeData, update: bool = False) -> GlobalTypeVar:
        if not isinstance(data, TypeData):
            raise TypeError(f"a type definition must be a TypeData, got {type(data).__name__}")
        name = data.header.name_hint
        old = self._type_vars.get(name)
        if old is not None and not update and old is not data.header:
            raise ValueError(f"module already defines a type named {name}")
        if old is not None:
            for c in self.type_definitions[old].constructors:
                self._constructors.pop(c.name_hint, None)
            del self.type_definitions[old]
        for c in data.constructors:
            other = self._constructors.get(c.name_hint)
            if other is not None and other.belong_to is not data.header:
                raise ValueError(f"constructor {c.name_hint} of {name} clashes with one of "
                                 f"{other.belong_to.name_hint}")
        self._type_vars[name] = data.header
        self.type_definitions[data.header] = data
        for c in data.constructors:
            self._constructors[c.name_hint] = c
        return data.header

    def get_global_type_var(self, name: str) -> GlobalTypeVar:
        try:
            return self._type_vars[name]
        except KeyError:
            raise KeyError(self._missing(name)) from None

    def get_type(self, name: str) -> TypeData:
        return self.type_definitions[self.get_global_type_var(name)]

    def get_constructor(self, name: str) -> Constructor:
        try:
            return self._constructors[name]
        except KeyError:
            raise KeyError(f"no constructor named {name!r} in the module") from None

    def lookup_tag(self, tag: int, adt: Union[str, GlobalTypeVar]) -> Constructor:
        td = self.type_definitions[adt] if isinstance(adt, GlobalTypeVar) else self.get_type(adt)
        return td.constructors[tag]

    # ---- whole-module operations ---------------------------------------------------------------
    def update(self, other: "IRModule") -> None:
        """Add every function and type definition of ``other`` (replacing same-named ones)."""
        for td in other.type_definitions.values():
            self.add_type_def(td, update=True)
        for gv, func in other.functions.items():
            old = self._global_vars.get(gv.name_hint)
            if old is not None and old is not gv:
                del self.functions[old]
            self._global_vars[gv.name_hint] = gv
            self.functions[gv] = func

    def copy(self) -> "IRModule":
        """A new module holding the same (immutable) functions and types."""
        new = IRModule()
        new.update(self)
        return new

    def with_functions(self, functions: dict) -> "IRModule":
        """A copy whose functions are replaced by ``functions`` (GlobalVar -> Function)."""
        new = IRModule()
        for td in self.type_definitions.values():
            new.add_type_def(td)
        for gv, func in functions.items():
            new.add(gv, func)
        return new

    @staticmethod
    def from_expr(expr: Expr, functions: Optional[dict] = None,
                  type_defs: Optional[dict] = None) -> "IRModule":
        """A module whose ``@main`` is ``expr`` (wrapped in a Function of its free variables)."""
        from .analysis import free_vars
        mod = IRModule(functions, type_defs)
        if not isinstance(expr, Function):
            expr = Function(free_vars(expr), expr)
        main = mod._global_vars.get("main")
        mod.add(main if main is not None else "main", expr)
        return mod

    @staticmethod
    def from_text(text: str, source_name: str = "<string>") -> "IRModule":
        from .parser import parse
        return parse(text, source_name)

    def import_prelude(self) -> "IRModule":
        """Add the prelude (List, Option, Tree, nat and map, foldl, foldr, ...) to this module.

        The prelude is Relay text shipped in ``relaybench/ir/std/prelude.rly``; importing it twice
        is harmless. Returns the module, so ``IRModule().import_prelude()`` reads well.
        """
        if "List" in self._type_vars and "map" in self._global_vars:
            return self
        self.update(prelude_module())
        return self

    # ---- printing ------------------------------------------------------------------------
    def astext(self, show_types: bool = True, show_meta_data: bool = True) -> str:
        from .printer import astext
        return astext(self, show_types=show_types, show_meta_data=show_meta_data)

    def __str__(self) -> str:
        return self.astext()

    def __repr__(self) -> str:
        names = ", ".join("@" + gv.name_hint for gv in self.functions)
        types = ", ".join(gt.name_hint for gt in self.type_definitions)
        return f"IRModule(functions=[{names}]" + (f", types=[{types}])" if types else ")")

    def _repr_html_(self) -> str:
        from ..viz.html import html
        return html(self)


_PRELUDE: list = []


def prelude_module() -> IRModule:
    """The parsed prelude (parsed once per process; the module returned is a fresh copy)."""
    if not _PRELUDE:
        from importlib import resources
        from .parser import parse
        text = (resources.files("relaybench.ir") / "std" / "prelude.rly").read_text()
        _PRELUDE.append(parse(text, "prelude.rly"))
    return _PRELUDE[0].copy()
