"""Executors and code generators. ``create_executor`` is the entry point Relay users know."""

from .executor import create_executor  # noqa: F401
