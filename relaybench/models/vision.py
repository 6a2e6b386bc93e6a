"""Vision workloads of the paper: ResNet-18/34/50, MobileNet V2, VGG-16 and the Nature DQN.

Each ``NAME(batch_size=1, dtype="float32", seed=0, ...)`` returns ``(mod, params)``. ``@main``
takes the image ``%data`` first and then every weight as a parameter, named the way Relay's
``relay.testing`` models name them (``%conv0_weight``, ``%bn0_gamma``, ``%fc1_bias``...), so the
printed program stays short and its weights can be swapped. ``params`` maps those names to numpy
arrays drawn from ``numpy.random.default_rng(seed)``: He-normal convolution and dense weights,
batch-norm ``gamma`` near 1 (0.2 to 0.4 on the last batch norm of a ResNet's residual branch,
see ``_resnet``), ``beta`` and ``moving_mean`` near 0 and ``moving_var`` around 1, so activations
stay of order one through the whole network and the classifiers' probabilities are far from
one-hot.

>>> import relaybench as rb
>>> from relaybench import models
>>> mod, params = models.resnet18(image_shape=(3, 32, 32), num_classes=10)
>>> rb.passes.InferType()(mod)["main"].body.checked_type
Tensor[(1, 10), float32]
>>> params["conv0_weight"].shape, len(mod["main"].params) == 1 + len(params)
((64, 3, 7, 7), True)

The classifiers end in ``nn.softmax`` as Relay's testing models do; the DQN returns one Q-value
per action. ``image_shape`` is a parameter, so tests can run the same operators on 32x32 images;
``init_params=False`` builds the module alone (``params`` is then empty), which is how the
parameter counts of the 224x224 models are read without drawing 138 million random numbers.

The ResNets follow the original post-activation design that ``torchvision`` also uses
(convolution without bias, batch norm, ReLU; the residual added before the last ReLU; a 1x1
convolution and batch norm on the shortcut when the shape changes; the stride of a bottleneck in
its 3x3 convolution), so their trainable parameter counts are the familiar ones: 11,689,512 for
ResNet-18 at 1000 classes.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .. import op
from ..ir.builder import var
from ..ir.expr import Expr, Function, Var
from ..ir.module import IRModule
from ._registry import register_model

__all__ = ["resnet18", "resnet34", "resnet50", "mobilenet_v2", "vgg16", "dqn"]

_BN_FIELDS = ("gamma", "beta", "moving_mean", "moving_var")


class _Weights:
    """The weights of a network as it is built: each one becomes a typed parameter of ``@main``
    and remembers how it is initialized, so ``params(seed)`` can draw them in a fixed order."""

    def __init__(self, dtype: str):
        self.dtype = dtype
        self.vars: list = []
        self.inits: list = []   # (name, shape, kind, scale)
        self._names: set = set()

    def add(self, name: str, shape: Sequence[int], kind: str, scale: float = 1.0) -> Var:
        if name in self._names:
            raise ValueError(f"two weights are named {name!r}")
        self._names.add(name)
        shape = tuple(int(s) for s in shape)
        v = var(name, shape=shape, dtype=self.dtype)
        self.vars.append(v)
        self.inits.append((name, shape, kind, scale))
        return v

    def module(self, data: Var, out: Expr) -> IRModule:
        return IRModule.from_expr(Function([data] + self.vars, out))

    def params(self, seed: int) -> dict:
        rng = np.random.default_rng(seed)
        out = {}
        for name, shape, kind, scale in self.inits:
            try:
                draw = _INITS[kind]
            except KeyError:
                raise ValueError(f"unknown initializer {kind!r} for weight {name!r}") from None
            out[name] = draw(rng, shape, scale).astype(self.dtype, copy=False)
        return out


# How each kind of weight is drawn (float32 first, then cast to the model's dtype).
_INITS = {
    "normal": lambda rng, shape, scale: rng.standard_normal(shape, dtype=np.float32) * np.float32(scale),
    "small": lambda rng, shape, scale: rng.standard_normal(shape, dtype=np.float32) * np.float32(0.1),
    "gamma": lambda rng, shape, scale: rng.uniform(0.8, 1.2, shape).astype(np.float32),
    "residual_gamma": lambda rng, shape, scale: rng.uniform(0.2, 0.4, shape).astype(np.float32),
    "var": lambda rng, shape, scale: rng.uniform(0.5, 1.5, shape).astype(np.float32),
}


def _finish(w: _Weights, data: Var, out: Expr, seed: int, init_params: bool):
    mod = w.module(data, out)
    return mod, (w.params(seed) if init_params else {})


def _data(batch_size: int, image_shape: Sequence[int], dtype: str) -> Var:
    shape = (int(batch_size),) + tuple(int(s) for s in image_shape)
    if len(shape) != 4:
        raise ValueError(f"image_shape must be (channels, height, width), got {tuple(image_shape)}")
    return var("data", shape=shape, dtype=dtype)


# A convolution's weights have variance 1 / (fan_in * input_moment), which maps inputs of mean
# square ``input_moment`` to outputs of unit variance. After a ReLU of unit-variance values the
# mean square is 1/2, which makes it He initialization, sqrt(2 / fan_in); standard-normal images
# have 1 and frames in [0, 1] have 1/3.
_AFTER_RELU = 0.5


def _conv(w: _Weights, x: Expr, name: str, in_channels: int, channels: int, kernel: int,
          stride: int = 1, padding: int = 0, groups: int = 1, bias: bool = False,
          input_moment: float = _AFTER_RELU) -> Expr:
    """``nn.conv2d`` with an OIHW weight ``NAME_weight`` (and ``nn.bias_add`` of ``NAME_bias``)."""
    fan_in = in_channels // groups * kernel * kernel
    weight = w.add(f"{name}_weight", (channels, in_channels // groups, kernel, kernel), "normal",
                   math.sqrt(1.0 / (fan_in * input_moment)))
    y = op.nn.conv2d(x, weight, strides=(stride, stride), padding=(padding, padding),
                     groups=groups, channels=channels, kernel_size=(kernel, kernel))
    if bias:
        y = op.nn.bias_add(y, w.add(f"{name}_bias", (channels,), "small"))
    return y


def _bn(w: _Weights, x: Expr, name: str, channels: int, epsilon: float = 1e-5,
        gamma: str = "gamma") -> Expr:
    """Inference batch norm: the first field of ``nn.batch_norm``'s (out, mean, var) tuple."""
    kinds = {"gamma": gamma, "beta": "small", "moving_mean": "small", "moving_var": "var"}
    args = [w.add(f"{name}_{f}", (channels,), kinds[f]) for f in _BN_FIELDS]
    return op.nn.batch_norm(x, *args, epsilon=epsilon)[0]


