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
# 3. Passes: watching the optimizer work

A Relay compiler is a sequence of **passes**, each a pure function from a module to a module. The
paper's optimizations (operator fusion, constant folding, common-subexpression elimination, layout
alteration, scale-axis folding, combining parallel convolutions, partial evaluation, automatic
differentiation) are all passes, and the order in which they run, and which of them run, is decided
by a `PassContext`.

This notebook runs Relay's default optimization pipeline on a small program and on ResNet-18, with a
`Snapshots` instrument recording the IR before and after every pass, and looks at what each step did.
""")
code("""
import numpy as np
import relaybench as rb
from relaybench import op, models
from relaybench.passes import PassContext, Snapshots, PassTimer
""")
md("""
## The passes

Every pass has Relay's name, a kebab-case name for pipeline strings, the `opt_level` at which the
default pipeline runs it, and a line of documentation.
""")
code("""
print(rb.passes.passes_table())
""")
md("""
## One pipeline, step by step

A convolution with a batch norm and a ReLU, whose weights are bound as constants: the shape of every
layer of a CNN. Relay's default pipeline at `opt_level=3` turns it into a single fused kernel.
""")
code("""
data = rb.var("data", shape=(1, 4, 8, 8))
rng = np.random.default_rng(0)
weight = rb.const(rng.standard_normal((8, 4, 3, 3)).astype("float32"))
gamma, beta, mean = (rb.const(rng.standard_normal(8).astype("float32")) for _ in range(3))
var = rb.const(rng.uniform(0.5, 1.5, 8).astype("float32"))
conv = op.nn.conv2d(data, weight, padding=(1, 1), channels=8, kernel_size=(3, 3))
bn = op.nn.batch_norm(conv, gamma, beta, mean, var)[0]
small = rb.IRModule.from_expr(rb.Function([data], op.nn.relu(bn)))
print(small.astext(show_meta_data=False))
""", check=True)
code("""
snapshots = Snapshots()
with PassContext(opt_level=3, instruments=[snapshots]):
    optimized = rb.passes.default_pipeline(3)(small)
print(snapshots.table())
""")
md("""
Each record keeps the module before and after its pass. The columns that do not depend on timing
tell the story: which passes ran, which were skipped and why, and how the operator count moved.
""")
code("""
for r in snapshots:
    if r.depth == 1:
        print(f"{r.label:24s} {r.status:8s} changed={str(r.changed):5s} ops {r.ops_before} -> {r.ops_after}")
""", check=True)
md("""
`SimplifyInference` replaced the batch norm by its inference-time arithmetic: a multiply by
`gamma / sqrt(var + eps)` and an add of the shift, each computed from constants.
""")
code("""
diff = snapshots["SimplifyInference"].diff()
print("\\n".join(diff.split("\\n#[metadata]")[0].splitlines()[:24]))
""")
md("""
`FoldConstant` then evaluated every expression whose inputs are all constants, so the scale and the
shift became two constant tensors; `FoldScaleAxis` moved the scale into the convolution's weight.
`FuseOps` finally grouped the convolution with the element-wise operations after it into one
`Primitive` function, the unit a backend compiles into one kernel:
""")
code("""
print(optimized.astext(show_meta_data=False))
""", check=True)
md("""
The optimized program computes the same function as the original (up to float rounding), which the
reference interpreter confirms:
""")
code("""
x = rng.standard_normal((1, 4, 8, 8)).astype("float32")
before = rb.create_executor("interpreter", mod=small).evaluate()(x)
after = rb.create_executor("interpreter", mod=optimized).evaluate()(x)
bool(np.allclose(before, after, rtol=1e-4, atol=1e-5))
""", check=True)
md("""
## Choosing passes

The `PassContext` decides what runs. At `opt_level=1` the default pipeline leaves out every pass above
level 1, and records each as skipped with the reason; `disabled_pass` and `required_pass` override the
level for individual passes. Pipelines can also be written as strings, with options in braces.
""")
code("""
snapshots = Snapshots()
with PassContext(opt_level=1, disabled_pass=["SimplifyExpr"], instruments=[snapshots]):
    rb.passes.default_pipeline(1)(small)
for r in snapshots.skipped():
    print(f"{r.label:24s} {r.reason}")
""", check=True)
code("""
pipeline = rb.passes.parse_pipeline("simplify-inference,fold-constant,fuse-ops{fuse_opt_level=2}")
print(pipeline)
print(pipeline(small).astext(show_meta_data=False).splitlines()[1])
""", check=True)
md("""
## ResNet-18 through the whole pipeline

The same pipeline on a whole network (a small input keeps the notebook quick). Batch-norm
decomposition first multiplies the operator count, constant folding and scale folding bring it back
down, layout alteration adds the transforms of the weights (folded away again), and fusion groups what
is left into 26 kernels: the input's layout transform, each convolution with its batch-norm
arithmetic, its ReLU and, where there is one, the residual addition, the pools, and the classifier.
""")
code("""
resnet, params = models.resnet18(image_shape=(3, 32, 32), num_classes=10)
resnet = rb.passes.bind_params(resnet, params)
snapshots, timer = Snapshots(), PassTimer()
with PassContext(opt_level=3, instruments=[snapshots, timer]):
    fused = rb.passes.default_pipeline(3)(resnet)
for r in snapshots:
    if r.depth == 1 and not r.skipped:
        print(f"{r.label:24s} ops {r.ops_before:3d} -> {r.ops_after:3d}")
