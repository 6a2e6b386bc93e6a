"""Files on disk keyed by a hash, shared by the code generators' caches (LLVM kernels, OpenCL
program binaries): one folder per kind under ``RB_CACHE_DIR`` (read at each use), atomic writes,
and damaged entries removed and counted rather than trusted.

A subclass names its folder and suffix and decodes what it reads:

>>> import tempfile
>>> class Notes(DiskCache):
...     subdir, suffix = "notes", ".txt"
>>> cache = Notes(tempfile.mkdtemp())
>>> cache.read("k") is None, cache.stats["misses"]
(True, 1)
>>> cache.write("k", b"hello"), cache.read("k"), cache.stats["stores"]
(True, b'hello', 1)
>>> cache.discard("k", "a test"); cache.read("k") is None, cache.stats["damaged"]
(True, 1)
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .. import config

__all__ = ["DiskCache", "sources_digest"]

_digests: dict = {}
_stamps: dict = {}   # a part of the package -> its files' "path:size:mtime" lines


def sources_digest(parts: tuple) -> str:
    """A digest of the package's sources under ``parts`` (folders and files relative to the
    package: their paths, sizes and modification times), once per process: what a cache key
    holds so that a changed compiler never reads an entry an older one wrote. Each part's files
    are read once per process, whichever digests share it."""
    found = _digests.get(parts)
    if found is None:
        import hashlib
        digest = hashlib.sha256()
        for part in parts:
            digest.update(_part_stamp(part))
        found = _digests[parts] = digest.hexdigest()
    return found


def _part_stamp(part: str) -> bytes:
    found = _stamps.get(part)
    if found is None:
        root = Path(__file__).resolve().parent.parent
        path = root / part
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        lines = []
        for f in files:
            try:
                st = f.stat()
            except OSError:
                continue
            lines.append(f"{f.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}\n")
        found = _stamps[part] = "".join(lines).encode()
    return found


class DiskCache:
    """Entries under ``directory/<subdir>`` (default ``directory``: ``RB_CACHE_DIR``).

    ``stats`` counts ``hits``, ``misses``, ``stores`` and ``damaged`` (entries found broken and
    removed); ``last_damage`` says what was wrong with the latest one, ``last_write_error`` why
    the latest entry that could not be written was not. Subclasses count a hit
    (``stats["hits"] += 1``) once they have decoded an entry, and call :meth:`discard` when it
    does not decode.
    """

    subdir = "entries"
    suffix = ".bin"

    def __init__(self, directory: str | os.PathLike | None = None):
        self._directory = Path(directory) if directory is not None else None
        self.stats = {"hits": 0, "misses": 0, "stores": 0, "damaged": 0}
        self.last_damage: str | None = None
        self.last_write_error: str | None = None

    @property
    def directory(self) -> Path:
        base = self._directory if self._directory is not None else config.get("RB_CACHE_DIR")
        return Path(base) / self.subdir

    def path(self, key: str) -> Path:
        """The file holding ``key``'s entry (it may not exist)."""
        return self.directory / f"{key}{self.suffix}"

    def read(self, key: str) -> bytes | None:
        """The bytes stored for ``key``, or None (a miss) when there are none."""
        try:
            return self.path(key).read_bytes()
        except OSError:     # none stored, or a folder that cannot be read (not a folder at all)
            self.stats["misses"] += 1
            return None

    def discard(self, key: str, problem: str) -> None:
        """Remove ``key``'s entry, recording why (a damaged file, a binary the driver refused)."""
        path = self.path(key)
        self.stats["damaged"] += 1
        self.stats["misses"] += 1
        self.last_damage = f"{path}: {problem}"
        try:
            path.unlink()
        except FileNotFoundError:  # another process removed or replaced it first
            pass

    def write(self, key: str, data) -> bool:
        """Write ``key``'s entry atomically (a temporary file, then ``os.replace``): ``data`` is
        bytes, or a list of buffers written one after the other (large arrays, not joined).
        False, with ``last_write_error`` saying why, when it cannot be written (a full disk, a
        folder not this user's): a cache that cannot keep an entry does not stop the build."""
        directory = self.directory
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=directory)
        except OSError as err:
            self.last_write_error = f"{directory}: {err}"
            return False
        try:
            with os.fdopen(fd, "wb") as out:
                for part in (data if isinstance(data, list) else [data]):
                    out.write(part)
            os.replace(tmp, self.path(key))
        except BaseException as err:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            if isinstance(err, OSError):
                self.last_write_error = f"{self.path(key)}: {err}"
                return False
            raise
        self.stats["stores"] += 1
        return True
