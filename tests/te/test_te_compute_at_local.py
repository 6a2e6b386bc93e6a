"""compute_at into region-sized local buffers, scheduled attached stages, cache_write, prod.

Every kernel is checked against a numpy formula through the loop-IR evaluator (and, for the
register-tiled convolution, through the LLVM backend when llvmlite is installed).
"""

import importlib.util

import numpy as np
import pytest

from relaybench import te
from relaybench.errors import CompileError
from relaybench.te import loop_ir

RNG = np.random.default_rng(11)


def _run(func, *inputs):
    outputs = [np.zeros(p.shape, p.dtype) for p in func.params[len(inputs):]]
    te.evaluate(func, *inputs, *outputs)
    return outputs[0] if len(outputs) == 1 else outputs


def _lines(func):
    return [line.strip() for line in str(func).splitlines()]


def _allocations(stmt):
    """``(buffer, enclosing loop variable names)`` of every Allocate in ``stmt``."""
    found, stack = [], [(stmt, ())]
    while stack:
        node, loops = stack.pop()
        if isinstance(node, loop_ir.Allocate):
            found.append((node.buffer, loops))
            stack.append((node.body, loops))
        elif isinstance(node, loop_ir.For):
            stack.append((node.body, loops + (node.var.name,)))
        elif isinstance(node, loop_ir.SeqStmt):
            stack.extend((s, loops) for s in node.stmts)
        elif isinstance(node, loop_ir.IfThenElse):
            stack.append((node.then_case, loops))
            if node.else_case is not None:
                stack.append((node.else_case, loops))
        elif isinstance(node, loop_ir.LetStmt):
            stack.append((node.body, loops))
    return {buffer.name: (buffer, loops) for buffer, loops in found}


# ---------------------------------------------------------------- the register-tiled convolution

OCO, OCI, IC, H, W, K = 2, 16, 3, 4, 16, 3
OH, OW = H - K + 1, W - K + 1


def _conv_nchwc(relu=True):
    """out[oc_o, oh, ow, oc_i] = relu(sum data[ic, oh+kh, ow+kw] * w[oc_o, ic, kh, kw, oc_i])."""
    data = te.placeholder((IC, H, W), name="data")
    weight = te.placeholder((OCO, IC, K, K, OCI), name="weight")
    ic = te.reduce_axis(IC, name="ic")
    kh, kw = te.reduce_axis(K, name="kh"), te.reduce_axis(K, name="kw")
    conv = te.compute((OCO, OH, OW, OCI), lambda oc_o, oh, ow, oc_i: te.sum(
        data[ic, oh + kh, ow + kw] * weight[oc_o, ic, kh, kw, oc_i], axis=[ic, kh, kw]),
        name="conv")
    out = te.compute(conv.shape, lambda oc_o, oh, ow, oc_i: te.maximum(
        conv[oc_o, oh, ow, oc_i], 0.0), name="out")
    return data, weight, conv, out


def _conv_reference(d, w):
    windows = np.lib.stride_tricks.sliding_window_view(d, (K, K), axis=(1, 2))
    return np.maximum(np.einsum("cyxab,ocabi->oyxi", windows, w), 0.0)


def _register_tiled(parallel=False):
    data, weight, conv, out = _conv_nchwc()
    s = te.create_schedule(out)
    oc_o, _, ow, oc_i = out.op.axis
    ow_outer, _ = s[out].split(ow, 7)
    s[out].vectorize(oc_i)
    if parallel:
        s[out].parallel(oc_o)
    s[conv].compute_at(s[out], ow_outer)
    _, _, c_ow, c_oc_i = conv.op.axis
    ic, kh, kw = conv.op.reduce_axis
    s[conv].reorder(ic, kh, kw, c_ow, c_oc_i)
    s[conv].unroll(c_ow)
    s[conv].vectorize(c_oc_i)
    return te.lower(s, [data, weight], name="conv_tile"), data, weight


