"""Relay's text format, version 0.0.5: the printer.

:func:`astext` prints a module, an expression or a type the way TVM's Relay prints them, and
:func:`relaybench.ir.parser.parse` reads the text back into the same structure.

* Graph form: every call, tuple, projection, ``if``, ``match``, closure and reference operation
  that is not the final value of its block is bound once to a numbered temporary
  (``%0 = nn.relu(%x);``) and referred to by that name; shared nodes are bound once. A node used
  from several blocks (both branches of an ``if``, say) is bound in the innermost block that
  encloses every use.
* Variables, globals, operators, constructors and scalar constants print inline; other constants
  print as ``meta[relay.Constant][i]`` and the ``#[metadata]`` section at the end holds their data.
* With ``show_types``, each node that has a checked type carries ``/* ty=... */``.
* Variable names are kept unless two variables in scope would print alike; then the later one is
  renamed (``%x1``), so that the text reads back to the same program. A name that is not a plain
  identifier is quoted (``%"input:0"``, ``@"my f"``) and reads back as it was; Relay prints such
  names bare (which its parser cannot read), so the quoted form is this project's own. A variable
  with an empty name prints as ``%v``, as in Relay.
* Options, all off by default: ``show_header`` puts ``#[version = "0.0.5"]`` before a lone
  expression too (Relay's ``astext`` always does; a module always has it); ``show_spans`` adds
  ``span=source:line:column`` to a node's ``/* ... */`` comment, as Relay does; and
  ``show_constant_types`` annotates each constant with its type (``meta[relay.Constant][0]
  /* ty=Tensor[(3), float32] */``, ``1f /* ty=float32 */``).
* ``mark=node`` underlines that node's text with ``^`` on the next line.

Everything is iterative: a chain of 100,000 operators prints.

>>> from relaybench.ir import var, Function
>>> from relaybench import op
>>> x = var("x", shape=(1, 3))
>>> y = op.nn.relu(x * x)
>>> y.set_checked_type(x.type_annotation)
>>> print(astext(Function([x], y + x)))
fn (%x: Tensor[(1, 3), float32]) {
  %0 = multiply(%x, %x);
  %1 = nn.relu(%0) /* ty=Tensor[(1, 3), float32] */;
  add(%1, %x)
}
"""

from __future__ import annotations

import base64
import json
import math
import re
from typing import Optional

import numpy as np

from .._gc import gc_paused
from .adt import TypeData
from .expr import (Call, Constant, Constructor, Expr, Function, GlobalVar, If, Let, Match, Op,
                   PatternConstructor, PatternTuple, PatternVar, PatternWildcard, RefCreate, RefRead,
                   RefWrite, Tuple, TupleGetItem, Var, expr_children, pattern_vars)
from .module import IRModule
from .symbolic import format_dim
from .types import (FuncType, GlobalTypeVar, IncompleteType, RefType, TensorType, TupleType, Type,
                    TypeCall, TypeRelation, TypeVar, type_children)

__all__ = ["astext", "VERSION", "format_scalar"]

VERSION = "0.0.5"

# Sentinels around the marked node's text; they never occur in printed text (strings are escaped).
_MARK_OPEN, _MARK_CLOSE = "\x02", "\x03"

_ATOMS = (Var, GlobalVar, Op, Constructor, Constant)

_INT_SUFFIX = {"int8": "i8", "int16": "i16", "int32": "", "int64": "i64",
               "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64"}
_FLOAT_SUFFIX = {"float16": "f16", "float32": "f", "float64": "f64"}


