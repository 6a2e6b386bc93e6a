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
# 11. A deep-learning accelerator

The Relay paper's last experiment compiles ResNets for **VTA**, an open FPGA accelerator: a GEMM
core that multiplies small int8 tiles into int32 accumulators once per cycle, a tensor ALU for the
epilogue (bias, ReLU, shifts, clipping), on-chip buffers filled and drained by DMA, and three
modules (load, compute, store) that run at the same time, synchronized by dependence tokens. The
same Relay program that runs on a CPU reaches it through three steps that are all ordinary Relay
passes: **quantize** to int8, **graph_pack** the convolutions into the accelerator's blocked
layouts, and **build**, where each fused group the accelerator can run becomes an instruction
stream and the rest stays on the CPU.

Here the accelerator is simulated (`relaybench.backends.accel`): bit-exact on numpy buffers, and
timed cycle by cycle with the three modules overlapping. Everything below is the library's public
API: `AccelConfig`, `rb.passes.graph_pack`, `rb.build(..., target="accel")`.
""")
code("""
import numpy as np
import matplotlib.pyplot as plt
import relaybench as rb
from relaybench.backends.accel import AccelConfig
from relaybench.backends.target import Target
from relaybench.experiments.accelerator import PAPER, accelerator
""")
md("""
## The design

VTA's default design on a Pynq board: a 1 x 16 x 16 GEMM core (one row of 16 int8 inputs times a
16 x 16 int8 weight block per cycle: 256 multiply-adds), buffers counted in elements of their
tiles, a 100 MHz clock and a 64-bit memory bus. The paper's *multi-batch* design keeps the 256
MACs but computes four images at once (4 x 8 x 8): the target `accel -batch=4`.
""")
code("""
print(AccelConfig().describe())
print()
print(Target.parse("accel -batch=4").accel_config().describe())
""", check=True)
md("""
## The VTA flow on ResNet-18

Small images (3 x 64 x 64) keep this notebook quick; the network is the same. Quantize with VTA's
settings: a global scale of 8 and the first convolution left in float32 (its three input channels
do not fill a 16-wide block).
""")
code("""
mod, params = rb.models.resnet18(image_shape=(3, 64, 64))
with rb.quantize.qconfig(global_scale=8.0, skip_conv_layers=[0]):
    q = rb.quantize.quantize(mod, params)
convs = [line.strip() for line in q["main"].astext(show_types=False).splitlines()
         if "nn.conv2d(" in line]
print(len(convs), "convolutions; the second one, quantized:")
print(convs[1])
""", check=True)
md("""
`graph_pack` rewrites the region between the first max pool and the global average pool into the
accelerator's layouts: activations in `NCHW1n16c` (batch blocks of 1, channel blocks of 16, the
block innermost) and weights in `OIHW16o16i` (16 x 16 tiles, one GEMM operand each), with a
`layout_transform` where the region starts and ends. `rb.build` does this itself for an `accel`
target; here it is run by hand to look at the result.
""")
code("""
packed = rb.passes.graph_pack(q, bfactor=1, cfactor=16)
text = packed["main"].astext(show_types=False).splitlines()
packed_convs = [line.strip() for line in text if "nn.conv2d(" in line]
print(packed_convs[1])
print()
print("\\n".join(line.strip() for line in text if "layout_transform(" in line))
""", check=True)
code("""
rb.viz.to_dot(packed)
""")
md("""
## Build: which group goes where

`rb.build(q, target="accel")` packs, optimizes and fuses like any build; then every fused group
that is a packed int8 convolution with an epilogue the tensor ALU can compute is lowered to the
accelerator's instructions. The others run on the CPU (compiled for llvm), and the build says why
for each of them:
""")
code("""
lib = rb.build(q, target="accel")
on_accel = [k for k in lib.kernels if k.accel]
reasons = lib.compile_stats.cpu_reasons
print(f"{len(on_accel)} groups on the accelerator, {len(lib.kernels) - len(on_accel)} on the CPU")
rb.viz.Table([{"group": name, "why on the CPU": why} for name, why in reasons.items()])
""")
code("""
# the float first convolution stays on the CPU; most of the others go to the accelerator
print(reasons["fused_nn_conv2d_add_nn_relu"], "|", len(on_accel) >= 10)
""", check=True)
md("""
The float first convolution (its layouts are not packed), pooling, the dense layer, the layout
transforms and the casts stay on the CPU, as in the paper; every other group is a packed int8
convolution with its epilogue, and runs on the accelerator.

