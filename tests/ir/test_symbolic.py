"""Symbolic dimensions: canonical forms, division rules, substitution, evaluation, printing."""

import operator
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relaybench.ir.symbolic import (ANY, AnyDim, SymExpr, SymVar, as_dim, evaluate, floordiv, format_dim,
                                    free_symvars, is_dim, mod, prod, substitute)

n, m, k = SymVar("n"), SymVar("m"), SymVar("k")


# ---------------------------------------------------------------------------------------------
# canonical forms

def test_like_terms_collect():
    assert n + n == 2 * n
    assert isinstance(n + n, SymExpr)
    assert n + n + n - n == 2 * n
    assert 3 * n - 2 * n is n  # a lone variable collapses to the SymVar itself


def test_constants_fold_through_symbols():
    assert (n + 1) * 2 - 2 == 2 * n
    assert (n * m + 3) - n * m == 3
    assert isinstance((n * m + 3) - n * m, int)


def test_multiplication_commutes_and_cancels():
    assert n * m - m * n == 0
    assert type(n * m - m * n) is int
    assert n * m == m * n
    assert hash(n * m) == hash(m * n)


def test_distribution_and_powers():
    assert (n + 1) * (n - 1) == n * n - 1
    assert (n - m) * (n - m) == n * n - 2 * n * m + m * m
    assert (n + m) * 3 == 3 * n + 3 * m


def test_multiplying_by_zero_and_one():
    assert 0 * n == 0 and n * 0 == 0
    assert 1 * n is n
    assert n * 1 is n


def test_different_variables_differ():
    assert n != m
    assert n + 1 != n
    assert 2 * n != n * n
    assert SymVar("n") == n and hash(SymVar("n")) == hash(n)


def test_negation():
    assert -n == -1 * n
    assert -n + n == 0
    assert str(-n) == "-n"
    assert str(3 - n) == "-n + 3"


def test_any_absorbs_arithmetic():
    assert n + ANY is ANY
    assert ANY * 2 is ANY
    assert floordiv(ANY, 4) is ANY
    assert mod(n, ANY) is ANY
    assert AnyDim() is ANY


def test_symbolic_values_are_immutable():
    with pytest.raises(AttributeError):
        n.name = "q"
    with pytest.raises(AttributeError):
        (n + 1).terms = ()


def test_pickle_round_trip_keeps_canonical_form():
    e = floordiv(2 * n * m + 3, 4) + mod(n, 3)
    back = pickle.loads(pickle.dumps(e))
    assert back == e and hash(back) == hash(e)
    assert pickle.loads(pickle.dumps(ANY)) is ANY


# ---------------------------------------------------------------------------------------------
# floor division and modulo by constants

def test_exact_division_divides_coefficients():
    assert floordiv(2 * n + 4, 2) == n + 2
    assert floordiv(6 * n * m, 3) == 2 * n * m


def test_division_splits_off_multiples():
    assert floordiv(2 * n + 1, 2) is n  # (2n + 1) // 2 == n
    assert floordiv(4 * n + 6, 4) == n + 1  # (4n + 6) // 4 == n + 1 + 2 // 4
    assert floordiv(4 * n - 1, 4) == n - 1  # floor semantics for a negative remainder
    assert floordiv(4 * n + 2, 4) + 1 == floordiv(4 * n + 6, 4)


def test_division_that_does_not_simplify_stays_an_atom():
    e = floordiv(n, 4)
    assert isinstance(e, SymExpr)
    assert str(e) == "n // 4"
    assert floordiv(n, 4) == floordiv(n, 4)
    assert floordiv(n, 4) != floordiv(n, 2)
    assert floordiv(n, 4) != mod(n, 4)
    assert floordiv(n, 4) + floordiv(n, 4) == 2 * floordiv(n, 4)


def test_division_by_one_and_of_ints():
    assert floordiv(n, 1) is n
    assert floordiv(7, 2) == 3 and floordiv(-7, 2) == -4
    assert mod(7, 3) == 1 and mod(-7, 3) == 2
    assert mod(n, 1) == 0


def test_modulo_reduces_coefficients():
    assert mod(2 * n + 3, 2) == 1
    assert mod(4 * n, 2) == 0
    assert mod(n + 5, 4) == mod(n + 1, 4)
    assert str(mod(n + 5, 4)) == "(n + 1) % 4"
    assert mod(-n, 3) == mod(2 * n, 3)


def test_bad_divisors():
    with pytest.raises(ZeroDivisionError):
        floordiv(n, 0)
    with pytest.raises(ZeroDivisionError):
        mod(n, -2)
    with pytest.raises(TypeError, match="constant integer divisor"):
        floordiv(n, m)
    with pytest.raises(TypeError):
        mod(n, 2.5)


# ---------------------------------------------------------------------------------------------
# substitution and evaluation

def test_substitute_with_ints_and_exprs():
    assert substitute(2 * n + 1, {n: 3}) == 7
    assert substitute(2 * n + 1, {n: m + 1}) == 2 * m + 3
    assert substitute(n * m, {n: m}) == m * m
    assert substitute(n * m, {k: 5}) == n * m
    assert substitute(floordiv(n + 3, 4), {n: 4 * m + 1}) == m + 1
    assert substitute(ANY, {n: 1}) is ANY
    assert substitute(5, {n: 1}) == 5


def test_evaluate():
    assert evaluate(floordiv(n, 4) + 1, {"n": 9}) == 3
    assert evaluate(mod(2 * n + 3, 4), {"n": 3}) == 1
    assert evaluate(n * m - 2, {n: 3, "m": 4}) == 10
    assert evaluate(floordiv(n - 9, 4), {"n": 2}) == -2  # floor, not truncation


