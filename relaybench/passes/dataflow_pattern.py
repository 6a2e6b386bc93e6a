"""Relay's dataflow pattern language: describe a piece of a program, find it, rewrite it, outline it.

A *pattern* is a small graph that mirrors the expressions it matches. Build one from the
functions of this module and call it like an operator:

>>> import relaybench as rb
>>> from relaybench import op
>>> from relaybench.passes.dataflow_pattern import is_op, wildcard, is_constant
>>> x, w = wildcard(), wildcard()
>>> conv_relu = is_op("nn.relu")(is_op("nn.conv2d")(x, w))
>>> conv_relu
nn.relu(nn.conv2d(*, *))
>>> data = rb.var("data", shape=(1, 3, 8, 8))
>>> weight = rb.var("weight", shape=(4, 3, 3, 3))
>>> conv_relu.match(op.nn.relu(op.nn.conv2d(data, weight, padding=(1, 1))))
True
>>> conv_relu.match(op.nn.relu(data))
False

The pattern kinds: :func:`wildcard` (anything), :func:`is_op` (an operator; calling it makes a
call pattern), :func:`is_var`, :func:`is_constant`, :func:`is_expr` (an expression, compared
structurally), :func:`is_tuple`, :func:`is_tuple_get_item`, :func:`is_if`, :func:`is_let`,
:func:`is_function`, alternatives ``p1 | p2``, constraints ``p.has_attr({...})``,
``p.has_type(t)``, ``p.has_dtype("float32")``, ``p.has_shape((1, "n"))``, ``p.where(f)`` (any
condition on the matched node; not in TVM), ``p.optional(f)`` (``p`` or ``f(p)``), and
:func:`dominates` (a producer whose every use flows, through ops the
``path`` pattern accepts, into one consumer: the shape of a fusion group).

A sub-pattern stands for one expression per match: ``is_op("add")(x, x)`` matches ``add(%a, %a)``
but not ``add(%a, %b)``. Arguments match in the order written: ``add(x, is_constant())`` does not
match ``add(1f, %a)`` (as in TVM; write both orders with ``|`` when the op commutes).

**Rewriting.** A :class:`DFPatternCallback` holds a pattern and a ``callback(pre, post,
node_map)`` that returns the replacement; :func:`rewrite` applies callbacks to the whole program
until none fires. ``node_map`` maps each sub-pattern to the expressions it matched:

>>> class FoldDoubleNegation(DFPatternCallback):
...     def __init__(self):
...         super().__init__()
...         self.x = wildcard()
...         self.pattern = is_op("negative")(is_op("negative")(self.x))
...     def callback(self, pre, post, node_map):
...         return node_map[self.x][0]
>>> a = rb.var("a", shape=(2,))
>>> trace = RewriteTrace()
>>> out = rewrite(FoldDoubleNegation(), op.negative(op.negative(op.negative(a))), trace=trace)
>>> print(rb.Function([a], out).astext(show_types=False))
fn (%a: Tensor[(2), float32]) {
  negative(%a)
}
>>> print(trace)
round 0  FoldDoubleNegation  negative(negative(...)) -> negative(%a)

**Partitioning.** ``pattern.partition(expr)`` wraps every match into a function marked
``PartitionedFromPattern`` and calls it where the match was (what BYOC's MergeComposite builds
on):

>>> bias = rb.var("bias", shape=(4,))
>>> body = op.nn.relu(op.nn.bias_add(op.nn.conv2d(data, weight), bias))
>>> fused = is_op("nn.relu")(is_op("nn.bias_add")(is_op("nn.conv2d")(x, w), wildcard()))
>>> part = fused.partition(body)
>>> part.op.attrs["PartitionedFromPattern"]
'nn.conv2d_nn.bias_add_nn.relu_'
>>> [p.name_hint for p in part.op.params], [a.name_hint for a in part.args]
(['FunctionVar_0_0', 'FunctionVar_0_1', 'FunctionVar_0_2'], ['data', 'weight', 'bias'])
>>> print(rb.Function(part.op.params, part.op.body).astext(show_types=False).splitlines()[-3])
  %1 = nn.bias_add(%0, %FunctionVar_0_2);

A match is rewritten or partitioned only when nothing outside it uses its interior nodes (else
the interior would be computed twice) and when it does not overlap a match already taken;
matches are taken from the program's output towards its inputs, as TVM does.

**Where this differs from TVM.** An alternative that matched is tried again with its other
side when a later part of the pattern fails (TVM commits to the first side that matches). A
dominator pattern requires *every* input on the way up to be the parent or a path node (TVM
stops looking at a node's inputs once one of them is the parent). A use of an interior node
outside the match always refuses the match (TVM also accepts uses the match's root
post-dominates). ``partition``'s ``check`` is asked before a match is taken, so a refused match
leaves its nodes to other matches. ``p.where(f)`` is an addition.

**No recursion on the program.** Matching follows the pattern with an explicit goal stack (with
backtracking for alternatives), dominator paths are walked with an explicit stack, and the
program is indexed and rebuilt with the memoized iterative functors, so a program of 100,000
operators is matched and rewritten like a small one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence

from .._gc import gc_paused
from ..errors import RelayError
from ..ir.attrs import Attrs, freeze_value
from ..ir.expr import (Call, Constant, Constructor, Expr, Function, GlobalVar, If, Let, Op, Tuple,
                       TupleGetItem, Var, expr_children)
from ..ir.functor import ExprMutator
from ..ir.symbolic import as_dim, format_dim
from ..ir.types import TensorType, Type, check_dtype

__all__ = [
    "DFPattern", "ExprPattern", "VarPattern", "ConstantPattern", "WildcardPattern", "CallPattern",
    "FunctionPattern", "TuplePattern", "TupleGetItemPattern", "IfPattern", "LetPattern", "AltPattern",
    "AttrPattern", "TypePattern", "DataTypePattern", "ShapePattern", "PredicatePattern", "DominatorPattern",
    "is_op", "wildcard", "is_var", "is_constant", "is_expr", "is_tuple", "is_tuple_get_item", "is_if",
    "is_let", "is_function", "dominates", "has_attr", "has_type", "has_dtype", "has_shape",
    "as_pattern", "match", "find_match", "NodeMap", "DFPatternCallback", "rewrite", "partition",
    "RewriteRecord", "RewriteTrace", "PatternError", "pattern_text", "pattern_post_order",
]


class PatternError(RelayError, ValueError):
    """A pattern cannot be built or applied (the message names the pattern and the node)."""


# =============================================================================================
# Patterns


class DFPattern:
    """Base of every pattern. Patterns compare by identity (they are keys of a node map)."""

    __slots__ = ()

    # ---- building ----------------------------------------------------------------------------
    def __call__(self, *args) -> "CallPattern":
        """``is_op("add")(p1, p2)``: a call to whatever this pattern matches, with these args."""
        return CallPattern(self, [as_pattern(a) for a in args])

    def __or__(self, other) -> "AltPattern":
        return AltPattern(self, as_pattern(other))

    def __ror__(self, other) -> "AltPattern":
        return AltPattern(as_pattern(other), self)

    def __add__(self, other): return is_op("add")(self, other)
    def __sub__(self, other): return is_op("subtract")(self, other)
    def __mul__(self, other): return is_op("multiply")(self, other)
    def __truediv__(self, other): return is_op("divide")(self, other)

    def has_attr(self, attrs: Optional[dict] = None, **kwargs) -> "AttrPattern":
        """This pattern, where the matched call (function, op) has these attribute values."""
        if attrs is not None and not isinstance(attrs, (dict, Attrs)):
            raise PatternError(f"has_attr takes a dict of attributes, got {type(attrs).__name__}")
        return AttrPattern(self, {**(attrs or {}), **kwargs})

    def has_type(self, ttype) -> "TypePattern":
        """This pattern, where the matched expression's type equals ``ttype`` (a Type), or is an
        instance of ``ttype`` (a Type class such as ``TensorType``)."""
        return TypePattern(self, ttype)

    def has_dtype(self, dtype) -> "DataTypePattern":
        """This pattern, where the matched expression is a tensor of ``dtype``."""
        return DataTypePattern(self, dtype)

    def has_shape(self, shape) -> "ShapePattern":
        """This pattern, where the matched expression is a tensor of ``shape`` (ints, names of
        symbolic dims, ``None`` for ``?``)."""
        return ShapePattern(self, shape)

    def where(self, predicate: Callable[[Expr], bool]) -> "PredicatePattern":
        """This pattern, where ``predicate(expr)`` holds for the matched expression: a condition
        the other constraints cannot state (``is_constant().where(all_zero)``). Not in TVM's
        language; it lets a rule refuse a match while matching, before any rewrite is planned."""
        return PredicatePattern(self, predicate)

    def optional(self, option_constructor: Callable[["DFPattern"], "DFPattern"]) -> "AltPattern":
        """``self | option_constructor(self)``: e.g. ``conv.optional(lambda x: is_op("nn.relu")(x))``
        matches a conv2d with or without a relu after it."""
        return AltPattern(self, as_pattern(option_constructor(self)))

    def dominates(self, parent: "DFPattern", path: Optional["DFPattern"] = None) -> "DominatorPattern":
        """``dominates(parent, path, self)``: this pattern as the consumer of a dominator pattern."""
        return DominatorPattern(parent, path if path is not None else wildcard(), self)

    # ---- using --------------------------------------------------------------------------------
    def match(self, expr: Expr, mod=None) -> bool:
        """Whether this pattern matches ``expr`` (at its root)."""
        return find_match(self, expr, mod) is not None

    def partition(self, expr: Expr, attrs: Optional[dict] = None,
                  check: Optional[Callable[[Expr], bool]] = None, mod=None) -> Expr:
        """:func:`partition` with this pattern."""
        return partition(self, expr, attrs, check, mod)

    # ---- printing -----------------------------------------------------------------------------
    def __repr__(self) -> str:
        return pattern_text(self)

    __str__ = __repr__


class WildcardPattern(DFPattern):
    """``*``: matches any expression."""

    __slots__ = ()


class ExprPattern(DFPattern):
    """Matches one expression: the same node, or one structurally equal to it (an ``Op`` matches
    only itself)."""

    __slots__ = ("expr",)

    def __init__(self, expr: Expr):
        if not isinstance(expr, Expr):
            raise PatternError(f"is_expr takes an expression, got {type(expr).__name__} {expr!r:.60}")
        self.expr = expr


class VarPattern(DFPattern):
    """A variable; with a name, only a variable of that name (``name_hint``)."""

    __slots__ = ("name",)

    def __init__(self, name: str = ""):
        self.name = name or ""


class ConstantPattern(DFPattern):
    """Any constant."""

    __slots__ = ()


class CallPattern(DFPattern):
    """A call whose callee matches ``op`` and whose arguments match ``args`` one by one
    (``args=None``: any arguments)."""

    __slots__ = ("op", "args")

    def __init__(self, op: DFPattern, args: Optional[Sequence] = None):
        self.op = as_pattern(op)
        self.args = None if args is None else tuple(as_pattern(a) for a in args)


class FunctionPattern(DFPattern):
    """A function whose parameters match ``params`` (``None``: any) and whose body matches ``body``."""

    __slots__ = ("params", "body")

    def __init__(self, params: Optional[Sequence], body: DFPattern):
        self.params = None if params is None else tuple(as_pattern(p) for p in params)
        self.body = as_pattern(body)


class TuplePattern(DFPattern):
    """A tuple whose fields match ``fields`` (``None``: any fields)."""

    __slots__ = ("fields",)

    def __init__(self, fields: Optional[Sequence]):
        self.fields = None if fields is None else tuple(as_pattern(f) for f in fields)


class TupleGetItemPattern(DFPattern):
    """A projection ``t.index`` (``index=None``: any index) of a tuple matching ``tuple``."""

    __slots__ = ("tuple", "index")

    def __init__(self, tuple_value: DFPattern, index: Optional[int] = None):
        if index is not None and (not isinstance(index, int) or index < 0):
            raise PatternError(f"is_tuple_get_item: index must be a non-negative int or None, "
                               f"got {index!r}")
        self.tuple = as_pattern(tuple_value)
        self.index = index


class IfPattern(DFPattern):
    """``if (cond) { true_branch } else { false_branch }``."""

    __slots__ = ("cond", "true_branch", "false_branch")

    def __init__(self, cond, true_branch, false_branch):
        self.cond, self.true_branch, self.false_branch = (as_pattern(cond), as_pattern(true_branch),
                                                          as_pattern(false_branch))


class LetPattern(DFPattern):
    """``let var = value; body``."""

    __slots__ = ("var", "value", "body")

    def __init__(self, var, value, body):
        self.var, self.value, self.body = as_pattern(var), as_pattern(value), as_pattern(body)


class AltPattern(DFPattern):
    """``left | right``: ``left``, or else ``right`` (tried again if what follows ``left`` fails)."""

    __slots__ = ("left", "right")

    def __init__(self, left: DFPattern, right: DFPattern):
        self.left, self.right = as_pattern(left), as_pattern(right)


class AttrPattern(DFPattern):
    """``pattern`` where the matched node has these attributes: a call's attrs (falling back to its
    operator's registry attributes: ``TOpPattern``), a function's attrs, or an operator's
    registry attributes. Values are compared after the operator's own normalization, so
    ``padding=(1, 1)`` matches a conv2d whose padding is ``(1, 1, 1, 1)``."""

    __slots__ = ("pattern", "attrs")

    def __init__(self, pattern: DFPattern, attrs: dict):
        if not isinstance(attrs, (dict, Attrs)):
            raise PatternError(f"has_attr takes a dict of attributes, got {type(attrs).__name__}")
        self.pattern = as_pattern(pattern)
        self.attrs = {k: freeze_value(v) for k, v in dict(attrs).items()}


class TypePattern(DFPattern):
    """``pattern`` where the matched expression's type equals ``type`` (or is an instance of it
    when ``type`` is a Type class)."""

    __slots__ = ("pattern", "type")

    def __init__(self, pattern: DFPattern, ttype):
        if not (isinstance(ttype, Type) or (isinstance(ttype, type) and issubclass(ttype, Type))):
            raise PatternError(f"has_type takes a Type (or a Type class), got {ttype!r}")
        self.pattern = as_pattern(pattern)
        self.type = ttype


class DataTypePattern(DFPattern):
    """``pattern`` where the matched expression is a tensor of ``dtype``."""

    __slots__ = ("pattern", "dtype")

    def __init__(self, pattern: DFPattern, dtype):
        try:
            dtype = check_dtype(dtype)
        except ValueError as err:
            raise PatternError(f"has_dtype: {err}") from None
        self.pattern = as_pattern(pattern)
        self.dtype = dtype


class ShapePattern(DFPattern):
    """``pattern`` where the matched expression is a tensor of ``shape`` (dims compared exactly:
    ``n`` matches the symbolic ``n``, ``?`` matches only ``?``)."""

    __slots__ = ("pattern", "shape")

    def __init__(self, pattern: DFPattern, shape):
        try:
            dims = tuple(as_dim(d) for d in shape)
        except (TypeError, ValueError) as err:
            raise PatternError(f"has_shape: {err}") from None
        self.pattern = as_pattern(pattern)
        self.shape = dims


class PredicatePattern(DFPattern):
    """``pattern`` where ``predicate(expr)`` is true of the matched expression."""

    __slots__ = ("pattern", "predicate")

    def __init__(self, pattern: DFPattern, predicate: Callable[[Expr], bool]):
        if not callable(predicate):
            raise PatternError(f"where takes a function of the matched expression, got {predicate!r}")
        self.pattern = as_pattern(pattern)
        self.predicate = predicate


class DominatorPattern(DFPattern):
    """``child`` at the root, whose inputs lead back to one ``parent`` only through expressions
    that match ``path``, with every use of the parent (and of each path node) flowing into the
    child: the child post-dominates the parent. ``dominates(conv, elemwise, add)`` describes a
    conv2d followed by a diamond of elementwise ops that join in an add.

    Each path node is matched against ``path`` on its own (so ``path``'s node-map entry lists
    every one of them); the parent is one expression. Dataflow edges are calls' arguments,
    tuples' fields and projections' tuples; every input must be the parent or a path node.
    """

    __slots__ = ("parent", "path", "child")

    def __init__(self, parent: DFPattern, path: DFPattern, child: DFPattern):
        self.parent, self.path, self.child = as_pattern(parent), as_pattern(path), as_pattern(child)


# ---- constructors ---------------------------------------------------------------------------

def as_pattern(value) -> DFPattern:
    """A pattern from a pattern (itself) or an expression (:class:`ExprPattern`)."""
    if isinstance(value, DFPattern):
        return value
    if isinstance(value, Expr):
        return ExprPattern(value)
    raise PatternError(f"expected a pattern or an expression, got {type(value).__name__} {value!r:.60}")


def is_op(name: str) -> ExprPattern:
    """The operator ``name`` (``is_op("nn.conv2d")``); call it to make a call pattern.
    An unknown name is an error that suggests close names."""
    return ExprPattern(Op.get(name))


def wildcard() -> WildcardPattern:
    """Any expression."""
    return WildcardPattern()


def is_var(name: str = "") -> VarPattern:
    """A variable (named ``name`` when given)."""
    return VarPattern(name)


def is_constant() -> ConstantPattern:
    """Any constant."""
    return ConstantPattern()


def is_expr(expr: Expr) -> ExprPattern:
    """Exactly ``expr`` (structurally)."""
    return ExprPattern(expr)


def is_tuple(fields: Optional[Sequence]) -> TuplePattern:
    """A tuple of these field patterns (``None``: any tuple)."""
    return TuplePattern(fields)


def is_tuple_get_item(tuple_value, index: Optional[int] = None) -> TupleGetItemPattern:
    """A projection of a tuple (``index=None``: any field)."""
    return TupleGetItemPattern(tuple_value, index)


def is_if(cond, true_branch, false_branch) -> IfPattern:
    return IfPattern(cond, true_branch, false_branch)


def is_let(var, value, body) -> LetPattern:
    return LetPattern(var, value, body)


def is_function(params: Optional[Sequence], body) -> FunctionPattern:
    return FunctionPattern(params, body)


def dominates(parent, path, child) -> DominatorPattern:
    """A :class:`DominatorPattern`: ``child`` post-dominates ``parent`` through ``path`` nodes."""
    return DominatorPattern(parent, path, child)


def has_attr(attrs: dict, pattern: Optional[DFPattern] = None) -> AttrPattern:
    return AttrPattern(pattern if pattern is not None else wildcard(), attrs)


def has_type(ttype, pattern: Optional[DFPattern] = None) -> TypePattern:
    return TypePattern(pattern if pattern is not None else wildcard(), ttype)


def has_dtype(dtype, pattern: Optional[DFPattern] = None) -> DataTypePattern:
    return DataTypePattern(pattern if pattern is not None else wildcard(), dtype)


def has_shape(shape, pattern: Optional[DFPattern] = None) -> ShapePattern:
    return ShapePattern(pattern if pattern is not None else wildcard(), shape)


# ---- walking and printing patterns ----------------------------------------------------------

_LEAVES = (WildcardPattern, ExprPattern, VarPattern, ConstantPattern)

_PATTERN_CHILDREN = {
    WildcardPattern: lambda p: (),
    ExprPattern: lambda p: (),
    VarPattern: lambda p: (),
    ConstantPattern: lambda p: (),
    CallPattern: lambda p: (p.op,) + (p.args or ()),
    FunctionPattern: lambda p: (p.params or ()) + (p.body,),
    TuplePattern: lambda p: p.fields or (),
    TupleGetItemPattern: lambda p: (p.tuple,),
    IfPattern: lambda p: (p.cond, p.true_branch, p.false_branch),
    LetPattern: lambda p: (p.var, p.value, p.body),
    AltPattern: lambda p: (p.left, p.right),
    AttrPattern: lambda p: (p.pattern,),
    TypePattern: lambda p: (p.pattern,),
    DataTypePattern: lambda p: (p.pattern,),
    ShapePattern: lambda p: (p.pattern,),
    PredicatePattern: lambda p: (p.pattern,),
    DominatorPattern: lambda p: (p.parent, p.path, p.child),
}


def pattern_children(p: DFPattern) -> tuple:
    fn = _PATTERN_CHILDREN.get(type(p))
    if fn is None:
        raise PatternError(f"not a pattern: {type(p).__name__}")
    return fn(p)


def pattern_post_order(p: DFPattern) -> list:
    """Every sub-pattern of ``p``, each once, children first."""
    out, seen, stack = [], set(), [(p, False)]
    while stack:
        q, done = stack.pop()
        if done:
            out.append(q)
            continue
        if q in seen:
            continue
        seen.add(q)
        stack.append((q, True))
        for c in reversed(pattern_children(q)):
            if c not in seen:
                stack.append((c, False))
    return out


def _expr_brief(e: Expr) -> str:
    """A one-line description of a node that never prints its whole subgraph."""
    t = type(e)
    if t is Var:
        return "%" + e.name_hint
    if t is GlobalVar:
        return "@" + e.name_hint
    if t is Op:
        return e.name
    if t is Constant:
        if e.data.size <= 4:
            text = e.astext(show_types=False, show_meta_data=False)
            if "\n" not in text and len(text) <= 40:
                return text
        return f"constant{list(e.data.shape)}"
    if t is Call:
        return f"{_callee(e)}({', '.join(_arg_brief(a) for a in e.args)})"
    if t is Tuple:
        return "(" + ", ".join(_arg_brief(f) for f in e.fields) + ("," if len(e.fields) == 1 else "") + ")"
    if t is TupleGetItem:
        return f"{_arg_brief(e.tuple_value)}.{e.index}"
    if t is Function:
        return "fn(" + ", ".join("%" + p.name_hint for p in e.params) + ") {...}"
    return t.__name__ + "(...)"


def _callee(call: Call) -> str:
    op = call.op
    if type(op) is Op:
        return op.name
    if type(op) in (Var, GlobalVar, Constructor):
        return ("@" if type(op) is GlobalVar else "%" if type(op) is Var else "") + op.name_hint
    return "fn"


def _arg_brief(e: Expr) -> str:
    t = type(e)
    if t in (Var, GlobalVar, Op, Constant):
        return _expr_brief(e)
    if t is Call:
        return f"{_callee(e)}(...)"
    return {Tuple: "(...)", TupleGetItem: "(...).?", Function: "fn {...}"}.get(t, t.__name__)


def _pattern_line(p: DFPattern, text: dict) -> str:
    t = type(p)
    if t is WildcardPattern:
        return "*"
    if t is ExprPattern:
        return p.expr.name if type(p.expr) is Op else f"is_expr({_expr_brief(p.expr)})"
    if t is VarPattern:
        return f"is_var({p.name!r})" if p.name else "is_var()"
    if t is ConstantPattern:
        return "is_constant()"
    if t is CallPattern:
        args = "..." if p.args is None else ", ".join(text[a] for a in p.args)
        return f"{text[p.op]}({args})"
    if t is FunctionPattern:
        params = "..." if p.params is None else ", ".join(text[a] for a in p.params)
        return f"fn({params}) {{ {text[p.body]} }}"
    if t is TuplePattern:
        if p.fields is None:
            return "is_tuple(None)"
        return "(" + ", ".join(text[f] for f in p.fields) + ("," if len(p.fields) == 1 else "") + ")"
    if t is TupleGetItemPattern:
        return f"{text[p.tuple]}.{'*' if p.index is None else p.index}"
    if t is IfPattern:
        return f"if ({text[p.cond]}) {{ {text[p.true_branch]} }} else {{ {text[p.false_branch]} }}"
    if t is LetPattern:
        return f"let {text[p.var]} = {text[p.value]}; {text[p.body]}"
    if t is AltPattern:
        return f"({text[p.left]} | {text[p.right]})"
    if t is AttrPattern:
        return f"{text[p.pattern]}.has_attr({p.attrs!r})"
    if t is TypePattern:
        what = p.type.__name__ if isinstance(p.type, type) else str(p.type)
        return f"{text[p.pattern]}.has_type({what})"
    if t is DataTypePattern:
        return f"{text[p.pattern]}.has_dtype({p.dtype!r})"
    if t is ShapePattern:
        return f"{text[p.pattern]}.has_shape(({', '.join(format_dim(d) for d in p.shape)}))"
    if t is PredicatePattern:
        return f"{text[p.pattern]}.where({getattr(p.predicate, '__name__', 'predicate')})"
    if t is DominatorPattern:
        return f"dominates({text[p.parent]}, {text[p.path]}, {text[p.child]})"
    raise PatternError(f"not a pattern: {t.__name__}")


def pattern_text(p: DFPattern) -> str:
    """The pattern written the way it is built: ``nn.relu(nn.conv2d(*, *))``."""
    text: dict = {}
    for q in pattern_post_order(p):
        text[q] = _pattern_line(q, text)
    return text[p]


# =============================================================================================
# The program's dataflow graph


_OPAQUE_ATTRS = ("Primitive", "Compiler", "Composite", "PartitionedFromPattern")


def _opaque(fn: Function) -> bool:
    """Functions matching never enters: fused kernels, external ones, already partitioned ones."""
    attrs = fn.attrs
    return any(attrs.get(k) for k in _OPAQUE_ATTRS)


def _graph_children(node: Expr) -> tuple:
    """The children of ``node`` in the dataflow graph: operators and constructors (global
    things, shared everywhere) are left out, and so is the inside of an opaque function."""
    t = type(node)
    if t is Call:
        return node.args if type(node.op) in (Op, Constructor) else (node.op,) + node.args
    if t is Function:
        return () if _opaque(node) else node.params + (node.body,)
    return expr_children(node)


def _inputs(node: Expr) -> tuple:
    """Dataflow inputs, as a dominator pattern follows them."""
    t = type(node)
    if t is Call:
        return node.args
    if t is Tuple:
        return node.fields
    if t is TupleGetItem:
        return (node.tuple_value,)
    return ()


class _Graph:
    """The nodes reachable from ``root`` in post-order, how many times each is used, and (built
    on demand) each node's users."""

    def __init__(self, root: Expr):
        self.root = root
        order: list = []
        uses: dict = {}
        seen: set = set()
        stack = [(root, False)]
        push, pop = stack.append, stack.pop
        while stack:
            node, expanded = pop()
            if expanded:
                order.append(node)
                continue
            if node in seen:
                continue
            seen.add(node)
            push((node, True))
            kids = _graph_children(node)
            for k in kids:
                uses[k] = uses.get(k, 0) + 1
            for k in reversed(kids):
                if k not in seen:
                    push((k, False))
        self.order = order
        self.uses = uses
        self._users: Optional[dict] = None
        self._by_op: Optional[dict] = None
        self.typed = False          # set once every node is known to carry a type

    @property
    def users(self) -> dict:
        """Node -> the nodes that use it (one entry per use)."""
        if self._users is None:
            users: dict = {}
            for n in self.order:
                for k in _graph_children(n):
                    users.setdefault(k, []).append(n)
            self._users = users
        return self._users

    def calls_to(self, ops: Iterable[Op]) -> list:
        """The calls to these operators, in post-order."""
        if self._by_op is None:
            by_op: dict = {}
            for i, n in enumerate(self.order):
                if type(n) is Call and type(n.op) is Op:
                    by_op.setdefault(n.op, []).append((i, n))
            self._by_op = by_op
        found = [pair for o in ops for pair in self._by_op.get(o, ())]
        found.sort(key=lambda pair: pair[0])
        return [n for _, n in found]