def astext(obj, show_types: bool = True, show_meta_data: bool = True, mark=None,
           show_header: bool = False, show_spans: bool = False,
           show_constant_types: bool = False) -> str:
    """The Relay text of an :class:`IRModule`, an expression, a type or an ADT definition.

    A module starts with ``#[version = "0.0.5"]``; a lone expression does only with
    ``show_header`` (its free variables are declared with ``free_var``). ``show_types`` adds
    ``/* ty=... */`` after each node whose type is known; ``show_meta_data`` appends the
    ``#[metadata]`` section holding the constants printed as ``meta[relay.Constant][i]``;
    ``mark`` underlines one node; ``show_spans`` adds where the parser found each node
    (``/* ty=... span=<string>:3:5 */``); ``show_constant_types`` annotates constants with
    their types.

    >>> from relaybench.ir import const
    >>> print(astext(const(np.zeros(2, "float32")) + const(1.0), show_header=True,
    ...              show_constant_types=True, show_meta_data=False))
    #[version = "0.0.5"]
    add(meta[relay.Constant][0] /* ty=Tensor[(2), float32] */, 1f /* ty=float32 */)
    """
    printer = _Printer(show_types, mark, show_spans, show_constant_types)
    if isinstance(obj, IRModule):
        with gc_paused():
            text = printer.module_text(obj)
    elif isinstance(obj, Expr):
        with gc_paused():
            text = printer.root_text(obj, None)
        if show_header:
            text = f'#[version = "{VERSION}"]\n' + text
    elif isinstance(obj, Type):
        return printer.type_text(obj, {})
    elif isinstance(obj, TypeData):
        return printer.type_data_text(obj)
    else:
        raise TypeError(f"astext prints an IRModule, an expression or a type, not {type(obj).__name__}")
    if show_meta_data and printer.meta:
        text += "\n" + _metadata_section(printer.meta)
    if mark is not None:
        text = _apply_mark(text)
    return text



def module_text_and_constants(mod: IRModule) -> tuple:
    """``(text, constants)``: the module's text without types and without its ``#[metadata]``
    section, and the :class:`Constant` nodes its ``meta[relay.Constant][i]`` name, in order
    (``parse(text, init_meta_table={"relay.Constant": constants})`` reads it back). What the
    build cache keeps: the tensors travel as bytes, not as text.

    >>> from relaybench.ir import const, var, Function
    >>> x = var("x", shape=(2,))
    >>> text, consts = module_text_and_constants(IRModule.from_expr(
    ...     Function([x], x + const(np.ones(2, "float32")))))
    >>> "meta[relay.Constant][0]" in text, len(consts)
    (True, 1)
    """
    printer = _Printer(False, None, False, False)
    with gc_paused():
        text = printer.module_text(mod)
    return text, list(printer.meta)

# ---------------------------------------------------------------------------------------------
# Leaves: scalars, attribute values, names

def format_scalar(arr: np.ndarray) -> Optional[str]:
    """The inline text of a rank-0 constant (``1``, ``0i64``, ``2.5f``, ``True``), or None when
    it has to go to the metadata section (non-finite floats, unusual dtypes)."""
    dtype = arr.dtype.name
    value = arr[()]
    if dtype == "bool":
        return "True" if bool(value) else "False"
    if dtype in _INT_SUFFIX:
        return f"{int(value)}{_INT_SUFFIX[dtype]}"
    if dtype in _FLOAT_SUFFIX:
        if not math.isfinite(float(value)):
            return None
        return _float_text(value) + _FLOAT_SUFFIX[dtype]
    return None


def _float_text(value) -> str:
    """The shortest digits that read back to exactly this float (of its own precision)."""
    magnitude = abs(float(value))
    if magnitude == 0 or 1e-4 <= magnitude < 1e16:
        return np.format_float_positional(value, unique=True, trim="-")
    return np.format_float_scientific(value, unique=True, trim="-")


def _attr_text(value) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return json.dumps(repr(value))
        return _float_text(value) + "f"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_attr_text(v) for v in value) + "]"
    if isinstance(value, np.generic):
        return _attr_text(value.item())
    return json.dumps(str(value))


_BAD_NAME_CHARS = re.compile(r"[^A-Za-z0-9_]")
_PLAIN_LOCAL = re.compile(r"[A-Za-z0-9_]*[A-Za-z_][A-Za-z0-9_]*")
_PLAIN_GLOBAL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def _local_text(name: str) -> str:
    """``%name``, quoted (``%"a b"``) when the name is not a plain identifier."""
    return "%" + (name if _PLAIN_LOCAL.fullmatch(name) else json.dumps(name))


