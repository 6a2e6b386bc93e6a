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
# 1. Relay's IR and its types

Relay is a functional, statically typed language for deep-learning programs. A program is a **module**
of global functions and algebraic data types; a function body is an expression built from variables,
constants, operator calls, tuples, `let`, `if`, closures, `match` and references. Every expression has a
**type**, and tensor types carry their **shapes**, so the compiler knows the shape of every
intermediate value before anything runs.

This notebook walks through that foundation, in the order a compiler sees a program:

1. build a small program with the Python builder,
2. print it in Relay's text format and parse the text back,
3. infer its types (shapes included, symbolic ones too),
4. see what a type error and a parse error look like,
5. write a recursive program over an algebraic data type, and run programs in the reference interpreter.
""")
code("""
import numpy as np
import relaybench as rb
from relaybench import op
""")
md("""
## Building a program

`rb.var` makes a variable with a type annotation; operators are called through `op.*` with Relay's
names and attributes. Here is a convolution followed by a bias add and a ReLU, the first layer of
many CNNs.
""")
code("""
data = rb.var("data", shape=(1, 3, 32, 32), dtype="float32")
weight = rb.var("weight", shape=(8, 3, 3, 3), dtype="float32")
bias = rb.var("bias", shape=(8,), dtype="float32")

conv = op.nn.conv2d(data, weight, padding=(1, 1), channels=8, kernel_size=(3, 3))
out = op.nn.relu(op.nn.bias_add(conv, bias))
mod = rb.IRModule.from_expr(rb.Function([data, weight, bias], out))
""")
md("""
## The text format

`print(mod)` shows the program in Relay's text format (version 0.0.5). Every operator call gets a
numbered binding `%0`, `%1`, ... in evaluation order: this is Relay's *graph form*, in which a value
used twice is written once. Attributes equal to their defaults are left out; `padding=(1, 1)` was
normalized to Relay's four values (top, left, bottom, right).
""")
code("print(mod)", check=True)
md("""
The text is a faithful representation: parsing it gives back a module that is *structurally equal*
to the one we built (same structure, same types, variables matched by where they are bound).
""")
code("""
text = mod.astext()
parsed = rb.parse(text)
rb.structural_equal(parsed, mod)
""", check=True)
md("""
## Type inference

`InferType` solves the program's types. Each operator contributes a *type relation* (a function from
its input types and attributes to its output type); the solver runs the relations until every type is
known. Afterwards each expression has a `checked_type`, and the printer shows it in `/* ty=... */`
comments.
""")
code("""
typed = rb.passes.InferType()(mod)
print(typed)
""", check=True)
code("""
typed["main"].body.checked_type
""", check=True)
md("""
### Symbolic shapes

A dimension need not be a number. Like Relax, relaybench lets a shape mention named dimensions
(`n`), and arithmetic on them is kept in a canonical form, so the concatenation of two `(n, 4)`
tensors has `2*n` rows. `?` stands for a dimension known only at run time.
""")
code("""
x = rb.var("x", shape=("n", 4))
y = rb.var("y", shape=("n", 4))
both = op.concatenate([x, y], axis=0)
sym = rb.passes.InferType()(rb.IRModule.from_expr(rb.Function([x, y], op.nn.relu(both))))
print(sym)
""", check=True)
md("""
A function over `n` is polymorphic in `n`: each call site finds its own `n`. Below, `@double_rows` is
called on 4 rows and on 5 rows.
""")
code("""
poly = rb.parse('''
#[version = "0.0.5"]
def @double_rows(%t: Tensor[(n, 4), float32]) {
  concatenate((%t, %t))
}

def @main(%a: Tensor[(4, 4), float32], %b: Tensor[(5, 4), float32]) {
  (@double_rows(%a), @double_rows(%b))
}
''')
rb.passes.InferType()(poly)["main"].body.checked_type
""", check=True)
md("""
## When types do not fit

