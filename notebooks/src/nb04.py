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
# 4. From a fused group to machine code on the CPU

After `FuseOps`, a Relay program is a `@main` that calls **Primitive functions**, each one fused
group of operators that a backend turns into one kernel. This notebook follows one of them, a
convolution with its bias and ReLU, all the way down, in the order TVM's `relay.build` does it:

1. the group's **tensor expressions**: one operator `compute` per call, with the target's
   **strategy** substituting its own compute for the anchor (the x86 `conv2d_NCHWc`);
2. the strategy's **schedule**, lowered to **loop IR** and simplified;
3. **LLVM IR** built from the loop IR with llvmlite's `IRBuilder`, optimized at `-O3` for the host CPU,
   and its **assembly**;
4. the kernel **run** on random inputs, checked against the reference interpreter and timed against
   the machine's peak.

Unlike TVM there is no tuning here: the x86 strategy picks its tile sizes from the shapes, so what
you see is exactly what `relaybench.build` compiles.
""")
code("""
import timeit

import numpy as np
import relaybench as rb
from relaybench import op
from relaybench.passes.bind_params import bind_params
from relaybench.passes.fuse_ops import fused_groups, fused_groups_table
from relaybench.backends.lowering import lower_primitive
from relaybench.backends.llvm import build_kernel
from relaybench.backends.llvm.jit import host_target
""")
md("""
## A convolution block, optimized

One block of a CNN: a 3x3 convolution from 32 to 64 channels on a 28x28 image, a bias and a ReLU.
The weights are seeded random numbers, bound into the program as constants, which is what lets
the optimizer transform them at compile time.
""")
code("""
rng = np.random.default_rng(0)
data = rb.var("data", shape=(1, 32, 28, 28))
weight = rb.var("weight", shape=(64, 32, 3, 3))
bias = rb.var("bias", shape=(64,))
conv = op.nn.conv2d(data, weight, padding=(1, 1), channels=64, kernel_size=(3, 3))
block = rb.IRModule.from_expr(rb.Function([data, weight, bias], op.nn.relu(op.nn.bias_add(conv, bias))))
params = {"weight": (0.1 * rng.standard_normal((64, 32, 3, 3))).astype("float32"),
          "bias": rng.standard_normal(64).astype("float32")}
print(block)
""", check=True)
md("""
At `opt_level=3` the pipeline runs `AlterOpLayout`, whose x86 rule blocks each convolution's
channels by the largest divisor of the channel count up to the SIMD width, 16 float32 lanes of an
AVX-512 register: data in `NCHW16c` and weights in `OIHW16i16o`. The transform of the weights is folded at compile time; the data is transformed on
the way in and back on the way out, each transform a fused group of its own. The bias became an
`add` of a `(4, 1, 1, 16)` constant, already in the blocked layout.
""")
code("""
optimized = rb.passes.optimize(bind_params(block, params), opt_level=3)
print(optimized.astext(show_meta_data=False))
""", check=True)
code("""
print(fused_groups_table(optimized))
""", check=True)
md("""
The group anchored by the convolution is the one worth compiling well: it holds all the arithmetic.
Its convolution now reads and writes `NCHW16c`:
""")
code("""
group = next(g for g in fused_groups(optimized) if g.anchor == "nn.conv2d")
conv_call = next(n for n in rb.ir.post_order(group.function.body)
                 if isinstance(n, rb.Call) and isinstance(n.op, rb.Op) and n.op.name == "nn.conv2d")
group.name, conv_call.attrs.data_layout, conv_call.attrs.kernel_layout, conv_call.attrs.out_layout
""", check=True)
md("""
## Lowering: the x86 `conv2d_NCHWc` schedule

`lower_primitive` builds the group's tensor expressions and hands them to the target's strategy
(`relaybench/backends/strategy/x86.py`). For a blocked convolution it picks the rule
`conv2d_NCHWc`, TVM's x86 template:

* **the compute** splits the input channels into two reduce axes, the channel block `rco` and the
  lane within the block `rci`, and makes the zero padding a stage of its own, `pad`;
* **the padded input** is computed first, once, as a loop nest of its own that runs in parallel
  (the kernel is then two *phases*, each spread over the threads);
