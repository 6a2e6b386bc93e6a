"""The graph executor on an OpenCL device: the memory plan in device memory, kernels enqueued.

:class:`OpenCLGraphModule` is the :class:`~relaybench.backends.graph_executor.GraphModule` of
an ``opencl`` build: the same graph, memory plan, input checks, results, ``benchmark`` and
``profile``, with the buffers on the device. Each storage of the plan is one device buffer, each
input has one (and a host array its value is set into), each constant is copied to the device
once, when the module is made. A run copies the inputs in, enqueues every kernel on the device's
in-order queue, copies the outputs out and waits; ``benchmark`` times all of that (end to end),
``profile`` waits after each kernel so that each is timed alone. A group that has no compute (a
host kernel, run by the reference interpreter) reads its inputs back from the device and writes
its outputs to it.

Example (needs pyopencl and an OpenCL device; PoCL's CPU device comes with ``pyopencl[pocl]``)::

    >>> import numpy as np, relaybench as rb
    >>> x = rb.var("x", shape=(4,))
    >>> lib = rb.build(rb.IRModule.from_expr(rb.Function([x], x * x)), target="opencl")
    >>> lib.run(x=np.arange(4, dtype="float32"))
    array([0., 1., 4., 9.], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from ..graph_executor import GraphModule, _round_up, contiguous
from .runtime import _cl, get_device

__all__ = ["OpenCLGraphModule"]


class OpenCLGraphModule(GraphModule):
    """A compiled static graph whose buffers and kernels live on an OpenCL device."""

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
        """A host kernel between device kernels: its inputs read back, its outputs written."""
        cl = _cl()
        queue = self.device.queue
        entries = self._graph.entries
        inputs = [(self._buffers[e], np.empty(entries[e].shape, entries[e].dtype))
                  for e in node.inputs]
        outputs = [(self._buffers[e], np.empty(entries[e].shape, entries[e].dtype))
                   for e in node.outputs]
        kernel = node.kernel.compiled

        def run():
            for buffer, array in inputs:
                if array.nbytes:
                    cl.enqueue_copy(queue, array, buffer)
            kernel(*[a for _, a in inputs], *[a for _, a in outputs])
            for buffer, array in outputs:
                if array.nbytes:
                    cl.enqueue_copy(queue, buffer, array)
        return run

    def _execute(self) -> None:
        cl = _cl()
        queue = self.device.queue
        for _, e in self._graph.inputs:
            if self._arrays[e].nbytes:
                cl.enqueue_copy(queue, self._buffers[e], self._arrays[e])
        for call in self._calls:
            call()
        for e, array in zip(self._graph.outputs, self._output_arrays):
            if array.nbytes:
                cl.enqueue_copy(queue, array, self._buffers[e])
        queue.finish()

    def benchmark_device(self, number: int = 10, repeat: int = 5, warmup: int = 1,
                         **inputs):
        """Time the kernels alone, on the inputs already on the device (no copies in or out):
        ``repeat`` rounds of ``number`` runs, each round waited for once at its end."""
        from ..graph_executor import BenchmarkResult
        import time
        if number < 1 or repeat < 1:
            raise ValueError(f"number and repeat must be >= 1, got {number} and {repeat}")
        if inputs:
            self.set_input(**inputs)
        self._check_ready()
        for _ in range(warmup):
            self._execute()
        queue, calls = self.device.queue, self._calls
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(number):
                for call in calls:
                    call()
            queue.finish()
            times.append((time.perf_counter() - start) * 1e3 / number)
        return BenchmarkResult(times, number, repeat)

    def profile(self, number: int = 10, warmup: int = 1, **inputs):
        """As :meth:`GraphModule.profile`, each kernel call waited for, so it is timed alone."""
        queue = self.device.queue
        queue.finish()
        calls = self._calls

        def waited(call):
            def run():
                call()
                queue.finish()
            return run
        self._calls = [waited(c) for c in calls]
        try:
            return super().profile(number=number, warmup=warmup, **inputs)
        finally:
            self._calls = calls

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f"; on {self.device.name})"
