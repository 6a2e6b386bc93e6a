"""The Relay VM against the reference interpreter and values computed by hand: the interpreter's
programs (control flow, closures, references, recursion, ADTs, the prelude) at opt_level 0 and
3, deep recursion, run-time errors with their source positions, bad inputs, the bytecode."""

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.backends.interpreter import ConstructorValue, RefValue
from relaybench.backends.vm import VMClosure, bytecode as bc
from relaybench.errors import ExecutionError
from relaybench.models.nlp import from_list, make_list, make_tree

from vm_testing import assert_same_value, run_both

HEADER = '#[version = "0.0.5"]\n'


def vm_of(mod, opt_level=0):
    return rb.vm.VirtualMachine(rb.vm.compile(mod, opt_level=opt_level))


# ---- the interpreter's basic programs --------------------------------------------------------

def test_arith_tuples_and_nested_tuples():
    mod = rb.parse(HEADER + """
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  %0 = add(%x, %y);
  %1 = multiply(%0, %x);
  (%1, (%0, %x), (%x, 2f).1)
}""")
    x, y = np.array([1, 2, 3], "float32"), np.array([10, 20, 30], "float32")
    out = run_both(mod, (x, y))
    np.testing.assert_array_equal(out[0], [11, 44, 99])
    assert isinstance(out[1], tuple) and out[2] == 2.0


def test_if_with_references_takes_one_branch():
    mod = rb.parse(HEADER + """
def @main(%c: bool, %r: Ref[float32]) -> float32 {
  if (%c) {
    let %_ = ref_write(%r, 1f);
    ref_read(%r)
  } else {
    ref_read(%r)
  }
}""")
    for opt_level in (0, 3):
        vm = vm_of(mod, opt_level)
        r = RefValue(np.float32(0.0))
        assert vm.run(np.bool_(False), r) == 0.0 and r.value == 0.0
        assert vm.run(np.bool_(True), r) == 1.0 and r.value == 1.0


def test_shared_node_with_an_effect_runs_once():
    # the interpreter's graph-sharing program: the tuple's two fields are one node
    r = rb.var("r", rb.ir.RefType(rb.TensorType((), "float32")))
    x = rb.var("x", shape=())
    bump = rb.RefWrite(r, op.add(rb.RefRead(r), rb.const(1.0)))
    body = rb.Let(rb.var("_"), rb.Tuple([bump, bump]), rb.RefRead(r))
    mod = rb.IRModule.from_expr(rb.Function([r, x], op.add(body, x)))
    for opt_level in (0, 3):
        cell = RefValue(np.float32(10.0))
        assert vm_of(mod, opt_level).run(cell, np.float32(0.5)) == 11.5
        assert cell.value == 11.0


def test_references_created_read_and_written():
    mod = rb.parse(HEADER + """
def @main(%x: float32) -> (float32, Ref[float32]) {
  let %r = ref(1f);
  let %_ = ref_write(%r, add(ref_read(%r), %x));
  (ref_read(%r), %r)
}""")
    out = run_both(mod, (np.float32(41),))
    assert out[0] == 42.0 and isinstance(out[1], RefValue) and out[1].value == 42.0


def test_closures_capture_their_environment():
    mod = rb.parse(HEADER + """
def @main(%x: float32) -> float32 {
  let %add_x = fn (%y: float32) -> float32 { add(%x, %y) };
  let %twice = fn (%f: fn (float32) -> float32, %v: float32) -> float32 { %f(%f(%v)) };
  %twice(%add_x, 1f)
}""")
    assert run_both(mod, (np.float32(5),)) == 11.0


def test_function_value_returned_and_called_again():
    mod = rb.parse(HEADER + """
def @main(%x: float32) -> fn (float32) -> float32 {
  fn (%y: float32) -> float32 { multiply(%x, %y) }
}""")
    for opt_level in (0, 3):
        vm = vm_of(mod, opt_level)
        f = vm.run(np.float32(3))
        assert isinstance(f, VMClosure)
        assert vm.invoke_closure(f, np.float32(4)) == 12.0


