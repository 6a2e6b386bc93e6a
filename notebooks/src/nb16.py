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
# 16. Memory and compile time

Two questions every compiler user asks sooner or later: **where does the memory go** when a
model runs, and **where does the time go** when it is built? This notebook answers both for
ResNet-18, with two views of the workbench:

* `rb.viz.compile_time(mod, params)` builds a module with every pass timed and draws one bar
  per pass and per kernel compile, colored by where the kernel's machine code came from (LLVM,
  the disk cache, or this process's memory);
* `rb.viz.memory_plan(executable)` draws the memory plan of a compiled program, for the graph
  executor or for the Relay VM: each buffer's lifetime over the program's kernel calls, the
  storage it shares, and the bytes that sharing saves.

Hover any bar to see what it is; `rb.viz.save(view, "plan.svg")` (or `.png`, `.html`) writes a
view for a paper or a slide.
""")
code("""
import relaybench as rb
mod, params = rb.models.get("resnet18")
print(mod["main"].params[0].type_annotation)
""", check=True)
md("""
## Where a build's time goes

The build runs Relay's default pipeline, then lowers and compiles each distinct fused group
once. The kernel cache (`RB_CACHE_DIR`) keeps compiled kernels on disk, so the first build on
a machine pays for LLVM and later ones mostly read the cache: the red bars (LLVM compiled)
turn green (a cache hit).
""")
code("""
build_time = rb.viz.compile_time(mod, params)
build_time
""")
code("""
kernels = build_time.kernel_rows()
(len(build_time.pass_rows()), len(kernels), build_time.hits + build_time.misses == len(kernels),
 [r["name"] for r in build_time.pass_rows()][-1])
""", check=True)
md("""
Some kernels share their machine code. ResNet-18's Winograd layers come in pairs: the same
convolution once with a bias and a ReLU after it, once with the block's input added back as
well. Their first three phases (padding, the input transform, the products) are the same loop
nests over the same buffers, and most of the compile time; the build compiles such kernels into
one module, the common phases once (`share_phases` in the LLVM code generator), and each kernel's
row says which it shares with.
""")
code("""
shared = [r for r in kernels if "one module with" in r["detail"]]
(len(shared), build_time.module.compile_stats.llvm_shared,
 all("winograd" in r["name"] for r in shared))