# =============================================================================================
# Matching


_FAIL = object()   # a step's answer when the goal cannot be met


class _Check:
    """A goal met after a pattern's sub-patterns: its own condition on the expression."""

    __slots__ = ("pattern",)

    def __init__(self, pattern: DFPattern):
        self.pattern = pattern


class _State:
    """Bindings of one match attempt. ``log`` lists ``(pattern, expr, memoized)`` in the order
    they were made; a memoized binding is also in ``bound`` and fixes what the pattern stands for.
    (Dominator path matches are logged, not memoized: each path node matches on its own.)"""

    __slots__ = ("bound", "log")

    def __init__(self, bound: Optional[dict] = None):
        self.bound = {} if bound is None else bound
        self.log: list = []

    def bind(self, p: DFPattern, e: Expr) -> None:
        self.bound[p] = e
        self.log.append((p, e, True))

    def undo(self, mark: int) -> None:
        log, bound = self.log, self.bound
        while len(log) > mark:
            p, _e, memoized = log.pop()
            if memoized:
                del bound[p]


def _known_type(e: Expr):
    t = e.type_or_none
    if t is None:
        if type(e) is Var:
            t = e.type_annotation
        elif type(e) is Constant:
            t = e.tensor_type
    return t


def _values_equal(a, b) -> bool:
    if a is b:
        return True
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_values_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return float(a) == float(b)
    try:
        return bool(a == b)
    except Exception:
        return False