def test_evaluate_needs_every_variable():
    with pytest.raises(ValueError, match="not determined"):
        evaluate(n + m, {"n": 1})


def test_free_symvars_in_first_occurrence_order():
    e = floordiv(m * n + k, 2) + n
    assert set(free_symvars(e)) == {n, m, k}
    assert len(free_symvars(e)) == 3
    assert free_symvars(7) == []
    assert free_symvars(n) == [n]


def test_prod():
    assert prod([2, n, 3]) == 6 * n
    assert prod([]) == 1
    assert prod([2, ANY]) is ANY


# ---------------------------------------------------------------------------------------------
# printing

@pytest.mark.parametrize("dim, text", [
    (2 * n + 1, "2*n + 1"),
    (floordiv(n, 4) + 1, "n // 4 + 1"),
    (n - 3, "n - 3"),
    (-2 * n + 1, "-2*n + 1"),
    (n * m, "m*n"),
    (n * n, "n*n"),
    (mod(n, 3) * 2, "2*(n % 3)"),
    (floordiv(floordiv(n, 2), 2), "(n // 2) // 2"),
    (ANY, "?"),
    (7, "7"),
    (n, "n"),
])
def test_format(dim, text):
    assert format_dim(dim) == text
    if not isinstance(dim, int):
        assert repr(dim) == text


def test_higher_degree_terms_print_first():
    assert str(1 + n + n * m) == "m*n + n + 1"


# ---------------------------------------------------------------------------------------------
# user-given dimensions

@pytest.mark.parametrize("given, expected", [
    (3, 3), (np.int64(4), 4), ("n", SymVar("n")), (None, ANY), ("?", ANY), (ANY, ANY), (2 * n, 2 * n),
])
def test_as_dim(given, expected):
    got = as_dim(given)
    assert got == expected
    assert is_dim(got)


@pytest.mark.parametrize("bad, error", [
    (-1, ValueError), (True, TypeError), ("2n", ValueError), (1.5, TypeError), ([2], TypeError),
])
def test_as_dim_rejects(bad, error):
    with pytest.raises(error):
        as_dim(bad)


def test_symvar_needs_a_name():
    with pytest.raises(ValueError):
        SymVar("")
    assert not is_dim(True) and not is_dim("n") and is_dim(0)


# ---------------------------------------------------------------------------------------------
# properties: the canonical form means what the expression means

_NAMES = ("n", "m", "k")
_VARS = {name: SymVar(name) for name in _NAMES}


def _expressions(with_division: bool):
    leaves = st.one_of(st.sampled_from(_NAMES).map(lambda s: ("var", s)),
                       st.integers(-6, 6).map(lambda c: ("const", c)))

    def grow(children):
        ops = [st.tuples(st.sampled_from(["+", "-", "*"]), children, children)]
        if with_division:
            ops.append(st.tuples(st.sampled_from(["//", "%"]), children, st.integers(1, 5)))
        return st.one_of(*ops)

    return st.recursive(leaves, grow, max_leaves=12)


_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def _build(tree, leaf_var, leaf_const, divide, modulo):
    # the trees are small (hypothesis bounds them), so plain recursion is fine here
    tag = tree[0]
    if tag == "var":
        return leaf_var(tree[1])
    if tag == "const":
        return leaf_const(tree[1])
    if tag in _OPS:
        a = _build(tree[1], leaf_var, leaf_const, divide, modulo)
        b = _build(tree[2], leaf_var, leaf_const, divide, modulo)
        return _OPS[tag](a, b)
    a = _build(tree[1], leaf_var, leaf_const, divide, modulo)
    return divide(a, tree[2]) if tag == "//" else modulo(a, tree[2])


def _symbolic(tree):
    return _build(tree, _VARS.__getitem__, lambda c: c, floordiv, mod)


def _concrete(tree, env):
    return _build(tree, env.__getitem__, lambda c: c, operator.floordiv, operator.mod)


_envs = st.fixed_dictionaries({name: st.integers(-40, 40) for name in _NAMES})


@settings(max_examples=300, deadline=None)
@given(_expressions(with_division=True), _envs)
def test_canonical_form_evaluates_like_the_expression(tree, env):
    canonical = _symbolic(tree)
    assert evaluate(canonical, env) == _concrete(tree, env)


@settings(max_examples=200, deadline=None)
@given(_expressions(with_division=True), _envs)
def test_substitution_agrees_with_evaluation(tree, env):
    canonical = _symbolic(tree)
    partly = substitute(canonical, {SymVar("n"): env["n"]})
    assert evaluate(partly, env) == evaluate(canonical, env)


@settings(max_examples=200, deadline=None)
@given(_expressions(with_division=False), _expressions(with_division=False), _expressions(with_division=True))
def test_polynomial_identities_hold_structurally(a, b, c):
    e, f, g = _symbolic(a), _symbolic(b), _symbolic(c)
    assert e + f == f + e
    assert e * f == f * e
    assert e * (f + g) == e * f + e * g
    assert (e + g) - g == e
    assert e + e == 2 * e
    assert hash(e * (f + g)) == hash(e * f + e * g)
    assert e - e == 0


@settings(max_examples=200, deadline=None)
@given(_expressions(with_division=False), st.integers(1, 6), _envs)
def test_exact_multiples_divide_back(tree, c, env):
    e = _symbolic(tree)
    assert floordiv(c * e, c) == e
    assert mod(c * e, c) == 0
    assert evaluate(floordiv(c * e + (c - 1), c), env) == evaluate(e, env)
