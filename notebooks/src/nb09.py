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
(`bench/gpu_check.py` does that check from the command line).
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
## On a real GPU

`python bench/gpu_check.py` on an NVIDIA H100 (NVIDIA's OpenCL platform), batch 1, 224x224
images, against PyTorch eager on CUDA (`bench/RESULTS.md` holds the full table):

| model | relaybench ms (end to end) | PyTorch CUDA ms |
| --- | ---: | ---: |
| DQN | 0.60 | 0.39 |
| ResNet-18 | 2.12 | 1.52 |
| MobileNet V2 | 0.96 | 2.83 |
| VGG-16 | 10.88 | 0.95 |

Every model agrees with PyTorch. MobileNet V2, many small kernels, is already three times faster
than eager PyTorch; the dense convolutions of VGG-16 show what the direct one-output-per-work-item
schedule leaves on the table: shared-memory tiles of inputs and weights, and Winograd or implicit
GEMM, are the next schedules of the GPU strategy. The script now records the device time of
each model beside its end-to-end time, and the groups that take most of it.
""")
nb = nbf.v4.new_notebook(cells=cells)
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, str(pathlib.Path(__file__).resolve().parents[1] / "09_gpu.ipynb"))
