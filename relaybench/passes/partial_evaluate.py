"""PartialEvaluate: Relay's online partial evaluator (``partial_eval.cc``; the paper's section 4).

The pass runs each global function the way the reference interpreter would, but over
*partially static* values: what is known at compile time is computed now, and what is not is
emitted as residual code. A value is one of

* a **dynamic** value: an atom of the residual program (a variable, a constant, a global);
* a **static tensor** (a numpy array);
* a **static tuple**, **ADT value** (constructor and fields) or **closure** (a function and the
  frame it was made in), whose parts may themselves be dynamic;
* a **static reference**: a cell of a compile-time store.

What it does with them:

* an operator whose arguments are all static tensors is evaluated by its numpy reference (as
  FoldConstant does); otherwise the call is emitted, let-bound;
* ``if`` on a static condition takes its branch; ``match`` on a static scrutinee takes its
  clause; on a dynamic one both are emitted, each partially evaluated in its own scope;
* a call of a known function (a global, or a static closure) is **unfolded**: its body is
  evaluated with the arguments bound, so a loop written as a recursive function whose recursion
  is decided by static values (a counter, a static list, a static tree) becomes straight-line code;
* references live in a static store: ``ref``, ``ref_write`` and ``ref_read`` fold, and a reference
  only gets a residual cell when residual code needs it. A write under dynamic control (inside a
  residual ``if``/``match``, or a residual function) is emitted, and what the store knows after
  the ``if`` is what all its branches agree on; a call of unknown code forgets what it knew about
  every reference that code can reach.

**Termination.** Each unfolding of a function is recorded on a stack, with the scope it started
in. A recursive call is unfolded when

* the recursion is under *static control* (no residual ``if``/``match``/function was opened since
  the previous activation of that function started), or
* it is under dynamic control but makes *progress*: a static integer argument went down, a
  static ADT argument got smaller, or one of them is static where it was dynamic (Relay's
  "fuel"; a loop with a static count and a dynamic early exit unrolls into nested ``if``),

and in both cases only while fewer than ``max_unroll`` activations of that function are active.
Otherwise the call is *residualized*. A global function is called as the global itself, with
every argument made residual (which this pass also evaluates, with every parameter dynamic): as
in Relay, a global recursive function stays global. For a local function (a closure), the
arguments are compared with the previous activation's, whatever differs becomes a parameter, and
the call goes to a **specialization** of the function for what stayed the same: a residual
function, let-bound (and recursive), memoized by the function and that static part, so the
specialization's own recursive calls reach it. A recursive function called with nothing static
is called, not unfolded.
A static closure that residual code needs becomes a residual function the same way.

**Output.** Residual code is in A-normal form: every operator call, tuple, projection and call is
let-bound, in evaluation order; a pure binding this pass made that nothing uses is not emitted
(no dead-code pass is needed for what the evaluator itself creates). ToGraphNormalForm turns the
result back into a dataflow graph. A call without arguments (``zeros``) gives a static tensor,
but residual code gets the call, not a constant. Like Relay, the pass substitutes the type
arguments of the polymorphic functions it unfolds, so residual functions made from them (a
closure built by ``@compose`` and returned, say) get concrete parameter types.

**Limits.** Unfolding follows the program: a recursion that branches (two recursive calls per
step) under static control is evaluated in full, as the interpreter would. A node shared (graph
form) between a residual branch and the code after it is evaluated in both places, so an
effect in such a node would run twice; programs in A-normal form, and graph-form programs
without effects in shared nodes, are not affected.

**Depth.** The evaluator is a machine with an explicit task stack (as the reference interpreter
is): neither the nesting of the program nor the depth of the recursion it unfolds uses Python's
stack, so a 100,000-operator chain goes through. The only Python recursion is on the nesting of
match patterns, which is bounded by the source text.

>>> import relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @power(%x: float32, %n: int32) -> float32 {
...   if (equal(%n, 0)) { 1f } else { multiply(%x, @power(%x, subtract(%n, 1))) }
... }
... def @main(%x: float32) -> float32 { @power(%x, 3) }''')
>>> print(PartialEvaluate()(mod)["main"].astext(show_types=False))
fn (%x: float32) -> float32 {
  let %x1: float32 = multiply(%x, 1f);
  let %x2: float32 = multiply(%x, %x1);
  multiply(%x, %x2)
}
"""

from __future__ import annotations

import gc
from typing import Optional

import numpy as np

from ..errors import CompileError
from ..ir.expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If, Let, Match, Op,
                       PatternConstructor, PatternTuple, PatternVar, PatternWildcard, RefCreate, RefRead,
                       RefWrite, Tuple, TupleGetItem, Var)
from ..ir.expr import expr_children
from ..ir.functor import post_order
from ..ir.module import IRModule
from ..ir.type_solver import map_type
from ..ir.types import FuncType, GlobalTypeVar, RefType, TensorType, TupleType, Type, TypeCall, TypeVar
from .infra import module_pass, typed

__all__ = ["PartialEvaluate", "partial_evaluate"]

# operators that mark the program instead of computing a value: never evaluated at compile time
NOT_EVALUATED = frozenset({"annotation.stop_fusion", "annotation.cast_hint", "on_device", "device_copy"})

# a static tensor with at most this many elements is compared by value when specializations
# are keyed; a bigger one by identity
_SMALL = 64


# ---------------------------------------------------------------------------------------------
# Partially static values


class _Value:
    __slots__ = ()


class Dyn(_Value):
    """A value known only at run time: an atom of the residual program."""

    __slots__ = ("atom",)

    def __init__(self, atom: Expr):
        self.atom = atom


class STensor(_Value):
    """A tensor known now. ``maker`` is the argument-less operator call that makes it (``zeros``):
    residual code gets that call rather than a big constant."""

    __slots__ = ("data", "const", "maker", "scope", "atom", "atom_scope")

    def __init__(self, data: np.ndarray, const: Optional[Constant] = None, maker: Optional[Call] = None,
                 scope=None):
        self.data, self.const, self.maker, self.scope = data, const, maker, scope
        self.atom = self.atom_scope = None


class STuple(_Value):
    __slots__ = ("fields", "scope", "atom", "atom_scope")

    def __init__(self, fields, scope):
        self.fields, self.scope = fields, scope
        self.atom = self.atom_scope = None


class SCons(_Value):
    """An ADT value whose constructor is known (its fields may be dynamic)."""

    __slots__ = ("con", "fields", "scope", "atom", "atom_scope")

    def __init__(self, con: Constructor, fields, scope):
        self.con, self.fields, self.scope = con, fields, scope
        self.atom = self.atom_scope = None


class SClosure(_Value):
    """A function value: the Function and the frame it was made in. ``type``: its function type
    when a monomorphic node gave it one (a residual function then gets annotated parameters)."""

    __slots__ = ("func", "frame", "name", "scope", "recursive", "type", "atom", "atom_scope")

    def __init__(self, func: Function, frame, name: str, scope, recursive: bool = False):
        self.func, self.frame, self.name, self.scope, self.recursive = func, frame, name, scope, recursive
        self.type = None
        self.atom = self.atom_scope = None


class SGlobal(_Value):
    __slots__ = ("gv",)

    def __init__(self, gv: GlobalVar):
        self.gv = gv


class SOp(_Value):
    """An operator used as a value."""

    __slots__ = ("op", "scope", "atom", "atom_scope")

    def __init__(self, op: Op, scope):
        self.op, self.scope = op, scope
        self.atom = self.atom_scope = None


class SConFn(_Value):
    """A constructor used as a function value."""

    __slots__ = ("con",)

    def __init__(self, con: Constructor):
        self.con = con


