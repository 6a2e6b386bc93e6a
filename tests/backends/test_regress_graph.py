"""Regressions of the graph executor, lowering and the kernel layer found by random programs.

Every program is built at opt_level 0 to 3 and checked against numpy formulas or the reference
interpreter running the unoptimized module.

* Rank-0 tensors stay rank-0 everywhere: ``np.ascontiguousarray`` gives a rank-0 array back
  with shape ``(1,)``, so a constant result came back as ``(1,)`` and a bound scalar parameter
  inside a tuple reached its kernel as ``Tensor[(1,)]``.
* A fused group whose outputs do not read the anchor's values (``ones_like``, ``zeros_like``,
  ``full_like``, ``reshape_like`` of a convolution) used to schedule the unread anchor.
* An epilogue reading its anchor through ``tile``'s modulo made ``compute_at`` fail.
"""

import numpy as np
import pytest

import relaybench as rb

pytest.importorskip("llvmlite")

LEVELS = (0, 1, 2, 3)
HEADER = '#[version = "0.0.5"]\n'


def _module(text):
    return rb.parse(HEADER + text)


def _reference(mod, inputs):
    names = [p.name_hint for p in mod["main"].params]
    return rb.create_executor("interpreter", mod=mod).evaluate()(*[inputs[n] for n in names])


def _agree(out, ref):
    if isinstance(ref, (tuple, list)):
        assert isinstance(out, tuple) and len(out) == len(ref)
        for o, r in zip(out, ref):
            _agree(o, r)
        return
    ref = np.asarray(ref)
    assert isinstance(out, np.ndarray)
    assert out.shape == ref.shape and out.dtype == ref.dtype, (out.shape, ref.shape)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def _run(mod, level, inputs, params=None):
    return rb.build(mod, opt_level=level, params=params).run(**inputs)


# ---- rank-0 values -----------------------------------------------------------------------------

@pytest.mark.parametrize("level", LEVELS)
def test_rank0_constants_and_folded_results_keep_rank_0(level):
    out = _run(_module("def @main() { 3f }"), level, {})
    assert out.shape == () and out.dtype == np.float32 and out == 3.0
    out = _run(_module("def @main() { abs(-2f) }"), level, {})
    assert out.shape == () and out == 2.0
    out = _run(_module("def @main(%x: Tensor[(2,), float32]) { (add(%x, 1f), 4i32, %x) }"),
               level, {"x": np.array([1, 2], "float32")})
    assert [o.shape for o in out] == [(2,), (), (2,)] and out[1].dtype == np.int32
    assert out[0].tolist() == [2.0, 3.0] and out[1] == 4


@pytest.mark.parametrize("level", LEVELS)
def test_rank0_params_inside_tuples(level):
    x, w = np.array(1.5, "float32"), np.array(-2.5, "float32")
    mod = _module("def @main(%x: float32, %w: float32) { stack((%x, %w)) }")
    out = _run(mod, level, {"x": x}, params={"w": w})
    assert out.shape == (2,) and out.tolist() == [1.5, -2.5]
    mod = _module("def @main(%x: float32, %w: float32) { "
                  "(%w, %x, 2f, (abs(%w), stack((%w, %w)))) }")
    out = _run(mod, level, {"x": x}, params={"w": w})
    assert [o.shape for o in out[:3]] == [(), (), ()] and out[3][0].shape == ()
    assert (out[0], out[1], out[2], out[3][0]) == (-2.5, 1.5, 2.0, 2.5)
    assert out[3][1].tolist() == [-2.5, -2.5]
    mod = _module("def @main(%x: Tensor[(3, 4), float32], %i: int32) { take(%x, %i, axis=0) }")
    table = np.arange(12, dtype="float32").reshape(3, 4)
    out = _run(mod, level, {"x": table}, params={"i": np.array(2, "int32")})
    assert out.tolist() == table[2].tolist()


UNARY = {"abs": np.abs, "exp": np.exp, "negative": np.negative,
         "nn.relu": lambda v: np.maximum(v, 0), "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
         "tanh": np.tanh, "floor": np.floor, "ceil": np.ceil, "round": np.round,
         "sqrt": lambda v: np.sqrt(np.abs(v)),
         "ones_like": np.ones_like, "zeros_like": np.zeros_like}
BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
          "maximum": np.maximum, "minimum": np.minimum, "power": lambda a, b: np.power(abs(a), b),
          "less": np.less, "equal": np.equal}


@pytest.mark.parametrize("level", LEVELS)
def test_rank0_inputs_to_elementwise_ops(level):
    x, y = np.array(-0.7, "float32"), np.array(1.25, "float32")
    for name, formula in UNARY.items():
        arg = "abs(%x)" if name == "sqrt" else "%x"
        out = _run(_module(f"def @main(%x: float32) {{ {name}({arg}) }}"), level, {"x": x})
        assert out.shape == (), name
        np.testing.assert_allclose(out, formula(x), rtol=1e-5, err_msg=name)
    for name, formula in BINARY.items():
        arg = "abs(%x)" if name == "power" else "%x"
        out = _run(_module(f"def @main(%x: float32, %y: float32) {{ ({name}({arg}, %y), "
                           f"{name}({arg}, %y)) }}"), level, {"x": x}, params={"y": y})
        assert out[0].shape == () and out[1].shape == (), name
        np.testing.assert_allclose(out[0], formula(x, y), rtol=1e-5, err_msg=name)


