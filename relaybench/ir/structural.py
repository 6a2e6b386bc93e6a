"""Structural equality and hashing of programs, types, ADTs, attributes and modules.

Expression nodes compare by identity (``a == b`` is ``a is b``); these functions compare by
*structure*:

* **Bound variables** (function parameters, let variables, pattern variables) are equal when they
  are bound at corresponding places and their type annotations are equal: ``fn (%x) { %x }`` and
  ``fn (%y) { %y }`` are equal. The same holds for type parameters (``Function.type_params``,
  ``FuncType.type_params``, ``TypeData.type_vars``).
* **Free variables** are equal only when they are the same object, unless ``map_free_vars=True``:
  then they are paired on first meeting, and the pairing must stay a bijection.
* **Sharing is structure** (graph equality, as in TVM): a node used twice on one side must match one
  node used twice on the other. ``%0 = f(%x); g(%0, %0)`` is *not* equal to ``g(f(%x), f(%x))``
  (two separate calls): the first computes ``f`` once, the second twice. Constants, operators,
  global variables, constructors and the empty tuple ``()`` are values, so whether they are
  shared does not matter (Relay's unit value: two ``()`` nodes are as good as one shared one).
* ``GlobalVar``\\ s compare by name, ``GlobalTypeVar``\\ s by name, constructors by name, tag and the
  name of their ADT, constants by dtype, shape and bytes, attributes with ``==``, tensor dims with
  ``==`` (symbolic dims are canonical). ``Call.type_args``, ``checked_type`` and spans are ignored.
  ``IncompleteType`` equals ``IncompleteType``.
* Two modules are equal when they define the same global names with equal functions and the same
  type names with equal definitions.

Both sides are walked in lockstep, in pre-order, with an explicit stack, so programs of any depth
compare in linear time. :func:`structural_hash` walks one side in the same order and is consistent
with equality (equal values hash alike). :func:`assert_structural_equal` reports the path to the
first difference:

>>> from relaybench.ir import var, const, Function
>>> x, y = var("x", shape=(2,)), var("y", shape=(2,))
>>> structural_equal(Function([x], x + const(1.0)), Function([y], y + const(1.0)))
True
>>> structural_equal(x + const(1.0), y + const(1.0))
False
>>> structural_equal(x + const(1.0), y + const(1.0), map_free_vars=True)
True
>>> structural_hash(Function([x], x * x)) == structural_hash(Function([y], y * y))
True
>>> diff = first_difference(Function([x], x + const(1.0)), Function([y], y + const(2.0)))
>>> diff.path, diff.reason
('body.args[1]', 'constants have different values')

:func:`assert_structural_equal` raises an AssertionError whose message is that path, the reason,
and the text of both subterms.
"""

from __future__ import annotations

import hashlib
import weakref
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from .._gc import gc_paused
from .adt import TypeData
from .attrs import Attrs
from .expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If, Let, Match, Op,
                   PatternConstructor, PatternTuple, PatternVar, PatternWildcard, RefCreate, RefRead,
                   RefWrite, Tuple, TupleGetItem, Var, expr_children)
from .module import IRModule
from .symbolic import AnyDim, SymExpr, SymVar, format_dim
from .types import (FuncType, GlobalTypeVar, IncompleteType, RefType, TensorType, TupleType, Type,
                    TypeCall, TypeRelation, TypeVar, type_str)

__all__ = ["structural_equal", "structural_hash", "assert_structural_equal", "first_difference",
           "Difference"]


# ---------------------------------------------------------------------------------------------
# How each node class is compared: ``describe(node) -> (key, children)``.
#
# ``key`` holds everything compared at the node itself (compared with ``==``; hashed after
# normalization); ``children`` lists ``(path segment, kind, child)`` to be compared pairwise, in
# order. Equality and hashing both use these tables, which keeps them consistent.

_NODE, _BIND_VAR, _BIND_TVAR, _VALUE = 0, 1, 2, 3


def _seq(name: str, items, kind: int = _NODE) -> list:
    # a path segment (name, i) is formatted ``.name[i]`` only when a message needs it
    return [((name, i), kind, item) for i, item in enumerate(items)]


