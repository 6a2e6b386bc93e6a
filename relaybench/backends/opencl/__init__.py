"""The OpenCL backend: loop IR to OpenCL C (:mod:`.codegen`), run through pyopencl
(:mod:`.runtime`), programs cached on disk (:mod:`.cache`), and the graph executor's memory
plan on the device (:mod:`.graph`). pyopencl is imported when a device is first asked for; the
code generator needs nothing but numpy.
"""

from .cache import ProgramCache, program_key
from .codegen import DeviceFeatures, KernelLaunch, OpenCLSource, generate, program_text
from .runtime import (Device, OpenCLKernel, build_kernel, build_kernels, devices_text,
                      event_seconds, get_device, list_devices)

__all__ = ["generate", "program_text", "build_kernels", "OpenCLSource", "KernelLaunch", "DeviceFeatures", "ProgramCache",
           "program_key", "Device", "OpenCLKernel", "build_kernel", "get_device",
           "list_devices", "devices_text", "event_seconds"]
