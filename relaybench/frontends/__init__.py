"""Frontends: models from other frameworks as Relay modules (Relay's ``relay.frontend``).

``from_onnx(model_or_path, shape=None, dtype="float32", opset=None, freeze_params=True,
loops="unroll")``
returns ``(mod, params)`` as Relay's ``relay.frontend.from_onnx`` does; see
:mod:`relaybench.frontends.onnx`. The ``onnx`` package is imported only when a model is read.
"""

from __future__ import annotations

__all__ = ["from_onnx"]


def from_onnx(model_or_path, shape=None, dtype="float32", opset=None, freeze_params=True,
              loops="unroll"):
    """Import an ONNX model (a ``ModelProto``, a path or bytes) as ``(mod, params)``;
    ``loops="recursive"`` makes every Loop and Scan a recursive function instead of unrolling
    the static ones (see :func:`relaybench.frontends.onnx.from_onnx`)."""
    from .onnx import from_onnx as _from_onnx
    return _from_onnx(model_or_path, shape=shape, dtype=dtype, opset=opset,
                      freeze_params=freeze_params, loops=loops)