# ---- fused groups that do not read the anchor's values ---------------------------------------

CONV = ("def @main(%x: Tensor[(1, 4, 5, 6), float32], %w: Tensor[(8, 4, 3, 3), float32]) { $ }",
        "nn.conv2d(%x, %w, padding=[1, 1, 1, 1])", {"x": (1, 4, 5, 6), "w": (8, 4, 3, 3)})
DENSE = ("def @main(%x: Tensor[(4, 32), float32], %w: Tensor[(16, 32), float32]) { $ }",
         "nn.dense(%x, %w)", {"x": (4, 32), "w": (16, 32)})
POOL = ("def @main(%x: Tensor[(1, 16, 8, 8), float32]) { $ }",
        "nn.max_pool2d(%x, pool_size=[2, 2], strides=[2, 2])", {"x": (1, 16, 8, 8)})
ANCHORS = {"conv2d": CONV, "dense": DENSE, "max_pool2d": POOL}


def _inputs(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s).astype("float32") for n, s in shapes.items()}


@pytest.mark.parametrize("anchor", sorted(ANCHORS))
@pytest.mark.parametrize("like,fill", [("ones_like({})", 1.0), ("zeros_like({})", 0.0),
                                       ("full_like({}, 3f)", 3.0),
                                       ("add(ones_like({}), 1f)", 2.0)])
def test_like_ops_of_an_anchor(anchor, like, fill):
    template, call, shapes = ANCHORS[anchor]
    mod = _module(template.replace("$", like.format(call)))
    inputs = _inputs(shapes)
    shape = tuple(int(d) for d in rb.passes.InferType()(_module(template.replace("$", call)))
                  ["main"].checked_type.ret_type.shape)
    for level in LEVELS:
        out = _run(mod, level, inputs)
        assert out.shape == shape and (out == fill).all(), level


@pytest.mark.parametrize("anchor", sorted(ANCHORS))
def test_anchor_and_its_like_in_one_tuple(anchor):
    template, call, shapes = ANCHORS[anchor]
    mod = _module(template.replace("$", f"(ones_like({call}), {call}, zeros_like({call}))"))
    inputs = _inputs(shapes, seed=1)
    ref = _reference(mod, inputs)
    for level in LEVELS:
        _agree(_run(mod, level, inputs), ref)


# ---- epilogues that read the anchor through modulo and division ------------------------------

@pytest.mark.parametrize("anchor", sorted(ANCHORS))
@pytest.mark.parametrize("epilogue", ["tile({}, reps=[1])",
                                      "nn.relu(tile(add({}, 1f), reps=[1]))",
                                      "repeat({}, repeats=1, axis=1)",
                                      "add({0}, tile({0}, reps=[1]))"])
def test_tile_and_repeat_after_an_anchor(anchor, epilogue):
    template, call, shapes = ANCHORS[anchor]
    mod = _module(template.replace("$", epilogue.format(call)))
    inputs = _inputs(shapes, seed=2)
    ref = _reference(mod, inputs)
    for level in LEVELS:
        _agree(_run(mod, level, inputs), ref)


def test_tile_after_a_blocked_conv2d():
    """At opt_level 3 the convolution runs in NCHW16c: 16 -> 32 channels, then tiled."""
    mod = _module("def @main(%x: Tensor[(1, 16, 7, 7), float32], %w: Tensor[(32, 16, 3, 3), "
                  "float32], %b: Tensor[(32,), float32]) { nn.relu(tile(nn.bias_add("
                  "nn.conv2d(%x, %w, padding=[1, 1, 1, 1]), %b), reps=[1, 1])) }")
    inputs = _inputs({"x": (1, 16, 7, 7), "w": (32, 16, 3, 3), "b": (32,)}, seed=3)
    ref = _reference(mod, inputs)
    for level in LEVELS:
        _agree(_run(mod, level, inputs), ref)


def test_a_stage_read_at_many_points_is_not_inlined_past_the_budget():
    """Chained cubic resizes (16 reads per output each) get buffers of their own instead of one
    expression that multiplies; a stage read once is still inlined into its reader."""
    import relaybench as rb
    from relaybench import op
    x = rb.var("x", shape=(1, 3, 6, 7), dtype="float32")
    y = op.image.resize2d(x, size=(5, 6), method="cubic")
    z = op.image.resize2d(op.negative(y), size=(4, 4), method="cubic")
    mod = rb.IRModule.from_expr(rb.Function([x], op.abs(z)))
    lib = rb.build(mod, opt_level=3)
    (kernel,) = lib.kernels
    loops = lib.source("loops", group=0)
    # negative(resize) is read at 16 points by the second resize: kept in a buffer; the first
    # resize is read once, by negative, and inlined there
    assert "negative = allocate((1, 3, 5, 6)" in loops
    assert "resize2d = allocate" not in loops
    data = np.random.default_rng(0).standard_normal((1, 3, 6, 7)).astype("float32")
    expected = rb.create_executor("interpreter", mod=mod).evaluate()(data)
    np.testing.assert_allclose(lib.run(x=data), np.asarray(expected), rtol=1e-5, atol=1e-5)
