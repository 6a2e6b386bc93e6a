"""The reference interpreter: Relay's semantics, evaluated directly on numpy arrays.

Every Relay program runs here: closures, global and let recursion, ADTs and match, references,
if, tuples, and operators through their numpy reference. It is the oracle the compiled backends
and every pass are checked against.

The interpreter is a machine with an explicit continuation stack, not a recursive evaluator: a
program of any depth, and a recursion of any depth in the program (a loop written as a recursive
function), runs without touching Python's recursion limit.

Values: tensors are numpy arrays (rank 0 for scalars); tuples are Python tuples; functions are
:class:`Closure`; ADT values are :class:`ConstructorValue`; references are :class:`RefValue`.

>>> import numpy as np, relaybench as rb
>>> x = rb.var("x", shape=(2,))
>>> run = rb.create_executor("interpreter", mod=rb.IRModule.from_expr(rb.Function([x], x * x))).evaluate()
>>> run(np.array([1.0, 3.0], dtype="float32"))
array([1., 9.], dtype=float32)
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..errors import ExecutionError, RelayError
from ..ir.expr import (Call, Constant, Constructor, Expr, Function, GlobalVar, If, Let, Match, Op,
                       PatternConstructor, PatternTuple, PatternVar, PatternWildcard, RefCreate, RefRead,
                       RefWrite, Tuple, TupleGetItem, Var)
from ..ir.module import IRModule
from ..ir.types import TensorType

__all__ = ["Interpreter", "Closure", "ConstructorValue", "RefValue", "OpValue"]


class Frame:
    """The values of one activation: bound variables and evaluated nodes (graph sharing)."""

    __slots__ = ("values", "parent")

    def __init__(self, parent: Optional["Frame"] = None):
        self.values: dict = {}
        self.parent = parent

    def lookup(self, node):
        f = self
        while f is not None:
            v = f.values.get(node, _MISSING)
            if v is not _MISSING:
                return v
            f = f.parent
        return _MISSING


_MISSING = object()


class Closure:
    """A function value: the Function and the frame it was created in."""

    __slots__ = ("func", "frame", "name")

    def __init__(self, func: Function, frame: Frame, name: str = ""):
        self.func, self.frame, self.name = func, frame, name

    def __repr__(self) -> str:
        return f"<closure {self.name or 'fn'}/{len(self.func.params)}>"


class ConstructorValue:
    """An ADT value: its constructor and fields."""

    __slots__ = ("constructor", "fields")

    def __init__(self, constructor: Constructor, fields: tuple):
        self.constructor, self.fields = constructor, tuple(fields)

    @property
    def tag(self) -> int:
        return self.constructor.tag

    @property
    def name(self) -> str:
        return self.constructor.name_hint

    def __repr__(self) -> str:
        if not self.fields:
            return self.name
        return f"{self.name}({', '.join(_short(f) for f in self.fields)})"


class RefValue:
    """A mutable cell made by ``ref(v)``."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __repr__(self) -> str:
        return f"ref({_short(self.value)})"


class OpValue:
    """A primitive operator used as a value."""

    __slots__ = ("op",)

    def __init__(self, op: Op):
        self.op = op

    def __repr__(self) -> str:
        return f"<op {self.op.name}>"


def _short(v) -> str:
    if isinstance(v, np.ndarray):
        return np.array2string(v, threshold=6, edgeitems=2) if v.ndim else repr(v.item())
    return repr(v)


# task kinds of the machine
_EVAL, _STORE, _TUPLE, _GETITEM, _APPLY, _LET, _IF, _MATCH, _REF_CREATE, _REF_READ, _REF_WRITE = range(11)