def _describe_function(f: Function):
    children = _seq("type_params", f.type_params, _BIND_TVAR) + _seq("params", f.params, _BIND_VAR)
    children.append((".ret_type", _NODE, f.ret_type))
    children.append((".attrs", _NODE, f.attrs))
    children.append((".body", _NODE, f.body))
    return ("Function", len(f.params), len(f.type_params)), children


def _describe_call(c: Call):
    children = [(".op", _NODE, c.op)]
    children += [(("args", i), _NODE, a) for i, a in enumerate(c.args)]
    children.append((".attrs", _NODE, c.attrs))
    return ("Call", len(c.args)), children


def _describe_constant(c: Constant):
    # (equality compares constants in place, without this key; hashing uses it)
    d = c.data
    return ("Constant", d.dtype.str, d.shape, d.tobytes() if d.nbytes <= 64 else _array_digest(d)), ()


def _describe_match(m: Match):
    return ("Match", bool(m.complete), len(m.clauses)), _seq("clauses", m.clauses)


def _describe_attrs(a: Attrs):
    if not a:
        return ("Attrs", ()), ()
    keys = tuple(sorted(a))
    return ("Attrs", keys), [(f"[{k!r}]".replace("'", '"'), _VALUE, a[k]) for k in keys]


def _describe_func_type(t: FuncType):
    children = _seq("type_params", t.type_params, _BIND_TVAR) + _seq("arg_types", t.arg_types)
    children.append((".ret_type", _NODE, t.ret_type))
    children.extend(_seq("type_constraints", t.type_constraints))
    return ("FuncType", len(t.arg_types), len(t.type_params), len(t.type_constraints)), children


def _describe_type_relation(t: TypeRelation):
    children = _seq("args", t.args)
    children.append((".attrs", _VALUE, t.attrs))
    return ("TypeRelation", t.func, t.num_inputs, len(t.args)), children


def _describe_type_data(td: TypeData):
    children = _seq("type_vars", td.type_vars, _BIND_TVAR)
    children.extend((("constructors", i), _NODE, _ConstructorDef(c)) for i, c in enumerate(td.constructors))
    return ("TypeData", td.header.name_hint, len(td.type_vars), len(td.constructors)), children


@dataclass(frozen=True, eq=False)
class _ConstructorDef:
    """A constructor inside a TypeData, where (unlike a use of it) its field types count too."""

    con: Constructor


def _describe_constructor_def(d: _ConstructorDef):
    c = d.con
    return (("ConstructorDef", c.name_hint, c.tag, len(c.inputs)), _seq("inputs", c.inputs))


def _describe_module(m: IRModule):
    funcs = sorted((gv.name_hint, f) for gv, f in m.functions.items())
    types = sorted((gt.name_hint, td) for gt, td in m.type_definitions.items())
    children = [(f'types["{name}"]', _NODE, td) for name, td in types]
    children.extend((f"@{name}", _NODE, f) for name, f in funcs)
    return ("IRModule", tuple(n for n, _ in funcs), tuple(n for n, _ in types)), children


def _describe_list(seq):
    return ("list", len(seq)), [(("", i), _NODE, item) for i, item in enumerate(seq)]


