"""Shape-transforming operators: reshape, transpose, concatenate, split..."""

from __future__ import annotations

__all__: list = []
