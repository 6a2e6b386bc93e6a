"""Time each step of the foundation on long programs: build, print, parse, type-check, hash,
and the default optimization pipeline at opt_level 3.

    python bench/scale.py [--sizes 10000,100000]

Prints one row per size and step, and the ratio of the largest to the smallest size so linearity can
be read at a glance (a linear step grows by the same factor as the program).
"""

from __future__ import annotations

import argparse
import sys
import time

import relaybench as rb
from relaybench import op
from relaybench.ir import structural_hash


def chain(n: int):
    x = rb.var("x", shape=(4,), dtype="float32")
    y = x
    one, two = rb.const(1.0), rb.const(2.0)
    for i in range(n):
        y = op.add(y, one) if i % 2 == 0 else op.multiply(y, two)
    return rb.IRModule.from_expr(rb.Function([x], y))


def measure(n: int) -> dict:
    times = {}
    t = time.perf_counter()
    mod = chain(n)
    times["build"] = time.perf_counter() - t
    t = time.perf_counter()
    typed = rb.passes.InferType()(mod)
    times["type-check"] = time.perf_counter() - t
    t = time.perf_counter()
    text = typed.astext()
    times["print"] = time.perf_counter() - t
    t = time.perf_counter()
    parsed = rb.parse(text)
    times["parse"] = time.perf_counter() - t
    t = time.perf_counter()
    h1 = structural_hash(parsed)
    times["structural-hash"] = time.perf_counter() - t
    t = time.perf_counter()
    same = rb.structural_equal(parsed, typed)  # the text carries the types inference wrote
    times["structural-equal"] = time.perf_counter() - t
    assert same and h1 == structural_hash(typed), "round trip lost structure"
    t = time.perf_counter()
    with rb.passes.PassContext(opt_level=3):
        rb.passes.default_pipeline(3)(mod)
    times["default pipeline"] = time.perf_counter() - t
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    sys.setrecursionlimit(1000)  # the default: nothing may lean on deep recursion
    results = {n: measure(n) for n in sizes}
    steps = list(next(iter(results.values())))
    head = f"{'step':<18}" + "".join(f"{n:>12,} ops" for n in sizes)
    if len(sizes) > 1:
        head += f"{'ratio':>10}"
    print(head)
    for step in steps:
        row = f"{step:<18}" + "".join(f"{results[n][step]:>14.3f}s" for n in sizes)
        if len(sizes) > 1:
            row += f"{results[sizes[-1]][step] / max(results[sizes[0]][step], 1e-9):>10.1f}"
        print(row)
    if len(sizes) > 1:
        print(f"(size ratio {sizes[-1] / sizes[0]:.0f}; a linear step shows about the same ratio)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
