"""An on-disk cache of built OpenCL programs, so that a second process skips the driver's compiler.

An entry holds the program binary the driver gave for one device
(``CL_PROGRAM_BINARIES``). It lives in ``RB_CACHE_DIR/opencl/<key>.rbcl``, where the key hashes
everything the binary depends on: the program's source, the build options, the device (platform,
name, driver and OpenCL versions) and the versions of pyopencl and relaybench. The file is a
fixed header and the binary::

    b"RBCLPROG" | format version (u32) | binary length (u64) | sha256 of binary (32 bytes) | binary

A damaged entry (truncated, a wrong checksum, a foreign format) is a miss and is removed, and so
is one the driver refuses to load; the caller then builds from source and stores a fresh one.
Writes go to a temporary file in the same folder, then ``os.replace``, so a reader never sees a
half-written entry.

>>> import tempfile
>>> cache = ProgramCache(tempfile.mkdtemp())
>>> key = program_key("__kernel void f() {}", "", "pocl/cpu/3.0")
>>> cache.load(key) is None
True
>>> cache.store(key, b"\\x7fELF binary")
>>> cache.load(key)
b'\\x7fELF binary'
"""

from __future__ import annotations

import hashlib
import struct

from ..disk_cache import DiskCache

__all__ = ["ProgramCache", "program_key"]

_MAGIC = b"RBCLPROG"
_FORMAT = 1
_HEADER = struct.Struct("<8sIQ32s")


def _versions() -> str:
    from ... import __version__ as relaybench_version
    try:
        import pyopencl
        pyopencl_version = pyopencl.VERSION_TEXT
    except ImportError:
        pyopencl_version = "none"
    return f"relaybench={relaybench_version};pyopencl={pyopencl_version};format={_FORMAT}"


def program_key(source: str, options: str, device: str) -> str:
    """The hex sha256 naming a program's entry: its source, build options, device, versions."""
    digest = hashlib.sha256()
    for part in (source, options, device, _versions()):
        data = part.encode("utf-8")
        digest.update(struct.pack("<Q", len(data)))
        digest.update(data)
    return digest.hexdigest()


class ProgramCache(DiskCache):
    """Program binaries on disk under ``directory/opencl`` (default: ``RB_CACHE_DIR``, read at
    each use), each with a header (magic, format, length, SHA-256) checked when it is read.
    ``stats`` counts ``hits``, ``misses``, ``stores`` and ``damaged`` entries."""

    subdir, suffix = "opencl", ".rbcl"

    def load(self, key: str) -> bytes | None:
        """The binary stored for ``key``, or None (absent, or damaged and then removed)."""
        data = self.read(key)
        if data is None:
            return None
        problem = None
        if len(data) < _HEADER.size:
            problem = f"truncated header ({len(data)} bytes)"
        else:
            magic, fmt, length, digest = _HEADER.unpack_from(data)
            binary = data[_HEADER.size:]
            if magic != _MAGIC:
                problem = "not a relaybench OpenCL cache entry (bad magic)"
            elif fmt != _FORMAT:
                problem = f"cache format {fmt}, expected {_FORMAT}"
            elif len(binary) != length:
                problem = f"binary of {len(binary)} bytes, header says {length}"
            elif hashlib.sha256(binary).digest() != digest:
                problem = "checksum mismatch"
        if problem is not None:
            self.discard(key, problem)
            return None
        self.stats["hits"] += 1
        return bytes(binary)

    def store(self, key: str, binary: bytes) -> None:
        """Write ``key``'s entry atomically, with its header."""
        header = _HEADER.pack(_MAGIC, _FORMAT, len(binary), hashlib.sha256(binary).digest())
        self.write(key, header + binary)