def _global_text(name: str) -> str:
    """``@name``, quoted (``@"a b"``) when the name is not a plain (dotted) identifier."""
    return "@" + (name if _PLAIN_GLOBAL.fullmatch(name) else json.dumps(name))


def _sanitize(name: str) -> str:
    name = _BAD_NAME_CHARS.sub("_", name or "")
    if not name or name[0].isdigit():
        name = "v" + name
    return name


def _metadata_section(constants: list) -> str:
    entries = []
    for c in constants:
        arr = np.asarray(c.data)
        raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes(order="C")
        entries.append(json.dumps({"dtype": arr.dtype.name, "shape": list(arr.shape),
                                   "data": base64.b64encode(raw).decode("ascii")}))
    body = ",\n".join("    " + e for e in entries)
    return '#[metadata]\n{\n  "relay.Constant": [\n' + body + "\n  ]\n}"


def _apply_mark(text: str) -> str:
    start = text.find(_MARK_OPEN)
    if start < 0:
        return text
    end = text.find(_MARK_CLOSE, start)
    clean = text.replace(_MARK_OPEN, "").replace(_MARK_CLOSE, "")
    end = len(clean) if end < 0 else end - 1
    line_start = clean.rfind("\n", 0, start) + 1
    line_end = clean.find("\n", start)
    if line_end < 0:
        line_end = len(clean)
    width = max(1, min(end, line_end) - start)
    carets = " " * (start - line_start) + "^" * width
    return clean[:line_end] + "\n" + carets + clean[line_end:]


# ---------------------------------------------------------------------------------------------
# Blocks: a function body, an if branch, a match clause, or a parenthesized let-chain.

class _Block:
    __slots__ = ("parent", "depth", "lines", "tail", "names", "head", "doc")

    def __init__(self, parent: Optional["_Block"], head=None):
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.lines: list = []
        self.tail = ""
        self.names: list = []   # variable names bound here, freed when the block ends
        self.head = head        # the Let that opens a parenthesized let-chain
        self.doc = ""


def _lca(a: _Block, b: _Block) -> _Block:
    while a.depth > b.depth:
        a = a.parent
    while b.depth > a.depth:
        b = b.parent
    while a is not b:
        a, b = a.parent, b.parent
    return a


# Multi-line text is built as a document tree, rendered once at the end, so that nesting a block
# inside another costs nothing (re-indenting strings at every level would be quadratic in depth).
# A document is a str (one line's worth of text) or a list of documents and these markers:
_NL, _IN, _OUT = object(), object(), object()   # new line, indent one level more, one level less


def _cat(*parts):
    """Concatenate documents, staying a plain str when every part is one."""
    for p in parts:
        if not isinstance(p, str):
            return list(parts)
    return "".join(parts)


def _block_doc(head: str, body, tail: str) -> list:
    """``head`` + the body indented on its own lines + ``tail`` on a line of its own."""
    return [head, _IN, _NL, body, _OUT, _NL, tail]


def _render(doc) -> str:
    if isinstance(doc, str):
        return doc
    out: list = []
    emit = out.append
    level = 0
    breaks = ["\n"]
    stack = [iter(doc)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, str):
                emit(item)
            elif item is _NL:
                while len(breaks) <= level:
                    breaks.append(breaks[-1] + "  ")
                emit(breaks[level])
            elif item is _IN:
                level += 1
            elif item is _OUT:
                level -= 1
            else:
                stack.append(iter(item))
                break
        else:
            stack.pop()
    return "".join(out)


# Actions of the printing machine (an explicit stack instead of recursion).
_VISIT, _FINISH, _CHAIN, _TAIL, _LETLINE, _BIND_LET, _BIND_PARAMS, _BIND_PATTERN, _END = range(9)


