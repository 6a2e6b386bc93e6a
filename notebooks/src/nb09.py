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
# 9. The GPU target: OpenCL

The same fused groups that notebook 4 compiled for the CPU compile for a GPU: the x86 strategy
is replaced by a **GPU strategy** that binds loops to work groups and work items (CUDA's blocks
and threads), keeps tiles in `__local` memory and reduces in trees, and the loop IR becomes
**OpenCL C** instead of LLVM IR. The target string picks the device:

* `opencl` prefers a GPU and takes any device otherwise;
* `opencl -device=gpu` or `-device=cpu`, and `-platform=NAME` to choose among platforms.

Here, without a GPU, the kernels run on PoCL's CPU implementation of OpenCL (installed with
`pyopencl[pocl]`); on a machine with an NVIDIA GPU the same notebook runs on it
(`bench/gpu.py` does that check from the command line).
""")
code("""
import numpy as np
import relaybench as rb
from relaybench.backends.opencl.runtime import devices_text, get_device

print(devices_text())
device = get_device("opencl")
print("this notebook runs on:", device)
""")
md("""
## One fused group, from Relay to OpenCL C

A convolution with its bias and ReLU is one fused group. Its kernel is one `__kernel` function:
each work item computes one output element, with the convolution's reduction in registers and the
epilogue applied before the single store.
""")
code("""
block = rb.parse('''
#[version = "0.0.5"]
def @main(%x: Tensor[(1, 8, 16, 16), float32], %w: Tensor[(16, 8, 3, 3), float32], %b: Tensor[(16), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3]);
  %1 = nn.bias_add(%0, %b);
  nn.relu(%1)
}
''')
lib = rb.build(block, target="opencl", opt_level=3)
print(lib.source("opencl", group=0))
""")
md("""
The layouts stay NCHW: AlterOpLayout asks the current target for its policy, and the blocked
`NCHW16c` of the CPU is the `llvm` target's registration only (notebook 3 shows how to register
your own). Every result is checked against the reference interpreter:
""")
code("""
rng = np.random.default_rng(0)
args = {p.name_hint: rng.standard_normal([int(d) for d in p.type_annotation.shape]).astype("float32")
        for p in block["main"].params}
want = rb.create_executor("interpreter", mod=block).evaluate()(*args.values())
got = lib.run(**args)
convs = [c for c in rb.ir.post_order(lib.mod["main"]) if isinstance(c, rb.Call) and isinstance(c.op, rb.Op) and c.op.name == "nn.conv2d"]
print("conv2d layouts:", sorted({c.attrs.data_layout for c in convs}))
print("agrees with the interpreter:", np.allclose(got, want, rtol=1e-4, atol=1e-4))
""", check=True)
md("""
## Vector types

A group with no reduction (a residual `add` and its ReLU here) is spread one element per work
item, neighbouring work items on neighbouring elements. Where 4 divides the innermost axis, each
work item takes 4 neighbouring elements instead (`RB_GPU_VECTOR`, 4 by default): the loop over
them is a `vectorized` loop in the loop IR, and the OpenCL generator writes it as one `float4`
store, with a `float4` load of each input read along the same axis and `float4` arithmetic.
The `//` and `%` that split the fused index into the tensor's axes cancel when the offset is
flattened, so each access is at `thread * 4`.
""")
code("""
residual = rb.parse('''
#[version = "0.0.5"]
def @main(%x: Tensor[(1, 16, 8, 8), float32], %y: Tensor[(1, 16, 8, 8), float32]) {
  nn.relu(add(%x, %y))
}
''')
vec = rb.build(residual, target="opencl", opt_level=3)
print(vec.source("loops", group=0))
print(vec.source("opencl", group=0))
""")
code("""
xs, ys = rng.standard_normal((2, 1, 16, 8, 8)).astype("float32")
text = vec.source("opencl", group=0)
print("float4 loads and stores:", "float4*)" in text)
print("agrees with numpy:", np.array_equal(vec.run(x=xs, y=ys), np.maximum(xs + ys, 0)))
""", check=True)
md("""
## A whole network