def _dense(w: _Weights, x: Expr, name: str, in_units: int, units: int, last: bool = False) -> Expr:
    """``nn.dense`` and ``nn.bias_add`` (axis -1); the last layer's weights give unit-variance
    logits for unit-variance inputs."""
    weight = w.add(f"{name}_weight", (units, in_units), "normal",
                   math.sqrt((1.0 if last else 2.0) / in_units))
    y = op.nn.dense(x, weight, units=units)
    return op.nn.bias_add(y, w.add(f"{name}_bias", (units,), "small"), axis=-1)


# ---------------------------------------------------------------------------------------------
# ResNet

_RESNET_EPS = 2e-5   # the epsilon of Relay's testing ResNets


def _basic_unit(w, x, name, in_channels, channels, stride):
    y = _conv(w, x, f"{name}_conv1", in_channels, channels, 3, stride, 1)
    y = op.nn.relu(_bn(w, y, f"{name}_bn1", channels, _RESNET_EPS))
    y = _conv(w, y, f"{name}_conv2", channels, channels, 3, 1, 1)
    return _bn(w, y, f"{name}_bn2", channels, _RESNET_EPS, "residual_gamma")


def _bottleneck_unit(w, x, name, in_channels, channels, stride):
    mid = channels // 4
    y = _conv(w, x, f"{name}_conv1", in_channels, mid, 1)
    y = op.nn.relu(_bn(w, y, f"{name}_bn1", mid, _RESNET_EPS))
    y = _conv(w, y, f"{name}_conv2", mid, mid, 3, stride, 1)
    y = op.nn.relu(_bn(w, y, f"{name}_bn2", mid, _RESNET_EPS))
    y = _conv(w, y, f"{name}_conv3", mid, channels, 1)
    return _bn(w, y, f"{name}_bn3", channels, _RESNET_EPS, "residual_gamma")