def _op_attrs(op: Op) -> dict:
    """An operator's registry attributes a pattern may ask about."""
    d = op.opdef
    if d is None:
        return {}
    return {"TOpPattern": int(d.pattern), "name": d.name, "num_inputs": d.num_inputs}


class _Matcher:
    """Matches patterns against nodes of one program (``root``), iteratively.

    ``match`` runs a loop over a stack of goals ``(pattern, expr)``; a step checks what it can
    about the node and pushes its sub-goals; an alternative leaves a choice point, and a failed
    goal returns to the last choice point, undoing the bindings made since. The program graph
    (users of each node) is built only when a dominator pattern needs it, and types are inferred
    (once, on the whole root) only when a type constraint meets an untyped node.
    """

    def __init__(self, root: Optional[Expr] = None, mod=None, graph: Optional[_Graph] = None):
        self.root = root
        self.mod = mod
        self._graph = graph
        self._inferred = False
        self._norm_cache: dict = {}
        self._alt_filters: dict = {}

    # ---- entry points ---------------------------------------------------------------------------
    def match(self, pattern: DFPattern, expr: Expr) -> Optional[list]:
        """The log of bindings of a match of ``pattern`` at ``expr``, or None."""
        if self.root is None:
            self.root = expr
        state = _State()
        if self._run(state, (pattern, expr, None)):
            return state.log
        return None

    def graph(self) -> _Graph:
        if self._graph is None:
            self._graph = _Graph(self.root)
        return self._graph

    # ---- the loop -------------------------------------------------------------------------------
    def _run(self, state: _State, goals) -> bool:
        choices: list = []
        bound = state.bound
        steps = _STEPS
        while True:
            if goals is None:
                return True
            p, e, rest = goals
            cls = type(p)
            if cls is _Check:
                goals = _CHECKS[type(p.pattern)](self, state, p.pattern, e, rest)
            elif p in bound:
                goals = rest if bound[p] is e else _FAIL
            else:
                step = steps.get(cls)
                if step is None:
                    raise PatternError(f"cannot match {cls.__name__}: not a pattern")
                goals = step(self, state, p, e, rest, choices)
            if goals is _FAIL:
                if not choices:
                    return False
                goals, mark = choices.pop()
                state.undo(mark)

    # ---- steps: (state, pattern, expr, rest, choices) -> goals or _FAIL --------------------------
    def _wildcard(self, st, p, e, rest, choices):
        st.bind(p, e)
        return rest

    def _expr(self, st, p, e, rest, choices):
        want = p.expr
        if e is not want:
            if type(want) is Op or type(e) is not type(want):
                return _FAIL
            from ..ir.structural import structural_equal
            if not structural_equal(want, e):
                return _FAIL
        st.bind(p, e)
        return rest

    def _var(self, st, p, e, rest, choices):
        if type(e) is not Var or (p.name and e.name_hint != p.name):
            return _FAIL
        st.bind(p, e)
        return rest

    def _constant(self, st, p, e, rest, choices):
        if type(e) is not Constant:
            return _FAIL
        st.bind(p, e)
        return rest

    def _call(self, st, p, e, rest, choices):
        if type(e) is not Call:
            return _FAIL
        op = p.op
        if type(op) is ExprPattern and type(op.expr) is Op and e.op is not op.expr:
            return _FAIL  # the common case, decided without a goal
        args = p.args
        if args is not None and len(args) != len(e.args):
            return _FAIL
        st.bind(p, e)
        goals = rest
        if args is not None:
            for a, x in zip(reversed(args), reversed(e.args)):
                goals = (a, x, goals)
        return (op, e.op, goals)

    def _function(self, st, p, e, rest, choices):
        if type(e) is not Function or (p.params is not None and len(p.params) != len(e.params)):
            return _FAIL
        st.bind(p, e)
        goals = (p.body, e.body, rest)
        if p.params is not None:
            for a, x in zip(reversed(p.params), reversed(e.params)):
                goals = (a, x, goals)
        return goals

    def _tuple(self, st, p, e, rest, choices):
        if type(e) is not Tuple or (p.fields is not None and len(p.fields) != len(e.fields)):
            return _FAIL
        st.bind(p, e)
        goals = rest
        if p.fields is not None:
            for a, x in zip(reversed(p.fields), reversed(e.fields)):
                goals = (a, x, goals)
        return goals

    def _tuple_get_item(self, st, p, e, rest, choices):
        if type(e) is not TupleGetItem or (p.index is not None and p.index != e.index):
            return _FAIL
        st.bind(p, e)
        return (p.tuple, e.tuple_value, rest)

    def _if(self, st, p, e, rest, choices):
        if type(e) is not If:
            return _FAIL
        st.bind(p, e)
        return (p.cond, e.cond, (p.true_branch, e.true_branch, (p.false_branch, e.false_branch, rest)))

    def _let(self, st, p, e, rest, choices):
        if type(e) is not Let:
            return _FAIL
        st.bind(p, e)
        return (p.var, e.var, (p.value, e.value, (p.body, e.body, rest)))

    def _alt(self, st, p, e, rest, choices):
        st.bind(p, e)
        filters = self._alt_filters.get(p)
        if filters is None:
            filters = self._alt_filters[p] = (_root_filter(p.left), _root_filter(p.right))
        if not _accepts(filters[0], e):       # the left side cannot match this kind of node
            return (p.right, e, rest)
        if _accepts(filters[1], e):
            choices.append(((p.right, e, rest), len(st.log)))
        return (p.left, e, rest)

    def _constrained(self, st, p, e, rest, choices):
        # the inner pattern first (cheap structure), then the constraint (may need types)
        st.bind(p, e)
        return (p.pattern, e, (_Check(p), e, rest))

    def _dominator(self, st, p, e, rest, choices):
        st.bind(p, e)
        return (p.child, e, (_Check(p), e, rest))

    # ---- checks run after the inner pattern matched ----------------------------------------------
    def _check_attrs(self, st, p, e, rest):
        return rest if self._attrs_match(e, p.attrs) else _FAIL

    def _check_type(self, st, p, e, rest):
        t = self._type(e, p)
        want = p.type
        if isinstance(want, type):
            return rest if isinstance(t, want) else _FAIL
        if t == want:
            return rest
        from ..ir.structural import structural_equal
        try:
            same = structural_equal(t, want)
        except Exception:
            same = False
        return rest if same else _FAIL

    def _check_dtype(self, st, p, e, rest):
        t = self._type(e, p)
        return rest if isinstance(t, TensorType) and t.dtype == p.dtype else _FAIL

    def _check_shape(self, st, p, e, rest):
        t = self._type(e, p)
        if not isinstance(t, TensorType) or len(t.shape) != len(p.shape):
            return _FAIL
        return rest if all(a == b for a, b in zip(t.shape, p.shape)) else _FAIL

    def _check_predicate(self, st, p, e, rest):
        return rest if p.predicate(e) else _FAIL

    def _check_dominator(self, st, p, e, rest):
        """Walk up from the child: every input is the parent or a path node (then its inputs
        in turn); then check that every use of the parent and of the path nodes flows into the
        child."""
        bound = st.bound
        parent, path = p.parent, p.path
        region = {e}
        seen = {e}
        reached = False
        stack = list(reversed(_inputs(e)))
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if parent in bound:
                if bound[parent] is n:
                    reached = True
                    continue
            else:
                sub = _State(dict(bound))
                if self._run(sub, (parent, n, None)):
                    for q, x, memoized in sub.log:
                        if memoized:
                            bound[q] = x
                        st.log.append((q, x, memoized))
                    reached = True
                    continue
            sub = _State()
            if not self._run(sub, (path, n, None)):
                return _FAIL
            st.log.extend((q, x, False) for q, x, _m in sub.log)
            region.add(n)
            stack.extend(reversed(_inputs(n)))
        if not reached:
            return _FAIL
        top = bound[parent]
        users = self.graph().users
        if not users.get(top):
            return _FAIL
        frontier, visited = [top], {top}
        while frontier:
            m = frontier.pop()
            for u in users.get(m, ()):
                if u is e or u in visited:
                    continue
                if u not in region:
                    return _FAIL          # a use that escapes the child
                visited.add(u)
                frontier.append(u)
        return rest

    # ---- helpers --------------------------------------------------------------------------------
    def _type(self, e: Expr, pattern: DFPattern):
        t = _known_type(e)
        if t is None and not self._inferred and self.root is not None:
            self._inferred = True
            from ..ir.type_infer import infer_expr
            try:
                infer_expr(self.root, self.mod)
            except RelayError as err:
                raise PatternError(f"{pattern_text(pattern)}: the program must type-check to match "
                                   f"a type constraint:\n{err}") from err
            t = _known_type(e)
        if t is None:
            raise PatternError(f"{pattern_text(pattern)}: the type of {_expr_brief(e)} is not known "
                               f"(run InferType on the program first)")
        return t

    def _normalized(self, call: Call, key: str, value):
        """``value`` as the call's operator would store attribute ``key``."""
        op = call.op
        if type(op) is not Op or op.opdef is None or key not in op.opdef.attrs:
            return value
        ckey = (op.name, key, repr(value))
        if ckey not in self._norm_cache:
            try:
                norm = op.opdef.make_attrs({key: value})[key]
            except (TypeError, ValueError, KeyError):
                norm = value
            self._norm_cache[ckey] = norm
        return self._norm_cache[ckey]

    def _attrs_match(self, e: Expr, want: dict) -> bool:
        t = type(e)
        if t is Call:
            have = e.attrs
            fallback = _op_attrs(e.op) if type(e.op) is Op else {}
            for k, v in want.items():
                if k in have:
                    if not _values_equal(have[k], self._normalized(e, k, v)):
                        return False
                elif k in fallback:
                    if not _values_equal(fallback[k], v):
                        return False
                else:
                    return False
            return True
        if t is Op:
            have = _op_attrs(e)
        elif t is Function:
            have = e.attrs
        else:
            return False
        return all(k in have and _values_equal(have[k], v) for k, v in want.items())


