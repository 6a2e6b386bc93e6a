"""Type inference: Hindley–Milner unification plus Relay's type-relation solver.

:func:`infer_module` (the ``InferType`` pass) types every global function of a module; :func:`infer_expr` types a lone
expression. Afterwards every node (variables, parameters, let and pattern variables, globals and
operators included) carries its type in ``node.checked_type``.

>>> import relaybench as rb
>>> from relaybench import op
>>> x = rb.var("x", shape=("n", 3))
>>> y = op.concatenate(rb.Tuple([x, x]), axis=0)
>>> mod = infer_module(rb.IRModule.from_expr(rb.Function([x], op.nn.relu(y))))
>>> mod["main"].checked_type
fn (Tensor[(n, 3), float32]) -> Tensor[(2*n, 3), float32]

How it works (the algorithm of Relay's ``type_infer.cc``):

1. **Constraints.** One iterative post-order walk gives each node a type, possibly with holes
   (:class:`~relaybench.ir.types.IncompleteType`): a variable has its annotation or a hole (the
   same variable always the same type); a call of an operator adds the operator's relation over
   its argument types and a fresh output hole (or, when the arguments are fully known, runs the
   relation at once); a call of a function instantiates its type parameters with fresh holes and
   unifies each argument with the parameter type; ``let``, ``if``, ``match`` and references
   unify what must be equal. A ``let`` binds its variable as soon as its value is typed, so the
   body sees it; a function bound by a ``let`` whose variable is annotated can call itself.
2. **Symbolic dimensions** are Relax-style: a function whose parameter types mention ``n`` is
   polymorphic in ``n``; every call instantiates ``n`` with a fresh dimension hole that the
   arguments determine (``@f`` called with ``Tensor[(4, 3)]`` gives ``n := 4`` there), while inside
   the function ``n`` is one fixed, unknown extent. A local closure is polymorphic only in the
   dimensions its enclosing functions do not bind.
3. **Solving** (:mod:`relaybench.ir.type_solver`) runs relations to a fixpoint.
4. **Resolution** substitutes the solved holes into every node's type. A node whose whole type is
   still a hole, or whose type holds an undetermined dimension, is an error ("more type
   annotations needed"). A hole nested inside a type that nothing constrains (the element type of
   a ``Nil`` that is never used, say) is left as ``_``: Relay errors there too, but such positions
   cannot affect any computation, so they are allowed.

**Modules.** Global functions are checked in groups: the strongly connected components of the
call graph among functions that are *not* fully annotated (every parameter and the return type).
A fully annotated function is checked alone and everyone else uses its declared signature, so it
may be called at several types, and recursively. The groups run dependencies first, each in one
solver; inside a group, a function without a full signature has one (monomorphic) type, a hole
unified with its inferred type. Functions whose signature is inferred are afterwards polymorphic
in their symbolic dimensions, like annotated ones.
"""

from __future__ import annotations

from typing import Optional

from .analysis import strongly_connected_components
from .._gc import gc_paused
from ..errors import TypeInferenceError
from .attrs import Attrs
from .expr import (Call, Constant, Constructor, Expr, Function, GlobalVar, If, Let, Match, Op,
                   PatternConstructor, PatternTuple, PatternVar, PatternWildcard, RefCreate, RefRead,
                   RefWrite, Tuple, TupleGetItem, Var)
from .symbolic import free_symvars, substitute
from .type_solver import (DimHole, TypeSolver, UnifyError, contains_dim_holes, contains_holes,
                          map_type, relation_name, type_children)
from .types import (FuncType, IncompleteType, RefType, TensorType, TupleType, Type, TypeCall,
                    TypeRelation, TypeVar, type_str)

__all__ = ["infer_expr", "infer_module"]


_BOOL = TensorType((), "bool")
_UNIT = TupleType(())

_EXPAND, _POST, _LET_BIND, _CLAUSE_BIND = 0, 1, 2, 3


