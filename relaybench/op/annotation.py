"""Annotation operators (``annotation.*``): calls that mark a program for the passes and change
no value.

``annotation.stop_fusion(data)`` is the identity, with the pattern kind OPAQUE so that FuseOps
never puts it in a group with another operator: fusion stops at it on both sides, as in Relay
(``src/relay/op/annotation/annotation.cc``).

>>> import relaybench as rb
>>> from relaybench.ir.type_infer import infer_expr
>>> infer_expr(stop_fusion(rb.var("x", shape=(2, 3))))
Tensor[(2, 3), float32]
"""

from __future__ import annotations

from . import _compute as C
from .registry import OpDef, OpPattern, register
from .tensor import identity_rel

__all__ = ["stop_fusion"]

stop_fusion = register(OpDef(
    "annotation.stop_fusion", ("data",), identity_rel, OpPattern.OPAQUE,
    reference=lambda x, attrs: x, compute=C.identity_compute("stop_fusion"),
    doc="The identity; its pattern kind OPAQUE keeps FuseOps from fusing across it, so the "
        "operators before it and after it become separate kernels."))
