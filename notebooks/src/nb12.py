"""The source of a tutorial notebook: run notebooks/src/build.py to write and execute it."""

import pathlib

import nbformat as nbf
cells = []
def md(s): cells.append(nbf.v4.new_markdown_cell(s.strip()))
def code(s, check=False):
    s = s.strip()
    if check:
        s = "# NBVAL_CHECK_OUTPUT\n" + s
    cells.append(nbf.v4.new_code_cell(s))

md("""
# 12. The Relay virtual machine

The graph executor runs static dataflow: one fixed list of kernels over buffers planned ahead.
What makes Relay Relay is outside that: recursion over algebraic data types (a tree, a list),
closures, references, and tensors whose shapes are known only at run time. The reference
interpreter runs all of it, op by op through numpy. The **VM** compiles it: Relay's
optimizations, FuseOps, A-normal form, lambda lifting, every fused group lowered to the same
kernels the graph executor uses, allocation made explicit, and then a register-based bytecode
with Relay's instruction set.

This notebook compiles the TreeLSTM of the paper, reads its bytecode, steps through a run, then
runs an LSTM over sequences whose length is a *symbolic* dimension, compiled once for every
length, and saves the executable to a file.
""")
code("""
import time
import numpy as np
import relaybench as rb
from relaybench.models import make_tree
""")
md("""
## TreeLSTM to bytecode

`rb.models.get("tree_lstm")` is the zoo's Child-Sum TreeLSTM: a recursive Relay function over the
prelude's `Tree` (a `Rose` node holds a tensor and a `List` of children), calling `map` with a
closure over the children. The graph executor refuses it; the VM compiles it.
""")
code("""
mod, params = rb.models.get("tree_lstm", input_size=8, hidden_size=16)
try:
    rb.build(mod, target="llvm", params=params)
except rb.errors.CompileError as err:
    print("graph executor:", str(err).splitlines()[0][:110])
exe = rb.vm.compile(mod, target="llvm", params=params, opt_level=3)
print(exe)
""")
md("""
Each Relay function (the prelude's, the model's and the closures lambda lifting made) is a VM
function: its parameters are its first registers, and each instruction reads and writes
registers. `get_tag` / `if` / `get_field` are the `match` on the tree; `alloc_closure` is the
closure passed to `map`; `invoke_packed` calls a fused kernel, on tensors `alloc_storage` and
`alloc_tensor` made for it.
""")
code("""
index = exe.global_map["tree_lstm"]
print(exe.functions[index].text(index))
""", check=True)
md("""
## A run, step by step

`vm.trace(name, *args, limit=N)` runs the function as `invoke` does and records its first `N`
instructions: the call depth, the VM function, the program counter, the instruction and the
value it wrote. The tree here is a root with two children, one of them with two leaves of its
own.
""")
code("""
rng = np.random.default_rng(0)
def x():
    return rng.standard_normal((1, 8)).astype("float32")
tree = make_tree(x(), [make_tree(x()), make_tree(x(), [make_tree(x()), make_tree(x())])])
vm = rb.vm.VirtualMachine(exe)
trace = vm.trace("main", tree, limit=30)
trace
""")
md("""
The same result as the reference interpreter, and how the instructions executed grow with the
tree: every node costs the same bytecode, so the count is linear in the number of nodes.
""")
code("""
h, c = trace.result
ref_h, ref_c = rb.create_executor("interpreter", mod=mod).evaluate()(tree, **params)
print("max |h - interpreter|:", float(np.abs(h - ref_h).max()))

def chain(depth):
    node = make_tree(x())
    for _ in range(depth):
        node = make_tree(x(), [node])
    return node
rows = []
for depth in (1, 2, 4, 8, 16):
    t = vm.trace("main", chain(depth), limit=0)
    rows.append({"nodes": depth + 1, "instructions": t.executed})
rb.viz.Table(rows)
""")
md("""
And the time, VM against the interpreter, on a full binary tree of 31 nodes. The interpreter runs
each operator through numpy; the VM runs fused kernels, but dispatches each of its instructions
from a Python loop, which on cells this small costs about what the interpreter's numpy calls
cost. The VM is the correctness path (every program, compiled kernels, dynamic shapes);
ahead-of-time compilation (notebook 13) removes the Python between kernels and is the speed path.
""")
code("""
def full(depth):
    return make_tree(x(), [] if depth == 0 else [full(depth - 1), full(depth - 1)])
big = full(4)
interp = rb.create_executor("interpreter", mod=mod).evaluate()
def best(f, n):
    times = []
    for _ in range(n):
        t0 = time.perf_counter(); f(); times.append(time.perf_counter() - t0)
    return min(times) * 1e3
vm_ms = best(lambda: vm.run(big), 5)
int_ms = best(lambda: interp(big, **params), 2)
np.testing.assert_allclose(vm.run(big)[0], interp(big, **params)[0], rtol=1e-4, atol=1e-5)
print(f"31 nodes: VM {vm_ms:.1f} ms, interpreter {int_ms:.1f} ms")
""")
md("""
## Dynamic shapes: one compile, every length

An LSTM over a sequence `%xs: Tensor[(n, 1, 128), float32]`, where `n` is a symbolic dimension:
`@loop` recurs over the time steps, `take` picks step `%t`. Shapes that depend on `n` are
computed at run time by *shape functions* (every operator has one: `rb.op.get_op_attr(name,
"FShapeFunc")`), and the kernels that touch `n`-sized tensors are compiled once with `n` as an
argument.
""")
code('''
LSTM = """#[version = "0.0.5"]
def @step(%xt: Tensor[(1, 128), float32], %h: Tensor[(1, 128), float32],
          %c: Tensor[(1, 128), float32], %wi: Tensor[(512, 128), float32],
          %wh: Tensor[(512, 128), float32], %b: Tensor[(512), float32]) {
  %0 = add(add(nn.dense(%xt, %wi), nn.dense(%h, %wh)), %b);
  %1 = split(%0, indices_or_sections=4, axis=1);
  %2 = add(multiply(sigmoid(%1.1), %c), multiply(sigmoid(%1.0), tanh(%1.2)));
  (multiply(sigmoid(%1.3), tanh(%2)), %2)
}
def @loop(%t: int32, %len: int32, %xs: Tensor[(n, 1, 128), float32],
          %h: Tensor[(1, 128), float32], %c: Tensor[(1, 128), float32],
          %wi: Tensor[(512, 128), float32], %wh: Tensor[(512, 128), float32],
          %b: Tensor[(512), float32]) -> Tensor[(1, 128), float32] {
  if (less(%t, %len)) {
    let %s = @step(take(%xs, %t, axis=0), %h, %c, %wi, %wh, %b);
    @loop(add(%t, 1), %len, %xs, %s.0, %s.1, %wi, %wh, %b)
  } else {
    %h
  }
}
def @main(%xs: Tensor[(n, 1, 128), float32], %wi: Tensor[(512, 128), float32],
          %wh: Tensor[(512, 128), float32], %b: Tensor[(512), float32]) -> Tensor[(1, 128), float32] {
  let %len = take(shape_of(%xs, dtype="int32"), 0);
  let %z = zeros(shape=[1, 128], dtype="float32");
  @loop(0, %len, %xs, %z, %z, %wi, %wh, %b)
}"""
lstm = rb.parse(LSTM)
lstm_exe = rb.vm.compile(lstm, opt_level=3)
from relaybench.backends.vm.dynamic import DynamicKernel
dynamic = [i for i, k in enumerate(lstm_exe.kernels) if isinstance(k, DynamicKernel)]
print("kernels:", len(lstm_exe.kernels), "of which symbolic in n:", [lstm_exe.kernels[i].name for i in dynamic])
print(lstm_exe.source("loops", dynamic[0]))
''', check=True)
md("""
The `take` kernel reads `n` from its arguments (the index is clamped with `n - 1`). Every length
from 1 to 500 now runs without compiling anything: the JIT's counters do not move. Each result
is checked against the same LSTM written in numpy.
""")
code("""
from relaybench.backends.build import _jit_stats
def lstm_numpy(xs, wi, wh, b):
    sig = lambda v: 1 / (1 + np.exp(-v))
    h = c = np.zeros((1, 128), "float32")
    for xt in xs:
        i, f, g, o = np.split(xt @ wi.T + h @ wh.T + b, 4, axis=1)
        c = sig(f) * c + sig(i) * np.tanh(g)
        h = sig(o) * np.tanh(c)
    return h
wi, wh = (rng.normal(0, 0.1, (512, 128)).astype("float32") for _ in range(2))
b = rng.normal(0, 0.1, 512).astype("float32")
lvm = rb.vm.VirtualMachine(lstm_exe)
before = _jit_stats()
worst = 0.0
for n in (1, 2, 3, 10, 50, 200, 500):
    xs = rng.normal(0, 1, (n, 1, 128)).astype("float32")
    worst = max(worst, float(np.abs(lvm.run(xs, wi, wh, b) - lstm_numpy(xs, wi, wh, b)).max()))
after = _jit_stats()
print("kernels compiled or loaded while the lengths ran:",
      sum(after[k] - before[k] for k in ("compiled", "from_disk", "from_memory")))
print("agrees with numpy:", worst < 1e-4)
""", check=True)
md("""
## Saving an executable

`exe.save(path)` writes the bytecode, the constants and the compiled kernels into one file;
`rb.vm.Executable.load(path)` reads it back in another process without compiling anything. A
damaged or foreign file is refused with the reason.
""")
code("""
import os, tempfile
path = os.path.join(tempfile.mkdtemp(), "tree_lstm.rbvm")
exe.save(path)
loaded = rb.vm.Executable.load(path)
print("same result after loading:", np.array_equal(rb.vm.VirtualMachine(loaded).run(tree)[0], h))
with open(path, "r+b") as f:
    f.seek(200); f.write(b"garbage")
try:
    rb.vm.Executable.load(path)
except Exception as err:
    print(type(err).__name__ + ":", str(err)[:100])
""")
nb = nbf.v4.new_notebook(cells=cells)
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, str(pathlib.Path(__file__).resolve().parents[1] / "12_vm.ipynb"))