class Interpreter:
    """Evaluates expressions of a module. ``evaluate(expr)`` returns a value; a Function gives a
    Python callable."""

    def __init__(self, mod: Optional[IRModule] = None):
        self.mod = mod if mod is not None else IRModule()
        self.globals = Frame()
        self._global_closures: dict = {}

    # ---- public ------------------------------------------------------------------------------
    def evaluate(self, expr: Optional[Expr] = None, binds: Optional[dict] = None):
        """The value of ``expr`` (default: ``@main``). Functions come back as Python callables."""
        if expr is None:
            expr = self.mod.get_global_var("main")
        frame = Frame(self.globals)
        for var, value in (binds or {}).items():
            frame.values[var] = _to_value(value)
        value = self.run(expr, frame)
        if isinstance(value, Closure):
            return self._as_callable(value)
        return value

    def _as_callable(self, closure: Closure):
        params = closure.func.params

        def call(*args, **kwargs):
            if kwargs:
                by_name = {p.name_hint: i for i, p in enumerate(params)}
                args = list(args) + [None] * (len(params) - len(args))
                for name, value in kwargs.items():
                    if name not in by_name:
                        raise ExecutionError(f"no parameter named {name!r} (have: "
                                             f"{', '.join(p.name_hint for p in params)})", input_name=name)
                    args[by_name[name]] = value
            if len(args) != len(params):
                raise ExecutionError(f"{closure.name or 'the function'} takes {len(params)} arguments, "
                                     f"got {len(args)}")
            values = []
            for p, a in zip(params, args):
                if a is None:
                    raise ExecutionError(f"missing argument %{p.name_hint}", input_name=p.name_hint)
                values.append(_check_input(p, _to_value(a)))
            return self.apply(closure, values)

        call.__name__ = closure.name or "fn"
        return call

    def apply(self, fn_value, args: list):
        """Call a function value on argument values."""
        frame = Frame(self.globals)
        f = Var("__callee")
        arg_vars = [Var(f"__arg{i}") for i in range(len(args))]
        frame.values[f] = fn_value
        for v, a in zip(arg_vars, args):
            frame.values[v] = a
        return self.run(Call(f, arg_vars), frame)

    # ---- the machine ----------------------------------------------------------------------------
    def _global(self, gv: GlobalVar):
        c = self._global_closures.get(gv)
        if c is None:
            try:
                func = self.mod[gv]
            except KeyError:
                raise ExecutionError(f"@{gv.name_hint} is not defined in the module", node=gv) from None
            c = self._global_closures[gv] = Closure(func, self.globals, "@" + gv.name_hint)
        return c

    def run(self, expr: Expr, frame: Frame):
        tasks: list = [(_EVAL, expr, frame)]
        vals: list = []
        push_task, pop_task = tasks.append, tasks.pop
        push_val, pop_val = vals.append, vals.pop
        while tasks:
            kind, node, fr = pop_task()
            if kind == _EVAL:
                v = fr.lookup(node)
                if v is not _MISSING:
                    push_val(v)
                    continue
                cls = type(node)
                if cls is Constant:
                    push_val(node.data)
                elif cls is Var:
                    raise ExecutionError(f"variable %{node.name_hint} is not bound here", node=node)
                elif cls is GlobalVar:
                    push_val(self._global(node))
                elif cls is Function:
                    push_val(Closure(node, fr))
                elif cls is Op:
                    push_val(OpValue(node))
                elif cls is Constructor:
                    push_val(node)
                elif cls is Call:
                    push_task((_STORE, node, fr))
                    push_task((_APPLY, node, fr))
                    for a in reversed(node.args):
                        push_task((_EVAL, a, fr))
                    push_task((_EVAL, node.op, fr))
                elif cls is Tuple:
                    push_task((_STORE, node, fr))
                    push_task((_TUPLE, node, fr))
                    for a in reversed(node.fields):
                        push_task((_EVAL, a, fr))
                elif cls is TupleGetItem:
                    push_task((_STORE, node, fr))
                    push_task((_GETITEM, node, fr))
                    push_task((_EVAL, node.tuple_value, fr))
                elif cls is Let:
                    # the let's value is its body's; bodies are not shared, so no store
                    push_task((_LET, node, fr))
                    if isinstance(node.value, Function):
                        # bind first so a let-bound function can call itself
                        fr.values[node.var] = Closure(node.value, fr, "%" + node.var.name_hint)
                    else:
                        push_task((_EVAL, node.value, fr))
                elif cls is If:
                    push_task((_STORE, node, fr))
                    push_task((_IF, node, fr))
                    push_task((_EVAL, node.cond, fr))
                elif cls is Match:
                    push_task((_STORE, node, fr))
                    push_task((_MATCH, node, fr))
                    push_task((_EVAL, node.data, fr))
                elif cls is RefCreate:
                    push_task((_STORE, node, fr))
                    push_task((_REF_CREATE, node, fr))
                    push_task((_EVAL, node.value, fr))
                elif cls is RefRead:
                    push_task((_STORE, node, fr))
                    push_task((_REF_READ, node, fr))
                    push_task((_EVAL, node.ref, fr))
                elif cls is RefWrite:
                    push_task((_STORE, node, fr))
                    push_task((_REF_WRITE, node, fr))
                    push_task((_EVAL, node.value, fr))
                    push_task((_EVAL, node.ref, fr))
                else:
                    raise ExecutionError(f"the interpreter cannot evaluate {cls.__name__}", node=node)
            elif kind == _STORE:
                fr.values[node] = vals[-1]
            elif kind == _APPLY:
                n = len(node.args)
                args = vals[len(vals) - n:] if n else []
                if n:
                    del vals[len(vals) - n:]
                fn = pop_val()
                if isinstance(fn, OpValue):
                    push_val(self._call_op(node, fn.op, args))
                elif isinstance(fn, Closure):
                    params = fn.func.params
                    if len(params) != n:
                        raise ExecutionError(
                            f"{fn.name or 'a function'} takes {len(params)} arguments, got {n}", node=node)
                    callee = Frame(fn.frame)
                    for p, a in zip(params, args):
                        callee.values[p] = a
                    push_task((_EVAL, fn.func.body, callee))
                elif isinstance(fn, Constructor):
                    if len(fn.inputs) != n:
                        raise ExecutionError(f"constructor {fn.name_hint} takes {len(fn.inputs)} fields, "
                                             f"got {n}", node=node)
                    push_val(ConstructorValue(fn, args))
                else:
                    raise ExecutionError(f"cannot call a {type(fn).__name__} value", node=node)
            elif kind == _TUPLE:
                n = len(node.fields)
                t = tuple(vals[len(vals) - n:]) if n else ()
                if n:
                    del vals[len(vals) - n:]
                push_val(t)
            elif kind == _GETITEM:
                t = pop_val()
                if not isinstance(t, tuple):
                    raise ExecutionError(f"projection .{node.index} of a non-tuple {_short(t)}", node=node)
                if node.index >= len(t):
                    raise ExecutionError(f"projection .{node.index} of a {len(t)}-tuple", node=node)
                push_val(t[node.index])
            elif kind == _LET:
                if not isinstance(node.value, Function):
                    fr.values[node.var] = pop_val()
                # a chain of lets runs as a loop: the body replaces this task
                push_task((_EVAL, node.body, fr))
            elif kind == _IF:
                c = pop_val()
                try:
                    truth = bool(np.asarray(c).item())
                except (ValueError, TypeError):
                    raise ExecutionError(f"if condition must be a bool scalar, got {_short(c)}", node=node) from None
                push_task((_EVAL, node.true_branch if truth else node.false_branch, fr))
            elif kind == _MATCH:
                data = pop_val()
                for clause in node.clauses:
                    binds: dict = {}
                    if _match(clause.lhs, data, binds):
                        fr.values.update(binds)
                        push_task((_EVAL, clause.rhs, fr))
                        break
                else:
                    raise ExecutionError(f"no clause of the match accepts {_short(data)}", node=node)
            elif kind == _REF_CREATE:
                push_val(RefValue(pop_val()))
            elif kind == _REF_READ:
                r = pop_val()
                if not isinstance(r, RefValue):
                    raise ExecutionError(f"ref_read of a non-reference {_short(r)}", node=node)
                push_val(r.value)
            elif kind == _REF_WRITE:
                value = pop_val()
                r = pop_val()
                if not isinstance(r, RefValue):
                    raise ExecutionError(f"ref_write to a non-reference {_short(r)}", node=node)
                r.value = value
                push_val(())
        assert len(vals) == 1, "interpreter stack out of balance"
        return vals[0]

    def _call_op(self, call: Call, op: Op, args: list):
        opdef = op.opdef
        if opdef.reference is None:
            raise ExecutionError(f"{op.name} has no reference implementation", node=call)
        try:
            out = opdef.reference(*args, call.attrs)
        except RelayError:
            raise
        except Exception as err:  # the op's own complaint, with the op named
            where = f" at {call.span}" if call.span else ""
            shapes = ", ".join(_describe(a) for a in args)
            raise ExecutionError(f"{op.name}{where}: {err} (inputs: {shapes})", node=call) from err
        t = call.type_or_none
        if isinstance(out, np.ndarray) and isinstance(t, TensorType) and out.dtype.name != t.dtype:
            # the relation in effect (a user's FTypeRelation, say) promised what the op cannot give
            where = f" at {call.span}" if call.span else ""
            raise ExecutionError(f"{op.name}{where}: gives {out.dtype.name} on inputs "
                                 f"{', '.join(_describe(a) for a in args)}, where the program's type "
                                 f"says {t.dtype}", node=call)
        return _to_value(out)