def test_global_let_and_mutual_recursion():
    mod = rb.parse(HEADER + """
def @fact(%n: int32) -> int32 {
  if (equal(%n, 0)) { 1 } else { multiply(%n, @fact(subtract(%n, 1))) }
}
def @loop_sum(%n: int32) -> int32 {
  let %loop: fn (int32, int32) -> int32 = fn (%i: int32, %acc: int32) -> int32 {
    if (equal(%i, 0)) { %acc } else { %loop(subtract(%i, 1), add(%acc, %i)) }
  };
  %loop(%n, 0)
}
def @even(%n: int32) -> bool {
  if (equal(%n, 0)) { True } else { @odd(subtract(%n, 1)) }
}
def @odd(%n: int32) -> bool {
  if (equal(%n, 0)) { False } else { @even(subtract(%n, 1)) }
}""")
    assert run_both(mod, (np.int32(10),), entry="fact") == 3628800
    assert run_both(mod, (np.int32(100),), entry="loop_sum") == 5050
    assert bool(run_both(mod, (np.int32(1001),), entry="odd"))
    assert not bool(run_both(mod, (np.int32(1001),), entry="even"))


OPTION = HEADER + """
type Option[A] {
  Some(A),
  None,
}
"""


def test_match_tuple_nested_and_wildcard_patterns():
    mod = rb.parse(OPTION + """
def @pick(%a: Option[int32], %b: Option[Option[int32]]) -> int32 {
  match ((%a, %b)) {
    (Some(%x), Some(Some(%y))) => add(%x, %y),
    (Some(%x), Some(None)) => negative(%x),
    (Some(%x), _) => %x,
    (_, Some(Some(%y))) => multiply(%y, 10),
    _ => 0,
  }
}""")
    some, none = mod.get_constructor("Some"), mod.get_constructor("None")
    S = lambda v: ConstructorValue(some, (v,))  # noqa: E731
    N = ConstructorValue(none, ())
    i = np.int32
    expected = [((S(i(2)), S(S(i(3)))), 5), ((S(i(2)), S(N)), -2), ((S(i(2)), N), 2),
                ((N, S(S(i(3)))), 30), ((N, S(N)), 0), ((N, N), 0)]
    for opt_level in (0, 3):
        pick = vm_of(mod, opt_level).invoke
        for args, want in expected:
            assert pick("pick", *args) == want, (args, want)
    run_both(mod, (S(i(2)), S(N)), entry="pick")


def test_constructor_used_as_a_function_value():
    mod = rb.parse(OPTION + """
def @apply(%f: fn (int32) -> Option[int32], %x: int32) -> Option[int32] { %f(%x) }
def @main(%x: int32) -> (Option[int32], Option[int32]) { (@apply(Some, %x), None) }""")
    out = run_both(mod, (np.int32(7),))
    assert out[0].name == "Some" and out[0].fields[0] == 7 and out[1].name == "None"


# ---- the prelude ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def prelude_mod():
    mod = rb.IRModule().import_prelude()
    mod["main"] = rb.ir.parse_expr("""
fn (%xs: List[int32], %ys: List[int32]) {
  let %double = fn (%x: int32) -> int32 { multiply(%x, 2) };
  let %sub = fn (%a: int32, %b: int32) -> int32 { subtract(%a, %b) };
  let %big = fn (%x: int32) -> bool { greater(%x, 2) };
  let %inc = fn (%x: int32) -> int32 { add(%x, 3) };
  (@length(%xs), @nth(%xs, 2), @update(%xs, 1, 60), @hd(%xs), @tl(%xs), @map(%double, %xs),
   @foldl(%sub, 100, %xs), @foldr(%sub, 100, %xs), @filter(%big, %xs), @sum(%xs),
   @zip(%xs, %ys), @concat(%xs, %ys), @rev(%xs), @iterate(%inc, 5)(1))
}""", mod=mod)
    return mod


def ints(value):
    return [int(v) for v in from_list(value)]


