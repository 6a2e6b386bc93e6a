"""Relay's text format, version 0.0.5: the parser.

:func:`parse` reads a module (``#[version = "0.0.5"]``, then ``type`` and ``def`` definitions, then
an optional ``#[metadata]`` section); :func:`parse_expr` reads a lone expression. Everything the
printer writes reads back to the same structure, and so do programs written for TVM's Relay:
graph bindings (``%0 = ...;``), ``let``, closures with type parameters, calls of operators by
their dotted names with attributes, the binary operators ``* / + - < <= > >= == !=``, ADTs and
``match``, references, scalars (``1``, ``1i64``, ``2.5f``, ``1f16``, ``True``), symbolic and dynamic
dimensions (``Tensor[(n, 2*n + 1, ?), float32]``) and ``meta[relay.Constant][i]``.

Parsed nodes carry a :class:`~relaybench.ir.Span`. A syntax error is a
:class:`~relaybench.errors.ParseError` with the line, the column and the source line:

>>> try:
...     parse('#[version = "0.0.5"]\\ndef @main(%x: float32 {\\n  %x\\n}')
... except ParseError as err:
...     print(err)
<string>:2:23: expected ')' but found '{'
  def @main(%x: float32 {
                        ^

Sequences of bindings and let-chains are read with loops, so a program of 100,000 bindings
parses; an expression written nested inline more than 500 levels deep is refused with a
ParseError instead of exhausting the stack.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import difflib
import json
import re
import sys
from typing import Optional

import numpy as np

from .._gc import gc_paused
from ..errors import ParseError
from . import symbolic
from ._tokens import (EOF, GLOBAL, GRAPH, IDENT, LOCAL, NUMBER, PUNCT, STRING, LineIndex,
                      TokenizeError, tokenize)
from .adt import TypeData
from .attrs import Attrs
from .expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If, Let, Match, Op,
                   PatternConstructor, PatternTuple, PatternVar, PatternWildcard, RefCreate, RefRead,
                   RefWrite, Span, Tuple, TupleGetItem, Var)
from .module import IRModule
from .types import (DTYPES, FuncType, GlobalTypeVar, IncompleteType, RefType, TensorType, TupleType,
                    TypeCall, TypeVar, check_dtype)

__all__ = ["parse", "parse_expr", "ParseError", "MAX_DEPTH", "VERSION"]

VERSION = "0.0.5"
MAX_DEPTH = 500
"""How deeply expressions (and types, patterns, attribute lists) may nest inside one another."""

# binary operators: precedence and the op they stand for (TVM's op_table.h)
_BINOPS = {
    "*": (12, "multiply"), "/": (12, "divide"),
    "+": (10, "add"), "-": (10, "subtract"),
    "<": (8, "less"), "<=": (8, "less_equal"), ">": (8, "greater"), ">=": (8, "greater_equal"),
    "==": (7, "equal"), "!=": (7, "not_equal"),
}

_LITERAL = re.compile(r"([0-9]+)(\.[0-9]+)?([eE][+-]?[0-9]+)?([A-Za-z][A-Za-z0-9]*)?$")
_SUFFIX = {
    "": None, "f": "float32", "f16": "float16", "f32": "float32", "f64": "float64",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
}
# Relay reads a dtype with TVM's String2DLDataType, where a missing width means 32 bits.
_DTYPE_SHORTHANDS = {"int": "int32", "uint": "uint32", "float": "float32"}
# A name that reads as one of TVM's vector dtypes (element, "x", lanes), valid or not: an invalid
# one (int7x4, int8x0) is a dtype error, not an unknown type.
_VECTOR_DTYPE = re.compile(r"((?:bool|u?int|b?float)[0-9]*)x([0-9]+)$")
_KEYWORDS = frozenset({"def", "type", "extern", "fn", "let", "if", "else", "match", "ref", "ref_read",
                       "ref_write", "free_var", "meta", "True", "False"})


def parse(text: str, source_name: str = "<string>", init_module: Optional[IRModule] = None,
          init_meta_table: Optional[dict] = None) -> IRModule:
    """Parse a module. The text must start with ``#[version = "0.0.5"]``.

    >>> mod = parse('#[version = "0.0.5"]\\ndef @main(%x: float32) { add(%x, 1f) }')
    >>> mod["main"].body.op.name
    'add'

    A module whose body is a single expression (no ``def``) becomes ``@main``.

    As Relay's ``tvm.parser.parse``, ``init_module`` gives definitions the text may use (its
    globals, ADTs and constructors); the result holds them and the text's own definitions (a
    ``def`` of a name the module has replaces its function). Unlike Relay, ``init_module`` itself
    is left as it was: the result is a new module. ``init_meta_table`` is
    ``{"relay.Constant": [constants or arrays]}``; its entries come after the text's own
    ``#[metadata]`` ones, so ``meta[relay.Constant][i]`` counts those first:

    >>> import numpy as np
    >>> mod = parse('#[version = "0.0.5"]\\ndef @main() { meta[relay.Constant][0] }',
    ...             init_meta_table={"relay.Constant": [np.ones((2,), "float32")]})
    >>> mod["main"].body.data
    array([1., 1.], dtype=float32)
    """
    with gc_paused():
        p = _Parser(text, source_name, init_module, _meta_table_constants(init_meta_table))
        with _stack_room():
            mod = p.parse_module()
    if init_module is None:
        return mod
    merged = init_module.copy()
    for gv, td in mod.type_definitions.items():
        merged.add_type_def(td)
    for gv, fn in mod.functions.items():
        merged.add(gv, fn, update=True)
    return merged


def _meta_table_constants(table: Optional[dict]) -> list:
    """The constants of a metadata table given from outside (``{"relay.Constant": [...]}``)."""
    if table is None:
        return []
    if not isinstance(table, dict):
        raise TypeError('init_meta_table must be a dict {"relay.Constant": [...]}, not '
                        f"{type(table).__name__}")
    out = []
    for key, items in table.items():
        if key != "relay.Constant":
            raise ValueError(f"init_meta_table[{key!r}]: only relay.Constant entries are supported")
        for k, item in enumerate(items):
            if isinstance(item, Constant):
                out.append(item)
                continue
            try:
                out.append(Constant(np.asarray(item)))
            except (TypeError, ValueError) as err:
                raise ValueError(f"init_meta_table['relay.Constant'][{k}] is not a constant: "
                                 f"{err}") from None
    return out


def parse_expr(text: str, source_name: str = "<string>", mod: Optional[IRModule] = None) -> Expr:
    """Parse a lone expression (the version header is optional).

    ``free_var %x: T;`` lines declare its free variables. Globals, ADTs and constructors are
    looked up in ``mod`` when one is given.

    >>> e = parse_expr('free_var %x: float32;\\n%x * 2f')
    >>> e.op.name, e.args[1].data.dtype.name
    ('multiply', 'float32')
    """
    p = _Parser(text, source_name, mod)
    with _stack_room():
        return p.parse_lone_expr()


@contextlib.contextmanager
def _stack_room():
    """Nesting is bounded by MAX_DEPTH; make sure Python's limit leaves room for it."""
    old = sys.getrecursionlimit()
    need = 2000 + 12 * MAX_DEPTH
    if old < need:
        sys.setrecursionlimit(need)
    try:
        yield
    finally:
        if old < need:
            sys.setrecursionlimit(old)