def _tuple_getitem_rel(types, attrs):
    (t,) = types
    if type(t) is IncompleteType:
        return None
    if not isinstance(t, TupleType):
        raise TypeInferenceError(f"cannot take field {attrs.index} of a non-tuple of type {t}")
    if attrs.index >= len(t.fields):
        raise TypeInferenceError(f"tuple index {attrs.index} is out of range for {t} "
                                 f"({len(t.fields)} fields)")
    return t.fields[attrs.index]


_tuple_getitem_rel.relation_name = "TupleGetItemRel"


def _type_symvars(t: Optional[Type]) -> set:
    """The symbolic dimension variables written in ``t`` (not through holes; never dimension holes)."""
    out: set = set()
    if t is None:
        return out
    stack = [t]
    while stack:
        node = stack.pop()
        if type(node) is TensorType:
            for d in node.shape:
                if not isinstance(d, int):
                    out.update(v for v in free_symvars(d) if not isinstance(v, DimHole))
        else:
            stack.extend(type_children(node))
    return out


def _fully_annotated(fn: Function) -> bool:
    """Whether every parameter and the return type are annotated (without holes)."""
    types = [fn.ret_type] + [p.type_annotation for p in fn.params]
    return all(t is not None and not contains_holes(t) for t in types)


def _signature(fn: Function) -> FuncType:
    return FuncType([p.type_annotation for p in fn.params], fn.ret_type, fn.type_params)


_op_types: dict = {}
_constant_types: dict = {}   # (shape, numpy dtype) -> TensorType, shared by every constant


def _op_type(opdef) -> FuncType:
    """An operator's generic type, ``fn[T0..Tn](T0..Tn-1) -> Tn where Rel(T0..Tn)``."""
    t = _op_types.get(opdef.name)
    if t is None:
        n = len(opdef.inputs)
        tvars = [TypeVar(f"T{i}") for i in range(n + 1)]
        rel = TypeRelation(opdef.type_rel, tvars, n, None)
        t = _op_types[opdef.name] = FuncType(tvars[:n], tvars[n], tvars, [rel])
    return t


def describe(node) -> str:
    """A short name for a node in messages: ``%x``, ``@f``, ``the nn.conv2d call``..."""
    if isinstance(node, Var):
        return f"%{node.name_hint}"
    if isinstance(node, GlobalVar):
        return f"@{node.name_hint}"
    if isinstance(node, Op):
        return f"the operator {node.name}"
    if isinstance(node, Constructor):
        return f"the constructor {node.name_hint}"
    if isinstance(node, Call):
        if isinstance(node.op, Op):
            return f"the {node.op.name} call"
        return f"the call of {_callee_name(node.op)}"
    if isinstance(node, Let):
        return f"the let of %{node.var.name_hint}"
    if isinstance(node, Function):
        return "the function"
    return f"the {type(node).__name__} expression"


def _callee_name(op) -> str:
    if isinstance(op, GlobalVar):
        return f"@{op.name_hint}"
    if isinstance(op, Var):
        return f"%{op.name_hint}"
    if isinstance(op, Constructor):
        return op.name_hint
    if isinstance(op, Op):
        return op.name
    return "the function"


