"""The LLVM backend's runtime: JIT, kernel cache, argument checks and the parallel launcher.

Kernels are built with llvmlite's IRBuilder and checked against numpy formulas.
"""

import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

llvmlite_ir = pytest.importorskip(
    "llvmlite.ir", reason="the LLVM backend needs llvmlite (the `llvm` extra)")

from relaybench import config  # noqa: E402
from relaybench.backends.llvm import (JIT, CacheEntry, Kernel, KernelCache,  # noqa: E402
                                      ScalarSpec, TensorSpec, host_target,
                                      prefer_vector_width, split_range)
from relaybench.errors import CompileError, ExecutionError  # noqa: E402

ir = llvmlite_ir
F32, F64, I64 = ir.FloatType(), ir.DoubleType(), ir.IntType(64)
P = ctypes.c_void_p


def _loop(b, begin, end, body):
    """Emit ``for i in range(begin, end): body(b, i)`` at ``b``'s position."""
    fn = b.function
    pre = b.block
    head, loop, done = (fn.append_basic_block(n) for n in ("head", "loop", "done"))
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64, name="i")
    i.add_incoming(begin, pre)
    b.cbranch(b.icmp_signed("<", i, end), loop, done)
    b.position_at_end(loop)
    body(b, i)
    nxt = b.add(i, I64(1))
    i.add_incoming(nxt, b.block)
    b.branch(head)
    b.position_at_end(done)


def _function(module, name, ret, params):
    fn = ir.Function(module, ir.FunctionType(ret, params), name)
    for arg in fn.args:
        if isinstance(arg.type, ir.PointerType):
            arg.add_attribute("noalias")
    return fn, ir.IRBuilder(fn.append_basic_block("entry"))


def vector_add_module():
    """vadd(a, b, c, n): c[i] = a[i] + b[i], float32, asking for 512-bit vectors."""
    mod = ir.Module("vadd")
    fn, b = _function(mod, "vadd", ir.VoidType(), [F32.as_pointer()] * 3 + [I64])
    prefer_vector_width(fn, 512)
    x, y, z, n = fn.args

    def body(b, i):
        b.store(b.fadd(b.load(b.gep(x, [i])), b.load(b.gep(y, [i]))), b.gep(z, [i]))
    _loop(b, I64(0), n, body)
    b.ret_void()
    return mod


def sum_module():
    """total(x, n) -> double: the sum of float32 x[0:n], accumulated in float64."""
    mod = ir.Module("sum")
    fn, b = _function(mod, "total", F64, [F32.as_pointer(), I64])
    x, n = fn.args
    acc = b.alloca(F64)
    b.store(F64(0.0), acc)

    def body(b, i):
        b.store(b.fadd(b.load(acc), b.fpext(b.load(b.gep(x, [i])), F64)), acc)
    _loop(b, I64(0), n, body)
    b.ret(b.load(acc))
    return mod


def rows_module(rows, cols, name="scale_rows"):
    """name(a, v, out, begin, end): out[i, j] = 2 * a[i, j] + v[j] for rows i in [begin, end)."""
    mod = ir.Module(name)
    fn, b = _function(mod, name, ir.VoidType(), [F32.as_pointer()] * 3 + [I64, I64])
    a, v, out, begin, end = fn.args

    def row(b, i):
        def col(b, j):
            k = b.add(b.mul(i, I64(cols)), j)
            value = b.fadd(b.fmul(F32(2.0), b.load(b.gep(a, [k]))), b.load(b.gep(v, [j])))
            b.store(value, b.gep(out, [k]))
        _loop(b, I64(0), I64(cols), col)
    _loop(b, begin, end, row)
    b.ret_void()
    return mod


def count_module(cols):
    """touch(out, begin, end): out[i, j] += 1 for rows i in [begin, end) (int64)."""
    mod = ir.Module("touch")
    fn, b = _function(mod, "touch", ir.VoidType(), [I64.as_pointer(), I64, I64])
    out, begin, end = fn.args

    def row(b, i):
        def col(b, j):
            ptr = b.gep(out, [b.add(b.mul(i, I64(cols)), j)])
            b.store(b.add(b.load(ptr), I64(1)), ptr)
        _loop(b, I64(0), I64(cols), col)
    _loop(b, begin, end, row)
    b.ret_void()
    return mod


