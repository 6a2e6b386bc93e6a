"""The loop IR: construction checks, the printer (golden text) and the reference evaluator."""

import math

import numpy as np
import pytest

from relaybench.errors import CompileError, ExecutionError
from relaybench.te.loop_ir import (Allocate, Buffer, Call, For, FloatImm, IfThenElse, IntImm,
                                   LetStmt, Load, PrimFunc, Store, Var, call, cast, const,
                                   equal, evaluate, logical_not, max_expr, min_expr, select, seq,
                                   substitute, to_text)


def _loop(var, extent, body, kind="serial"):
    return For(var, 0, extent, kind, body)


def test_printer_golden_text():
    A = Buffer("A", (4, 8), "float32")
    T = Buffer("T", (8,), "float32")
    B = Buffer("B", (4,), "float32")
    i, j, x = Var("i"), Var("j"), Var("x", "float32")
    body = _loop(i, 4, seq(
        _loop(j, 8, Store(T, (j,), Load(A, (i, j)) * 2.0), "vectorized"),
        LetStmt(x, Load(T, (0,)), IfThenElse(Load(T, (1,)) > x,
                                             Store(B, (i,), x - (Load(T, (1,)) - 1.0)),
                                             Store(B, (i,), call("exp", -x)))),
    ), "parallel")
    func = PrimFunc("kernel", (A, B), Allocate(T, body))
    assert str(func) == (
        'def kernel(A: Buffer((4, 8), "float32"), B: Buffer((4,), "float32")):\n'
        '    T = allocate((8,), "float32")\n'
        '    for i in parallel(4):\n'
        '        for j in vectorized(8):\n'
        '            T[j] = A[i, j] * 2.0\n'
        '        x = T[0]\n'
        '        if T[1] > x:\n'
        '            B[i] = x - (T[1] - 1.0)\n'
        '        else:\n'
        '            B[i] = exp(-x)'
    )