## One convolution's instruction stream

The second convolution of the network (3 x 3, 64 channels, with its bias, ReLU and requantization
fused): the micro-op load, then per tile the weight and input loads, a GEMM that resets the
accumulators, the GEMM proper, one ALU instruction per epilogue step, and the stores. The
`pop`/`push` flags are the dependence tokens between the modules.
""")
code("""
first = on_accel[0].compiled
print("\\n".join(first.source("accel").splitlines()[:30]))
""")
md("""
## A timeline: load, compute and store overlap

A layer of the third stage is cut into several tiles (two output-channel blocks each). Each
buffer is split in halves (*double buffering*): the load module fills one half with the next tile
while the compute module works on the other, and the store module drains the previous tile's
results. Run the network once and plot that layer's run:
""")
code("""
x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype("float32")
out = lib.run(data=x)
# of the layers whose stream draws legibly (at most 300 instructions), the one whose modules
# overlap the most: their busy cycles added, over the cycles the layer takes
def overlap(kernel):
    return sum(kernel.last_stats.busy.values()) / kernel.last_stats.cycles

layer = max((k.compiled for k in on_accel if len(k.compiled.program) <= 300), key=overlap)
stats = layer.last_stats
print(layer.name, "-", layer.lowered.tiles, "tiles,", len(layer.program), "instructions,",
      "weights (O/c, C/c, kh, kw, c, c) =", layer.plan.weight_shape)
print(stats)
""")
code("""
fig, ax = plt.subplots(figsize=(11, 2.6))
stats.plot(ax=ax)
ax.set_title(f"{layer.name}: blue LOAD, red GEMM, orange ALU, green STORE")
plt.show()
""")
code("""
busy = stats.busy
print(f"the modules are busy {sum(busy.values())} cycles in all, the layer takes {stats.cycles}")
print("the modules overlap:", stats.cycles < sum(busy.values()))
""")
code("""
stats.cycles < sum(stats.busy.values()), stats.gemm_macs == layer.plan.macs
""", check=True)
md("""
The load module is busy most of the time: a 3 x 3 convolution over 256 channels in and out has
590 KB of int8 weights to bring through an 8-byte bus for a 4 x 4 output. The GEMMs of one tile
run while the next tile's weights and inputs arrive in the other halves of the buffers, and the
stores drain under both. Without double buffering the layer would take the sum of the three
modules' busy cycles.
""")
md("""
## Bit for bit what the CPU computes

The accelerator's groups are checked against the llvm build of the same quantized program: the
outputs are equal, not close.
""")
code("""
cpu = rb.build(q, target="llvm", opt_level=3)
np.array_equal(out, cpu.run(data=x))
""", check=True)
md("""
## The profile

`lib.profile()` lists every group: the CPU groups with their time measured on this host, the
accelerator groups (rule `accel conv2d_packed`) with their *simulated* time at the design's clock,
not the host's time spent simulating them. Timings are not checked.
""")
code("""
lib.profile(number=1)
""")
md("""
## The experiment

`accelerator()` runs the whole comparison: the quantized model on this host's CPU only (measured),
and on each design, where the time per image is the accelerator groups' simulated time plus the
CPU groups' measured time, the outputs checked bit for bit against the CPU's. The multi-batch
design runs four images at once, so its times are per image. At 3 x 32 x 32 (the paper's numbers,
beside it, are for 3 x 224 x 224 on a Pynq board: an ARM Cortex-A9 CPU and VTA at 100 MHz):
""")
code("""
result = accelerator("resnet18", image_shape=(3, 32, 32), number=1, repeat=3, progress=False)
result.table()
""")
code("""
result.paper_table()
""")
code("""
[(r["design"], r["exact"], abs(r["total_ms"] - r["accel_ms"] - r["cpu_ms"]) < 1e-9)
 for r in result.rows[1:]]
