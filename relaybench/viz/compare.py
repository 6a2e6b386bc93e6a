"""Whether one configuration is really faster than another: interleaved timing rounds, medians
with confidence intervals, and the ratio of each configuration to the first.

Two timings taken one after the other differ by more than the programs do: the machine warms,
other work comes and goes. :func:`interleaved` times every configuration once per round, in
turn, for ``rounds`` rounds, so that drift touches each alike, and keeps each round's time per
call. Each configuration gets the median of its rounds and a distribution-free confidence
interval for that median (:func:`median_interval`: order statistics of the sorted rounds, the
ranks from the binomial distribution, so no assumption of normal times). The rounds are paired,
so the comparison with the first configuration is the median of the per-round ratios, with
the same kind of interval: when the interval excludes 1 the difference is real at that
confidence, otherwise it is within the noise.

>>> lo, hi, level = median_interval([5.0, 1.0, 4.0, 2.0, 3.0, 6.0, 7.0, 8.0, 9.0, 10.0])
>>> (lo, hi), round(level, 3)
((2.0, 9.0), 0.979)
>>> result = interleaved({"a": lambda: None, "b": lambda: None}, rounds=7, number=2)
>>> [row["configuration"] for row in result.rows], result.rounds
(['a', 'b'], 7)
"""

from __future__ import annotations

import math
import time
from typing import Callable, Optional

__all__ = ["interleaved", "median_interval", "Comparison"]


def median_interval(samples, confidence: float = 0.95) -> tuple:
    """``(low, high, level)``: the narrowest interval of order statistics ``[x(k), x(n+1-k)]``
    (``x`` sorted, 1-based) that holds the population median with probability ``level`` of at
    least ``confidence`` (the rank count below the median is Binomial(n, 1/2)); with too few
    samples for it, the whole range and its own level."""
    xs = sorted(float(x) for x in samples)
    n = len(xs)
    if n == 0:
        raise ValueError("median_interval: no samples")
    best = (xs[0], xs[-1], 1.0 - 2.0 * 0.5 ** n)
    for k in range(1, n // 2 + 1):
        # P(x(k) <= median <= x(n+1-k)) = 1 - 2 P(Binom(n, 1/2) <= k - 1)
        tail = sum(math.comb(n, i) for i in range(k)) / 2.0 ** n
        level = 1.0 - 2.0 * tail
        if level < confidence:
            break
        best = (xs[k - 1], xs[n - k], level)
    return best


def _median(xs) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


class Comparison:
    """Interleaved timings (see the module): ``times_ms[name]`` (one time per call per round),
    ``rows`` (per configuration: ``median_ms``, ``low_ms`` / ``high_ms`` (its interval),
    ``ratio`` / ``ratio_low`` / ``ratio_high`` against the first configuration and ``verdict``),
    ``confidence``."""

    def __init__(self, times_ms: dict, number: int, confidence: float):
        self.times_ms = times_ms
        self.number = number
        self.confidence = confidence
        names = list(times_ms)
        self.rounds = len(times_ms[names[0]]) if names else 0
        base = times_ms[names[0]] if names else []
        self.rows = []
        for name in names:
            ts = times_ms[name]
            lo, hi, level = median_interval(ts, confidence)
            row = {"configuration": name, "median_ms": _median(ts), "low_ms": lo, "high_ms": hi,
                   "level": level}
            ratios = [t / b for t, b in zip(ts, base) if b > 0]
            if name == names[0] or not ratios:
                row.update(ratio=1.0, ratio_low=1.0, ratio_high=1.0, verdict="baseline")
            else:
                rlo, rhi, _ = median_interval(ratios, confidence)
                r = _median(ratios)
                if rhi < 1.0:
                    verdict = f"faster: {1 / r:.2f}x (real)"
                elif rlo > 1.0:
                    verdict = f"slower: {r:.2f}x (real)"
                else:
                    verdict = "no real difference (the interval holds 1)"
                row.update(ratio=r, ratio_low=rlo, ratio_high=rhi, verdict=verdict)
            self.rows.append(row)

    def table(self):
        from .table import Table
        return Table([{"configuration": r["configuration"], "median (ms)": f"{r['median_ms']:.3f}",
                       f"{self.confidence:.0%} interval (ms)": f"{r['low_ms']:.3f} - {r['high_ms']:.3f}",
                       "time / first": f"{r['ratio']:.3f} [{r['ratio_low']:.3f}, {r['ratio_high']:.3f}]",
                       "verdict": r["verdict"]} for r in self.rows])

    def canvas(self, width: float = 700.0):
        """Each configuration's median as a dot on its interval (a bar), on one time axis."""
        from .chart import Canvas, palette
        left, top, row, right = 200.0, 30.0, 22.0, 30.0
        c = Canvas(width, top + row * len(self.rows) + 30, css_class="rb-comparison")
        c.text(8, 16, f"{self.rounds} interleaved rounds of {self.number} calls; medians with "
                      f"{self.confidence:.0%} intervals", size=11, bold=True)
        hi = max((r["high_ms"] for r in self.rows), default=1.0) or 1.0
        scale = (width - left - right) / hi
        for i, r in enumerate(self.rows):
            y = top + i * row
            c.text(left - 6, y + row * 0.6, r["configuration"], size=9, anchor="end")
            c.rect(left + r["low_ms"] * scale, y + row * 0.3, (r["high_ms"] - r["low_ms"]) * scale,
                   row * 0.4, fill=palette(i), tooltip=f"{r['configuration']}: median {r['median_ms']:.3f} ms, "
                   f"interval {r['low_ms']:.3f} - {r['high_ms']:.3f} ms; {r['verdict']}")
            x = left + r["median_ms"] * scale
            c.line(x, y + row * 0.15, x, y + row * 0.85, stroke="#212121")
        axis = top + row * len(self.rows) + 4
        c.line(left, axis, width - right, axis)
        c.text(left, axis + 14, "0 ms", size=8)
        c.text(width - right, axis + 14, f"{hi:.3f} ms", size=8, anchor="end")
        return c

    def _repr_html_(self) -> str:
        return f'<div class="rb-comparison-view">{self.table()._repr_html_()}{self.canvas().svg()}</div>'

    def __repr__(self) -> str:
        return str(self.table())


def interleaved(runners: dict, *, rounds: int = 15, number: int = 3, warmup: int = 1,
                confidence: float = 0.95, progress: Optional[Callable] = None) -> Comparison:
    """Time each of ``runners`` (name -> a callable of no arguments) in ``rounds`` interleaved
    rounds of ``number`` calls (after ``warmup`` calls each), and compare them (see the module)."""
    if not runners:
        raise ValueError("interleaved: nothing to time")
    if rounds < 1 or number < 1:
        raise ValueError(f"interleaved: rounds and number must be >= 1, got {rounds} and {number}")
    for run in runners.values():
        for _ in range(warmup):
            run()
    times = {name: [] for name in runners}
    for k in range(rounds):
        order = list(runners) if k % 2 == 0 else list(reversed(runners))   # neither always first
        for name in order:
            run = runners[name]
            start = time.perf_counter()
            for _ in range(number):
                run()
            times[name].append((time.perf_counter() - start) * 1e3 / number)
        if progress is not None:
            progress(k + 1, rounds)
    return Comparison(times, number, confidence)
