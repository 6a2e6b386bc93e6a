"""The tuning logs shipped with the package (``relaybench/autotune/logs``) and this host's CPU as
a record names it: what every build's cache keys read (:func:`shipped_logs`, for the
``RB_AUTOTUNE_LOG=shipped`` default), kept apart from the records and their spaces, which only a
build that lowers a kernel or reads a log's configs needs."""

from __future__ import annotations

import json
import platform
from pathlib import Path

__all__ = ["LOG_DIR", "host_cpu", "shipped_logs"]

#: the tuning logs shipped with the package (one per CPU model tuned on)
LOG_DIR = Path(__file__).resolve().parent / "logs"


_cpu: dict | None = None


def host_cpu() -> dict:
    """This machine's CPU: the model name the kernel reports, LLVM's CPU name and its features,
    and the core count. Two machines match when model, LLVM name and features agree."""
    global _cpu
    if _cpu is None:
        import os
        model = ""
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        if not model:   # (platform.processor runs `uname -p` in a new process on Linux)
            model = platform.processor() or ""
        from ..backends.llvm.jit import host_target
        host = host_target()
        _cpu = {"model": model, "llvm_cpu": host.cpu, "features": host.features,
                "cores": os.cpu_count() or 1}
    return dict(_cpu)


def shipped_logs() -> list:
    """The tuning logs shipped with the package that stand for this host, this CPU's first (by
    its LLVM name): those measured on a CPU with the same vector registers (AVX-512 or not). A
    register tile tuned for 32 registers spills on a host with 16, so a log of the other kind
    is not used (the strategies' defaults, which follow the host's features, apply instead)."""
    logs = sorted(LOG_DIR.glob("*.jsonl"))
    try:
        host = host_cpu()
    except Exception:   # no llvmlite: nothing is compiled, the order does not matter
        return logs
    wide = _has_avx512(host)
    logs = [p for p in logs if _log_avx512(p) in (None, wide)]
    return sorted(logs, key=lambda p: host["llvm_cpu"] not in p.name)


def _has_avx512(cpu: dict) -> bool:
    return "+avx512f" in str(cpu.get("features", "")).split(",")


_LOG_KIND: dict = {}   # (path, size, modification time) -> _log_avx512's answer


def _log_avx512(path: Path):
    """Whether the first record of a log was measured with AVX-512 (None: no record); read
    again only when the file changes (every build's cache keys ask)."""
    try:
        st = path.stat()
    except OSError:
        return None
    stamp = (str(path), st.st_size, st.st_mtime_ns)
    if stamp not in _LOG_KIND:
        _LOG_KIND[stamp] = _read_log_avx512(path)
    return _LOG_KIND[stamp]


def _read_log_avx512(path: Path):
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    return _has_avx512(json.loads(line).get("cpu") or {})
    except (OSError, ValueError):
        return None
    return None
