"""PyTorch twins of relaybench's vision zoo, for the benchmarks' peers.

Each class computes the same function as the relaybench model of the same name
(``relaybench/models/vision.py``) once :func:`load_params` has copied relaybench's ``params``
into it: the same layers in the same order, batch norm in inference form with the same epsilon
(2e-5 in the ResNets, 1e-5 elsewhere), ReLU6 as ``clamp(x, 0, 6)``, dropout the identity, and a
final softmax on the classifiers. ONNX Runtime runs the file :func:`export_onnx` writes from the
same module, so all three engines of ``bench/vision.py`` see one set of weights.

Every layer lives in one ``nn.ModuleDict`` keyed by the prefix of its relaybench weights
(``conv0``, ``bn0``, ``stage1_unit1_conv1``, ``fc1``), so a weight's relaybench name gives its
place in the module: ``bn0_moving_var`` is ``layers["bn0"].running_var``.

    >>> import relaybench as rb
    >>> from bench.torch_models import build, load_params
    >>> mod, params = rb.models.dqn()
    >>> net = load_params(build("dqn"), params)      # doctest: +SKIP

Needs the ``bench`` extra (``pip install -e '.[bench]'``: torch, onnx, onnxruntime).
"""

from __future__ import annotations

import warnings
from typing import Mapping, Sequence

import numpy as np

try:
    import torch
    from torch import nn
except ImportError as exc:   # pragma: no cover - depends on the environment
    raise ImportError("bench/torch_models.py needs PyTorch: pip install -e '.[bench]'") from exc

__all__ = ["ResNet18", "MobileNetV2", "VGG16", "DQN", "MODELS", "build", "load_params", "export_onnx"]


def _conv(in_channels, channels, kernel, stride=1, padding=0, groups=1, bias=False) -> nn.Conv2d:
    return nn.Conv2d(in_channels, channels, kernel, stride=stride, padding=padding, groups=groups,
                     bias=bias)


def _bn(channels: int, eps: float) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, eps=eps)