""", check=True)
code("""
result.plot()
""")
md("""
Reading it: the "cpu only" row is this host's int8 path (a modern x86 core with VNNI), far faster
than the paper's ARM Cortex-A9, so the ratios are not the paper's; the accelerator's columns are
simulated at 100 MHz, as the paper's FPGA ran. On small images the accelerator's layers are short,
so fixed costs (DMA latency, loading each layer's weights) weigh more than at 224 x 224, and the
multi-batch design, which loads each weight once for four images, gains more than the paper's
65 to 61 ms.

`relaybench reproduce accelerator --out results/` runs ResNet-18, ResNet-34 and ResNet-50 at
3 x 224 x 224 on both designs and writes the table (markdown, CSV, JSON) and the figure, with the
simulator's own speed (host seconds per simulated network); `--quick` runs ResNet-18 at
3 x 32 x 32. It runs the TreeLSTM too, next.

## TreeLSTM: the VM calling the accelerator

The TreeLSTM is a recursive program (a `match` on the tree, `@map` over the children, closures
given to `@foldl`), so the VM runs it, not the graph executor. Its weights are parameters of
`@main` that the recursion passes down; `quantize` binds them, and `SpecializeConstantArgs` makes
them constants inside the recursive `@tree_lstm`, so its dense layers are quantized there. VTA
stores int8 only, so the experiment quantizes with `store_lowbit_output=True`: each layer's
int32 result becomes int8 before it is dequantized for the gates. The packing then turns each
requantized dense layer of the cell into a 1x1 convolution of packed data:
""")
code("""
from relaybench.experiments.accelerator import TREE_QCONFIG
from relaybench.backends.vm import VirtualMachine, compile as vm_compile
from relaybench.backends.accel.kernel import AccelKernel
from relaybench.experiments.nlp import full_tree

tmod, tparams = rb.models.tree_lstm(input_size=128, hidden_size=128)
with rb.quantize.qconfig(**TREE_QCONFIG):
    tq = rb.quantize.quantize(tmod, tparams)
exe = vm_compile(tq, target="accel")
cell_groups = [k.compiled for k in exe.kernels if isinstance(k.compiled, AccelKernel)]
[(k.name, k.plan.macs) for k in cell_groups]
""")
md("""
Three of the cell's four layers run on the accelerator: `ioux` (with the requantized `iouh`
result added in its epilogue, a residual on the ALU), `iouh` and `fx`. The forget gate's `fh`
layer sits inside the closure given to `@foldl` and its result is not requantized to int8, so it
stays on the CPU. One run over a 31-node tree calls each group 31 times:
""")
code("""
rng = np.random.default_rng(0)
tree = rb.adt.from_python(full_tree(5, lambda: rng.standard_normal((1, 128)).astype("float32")), "Tree")
for k in cell_groups:
    k.reset_totals()
h, c = VirtualMachine(exe).invoke("main", tree)
[(k.name, k.totals["calls"], round(k.totals["seconds"] * 1e3, 3)) for k in cell_groups]
""")
code("""
[k.totals["calls"] for k in cell_groups] == [31, 31, 31]
""", check=True)
code("""
tree_result = accelerator("tree_lstm", number=1, repeat=3, progress=False)
tree_result.table()
""")
code("""
[(r["design"], r["exact"]) for r in tree_result.rows[1:]]
""", check=True)
md("""
The CPU-only row and the designs' "cpu ms" include the VM's bytecode loop in Python, which
dominates here: the cell's layers are small matrix-vector products (a 1 x 128 by 128 x 384 layer
is 192 cycles of the GEMM core, about 2 us at 100 MHz, but loading its 48 KiB of weights from DRAM
for every node takes longer, so the GEMM core is busy only a few percent of the time). The
multi-batch design computes four trees' nodes at once and loads each layer's weights once for
them, so its time per tree is lower.
""")
nb = nbf.v4.new_notebook(cells=cells)
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, str(pathlib.Path(__file__).resolve().parents[1] / "11_accelerator.ipynb"))