_STEPS = {
    WildcardPattern: _Matcher._wildcard,
    ExprPattern: _Matcher._expr,
    VarPattern: _Matcher._var,
    ConstantPattern: _Matcher._constant,
    CallPattern: _Matcher._call,
    FunctionPattern: _Matcher._function,
    TuplePattern: _Matcher._tuple,
    TupleGetItemPattern: _Matcher._tuple_get_item,
    IfPattern: _Matcher._if,
    LetPattern: _Matcher._let,
    AltPattern: _Matcher._alt,
    AttrPattern: _Matcher._constrained,
    TypePattern: _Matcher._constrained,
    DataTypePattern: _Matcher._constrained,
    ShapePattern: _Matcher._constrained,
    PredicatePattern: _Matcher._constrained,
    DominatorPattern: _Matcher._dominator,
}

_CHECKS = {
    AttrPattern: _Matcher._check_attrs,
    TypePattern: _Matcher._check_type,
    DataTypePattern: _Matcher._check_dtype,
    ShapePattern: _Matcher._check_shape,
    PredicatePattern: _Matcher._check_predicate,
    DominatorPattern: _Matcher._check_dominator,
}


class NodeMap(dict):
    """Sub-pattern -> the expressions it matched (one, or one per path node of a dominator
    pattern). In a rewrite callback these are the *rewritten* expressions; ``node_map.pre``
    holds the same entries for the original (typed) program."""

    pre: dict

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pre = self


