"""The OpenCL runtime through pyopencl: choosing the device, building programs, launching kernels.

:func:`get_device` turns an ``opencl`` target into a :class:`Device` (the OpenCL device, a context
and an in-order queue, made once per process): ``-platform=NAME`` keeps the platforms whose name
contains ``NAME`` (case ignored), ``-device=gpu|cpu`` the devices of that type; without
``-device`` a GPU is preferred and any device taken otherwise. None matching is a
:class:`~relaybench.errors.CompileError` that lists every platform and device present. The
queue is made with profiling enabled (every OpenCL device must offer it), so that each launch's
event carries the device's own start and end times; :func:`event_seconds` reads them.

:func:`build_kernel` generates a PrimFunc's program (:mod:`.codegen`) and builds it once per
device: in memory for this process, and on disk (:mod:`.cache`, the driver's binary) for the
next one (``RB_OPENCL_BINARIES``: not for PoCL by default, whose own cache does it). The result, an :class:`OpenCLKernel`, is called like a CPU kernel with numpy arrays
(checked, copied to the device, run, the outputs copied back), or bound once to device buffers
(:meth:`OpenCLKernel.bind`, what the graph executor does) and then launched with no checks
and no copies; a bound launch hands its events over when given a list to put them in, which is
how ``profile`` and ``benchmark`` read the device's time of each kernel.
"""

from __future__ import annotations

import os
import threading
import warnings
from dataclasses import dataclass

import numpy as np

from ...errors import CompileError, ExecutionError
from ...te import loop_ir as L
from ..llvm.runtime import TensorSpec
from .cache import ProgramCache, program_key
from .codegen import DeviceFeatures, generate, program_text

__all__ = ["Device", "OpenCLKernel", "get_device", "build_kernel", "build_kernels",
           "list_devices", "event_seconds",
           "devices_text", "stats", "BUILD_OPTIONS"]

BUILD_OPTIONS = ("-cl-std=CL1.2",)
"""Options every program is built with; ``-cl-fp32-correctly-rounded-divide-sqrt`` is added on
devices that offer it, so that ``/`` and ``sqrt`` round as the CPU's do."""

#: programs this process built (``compiled``), read from the disk cache (``from_disk``) or found
#: built already (``from_memory``)
stats = {"compiled": 0, "from_disk": 0, "from_memory": 0}

_lock = threading.Lock()
_devices: dict = {}
_programs: dict = {}
_disk = ProgramCache()


POCL_WORK_GROUP_METHOD = "loops"
"""How PoCL turns a kernel into a work group's code, unless the environment says otherwise
(``POCL_WORK_GROUP_METHOD``). Its default, ``auto`` (a method chosen per kernel), miscompiled
a Winograd matrix product whose local-memory copy is guarded inside a loop with barriers (a
1-channel output: the process crashed, PoCL 3.0); ``loops`` and ``loopvec`` run it, and
``loops`` compiles fastest (the Winograd tests: 84 s against 126 s on an empty cache). PoCL
reads it when it builds a program."""


def _cl():
    os.environ.setdefault("POCL_WORK_GROUP_METHOD", POCL_WORK_GROUP_METHOD)
    try:
        import pyopencl
    except ImportError:
        raise ImportError("the OpenCL backend needs pyopencl: install the extra with "
                          "`pip install 'relaybench[opencl]'` (pyopencl[pocl] brings PoCL's CPU "
                          "device along)") from None
    return pyopencl


def _platforms() -> list:
    cl = _cl()
    try:
        return list(cl.get_platforms())
    except cl.Error:  # no ICD file names any platform
        return []


def _type_name(device) -> str:
    """``gpu``, ``cpu``, ``accelerator`` (a device's type is a bit field: PoCL's CPU device says
    ``ALL | CPU``)."""
    cl = _cl()
    for bit, name in ((cl.device_type.GPU, "gpu"), (cl.device_type.CPU, "cpu"),
                      (cl.device_type.ACCELERATOR, "accelerator")):
        if device.type & bit:
            return name
    return cl.device_type.to_string(device.type).lower()


def list_devices() -> list:
    """``(platform name, device name, device type)`` of every OpenCL device present."""
    found = []
    for platform in _platforms():
        try:
            devices = platform.get_devices()
        except _cl().Error:
            devices = []
        found.extend((platform.name.strip(), d.name.strip(), _type_name(d)) for d in devices)
    return found


