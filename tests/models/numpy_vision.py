"""The vision models written again in plain numpy, in float64, to check the interpreter against.

Written from the architectures' definitions, not from the operators' references: convolution is
an explicit im2col (gather every window into a column, then one matrix product per group),
pooling gathers windows the same way, batch norm is its formula. Each ``*_logits`` function takes
the input and the ``params`` dict and returns the pre-softmax outputs.
"""

from __future__ import annotations

import numpy as np


# ---------------------------------------------------------------------------------------------
# layers

def _windows(x, kernel, stride, pad, fill):
    """``(N, C, kernel*kernel, OH, OW)``: every kernel window of the padded input."""
    n, c, h, w = x.shape
    xp = np.full((n, c, h + 2 * pad, w + 2 * pad), fill, dtype=x.dtype)
    xp[:, :, pad:pad + h, pad:pad + w] = x
    oh = (h + 2 * pad - kernel) // stride + 1
    ow = (w + 2 * pad - kernel) // stride + 1
    ki = np.repeat(np.arange(kernel), kernel)          # kernel row of each window position
    kj = np.tile(np.arange(kernel), kernel)            # kernel column
    rows = ki[:, None] + stride * np.arange(oh)[None, :]   # (k*k, OH)
    cols = kj[:, None] + stride * np.arange(ow)[None, :]   # (k*k, OW)
    return xp[:, :, rows[:, :, None], cols[:, None, :]]


def conv2d(x, weight, bias=None, stride=1, pad=0, groups=1):
    n, c, _, _ = x.shape
    o, cg, k, _ = weight.shape
    assert cg * groups == c and o % groups == 0
    win = _windows(x, k, stride, pad, 0.0)              # (N, C, k*k, OH, OW)
    oh, ow = win.shape[-2:]
    columns = win.reshape(n, groups, cg * k * k, oh * ow)          # channel-major, then window
    kernels = weight.reshape(groups, o // groups, cg * k * k)
    out = np.matmul(kernels[None], columns).reshape(n, o, oh, ow)
    if bias is not None:
        out = out + bias[None, :, None, None]
    return out


def batch_norm(x, gamma, beta, mean, var, eps):
    c = (None, slice(None), None, None)
    return (x - mean[c]) / np.sqrt(var[c] + eps) * gamma[c] + beta[c]


def max_pool(x, kernel, stride, pad):
    return _windows(x, kernel, stride, pad, -np.inf).max(axis=2)


def global_avg_pool(x):
    return x.mean(axis=(2, 3))


def relu(x):
    return np.where(x > 0, x, 0.0)


def relu6(x):
    return np.minimum(relu(x), 6.0)


def dense(x, weight, bias):
    return x @ weight.T + bias


def softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _p(params, name):
    return np.asarray(params[name], dtype=np.float64)


def _bn(params, x, name, eps):
    return batch_norm(x, *(_p(params, f"{name}_{f}") for f in ("gamma", "beta", "moving_mean", "moving_var")),
                      eps)


# ---------------------------------------------------------------------------------------------
# networks

def resnet_logits(data, params, units, bottleneck):
    """Post-activation ResNet; ``units`` per stage; epsilon 2e-5."""
    eps = 2e-5
    x = np.asarray(data, np.float64)
    x = relu(_bn(params, conv2d(x, _p(params, "conv0_weight"), stride=2, pad=3), "bn0", eps))
    x = max_pool(x, 3, 2, 1)
    for s, count in enumerate(units):
        for u in range(count):
            name = f"stage{s + 1}_unit{u + 1}"
            stride = 2 if s > 0 and u == 0 else 1
            if bottleneck:
                y = relu(_bn(params, conv2d(x, _p(params, name + "_conv1_weight")), name + "_bn1", eps))
                y = relu(_bn(params, conv2d(y, _p(params, name + "_conv2_weight"), stride=stride, pad=1),
                             name + "_bn2", eps))
                y = _bn(params, conv2d(y, _p(params, name + "_conv3_weight")), name + "_bn3", eps)
            else:
                y = relu(_bn(params, conv2d(x, _p(params, name + "_conv1_weight"), stride=stride, pad=1),
                             name + "_bn1", eps))
                y = _bn(params, conv2d(y, _p(params, name + "_conv2_weight"), pad=1), name + "_bn2", eps)
            if name + "_sc_weight" in params:
                x = _bn(params, conv2d(x, _p(params, name + "_sc_weight"), stride=stride), name + "_sc_bn", eps)
            x = relu(x + y)
    x = global_avg_pool(x)
    return dense(x, _p(params, "fc1_weight"), _p(params, "fc1_bias"))


def mobilenet_v2_logits(data, params):
    """MobileNet V2, walking the blocks by the weights present (``blockK_expand`` only where the
    expansion is not 1); the residual is added when the stride is 1 and the channels stay."""
    eps = 1e-5
    x = np.asarray(data, np.float64)
    x = relu6(_bn(params, conv2d(x, _p(params, "conv0_weight"), stride=2, pad=1), "bn0", eps))
    # rows (t, c, n, s) of the table: (1,16,1,1) (6,24,2,2) (6,32,3,2) (6,64,4,2) (6,96,3,1)
    # (6,160,3,2) (6,320,1,1): 17 blocks, the first of each row with stride s
    strides = [1] + [2, 1] + [2, 1, 1] + [2, 1, 1, 1] + [1, 1, 1] + [2, 1, 1] + [1]
    for k, stride in enumerate(strides):
        name = f"block{k}"
        y = x
        if name + "_expand_weight" in params:
            y = relu6(_bn(params, conv2d(y, _p(params, name + "_expand_weight")), name + "_expand_bn", eps))
        dw = _p(params, name + "_depthwise_weight")
        y = relu6(_bn(params, conv2d(y, dw, stride=stride, pad=1, groups=dw.shape[0]), name + "_depthwise_bn", eps))
        y = _bn(params, conv2d(y, _p(params, name + "_project_weight")), name + "_project_bn", eps)
        x = x + y if stride == 1 and y.shape[1] == x.shape[1] else y
    x = relu6(_bn(params, conv2d(x, _p(params, "conv_last_weight")), "bn_last", eps))
    x = global_avg_pool(x)
    return dense(x, _p(params, "fc_weight"), _p(params, "fc_bias"))


def vgg16_logits(data, params):
    x = np.asarray(data, np.float64)
    for block, count in enumerate((2, 2, 3, 3, 3), start=1):
        for i in range(1, count + 1):
            name = f"conv{block}_{i}"
            x = relu(conv2d(x, _p(params, name + "_weight"), _p(params, name + "_bias"), pad=1))
        x = max_pool(x, 2, 2, 0)
    x = x.reshape(x.shape[0], -1)
    x = relu(dense(x, _p(params, "fc6_weight"), _p(params, "fc6_bias")))    # dropout: identity
    x = relu(dense(x, _p(params, "fc7_weight"), _p(params, "fc7_bias")))
    return dense(x, _p(params, "fc8_weight"), _p(params, "fc8_bias"))


def dqn_q_values(data, params):
    x = np.asarray(data, np.float64)
    for name, stride in (("conv1", 4), ("conv2", 2), ("conv3", 1)):
        x = relu(conv2d(x, _p(params, name + "_weight"), _p(params, name + "_bias"), stride=stride))
    x = x.reshape(x.shape[0], -1)
    x = relu(dense(x, _p(params, "dense1_weight"), _p(params, "dense1_bias")))
    return dense(x, _p(params, "dense2_weight"), _p(params, "dense2_bias"))