ResNet-18 (on 32x32 images here, to keep the notebook quick on a CPU device) builds to one OpenCL
program holding every group's kernels; the profile shows the schedule rule each group got:
`direct` for the convolutions, `reduce_tree` for reductions long enough to split over a work group,
`injective` for the rest.
""")
code("""
resnet, params = rb.models.get("resnet18", image_shape=(3, 32, 32), num_classes=10)
net = rb.build(resnet, target="opencl", params=params, opt_level=3)
image = rng.uniform(0, 1, (1, 3, 32, 32)).astype("float32")
out = net.run(data=image)
ref = rb.create_executor("interpreter", mod=resnet).evaluate()(image, **params)
print("agrees with the interpreter:", np.allclose(out, ref, rtol=1e-3, atol=1e-4))
""", check=True)
md("""
## Where the time goes: the device's own clock

The device's queue is made with profiling enabled, so every kernel launch leaves an *event* that
holds the device's own start and end times. `profile()` reads them: each group's time is what
the device spent on its kernels (the median over the runs), with nothing of the host's launch
overhead in it, and GFLOP/s are the group's flops over that time. The line under the table
gives what surrounds the kernels, on the host's clock: the inputs copied in, the outputs copied
out and the whole run. A group that runs on the host (through the interpreter) has no events: it
is timed on the host's clock, and its rule column says so.
""")
code("""
net.profile(number=3)
""")
md("""
`benchmark()` times the same runs with both clocks: end to end (what a caller waits for, copies
and launch gaps included; the result itself, as on the CPU) and `.device`, the kernels' event
time summed per run. What lies between the two is the host's share of a run: on a GPU, the cost
that fewer and larger kernels, or launches recorded once and replayed, win back.
""")
code("""
timed = net.benchmark(number=5, repeat=3)
print(timed)
print(f"kernels on the device: {timed.device.median_ms / timed.median_ms:.0%} of a run")
""")
code("""
print("device time within end to end in every round:",
      all(d <= e for d, e in zip(timed.device.times_ms, timed.times_ms)))
""", check=True)
md("""
## How a convolution is scheduled, per layer

`RB_GPU_CONV` chooses among five schedules for a convolution: `direct` (one work item per
output, the reduction in its registers), `splitk` (direct, with the input channels cut into
slices whose partial sums a second launch adds: for the last stages of a network, whose few
outputs would leave most of a GPU idle), `tiled` (work groups of 64 channels x 8 x 8 pixels,
input and weight chunks copied into `__local` memory, 16 outputs per work item), `blocked`
(the same tiles read through the caches) and `winograd`: a 3 x 3 stride-1 layer becomes
Winograd's F(4x4, 3x3), its weight transformed at compile time, run as three launches (the
input tiles' transform, 36 matrix products tiled in `__local` memory, the output transform
with the fused epilogue), 4 times fewer multiplications than the direct convolution. The
default, `auto`, picks per layer by rules that an H100 and an H200 measured (`bench/gpu.py
--conv direct,splitk,tiled,winograd` prints every layer under every schedule): on a GPU,
Winograd where its products keep the device busy, tiles where they fill it, split-K where the
outputs are few, direct elsewhere. Lowering needs no device, so the rules for ResNet-18 on a
GPU can be read here:
""")
code("""
from collections import Counter
from relaybench.backends.graph_executor import extract_graph
from relaybench.backends.lowering import lower_primitive

from relaybench.passes.bind_params import bind_params

full, full_params = rb.models.get("resnet18")
full = bind_params(full, full_params)      # as rb.build(..., params=) does: weights constant
target = "opencl -device=gpu"
with rb.PassContext(opt_level=3, config={"relay.target": target}):
    fused = rb.passes.default_pipeline(3)(full)
rules = []
for node in extract_graph(fused["main"]).nodes:
    lowered = lower_primitive(node.function, target)
    if any("conv2d" in o for o in lowered.ops):
        shape = tuple(int(d) for d in lowered.output_types[0].shape)
        rules.append((lowered.name, shape, lowered.rule))
