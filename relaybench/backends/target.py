"""Targets: the device a module is compiled for, and its options.

A target is written as in TVM, a kind followed by ``-key=value`` options:

>>> t = Target.parse("llvm -mcpu=native -num-threads=2")
>>> t.kind, t.options["mcpu"], t.num_threads
('llvm', 'native', 2)
>>> str(t)
'llvm -mcpu=native -num-threads=2'
>>> Target.parse("cuda")
Traceback (most recent call last):
...
relaybench.errors.CompileError: unknown target kind 'cuda' in 'cuda'; known: llvm, opencl, accel

Each kind takes the options :data:`OPTIONS` lists, and each option's value is checked when the
target is parsed, so a misspelt option or value fails where it is written instead of being
ignored:

>>> Target.parse("llvm -mcpus=native")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
relaybench.errors.CompileError: target 'llvm -mcpus=native': unknown option -mcpus; llvm takes -mcpu (...), -num-threads (...)

The LLVM backend compiles for the CPU it runs on, so ``-mcpu`` names that CPU: ``native``, or
the host's LLVM name (``znver4``, ``skylake-avx512``, ...). A name LLVM does not know is an
error listing close ones; a known CPU other than the host's is an error too, since kernels
compiled for it would not be what runs (checking ``-mcpu`` needs llvmlite).

The OpenCL backend (``opencl``, through pyopencl) runs on one OpenCL device: ``-device=gpu``
(the default) or ``-device=cpu`` picks its type, ``-platform=NAME`` the platform whose name
contains ``NAME`` (case ignored; PoCL's is "Portable Computing Language"). Which devices are
present is only known when the module is built, where none matching is an error listing them:

>>> Target.parse("opencl -device=cpu -platform=pocl").options
{'device': 'cpu', 'platform': 'pocl'}
>>> Target.parse("opencl -device=fpga")
Traceback (most recent call last):
...
relaybench.errors.CompileError: target 'opencl -device=fpga': -device must be gpu or cpu, got 'fpga'

The simulated accelerator (``accel``, :mod:`relaybench.backends.accel`) runs the packed int8
convolutions of a quantized program in its simulator and the rest on the host CPU (LLVM);
``-batch=`` picks a multi-batch design, ``-clock-mhz=`` its clock:

>>> Target.parse({"accel": "accel", "cpu": "llvm -num-threads=1"}).host
Target('llvm -num-threads=1')
>>> c = Target.parse("accel -batch=4").accel_config()
>>> c.batch, c.block_in, c.block_out, c.macs_per_cycle
(4, 8, 8, 256)
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from ..errors import CompileError

__all__ = ["Target", "KINDS", "OPTIONS"]

#: The target kinds that have a code generator.
KINDS = ("llvm", "opencl", "accel")

#: The options of each target kind: name -> what it means.
OPTIONS = {
    "llvm": {
        "mcpu": "the CPU to compile for: native, or the host's LLVM CPU name",
        "num-threads": "threads for parallel kernels, a count >= 0 (0: one per core; "
                       "default: RB_NUM_THREADS)",
    },
    "opencl": {
        "device": "the OpenCL device type: gpu (default) or cpu",
        "platform": "a part of the OpenCL platform's name (case ignored), e.g. nvidia, pocl",
    },
    "accel": {
        "batch": "the design's batch (rows of the GEMM core): 1 (VTA's default), 2, 4, ...; "
                 "a multi-batch design keeps the MAC count (AccelConfig.multi_batch)",
        "clock-mhz": "the clock in MHz (default 100)",
        "num-threads": "threads for the CPU part's parallel kernels (as for llvm)",
        "cpu-mcpu": "the CPU part's -mcpu (from a target dict's 'cpu' entry)",
        "cpu-num-threads": "the CPU part's -num-threads (from a target dict's 'cpu' entry)",
    },
}

#: The device types ``-device`` takes.
OPENCL_DEVICES = ("gpu", "cpu")


def _check_num_threads(target: str, value: str) -> None:
    try:
        if int(value) < 0:
            raise ValueError
    except ValueError:
        raise CompileError(f"target {target!r}: -num-threads must be a count >= 0 "
                           f"(0: one per core), got {value!r}") from None


def _check_mcpu(target: str, value: str) -> None:
    if value == "native":
        return
    from .llvm.jit import host_target, known_cpus
    known = known_cpus()
    host = host_target().cpu
    if value not in known:
        close = difflib.get_close_matches(value, sorted(known), n=3)
        hint = f" (close: {', '.join(close)})" if close else ""
        raise CompileError(f"target {target!r}: -mcpu={value} is not a CPU LLVM knows{hint}; "
                           f"use -mcpu=native for this host ({host})")
    if value != host:
        raise CompileError(f"target {target!r}: -mcpu={value} is not this host's CPU ({host}); "
                           "the LLVM backend compiles for the CPU it runs on: use -mcpu=native "
                           f"or -mcpu={host}")


def _check_device(target: str, value: str) -> None:
    if value not in OPENCL_DEVICES:
        raise CompileError(f"target {target!r}: -device must be {' or '.join(OPENCL_DEVICES)}, "
                           f"got {value!r}")


# option name -> check(target text, value), raising CompileError
def _check_positive(name: str):
    def check(target: str, value: str) -> None:
        try:
            if float(value) <= 0:
                raise ValueError
        except ValueError:
            raise CompileError(f"target {target!r}: -{name} must be a positive number, "
                               f"got {value!r}") from None
    return check


_CHECKS = {"num-threads": _check_num_threads, "mcpu": _check_mcpu, "device": _check_device,
           "cpu-num-threads": _check_num_threads, "cpu-mcpu": _check_mcpu,
           "platform": lambda target, value: None, "batch": _check_positive("batch"),
           "clock-mhz": _check_positive("clock-mhz")}


@dataclass(frozen=True)
class Target:
    """A compilation target: ``kind`` (``"llvm"``: the host CPU; ``"opencl"``: an OpenCL
    device) and its ``options``."""

    kind: str
    options: dict = field(default_factory=dict, hash=False, compare=True)

    @classmethod
    def _heterogeneous(cls, targets: dict) -> "Target":
        """``{"accel": "accel ...", "cpu": "llvm ..."}``: the accelerator target whose host part
        (:attr:`host`) is the given CPU target."""
        unknown = sorted(set(targets) - {"accel", "cpu"})
        if unknown or "accel" not in targets:
            raise CompileError(f"a target dict maps 'accel' (and optionally 'cpu') to targets, "
                               f"got keys {sorted(targets)}")
        accel = cls.parse(targets["accel"])
        cpu = cls.parse(targets.get("cpu", "llvm"))
        if accel.kind != "accel" or cpu.kind != "llvm":
            raise CompileError(f"target dict: 'accel' must be an accel target and 'cpu' an llvm "
                               f"one, got {accel} and {cpu}")
        return cls("accel", {**accel.options, **{f"cpu-{k}": v for k, v in cpu.options.items()}})

    def accel_config(self):
        """The :class:`~relaybench.backends.accel.AccelConfig` an ``accel`` target names."""
        from dataclasses import replace
        from .accel.config import AccelConfig, AccelError
        if self.kind != "accel":
            raise CompileError(f"target {self}: not an accelerator target")
        batch = int(float(self.options.get("batch", 1)))
        try:
            # the packed layouts use one channel block for inputs and outputs: a square block
            config = AccelConfig.multi_batch(batch, split="square") if batch != 1 else AccelConfig()
            if "clock-mhz" in self.options:
                config = replace(config, clock_mhz=float(self.options["clock-mhz"]))
        except AccelError as err:
            raise CompileError(f"target {self}: -batch={batch}: {err}") from None
        return config

    @property
    def host(self) -> "Target":
        """The target of the groups that run on the host CPU: ``llvm`` for ``accel`` (with its
        thread count), the target itself otherwise."""
        if self.kind != "accel":
            return self
        options = {k: v for k, v in self.options.items() if k == "num-threads"}
        options.update({k[4:]: v for k, v in self.options.items() if k.startswith("cpu-")})
        return Target("llvm", options)

    @classmethod
    def parse(cls, target) -> "Target":
        """A Target from a string (``"llvm -mcpu=native"``), a Target, or None (``llvm``).

        Raises :class:`~relaybench.errors.CompileError` for an unknown kind, an option the kind
        does not take (listing those it takes), an option given twice, or a bad value.
        """
        if target is None:
            return cls("llvm", {})
        if isinstance(target, Target):
            return target
        if isinstance(target, dict):
            return cls._heterogeneous(target)
        if not isinstance(target, str) or not target.strip():
            raise CompileError(f"a target is a string such as 'llvm', not {target!r}")
        words = target.split()
        kind = words[0]
        if kind not in KINDS:
            raise CompileError(f"unknown target kind {kind!r} in {target!r}; known: "
                               f"{', '.join(KINDS)}")
        known = OPTIONS[kind]
        options = {}
        for word in words[1:]:
            if not word.startswith("-") or "=" not in word:
                raise CompileError(f"target {target!r}: option {word!r} is not -key=value")
            key, value = word.lstrip("-").split("=", 1)
            if key not in known:
                listing = ", ".join(f"-{name} ({doc})" for name, doc in known.items())
                raise CompileError(f"target {target!r}: unknown option -{key}; {kind} takes "
                                   f"{listing}")
            if key in options:
                raise CompileError(f"target {target!r}: option -{key} is given twice")
            if not value:
                raise CompileError(f"target {target!r}: option -{key} has no value "
                                   f"({known[key]})")
            options[key] = value
        for key, value in options.items():
            _CHECKS[key](target, value)
        return cls(kind, options)

    @property
    def num_threads(self):
        """The ``-num-threads`` option as an int, or None (then ``RB_NUM_THREADS`` decides)."""
        value = self.options.get("num-threads", self.options.get("cpu-num-threads"))
        return None if value is None else int(value)

    def __str__(self) -> str:
        return " ".join([self.kind] + [f"-{k}={v}" for k, v in self.options.items()])

    def __repr__(self) -> str:
        return f"Target({str(self)!r})"