class _Inferencer:
    """Constraint generation and resolution for one solver (one expression or one group of globals)."""

    def __init__(self, mod=None, root=None, signatures: Optional[dict] = None):
        self.mod = mod
        self.root = root
        self.solver = TypeSolver()
        self.memo: dict = {}          # expression node -> type
        self.var_types: dict = {}     # Var -> type
        self.fn_rigid: dict = {}      # Function -> symbolic dims bound by its enclosing functions
        self.let_fn: dict = {}        # Var -> the Function a let binds it to
        self.signatures = signatures if signatures is not None else {}  # GlobalVar -> FuncType
        self.group: dict = {}         # GlobalVar -> type, for the functions inferred together here
        self.group_generic: set = set()  # members of the group whose signature is declared
        self.ops: dict = {}           # Op -> OpDef, the operators called
        self.type_args: dict = {}     # Call -> the types its callee's type parameters take there
        self.rels: dict = {}          # Op -> its type relation (FTypeRelation, highest level)
        self._handlers = {
            Var: self.visit_var, GlobalVar: self.visit_global_var, Constant: self.visit_constant,
            Tuple: self.visit_tuple, TupleGetItem: self.visit_tuple_getitem,
            Function: self.visit_function, Call: self.visit_call, Let: self.visit_let, If: self.visit_if,
            Match: self.visit_match, Constructor: self.visit_constructor,
            RefCreate: self.visit_ref_create, RefRead: self.visit_ref_read,
            RefWrite: self.visit_ref_write, Op: self.visit_op,
        }

    # ---- errors -------------------------------------------------------------------------------
    def _program(self, node) -> Optional[str]:
        if self.root is None or node is None:
            return None
        try:
            from .printer import astext
            return astext(self.root, mark=node)
        except Exception:  # the program text is a courtesy: never let it hide the type error
            return None

    def error(self, reason: str, node, op: Optional[str] = None,
              relation: Optional[str] = None) -> TypeInferenceError:
        return TypeInferenceError(reason, node=node, op=op, program=self._program(node),
                                  relation=relation)

    def _mismatch(self, a: Type, b: Type, err: UnifyError, what: str) -> str:
        resolve = self.solver.resolve
        ta, tb = type_str(resolve(a)), type_str(resolve(b))
        msg = f"cannot unify {ta} with {tb}"
        la = type_str(resolve(err.lhs)) if isinstance(err.lhs, Type) else str(err.lhs)
        lb = type_str(resolve(err.rhs)) if isinstance(err.rhs, Type) else str(err.rhs)
        if (la, lb) != (ta, tb) and (lb, la) != (ta, tb):
            msg += f": {la} vs {lb}"
        if err.detail:
            msg += f": {err.detail}"
        return f"{what}: {msg}" if what else msg

    def unify(self, a: Type, b: Type, node, what: str = "", op: Optional[str] = None) -> Type:
        try:
            return self.solver.unify(a, b)
        except UnifyError as err:
            raise self.error(self._mismatch(a, b, err, what), node, op=op) from None

    # ---- the walk -----------------------------------------------------------------------------
    def infer(self, root: Expr, rigid: frozenset = frozenset()) -> Type:
        """Generate the constraints of ``root`` (iteratively) and return its (unsolved) type."""
        memo = self.memo
        if root in memo:
            return memo[root]
        handlers = self._handlers
        stack = [(root, _EXPAND, rigid)]
        push = stack.append
        while stack:
            node, phase, ctx = stack.pop()
            if phase == _POST:
                handler = handlers.get(type(node)) or self._handler_for(node)
                memo[node] = handler(node)
                continue
            if phase == _LET_BIND:
                self.bind_let(node)
                continue
            if phase == _CLAUSE_BIND:
                match, i = node
                self.bind_pattern(match.clauses[i].lhs, memo[match.data], match)
                continue
            if node in memo:
                continue
            cls = type(node)
            push((node, _POST, ctx))
            if cls is Call:
                for a in reversed(node.args):
                    if a not in memo:
                        push((a, _EXPAND, ctx))
                if type(node.op) is not Op and node.op not in memo:
                    push((node.op, _EXPAND, ctx))
            elif cls is Let:
                if isinstance(node.value, Function):
                    self.let_fn[node.var] = node.value
                if node.body not in memo:
                    push((node.body, _EXPAND, ctx))
                push((node, _LET_BIND, ctx))
                if node.value not in memo:
                    push((node.value, _EXPAND, ctx))
            elif cls is Function:
                self.fn_rigid[node] = ctx
                inner = set()
                for p in node.params:
                    inner |= _type_symvars(p.type_annotation)
                if node.body not in memo:
                    push((node.body, _EXPAND, ctx | inner if inner - ctx else ctx))
            elif cls is Match:
                for i in range(len(node.clauses) - 1, -1, -1):
                    rhs = node.clauses[i].rhs
                    if rhs not in memo:
                        push((rhs, _EXPAND, ctx))
                    push(((node, i), _CLAUSE_BIND, ctx))
                if node.data not in memo:
                    push((node.data, _EXPAND, ctx))
            else:
                kids = _children(node)
                for k in reversed(kids):
                    if k not in memo:
                        push((k, _EXPAND, ctx))
        return memo[root]

    def _handler_for(self, node):
        for cls in type(node).__mro__:
            h = self._handlers.get(cls)
            if h is not None:
                return h
        raise TypeError(f"type inference cannot handle {type(node).__name__}")

    # ---- handlers ------------------------------------------------------------------------------
    def var_type(self, v: Var) -> Type:
        t = self.var_types.get(v)
        if t is None:
            t = v.type_annotation if v.type_annotation is not None else IncompleteType()
            self.var_types[v] = t
        return t

    def visit_var(self, v: Var) -> Type:
        return self.var_type(v)

    def visit_global_var(self, gv: GlobalVar) -> Type:
        t = self.group.get(gv)
        if t is None:
            t = self.signatures.get(gv)
        if t is None:
            where = "the module" if self.mod is not None else "any module (pass mod=...)"
            raise self.error(f"@{gv.name_hint} is not defined in {where}", gv)
        return t

    def visit_constant(self, c: Constant) -> Type:
        key = (c.data.shape, c.data.dtype)
        t = _constant_types.get(key)
        if t is None:
            t = _constant_types[key] = c.tensor_type
        return t

    def visit_tuple(self, t: Tuple) -> Type:
        memo = self.memo
        return TupleType([memo[f] for f in t.fields])

    def visit_tuple_getitem(self, node: TupleGetItem) -> Type:
        t = self.solver.shallow(self.memo[node.tuple_value])
        if type(t) is TupleType:
            if node.index >= len(t.fields):
                raise self.error(f"tuple index {node.index} is out of range for {self.solver.resolve(t)} "
                                 f"({len(t.fields)} fields)", node)
            return t.fields[node.index]
        if type(t) is not IncompleteType:
            raise self.error(f"cannot take field {node.index} of a non-tuple of type "
                             f"{self.solver.resolve(t)}", node)
        out = IncompleteType()
        self.solver.add_relation(_tuple_getitem_rel, [t, out], 1, Attrs(index=node.index), node=node)
        return out

    def visit_function(self, fn: Function) -> Type:
        params = [self.var_type(p) for p in fn.params]
        body = self.memo[fn.body]
        if fn.ret_type is not None:
            self.unify(fn.ret_type, body, fn, "the function's body does not match its return type")
            ret = fn.ret_type
        else:
            ret = body
        return FuncType(params, ret, fn.type_params)

    def bind_let(self, let: Let) -> None:
        v = let.var
        value_type = self.memo[let.value]
        have = self.var_types.get(v)
        if have is None and v.type_annotation is None:
            self.var_types[v] = value_type
            return
        self.unify(self.var_type(v), value_type, let, f"the value of let %{v.name_hint}")

    def visit_let(self, let: Let) -> Type:
        return self.memo[let.body]

    def visit_if(self, node: If) -> Type:
        memo = self.memo
        self.unify(_BOOL, memo[node.cond], node, "the condition of if must be a bool scalar")
        return self.unify(memo[node.true_branch], memo[node.false_branch], node,
                          "the branches of if have different types")

    def type_data(self, con: Constructor, node):
        td = None
        if self.mod is not None:
            td = self.mod.type_definitions.get(con.belong_to)
        if td is None:
            raise self.error(f"constructor {con.name_hint} belongs to type {con.belong_to.name_hint}, "
                             f"which the module does not define", node)
        return td

    def bind_pattern(self, pattern, data_type: Type, match: Match) -> None:
        stack = [(pattern, data_type)]
        while stack:
            p, t = stack.pop()
            if isinstance(p, PatternWildcard):
                continue
            if isinstance(p, PatternVar):
                self.unify(self.var_type(p.var), t, match, f"pattern variable %{p.var.name_hint}")
            elif isinstance(p, PatternConstructor):
                con = p.constructor
                td = self.type_data(con, match)
                if len(p.patterns) != len(con.inputs):
                    raise self.error(f"constructor {con.name_hint} has {len(con.inputs)} fields but "
                                     f"the pattern gives {len(p.patterns)}", match)
                holes = {tv: IncompleteType() for tv in td.type_vars}
                self.unify(t, TypeCall(td.header, [holes[tv] for tv in td.type_vars]), match,
                           f"pattern {con.name_hint}(...) does not match the matched value")
                leaf = (lambda n: holes.get(n) if type(n) is TypeVar else None)
                for sub, field in zip(p.patterns, con.inputs):
                    stack.append((sub, map_type(field, leaf=leaf) if holes else field))
            elif isinstance(p, PatternTuple):
                holes = [IncompleteType() for _ in p.patterns]
                self.unify(t, TupleType(holes), match,
                           f"a tuple pattern of {len(holes)} fields does not match the matched value")
                stack.extend(zip(p.patterns, holes))
            else:
                raise self.error(f"unknown pattern {p!r}", match)

    def visit_match(self, match: Match) -> Type:
        if not match.clauses:
            return IncompleteType()
        memo = self.memo
        t = memo[match.clauses[0].rhs]
        for i, c in enumerate(match.clauses[1:], start=1):
            t = self.unify(t, memo[c.rhs], match, f"clause {i} of the match has a different type")
        return t

    def visit_constructor(self, con: Constructor) -> Type:
        td = self.type_data(con, con)
        return FuncType(con.inputs, TypeCall(td.header, td.type_vars), td.type_vars)

    def visit_ref_create(self, node: RefCreate) -> Type:
        return RefType(self.memo[node.value])

    def visit_ref_read(self, node: RefRead) -> Type:
        t = self.solver.shallow(self.memo[node.ref])
        if type(t) is RefType:
            return t.value
        a = IncompleteType()
        self.unify(RefType(a), t, node, "ref_read needs a reference")
        return a

    def visit_ref_write(self, node: RefWrite) -> Type:
        a = IncompleteType()
        self.unify(RefType(a), self.memo[node.ref], node, "ref_write needs a reference")
        self.unify(a, self.memo[node.value], node, "the value written does not match the reference")
        return _UNIT

    def visit_op(self, op: Op) -> Type:
        raise self.error(f"the operator {op.name} must be called; it cannot be used as a value", op)

    # ---- calls ----------------------------------------------------------------------------------
    def _ground(self, t: Type) -> Optional[Type]:
        """``t`` fully known (no holes), or None."""
        solver = self.solver
        t = solver.shallow(t)
        if type(t) is TensorType and not solver.uses_dim_holes:
            return t
        t = solver.resolve(t)
        return None if contains_holes(t) else t

    def visit_call(self, call: Call) -> Type:
        callee = call.op
        memo = self.memo
        args = [memo[a] for a in call.args]
        if type(callee) is Op:
            return self._op_call(call, callee, args)
        name = _callee_name(callee)
        solver = self.solver
        ft = solver.shallow(memo[callee])
        if type(ft) is IncompleteType:
            ret = IncompleteType()
            self.unify(ft, FuncType(args, ret), call, f"calling {name}")
            return ret
        if type(ft) is not FuncType:
            raise self.error(f"{name} is not a function: it has type {solver.resolve(ft)}", call)
        if len(ft.arg_types) != len(args):
            count = len(ft.arg_types)
            raise self.error(f"{name} takes {count} argument{'s' * (count != 1)}, got {len(args)}", call)
        ft, holes = self._instantiate(ft, self._generalizable(callee, ft))
        if holes:
            self.type_args[call] = holes
        for i, (formal, actual) in enumerate(zip(ft.arg_types, args)):
            self.unify(formal, actual, call, f"argument {i} of {name}")
        for c in ft.type_constraints:
            if isinstance(c, TypeRelation):
                solver.add_relation(c.func, c.args, c.num_inputs, call.attrs, node=call)
        return ft.ret_type

    def _generalizable(self, callee, ft: FuncType) -> set:
        """The symbolic dims a call of ``callee`` instantiates afresh."""
        if isinstance(callee, GlobalVar):
            if callee in self.group and callee not in self.group_generic:
                return set()  # inferred together with the caller: one (monomorphic) type
            rigid = frozenset()
        elif isinstance(callee, Function):
            rigid = self.fn_rigid.get(callee, frozenset())
        elif isinstance(callee, Var) and callee in self.let_fn:
            rigid = self.fn_rigid.get(self.let_fn[callee], frozenset())
        else:
            return set()
        out = set()
        for t in ft.arg_types:
            out |= _type_symvars(t)
        return out - rigid

    def _instantiate(self, ft: FuncType, symvars: set):
        """``ft`` with fresh holes for its type parameters and ``symvars``; and those holes, in
        the order of the type parameters (the call's type arguments)."""
        if not ft.type_params and not symvars:
            return ft, []
        solver = self.solver
        ft = solver.resolve(ft)
        holes = {tv: IncompleteType() for tv in ft.type_params}
        dims = {v: solver.fresh_dim() for v in symvars}
        leaf = (lambda n: holes.get(n) if type(n) is TypeVar else None) if holes else None
        dim_fn = (lambda d: d if isinstance(d, int) else substitute(d, dims)) if dims else None
        plain = FuncType(ft.arg_types, ft.ret_type, (), ft.type_constraints)
        return map_type(plain, leaf=leaf, dim_fn=dim_fn), [holes[tv] for tv in ft.type_params]

    def _op_call(self, call: Call, op: Op, args: list) -> Type:
        opdef = self.ops.get(op)
        if opdef is None:
            opdef = self.ops[op] = op.opdef
            from ..op.registry import get_op_attr
            self.rels[op] = get_op_attr(op.name, "FTypeRelation", default=opdef.type_rel)
        type_rel = self.rels[op]
        if not opdef.variadic and len(args) != len(opdef.inputs):
            raise self.error(f"takes {len(opdef.inputs)} input{'s' * (len(opdef.inputs) != 1)} "
                             f"({', '.join(opdef.inputs)}), got {len(args)}", call, op=op.name)
        ground = []
        for a in args:
            g = self._ground(a)
            if g is None:
                break
            ground.append(g)
        else:
            try:
                out = type_rel(ground, call.attrs)
            except TypeInferenceError as err:
                raise self.error(err.reason, call, op=op.name,
                                 relation=relation_name(type_rel)) from None
            if out is not None:
                if isinstance(out, (list, tuple)) and not isinstance(out, Type):
                    for i, (have, new) in enumerate(zip(args, out)):
                        self.unify(have, new, call, f"input {i} ({opdef.inputs[i]})", op=op.name)
                    out = out[-1]
                self.type_args[call] = args + [out]
                return out
        ret = IncompleteType()
        self.type_args[call] = args + [ret]
        self.solver.add_relation(type_rel, args + [ret], len(args), call.attrs, node=call,
                                 op=op.name)
        return ret

    # ---- solving and resolution ----------------------------------------------------------------
    def solve(self) -> None:
        solver = self.solver
        try:
            solver.solve()
        except TypeInferenceError as err:
            raise self.error(err.reason, err.node, op=err.op, relation=err.relation) from None
        except UnifyError as err:
            raise self.error(f"cannot unify {err.lhs} with {err.rhs}: {err.detail}", self.root) from None
        for rel in solver.unsolved():
            if rel.error is not None:
                err = rel.error
                raise self.error(err.reason, err.node, op=err.op, relation=err.relation)
            inputs = rel.args[:rel.num_inputs]
            unknown = [i for i, t in enumerate(inputs) if contains_holes(solver.resolve(t))]
            names = None
            if rel.op is not None:
                from ..op.registry import lookup_opdef
                d = lookup_opdef(rel.op)
                if d is not None and not d.variadic:
                    names = [d.inputs[i] for i in unknown]
            which = ", ".join(names) if names else ", ".join(f"input {i}" for i in unknown)
            detail = f" (the type of its {which} is not known)" if unknown else ""
            raise self.error(f"could not infer the type of {describe(rel.node)}: more type "
                             f"annotations needed{detail}", rel.node, op=rel.op, relation=rel.name)
        for a, b, x, y, axis in solver.dim_equations:
            raise self.error(f"could not solve the dimension equation {solver.resolve_dim(a)} = "
                             f"{solver.resolve_dim(b)} between {solver.resolve(x)} and "
                             f"{solver.resolve(y)}: more type annotations needed", self.root)

    def resolve_all(self) -> None:
        """Substitute the solution into every node's type and record it (``set_checked_type``)."""
        solver = self.solver
        resolve = solver.resolve
        cache: dict = {}
        check_dims = solver.uses_dim_holes
        done = []
        for table in (self.var_types, self.memo):
            for node, t in table.items():
                r = resolve(t, cache)
                if type(r) is IncompleteType:
                    raise self.error(f"could not infer the type of {describe(node)}: more type "
                                     f"annotations needed", node)
                if check_dims and contains_dim_holes(r):
                    raise self.error(f"could not determine a dimension of the type of {describe(node)} "
                                     f"({type_str(r)}): more type annotations needed", node)
                done.append((node, r))
        for node, r in done:
            node.set_checked_type(r)
        for call, holes in self.type_args.items():
            resolved = tuple(resolve(t, cache) for t in holes)
            if not any(contains_holes(t) for t in resolved):
                object.__setattr__(call, "type_args", resolved)
        for op, opdef in self.ops.items():
            op.set_checked_type(_op_type(opdef))


