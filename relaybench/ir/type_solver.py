"""The type solver: unification over a union-find of types, and the worklist of type relations.

This is the engine under :mod:`relaybench.ir.type_infer` (Relay's ``TypeSolver``):

* **Holes.** An :class:`~relaybench.ir.types.IncompleteType` is an unknown type. Holes live in a
  union-find (``link``: hole -> hole) whose roots may be *bound* to a concrete type (``bound``:
  root hole -> type). :meth:`TypeSolver.shallow` gives what a type currently stands for.
* **Dimension holes.** A :class:`DimHole` (printed ``$k``) is an unknown dimension, created when a
  function polymorphic in a symbolic dimension is called: ``@f(%x: Tensor[(n, 3)])`` called with a
  ``Tensor[(4, 3)]`` instantiates ``n`` as ``$1`` and unification binds ``$1 := 4``. Dimension holes
  have their own union-find (``dim_link``). Equations such as ``2*$1 = 8`` are solved when they are
  linear in one hole, and otherwise kept until more is known.
* **Unification** (:meth:`TypeSolver.unify`) is structural and iterative (an explicit task stack):
  tensors by dtype, rank and dimension (``?`` unifies with anything and the result is the other
  side; symbolic dimensions must be equal in canonical form), tuples field by field, functions
  argument by argument after renaming the type parameters of one side to the other's, references,
  and ADT instances. Binding a hole to a type that contains it fails the occurs check. Unifying
  two bound holes merges them and binds the root to the unified (most precise) type.
* **Relations.** :meth:`TypeSolver.add_relation` records an operator's relation over its argument
  types and an output hole. :meth:`TypeSolver.solve` runs a worklist (a deque): a relation that
  returns ``None`` waits; one that returns a type (or a list of types) has them unified with its
  output (or its inputs and output). Whenever a hole or dimension hole that a relation mentions
  changes, the relation runs again. A relation that fails while its inputs still hold unknown
  dimensions waits for them instead of failing.

>>> from relaybench.ir.types import IncompleteType, TensorType, TupleType
>>> s = TypeSolver()
>>> a, b = IncompleteType(), IncompleteType()
>>> s.unify(TupleType([a, TensorType((2, None))]), TupleType([TensorType((2, 3)), b]))
(Tensor[(2, 3), float32], Tensor[(2, ?), float32])
>>> s.resolve(a), s.resolve(b)
(Tensor[(2, 3), float32], Tensor[(2, ?), float32])
>>> s.unify(b, TensorType((2, 5)))
Tensor[(2, 5), float32]
>>> s.resolve(b)
Tensor[(2, 5), float32]
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Optional

from ..errors import TypeInferenceError
from .symbolic import ANY, SymExpr, SymVar, floordiv, format_dim, free_symvars, mul, sub, substitute
from .types import (FuncType, IncompleteType, RefType, TensorType, TupleType, Type, TypeCall,
                    TypeRelation, TypeVar, type_children, type_str)

__all__ = ["DimHole", "UnifyError", "Relation", "TypeSolver", "map_type", "contains_holes",
           "contains_dim_holes",
           "type_children", "relation_name"]


_dim_hole_ids = itertools.count(1)


class DimHole(SymVar):
    """An unknown dimension solved by unification; printed ``$k``. Unique per creation."""

    __slots__ = ()

    def __init__(self):
        SymVar.__init__(self, f"${next(_dim_hole_ids)}")


class UnifyError(Exception):
    """Two types do not unify. ``lhs``/``rhs`` are the innermost types that disagree."""

    def __init__(self, lhs, rhs, detail: str = ""):
        self.lhs, self.rhs, self.detail = lhs, rhs, detail
        super().__init__(detail or f"{lhs} vs {rhs}")


def relation_name(func) -> str:
    return getattr(func, "relation_name", getattr(func, "__name__", "Rel"))


PENDING, SOLVED, DEFERRED = "pending", "solved", "deferred"


class Relation:
    """A type relation waiting in the solver: ``func(inputs, attrs)`` over ``args`` (inputs, output)."""

    __slots__ = ("func", "args", "num_inputs", "attrs", "node", "op", "state", "queued", "error")

    def __init__(self, func, args, num_inputs, attrs, node=None, op=None):
        self.func = func
        self.args = tuple(args)
        self.num_inputs = num_inputs
        self.attrs = attrs
        self.node = node
        self.op = op
        self.state = PENDING
        self.queued = False
        self.error: Optional[TypeInferenceError] = None

    @property
    def name(self) -> str:
        return relation_name(self.func)

    def __repr__(self) -> str:
        return f"Relation({self.name}, {self.state})"


# ---------------------------------------------------------------------------------------------
# Generic helpers over type trees (iterative: a type may be as deep as the program that built it).

def _rebuild(t: Type, kids: list) -> Type:
    old = type_children(t)
    if all(a is b for a, b in zip(kids, old)):
        return t
    cls = type(t)
    if cls is TupleType:
        return TupleType(kids)
    if cls is FuncType:
        n = len(t.arg_types)
        return FuncType(kids[:n], kids[n], t.type_params, kids[n + 1:])
    if cls is TypeCall:
        return TypeCall(kids[0], kids[1:])
    if cls is RefType:
        return RefType(kids[0])
    if cls is TypeRelation:
        return TypeRelation(t.func, kids, t.num_inputs, t.attrs)
    return t


def _map_dims(t: TensorType, dim_fn) -> TensorType:
    dims = tuple(dim_fn(d) for d in t.shape)
    if all(a is b for a, b in zip(dims, t.shape)):
        return t
    return TensorType(dims, t.dtype)


def map_type(t: Type, leaf=None, dim_fn=None) -> Type:
    """Rebuild ``t`` bottom-up, sharing unchanged parts.

    ``leaf(node)`` may return a replacement for a node (not descended into) or None;
    ``dim_fn(dim)`` maps each dimension of each tensor type.
    """
    memo: dict = {}
    stack = [(t, False)]
    while stack:
        node, ready = stack.pop()
        key = id(node)
        if ready:
            memo[key] = _rebuild(node, [memo[id(k)] for k in type_children(node)])
            continue
        if key in memo:
            continue
        if leaf is not None:
            r = leaf(node)
            if r is not None:
                memo[key] = r
                continue
        if type(node) is TensorType:
            memo[key] = node if dim_fn is None else _map_dims(node, dim_fn)
            continue
        kids = type_children(node)
        if not kids:
            memo[key] = node
            continue
        stack.append((node, True))
        for k in kids:
            if id(k) not in memo:
                stack.append((k, False))
    return memo[id(t)]


def _dim_has_hole(d) -> bool:
    if isinstance(d, DimHole):
        return True
    if isinstance(d, SymExpr):
        return any(isinstance(v, DimHole) for v in free_symvars(d))
    return False


def contains_holes(t: Type) -> bool:
    """Whether ``t`` holds an IncompleteType or a dimension hole anywhere."""
    stack = [t]
    while stack:
        node = stack.pop()
        cls = type(node)
        if cls is IncompleteType:
            return True
        if cls is TensorType:
            for d in node.shape:
                if type(d) is not int and _dim_has_hole(d):
                    return True
            continue
        stack.extend(type_children(node))
    return False


def contains_dim_holes(t: Type) -> bool:
    """Whether a tensor type inside ``t`` holds a dimension hole."""
    stack = [t]
    while stack:
        node = stack.pop()
        if type(node) is TensorType:
            if any(_dim_has_hole(d) for d in node.shape if not isinstance(d, int)):
                return True
            continue
        stack.extend(type_children(node))
    return False


def _specialize(f: FuncType, params: tuple) -> FuncType:
    """``f`` with its first type parameters renamed to ``params`` and the others made holes.

    Unifying ``fn[A](A, List[A]) -> List[A]`` (a polymorphic constructor passed as a value) with
    ``fn(_, _) -> _`` instantiates ``A``, as Relay's unifier does.
    """
    mapping = {}
    for i, p in enumerate(f.type_params):
        mapping[p] = params[i] if i < len(params) else IncompleteType()
    if all(mapping.get(p) is p for p in f.type_params):
        return f
    return map_type(FuncType(f.arg_types, f.ret_type, params, f.type_constraints),
                    leaf=lambda n: mapping.get(n) if type(n) is TypeVar else None)


def _fmt(t) -> str:
    return type_str(t) if isinstance(t, Type) else format_dim(t)


# ---------------------------------------------------------------------------------------------

_UNIFY, _BUILD = 0, 1


class TypeSolver:
    """Union-find over types and dimensions, plus the relation worklist. See the module docstring."""

    def __init__(self):
        self.link: dict = {}          # hole -> hole it was merged into
        self.bound: dict = {}         # root hole -> the concrete type it stands for
        self.dim_link: dict = {}      # DimHole -> the dim it equals (a DimHole or an expression)
        self.rels_of: dict = {}       # root hole -> {relation: None} (an ordered set) mentioning it
        self.dim_rels_of: dict = {}   # DimHole -> {relation: None}
        self.queue: deque = deque()
        self.relations: list = []
        self.dim_equations: list = []  # (lhs, rhs, lhs type, rhs type, axis) waiting for more holes
        self.any_dims: list = []       # dimension holes unified with `?` (their fallback)
        self.uses_dim_holes = False

    # ---- holes ------------------------------------------------------------------------------
    @staticmethod
    def fresh() -> IncompleteType:
        return IncompleteType()

    def fresh_dim(self) -> DimHole:
        self.uses_dim_holes = True
        return DimHole()

    def root(self, hole: IncompleteType) -> IncompleteType:
        """The representative hole of ``hole``'s class (path compression in a loop)."""
        link = self.link
        r = hole
        while r in link:
            r = link[r]
        while hole is not r:
            nxt = link[hole]
            link[hole] = r
            hole = nxt
        return r

    def shallow(self, t: Type) -> Type:
        """What ``t`` stands for at the top: a concrete type or an unbound root hole."""
        if type(t) is IncompleteType:
            r = self.root(t) if t in self.link else t
            return self.bound.get(r, r)
        return t

    def find_dim(self, d):
        """The representative of a dimension hole: an unbound hole or the expression it equals."""
        link = self.dim_link
        r = d
        while isinstance(r, DimHole) and r in link:
            r = link[r]
        while isinstance(d, DimHole) and d in link and link[d] is not r:
            nxt = link[d]
            link[d] = r
            d = nxt
        return r

    def resolve_dim(self, d):
        """``d`` with every bound dimension hole substituted (canonical form)."""
        if not self.uses_dim_holes or isinstance(d, int) or d is ANY:
            return d
        while True:
            mapping = {}
            for v in free_symvars(d):
                if isinstance(v, DimHole):
                    r = self.find_dim(v)
                    if r is not v:
                        mapping[v] = r
            if not mapping:
                return d
            d = substitute(d, mapping)

    def unbound_dim_holes(self, d) -> list:
        return [v for v in free_symvars(self.resolve_dim(d)) if isinstance(v, DimHole)]

    def resolve(self, t: Type, memo: Optional[dict] = None) -> Type:
        """``t`` with every bound hole and dimension hole substituted; free holes stay."""
        cls = type(t)
        if cls is TensorType and not self.uses_dim_holes:
            return t
        if cls is IncompleteType:
            t = self.shallow(t)
            if type(t) is IncompleteType or (type(t) is TensorType and not self.uses_dim_holes):
                return t
        memo = {} if memo is None else memo
        if id(t) in memo:
            return memo[id(t)]
        dim_fn = self.resolve_dim if self.uses_dim_holes else None
        stack = [(t, False)]
        while stack:
            node, ready = stack.pop()
            key = id(node)
            if ready:
                if type(node) is IncompleteType:
                    memo[key] = memo[id(self.shallow(node))]
                else:
                    memo[key] = _rebuild(node, [memo[id(k)] for k in type_children(node)])
                continue
            if key in memo:
                continue
            cls = type(node)
            if cls is IncompleteType:
                target = self.shallow(node)
                if type(target) is IncompleteType:
                    memo[key] = target
                    continue
                stack.append((node, True))
                if id(target) not in memo:
                    stack.append((target, False))
                continue
            if cls is TensorType:
                memo[key] = node if dim_fn is None else _map_dims(node, dim_fn)
                continue
            kids = type_children(node)
            if not kids:
                memo[key] = node
                continue
            stack.append((node, True))
            for k in kids:
                if id(k) not in memo:
                    stack.append((k, False))
        return memo[id(t)]

    def _holes_in(self, t: Type):
        """The root holes (bound or not) and the free dimension holes ``t`` currently mentions."""
        cls = type(t)
        if not self.uses_dim_holes:
            if cls is TensorType:
                return (), ()
            if cls is IncompleteType:
                r = self.root(t) if t in self.link else t
                b = self.bound.get(r)
                if b is None or type(b) is TensorType:
                    return (r,), ()
        holes, dims = [], []
        seen = set()
        stack = [t]
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            cls = type(node)
            if cls is IncompleteType:
                r = self.root(node) if node in self.link else node
                holes.append(r)
                b = self.bound.get(r)
                if b is not None:
                    stack.append(b)
                continue
            if cls is TensorType:
                if self.uses_dim_holes:
                    for d in node.shape:
                        if not isinstance(d, int) and d is not ANY:
                            dims.extend(self.unbound_dim_holes(d))
                continue
            stack.extend(type_children(node))
        return holes, dims

    def _occurs(self, hole: IncompleteType, t: Type) -> bool:
        holes, _ = self._holes_in(t)
        return any(h is hole for h in holes)

    # ---- relations bookkeeping ----------------------------------------------------------------
    def _enqueue(self, rels) -> None:
        for rel in rels:
            if not rel.queued:
                rel.queued = True
                self.queue.append(rel)

    def _attach(self, rels: dict, t: Type) -> None:
        """Let the relations ``rels`` (an ordered set, a dict) watch every hole in ``t``."""
        if not rels or (type(t) is TensorType and not self.uses_dim_holes):
            return
        holes, dims = self._holes_in(t)
        if len(holes) == 1 and not dims:
            have = self.rels_of.get(holes[0])
            if have is None:
                self.rels_of[holes[0]] = dict(rels)
            elif have is not rels:
                have.update(rels)
            return
        for table, keys in ((self.rels_of, holes), (self.dim_rels_of, dims)):
            for h in keys:
                have = table.get(h)
                if have is None:
                    table[h] = dict(rels)
                elif have is not rels:
                    have.update(rels)

    def _changed(self, root: IncompleteType, new: Type) -> None:
        """``root`` now stands for ``new``: wake its relations and let them watch ``new``'s holes."""
        rels = self.rels_of.get(root)
        if rels:
            self._enqueue(rels)
            self._attach(rels, new)

    def _bind(self, hole: IncompleteType, t: Type) -> None:
        """Bind the unbound root ``hole`` to ``t`` (an unbound root hole or a concrete type)."""
        if type(t) is IncompleteType:
            self.link[hole] = t
            rels = self.rels_of.pop(hole, None)
            if rels:
                self.rels_of.setdefault(t, {}).update(rels)
            return
        if self._occurs(hole, t):
            raise UnifyError(hole, t, f"occurs check: a type cannot contain itself "
                                      f"(_ would have to equal {type_str(self.resolve(t))})")
        self.bound[hole] = t
        self._changed(hole, t)

    def _settle(self, xr, yr, xv, yv, u) -> None:
        """Both sides unified to ``u``: merge their holes and bind the root to ``u``."""
        if xr is not None and u is not xv:
            self._changed(xr, u)
        if yr is not None and u is not yv:
            self._changed(yr, u)
        if xr is not None and yr is not None and xr is not yr:
            self.link[xr] = yr
            self.bound.pop(xr, None)
            rels = self.rels_of.pop(xr, None)
            if rels:
                self.rels_of.setdefault(yr, {}).update(rels)
            self.bound[yr] = u
        elif xr is not None:
            self.bound[xr] = u
        elif yr is not None:
            self.bound[yr] = u

    # ---- unification -------------------------------------------------------------------------
    def unify(self, a: Type, b: Type) -> Type:
        """Make ``a`` and ``b`` equal; returns the unified type. Raises :class:`UnifyError`."""
        tasks: list = [(_UNIFY, a, b)]
        results: list = []
        bound = self.bound
        while tasks:
            task = tasks.pop()
            if task[0] == _BUILD:
                _, xr, yr, xv, yv, n, tparams = task
                kids = results[len(results) - n:]
                del results[len(results) - n:]
                if tparams is None and all(k is c for k, c in zip(kids, type_children(xv))):
                    u = xv
                elif tparams is None and all(k is c for k, c in zip(kids, type_children(yv))):
                    u = yv
                elif tparams is not None:
                    u = FuncType(kids[:-1], kids[-1], tparams, xv.type_constraints)
                    for old in (xv, yv):
                        if old.type_params == u.type_params and old == u:
                            u = old
                else:
                    u = _rebuild(xv, kids)
                self._settle(xr, yr, xv, yv, u)
                results.append(u)
                continue
            _, x, y = task
            xr = yr = None
            if type(x) is IncompleteType:
                xr = self.root(x)
                x = bound.get(xr, xr)
            if type(y) is IncompleteType:
                yr = self.root(y)
                y = bound.get(yr, yr)
            if x is y:
                results.append(x)
                continue
            if type(x) is IncompleteType:
                self._bind(x, y)
                results.append(y)
                continue
            if type(y) is IncompleteType:
                self._bind(y, x)
                results.append(x)
                continue
            cls = type(x)
            if cls is not type(y):
                raise UnifyError(x, y)
            if cls is TensorType:
                u = self._unify_tensor(x, y)
                self._settle(xr, yr, x, y, u)
                results.append(u)
                continue
            if cls is TupleType:
                if len(x.fields) != len(y.fields):
                    raise UnifyError(x, y, f"a tuple of {len(x.fields)} fields vs one of {len(y.fields)}")
                pairs = list(zip(x.fields, y.fields))
            elif cls is FuncType:
                if len(x.arg_types) != len(y.arg_types):
                    raise UnifyError(x, y, f"a function of {len(x.arg_types)} arguments vs one of "
                                           f"{len(y.arg_types)}")
                xx, yy = x, y
                if len(x.type_params) > len(y.type_params):
                    xx, tparams = _specialize(x, y.type_params), y.type_params
                else:
                    yy, tparams = _specialize(y, x.type_params), x.type_params
                # type constraints (operators' relations) are not unified: they hold per call
                pairs = list(zip(xx.arg_types, yy.arg_types)) + [(xx.ret_type, yy.ret_type)]
            elif cls is TypeCall:
                if x.func is not y.func or len(x.args) != len(y.args):
                    raise UnifyError(x, y)
                pairs = [(x.func, y.func)] + list(zip(x.args, y.args))
            elif cls is RefType:
                pairs = [(x.value, y.value)]
            else:  # TypeVar, GlobalTypeVar: rigid, equal only to themselves
                if x == y:
                    results.append(x)
                    continue
                detail = ""
                if cls is TypeVar:
                    detail = f"type variables {x.name_hint} and {y.name_hint} are different"
                raise UnifyError(x, y, detail)
            tasks.append((_BUILD, xr, yr, x, y, len(pairs), tparams if cls is FuncType else None))
            for p, q in reversed(pairs):
                tasks.append((_UNIFY, p, q))
        return results[-1]

    def _unify_tensor(self, x: TensorType, y: TensorType) -> TensorType:
        if x.dtype != y.dtype:
            raise UnifyError(x, y, f"dtypes differ ({x.dtype} vs {y.dtype})")
        if len(x.shape) != len(y.shape):
            raise UnifyError(x, y, f"ranks differ ({len(x.shape)} vs {len(y.shape)})")
        xs, ys = x.shape, y.shape
        if xs == ys and not self.uses_dim_holes:
            return x
        dims = [self.unify_dim(a, b, i, x, y) for i, (a, b) in enumerate(zip(xs, ys))]
        if all(d is a for d, a in zip(dims, xs)):
            return x
        if all(d is b for d, b in zip(dims, ys)):
            return y
        if tuple(dims) == xs and not self.uses_dim_holes:
            return x
        return TensorType(dims, x.dtype)

    def unify_dim(self, a, b, axis: int = 0, x=None, y=None):
        """Make two dimensions equal; returns the unified dimension."""
        if a is b or a == b:
            return a
        if self.uses_dim_holes:
            a, b = self.resolve_dim(a), self.resolve_dim(b)
            if a == b:
                return a
        if a is ANY or b is ANY:
            other = b if a is ANY else a
            if self.uses_dim_holes and _dim_has_hole(other):
                # a hole met only by `?` becomes `?` at the end, unless something better comes
                self.any_dims.extend(self.unbound_dim_holes(other))
            return other
        if self.uses_dim_holes and (_dim_has_hole(a) or _dim_has_hole(b)):
            if isinstance(a, DimHole) and a not in free_symvars(b):
                self._bind_dim(a, b)
                return b
            if isinstance(b, DimHole) and b not in free_symvars(a):
                self._bind_dim(b, a)
                return a
            if self._solve_linear(a, b, axis, x, y):
                return self.resolve_dim(a)
            self.dim_equations.append((a, b, x, y, axis))
            return a
        raise UnifyError(x, y, self._conflict(a, b, axis))

    @staticmethod
    def _conflict(a, b, axis: int) -> str:
        if isinstance(a, int) and isinstance(b, int):
            return f"dimension {axis} conflicts ({a} vs {b})"
        return f"dimension {format_dim(a)} conflicts with {format_dim(b)} (axis {axis})"

    def _bind_dim(self, hole: DimHole, d) -> None:
        self.dim_link[hole] = d
        rels = self.dim_rels_of.get(hole)
        if rels:
            self._enqueue(rels)
            for v in self.unbound_dim_holes(d):
                self.dim_rels_of.setdefault(v, {}).update(rels)

    def _solve_linear(self, a, b, axis, x, y) -> bool:
        """Solve ``a = b`` when it is linear in exactly one free dimension hole; False if not."""
        diff = sub(a, b)
        if isinstance(diff, int):
            if diff:
                raise UnifyError(x, y, self._conflict(a, b, axis))
            return True
        holes = [v for v in free_symvars(diff) if isinstance(v, DimHole)]
        if len(holes) != 1:
            return False
        h = holes[0]
        terms = diff.terms if isinstance(diff, SymExpr) else ((((diff, 1),), 1),)
        coeff = None
        for mono, c in terms:
            if mono == ((h, 1),):
                coeff = c
            elif any(h in free_symvars(atom) for atom, _e in mono):
                return False
        if coeff is None:
            return False
        rest = sub(diff, mul(coeff, h))
        num = mul(-1, rest) if coeff > 0 else rest
        den = abs(coeff)
        q = floordiv(num, den)
        if mul(q, den) != num:
            if isinstance(num, int):
                raise UnifyError(x, y, f"{format_dim(a)} = {format_dim(b)} has no integer solution "
                                       f"(axis {axis})")
            return False
        if isinstance(q, int) and q < 0:
            raise UnifyError(x, y, f"{format_dim(a)} = {format_dim(b)} needs a negative dimension "
                                   f"(axis {axis})")
        self._bind_dim(h, q)
        return True

    def _settle_any_dims(self) -> bool:
        """Bind the dimension holes that only ever met ``?`` to ``?``; True if any was."""
        progress = False
        waiting, self.any_dims = self.any_dims, []
        for h in waiting:
            if self.find_dim(h) is h:
                self._bind_dim(h, ANY)
                progress = True
        return progress

    def _retry_dim_equations(self) -> bool:
        """Re-examine waiting dimension equations; True if one was solved (so work may follow)."""
        progress = False
        waiting, self.dim_equations = self.dim_equations, []
        for a, b, x, y, axis in waiting:
            a, b = self.resolve_dim(a), self.resolve_dim(b)
            if a == b or a is ANY or b is ANY:
                continue
            if not (_dim_has_hole(a) or _dim_has_hole(b)):
                raise UnifyError(self.resolve(x), self.resolve(y), self._conflict(a, b, axis))
            if self._solve_linear(a, b, axis, x, y):
                progress = True
            else:
                self.dim_equations.append((a, b, x, y, axis))
        return progress

    # ---- relations ---------------------------------------------------------------------------
    def add_relation(self, func, args, num_inputs: int, attrs=None, node=None, op=None) -> Relation:
        """Record ``func`` over ``args`` (inputs then output); it runs when :meth:`solve` does."""
        rel = Relation(func, args, num_inputs, attrs, node, op)
        self.relations.append(rel)
        watch = {rel: None}
        for t in rel.args:
            self._attach(watch, t)
        self._enqueue(watch)
        return rel

    def _error(self, rel: Relation, reason: str) -> TypeInferenceError:
        return TypeInferenceError(reason, node=rel.node, op=rel.op, relation=rel.name)

    def _run(self, rel: Relation) -> None:
        # rel.queued stays True while it runs: what it decides itself does not wake it again
        try:
            self._run_once(rel)
        finally:
            rel.queued = False

    def _run_once(self, rel: Relation) -> None:
        memo: dict = {}
        types = [self.resolve(t, memo) for t in rel.args]
        inputs = types[:rel.num_inputs]
        try:
            out = rel.func(inputs, rel.attrs)
        except TypeInferenceError as err:
            if self.uses_dim_holes and any(contains_dim_holes(t) for t in inputs):
                # the failure may be about a dimension not known yet: wait for it
                rel.state, rel.error = DEFERRED, self._error(rel, err.reason)
                return
            raise self._error(rel, err.reason) from None
        if out is None:
            rel.state, rel.error = PENDING, None
            return
        if isinstance(out, (list, tuple)) and not isinstance(out, Type):
            out = list(out)
            if len(out) != len(rel.args):
                raise self._error(rel, f"relation {rel.name} returned {len(out)} types for "
                                       f"{len(rel.args)} arguments and outputs")
            pairs = list(zip(rel.args, out))
        else:
            pairs = [(rel.args[-1], out)]
        rel.state, rel.error = SOLVED, None
        for i, (have, new) in enumerate(pairs):
            try:
                self.unify(have, new)
            except UnifyError as err:
                what = "result" if i >= rel.num_inputs else f"input {i}"
                detail = err.detail or f"{_fmt(err.lhs)} vs {_fmt(err.rhs)}"
                raise self._error(rel, f"the {what} type {type_str(self.resolve(new))} does not agree "
                                       f"with {type_str(self.resolve(have))}: {detail}") from None

    def solve(self) -> None:
        """Run relations until nothing changes. Raises TypeInferenceError (without program text)."""
        queue = self.queue
        while True:
            while queue:
                self._run(queue.popleft())
            if self.dim_equations and self._retry_dim_equations():
                continue
            if not self._settle_any_dims():
                break

    def unsolved(self) -> list:
        """Relations still waiting (in the order they were added)."""
        return [r for r in self.relations if r.state != SOLVED]