A type error names the operator and the reason, and shows the program with the failing call marked.
Here the weight expects 4 input channels but the data has 3.
""")
code("""
bad_weight = rb.var("weight", shape=(8, 4, 3, 3), dtype="float32")
bad = rb.IRModule.from_expr(rb.Function([data, bad_weight], op.nn.conv2d(data, bad_weight, padding=(1, 1))))
try:
    rb.passes.InferType()(bad)
except rb.errors.TypeInferenceError as err:
    print(err)
""", check=True)
md("""
A parse error gives the line and column and shows where the parser stopped. This one is a missing
closing parenthesis after the parameter list.
""")
code("""
try:
    rb.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3), float32] {
  nn.relu(%x)
}''')
except rb.errors.ParseError as err:
    print(err)
    print("line", err.line, "column", err.column)
""", check=True)
md("""
## Algebraic data types and recursion

Relay is a full functional language: it has algebraic data types, pattern matching and recursion, so
models with control flow (RNNs over sequences, TreeLSTMs over trees) are ordinary programs. The
prelude defines `List`, `Option`, `Tree` and the usual functions over them. Here is the type of
`@map`, and a recursive function of our own that sums a list of tensors.
""")
code("""
prelude = rb.IRModule().import_prelude()
print(prelude.get_type("List"))
rb.passes.InferType()(prelude).get_global_var("map").checked_type
""", check=True)
code("""
program = rb.parse('''
#[version = "0.0.5"]
type List[A] {
  Cons(A, List[A]),
  Nil,
}

def @sum_all(%xs: List[Tensor[(2), float32]]) -> Tensor[(2), float32] {
  match (%xs) {
    Cons(%head, %rest) => add(%head, @sum_all(%rest)),
    Nil => zeros(shape=[2], dtype="float32"),
  }
}
''')
program = rb.passes.InferType()(program)
program.get_global_var("sum_all").checked_type
""", check=True)
md("""
## Running programs

The reference interpreter evaluates any Relay program on numpy arrays. It defines what every program
means, and the compiled backends are checked against it. Here are the convolution from the start of
this notebook and the recursive sum over a list built from Python.
""")
code("""
rng = np.random.default_rng(0)
inputs = {
    "data": rng.standard_normal((1, 3, 32, 32)).astype("float32"),
    "weight": rng.standard_normal((8, 3, 3, 3)).astype("float32"),
    "bias": rng.standard_normal(8).astype("float32"),
}
result = rb.create_executor("interpreter", mod=mod).evaluate()(**inputs)
result.shape, result.dtype, bool((result >= 0).all())
""", check=True)
code("""
from relaybench.backends.interpreter import ConstructorValue

Cons, Nil = program.get_constructor("Cons"), program.get_constructor("Nil")
xs = ConstructorValue(Nil, ())
for v in ([1.0, 2.0], [10.0, 20.0], [100.0, 200.0]):
    xs = ConstructorValue(Cons, (np.array(v, dtype="float32"), xs))
rb.create_executor("interpreter", mod=program).evaluate(program.get_global_var("sum_all"))(xs)
""", check=True)
md("""
## Programs of any size

Every traversal in relaybench (printing, parsing, type inference, structural hashing, the
interpreter) uses explicit stacks instead of recursion, so a program of 100,000 chained operators is
no harder than a small one. `bench/scale.py` times each step at 10,000 and 100,000 operators.
""")
code("""
from relaybench.testing import chain

big = rb.IRModule.from_expr(chain(100_000))
big_typed = rb.passes.InferType()(big)
big_text = big_typed.astext()
rb.ir.count_ops(big), rb.ir.count_ops(rb.parse(big_text)), big_typed["main"].body.checked_type
""", check=True)
md("""
Next: the operator library and the model zoo (`02_models_and_interpreter.ipynb`).
""")
nb = nbf.v4.new_notebook(cells=cells)
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, str(pathlib.Path(__file__).resolve().parents[1] / "01_ir_and_types.ipynb"))
