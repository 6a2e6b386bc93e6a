"""ToBasicBlockNormalForm: graph form inside each basic block, lets where a value crosses one.

Relay's basic-block normal form is the form its backends expect before code generation: inside
a basic block (a function body, an ``if`` branch, a ``match`` clause) expressions stay a
dataflow graph, with sharing, but no shared node may be used from two different blocks. A node
used from more than one block is let-bound in the innermost block holding all of its uses, so
it is computed once, before the control flow that needs it, and the blocks refer to it by name.
Existing lets stay lets.

The scope analysis and the let-filling engine are the ones of
:mod:`~relaybench.passes.to_a_normal_form`, asked to bind only the nodes that cross a scope
boundary. Iterative throughout.

>>> import relaybench as rb
>>> mod = rb.parse('''#[version = "0.0.5"]
... def @main(%x: Tensor[(2), float32], %c: bool) {
...   %0 = add(%x, %x);
...   %1 = multiply(%x, %x);
...   if (%c) { subtract(%0, %1) } else { %0 }
... }''')
>>> print(rb.passes.ToBasicBlockNormalForm()(mod)["main"].astext(show_types=False))
fn (%x: Tensor[(2), float32], %c: bool) -> Tensor[(2), float32] {
  let %x1: Tensor[(2), float32] = add(%x, %x);
  if (%c) {
    %0 = multiply(%x, %x);
    subtract(%x1, %0)
  } else {
    %x1
  }
}
"""

from __future__ import annotations

from .infra import function_pass
from .to_a_normal_form import convert_function

__all__ = ["ToBasicBlockNormalForm"]


@function_pass(opt_level=1)
def ToBasicBlockNormalForm(func, mod, ctx):
    """Let-bind every node used across basic blocks; keep graph form inside each block.

    A node used from two scopes (say, both branches of an ``if``, or a closure and its
    surroundings) is bound once in the innermost scope holding all of its uses. Nodes used in
    one block only stay shared graph nodes there. The result is unchanged for a program without
    control flow.
    """
    return convert_function(func, bind_all=False)