def test_prelude_lists(prelude_mod):
    out = run_both(prelude_mod, (make_list([1, 2, 3, 4, 5]), make_list([10, 20])))
    (length, nth, update, hd, tl, mapped, foldl, foldr, filtered, total, zipped, cat, rev,
     iterated) = out
    assert (length, nth, hd, total, iterated) == (5, 3, 1, 15, 16)
    assert ints(update) == [1, 60, 3, 4, 5] and ints(tl) == [2, 3, 4, 5]
    assert ints(mapped) == [2, 4, 6, 8, 10] and ints(filtered) == [3, 4, 5]
    assert foldl == 100 - 15 and foldr == 1 - (2 - (3 - (4 - (5 - 100))))
    assert [(int(a), int(b)) for a, b in from_list(zipped)] == [(1, 10), (2, 20)]
    assert ints(cat) == [1, 2, 3, 4, 5, 10, 20] and ints(rev) == [5, 4, 3, 2, 1]


def test_prelude_trees_and_nats():
    mod = rb.IRModule().import_prelude()
    mod["main"] = rb.ir.parse_expr("""
fn (%t: Tree[int32], %xs: List[int32]) {
  let %neg = fn (%x: int32) -> int32 { negative(%x) };
  let %three = succ(succ(succ(zero)));
  (@size(%t), @tmap(%neg, %t), @nat_to_int(@nat_add(%three, succ(%three))),
   @nat_nth(%xs, succ(succ(zero))))
}""", mod=mod)
    i = np.int32
    tree = make_tree(i(1), [make_tree(i(2), [make_tree(i(4))]), make_tree(i(3))])
    size, mapped, seven, nth = run_both(mod, (tree, make_list([7, 8, 9])))
    assert (size, seven, nth) == (4, 7, 9)
    assert int(mapped.fields[0]) == -1 and int(from_list(mapped.fields[1])[0].fields[0]) == -2


# ---- recursion of any depth -----------------------------------------------------------------

def test_100k_element_list_folded(prelude_mod):
    mod = rb.IRModule().import_prelude()
    mod["main"] = rb.ir.parse_expr("""
fn (%xs: List[int32]) {
  (@foldl(fn (%a: int32, %b: int32) -> int32 { add(%a, %b) }, 0, %xs), @length(%xs))
}""", mod=mod)
    n = 100_000
    xs = make_list([np.int32(v % 7) for v in range(n)])
    total, length = vm_of(mod).run(xs)
    assert length == n and total == sum(v % 7 for v in range(n))


def test_tree_of_depth_10k():
    mod = rb.IRModule().import_prelude()
    mod["main"] = rb.ir.parse_expr("fn (%t: Tree[int32]) { @size(%t) }", mod=mod)
    depth = 10_000
    tree = make_tree(np.int32(0))
    for d in range(1, depth):
        tree = make_tree(np.int32(d), [tree])
    assert vm_of(mod).run(tree) == depth


def test_deep_non_tail_recursion():
    mod = rb.parse(HEADER + """
def @count(%n: int32) -> int32 {
  if (equal(%n, 0)) { 0 } else { add(1, @count(subtract(%n, 1))) }
}""")
    assert vm_of(mod).invoke("count", np.int32(30_000)) == 30_000


# ---- errors ---------------------------------------------------------------------------------

def test_match_failure_names_the_match_and_its_position():
    mod = rb.parse(OPTION + """
def @main(%o: Option[int32]) -> int32 {
  match (%o) {
    Some(%x) => %x,
  }
}""", "prog.rly")
    some, none = mod.get_constructor("Some"), mod.get_constructor("None")
    vm = vm_of(mod)
    assert vm.run(ConstructorValue(some, (np.int32(4),))) == 4
    with pytest.raises(ExecutionError, match=r"no clause of the match at prog.rly:9:3 accepts "
                                             r"the value: None"):
        vm.run(ConstructorValue(none, ()))
    listing = vm.exe.function("main").text(0)
    assert "fatal  # @main: no clause of the match at prog.rly:9:3" in listing