def _node_map(log: list, translate: Optional[dict] = None) -> NodeMap:
    pre: dict = {}
    for p, e, _m in log:
        pre.setdefault(p, []).append(e)
    if translate is None:
        return NodeMap(pre)
    out = NodeMap({p: [translate.get(e, e) for e in es] for p, es in pre.items()})
    out.pre = pre
    return out


def _check_expr(expr, what: str) -> None:
    if not isinstance(expr, Expr):
        hint = ""
        if type(expr).__name__ == "IRModule":
            hint = ' (pass one of its functions, e.g. mod["main"])'
        raise PatternError(f"{what} works on an expression, not {type(expr).__name__}{hint}")


def find_match(pattern: DFPattern, expr: Expr, mod=None) -> Optional[NodeMap]:
    """The node map of a match of ``pattern`` at ``expr``, or None.

    >>> import relaybench as rb
    >>> x = wildcard()
    >>> a = rb.var("a", shape=(2,))
    >>> nm = find_match(is_op("add")(x, x), a + a)
    >>> nm[x][0] is a
    True
    """
    pattern = as_pattern(pattern)
    _check_expr(expr, "match")
    log = _Matcher(expr, mod).match(pattern, expr)
    return None if log is None else _node_map(log)


def match(pattern: DFPattern, expr: Expr, mod=None) -> bool:
    """Whether ``pattern`` matches ``expr``."""
    return find_match(pattern, expr, mod) is not None


