"""NLP workloads: the paper's RNN, GRU, LSTM, CharRNN and TreeLSTM, written in Relay.

They are the programs that exercise what sets Relay apart from a dataflow graph: recursion over
prelude lists and trees, pattern matching, ``if`` on tensor values, and closures.

* :func:`rnn`, :func:`gru`, :func:`lstm` — Gluon-style recurrent cells with PyTorch's gate
  equations and weight layout, in two forms: ``form="unrolled"`` steps the cell ``seq_len`` times
  over a ``Tensor[(seq_len, batch, input_size)]`` with operators only; ``form="loop"`` takes a
  prelude ``List`` of per-step inputs and steps the cell with a recursive global function. Both
  return the final state: ``h`` for the RNN and the GRU, ``(h, c)`` for the LSTM.
* :func:`char_rnn` — the generator of PyTorch's "generating names with a character-level RNN"
  tutorial, with its sampling loop written in Relay: it returns a ``List`` of character indices.
* :func:`tree_lstm` — the Child-Sum TreeLSTM of Tai et al. (2015) over a prelude
  ``Tree[Tensor[(batch, input_size)]]``; it returns the root's ``(h, c)``.

:func:`make_list`, :func:`make_tree` and :func:`from_list` convert between Python values and the
interpreter's values of the prelude's ADTs.

>>> import numpy as np, relaybench as rb
>>> mod, params = lstm(seq_len=3, input_size=4, hidden_size=5, form="loop")
>>> print(mod["lstm_loop"].astext(show_types=False))  # doctest: +ELLIPSIS
fn (%xs: List[Tensor[(1, 4), float32]], %state: ...) -> (Tensor[(1, 5), float32], Tensor[(1, 5), float32]) {
  match (%xs) {
    Cons(%x, %rest) => {
      %0 = @lstm_cell(%x, %state, %weight_ih, %weight_hh, %bias_ih, %bias_hh);
      @lstm_loop(%rest, %0, %weight_ih, %weight_hh, %bias_ih, %bias_hh)
    },
    Nil => %state,
  }
}
>>> xs = make_list([np.ones((1, 4), "float32")] * 3)
>>> h, c = rb.create_executor("interpreter", mod=mod).evaluate()(xs, **params)
>>> h.shape, c.shape
((1, 5), (1, 5))
"""

from __future__ import annotations

import string
from typing import Optional, Sequence

import numpy as np

from ..ir.builder import const, var
from ..ir.expr import (Call, Clause, Function, GlobalVar, If, Let, Match, PatternConstructor,
                       PatternVar, Tuple)
from ..ir.module import IRModule, prelude_module
from ..ir.types import TensorType, TupleType, TypeCall
from ._registry import register_model

__all__ = ["rnn", "gru", "lstm", "char_rnn", "tree_lstm", "make_list", "from_list", "make_tree",
           "CHAR_RNN_LETTERS"]


def _ops(*names):
    """The builder functions of the named operators (looked up when a model is built)."""
    from ..op.registry import OpCaller, get_opdef
    out = tuple(OpCaller(get_opdef(n)) for n in names)
    return out if len(out) > 1 else out[0]


def _uniform(rng, shape, bound, dtype):
    return rng.uniform(-bound, bound, size=shape).astype(dtype)


def _linear(x, weight, bias):
    """``x @ weight.T + bias``: PyTorch's ``nn.Linear``."""
    dense, add = _ops("nn.dense", "add")
    return add(dense(x, weight), bias)


# ---------------------------------------------------------------------------------------------
# Python values <-> prelude ADT values of the interpreter

def _constructor(name: str, mod: Optional[IRModule]):
    return (mod if mod is not None else _prelude()).get_constructor(name)


_PRELUDE_CACHE: list = []


def _prelude() -> IRModule:
    if not _PRELUDE_CACHE:
        _PRELUDE_CACHE.append(prelude_module())
    return _PRELUDE_CACHE[0]


