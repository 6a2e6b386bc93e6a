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
# 7. Layout alteration: the pass that matters most on CPUs

A convolution in `NCHW` reads its input channels one plane at a time, `H x W` floats apart. The
vector unit of a CPU wants 16 consecutive floats that the same instruction can use: the Relay paper
(and TVM before it) gets them by **changing the data layout** to `NCHW{x}c`, where the channels are
cut into blocks of `x` and the block is the innermost dimension, and the weights to `OIHW{i}i{o}o`.
`AlterOpLayout` asks each operator's layout rule what it wants, inserts `layout_transform` where
producers and consumers disagree, and `FoldConstant` then transforms the weights at compile time.
The paper found this the optimization that matters most on CPUs; this notebook shows what it does
to ResNet-18 and measures what it is worth here.
""")
code("""
import numpy as np
import relaybench as rb
from relaybench.passes.bind_params import bind_params
from relaybench.passes import Snapshots

resnet, params = rb.models.get("resnet18")
bound = bind_params(resnet, params)
""")
md("""
## Before and after

Run the default pipeline at `opt_level=3` with a `Snapshots` instrument and pick the step of
`AlterOpLayout`: `rb.viz.diff` puts the program before and after side by side.
""")
code("""
snapshots = Snapshots()
with rb.PassContext(opt_level=3, instruments=[snapshots]):
    optimized = rb.passes.default_pipeline(3)(bound)
step = next(r for r in snapshots.records if r.name == "AlterOpLayout")
change = rb.viz.diff(step)
change.changed, change.added_lines > 0, change.removed_lines > 0
""", check=True)
code("""
print("\\n".join(change.text.splitlines()[:40]))
""")
md("""
Every convolution now works on blocked tensors: the stem reads `NCHW3c` (its 3 input channels are
one block) and writes `NCHW16c`; every other convolution reads and writes `NCHW16c`. Only one
`layout_transform` of the data remains after `FoldConstant`: the image on the way in. On the way
out, the dense layer reads the global pool's `NCHW16c` output flattened as it is: the pass put
its constant weights' columns in that order at compile time (`FoldFlattenIntoDense`), so no
transform back to `NCHW` is left.
""")
code("""
def conv_layouts(mod):
    convs = [n for n in rb.ir.post_order(mod["main"]) if isinstance(n, rb.Call)
             and isinstance(n.op, rb.Op) and n.op.name == "nn.conv2d"]
    return sorted({(c.attrs.data_layout, c.attrs.kernel_layout) for c in convs})

def count(mod, name):
    return sum(1 for n in rb.ir.post_order(mod["main"]) if isinstance(n, rb.Call)
               and isinstance(n.op, rb.Op) and n.op.name == name)

print("before:", conv_layouts(step.before))
print("after: ", conv_layouts(optimized))
print("layout_transform calls in the final program:", count(optimized, "layout_transform"))
""", check=True)
md("""
## In the graph

`rb.viz.to_dot` draws the dataflow graph with the `layout_transform`s highlighted; the diff's
`graph()` marks what the pass added (green) and removed (red).
""")
code("""
graph = rb.viz.to_dot(optimized)
source = graph.source
source.count("layout_transform") >= 1, source.count("cluster_") == len(rb.passes.fuse_ops.fused_groups(optimized))
""", check=True)
code("""
graph
""")
md("""
## What it is worth

