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
# 13. Ahead-of-time compilation of whole programs

The Relay paper's NLP results came from its ahead-of-time compiler: the whole program, recursion
over lists and trees included, became native code, so nothing ran between two kernels but a few
machine instructions. A bytecode loop in Python pays microseconds per instruction, more than a
small LSTM cell's kernels take. `rb.build(mod, executor="aot")` does what Relay's AoT did: the VM's
prepared program (fused, A-normal form, closures lifted, allocations explicit) becomes one LLVM
module, with the kernels called directly, ADT values as tagged objects, `match` as tag tests, self
tail calls as loops, and one call from Python into native code per run.
""")
code("""
import numpy as np
import relaybench as rb
from relaybench.adt import from_python, to_python
""")
md("""
## TreeLSTM, from Relay to native code

The Child-Sum TreeLSTM recurses over a prelude `Tree`: `@map` runs the cell on the children,
`@foldl` sums their states. Small sizes here, so the notebook runs in seconds.
""")
code("""
mod, params = rb.models.get("tree_lstm", input_size=4, hidden_size=6)
print(mod["tree_lstm"].astext(show_types=False)[:600])
""")
code("""
lib = rb.build(mod, target="llvm", params=params, executor="aot")
lib
""")
md("""
Each Relay function is one LLVM function; a kernel call is a call through the address of the
already compiled kernel. The program's own code, as generated:
""")
code("""
text = lib.source("llvm")
start = text.index('define internal i64 @"rb_fn')
print(text[start:start + 1500])
""")
md("""
Trees are given as `(value, [children])` and converted at the boundary; the result is checked
against the reference interpreter.
""")
code("""
rng = np.random.default_rng(0)
def x():
    return rng.standard_normal((1, 4)).astype("float32")
tree = (x(), [(x(), [(x(), []), (x(), [])]), (x(), [])])
h, c = lib.run(tree)
from relaybench.passes.bind_params import bind_params
reference = rb.create_executor("interpreter", mod=bind_params(mod, params)).evaluate()
want_h, want_c = reference(from_python(tree, "Tree"))
print(h.shape, np.allclose(h, want_h, rtol=1e-4, atol=1e-5),
      np.allclose(c, want_c, rtol=1e-4, atol=1e-5))
""", check=True)
md("""
## Against the peers

`relaybench.experiments.nlp` times the models on relaybench AoT, the VM, the interpreter, PyTorch
eager and ONNX Runtime (which needs the tree unrolled at export, so a new tree is a new export).
Tiny sizes and few repetitions here: the timings of a notebook are only a demonstration; the
table in `bench/RESULTS.md` was measured with `bench/nlp.py` at the paper's sizes.
""")
code("""
from relaybench.experiments.nlp import nlp
small = {"lstm": dict(seq_len=5, input_size=16, hidden_size=16),
         "tree_lstm": dict(input_size=8, hidden_size=8)}
result = nlp(models=["lstm", "tree_lstm"], engines=["aot", "vm", "torch", "onnxruntime"],
             repeat=3, number=3, sizes=small)
result
""")
md("""
`relaybench reproduce nlp --out results/` runs the full table (RNN, GRU, LSTM over 35 steps,
CharRNN over 20, TreeLSTM over 31 nodes and over random trees) and writes it beside the paper's
speedups.
""")
nb = nbf.v4.new_notebook(cells=cells)
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, str(pathlib.Path(__file__).resolve().parents[1] / "13_aot.ipynb"))
