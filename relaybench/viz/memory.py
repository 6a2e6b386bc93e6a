"""The memory plan drawn: each buffer's lifetime over a program's steps and the storage it
shares, with the bytes reuse saves, for the graph executor and for the Relay VM.

:func:`memory_plan` reads the plan a compiled program already holds and returns a
:class:`MemoryPlanView`:

* a :class:`~relaybench.backends.graph_executor.GraphModule` (``relaybench.build``): its steps
  are the kernel calls of its graph, its buffers the outputs of those calls, each in the
  storage :func:`~relaybench.backends.graph_executor.plan_memory` gave it (an output of the
  graph has a storage of its own, never handed on; a view, a ``reshape`` say, has no buffer:
  its readers keep the buffer it reads alive);
* a VM :class:`~relaybench.backends.vm.Executable`: its steps are the ``invoke_packed``
  instructions of a function (``main``), its buffers the tensors ``alloc_tensor`` places in
  blocks. The VM's storage planning turned each ``alloc_storage`` that takes over a dead block
  into a ``move`` of that block's register, so a block here is an ``alloc_storage`` and every
  register moved from it; a buffer lives from the call that writes it to the last instruction
  that reads it (or a register it was moved or reshaped into).

Bytes saved compares the storages with a plan where every buffer has its own (for the graph
executor, each buffer rounded up to the 64-byte alignment, as the plan counts them; for the VM,
each ``alloc_storage`` executed once with no block taken over). A lifetime is drawn as a bar over
the steps from the one that writes the buffer to the last one that reads it, one row per
storage, so the buffers that share a storage sit on one row, one after the other.

>>> import numpy as np, relaybench as rb
>>> from relaybench import op
>>> x = rb.var("x", shape=(4, 4))
>>> y = x
>>> for _ in range(3):
...     y = op.transpose(op.tanh(y))
>>> view = memory_plan(rb.build(rb.Function([x], y), opt_level=0))
>>> len(view.steps), len(view.buffers), len(view.storages)
(6, 6, 3)
>>> [(b["buffer"], b["storage"], b["first"], b["last"]) for b in view.buffers[:3]]
[('%1', 0, 0, 1), ('%2', 1, 1, 2), ('%3', 0, 2, 3)]
>>> view.planned_bytes, view.unplanned_bytes, view.saved_bytes
(192, 384, 192)
"""

from __future__ import annotations

from .chart import Canvas, palette

__all__ = ["memory_plan", "MemoryPlanView"]