_DESCRIBE = {
    # expressions
    GlobalVar: lambda e: (("GlobalVar", e.name_hint), ()),
    Op: lambda e: (("Op", e.name), ()),
    Constructor: lambda e: (("Constructor", e.name_hint, e.tag, e.belong_to.name_hint), ()),
    Constant: _describe_constant,
    Tuple: lambda e: (("Tuple", len(e.fields)), _seq("fields", e.fields)),
    TupleGetItem: lambda e: (("TupleGetItem", e.index), [(".tuple_value", _NODE, e.tuple_value)]),
    Function: _describe_function,
    Call: _describe_call,
    Let: lambda e: (("Let",), [(".var", _BIND_VAR, e.var), (".value", _NODE, e.value),
                               (".body", _NODE, e.body)]),
    If: lambda e: (("If",), [(".cond", _NODE, e.cond), (".true_branch", _NODE, e.true_branch),
                             (".false_branch", _NODE, e.false_branch)]),
    Match: _describe_match,
    Clause: lambda c: (("Clause",), [(".lhs", _NODE, c.lhs), (".rhs", _NODE, c.rhs)]),
    RefCreate: lambda e: (("RefCreate",), [(".value", _NODE, e.value)]),
    RefRead: lambda e: (("RefRead",), [(".ref", _NODE, e.ref)]),
    RefWrite: lambda e: (("RefWrite",), [(".ref", _NODE, e.ref), (".value", _NODE, e.value)]),
    # patterns
    PatternWildcard: lambda p: (("PatternWildcard",), ()),
    PatternVar: lambda p: (("PatternVar",), [(".var", _BIND_VAR, p.var)]),
    PatternConstructor: lambda p: (("PatternConstructor", len(p.patterns)),
                                   [(".constructor", _NODE, p.constructor)] + _seq("patterns", p.patterns)),
    PatternTuple: lambda p: (("PatternTuple", len(p.patterns)), _seq("patterns", p.patterns)),
    # types
    TensorType: lambda t: (("TensorType", t.dtype, t.shape), ()),
    TupleType: lambda t: (("TupleType", len(t.fields)), _seq("fields", t.fields)),
    FuncType: _describe_func_type,
    GlobalTypeVar: lambda t: (("GlobalTypeVar", t.name_hint), ()),
    IncompleteType: lambda t: (("IncompleteType",), ()),
    TypeRelation: _describe_type_relation,
    TypeCall: lambda t: (("TypeCall", len(t.args)), [(".func", _NODE, t.func)] + _seq("args", t.args)),
    RefType: lambda t: (("RefType",), [(".value", _NODE, t.value)]),
    # definitions and containers
    TypeData: _describe_type_data,
    _ConstructorDef: _describe_constructor_def,
    Attrs: _describe_attrs,
    IRModule: _describe_module,
    list: _describe_list,
    tuple: _describe_list,
}

# Expression nodes whose sharing is part of the structure (one node used twice must match one
# node used twice). Constants, operators, globals and constructors are plain values.
_GRAPH_BASES = (Tuple, TupleGetItem, Function, Call, Let, If, Match, RefCreate, RefRead, RefWrite)
_PLAIN, _GRAPH, _VARIABLE = 0, 1, 2
_ROLE: dict = {}  # node class -> _PLAIN, _GRAPH or _VARIABLE (subclasses take their base's role)


def _role(cls) -> int:
    role = _ROLE.get(cls)
    if role is None:
        if issubclass(cls, (Var, TypeVar)):
            role = _VARIABLE
        elif issubclass(cls, _GRAPH_BASES):
            role = _GRAPH
        else:
            role = _PLAIN
        _ROLE[cls] = role
    return role


def _describe(node):
    fn = _DESCRIBE.get(type(node))
    if fn is None:
        for cls in type(node).__mro__[1:]:
            fn = _DESCRIBE.get(cls)
            if fn is not None:
                _DESCRIBE[type(node)] = fn
                break
        else:
            raise TypeError(f"structural equality does not know {type(node).__name__} {node!r:.60}")
    return fn(node)


# ---------------------------------------------------------------------------------------------
# Attribute values and constant data

_DIGESTS: dict = {}  # id(array) -> (weak reference to the array, digest)


def _array_digest(arr: np.ndarray) -> bytes:
    """A digest of an array's bytes; cached for read-only arrays (constants' data) while they live."""
    key = id(arr)
    hit = _DIGESTS.get(key)
    if hit is not None and hit[0]() is arr:
        return hit[1]
    flat = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
    digest = hashlib.blake2b(flat, digest_size=16).digest()
    if not arr.flags.writeable:
        if len(_DIGESTS) > 10_000:
            _DIGESTS.clear()
        _DIGESTS[key] = (weakref.ref(arr), digest)
    return digest


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    if a.nbytes <= 4096:
        return a.tobytes() == b.tobytes()
    return bool(np.array_equal(np.ascontiguousarray(a).reshape(-1).view(np.uint8),
                               np.ascontiguousarray(b).reshape(-1).view(np.uint8)))


