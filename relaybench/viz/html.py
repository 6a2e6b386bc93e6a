"""The rich notebook view of IR objects and results: :func:`html`.

``html(obj)`` returns a self-contained HTML string (inline styles only, no scripts, monospace,
colors readable on light and dark backgrounds). What each kind of object shows:

* an ``IRModule``, a ``Function`` or any expression: the Relay text (``astext()``, without the
  metadata section) highlighted: keywords, operator names, variables (``%x``, ``@f``),
  constants, attributes, and the types in ``/* ty=... */`` comments in a muted color. Each global
  function and each fused ``Primitive=1`` function is a ``<details>`` element whose one-line
  summary gives its name, parameter count, operator count and, for a fused group, its pattern
  kind. A module starts with a header line counting functions, operators, fused groups and the
  bytes of ``@main``'s parameters and of the constants; a program of more than
  ``collapse_lines`` lines starts with every body collapsed.
* a type: its text, shape dimensions and dtype highlighted.
* ``Snapshots``: the table of passes (status, changed, op counts, time) and, for each pass that
  changed the program, a collapsed ``<details>`` with the module after it (the first
  ``max_modules`` rendered in full; later or very large ones name how to see them).
* a ``PassRecord``: its row, the module after it and the text diff.
* a compiled ``GraphModule``: target, threads, calls and kernels, compile statistics, the memory
  plan, the list of calls with each kernel's schedule rule and pattern kind (and, for an
  accelerator build, whether the call runs on the accelerator or the CPU), and each kernel's
  loop IR in a collapsed ``<details>``.
* a ``CompiledKernel`` (or a build's ``GroupKernel``): its loop IR highlighted (loop kinds and
  ``allocate`` colored), with its LLVM IR and assembly (AVX-512 registers and fused
  multiply-adds marked) in ``<details>``; a ``LoweredFunc``: its loop IR and what lowering knew.
* a ``BenchmarkResult``: one line; a ``Table`` (a ``Profile`` too): its own HTML.

Every highlighted token is a ``<span>`` whose class names its kind (``rb-op``, ``rb-kw``,
``rb-var``, ``rb-gvar``, ``rb-num``, ``rb-str``, ``rb-attr``, ``rb-type``, ``rb-dtype``, ...) and
whose ``style`` colors it. Output depends only on the object (no ids, no times of rendering), so
notebook outputs compare equal from run to run.

>>> import relaybench as rb
>>> from relaybench import op
>>> x = rb.var("x", shape=(2,))
>>> page = html(rb.Function([x], op.nn.relu(x)))
>>> '<span class="rb-op" style="color:#2f7fc1">nn.relu</span>' in page
True
"""

from __future__ import annotations

import html as _html
import re
from typing import Optional

__all__ = ["html", "relay_html", "type_html", "loops_html", "llvm_html", "asm_html",
           "snapshots_html", "pass_record_html", "graph_module_html", "kernel_html",
           "lowered_html", "benchmark_html", "RelayLayout"]

# ---- styles ----------------------------------------------------------------------------------

# mid-tone colors: readable on a white page and on a dark theme alike
_COLORS = {
    "kw": "color:#a35bc4;font-weight:bold",
    "op": "color:#2f7fc1",
    "var": "color:#b8742a",
    "gvar": "color:#1f9a8a;font-weight:bold",
    "num": "color:#3a9a4a",
    "str": "color:#c0504d",
    "attr": "color:#8c6d46",
    "comment": "color:#8a8a8a",
    "type": "color:#8a8a8a",
    "tkw": "color:#6a7fb0",
    "dtype": "color:#7f6fc4",
    "dim": "color:#3a9a4a",
    "meta": "color:#c0504d;font-style:italic",
    "ctor": "color:#1f9a8a",
    "fn": "color:#1f9a8a",
    "serial": "color:#8a8a8a",
    "parallel": "color:#d1482f;font-weight:bold",
    "vectorized": "color:#2f7fc1;font-weight:bold",
    "unrolled": "color:#a35bc4;font-weight:bold",
    "alloc": "color:#b8742a;font-weight:bold",
    "buf": "color:#1f9a8a",
    "reg": "color:#8c6d46",
    "zmm": "color:#d1482f;font-weight:bold",
    "fma": "color:#d1482f;font-weight:bold",
    "mnemonic": "color:#2f7fc1",
    "label": "color:#1f9a8a;font-weight:bold",
    "directive": "color:#8a8a8a",
    "add": "color:#3a9a4a",
    "del": "color:#c0504d",
}
_OPEN = {k: f'<span class="rb-{k}" style="{v}">' for k, v in _COLORS.items()}
_CLOSE = "</span>"

