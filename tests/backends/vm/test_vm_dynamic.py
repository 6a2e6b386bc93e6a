"""The VM on dynamic shapes: dims that are ``?`` or symbolic, computed at run time by shape
functions, against the reference interpreter."""

import numpy as np
import pytest

import relaybench as rb
from relaybench.errors import ExecutionError

HEADER = '#[version = "0.0.5"]\n'
RNG = np.random.default_rng(15)


def _f32(*shape):
    return RNG.uniform(-2, 2, size=shape).astype("float32")


def _check(text, *args, opt_levels=(0, 3)):
    """The VM's results (at each opt_level) against the interpreter's, values and shapes."""
    mod = rb.parse(HEADER + text)
    want = rb.create_executor("interpreter", mod=mod).evaluate()(*args)
    want = want if isinstance(want, tuple) else (want,)
    exes = []
    for level in opt_levels:
        exe = rb.vm.compile(mod, opt_level=level)
        got = rb.vm.VirtualMachine(exe).invoke("main", *args)
        got = got if isinstance(got, tuple) else (got,)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        exes.append(exe)
    return exes


DYNAMIC_PROGRAMS = {
    "concatenate of n and ?": (
        "def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(?, 4), float32]) {"
        " nn.relu(concatenate((add(%x, 1f), %y))) }", lambda: (_f32(3, 4), _f32(2, 4))),
    "reshape is a view": (
        "def @main(%x: Tensor[(n, 4), float32]) { reshape(%x, newshape=[-1, 2]) }",
        lambda: (_f32(5, 4),)),
    "tuple outputs": (
        "def @main(%x: Tensor[(n, 4), float32]) {"
        " %0 = split(%x, indices_or_sections=2, axis=1); (%0.0, sum(%0.1, axis=[0])) }",
        lambda: (_f32(3, 4),)),
    "arange reads its bounds' values": (
        'def @main(%n: float32) { arange(0f, %n, 1f, dtype="float32") }',
        lambda: (np.float32(7),)),
    "strided_slice of ? dims": (
        "def @main(%x: Tensor[(?, ?), float32]) { strided_slice(%x, begin=[1, 0], end=[3, 3]) }",
        lambda: (_f32(5, 6),)),
    "dense and softmax over a symbolic batch": (
        "def @main(%x: Tensor[(b, 8), float32], %w: Tensor[(3, 8), float32]) {"
        " nn.softmax(nn.dense(%x, %w)) }", lambda: (_f32(6, 8), _f32(3, 8))),
}


@pytest.mark.parametrize("name", list(DYNAMIC_PROGRAMS))
def test_dynamic_programs_agree_with_the_interpreter(name):
    text, make = DYNAMIC_PROGRAMS[name]
    _check(text, *make())


def test_bytecode_computes_shapes_at_run_time():
    (exe,) = _check(DYNAMIC_PROGRAMS["concatenate of n and ?"][0],
                    *DYNAMIC_PROGRAMS["concatenate of n and ?"][1](), opt_levels=(3,))
    listing = str(exe.bytecode)
    for word in ("shape_of", "_shape_func", "alloc_storage $6 size=bytes($5)",
                 "alloc_tensor_reg"):
        assert word in listing, word


def test_a_tensor_that_grows_in_a_loop():
    text = '''def @grow(%i: int32, %acc: Tensor[(?, 4), float32]) -> Tensor[(?, 4), float32] {
  if (less(%i, 5)) {
    @grow(add(%i, 1), concatenate((%acc, ones(shape=[1, 4], dtype="float32"))))
  } else { %acc }
}
def @main(%x: Tensor[(1, 4), float32]) -> Tensor[(?, 4), float32] { @grow(0, %x) }'''
    from relaybench.backends.vm.dynamic import DynamicKernel
    x = _f32(1, 4)
    _check(text, x)
    exe = rb.vm.compile(rb.parse(HEADER + text), opt_level=3)
    out = rb.vm.VirtualMachine(exe).run(x)
    np.testing.assert_array_equal(out, np.concatenate([x, np.ones((5, 4), "float32")]))
    # the ? of the accumulator is named for the kernel: one kernel for the five lengths
    (grow,) = [k for k in exe.kernels if isinstance(k, DynamicKernel)]
    assert grow.symbolic is not None and grow.specialized == {}
    assert "any_0" in grow.source("loops")