def _children(node: Expr) -> tuple:
    cls = type(node)
    if cls is Tuple:
        return node.fields
    if cls is TupleGetItem:
        return (node.tuple_value,)
    if cls is If:
        return (node.cond, node.true_branch, node.false_branch)
    if cls is RefCreate:
        return (node.value,)
    if cls is RefRead:
        return (node.ref,)
    if cls is RefWrite:
        return (node.ref, node.value)
    return ()


# ---------------------------------------------------------------------------------------------
# Modules


def _referenced_globals(fn: Function) -> list:
    from .functor import post_order
    return [n for n in post_order(fn) if type(n) is GlobalVar]


def _infer_functions(mod) -> dict:
    """Type every global function of ``mod`` in place (their nodes get checked types).

    Returns the signatures, GlobalVar -> FuncType.
    """
    gvs = list(mod.functions)
    declared = {gv: _signature(fn) for gv, fn in mod.functions.items() if _fully_annotated(fn)}
    if len(gvs) <= 1:
        groups = [gvs]
    else:
        edges = {}
        for gv in gvs:
            # a declared function's own signature is known, but its body still needs the
            # signatures of the undeclared globals it calls, so they come first
            seen, deps = set(), []
            for ref in _referenced_globals(mod.functions[gv]):
                if ref in mod.functions and ref not in declared and ref not in seen:
                    seen.add(ref)
                    deps.append(ref)
            edges[gv] = deps
        groups = strongly_connected_components(gvs, edges)
    signatures = dict(declared)
    for group in groups:
        if not group:
            continue
        inf = _Inferencer(mod, root=mod, signatures=signatures)
        for gv in group:
            inf.group[gv] = declared.get(gv) or IncompleteType()
            if gv in declared:
                inf.group_generic.add(gv)
        for gv in group:
            fn = mod.functions[gv]
            t = inf.infer(fn)
            inf.unify(inf.group[gv], t, fn, f"the type of @{gv.name_hint}")
        inf.solve()
        inf.resolve_all()
        for gv in group:
            sig = mod.functions[gv].checked_type
            signatures[gv] = sig
            gv.set_checked_type(sig)
    return signatures


