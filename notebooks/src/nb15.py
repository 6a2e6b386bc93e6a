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
# 15. Schedule search

The x86 strategy schedules every convolution with the same hand-picked rule: a register tile of
up to 14 output columns, two channel blocks when rows are narrow, the input-channel blocks as the
outermost reduce loop, threads over (channel block, row) pairs. Those choices are right for some
layers and wrong for others, and which is which depends on the CPU. Relay's answer was
**AutoTVM**: each schedule rule declares its decisions as *knobs*, a *workload* (op, shapes,
dtypes, layout) plus one value per knob is one kernel, and a search measures kernels on the
machine, learns a cost model from the measurements, and proposes the next ones with simulated
annealing on that model.

Here the whole loop is `rb.autotune`: `extract_tasks`, `tune`, and `apply_history_best`.
By default the 3x3 stride-1 convolutions of 64 channels or more are Winograd convolutions
(`RB_WINOGRAD=auto`), whose schedule has no knobs yet; this notebook turns Winograd off to
search the direct kernel's space on every convolution.
""")
code("""
import os
os.environ["RB_WINOGRAD"] = "off"     # the direct convolution everywhere (see above)
import numpy as np
import matplotlib.pyplot as plt
import relaybench as rb
from relaybench import autotune
""")
md("""
## The workloads of ResNet-18

`extract_tasks` runs the same passes as `rb.build` (AlterOpLayout puts the convolutions in the
blocked `NCHW16c` layout) and collects each distinct tunable anchor: eleven convolution shapes and
the final dense layer. Layers of the same shape share one workload (`used by`).
""")
code("""
mod, params = rb.models.resnet18()
tasks = autotune.extract_tasks(mod, params=params)
for k, task in enumerate(tasks):
    print(k, task.workload, f"- used by {len(task.groups)}")
""", check=True)
md("""
The size of each search space depends on the host: without AVX-512 the convolutions have one
knob more (`vector`, below). A convolution of an image of several rows also has `plane`: compute
it over the image's pixels as one axis, so that a register tile of consecutive pixels crosses the
rows.
""")
code("""
print([len(task.space) for task in tasks])
""")
md("""
## The search space of one layer

The last stage's 3x3 convolution (7 x 7 outputs, 512 channels in 32 blocks of 16). Its knobs:
""")
code("""
task = tasks[10]
print(task.workload)
""", check=True)
code("""
print(task.space.table())
""")
md("""
The rule's own choice (the default, which is what an untuned build compiles) follows the host's
vector registers: with AVX-512 (32 registers) it tiles 7 columns by 2 channel blocks; without
(16 registers, a vector of 16 floats taking two) 12 accumulators are what fits, 6 pixels of a
block of 16, but 7 columns have no divisor near 6: the image is computed over its 49 pixels as
one axis (`plane`), in tiles of 6 pixels that cross the rows, the last tile of one pixel.
""")
code("""
from relaybench.backends.strategy.x86 import narrow_host
print("this host has", 16 if narrow_host() else 32, "vector registers; default:", task.space.default())
""")
md("""
A config changes the loop nest the kernel is made of: the default, and another config, 7 columns
by 4 blocks of 16 lanes with the window loops outside the channel blocks:
""")
code("""
from relaybench.backends.lowering import lower_primitive

func = autotune.task_function(task.workload)
other = dict(task.space.default(), tile_ow=7, tile_oc=4, reduce_order="window_first", vector=16)
nests = []
for config in (task.space.default(), other):
    with autotune.ApplyConfig({task.workload.key: config}):
        loops = lower_primitive(func, "llvm").source()
    nests.append(loops)
    print(config)
    print("\\n".join(line for line in loops.splitlines() if " in " in line)[:900])
    print()
""")
code("""
nests[0] != nests[1], "vectorized(16)" in nests[1]
""", check=True)
md("""
## Tuning it live

