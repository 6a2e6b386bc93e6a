"""Vectorized loops in the OpenCL code generator: a ``vectorized`` loop of 2, 3, 4, 8 or 16 lanes
around one store becomes a vector store (``float4``...), each load along the same axis a vector
load, the arithmetic vector arithmetic, and whatever moves otherwise with the lane a vector built
lane by lane. Every kernel runs on the device against numpy; the text shows which form each
access took. All the kernels are built as one program, once per session."""

import numpy as np
import pytest

from relaybench import te
from relaybench.backends.opencl import generate
from relaybench.backends.strategy import gpu
from relaybench.te import loop_ir as L

from _opencl_cases import build_cases, run_case

RNG = np.random.default_rng(7)


def _spread(s, out, lanes, threads=8):
    """Fuse ``out``'s axes, ``lanes`` neighbouring elements per work item (vectorized)."""
    stage = s[out]
    fused = out.op.axis[0]
    for axis in out.op.axis[1:]:
        fused = stage.fuse(fused, axis)
    outer, lane = stage.split(fused, lanes)
    stage.vectorize(lane)
    block, thread = stage.split(outer, threads)
    stage.bind(block, "blockIdx.x")
    stage.bind(thread, "threadIdx.x")


def _bias_relu(dtype="float32", lanes=4):
    X = te.placeholder((2, 8, 6, 4), dtype, name="X")
    B = te.placeholder((8,), dtype, name="B")
    Y = te.compute(X.shape, lambda n, c, h, w: te.maximum(X[n, c, h, w] + B[c], L.const(0.0, dtype)),
                   name="Y")
    s = te.create_schedule(Y)
    _spread(s, Y, lanes)
    x = RNG.standard_normal(X.shape).astype(dtype)
    x[0, 0, 0, :3] = np.nan        # NaN propagates through max, lane by lane
    b = RNG.standard_normal(8).astype(dtype)
    return te.lower(s, [X, B], name=f"bias_relu_{dtype}"), [x, b], \
        np.maximum(x + b[None, :, None, None], 0)


def _shifted():
    """``Y[i] = X[i + 1] * 2``: the first lane's offset is not a multiple of 4 (vload4)."""
    X = te.placeholder((36,), name="X")
    Y = te.compute((32,), lambda i: X[i + 1] * 2.0, name="Y")
    s = te.create_schedule(Y)
    _spread(s, Y, 4)
    x = RNG.standard_normal(36).astype("float32")
    return te.lower(s, [X], name="shifted"), [x], x[1:33] * 2


def _transposed():
    """``Y[i, j] = X[j, i] + 1``: X moves by a row per lane, a vector built lane by lane."""
    X = te.placeholder((8, 4), name="X")
    Y = te.compute((4, 8), lambda i, j: X[j, i] + 1.0, name="Y")
    s = te.create_schedule(Y)
    _spread(s, Y, 4)
    x = RNG.standard_normal((8, 4)).astype("float32")
    return te.lower(s, [X], name="transposed"), [x], x.T + 1


def _alternating():
    """A condition that depends on the lane: the select is built lane by lane."""
    X = te.placeholder((32,), name="X")
    Y = te.compute((32,), lambda i: te.if_then_else(L.equal(i % 2, 0), X[i], -X[i]), name="Y")
    s = te.create_schedule(Y)
    _spread(s, Y, 8, threads=4)
    x = RNG.standard_normal(32).astype("float32")
    return te.lower(s, [X], name="alternating"), [x], np.where(np.arange(32) % 2 == 0, x, -x)