def test_prelude_hd_of_empty_list_fails_in_the_prelude():
    mod = rb.IRModule().import_prelude()
    vm = vm_of(mod)
    with pytest.raises(ExecutionError, match=r"@hd: no clause of the match at prelude.rly:\d+:\d+ "
                                             r"accepts the value: Nil"):
        vm.invoke("hd", make_list([]))


def test_fatal_instruction_raises_its_message():
    code = [bc.Fatal("@main: stopped here at prog.rly:2:3"), bc.Ret(0)]
    func = bc.VMFunction("main", [], 1, code)
    exe = rb.vm.Executable([func], {"main": 0}, [], [], "llvm", None)
    with pytest.raises(ExecutionError, match="stopped here at prog.rly:2:3"):
        rb.vm.VirtualMachine(exe)._execute(func, [])


def test_bad_inputs_are_named():
    mod = rb.parse(OPTION + """
def @main(%x: Tensor[(2, 3), float32], %o: Option[int32]) -> Tensor[(2, 3), float32] {
  nn.relu(%x)
}""")
    run = rb.create_executor("vm", mod=mod).evaluate()
    none = ConstructorValue(mod.get_constructor("None"), ())
    with pytest.raises(ExecutionError, match="input %x: expected dtype float32, given int32"):
        run(np.zeros((2, 3), "int32"), none)
    with pytest.raises(ExecutionError,
                       match=r"input %x: expected shape Tensor\[\(2, 3\), float32\], given \[3, 2\]"):
        run(np.zeros((3, 2), "float32"), none)
    with pytest.raises(ExecutionError, match="takes 2 arguments, got 1"):
        run(np.zeros((2, 3), "float32"))
    with pytest.raises(ExecutionError, match=r"input %o: expected an ADT object of type "
                                             r"Option\[int32\], given a tensor"):
        run(np.zeros((2, 3), "float32"), np.zeros(3, "float32"))
    with pytest.raises(ExecutionError, match="input %o: expected Option.*given a value of List"):
        run(np.zeros((2, 3), "float32"), make_list([1]))
    with pytest.raises(ExecutionError, match="no parameter named 'z'"):
        run(z=1)
    out = run(o=none, x=-np.ones((2, 3), "float32"))
    np.testing.assert_array_equal(out, np.zeros((2, 3)))


# ---- bytecode -------------------------------------------------------------------------------

def test_bytecode_listing_of_if():
    mod = rb.parse(HEADER + """
def @main(%c: bool, %x: Tensor[(2), float32], %y: Tensor[(2), float32]) {
  if (%c) { multiply(%x, %y) } else { %y }
}""")
    exe = rb.vm.compile(mod, opt_level=0)
    assert exe.bytecode == """\
VM Function[0]: main(%c, %x, %y)
# reg file size = 7
# instruction count = 9
0: load_consti $3 1
1: if $0 $3 +1 +6
2: alloc_storage $5 size=8 alignment=64 float32 cpu
3: alloc_tensor $6 $5 offset=0 shape=[2] float32
4: invoke_packed PackedFunc[0] (in: $1, $2, out: $6)  # fused_multiply
5: move $4 $6
6: goto +2
7: move $4 $2
8: ret $4"""
    vm = rb.vm.VirtualMachine(exe)
    x, y = np.array([1, 2], "float32"), np.array([3, 5], "float32")
    np.testing.assert_array_equal(vm.run(np.bool_(True), x, y), [3, 10])
    np.testing.assert_array_equal(vm.run(np.bool_(False), x, y), [3, 5])
    html = exe.bytecode._repr_html_()
    assert "<table>" in html and "if (%c)" in html and "invoke_packed PackedFunc[0]" in html


def test_match_compiles_to_tag_tests_and_fields():
    mod = rb.parse(OPTION + """
def @main(%o: Option[int32]) -> int32 {
  match (%o) {
    Some(%x) => %x,
    None => 0,
  }
}""")
    code = rb.vm.compile(mod, opt_level=0).function("main").instructions
    names = [type(i).__name__ for i in code]
    assert names == ["GetTag", "LoadConsti", "If", "GetField", "Move", "Goto",
                     "GetTag", "LoadConsti", "If", "LoadConst", "Move", "Goto", "Fatal", "Ret"]


