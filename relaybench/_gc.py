"""Python's cyclic garbage collector, paused while a compiler step runs over a large program.

Passes, type inference and the pattern rewriter allocate hundreds of thousands of short-lived
nodes and containers; with the collector running, its collections (each walking the live
objects of a generation, the whole heap for the oldest) take 30-40% of the time on a program of
100,000 operators. Those steps make no reference cycles that need collecting before they end,
so the collector is paused for their duration and its earlier state restored after; nesting is
harmless.

>>> import gc
>>> with gc_paused():
...     gc.isenabled()
False
>>> gc.isenabled()
True
"""

from __future__ import annotations

import gc


class gc_paused:
    """A context manager: the collector is off inside, as it was before outside."""

    __slots__ = ("_was",)

    def __enter__(self):
        self._was = gc.isenabled()
        gc.disable()
        return self

    def __exit__(self, *exc):
        if self._was:
            gc.enable()
        return False
