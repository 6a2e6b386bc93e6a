"""``relaybench.build`` and the graph executor, checked against the reference interpreter and numpy.

Each small model runs at opt_level 0 (every operator its own kernel) and 3 (fused, blocked
layouts) and must agree with the interpreter on the unoptimized module.
"""

import os
import re

import numpy as np
import pytest

import relaybench as rb
from relaybench import op
from relaybench.errors import CompileError, ExecutionError

RTOL, ATOL = 1e-4, 1e-5


def reference(mod, *args, **kwargs):
    return rb.create_executor("interpreter", mod=mod).evaluate()(*args, **kwargs)


def assert_agrees(out, ref):
    if isinstance(ref, tuple):
        assert isinstance(out, tuple) and len(out) == len(ref)
        for o, r in zip(out, ref):
            assert_agrees(o, r)
        return
    assert isinstance(out, np.ndarray)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)


def rand(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype("float32")


# ---- small models ------------------------------------------------------------------------------

def conv_bias_relu():
    rng = np.random.default_rng(1)
    x = rb.var("x", shape=(1, 3, 10, 10))
    w = rb.var("w", shape=(8, 3, 3, 3))
    b = rb.var("b", shape=(8,))
    y = op.nn.relu(op.nn.bias_add(op.nn.conv2d(x, w, padding=(1, 1), channels=8,
                                               kernel_size=(3, 3)), b))
    mod = rb.IRModule.from_expr(rb.Function([x, w, b], y))
    params = {"w": rand(rng, 8, 3, 3, 3, scale=0.3), "b": rand(rng, 8)}
    return mod, params, {"x": rand(rng, 1, 3, 10, 10)}


def dense():
    rng = np.random.default_rng(2)
    x = rb.var("x", shape=(4, 32))
    w = rb.var("w", shape=(16, 32))
    b = rb.var("b", shape=(16,))
    y = op.nn.relu(op.nn.bias_add(op.nn.dense(x, w, units=16), b, axis=-1))
    mod = rb.IRModule.from_expr(rb.Function([x, w, b], y))
    params = {"w": rand(rng, 16, 32, scale=0.2), "b": rand(rng, 16)}
    return mod, params, {"x": rand(rng, 4, 32)}


def residual_block():
    rng = np.random.default_rng(3)
    c = 16
    x = rb.var("x", shape=(1, c, 8, 8))
    names, args = [], []

    def param(name, shape):
        v = rb.var(name, shape=shape)
        names.append(name)
        args.append(v)
        return v

    def conv_bn(h, i):
        h = op.nn.conv2d(h, param(f"w{i}", (c, c, 3, 3)), padding=(1, 1), channels=c,
                         kernel_size=(3, 3))
        return op.nn.batch_norm(h, param(f"g{i}", (c,)), param(f"be{i}", (c,)),
                                param(f"m{i}", (c,)), param(f"v{i}", (c,)))[0]

    h = op.nn.relu(conv_bn(x, 0))
    y = op.nn.relu(conv_bn(h, 1) + x)
    mod = rb.IRModule.from_expr(rb.Function([x] + args, y))
    params = {}
    for name, v in zip(names, args):
        shape = tuple(v.type_annotation.shape)
        if name.startswith("w"):
            params[name] = rand(rng, *shape, scale=0.1)
        elif name.startswith("v"):
            params[name] = rng.uniform(0.5, 1.5, shape).astype("float32")
        else:
            params[name] = rand(rng, *shape, scale=0.2)
    return mod, params, {"x": rand(rng, 1, c, 8, 8)}


def tuple_output():
    rng = np.random.default_rng(4)
    x = rb.var("x", shape=(2, 6))
    y = rb.var("y", shape=(2, 6))
    s = x + y
    out = rb.Tuple([op.nn.relu(s), rb.Tuple([s * rb.const(2.0), op.tanh(x)]), x])
    mod = rb.IRModule.from_expr(rb.Function([x, y], out))
    return mod, {}, {"x": rand(rng, 2, 6), "y": rand(rng, 2, 6)}


def split_model():
    rng = np.random.default_rng(5)
    x = rb.var("x", shape=(2, 9, 4))
    parts = op.split(x, indices_or_sections=3, axis=1)
    y = op.concatenate([op.nn.relu(parts[2]), parts[0] * parts[1]], axis=1)
    mod = rb.IRModule.from_expr(rb.Function([x], y))
    return mod, {}, {"x": rand(rng, 2, 9, 4)}


def softmax_model():
    rng = np.random.default_rng(6)
    x = rb.var("x", shape=(3, 40))
    mod = rb.IRModule.from_expr(rb.Function([x], op.nn.softmax(x * rb.const(3.0))))
    return mod, {}, {"x": rand(rng, 3, 40)}


MODELS = {"conv_bias_relu": conv_bias_relu, "dense": dense, "residual_block": residual_block,
          "tuple_output": tuple_output, "split": split_model, "softmax": softmax_model}


@pytest.mark.parametrize("opt_level", [0, 3])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_small_models_agree_with_interpreter(name, opt_level):
    mod, params, inputs = MODELS[name]()
    graph = rb.build(mod, params=params, opt_level=opt_level)
    ref = reference(mod, **inputs, **params)
    out = graph.run(**inputs)
    assert_agrees(out, ref)
    assert graph.input_names == list(inputs)
    assert not graph.host_groups
    # a second run on the same buffers gives the same result
    assert_agrees(graph.run(**inputs), ref)


def test_dense_against_numpy_formula():
    mod, params, inputs = dense()
    out = rb.build(mod, params=params).run(**inputs)
    want = np.maximum(inputs["x"] @ params["w"].T + params["b"], 0)
    np.testing.assert_allclose(out, want, rtol=RTOL, atol=ATOL)


def test_conv_bias_relu_against_numpy_formula():
    mod, params, inputs = conv_bias_relu()
    out = rb.build(mod, params=params, opt_level=3).run(**inputs)
    x = np.pad(inputs["x"][0], ((0, 0), (1, 1), (1, 1)))
    w = params["w"]
    want = np.zeros((8, 10, 10), "float32")
    for i in range(3):
        for j in range(3):
            want += np.einsum("oc,chw->ohw", w[:, :, i, j], x[:, i:i + 10, j:j + 10])
    want = np.maximum(want + params["b"][:, None, None], 0)
    np.testing.assert_allclose(out[0], want, rtol=RTOL, atol=ATOL)


def test_opt_level_changes_the_number_of_groups():
    mod, params, inputs = residual_block()
    g0 = rb.build(mod, params=params, opt_level=0)
    g3 = rb.build(mod, params=params, opt_level=3)
    assert g0.compile_stats.groups > g3.compile_stats.groups
    assert any("nn.conv2d" in k.ops and "add" in k.ops for k in g3.kernels)
    assert all(len(k.ops) <= 1 for k in g0.kernels)


# ---- outputs, inputs and their errors ---------------------------------------------------------

def test_tuple_result_outputs_and_input_passed_through():
    mod, params, inputs = tuple_output()
    graph = rb.build(mod, opt_level=3)
    out = graph.run(**inputs)
    assert graph.get_num_outputs() == 4
    s = inputs["x"] + inputs["y"]
    np.testing.assert_allclose(graph.get_output(0), np.maximum(s, 0), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(graph.get_output(1), 2 * s, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(graph.get_output(3), inputs["x"])
    assert isinstance(out[1], tuple) and len(out[1]) == 2
    # results are copies: the next run does not change them
    kept = out[0].copy()
    graph.run(x=inputs["x"] * 0 + 5, y=inputs["y"])
    np.testing.assert_array_equal(out[0], kept)
    with pytest.raises(IndexError):
        graph.get_output(4)


def two_input_graph():
    x = rb.var("x", shape=(2, 3))
    y = rb.var("y", shape=(2, 3), dtype="float32")
    mod = rb.IRModule.from_expr(rb.Function([x, y], op.nn.relu(x) * y))
    return rb.build(mod, opt_level=3)


@pytest.mark.parametrize("bad, what", [
    ({"z": np.ones((2, 3), "float32")}, "no input named 'z'"),
    ({"y": np.ones((3, 2), "float32")}, "wrong shape"),
    ({"y": np.ones((2, 3), "float64")}, "wrong dtype"),
    ({"y": np.ones((2, 3), "int32")}, "wrong dtype"),
])
def test_bad_inputs_are_rejected_before_anything_runs(bad, what):
    graph = two_input_graph()
    a, b = np.full((2, 3), 2.0, "float32"), np.full((2, 3), 3.0, "float32")
    first = graph.run(x=a, y=b)
    np.testing.assert_array_equal(first, np.full((2, 3), 6.0))
    with pytest.raises(ExecutionError, match=re.escape(what)) as info:
        graph.run(x=a * 10, **bad)
    err = info.value
    name = next(iter(bad))
    assert err.input_name == name
    if what != "no input named 'z'":
        assert err.expected == "Tensor[(2, 3), float32]"
        assert err.given.startswith("Tensor[(") and err.given != err.expected
    # nothing ran and nothing was copied: the outputs and the inputs are the first run's
    np.testing.assert_array_equal(graph.get_output(0), first)
    np.testing.assert_array_equal(graph.run(), first)


def test_missing_input_and_conversion_of_lists():
    graph = two_input_graph()
    with pytest.raises(ExecutionError, match="input 'y'") as info:
        graph.run(x=np.ones((2, 3), "float32"))
    assert info.value.input_name == "y"
    assert info.value.expected == "Tensor[(2, 3), float32]"
    out = graph.run(x=[[1, -2, 3], [4, 5, -6]], y=[[1] * 3] * 2)     # lists take the input dtype
    np.testing.assert_array_equal(out, [[1, 0, 3], [4, 5, 0]])
    with pytest.raises(ExecutionError, match="wrong shape"):
        graph.set_input("x", [1.0, 2.0])
    graph.set_input("x", np.zeros((2, 3), "float32"))
    np.testing.assert_array_equal(graph.run(), np.zeros((2, 3)))
    assert graph.input_info() == {"x": ((2, 3), "float32"), "y": ((2, 3), "float32")}


# ---- the memory plan ---------------------------------------------------------------------------

def tanh_chain(n, shape=(8, 16)):
    x = rb.var("x", shape=shape)
    y = x
    for _ in range(n):
        y = op.tanh(y)
    return rb.IRModule.from_expr(rb.Function([x], y))


def test_memory_plan_reuses_storage_on_a_chain():
    graph = rb.build(tanh_chain(10), opt_level=0)
    plan = graph.memory_plan()
    assert graph.compile_stats.groups == 10
    assert plan.tensors == 10
    assert plan.storages <= 3
    assert plan.planned_bytes < plan.unplanned_bytes
    assert "storages" in repr(plan)
    x = np.random.default_rng(0).standard_normal((8, 16)).astype("float32")
    want = x
    for _ in range(10):
        want = np.tanh(want)
    np.testing.assert_allclose(graph.run(x=x), want, rtol=RTOL, atol=1e-6)


def test_memory_plan_keeps_live_tensors_apart():
    # every intermediate of the residual block is read later; buffers must not be shared early
    x = rb.var("x", shape=(4, 8))
    a = op.tanh(x)
    b = op.sigmoid(a)
    c = op.exp(b * rb.const(0.1))
    d = a + b + c          # a, b and c are all live here
    mod = rb.IRModule.from_expr(rb.Function([x], d))
    graph = rb.build(mod, opt_level=0)
    arr = np.random.default_rng(1).standard_normal((4, 8)).astype("float32")
    assert_agrees(graph.run(x=arr), reference(mod, arr))
    plan = graph.memory_plan()
    live = [e for e in graph.graph.entries if e.kind == "node"]
    assert plan.storages < len(live)


def test_graph_outputs_keep_their_own_storage():
    # t2 is an output read by nothing after the third op; its storage must not be handed on
    x = rb.var("x", shape=(16,))
    ts = [x]
    for i in range(6):
        ts.append(op.tanh(ts[-1]) if i % 2 else op.sigmoid(ts[-1]))
    mod = rb.IRModule.from_expr(rb.Function([x], rb.Tuple([ts[2], ts[6]])))
    graph = rb.build(mod, opt_level=0)
    plan = graph.memory_plan()
    arr = np.linspace(-2, 2, 16, dtype="float32")
    assert_agrees(graph.run(x=arr), reference(mod, arr))
    outputs = {plan.storage_of[e] for e in graph.graph.outputs}
    assert len(outputs) == 2 and outputs <= plan.dedicated
    others = {sid for e, sid in plan.storage_of.items() if e not in graph.graph.outputs}
    assert not others & outputs


def test_unused_field_of_a_tuple_result_is_released():
    x = rb.var("x", shape=(6, 4))
    parts = op.split(x, indices_or_sections=3, axis=0)
    y = op.tanh(op.tanh(op.tanh(parts[1])))
    mod = rb.IRModule.from_expr(rb.Function([x], y))
    graph = rb.build(mod, opt_level=0)
    arr = np.random.default_rng(4).standard_normal((6, 4)).astype("float32")
    np.testing.assert_allclose(graph.run(x=arr), np.tanh(np.tanh(np.tanh(arr[2:4]))),
                               rtol=RTOL, atol=1e-6)
    plan = graph.memory_plan()
    assert plan.tensors == 6 and plan.storages <= 4


def test_inputs_and_constants_given_back_are_copied():
    x = rb.var("x", shape=(3,))
    c = np.array([1.0, 2.0, 3.0], "float32")
    mod = rb.IRModule.from_expr(rb.Function([x], rb.Tuple([x, rb.const(c), x + x])))
    graph = rb.build(mod, opt_level=3)
    arr = np.array([4.0, 5.0, 6.0], "float32")
    out = graph.run(x=arr)
    np.testing.assert_array_equal(out[0], arr)
    np.testing.assert_array_equal(out[1], c)
    np.testing.assert_array_equal(out[2], 2 * arr)
    out[0][:] = 0
    out[1][:] = 0
    np.testing.assert_array_equal(graph.run(x=arr)[1], c)
    identity = rb.build(rb.IRModule.from_expr(rb.Function([x], x)))
    assert identity.compile_stats.groups == 0
    np.testing.assert_array_equal(identity.run(x=arr), arr)


def test_long_chain_plans_and_runs_without_recursion():
    n = 2000
    graph = rb.build(tanh_chain(n, shape=(4,)), opt_level=0)
    assert graph.compile_stats.groups == n
    assert graph.compile_stats.kernels == 1            # identical groups share one kernel
    assert len(graph.kernels) == 1 and len(graph.groups) == n
    assert graph.memory_plan().storages <= 3
    x = np.array([0.5, -1.0, 2.0, 0.0], "float32")
    want = x
    for _ in range(n):
        want = np.tanh(want)
    np.testing.assert_allclose(graph.run(x=x), want, rtol=1e-3, atol=1e-6)


# ---- kernels, dedup, host fallback, errors ----------------------------------------------------

def test_identical_groups_compile_once():
    x = rb.var("x", shape=(2, 8))
    w = rb.const(np.full((8, 8), 0.1, "float32"))
    h = x
    for _ in range(3):
        h = op.nn.relu(op.nn.dense(h, w, units=8))
    mod = rb.IRModule.from_expr(rb.Function([x], h))
    graph = rb.build(mod, opt_level=3)
    assert graph.compile_stats.groups == 3
    assert graph.compile_stats.kernels == 1
    names = [name for name, _, _ in graph.groups]
    assert len(set(names)) == 3 and all(n.startswith(graph.kernels[0].name) for n in names)
    arr = np.random.default_rng(2).standard_normal((2, 8)).astype("float32")
    assert_agrees(graph.run(x=arr), reference(mod, arr))


def test_compile_stats_count_kernels_read_from_the_disk_cache(tmp_path):
    import subprocess
    import sys
    script = ("import relaybench as rb\n"
              "from relaybench import op\n"
              "x = rb.var('x', shape=(4, 8))\n"
              "y = op.nn.relu(op.nn.dense(x, rb.const(__import__('numpy').ones((8, 8), 'float32')),"
              " units=8))\n"
              "s = rb.build(rb.IRModule.from_expr(rb.Function([x], op.tanh(y)))).compile_stats\n"
              "print(s.kernels, s.llvm_compiled, s.from_disk)\n")
    env = dict(os.environ, RB_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, check=True).stdout.split() for _ in range(2)]
    kernels, compiled, from_disk = map(int, runs[0])
    assert kernels >= 1 and compiled >= kernels and from_disk == 0
    kernels2, compiled2, from_disk2 = map(int, runs[1])
    assert kernels2 == kernels and compiled2 == 0 and from_disk2 == compiled


def test_group_without_compute_runs_on_the_host(monkeypatch):
    from relaybench.op.registry import get_opdef
    monkeypatch.setattr(get_opdef("tanh"), "compute", None)
    monkeypatch.setenv("RB_LOWERING_CACHE", "off")   # lower every group with the patched op
    x = rb.var("x", shape=(3, 4))
    mod = rb.IRModule.from_expr(rb.Function([x], op.tanh(op.nn.relu(x) * rb.const(2.0))
                                            + rb.const(1.0)))
    graph = rb.build(mod, opt_level=3)
    assert graph.host_groups and all("tanh" in name for name in graph.host_groups)
    assert graph.compile_stats.host_kernels == len(graph.host_groups)
    arr = np.random.default_rng(3).standard_normal((3, 4)).astype("float32")
    np.testing.assert_allclose(graph.run(x=arr), np.tanh(np.maximum(arr, 0) * 2) + 1,
                               rtol=RTOL, atol=ATOL)
    profile = graph.profile(number=2)
    host_rows = [r for r in profile.groups if r["group"] in graph.host_groups]
    assert host_rows and all(r["rule"] == "host (reference)" for r in host_rows)
    assert "host (reference)" in graph.source("loops", graph.host_groups[0])


@pytest.mark.parametrize("threads", [1, 2])
def test_compiled_kernels_run_from_one_call(threads):
    """A module whose kernels are all compiled runs them from one call into compiled code (a
    Steps program); its result is the interpreter's, run after run."""
    from relaybench.backends.llvm.spinpool import Steps
    rng = np.random.default_rng(5)
    x = rb.var("x", shape=(1, 8, 12, 12))
    w1, w2 = rand(rng, 16, 8, 3, 3, scale=0.2), rand(rng, 16, 16, 3, 3, scale=0.2)
    y = op.nn.relu(op.nn.conv2d(x, rb.const(w1), padding=(1, 1)))
    y = op.nn.max_pool2d(op.nn.conv2d(y, rb.const(w2), padding=(1, 1)), pool_size=(2, 2),
                         strides=(2, 2))
    mod = rb.IRModule.from_expr(rb.Function([x], op.nn.softmax(op.nn.batch_flatten(y))))
    graph = rb.build(mod, opt_level=3, num_threads=threads)
    assert len(graph._calls) >= 3
    assert len(graph._run_list) == 1 and isinstance(graph._run_list[0], Steps)
    assert len(graph._run_list[0]) >= len(graph._calls)
    data = rand(rng, 1, 8, 12, 12)
    want = reference(mod, data)
    for _ in range(20):
        assert_agrees(graph.run(x=data), want)


def test_a_host_kernel_splits_the_compiled_runs(monkeypatch):
    """A host (reference) kernel between compiled ones is called from Python; the compiled
    kernels before and after it run as programs of their own, in order."""
    from relaybench.backends.llvm.spinpool import Steps
    from relaybench.op.registry import get_opdef
    monkeypatch.setattr(get_opdef("tanh"), "compute", None)
    monkeypatch.setenv("RB_LOWERING_CACHE", "off")
    x = rb.var("x", shape=(3, 4))
    a = op.exp(op.nn.relu(x) * rb.const(0.5))
    b = op.sqrt(op.tanh(op.negative(a)) + rb.const(2.0))
    mod = rb.IRModule.from_expr(rb.Function([x], op.log(b + rb.const(1.0)) * rb.const(3.0)))
    graph = rb.build(mod, opt_level=0, num_threads=2)
    kinds = ["steps" if isinstance(r, Steps) else "host" if r in graph._calls and
             graph._graph.nodes[graph._calls.index(r)].kernel.host else "call"
             for r in graph._run_list]
    assert kinds.count("host") == 1
    at = kinds.index("host")
    assert at > 0 and at < len(kinds) - 1 and "steps" in kinds[:at] and "steps" in kinds[at:]
    arr = np.random.default_rng(4).standard_normal((3, 4)).astype("float32")
    want = np.log(np.sqrt(np.tanh(-np.exp(np.maximum(arr, 0) * 0.5)) + 2) + 1) * 3
    for _ in range(3):
        np.testing.assert_allclose(graph.run(x=arr), want, rtol=RTOL, atol=ATOL)


def test_other_compile_errors_name_the_group(monkeypatch):
    from relaybench.op.registry import get_opdef

    def broken(inputs, attrs, out_type):
        raise CompileError("sigmoid: this compute is broken on purpose")

    monkeypatch.setattr(get_opdef("sigmoid"), "compute", broken)
    monkeypatch.setenv("RB_LOWERING_CACHE", "off")   # lower every group with the patched op
    x = rb.var("x", shape=(3, 4))
    mod = rb.IRModule.from_expr(rb.Function([x], op.sigmoid(x)))
    with pytest.raises(CompileError, match="fused group fused_sigmoid: .*broken on purpose"):
        rb.build(mod)


def test_control_flow_is_rejected_with_a_pointer_to_the_interpreter():
    x = rb.var("x", shape=(2,))
    t = rb.var("t", shape=(2,))
    c = rb.var("c", shape=(), dtype="bool")
    f = rb.var("f", type_annotation=rb.ir.types.FuncType([t.type_annotation], t.type_annotation))
    # (build turns the let of a function into a direct call of it before the executor sees it)
    programs = [("a call of a function that is not a fused (Primitive) group",
                 rb.Function([x], rb.Let(f, rb.Function([t], op.tanh(t)), rb.Call(f, [x])))),
                ("an if", rb.Function([x, c], rb.If(c, op.tanh(x), x))),
                ("an if", rb.Function([x, c], rb.Let(t, op.tanh(x), rb.If(c, t, x))))]
    for what, func in programs:
        with pytest.raises(CompileError, match="static dataflow") as info:
            rb.build(rb.IRModule.from_expr(func), opt_level=3)
        assert what in str(info.value) and "interpreter" in str(info.value)


# ---- let bindings: a let-bound variable is the node of its value ------------------------------

_LET_PROGRAMS = {
    # the brief's example, and a chain whose values are all used twice
    "chain": """fn (%x: Tensor[(3), float32]) {
  let %y = add(%x, %x);
  multiply(%y, %y)
}""",
    "shared": """fn (%x: Tensor[(3), float32], %w: Tensor[(3), float32]) {
  let %a = tanh(%x);
  let %b = multiply(%a, %w);
  let %c = add(%a, %b);
  let %d = %c;
  (subtract(%d, %a), %b, %d, %x)
}""",
    # a let of a tuple, projected, and an alias of it returned whole
    "tuple": """fn (%x: Tensor[(3), float32], %w: Tensor[(3), float32]) {
  let %t = (exp(%x), negative(%w));
  let %u = %t;
  let %s = add(%u.0, %t.1);
  (%s, %u, %t.1)
}""",
    # a let whose body is a graph-form binding using values from outside the let
    "nested": """fn (%x: Tensor[(3), float32]) {
  %0 = sigmoid(%x);
  let %y = (let %z = multiply(%0, %x); add(%z, %0));
  subtract(%y, %0)
}""",
}


def _let_numpy(name, x, w):
    if name == "chain":
        return (x + x) * (x + x)
    if name == "shared":
        a = np.tanh(x)
        b = a * w
        c = a + b
        return (c - a, b, c, x)
    if name == "tuple":
        t = (np.exp(x), -w)
        return (t[0] + t[1], t, t[1])
    s = 1 / (1 + np.exp(-x))
    return s * x + s - s


@pytest.mark.parametrize("name", sorted(_LET_PROGRAMS))
@pytest.mark.parametrize("opt_level", [0, 3])
def test_let_bindings_run_like_the_interpreter(name, opt_level):
    func = rb.ir.parse_expr(_LET_PROGRAMS[name])
    mod = rb.IRModule.from_expr(func)
    x = np.array([0.5, -1.0, 2.0], "float32")
    w = np.array([1.5, 0.25, -3.0], "float32")
    args = (x, w)[:len(func.params)]
    ref = reference(mod, *args)
    graph = rb.build(mod, opt_level=opt_level)
    out = graph.run(**{p.name_hint: a for p, a in zip(func.params, args)})
    assert_agrees(out, ref)
    want = _let_numpy(name, x, w)
    stack = [(out, want)]
    while stack:
        got, expected = stack.pop()
        if isinstance(expected, tuple):
            assert isinstance(got, tuple) and len(got) == len(expected)
            stack.extend(zip(got, expected))
        else:
            np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)


def test_let_value_used_twice_is_computed_once():
    x = rb.var("x", shape=(3,))
    y = rb.var("y", shape=(3,))
    func = rb.Function([x], rb.Let(y, op.tanh(x), op.add(y, y)))
    graph = rb.build(rb.IRModule.from_expr(func), opt_level=0)
    assert graph.compile_stats.groups == 2            # one tanh, one add
    arr = np.array([0.1, -0.2, 0.3], "float32")
    np.testing.assert_allclose(graph.run(x=arr), 2 * np.tanh(arr), rtol=RTOL)


def test_fusion_crosses_dataflow_lets():
    # rb.build turns dataflow lets into graph edges first, so FuseOps sees one chain
    x = rb.var("x", shape=(3,))
    y = rb.var("y")
    func = rb.Function([x], rb.Let(y, op.add(x, x), op.multiply(y, y)))
    graph = rb.build(rb.IRModule.from_expr(func), opt_level=3)
    assert graph.compile_stats.groups == 1
    arr = np.array([1.0, -2.0, 3.0], "float32")
    np.testing.assert_allclose(graph.run(x=arr), (2 * arr) ** 2, rtol=RTOL)


def test_100k_let_chain_builds_and_runs_without_recursion():
    # lets of tuples that swap their fields, with an add every 10,000 bindings
    n = 100_000
    x, y = rb.var("x", shape=(3,)), rb.var("y", shape=(3,))
    pair = rb.ir.types.TupleType([x.type_annotation, y.type_annotation])
    vs = [rb.var(f"v{i}", type_annotation=pair) for i in range(n)]
    body = op.subtract(rb.TupleGetItem(vs[-1], 0), rb.TupleGetItem(vs[-1], 1))
    for i in range(n - 1, -1, -1):
        prev = rb.Tuple([x, y]) if i == 0 else vs[i - 1]
        a, b = rb.TupleGetItem(prev, 0), rb.TupleGetItem(prev, 1)
        value = rb.Tuple([op.add(a, b), b]) if i % 10_000 == 9_999 else rb.Tuple([b, a])
        body = rb.Let(vs[i], value, body)
    mod = rb.IRModule.from_expr(rb.Function([x, y], body))
    graph = rb.build(mod, opt_level=0)
    assert graph.compile_stats.groups == 11
    xv = np.array([0.0, 1.0, 2.0], "float32")
    yv = np.array([10.0, 10.0, 10.0], "float32")
    a, b = xv, yv                                   # the same sweep in numpy
    for i in range(n):
        a, b = (a + b, b) if i % 10_000 == 9_999 else (b, a)
    np.testing.assert_array_equal(graph.run(x=xv, y=yv), a - b)


# ---- timing, profile, source -------------------------------------------------------------------

def test_benchmark_result_structure():
    mod, params, inputs = conv_bias_relu()
    graph = rb.build(mod, params=params)
    with pytest.raises(ExecutionError, match="input 'x'"):
        graph.benchmark(number=1, repeat=1)
    result = graph.benchmark(number=3, repeat=4, warmup=1, **inputs)
    assert len(result.times_ms) == 4 and result.number == 3 and result.repeat == 4
    assert result.min_ms <= result.median_ms <= result.max_ms
    assert result.min_ms <= result.mean_ms <= result.max_ms and result.std_ms >= 0
    assert re.fullmatch(r"[0-9.e+-]+ ms ± [0-9.e+-]+ \(median of 4 x 3\)", repr(result))


def test_profile_structure():
    mod, params, inputs = residual_block()
    graph = rb.build(mod, params=params, opt_level=3)
    graph.set_input(**inputs)
    profile = graph.profile(number=3)
    rows = profile.groups
    assert [r["group"] for r in rows] == [k.name for k in graph.kernels]
    assert sum(r["calls"] for r in rows) == graph.compile_stats.groups
    assert profile.rows[-1]["group"] == "total"
    assert abs(sum(r["%"] for r in rows) - 100) < 1
    assert set(rows[0]) >= {"group", "ops", "pattern", "rule", "calls", "ms/call", "%", "GFLOP/s"}
    conv_rows = [r for r in rows if "nn.conv2d" in r["ops"]]
    assert conv_rows and all(isinstance(r["GFLOP/s"], float) and r["GFLOP/s"] > 0
                             for r in conv_rows)
    text = str(profile)
    assert "GFLOP/s" in text and "total" in text
    assert "<table>" in profile._repr_html_()


def test_source_views_and_listing():
    mod, params, inputs = conv_bias_relu()
    graph = rb.build(mod, params=params, opt_level=3)
    conv = next(k for k in graph.kernels if k.lowered.anchor == "nn.conv2d")
    loops = graph.source("loops", conv.name)
    assert loops.startswith(f"def {conv.name}(") and "for " in loops
    assert "define" in graph.source("llvm", conv.name)
    assert graph.source("asm", conv.name).strip()
    everything = graph.source("loops")
    assert all(f"def {k.name}(" in everything for k in graph.kernels)
    with pytest.raises(KeyError, match="no group named"):
        graph.source("loops", "nope")
    assert conv.lowered.flops == 2 * 8 * 10 * 10 * 3 * 3 * 3
    stats = graph.compile_stats
    assert stats.kernels == len(graph.kernels) and stats.lower_seconds >= 0
    assert stats.llvm_compiled + stats.from_disk + stats.from_memory >= 1
    assert "main" in str(graph.mod) and "Primitive=1" in str(graph.mod)


def test_num_threads_from_build_target_and_setter():
    mod, params, inputs = conv_bias_relu()
    ref = reference(mod, **inputs, **params)
    graph = rb.build(mod, target="llvm -num-threads=2", params=params)
    assert graph.num_threads == 2
    graph = rb.build(mod, params=params, num_threads=1)
    assert graph.num_threads == 1
    assert_agrees(graph.run(**inputs), ref)
    graph.set_num_threads(2)
    assert graph.num_threads == 2
    assert_agrees(graph.run(**inputs), ref)
    with pytest.raises(ValueError):
        graph.set_num_threads(-1)
    with rb.config.Context(RB_NUM_THREADS=1):
        assert rb.build(mod, params=params).num_threads == 1
    with rb.config.Context(RB_NUM_THREADS=0):     # 0: one thread per core
        assert rb.build(mod, params=params).num_threads == (os.cpu_count() or 1)


# ---- create_executor("graph") ------------------------------------------------------------------

def test_create_executor_graph():
    mod, params, inputs = dense()
    x = inputs["x"]
    full = rb.IRModule.from_expr(mod["main"])
    run = rb.create_executor("graph", mod=full, target="llvm").evaluate()
    ref = reference(mod, x, params["w"], params["b"])
    assert_agrees(run(x, params["w"], params["b"]), ref)
    assert_agrees(run(x=x, w=params["w"], b=params["b"]), ref)
    assert_agrees(run(x, b=params["b"], w=params["w"]), ref)
    with pytest.raises(ExecutionError, match="wrong dtype"):
        run(x.astype("float64"), params["w"], params["b"])


def test_create_executor_graph_uses_the_pass_context_and_builds_once():
    mod = tanh_chain(3)
    ex = rb.create_executor("graph", mod=mod)
    with rb.PassContext(opt_level=0):
        run = ex.evaluate()
    assert run.graph_module.compile_stats.groups == 3
    assert ex.evaluate().graph_module is run.graph_module
    x = np.ones((8, 16), "float32")
    np.testing.assert_allclose(run(x), np.tanh(np.tanh(np.tanh(x))), rtol=RTOL)
    assert rb.create_executor("graph", mod=mod).evaluate().graph_module.compile_stats.groups == 1


def test_inputs_named_like_set_inputs_own_parameters():
    """Inputs called ``name`` and ``value`` (ONNX models have them) are keywords like any other."""
    mod = rb.parse('#[version = "0.0.5"]\n'
                   'def @main(%name: Tensor[(2), float32], %value: Tensor[(2), float32]) '
                   '{ subtract(%name, %value) }')
    lib = rb.build(mod, target="llvm")
    a, b = np.array([5.0, 1.0], "float32"), np.array([2.0, 4.0], "float32")
    np.testing.assert_array_equal(lib.run(name=a, value=b), a - b)
    lib.set_input("value", a)
    lib.set_input(name=b)
    np.testing.assert_array_equal(lib.run(), b - a)


# ---- views and inputs read in place --------------------------------------------------------------

def _view_chain():
    """x -> tanh -> reshape (a view) -> ... the view read again at the end, after other calls
    that could have taken its memory had the plan freed it early."""
    x = rb.var("x", shape=(2, 3, 4))
    t = op.tanh(x)
    flat = op.reshape(t, newshape=(6, 4))
    other = op.exp(op.negative(op.sigmoid(flat)))
    for _ in range(3):
        other = op.sigmoid(op.negative(other))
    return rb.IRModule.from_expr(rb.Function([x], op.add(other, flat)))


def test_a_view_takes_no_memory_and_keeps_what_it_reads_alive():
    mod = _view_chain()
    graph = rb.build(mod, opt_level=0)
    plan = graph.memory_plan()
    names = {n.index: n.kernel.ops for n in graph.graph.nodes}
    assert [names[i] for i in graph._views] == [["reshape"]]
    (view_out, root), = plan.views.items()
    assert plan.storage_of[view_out] == plan.storage_of[root]
    # no call between the view's source and its last reader writes that storage
    last = max(n.index for n in graph.graph.nodes if view_out in n.inputs)
    first = next(n.index for n in graph.graph.nodes if root in n.outputs)
    for node in graph.graph.nodes[first + 1:last]:
        assert node.index in graph._views or all(
            plan.storage_of.get(e) != plan.storage_of[root] for e in node.outputs)
    arr = np.random.default_rng(1).standard_normal((2, 3, 4)).astype("float32")
    flat = np.tanh(arr).reshape(6, 4)
    other = np.exp(-1 / (1 + np.exp(-flat)))
    for _ in range(3):
        other = 1 / (1 + np.exp(other))
    np.testing.assert_allclose(graph.run(x=arr), other + flat, rtol=RTOL, atol=ATOL)
    assert graph.profile(number=2).groups[1]["rule"] == "view"


def test_a_view_of_the_input_and_a_returned_view_are_copies_where_needed():
    """A reshape of the input is a view of the caller's array; a reshape that is the graph's
    output has memory of its own."""
    x = rb.var("x", shape=(4, 6))
    y = op.reshape(op.exp(op.reshape(x, newshape=(2, 12))), newshape=(24,))
    graph = rb.build(rb.IRModule.from_expr(rb.Function([x], y)), opt_level=0)
    assert len(graph._views) == 1 and graph.graph.inputs[0][1] in graph.memory_plan().views.values()
    arr = np.arange(24, dtype="float32").reshape(4, 6) / 10
    out = graph.run(x=arr)
    np.testing.assert_allclose(out, np.exp(arr).ravel(), rtol=RTOL)
    out[:] = 0          # the caller's copy: the module's output buffer keeps the result
    np.testing.assert_allclose(graph.get_output(0), np.exp(arr).ravel(), rtol=RTOL)
    last = graph.graph.nodes[-1]
    assert last.index not in graph._views and last.kernel.ops == ["reshape"]


@pytest.mark.parametrize("threads", [1, 2])
def test_run_reads_its_input_in_place_and_set_input_copies(threads):
    """run(x=a) points the kernels at ``a`` (a later run() reads ``a`` as it is then);
    set_input copies; arrays the kernels cannot read in place (Fortran order, misaligned,
    another stride) are copied; every path gives numpy's result."""
    rng = np.random.default_rng(2)
    x = rb.var("x", shape=(1, 8, 10, 10))
    w = rand(rng, 16, 8, 3, 3, scale=0.2)
    mod = rb.IRModule.from_expr(rb.Function([x], op.nn.relu(op.nn.conv2d(x, rb.const(w),
                                                                         padding=(1, 1)))))
    graph = rb.build(mod, opt_level=3, num_threads=threads)
    assert "x" in graph._input_slots

    def want(a):
        return reference(mod, np.ascontiguousarray(a, dtype="float32"))

    a, b = rand(rng, 1, 8, 10, 10), rand(rng, 1, 8, 10, 10)
    assert_agrees(graph.run(x=a), want(a))
    before = graph._arrays[graph.graph.inputs[0][1]].copy()
    a *= 2                                  # read in place: the next run() sees it
    assert_agrees(graph.run(), want(a))
    a += 1                                  # the same array given again
    assert_agrees(graph.run(x=a), want(a))
    np.testing.assert_array_equal(graph._arrays[graph.graph.inputs[0][1]], before)
    graph.set_input(x=b)
    b_copy = b.copy()
    b[...] = 0                              # set_input copied: no effect
    assert_agrees(graph.run(), want(b_copy))
    assert graph.benchmark(number=2, repeat=1).median_ms > 0
    np.testing.assert_allclose(graph.get_output(0), want(b_copy), rtol=RTOL, atol=ATOL)
    fortran = np.asfortranarray(a)
    raw = np.zeros(a.size * 4 + 1, np.uint8)
    misaligned = np.frombuffer(raw[1:].data, dtype="float32").reshape(a.shape)
    misaligned[...] = a
    strided = np.repeat(a, 2, axis=3)[..., ::2]
    for arr in (fortran, misaligned, strided):
        assert_agrees(graph.run(x=arr), want(a))
    assert_agrees(graph.run(x=b_copy), want(b_copy))
    graph.set_num_threads(3 - threads)      # rebound: still reads the array given last
    b_copy += 1
    assert_agrees(graph.run(), want(b_copy))
    graph.profile(number=1)
    np.testing.assert_allclose(graph.get_output(0), want(b_copy), rtol=RTOL, atol=ATOL)


def test_an_input_returned_or_read_by_a_host_kernel_is_copied(monkeypatch):
    from relaybench.op.registry import get_opdef
    x = rb.var("x", shape=(3, 4))
    graph = rb.build(rb.IRModule.from_expr(rb.Function([x], rb.Tuple([x, op.exp(x)]))),
                     opt_level=0)
    assert "x" not in graph._input_slots
    arr = np.ones((3, 4), "float32")
    out = graph.run(x=arr)
    arr[...] = 5
    np.testing.assert_allclose(out[0], 1)
    monkeypatch.setattr(get_opdef("tanh"), "compute", None)
    monkeypatch.setenv("RB_LOWERING_CACHE", "off")
    host = rb.build(rb.IRModule.from_expr(rb.Function([x], op.tanh(x))), opt_level=0)
    assert host.host_groups and "x" not in host._input_slots
    np.testing.assert_allclose(host.run(x=arr), np.tanh(arr), rtol=RTOL)