""", check=True)
md("""
Built again in the same process, every kernel is found in memory: the build's time is now the
passes' alone. No group is even lowered: the **lowering cache** keeps, per fused group, what the
build needs from its lowering (the kernel's parameters, the key of its machine code, the rule
and the flops) in memory and under `RB_CACHE_DIR/groups`, so a new process that finds its kernels
cached skips lowering too (TVM's compile engine keeps lowered functions the same way, in memory).
The loop IR is lowered again only when something asks for it, and checked against the kernel's.
`RB_LOWERING_CACHE=off` lowers every group.
""")
code("""
again = rb.viz.compile_time(mod, params)
stats = again.module.compile_stats
(again.misses, again.hits == len(again.kernel_rows()),
 again.kernel_seconds < build_time.kernel_seconds or build_time.misses == 0,
 stats.lowerings_cached == stats.kernels)
""", check=True)
code("""
again
""")
md("""
## The build cache

What is left of a cached build is the passes, and most of their time goes into the weights:
FoldConstant lays each layer's weights out for its kernel, folds the batch norms' scales in,
and transforms the 3x3 weights for Winograd (four times their size). They depend only on the
program, its parameters and the settings, so `rb.build` keeps its optimized module in the
**build cache** (`RB_CACHE_DIR/builds`): the Relay text, and the constants as bytes that a later
build maps back from the file. The key holds the program's structure, a SHA-1 of every weight,
the opt level, the passes required and disabled, the pass configuration, the target and the
host CPU, and the compiler's sources, so any change to what the passes see builds afresh. A
build with pass instruments (as `rb.viz.compile_time` above) always runs the passes: they are
there to be watched. `RB_BUILD_CACHE=off` turns the cache off.
""")
code("""
import numpy as np
first = rb.build(mod, params=params)
second = rb.build(mod, params=params)
print(second.compile_stats)
""")
code("""
x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype("float32")
(second.compile_stats.optimize_cached, rb.ir.structural_equal(second.mod, first.mod),
 bool(np.array_equal(second.run(data=x), first.run(data=x))))
""", check=True)
md("""
## The graph executor's memory plan

The graph executor plans its memory once, when the module is loaded: every intermediate tensor
gets a storage, and a storage is handed to a later tensor as soon as every reader of its current
tensor has run. Each row below is one storage; each bar one tensor, from the kernel call that
writes it to the last call that reads it. Bars on one row never overlap: that is the plan's
rule, and the bytes it saves.
""")
code("""
graph_plan = rb.viz.memory_plan(build_time.module)
graph_plan
""")
code("""
print(graph_plan.summary())
""", check=True)
md("""
The live bytes at each step show the peak the plan must hold at once, which is what reuse
cannot go below:
""")
code("""
live = graph_plan.live_bytes()
peak = max(live)
(len(live), peak <= graph_plan.planned_bytes, f"peak {peak / 2**20:.1f} MiB at step {live.index(peak)}")
""", check=True)
md("""
## Views, and inputs read where they are

Some calls move no data: a `reshape`, a flatten, a `layout_transform` that only adds an axis of
one (AlterOpLayout turns those into `reshape`). The graph executor runs no kernel for such a
call: its result is its input's memory under another shape, a **view**, and the plan keeps that
memory alive until the view's last reader has run. The DQN has two: its input, which its first
layer reads in `NCHW1c` (that is NCHW itself), and the flatten before its dense layer. And
`run(data=frames)` does not copy `frames`: the compiled kernels are pointed at the caller's
array (a C-contiguous array of the input's dtype), so they read it where it is, on every core,
and a later `run()` without inputs reads it again as it is then (`set_input` copies).
""")
code("""
dqn, dqn_params = rb.models.get("dqn")
agent = rb.build(dqn, params=dqn_params)
views = agent.memory_plan().views
[n.name for n in agent.graph.nodes if n.outputs[0] in views]
""", check=True)
code("""
reference = rb.create_executor("interpreter", mod=dqn).evaluate()
frames = np.random.default_rng(1).random((1, 4, 84, 84), dtype=np.float32)
first = agent.run(data=frames)
frames *= 0.5          # read in place: run() without inputs sees the change
second = agent.run()
(bool(np.allclose(first, reference(frames * 2, **dqn_params), rtol=1e-4, atol=1e-5)),
 bool(np.allclose(second, reference(frames, **dqn_params), rtol=1e-4, atol=1e-5)),
 [r["group"] for r in agent.profile(number=3).groups if r["rule"] == "view"])
""", check=True)
md("""
## The Relay VM's plan

The VM plans its storage differently: its compiler turns every `alloc_storage` that can take
over a dead block of the same size into a `move` of that block's register. Blocks must match
in size exactly, so it shares less than the graph executor's best-fit plan; it also handles
control flow and dynamic shapes, which the graph executor does not.
""")
code("""
from relaybench.backends.vm import compile as vm_compile
exe = vm_compile(rb.passes.bind_params(mod, params), "llvm", opt_level=3)
vm_plan = rb.viz.memory_plan(exe)
vm_plan
""")
code("""
print(vm_plan.summary())
""", check=True)
code("""
rb.viz.Table([{"executor": p.executor, "buffers": len(p.buffers), "storages": len(p.storages),
               "planned MiB": round(p.planned_bytes / 2**20, 2),
               "without reuse MiB": round(p.unplanned_bytes / 2**20, 2),
               "saved": f"{p.saved_fraction:.0%}"} for p in (graph_plan, vm_plan)])
""", check=True)
md("""
## Saving a view

Every view of the workbench (a graph, a diff, these charts, a table) can be written as SVG, PNG
or HTML. The SVG keeps the tooltips, so a saved plan still says what each bar is on hover.
""")
code("""
import pathlib, tempfile
folder = pathlib.Path(tempfile.mkdtemp())
paths = [rb.viz.save(view, folder / name) for view, name in
         ((graph_plan, "graph_plan.svg"), (vm_plan, "vm_plan.png"), (build_time, "build_time.html"))]
[(pathlib.Path(p).name, pathlib.Path(p).stat().st_size > 1000) for p in paths]
""", check=True)
nb = nbf.v4.new_notebook(cells=cells)
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, str(pathlib.Path(__file__).resolve().parents[1] / "16_memory_and_compile_time.ipynb"))