def make_list(values: Sequence, mod: Optional[IRModule] = None):
    """The prelude ``List`` of ``values`` as an interpreter value (``Cons(v0, Cons(v1, ... Nil))``).

    Elements are taken as they are (numpy arrays, tuples, other ADT values), except Python
    numbers, which become scalars as Relay constants do (``int32``, ``float32``, ``bool``).
    ``mod`` gives the constructors to use; by default the prelude's, which every module that
    imported it shares.
    """
    from ..backends.interpreter import ConstructorValue
    cons, nil = _constructor("Cons", mod), _constructor("Nil", mod)
    out = ConstructorValue(nil, ())
    for v in reversed(list(values)):
        out = ConstructorValue(cons, (const(v).data if isinstance(v, (bool, int, float)) else v, out))
    return out


def from_list(value) -> list:
    """The elements of an interpreter ``List`` value, as a Python list."""
    out = []
    while True:
        name = getattr(value, "name", None)
        if name == "Nil":
            return out
        if name != "Cons":
            raise TypeError(f"from_list: expected a List value (Cons or Nil), got {value!r:.60}")
        head, value = value.fields
        out.append(head)


def make_tree(value, children: Sequence = (), mod: Optional[IRModule] = None):
    """The prelude tree node ``Rose(value, [children...])``; ``children`` are trees made by this
    function, so a tree is built bottom-up."""
    from ..backends.interpreter import ConstructorValue
    return ConstructorValue(_constructor("Rose", mod), (value, make_list(children, mod)))


# ---------------------------------------------------------------------------------------------
# RNN, GRU, LSTM

_GATES = {"rnn": 1, "gru": 3, "lstm": 4}
_WEIGHTS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


def _rnn_cell(x, h, w, activation: str):
    """Elman cell: ``h' = act(W_ih x + b_ih + W_hh h + b_hh)``."""
    add = _ops("add")
    act = _ops({"tanh": "tanh", "relu": "nn.relu"}[activation])
    return act(add(_linear(x, w["weight_ih"], w["bias_ih"]), _linear(h, w["weight_hh"], w["bias_hh"])))


def _gru_cell(x, h, w, one):
    """PyTorch's GRU, gates in the order r, z, n:
    ``r = σ(W_ir x + b_ir + W_hr h + b_hr)``, ``z`` likewise, ``n = tanh(W_in x + b_in + r *
    (W_hn h + b_hn))``, ``h' = (1 - z) * n + z * h``."""
    add, subtract, multiply, sigmoid, tanh, split = _ops("add", "subtract", "multiply", "sigmoid",
                                                         "tanh", "split")
    gi = split(_linear(x, w["weight_ih"], w["bias_ih"]), indices_or_sections=3, axis=1)
    gh = split(_linear(h, w["weight_hh"], w["bias_hh"]), indices_or_sections=3, axis=1)
    r = sigmoid(add(gi[0], gh[0]))
    z = sigmoid(add(gi[1], gh[1]))
    n = tanh(add(gi[2], multiply(r, gh[2])))
    return add(multiply(subtract(one, z), n), multiply(z, h))


def _lstm_cell(x, h, c, w):
    """PyTorch's LSTM, gates in the order i, f, g, o:
    ``c' = σ(f) * c + σ(i) * tanh(g)``, ``h' = σ(o) * tanh(c')``. Returns ``(h', c')``."""
    add, multiply, sigmoid, tanh, split = _ops("add", "multiply", "sigmoid", "tanh", "split")
    gates = split(add(_linear(x, w["weight_ih"], w["bias_ih"]), _linear(h, w["weight_hh"], w["bias_hh"])),
                  indices_or_sections=4, axis=1)
    i, f, g, o = sigmoid(gates[0]), sigmoid(gates[1]), tanh(gates[2]), sigmoid(gates[3])
    c2 = add(multiply(f, c), multiply(i, g))
    return multiply(o, tanh(c2)), c2