def _value_equal(a, b) -> bool:
    """``a == b`` for attribute values, with numpy arrays compared by dtype, shape and bytes."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and a.tobytes() == b.tobytes())
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        # attribute values nest only as deep as their literal, so this recursion is shallow
        return type(a) is type(b) and len(a) == len(b) and all(_value_equal(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except Exception:
        return False


def _norm(v):
    """A hashable token for a value, equal for values that compare equal with ``==``.

    Python treats ``1``, ``1.0`` and ``True`` as equal; so does this (they all become ``1``).
    """
    if v is None or isinstance(v, (str, bytes)):
        return v
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return int(v) if v.is_integer() else v
    if isinstance(v, (tuple, list)):
        return (type(v).__name__,) + tuple(_norm(x) for x in v)
    if isinstance(v, Attrs):
        return ("Attrs",) + tuple((k, _norm(v[k])) for k in sorted(v))
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.name, v.shape, _array_digest(v))
    if isinstance(v, (SymVar, SymExpr, AnyDim)):
        return ("dim", format_dim(v))
    if isinstance(v, Type):
        return ("type", type_str(v))
    if callable(v) and hasattr(v, "__qualname__"):
        return ("callable", getattr(v, "__module__", None), v.__qualname__)
    try:
        return (type(v).__name__, hash(v))
    except TypeError:
        return type(v).__name__


# ---------------------------------------------------------------------------------------------
# Equality


@dataclass(frozen=True)
class Difference:
    """The first place where two values differ: a path such as ``@main.body.args[0]``, a reason,
    and the subterms found there on each side."""

    path: str
    reason: str
    lhs: Any
    rhs: Any
    lhs_context: Any = None
    rhs_context: Any = None

    def message(self) -> str:
        lines = [f"not structurally equal at {self.path}: {self.reason}",
                 "  lhs: " + _indent(_short(self.lhs)),
                 "  rhs: " + _indent(_short(self.rhs))]
        if self.lhs_context is not None:
            lines.append("  in lhs: " + _indent(_short(self.lhs_context)))
            lines.append("  in rhs: " + _indent(_short(self.rhs_context)))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.message()


class _Equal:
    """One comparison: pairs of visited graph nodes, variable and type-variable bijections."""

    def __init__(self, map_free_vars: bool):
        self.map_free_vars = map_free_vars
        self.lhs_nodes: dict = {}
        self.rhs_nodes: dict = {}
        self.lhs_vars: dict = {}
        self.rhs_vars: dict = {}

    def run(self, lhs, rhs, path=None) -> Optional[tuple]:
        """None when equal, else ``(path, reason, lhs, rhs)`` of the first difference."""
        lhs_nodes, rhs_nodes = self.lhs_nodes, self.rhs_nodes
        stack = [(lhs, rhs, path, _NODE)]
        pop, push = stack.pop, stack.append
        while stack:
            l, r, path, kind = pop()
            if kind == _NODE:
                if l is None or r is None:
                    if l is r:
                        continue
                    return path, ("missing on the lhs" if l is None else "missing on the rhs"), l, r
                cls = type(l)
                if cls is not type(r):
                    return path, f"different kinds of node: {_kind(l)} vs {_kind(r)}", l, r
                role = _ROLE.get(cls)
                if role is None:
                    role = _role(cls)
                if role == _VARIABLE:
                    reason = self._use_var(l, r, path, push)
                    if reason:
                        return path, reason, l, r
                    continue
                if role == _GRAPH and not (cls is Tuple and not l.fields and not r.fields):
                    partner = lhs_nodes.get(l)
                    if partner is not None:
                        if partner is r:
                            continue
                        return path, ("sharing differs: the lhs node here is one already met at an "
                                      "earlier place, the rhs node is not the one met there"), l, r
                    if r in rhs_nodes:
                        return path, ("sharing differs: the rhs node here is one already met at an "
                                      "earlier place, the lhs node is not the one met there"), l, r
                    lhs_nodes[l] = r
                    rhs_nodes[r] = l
                if cls is TensorType:  # the commonest type: no children, compared in place
                    if l.dtype != r.dtype or l.shape != r.shape:
                        return _explain(l, r, path)
                    continue
                if cls is Constant:
                    a, b = l.data, r.data
                    if a is not b and (a.dtype != b.dtype or a.shape != b.shape or not _same_bytes(a, b)):
                        return _explain(l, r, path)
                    continue
                lkey, lkids = _describe(l)
                rkey, rkids = _describe(r)
                if lkey != rkey:
                    return _explain(l, r, path)
                for i in range(len(lkids) - 1, -1, -1):
                    seg, ckind, lc = lkids[i]
                    push((lc, rkids[i][2], (path, seg, l, r), ckind))
            elif kind == _BIND_VAR or kind == _BIND_TVAR:
                reason = self._bind(l, r, path, push)
                if reason:
                    return path, reason, l, r
            else:  # _VALUE
                if not _value_equal(l, r):
                    return path, "attribute values differ", l, r
        return None

    def _use_var(self, l, r, path, push) -> Optional[str]:
        """A use of a variable (or type variable): bound ones by their binding, free ones by
        identity or, with ``map_free_vars``, by a bijection made on first meeting."""
        partner = self.lhs_vars.get(l)
        if partner is not None:
            if partner is r:
                return None
            return f"{_var_name(l)} corresponds to {_var_name(partner)}, not to {_var_name(r)}"
        other = self.rhs_vars.get(r)
        if other is not None:
            return f"{_var_name(r)} on the rhs corresponds to {_var_name(other)}, not to {_var_name(l)}"
        if self.map_free_vars:
            return self._bind(l, r, path, push)
        if l is r:
            self.lhs_vars[l] = r
            self.rhs_vars[r] = l
            return None
        return (f"different free variables {_var_name(l)} and {_var_name(r)} "
                f"(map_free_vars=True pairs free variables)")

    def _bind(self, l, r, path, push) -> Optional[str]:
        """A binding site: pair the variables and compare their annotations (kinds for TypeVars)."""
        if type(l) is not type(r):
            return f"different kinds of binder: {_kind(l)} vs {_kind(r)}"
        partner = self.lhs_vars.get(l)
        if partner is not None:
            if partner is r:
                return None
            return (f"{_var_name(l)} is bound again here, to {_var_name(r)}; "
                    f"it already corresponds to {_var_name(partner)}")
        other = self.rhs_vars.get(r)
        if other is not None:
            return f"{_var_name(r)} on the rhs is bound again here; it already corresponds to {_var_name(other)}"
        self.lhs_vars[l] = r
        self.rhs_vars[r] = l
        if isinstance(l, Var):
            push((l.type_annotation, r.type_annotation, (path, ".type_annotation", l, r), _NODE))
        elif l.kind != r.kind:
            return f"type parameters of different kinds: {l.kind.name} vs {r.kind.name}"
        return None


def _explain(l, r, path) -> tuple:
    """Why two nodes of the same class differ at the node itself: ``(path, reason, l, r)``."""
    where = lambda seg: (path, seg, l, r)  # noqa: E731
    if isinstance(l, TensorType):
        if l.dtype != r.dtype:
            return where(".dtype"), f"dtypes differ: {l.dtype} vs {r.dtype}", l, r
        if len(l.shape) != len(r.shape):
            return path, f"ranks differ: {len(l.shape)} vs {len(r.shape)}", l, r
        for i, (a, b) in enumerate(zip(l.shape, r.shape)):
            if a != b:
                return where(f".shape[{i}]"), f"dimensions differ: {format_dim(a)} vs {format_dim(b)}", l, r
    if isinstance(l, Constant):
        a, b = l.data, r.data
        if a.dtype != b.dtype:
            return path, f"constants have different dtypes: {a.dtype.name} vs {b.dtype.name}", l, r
        if a.shape != b.shape:
            return path, f"constants have different shapes: {a.shape} vs {b.shape}", l, r
        return path, "constants have different values", l, r
    if isinstance(l, Op):
        return path, f"different operators: {l.name} vs {r.name}", l, r
    if isinstance(l, (GlobalVar, GlobalTypeVar)):
        return path, f"different globals: {l.name_hint} vs {r.name_hint}", l, r
    if isinstance(l, Constructor):
        return path, (f"different constructors: {l.name_hint} (tag {l.tag}) of {l.belong_to.name_hint} vs "
                      f"{r.name_hint} (tag {r.tag}) of {r.belong_to.name_hint}"), l, r
    if isinstance(l, Attrs):
        only_l = [k for k in l if k not in r]
        only_r = [k for k in r if k not in l]
        parts = []
        if only_l:
            parts.append("only the lhs has " + ", ".join(only_l))
        if only_r:
            parts.append("only the rhs has " + ", ".join(only_r))
        return path, "attributes differ: " + "; ".join(parts), l, r
    if isinstance(l, IRModule):
        lf, rf = {g.name_hint for g in l.functions}, {g.name_hint for g in r.functions}
        lt, rt = {g.name_hint for g in l.type_definitions}, {g.name_hint for g in r.type_definitions}
        parts = []
        for what, a, b in (("functions", lf, rf), ("types", lt, rt)):
            if a - b:
                parts.append(f"{what} only in the lhs: " + ", ".join(sorted(a - b)))
            if b - a:
                parts.append(f"{what} only in the rhs: " + ", ".join(sorted(b - a)))
        return path, "modules define different names: " + "; ".join(parts), l, r
    if isinstance(l, (Call, Function, Tuple, TupleType, FuncType, TypeCall, PatternTuple,
                      PatternConstructor, list, tuple)):
        return path, _count_reason(l, r), l, r
    if isinstance(l, TupleGetItem):
        return path, f"different tuple indices: {l.index} vs {r.index}", l, r
    if isinstance(l, Match):
        if l.complete != r.complete:
            return path, "one match is complete (match), the other partial (match?)", l, r
        return path, f"different numbers of clauses: {len(l.clauses)} vs {len(r.clauses)}", l, r
    if isinstance(l, TypeRelation):
        if l.func is not r.func:
            return path, f"different relations: {l.name} vs {r.name}", l, r
        return path, "relations differ in their number of inputs or arguments", l, r
    if isinstance(l, _ConstructorDef):
        return path, (f"different constructor definitions: {l.con.name_hint} (tag {l.con.tag}) vs "
                      f"{r.con.name_hint} (tag {r.con.tag})"), l, r
    if isinstance(l, TypeData):
        return path, f"different type definitions: {l.name} vs {r.name}", l, r
    return path, "nodes differ", l, r


def _count_reason(l, r) -> str:
    counts = {
        Call: ("arguments", lambda n: n.args), Function: ("parameters", lambda n: n.params),
        Tuple: ("fields", lambda n: n.fields), TupleType: ("fields", lambda n: n.fields),
        TypeCall: ("type arguments", lambda n: n.args), PatternTuple: ("sub-patterns", lambda n: n.patterns),
        PatternConstructor: ("sub-patterns", lambda n: n.patterns), list: ("items", lambda n: n),
        tuple: ("items", lambda n: n),
    }
    if isinstance(l, FuncType):
        for what, get in (("arguments", lambda t: t.arg_types), ("type parameters", lambda t: t.type_params),
                          ("constraints", lambda t: t.type_constraints)):
            if len(get(l)) != len(get(r)):
                return f"different numbers of {what}: {len(get(l))} vs {len(get(r))}"
    if isinstance(l, Function) and len(l.params) == len(r.params):
        return f"different numbers of type parameters: {len(l.type_params)} vs {len(r.type_params)}"
    for cls, (what, get) in counts.items():
        if isinstance(l, cls):
            return f"different numbers of {what}: {len(get(l))} vs {len(get(r))}"
    return "nodes differ"


def _kind(x) -> str:
    if isinstance(x, _ConstructorDef):
        return "Constructor"
    return type(x).__name__


def _var_name(v) -> str:
    if isinstance(v, Var):
        return "%" + v.name_hint
    return getattr(v, "name_hint", repr(v))


# ---------------------------------------------------------------------------------------------
# Paths and short texts for messages

def _path_segments(path) -> list:
    segs = []
    while path is not None:
        path, seg = path[0], path[1]
        if isinstance(seg, tuple):
            name, i = seg
            seg = f".{name}[{i}]" if name else f"[{i}]"
        segs.append(seg)
    segs.reverse()
    return segs


def _innermost_exprs(path):
    """The innermost expression pair enclosing a path (for context in messages)."""
    while path is not None:
        l, r = path[2], path[3]
        if isinstance(l, Expr) and isinstance(r, Expr):
            return l, r
        path = path[0]
    return None, None


def _format_path(path, root: str = "") -> str:
    segs = _path_segments(path)
    # collapse long runs of one segment (a 100,000-deep chain is one line, not 100,000)
    parts: list = []
    i = 0
    while i < len(segs):
        j = i
        while j < len(segs) and segs[j] == segs[i]:
            j += 1
        run = j - i
        parts.append(segs[i] if run < 4 else f"{segs[i]}{{x{run}}}")
        i = j
    if len(parts) > 60:
        parts = parts[:30] + [f"...({len(parts) - 50} more)..."] + parts[-20:]
    text = root + "".join(parts)
    if text.startswith("."):
        text = text[1:]
    return text or "<root>"


def _small(e: Expr, limit: int = 400) -> bool:
    seen = set()
    stack = [e]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if len(seen) > limit:
            return False
        stack.extend(expr_children(n))
    return True


def _shallow(x) -> str:
    """A one-line description of a node that does not need the printer."""
    if isinstance(x, Var):
        return "%" + x.name_hint + (f": {type_str(x.type_annotation)}" if x.type_annotation is not None else "")
    if isinstance(x, GlobalVar):
        return "@" + x.name_hint
    if isinstance(x, Op):
        return x.name
    if isinstance(x, Constructor):
        return x.name_hint
    if isinstance(x, Constant):
        d = x.data
        if d.ndim == 0:
            return f"{d.item()!r} ({d.dtype.name})"
        return f"constant of type {type_str(x.tensor_type)}"
    if isinstance(x, Call):
        return f"{_shallow(x.op)}(...{len(x.args)} args)"
    if isinstance(x, Function):
        return "fn (" + ", ".join("%" + p.name_hint for p in x.params) + ") { ... }"
    if isinstance(x, Let):
        return f"let %{x.var.name_hint} = ...; ..."
    if isinstance(x, Tuple):
        return f"(...{len(x.fields)} fields)"
    if isinstance(x, TupleGetItem):
        return f"(...).{x.index}"
    return f"<{type(x).__name__}>"


def _short(x) -> str:
    """Short text of a subterm: the printer's text when it is small, a shallow description else."""
    if isinstance(x, (Var, GlobalVar, Op, Constructor)):
        text = _shallow(x)
    elif isinstance(x, Expr):
        text = None
        if _small(x):
            try:
                text = x.astext(show_types=False)
                # the free-variable declarations the printer puts first only repeat the context
                lines = text.split("\n")
                while len(lines) > 1 and lines[0].startswith("free_var "):
                    lines.pop(0)
                text = "\n".join(lines)
            except Exception:  # the printer must never hide the difference
                text = None
        if text is None:
            text = _shallow(x)
    elif isinstance(x, Type):
        text = type_str(x)
    elif isinstance(x, _ConstructorDef):
        c = x.con
        text = c.name_hint + ("(" + ", ".join(type_str(t) for t in c.inputs) + ")" if c.inputs else "")
    elif isinstance(x, (TypeData, PatternWildcard, PatternVar, PatternTuple, PatternConstructor, Clause)):
        text = _pattern_text(x) if not isinstance(x, (TypeData, Clause)) else str(x)
    elif isinstance(x, IRModule):
        text = repr(x)
    else:
        text = repr(x)
    if len(text) > 600:
        text = text[:600] + " ..."
    return text