def test_a_group_the_kernel_layer_cannot_make_symbolic_is_compiled_per_shape():
    # a slice whose extent depends on clamping the bounds against ? has no symbolic extent
    from relaybench.backends.vm.dynamic import DynamicKernel
    text, _ = DYNAMIC_PROGRAMS["strided_slice of ? dims"]
    exe = rb.vm.compile(rb.parse(HEADER + text), opt_level=3)
    (kernel,) = [k for k in exe.kernels if isinstance(k, DynamicKernel)]
    assert kernel.symbolic is None
    vm = rb.vm.VirtualMachine(exe)
    for shape in ((5, 6), (4, 4), (5, 6)):
        x = _f32(*shape)
        np.testing.assert_array_equal(vm.run(x), x[1:3, 0:3])
    assert len(kernel.specialized) == 2


def test_a_symbolic_extent_takes_one_value():
    mod = rb.parse(HEADER + "def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(n), float32]) {"
                            " add(%x, expand_dims(%y, axis=1)) }")
    vm = rb.vm.VirtualMachine(rb.vm.compile(mod, opt_level=3))
    x, y = _f32(3, 4), _f32(3)
    np.testing.assert_allclose(vm.run(x, y), x + y[:, None], rtol=1e-6)
    with pytest.raises(ExecutionError, match=r"input %y: axis 0 is n = 2, but %x gave n = 3"):
        vm.run(x, _f32(2))


def test_shapes_that_do_not_fit_name_the_op():
    mod = rb.parse(HEADER + "def @main(%x: Tensor[(?, 4), float32], %y: Tensor[(?, 4), float32]) {"
                            " add(%x, %y) }")
    vm = rb.vm.VirtualMachine(rb.vm.compile(mod, opt_level=3))
    with pytest.raises(ExecutionError, match="add: .*do not broadcast"):
        vm.run(_f32(3, 4), _f32(2, 4))


# ---- an LSTM over a sequence of symbolic length: one compilation for every length ----------------

LSTM = HEADER + '''
def @step(%xt: Tensor[(1, 128), float32], %h: Tensor[(1, 128), float32],
          %c: Tensor[(1, 128), float32], %wi: Tensor[(512, 128), float32],
          %wh: Tensor[(512, 128), float32], %b: Tensor[(512), float32]) {
  %0 = add(add(nn.dense(%xt, %wi), nn.dense(%h, %wh)), %b);
  %1 = split(%0, indices_or_sections=4, axis=1);
  %2 = add(multiply(sigmoid(%1.1), %c), multiply(sigmoid(%1.0), tanh(%1.2)));
  (multiply(sigmoid(%1.3), tanh(%2)), %2)
}
def @loop(%t: int32, %len: int32, %xs: Tensor[(n, 1, 128), float32],
          %h: Tensor[(1, 128), float32], %c: Tensor[(1, 128), float32],
          %wi: Tensor[(512, 128), float32], %wh: Tensor[(512, 128), float32],
          %b: Tensor[(512), float32]) -> Tensor[(1, 128), float32] {
  if (less(%t, %len)) {
    let %s = @step(take(%xs, %t, axis=0), %h, %c, %wi, %wh, %b);
    @loop(add(%t, 1), %len, %xs, %s.0, %s.1, %wi, %wh, %b)
  } else {
    %h
  }
}
def @main(%xs: Tensor[(n, 1, 128), float32], %wi: Tensor[(512, 128), float32],
          %wh: Tensor[(512, 128), float32], %b: Tensor[(512), float32]) -> Tensor[(1, 128), float32] {
  let %len = take(shape_of(%xs, dtype="int32"), 0);
  let %z = zeros(shape=[1, 128], dtype="float32");
  @loop(0, %len, %xs, %z, %z, %wi, %wh, %b)
}
'''