def test_storage_of_dead_tensors_reused_and_escaping_ones_kept():
    # %a is dead after %b: %c may take its block. %b escapes in the tuple: never reused.
    mod = rb.parse(HEADER + """
def @main(%x: Tensor[(4), float32]) {
  let %a = add(%x, %x);
  let %b = multiply(%a, %a);
  let %c = exp(%b);
  let %d = negative(%c);
  (%b, %d)
}""")
    exe = rb.vm.compile(mod, opt_level=0)
    code = exe.function("main").instructions
    storages = [i for i in code if isinstance(i, bc.AllocStorage)]
    moves = [i for i in code if isinstance(i, bc.Move)]
    assert len(storages) == 3 and len(moves) == 1    # %d's block is %a's
    x = np.array([0.1, 0.2, -0.3, 0.4], "float32")
    b, d = rb.vm.VirtualMachine(exe).run(x)
    np.testing.assert_allclose(b, (2 * x) ** 2, rtol=1e-6)
    np.testing.assert_allclose(d, -np.exp((2 * x) ** 2), rtol=1e-6)
    assert not np.shares_memory(b, d)


# ---- the executor ---------------------------------------------------------------------------

def test_create_executor_vm_evaluates_globals_and_functions(prelude_mod):
    ex = rb.create_executor("vm", mod=prelude_mod, target="llvm")
    assert ex.evaluate(prelude_mod.get_global_var("length"))(make_list([4, 5, 6])) == 3
    f = rb.ir.parse_expr("fn (%xs: List[int32]) { @sum(@rev(%xs)) }", mod=prelude_mod)
    assert ex.evaluate(f)(make_list([4, 5, 6])) == 15
    with pytest.raises(ValueError, match="no binds"):
        ex.evaluate(binds={rb.var("x"): 1})


def test_nested_closures_stored_in_tuples_adts_and_references():
    mod = rb.parse(OPTION + """
def @main(%x: float32) -> (float32, float32, float32) {
  let %make_adder = fn (%a: float32) -> fn (float32) -> fn (float32) -> float32 {
    fn (%b: float32) -> fn (float32) -> float32 {
      fn (%c: float32) -> float32 { add(add(%a, %b), %c) }
    }
  };
  let %pair = (%make_adder(%x), Some(%make_adder(1f)(2f)));
  let %cell = ref(%pair.0(10f));
  let %_ = ref_write(%cell, %pair.0(20f));
  let %from_option = match (%pair.1) { Some(%f) => %f(3f), None => 0f };
  (ref_read(%cell)(100f), %from_option, %pair.0(%x)(%x))
}""")
    out = run_both(mod, (np.float32(0.5),))
    assert out == (np.float32(120.5), np.float32(6.0), np.float32(1.5))


def test_storage_reuse_across_branches_keeps_values():
    # blocks freed before an if, inside each branch and after it: every value checked
    mod = rb.parse(HEADER + """
def @main(%c: bool, %x: Tensor[(4), float32]) {
  let %a = add(%x, %x);
  let %b = multiply(%a, %a);
  let %r = if (%c) {
    let %t = negative(%b);
    let %u = exp(%t);
    add(%u, %t)
  } else {
    let %v = sqrt(%b);
    let %w = multiply(%v, %v);
    subtract(%w, %v)
  };
  let %s = add(%r, %r);
  let %z = multiply(%s, %b);
  (%z, %r)
}""")
    x = np.array([0.1, 0.2, -0.3, 0.4], "float32")
    b = (2 * x) ** 2
    for c in (True, False):
        z, r = run_both(mod, (np.bool_(c), x))
        want = np.exp(-b) - b if c else b - np.sqrt(b)
        np.testing.assert_allclose(r, want, rtol=1e-5)
        np.testing.assert_allclose(z, 2 * want * b, rtol=1e-5)
    code = rb.vm.compile(mod, opt_level=0).function("main").instructions
    assert any(isinstance(i, bc.Move) and i.dst in {s.storage for s in code
                                                     if isinstance(s, bc.AllocTensor)}
               for i in code)   # some block was handed on


