"""The graph executor on an OpenCL device: the memory plan in device memory, kernels enqueued.

:class:`OpenCLGraphModule` is the :class:`~relaybench.backends.graph_executor.GraphModule` of
an ``opencl`` build: the same graph, memory plan, input checks, results, ``benchmark`` and
``profile``, with the buffers on the device. Each storage of the plan is one device buffer, each
input has one (and a host array its value is set into), each constant is copied to the device
once, when the module is made. A run copies the inputs in, enqueues every kernel on the device's
in-order queue, copies the outputs out and waits. A group that has no compute (a host kernel,
run by the reference interpreter) reads its inputs back from the device and writes its outputs
to it.

Timing reads two clocks. The host's (``time.perf_counter``) sees a run end to end: copies,
launch overheads, the waits. The device's is read from the profiling events of the launches
(the queue has profiling enabled): each kernel's ``profile.end - profile.start``, the time the
device spent on it and nothing else, as CUDA events or ``nvprof`` report it.
``benchmark`` gives both (:class:`DeviceBenchmarkResult`: end to end, and ``.device``, the
kernels' summed event time per run); ``profile`` gives each group's event time, median over the
runs, with GFLOP/s from it, the kernels enqueued back to back as in a plain run, and the copies
and the whole run on the host's clock under the table (:class:`DeviceProfile`). Host kernels
have no events: they are timed on the host's clock, and their rule says so.

Example (needs pyopencl and an OpenCL device; PoCL's CPU device comes with ``pyopencl[pocl]``)::

    >>> import numpy as np, relaybench as rb
    >>> x = rb.var("x", shape=(4,))
    >>> lib = rb.build(rb.IRModule.from_expr(rb.Function([x], x * x)), target="opencl")
    >>> lib.run(x=np.arange(4, dtype="float32"))
    array([0., 1., 4., 9.], dtype=float32)
"""

from __future__ import annotations

import time

import numpy as np

from ..graph_executor import (BenchmarkResult, GraphModule, Profile, _ms_text, _round_up,
                              contiguous)
from .runtime import _cl, event_seconds, get_device

__all__ = ["OpenCLGraphModule", "DeviceBenchmarkResult", "DeviceProfile"]


class DeviceBenchmarkResult(BenchmarkResult):
    """A benchmark of an OpenCL module: the end-to-end times (the :class:`BenchmarkResult`
    itself, so ``median_ms``, ``results`` and the rest read as on the CPU: inputs copied in,
    every kernel, outputs copied out, waited for, on the host's clock) and ``device``, a
    :class:`BenchmarkResult` of the same runs' device time: per repeat, the mean over its runs
    of the summed profiling-event times of every kernel launch. Host kernels (``host_groups``
    of them) and the copies have no kernel events: they are in the end-to-end time only. The
    device's queue runs one command at a time, so ``device.median_ms <= median_ms``."""

    def __init__(self, times_ms: list, device_ms: list, number: int, repeat: int, *,
                 host_groups: int = 0):
        super().__init__(times_ms, number, repeat)
        self.device = BenchmarkResult(device_ms, number, repeat)
        self.host_groups = host_groups

    def __repr__(self) -> str:
        host = f", {self.host_groups} host groups not in it" if self.host_groups else ""
        return (f"{BenchmarkResult.__repr__(self)}; device {_ms_text(self.device.median_ms)} ms "
                f"± {_ms_text(self.device.std_ms)} (kernel events{host})")

    __str__ = __repr__

    def _repr_html_(self) -> str:
        import html
        from ...viz.html import benchmark_html
        host = f"; {self.host_groups} host groups not in it" if self.host_groups else ""
        line = (f"device {_ms_text(self.device.median_ms)} ms ± {_ms_text(self.device.std_ms)} "
                f"(kernels' profiling events{host})")
        box = benchmark_html(self)          # one line in a box: the device's line goes inside
        return (f'{box[:-len("</div>")]}<br>'
                f'<span class="rb-benchmark">{html.escape(line)}</span></div>')


class DeviceProfile(Profile):
    """The profile of an OpenCL module: the rows of :class:`Profile`, with the device kernels'
    times from their profiling events, and what happens around them, each the median over the
    runs, in milliseconds: ``device_ms`` (every device kernel of a run), ``copy_in_ms`` and
    ``copy_out_ms`` (the inputs to the device, the outputs back, on the host's clock),
    ``end_to_end_ms`` (the whole run on the host's clock). ``note`` says it in words, under the
    table."""

    def __init__(self, rows: list, total_ms: float, number: int, *, device: str,
                 device_ms: float, copy_in_ms: float, copy_out_ms: float,
                 end_to_end_ms: float):
        super().__init__(rows, total_ms, number)
        self.device = device
        self.device_ms = device_ms
        self.copy_in_ms = copy_in_ms
        self.copy_out_ms = copy_out_ms
        self.end_to_end_ms = end_to_end_ms

    @property
    def note(self) -> str:
        return (f"kernels timed by the profiling events of {self.device}; per run (median of "
                f"{self.number}): device kernels {_ms_text(self.device_ms)} ms, inputs in "
                f"{_ms_text(self.copy_in_ms)} ms, outputs out {_ms_text(self.copy_out_ms)} ms, "
                f"end to end {_ms_text(self.end_to_end_ms)} ms (copies and end to end on the "
                "host's clock)")

    def __str__(self) -> str:
        return f"{Profile.__str__(self)}\n{self.note}"

    __repr__ = __str__

    def _repr_html_(self) -> str:
        import html
        return f"{Profile._repr_html_(self)}<p>{html.escape(self.note)}</p>"


