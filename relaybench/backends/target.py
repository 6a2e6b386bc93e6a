"""Targets: the device a module is compiled for, and its options.

A target is written as in TVM, a kind followed by ``-key=value`` options:

>>> t = Target.parse("llvm -mcpu=native -num-threads=2")
>>> t.kind, t.options["mcpu"], t.num_threads
('llvm', 'native', 2)
>>> str(t)
'llvm -mcpu=native -num-threads=2'
>>> Target.parse("cuda")
Traceback (most recent call last):
...
relaybench.errors.CompileError: unknown target kind 'cuda' in 'cuda'; known: llvm
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import CompileError

__all__ = ["Target", "KINDS"]

#: The target kinds that have a code generator.
KINDS = ("llvm",)


@dataclass(frozen=True)
class Target:
    """A compilation target: ``kind`` (``"llvm"``: the host CPU) and its ``options``."""

    kind: str
    options: dict = field(default_factory=dict, hash=False, compare=True)

    @classmethod
    def parse(cls, target) -> "Target":
        """A Target from a string (``"llvm -mcpu=native"``), a Target, or None (``llvm``)."""
        if target is None:
            return cls("llvm", {})
        if isinstance(target, Target):
            return target
        if not isinstance(target, str) or not target.strip():
            raise CompileError(f"a target is a string such as 'llvm', not {target!r}")
        words = target.split()
        kind = words[0]
        if kind not in KINDS:
            raise CompileError(f"unknown target kind {kind!r} in {target!r}; known: "
                               f"{', '.join(KINDS)}")
        options = {}
        for word in words[1:]:
            if not word.startswith("-") or "=" not in word:
                raise CompileError(f"target {target!r}: option {word!r} is not -key=value")
            key, value = word.lstrip("-").split("=", 1)
            options[key] = value
        if "num-threads" in options:
            try:
                if int(options["num-threads"]) < 0:
                    raise ValueError
            except ValueError:
                raise CompileError(f"target {target!r}: -num-threads must be a count >= 0 "
                                   f"(0: one per core), got {options['num-threads']!r}") from None
        return cls(kind, options)

    @property
    def num_threads(self):
        """The ``-num-threads`` option as an int, or None (then ``RB_NUM_THREADS`` decides)."""
        value = self.options.get("num-threads")
        return None if value is None else int(value)

    def __str__(self) -> str:
        return " ".join([self.kind] + [f"-{k}={v}" for k, v in self.options.items()])

    def __repr__(self) -> str:
        return f"Target({str(self)!r})"