""", check=True)
code("""
from relaybench.passes.fuse_ops import fused_groups
groups = fused_groups(fused)
len(groups), [g.ops if hasattr(g, "ops") else g["ops"] for g in groups][:4]
""")
code("""
print(timer.summary())
""")
md("""
Layout alteration changed every convolution to the blocked `NCHW{c}c` layout that vectorizes well on
a CPU, with a layout transform where the network enters that layout (the dense layer at the end
reads the blocked features flattened as they are, its weights' columns reordered at compile
time):
""")
code("""
convs = [n for n in rb.ir.post_order(fused["main"]) if isinstance(n, rb.Call) and isinstance(n.op, rb.Op) and n.op.name == "nn.conv2d"]
transforms = rb.ir.op_histogram(fused)["layout_transform"]
len(convs), sorted({c.attrs.data_layout for c in convs}), transforms
""")
md("""
## Your own layout policy

Which layouts AlterOpLayout chooses is not written in the pass: it asks each operator's
`FTVMAlterOpLayout` attribute, registered for the current target. The x86 policy above is the
`llvm` target's registration for `nn.conv2d`, at level 0, the library's own level. A registration
at a higher level overrides it, and `rb.op.attr_scope()` undoes every registration made inside it
when the block ends, so an experiment leaves nothing behind. `rb.op.table()` shows what is
registered beyond each operator's definition.

The function receives what Relay's does (the call's attributes, its inputs, their types and the
result's type) and returns a new call, a dict of attributes to change, or `None` to leave the call
alone. Here every convolution goes to NHWC with the kernel in HWIO; the layout rules of the
operators that follow carry the new layout through the bias and the ReLU.
""")
code("""
block = rb.parse('''
#[version = "0.0.5"]
def @main(%x: Tensor[(1, 8, 6, 6), float32], %w: Tensor[(16, 8, 3, 3), float32], %b: Tensor[(16), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3]);
  %1 = nn.bias_add(%0, %b);
  nn.relu(%1)
}
''')

def to_nhwc(attrs, inputs, tinfos, out_type):
    return op.nn.conv2d(*inputs, **dict(attrs, data_layout="NHWC", kernel_layout="HWIO"))

with rb.op.attr_scope():
    rb.op.register_alter_op_layout("nn.conv2d", to_nhwc, level=11)
    print(rb.op.table(["nn.conv2d"]).rows[0]["registered"])
    with PassContext(opt_level=3):
        mine = rb.passes.AlterOpLayout()(block)
    print(mine["main"].body.astext(show_types=False))
""", check=True)
md("""
Outside the scope the x86 policy is back, and both programs compute what the original does:
""")
code("""
with PassContext(opt_level=3):
    x86 = rb.passes.AlterOpLayout()(block)
print(x86["main"].body.astext(show_types=False))
rng = np.random.default_rng(0)
args = [rng.standard_normal([int(d) for d in p.type_annotation.shape]).astype("float32") for p in block["main"].params]
run = lambda m: rb.create_executor("interpreter", mod=m).evaluate()(*args)
print(np.allclose(run(mine), run(block), atol=1e-5), np.allclose(run(x86), run(block), atol=1e-5))
""", check=True)
md("""
## More of the paper's passes, on small programs

**Common-subexpression elimination** merges equal computations; **dead-code elimination** drops
bindings nobody uses; **A-normal form** names every intermediate value with a `let`.
""")
code("""
prog = rb.parse('''
#[version = "0.0.5"]
def @main(%x: Tensor[(4), float32]) {
  let %unused = exp(%x);
  %0 = add(%x, 1f);
  %1 = add(%x, 1f);
  multiply(%0, %1)
}
''')
step = rb.passes.EliminateCommonSubexpr()(prog)
step = rb.passes.DeadCodeElimination()(step)
print(step.astext(show_types=False))
print(rb.passes.ToANormalForm()(step).astext(show_types=False))
""", check=True)
md("""
**Partial evaluation** runs what is known at compile time. Here a loop with a static trip count is
unrolled and its static arithmetic computed, leaving only the work on the dynamic input.
""")
code("""
loop = rb.parse('''
#[version = "0.0.5"]
def @main(%x: Tensor[(4), float32]) -> Tensor[(4), float32] {
  let %repeat = fn (%n: int32, %acc: Tensor[(4), float32]) -> Tensor[(4), float32] {
    if (equal(%n, 0)) { %acc } else { %repeat(subtract(%n, 1), multiply(%acc, 2f)) }
  };
  %repeat(3, %x)
}
''')
print(rb.passes.PartialEvaluate()(loop).astext(show_types=False))
""")
md("""
**Automatic differentiation** turns a function into one that also returns its gradient with respect
to every parameter. For `sum(x * x)` the gradient is `2x`:
""")
code("""
from relaybench.passes.gradient import gradient

x = rb.var("x", shape=(3,))
grad_fn = gradient(rb.Function([x], op.sum(x * x)))
value, (dx,) = rb.create_executor("interpreter", mod=rb.IRModule.from_expr(grad_fn)).evaluate()(
    np.array([1.0, 2.0, 3.0], dtype="float32"))
value, dx
""", check=True)
md("""
Next: compiling the fused groups to CPU code.
""")
nb = nbf.v4.new_notebook(cells=cells)
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, str(pathlib.Path(__file__).resolve().parents[1] / "03_passes.ipynb"))
