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
# 5. The pass explorer

`rb.viz.PassExplorer` puts Relay's optimization pipeline under your hands: a check box per pass
(in the pipeline's order, which you can change), the `opt_level`, a stepper over the passes that
changed the program showing the text diff, the dataflow graph and the operator counts, and a
**Time it** button that compiles the configuration you chose for a target and keeps a table of
every configuration tried, with its latency and its speedup over the first.

The widget holds no compiler logic: it calls the same public functions as the other notebooks
(`PassContext`, the `Snapshots` instrument, `rb.build`, `rb.viz.diff`, `rb.viz.to_dot`). After a
first run, toggling a check box runs the pipeline again.
""")
code("""
import numpy as np
import relaybench as rb
from relaybench import op
""")
md("""
## A small network

A convolution block with a residual connection: conv2d, bias, ReLU, and the input added back.
Its weights are bound as constants, so the passes can fold and transform them.
""")
code("""
rng = np.random.default_rng(0)
data = rb.var("data", shape=(1, 16, 14, 14))
weight = rb.var("weight", shape=(16, 16, 3, 3))
bias = rb.var("bias", shape=(16,))
y = op.nn.relu(op.nn.bias_add(op.nn.conv2d(data, weight, padding=(1, 1), channels=16,
                                           kernel_size=(3, 3)), bias))
mod = rb.IRModule.from_expr(rb.Function([data, weight, bias], op.add(y, data)))
params = {"weight": (0.1 * rng.standard_normal((16, 16, 3, 3))).astype("float32"),
          "bias": rng.standard_normal(16).astype("float32")}
print(mod)
""", check=True)
md("""
## The explorer

Run the cell below: the check boxes are the default pipeline at `opt_level=3`. The stepper starts
on the last pass that changed the program; step back to see each one's diff and graph.
""")
code("""
explorer = rb.viz.PassExplorer(mod, params)
explorer.run()
explorer
""")
md("""
The same state, read from Python: the passes in order, which of them changed the program, and the
final program, whose fused groups are `Primitive=1` functions.
""")
code("""
print(explorer.pass_names)
print([step.name for step in explorer.steps])
"Primitive=1" in explorer.final_text
""", check=True)
md("""
## Toggling a pass

Unchecking `FuseOps` (with the check box, or from Python) runs the pipeline again: the final
program has no fused functions left, and the graph loses its clusters.
""")
code("""
with_fusion = explorer.final_text
explorer.set_enabled("FuseOps", False)
"Primitive=1" in explorer.final_text, explorer.final_text != with_fusion
""", check=True)
md("""
## Timing configurations

`time(target)` compiles the program the explorer shows (for `llvm`) or runs it in the reference
interpreter, on seeded random inputs, checks the result against the interpreter on the original
program, and adds a row to the results table. Here: without fusion, then with it again.
""")
code("""
explorer.time("llvm")
explorer.set_enabled("FuseOps", True)
explorer.time("llvm")
explorer.time("interpreter")
[(row["target"], row["disabled"], row["matches"]) for row in explorer.results]
""", check=True)
code("""
explorer.results_table()
""")
nb = nbf.v4.new_notebook(cells=cells)
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, str(pathlib.Path(__file__).resolve().parents[1] / "05_pass_explorer.ipynb"))
