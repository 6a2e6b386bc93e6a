"""The NLP workloads written again in plain numpy, from the published equations, as the oracle the
Relay models are checked against. Nothing here uses relaybench.

Weights follow PyTorch's layout: a linear layer is ``x @ W.T + b``; the recurrent cells stack their
gates along the first axis of ``weight_ih``/``weight_hh`` in PyTorch's order (GRU: r, z, n;
LSTM: i, f, g, o). Arithmetic stays in the weights' dtype.
"""

import numpy as np


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def linear(x, w, b):
    return x @ w.T + b


def log_softmax(x, axis=-1):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


# ---- recurrent cells ------------------------------------------------------------------------

def rnn_step(x, h, p, activation="tanh"):
    pre = linear(x, p["weight_ih"], p["bias_ih"]) + linear(h, p["weight_hh"], p["bias_hh"])
    return np.tanh(pre) if activation == "tanh" else np.maximum(pre, 0)


def gru_step(x, h, p):
    hs = h.shape[1]
    gi = linear(x, p["weight_ih"], p["bias_ih"])
    gh = linear(h, p["weight_hh"], p["bias_hh"])
    r = sigmoid(gi[:, :hs] + gh[:, :hs])
    z = sigmoid(gi[:, hs:2 * hs] + gh[:, hs:2 * hs])
    n = np.tanh(gi[:, 2 * hs:] + r * gh[:, 2 * hs:])
    return (1 - z) * n + z * h


def lstm_step(x, h, c, p):
    hs = h.shape[1]
    gates = linear(x, p["weight_ih"], p["bias_ih"]) + linear(h, p["weight_hh"], p["bias_hh"])
    i = sigmoid(gates[:, :hs])
    f = sigmoid(gates[:, hs:2 * hs])
    g = np.tanh(gates[:, 2 * hs:3 * hs])
    o = sigmoid(gates[:, 3 * hs:])
    c = f * c + i * g
    return o * np.tanh(c), c


def run_recurrent(kind, xs, p, activation="tanh"):
    """The final state after stepping the cell over ``xs`` (a sequence of ``(batch, input)``
    arrays) from zeros: ``h`` for rnn and gru, ``(h, c)`` for lstm."""
    hs = p["weight_hh"].shape[1]
    dtype = p["weight_hh"].dtype
    h = np.zeros((xs[0].shape[0], hs), dtype)
    c = np.zeros_like(h)
    for x in xs:
        if kind == "rnn":
            h = rnn_step(x, h, p, activation)
        elif kind == "gru":
            h = gru_step(x, h, p)
        else:
            h, c = lstm_step(x, h, c, p)
    return (h, c) if kind == "lstm" else h


# ---- the character-level RNN of the PyTorch names tutorial -----------------------------------

def char_rnn_step(category, letter, hidden, p):
    combined = np.concatenate([category, letter, hidden], axis=1)
    hidden = linear(combined, p["i2h_weight"], p["i2h_bias"])
    output = linear(combined, p["i2o_weight"], p["i2o_bias"])
    output = linear(np.concatenate([hidden, output], axis=1), p["o2o_weight"], p["o2o_bias"])
    return log_softmax(output, axis=1), hidden  # dropout is the identity at inference


def char_rnn_sample(category, start, p, max_length):
    """The tutorial's ``sample()``: the indices chosen after ``start``, stopping at the
    end-of-sequence index (the last letter) or after ``max_length`` steps."""
    n_letters = p["o2o_bias"].shape[0]
    dtype = p["o2o_bias"].dtype
    hidden = np.zeros((1, p["i2h_bias"].shape[0]), dtype)
    letter_index = start
    chosen = []
    for _ in range(max_length):
        letter = np.zeros((1, n_letters), dtype)
        letter[0, letter_index] = 1
        output, hidden = char_rnn_step(category, letter, hidden, p)
        top = int(np.argmax(output[0]))
        if top == n_letters - 1:
            break
        chosen.append(top)
        letter_index = top
    return chosen


# ---- the Child-Sum TreeLSTM ------------------------------------------------------------------

def tree_lstm_node(x, child_states, p):
    hs = p["fh_weight"].shape[0]
    dtype = x.dtype
    h_sum = np.zeros((x.shape[0], hs), dtype)
    fc_sum = np.zeros((x.shape[0], hs), dtype)
    fx = linear(x, p["fx_weight"], p["fx_bias"])
    for h_k, c_k in child_states:
        h_sum = h_sum + h_k
        fc_sum = fc_sum + sigmoid(fx + linear(h_k, p["fh_weight"], p["fh_bias"])) * c_k
    iou = linear(x, p["ioux_weight"], p["ioux_bias"]) + linear(h_sum, p["iouh_weight"], p["iouh_bias"])
    i = sigmoid(iou[:, :hs])
    o = sigmoid(iou[:, hs:2 * hs])
    u = np.tanh(iou[:, 2 * hs:])
    c = i * u + fc_sum
    return o * np.tanh(c), c


def tree_lstm(tree, p):
    """The root's ``(h, c)`` of a tree given as nested ``(x, [children])`` pairs, evaluated
    children first with an explicit stack."""
    states = {}
    stack = [(tree, False)]
    while stack:
        node, ready = stack.pop()
        x, children = node
        if ready:
            states[id(node)] = tree_lstm_node(x, [states[id(c)] for c in children], p)
        else:
            stack.append((node, True))
            stack.extend((c, False) for c in children)
    return states[id(tree)]