def _annotatable(t: Optional[Type]) -> bool:
    return t is not None and not contains_holes(t)


def write_back(fn: Function) -> Function:
    """``fn`` (type-checked) carrying what inference found, as Relay's ``InferType`` leaves it.

    A parameter or ``let`` variable without an annotation gets its inferred type as one, and a
    function (the global one and every closure inside) without a return type gets it; pattern
    variables stay as written (Relay prints them bare). Nodes that change are rebuilt, with their
    spans and checked types; the rest are shared, so a program that is already annotated comes
    back as it is.
    """
    from .functor import ExprMutator, post_order

    bound_by_pattern: set = set()
    needed = False
    for node in post_order(fn):
        cls = type(node)
        if cls is Match:
            stack = [c.lhs for c in node.clauses]
            while stack:
                p = stack.pop()
                if isinstance(p, PatternVar):
                    bound_by_pattern.add(p.var)
                elif isinstance(p, (PatternConstructor, PatternTuple)):
                    stack.extend(p.patterns)
        elif cls is Var:
            if node.type_annotation is None and _annotatable(node.type_or_none):
                needed = True
        elif cls is Function and node is not fn:
            if node.ret_type is None and node.type_or_none is not None:
                needed = True
    if not needed:  # at most the function's own return type to write: its body stays shared
        t = fn.type_or_none
        ret = t.ret_type if isinstance(t, FuncType) else None
        if fn.ret_type is not None or not _annotatable(ret):
            return fn
        new = Function(fn.params, fn.body, ret, fn.type_params, fn.attrs).with_span(fn.span)
        new.set_checked_type(t)
        return new

    class _WriteBack(ExprMutator):
        def visit_var(self, var):
            t = var.type_or_none
            if var.type_annotation is not None or var in bound_by_pattern or not _annotatable(t):
                return var
            new = Var(var.name_hint, t).with_span(var.span)
            new.set_checked_type(t)
            return new

        def visit_pattern(self, pattern):
            return pattern

        def visit_function(self, f):
            new = super().visit_function(f)
            t = f.type_or_none
            ret = t.ret_type if isinstance(t, FuncType) else None
            if new.ret_type is None and _annotatable(ret):
                new = Function(new.params, new.body, ret, new.type_params, new.attrs).with_span(f.span)
            return new

        def _dispatch(self, node):
            out = super()._dispatch(node)
            if out is not node and out.type_or_none is None and node.type_or_none is not None:
                out.set_checked_type(node.type_or_none)
            return out

    return _WriteBack().visit(fn)


