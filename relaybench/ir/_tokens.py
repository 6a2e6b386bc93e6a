"""The tokenizer of Relay's text format.

Tokens are plain tuples ``(kind, text, offset)`` so that a program of 100,000 bindings tokenizes
quickly; the parser turns an offset into a line and a column only when it needs one (for a span or
an error). Comments (``// ...`` and nested ``/* ... */``) and white space are dropped. A trailing
``#[metadata]`` section is not tokenized: its JSON text is handed to the parser as it is.

>>> toks, meta, _ = tokenize('%0 = nn.relu(%x) /* ty=float32 */;')
>>> [(kind, text) for kind, text, _ in toks]
[('graph', '%0'), ('punct', '='), ('ident', 'nn.relu'), ('punct', '('), ('local', '%x'), ('punct', ')'), ('punct', ';'), ('eof', '')]

Inside ``Tensor[...]`` ``//`` is floor division (``Tensor[(n // 2), float32]``), not a comment.

A variable or global whose name is not a plain identifier is written quoted, ``%"a b"`` or
``@"my.f"`` (the name as a JSON string). Relay's own printer writes such names unquoted, which its
parser cannot read back; the quoted form is this project's way to make every name round-trip. A
quoted name that is a plain identifier reads as the unquoted one (``%"x"`` is ``%x``):

>>> [text for _, text, _ in tokenize('%"a b" %"x" @"my f"')[0]]
['%"a b"', '%x', '@"my f"', '']
"""

from __future__ import annotations

import bisect
import json
import re

__all__ = ["tokenize", "LineIndex", "LOCAL", "GRAPH", "GLOBAL", "IDENT", "NUMBER", "STRING",
           "PUNCT", "EOF"]

LOCAL, GRAPH, GLOBAL, IDENT, NUMBER, STRING, PUNCT, EOF = (
    "local", "graph", "global", "ident", "number", "string", "punct", "eof")

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_DOTTED = rf"{_NAME}(?:\.{_NAME})*"

# The text is cut into pieces by one C-level `findall` per window of text; the pieces cover the
# text without gaps (the last alternative takes any one character), so each piece's offset is the
# sum of the lengths before it. A piece is classified by its first character. A few rare cases
# (a nested block comment, `//` inside `Tensor[...]`, the metadata section) restart the scan.
_PIECE = re.compile(rf"""
    [ \t\r\n\f]+
  | /\*(?:[^*/]|\*(?!/)|/(?!\*))*\*/
  | /\*
  | //[^\n]*
  | %[A-Za-z0-9_]+
  | [%@]"(?:[^"\\\n]|\\.)*"
  | @{_DOTTED}
  | (?<=\.)[0-9]+
  | [0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?(?:[A-Za-z][A-Za-z0-9]*)?
  | {_DOTTED}
  | "(?:[^"\\\n]|\\.)*"
  | \#\[metadata\]
  | =>|->|<=|>=|==|!=
  | .
""", re.VERBOSE | re.DOTALL)