class _Printer:
    def __init__(self, show_types: bool, mark, show_spans: bool = False,
                 show_constant_types: bool = False):
        self.show_types = show_types
        self.show_spans = show_spans
        self.show_constant_types = show_constant_types
        self.mark = mark
        self.meta: list = []
        self.meta_index: dict = {}
        self.tensor_texts: dict = {}
        self.default_attrs: dict = {}

    def non_default_attrs(self, opdef, attrs) -> dict:
        """``opdef.non_default_attrs(attrs)``, with the defaults computed once per op."""
        if not attrs:
            return {}
        defaults = self.default_attrs.get(opdef.name)
        if defaults is None:
            defaults = self.default_attrs[opdef.name] = opdef.make_attrs({})
        return {k: v for k, v in attrs.items() if k not in defaults or defaults[k] != v}

    # ---- module --------------------------------------------------------------------------
    def module_text(self, mod: IRModule) -> str:
        parts = [self.type_data_text(td) for td in mod.type_definitions.values()]
        for gv, fn in mod.functions.items():
            parts.append(self.root_text(fn, gv))
        return f'#[version = "{VERSION}"]\n' + "\n\n".join(parts)

    def type_data_text(self, td: TypeData) -> str:
        names = {}
        taken = set()
        for v in td.type_vars:
            names[v] = _unique(_sanitize(v.name_hint), taken)
        head = td.header.name_hint
        if td.type_vars:
            head += "[" + ", ".join(names[v] for v in td.type_vars) + "]"
        lines = [f"type {head} {{"]
        for c in td.constructors:
            if c.inputs:
                fields = ", ".join(self.type_text(t, names) for t in c.inputs)
                lines.append(f"  {c.name_hint}({fields}),")
            else:
                lines.append(f"  {c.name_hint},")
        lines.append("}")
        return "\n".join(lines)

    # ---- types ---------------------------------------------------------------------------
    def type_text(self, t: Type, names: dict) -> str:
        """Iterative, so deeply nested types print too. ``names`` maps TypeVars to their text."""
        memo: dict = {}
        stack = [(t, False)]
        while stack:
            node, ready = stack.pop()
            key = id(node)
            if key in memo:
                continue
            kids = type_children(node)
            if not ready:
                stack.append((node, True))
                stack.extend((k, False) for k in kids if id(k) not in memo)
                continue
            memo[key] = self._one_type(node, [memo[id(k)] for k in kids], names)
        return memo[id(t)]

    def _one_type(self, node, s: list, names: dict) -> str:
        if isinstance(node, TensorType):
            if not node.shape:
                return node.dtype
            return f"Tensor[({', '.join(format_dim(d) for d in node.shape)}), {node.dtype}]"
        if isinstance(node, TupleType):
            return "(" + ", ".join(s) + ("," if len(s) == 1 else "") + ")"
        if isinstance(node, FuncType):
            n = len(node.arg_types)
            tp = ""
            if node.type_params:
                tp = "[" + ", ".join(names.get(v, v.name_hint) for v in node.type_params) + "]"
            text = f"fn {tp}(" + ", ".join(s[:n]) + f") -> {s[n]}"
            if node.type_constraints:
                text += " where " + ", ".join(s[n + 1:])
            return text
        if isinstance(node, TypeCall):
            return s[0] + ("[" + ", ".join(s[1:]) + "]" if len(s) > 1 else "")
        if isinstance(node, RefType):
            return f"Ref[{s[0]}]"
        if isinstance(node, (TypeVar, GlobalTypeVar)):
            return names.get(node, node.name_hint)
        if isinstance(node, IncompleteType):
            return "_"
        if isinstance(node, TypeRelation):
            return f"{node.name}(" + ", ".join(s) + ")"
        return f"<{type(node).__name__}>"

    # ---- one root: a global function or a lone expression --------------------------------
    def root_text(self, root: Expr, gvar: Optional[GlobalVar]) -> str:
        return _RootPrinter(self, root, gvar).run()


def _unique(base: str, taken: set, counters: Optional[dict] = None) -> str:
    name = base
    if name in taken:
        k = counters.get(base, 1) if counters is not None else 1
        while f"{base}{k}" in taken:
            k += 1
        if counters is not None:
            counters[base] = k + 1
        name = f"{base}{k}"
    taken.add(name)
    return name