def _resnet(units: Sequence[int], bottleneck: bool, batch_size, dtype, seed, num_classes, image_shape,
            init_params):
    """The post-activation ResNet.

    Batch norm at inference does not renormalize, so with every ``gamma`` near 1 the residual sums
    would grow about 1.5 times in mean square at each unit (ResNet-50's logits reach thousands).
    The last batch norm of each residual branch therefore draws ``gamma`` in [0.2, 0.4], a milder
    form of the zero-initialized residual ``gamma`` of Goyal et al. (2017): activations stay of
    order one and every branch still contributes."""
    w = _Weights(dtype)
    data = _data(batch_size, image_shape, dtype)
    x = _conv(w, data, "conv0", image_shape[0], 64, 7, 2, 3, input_moment=1.0)
    x = op.nn.relu(_bn(w, x, "bn0", 64, _RESNET_EPS))
    x = op.nn.max_pool2d(x, pool_size=(3, 3), strides=(2, 2), padding=(1, 1))
    channels = 64
    widths = (256, 512, 1024, 2048) if bottleneck else (64, 128, 256, 512)
    unit = _bottleneck_unit if bottleneck else _basic_unit
    for stage, (count, width) in enumerate(zip(units, widths), start=1):
        for i in range(1, count + 1):
            name = f"stage{stage}_unit{i}"
            stride = 2 if (i == 1 and stage > 1) else 1
            branch = unit(w, x, name, channels, width, stride)
            if stride != 1 or channels != width:
                shortcut = _conv(w, x, f"{name}_sc", channels, width, 1, stride)
                shortcut = _bn(w, shortcut, f"{name}_sc_bn", width, _RESNET_EPS)
            else:
                shortcut = x
            x = op.nn.relu(op.add(branch, shortcut))
            channels = width
    x = op.nn.batch_flatten(op.nn.global_avg_pool2d(x))
    x = op.nn.softmax(_dense(w, x, "fc1", channels, num_classes, last=True))
    return _finish(w, data, x, seed, init_params)


@register_model
def resnet18(batch_size: int = 1, dtype: str = "float32", seed: int = 0, num_classes: int = 1000,
             image_shape: Sequence[int] = (3, 224, 224), init_params: bool = True):
    """ResNet-18: basic blocks, (2, 2, 2, 2) units per stage."""
    return _resnet((2, 2, 2, 2), False, batch_size, dtype, seed, num_classes, image_shape, init_params)


@register_model
def resnet34(batch_size: int = 1, dtype: str = "float32", seed: int = 0, num_classes: int = 1000,
             image_shape: Sequence[int] = (3, 224, 224), init_params: bool = True):
    """ResNet-34: basic blocks, (3, 4, 6, 3) units per stage."""
    return _resnet((3, 4, 6, 3), False, batch_size, dtype, seed, num_classes, image_shape, init_params)


@register_model
def resnet50(batch_size: int = 1, dtype: str = "float32", seed: int = 0, num_classes: int = 1000,
             image_shape: Sequence[int] = (3, 224, 224), init_params: bool = True):
    """ResNet-50: bottleneck blocks (1x1, 3x3, 1x1 with 4x expansion), (3, 4, 6, 3) units."""
    return _resnet((3, 4, 6, 3), True, batch_size, dtype, seed, num_classes, image_shape, init_params)


# ---------------------------------------------------------------------------------------------
# MobileNet V2