class SRef(_Value):
    """A reference of the static store.

    Until residual code needs the cell (``var`` is None) its content is ``value``, which only the
    scope that made it can change. Afterwards the residual cell ``var`` exists and what is known
    of its content is in the store of each scope. ``escaped``: code this pass does not see (a
    residual function, a dynamic call) may reach the cell.
    """

    __slots__ = ("value", "scope", "var", "escaped", "busy")

    def __init__(self, value: _Value, scope):
        self.value, self.scope = value, scope
        self.var = None
        self.escaped = False
        self.busy = False


class _Hole:
    """In a specialization's static part: a position that becomes a parameter."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "_"


HOLE = _Hole()


class _SkelTuple:
    """In a specialization's static part: a tuple some of whose fields are holes."""

    __slots__ = ("fields",)

    def __init__(self, n: int):
        self.fields = [None] * n


# ---------------------------------------------------------------------------------------------
# The machine's bookkeeping


_MISSING = object()


_NO_SUBST: dict = {}


class _Frame:
    """Bindings of one activation: variables, and nodes already evaluated (graph sharing).

    ``subst`` maps the type parameters of the polymorphic functions being unfolded here to the
    types this activation has them at (Relay substitutes a call's type arguments into the body
    it unfolds), so residual functions made here get concrete annotations."""

    __slots__ = ("values", "parent", "subst")

    def __init__(self, parent: Optional["_Frame"] = None, subst: Optional[dict] = None):
        self.values: dict = {}
        self.parent = parent
        self.subst = subst if subst is not None else (parent.subst if parent is not None else _NO_SUBST)

    def lookup(self, node):
        f = self
        while f is not None:
            v = f.values.get(node, _MISSING)
            if v is not _MISSING:
                return v
            f = f.parent
        return _MISSING


class _Scope:
    """A let-list of residual code: a function body or a branch of a residual if/match.

    Open scopes form a stack (``level`` is the position). ``parent`` is the lexical parent: a
    branch's is the scope below it; a residual function's is where it is bound, which may be
    further down (the levels in between are then invisible from it: ``gaps``). ``snapshot`` is
    the store of the scope below at the moment this one opened; ``free`` counts the uses, in this
    scope and the ones closed inside it, of variables bound outside.
    """

    __slots__ = ("parent", "level", "is_function", "bindings", "snapshot", "gaps", "open", "free")


class _Unfold:
    """One active unfolding (or specialization) of a function: its arguments and first scope."""

    __slots__ = ("func", "args", "scope")

    def __init__(self, func: Function, args: list, scope: _Scope):
        self.func, self.args, self.scope = func, args, scope


class _Spec:
    """A residual specialization: ``var`` (bound in ``scope``; None = a global) and its body scope.
    ``keep_alive`` holds the static values its key names by identity."""

    __slots__ = ("var", "scope", "body", "done", "keep_alive")

    def __init__(self, var, scope, keep_alive):
        self.var, self.scope, self.keep_alive = var, scope, keep_alive
        self.body = None
        self.done = False


class _Branching:
    """A residual if/match being built: its arms are evaluated one after the other."""

    __slots__ = ("node", "frame", "atom", "arms", "i", "bodies", "stores", "values", "complete")


# task kinds
(_EVAL, _STORE, _CALL, _TUPLE, _GETITEM, _LET, _IF, _MATCH, _MATCH_DYN, _REF_CREATE, _REF_READ,
 _REF_READ_DYN, _REF_WRITE, _WRITE_EMIT, _WRITE_EMIT_DYN, _RETURN, _REIFY, _BUILD, _MATERIALIZED,
 _EMIT_CALL, _SPEC_CLOSE, _BR_OPEN, _BR_VALUE, _BR_CLOSE) = range(24)

_PURE_EXPRS = (Tuple, TupleGetItem, RefCreate, RefRead, Function)


def _is_pure(expr: Expr) -> bool:
    """Whether dropping an unused binding of ``expr`` is safe (it has no effect)."""
    if type(expr) is Call:
        return type(expr.op) in (Op, Constructor)
    return type(expr) in _PURE_EXPRS


def _shallow_atoms(expr: Expr) -> tuple:
    """The atoms an emitted expression uses directly (nested bodies are counted by their scopes)."""
    cls = type(expr)
    if cls is Call:
        return (expr.op,) + expr.args
    if cls is Tuple:
        return expr.fields
    if cls is TupleGetItem:
        return (expr.tuple_value,)
    if cls is If:
        return (expr.cond,)
    if cls is Match:
        return (expr.data,)
    if cls is RefCreate:
        return (expr.value,)
    if cls is RefRead:
        return (expr.ref,)
    if cls is RefWrite:
        return (expr.ref, expr.value)
    return ()


def _is_atom(e: Expr) -> bool:
    """Atoms of the residual program: variables, constants, globals, ``()`` and ``Nil``-like
    constructor values."""
    cls = type(e)
    return cls in (Var, Constant, GlobalVar, Constructor, Op) or (
        cls is Tuple and not e.fields) or (cls is Call and type(e.op) is Constructor and not e.args)


def _opaque(fn: Function) -> bool:
    """Functions this pass must not look into (nor unfold): fused (Primitive) and partitioned
    (Compiler) ones, which are closed, so residual code can hold them as they are."""
    attrs = fn.attrs
    return bool(attrs.get("Primitive") or attrs.get("Compiler"))


def _opaque_global(fn: Function) -> bool:
    """Global functions this pass leaves as they are and only calls: also external ones and those
    marked SkipOptimization."""
    attrs = fn.attrs
    return _opaque(fn) or bool(attrs.get("Extern") or attrs.get("SkipOptimization"))


def _concrete(t: Optional[Type], allowed=frozenset()) -> Optional[Type]:
    """``t`` if it has no type variables (but ``allowed`` ones), holes or symbolic dimensions:
    safe to copy onto a new binder of the residual program; else None."""
    if t is None:
        return None
    stack = [t]
    while stack:
        node = stack.pop()
        cls = type(node)
        if cls is TensorType:
            if not all(isinstance(d, int) for d in node.shape):
                return None
        elif cls is TupleType:
            stack.extend(node.fields)
        elif cls is FuncType:
            if node.type_params or node.type_constraints:
                return None
            stack.extend(node.arg_types)
            stack.append(node.ret_type)
        elif cls is TypeCall:
            stack.extend(node.args)
            stack.append(node.func)
        elif cls is RefType:
            stack.append(node.value)
        elif cls is TypeVar:
            if node not in allowed:
                return None
        elif cls is not GlobalTypeVar:
            return None
    return t


def _subst_type(t: Optional[Type], subst: dict) -> Optional[Type]:
    if t is None or not subst:
        return t
    return map_type(t, leaf=lambda n: subst.get(n) if type(n) is TypeVar else None)


def _bind_type_vars(generic: Optional[Type], actual: Optional[Type], out: dict) -> None:
    """Match ``generic`` (with type variables) against ``actual``; bind the variables in ``out``."""
    stack = [(generic, actual)]
    while stack:
        g, a = stack.pop()
        if g is None or a is None:
            continue
        cls = type(g)
        if cls is TypeVar:
            out.setdefault(g, a)
        elif cls is not type(a):
            continue
        elif cls is TupleType and len(g.fields) == len(a.fields):
            stack.extend(zip(g.fields, a.fields))
        elif cls is FuncType and len(g.arg_types) == len(a.arg_types):
            stack.extend(zip(g.arg_types, a.arg_types))
            stack.append((g.ret_type, a.ret_type))
        elif cls is TypeCall and len(g.args) == len(a.args):
            stack.extend(zip(g.args, a.args))
        elif cls is RefType:
            stack.append((g.value, a.value))


