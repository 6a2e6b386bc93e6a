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
# 14. Importing ONNX models

Models reach a compiler from the frameworks they were trained in, and ONNX is the format they are
exchanged in: a graph of operator nodes (`Conv`, `Gemm`, `Reshape` ...) over named tensors, each
node tied to an *opset*, the version of the operator set whose semantics it follows.
`rb.frontends.from_onnx` turns such a graph into a Relay module, as Relay's
`relay.frontend.from_onnx` does: one converter per ONNX op and opset range writes each node
with Relay's operators, and what comes out is an ordinary `IRModule` that every pass, executor
and target of relaybench takes.

The model here is real and pretrained: RNet, the second network of the MTCNN face detector, with
the weights that facenet-pytorch ships, exported by PyTorch's ONNX exporter with a symbolic batch
dimension. It is checked in beside the importer's tests (400 KB).
""")
code("""
import collections
import time

import numpy as np
import onnx
import onnxruntime as ort

import relaybench as rb

path = "../tests/frontends/data/mtcnn_rnet.onnx"
model = onnx.load(path)
print("opset:", model.opset_import[0].version)
for value in model.graph.input:
    dims = [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
    print("input", value.name, dims)
print("outputs:", [value.name for value in model.graph.output])
print(collections.Counter(node.op_type for node in model.graph.node))
""", check=True)
md("""
## Import

The batch dimension is named (`batch`) in the file, and stays symbolic in the Relay program:
its type says `Tensor[(batch, 3, 24, 24), float32]`. With `freeze_params=False` the weights
become parameters of `@main` and come back in `params`, so the printed program is short. Note
what the exporter wrote and what became of it:

* PyTorch flattens before the dense layers with `Shape -> Gather -> Unsqueeze -> Concat ->
  Reshape`; the importer computes that chain on the dims it knows (`batch` and the integers)
  and writes one `reshape(newshape=[0, -1])`, Relay's "keep the first dim, infer the rest";
* `PRelu` becomes `where(x < 0, x * slope, x)`, `Gemm` with `transB=1` becomes `nn.dense`.
""")
code("""
mod, params = rb.frontends.from_onnx(model, freeze_params=False)
mod = rb.passes.InferType()(mod)
print(mod["main"].checked_type)
print(mod.astext(show_types=False))
""", check=True)
code("""
print({name: value.shape for name, value in list(params.items())[:4]}, "...")
print(len(params), "weights,", sum(v.size for v in params.values()), "numbers")
""", check=True)
md("""
## Look at it

The program is a dataflow graph like any other: `rb.viz.to_dot` draws it, with each edge
labelled by the type of the value it carries, and the op histogram counts its operators.
""")
code("""
rb.viz.to_dot(mod)
""")
code("""
from relaybench.ir.analysis import op_histogram
for name, count in sorted(op_histogram(mod).items()):
    print(f"{name:16s} {count}")
""", check=True)
md("""
## Optimize and compile

To compile, the batch is fixed (`shape=`) and the weights bound as constants (the default,
`freeze_params=True`). Relay's default pipeline at opt_level 3 then folds the constants, fuses
each convolution with its bias and PReLU into one kernel, and the build compiles every fused
group for the CPU with LLVM.
""")
code("""
batch = 4
fixed, fixed_params = rb.frontends.from_onnx(model, shape={"image": (batch, 3, 24, 24)})
with rb.PassContext(opt_level=3):
    optimized = rb.passes.default_pipeline(3)(fixed)
fused = [f for f in rb.ir.functor.post_order(optimized["main"].body)
         if isinstance(f, rb.Function) and f.attrs.get("Primitive")]
print(len(fused), "fused groups")
for f in fused[:3]:
    print(" ", sorted(op_histogram(f)))
""", check=True)
code("""
start = time.perf_counter()
lib = rb.build(fixed, target="llvm", params=fixed_params, opt_level=3)
print(f"built in {time.perf_counter() - start:.1f} s")
""")
md("""
## Compare with ONNX Runtime

Same file, same inputs: ONNX Runtime is the reference implementation most users compare against.
The two outputs are the box regression and the face probability of each 24x24 crop.
""")
code("""
images = np.random.default_rng(0).uniform(-1, 1, (batch, 3, 24, 24)).astype("float32")
session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
expected = session.run(None, {"image": images})
got = lib.run(image=images)
for name, a, b in zip(["box", "face_probability"], got, expected):
    print(f"{name:17s} {a.shape}  agrees: {np.allclose(a, b, rtol=1e-4, atol=1e-5)}")
""", check=True)
code("""
ours = lib.benchmark(number=50, repeat=5, image=images)
start = time.perf_counter()
for _ in range(250):
    session.run(None, {"image": images})
theirs = (time.perf_counter() - start) / 250 * 1e3
print(f"relaybench {ours.median_ms:.3f} ms, ONNX Runtime {theirs:.3f} ms per batch of {batch}")
""")
md("""
## When an op is missing

The importer checks the whole graph, subgraphs included, before converting anything, and names
every op type it has no converter for, with its opset and the nodes that use it, in one error.
""")
code("""
from onnx import helper, TensorProto
nodes = [helper.make_node("Relu", ["x"], ["a"]),
         helper.make_node("GridSample", ["a", "grid"], ["b"], name="warp"),
         helper.make_node("Det", ["b"], ["y"], name="det")]
graph = helper.make_graph(
    nodes, "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4]),
     helper.make_tensor_value_info("grid", TensorProto.FLOAT, [1, 4, 4, 2])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
try:
    rb.frontends.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
except rb.frontends.onnx.UnsupportedOps as err:
    print(err)
""", check=True)
md("""
## Control flow: Scan as a recursive function

ONNX's `Loop` and `Scan` carry a body graph. By default the importer unrolls them when the
number of steps is known at import (so the graph executor can compile the result); with
`loops="recursive"` each becomes a local recursive Relay function over the step index, as Relay
writes loops, run by the interpreter and the VM. Here a Scan keeps a running sum of the rows of
its input and emits it at every step:
""")
code("""
from onnx import TensorProto, helper

body = helper.make_graph(
    [helper.make_node("Add", ["s_in", "row"], ["s_out"]),
     helper.make_node("Identity", ["s_out"], ["y"])], "body",
    [helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [3]),
     helper.make_tensor_value_info("row", TensorProto.FLOAT, [3])],
    [helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [3]),
     helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
scan = helper.make_node("Scan", ["init", "xs"], ["total", "sums"], body=body, num_scan_inputs=1)
graph = helper.make_graph(
    [scan], "running_sum",
    [helper.make_tensor_value_info("init", TensorProto.FLOAT, [3]),
     helper.make_tensor_value_info("xs", TensorProto.FLOAT, [5, 3])],
    [helper.make_tensor_value_info("total", TensorProto.FLOAT, [3]),
     helper.make_tensor_value_info("sums", TensorProto.FLOAT, [5, 3])])
scan_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
looped, _ = rb.frontends.from_onnx(scan_model, loops="recursive")
print(looped["main"].astext()[:700])
""")
code("""
init = np.zeros(3, "float32")
xs = np.arange(15, dtype="float32").reshape(5, 3)
want = ort.InferenceSession(scan_model.SerializeToString()).run(None, {"init": init, "xs": xs})
vm = rb.vm.VirtualMachine(rb.vm.compile(looped))
got = vm.run(init, xs)
[bool(np.allclose(g, w)) for g, w in zip(got, want)]
""", check=True)
md("""
## How much of ONNX

`bench/onnx_conformance.py` runs the node tests that ship with the `onnx` package (one small
model per op and attribute combination, with inputs and expected outputs) through relaybench and
ONNX Runtime and counts the passes by category; `bench/RESULTS.md` has the table. The command
line does the import too: `relaybench import model.onnx --out model.rly` writes the Relay text
and the weights (`model.npz`), `relaybench show model.onnx` prints the imported program.
""")
nb = nbf.v4.new_notebook(cells=cells)
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, str(pathlib.Path(__file__).resolve().parents[1] / "14_onnx.ipynb"))
