"""``exe.save(path)`` / ``rb.vm.Executable.load(path)``: one file with bytecode, constants and
kernels; a damaged or foreign file is refused with a clear error."""

import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import relaybench as rb
from relaybench.backends.vm.serialize import ExecutableFormatError

HEADER = '#[version = "0.0.5"]\n'

# closures, an ADT of the prelude, recursion, a constant and a dynamic shape in one module
PROGRAM = HEADER + """
type List[A] {
  Cons(A, List[A]),
  Nil,
}
def @sum_list(%l: List[Tensor[(2), float32]], %acc: Tensor[(2), float32]) -> Tensor[(2), float32] {
  match (%l) {
    Cons(%h, %t) => @sum_list(%t, add(%acc, %h)),
    Nil => %acc,
  }
}
def @main(%x: Tensor[(2), float32], %y: Tensor[(?, 2), float32]) {
  let %f = fn (%v: Tensor[(2), float32]) { multiply(%v, %x) };
  let %l = Cons(%f(%x), Cons(add(%x, 1f), Nil));
  (@sum_list(%l, zeros(shape=[2], dtype="float32")), nn.relu(concatenate((%y, %y))))
}
"""


def _module():
    return rb.parse(PROGRAM)


def _inputs():
    return np.array([1.5, -2.0], "float32"), np.arange(6, dtype="float32").reshape(3, 2) - 2


def _expected(x, y):
    return x * x + (x + 1), np.maximum(np.concatenate([y, y]), 0)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("vm") / "program.rbvm"
    exe = rb.vm.compile(_module(), opt_level=3)
    rb.vm.VirtualMachine(exe).run(*_inputs())   # a kernel compiled at run time travels too
    exe.save(path)
    return exe, path


def _check(out, x, y):
    want = _expected(x, y)
    for g, w in zip(out, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_a_saved_executable_loads_and_runs(saved):
    exe, path = saved
    loaded = rb.vm.Executable.load(path)
    assert str(loaded.bytecode) == str(exe.bytecode)
    assert len(loaded.constants) == len(exe.constants)
    x, y = _inputs()
    _check(rb.vm.VirtualMachine(loaded).run(x, y), x, y)
    _check(rb.vm.VirtualMachine(exe).run(x, y), x, y)


def test_the_kernels_travel_in_the_file(saved, tmp_path):
    # a fresh process with an empty kernel cache loads the file: LLVM compiles nothing, the
    # kernels come from the cache entries the file carries
    _, path = saved
    script = textwrap.dedent(f"""
        import numpy as np, relaybench as rb
        from relaybench.backends.build import _jit_stats
        exe = rb.vm.Executable.load({str(path)!r})
        x = np.array([1.5, -2.0], "float32")
        y = np.arange(6, dtype="float32").reshape(3, 2) - 2
        out = rb.vm.VirtualMachine(exe).run(x, y)
        stats = _jit_stats()
        print(stats.get("compiled", 0), stats.get("from_disk", 0), out[0].tolist())
    """)
    env = dict(os.environ, RB_CACHE_DIR=str(tmp_path / "empty_cache"))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    compiled, from_disk, first = done.stdout.split(maxsplit=2)
    assert int(compiled) == 0 and int(from_disk) > 0
    x, y = _inputs()
    assert eval(first) == _expected(x, y)[0].tolist()


def _damaged(saved, tmp_path, change):
    data = bytearray(saved[1].read_bytes())
    path = tmp_path / "damaged.rbvm"
    path.write_bytes(bytes(change(data)))
    return path


def test_a_truncated_file_is_refused(saved, tmp_path):
    for keep in (0, 10, 60, len(saved[1].read_bytes()) - 1):
        path = _damaged(saved, tmp_path, lambda d: d[:keep])
        with pytest.raises(ExecutableFormatError, match="damaged.rbvm: (not a saved VM "
                                                        "executable|truncated)"):
            rb.vm.Executable.load(path)


def test_flipped_bytes_are_refused(saved, tmp_path):
    size = len(saved[1].read_bytes())
    for position in (100, size // 2, size - 1):
        def flip(d, p=position):
            d[p] ^= 0x40
            return d
        with pytest.raises(ExecutableFormatError, match="damaged: the checksum does not match"):
            rb.vm.Executable.load(_damaged(saved, tmp_path, flip))


def test_a_file_of_another_format_is_refused(saved, tmp_path):
    other = tmp_path / "weights.npy"
    np.save(other, np.zeros(100))
    with pytest.raises(ExecutableFormatError, match="not a saved VM executable"):
        rb.vm.Executable.load(other)

    def newer(d):
        d[8:12] = struct.pack("<I", 99)
        return d
    with pytest.raises(ExecutableFormatError, match="format version 99"):
        rb.vm.Executable.load(_damaged(saved, tmp_path, newer))


def test_a_consistent_file_with_damaged_contents_is_refused(saved, tmp_path):
    # the checksum is right but the header is not JSON: the error says the contents are damaged
    import hashlib
    payload = struct.pack("<I", 5) + b"{oops"
    head = struct.pack("<8sIQ32s", b"RBVMEXE\0", 1, len(payload), hashlib.sha256(payload).digest())
    path = tmp_path / "bad_header.rbvm"
    path.write_bytes(head + payload)
    with pytest.raises(ExecutableFormatError, match="damaged header"):
        rb.vm.Executable.load(path)
