"""The OpenCL code generator, scalar by scalar: every operator, intrinsic and cast of the loop IR
run on the device against numpy (or the loop IR's evaluator, the semantics), the GPU constructs
(bound loops, shared buffers, barriers), and the errors for what cannot run on a device.

All the scalar kernels are built as one program, once per session."""

import math

import numpy as np
import pytest

from relaybench import te
from relaybench.backends.opencl import (DeviceFeatures, build_kernel, generate,
                                        program_text)
from relaybench.errors import CompileError, ExecutionError
from relaybench.ir.types import convert_values
from relaybench.te import loop_ir as L

from _opencl_cases import build_cases, run_case

N = 32


def _elementwise(name, in_dtypes, fn, n=N, threads=16):
    """``y[i] = fn(x0[i], x1[i], ...)`` with one element per work item."""
    xs = [te.placeholder((n,), dt, name=f"x{k}") for k, dt in enumerate(in_dtypes)]
    y = te.compute((n,), lambda i: fn(*[x[i] for x in xs]), name="y")
    s = te.create_schedule(y)
    bx, tx = s[y].split(y.op.axis[0], threads)
    s[y].bind(bx, "blockIdx.x")
    s[y].bind(tx, "threadIdx.x")
    return te.lower(s, xs, name=name)


def _ints(dtype, values):
    out = np.resize(np.asarray(values, dtype=np.int64), N)
    return out.astype(dtype)


INT32_MIN, INT32_MAX = np.iinfo("int32").min, np.iinfo("int32").max
_A = [-7, -6, -1, 0, 1, 5, 7, INT32_MIN, INT32_MIN, INT32_MAX, 9, -9, 3, -3, 100, -100]
_B = [2, -2, 3, -3, 0, 4, -4, -1, 1, -1, 0, 5, -5, 7, 3, 3]

# name -> (PrimFunc, inputs, expected output computed independently)
CASES = {}


def _case(name, in_dtypes, fn, inputs, expected):
    CASES[name] = (_elementwise(name, in_dtypes, fn), inputs, expected)