_BOX = ('<div class="rb-view" style="font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,'
        'monospace;font-size:12px;line-height:1.4">')
_PRE = '<div class="rb-code" style="white-space:pre;overflow-x:auto">'
_SUMMARY = '<summary style="cursor:pointer;white-space:pre">'
_MUTED = "color:#8a8a8a"
_TABLE = '<table class="rb-table" style="border-collapse:collapse;font-family:inherit;font-size:inherit">'
_CELL = 'style="text-align:left;padding:1px 8px;border-bottom:1px solid rgba(128,128,128,0.3)"'

#: programs with more lines than this start with their bodies collapsed
COLLAPSE_LINES = 200


def _esc(text) -> str:
    return _html.escape(str(text), quote=True)


def _span(kind: str, text: str) -> str:
    """``text`` (already escaped) in the span of ``kind``."""
    return _OPEN[kind] + text + _CLOSE


def _muted(text: str) -> str:
    return f'<span style="{_MUTED}">{_esc(text)}</span>'


def _table(rows: list) -> str:
    """A plain table of dicts (the keys of the first row are the columns), escaped."""
    if not rows:
        return f"<p>{_muted('(empty)')}</p>"
    cols = list(rows[0])
    head = "".join(f"<th {_CELL}>{_esc(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td {_CELL}>{_esc(r.get(c, ''))}</td>" for c in cols)
                   + "</tr>" for r in rows)
    return f"{_TABLE}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _details(summary_html: str, body_html: str, css_class: str, is_open: bool) -> str:
    flag = " open" if is_open else ""
    return (f'<details class="{css_class}"{flag}>{_SUMMARY}{summary_html}</summary>'
            f"{body_html}</details>")


# ---- Relay text ------------------------------------------------------------------------------

_RELAY_KEYWORDS = frozenset({"fn", "let", "if", "else", "match", "match?", "def", "type", "ref",
                             "ref_read", "ref_write", "free_var", "extern"})
_TYPE_WORDS = frozenset({"Tensor", "Tuple", "Ref", "fn"})
_DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                     "uint64", "float16", "bfloat16", "float32", "float64"})

# Tokens of Relay text. The text is HTML-escaped before it is tokenized (escaping leaves the
# tokens below intact: quotes are kept, and ``&lt;`` never reads as any of them).
_RELAY_TOKEN = re.compile(r"""
    (?P<comment>/\*.*?\*/|//[^\n]*)
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<meta>meta\[[\w.]+\]\[\d+\])
  | (?P<gvar>@[A-Za-z_][\w.]*)
  | (?P<var>%[\w.]+)
  | (?P<word>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)
  | (?P<num>(?<![\w.])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?(?:[fiu]\d*)?)
""", re.X)

_TYPE_TOKEN = re.compile(r"""
    (?P<word>[A-Za-z_]\w*)
  | (?P<num>\d+)
  | (?P<sym>\?)
""", re.X)

_OPDEFS: dict = {}


def _opdef(name: str):
    """The OpDef named ``name`` or None (cached; the registry is loaded once)."""
    if name in _OPDEFS:
        return _OPDEFS[name]
    from ..op.registry import lookup_opdef
    d = lookup_opdef(name)
    _OPDEFS[name] = d
    return d


def _relay_line(line: str, ops: list) -> str:
    """One line of Relay text as HTML; appends the operator names called on it to ``ops``."""
    text = _html.escape(line, quote=False)
    out = []
    last = 0
    for m in _RELAY_TOKEN.finditer(text):
        kind = m.lastgroup
        tok = m.group()
        start, end = m.span()
        if kind == "word":
            nxt = text[end:end + 1]
            if nxt == "(" and _opdef(tok) is not None:
                ops.append(tok)
                kind = "op"
            elif tok in _RELAY_KEYWORDS:
                kind = "kw"
            elif tok in _DTYPES:
                kind = "dtype"
            elif tok in _TYPE_WORDS:
                kind = "tkw"
            elif nxt == "=" and text[end + 1:end + 2] != "=":
                kind = "attr"
            elif nxt == "(" and tok[:1].isupper():
                kind = "ctor"
            else:
                continue
        elif kind == "comment":
            kind = "type" if tok.startswith("/* ty=") else "comment"
        if start > last:
            out.append(text[last:start])
        out.append(_OPEN[kind] + tok + _CLOSE)
        last = end
    out.append(text[last:])
    return "".join(out)


