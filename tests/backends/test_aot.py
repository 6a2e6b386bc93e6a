"""AoT compilation of whole programs: values against numpy and the interpreter, the native
code's shape (self tail calls as loops, the program's own functions in the listing), memory
that stays flat over many runs, deep recursion, and run-time errors that name the place."""

import numpy as np
import pytest

import relaybench as rb
from relaybench.adt import from_python, to_python
from relaybench.errors import CompileError, ExecutionError

HEADER = '#[version = "0.0.5"]\n'


def aot(mod, opt_level=0, **kw):
    return rb.build(mod, target="llvm", opt_level=opt_level, executor="aot", **kw)


def test_self_tail_call_is_a_loop_and_sums():
    mod = rb.parse(HEADER + """
def @main(%n: int32, %acc: int32) -> int32 {
  if (equal(%n, 0)) { %acc } else { @main(subtract(%n, 1), add(%acc, %n)) }
}""")
    lib = aot(mod)
    assert lib.run(np.int32(1000), np.int32(0)) == 1000 * 1001 // 2
    text = lib.source("llvm")
    # the recursive call became a jump back to the first instruction: the one call of the
    # function is the entry point's
    assert "br label %\"pc0\"" in text and text.count("call i64 @\"rb_fn0_main\"") == 1


def test_list_and_tree_from_python_and_back():
    mod = rb.IRModule().import_prelude()
    mod["main"] = rb.ir.parse_expr("""
fn (%xs: List[int32], %t: Tree[int32]) {
  let %double = fn (%x: int32) -> int32 { multiply(%x, 2) };
  (@map(%double, %xs), @size(%t), @rev(%xs))
}""", mod=mod)
    lib = aot(mod)
    tree = (np.int32(1), [(np.int32(2), []), (np.int32(3), [(np.int32(4), [])])])
    doubled, size, rev = to_python(lib.run([1, 2, 3, 4], tree))
    assert [int(v) for v in doubled] == [2, 4, 6, 8]
    assert int(size) == 4 and [int(v) for v in rev] == [4, 3, 2, 1]
    assert to_python(from_python(tree, "Tree"))[1][1][1][0][0] == 4


def test_deep_non_tail_recursion_runs_on_a_larger_stack():
    mod = rb.parse(HEADER + """
def @main(%n: int32) -> int32 {
  if (equal(%n, 0)) { 0 } else { add(1, @main(subtract(%n, 1))) }
}""")
    lib = aot(mod)
    assert lib.run(np.int32(100_000)) == 100_000
    with rb.config.Context(RB_AOT_STACK_MB=1):
        with pytest.raises(ExecutionError, match="deeper than the native stack"):
            lib.run(np.int32(1_000_000))


def test_memory_is_flat_over_many_runs():
    mod = rb.parse(HEADER + """
def @main(%x: Tensor[(64), float32], %n: int32) -> Tensor[(64), float32] {
  if (equal(%n, 0)) { %x } else { @main(add(%x, 1f), subtract(%n, 1)) }
}""")
    lib = aot(mod)
    x = np.zeros(64, "float32")
    np.testing.assert_array_equal(lib.run(x, np.int32(50)), np.full(64, 50, "float32"))
    arena = lib.arena_bytes
    import resource
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(3000):
        lib.run(x, np.int32(50))
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert lib.arena_bytes == arena and after - before < 20_000   # KiB


def test_match_without_a_clause_and_bad_inputs_are_errors():
    mod = rb.parse(HEADER + """
type Option[A] { Some(A), None, }
def @main(%o: Option[int32], %x: Tensor[(2, 3), float32]) -> int32 {
  match? (%o) { Some(%v) => %v, }
}""")
    lib = aot(mod)
    some = rb.backends.interpreter.ConstructorValue(mod.get_constructor("Some"),
                                                    (np.array(7, "int32"),))
    x = np.zeros((2, 3), "float32")
    assert lib.run(some, x) == 7
    none = rb.backends.interpreter.ConstructorValue(mod.get_constructor("None"), ())
    with pytest.raises(ExecutionError, match="no clause"):
        lib.run(none, x)
    with pytest.raises(ExecutionError, match="%x"):
        lib.run(some, np.zeros((3, 2), "float32"))
    with pytest.raises(ExecutionError, match="dtype"):
        lib.run(some, np.zeros((2, 3), "int32"))


def test_closures_and_references_match_the_interpreter():
    mod = rb.parse(HEADER + """
def @main(%x: float32) -> (float32, float32) {
  let %r = ref(%x);
  let %add = fn (%y: float32) -> float32 { add(%y, ref_read(%r)) };
  let %_ = ref_write(%r, multiply(%x, 3f));
  (%add(1f), ref_read(%r))
}""")
    x = np.float32(2.0)
    want = rb.create_executor("interpreter", mod=mod).evaluate()(x)
    for opt_level in (0, 3):
        got = aot(mod, opt_level).run(x)
        assert got[0] == want[0] == 7.0 and got[1] == want[1] == 6.0


def test_tree_lstm_matches_the_interpreter():
    mod, params = rb.models.get("tree_lstm", input_size=5, hidden_size=7)
    rng = np.random.default_rng(3)

    def x():
        return rng.standard_normal((1, 5)).astype("float32")

    tree = (x(), [(x(), [(x(), []), (x(), [])]), (x(), [])])
    from relaybench.passes.bind_params import bind_params
    want = rb.create_executor("interpreter", mod=bind_params(mod, params)).evaluate()(
        from_python(tree, "Tree"))
    got = rb.build(mod, params=params, executor="aot").run(tree)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    assert "rb_fn" in rb.build(mod, params=params, executor="aot").source("llvm")


def test_other_targets_are_refused():
    mod = rb.parse(HEADER + "def @main(%x: float32) { %x }")
    with pytest.raises(CompileError, match="host CPU"):
        rb.build(mod, target="accel", executor="aot")


def test_parallel_kernels_on_two_threads_match_the_interpreter(monkeypatch):
    # the dense layers' parallel loops are handed to the spinning pool from native code (at
    # any size here: small kernels otherwise run on the calling thread; the hidden layer's
    # 1024 x 256 is one the dense_rows rule makes parallel)
    from relaybench.backends.aot import compiler
    monkeypatch.setattr(compiler, "PARALLEL_MIN_FLOPS", 0)
    mod, params = rb.models.get("lstm", form="loop", batch_size=1, seq_len=4, input_size=32,
                                hidden_size=256)
    steps = [np.random.default_rng(k).standard_normal((1, 32)).astype("float32")
             for k in range(4)]
    from relaybench.passes.bind_params import bind_params
    want = rb.create_executor("interpreter", mod=bind_params(mod, params)).evaluate()(
        from_python(steps))
    lib = rb.build(mod, params=params, executor="aot", num_threads=2)
    # the jobs are launched by calls of the pool's rb_pool_launch(header, entry, args, ranges,
    # count) from the program's code
    assert "void (i64*, i64, i64, i64, i64)*" in lib.source("llvm")
    for _ in range(3):
        got = lib.run(steps)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_docstring_examples():
    import doctest

    import relaybench.adt
    import relaybench.backends.aot
    for module in (relaybench.backends.aot, relaybench.adt):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0 and result.attempted > 0, module.__name__