def _use_children(node) -> tuple:
    """The children of a node that are uses (binding occurrences of variables left out)."""
    if isinstance(node, Let):
        return (node.value, node.body)
    if isinstance(node, Function):
        return (node.body,)
    return expr_children(node)


class _RootPrinter:
    """Prints one global function (``def @f ...``) or one lone expression."""

    def __init__(self, printer: _Printer, root: Expr, gvar: Optional[GlobalVar]):
        self.p = printer
        self.root = root
        self.gvar = gvar
        self.show_types = printer.show_types
        self.show_spans = printer.show_spans
        self.mark = printer.mark
        self.var_names: dict = {}
        self.taken: set = set()
        self.counters: dict = {}
        self.tv_names: dict = {}
        self.tv_taken: set = set()
        self.temp = 0

    # ---- analysis: where each node is printed ----------------------------------------------
    def _analyze(self):
        from .functor import post_order
        root = self.root
        order = post_order(root)
        uses: dict = {}
        seen_vars: list = []
        binders: set = set()
        for node in order:
            if isinstance(node, _ATOMS):
                if type(node) is Var:
                    seen_vars.append(node)
                continue
            if isinstance(node, Function):
                binders.update(node.params)
            elif isinstance(node, Let):
                binders.add(node.var)
            elif isinstance(node, Match):
                for c in node.clauses:
                    binders.update(pattern_vars(c.lhs))
            for child in _use_children(node):
                if not isinstance(child, _ATOMS):
                    uses[child] = uses.get(child, 0) + 1
        self.free_vars = [v for v in seen_vars if v not in binders]

        top = _Block(None)
        self.top = top
        home: dict = {}        # node -> the block its binding (or inline text) lives in
        inline_pos: dict = {}  # node -> whether its first use may print it inline
        unrolled: dict = {}    # Let -> the block whose let-chain it continues
        inline: set = set()
        blocks: dict = {}      # owner node -> its blocks
        paren: set = set()     # Lets printed as a parenthesized let-chain

        def use(child, block, may_inline):
            if isinstance(child, _ATOMS):
                return
            b = home.get(child)
            if b is None:
                home[child] = block
                inline_pos[child] = may_inline
            else:
                home[child] = _lca(b, block)
                inline_pos[child] = False

        def tail(child, block):
            if isinstance(child, Let) and uses.get(child, 0) == 1:
                unrolled[child] = block
            else:
                use(child, block, True)

        if self.gvar is not None and isinstance(root, Function):
            blocks[root] = [top]
            tail(root.body, top)
        else:
            uses[root] = uses.get(root, 0) + 1
            tail(root, top)

        for node in reversed(order):
            if isinstance(node, _ATOMS) or (node is root and self.gvar is not None):
                continue
            block = unrolled.get(node)
            if block is not None:
                use(node.value, block, True)
                tail(node.body, block)
                continue
            block = home.get(node)
            if block is None:  # not reachable through a use (cannot happen for a tree root)
                block = home[node] = top
            if uses.get(node, 0) == 1 and inline_pos.get(node, False):
                inline.add(node)
            if isinstance(node, Function):
                b = _Block(block)
                blocks[node] = [b]
                tail(node.body, b)
            elif isinstance(node, If):
                use(node.cond, block, False)
                t, f = _Block(block), _Block(block)
                blocks[node] = [t, f]
                tail(node.true_branch, t)
                tail(node.false_branch, f)
            elif isinstance(node, Match):
                use(node.data, block, False)
                bs = [_Block(block) for _ in node.clauses]
                blocks[node] = bs
                for c, b in zip(node.clauses, bs):
                    tail(c.rhs, b)
            elif isinstance(node, Let):
                b = _Block(block, head=node)
                blocks[node] = [b]
                paren.add(node)
                use(node.value, b, True)
                tail(node.body, b)
            else:
                for child in expr_children(node):
                    use(child, block, False)
        self.home, self.inline, self.unrolled = home, inline, unrolled
        self.blocks, self.paren = blocks, paren

    # ---- names ---------------------------------------------------------------------------
    def _bind_var(self, v: Var, block: _Block) -> str:
        name = _unique(v.name_hint or "v", self.taken, self.counters)
        self.var_names[v] = name
        block.names.append(name)
        return name

    def _var_text(self, v: Var) -> str:
        name = self.var_names.get(v)
        if name is None:  # a free variable that was not declared (cannot happen; be safe)
            name = _unique(v.name_hint or "v", self.taken, self.counters)
            self.var_names[v] = name
        text = _local_text(name)
        return _MARK_OPEN + text + _MARK_CLOSE if v is self.mark else text

    def _bind_type_params(self, tps) -> None:
        for tv in tps:
            self.tv_names[tv] = _unique(_sanitize(tv.name_hint), self.tv_taken)

    def _type(self, t: Type) -> str:
        if type(t) is TensorType:  # the common case, printed once per distinct type
            cache = self.p.tensor_texts
            text = cache.get(t)
            if text is None:
                text = cache[t] = self.p.type_text(t, {})
            return text
        return self.p.type_text(t, self.tv_names)

    def _ty_comment(self, node: Expr) -> str:
        """`` /* ty=T span=src:l:c */``: what is known and asked for about the node, or ""."""
        parts = []
        if self.show_types:
            t = node.type_or_none
            if t is not None:
                parts.append(f"ty={self._type(t)}")
        if self.show_spans and node.span is not None:
            parts.append(f"span={node.span}")
        return f" /* {' '.join(parts)} */" if parts else ""

    def _constant_comment(self, node: Constant) -> str:
        parts = []
        if self.p.show_constant_types:
            t = node.type_or_none or node.tensor_type
            parts.append(f"ty={self._type(t)}")
        if self.show_spans and node.span is not None:
            parts.append(f"span={node.span}")
        return f" /* {' '.join(parts)} */" if parts else ""

    def _atom_text(self, node) -> str:
        if isinstance(node, Var):
            return self._var_text(node)
        if isinstance(node, GlobalVar):
            text = _global_text(node.name_hint)
        elif isinstance(node, Op):
            text = node.name
        elif isinstance(node, Constructor):
            text = node.name_hint
        else:  # Constant
            text = None
            if node.data.ndim == 0:
                text = format_scalar(node.data)
            if text is None:
                idx = self.p.meta_index.get(node)
                if idx is None:
                    idx = self.p.meta_index[node] = len(self.p.meta)
                    self.p.meta.append(node)
                text = f"meta[relay.Constant][{idx}]"
            comment = self._constant_comment(node)
            if comment:
                return (_MARK_OPEN + text + _MARK_CLOSE if node is self.mark else text) + comment
        return _MARK_OPEN + text + _MARK_CLOSE if node is self.mark else text

    def _wrap(self, node, text):
        return _cat(_MARK_OPEN, text, _MARK_CLOSE) if node is self.mark else text

    # ---- the printing machine ------------------------------------------------------------
    def run(self) -> str:
        self._analyze()
        top = self.top
        root = self.root
        is_def = self.gvar is not None and isinstance(root, Function)
        ref: dict = {}
        self.ref = ref
        for v in self.free_vars:
            name = _unique(v.name_hint or "v", self.taken, self.counters)
            self.var_names[v] = name
            ann = f": {self._type(v.type_annotation)}" if v.type_annotation is not None else ""
            top.lines.append(f"free_var {self._var_text(v)}{ann};")

        stack: list = []
        push = stack.append
        if is_def:
            self._bind_type_params(root.type_params)
            push((_END, top))
            push((_CHAIN, top, root.body))
            push((_BIND_PARAMS, root, top))
        else:
            push((_END, top))
            push((_CHAIN, top, root))

        blocks, unrolled, inline, home = self.blocks, self.unrolled, self.inline, self.home
        atom_text = self._atom_text
        while stack:
            action = stack.pop()
            kind = action[0]
            if kind == _VISIT:
                node = action[1]
                if node in ref:
                    continue
                if isinstance(node, _ATOMS):
                    if not isinstance(node, Var):
                        ref[node] = atom_text(node)
                    continue
                push((_FINISH, node))
                if isinstance(node, Call):
                    for a in reversed(node.args):
                        push((_VISIT, a))
                    push((_VISIT, node.op))
                elif isinstance(node, Function):
                    b = blocks[node][0]
                    push((_END, b))
                    push((_CHAIN, b, node.body))
                    push((_BIND_PARAMS, node, b))
                elif isinstance(node, If):
                    t, f = blocks[node]
                    push((_END, f))
                    push((_CHAIN, f, node.false_branch))
                    push((_END, t))
                    push((_CHAIN, t, node.true_branch))
                    push((_VISIT, node.cond))
                elif isinstance(node, Match):
                    for c, b in reversed(list(zip(node.clauses, blocks[node]))):
                        push((_END, b))
                        push((_CHAIN, b, c.rhs))
                        push((_BIND_PATTERN, c, b))
                    push((_VISIT, node.data))
                elif isinstance(node, Let):  # a parenthesized let-chain
                    b = blocks[node][0]
                    push((_END, b))
                    push((_CHAIN, b, node))
                else:
                    for child in reversed(expr_children(node)):
                        push((_VISIT, child))
            elif kind == _FINISH:
                node = action[1]
                text = self._node_text(node)
                if node in inline:
                    ref[node] = _cat(self._wrap(node, text), self._ty_comment(node))
                else:
                    name = f"%{self.temp}"
                    self.temp += 1
                    line = _cat(self._wrap(node, _cat(name, " = ", text)), self._ty_comment(node), ";")
                    home[node].lines.append(line)
                    ref[node] = name
            elif kind == _CHAIN:
                block, cur = action[1], action[2]
                if isinstance(cur, Let) and (unrolled.get(cur) is block or cur is block.head):
                    push((_CHAIN, block, cur.body))
                    push((_LETLINE, block, cur))
                    if isinstance(cur.value, Function):  # a recursive closure sees its own name
                        push((_VISIT, cur.value))
                        push((_BIND_LET, block, cur.var))
                    else:
                        push((_BIND_LET, block, cur.var))
                        push((_VISIT, cur.value))
                else:
                    push((_TAIL, block, cur))
                    push((_VISIT, cur))
            elif kind == _TAIL:
                block, cur = action[1], action[2]
                block.tail = self._ref(cur)
            elif kind == _LETLINE:
                block, let = action[1], action[2]
                v = let.var
                ann = f": {self._type(v.type_annotation)}" if v.type_annotation is not None else ""
                line = self._wrap(let, _cat(f"let {self._var_text(v)}{ann} = ", self._ref(let.value)))
                block.lines.append(_cat(line, ";"))
            elif kind == _BIND_LET:
                self._bind_var(action[2], action[1])
            elif kind == _BIND_PARAMS:
                fn, block = action[1], action[2]
                if fn is not root or not is_def:
                    self._bind_type_params(fn.type_params)
                for prm in fn.params:
                    self._bind_var(prm, block)
            elif kind == _BIND_PATTERN:
                clause, block = action[1], action[2]
                for v in pattern_vars(clause.lhs):
                    self._bind_var(v, block)
            elif kind == _END:
                block = action[1]
                for name in block.names:
                    self.taken.discard(name)
                if block.lines:
                    doc = []
                    for line in block.lines:
                        doc.append(line)
                        doc.append(_NL)
                    doc.append(block.tail)
                    block.doc = doc
                else:
                    block.doc = block.tail
        if is_def:
            head = self._wrap(root, f"def {_global_text(self.gvar.name_hint)}{self._signature(root)}")
            return _render(_block_doc(head + " {", top.doc, "}"))
        return _render(top.doc)

    def _ref(self, node) -> str:
        if isinstance(node, Var):
            return self._var_text(node)
        text = self.ref.get(node)
        if text is None:
            text = self._atom_text(node) if isinstance(node, _ATOMS) else f"<{type(node).__name__}>"
        return text

    # ---- the text of one node, its children already printed ------------------------------
    def _node_text(self, node) -> str:
        r = self._ref
        if isinstance(node, Call):
            parts = [r(a) for a in node.args]
            attrs = node.attrs
            if isinstance(node.op, Op):
                opdef = node.op.opdef if attrs else None
                if opdef is not None:
                    attrs = self.p.non_default_attrs(opdef, attrs)
            parts.extend(f"{k}={_attr_text(v)}" for k, v in attrs.items())
            if not parts and isinstance(node.op, Constructor) and not node.op.inputs:
                return r(node.op)  # `Nil`, as Relay prints a nullary constructor's value
            return f"{r(node.op)}({', '.join(parts)})"
        if isinstance(node, Tuple):
            fields = [r(f) for f in node.fields]
            return "(" + ", ".join(fields) + ("," if len(fields) == 1 else "") + ")"
        if isinstance(node, TupleGetItem):
            return f"{r(node.tuple_value)}.{node.index}"
        if isinstance(node, Function):
            return _block_doc(f"fn {self._signature(node)} {{", self.blocks[node][0].doc, "}")
        if isinstance(node, If):
            t, f = self.blocks[node]
            return [f"if ({r(node.cond)}) {{", _IN, _NL, t.doc, _OUT, _NL, "} else {",
                    _IN, _NL, f.doc, _OUT, _NL, "}"]
        if isinstance(node, Match):
            doc = [f"match{'' if node.complete else '?'} ({r(node.data)}) {{", _IN]
            for c, b in zip(node.clauses, self.blocks[node]):
                lhs = self._pattern_text(c.lhs)
                doc.append(_NL)
                if b.lines:
                    doc.append(_block_doc(f"{lhs} => {{", b.doc, "},"))
                else:
                    doc.append(_cat(f"{lhs} => ", b.doc, ","))
            doc.extend((_OUT, _NL, "}"))
            return doc
        if isinstance(node, Let):
            return _block_doc("(", self.blocks[node][0].doc, ")")
        if isinstance(node, RefCreate):
            return f"ref({r(node.value)})"
        if isinstance(node, RefRead):
            return f"ref_read({r(node.ref)})"
        if isinstance(node, RefWrite):
            return f"ref_write({r(node.ref)}, {r(node.value)})"
        return f"<{type(node).__name__}>"

    def _signature(self, fn: Function) -> str:
        """``[A](%x: T, Primitive=1) -> R`` (the type parameters are already named)."""
        tp = ""
        if fn.type_params:
            tp = "[" + ", ".join(self.tv_names.get(v, v.name_hint) for v in fn.type_params) + "]"
        params = []
        for prm in fn.params:
            text = self._var_text(prm)
            if prm.type_annotation is not None:
                text += f": {self._type(prm.type_annotation)}"
            params.append(text)
        params.extend(f"{k}={_attr_text(v)}" for k, v in fn.attrs.items())
        text = f"{tp}({', '.join(params)})"
        if fn.ret_type is not None:
            text += f" -> {self._type(fn.ret_type)}"
        elif self.show_types and isinstance(fn.type_or_none, FuncType):
            text += f" /* ty={self._type(fn.type_or_none.ret_type)} */"
        return text

    def _pattern_text(self, pat) -> str:
        """Iterative, like everything else here."""
        memo: dict = {}
        stack = [(pat, False)]
        while stack:
            p, ready = stack.pop()
            if id(p) in memo:
                continue
            subs = p.patterns if isinstance(p, (PatternConstructor, PatternTuple)) else ()
            if not ready and subs:
                stack.append((p, True))
                stack.extend((q, False) for q in subs)
                continue
            if isinstance(p, PatternWildcard):
                text = "_"
            elif isinstance(p, PatternVar):
                text = self._var_text(p.var)
                if p.var.type_annotation is not None:
                    text += f": {self._type(p.var.type_annotation)}"
            elif isinstance(p, PatternConstructor):
                text = p.constructor.name_hint
                if subs:
                    text += "(" + ", ".join(memo[id(q)] for q in subs) + ")"
            elif isinstance(p, PatternTuple):
                inner = [memo[id(q)] for q in subs]
                text = "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"
            else:
                text = f"<{type(p).__name__}>"
            memo[id(p)] = text
        return memo[id(pat)]