def infer_module(mod):
    """A new IRModule holding ``mod``'s functions, every node now typed.

    As in Relay, the program carries what was inferred (:func:`write_back`): parameters and
    ``let`` variables get their types as annotations, functions their return types, and each call
    of a polymorphic operator, function or constructor its type arguments (``Call.type_args``).

    >>> import relaybench as rb
    >>> mod = rb.parse('''#[version = "0.0.5"]
    ... def @main(%x: Tensor[(1, 3, 8, 8), float32], %w) {
    ...   nn.conv2d(%x, %w, channels=4, kernel_size=[3, 3])
    ... }''')
    >>> print(infer_module(mod)["main"].astext(show_types=False))
    fn (%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) -> Tensor[(1, 4, 6, 6), float32] {
      nn.conv2d(%x, %w, channels=4, kernel_size=[3, 3])
    }
    """
    new = mod.copy()
    with gc_paused():
        _infer_functions(new)
        for gv, fn in list(new.functions.items()):
            out = write_back(fn)
            if out is not fn:
                new.functions[gv] = out
    return new


def infer_expr(expr: Expr, mod=None) -> Type:
    """Type ``expr`` (its free variables have their annotations or are inferred) and return its type.

    Globals and constructors are looked up in ``mod``; the module's functions are type-checked
    first if they are not yet.

    >>> import relaybench as rb
    >>> from relaybench import op
    >>> x = rb.var("x", shape=(2, 3))
    >>> infer_expr(op.transpose(x) * rb.const(2.0))
    Tensor[(3, 2), float32]
    """
    signatures: dict = {}
    if mod is not None:
        if any(fn.type_or_none is None for fn in mod.functions.values()):
            signatures = _infer_functions(mod)
        else:
            signatures = {gv: fn.checked_type for gv, fn in mod.functions.items()}
    inf = _Inferencer(mod, root=expr, signatures=signatures)
    inf.infer(expr)
    inf.solve()
    inf.resolve_all()
    return expr.checked_type
