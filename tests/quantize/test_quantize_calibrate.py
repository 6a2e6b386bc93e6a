"""QuantizeCalibrate: the scalars of each simulated_quantize, checked against hand-made data."""

import math

import numpy as np
import pytest

import relaybench as rb
from relaybench.ir.functor import post_order
from relaybench.quantize import QuantizeAnnotate, QuantizeCalibrate, qconfig
from relaybench.quantize.calibrate import find_scale_by_kl, find_scale_by_percentile

SQ = "relay.op.annotation.simulated_quantize"

# a conv whose data passes a relu first: the data's statistics are those of relu(x)
MODEL = '''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 1, 2, 2), float32]) {
  %0 = nn.relu(%x);
  nn.conv2d(%0, meta[relay.Constant][0], channels=2, kernel_size=[1, 1])
}'''
WEIGHT = np.array([0.3, -0.2], "float32").reshape(2, 1, 1, 1)


def _calibrated(dataset=None, **knobs):
    mod = rb.parse(MODEL, init_meta_table={"relay.Constant": [rb.const(WEIGHT)]})
    with qconfig(skip_conv_layers=None, **knobs):
        return QuantizeCalibrate(dataset)(QuantizeAnnotate()(mod))


def _scalars(mod):
    """{kind: (dom_scale, clip_min, clip_max)} of the simulated_quantize calls."""
    out = {}
    for node in post_order(mod["main"].body):
        if isinstance(node, rb.Call) and node.op.name == SQ:
            out[node.attrs.kind] = tuple(float(a.data) for a in node.args[1:])
    return out


def test_global_scale_and_power2_weight():
    mod = _calibrated(global_scale=4.0)
    got = _scalars(mod)
    assert got[1] == (4.0 / 128, -127.0, 127.0)                 # INPUT: 8 bits, signed
    assert got[2] == (0.5 / 128, -127.0, 127.0)                 # max |w| = 0.3 -> 0.5
    assert [p.name_hint for p in mod["main"].params] == ["x"]   # the scalars are bound


def test_max_weight_scale_and_bits():
    got = _scalars(_calibrated(weight_scale="max", nbit_weight=4, dtype_weight="int8"))
    assert got[2] == (np.float32(0.3 / 8), -7.0, 7.0)


DATA = [{"x": np.array([[[[1.0, -5.0], [2.5, 0.0]]]], "float32")},
        {"x": np.array([[[[3.0, 0.5], [-1.0, 0.25]]]], "float32")}]


def test_max_mode_reads_relu_statistics():
    got = _scalars(_calibrated(DATA, calibrate_mode="max"))
    # relu(x) over both inputs: max 3.0 (the -5.0 is cut by the relu)
    assert got[1] == (np.float32(3.0 / 128), -127.0, 127.0)


def test_percentile_mode():
    # 8 values of relu(x); rank int(8 * 0.99999) = 7: the largest, 3.0
    got = _scalars(_calibrated(DATA, calibrate_mode="percentile"))
    assert got[1][0] == np.float32(3.0 / 128)
    # |values| sorted are 0..n-1; rank int(n * 0.99999): 100001 * 0.99999 = 99999.99999 -> 99999
    values = np.arange(100001, dtype="float32")
    assert find_scale_by_percentile(-values) == 99999.0
    # 1000001 * 0.99999 = 999990.99999 -> 999990: the 10 largest are left out
    assert find_scale_by_percentile(np.arange(1000001, dtype="float32")) == 999990.0


def test_data_modes_need_a_dataset():
    with pytest.raises(ValueError, match="calibrate_mode='max' needs a data set"):
        _calibrated(None, calibrate_mode="max")
    with pytest.raises(ValueError, match="item 0 of the data set lacks the input 'x'"):
        _calibrated([{"y": DATA[0]["x"]}], calibrate_mode="max")


