"""An on-disk cache of compiled kernels, so that a second process skips LLVM entirely.

An entry holds a compiled module's object code (what ``TargetMachine.emit_object`` produced),
its optimized LLVM IR (for ``source("llvm")`` and ``source("asm")``) and the map from the
functions' names to their symbols in the object. It lives in ``RB_CACHE_DIR/llvm/<key>.rbk``,
where the key hashes everything the object code depends on: the kernel (its IR text, or a key
the caller gives, such as printed loop IR), the target (triple, CPU, features) and the versions
of llvmlite and relaybench.

The file is a fixed header followed by the payload::

    b"RBKCACHE" | format version (u32) | payload length (u64) | sha256 of payload (32 bytes)
    payload = metadata length (u32) | metadata (JSON, utf-8) | object code

A damaged entry (a truncated file, a wrong checksum, a foreign format) is reported as a miss and
removed, so the caller compiles again and stores a fresh one. Writers write a temporary file in
the same directory and ``os.replace`` it into place, so concurrent writers of one key never leave
a half-written entry and readers see either the old file or the new one.

>>> import tempfile
>>> cache = KernelCache(tempfile.mkdtemp())
>>> key = cache_key("define void @f() { ret void }", "x86_64-unknown-linux-gnu/skylake/+avx2")
>>> cache.load(key) is None
True
>>> cache.store(key, CacheEntry(b"\\x7fELF...", "; IR", {"f": "f_1"}))
>>> cache.load(key).symbols
{'f': 'f_1'}
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass, field

from ..disk_cache import DiskCache

__all__ = ["CacheEntry", "KernelCache", "cache_key"]

_MAGIC = b"RBKCACHE"
_FORMAT = 1
_HEADER = struct.Struct("<8sIQ32s")  # magic, format, payload length, sha256 digest
_META_LEN = struct.Struct("<I")


def _versions() -> str:
    from ... import __version__ as relaybench_version
    try:
        import llvmlite
        llvmlite_version = llvmlite.__version__
    except ImportError:  # the key is still well defined; compiling will say what is missing
        llvmlite_version = "none"
    return f"relaybench={relaybench_version};llvmlite={llvmlite_version};format={_FORMAT}"


def cache_key(kernel: str, target: str) -> str:
    """The hex sha256 naming a kernel's entry: the kernel's text or key, the target, versions."""
    digest = hashlib.sha256()
    for part in (kernel, target, _versions()):
        data = part.encode("utf-8")
        digest.update(struct.pack("<Q", len(data)))
        digest.update(data)
    return digest.hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    """What a cache entry holds: object code, optimized LLVM IR, function name -> symbol."""

    object_code: bytes
    llvm_ir: str
    symbols: dict[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        meta = json.dumps({"llvm_ir": self.llvm_ir, "symbols": self.symbols},
                          sort_keys=True).encode("utf-8")
        payload = _META_LEN.pack(len(meta)) + meta + self.object_code
        return _HEADER.pack(_MAGIC, _FORMAT, len(payload),
                            hashlib.sha256(payload).digest()) + payload

    @classmethod
    def decode(cls, data: bytes) -> CacheEntry:
        """Parse an entry's bytes; raises ``ValueError`` saying what is wrong with them."""
        if len(data) < _HEADER.size:
            raise ValueError(f"truncated header ({len(data)} of {_HEADER.size} bytes)")
        magic, fmt, length, digest = _HEADER.unpack_from(data)
        if magic != _MAGIC:
            raise ValueError("not a relaybench kernel cache entry (bad magic)")
        if fmt != _FORMAT:
            raise ValueError(f"cache format {fmt}, expected {_FORMAT}")
        payload = data[_HEADER.size:]
        if len(payload) != length:
            raise ValueError(f"payload of {len(payload)} bytes, header says {length}")
        if hashlib.sha256(payload).digest() != digest:
            raise ValueError("checksum mismatch")
        (meta_len,) = _META_LEN.unpack_from(payload)
        meta_end = _META_LEN.size + meta_len
        meta = json.loads(payload[_META_LEN.size:meta_end].decode("utf-8"))
        return cls(bytes(payload[meta_end:]), meta["llvm_ir"], dict(meta["symbols"]))


class KernelCache(DiskCache):
    """Entries on disk under ``directory/llvm`` (default: ``RB_CACHE_DIR``, read at each use).

    ``stats`` counts ``hits``, ``misses``, ``stores`` and ``damaged`` (entries found broken and
    removed); ``last_damage`` says what was wrong with the latest one.
    """

    subdir, suffix = "llvm", ".rbk"

    def load(self, key: str) -> CacheEntry | None:
        """The entry for ``key``, or None when absent or damaged (a damaged file is removed)."""
        data = self.read(key)
        if data is None:
            return None
        try:
            entry = CacheEntry.decode(data)
        except (ValueError, KeyError, UnicodeDecodeError, struct.error) as err:
            self.discard(key, str(err))
            return None
        self.stats["hits"] += 1
        return entry

    def store(self, key: str, entry: CacheEntry) -> None:
        """Write ``key``'s entry atomically (temporary file, then ``os.replace``)."""
        self.write(key, entry.encode())
