"""Relay's IR: types, expressions, ADTs, modules, functors, structural equality, text format.

See the submodules' docstrings for examples; everything public is re-exported here.
"""

from .adt import TypeData, define_adt
from .analysis import all_vars, bound_vars, count_nodes, count_ops, free_vars, op_histogram
from .attrs import Attrs
from .builder import ScopeBuilder, as_expr, bind, const, if_, let, tensor_type, tuple_, type_var, var
from .expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If, Let, Match, Op,
                   Pattern, PatternConstructor, PatternTuple, PatternVar, PatternWildcard, RefCreate,
                   RefRead, RefWrite, Span, Tuple, TupleGetItem, Var)
from .functor import ExprFunctor, ExprMutator, ExprVisitor, post_order, post_order_visit
from .module import IRModule
from .symbolic import ANY, AnyDim, SymExpr, SymVar
from .types import (FuncType, GlobalTypeVar, IncompleteType, RefType, TensorType, TupleType, Type,
                    TypeCall, TypeConstraint, TypeKind, TypeRelation, TypeVar, scalar_type, unit_type)


def __getattr__(name):
    # structural equality, printer and parser load on first use
    if name in ("structural_equal", "structural_hash", "assert_structural_equal"):
        from . import structural
        return getattr(structural, name)
    if name in ("astext",):
        from . import printer
        return printer.astext
    if name in ("parse", "parse_expr"):
        from . import parser
        return getattr(parser, name)
    raise AttributeError(f"module 'relaybench.ir' has no attribute {name!r}")
