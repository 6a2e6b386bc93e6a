"""The paper's NLP models against the peers: relaybench AoT, the relaybench VM, the reference
interpreter, PyTorch eager and ONNX Runtime (TorchScript on request, see
:mod:`relaybench.experiments.nlp`, which holds the engines, the checks and the timing).

    python bench/nlp.py [--models rnn,gru,lstm,char_rnn,tree_lstm,tree_lstm_random]
                        [--threads 2] [--repeat 7] [--number 20] [--engines ...] [--out bench/out]
                        [--isolate | --no-isolate] [--children 3]

RNN, GRU and LSTM (input and hidden 256, 35 steps, a loop over a List), CharRNN (20 steps) and
TreeLSTM (31 nodes; and random 31-node trees, one compiled program for all of them, while ONNX
Runtime needs a new export per tree) at batch 1. Outputs are compared with the interpreter's
before timing; rounds interleave the engines; the median is reported. Prints the load average
at the start and the end and writes the table to OUT/nlp-<time>.md and .json.

With more than one thread each engine is timed in processes of its own (``--isolate``, the
default then): ONNX Runtime's workers and relaybench's pool spin between runs, and in one process
each engine would be slowed by the other's threads. ``--children`` launches per engine and model
share the rounds, the engines alternating. ``--no-isolate`` times them all in this process, as
with one thread. The table's first line says which mode was used.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv=None) -> int:
    from relaybench.experiments.nlp import DEFAULT_ENGINES, MODELS, nlp
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--engines", default=",".join(DEFAULT_ENGINES))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=20)
    parser.add_argument("--out", type=Path, default=HERE / "out")
    parser.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                        help="time each engine in processes of its own (default: on when "
                             "--threads > 1)")
    parser.add_argument("--children", type=int, default=3,
                        help="isolated processes per engine and model (default 3)")
    args = parser.parse_args(argv)
    print(f"load average at start: {os.getloadavg()}", file=sys.stderr)
    result = nlp(models=args.models.split(","), threads=args.threads, repeat=args.repeat,
                 number=args.number, engines=args.engines.split(","), isolate=args.isolate,
                 children=args.children)
    print(f"load average at end: {os.getloadavg()}", file=sys.stderr)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = args.out / f"nlp-{stamp}"
    written = result.write(out)
    print(result.to_markdown())
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
