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
# 2. The operator library, the model zoo and the reference interpreter

The Relay paper evaluates its compiler on vision networks (ResNet, MobileNet V2, VGG-16, the Nature
DQN) and on NLP models whose structure is control flow (RNN, GRU and LSTM loops, a character-level
generator, a TreeLSTM over trees). This notebook builds them all, looks at what they are made of,
and runs them in the **reference interpreter**, the executor that defines what every Relay program
means and against which every pass and backend is checked.
""")
code("""
import time
import numpy as np
import relaybench as rb
from relaybench import op, models
""")
md("""
## Operators

Each operator is defined once, by an `OpDef` that holds its attributes (Relay's names and defaults),
its type relation, its fusion pattern kind and its numpy reference. The pattern kind is what operator
fusion reasons with: element-wise and broadcast operators fuse into the output of a convolution
(`OUT_ELEMWISE_FUSABLE`), injective ones into one another, and opaque ones stand alone.
""")
code("""
from collections import Counter
print(len(op.list_ops()), "operators")
Counter(op.get_opdef(name).pattern.name for name in op.list_ops())
""", check=True)
code("""
op.table(["nn.conv2d", "nn.max_pool2d", "nn.batch_norm", "nn.dense", "add", "reshape", "sum", "image.resize2d"])
""")
md("""
An operator's docstring and signature come from its definition:
""")
code("""
print(op.nn.conv2d.__doc__.splitlines()[0])
""", check=True)
md("""
## The zoo

Every workload is a function `models.NAME(batch_size=1, ...)` that returns `(mod, params)`: a module
whose `@main` takes the input and then every weight, and the seeded random weights as numpy arrays.
The table shows the size of each model, the number of operator calls in its own functions (the NLP
models also use the prelude's `@map` and `@foldl`), and its input and output types.
""")
code("""
zoo = models.summary()
print(zoo)
""", check=True)
md("""
The vision models are straight-line dataflow: one function, many operators. Here is ResNet-18's
operator histogram and the first lines of its text, the stem: a 7×7 convolution, batch norm, ReLU and
max pooling.
""")
code("""
resnet, resnet_params = models.resnet18()
rb.ir.op_histogram(resnet)
""", check=True)
code("""
text = resnet.astext()
print("\\n".join(line[:150] for line in text.splitlines()[2:10]))
""", check=True)
md("""
The NLP models are programs with control flow. The LSTM in its *loop* form walks a `List` of inputs
with a recursive function; the TreeLSTM recurses over a `Tree` and maps itself over each node's
children.
""")
code("""
tree_lstm, tree_params = models.tree_lstm()
print(tree_lstm.astext(show_meta_data=False).split("def @tree_lstm")[1][:1500])
""")
md("""
## Running the vision models

The interpreter evaluates each operator with its numpy reference. It is not meant to be fast (that
is the compiler's job, in the next notebooks) but it handles full-size networks.
""")
code("""
rng = np.random.default_rng(0)
results = []
for name in ["resnet18", "mobilenet_v2", "vgg16", "dqn"]:
    mod, params = models.get(name)
    shape = [int(d) for d in mod["main"].params[0].type_annotation.shape]
    data = rng.standard_normal(shape).astype("float32")
    run = rb.create_executor("interpreter", mod=mod).evaluate()
    start = time.perf_counter()
    out = run(data, **params)
    seconds = time.perf_counter() - start
    results.append((name, out.shape, round(seconds, 2)))
    print(f"{name:13s} input {tuple(shape)} -> output {out.shape}, {seconds:.2f} s")
""")
code("""
[(name, shape) for name, shape, _ in results]
""", check=True)
md("""
A classifier's output is a probability distribution (the networks end with a softmax):
""")
code("""
probs = rb.create_executor("interpreter", mod=resnet).evaluate()(
    rng.standard_normal((1, 3, 224, 224)).astype("float32"), **resnet_params)
bool(np.isclose(probs.sum(), 1.0, atol=1e-4)), probs.shape
""", check=True)
md("""
## Running the NLP models

The two forms of the LSTM, unrolled over a fixed sequence and as a loop over a list, compute the same
final state. The loop form takes the sequence as a Relay `List`, built from Python with
`models.nlp.make_list`.
""")
code("""
from relaybench.models.nlp import make_list, make_tree

unrolled, p = models.lstm(seq_len=6)
loop, p_loop = models.lstm(seq_len=6, form="loop")
seq = rng.standard_normal((6, 1, 64)).astype("float32")

h1, c1 = rb.create_executor("interpreter", mod=unrolled).evaluate()(seq, **p)
h2, c2 = rb.create_executor("interpreter", mod=loop).evaluate()(make_list(list(seq), loop), **p_loop)
bool(np.allclose(h1, h2, rtol=1e-5, atol=1e-6)), bool(np.allclose(c1, c2, rtol=1e-5, atol=1e-6))
""", check=True)
md("""
The loop form takes sequences of any length, which the unrolled form cannot:
""")
code("""
run_loop = rb.create_executor("interpreter", mod=loop).evaluate()
[run_loop(make_list(list(rng.standard_normal((n, 1, 64)).astype("float32")), loop), **p_loop)[0].shape
 for n in (1, 5, 12)]
""", check=True)
md("""
The TreeLSTM runs on a tree built from Python; each node holds a `(1, 64)` embedding.
""")
code("""
leaf = lambda: make_tree(rng.standard_normal((1, 64)).astype("float32"), mod=tree_lstm)
tree = make_tree(rng.standard_normal((1, 64)).astype("float32"),
                 [leaf(), make_tree(rng.standard_normal((1, 64)).astype("float32"), [leaf(), leaf()], mod=tree_lstm)],
                 mod=tree_lstm)
h, c = rb.create_executor("interpreter", mod=tree_lstm).evaluate()(tree, **tree_params)
h.shape, c.shape
""", check=True)
md("""
The character-level RNN generates a sequence with a loop written in Relay: at each step it picks the
most likely next character with `argmax` and feeds it back, stopping at the end-of-sequence
character or at `max_length`. With random weights the "names" are gibberish, but the control flow is
the real thing.
""")
code("""
from relaybench.models.nlp import CHAR_RNN_LETTERS, from_list

char_rnn, char_params = models.char_rnn(max_length=12)
category = np.zeros((1, 18), "float32"); category[0, 3] = 1
generated = rb.create_executor("interpreter", mod=char_rnn).evaluate()(
    category, np.int32(CHAR_RNN_LETTERS.index("A")), **char_params)
indices = [int(i) for i in from_list(generated)]
"A" + "".join(CHAR_RNN_LETTERS[i] for i in indices)
""")
md("""
Next: the passes that optimize these programs (`03_passes.ipynb`).
""")
nb = nbf.v4.new_notebook(cells=cells)
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, str(pathlib.Path(__file__).resolve().parents[1] / "02_models_and_interpreter.ipynb"))