def test_register_tiled_conv_allocates_its_tile_inside_the_width_tile_loop():
    func, _, _ = _register_tiled()
    print(func)
    allocations = _allocations(func.body)
    buffer, loops = allocations["conv"]
    assert buffer.shape == (1, 1, 7, 16)
    assert loops == ("oc_o", "oh", "ow_outer")
    lines = _lines(func)
    at = lines.index('conv = allocate((1, 1, 7, 16), "float32")')
    # Init over the tile, then the reduction loops with the tile innermost, then the writeback.
    assert lines[at + 1:at + 4] == ["for conv_ow in unrolled(7):",
                                    "for conv_oc_i in vectorized(16):",
                                    "conv[0, 0, conv_ow, conv_oc_i] = 0.0"]
    assert lines[at + 4:at + 9] == ["for ic in serial(3):", "for kh in serial(3):",
                                    "for kw in serial(3):", "for conv_ow in unrolled(7):",
                                    "for conv_oc_i in vectorized(16):"]
    assert lines[at + 9].startswith("conv[0, 0, conv_ow, conv_oc_i] = conv[0, 0, conv_ow, "
                                    "conv_oc_i] + data[ic, oh + kh, ow_outer * 7 + conv_ow + kw]")
    assert lines[at + 10:] == ["for ow_inner in serial(7):", "for oc_i in vectorized(16):",
                               "out[oc_o, oh, ow_outer * 7 + ow_inner, oc_i] = "
                               "max(conv[0, 0, ow_inner, oc_i], 0.0)"]
    d = RNG.standard_normal((IC, H, W)).astype("float32")
    w = RNG.standard_normal((OCO, IC, K, K, OCI)).astype("float32")
    np.testing.assert_allclose(_run(func, d, w), _conv_reference(d, w), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("parallel", [False, True])
def test_register_tiled_conv_through_llvm(parallel):
    if importlib.util.find_spec("llvmlite") is None:
        pytest.skip("llvmlite is not installed (the llvm extra), so the LLVM backend is absent")
    from relaybench.backends.llvm import build_kernel

    func, _, _ = _register_tiled(parallel)
    kernel = build_kernel(func)
    d = RNG.standard_normal((IC, H, W)).astype("float32")
    w = RNG.standard_normal((OCO, IC, K, K, OCI)).astype("float32")
    y = np.zeros((OCO, OH, OW, OCI), "float32")
    kernel(d, w, y)
    np.testing.assert_allclose(y, _conv_reference(d, w), rtol=1e-4, atol=1e-4)


def test_padding_attached_at_the_row_loop_read_by_the_conv_attached_further_in():
    PH, PW = H + 2, W + 2
    data = te.placeholder((IC, H, W), name="data")
    weight = te.placeholder((OCO, IC, K, K, OCI), name="weight")
    pad = te.compute((IC, PH, PW), lambda c, y, x: te.if_then_else(
        (y >= 1) & (y < H + 1) & (x >= 1) & (x < W + 1), data[c, y - 1, x - 1], 0.0),
        name="pad")
    ic = te.reduce_axis(IC, name="ic")
    kh, kw = te.reduce_axis(K, name="kh"), te.reduce_axis(K, name="kw")
    conv = te.compute((OCO, H, W, OCI), lambda oc_o, oh, ow, oc_i: te.sum(
        pad[ic, oh + kh, ow + kw] * weight[oc_o, ic, kh, kw, oc_i], axis=[ic, kh, kw]),
        name="conv")
    out = te.compute(conv.shape, lambda oc_o, oh, ow, oc_i: te.maximum(
        conv[oc_o, oh, ow, oc_i], 0.0), name="out")
    s = te.create_schedule(out)
    _, oh, ow, oc_i = out.op.axis
    ow_outer, _ = s[out].split(ow, 8)
    s[pad].compute_at(s[out], oh)
    s[pad].vectorize(pad.op.axis[2])
    s[conv].compute_at(s[out], ow_outer)
    s[conv].reorder(ic, kh, kw, conv.op.axis[2], conv.op.axis[3])
    s[conv].vectorize(conv.op.axis[3])
    func = te.lower(s, [data, weight], name="padded_conv")
    allocations = _allocations(func.body)
    # Three padded rows (the kernel's height) of the whole padded width, per output row.
    assert allocations["pad"][0].shape == (IC, 3, PW)
    assert allocations["pad"][1] == ("oc_o", "oh")
    assert allocations["conv"][0].shape == (1, 1, 8, OCI)
    assert allocations["conv"][1] == ("oc_o", "oh", "ow_outer")
    # The conv reads the padded rows relative to the row: kh, not oh + kh.
    assert "pad[ic, kh, ow_outer * 8 + conv_ow + kw]" in str(func)
    d = RNG.standard_normal((IC, H, W)).astype("float32")
    w = RNG.standard_normal((OCO, IC, K, K, OCI)).astype("float32")
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(d, ((0, 0), (1, 1), (1, 1))),
                                                       (K, K), axis=(1, 2))
    expected = np.maximum(np.einsum("cyxab,ocabi->oyxi", windows, w), 0.0)
    np.testing.assert_allclose(_run(func, d, w), expected, rtol=1e-5, atol=1e-5)
    # The reader must be inside the producer's loop.
    s = te.create_schedule(out)
    ow_outer, _ = s[out].split(out.op.axis[2], 8)
    s[pad].compute_at(s[out], ow_outer)
    s[conv].compute_at(s[out], out.op.axis[1])
    with pytest.raises(CompileError, match="its reader conv is computed outside the ow_outer"):
        te.lower(s, [data, weight])