def _bytes_text(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _type_text(shape, dtype) -> str:
    return "(" + ", ".join(str(d) for d in shape) + f") {dtype}"


class MemoryPlanView:
    """A memory plan, read from an executor (see the module).

    ``executor`` names it (``graph executor`` or ``VM``); ``steps`` are the kernel calls in
    order (their kernels' names); ``buffers`` one dict per buffer: ``buffer`` (its name: the
    graph's ``%K`` entry or the VM's ``$K`` register), ``type``, ``bytes``, ``storage``,
    ``first`` and ``last`` (the steps that write it and last read it, inclusive), ``writer``
    (the kernel of step ``first``) and ``output`` (whether the program returns it);
    ``storages`` one dict per storage: ``storage``, ``bytes``, ``buffers`` (how many share it),
    ``dedicated`` (an output's, never handed on). ``planned_bytes`` is the storages' sum,
    ``unplanned_bytes`` what every buffer in a storage of its own would take, ``saved_bytes``
    their difference.
    """

    def __init__(self, executor: str, steps: list, buffers: list, storages: list,
                 planned_bytes: int, unplanned_bytes: int, note: str = ""):
        self.executor = executor
        self.steps = steps
        self.buffers = buffers
        self.storages = storages
        self.planned_bytes = int(planned_bytes)
        self.unplanned_bytes = int(unplanned_bytes)
        self.note = note

    @property
    def saved_bytes(self) -> int:
        return self.unplanned_bytes - self.planned_bytes

    @property
    def saved_fraction(self) -> float:
        return self.saved_bytes / self.unplanned_bytes if self.unplanned_bytes else 0.0

    def summary(self) -> str:
        """One line: buffers, storages, bytes planned and without reuse, and saved."""
        return (f"{self.executor}: {len(self.buffers)} buffers in {len(self.storages)} storages "
                f"over {len(self.steps)} steps; {_bytes_text(self.planned_bytes)} planned vs "
                f"{_bytes_text(self.unplanned_bytes)} without reuse: {_bytes_text(self.saved_bytes)} "
                f"saved ({self.saved_fraction:.0%})")

    def live_bytes(self) -> list:
        """The bytes of the buffers alive at each step (written at or before it, read at or
        after it)."""
        live = [0] * len(self.steps)
        for b in self.buffers:
            for s in range(b["first"], b["last"] + 1):
                live[s] += b["bytes"]
        return live

    def table(self):
        """The buffers as a :class:`~relaybench.viz.Table`."""
        from .table import Table
        return Table([{"buffer": b["buffer"], "type": b["type"], "bytes": b["bytes"],
                       "storage": b["storage"], "steps": f"{b['first']}-{b['last']}",
                       "written by": b["writer"]} for b in self.buffers])

    # ---- drawing ------------------------------------------------------------------------------
    def canvas(self, width: float = 900.0) -> Canvas:
        """The lifetimes drawn: one row per storage (its id and size at the left), one bar per
        buffer over the steps it lives, in its storage's color, with a tooltip naming it, its
        type, bytes, storage, writer and steps; the summary line on top."""
        left, top, row, right = 150.0, 40.0, 16.0, 20.0
        n = max(len(self.steps), 1)
        step_w = (width - left - right) / n
        height = top + row * max(len(self.storages), 1) + 34
        c = Canvas(width, height, css_class="rb-memory-plan")
        c.text(8, 16, self.summary(), size=11, bold=True)
        if self.note:
            c.text(8, 30, self.note, size=9, color="#616161")
        y0 = top
        for k, s in enumerate(self.storages):
            y = y0 + k * row
            label = f"storage {s['storage']}: {_bytes_text(s['bytes'])}" + (" (output)" if s["dedicated"] else "")
            c.text(left - 6, y + row * 0.7, label, size=9, anchor="end",
                   tooltip=f"storage {s['storage']}: {s['bytes']} bytes, shared by {s['buffers']} buffers")
        index = {s["storage"]: k for k, s in enumerate(self.storages)}
        for b in self.buffers:
            k = index[b["storage"]]
            x = left + b["first"] * step_w
            w = (b["last"] - b["first"] + 1) * step_w
            tip = (f"{b['buffer']}: {b['type']}, {b['bytes']} bytes\nstorage {b['storage']}\n"
                   f"written by step {b['first']} ({b['writer']}), last read at step {b['last']}")
            c.rect(x + 0.5, y0 + k * row + 2, w - 1, row - 4, fill=palette(b["storage"]),
                   tooltip=tip, css="rb-buffer")
            if w > 40:
                c.text(x + 3, y0 + k * row + row * 0.68, b["buffer"], size=8)
        axis = y0 + row * max(len(self.storages), 1) + 4
        c.line(left, axis, width - right, axis)
        ticks = max(1, n // 10)
        for s in range(0, n, ticks):
            x = left + (s + 0.5) * step_w
            c.line(x, axis, x, axis + 3)
            c.text(x, axis + 13, str(s), size=8, anchor="middle",
                   tooltip=self.steps[s] if s < len(self.steps) else None)
        c.text(width - right, axis + 26, "step (kernel call) →", size=9, anchor="end", color="#616161")
        return c

    def svg(self) -> str:
        return self.canvas().svg()

    def _repr_html_(self) -> str:
        return f'<div class="rb-memory-view" style="overflow-x:auto">{self.svg()}</div>'

    def __repr__(self) -> str:
        return f"MemoryPlanView({self.summary()})"


# ---- the graph executor -----------------------------------------------------------------------

def _graph_plan(gm) -> MemoryPlanView:
    from ..backends.graph_executor import _round_up
    graph = gm.graph
    plan = gm.memory_plan()
    nodes = graph.nodes
    last_step = len(nodes) - 1
    outputs = set(graph.outputs)
    views = plan.views          # a view's readers keep the memory it reads alive
    last_read: dict = {}
    for node in nodes:
        for e in node.inputs:
            last_read[views.get(e, e)] = node.index
    buffers = []
    shared: dict = {}
    for node in nodes:
        for e in node.outputs:
            if e in views:      # no memory of its own
                continue
            entry = graph.entries[e]
            sid = plan.storage_of[e]
            last = last_step if e in outputs else last_read.get(e, node.index)
            buffers.append({"buffer": f"%{e}", "type": _type_text(entry.shape, entry.dtype),
                            "bytes": int(entry.nbytes), "storage": sid, "first": node.index,
                            "last": max(last, node.index), "writer": node.kernel.name,
                            "output": e in outputs})
            shared[sid] = shared.get(sid, 0) + 1
    storages = [{"storage": sid, "bytes": int(size), "buffers": shared.get(sid, 0),
                 "dedicated": sid in plan.dedicated} for sid, size in enumerate(plan.storage_bytes)]
    unplanned = sum(_round_up(b["bytes"]) for b in buffers)
    return MemoryPlanView("graph executor", [n.kernel.name for n in nodes], buffers, storages,
                          plan.planned_bytes, unplanned)


# ---- the VM -------------------------------------------------------------------------------------

def _vm_plan(exe, function: str) -> MemoryPlanView:
    from ..backends.vm import bytecode as bc
    from ..backends.vm.compiler import _reads
    try:
        fn = exe.function(function)
    except (KeyError, ValueError) as err:
        raise ValueError(f"memory_plan: the VM executable has no function {function!r}: {err}") from None
    code = list(fn.instructions)
    names = [k.name for k in exe.kernels] if getattr(exe, "kernels", None) else []
    steps, step_at = [], []       # step_at[pc]: the calls before pc
    for ins in code:
        step_at.append(len(steps))
        if isinstance(ins, bc.InvokePacked):
            index = ins.packed_index
            steps.append(ins.name or (names[index] if index < len(names) else f"PackedFunc[{index}]"))
    n = max(len(steps), 1)

    def clamp(s: int) -> int:
        return min(max(s, 0), n - 1)

    # blocks: an alloc_storage and every register moved from its register
    block_of: dict = {}          # register -> block id
    blocks: list = []            # [size, dynamic, times allocated by an alloc_storage or taken over]
    tensors: list = []           # (register, block, pc, shape, dtype)
    alias: dict = {}             # register -> the tensor register it is an alias of
    for pc, ins in enumerate(code):
        if isinstance(ins, bc.AllocStorage):
            block_of[ins.dst] = len(blocks)
            blocks.append([int(ins.size), ins.shape_register is not None, 1])
        elif isinstance(ins, bc.Move) and ins.src in block_of:
            block_of[ins.dst] = block_of[ins.src]       # a dead block taken over
            blocks[block_of[ins.src]][2] += 1
        elif isinstance(ins, bc.Move):
            alias[ins.dst] = alias.get(ins.src, ins.src)
        elif isinstance(ins, bc.ReshapeTensor):
            alias[ins.dst] = alias.get(ins.tensor, ins.tensor)
        elif isinstance(ins, (bc.AllocTensor, getattr(bc, "AllocTensorReg", bc.AllocTensor))) \
                and ins.storage in block_of:
            shape = getattr(ins, "shape", None)
            tensors.append((ins.dst, block_of[ins.storage], pc, shape, ins.dtype))
    last_read: dict = {}
    returned: set = set()
    for pc, ins in enumerate(code):
        for r in _reads(ins):
            root = alias.get(r, r)
            last_read[root] = pc
        if isinstance(ins, bc.Ret):
            returned.add(alias.get(ins.result, ins.result))
    buffers, shared = [], {}
    for reg, block, pc, shape, dtype in tensors:
        first = clamp(step_at[pc])
        end = last_read.get(reg, pc)
        last = n - 1 if reg in returned else clamp(step_at[end] - (0 if isinstance(code[end], bc.InvokePacked) else 1))
        size = blocks[block][0]
        nbytes = size
        if shape is not None:
            import numpy as np
            nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        buffers.append({"buffer": f"${reg}", "type": _type_text(shape, dtype) if shape is not None else f"(dynamic) {dtype}",
                        "bytes": int(nbytes), "storage": block, "first": first, "last": max(last, first),
                        "writer": steps[first] if steps else "", "output": reg in returned})
        shared[block] = shared.get(block, 0) + 1
    storages = [{"storage": i, "bytes": size, "buffers": shared.get(i, 0), "dedicated": False}
                for i, (size, dynamic, uses) in enumerate(blocks)]
    planned = sum(size for size, dynamic, uses in blocks)
    unplanned = sum(size * uses for size, dynamic, uses in blocks)
    dynamic = sum(1 for size, dyn, uses in blocks if dyn)
    note = (f"{dynamic} blocks sized at run time are counted as 0 bytes" if dynamic else "")
    return MemoryPlanView("VM", steps, buffers, storages, planned, unplanned, note)


def memory_plan(executable, function: str = "main") -> MemoryPlanView:
    """The memory plan of a compiled program (see the module): a ``GraphModule`` from
    :func:`relaybench.build`, or a VM ``Executable`` (its ``function``, ``main`` by default)."""
    import sys
    ge = sys.modules.get("relaybench.backends.graph_executor")
    if ge is not None and isinstance(executable, ge.GraphModule):
        return _graph_plan(executable)
    vm = sys.modules.get("relaybench.backends.vm.vm")
    if vm is not None and isinstance(executable, vm.Executable):
        return _vm_plan(executable, function)
    if vm is not None and isinstance(executable, getattr(vm, "VirtualMachine", ())):
        exe = getattr(executable, "exe", None) or getattr(executable, "executable", None)
        if exe is not None:
            return _vm_plan(exe, function)
    raise TypeError(f"memory_plan: expected a GraphModule (relaybench.build) or a VM Executable "
                    f"(relaybench.backends.vm.compile), not {type(executable).__name__}")