def _pattern_text(p) -> str:
    if isinstance(p, PatternWildcard):
        return "_"
    if isinstance(p, PatternVar):
        return "%" + p.var.name_hint
    # patterns nest only as deep as the source wrote them
    subs = ", ".join(_pattern_text(q) for q in p.patterns)
    if isinstance(p, PatternTuple):
        return f"({subs})"
    return p.constructor.name_hint + (f"({subs})" if p.patterns else "")


def _indent(text: str) -> str:
    return text.replace("\n", "\n        ")


# ---------------------------------------------------------------------------------------------
# Public API

def first_difference(lhs, rhs, map_free_vars: bool = False) -> Optional[Difference]:
    """The first difference (in pre-order) between two values, or None when they are equal."""
    found = _Equal(map_free_vars).run(lhs, rhs)
    if found is None:
        return None
    path, reason, l, r = found
    lctx, rctx = (None, None)
    if not isinstance(l, Expr):
        lctx, rctx = _innermost_exprs(path)
    return Difference(_format_path(path), reason, l, r, lctx, rctx)


def structural_equal(lhs, rhs, map_free_vars: bool = False) -> bool:
    """Whether two expressions, types, patterns, type definitions, attributes or modules have
    the same structure (see the module docstring for the rules)."""
    with gc_paused():
        return _Equal(map_free_vars).run(lhs, rhs) is None


