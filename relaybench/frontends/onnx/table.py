"""The converter table: ONNX op type -> ``[(since_version, converter), ...]``.

The importer asks ONNX's op schemas which version of an op the model's opset selects (``Add`` at
opset 12 is ``Add-7``) and uses the entry with the largest ``since_version`` not above it. An op
whose semantics changed between versions either has one entry per version or reads
``ctx.version`` inside its converter (``Squeeze`` takes ``axes`` as an attribute before 13 and
as an input from 13). An op type missing here, or selected at a version below its first
entry, is reported by the importer in one error with every other unsupported op.

The converters live in the family files: :mod:`._math` (elementwise, activations, reductions),
:mod:`._nn` (products, convolutions, pooling, normalization, resize, quantized ops),
:mod:`._tensor` (shape and data movement) and :mod:`._control` (If, Loop, Scan). Ops of other
domains are keyed ``domain.OpType`` (``ai.onnx.ml.Binarizer``).

Recurrences whose length is static (Scan, Loop with a known trip count and condition, RNN, GRU,
LSTM, LinearAttention) are unrolled into the program, one step after another (Loop and Scan
become recursive functions instead under ``from_onnx(..., loops="recursive")``, and a Loop whose
iterations depend on the data always does); ops whose output
shape depends on the data (NonZero, Unique, NonMaxSuppression) need their inputs at import time,
where they are computed into constants (the backend binds the inputs it is given, see
:mod:`.backend`).
"""

from __future__ import annotations

from ... import op
from . import _control as F
from . import _math as M
from . import _nn as N
from . import _tensor as T

