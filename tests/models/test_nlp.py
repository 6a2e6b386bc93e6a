"""The NLP workloads: each type-checks, survives the text format, and runs in the interpreter to
the results of the numpy implementation in numpy_nlp.py (written from the published equations)."""

import numpy as np
import pytest

import relaybench as rb
from relaybench import models
from relaybench.models.nlp import CHAR_RNN_LETTERS, from_list, make_list, make_tree

import numpy_nlp as ref

SMALL = dict(batch_size=2, seq_len=5, input_size=6, hidden_size=8)
RTOL, ATOL = 1e-5, 1e-6


def run_main(mod, *args, **params):
    return rb.create_executor("interpreter", mod=mod).evaluate()(*args, **params)


def check_roundtrip(mod):
    """The text of the module parses back to the same module, before and after type inference."""
    rb.assert_structural_equal(rb.parse(mod.astext()), mod)
    typed = rb.passes.InferType()(mod)
    rb.assert_structural_equal(rb.parse(typed.astext()), typed)


def sequence(seq_len=5, batch=2, size=6, seed=1):
    return np.random.default_rng(seed).standard_normal((seq_len, batch, size)).astype("float32")


def assert_state_close(got, expected):
    if isinstance(expected, tuple):
        assert isinstance(got, tuple) and len(got) == len(expected)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL)
    else:
        assert isinstance(got, np.ndarray)
        np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)


# ---------------------------------------------------------------------------------------------
# the registry and the ADT helpers

def test_registered():
    for name in ("rnn", "gru", "lstm", "char_rnn", "tree_lstm"):
        assert name in models.list_models()
    mod, params = models.get("gru", form="loop", **SMALL)
    assert "gru_loop" in mod and set(params) == {"weight_ih", "weight_hh", "bias_ih", "bias_hh"}
    assert params["weight_ih"].shape == (24, 6) and params["weight_ih"].dtype == np.float32


def test_weights_follow_pytorch_init():
    _, params = models.lstm(input_size=6, hidden_size=16)
    for w in params.values():
        assert np.abs(w).max() <= 1 / np.sqrt(16)
        assert np.abs(w).max() > 0.8 / np.sqrt(16)  # spread over the range, not clustered
    _, again = models.lstm(input_size=6, hidden_size=16)
    _, other = models.lstm(input_size=6, hidden_size=16, seed=1)
    assert np.array_equal(params["weight_hh"], again["weight_hh"])
    assert not np.array_equal(params["weight_hh"], other["weight_hh"])


def test_list_and_tree_values():
    values = [np.float32(i) for i in range(4)]
    lst = make_list(values)
    assert [c.name for c in (lst, lst.fields[1], lst.fields[1].fields[1])] == ["Cons", "Cons", "Cons"]
    assert from_list(lst) == values and from_list(make_list([])) == []
    leaf = make_tree(np.zeros(2))
    node = make_tree(np.ones(2), [leaf, leaf])
    assert node.name == "Rose" and len(from_list(node.fields[1])) == 2
    assert from_list(leaf.fields[1]) == []
    with pytest.raises(TypeError, match="from_list"):
        from_list(leaf)


def test_list_values_run_through_the_prelude():
    mod = rb.IRModule().import_prelude()
    xs = rb.var("xs", rb.ir.TypeCall(mod.get_global_type_var("List"), [rb.TensorType((), "int32")]))
    mod["main"] = rb.Function([xs], rb.Call(mod.get_global_var("sum"), [xs]))
    assert run_main(mod, make_list([np.int32(v) for v in (3, 4, 5)])) == 12
    assert run_main(mod, make_list([3, 4, 5, 6])) == 18  # Python ints become int32 scalars


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="lstm: form must be"):
        models.lstm(form="scan")
    with pytest.raises(ValueError, match="rnn: hidden_size must be a positive int"):
        models.rnn(hidden_size=0)
    with pytest.raises(ValueError, match="char_rnn: .*batch_size must be 1"):
        models.char_rnn(batch_size=2)


# ---------------------------------------------------------------------------------------------
# RNN, GRU, LSTM in both forms

STATE = {"rnn": "Tensor[(2, 8), float32]", "gru": "Tensor[(2, 8), float32]",
         "lstm": "(Tensor[(2, 8), float32], Tensor[(2, 8), float32])"}
GATES = {"rnn": 1, "gru": 3, "lstm": 4}