def _where(node) -> str:
    span = getattr(node, "span", None)
    if span is not None:
        return f" at {span}"
    try:
        text = node.astext(show_types=False, show_meta_data=False)
    except Exception:  # the message must not fail because printing did
        return ""
    text = " ".join(text.split())
    return f" in `{text[:80]}{' ...' if len(text) > 80 else ''}`"


def _same_constructor(a: Constructor, b: Constructor) -> bool:
    return a is b or (a.name_hint == b.name_hint and a.tag == b.tag)


# ---------------------------------------------------------------------------------------------
# Specialization keys


def _small_equal(a: STensor, b: STensor) -> bool:
    da, db = a.data, b.data
    return (da.size <= _SMALL and da.dtype == db.dtype and da.shape == db.shape
            and np.array_equal(da, db))


def _generalize(old_args: list, new_args: list) -> tuple:
    """What of ``new_args`` stays static for a specialization: the positions equal to the previous
    activation's arguments (the same static value, or an equal small tensor; tuples field by
    field). Returns (skeleton, leaves): the skeleton holds the static parts and HOLEs; leaves are
    the values at the holes, in pre-order."""
    skeleton: list = [None] * len(new_args)
    leaves: list = []
    stack = [(old_args[i], new_args[i], skeleton, i) for i in range(len(new_args) - 1, -1, -1)]
    tuples = []
    while stack:
        old, new, box, i = stack.pop()
        cls = type(new)
        if cls is Dyn:
            box[i] = HOLE
            leaves.append(new)
        elif old is new:
            box[i] = new
        elif cls is STensor and type(old) is STensor and _small_equal(old, new):
            box[i] = new
        elif cls is STuple and type(old) is STuple and len(old.fields) == len(new.fields) and new.fields:
            skel = _SkelTuple(len(new.fields))
            box[i] = skel
            tuples.append((skel, box, i, len(leaves), new))
            for j in range(len(new.fields) - 1, -1, -1):
                stack.append((old.fields[j], new.fields[j], skel.fields, j))
        else:
            box[i] = HOLE
            leaves.append(new)
    # a tuple all of whose fields are holes is one hole: the tuple is passed whole
    for skel, box, i, first, value in reversed(tuples):
        if all(f is HOLE for f in skel.fields):
            box[i] = HOLE
            leaves[first:first + len(skel.fields)] = [value]
    return skeleton, leaves


def _skeleton_key(skeleton: list) -> tuple:
    """A hashable, pre-order description of a skeleton (static values by value or identity)."""
    out = []
    stack = list(reversed(skeleton))
    while stack:
        v = stack.pop()
        cls = type(v)
        if v is HOLE:
            out.append("H")
        elif cls is _SkelTuple:
            out.append(("(", len(v.fields)))
            stack.extend(reversed(v.fields))
        elif cls is STensor and v.data.size <= _SMALL:
            d = v.data
            out.append(("T", d.dtype.str, d.shape, d.tobytes()))
        elif cls is SGlobal:
            out.append(("G", v.gv.name_hint))
        else:
            out.append(("I", id(v)))
    return tuple(out)


def _progress(old_args: list, new_args: list) -> bool:
    """Relay's fuel: whether a static integer argument went down, a static ADT argument got
    smaller, or one of them is static where the previous activation had it dynamic (tuples are
    looked into field by field)."""
    stack = list(zip(old_args, new_args))
    while stack:
        old, new = stack.pop()
        cn, co = type(new), type(old)
        if co is Dyn and (cn is SCons or (cn is STensor and _is_int_scalar(new.data))):
            return True
        if cn is STensor and co is STensor:
            a, b = old.data, new.data
            if (a.size == 1 and b.size == 1 and a.dtype.kind in "iu" and b.dtype.kind in "iu"
                    and int(b.reshape(())) < int(a.reshape(()))):
                return True
        elif cn is SCons and co is SCons:
            if old is not new and _adt_size(new, _adt_size(old, None)) is not None:
                return True
        elif cn is STuple and co is STuple and len(old.fields) == len(new.fields):
            stack.extend(zip(old.fields, new.fields))
    return False


def _is_int_scalar(a: np.ndarray) -> bool:
    return a.size == 1 and a.dtype.kind in "iu"


def _adt_size(value: SCons, below: Optional[int]) -> Optional[int]:
    """The number of static constructor nodes in ``value`` (through tuples), or None when it
    reaches ``below`` (so a comparison stops early)."""
    count = 0
    stack = [value]
    seen = set()
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if type(v) is SCons:
            count += 1
            if below is not None and count >= below:
                return None
            stack.extend(v.fields)
        elif type(v) is STuple:
            stack.extend(v.fields)
    return count


def _static_arrays(args: list):
    """The op arguments as interpreter values (arrays, tuples of them), or None if any is dynamic."""
    out = [None] * len(args)
    stack = [(a, out, i) for i, a in enumerate(args)]
    fills = []
    while stack:
        v, box, i = stack.pop()
        if type(v) is STensor:
            box[i] = v.data
        elif type(v) is STuple:
            inner = [None] * len(v.fields)
            fills.append((box, i, inner))
            stack.extend((f, inner, j) for j, f in enumerate(v.fields))
        else:
            return None
    for box, i, inner in reversed(fills):
        box[i] = tuple(inner)
    return out


# ---------------------------------------------------------------------------------------------
# The evaluator