def _grouped():
    """``Y[i] = S[i // 4] * 2``: the lanes of a work item read one element of S (a scalar that
    depends on the loop's variable but not on the lane), widened for the store."""
    S = te.placeholder((8,), name="S")
    Y = te.compute((32,), lambda i: S[i // 4] * 2.0, name="Y")
    s = te.create_schedule(Y)
    _spread(s, Y, 4)
    x = RNG.standard_normal(8).astype("float32")
    return te.lower(s, [S], name="grouped"), [x], np.repeat(x, 4) * 2


def _widened():
    """float32 -> float64 and exp, 2 lanes of double."""
    X = te.placeholder((16,), name="X")
    Y = te.compute((16,), lambda i: te.exp(L.cast("float64", X[i])), name="Y")
    s = te.create_schedule(Y)
    _spread(s, Y, 2)
    x = RNG.uniform(-3, 3, 16).astype("float32")
    return te.lower(s, [X], name="widened"), [x], np.exp(x.astype("float64"))


def _three_lanes():
    X = te.placeholder((4, 3), name="X")
    Y = te.compute((4, 3), lambda i, j: te.sqrt(X[i, j]) * X[i, 0], name="Y")
    s = te.create_schedule(Y)
    s[Y].bind(Y.op.axis[0], "threadIdx.x")
    s[Y].vectorize(Y.op.axis[1])
    x = RNG.uniform(0.5, 3, (4, 3)).astype("float32")
    return te.lower(s, [X], name="three_lanes"), [x], np.sqrt(x) * x[:, :1]


def _accumulated():
    """A matrix product with the output columns vectorized: ``fma`` on float8."""
    A = te.placeholder((4, 6), name="A")
    B = te.placeholder((6, 8), name="B")
    k = te.reduce_axis(6, name="k")
    C = te.compute((4, 8), lambda i, j: te.sum(A[i, k] * B[k, j], axis=[k]), name="C")
    s = te.create_schedule(C)
    i, j = C.op.axis
    s[C].reorder(i, k, j)
    s[C].bind(i, "threadIdx.x")
    s[C].vectorize(j)
    a = RNG.standard_normal((4, 6)).astype("float32")
    b = RNG.standard_normal((6, 8)).astype("float32")
    return te.lower(s, [A, B], name="accumulated"), [a, b], a @ b


def _scattered():
    """The store itself moves by a row per lane: no vector, a loop in each work item."""
    X = te.placeholder((4, 8), name="X")
    Y = te.compute((8, 4), lambda i, j: X[j, i] * 3.0, name="Y")
    s = te.create_schedule(Y)
    i, j = Y.op.axis
    s[Y].reorder(j, i)
    s[Y].bind(j, "threadIdx.x")
    s[Y].vectorize(i)
    x = RNG.standard_normal((4, 8)).astype("float32")
    return te.lower(s, [X], name="scattered"), [x], x.T * 3


CASES = {name: make() for name, make in [
    ("bias_relu_float32", _bias_relu), ("bias_relu_float64", lambda: _bias_relu("float64", 2)),
    ("shifted", _shifted), ("transposed", _transposed), ("alternating", _alternating),
    ("widened", _widened), ("grouped", _grouped), ("three_lanes", _three_lanes), ("accumulated", _accumulated),
    ("scattered", _scattered)]}

# what each kernel's text shows
TEXT = {
    "bias_relu_float32": ["*((__global float4*)(Y + ", "*((__global const float4*)(X + ",
                          "rb_max_float4("],
    "bias_relu_float64": ["*((__global double2*)(Y + ", "rb_max_double2("],
    "shifted": ["vload4(0, (X + ", "*((__global float4*)(Y + "],
    "transposed": ["((float4)(X["],
    "alternating": ["((float8)("],
    "widened": ["convert_double2(", "exp(convert_double2("],
    "grouped": ["*((__global float4*)(Y + ", "= ((float4)((S["],
    "three_lanes": ["vstore3(", "sqrt(vload3(0, "],
    "accumulated": ["fma(((float8)(A[", "*((__global const float8*)(B + "],
    "scattered": ["for ("],
}


@pytest.fixture(scope="session")
def kernels(target):
    return build_cases(CASES, target)


@pytest.mark.parametrize("name", sorted(CASES))
def test_vector_kernel_agrees_with_numpy(kernels, name):
    out, expected = run_case(kernels[name], CASES[name])
    rtol = 1e-12 if out.dtype == np.float64 else 2e-6
    np.testing.assert_allclose(out, expected, rtol=rtol, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("name", sorted(CASES))
def test_vector_kernel_text(name):
    text = generate(CASES[name][0]).text
    for part in TEXT[name]:
        assert part in text, f"{part!r} not in\n{text}"
    if name not in ("scattered", "accumulated"):   # their loops are not vectorized ones
        assert "for (" not in text.split("__kernel")[1], text


def test_the_flattened_offset_of_a_fused_index_is_the_fused_index():
    """The store of a fused and split NCHW loop reads back to ``block * 32 * 4 + thread * 4``:
    the ``//`` and ``%`` that split the fused index into axes cancel when it is flattened."""
    body = generate(CASES["bias_relu_float32"][0]).text.split("__kernel")[1]
    assert ("(Y + ((n_c_fused_h_fused_w_fused_outer_outer * 32) + "
            "(n_c_fused_h_fused_w_fused_outer_inner * 4)))") in body, body
    assert "/ 192" not in body and "% 6" not in body


def test_injective_rule_takes_vectors_where_the_inner_axis_allows(monkeypatch):
    """The GPU strategy's elementwise rule: 4 lanes where they divide the innermost axis
    (``RB_GPU_VECTOR``), one element per work item elsewhere and for integer outputs."""
    def rule_loops(shape, dtype="float32"):
        X = te.placeholder(shape, dtype, name="X")
        Y = te.compute(shape, lambda *i: X[i] + X[i], name="Y")
        s = te.create_schedule(Y)
        gpu.schedule_injective(s, Y.op, vector=True)
        return str(te.lower(s, [X], name="f"))
    assert "vectorized(4)" in rule_loops((2, 8, 12))
    assert "vectorized" not in rule_loops((2, 8, 7))
    assert "vectorized" not in rule_loops((2, 8, 12), "int32")
    from relaybench import config
    with config.Context(RB_GPU_VECTOR=8):
        assert "vectorized(8)" in rule_loops((2, 8, 16))
    with config.Context(RB_GPU_VECTOR=1):
        assert "vectorized" not in rule_loops((2, 8, 16))
    with config.Context(RB_GPU_VECTOR=3):
        with pytest.raises(Exception, match="RB_GPU_VECTOR=3: expected one of 1, 2, 4, 8, 16"):
            rule_loops((2, 8, 12))