Build ResNet-18 twice with the same pipeline, once with `AlterOpLayout` disabled, and time both on
this CPU. Without it, the convolutions run the `NCHW` schedule (a tile of output channels by
columns, each weight broadcast from memory); with it, the `NCHW16c` register tiles of notebook 4
(a rule's `_tail` variant, a register tile with a shorter last one, counts as the rule).
""")
code("""
image = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype("float32")
blocked = rb.build(resnet, params=params, opt_level=3)
plain = rb.build(resnet, params=params, opt_level=3, disabled_pass=["AlterOpLayout"])
same = bool(np.allclose(blocked.run(data=image), plain.run(data=image), rtol=1e-4, atol=1e-6))
rules = [sorted({k.rule.removesuffix("_tail") for k in lib.kernels}) for lib in (blocked, plain)]
same, rules
""", check=True)
code("""
fast = blocked.benchmark(number=3, repeat=5)
slow = plain.benchmark(number=1, repeat=3)
print("with AlterOpLayout:   ", fast)
print("without AlterOpLayout:", slow)
print(f"speedup from the layout: {slow.median_ms / fast.median_ms:.1f}x")
""")
md("""
## Winograd: a kernel choice the layout pass makes

For a 3x3 stride-1 convolution the pass can do more than block the layout. With
`RB_WINOGRAD=auto` (the default) it rewrites those of 64 channels or more into
`nn.contrib_conv2d_winograd_weight_transform` of the weight (a constant, so FoldConstant computes
it at compile time: 6x6 values per 3x3 kernel) and `nn.contrib_conv2d_winograd_without_weight_transform`
on the same `NCHW16c` data: F(4x4, 3x3) does 36 multiplications per 4x4 block of outputs where
the direct convolution does 144. `blocked` above already has them; the same build without:
""")
code("""
from relaybench import config

with config.Context(RB_WINOGRAD="off"):
    direct = rb.build(resnet, params=params, opt_level=3)
winograd_groups = [k.name for k in blocked.kernels if k.rule == "conv2d_winograd"]
same = bool(np.allclose(blocked.run(data=image), direct.run(data=image), rtol=1e-4, atol=1e-5))
len(winograd_groups), same
""", check=True)
code("""
with_winograd = blocked.benchmark(number=3, repeat=5)
without = direct.benchmark(number=3, repeat=5)
print(f"Winograd: {with_winograd.median_ms:.1f} ms, direct: {without.median_ms:.1f} ms")
""")
md("""
## Images as one row: a layout the schedule asks for

A 1x1 stride-1 convolution computes each pixel from the same pixel of its input, so its image
`(N, C, H, W, c)` may as well be one row of `H * W` pixels, `(N, C, 1, H * W, c)`: the same
memory. That matters to the register tiles: on a CPU without AVX-512 (16 vector registers) the
best tile is 6 pixels by a block of 16 channels, and a width of 7, 14 or 28 has no divisor near
6, while a row of 49 or 196 pixels takes tiles of 6 with a shorter one at the end. An operator
says it wants this through its `FFlattenImage` attribute, and AlterOpLayout then carries the row
through the bias, clip and residual addition after the call, so a `reshape` (a view: no kernel
runs) stands only where a row meets an operator that needs the image. The x86 policy asks for it
on hosts without AVX-512; here a registration at a higher level asks for it on any host, on one
block of MobileNet V2 (1x1 expansion, depthwise 3x3, 1x1 projection, residual addition):
""")
code("""
from relaybench import op

rng = np.random.default_rng(0)
x = rb.var("x", shape=(1, 16, 7, 7))
def w(*shape):
    return rb.const((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype("float32"))
y = op.clip(op.nn.conv2d(x, w(48, 16, 1, 1), channels=48, kernel_size=1), a_min=0.0, a_max=6.0)
y = op.clip(op.nn.conv2d(y, w(48, 1, 3, 3), channels=48, kernel_size=3, padding=1, groups=48),
            a_min=0.0, a_max=6.0)
block = rb.IRModule.from_expr(rb.Function([x], op.add(op.nn.conv2d(y, w(16, 48, 1, 1), channels=16,
                                                                    kernel_size=1), x)))

def pointwise(attrs, tinfos, out_type):      # every 1x1 stride-1 convolution, on any host
    return tuple(int(d) for d in tinfos[1].shape[2:4]) == (1, 1) and attrs["groups"] == 1

with rb.op.attr_scope():
    rb.op.register_op_attr("nn.conv2d", "FFlattenImage", pointwise, level=11)
    with rb.PassContext(opt_level=3):
        rows = rb.passes.InferType()(rb.passes.AlterOpLayout()(block))
    lib = rb.build(block, opt_level=3)
convs = [c for c in rb.ir.post_order(rows["main"].body)
         if isinstance(c, rb.Call) and getattr(c.op, "name", "") == "nn.conv2d"]
image = np.random.default_rng(1).standard_normal((1, 16, 7, 7)).astype("float32")
reference = rb.create_executor("interpreter", mod=block).evaluate()(image)
([tuple(int(d) for d in c.args[0].checked_type.shape) for c in convs],
 len(lib.memory_plan().views), bool(np.allclose(lib.run(x=image), reference, rtol=1e-4, atol=1e-5)))
""", check=True)
md("""
Both 1x1 convolutions read rows of 49 pixels, the depthwise one the 7x7 image, and the built
block computes what the interpreter computes on the original. Between the convolutions two
reshapes (the expansion's row to the image, the depthwise output to a row) are views: the graph
executor runs no kernel for them. The two at the ends fuse into the layout transforms from and
to `NCHW`. On MobileNet V2 with a 2-core AVX2 host this took its 1x1 layers from 38-45 to 59-74
GFLOP/s (`bench/RESULTS.md`).
""")
md("""
The paper reports layout alteration as the largest single gain on CPUs (and fusion on GPUs);
`08_composability.ipynb` measures every pass in the paper's order on four models.
""")
nb = nbf.v4.new_notebook(cells=cells)
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, str(pathlib.Path(__file__).resolve().parents[1] / "07_layout_alteration.ipynb"))