def devices_text() -> str:
    """The platforms and devices present, one line each (or why there are none)."""
    platforms = _platforms()
    if not platforms:
        return ("no OpenCL platform (the ICD loader found no vendor file in /etc/OpenCL/vendors "
                "or $OCL_ICD_VENDORS)")
    lines = []
    for platform in platforms:
        try:
            devices = platform.get_devices()
        except _cl().Error:
            devices = []
        names = "; ".join(f"{d.name.strip()} ({_type_name(d)})" for d in devices) or "no device"
        lines.append(f"platform {platform.name.strip()!r}: {names}")
    return "\n".join(lines)


@dataclass
class Device:
    """One OpenCL device with its context and in-order queue (profiling enabled), and what the
    code generator needs to know of it (``features``); ``key`` names it in the program cache."""

    device: object
    context: object
    queue: object
    features: DeviceFeatures
    key: str
    options: str

    @property
    def name(self) -> str:
        return self.features.name

    def __repr__(self) -> str:
        return f"Device({self.key})"


def get_device(target) -> Device:
    """The :class:`Device` an ``opencl`` target names (see the module), made once per process."""
    from ..target import Target
    target = Target.parse(target)
    platform_part = target.options.get("platform")
    kind = target.options.get("device")
    with _lock:
        found = _devices.get((platform_part, kind))
        if found is not None:
            return found
        cl = _cl()
        candidates = []
        for platform in _platforms():
            if platform_part and platform_part.lower() not in platform.name.lower():
                continue
            try:
                devices = platform.get_devices()
            except cl.Error:
                continue
            candidates.extend(d for d in devices if kind is None or _type_name(d) == kind)
        if kind is None:  # a GPU when there is one
            candidates.sort(key=lambda d: _type_name(d) != "gpu")
        if not candidates:
            wanted = " and ".join(w for w in (
                f"-platform={platform_part}" if platform_part else "",
                f"-device={kind}" if kind else "") if w) or "any device"
            raise CompileError(f"target {target}: no OpenCL device matches {wanted}; present:\n"
                               f"{devices_text()}")
        device = candidates[0]
        context = cl.Context(devices=[device])
        # Profiling is a capability the OpenCL specification requires of every device; with it
        # each command's event records when the device started and ended it. Its cost is a few
        # timestamps per command, paid whether or not anybody reads them.
        queue = cl.CommandQueue(context, device,
                                properties=cl.command_queue_properties.PROFILING_ENABLE)
        extensions = device.extensions.split()
        features = DeviceFeatures(
            name=f"{device.name.strip()} ({device.platform.name.strip()})",
            fp64="cl_khr_fp64" in extensions, fp16="cl_khr_fp16" in extensions,
            max_work_group_size=int(device.max_work_group_size),
            max_work_item_sizes=tuple(int(n) for n in device.max_work_item_sizes[:3]),
            kind=_type_name(device))
        options = list(BUILD_OPTIONS)
        if POCL_PLATFORM in device.platform.name:
            # a mark in the options, which PoCL's own cache keys on: kernels it compiled with
            # another work-group method are not read back
            method = os.environ.get("POCL_WORK_GROUP_METHOD", POCL_WORK_GROUP_METHOD)
            options.append(f"-DRB_POCL_WORK_GROUP_{''.join(c for c in method if c.isalnum())}")
        if device.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT:
            options.append("-cl-fp32-correctly-rounded-divide-sqrt")
        key = (f"{device.platform.name.strip()}/{device.name.strip()}/{device.version.strip()}/"
               f"{device.driver_version.strip()}")
        found = Device(device, context, queue, features, key, " ".join(options))
        _devices[(platform_part, kind)] = found
        return found


POCL_PLATFORM = "Portable Computing Language"


def _stores_binaries(device: Device) -> bool:
    """``RB_OPENCL_BINARIES``: whether a program built from source is stored on disk. ``auto``
    skips PoCL: it caches what it compiles by itself (``POCL_CACHE_DIR``), and asking it for a
    program's binary compiles every kernel of the program once more (half a second or more per
    program on a CPU, as long again as the build)."""
    from ... import config
    mode = config.get("RB_OPENCL_BINARIES").lower()
    if mode not in ("auto", "on", "off"):
        raise CompileError(f"RB_OPENCL_BINARIES={mode!r}: expected auto, on or off")
    if mode == "auto":
        return POCL_PLATFORM not in device.key
    return mode == "on"