def test_unbound_weight_is_an_error():
    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 1, 2, 2), float32], %w: Tensor[(2, 1, 1, 1), float32]) {
  nn.conv2d(%x, %w, channels=2, kernel_size=[1, 1])
}''')
    with qconfig(skip_conv_layers=None):
        with pytest.raises(ValueError, match="WEIGHT simulated_quantize quantizes Var w, not a constant"):
            QuantizeCalibrate()(QuantizeAnnotate()(mod))


# ---- KL ----------------------------------------------------------------------------------------

def _kl_by_the_letter(arr, num_bins, num_quantized_bins):
    """Relay's MinimizeKL transcribed loop by loop (plain Python lists), for comparison."""
    arr = np.asarray(arr, "float32")
    t = max(abs(float(arr.min())), abs(float(arr.max())))
    hist, edges = np.histogram(arr, bins=num_bins, range=(-t, t))
    hist = [int(h) for h in hist]
    zero, half = num_bins // 2, num_quantized_bins // 2
    best = None
    for i in range(half, zero + 1):
        start, stop = zero - i, zero + i + 1
        sliced = [0] * (stop - start)
        p = [0.0] * (stop - start)
        for j in range(num_bins):
            if j <= start:
                p[0] += hist[j]
            elif j >= stop:
                p[-1] += hist[j]
            else:
                sliced[j - start] = hist[j]
                p[j - start] = hist[j]
        merged = len(sliced) // num_quantized_bins
        qb = [sum(sliced[j * merged:(j + 1) * merged]) for j in range(num_quantized_bins)]
        qb[-1] += sum(sliced[num_quantized_bins * merged:])
        q = [0.0] * len(sliced)
        for j in range(num_quantized_bins):
            lo = j * merged
            hi = len(q) if j == num_quantized_bins - 1 else (j + 1) * merged
            norm = sum(1 for v in sliced[lo:hi] if v != 0)
            if norm:
                for k in range(lo, hi):
                    if p[k]:
                        q[k] = qb[j] / norm

        def smooth(d, eps=0.0001):
            nz = sum(1 for v in d if v == 0)
            nn = len(d) - nz
            if nn == 0 or eps * nz / nn >= 1:
                return None
            e1 = eps * nz / nn
            return [v + (eps if v == 0 else -e1) for v in d]
        ps, qs = smooth(p), smooth(q)
        if ps is None or qs is None:
            div = math.inf
        else:
            sp, sq = sum(ps), sum(qs)
            div = sum((a / sp) * math.log((a / sp) / (b / sq)) for a, b in zip(ps, qs))
        if best is None or div < best[0]:
            best = (div, float(edges[stop]))
    return best[1]


def test_kl_matches_the_transcription():
    rng = np.random.default_rng(3)
    arr = np.concatenate([rng.normal(0, 1, 2000), [9.0, -7.5]]).astype("float32")
    got = find_scale_by_kl(arr, num_bins=201, num_quantized_bins=15)
    assert got == pytest.approx(_kl_by_the_letter(arr, 201, 15), rel=1e-6)


def test_kl_cuts_outliers_and_keeps_a_full_range():
    rng = np.random.default_rng(0)
    gauss = rng.normal(0, 1, 20000).astype("float32")
    with_outlier = np.concatenate([gauss, [100.0]]).astype("float32")
    # a far outlier is clipped: the threshold is a few standard deviations, not 100
    assert 2.0 < find_scale_by_kl(with_outlier) < 10.0
    # a uniform distribution has nothing to clip: the threshold is (nearly) its maximum
    uniform = rng.uniform(-1, 1, 50000).astype("float32")
    assert find_scale_by_kl(uniform) > 0.95 * np.abs(uniform).max()


def test_kl_mode_in_the_pass():
    rng = np.random.default_rng(1)
    data = [{"x": rng.normal(0, 1, (1, 1, 2, 2)).astype("float32")} for _ in range(8)]
    got = _scalars(_calibrated(data, calibrate_mode="kl_divergence"))
    relu = np.concatenate([np.maximum(d["x"], 0).reshape(-1) for d in data])
    assert got[1][0] == np.float32(find_scale_by_kl(relu) / 128)
