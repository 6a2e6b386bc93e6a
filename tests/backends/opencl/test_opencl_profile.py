"""Device time on OpenCL: the profiling events of the kernel launches, read by ``profile()``
and ``benchmark()``, checked against the host's clock around the same work and against the
flop counts computed here from the operators' shapes. The modules are built once per session:
the first build on PoCL costs seconds."""

import html
import time

import numpy as np
import pytest

import relaybench as rb
from relaybench.backends.graph_executor import BenchmarkResult
from relaybench.errors import CompileError

M, N, K = 64, 128, 256
DENSE = rb.parse(f'''#[version = "0.0.5"]
def @main(%x: Tensor[({M}, {K}), float32], %w: Tensor[({N}, {K}), float32]) {{
  %0 = nn.dense(%x, %w);
  %1 = nn.relu(%0);
  (nn.softmax(%1), sum(%x, axis=[1]))
}}''')


def _values(seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.uniform(-1, 1, (M, K)).astype("float32"),
            "w": rng.uniform(-1, 1, (N, K)).astype("float32")}


@pytest.fixture(scope="session")
def dense_lib(target):
    """Dense + ReLU, a softmax and a reduction: three device groups, inputs set."""
    lib = rb.build(DENSE, target=target, opt_level=3)
    lib.set_input(**_values())
    lib.run()           # the device's first launch of each kernel is behind us
    return lib