def _build_program(device: Device, source: str, name: str):
    """``source`` built for ``device``: from this process's programs, the disk cache, or the
    driver's compiler (then stored in both)."""
    cl = _cl()
    memo_key = (device.key, device.options, source)
    with _lock:
        program = _programs.get(memo_key)
    if program is not None:
        stats["from_memory"] += 1
        return program
    key = program_key(source, device.options, device.key)
    binary = _disk.load(key)
    program = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pyopencl warns about any compiler output
        if binary is not None:
            try:
                program = cl.Program(device.context, [device.device], [binary]).build(
                    options=device.options)
                stats["from_disk"] += 1
            except cl.Error as err:
                _disk.discard(key, f"the driver refused the binary: {err}")
                program = None
        if program is None:
            try:
                program = cl.Program(device.context, source).build(options=device.options)
            except cl.Error as err:
                raise CompileError(f"kernel {name}: the OpenCL compiler of {device.name} "
                                   f"failed:\n{err}") from None
            stats["compiled"] += 1
            if _stores_binaries(device):
                try:
                    binaries = program.get_info(cl.program_info.BINARIES)
                    if binaries and binaries[0]:
                        _disk.store(key, bytes(binaries[0]))
                except (cl.Error, OSError):  # a driver without binaries, a read-only cache
                    pass
    with _lock:
        _programs[memo_key] = program
    return program


class OpenCLKernel:
    """A PrimFunc compiled for an OpenCL device (see the module).

    ``source("loops" | "opencl")`` shows the loop IR or the OpenCL C program; ``launches`` lists
    each ``__kernel`` with its work sizes.
    """

    def __init__(self, func: L.PrimFunc, code, device: Device, program=None):
        self.func = func
        self.name = func.name
        self.code = code
        self.device = device
        self._program = program
        self.specs = [TensorSpec(b.name, b.shape, b.dtype, output=b in code.stored)
                      for b in func.params]
        self._temporaries = None

    @property
    def program(self):
        """The built program holding this kernel's launches (built now, alone, when
        :func:`build_kernels` has not built it with others)."""
        if self._program is None:
            self._program = _build_program(self.device, self.code.text, self.name)
        return self._program

    @property
    def launches(self) -> list:
        return list(self.code.kernels)

    def source(self, kind: str = "opencl") -> str:
        if kind == "loops":
            return L.to_text(self.func)
        if kind == "opencl":
            return self.code.text
        raise ValueError(f"unknown source kind {kind!r} for an OpenCL kernel; known kinds: "
                         "loops, opencl")

    def _temporary_buffers(self) -> list:
        """The temporaries in device memory, made at the first use and shared by every call
        (calls go through one in-order queue, so they never overlap)."""
        if self._temporaries is None:
            cl = _cl()
            self._temporaries = [
                cl.Buffer(self.device.context, cl.mem_flags.READ_WRITE,
                          max(1, b.size * np.dtype(b.dtype).itemsize))
                for b in self.code.temporaries]
        return self._temporaries

    def bind(self, *buffers):
        """Check ``buffers`` (one ``pyopencl.Buffer`` per parameter, at least as large as it)
        now; return a function that enqueues the kernel's launches on them: ``run()``, or
        ``run(events)`` to have the event of each launch appended to the list ``events`` (read
        them with :func:`event_seconds` once the queue has finished). Without a list the events
        are dropped as soon as they are made, so a plain run keeps none alive."""
        cl = _cl()
        if len(buffers) != len(self.specs):
            raise ExecutionError(f"{self.name}: {len(self.specs)} buffers expected "
                                 f"({', '.join(s.name for s in self.specs)}), {len(buffers)} "
                                 "given", expected=len(self.specs), given=len(buffers))
        for spec, buffer in zip(self.specs, buffers):
            need = int(np.prod(spec.shape, dtype=np.int64)) * np.dtype(spec.dtype).itemsize
            if not isinstance(buffer, cl.Buffer):
                raise ExecutionError(f"{self.name}: argument {spec.name!r}: expected a device "
                                     f"buffer of {need} bytes, given {type(buffer).__name__}",
                                     input_name=spec.name, expected=spec.expected,
                                     given=type(buffer).__name__)
            if buffer.size < need:
                raise ExecutionError(f"{self.name}: argument {spec.name!r}: expected "
                                     f"{spec.expected} ({need} bytes), given a device buffer of "
                                     f"{buffer.size} bytes", input_name=spec.name,
                                     expected=spec.expected, given=f"{buffer.size} bytes")
        args = list(buffers) + self._temporary_buffers()
        queue = self.device.queue
        runs = []
        for launch in self.code.kernels:
            if launch.empty:
                continue
            kernel = cl.Kernel(self.program, launch.name)
            used = [a for a, b in zip(args, list(self.code.params) + self.code.temporaries)
                    if kernel_uses(self.code, launch.name, b)]
            kernel.set_args(*used)
            runs.append((kernel, launch.global_size, launch.local_size))

        enqueue = cl.enqueue_nd_range_kernel

        def run(events: list | None = None):
            if events is None:
                for kernel, global_size, local_size in runs:
                    enqueue(queue, kernel, global_size, local_size)
            else:
                for kernel, global_size, local_size in runs:
                    events.append(enqueue(queue, kernel, global_size, local_size))
        return run

    def __call__(self, *arrays) -> None:
        """Run on numpy arrays (one per parameter, checked first): the inputs are copied to the
        device, the outputs copied back into ``arrays`` in place."""
        cl = _cl()
        if len(arrays) != len(self.specs):
            raise ExecutionError(f"{self.name}: {len(self.specs)} arrays expected "
                                 f"({', '.join(s.name for s in self.specs)}), {len(arrays)} "
                                 "given", expected=len(self.specs), given=len(arrays))
        for spec, array in zip(self.specs, arrays):
            spec.check(array, self.name)
        context, queue = self.device.context, self.device.queue
        buffers = []
        for spec, array in zip(self.specs, arrays):
            buffer = cl.Buffer(context, cl.mem_flags.READ_WRITE, max(1, array.nbytes))
            if array.nbytes and not spec.output:
                cl.enqueue_copy(queue, buffer, array)
            buffers.append(buffer)
        self.bind(*buffers)()
        for spec, array, buffer in zip(self.specs, arrays, buffers):
            if spec.output and array.nbytes:
                cl.enqueue_copy(queue, array, buffer)
        queue.finish()

    def __repr__(self) -> str:
        return f"OpenCLKernel({self.name}: {len(self.code.kernels)} launches on {self.device.name})"