def type_html(ty) -> str:
    """A type's text with its words, dtypes and dimensions highlighted (no container)."""
    from ..ir.types import type_str
    text = _html.escape(type_str(ty), quote=False)
    out, last = [], 0
    for m in _TYPE_TOKEN.finditer(text):
        tok, kind = m.group(), m.lastgroup
        if kind == "word":
            if tok in _DTYPES:
                kind = "dtype"
            elif tok in _TYPE_WORDS:
                kind = "tkw"
            elif tok in ("lt", "gt", "amp"):      # parts of an escaped < > &
                continue
            else:
                kind = "var"
        elif kind in ("num", "sym"):
            kind = "dim"
        out.append(text[last:m.start()])
        out.append(_OPEN[kind] + tok + _CLOSE)
        last = m.end()
    out.append(text[last:])
    return '<code class="rb-type-view">' + "".join(out) + "</code>"


# The header of a block the view folds: a global function, or a fused Primitive function bound
# to a variable (``%3 = fn (...) ... {``) or standing alone.
_DEF_HEAD = re.compile(r"^def (@[\w.]+)")
_FN_HEAD = re.compile(r"^(?:(%[\w.]+) = )?fn\b")
_PARAM = re.compile(r"%[\w.]+:")


class _Block:
    __slots__ = ("kind", "name", "start", "end", "indent", "ops", "params", "children", "binder")

    def __init__(self, kind: str, name: str, start: int, indent: int, params: int, binder: str):
        self.kind, self.name, self.start, self.indent = kind, name, start, indent
        self.params, self.binder = params, binder
        self.end = -1
        self.ops: list = []
        self.children: list = []


def _block_head(line: str, stripped: str, indent: int, index: int) -> Optional[_Block]:
    if not stripped.endswith("{"):
        return None
    if indent == 0:
        m = _DEF_HEAD.match(stripped)
        if m:
            return _Block("function", m.group(1), index, indent, _count_params(stripped), "")
    m = _FN_HEAD.match(stripped)
    if m and "Primitive=1" in stripped:
        return _Block("fused", "", index, indent, _count_params(stripped), m.group(1) or "")
    return None


def _count_params(header: str) -> int:
    """Parameters of a function header (``%name:`` before the closing parenthesis of the list)."""
    depth, end = 0, len(header)
    start = header.find("(")
    for i in range(start, len(header)):
        c = header[i]
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
            if depth == 0:
                end = i
                break
    return len(_PARAM.findall(header, start, end))


class RelayLayout:
    """Relay text split into lines, each highlighted, and the folded blocks (global functions
    and fused groups) found in it: what :func:`relay_html` renders, and what tests and widgets
    can count."""

    def __init__(self, text: str):
        self.text = text
        self.lines = text.split("\n")
        self.html_lines: list = []
        self.blocks: list = []        # every block, in order of its first line
        self.roots: list = []         # the outermost blocks
        self.ops: list = []           # every operator call, in text order
        stack: list = []
        for i, line in enumerate(self.lines):
            stripped = line.lstrip(" ")
            indent = len(line) - len(stripped)
            while stack and stripped and indent <= stack[-1].indent and i > stack[-1].start:
                closing = stack[-1]
                if stripped.startswith("}") and indent == closing.indent:
                    closing.end = i
                    stack.pop()
                    break                         # this line closes it; it belongs to it
                closing.end = i - 1               # malformed: close before this line
                stack.pop()
            ops: list = []
            self.html_lines.append(_relay_line(line, ops))
            self.ops.extend(ops)
            for b in stack:
                b.ops.extend(ops)
            block = _block_head(line, stripped, indent, i)
            if block is not None:
                block.ops.extend(ops)
                (stack[-1].children if stack else self.roots).append(block)
                self.blocks.append(block)
                stack.append(block)
        for b in stack:
            b.end = len(self.lines) - 1
        for b in self.blocks:
            if b.kind == "fused":
                b.name = _fused_name(b.ops)

    @property
    def fused(self) -> list:
        return [b for b in self.blocks if b.kind == "fused"]

    @property
    def functions(self) -> list:
        return [b for b in self.blocks if b.kind == "function"]


def _fused_name(ops: list) -> str:
    """Relay's name for a fused function: ``fused_`` and its operators (capped in length)."""
    if not ops:
        return "fused"
    name = "fused_" + "_".join(o.replace(".", "_") for o in ops)
    return name if len(name) <= 80 else name[:72] + f"_{len(ops)}ops"