# (expansion t, output channels c, repeats n, first stride s), as in the MobileNetV2 paper's table
_MOBILENET_V2_TABLE = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def _divisible(value: float, divisor: int = 8) -> int:
    """Round a scaled channel count to a multiple of ``divisor``, never more than 10% down."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * value:
        rounded += divisor
    return rounded


def _relu6(x: Expr) -> Expr:
    return op.clip(x, a_min=0.0, a_max=6.0)


@register_model
def mobilenet_v2(batch_size: int = 1, dtype: str = "float32", seed: int = 0, num_classes: int = 1000,
                 image_shape: Sequence[int] = (3, 224, 224), width_multiplier: float = 1.0,
                 init_params: bool = True):
    """MobileNet V2: inverted residual blocks (1x1 expansion, depthwise 3x3 through ``groups``,
    linear 1x1 projection; a residual add when shape allows), ReLU6 written as ``clip(x, 0, 6)``.

    ``width_multiplier`` scales every channel count (rounded to a multiple of 8); the last
    convolution keeps at least 1280 channels.
    """
    w = _Weights(dtype)
    data = _data(batch_size, image_shape, dtype)
    channels = _divisible(32 * width_multiplier)
    x = _conv(w, data, "conv0", image_shape[0], channels, 3, 2, 1, input_moment=1.0)
    x = _relu6(_bn(w, x, "bn0", channels))
    block = 0
    for t, c, n, s in _MOBILENET_V2_TABLE:
        out_channels = _divisible(c * width_multiplier)
        for i in range(n):
            stride = s if i == 0 else 1
            name = f"block{block}"
            hidden = channels * t
            y = x
            if t != 1:
                y = _conv(w, y, f"{name}_expand", channels, hidden, 1)
                y = _relu6(_bn(w, y, f"{name}_expand_bn", hidden))
            y = _conv(w, y, f"{name}_depthwise", hidden, hidden, 3, stride, 1, groups=hidden)
            y = _relu6(_bn(w, y, f"{name}_depthwise_bn", hidden))
            y = _conv(w, y, f"{name}_project", hidden, out_channels, 1)
            y = _bn(w, y, f"{name}_project_bn", out_channels)
            # a linear residual (no ReLU after the sum) when the block keeps the shape
            x = op.add(x, y) if stride == 1 and channels == out_channels else y
            channels = out_channels
            block += 1
    last = _divisible(1280 * max(1.0, width_multiplier))
    x = _conv(w, x, "conv_last", channels, last, 1)
    x = _relu6(_bn(w, x, "bn_last", last))
    x = op.nn.batch_flatten(op.nn.global_avg_pool2d(x))
    x = op.nn.softmax(_dense(w, x, "fc", last, num_classes, last=True))
    return _finish(w, data, x, seed, init_params)


# ---------------------------------------------------------------------------------------------
# VGG-16

_VGG16_BLOCKS = ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3))


@register_model
def vgg16(batch_size: int = 1, dtype: str = "float32", seed: int = 0, num_classes: int = 1000,
          image_shape: Sequence[int] = (3, 224, 224), init_params: bool = True):
    """VGG-16: thirteen 3x3 convolutions with bias and ReLU in five blocks, each closed by a 2x2
    max pool; then fc6 and fc7 (4096 units, ReLU, dropout) and fc8. Dropout is ``nn.dropout``
    (field 0), the identity at inference, as in Relay's testing VGG."""
    w = _Weights(dtype)
    data = _data(batch_size, image_shape, dtype)
    h, wd = image_shape[1] // 32, image_shape[2] // 32       # after five 2x2 pools
    if h < 1 or wd < 1:
        raise ValueError(f"vgg16: image_shape {tuple(image_shape)} is smaller than 32x32")
    x, channels = data, image_shape[0]
    for b, (width, count) in enumerate(_VGG16_BLOCKS, start=1):
        for i in range(1, count + 1):
            moment = 1.0 if x is data else _AFTER_RELU
            x = op.nn.relu(_conv(w, x, f"conv{b}_{i}", channels, width, 3, 1, 1, bias=True,
                                 input_moment=moment))
            channels = width
        x = op.nn.max_pool2d(x, pool_size=(2, 2), strides=(2, 2))
    x = op.nn.batch_flatten(x)
    units = channels * h * wd
    for name in ("fc6", "fc7"):
        x = op.nn.relu(_dense(w, x, name, units, 4096))
        x = op.nn.dropout(x, rate=0.5)[0]
        units = 4096
    x = op.nn.softmax(_dense(w, x, "fc8", units, num_classes, last=True))
    return _finish(w, data, x, seed, init_params)


# ---------------------------------------------------------------------------------------------
# DQN

@register_model
def dqn(batch_size: int = 1, dtype: str = "float32", seed: int = 0, num_actions: int = 18,
        image_shape: Sequence[int] = (4, 84, 84), init_params: bool = True):
    """The Nature DQN: four stacked 84x84 frames; 8x8/4 (32), 4x4/2 (64) and 3x3/1 (64)
    convolutions with bias and ReLU; a 512-unit dense layer with ReLU; one Q-value per action."""
    w = _Weights(dtype)
    data = _data(batch_size, image_shape, dtype)
    x, channels, h, wd = data, image_shape[0], image_shape[1], image_shape[2]
    for name, width, kernel, stride in (("conv1", 32, 8, 4), ("conv2", 64, 4, 2), ("conv3", 64, 3, 1)):
        moment = 1.0 / 3.0 if x is data else _AFTER_RELU    # frames are in [0, 1]
        x = op.nn.relu(_conv(w, x, name, channels, width, kernel, stride, bias=True, input_moment=moment))
        channels, h, wd = width, (h - kernel) // stride + 1, (wd - kernel) // stride + 1
    if h < 1 or wd < 1:
        raise ValueError(f"dqn: image_shape {tuple(image_shape)} is too small for its convolutions")
    x = op.nn.batch_flatten(x)
    x = op.nn.relu(_dense(w, x, "dense1", channels * h * wd, 512))
    x = _dense(w, x, "dense2", 512, num_actions, last=True)
    return _finish(w, data, x, seed, init_params)