* **a register tile**: the output row is cut into tiles of 14 columns (the largest divisor of the
  width up to 14), and the convolution is accumulated into a 14 x 16 tile, 14 vectors of the 16
  output-channel lanes; AVX-512 has 32 vector registers, so the whole tile stays in registers;
* **the reduce loops outside** (`rco`, `ry`, `rx`, `rci`), the tile's loops inside: the width loop
  **unrolled**, the output-channel lanes **vectorized**, so every step of the reduction is 14
  multiply-adds of one weight vector with 14 broadcast input values;
* **the epilogue fused at the store**: the bias and the ReLU are applied as the tile is written to
  the output, never as a separate pass over memory;
* **parallel** over the (output-channel block, row) pairs, fused into one loop so that both threads
  get work even when there are few channel blocks.

The tile follows the host: without AVX-512 there are 16 vector registers of 8 floats, a vector of
16 lanes takes two, and a 14 x 16 tile would spill to the stack. There 12 accumulators fit, 6
pixels of 16 lanes, but 28 columns have no divisor near 6: the rule computes the image over its
784 pixels as one axis (the `plane` knob of notebook 15), in tiles of 6 consecutive pixels that
cross the rows, the last tile shorter (4 pixels). Its name then ends in `_tail`: the last tile's
loads and stores are guarded and the loops partitioned, so the other tiles run without a guard
(`narrow_host()` says which kind this machine is).
""")
code("""
lowered = lower_primitive(group.function)
print(lowered)
""")
code("""
print("rule:", lowered.rule.removesuffix("_tail"), "| anchor:", lowered.anchor, "| ops:", lowered.ops)
print(f"flops: {lowered.flops:,} (2 x 64 x 28 x 28 outputs x 32 x 3 x 3)")
""", check=True)
md("""
The loop IR is what the code generator sees. The index arithmetic is already simplified (more on
that below): every load and store is an affine function of the loop variables.
""")
code("""
from relaybench.backends.strategy.x86 import narrow_host
print("16 vector registers" if narrow_host() else "32 vector registers")
print(lowered.prim_func)
""")
code("""
text = str(lowered.prim_func)
"vectorized(16)" in text, "parallel(" in text, ("unrolled(6)" if narrow_host() else "unrolled(14)") in text
""", check=True)
md("""
## LLVM IR

`build_kernel` compiles the PrimFunc: it walks the loop IR with llvmlite's `IRBuilder`, turns the
vectorized loops into operations on `<16 x float>` vectors and the unrolled loop into straight-line
code, marks the buffers `noalias`, runs LLVM's `-O3` pipeline for the host CPU, and JIT-compiles the
result with MCJIT (kernels are cached on disk, keyed by their loop IR, the target and the versions).
Each parallel loop becomes a function of a range `[begin, end)`; the threads of a pool that
waits in machine code (not in Python) call it, so a kernel of a tenth of a millisecond still gains
from the second core.
""")
code("""
host = host_target()
print(host.triple, host.cpu, "AVX-512:", host.has_avx512)
kernel = build_kernel(lowered.prim_func)
print(repr(kernel))
""")
md("""
The heart of the optimized LLVM IR is the body of the `rci` loop: one vector load of 16 weights
(the 16 output channels), then for each of the 14 columns a scalar load of an input value, a
broadcast (`insertelement` + `shufflevector`) and an `llvm.fmuladd` into an accumulator that the
loop carries in a `phi`: the register tile.
""")
code("""
llvm_ir = kernel.source("llvm").splitlines()
first = next(i for i, line in enumerate(llvm_ir) if "llvm.fmuladd.v16f32" in line)
start = max(i for i in range(first) if llvm_ir[i] and not llvm_ir[i].startswith(" "))  # its block
body = [line for line in llvm_ir[start:first + 1] if "getelementptr" not in line]
accumulators = [line for line in body if " phi <16 x float>" in line]
print("\\n".join(body[:1] + accumulators[:2] + ["  ..."]
                + [line for line in body if " phi " not in line][1:]))
print(f"\\n{len(accumulators)} vector accumulators carried by the loop")
""")
md("""
## Assembly