def _lstm_numpy(xs, wi, wh, b):
    """The same LSTM written with numpy (gates i, f, g, o)."""
    def sigmoid(v):
        return 1 / (1 + np.exp(-v))
    h = c = np.zeros((1, 128), "float32")
    for xt in xs:
        gates = xt @ wi.T + h @ wh.T + b
        i, f, g, o = np.split(gates, 4, axis=1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
    return h


def test_lstm_over_a_symbolic_length_compiles_once():
    from relaybench.backends.build import _jit_stats
    from relaybench.backends.vm.dynamic import DynamicKernel
    mod = rb.parse(LSTM)
    wi, wh = (RNG.normal(0, 0.1, (512, 128)).astype("float32") for _ in range(2))
    b = RNG.normal(0, 0.1, 512).astype("float32")
    exe = rb.vm.compile(mod, opt_level=3)
    dynamic = [k for k in exe.kernels if isinstance(k, DynamicKernel)]
    assert [k.name for k in dynamic] == ["fused_take"] and dynamic[0].symbolic is not None
    assert "serial(n)" not in exe.source("loops", exe.kernels.index(dynamic[0]))  # take: 1 row
    assert "n - 1" in exe.source("loops", exe.kernels.index(dynamic[0]))
    vm = rb.vm.VirtualMachine(exe)
    interpreter = rb.create_executor("interpreter", mod=mod).evaluate()
    before = _jit_stats()
    for n in list(range(1, 13)) + [37, 128, 500]:
        xs = RNG.normal(0, 1, (n, 1, 128)).astype("float32")
        got = vm.run(xs, wi, wh, b)
        np.testing.assert_allclose(got, _lstm_numpy(xs, wi, wh, b), rtol=1e-4, atol=1e-5)
        if n in (1, 7, 500):
            np.testing.assert_allclose(got, interpreter(xs, wi, wh, b), rtol=1e-4, atol=1e-5)
    after = _jit_stats()
    # no kernel was compiled, loaded or specialized while the lengths ran: one compilation
    assert {k: after[k] - before[k] for k in ("compiled", "from_disk", "from_memory")} == \
        {"compiled": 0, "from_disk": 0, "from_memory": 0}
    assert dynamic[0].specialized == {}


def test_a_symbolic_kernel_checks_its_arrays_before_running():
    from relaybench.backends.vm.dynamic import DynamicKernel
    mod = rb.parse(HEADER + "def @main(%x: Tensor[(n, 3), float32]) { nn.relu(add(%x, 1f)) }")
    exe = rb.vm.compile(mod, opt_level=3)
    (kernel,) = [k for k in exe.kernels if isinstance(k, DynamicKernel)]
    assert kernel.symbolic is not None
    x, out = _f32(4, 3), np.empty((4, 3), "float32")
    kernel(x, out)
    np.testing.assert_allclose(out, np.maximum(x + 1, 0))
    with pytest.raises(ExecutionError, match=r"output 0: axis 0 is 5, but n = 4"):
        kernel(x, np.empty((5, 3), "float32"))
    with pytest.raises(ExecutionError, match=r"input 0: expected Tensor\[\(n, 3\), float32\], "
                                             r"given float64\[4, 3\]"):
        kernel(x.astype("float64"), out)


def test_docstring_examples():
    import doctest
    from relaybench.backends.vm import dynamic, serialize, symbolic
    from relaybench.op import shape_funcs
    for module in (dynamic, symbolic, serialize, shape_funcs):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__


def test_a_long_chain_of_single_op_groups_shares_their_functions(monkeypatch):
    # opt_level 0 makes every call its own group: 2,000 calls of two distinct groups are
    # type-checked and hashed as two, not 2,000 (the VM's part of a 20k-op chain's compile time);
    # each distinct group is hashed at most three times (sharing, and its lowering-cache key),
    # the whole program once (its build-cache key)
    from relaybench import op
    from relaybench.ir import structural
    calls = []
    real = structural.structural_hash
    monkeypatch.setattr(structural, "structural_hash", lambda *a, **k: calls.append(1) or
                        real(*a, **k))
    x = rb.var("x", shape=(4,))
    y = x
    for i in range(2000):
        y = op.add(y, rb.const(np.float32(0.5))) if i % 2 == 0 else op.nn.relu(y)
    exe = rb.vm.compile(rb.IRModule.from_expr(rb.Function([x], y)), opt_level=0)
    assert len(calls) <= 7 and len(exe.kernels) == 2
    start = np.array([-600.0, -1.0, 0.0, 2.0], "float32")
    # each add/relu pair: max(v + 0.5, 0); 1000 pairs from v0
    want = start.copy()
    for _ in range(1000):
        want = np.maximum(want + np.float32(0.5), 0)
    np.testing.assert_allclose(rb.vm.VirtualMachine(exe).run(start), want)