def _describe(tok) -> str:
    kind, text, _ = tok
    if kind == EOF:
        return "end of input"
    return f"'{text}'"


class _Parser:
    def __init__(self, text: str, source_name: str, mod: Optional[IRModule] = None,
                 extra_meta: Optional[list] = None):
        self.text = text
        self.source_name = source_name
        self.lines = LineIndex(text)
        try:
            self.toks, self.meta_text, self.meta_offset = tokenize(text)
        except TokenizeError as err:
            raise self.error(err.message, err.offset) from None
        self.i = 0
        self.depth = 0
        self.scopes: list = [{}]      # local variables and graph bindings: token text -> Expr
        self.type_scopes: list = []   # type parameters: name -> TypeVar
        self.globals: dict = {}       # name -> GlobalVar
        self.adts: dict = {}          # name -> GlobalTypeVar
        self.constructors: dict = {}  # name -> Constructor
        self._meta: Optional[list] = None
        self._extra_meta: list = extra_meta or []
        self._known_adts: frozenset = frozenset()  # ADTs defined outside the text
        self._literals: dict = {}     # literal text -> its value (a rank-0 array)
        self._opdefs: dict = {}       # Op -> (OpDef or None, its default attrs)
        self._tensor_types: dict = {}  # the tokens inside Tensor[...] -> the TensorType
        if mod is not None:
            for gv in mod.get_global_vars():
                self.globals[gv.name_hint] = gv
            for gtv, td in mod.type_definitions.items():
                self.adts[gtv.name_hint] = gtv
                for c in td.constructors:
                    self.constructors[c.name_hint] = c
            self._known_adts = frozenset(self.adts)

    # ---- errors, spans, tokens ---------------------------------------------------------------
    def error(self, message: str, offset: Optional[int] = None, expected: Optional[str] = None):
        if offset is None:
            offset = self.toks[self.i][2]
        line, column = self.lines.position(offset)
        return ParseError(message, line, column, self.lines.line_text(line), self.source_name,
                          expected)

    def span(self, offset: int) -> Span:
        line, column = self.lines.position(offset)
        return Span(self.source_name, line, column)

    def peek_is(self, punct: str) -> bool:
        kind, text, _ = self.toks[self.i]
        return kind == PUNCT and text == punct

    def accept(self, punct: str) -> bool:
        kind, text, _ = self.toks[self.i]
        if kind == PUNCT and text == punct:
            self.i += 1
            return True
        return False

    def expect(self, punct: str):
        tok = self.toks[self.i]
        if tok[0] == PUNCT and tok[1] == punct:
            self.i += 1
            return tok
        raise self.error(f"expected '{punct}' but found {_describe(tok)}", tok[2], f"'{punct}'")

    def expect_keyword(self, word: str):
        tok = self.toks[self.i]
        if tok[0] == IDENT and tok[1] == word:
            self.i += 1
            return tok
        raise self.error(f"expected '{word}' but found {_describe(tok)}", tok[2], f"'{word}'")

    def expect_kind(self, kind: str, what: str):
        tok = self.toks[self.i]
        if tok[0] != kind:
            raise self.error(f"expected {what} but found {_describe(tok)}", tok[2], what)
        self.i += 1
        return tok

    def enter(self, offset: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"expression nested too deeply (more than {MAX_DEPTH} levels); "
                             "bind inner parts to %n variables instead", offset)

    # ---- module ------------------------------------------------------------------------------
    def parse_header(self) -> None:
        tok = self.toks[self.i]
        if not (tok[0] == PUNCT and tok[1] == "#"):
            raise self.error(f'expected the version header #[version = "{VERSION}"] at the start '
                             f"of the program but found {_describe(tok)}", tok[2],
                             f'#[version = "{VERSION}"]')
        self.i += 1
        self.expect("[")
        self.expect_keyword("version")
        self.expect("=")
        vtok = self.expect_kind(STRING, f'the version "{VERSION}"')
        if json.loads(vtok[1]) != VERSION:
            raise self.error(f"unsupported version {vtok[1]}; this parser reads "
                             f'#[version = "{VERSION}"]', vtok[2])
        self.expect("]")

    def parse_module(self) -> IRModule:
        self.parse_header()
        toks = self.toks
        start = self.i
        # the top-level definitions: 'def' and 'type' outside any bracket
        items = []
        depth = 0
        j = start
        while toks[j][0] != EOF:
            kind, text, _ = toks[j]
            if kind == PUNCT:
                if text in "([{":
                    depth += 1
                elif text in ")]}":
                    depth -= 1
            elif kind == IDENT and depth == 0 and text in ("def", "type", "extern"):
                items.append((text, j))
                if text == "extern" and toks[j + 1][0] == IDENT and toks[j + 1][1] == "type":
                    j += 1
            j += 1
        eof = j
        if not items:
            if start == eof:
                return IRModule()
            body = self.parse_block()
            self.expect_end()
            self.metadata()
            return IRModule.from_expr(body)
        if items[0][1] != start:
            raise self.error(f"expected a definition ('def' or 'type') but found "
                             f"{_describe(toks[start])}", toks[start][2])
        # declare every type and global first: definitions may refer to later ones
        defined: set = set()
        for kind, j in items:
            if kind == "extern":
                if not (toks[j + 1][0] == IDENT and toks[j + 1][1] == "type"):
                    raise self.error(f"expected 'type' after 'extern' but found "
                                     f"{_describe(toks[j + 1])}", toks[j + 1][2], "'type'")
                kind, j = "type", j + 1
            name_tok = toks[j + 1]
            if kind == "type" and name_tok[0] == IDENT:
                if name_tok[1] in self.adts:
                    where = " (init_module defines it)" if name_tok[1] in self._known_adts else ""
                    raise self.error(f"duplicate definition of type {name_tok[1]}{where}",
                                     name_tok[2])
                if name_tok[1] in DTYPES or name_tok[1] in ("Tensor", "Ref", "_"):
                    raise self.error(f"'{name_tok[1]}' is a built-in type and cannot be redefined",
                                     name_tok[2])
                self.adts[name_tok[1]] = GlobalTypeVar(name_tok[1])
            elif kind == "def" and name_tok[0] == GLOBAL:
                name = _name_of(name_tok[1])
                if name in defined:
                    raise self.error(f"duplicate definition of @{name}", name_tok[2])
                defined.add(name)
                if name not in self.globals:  # a def of an init_module name replaces it
                    self.globals[name] = GlobalVar(name)
        ends = {}
        type_defs = []
        for kind, j in items:
            if kind in ("type", "extern"):
                self.i = j
                type_defs.append(self.parse_type_def())
                ends[j] = self.i
        defs = []
        for kind, j in items:
            if kind == "def":
                self.i = j
                defs.append(self.parse_def())
                ends[j] = self.i
        for k, (kind, j) in enumerate(items):
            nxt = items[k + 1][1] if k + 1 < len(items) else eof
            if ends[j] != nxt:
                self.i = ends[j]
                raise self.error("expected a definition ('def' or 'type') but found "
                                 f"{_describe(toks[ends[j]])}")
        mod = IRModule()
        for td, offset in type_defs:
            try:
                mod.add_type_def(td)
            except ValueError as err:
                raise self.error(str(err), offset) from None
        for gv, fn in defs:
            mod.add(gv, fn)
        self.metadata()  # a damaged section is an error even where nothing refers to it
        return mod

    def parse_lone_expr(self) -> Expr:
        if self.peek_is("#"):
            self.parse_header()
        body = self.parse_block()
        self.expect_end()
        self.metadata()
        return body

    def expect_end(self) -> None:
        tok = self.toks[self.i]
        if tok[0] != EOF:
            raise self.error(f"expected the end of the program but found {_describe(tok)}", tok[2])

    def parse_type_def(self):
        """``type Name[A, ...] { Con(T, ...), ... }``, or ``extern type Name[A, ...]``: a type
        defined outside the program, which has no constructors (as in Relay)."""
        extern = self.toks[self.i]
        is_extern = extern[0] == IDENT and extern[1] == "extern"
        if is_extern:
            self.i += 1
        self.expect_keyword("type")
        name_tok = self.expect_kind(IDENT, "the name of the type")
        header = self.adts[name_tok[1]]
        type_vars = self.parse_type_params() if self.peek_is("[") else []
        self.type_scopes.append({v.name_hint: v for v in type_vars})
        constructors = []
        if is_extern:
            if self.peek_is("{"):
                raise self.error(f"an external type may not have any constructors (extern type "
                                 f"{name_tok[1]} is followed by '{{')", self.toks[self.i][2])
            self.type_scopes.pop()
            return TypeData(header, type_vars, constructors), name_tok[2]
        self.expect("{")
        while not self.accept("}"):
            ctok = self.expect_kind(IDENT, "a constructor name")
            cname = ctok[1]
            if cname in self.constructors or cname in _KEYWORDS or cname == "_":
                what = "a keyword" if cname in _KEYWORDS or cname == "_" else "already defined"
                raise self.error(f"constructor name {cname} is {what}", ctok[2])
            fields = []
            if self.accept("("):
                fields = self.parse_type_list(")")
            con = Constructor(cname, fields, header, len(constructors)).with_span(self.span(ctok[2]))
            constructors.append(con)
            self.constructors[cname] = con
            if not self.accept(","):
                self.expect("}")
                break
        self.type_scopes.pop()
        return TypeData(header, type_vars, constructors), name_tok[2]

    def parse_def(self):
        def_tok = self.expect_keyword("def")
        name_tok = self.expect_kind(GLOBAL, "a global name like @main")
        gv = self.globals[_name_of(name_tok[1])]
        fn = self.parse_function_rest(def_tok[2])
        return gv, fn

    def parse_function_rest(self, offset: int) -> Function:
        """``[A](%x: T, Attr=v) -> R { body }`` after ``def @name`` or ``fn``."""
        type_params = self.parse_type_params() if self.peek_is("[") else []
        self.type_scopes.append({v.name_hint: v for v in type_params})
        params, attrs = self.parse_params()
        ret_type = self.parse_type() if self.accept("->") else None
        body = self.parse_braced_block()
        self.scopes.pop()
        self.type_scopes.pop()
        return Function(params, body, ret_type, type_params, Attrs(attrs)).with_span(self.span(offset))

    def parse_type_params(self) -> list:
        self.expect("[")
        out, seen = [], set()
        while not self.accept("]"):
            tok = self.expect_kind(IDENT, "a type parameter name")
            if tok[1] in seen:
                raise self.error(f"duplicate type parameter {tok[1]}", tok[2])
            seen.add(tok[1])
            out.append(TypeVar(tok[1]))
            if not self.accept(","):
                self.expect("]")
                break
        return out

    def parse_params(self):
        """``(%x: T, %y, Primitive=1)``; pushes the scope holding the parameters."""
        self.expect("(")
        scope: dict = {}
        self.scopes.append(scope)
        params, attrs = [], {}
        toks = self.toks
        while not self.accept(")"):
            kind, text, offset = toks[self.i]
            if kind == LOCAL:
                self.i += 1
                ann = self.parse_type() if self.accept(":") else None
                v = Var(_name_of(text), ann).with_span(self.span(offset))
                scope[text] = v
                params.append(v)
            elif kind == IDENT and toks[self.i + 1][0] == PUNCT and toks[self.i + 1][1] == "=":
                self.i += 2
                attrs[text] = self.parse_attr_value()
            else:
                raise self.error("expected a parameter (%x: T) or an attribute (Name=value) but "
                                 f"found {_describe(toks[self.i])}", offset)
            if not self.accept(","):
                self.expect(")")
                break
        return params, attrs

    # ---- blocks --------------------------------------------------------------------------
    def parse_braced_block(self) -> Expr:
        self.expect("{")
        body = self.parse_block()
        self.expect("}")
        return body

    def parse_block(self) -> Expr:
        """Bindings (``%0 = e;``, ``let %x = e;``, ``free_var %x: T;``), then the value.

        ``e1; e2`` evaluates ``e1`` for its effect and gives ``e2``: as in Relay, it reads as
        ``let %_ = e1; e2`` with a variable of empty name. A loop, not recursion: the bindings of
        a block may be as many as memory allows.
        """
        toks = self.toks
        scope: dict = {}
        self.scopes.append(scope)
        lets = []
        while True:
            kind, text, offset = toks[self.i]
            if kind == GRAPH and toks[self.i + 1][0] == PUNCT and toks[self.i + 1][1] == "=":
                self.i += 2
                value = self.parse_expr()
                self.expect(";")
                if text in scope:
                    raise self.error(f"{text} is already bound in this block", offset)
                scope[text] = value
            elif kind == IDENT and text == "let":
                self.i += 1
                vtok = self.expect_kind(LOCAL, "a variable like %x after 'let'")
                ann = self.parse_type() if self.accept(":") else None
                self.expect("=")
                v = Var(_name_of(vtok[1]), ann).with_span(self.span(vtok[2]))
                tok = toks[self.i]
                if tok[0] == IDENT and tok[1] == "fn":
                    scope[vtok[1]] = v  # a closure may call itself
                value = self.parse_expr()
                self.expect(";")
                scope[vtok[1]] = v
                lets.append((v, value, offset))
            elif kind == IDENT and text == "free_var":
                self.i += 1
                vtok = self.expect_kind(LOCAL, "a variable like %x after 'free_var'")
                ann = self.parse_type() if self.accept(":") else None
                self.expect(";")
                scope[vtok[1]] = Var(_name_of(vtok[1]), ann).with_span(self.span(vtok[2]))
            else:
                body = self.parse_expr()
                semi = toks[self.i]
                if not self.accept(";"):
                    break
                lets.append((Var("").with_span(self.span(semi[2])), body, offset))
        self.scopes.pop()
        for v, value, offset in reversed(lets):
            body = Let(v, value, body).with_span(self.span(offset))
        return body

    # ---- expressions -----------------------------------------------------------------------
    def parse_expr(self) -> Expr:
        toks = self.toks
        self.enter(toks[self.i][2])
        left = self.parse_postfix()
        kind, text, _ = toks[self.i]
        if kind != PUNCT or text not in _BINOPS:
            self.depth -= 1
            return left
        operands = [left]
        ops: list = []
        while kind == PUNCT and text in _BINOPS:
            prec = _BINOPS[text][0]
            while ops and ops[-1][0] >= prec:
                self._reduce(operands, ops)
            ops.append((prec, text, toks[self.i][2]))
            self.i += 1
            operands.append(self.parse_postfix())
            kind, text, _ = toks[self.i]
        while ops:
            self._reduce(operands, ops)
        self.depth -= 1
        return operands[0]

    def _reduce(self, operands: list, ops: list) -> None:
        _, symbol, offset = ops.pop()
        rhs = operands.pop()
        lhs = operands.pop()
        name = _BINOPS[symbol][1]
        try:
            op = Op.get(name)
        except KeyError:
            raise self.error(f"operator '{symbol}' stands for {name}, which is not a registered "
                             "operator", offset) from None
        operands.append(Call(op, [lhs, rhs]).with_span(self.span(offset)))

    def parse_postfix(self) -> Expr:
        toks = self.toks
        offset = toks[self.i][2]
        e = self.parse_atom()
        if isinstance(e, Constructor) and not e.inputs and toks[self.i][1] != "(":
            # a bare nullary constructor is its value, as in Relay: `Nil` means `Nil()`
            e = Call(e, ()).with_span(self.span(offset))
        while True:
            kind, text, off = toks[self.i]
            if kind != PUNCT:
                return e
            if text == "(":
                e = self.parse_call(e, offset)
            elif text == ".":
                self.i += 1
                itok = toks[self.i]
                if itok[0] != NUMBER or not itok[1].isdigit():
                    raise self.error(f"expected a tuple index after '.' but found {_describe(itok)}",
                                     itok[2])
                self.i += 1
                e = TupleGetItem(e, int(itok[1])).with_span(self.span(off))
            else:
                return e

    def parse_call(self, callee: Expr, offset: int) -> Call:
        self.expect("(")
        toks = self.toks
        args, attrs, attr_at = [], {}, {}
        while not self.accept(")"):
            kind, text, off = toks[self.i]
            if kind == IDENT and toks[self.i + 1][0] == PUNCT and toks[self.i + 1][1] == "=":
                if text in attrs:
                    raise self.error(f"attribute {text} given twice", off)
                self.i += 2
                attrs[text] = self.parse_attr_value()
                attr_at[text] = off
            else:
                if attrs:
                    raise self.error("arguments must come before attributes", off)
                args.append(self.parse_expr())
            if not self.accept(","):
                self.expect(")")
                break
        if isinstance(callee, Op):
            known = self._opdefs.get(callee)
            if known is None:
                opdef = callee.opdef
                known = self._opdefs[callee] = (opdef, opdef.make_attrs({}) if opdef else None)
            opdef, defaults = known
            if opdef is not None and not attrs:
                attrs = defaults
            elif opdef is not None:
                attrs = self._op_attrs(opdef, attrs, attr_at, offset)
        return Call(callee, args, attrs).with_span(self.span(offset))

    def _op_attrs(self, opdef, attrs: dict, attr_at: dict, offset: int) -> Attrs:
        """``opdef.make_attrs(attrs)``, its ValueError a ParseError at the attribute at fault."""
        for name, off in attr_at.items():
            if name not in opdef.attrs:
                try:
                    opdef.make_attrs({name: attrs[name]})
                except ValueError as err:
                    raise self.error(str(err), off) from None
        try:
            return opdef.make_attrs(attrs)
        except ValueError as err:
            message = str(err)
            where = next((off for name, off in attr_at.items()
                          if re.search(rf"\b{re.escape(name)}\b", message)), None)
            if where is None:
                where = next(iter(attr_at.values()), offset)
            raise self.error(message, where) from None

    def parse_attr_value(self):
        toks = self.toks
        kind, text, offset = toks[self.i]
        if kind == NUMBER:
            self.i += 1
            return self._attr_number(text, offset, False)
        if kind == STRING:
            self.i += 1
            return json.loads(text)
        if kind == IDENT and text in ("True", "False", "None"):
            self.i += 1
            return {"True": True, "False": False, "None": None}[text]
        if kind == PUNCT and text == "-" and toks[self.i + 1][0] == NUMBER:
            self.i += 2
            return self._attr_number(toks[self.i - 1][1], offset, True)
        if kind == PUNCT and text in ("[", "("):
            close = "]" if text == "[" else ")"
            self.enter(offset)
            self.i += 1
            items = []
            while not self.accept(close):
                items.append(self.parse_attr_value())
                if not self.accept(","):
                    self.expect(close)
                    break
            self.depth -= 1
            return tuple(items)
        raise self.error("expected an attribute value (a number, a string, True, False, None or a "
                         f"list) but found {_describe(toks[self.i])}", offset)

    def _attr_number(self, text: str, offset: int, negative: bool):
        m = _LITERAL.match(text)
        digits, frac, exp, suffix = m.groups()
        suffix = suffix or ""
        if suffix not in _SUFFIX:
            raise self.error(f"unknown literal suffix '{suffix}' in {text}", offset)
        dtype = _SUFFIX[suffix]
        if frac or exp or (dtype is not None and dtype.startswith("float")):
            value = float(digits + (frac or "") + (exp or ""))
        else:
            value = int(digits)
        return -value if negative else value

    def parse_atom(self) -> Expr:
        toks = self.toks
        kind, text, offset = toks[self.i]
        if kind == LOCAL or kind == GRAPH:
            self.i += 1
            for scope in reversed(self.scopes):
                e = scope.get(text)
                if e is not None:
                    return e
            raise self.error(f"undefined variable {text}", offset)
        if kind == GLOBAL:
            self.i += 1
            gv = self.globals.get(_name_of(text))
            if gv is None:
                close = difflib.get_close_matches(_name_of(text), list(self.globals), n=3)
                hint = f"; did you mean {', '.join('@' + c for c in close)}?" if close else ""
                raise self.error(f"undefined global {text}{hint}", offset)
            return gv
        if kind == NUMBER:
            self.i += 1
            return self.literal(text, offset, False)
        if kind == IDENT:
            handler = _ATOM_KEYWORDS.get(text)
            if handler is not None:
                return handler(self, offset)
            if text in _KEYWORDS or text == "_":
                raise self.error(f"expected an expression but found '{text}'", offset)
            self.i += 1
            con = self.constructors.get(text)
            if con is not None:
                return con
            try:
                return Op.get(text)
            except KeyError as err:
                if "." in text or not self.constructors:
                    raise self.error(err.args[0], offset) from None
                from ..op.registry import list_ops
                close = difflib.get_close_matches(text, list(self.constructors) + list_ops(), n=3)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                raise self.error(f"unknown operator or constructor '{text}'{hint}", offset) from None
        if kind == PUNCT:
            if text == "(":
                return self.parse_paren()
            if text == "-":
                # `-1`, and `--1` (= 1), as Relay's tokenizer reads a run of minus signs
                j = self.i
                while toks[j][0] == PUNCT and toks[j][1] == "-":
                    j += 1
                ntok = toks[j]
                if ntok[0] == NUMBER:
                    negative = (j - self.i) % 2 == 1
                    self.i = j + 1
                    return self.literal(ntok[1], offset, negative)
                raise self.error("unary '-' applies only to a number literal; write negative(...)",
                                 offset)
        raise self.error(f"expected an expression but found {_describe(toks[self.i])}", offset)

    def literal(self, text: str, offset: int, negative: bool) -> Constant:
        key = (text, negative)
        arr = self._literals.get(key)
        if arr is None:
            arr = self._literals[key] = self._literal_value(text, offset, negative)
        return Constant(arr).with_span(self.span(offset))

    def _literal_value(self, text: str, offset: int, negative: bool) -> np.ndarray:
        m = _LITERAL.match(text)
        digits, frac, exp, suffix = m.groups()
        suffix = suffix or ""
        if suffix not in _SUFFIX:
            raise self.error(f"unknown literal suffix '{suffix}' in {text} (the suffixes are f, f16, "
                             "f32, f64, i8, i16, i32, i64, u8, u16, u32, u64)", offset)
        is_float = bool(frac or exp)
        dtype = _SUFFIX[suffix] or ("float32" if is_float else "int32")
        sign = "-" if negative else ""
        if dtype.startswith("float"):
            value = float(digits + (frac or "") + (exp or ""))
            if negative:
                value = -value
            with np.errstate(over="ignore"):  # Relay refuses it; numpy would give inf
                overflows = bool(np.isinf(np.array(value).astype(dtype)))  # digits are finite
            if overflows:  # (a value that rounds to the largest one, as printed, is kept)
                raise self.error(f"literal {sign}{text} does not fit in {dtype} (its largest value "
                                 f"is {float(np.finfo(dtype).max):.6g})", offset)
        else:
            if is_float:
                raise self.error(f"integer literal {text} has a fraction or an exponent", offset)
            value = -int(digits) if negative else int(digits)
            info = np.iinfo(dtype)
            if not info.min <= value <= info.max and not suffix:
                # Relay: an integer without a suffix that int32 cannot hold is an int64
                dtype = "int64"
                info = np.iinfo(dtype)
            if not info.min <= value <= info.max:
                raise self.error(f"literal {sign}{text} does not fit in {dtype}", offset)
        return np.array(value, dtype=dtype)

    def parse_paren(self) -> Expr:
        """``()``, ``(e)``, ``(e,)``, ``(e1, e2, ...)``, or a parenthesized block."""
        offset = self.expect("(")[2]
        if self.accept(")"):
            return Tuple(()).with_span(self.span(offset))
        first = self.parse_block()
        if self.accept(")"):
            return first
        if not self.peek_is(","):
            tok = self.toks[self.i]
            raise self.error(f"expected ')' or ',' but found {_describe(tok)}", tok[2], "')' or ','")
        fields = [first]
        while self.accept(","):
            if self.accept(")"):
                break
            fields.append(self.parse_expr())
        else:
            self.expect(")")
        return Tuple(fields).with_span(self.span(offset))

    def parse_fn(self, offset: int) -> Function:
        self.i += 1
        return self.parse_function_rest(offset)

    def parse_if(self, offset: int) -> If:
        self.i += 1
        if not self.peek_is("("):
            tok = self.toks[self.i]
            raise self.error(f"expected '(' after 'if' but found {_describe(tok)}", tok[2], "'('")
        cond = self.parse_paren()
        then = self.parse_braced_block()
        self.expect_keyword("else")
        otherwise = self.parse_braced_block()
        return If(cond, then, otherwise).with_span(self.span(offset))

    def parse_match(self, offset: int) -> Match:
        self.i += 1
        complete = not self.accept("?")
        if not self.peek_is("("):
            tok = self.toks[self.i]
            raise self.error(f"expected '(' after 'match' but found {_describe(tok)}", tok[2], "'('")
        data = self.parse_paren()
        self.expect("{")
        clauses = []
        while not self.accept("}"):
            self.scopes.append({})
            lhs = self.parse_pattern()
            self.expect("=>")
            rhs = self.parse_braced_block() if self.peek_is("{") else self.parse_expr()
            self.scopes.pop()
            clauses.append(Clause(lhs, rhs))
            if not self.accept(","):
                self.expect("}")
                break
        return Match(data, clauses, complete).with_span(self.span(offset))

    def parse_pattern(self):
        toks = self.toks
        kind, text, offset = toks[self.i]
        self.enter(offset)
        if kind == IDENT and text == "_":
            self.i += 1
            pat = PatternWildcard()
        elif kind == LOCAL:
            self.i += 1
            ann = self.parse_type() if self.accept(":") else None
            v = Var(_name_of(text), ann).with_span(self.span(offset))
            self.scopes[-1][text] = v
            pat = PatternVar(v)
        elif kind == IDENT:
            con = self.constructors.get(text)
            if con is None:
                close = difflib.get_close_matches(text, list(self.constructors), n=3)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                raise self.error(f"unknown constructor {text}{hint}", offset)
            self.i += 1
            subs = self.parse_pattern_list() if self.peek_is("(") else []
            pat = PatternConstructor(con, subs)
        elif kind == PUNCT and text == "(":
            pat = PatternTuple(self.parse_pattern_list())
        else:
            raise self.error(f"expected a pattern (_, %x, a constructor or a tuple) but found "
                             f"{_describe(toks[self.i])}", offset)
        self.depth -= 1
        return pat

    def parse_pattern_list(self) -> list:
        self.expect("(")
        out = []
        while not self.accept(")"):
            out.append(self.parse_pattern())
            if not self.accept(","):
                self.expect(")")
                break
        return out

    def parse_ref(self, offset: int) -> Expr:
        word = self.toks[self.i][1]
        self.i += 1
        self.expect("(")
        first = self.parse_expr()
        if word == "ref_write":
            self.expect(",")
            second = self.parse_expr()
            self.expect(")")
            return RefWrite(first, second).with_span(self.span(offset))
        self.expect(")")
        node = RefCreate(first) if word == "ref" else RefRead(first)
        return node.with_span(self.span(offset))

    def parse_bool(self, offset: int) -> Constant:
        value = self.toks[self.i][1] == "True"
        self.i += 1
        return Constant(np.array(value, dtype="bool")).with_span(self.span(offset))

    def parse_meta(self, offset: int) -> Constant:
        self.i += 1
        self.expect("[")
        ktok = self.expect_kind(IDENT, "a metadata kind like relay.Constant")
        self.expect("]")
        self.expect("[")
        itok = self.expect_kind(NUMBER, "an index")
        self.expect("]")
        if ktok[1] != "relay.Constant":
            raise self.error(f"unsupported metadata kind {ktok[1]} (only relay.Constant is)", ktok[2])
        if not itok[1].isdigit():
            raise self.error(f"expected an index but found '{itok[1]}'", itok[2])
        table = self.metadata()
        index = int(itok[1])
        ref = f"meta[relay.Constant][{index}]"
        if table is None:
            raise self.error(f"{ref} refers to the #[metadata] section, but the text has none "
                             "(print it with show_meta_data=True)", offset)
        if index >= len(table):
            where = ("the #[metadata] section and init_meta_table" if self._extra_meta
                     else "the #[metadata] section")
            raise self.error(f"{ref} is not in {where} (they hold {len(table)} constants)"
                             if self._extra_meta else
                             f"{ref} is not in {where} (it holds {len(table)} constants)", offset)
        return table[index]

    def metadata(self) -> Optional[list]:
        """The constants ``meta[relay.Constant][i]`` refers to: the ``#[metadata]`` section's,
        then those of the ``init_meta_table`` given to :func:`parse`; None when there are none."""
        if self._meta is not None:
            return self._meta
        if self.meta_text is None:
            if self._extra_meta:
                self._meta = list(self._extra_meta)
            return self._meta
        base = self.meta_offset
        try:
            doc = json.loads(self.meta_text)
        except json.JSONDecodeError as err:
            raise self.error(f"the #[metadata] section is not valid JSON: {err.msg}",
                             base + err.pos) from None
        entries = doc.get("relay.Constant", []) if isinstance(doc, dict) else None
        if not isinstance(entries, list):
            raise self.error('the #[metadata] section must be an object {"relay.Constant": [...]}',
                             base)
        table = []
        for k, entry in enumerate(entries):
            try:
                table.append(Constant(_decode_constant(entry)))
            except (KeyError, TypeError, ValueError, binascii.Error) as err:
                raise self.error(f"bad entry relay.Constant[{k}] in the #[metadata] section: {err}",
                                 base) from None
        table.extend(self._extra_meta)
        self._meta = table
        return table

    # ---- types ---------------------------------------------------------------------------
    def parse_type(self):
        toks = self.toks
        kind, text, offset = toks[self.i]
        self.enter(offset)
        if kind == PUNCT and text == "(":
            self.i += 1
            if self.accept(")"):
                t = TupleType(())
            else:
                first = self.parse_type()
                if self.accept(")"):
                    t = first
                else:
                    self.expect(",")
                    fields = [first] + self.parse_type_list(")")
                    t = TupleType(fields)
        elif kind == IDENT:
            self.i += 1
            if text == "_":
                t = IncompleteType()
            elif text == "fn":
                t = self.parse_func_type()
            elif text == "Tensor":
                t = self.parse_tensor_type()
            elif text == "Ref":
                self.expect("[")
                t = RefType(self.parse_type())
                self.expect("]")
            elif text in DTYPES:
                t = TensorType((), text)
            elif text in _DTYPE_SHORTHANDS or _VECTOR_DTYPE.match(text):
                t = TensorType((), self.dtype_name(text, offset))
            else:
                t = self._named_type(text, offset)
        else:
            raise self.error(f"expected a type but found {_describe(toks[self.i])}", offset)
        self.depth -= 1
        return t

    def _named_type(self, name: str, offset: int):
        for scope in reversed(self.type_scopes):
            tv = scope.get(name)
            if tv is not None:
                return tv
        gtv = self.adts.get(name)
        if gtv is None:
            known = list(self.adts) + [n for s in self.type_scopes for n in s] + sorted(DTYPES)
            close = difflib.get_close_matches(name, known, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise self.error(f"unknown type {name}{hint}", offset)
        args = []
        if self.accept("["):
            args = self.parse_type_list("]")
        return TypeCall(gtv, args)

    def parse_type_list(self, close: str) -> list:
        out = []
        while not self.accept(close):
            out.append(self.parse_type())
            if not self.accept(","):
                self.expect(close)
                break
        return out

    def parse_func_type(self) -> FuncType:
        type_params = self.parse_type_params() if self.peek_is("[") else []
        self.type_scopes.append({v.name_hint: v for v in type_params})
        self.expect("(")
        args = self.parse_type_list(")")
        self.expect("->")
        ret = self.parse_type()
        self.type_scopes.pop()
        return FuncType(args, ret, type_params)

    def parse_tensor_type(self) -> TensorType:
        # A program repeats the same few tensor types; they are values, so one parse serves all.
        toks = self.toks
        j = self.i
        k = j + 1
        while k < j + 48 and toks[k][0] != EOF and toks[k][1] != "]":
            k += 1
        key = None
        if toks[k][0] == PUNCT and toks[k][1] == "]":
            key = tuple(tok[1] for tok in toks[j + 1:k])
            cached = self._tensor_types.get(key)
            if cached is not None:
                self.i = k + 1
                return cached
        t = self._parse_tensor_type()
        if key is not None and self.i == k + 1:
            self._tensor_types[key] = t
        return t

    def _parse_tensor_type(self) -> TensorType:
        self.expect("[")
        offset = self.toks[self.i][2]
        self.expect("(")
        dims = []
        while not self.accept(")"):
            dims.append(self.parse_dim())
            if not self.accept(","):
                self.expect(")")
                break
        self.expect(",")
        dtok = self.expect_kind(IDENT, "a dtype")
        dtype = self.dtype_name(dtok[1], dtok[2])
        self.expect("]")
        try:
            return TensorType(tuple(dims), dtype)
        except (TypeError, ValueError) as err:
            raise self.error(str(err), offset) from None

    def dtype_name(self, text: str, offset: int) -> str:
        """The dtype a type's name stands for: ``int32``, Relay's shorthands ``int``, ``uint``
        and ``float`` (32 bits, as TVM's String2DLDataType reads them), or a vector dtype
        ``int8x4`` (an element dtype and a lane count)."""
        if text in DTYPES:
            return text
        short = _DTYPE_SHORTHANDS.get(text)
        if short is not None:
            return short
        m = _VECTOR_DTYPE.match(text)
        if m is not None:
            element = _DTYPE_SHORTHANDS.get(m.group(1), m.group(1))
            try:
                return check_dtype(f"{element}x{m.group(2)}", vector=True)
            except ValueError as err:
                raise self.error(str(err), offset) from None
        close = difflib.get_close_matches(text, sorted(DTYPES), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise self.error(f"unknown dtype {text}{hint}", offset)

    # dimensions: ints, names, ?, and + - * // % of them
    def parse_dim(self):
        offset = self.toks[self.i][2]
        self.enter(offset)
        value = self.parse_dim_term()
        while True:
            kind, text, off = self.toks[self.i]
            if kind == PUNCT and text in ("+", "-"):
                self.i += 1
                rhs = self.parse_dim_term()
                value = self._dim_op(symbolic.add if text == "+" else symbolic.sub, value, rhs, off)
            else:
                break
        self.depth -= 1
        return value

    def parse_dim_term(self):
        value = self.parse_dim_factor()
        while True:
            kind, text, off = self.toks[self.i]
            if kind == PUNCT and text in ("*", "//", "%"):
                self.i += 1
                rhs = self.parse_dim_factor()
                fn = {"*": symbolic.mul, "//": symbolic.floordiv, "%": symbolic.mod}[text]
                value = self._dim_op(fn, value, rhs, off)
            elif kind == GRAPH:  # `n %4` reads as `n % 4`
                self.i += 1
                value = self._dim_op(symbolic.mod, value, int(text[1:]), off)
            else:
                return value

    def parse_dim_factor(self):
        kind, text, offset = self.toks[self.i]
        if kind == NUMBER and text.isdigit():
            self.i += 1
            return int(text)
        if kind == IDENT and text != "_" and "." not in text:
            self.i += 1
            return symbolic.SymVar(text)
        if kind == PUNCT:
            if text == "?":
                self.i += 1
                return symbolic.ANY
            if text == "(":
                self.i += 1
                value = self.parse_dim()
                self.expect(")")
                return value
            if text == "-":
                self.i += 1
                return self._dim_op(symbolic.mul, -1, self.parse_dim_factor(), offset)
        raise self.error(f"expected a dimension (an integer, a name or ?) but found "
                         f"{_describe(self.toks[self.i])}", offset)

    def _dim_op(self, fn, a, b, offset):
        try:
            return fn(a, b)
        except (TypeError, ValueError, ZeroDivisionError) as err:
            raise self.error(f"bad dimension expression: {err}", offset) from None


_ATOM_KEYWORDS = {
    "fn": _Parser.parse_fn,
    "if": _Parser.parse_if,
    "match": _Parser.parse_match,
    "ref": _Parser.parse_ref,
    "ref_read": _Parser.parse_ref,
    "ref_write": _Parser.parse_ref,
    "True": _Parser.parse_bool,
    "False": _Parser.parse_bool,
    "meta": _Parser.parse_meta,
}


def _name_of(token_text: str) -> str:
    """The name a ``%x`` / ``@f`` token stands for; quoted names (``%"a b"``) are JSON strings."""
    if token_text[1:2] == '"':
        return json.loads(token_text[1:])
    return token_text[1:]


def _decode_constant(entry: dict) -> np.ndarray:
    dtype = np.dtype(entry["dtype"])
    shape = tuple(int(d) for d in entry["shape"])
    raw = base64.b64decode(entry["data"], validate=True)
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if len(raw) != count * dtype.itemsize:
        raise ValueError(f"{len(raw)} bytes of data for shape {list(shape)} of {dtype.name}")
    arr = np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(shape)
    return arr