def _build_cases():
    for dt in ("int32", "int8", "int64", "uint8"):
        a = _ints(dt, [v for v in _A]) if dt in ("int32", "int64") else \
            _ints(dt, [v % 256 if dt == "uint8" else (v + 128) % 256 - 128 for v in _A])
        b = _ints(dt, [v % 256 if dt == "uint8" else v for v in _B])
        with np.errstate(all="ignore"):
            _case(f"floordiv_{dt}", [dt, dt], lambda x, y: x // y, [a, b],
                  np.floor_divide(a, b))
            _case(f"floormod_{dt}", [dt, dt], lambda x, y: x % y, [a, b], np.mod(a, b))
            _case(f"wrap_add_mul_{dt}", [dt, dt], lambda x, y: x * y + x, [a, b],
                  (a * b + a).astype(dt))
    a = _ints("int32", _A)
    with np.errstate(all="ignore"):
        _case("neg_int32", ["int32"], lambda x: -x, [a], (-a).astype("int32"))
    amounts = _ints("int32", [-2, -1, 0, 1, 5, 31, 32, 40])
    values = _ints("int32", [-5, 7, INT32_MIN, 1, -1, 3, -8, 12345])
    for op in ("<<", ">>"):
        func = _elementwise(f"shift_{'l' if op == '<<' else 'r'}",
                            ["int32", "int32"],
                            (lambda x, y: x << y) if op == "<<" else (lambda x, y: x >> y))
        expected = np.zeros(N, "int32")
        L.evaluate(func, values, amounts, expected)   # the loop IR's semantics (numpy's)
        CASES[func.name] = (func, [values, amounts], expected)
    u = _ints("uint8", [1, 200, 255, 0, 7, 128, 3, 9])
    ushift = _ints("uint8", [0, 1, 7, 8, 9, 255, 3, 2])
    func = _elementwise("shift_r_uint8", ["uint8", "uint8"], lambda x, y: x >> y)
    expected = np.zeros(N, "uint8")
    L.evaluate(func, u, ushift, expected)
    CASES[func.name] = (func, [u, ushift], expected)

    special = np.resize(np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 2.7, -2.7, 300.0, -1.0,
                                  1e19, 2.0 ** 63, 255.9, -129.0, 0.5, -0.0, 65536.5],
                                 "float32"), N)
    for dt in ("int32", "int8", "uint8", "int16", "uint32", "int64", "uint64"):
        _case(f"cast_float32_{dt}", ["float32"], lambda x, dt=dt: te.cast(dt, x), [special],
              convert_values(special, dt))
    wide = special.astype("float64")
    _case("cast_float64_int32", ["float64"], lambda x: te.cast("int32", x), [wide],
          convert_values(wide, "int32"))
    _case("cast_int32_float32", ["int32"], lambda x: te.cast("float32", x),
          [_ints("int32", [16777217, -16777219, INT32_MAX, INT32_MIN, 3, -3, 0, 7])],
          _ints("int32", [16777217, -16777219, INT32_MAX, INT32_MIN, 3, -3, 0, 7])
          .astype("float32"))
    _case("cast_float32_bool", ["float32"], lambda x: te.cast("bool", x), [special],
          special.astype(bool))

    rng = np.random.default_rng(0)
    f = rng.standard_normal(N).astype("float32")
    g = rng.standard_normal(N).astype("float32")
    f[:4] = [np.nan, 1.0, np.nan, -0.0]
    g[:4] = [1.0, np.nan, np.nan, 0.0]
    _case("nan_max", ["float32", "float32"], te.maximum, [f, g], np.maximum(f, g))
    _case("nan_min", ["float32", "float32"], te.minimum, [f, g], np.minimum(f, g))
    halves = np.resize(np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.49, -3.51], "float32"), N)
    _case("round_half_even", ["float32"], te.round, [halves], np.round(halves))
    with np.errstate(invalid="ignore"):
        _case("fmod", ["float32", "float32"], te.fmod, [f * 10, g], np.fmod(f * 10, g))
    x = rng.uniform(-4, 4, N).astype("float32")
    _case("sigmoid", ["float32"], te.sigmoid, [x], (1 / (1 + np.exp(-x.astype("float64"))))
          .astype("float32"))
    _case("erf", ["float32"], te.erf, [x], np.array([math.erf(v) for v in x], "float32"))
    _case("tanh", ["float32"], te.tanh, [x], np.tanh(x))
    _case("exp_float64", ["float64"], te.exp, [x.astype("float64")], np.exp(x.astype("float64")))
    _case("compare_to_bool", ["float32", "float32"], lambda a, b: L.logical_and(a < b, b > 0.0),
          [f, g], (f < g) & (g > 0))
    flags = (np.arange(N) % 3 == 0)
    _case("bool_not", ["bool"], L.logical_not, [flags], ~flags)
    _case("int_abs", ["int32"], te.abs, [a], np.abs(a))


_build_cases()


@pytest.fixture(scope="session")
def kernels(target):
    """Every case's kernel, built as one program."""
    return build_cases(CASES, target)


@pytest.mark.parametrize("name", sorted(CASES))
def test_scalar_semantics(kernels, name):
    out, expected = run_case(kernels[name], CASES[name])
    if out.dtype.kind == "f":
        np.testing.assert_allclose(out, expected, rtol=2e-6, atol=1e-7, equal_nan=True)
    else:
        np.testing.assert_array_equal(out, expected)