@pytest.mark.parametrize("target", ["accel", "opencl"])
def test_other_targets_run_the_kernels(target):
    from relaybench.testing.differential import _opencl_present
    if target == "opencl" and not _opencl_present():
        pytest.skip("no OpenCL device")
    mod = rb.parse(HEADER + """
def @main(%n: int32, %x: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] {
  if (equal(%n, 0)) { %x } else { @main(subtract(%n, 1), nn.relu(add(%x, 1f))) }
}""")
    x = np.arange(6, dtype="float32").reshape(2, 3) - 4
    out = rb.create_executor("vm", mod, target=target).evaluate()(np.int32(3), x)
    np.testing.assert_array_equal(out, np.maximum(np.maximum(np.maximum(x + 1, 0) + 1, 0) + 1, 0))


def test_docstring_examples():
    import doctest
    from relaybench.backends import executor
    from relaybench.backends.vm import bytecode, compiler, vm
    for module in (bytecode, compiler, vm, executor):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__


def test_match_failure_on_a_long_list_prints_it_cut():
    mod = rb.IRModule().import_prelude()
    mod["main"] = rb.ir.parse_expr("""
fn (%xs: List[int32]) -> int32 {
  match (%xs) {
    Nil => 0,
  }
}""", "prog.rly", mod=mod)
    xs = make_list([np.int32(v) for v in range(50_000)])
    with pytest.raises(ExecutionError, match=r"at prog.rly:3:3 accepts the value: "
                                             r"Cons\(0, Cons\(1, \.\.\.\)\)"):
        vm_of(mod).run(xs)


def test_reshape_group_is_a_view_not_a_kernel():
    mod = rb.parse(HEADER + """
def @main(%x: Tensor[(2, 6), float32]) {
  %0 = add(%x, 1f);
  %1 = reshape(%0, newshape=[3, 4]);
  %2 = expand_dims(%1, axis=0);
  (multiply(%2, 2f), %1)
}""")
    x = np.arange(12, dtype="float32").reshape(2, 6)
    doubled, reshaped = run_both(mod, (x,))
    np.testing.assert_array_equal(reshaped, (x + 1).reshape(3, 4))
    np.testing.assert_array_equal(doubled, 2 * (x + 1).reshape(1, 3, 4))
    exe = rb.vm.compile(mod, opt_level=0)
    code = exe.function("main").instructions
    assert sum(isinstance(i, bc.ReshapeTensor) for i in code) == 2
    assert [k.name for k in exe.kernels] == ["fused_add", "fused_multiply"]


LOCAL_RECURSION = """#[version = "0.0.5"]
def @main(%x: int32, %xs: List[int32]) -> (int32, List[int32]) {
  let %scale = fn (%k: int32) -> fn (List[int32]) -> List[int32] {
    let %go: fn (List[int32]) -> List[int32] = fn (%l: List[int32]) -> List[int32] {
      match (%l) {
        Cons(%h, %t) => {
          let %f = fn (%v: int32) -> int32 { multiply(add(%v, %x), %k) };
          Cons(%f(%h), %go(%t))
        },
        Nil => Nil,
      }
    };
    %go
  };
  let %r = ref(0);
  let %count = fn (%l: List[int32]) -> int32 {
     let %_ = ref_write(%r, add(ref_read(%r), @length(%l)));
     ref_read(%r)
  };
  let %a = %count(%xs);
  let %b = %count(%scale(3)(%xs));
  (add(%a, %b), %scale(%a)(%xs))
}"""


def test_let_recursion_inside_a_closure_with_match_and_a_reference():
    # %scale(k) returns a let-recursive closure capturing %x and %k; %count keeps a running
    # total in a reference: a = 3, b = 3 + 3, and (v + x) * a over [1, 2, 3]
    mod = rb.parse(LOCAL_RECURSION, "p.rly", init_module=rb.IRModule().import_prelude())
    total, scaled = run_both(mod, (np.int32(2), make_list([1, 2, 3])))
    assert total == 9 and ints(scaled) == [9, 12, 15]
