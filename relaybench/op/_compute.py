"""Tensor-expression computes of the operators, and the helpers they share.

An operator's ``compute`` (the :class:`~relaybench.op.registry.OpDef` slot) builds the kernel
body of one call from tensor expressions:

    ``compute(inputs, attrs, out_type) -> te.Tensor`` (a list of tensors for a tuple-valued op)

``inputs`` are :class:`relaybench.te.Tensor` s with static int shapes, one per argument of the call
(a tuple argument, as ``concatenate``'s, is a list of tensors); ``attrs`` are the call's
normalized Attrs and ``out_type`` its checked :class:`~relaybench.ir.types.TensorType` (a
TupleType's field list for tuple-valued ops), whose shape the result has. Computes are built with
``te.compute``, ``te.reduce_axis``, ``te.sum``/``prod``/``max``/``min``, ``te.if_then_else``,
``te.cast`` and the math intrinsics only, so that fusion can inline one into another and every
backend can lower them. A dtype or layout that a compute cannot express raises
:class:`CompileError` naming the op. Anchors (``nn.conv2d``, pooling) read their padded input
through a ``pad`` stage of its own, which schedules inline; reductions that need a second pass
(``mean``, ``softmax``, ``argmax``) are chains of computes, the last one being the result.

Every operator whose pattern kind is not OPAQUE has a compute, and so do the OPAQUE
``nn.layer_norm``, ``nn.lrn``, ``nn.dropout``, ``nn.instance_norm``, ``nn.group_norm``,
``scatter_nd``, the scans (``cumsum``, ``cumprod``), the sorts (``sort``, ``argsort``, ``topk``:
quadratic rank counts, as the kernel layer has no loop-carried state) and
``annotation.stop_fusion`` (each then is a kernel of its own);
``tests/op/test_computes.py`` checks that no non-OPAQUE op lacks one.

>>> from relaybench import te
>>> from relaybench.ir.types import TensorType
>>> x, y = te.placeholder((2, 3), name="x"), te.placeholder((3,), name="y")
>>> z = broadcast_binary("add", lambda a, b: a + b)([x, y], None, TensorType((2, 3), "float32"))
>>> print(z.op.body)
x[i0, i1] + y[i1]
"""

from __future__ import annotations

from relaybench import te
from relaybench.errors import CompileError
from relaybench.te import loop_ir

__all__ = ["broadcast_index", "broadcast_binary", "elementwise", "trunc_divide", "divide_by_count",
           "shape_of", "is_float", "is_int", "ravel", "unravel", "clamp", "padded",
           "primal_indices", "layout_indices"]