@pytest.fixture
def jit(tmp_path):
    return JIT(cache=KernelCache(tmp_path))


# --- JIT ---------------------------------------------------------------------------------------

def test_vector_add_matches_numpy(jit):
    compiled = jit.compile_module(vector_add_module())
    vadd = compiled.function("vadd", [P, P, P, ctypes.c_int64])
    rng = np.random.default_rng(0)
    for n in (0, 1, 15, 1000, 1037):
        a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
        c = np.full(n, np.nan, np.float32)
        vadd(a.ctypes.data, b.ctypes.data, c.ctypes.data, n)
        np.testing.assert_array_equal(c, a + b)


def test_reduction_matches_numpy(jit):
    total = jit.compile_module(sum_module()).function("total", [P, ctypes.c_int64],
                                                      restype=ctypes.c_double)
    x = np.random.default_rng(1).standard_normal(10_001, dtype=np.float32)
    expected = float(np.sum(x.astype(np.float64)))
    assert total(x.ctypes.data, x.size) == pytest.approx(expected, rel=1e-12, abs=1e-9)
    assert total(x.ctypes.data, 0) == 0.0


def test_two_dimensional_loop_matches_numpy(jit):
    compiled = jit.compile_module(rows_module(7, 33))
    fn = compiled.function("scale_rows", [P, P, P, ctypes.c_int64, ctypes.c_int64])
    rng = np.random.default_rng(2)
    a = rng.standard_normal((7, 33), dtype=np.float32)
    v = rng.standard_normal(33, dtype=np.float32)
    out = np.zeros((7, 33), np.float32)
    fn(a.ctypes.data, v.ctypes.data, out.ctypes.data, 0, 7)
    np.testing.assert_allclose(out, 2 * a + v, rtol=1e-6)


def test_asm_shows_512_bit_registers(jit):
    if not host_target().has_avx512:
        pytest.skip("the host CPU has no AVX-512, so no zmm registers are expected")
    compiled = jit.compile_module(vector_add_module())
    asm = compiled.source("asm")
    assert "zmm" in asm
    assert compiled.symbol("vadd") in asm
    assert '"prefer-vector-width"="512"' in compiled.source("llvm")
    assert "<16 x float>" in compiled.source("llvm")


def test_same_function_name_in_two_modules(jit):
    first, second = jit.compile_module(rows_module(2, 3, "k")), jit.compile_module(
        rows_module(4, 5, "k"))
    assert first.symbol("k") != second.symbol("k")
    assert first.address("k") != second.address("k")
    a, v = np.ones((4, 5), np.float32), np.arange(5, dtype=np.float32)
    out = np.zeros((4, 5), np.float32)
    second.function("k", [P, P, P, ctypes.c_int64, ctypes.c_int64])(
        a.ctypes.data, v.ctypes.data, out.ctypes.data, 0, 4)
    np.testing.assert_array_equal(out, 2 + v[None, :] * np.ones((4, 1), np.float32))
    assert jit.compile_module(rows_module(2, 3, "k")) is first
    assert jit.stats == {"compiled": 2, "from_disk": 0, "from_memory": 1, "evicted": 0}


def test_invalid_ir_raises_compile_error(jit):
    with pytest.raises(CompileError, match="broken"):
        jit.compile_module("define i32 @f() {\n  ret i64 0\n}", name="broken", cache=False)


def test_errors_name_the_function_and_kind(jit):
    compiled = jit.compile_module(sum_module(), cache=False)
    with pytest.raises(KeyError, match="defines no function 'nope'; it defines total"):
        compiled.address("nope")
    with pytest.raises(ValueError, match="unknown source kind 'ptx'"):
        compiled.source("ptx")


# --- cache -------------------------------------------------------------------------------------

