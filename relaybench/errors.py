"""Errors raised by relaybench.

Every error names the place it comes from: a parse error carries the line and column and shows the
source line with a caret; a type error names the node and the op, shows the program with the node
marked and says which relation failed and why; an execution error names the input, what was
expected and what was given.

>>> import relaybench as rb
>>> try:
...     rb.parse('#[version = "0.0.5"]\\ndef @main(%x: Tensor[(1, 3), float32] {\\n  %x\\n}')
... except rb.errors.ParseError as err:
...     print(err.line, err.column)
2 39
"""

from __future__ import annotations


class RelayError(Exception):
    """The root of every error relaybench raises on purpose."""


class ParseError(RelayError):
    """A syntax error in Relay text, with ``line`` and ``column`` (both 1-based)."""

    def __init__(self, message: str, line: int, column: int, source_line: str = "",
                 source_name: str = "<string>", expected: str | None = None):
        self.message = message
        self.line = line
        self.column = column
        self.source_line = source_line
        self.source_name = source_name
        self.expected = expected
        super().__init__(self._render())

    def _render(self) -> str:
        head = f"{self.source_name}:{self.line}:{self.column}: {self.message}"
        if self.expected and "expected" not in self.message:
            head += f" (expected {self.expected})"
        if not self.source_line:
            return head
        caret = " " * max(self.column - 1, 0) + "^"
        return f"{head}\n  {self.source_line}\n  {caret}"


class TypeInferenceError(RelayError):
    """Type inference failed.

    Attributes: ``node`` (the expression at fault, or None), ``op`` (the operator's name when the
    failure comes from an operator's type relation), ``reason`` (the relation's own words), and
    ``program`` (the program text with the node marked, when it could be printed).
    """

    def __init__(self, reason: str, node=None, op: str | None = None, program: str | None = None,
                 relation: str | None = None):
        self.reason = reason
        self.node = node
        self.op = op
        self.relation = relation
        self.program = program
        super().__init__(self._render())

    def _render(self) -> str:
        msg = self.reason
        if self.op and not msg.startswith(self.op + ":"):
            msg = f"{self.op}: {msg}"
        if self.program:
            msg += "\nin the program (the node at fault is marked):\n" + self.program
        return msg


class CompileError(RelayError):
    """Lowering or code generation failed; the message names the kernel or fused group."""


class ExecutionError(RelayError):
    """Running a program failed: a bad input (its name, expected and given), or a runtime fault."""

    def __init__(self, message: str, input_name: str | None = None, expected=None, given=None,
                 node=None):
        self.input_name = input_name
        self.expected = expected
        self.given = given
        self.node = node
        super().__init__(message)
