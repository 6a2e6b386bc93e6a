"""The ONNX frontend: ``from_onnx(model_or_path, shape=None, dtype="float32", opset=None,
freeze_params=True) -> (mod, params)``, Relay's ``relay.frontend.from_onnx``.

* :mod:`.importer` walks the graph (values by name, types as it goes, constants folded, one
  error listing every unsupported op);
* :mod:`.table` maps each ONNX op type and opset to its converter, written in the family files
  ``_math``, ``_nn``, ``_tensor`` and ``_control``;
* :mod:`.backend` is an ``onnx.backend.base.Backend`` for the ONNX backend tests
  (the interpreter, or an LLVM build).

>>> from onnx import helper, TensorProto
>>> node = helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)
>>> w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3], [0.5] * 12)
>>> g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
...                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w])
>>> mod, params = from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
>>> mod["main"].body.op.name
'nn.dense'
"""

from .importer import (MAX_OPSET, MIN_OPSET, NeedsStaticValue, OnnxImportError, UnsupportedOps,  # noqa: F401
                       from_onnx, load_model)
from .table import CONVERTERS, supported_ops  # noqa: F401

__all__ = ["from_onnx", "load_model", "OnnxImportError", "UnsupportedOps", "NeedsStaticValue",
           "CONVERTERS", "supported_ops"]