@pytest.mark.parametrize("form", ["unrolled", "loop"])
@pytest.mark.parametrize("kind", ["rnn", "gru", "lstm"])
def test_recurrent_types(kind, form):
    mod, _ = models.get(kind, form=form, **SMALL)
    typed = rb.passes.InferType()(mod)
    g = GATES[kind] * 8
    data = "Tensor[(5, 2, 6), float32]" if form == "unrolled" else "List[Tensor[(2, 6), float32]]"
    expected = (f"fn ({data}, Tensor[({g}, 6), float32], Tensor[({g}, 8), float32], "
                f"Tensor[({g}), float32], Tensor[({g}), float32]) -> {STATE[kind]}")
    assert str(typed["main"].checked_type) == expected
    if form == "loop":
        assert f"{kind}_loop" in mod and f"{kind}_cell" in mod
        assert "@" + kind + "_loop" in mod[kind + "_loop"].astext()  # it recurs
    else:
        assert list(mod.get_global_vars()) == list(rb.IRModule().import_prelude().get_global_vars()) + [
            mod.get_global_var("main")]  # ops only: nothing but the prelude and @main


@pytest.mark.parametrize("form", ["unrolled", "loop"])
@pytest.mark.parametrize("kind", ["rnn", "gru", "lstm"])
def test_recurrent_roundtrip(kind, form):
    mod, _ = models.get(kind, form=form, **SMALL)
    check_roundtrip(mod)


@pytest.mark.parametrize("form", ["unrolled", "loop"])
@pytest.mark.parametrize("kind", ["rnn", "gru", "lstm"])
def test_recurrent_matches_numpy(kind, form):
    mod, params = models.get(kind, form=form, **SMALL)
    data = sequence()
    arg = data if form == "unrolled" else make_list(list(data))
    got = run_main(mod, arg, **params)
    assert_state_close(got, ref.run_recurrent(kind, list(data), params))


@pytest.mark.parametrize("kind", ["rnn", "gru", "lstm"])
def test_unrolled_and_loop_forms_agree(kind):
    unrolled, params = models.get(kind, form="unrolled", **SMALL)
    loop, params_loop = models.get(kind, form="loop", **SMALL)
    for name in params:
        np.testing.assert_array_equal(params[name], params_loop[name])
    data = sequence(seed=7)
    a = run_main(unrolled, data, **params)
    b = run_main(loop, make_list(list(data)), **params)
    assert_state_close(a, b if kind != "lstm" else tuple(b))
    # and the state really moved: not the output of the first step alone
    first = ref.run_recurrent(kind, list(data[:1]), params)
    assert not np.allclose(a[0] if kind == "lstm" else a, first[0] if kind == "lstm" else first)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_loop_form_runs_any_length(kind):
    mod, params = models.get(kind, form="loop", **SMALL)
    run = rb.create_executor("interpreter", mod=mod).evaluate()
    for length in (1, 3, 9):
        data = sequence(seq_len=length, seed=length)
        assert_state_close(run(make_list(list(data)), **params), ref.run_recurrent(kind, list(data), params))
    empty = run(make_list([]), **params)  # no step at all: the zero state
    for s in (empty if kind == "lstm" else (empty,)):
        np.testing.assert_array_equal(s, np.zeros((2, 8), "float32"))


def test_rnn_relu_and_float64():
    mod, params = models.rnn(activation="relu", dtype="float64", **SMALL)
    assert params["weight_ih"].dtype == np.float64
    data = sequence().astype("float64")
    got = run_main(mod, data, **params)
    assert got.dtype == np.float64 and (got >= 0).all() and (got == 0).any()
    np.testing.assert_allclose(got, ref.run_recurrent("rnn", list(data), params, "relu"), rtol=1e-12)


def test_default_sizes_type_check():
    mod, params = models.lstm()
    typed = rb.passes.InferType()(mod)
    assert str(typed["main"].checked_type.ret_type) == \
        "(Tensor[(1, 128), float32], Tensor[(1, 128), float32])"
    assert params["weight_ih"].shape == (512, 64)
    assert str(typed["main"].checked_type.arg_types[0]) == "Tensor[(10, 1, 64), float32]"


# ---------------------------------------------------------------------------------------------
# CharRNN

CHAR = dict(hidden_size=16, max_length=12)


def category(index, n=18):
    c = np.zeros((1, n), "float32")
    c[0, index] = 1
    return c


def test_char_rnn_types_and_roundtrip():
    mod, params = models.char_rnn(**CHAR)
    typed = rb.passes.InferType()(mod)
    assert len(CHAR_RNN_LETTERS) + 1 == 58
    assert str(typed["main"].checked_type) == (
        "fn (Tensor[(1, 18), float32], int32, Tensor[(16, 92), float32], Tensor[(16), float32], "
        "Tensor[(58, 92), float32], Tensor[(58), float32], Tensor[(58, 74), float32], "
        "Tensor[(58), float32]) -> List[int32]")
    assert "@char_rnn_sample" in mod["char_rnn_sample"].astext()  # the loop is a recursion
    check_roundtrip(mod)