def _recurrent(kind: str, batch_size: int, seq_len: int, input_size: int, hidden_size: int,
               form: str, dtype: str, seed: int, activation: str = "tanh"):
    """The RNN/GRU/LSTM module of ``kind`` in the given form, and its weights."""
    if form not in ("unrolled", "loop"):
        raise ValueError(f"{kind}: form must be 'unrolled' or 'loop', got {form!r}")
    if activation not in ("tanh", "relu"):
        raise ValueError(f"{kind}: activation must be 'tanh' or 'relu', got {activation!r}")
    for name, v in (("batch_size", batch_size), ("seq_len", seq_len), ("input_size", input_size),
                    ("hidden_size", hidden_size)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{kind}: {name} must be a positive int, got {v!r}")
    g, hs = _GATES[kind], hidden_size
    rng = np.random.default_rng(seed)
    bound = 1.0 / np.sqrt(hs)
    shapes = {"weight_ih": (g * hs, input_size), "weight_hh": (g * hs, hs),
              "bias_ih": (g * hs,), "bias_hh": (g * hs,)}
    params = {n: _uniform(rng, shapes[n], bound, dtype) for n in _WEIGHTS}

    def weight_vars():
        return {n: var(n, shape=shapes[n], dtype=dtype) for n in _WEIGHTS}

    h_type = TensorType((batch_size, hs), dtype)
    state_type = TupleType([h_type, h_type]) if kind == "lstm" else h_type
    zeros = _ops("zeros")

    def initial_state():
        z = [zeros(shape=(batch_size, hs), dtype=dtype) for _ in range(2 if kind == "lstm" else 1)]
        return Tuple(z) if kind == "lstm" else z[0]

    def step(x, state, w):
        if kind == "rnn":
            return _rnn_cell(x, state, w, activation)
        if kind == "gru":
            return _gru_cell(x, state, w, const(1.0, dtype))
        return Tuple(list(_lstm_cell(x, state[0], state[1], w)))

    mod = IRModule().import_prelude()
    if form == "unrolled":
        split, squeeze = _ops("split", "squeeze")
        data = var("data", shape=(seq_len, batch_size, input_size), dtype=dtype)
        w = weight_vars()
        steps = split(data, indices_or_sections=seq_len, axis=0)
        state = initial_state()
        if kind == "lstm":  # (h, c) stay two dataflow values, tupled once at the end
            state = state.fields
        for t in range(seq_len):
            x_t = squeeze(steps[t], axis=(0,))
            state = _lstm_cell(x_t, state[0], state[1], w) if kind == "lstm" else step(x_t, state, w)
        if kind == "lstm":
            state = Tuple(list(state))
        mod["main"] = Function([data] + [w[n] for n in _WEIGHTS], state, ret_type=state_type)
        return mod, params

    # the loop form: @NAME_cell steps once, @NAME_loop recurs over the list of inputs
    x_type = TensorType((batch_size, input_size), dtype)
    list_type = TypeCall(mod.get_global_type_var("List"), [x_type])
    cons, nil = mod.get_constructor("Cons"), mod.get_constructor("Nil")

    cell_gv, loop_gv = GlobalVar(f"{kind}_cell"), GlobalVar(f"{kind}_loop")
    x, s, w = var("x", x_type), var("state", state_type), weight_vars()
    mod[cell_gv] = Function([x, s] + [w[n] for n in _WEIGHTS], step(x, s, w), ret_type=state_type)

    xs, s, w = var("xs", list_type), var("state", state_type), weight_vars()
    head, rest = var("x"), var("rest")  # typed by the match
    ws = [w[n] for n in _WEIGHTS]
    recur = Call(loop_gv, [rest, Call(cell_gv, [head, s] + ws)] + ws)
    body = Match(xs, [Clause(PatternConstructor(cons, [PatternVar(head), PatternVar(rest)]), recur),
                      Clause(PatternConstructor(nil, []), s)])
    mod[loop_gv] = Function([xs, s] + ws, body, ret_type=state_type)

    xs, w = var("xs", list_type), weight_vars()
    ws = [w[n] for n in _WEIGHTS]
    mod["main"] = Function([xs] + ws, Call(loop_gv, [xs, initial_state()] + ws), ret_type=state_type)
    return mod, params


@register_model
def rnn(batch_size: int = 1, seq_len: int = 10, input_size: int = 64, hidden_size: int = 128,
        form: str = "unrolled", activation: str = "tanh", dtype: str = "float32", seed: int = 0):
    """Gluon's ``rnn.RNN`` cell, ``h' = act(W_ih x + b_ih + W_hh h + b_hh)`` (``act`` is ``tanh``
    or ``relu``), run over a sequence from ``h = 0``; returns the final ``h``.

    ``form="unrolled"``: ``@main(%data: Tensor[(seq_len, batch, input_size)], weights...)``.
    ``form="loop"``: ``@main(%xs: List[Tensor[(batch, input_size)]], weights...)`` with the
    recursive ``@rnn_loop``; any list length works. Weights ``weight_ih [hidden, input]``,
    ``weight_hh [hidden, hidden]``, ``bias_ih``, ``bias_hh [hidden]``, drawn from
    ``U(-1/sqrt(hidden), 1/sqrt(hidden))`` as PyTorch does.
    """
    return _recurrent("rnn", batch_size, seq_len, input_size, hidden_size, form, dtype, seed, activation)


@register_model
def gru(batch_size: int = 1, seq_len: int = 10, input_size: int = 64, hidden_size: int = 128,
        form: str = "unrolled", dtype: str = "float32", seed: int = 0):
    """PyTorch's GRU cell (gates r, z, n stacked in ``weight_ih [3*hidden, input]``) over a
    sequence from ``h = 0``; returns the final ``h``. Forms and weights as :func:`rnn`."""
    return _recurrent("gru", batch_size, seq_len, input_size, hidden_size, form, dtype, seed)


@register_model
def lstm(batch_size: int = 1, seq_len: int = 10, input_size: int = 64, hidden_size: int = 128,
         form: str = "unrolled", dtype: str = "float32", seed: int = 0):
    """PyTorch's LSTM cell (gates i, f, g, o stacked in ``weight_ih [4*hidden, input]``) over a
    sequence from ``h = c = 0``; returns the final ``(h, c)``. Forms and weights as :func:`rnn`."""
    return _recurrent("lstm", batch_size, seq_len, input_size, hidden_size, form, dtype, seed)


# ---------------------------------------------------------------------------------------------
# CharRNN

#: The tutorial's alphabet; index ``len(CHAR_RNN_LETTERS)`` is the end-of-sequence marker.
CHAR_RNN_LETTERS = string.ascii_letters + " .,;'"


@register_model
def char_rnn(batch_size: int = 1, n_letters: int = len(CHAR_RNN_LETTERS) + 1, n_categories: int = 18,
             hidden_size: int = 128, max_length: int = 20, dtype: str = "float32", seed: int = 0):
    """The name generator of PyTorch's character-level RNN tutorial, sampling loop included.

    One step: ``combined = concat(category, one_hot(char), hidden)``; ``hidden' = i2h(combined)``;
    ``out = o2o(concat(hidden', i2o(combined)))``; dropout (the identity at inference);
    ``log_softmax``; the next character is the argmax. The loop ``@char_rnn_sample`` stops after
    ``max_length`` steps or when the end-of-sequence character (index ``n_letters - 1``) comes up.

    ``@main(%category: Tensor[(1, n_categories)]`` (one-hot), ``%start: int32`` (the first
    character's index), weights...) returns a ``List[int32]`` of the characters chosen after
    ``start``, without the end marker (at most ``max_length`` of them).
    """
    if batch_size != 1:
        raise ValueError(f"char_rnn: the sampling loop generates one name at a time, so batch_size "
                         f"must be 1, got {batch_size}")
    if n_letters < 2 or n_categories < 1 or hidden_size < 1 or max_length < 0:
        raise ValueError(f"char_rnn: need n_letters >= 2, n_categories >= 1, hidden_size >= 1 and "
                         f"max_length >= 0, got {n_letters}, {n_categories}, {hidden_size}, {max_length}")
    (add, subtract, concatenate, one_hot, argmax, squeeze, expand_dims, log_softmax, dropout, equal,
     less_equal, zeros) = _ops("add", "subtract", "concatenate", "one_hot", "argmax", "squeeze",
                               "expand_dims", "nn.log_softmax", "nn.dropout", "equal", "less_equal",
                               "zeros")
    rng = np.random.default_rng(seed)
    combined = n_categories + n_letters + hidden_size
    shapes = {"i2h_weight": (hidden_size, combined), "i2h_bias": (hidden_size,),
              "i2o_weight": (n_letters, combined), "i2o_bias": (n_letters,),
              "o2o_weight": (n_letters, hidden_size + n_letters), "o2o_bias": (n_letters,)}
    fan_in = {"i2h": combined, "i2o": combined, "o2o": hidden_size + n_letters}
    params = {n: _uniform(rng, s, 1.0 / np.sqrt(fan_in[n[:3]]), dtype) for n, s in shapes.items()}

    mod = IRModule().import_prelude()
    int_t = TensorType((), "int32")
    out_type = TypeCall(mod.get_global_type_var("List"), [int_t])
    cons, nil = mod.get_constructor("Cons"), mod.get_constructor("Nil")

    def weight_vars():
        return [var(n, shape=s, dtype=dtype) for n, s in shapes.items()]

    sample_gv = GlobalVar("char_rnn_sample")
    category = var("category", shape=(1, n_categories), dtype=dtype)
    char, remaining = var("char", int_t), var("remaining", int_t)
    hidden = var("hidden", shape=(1, hidden_size), dtype=dtype)
    ws = weight_vars()
    i2h_w, i2h_b, i2o_w, i2o_b, o2o_w, o2o_b = ws
    letter = one_hot(expand_dims(char, axis=0), const(1.0, dtype), const(0.0, dtype),
                     depth=n_letters, axis=-1, dtype=dtype)
    inputs = concatenate(Tuple([category, letter, hidden]), axis=1)
    new_hidden, output = var("new_hidden"), var("output")
    logits = _linear(concatenate(Tuple([new_hidden, output]), axis=1), o2o_w, o2o_b)
    log_probs = log_softmax(dropout(logits, rate=0.1)[0], axis=1)
    top, chosen = var("top"), var("chosen", int_t)
    stop = const(n_letters - 1, "int32")
    step_more = Call(sample_gv, [category, chosen, new_hidden, subtract(remaining, const(1, "int32"))] + ws)
    body = Let(new_hidden, _linear(inputs, i2h_w, i2h_b),
               Let(output, _linear(inputs, i2o_w, i2o_b),
                   Let(top, argmax(log_probs, axis=(1,)),
                       Let(chosen, squeeze(top, axis=(0,)),
                           If(equal(chosen, stop), Call(nil, []), Call(cons, [chosen, step_more]))))))
    body = If(less_equal(remaining, const(0, "int32")), Call(nil, []), body)
    mod[sample_gv] = Function([category, char, hidden, remaining] + ws, body, ret_type=out_type)

    category, start = var("category", shape=(1, n_categories), dtype=dtype), var("start", int_t)
    ws = weight_vars()
    call = Call(sample_gv, [category, start, zeros(shape=(1, hidden_size), dtype=dtype),
                            const(max_length, "int32")] + ws)
    mod["main"] = Function([category, start] + ws, call, ret_type=out_type)
    return mod, params


# ---------------------------------------------------------------------------------------------
# TreeLSTM

_TREE_WEIGHTS = ("ioux_weight", "ioux_bias", "iouh_weight", "iouh_bias",
                 "fx_weight", "fx_bias", "fh_weight", "fh_bias")


@register_model
def tree_lstm(batch_size: int = 1, input_size: int = 64, hidden_size: int = 128, dtype: str = "float32",
              seed: int = 0):
    """The Child-Sum TreeLSTM (Tai, Socher and Manning, 2015) over a prelude tree.

    For a node with input ``x`` and children states ``(h_k, c_k)``: ``h~ = Σ h_k``;
    ``i, o, u = split(ioux(x) + iouh(h~))`` with ``σ, σ, tanh``; one forget gate per child
    ``f_k = σ(fx(x) + fh(h_k))``; ``c = i * u + Σ f_k * c_k``; ``h = o * tanh(c)``. A leaf has no
    children, so its sums are zero. The children's states come from ``@map`` of the recursive
    ``@tree_lstm`` over the children list, the sums from ``@foldl``.

    ``@main(%tree: Tree[Tensor[(batch, input_size)]], weights...)`` returns the root's ``(h, c)``.
    Linear layers (``ioux [3*hidden, input]``, ``iouh [3*hidden, hidden]``, ``fx [hidden, input]``,
    ``fh [hidden, hidden]``, each with a bias) start from ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``.
    """
    if min(batch_size, input_size, hidden_size) < 1:
        raise ValueError(f"tree_lstm: batch_size, input_size and hidden_size must be positive, got "
                         f"{batch_size}, {input_size}, {hidden_size}")
    add, multiply, sigmoid, tanh, split, zeros = _ops("add", "multiply", "sigmoid", "tanh", "split", "zeros")
    hs = hidden_size
    shapes = {"ioux_weight": (3 * hs, input_size), "ioux_bias": (3 * hs,),
              "iouh_weight": (3 * hs, hs), "iouh_bias": (3 * hs,),
              "fx_weight": (hs, input_size), "fx_bias": (hs,),
              "fh_weight": (hs, hs), "fh_bias": (hs,)}
    fan_in = {"ioux": input_size, "iouh": hs, "fx": input_size, "fh": hs}
    rng = np.random.default_rng(seed)
    params = {n: _uniform(rng, shapes[n], 1.0 / np.sqrt(fan_in[n.split("_")[0]]), dtype)
              for n in _TREE_WEIGHTS}

    mod = IRModule().import_prelude()
    x_type = TensorType((batch_size, input_size), dtype)
    h_type = TensorType((batch_size, hs), dtype)
    state_type = TupleType([h_type, h_type])
    tree_type = TypeCall(mod.get_global_type_var("Tree"), [x_type])
    rose = mod.get_constructor("Rose")
    map_gv, foldl_gv = mod.get_global_var("map"), mod.get_global_var("foldl")

    def weight_vars():
        return {n: var(n, shape=shapes[n], dtype=dtype) for n in _TREE_WEIGHTS}

    node_gv = GlobalVar("tree_lstm")
    tree, w = var("tree", tree_type), weight_vars()
    ws = [w[n] for n in _TREE_WEIGHTS]
    x, children, states = var("x"), var("children"), var("states")  # typed by the match and @map
    h_sum, fx, c_sum, iou = var("h_sum"), var("fx"), var("c_sum"), var("iou")
    h, c = var("h"), var("c")

    child = var("child", tree_type)
    run_child = Function([child], Call(node_gv, [child] + ws), ret_type=state_type)
    acc, s = var("acc", h_type), var("s", state_type)
    add_h = Function([acc, s], add(acc, s[0]), ret_type=h_type)
    acc, s = var("acc", h_type), var("s", state_type)
    forget = sigmoid(add(fx, _linear(s[0], w["fh_weight"], w["fh_bias"])))
    add_fc = Function([acc, s], add(acc, multiply(forget, s[1])), ret_type=h_type)
    gates = split(iou, indices_or_sections=3, axis=1)
    i, o, u = sigmoid(gates[0]), sigmoid(gates[1]), tanh(gates[2])

    def zero():
        return zeros(shape=(batch_size, hs), dtype=dtype)

    body = Let(states, Call(map_gv, [run_child, children]),
           Let(h_sum, Call(foldl_gv, [add_h, zero(), states]),
           Let(fx, _linear(x, w["fx_weight"], w["fx_bias"]),
           Let(c_sum, Call(foldl_gv, [add_fc, zero(), states]),
           Let(iou, add(_linear(x, w["ioux_weight"], w["ioux_bias"]),
                        _linear(h_sum, w["iouh_weight"], w["iouh_bias"])),
           Let(c, add(multiply(i, u), c_sum),
           Let(h, multiply(o, tanh(c)),
               Tuple([h, c]))))))))
    match = Match(tree, [Clause(PatternConstructor(rose, [PatternVar(x), PatternVar(children)]), body)])
    mod[node_gv] = Function([tree] + ws, match, ret_type=state_type)

    tree, w = var("tree", tree_type), weight_vars()
    ws = [w[n] for n in _TREE_WEIGHTS]
    mod["main"] = Function([tree] + ws, Call(node_gv, [tree] + ws), ret_type=state_type)
    return mod, params