class OpenCLGraphModule(GraphModule):
    """A compiled static graph whose buffers and kernels live on an OpenCL device."""

    _VIEWS = False      # device buffers: every call runs its kernel

    def __init__(self, mod, graph, kernels: dict, *, target=None, num_threads=None,
                 compile_stats=None):
        self.device = get_device(target)
        super().__init__(mod, graph, kernels, target=target, num_threads=num_threads,
                         compile_stats=compile_stats)

    def _new_buffer(self, nbytes: int, data: np.ndarray | None = None):
        cl = _cl()
        flags = cl.mem_flags.READ_WRITE
        if data is not None and data.nbytes:
            return cl.Buffer(self.device.context, flags | cl.mem_flags.COPY_HOST_PTR,
                             hostbuf=contiguous(data))
        return cl.Buffer(self.device.context, flags, max(1, int(nbytes)))

    def _allocate(self) -> None:
        graph, plan = self._graph, self._plan
        pools = [self._new_buffer(n) for n in plan.storage_bytes]
        buffers: list = [None] * len(graph.entries)
        arrays: list = [None] * len(graph.entries)
        for entry in graph.entries:
            if entry.kind == "input":
                buffers[entry.index] = self._new_buffer(_round_up(entry.nbytes))
                arrays[entry.index] = np.empty(entry.shape, entry.dtype)
            elif entry.kind == "constant":
                buffers[entry.index] = self._new_buffer(entry.nbytes, entry.source)
            else:
                buffers[entry.index] = pools[plan.storage_of[entry.index]]
        self._buffers = buffers
        self._arrays = arrays           # the host side of the inputs (set_input copies here)
        self._pools = pools
        self._output_arrays = [np.empty(graph.entries[e].shape, graph.entries[e].dtype)
                               for e in graph.outputs]
        self._output_copies = []
        self._constant_buffers = {}     # id(kernel) -> its constants on the device

    def _kernel_constants(self, kernel) -> list:
        found = self._constant_buffers.get(id(kernel))
        if found is None:
            found = [self._new_buffer(c.nbytes, c) for c in kernel.constants]
            self._constant_buffers[id(kernel)] = found
        return found

    def _bind_calls(self) -> None:
        calls = []
        for node in self._graph.nodes:
            kernel = node.kernel
            if kernel.host:
                calls.append(self._host_call(node))
                continue
            args = ([self._buffers[e] for e in node.inputs] + self._kernel_constants(kernel)
                    + [self._buffers[e] for e in node.outputs])
            calls.append(kernel.compiled.bind(*args))
        self._calls = calls

    def _host_call(self, node):
        """A host kernel between device kernels: its inputs read back, its outputs written.
        It launches no device kernel, so it has no events to hand over (``events`` is taken, as
        a device kernel's bound call takes it, and left as it is)."""
        cl = _cl()
        queue = self.device.queue
        entries = self._graph.entries
        inputs = [(self._buffers[e], np.empty(entries[e].shape, entries[e].dtype))
                  for e in node.inputs]
        outputs = [(self._buffers[e], np.empty(entries[e].shape, entries[e].dtype))
                   for e in node.outputs]
        kernel = node.kernel.compiled

        def run(events: list | None = None):
            for buffer, array in inputs:
                if array.nbytes:
                    cl.enqueue_copy(queue, array, buffer)
            kernel(*[a for _, a in inputs], *[a for _, a in outputs])
            for buffer, array in outputs:
                if array.nbytes:
                    cl.enqueue_copy(queue, buffer, array)
        return run

    def _copy_inputs(self) -> None:
        cl = _cl()
        queue = self.device.queue
        for _, e in self._graph.inputs:
            if self._arrays[e].nbytes:
                cl.enqueue_copy(queue, self._buffers[e], self._arrays[e], is_blocking=False)

    def _copy_outputs(self) -> None:
        cl = _cl()
        queue = self.device.queue
        for e, array in zip(self._graph.outputs, self._output_arrays):
            if array.nbytes:
                cl.enqueue_copy(queue, array, self._buffers[e], is_blocking=False)

    def _execute(self, events: list | None = None) -> None:
        """One run: inputs in, every kernel, outputs out, waited for. With a list, the events
        of the device kernels' launches are appended to ``events``."""
        self._copy_inputs()
        for call in self._calls:
            call(events)
        self._copy_outputs()
        self.device.queue.finish()

    def benchmark(self, number: int = 10, repeat: int = 5, warmup: int = 1,
                  **inputs) -> DeviceBenchmarkResult:
        """Time ``repeat`` rounds of ``number`` runs (after ``warmup`` runs) on the inputs set,
        two ways at once (see :class:`DeviceBenchmarkResult`): end to end on the host's clock
        (inputs copied in, every kernel, outputs copied out, waited for: the result's own
        times, as on the CPU) and, in ``.device``, the device time of the same runs from the
        kernels' profiling events."""
        if number < 1 or repeat < 1:
            raise ValueError(f"number and repeat must be >= 1, got {number} and {repeat}")
        if inputs:
            self.set_input(**inputs)
        self._check_ready()
        execute = self._execute
        for _ in range(warmup):
            execute()
        times, device_times = [], []
        clock = time.perf_counter
        for _ in range(repeat):
            events: list = []
            start = clock()
            for _ in range(number):
                execute(events)
            times.append((clock() - start) * 1e3 / number)
            device_times.append(event_seconds(events) * 1e3 / number)
        return DeviceBenchmarkResult(times, device_times, number, repeat,
                                     host_groups=len(self.host_groups))

    def benchmark_device(self, number: int = 10, repeat: int = 5, warmup: int = 1,
                         **inputs) -> BenchmarkResult:
        """The device time alone: ``benchmark(...).device`` (per repeat, the mean over its runs
        of the kernels' summed event times; host kernels and copies are not in it)."""
        return self.benchmark(number=number, repeat=repeat, warmup=warmup, **inputs).device

    def profile(self, number: int = 10, warmup: int = 1, **inputs) -> DeviceProfile:
        """As :meth:`GraphModule.profile` (the same rows and columns), each group's time from the
        device: the profiling events of its launches (``profile.end - profile.start``), median
        over the ``number`` runs; GFLOP/s are the group's flops over that time. The kernels are
        enqueued back to back as in a plain run, so no wait sits between them. A host kernel has
        no events: the device is waited for before and after it, it is timed on the host's
        clock and its rule says so. The copies of the inputs in and of the outputs out, and the
        whole run, are timed on the host's clock and reported under the table (see
        :class:`DeviceProfile`)."""
        if number < 1:
            raise ValueError(f"number must be >= 1, got {number}")
        if inputs:
            self.set_input(**inputs)
        self._check_ready()
        for _ in range(warmup):
            self._execute()
        queue = self.device.queue
        on_host = [node.kernel.host for node in self._graph.nodes]
        samples: list = [[] for _ in self._calls]
        per_launch: dict = {}    # group name -> [seconds of each launch] per call and run
        copy_in, copy_out, whole, device = [], [], [], []
        clock = time.perf_counter
        for _ in range(number):
            launched = []
            start = clock()
            self._copy_inputs()
            queue.finish()
            copied_in = clock()
            for i, call in enumerate(self._calls):
                if on_host[i]:
                    queue.finish()          # the kernels before it are not its time
                    began = clock()
                    call()
                    queue.finish()
                    samples[i].append(clock() - began)
                else:
                    events: list = []
                    call(events)
                    launched.append((i, events))
            queue.finish()
            kernels_done = clock()
            self._copy_outputs()
            queue.finish()
            end = clock()
            copy_in.append(copied_in - start)
            copy_out.append(end - kernels_done)
            whole.append(end - start)
            run_device = 0.0
            for i, events in launched:
                seconds = event_seconds(events)
                samples[i].append(seconds)
                run_device += seconds
                if len(events) > 1:
                    per_launch.setdefault(self._graph.nodes[i].kernel.name, []).append(
                        [event_seconds([e]) for e in events])
            device.append(run_device)
        table = self._profile_table(samples, number)
        host_names = set(self.host_groups)
        for row in table.groups:
            if row["group"] in host_names:
                row["rule"] = f"{row['rule']}, timed on the host"
            launches = per_launch.get(row["group"])
            if launches and len({len(x) for x in launches}) == 1:
                # a group of several launches (split-K, Winograd's three stages): each one's
                # median, in launch order
                row["launch ms"] = " + ".join(f"{float(np.median(t)) * 1e3:.4f}"
                                              for t in zip(*launches))
        if per_launch:   # the column on every row, so that tables show it
            for row in table.rows:
                row.setdefault("launch ms", "")
        median_ms = lambda seconds: float(np.median(seconds)) * 1e3  # noqa: E731
        return DeviceProfile(table.rows, table.total_ms, number, device=self.device.name,
                             device_ms=median_ms(device), copy_in_ms=median_ms(copy_in),
                             copy_out_ms=median_ms(copy_out), end_to_end_ms=median_ms(whole))

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f"; on {self.device.name})"