class _PartialEvaluator:
    def __init__(self, mod: IRModule, max_unroll: int):
        self.mod = mod
        self.max_unroll = max_unroll
        self.max_depth = 50 * max_unroll + 1000
        self.depth = 0
        self.globals = _Frame()
        self.global_values: dict = {}
        self.const_values: dict = {}
        self.letrec: dict = {}
        self.active: dict = {}     # Function -> [_Unfold]
        self.specs: dict = {}      # key -> [_Spec]
        self.uses: dict = {}       # Var -> number of uses in emitted code
        self.var_scope: dict = {}  # Var -> the scope that binds it
        self.renamable: set = set()
        self.stack: list = []
        self.fn_levels: list = []
        self.store: dict = {}
        self.tasks: list = []
        self.vals: list = []
        self.allowed = frozenset()
        self._recursive: Optional[set] = None
        for gv, fn in mod.functions.items():
            if not _opaque_global(fn):
                spec = _Spec(gv, None, None)
                spec.done = True
                self.specs[(("G", gv.name_hint),) + ("H",) * len(fn.params)] = [spec]
        self.handlers = [
            self._eval, self._store, self._call, self._tuple, self._getitem, self._let, self._if,
            self._match, self._match_dyn, self._ref_create, self._ref_read, self._ref_read_dyn,
            self._ref_write, self._write_emit, self._write_emit_dyn, self._return, self._reify,
            self._build, self._materialized, self._emit_call, self._spec_close, self._br_open,
            self._br_value, self._br_close,
        ]

    # ---- entry -----------------------------------------------------------------------------------
    def run_function(self, gv: GlobalVar, fn: Function) -> Function:
        """``fn`` partially evaluated with every parameter dynamic."""
        self.stack, self.fn_levels, self.store = [], [], {}
        self.allowed = frozenset(fn.type_params)
        root = self._open_scope(None, True)
        frame = _Frame(self.globals)
        args = []
        for p in fn.params:
            d = Dyn(p)
            frame.values[p] = d
            args.append(d)
            self.var_scope[p] = root
        entry = _Unfold(fn, args, root)
        self.active.setdefault(fn, []).append(entry)
        self.tasks = [(_REIFY, None, None), (_EVAL, fn.body, frame)]
        self.vals = []
        self._run()
        atom = self.vals.pop()
        assert not self.vals and not self.tasks, "partial evaluator stack out of balance"
        body = self._close_scope(root, atom)
        self.active[fn].pop()
        return Function(fn.params, body, fn.ret_type, fn.type_params, fn.attrs).with_span(fn.span)

    def _run(self) -> None:
        tasks, handlers = self.tasks, self.handlers
        pop = tasks.pop
        while tasks:
            kind, a, b = pop()
            handlers[kind](a, b)

    # ---- scopes and emission -------------------------------------------------------------------
    def _open_scope(self, parent: Optional[_Scope], function: bool) -> _Scope:
        s = _Scope()
        s.parent = parent
        s.level = len(self.stack)
        s.is_function = function
        s.bindings = []
        s.free = {}
        s.open = True
        if parent is None:
            s.gaps = ()
        elif s.level - parent.level > 1:
            s.gaps = parent.gaps + ((parent.level, s.level),)
        else:
            s.gaps = parent.gaps
        s.snapshot = self.store
        self.store = {} if function else dict(self.store)
        self.stack.append(s)
        if function:
            self.fn_levels.append(s.level)
        return s

    def _visible(self, s: Optional[_Scope]) -> bool:
        """Whether code emitted in the current scope sees what ``s`` binds."""
        if s is None or not s.open:
            return False
        level = s.level
        for lo, hi in self.stack[-1].gaps:
            if lo < level < hi:
                return False
        return True

    def _fn_between(self, s: _Scope) -> bool:
        """Whether a residual function's scope lies between ``s`` and the current scope."""
        return bool(self.fn_levels) and self.fn_levels[-1] > s.level

    def _use(self, atom, s: _Scope) -> None:
        if type(atom) is Var:
            self.uses[atom] = self.uses.get(atom, 0) + 1
            if self.var_scope.get(atom) is not s:
                s.free[atom] = s.free.get(atom, 0) + 1

    def _unuse(self, atom, s: _Scope, n: int = 1) -> None:
        if type(atom) is Var:
            self.uses[atom] -= n
            if self.var_scope.get(atom) is not s:
                left = s.free.get(atom, 0) - n
                if left > 0:
                    s.free[atom] = left
                else:
                    s.free.pop(atom, None)

    def _bind(self, s: _Scope, var: Var, expr: Expr, free: Optional[dict] = None) -> Var:
        self.var_scope[var] = s
        for a in _shallow_atoms(expr):
            self._use(a, s)
        s.bindings.append([var, expr, free])
        return var

    def _emit(self, expr: Expr, name: str = "x", s: Optional[_Scope] = None) -> Var:
        var = Var(name)
        self.renamable.add(var)
        return self._bind(s if s is not None else self.stack[-1], var, expr)

    def _close_scope(self, s: _Scope, atom) -> Expr:
        """Finish the top scope: drop unused pure bindings, build its let-chain ending in ``atom``."""
        assert self.stack[-1] is s, "scopes closed out of order"
        self._use(atom, s)
        kept = []
        for entry in reversed(s.bindings):
            var, expr, free = entry
            if self.uses.get(var, 0) == 0 and _is_pure(expr):
                for a in _shallow_atoms(expr):
                    self._unuse(a, s)
                if free:
                    for v, n in free.items():
                        self._unuse(v, s, n)
                continue
            kept.append(entry)
        body = atom
        if kept and kept[0][0] is atom and self.uses.get(atom) == 1 and type(kept[0][1]) is not Function:
            body = kept[0][1]
            kept = kept[1:]
        for var, expr, _free in kept:
            body = Let(var, expr, body)
        parent = s.parent
        if parent is not None:
            for v, n in s.free.items():
                if self.var_scope.get(v) is not parent:
                    parent.free[v] = parent.free.get(v, 0) + n
        self.stack.pop()
        s.open = False
        if s.is_function:
            self.fn_levels.pop()
        self.store = s.snapshot
        return body

    def _invalidate(self) -> None:
        """Unknown code ran: forget what the store knew about every cell it may reach."""
        store = self.store
        for r in [r for r in store if r.escaped]:
            del store[r]

    # ---- values ----------------------------------------------------------------------------------
    def _type_of(self, t: Optional[Type], subst: dict) -> Optional[Type]:
        """A source type as this activation has it, if it can annotate residual code."""
        return _concrete(_subst_type(t, subst), self.allowed)

    def _callee_subst(self, fn: Function, parent_subst: dict, node: Optional[Call], caller: Optional[_Frame]) -> dict:
        """The type substitution for unfolding ``fn`` at the call ``node``: its type parameters
        matched against the argument and result types there."""
        if not fn.type_params or node is None or caller is None:
            return parent_subst
        found: dict = {}
        for p, a in zip(fn.params, node.args):
            _bind_type_vars(p.type_annotation, _subst_type(a.type_or_none, caller.subst), found)
        _bind_type_vars(fn.ret_type, _subst_type(node.type_or_none, caller.subst), found)
        own = {tv: found[tv] for tv in fn.type_params if tv in found}
        if not own:
            return parent_subst
        merged = dict(parent_subst)
        merged.update(own)
        return merged

    def _global(self, gv: GlobalVar) -> SGlobal:
        v = self.global_values.get(gv)
        if v is None:
            if gv not in self.mod:
                raise CompileError(f"PartialEvaluate: @{gv.name_hint} is not defined in the module")
            v = self.global_values[gv] = SGlobal(gv)
        return v

    def _constant(self, c: Constant) -> STensor:
        v = self.const_values.get(c)
        if v is None:
            v = self.const_values[c] = STensor(c.data, const=c)
        return v

    @property
    def recursive_globals(self) -> set:
        """Globals that can reach themselves through calls (the call graph's cycles)."""
        if self._recursive is None:
            self._recursive = self._find_recursive_globals()
        return self._recursive

    def _find_recursive_globals(self) -> set:
        edges = {}
        for gv, fn in self.mod.functions.items():
            edges[gv] = _globals_in(fn) if not _opaque_global(fn) else set()
        out = set()
        for gv in edges:
            seen, stack = set(), list(edges[gv])
            while stack:
                g = stack.pop()
                if g is gv:
                    out.add(gv)
                    break
                if g in seen or g not in edges:
                    continue
                seen.add(g)
                stack.extend(edges[g])
        return out

    def _is_letrec(self, let: Let) -> bool:
        r = self.letrec.get(let)
        if r is None:
            r = self.letrec[let] = any(n is let.var for n in post_order(let.value.body))
        return r

    # ---- the tasks -------------------------------------------------------------------------------
    def _eval(self, node, fr: _Frame) -> None:
        v = fr.lookup(node)
        if v is not _MISSING:
            self.vals.append(v)
            return
        cls = type(node)
        push = self.tasks.append
        if cls is Constant:
            self.vals.append(self._constant(node))
        elif cls is Call:
            push((_STORE, node, fr))
            push((_CALL, node, fr))
            for a in reversed(node.args):
                push((_EVAL, a, fr))
            if type(node.op) not in (Op, Constructor):
                push((_EVAL, node.op, fr))
        elif cls is Let:
            push((_LET, node, fr))
            if type(node.value) is Function:
                c = SClosure(node.value, fr, node.var.name_hint, self.stack[-1], self._is_letrec(node))
                c.type = self._type_of(node.value.type_or_none, fr.subst)
                fr.values[node.var] = c
            else:
                push((_EVAL, node.value, fr))
        elif cls is Var:
            raise CompileError(f"PartialEvaluate: variable %{node.name_hint} is not bound here")
        elif cls is GlobalVar:
            self.vals.append(self._global(node))
        elif cls is Function:
            c = SClosure(node, fr, "", self.stack[-1])
            c.type = self._type_of(node.type_or_none, fr.subst)
            self.vals.append(c)
        elif cls is Tuple:
            push((_STORE, node, fr))
            push((_TUPLE, node, fr))
            for f in reversed(node.fields):
                push((_EVAL, f, fr))
        elif cls is TupleGetItem:
            push((_STORE, node, fr))
            push((_GETITEM, node, fr))
            push((_EVAL, node.tuple_value, fr))
        elif cls is If:
            push((_STORE, node, fr))
            push((_IF, node, fr))
            push((_EVAL, node.cond, fr))
        elif cls is Match:
            push((_STORE, node, fr))
            push((_MATCH, node, fr))
            push((_EVAL, node.data, fr))
        elif cls is RefCreate:
            push((_STORE, node, fr))
            push((_REF_CREATE, node, fr))
            push((_EVAL, node.value, fr))
        elif cls is RefRead:
            push((_STORE, node, fr))
            push((_REF_READ, node, fr))
            push((_EVAL, node.ref, fr))
        elif cls is RefWrite:
            push((_STORE, node, fr))
            push((_REF_WRITE, node, fr))
            push((_EVAL, node.value, fr))
            push((_EVAL, node.ref, fr))
        elif cls is Op:
            self.vals.append(SOp(node, self.stack[-1]))
        elif cls is Constructor:
            self.vals.append(SConFn(node))
        else:
            raise CompileError(f"PartialEvaluate cannot evaluate a {cls.__name__}")

    def _store(self, node, fr: _Frame) -> None:
        v = self.vals[-1]
        fr.values[node] = v
        if type(v) is SClosure and v.type is None:
            v.type = self._type_of(node.type_or_none, fr.subst)

    def _tuple(self, node: Tuple, _fr) -> None:
        n = len(node.fields)
        vals = self.vals
        fields = tuple(vals[len(vals) - n:]) if n else ()
        if n:
            del vals[len(vals) - n:]
        vals.append(STuple(fields, self.stack[-1]))

    def _getitem(self, node: TupleGetItem, _fr) -> None:
        t = self.vals.pop()
        if type(t) is STuple:
            if node.index >= len(t.fields):
                raise CompileError(f"PartialEvaluate: projection .{node.index} of a {len(t.fields)}-tuple"
                                   f"{_where(node)}")
            self.vals.append(t.fields[node.index])
        elif type(t) is Dyn:
            self.vals.append(Dyn(self._emit(TupleGetItem(t.atom, node.index))))
        else:
            raise CompileError(f"PartialEvaluate: projection .{node.index} of a non-tuple{_where(node)}")

    def _let(self, node: Let, fr: _Frame) -> None:
        if type(node.value) is not Function:
            v = self.vals.pop()
            if type(v) is Dyn:
                self._name_after(v, node.var)
            fr.values[node.var] = v
        self.tasks.append((_EVAL, node.body, fr))

    def _name_after(self, v: Dyn, var: Var) -> None:
        """Give the binding a let just made the let's name (when nothing uses it yet)."""
        atom = v.atom
        if atom not in self.renamable:
            return
        s = self.stack[-1]
        if not s.bindings or s.bindings[-1][0] is not atom or self.uses.get(atom, 0):
            return
        new = Var(var.name_hint)
        s.bindings[-1][0] = new
        self.var_scope[new] = s
        self.renamable.discard(atom)
        v.atom = new

    def _return(self, entry: _Unfold, _b) -> None:
        self.active[entry.func].pop()
        self.depth -= 1

    # ---- calls -------------------------------------------------------------------------------------
    def _call(self, node: Call, fr: _Frame) -> None:
        vals = self.vals
        n = len(node.args)
        args = vals[len(vals) - n:] if n else []
        if n:
            del vals[len(vals) - n:]
        op = node.op
        if type(op) is Op:
            self._op_call(node, op, args)
        elif type(op) is Constructor:
            self._construct(node, op, args)
        else:
            self._apply(node, vals.pop(), args, fr)

    def _construct(self, node, con: Constructor, args: list) -> None:
        if len(args) != len(con.inputs):
            raise CompileError(f"PartialEvaluate: constructor {con.name_hint} takes {len(con.inputs)} fields, "
                               f"got {len(args)}{_where(node)}")
        self.vals.append(SCons(con, tuple(args), self.stack[-1]))

    def _apply(self, node: Call, callee: _Value, args: list, fr: _Frame) -> None:
        cls = type(callee)
        if cls is SClosure:
            fn = callee.func
            if _opaque(fn):  # a fused function is pure dataflow; others may have effects
                self._emit_call_of(fn, node, args, effect=not fn.attrs.get("Primitive"))
            else:
                self._call_function(node, callee, fn, callee.frame, args, fr)
        elif cls is SGlobal:
            fn = self.mod[callee.gv]
            if _opaque_global(fn):
                self._emit_call_of(callee.gv, node, args, effect=not fn.attrs.get("Primitive"))
            else:
                self._call_function(node, callee, fn, self.globals, args, fr)
        elif cls is Dyn:
            self._emit_call_of(callee.atom, node, args, effect=True)
        elif cls is SOp:
            self._op_call(node, callee.op, args)
        elif cls is SConFn:
            self._construct(node, callee.con, args)
        else:
            raise CompileError(f"PartialEvaluate: cannot call a {cls.__name__[1:].lower()} value{_where(node)}")

    def _emit_call_of(self, callee_atom: Expr, node: Optional[Call], args: list, effect: bool) -> None:
        """Emit ``callee(args)`` once the arguments are atoms."""
        atoms = []
        for a in args:
            cls = type(a)
            if cls is Dyn:
                atoms.append(a.atom)
            elif cls is STensor and a.maker is None and a.const is not None:
                atoms.append(a.const)
            else:
                break
        else:  # every argument is an atom already: no tasks needed
            call = Call(callee_atom, atoms, node.attrs if node is not None else None)
            self.vals.append(Dyn(self._emit(call)))
            if effect:
                self._invalidate()
            return
        self.vals.append(callee_atom)
        push = self.tasks.append
        push((_EMIT_CALL, node, (len(args), effect)))
        for a in reversed(args):
            push((_REIFY, a, None))

    def _emit_call(self, node: Optional[Call], info) -> None:
        n, effect = info
        vals = self.vals
        atoms = tuple(vals[len(vals) - n:]) if n else ()
        if n:
            del vals[len(vals) - n:]
        callee = vals.pop()
        call = Call(callee, atoms, node.attrs if node is not None else None)
        vals.append(Dyn(self._emit(call)))
        if effect:
            self._invalidate()

    def _op_call(self, node: Call, op: Op, args: list) -> None:
        opdef = op.opdef
        if opdef is not None and opdef.reference is not None and op.name not in NOT_EVALUATED:
            if args:
                arrays = None if any(type(a) is Dyn for a in args) else _static_arrays(args)
                if arrays is not None:
                    value = self._evaluate_op(node, opdef, arrays)
                    if value is not None:
                        self.vals.append(value)
                        return
            else:
                value = self._evaluate_op(node, opdef, [])
                if type(value) is STensor:
                    value.maker = Call(op, (), node.attrs)
                    value.scope = self.stack[-1]
                    self.vals.append(value)
                    return
        self._emit_call_of(op, node, args, effect=False)

    def _evaluate_op(self, node: Call, opdef, arrays: list) -> Optional[_Value]:
        """The op's numpy reference on static arguments, or None when it fails (then the call is
        left for run time, where it fails only if it runs)."""
        try:
            out = opdef.reference(*arrays, node.attrs)
        except Exception:
            return None
        want = node.type_or_none
        if isinstance(out, (tuple, list)):
            wants = want.fields if type(want) is TupleType and len(want.fields) == len(out) else [None] * len(out)
            fields = []
            for o, w in zip(out, wants):
                if isinstance(o, (tuple, list)):
                    return None
                fields.append(STensor(_as_array(o, w)))
            return STuple(tuple(fields), self.stack[-1])
        return STensor(_as_array(out, want))

    def _call_function(self, node: Call, callee, fn: Function, parent_frame: _Frame, args: list,
                       caller: _Frame) -> None:
        if len(args) != len(fn.params):
            name = callee.gv.name_hint if type(callee) is SGlobal else (callee.name or "a function")
            raise CompileError(f"PartialEvaluate: {name} takes {len(fn.params)} arguments, got {len(args)}"
                               f"{_where(node)}")
        if all(type(a) is Dyn for a in args) and (
                callee.gv in self.recursive_globals if type(callee) is SGlobal else callee.recursive):
            # a recursive function with nothing static: unfolding it would only peel one step
            subst = self._callee_subst(fn, parent_frame.subst, node, caller)
            self._residual_call(callee, fn, [HOLE] * len(args), list(args), subst)
            return
        subst = self._callee_subst(fn, parent_frame.subst, node, caller)
        frames = self.active.get(fn)
        if not frames:
            self._unfold(fn, parent_frame, args, subst)
            return
        top = frames[-1]
        if len(frames) < self.max_unroll and (top.scope is self.stack[-1] or _progress(top.args, args)):
            self._unfold(fn, parent_frame, args, subst)
            return
        if type(callee) is SGlobal:
            # as in Relay: a global recursion that is not unfolded further calls the global itself,
            # every argument made residual (static parts become constants, tuples, functions...);
            # the global stays a global, evaluated by this pass on its own, and does not turn into
            # a local recursive let specialized to the static part
            self._emit_call_of(callee.gv, None, list(args), effect=True)
            return
        skeleton, leaves = _generalize(top.args, args)
        self._residual_call(callee, fn, skeleton, leaves, subst)

    def _unfold(self, fn: Function, parent_frame: _Frame, args: list, subst: dict) -> None:
        self.depth += 1
        if self.depth > self.max_depth:
            raise CompileError(f"PartialEvaluate: more than {self.max_depth} nested unfoldings; "
                               f"raise max_unroll or lower it to residualize sooner")
        frame = _Frame(parent_frame, subst)
        for p, a in zip(fn.params, args):
            frame.values[p] = a
        entry = _Unfold(fn, args, self.stack[-1])
        self.active.setdefault(fn, []).append(entry)
        self.tasks.append((_RETURN, entry, None))
        self.tasks.append((_EVAL, fn.body, frame))

    # ---- specializations ---------------------------------------------------------------------------
    @staticmethod
    def _callee_key(callee) -> tuple:
        if type(callee) is SGlobal:
            return ("G", callee.gv.name_hint)
        return ("F", id(callee))

    def _find_spec(self, key: tuple) -> Optional[_Spec]:
        for spec in reversed(self.specs.get(key, ())):
            if spec.scope is None:
                return spec
            if self._visible(spec.scope if spec.done else spec.body):
                return spec
        return None

    def _residual_call(self, callee, fn: Function, skeleton: list, leaves: list, subst: dict) -> None:
        if type(callee) is SGlobal and all(h is HOLE for h in skeleton):
            # nothing static: the global itself, which this pass evaluates with dynamic parameters
            self._emit_call_of(callee.gv, None, leaves, effect=True)
            return
        key = (self._callee_key(callee),) + _skeleton_key(skeleton)
        if fn.type_params:
            key += (tuple(subst.get(tv) for tv in fn.type_params),)
        spec = self._find_spec(key)
        if spec is not None:
            self._emit_call_of(spec.var, None, leaves, effect=True)
        else:
            self._start_spec(callee, fn, skeleton, key, leaves, True, subst)

    def _spec_target(self, callee, skeleton: list) -> _Scope:
        """Where a specialization is bound: the innermost scope that made a static part of it."""
        best = self.stack[0]
        owners = [callee.scope] if type(callee) is SClosure else []
        stack = list(skeleton)
        while stack:
            v = stack.pop()
            if type(v) is _SkelTuple:
                stack.extend(v.fields)
            elif v is not HOLE:
                s = getattr(v, "scope", None)
                if s is not None:
                    owners.append(s)
        for s in owners:
            if not self._visible(s):
                return self.stack[-1]
            if s.level > best.level:
                best = s
        return best

    def _start_spec(self, callee, fn: Function, skeleton: list, key: tuple, leaves: list, call: bool,
                    subst: dict) -> None:
        self.depth += 1
        if self.depth > self.max_depth:
            raise CompileError(f"PartialEvaluate: more than {self.max_depth} nested specializations")
        target = self._spec_target(callee, skeleton)
        name = callee.gv.name_hint if type(callee) is SGlobal else (callee.name or "f")
        fv = Var(name)
        spec = _Spec(fv, target, (callee, skeleton))
        self.specs.setdefault(key, []).append(spec)
        f = self._open_scope(target, True)
        spec.body = f
        params: list = []
        ft = callee.type if type(callee) is SClosure else None
        if type(ft) is FuncType and len(ft.arg_types) == len(fn.params):
            arg_types, ret_type = list(ft.arg_types), ft.ret_type
        else:
            arg_types, ret_type = [None] * len(fn.params), None
        arg_types = [self._type_of(p.type_annotation, subst) or t for p, t in zip(fn.params, arg_types)]
        ret_type = self._type_of(fn.ret_type, subst) or ret_type
        args = self._rebuild(skeleton, fn, params, f, arg_types)
        frame = _Frame(callee.frame if type(callee) is SClosure else self.globals, subst)
        for p, a in zip(fn.params, args):
            frame.values[p] = a
        entry = _Unfold(fn, args, f)
        self.active.setdefault(fn, []).append(entry)
        push = self.tasks.append
        if call:
            self.vals.append(fv)
            push((_EMIT_CALL, None, (len(leaves), True)))
            for a in reversed(leaves):
                push((_REIFY, a, None))
        push((_SPEC_CLOSE, spec, (params, fn, entry, call, ret_type)))
        push((_REIFY, None, None))
        push((_EVAL, fn.body, frame))

    def _rebuild(self, skeleton: list, fn: Function, params: list, f: _Scope, arg_types: list) -> list:
        """The arguments of a specialization's body: the skeleton with a new parameter per hole,
        annotated (a whole argument) with the source's type or the one in ``arg_types``."""
        out: list = [None] * len(skeleton)
        stack = [(skeleton[i], out, i, i, True) for i in range(len(skeleton) - 1, -1, -1)]
        tuples = []
        while stack:
            v, box, i, top, whole = stack.pop()
            if v is HOLE:
                src = fn.params[top]
                p = Var(src.name_hint, arg_types[top] if whole else None)
                self.var_scope[p] = f
                params.append(p)
                box[i] = Dyn(p)
            elif type(v) is _SkelTuple:
                fields = [None] * len(v.fields)
                tuples.append((box, i, fields))
                for j in range(len(v.fields) - 1, -1, -1):
                    stack.append((v.fields[j], fields, j, top, False))
            else:
                box[i] = v
        for box, i, fields in reversed(tuples):
            box[i] = STuple(tuple(fields), f)
        return out

    def _spec_close(self, spec: _Spec, info) -> None:
        params, fn, entry, call, ret_type = info
        atom = self.vals.pop()
        f = spec.body
        body = self._close_scope(f, atom)
        func = Function(params, body, ret_type, (), fn.attrs)
        self._bind(spec.scope, spec.var, func, f.free)
        spec.done = True
        self.active[fn].pop()
        self.depth -= 1
        if not call:
            self.vals.append(spec.var)

    # ---- reification: a value as an atom of the residual program --------------------------------
    def _reify(self, v: Optional[_Value], _b) -> None:
        if v is None:
            v = self.vals.pop()
        cls = type(v)
        vals = self.vals
        if cls is Dyn:
            vals.append(v.atom)
            return
        if cls is STensor and v.maker is None:
            c = v.const
            if c is None:
                c = v.const = Constant(v.data)
            vals.append(c)
            return
        if cls is SGlobal:
            vals.append(v.gv)
            return
        if cls is SConFn:
            vals.append(v.con)
            return
        if cls is SRef:
            v.escaped = True
            if v.var is not None:
                vals.append(v.var)
            else:
                self._materialize(v, True)
            return
        if cls is STuple and not v.fields:
            vals.append(Tuple(()))
            return
        if cls is SCons and not v.fields:
            vals.append(Call(v.con, ()))
            return
        if cls is SClosure and not _opaque(v.func):
            n = len(v.func.params)
            key = (("F", id(v)),) + ("H",) * n
            spec = self._find_spec(key)
            if spec is not None:
                vals.append(spec.var)
            else:
                self._start_spec(v, v.func, [HOLE] * n, key, [], False, v.frame.subst)
            return
        # a value the residual program builds once, where it was made
        if v.atom is not None and self._visible(v.atom_scope):
            vals.append(v.atom)
            return
        target = v.scope if self._visible(v.scope) else self.stack[-1]
        if cls is STuple or cls is SCons:
            push = self.tasks.append
            push((_BUILD, v, target))
            for f in reversed(v.fields):
                push((_REIFY, f, None))
            return
        if cls is STensor:
            expr, name = v.maker, "x"
        elif cls is SClosure:  # a fused or external function: its body stays as it is
            expr, name = v.func, v.name or "f"
        elif cls is SOp:
            expr, name = _eta_expand(v.op), "f"
        else:
            raise CompileError(f"PartialEvaluate cannot residualize a {cls.__name__} value")
        self._cache(v, self._emit(expr, name, target), target)

    def _cache(self, v, atom: Var, target: _Scope) -> None:
        v.atom, v.atom_scope = atom, target
        self.vals.append(atom)

    def _build(self, v, target: _Scope) -> None:
        vals = self.vals
        n = len(v.fields)
        atoms = tuple(vals[len(vals) - n:])
        del vals[len(vals) - n:]
        if type(v) is STuple:
            expr, name = Tuple(atoms), "t"
        else:
            expr, name = Call(v.con, atoms), "c"
        self._cache(v, self._emit(expr, name, target), target)

    # ---- references ----------------------------------------------------------------------------------
    def _materialize(self, r: SRef, push_var: bool) -> None:
        """Give ``r`` its residual cell, made where ``r`` was made, holding what ``r`` holds there."""
        if r.busy:
            raise CompileError("PartialEvaluate: a reference that holds itself cannot be residualized")
        r.busy = True
        self.tasks.append((_MATERIALIZED, r, push_var))
        self.tasks.append((_REIFY, r.value, None))

    def _materialized(self, r: SRef, push_var: bool) -> None:
        atom = self.vals.pop()
        r.var = self._emit(RefCreate(atom), "r", r.scope)
        r.busy = False
        # every scope from r's up to the first residual function knows what the cell holds
        stack = self.stack
        end = len(stack)
        for level in self.fn_levels:
            if level > r.scope.level:
                end = level
                break
        for level in range(r.scope.level, end):
            store = self.store if level == len(stack) - 1 else stack[level + 1].snapshot
            store[r] = r.value
        if push_var:
            self.vals.append(r.var)

    def _ref_create(self, node, _fr) -> None:
        self.vals.append(SRef(self.vals.pop(), self.stack[-1]))

    def _ref_read(self, node: RefRead, _fr) -> None:
        r = self.vals.pop()
        if type(r) is SRef:
            inside_fn = self._fn_between(r.scope)
            if inside_fn:
                r.escaped = True
            if r.var is None:
                if not inside_fn:
                    self.vals.append(r.value)
                    return
                self.tasks.append((_REF_READ_DYN, r, None))
                self._materialize(r, False)
                return
            self._ref_read_dyn(r, None)
        elif type(r) is Dyn:
            self.vals.append(Dyn(self._emit(RefRead(r.atom))))
        else:
            raise CompileError(f"PartialEvaluate: ref_read of a non-reference{_where(node)}")

    def _ref_read_dyn(self, r: SRef, _b) -> None:
        known = self.store.get(r, _MISSING)
        if known is not _MISSING:
            self.vals.append(known)
            return
        v = Dyn(self._emit(RefRead(r.var)))
        self.store[r] = v
        self.vals.append(v)

    def _ref_write(self, node: RefWrite, _fr) -> None:
        value = self.vals.pop()
        r = self.vals.pop()
        push = self.tasks.append
        if type(r) is SRef:
            if self._fn_between(r.scope):
                r.escaped = True
            if r.var is None and r.scope is self.stack[-1]:
                r.value = value
                self.vals.append(STuple((), self.stack[-1]))
                return
            push((_WRITE_EMIT, r, value))
            push((_REIFY, value, None))
            if r.var is None:
                self._materialize(r, False)
        elif type(r) is Dyn:
            self.vals.append(r.atom)
            push((_WRITE_EMIT_DYN, None, None))
            push((_REIFY, value, None))
        else:
            raise CompileError(f"PartialEvaluate: ref_write to a non-reference{_where(node)}")

    def _write_emit(self, r: SRef, value: _Value) -> None:
        atom = self.vals.pop()
        self._emit(RefWrite(r.var, atom), "_")
        self.store[r] = value
        self.vals.append(STuple((), self.stack[-1]))

    def _write_emit_dyn(self, _a, _b) -> None:
        atom = self.vals.pop()
        ref = self.vals.pop()
        self._emit(RefWrite(ref, atom), "_")
        self._invalidate()
        self.vals.append(STuple((), self.stack[-1]))

    # ---- if and match --------------------------------------------------------------------------------
    def _if(self, node: If, fr: _Frame) -> None:
        c = self.vals.pop()
        if type(c) is STensor:
            try:
                truth = bool(np.asarray(c.data).item())
            except (ValueError, TypeError):
                raise CompileError(f"PartialEvaluate: if condition must be a bool scalar{_where(node)}") from None
            self.tasks.append((_EVAL, node.true_branch if truth else node.false_branch, fr))
        elif type(c) is Dyn:
            self._branch(node, fr, c.atom, [(node.true_branch, None, ()), (node.false_branch, None, ())], True)
        else:
            raise CompileError(f"PartialEvaluate: if condition must be a tensor{_where(node)}")

    def _match(self, node: Match, fr: _Frame) -> None:
        data = self.vals.pop()
        residual = []
        decided = False
        for clause in node.clauses:
            status, binds = _static_match(clause.lhs, data)
            if status is _M_FAIL:
                continue
            if status is _M_OK and not residual:
                fr.values.update(binds)
                self.tasks.append((_EVAL, clause.rhs, fr))
                return
            residual.append(clause)
            if status is _M_OK:
                decided = True
                break
        if not residual:  # no clause can match: the residual match fails at run time, as the source would
            residual = list(node.clauses)
        self.tasks.append((_MATCH_DYN, node, (fr, residual, decided)))
        self.tasks.append((_REIFY, data, None))

    def _match_dyn(self, node: Match, info) -> None:
        fr, clauses, decided = info
        atom = self.vals.pop()
        arms = []
        for clause in clauses:
            binds: list = []
            arms.append((clause.rhs, _fresh_pattern(clause.lhs, binds), binds))
        self._branch(node, fr, atom, arms, node.complete or decided)

    def _branch(self, node, fr: _Frame, atom, arms: list, complete: bool) -> None:
        br = _Branching()
        br.node, br.frame, br.atom, br.arms = node, fr, atom, arms
        br.i = 0
        br.bodies, br.stores, br.values = [], [], []
        br.complete = complete
        self.tasks.append((_BR_OPEN, br, None))

    def _br_open(self, br: _Branching, _b) -> None:
        expr, _pattern, binds = br.arms[br.i]
        s = self._open_scope(self.stack[-1], False)
        child = _Frame(br.frame)
        for src, fresh in binds:
            child.values[src] = Dyn(fresh)
            self.var_scope[fresh] = s
        push = self.tasks.append
        push((_BR_CLOSE, br, s))
        push((_REIFY, None, None))
        push((_BR_VALUE, br, None))
        push((_EVAL, expr, child))

    def _br_value(self, br: _Branching, _b) -> None:
        br.values.append(self.vals[-1])

    def _br_close(self, br: _Branching, s: _Scope) -> None:
        atom = self.vals.pop()
        end_store = self.store
        br.bodies.append(self._close_scope(s, atom))
        br.stores.append(end_store)
        br.i += 1
        if br.i < len(br.arms):
            self.tasks.append((_BR_OPEN, br, None))
            return
        # every arm is done: what the store knows is what every arm agrees on
        first, rest = br.stores[0], br.stores[1:]
        self.store = {r: v for r, v in first.items() if all(st.get(r, _MISSING) is v for st in rest)}
        parent = self.stack[-1]
        v0 = br.values[0]
        if type(br.node) is If and all(_is_atom(b) for b in br.bodies) and all(v is v0 for v in br.values):
            # both arms give the same value and compute nothing: no branch is needed
            for b in br.bodies:
                self._unuse(b, parent)
            self.vals.append(v0)
            return
        if type(br.node) is If:
            expr = If(br.atom, br.bodies[0], br.bodies[1])
        else:
            expr = Match(br.atom, [Clause(pattern, body) for (_e, pattern, _b), body in zip(br.arms, br.bodies)],
                         br.complete)
        self.vals.append(Dyn(self._emit(expr)))