def test_select_does_not_load_the_side_not_chosen(target):
    """``y[i] = x[i] if i < 4 else 0``: x has 4 elements, y 64; the load of x[i] for i >= 4 is
    never made (a read past the end could fault or read garbage)."""
    x = te.placeholder((4,), name="x")
    y = te.compute((64,), lambda i: te.if_then_else(i < 4, x[i], -1.0), name="y")
    s = te.create_schedule(y)
    s[y].bind(y.op.axis[0], "threadIdx.x")
    func = te.lower(s, [x], name="pad_tail")
    kernel = build_kernel(func, target)
    out = np.zeros(64, "float32")
    kernel(np.arange(1, 5, dtype="float32"), out)
    np.testing.assert_array_equal(out, np.r_[np.arange(1, 5), np.full(60, -1.0)])


def _mirror_shared():
    """``Y[i, j] = A[i, j] + A[i, 39 - j]``: each work item reads what another one copied."""
    A = te.placeholder((6, 40), name="A")
    Y = te.compute((6, 40), lambda i, j: A[i, j] + A[i, 39 - j], name="Y")
    s = te.create_schedule(Y)
    AS = s.cache_read(A, "shared", [Y])
    s[Y].bind(Y.op.axis[0], "blockIdx.x")
    s[Y].bind(Y.op.axis[1], "threadIdx.x")
    s[AS].compute_at(s[Y], Y.op.axis[0])
    s[AS].bind(AS.op.axis[1], "threadIdx.x")
    return te.lower(s, [A], name="mirror_shared")


def test_shared_tile_and_barrier(target):
    """A row copied into ``__local`` memory by 40 work items together, a barrier, then each
    work item reads its own element and its mirror image's (no barrier after the use: each
    work group runs one row)."""
    func = _mirror_shared()
    code = generate(func)
    assert "__local float A_shared[40];" in code.text
    assert code.text.count("barrier(CLK_LOCAL_MEM_FENCE);") == 1
    assert code.kernels[0].global_size == (240, 1, 1)
    assert code.kernels[0].local_size == (40, 1, 1)
    a = np.random.default_rng(1).standard_normal((6, 40)).astype("float32")
    out = np.zeros((6, 40), "float32")
    build_kernel(func, target)(a, out)
    np.testing.assert_array_equal(out, a + a[:, ::-1])


def test_reduction_outside_thread_loops_runs_once(target):
    """``cache_read``'s example: each row copied into ``__local`` memory by 40 work items, then
    summed outside any thread loop. Every work item computes the sum; the first one stores it
    (all 40 adding into one element would race)."""
    A = te.placeholder((6, 40), name="A")
    k = te.reduce_axis(40, name="k")
    S = te.compute((6,), lambda i: te.sum(A[i, k], axis=[k]), name="S")
    s = te.create_schedule(S)
    AS = s.cache_read(A, "shared", [S])
    s[S].bind(S.op.axis[0], "blockIdx.x")
    s[AS].compute_at(s[S], S.op.axis[0])
    s[AS].bind(AS.op.axis[1], "threadIdx.x")
    func = te.lower(s, [A], name="row_sum")
    assert "if (get_local_id(0) == 0) S[i] = 0.0f;" in generate(func).text
    a = np.random.default_rng(2).standard_normal((6, 40)).astype("float32")
    out = np.zeros(6, "float32")
    build_kernel(func, target)(a, out)
    np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_root_stages_are_separate_launches():
    """A reduction read by a later stage is a launch of its own (the end of a launch is the only
    barrier between work groups); the temporary is a buffer passed to both."""
    X = te.placeholder((4, 8), name="X")
    k = te.reduce_axis(8, name="k")
    M = te.compute((4,), lambda i: te.max(X[i, k], axis=[k]), name="M")
    Y = te.compute((4, 8), lambda i, j: X[i, j] - M[i], name="Y")
    s = te.create_schedule(Y)
    s[M].bind(M.op.axis[0], "threadIdx.x")
    s[Y].bind(Y.op.axis[0], "blockIdx.x")
    s[Y].bind(Y.op.axis[1], "threadIdx.x")
    code = generate(te.lower(s, [X], name="center"))
    assert [k.name for k in code.kernels] == ["center__0", "center__1"]
    assert [b.name for b in code.temporaries] == ["M"]
    assert "__global float* restrict M" in code.text