A small budget: 8 candidates in two rounds of 4. The first round measures the default and random
configs; the second fits the cost model (gradient-boosted trees on the configs' features) to those
measurements and anneals on its predictions. Each candidate is compiled and timed in a child
process, so a candidate that crashes or hangs is a failed record, not a failed search. Every
measurement is appended to the log as it is made.
""")
code("""
import tempfile, pathlib
log = pathlib.Path(tempfile.mkdtemp()) / "one_layer.jsonl"
runner = autotune.LocalRunner(timeout=20)
with runner:
    result = autotune.tune(mod, trials=8, batch=4, tasks=[task], runner=runner, log=log)
result.table()
""")
code("""
history = result.history(task)
print("measured:", len(history), "candidates; logged:", len(log.read_text().splitlines()), "lines")
print("the default was measured:", result.default(task) is not None)
print("best at least as fast as the default:", result.best(task).cost <= result.default(task).cost)
""", check=True)
md("""
## Convergence

The best rate so far against the trial. With a larger budget (the shipped log below was tuned with
up to 24 candidates per workload, then the default and the best two measured again side by side)
the curve flattens once the model has found the good corner of the space.
""")
code("""
ax = result.plot()
ax.set_title("one ResNet-18 layer, tuned live")
plt.show()
""")
md("""
## Tuned against untuned

Logs of the tuning of ResNet-18, MobileNet V2 and the DQN ship with the package
(`relaybench/autotune/logs`), so nothing is tuned again here. They were measured on one thread:
the machine is shared, and a two-thread kernel whose second core is taken by other work waits for
it on every call, which favours configs with less parallelism; a config still applies to builds
with any number of threads, and the spaces leave out configs whose parallel loop has a single
iteration. `apply_history_best` makes `build` use the fastest measured config of every workload
the log knows, and the default elsewhere; the kernel cache is keyed by the loop IR, so tuned and
untuned kernels are cached side by side. A shipped log stands only for hosts with the vector
registers of the CPU it was measured on: `x86_znver4.jsonl` for AVX-512 (32 registers),
`x86_znver3.jsonl` for AVX2 (16 registers). Builds use the shipped log of their host by default
(`RB_AUTOTUNE_LOG=shipped`); the untuned build below sets the knob empty. (Without AVX-512,
the images of several rows are computed over their pixels by default, `plane` above: faster in
the networks than the configs the tuner had found on the layers alone, whose records were taken
out of `x86_znver3.jsonl`, so fewer of these workloads have a tuned config there.)
""")
code("""
logs = autotune.shipped_logs()
print([p.name for p in logs])
data = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype("float32")
with rb.config.Context(RB_AUTOTUNE_LOG=""):   # the strategies' own configs
    untuned = rb.build(mod, target="llvm", params=params)
with autotune.apply_history_best(logs) as best:
    tuned = rb.build(mod, target="llvm", params=params)
print("workloads with a tuned config:", len(best.used), "of", len(tasks))
""")
code("""
same = np.allclose(untuned.run(data=data), tuned.run(data=data), rtol=1e-4, atol=1e-4)
print("tuned and untuned agree:", same)
""", check=True)
code("""
times = {name: lib.benchmark(number=3, repeat=3, data=data).median_ms
         for name, lib in (("untuned", untuned), ("tuned", tuned))}
print({k: f"{v:.1f} ms" for k, v in times.items()})
""")
md("""
Layer by layer: the profile of each build, the convolutions' rates side by side.
""")
code("""
def conv_rates(lib):
    return {row["group"]: row["GFLOP/s"] for row in lib.profile(number=3, data=data).groups
            if row["GFLOP/s"] != "" and "conv" in row["group"]}
before, after = conv_rates(untuned), conv_rates(tuned)
from relaybench.viz import Table
Table([{"group": g, "untuned GFLOP/s": before[g], "tuned GFLOP/s": after.get(g, "")}
       for g in before])
""")
md("""
The machine these notebooks run on is shared, so the times above move from run to run; the
benchmark (`bench/vision.py`) times tuned and untuned builds interleaved with ONNX Runtime and
PyTorch, and sets each layer against the FMA peak measured in the same run.
""")

nb = nbf.v4.new_notebook()
nb["cells"] = cells
nb["metadata"]["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
path = pathlib.Path(__file__).resolve().parent.parent / "15_tuning.ipynb"
nbf.write(nb, path)
