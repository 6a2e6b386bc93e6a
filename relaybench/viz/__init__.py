"""Views of IR objects and results for notebooks and terminals."""

from .table import Table  # noqa: F401