def test_printer_precedence_and_functions():
    i, j = Var("i"), Var("j")
    assert to_text((i + j) * (i - j)) == "(i + j) * (i - j)"
    assert to_text(i - (j - 1)) == "i - (j - 1)"
    assert to_text(i * j + i // j % 3) == "i * j + i // j % 3"
    assert to_text(min_expr(i, j) + max_expr(i, 2)) == "min(i, j) + max(i, 2)"
    assert to_text(select((i < j) & logical_not(equal(i, 0)), i, j)) == \
        "select(i < j and not i == 0, i, j)"
    assert to_text(cast("float32", i)) == "float32(i)"
    assert to_text(const(2.5, "float64")) == "float64(2.5)"
    loop = For(i, 2, 3, "unrolled", Store(Buffer("X", (5,), "int64"), (i,), i))
    assert to_text(loop) == "for i in unrolled(2, 5):\n    X[i] = i"


def test_constant_folding_of_index_arithmetic():
    i = Var("i")
    assert isinstance(const(3) * 4 + 1, IntImm) and (const(3) * 4 + 1).value == 13
    assert (i * 1 + 0) is i
    assert to_text(substitute(i * 4 + 2, {i: const(5)})) == "22"


def test_evaluator_runs_every_statement_kind():
    n = 5
    X = Buffer("X", (n,), "float32")
    Y = Buffer("Y", (n,), "float32")
    T = Buffer("T", (n,), "float32")
    i, j, t = Var("i"), Var("j"), Var("t", "float32")
    body = Allocate(T, seq(
        _loop(i, n, Store(T, (i,), call("sqrt", Load(X, (i,)))), "vectorized"),
        _loop(j, n, LetStmt(t, Load(T, (j,)) + 1.0, IfThenElse(
            (j % 2) < 1, Store(Y, (j,), t * t), Store(Y, (j,), select(t > 2.0, t, -t)))),
            "parallel"),
    ))
    x = np.array([0, 1, 4, 9, 16], "float32")
    y = np.zeros(n, "float32")
    evaluate(PrimFunc("k", (X, Y), body), x, y)
    t_ref = np.sqrt(x) + 1
    expected = np.where(np.arange(n) % 2 == 0, t_ref * t_ref, np.where(t_ref > 2, t_ref, -t_ref))
    np.testing.assert_allclose(y, expected, rtol=1e-6)


def test_evaluator_flat_index_and_integer_semantics():
    A = Buffer("A", (3, 4), "int32")
    B = Buffer("B", (12,), "int64")
    f = Var("f")
    body = _loop(f, 12, Store(B, (f,), cast("int64", Load(A, (f,))) * 10 + (f - 7) // 3
                               + (f - 7) % 3))
    a = np.arange(12, dtype="int32").reshape(3, 4) * 2
    b = np.zeros(12, "int64")
    evaluate(PrimFunc("flat", (A, B), body), a, b)
    ff = np.arange(12)
    np.testing.assert_array_equal(b, a.reshape(-1) * 10 + (ff - 7) // 3 + (ff - 7) % 3)


@pytest.mark.parametrize("name,reference", [
    ("exp", np.exp), ("log", np.log), ("tanh", np.tanh), ("sqrt", np.sqrt),
    ("erf", np.vectorize(math.erf)), ("sigmoid", lambda v: 1 / (1 + np.exp(-v))),
    ("rsqrt", lambda v: 1 / np.sqrt(v)), ("floor", np.floor), ("abs", np.abs),
])
def test_intrinsics_match_numpy(name, reference):
    X = Buffer("X", (6,), "float32")
    Y = Buffer("Y", (6,), "float32")
    i = Var("i")
    func = PrimFunc(name, (X, Y), _loop(i, 6, Store(Y, (i,), call(name, Load(X, (i,))))))
    x = np.linspace(0.25, 3.0, 6).astype("float32")
    y = np.zeros(6, "float32")
    evaluate(func, x, y)
    np.testing.assert_allclose(y, reference(x.astype("float64")), rtol=1e-5)


def test_float32_arithmetic_stays_float32():
    X = Buffer("X", (1,), "float32")
    i = Var("i")
    # 16777216 + 1 is not representable in float32: the sum rounds back.
    func = PrimFunc("r", (X,), _loop(i, 1, Store(X, (i,), Load(X, (i,)) + 1.0 - 16777216.0)))
    x = np.array([16777216.0], "float32")
    evaluate(func, x)
    assert x[0] == np.float32(16777216.0) + np.float32(1.0) - np.float32(16777216.0)


def test_construction_errors_name_the_place():
    A = Buffer("A", (2, 2), "float32")
    i = Var("i")
    with pytest.raises(CompileError, match="'\\+' between float32 and int64"):
        Load(A, (i, i)) + i
    with pytest.raises(CompileError, match="use '//'"):
        i / 2
    with pytest.raises(CompileError, match="load of A: 3 indices"):
        Load(A, (i, i, i))
    with pytest.raises(CompileError, match="loop i: unknown kind 'threaded'"):
        For(i, 0, 2, "threaded", Store(A, (i, i), 0.0))
    with pytest.raises(CompileError, match="unknown intrinsic 'expp'"):
        call("expp", FloatImm(1.0))
    with pytest.raises(CompileError, match=r"store to A \(float32\) of a int64 value i \+ 1"):
        Store(A, (i, i), i + 1)
    with pytest.raises(CompileError, match="loop x: the loop variable is float32"):
        For(Var("x", "float32"), 0, 2, "serial", Store(A, (i, i), 0.0))
    with pytest.raises(CompileError, match="truth value"):
        bool(i < 2)
    assert isinstance(call("exp", FloatImm(1.0)), Call)


def test_evaluator_checks_arrays_and_bounds():
    A = Buffer("A", (3,), "float32")
    i = Var("i")
    func = PrimFunc("oob", (A,), _loop(i, 4, Store(A, (i,), 1.0)))
    with pytest.raises(ExecutionError, match=r"oob: store A\[3\] is out of bounds"):
        evaluate(func, np.zeros(3, "float32"))
    with pytest.raises(ExecutionError, match=r"oob: A expects float32\[3\], given float64\[3\]"):
        evaluate(func, np.zeros(3, "float64"))
    with pytest.raises(ExecutionError, match="1 arrays expected"):
        evaluate(func)
    unbound = PrimFunc("u", (A,), Store(A, (0,), cast("float32", Var("q"))))
    with pytest.raises(CompileError, match="variable q"):
        evaluate(unbound, np.zeros(3, "float32"))


def test_8_bit_and_bool_temporaries_evaluate():
    # a temporary of a narrow dtype: written, then read back (its initial marker must fit the dtype)
    from relaybench.te import loop_ir as L

    for dtype, values in (("int8", [-3, 0, 7, 100]), ("uint8", [0, 1, 200, 255]), ("bool", [True, False, True, True])):
        a = L.Buffer("A", (4,), dtype)
        out = L.Buffer("Out", (4,), dtype)
        tmp = L.Buffer("T", (4,), dtype)
        i, j = L.Var("i"), L.Var("j")
        body = L.Allocate(tmp, L.SeqStmt((
            L.For(i, L.IntImm(0), L.IntImm(4), "serial", L.Store(tmp, (i,), L.Load(a, (i,), dtype))),
            L.For(j, L.IntImm(0), L.IntImm(4), "serial", L.Store(out, (j,), L.Load(tmp, (j,), dtype))),
        )))
        func = L.PrimFunc("copy_" + dtype, (a, out), body)
        src = np.array(values, dtype=dtype)
        dst = np.zeros(4, dtype=dtype)
        L.evaluate(func, src, dst)
        np.testing.assert_array_equal(dst, src)


def test_to_text_of_shared_subexpressions_matches_the_tree():
    """A subexpression read by several parents prints once per use, the same text as when
    each use is its own node (the printer remembers shared nodes within one printing)."""
    from relaybench.te import loop_ir as L
    A = L.Buffer("A", (8,), "float32")
    out = L.Buffer("out", (8,), "float32")
    i = L.Var("i")

    def value(shared: bool):
        load = L.Load(A, (i * 2 - 1,))
        part = (load + load) * (load if shared else L.Load(A, (i * 2 - 1,)))
        return part - (part if shared else (L.Load(A, (i * 2 - 1,)) + load) * load)

    def func(shared):
        body = L.For(i, L.const(1), L.const(3), "serial", L.Store(out, (i,), value(shared)))
        return L.PrimFunc("f", (A, out), body)
    text = L.to_text(func(True))
    assert text == L.to_text(func(False))
    assert "out[i] = (A[i * 2 - 1] + A[i * 2 - 1]) * A[i * 2 - 1] - " in text
    assert "for i in serial(1, 4):" in text