def _pattern_kind(ops: list) -> str:
    """The strongest pattern kind of ``ops`` (an unregistered op counts as OPAQUE)."""
    from ..op.registry import OpPattern
    best = -1
    for name in ops:
        d = _opdef(name)
        kind = int(d.pattern) if d is not None else int(OpPattern.OPAQUE)
        best = max(best, kind)
    return OpPattern(best).name if best >= 0 else "none"


def _block_summary(b: _Block) -> str:
    n_ops = len(b.ops)
    counts = f"{b.params} param{'s' if b.params != 1 else ''}, {n_ops} op{'s' if n_ops != 1 else ''}"
    if b.kind == "function":
        fused = sum(1 for c in _walk_blocks(b.children) if c.kind == "fused")
        extra = f", {fused} fused group{'s' if fused != 1 else ''}" if fused else ""
        lines = f"lines {b.start + 1}-{b.end + 1}"
        return f"{_span('gvar', _esc(b.name))} {_muted(f'({counts}{extra}, {lines})')}"
    binder = f"{_span('var', _esc(b.binder))} " if b.binder else ""
    return (f"{binder}{_span('fn', _esc(b.name))} "
            f"{_span('kw', _esc(_pattern_kind(b.ops)))} {_muted(f'({counts})')}")


def _walk_blocks(blocks: list):
    stack = list(reversed(blocks))
    while stack:
        b = stack.pop()
        yield b
        stack.extend(reversed(b.children))


def _render_lines(layout: RelayLayout, begin: int, end: int, blocks: list, is_open: bool,
                  out: list) -> None:
    """Lines ``begin..end`` (inclusive), the given blocks among them folded, appended to
    ``out``. Blocks nest as the program does, so this walks with an explicit stack."""
    work: list = [("range", begin, end, blocks)]
    while work:
        item = work.pop()
        tag = item[0]
        if tag == "lines":
            out.append(_PRE + "\n".join(layout.html_lines[item[1]:item[2] + 1]) + "</div>")
        elif tag == "open":
            block = item[1]
            css = "rb-fused" if block.kind == "fused" else "rb-func"
            flag = " open" if is_open else ""
            out.append(f'<details class="{css}"{flag}>{_SUMMARY}{_block_summary(block)}</summary>')
        elif tag == "close":
            out.append("</details>")
        else:
            _, a, b, children = item
            todo: list = []
            pos = a
            for child in children:
                if pos < child.start:
                    todo.append(("lines", pos, child.start - 1))
                todo += [("open", child), ("range", child.start, child.end, child.children),
                         ("close",)]
                pos = child.end + 1
            if pos <= b:
                todo.append(("lines", pos, b))
            work.extend(reversed(todo))