def _describe(v) -> str:
    if isinstance(v, np.ndarray):
        return f"{v.dtype}{list(v.shape)}"
    if isinstance(v, tuple):
        return "(" + ", ".join(_describe(f) for f in v) + ")"
    return type(v).__name__


def _match(pattern, value, binds: dict) -> bool:
    stack = [(pattern, value)]
    while stack:
        p, v = stack.pop()
        if isinstance(p, PatternWildcard):
            continue
        if isinstance(p, PatternVar):
            binds[p.var] = v
        elif isinstance(p, PatternConstructor):
            if not isinstance(v, ConstructorValue) or v.constructor is not p.constructor and not (
                    v.constructor.name_hint == p.constructor.name_hint and v.tag == p.constructor.tag):
                return False
            stack.extend(zip(p.patterns, v.fields))
        elif isinstance(p, PatternTuple):
            if not isinstance(v, tuple) or len(v) != len(p.patterns):
                return False
            stack.extend(zip(p.patterns, v))
        else:
            return False
    return True


def _to_value(v):
    if isinstance(v, (np.ndarray, Closure, ConstructorValue, RefValue, OpValue, Constructor)):
        return v
    if isinstance(v, tuple):
        return tuple(_to_value(f) for f in v)
    if isinstance(v, list):
        return tuple(_to_value(f) for f in v)
    if isinstance(v, (bool, int, float, np.generic)):
        return np.asarray(v)
    if hasattr(v, "__array__"):
        return np.asarray(v)
    return v


def _check_input(param: Var, value):
    t = param.type_annotation
    if not isinstance(t, TensorType) or not isinstance(value, np.ndarray):
        return value
    if value.dtype.name != t.dtype:
        raise ExecutionError(f"input %{param.name_hint}: expected dtype {t.dtype}, given {value.dtype.name}",
                             input_name=param.name_hint, expected=t.dtype, given=value.dtype.name)
    if len(value.shape) != len(t.shape) or any(
            isinstance(d, int) and d != s for d, s in zip(t.shape, value.shape)):
        raise ExecutionError(f"input %{param.name_hint}: expected shape {t}, given {list(value.shape)}",
                             input_name=param.name_hint, expected=str(t), given=tuple(value.shape))
    return value


_ = Any
