"""Package attributes imported on first use (PEP 562), so that importing a package does not
import every submodule it names."""

from __future__ import annotations

import importlib


def lazy_attributes(package: str, table: dict):
    """``(__getattr__, __dir__)`` for ``package``: a name of ``table`` (name -> relative module)
    comes from that module on first use and is then kept in the package; any other name is tried
    as a submodule, else it is an AttributeError.

    >>> getattr_, dir_ = lazy_attributes("relaybench.autotune", {"tune": ".tuner"})
    >>> getattr_("tune").__name__, "tune" in dir_()
    ('tune', True)
    """
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str):
        module = table.get(name)
        if module is None:   # a submodule not imported yet
            try:
                return importlib.import_module(f".{name}", package)
            except ModuleNotFoundError:
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