def _bytes_text(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _tensor_bytes(ty) -> Optional[int]:
    import numpy as np
    from ..ir.types import TensorType
    if not isinstance(ty, TensorType):
        return None
    n = 1
    for d in ty.shape:
        if not isinstance(d, (int, np.integer)):
            return None
        n *= int(d)
    return n * np.dtype(ty.dtype if ty.dtype != "bfloat16" else "uint16").itemsize


def _module_header(mod, layout_counts: tuple) -> str:
    """Functions, operators, fused groups; @main's parameters and the constants, with bytes."""
    from ..ir.expr import Constant
    from ..ir.functor import post_order
    n_funcs, n_ops, n_fused, n_lines = layout_counts
    parts = [f"{n_funcs} function{'s' if n_funcs != 1 else ''}", f"{n_ops} ops",
             f"{n_fused} fused group{'s' if n_fused != 1 else ''}"]
    main = None
    for gv, f in mod.functions.items():
        if gv.name_hint == "main":
            main = f
    if main is not None:
        sizes = [_tensor_bytes(p.type_annotation if p.type_annotation is not None
                               else p.type_or_none) for p in main.params]
        known = sum(s for s in sizes if s is not None)
        parts.append(f"@main: {len(main.params)} parameters, {_bytes_text(known)}")
    consts, const_bytes = 0, 0
    seen: set = set()
    for f in mod.functions.values():
        for node in post_order(f):
            if isinstance(node, Constant) and id(node) not in seen:
                seen.add(id(node))
                consts += 1
                const_bytes += int(getattr(node.data, "nbytes", 0))
    if consts:
        parts.append(f"{consts} constants, {_bytes_text(const_bytes)}")
    parts.append(f"{n_lines} lines")
    return _esc(" · ".join(parts))


def relay_html(obj, collapse_lines: Optional[int] = None) -> str:
    """An IRModule or an expression as highlighted, folded Relay text (see the module)."""
    from ..ir.module import IRModule
    text = obj.astext(show_meta_data=False)
    if isinstance(obj, IRModule):
        layout = RelayLayout(text)
        counts = (len(layout.functions), len(layout.ops), len(layout.fused), len(layout.lines))
        return _render_relay_layout(layout, _module_header(obj, counts), collapse_lines)
    return _render_relay_layout(RelayLayout(text), "", collapse_lines)


def _render_relay_layout(layout: RelayLayout, header: str, collapse_lines: Optional[int]) -> str:
    limit = COLLAPSE_LINES if collapse_lines is None else collapse_lines
    is_open = len(layout.lines) <= limit
    out = [_BOX]
    if header:
        out.append(f'<div class="rb-header" style="{_MUTED};padding-bottom:2px">{header}</div>')
    _render_lines(layout, 0, len(layout.lines) - 1, layout.roots, is_open, out)
    out.append("</div>")
    return "".join(out)


# ---- loop IR, LLVM IR, assembly ----------------------------------------------------------------

_LOOP_TOKEN = re.compile(r"""
    (?P<str>"[^"\n]*")
  | (?P<word>[A-Za-z_]\w*)
  | (?P<num>(?<![\w.])\d+(?:\.\d+)?(?:e[+-]?\d+)?)
""", re.X)
_LOOP_WORDS = {"def": "kw", "for": "kw", "in": "kw", "if": "kw", "else": "kw", "not": "kw",
               "and": "kw", "or": "kw", "select": "kw", "serial": "serial",
               "parallel": "parallel", "vectorized": "vectorized", "unrolled": "unrolled",
               "allocate": "alloc", "Buffer": "tkw"}


def _loop_line(line: str) -> str:
    text = _html.escape(line, quote=False)
    out, last = [], 0
    for m in _LOOP_TOKEN.finditer(text):
        tok, kind = m.group(), m.lastgroup
        if kind == "word":
            kind = _LOOP_WORDS.get(tok)
            if kind is None:
                if tok in _DTYPES:
                    kind = "dtype"
                elif text[m.end():m.end() + 1] == "[":
                    kind = "buf"
                else:
                    continue
        out.append(text[last:m.start()])
        out.append(_OPEN[kind] + tok + _CLOSE)
        last = m.end()
    out.append(text[last:])
    return "".join(out)


def loops_html(text: str) -> str:
    """Loop IR text (``def ...(...):`` and its nests) highlighted, in a code block."""
    return _PRE + "\n".join(_loop_line(line) for line in text.split("\n")) + "</div>"


_LLVM_TOKEN = re.compile(r"""
    (?P<comment>;[^\n]*)
  | (?P<str>c?"[^"\n]*")
  | (?P<gvar>@[\w.$-]+)
  | (?P<var>%[\w.$-]+)
  | (?P<meta>![\w.]+)
  | (?P<word>[A-Za-z_][\w.]*)
  | (?P<num>(?<![\w.])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?)
""", re.X)
_LLVM_TYPES = re.compile(r"^(?:i\d+|float|double|half|bfloat|void|ptr|label|x)$")
_LLVM_KEYWORDS = frozenset({"define", "declare", "attributes", "target", "source_filename",
                            "entry", "to", "nsw", "nuw", "align", "noalias", "readonly",
                            "writeonly", "poison", "undef", "zeroinitializer", "splat",
                            "inbounds", "fast", "local_unnamed_addr", "captures", "none"})


def llvm_html(text: str) -> str:
    """LLVM IR highlighted: values, globals, types, instructions (``fmul``...), comments."""
    lines = []
    for line in text.split("\n"):
        t = _html.escape(line, quote=False)
        out, last = [], 0
        for m in _LLVM_TOKEN.finditer(t):
            tok, kind = m.group(), m.lastgroup
            if kind == "word":
                if _LLVM_TYPES.match(tok):
                    kind = "dtype"
                elif tok in _LLVM_KEYWORDS:
                    kind = "kw"
                elif tok.startswith("llvm."):
                    kind = "op"
                elif t[m.end():m.end() + 1] == ":" and m.start() == 0:
                    kind = "label"
                else:
                    kind = "fma" if tok.startswith("fma") or tok == "fmuladd" else "mnemonic"
            elif kind == "gvar" and tok.startswith("@llvm.fma"):
                kind = "fma"
            out.append(t[last:m.start()])
            out.append(_OPEN[kind] + tok + _CLOSE)
            last = m.end()
        out.append(t[last:])
        lines.append("".join(out))
    return _PRE + "\n".join(lines) + "</div>"


_ASM_LINE = re.compile(r"^(\s*)(\S+)(.*)$")
_ASM_OPERAND = re.compile(r"""
    (?P<comment>\#[^\n]*)
  | (?P<reg>%[a-z]\w*)
  | (?P<num>\$?-?(?:0x[0-9a-fA-F]+|\d+))
  | (?P<label>\.L\w+)
""", re.X)


def asm_html(text: str) -> str:
    """x86 assembly highlighted: labels, directives, mnemonics (fused multiply-adds marked),
    registers (``zmm`` ones marked), immediates, comments."""
    lines = []
    for line in text.split("\n"):
        m = _ASM_LINE.match(line)
        if not m:
            lines.append(_esc(line))
            continue
        pad, head, rest = m.groups()
        if head.startswith("#"):
            lines.append(pad + _span("comment", _esc(head + rest)))
            continue
        if head.endswith(":"):
            kind = "label"
        elif head.startswith("."):
            kind = "directive"
        elif head.startswith("vfmadd") or head.startswith("vfnmadd") or head.startswith("vfmsub"):
            kind = "fma"
        else:
            kind = "mnemonic"
        body = _html.escape(rest, quote=False)
        out, last = [], 0
        if kind != "directive":
            for t in _ASM_OPERAND.finditer(body):
                tok, tk = t.group(), t.lastgroup
                if tk == "reg" and tok.startswith("%zmm"):
                    tk = "zmm"
                out.append(body[last:t.start()])
                out.append(_OPEN[tk] + tok + _CLOSE)
                last = t.end()
        out.append(body[last:])
        lines.append(pad + _span(kind, _esc(head)) + "".join(out))
    return _PRE + "\n".join(lines) + "</div>"


# ---- passes ------------------------------------------------------------------------------------

#: how many changed passes of a Snapshots view carry their module, and up to what text size
MAX_MODULES = 3
MAX_MODULE_CHARS = 400_000
#: a pass's diff starts open when it has at most this many lines
DIFF_OPEN_LINES = 200


def _diff_html(diff: str) -> str:
    lines = []
    for line in diff.split("\n"):
        if line.startswith("+") and not line.startswith("+++"):
            lines.append(_span("add", _esc(line)))
        elif line.startswith("-") and not line.startswith("---"):
            lines.append(_span("del", _esc(line)))
        else:
            lines.append(_esc(line))
    return _PRE + "\n".join(lines) + "</div>"


def snapshots_html(snaps, max_modules: int = MAX_MODULES) -> str:
    """The passes as a table, then each pass that changed the program with its module after
    (the first ``max_modules`` rendered; see the module)."""
    out = [_BOX]
    changed = snaps.changed()
    counts = f"{len(snaps)} passes, {len(snaps.skipped())} skipped, {len(changed)} changed the program"
    out.append(f'<div class="rb-header" style="{_MUTED}">{_esc(counts)}</div>')
    out.append(snaps.table()._repr_html_())
    for k, rec in enumerate(changed):
        facts = f"#{rec.index}: ops {rec.ops_before} -> {rec.ops_after}, {rec.seconds * 1e3:.2f} ms"
        summary = f"{_span('fn', _esc(rec.label))} {_muted(facts)}"
        if k < max_modules:
            text = rec.after_text or ""
            if len(text) <= MAX_MODULE_CHARS:
                body = relay_html(rec.after)
            else:
                body = _muted(f"(the module after it is {len(text.splitlines())} lines: "
                              f"html(snapshots[{rec.index}]) shows it)")
        else:
            body = _muted(f"(html(snapshots[{rec.index}]) shows the module after it)")
        out.append(_details(summary, body, "rb-pass", False))
    out.append("</div>")
    return "".join(out)


def pass_record_html(rec) -> str:
    """One pass: its row of the table, the module after it and the text diff (collapsed)."""
    out = [_BOX, _table([rec.row()])]
    if rec.after is not None:
        out.append(_details(_esc("module after"), relay_html(rec.after), "rb-module", False))
        diff = rec.diff() if rec.changed else ""
        n = diff.count("\n") + 1 if diff else 0
        out.append(_details(_esc(f"diff ({n} lines)" if diff else "diff (no change)"),
                            _diff_html(diff) if diff else "", "rb-diff", 0 < n <= DIFF_OPEN_LINES))
    out.append("</div>")
    return "".join(out)


# ---- compiled code ------------------------------------------------------------------------------

def _kernel_sources(compiled) -> str:
    parts = []
    for kind, title, render in (("llvm", "LLVM IR", llvm_html), ("asm", "assembly", asm_html)):
        try:
            text = compiled.source(kind)
        except Exception as err:     # a kernel without that source says why
            parts.append(_details(_esc(title), _muted(f"not available: {err}"), f"rb-{kind}", False))
            continue
        parts.append(_details(_esc(f"{title} ({len(text.splitlines())} lines)"), render(text),
                              f"rb-{kind}", False))
    return "".join(parts)


def kernel_html(kernel) -> str:
    """A compiled kernel (``CompiledKernel``, a build's ``GroupKernel`` or a host kernel): loop
    IR, then LLVM IR and assembly in collapsed sections."""
    from ..backends.build import GroupKernel, HostKernel
    out = [_BOX]
    compiled = kernel
    if isinstance(kernel, GroupKernel):
        out.append(f'<div class="rb-header">{_span("fn", _esc(kernel.name))} '
                   f"{_span('kw', _esc(kernel.pattern))} "
                   f"{_muted(f'rule {kernel.rule}; ops: ' + ', '.join(kernel.ops))}</div>")
        compiled = kernel.compiled
    if isinstance(compiled, HostKernel):
        out.append(_muted(f"host (reference) kernel: {compiled.reason}"))
        out.append(relay_html(compiled.func))
    else:
        if not isinstance(kernel, GroupKernel):
            facts = f"parallel extent {compiled.parallel_extent}" + (", phased" if compiled.phased else "")
            out.append(f'<div class="rb-header">{_span("fn", _esc(compiled.name))} {_muted(facts)}</div>')
        out.append(loops_html(compiled.source("loops")))
        out.append(_kernel_sources(compiled))
    out.append("</div>")
    return "".join(out)


def lowered_html(lowered) -> str:
    """A lowered fused group: name, pattern kind, anchor, rule, ops, flops, then its loop IR."""
    info = (f"rule {lowered.rule}; anchor {lowered.anchor}; ops: {', '.join(lowered.ops)}; "
            f"{lowered.flops} flops; {len(lowered.input_types)} inputs, "
            f"{len(lowered.output_types)} outputs, {len(lowered.constants)} constants")
    return (f'{_BOX}<div class="rb-header">{_span("fn", _esc(lowered.name))} '
            f"{_span('kw', _esc(lowered.pattern))} {_muted(info)}</div>"
            f"{loops_html(lowered.source())}</div>")


def graph_module_html(gm) -> str:
    """A compiled graph (see the module): summary, compile statistics, memory plan, calls, and
    each kernel's loop IR collapsed."""
    stats = gm.compile_stats
    plan = gm.memory_plan()
    nodes = gm.graph.nodes
    kernels = gm.kernels
    host = len(gm.host_groups)
    head = (f"GraphModule · target {gm.target} · {gm.num_threads} thread"
            f"{'s' if gm.num_threads != 1 else ''} · {len(nodes)} calls of {len(kernels)} kernels"
            + (f" ({host} on the host)" if host else ""))
    out = [_BOX, f'<div class="rb-header" style="font-weight:bold">{_esc(head)}</div>']
    inputs = ", ".join(f"{name}: {gm.graph.entries[e].type_text}" for name, e in gm.graph.inputs)
    out.append(f"<div>{_muted('inputs: ')}{_esc(inputs)}</div>")
    if stats is not None:
        out.append(f"<div>{_muted('compile: ')}{_esc(_stats_text(stats))}</div>")
    out.append(f"<div>{_muted('memory: ')}{_esc(_plan_text(plan))}</div>")
    rows = []
    accel = any(getattr(k, "accel", False) for k in kernels)   # an accelerator build: say where
    for i, node in enumerate(nodes):
        k = node.kernel
        row = {"#": i, "call": node.name, "pattern": k.pattern, "rule": k.rule}
        if accel:
            row["runs on"] = "accelerator" if k.accel else "CPU"
        row.update({"ops": ", ".join(k.ops),
                    "outputs": ", ".join(gm.graph.entries[e].type_text for e in node.outputs)})
        rows.append(row)
    out.append(_details(_esc(f"calls ({len(rows)})"), _table(rows), "rb-calls", len(rows) <= 40))
    for k in kernels:
        summary = (f"{_span('fn', _esc(k.name))} {_span('kw', _esc(k.pattern))} "
                   f"{_muted(f'rule {k.rule}; {len(k.ops)} ops')}")
        try:
            body = loops_html(k.source("loops"))
        except Exception as err:
            body = _muted(f"no loop IR: {err}")
        out.append(_details(summary, body, "rb-kernel", False))
    out.append("</div>")
    return "".join(out)


def _stats_text(stats) -> str:
    return (f"{stats.groups} groups, {stats.kernels} kernels ({stats.host_kernels} on the host); "
            f"optimize {stats.optimize_seconds:.2f} s, lower {stats.lower_seconds:.2f} s, "
            f"compile {stats.compile_seconds:.2f} s, total {stats.total_seconds:.2f} s; "
            f"LLVM compiled {stats.llvm_compiled}, from disk {stats.from_disk}, "
            f"from memory {stats.from_memory}"
            + ("; passes from the build cache" if getattr(stats, "optimize_cached", False)
               else ""))


def _plan_text(plan) -> str:
    saved = 1 - plan.planned_bytes / plan.unplanned_bytes if plan.unplanned_bytes else 0.0
    return (f"{plan.tensors} tensors in {plan.storages} storages; "
            f"{_bytes_text(plan.planned_bytes)} planned vs {_bytes_text(plan.unplanned_bytes)} "
            f"without reuse ({saved:.0%} saved); inputs {_bytes_text(plan.input_bytes)}, "
            f"constants {_bytes_text(plan.constant_bytes)}")


def benchmark_html(result) -> str:
    """A benchmark's one line: median ± deviation, the range, and repeats x runs."""
    from ..backends.graph_executor import _ms_text
    line = (f"{_ms_text(result.median_ms)} ms ± {_ms_text(result.std_ms)} "
            f"(median of {result.repeat} x {result.number}; min {_ms_text(result.min_ms)}, "
            f"max {_ms_text(result.max_ms)} ms)")
    return f'{_BOX}<span class="rb-benchmark">{_esc(line)}</span></div>'


# ---- dispatch ---------------------------------------------------------------------------------

def _relay_view(obj, **options) -> str:
    return relay_html(obj, collapse_lines=options.get("collapse_lines"))


def _type_view(obj, **options) -> str:
    return _BOX + type_html(obj) + "</div>"


def _table_view(obj, **options) -> str:
    own = getattr(obj, "_repr_html_", None)
    return own() if own is not None else _table(list(obj.rows))


def _snapshots_view(obj, **options) -> str:
    return snapshots_html(obj, options.get("max_modules", MAX_MODULES))


def _prim_func_view(obj, **options) -> str:
    from ..te.loop_ir import to_text
    return _BOX + loops_html(to_text(obj)) + "</div>"


# (module, class name, renderer), most specific first; classes are imported on first use
_VIEWS = (
    ("relaybench.ir.module", "IRModule", _relay_view),
    ("relaybench.ir.expr", "Expr", _relay_view),
    ("relaybench.ir.types", "Type", _type_view),
    ("relaybench.passes.instruments", "Snapshots", _snapshots_view),
    ("relaybench.passes.instruments", "PassRecord", lambda o, **k: pass_record_html(o)),
    ("relaybench.backends.graph_executor", "GraphModule", lambda o, **k: graph_module_html(o)),
    ("relaybench.backends.graph_executor", "BenchmarkResult", lambda o, **k: benchmark_html(o)),
    ("relaybench.backends.build", "GroupKernel", lambda o, **k: kernel_html(o)),
    ("relaybench.backends.build", "HostKernel", lambda o, **k: kernel_html(o)),
    ("relaybench.backends.llvm.codegen", "CompiledKernel", lambda o, **k: kernel_html(o)),
    ("relaybench.backends.lowering", "LoweredFunc", lambda o, **k: lowered_html(o)),
    ("relaybench.te.loop_ir", "PrimFunc", _prim_func_view),
    ("relaybench.viz.table", "Table", _table_view),
)


def html(obj, **options) -> str:
    """The rich notebook view of ``obj`` as an HTML string (see the module for what each kind
    of object shows). Options: ``collapse_lines`` (Relay text longer than this starts folded)
    and ``max_modules`` (modules carried by a Snapshots view). Anything else shows as its
    escaped ``repr``."""
    import sys
    for module_name, class_name, render in _VIEWS:
        module = sys.modules.get(module_name)
        if module is None:
            continue          # no object of a class exists before its module is imported
        cls = getattr(module, class_name)
        if isinstance(obj, cls):
            return render(obj, **options)
    return f"{_BOX}<pre>{_esc(repr(obj))}</pre></div>"