_WINDOW = 8192
_MARGIN = 16  # more than any token's look-ahead past its own end
_COMMENT_EDGE = re.compile(r"/\*|\*/")
_PUNCT_CHARS = frozenset("()[]{},;:=.*/+-<>?#%")
_WS, _SLASH, _PERCENT, _AT, _DIGIT, _ALPHA, _QUOTE, _HASH, _OTHER = range(9)
_FIRST = {c: _WS for c in " \t\r\n\f"}
_FIRST.update({c: _DIGIT for c in "0123456789"})
_FIRST.update({c: _ALPHA for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"})
_FIRST.update({"/": _SLASH, "%": _PERCENT, "@": _AT, '"': _QUOTE, "#": _HASH})


class TokenizeError(Exception):
    """Raised with ``offset`` and a message; the parser turns it into a ParseError."""

    def __init__(self, message: str, offset: int):
        super().__init__(message)
        self.message = message
        self.offset = offset


def tokenize(text: str):
    """Split ``text`` into tokens.

    Returns ``(tokens, metadata_text, metadata_offset)``; the last two are ``None`` when there is
    no ``#[metadata]`` section. The token list always ends with an ``eof`` token.
    """
    tokens: list = []
    append = tokens.append
    first = _FIRST
    brackets: list = []  # True for the `[` of a `Tensor[`, where `//` divides
    meta_text = meta_offset = None
    n = len(text)
    pos = 0
    end_offset = n
    window = _WINDOW
    while pos < n:
        stop = pos + window
        pieces = _PIECE.findall(text, pos, stop)
        if stop < n:
            # A piece near the window's end may have been cut short (`0.5f` read as `0` and `.`):
            # drop every piece ending within a few characters of it, and scan them again.
            end = stop
            while pieces and end > stop - _MARGIN:
                end -= len(pieces.pop())
            if not pieces:  # one piece longer than the window: widen it
                window *= 2
                continue
            window = _WINDOW
        p = pos
        restart = -1
        for piece in pieces:
            cat = first.get(piece[0], _OTHER)
            if cat == _WS:
                p += len(piece)
                continue
            if cat == _ALPHA:
                append((IDENT, piece, p))
            elif cat == _DIGIT:
                append((NUMBER, piece, p))
            elif (cat == _PERCENT or cat == _AT) and len(piece) > 1 and piece[1] == '"':
                append((LOCAL if cat == _PERCENT else GLOBAL, quoted_name(piece, p), p))
            elif cat == _PERCENT:
                if len(piece) == 1:
                    append((PUNCT, piece, p))
                else:
                    append((GRAPH if piece[1:].isdigit() else LOCAL, piece, p))
            elif cat == _SLASH:
                if piece == "/":
                    append((PUNCT, piece, p))
                elif piece[1] == "*":
                    if len(piece) == 2:  # nested, or not closed
                        restart = _skip_block_comment(text, p)
                        break
                elif brackets and brackets[-1]:  # `//` divides inside Tensor[...]
                    append((PUNCT, "//", p))
                    restart = p + 2
                    break
            elif cat == _OTHER:
                if len(piece) == 1 and piece not in _PUNCT_CHARS:  # `=>` and such are longer
                    raise TokenizeError(f"unexpected character {piece!r}", p)
                if piece == "[":
                    brackets.append(bool(tokens) and tokens[-1][1] == "Tensor"
                                    and tokens[-1][0] == IDENT)
                elif piece == "]" and brackets:
                    brackets.pop()
                append((PUNCT, piece, p))
            elif cat == _AT:
                if len(piece) == 1:
                    raise TokenizeError("expected a global name after '@'", p)
                append((GLOBAL, piece, p))
            elif cat == _QUOTE:
                if len(piece) == 1:
                    raise TokenizeError("unterminated string", p)
                append((STRING, piece, p))
            else:  # '#'
                if piece == "#":
                    append((PUNCT, piece, p))
                else:
                    meta_offset = p + len(piece)
                    meta_text = text[meta_offset:]
                    end_offset = p
                    restart = n
                    break
            p += len(piece)
        pos = p if restart < 0 else restart
    append((EOF, "", end_offset))
    return tokens, meta_text, meta_offset


_PLAIN_LOCAL = re.compile(r"[A-Za-z0-9_]*[A-Za-z_][A-Za-z0-9_]*")


def quoted_name(piece: str, offset: int) -> str:
    """The token text of a quoted name ``%"..."`` / ``@"..."``: the plain form when the name is
    a plain identifier (so that ``%"x"`` and ``%x`` are one variable), else the sigil followed by
    the name in canonical JSON quoting."""
    sigil = piece[0]
    try:
        name = json.loads(piece[1:])
    except ValueError as err:
        raise TokenizeError(f"bad quoted name {piece}: {err}", offset) from None
    if not name:
        raise TokenizeError(f"empty quoted name {piece}", offset)
    plain = _PLAIN_LOCAL.fullmatch(name) if sigil == "%" else re.fullmatch(_DOTTED, name)
    if plain:
        return sigil + name
    return sigil + json.dumps(name)


def _skip_block_comment(text: str, pos: int) -> int:
    """The offset just after the (possibly nested) block comment opening at ``pos``."""
    depth = 0
    i = pos
    while True:
        m = _COMMENT_EDGE.search(text, i)
        if m is None:
            raise TokenizeError("unterminated comment: '/*' has no matching '*/'", pos)
        depth += 1 if m.group() == "/*" else -1
        i = m.end()
        if depth == 0:
            return i


class LineIndex:
    """Turns a character offset into a 1-based (line, column) and gives a line's text."""

    def __init__(self, text: str):
        self.text = text
        starts = [0]
        find = text.find
        i = find("\n")
        while i >= 0:
            starts.append(i + 1)
            i = find("\n", i + 1)
        self.starts = starts

    def position(self, offset: int) -> tuple:
        line = bisect.bisect_right(self.starts, offset) - 1
        return line + 1, offset - self.starts[line] + 1

    def line_text(self, line: int) -> str:
        if line < 1 or line > len(self.starts):
            return ""
        start = self.starts[line - 1]
        end = self.text.find("\n", start)
        return self.text[start:] if end < 0 else self.text[start:end]