# =============================================================================================
# Groups: the matches a rewrite or a partition takes


class _Group:
    """One match taken: its root, bindings, inputs (in pattern order) and interior nodes."""

    __slots__ = ("root", "log", "inputs", "interior")

    def __init__(self, root, log, inputs, interior):
        self.root, self.log, self.inputs, self.interior = root, log, inputs, interior


def _root_filter(p: DFPattern):
    """``(ops, classes)`` a node must be (a call to one of ``ops``, or an instance of one of
    ``classes``) for ``p`` to match it; None when anything may match."""
    t = type(p)
    if t is CallPattern:
        if type(p.op) is ExprPattern and type(p.op.expr) is Op:
            return ({p.op.expr}, set())
        return (set(), {Call})
    if t in (AttrPattern, TypePattern, DataTypePattern, ShapePattern, PredicatePattern):
        return _root_filter(p.pattern)
    if t is DominatorPattern:
        return _root_filter(p.child)
    if t is AltPattern:
        left, right = _root_filter(p.left), _root_filter(p.right)
        if left is None or right is None:
            return None
        return (left[0] | right[0], left[1] | right[1])
    if t is ExprPattern:
        return (set(), {type(p.expr)})
    kinds = {VarPattern: Var, ConstantPattern: Constant, FunctionPattern: Function, TuplePattern: Tuple,
             TupleGetItemPattern: TupleGetItem, IfPattern: If, LetPattern: Let}
    if t in kinds:
        return (set(), {kinds[t]})
    return None