def _globals_in(fn: Function) -> set:
    """The globals ``fn`` mentions."""
    out, seen = set(), set()
    stack = [fn.body]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if type(node) is GlobalVar:
            out.add(node)
        else:
            stack.extend(expr_children(node))
    return out


def _as_array(out, want: Optional[Type]) -> np.ndarray:
    """An op reference's result as an array, with the dtype type inference gave the call."""
    arr = np.asarray(out)
    if type(want) is TensorType and len(want.shape) == arr.ndim and all(
            isinstance(d, int) and d == s for d, s in zip(want.shape, arr.shape)) and arr.dtype.name != want.dtype:
        arr = arr.astype(want.dtype)
    return arr


def _eta_expand(op: Op) -> Function:
    """``fn (%x0, ...) { op(%x0, ...) }`` for an operator used as a value."""
    opdef = op.opdef
    if opdef is None or opdef.variadic:
        raise CompileError(f"PartialEvaluate: operator {op.name} used as a value cannot be residualized")
    params = [Var(f"x{i}") for i in range(len(opdef.inputs))]
    return Function(params, Call(op, params))


_M_OK, _M_FAIL, _M_UNKNOWN = "match", "fail", "unknown"


def _static_match(pattern, value: _Value) -> tuple:
    """Match a pattern against a partially static value: (_M_OK, binds), (_M_FAIL, None) when it
    cannot match, or (_M_UNKNOWN, None) when that depends on a dynamic part."""
    binds: dict = {}
    unknown = False
    stack = [(pattern, value)]
    while stack:
        p, v = stack.pop()
        cls = type(p)
        if cls is PatternWildcard:
            continue
        if cls is PatternVar:
            binds[p.var] = v
        elif cls is PatternConstructor:
            if type(v) is SCons:
                if not _same_constructor(v.con, p.constructor):
                    return _M_FAIL, None
                stack.extend(zip(p.patterns, v.fields))
            elif type(v) is Dyn:
                unknown = True
            else:
                return _M_FAIL, None
        elif cls is PatternTuple:
            if type(v) is STuple:
                if len(v.fields) != len(p.patterns):
                    return _M_FAIL, None
                stack.extend(zip(p.patterns, v.fields))
            elif type(v) is Dyn:
                unknown = True
            else:
                return _M_FAIL, None
        else:
            return _M_FAIL, None
    return (_M_UNKNOWN, None) if unknown else (_M_OK, binds)


