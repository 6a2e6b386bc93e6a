"""Computes at the edges of what their relations accept, compiled with ``rb.build`` and checked
against numpy formulas written here: reductions over no axis (a rank-0 input, or ``exclude=True``
listing every axis), and the poolings in every layout their relation accepts (``NHWC``, blocked
``NCHW4c``, an ``out_layout`` other than ``layout``)."""

import numpy as np
import pytest

import relaybench as rb

H = '#[version = "0.0.5"]\n'
RNG = np.random.default_rng(11)


def compiled(text, opt_level, **inputs):
    lib = rb.build(rb.parse(H + text), target="llvm", opt_level=opt_level)
    return np.asarray(lib.run(**inputs))


def sample(shape, dtype):
    if dtype == "bool":
        return RNG.random(shape) < 0.5
    if dtype == "int32":
        return RNG.integers(-9, 10, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def type_text(shape, dtype):
    return dtype if shape == () else f"Tensor[({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''}), {dtype}]"


# ---------------------------------------------------------------------------------------------
# Reductions over no axis: each output element is a reduction of exactly one element

NO_AXIS = [((), ""), ((2, 3), ", axis=[0, 1], exclude=True"), ((2, 3), ", axis=[-1, 0], exclude=True"),
           ((2, 3), ", axis=[1, 0], exclude=True, keepdims=True")]


@pytest.mark.parametrize("shape, attrs", NO_AXIS)
@pytest.mark.parametrize("opt_level", [0, 3])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_reductions_over_no_axis_are_the_element(shape, attrs, opt_level, dtype):
    x = sample(shape, dtype)
    src = type_text(shape, dtype)
    for name in ("sum", "mean", "max", "min", "prod"):
        got = compiled(f"def @main(%x: {src}) {{ {name}(%x{attrs}) }}", opt_level, x=x)
        assert got.dtype == x.dtype and got.shape == x.shape, name
        np.testing.assert_array_equal(got, x, err_msg=name)
    for name in ("argmax", "argmin"):
        got = compiled(f"def @main(%x: {src}) {{ {name}(%x{attrs}) }}", opt_level, x=x)
        np.testing.assert_array_equal(got, np.zeros(shape, np.int32), err_msg=name)
        assert got.dtype == np.int32


@pytest.mark.parametrize("shape, attrs", NO_AXIS)
def test_logical_reductions_over_no_axis(shape, attrs):
    x = sample(shape, "bool")
    for name in ("all", "any"):
        got = compiled(f"def @main(%x: {type_text(shape, 'bool')}) {{ {name}(%x{attrs}) }}", 3, x=x)
        np.testing.assert_array_equal(got, x, err_msg=name)


@pytest.mark.parametrize("shape, attrs", NO_AXIS)
@pytest.mark.parametrize("opt_level", [0, 3])
def test_variance_and_std_over_no_axis(shape, attrs, opt_level):
    x = sample(shape, "float32")
    src = type_text(shape, "float32")
    mean_attrs = attrs.replace(", keepdims=True", "")
    mean = f"mean(%x{mean_attrs}, keepdims=True)"
    got = compiled(f"def @main(%x: {src}) {{ variance(%x, {mean}{attrs}) }}", opt_level, x=x)
    np.testing.assert_array_equal(got, np.zeros(shape, np.float32))
    got = compiled(f"def @main(%x: {src}) {{ sqrt(variance(%x, {mean}{attrs})) }}", opt_level, x=x)
    np.testing.assert_array_equal(got, np.zeros(shape, np.float32))
    # numpy's var of one element with ddof=1 is 0/0
    got = compiled(f"def @main(%x: {src}) {{ variance(%x, {mean}{attrs}, unbiased=True) }}", opt_level, x=x)
    assert got.shape == shape and np.isnan(got).all()
    xi = sample(shape, "int32")
    got = compiled(f"def @main(%x: {type_text(shape, 'int32')}) {{ variance(%x, {mean}{attrs}) }}",
                   opt_level, x=xi)
    np.testing.assert_array_equal(got, np.zeros(shape, np.int32))


# ---------------------------------------------------------------------------------------------
# Poolings in every layout

def adaptive_avg(x, oh, ow):
    """NCHW adaptive average pooling, PyTorch's bins, as loops."""
    n, c, h, w = x.shape
    out = np.zeros((n, c, oh, ow), np.float64)
    for i in range(oh):
        r0, r1 = (i * h) // oh, -(-((i + 1) * h) // oh)
        for j in range(ow):
            c0, c1 = (j * w) // ow, -(-((j + 1) * w) // ow)
            out[:, :, i, j] = x[:, :, r0:r1, c0:c1].astype(np.float64).mean(axis=(2, 3))
    return out


def to_layout(x, layout):
    """An NCHW array in ``NCHW``, ``NHWC`` or ``NCHW{b}c``."""
    if layout == "NCHW":
        return x
    if layout == "NHWC":
        return x.transpose(0, 2, 3, 1)
    b = int(layout[4:-1])
    n, c, h, w = x.shape
    return x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2)


LAYOUTS = ["NCHW", "NHWC", "NCHW4c"]


def shape_text(shape):
    return f"({', '.join(map(str, shape))})"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("out_layout", ["", "NCHW", "NHWC", "NCHW2c"])
@pytest.mark.parametrize("size", [(2, 3), (1, 1), (5, 7), (3, 2)])
def test_adaptive_avg_pool2d_in_every_layout(layout, out_layout, size):
    x = sample((2, 8, 5, 7), "float32")
    xl = to_layout(x, layout)
    text = (f"def @main(%x: Tensor[{shape_text(xl.shape)}, float32]) {{ nn.adaptive_avg_pool2d(%x, "
            f"output_size=[{size[0]}, {size[1]}], layout=\"{layout}\", out_layout=\"{out_layout}\") }}")
    got = compiled(text, 0, x=xl)
    want = to_layout(adaptive_avg(x, *size), out_layout or layout)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layout, out_layout", [("NHWC", "NCHW"), ("NCHW", "NCHW4c"), ("NCHW4c", "NHWC")])
def test_pools_write_their_out_layout(layout, out_layout):
    x = sample((1, 8, 4, 6), "float32")
    xl = to_layout(x, layout)
    windows = x.reshape(1, 8, 2, 2, 3, 2)
    cases = {
        "nn.max_pool2d(%x, pool_size=[2, 2], strides=[2, 2]": windows.max(axis=(3, 5)),
        "nn.avg_pool2d(%x, pool_size=[2, 2], strides=[2, 2]": windows.mean(axis=(3, 5)),
        "nn.global_max_pool2d(%x": x.max(axis=(2, 3), keepdims=True),
        "nn.global_avg_pool2d(%x": x.mean(axis=(2, 3), keepdims=True),
    }
    for call, want in cases.items():
        text = (f"def @main(%x: Tensor[{shape_text(xl.shape)}, float32]) {{ {call}, layout=\"{layout}\", "
                f"out_layout=\"{out_layout}\") }}")
        got = compiled(text, 3, x=xl)
        np.testing.assert_allclose(got, to_layout(want, out_layout), rtol=1e-5, atol=1e-6, err_msg=call)