def is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def is_int(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


def shape_of(out_type) -> tuple:
    """The shape of a checked TensorType as te takes it: ints, and for a symbolic extent
    (``n``) its loop-IR expression of size variables (:func:`relaybench.te.tensor.as_extent`)."""
    from ..te.tensor import as_extent
    return tuple(as_extent(d) for d in out_type.shape)


def broadcast_index(tensor, indices) -> tuple:
    """The indices into ``tensor`` that numpy broadcasting reads at output ``indices``.

    The tensor's dims align with the output's last ones; a dim of extent 1 reads index 0.
    """
    lead = len(indices) - tensor.ndim
    return tuple(0 if extent == 1 else indices[lead + d] for d, extent in enumerate(tensor.shape))


def _index_names(ndim: int):
    return [f"i{d}" for d in range(ndim)]


def broadcast_binary(name: str, scalar_fn):
    """The compute of a broadcasting binary op whose element is ``scalar_fn(a, b, dtype)``."""
    def compute(inputs, attrs, out_type):
        lhs, rhs = inputs
        shape = shape_of(out_type)
        return te.compute(shape, lambda *idx: scalar_fn(lhs[broadcast_index(lhs, idx)],
                                                        rhs[broadcast_index(rhs, idx)]),
                          name=name)
    compute.__name__ = f"{name}_compute"
    return compute


def elementwise(name: str, scalar_fn):
    """The compute of a unary elementwise op whose element is ``scalar_fn(x, attrs)``."""
    def compute(inputs, attrs, out_type):
        (x,) = inputs
        return te.compute(x.shape, lambda *idx: scalar_fn(x[idx], attrs), name=name)
    compute.__name__ = f"{name}_compute"
    return compute


def trunc_divide(a, b):
    """Integer division rounding toward zero (C's ``/``), from floor division."""
    floor = a // b
    inexact = loop_ir.not_equal(a % b, 0)
    signs_differ = loop_ir.not_equal(a < 0, b < 0)
    return te.if_then_else(inexact & signs_differ, floor + 1, floor)


def divide_by_count(total, count: int, dtype: str):
    """``total / count`` as the reductions' references divide a sum: integers truncate toward
    zero, computed in 64 bits so that a count past the dtype's range stays exact (0 when the
    count is not positive); floats divide by the count in ``dtype``."""
    if not is_int(dtype):
        return total / loop_ir.const(float(count), dtype)
    if count <= 0:
        return loop_ir.const(0, dtype)
    if dtype.startswith("uint"):
        return te.cast(dtype, te.cast("uint64", total) // loop_ir.const(count, "uint64"))
    return te.cast(dtype, trunc_divide(te.cast("int64", total), loop_ir.const(count, "int64")))


def _need(op: str, dtype: str, ok: bool, what: str):
    if not ok:
        raise CompileError(f"{op}: no compute for {dtype} tensors ({what})")


# ---------------------------------------------------------------------------------------------
# Binary operators (tensor.py)

def _divide(a, b):
    return trunc_divide(a, b) if is_int(a.dtype) else a / b


def _floor_divide(a, b):
    return a // b if is_int(a.dtype) else te.floor(a / b)


def _mod(a, b):
    """Truncated remainder (C's ``%``, ``fmod``), with the sign of ``a``.

    Integers: the floor remainder, moved by ``b`` where it is non-zero and the operands' signs
    differ; it inherits the floor remainder's answers where C has none (``x mod 0`` and
    ``INT_MIN mod -1`` are 0, as numpy's ``fmod``). Floats: the exact ``fmod`` (no quotient is
    formed, so ``-1.8e308 mod 0.5`` is ``-0.0``, where ``a - trunc(a / b) * b`` overflowed)."""
    if not is_int(a.dtype):
        return te.fmod(a, b)
    r = a % b
    if a.dtype.startswith("uint"):
        return r
    zero = loop_ir.const(0, a.dtype)
    moved = loop_ir.not_equal(r, zero) & loop_ir.not_equal(a < zero, b < zero)
    return te.if_then_else(moved, r - b, r)


def _floor_mod(a, b):
    """Floor remainder, with the sign of ``b``. Floats as numpy's ``remainder``: the exact
    ``fmod``, plus ``b`` where it is non-zero and of the other sign than ``b``; a zero remainder
    takes ``b``'s sign."""
    if is_int(a.dtype):
        return a % b
    zero = loop_ir.const(0.0, a.dtype)
    r = te.fmod(a, b)
    moved = loop_ir.not_equal(r, zero) & loop_ir.not_equal(r < zero, b < zero)
    signed_zero = te.if_then_else(b < zero, loop_ir.const(-0.0, a.dtype), zero)
    return te.if_then_else(moved, r + b,
                           te.if_then_else(loop_ir.equal(r, zero), signed_zero, r))


def _power(a, b):
    _need("power", a.dtype, is_float(a.dtype), "integer powers are not expressible")
    return te.power(a, b)


def _trunc(x):
    return te.if_then_else(x >= 0, te.floor(x), te.ceil(x))


BINARY = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "divide": _divide,
    "floor_divide": _floor_divide,
    "mod": _mod,
    "floor_mod": _floor_mod,
    "power": _power,
    "maximum": te.maximum,
    "minimum": te.minimum,
    "equal": loop_ir.equal,
    "not_equal": loop_ir.not_equal,
    "less": lambda a, b: a < b,
    "less_equal": lambda a, b: a <= b,
    "greater": lambda a, b: a > b,
    "greater_equal": lambda a, b: a >= b,
    "logical_and": loop_ir.logical_and,
    "logical_or": loop_ir.logical_or,
    "logical_xor": loop_ir.not_equal,
    "left_shift": lambda a, b: a << b,
    "right_shift": lambda a, b: a >> b,
    "trunc_divide": lambda a, b: trunc_divide(a, b) if is_int(a.dtype) else _trunc(a / b),
    "trunc_mod": _mod,
}
"""Element formulas of the broadcasting binary ops, by op name."""


def binary_compute(name: str):
    """The compute of the binary op ``name``, or None when it has none."""
    fn = BINARY.get(name)
    return broadcast_binary(name, fn) if fn is not None else None


# ---------------------------------------------------------------------------------------------
# Unary operators (tensor.py)

def _round_half_away(x):
    if not is_float(x.dtype):
        return x
    t = _trunc(x)
    frac = x - t
    step = te.if_then_else(x >= 0, te.cast(x.dtype, 1.0), te.cast(x.dtype, -1.0))
    return t + te.if_then_else(te.abs(frac) >= 0.5, step, te.cast(x.dtype, 0.0))


def _float_only(name, fn):
    def scalar(x):
        _need(name, x.dtype, is_float(x.dtype), "it needs floating point")
        return fn(x)
    return scalar


def _keep_ints(fn):
    return lambda x: fn(x) if is_float(x.dtype) else x


UNARY = {
    "negative": lambda x: -x,
    "abs": te.abs,
    "exp": _float_only("exp", te.exp),
    "log": _float_only("log", te.log),
    "sqrt": _float_only("sqrt", te.sqrt),
    "rsqrt": _float_only("rsqrt", te.rsqrt),
    "sigmoid": _float_only("sigmoid", te.sigmoid),
    "tanh": _float_only("tanh", te.tanh),
    "erf": _float_only("erf", te.erf),
    "round": _round_half_away,
    "floor": _keep_ints(te.floor),
    "ceil": _keep_ints(te.ceil),
    "logical_not": loop_ir.logical_not,
    "isnan": lambda x: loop_ir.not_equal(x, x) if is_float(x.dtype) else loop_ir.const(False),
    "isinf": lambda x: (loop_ir.equal(te.abs(x), loop_ir.const(float("inf"), x.dtype))
                        if is_float(x.dtype) else loop_ir.const(False)),
    "isfinite": lambda x: (loop_ir.equal(x, x)
                           & loop_ir.not_equal(te.abs(x), loop_ir.const(float("inf"), x.dtype))
                           if is_float(x.dtype) else loop_ir.const(True)),
    "sign": lambda x: te.if_then_else(x > te.cast(x.dtype, 0), te.cast(x.dtype, 1), te.if_then_else(
        x < te.cast(x.dtype, 0), te.cast(x.dtype, -1), te.cast(x.dtype, 0))),
    "trunc": _keep_ints(_trunc),
    "copy": lambda x: x,
}
"""Element formulas of the unary elementwise ops, by op name."""


def unary_compute(name: str):
    fn = UNARY.get(name)
    return elementwise(name, lambda x, attrs: fn(x)) if fn is not None else None


def cast_to(dtype: str, x):
    """``x`` converted to ``dtype``; any nonzero value becomes True for ``bool``."""
    if dtype == "bool" and x.dtype != "bool":
        return loop_ir.not_equal(x, 0)
    return te.cast(dtype, x)


def clip_compute(inputs, attrs, out_type):
    import math
    (x,) = inputs
    lo, hi = attrs.a_min, attrs.a_max
    if is_int(x.dtype):
        import numpy as np
        info = np.iinfo(x.dtype)
        lo = int(min(max(math.ceil(lo) if math.isfinite(lo) else lo, info.min), info.max))
        hi = int(max(min(math.floor(hi) if math.isfinite(hi) else hi, info.max), info.min))
    return te.compute(x.shape, lambda *i: te.minimum(te.maximum(x[i], lo), hi), name="clip")


def cast_compute(inputs, attrs, out_type):
    x = inputs[0]     # cast_like's second input gives only the dtype
    return te.compute(x.shape, lambda *i: cast_to(out_type.dtype, x[i]), name="cast")


def where_compute(inputs, attrs, out_type):
    cond, x, y = inputs
    def body(*idx):
        c = cond[broadcast_index(cond, idx)]
        c = c if c.dtype == "bool" else loop_ir.not_equal(c, 0)
        return te.if_then_else(c, x[broadcast_index(x, idx)], y[broadcast_index(y, idx)])
    return te.compute(shape_of(out_type), body, name="where")


def constant_fill(value, name: str):
    """The compute of an op whose every element is ``value`` in the output dtype."""
    def compute(inputs, attrs, out_type):
        dtype = out_type.dtype
        v = loop_ir.const(bool(value)) if dtype == "bool" else loop_ir.const(value, dtype)
        return te.compute(shape_of(out_type), lambda *i: v, name=name)
    compute.__name__ = f"{name}_compute"
    return compute


def full_compute(inputs, attrs, out_type):
    fill = inputs[-1]
    return te.compute(shape_of(out_type), lambda *i: cast_to(out_type.dtype, fill[()]),
                      name="full")


# ---------------------------------------------------------------------------------------------
# Activations and bias (nn.py)

def relu_compute(inputs, attrs, out_type):
    (x,) = inputs
    return te.compute(x.shape, lambda *i: te.maximum(x[i], 0), name="relu")


def leaky_relu_compute(inputs, attrs, out_type):
    (x,) = inputs
    def body(*i):
        v = x[i]
        return te.if_then_else(v > 0, v, v * loop_ir.const(float(attrs.alpha), x.dtype))
    return te.compute(x.shape, body, name="leaky_relu")


def _axis(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis


def prelu_compute(inputs, attrs, out_type):
    x, alpha = inputs
    axis = _axis(attrs.axis, x.ndim)
    def body(*i):
        v = x[i]
        return te.if_then_else(v > 0, v, v * alpha[i[axis]])
    return te.compute(x.shape, body, name="prelu")


def bias_add_compute(inputs, attrs, out_type):
    x, bias = inputs
    axis = _axis(attrs.axis, x.ndim)
    return te.compute(x.shape, lambda *i: x[i] + bias[i[axis]], name="bias_add")


# ---------------------------------------------------------------------------------------------
# Injective transforms (transform.py)

def unravel(flat, shape) -> tuple:
    """Row-major indices into ``shape`` of the flat index ``flat``."""
    out = []
    for extent in reversed(shape):
        out.append(flat % extent if extent != 1 else 0)
        flat = flat // extent
    return tuple(reversed(out))


def ravel(indices, shape):
    """The row-major flat index of ``indices`` into ``shape``."""
    flat = 0
    for index, extent in zip(indices, shape):
        flat = flat * extent + index
    return flat


def reshape_compute(inputs, attrs, out_type):
    x = inputs[0]
    shape = shape_of(out_type)
    return te.compute(shape, lambda *i: x[unravel(ravel(i, shape), x.shape)], name="reshape")


def transpose_compute(inputs, attrs, out_type):
    (x,) = inputs
    axes = attrs.axes if attrs.axes is not None else tuple(reversed(range(x.ndim)))
    axes = [_axis(a, x.ndim) for a in axes]
    def body(*i):
        src = [None] * x.ndim
        for out_dim, in_dim in enumerate(axes):
            src[in_dim] = i[out_dim]
        return x[tuple(src)]
    return te.compute(shape_of(out_type), body, name="transpose")


def _drop_unit_dims(name):
    """Expand_dims, squeeze, batch_flatten and friends: equal element count, row-major order."""
    def compute(inputs, attrs, out_type):
        (x,) = inputs
        shape = shape_of(out_type)
        return te.compute(shape, lambda *i: x[unravel(ravel(i, shape), x.shape)], name=name)
    compute.__name__ = f"{name}_compute"
    return compute


expand_dims_compute = _drop_unit_dims("expand_dims")
squeeze_compute = _drop_unit_dims("squeeze")
batch_flatten_compute = _drop_unit_dims("batch_flatten")


def broadcast_to_compute(inputs, attrs, out_type):
    (x,) = inputs
    return te.compute(shape_of(out_type), lambda *i: x[broadcast_index(x, i)],
                      name="broadcast_to")


def _tuple_input(inputs) -> list:
    """The tensors of a tuple argument (given as one list) or of the inputs themselves."""
    if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
        return list(inputs[0])
    return list(inputs)


def concatenate_compute(inputs, attrs, out_type):
    parts = _tuple_input(inputs)
    shape = shape_of(out_type)
    axis = _axis(attrs.axis, len(shape))
    starts, at = [], 0
    for p in parts:
        starts.append(at)
        at += p.shape[axis]
    def body(*i):
        def read(k):
            idx = list(i)
            idx[axis] = i[axis] - starts[k]
            return parts[k][tuple(idx)]
        value = read(len(parts) - 1)
        for k in range(len(parts) - 2, -1, -1):
            value = te.if_then_else(i[axis] < starts[k + 1], read(k), value)
        return value
    return te.compute(shape, body, name="concatenate")


def stack_compute(inputs, attrs, out_type):
    parts = _tuple_input(inputs)
    shape = shape_of(out_type)
    axis = _axis(attrs.axis, len(shape))
    def body(*i):
        rest = i[:axis] + i[axis + 1:]
        value = parts[-1][rest]
        for k in range(len(parts) - 2, -1, -1):
            value = te.if_then_else(loop_ir.equal(i[axis], k), parts[k][rest], value)
        return value
    return te.compute(shape, body, name="stack")


def split_compute(inputs, attrs, out_type):
    (x,) = inputs
    fields = out_type.fields if hasattr(out_type, "fields") else out_type
    axis = _axis(attrs.axis, x.ndim)
    outs, start = [], 0
    for k, field in enumerate(fields):
        shape = shape_of(field)
        def body(*i, start=start):
            idx = list(i)
            idx[axis] = i[axis] + start
            return x[tuple(idx)]
        outs.append(te.compute(shape, body, name=f"split{k}"))
        start += shape[axis]
    return outs


def tile_compute(inputs, attrs, out_type):
    (x,) = inputs
    shape = shape_of(out_type)
    lead = len(shape) - x.ndim
    return te.compute(shape, lambda *i: x[tuple(i[lead + d] % e if e != 1 else 0
                                                 for d, e in enumerate(x.shape))], name="tile")


def repeat_compute(inputs, attrs, out_type):
    (x,) = inputs
    axis = _axis(attrs.axis, x.ndim)
    def body(*i):
        idx = list(i)
        idx[axis] = i[axis] // attrs.repeats
        return x[tuple(idx)]
    return te.compute(shape_of(out_type), body, name="repeat")


# ---------------------------------------------------------------------------------------------
# Reductions (reduce.py)

def _reduce_plan(x, attrs):
    from .reduce import reduce_axes
    axes = reduce_axes(x.ndim, attrs.axis, attrs.exclude)
    raxes = {a: te.reduce_axis(x.shape[a], name=f"k{a}") for a in axes}
    def source_index(i):
        idx, it = [], iter(i)
        for d in range(x.ndim):
            if d in raxes:
                idx.append(raxes[d])
                if attrs.keepdims:
                    next(it)
            else:
                idx.append(next(it))
        return tuple(idx)
    return axes, raxes, source_index


def _reduce_over(reduce, value, raxes: dict):
    """``reduce(value)`` over the reduce axes ``raxes``; over no axis (a rank-0 input, or
    ``exclude=True`` listing every axis) a reduction sees one element, and is that element."""
    if not raxes:
        return value
    return reduce(value, axis=list(raxes.values()))


def reducer_compute(combiner: str, name: str):
    """The compute of ``sum``, ``prod``, ``max`` or ``min``."""
    reduce = {"sum": te.sum, "prod": te.prod, "max": te.max, "min": te.min}[combiner]
    def compute(inputs, attrs, out_type):
        (x,) = inputs
        if x.dtype == "bool" and combiner in ("max", "min"):   # any and all
            return _bool_reducer(combiner, name)(inputs, attrs, out_type)
        axes, raxes, source_index = _reduce_plan(x, attrs)
        shape = shape_of(out_type)
        return te.compute(shape, lambda *i: _reduce_over(reduce, x[source_index(i)], raxes),
                          name=name)
    compute.__name__ = f"{name}_compute"
    return compute


def mean_compute(inputs, attrs, out_type):
    (x,) = inputs
    total = reducer_compute("sum", "mean_sum")(inputs, attrs, out_type)
    axes, _, _ = _reduce_plan(x, attrs)
    count = 1
    for a in axes:
        count *= x.shape[a]
    return te.compute(total.shape, lambda *i: divide_by_count(total[i], count, x.dtype),
                      name="mean")


REDUCE_COMPUTES = {
    "sum": reducer_compute("sum", "sum"),
    "max": reducer_compute("max", "max"),
    "min": reducer_compute("min", "min"),
    "prod": reducer_compute("prod", "prod"),
    "mean": mean_compute,
}
"""Computes of the reductions, by op name (``all``, ``any``, the arg-reductions and ``variance``
are added below)."""


def _bool_reducer(combiner: str, name: str):
    """``all`` (min) and ``any`` (max) of a bool tensor, reduced as int32."""
    inner = reducer_compute(combiner, f"{name}_int")
    def compute(inputs, attrs, out_type):
        (x,) = inputs
        as_int = te.compute(x.shape, lambda *i: te.cast("int32", x[i]), name=f"{name}_cast")
        reduced = inner([as_int], attrs, out_type)
        return te.compute(reduced.shape, lambda *i: loop_ir.not_equal(reduced[i], 0), name=name)
    compute.__name__ = f"{name}_compute"
    return compute


REDUCE_COMPUTES["all"] = _bool_reducer("min", "all")
REDUCE_COMPUTES["any"] = _bool_reducer("max", "any")


# ---------------------------------------------------------------------------------------------
# Padding (nn.pad and the padded reads of conv2d and pooling)

def clamp(index, extent: int):
    """``index`` held inside ``[0, extent)``: a padded read loads a valid element and selects."""
    return te.minimum(te.maximum(index, 0), extent - 1)


def padded(x, pads, value, name: str):
    """``x`` with ``pads`` ((before, after) per axis) of the scalar expression ``value``."""
    shape = tuple(e + b + a for e, (b, a) in zip(x.shape, pads))
    def body(*i):
        inside, src = None, []
        for index, extent, (before, after) in zip(i, x.shape, pads):
            j = index - before
            src.append(clamp(j, extent) if (before or after) else j)
            if before or after:
                ok = (j >= 0) & (j < extent)
                inside = ok if inside is None else inside & ok
        v = x[tuple(src)]
        return v if inside is None else te.if_then_else(inside, v, value)
    return te.compute(shape, body, name=name)


def pad_compute(inputs, attrs, out_type):
    x, value = inputs
    pads = attrs.pad_width
    if attrs.pad_mode == "constant":
        return padded(x, pads, cast_to(x.dtype, value[()]), "pad")
    def body(*i):
        src = []
        for index, extent, (before, _) in zip(i, x.shape, pads):
            j = index - before
            if attrs.pad_mode == "edge":
                src.append(clamp(j, extent))
            else:  # reflect, border excluded
                j = te.if_then_else(j < 0, -j, j)
                src.append(te.if_then_else(j >= extent, 2 * (extent - 1) - j, j))
        return x[tuple(src)]
    return te.compute(shape_of(out_type), body, name="pad")


# ---------------------------------------------------------------------------------------------
# Matrix products (nn.py)

def _operand(value, out_dtype):
    return te.cast(out_dtype, value)


def dense_compute(inputs, attrs, out_type):
    x, w = inputs
    dt = out_type.dtype
    k = te.reduce_axis(x.shape[-1], name="k")
    return te.compute(shape_of(out_type), lambda *i: te.sum(
        _operand(x[i[:-1] + (k,)], dt) * _operand(w[i[-1], k], dt), axis=[k]), name="dense")


def matmul_compute(inputs, attrs, out_type):
    a, b = inputs
    dt = out_type.dtype
    k = te.reduce_axis(a.shape[-2] if attrs.transpose_a else a.shape[-1], name="k")
    def body(*i):
        if attrs.transpose_a:
            av = a[i[:-2] + (k, i[-2])]
        else:
            av = a[i[:-1] + (k,)]
        bv = b[i[-1], k] if attrs.transpose_b else b[k, i[-1]]
        return te.sum(_operand(av, dt) * _operand(bv, dt), axis=[k])
    return te.compute(shape_of(out_type), body, name="matmul")


def batch_matmul_compute(inputs, attrs, out_type):
    x, y = inputs
    dt = out_type.dtype
    k = te.reduce_axis(x.shape[1] if attrs.transpose_a else x.shape[2], name="k")
    def body(bi, m, n):
        bx = 0 if x.shape[0] == 1 else bi
        by = 0 if y.shape[0] == 1 else bi
        xv = x[bx, k, m] if attrs.transpose_a else x[bx, m, k]
        yv = y[by, n, k] if attrs.transpose_b else y[by, k, n]
        return te.sum(_operand(xv, dt) * _operand(yv, dt), axis=[k])
    return te.compute(shape_of(out_type), body, name="batch_matmul")


# ---------------------------------------------------------------------------------------------
# Convolution and pooling, in any layout their relations accept (nn.py)

def primal_indices(layout, indices) -> dict:
    """The full index of each primal axis (``"C"``...) from ``indices`` in ``layout``: a blocked
    axis's outer index times its factor plus the inner one."""
    out = {}
    for p in layout.primal:
        f = layout.factor_of(p)
        outer = indices[layout.index_of(p)]
        out[p] = outer * f + indices[layout.index_of(p.lower())] if f else outer
    return out


def layout_indices(layout, full: dict) -> tuple:
    """The indices in ``layout`` of the element whose primal axes have the indices ``full``."""
    idx = []
    for ax in layout.axes:
        f = layout.factor_of(ax.primal_name)
        if ax.is_primal:
            idx.append(full[ax.name] // f if f else full[ax.name])
        else:
            idx.append(full[ax.primal_name] % f)
    return tuple(idx)


def conv2d_compute(inputs, attrs, out_type):
    """Grouped (and depthwise) 2-D convolution in any layouts the op accepts: ``NCHW``/``OIHW``,
    permuted (``NHWC``/``HWIO``) or blocked (``NCHW8c``/``OIHW4i8o``). The reduction runs over
    the input channels of the group and the kernel window; the padded data is a stage of its own
    (inlined by the schedules)."""
    from ..ir.layout import Layout
    x, w = inputs
    dl, kl = Layout(attrs.data_layout), Layout(attrs.kernel_layout)
    ol = Layout(attrs.out_layout or attrs.data_layout)
    dt = out_type.dtype
    pt, pl, pb, pr = attrs.padding
    sh, sw = attrs.strides
    dh, dw = attrs.dilation
    wext = kl.primal_extents(w.shape)
    o, cg, kh, kw = wext["O"], wext["I"], wext["H"], wext["W"]
    og = o // attrs.groups
    src = x
    if pt or pl or pb or pr:
        pads = [(0, 0)] * x.ndim
        pads[dl.index_of("H")], pads[dl.index_of("W")] = (pt, pb), (pl, pr)
        src = padded(x, pads, te.cast(x.dtype, 0), "pad")
    rc, ry, rx = (te.reduce_axis(cg, name="rc"), te.reduce_axis(kh, name="ry"),
                  te.reduce_axis(kw, name="rx"))

    def body(*i):
        out = primal_indices(ol, i)
        c = out["C"]
        channel = (c // og) * cg + rc if attrs.groups > 1 else rc
        value = src[layout_indices(dl, {"N": out["N"], "C": channel, "H": out["H"] * sh + ry * dh,
                                        "W": out["W"] * sw + rx * dw})]
        weight = w[layout_indices(kl, {"O": c, "I": rc, "H": ry, "W": rx})]
        return te.sum(_operand(value, dt) * _operand(weight, dt), axis=[rc, ry, rx])
    return te.compute(shape_of(out_type), body, name="conv2d")


def _pool_layouts(op: str, attrs, out_type):
    """How a pooling runs in its ``layout`` (any that keeps H and W whole: ``NCHW``, ``NHWC``,
    ``NCHW8c``): ``(hi, wi, shape, finish)``, the positions of H and W in ``layout``, the shape
    of the pooled tensor in ``layout``, and ``finish(pooled)``, the result in ``out_layout`` (a
    rearrangement stage of its own when the two differ, as the relation allows)."""
    from ..ir.layout import Layout
    layout = Layout(attrs.layout)
    if layout.factor_of("H") or layout.factor_of("W"):
        raise CompileError(f"{op}: layout {layout.name} splits H or W into blocks; the compute "
                           f"needs them whole")
    out_shape = shape_of(out_type)
    if not attrs.out_layout or attrs.out_layout == attrs.layout:
        return layout.index_of("H"), layout.index_of("W"), out_shape, lambda pooled: pooled
    out_layout = Layout(attrs.out_layout)
    extents = out_layout.primal_extents(out_shape)
    shape = tuple(int(extents[ax.name]) // (layout.factor_of(ax.name) or 1) if ax.is_primal
                  else ax.factor for ax in layout.axes)

    def finish(pooled):
        return te.compute(out_shape,
                          lambda *i: pooled[layout_indices(layout, primal_indices(out_layout, i))],
                          name=f"{op.replace('nn.', '')}_{out_layout.name}")
    return layout.index_of("H"), layout.index_of("W"), shape, finish


def _at_hw(i, hi, wi, h, w) -> tuple:
    """The indices ``i`` with H and W replaced by ``h`` and ``w``."""
    idx = list(i)
    idx[hi], idx[wi] = h, w
    return tuple(idx)


def _pool_window(x, attrs, out_shape, hi, wi):
    """Per spatial axis ``(before, after, extra)``: ``extra`` is what ``ceil_mode``'s last window
    needs past the declared padding."""
    pt, pl, pb, pr = attrs.padding
    geometry = []
    for axis, before, after, k, s, d in zip((hi, wi), (pt, pl), (pb, pr), attrs.pool_size,
                                            attrs.strides, attrs.dilation):
        extent, out = x.shape[axis], out_shape[axis]
        extra = max(0, (out - 1) * s + (k - 1) * d + 1 - (extent + before + after))
        geometry.append((before, after, extra))
    return geometry


def _pool_source(x, attrs, shape, hi, wi, value, name):
    (bh, ah, eh), (bw, aw, ew) = geometry = _pool_window(x, attrs, shape, hi, wi)
    pads = [(0, 0)] * x.ndim
    pads[hi], pads[wi] = (bh, ah + eh), (bw, aw + ew)
    return padded(x, pads, value, name), geometry


def max_pool2d_compute(inputs, attrs, out_type):
    (x,) = inputs
    hi, wi, shape, finish = _pool_layouts("nn.max_pool2d", attrs, out_type)
    src, _ = _pool_source(x, attrs, shape, hi, wi, loop_ir.const(_lowest(x.dtype), x.dtype), "pad")
    (kh, kw), (sh, sw), (dh, dw) = attrs.pool_size, attrs.strides, attrs.dilation
    ry, rx = te.reduce_axis(kh, name="ry"), te.reduce_axis(kw, name="rx")
    return finish(te.compute(shape, lambda *i: te.max(
        src[_at_hw(i, hi, wi, i[hi] * sh + ry * dh, i[wi] * sw + rx * dw)], axis=[ry, rx]),
        name="max_pool2d"))


def _lowest(dtype: str):
    import numpy as np
    if is_float(dtype):
        return float(np.finfo(dtype).min)
    return int(np.iinfo(dtype).min)


def avg_pool2d_compute(inputs, attrs, out_type):
    (x,) = inputs
    hi, wi, shape, finish = _pool_layouts("nn.avg_pool2d", attrs, out_type)
    acc = x.dtype if is_float(x.dtype) else "float64"
    src, geometry = _pool_source(x, attrs, shape, hi, wi, te.cast(x.dtype, 0), "pad")
    (bh, ah, _), (bw, aw, _) = geometry
    (kh, kw), (sh, sw), (dh, dw) = attrs.pool_size, attrs.strides, attrs.dilation
    ry, rx = te.reduce_axis(kh, name="ry"), te.reduce_axis(kw, name="rx")
    total = te.compute(shape, lambda *i: te.sum(te.cast(acc, src[_at_hw(
        i, hi, wi, i[hi] * sh + ry * dh, i[wi] * sw + rx * dw)]), axis=[ry, rx]),
        name="avg_pool2d_sum")

    # the divisor: the taps on the input (or, with count_include_pad, on the declared padding too)
    def taps(pos, k, s, d, extent, before, after):
        if attrs.count_include_pad:
            lo, hi_ = 0, before + extent + after
        else:
            lo, hi_ = before, before + extent
        count = None
        for t in range(k):
            at = pos * s + t * d
            one = te.if_then_else((at >= lo) & (at < hi_), te.cast(acc, 1.0), te.cast(acc, 0.0))
            count = one if count is None else count + one
        return count

    def body(*i):
        count = (taps(i[hi], kh, sh, dh, x.shape[hi], bh, ah)
                 * taps(i[wi], kw, sw, dw, x.shape[wi], bw, aw))
        mean = total[i] / te.maximum(count, te.cast(acc, 1.0))
        return mean if is_float(x.dtype) else te.cast(x.dtype, _trunc(mean))
    return finish(te.compute(shape, body, name="avg_pool2d"))


def _global_pool(combiner: str, name: str):
    def compute(inputs, attrs, out_type):
        (x,) = inputs
        hi, wi, shape, finish = _pool_layouts(name, attrs, out_type)
        ry, rx = te.reduce_axis(x.shape[hi], name="ry"), te.reduce_axis(x.shape[wi], name="rx")
        reduce = te.sum if combiner == "sum" else te.max
        # an integer mean sums in 64 bits, as the reference does, so an 8-bit window cannot wrap
        acc = x.dtype
        if combiner == "sum" and is_int(x.dtype):
            acc = "uint64" if x.dtype.startswith("uint") else "int64"
        total = te.compute(shape, lambda *i: reduce(te.cast(acc, x[_at_hw(i, hi, wi, ry, rx)])
                                                    if acc != x.dtype else
                                                    x[_at_hw(i, hi, wi, ry, rx)], axis=[ry, rx]),
                           name=f"{name}_reduce")
        if combiner == "max":
            return finish(total)
        count = x.shape[hi] * x.shape[wi]
        return finish(te.compute(shape, lambda *i: divide_by_count(total[i], count, x.dtype),
                                 name=name))
    compute.__name__ = f"{name.replace('.', '_')}_compute"
    return compute


global_avg_pool2d_compute = _global_pool("sum", "nn.global_avg_pool2d")
global_max_pool2d_compute = _global_pool("max", "nn.global_max_pool2d")


# ---------------------------------------------------------------------------------------------
# Softmax (nn.py): max, exp-sum and normalize stages

def _softmax_stages(x, attrs, name):
    axis = _axis(attrs.axis, x.ndim)
    reduced = x.shape[:axis] + x.shape[axis + 1:]
    k1, k2 = te.reduce_axis(x.shape[axis], name="k"), te.reduce_axis(x.shape[axis], name="k")
    def at(i, k):
        return x[tuple(i[:axis]) + (k,) + tuple(i[axis:])]
    peak = te.compute(reduced, lambda *i: te.max(at(i, k1), axis=[k1]), name=f"{name}_max")
    def drop(i):
        return tuple(i[:axis]) + tuple(i[axis + 1:])
    total = te.compute(reduced, lambda *i: te.sum(te.exp(at(i, k2) - peak[i]), axis=[k2]),
                       name=f"{name}_sum")
    return axis, drop, peak, total


def softmax_compute(inputs, attrs, out_type):
    (x,) = inputs
    axis, drop, peak, total = _softmax_stages(x, attrs, "softmax")
    return te.compute(x.shape, lambda *i: te.exp(x[i] - peak[drop(i)]) / total[drop(i)],
                      name="softmax")


def log_softmax_compute(inputs, attrs, out_type):
    (x,) = inputs
    axis, drop, peak, total = _softmax_stages(x, attrs, "log_softmax")
    return te.compute(x.shape, lambda *i: x[i] - peak[drop(i)] - te.log(total[drop(i)]),
                      name="log_softmax")


# ---------------------------------------------------------------------------------------------
# Gathers, slices and layouts (transform.py)

def strided_slice_compute(inputs, attrs, out_type):
    from .transform import _slice_specs, _static_bounds
    (x,) = inputs
    starts = {}
    for axis, b, e, s in _slice_specs(x.ndim, attrs):
        size_mode = attrs.slice_mode == "size"
        b, _ = _static_bounds(x.shape[axis], b, e, s, size_mode)
        starts[axis] = (max(b, 0), 1 if size_mode else s)
    def body(*i):
        return x[tuple(starts[d][0] + i[d] * starts[d][1] if d in starts else i[d]
                       for d in range(x.ndim))]
    return te.compute(shape_of(out_type), body, name="strided_slice")


def take_compute(inputs, attrs, out_type):
    data, indices = inputs
    def fix(index, n):
        index = te.cast("int64", index)
        if attrs.mode == "clip":
            return clamp(index, n)
        if attrs.mode == "wrap":
            return index % n
        return index
    if attrs.axis is None:
        size = 1
        for e in data.shape:
            size *= e
        return te.compute(shape_of(out_type),
                          lambda *i: data[unravel(fix(indices[i], size), data.shape)], name="take")
    axis = _axis(attrs.axis, data.ndim)
    nb = attrs.batch_dims + indices.ndim if attrs.batch_dims < 0 else attrs.batch_dims
    ni = indices.ndim - nb
    def body(*i):
        at = tuple(i[:nb]) + tuple(i[axis:axis + ni])
        picked = fix(indices[at], data.shape[axis])
        return data[tuple(i[:axis]) + (picked,) + tuple(i[axis + ni:])]
    return te.compute(shape_of(out_type), body, name="take")


def layout_transform_compute(inputs, attrs, out_type):
    """Any rearrangement between layouts of the same primal axes (``NCHW`` <-> ``NCHW8c``,
    ``OIHW`` <-> ``OIHW4i8o``): each primal index is rebuilt from the destination's axes, then
    split into the source's."""
    from ..ir.layout import Layout
    (x,) = inputs
    src, dst = Layout(attrs.src_layout), Layout(attrs.dst_layout)
    return te.compute(shape_of(out_type), lambda *i: x[layout_indices(src, primal_indices(dst, i))],
                      name="layout_transform")


def one_hot_compute(inputs, attrs, out_type):
    indices, on, off = inputs
    shape = shape_of(out_type)
    p = _axis(attrs.axis, len(shape))
    dt = out_type.dtype
    def body(*i):
        hit = loop_ir.equal(te.cast("int64", indices[tuple(i[:p]) + tuple(i[p + 1:])]), i[p])
        return te.if_then_else(hit, cast_to(dt, on[()]), cast_to(dt, off[()]))
    return te.compute(shape, body, name="one_hot")


# ---------------------------------------------------------------------------------------------
# Arg-reductions and variance (reduce.py)

def _arg_reducer(combiner: str, name: str):
    """argmax/argmin: the extreme value, then the first (or last) flat position holding it."""
    def compute(inputs, attrs, out_type):
        (x,) = inputs
        if x.dtype == "bool":
            src = x
            x = te.compute(src.shape, lambda *i: te.cast("int32", src[i]), name=f"{name}_cast")
        axes, raxes, source_index = _reduce_plan(x, attrs)
        shape = shape_of(out_type)
        if not axes:
            # over no axis each element is its own extreme, at position 0 (as numpy's argmax of
            # one element); the input is still read so that the kernel consumes it
            zero = loop_ir.const(0, "int32")
            return te.compute(shape, lambda *i: te.if_then_else(
                loop_ir.equal(x[source_index(i)], x[source_index(i)]), zero, zero), name=name)
        reduce = te.max if combiner == "max" else te.min
        best = te.compute(shape, lambda *i: reduce(x[source_index(i)], axis=list(raxes.values())),
                          name=f"{name}_value")
        _, raxes2, source_index2 = _reduce_plan(x, attrs)
        flat = ravel([raxes2[a] for a in axes], [x.shape[a] for a in axes])
        size = 1
        for a in axes:
            size *= x.shape[a]
        def body(*i):
            value = x[source_index2(i)]
            hit = loop_ir.equal(value, best[i])
            if is_float(x.dtype):  # a NaN is the extreme (max/min propagate it), as numpy's
                hit = hit | loop_ir.not_equal(value, value)  # argmax: the first NaN's index
            if attrs.select_last_index:
                return te.max(te.if_then_else(hit, flat, -1), axis=list(raxes2.values()))
            return te.min(te.if_then_else(hit, flat, size), axis=list(raxes2.values()))
        position = te.compute(shape, body, name=f"{name}_position")
        return te.compute(shape, lambda *i: te.cast("int32", position[i]), name=name)
    compute.__name__ = f"{name}_compute"
    return compute


def variance_compute(inputs, attrs, out_type):
    """The mean squared difference from ``mean`` (integers: in the dtype, wrapping, then the
    truncated division of the references)."""
    x, mean = inputs
    axes, raxes, source_index = _reduce_plan(x, attrs)
    shape = shape_of(out_type)
    def body(*i):
        src = source_index(i)
        d = x[src] - mean[broadcast_index(mean, src)]
        return _reduce_over(te.sum, d * d, raxes)
    total = te.compute(shape, body, name="variance_sum")
    count = 1
    for a in axes:
        count *= x.shape[a]
    count -= 1 if attrs.unbiased else 0
    return te.compute(shape, lambda *i: divide_by_count(total[i], count, x.dtype),
                      name="variance")


REDUCE_COMPUTES["argmax"] = _arg_reducer("max", "argmax")
REDUCE_COMPUTES["argmin"] = _arg_reducer("min", "argmin")
REDUCE_COMPUTES["variance"] = variance_compute


def adaptive_avg_pool2d_compute(inputs, attrs, out_type):
    """PyTorch's bins: output row ``i`` of ``oh`` averages input rows ``floor(i * H / oh)`` to
    ``ceil((i + 1) * H / oh)``; a reduction over the widest bin, masked to each bin. Any layout
    that keeps H and W whole (``NCHW``, ``NHWC``, ``NCHW16c``): the other axes pass through."""
    (x,) = inputs
    hi, wi, shape, finish = _pool_layouts("nn.adaptive_avg_pool2d", attrs, out_type)
    (h, w), (oh, ow) = (x.shape[hi], x.shape[wi]), (shape[hi], shape[wi])
    acc = x.dtype if is_float(x.dtype) else "float64"

    def bins(extent, out):
        widest = max(-(-(i + 1) * extent // out) - (i * extent) // out for i in range(out))
        first = lambda i: (i * extent) // out                 # noqa: E731
        stop = lambda i: ((i + 1) * extent + out - 1) // out  # noqa: E731
        return widest, first, stop

    kh, h_lo, h_hi = bins(h, oh)
    kw, w_lo, w_hi = bins(w, ow)
    ry, rx = te.reduce_axis(kh, name="ry"), te.reduce_axis(kw, name="rx")

    def total_body(*i):
        y, xx = i[hi], i[wi]
        row, col = h_lo(y) + ry, w_lo(xx) + rx
        inside = (row < h_hi(y)) & (col < w_hi(xx))
        value = te.cast(acc, x[_at_hw(i, hi, wi, clamp(row, h), clamp(col, w))])
        return te.sum(te.if_then_else(inside, value, te.cast(acc, 0.0)), axis=[ry, rx])

    total = te.compute(shape, total_body, name="adaptive_avg_pool2d_sum")

    def body(*i):
        y, xx = i[hi], i[wi]
        count = te.cast(acc, (h_hi(y) - h_lo(y)) * (w_hi(xx) - w_lo(xx)))
        mean = total[i] / count
        return mean if is_float(x.dtype) else te.cast(x.dtype, _trunc(mean))
    return finish(te.compute(shape, body, name="adaptive_avg_pool2d"))


def batch_norm_compute(inputs, attrs, out_type):
    """Inference batch norm: ``(x - mean) / sqrt(var + epsilon) * gamma + beta`` along ``axis``;
    the mean and variance pass through as the second and third outputs."""
    x, gamma, beta, mean, var = inputs
    _need("nn.batch_norm", x.dtype, is_float(x.dtype), "it needs floating point")
    axis = _axis(attrs.axis, x.ndim)
    eps = loop_ir.const(float(attrs.epsilon), x.dtype)
    def body(*i):
        c = i[axis]
        inv = te.rsqrt(var[c] + eps)
        if attrs.scale:
            inv = inv * gamma[c]
        y = (x[i] - mean[c]) * inv
        return y + beta[c] if attrs.center else y
    out = te.compute(x.shape, body, name="batch_norm")
    mean_out = te.compute(mean.shape, lambda i: mean[i], name="batch_norm_mean")
    var_out = te.compute(var.shape, lambda i: var[i], name="batch_norm_var")
    return [out, mean_out, var_out]


def conv2d_transpose_compute(inputs, attrs, out_type):
    """Transposed 2-D convolution, gathered: output row ``y`` sums the input rows ``iy`` with
    ``y + pad_top == iy * stride + ky * dilation`` (likewise for columns), over the input channels
    of the output channel's group; the weight is ``IOHW`` (or any layout of those axes)."""
    from ..ir.layout import Layout
    x, w = inputs
    dl, kl = Layout(attrs.data_layout), Layout(attrs.kernel_layout)
    ol = Layout(attrs.out_layout or attrs.data_layout)
    dt = out_type.dtype
    xext, wext = dl.primal_extents(x.shape), kl.primal_extents(w.shape)
    h, wd = xext["H"], xext["W"]
    cg, og, kh, kw = xext["C"] // attrs.groups, wext["O"], wext["H"], wext["W"]
    pt, pl, _, _ = attrs.padding
    (sh, sw), (dh, dw) = attrs.strides, attrs.dilation
    rc, ry, rx = (te.reduce_axis(cg, name="rc"), te.reduce_axis(kh, name="ry"),
                  te.reduce_axis(kw, name="rx"))

    def body(*i):
        out = primal_indices(ol, i)
        c = out["C"]
        channel = (c // og) * cg + rc if attrs.groups > 1 else rc
        my, mx = out["H"] + pt - ry * dh, out["W"] + pl - rx * dw
        iy, ix = my // sh, mx // sw
        hit = (loop_ir.equal(my % sh, 0) & (my >= 0) & (iy < h)
               & loop_ir.equal(mx % sw, 0) & (mx >= 0) & (ix < wd))
        value = x[layout_indices(dl, {"N": out["N"], "C": channel, "H": clamp(iy, h),
                                      "W": clamp(ix, wd)})]
        weight = w[layout_indices(kl, {"I": channel, "O": c % og if attrs.groups > 1 else c,
                                       "H": ry, "W": rx})]
        product = _operand(value, dt) * _operand(weight, dt)
        return te.sum(te.if_then_else(hit, product, te.cast(dt, 0)), axis=[rc, ry, rx])
    return te.compute(shape_of(out_type), body, name="conv2d_transpose")


# ---------------------------------------------------------------------------------------------
# Image resizing (image.py)

def _resize_coordinate(index, out_size: int, in_size: int, mode: str, start: float, end: float,
                       scale=None):
    """The float32 input coordinate of output position ``index`` along one axis, with the
    reference's operations in its order (the constants folded in float32 as it folds them);
    ``scale``: the axis's given scale (None: ``out / in``)."""
    import numpy as np

    from .image import resize_ratio
    f = np.float32
    x = te.cast("float32", index)
    n_in = f(in_size)
    ratio, length = resize_ratio(out_size, in_size, scale)
    def k(v):
        return loop_ir.const(float(f(v)), "float32")
    if mode == "half_pixel" or (mode == "pytorch_half_pixel" and length != 1):
        return (x + k(0.5)) * k(ratio) - k(0.5)
    if mode == "half_pixel_symmetric":
        return (x + k(0.5)) * k(ratio) + k(in_size / 2 * (1 - out_size / length) - 0.5)
    if mode == "pytorch_half_pixel" or (mode == "align_corners" and length == 1):
        return k(0.0)
    if mode == "align_corners":
        return k((n_in - f(1)) / f(length - 1)) * x
    if mode == "asymmetric":
        return k(ratio) * x
    if mode == "tf_half_pixel_for_nn":
        return (x + k(0.5)) * k(ratio)
    s, e = f(start), f(end)          # tf_crop_and_resize
    if length != 1:
        return k(s * (n_in - f(1))) + x * k(e - s) * k(n_in - f(1)) / k(f(length - 1))
    return k(f(0.5) * (s + e) * (n_in - f(1)))


def _resize_round(c, method: str):
    """The nearest pixel of coordinate ``c`` (float32) by ``rounding_method``, as int64."""
    half, nudge = loop_ir.const(0.5, "float32"), loop_ir.const(1e-5, "float32")
    if method == "round":                          # halves away from zero
        r = te.if_then_else(c >= 0, te.floor(c + half), -te.floor(-c + half))
    elif method == "round_prefer_floor":
        r = te.ceil(c - half)
    elif method == "round_prefer_ceil":
        r = te.floor(c + half)
    elif method == "floor":
        r = te.floor(c + nudge)
    else:                                          # ceil
        r = te.ceil(c - nudge)
    return te.cast("int64", r)


def _cubic_weights(t, alpha: float, calc: str):
    """The four cubic convolution weights at fraction ``t``, as the reference forms them."""
    import numpy as np
    a = np.dtype(calc).type(alpha)
    def k(v):
        return loop_ir.const(float(v), calc)
    t2 = t * t
    t3 = t2 * t
    return [k(a) * (t3 - k(2) * t2 + t),
            k(a + 2) * t3 - k(3 + a) * t2 + k(1),
            k(-(a + 2)) * t3 + k(3 + 2 * a) * t2 - k(a) * t,
            k(-a) * t3 + k(a) * t2]


def _antialias_kernel(d, count: int, alpha: float, calc: str):
    """The linear (``count`` 2) or cubic kernel at the scaled distance ``d``, as the reference
    forms it."""
    def k(v):
        return loop_ir.const(float(v), calc)
    d = te.abs(d)
    if count == 2:
        return te.maximum(k(1) - d, k(0))
    a = k(alpha)
    d2 = d * d
    d3 = d * d * d
    near = (a + k(2)) * d3 - (a + k(3)) * d2 + k(1)
    far = a * d3 - k(5) * a * d2 + k(8) * a * d - k(4) * a
    return te.if_then_else(d <= k(1), near, te.if_then_else(d < k(2), far, k(0)))


def _resize_taps(c, extent: int, attrs, calc: str, antialias=None):
    """Clamped neighbour indices and weights of coordinate ``c`` along one axis: two for
    ``linear``, four for ``cubic`` (weights of neighbours outside the image zeroed and the rest
    renormalized under ``cubic_exclude``); with ``antialias`` (the scale of a downsampling), the
    stretched kernel over every neighbour it reaches, normalized."""
    floor = te.floor(c)
    base = te.cast("int64", floor)
    t = te.cast(calc, c - floor)
    count = 2 if attrs.method == "linear" else 4
    if antialias is not None and antialias < 1:
        import numpy as np

        from .image import antialias_offsets
        offsets = antialias_offsets(count, antialias)
        firsts = [base + i for i in offsets]
        s = loop_ir.const(float(np.dtype(calc).type(antialias)), calc)
        weights = [_antialias_kernel((loop_ir.const(float(i), calc) - t) * s, count,
                                     attrs.cubic_alpha, calc) for i in offsets]
        zero, one = loop_ir.const(0.0, calc), loop_ir.const(1.0, calc)
        if attrs.cubic_exclude:
            weights = [te.if_then_else((j < 0) | (j >= extent), zero, w)
                       for j, w in zip(firsts, weights)]
        total = weights[0]
        for w in weights[1:]:
            total = total + w
        total = te.if_then_else(total == zero, one, total)
        return [clamp(j, extent) for j in firsts], [w / total for w in weights]
    if attrs.method == "linear":
        firsts, weights = [base, base + 1], [loop_ir.const(1.0, calc) - t, t]
    else:
        firsts = [base + (i - 1) for i in range(4)]
        weights = _cubic_weights(t, attrs.cubic_alpha, calc)
        if attrs.cubic_exclude:
            zero = loop_ir.const(0.0, calc)
            weights = [te.if_then_else((j < 0) | (j >= extent), zero, w)
                       for j, w in zip(firsts, weights)]
            total = weights[0] + weights[1] + weights[2] + weights[3]
            weights = [w / total for w in weights]
    return [clamp(j, extent) for j in firsts], weights


def resize2d_compute(inputs, attrs, out_type):
    """``image.resize2d`` in any layout the op accepts (H and W whole): each output pixel's input
    coordinates, then the nearest pixel or the weighted neighbours (width first, then height),
    computed in float32 (float64 for float64 data) and cast to the output dtype, as the
    reference does."""
    from ..ir.layout import Layout
    from .image import antialias_scale
    (x,) = inputs
    layout = Layout(attrs.layout)
    hi, wi = layout.index_of("H"), layout.index_of("W")
    h, w = x.shape[hi], x.shape[wi]
    out_h, out_w = attrs.size
    mode, roi = attrs.coordinate_transformation_mode, attrs.roi
    calc = "float64" if x.dtype == "float64" else "float32"
    dt = out_type.dtype
    sy, sx = getattr(attrs, "scale", None) or (None, None)

    def body(*i):
        cy = _resize_coordinate(i[hi], out_h, h, mode, roi[0], roi[2], sy)
        cx = _resize_coordinate(i[wi], out_w, w, mode, roi[1], roi[3], sx)
        if attrs.method == "nearest_neighbor":
            rounding = attrs.rounding_method or ("round" if mode == "align_corners" else "floor")
            iy, ix = clamp(_resize_round(cy, rounding), h), clamp(_resize_round(cx, rounding), w)
            value = te.cast(calc, x[_at_hw(i, hi, wi, iy, ix)])
        else:
            ys, wys = _resize_taps(cy, h, attrs, calc, antialias_scale(attrs, 0, out_h, h))
            xs, wxs = _resize_taps(cx, w, attrs, calc, antialias_scale(attrs, 1, out_w, w))
            value = None
            for yi, wy in zip(ys, wys):
                col = None
                for xi, wx in zip(xs, wxs):
                    term = te.cast(calc, x[_at_hw(i, hi, wi, yi, xi)]) * wx
                    col = term if col is None else col + term
                value = col * wy if value is None else value + col * wy
        if mode == "tf_crop_and_resize":
            outside = ((cy < 0) | (cy > h - 1)) | ((cx < 0) | (cx > w - 1))
            value = te.if_then_else(outside, loop_ir.const(float(attrs.extrapolation_value), calc),
                                    value)
        return cast_to(dt, value) if dt != calc else value
    return te.compute(shape_of(out_type), body, name="resize2d")


# ---------------------------------------------------------------------------------------------
# Layer norm, local response normalization, dropout (nn.py; OPAQUE ops, each its own kernel)

def layer_norm_compute(inputs, attrs, out_type):
    """``(x - mean) / sqrt(var + epsilon) * gamma + beta`` along ``axis``: a mean stage, a
    (biased) variance stage, then the normalized output."""
    x, gamma, beta = inputs
    _need("nn.layer_norm", x.dtype, is_float(x.dtype), "it needs floating point")
    axis = _axis(attrs.axis, x.ndim)
    n = x.shape[axis]
    reduced = x.shape[:axis] + x.shape[axis + 1:]
    count = loop_ir.const(float(n), x.dtype)
    def at(i, k):
        return x[tuple(i[:axis]) + (k,) + tuple(i[axis:])]
    k1, k2 = te.reduce_axis(n, name="k"), te.reduce_axis(n, name="k")
    total = te.compute(reduced, lambda *i: te.sum(at(i, k1), axis=[k1]), name="layer_norm_sum")
    mean = te.compute(reduced, lambda *i: total[i] / count, name="layer_norm_mean")
    def squares(*i):
        d = at(i, k2) - mean[i]
        return te.sum(d * d, axis=[k2])
    sq = te.compute(reduced, squares, name="layer_norm_sq")
    eps = loop_ir.const(float(attrs.epsilon), x.dtype)
    def body(*i):
        r = tuple(i[:axis]) + tuple(i[axis + 1:])
        y = (x[i] - mean[r]) * te.rsqrt(sq[r] / count + eps)
        if attrs.scale:
            y = y * gamma[i[axis]]
        return y + beta[i[axis]] if attrs.center else y
    return te.compute(x.shape, body, name="layer_norm")


def lrn_compute(inputs, attrs, out_type):
    """``x / (bias + alpha / size * s) ** beta``, ``s`` the sum of squares over the ``size``
    neighbours ``c - size // 2 .. c + (size - 1) // 2`` along ``axis`` (out of range: 0)."""
    (x,) = inputs
    _need("nn.lrn", x.dtype, is_float(x.dtype), "it needs floating point")
    axis = _axis(attrs.axis, x.ndim)
    extent, half = x.shape[axis], attrs.size // 2
    k = te.reduce_axis(attrs.size, name="k")
    zero = loop_ir.const(0.0, x.dtype)
    def window(*i):
        j = i[axis] - half + k
        v = x[tuple(i[:axis]) + (clamp(j, extent),) + tuple(i[axis + 1:])]
        return te.sum(te.if_then_else((j >= 0) & (j < extent), v * v, zero), axis=[k])
    s = te.compute(x.shape, window, name="lrn_sum")
    bias = loop_ir.const(float(attrs.bias), x.dtype)
    scale = loop_ir.const(float(attrs.alpha) / attrs.size, x.dtype)
    beta = loop_ir.const(float(attrs.beta), x.dtype)
    return te.compute(x.shape, lambda *i: x[i] / te.power(bias + scale * s[i], beta), name="lrn")


def dropout_compute(inputs, attrs, out_type):
    """Inference dropout: the data unchanged and a mask of ones."""
    (x,) = inputs
    out = te.compute(x.shape, lambda *i: x[i], name="dropout")
    mask = te.compute(x.shape, lambda *i: loop_ir.const(1, x.dtype), name="dropout_mask")
    return [out, mask]


# ---------------------------------------------------------------------------------------------
# 1-D and 3-D convolution and pooling, any number of spatial axes (nn.py)

def conv_nd_compute(spatial: str, name: str):
    """The compute of a grouped convolution over the axes ``spatial`` (``"W"``, ``"DHW"``) in any
    layouts of those axes: the reduction runs over the group's input channels and the window; the
    padded data is a stage of its own (``pad``)."""
    def compute(inputs, attrs, out_type):
        from ..ir.layout import Layout
        x, w = inputs
        dl, kl = Layout(attrs.data_layout), Layout(attrs.kernel_layout)
        ol = Layout(attrs.out_layout or attrs.data_layout)
        dt = out_type.dtype
        n_sp = len(spatial)
        wext = kl.primal_extents(w.shape)
        cg = wext["I"]
        og = wext["O"] // attrs.groups
        src = x
        if any(attrs.padding):
            pads = [(0, 0)] * x.ndim
            for j, a in enumerate(spatial):
                pads[dl.index_of(a)] = (attrs.padding[j], attrs.padding[n_sp + j])
            src = padded(x, pads, te.cast(x.dtype, 0), "pad")
        rc = te.reduce_axis(cg, name="rc")
        window = [te.reduce_axis(wext[a], name=f"r{a.lower()}") for a in spatial]

        def body(*i):
            out = primal_indices(ol, i)
            c = out["C"]
            channel = (c // og) * cg + rc if attrs.groups > 1 else rc
            at = {"N": out["N"], "C": channel}
            taps = {"O": c, "I": rc}
            for a, r, s, d in zip(spatial, window, attrs.strides, attrs.dilation):
                at[a] = out[a] * s + r * d
                taps[a] = r
            value = src[layout_indices(dl, at)]
            weight = w[layout_indices(kl, taps)]
            return te.sum(_operand(value, dt) * _operand(weight, dt), axis=[rc, *window])
        return te.compute(shape_of(out_type), body, name=name)
    compute.__name__ = f"{name}_compute"
    return compute


def _pool_nd_layouts(op: str, attrs, out_type, spatial: str):
    """As :func:`_pool_layouts` for the axes ``spatial``: ``(axes, shape, finish)``, the positions
    of the spatial axes in ``layout``, the pooled shape in ``layout`` and ``finish(pooled)``,
    the result in ``out_layout``."""
    from ..ir.layout import Layout
    layout = Layout(attrs.layout)
    if any(layout.factor_of(a) for a in spatial):
        raise CompileError(f"{op}: layout {layout.name} splits a spatial axis into blocks; the "
                           f"compute needs them whole")
    axes = [layout.index_of(a) for a in spatial]
    out_shape = shape_of(out_type)
    if not attrs.out_layout or attrs.out_layout == attrs.layout:
        return axes, out_shape, lambda pooled: pooled
    out_layout = Layout(attrs.out_layout)
    extents = out_layout.primal_extents(out_shape)
    shape = tuple(int(extents[ax.name]) // (layout.factor_of(ax.name) or 1) if ax.is_primal
                  else ax.factor for ax in layout.axes)

    def finish(pooled):
        return te.compute(out_shape,
                          lambda *i: pooled[layout_indices(layout, primal_indices(out_layout, i))],
                          name=f"{op.replace('nn.', '')}_{out_layout.name}")
    return axes, shape, finish


def _at(i, axes, positions) -> tuple:
    """The indices ``i`` with the ``axes`` replaced by ``positions``."""
    idx = list(i)
    for axis, p in zip(axes, positions):
        idx[axis] = p
    return tuple(idx)


def pool_nd_compute(kind: str, spatial: str, name: str):
    """The compute of ``max`` or ``avg`` pooling over the axes ``spatial``, as the 2-D ones:
    the padded input (the dtype's lowest value for max, 0 for avg; ``ceil_mode``'s extra taps
    included) is a stage, the window a reduction; avg divides by the taps on the input (and on
    the declared padding with ``count_include_pad``)."""
    def compute(inputs, attrs, out_type):
        (x,) = inputs
        axes, shape, finish = _pool_nd_layouts(name, attrs, out_type, spatial)
        n_sp = len(spatial)
        geometry, pads = [], [(0, 0)] * x.ndim
        for j, axis in enumerate(axes):
            k, s, d = attrs.pool_size[j], attrs.strides[j], attrs.dilation[j]
            before, after, extent = attrs.padding[j], attrs.padding[n_sp + j], x.shape[axis]
            extra = max(0, (shape[axis] - 1) * s + (k - 1) * d + 1 - (extent + before + after))
            geometry.append((before, after, extent))
            pads[axis] = (before, after + extra)
        fill = loop_ir.const(_lowest(x.dtype), x.dtype) if kind == "max" else te.cast(x.dtype, 0)
        src = padded(x, pads, fill, "pad")
        window = [te.reduce_axis(k, name=f"r{a.lower()}") for a, k in zip(spatial, attrs.pool_size)]

        def tap(i):
            return src[_at(i, axes, [i[axis] * s + r * d for axis, r, s, d in
                                     zip(axes, window, attrs.strides, attrs.dilation)])]
        op_name = name.replace("nn.", "")
        if kind == "max":
            return finish(te.compute(shape, lambda *i: te.max(tap(i), axis=window), name=op_name))
        acc = x.dtype if is_float(x.dtype) else "float64"
        total = te.compute(shape, lambda *i: te.sum(te.cast(acc, tap(i)), axis=window),
                           name=f"{op_name}_sum")

        def taps(pos, k, s, d, before, after, extent):
            lo, hi = (0, before + extent + after) if attrs.count_include_pad else (before, before + extent)
            count = None
            for t in range(k):
                at = pos * s + t * d
                one = te.if_then_else((at >= lo) & (at < hi), te.cast(acc, 1.0), te.cast(acc, 0.0))
                count = one if count is None else count + one
            return count

        def body(*i):
            count = None
            for axis, (before, after, extent), k, s, d in zip(axes, geometry, attrs.pool_size,
                                                             attrs.strides, attrs.dilation):
                c = taps(i[axis], k, s, d, before, after, extent)
                count = c if count is None else count * c
            mean = total[i] / te.maximum(count, te.cast(acc, 1.0))
            return mean if is_float(x.dtype) else te.cast(x.dtype, _trunc(mean))
        return finish(te.compute(shape, body, name=op_name))
    compute.__name__ = f"{name.replace('nn.', '')}_compute"
    return compute


def adaptive_pool_nd_compute(kind: str, spatial: str, name: str):
    """The compute of adaptive ``max`` or ``avg`` pooling over the axes ``spatial`` (PyTorch's
    bins): a reduction over the widest bin of each axis, masked to the bin of each output
    position (masked taps count as the dtype's lowest value for max, 0 for avg)."""
    def compute(inputs, attrs, out_type):
        (x,) = inputs
        axes, shape, finish = _pool_nd_layouts(name, attrs, out_type, spatial)
        extents, outs = [x.shape[a] for a in axes], [shape[a] for a in axes]
        acc = x.dtype if kind == "max" or is_float(x.dtype) else "float64"

        def first(i, n, o):
            return (i * n) // o

        def stop(i, n, o):
            return ((i + 1) * n + o - 1) // o
        widest = [max(stop(i, n, o) - first(i, n, o) for i in range(o)) for n, o in zip(extents, outs)]
        window = [te.reduce_axis(k, name=f"r{a.lower()}") for a, k in zip(spatial, widest)]
        skip = loop_ir.const(_lowest(x.dtype), x.dtype) if kind == "max" else te.cast(acc, 0.0)

        def total_body(*i):
            inside, positions = None, []
            for axis, r, n, o in zip(axes, window, extents, outs):
                p = first(i[axis], n, o) + r
                ok = p < stop(i[axis], n, o)
                inside = ok if inside is None else inside & ok
                positions.append(clamp(p, n))
            value = x[_at(i, axes, positions)]
            value = value if acc == x.dtype else te.cast(acc, value)
            reduce = te.max if kind == "max" else te.sum
            return reduce(te.if_then_else(inside, value, skip), axis=window)
        op_name = name.replace("nn.", "")
        total = te.compute(shape, total_body, name=op_name if kind == "max" else f"{op_name}_sum")
        if kind == "max":
            return finish(total)

        def body(*i):
            count = None
            for axis, n, o in zip(axes, extents, outs):
                c = stop(i[axis], n, o) - first(i[axis], n, o)
                count = c if count is None else count * c
            mean = total[i] / te.cast(acc, count)
            return mean if is_float(x.dtype) else te.cast(x.dtype, _trunc(mean))
        return finish(te.compute(shape, body, name=op_name))
    compute.__name__ = f"{name.replace('nn.', '')}_compute"
    return compute


# ---------------------------------------------------------------------------------------------
# Resizing along any number of spatial axes (image.resize1d, image.resize3d; nn.upsampling3d)

def resize_nd_compute(spatial: str, name: str):
    """``image.resize1d`` / ``image.resize3d`` as :func:`resize2d_compute` does it for two axes:
    each output position's input coordinate per axis, then the nearest element or the weighted
    neighbours (the last axis innermost), in float32 (float64 for float64 data), cast to the
    output dtype."""
    def compute(inputs, attrs, out_type):
        from ..ir.layout import Layout
        from .image import antialias_scale
        (x,) = inputs
        layout = Layout(attrs.layout)
        axes = [layout.index_of(a) for a in spatial]
        extents = [x.shape[a] for a in axes]
        n_sp = len(spatial)
        mode, roi = attrs.coordinate_transformation_mode, attrs.roi
        scales = getattr(attrs, "scale", None) or (None,) * n_sp
        calc = "float64" if x.dtype == "float64" else "float32"
        dt = out_type.dtype

        def body(*i):
            coords = [_resize_coordinate(i[axis], out, n, mode, roi[j], roi[n_sp + j], scales[j])
                      for j, (axis, out, n) in enumerate(zip(axes, attrs.size, extents))]
            if attrs.method == "nearest_neighbor":
                rounding = attrs.rounding_method or ("round" if mode == "align_corners" else "floor")
                near = [clamp(_resize_round(c, rounding), n) for c, n in zip(coords, extents)]
                value = te.cast(calc, x[_at(i, axes, near)])
            else:
                taps = [_resize_taps(c, n, attrs, calc, antialias_scale(attrs, j, out, n))
                        for j, (c, out, n) in enumerate(zip(coords, attrs.size, extents))]

                def combine(k, positions):
                    if k == n_sp:
                        return te.cast(calc, x[_at(i, axes, positions)])
                    total = None
                    for j, weight in zip(*taps[k]):
                        term = combine(k + 1, positions + [j]) * weight
                        total = term if total is None else total + term
                    return total
                value = combine(0, [])
            if mode == "tf_crop_and_resize":
                outside = None
                for c, n in zip(coords, extents):
                    out = (c < 0) | (c > n - 1)
                    outside = out if outside is None else outside | out
                value = te.if_then_else(outside, loop_ir.const(float(attrs.extrapolation_value), calc),
                                        value)
            return cast_to(dt, value) if dt != calc else value
        return te.compute(shape_of(out_type), body, name=name)
    compute.__name__ = f"{name}_compute"
    return compute


# ---------------------------------------------------------------------------------------------
# gather, gather_nd, scatter_nd, ndarray_size, reverse (transform.py)

def gather_compute(inputs, attrs, out_type):
    data, indices = inputs
    axis = _axis(attrs.axis, data.ndim)
    def body(*i):
        picked = clamp(te.cast("int64", indices[i]), data.shape[axis])
        return data[tuple(i[:axis]) + (picked,) + tuple(i[axis + 1:])]
    return te.compute(shape_of(out_type), body, name="gather")


def gather_nd_compute(inputs, attrs, out_type):
    """``data[y_0..y_{b-1}, indices[0, y], ..., indices[M-1, y], x...]``, each coordinate clamped
    into its axis (the reference requires them in range)."""
    data, indices = inputs
    m, b = indices.shape[0], attrs.batch_dims
    positions = indices.ndim - 1
    def body(*i):
        y, rest = tuple(i[:positions]), tuple(i[positions:])
        picked = tuple(clamp(te.cast("int64", indices[(k,) + y]), data.shape[b + k]) for k in range(m))
        return data[y[:b] + picked + rest]
    return te.compute(shape_of(out_type), body, name="gather_nd")


def scatter_nd_compute(inputs, attrs, out_type):
    """Gathered, one output element at a time: ``update`` finds the last position ``y`` whose
    coordinates are the element's (a max reduction over the flat positions); ``add``, ``mul``,
    ``min`` and ``max`` reduce the updates of every such ``y`` (in order, from the reduction's
    identity) and combine the result with the data."""
    data, indices, updates = inputs
    m = indices.shape[0]
    places = tuple(indices.shape[1:])
    count = 1
    for e in places:
        count *= e
    shape = shape_of(out_type)
    r = te.reduce_axis(count, name="k")

    def hit(i, y):
        cond = None
        for k in range(m):
            same = loop_ir.equal(te.cast("int64", indices[(k,) + y]), te.cast("int64", i[k]))
            cond = same if cond is None else cond & same
        return cond if cond is not None else loop_ir.const(True)

    if attrs.mode == "update":
        last = te.compute(shape, lambda *i: te.max(
            te.if_then_else(hit(i, unravel(r, places)), te.cast("int64", r), loop_ir.const(-1, "int64")),
            axis=[r]), name="scatter_nd_last")

        def body(*i):
            at = last[i]
            y = unravel(te.maximum(at, loop_ir.const(0, "int64")), places)
            return te.if_then_else(at >= 0, updates[y + tuple(i[m:])], data[i])
        return te.compute(shape, body, name="scatter_nd")
    import numpy as np
    dtype = data.dtype
    highest = float(np.finfo(dtype).max) if is_float(dtype) else int(np.iinfo(dtype).max)
    reduce, identity, combine = {
        "add": (te.sum, te.cast(dtype, 0), lambda a, b: a + b),
        "mul": (te.prod, te.cast(dtype, 1), lambda a, b: a * b),
        "min": (te.min, loop_ir.const(highest, dtype), te.minimum),
        "max": (te.max, loop_ir.const(_lowest(dtype), dtype), te.maximum),
    }[attrs.mode]
    total = te.compute(shape, lambda *i: reduce(te.if_then_else(
        hit(i, unravel(r, places)), updates[unravel(r, places) + tuple(i[m:])], identity), axis=[r]),
        name=f"scatter_nd_{attrs.mode}")
    return te.compute(shape, lambda *i: combine(data[i], total[i]), name="scatter_nd")


def ndarray_size_compute(inputs, attrs, out_type):
    import numpy as np
    (x,) = inputs
    count = 1
    for e in x.shape:
        count *= e
    value = np.array(count).astype(out_type.dtype).item()
    return te.compute((), lambda *i: loop_ir.const(value, out_type.dtype), name="ndarray_size")


def reverse_compute(inputs, attrs, out_type):
    (x,) = inputs
    axis = _axis(attrs.axis, x.ndim)
    n = x.shape[axis]
    return te.compute(x.shape, lambda *i: x[tuple(i[:axis]) + (n - 1 - i[axis],) + tuple(i[axis + 1:])],
                      name="reverse")


# ---------------------------------------------------------------------------------------------
# Scans and sorting (transform.py): quadratic gathers, no loop-carried state

def scan_compute(combiner: str):
    """``cumsum``/``cumprod``: output ``i`` reduces the elements ``j <= i`` (``j < i`` when
    exclusive) along the axis, in order, the others masked to the identity."""
    def compute(inputs, attrs, out_type):
        (x,) = inputs
        dt = out_type.dtype
        if attrs.axis is None:
            flat = te.compute(shape_of(out_type), lambda i: x[unravel(i, x.shape)], name="flatten")
            x, axis = flat, 0
        else:
            axis = _axis(attrs.axis, x.ndim)
        n = x.shape[axis]
        j = te.reduce_axis(n, name="j")
        identity = te.cast(dt, 0 if combiner == "sum" else 1)
        reduce = te.sum if combiner == "sum" else te.prod

        def body(*i):
            taken = (j < i[axis]) if attrs.exclusive else (j <= i[axis])
            value = te.cast(dt, x[tuple(i[:axis]) + (j,) + tuple(i[axis + 1:])])
            return reduce(te.if_then_else(taken, value, identity), axis=[j])
        return te.compute(shape_of(out_type), body, name=f"cum{combiner}")
    compute.__name__ = f"cum{combiner}_compute"
    return compute


def _sort_order(x, axis: int, ascending: bool, k: int, name: str):
    """The positions that sort ``x`` along ``axis`` (int64), the first ``k`` of them: each
    element's rank (how many elements go before it: smaller, or equal and earlier), then for
    each output place the position whose rank it is."""
    n = x.shape[axis]
    j = te.reduce_axis(n, name="j")

    def at(i, p):
        return x[tuple(i[:axis]) + (p,) + tuple(i[axis + 1:])]

    def rank_body(*i):
        other, mine = at(i, j), x[i]
        before = (other < mine) if ascending else (other > mine)
        before = before | (loop_ir.equal(other, mine) & (j < i[axis]))
        return te.sum(te.if_then_else(before, loop_ir.const(1, "int64"), loop_ir.const(0, "int64")),
                      axis=[j])
    rank = te.compute(x.shape, rank_body, name=f"{name}_rank")
    shape = list(x.shape)
    shape[axis] = k
    q = te.reduce_axis(n, name="q")

    def order_body(*i):
        r = rank[tuple(i[:axis]) + (q,) + tuple(i[axis + 1:])]
        return te.max(te.if_then_else(loop_ir.equal(r, te.cast("int64", i[axis])), te.cast("int64", q),
                                      loop_ir.const(0, "int64")), axis=[q])
    return te.compute(tuple(shape), order_body, name=f"{name}_order")


def _sorted_values(x, order, axis: int, name: str):
    return te.compute(order.shape, lambda *i: x[tuple(i[:axis]) + (order[i],) + tuple(i[axis + 1:])],
                      name=name)


def argsort_compute(inputs, attrs, out_type):
    (x,) = inputs
    axis = _axis(attrs.axis, x.ndim)
    order = _sort_order(x, axis, attrs.is_ascend, x.shape[axis], "argsort")
    return te.compute(order.shape, lambda *i: te.cast(out_type.dtype, order[i]), name="argsort")


def sort_compute(inputs, attrs, out_type):
    (x,) = inputs
    axis = _axis(attrs.axis, x.ndim)
    order = _sort_order(x, axis, attrs.is_ascend, x.shape[axis], "sort")
    return _sorted_values(x, order, axis, "sort")


def topk_compute(inputs, attrs, out_type):
    (x,) = inputs
    axis = _axis(attrs.axis, x.ndim)
    k = attrs.k if attrs.k >= 1 else x.shape[axis]
    order = _sort_order(x, axis, attrs.is_ascend, k, "topk")
    if attrs.ret_type == "values":
        return _sorted_values(x, order, axis, "topk_values")
    indices = te.compute(order.shape, lambda *i: te.cast(attrs.dtype, order[i]), name="topk_indices")
    if attrs.ret_type == "indices":
        return indices
    return [_sorted_values(x, order, axis, "topk_values"), indices]


def collapse_sum_compute(inputs, attrs, out_type):
    """``collapse_sum_like`` / ``collapse_sum_to``: the output element sums the data over the
    axes the broadcast added (leading) or widened (extent 1 in the output), in the dtype."""
    x = inputs[0]
    out = shape_of(out_type)
    lead = x.ndim - len(out)
    raxes = {a: te.reduce_axis(x.shape[a], name=f"k{a}") for a in range(x.ndim)
             if a < lead or (out[a - lead] == 1 and x.shape[a] != 1)}

    def body(*i):
        src = tuple(raxes[a] if a in raxes else i[a - lead] for a in range(x.ndim))
        return te.sum(x[src], axis=list(raxes.values())) if raxes else x[src]
    return te.compute(out, body, name="collapse_sum")


def identity_compute(name: str):
    """A copy of the single input (``annotation.stop_fusion``: a kernel of its own)."""
    def compute(inputs, attrs, out_type):
        (x,) = inputs
        return te.compute(x.shape, lambda *i: x[i], name=name)
    compute.__name__ = f"{name}_compute"
    return compute


# ---------------------------------------------------------------------------------------------
# nn.space_to_depth, nn.depth_to_space (nn.py), in NCHW or NHWC

def _block_compute(to_depth: bool):
    def compute(inputs, attrs, out_type):
        from ..ir.layout import Layout
        (x,) = inputs
        layout = Layout(attrs.layout)
        b = attrs.block_size
        c_in = layout.primal_extents(x.shape)["C"]
        c_out = layout.primal_extents(shape_of(out_type))["C"]

        def body(*i):
            o = primal_indices(layout, i)
            if to_depth:
                block, c = o["C"] // c_in, o["C"] % c_in
                src = {"N": o["N"], "C": c, "H": o["H"] * b + block // b, "W": o["W"] * b + block % b}
            else:
                by, bx = o["H"] % b, o["W"] % b
                if attrs.mode == "DCR":
                    channel = (by * b + bx) * c_out + o["C"]
                else:
                    channel = o["C"] * (b * b) + by * b + bx
                src = {"N": o["N"], "C": channel, "H": o["H"] // b, "W": o["W"] // b}
            return x[layout_indices(layout, src)]
        return te.compute(shape_of(out_type), body,
                          name="space_to_depth" if to_depth else "depth_to_space")
    compute.__name__ = f"{'space_to_depth' if to_depth else 'depth_to_space'}_compute"
    return compute


space_to_depth_compute = _block_compute(True)
depth_to_space_compute = _block_compute(False)


# ---------------------------------------------------------------------------------------------
# nn.instance_norm, nn.group_norm, nn.l2_normalize (nn.py)

def _sum_over(body, extents, name_prefix: str):
    """``te.sum`` of ``body(reduce axes)`` over fresh reduce axes of ``extents`` (the value
    itself when there are none)."""
    axes = [te.reduce_axis(e, name=f"{name_prefix}{k}") for k, e in enumerate(extents)]
    return te.sum(body(axes), axis=axes) if axes else body(axes)


def _group_stats(x, kept_shape, source, extents, count: int, name: str):
    """The mean and the biased variance of each group: ``source(kept, reduce axes)`` indexes
    ``x`` for a group index ``kept`` and a tap of the ``extents`` it reduces over."""
    total = te.compute(kept_shape, lambda *k: _sum_over(lambda r: x[source(k, r)], extents, "k"),
                       name=f"{name}_sum")
    n = loop_ir.const(float(count), x.dtype)
    mean = te.compute(kept_shape, lambda *k: total[k] / n, name=f"{name}_mean")

    def squares(*k):
        def tap(r):
            d = x[source(k, r)] - mean[k]
            return d * d
        return _sum_over(tap, extents, "q")
    sq = te.compute(kept_shape, squares, name=f"{name}_sq")
    return mean, sq, n


def _normalize_with(x, gamma, beta, attrs, group_of, mean, sq, n, axis, name):
    eps = loop_ir.const(float(attrs.epsilon), x.dtype)

    def body(*i):
        k = group_of(i)
        y = (x[i] - mean[k]) * te.rsqrt(sq[k] / n + eps)
        if attrs.scale:
            y = y * gamma[i[axis]]
        return y + beta[i[axis]] if attrs.center else y
    return te.compute(x.shape, body, name=name)


def instance_norm_compute(inputs, attrs, out_type):
    x, gamma, beta = inputs
    _need("nn.instance_norm", x.dtype, is_float(x.dtype), "it needs floating point")
    axis = _axis(attrs.axis, x.ndim)
    others = [a for a in range(x.ndim) if a not in (0, axis)]
    count = 1
    for a in others:
        count *= x.shape[a]

    def source(k, r):
        idx = [None] * x.ndim
        idx[0], idx[axis] = k[0], k[1]
        for a, ra in zip(others, r):
            idx[a] = ra
        return tuple(idx)
    mean, sq, n = _group_stats(x, (x.shape[0], x.shape[axis]), source, [x.shape[a] for a in others],
                               count, "instance_norm")
    return _normalize_with(x, gamma, beta, attrs, lambda i: (i[0], i[axis]), mean, sq, n, axis,
                           "instance_norm")


def group_norm_compute(inputs, attrs, out_type):
    x, gamma, beta = inputs
    _need("nn.group_norm", x.dtype, is_float(x.dtype), "it needs floating point")
    axis = _axis(attrs.axis, x.ndim)
    groups = attrs.num_groups
    per = x.shape[axis] // groups
    others = [a for a in range(x.ndim) if a not in (0, axis)]
    count = per
    for a in others:
        count *= x.shape[a]

    def source(k, r):
        idx = [None] * x.ndim
        idx[0], idx[axis] = k[0], k[1] * per + r[0]
        for a, ra in zip(others, r[1:]):
            idx[a] = ra
        return tuple(idx)
    mean, sq, n = _group_stats(x, (x.shape[0], groups), source, [per] + [x.shape[a] for a in others],
                               count, "group_norm")
    return _normalize_with(x, gamma, beta, attrs, lambda i: (i[0], i[axis] // per), mean, sq, n, axis,
                           "group_norm")


def l2_normalize_compute(inputs, attrs, out_type):
    (x,) = inputs
    _need("nn.l2_normalize", x.dtype, is_float(x.dtype), "it needs floating point")
    axes = sorted({_axis(a, x.ndim) for a in attrs.axis}) if attrs.axis else list(range(x.ndim))
    kept = tuple(1 if a in axes else e for a, e in enumerate(x.shape))

    def squares(*k):
        def tap(r):
            at = dict(zip(axes, r))
            v = x[tuple(at.get(a, k[a]) for a in range(x.ndim))]
            return v * v
        return _sum_over(tap, [x.shape[a] for a in axes], "k")
    total = te.compute(kept, squares, name="l2_normalize_sum")
    eps = loop_ir.const(float(attrs.eps), x.dtype)
    return te.compute(x.shape, lambda *i: x[i] * te.rsqrt(te.maximum(
        total[tuple(0 if a in axes else i[a] for a in range(x.ndim))], eps)), name="l2_normalize")


def slice_like_compute(inputs, attrs, out_type):
    """The leading corner of the data: output index ``i`` reads the data at ``i``."""
    x = inputs[0]
    return te.compute(shape_of(out_type), lambda *i: x[i], name="slice_like")


def broadcast_to_like_compute(inputs, attrs, out_type):
    """``broadcast_to`` of the first input; the second gives only the shape."""
    return broadcast_to_compute(inputs[:1], attrs, out_type)


def conv_transpose_nd_compute(spatial: str, name: str):
    """Transposed convolution over the axes ``spatial``, gathered as ``conv2d_transpose_compute``
    does: output position ``y`` sums the input positions ``i`` with ``y + pad_before == i * stride
    + k * dilation`` per axis, over the input channels of the output channel's group."""
    def compute(inputs, attrs, out_type):
        from ..ir.layout import Layout
        x, w = inputs
        dl, kl = Layout(attrs.data_layout), Layout(attrs.kernel_layout)
        ol = Layout(attrs.out_layout or attrs.data_layout)
        dt = out_type.dtype
        xext, wext = dl.primal_extents(x.shape), kl.primal_extents(w.shape)
        cg, og = xext["C"] // attrs.groups, wext["O"]
        rc = te.reduce_axis(cg, name="rc")
        window = [te.reduce_axis(wext[a], name=f"r{a.lower()}") for a in spatial]

        def body(*i):
            out = primal_indices(ol, i)
            c = out["C"]
            channel = (c // og) * cg + rc if attrs.groups > 1 else rc
            at = {"N": out["N"], "C": channel}
            taps = {"I": channel, "O": c % og if attrs.groups > 1 else c}
            hit = None
            for j, (a, r, s, d) in enumerate(zip(spatial, window, attrs.strides, attrs.dilation)):
                m = out[a] + attrs.padding[j] - r * d
                pos = m // s
                ok = loop_ir.equal(m % s, 0) & (m >= 0) & (pos < xext[a])
                hit = ok if hit is None else hit & ok
                at[a] = clamp(pos, xext[a])
                taps[a] = r
            product = _operand(x[layout_indices(dl, at)], dt) * _operand(w[layout_indices(kl, taps)], dt)
            return te.sum(te.if_then_else(hit, product, te.cast(dt, 0)), axis=[rc, *window])
        return te.compute(shape_of(out_type), body, name=name)
    compute.__name__ = f"{name}_compute"
    return compute


def mirror_pad_compute(inputs, attrs, out_type):
    """``nn.mirror_pad``: an index before the data reads its mirror image (``-j - 1`` for
    SYMMETRIC, ``-j`` for REFLECT), likewise past the end."""
    (x,) = inputs
    shift = 1 if attrs.mode == "SYMMETRIC" else 0

    def body(*i):
        src = []
        for index, extent, (before, _) in zip(i, x.shape, attrs.pad_width):
            j = index - before
            j = te.if_then_else(j < 0, -j - shift, j)
            src.append(te.if_then_else(j >= extent, 2 * extent - 2 + shift - j, j))
        return x[tuple(src)]
    return te.compute(shape_of(out_type), body, name="mirror_pad")