def _fresh_pattern(pattern, binds: list):
    """``pattern`` with a new variable for each one it binds; ``binds`` gets (old, new) pairs.
    Recursion follows the pattern's nesting, which the source text bounds."""
    cls = type(pattern)
    if cls is PatternVar:
        new = Var(pattern.var.name_hint, pattern.var.type_annotation)
        binds.append((pattern.var, new))
        return PatternVar(new)
    if cls is PatternConstructor:
        return PatternConstructor(pattern.constructor, [_fresh_pattern(p, binds) for p in pattern.patterns])
    if cls is PatternTuple:
        return PatternTuple([_fresh_pattern(p, binds) for p in pattern.patterns])
    return pattern


# ---------------------------------------------------------------------------------------------
# The pass


def partial_evaluate(mod: IRModule, max_unroll: int = 1000) -> IRModule:
    """Every global function of ``mod`` (but fused, external and SkipOptimization ones) partially
    evaluated, each with all its parameters dynamic.

    Returns ``mod`` itself when no function changed.
    """
    if not isinstance(max_unroll, int) or isinstance(max_unroll, bool) or max_unroll < 1:
        raise ValueError(f"PartialEvaluate: max_unroll must be a positive int, got {max_unroll!r}")
    from ..ir.structural import structural_equal
    new = {}
    changed = False
    # the evaluator makes many small objects that reference counting frees; pausing the cyclic
    # collector (its scans of the growing heap) halves the time on long programs
    collecting = gc.isenabled()
    gc.disable()
    try:
        source = typed(mod)
        pe = _PartialEvaluator(source, max_unroll)
        for gv, fn in source.functions.items():
            original = mod.functions.get(gv, fn)
            if _opaque_global(fn):
                new[gv] = original
                continue
            out = pe.run_function(gv, fn)
            if structural_equal(out, fn):
                out = original
            else:
                changed = True
            new[gv] = out
    finally:
        if collecting:
            gc.enable()
    return source.with_functions(new) if changed else mod


@module_pass(opt_level=1)
def PartialEvaluate(mod: IRModule, ctx, *, max_unroll: int = 1000) -> IRModule:
    """Relay's partial evaluator: computes what is static, unfolds calls of known functions
    (loops with static bounds become straight-line code), folds references, emits the rest in
    A-normal form.

    ``max_unroll`` bounds how many activations of one function may be unfolded inside each other
    before a call is residualized (a call to a specialization of the function).
    """
    return partial_evaluate(mod, max_unroll=max_unroll)