class _Zoo(nn.Module):
    """A network whose layers are named after their relaybench weights; built in eval mode."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleDict()

    def add(self, name: str, layer: nn.Module) -> None:
        if name in self.layers:
            raise ValueError(f"{type(self).__name__}: two layers are named {name!r}")
        self.layers[name] = layer

    def __getitem__(self, name: str) -> nn.Module:
        return self.layers[name]


# ---------------------------------------------------------------------------------------------
# ResNet-18

class ResNet18(_Zoo):
    """Post-activation ResNet-18: basic blocks, (2, 2, 2, 2) units, a 1x1 convolution and batch
    norm on the shortcut where the shape changes; batch-norm epsilon 2e-5."""

    EPS = 2e-5

    def __init__(self, num_classes: int = 1000, image_shape: Sequence[int] = (3, 224, 224)):
        super().__init__()
        eps = self.EPS
        self.add("conv0", _conv(image_shape[0], 64, 7, 2, 3))
        self.add("bn0", _bn(64, eps))
        self.units = []     # (name, has_shortcut_conv)
        channels = 64
        for stage, width in enumerate((64, 128, 256, 512), start=1):
            for i in (1, 2):
                name = f"stage{stage}_unit{i}"
                stride = 2 if (i == 1 and stage > 1) else 1
                self.add(f"{name}_conv1", _conv(channels, width, 3, stride, 1))
                self.add(f"{name}_bn1", _bn(width, eps))
                self.add(f"{name}_conv2", _conv(width, width, 3, 1, 1))
                self.add(f"{name}_bn2", _bn(width, eps))
                shortcut = stride != 1 or channels != width
                if shortcut:
                    self.add(f"{name}_sc", _conv(channels, width, 1, stride))
                    self.add(f"{name}_sc_bn", _bn(width, eps))
                self.units.append((name, shortcut))
                channels = width
        self.add("fc1", nn.Linear(channels, num_classes))
        self.eval()

    def forward(self, x):
        x = torch.relu(self["bn0"](self["conv0"](x)))
        x = nn.functional.max_pool2d(x, 3, 2, 1)
        for name, shortcut in self.units:
            y = torch.relu(self[f"{name}_bn1"](self[f"{name}_conv1"](x)))
            y = self[f"{name}_bn2"](self[f"{name}_conv2"](y))
            if shortcut:
                x = self[f"{name}_sc_bn"](self[f"{name}_sc"](x))
            x = torch.relu(y + x)
        x = torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return torch.softmax(self["fc1"](x), dim=-1)


# ---------------------------------------------------------------------------------------------
# MobileNet V2

# (expansion t, output channels c, repeats n, first stride s): the MobileNetV2 paper's table 2
_INVERTED_RESIDUALS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def _relu6(x):
    return torch.clamp(x, 0.0, 6.0)


class MobileNetV2(_Zoo):
    """MobileNet V2 at width 1.0: inverted residual blocks (1x1 expansion, depthwise 3x3, linear
    1x1 projection, a residual add where the shape is kept); ReLU6 as a clamp; epsilon 1e-5."""

    EPS = 1e-5

    def __init__(self, num_classes: int = 1000, image_shape: Sequence[int] = (3, 224, 224)):
        super().__init__()
        eps = self.EPS
        channels = 32
        self.add("conv0", _conv(image_shape[0], channels, 3, 2, 1))
        self.add("bn0", _bn(channels, eps))
        self.blocks = []    # (name, expands, residual)
        block = 0
        for t, c, n, s in _INVERTED_RESIDUALS:
            for i in range(n):
                stride = s if i == 0 else 1
                name = f"block{block}"
                hidden = channels * t
                if t != 1:
                    self.add(f"{name}_expand", _conv(channels, hidden, 1))
                    self.add(f"{name}_expand_bn", _bn(hidden, eps))
                self.add(f"{name}_depthwise", _conv(hidden, hidden, 3, stride, 1, groups=hidden))
                self.add(f"{name}_depthwise_bn", _bn(hidden, eps))
                self.add(f"{name}_project", _conv(hidden, c, 1))
                self.add(f"{name}_project_bn", _bn(c, eps))
                self.blocks.append((name, t != 1, stride == 1 and channels == c))
                channels = c
                block += 1
        self.add("conv_last", _conv(channels, 1280, 1))
        self.add("bn_last", _bn(1280, eps))
        self.add("fc", nn.Linear(1280, num_classes))
        self.eval()

    def forward(self, x):
        x = _relu6(self["bn0"](self["conv0"](x)))
        for name, expands, residual in self.blocks:
            y = x
            if expands:
                y = _relu6(self[f"{name}_expand_bn"](self[f"{name}_expand"](y)))
            y = _relu6(self[f"{name}_depthwise_bn"](self[f"{name}_depthwise"](y)))
            y = self[f"{name}_project_bn"](self[f"{name}_project"](y))
            x = x + y if residual else y
        x = _relu6(self["bn_last"](self["conv_last"](x)))
        x = torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return torch.softmax(self["fc"](x), dim=-1)


# ---------------------------------------------------------------------------------------------
# VGG-16

_VGG16_BLOCKS = ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3))


class VGG16(_Zoo):
    """VGG-16: thirteen 3x3 convolutions with bias and ReLU in five blocks closed by 2x2 max
    pools; fc6 and fc7 (4096, ReLU, dropout: the identity in eval mode) and fc8; softmax."""

    def __init__(self, num_classes: int = 1000, image_shape: Sequence[int] = (3, 224, 224)):
        super().__init__()
        h, w = image_shape[1] // 32, image_shape[2] // 32
        if h < 1 or w < 1:
            raise ValueError(f"VGG16: image_shape {tuple(image_shape)} is smaller than 32x32")
        self.blocks = []    # the convolutions' names, one list per block
        channels = image_shape[0]
        for b, (width, count) in enumerate(_VGG16_BLOCKS, start=1):
            names = []
            for i in range(1, count + 1):
                self.add(f"conv{b}_{i}", _conv(channels, width, 3, 1, 1, bias=True))
                names.append(f"conv{b}_{i}")
                channels = width
            self.blocks.append(names)
        units = channels * h * w
        self.add("fc6", nn.Linear(units, 4096))
        self.add("fc7", nn.Linear(4096, 4096))
        self.add("fc8", nn.Linear(4096, num_classes))
        self.dropout = nn.Dropout(0.5)
        self.eval()

    def forward(self, x):
        for names in self.blocks:
            for name in names:
                x = torch.relu(self[name](x))
            x = nn.functional.max_pool2d(x, 2, 2)
        x = torch.flatten(x, 1)
        x = self.dropout(torch.relu(self["fc6"](x)))
        x = self.dropout(torch.relu(self["fc7"](x)))
        return torch.softmax(self["fc8"](x), dim=-1)


# ---------------------------------------------------------------------------------------------
# DQN

class DQN(_Zoo):
    """The Nature DQN: 8x8/4 (32), 4x4/2 (64), 3x3/1 (64) convolutions with bias and ReLU, a
    512-unit dense layer with ReLU, one Q-value per action (no softmax)."""

    def __init__(self, num_actions: int = 18, image_shape: Sequence[int] = (4, 84, 84)):
        super().__init__()
        channels, h, w = image_shape
        for name, width, kernel, stride in (("conv1", 32, 8, 4), ("conv2", 64, 4, 2), ("conv3", 64, 3, 1)):
            self.add(name, _conv(channels, width, kernel, stride, bias=True))
            channels, h, w = width, (h - kernel) // stride + 1, (w - kernel) // stride + 1
        if h < 1 or w < 1:
            raise ValueError(f"DQN: image_shape {tuple(image_shape)} is too small for its convolutions")
        self.add("dense1", nn.Linear(channels * h * w, 512))
        self.add("dense2", nn.Linear(512, num_actions))
        self.eval()

    def forward(self, x):
        for name in ("conv1", "conv2", "conv3"):
            x = torch.relu(self[name](x))
        x = torch.relu(self["dense1"](torch.flatten(x, 1)))
        return self["dense2"](x)


MODELS = {"resnet18": ResNet18, "mobilenet_v2": MobileNetV2, "vgg16": VGG16, "dqn": DQN}


def build(name: str, **kwargs) -> _Zoo:
    """The PyTorch twin of relaybench's zoo model ``name``, in eval mode, with the keyword
    arguments of its class (``num_classes`` or ``num_actions``, ``image_shape``)."""
    try:
        cls = MODELS[name]
    except KeyError:
        raise ValueError(f"no PyTorch twin for model {name!r}; available: {', '.join(MODELS)}") from None
    return cls(**kwargs)


# relaybench's weight suffix -> the torch parameter or buffer it fills (longest suffixes first)
_FIELDS = (("_moving_mean", "running_mean"), ("_moving_var", "running_var"),
           ("_gamma", "weight"), ("_beta", "bias"), ("_weight", "weight"), ("_bias", "bias"))


def _place(module: _Zoo, name: str) -> str:
    for suffix, field in _FIELDS:
        if name.endswith(suffix):
            prefix = name[: -len(suffix)]
            if prefix in module.layers:
                return f"layers.{prefix}.{field}"
    raise KeyError(f"load_params: relaybench weight {name!r} has no place in {type(module).__name__}")


def load_params(module: _Zoo, params: Mapping[str, np.ndarray]) -> _Zoo:
    """Copy relaybench's ``params`` (name -> numpy array) into ``module`` and return it.

    Every weight must find its place with the same shape, and every parameter and running
    statistic of the module must be filled, so a module that differs from the relaybench model
    in any layer is refused rather than half loaded."""
    state = module.state_dict()
    wanted = {k for k in state if not k.endswith("num_batches_tracked")}
    filled = set()
    for name, value in params.items():
        key = _place(module, name)
        value = np.asarray(value)
        if tuple(state[key].shape) != value.shape:
            raise ValueError(f"load_params: {name!r} has shape {value.shape} but {type(module).__name__}"
                             f".{key} has {tuple(state[key].shape)}")
        state[key] = torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32))
        filled.add(key)
    missing = sorted(wanted - filled)
    if missing:
        raise ValueError(f"load_params: {type(module).__name__} has {len(missing)} tensors that params "
                         f"does not fill, first {missing[:3]}")
    module.load_state_dict(state)
    return module.eval()


def export_onnx(module: nn.Module, example, path) -> str:
    """Write ``module`` as an ONNX file (opset 17) traced at ``example`` (a tensor or a numpy
    array); the graph's input is named ``data`` and its output ``output``. Returns the path.

    The TorchScript exporter (``dynamo=False``) is used: the networks have no control flow, and
    the torch.export-based exporter needs ``onnxscript``, which the bench extra does not install.
    Its deprecation notice is silenced here; the agreement of the file with relaybench is tested.
    """
    if isinstance(example, np.ndarray):
        example = torch.from_numpy(example)
    path = str(path)
    module.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(module, (example,), path, opset_version=17, input_names=["data"],
                          output_names=["output"], dynamo=False)
    return path