def test_index_arithmetic_is_32_bit_where_it_fits(target):
    """A row split in two and mirrored: the loop variables are ``int``, the index arithmetic
    has no 64-bit literal, and the floor division and modulo of the fused axis (never negative,
    by a positive constant) are C's ``/`` and ``%``; the result is numpy's."""
    A = te.placeholder((6, 40), name="A")
    Y = te.compute((6, 40), lambda i, j: A[i, 39 - j] * 2.0, name="Y")
    s = te.create_schedule(Y)
    fused = s[Y].fuse(*Y.op.axis)
    block, thread = s[Y].split(fused, 16)
    s[Y].bind(block, "blockIdx.x")
    s[Y].bind(thread, "threadIdx.x")
    func = te.lower(s, [A], name="mirror")
    text = generate(func).text
    kernel_text = text[text.index("__kernel"):]
    assert "const int" in kernel_text and "long" not in kernel_text
    assert "rb_floordiv" not in text and "rb_floormod" not in text
    assert " / 40)" in kernel_text and " % 40)" in kernel_text
    a = np.random.default_rng(3).standard_normal((6, 40)).astype("float32")
    out = np.zeros((6, 40), "float32")
    build_kernel(func, target)(a, out)
    np.testing.assert_array_equal(out, a[:, ::-1] * 2)