def test_cache_round_trip_skips_compilation(tmp_path):
    first = JIT(cache=KernelCache(tmp_path))
    compiled = first.compile_module(vector_add_module())
    assert compiled.origin == "compiled"
    assert first.cache.path(compiled.key).is_file()

    second = JIT(cache=KernelCache(tmp_path))  # a fresh engine, as in a new process
    loaded = second.compile_module(vector_add_module())
    assert loaded.origin == "disk" and loaded.key == compiled.key
    assert second.stats["compiled"] == 0 and second.stats["from_disk"] == 1
    assert loaded.source("llvm") == compiled.source("llvm")
    a, b = np.arange(40, dtype=np.float32), np.full(40, 0.5, np.float32)
    c = np.zeros(40, np.float32)
    loaded.function("vadd", [P, P, P, ctypes.c_int64])(a.ctypes.data, b.ctypes.data,
                                                       c.ctypes.data, 40)
    np.testing.assert_array_equal(c, a + b)


def test_cache_key_covers_key_and_target(tmp_path):
    jit = JIT(cache=KernelCache(tmp_path))
    one = jit.compile_module(vector_add_module(), key="loops: vadd v1")
    two = jit.compile_module(vector_add_module(), key="loops: vadd v2")
    assert one.key != two.key and two.origin == "compiled"
    assert JIT(cache=KernelCache(tmp_path)).compile_module(
        sum_module(), key="loops: vadd v1").origin == "disk"  # the given key decides