def _accepts(filt, e: Expr) -> bool:
    """Whether a node passes a :func:`_root_filter`."""
    if filt is None:
        return True
    ops, classes = filt
    t = type(e)
    return t in classes or (t is Call and e.op in ops)


def _candidates(pattern: DFPattern, graph: _Graph) -> list:
    """Nodes where ``pattern`` might match, from the output towards the inputs."""
    filt = _root_filter(pattern)
    if filt is None:
        return list(reversed(graph.order))
    ops, classes = filt
    if not classes:
        return list(reversed(graph.calls_to(ops)))
    return [n for n in reversed(graph.order)
            if type(n) in classes or (type(n) is Call and n.op in ops)]


_NOT_INPUTS = (Op, Constructor, GlobalVar, Function)
_SHARED = (Op, Constructor, GlobalVar, Function, Constant)  # may be shared by groups


def _make_group(root: Expr, log: list, graph: _Graph) -> Optional[_Group]:
    """The group of a match at ``root``, or None when an interior node is used outside it."""
    fuzzy: set = set()   # dominator parent/path nodes and matched functions' parameters: interior
    for p, e, _m in log:
        if type(p) is DominatorPattern:
            fuzzy.update(x for q, x, _m2 in log if q is p.parent or q is p.path)
        elif type(p) is FunctionPattern:
            fuzzy.update(e.params)
    inputs: list = []
    taken: set = set()

    def add_input(x):
        if x not in taken and x not in fuzzy and not isinstance(x, _NOT_INPUTS):
            taken.add(x)
            inputs.append(x)

    for p, e, _m in log:
        t = type(p)
        if t in _LEAVES:
            if t in (ConstantPattern, ExprPattern) and type(e) is Constant:
                continue      # a constant the pattern names is part of the match itself
            add_input(e)
        elif t is CallPattern and p.args is None:
            for a in e.args:
                add_input(a)
        elif t is TuplePattern and p.fields is None:
            for f in e.fields:
                add_input(f)
    if root in taken:            # a leaf pattern at the root: the root is the match itself
        taken.discard(root)
        inputs.remove(root)
    interior: set = {root}
    stack = list(_graph_children(root))
    while stack:
        n = stack.pop()
        if n in interior or n in taken or isinstance(n, _SHARED):
            continue
        interior.add(n)
        stack.extend(_graph_children(n))
    # an interior node (other than the root) may be used only by interior nodes
    inside: dict = {}
    for n in interior:
        for k in _graph_children(n):
            if k in interior:
                inside[k] = inside.get(k, 0) + 1
    uses = graph.uses
    for n in interior:
        if n is not root and inside.get(n, 0) != uses.get(n, 0):
            return None
    return _Group(root, log, inputs, interior)


def _find_groups(pattern: DFPattern, graph: _Graph, matcher: _Matcher,
                 check: Optional[Callable[[Expr], bool]] = None) -> dict:
    """Root -> group for every match taken, output first; matches do not overlap."""
    groups: dict = {}
    claimed: set = set()
    for node in _candidates(pattern, graph):
        if node in claimed:
            continue
        log = matcher.match(pattern, node)
        if log is None:
            continue
        group = _make_group(node, log, graph)
        if group is None or any(n in claimed for n in group.interior):
            continue
        if check is not None and not check(node):
            continue
        claimed.update(group.interior)
        groups[node] = group
    return groups


# =============================================================================================
# Rewriting


class DFPatternCallback:
    """A rewrite rule: ``pattern`` and ``callback(pre, post, node_map) -> Expr``.

    ``pre`` is the matched expression in the program as it was (typed), ``post`` the same
    expression with its inputs already rewritten; ``node_map`` maps each sub-pattern to the
    rewritten expressions it matched (``node_map.pre`` to the original ones). Return ``post``
    (or None) to leave the match alone. The rule's name (the class name, or ``name``) labels it
    in traces.

    ``require_type``: type the program before matching (needed when the callback reads
    ``checked_type``; patterns with type constraints imply it). ``rewrite_once``: apply in the
    first round only.
    """

    pattern: Optional[DFPattern] = None
    name: Optional[str] = None

    def __init__(self, require_type: bool = False, rewrite_once: bool = False):
        self.require_type = require_type
        self.rewrite_once = rewrite_once

    @property
    def rule_name(self) -> str:
        return self.name or type(self).__name__

    def callback(self, pre: Expr, post: Expr, node_map: NodeMap) -> Expr:
        raise NotImplementedError(f"{self.rule_name}.callback")

    def rewrite(self, expr: Expr, mod=None, trace: Optional[list] = None) -> Expr:
        """:func:`rewrite` with this rule alone."""
        return rewrite(self, expr, mod, trace)

    def __repr__(self) -> str:
        return f"<rule {self.rule_name}: {self.pattern!r}>"


@dataclass(frozen=True)
class RewriteRecord:
    """One rewrite: the rule that fired, in which round, the node it replaced and its replacement."""

    rule: str
    round: int
    before: Expr
    after: Expr

    def __str__(self) -> str:
        return f"round {self.round}  {self.rule}  {_expr_brief(self.before)} -> {_expr_brief(self.after)}"


class RewriteTrace(list):
    """The rewrites :func:`rewrite` made, in order (pass one as ``trace=``)."""

    def counts(self) -> Counter:
        """How many times each rule fired."""
        return Counter(r.rule for r in self)

    def table(self):
        from .._table import Table
        return Table([{"round": r.round, "rule": r.rule, "before": _expr_brief(r.before),
                       "after": _expr_brief(r.after)} for r in self])

    def __str__(self) -> str:
        return "\n".join(str(r) for r in self) if self else "(no rewrites)"

    def __repr__(self) -> str:
        return f"<RewriteTrace: {len(self)} rewrite{'s' if len(self) != 1 else ''}>"

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()


def _carry_type(pre: Expr, post: Expr) -> None:
    """A replacement stands for the same value: give it the original's type until the program
    is typed again (functions are left untyped, so the pass infrastructure re-types them)."""
    if post.type_or_none is None and not isinstance(post, (Function, Op, Constructor, GlobalVar)):
        t = pre.type_or_none
        if t is not None:
            post.set_checked_type(t)


class _OpaqueAwareMutator(ExprMutator):
    """An ExprMutator that leaves opaque functions (Primitive, Composite, ...) untouched."""

    def children_to_visit(self, expr):
        if type(expr) is Function and _opaque(expr):
            return ()
        return expr_children(expr)

    def visit_function(self, fn):
        if _opaque(fn):
            return fn
        return super().visit_function(fn)