def event_seconds(events) -> float:
    """The device's time, in seconds, of the completed commands ``events`` (each ``profile.end -
    profile.start``, nanoseconds of the device's clock, summed). The queue the events came from
    orders its commands, so their sum is at most the wall time between the first start and the
    last end; the gaps between them (launch overhead) are not counted."""
    total = 0
    for event in events:
        profile = event.profile
        total += profile.end - profile.start
    return total * 1e-9


def kernel_uses(code, launch_name: str, buffer) -> bool:
    """Whether the ``__kernel`` ``launch_name`` of ``code`` takes ``buffer`` as an argument
    (a launch takes the parameters, and the temporaries it reads or writes)."""
    return buffer in code.params or buffer in code.launch_buffers.get(launch_name, ())


def build_kernel(func: L.PrimFunc, target="opencl", *, lazy: bool = False) -> OpenCLKernel:
    """Generate ``func``'s OpenCL program for the target's device and build it (cached).

    With ``lazy=True`` the program is built at the first use, or together with others by
    :func:`build_kernels`."""
    device = get_device(target)
    code = generate(func, device.features)
    kernel = OpenCLKernel(func, code, device)
    if not lazy:
        kernel.program
    return kernel


def build_kernels(kernels) -> None:
    """Build the programs of ``kernels`` (made with ``lazy=True``, on one device, their names
    distinct) as one program: the driver's compiler costs far more per program than per
    kernel. Kernels built already are left as they are."""
    pending = [k for k in kernels if k._program is None]
    if not pending:
        return
    devices = {id(k.device) for k in pending}
    if len(devices) != 1:
        raise CompileError("build_kernels: the kernels are for different devices")
    names = [k.name for k in pending]
    launches = [launch.name for k in pending for launch in k.code.kernels]
    if len(set(launches)) != len(launches):
        repeated = sorted({n for n in launches if launches.count(n) > 1})
        raise CompileError(f"build_kernels: kernels {', '.join(names)} hold launches of the "
                           f"same name ({', '.join(repeated)}); they need a program each")
    text = program_text([k.code for k in pending])
    program = _build_program(pending[0].device, text, ", ".join(names[:3]))
    for kernel in pending:
        kernel._program = program