for name, shape, rule in rules:
    short = name.replace("contrib_conv2d_winograd_without_weight_transform", "winograd")
    print(f"{short:36s} {str(shape):20s} {rule}")
""")
code("""
print(sorted(Counter(rule for *_, rule in rules).items()))
assert {"conv2d_winograd", "conv2d_tiled", "direct_splitk"} <= {rule for *_, rule in rules}
""", check=True)
md("""
Every 3 x 3 stride-1 layer runs Winograd's (`winograd` in the names); the stem (64 channels
of 112 x 112) tiles; the stride-2 3 x 3 layers of 14 x 14 and 7 x 7 outputs split their
reduction: 512 channels of
7 x 7 are 25088 outputs, too few work items for a GPU that holds 270,000 in flight, so eight
slices of 64 input channels each make 200,704 (Winograd's matrix products, thin at those
sizes, are cut the same way). The split is a schedule primitive, `Schedule.rfactor`, shown
here on a row sum:
""")
code("""
from relaybench import te
A = te.placeholder((2, 10), name="A")
k = te.reduce_axis(10, name="k")
S = te.compute((2,), lambda i: te.sum(A[i, k], axis=[k]), name="S")
s = te.create_schedule(S)
s.rfactor(S, 4)
print(te.lower(s, [A], name="row_sum"))
""")
md("""
## Composability on the OpenCL target

The paper's experiment runs on any target. Here on the OpenCL device this machine has (the DQN
only, to keep the notebook quick):
""")
code("""
comp = rb.experiments.composability(["dqn"], targets="opencl", number=1, repeat=3, progress=False)
comp.table()
""")
md("""
On an H200 (`relaybench reproduce composability --targets opencl`, 224x224 inputs), speedup over
every operator its own kernel:

| configuration | ResNet-18 | MobileNet V2 | DQN | VGG-16 |
|---|---:|---:|---:|---:|
| + FuseOps | 2.84 | 4.71 | 1.53 | 1.04 |
| + FoldConstant | 3.15 | 8.77 | 1.62 | 1.05 |
| + ... CanonicalizeOps | 3.14 | 9.13 | 1.57 | 1.05 |
| + AlterOpLayout | 3.82 | 8.83 | 1.58 | 2.47 |

As the paper finds, fusion is the largest step on a GPU for most models (on the CPU, notebook 8,
it is layout alteration): every unfused operator is a launch and a round trip through device
memory. FoldConstant doubles MobileNet V2 again (its batch norms' arithmetic on constants).
AlterOpLayout changes no layout here (the GPU keeps NCHW) but it is where the OpenCL target
turns 3 x 3 convolutions into Winograd's form, VGG-16's largest step (2.35x).

## On a real GPU

`python bench/gpu.py` on an NVIDIA H200 (NVIDIA's OpenCL platform), batch 1, 224x224 images,
against PyTorch eager on CUDA in the same run, with its defaults (TF32 convolutions) and in
float32 (`bench/RESULTS.md` holds the full tables):

| model | relaybench ms (end to end) | kernels ms | PyTorch CUDA ms | PyTorch float32 ms |
| --- | ---: | ---: | ---: | ---: |
| DQN | 0.23 | 0.09 | 0.21 | 0.16 |
| ResNet-18 | 1.08 | 0.79 | 1.56 | 1.60 |
| MobileNet V2 | 1.14 | 0.77 | 3.61 | 3.29 |
| VGG-16 | 1.85 | 1.54 | 1.44 | 2.05 |

Every model agrees with PyTorch. relaybench is faster than PyTorch eager's float32 on ResNet-18,
MobileNet V2 and VGG-16 (Winograd's convolutions: 2.4x on VGG-16 over the direct kernels);
PyTorch's TF32 tensor cores stay ahead on VGG-16, and the DQN's run is mostly the host's
(copies and launches around 0.09 ms of kernels).
""")
nb = nbf.v4.new_notebook(cells=cells)
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, str(pathlib.Path(__file__).resolve().parents[1] / "09_gpu.ipynb"))