The same loop in x86 assembly (on a host with AVX-512; a host without it gets the same loop on
256-bit `ymm` registers): `zmm` registers are the 512-bit AVX-512 registers. One `vmovups`
loads the weight vector, and each `vfmadd231ps` multiplies it with an input value broadcast
straight from memory (`{1to16}`) and adds into one of the 14 accumulator registers. LLVM has also
unrolled the `rx` loop, so the pattern appears three times in a row.
""")
code("""
asm = kernel.source("asm").splitlines()
first = next(i for i, line in enumerate(asm) if "vfmadd231ps" in line)
label = max(i for i in range(first) if asm[i].startswith(".LBB"))
end = next(i for i in range(first, len(asm)) if asm[i].lstrip().startswith("j"))
print("\\n".join(asm[label:end + 1]))
""")
code("""
text = kernel.source("asm")
# 512-bit registers and broadcasts from memory where the host has AVX-512, none where it has not
("zmm" in text) == host.has_avx512, text.count("vfmadd231ps") > 0, ("{1to16}" in text) == host.has_avx512
""", check=True)
md("""
## Running it

The kernel takes one numpy array per parameter of the PrimFunc: the group's inputs (the blocked
data, the blocked weights, the bias), then the output, written in place. The reference interpreter
evaluates the same Primitive function with numpy, operator by operator.
""")
code("""
inputs = [rng.standard_normal([int(d) for d in t.shape]).astype(t.dtype) for t in lowered.input_types]
out = np.empty([int(d) for d in lowered.output_types[0].shape], lowered.output_types[0].dtype)
kernel(*inputs, out)
reference = rb.create_executor("interpreter", mod=rb.IRModule.from_expr(group.function)).evaluate()(*inputs)
error = float(np.abs(out - reference).max())
error < 1e-4, bool(np.allclose(out, reference, rtol=1e-4, atol=1e-4))
""", check=True)
md("""
To time it, `kernel.bind(...)` checks the arrays once (dtypes, shapes, contiguity) and returns a
function of no arguments, so the timer measures the kernel and the thread pool, not the checks.

The machine has 2 cores with AVX-512. Each core has two 512-bit FMA units: 2 x 16 lanes x 2 flops
(a multiply-add) = 64 flops per cycle, about 170-200 GFLOP/s per core at the clock it runs (the clock
drifts with load and temperature, so compare numbers within one run), 340-410 GFLOP/s for both.
""")
code("""
def median_seconds(run, number=50, repeat=9):
    run()
    return float(np.median(timeit.repeat(run, number=number, repeat=repeat))) / number

for threads, peak in ((1, (170, 200)), (2, (340, 410))):
    seconds = median_seconds(kernel.bind(*inputs, out, num_threads=threads))
    gflops = lowered.flops / seconds / 1e9
    print(f"{threads} thread(s): {seconds * 1e6:7.1f} us  {gflops:6.1f} GFLOP/s  "
          f"= {100 * gflops / peak[1]:.0f}-{100 * gflops / peak[0]:.0f}% of the peak of {threads} core(s)")
""")
md("""
Where the time goes: in the inner loop each `vfmadd231ps` also loads (the broadcast input), so the
loop issues 15 loads for 14 FMAs, which two load ports can just sustain; the accumulators are
zeroed and stored once per tile, and the padded input costs a pass over memory before the
convolution starts. With two threads, the 4 x 28 (channel block, row) pairs are shared out in two
halves; a kernel this small (a fraction of a millisecond) gains less than 2x from the second core,
and nothing when other work keeps that core busy.

## The simplifier

Lowering split loops and blocked layouts produces indices such as `(c_outer * 16 + c_inner) // 16`.
The code generator can load a whole vector only when an index is affine in the vectorized
variable; `relaybench/te/simplify.py` knows each loop variable's range from its loop and rewrites
such expressions to affine ones:
""")
code("""
from relaybench import te
from relaybench.te import loop_ir as L
from relaybench.te.simplify import simplify, simplify_func

