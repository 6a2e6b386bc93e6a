"""The interpreter's int8 reference of nn.conv2d / nn.dense with int32 accumulation is exact
integer arithmetic: checked against int64 numpy formulas on sizes where float32 sums would not
be exact (sums beyond 2**24), and the compiled kernels agree with it bit for bit."""

import numpy as np

import relaybench as rb


def _int8(rng, shape, extreme=False):
    if extreme:
        return rng.choice(np.array([-128, 127, -127, 126], "int8"), size=shape)
    return rng.integers(-128, 128, shape).astype("int8")


def _run(text, *args):
    mod = rb.parse(text)
    return mod, rb.create_executor("interpreter", mod=mod).evaluate()(*args)


def test_dense_int8_int32_exact():
    rng = np.random.default_rng(0)
    a, b = _int8(rng, (3, 4096), True), _int8(rng, (5, 4096), True)
    b[0] = a[0]                      # an output that is a sum of squares: about 6.5e7
    mod, got = _run('''#[version = "0.0.5"]
def @main(%a: Tensor[(3, 4096), int8], %b: Tensor[(5, 4096), int8]) {
  nn.dense(%a, %b, units=5, out_dtype="int32")
}''', a, b)
    want = a.astype("int64") @ b.astype("int64").T
    assert np.abs(want).max() > 2 ** 24                  # beyond what float32 sums hold exactly
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want.astype("int32"))
    lib = rb.build(mod, target="llvm", opt_level=3)
    np.testing.assert_array_equal(np.asarray(lib.run(a=a, b=b)), got)


def test_conv2d_int8_int32_exact():
    rng = np.random.default_rng(1)
    x, w = _int8(rng, (1, 256, 5, 5), True), _int8(rng, (4, 256, 3, 3), True)
    x[:, :, 1:4, 1:4] = w[0]         # output channel 0 at the centre: a sum of squares
    mod, got = _run('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 256, 5, 5), int8], %w: Tensor[(4, 256, 3, 3), int8]) {
  nn.conv2d(%x, %w, padding=[1, 1], channels=4, kernel_size=[3, 3], out_dtype="int32")
}''', x, w)
    xp = np.pad(x.astype("int64"), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((1, 4, 5, 5), "int64")
    for i in range(3):
        for j in range(3):
            want += np.einsum("nchw,oc->nohw", xp[:, :, i:i + 5, j:j + 5], w[:, :, i, j].astype("int64"))
    assert np.abs(want).max() > 2 ** 24
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want.astype("int32"))
    lib = rb.build(mod, target="llvm", opt_level=3)
    np.testing.assert_array_equal(np.asarray(lib.run(x=x, w=w)), got)