def assert_structural_equal(lhs, rhs, map_free_vars: bool = False) -> None:
    """Raise AssertionError naming the path to the first difference and both sides there."""
    diff = first_difference(lhs, rhs, map_free_vars)
    if diff is not None:
        raise AssertionError(diff.message())


def structural_hash(value, map_free_vars: bool = False, constant_data: bool = True) -> int:
    """A 64-bit hash consistent with :func:`structural_equal` (equal values hash alike).

    Bound variables hash by their binding order, free variables by identity (by first-occurrence
    order with ``map_free_vars``), constants by content. Deterministic within a process; a
    program without free variables hashes the same in every process.

    ``constant_data=False`` hashes a constant of rank 1 or more by its dtype and shape only
    (scalars still by value): the hash of what a compiled kernel depends on, since such constants
    reach a kernel as arguments while scalars are written into its code.
    """
    with gc_paused():
        return _structural_hash(value, map_free_vars, constant_data)


def _structural_hash(value, map_free_vars: bool, constant_data: bool) -> int:
    tokens: list = []
    emit = tokens.append
    graph_index: dict = {}
    var_index: dict = {}
    stack = [(value, _NODE)]
    pop, push = stack.pop, stack.append
    while stack:
        x, kind = pop()
        if kind == _NODE:
            if x is None:
                emit(None)
                continue
            cls = type(x)
            role = _ROLE.get(cls)
            if role is None:
                role = _role(cls)
            if role == _VARIABLE:
                n = var_index.get(x)
                if n is not None:
                    emit(("v", n))
                elif map_free_vars:
                    _hash_bind(x, var_index, emit, push)
                else:
                    emit(("free", id(x)))
                continue
            if role == _GRAPH and not (cls is Tuple and not x.fields):
                n = graph_index.get(x)
                if n is not None:
                    emit(("shared", n))
                    continue
                graph_index[x] = len(graph_index)
            if cls is TensorType:
                emit(("TensorType", x.dtype) + tuple(d if isinstance(d, int) else format_dim(d) for d in x.shape))
                continue
            if not constant_data and cls is Constant and x.data.ndim > 0:
                emit(("Constant", x.data.dtype.str, x.data.shape))
                continue
            key, children = _describe(x)
            # keys hold plain values whose repr is canonical, except a relation's function
            emit(_norm(key) if isinstance(x, TypeRelation) else key)
            for i in range(len(children) - 1, -1, -1):
                _seg, ckind, c = children[i]
                push((c, ckind))
        elif kind == _VALUE:
            emit(_norm(x))
        else:
            n = var_index.get(x)
            if n is not None:
                emit(("v", n))
            else:
                _hash_bind(x, var_index, emit, push)
    digest = hashlib.blake2b(repr(tokens).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def _hash_bind(x, var_index: dict, emit, push) -> None:
    n = len(var_index)
    var_index[x] = n
    if isinstance(x, Var):
        emit(("bind", n))
        push((x.type_annotation, _NODE))
    else:
        emit(("tbind", n, x.kind.value))
