"""An :class:`~.vm.Executable` in one file: ``exe.save(path)`` and ``Executable.load(path)``.

Relay's ``Executable::Save`` writes the bytecode, the constant pool and the primitive functions'
names, and leaves the compiled library to a second file. Here everything is in one file, and the
kernels travel as what the kernel cache holds: each fused group's Relay text (so its loop IR can
be rebuilt) and the object code of its compiled module (the LLVM cache entry), which ``load``
puts back into the kernel cache (``RB_CACHE_DIR``) before rebuilding the kernels, so LLVM does
not run again on the same machine kind. A target whose code the cache does not hold (OpenCL,
the accelerator, a host kernel) is rebuilt from the groups' text.

The file::

    b"RBVMEXE\\0" | format version (u32) | payload length (u64) | sha256 of the payload (32 bytes)
    payload = header length (u32) | header (JSON, utf-8) | blobs

The JSON header holds the target, the compiled Relay module as text (the functions' sources and
the ADT definitions), the fused groups as a second module's text (``@packed_<i>``, one per
``PackedFunc[i]``, with its kind: a compiled kernel, a shape function, or a kernel for types that
are not static), every VM function's instructions (each a class name and its fields; a
constructor by its ADT's name and tag) and, for each blob, what it is (a constant as ``.npy``
bytes, without pickles; a kernel cache entry with its key) with its offset and length.

A file that is not one (another format, a truncated or damaged one, a newer format version)
raises :class:`ExecutableFormatError` saying what is wrong, before anything is built from it.

>>> import os, tempfile, numpy as np, relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(3), float32]) { add(%x, 1f) }''')
>>> path = os.path.join(tempfile.mkdtemp(), "add.rbvm")
>>> rb.vm.compile(mod).save(path)
>>> exe = rb.vm.Executable.load(path)
>>> rb.vm.VirtualMachine(exe).run(np.zeros(3, "float32"))
array([1., 1., 1.], dtype=float32)
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import struct

import numpy as np

from ...errors import RelayError
from . import bytecode as bc

__all__ = ["save_executable", "load_executable", "ExecutableFormatError", "FORMAT_VERSION"]

MAGIC = b"RBVMEXE\0"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sIQ32s")       # magic, format version, payload length, sha256
_JSON_LEN = struct.Struct("<I")

#: the instruction classes by name, for reading them back
_INSTRUCTIONS = {name: getattr(bc, name) for name in bc.__all__
                 if isinstance(getattr(bc, name), type) and issubclass(getattr(bc, name),
                                                                       bc.Instruction)
                 and getattr(bc, name) is not bc.Instruction}


class ExecutableFormatError(RelayError, ValueError):
    """A file that is not a saved executable this version can read, and why."""


# ---- writing -------------------------------------------------------------------------------------

def _instruction_record(ins) -> list:
    fields = {}
    for f in dataclasses.fields(ins):
        value = getattr(ins, f.name)
        if f.name == "constructor" and value is not None:
            value = {"adt": value.belong_to.name_hint, "tag": value.tag}
        elif f.name == "span":
            value = None if value is None else str(value)
        elif isinstance(value, tuple):
            value = list(value)
        fields[f.name] = value
    return [type(ins).__name__, fields]


def _npy(array) -> bytes:
    out = io.BytesIO()
    np.save(out, np.asarray(array), allow_pickle=False)
    return out.getvalue()


def _cache_entries(kernels) -> dict:
    """The LLVM kernel cache entries (key -> the entry's bytes, as the cache stores them) of
    every compiled module among ``kernels`` (a dynamic kernel's symbolic or per-shape ones
    included), read from the kernel cache."""
    modules, stack = {}, list(kernels)
    while stack:
        k = stack.pop()
        for inner in (getattr(k, "symbolic", None), *getattr(k, "specialized", {}).values()):
            if inner is not None:
                stack.append(inner)
        module = getattr(getattr(k, "compiled", None), "compiled_module", None)
        key = getattr(module, "key", None)
        if key is not None:
            modules[key] = module
    if not modules:
        return {}
    from ..llvm.jit import get_jit
    cache = get_jit().cache
    out = {}
    for key, module in modules.items():
        data = cache.read(key)
        if data is None:   # not on disk (another cache directory, or none): the loaded entry
            entry = getattr(module, "_entry", None)
            data = entry.encode() if entry is not None else None
        if data is not None:
            out[key] = data
    return out


def save_executable(exe, path) -> None:
    """Write ``exe`` to ``path`` (atomically: a temporary file, then a rename)."""
    from ...ir.expr import Constructor, GlobalVar
    from ...ir.module import IRModule
    from .compiler import packed_kinds_of

    blobs: list = []
    records: list = []

    def add_blob(kind: str, data: bytes, **extra) -> None:
        records.append(dict(kind=kind, offset=sum(len(b) for b in blobs), length=len(data),
                            **extra))
        blobs.append(data)

    for c in exe.constants:
        add_blob("constant", _npy(c))
    for key, data in sorted(_cache_entries(exe.kernels).items()):
        add_blob("kernel_cache_entry", data, key=key)

    kinds = packed_kinds_of(exe)
    packed = IRModule({GlobalVar(f"packed_{i}"): k.function for i, k in enumerate(exe.kernels)})
    functions = []
    for f in exe.functions:
        if isinstance(f.source, Constructor):
            source = {"constructor": {"adt": f.source.belong_to.name_hint, "tag": f.source.tag}}
        elif f.source is not None and f.name in exe.global_map:
            source = {"global": f.name}
        else:
            source = None
        functions.append({"name": f.name, "params": list(f.params),
                          "num_registers": f.num_registers, "closure_arity": f.closure_arity,
                          "source": source,
                          "instructions": [_instruction_record(i) for i in f.instructions]})
    header = {"target": str(exe.target), "module": exe.module.astext(),
              "packed": packed.astext(), "packed_kinds": kinds,
              "packed_names": [k.name for k in exe.kernels],
              "global_map": dict(exe.global_map), "functions": functions, "blobs": records}
    head = json.dumps(header).encode("utf-8")
    payload = _JSON_LEN.pack(len(head)) + head + b"".join(blobs)
    data = _HEADER.pack(MAGIC, FORMAT_VERSION, len(payload),
                        hashlib.sha256(payload).digest()) + payload
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as out:
        out.write(data)
    os.replace(tmp, path)


# ---- reading -------------------------------------------------------------------------------------

def _payload(data: bytes, where: str) -> bytes:
    if len(data) < _HEADER.size:
        raise ExecutableFormatError(f"{where}: not a saved VM executable (a file of "
                                    f"{len(data)} bytes, shorter than the header)")
    magic, version, length, digest = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ExecutableFormatError(f"{where}: not a saved VM executable (it starts with "
                                    f"{bytes(data[:8])!r}, not {MAGIC!r})")
    if version != FORMAT_VERSION:
        raise ExecutableFormatError(f"{where}: format version {version}; this relaybench reads "
                                    f"version {FORMAT_VERSION}")
    payload = data[_HEADER.size:]
    if len(payload) != length:
        raise ExecutableFormatError(f"{where}: truncated or extended: {len(payload)} bytes "
                                    f"after the header, the header says {length}")
    if hashlib.sha256(payload).digest() != digest:
        raise ExecutableFormatError(f"{where}: damaged: the checksum does not match")
    return payload


def _header(payload: bytes, where: str) -> tuple:
    try:
        (n,) = _JSON_LEN.unpack_from(payload)
        header = json.loads(payload[_JSON_LEN.size:_JSON_LEN.size + n].decode("utf-8"))
        blobs = payload[_JSON_LEN.size + n:]
        for key in ("target", "module", "packed", "packed_kinds", "global_map", "functions",
                    "blobs"):
            header[key]
    except (struct.error, UnicodeDecodeError, ValueError, KeyError, TypeError) as err:
        raise ExecutableFormatError(f"{where}: damaged header ({type(err).__name__}: {err})") \
            from None
    return header, blobs


def _blob(blobs: bytes, record: dict, where: str) -> bytes:
    start, length = int(record["offset"]), int(record["length"])
    if start < 0 or length < 0 or start + length > len(blobs):
        raise ExecutableFormatError(f"{where}: a {record.get('kind')} blob lies outside the file")
    return blobs[start:start + length]


def _instruction(record, module, where: str):
    name, fields = record
    cls = _INSTRUCTIONS.get(name)
    if cls is None:
        raise ExecutableFormatError(f"{where}: unknown instruction {name!r}")
    values = {}
    for f in dataclasses.fields(cls):
        if f.name not in fields:
            if f.default is dataclasses.MISSING:
                raise ExecutableFormatError(f"{where}: instruction {name} lacks {f.name}")
            continue
        value = fields[f.name]
        if f.name == "constructor" and value is not None:
            value = module.lookup_tag(int(value["tag"]), value["adt"])
        elif isinstance(value, list):
            value = tuple(value)
        values[f.name] = value
    return cls(**values)


def load_executable(path):
    """The :class:`~.vm.Executable` saved in ``path``; its kernels rebuilt for its target (from
    the kernel cache entries it carries where they apply)."""
    from ...ir.parser import parse
    from ...ir.type_infer import infer_module
    from ..build import CompileStats
    from ..target import Target
    from .compiler import _packed_entry
    from .vm import Executable

    where = f"loading {os.fspath(path)}"
    with open(path, "rb") as f:
        data = f.read()
    header, blobs = _header(_payload(data, where), where)
    try:
        target = Target.parse(header["target"])
        module = infer_module(parse(header["module"]))
        packed_module = infer_module(parse(header["packed"])) if header["packed_kinds"] else None
        constants, entries = [], {}
        for record in header["blobs"]:
            raw = _blob(blobs, record, where)
            if record["kind"] == "constant":
                constants.append(np.load(io.BytesIO(raw), allow_pickle=False))
            elif record["kind"] == "kernel_cache_entry":
                entries[record["key"]] = raw
        functions = []
        for f in header["functions"]:
            code = [_instruction(r, module, f"{where}: function {f['name']}")
                    for r in f["instructions"]]
            source = f.get("source")
            if source is None:
                src = None
            elif "constructor" in source:
                src = module.lookup_tag(int(source["constructor"]["tag"]),
                                        source["constructor"]["adt"])
            else:
                src = module[source["global"]]
            functions.append(bc.VMFunction(f["name"], list(f["params"]), int(f["num_registers"]),
                                           code, source=src,
                                           closure_arity=int(f["closure_arity"])))
    except ExecutableFormatError:
        raise
    except (RelayError, KeyError, ValueError, TypeError, IndexError) as err:
        raise ExecutableFormatError(f"{where}: damaged contents ({type(err).__name__}: "
                                    f"{err})") from None
    _restore_cache_entries(entries)
    kinds = header["packed_kinds"]
    groups = [packed_module[f"packed_{i}"] for i in range(len(kinds))]
    stats = CompileStats()
    from ..build import _link_kernels, compile_groups
    static = [g for g, kind in zip(groups, kinds) if kind == "kernel"]
    compiled = compile_groups(static, target, stats)
    _link_kernels(compiled, target, stats)
    kernels = [_packed_entry(g, kind, compiled, target, stats) for g, kind in zip(groups, kinds)]
    return Executable(functions, dict(header["global_map"]), constants, kernels, target, module,
                      stats)


def _restore_cache_entries(entries: dict) -> None:
    """Put the saved kernel cache entries into the kernel cache where it lacks them; an entry
    that does not decode is left out (its kernel is compiled again)."""
    if not entries:
        return
    try:
        from ..llvm.cache import CacheEntry
        from ..llvm.jit import get_jit
        cache = get_jit().cache
    except ImportError:
        return
    for key, raw in entries.items():
        try:
            entry = CacheEntry.decode(raw)
        except (ValueError, KeyError, UnicodeDecodeError, struct.error):
            continue
        if cache.read(key) is None:
            try:
                cache.store(key, entry)
            except OSError:
                return