class _Rewriter(_OpaqueAwareMutator):
    def __init__(self, rule: DFPatternCallback, groups: dict, trace, round_index: int):
        super().__init__()
        self.rule, self.groups, self.trace, self.round = rule, groups, trace, round_index
        self.fired = 0

    def _dispatch(self, node):
        post = super()._dispatch(node)
        if post is not node:
            _carry_type(node, post)
        group = self.groups.get(node)
        if group is None:
            return post
        rule = self.rule
        out = rule.callback(node, post, _node_map(group.log, self.memo))
        if out is None:
            return post
        if not isinstance(out, Expr):
            raise PatternError(f"rewrite rule {rule.rule_name} returned {type(out).__name__}, "
                               f"not an expression, for {_expr_brief(node)}")
        if out is not post and _rebuilt(out, post):
            return post          # the same node built again: not a rewrite (and no fixpoint lost)
        if out is not post:
            _carry_type(node, out)
            self.fired += 1
            if self.trace is not None:
                self.trace.append(RewriteRecord(rule.rule_name, self.round, node, out))
        return out


def _rebuilt(a: Expr, b: Expr) -> bool:
    """Whether ``a`` is ``b`` rebuilt from the very same children (checked one level deep)."""
    t = type(a)
    if t is not type(b):
        return False
    if t is Call:
        return a.op is b.op and _same_items(a.args, b.args) and a.attrs == b.attrs \
            and _same_items(a.type_args, b.type_args)
    if t is Tuple:
        return _same_items(a.fields, b.fields)
    if t is TupleGetItem:
        return a.tuple_value is b.tuple_value and a.index == b.index
    if t is Constant:
        return a.data.dtype == b.data.dtype and a.data.shape == b.data.shape and a.data.size <= 64 \
            and bool((a.data == b.data).all())
    return False


def _same_items(xs, ys) -> bool:
    return len(xs) == len(ys) and all(x is y for x, y in zip(xs, ys))


def _needs_types(pattern: DFPattern) -> bool:
    return any(isinstance(q, (TypePattern, DataTypePattern, ShapePattern))
               for q in pattern_post_order(pattern))


def _ensure_types(graph: _Graph, mod) -> None:
    """Type the program (in place) when some node of it has no type yet."""
    if graph.typed:
        return
    for n in graph.order:
        if n.type_or_none is None and not isinstance(n, (Op, Constructor, Function)):
            from ..ir.type_infer import infer_expr
            infer_expr(graph.root, mod)
            break
    graph.typed = True


def rewrite(callbacks, expr: Expr, mod=None, trace: Optional[list] = None, max_rounds: int = 100) -> Expr:
    """Apply rewrite rules to ``expr`` until none fires (or ``max_rounds`` rounds ran).

    A round applies each rule in turn to the whole program: its matches are taken from the
    output towards the inputs (see the module's doc for which are taken), then the program is
    rebuilt bottom-up and each match's root is replaced by what the rule's callback returns.
    A round in which no callback returned something new ends the rewrite (a callback that
    returns its ``post`` rebuilt from the same children counts as returning ``post``).
    ``trace``, a list, receives a :class:`RewriteRecord` per rewrite. ``mod`` resolves globals
    when the program must be typed.

    Returns ``expr`` itself when no rule fired.
    """
    _check_expr(expr, "rewrite")
    if isinstance(callbacks, DFPatternCallback):
        callbacks = [callbacks]
    callbacks = list(callbacks)
    for cb in callbacks:
        if not isinstance(cb, DFPatternCallback):
            raise PatternError(f"rewrite takes DFPatternCallback objects, got {type(cb).__name__}")
        if not isinstance(cb.pattern, DFPattern):
            raise PatternError(f"rewrite rule {cb.rule_name} has no pattern (set self.pattern)")
    needs_types = [cb.require_type or _needs_types(cb.pattern) for cb in callbacks]
    graph: Optional[_Graph] = None
    with gc_paused():
        for rnd in range(max_rounds):
            fired = False
            for cb, typed_ in zip(callbacks, needs_types):
                if cb.rewrite_once and rnd > 0:
                    continue
                if graph is None or graph.root is not expr:
                    graph = _Graph(expr)
                if typed_:
                    _ensure_types(graph, mod)
                groups = _find_groups(cb.pattern, graph, _Matcher(expr, mod, graph))
                if not groups:
                    continue
                rewriter = _Rewriter(cb, groups, trace, rnd)
                expr = rewriter.visit(expr)
                fired = fired or rewriter.fired > 0
            if not fired or all(cb.rewrite_once for cb in callbacks):
                break
    return expr


# =============================================================================================
# Partitioning


def _partition_name(body: Expr) -> str:
    """``nn.conv2d_nn.bias_add_nn.relu_``: the body's operators in post-order."""
    parts = []
    for n in _Graph(body).order:
        t = type(n)
        if t is Call:
            if type(n.op) is Op:
                parts.append(n.op.name)
            elif type(n.op) is Function and n.op.attrs.get("Composite"):
                parts.append(str(n.op.attrs["Composite"]))
        elif t is Tuple:
            parts.append("Tuple")
        elif t is TupleGetItem:
            parts.append(f"TupleGetItem{n.index}")
    return "".join(p + "_" for p in parts)


class _Partitioner(_OpaqueAwareMutator):
    def __init__(self, groups: dict, attrs: dict):
        super().__init__()
        self.groups, self.attrs = groups, attrs
        self.numbers = {root: i for i, root in enumerate(groups)}

    def _dispatch(self, node):
        post = super()._dispatch(node)
        group = self.groups.get(node)
        if group is None:
            return post
        gi = self.numbers[node]
        params = [Var(f"FunctionVar_{gi}_{i}", _known_type(x)) for i, x in enumerate(group.inputs)]
        extract = _OpaqueAwareMutator()
        extract.memo.update(zip(group.inputs, params))
        body = extract.visit(node)
        attrs = dict(self.attrs)
        attrs["PartitionedFromPattern"] = _partition_name(body)
        func = Function(params, body, None, (), Attrs(attrs))
        out = Call(func, [self.memo.get(x, x) for x in group.inputs])
        _carry_type(node, out)
        return out


def partition(pattern: DFPattern, expr: Expr, attrs: Optional[dict] = None,
              check: Optional[Callable[[Expr], bool]] = None, mod=None) -> Expr:
    """Wrap each match of ``pattern`` in ``expr`` into a function called at the match's place.

    The function's parameters are the match's inputs (what its wildcards and variable patterns
    matched, in pattern order; constants the pattern names are kept inside), named
    ``FunctionVar_<group>_<index>`` and annotated with the inputs' types when known; its attrs
    are ``attrs`` plus ``PartitionedFromPattern`` (the matched operators in post-order, each
    followed by ``_``). ``check(matched_root) -> bool`` can refuse a match. A match whose
    interior nodes are used outside it is not partitioned, and neither is anything inside an
    already partitioned (or Primitive, Composite, external) function.
    """
    pattern = as_pattern(pattern)
    _check_expr(expr, "partition")
    with gc_paused():
        graph = _Graph(expr)
        groups = _find_groups(pattern, graph, _Matcher(expr, mod, graph), check)
        if not groups:
            return expr
        return _Partitioner(groups, dict(attrs or {})).visit(expr)