def test_second_process_loads_from_disk(tmp_path):
    script = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_llvm_runtime import vector_add_module
        from relaybench.backends.llvm import compile_module
        print(compile_module(vector_add_module()).origin)
    """)
    env = dict(os.environ, RB_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, timeout=60) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr + runs[1].stderr
    assert [r.stdout.strip() for r in runs] == ["compiled", "disk"]


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_damaged_entry_is_removed_and_rebuilt(tmp_path, damage):
    key = JIT(cache=KernelCache(tmp_path)).compile_module(vector_add_module()).key
    path = KernelCache(tmp_path).path(key)
    data = path.read_bytes()
    if damage == "truncate":
        data = data[:len(data) // 2]
    elif damage == "flip":
        data = data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:]
    elif damage == "garbage":
        data = b"not a kernel at all" * 10
    else:
        data = b""
    path.write_bytes(data)

    cache = KernelCache(tmp_path)
    jit = JIT(cache=cache)
    compiled = jit.compile_module(vector_add_module())
    assert compiled.origin == "compiled"
    assert cache.stats["damaged"] == 1 and str(path) in cache.last_damage
    assert CacheEntry.decode(path.read_bytes()).symbols == {"vadd": compiled.symbol("vadd")}
    a = np.arange(20, dtype=np.float32)
    c = np.zeros(20, np.float32)
    compiled.function("vadd", [P, P, P, ctypes.c_int64])(a.ctypes.data, a.ctypes.data,
                                                         c.ctypes.data, 20)
    np.testing.assert_array_equal(c, 2 * a)


def test_cache_directory_follows_the_knob(tmp_path):
    cache = KernelCache()
    with config.Context(RB_CACHE_DIR=tmp_path / "here"):
        assert cache.directory == tmp_path / "here" / "llvm"
        cache.store("k" * 64, CacheEntry(b"obj", "; ir", {"f": "f_1"}))
        assert cache.load("k" * 64) == CacheEntry(b"obj", "; ir", {"f": "f_1"})
        assert [p.name for p in (tmp_path / "here" / "llvm").iterdir()] == ["k" * 64 + ".rbk"]
    assert cache.directory != tmp_path / "here" / "llvm"  # read at each use


# --- argument checks ---------------------------------------------------------------------------

@pytest.fixture
def vadd_kernel(jit):
    compiled = jit.compile_module(vector_add_module())
    specs = [TensorSpec("a", (8,), "float32"), TensorSpec("b", (8,), "float32"),
             TensorSpec("c", (8,), "float32", output=True), ScalarSpec("n", "int64")]
    return Kernel("vadd", compiled.function("vadd", [P, P, P, ctypes.c_int64]), specs)


def test_kernel_runs_checked_arguments(vadd_kernel):
    a, b = np.arange(8, dtype=np.float32), np.ones(8, np.float32)
    c = np.zeros(8, np.float32)
    vadd_kernel(a, b, c, 8)
    np.testing.assert_array_equal(c, a + 1)


@pytest.mark.parametrize("bad, name, expected, given", [
    ({"a": np.zeros(8, np.float64)}, "a", "Tensor[(8,), float32]", "Tensor[(8,), float64]"),
    ({"b": np.zeros(9, np.float32)}, "b", "Tensor[(8,), float32]", "Tensor[(9,), float32]"),
    ({"b": np.zeros((8, 1), np.float32)}, "b", "Tensor[(8,), float32]",
     "Tensor[(8, 1), float32]"),
    ({"a": np.zeros(16, np.float32)[::2]}, "a", "Tensor[(8,), float32]",
     "Tensor[(8,), float32] (strided)"),
    ({"c": np.zeros(8, np.float32).view()}, None, None, None),  # writable view: accepted
    ({"a": [0.0] * 8}, "a", "Tensor[(8,), float32]", "list"),
    ({"n": 8.0}, "n", "int64", "float"),
])
def test_kernel_rejects_bad_arguments_before_running(vadd_kernel, bad, name, expected, given):
    args = {"a": np.ones(8, np.float32), "b": np.ones(8, np.float32),
            "c": np.full(8, -1.0, np.float32), "n": 8}
    args.update(bad)
    if name is None:
        vadd_kernel(*args.values())
        np.testing.assert_array_equal(args["c"], 2)
        return
    with pytest.raises(ExecutionError) as info:
        vadd_kernel(*args.values())
    err = info.value
    assert (err.input_name, err.expected, err.given) == (name, expected, given)
    assert f"vadd: argument '{name}'" in str(err)
    np.testing.assert_array_equal(args["c"], -1.0)  # compiled code never ran


def test_kernel_rejects_read_only_output_and_wrong_count(vadd_kernel):
    c = np.zeros(8, np.float32)
    c.flags.writeable = False
    with pytest.raises(ExecutionError, match="'c': output is read-only") as info:
        vadd_kernel(np.ones(8, np.float32), np.ones(8, np.float32), c, 8)
    assert info.value.input_name == "c"
    with pytest.raises(ExecutionError, match="3 arguments given, expected 4 \\(a, b, c, n\\)"):
        vadd_kernel(np.ones(8, np.float32), np.ones(8, np.float32), np.ones(8, np.float32))


def test_unknown_dimension_accepts_any_size():
    spec = TensorSpec("x", (None, 4), "float32")
    assert spec.expected == "Tensor[(?, 4), float32]"
    spec.check(np.zeros((9, 4), np.float32), "k")
    with pytest.raises(ExecutionError, match="expected Tensor\\[\\(\\?, 4\\), float32\\]"):
        spec.check(np.zeros((9, 5), np.float32), "k")


# --- parallel launcher -------------------------------------------------------------------------

@pytest.mark.parametrize("extent, parts", [(0, 2), (1, 2), (2, 2), (7, 2), (10, 3), (5, 8),
                                           (100, 1)])
def test_split_range_covers_each_index_once(extent, parts):
    ranges = split_range(extent, parts)
    covered = [i for begin, end in ranges for i in range(begin, end)]
    assert covered == list(range(extent))
    assert len(ranges) <= max(parts, 1)
    assert all(end > begin for begin, end in ranges)
    sizes = [end - begin for begin, end in ranges]
    assert not sizes or max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rows", [1, 2, 13])
def test_parallel_kernel_writes_each_element_once(jit, threads, rows):
    cols = 17
    fn = jit.compile_module(count_module(cols)).function(
        "touch", [P, ctypes.c_int64, ctypes.c_int64])
    kernel = Kernel("touch", fn, [TensorSpec("out", (rows, cols), "int64", output=True)],
                    parallel_extent=rows)
    out = np.zeros((rows, cols), np.int64)
    with config.Context(RB_NUM_THREADS=threads):
        kernel(out)
    np.testing.assert_array_equal(out, np.ones((rows, cols), np.int64))


@pytest.mark.parametrize("threads", [1, 2])
def test_parallel_two_dimensional_loop_matches_numpy(jit, threads):
    rows, cols = 9, 40
    fn = jit.compile_module(rows_module(rows, cols)).function(
        "scale_rows", [P, P, P, ctypes.c_int64, ctypes.c_int64])
    specs = [TensorSpec("a", (rows, cols), "float32"), TensorSpec("v", (cols,), "float32"),
             TensorSpec("out", (rows, cols), "float32", output=True)]
    kernel = Kernel("scale_rows", fn, specs, parallel_extent=rows, num_threads=threads)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((rows, cols), dtype=np.float32)
    v = rng.standard_normal(cols, dtype=np.float32)
    out = np.zeros((rows, cols), np.float32)
    kernel(a, v, out)
    np.testing.assert_allclose(out, 2 * a + v, rtol=1e-6)


def test_parallel_for_uses_threads_and_reraises():
    from relaybench.backends.llvm import parallel_for
    import threading
    seen = {}

    def body(begin, end):
        seen[(begin, end)] = threading.current_thread().name

    ranges = parallel_for(body, 10, num_threads=2)
    assert ranges == [(0, 5), (5, 10)] and sorted(seen) == ranges
    assert seen[(0, 5)] == threading.current_thread().name
    assert seen[(5, 10)].startswith("rb-kernel")

    def failing(begin, end):
        if begin:
            raise RuntimeError(f"range {begin}:{end} failed")
    with pytest.raises(RuntimeError, match="range 5:10 failed"):
        parallel_for(failing, 10, num_threads=2)


def test_callable_outlives_its_engine(tmp_path):
    import gc
    fn = JIT(cache=KernelCache(tmp_path)).compile_module(sum_module()).function(
        "total", [P, ctypes.c_int64], restype=ctypes.c_double)
    gc.collect()
    x = np.arange(100, dtype=np.float32)
    assert fn(x.ctypes.data, 100) == 4950.0


def wait_module():
    """wait_for(flag, limit) -> int64: spin until flag[0] != 0 (at most limit times); flag[0]."""
    mod = ir.Module("wait")
    fn, b = _function(mod, "wait_for", I64, [I64.as_pointer(), I64])
    flag, limit = fn.args
    entry = b.block
    head, spin, done = (fn.append_basic_block(n) for n in ("head", "spin", "done"))
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64)
    i.add_incoming(I64(0), entry)
    seen = b.icmp_signed("!=", b.load_atomic(flag, "acquire", 8), I64(0))
    b.cbranch(b.or_(seen, b.icmp_signed(">=", i, limit)), done, spin)
    b.position_at_end(spin)
    i.add_incoming(b.add(i, I64(1)), spin)
    b.branch(head)
    b.position_at_end(done)
    b.ret(b.load_atomic(flag, "acquire", 8))
    return mod


def test_kernel_calls_release_the_gil(jit):
    """A kernel spinning on a flag sees it set by Python code in another thread.

    Were the GIL held during the call, the other thread could not run until the spin limit
    (a second or so) ran out, and the kernel would return 0.
    """
    wait_for = jit.compile_module(wait_module()).function(
        "wait_for", [P, ctypes.c_int64], restype=ctypes.c_int64)
    flag = np.zeros(1, np.int64)
    results = {}

    def body(begin, end):
        if begin == 0:
            results["seen"] = wait_for(flag.ctypes.data, 2_000_000_000)
        else:
            flag[0] = 7

    from relaybench.backends.llvm import parallel_for
    parallel_for(body, 2, num_threads=2)
    assert results["seen"] == 7


def test_a_cached_kernel_is_not_generated_again(monkeypatch):
    """The cache key is the printed loop IR: a kernel found in the cache (memory or disk) skips
    generating its LLVM IR, most of a build whose kernels are all cached."""
    from relaybench import te
    from relaybench.backends.llvm import codegen
    X = te.placeholder((64,), name="X")
    Y = te.compute((64,), lambda i: X[i] * 3.0 + 1.0, name="Y")
    func = te.lower(te.create_schedule(Y), [X], name="affine_cached")
    built = []
    original = codegen._FunctionBuilder.build
    monkeypatch.setattr(codegen._FunctionBuilder, "build",
                        lambda self: built.append(self.func.name) or original(self))
    first = codegen.build_kernel(func, cache=False)     # generated and compiled, not stored
    assert built == ["affine_cached"]
    second = codegen.build_kernel(func)                 # found in memory under the same key
    assert built == ["affine_cached"] and second.compiled_module is first.compiled_module
    x = np.arange(64, dtype="float32")
    y = np.empty(64, "float32")
    second(x, y)
    np.testing.assert_array_equal(y, x * 3 + 1)