# ---------------------------------------------------------------- scheduled attached stages

def _matmul(n=4, m=32, l=5):
    A = te.placeholder((n, l), name="A")
    B = te.placeholder((l, m), name="B")
    k = te.reduce_axis(l, name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=[k]), name="C")
    a = RNG.standard_normal((n, l)).astype("float32")
    b = RNG.standard_normal((l, m)).astype("float32")
    return A, B, C, a, b


def test_cache_write_tile_of_accumulators_in_the_output_tile():
    A, B, C, a, b = _matmul()
    s = te.create_schedule(C)
    CL = s.cache_write(C)
    assert CL.name == "C_local" and s[C].op.inputs == (CL,)
    yo, yi = s[C].split(C.op.axis[1], 16)
    s[C].vectorize(yi)
    s[CL].compute_at(s[C], yo)
    (k,) = CL.op.reduce_axis
    i_c, j_c = CL.op.axis
    j_co, j_ci = s[CL].split(j_c, 8)
    s[CL].reorder(k, j_co, j_ci)
    s[CL].unroll(j_co)
    s[CL].vectorize(j_ci)
    func = te.lower(s, [A, B], name="matmul")
    print(func)
    assert [p.name for p in func.params] == ["A", "B", "C"]
    buffer, loops = _allocations(func.body)["C_local"]
    assert buffer.shape == (1, 16) and loops == ("i", "j_outer")
    lines = _lines(func)
    at = lines.index('C_local = allocate((1, 16), "float32")')
    assert lines[at + 1:at + 4] == ["for C_local_j_c_outer in unrolled(2):",
                                    "for C_local_j_c_inner in vectorized(8):",
                                    "C_local[0, C_local_j_c_outer * 8 + C_local_j_c_inner] = 0.0"]
    assert lines[at + 4:at + 7] == ["for k in serial(5):", "for C_local_j_c_outer in unrolled(2):",
                                    "for C_local_j_c_inner in vectorized(8):"]
    assert lines[-1] == "C[i, j_outer * 16 + j_inner] = C_local[0, j_inner]"
    np.testing.assert_allclose(_run(func, a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_cache_write_alone_and_its_errors():
    A, B, C, a, b = _matmul(3, 4, 2)
    s = te.create_schedule(C)
    CL = s.cache_write(C)
    func = te.lower(s, [A, B])
    assert _allocations(func.body)["C_local"][0].shape == (3, 4)
    np.testing.assert_allclose(_run(func, a, b), a @ b, rtol=1e-5, atol=1e-5)
    # Another schedule of the same tensors is unaffected.
    assert "C_local" not in str(te.lower(te.create_schedule(C), [A, B]))
    s = te.create_schedule(C)
    s[C].split(C.op.axis[0], 2)
    with pytest.raises(CompileError, match="cache_write of C: call it before scheduling"):
        s.cache_write(C)
    with pytest.raises(CompileError, match="cache_write of A: only a compute stage"):
        te.create_schedule(C).cache_write(A)
    del CL


def test_attached_stage_split_that_does_not_divide_its_region_is_guarded():
    X = te.placeholder((12,), name="X")
    T = te.compute((12,), lambda i: X[i] * 2.0, name="T")
    Y = te.compute((12,), lambda i: T[i] + 1.0, name="Y")
    s = te.create_schedule(Y)
    yo, _ = s[Y].split(Y.op.axis[0], 6)
    s[T].compute_at(s[Y], yo)
    to, ti = s[T].split(T.op.axis[0], 4)
    s[T].unroll(ti)
    func = te.lower(s, [X], name="double")
    lines = _lines(func)
    assert 'T = allocate((6,), "float32")' in lines
    assert "for T_i_outer in serial(2):" in lines and "for T_i_inner in unrolled(4):" in lines
    assert "if T_i_outer * 4 + T_i_inner < 6:" in lines
    x = RNG.standard_normal(12).astype("float32")
    np.testing.assert_allclose(_run(func, x), x * 2.0 + 1.0, rtol=1e-6)


def test_attached_reduction_with_data_loops_around_and_inside_the_reduce_loops():
    A, B, C, a, b = _matmul(4, 6, 5)
    D = te.compute(C.shape, lambda i, j: C[i, j] * 2.0, name="D")
    s = te.create_schedule(D)
    io, _ = s[D].split(D.op.axis[0], 2)
    s[C].compute_at(s[D], io)
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    ko, ki = s[C].split(k, 2)
    s[C].reorder(j, ko, i, ki)
    func = te.lower(s, [A, B], name="matmul_x2")
    lines = _lines(func)
    at = lines.index('C = allocate((2, 6), "float32")')
    # The j loop around everything; the init over i just outside the first reduce loop.
    assert lines[at + 1:at + 6] == ["for C_j in serial(6):", "for C_i in serial(2):",
                                    "C[C_i, C_j] = 0.0", "for k_outer in serial(3):",
                                    "for C_i in serial(2):"]
    assert "if k_outer * 2 + k_inner < 5:" in lines
    np.testing.assert_allclose(_run(func, a, b), (a @ b) * 2.0, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- prod

def test_prod_reduction():
    X = te.placeholder((3, 4), name="X")
    k = te.reduce_axis(4, name="k")
    P = te.compute((3,), lambda i: te.prod(X[i, k], axis=[k]), name="P")
    func = te.lower(P, [X], name="row_prod")
    assert _lines(func)[2:5] == ["P[i] = 1.0", "for k in serial(4):", "P[i] = P[i] * X[i, k]"]
    x = RNG.uniform(0.5, 1.5, (3, 4)).astype("float32")
    np.testing.assert_allclose(_run(func, x), x.prod(axis=1), rtol=1e-6)
    Xi = te.placeholder((5,), "int32", name="Xi")
    r = te.reduce_axis(5, name="r")
    Pi = te.compute((), lambda: te.prod(Xi[r], axis=[r]), name="Pi")
    xi = np.array([1, -2, 3, 2, -1], "int32")
    assert int(_run(te.lower(Pi, [Xi]), xi)) == 12


def test_cache_write_of_an_intermediate_keeps_its_readers():
    A, B, C, a, b = _matmul(3, 8, 4)
    D = te.compute(C.shape, lambda i, j: C[i, j] + 1.0, name="D")
    s = te.create_schedule(D)
    CL = s.cache_write(C)
    assert s[C.op] is s[C] and s[C].op.inputs == (CL,)
    s[C].compute_at(s[D], D.op.axis[0])
    s[CL].compute_at(s[D], D.op.axis[0])
    s[CL].vectorize(CL.op.axis[1])
    func = te.lower(s, [A, B], name="matmul_plus_one")
    allocations = _allocations(func.body)
    assert allocations["C_local"][0].shape == (1, 8) and allocations["C_local"][1] == ("i",)
    assert allocations["C"][0].shape == (1, 8) and allocations["C"][1] == ("i",)
    np.testing.assert_allclose(_run(func, a, b), a @ b + 1.0, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- reads that are not affine

def test_compute_at_reads_through_a_modulo_that_the_ranges_remove():
    """A ``tile`` of one repetition reads ``(io * 4 + ii) % 8``: over io in [0, 2) and ii in
    [0, 4) that is ``io * 4 + ii``, so the producer's region is still inferred (one element
    per iteration of the inner loop) instead of failing as not affine."""
    X = te.placeholder((8,), name="X")
    T = te.compute((8,), lambda i: X[i] * 2.0, name="T")
    Y = te.compute((8,), lambda i: T[i % 8] + 1.0, name="Y")
    s = te.create_schedule(Y)
    io, ii = s[Y].split(Y.op.axis[0], 4)
    s[T].compute_at(s[Y], io)
    func = te.lower(s, [X])
    x = RNG.standard_normal(8).astype("float32")
    np.testing.assert_allclose(_run(func, x), x * 2 + 1, rtol=1e-6)
    buffer, loops = _allocations(func.body)["T"]
    assert buffer.shape == (4,) and loops == ("i_outer",)


def test_compute_at_with_reads_that_stay_not_affine_raises_compute_at_error():
    """A read through an index tensor (``take``) or a modulo that the ranges do not remove
    has no inferable region: lowering raises ComputeAtError (a CompileError naming the stage
    and the index), which a strategy catches to compute the stage at the root instead."""
    X = te.placeholder((8,), name="X")
    idx = te.placeholder((8,), "int32", name="idx")
    T = te.compute((8,), lambda i: X[i] * 2.0, name="T")
    Y = te.compute((8,), lambda i: T[te.cast("int64", idx[i])] + 1.0, name="Y")
    s = te.create_schedule(Y)
    s[T].compute_at(s[Y], Y.op.axis[0])
    with pytest.raises(te.ComputeAtError, match="index .* of T is not affine"):
        te.lower(s, [X, idx])
    Z = te.compute((8,), lambda i: T[(i * 3) % 8], name="Z")
    s = te.create_schedule(Z)
    io, _ = s[Z].split(Z.op.axis[0], 4)
    s[T].compute_at(s[Z], io)
    with pytest.raises(CompileError, match="of T is not affine"):
        te.lower(s, [X])
    # the same schedule without the attachment computes the right values
    s = te.create_schedule(Z)
    x = RNG.standard_normal(8).astype("float32")
    np.testing.assert_allclose(_run(te.lower(s, [X]), x), (x * 2)[(np.arange(8) * 3) % 8])
    assert issubclass(te.ComputeAtError, CompileError)