CONVERTERS = {
    # ---- elementwise arithmetic ------------------------------------------------------------------
    "Add": [(1, M.legacy_broadcast(op.add)), (7, M.binary(op.add))],
    "Sub": [(1, M.legacy_broadcast(op.subtract)), (7, M.binary(op.subtract))],
    "Mul": [(1, M.legacy_broadcast(op.multiply)), (7, M.binary(op.multiply))],
    "Div": [(1, M.legacy_broadcast(op.divide)), (7, M.div)],
    "Pow": [(1, M.pow_)],
    "Mod": [(10, M.mod)],
    "Max": [(1, M.variadic(op.maximum))],
    "Min": [(1, M.variadic(op.minimum))],
    "Sum": [(1, M.variadic(op.add))],
    "Mean": [(1, M.mean)],
    "BitShift": [(11, M.bitshift)],
    "BitwiseAnd": [(18, M.binary(op.bitwise_and))],
    "BitwiseOr": [(18, M.binary(op.bitwise_or))],
    "BitwiseXor": [(18, M.binary(op.bitwise_xor))],
    "BitwiseNot": [(18, M.unary(op.bitwise_not))],
    # ---- comparison and logic --------------------------------------------------------------------
    "Equal": [(1, M.binary(op.equal))],
    "Less": [(1, M.binary(op.less))],
    "LessOrEqual": [(12, M.binary(op.less_equal))],
    "Greater": [(1, M.binary(op.greater))],
    "GreaterOrEqual": [(12, M.binary(op.greater_equal))],
    "And": [(1, M.binary(op.logical_and))],
    "Or": [(1, M.binary(op.logical_or))],
    "Xor": [(1, M.binary(op.logical_xor))],
    "Not": [(1, M.not_)],
    "Where": [(9, M.where)],
    # ---- unary math ------------------------------------------------------------------------------
    "Abs": [(1, M.unary(op.abs))],
    "Neg": [(1, M.unary(op.negative))],
    "Sign": [(9, M.unary(op.sign))],
    "Exp": [(1, M.unary(op.exp))],
    "Log": [(1, M.unary(op.log))],
    "Sqrt": [(1, M.unary(op.sqrt))],
    "Reciprocal": [(1, M.reciprocal)],
    "Floor": [(1, M.unary(op.floor))],
    "Ceil": [(1, M.unary(op.ceil))],
    "Round": [(11, M.round_half_even)],
    "Erf": [(9, M.unary(op.erf))],
    "Sin": [(7, M.unary(op.sin))],
    "Cos": [(7, M.unary(op.cos))],
    "Tan": [(7, M.unary(op.tan))],
    "Asin": [(7, M.unary(op.asin))],
    "Acos": [(7, M.unary(op.acos))],
    "Atan": [(7, M.unary(op.atan))],
    "Sinh": [(9, M.unary(op.sinh))],
    "Cosh": [(9, M.unary(op.cosh))],
    "Asinh": [(9, M.unary(op.asinh))],
    "Acosh": [(9, M.unary(op.acosh))],
    "Atanh": [(9, M.unary(op.atanh))],
    "IsNaN": [(9, M.unary(op.isnan))],
    "IsInf": [(10, M.isinf)],
    "Cast": [(1, M.cast)],
    "BitCast": [(26, M.bitcast)],
    "CastLike": [(15, M.cast_like)],
    "Clip": [(1, M.clip)],
    "Identity": [(1, M.identity)],
    "OptionalHasElement": [(15, M.optional_has_element)],
    "OptionalGetElement": [(15, M.identity)],
    "HannWindow": [(17, M.window("hann"))],
    "HammingWindow": [(17, M.window("hamming"))],
    "BlackmanWindow": [(17, M.window("blackman"))],
    "NegativeLogLikelihoodLoss": [(12, M.nll_loss)],
    "SoftmaxCrossEntropyLoss": [(12, M.softmax_cross_entropy)],
    # ---- activations -----------------------------------------------------------------------------
    "Relu": [(1, M.relu)],
    "LeakyRelu": [(1, M.leaky_relu)],
    "PRelu": [(1, M.prelu)],
    "Elu": [(1, M.elu)],
    "Celu": [(12, M.celu)],
    "Selu": [(1, M.selu)],
    "ThresholdedRelu": [(10, M.thresholded_relu)],
    "Sigmoid": [(1, M.sigmoid)],
    "HardSigmoid": [(1, M.hard_sigmoid)],
    "HardSwish": [(14, M.hard_swish)],
    "Tanh": [(1, M.unary(op.tanh))],
    "Softplus": [(1, M.softplus)],
    "Softsign": [(1, M.softsign)],
    "Mish": [(18, M.mish)],
    "Gelu": [(20, M.gelu)],
    "Shrink": [(9, M.shrink)],
    "Swish": [(24, M.swish)],
    "Softmax": [(1, M.softmax)],
    "LogSoftmax": [(1, M.log_softmax)],
    "Hardmax": [(1, M.hardmax)],
    # ---- reductions ------------------------------------------------------------------------------
    "ReduceSum": [(1, M.reduction(op.sum, axes_input_since=13))],
    "ReduceMean": [(1, M.reduction(op.mean))],
    "ReduceMax": [(1, M.reduction(op.max))],
    "ReduceMin": [(1, M.reduction(op.min))],
    "ReduceProd": [(1, M.reduction(op.prod))],
    "ReduceSumSquare": [(1, M.reduction(op.sum, prepare=M.sum_square))],
    "ReduceL1": [(1, M.reduction(op.sum, prepare=M.abs_))],
    "ReduceL2": [(1, M.reduction(op.sum, prepare=M.sum_square, finish=M.l2_finish))],
    "ReduceLogSum": [(1, M.reduction(op.sum, finish=M.log_finish))],
    "ReduceLogSumExp": [(1, M.log_sum_exp(18))],
    "ArgMax": [(1, M.arg_reduce(op.argmax))],
    "ArgMin": [(1, M.arg_reduce(op.argmin))],
    "CumSum": [(11, M.cumsum)],
    "CumProd": [(26, M.cumprod)],
    # ---- products, convolution, pooling ----------------------------------------------------------
    "Gemm": [(1, N.gemm)],
    "Attention": [(23, N.attention)],
    "ai.onnx.preview.FlexAttention": [(1, N.flex_attention)],
    "RNN": [(7, N.rnn)],
    "GRU": [(7, N.gru)],
    "LSTM": [(7, N.lstm)],
    "RotaryEmbedding": [(23, N.rotary_embedding)],
    "LinearAttention": [(27, N.linear_attention)],
    "CausalConvWithState": [(26, N.causal_conv_with_state)],
    "MatMul": [(1, N.matmul)],
    "Conv": [(1, N.conv)],
    "ConvTranspose": [(1, N.conv_transpose)],
    "MaxPool": [(1, N.max_pool)],
    "AveragePool": [(1, N.avg_pool)],
    "GlobalAveragePool": [(1, N.global_pool("avg"))],
    "GlobalMaxPool": [(1, N.global_pool("max"))],
    "LpPool": [(1, N.lp_pool)],
    "GlobalLpPool": [(1, N.global_lp_pool)],
    # ---- normalization ---------------------------------------------------------------------------
    "BatchNormalization": [(1, N.batch_norm_any)],
    "InstanceNormalization": [(1, N.instance_norm)],
    "LayerNormalization": [(17, N.layer_norm)],
    "GroupNormalization": [(18, N.group_norm)],
    "LRN": [(1, N.lrn)],
    "RMSNormalization": [(23, M.rms_normalization)],
    "LpNormalization": [(1, M.lp_normalization)],
    "MeanVarianceNormalization": [(9, N.mean_variance_normalization)],
    "Dropout": [(1, N.dropout)],
    # ---- resize ----------------------------------------------------------------------------------
    "Resize": [(10, N.resize)],
    "GridSample": [(16, N.grid_sample)],
    "DFT": [(17, N.dft)],
    "Col2Im": [(18, N.col2im)],
    "Det": [(11, N.det)],
    "AffineGrid": [(20, N.affine_grid)],
    "Upsample": [(9, N.resize)],
    # ---- shape and data movement -----------------------------------------------------------------
    "Reshape": [(5, T.reshape)],
    "Flatten": [(1, T.flatten)],
    "Squeeze": [(1, T.squeeze)],
    "Unsqueeze": [(1, T.unsqueeze)],
    "Transpose": [(1, T.transpose)],
    "Concat": [(4, T.concat)],
    "Split": [(2, T.split)],
    "Slice": [(1, T.slice_)],
    "Gather": [(1, T.gather)],
    "GatherElements": [(11, T.gather_elements)],
    "GatherND": [(11, T.gather_nd)],
    "ScatterND": [(11, T.scatter_nd)],
    "ScatterElements": [(11, T.scatter_elements)],
    "TensorScatter": [(24, T.tensor_scatter)],
    "Scatter": [(9, T.scatter_elements)],
    "Expand": [(8, T.expand)],
    "Tile": [(6, T.tile)],
    "Pad": [(2, T.pad)],
    "Shape": [(1, T.shape)],
    "Size": [(1, T.size)],
    "ConstantOfShape": [(9, T.constant_of_shape)],
    "Constant": [(1, T.constant)],
    "Range": [(11, T.range_)],
    "EyeLike": [(9, T.eye_like)],
    "OneHot": [(9, T.one_hot)],
    "TopK": [(1, T.topk)],
    "DepthToSpace": [(1, T.depth_to_space)],
    "SpaceToDepth": [(1, T.space_to_depth)],
    "Trilu": [(14, T.trilu)],
    "CenterCropPad": [(18, T.center_crop_pad)],
    "NonZero": [(9, T.nonzero)],
    "NonMaxSuppression": [(10, T.non_max_suppression)],
    "Unique": [(11, T.unique)],
    "Compress": [(9, T.compress)],
    "ReverseSequence": [(10, T.reverse_sequence)],
    "Einsum": [(12, T.einsum)],
    # ---- ai.onnx.ml ---------------------------------------------------------------------------
    "ai.onnx.ml.Binarizer": [(1, T.binarizer)],
    "ai.onnx.ml.ArrayFeatureExtractor": [(1, T.array_feature_extractor)],
    # ---- quantized ops ---------------------------------------------------------------------------
    "QuantizeLinear": [(10, N.quantize_linear)],
    "DequantizeLinear": [(10, N.dequantize_linear)],
    "DynamicQuantizeLinear": [(11, N.dynamic_quantize_linear)],
    "ConvInteger": [(10, N.conv_integer)],
    "MatMulInteger": [(10, N.matmul_integer)],
    "QLinearConv": [(10, N.qlinear_conv)],
    "QLinearMatMul": [(10, N.qlinear_matmul)],
    # ---- control flow ----------------------------------------------------------------------------
    "If": [(1, F.if_)],
    "Scan": [(8, F.scan)],
    "Loop": [(1, F.loop)],
}


def supported_ops() -> list:
    """``(op type, since version, converter name)`` rows of :data:`CONVERTERS`, sorted."""
    return [(name, since, getattr(func, "__name__", "?"))
            for name in sorted(CONVERTERS) for since, func in CONVERTERS[name]]