co, ci = L.Var("co"), L.Var("ci")
ranges = {co: (0, 3), ci: (0, 15)}
print(simplify((co * 16 + ci) // 16, ranges), "|", simplify((co * 16 + ci) % 16, ranges))
""", check=True)
md("""
On a whole PrimFunc: a blocked view `B[c, l] = A[c * 16 + l]` read back as `B[i // 16, i % 16]`,
with `i` split by 16 and its inner loop vectorized. Lowered as written, the read's index is a
tangle of division and remainder; simplified, it is `i_outer * 16 + i_inner`, a contiguous
vector load.
""")
code("""
A = te.placeholder((64,), "float32", name="A")
B = te.compute((4, 16), lambda c, l: A[c * 16 + l], name="B")
C = te.compute((64,), lambda i: B[i // 16, i % 16] * 2.0, name="C")
s = te.create_schedule([C])
s[B].compute_inline()
outer, inner = s[C].split(C.op.axis[0], 16)
s[C].vectorize(inner)
roundtrip = te.lower(s, [A], name="roundtrip")
print(roundtrip)
print(simplify_func(roundtrip))
""", check=True)
md("""
**Loop partitioning.** A padded read carries a guard, `select(inside, A[clamped index], 0.0)`,
evaluated on every iteration. With `partition=True` (what lowering asks for the depthwise and
pooling rules) the simplifier cuts a loop where such a guard turns: the edges keep it, the
interior loses it and the clamps under it. A parallel loop, whose iterations are the threads',
branches on the row its guards read instead. This is how the depthwise convolution reads its
padding in place, with no padded copy of its input:
""")
code("""
x = L.Var("x")
A, P = L.Buffer("A", (8,), "float32"), L.Buffer("P", (10,), "float32")
inside = L.logical_and(x - 1 >= 0, x - 1 < 8)
read = L.Load(A, (L.min_expr(L.max_expr(x - 1, 0), 7),))
padded = L.PrimFunc("pad", [A, P], L.For(x, 0, 10, "serial",
                                          L.Store(P, (x,), L.select(inside, read, 0.0))))
print(padded)
print(simplify_func(padded, partition=True))
""", check=True)
md("""
## The injective rule

The other two groups of the block are layout transforms, `INJECTIVE`. The x86 strategy's
`injective` rule splits the innermost axis into 16 vector lanes when it divides (else vectorizes it
whole when it is short), fuses every other axis into one loop and runs it in parallel. Here is the
transform of the input into `NCHW16c`: 1568 = 2 x 28 x 28 iterations of 16 lanes each. The lanes
read channels 784 floats apart in `NCHW`, so this one is a gather; its writes are contiguous.
""")
code("""
transform = lower_primitive(fused_groups(optimized)[0].function)
print(transform.rule)
print(transform.prim_func)
""", check=True)
md("""
Compiled and checked against numpy's own reshaping:
""")
code("""
transform_kernel = build_kernel(transform.prim_func)
x = rng.standard_normal((1, 32, 28, 28)).astype("float32")
blocked = np.empty((1, 2, 28, 28, 16), "float32")
transform_kernel(x, blocked)
bool(np.array_equal(blocked, x.reshape(1, 2, 16, 28, 28).transpose(0, 1, 3, 4, 2)))
""", check=True)
md("""
## ResNet-18, every group compiled

`relaybench.build` does all of the above for every fused group of a model: it runs the pipeline,
lowers and compiles each distinct group once (ResNet's repeated blocks share kernels), plans the
memory, and returns a graph module. Its result agrees with the reference interpreter:
""")
code("""
resnet, resnet_params = rb.models.get("resnet18")
graph = rb.build(resnet, params=resnet_params, opt_level=3)
image = rng.standard_normal((1, 3, 224, 224)).astype("float32")
result = graph.run(data=image)
expected = rb.create_executor("interpreter", mod=bind_params(resnet, resnet_params)).evaluate()(image)
bool(np.allclose(result, expected, rtol=1e-4, atol=1e-5))
""", check=True)
code("""
print(graph.compile_stats)
print(graph.benchmark(number=5, repeat=5))
""")
md("""
The profile times every group separately. Each convolution's GFLOP/s can be read against the
machine's 340-410 GFLOP/s: this is where the kernels stand, and where the work remains.
""")
code("""
print(graph.profile(number=5))
""")
nb = nbf.v4.new_notebook(cells=cells)
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, str(pathlib.Path(__file__).resolve().parents[1] / "04_cpu_codegen.ipynb"))