@pytest.fixture(scope="session")
def host_lib(target):
    """A device group, a host group (ReLU made uncompilable) and a device group again."""
    from relaybench.backends import lowering
    real = lowering.lower_primitive

    def no_relu(func, target=None, name=None):
        lowered = real(func, target, name=name)
        if "nn.relu" in lowered.ops:
            raise CompileError(f"lowering {lowered.name}: nn.relu has no compute; it cannot be "
                               "part of a compiled kernel")
        return lowered

    mod = rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(16, 40), float32]) { add(nn.relu(multiply(%x, 2f)), 1f) }''')
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lowering, "lower_primitive", no_relu)
        lib = rb.build(mod, target=target, opt_level=0)
    assert lib.host_groups == ["fused_nn_relu"]
    x = np.linspace(-1, 1, 640, dtype="float32").reshape(16, 40)
    np.testing.assert_allclose(lib.run(x=x), np.maximum(x * 2, 0) + 1, rtol=1e-6)
    return lib


def test_a_bound_launch_hands_over_its_events_only_when_asked(dense_lib):
    """``run(events)`` appends one event per launch, whose device time is at most the host's
    time around the same launches waited for; ``run()`` keeps none."""
    from relaybench.backends.opencl import event_seconds
    queue = dense_lib.device.queue
    dense = next(k for k in dense_lib.kernels if "nn.dense" in k.ops)
    index = next(i for i, node in enumerate(dense_lib.graph.nodes) if node.kernel is dense)
    call = dense_lib._calls[index]
    assert call() is None
    queue.finish()
    events = []
    start = time.perf_counter()
    call(events)
    queue.finish()
    host_seconds = time.perf_counter() - start
    launches = [launch for launch in dense.compiled.launches if not launch.empty]
    assert len(events) == len(launches) >= 1
    device_seconds = event_seconds(events)
    # the device time is the kernel's run alone: not more than the host saw, and not off by
    # a unit (nanoseconds read as microseconds would be 1000 times too small or too large)
    assert 0 < device_seconds <= host_seconds
    assert device_seconds > host_seconds / 100


def test_profile_rows_are_device_times_within_the_run(dense_lib):
    start = time.perf_counter()
    profile = dense_lib.profile(number=1, warmup=0)
    wall_ms = (time.perf_counter() - start) * 1e3
    rows = profile.groups
    assert [r["group"] for r in rows] == [k.name for k in dense_lib.kernels]
    assert len(rows) == 3 and all(r["ms/run"] > 0 and r["ms/call"] > 0 for r in rows)
    assert all("timed on the host" not in r["rule"] for r in rows)
    # one run: the groups' device times add up to the device time of the run, which lies
    # within that run's end-to-end time, which lies within the host's time around the call
    assert sum(r["ms/run"] for r in rows) == pytest.approx(profile.device_ms, abs=1e-3)
    assert profile.total_ms == pytest.approx(profile.device_ms, rel=1e-9)
    assert profile.device_ms <= profile.end_to_end_ms <= wall_ms
    assert profile.copy_in_ms > 0 and profile.copy_out_ms > 0
    assert (profile.copy_in_ms + profile.device_ms + profile.copy_out_ms
            <= profile.end_to_end_ms)
    assert profile.rows[-1]["group"] == "total"
    text = str(profile)
    assert "GFLOP/s" in text and "profiling events of" in text and "inputs in" in text
    assert html.escape(profile.note) in profile._repr_html_()


def test_profile_gflops_are_flops_over_device_time(dense_lib):
    profile = dense_lib.profile(number=3)
    row = next(r for r in profile.groups if "nn.dense" in r["ops"])
    kernel = next(k for k in dense_lib.kernels if k.name == row["group"])
    flops = 2 * M * N * K                       # a multiply and an add per (i, j, k)
    assert kernel.flops >= flops
    assert kernel.flops <= flops + M * N        # the ReLU's comparisons, at most
    gflops = kernel.flops / (row["ms/call"] * 1e-3) / 1e9
    # the row shows ms/call to 4 decimals: on a GPU (3 microseconds a call) that rounding
    # alone moves the rate by 2%
    rounding = 0.5e-4 / row["ms/call"]
    assert row["GFLOP/s"] == pytest.approx(gflops, rel=max(1e-3, rounding), abs=0.1)
    total = profile.rows[-1]
    all_flops = sum(k.flops for k in dense_lib.kernels)
    assert total["GFLOP/s"] == pytest.approx(all_flops / (profile.total_ms * 1e-3) / 1e9,
                                             rel=1e-3, abs=0.1)


def test_benchmark_gives_device_time_and_end_to_end(dense_lib):
    result = dense_lib.benchmark(number=3, repeat=3)
    assert isinstance(result.device, BenchmarkResult)
    assert len(result.times_ms) == len(result.device.times_ms) == 3
    assert result.device.number == 3 and result.device.repeat == 3
    # the same runs, timed twice: the kernels' event time is within each round's wall time
    for end_to_end, device in zip(result.times_ms, result.device.times_ms):
        assert 0 < device <= end_to_end
    assert result.device.median_ms <= result.median_ms
    assert "device" in repr(result) and "device" in result._repr_html_()
    alone = dense_lib.benchmark_device(number=2, repeat=2)
    assert isinstance(alone, BenchmarkResult) and alone.median_ms > 0


def test_host_kernel_is_timed_on_the_host(host_lib):
    x = np.linspace(-1, 1, 640, dtype="float32").reshape(16, 40)
    host_lib.set_input(x=x)
    start = time.perf_counter()
    profile = host_lib.profile(number=1, warmup=0)
    wall_ms = (time.perf_counter() - start) * 1e3
    rows = {r["group"]: r for r in profile.groups}
    assert set(rows) == {k.name for k in host_lib.kernels} and len(rows) == 3
    host = rows["fused_nn_relu"]
    assert host["rule"] == "host (reference), timed on the host" and host["ms/run"] > 0
    device_rows = [r for name, r in rows.items() if name != "fused_nn_relu"]
    assert all("timed on the host" not in r["rule"] and r["ms/run"] > 0 for r in device_rows)
    # the device time of the run counts the device groups only; the host group is in the
    # total and in the end-to-end time
    assert sum(r["ms/run"] for r in device_rows) == pytest.approx(profile.device_ms, abs=1e-3)
    assert profile.total_ms == pytest.approx(profile.device_ms + host["ms/run"], abs=1e-3)
    assert profile.total_ms <= profile.end_to_end_ms <= wall_ms
    result = host_lib.benchmark(number=2, repeat=2)
    assert result.host_groups == 1 and "1 host groups not in it" in repr(result)
    for end_to_end, device in zip(result.times_ms, result.device.times_ms):
        assert 0 < device <= end_to_end
    np.testing.assert_allclose(host_lib.get_output(0), np.maximum(x * 2, 0) + 1, rtol=1e-6)