def test_char_rnn_generates_the_numpy_sequence():
    mod, params = models.char_rnn(**CHAR)
    run = rb.create_executor("interpreter", mod=mod).evaluate()
    lengths = set()
    for cat, start in ((0, 0), (3, 26), (17, 40), (9, 56)):
        got = from_list(run(category(cat), np.int32(start), **params))
        assert all(v.shape == () and v.dtype == np.int32 for v in got)
        expected = ref.char_rnn_sample(category(cat), start, params, CHAR["max_length"])
        assert [int(v) for v in got] == expected
        lengths.add(len(got))
    assert lengths == {CHAR["max_length"]}  # these weights never pick the end marker


def test_char_rnn_stops_at_the_end_marker():
    mod, params = models.char_rnn(**CHAR)
    run = rb.create_executor("interpreter", mod=mod).evaluate()
    free = ref.char_rnn_sample(category(4), 0, params, CHAR["max_length"])
    # the first position k > 1 whose character is new: give the end marker that character's
    # output row plus a little, so the marker wins exactly where that character would
    k = next(i for i in range(2, len(free)) if free[i] not in free[:i])
    weight, bias = params["o2o_weight"].copy(), params["o2o_bias"].copy()
    weight[57], bias[57] = weight[free[k]], bias[free[k]] + 1e-3
    trial = dict(params, o2o_weight=weight, o2o_bias=bias)
    expected = ref.char_rnn_sample(category(4), 0, trial, CHAR["max_length"])
    assert expected == free[:k]
    got = from_list(run(category(4), np.int32(0), **trial))
    assert [int(v) for v in got] == expected
    # a huge end-marker bias stops at once; max_length=0 never steps
    trial = dict(params, o2o_bias=np.where(np.arange(58) == 57, 100.0, 0.0).astype("float32"))
    assert from_list(run(category(2), np.int32(10), **trial)) == []
    mod0, params0 = models.char_rnn(hidden_size=16, max_length=0)
    assert from_list(run_main(mod0, category(1), np.int32(3), **params0)) == []


# ---------------------------------------------------------------------------------------------
# TreeLSTM

TREE = dict(input_size=5, hidden_size=7)


def depth3_tree(batch=1, size=5, seed=3):
    """root -> (a -> (leaf, leaf, leaf), b -> (leaf -> ()... )), built bottom-up, as numpy nested
    pairs and as the interpreter's Tree value."""
    r = np.random.default_rng(seed)

    def x():
        return r.standard_normal((batch, size)).astype("float32")

    leaves = [(x(), []) for _ in range(4)]
    a = (x(), leaves[:3])
    b = (x(), leaves[3:])
    root = (x(), [a, b])
    values = {id(n): make_tree(n[0]) for n in leaves}
    for n in (a, b, root):
        values[id(n)] = make_tree(n[0], [values[id(c)] for c in n[1]])
    return root, values[id(root)]


def test_tree_lstm_types_and_roundtrip():
    mod, params = models.tree_lstm(**TREE)
    typed = rb.passes.InferType()(mod)
    assert str(typed["main"].checked_type) == (
        "fn (Tree[Tensor[(1, 5), float32]], Tensor[(21, 5), float32], Tensor[(21), float32], "
        "Tensor[(21, 7), float32], Tensor[(21), float32], Tensor[(7, 5), float32], "
        "Tensor[(7), float32], Tensor[(7, 7), float32], Tensor[(7), float32]) -> "
        "(Tensor[(1, 7), float32], Tensor[(1, 7), float32])")
    text = mod["tree_lstm"].astext()
    assert "@map(" in text and "@foldl(" in text and "@tree_lstm(" in text
    check_roundtrip(mod)


@pytest.mark.parametrize("batch", [1, 3])
def test_tree_lstm_matches_numpy(batch):
    mod, params = models.tree_lstm(batch_size=batch, **TREE)
    tree, value = depth3_tree(batch)
    h, c = run_main(mod, value, **params)
    eh, ec = ref.tree_lstm(tree, params)
    np.testing.assert_allclose(h, eh, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(c, ec, rtol=RTOL, atol=ATOL)
    assert h.shape == (batch, 7)


def test_tree_lstm_leaf_by_hand():
    """A lone leaf: no children, so c = σ(i) tanh(u) and h = σ(o) tanh(c) from ioux and iouh's bias."""
    mod, params = models.tree_lstm(**TREE)
    x = np.linspace(-1, 1, 5, dtype="float32")[None]
    h, c = run_main(mod, make_tree(x), **params)
    iou = x @ params["ioux_weight"].T + params["ioux_bias"] + params["iouh_bias"]
    s = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    c_hand = s(iou[:, :7]) * np.tanh(iou[:, 14:])
    np.testing.assert_allclose(c, c_hand, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(h, s(iou[:, 7:14]) * np.tanh(c_hand), rtol=RTOL, atol=ATOL)


def test_docstring_examples():
    import doctest
    from relaybench.models import nlp
    result = doctest.testmod(nlp, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
