"""A progress bar for the search: one line per workload, trials done and the best GFLOP/s so far;
redrawn in place in a terminal (``\\r``) and in a notebook (an updated display)."""

from __future__ import annotations

import sys
import time

__all__ = ["Progress"]


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


class Progress:
    """``update(done, best_gflops)`` redraws; ``close()`` ends the line. ``enabled=False``
    draws nothing."""

    WIDTH = 24

    def __init__(self, label: str, total: int, enabled: bool = True, stream=None):
        self.label, self.total, self.enabled = label, max(1, total), enabled
        self.stream = stream or sys.stderr
        self.started = time.perf_counter()
        self._handle = None
        self._notebook = enabled and _in_notebook()
        self.text = ""

    def line(self, done: int, best_gflops: float) -> str:
        filled = int(self.WIDTH * min(done, self.total) / self.total)
        bar = "#" * filled + "." * (self.WIDTH - filled)
        return (f"[{bar}] {done:>3}/{self.total} {self.label}  best {best_gflops:7.1f} GFLOP/s  "
                f"{time.perf_counter() - self.started:5.1f} s")

    def update(self, done: int, best_gflops: float) -> None:
        self.text = self.line(done, best_gflops)
        if not self.enabled:
            return
        if self._notebook:
            from IPython.display import display
            if self._handle is None:
                self._handle = display({"text/plain": self.text}, raw=True, display_id=True)
            else:
                self._handle.update({"text/plain": self.text}, raw=True)
        else:
            self.stream.write("\r" + self.text)
            self.stream.flush()

    def close(self) -> None:
        if self.enabled and not self._notebook:
            self.stream.write("\n")
            self.stream.flush()