def test_index_values_beyond_int32_keep_64_bits(target):
    """Values computed from indices: ``i * 10**9`` leaves int32 and stays 64-bit (8 values up
    to 7e9); ``(i - 4) // 3`` and ``% 3`` of negative dividends stay floor division (numpy's
    answers, not C's truncation) in ``int``."""
    big = te.compute((8,), lambda i: i * 1_000_000_000, name="big")
    s = te.create_schedule(big)
    s[big].bind(big.op.axis[0], "threadIdx.x")
    func = te.lower(s, [], name="big")
    assert "1000000000L" in generate(func).text
    out = np.zeros(8, "int64")
    build_kernel(func, target)(out)
    np.testing.assert_array_equal(out, np.arange(8, dtype="int64") * 1_000_000_000)

    q = te.compute((8, 2), lambda i, k: te.if_then_else(k < 1, (i - 4) // 3, (i - 4) % 3),
                   name="q")
    s = te.create_schedule(q)
    s[q].bind(q.op.axis[0], "threadIdx.x")
    func = te.lower(s, [], name="floors")
    text = generate(func).text
    assert "(int)rb_floordiv_long" in text and "(int)rb_floormod_long" in text
    out = np.zeros((8, 2), "int64")
    build_kernel(func, target)(out)
    i = np.arange(8, dtype="int64") - 4
    np.testing.assert_array_equal(out, np.stack([i // 3, i % 3], axis=1))


def _loop(var, kind, body, extent=8):
    return L.For(var, 0, extent, kind, body)


def test_barrier_inside_a_guarded_thread_loop_is_refused():
    """Work items 8..15 skip the loop of 8 and would never reach its barrier."""
    A = L.Buffer("A", (16,), "float32")
    sh = L.Buffer("T", (8,), "float32", "shared")
    t, u = L.Var("t"), L.Var("u")
    body = L.Allocate(sh, L.seq(
        _loop(t, "threadIdx.x", L.seq(L.Store(sh, (t,), L.Load(A, (t,))),
                                      L.Barrier(), L.Store(A, (t,), 1.0))),
        _loop(u, "threadIdx.x", L.Store(A, (u,), 2.0), extent=16)))
    with pytest.raises(CompileError, match="barrier inside a guarded loop bound to threads"):
        generate(L.PrimFunc("bad_barrier", (A,), body))


def test_barrier_and_rebound_thread_loop_inside_a_thread_loop():
    """Every work item reaches a barrier in an unguarded thread loop; a loop bound to the same
    axis inside it is each work item's share (here: the tile's fill), and one that reads the
    outer loop's variable is refused."""
    A, B = L.Buffer("A", (8,), "float32"), L.Buffer("B", (8,), "float32")
    sh = L.Buffer("T", (8,), "float32", "shared")
    t, f = L.Var("t"), L.Var("f")
    fill = _loop(f, "threadIdx.x", L.Store(sh, (f,), L.Load(A, (f,))))
    body = _loop(t, "threadIdx.x", L.Allocate(sh, L.seq(
        fill, L.Barrier(), L.Store(B, (t,), L.Load(sh, ((t + 1) % 8,))))))
    func = L.PrimFunc("rotate", (A, B), body)
    kernel = generate(func).text.split("__kernel")[1]
    assert "__local float T[8];" in kernel
    assert kernel.count("get_local_id(0)") == 2 and "barrier(CLK_LOCAL_MEM_FENCE);" in kernel
    x, y = np.arange(8, dtype="float32"), np.zeros(8, "float32")
    L.evaluate(func, x, y)   # the loop IR's own meaning, which the device's agrees with
    np.testing.assert_array_equal(y, np.roll(x, -1))
    bad = _loop(t, "threadIdx.x", _loop(f, "threadIdx.x", L.Store(A, (f,), L.cast("float32", t))))
    with pytest.raises(CompileError, match="inside another loop bound to it, t, and reads t"):
        generate(L.PrimFunc("bad_rebind", (A,), bad))


def test_store_outside_the_bound_loops_is_made_once():
    """A store outside the thread loop, inside the group loop: the first work item makes it; one
    outside both: the first work item of the first group."""
    A = L.Buffer("A", (8,), "float32")
    t, b = L.Var("t"), L.Var("b")
    inner = L.seq(L.Store(A, (b,), 0.0), _loop(t, "threadIdx.x", L.Store(A, (t,), 1.0)))
    # one statement at the top, so one launch (a top-level sequence would be two)
    body = L.IfThenElse(L.const(True), L.seq(L.Store(A, (7,), 2.0),
                                             L.For(b, 0, 2, "blockIdx.x", inner)))
    text = generate(L.PrimFunc("once", (A,), body)).text
    assert "if (get_local_id(0) == 0) A[b] = 0.0f;" in text
    assert "if (get_group_id(0) == 0 && get_local_id(0) == 0) A[7] = 2.0f;" in text


def test_float64_needs_fp64():
    func = _elementwise("double_it", ["float64"], lambda x: x * 2.0)
    with pytest.raises(CompileError, match=r"double_it: float64 needs the cl_khr_fp64 extension, "
                                           r"which the device tiny lacks"):
        generate(func, DeviceFeatures(name="tiny", fp64=False))


def test_work_group_larger_than_the_device_takes():
    func = _elementwise("wide", ["float32"], lambda x: x + 1.0, n=512, threads=512)
    with pytest.raises(CompileError, match=r"work groups of \(512, 1, 1\) work items; the device "
                                           r"small takes at most 256"):
        generate(func, DeviceFeatures(name="small", max_work_group_size=256))


def test_kernel_checks_arguments_before_launch(kernels):
    kernel = kernels["tanh"]
    with pytest.raises(ExecutionError, match=r"argument 'x0': wrong shape: expected "
                                             r"Tensor\[\(32,\), float32\], given "
                                             r"Tensor\[\(31,\), float32\]"):
        kernel(np.zeros(31, "float32"), np.zeros(32, "float32"))
    with pytest.raises(ExecutionError, match="argument 'y': wrong dtype"):
        kernel(np.zeros(32, "float32"), np.zeros(32, "float64"))


def test_program_text_shares_helpers():
    one = generate(_elementwise("a_max", ["float32", "float32"], te.maximum))
    two = generate(_elementwise("b_max", ["float32", "float32"], te.maximum))
    text = program_text([one, two])
    assert text.count("static inline float rb_max_float") == 1
    assert "__kernel void a_max" in text and "__kernel void b_max" in text
